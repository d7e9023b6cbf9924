"""Text listings of a message store, in the exact format of the RocketMQ fixtures' ``expected/``.

* ``messages.tsv``: one line per message in commit-log order (20 columns, see MESSAGES_HEADER);
* ``consumequeue.tsv``: every unit of every consume queue, topics then queue ids in order;
* ``index.tsv``: a key, its topic and the sorted physical offsets a key query returns.

Text columns are escaped: ``\\\\``, ``\\t``, ``\\n``, ``\\r``; other C0 controls and DEL as ``\\xNN``
(so RocketMQ's property separators 0x01/0x02 read ``\\x01``/``\\x02``); everything else verbatim.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

from dledger.rocketmq.store.consume_queue_table import ConsumeQueueTable
from dledger.rocketmq.store.message import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    create_message_id,
    decode_properties,
    encode_host,
    format_host,
)

MESSAGES_HEADER = (
    "#physicalOffset\tsize\ttopic\tqueueId\tqueueOffset\tsysFlag\tbornTimestamp\tstoreTimestamp\t"
    "bornHost\tstoreHost\treconsumeTimes\tpreparedTransactionOffset\tbodyCRC\tbodySha256_16\t"
    "bodyLength\ttags\tkeys\tproperties\tmsgId\tflag"
)
CONSUME_QUEUE_HEADER = "#topic\tqueueId\tqueueOffset\tcommitLogOffset\tsize\ttagsCode"
INDEX_HEADER = "#key\ttopic\tphysicalOffsets(sorted, comma-separated; queryMessage(topic,key,64,0,Long.MAX_VALUE))"

_SPECIAL = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}
_ESCAPE_RE = re.compile(r"[\x00-\x1f\x7f\\]")
_UNESCAPE_RE = re.compile(r"\\(x[0-9a-fA-F]{2}|[\\tnr])")
_UNESCAPED = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}


def _escape_char(m: re.Match[str]) -> str:
    c = m.group(0)
    return _SPECIAL.get(c) or f"\\x{ord(c):02x}"


def escape(text: str | None) -> str:
    """The fixtures' escaping of a text column (None is an empty field)."""
    if not text:
        return ""
    return _ESCAPE_RE.sub(_escape_char, text)


def unescape(text: str) -> str:
    """Inverse of ``escape``."""
    return _UNESCAPE_RE.sub(lambda m: _UNESCAPED.get(m.group(1)) or chr(int(m.group(1)[1:], 16)), text)


def _host(host: Any) -> str:
    return format_host(host) if host else ""


def message_line(m: Any) -> str:
    """One ``messages.tsv`` line (no newline) for a stored message (a ``MessageExt``: the body is
    the stored body, not decompressed; ``properties_string`` the raw stored properties)."""
    body = bytes(m.body or b"")
    props_string = m.properties_string or ""
    props = decode_properties(props_string)
    msg_id = m.msg_id or (create_message_id(encode_host(m.store_host), m.phys_offset) if m.store_host else "")
    return "\t".join(
        (
            str(m.phys_offset),
            str(m.size),
            escape(m.topic),
            str(m.queue_id),
            str(m.queue_offset),
            str(m.sys_flag),
            str(m.born_timestamp),
            str(m.store_timestamp),
            _host(m.born_host),
            _host(m.store_host),
            str(m.reconsume_times),
            str(m.prepared_offset),
            str(m.body_crc),
            hashlib.sha256(body).hexdigest()[:16],
            str(len(body)),
            escape(props.get(PROPERTY_TAGS)),
            escape(props.get(PROPERTY_KEYS)),
            escape(props_string),
            msg_id,
            str(m.flag),
        )
    )


def message_lines(messages: Iterable[Any], header: bool = True) -> Iterator[str]:
    """``messages.tsv`` lines (header first) for messages in commit-log order."""
    if header:
        yield MESSAGES_HEADER
    for m in messages:
        yield message_line(m)


def consume_queue_lines(table: ConsumeQueueTable, header: bool = True) -> Iterator[str]:
    """``consumequeue.tsv`` lines: each queue's units from its minimum to its end, topics in
    order, then queue ids in numeric order."""
    if header:
        yield CONSUME_QUEUE_HEADER
    for topic, queue_id, cq in table:
        t = escape(topic)
        for offset, phys, size, tags in cq.iter_units():
            yield f"{t}\t{queue_id}\t{offset}\t{phys}\t{size}\t{tags}"


def index_line(key: str, topic: str, phys_offsets: Iterable[int]) -> str:
    """One ``index.tsv`` line: key, topic, sorted offsets comma-separated (duplicates kept)."""
    return f"{escape(key)}\t{escape(topic)}\t{','.join(str(p) for p in sorted(phys_offsets))}"


def sorted_offsets(phys_offsets: Iterable[int]) -> str:
    """The third column of ``index.tsv``: what ``dledger mq query --sorted`` prints."""
    return ",".join(str(p) for p in sorted(phys_offsets))


def write_lines(lines: Iterable[str], out: TextIO) -> int:
    n = 0
    for line in lines:
        out.write(line)
        out.write("\n")
        n += 1
    return n
