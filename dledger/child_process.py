"""The command lines of the Python processes dledger starts (cluster members, test and bench
members, benchmark helpers).

``python -m dledger.cli`` and ``python -c CODE`` put the working directory first on
``sys.path``: started from a source checkout (the README's clone, whose ``dledger/`` has no
built extension) the child imports that tree instead of the installed package. ``-P`` drops it
but exists from 3.11 only and ``-I`` also drops PYTHONPATH and the user's site-packages, so the
child runs a short bootstrap through ``-c`` that removes the one entry ``-c`` added, then runs
the module or code. The child keeps the caller's working directory, so relative paths in its
arguments mean what they meant to the caller.

``die_with_parent``: the child asks Linux for SIGTERM when its parent dies (prctl
PR_SET_PDEATHSIG; the standard library has no wrapper, so ctypes calls it), so the members a
test run, ``dledger cluster`` or ``dledger mq cluster`` started do not live on, holding their
ports and directories, when that parent is killed (pytest's SIGTERM from a CI timeout, a
supervisor's SIGKILL). SIGTERM rather than SIGKILL: a member stops cleanly on it (flush,
checkpoint). The request is made in the child, at its start, rather than in a ``preexec_fn``,
which runs Python between fork and exec and is unsafe in a parent with threads (the tests'
proxies). Linux sends the signal when the *thread* that started the child ends, so start such
children from a thread that lives as long as they should (the main thread). Elsewhere than
Linux the option does nothing.
"""

from __future__ import annotations

import os
import sys

# With -c, sys.path[0] is "" (the working directory) unless safe_path (-P, PYTHONSAFEPATH,
# 3.11+) left it out.
_DROP_CWD = "import sys\nif not getattr(sys.flags, 'safe_path', False):\n    del sys.path[0]\n"
_RUN_MODULE_BODY = "import runpy\nrunpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)\n"


# PR_SET_PDEATHSIG is 1 (linux/prctl.h). The parent may have died before the child got this
# far: then the child has been handed to another process already and stops itself.
_DIE_WITH_PARENT = (
    "if sys.platform.startswith('linux'):\n"
    "    import ctypes, os, signal\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)\n"
    "    if os.getppid() != {parent}:\n"
    "        os.kill(os.getpid(), signal.SIGTERM)\n"
)


def _bootstrap(die_with_parent: bool) -> str:
    # The parent's pid is taken now: the command is built by the process that starts it.
    return _DROP_CWD + (_DIE_WITH_PARENT.format(parent=os.getpid()) if die_with_parent else "")


def python_module(module: str, *args: str, die_with_parent: bool = False) -> list[str]:
    """``python -m module args...`` that imports nothing from the working directory;
    ``die_with_parent``: it gets SIGTERM when the process building this command dies."""
    return [sys.executable, "-c", _bootstrap(die_with_parent) + _RUN_MODULE_BODY, module, *args]


def python_code(code: str, *args: str, die_with_parent: bool = False) -> list[str]:
    """``python -c code args...`` that imports nothing from the working directory;
    ``die_with_parent`` as for ``python_module``."""
    return [sys.executable, "-c", _bootstrap(die_with_parent) + code, *args]


__all__ = ["python_code", "python_module"]
