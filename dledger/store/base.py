"""The interface both stores (mmap file store and memory store) implement.

Role checks (NOT_LEADER, INCONSISTENT_TERM, INCONSISTENT_LEADER) live in the consensus
layer, which knows the member state; the store checks what it can see itself: index
contiguity (INCONSISTENT_INDEX), position agreement (DISK_ERROR), disk-full (DISK_FULL),
body limits (UNEXPECTED_ARGUMENT / REQUEST_WITH_EMPTY_BODYS) and index range.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from dledger.store.entry import Entry


class DLedgerStore(Protocol):
    @property
    def ledger_begin_index(self) -> int: ...
    @property
    def ledger_end_index(self) -> int: ...
    @property
    def ledger_end_term(self) -> int: ...
    @property
    def committed_index(self) -> int: ...
    @property
    def committed_pos(self) -> int: ...

    def append_as_leader(self, body: bytes, term: int) -> Entry:
        """Append one body at ``ledger_end_index + 1`` with ``term``; returns the entry."""
        ...

    def append_batch_as_leader(self, bodies: Sequence[bytes], term: int) -> tuple[int, Sequence[int]]:
        """Append many bodies; returns the first index and the position of each entry."""
        ...

    def append_as_follower(self, entry: Entry) -> Entry:
        """Append an entry made by the leader: index must be end+1, pos must land where the leader put it."""
        ...

    def append_raw_as_follower(
        self, blob: bytes | memoryview, first_index: int, first_pos: int, count: int = -1
    ) -> int:
        """Append the leader's encoded entries ``first_index``.. (its stored bytes, ``blob[0]`` at
        ``first_pos``; ``count`` entries when not -1), all or nothing; returns the last index."""
        ...

    def get_raw_range(self, first: int, last: int, max_bytes: int) -> tuple[bytes, int, int]:
        """``(blob, first_pos, count)``: the stored bytes of entries ``first`` .. at most ``last``,
        within one data file, at most ``max_bytes`` unless the first alone is larger."""
        ...

    def get(self, index: int) -> Entry: ...

    def get_range(self, start: int, end: int) -> list[Entry]:
        """Entries ``start..end`` inclusive (clipped to the ledger end)."""
        ...

    def term_at(self, index: int) -> int:
        """Term of entry ``index``; -1 for index -1 (the empty prefix)."""
        ...

    def truncate(self, entry: Entry) -> int:
        """Follower truncate: drop everything after ``entry`` (appending it if absent); returns its index."""
        ...

    def update_committed_index(self, term: int, new_committed_index: int) -> None: ...

    def flush(self) -> None: ...

    def flush_entries(self, wait: bool = True) -> bool:
        """Make the entries durable (what an ack needs); ``flush`` also writes derived files.
        With ``wait=False`` return False at once, having done nothing, rather than wait for
        another thread that holds the store; otherwise True."""
        ...

    def unflushed_entry_bytes(self) -> int:
        """Bytes of entries written but not yet made durable by ``flush_entries``."""
        return 0

    def close(self) -> None: ...
