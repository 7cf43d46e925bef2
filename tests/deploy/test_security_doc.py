"""docs/security.md's threat model names the tests that hold each control: they must exist."""

from __future__ import annotations

import re

from tests.deploy.conftest import ROOT

DOC = ROOT / "docs" / "security.md"


def threat_model_tests() -> list[str]:
    """Every ``path::function`` named in the threat-model table."""
    section = DOC.read_text().partition("### Threat model")[2].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    return [ref for row in rows for ref in re.findall(r"`([^`\s]+\.py::\w+)`", row)]


def test_every_named_test_exists() -> None:
    named = threat_model_tests()
    assert len(named) >= 15
    missing = []
    for ref in named:
        path, _, function = ref.partition("::")
        source = ROOT / path
        if not source.is_file() or not re.search(
            rf"^(async )?def {function}\(", source.read_text(), re.M
        ):
            missing.append(ref)
    assert missing == []


def test_every_row_names_a_test() -> None:
    section = DOC.read_text().partition("### Threat model")[2].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][2:]
    assert rows
    for row in rows:
        test = row.rstrip(" |").rsplit("|", 1)[1]
        assert "::" in test, row
