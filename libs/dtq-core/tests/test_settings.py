"""Settings: the documented defaults (docs/configuration.md), validation messages that name
variable, value and rule, and the generated configuration reference."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dtq_core.errors import SettingsError
from dtq_core.infra.settings import (
    PREFIX,
    env_name,
    load_settings,
    schema_properties,
    setting_names,
)
from dtq_devtools.configdoc import configuration_markdown

REPO = Path(__file__).resolve().parents[3]

# The defaults are part of the contract (docs/configuration.md, docs/architecture.md).
DOCUMENTED_DEFAULTS: dict[str, Any] = {
    "namespace": "dtq",
    "visibility_timeout_s": 30,
    "heartbeat_interval_s": 5,
    "max_queue_depth": 10000,
    "max_payload_bytes": 262144,
    "task_timeout_ms": 30000,
    "max_attempts": 10,
    "retry_base_delay": 1.0,
    "retry_max_delay": 60.0,
    "retry_jitter": 0.2,
    "task_retention_s": 604800,
    "result_retention_s": 3600,
    "result_max_bytes": 8192,
    "idem_ttl_s": 86400,
    "drain_timeout_s": 30,
    "dlq_enabled": True,
    "dlq_maxlen": 10000,
    "api_port": 8000,
    "worker_metrics_port": 8001,
    "gateway_port": 8002,
    "scheduler_metrics_port": 8003,
}


def test_defaults_are_designs() -> None:
    s = load_settings({})
    for field, value in DOCUMENTED_DEFAULTS.items():
        assert s.value(field) == value, field
    assert s.gateway.ws_path == "/ws/events"
    assert s.api.keys == ""
    assert s.env == "development"


def test_task_timeout_cap_is_designs() -> None:
    assert load_settings({"DTQ_TASK_TIMEOUT_MS": "3600000"}).tasks.timeout_ms == 3600000
    with pytest.raises(SettingsError) as exc:
        load_settings({"DTQ_TASK_TIMEOUT_MS": "3600001"})
    assert "DTQ_TASK_TIMEOUT_MS" in str(exc.value)
    assert "3600001" in str(exc.value)
    assert "3600000" in str(exc.value)


def test_seed_variables_are_settings() -> None:
    """The seed deployment's variables are the floor (docs/deployment.md, "Settings")."""
    seed = [
        "DTQ_REDIS_URL", "DTQ_API_HOST", "DTQ_API_PORT", "DTQ_WS_PATH", "DTQ_WORKER_CONCURRENCY",
        "DTQ_WORKER_ID", "DTQ_VISIBILITY_TIMEOUT_S", "DTQ_HEARTBEAT_INTERVAL_S",
        "DTQ_MAX_QUEUE_DEPTH", "DTQ_MAX_PAYLOAD_BYTES", "DTQ_TASK_TIMEOUT_MS", "DTQ_MAX_ATTEMPTS",
        "DTQ_RETRY_BASE_DELAY", "DTQ_RETRY_MAX_DELAY", "DTQ_RETRY_JITTER",
        "DTQ_TASK_RETENTION_S", "DTQ_RESULT_RETENTION_S", "DTQ_RESULT_MAX_BYTES",
        "DTQ_IDEM_TTL_S", "DTQ_DRAIN_TIMEOUT_S", "DTQ_DLQ_ENABLED", "DTQ_DLQ_MAXLEN",
        "DTQ_LOG_LEVEL", "DTQ_LOG_JSON", "DTQ_API_KEYS", "DTQ_NAMESPACE", "DTQ_GATEWAY_HOST",
        "DTQ_GATEWAY_PORT", "DTQ_WORKER_METRICS_PORT", "DTQ_SCHEDULER_METRICS_PORT",
    ]  # fmt: skip
    known = {env_name(name) for name in setting_names()}
    assert set(seed) <= known


def test_values_are_parsed_from_strings() -> None:
    s = load_settings(
        {
            "DTQ_API_PORT": "9000",
            "DTQ_VISIBILITY_TIMEOUT_S": "60",
            "DTQ_HEARTBEAT_INTERVAL_S": "2.5",
            "DTQ_DLQ_ENABLED": "false",
            "DTQ_LOG_JSON": "true",
            "DTQ_LOG_LEVEL": "DEBUG",
            "DTQ_NAMESPACE": "prod-1",
            "DTQ_WORKER_METRICS_PORT": "0",
        }
    )
    assert s.api.port == 9000
    assert s.worker.visibility_timeout_s == 60.0
    assert s.worker.heartbeat_interval_s == 2.5
    assert s.queues.dlq_enabled is False
    assert s.observability.log_json is True
    assert s.observability.log_level == "DEBUG"
    assert s.namespace == "prod-1"
    assert s.worker.metrics_port == 0  # a metrics port of 0 turns the listener off


