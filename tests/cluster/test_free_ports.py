"""The ports test clusters give their members: free, distinct, and never ones the kernel hands
out to bind(0) or to outgoing connections meanwhile (a member that lost its port to a proxy's
listener failed to start with "address already in use")."""

from __future__ import annotations

import socket
import sys

import pytest

from dledger.testing import _ephemeral_range, free_ports


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = free_ports(8)
    assert len(set(ports)) == 8
    socks = []
    try:
        for p in ports:
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.1", p))
    finally:
        for s in socks:
            s.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ip_local_port_range is Linux's")
def test_free_ports_lie_outside_the_kernels_ephemeral_range() -> None:
    lo, hi = _ephemeral_range()
    if lo - 10000 < 1000 and 65535 - hi < 1000:
        pytest.skip("no room outside the ephemeral range on this machine")
    ports = free_ports(20)
    assert all(not lo <= p <= hi for p in ports), (lo, hi, ports)
    # And bind(0) after them never lands on one (the kernel picks from the range).
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        assert lo <= s.getsockname()[1] <= hi
