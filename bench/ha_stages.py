"""Where a classic slave's lag goes: per-stage timestamps inside the two broker processes.

    python -m bench.ha_stages [--count N] [--broker-python PATH]

Starts an ASYNC_MASTER and a slave (`dledger mq broker`, as bench/test_bench_mq_ha.py does)
under a hook that records, by CLOCK_MONOTONIC (one clock for every process on Linux):

- master: the end of each put (``HAService.wakeup_all``, which the broker calls right after
  the put) and the log's end then;
- slave: when each read of frames came back (``recv_frames``, where the code has it), when
  each append began and ended and the log's end after it, and when each dispatch round ended
  and where dispatch stood.

then runs the bench's producer (batches of 1,000 x 1 KiB, 16 in flight) and prints, per put,
the time from the put's end to the first slave read holding its end, to the slave's append of
it, and to its dispatch, and from that read's return to the append (the wait for the GIL and
the frames before it): p50/p90/p99. ``--broker-python`` runs the brokers with another
checkout's interpreter (the code before a change), the hook being the same. ``--sample``
also watches the slave's HA thread from a sampler process (SAMPLER below) and attributes its
appends over 20 ms, and the puts it appended over 50 ms late, to CPU, a wait for a core, or a
sleep and its kernel stack (docs/ha.md, "The long appends, attributed").
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from dledger import testing
from dledger.child_process import python_code
from dledger.rocketmq.client.producer import AsyncProducer
from dledger.testing import ClassicBroker

HOOK = r"""
import atexit, json, os, runpy, sys, time
out = os.environ["HA_STAGES_OUT"]
now = time.monotonic
rec = {"put": [], "recv": [], "append": [], "dispatch": [], "outq": [], "inq": []}
import fcntl, struct, termios
def queued(fd, req):
    try:
        return struct.unpack("i", fcntl.ioctl(fd, req, b"\0\0\0\0"))[0]
    except OSError:
        return -1
from dledger.rocketmq.store.ha import ha_client, ha_service
from dledger.rocketmq.store import message_store, dispatch

wake = ha_service.HAService.wakeup_all
def wakeup_all(self):
    t = now()
    wake(self)
    try:
        rec["put"].append((t, int(self.store.commitlog.max_offset)))
        for c in self.connections:  # bytes the master's socket holds, not yet taken by the slave
            rec["outq"].append(queued(c.sock.fileno(), termios.TIOCOUTQ))
    except Exception:
        pass
ha_service.HAService.wakeup_all = wakeup_all

append = message_store.MessageStore.append_to_commit_log
sampler = []
def append_to_commit_log(self, start, data):
    if not sampler and os.environ.get("HA_STAGES_SAMPLER"):  # watch this (the HA) thread from outside
        import subprocess, threading
        pre = [t.native_id for t in threading.enumerate() if t.name == "rocketmq-commitlog-prefault"]
        sampler.append(subprocess.Popen([sys.executable, "-c", os.environ["HA_STAGES_SAMPLER"],
                                         str(os.getpid()), str(threading.get_native_id()), out + ".samples",
                                         str(pre[0] if pre else 0)]))
    t = now()
    ok = append(self, start, data)
    rec["append"].append((t, now(), start + len(data)))
    return ok
message_store.MessageStore.append_to_commit_log = append_to_commit_log

batches = dispatch.ReputMessageService._dispatch_batches
def _dispatch_batches(self, *a):
    n = batches(self, *a)
    rec["dispatch"].append((now(), int(self.reput_from)))
    return n
dispatch.ReputMessageService._dispatch_batches = _dispatch_batches

if hasattr(ha_client, "_HA") and hasattr(ha_client._HA, "recv_frames"):
    class _K:
        def __getattr__(self, name):
            return getattr(real, name)
        def recv_frames(self, *a):
            r = real.recv_frames(*a)
            if r[3] != a[3]:
                rec["recv"].append(now())
                rec["inq"].append(queued(a[0], termios.FIONREAD))  # bytes left in the slave's socket
            return r
    real = ha_client._HA
    ha_client._HA = _K()

@atexit.register
def dump():
    for p in sampler:
        p.terminate()
        p.wait(10)
    rec["dledger"] = os.path.dirname(ha_service.__file__)
    with open(out, "w") as f:
        json.dump(rec, f)