@pytest.mark.parametrize(
    ("raw", "value"),
    [("1", True), ("0", False), ("true", True), ("false", False), ("TRUE", True), ("False", False)],
)
def test_booleans(raw: str, value: bool) -> None:
    assert load_settings({"DTQ_DLQ_ENABLED": raw}).queues.dlq_enabled is value


def test_variables_without_the_prefix_are_ignored() -> None:
    s = load_settings({"PATH": "/bin", "HOME": "/root", "dtq_api_port": "1", "XDTQ_API_PORT": "1"})
    assert s.api.port == 8000


def test_overrides_win_over_the_environment() -> None:
    s = load_settings({"DTQ_API_PORT": "9000"}, api_port=9100)
    assert s.api.port == 9100


def test_no_environment_means_defaults() -> None:
    assert load_settings(None).api.port == 8000


def test_worker_id_defaults_to_host_and_pid() -> None:
    s = load_settings({})
    assert s.worker.id.endswith(f"-{os.getpid()}")
    assert load_settings({"DTQ_WORKER_ID": "w-7"}).worker.id == "w-7"


def test_effective_claim_batch_and_prefetch() -> None:
    assert load_settings({}, worker_concurrency=100).worker.effective_claim_batch == 50
    assert load_settings({}, worker_concurrency=1000).worker.effective_claim_batch == 100
    assert load_settings({}, worker_concurrency=1).worker.effective_claim_batch == 1
    assert load_settings({}, claim_batch=7).worker.effective_claim_batch == 7
    assert load_settings({}, claim_batch=7).worker.effective_prefetch == 7
    assert load_settings({}, claim_batch=7, worker_prefetch=0).worker.effective_prefetch == 0


# -- validation errors: variable, value and rule --------------------------------------------

