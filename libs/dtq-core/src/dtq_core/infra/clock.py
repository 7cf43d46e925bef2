"""The offset a test kit's clock adds to Redis time (:mod:`dtq_core.testing`).

Every due time, lease, rate and age in dtq is Redis time: the functions read ``TIME`` and
Python reads it through :func:`dtq_core.infra.cluster.time_of`. A test clock is a key holding an
offset in microseconds that both add, so a test moves time for delays, retries, rates and
schedules without sleeping. It is off unless a test kit turns it on, and then it holds for the
whole process (the function library is built with the key's name in it: another library,
under another name, than production's).
"""

from __future__ import annotations

_key: str | None = None


def test_clock_key() -> str | None:
    """The key of the offset, or ``None`` (the clock is Redis's own)."""
    return _key


def use_test_clock(key: str | None) -> None:
    """Turn the test clock on (``key``) or off (``None``) for this process; clients made
    before keep the library they were made with."""
    global _key  # noqa: PLW0603 - one process-wide switch, set by the test kit only
    if key is not None and ("'" in key or "\\" in key):
        raise ValueError(f"a test clock key cannot hold quotes or backslashes: {key!r}")
    _key = key
