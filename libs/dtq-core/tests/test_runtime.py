"""The one start-up prologue: settings, then the listen socket, then logging."""

from __future__ import annotations

import socket

import pytest

from dtq_core.errors import SettingsError
from dtq_core.infra import runtime
from dtq_core.infra.runtime import listen_socket, startup
from dtq_core.infra.settings import Settings


@pytest.fixture(autouse=True)
def logging_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """What startup configured logging with; the process's own configuration stays as it was
    (structlog caches loggers on first use, so a level set here would outlive the test)."""
    calls: list[tuple[str, bool]] = []
    monkeypatch.setattr(runtime, "configure_logging", lambda *a: calls.append(a))
    return calls


def test_an_invalid_setting_is_one_line_and_status_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DTQ_HEARTBEAT_INTERVAL_S", "soon")
    with pytest.raises(SystemExit) as exc:
        startup("dtq-test")
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("dtq-test: ")
    assert "DTQ_HEARTBEAT_INTERVAL_S" in err
    assert err.count("\n") == 1


def test_a_socket_that_cannot_be_bound_is_one_line_and_status_2(
    capsys: pytest.CaptureFixture[str], logging_calls: list[tuple[str, bool]]
) -> None:
    def bind(_: Settings) -> socket.socket:
        raise SettingsError("port 1 is in use; set DTQ_API_PORT to a free port")

    with pytest.raises(SystemExit) as exc:
        startup("dtq-test", bind=bind)
    assert exc.value.code == 2
    assert logging_calls == []  # nothing is logged before the configuration can run
    assert capsys.readouterr().err == (
        "dtq-test: port 1 is in use; set DTQ_API_PORT to a free port\n"
    )


def test_the_socket_is_bound_and_logging_configured(logging_calls: list[tuple[str, bool]]) -> None:
    def bind(s: Settings) -> socket.socket:
        return listen_socket("127.0.0.1", 0, port_setting="DTQ_API_PORT", host_setting="H")

    started = startup("dtq-test", bind=bind, log_level="WARNING", worker_concurrency=3)
    try:
        assert started.settings.worker.concurrency == 3
        assert started.listener.getsockname()[1] > 0
        assert logging_calls == [("WARNING", started.settings.observability.log_json)]
    finally:
        started.listener.close()


def test_no_socket_without_bind(logging_calls: list[tuple[str, bool]]) -> None:
    started = startup("dtq-test")
    assert started.sock is None
    assert logging_calls == [
        (started.settings.observability.log_level, started.settings.observability.log_json)
    ]
    with pytest.raises(RuntimeError):
        _ = started.listener