runpy.run_module(sys.argv.pop(1), run_name="__main__", alter_sys=True)
"""

# A separate process (no GIL shared with the broker) that samples the slave's HA thread every
# ~2 ms: its state, CPU and run-queue wait (schedstat), its kernel stack when it sleeps, and the
# machine's dirty pages and I/O / memory pressure; so a long append can be told apart as CPU,
# a wait for a core, or a sleep, and where.
SAMPLER = r"""
import json, os, signal, sys, time
pid, tid, out, pre = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
base = f"/proc/{pid}/task/{tid}/"
pre_base = f"/proc/{pid}/task/{pre}/"  # the commit log's pre-writer, which writes the same file
rows = []
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
GENERIC = ("entry_SYSCALL", "do_syscall", "x64_sys", "asm_exc", "exc_page_fault", "do_user_addr_fault",
           "handle_mm_fault", "__handle_mm_fault", "handle_pte_fault", "do_fault", "ksys_", "vfs_")
def total(path, kind):
    for line in open(path):
        if line.startswith(kind):
            return int(line.rsplit("=", 1)[1])
    return -1
def vm():
    d = {}
    for line in open("/proc/vmstat"):
        k, v = line.split()
        if k in ("nr_dirty", "nr_writeback"):
            d[k] = int(v)
    return d
while not stop:
    t = time.monotonic()
    try:
        st = open(base + "stat").read()
        state = st[st.rindex(")") + 2]
        cpu, wait, _n = open(base + "schedstat").read().split()
        stack = ""
        if state != "R":
            frames = [l.split()[1].split("+")[0] for l in open(base + "stack") if l.strip()]
            stack = "<".join([f for f in frames if not f.startswith(GENERIC)][:10])
    except (OSError, IndexError, ValueError):
        break
    pre_state = ""
    if stack.startswith("ext4_buffered_write_iter"):  # the HA write waits in ext4: what is the pre-writer doing?
        try:
            st = open(pre_base + "stat").read()
            pre_state = st[st.rindex(")") + 2]
            frames = [l.split()[1].split("+")[0] for l in open(pre_base + "stack") if l.strip()]
            pre_state += " " + "<".join([f for f in frames if not f.startswith(GENERIC)][:6])
        except (OSError, IndexError, ValueError):
            pass
    d = vm()
    rows.append((t, state, int(cpu), int(wait), stack + (" | pre-writer " + pre_state if pre_state else ""),
                 d.get("nr_dirty", -1), d.get("nr_writeback", -1),
                 total("/proc/pressure/io", "some"), total("/proc/pressure/memory", "some"),
                 total("/proc/pressure/cpu", "some")))
    time.sleep(0.002)
with open(out, "w") as f:
    json.dump(rows, f)
