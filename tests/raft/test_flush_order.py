"""FlushOrder: acks and votes go only after a flush that started after their writes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dledger.codes import ResponseCode
from dledger.raft.effects import AppendDone, Flush, Output, RoleChanged, Send
from dledger.raft.flush_order import FlushOrder, Ready
from dledger.raft.member_state import Role
from dledger.raft.messages import AppendEntryResponse, PushEntryRequest, PushEntryResponse


def push() -> Send:
    return Send("n1", PushEntryRequest(), early=True)


def ack(i: int) -> Send:
    return Send("n0", PushEntryResponse(index=i))


def done(handle: int) -> AppendDone:
    return AppendDone(handle, AppendEntryResponse(code=ResponseCode.SUCCESS))


def test_nothing_written_goes_at_once() -> None:
    order: FlushOrder[str] = FlushOrder()
    outs: list[Output] = [ack(1), RoleChanged(1, Role.FOLLOWER, "n0")]
    assert order.submit("g", outs) == outs
    assert not order.flush_wanted and order.waiting == 0


def test_writes_wait_for_a_flush_early_outputs_do_not() -> None:
    order: FlushOrder[str] = FlushOrder()
    p, d, a = push(), done(7), ack(3)
    assert order.submit("g", [Flush(3, token=1), p, a, d]) == [p, d]
    assert order.waiting == 1 and order.flush_wanted
    token = order.flush_started()
    assert order.running == token and not order.flush_wanted
    assert order.flush_done(token) == [Ready("g", [a], [1])]
    assert order.running is None and not order.flush_wanted and order.waiting == 0


def test_later_outputs_keep_their_place_behind_waiting_ones() -> None:
    order: FlushOrder[str] = FlushOrder()
    a, b = ack(1), ack(2)
    assert order.submit("g", [Flush(1, token=1), a]) == []
    # No write of its own, but an earlier batch waits: it must not overtake it.
    assert order.submit("g", [b]) == []
    token = order.flush_started()
    assert order.flush_done(token) == [Ready("g", [a], [1]), Ready("g", [b], [])]
    # Nothing is owed any more: the next batch goes at once.
    assert order.submit("g", [a]) == [a]


def test_writes_made_during_a_flush_wait_for_the_next_one() -> None:
    order: FlushOrder[str] = FlushOrder()
    a, b = ack(1), ack(2)
    order.submit("g", [Flush(1, token=1), a])
    first = order.flush_started()
    order.submit("g", [Flush(2, token=2), b])
    assert not order.flush_wanted  # one flush at a time
    assert order.flush_done(first) == [Ready("g", [a], [1])]
    assert order.flush_wanted and order.waiting == 1
    second = order.flush_started()
    assert order.flush_done(second) == [Ready("g", [b], [2])]


def test_one_flush_covers_every_write_before_it_started() -> None:
    order: FlushOrder[str] = FlushOrder()
    a, b = ack(1), ack(2)
    order.submit("g1", [Flush(1, token=1), a])
    order.submit("g2", [Flush(5, token=1), b])
    token = order.flush_started()
    assert order.flush_done(token) == [Ready("g1", [a], [1]), Ready("g2", [b], [1])]


def test_a_failed_flush_releases_nothing_and_is_wanted_again() -> None:
    order: FlushOrder[str] = FlushOrder()
    a = ack(1)
    order.submit("g", [Flush(1, token=1), a])
    token = order.flush_started()
    order.flush_failed(token)
    assert order.flush_wanted and order.waiting == 1 and order.running is None
    assert order.flush_done(order.flush_started()) == [Ready("g", [a], [1])]


def test_misuse_is_refused() -> None:
    order: FlushOrder[str] = FlushOrder()
    order.submit("g", [Flush(1, token=1)])
    token = order.flush_started()
    with pytest.raises(RuntimeError):
        order.flush_started()
    with pytest.raises(RuntimeError):
        order.flush_done(token + 1)


# --- the rule, over any interleaving ---------------------------------------------------------

Op = tuple[str, bool]  # ("submit", has_flush) | ("start", _) | ("done", failed)


@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("submit"), st.booleans()), st.tuples(st.sampled_from(["start", "done"]), st.booleans())
        ),
        max_size=60,
    )
)
@settings(max_examples=300, deadline=None)
def test_nothing_goes_before_a_flush_that_started_after_its_write(ops: list[Op]) -> None:
    """Whatever the order of writes and flushes: an output goes only once every write made
    up to its batch is covered by a flush that started after it and ended; outputs go in
    the order they came; and nothing is lost."""
    order: FlushOrder[int] = FlushOrder()
    clock = 0
    last_write_at = -1  # when the last batch holding a Flush was submitted
    needs: dict[int, int] = {}  # batch -> the write its outputs wait for
    running: tuple[int, int] | None = None  # (token, start time)
    covered = -1  # every write at or before this time is durable
    gone: list[int] = []

    def release(batches: list[int]) -> None:
        for b in batches:
            assert needs[b] <= covered, f"batch {b} went before its write at {needs[b]} was flushed"
        gone.extend(batches)

    for batch, (kind, flag) in enumerate(ops):
        clock += 1
        if kind == "submit":
            outs: list[Output] = [Flush(0, token=batch)] if flag else []
            outs += [ack(batch), push()]
            if flag:
                last_write_at = clock
            needs[batch] = last_write_at
            now = order.submit(batch, outs)
            assert not any(isinstance(o, Flush) for o in now)
            if len(now) == 2:
                release([batch])
        elif kind == "start" and running is None and order.flush_wanted:
            running = (order.flush_started(), clock)
        elif kind == "done" and running is not None:
            token, started = running
            running = None
            if flag:
                order.flush_failed(token)
            else:
                covered = max(covered, started)
                release([_batch_of(r) for r in order.flush_done(token)])
    # Then the disk keeps up: everything goes.
    if running is not None:
        covered = max(covered, running[1])
        release([_batch_of(r) for r in order.flush_done(running[0])])
    clock += 1
    while order.flush_wanted:
        covered = clock
        release([_batch_of(r) for r in order.flush_done(order.flush_started())])
    assert sorted(gone) == gone == [b for b, (kind, _) in enumerate(ops) if kind == "submit"]


def _batch_of(ready: Ready[int]) -> int:
    (o,) = ready.outputs
    assert isinstance(o, Send) and isinstance(o.msg, PushEntryResponse)
    assert ready.tokens == ([ready.key] if ready.tokens else [])
    return ready.key
