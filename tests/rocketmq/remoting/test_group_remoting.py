"""A DLedger group's members register with the name server as RocketMQ's DLedger brokers do:
the leader as master (brokerId 0), the others as slaves; when the leader is killed, the new one
is master within seconds, and a producer following the route loses no acknowledged message."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from dledger.rocketmq.remoting import RemotingCommand, RequestCode, ResponseCode
from dledger.rocketmq.remoting.netty_remoting_client import NettyRemotingClient, RemotingConnectException
from dledger.rocketmq.remoting.remoting_serializable import decode as json_decode
from tests.rocketmq.remoting.processes import cluster, run
from tests.rocketmq.remoting.test_broker_remoting import QUEUES, _pull, _records, _send


async def _broker_addrs(c: NettyRemotingClient, namesrv: str) -> dict[int, str]:
    got = await c.invoke(namesrv, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}))
    if got.code != ResponseCode.SUCCESS:
        return {}
    datas = json_decode(got.body)["brokerDatas"]
    return {int(k): v for k, v in datas[0]["brokerAddrs"].items()} if datas else {}


async def _wait_master(
    c: NettyRemotingClient, namesrv: str, want: int, not_addr: str | None, timeout: float
) -> dict[int, str]:
    deadline = time.monotonic() + timeout
    addrs: dict[int, str] = {}
    while time.monotonic() < deadline:
        addrs = await _broker_addrs(c, namesrv)
        if 0 in addrs and addrs[0] != not_addr and len(addrs) >= want:
            return addrs
        await asyncio.sleep(0.1)
    raise AssertionError(f"no master other than {not_addr} with {want} brokers after {timeout}s: {addrs}")


def test_the_leader_is_master_and_a_killed_leaders_successor_takes_over_its_sends(tmp_path: Path) -> None:
    # A long period: only a registration on the role change puts a master in the route in time.
    with cluster(tmp_path, 3, [*QUEUES, "--register-name-server-period", "60000"]) as (namesrv, brokers):
        by_addr = {brokers.addr(m): m for m in brokers.ids}

        async def scenario() -> None:
            ns = NettyRemotingClient()
            producer = NettyRemotingClient()
            try:
                addrs = await _wait_master(ns, namesrv, 3, None, 20)
                master = addrs[0]
                # The slaves under their self id's number + 1 (n0 -> 1), as DLedgerRoleChangeHandler.
                assert sorted(addrs) == sorted([0] + [int(by_addr[a][1:]) + 1 for k, a in addrs.items() if k])
                acked: list[bytes] = []
                stop = asyncio.Event()

                async def produce() -> None:
                    n = 0
                    target = master
                    while not stop.is_set():
                        body = b"m%05d" % n
                        try:
                            r = await _send(producer, target, "KillTopic", body, "T", qid=n % 4)
                        except (ConnectionError, TimeoutError):
                            r = None
                        if r is not None and r.code == ResponseCode.SUCCESS:
                            acked.append(body)
                            n += 1
                            continue
                        # As the client: ask the name server again, send to its master.
                        cur = await _broker_addrs(ns, namesrv)
                        target = cur.get(0, target)
                        await asyncio.sleep(0.05)

                task = asyncio.ensure_future(produce())
                await asyncio.sleep(1.0)
                before = len(acked)
                brokers.kill(by_addr[master])  # kill -9 mid-send
                t0 = time.monotonic()
                addrs = await _wait_master(ns, namesrv, 2, master, 30)
                took = time.monotonic() - t0
                # Its connection to the name server closed: it is gone from the route at once.
                assert master not in addrs.values()
                while len(acked) < before + 20 and time.monotonic() - t0 < 30:
                    await asyncio.sleep(0.1)
                stop.set()
                await task
                assert len(acked) >= before + 20, (before, len(acked))
                # Registered at once on the role change, not at the next 30 s period.
                assert took < 10, took
                # Every acknowledged message is on the new master.
                new_master = addrs[0]
                seen: list[bytes] = []
                for qid in range(4):
                    offset = 0
                    while True:
                        got = await producer.invoke(new_master, _pull("KillTopic", qid, offset), timeout=10)
                        if got.code != ResponseCode.SUCCESS:
                            break
                        recs = _records(bytes(got.body))
                        seen += [r["body"] for r in recs]
                        offset = int((got.ext_fields or {})["nextBeginOffset"])
                assert set(acked) <= set(seen), sorted(set(acked) - set(seen))[:5]
            except RemotingConnectException:
                raise
            finally:
                await ns.close()
                await producer.close()

        run(scenario, timeout=180)


def test_a_restarted_name_server_has_the_broker_again_within_its_registration_period(tmp_path: Path) -> None:
    from tests.rocketmq.remoting.processes import Brokers, start_namesrv, stop

    ns_proc, port, _ = start_namesrv(tmp_path)
    namesrv = f"127.0.0.1:{port}"
    brokers = Brokers(tmp_path, namesrv, 1, [*QUEUES, "--register-name-server-period", "10000"])
    try:
        brokers.start_all()

        async def master(timeout: float) -> float:
            c = NettyRemotingClient()
            try:
                t0 = time.monotonic()
                await _wait_master(c, namesrv, 1, None, timeout)
                return time.monotonic() - t0
            finally:
                await c.close()

        run(lambda: master(20))
        stop(ns_proc)
        ns_proc, port, _ = start_namesrv(tmp_path, port)
        # Nothing survives the restart; the broker's next periodic registration brings it back.
        took = run(lambda: master(25))
        assert took <= 10 + 3, took
    finally:
        brokers.stop_all()
        stop(ns_proc)
