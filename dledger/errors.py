"""The one exception type of the library: a DLedger response code plus a message."""

from __future__ import annotations

from dledger.codes import ResponseCode


class DLedgerError(Exception):
    """An operation failed with a DLedger response code.

    The code is what crosses the wire; the message is for people.
    """

    def __init__(self, code: ResponseCode | int, message: str = "") -> None:
        self.code = ResponseCode(code)
        self.message = message
        super().__init__(f"{self.code.name}({int(self.code)}): {message}" if message else self.code.name)


class CorruptionError(DLedgerError):
    """Stored data failed a check (CRC or structure) where a torn write is impossible."""

    def __init__(self, message: str, *, file: str, offset: int, index: int) -> None:
        self.file = file
        self.offset = offset
        self.index = index
        super().__init__(ResponseCode.DISK_ERROR, message)


def check(condition: bool, code: ResponseCode, message: str = "") -> None:
    """DLedger's PreConditions.check: raise ``DLedgerError(code)`` unless ``condition``."""
    if not condition:
        raise DLedgerError(code, message)
