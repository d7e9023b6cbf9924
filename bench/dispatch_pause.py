"""The dispatch thread's pause after a heavy round (``dispatch.HEAVY_PAUSE``) against the
1 ms it keeps for slower streams, on ``bench/mq_put_loop.py``'s loop (``put_batch`` of 32
bodies into a fresh store, then the wait for dispatch).

Each round runs one process per pause, alternating, so that both see the same machine; prints
each pause's median and range of microseconds a batch for the puts alone and with dispatch
caught up, each round's ratio to the first pause's, and the load average before and after:

    .venv/bin/python -m bench.dispatch_pause dledger 100 --rounds 8
"""

from __future__ import annotations

import os
import re
import runpy
import statistics
import subprocess
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.mq_put_loop import loop_parser

LOOP = Path(__file__).with_name("mq_put_loop.py")
FIGURES = re.compile(r"put ([\d.]+) us/\w+, with dispatch caught up ([\d.]+) us/\w+")


def _child(pause: float, loop_args: list[str]) -> None:
    """Run the put loop in this process with the heavy-round pause set to ``pause``."""
    from dledger.rocketmq.store import dispatch

    dispatch.HEAVY_PAUSE = pause
    sys.argv = [str(LOOP), *loop_args]
    runpy.run_path(str(LOOP), run_name="__main__")


def _one(pause: float, loop_args: list[str]) -> tuple[float, float]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.dispatch_pause", "--child", str(pause), *loop_args],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
    ).stdout
    m = FIGURES.search(out)
    assert m, out
    return float(m[1]), float(m[2])


def _summary(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} [{min(xs):.2f}-{max(xs):.2f}]"


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        _child(float(sys.argv[2]), sys.argv[3:])
        return
    ap = loop_parser(__doc__)
    ap.add_argument("--batches", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument(
        "--pauses", type=float, nargs="+", default=[0.001, 0.004], help="seconds; the first is the baseline"
    )
    args = ap.parse_args()
    loop_args = [args.mode, str(args.size), "--batches", str(args.batches)] + (["--single"] if args.single else [])
    load0 = os.getloadavg()
    puts: dict[float, list[float]] = {p: [] for p in args.pauses}
    caught: dict[float, list[float]] = {p: [] for p in args.pauses}
    for r in range(args.rounds):
        # Alternate the order too, so that neither side always runs first in a round.
        for p in args.pauses if r % 2 == 0 else args.pauses[::-1]:
            put, with_dispatch = _one(p, loop_args)
            puts[p].append(put)
            caught[p].append(with_dispatch)
    load1 = os.getloadavg()
    unit = "message" if args.single else "batch"
    print(f"{args.mode} {args.size} B, {args.rounds} rounds, load {load0[0]:.2f} -> {load1[0]:.2f}")
    base = args.pauses[0]
    for p in args.pauses:
        # Each round's ratio to the baseline of the same round: the pairs share the machine's load.
        ratios = [a / b for a, b in zip(puts[p], puts[base], strict=True)]
        print(
            f"heavy pause {p * 1000:g} ms: put {_summary(puts[p])} us/{unit}, "
            f"with dispatch caught up {_summary(caught[p])} us/{unit}; "
            f"put time / the {base * 1000:g} ms one's in the same round {_summary(ratios)}"
        )


if __name__ == "__main__":
    main()
