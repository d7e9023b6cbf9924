"""Names a package exports from its modules, each imported when first used (PEP 562).

A package's ``__init__`` must stay cheap to import: ``dledger mq --help`` and a client process
import ``dledger.rocketmq`` for a few names and must not load numpy, the kernels or the store's
writers that other names need.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, module_of: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``module_of`` maps each exported name to the
    module (relative to ``package``) that defines it."""

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    def __dir__() -> list[str]:
        return sorted(module_of)

    return __getattr__, __dir__
