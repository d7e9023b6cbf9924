"""The ``dledger`` console script: its commands and their options (``dledger --help``)."""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dledger.client_options import add_security_options, client_kwargs, security_kwargs
from dledger.config import DLedgerConfig
from dledger.errors import DLedgerError

log = logging.getLogger("dledger.cli")


def _progress(total: int, desc: str) -> tuple[Callable[[int], None], Callable[[], None]]:
    """A progress bar on standard error when it is a terminal and tqdm is installed (the
    ``progress`` extra); silent otherwise."""
    if not sys.stderr.isatty():
        return (lambda n: None), (lambda: None)
    try:
        from tqdm import tqdm
    except ImportError:
        return (lambda n: None), (lambda: None)

    bar = tqdm(total=total, desc=desc, unit="B", unit_scale=True, file=sys.stderr, leave=False)
    return bar.update, bar.close


def _open_readonly(path: str) -> object:
    from dledger.store.file import MmapFileStore

    return MmapFileStore(path, readonly=True)


def cmd_dump(args: argparse.Namespace) -> int:
    store = _open_readonly(args.dir)
    try:
        begin, end = store.ledger_begin_index, store.ledger_end_index  # type: ignore[attr-defined]
        first = begin if args.from_ is None else max(args.from_, begin)
        last = end if args.to is None else min(args.to, end)
        out = sys.stdout
        if args.digest:
            out.write(f"begin {begin} end {end} endTerm {store.ledger_end_term}\n")  # type: ignore[attr-defined]
        update, done = _progress(max(last - first + 1, 0), "dump")
        for i in range(first, last + 1):
            e = store.get(i)  # type: ignore[attr-defined]
            if args.digest:
                out.write(f"{e.index} {e.term} {e.pos} {len(e.body)} {hashlib.sha256(e.body).hexdigest()[:16]}\n")
            elif args.json:
                out.write(
                    json.dumps(
                        {
                            "index": e.index,
                            "term": e.term,
                            "pos": e.pos,
                            "size": e.size,
                            "magic": e.magic,
                            "body_crc": e.body_crc,
                            "body_len": len(e.body),
                            "body_base64": base64.b64encode(e.body).decode("ascii"),
                        }
                    )
                    + "\n"
                )
            else:
                out.write(f"{e.index} {e.term} {e.pos} {len(e.body)} {_preview(e.body)}\n")
            if i % 4096 == 0:
                update(4096)
        done()
    finally:
        store.close()  # type: ignore[attr-defined]
    return 0


def _preview(body: bytes, limit: int = 64) -> str:
    text = body[:limit].decode("utf-8", errors="backslashreplace")
    text = text.encode("unicode_escape").decode("ascii")
    return text + ("..." if len(body) > limit else "")


def cmd_verify(args: argparse.Namespace) -> int:
    from dledger.store.verify import verify_store

    data_dir = Path(args.dir) / "data"
    total = sum(p.stat().st_size for p in data_dir.iterdir()) if data_dir.is_dir() else 0
    update, done = _progress(total, "verify")
    try:
        result = verify_store(args.dir, progress=update)
    finally:
        done()
    for problem in result.problems:
        print(problem)
    if result.ok:
        print(f"ok: {result.entries} entries [{result.first_index}, {result.last_index}], {result.bytes} bytes")
        return 0
    return 1


