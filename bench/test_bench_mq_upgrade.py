"""The smooth upgrade of a classic store to DLedger: how long the first start in DLedger mode
takes over ``DLEDGER_BENCH_UPGRADE_MB`` MiB of old log (default 1024), beside a plain classic
restart of the same store in the same run (the baseline: both recover the old log's last files).

    DLEDGER_BENCH_UPGRADE_MB=1024 pytest bench/test_bench_mq_upgrade.py -p no:cacheprovider -s

Each round copies nothing: the classic restart runs on the store as written, then the upgrade
on the same files (it writes only the blank and the first DLedger file, so the classic reopen
cannot run after it); rounds are separate stores.
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.message_store import MessageStore

MB = int(os.environ.get("DLEDGER_BENCH_UPGRADE_MB", 1024))
ROUNDS = int(os.environ.get("DLEDGER_BENCH_UPGRADE_ROUNDS", 3))
BODY = 1000
BATCH = 1000
CFG = MessageStoreConfig(flush_disk_type="ASYNC_FLUSH")  # 1 GiB files, RocketMQ's default


def _write(root: Path) -> int:
    """A classic store of about MB MiB of records in 4 queues; returns the messages."""
    n = 0
    with MessageStore(root, CFG) as store:
        body = b"u" * BODY
        while store.max_phys_offset < MB << 20:
            assert store.put_batch("T", [body] * BATCH, queue_id=n // BATCH % 4).ok
            n += BATCH
        assert store.wait_dispatched(600)
    return n


def test_upgrade_time_beside_a_classic_restart(benchmark: Any, tmp_path: Path) -> None:
    classic: list[float] = []
    upgrade: list[float] = []
    for r in range(ROUNDS):
        root = tmp_path / f"store{r}"
        n = _write(root)
        t = time.perf_counter()
        with MessageStore(root, CFG) as store:
            classic.append(time.perf_counter() - t)
            assert store.max_offset_in_queue("T", 0) > 0
        t = time.perf_counter()
        with MessageStore(root, CFG.replace(enable_dledger_commit_log=True)) as store:
            upgrade.append(time.perf_counter() - t)
            assert store.commitlog.upgraded is not None
            last = store.get_messages("T", 0, store.max_offset_in_queue("T", 0) - 1, 1)
            assert len(last.messages) == 1
        shutil.rmtree(root)
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    med_c, med_u = statistics.median(classic), statistics.median(upgrade)
    benchmark.extra_info.update(
        old_log_mib=MB, messages=n, classic_restart_s=classic, upgrade_s=upgrade, median_upgrade_s=med_u
    )
    print(
        f"\n{MB} MiB old log ({n} messages of {BODY} B): classic restart median {med_c:.3f} s "
        f"(min {min(classic):.3f}, max {max(classic):.3f}); upgrade median {med_u:.3f} s "
        f"(min {min(upgrade):.3f}, max {max(upgrade):.3f}) over {ROUNDS} stores"
    )
