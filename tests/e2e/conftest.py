"""The dashboard end to end: the built SPA behind nginx, the real API, gateway, worker and
scheduler processes on the suite's redis-server, driven by the system's headless Chromium.

Fixtures:
- ``stack`` (module): builds the SPA when its sources changed, starts every process with API
  keys configured, and yields URLs, keys and an admin HTTP client for the API;
- ``browser`` (module): Chromium through playwright, launched from its Debian path (no
  browser is ever downloaded);
- ``page`` (function): a 1280 px page signed in with the admin key; every console error and
  uncaught exception fails the test unless the test allowed that very message.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import httpx
import pytest
import redis as sync_redis
from playwright.sync_api import Browser, ConsoleMessage, Error, Page, Playwright, sync_playwright

from dtq_core.infra.auth import new_key
from dtq_devtools.testing import RedisServer, free_port, terminate, wait_until_sync
from dtq_devtools.testing.processes import ServiceProcess, scheduler_process, worker_process
from dtq_devtools.testing.tools import unavailable

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "services" / "dashboard"
DIST = DASHBOARD / "dist"
ARTIFACTS = Path(__file__).with_name("artifacts")
DOCS_IMAGES = ROOT / "docs" / "dashboard"
AXE = DASHBOARD / "node_modules" / "axe-core" / "axe.min.js"
"""axe-core, a dev dependency of the dashboard (its lockfile pins it): ``npm ci`` installs it."""
AXE_RULES = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"]
"""The rule sets checked: WCAG 2.2 A and AA, and axe's best practices."""
CHROMIUM = os.environ.get("DTQ_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
QUEUES = "default,reports,flaky,wide"
TRACE_URL = "http://127.0.0.1:16686/trace/{trace_id}"
"""The API's DTQ_TRACE_URL: the task page links a traced task's trace there."""


def _load_render() -> ModuleType:
    """deploy/nginx/render.py, which is a script, not an installed package."""
    spec = importlib.util.spec_from_file_location(
        "dtq_nginx_render", ROOT / "deploy" / "nginx" / "render.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


nginx_conf = _load_render()


def _need(tool: str, path: str | None) -> str:
    """The tool's path; without it, skip locally and fail under CI (which installs it)."""
    if path and Path(path).exists():
        return path
    unavailable(f"{tool} is not installed (apt-get install -y nginx chromium nodejs npm)")


def _newest(paths: list[Path]) -> float:
    newest = 0.0
    for path in paths:
        if path.is_dir():
            newest = max([newest, *(p.stat().st_mtime for p in path.rglob("*") if p.is_file())])
        elif path.exists():
            newest = max(newest, path.stat().st_mtime)
    return newest


def build_dashboard(npm: str) -> None:
    """``npm ci`` when the dependencies are missing or the lockfile changed, then ``npm run
    build`` when dist/ is older than any source (the OpenAPI document included)."""
    modules = DASHBOARD / "node_modules" / ".package-lock.json"
    lock = DASHBOARD / "package-lock.json"
    if not modules.exists() or lock.stat().st_mtime > modules.stat().st_mtime:
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=DASHBOARD, check=True)
    sources = [
        DASHBOARD / "src",
        DASHBOARD / "public",
        DASHBOARD / "index.html",
        DASHBOARD / "package.json",
        lock,
        DASHBOARD / "vite.config.ts",
        DASHBOARD / "tsconfig.json",
        ROOT / "docs" / "openapi.json",
    ]
    built = DIST / "index.html"
    if not built.exists() or built.stat().st_mtime < _newest(sources):
        subprocess.run([npm, "run", "build"], cwd=DASHBOARD, check=True)


@dataclass
class Stack:
    """The running stack: where it answers, its keys, and its processes."""

    url: str
    api_url: str
    gateway_port: int
    keys: dict[str, str]
    api: httpx.Client
    gateway: ServiceProcess
    gateway_args: tuple[str, list[str], dict[str, str], Path]
    redis: sync_redis.Redis
    processes: list[Any] = field(default_factory=list)

    def submit(self, task: str, **fields: Any) -> str:
        r = self.api.post("/api/v1/tasks", json={"task": task, **fields})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    def task(self, task_id: str) -> dict[str, Any]:
        r = self.api.get(f"/api/v1/tasks/{task_id}")
        assert r.status_code == 200, r.text
        return dict(r.json())

    def status(self, task_id: str) -> str:
        return str(self.task(task_id)["status"])

    def wait_status(self, task_id: str, *statuses: str, timeout: float = 15) -> dict[str, Any]:
        return dict(
            wait_until_sync(
                lambda: (t := self.task(task_id))["status"] in statuses and t,
                timeout=timeout,
                message=f"{task_id} {statuses}",
            )
        )

    def restart_gateway(self) -> None:
        module, args, env, log = self.gateway_args
        self.gateway = ServiceProcess(module, args, env, log).start()
        self.processes.append(self.gateway)
        wait_ready(f"http://127.0.0.1:{self.gateway_port}/ready", self.gateway)


def wait_ready(url: str, proc: Any, timeout: float = 90) -> None:
    """Until ``url`` answers 200 (four services start at once, each importing its world: on a
    loaded 2-core machine that alone has taken over 30 s); fail at once if ``proc`` exits."""

    def ready() -> bool:
        if not proc.alive():
            raise RuntimeError(f"{url}: the process exited:\n{proc.log()[-3000:]}")
        try:
            return httpx.get(url, timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until_sync(ready, timeout=timeout, interval=0.1, message=f"{url} ready")


class Nginx:
    """nginx run in the foreground from the rendered template (only this PID is signalled)."""

    def __init__(self, argv: list[str], log: Path) -> None:
        self.log_path = log
        with log.open("ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        terminate(self.proc)


@pytest.fixture(scope="module")
def stack(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    nginx = _need("nginx", shutil.which("nginx"))
    _need("chromium", CHROMIUM)
    npm = _need("npm", shutil.which("npm"))
    build_dashboard(npm)

    logs = tmp_path_factory.mktemp("e2e-logs")
    runtime = tmp_path_factory.mktemp("nginx")
    runtime.chmod(0o755)
    redis_url = redis_server.url
    redis = sync_redis.Redis.from_url(redis_url, decode_responses=True)
    redis.flushall()

    keys: dict[str, str] = {}
    entries = []
    for name, scope in (("operator", "admin"), ("viewer", "read"), ("producer", "submit")):
        secret, entry = new_key(name, scope)
        keys[scope] = secret
        entries.append(entry)
    api_port, gateway_port, web_port = free_port(), free_port(), free_port()
    common = {
        "DTQ_REDIS_URL": redis_url,
        "DTQ_API_KEYS": ",".join(entries),
        "DTQ_LOG_JSON": "true",
        "DTQ_TRACE_URL": TRACE_URL,
    }
    api = ServiceProcess(
        "dtq_ingest_api", [], {**common, "DTQ_API_PORT": str(api_port)}, logs / "api.log"
    )
    gateway_args = (
        "dtq_event_gateway",
        [],
        {**common, "DTQ_GATEWAY_PORT": str(gateway_port)},
        logs / "gateway.log",
    )
    gateway = ServiceProcess(*gateway_args)
    worker = worker_process(
        redis_url,
        logs / "worker.log",
        queues=QUEUES,
        concurrency=8,
        env={"DTQ_WORKER_ID": "e2e-worker-1"},
    )
    scheduler = scheduler_process(redis_url, logs / "scheduler.log")
    started: list[Any] = []
    try:
        for proc in (api, gateway, worker, scheduler):
            proc.start()
            started.append(proc)
        wait_ready(f"http://127.0.0.1:{api_port}/ready", api)
        wait_ready(f"http://127.0.0.1:{gateway_port}/ready", gateway)
        conf = runtime / "nginx.conf"
        conf.write_text(
            nginx_conf.render(
                f"127.0.0.1:{web_port}",
                f"127.0.0.1:{api_port}",
                f"127.0.0.1:{gateway_port}",
                DIST,
                runtime,
            )
        )
        web = Nginx(nginx_conf.nginx_argv(conf, runtime, nginx), logs / "nginx.log")
        started.append(web)
        wait_ready(f"http://127.0.0.1:{web_port}/health", web)
        client = httpx.Client(
            base_url=f"http://127.0.0.1:{api_port}",
            headers={"X-API-Key": keys["admin"]},
            timeout=10,
        )
        # The worker registers its tasks on start: submits are checked against them.
        wait_until_sync(
            lambda: client.get("/api/v1/workers").json()["items"],
            timeout=30,
            message="the worker registered",
        )
        stack = Stack(
            url=f"http://127.0.0.1:{web_port}",
            api_url=f"http://127.0.0.1:{api_port}",
            gateway_port=gateway_port,
            keys=keys,
            api=client,
            gateway=gateway,
            gateway_args=gateway_args,
            redis=redis,
            processes=started,
        )
        yield stack
        client.close()
    finally:
        for proc in reversed(started):
            proc.stop()
        redis.close()
        ARTIFACTS.mkdir(exist_ok=True)
        for log in logs.glob("*.log"):
            shutil.copyfile(log, ARTIFACTS / log.name)


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="module")
def browser(playwright: Playwright, stack: Stack) -> Iterator[Browser]:
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    yield browser
    browser.close()


class ConsoleWatch:
    """Every console error and uncaught exception of a page; some may be allowed by a test
    (the network errors Chromium logs by itself while the gateway is down, for instance)."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.allowed: list[re.Pattern[str]] = []

    def on_console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append(f"console: {message.text} ({message.location.get('url', '')})")

    def on_page_error(self, error: Error) -> None:
        self.errors.append(f"pageerror: {error}")

    def allow(self, pattern: str) -> None:
        self.allowed.append(re.compile(pattern))

    def unexpected(self) -> list[str]:
        return [e for e in self.errors if not any(p.search(e) for p in self.allowed)]


@dataclass
class Session:
    """A browser context and its page, its console watch, and helpers."""

    page: Page
    console: ConsoleWatch
    stack: Stack

    def open(self, path: str) -> Page:
        self.page.goto(self.stack.url + path)
        self.page.wait_for_selector("main#main")
        return self.page

    def wait_live(self) -> None:
        self.page.wait_for_selector(".conn[data-state='live']", timeout=15_000)

    def check_accessibility(self, where: str) -> None:
        """Run axe-core on the page as it is now; fail with every violation, readable.

        The script goes in through the DevTools protocol (``evaluate``), which the page's
        Content-Security-Policy does not govern: nothing about the page is loosened for it.
        """
        if not self.page.evaluate("typeof window.axe !== 'undefined'"):
            self.page.evaluate(AXE.read_text())
        result = self.page.evaluate(
            "rules => axe.run(document, {runOnly: {type: 'tag', values: rules},"
            " resultTypes: ['violations']})",
            AXE_RULES,
        )
        violations = [
            f"{v['id']} ({v['impact']}): {v['help']}\n"
            + "\n".join(f"    {n['target']}: {n['failureSummary']}" for n in v["nodes"][:5])
            for v in result["violations"]
        ]
        assert not violations, f"axe on {where}:\n" + "\n".join(violations)

    def screenshot(self, name: str) -> None:
        ARTIFACTS.mkdir(exist_ok=True)
        target = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(target), full_page=True)
        # Not a DTQ_ variable: the services refuse unknown DTQ_* settings in their environment.
        if os.environ.get("UPDATE_DASHBOARD_SCREENSHOTS") == "1":
            DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(target, DOCS_IMAGES / f"{name}.png")


def new_session(
    browser: Browser,
    stack: Stack,
    key: str | None,
    width: int = 1280,
    height: int = 860,
    *,
    color_scheme: Literal["light", "dark"] = "light",
) -> tuple[Session, Callable[[], None]]:
    context = browser.new_context(
        viewport={"width": width, "height": height}, color_scheme=color_scheme, locale="en-US"
    )
    if key is not None:
        # The dashboard keeps the key in sessionStorage: put it there before the app starts.
        context.add_init_script(f"window.sessionStorage.setItem('dtq.apiKey', {key!r});")
    page = context.new_page()
    page.set_default_timeout(15_000)
    console = ConsoleWatch()
    page.on("console", console.on_console)
    page.on("pageerror", console.on_page_error)
    return Session(page, console, stack), context.close


@pytest.fixture
def make_session(browser: Browser, stack: Stack) -> Iterator[Callable[..., Session]]:
    """Opens sessions with a given key (None: none) and size; each fails the test on
    unexpected console errors when it closes."""
    made: list[tuple[Session, Callable[[], None]]] = []

    def make(
        key: str | None,
        width: int = 1280,
        height: int = 860,
        *,
        color_scheme: Literal["light", "dark"] = "light",
    ) -> Session:
        made.append(new_session(browser, stack, key, width, height, color_scheme=color_scheme))
        return made[-1][0]

    yield make
    for _, close in made:
        close()
    for s, _ in made:
        assert s.console.unexpected() == []


@pytest.fixture
def session(make_session: Callable[..., Session], stack: Stack) -> Session:
    """A 1280 px page signed in with the admin key."""
    return make_session(stack.keys["admin"])
