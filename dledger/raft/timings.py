"""The intervals DLedger hard-codes (in DLedgerLeaderElector, DLedgerEntryPusher and
DLedgerServer), as one object.

DLedger's defaults are the defaults here. They are injectable because the simulator runs
the same rules with every interval scaled down together, so that thousands of elections
fit in a test run; production code should leave them alone.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class RaftTimings:
    # maintainAsCandidate: voteLatch.await(2000 + random.nextInt(maxVoteIntervalMs)) in 0.2.3.
    vote_wait_base_ms: int = 2000
    # EntryDispatcher / QuorumAckChecker leak checks.
    leak_check_interval_ms: int = 1000
    # EntryDispatcher.doCommit: push a COMMIT when idle this long.
    commit_push_interval_ms: int = 1000
    # EntryHandler.checkAbnormalFuture rate limit.
    fast_forward_check_interval_ms: int = 1000
    # EntryHandler.handlePush: new TimeoutFuture<>(1000).
    push_future_timeout_ms: int = 1000
    # doCompare / doTruncate: future.get(3, SECONDS).
    compare_wait_ms: int = 3000
    # EntryDispatcher.doWork catch: DLedgerUtils.sleep(500).
    dispatcher_error_backoff_ms: int = 500
    # EntryDispatcher.maxPendingSize.
    dispatcher_max_pending_size: int = 1000
    # EntryHandler: new ArrayBlockingQueue<>(100).
    handler_queue_capacity: int = 100
    # The leader's wait for the transferee's answer (DLedger's RPC timeout).
    transfer_wait_ms: int = 3000
    # DLedgerServer.checkPreferredLeader: every 1000 ms after 1000 ms.
    preferred_leader_check_interval_ms: int = 1000
    # EntryDispatcher.checkQuotaAndWait paces pushes to a follower far behind, whose entries
    # the leader reads back from disk; DLedger skips it for its memory store. The node runtime
    # turns it off for a memory store.
    push_throttle: bool = True

    def scaled(self, factor: float) -> RaftTimings:
        """All intervals multiplied by ``factor`` (at least 1 ms); sizes and switches are unchanged."""

        def s(v: int) -> int:
            return max(1, int(v * factor))

        return RaftTimings(
            vote_wait_base_ms=s(self.vote_wait_base_ms),
            leak_check_interval_ms=s(self.leak_check_interval_ms),
            commit_push_interval_ms=s(self.commit_push_interval_ms),
            fast_forward_check_interval_ms=s(self.fast_forward_check_interval_ms),
            push_future_timeout_ms=s(self.push_future_timeout_ms),
            compare_wait_ms=s(self.compare_wait_ms),
            dispatcher_error_backoff_ms=s(self.dispatcher_error_backoff_ms),
            dispatcher_max_pending_size=self.dispatcher_max_pending_size,
            handler_queue_capacity=self.handler_queue_capacity,
            transfer_wait_ms=s(self.transfer_wait_ms),
            preferred_leader_check_interval_ms=s(self.preferred_leader_check_interval_ms),
            push_throttle=self.push_throttle,
        )
