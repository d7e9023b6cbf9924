"""DLedgerEntryPusher.EntryHandler: the follower side of replication, sans-IO.

APPENDs are buffered by first index and applied strictly at ``ledgerEndIndex + 1``;
COMPARE, TRUNCATE and COMMIT go through a queue that is served first; a COMPARE or
TRUNCATE clears the buffered APPENDs (handlePush), since they were sent for a log the
leader no longer assumes. ``check_abnormal_future`` answers stale duplicates (fall-behind)
and fails a stuck request (fast-forward) so the leader falls back to COMPARE.

One deliberate tightening: DLedger checks "am I a follower of this leader in this term" only
inside ``appendAsFollower``/``truncate``; we also check it for COMPARE, COMMIT and the
fall-behind answer. Without it a member still following an older leader can tell the new
leader "I match up to k" (or take its commit index), after which the old leader may still
truncate that member below k, and the new leader would count an ack it no longer has.
"""

from __future__ import annotations

import logging
from collections import deque

from dledger.codes import ResponseCode
from dledger.errors import DLedgerError, check
from dledger.log_limit import RepeatLimiter, held_back
from dledger.raft.core import NEVER, Core, elapsed
from dledger.raft.messages import PushEntryRequest, PushEntryResponse, PushType

log = logging.getLogger(__name__)


