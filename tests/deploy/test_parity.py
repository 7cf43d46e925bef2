"""``just up`` runs what docker-compose.yml runs: the same services, commands, ports and
``DTQ_*`` environment, except the differences deploy/local/run.py documents by name."""

from __future__ import annotations

import re
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import ROOT, load_module

URL = "redis://127.0.0.1:6379/0"


@pytest.fixture(scope="module")
def run() -> ModuleType:
    return load_module("deploy/local/run.py", "dtq_deploy_local_run")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    # Images and published ports as compose resolves them when .env leaves them alone.
    text = re.sub(
        r"\$\{\w+_(?:IMAGE|PORT):-([^}]*)\}", r"\1", (ROOT / "docker-compose.yml").read_text()
    )
    loaded: dict[str, Any] = yaml.safe_load(text)
    services: dict[str, Any] = loaded["services"]
    return services


def local_by_service(run: ModuleType) -> dict[str, list[Any]]:
    """The local processes by compose service, without the documented local-only ones."""
    grouped: dict[str, list[Any]] = {}
    for svc in run.stack(URL, 1):
        if svc.compose not in run.LOCAL_ONLY_SERVICES:
            grouped.setdefault(svc.compose, []).append(svc)
    return grouped


def dtq_env(svc: dict[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in (svc.get("environment") or {}).items() if k.startswith("DTQ_")}


def container_port(svc: dict[str, Any]) -> int | None:
    """The port a compose service listens on: its ``expose:``, else its published target."""
    if svc.get("expose"):
        return int(svc["expose"][0])
    if svc.get("ports"):
        return int(str(svc["ports"][0]).rsplit(":", 1)[1])
    return None


def host_port(svc: dict[str, Any]) -> int | None:
    if svc.get("ports"):
        return int(str(svc["ports"][0]).rsplit(":", 2)[1])
    return None


def test_same_services(run: ModuleType, compose: dict[str, Any]) -> None:
    local = set(local_by_service(run)) | {"redis"}
    assert set(run.LOCAL_ONLY_SERVICES) <= {s.compose for s in run.stack(URL, 1)}
    assert local | set(run.COMPOSE_ONLY_SERVICES) == set(compose)
    assert not local & set(run.COMPOSE_ONLY_SERVICES)
    assert not set(run.LOCAL_ONLY_SERVICES) & set(compose)


def test_replicas(run: ModuleType, compose: dict[str, Any]) -> None:
    local = local_by_service(run)
    for name, replicas in local.items():
        wanted = compose[name].get("deploy", {}).get("replicas", 1)
        assert len(replicas) == wanted, name
    assert len(run.stack(URL, 3)) == len(run.stack(URL, 1)) + 2  # --workers scales workers


def test_same_commands(run: ModuleType, compose: dict[str, Any]) -> None:
    for name, replicas in local_by_service(run).items():
        if name in {"dashboard", "prometheus"}:
            continue  # same programs, with paths of this machine: see the next tests
        for svc in replicas:
            assert svc.command == compose[name]["command"], name


def test_dashboard_and_prometheus_are_the_same_programs(
    run: ModuleType, compose: dict[str, Any]
) -> None:
    local = local_by_service(run)
    dashboard = local["dashboard"][0]
    assert dashboard.command[0] == compose["dashboard"]["command"][0] == "nginx"
    assert dashboard.requires == "nginx"
    prometheus = local["prometheus"][0]
    assert prometheus.requires == "prometheus"
    flags = {a.split("=")[0] for a in prometheus.command[1:]}
    assert flags <= {a.split("=")[0] for a in compose["prometheus"]["command"]}


def test_redis_uses_the_same_config(run: ModuleType, compose: dict[str, Any]) -> None:
    """Every Redis node, local or in compose, runs redis-server on deploy/redis/redis.conf:
    compose's through deploy/redis/node.sh, the local topologies' through an include."""
    local = run.redis_command(6379, ROOT / ".data" / "redis")
    assert local[0] == "redis-server"
    assert local[1] == str(ROOT / "deploy" / "redis" / "redis.conf")
    node_sh = (ROOT / "deploy" / "redis" / "node.sh").read_text()
    assert "exec redis-server /usr/local/etc/redis/redis.conf " in node_sh
    for name, svc in compose.items():
        if svc.get("image", "").startswith("redis:") and "node.sh" in " ".join(svc["command"]):
            mounted = {v.split(":")[1]: v.split(":")[0] for v in svc["volumes"]}
            assert mounted["/usr/local/etc/redis/redis.conf"] == "./deploy/redis/redis.conf", name
            assert mounted[svc["command"][1]] == "./deploy/redis/node.sh", name
    assert int(compose["redis"]["expose"][0]) == 6379
    topologies = (ROOT / "deploy" / "local" / "redis_topologies.py").read_text()
    assert "include {base_conf}" in topologies


def test_same_ports(run: ModuleType, compose: dict[str, Any]) -> None:
    for name, replicas in local_by_service(run).items():
        first = replicas[0]
        if name in {"dashboard", "prometheus"}:
            assert first.port == host_port(compose[name]), name  # the port a browser opens
        else:
            assert first.port == container_port(compose[name]), name
        for i, svc in enumerate(replicas):
            if svc.port is not None:
                assert svc.port == first.port + run.REPLICA_PORT_STEP * i, svc.name


def test_same_dtq_environment(run: ModuleType, compose: dict[str, Any]) -> None:
    for name, replicas in local_by_service(run).items():
        theirs = {k: v for k, v in dtq_env(compose[name]).items() if k not in run.COMPOSE_ONLY_ENV}
        ours = {k: v for k, v in replicas[0].env.items() if k not in run.LOCAL_ONLY_ENV}
        # Both point the service at Redis; the address differs by nature.
        assert ("DTQ_REDIS_URL" in ours) == ("DTQ_REDIS_URL" in theirs), name
        if "DTQ_REDIS_URL" in ours:
            assert ours.pop("DTQ_REDIS_URL") == URL
            # compose's default, which deploy/compose/<profile>.env replaces (test_compose.py)
            assert theirs.pop("DTQ_REDIS_URL") == "${DTQ_REDIS_URL:-redis://redis:6379/0}"
        assert ours == theirs, name


def test_every_exception_is_used_and_explained(run: ModuleType, compose: dict[str, Any]) -> None:
    used = set()
    for svc in compose.values():
        used |= set(dtq_env(svc))
    for var, reason in run.COMPOSE_ONLY_ENV.items():
        assert var in used, f"{var} is listed as compose-only but compose does not set it"
        assert len(reason) > 20, var
    local_vars = {k for s in run.stack(URL, 1) for k in s.env}
    for var, reason in run.LOCAL_ONLY_ENV.items():
        assert var in local_vars, var
        assert len(reason) > 20, var
    for name, reason in run.COMPOSE_ONLY_SERVICES.items():
        assert name in compose, name
        assert len(reason) > 20, name
    for name, reason in run.LOCAL_ONLY_SERVICES.items():
        assert len(reason) > 20, name


def test_local_prometheus_jobs_are_the_compose_service_names(run: ModuleType) -> None:
    services = run.stack(URL, 2)
    config = yaml.safe_load(run.prometheus_config(services))
    jobs = {c["job_name"]: c["static_configs"][0]["targets"] for c in config["scrape_configs"]}
    compose_jobs = {
        c["job_name"]
        for c in yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())[
            "scrape_configs"
        ]
    }
    assert set(jobs) == compose_jobs
    assert jobs["worker"] == ["127.0.0.1:8001", "127.0.0.1:8011"]
    assert jobs["scheduler-leader"] == ["127.0.0.1:8003", "127.0.0.1:8013"]
    assert jobs["ingest-api"] == ["127.0.0.1:8000"]
    assert jobs["event-gateway"] == ["127.0.0.1:8002"]


def test_console_scripts_resolve(run: ModuleType) -> None:
    for svc in run.stack(URL, 1):
        if svc.requires is None:
            argv = run.executable(svc.command)
            assert argv[-len(svc.command) + 1 :] == svc.command[1:] or len(svc.command) == 1
            assert argv[0] != svc.command[0] or svc.command[0] not in run.ENTRY_POINTS
