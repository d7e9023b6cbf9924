"""``dledger mq ...``: produce to, consume from, query and list a RocketMQ message store.

``DIR`` is a store root (RocketMQ's storePathRootDir). Its mode comes from what is there:
``commitlog/`` is a classic store, ``dledger-<id>/`` a DLedger one. Every command but ``produce``
opens the store read-only: it never writes a byte and never takes the ``lock`` file, so it can
run beside a live store. Sizes (commit-log files, consume-queue files, index slots) are read from
the files already there.

``add_mq_commands(subparsers)`` adds the ``mq`` command to the ``dledger`` parser; ``main(argv)``
runs it on its own (``python -m dledger.rocketmq.cli produce ...``).
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dledger.rocketmq.index_file import IndexService, geometry_of_size, index_file_size
from dledger.rocketmq.listing import (
    consume_queue_lines,
    escape,
    message_lines,
    sorted_offsets,
    write_lines,
)

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
    nodes = sorted(p.name[len("dledger-"):] for p in root.iterdir() if p.is_dir() and p.name.startswith("dledger-"))
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
    from dledger.rocketmq.config import MessageStoreConfig

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
    index_sizes = [p.stat().st_size for p in sorted((root / "index").glob("[0-9]*"))] if (root / "index").is_dir() \
        else []
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
    from dledger.rocketmq.store import MessageStore

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

def cmd_produce(args: argparse.Namespace) -> int:
    from dledger.rocketmq.message import Message

    if args.stdin:
        bodies = [line.rstrip(b"\n") for line in sys.stdin.buffer]
        bodies = [b for b in bodies if b]
    else:
        bodies = [args.data.encode("utf-8")]
    failed = 0
    with open_store(Path(args.dir), readonly=False, create_mode=args.mode) as store:
        for body in bodies:
            msg = Message(topic=args.topic, body=body, queue_id=args.queue, tags=args.tags or None,
                          keys=args.keys or None)
            result = store.put_message(msg)
            status = getattr(result.status, "name", str(result.status))
            if not result.ok:
                failed += 1
                reason = f" ({result.reason})" if getattr(result, "reason", "") else ""
                print(f"dledger mq produce: {status}{reason}", file=sys.stderr)
                continue
            print(f"{status}\t{result.msg_id}\t{args.queue}\t{result.queue_offset}\t{result.phys_offset}")
        store.flush()
    return 1 if failed else 0


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


def cmd_consume(args: argparse.Namespace) -> int:
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
                print(f"{m.queue_offset}\t{m.phys_offset}\t{m.msg_id}\t{escape(m.tags)}\t"
                      f"{escape(m.keys if isinstance(m.keys, str) else ' '.join(m.keys or []))}\t{_body_text(m)}")
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
    detect_mode(root)
    svc = IndexService(root / "index", readonly=True, max_msgs_num_batch=max(max_num, 0))
    svc.load()
    try:
        return svc.query(topic, key, max_num)
    finally:
        svc.close()


def cmd_query(args: argparse.Namespace) -> int:
    offsets = query_offsets(Path(args.dir), args.topic, args.key, args.max)
    if args.sorted:
        print(sorted_offsets(offsets))
    else:
        for p in offsets:
            print(p)
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
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
            print(f"{escape(topic)}\t{qid}\t{cq.min_offset}\t{cq.max_offset}\t{cq.message_total}\t"
                  f"{cq.max_physic_offset}")
    return 0


def cmd_dump(args: argparse.Namespace) -> int:
    # Through the store, so each queue starts at the minimum the commit log leaves it (as the
    # Java listing read them after load).
    with open_store(Path(args.dir)) as store:
        if args.consume_queues:
            write_lines(consume_queue_lines(store.consume_queues), sys.stdout)
        else:
            write_lines(message_lines(store.iter_messages()), sys.stdout)
    return 0


# -- parser -----------------------------------------------------------------------------------

def _guard(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """One clear line on standard error and exit status 1 for what a user can fix."""
    def run(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except MqCliError as exc:
            print(f"dledger mq {args.mq_command}: {exc}", file=sys.stderr)
            return 1
        except (OSError, ValueError, RuntimeError) as exc:
            # Unreadable files, bad sizes, a store another process holds: what the user acts on.
            print(f"dledger mq {args.mq_command}: {exc}", file=sys.stderr)
            return 1

    return run


def add_mq_commands(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``mq`` and its subcommands to a ``dledger`` subparsers object."""
    mq = subparsers.add_parser("mq", help="RocketMQ message store: produce, consume, query, stats, dump",
                               description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = mq.add_subparsers(dest="mq_command", required=True)

    p = sub.add_parser("produce", help="store messages (creates a store in a missing or empty DIR)")
    p.add_argument("dir", help="store root")
    p.add_argument("--topic", required=True)
    p.add_argument("--queue", type=int, default=0, help="queue id (default 0)")
    p.add_argument("--tags", default=None)
    p.add_argument("--keys", default=None, help='space-separated keys, e.g. "k1 k2"')
    p.add_argument("--mode", choices=["classic", "dledger"], default="classic",
                   help="kind of store to create when DIR is new (default classic)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", help="the body of one message")
    src.add_argument("--stdin", action="store_true", help="each line of standard input is one message")
    p.set_defaults(func=_guard(cmd_produce))

    c = sub.add_parser("consume", help="print messages of a queue from an offset (read-only)")
    c.add_argument("dir", help="store root")
    c.add_argument("--topic", required=True)
    c.add_argument("--queue", type=int, required=True)
    c.add_argument("--offset", type=int, required=True, help="queue offset of the first message")
    c.add_argument("--count", type=int, default=32, help="at most this many messages (default 32)")
    c.set_defaults(func=_guard(cmd_consume))

    q = sub.add_parser("query", help="physical offsets of the messages with a key (read-only)")
    q.add_argument("dir", help="store root")
    q.add_argument("--topic", required=True)
    q.add_argument("--key", required=True, help="a KEYS segment or a UNIQ_KEY")
    q.add_argument("--max", type=int, default=64, help="at most this many (default 64, RocketMQ's maxMsgsNumBatch)")
    q.add_argument("--sorted", action="store_true", help="one line, sorted, comma-separated (as index.tsv)")
    q.set_defaults(func=_guard(cmd_query))

    s = sub.add_parser("stats", help="topics, queues, offsets and dispatch lag (read-only)")
    s.add_argument("dir", help="store root")
    s.set_defaults(func=_guard(cmd_stats))

    d = sub.add_parser("dump", help="list messages or consume-queue units as TSV (read-only)")
    d.add_argument("dir", help="store root")
    what = d.add_mutually_exclusive_group()
    what.add_argument("--messages", action="store_true", help="messages.tsv: every message (the default)")
    what.add_argument("--consume-queues", action="store_true", help="consumequeue.tsv: every consume-queue unit")
    d.set_defaults(func=_guard(cmd_dump))
    return mq


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
