"""``dledger mq ...``: produce to, consume from, query and list a RocketMQ message store.

``DIR`` is a store root (RocketMQ's storePathRootDir). Its mode comes from what is there:
``commitlog/`` is a classic store, ``dledger-<id>/`` a DLedger one. Every command but ``produce``
opens the store read-only: it never writes a byte and never takes the ``lock`` file, so it can
run beside a live store. Sizes (commit-log files, consume-queue files, index slots) are read from
the files already there.

With ``--peers P [--group G]`` instead of ``DIR``, ``produce``, ``consume``, ``query`` and ``stats``
talk to a running message-store group (``dledger server --message-store``) over the network.

``add_mq_commands(subparsers)`` adds the ``mq`` command to the ``dledger`` parser; ``main(argv)``
runs it on its own (``python -m dledger.rocketmq.cli produce ...``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import queue
import re
import sys
import threading
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dledger.client_options import add_security_options
from dledger.errors import DLedgerError

log = logging.getLogger(__name__)


class MqCliError(Exception):
    """A problem the user can fix; printed as one line, exit status 1."""


# -- the store --------------------------------------------------------------------------------


def detect_mode(root: Path) -> tuple[str, str | None]:
    """``("classic", None)`` or ``("dledger", self_id)`` from what the store root holds."""
    if not root.exists():
        raise MqCliError(f"{root}: no such directory")
    if not root.is_dir():
        raise MqCliError(f"{root}: not a directory")
    nodes = sorted(p.name[len("dledger-") :] for p in root.iterdir() if p.is_dir() and p.name.startswith("dledger-"))
    if nodes:
        if len(nodes) > 1:
            raise MqCliError(f"{root}: several DLedger members ({', '.join(nodes)}); give one member's store root")
        return "dledger", nodes[0]
    if (root / "commitlog").is_dir():
        return "classic", None
    raise MqCliError(f"{root}: not a RocketMQ store (no commitlog/ or dledger-<id>/)")


def _file_size(directory: Path) -> int | None:
    if not directory.is_dir():
        return None
    for p in sorted(directory.iterdir()):
        if p.is_file() and p.name.isdigit():
            return p.stat().st_size
    return None


def store_config(root: Path, mode: str, self_id: str | None) -> Any:
    """A MessageStoreConfig for ``root`` whose sizes are those of the files already there."""
    from dledger.rocketmq.store.config import MessageStoreConfig
    from dledger.rocketmq.store.index_file import geometry_of_size, index_file_size

    values: dict[str, Any] = {"store_path_root_dir": str(root)}
    if mode == "dledger":
        values["enable_dledger_commit_log"] = True
        values["dledger_self_id"] = self_id or "n0"
        values["dledger_peers"] = f"{self_id or 'n0'}-127.0.0.1:40911"
        data_size = _file_size(root / f"dledger-{self_id}" / "data")
    else:
        data_size = _file_size(root / "commitlog")
    if data_size:
        values["mapped_file_size_commit_log"] = data_size
    cq_root = root / "consumequeue"
    if cq_root.is_dir():
        for qdir in (q for t in sorted(cq_root.iterdir()) if t.is_dir() for q in sorted(t.iterdir())):
            size = _file_size(qdir)
            if size:
                values["mapped_file_size_consume_queue"] = size
                break
    index_sizes = (
        [p.stat().st_size for p in sorted((root / "index").glob("[0-9]*"))] if (root / "index").is_dir() else []
    )
    if index_sizes and index_sizes[-1] != index_file_size(5_000_000, 20_000_000):
        try:
            slots, items = geometry_of_size(index_sizes[-1])
            values["max_hash_slot_num"], values["max_index_num"] = slots, items
        except ValueError:
            pass
    return MessageStoreConfig(**values)


@contextmanager
def open_store(root: Path, *, readonly: bool = True, create_mode: str | None = None) -> Iterator[Any]:
    """The MessageStore at ``root`` (read-only unless asked). ``create_mode`` lets ``produce``
    start a new store in a missing or empty directory."""
    from dledger.rocketmq.store.message_store import MessageStore

    if create_mode is not None and (not root.exists() or (root.is_dir() and not any(root.iterdir()))):
        mode, self_id = create_mode, ("n0" if create_mode == "dledger" else None)
        root.mkdir(parents=True, exist_ok=True)
    else:
        mode, self_id = detect_mode(root)
    store = MessageStore(root, store_config(root, mode, self_id), readonly=readonly)
    try:
        yield store
    finally:
        store.close()


# -- commands ---------------------------------------------------------------------------------


def _where(args: argparse.Namespace) -> bool:
    """True for a group (--peers), False for a directory; exactly one must be given."""
    namesrv = getattr(args, "namesrv", None)
    if bool(args.peers) + bool(args.dir) + bool(namesrv) != 1:
        also = " or --namesrv of RocketMQ name servers" if hasattr(args, "namesrv") else ""
        raise MqCliError(f"give a store root DIR or --peers of a running group{also} (one of them)")
    return bool(args.peers)


def _remote_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    from dledger.client_options import client_kwargs

    return client_kwargs(args)


def cmd_produce(args: argparse.Namespace) -> int:
    from dledger.rocketmq.store.message import Message

    remote = _where(args)
    # (input line number, body); None with --data. A line ends at \n or \r\n; empty lines
    # are no messages but keep their numbers, which refusals name.
    # Read as they come (a `tail -f` upstream is sent as it writes), not all before the first.
    source: Iterator[tuple[int | None, bytes]]
    if args.stdin:
        source = ((n, b) for n, line in enumerate(_stdin_lines(), 1) if (b := _line_body(line)))
    else:
        source = iter([(None, args.data.encode("utf-8"))])
    lines = _LineReader(source)
    if args.namesrv:
        return _produce_namesrv(args, lines)
    if remote:
        return _produce_remote(args, lines)
    if args.delay_level:
        raise MqCliError(
            "--delay-level needs --peers: a group's leader delivers delayed messages, a store alone does not"
        )
    if args.queue is None:
        args.queue = 0
    failed = 0
    with open_store(Path(args.dir), readonly=False, create_mode=args.mode) as store:
        for line, body in lines:
            msg = Message(
                topic=args.topic, body=body, queue_id=args.queue, tags=args.tags or None, keys=args.keys or None
            )
            result = store.put_message(msg)
            status = getattr(result.status, "name", str(result.status))
            if not result.ok:
                failed += 1
                _refusal(line, status, getattr(result, "reason", ""))
                continue
            _print_stored(args, status, result.msg_id, args.queue, result.queue_offset, phys_offset=result.phys_offset)
            sys.stdout.flush()
        store.flush()
    return 1 if failed else 0


def _stdin_lines() -> Iterator[bytes]:
    """Standard input's lines, through a reader of our own on a copy of its descriptor: the
    reader thread must not hold sys.stdin.buffer's lock, or the interpreter's shutdown after
    Ctrl-C aborts on it (Fatal Python error: _enter_buffered_busy)."""
    with open(os.dup(sys.stdin.fileno()), "rb") as lines:
        yield from lines


def _print_stored(
    args: argparse.Namespace, status: str, msg_id: str, queue_id: int, queue_offset: int, **last: object
) -> None:
    """One stored message: a TSV line (columns in ``produce --help``) or, with --json, an object."""
    if args.json:
        print(
            json.dumps({"status": status, "msg_id": msg_id, "queue_id": queue_id, "queue_offset": queue_offset, **last})
        )
    else:
        print(f"{status}\t{msg_id}\t{queue_id}\t{queue_offset}\t{next(iter(last.values()))}")


def _line_body(line: bytes) -> bytes:
    if line.endswith(b"\n"):
        line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
    return line


def _refusal(line: int | None, status: str, reason: str) -> None:
    where = f"line {line}: " if line is not None else ""
    print(f"dledger mq produce: {where}{status}" + (f" ({reason})" if reason else ""), file=sys.stderr)


def _produce_remote(args: argparse.Namespace, lines: _LineReader) -> int:
    """One line per acknowledged message (status, msg id, queue id, queue offset, offset msg id);
    lines go in batches of ``--batch``, each batch to one queue (``--queue``, else round-robin),
    as they are read. A batch refused as MESSAGE_ILLEGAL is sent again line by line, so that
    only the lines at fault are left out (and named); delayed messages, and those to a retry
    topic, go one by one (MessageBatch carries neither)."""
    from dledger.rocketmq.client.producer import Producer
    from dledger.rocketmq.client.validators import RETRY_GROUP_TOPIC_PREFIX
    from dledger.rocketmq.store.message import Message

    failed = 0
    one_by_one = args.delay_level or args.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
    step = 1 if one_by_one else max(args.batch, 1)

    def message(body: bytes) -> Message:
        return Message(
            topic=args.topic, body=body, tags=args.tags or None, keys=args.keys or None, delay_level=args.delay_level
        )

    with Producer(args.peers, args.group, **_remote_kwargs(args)) as producer:
        while chunk := lines.take(step):
            msgs = [message(b) for _n, b in chunk]
            if len(msgs) > 1:
                results = list(producer.send_batch(msgs, args.queue))
            else:
                results = [producer.send(msgs[0], args.queue)]
            if len(msgs) > 1 and all(r.status == "MESSAGE_ILLEGAL" for r in results):
                results = [producer.send(m, args.queue) for m in msgs]
            for (line, _body), r in zip(chunk, results, strict=True):
                if not r.ok:
                    failed += 1
                    _refusal(line, r.status, r.reason)
                    continue
                _print_stored(args, r.status, r.msg_id, r.queue_id, r.queue_offset, offset_msg_id=r.offset_msg_id)
            sys.stdout.flush()  # each batch's lines as it is acknowledged
    return 1 if failed else 0


def _produce_namesrv(args: argparse.Namespace, lines: _LineReader) -> int:
    """As ``_produce_remote``, over RocketMQ's remoting protocol: the topic's route from the
    name servers (the default topic's when it is new), batches to the masters' queues in turn."""
    from dledger.rocketmq.client.mq_client_api import MQClientAPI
    from dledger.rocketmq.remoting.response_code import ResponseCode
    from dledger.rocketmq.store.message import UNIQ_KEY, UniqIdGenerator, encode_properties

    gen = UniqIdGenerator()
    props: dict[str, str] = {"WAIT": "true"}
    if args.tags:
        props["TAGS"] = args.tags
    if args.keys:
        props["KEYS"] = args.keys
    if args.delay_level:
        props["DELAY"] = str(args.delay_level)

    async def run() -> int:
        failed = 0
        api = MQClientAPI(_namesrv_addrs(args), args.timeout)
        try:
            queues = await api.write_queues(args.topic)
            if args.queue is not None:
                queues = [q for q in queues if q[1] == args.queue][:1]
            if not queues:
                raise MqCliError(f"no name server has a writable queue for {args.topic!r} (nor TBW102)")
            turn = 0
            step = 1 if args.delay_level else max(args.batch, 1)
            while chunk := await asyncio.to_thread(lines.take, step):
                addr, qid = queues[turn % len(queues)]
                turn += 1
                uniq = [gen.create() for _ in chunk]
                each = [encode_properties({**props, UNIQ_KEY: u}) for u in uniq]
                r = await api.send(addr, "dledger-cli", args.topic, qid, [b for _n, b in chunk], each)
                if r.code != ResponseCode.SUCCESS:
                    failed += len(chunk)
                    name = ResponseCode(r.code).name if r.code in ResponseCode._value2member_map_ else str(r.code)
                    for line, _b in chunk:
                        _refusal(line, name, r.remark or "")
                    continue
                ext = r.ext_fields or {}
                first = int(ext.get("queueOffset", "0"))
                ids = ext.get("msgId", "").split(",")
                for k, u in enumerate(uniq):
                    print(f"SEND_OK\t{u}\t{ext.get('queueId', qid)}\t{first + k}\t{ids[k] if k < len(ids) else ''}")
                sys.stdout.flush()
        finally:
            await api.close()
        return 1 if failed else 0

    return asyncio.run(run())


def _namesrv_addrs(args: argparse.Namespace) -> list[str]:
    addrs = [a.strip() for a in str(args.namesrv).split(";") if a.strip()]
    if not addrs:
        raise MqCliError(f"--namesrv {args.namesrv!r}: want host:port[;host:port...]")
    return addrs


def _consume_namesrv(args: argparse.Namespace) -> int:
    """As ``_consume_remote``, over RocketMQ's remoting protocol (the queue's master, found
    through the name servers)."""
    from dledger.rocketmq.client.mq_client_api import MQClientAPI
    from dledger.rocketmq.remoting.response_code import ResponseCode
    from dledger.rocketmq.store.records import decode_record

    async def run() -> int:
        api = MQClientAPI(_namesrv_addrs(args), args.timeout)
        try:
            queues = [q for q in await api.read_queues(args.topic) if q[1] == args.queue]
            if not queues:
                raise MqCliError(f"no name server knows queue {args.queue} of topic {args.topic!r}")
            addr = queues[0][0]
            offset = args.offset
            if offset is None:
                offset = await api.query_consumer_offset(addr, args.consumer_group, args.topic, args.queue)
                if offset < 0:
                    offset = await api.min_offset(addr, args.topic, args.queue)
            start, left, status, next_offset = offset, args.count, "", offset
            while left > 0:
                r = await api.pull(
                    addr, args.consumer_group, args.topic, args.queue, offset, min(left, 32), int(args.wait * 1000)
                )
                status = r.remark or str(r.code)
                next_offset = int((r.ext_fields or {}).get("nextBeginOffset", offset))
                if r.code != ResponseCode.SUCCESS:
                    break
                body, pos, n = bytes(r.body), 0, 0
                while pos < len(body):
                    size = int.from_bytes(body[pos : pos + 4], "big")
                    phys = int.from_bytes(body[pos + 28 : pos + 36], "big")
                    m = decode_record(body[pos : pos + size], phys, client=True)
                    if m is not None:
                        _print_message(m)
                        n += 1
                    pos += size
                left -= n
                offset = next_offset
                if not n:
                    break
            if args.commit and next_offset != start:
                await api.update_consumer_offset(addr, args.consumer_group, args.topic, args.queue, next_offset)
            print(f"status {status} next {next_offset}", file=sys.stderr)
        finally:
            await api.close()
        return 0

    return asyncio.run(run())


class _LineReader:
    """Lines of a stream read on a thread of their own, so that the sender can take what has
    arrived without waiting for a whole batch: lines that come slowly (`tail -f`) are each sent
    as they come, and a file goes in full batches."""

    _END = (None, b"")

    def __init__(self, lines: Iterator[tuple[int | None, bytes]]) -> None:
        self._queue: queue.Queue[tuple[int | None, bytes]] = queue.Queue(maxsize=4096)
        self._done = False
        threading.Thread(target=self._read, args=(lines,), daemon=True, name="stdin-lines").start()

    def _read(self, lines: Iterator[tuple[int | None, bytes]]) -> None:
        try:
            for item in lines:
                self._queue.put(item)
        finally:
            self._queue.put(self._END)

    def __iter__(self) -> _LineReader:
        return self

    def __next__(self) -> tuple[int | None, bytes]:
        got = self.take(1)
        if not got:
            raise StopIteration
        return got[0]

    def take(self, most: int) -> list[tuple[int | None, bytes]]:
        out: list[tuple[int | None, bytes]] = []
        if self._done:
            return out
        item = self._queue.get()
        while True:
            if item is self._END:
                self._done = True
                return out
            out.append(item)
            if len(out) >= most:
                return out
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return out


def _queue_or_fail(store: Any, topic: str, queue_id: int) -> Any:
    table = store.consume_queues
    cq = table.get(topic, queue_id)
    if cq is None:
        known = table.queue_ids(topic)
        if not known:
            raise MqCliError(f"unknown topic {topic!r}")
        raise MqCliError(f"topic {topic!r} has no queue {queue_id} (queues: {', '.join(map(str, known))})")
    return cq


def _body_text(m: Any) -> str:
    from dledger.rocketmq.store.listing import escape

    body = bytes(m.body or b"")
    if m.sys_flag & 1:  # COMPRESSED_FLAG: the producer zlib-compressed it
        try:
            body = zlib.decompress(body)
        except zlib.error:
            pass
    # Bytes that are not UTF-8 show as \xNN, like the control characters escape() writes.
    text = escape(body.decode("utf-8", "surrogateescape"))
    return _UNDECODED.sub(lambda m: f"\\x{ord(m.group(0)) - 0xDC00:02x}", text)


_UNDECODED = re.compile("[\udc80-\udcff]")


def _print_message(m: Any) -> None:
    from dledger.rocketmq.store.listing import escape

    print(
        f"{m.queue_offset}\t{m.phys_offset}\t{m.msg_id}\t{escape(m.tags)}\t"
        f"{escape(m.keys if isinstance(m.keys, str) else ' '.join(m.keys or []))}\t{_body_text(m)}"
    )


def _consume_remote(args: argparse.Namespace) -> int:
    from dledger.rocketmq.client.consumer import Consumer

    with Consumer(
        args.peers,
        args.consumer_group,
        args.topic,
        dledger_group=args.group,
        read_from=args.read_from,
        **_remote_kwargs(args),
    ) as con:
        offset = args.offset
        if offset is None:
            offset = con.committed(args.queue)
            if offset < 0:
                offset = con.min_offset(args.queue)
        left = args.count
        status_name, next_offset = "", offset
        while left > 0:
            r = con.pull(args.queue, offset, min(left, 32), wait=args.wait)
            status_name, next_offset = r.status.name, r.next_begin_offset
            if not r.messages:
                break
            for m in r.messages:
                _print_message(m)
            left -= len(r.messages)
            offset = next_offset
        if args.commit and next_offset != args.offset:
            con.commit(args.queue, next_offset)
        print(f"status {status_name} next {next_offset}", file=sys.stderr)
    return 0


def cmd_consume(args: argparse.Namespace) -> int:
    if _where(args):
        return _consume_remote(args)
    if args.namesrv:
        return _consume_namesrv(args)
    if args.offset is None:
        raise MqCliError("--offset is required with a store root")
    with open_store(Path(args.dir)) as store:
        _queue_or_fail(store, args.topic, args.queue)
        offset, left = args.offset, args.count
        status_name, next_offset = "", offset
        # Pull until the count is reached or a pull finds nothing; report the last pull that found
        # messages (or the empty one when none did).
        while left > 0:
            result = store.get_messages(args.topic, args.queue, offset, max_count=min(left, 32))
            if not result.messages:
                if not status_name:
                    status_name = getattr(result.status, "name", str(result.status))
                    next_offset = result.next_begin_offset
                break
            status_name = getattr(result.status, "name", str(result.status))
            next_offset = result.next_begin_offset
            for m in result.messages:
                _print_message(m)
            left -= len(result.messages)
            if next_offset == offset:
                break
            offset = next_offset
        if status_name:
            print(f"status {status_name} next {next_offset}", file=sys.stderr)
    return 0


def query_offsets(root: Path, topic: str, key: str, max_num: int) -> list[int]:
    """The physical offsets a key query returns (IndexService.queryOffset over [0, Long.MAX_VALUE]),
    newest first, read straight from ``index/``."""
    from dledger.rocketmq.store.index_file import IndexService

    detect_mode(root)
    svc = IndexService(root / "index", readonly=True, max_msgs_num_batch=max(max_num, 0))
    svc.load()
    try:
        return svc.query(topic, key, max_num)
    finally:
        svc.close()


def _query_namesrv(args: argparse.Namespace) -> list[int]:
    """QUERY_MESSAGE to every master of the topic (as mqadmin queryMsgByKey), or, with --id,
    VIEW_MESSAGE_BY_ID to the broker the offset message id names (queryMsgById), which prints
    the message as ``consume`` does. The offsets are the records' stored commit-log offsets
    (what message ids and ``query`` of the other forms give)."""
    from dledger.rocketmq.client.mq_client_api import MQClientAPI
    from dledger.rocketmq.store.message import decode_message_id, format_host
    from dledger.rocketmq.store.records import decode_record

    def split(body: bytes) -> Iterator[tuple[int, bytes]]:
        pos = 0
        while pos + 36 <= len(body):
            size = int.from_bytes(body[pos : pos + 4], "big")
            if size <= 36 or pos + size > len(body):
                raise MqCliError(f"a broker answered a record of {size} bytes at {pos} of {len(body)}")
            yield int.from_bytes(body[pos + 28 : pos + 36], "big"), body[pos : pos + size]
            pos += size

    async def run() -> list[int]:
        api = MQClientAPI(_namesrv_addrs(args), args.timeout)
        try:
            if args.id:
                try:
                    host, phys = decode_message_id(args.id)
                except ValueError as exc:
                    raise MqCliError(f"--id {args.id!r}: not an offset message id ({exc})") from None
                body = await api.view_message(format_host(host), phys)
                for offset, raw in split(body):
                    m = decode_record(raw, offset, client=True)
                    if m is not None:
                        _print_message(m)
                return []
            masters = await api.master_addrs(args.topic)
            if not masters:
                raise MqCliError(f"no name server knows topic {args.topic!r}")
            out: list[int] = []
            for addr in masters:
                out.extend(
                    offset for offset, _raw in split(await api.query_message(addr, args.topic, args.key, args.max))
                )
            return out[: args.max]
        finally:
            await api.close()

    return asyncio.run(run())


def cmd_query(args: argparse.Namespace) -> int:
    from dledger.rocketmq.store.listing import sorted_offsets

    if bool(args.key) == bool(args.id):
        raise MqCliError("give --key, or --id with --namesrv (one of them)")
    if args.id and not args.namesrv:
        raise MqCliError("--id (an offset message id) needs --namesrv")
    if args.key and not args.topic:
        raise MqCliError("--key needs --topic")
    if args.namesrv:
        _where(args)
        offsets = _query_namesrv(args)
        if args.id:
            return 0
    elif _where(args):
        from dledger.rocketmq.client.consumer import Consumer

        with Consumer(args.peers, "dledger-cli", args.topic, dledger_group=args.group, **_remote_kwargs(args)) as con:
            offsets = [m.phys_offset for m in con.query(args.key, args.max)]
    else:
        offsets = query_offsets(Path(args.dir), args.topic, args.key, args.max)
    if args.sorted:
        print(sorted_offsets(offsets))
    else:
        for p in offsets:
            print(p)
    return 0


def _stats_remote(args: argparse.Namespace) -> int:
    from dledger.rocketmq.client.consumer import Consumer
    from dledger.rocketmq.store.listing import escape

    with Consumer(args.peers, "dledger-cli", "", dledger_group=args.group, **_remote_kwargs(args)) as con:
        members = con.stats()
    print("#member\trole\tterm\tleader\tcommittedPhyOffset\tdispatchBehindBytes\twritable")
    answered = None
    for member, st in members.items():
        if "error" in st:
            print(f"{member}\t-\t-\t-\t-\t-\t-\t# {st['error']}")
            continue
        if answered is None or st.get("role") == "LEADER":
            answered = st
        print(
            f"{member}\t{st['role']}\t{st['term']}\t{st['leader']}\t{st['committed_phys_offset']}\t"
            f"{st['dispatch_behind_bytes']}\t{str(st['writable']).lower()}"
        )
    if answered is None:
        raise MqCliError("no member answered")
    print("#topic\tqueueId\tminOffset\tmaxOffset")
    for topic, qid, lo, hi in sorted(answered["queues"]):
        print(f"{escape(topic)}\t{qid}\t{lo}\t{hi}")
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    from dledger.rocketmq.store.listing import escape

    if _where(args):
        return _stats_remote(args)
    with open_store(Path(args.dir)) as store:
        print(f"mode\t{store.mode}")
        print(f"minPhyOffset\t{store.min_phys_offset}")
        print(f"maxPhyOffset\t{store.max_phys_offset}")
        print(f"dispatchBehindBytes\t{store.dispatch_behind_bytes()}")
        table = store.consume_queues
        print(f"topics\t{len(table.topics())}")
        print(f"queues\t{len(table)}")
        print("#topic\tqueueId\tminOffset\tmaxOffset\tmessages\tmaxPhysicOffset")
        for topic, qid, cq in table:
            print(
                f"{escape(topic)}\t{qid}\t{cq.min_offset}\t{cq.max_offset}\t{cq.message_total}\t{cq.max_physic_offset}"
            )
    return 0


def cmd_dump(args: argparse.Namespace) -> int:
    from dledger.rocketmq.store.listing import consume_queue_lines, message_lines, write_lines

    # Through the store, so each queue starts at the minimum the commit log leaves it (as the
    # Java listing read them after load).
    with open_store(Path(args.dir)) as store:
        if args.consume_queues:
            write_lines(consume_queue_lines(store.consume_queues), sys.stdout)
        else:
            write_lines(message_lines(store.iter_messages()), sys.stdout)
    return 0


def cmd_upgrade(args: argparse.Namespace) -> int:
    """RocketMQ's smooth upgrade of a classic store to DLedger (what the first start in DLedger
    mode does): print the plan; with --yes, do it."""
    from dledger.rocketmq.store.checkpoint import FILE_NAME, StoreCheckpoint
    from dledger.rocketmq.store.commitlog import CommitLog
    from dledger.rocketmq.store.dledger_commitlog import plan_upgrade
    from dledger.rocketmq.store.message_store import MessageStore

    root = Path(args.dir)
    if not re.fullmatch(r"[A-Za-z]\d+", args.self_id):
        raise MqCliError(f"--self-id {args.self_id!r}: want a letter and a number (n0)")
    if not (root / "commitlog").is_dir():
        raise MqCliError(f"{root}: no classic commit log (commitlog/) to upgrade")
    for node in sorted(root.glob("dledger-*")):
        if any(p.name.isdigit() for p in (node / "data").glob("*")):
            raise MqCliError(f"{root}: already upgraded ({node.name}/ holds DLedger data files)")
    cfg = store_config(root, "classic", None)
    old = CommitLog(cfg, StoreCheckpoint(root / FILE_NAME, readonly=True), readonly=True)
    try:
        old.recover(True)
        plan = plan_upgrade(old)
    finally:
        old.close()
    if plan is None:
        raise MqCliError(f"{root}: the classic commit log has no file; a DLedger store started here begins at 0")
    print(f"old commit log\t[{plan.old_min}, {plan.old_end}) in {plan.files} file(s) of {plan.file_size} bytes")
    print(f"blank record\t{'written at ' + str(plan.old_end) if plan.write_blank else 'already there'}")
    print(f"dividedCommitlogOffset\t{plan.divided}")
    print(f"DLedger member\tdledger-{args.self_id}/ (first entry at position {plan.divided})")
    if not args.yes:
        print("dry run: nothing written (--yes upgrades)")
        return 0
    peers = f"{args.self_id}-127.0.0.1:40911"
    dcfg = cfg.replace(enable_dledger_commit_log=True, dledger_self_id=args.self_id, dledger_peers=peers)
    with MessageStore(root, dcfg) as store:
        divided = store.commitlog.divided
    print(f"upgraded: dledger-{args.self_id}/ starts at {divided}")
    return 0


# -- parser -----------------------------------------------------------------------------------


def _guard(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """One clear line on standard error and exit status 1 for what a user can fix."""

    def run(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except KeyboardInterrupt:
            # Ctrl-C: what was acknowledged is printed already; stores and clients closed on the
            # way here. No traceback.
            return 130
        except BrokenPipeError:
            # `dledger mq dump DIR | head`: the reader has what it wanted. Nothing more is written
            # (the interpreter's last flush would fail on the closed pipe too).
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        except MqCliError as exc:
            print(f"dledger mq {args.mq_command}: {exc}", file=sys.stderr)
            return 1
        except DLedgerError as exc:
            print(f"dledger mq {args.mq_command}: {exc.message or exc.code.name}", file=sys.stderr)
            return 1
        except (OSError, ValueError, RuntimeError) as exc:
            # Unreadable files, bad sizes, a store another process holds: what the user acts on.
            print(f"dledger mq {args.mq_command}: {exc}", file=sys.stderr)
            return 1

    return run


def _add_network_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--peers", default=None, help='a running group instead of DIR: "n0-host:port;n1-host:port"')
    p.add_argument("--group", default=None, help="the group's name (default: the one its members serve)")
    p.add_argument(
        "--timeout", type=_positive(float), default=10.0, help="seconds to find the leader and get an answer"
    )
    add_security_options(p)


# ``dledger mq --help``: the module docstring without its last paragraph (for developers) and
# without its reST quotes.
_HELP_DESCRIPTION = "\n\n".join((__doc__ or "").split("\n\n")[:-1]).replace("``", "")


def _positive(kind: Callable[[str], Any], least: float | None = None) -> Callable[[str], Any]:
    """An argparse type: ``kind`` of the text, more than 0 (or ``least`` or more); a usage
    error otherwise."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not (value > 0 if least is None else value >= least):
            want = "more than 0" if least is None else f"{least:g} or more"
            raise argparse.ArgumentTypeError(f"want {want}, not {text}")
        return value

    return parse