INVALID = [
    # (variable, value, a fragment of the rule)
    ("DTQ_API_PORT", "abc", "int"),
    ("DTQ_API_PORT", "0", ">= 1"),
    ("DTQ_API_PORT", "65536", "<= 65535"),
    ("DTQ_GATEWAY_PORT", "-1", ">= 1"),
    ("DTQ_WORKER_METRICS_PORT", "70000", "<= 65535"),
    ("DTQ_SCHEDULER_METRICS_PORT", "-5", ">= 0"),
    ("DTQ_VISIBILITY_TIMEOUT_S", "0", "> 0"),
    ("DTQ_VISIBILITY_TIMEOUT_S", "-1", "> 0"),
    ("DTQ_VISIBILITY_TIMEOUT_S", "soon", "float"),
    ("DTQ_HEARTBEAT_INTERVAL_S", "0", "> 0"),
    ("DTQ_MAX_QUEUE_DEPTH", "-1", ">= 0"),
    ("DTQ_MAX_PAYLOAD_BYTES", "10", ">= 256"),
    ("DTQ_TASK_TIMEOUT_MS", "0", ">= 1"),
    ("DTQ_TASK_TIMEOUT_MS", "3600001", "<= 3600000"),
    ("DTQ_MAX_ATTEMPTS", "0", ">= 1"),
    ("DTQ_MAX_ATTEMPTS", "1001", "<= 1000"),
    ("DTQ_RETRY_BASE_DELAY", "-0.5", ">= 0"),
    ("DTQ_RETRY_JITTER", "1.5", "<= 1"),
    ("DTQ_RETRY_JITTER", "-0.1", ">= 0"),
    ("DTQ_TASK_RETENTION_S", "59", ">= 60"),
    ("DTQ_RESULT_RETENTION_S", "0", ">= 1"),
    ("DTQ_RESULT_MAX_BYTES", "-1", ">= 0"),
    ("DTQ_IDEM_TTL_S", "0", ">= 1"),
    ("DTQ_DRAIN_TIMEOUT_S", "-1", ">= 0"),
    ("DTQ_DRAIN_TIMEOUT_S", "3601", "<= 3600"),
    ("DTQ_DLQ_ENABLED", "maybe", "must be one of true, false, 1, 0"),
    ("DTQ_DLQ_MAXLEN", "0", ">= 1"),
    ("DTQ_LOG_JSON", "yes please", "must be one of true, false, 1, 0"),
    ("DTQ_WORKER_CONCURRENCY", "0", ">= 1"),
    ("DTQ_WORKER_CONCURRENCY", "1.5", "int"),
    ("DTQ_NAMESPACE", "a:b", "^[A-Za-z0-9]"),
    ("DTQ_NAMESPACE", "{x}", "^[A-Za-z0-9]"),
    ("DTQ_NAMESPACE", "", "^[A-Za-z0-9]"),
    ("DTQ_WORKER_ID", "a b", "^[A-Za-z0-9]"),
    ("DTQ_WS_PATH", "ws", "^/"),
    ("DTQ_REDIS_URL", "", "length >= 1"),
    ("DTQ_REDIS_URL", "http://localhost:6379", "scheme must be one of redis, rediss, unix"),
    ("DTQ_REDIS_URL", "localhost:6379", "expected redis://[user:password@]host:port/db"),
    ("DTQ_REDIS_URL", "redis+cluster://a:7000,b", "'b' is not host:port"),
    ("DTQ_REDIS_URL", "redis+cluster://a:7000/3", "database 0 only"),
    ("DTQ_REDIS_URL", "redis+sentinel://a:26379", "must name the master"),
    ("DTQ_REDIS_URL", "redis+sentinel://a:26379/m/x", "expected redis+sentinel://"),
    ("DTQ_REDIS_URL", "redis://localhost:63x9/0", "Port could not be cast"),
    ("DTQ_REDIS_URL", "redis://localhost:6379/x", "database number"),
    ("DTQ_REDIS_URL", "redis://localhost/0?socket_timeout=soon", "socket_timeout"),
    ("DTQ_EVENTS_MAXLEN", "10", ">= 100"),
    ("DTQ_LEADER_TTL_S", "0", "> 0"),
    ("DTQ_SCHEDULER_TICK_S", "61", "<= 60"),
    ("DTQ_CLAIM_BATCH", "501", "<= 500"),
    ("DTQ_REDIS_MAX_CONNECTIONS", "1", ">= 2"),
    ("DTQ_API_WAITS_MAX", "0", ">= 1"),
    ("DTQ_API_WAITS_PER_KEY", "0", ">= 1"),
    ("DTQ_REDIS_WAIT_REPLICAS", "-1", ">= 0"),
    ("DTQ_REDIS_WAIT_TIMEOUT_MS", "0", ">= 1"),
    ("DTQ_OTLP_ENDPOINT", "collector:4318", "http:// or https:// URL with a host"),
    ("DTQ_TRACE_URL", "jaeger/trace/{trace_id}", "http:// or https:// URL with a host"),
    ("DTQ_TRACE_URL", "http://127.0.0.1:16686/search", "it must hold {trace_id}"),
]


def test_a_trace_url_template_links_a_trace() -> None:
    from dtq_core.infra.settings.rules import trace_link  # noqa: PLC0415 - its one use

    grafana = 'https://grafana/explore?left={"queries":[{"query":"{trace_id}"}]}'
    settings = load_settings({"DTQ_TRACE_URL": grafana})
    assert trace_link(settings.observability.trace_url, "ab" * 16) == grafana.replace(
        "{trace_id}", "ab" * 16
    )
    assert trace_link(settings.observability.trace_url, None) is None
    assert trace_link("", "ab" * 16) is None


def test_a_replica_wait_must_fit_in_a_lease_renewal() -> None:
    env = {"DTQ_REDIS_WAIT_REPLICAS": "1", "DTQ_REDIS_WAIT_TIMEOUT_MS": "4000"}
    with pytest.raises(SettingsError) as exc:
        load_settings(env)
    assert str(exc.value).startswith("DTQ_REDIS_WAIT_TIMEOUT_MS=4000 is invalid"), exc.value
    assert "DTQ_LEADER_TTL_S=10.0" in str(exc.value)
    assert load_settings({**env, "DTQ_LEADER_TTL_S": "15"}).redis.wait_timeout_ms == 4000
    assert load_settings({"DTQ_REDIS_WAIT_TIMEOUT_MS": "4000"}).redis.wait_replicas == 0


