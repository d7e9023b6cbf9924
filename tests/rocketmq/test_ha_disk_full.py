"""A slave's HA appends on a full disk: refused (DISK_FULL), never SIGBUS, nothing torn.

The slave's appends write past the pre-written mark by pwrite without allocating blocks ahead
(``skip_allocate_ahead``: ext4 reserves them page by page, docs/ha.md) and copy through the
mapping only below that mark, whose zeros reserved the blocks. On a full disk a store through
the mapping into an unreserved hole dies of SIGBUS where a pwrite answers ENOSPC. Here the
slave's store sits on a small loop-mounted ext4 (see loop_fs.py) that its appends fill; the
master's is on the test's own directory.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from dledger.child_process import python_code
from tests.rocketmq.loop_fs import FILL_DISK, small_fs

CHILD = (
    FILL_DISK
    + r"""
import os, sys
from dledger.errors import DLedgerError
from dledger.rocketmq.store.config import SLAVE, MessageStoreConfig
from dledger.rocketmq.store.message import Message
from dledger.rocketmq.store.message_store import MessageStore

master_root, slave_root, filler = sys.argv[1], sys.argv[2], sys.argv[3]
FILE = 16 << 20
cfg = MessageStoreConfig(
    mapped_file_size_commit_log=FILE,
    mapped_file_size_consume_queue=3000 * 20,
    max_hash_slot_num=500,
    max_index_num=4000,
    store_host="127.0.0.1:10911",
)
m = MessageStore(master_root, cfg, schedule=False)
for k in range(0, 40_000, 100):
    msgs = [Message("T", bytes([i % 251]) * 1000, queue_id=i % 4) for i in range(k, k + 100)]
    assert m.put_messages(msgs).ok
end = int(m.max_phys_offset)

def master_bytes(at, n):
    f = m.commitlog.files.find(at)
    return bytes(f.read(at - f.file_from_offset, n))

os.makedirs(slave_root)
fill_disk(filler)
os.truncate(filler, os.path.getsize(filler) - (20 << 20))  # 20 MiB left: half the master's log
s = MessageStore(slave_root, cfg.replace(broker_role=SLAVE), schedule=False)
at, refused = 0, "none"
while at < end:
    n = min(1 << 20, end - at, FILE - at % FILE)
    try:
        if not s.append_to_commit_log(at, memoryview(master_bytes(at, n))):
            refused = "false"
            break
    except DLedgerError as exc:
        refused = exc.code.name
        break
    at += n
held = int(s.max_phys_offset)
same = all(
    bytes(s.commitlog.files.find(o).read(o % FILE, min(1 << 20, held - o))) == master_bytes(o, min(1 << 20, held - o))
    for o in range(0, held, 1 << 20)
)
print("appended", at, "held", held, "end", end, "refused", refused, "same", same, flush=True)
m.close()
try:
    s.close()
except OSError:  # its checkpoint cannot be written on the full disk: not what is tested here
    pass
"""
)


def test_slave_append_on_a_full_disk_is_refused_and_keeps_the_masters_bytes(tmp_path: Path) -> None:
    with small_fs(tmp_path) as mnt:
        proc = subprocess.run(
            python_code(CHILD, str(tmp_path / "m"), str(mnt / "s"), str(mnt / "filler")),
            capture_output=True,
            text=True,
            timeout=180,
        )
    # A store through the mapping into an unreserved hole would have killed it (SIGBUS, -7).
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    words = proc.stdout.split()
    appended, held, end, refused, same = int(words[1]), int(words[3]), int(words[5]), words[7], words[9]
    assert 0 < appended < end, proc.stdout  # the disk filled part way
    assert "DISK_FULL" in refused, proc.stdout + proc.stderr[-3000:]
    assert held == appended, proc.stdout  # nothing of the refused append counts as written
    assert same == "True", proc.stdout  # what the slave holds is the master's bytes
