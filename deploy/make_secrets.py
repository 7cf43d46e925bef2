"""Generate the secrets docker-compose.yml mounts: ``python deploy/make_secrets.py``.

Writes into ``deploy/secrets/`` (git-ignored; the folder is 0700, so only its owner reaches
the files, which are 0644 because compose bind-mounts them into containers that run as
non-root users):

- ``redis_pw_<service>``: a random password per Redis ACL user (``dtq-api`` → ``redis_pw_api``);
- ``users.acl``: ``deploy/redis/users.acl.template`` rendered with the SHA-256 of each password
  (``#<hex>``), so Redis never holds a password in clear text;
- ``api_keys``: the ``DTQ_API_KEYS_FILE`` entries (name, scopes, SHA-256 of the secret);
- ``api_key_<name>``: the secret of each generated API key, for the clients that present it;
- ``grafana_admin_password``: the password of Grafana's ``admin`` user.

Existing passwords and keys are kept (``users.acl`` is always re-rendered); ``--rotate``
replaces them all. Nothing secret is printed.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import secrets
import sys
from pathlib import Path

from dtq_core.infra.auth import new_key

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "deploy" / "redis" / "users.acl.template"
DEFAULT_OUT = ROOT / "deploy" / "secrets"

API_KEYS = {"admin": "admin", "client": "submit+read", "dashboard": "read"}
"""The API keys a fresh deployment gets: operators, producers, the dashboard's viewers."""

_PASSWORD = re.compile(r"@@PASSWORD:([a-z0-9-]+)@@")
_NAMESPACE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$")


def acl_users(template: str) -> list[str]:
    """The users whose password the template asks for, in order."""
    return list(dict.fromkeys(_PASSWORD.findall(template)))


def password_file(user: str) -> str:
    """``dtq-api`` → ``redis_pw_api``: the secret's file name."""
    return "redis_pw_" + user.removeprefix("dtq-")


def render_acl(template: str, passwords: dict[str, str], namespace: str = "dtq") -> str:
    """The ACL file Redis loads: no comments, the namespace and the password hashes in.

    Raises:
        KeyError: a user of the template has no password.
        ValueError: ``namespace`` is not a valid ``DTQ_NAMESPACE``.
    """
    if not _NAMESPACE.match(namespace):
        raise ValueError(f"namespace {namespace!r} is not a valid DTQ_NAMESPACE")
    lines = [
        line.strip()
        for line in template.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    text = "\n".join(lines) + "\n"
    text = text.replace("@@NS@@", namespace)
    return _PASSWORD.sub(
        lambda m: "#" + hashlib.sha256(passwords[m.group(1)].encode()).hexdigest(), text
    )


def _write(path: Path, content: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(content)
    tmp.chmod(0o644)
    tmp.replace(path)


def generate(out: Path, *, namespace: str = "dtq", rotate: bool = False) -> dict[str, str]:
    """Create (or complete) the secrets in ``out``; returns the Redis password per user."""
    out.mkdir(parents=True, exist_ok=True)
    out.chmod(0o700)
    template = TEMPLATE.read_text()
    passwords: dict[str, str] = {}
    for user in acl_users(template):
        path = out / password_file(user)
        if rotate or not path.exists():
            _write(path, secrets.token_urlsafe(32) + "\n")
        passwords[user] = path.read_text().strip()
    _write(out / "users.acl", render_acl(template, passwords, namespace))

    grafana = out / "grafana_admin_password"
    if rotate or not grafana.exists():
        _write(grafana, secrets.token_urlsafe(24) + "\n")

    keys_path = out / "api_keys"
    if rotate or not keys_path.exists():
        entries = []
        for name, scopes in API_KEYS.items():
            secret, entry = new_key(name, scopes)
            _write(out / f"api_key_{name}", secret + "\n")
            entries.append(entry)
        _write(
            keys_path, "# name:scopes:sha256-of-secret, one per line\n" + "\n".join(entries) + "\n"
        )
    return passwords


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to write")
    parser.add_argument(
        "--namespace",
        default=os.environ.get("DTQ_NAMESPACE", "dtq"),
        help="the key namespace the ACLs allow (DTQ_NAMESPACE)",
    )
    parser.add_argument("--rotate", action="store_true", help="replace every password and key")
    args = parser.parse_args(argv)
    try:
        users = generate(args.out, namespace=args.namespace, rotate=args.rotate)
    except ValueError as exc:
        sys.stderr.write(f"secrets: {exc}\n")
        return 2
    where = os.path.relpath(args.out)
    print(f"secrets in {where}/: users.acl for {len(users)} Redis users, their passwords,")
    print(f"  api_keys (DTQ_API_KEYS_FILE) and the secrets of the keys {', '.join(API_KEYS)}")
    print(f'  (api_key_<name>; e.g. curl -H "X-API-Key: $(cat {where}/api_key_admin)" ...)')
    if args.rotate:
        print("rotated: restart redis (it reloads users.acl) and then every service")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
