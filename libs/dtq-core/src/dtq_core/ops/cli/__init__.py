"""The operator CLI ``dtq``: status, submit and inspect tasks, steer queues and the DLQ.

Every operation goes through :class:`dtq_core.ops.admin.Admin` or the SDK :class:`Client`, the
same code the REST API runs. Settings come from ``DTQ_*`` variables (``DTQ_REDIS_URL``).

Exit status: 0 done; 1 the operation failed (bad input, no such task or queue, Redis did not
answer, or ``enqueue --wait`` saw the task end other than ``succeeded``); 2 usage or settings
errors; 130 interrupted (``status --watch`` ends with 0 on Ctrl-C). docs/cli.md lists them.

One module per command group (:mod:`~dtq_core.ops.cli.status`, :mod:`~dtq_core.ops.cli.tasks`,
:mod:`~dtq_core.ops.cli.workers`, :mod:`~dtq_core.ops.cli.queues`, :mod:`~dtq_core.ops.cli.dlq`,
:mod:`~dtq_core.ops.cli.groups`, :mod:`~dtq_core.ops.cli.workflows`,
:mod:`~dtq_core.ops.cli.schedules`, :mod:`~dtq_core.ops.cli.migrate`,
:mod:`~dtq_core.ops.cli.keys`), what they print with (:mod:`~dtq_core.ops.cli.output`, and
:mod:`~dtq_core.ops.cli.progress` for ``enqueue --wait``), the completion scripts
(:mod:`~dtq_core.ops.cli.completion`), the argument parser (:mod:`~dtq_core.ops.cli.parser`)
and the entry point (:mod:`~dtq_core.ops.cli.run`). ``python -m dtq_core.ops.cli`` runs it too.
"""

from dtq_core.ops.cli.parser import build_parser
from dtq_core.ops.cli.run import main

__all__ = ["build_parser", "main"]