def test_waits_per_key_cannot_exceed_the_process_cap() -> None:
    with pytest.raises(SettingsError) as exc:
        load_settings({"DTQ_API_WAITS_MAX": "10", "DTQ_API_WAITS_PER_KEY": "11"})
    assert str(exc.value).startswith("DTQ_API_WAITS_PER_KEY=11 is invalid"), exc.value
    assert "DTQ_API_WAITS_MAX=10" in str(exc.value)
    assert exc.value.detail["variable"] == "DTQ_API_WAITS_PER_KEY"


@pytest.mark.parametrize(("variable", "value", "rule"), INVALID)
def test_invalid_value_names_variable_value_and_rule(variable: str, value: str, rule: str) -> None:
    with pytest.raises(SettingsError) as exc:
        load_settings({variable: value})
    message = str(exc.value)
    assert message.startswith(f"{variable}={value!r} is invalid"), message
    assert rule in message, message
    assert exc.value.detail["variable"] == variable
    assert exc.value.code == "invalid_setting"


BOOL_SETTINGS = [
    env_name(name) for name, prop in schema_properties().items() if prop.get("type") == "boolean"
]


def test_there_are_bool_settings() -> None:
    assert "DTQ_DLQ_ENABLED" in BOOL_SETTINGS
    assert "DTQ_LOG_JSON" in BOOL_SETTINGS
    assert "DTQ_REJECT_UNKNOWN_TASKS" in BOOL_SETTINGS


@pytest.mark.parametrize("variable", BOOL_SETTINGS)
def test_every_bool_setting_names_the_accepted_spellings(variable: str) -> None:
    with pytest.raises(SettingsError) as exc:
        load_settings({variable: "maybe"})
    assert str(exc.value) == (
        f"{variable}='maybe' is invalid: must be one of true, false, 1, 0 (any case)"
    )
    assert "Expected" not in str(exc.value)


def test_good_redis_urls_are_accepted() -> None:
    for url in (
        "redis://localhost:6379/0",
        "redis://localhost",
        "rediss://user:pw@redis.example.com:6380/2",
        "unix:///run/redis/redis.sock?db=1",
        "redis://127.0.0.1:6379/0?socket_timeout=5",
    ):
        assert load_settings({"DTQ_REDIS_URL": url}).redis.url == url


def test_a_bad_redis_url_is_refused_without_its_password() -> None:
    with pytest.raises(SettingsError) as exc:
        load_settings({"DTQ_REDIS_URL": "http://:s3cret@localhost:6379/0"})
    message = str(exc.value)
    assert message.startswith("DTQ_REDIS_URL='http://localhost:6379/0' is invalid: "), message
    assert "s3cret" not in message
    assert exc.value.detail["variable"] == "DTQ_REDIS_URL"


@pytest.mark.parametrize(
    ("variable", "value", "allowed"),
    [("DTQ_LOG_LEVEL", "LOUD", "DEBUG"), ("DTQ_ENV", "staging", "production")],
)
def test_invalid_choice_names_the_allowed_values(variable: str, value: str, allowed: str) -> None:
    with pytest.raises(SettingsError) as exc:
        load_settings({variable: value})
    message = str(exc.value)
    assert message.startswith(f"{variable}={value!r} is invalid")
    assert allowed in message, message


def test_unknown_dtq_variable_is_refused() -> None:
    with pytest.raises(SettingsError) as exc:
        load_settings({"DTQ_VISIBILITY_TIMEOUT": "30"})  # the _S is missing
    message = str(exc.value)
    assert "DTQ_VISIBILITY_TIMEOUT is not a dtq setting" in message
    assert "DTQ_VISIBILITY_TIMEOUT_S" in message  # the list of known names helps fix the typo
    assert exc.value.detail["variable"] == "DTQ_VISIBILITY_TIMEOUT"


def test_unknown_override_is_named() -> None:
    with pytest.raises(SettingsError) as exc:
        load_settings({}, visibility_timeout=30)
    assert "visibility_timeout" in str(exc.value).lower()
    assert "DTQ_?" not in str(exc.value)


# -- cross-field rules ------------------------------------------------------------------------


