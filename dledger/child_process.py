"""The command lines of the Python processes dledger starts (cluster members, test and bench
members, benchmark helpers).

``python -m dledger.cli`` and ``python -c CODE`` put the working directory first on
``sys.path``: started from a source checkout (the README's clone, whose ``dledger/`` has no
built extension) the child imports that tree instead of the installed package. ``-P`` drops it
but exists from 3.11 only and ``-I`` also drops PYTHONPATH and the user's site-packages, so the
child runs a short bootstrap through ``-c`` that removes the one entry ``-c`` added, then runs
the module or code. The child keeps the caller's working directory, so relative paths in its
arguments mean what they meant to the caller.

``die_with_parent``: the child gets SIGTERM when its parent process dies, so the members a
test run, ``dledger cluster`` or ``dledger mq cluster`` started do not live on, holding their
ports and directories, when that parent is killed (pytest's SIGTERM from a CI timeout, a
supervisor's SIGKILL). SIGTERM rather than SIGKILL: a member stops cleanly on it (flush,
checkpoint). The child watches a pidfd of its parent (``os.pidfd_open``, Linux 5.3) from a
daemon thread blocked in ``select``: it wakes once, when the parent *process* exits.
PR_SET_PDEATHSIG, the usual tool, fires when the parent's *thread* that started the child ends,
which killed members a ``threading.Timer`` had started; it remains the fallback where pidfds
are missing. The request is made in the child, at its start, rather than in a ``preexec_fn``,
which runs Python between fork and exec and is unsafe in a parent with threads (the tests'
proxies). Elsewhere than Linux the option does nothing.
"""

from __future__ import annotations

import os
import sys

# With -c, sys.path[0] is "" (the working directory) unless safe_path (-P, PYTHONSAFEPATH,
# 3.11+) left it out.
_DROP_CWD = "import sys\nif not getattr(sys.flags, 'safe_path', False):\n    del sys.path[0]\n"
_RUN_MODULE_BODY = "import runpy\nrunpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)\n"


# The parent may have died before the child got this far: then the child has been handed to
# another process already and stops itself. PR_SET_PDEATHSIG is 1 (linux/prctl.h).
_DIE_WITH_PARENT = (
    "if sys.platform.startswith('linux'):\n"
    "    import os, signal\n"
    "    def _watch_parent(fd):\n"
    "        import select\n"
    "        select.select([fd], [], [])\n"
    "        os.kill(os.getpid(), signal.SIGTERM)\n"
    "    try:\n"
    "        _fd = os.pidfd_open({parent})\n"
    "    except ProcessLookupError:\n"
    "        _fd = -1\n"
    "    except (AttributeError, OSError):\n"
    "        import ctypes\n"
    "        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)\n"
    "        _fd = None\n"
    "    if os.getppid() != {parent} or _fd == -1:\n"
    "        os.kill(os.getpid(), signal.SIGTERM)\n"
    "    elif _fd is not None:\n"
    "        import threading\n"
    "        threading.Thread(target=_watch_parent, args=(_fd,), name='die-with-parent', daemon=True).start()\n"
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
