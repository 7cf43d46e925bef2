"""Fault tests record their figures through the ``faults`` fixture (see
``dtq_devtools.testing.figures``): one JSON line per test in ``.artifacts/faults.jsonl``."""

from __future__ import annotations

import time
from typing import Any

import pytest

from dtq_devtools.testing.figures import append, figures_path
from dtq_devtools.testing.history import Check


class FaultFigures:
    """Appends the figures of one test; the test's duration so far is added to each line."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self.path = figures_path(request.config.rootpath)
        self.test = request.node.nodeid
        self.started = time.monotonic()

    def record(self, fault: str, check: Check | None = None, **figures: Any) -> None:
        append(
            self.path,
            {
                "test": self.test,
                "fault": fault,
                **(check.figures() if check is not None else {}),
                "seconds": round(time.monotonic() - self.started, 2),
                **figures,
            },
        )


@pytest.fixture
def faults(request: pytest.FixtureRequest) -> FaultFigures:
    return FaultFigures(request)
