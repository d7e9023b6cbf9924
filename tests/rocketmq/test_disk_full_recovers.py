"""After the disk filled, puts are refused, and accepted again once retention freed space.

On a full disk the consume-queue flush and the offsets failed with ENOSPC, and retention ran
behind them in one try: it never ran, nothing freed the disk, and puts stayed refused for
good. As RocketMQ (CleanCommitLogService.isSpaceToDelete, RunningFlags): above 90 % of the
disk used the disk-full flag refuses puts (SERVICE_NOT_AVAILABLE) while retention deletes the
oldest files (above 85 % whatever their age); below 85 % the flag is cleared. Here on a small
loop-mounted ext4 (see loop_fs.py) whose free space a filler mostly takes.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from dledger.child_process import python_code
from tests.rocketmq.loop_fs import FILL_DISK, SMALL_STORE_CONFIG, small_fs

CHILD = (
    FILL_DISK
    + SMALL_STORE_CONFIG
    + r"""
import collections, os, sys, time
from dledger.rocketmq.store.message import Message
from dledger.rocketmq.store.message_store import MessageStore

root, filler, mode = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(root)
fill_disk(filler)
os.truncate(filler, os.path.getsize(filler) - (28 << 20))  # 28 MiB left for the store
cfg = small_store_config(
    enable_dledger_commit_log=mode == "dledger",
    clean_resource_interval=300,
    dledger_store_options=dict(mapped_file_size_for_entry_data=1 << 20, mapped_file_size_for_entry_index=1 << 20),
)
s = MessageStore(root, cfg, schedule=False)
refused = accepted_after = 0
deadline = time.monotonic() + 90
while time.monotonic() < deadline and not accepted_after:
    r = s.put_message(Message("T", b"y" * 1000, keys="k"))  # faster than dispatch keeps up with
    if not r.ok:
        refused += 1
        time.sleep(0.002)
    elif refused:
        accepted_after += 1
ratio = s.disk_used_ratio()
s.close()
print("refused", refused, "accepted after", accepted_after, "used %.3f" % ratio, flush=True)
"""
)


@pytest.mark.parametrize("mode", ["classic", "dledger"])
def test_puts_refused_on_a_full_disk_are_accepted_once_retention_frees_space(tmp_path: Path, mode: str) -> None:
    with small_fs(tmp_path) as mnt:
        proc = subprocess.run(
            python_code(CHILD, str(mnt / "store"), str(mnt / "filler"), mode),
            capture_output=True,
            text=True,
            timeout=180,
        )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    words = proc.stdout.split()
    refused, accepted_after = int(words[1]), int(words[4])
    assert refused > 0, proc.stdout  # the disk did fill
    assert accepted_after > 0, proc.stdout + proc.stderr[-3000:]
