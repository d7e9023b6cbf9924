"""DLedgerMemoryStore: the store interface over a dict, for tests and simulation.

Unlike DLedger's memory store (which commits on append), the commit index here moves only
through ``update_committed_index``, as in the file store, so the consensus layer behaves
the same over both. Positions are computed as the file store would with an unbounded
data file (no blank records), so leader and follower positions still agree.
"""

from __future__ import annotations

from collections.abc import Sequence

from dledger.codes import ResponseCode
from dledger.errors import DLedgerError, check
from dledger.store.entry import Entry, check_starts_after, entries_from_raw, entries_to_raw
from dledger.store.layout import BODY_OFFSET


class MemoryStore:
    def __init__(self, max_body_size: int = 4 * 1024 * 1024 - BODY_OFFSET) -> None:
        self._entries: dict[int, Entry] = {}
        self._begin = -1
        self._end = -1
        self._end_term = -1
        self._committed = -1
        self._committed_pos = -1
        self._next_pos = 0
        self.max_body_size = max_body_size
        self.disk_full = False

    @property
    def ledger_begin_index(self) -> int:
        return self._begin

    @property
    def ledger_end_index(self) -> int:
        return self._end

    @property
    def ledger_end_term(self) -> int:
        return self._end_term

    @property
    def committed_index(self) -> int:
        return self._committed

    @property
    def committed_pos(self) -> int:
        return self._committed_pos

    def _check_body(self, body: bytes) -> None:
        check(len(body) > 0, ResponseCode.REQUEST_WITH_EMPTY_BODYS, "empty body")
        check(
            len(body) <= self.max_body_size,
            ResponseCode.UNEXPECTED_ARGUMENT,
            f"body of {len(body)} bytes is over the limit of {self.max_body_size}",
        )
        check(not self.disk_full, ResponseCode.DISK_FULL, "disk full")

    def _put(self, entry: Entry) -> Entry:
        self._entries[entry.index] = entry
        self._end = entry.index
        self._end_term = entry.term
        self._next_pos = entry.pos + entry.size
        if self._begin == -1:
            self._begin = entry.index
        return entry

    def append_as_leader(self, body: bytes, term: int) -> Entry:
        self._check_body(body)
        check(term >= self._end_term, ResponseCode.INCONSISTENT_TERM, "term moves back")
        return self._put(Entry(index=self._end + 1, term=term, pos=self._next_pos, body=bytes(body)))

    def append_batch_as_leader(self, bodies: Sequence[bytes], term: int) -> tuple[int, Sequence[int]]:
        for body in bodies:
            self._check_body(body)
        first = self._end + 1
        return first, [self.append_as_leader(b, term).pos for b in bodies]

    def append_as_follower(self, entry: Entry) -> Entry:
        self._check_body(entry.body)
        check(
            entry.index == self._end + 1,
            ResponseCode.INCONSISTENT_INDEX,
            f"expected index {self._end + 1}, got {entry.index}",
        )
        check(entry.pos == self._next_pos, ResponseCode.DISK_ERROR, f"pos {entry.pos} != {self._next_pos}")
        return self._put(entry)

    def append_raw_as_follower(
        self, blob: bytes | memoryview, first_index: int, first_pos: int, count: int = -1
    ) -> int:
        """Append the leader's encoded entries (see ``MmapFileStore.append_raw_as_follower``);
        all or nothing. Returns the last index."""
        check(
            first_index == self._end + 1,
            ResponseCode.INCONSISTENT_INDEX,
            f"expected index {self._end + 1}, got {first_index}",
        )
        check(first_pos == self._next_pos, ResponseCode.DISK_ERROR, f"pos {first_pos} != {self._next_pos}")
        entries = entries_from_raw(blob, first_index, first_pos, self._end_term)
        check(
            count < 0 or len(entries) == count,
            ResponseCode.UNEXPECTED_ARGUMENT,
            f"blob holds {len(entries)} entries, not {count}",
        )
        for e in entries:
            self._check_body(e.body)
        for e in entries:
            self._put(e)
        return self._end

    def get_raw_range(self, first: int, last: int, max_bytes: int) -> tuple[bytes, int, int]:
        """``(blob, first_pos, count)``: the encoded entries ``first`` .. at most ``last``, at most
        ``max_bytes`` unless the first alone is larger."""
        head = self.get(first)
        out = [head]
        total = head.size
        for i in range(first + 1, min(last, self._end) + 1):
            e = self._entries[i]
            if total + e.size > max_bytes:
                break
            out.append(e)
            total += e.size
        return entries_to_raw(out), head.pos, len(out)

    def get(self, index: int) -> Entry:
        check(index >= 0, ResponseCode.INDEX_OUT_OF_RANGE, f"index {index} < 0")
        check(index >= self._begin, ResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN, f"index {index} < begin {self._begin}")
        check(index <= self._end, ResponseCode.INDEX_OUT_OF_RANGE, f"index {index} > end {self._end}")
        return self._entries[index]

    def get_range(self, start: int, end: int) -> list[Entry]:
        return [self.get(i) for i in range(start, min(end, self._end) + 1)]

    def term_at(self, index: int) -> int:
        if index == -1:
            return -1
        return self.get(index).term

    def truncate(self, entry: Entry) -> int:
        keep = entry.same_as(self._entries.get(entry.index))
        last_kept = entry.index if keep else entry.index - 1
        kept = self._entries.get(last_kept) if last_kept <= self._end else None
        if not keep and kept is not None:
            check_starts_after(entry, kept.pos + kept.size)
        for i in range(last_kept + 1, self._end + 1):
            self._entries.pop(i, None)
        if keep:
            self._end, self._end_term = entry.index, entry.term
            self._next_pos = entry.pos + entry.size
        else:
            self._end = last_kept
            self._end_term = self._entries[last_kept].term if last_kept in self._entries else -1
            self._next_pos = entry.pos
            self._put(entry)
        # A follower never truncates committed entries under Raft; keep the cap honest anyway.
        self._committed = min(self._committed, self._end)
        return entry.index

    def update_committed_index(self, term: int, new_committed_index: int) -> None:
        if new_committed_index == -1 or self._end == -1 or new_committed_index == self._committed:
            return
        if new_committed_index < self._committed or new_committed_index < self._begin:
            return
        new_committed_index = min(new_committed_index, self._end)
        self._committed = new_committed_index
        e = self._entries[new_committed_index]
        self._committed_pos = e.pos + e.size

    def flush(self) -> None:
        return None

    def flush_entries(self, wait: bool = True) -> bool:
        return True

    def unflushed_entry_bytes(self) -> int:
        return 0

    def close(self) -> None:
        return None


__all__ = ["DLedgerError", "MemoryStore"]
