"""Throwaway certificates for tests of Redis over TLS: a CA of the test's own and a server
certificate it signed for ``127.0.0.1`` and ``localhost``, made with the ``openssl`` command.

Every ``redis-server`` of a TLS topology serves the same certificate (each listens on
``127.0.0.1``) and trusts the same CA, which also signs the certificate a node shows when it
connects to another (replication, the cluster bus, a sentinel asking a master).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

__all__ = ["TlsFiles", "make_ca", "make_tls_files"]

DAYS = "2"
"""How long the certificates are valid: a test session, with a day's margin for a clock."""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """A CA and a certificate and key it signed, as files."""

    ca: Path
    cert: Path
    key: Path

    def server_args(self) -> list[str]:
        """The ``redis-server`` flags that make a node serve this certificate and trust the CA
        (clients need no certificate of their own: ``tls-auth-clients no``)."""
        return [
            "--tls-cert-file",
            str(self.cert),
            "--tls-key-file",
            str(self.key),
            "--tls-ca-cert-file",
            str(self.ca),
            "--tls-auth-clients",
            "no",
        ]

    def conf_lines(self) -> str:
        """The same as :meth:`server_args`, as lines of a configuration file."""
        return (
            f"tls-cert-file {self.cert}\ntls-key-file {self.key}\n"
            f"tls-ca-cert-file {self.ca}\ntls-auth-clients no\n"
        )

    def query(self, ca: Path | None = None) -> str:
        """The query of a ``rediss`` URL that trusts ``ca`` (this CA by default)."""
        return f"ssl_ca_certs={quote(str(ca or self.ca))}&ssl_cert_reqs=required"

    def client_options(self) -> dict[str, Any]:
        """redis-py's options for a client that trusts this CA."""
        return {"ssl": True, "ssl_ca_certs": str(self.ca), "ssl_cert_reqs": "required"}


def _openssl(*args: str) -> None:
    binary = shutil.which("openssl")
    if binary is None:
        raise RuntimeError("openssl is not installed: `apt-get install -y openssl`")
    subprocess.run([binary, *args], check=True, capture_output=True, timeout=60)


def make_ca(folder: Path, name: str = "dtq test CA") -> tuple[Path, Path]:
    """A self-signed CA in ``folder``: its certificate and its key."""
    folder.mkdir(parents=True, exist_ok=True)
    ca, key = folder / "ca.crt", folder / "ca.key"
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", DAYS,
        "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(ca),
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    return ca, key


def make_tls_files(folder: Path) -> TlsFiles:
    """A CA and a server certificate it signed for ``127.0.0.1`` and ``localhost``, in
    ``folder``."""
    ca, ca_key = make_ca(folder)
    key, request, cert = folder / "redis.key", folder / "redis.csr", folder / "redis.crt"
    extensions = folder / "redis.ext"
    extensions.write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "extendedKeyUsage=serverAuth,clientAuth\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
    )
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", str(key), "-out", str(request),
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", str(request), "-CA", str(ca), "-CAkey", str(ca_key),
        "-CAcreateserial", "-days", DAYS, "-extfile", str(extensions), "-out", str(cert),
    )  # fmt: skip
    return TlsFiles(ca=ca, cert=cert, key=key)
