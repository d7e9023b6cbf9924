"""An interrupted ``bench/cluster_bench.py`` leaves no PySyncObj member behind: its members
(started with ``die_with_parent``) exit when the bench process is killed."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from dledger.child_process import python_code
from tests.cluster.test_orphans import children, kill_parent_and_check_members
from tests.conftest import REPO

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="die_with_parent acts on Linux only"),
]


def test_pysyncobj_members_exit_when_the_bench_is_killed() -> None:
    pytest.importorskip("pysyncobj")
    # Two members and the driver, which would run for minutes (their --seconds bounds).
    code = (
        "import sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from bench.cluster_bench import pysyncobj_sync_latency\n"
        "pysyncobj_sync_latency(count=10**8)\n"
    )
    proc = subprocess.Popen(python_code(code, str(REPO)), stdout=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 60
    while len(children(proc.pid)) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert proc.poll() is None, f"the bench exited ({proc.returncode}) before its members started"
    time.sleep(1.0)  # past the members' bootstrap, where die_with_parent is asked for
    kill_parent_and_check_members(proc, 3)
