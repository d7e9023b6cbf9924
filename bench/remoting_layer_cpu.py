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

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

from bench.remoting_cpu_pairs import alternate, us_per_send  # noqa: E402
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


def server_us_per_send(tree: Path, batches: int) -> float:
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.Popen(
        python_code(SERVER), stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True, cwd=tree
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        addr = f"127.0.0.1:{int(proc.stdout.readline())}"
        return us_per_send(proc.pid, addr, 200, batches)
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> None:
    alternate(__doc__ or "", "server CPU", server_us_per_send)


if __name__ == "__main__":
    main()
