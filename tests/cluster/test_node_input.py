"""Bad input at a live node: it answers with a code or closes the connection, keeps serving,
and writes nothing."""

from __future__ import annotations

import asyncio
import os
import random
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest

from dledger.client import Client
from dledger.codes import RequestCode, ResponseCode
from dledger.net.transport import RpcClient
from dledger.raft.messages import HeartBeatRequest, PushEntryRequest, PushType, VoteRequest
from dledger.store.entry import Entry
from dledger.testing import FAST, TestCluster

pytestmark = pytest.mark.timeout(180)

SECRET = b"correct horse battery staple"


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[TestCluster]:
    secret_file = tmp_path / "secret"
    secret_file.write_bytes(SECRET)
    c = TestCluster(tmp_path / "c", extra=[*FAST, "--secret-file", str(secret_file)])
    c.root.mkdir()
    try:
        c.start_all()
        yield c
    finally:
        c.close()


def _ends(c: TestCluster) -> dict[str, int]:
    with Client(c.peers, c.group, secret=SECRET, timeout=5) as client:
        return {s.id: s.end_index for s in client.status()}  # type: ignore[misc]


def _leader(c: TestCluster) -> str:
    with Client(c.peers, c.group, secret=SECRET, timeout=10) as client:
        for _ in range(200):
            leaders = [s.id for s in client.status() if s.role == "LEADER"]
            if len(leaders) == 1:
                return leaders[0]
            import time

            time.sleep(0.05)
    raise AssertionError("no leader")


def test_node_survives_bad_input_and_writes_nothing(secured: TestCluster):
    c = secured
    leader = _leader(c)
    with Client(c.peers, c.group, secret=SECRET) as client:
        # The end from the answer: a batch whose first answer was late is stored twice.
        end = client.append_batch([b"x"] * 5)[-1].index
    c.wait_for(lambda: set(_ends(c).values()) == {end}, what="replicated everywhere")
    before = _ends(c)
    addr = f"127.0.0.1:{c.ports[leader]}"
    follower = next(m for m in c.ids if m != leader)
    faddr = f"127.0.0.1:{c.ports[follower]}"

    async def attack() -> list[int]:
        codes = []
        # Unauthenticated: no secret, or the wrong one. Refused before any request is served.
        for secret in (None, b"wrong"):
            rpc = RpcClient(secret=secret, timeout=2, connect_timeout=2)
            try:
                resp = await rpc.call(addr, RequestCode.APPEND, {"bodies": [b"evil"]}, group=c.group)
                codes.append(resp.code)
            except Exception as exc:
                codes.append(getattr(exc, "code", -2))
            finally:
                await rpc.close()
        rpc = RpcClient(secret=SECRET, timeout=2)
        try:
            # Unknown group and a malformed client request get error codes.
            resp = await rpc.call(addr, RequestCode.APPEND, {"bodies": [b"x"]}, group="nope")
            codes.append(resp.code)
            resp = await rpc.call(addr, RequestCode.APPEND, {"bodies": "not a list"}, group=c.group)
            codes.append(resp.code)
            resp = await rpc.call(addr, RequestCode.APPEND, {"bodies": [b""]}, group=c.group)
            codes.append(resp.code)
            resp = await rpc.call(addr, RequestCode.GET, {"index": -5}, group=c.group)
            codes.append(resp.code)
            # Packed batches (dledger.packed) whose sizes do not describe the buffer.
            sizes = struct.pack("<3I", 2, 2, 2)
            for bad in (
                {"raw": b"xxxxx", "sizes": sizes},
                {"raw": b"xxxxxx", "sizes": sizes[:5]},
                {"raw": b"xxxxxx", "sizes": struct.pack("<2I", 6, 0)},
                {"raw": b"x", "sizes": "1"},
                {"raw": b"", "sizes": b""},
            ):
                resp = await rpc.call(addr, RequestCode.APPEND, bad, group=c.group)
                codes.append(resp.code)
            # Peer messages from an unknown member, with a stale term, or for another group.
            msgs = [
                PushEntryRequest(
                    group=c.group,
                    remote_id=follower,
                    local_id="intruder",
                    leader_id="intruder",
                    term=10**6,
                    type=PushType.APPEND,
                    entries=[Entry(index=before[follower] + 1, term=10**6, pos=0, body=b"evil")],
                ),
                PushEntryRequest(
                    group=c.group,
                    remote_id=follower,
                    local_id=leader,
                    leader_id=leader,
                    term=-1,
                    type=PushType.APPEND,
                    entries=[Entry(index=before[follower] + 1, term=0, pos=0, body=b"stale")],
                ),
                VoteRequest(group="other", remote_id=follower, local_id=leader, term=10**6),
                HeartBeatRequest(group=c.group, remote_id=follower, local_id=leader, leader_id=leader, term=0),
            ]
            for m in msgs:
                await rpc.send(faddr, int(m.REQUEST_CODE), m.to_wire(), group=m.group)
            await rpc.send(faddr, int(RequestCode.PUSH), {"_type": "PushEntryRequest", "entries": "junk"})
            await asyncio.sleep(0.5)
        finally:
            await rpc.close()
        return codes

    codes = asyncio.run(attack())
    assert codes[0] != ResponseCode.SUCCESS and codes[1] != ResponseCode.SUCCESS
    assert codes[2:] == [
        ResponseCode.UNKNOWN_GROUP,
        ResponseCode.UNEXPECTED_ARGUMENT,
        ResponseCode.REQUEST_WITH_EMPTY_BODYS,
        ResponseCode.UNEXPECTED_ARGUMENT,
        ResponseCode.UNEXPECTED_ARGUMENT,
        ResponseCode.UNEXPECTED_ARGUMENT,
        ResponseCode.REQUEST_WITH_EMPTY_BODYS,
        ResponseCode.UNEXPECTED_ARGUMENT,
        ResponseCode.REQUEST_WITH_EMPTY_BODYS,
    ]
    # Raw garbage on the socket: oversized length prefix, truncated frame, non-map payload.
    for payload in (
        struct.pack(">I", 0xFFFFFFF0),
        struct.pack(">I", 100) + b"abc",
        struct.pack(">I", 3) + msgpack.packb([1, 2])[:3],
        os.urandom(4096),
    ):
        with socket.create_connection(("127.0.0.1", c.ports[leader]), timeout=5) as s:
            s.sendall(payload)
            s.settimeout(3)
            try:
                while s.recv(4096):
                    pass
            except (TimeoutError, ConnectionResetError):
                pass
    assert _ends(c) == before  # nothing was written anywhere
    with Client(c.peers, c.group, secret=SECRET) as client:
        r = client.append(b"still serving")
        assert r.index > before[leader] and client.get(before[leader] + 1).body == b"still serving"


