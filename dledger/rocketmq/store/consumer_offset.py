"""RocketMQ 4.9.4's ``ConsumerOffsetManager``: ``config/consumerOffset.json``.

The file is what the broker's ``ConfigManager.persist`` writes: fastjson's pretty format, with
the integer queue ids as bare (unquoted) keys, which plain JSON does not allow, indented with
tabs: ``{\\n\\t"offsetTable":{\\n\\t\\t"TopicA@group1":{0:5,1:3\\n\\t\\t}\\n\\t}\\n}``.

Persisting writes ``consumerOffset.json.tmp``, copies the previous file to ``.bak`` and renames
the tmp file into place (MixAll.string2File), fsyncing as it goes. Loading falls back to ``.bak``
when the file is missing, empty or unreadable (ConfigManager.load); a corrupt file without a
good backup is an error, not an empty table.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from pathlib import Path
from typing import Any

from dledger.files import fsync_dir

log = logging.getLogger(__name__)

TOPIC_GROUP_SEPARATOR = "@"
FILE_NAME = "consumerOffset.json"
# ConsumerOffsetManager's table is a ConcurrentHashMap(512): its iteration order is by bucket.
_TABLE_CAPACITY = 512


class OffsetFileError(ValueError):
    """consumerOffset.json (and its .bak) cannot be read."""


def _java_hash(s: str) -> int:
    h = 0
    for i in range(0, len(data := s.encode("utf-16-be", "surrogatepass")), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h


def _bucket_order(keys: list[str]) -> list[str]:
    """The order a java.util.concurrent.ConcurrentHashMap(512) iterates these keys in (bucket
    index of the spread hash; insertion order within a bucket), so the file reads as the broker's."""
    n = 1
    # ConcurrentHashMap(initialCapacity) sizes its table to tableSizeFor(c + c/2 + 1), and doubles
    # it past 3/4 full.
    target = _TABLE_CAPACITY + _TABLE_CAPACITY // 2 + 1
    while n < target:
        n <<= 1
    while len(keys) > n - (n >> 2):
        n <<= 1

    def bucket(k: str) -> int:
        h = _java_hash(k)
        return ((h ^ (h >> 16)) & 0x7FFFFFFF) & (n - 1)

    return sorted(keys, key=bucket)


def _json_string(s: str) -> str:
    """fastjson's string writer: quotes, backslash and control characters escaped, the rest verbatim."""
    return json.dumps(s, ensure_ascii=False)


def encode_int_map(values: dict[int, int], indent: int) -> str:
    """fastjson's pretty MapSerializer for integer keys at nesting ``indent``: the entries on one
    line, the closing brace on the next (``{0:5,1:3\n\t\t}``); small ids in ascending order, as a
    ConcurrentHashMap iterates them."""
    if not values:
        return "{}"
    inner = ",".join(f"{k}:{values[k]}" for k in sorted(values, key=lambda q: q & 0xFFFFFFFF))
    return "{" + inner + "\n" + "\t" * indent + "}"


def encode_offset_table(table: dict[str, dict[int, int]]) -> str:
    """The pretty fastjson text of ``{"offsetTable": table}`` (ConsumerOffsetManager.encode(true))."""
    if not table:
        return '{\n\t"offsetTable":{}\n}'
    parts = [f"\n\t\t{_json_string(key)}:{encode_int_map(table[key], 2)}" for key in _bucket_order(list(table))]
    return '{\n\t"offsetTable":{' + ",".join(parts) + "\n\t}\n}"


def decode_fastjson(text: str) -> object:
    """Parse fastjson output, whose maps with integer keys leave them unquoted."""
    return json.loads(_BARE_KEY.sub(lambda m: m.group(1) or f'{m.group(2)}"{m.group(3)}"{m.group(4)}', text))


_BARE_KEY = re.compile(r'("(?:[^"\\]|\\.)*")|([{,]\s*)(-?\d+)(\s*:)', re.S)


def decode_offset_object(text: str) -> dict[Any, Any]:
    """The ``offsetTable`` object of a fastjson ``{"offsetTable": ...}`` file (consumer or delay
    offsets), unchecked inside."""
    obj = decode_fastjson(text)
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    raw = obj.get("offsetTable") or {}
    if not isinstance(raw, dict):
        raise ValueError("offsetTable is not an object")
    return raw


def decode_offset_table(text: str) -> dict[str, dict[int, int]]:
    """Parse what ``encode_offset_table`` (or fastjson, compact or pretty) wrote."""
    raw = decode_offset_object(text)
    table: dict[str, dict[int, int]] = {}
    for key, queues in raw.items():
        if not isinstance(queues, dict):
            raise ValueError(f"offsets of {key!r} are not an object")
        table[str(key)] = {int(q): int(v) for q, v in queues.items()}
    return table


