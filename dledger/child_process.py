"""The command lines of the Python processes dledger starts (cluster members, test and bench
members, benchmark helpers).

``python -m dledger.cli`` and ``python -c CODE`` put the working directory first on
``sys.path``: started from a source checkout (the README's clone, whose ``dledger/`` has no
built extension) the child imports that tree instead of the installed package. ``-P`` drops it
but exists from 3.11 only and ``-I`` also drops PYTHONPATH and the user's site-packages, so the
child runs a short bootstrap through ``-c`` that removes the one entry ``-c`` added, then runs
the module or code. The child keeps the caller's working directory, so relative paths in its
arguments mean what they meant to the caller.
"""

from __future__ import annotations

import sys

# With -c, sys.path[0] is "" (the working directory) unless safe_path (-P, PYTHONSAFEPATH,
# 3.11+) left it out.
_DROP_CWD = "import sys\nif not getattr(sys.flags, 'safe_path', False):\n    del sys.path[0]\n"
_RUN_MODULE = _DROP_CWD + "import runpy\nrunpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)\n"


def python_module(module: str, *args: str) -> list[str]:
    """``python -m module args...`` that imports nothing from the working directory."""
    return [sys.executable, "-c", _RUN_MODULE, module, *args]


def python_code(code: str, *args: str) -> list[str]:
    """``python -c code args...`` that imports nothing from the working directory."""
    return [sys.executable, "-c", _DROP_CWD + code, *args]


__all__ = ["python_code", "python_module"]
