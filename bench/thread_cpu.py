"""Per-thread CPU time from ``/proc`` (Linux), for the scripts that say where a run's CPU went."""

from __future__ import annotations

import os

_TICK = os.sysconf("SC_CLK_TCK")


def thread_times(pid: int | str = "self") -> dict[str, float]:
    """CPU seconds (user + system) of each thread of ``pid``, by thread id."""
    out: dict[str, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # the thread ended
        fields = stat[stat.rindex(")") + 2 :].split()
        out[tid] = (int(fields[11]) + int(fields[12])) / _TICK
    return out
