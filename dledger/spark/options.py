"""What the Spark data sources share: option parsing and the filter-pushdown check."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import DataType, StructType

from dledger.codes import ResponseCode
from dledger.errors import DLedgerError

try:  # Spark >= 4.2
    from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - older Spark: no admission control, no availableNow
    ReadMaxRows = None  # type: ignore[assignment,misc]
    SupportsTriggerAvailableNow = object  # type: ignore[assignment,misc]


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


def read_budget(limit: Any) -> int | None:
    """The rows a stream's micro-batch may take under Spark's read limit (None: no limit)."""
    if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
        return int(limit.max_rows)
    return None


def default_read_limit(max_rows: int | None) -> Any:
    """``ReadMaxRows(max_rows)`` when a limit is set and Spark has admission control, else None."""
    if ReadMaxRows is not None and max_rows:
        return ReadMaxRows(max_rows)
    return None


def bounds(f: Filter, value: int) -> tuple[int | None, int | None] | None:
    """The inclusive integer range ``[lo, hi]`` (None: open) a comparison with ``value`` keeps,
    or None for a filter that is not one of =, <=>, <, <=, >, >=."""
    if isinstance(f, EqualTo | EqualNullSafe):
        return value, value
    if isinstance(f, GreaterThan):
        return value + 1, None
    if isinstance(f, GreaterThanOrEqual):
        return value, None
    if isinstance(f, LessThan):
        return None, value - 1
    if isinstance(f, LessThanOrEqual):
        return None, value
    return None


def columns_of(schema: StructType, types: Mapping[str, DataType], fmt: str) -> tuple[str, ...]:
    """The columns a (possibly user-given) schema asks for; they must be ``fmt``'s ``types``."""
    cols = []
    for f in schema.fields:
        if f.name not in types:
            raise error(f"schema field {f.name!r} is not a {fmt} column; columns are {', '.join(types)}")
        if f.dataType != types[f.name]:
            raise error(
                f"schema field {f.name!r} must be {types[f.name].simpleString()}, not {f.dataType.simpleString()}"
            )
        cols.append(f.name)
    return tuple(cols)


def known_options(
    options: Mapping[str, str], known: Mapping[str, str], what: str, hidden: tuple[str, ...] = ()
) -> dict[str, str]:
    """``options`` by lower-cased name (Spark hands them over case-insensitively); an option
    not in ``known`` (lower-cased name to Spark's spelling) is an error naming ``what`` takes."""
    given = {str(k).lower(): v for k, v in options.items()}
    unknown = sorted(k for k in given if k not in known)
    if unknown:
        listed = ", ".join(v for v in known.values() if v not in hidden)
        raise error(f"unknown option(s) {', '.join(unknown)} for {what}; known: {listed}")
    return given