"""


def long_appends(slave: dict[str, Any], samples: list[list[Any]], over_s: float) -> dict[str, Any]:
    """The slave's append calls longer than ``over_s``, split by the sampler: the HA thread's CPU
    and run-queue wait within each (schedstat deltas), the rest (asleep), the kernel stacks of
    the samples taken while it slept, and the dirty pages and pressure stalls meanwhile."""
    ts = [r[0] for r in samples]
    calls: list[dict[str, Any]] = []
    stacks: dict[str, int] = {}
    for a, b, _end in slave["append"]:
        if b - a <= over_s:
            continue
        i, j = bisect.bisect_left(ts, a), bisect.bisect_right(ts, b) - 1
        if j <= i:
            continue
        first, last = samples[i], samples[j]
        span = last[0] - first[0]
        cpu, wait = (last[2] - first[2]) / 1e9, (last[3] - first[3]) / 1e9
        states: dict[str, int] = {}
        for r in samples[i : j + 1]:
            states[r[1]] = states.get(r[1], 0) + 1
            if r[4]:
                stacks[r[4]] = stacks.get(r[4], 0) + 1
        calls.append(
            {
                "ms": (b - a) * 1e3,
                "cpu": cpu / span if span else 0,
                "runq": wait / span if span else 0,
                "states": states,
                "dirty_mb": max(r[5] for r in samples[i : j + 1]) * 4096 / 2**20,
                "writeback_mb": max(r[6] for r in samples[i : j + 1]) * 4096 / 2**20,
                "io_stall_ms": (last[7] - first[7]) / 1e3,
                "mem_stall_ms": (last[8] - first[8]) / 1e3,
                "cpu_stall_ms": (last[9] - first[9]) / 1e3,
            }
        )
    return {"calls": calls, "stacks": stacks}


def slow_puts(master: dict[str, Any], slave: dict[str, Any], samples: list[list[Any]], over_s: float) -> dict[str, int]:
    """For each put the slave appended more than ``over_s`` after it: what the slave's HA thread
    was doing from the put's end to that append (the sampler's states, and its stack asleep)."""
    ts = [r[0] for r in samples]
    app_at = [a[2] for a in slave["append"]]
    seen: dict[str, int] = {}
    for t, end in master["put"]:
        k = bisect.bisect_left(app_at, end)
        if k == len(app_at) or slave["append"][k][1] - t <= over_s:
            continue
        window = samples[bisect.bisect_left(ts, t) : bisect.bisect_right(ts, slave["append"][k][1])]
        for r in window:
            key = r[1] + (" " + r[4] if r[4] else "")
            seen[key] = seen.get(key, 0) + 1
        if len(window) > 1:  # the HA thread's time on a core and waiting for one (schedstat), in ms
            seen["~on cpu ms"] = seen.get("~on cpu ms", 0) + (window[-1][2] - window[0][2]) // 1_000_000
            seen["~runq ms"] = seen.get("~runq ms", 0) + (window[-1][3] - window[0][3]) // 1_000_000
            seen["~window ms"] = seen.get("~window ms", 0) + int((window[-1][0] - window[0][0]) * 1e3)
    return seen


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(int(q * len(s)), len(s) - 1)] if s else float("nan")


def _first_after(times: list[float], ends: list[int], t: float, end: int) -> float | None:
    """The first time at or after ``t`` whose end is at least ``end``."""
    k = bisect.bisect_left(times, t)
    while k < len(times):
        if ends[k] >= end:
            return times[k]
        k += 1
    return None


def stages(master: dict[str, Any], slave: dict[str, Any]) -> dict[str, list[float]]:
    app_start = [a[0] for a in slave["append"]]
    app_end = [a[1] for a in slave["append"]]
    app_at = [a[2] for a in slave["append"]]
    disp_t = [d[0] for d in slave["dispatch"]]
    disp_at = [d[1] for d in slave["dispatch"]]
    out: dict[str, list[float]] = {"append began": [], "appended": [], "dispatched": [], "read": [], "gil": []}
    recv = sorted(slave["recv"])
    for t, end in master["put"]:
        k = bisect.bisect_left(app_at, end)  # appends end in log order
        if k == len(app_at):
            continue
        out["append began"].append(app_start[k] - t)
        out["appended"].append(app_end[k] - t)
        if recv:
            j = bisect.bisect_right(recv, app_start[k]) - 1  # the read that brought it
            if j >= 0:
                out["read"].append(recv[j] - t)
                out["gil"].append(app_start[k] - recv[j])
        d = _first_after(disp_t, disp_at, app_end[k], end)
        if d is not None:
            out["dispatched"].append(d - t)
    return out


def run(count: int, broker_python: str | None, sample: bool = False) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="dledger-ha-stages-"))
    exe = broker_python or sys.executable

    def module(module: str, *args: str, die_with_parent: bool = False) -> list[str]:
        cmd = python_code(HOOK, module, *args, die_with_parent=die_with_parent)
        cmd[0] = exe
        return cmd

    testing.python_module = module
    conf = "mappedFileSizeConsumeQueue=6000000\nmaxHashSlotNum=5000000\nmaxIndexNum=20000000\n"
    os.environ["HA_STAGES_OUT"] = str(root / "m.json")
    master = ClassicBroker(root, "m", "ASYNC_MASTER", conf=conf, file_size=128 << 20).start()
    os.environ["HA_STAGES_OUT"] = str(root / "s.json")
    if sample:
        os.environ["HA_STAGES_SAMPLER"] = SAMPLER
    slave = ClassicBroker(root, "s", "SLAVE", master.ha, conf=conf, file_size=128 << 20).start()
    os.environ.pop("HA_STAGES_SAMPLER", None)
    try:
        body = b"x" * 1024

        async def produce() -> None:
            async with AsyncProducer(master.addr, timeout=60) as p:
                nums = await p.queue_nums("Bench")
                sem = asyncio.Semaphore(16)

                async def one(k: int) -> None:
                    async with sem:
                        assert (await p.send_bodies("Bench", [body] * 1000, k % nums)).ok

                await asyncio.gather(*(one(k) for k in range(count // 1000)))

        asyncio.run(produce())
        asyncio.run(asyncio.sleep(2.0))  # the slave catches up
    finally:
        slave.stop()
        master.stop()
    m, s = json.loads((root / "m.json").read_text()), json.loads((root / "s.json").read_text())
    got: dict[str, Any] = stages(m, s)
    got.update(outq=m["outq"], inq=s["inq"], dledger=[s.get("dledger", "?")])
    # How long each append call of the slave took (a stall there holds every frame after it).
    got["append call"] = [b - a for a, b, _end in s["append"]]
    # The master's put rate: a change that slows the producer shortens the lag for that alone.
    puts = m["put"]
    got["put rate"] = [count / (puts[-1][0] - puts[0][0]) if len(puts) > 1 else float("nan")]
    samples = root / "s.json.samples"
    if samples.exists():
        rows = json.loads(samples.read_text())
        got["long"] = [long_appends(s, rows, LONG_APPEND_S)]
        got["slow puts"] = [slow_puts(m, s, rows, SLOW_PUT_S)]
    shutil.rmtree(root, ignore_errors=True)
    return got


LONG_APPEND_S = 0.02
SLOW_PUT_S = 0.05
STAGES = ("read", "append began", "appended", "dispatched", "gil")


def _line(name: str, v: list[float], scale: float = 1e3, unit: str = "ms") -> str:
    what = {
        "gil": "slave's read -> its append began",
        "outq": "master's socket at a put",
        "inq": "slave's socket after a read",
    }
    return (
        f"{what.get(name, f'put end -> slave {name}')}: p50 {statistics.median(v) * scale:.2f} {unit}, "
        f"p90 {_pct(v, 0.9) * scale:.2f} {unit}, p99 {_pct(v, 0.99) * scale:.2f} {unit} ({len(v)})"
    )


def _print_long(long: dict[str, Any]) -> None:
    calls = long["calls"]
    print(f"  appends over {LONG_APPEND_S * 1e3:.0f} ms: {len(calls)}")
    for c in sorted(calls, key=lambda c: -c["ms"])[:12]:
        print(
            f"    {c['ms']:.1f} ms: on cpu {c['cpu']:.0%}, waiting for a core {c['runq']:.0%}, states {c['states']}, "
            f"dirty <= {c['dirty_mb']:.0f} MiB, writeback <= {c['writeback_mb']:.0f} MiB, pressure stalls "
            f"io {c['io_stall_ms']:.1f} / mem {c['mem_stall_ms']:.1f} / cpu {c['cpu_stall_ms']:.1f} ms"
        )
    for stack, n in sorted(long["stacks"].items(), key=lambda kv: -kv[1])[:8]:
        print(f"    asleep in {stack}: {n} samples")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=100_000)
    ap.add_argument("--broker-python", default=None)
    ap.add_argument("--against", default=None, help="another checkout's python: rounds alternate with it")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--sample", action="store_true", help="attribute the slave's long appends (a sampler process)")
    args = ap.parse_args()
    sides = [("this", args.broker_python)] + ([("against", args.against)] if args.against else [])
    rounds: dict[str, list[dict[str, list[float]]]] = {name: [] for name, _ in sides}
    for r in range(args.rounds):
        for name, exe in sides if r % 2 == 0 else sides[::-1]:
            got = run(args.count, exe, args.sample)
            rounds[name].append(got)
            print(f"round {r + 1} {name} ({got['dledger'][0]}, load {os.getloadavg()[0]:.1f}):")
            print(f"  master's put rate: {got['put rate'][0]:,.0f} msg/s")
            calls = got["append call"]
            print(
                f"  slave's append calls: {len(calls)}, p50 {statistics.median(calls) * 1e3:.3f} ms, "
                f"p99 {_pct(calls, 0.99) * 1e3:.2f} ms, max {max(calls) * 1e3:.1f} ms, in all {sum(calls):.2f} s"
            )
            if got.get("long"):
                _print_long(got["long"][0])
                seen = got["slow puts"][0]
                w = seen.pop("~window ms", 0) or 1
                on, runq = seen.pop("~on cpu ms", 0), seen.pop("~runq ms", 0)
                n = sum(seen.values()) or 1
                print(
                    f"  the HA thread between a put and its append, puts slower than {SLOW_PUT_S * 1e3:.0f} ms: "
                    f"on a core {on / w:.0%}, waiting for one {runq / w:.0%} of the time; samples:"
                )
                for key, c in sorted(seen.items(), key=lambda kv: -kv[1])[:8]:
                    print(f"    {c / n:.0%} {key}")
            for stage in (*STAGES, "outq", "inq"):
                if got[stage]:
                    kb = stage in ("outq", "inq")
                    print("  " + _line(stage, got[stage], 1 / 1024 if kb else 1e3, "KiB" if kb else "ms"))
    if args.rounds > 1 or args.against:
        for name, _ in sides:
            for stage in ("read", "appended"):
                for q in (0.5, 0.99):
                    v = [_pct(g[stage], q) * 1e3 for g in rounds[name]]
                    print(
                        f"{name}: put end -> slave {stage} p{int(q * 100)} median {statistics.median(v):.1f} ms "
                        f"[{min(v):.1f}-{max(v):.1f}] over {len(v)} rounds"
                    )


if __name__ == "__main__":
    main()
