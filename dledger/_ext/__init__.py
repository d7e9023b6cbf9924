"""Compiled kernels (Cython sources in the repository's ``_ext/``).

There is deliberately no pure-Python fallback: a store that silently ran 100x slower would
be a worse surprise than an import error that says how to build.
"""

from __future__ import annotations

import importlib
from types import ModuleType

KERNELS = ("codec", "segment", "crc", "gather", "message", "message_fields", "remoting", "ha")

BUILD_HINT = (
    "the dledger C extension is not built. Install the package with `pip install .` "
    "(or `pip install -e .` in a checkout), or build in place with "
    "`python setup.py build_ext --inplace`; a C compiler, Cython>=3 and numpy are needed."
)


def require_built() -> None:
    """Import every kernel, or fail with an ImportError that says how to build them."""
    for name in KERNELS:
        try:
            importlib.import_module(f"dledger._ext.{name}")
        except ImportError as exc:
            raise ImportError(f"dledger._ext.{name}: {BUILD_HINT} ({exc})") from exc


def load(name: str) -> ModuleType:
    """Import ``dledger._ext.<name>`` or fail with instructions to build it."""
    try:
        return importlib.import_module(f"dledger._ext.{name}")
    except ImportError as exc:
        raise ImportError(f"dledger._ext.{name}: {BUILD_HINT} ({exc})") from exc
