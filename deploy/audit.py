"""The dependency audit: known vulnerabilities in the locked Python and dashboard dependencies.

``python deploy/audit.py`` (``just audit``) audits

- the Python requirements locked in uv.lock (``uv export --frozen``, every workspace package
  and the dev group), with ``pip-audit`` against PyPI's vulnerability data for each pinned
  version;
- the dashboard's production dependencies locked in services/dashboard/package-lock.json,
  with ``npm audit --omit=dev`` against the npm registry's advisories;

and fails (exit 1) on a known vulnerability that deploy/audit-ignore.toml does not accept. An
audit whose service cannot be reached, or that leaves a dependency unaudited, is no pass: it
exits 2 with one line saying which. ``--if-reachable`` (what ``just check``, and so CI, runs)
turns that case into a warning and exit 0, so a machine without the vulnerability services
still checks everything else, while a vulnerability that is found always fails.

An accepted vulnerability is an ``[[accept]]`` entry of deploy/audit-ignore.toml with its
``id`` (as the audit prints it: ``PYSEC-…``, ``GHSA-…``, ``CVE-…``; any alias matches), a
non-empty ``reason`` and an ``until`` date after which it fails again.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
IGNORE_FILE = ROOT / "deploy" / "audit-ignore.toml"
DASHBOARD = ROOT / "services" / "dashboard"

OK, FOUND, NOT_RUN = 0, 1, 2


@dataclass(frozen=True)
class Finding:
    """One known vulnerability of one locked package."""

    ecosystem: str
    package: str
    version: str
    ids: tuple[str, ...]
    """The advisory's id first, then its aliases."""
    summary: str = ""

    def line(self) -> str:
        return (
            f"{self.ecosystem} {self.package} {self.version}: {', '.join(self.ids)} {self.summary}"
        )


class AuditNotRunError(Exception):
    """The audit could not look at every dependency (service unreachable, tool missing)."""


class BadIgnoreFileError(Exception):
    """deploy/audit-ignore.toml is not a list of dated, explained acceptances."""


