"""ScheduleMessageService's persisted progress: ``config/delayOffset.json`` in Java's format.

``{"offsetTable":{level:offset,...}}`` as fastjson pretty-prints it (the levels on one line),
each level's next schedule-queue offset to deliver (the queue is level - 1). A Java broker
restarted on the directory reads it and delivers nothing twice; one written by Java is read here
the same way. Written as ConfigManager.persist writes: ``.tmp``, the previous file to ``.bak``,
rename.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from dledger.rocketmq.store.consumer_offset import _write_synced, decode_offset_object, encode_int_map

log = logging.getLogger(__name__)

FILE_NAME = "delayOffset.json"


def encode_delay_offsets(table: dict[int, int]) -> str:
    """ScheduleMessageService.encode(true)."""
    return '{\n\t"offsetTable":' + encode_int_map(table, 1) + "\n}"


def decode_delay_offsets(text: str) -> dict[int, int]:
    return {int(level): int(offset) for level, offset in decode_offset_object(text).items()}


def load_delay_offsets(config_dir: Path) -> dict[int, int]:
    """The file, else its ``.bak``; {} when neither can be read."""
    for path in (config_dir / FILE_NAME, config_dir / (FILE_NAME + ".bak")):
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        if not text.strip():
            continue
        try:
            return decode_delay_offsets(text)
        except (ValueError, TypeError) as exc:
            log.warning("%s cannot be read (%s)", path, exc)
    return {}


def persist_delay_offsets(config_dir: Path, table: dict[int, int]) -> None:
    config_dir.mkdir(parents=True, exist_ok=True)
    path = config_dir / FILE_NAME
    tmp = path.with_name(FILE_NAME + ".tmp")
    _write_synced(tmp, encode_delay_offsets(table))
    try:
        previous = path.read_bytes()
    except FileNotFoundError:
        previous = None
    if previous is not None:
        _write_synced(path.with_name(FILE_NAME + ".bak"), previous)
    os.replace(tmp, path)
