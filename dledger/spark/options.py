"""What the Spark data sources share: option parsing and the filter-pushdown check."""

from __future__ import annotations

import os
import sys

from dledger.codes import ResponseCode
from dledger.errors import DLedgerError


def error(message: str) -> DLedgerError:
    return DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, message)


def int_option(name: str, raw: str | None, minimum: int) -> int | None:
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError as exc:
        raise error(f"option {name}={raw!r} is not an integer") from exc
    if value < minimum:
        raise error(f"option {name}={value} must be >= {minimum}")
    return value


def bool_option(name: str, raw: str | None, default: bool) -> bool:
    if raw is None or raw == "":
        return default
    low = str(raw).strip().lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise error(f"option {name}={raw!r} is not a boolean (true/false)")


def called_for_pushdown() -> bool:
    """Whether Spark's filter-pushdown planner is asking for the reader.

    A reader that defines ``pushFilters`` makes Spark refuse the query unless
    ``spark.sql.python.filterPushdown.enabled`` is on (DATA_SOURCE_PUSHDOWN_DISABLED), and the
    data source cannot read that setting. Spark only runs its pushdown planner
    (``data_source_pushdown_filters``) when the setting is on, so the source hands out the
    pushdown-capable reader there and the plain one everywhere else. If this check ever
    misses, the plain reader is used: no pruning, same result.
    """
    frame = sys._getframe(1)
    for _ in range(4):
        frame = frame.f_back  # type: ignore[assignment]
        if frame is None:
            return False
        if os.path.basename(frame.f_code.co_filename) == "data_source_pushdown_filters.py":
            return True
    return False
