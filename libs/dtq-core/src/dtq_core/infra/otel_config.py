"""Where a process's spans go, read from the OpenTelemetry SDK's environment variables the way
the SDK reads them, and checked at start-up (pure: no SDK import).

============================================  ==============================================
variable                                      what dtq does with it
============================================  ==============================================
``OTEL_SDK_DISABLED``                         ``true``: no provider, no exporter, no span
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``        the traces URL, used as it is
``OTEL_EXPORTER_OTLP_ENDPOINT``               a base URL: ``/v1/traces`` is appended
``DTQ_OTLP_ENDPOINT``                         the same as the one above, read when neither is set
``OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL``      must be ``http/protobuf`` (what dtq exports with)
``OTEL_SERVICE_NAME``                         ``service.name``, over the process's own name
``OTEL_RESOURCE_ATTRIBUTES``                  more resource attributes (``key=value,...``)
============================================  ==============================================

The signal-specific endpoint wins over the generic one, and the signal path is appended to the
generic one only (the OpenTelemetry specification, "OTLP Exporter Configuration"). The
standard variables win over ``DTQ_OTLP_ENDPOINT``: platforms (the OpenTelemetry Operator, a
hosted backend's instructions) set those for every process they run, and dtq follows them like
any other instrumented program; the shorthand fills in where none is set.

Where the SDK would accept a value and fail later, quietly or once per export (an endpoint that
is not a URL, a malformed attribute list, ``OTEL_SDK_DISABLED=yes`` read as "enabled", gRPC
asked of an HTTP exporter), :func:`export_config` raises a :class:`SettingsError` naming the
variable, so the process refuses to start with one line instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from dtq_core.errors import SettingsError

DISABLED = "OTEL_SDK_DISABLED"
TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
DTQ_ENDPOINT = "DTQ_OTLP_ENDPOINT"
TRACES_PROTOCOL = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
PROTOCOL = "OTEL_EXPORTER_OTLP_PROTOCOL"
SERVICE_NAME = "OTEL_SERVICE_NAME"
RESOURCE_ATTRIBUTES = "OTEL_RESOURCE_ATTRIBUTES"

TRACES_PATH = "v1/traces"
"""What the generic endpoint gets appended (OTLP/HTTP's default traces path)."""
HTTP_PROTOBUF = "http/protobuf"


@dataclass(frozen=True, slots=True)
class ExportConfig:
    """What :func:`export_config` read: where spans go and the resource they carry."""

    service_name: str
    """``service.name``: ``OTEL_SERVICE_NAME``, else ``service.name`` of
    ``OTEL_RESOURCE_ATTRIBUTES``, else the process's own name."""
    attributes: dict[str, str] = field(default_factory=dict)
    """The resource attributes, ``service.name`` included."""
    endpoint: str = ""
    """The URL spans are posted to (``""``: none configured, no exporter)."""
    source: str = ""
    """The variable the endpoint came from."""
    disabled: bool = False
    """``OTEL_SDK_DISABLED=true``: nothing is set up, whatever else is set."""
    shadowed: str = ""
    """``DTQ_OTLP_ENDPOINT`` when a standard variable was set too and won (it is logged)."""


def export_config(
    service_name: str, dtq_endpoint: str = "", env: Mapping[str, str] | None = None
) -> ExportConfig:
    """The export configuration of a process named ``service_name``.

    Args:
        service_name: the process's own ``service.name`` (``dtq-worker``...).
        dtq_endpoint: ``DTQ_OTLP_ENDPOINT`` (or the endpoint an application passes), a base
            URL like ``OTEL_EXPORTER_OTLP_ENDPOINT``.
        env: the environment (``os.environ`` when ``None``).

    Raises:
        SettingsError: a value the SDK would accept and then fail on, naming the variable.
    """
    if env is None:
        import os  # noqa: PLC0415 - read at call time, so tests may pass their own

        env = os.environ
    disabled = _disabled(env.get(DISABLED, ""))
    attributes = _attributes(env.get(RESOURCE_ATTRIBUTES, ""))
    name = env.get(SERVICE_NAME, "").strip() or attributes.get("service.name") or service_name
    attributes["service.name"] = name
    if disabled:
        return ExportConfig(name, attributes, disabled=True)
    endpoint, source = "", ""
    for variable, value, append in (
        (TRACES_ENDPOINT, env.get(TRACES_ENDPOINT, ""), False),
        (ENDPOINT, env.get(ENDPOINT, ""), True),
        (DTQ_ENDPOINT, dtq_endpoint, True),
    ):
        if value.strip():
            endpoint, source = _url(variable, value.strip(), append=append), variable
            break
    if not endpoint:
        return ExportConfig(name, attributes)
    _protocol(env)
    shadowed = DTQ_ENDPOINT if source != DTQ_ENDPOINT and dtq_endpoint.strip() else ""
    return ExportConfig(name, attributes, endpoint, source, shadowed=shadowed)


def _disabled(value: str) -> bool:
    text = value.strip().lower()
    if text in {"", "false"}:
        return False
    if text == "true":
        return True
    # The SDK reads any other value as false, with a warning: OTEL_SDK_DISABLED=1 would leave
    # tracing on while its author believes it off.
    raise SettingsError(
        f"{DISABLED}={value!r} is invalid: it must be true or false (any case)", variable=DISABLED
    )


def _attributes(value: str) -> dict[str, str]:
    """``key=value`` pairs separated by commas, values percent-decoded (the SDK's rule)."""
    found: dict[str, str] = {}
    for item in value.split(","):
        if not item.strip():
            continue
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            # The SDK logs a warning and drops the pair: a deployment label silently missing.
            raise SettingsError(
                f"{RESOURCE_ATTRIBUTES}={value!r} is invalid: {item.strip()!r} is not "
                "key=value (pairs are separated by commas; percent-encode a comma, an equals "
                "sign or a percent sign inside a value)",
                variable=RESOURCE_ATTRIBUTES,
            )
        found[key.strip()] = unquote(raw.strip())
    return found


def _url(variable: str, value: str, *, append: bool) -> str:
    parts = urlsplit(value)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise SettingsError(
            f"{variable}={value!r} is invalid: it must be an http:// or https:// URL with a "
            "host, like http://otel-collector:4318",
            variable=variable,
        )
    if parts.query or parts.fragment:
        raise SettingsError(
            f"{variable}={value!r} is invalid: it must have no query or fragment",
            variable=variable,
        )
    try:
        _ = parts.port
    except ValueError:
        raise SettingsError(
            f"{variable}={value!r} is invalid: the port must be a number up to 65535",
            variable=variable,
        ) from None
    if not append:
        return value
    # A base URL with a path of its own keeps it: http://gw/otlp -> http://gw/otlp/v1/traces.
    return value.rstrip("/") + "/" + TRACES_PATH


def _protocol(env: Mapping[str, str]) -> None:
    for variable in (TRACES_PROTOCOL, PROTOCOL):
        value = env.get(variable, "").strip()
        if not value:
            continue
        if value.lower() != HTTP_PROTOBUF:
            # The exporter would post protobuf to a gRPC port (4317) and fail on every batch.
            raise SettingsError(
                f"{variable}={value!r} is invalid: dtq exports traces as http/protobuf only "
                "(OTLP over HTTP, port 4318 by convention)",
                variable=variable,
            )
        return  # the traces variable, when set, decides alone


def public_endpoint(url: str) -> str:
    """``url`` without a user or password, for a log line."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
