"""BatchPreparer: from ``Message`` objects, or bodies and shared fields, to the columns the record
encoder takes (what CommitLog does to a message before it takes the put lock): validation, the
delay-level rewrite to SCHEDULE_TOPIC_XXXX, UNIQ_KEY, host fields and v6 bits, record lengths,
with a template per topic and shared fields so that a single put does no work twice."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dledger._ext import load as _load_ext
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.encode import (
    HEX4,
    MAX_PROPERTIES_BYTES,
    MAX_QUEUE_ID,
    MAX_TOPIC_BYTES,
    PreparedBatch,
    check_java_ints,
    check_message_ints,
    full_of,
    record_length,
)
from dledger.rocketmq.store.message import (
    IDS_PER_HEAD,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    RMQ_SYS_SCHEDULE_TOPIC,
    STR_BODY_PROBLEM,
    UNIQ_KEY,
    IllegalMessage,
    Message,
    MessageConst,
    MessageSysFlag,
    UniqIdGenerator,
    batch_keys,
    encode_host,
    host_v6_bits,
    joined_properties_problem,
    keys_problem,
    keys_text,
    properties_problem,
)
from dledger.rocketmq.store.topic_validator import store_topic_problem

K = _load_ext("message")
_longest_body = K.longest_body
_keyed_longest = K.keyed_longest


class BatchPreparer:
    """Turns messages into a PreparedBatch for one store (its config, store host and ids)."""

    def __init__(self, config: MessageStoreConfig, store_host: tuple[str, int]) -> None:
        self.config = config
        self.store_host = store_host
        self.store_host_raw = encode_host(store_host)
        self.delay_table = config.delay_level_table()
        self.max_delay_level = config.max_delay_level
        self.uniq = UniqIdGenerator()
        self._topic_cache: dict[str, bytes] = {}
        self._templates: dict[tuple[Any, ...], _Template] = {}
        self._put_templates: dict[tuple[Any, ...], Any] = {}

    def _delay_to_schedule(
        self, p: dict[str, str], topic: str, queue_id: int, advances: bool
    ) -> tuple[str, int, bytes] | None:
        """CommitLog.asyncPutMessage: a message with a delay level that takes a queue offset goes
        to SCHEDULE_TOPIC_XXXX (queue level - 1), the level clamped and the real destination kept
        in ``p``; returns its (topic, queue id, topic bytes), or None when it stays."""
        try:
            level = int(p[PROPERTY_DELAY] or 0)
        except ValueError:
            raise IllegalMessage(f"delay level {p.get(PROPERTY_DELAY)!r} is not an int") from None
        if level <= 0 or not advances:
            return None
        level = min(level, self.max_delay_level)
        p[PROPERTY_DELAY] = str(level)
        p[PROPERTY_REAL_TOPIC] = topic
        p[PROPERTY_REAL_QID] = str(queue_id)
        return RMQ_SYS_SCHEDULE_TOPIC, level - 1, self._topic_bytes(RMQ_SYS_SCHEDULE_TOPIC)

    def _topic_bytes(self, topic: str) -> bytes:
        raw = self._topic_cache.get(topic)
        if raw is None:
            if not isinstance(topic, str) or not topic:
                raise IllegalMessage(f"topic must be a non-empty str, got {topic!r}")
            try:
                raw = topic.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise IllegalMessage(f"topic {topic!r} is not valid UTF-8 text: {exc}") from None
            if len(raw) > MAX_TOPIC_BYTES:
                raise IllegalMessage(f"topic is {len(raw)} bytes in UTF-8, over the limit of {MAX_TOPIC_BYTES}")
            why = store_topic_problem(topic)
            if why is not None:
                raise IllegalMessage(why)
            if len(self._topic_cache) < 100_000:
                self._topic_cache[topic] = raw
        return raw

    def _check_queue(self, topic: str, queue_id: int) -> None:
        if not isinstance(queue_id, int) or queue_id < 0 or queue_id > MAX_QUEUE_ID:
            raise IllegalMessage(f"queue id {queue_id!r} is not a non-negative int32")
        nums = self.config.topic_queue_nums.get(topic)
        if nums is not None and queue_id >= nums:
            raise IllegalMessage(f"queue id {queue_id} of topic {topic!r} is unknown (the topic has {nums} queues)")

    def prepare(self, messages: Sequence[Message], check_properties: bool = True) -> PreparedBatch:
        """The batch of ``messages`` as CommitLog readies them. ``check_properties=False``: take
        properties that would not read back as they are (a member passing on what a producer
        sent, checked by the broker's rules; a delayed message passed on as it was stored)."""
        n = len(messages)
        if n == 0:
            raise IllegalMessage("no messages")
        cfg = self.config
        now = int(time.time() * 1000)
        topics: list[bytes] = []
        queue_keys: list[str] = []
        bodies: list[bytes] = []
        props: list[bytes] = []
        born_hosts: list[bytes] = []
        queue_ids: list[int] = []
        flags: list[int] = []
        sys_flags: list[int] = []
        born_ts: list[int] = []
        reconsume: list[int] = []
        prepared: list[int] = []
        advances: list[bool] = []
        store_raw = self.store_host_raw
        wait_store = True
        # Each piece of at most IDS_PER_HEAD ids under a head of its own.
        pieces = iter(self.uniq.reserve_chunks(n) if cfg.create_uniq_key else ())
        uniq_head, counter, left = "", 0, 0
        topic_bytes = self._topic_cache.get
        not_type, commit_type = MessageSysFlag.TRANSACTION_NOT_TYPE, MessageSysFlag.TRANSACTION_COMMIT_TYPE
        for m in messages:
            topic, queue_id = m.topic, m.queue_id
            traw = topic_bytes(topic) or self._topic_bytes(topic)
            if type(queue_id) is not int or queue_id < 0 or queue_id > MAX_QUEUE_ID or cfg.topic_queue_nums:
                self._check_queue(topic, queue_id)
            p = m.store_properties()
            if cfg.create_uniq_key and UNIQ_KEY not in p:
                if not left:
                    uniq_head, counter, left = next(pieces)
                p[UNIQ_KEY] = f"{uniq_head}{counter & 0xFFFF:04X}"
                counter += 1
                left -= 1
            check_message_ints(m)
            tran = m.sys_flag & MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
            if PROPERTY_DELAY in p:
                moved = self._delay_to_schedule(p, topic, queue_id, tran in (not_type, commit_type))
                if moved is not None:
                    topic, queue_id, traw = moved
            wait_store = wait_store and p.get(MessageConst.PROPERTY_WAIT_STORE_MSG_OK) != "false"
            praw = "\x02".join([f"{k}\x01{v}" for k, v in p.items() if v is not None]).encode("utf-8", "surrogatepass")
            why = joined_properties_problem(p, praw) if check_properties else None
            if why is not None:
                raise IllegalMessage(why)
            if len(praw) > MAX_PROPERTIES_BYTES:
                raise IllegalMessage(f"properties are {len(praw)} bytes, over the limit of {MAX_PROPERTIES_BYTES}")
            body = m.body
            if type(body) is not bytes:
                body = as_body(body)
            braw = encode_host(m.born_host) if m.born_host is not None else store_raw
            topics.append(traw)
            queue_keys.append(f"{topic}-{queue_id}")
            bodies.append(body)
            props.append(praw)
            born_hosts.append(braw)
            queue_ids.append(queue_id)
            flags.append(m.flag)
            sys_flags.append(host_v6_bits(m.sys_flag, braw, store_raw))
            born_ts.append(m.born_timestamp or now)
            reconsume.append(m.reconsume_times)
            prepared.append(m.prepared_offset)
            advances.append(tran == not_type or tran == commit_type)
        if n == 1:
            # One message: plain lists (numpy and kernel calls cost more than they save here).
            length = record_length(sys_flags[0], len(bodies[0]), len(topics[0]), len(props[0]))
            if length > cfg.max_message_size:
                raise IllegalMessage(
                    f"message 0 is {length} bytes as a record, over max_message_size {cfg.max_message_size}"
                )
            return PreparedBatch(
                n=1,
                topics=topics,
                queue_ids=queue_ids,
                bodies=bodies,
                properties=props,
                flags=flags,
                sys_flags=sys_flags,
                born_timestamps=born_ts,
                born_hosts=born_hosts,
                store_hosts=[store_raw],
                reconsume_times=reconsume,
                prepared_offsets=prepared,
                lengths=np.array([length], dtype=np.int64),
                advances=advances,
                queue_keys=queue_keys,
                wait_store=wait_store,
            )
        sys_arr = np.array(sys_flags, dtype=np.int32)
        lengths = np.asarray(
            K.record_lengths(
                sys_arr,
                np.array([len(b) for b in bodies], dtype=np.int32),
                np.array([len(t) for t in topics], dtype=np.int32),
                np.array([len(p) for p in props], dtype=np.int32),
            ),
            dtype=np.int64,
        )
        if int(lengths.max()) > cfg.max_message_size:
            i = int(np.flatnonzero(lengths > cfg.max_message_size)[0])
            raise IllegalMessage(
                f"message {i} is {int(lengths[i])} bytes as a record, over max_message_size {cfg.max_message_size}"
            )
        return PreparedBatch(
            n=n,
            topics=topics,
            queue_ids=np.array(queue_ids, dtype=np.int32),
            bodies=bodies,
            properties=props,
            flags=np.array(flags, dtype=np.int32),
            sys_flags=sys_arr,
            born_timestamps=np.array(born_ts, dtype=np.int64),
            born_hosts=born_hosts,
            store_hosts=[store_raw] * n,
            reconsume_times=np.array(reconsume, dtype=np.int32),
            prepared_offsets=np.array(prepared, dtype=np.int64),
            lengths=lengths,
            advances=np.array(advances, dtype=bool),
            queue_keys=queue_keys,
            wait_store=wait_store,
        )

    def put_template(self, m: Message) -> Any:
        """The single put's ``K.PutTemplate`` of ``m`` (what CommitLog does to a message before it
        takes the put lock, as ``prepare`` does for one). Cached by everything but the message's
        own KEYS value (the puts of one topic-queue check and encode the rest once), which a
        keyed template puts in place for each put (``with_keys``, in C). Not cached: a message
        whose properties hold a UNIQ_KEY or KEYS (a client's, likely different each time)."""
        props = m.properties
        pkey: tuple[Any, ...] = ()
        if props:
            if UNIQ_KEY in props or PROPERTY_KEYS in props:
                return self._put_template(m)
            pkey = tuple(props.items())
        keys = m.keys
        if keys is not None and type(keys) is not str:
            keys = keys_text(keys)  # checked, and hashable
        key = (m.topic, m.queue_id, m.tags, pkey, bool(keys), m.delay_level, m.sys_flag, m.born_host)
        try:
            tpl = self._put_templates.get(key)
        except TypeError:  # a property or tag that is no str (refused below, with why)
            return self._put_template(m)
        if tpl is None:
            tpl = self._put_template(m, bool(keys))
            if len(self._put_templates) >= 4096:
                self._put_templates.clear()
            self._put_templates[key] = tpl
        elif self.config.topic_queue_nums:
            self._check_queue(m.topic, m.queue_id)  # the table may have changed since
        if keys:
            one = tpl.with_keys(keys)
            # None: the key would not read back (a separator, a lone surrogate) or is too long.
            return one if one is not None else self._put_template(m)
        return tpl

    def _put_template(self, m: Message, keyed: bool = False) -> Any:
        """``prepare``'s rules for one message, with the UNIQ_KEY value left to the encoder (and
        with ``keyed`` the KEYS value, to ``with_keys``)."""
        cfg = self.config
        topic, queue_id = m.topic, m.queue_id
        traw = self._topic_bytes(topic)
        self._check_queue(topic, queue_id)
        p = m.store_properties()
        if keyed:
            p[PROPERTY_KEYS] = "k"  # its place in the order (checked as a key); the value is each put's
        uniq = cfg.create_uniq_key and UNIQ_KEY not in p
        if uniq:
            p[UNIQ_KEY] = ""  # its place in the order; the value is each put's
        tran = m.sys_flag & MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
        advances = tran in (MessageSysFlag.TRANSACTION_NOT_TYPE, MessageSysFlag.TRANSACTION_COMMIT_TYPE)
        if PROPERTY_DELAY in p:
            moved = self._delay_to_schedule(p, topic, queue_id, advances)
            if moved is not None:
                topic, queue_id, traw = moved
        # As prepare checks them: after the delay rewrite (REAL_TOPIC), the UNIQ_KEY place aside.
        why = properties_problem({k: v for k, v in p.items() if k != UNIQ_KEY} if uniq else p)
        if why is not None:
            raise IllegalMessage(why)
        # The properties string cut where the puts' own values go: [before KEYS value,] before
        # the UNIQ_KEY value, after it.
        pieces = [""]
        for k, v in p.items():
            if v is None:
                continue
            sep = "\x02" if len(pieces) > 1 or pieces[-1] else ""
            if (k == UNIQ_KEY and uniq) or (k == PROPERTY_KEYS and keyed):
                pieces[-1] += f"{sep}{k}\x01"
                pieces.append("")
            else:
                pieces[-1] += f"{sep}{k}\x01{v}"
        raw = [piece.encode("utf-8", "surrogatepass") for piece in pieces]
        keys_before = raw.pop(0) if keyed else None
        head, tail = (raw[0], raw[1]) if uniq else (raw[0], b"")
        store_raw = self.store_host_raw
        braw = encode_host(m.born_host) if m.born_host is not None else store_raw
        try:
            return K.PutTemplate(
                traw,
                head,
                tail,
                uniq,
                self.uniq.head_len,
                queue_id,
                host_v6_bits(m.sys_flag, braw, store_raw),
                braw,
                store_raw,
                f"{topic}-{queue_id}",
                advances,
                p.get(MessageConst.PROPERTY_WAIT_STORE_MSG_OK) != "false",
                keys_before,
            )
        except ValueError as exc:
            raise IllegalMessage(str(exc)) from None

    def _template(
        self,
        topic: str,
        queue_id: int,
        tags: str | None,
        properties: dict[str, str] | None,
        flag: int,
        sys_flag: int,
        born_host: tuple[str, int] | None,
    ) -> _Template:
        """What every batch of these arguments shares, checked once (the topic, the queue, the
        properties but the per-message ones)."""
        traw = self._topic_bytes(topic)
        self._check_queue(topic, queue_id)
        base = dict(properties or {})
        if PROPERTY_DELAY in base:
            raise IllegalMessage("a batch cannot carry a delay level (as RocketMQ's putMessages)")
        if tags:
            base["TAGS"] = tags
        why = properties_problem(base)
        if why is not None:
            raise IllegalMessage(why)
        parts = [f"{k}\x01{v}" for k, v in base.items() if v is not None]
        store_raw = self.store_host_raw
        braw = encode_host(born_host) if born_host is not None else store_raw
        sflag = host_v6_bits(sys_flag, braw, store_raw)
        tran = sys_flag & MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
        return _Template(
            traw=traw,
            queue_id=queue_id,
            flag=flag,
            parts=parts,
            fixed="\x02".join(parts).encode("utf-8", "surrogatepass"),
            uniq_stem=("\x02".join([*parts, "UNIQ_KEY\x01"])).encode("utf-8", "surrogatepass"),
            create_uniq=self.config.create_uniq_key and UNIQ_KEY not in base,
            sflag=sflag,
            braw=braw,
            sraw=store_raw,
            fixed_len=record_length(sflag, 0, len(traw), 0),
            advances=tran in (MessageSysFlag.TRANSACTION_NOT_TYPE, MessageSysFlag.TRANSACTION_COMMIT_TYPE),
            queue_key=f"{topic}-{queue_id}",
            wait_store=base.get("WAIT") != "false",
        )

    def prepare_columns(
        self,
        topic: str,
        bodies: Sequence[bytes],
        *,
        queue_id: int = 0,
        tags: str | None = None,
        keys: Sequence[str | Sequence[str] | None] | None = None,
        properties: dict[str, str] | None = None,
        flag: int = 0,
        sys_flag: int = 0,
        born_host: tuple[str, int] | None = None,
        born_timestamp: int = 0,
    ) -> PreparedBatch:
        """A batch of one topic-queue whose messages differ only in body and keys (RocketMQ's
        MessageExtBatch), prepared without a Message object per message."""
        return self.prepare_columns_at(
            topic, bodies, queue_id, tags, keys, properties, flag, sys_flag, born_host, born_timestamp
        )

    def prepare_columns_at(
        self,
        topic: str,
        bodies: Sequence[bytes],
        queue_id: int,
        tags: str | None,
        keys: Sequence[str | Sequence[str] | None] | None,
        properties: dict[str, str] | None,
        flag: int,
        sys_flag: int,
        born_host: tuple[str, int] | None,
        born_timestamp: int,
    ) -> PreparedBatch:
        """``prepare_columns`` with its arguments by position."""
        if keys is None:
            return self.prepare_uniform(
                topic, bodies, queue_id, tags, properties, flag, sys_flag, born_host, born_timestamp
            ).prepared()
        n = len(bodies)
        shared = None
        if properties and PROPERTY_KEYS in properties:  # one KEYS a message: its own, else the shared one
            properties = dict(properties)
            shared = properties.pop(PROPERTY_KEYS)
        tpl = self._batch_template(topic, bodies, queue_id, tags, properties, flag, sys_flag, born_host)
        each = batch_keys(keys, n)
        if shared:
            each = [k or shared for k in each]
        why = keys_problem(each)
        if why is not None:
            raise IllegalMessage(why)
        if tpl.create_uniq:
            props = []
            at = 0
            for head, first, k in self.uniq.reserve_chunks(n):
                props += _keyed_properties(tpl, each[at : at + k], head, first)
                at += k
        else:
            props = _keyed_properties(tpl, each, None, 0)
        body_list = bodies if isinstance(bodies, list) else list(bodies)
        _longest(body_list)  # the bodies' type: len() of a str would pass
        lengths = _keyed_lengths(body_list, props, tpl.fixed_len)
        longest = int(lengths.max())
        if longest > self.config.max_message_size:
            raise IllegalMessage(f"a message is over max_message_size {self.config.max_message_size} as a record")
        return _columns(tpl, body_list, props, None, -1, lengths, longest, born_timestamp or int(time.time() * 1000))

    def prepare_keyed(
        self,
        topic: str,
        bodies: Sequence[bytes],
        queue_id: int,
        tags: str | None,
        keys: Sequence[str | Sequence[str] | None],
        properties: dict[str, str] | None,
        flag: int,
        sys_flag: int,
        born_host: tuple[str, int] | None,
        born_timestamp: int,
    ) -> UniformBatch | PreparedBatch:
        """``prepare_columns_at`` of a batch with a key per body. When the keys are a list of
        str (or None) that read back as they are, the batch is a ``UniformBatch`` whose records'
        KEYS the encoder appends (checked and measured in C, no properties string made per
        message in Python); otherwise (and for more messages than one UNIQ_KEY head names) the
        general path, which says why it refuses what it refuses."""
        n = len(bodies)
        if type(keys) is list and n <= IDS_PER_HEAD and not (properties and PROPERTY_KEYS in properties):
            tpl = self._batch_template(topic, bodies, queue_id, tags, properties, flag, sys_flag, born_host)
            # KEYS follows the batch's properties, the UNIQ_KEY included (as _keyed_properties).
            prefix = b"\x02KEYS\x01" if tpl.create_uniq or tpl.fixed else b"KEYS\x01"
            try:
                sizes = _keyed_longest(bodies, keys, len(prefix))
            except TypeError as exc:  # a body's type (len() of a str would pass)
                raise IllegalMessage(str(exc)) from None
            if sizes is not None:
                return self._uniform(tpl, bodies, n, born_timestamp, keys, prefix, sizes[0], sizes[1])
        return self.prepare_columns_at(
            topic, bodies, queue_id, tags, keys, properties, flag, sys_flag, born_host, born_timestamp
        )

    def prepare_uniform(
        self,
        topic: str,
        bodies: Sequence[bytes],
        queue_id: int,
        tags: str | None,
        properties: dict[str, str] | None,
        flag: int,
        sys_flag: int,
        born_host: tuple[str, int] | None,
        born_timestamp: int,
    ) -> UniformBatch:
        """A batch without keys, checked (RocketMQ's MessageExtBatch: every field but the body
        shared): what the store's put_batch hands the commit log, which encodes it with one
        kernel call under its lock. Arguments by position (keywords cost a batch of small
        messages more than the rest of the call)."""
        tpl = self._batch_template(topic, bodies, queue_id, tags, properties, flag, sys_flag, born_host)
        return self._uniform(tpl, bodies, len(bodies), born_timestamp, None, b"", -1, 0)

    def _uniform(
        self,
        tpl: _Template,
        bodies: Sequence[bytes],
        n: int,
        born_timestamp: int,
        keys: list[str | None] | None,
        keys_prefix: bytes,
        longest_keyed: int,
        longest_keys: int,
    ) -> UniformBatch:
        """The UniformBatch of template ``tpl``: its UNIQ_KEYs reserved, its sizes checked
        (``longest_keyed``: the longest body with its KEYS pair, ``longest_keys`` the longest
        pair, when there are ``keys``)."""
        if tpl.create_uniq:
            head, first, now = self.uniq.reserve(n)
            # Left to the encoder: the stem, then each message's 4 counter digits. The head is
            # the same string for every put within a millisecond: its stem is kept.
            last = tpl.last_stem
            if last[0] is head:
                stem = last[1]
            else:
                stem = tpl.uniq_stem + head.encode()
                tpl.last_stem = (head, stem)
            plen = len(stem) + 4
        else:
            stem = tpl.fixed
            first = -1
            plen = len(stem)
            now = 0
        if plen + longest_keys > MAX_PROPERTIES_BYTES:
            raise IllegalMessage(f"properties over the limit of {MAX_PROPERTIES_BYTES} bytes")
        body_list = bodies if isinstance(bodies, list) else list(bodies)
        # calMsgLength, with everything but the body (and KEYS) the same for every message
        longest = (_longest(body_list) if keys is None else longest_keyed) + plen + tpl.fixed_len
        if longest > self.config.max_message_size:
            raise IllegalMessage(f"a message is over max_message_size {self.config.max_message_size} as a record")
        born = born_timestamp or now or int(time.time() * 1000)
        return UniformBatch(tpl, body_list, n, stem, first, born, longest, keys, keys_prefix)

    def _batch_template(
        self,
        topic: str,
        bodies: Sequence[bytes],
        queue_id: int,
        tags: str | None,
        properties: dict[str, str] | None,
        flag: int,
        sys_flag: int,
        born_host: tuple[str, int] | None,
    ) -> _Template:
        """The template of a batch's arguments, made and checked once (cached), and the batch
        is not empty."""
        if len(bodies) == 0:
            raise IllegalMessage("no messages")
        if not (  # the quick test (a float or bool would compare, and be stored truncated)
            type(flag) is int
            and type(sys_flag) is int
            and -(1 << 31) <= flag < 1 << 31
            and -(1 << 31) <= sys_flag < 1 << 31
        ):
            check_java_ints(("flag", flag, 32), ("sys flag", sys_flag, 32))
        tkey = (topic, queue_id, tags, tuple(properties.items()) if properties else (), flag, sys_flag, born_host)
        tpl = self._templates.get(tkey)
        if tpl is None:
            tpl = self._template(topic, queue_id, tags, properties, flag, sys_flag, born_host)
            if len(self._templates) >= 4096:
                self._templates.clear()
            self._templates[tkey] = tpl
        elif self.config.topic_queue_nums:
            self._check_queue(topic, queue_id)  # the table may have changed since
        return tpl


class UniformBatch:
    """A batch of one template (``BatchPreparer.prepare_uniform``): the bodies, their properties
    as one stem (each message's UNIQ_KEY counter digits, when ``uniq_first >= 0``, appended by
    the encoder) and the born time. ``encode`` makes the records with one kernel call;
    ``prepared`` is the same batch as columns, for the commit logs' general path. With ``keys``
    (checked: str or None, one per body) each record's properties end with ``keys_prefix`` and
    its key, when it has one."""

    __slots__ = ("bodies", "born_ts", "keys", "keys_prefix", "longest", "n", "stem", "tpl", "uniq_first")

    def __init__(
        self,
        tpl: _Template,
        bodies: list[bytes],
        n: int,
        stem: bytes,
        uniq_first: int,
        born_ts: int,
        longest: int,
        keys: list[str | None] | None = None,
        keys_prefix: bytes = b"",
    ) -> None:
        self.tpl = tpl
        self.bodies = bodies
        self.n = n
        self.stem = stem
        self.uniq_first = uniq_first
        self.born_ts = born_ts
        self.longest = longest
        self.keys = keys
        self.keys_prefix = keys_prefix

    @property
    def wait_store(self) -> bool:
        return self.tpl.wait_store

    def encode(self, queue_offset: int, phys_offset: int, store_timestamp: int, gap: int = 0) -> tuple[Any, np.ndarray]:
        """The records, queue offsets from ``queue_offset`` (when the template's messages take
        one) and physical offsets from ``phys_offset``: ``(buffer, offsets)`` as
        ``K.encode_uniform`` (``gap`` bytes before each record: room for a DLedger entry header)."""
        t = self.tpl
        return K.encode_uniform(
            self.bodies,
            t.traw,
            self.stem,
            self.uniq_first,
            t.queue_id,
            t.flag,
            t.sflag,
            self.born_ts,
            t.braw,
            store_timestamp,
            t.sraw,
            queue_offset if t.advances else 0,
            t.advances,
            phys_offset,
            gap,
            self.keys,
            self.keys_prefix,
        )

    def record_lengths(self) -> np.ndarray:
        if self.keys is not None:
            return _keyed_lengths(self.bodies, self._keyed_properties(), self.tpl.fixed_len)
        plen = len(self.stem) + (4 if self.uniq_first >= 0 else 0)
        lengths: np.ndarray = np.fromiter(map(len, self.bodies), dtype=np.int64, count=self.n) + (
            plen + self.tpl.fixed_len
        )
        return lengths

    def _keyed_properties(self) -> list[bytes]:
        """Each record's properties, as the encoder writes them with ``keys`` (what
        ``_keyed_properties`` makes: the general path's, byte for byte)."""
        stem, first, prefix = self.stem, self.uniq_first, self.keys_prefix
        assert self.keys is not None
        return [
            b"".join(
                (
                    stem,
                    HEX4[(first + i) & 0xFFFF] if first >= 0 else b"",
                    prefix + k.encode() if k else b"",
                )
            )
            for i, k in enumerate(self.keys)
        ]

    def prepared(self) -> PreparedBatch:
        if self.keys is not None:
            props = self._keyed_properties()
            lengths = _keyed_lengths(self.bodies, props, self.tpl.fixed_len)
            return _columns(self.tpl, self.bodies, props, None, -1, lengths, self.longest, self.born_ts)
        return _columns(self.tpl, self.bodies, [], self.stem, self.uniq_first, None, self.longest, self.born_ts)


def _columns(
    tpl: _Template,
    bodies: list[bytes],
    props: list[bytes],
    stem: bytes | None,
    uniq_first: int,
    lengths: np.ndarray | None,
    longest: int,
    born_ts: int,
) -> PreparedBatch:
    """A batch of template ``tpl`` as columns. The shared columns hold one value repeated (the
    uniform encoder reads the first), made once per batch size; the lists among them are
    shared between batches too (nothing writes into a batch's columns)."""
    n = len(bodies)
    cols = tpl.columns.get(n)
    if cols is None:
        cols = (
            full_of(n, tpl.queue_id, np.int32),
            full_of(n, tpl.flag, np.int32),
            full_of(n, tpl.sflag, np.int32),
            full_of(n, 0, np.int32),
            full_of(n, 0, np.int64),
            full_of(n, tpl.advances, np.bool_),
            [tpl.traw] * n,
            [tpl.braw] * n,
            [tpl.sraw] * n,
            [tpl.queue_key] * n,
        )
        if len(tpl.columns) < 64:
            tpl.columns[n] = cols
    # Positional: a batch of small messages pays for every keyword here.
    return PreparedBatch(
        n,
        cols[6],
        cols[0],
        bodies,
        props,
        cols[1],
        cols[2],
        [born_ts] * n,
        cols[7],
        cols[8],
        cols[3],
        cols[4],
        lengths,
        cols[5],
        cols[9],
        tpl.wait_store,
        True,
        stem,
        uniq_first,
        longest,
        tpl.fixed_len,
        (tpl.traw, tpl.queue_id, tpl.flag, tpl.sflag, born_ts, tpl.braw, tpl.sraw, tpl.advances),
    )


@dataclass(slots=True)
class _Template:
    """What the batches of one (topic, queue, tags, properties, flag, sys flag, born host) share."""

    traw: bytes
    queue_id: int
    flag: int
    parts: list[str]
    fixed: bytes
    uniq_stem: bytes
    create_uniq: bool
    sflag: int
    braw: bytes
    sraw: bytes
    fixed_len: int
    advances: bool
    queue_key: str
    wait_store: bool
    # The shared columns of a batch, by batch size (read-only arrays, and lists nobody changes).
    columns: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    # The UNIQ_KEY head of the last batch and its properties stem.
    last_stem: tuple[str, bytes] = ("", b"")


def _keyed_properties(tpl: _Template, keys: Sequence[str | None], head: str | None, first: int) -> list[bytes]:
    """Each message's properties: the template's, then (with ``head``) its UNIQ_KEY, then its KEYS."""
    parts = tpl.parts
    if head is not None:
        joint = "\x02".join([*parts, f"UNIQ_KEY\x01{head}"])
        return [
            (f"{joint}{(first + i) & 0xFFFF:04X}\x02KEYS\x01{k}" if k else f"{joint}{(first + i) & 0xFFFF:04X}").encode(
                "utf-8", "surrogatepass"
            )
            for i, k in enumerate(keys)
        ]
    return [("\x02".join([*parts, f"KEYS\x01{k}"])).encode("utf-8", "surrogatepass") if k else tpl.fixed for k in keys]


def _longest(bodies: list[bytes]) -> int:
    try:
        return int(_longest_body(bodies))
    except TypeError as exc:
        raise IllegalMessage(str(exc)) from None


def as_body(body: Any) -> bytes:
    """A message body as bytes; IllegalMessage for what is not bytes-like (a str: encode it;
    ``bytes(5)`` would be five zero bytes)."""
    if isinstance(body, str):
        raise IllegalMessage(STR_BODY_PROBLEM)
    try:
        return bytes(memoryview(body))
    except TypeError:
        raise IllegalMessage(f"a message body must be bytes-like, not {type(body).__name__}") from None


def _keyed_lengths(bodies: list[bytes], props: list[bytes], fixed_len: int) -> np.ndarray:
    """calMsgLength of each message of a batch whose properties are one per message."""
    n = len(bodies)
    plens = np.fromiter(map(len, props), dtype=np.int64, count=n)
    if int(plens.max()) > MAX_PROPERTIES_BYTES:
        raise IllegalMessage(f"properties over the limit of {MAX_PROPERTIES_BYTES} bytes")
    lengths: np.ndarray = np.fromiter(map(len, bodies), dtype=np.int64, count=n) + plens + fixed_len
    return lengths
