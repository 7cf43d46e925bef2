"""dtq worker service."""

from importlib.metadata import version

__version__: str = version("dtq-worker")
"""The installed version of dtq-worker (its ``pyproject.toml`` is the one place it is
written); every worker publishes it in its registry record."""
