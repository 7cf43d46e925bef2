"""The test DNS server answers like Docker's embedded DNS: one A record per replica of a
known service name, NXDOMAIN for anything else."""

from __future__ import annotations

import socket
import struct

from .conftest import DnsServer


def query(name: str, qtype: int = 1, qid: int = 0x1234) -> bytes:
    qname = b"".join(bytes([len(p)]) + p.encode() for p in name.rstrip(".").split(".")) + b"\0"
    return struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0) + qname + struct.pack("!HH", qtype, 1)


def ask(port: int, packet: bytes) -> tuple[int, int, list[str]]:
    """(id, rcode, addresses) of the server's answer."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(5)
        s.sendto(packet, ("127.0.0.1", port))
        reply, _ = s.recvfrom(4096)
    qid, flags, _qd, an, _ns, _ar = struct.unpack("!HHHHHH", reply[:12])
    offset = len(packet)  # the question is echoed unchanged
    addresses = []
    for _ in range(an):
        _ptr, rtype, _cls, _ttl, length = struct.unpack("!HHHIH", reply[offset : offset + 12])
        offset += 12
        assert rtype == 1
        addresses.append(socket.inet_ntoa(reply[offset : offset + length]))
        offset += length
    assert flags & 0x8000  # a response
    return qid, flags & 0xF, addresses


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_known_names_get_every_address_and_unknown_names_nxdomain() -> None:
    port = free_udp_port()
    server = DnsServer("127.0.0.1", {"worker": ["127.0.0.11", "127.0.0.12"]}, port=port).start()
    try:
        assert ask(port, query("worker.")) == (0x1234, 0, ["127.0.0.11", "127.0.0.12"])
        assert ask(port, query("WORKER", qid=7)) == (7, 0, ["127.0.0.11", "127.0.0.12"])
        assert ask(port, query("worker", qtype=28)) == (0x1234, 0, [])  # AAAA: no data
        assert ask(port, query("worker.example.org")) == (0x1234, 3, [])
    finally:
        server.stop()
    assert server.queries == ["worker", "WORKER", "worker", "worker.example.org"]
