"""The dependency audit (deploy/audit.py, in `just check`): a known vulnerability fails unless
deploy/audit-ignore.toml accepts it with a reason and a date, and an audit that could not run
is never reported as a pass.

The reports below have the shapes pip-audit's ``--format json`` and ``npm audit --json``
write; the vulnerability services themselves may be out of reach where the suite runs.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from types import ModuleType

import pytest

from tests.deploy.conftest import ROOT, load_module

TODAY = dt.date(2026, 12, 1)

PIP_REPORT = {
    "dependencies": [
        {"name": "msgspec", "version": "0.19.0", "vulns": []},
        {
            "name": "redis",
            "version": "4.5.3",
            "vulns": [
                {
                    "id": "PYSEC-2023-46",
                    "fix_versions": ["4.5.4"],
                    "aliases": ["CVE-2023-28859", "GHSA-8fww-64cx-x8p5"],
                    "description": "cancelled commands leave the connection open",
                }
            ],
        },
    ],
    "fixes": [],
}

NPM_REPORT = {
    "auditReportVersion": 2,
    "vulnerabilities": {
        "react-router": {
            "name": "react-router",
            "severity": "high",
            "via": ["@remix-run/router"],
        },
        "@remix-run/router": {
            "name": "@remix-run/router",
            "severity": "high",
            "via": [
                {
                    "source": 1097000,
                    "name": "@remix-run/router",
                    "title": "open redirect",
                    "url": "https://github.com/advisories/GHSA-2w69-qvjg-hvjx",
                    "severity": "high",
                    "range": "<1.23.2",
                }
            ],
        },
    },
    "metadata": {"vulnerabilities": {"high": 2, "total": 2}},
}


@pytest.fixture(scope="module")
def audit() -> ModuleType:
    return load_module("deploy/audit.py", "dtq_deploy_audit")


def test_a_vulnerable_pin_is_found_with_its_aliases(audit: ModuleType) -> None:
    (finding,) = audit.pip_findings(PIP_REPORT)
    assert (finding.package, finding.version) == ("redis", "4.5.3")
    assert finding.ids == ("PYSEC-2023-46", "CVE-2023-28859", "GHSA-8fww-64cx-x8p5")
    assert "fixed in 4.5.4" in finding.line()


def test_a_dependency_pip_audit_skipped_means_the_audit_did_not_run(audit: ModuleType) -> None:
    report = {"dependencies": [{"name": "redis", "skip_reason": "Dependency not found on PyPI"}]}
    with pytest.raises(audit.AuditNotRunError, match="could not audit 1 dependencies"):
        audit.pip_findings(report)


def test_npm_advisories_are_found_once_at_their_package(audit: ModuleType) -> None:
    (finding,) = audit.npm_findings(NPM_REPORT)
    assert (finding.package, finding.ids) == ("@remix-run/router", ("GHSA-2w69-qvjg-hvjx",))
    assert audit.npm_findings({"auditReportVersion": 2, "vulnerabilities": {}}) == []


def test_an_npm_audit_endpoint_error_means_the_audit_did_not_run(audit: ModuleType) -> None:
    report = {"message": "405 Method Not Allowed - POST .../advisories/bulk", "error": {}}
    with pytest.raises(audit.AuditNotRunError, match="405"):
        audit.npm_findings(report)


def test_an_acceptance_needs_a_reason_and_a_date_and_ends(audit: ModuleType) -> None:
    text = """
[[accept]]
id = "CVE-2023-28859"
reason = "only the test suite runs this version"
until = 2027-01-31

[[accept]]
id = "GHSA-2w69-qvjg-hvjx"
reason = "the dashboard never redirects"
until = 2026-11-30
"""
    accepted = audit.accepted_ids(text, TODAY)
    assert set(accepted) == {"CVE-2023-28859"}  # the second one ran out yesterday
    findings = audit.pip_findings(PIP_REPORT) + audit.npm_findings(NPM_REPORT)
    # An alias matches; the expired acceptance fails again.
    assert [f.package for f in audit.unaccepted(findings, accepted)] == ["@remix-run/router"]
    for bad, message in (
        ('[[accept]]\nid = "X"\nuntil = 2027-01-01', "has no reason"),
        ('[[accept]]\nid = "X"\nreason = "because"', "needs an until date"),
        ('[[accept]]\nreason = "r"\nuntil = 2027-01-01', "has no id"),
        ("[[accept]\n", "not TOML"),
    ):
        with pytest.raises(audit.BadIgnoreFileError, match=message):
            audit.accepted_ids(bad, TODAY)


def test_the_repository_ignore_file_is_valid(audit: ModuleType) -> None:
    audit.accepted_ids((ROOT / "deploy" / "audit-ignore.toml").read_text(), TODAY)


@pytest.mark.parametrize(
    ("case", "code"),
    [
        (("clean", "clean", False), 0),
        (("unreachable", "clean", False), 2),
        (("unreachable", "unreachable", True), 0),
        (("redis", "unreachable", True), 1),  # a finding fails even where a service is out
        (("clean", "router", False), 1),
    ],
)
def test_the_exit_code(
    audit: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    case: tuple[str, str, bool],
    code: int,
) -> None:
    pip, npm, if_reachable = case
    found = {
        "clean": [],
        "redis": audit.pip_findings(PIP_REPORT),
        "router": audit.npm_findings(NPM_REPORT),
    }

    def runner(what: str) -> Callable[[], list[object]]:
        def run() -> list[object]:
            if what == "unreachable":
                raise audit.AuditNotRunError("service unreachable")
            return found[what]

        return run

    monkeypatch.setattr(audit, "run_pip_audit", runner(pip))
    monkeypatch.setattr(audit, "run_npm_audit", runner(npm))
    assert audit.main(["--if-reachable"] if if_reachable else []) == code
    err = capsys.readouterr().err
    if pip == "unreachable":
        assert ("warning" if if_reachable else "error") + ": not run" in err


def test_the_real_pip_audit_runs_or_says_why_not(audit: ModuleType) -> None:
    """The command line itself is right: pip-audit answers with a JSON report (findings,
    or the dependencies it could not audit when PyPI's data is out of reach)."""
    try:
        findings = audit.run_pip_audit()
    except audit.AuditNotRunError as exc:
        reason = str(exc)
    else:
        reason = f"ran: {len(findings)} findings"
    assert "gave no report" not in reason
    assert reason.startswith(("ran:", "pip-audit could not audit")), reason