def test_heartbeat_must_leave_room_below_the_visibility_timeout() -> None:
    # At most a third: two missed heartbeats must not get a live task reclaimed. That is
    # stricter than the floor (heartbeat < visibility timeout, docs/architecture.md).
    assert load_settings({"DTQ_VISIBILITY_TIMEOUT_S": "15"}).worker.heartbeat_interval_s == 5
    with pytest.raises(SettingsError) as exc:
        load_settings({"DTQ_VISIBILITY_TIMEOUT_S": "14.9"})
    message = str(exc.value)
    assert "DTQ_HEARTBEAT_INTERVAL_S=5.0" in message
    assert "DTQ_VISIBILITY_TIMEOUT_S=14.9" in message
    assert "third" in message
    with pytest.raises(SettingsError) as exc:
        load_settings({"DTQ_HEARTBEAT_INTERVAL_S": "30"})
    assert exc.value.detail["variable"] == "DTQ_HEARTBEAT_INTERVAL_S"


def test_retry_max_delay_must_not_be_below_the_base() -> None:
    s = load_settings({"DTQ_RETRY_BASE_DELAY": "2", "DTQ_RETRY_MAX_DELAY": "2"})
    assert s.retries.max_delay == s.retries.base_delay == 2
    with pytest.raises(SettingsError) as exc:
        load_settings({"DTQ_RETRY_BASE_DELAY": "5", "DTQ_RETRY_MAX_DELAY": "4"})
    message = str(exc.value)
    assert "DTQ_RETRY_MAX_DELAY=4.0" in message
    assert "DTQ_RETRY_BASE_DELAY=5.0" in message
    assert ">=" in message
    assert exc.value.detail["variable"] == "DTQ_RETRY_MAX_DELAY"


def test_production_needs_api_keys() -> None:
    with pytest.raises(SettingsError) as exc:
        load_settings({"DTQ_ENV": "production"})
    assert "DTQ_ENV='production'" in str(exc.value)
    assert "DTQ_API_KEYS" in str(exc.value)
    s = load_settings({"DTQ_ENV": "production", "DTQ_API_KEYS": "ops:admin:" + "a" * 64})
    assert s.env == "production"


def test_settings_are_frozen() -> None:
    s = load_settings({})
    with pytest.raises(AttributeError):
        s.api.port = 1  # type: ignore[misc]


def test_every_field_is_documented() -> None:
    for name in setting_names():
        assert env_name(name).startswith(PREFIX)
    schema = schema_properties()
    for name, prop in schema.items():
        assert prop.get("description"), f"{env_name(name)} has no description"


# -- the generated reference ------------------------------------------------------------------


def test_configuration_markdown_lists_every_variable() -> None:
    doc = configuration_markdown()
    for name in setting_names():
        assert f"| `{env_name(name)}` |" in doc
    assert "| `DTQ_VISIBILITY_TIMEOUT_S` | float | `30.0` | > 0, <= 86400 |" in doc
    assert "| `DTQ_DLQ_ENABLED` | bool | `true` |" in doc
    assert "| `DTQ_WORKER_ID` | str | `<hostname>-<pid>` |" in doc


def test_docs_configuration_md_is_up_to_date() -> None:
    path = REPO / "docs" / "configuration.md"
    assert path.read_text() == configuration_markdown(), (
        "docs/configuration.md drifted: run `just docs`"
    )


def test_module_entry_point_prints_the_reference() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "dtq_devtools.configdoc"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout == configuration_markdown()


@pytest.mark.parametrize("variable", ["DTQ_NAMESPACE", "DTQ_WORKER_ID"])
def test_name_settings_refuse_a_trailing_newline(variable: str) -> None:
    """Python's ``$`` would let ``"dtq\\n"`` through, and the namespace is in every key."""
    with pytest.raises(SettingsError, match=variable):
        load_settings({variable: "dtq\n"})


def test_worker_processes_is_auto_or_a_count_in_range() -> None:
    assert load_settings({}).worker.process_count == 1
    assert load_settings({"DTQ_WORKER_PROCESSES": "4"}).worker.process_count == 4
    assert load_settings({"DTQ_WORKER_PROCESSES": "auto"}).worker.process_count is None
    assert load_settings({}, worker_processes="2").worker.process_count == 2
    for bad in ("0", "257", "-1", "two", "AUTO", "1.5", ""):
        with pytest.raises(SettingsError) as err:
            load_settings({"DTQ_WORKER_PROCESSES": bad})
        assert err.value.detail["variable"] == "DTQ_WORKER_PROCESSES"
        assert "`auto`" in str(err.value)
        assert "from 1 to 256" in str(err.value)
    with pytest.raises(SettingsError, match="DTQ_WORKER_PROCESS_POOL"):
        load_settings({"DTQ_WORKER_PROCESS_POOL": "-1"})
