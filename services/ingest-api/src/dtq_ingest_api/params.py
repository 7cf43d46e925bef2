"""Path parameters more than one route module takes: a queue name and a task id."""

from __future__ import annotations

from typing import Annotated

from litestar.params import PathParameter

from dtq_ingest_api.schemas import NAME_RE

QueueName = Annotated[
    str, PathParameter(min_length=1, max_length=64, pattern=NAME_RE, description="A queue name.")
]
TaskId = Annotated[str, PathParameter(description="The task id the submit returned.")]
