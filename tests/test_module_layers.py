"""The package's layers (docs/architecture.md): what a process loads for what it does, and no
import cycle among dledger's modules."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import dledger

PACKAGE = Path(dledger.__file__).parent

# What loads in a fresh interpreter after `code`: the dledger modules it imported.
_LOADED = "import sys\n{code}\nprint('\\n'.join(sorted(m for m in sys.modules if m.startswith('dledger'))))\n"


def _loaded_by(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", _LOADED.format(code=code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=PACKAGE.parent,
    )
    return set(out.stdout.split())


# What the store must not load: the network, the node, the members and the clients.
NETWORK_SIDE = ("dledger.net", "dledger.rocketmq.broker", "dledger.rocketmq.client")
NETWORK_MODULES = {"dledger.server", "dledger.client", "dledger.application", "dledger.rocketmq.wire"}

# The store's writers: what opens, appends to or dispatches into a store.
STORE_WRITERS = {
    "dledger.rocketmq.store.message_store",
    "dledger.rocketmq.store.commitlog",
    "dledger.rocketmq.store.dledger_commitlog",
    "dledger.rocketmq.store.consume_queue",
    "dledger.rocketmq.store.consume_queue_table",
    "dledger.rocketmq.store.mapped_file",
    "dledger.rocketmq.store.index_file",
    "dledger.rocketmq.store.dispatch",
    "dledger.rocketmq.store.batch_preparer",
    "dledger.store.file",
}


def test_a_client_process_loads_no_store_writer_no_server_no_broker() -> None:
    loaded = _loaded_by(
        "import dledger.rocketmq.client\n"
        "from dledger.rocketmq.client import AsyncConsumer, AsyncProducer, Consumer, Producer, SendResult\n"
        "from dledger.rocketmq import Message, Producer as P2, Consumer as C2"
    )
    assert "dledger.rocketmq.client.producer" in loaded and "dledger.rocketmq.client.consumer" in loaded
    assert not loaded & STORE_WRITERS
    assert "dledger.server" not in loaded
    assert not {m for m in loaded if m.startswith("dledger.rocketmq.broker")}


def test_the_store_loads_nothing_of_the_network() -> None:
    loaded = _loaded_by(
        "import dledger.rocketmq.store\n"
        "from dledger.rocketmq.store import MessageStore, MessageStoreConfig\n"
        "import dledger.rocketmq.store.dledger_commitlog, dledger.rocketmq.store.listing"
    )
    assert "dledger.rocketmq.store.message_store" in loaded and "dledger.rocketmq.store.dledger_commitlog" in loaded
    assert not {
        m for m in loaded if m.startswith(("dledger.net", "dledger.rocketmq.broker", "dledger.rocketmq.client"))
    }
    assert not loaded & {"dledger.server", "dledger.client", "dledger.application", "dledger.rocketmq.wire"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the dledger modules it imports anywhere in its text: at the top, inside
    functions and under TYPE_CHECKING alike (a cycle through any of them is a knot a reader must
    untie, and a lazy import only hides it)."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}

    def resolve(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                # `from pkg import module` imports the module; `from module import name`, the module.
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            else:
                continue
            deps.update(r for t in targets if (r := resolve(t)) is not None)
        deps.discard(name)
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_among_dledger_modules() -> None:
    graph = import_graph()
    # The graph sees imports inside functions and under TYPE_CHECKING.
    assert "dledger.rocketmq.broker.message_service" in graph["dledger.cli"]
    assert "dledger.rocketmq.store.message_store" in graph["dledger.rocketmq.broker.pull_message_processor"]
    assert cycles(graph) == []


def test_the_server_imports_no_application_and_the_store_no_network() -> None:
    graph = import_graph()
    assert not {m for m in graph["dledger.server"] if m.startswith("dledger.rocketmq")}
    for name, deps in graph.items():
        if name.startswith("dledger.rocketmq.store"):
            bad = {
                d for d in deps if d.startswith(("dledger.net", "dledger.rocketmq.broker", "dledger.rocketmq.client"))
            }
            bad |= deps & {"dledger.server", "dledger.client", "dledger.application", "dledger.rocketmq.wire"}
            assert not bad, (name, bad)
        if name.startswith("dledger.rocketmq.client"):
            assert not {d for d in deps if d.startswith("dledger.rocketmq.broker")} | (deps & STORE_WRITERS), name


def test_the_name_server_and_the_remoting_codec_load_no_store_and_no_broker() -> None:
    loaded = _loaded_by(
        "import dledger.rocketmq.remoting\n"
        "from dledger.rocketmq.namesrv.namesrv_controller import NamesrvController\n"
        "from dledger.rocketmq.remoting.netty_remoting_client import NettyRemotingClient"
    )
    assert "dledger.rocketmq.namesrv.route_info_manager" in loaded
    assert not {
        m for m in loaded if m.startswith(("dledger.rocketmq.store", "dledger.rocketmq.broker", "dledger.store"))
    }
    graph = import_graph()
    for name, deps in graph.items():
        if name.startswith(("dledger.rocketmq.remoting", "dledger.rocketmq.namesrv")):
            assert not {d for d in deps if d.startswith(("dledger.rocketmq.store", "dledger.rocketmq.broker"))}, name
