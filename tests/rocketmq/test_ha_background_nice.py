"""backgroundThreadNice: a slave broker's background threads run at the niceness set, its HA
thread at the process's; with the key at 0 every thread keeps the process's."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dledger.rocketmq.store.ha.background_nice import BACKGROUND_THREAD_NAMES
from dledger.testing import ClassicBroker

FILE = 256 * 1024


def niceness(pid: int, tid: int) -> int:
    """Field 19 of /proc/PID/task/TID/stat (after the command in parentheses)."""
    stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[16])


def named_tids(log: Path) -> dict[str, int]:
    """The threads the broker reports it set, by name."""
    found = re.findall(r"backgroundThreadNice: (\S+) \(tid (\d+)\)", log.read_text())
    return {name: int(tid) for name, tid in found}


@pytest.fixture
def pair(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[ClassicBroker, ClassicBroker]]:
    conf = f"backgroundThreadNice={request.param}\n"
    master = ClassicBroker(tmp_path, "m", "ASYNC_MASTER", conf=conf, file_size=FILE)
    slave = ClassicBroker(tmp_path, "s", "SLAVE", conf=conf, file_size=FILE)
    try:
        master.start()
        slave.master_ha = master.ha
        slave.start()
        yield master, slave
    finally:
        for b in (slave, master):
            if b.proc is not None:
                b.kill()


@pytest.mark.parametrize("pair", [7], indirect=True)
def test_a_slaves_background_threads_run_at_the_niceness_set(pair: tuple[ClassicBroker, ClassicBroker]) -> None:
    master, slave = pair
    for broker in (master, slave):
        assert broker.proc is not None
        pid = broker.proc.pid
        deadline = time.monotonic() + 10
        while set(named_tids(broker.log)) != BACKGROUND_THREAD_NAMES and time.monotonic() < deadline:
            time.sleep(0.05)
        tids = named_tids(broker.log)
        assert set(tids) == BACKGROUND_THREAD_NAMES
        assert {name: niceness(pid, tid) for name, tid in tids.items()} == dict.fromkeys(tids, 7)
        # The rest (the HA threads, remoting, the main thread) keep the process's niceness.
        others = {int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()} - set(tids.values())
        assert others and {niceness(pid, tid) for tid in others} == {0}


@pytest.mark.parametrize("pair", [0], indirect=True)
def test_with_the_key_at_0_every_thread_keeps_the_process_niceness(pair: tuple[ClassicBroker, ClassicBroker]) -> None:
    for broker in pair:
        assert broker.proc is not None
        pid = broker.proc.pid
        tasks = [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()]
        assert len(tasks) > len(BACKGROUND_THREAD_NAMES)
        assert {niceness(pid, tid) for tid in tasks} == {0}
        assert named_tids(broker.log) == {}
