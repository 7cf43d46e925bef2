"""The whole configuration: the deployment-wide fields and one section per concern.

Code reads ``settings.worker.concurrency``; the environment, :func:`load_settings` overrides
and :meth:`Settings.with_overrides` speak the flat names (``worker_concurrency``), mapped to
their sections by :data:`FIELD_PATHS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from dtq_core.errors import SettingsError
from dtq_core.infra.origins import COMPOSE_HOSTS, LOCAL_HOSTS, WebPolicy, split_host
from dtq_core.infra.settings.base import Environment, Section, env_name
from dtq_core.infra.settings.platform import ObservabilitySettings, RedisSettings
from dtq_core.infra.settings.rules import (
    check_api,
    check_environment,
    check_lease,
    check_observability,
    check_processes,
    check_redis,
    check_replica_wait,
    check_retry_delays,
    check_web,
)
from dtq_core.infra.settings.services import (
    ApiSettings,
    GatewaySettings,
    SchedulerSettings,
    WorkerSettings,
)
from dtq_core.infra.settings.tasks import QueueSettings, RetrySettings, TaskSettings
from dtq_core.names import END


class Settings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Every ``DTQ_*`` setting: three deployment-wide fields, then one section per concern.

    A field's flat name is its variable name without ``DTQ_`` (``settings.api.port`` is
    ``DTQ_API_PORT``); the sections encode their fields under those names.
    """

    namespace: Annotated[
        str,
        Meta(
            pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}" + END,
            description="Prefix of every key; several deployments can share one Redis.",
        ),
    ] = "dtq"
    env: Annotated[
        Environment,
        Meta(description="`production` refuses to start the API without API keys."),
    ] = "development"
    allowed_hosts: Annotated[
        str,
        Meta(
            max_length=4096,
            description="Host names the ingest API and the event gateway answer, "
            "comma-separated (`dtq.example.com`), besides localhost, 127.0.0.1, [::1], IP "
            "addresses, DTQ_API_HOST, DTQ_GATEWAY_HOST and the compose service names; `*` for "
            "any. A request for any other Host gets a 421, so a DNS-rebinding page cannot reach "
            "the services through a visitor's browser: list the name browsers use for the "
            "dashboard.",
        ),
    ] = ""
    redis: RedisSettings = msgspec.field(default_factory=RedisSettings)
    api: ApiSettings = msgspec.field(default_factory=ApiSettings)
    gateway: GatewaySettings = msgspec.field(default_factory=GatewaySettings)
    worker: WorkerSettings = msgspec.field(default_factory=WorkerSettings)
    scheduler: SchedulerSettings = msgspec.field(default_factory=SchedulerSettings)
    tasks: TaskSettings = msgspec.field(default_factory=TaskSettings)
    queues: QueueSettings = msgspec.field(default_factory=QueueSettings)
    retries: RetrySettings = msgspec.field(default_factory=RetrySettings)
    observability: ObservabilitySettings = msgspec.field(default_factory=ObservabilitySettings)

    def __post_init__(self) -> None:
        # The order of the checks before the split into sections: the first broken rule wins.
        check_lease(self.worker)
        check_processes(self.worker)
        check_retry_delays(self.retries)
        check_redis(self.redis)
        check_replica_wait(self.redis, self.scheduler)
        check_api(self.api)
        check_web(self.api, self.gateway, self.extra_hosts)
        check_environment(self.env, self.api)
        check_observability(self.observability)

    @property
    def extra_hosts(self) -> tuple[str, ...]:
        """``DTQ_ALLOWED_HOSTS`` as a tuple of lower-case entries."""
        return tuple(h.strip().lower() for h in self.allowed_hosts.split(",") if h.strip())

    def web_policy(self, *, origins: bool) -> WebPolicy:
        """The Host names served and the browser origins accepted (:mod:`dtq_core.infra.origins`).

        Args:
            origins: whether ``DTQ_GATEWAY_ALLOWED_ORIGINS`` applies (the event gateway); the
                API accepts its own origin only, since it answers no CORS request.
        """
        named = (split_host(h) for h in (self.api.host, self.gateway.host, *self.extra_hosts))
        hosts = {*LOCAL_HOSTS, *COMPOSE_HOSTS, "*" if "*" in self.extra_hosts else ""}
        hosts |= {found[0] for found in named if found is not None}
        hosts.discard("")
        return WebPolicy(frozenset(hosts), self.gateway.origins if origins else ())

    def value(self, name: str) -> Any:
        """The setting of flat name ``name`` (``worker_concurrency``), as variables and the
        reference name it.

        Raises:
            SettingsError: when ``name`` is not a setting.
        """
        check_known([name])
        section, attr = FIELD_PATHS[name]
        return getattr(getattr(self, section) if section else self, attr)

    def with_overrides(self, **changes: Any) -> Settings:
        """A copy with the flat-named fields in ``changes`` replaced, validated again.

        Raises:
            SettingsError: when a name is not a setting, or the result breaks a rule.
        """
        grouped = group_by_section(changes, encoded=False)
        top = grouped.pop("", {})
        sections = {
            name: msgspec.structs.replace(getattr(self, name), **values)
            for name, values in grouped.items()
        }
        return msgspec.structs.replace(self, **top, **sections)


SECTIONS: Mapping[str, type[Section]] = {
    f.name: f.type
    for f in msgspec.structs.fields(Settings)
    if isinstance(f.type, type) and issubclass(f.type, Section)
}
"""Section attribute of :class:`Settings` -> its struct, in the order of the reference."""


def _field_paths() -> dict[str, tuple[str, str]]:
    paths: dict[str, tuple[str, str]] = {}
    for field in msgspec.structs.fields(Settings):
        if field.name in SECTIONS:
            for inner in msgspec.structs.fields(SECTIONS[field.name]):
                paths[inner.encode_name] = (field.name, inner.name)
        else:
            paths[field.encode_name] = ("", field.name)
    return paths


FIELD_PATHS: Mapping[str, tuple[str, str]] = _field_paths()
"""Flat setting name -> (section attribute, or "" for a top-level field; field attribute)."""


def check_known(names: list[str]) -> None:
    """Refuse override names that are no setting (the first, with the list of known ones)."""
    unknown = sorted(set(names) - set(FIELD_PATHS))
    if unknown:
        raise SettingsError(
            f"{unknown[0]!r} ({env_name(unknown[0])}) is not a dtq setting; known settings: "
            + ", ".join(sorted(FIELD_PATHS)),
            variable=env_name(unknown[0]),
        )


def group_by_section(flat: Mapping[str, Any], *, encoded: bool) -> dict[str, dict[str, Any]]:
    """Flat-named values grouped by section ("" for the top level).

    Args:
        encoded: key the values by their flat names (the input of ``msgspec.convert``), else
            by their field attributes (the input of ``msgspec.structs.replace``).
    """
    check_known(list(flat))
    grouped: dict[str, dict[str, Any]] = {}
    for name, value in flat.items():
        section, attr = FIELD_PATHS[name]
        grouped.setdefault(section, {})[name if encoded else attr] = value
    return grouped
