"""``dledger._ext.message`` under the name some modules of this package still import.

An alias only: there is no pure-Python twin (see ``dledger._ext``); new code loads the kernels
with ``dledger._ext.load("message")``.
"""

from __future__ import annotations

from typing import Any

from dledger._ext import load

_mk = load("message")


def __getattr__(name: str) -> Any:
    return getattr(_mk, name)
