"""The leader side of replication (DLedgerEntryPusher's EntryDispatcher and QuorumAckChecker), sans-IO.

``Replicator`` is DLedgerEntryPusher's leader half: per-term watermarks, the pending-append
map, one ``EntryDispatcher`` per follower (COMPARE → TRUNCATE → APPEND, COMMIT when idle)
and the QuorumAckChecker. DLedger runs each dispatcher as a spinning thread that blocks on
COMPARE/TRUNCATE answers; here ``pump`` does one pass of that loop, an outstanding
COMPARE/TRUNCATE is a record with a deadline, and the node calls ``pump`` on every tick and
after every event that can unblock it.

Commit rule. DLedger commits the median watermark whatever the term of that entry. That is
Raft's Figure 8 hazard: a leader of term 4 that copies an entry of term 2 to a majority and
commits it can still see it overwritten by a leader elected with an entry of term 3 at the
same index (the voters' last terms are 2 < 3, so they vote for it). So ``check_quorum``
commits the median only when its entry is of the current term (Raft paper §5.4.2), or else the
smallest watermark, i.e. what every member holds (an entry on every member cannot be
replaced). Earlier-term entries thus commit with the first entry of the current term, or
as soon as all members have them. The median and the pending completions are otherwise
DLedger's. The simulator has not reached the Figure 8 interleaving with DLedger's rule;
tests/raft/test_raft_replication.py builds it by hand.

One addition: the runtime reports each new connection to a follower (``peer_connected``), and
a dispatcher with pushes or a COMPARE/TRUNCATE in flight starts over from COMPARE at once
(``EntryDispatcher.on_reconnected``), where DLedger waits for its push and compare timeouts.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dledger.codes import ResponseCode
from dledger.errors import DLedgerError, check
from dledger.log_limit import RepeatLimiter, held_back
from dledger.raft.core import NEVER, Core, elapsed
from dledger.raft.member_state import Role
from dledger.raft.messages import AppendEntryResponse, PushEntryRequest, PushEntryResponse, PushType
from dledger.store.entry import Entry

log = logging.getLogger(__name__)


class Quota:
    """DLedger's Quota: bytes per second over a ring of five one-second buckets."""

    def __init__(self, max_bytes: int, window: int = 5) -> None:
        self.max = max_bytes
        self.window = window
        self.samples = [0] * window
        self.time_vec = [-1] * window

    def _index(self, now: int) -> int:
        return (now // 1000) % self.window

    def sample(self, value: int, now: int) -> None:
        i, second = self._index(now), now // 1000
        if self.time_vec[i] != second:
            self.time_vec[i] = second
            self.samples[i] = value
        else:
            self.samples[i] += value

    def validate_now(self, now: int) -> bool:
        """True when this second's budget is used up."""
        i, second = self._index(now), now // 1000
        return self.time_vec[i] == second and self.samples[i] >= self.max

    @staticmethod
    def left_now(now: int) -> int:
        return (now // 1000 + 1) * 1000 - now


@dataclass(slots=True)
class PendingAppend:
    """An append waiting for its quorum ack (DLedger's AppendFuture / BatchAppendFuture)."""

    waiter: Any
    index: int
    pos: int
    positions: Sequence[int]
    deadline_ms: int


@dataclass(slots=True)
class _Outstanding:
    req_id: int
    type: PushType
    index: int
    deadline_ms: int


@dataclass(slots=True)
class EntryDispatcher:
    rep: Replicator
    peer_id: str
    type: PushType = PushType.COMPARE
    term: int = -1
    leader_id: str | None = None
    write_index: int = -1
    compare_index: int = -1
    last_push_commit_time_ms: int = NEVER
    last_check_leak_time_ms: int = NEVER
    # index -> send time (single push); firstIndex -> (send time, count) (batch push)
    pending_map: dict[int, int] = field(default_factory=dict)
    batch_pending_map: dict[int, tuple[int, int]] = field(default_factory=dict)
    # APPEND pushes in flight: req_id -> (first index, last index, send time). DLedger's
    # futures know their request; our answers are matched to theirs by req_id.
    append_inflight: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    # bounds of the compare search (see _on_compare_response); reset with compare_index
    match_floor: int = -1
    mismatch_ceiling: int = 1 << 62
    outstanding: _Outstanding | None = None
    backoff_until: int = NEVER
    throttle_until: int = NEVER
    quota: Quota | None = None
    # A follower that does not answer is retried every max_push_time_out_ms: warned of once a
    # minute, with the count in between, not once per entry.
    retry_warnings: RepeatLimiter = field(default_factory=RepeatLimiter)

    # --- state (checkAndFreshState / changeState) ------------------------------------------

    def check_and_fresh_state(self) -> bool:
        ms = self.rep.core.ms
        if not ms.is_leader():
            return False
        if self.term != ms.curr_term or self.leader_id is None or self.leader_id != ms.leader_id:
            check(ms.self_id == ms.leader_id, ResponseCode.UNKNOWN)
            self.term = ms.curr_term
            self.leader_id = ms.self_id
            # A new leadership starts from scratch: nothing learnt in another term holds.
            self.type = PushType.COMPARE
            self._reset_compare()
            self.pending_map.clear()
            self.batch_pending_map.clear()
            self.append_inflight.clear()
            self.outstanding = None
            self.backoff_until = NEVER
            self.throttle_until = NEVER
        return True

    def _reset_compare(self) -> None:
        self.compare_index = -1
        self.match_floor = -1
        self.mismatch_ceiling = 1 << 62

    def change_state(self, index: int, target: PushType) -> None:
        log.debug("[Push-%s]Change state from %s to %s at %d", self.peer_id, self.type.name, target.name, index)
        if target == PushType.APPEND:
            self._reset_compare()
            self.rep.update_peer_water_mark(self.term, self.peer_id, index)
            self.rep.wakeup_quorum_checker = True
            self.write_index = index + 1
        elif target == PushType.COMPARE:
            if self.type == PushType.APPEND:
                self._reset_compare()
                self.pending_map.clear()
                self.batch_pending_map.clear()
                self.append_inflight.clear()
        elif target == PushType.TRUNCATE:
            self._reset_compare()
        self.type = target

    def on_reconnected(self) -> bool:
        """A new connection to this follower was made: what was in flight on the old one is
        lost. DLedger notices only when a push goes unanswered for max_push_time_out_ms, or an
        outstanding COMPARE or TRUNCATE for 3 s, or the follower's fast-forward check fails a
        later push after up to 2 s; a follower back from a restart stays behind that long, and
        a leader dying meanwhile leaves one candidate that cannot win. Start over from COMPARE
        now instead: it finds where the follower's log stands, whatever happened to it."""
        if not self.check_and_fresh_state():
            return False
        if not (self.outstanding or self.append_inflight or self.pending_map or self.batch_pending_map):
            return False  # nothing was lost: the next push follows the follower's log as before
        log.info("[Push-%s]Reconnected with %s in flight; start to compare", self.peer_id, self.type.name)
        self.outstanding = None
        # From APPEND this also drops the pending maps (outside APPEND they are empty).
        self.change_state(-1, PushType.COMPARE)
        # What the search learnt may not hold for a follower that restarted (an unflushed
        # tail is gone): search from our end again, as a new leadership does.
        self._reset_compare()
        self.backoff_until = NEVER
        return True

    # --- the loop (doWork) ----------------------------------------------------------------

    def pump(self) -> None:
        if not self.check_and_fresh_state():
            return
        now = self.rep.core.now
        if now < self.backoff_until:
            return
        try:
            if self.type == PushType.APPEND:
                if self.rep.core.config.is_enable_batch_push:
                    self._do_batch_append()
                else:
                    self._do_append()
            else:
                self._do_compare()
        except DLedgerError as e:
            log.warning(
                "[Push-%s]Error in %s writeIndex=%d compareIndex=%d: %s",
                self.peer_id,
                self.type.name,
                self.write_index,
                self.compare_index,
                e,
            )
            self.outstanding = None
            self.change_state(-1, PushType.COMPARE)
            self.backoff_until = now + self.rep.core.timings.dispatcher_error_backoff_ms

    def _entry_for_append(self, index: int) -> Entry | None:
        try:
            return self.rep.core.store.get(index)
        except DLedgerError as e:
            if e.code == ResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN:
                self.change_state(-1, PushType.COMPARE)
                return None
            raise

    def _push(self, type_: PushType, entries: list[Entry]) -> int:
        core = self.rep.core
        req_id = core.new_req_id()
        core.send(
            self.peer_id,
            PushEntryRequest(
                leader_id=self.leader_id,
                term=self.term,
                type=type_,
                entries=entries,
                commit_index=core.store.committed_index,
                req_id=req_id,
            ),
            early=True,
        )
        return req_id

    def _throttled(self, entry: Entry) -> bool:
        return self._throttled_range(entry.index, entry.pos, entry.size)

    def _throttled_range(self, first_index: int, first_pos: int, nbytes: int) -> bool:
        """checkQuotaAndWait, for a push of ``nbytes`` from entry ``first_index`` (at
        ``first_pos``). DLedger sleeps before pushing; we push, then pause this peer."""
        core = self.rep.core
        now = core.now
        if now < self.throttle_until:
            return True
        store = core.store
        if store.ledger_end_index - first_index <= core.timings.dispatcher_max_pending_size:
            return False
        if not core.timings.push_throttle or self.quota is None:
            return False
        end = store.get(store.ledger_end_index)
        if end.pos + end.size - first_pos < core.config.peer_push_throttle_point:
            return False
        self.quota.sample(nbytes, now)
        if self.quota.validate_now(now):
            left = Quota.left_now(now)
            log.warning("[Push-%s]Quota exhaust, will pause %dms", self.peer_id, left)
            self.throttle_until = now + left
        return False

    # single push
    def _do_append(self) -> None:
        core = self.rep.core
        store = core.store
        timings = core.timings
        while self.check_and_fresh_state() and self.type == PushType.APPEND:
            if self.write_index > store.ledger_end_index:
                self._do_commit()
                self._do_check_append_response()
                break
            if elapsed(core.now, self.last_check_leak_time_ms) > timings.leak_check_interval_ms:
                wm = self.rep.get_peer_water_mark(self.term, self.peer_id)
                for index in [i for i in self.pending_map if i < wm]:
                    del self.pending_map[index]
                self._clean_inflight(wm)
                self.last_check_leak_time_ms = core.now
            elif len(self.pending_map) >= timings.dispatcher_max_pending_size:
                self._drop_acked_front(self.pending_map, _key, below=True)
            if len(self.pending_map) >= timings.dispatcher_max_pending_size:
                self._do_check_append_response()
                break
            if core.now < self.throttle_until:
                break
            if not self._do_append_inner(self.write_index):
                break
            self.write_index += 1

    def _do_append_inner(self, index: int) -> bool:
        entry = self._entry_for_append(index)
        if entry is None:
            return False
        self._throttled(entry)
        req_id = self._push(PushType.APPEND, [entry])
        self.append_inflight[req_id] = (index, index, self.rep.core.now)
        self.pending_map[index] = self.rep.core.now
        self.last_push_commit_time_ms = self.rep.core.now
        return True

    def _do_check_append_response(self) -> None:
        wm = self.rep.get_peer_water_mark(self.term, self.peer_id)
        sent = self.pending_map.get(wm + 1)
        if sent is not None and self.rep.core.now - sent > self.rep.core.config.max_push_time_out_ms:
            held = self.retry_warnings.allow("retry", self.rep.core.now / 1000)
            if held is not None:
                log.warning("[Push-%s]Retry to push entry at %d%s", self.peer_id, wm + 1, held_back(held))
            self._do_append_inner(wm + 1)

    # batch push
    def _do_batch_append(self) -> None:
        core = self.rep.core
        store = core.store
        timings = core.timings
        while self.check_and_fresh_state() and self.type == PushType.APPEND:
            if self.write_index > store.ledger_end_index:
                self._do_commit()
                self._do_check_batch_append_response()
                break
            if elapsed(core.now, self.last_check_leak_time_ms) > timings.leak_check_interval_ms:
                self._clean_batch_pending()
                self.last_check_leak_time_ms = core.now
            elif len(self.batch_pending_map) >= timings.dispatcher_max_pending_size:
                self._drop_acked_front(self.batch_pending_map, _batch_last)
            if len(self.batch_pending_map) >= timings.dispatcher_max_pending_size:
                self._do_check_batch_append_response()
                break
            if core.now < self.throttle_until:
                break
            count = self._send_range(self.write_index, store.ledger_end_index)
            if not count:
                break
            self.write_index += count

    def _drop_acked_front(
        self, pending: dict[int, Any], last_of: Callable[[Any, Any], int], below: bool = False
    ) -> None:
        """A full pending map: drop what the follower has acked. DLedger scans the whole map
        here, on every pass while it is full: with a follower down that is O(max pending) per
        append. Acks clear it from the front (sends go in index order); the timed leak check
        scans the rest. ``below``: the map keeps entries up to the watermark itself (DLedger's
        single-push pendingMap drops only those under it)."""
        wm = self.rep.get_peer_water_mark(self.term, self.peer_id)
        _drop_front(pending, wm - 1 if below else wm, last_of)
        _drop_front(self.append_inflight, wm, _inflight_last)

    def _clean_batch_pending(self) -> None:
        wm = self.rep.get_peer_water_mark(self.term, self.peer_id)
        for first, (_, count) in list(self.batch_pending_map.items()):
            if first + count - 1 <= wm:
                del self.batch_pending_map[first]
        self._clean_inflight(wm)

    def _send_range(self, first: int, last: int) -> int:
        """Push entries ``first`` .. at most ``last`` as one batch APPEND carrying the stored
        bytes (up to ``max_batch_push_size``, within one data file); returns how many went."""
        core = self.rep.core
        try:
            blob, pos, count = self.rep.raw_range(first, last)
        except DLedgerError as e:
            if e.code == ResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN:
                self.change_state(-1, PushType.COMPARE)
                return 0
            raise
        self._throttled_range(first, pos, len(blob))
        req_id = core.new_req_id()
        core.send(
            self.peer_id,
            PushEntryRequest(
                leader_id=self.leader_id,
                term=self.term,
                type=PushType.APPEND,
                raw=blob,
                raw_index=first,
                raw_pos=pos,
                raw_count=count,
                commit_index=core.store.committed_index,
                req_id=req_id,
            ),
            early=True,
        )
        now = core.now
        self.batch_pending_map[first] = (now, count)
        self.append_inflight[req_id] = (first, first + count - 1, now)
        self.last_push_commit_time_ms = now
        return count

    def _do_check_batch_append_response(self) -> None:
        wm = self.rep.get_peer_water_mark(self.term, self.peer_id)
        pair = self.batch_pending_map.get(wm + 1)
        core = self.rep.core
        if pair is not None and core.now - pair[0] > core.config.max_push_time_out_ms:
            first, last = wm + 1, wm + pair[1]
            held = self.retry_warnings.allow("retry", core.now / 1000)
            if held is not None:
                log.warning("[Push-%s]Retry to push entry from %d to %d%s", self.peer_id, first, last, held_back(held))
            # The batch may have been pushed as more than one frame (one per data file).
            while first <= min(last, core.store.ledger_end_index):
                count = self._send_range(first, last)
                if not count:
                    break
                first += count

    def _do_commit(self) -> None:
        core = self.rep.core
        if elapsed(core.now, self.last_push_commit_time_ms) > core.timings.commit_push_interval_ms:
            self._push(PushType.COMMIT, [])
            self.last_push_commit_time_ms = core.now

    # compare / truncate
    def _do_compare(self) -> None:
        core = self.rep.core
        store = core.store
        out = self.outstanding
        if out is not None:
            if core.now >= out.deadline_ms:
                raise DLedgerError(ResponseCode.TIMEOUT, f"no answer to {out.type.name} at {out.index}")
            return
        if self.type == PushType.TRUNCATE:
            # Only reachable if the TRUNCATE record was lost; start the search again.
            self.type = PushType.COMPARE
        if self.compare_index == -1 and store.ledger_end_index == -1:
            return
        if self.compare_index == -1:
            self.compare_index = store.ledger_end_index
            log.info("[Push-%s][DoCompare] compareIndex=-1 means start to compare", self.peer_id)
        elif self.compare_index > store.ledger_end_index or self.compare_index < store.ledger_begin_index:
            log.info(
                "[Push-%s][DoCompare] compareIndex=%d out of range [%d, %d]",
                self.peer_id,
                self.compare_index,
                store.ledger_begin_index,
                store.ledger_end_index,
            )
            self.compare_index = store.ledger_end_index
        entry = store.get(self.compare_index)
        req_id = self._push(PushType.COMPARE, [entry])
        self.outstanding = _Outstanding(
            req_id, PushType.COMPARE, self.compare_index, core.now + core.timings.compare_wait_ms
        )

    def _on_compare_response(self, resp: PushEntryResponse) -> None:
        """doCompare's decision, with one change: never truncate below a known match.

        DLedger truncates at the compare index as soon as it matches but the follower holds
        more. The follower's log can grow between two compares (APPENDs of ours still in
        flight land after it answered), so that cuts entries that do match ours, committed
        ones included, and moves the follower's commit index back (simulation seed 33). We
        keep the highest index known to match (``match_floor``) and the lowest known not to
        (``mismatch_ceiling``), search between them, and truncate only at the floor when the
        next entry is known not to match or we hold nothing past it.
        """
        store = self.rep.core.store
        check(
            resp.code in (ResponseCode.INCONSISTENT_STATE, ResponseCode.SUCCESS),
            ResponseCode(resp.code),
            f"compare at {self.compare_index} answered {resp.code}",
        )
        begin, end = store.ledger_begin_index, store.ledger_end_index
        ci = self.compare_index
        truncate_index = -1
        if resp.code == ResponseCode.SUCCESS:
            self.match_floor = max(self.match_floor, ci)
            if ci == resp.end_index:
                self.change_state(ci, PushType.APPEND)
                return
            hi = min(resp.end_index, end, self.mismatch_ceiling - 1)
            if hi > ci:
                self.compare_index = (ci + hi + 1) // 2
            else:
                truncate_index = ci
        elif resp.end_index < begin or resp.begin_index > end:
            # No overlap: the follower was away while the leader dropped expired entries.
            truncate_index = begin
        elif ci < resp.begin_index:
            truncate_index = begin
        elif ci > resp.end_index:
            self.compare_index = resp.end_index
        else:
            self.mismatch_ceiling = min(self.mismatch_ceiling, ci)
            if self.match_floor >= 0 and self.match_floor < ci:
                if self.match_floor + 1 >= ci:
                    truncate_index = self.match_floor
                else:
                    self.compare_index = (self.match_floor + ci) // 2
            else:
                self.compare_index = ci - 1
        if truncate_index == -1 and self.compare_index < begin:
            truncate_index = begin
        if truncate_index != -1:
            self.change_state(truncate_index, PushType.TRUNCATE)
            self._do_truncate(truncate_index)

    def _do_truncate(self, truncate_index: int) -> None:
        core = self.rep.core
        check(self.type == PushType.TRUNCATE, ResponseCode.UNKNOWN)
        entry = core.store.get(truncate_index)
        log.info("[Push-%s]Will push data to truncate truncateIndex=%d", self.peer_id, truncate_index)
        req_id = self._push(PushType.TRUNCATE, [entry])
        self.outstanding = _Outstanding(
            req_id, PushType.TRUNCATE, truncate_index, core.now + core.timings.compare_wait_ms
        )

    def _on_truncate_response(self, resp: PushEntryResponse, truncate_index: int) -> None:
        check(resp.code == ResponseCode.SUCCESS, ResponseCode(resp.code), f"truncate at {truncate_index}")
        self.last_push_commit_time_ms = self.rep.core.now
        self.change_state(truncate_index, PushType.APPEND)

    # --- answers ---------------------------------------------------------------------------

    def on_response(self, resp: PushEntryResponse) -> None:
        if not self.check_and_fresh_state() or resp.term != self.term:
            return
        out = self.outstanding
        if out is not None and resp.req_id == out.req_id:
            self.outstanding = None
            try:
                if out.type == PushType.COMPARE:
                    self._on_compare_response(resp)
                else:
                    self._on_truncate_response(resp, out.index)
            except DLedgerError as e:
                log.warning("[Push-%s]%s failed: %s", self.peer_id, out.type.name, e)
                self.change_state(-1, PushType.COMPARE)
                self.backoff_until = self.rep.core.now + self.rep.core.timings.dispatcher_error_backoff_ms
                return
            self.pump()
            return
        inflight = self.append_inflight.pop(resp.req_id, None)
        if inflight is None:
            # A COMMIT answer, or one for a push of an abandoned phase or compare round.
            return
        first, last, _ = inflight
        if resp.code == ResponseCode.SUCCESS:
            # This follower now holds, durably, our entries up to ``last`` in this term.
            self.pending_map.pop(first, None)
            self.batch_pending_map.pop(first, None)
            self.rep.update_peer_water_mark(self.term, self.peer_id, last)
            self.rep.wakeup_quorum_checker = True
            self.pump()
        elif resp.code == ResponseCode.INCONSISTENT_STATE:
            log.info("[Push-%s]Get INCONSISTENT_STATE when push index %d, change to COMPARE", self.peer_id, last)
            if self.type == PushType.APPEND:
                self.change_state(-1, PushType.COMPARE)
                self.pump()
        else:
            log.debug("[Push-%s]Get error response code %s at %d", self.peer_id, resp.code, last)

    def _clean_inflight(self, wm: int) -> None:
        now = self.rep.core.now
        too_old = now - 10 * self.rep.core.config.max_push_time_out_ms
        for req_id in [r for r, (_, last, sent) in self.append_inflight.items() if last <= wm or sent < too_old]:
            del self.append_inflight[req_id]


def _drop_front(d: dict[Any, Any], wm: int, last_of: Callable[[Any, Any], int]) -> None:
    """Delete entries from the front of ``d`` (insertion order) while the last index they
    cover, ``last_of(key, value)``, is at most ``wm``."""
    while d:
        key = next(iter(d))
        if last_of(key, d[key]) > wm:
            return
        del d[key]


def _key(key: int, _value: object) -> int:
    return key


def _batch_last(first: int, value: tuple[int, int]) -> int:
    return first + value[1] - 1


def _inflight_last(_req_id: int, value: tuple[int, int, int]) -> int:
    return value[1]


def quorum_water_mark(marks_descending: Sequence[int]) -> int:
    """The highest index that a majority of the group holds, from every member's watermark
    (the leader's own included), sorted largest first: the (n // 2 + 1)-th largest. In a
    group of 4, {3, 3, 1, 1} gives 1: two members are not a majority of four."""
    return marks_descending[len(marks_descending) // 2]


class Replicator:
    def __init__(self, core: Core, on_append_done: Callable[[Any, AppendEntryResponse], None]) -> None:
        self.core = core
        self.on_append_done = on_append_done
        self.dispatchers: dict[str, EntryDispatcher] = {}
        for peer in core.ms.others():
            d = EntryDispatcher(self, peer)
            d.quota = Quota(core.config.peer_push_quota)
            self.dispatchers[peer] = d
        # Only the current term's map is kept: DLedger drops the others at its next check.
        self.water_mark_term = -1
        self.water_marks: dict[str, int] = {}
        self.pending_term = -1
        self.pending: OrderedDict[int, PendingAppend] = OrderedDict()
        self.last_quorum_index = -1
        self.last_check_leak_time_ms = NEVER
        self.wakeup_quorum_checker = False
        # The last batch read for a push: (first, last, (blob, pos, count)). Followers in step
        # ask for the same range in one pump; a leader's entries do not change in its term.
        self._raw_cache: tuple[int, int, tuple[bytes, int, int]] | None = None

    # --- watermarks ------------------------------------------------------------------------

    def _check_term_for_water_mark(self, term: int) -> None:
        if self.water_mark_term != term:
            self.water_mark_term = term
            self.water_marks = dict.fromkeys(self.core.ms.peer_map, -1)

    def update_peer_water_mark(self, term: int, peer: str, index: int) -> None:
        self._check_term_for_water_mark(term)
        if self.water_marks.get(peer, -1) < index:
            self.water_marks[peer] = index

    def get_peer_water_mark(self, term: int, peer: str) -> int:
        self._check_term_for_water_mark(term)
        return self.water_marks.get(peer, -1)

    # --- pending appends -------------------------------------------------------------------

    def is_pending_full(self, term: int) -> bool:
        self._check_term_for_pending_map(term)
        return len(self.pending) > self.core.config.max_pending_requests_num

    def _check_term_for_pending_map(self, term: int) -> None:
        if self.pending_term != term:
            self.fail_pending(ResponseCode.TERM_CHANGED)
            self.pending_term = term

    def fail_pending(self, code: ResponseCode) -> None:
        pending, self.pending = self.pending, OrderedDict()
        for p in pending.values():
            self._complete(p, code, self.pending_term)

    def _complete(self, p: PendingAppend, code: ResponseCode, term: int) -> None:
        ms = self.core.ms
        resp = AppendEntryResponse(
            group=ms.group,
            code=code,
            term=term,
            index=p.index,
            pos=p.pos,
            positions=p.positions if code == ResponseCode.SUCCESS else [],
            leader_id=ms.leader_id,
        )
        self.on_append_done(p.waiter, resp)

    def wait_ack(self, entry_index: int, entry_term: int, pos: int, positions: Sequence[int], waiter: Any) -> None:
        """waitAck: record the append. DLedger counts the leader's own copy here; we count it
        when it is durable (``on_flushed``), so that pushes can go out before our flush."""
        self._check_term_for_water_mark(entry_term)
        self._check_term_for_pending_map(entry_term)
        old = self.pending.get(entry_index)
        if old is not None:
            log.warning("[MONITOR] get old wait at index=%d", entry_index)
        self.pending[entry_index] = PendingAppend(
            waiter, entry_index, pos, positions, self.core.now + self.core.config.max_wait_ack_time_ms
        )
        self.wakeup_quorum_checker = True

    # --- the QuorumAckChecker --------------------------------------------------------------

    def check_quorum(self) -> None:
        core = self.core
        ms = core.ms
        self.wakeup_quorum_checker = False
        if not ms.is_leader():
            return
        term = ms.curr_term
        store = core.store
        self._check_term_for_pending_map(term)
        self._check_term_for_water_mark(term)
        if elapsed(core.now, self.last_check_leak_time_ms) > core.timings.leak_check_interval_ms:
            self.update_peer_water_mark(term, ms.self_id, core.durable_index)
            self.last_check_leak_time_ms = core.now
        marks = sorted(self.water_marks.values(), reverse=True)
        quorum_index = quorum_water_mark(marks)
        if quorum_index > store.committed_index and quorum_index >= store.ledger_begin_index >= 0:
            # Raft paper §5.4.2 (see the module docstring): count replicas only for our own term...
            if store.term_at(quorum_index) == term:
                store.update_committed_index(term, quorum_index)
            else:
                # ...or take what every member holds. An entry on all members cannot be
                # replaced: no candidate lacking it can collect votes. This lets a new
                # leader commit its predecessor's tail without a write of its own (DLedger
                # has no no-op entry) whenever the whole group is up.
                full_index = marks[-1]
                if full_index > store.committed_index:
                    store.update_committed_index(term, full_index)
        committed = store.committed_index
        pending = self.pending
        while pending:
            index, p = next(iter(pending.items()))
            if index > committed:
                break
            pending.popitem(last=False)
            self._complete(p, ResponseCode.SUCCESS, term)
        while pending:
            index, p = next(iter(pending.items()))
            if p.deadline_ms > core.now:
                break
            pending.popitem(last=False)
            self._complete(p, ResponseCode.WAIT_QUORUM_ACK_TIMEOUT, term)
        self.last_quorum_index = quorum_index

    # --- driving ---------------------------------------------------------------------------

    def raw_range(self, first: int, last: int) -> tuple[bytes, int, int]:
        """``store.get_raw_range`` for a push, read once for all the followers that want it."""
        cached = self._raw_cache
        if cached is not None and cached[0] == first and cached[1] == last:
            return cached[2]
        got = self.core.store.get_raw_range(first, last, self.core.config.max_batch_push_size)
        self._raw_cache = (first, last, got)
        return got

    def on_role_change(self, term: int, role: Role) -> None:
        self._raw_cache = None
        if role == Role.LEADER:
            self._check_term_for_water_mark(term)
            self._check_term_for_pending_map(term)
            self.update_peer_water_mark(term, self.core.ms.self_id, self.core.durable_index)
        else:
            # DLedger leaves these futures until a later leadership; the caller deserves to
            # know now that this leader can no longer confirm them.
            self.fail_pending(ResponseCode.TERM_CHANGED)

    def on_flushed(self) -> None:
        """Our own log is durable up to ``core.durable_index``: count it, as a peer's ack."""
        ms = self.core.ms
        if not ms.is_leader():
            return
        self.update_peer_water_mark(ms.curr_term, ms.self_id, self.core.durable_index)
        self.check_quorum()

    def on_push_response(self, resp: PushEntryResponse) -> None:
        d = self.dispatchers.get(resp.local_id)
        if d is None:
            return
        d.on_response(resp)
        if self.wakeup_quorum_checker:
            self.check_quorum()

    def on_peer_connected(self, peer: str) -> bool:
        """The transport made a new connection to ``peer`` (see EntryDispatcher.on_reconnected).
        True when that follower is being resynchronised."""
        d = self.dispatchers.get(peer)
        if d is None or not self.core.ms.is_leader():
            return False
        if not d.on_reconnected():
            return False
        d.pump()
        return True

    def pump(self) -> None:
        if not self.core.ms.is_leader():
            return
        for d in self.dispatchers.values():
            d.pump()
        self.check_quorum()

    def fall_behind(self, peer: str) -> int:
        """How far ``peer`` lags our log, by its watermark in the current term."""
        ms = self.core.ms
        return self.core.store.ledger_end_index - self.get_peer_water_mark(ms.curr_term, peer)
