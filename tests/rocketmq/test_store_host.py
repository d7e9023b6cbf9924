"""The store host written into every record and msgId is the same in every run of a store."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from dledger.rocketmq import Message, MessageStore

PRINT_HOST = "from dledger.rocketmq.store.message import local_host_address; print(local_host_address())"


def test_default_store_host_is_stable_across_processes():
    runs = []
    for _ in range(2):
        runs.append(
            subprocess.run(
                [sys.executable, "-c", PRINT_HOST], capture_output=True, text=True, check=True, timeout=60
            ).stdout.strip()
        )
        time.sleep(0.05)  # a clock-made address would differ by now
    assert runs[0] == runs[1]


def test_reopened_store_writes_the_same_store_host(tmp_path: Path):
    hosts = []
    for k in range(2):
        with MessageStore(tmp_path) as store:
            store.put_message(Message("T", b"x%d" % k))
            store.wait_dispatched()
            hosts.append(store.get_messages("T", 0, k, 1).messages[0].store_host)
    assert hosts[0] == hosts[1]