def cmd_append(args: argparse.Namespace) -> int:
    from dledger.store.file import MmapFileStore

    if args.peers:
        return _remote("append", args)
    if args.dir is None:
        raise SystemExit("dledger append: give a node directory or --peers")
    if args.stdin:
        bodies = [line.rstrip(b"\n") for line in sys.stdin.buffer]
        bodies = [b for b in bodies if b]
    else:
        bodies = [args.data.encode("utf-8")]
    with MmapFileStore(args.dir, sync=True, start_services=False) as store:
        term = args.term if args.term is not None else max(store.ledger_end_term, 0)
        first, _positions = store.append_batch(bodies, term) if bodies else (store.ledger_end_index + 1, [])
        # A store used on its own is a group of one: what it wrote is committed.
        store.update_committed_index(term, store.ledger_end_index)
        for i in range(first, first + len(bodies)):
            print(i)
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    if args.peers:
        return _remote("get", args)
    if args.dir is None:
        raise SystemExit("dledger get: give a node directory or --peers")
    store = _open_readonly(args.dir)
    try:
        e = store.get(args.index)  # type: ignore[attr-defined]
    finally:
        store.close()  # type: ignore[attr-defined]
    if args.json:
        print(
            json.dumps(
                {
                    "index": e.index,
                    "term": e.term,
                    "pos": e.pos,
                    "body_crc": e.body_crc,
                    "body_base64": base64.b64encode(e.body).decode("ascii"),
                }
            )
        )
    else:
        sys.stdout.buffer.write(e.body + b"\n")
    return 0


def _client(args: argparse.Namespace) -> Any:
    from dledger.client import Client

    return Client(args.peers, args.group, **client_kwargs(args))


def _remote(what: str, args: argparse.Namespace) -> int:
    with _client(args) as client:
        if what == "append":
            if args.stdin:
                bodies = [line.rstrip(b"\n") for line in sys.stdin.buffer]
                bodies = [b for b in bodies if b]
            else:
                bodies = [args.data.encode("utf-8")]
            for r in client.append_batch(bodies):
                print(r.index)
        else:
            e = client.get(args.index)
            if args.json:
                print(
                    json.dumps(
                        {
                            "index": e.index,
                            "term": e.term,
                            "pos": e.pos,
                            "body_base64": base64.b64encode(e.body).decode("ascii"),
                        }
                    )
                )
            else:
                sys.stdout.buffer.write(e.body + b"\n")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """Every member's row; below the table, why each silent member did not answer. Exits 1
    when no member answered."""
    with _client(args) as client:
        rows = client.status()
    answered = [r for r in rows if r.error is None]
    # The leader's answer carries every member's match index: a follower's lag is the
    # leader's end index minus it.
    leaders = [r for r in answered if r.role == "LEADER" and r.match_index is not None]
    lag: dict[str, int] = {}
    if len(leaders) == 1 and leaders[0].end_index is not None:
        ld = leaders[0]
        assert ld.match_index is not None and ld.end_index is not None
        lag = {m: ld.end_index - mi for m, mi in ld.match_index.items() if m != ld.id}
    if args.json:
        print(json.dumps([dict(r.as_dict(), lag=lag.get(r.id)) for r in rows]))
    else:

        def show(v: object) -> str:
            return "-" if v is None else str(v)

        print(
            f"{'id':<6}{'addr':<22}{'group':<10}{'role':<11}{'term':>6}  {'leader':<8}{'end':>10}"
            f"{'committed':>11}{'lag':>8}{'pid':>9}"
        )
        for r in rows:
            print(
                f"{r.id:<6}{r.addr:<22}{show(r.group):<10}{show(r.role):<11}{show(r.term):>6}  {show(r.leader):<8}"
                f"{show(r.end_index):>10}{show(r.committed_index):>11}{show(lag.get(r.id)):>8}{show(r.pid):>9}"
            )
        for r in rows:
            if r.error is not None:
                print(f"{r.id} ({r.addr}) did not answer: {r.error}", file=sys.stderr)
    if not answered:
        print(f"dledger: no member answered{_group_hint(rows)}", file=sys.stderr)
        return 1
    return 0


def _group_hint(rows: Sequence[Any]) -> str:
    from dledger.codes import ResponseCode

    if any(r.error_code == ResponseCode.UNKNOWN_GROUP for r in rows):
        return "; name a group the members serve with --group"
    return ""


def cmd_transfer_leader(args: argparse.Namespace) -> int:
    with _client(args) as client:
        result = client.transfer(args.to)
        group = client.group
    term = f" in term {result.term}" if result.term is not None else ""
    if "already leads" in result.message:
        print(f"{result.leader} already leads group {group}{term}")
    else:
        print(f"{result.leader} leads group {group}{term}")
    return 0 if result.leader == args.to else 1


