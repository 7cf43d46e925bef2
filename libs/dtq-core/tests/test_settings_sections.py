"""Settings per concern: every flat variable lands in one section field, the flat names keep
working where callers speak them (overrides, errors, the reference), and the sections are
frozen structs of their own."""

from __future__ import annotations

import msgspec
import pytest

from dtq_core.errors import SettingsError
from dtq_core.infra.settings import (
    FIELD_PATHS,
    SECTIONS,
    Settings,
    WorkerSettings,
    env_name,
    load_settings,
    setting_names,
)
from dtq_devtools.configdoc import configuration_markdown


def test_every_flat_name_has_one_path() -> None:
    paths = list(FIELD_PATHS.values())
    assert len(paths) == len(set(paths))
    assert set(setting_names()) == set(FIELD_PATHS)
    for name, (section, attr) in FIELD_PATHS.items():
        owner = SECTIONS[section] if section else Settings
        assert attr in {f.name for f in msgspec.structs.fields(owner)}, name


@pytest.mark.parametrize(
    ("variable", "raw", "path", "value"),
    [
        ("DTQ_REDIS_URL", "redis://h:1/2", "redis.url", "redis://h:1/2"),
        ("DTQ_API_PORT", "9001", "api.port", 9001),
        ("DTQ_GATEWAY_ALLOWED_ORIGINS", "https://a.example/", "gateway.allowed_origins",
         "https://a.example/"),
        ("DTQ_WORKER_CONCURRENCY", "7", "worker.concurrency", 7),
        ("DTQ_WORKER_ID", "w-1", "worker.id", "w-1"),
        ("DTQ_SCHEDULER_TICK_S", "0.5", "scheduler.tick_s", 0.5),
        ("DTQ_TASK_TIMEOUT_MS", "5", "tasks.timeout_ms", 5),
        ("DTQ_MAX_QUEUE_DEPTH", "3", "queues.max_depth", 3),
        ("DTQ_RETRY_JITTER", "0.5", "retries.jitter", 0.5),
        ("DTQ_LOG_JSON", "1", "observability.log_json", True),
        ("DTQ_NAMESPACE", "ns", "namespace", "ns"),
    ],
)  # fmt: skip
def test_a_variable_is_read_at_its_section_path(
    variable: str, raw: str, path: str, value: object
) -> None:
    s: object = load_settings({variable: raw})
    for part in path.split("."):
        s = getattr(s, part)
    assert s == value
    assert load_settings({variable: raw}).value(variable[4:].lower()) == value


def test_parsed_views_live_with_their_section() -> None:
    s = load_settings({"DTQ_GATEWAY_ALLOWED_ORIGINS": " https://a.example/ ,,http://b:8080"})
    assert s.gateway.origins == ("https://a.example", "http://b:8080")
    assert s.web_policy(origins=True).origins == s.gateway.origins
    assert s.web_policy(origins=False).origins == ()


def test_with_overrides_takes_flat_names_and_checks_again() -> None:
    s = load_settings({})
    changed = s.with_overrides(worker_concurrency=3, api_port=9100, namespace="other")
    assert (changed.worker.concurrency, changed.api.port, changed.namespace) == (3, 9100, "other")
    assert s.worker.concurrency == 100  # the original is untouched
    assert changed.redis == s.redis  # sections not named are shared as they are
    with pytest.raises(SettingsError) as exc:
        s.with_overrides(heartbeat_interval_s=20.0)
    assert exc.value.detail["variable"] == "DTQ_HEARTBEAT_INTERVAL_S"
    with pytest.raises(SettingsError) as exc:
        s.with_overrides(concurrency=3)  # a field attribute is not a setting name
    assert "is not a dtq setting" in str(exc.value)


def test_value_refuses_an_unknown_name() -> None:
    with pytest.raises(SettingsError, match="is not a dtq setting"):
        load_settings({}).value("worker_count")


def test_sections_are_frozen_structs() -> None:
    s = load_settings({})
    with pytest.raises(AttributeError):
        s.worker.concurrency = 1  # type: ignore[misc]
    assert isinstance(s.worker, WorkerSettings)
    assert s.worker.effective_claim_batch == 50


def test_a_type_error_in_a_section_names_the_flat_variable() -> None:
    with pytest.raises(SettingsError) as exc:
        load_settings({"DTQ_GATEWAY_MAX_CLIENTS": "many"})
    assert str(exc.value).startswith("DTQ_GATEWAY_MAX_CLIENTS='many' is invalid: ")
    assert exc.value.detail["variable"] == "DTQ_GATEWAY_MAX_CLIENTS"


def test_the_reference_has_one_heading_per_section_in_order() -> None:
    doc = configuration_markdown()
    headings = [line[3:] for line in doc.splitlines() if line.startswith("## ")]
    assert headings == ["Deployment", *(struct.title for struct in SECTIONS.values())]
    positions = [doc.index(f"| `{env_name(name)}` |") for name in setting_names()]
    assert positions == sorted(positions)
    for name, (section, _) in FIELD_PATHS.items():
        if section:
            heading = doc.index(f"## {SECTIONS[section].title}\n")
            assert heading < doc.index(f"| `{env_name(name)}` |")