class EntryHandler:
    def __init__(self, core: Core) -> None:
        self.core = core
        # firstIndex -> (request, arrival time); the arrival time plays the TimeoutFuture.
        self.write_request_map: dict[int, tuple[PushEntryRequest, int]] = {}
        self.compare_or_truncate_requests: deque[PushEntryRequest] = deque()
        self.last_check_fast_forward_time_ms = NEVER
        # Replay fence for the current (term, leader); see _fenced.
        self.fence_term = -1
        self.fence_leader: str | None = None
        self.fence_control_req = 0
        self.fence_mutation_req = 0
        # A leader that keeps resending what we hold (its acks lost): one warning a minute.
        self.fall_behind_warnings = RepeatLimiter()
        # A leader that resends a push still buffered here (its retry timer ran out first): the
        # same, or it logs once per retry for as long as the gap ahead of it stays open.
        self.repeated_push_warnings = RepeatLimiter()

    def clear(self) -> None:
        self.write_request_map.clear()
        self.compare_or_truncate_requests.clear()

    # --- intake (handlePush) ---------------------------------------------------------------

    def handle_push(self, req: PushEntryRequest) -> None:
        if req.type == PushType.APPEND:
            if req.raw:
                malformed = req.entries or req.raw_count <= 0 or req.raw_index < 0 or req.raw_pos < 0
            else:
                malformed = not req.entries
            if malformed:
                self._respond(req, ResponseCode.UNEXPECTED_ARGUMENT)
                return
            first = req.first_index
            if first in self.write_request_map:
                held = self.repeated_push_warnings.allow("repeated-push", self.core.now / 1000)
                if held is not None:
                    log.warning("[MONITOR]The index %d has already existed with %s%s", first, req.term, held_back(held))
                self._respond(req, ResponseCode.REPEATED_PUSH)
                return
            self.write_request_map[first] = (req, self.core.now)
        elif req.type == PushType.COMMIT:
            self._enqueue(req)
        elif req.type in (PushType.COMPARE, PushType.TRUNCATE):
            if not req.entries:
                self._respond(req, ResponseCode.UNEXPECTED_ARGUMENT)
                return
            self.write_request_map.clear()
            self._enqueue(req)
        else:  # pragma: no cover - PushType is closed, a decoded int may not be
            log.error("[BUG]Unknown type %s", req.type)
            self._respond(req, ResponseCode.UNEXPECTED_ARGUMENT)
            return
        self.do_work()

    def _enqueue(self, req: PushEntryRequest) -> None:
        q = self.compare_or_truncate_requests
        if len(q) >= self.core.timings.handler_queue_capacity:
            # DLedger's ArrayBlockingQueue.put would block the network thread; we drop the
            # oldest instead. Its sender times out and retries, as it would on a lost frame.
            dropped = q.popleft()
            log.warning("compare/truncate queue full, dropping %s at %d", dropped.type.name, dropped.first_index)
        q.append(req)

    # --- the work loop (doWork) ------------------------------------------------------------

    def do_work(self) -> None:
        ms = self.core.ms
        store = self.core.store
        while ms.is_follower():
            if self.compare_or_truncate_requests:
                req = self.compare_or_truncate_requests.popleft()
                if req.type == PushType.TRUNCATE:
                    self._handle_do_truncate(req.first_index, req)
                elif req.type == PushType.COMPARE:
                    self._handle_do_compare(req.first_index, req)
                else:
                    self._handle_do_commit(req.commit_index, req)
                continue
            next_index = store.ledger_end_index + 1
            pair = self.write_request_map.pop(next_index, None)
            if pair is None:
                pair = self._pop_overlapping(next_index)
            if pair is None:
                self._check_abnormal_future(store.ledger_end_index)
                return
            self._handle_do_append(next_index, pair[0])

    def _pop_overlapping(self, next_index: int) -> tuple[PushEntryRequest, int] | None:
        """A buffered batch that starts below ``next_index`` and reaches past it.

        DLedger only takes a batch that starts exactly at ``ledgerEnd + 1``; after a TRUNCATE
        that kept committed entries (see ``_handle_do_truncate``) the leader resends from
        below our end, and waiting for the fast-forward timeout would stall us for nothing.
        """
        if not self.write_request_map:
            return None
        for first, (req, _) in self.write_request_map.items():
            if first < next_index <= req.last_index:
                return self.write_request_map.pop(first)
        return None

    def _fenced(self, req: PushEntryRequest) -> bool:
        """True for a push that an earlier-applied push of the same leader supersedes.

        DLedger talks over one TCP connection, where a request is never replayed and never
        overtakes a later one. Our frames may be duplicated or reordered (the simulator does
        both), and two replays are unsafe: a TRUNCATE applied again after the APPENDs that
        followed it cuts entries the leader already counted (simulation seed 1405), and an
        APPEND of an abandoned phase landing after a COMPARE moves the log under the
        leader's search. Request ids grow with every push of a leader incarnation, so a
        TRUNCATE older than an applied APPEND/TRUNCATE, or an APPEND older than a processed
        COMPARE/TRUNCATE, is a replay.
        """
        if req.term != self.fence_term or req.leader_id != self.fence_leader:
            self.fence_term, self.fence_leader = req.term, req.leader_id
            self.fence_control_req = self.fence_mutation_req = 0
        if req.type == PushType.TRUNCATE:
            return req.req_id < self.fence_mutation_req
        if req.type == PushType.APPEND:
            return req.req_id < self.fence_control_req
        return False

    def _fence_after(self, req: PushEntryRequest) -> None:
        if req.type in (PushType.COMPARE, PushType.TRUNCATE):
            self.fence_control_req = max(self.fence_control_req, req.req_id)
        if req.type in (PushType.APPEND, PushType.TRUNCATE):
            self.fence_mutation_req = max(self.fence_mutation_req, req.req_id)

    def _check_leader(self, req: PushEntryRequest) -> None:
        """The member-state checks DLedger does in appendAsFollower/truncate."""
        ms = self.core.ms
        check(ms.is_follower(), ResponseCode.NOT_FOLLOWER)
        check(req.term == ms.curr_term, ResponseCode.INCONSISTENT_TERM, f"{req.term} != {ms.curr_term}")
        check(
            req.leader_id == ms.leader_id,
            ResponseCode.INCONSISTENT_LEADER,
            f"{req.leader_id} != {ms.leader_id}",
        )

    def _handle_do_append(self, write_index: int, req: PushEntryRequest) -> None:
        store = self.core.store
        try:
            check(req.first_index <= write_index <= req.last_index, ResponseCode.INCONSISTENT_STATE)
            self._check_leader(req)
            check(not self._fenced(req), ResponseCode.INCONSISTENT_STATE, "replayed APPEND")
            self._fence_after(req)
            if req.raw and req.first_index == write_index:
                # The common case: the leader's stored bytes, validated and written in one call.
                last = self.core.append_raw_as_follower(req.raw, req.raw_index, req.raw_pos, req.raw_count)
                check(last == req.last_index, ResponseCode.INCONSISTENT_STATE)
                entries = []
            else:
                # A resent batch overlapping what we hold: compare entry by entry.
                entries = req.entry_list()
            for entry in entries:
                if entry.index < write_index:
                    # The overlap of a resent batch: it must be what we already hold.
                    check(entry.same_as(store.get(entry.index)), ResponseCode.INCONSISTENT_STATE)
                    continue
                stored = self.core.append_as_follower(entry)
                check(stored.index == entry.index, ResponseCode.INCONSISTENT_STATE)
        except DLedgerError as e:
            log.warning("[HandleDoAppend] writeIndex=%d failed: %s", write_index, e)
            self._respond(req, ResponseCode.INCONSISTENT_STATE)
            return
        self._respond(req, ResponseCode.SUCCESS)
        store.update_committed_index(req.term, req.commit_index)

    def _handle_do_compare(self, compare_index: int, req: PushEntryRequest) -> None:
        try:
            self._check_leader(req)
            self._fenced(req)
            self._fence_after(req)
        except DLedgerError as e:
            # Not INCONSISTENT_STATE: that would make the leader walk its compare index down
            # one round trip at a time; any other code makes it back off and start over.
            self._respond(req, e.code)
            return
        try:
            check(compare_index == req.entries[0].index, ResponseCode.UNKNOWN)
            check(req.type == PushType.COMPARE, ResponseCode.UNKNOWN)
            local = self.core.store.get(compare_index)
            check(req.entries[0].same_as(local), ResponseCode.INCONSISTENT_STATE)
        except DLedgerError:
            self._respond(req, ResponseCode.INCONSISTENT_STATE)
            return
        self._respond(req, ResponseCode.SUCCESS)

    def _handle_do_truncate(self, truncate_index: int, req: PushEntryRequest) -> None:
        store = self.core.store
        try:
            check(truncate_index == req.entries[0].index, ResponseCode.UNKNOWN)
            check(req.type == PushType.TRUNCATE, ResponseCode.UNKNOWN)
            self._check_leader(req)
            check(not self._fenced(req), ResponseCode.INCONSISTENT_STATE, "replayed TRUNCATE")
            self._fence_after(req)
            log.info("[HandleDoTruncate] truncateIndex=%d", truncate_index)
            committed = store.committed_index
            if truncate_index < committed:
                # The leader's compare search can end below entries we hold as committed
                # (our log grew under it from pushes still in flight). Committed entries are
                # the leader's too, so keep them rather than let our commit index move back
                # (a committed entry never goes away); the leader's next APPEND overlaps and is verified.
                check(req.entries[0].same_as(store.get(truncate_index)), ResponseCode.INCONSISTENT_STATE)
                self.core.truncate(store.get(committed))
            else:
                index = self.core.truncate(req.entries[0])
                check(index == truncate_index, ResponseCode.INCONSISTENT_STATE)
        except DLedgerError as e:
            log.warning("[HandleDoTruncate] truncateIndex=%d failed: %s", truncate_index, e)
            self._respond(req, ResponseCode.INCONSISTENT_STATE)
            return
        self._respond(req, ResponseCode.SUCCESS)
        store.update_committed_index(req.term, req.commit_index)

    def _handle_do_commit(self, committed_index: int, req: PushEntryRequest) -> None:
        try:
            check(committed_index == req.commit_index, ResponseCode.UNKNOWN)
            check(req.type == PushType.COMMIT, ResponseCode.UNKNOWN)
            self._check_leader(req)
            self.core.store.update_committed_index(req.term, committed_index)
        except DLedgerError:
            self._respond(req, ResponseCode.UNKNOWN)
            return
        self._respond(req, ResponseCode.SUCCESS)

    # --- stuck requests (checkAbnormalFuture / checkAppendFuture) --------------------------

    def _check_abnormal_future(self, end_index: int) -> None:
        now = self.core.now
        if elapsed(now, self.last_check_fast_forward_time_ms) < self.core.timings.fast_forward_check_interval_ms:
            return
        self.last_check_fast_forward_time_ms = now
        if not self.write_request_map:
            return
        self._check_append_future(end_index)

    def _check_append_future(self, end_index: int) -> None:
        now = self.core.now
        timeout = self.core.timings.push_future_timeout_ms
        store = self.core.store
        min_fast_forward_index: int | None = None
        for first, (req, arrived) in list(self.write_request_map.items()):
            if req.last_index <= end_index:
                # Fall behind: a duplicate of what we already hold; maybe the ack was lost.
                try:
                    self._check_leader(req)
                    for entry in req.entry_list():
                        check(entry.same_as(store.get(entry.index)), ResponseCode.INCONSISTENT_STATE)
                    held = self.fall_behind_warnings.allow("fall-behind", now / 1000)
                    if held is not None:
                        log.warning(
                            "[PushFallBehind]The leader pushed an entry index=%d smaller than current "
                            "ledgerEndIndex=%d, maybe the last ack is missed%s",
                            req.last_index,
                            end_index,
                            held_back(held),
                        )
                    self._respond(req, ResponseCode.SUCCESS)
                except DLedgerError:
                    self._respond(req, ResponseCode.INCONSISTENT_STATE)
                del self.write_request_map[first]
                continue
            if first == end_index + 1:
                return
            if now - arrived < timeout:
                continue
            if min_fast_forward_index is None or first < min_fast_forward_index:
                min_fast_forward_index = first
        if min_fast_forward_index is None:
            return
        pair = self.write_request_map.pop(min_fast_forward_index, None)
        if pair is None:
            return
        log.warning("[PushFastForward] ledgerEndIndex=%d entryIndex=%d", end_index, min_fast_forward_index)
        self._respond(pair[0], ResponseCode.INCONSISTENT_STATE)

    # --- responses (buildResponse / buildBatchAppendResponse) ------------------------------

    def _respond(self, req: PushEntryRequest, code: ResponseCode) -> None:
        store = self.core.store
        resp = PushEntryResponse(
            code=code,
            term=req.term,
            index=req.last_index if req.type != PushType.COMMIT else -1,
            begin_index=store.ledger_begin_index,
            end_index=store.ledger_end_index,
            leader_id=self.core.ms.leader_id,
        )
        self.core.reply(req, resp)