def cmd_server(args: argparse.Namespace) -> int:
    import asyncio

    from dledger.malloc_tuning import tune_for_server
    from dledger.server import NodeServer, run_server

    tune_for_server()
    config = _config_from_args(args)
    kwargs = security_kwargs(args)
    server_ssl = None
    if args.tls_cert and args.tls_key:
        from dledger.net.tls import make_server_context

        server_ssl = make_server_context(args.tls_cert, args.tls_key, args.tls_ca)
    factory = None
    if config.message_store:
        from dledger.rocketmq.broker.message_service import message_service_factory

        factory = message_service_factory
    server = NodeServer(
        config,
        host=args.host,
        secret=kwargs.get("secret"),
        server_ssl=server_ssl,
        client_ssl=kwargs.get("ssl"),
        application_factory=factory,
    )

    def ready(s: NodeServer) -> None:
        # The line a supervisor (and `dledger cluster`) waits for.
        print(
            f"dledger node {s.self_ids()} group {config.group} listening on {s.host}:{s.port} "
            f"pid {os.getpid()} dir {config.default_path}",
            flush=True,
        )

    return asyncio.run(run_server(server, ready))


def _config_from_args(args: argparse.Namespace) -> DLedgerConfig:
    values: dict[str, object] = {}
    if args.config:
        values.update(DLedgerConfig.from_toml(args.config).as_dict())
    for name in DLedgerConfig.field_names():
        v = getattr(args, "cfg_" + name, None)
        if v is not None:
            values[name] = v
    return DLedgerConfig.from_dict(values)


def cmd_bench(args: argparse.Namespace) -> int:
    from dledger.perf.store_bench import format_table, run_store_bench

    if args.what == "mq":
        from dledger.perf.mq_bench import run_mq_bench

        results = run_mq_bench(quick=args.quick)
    else:
        results = run_store_bench(quick=args.quick)
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=2))
    else:
        print(format_table(results))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Write to an embedded store and read it back: the smallest end-to-end run."""
    from dledger.store.file import MmapFileStore

    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="dledger-demo-"))
    node = base / "dledger-n0"
    with MmapFileStore(node, sync=True, start_services=False) as store:
        term = max(store.ledger_end_term, 0)
        first, _ = store.append_batch([f"hello {i}".encode() for i in range(args.count)], term)
        store.update_committed_index(term, store.ledger_end_index)
        print(f"appended {args.count} entries at [{first}, {store.ledger_end_index}] in {node}")
    with MmapFileStore(node, readonly=True) as store:
        for i in range(max(store.ledger_begin_index, store.ledger_end_index - 2), store.ledger_end_index + 1):
            e = store.get(i)
            print(f"  index {e.index} term {e.term} pos {e.pos}: {e.body.decode()}")
        print(f"begin {store.ledger_begin_index} end {store.ledger_end_index} committed {store.committed_index}")
    print(f"inspect it with: dledger dump {node} --digest")
    return 0


def _add_remote_options(p: argparse.ArgumentParser, peers: bool = True) -> None:
    if peers:
        p.add_argument("--peers", required=True, help='"n0-host:port;n1-host:port;..."')
    p.add_argument(
        "--group",
        default=None,
        help="the Raft group (default: the one group the members serve; needed when they serve several)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        help="seconds to find the leader and get an answer (default: %(default)s)",
    )
    add_security_options(p)


_FLAG_NAMES = {"self_id": ["--id"], "store_base_dir": ["--store-dir"]}
# Other spellings accepted but not listed in --help (RocketMQ's name for --message-store).
_HIDDEN_NAMES = {"message_store": ["--enableDLegerCommitLog"]}


def _parse_bool(v: str) -> bool:
    low = v.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"want true or false, not {v!r}")


def _field_kind(f: Any) -> tuple[Callable[[str], Any], str]:
    """The parser and metavar of a config field, from its annotation (a string here)."""
    hint = str(f.type)
    if hint.startswith("bool"):
        return _parse_bool, "BOOL"
    if hint.startswith("int"):
        return int, "N"
    if hint.startswith("float"):
        return float, "X"
    return str, "TEXT"


def _add_config_options(p: argparse.ArgumentParser) -> None:
    """Every DLedgerConfig option as a flag, with its default and meaning from the config
    dataclass: --kebab-case, plus DLedger's --camelCase spelling (not listed in --help)."""
    import dataclasses

    opts = p.add_argument_group("DLedgerConfig options (also from --config; flags override the file)")
    for f in dataclasses.fields(DLedgerConfig):
        kebab = "--" + f.name.replace("_", "-")
        parts = f.name.split("_")
        camel = "--" + parts[0] + "".join(x.title() for x in parts[1:])
        kind, metavar = _field_kind(f)
        default = f.default
        shown = "unset" if default is None else (str(default).lower() if isinstance(default, bool) else default)
        text = f"{DLedgerConfig.help_of(f.name)} (default: {shown})".replace("%", "%%")
        # A bool flag alone means true (--message-store), as well as --sync true / false.
        switch: dict[str, Any] = {"nargs": "?", "const": True} if kind is _parse_bool else {}
        opts.add_argument(
            *_FLAG_NAMES.get(f.name, []),
            kebab,
            dest="cfg_" + f.name,
            default=None,
            type=kind,
            metavar=metavar,
            help=text,
            **switch,
        )
        hidden = [camel] if camel != kebab else []
        hidden += _HIDDEN_NAMES.get(f.name, [])
        if hidden:
            opts.add_argument(*hidden, dest="cfg_" + f.name, default=None, type=kind, help=argparse.SUPPRESS, **switch)


