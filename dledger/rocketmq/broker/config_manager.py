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
from pathlib import Path
from typing import Any

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
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
