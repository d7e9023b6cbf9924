"""BrokerStartup: ``dledger mq broker`` (one classic broker) and ``dledger mq cluster --classic``.

``-c broker.conf`` is read as RocketMQ reads it (Java properties, RocketMQ's key names: the
MessageStoreConfig keys, plus ``brokerName``, ``listenPort``, ``brokerIP1``,
``defaultTopicQueueNums``, ``namesrvAddr``, ``brokerClusterName``, ``brokerId``,
``slaveReadEnable``, ``autoCreateSubscriptionGroup``, ``autoCreateTopicEnable`` and
``brokerPermission``; the last four UPDATE_BROKER_CONFIG also changes while it runs, and
writes the file again). ``listenPort``
is what it is to a Java broker: RocketMQ's remoting port (``--remoting-port``), with the VIP
channel at ``listenPort - 2``. The project's own protocol is on ``--listen``. Keys that do nothing
here are named in one warning line. Flags override the file.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from dledger.child_process import python_module
from dledger.cluster import wait_ready
from dledger.config import snake_case
from dledger.rocketmq.store.config import ASYNC_MASTER, SLAVE, SYNC_MASTER, MessageStoreConfig

log = logging.getLogger(__name__)

# BrokerConfig / NettyServerConfig keys the classic broker takes from broker.conf.
_BROKER_KEYS = {
    "brokerName",
    "listenPort",
    "brokerIP1",
    "defaultTopicQueueNums",
    "namesrvAddr",
    "brokerClusterName",
    "brokerId",
    "slaveReadEnable",
    "autoCreateSubscriptionGroup",
    "autoCreateTopicEnable",
    "brokerPermission",
}


@dataclasses.dataclass(slots=True)
class BrokerSettings:
    store: dict[str, Any]
    broker_name: str = "broker-a"
    listen_host: str = "127.0.0.1"
    listen_port: int = 10911
    queue_nums: int = 4
    master_addr: str | None = None
    remoting_port: int | None = None
    namesrv_addr: str | None = None
    cluster: str = "DefaultCluster"
    broker_id: int | None = None
    sync_period_ms: int = 10000
    slave_read_enable: bool = False
    auto_create_subscription_group: bool = True
    # The -c file and its keys (UPDATE_BROKER_CONFIG writes it again, as Java's Configuration).
    config_path: Path | None = None
    properties: dict[str, str] = dataclasses.field(default_factory=dict)
    unsupported: list[str] = dataclasses.field(default_factory=list)


def _convert(name: str, value: str, default: Any) -> Any:
    if isinstance(default, bool):
        if value.lower() not in ("true", "false"):
            raise ValueError(f"{name} = {value!r}: want true or false")
        return value.lower() == "true"
    if isinstance(default, int):
        return int(value)
    if isinstance(default, float):
        return float(value)
    return value


def broker_settings(props: dict[str, str]) -> BrokerSettings:
    """The store options, broker options and unsupported keys of a broker.conf."""
    fields = {f.name: f for f in dataclasses.fields(MessageStoreConfig)}
    defaults = MessageStoreConfig()
    s = BrokerSettings(store={})
    for key, value in props.items():
        if key in _BROKER_KEYS:
            if key == "brokerName":
                s.broker_name = value
            elif key == "listenPort":
                s.remoting_port = int(value)
            elif key == "brokerIP1":
                s.listen_host = value
            elif key == "namesrvAddr":
                s.namesrv_addr = value
            elif key == "brokerClusterName":
                s.cluster = value
            elif key == "brokerId":
                s.broker_id = int(value)
            elif key == "slaveReadEnable":
                s.slave_read_enable = _convert(key, value, False)
            elif key == "autoCreateSubscriptionGroup":
                s.auto_create_subscription_group = _convert(key, value, True)
            elif key == "autoCreateTopicEnable":
                _convert(key, value, True)  # checked here, taken by the broker's Configuration
            elif key == "brokerPermission":
                _convert(key, value, 0)
            else:
                s.queue_nums = int(value)
            continue
        name = snake_case(key)
        if name not in fields or name in ("store_host", "topic_queue_nums", "dledger_store_options"):
            s.unsupported.append(key)
            continue
        default = getattr(defaults, name)
        s.store[name] = value if default is None else _convert(key, value, default)
    return s


def add_broker_commands(sub: Any) -> None:
    b = sub.add_parser("broker", help="run a classic broker: a master or a slave of a RocketMQ 4.9 pair")
    b.add_argument("-c", "--config", type=Path, help="RocketMQ's broker.conf (Java properties, RocketMQ key names)")
    b.add_argument("--store-dir", type=Path, help="the store root (storePathRootDir)")
    b.add_argument("--role", choices=[ASYNC_MASTER, SYNC_MASTER, SLAVE], help="brokerRole (default ASYNC_MASTER)")
    b.add_argument("--listen", help="host:port clients connect to (default 127.0.0.1:10911)")
    b.add_argument("--ha-port", type=int, help="haListenPort (default 10912; 0: any free port)")
    b.add_argument("--master-ha", help="a slave's master HA address host:port (haMasterAddress)")
    b.add_argument(
        "--master",
        help="a slave's master's client address host:port, for metadata sync (default: the --master-ha port - 1)",
    )
    b.add_argument("--broker-name", help="brokerName, the group clients name (default broker-a)")
    b.add_argument(
        "--remoting-port",
        type=int,
        help="RocketMQ's remoting on this port (Java's listenPort) and the VIP channel on port - 2 (default: off)",
    )
    b.add_argument("--namesrv-addr", help='with --remoting-port: name servers to register with, "host:port;host:port"')
    b.add_argument("--cluster", help="brokerClusterName (default DefaultCluster)")
    b.add_argument("--broker-id", type=int, help="a slave's brokerId, > 0 (default 1; a master registers 0)")
    b.add_argument(
        "--slave-sync-period-ms",
        type=int,
        help="how often a slave syncs its master's metadata over remoting (default 10000, as Java; for tests)",
    )
    b.set_defaults(func=cmd_broker)
    r = sub.add_parser("role", help="switch a running classic broker to master or slave (no restart)")
    r.add_argument("--peers", required=True, help="the broker's client address host:port")
    r.add_argument("--to", required=True, choices=["master", "slave"], help="the new role")
    r.add_argument("--master-ha", help="with --to slave: the master's HA address host:port")
    r.add_argument("--sync", action="store_true", help="with --to master: a SYNC_MASTER (default ASYNC_MASTER)")
    r.set_defaults(func=cmd_role)
    c = sub.add_parser("cluster", help="start a classic master and slaves on 127.0.0.1 with a few messages")
    c.add_argument("--classic", action="store_true", required=True, help="a RocketMQ 4.9 master/slave pair")
    c.add_argument("--slaves", type=int, default=1, help="how many slaves (default 1)")
    c.add_argument("--dir", type=Path, help="where the stores go (default a new temporary directory)")
    c.add_argument("--port", type=int, default=10911, help="the master's client port; the next brokers +10")
    c.add_argument("--sync", action="store_true", help="the master is a SYNC_MASTER")
    c.set_defaults(func=cmd_cluster)


def settings_from_args(args: argparse.Namespace) -> BrokerSettings:
    # Here, not at the top: dledger.store loads numpy, which the CLI's parser must not.
    from dledger.store.properties import parse_properties

    props = parse_properties(args.config.read_text()) if args.config is not None else {}
    s = broker_settings(props)
    s.config_path, s.properties = args.config, props
    if s.unsupported:
        log.warning("broker.conf keys not supported here (ignored): %s", ", ".join(s.unsupported))
    if args.store_dir is not None:
        s.store["store_path_root_dir"] = str(args.store_dir)
    if args.role is not None:
        s.store["broker_role"] = args.role
    if args.ha_port is not None:
        s.store["ha_listen_port"] = args.ha_port
    if args.master_ha is not None:
        s.store["ha_master_address"] = args.master_ha
    if args.broker_name is not None:
        s.broker_name = args.broker_name
    if args.master is not None:
        s.master_addr = args.master
    for name in ("remoting_port", "namesrv_addr", "cluster", "broker_id"):
        if getattr(args, name) is not None:
            setattr(s, name, getattr(args, name))
    if args.slave_sync_period_ms is not None:
        if args.slave_sync_period_ms <= 0:
            raise SystemExit("dledger mq broker: --slave-sync-period-ms must be > 0")
        s.sync_period_ms = args.slave_sync_period_ms
    if s.remoting_port is not None and not 2 < s.remoting_port <= 65535:
        raise SystemExit(f"dledger mq broker: remoting port {s.remoting_port}: want 3-65535 (VIP channel: port - 2)")
    if s.broker_id is not None and s.broker_id <= 0 and s.store.get("broker_role") == SLAVE:
        raise SystemExit(f"dledger mq broker: a slave's brokerId must be > 0, not {s.broker_id}")
    if args.listen is not None:
        host, _, port = args.listen.rpartition(":")
        s.listen_host, s.listen_port = host.strip("[]") or "127.0.0.1", int(port)
    _refuse_port_clash(s)
    return s


def _refuse_port_clash(s: BrokerSettings) -> None:
    """Two of the broker's listeners on one port fail at bind with a bare EADDRINUSE; name them
    before anything starts (the usual case: broker.conf's ``listenPort=10911`` beside the own
    protocol's default 10911)."""
    ports = {"--listen": s.listen_port}
    if s.remoting_port is not None:
        ports["remoting (listenPort)"] = s.remoting_port
        ports["VIP channel (listenPort - 2)"] = s.remoting_port - 2
    ports["HA (haListenPort)"] = s.store.get("ha_listen_port", MessageStoreConfig().ha_listen_port)
    seen: dict[int, str] = {}
    for name, port in ports.items():
        if port == 0:  # any free port: never a clash
            continue
        if port in seen:
            raise SystemExit(
                f"dledger mq broker: {seen[port]} and {name} are both port {port}: give --listen HOST:PORT "
                "(the project's protocol) a port of its own"
            )
        seen[port] = name


def cmd_broker(args: argparse.Namespace) -> int:
    s = settings_from_args(args)
    if not s.store.get("store_path_root_dir"):
        print("dledger mq broker: give --store-dir or storePathRootDir in -c", file=sys.stderr)
        return 2
    cfg = MessageStoreConfig(**s.store)
    try:
        return asyncio.run(_serve(cfg, s))
    except OSError as exc:
        print(f"dledger mq broker: {exc}", file=sys.stderr)
        return 1


async def _serve(cfg: MessageStoreConfig, s: BrokerSettings) -> int:
    from dledger.rocketmq.broker.broker_controller import BrokerController

    broker = BrokerController(
        cfg,
        f"{s.listen_host}:{s.listen_port}",
        broker_name=s.broker_name,
        queue_nums=s.queue_nums,
        master_addr=s.master_addr,
        remoting_port=s.remoting_port,
        namesrv_addr=s.namesrv_addr,
        cluster=s.cluster,
        broker_id=s.broker_id,
        sync_period_s=s.sync_period_ms / 1000.0,
        slave_read_enable=s.slave_read_enable,
        auto_create_subscription_group=s.auto_create_subscription_group,
        config_path=s.config_path,
        config_properties=s.properties,
    )
    await broker.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    assert broker.ha is not None
    remoting = f" remoting {s.remoting_port}" if s.remoting_port is not None else ""
    print(
        f"broker {s.broker_name} {cfg.broker_role} listening on {broker.address} HA {broker.ha.port}{remoting}",
        flush=True,
    )
    await stop.wait()
    log.info("stopping the broker")
    await broker.shutdown()
    return 0


def cmd_role(args: argparse.Namespace) -> int:
    from dledger.rocketmq.client.mq_admin import update_broker_role

    role = SLAVE if args.to == "slave" else (SYNC_MASTER if args.sync else ASYNC_MASTER)
    body = update_broker_role(args.peers, role, args.master_ha)
    print(f"{args.peers} is now {role} ({body.get('role')})")
    return 0


def cmd_cluster(args: argparse.Namespace) -> int:
    """A master and ``--slaves`` slaves as processes, a few messages through the master; runs
    until Ctrl-C (each broker stops cleanly)."""
    root = args.dir or Path(tempfile.mkdtemp(prefix="dledger-classic-"))

    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    # SIGTERM stops the brokers as Ctrl-C does (each gets SIGTERM: flushed, no abort file).
    signal.signal(signal.SIGTERM, interrupt)
    procs: list[subprocess.Popen[str]] = []
    peers = []
    exe = python_module("dledger.cli", "mq", "broker", die_with_parent=True)  # none outlives this supervisor
    try:
        for k in range(args.slaves + 1):
            port = args.port + 10 * k
            role = (SYNC_MASTER if args.sync else ASYNC_MASTER) if k == 0 else SLAVE
            cmd = [*exe, "--store-dir", str(root / f"broker-{k}"), "--role", role, "--listen", f"127.0.0.1:{port}"]
            cmd += ["--ha-port", str(port + 1)]
            if k:
                cmd += ["--master-ha", f"127.0.0.1:{args.port + 1}"]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True))
            peers.append(f"127.0.0.1:{port}")
        for proc in procs:
            # Every broker up (its ready line) before the first message and the "running" line.
            try:
                print(wait_ready(proc), flush=True)
            except RuntimeError as exc:
                print(f"dledger mq cluster: {exc}; stopping the brokers", file=sys.stderr)
                return 1
        peer_text = ";".join(peers)
        from dledger.rocketmq.client.producer import Producer
        from dledger.rocketmq.store.message import Message

        with Producer(peer_text, timeout=30.0) as producer:
            for i in range(3):
                r = producer.send(Message("TopicTest", f"hello {i}".encode()))
                print(f"sent {r.msg_id} to queue {r.queue_id} offset {r.queue_offset}", flush=True)
        print(f"classic brokers running: --peers {peer_text!r} (Ctrl-C stops them)", flush=True)
        while all(p.poll() is None for p in procs):
            time.sleep(0.5)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