def cmd_cluster(args: argparse.Namespace) -> int:
    from dledger.cluster import run_local_cluster

    try:
        return run_local_cluster(
            args.nodes,
            args.dir,
            args.base_port,
            args.group,
            args.writes,
            args.exit_after_writes,
            message_store=args.message_store,
        )
    except KeyboardInterrupt:
        # Ctrl-C before the group was up (after, it is the way to stop it): the members are
        # stopped on the way out; no traceback.
        return 130


DESCRIPTION = (
    "dledger: a Raft-replicated commitlog store, on disk as Apache RocketMQ's DLedger. Inspect and "
    "verify store directories, run a member or a local group, talk to a running group, and use "
    "RocketMQ's message store on top (mq)."
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dledger", description=DESCRIPTION)
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("dump", help="print the entries of a node directory (read-only)")
    d.add_argument("dir", help="node directory (holds data/ and index/)")
    d.add_argument("--digest", action="store_true", help="fixture format: index term pos body_len sha256[:16]")
    d.add_argument("--from", dest="from_", type=int, default=None, metavar="INDEX", help="first index")
    d.add_argument("--to", type=int, default=None, metavar="INDEX", help="last index (inclusive)")
    d.add_argument("--json", action="store_true", help="one JSON object per line")
    d.set_defaults(func=cmd_dump)

    v = sub.add_parser("verify", help="check every entry; exit 1 with one line per problem")
    v.add_argument("dir", help="node directory (holds data/ and index/)")
    v.set_defaults(func=cmd_verify)

    a = sub.add_parser("append", help="append entries to a node directory (created if missing)")
    a.add_argument("dir", nargs="?", default=None, help="node directory (created if missing), or --peers")
    a.add_argument("--peers", default=None, help='members of a running group, "n0-host:port;n1-host:port"')
    _add_remote_options(a, peers=False)
    a.add_argument("--term", type=int, default=None, help="term of the entries (default: the ledger end term)")
    src = a.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", help="the body of one entry")
    src.add_argument("--stdin", action="store_true", help="each line of standard input is one entry")
    a.set_defaults(func=cmd_append)

    g = sub.add_parser("get", help="print the body of one entry")
    g.add_argument("dir", nargs="?", default=None, help="node directory (read-only), or --peers")
    g.add_argument("--peers", default=None, help='members of a running group, "n0-host:port;n1-host:port"')
    _add_remote_options(g, peers=False)
    g.add_argument("-i", "--index", type=int, required=True, help="index of the entry")
    g.add_argument(
        "--json", action="store_true", help="index, term, pos and the body in base64 as JSON (default: the body)"
    )
    g.set_defaults(func=cmd_get)

    b = sub.add_parser("bench", help="measure the store (or the message store) beside its baselines")
    b.add_argument("what", choices=["store", "mq"], help="store: the entry store; mq: the RocketMQ message store")
    b.add_argument("--quick", action="store_true", help="small sizes; finishes in about ten seconds")
    b.add_argument("--json", action="store_true", help="the figures as a JSON list")
    b.set_defaults(func=cmd_bench)

    st = sub.add_parser("status", help="every member's role, term, leader and indexes")
    _add_remote_options(st)
    st.add_argument("--json", action="store_true", help="a JSON list of the members' rows")
    st.set_defaults(func=cmd_status)

    tl = sub.add_parser("transfer-leader", help="hand leadership to another member")
    _add_remote_options(tl)
    tl.add_argument("--to", required=True, help="member id")
    tl.set_defaults(func=cmd_transfer_leader)

    sv = sub.add_parser("server", help="run one member of a group")
    sv.add_argument("--config", help="a TOML file of DLedgerConfig options (flags override it)")
    sv.add_argument("--host", default=None, help="bind address (default 127.0.0.1)")
    sv.add_argument("--tls-cert", default=None, help="this member's certificate (enables TLS with --tls-key)")
    sv.add_argument("--tls-key", default=None, help="the key of --tls-cert")
    sv.add_argument("--tls-ca", default=None, help="CA that signs the members' certificates (mutual TLS)")
    sv.add_argument("--secret-file", default=None, help="file holding the group's shared secret")
    _add_config_options(sv)
    sv.set_defaults(func=cmd_server)

    cl = sub.add_parser("cluster", help="start a local group of node processes; Ctrl-C stops them")
    cl.add_argument("--nodes", type=int, default=3, help="members of the group (default %(default)s)")
    cl.add_argument("--dir", default=None, help="store directory (default: a new temporary one)")
    cl.add_argument(
        "--base-port",
        type=int,
        default=20911,
        help="the first member's port, the next ones after it (default %(default)s)",
    )
    cl.add_argument("--group", default="default", help="the group's name (default %(default)s)")
    cl.add_argument("--writes", type=int, default=3, help="entries to append once a leader is up")
    cl.add_argument("--exit-after-writes", action="store_true", help="stop the group after the writes")
    cl.add_argument(
        "--message-store",
        action="store_true",
        help="members run RocketMQ's message store; produce and consume --writes messages",
    )
    cl.set_defaults(func=cmd_cluster)

    m = sub.add_parser("demo", help="write to an embedded store and read it back")
    m.add_argument("--dir", default=None, help="base directory (default: a new temporary one)")
    m.add_argument("--count", type=int, default=1000, help="entries to write (default %(default)s)")
    m.set_defaults(func=cmd_demo)

    from dledger.rocketmq.cli import add_mq_commands

    add_mq_commands(sub)
    for command in sub.choices.values():
        if "-v" in command._option_string_actions:
            continue
        # Also after the command (`dledger server -v ...`), where operators put it.
        command.add_argument(
            "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="log at INFO level"
        )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    # Nothing here uses BLAS, yet numpy's import wakes OpenBLAS's thread pool, which spins
    # ~0.1 s of CPU in each process (perf: blas_thread_server in every member). Before numpy
    # is imported, and only in this process and its children (an embedding app is untouched).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        args = build_parser().parse_args(argv)
        logging.basicConfig(
            level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
        )
        return int(args.func(args))
    except DLedgerError as exc:
        from dledger.codes import ResponseCode

        hint = ""
        if exc.code == ResponseCode.UNKNOWN_GROUP and getattr(args, "peers", None):
            hint = "; name a group the members serve with --group"
        print(f"dledger: {exc}{hint}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # Ctrl-C (a command waiting on a group, on standard input): no traceback, the shell's
        # code for it.
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:
        # What the system refused (a store root that cannot be made, an address in use): one line.
        print(f"dledger: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
