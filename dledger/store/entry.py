"""The DLedger entry as Python sees it (DLedgerEntry); its layout is in ``dledger.store.layout``."""

from __future__ import annotations

from dataclasses import dataclass

from dledger._ext import load as _load_ext
from dledger.codes import ResponseCode
from dledger.errors import DLedgerError
from dledger.store.layout import BODY_OFFSET, CURRENT_MAGIC

_codec = _load_ext("codec")


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


def check_starts_after(entry: Entry, kept_end: int) -> None:
    """A follower truncate keeping the entry before ``entry`` (which ends at ``kept_end``)
    cuts its data at ``entry.pos``: anywhere else would cut a kept entry in two (recovery then
    refuses the file) or, past our end, drop every data file. Where they disagree our log is
    not the leader's up to there (a wrong COMPARE): refuse, before anything changes."""
    if entry.pos != kept_end:
        raise DLedgerError(
            ResponseCode.INCONSISTENT_STATE,
            f"the leader's entry {entry.index} is at {entry.pos}, our entry {entry.index - 1} ends at {kept_end}",
        )


def entries_from_raw(blob: bytes | memoryview, first_index: int, first_pos: int, prev_term: int = -1) -> list[Entry]:
    """Decode a blob of encoded entries (the leader's on-disk bytes of ``first_index`` on,
    ``blob[0]`` at ``first_pos``), checked as ``codec.scan`` checks: contiguous indices from
    ``first_index``, contiguous positions, sizes, terms from ``prev_term``, recorded CRCs.
    One object per entry: for tests, the memory store and the rare paths that compare entry
    by entry; raises DLedgerError on anything wrong."""
    cols, stop, code = _codec.scan(blob, first_pos, 0, -1, first_index, prev_term, True)
    count = len(cols["index"])
    if code != _codec.SCAN_END or stop != len(blob) or not count:
        raise DLedgerError(
            ResponseCode.UNEXPECTED_ARGUMENT,
            f"bad entry blob at offset {stop} ({code}) for index {first_index + count}",
        )
    out = []
    for index, term, pos, magic, body_off, body_len, body_crc in zip(
        cols["index"].tolist(),
        cols["term"].tolist(),
        cols["pos"].tolist(),
        cols["magic"].tolist(),
        cols["body_offset"].tolist(),
        cols["body_len"].tolist(),
        cols["body_crc"].tolist(),
        strict=True,
    ):
        header = _codec.decode_header(blob, body_off - BODY_OFFSET)
        out.append(
            Entry(index, term, pos, bytes(blob[body_off : body_off + body_len]), magic, header[5], header[6], body_crc)
        )
    return out


def entries_to_raw(entries: list[Entry]) -> bytes:
    """The encoded form of consecutive entries (the memory store's twin of the file bytes)."""
    return b"".join(
        _codec.encode_entry(e.index, e.term, e.pos, e.body, e.magic, e.channel, e.chain_crc, e.body_crc)
        for e in entries
    )