def accepted_ids(text: str, today: dt.date) -> dict[str, str]:
    """The ids deploy/audit-ignore.toml accepts today, each with its reason.

    Raises:
        BadIgnoreFileError: not TOML, or an entry without an id, a reason or an ``until`` date.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadIgnoreFileError(f"not TOML: {exc}") from None
    out: dict[str, str] = {}
    for i, entry in enumerate(data.get("accept", [])):
        where = f"[[accept]] entry {i + 1}"
        if not isinstance(entry, dict):
            raise BadIgnoreFileError(f"{where} is not a table")
        vid, reason, until = entry.get("id"), entry.get("reason"), entry.get("until")
        if not isinstance(vid, str) or not vid.strip():
            raise BadIgnoreFileError(f"{where} has no id")
        if not isinstance(reason, str) or not reason.strip():
            raise BadIgnoreFileError(f"{where} ({vid}) has no reason")
        if not isinstance(until, dt.date) or isinstance(until, dt.datetime):
            raise BadIgnoreFileError(f"{where} ({vid}) needs an until date (until = 2027-01-31)")
        if until >= today:
            out[vid.strip()] = reason.strip()
    return out


def pip_findings(report: Mapping[str, Any]) -> list[Finding]:
    """The vulnerabilities of a ``pip-audit --format json`` report.

    Raises:
        AuditNotRunError: a dependency was skipped (PyPI has no data for its pinned version here).
    """
    found: list[Finding] = []
    skipped: list[str] = []
    for dep in report.get("dependencies", []):
        if "skip_reason" in dep:
            skipped.append(str(dep["skip_reason"]))
            continue
        for vuln in dep.get("vulns", []):
            found.append(
                Finding(
                    "pypi",
                    str(dep["name"]),
                    str(dep.get("version", "")),
                    (str(vuln["id"]), *(str(a) for a in vuln.get("aliases", []))),
                    "fixed in " + ", ".join(vuln["fix_versions"])
                    if vuln.get("fix_versions")
                    else "",
                )
            )
    if skipped:
        raise AuditNotRunError(
            f"pip-audit could not audit {len(skipped)} dependencies: {skipped[0]}"
        )
    return found


def npm_findings(report: Mapping[str, Any]) -> list[Finding]:
    """The advisories of an ``npm audit --json`` report (one per advisory and package).

    Raises:
        AuditNotRunError: the registry's audit endpoint answered with an error.
    """
    if "error" in report or "vulnerabilities" not in report:
        raise AuditNotRunError(
            f"npm audit: {report.get('message') or 'the audit endpoint gave no report'}"
        )
    found: list[Finding] = []
    for name, vuln in sorted(report["vulnerabilities"].items()):
        for via in vuln.get("via", []):
            if not isinstance(via, dict):
                continue  # a dependency of `name` that has its own entry
            url = str(via.get("url", ""))
            ghsa = url.rsplit("/", 1)[-1] if "/advisories/" in url else str(via.get("source", ""))
            found.append(
                Finding(
                    "npm",
                    name,
                    str(via.get("range", "")),
                    (ghsa,),
                    f"{via.get('severity', '')}: {via.get('title', '')}",
                )
            )
    return found


def unaccepted(findings: Iterable[Finding], accepted: Mapping[str, str]) -> list[Finding]:
    """The findings none of whose ids is accepted."""
    return [f for f in findings if not any(i in accepted for i in f.ids)]


def run_pip_audit() -> list[Finding]:
    """pip-audit over the requirements uv.lock pins (hashes left out: ``--no-deps`` audits
    exactly the pinned list, which is already the whole resolved set)."""
    exported = subprocess.run(
        ["uv", "export", "--frozen", "--all-packages", "--no-hashes", "--no-emit-workspace"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if exported.returncode != 0:
        raise AuditNotRunError(f"uv export failed: {exported.stderr.strip().splitlines()[-1:]}")
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as req:
        req.write(exported.stdout)
        req.flush()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip_audit",
                "--requirement",
                req.name,
                "--disable-pip",
                "--no-deps",
                "--format",
                "json",
                "--progress-spinner",
                "off",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise AuditNotRunError(f"pip-audit gave no report: {last}") from None
    return pip_findings(report)


def run_npm_audit() -> list[Finding]:
    """npm audit over the dashboard's lockfile (production dependencies: what nginx serves)."""
    npm = shutil.which("npm")
    if npm is None:
        raise AuditNotRunError(
            "npm is not installed: the dashboard's dependencies were not audited"
        )
    done = subprocess.run(
        [npm, "audit", "--omit=dev", "--json", "--package-lock-only"],
        cwd=DASHBOARD,
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise AuditNotRunError("npm audit gave no JSON report") from None
    return npm_findings(report)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--if-reachable",
        action="store_true",
        help="warn instead of failing when a vulnerability service cannot be reached",
    )
    args = parser.parse_args(argv)
    try:
        accepted = accepted_ids(IGNORE_FILE.read_text(), dt.datetime.now(dt.UTC).date())
    except (OSError, BadIgnoreFileError) as exc:
        print(f"audit: {IGNORE_FILE.relative_to(ROOT)}: {exc}", file=sys.stderr)
        return FOUND
    found: list[Finding] = []
    not_run: list[str] = []
    for audit in (run_pip_audit, run_npm_audit):
        try:
            found += audit()
        except AuditNotRunError as exc:
            not_run.append(str(exc))
    bad = unaccepted(found, accepted)
    for finding in found:
        ok = finding not in bad
        print(f"audit: {'accepted ' if ok else ''}{finding.line()}", file=sys.stderr)
    for reason in not_run:
        word = "warning" if args.if_reachable else "error"
        print(f"audit: {word}: not run: {reason}", file=sys.stderr)
    if bad:
        return FOUND
    if not_run and not args.if_reachable:
        return NOT_RUN
    if len(not_run) == 2:
        print("audit: neither audit ran (see the warnings); nothing was checked")
    else:
        print(f"audit: {len(found)} known vulnerabilities, all accepted ({len(not_run)} not run)")
    return OK


if __name__ == "__main__":
    sys.exit(main())
