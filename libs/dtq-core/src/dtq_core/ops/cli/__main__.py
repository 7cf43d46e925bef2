"""``python -m dtq_core.ops.cli``: the same as the ``dtq`` command."""

from dtq_core.ops.cli.run import main

main()
