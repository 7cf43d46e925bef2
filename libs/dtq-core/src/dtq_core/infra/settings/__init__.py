"""Typed settings from ``DTQ_*`` environment variables, validated once at start-up.

``load_settings(os.environ)`` is called by each service's entry point and the result is
passed down; no other module reads the environment. The settings are grouped by concern:
``settings.redis``, ``.api``, ``.gateway``, ``.worker``, ``.scheduler``, ``.tasks``,
``.queues``, ``.retries`` and ``.observability``, beside three deployment-wide fields
(``namespace``, ``env``, ``allowed_hosts``). The variable names stay flat (``DTQ_API_PORT``
is ``settings.api.port``). ``docs/configuration.md`` is generated from these structs
(``python -m dtq_devtools.configdoc``), so it cannot drift.

Modules, bottom up: ``base`` (prefix, section base, value types), the sections (``platform``,
``services``, ``tasks``), ``rules`` (checks between fields), ``model`` (:class:`Settings` and
the flat-name index), ``loading`` (environment -> settings, the start-up prologue).
"""

from dtq_core.infra.settings.base import BOOL_SPELLINGS, PREFIX, Environment, LogLevel, env_name
from dtq_core.infra.settings.loading import (
    exit_on_settings_error,
    load_settings,
    schema_properties,
    setting_names,
    settings_or_exit,
)
from dtq_core.infra.settings.model import FIELD_PATHS, SECTIONS, Settings
from dtq_core.infra.settings.platform import ObservabilitySettings, RedisSettings
from dtq_core.infra.settings.rules import public_url, read_secret_file
from dtq_core.infra.settings.services import (
    ApiSettings,
    GatewaySettings,
    SchedulerSettings,
    WorkerSettings,
)
from dtq_core.infra.settings.tasks import QueueSettings, RetrySettings, TaskSettings

__all__ = [
    "BOOL_SPELLINGS",
    "FIELD_PATHS",
    "PREFIX",
    "SECTIONS",
    "ApiSettings",
    "Environment",
    "GatewaySettings",
    "LogLevel",
    "ObservabilitySettings",
    "QueueSettings",
    "RedisSettings",
    "RetrySettings",
    "SchedulerSettings",
    "Settings",
    "TaskSettings",
    "WorkerSettings",
    "env_name",
    "exit_on_settings_error",
    "load_settings",
    "public_url",
    "read_secret_file",
    "schema_properties",
    "setting_names",
    "settings_or_exit",
]
