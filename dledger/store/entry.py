"""The DLedger entry as Python sees it, and the layout constants of spec §2.2."""

from __future__ import annotations

from dataclasses import dataclass

MAGIC_1 = 1
CURRENT_MAGIC = MAGIC_1
BLANK_MAGIC_CODE = -1
POS_OFFSET = 24
HEADER_SIZE = 44
BODY_OFFSET = 48
INDEX_UNIT_SIZE = 32
MIN_BLANK_LEN = 8


@dataclass(slots=True)
class Entry:
    index: int
    term: int
    pos: int
    body: bytes
    magic: int = CURRENT_MAGIC
    channel: int = 0
    chain_crc: int = 0
    body_crc: int = 0

    @property
    def size(self) -> int:
        return BODY_OFFSET + len(self.body)

    def same_as(self, other: Entry | None) -> bool:
        """DLedgerEntry.equals: size, magic, index, term, channel, pos and body; not the CRCs."""
        return (
            other is not None
            and self.size == other.size
            and self.magic == other.magic
            and self.index == other.index
            and self.term == other.term
            and self.channel == other.channel
            and self.pos == other.pos
            and self.body == other.body
        )
