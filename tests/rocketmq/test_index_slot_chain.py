"""The index file's hash-slot chain (IndexFile.putKey): a slot holds the number of the last item
put under it, and each item links the item before it in the slot. With two slots every key
collides with half of all the others, so a query finds a key's messages only by following the
chain through the other keys' items: a dropped link, or a slot overwritten without one, loses
them. The items go in through dispatch (its kernel puts them into the last file, the rest into
the next files by ``IndexFile.put_hashes``), in several rounds and over several files."""

from __future__ import annotations

from pathlib import Path

from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.message import Message
from dledger.rocketmq.store.message_store import MessageStore

TOPICS = ("T", "U")
KEYS = 150
COPIES = 3  # messages per key and topic


def test_every_message_of_colliding_keys_is_found(tmp_path: Path) -> None:
    cfg = MessageStoreConfig(
        mapped_file_size_commit_log=1 << 20,
        max_hash_slot_num=2,
        max_index_num=400,  # 399 items a file: the 1800 items take five files
        store_host="127.0.0.1:10911",
    )
    s = MessageStore(tmp_path / "s", cfg, dispatch_thread=False, schedule=False)
    try:
        want: dict[tuple[str, str], set[int]] = {}
        n = 0
        for _ in range(COPIES):
            for k in range(KEYS):
                for topic in TOPICS:
                    key = f"key-{k}"
                    assert s.put_message(Message(topic, b"%06d" % n, keys=key)).ok
                    want.setdefault((topic, key), set()).add(n)
                    n += 1
                if k % 50 == 49:
                    s.dispatch_now()  # rounds that continue the chains of the rounds before
        s.dispatch_now()
        assert sum(f.entries for f in s.index_service.files) == 2 * n  # UNIQ_KEY and KEYS each
        assert len(s.index_service.files) > 1
        for (topic, key), ids in want.items():
            found = s.query_by_key(topic, key)
            assert sorted(int(m.body) for m in found) == sorted(ids), (topic, key)
    finally:
        s.close()