def test_fuzz_random_frames_at_a_live_node(secured: TestCluster):
    c = secured
    leader = _leader(c)
    rng = random.Random(7)
    c.wait_for(lambda: len(set(_ends(c).values())) == 1, what="members agree")
    before = _ends(c)

    async def fuzz() -> None:
        rpc = RpcClient(secret=SECRET, timeout=1)
        try:
            for _ in range(300):
                code = rng.choice([*map(int, RequestCode), rng.randint(-5, 60000)])
                body = {
                    rng.choice(["_type", "bodies", "index", "entries", "term", "x"]): rng.choice(
                        [
                            None,
                            1,
                            -1,
                            "PushEntryRequest",
                            "VoteRequest",
                            b"\x00",
                            [b"a"],
                            {"a": 1},
                            [[1, 2, 3]],
                            2**70 if rng.random() < 0.1 else 0,
                        ]
                    )
                    for _ in range(rng.randint(0, 4))
                }
                target = f"127.0.0.1:{c.ports[rng.choice(c.ids)]}"
                try:
                    if rng.random() < 0.5:
                        await rpc.send(target, code, body, group=rng.choice([c.group, "zz", None]))
                    else:
                        await rpc.call(target, code, body, group=rng.choice([c.group, "zz", None]))
                except Exception:
                    pass
        finally:
            await rpc.close()

    asyncio.run(fuzz())
    for m, proc in c.procs.items():
        assert proc.poll() is None, f"{m} died"
    after = _ends(c)
    # Fuzzed APPENDs with valid bodies may legitimately be written; nothing else may be.
    assert all(after[m] >= before[m] for m in c.ids)
    with Client(c.peers, c.group, secret=SECRET) as client:
        r = client.append(b"after fuzz")
        assert client.get(r.index).body == b"after fuzz"
    assert leader in c.ids
