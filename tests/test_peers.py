"""Peer lists and addresses (dledger.peers), as members, the CLI and clients read them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dledger.codes import ResponseCode
from dledger.errors import DLedgerError
from dledger.peers import parse_addr, parse_peers, split_peers


def test_split_peers_as_member_state() -> None:
    assert split_peers("n0-localhost:20911;n1-host-a:20912;") == {"n0": "localhost:20911", "n1": "host-a:20912"}
    assert list(split_peers("n2-a:1;n0-b:2")) == ["n2", "n0"]  # the order votes go in
    for bad in ("n0localhost:1", "n0-a:1;n0-b:2", "-a:1"):
        with pytest.raises(ValueError):
            split_peers(bad)


def test_parse_addr() -> None:
    assert parse_addr("127.0.0.1:20911") == ("127.0.0.1", 20911)
    assert parse_addr("[::1]:7") == ("::1", 7)
    for bad in ("host", ":1", "host:x", "host:", "host:99999", "host:-5"):
        with pytest.raises(DLedgerError) as err:
            parse_addr(bad)
        assert err.value.code == ResponseCode.UNEXPECTED_ARGUMENT


def test_parse_peers_checks_every_address() -> None:
    assert parse_peers("n0-127.0.0.1:1;n1-[::1]:2") == {"n0": "127.0.0.1:1", "n1": "[::1]:2"}
    for bad in ("", ";", "n0-host", "n0-a:1;n0-b:2", "n0localhost:1"):
        with pytest.raises(DLedgerError) as err:
            parse_peers(bad)
        assert err.value.code == ResponseCode.UNEXPECTED_ARGUMENT


def test_a_client_does_not_load_the_server_or_the_consensus_layer() -> None:
    code = (
        "import sys, dledger.client\n"
        "loaded = sorted(m for m in sys.modules if m == 'dledger.server' or m.startswith('dledger.raft'))\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
