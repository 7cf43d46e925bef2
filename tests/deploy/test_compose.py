"""docker-compose.yml: valid for Debian's docker-compose, and hardened (catalogue H2).

There is no Docker engine here: ``docker-compose config`` validates and resolves the file;
the hardening rules are checked on the resolved file with PyYAML.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import ROOT, need_tool

ONESHOTS = {"migrate"}
"""Jobs that run to completion: no healthcheck (others wait for their exit code instead)."""


def compose_config(env: dict[str, str] | None = None) -> dict[str, Any]:
    """The file as docker-compose resolves it (anchors merged, variables interpolated)."""
    tool = need_tool("docker-compose")
    done = subprocess.run(
        [tool, "-f", str(ROOT / "docker-compose.yml"), "--profile", "tracing", "config"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
    )
    assert done.returncode == 0, done.stderr
    config: dict[str, Any] = yaml.safe_load(done.stdout)
    return config


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    return compose_config()


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


def test_compose_config_is_valid() -> None:
    tool = need_tool("docker-compose")
    done = subprocess.run(
        [tool, "-f", "docker-compose.yml", "config", "-q"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_env_example_variables_interpolate() -> None:
    env = {}
    for line in (ROOT / ".env.example").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, value = line.partition("=")
            env[name] = value
    env["DTQ_OTLP_ENDPOINT"] = "http://otel-collector:4318"
    env["DASHBOARD_BIND"] = "0.0.0.0"  # noqa: S104 - the documented opt-in
    services = compose_config(env)["services"]
    assert services["worker"]["environment"]["DTQ_OTLP_ENDPOINT"] == "http://otel-collector:4318"
    assert host_ip(services["dashboard"]["ports"][0]) == "0.0.0.0"  # noqa: S104


def host_ip(port: str | dict[str, Any]) -> str:
    """The host address of a published port, short (``IP:HOST:CONTAINER``) or long syntax."""
    if isinstance(port, dict):
        return str(port.get("host_ip", "0.0.0.0"))  # noqa: S104 - compose's default
    parts = str(port).rsplit(":", 2)
    return parts[0] if len(parts) == 3 else "0.0.0.0"  # noqa: S104


def volume_source(volume: str | dict[str, Any]) -> str:
    if isinstance(volume, dict):
        return str(volume.get("source", ""))
    return str(volume).split(":", 1)[0]


def _non_root(svc: dict[str, Any]) -> bool:
    user = str(svc.get("user", ""))
    return bool(user) and user.split(":", maxsplit=1)[0] not in {"0", "root"}


def _limited(svc: dict[str, Any]) -> bool:
    limits = svc.get("deploy", {}).get("resources", {}).get("limits", {})
    return bool(limits.get("memory")) and bool(limits.get("cpus")) and bool(svc.get("pids_limit"))


def _rotated(svc: dict[str, Any]) -> bool:
    logging = svc.get("logging", {})
    return logging.get("driver") == "json-file" and "max-size" in logging.get("options", {})


RULES: list[tuple[str, Any]] = [
    ("runs as root (no non-root user:)", _non_root),
    ("root file system is writable (read_only: true)", lambda s: s.get("read_only") is True),
    ("capabilities not dropped (cap_drop: [ALL])", lambda s: s.get("cap_drop") == ["ALL"]),
    (
        "no security_opt no-new-privileges:true",
        lambda s: "no-new-privileges:true" in s.get("security_opt", []),
    ),
    ("no init process (init: true)", lambda s: s.get("init") is True),
    ("no memory, cpu and pids limits", _limited),
    ("logs not rotated", _rotated),
    ("privileged", lambda s: not s.get("privileged")),
    ("network_mode: host", lambda s: s.get("network_mode") != "host"),
    (
        "mounts the Docker socket",
        lambda s: not any("docker.sock" in volume_source(v) for v in s.get("volumes", [])),
    ),
    (
        "publishes a port beyond loopback",
        lambda s: all(host_ip(p) == "127.0.0.1" for p in s.get("ports", [])),
    ),
]


def _violations(name: str, svc: dict[str, Any]) -> list[str]:
    found = [message for message, holds in RULES if not holds(svc)]
    if name not in ONESHOTS and not svc.get("healthcheck", {}).get("test"):
        found.append("no healthcheck")
    return found


def test_every_service_is_hardened(config: dict[str, Any]) -> None:
    violations = {
        name: found for name, svc in config["services"].items() if (found := _violations(name, svc))
    }
    assert violations == {}


def test_redis_is_internal_and_unpublished(config: dict[str, Any]) -> None:
    redis = config["services"]["redis"]
    assert "ports" not in redis
    assert set(redis["networks"]) == {"data"}
    assert config["networks"]["data"]["internal"] is True
    for name, svc in config["services"].items():
        if "data" in svc.get("networks", {}):
            assert not svc.get("ports"), name
    # Published ports come only from services on the edge network.
    for name, svc in config["services"].items():
        if svc.get("ports"):
            assert "edge" in svc["networks"], name


DATA_CLIENTS = {"redis", "migrate", "ingest-api", "worker", "scheduler-leader", "event-gateway"}
"""Redis and the services that hold a Redis ACL user: the only members of ``data``."""


def test_the_data_network_is_redis_and_its_clients_only(config: dict[str, Any]) -> None:
    """Monitoring (Prometheus, the collector) reaches the services on ``app``; a compromised
    monitoring container must not be one connection away from Redis."""
    on_data = {n for n, s in config["services"].items() if "data" in s.get("networks", {})}
    assert on_data == DATA_CLIENTS
    for name in ("prometheus", "otel-collector"):
        assert "data" not in config["services"][name]["networks"], name
    # Every service Prometheus scrapes shares ``app`` with it.
    for name in ("ingest-api", "worker", "scheduler-leader", "event-gateway"):
        assert "app" in config["services"][name]["networks"], name
    # Only workers (handlers call the outside world) leave the host's internal networks.
    leaving = {n for n, s in config["services"].items() if "egress" in s.get("networks", {})}
    assert leaving == {"worker"}


def test_only_the_dashboard_may_leave_loopback(raw: dict[str, Any]) -> None:
    for name, svc in raw["services"].items():
        for port in svc.get("ports", []):
            if name == "dashboard":
                assert port.startswith("${DASHBOARD_BIND:-127.0.0.1}:"), port
            else:
                assert port.startswith("127.0.0.1:"), (name, port)


def _seconds(text: str) -> float:
    match = re.fullmatch(r"(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?", text)
    assert match, text
    return int(match.group(1) or 0) * 60 + float(match.group(2) or 0)


def test_worker_grace_period_covers_the_drain(config: dict[str, Any]) -> None:
    worker = config["services"]["worker"]
    drain = float(worker["environment"]["DTQ_DRAIN_TIMEOUT_S"])
    assert _seconds(worker["stop_grace_period"]) >= drain + 5
    assert worker.get("stop_signal", "SIGTERM") == "SIGTERM"


def test_secrets_come_from_files_never_from_values(config: dict[str, Any]) -> None:
    for name, svc in config["services"].items():
        env = svc.get("environment", {})
        for var, value in env.items():
            assert "PASSWORD" not in var or var.endswith("_FILE"), (name, var)
            assert not re.search(r"redis://[^@/]*:[^@/]*@", str(value)), (name, var)
        assert "DTQ_API_KEYS" not in env, name
        for var in ("DTQ_REDIS_PASSWORD_FILE", "DTQ_API_KEYS_FILE"):
            if var in env:
                mounted = {s["source"] for s in svc.get("secrets", [])}
                assert Path(env[var]).name in mounted, (name, var)
    for secret in config["secrets"].values():
        assert "deploy/secrets/" in secret["file"]


def test_every_redis_client_has_its_own_acl_user(config: dict[str, Any]) -> None:
    users: dict[str, str] = {}
    for name, svc in config["services"].items():
        env = svc.get("environment", {})
        if "DTQ_REDIS_URL" in env:
            assert "@" not in env["DTQ_REDIS_URL"], name
            users[name] = env["DTQ_REDIS_USERNAME"]
    assert len(set(users.values())) == len(users), users
    template = (ROOT / "deploy" / "redis" / "users.acl.template").read_text()
    for user in users.values():
        assert f"user {user} on " in template, user


def test_secret_files_are_the_generated_ones(
    config: dict[str, Any], secrets_dir: Path, make_secrets: ModuleType
) -> None:
    made = {p.name for p in secrets_dir.iterdir()}
    wanted = {Path(s["file"]).name for s in config["secrets"].values()}
    assert wanted <= made, wanted - made
    assert (secrets_dir.stat().st_mode & 0o077) == 0  # only the owner enters the folder


def test_services_wait_for_redis_and_the_library(config: dict[str, Any]) -> None:
    for name in ("ingest-api", "worker", "scheduler-leader", "event-gateway"):
        depends = config["services"][name]["depends_on"]
        assert depends["redis"]["condition"] == "service_healthy", name
        assert depends["migrate"]["condition"] == "service_completed_successfully", name
    migrate = config["services"]["migrate"]
    assert migrate["command"] == ["dtq", "migrate"]
    assert migrate["environment"]["DTQ_REDIS_USERNAME"] == "dtq-migrate"
    assert migrate["restart"] == "no"


def test_mounted_configs_exist(config: dict[str, Any]) -> None:
    for name, svc in config["services"].items():
        for volume in svc.get("volumes", []):
            source = volume_source(volume)
            if source.startswith("/"):
                assert Path(source).exists(), (name, source)
        build = svc.get("build")
        if build:
            assert (Path(build["context"]) / build["dockerfile"]).exists(), name


def test_tracing_profile(config: dict[str, Any], raw: dict[str, Any]) -> None:
    for name in ("otel-collector", "jaeger"):
        assert raw["services"][name]["profiles"] == ["tracing"]
    collector = yaml.safe_load((ROOT / "deploy" / "otel" / "collector.yaml").read_text())
    assert collector["receivers"]["otlp"]["protocols"]["http"]["endpoint"].endswith(":4318")
    assert collector["exporters"]["otlp/jaeger"]["endpoint"] == "jaeger:4317"
    for name in ("ingest-api", "worker", "scheduler-leader", "event-gateway"):
        assert "DTQ_OTLP_ENDPOINT" in config["services"][name]["environment"], name


def test_the_lint_catches_a_loose_service() -> None:
    loose = {
        "user": "0:0",
        "privileged": True,
        "network_mode": "host",
        "volumes": ["/var/run/docker.sock:/var/run/docker.sock"],
        "ports": ["3000:8080"],
    }
    found = _violations("loose", loose)
    assert len(found) == len(RULES) + 1  # every rule, and the missing healthcheck
