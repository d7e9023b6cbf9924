"""A follower holding a divergent suffix is brought back to the leader's bytes.

The suffix has the leader's indices but an older term and other bodies, and its CRCs are
valid: only the leader's COMPARE search (DLedgerEntryPusher's COMPARE/TRUNCATE states and
the follower's handleDoCompare) can find it; the restart's CRC check cannot. Two members, so
the election is decided by the logs: the follower's last term is older, so only the leader
can win, and nothing commits until the follower holds the leader's entries.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dledger.store.file import MmapFileStore
from dledger.term_file import FileTermStore
from dledger.testing import TestCluster

pytestmark = pytest.mark.timeout(120)

COMMON = 5  # entries 0..4, term 1, on both members
LEADER_SUFFIX = 5  # entries 5..9 on the leader: 5..8 of term 2, 9 of term 3
TERM = 3  # both members' current term at start


def _write_log(node_dir: Path, entries: list[tuple[int, bytes]]) -> None:
    with MmapFileStore(node_dir) as s:
        for term, body in entries:
            s.append_as_leader(body, term)
        s.flush()
    FileTermStore(node_dir).save(TERM, None)


def _log(node_dir: Path) -> dict[int, tuple[int, int, bytes]]:
    """Every entry's term, position and stored bytes (header, body and CRCs)."""
    with MmapFileStore(node_dir, readonly=True) as s:
        return {e.index: (e.term, e.pos, s.get_raw(e.index)) for e in s.iter_entries()}


@pytest.mark.parametrize(
    ("diverge_at", "follower_end"),
    [
        (COMMON, COMMON + LEADER_SUFFIX - 1),  # the same length, the last five differ
        (COMMON + LEADER_SUFFIX - 1, COMMON + LEADER_SUFFIX - 1),  # only the last entry differs
        (COMMON, COMMON + LEADER_SUFFIX + 2),  # the follower holds more than the leader
    ],
    ids=["suffix-of-5", "last-entry-only", "follower-longer"],
)
def test_leader_truncates_a_divergent_suffix_and_the_follower_ends_with_its_bytes(
    tmp_path: Path, diverge_at: int, follower_end: int
) -> None:
    cluster = TestCluster(tmp_path, size=2, proxied=False)
    leader, follower = cluster.ids
    ours = [(1, f"common {i}".encode()) for i in range(COMMON)]
    ours += [(2, f"leader {i}".encode()) for i in range(COMMON, COMMON + LEADER_SUFFIX - 1)]
    ours += [(TERM, b"leader's last")]
    # Same indices, the term of the last common entry (older than the leader's there), other
    # bodies (and other sizes, so positions shift too).
    stale_term = ours[diverge_at - 1][0]
    stale = ours[:diverge_at] + [(stale_term, f"stale entry {i}".encode()) for i in range(diverge_at, follower_end + 1)]
    _write_log(cluster.node_dir(leader), ours)
    _write_log(cluster.node_dir(follower), stale)
    theirs, held = _log(cluster.node_dir(leader)), _log(cluster.node_dir(follower))
    # Set up as meant: the same bytes up to diverge_at, a different entry at every index after.
    assert all(held[i] == theirs[i] for i in range(diverge_at))
    assert all(held[i][2] != theirs[i][2] for i in range(diverge_at, COMMON + LEADER_SUFFIX))
    try:
        cluster.start_all()
        assert cluster.wait_leader() == leader
        with cluster.client() as c:
            # Commits only once the follower acknowledged it: the follower took the leader's
            # entries up to it.
            after = c.append(b"after the catch-up")
        cluster.wait_for(
            lambda: cluster.status()[follower]["end_index"] == after.index, what=f"follower at {after.index}"
        )
        for m in cluster.ids:
            assert cluster.stop(m) == 0
    finally:
        cluster.close()
    expected = _log(cluster.node_dir(leader))
    # >=: a late answer makes the client send again (at-least-once, dledger/client.py).
    assert max(expected) == after.index >= COMMON + LEADER_SUFFIX
    assert all(expected[i] == theirs[i] for i in theirs)  # the leader kept its own log
    got = _log(cluster.node_dir(follower))
    assert got == expected, {i: (got.get(i), expected[i]) for i in expected if got.get(i) != expected[i]}
