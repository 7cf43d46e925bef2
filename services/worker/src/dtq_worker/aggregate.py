"""The metrics of a worker's processes as one worker's (pure; no sockets): what the supervisor
serves on DTQ_WORKER_METRICS_PORT.

Why add up expositions rather than use ``prometheus_client``'s multiprocess mode: the worker's
hot path keeps what makes it cheap (counters added per finish batch, gauges read at scrape
time with ``set_function``, the two per-task histograms as
:class:`dtq_core.infra.metrics.FastHistogram` bucket arrays). Multiprocess mode supports none
of those (it sees only the stock metric classes, writing each change to a memory-mapped file,
and has no ``set_function``); here each process keeps its registry as a lone worker does, and
the supervisor reads them only when scraped.

How series combine:

- counters and histograms: summed over the processes. A process that ended keeps counting in
  the sum with what the last scrape read of it, so the worker's counters never go down
  (``rate()`` would take a drop for a reset and count the survivors' whole totals again); what
  the ended process counted after that scrape is lost, as it would be for a lone worker.
- gauges: summed (handlers in flight, concurrency), except those that are a worst case or a
  constant (:data:`MAX_GAUGES`: the oldest heartbeat, the build), which take the maximum; a
  process that does not answer a scrape is left out of them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

MAX_GAUGES = frozenset({"dtq_worker_heartbeat_age_seconds", "dtq_build_info"})
"""Gauges whose worker value is the largest of its processes'."""
CUMULATIVE = frozenset({"counter", "histogram", "summary"})

SampleKey = tuple[str, tuple[tuple[str, str], ...]]
"""A sample's name and its labels, sorted."""


@dataclass(slots=True)
class Family:
    """One metric family as read from an exposition."""

    type: str
    documentation: str
    samples: dict[SampleKey, float] = field(default_factory=dict)


Parsed = dict[str, Family]


def parse(text: str) -> Parsed:
    """An exposition's families by name (``_created`` samples left out: none of dtq's
    registries exports them, and a sum of timestamps means nothing)."""
    out: Parsed = {}
    for fam in text_string_to_metric_families(text):
        family = out.setdefault(fam.name, Family(fam.type, fam.documentation))
        for s in fam.samples:
            if s.name.endswith("_created"):
                continue
            family.samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def cumulative(parsed: Parsed) -> Parsed:
    """Only the counters and histograms of ``parsed``."""
    return {name: f for name, f in parsed.items() if f.type in CUMULATIVE}


def combine(into: Parsed, parsed: Parsed) -> None:
    """Add ``parsed`` to ``into`` by the rules of this module."""
    for name, family in parsed.items():
        target = into.get(name)
        if target is None:
            target = into[name] = Family(family.type, family.documentation)
        largest = family.type == "gauge" and name in MAX_GAUGES
        for key, value in family.samples.items():
            if key in target.samples:
                old = target.samples[key]
                target.samples[key] = max(old, value) if largest else old + value
            else:
                target.samples[key] = value


def metrics(parsed: Parsed, skip: Iterable[str] = ()) -> list[Metric]:
    """``parsed`` as families ``prometheus_client`` exposes (a collector's ``collect()``)."""
    skipped = set(skip)
    out = []
    for name, family in parsed.items():
        if name in skipped:
            continue
        metric = Metric(name, family.documentation, family.type)
        for (sample, labels), value in family.samples.items():
            metric.add_sample(sample, dict(labels), value)
        out.append(metric)
    return out


class Aggregate:
    """The processes' metrics as one worker's, over successive scrapes (thread-safe: scrapes
    come from the metrics listener's threads, ends of processes from the supervisor's loop)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[int, Parsed] = {}
        self._retired: Parsed = {}

    def merge(self, answers: Mapping[int, str | None]) -> Parsed:
        """The worker's families from each live process's exposition by slot (``None``: it did
        not answer; its counters as last read stand in)."""
        with self._lock:
            total: Parsed = {}
            combine(total, self._retired)
            for slot, text in answers.items():
                if text is not None:
                    self._last[slot] = parse(text)
                    combine(total, self._last[slot])
                elif slot in self._last:
                    combine(total, cumulative(self._last[slot]))
            return total

    def retire(self, slot: int) -> None:
        """The process of ``slot`` ended: what it counted (as last read) stays in the sums."""
        with self._lock:
            last = self._last.pop(slot, None)
            if last is not None:
                combine(self._retired, cumulative(last))
