"""Three `dledger server` processes on 127.0.0.1: elections, failover, catch-up, partitions."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dledger.client import Client
from dledger.codes import ResponseCode
from dledger.errors import DLedgerError
from dledger.store.file import MmapFileStore
from dledger.testing import FAST, TestCluster

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[TestCluster]:
    c = TestCluster(tmp_path)
    try:
        c.start_all()
        yield c
    finally:
        c.close()


def _entries(node_dir: Path) -> dict[int, tuple[int, bytes]]:
    with MmapFileStore(node_dir, readonly=True) as s:
        return {e.index: (e.term, e.body) for e in s.iter_entries()}


def _stop_and_compare(cluster: TestCluster, a: str, b: str) -> dict[int, tuple[int, int, bytes]]:
    """Stop every member, then check that ``a`` and ``b`` hold the same entries (index, term,
    position and body), not only the same end index; returns ``a``'s."""
    for m in list(cluster.procs):
        assert cluster.stop(m) == 0
    logs = []
    for m in (a, b):
        with MmapFileStore(cluster.node_dir(m), readonly=True) as s:
            logs.append({e.index: (e.term, e.pos, e.body) for e in s.iter_entries()})
    assert logs[0] == logs[1], f"{a} and {b} differ"
    return logs[0]


def test_leader_elected_and_takes_writes(cluster: TestCluster):
    leader = cluster.wait_leader()
    with cluster.client() as c:
        results = c.append_batch([f"entry {i}".encode() for i in range(200)])
        # Appends are at-least-once (dledger/client.py): on a machine slow enough that the first
        # answer is late, the client sends the batch again and the log holds it twice. Either
        # way the batch's entries take consecutive indexes from a multiple of its size.
        first = results[0].index
        assert first % 200 == 0 and [r.index for r in results] == list(range(first, first + 200))
        assert c.get(first + 123).body == b"entry 123"
        assert c.leader == leader
    end = first + 199
    cluster.wait_for(
        lambda: all(s["committed_index"] == end for s in cluster.status().values()),
        what=f"every member committed {end}",
    )
    # The blocking client is shared by threads (their calls take turns) and refuses to block
    # a running event loop.
    with cluster.client() as c:
        got: list[int] = []
        threads = [
            threading.Thread(target=lambda: got.extend(c.append(b"t").index for _ in range(20))) for _ in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(got) == len(set(got)) == 80 and min(got) > end

        async def inside_a_loop() -> None:
            c.metadata()

        with pytest.raises(RuntimeError, match="AsyncClient"):
            asyncio.run(inside_a_loop())
    with pytest.raises(DLedgerError):
        c.metadata()


def test_kill_9_leader_gives_a_new_leader_and_the_old_one_catches_up(cluster: TestCluster):
    old = cluster.wait_leader()
    with cluster.client() as c:
        # Indexes from the answers: appends are at-least-once (see the cut-off leader's test).
        acked = {c.append(body).index: body for body in (f"before {i}".encode() for i in range(50))}
        assert len(acked) == 50
        cluster.kill(old)
        new = cluster.wait_leader(exclude=old)
        assert new != old
        r = c.append(b"after the kill")
        assert r.index > max(acked)
        cluster.start(old)
        cluster.wait_for(lambda: cluster.status()[old]["end_index"] == r.index, what="restarted member caught up")
        assert c.get(r.index).body == b"after the kill"
        assert {i: c.get(i).body for i in acked} == acked
    log = _stop_and_compare(cluster, old, new)
    assert log[r.index][2] == b"after the kill" and {i: log[i][2] for i in acked} == acked


def test_restarted_follower_catches_up(cluster: TestCluster):
    leader = cluster.wait_leader()
    follower = next(m for m in cluster.ids if m != leader)
    with cluster.client() as c:
        c.append_batch([b"a"] * 20)
        cluster.stop(follower)
        results = c.append_batch([f"while down {i}".encode() for i in range(300)])
        end = results[-1].index
        cluster.start(follower)
        cluster.wait_for(lambda: cluster.status()[follower]["end_index"] == end, what=f"follower caught up to {end}")
    log = _stop_and_compare(cluster, follower, leader)
    assert [log[r.index][2] for r in results] == [f"while down {i}".encode() for i in range(300)]


def test_restarted_follower_is_resynchronised_on_the_new_connection(tmp_path: Path):
    # The pushes a killed follower missed would be resent only after max_push_time_out_ms (an
    # hour here), and nothing is appended once it is back: it catches up only because the
    # leader compares again as soon as it has a new connection to it.
    cluster = TestCluster(tmp_path, extra=[*FAST, "--max-push-time-out-ms", "3600000"])
    try:
        cluster.start_all()
        leader = cluster.wait_leader()
        follower = next(m for m in cluster.ids if m != leader)
        with cluster.client() as c:
            first = c.append_batch([b"a"] * 20)[-1].index
            cluster.wait_for(lambda: cluster.status()[follower]["end_index"] == first, what="follower has the batch")
            cluster.kill(follower)
            end = c.append_batch([f"while down {i}".encode() for i in range(30)])[-1].index
            cluster.start(follower)
            cluster.wait_for(
                lambda: cluster.status()[follower]["end_index"] == end, what=f"follower caught up to {end}"
            )
            assert cluster.status()[leader]["role"] == "LEADER"
        _stop_and_compare(cluster, follower, leader)
    finally:
        cluster.close()


def test_cut_off_leader_steps_down_and_its_uncommitted_entries_are_truncated(cluster: TestCluster):
    old = cluster.wait_leader()
    # Appends are at-least-once (dledger/client.py): a batch whose first answer was late is sent
    # again and stored twice, so the ends to wait for come from the answers, not from the counts.
    with cluster.client() as c:
        committed_end = c.append_batch([f"committed {i}".encode() for i in range(10)])[-1].index
    cluster.wait_for(
        lambda: all(s["end_index"] == committed_end for s in cluster.status().values()),
        what=f"replicated to {committed_end}",
    )
    cluster.isolate(old)
    # Writes that reach only the cut-off leader: they land in its log, never commit.
    lonely = Client({old: f"127.0.0.1:{cluster.ports[old]}"}, cluster.group, timeout=1.5, request_timeout=1.5)
    try:
        for i in range(3):
            with pytest.raises(DLedgerError) as exc:
                lonely.append(f"doomed {i}".encode())
            assert exc.value.code in (
                ResponseCode.WAIT_QUORUM_ACK_TIMEOUT,
                ResponseCode.TIMEOUT,
                ResponseCode.NOT_LEADER,
                ResponseCode.TERM_CHANGED,
            )
    finally:
        lonely.close()
    new = cluster.wait_leader(exclude=old)
    with cluster.client() as c:
        fresh = c.append_batch([f"new leader {i}".encode() for i in range(5)])
    new_end = fresh[-1].index
    cluster.wait_for(lambda: cluster.status()[old]["role"] != "LEADER", what="old leader stepped down")
    cluster.heal()
    cluster.wait_for(
        lambda: (
            len({s["end_index"] for s in cluster.status().values()}) == 1
            and cluster.status()[old]["end_index"] == new_end
        ),
        what=f"logs converged at {new_end}",
    )
    for m in list(cluster.procs):
        cluster.stop(m)
    logs = [_entries(cluster.node_dir(m)) for m in cluster.ids]
    assert logs[0] == logs[1] == logs[2]
    assert max(logs[0]) == new_end
    bodies = [b for _t, b in logs[0].values()]
    # The doomed writes are gone: only the two acknowledged batches (each maybe twice) are left,
    # the first copy of the first at the start and the acknowledged copy of the second at the end.
    assert all(b.startswith((b"committed ", b"new leader ")) for b in bodies)
    assert bodies[:10] == [f"committed {i}".encode() for i in range(10)]
    assert [logs[0][r.index][1] for r in fresh] == [f"new leader {i}".encode() for i in range(5)]
    assert new != old


def test_no_acknowledged_write_is_lost_under_kills_and_partitions(tmp_path: Path):
    rng = random.Random(20261121)
    cluster = TestCluster(tmp_path)
    acked: dict[int, bytes] = {}
    stop = threading.Event()
    errors: list[str] = []

    def load() -> None:
        n = 0
        with cluster.client(timeout=5.0) as c:
            while not stop.is_set():
                batch = [f"w-{n + k}".encode() for k in range(rng.randint(1, 20))]
                n += len(batch)
                try:
                    for body, r in zip(batch, c.append_batch(batch), strict=True):
                        acked[r.index] = body
                except DLedgerError as exc:
                    errors.append(exc.code.name)

    try:
        cluster.start_all()
        cluster.wait_leader()
        t = threading.Thread(target=load, daemon=True)
        t.start()
        deadline = time.monotonic() + 60
        for _round in range(4):
            if time.monotonic() > deadline:
                break
            victim = rng.choice(cluster.ids)
            if rng.random() < 0.5:
                cluster.kill(victim)
                time.sleep(rng.uniform(0.3, 1.5))
                cluster.start(victim)
            else:
                leader = cluster.wait_leader()
                cluster.isolate(leader)
                time.sleep(rng.uniform(0.5, 2.0))
                cluster.heal()
            time.sleep(1.0)
        stop.set()
        t.join(30)
        assert not t.is_alive()
        assert len(acked) > 100, f"too little got through: {len(acked)} acked, errors {errors[:10]}"
        cluster.heal()
        cluster.wait_for(
            lambda: len({(s["end_index"], s["committed_index"]) for s in cluster.status().values()}) == 1,
            timeout=30,
            what="all members at the same end and commit index",
        )
        for m in list(cluster.procs):
            assert cluster.stop(m) == 0
    finally:
        stop.set()
        cluster.close()
    logs = [_entries(cluster.node_dir(m)) for m in cluster.ids]
    for index, body in acked.items():
        for log in logs:
            assert log[index][1] == body, f"acknowledged entry {index} lost or changed"
    assert logs[0] == logs[1] == logs[2]
    # The data files are byte-identical up to the committed position.
    positions = []
    for m in cluster.ids:
        with MmapFileStore(cluster.node_dir(m), readonly=True) as s:
            positions.append(s.committed_pos)
    assert len(set(positions)) == 1 and positions[0] > 0
    seg = sorted((cluster.node_dir("n0") / "data").iterdir())
    for f in seg:
        start = int(f.name)
        if start >= positions[0]:
            break
        upto = min(positions[0] - start, f.stat().st_size)
        ref = f.read_bytes()[:upto]
        for m in cluster.ids[1:]:
            assert (cluster.node_dir(m) / "data" / f.name).read_bytes()[:upto] == ref