class ConsumerOffsetManager:
    """Consumer offsets per ``topic@group`` and queue id, persisted in ``<config_dir>/consumerOffset.json``.

    ``readonly=True`` loads and answers queries but never writes.
    """

    def __init__(self, config_dir: Path | str, readonly: bool = False) -> None:
        self.dir = Path(config_dir)
        self.path = self.dir / FILE_NAME
        self.readonly = readonly
        self.offset_table: dict[str, dict[int, int]] = {}
        # Commits come from the owner's thread, persists from the store's service thread.
        self._lock = threading.Lock()
        self._changes = 0  # commits since the last persist

    def load(self) -> bool:
        """ConfigManager.load: the file, else its ``.bak``; True when either was read, False when
        neither exists. Raises OffsetFileError when what exists cannot be parsed."""
        problem: str | None = None
        for path in (self.path, self.path.with_name(FILE_NAME + ".bak")):
            try:
                text = path.read_text(encoding="utf-8")
            except FileNotFoundError:
                continue
            except (OSError, UnicodeDecodeError) as exc:
                problem = problem or f"{path}: {exc}"
                continue
            if not text.strip():
                continue
            try:
                self.offset_table = decode_offset_table(text)
            except (ValueError, TypeError) as exc:
                log.warning("load %s failed (%s), trying the backup", path, exc)
                problem = problem or f"{path}: {exc}"
                continue
            if path != self.path:
                log.warning("loaded consumer offsets from %s", path)
            return True
        if problem is not None:
            raise OffsetFileError(f"cannot read consumer offsets: {problem}")
        return False

    def encode(self) -> str:
        with self._lock:
            return encode_offset_table(self.offset_table)

    def persist_if_changed(self) -> bool:
        """``persist`` when offsets were committed since the last one (RocketMQ's
        flushConsumerOffsetInterval task); True when it wrote."""
        changes = self._changes
        if not changes:
            return False
        self.persist()
        with self._lock:
            self._changes -= changes
        return True

    def persist(self) -> None:
        """MixAll.string2File: write ``.tmp``, keep the previous content as ``.bak``, rename."""
        if self.readonly:
            raise PermissionError(f"consumer offsets in {self.dir} are open read-only")
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(FILE_NAME + ".tmp")
        _write_synced(tmp, self.encode())
        try:
            previous = self.path.read_bytes()
        except FileNotFoundError:
            previous = None
        if previous is not None:
            _write_synced(self.path.with_name(FILE_NAME + ".bak"), previous)
        os.replace(tmp, self.path)
        fsync_dir(self.dir)

    # -- the table ---------------------------------------------------------------------

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = topic + TOPIC_GROUP_SEPARATOR + group
        with self._lock:
            queues = self.offset_table.setdefault(key, {})
            stored = queues.get(queue_id)
            queues[queue_id] = offset
            self._changes += 1
        if stored is not None and offset < stored:
            log.warning(
                "[NOTIFYME]update consumer offset less than store. key=%s, queueId=%d, requestOffset=%d, "
                "storeOffset=%d",
                key,
                queue_id,
                offset,
                stored,
            )

    def replace_table(self, table: dict[str, dict[int, int]]) -> bool:
        """A slave takes its master's offsets (SlaveSynchronize.syncConsumerOffset); True, and
        written, when they differ from its own."""
        with self._lock:
            if table == self.offset_table:
                return False
            self.offset_table = {k: dict(v) for k, v in table.items()}
        self.persist()
        return True

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, -1 when there is none."""
        return self.offset_table.get(topic + TOPIC_GROUP_SEPARATOR + group, {}).get(queue_id, -1)

    def query_offsets(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.offset_table.get(topic + TOPIC_GROUP_SEPARATOR + group, {}))

    def which_topics_by_consumer(self, group: str) -> set[str]:
        out = set()
        for key in self.offset_table:
            parts = key.split(TOPIC_GROUP_SEPARATOR)
            if len(parts) == 2 and parts[1] == group:
                out.add(parts[0])
        return out

    def which_groups_by_topic(self, topic: str) -> set[str]:
        out = set()
        for key in self.offset_table:
            parts = key.split(TOPIC_GROUP_SEPARATOR)
            if len(parts) == 2 and parts[0] == topic:
                out.add(parts[1])
        return out

    def remove_offset(self, group: str) -> None:
        with self._lock:
            for key in [
                k for k in self.offset_table if (p := k.split(TOPIC_GROUP_SEPARATOR)) and len(p) == 2 and p[1] == group
            ]:
                del self.offset_table[key]
            self._changes += 1


def _write_synced(path: Path, data: str | bytes) -> None:
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
