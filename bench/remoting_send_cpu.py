"""A member's CPU per remoting SEND_BATCH_MESSAGE of 32 x 1 KiB: a one-member
``dledger server --message-store --listen-port P`` in a process of its own, driven by the
bench's remoting client (``bench/test_bench_remoting.py``'s send, WINDOW in flight); the
member's CPU time (``/proc``, every thread: the remoting processor, the send path, the log's
flush and dispatch) over the batches.

    python bench/remoting_send_cpu.py [--pairs N] [--batches B] [OTHER_TREE]

With OTHER_TREE (another revision's source tree with its kernels built, e.g.
``git archive main | tar -x -C DIR`` and this checkout's ``dledger/_ext/*.so`` copied in when
the kernels' sources are the same), the two trees' members alternate, N pairs, each on a new
store; the figures are the medians with their range and the median of the pairs' ratios.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

import bench.test_bench_remoting as B  # noqa: E402
from bench.remoting_cpu_pairs import alternate, us_per_send  # noqa: E402
from dledger.child_process import python_module  # noqa: E402
from dledger.testing import free_ports  # noqa: E402


def _until_served(addr: str, proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    B.BATCHES = 20
    while True:
        try:
            asyncio.run(B.remoting_send(addr, "Warm"))
            return
        except (AssertionError, OSError, TimeoutError, asyncio.TimeoutError):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def member_us_per_send(tree: Path, batches: int) -> float:
    store = Path(tempfile.mkdtemp(prefix="dledger-bench-send-cpu-"))
    node_port, listen_port = free_ports(2)
    cmd = python_module(
        "dledger.cli",
        "server",
        "--group",
        "bench",
        "--id",
        "n0",
        "--peers",
        f"n0-127.0.0.1:{node_port}",
        "--store-dir",
        str(store),
        "--message-store",
        "--listen-port",
        str(listen_port),
        "--default-topic-queue-nums",
        str(B.QUEUES),
        die_with_parent=True,
    )
    env = dict(os.environ, PYTHONPATH=str(tree))
    with open(store / "member.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=log, env=env, cwd=tree)
    try:
        addr = f"127.0.0.1:{listen_port}"
        _until_served(addr, proc)
        return us_per_send(proc.pid, addr, 300, batches)  # the warm-up makes the topic, the first files
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(store, ignore_errors=True)


def main() -> None:
    alternate(__doc__ or "", "member CPU", member_us_per_send)


if __name__ == "__main__":
    main()
