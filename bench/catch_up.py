"""How long a follower killed with kill -9 takes to catch up once it is back: three members on
127.0.0.1 (the bench's default timings), a few entries appended while it is down and a few
right after its process is ready; the time from ready until its end index is the leader's.
The process start itself is printed beside it (what a restart costs anyway).

    python bench/catch_up.py --restarts 8

The figures of docs/cluster.md (a follower back from a restart) come from this, run against
a worktree of the commit before the resynchronisation on a new connection and against main.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dledger.testing import TestCluster

POLL_S = 0.002


def catch_up(restarts: int) -> tuple[list[float], list[float]]:
    """(seconds from start to ready, seconds from ready to caught up), per restart."""
    cluster = TestCluster(Path(tempfile.mkdtemp(prefix="dledger-bench-catchup-")), extra=[], proxied=False)
    ready: list[float] = []
    caught: list[float] = []
    try:
        cluster.start_all()
        with cluster.client(timeout=30) as c:
            c.append(b"first")
            for k in range(restarts):
                leader = cluster.wait_leader(30)
                follower = [m for m in cluster.ids if m != leader][k % 2]
                cluster.kill(follower)
                for _ in range(3):
                    c.append(b"while down")
                t0 = time.monotonic()
                cluster.start(follower)
                t1 = time.monotonic()
                for _ in range(3):
                    c.append(b"after")
                while True:
                    st = cluster.status()
                    if st[follower].get("end_index") == st[leader].get("end_index"):
                        break
                    time.sleep(POLL_S)
                ready.append(t1 - t0)
                caught.append(time.monotonic() - t1)
    finally:
        cluster.close()
        shutil.rmtree(cluster.root, ignore_errors=True)
    return ready, caught


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--restarts", type=int, default=8)
    args = ap.parse_args()
    ready, caught = catch_up(args.restarts)
    print("process start to ready, s: " + " ".join(f"{x:.3f}" for x in ready))
    print("ready to caught up, s:     " + " ".join(f"{x:.3f}" for x in caught))
    print(
        f"median: ready {statistics.median(ready):.3f} s, caught up {statistics.median(caught):.3f} s after "
        f"[{min(caught):.3f}-{max(caught):.3f}]"
    )


if __name__ == "__main__":
    main()
