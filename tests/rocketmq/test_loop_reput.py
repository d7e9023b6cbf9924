"""Dispatch run by an asyncio loop (``LoopReput``, a group member's): what commits is dispatched
without a dispatch thread, a long backlog goes in bounded rounds between the loop's other work,
a held dispatch lock never blocks the loop, and nothing runs after close."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from dledger.rocketmq.store import dispatch
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.dispatch import LoopReput
from dledger.rocketmq.store.message_store import MessageStore

BODY = b"m" * 40
CFG = MessageStoreConfig(enable_dledger_commit_log=True, max_hash_slot_num=1024, max_index_num=200_000)


def _store(root: Path) -> MessageStore:
    return MessageStore(root, CFG, dispatch_thread=False)


def _put(s: MessageStore, n: int, queues: int = 3) -> None:
    for k in range(0, n, 500):
        assert s.put_batch("T", [BODY] * min(500, n - k), queue_id=k // 500 % queues, keys=None).ok


async def _until(cond: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "dispatch did not catch up"
        await asyncio.sleep(0.002)


def test_commits_are_dispatched_by_the_loop_without_a_thread(tmp_path: Path) -> None:
    s = _store(tmp_path)
    try:
        assert s.reput._thread is None  # the store started no dispatch thread
        seen: list[int] = []

        async def run() -> None:
            lr = LoopReput(s.reput, asyncio.get_running_loop(), seen.append)
            _put(s, 3000)
            assert s.reput.behind() > 0
            lr.kick()
            await _until(lambda: s.reput.behind() == 0)
            # A later commit: one more kick, one more round.
            _put(s, 10, queues=1)
            lr.kick()
            await _until(lambda: s.reput.behind() == 0)
            lr.close()

        asyncio.run(run())
        assert sum(seen) == 3010
        assert [s.max_offset_in_queue("T", q) for q in range(3)] == [1010, 1000, 1000]
        got = s.get_messages("T", 0, 1000, 32)
        assert [m.body for m in got.messages] == [BODY] * 10
    finally:
        s.close()


def test_a_backlog_goes_in_bounded_rounds_between_the_loops_other_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dispatch, "BATCH_RECORDS", 1000)
    monkeypatch.setattr(dispatch, "LOOP_BATCHES", 2)
    s = _store(tmp_path)
    try:
        rounds: list[int] = []
        # Where dispatch stood each time another callback of the loop ran.
        between: list[int] = []

        async def run() -> None:
            loop = asyncio.get_running_loop()
            lr = LoopReput(s.reput, loop, rounds.append)
            _put(s, 9000)

            def other() -> None:
                between.append(s.reput.dispatched_messages)
                if s.reput.behind():
                    loop.call_soon(other)

            lr.kick()
            loop.call_soon(other)
            await _until(lambda: s.reput.behind() == 0)
            lr.close()

        asyncio.run(run())
        assert sum(rounds) == 9000
        # 2 batches of 1000 a round at most, so at least five rounds, the loop's other
        # callback running in between them.
        assert max(rounds) <= 2000
        assert len(rounds) >= 5
        assert len(set(between)) >= 4
        assert s.max_offset_in_queue("T", 0) == 3000
    finally:
        s.close()


def test_a_held_dispatch_lock_does_not_block_the_loop(tmp_path: Path) -> None:
    s = _store(tmp_path)
    try:
        _put(s, 1000)
        held = threading.Event()
        release = threading.Event()

        def hold() -> None:
            with s.reput._lock:  # as a flush gathering its work, or retention deleting files
                held.set()
                release.wait(10)

        t = threading.Thread(target=hold)
        t.start()
        held.wait(5)
        ticks: list[float] = []

        async def run() -> None:
            loop = asyncio.get_running_loop()
            lr = LoopReput(s.reput, loop, None)
            lr.kick()
            for _ in range(20):
                ticks.append(time.monotonic())
                await asyncio.sleep(0.005)
            assert s.reput.behind() > 0  # not dispatched while the lock is held
            release.set()
            await _until(lambda: s.reput.behind() == 0)
            lr.close()

        asyncio.run(run())
        t.join(5)
        # The loop kept turning while the round could not take the lock.
        assert max(b - a for a, b in itertools.pairwise(ticks)) < 1.0
        assert s.max_offset_in_queue("T", 0) == 500
    finally:
        release.set()
        s.close()


def test_no_round_runs_after_close(tmp_path: Path) -> None:
    s = _store(tmp_path)
    try:
        rounds: list[int] = []

        async def run() -> None:
            lr = LoopReput(s.reput, asyncio.get_running_loop(), rounds.append)
            _put(s, 100)
            lr.kick()
            lr.close()
            lr.kick()
            await asyncio.sleep(0.05)

        asyncio.run(run())
        assert rounds == []
        assert s.reput.behind() > 0
    finally:
        s.close()  # the store's close dispatches what is left
    with MessageStore(tmp_path, CFG, readonly=True) as ro:
        assert ro.max_offset_in_queue("T", 0) == 100


def test_after_a_heavy_round_the_next_waits_heavy_pause(tmp_path: Path) -> None:
    """A round of HEAVY_ROUND records or more is followed by ``heavy_pause`` before the next
    (what a follower's slower pace rests on): records committed meanwhile wait for it, and then
    go in one round."""
    s = _store(tmp_path)
    try:
        rounds: list[int] = []
        pause = 0.3
        seen_early: list[int] = []

        async def run() -> None:
            lr = LoopReput(s.reput, asyncio.get_running_loop(), rounds.append)
            lr.heavy_pause = pause
            _put(s, dispatch.HEAVY_ROUND, queues=1)
            lr.kick()
            await _until(lambda: s.reput.behind() == 0)
            t0 = time.monotonic()
            _put(s, 10, queues=1)
            lr.kick()
            # Timers never fire early, so this holds however loaded the machine is.
            while time.monotonic() - t0 < pause / 2:
                seen_early.append(s.reput.dispatched_messages)
                await asyncio.sleep(0.01)
            await _until(lambda: s.reput.behind() == 0)
            lr.close()

        asyncio.run(run())
        assert rounds == [dispatch.HEAVY_ROUND, 10]
        assert set(seen_early) == {dispatch.HEAVY_ROUND}
    finally:
        s.close()
