"""RocketMQ's ConfigManager: a broker's metadata file (``config/topics.json``,
``config/subscriptionGroup.json``) as the Java broker writes and reads it.

``persist`` is MixAll.string2File: the new text to ``<file>.tmp``, the previous file's content to
``<file>.bak``, then the tmp renamed over the file (fsynced, so a crash leaves the old or the new
file whole). ``load`` reads the file, else its ``.bak`` (ConfigManager.load/loadBak).

``to_pretty_json`` writes what fastjson's ``JSON.toJSONString(obj, true)`` writes: a tab per
level, each property and each string-keyed map entry on its own line, the closing brace on its
own line; a map with integer keys keeps its entries on one line. A bean is passed as a dict whose
keys are already sorted (fastjson sorts properties by name); a map as a dict in the order a
``ConcurrentHashMap`` iterates (``chm_order``).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from dledger.files import fsync_dir
from dledger.rocketmq.remoting import remoting_serializable
from dledger.rocketmq.remoting.protocol.register_broker_body import DataVersion
from dledger.rocketmq.store.consumer_offset import _java_hash, _write_synced

log = logging.getLogger(__name__)


def chm_order(keys: list[str], capacity: int) -> list[str]:
    """The order a ``new ConcurrentHashMap(capacity)`` holding these keys iterates them: by
    bucket of the spread hash (insertion order within a bucket), so our file reads as Java's."""
    n = 1
    target = capacity + capacity // 2 + 1  # tableSizeFor(c + c/2 + 1)
    while n < target:
        n <<= 1
    while len(keys) > n - (n >> 2):  # doubled past 3/4 full
        n <<= 1

    def bucket(k: str) -> int:
        h = _java_hash(k)
        return ((h ^ (h >> 16)) & 0x7FFFFFFF) & (n - 1)

    return sorted(keys, key=bucket)


def _scalar(v: Any) -> str:
    # fastjson writes strings unescaped past the JSON escapes, booleans and numbers plainly.
    return json.dumps(v, ensure_ascii=False)


def to_pretty_json(obj: Any, indent: int = 0) -> str:
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        if all(isinstance(k, int) and not isinstance(k, bool) for k in obj):
            inner = ",".join(f"{k}:{to_pretty_json(v, indent + 1)}" for k, v in obj.items())
            return "{" + inner + "\n" + "\t" * indent + "}"
        pad = "\n" + "\t" * (indent + 1)
        inner = ",".join(f"{pad}{_scalar(str(k))}:{to_pretty_json(v, indent + 1)}" for k, v in obj.items())
        return "{" + inner + "\n" + "\t" * indent + "}"
    if isinstance(obj, list | tuple):
        return "[" + ",".join(to_pretty_json(v, indent) for v in obj) + "]"
    return _scalar(obj)


def string_to_file(text: str, path: Path) -> None:
    """MixAll.string2File (see the module docstring)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    _write_synced(tmp, text)
    try:
        previous = path.read_bytes()
    except FileNotFoundError:
        previous = None
    if previous is not None:
        _write_synced(path.with_name(path.name + ".bak"), previous)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def load_json(path: Path) -> dict[str, Any] | None:
    """ConfigManager.load: the parsed file, else its ``.bak``; None when neither reads."""
    for p in (path, path.with_name(path.name + ".bak")):
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("%s cannot be read: %s", p, exc)
            continue
        if not text.strip():
            continue
        try:
            data = json.loads(text)
        except ValueError as exc:
            log.warning("%s is not JSON (%s), trying the backup", p, exc)
            continue
        if isinstance(data, dict):
            if p != path:
                log.warning("loaded %s from its backup %s", path.name, p)
            return data
        log.warning("%s is not a JSON object, trying the backup", p)
    return None


__all__ = ["chm_order", "load_json", "string_to_file", "to_pretty_json"]


class _JsonBean(Protocol):
    def to_json(self) -> dict[str, Any]: ...


T = TypeVar("T", bound=_JsonBean)


class VersionedTable(Generic[T]):
    """What TopicConfigManager and SubscriptionGroupManager share: a table by name in a
    ``ConcurrentHashMap(capacity)``'s order, its DataVersion (a new one per change), the file
    rewritten on each change, and the slave's take-over of the master's table."""

    def __init__(self, path: Path, table_key: str, capacity: int) -> None:
        self.path = path
        self.table: dict[str, T] = {}
        self.data_version = DataVersion(int(time.time() * 1000), 0)
        self._lock = threading.RLock()  # persist (under it) encodes under it too
        self._table_key = table_key
        self._capacity = capacity

    def _put(self, name: str, item: T) -> None:
        with self._lock:
            self.table[name] = item
            self._changed()

    def delete(self, name: str) -> bool:
        with self._lock:
            if self.table.pop(name, None) is None:
                return False
            self._changed()
            return True

    def replace_from_master(self, table: dict[str, T], version: DataVersion) -> bool:
        """SlaveSynchronize's syncTopicConfig / syncSubscriptionGroupConfig: take the master's
        table and data version, and persist, when its data version differs from ours; True
        when it did."""
        with self._lock:
            if version == self.data_version:
                return False
            self.data_version = DataVersion(version.timestamp, version.counter)
            self.table = dict(table)
        self.persist()
        return True

    def _changed(self) -> None:
        self.data_version = DataVersion(int(time.time() * 1000), self.data_version.counter + 1)
        self.persist()

    def encode(self, pretty: bool = False) -> str:
        """The wrapper's text: the file's (pretty) or a GET_ALL_* answer's body. Its properties
        sorted as fastjson writes them ("dataVersion" first)."""
        with self._lock:
            order = chm_order(list(self.table), self._capacity)
            bean = {
                "dataVersion": self.data_version.to_json(),
                self._table_key: {k: self.table[k].to_json() for k in order},
            }
        if pretty:
            return to_pretty_json(bean)
        return remoting_serializable.encode(bean).decode("utf-8")

    def persist(self) -> None:
        try:
            string_to_file(self.encode(pretty=True), self.path)
        except OSError as exc:
            log.warning("could not write %s: %s", self.path, exc)
