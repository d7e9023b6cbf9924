"""The remoting layer's own CPU per SEND_BATCH_MESSAGE of 32 x 1 KiB: a NettyRemotingServer in
a process of its own whose processor does no store work (it decodes the batch body with the
broker's kernel, waits one future set on the next loop turn, as a send waits for its commit, and
answers 32 msgIds), driven by the bench's remoting client; the server's CPU time (``/proc``)
over the batches.

    python bench/remoting_layer_cpu.py [--pairs N] [OTHER_TREE]

With OTHER_TREE (a source tree of another revision with its kernels built, e.g.
``git archive main | tar -x -C DIR`` and this checkout's ``dledger/_ext/*.so`` copied in), the
two trees' servers alternate, N pairs, and the figures are the medians with their range and the
median of the pairs' ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

import bench.test_bench_remoting as B  # noqa: E402
from dledger.child_process import python_code  # noqa: E402

SERVER = r"""
import asyncio, sys
from dledger.rocketmq.remoting import RequestCode
from dledger.rocketmq.remoting.netty_remoting_server import NettyRemotingServer
from dledger.rocketmq.remoting.protocol.message_batch import decode_messages

IDS = ",".join(f"7F00000100002A9F{k:016X}" for k in range(32))

async def send(req, ch):
    batch = decode_messages(req.body, b"\x02CLUSTER\x01DefaultCluster")
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    loop.call_soon(fut.set_result, None)
    await fut
    ext = {"msgId": IDS, "queueId": req.ext_fields["e"], "queueOffset": str(len(batch)),
           "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
    return req.response(ext_fields=ext)

async def main():
    s = NettyRemotingServer("127.0.0.1", 0, {RequestCode.SEND_BATCH_MESSAGE: send}, response_version=401)
    await s.start()
    print(s.port, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await s.close()

asyncio.run(main())
"""


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_us_per_send(tree: Path, batches: int) -> float:
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.Popen(
        python_code(SERVER), stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True, cwd=tree
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        addr = f"127.0.0.1:{int(proc.stdout.readline())}"
        B.BATCHES = 200
        asyncio.run(B.remoting_send(addr, "T"))  # warm up
        before = _cpu_s(proc.pid)
        B.BATCHES = batches
        asyncio.run(B.remoting_send(addr, "T"))
        return (_cpu_s(proc.pid) - before) / (batches + 1) * 1e6
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("other", nargs="?", type=Path, help="another revision's source tree, kernels built")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--batches", type=int, default=3000)
    args = ap.parse_args()
    trees = {"this": HERE} if args.other is None else {"other": args.other.resolve(), "this": HERE}
    got: dict[str, list[float]] = {k: [] for k in trees}
    for _ in range(args.pairs):
        for name, tree in trees.items():
            got[name].append(server_us_per_send(tree, args.batches))
    for name, xs in got.items():
        print(
            f"{name} ({trees[name]}): server CPU per send of 32, median {statistics.median(xs):.0f} us "
            f"({min(xs):.0f}-{max(xs):.0f}), runs {[round(x) for x in xs]}"
        )
    if "other" in got:
        r = [t / o for t, o in zip(got["this"], got["other"], strict=True)]
        print(f"this / other per pair: median {statistics.median(r):.2f} ({min(r):.2f}-{max(r):.2f})")


if __name__ == "__main__":
    main()
