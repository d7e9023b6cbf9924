"""A classic put that meets a full disk before the disk-full flag is up (the space check runs
every few seconds; here not at all) answers CREATE_MAPEDFILE_FAILED, as RocketMQ 4.9.4 does when
the commit log cannot get the file to write into, not UNKNOWN_ERROR; and nothing it was told was
stored is lost. On a small loop-mounted ext4 (tests/rocketmq/loop_fs.py; root needed)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from dledger.child_process import python_code
from tests.rocketmq.loop_fs import FILL_DISK, SMALL_STORE_CONFIG, small_fs

CHILD = (
    FILL_DISK
    + SMALL_STORE_CONFIG
    + r"""
import collections, os, sys
from dledger.rocketmq.store.message import Message
from dledger.rocketmq.store.message_store import MessageStore

root, filler = sys.argv[1], sys.argv[2]
os.makedirs(root)
cfg = small_store_config()
acked, statuses = [], collections.Counter()


def put(seq):
    r = s.put_message(Message("T", b"%08d" % seq + b"y" * 992))
    if r.ok:
        acked.append(seq)
    else:
        statuses[r.status.name] += 1


s = MessageStore(root, cfg, schedule=False)  # no service: its space check would refuse first
for seq in range(100):
    put(seq)
fill_disk(filler)
os.truncate(filler, os.path.getsize(filler) - (1 << 20))  # 1 MiB left: less than a file
for seq in range(100, 3100):
    put(seq)
os.unlink(filler)
for seq in range(3100, 3150):  # room again: puts go on where the refused ones did not land
    put(seq)
s.close()
s = MessageStore(root, cfg, schedule=False)
s.wait_dispatched()
stored = [int(m.body[:8]) for m in s.iter_messages()]
s.close()
print("statuses", dict(statuses), flush=True)
assert statuses and set(statuses) == {"CREATE_MAPEDFILE_FAILED"}, statuses
assert 100 < len(acked) < 3100 and acked[-1] == 3149, (len(acked), acked[-1:])
assert stored == acked, (len(stored), len(acked))
print("ok")
"""
)


def test_a_classic_put_on_a_full_disk_answers_create_mapedfile_failed_and_loses_nothing(tmp_path: Path) -> None:
    with small_fs(tmp_path) as mnt:
        proc = subprocess.run(
            python_code(CHILD, str(mnt / "store"), str(mnt / "filler")),
            capture_output=True,
            text=True,
            timeout=180,
        )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert proc.stdout.split()[-1] == "ok", proc.stdout