def add_mq_commands(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``mq`` and its subcommands to a ``dledger`` subparsers object."""
    mq = subparsers.add_parser(
        "mq",
        help="RocketMQ message store: produce, consume, query, stats, dump, upgrade",
        description=_HELP_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = mq.add_subparsers(dest="mq_command", required=True)

    p = sub.add_parser(
        "produce",
        help="store messages (creates a store in a missing or empty DIR)",
        description="Store messages in DIR or send them to --peers. Prints one line per stored message, "
        "tab-separated: status, msg id, queue id, queue offset, and the commit-log offset (DIR) or the "
        "offset msg id (--peers); --json prints them as named fields.",
    )
    p.add_argument("dir", nargs="?", help="store root")
    _add_network_options(p)
    p.add_argument("--topic", required=True, help="topic of the messages")
    p.add_argument("--queue", type=int, default=None, help="queue id (default 0; with --peers: round-robin)")
    p.add_argument("--batch", type=_positive(int), default=32, help="with --peers: lines sent per request (default 32)")
    p.add_argument("--tags", default=None, help="the messages' TAGS (what consumers filter on)")
    p.add_argument("--keys", default=None, help='space-separated keys, e.g. "k1 k2"')
    p.add_argument(
        "--delay-level",
        type=int,
        default=0,
        help="with --peers: deliver after RocketMQ's delay level (1: 1s, 2: 5s, 3: 10s, 4: 30s, 5: 1m ... 18: 2h)",
    )
    p.add_argument(
        "--mode",
        choices=["classic", "dledger"],
        default="classic",
        help="kind of store to create when DIR is new (default classic)",
    )
    p.add_argument("--namesrv", default=None, help='RocketMQ name servers "host:port;..." (remoting; Java brokers too)')
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", help="the body of one message")
    src.add_argument("--stdin", action="store_true", help="each line of standard input is one message")
    p.add_argument("--json", action="store_true", help="one JSON object per stored message, its fields named")
    p.set_defaults(func=_guard(cmd_produce))

    c = sub.add_parser("consume", help="print messages of a queue from an offset (read-only)")
    c.add_argument("dir", nargs="?", help="store root")
    _add_network_options(c)
    c.add_argument("--namesrv", default=None, help='RocketMQ name servers "host:port;..." (remoting; Java brokers too)')
    c.add_argument("--topic", required=True, help="topic to read")
    c.add_argument("--queue", type=int, required=True, help="queue id of the topic")
    c.add_argument(
        "--offset",
        type=int,
        default=None,
        help="queue offset of the first message (required with DIR; with --peers the consumer group's)",
    )
    c.add_argument("--consumer-group", default="dledger-cli", help="with --peers: whose offsets (default %(default)s)")
    c.add_argument(
        "--wait", type=_positive(float, 0), default=0.0, help="with --peers: seconds a pull waits for a message"
    )
    c.add_argument("--commit", action="store_true", help="with --peers: commit the offset past what was printed")
    c.add_argument(
        "--read-from",
        choices=["leader", "follower"],
        default="leader",
        help="with --peers: read from the leader (default) or a follower",
    )
    c.add_argument("--count", type=_positive(int), default=32, help="at most this many messages (default 32)")
    c.set_defaults(func=_guard(cmd_consume))

    q = sub.add_parser("query", help="physical offsets of the messages with a key (read-only)")
    q.add_argument("dir", nargs="?", help="store root")
    _add_network_options(q)
    q.add_argument("--namesrv", default=None, help='RocketMQ name servers "host:port;..." (remoting; Java brokers too)')
    q.add_argument("--topic", default="", help="topic of the messages (required with --key)")
    q.add_argument("--key", default=None, help="a KEYS segment or a UNIQ_KEY")
    q.add_argument(
        "--id", default=None, help="with --namesrv: an offset message id; prints that message as consume does"
    )
    q.add_argument(
        "--max", type=_positive(int), default=64, help="at most this many (default 64, RocketMQ's maxMsgsNumBatch)"
    )
    q.add_argument("--sorted", action="store_true", help="one line, sorted, comma-separated (as index.tsv)")
    q.set_defaults(func=_guard(cmd_query))

    s = sub.add_parser("stats", help="topics, queues, offsets and dispatch lag (read-only)")
    s.add_argument("dir", nargs="?", help="store root")
    _add_network_options(s)
    s.set_defaults(func=_guard(cmd_stats))

    from dledger.rocketmq.broker.broker_startup import add_broker_commands

    add_broker_commands(sub)
    d = sub.add_parser("dump", help="list messages or consume-queue units as TSV (read-only)")
    d.add_argument("dir", help="store root")
    what = d.add_mutually_exclusive_group()
    what.add_argument("--messages", action="store_true", help="messages.tsv: every message (the default)")
    what.add_argument("--consume-queues", action="store_true", help="consumequeue.tsv: every consume-queue unit")
    d.set_defaults(func=_guard(cmd_dump))

    u = sub.add_parser("upgrade", help="upgrade a classic store to DLedger in place (prints the plan; --yes does it)")
    u.add_argument("dir", help="store root holding commitlog/")
    u.add_argument("--self-id", default="n0", help="the DLedger member this store becomes (default n0)")
    u.add_argument("--yes", action="store_true", help="do it (default: a dry run that writes nothing)")
    u.set_defaults(func=_guard(cmd_upgrade))

    n = sub.add_parser(
        "namesrv", help="a RocketMQ name server (remoting protocol; brokers register, clients find them)"
    )
    n.add_argument("--listen", default="0.0.0.0:9876", help="HOST:PORT to serve remoting on (default 0.0.0.0:9876)")
    n.add_argument(
        "--kv-config", type=Path, default=None, help="kvConfig.json to keep KV settings in (default: memory)"
    )
    n.set_defaults(func=_guard(cmd_namesrv))
    return mq


def cmd_namesrv(args: argparse.Namespace) -> int:
    from dledger.rocketmq.namesrv.namesrv_controller import serve

    host, _, port = str(args.listen).rpartition(":")
    if not host or not port.isdigit():
        raise MqCliError(f"--listen {args.listen!r}: want HOST:PORT")
    logging.getLogger().setLevel(logging.INFO)
    try:
        asyncio.run(serve(host.strip("[]"), int(port), args.kv_config))
    except KeyboardInterrupt:
        pass
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``dledger mq`` on its own: ``main(["dump", DIR, "--messages"])``."""
    parser = argparse.ArgumentParser(prog="dledger")
    sub = parser.add_subparsers(dest="command", required=True)
    add_mq_commands(sub)
    args = parser.parse_args(["mq", *(argv if argv is not None else sys.argv[1:])])
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args))
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
