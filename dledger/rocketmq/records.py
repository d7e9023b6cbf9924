"""Stored records to ``MessageExt`` objects (MessageDecoder.decode over scan columns)."""

from __future__ import annotations

from typing import Any

import numpy as np

from dledger._ext import load as _load_ext
from dledger.rocketmq.message import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    MessageExt,
    create_message_id,
    decode_host,
    decode_properties,
)

K = _load_ext("message")


def messages_from_columns(buf: Any, cols: dict[str, np.ndarray], rows: Any = None) -> list[MessageExt]:
    """One MessageExt per scanned record (``rows`` selects some). Bodies are the stored bytes
    (compressed ones stay compressed: see ``MessageExt.sys_flag``)."""
    mv = memoryview(buf).cast("B")
    try:
        idx = range(len(cols["size"])) if rows is None else rows
        c = {k: v.tolist() for k, v in cols.items()}
        out: list[MessageExt] = []
        for i in idx:
            sys_flag = c["sys_flag"][i]
            bo, so = c["born_host_off"][i], c["store_host_off"][i]
            born_raw = bytes(mv[bo : bo + (20 if sys_flag & 16 else 8)])
            store_raw = bytes(mv[so : so + (20 if sys_flag & 32 else 8)])
            to, po, bdo = c["topic_off"][i], c["props_off"][i], c["body_off"][i]
            props_string = bytes(mv[po : po + c["props_len"][i]]).decode("utf-8", "replace")
            props = decode_properties(props_string)
            phys = c["phys_offset"][i]
            delay = props.get("DELAY")
            out.append(
                MessageExt(
                    topic=bytes(mv[to : to + c["topic_len"][i]]).decode("utf-8", "replace"),
                    body=bytes(mv[bdo : bdo + c["body_len"][i]]),
                    queue_id=c["queue_id"][i],
                    flag=c["flag"][i],
                    tags=props.get(PROPERTY_TAGS),
                    keys=props.get(PROPERTY_KEYS),
                    properties=props,
                    delay_level=int(delay) if delay and delay.isdigit() else 0,
                    sys_flag=sys_flag,
                    born_timestamp=c["born_timestamp"][i],
                    born_host=decode_host(born_raw),
                    reconsume_times=c["reconsume_times"][i],
                    prepared_offset=c["prepared_offset"][i],
                    queue_offset=c["queue_offset"][i],
                    phys_offset=phys,
                    size=c["size"][i],
                    store_timestamp=c["store_timestamp"][i],
                    store_host=decode_host(store_raw),
                    body_crc=c["body_crc"][i],
                    msg_id=create_message_id(store_raw, phys),
                    properties_string=props_string,
                    stored_phys_offset=c["stored_phys_offset"][i],
                )
            )
        return out
    finally:
        mv.release()


def decode_record(data: bytes | memoryview, phys_offset: int) -> MessageExt | None:
    """The message of one record's bytes (None if they are not a whole record)."""
    f = K.record_fields(data)
    if f is None:
        return None
    (size, body_crc, queue_id, flag, queue_offset, stored_phys, sys_flag, born_ts, bo, store_ts, so,
     reconsume, prepared, body_off, body_len, topic_off, topic_len, props_off, props_len) = f  # fmt: skip
    mv = memoryview(data).cast("B")
    try:
        born_raw = bytes(mv[bo : bo + (20 if sys_flag & 16 else 8)])
        store_raw = bytes(mv[so : so + (20 if sys_flag & 32 else 8)])
        props_string = bytes(mv[props_off : props_off + props_len]).decode("utf-8", "replace")
        props = decode_properties(props_string)
        delay = props.get("DELAY")
        return MessageExt(
            topic=bytes(mv[topic_off : topic_off + topic_len]).decode("utf-8", "replace"),
            body=bytes(mv[body_off : body_off + body_len]),
            queue_id=queue_id,
            flag=flag,
            tags=props.get(PROPERTY_TAGS),
            keys=props.get(PROPERTY_KEYS),
            properties=props,
            delay_level=int(delay) if delay and delay.isdigit() else 0,
            sys_flag=sys_flag,
            born_timestamp=born_ts,
            born_host=decode_host(born_raw),
            reconsume_times=reconsume,
            prepared_offset=prepared,
            queue_offset=queue_offset,
            phys_offset=phys_offset,
            size=size,
            store_timestamp=store_ts,
            store_host=decode_host(store_raw),
            body_crc=body_crc,
            msg_id=create_message_id(store_raw, phys_offset),
            properties_string=props_string,
            stored_phys_offset=stored_phys,
        )
    finally:
        mv.release()
