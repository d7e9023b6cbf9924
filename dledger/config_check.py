"""Checks shared by the config dataclasses (DLedgerConfig, MessageStoreConfig): an option with
a value that cannot work is refused when the config is built, with its name and why, rather
than failing later deep inside a member (a heartbeat interval of "x" used to raise on every
tick of a running server)."""

from __future__ import annotations

import dataclasses
import numbers
import time
from collections.abc import Iterable
from typing import Any

from dledger.codes import ResponseCode
from dledger.errors import DLedgerError


class ConfigError(DLedgerError, ValueError):
    """An unknown option, or an option whose value cannot work. A ValueError too, so code that
    builds configs from user input can catch the usual type."""

    def __init__(self, message: str) -> None:
        super().__init__(ResponseCode.UNEXPECTED_ARGUMENT, message)


def _is_int(v: object) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_real(v: object) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


# What a field's annotation (a string under ``from __future__ import annotations``) admits.
_KINDS = {
    "int": (_is_int, "an integer"),
    "float": (_is_real, "a number"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "str": (lambda v: isinstance(v, str), "a string"),
}


def check_types(config: Any) -> None:
    """Every field of the dataclass ``config`` holds a value of its annotated type."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        hint = str(f.type)
        optional = hint.endswith(" | None")
        base = hint.removesuffix(" | None")
        if value is None and optional:
            continue
        if base.startswith("dict"):
            if not isinstance(value, dict):
                raise ConfigError(f"{f.name} = {value!r}: want a table")
            continue
        test, want = _KINDS.get(base, (lambda v: True, ""))
        if not test(value):
            raise ConfigError(f"{f.name} = {value!r}: want {want}" + (" or unset" if optional else ""))


def at_least(config: Any, least: int, names: Iterable[str]) -> None:
    """Each named (numeric, possibly unset) option is ``least`` or more."""
    for name in names:
        value = getattr(config, name)
        if value is not None and value < least:
            raise ConfigError(f"{name} = {value!r}: want {least} or more")


def one_of(config: Any, name: str, allowed: Iterable[str]) -> None:
    allowed = tuple(allowed)
    value = getattr(config, name)
    if value not in allowed:
        raise ConfigError(f"{name} = {value!r}: want {' or '.join(allowed)}")


def ratio(config: Any, names: Iterable[str]) -> None:
    """Each named option is a share of something: more than 0, at most 1."""
    for name in names:
        value = getattr(config, name)
        if not 0 < value <= 1:
            raise ConfigError(f"{name} = {value!r}: want a ratio in (0, 1]")


def delete_hours(when: str) -> frozenset[int]:
    """The hours of the day in ``delete_when`` ("04;16"), read as RocketMQ's UtilAll.isItTimeToDo
    reads them: each part an integer, so "4" and "04" are the same hour, and one that is no hour
    of the day ("99") never comes."""
    try:
        return frozenset(int(part) for part in when.split(";") if part.strip())
    except ValueError:
        raise ConfigError(f"delete_when = {when!r}: want hours of the day joined by ';' (\"04;16\")") from None


def is_it_time_to_do(when: str, now: float) -> bool:
    """UtilAll.isItTimeToDo: the local hour of ``now`` (epoch seconds) is one of ``when``'s."""
    return time.localtime(now).tm_hour in delete_hours(when)
