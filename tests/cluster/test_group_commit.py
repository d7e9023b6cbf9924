"""An append is acknowledged only once its entries are msynced, whichever way the flush ran:
small flushes run on the node's loop, big ones on its flush thread (dledger.server)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from dledger.client import AsyncClient
from dledger.server import INLINE_FLUSH_MAX_BYTES, NodeServer
from dledger.store.file import MmapFileStore
from dledger.testing import one_member_config, store_held

pytestmark = pytest.mark.timeout(120)


def test_an_ack_means_its_entries_are_msynced_for_small_and_big_flushes(tmp_path: Path):
    # One member: the leader's own flush is the quorum, so every ack waits for it.
    cfg = one_member_config(
        tmp_path, mapped_file_size_for_entry_data=64 << 20, mapped_file_size_for_entry_index=8 << 20
    )
    big_body = b"b" * 1024
    big_batch = [big_body] * (4 * INLINE_FLUSH_MAX_BYTES // len(big_body))

    async def run() -> list[int]:
        server = NodeServer(cfg)
        await server.start()
        try:
            store = server.groups["g"].store
            assert isinstance(store, MmapFileStore)
            unflushed = []
            async with AsyncClient(cfg.peers, group="g", timeout=30) as client:
                for k in range(50):
                    await client.append(b"small %d" % k)
                    unflushed.append(store.unflushed_entry_bytes())
                for _ in range(3):
                    await client.append_batch(big_batch)
                    unflushed.append(store.unflushed_entry_bytes())
                    await client.append_batch([b"s"] * 10)
                    unflushed.append(store.unflushed_entry_bytes())
                assert store.ledger_end_index == 50 + 3 * (len(big_batch) + 10) - 1
            return unflushed
        finally:
            await server.close()

    assert asyncio.run(run()) == [0] * 56


def test_a_busy_store_delays_the_ack_not_the_node(tmp_path: Path):
    # While the store's service holds it (a checkpoint msyncing everything), a small append
    # waits for its flush on the flush thread; the node's loop goes on answering. Behaviour,
    # not time: the loop answers requests while the store is still held, and the ack comes
    # only after the hold ends (how long either takes is bench/ material).
    cfg = one_member_config(tmp_path, mapped_file_size_for_entry_data=4 << 20, mapped_file_size_for_entry_index=1 << 20)

    async def run() -> tuple[int, int]:
        server = NodeServer(cfg)
        await server.start()
        try:
            store = server.groups["g"].store
            assert isinstance(store, MmapFileStore)
            async with AsyncClient(cfg.peers, group="g", timeout=30) as client:
                await client.append(b"warm up")
                with store_held(store):
                    append = asyncio.ensure_future(client.append(b"while busy"))
                    for _ in range(5):
                        # A blocked loop would never answer while the lock is held.
                        await asyncio.wait_for(client.metadata(), 20)
                        await asyncio.sleep(0.02)
                    assert not append.done()  # no ack before its entry is on disk
                resp = await append
                return resp.index, store.unflushed_entry_bytes()
        finally:
            await server.close()

    index, unflushed = asyncio.run(run())
    assert index == 1
    assert unflushed == 0
