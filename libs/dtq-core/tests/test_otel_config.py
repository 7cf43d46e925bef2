"""Where spans go and the resource they carry, from the environment as the OpenTelemetry SDK
reads it (``dtq_core.infra.otel_config``), and the values refused at start-up."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dtq_core.errors import SettingsError
from dtq_core.infra import tracing
from dtq_core.infra.otel_config import export_config

BASE = "http://collector:4318"


@pytest.fixture(autouse=True)
def _tracing_off() -> Iterator[None]:
    yield
    tracing.shutdown()


def test_nothing_configured_means_no_endpoint() -> None:
    config = export_config("dtq-worker", "", {})
    assert (config.endpoint, config.source, config.disabled) == ("", "", False)
    assert config.service_name == "dtq-worker"
    assert config.attributes == {"service.name": "dtq-worker"}


@pytest.mark.parametrize(
    ("env", "dtq", "endpoint", "source"),
    [
        ({}, BASE, f"{BASE}/v1/traces", "DTQ_OTLP_ENDPOINT"),
        ({}, f"{BASE}/", f"{BASE}/v1/traces", "DTQ_OTLP_ENDPOINT"),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://gw.example.com/otlp"},
            "",
            "https://gw.example.com/otlp/v1/traces",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ),
        # The signal's own variable is the whole URL: no path is appended.
        (
            {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://tempo:4318/custom"},
            "",
            "http://tempo:4318/custom",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        ),
        (
            {
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://a:4318/v1/traces",
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://b:4318",
            },
            BASE,
            "http://a:4318/v1/traces",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        ),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://b:4318"},
            BASE,
            "http://b:4318/v1/traces",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ),
        # An empty variable is an unset one.
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": " "}, BASE, f"{BASE}/v1/traces", "DTQ_OTLP_ENDPOINT"),
    ],
)
def test_the_endpoint_by_precedence(
    env: dict[str, str], dtq: str, endpoint: str, source: str
) -> None:
    config = export_config("dtq-worker", dtq, env)
    assert (config.endpoint, config.source) == (endpoint, source)
    assert config.shadowed == ("DTQ_OTLP_ENDPOINT" if dtq and source != "DTQ_OTLP_ENDPOINT" else "")


@pytest.mark.parametrize("value", ["true", "TRUE", " True "])
def test_sdk_disabled_wins_over_every_endpoint(value: str) -> None:
    env = {"OTEL_SDK_DISABLED": value, "OTEL_EXPORTER_OTLP_ENDPOINT": BASE}
    config = export_config("dtq-worker", BASE, env)
    assert config.disabled
    assert config.endpoint == ""
    assert not tracing.configure_tracing("dtq-worker", BASE, InMemorySpanExporter(), env=env)
    assert not tracing.is_on()


def test_sdk_disabled_false_or_empty_leaves_tracing_on() -> None:
    for value in ("false", "False", ""):
        assert not export_config("x", BASE, {"OTEL_SDK_DISABLED": value}).disabled


def test_service_name_and_resource_attributes() -> None:
    env = {
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=staging, service.instance.id=w-3,"
        "team=a%2Cb%3Dc,service.name=from-attributes,",
    }
    config = export_config("dtq-worker", "", env)
    assert config.service_name == "from-attributes"
    assert config.attributes == {
        "deployment.environment": "staging",
        "service.instance.id": "w-3",
        "team": "a,b=c",  # percent-decoded, as the SDK does
        "service.name": "from-attributes",
    }
    named = export_config("dtq-worker", "", {**env, "OTEL_SERVICE_NAME": "billing-worker"})
    assert named.service_name == named.attributes["service.name"] == "billing-worker"


def test_the_resource_reaches_the_spans() -> None:
    spans = InMemorySpanExporter()
    env = {"OTEL_SERVICE_NAME": "billing-worker", "OTEL_RESOURCE_ATTRIBUTES": "region=eu-1"}
    assert tracing.configure_tracing("dtq-worker", exporter=spans, env=env)
    with tracing.send_span("t", "q"):
        pass
    (span,) = spans.get_finished_spans()
    assert span.resource.attributes["service.name"] == "billing-worker"
    assert span.resource.attributes["region"] == "eu-1"
    assert span.resource.attributes["telemetry.sdk.language"] == "python"


@pytest.mark.parametrize(
    ("variable", "value", "rule"),
    [
        ("OTEL_SDK_DISABLED", "1", "it must be true or false"),
        ("OTEL_SDK_DISABLED", "yes", "it must be true or false"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318", "http:// or https:// URL with a host"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "grpc://c:4317", "http:// or https:// URL"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:99999", "the port must be a number"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318?x=1", "no query or fragment"),
        ("OTEL_RESOURCE_ATTRIBUTES", "a=1,broken", "'broken' is not key=value"),
        ("OTEL_RESOURCE_ATTRIBUTES", "=x", "'=x' is not key=value"),
    ],
)
def test_values_the_sdk_would_fail_on_later_are_refused_naming_the_variable(
    variable: str, value: str, rule: str
) -> None:
    with pytest.raises(SettingsError) as caught:
        export_config("dtq-worker", "", {variable: value})
    assert caught.value.detail["variable"] == variable
    assert str(caught.value).startswith(f"{variable}={value!r} is invalid: ")
    assert rule in str(caught.value)


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTEL_EXPORTER_OTLP_PROTOCOL"),
        ({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"),
        (
            {
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            },
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        ),
    ],
)
def test_a_protocol_other_than_http_protobuf_is_refused(env: dict[str, str], variable: str) -> None:
    with pytest.raises(SettingsError) as caught:
        export_config("dtq-worker", BASE, env)
    assert caught.value.detail["variable"] == variable
    assert "http/protobuf only" in str(caught.value)
    # Without an endpoint nothing is exported: the protocol does not matter.
    assert export_config("dtq-worker", "", env).endpoint == ""


def test_the_traces_protocol_decides_over_the_generic_one() -> None:
    env = {
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
    }
    assert export_config("dtq-worker", BASE, env).endpoint == f"{BASE}/v1/traces"


def test_a_disabled_sdk_is_not_checked_further() -> None:
    env = {"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "not a url"}
    assert export_config("dtq-worker", "", env).disabled
