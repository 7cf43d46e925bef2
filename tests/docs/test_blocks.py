"""How the docs test reads a page (no stack needed): markers, commands, documented answers,
and the comparison that makes a changed example fail."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs import blocks as md
from tests.docs.conftest import DocsStack
from tests.docs.test_docs import PAGES, Page

ILLUSTRATIONS = {"", "json", "js", "text", "toml"}
"""Fence languages that show something without being run; any other must be sh or python."""

PAGE = """# A page

*Not run by the docs test: needs docker-compose.*

```sh
docker-compose up -d
```

*Keeps running until Ctrl-C: start it in a terminal of its own and
wait for its `worker_started` line.*

```sh
uv run dtq-worker --app myapp.tasks:registry
```

```python
# myapp/tasks.py
registry = None
```

```sh
curl -sS -X POST "$API/api/v1/tasks" -H 'Content-Type: application/json' \\
  -d '{"task": "emails.send", "queue": "emails",
       "priority": 7}'
# 201  Location: /api/v1/tasks/emails:3f0c...
# {"id": "emails:3f0c...", "status": "queued", "queue": "emails", "created": true}
# every queue: a prose comment before the next command
curl -sS "$API/ready"    # 200 {"status": "ready", "redis": "ok"}
                         # 503 {"status": "not_ready", ..., "reasons": [...]}
curl -sS "$API/metrics"  # Prometheus text format
uv run dtq enqueue x --wait 10   # exit 1 {"status": "dead", ...}
```

```sh
$ uv run python -m dtq_core.infra.auth ci-producer submit
secret (give it to the client, shown once): dtq_Jx0...
```

```json
{"not": "run"}
```
"""


@pytest.fixture
def page(tmp_path: Path) -> list[md.Block]:
    path = tmp_path / "page.md"
    path.write_text(PAGE)
    return md.blocks(path)


def test_markers_files_and_illustrations(page: list[md.Block]) -> None:
    skip, worker, tasks, curls, prompt, sample = page
    assert skip.skip == "needs docker-compose"
    assert (worker.background, worker.wait_for) == (True, "worker_started")
    assert (tasks.kind, tasks.file_path) == ("file", "myapp/tasks.py")
    assert [curls.kind, prompt.kind, sample.kind] == ["shell", "shell", "illustration"]


def test_commands_and_their_documented_answers(page: list[md.Block]) -> None:
    submit, ready, metrics, enqueue = md.commands(page[3])
    assert submit.text.endswith('"priority": 7}\'')
    assert len(submit.expected) == 1
    answer = submit.expected[0]
    assert answer.status == 201
    assert answer.headers == [("Location", "/api/v1/tasks/emails:3f0c...")]
    assert md.sample_json(answer.body)["status"] == "queued"
    assert [e.status for e in ready.expected] == [200, 503]
    assert metrics.expected == []
    assert enqueue.expected[0].exit == 1
    assert md.sample_json(enqueue.expected[0].body) == {"status": "dead"}
    (auth,) = md.commands(page[4])
    assert auth.output == ["secret (give it to the client, shown once): dtq_Jx0..."]


def test_elisions_in_samples() -> None:
    doc = md.sample_json('{"a": {"0": 0, ..., "9": 2}, "b": [...], "c": "x…", "d": 3,…}')
    assert doc == {"a": {"0": 0, "9": 2}, "b": [], "c": "x…", "d": 3}
    assert md.sample_json('{"status": "ok"} while the process lives') == {"status": "ok"}
    with pytest.raises(ValueError, match="not JSON"):
        md.sample_json('{"status": ok}')


def test_a_changed_answer_fails_and_an_elided_id_binds() -> None:
    doc = md.sample_json('{"id": "emails:3f0c...", "status": "queued", "created": true}')
    actual = {"id": "emails:" + "a" * 32, "status": "queued", "created": True, "extra": 1}
    bindings: dict[str, str] = {}
    assert md.match(doc, actual, bindings) == []
    assert bindings == {"emails:3f0c...": actual["id"]}
    assert md.match(doc, {**actual, "status": "running"}, {}) == [
        ".status: expected 'queued', got 'running'"
    ]
    assert md.match(doc, {**actual, "id": "default:" + "a" * 32}, {})
    assert md.match(doc, {"status": "queued", "created": True}, {}) == [".id: missing"]
    assert md.match({"depth": 12}, {"depth": "12"}, {})
    assert md.match({"items": [{"status": "dead"}]}, {"items": []}, {})
    when = {"ts": "2026-01-05T10:00:00.123456Z"}
    assert md.match(when, {"ts": "2026-12-01T13:39:30.815679Z"}, {}) == []
    assert md.match(when, {"ts": "1796132397162117"}, {})
    assert md.match({"items": [{"status": "dead"}]}, {"items": [{}, {"status": "dead"}]}, {}) == []


def test_printed_lines_match_with_elisions() -> None:
    assert md.text_matches("secret: dtq_Jx0...", "secret: dtq_ICr7uHUk")
    assert md.text_matches("entry: ci:submit:4f1c...e9", "entry: ci:submit:a939fe3c")
    assert not md.text_matches("entry: ci:submit:4f1c...e9", "entry: ci:read:a939fe3c")
    assert md.text_matches("succeeded {'sent_to': 'a@b.c'}", "succeeded {'sent_to': 'a@b.c'}")


@pytest.mark.parametrize("path", PAGES, ids=[p.name for p in PAGES])
def test_every_block_of_the_docs_reads(path: Path) -> None:
    """Without a stack: every fence is a known kind, and every answer a page shows parses, so
    a broken sample fails fast too."""
    for block in md.blocks(path):
        assert block.kind != "illustration" or block.lang in ILLUSTRATIONS, block.where()
        if block.kind != "shell" or block.skip:
            continue
        for command in md.commands(block):
            for expected in command.expected:
                if expected.body:
                    md.sample_json(expected.body)


def test_a_page_reaches_the_test_stack_and_uses_earlier_answers(tmp_path: Path) -> None:
    stack = DocsStack(
        redis_url="redis://127.0.0.1:7001/0",
        redis_dir=tmp_path,
        open_api="http://127.0.0.1:7002",
        keyed_api="http://127.0.0.1:7003",
        gateway="http://127.0.0.1:7004",
        keys={"submit": "s", "read": "r", "admin": "a"},
        entries="",
        logs=tmp_path,
    )
    page = Page(tmp_path / "api.md", stack, tmp_path)
    assert page.env()["API"] == stack.keyed_api
    task_id = "emails:" + "b" * 32
    page.bindings["emails:3f0c..."] = task_id
    page.remember_ids('{"results": [{"task": {"id": "default:' + "c" * 32 + '"}}]}')
    command = (
        "curl http://127.0.0.1:8000/api/v1/tasks/emails:3f0c... http://localhost:8002/sse "
        "redis://localhost:6379/0 /tasks/default:6b1f…/result DTQ_WORKER_METRICS_PORT=8011"
    )
    assert page.rewrite(command) == (
        f"curl http://127.0.0.1:7002/api/v1/tasks/{task_id} http://localhost:7004/sse "
        f"redis://localhost:7001/0 /tasks/default:{'c' * 32}/result DTQ_WORKER_METRICS_PORT=0"
    )
    assert page.fixed_port(page.rewrite("curl http://127.0.0.1:3000/")) == 3000
