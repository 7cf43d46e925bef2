"""Caps on the long-polls an API process holds at once, in total and per API key.

A long-poll costs no Redis connection (every wait shares the client's one event reader), but
each holds an HTTP connection, a task and a future for up to ``WAIT_MAX_S``: without a cap one
read key could hold every connection uvicorn accepts (``LIMIT_CONCURRENCY``). Past a cap the
request gets a 429 ``too_many_waits`` at once, with Retry-After.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from dtq_ingest_api.metrics import ApiMetrics
from dtq_ingest_api.problems import ApiError

RETRY_AFTER_S = 1
"""Retry-After of a refused wait: a held long-poll ends within its ``wait`` seconds."""


class WaitLimiter:
    """Counts the long-polls held now, per actor (the key's name) and in total."""

    def __init__(self, total: int, per_key: int, metrics: ApiMetrics) -> None:
        self.total = total
        self.per_key = per_key
        self.metrics = metrics
        self.held: dict[str, int] = {}
        self.count = 0

    @contextmanager
    def hold(self, actor: str) -> Iterator[None]:
        """Hold one wait for ``actor`` while the block runs.

        Raises:
            ApiError: ``too_many_waits`` (429) when the actor's or the process's cap is reached.
        """
        mine = self.held.get(actor, 0)
        if mine >= self.per_key:
            self._refuse(
                "key",
                f"the key {actor!r} already holds {mine} waits on this server "
                f"(DTQ_API_WAITS_PER_KEY={self.per_key}); retry when one ends, or wait less",
            )
        if self.count >= self.total:
            self._refuse(
                "total",
                f"this server already holds {self.count} waits (DTQ_API_WAITS_MAX={self.total}); "
                "retry when one ends",
            )
        self.held[actor] = mine + 1
        self.count += 1
        self.metrics.waits.set(self.count)
        try:
            yield
        finally:
            self.count -= 1
            left = self.held[actor] - 1
            if left:
                self.held[actor] = left
            else:
                del self.held[actor]
            self.metrics.waits.set(self.count)

    def _refuse(self, cap: str, detail: str) -> None:
        self.metrics.waits_refused.labels(cap=cap).inc()
        raise ApiError("too_many_waits", detail, headers={"Retry-After": str(RETRY_AFTER_S)})
