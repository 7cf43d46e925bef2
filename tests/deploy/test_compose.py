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

from dtq_core.infra.redis_url import parse_redis_url
from tests.deploy.conftest import ROOT, need_tool

ONESHOTS = {"migrate", "redis-cluster-create"}
"""Jobs that run to completion: no healthcheck (others wait for their exit code instead)."""


def env_file(path: Path) -> dict[str, str]:
    """The ``NAME=value`` lines of an env file (comments and blank lines left out)."""
    env = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, value = line.partition("=")
            env[name] = value
    return env


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
    env = env_file(ROOT / ".env.example")
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


REDIS_NODES = {
    "redis",
    *(f"redis-node-{i}" for i in range(2, 7)),
    "redis-cluster-create",
    "redis-replica",
    "sentinel-1",
    "sentinel-2",
    "sentinel-3",
}
"""Redis itself: the standalone node and those of the cluster and sentinel profiles."""
DATA_CLIENTS = {
    *REDIS_NODES,
    "migrate",
    "ingest-api",
    "worker",
    "scheduler-leader",
    "event-gateway",
}
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


LIVENESS_PORTS = {
    "worker": "DTQ_WORKER_METRICS_PORT",
    "scheduler-leader": "DTQ_SCHEDULER_METRICS_PORT",
}
"""Services whose liveness is ``/health`` on their metrics port (docs/observability.md)."""


@pytest.mark.parametrize("name", LIVENESS_PORTS)
def test_worker_and_scheduler_probe_health_on_their_metrics_port(
    config: dict[str, Any], name: str
) -> None:
    """``/metrics`` answers from a thread even when the event loop is stuck; ``/health``
    does not. The compose healthcheck and the image's (its build argument) both probe it."""
    svc = config["services"][name]
    url = f"http://127.0.0.1:{svc['environment'][LIVENESS_PORTS[name]]}/health"
    probe = " ".join(svc["healthcheck"]["test"])
    assert f"urlopen('{url}'" in probe
    assert "/metrics" not in probe
    assert svc["build"]["args"]["HEALTHCHECK_URL"] == url
    assert f"{svc['environment'][LIVENESS_PORTS[name]]}" in svc["expose"]


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


PROFILES = {
    "cluster": {"redis", *(f"redis-node-{i}" for i in range(2, 7)), "redis-cluster-create"},
    "sentinel": {"redis", "redis-replica", "sentinel-1", "sentinel-2", "sentinel-3"},
}
"""The Redis services of each topology profile (``redis`` is in every topology)."""
DTQ_SERVICES = ("migrate", "ingest-api", "worker", "scheduler-leader", "event-gateway")


def test_the_topology_profiles_hold_their_redis_services(raw: dict[str, Any]) -> None:
    for profile, names in PROFILES.items():
        tagged = {n for n, s in raw["services"].items() if profile in s.get("profiles", [])}
        assert tagged == names - {"redis"}, profile
    assert "profiles" not in raw["services"]["redis"]


def test_no_default_service_depends_on_a_profile(raw: dict[str, Any]) -> None:
    """docker-compose refuses to start a service whose dependency's profile is off ("pulled in
    as a dependency ... but is not enabled by the active profiles"): the services wait for
    ``redis`` alone, whose healthcheck waits for the topology."""
    services = raw["services"]
    for name, svc in services.items():
        if svc.get("profiles"):
            continue
        for dependency in svc.get("depends_on", {}):
            assert not services[dependency].get("profiles"), (name, dependency)


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_a_profile_env_file_points_every_service_at_its_topology(profile: str) -> None:
    env = env_file(ROOT / "deploy" / "compose" / f"{profile}.env")
    assert env["COMPOSE_PROFILES"] == profile
    services = compose_config(env)["services"]
    url = env["DTQ_REDIS_URL"]
    for name in DTQ_SERVICES:
        assert services[name]["environment"]["DTQ_REDIS_URL"] == url, name
    target = parse_redis_url(url)
    assert target.topology.value == profile
    for host, port in target.nodes:
        assert host in PROFILES[profile], host
        assert int(services[host]["expose"][0]) == port, host
    redis = services["redis"]
    if profile == "cluster":
        assert redis["command"][redis["command"].index("--cluster-enabled") + 1] == "yes"
        assert redis["environment"]["REDIS_CLUSTER_ENABLED"] == "yes"  # health.sh: cluster ok
        nodes = sorted(PROFILES["cluster"] - {"redis-cluster-create"})
        script = (ROOT / "deploy" / "redis" / "cluster-create.sh").read_text()
        assert f'nodes="{" ".join(nodes)}"' in script
        for node in nodes:
            command = services[node]["command"]
            assert command[command.index("--cluster-enabled") + 1] == "yes", node
    else:
        assert target.master == "dtqmaster"
        sentinels = [f"{host}:{port}" for host, port in target.nodes]
        assert redis["environment"]["DTQ_SENTINELS"].split() == sentinels  # health.sh waits
        script = (ROOT / "deploy" / "redis" / "sentinel.sh").read_text()
        assert f"sentinel monitor {target.master} redis 6379 2" in script
        assert "--replicaof" in services["redis-replica"]["command"]


def test_the_default_is_one_standalone_redis(config: dict[str, Any]) -> None:
    redis = config["services"]["redis"]
    assert redis["command"][redis["command"].index("--cluster-enabled") + 1] == "no"
    assert redis["environment"]["DTQ_SENTINELS"] == ""
    for name in DTQ_SERVICES:
        assert config["services"][name]["environment"]["DTQ_REDIS_URL"] == "redis://redis:6379/0"


def test_the_topology_user_is_the_one_replicas_sentinels_and_the_cluster_job_use() -> None:
    folder = ROOT / "deploy" / "redis"
    assert "masteruser dtq-topology" in (folder / "node.sh").read_text()
    assert "auth-user dtqmaster dtq-topology" in (folder / "sentinel.sh").read_text()
    assert "--user dtq-topology --cluster create" in (folder / "cluster-create.sh").read_text()
    assert "user dtq-topology on " in (folder / "users.acl.template").read_text()
