"""Peer lists and addresses as DLedger writes them: ``"n0-host:port;n1-host:port"``.

A leaf module (it needs only the response codes), so the consensus layer, the transport,
the server and a client read peers one way without loading one another.
"""

from __future__ import annotations

from dledger.codes import ResponseCode
from dledger.errors import DLedgerError


def split_peers(peers: str) -> dict[str, str]:
    """``"n0-host:port;n1-host:port"`` → ``{"n0": "host:port", ...}``; ValueError if malformed.

    Split on ``;``, then at the first ``-`` (ids may not hold a ``-``; addresses may), as
    DLedger's MemberState constructor does. Order is kept: it is the order votes are sent in.
    Addresses are not checked (see ``parse_peers``).
    """
    out: dict[str, str] = {}
    for part in peers.split(";"):
        part = part.strip()
        if not part:
            continue
        peer_id, sep, addr = part.partition("-")
        if not sep or not peer_id:
            raise ValueError(f"bad peer {part!r} in {peers!r}: expected id-host:port")
        if peer_id in out:
            raise ValueError(f"duplicate peer id {peer_id!r} in {peers!r}")
        out[peer_id] = addr
    return out


def parse_addr(addr: str) -> tuple[str, int]:
    """``"host:port"`` or ``"[v6]:port"`` to ``(host, port)``."""
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"bad address {addr!r}, want host:port (port 0-65535)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def _bare_ip_peer(part: str) -> bool:
    """``ip:port`` with no id (a classic broker, known by its address): an IPv4 or bracketed
    IPv6 literal, so that a DLedger peer missing its ``-`` is still refused."""
    host, sep, port = part.rpartition(":")
    if not sep or not port.isdigit():
        return False
    if host.startswith("[") and host.endswith("]"):
        return True
    pieces = host.split(".")
    return len(pieces) == 4 and all(p.isdigit() and int(p) < 256 for p in pieces)


def parse_peers(peers: str, *, bare: bool = False) -> dict[str, str]:
    """DLedger's peers string to ``{id: "host:port"}``, with every address checked; bad input
    is a DLedgerError (UNEXPECTED_ARGUMENT) the CLI and the client can report. With ``bare``
    (clients), an ``ip:port`` without an id is a classic broker whose id is that address."""
    if bare:
        parts = [p.strip() for p in peers.split(";") if p.strip()]
        if parts and all(_bare_ip_peer(p) for p in parts):
            peers = ";".join(f"{p}-{p}" for p in parts)
    try:
        out = split_peers(peers)
    except ValueError as exc:
        raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, str(exc)) from exc
    for addr in out.values():
        parse_addr(addr)
    if not out:
        raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, "no peers")
    return out
