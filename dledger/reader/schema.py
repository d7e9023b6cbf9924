"""What a read returns and how it fails: columns, the Arrow schema, the modes, the errors."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pyarrow as pa

from dledger.codes import ResponseCode
from dledger.errors import DLedgerError

COLUMNS = ("index", "term", "pos", "magic", "body_crc", "body")
NODE_COLUMN = "node"
TYPES: dict[str, pa.DataType] = {
    "index": pa.int64(),
    "term": pa.int64(),
    "pos": pa.int64(),
    "magic": pa.int32(),
    "body_crc": pa.int32(),
    "body": pa.binary(),
    NODE_COLUMN: pa.string(),
}

FAILFAST = "FAILFAST"
DROPMALFORMED = "DROPMALFORMED"
MODES = (FAILFAST, DROPMALFORMED)


class StoreNotFoundError(DLedgerError, FileNotFoundError):
    """The path given to the reader does not exist."""

    def __init__(self, message: str) -> None:
        super().__init__(ResponseCode.UNEXPECTED_ARGUMENT, message)


class NotAStoreError(DLedgerError):
    """The path exists but holds no dledger node directory."""

    def __init__(self, message: str) -> None:
        super().__init__(ResponseCode.UNEXPECTED_ARGUMENT, message)


def arg_error(message: str) -> DLedgerError:
    return DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, message)


def arrow_schema(columns: Sequence[str] = COLUMNS, node_column: bool = False) -> pa.Schema:
    names = list(columns) + ([NODE_COLUMN] if node_column and NODE_COLUMN not in columns else [])
    return pa.schema([pa.field(n, TYPES[n], nullable=False) for n in names])


def check_columns(columns: Iterable[str] | None, node_column: bool) -> tuple[str, ...]:
    if columns is None:
        return COLUMNS + ((NODE_COLUMN,) if node_column else ())
    if isinstance(columns, str):
        raise arg_error(f"columns must be a list of names, not the string {columns!r}")
    cols = tuple(columns)
    known = COLUMNS + ((NODE_COLUMN,) if node_column else ())
    unknown = [c for c in cols if c not in known]
    if unknown:
        hint = " (the node column exists only when several nodes are read)" if NODE_COLUMN in unknown else ""
        raise arg_error(f"unknown column(s) {', '.join(map(repr, unknown))}; the columns are {', '.join(known)}{hint}")
    if len(set(cols)) != len(cols):
        raise arg_error(f"column listed twice in {list(cols)}")
    return cols


def check_mode(mode: str) -> str:
    m = str(mode).upper()
    if m not in MODES:
        raise arg_error(
            f"unknown mode {mode!r}; use FAILFAST (a corrupt entry fails the read) or "
            "DROPMALFORMED (it is skipped and counted)"
        )
    return m
