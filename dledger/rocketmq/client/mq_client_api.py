"""RocketMQ's MQClientAPIImpl, the part `dledger mq produce|consume|query --namesrv` uses: routes
from the name servers, sends, pulls, offsets and queries against brokers, over remoting, so the CLI works
against Java brokers as well as ours."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from dledger.rocketmq.remoting.netty_remoting_client import NettyRemotingClient
from dledger.rocketmq.remoting.protocol.message_batch import encode_messages
from dledger.rocketmq.remoting.protocol.request_headers import pull_message, send_message_header_v2
from dledger.rocketmq.remoting.protocol.topic_route_data import PERM_READ, PERM_WRITE, QueueData, TopicRouteData
from dledger.rocketmq.remoting.remoting_command import RemotingCommand
from dledger.rocketmq.remoting.request_code import RequestCode
from dledger.rocketmq.remoting.response_code import ResponseCode

AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
DEFAULT_TOPIC_QUEUE_NUMS = 4  # DefaultMQProducer.defaultTopicQueueNums


class MQClientException(Exception):
    """A broker or name server answered with an error code (``code``)."""

    def __init__(self, code: int, remark: str | None) -> None:
        super().__init__(f"{ResponseCode(code).name if code in ResponseCode._value2member_map_ else code}: {remark}")
        self.code = code


class MQClientAPI:
    def __init__(self, namesrv_addrs: Sequence[str], timeout: float = 10.0) -> None:
        self.namesrv_addrs = list(namesrv_addrs)
        self.timeout = timeout
        self.remoting = NettyRemotingClient()

    async def close(self) -> None:
        await self.remoting.close()

    async def topic_route(self, topic: str) -> TopicRouteData | None:
        """GET_ROUTEINFO_BY_TOPIC from the first name server that answers; None if none knows it."""
        last: Exception | None = None
        for addr in self.namesrv_addrs:
            try:
                r = await self.remoting.invoke(
                    addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}), self.timeout
                )
            except (ConnectionError, TimeoutError) as exc:
                last = exc
                continue
            if r.code == ResponseCode.TOPIC_NOT_EXIST:
                return None
            if r.code != ResponseCode.SUCCESS:
                raise MQClientException(r.code, r.remark)
            return TopicRouteData.decode(r.body)
        raise ConnectionError(f"no name server answered ({last})")

    async def write_queues(self, topic: str) -> list[tuple[str, int]]:
        """(master address, queue id) of every writable queue, the default topic's when the
        topic is new (the broker creates it on the first send)."""
        route = await self.topic_route(topic) or await self.topic_route(AUTO_CREATE_TOPIC_KEY_TOPIC)
        return _queues(route, PERM_WRITE, lambda q: q.write_queue_nums)

    async def read_queues(self, topic: str) -> list[tuple[str, int]]:
        route = await self.topic_route(topic)
        return _queues(route, PERM_READ, lambda q: q.read_queue_nums)

    async def send(
        self, addr: str, group: str, topic: str, queue_id: int, bodies: Sequence[bytes], properties: Sequence[str]
    ) -> RemotingCommand:
        """SEND_MESSAGE_V2 for one message, SEND_BATCH_MESSAGE for more; the broker's answer."""
        batch = len(bodies) > 1
        ext = send_message_header_v2(
            topic,
            queue_id,
            group=group,
            properties="WAIT\x01true" if batch else properties[0],
            queue_nums=DEFAULT_TOPIC_QUEUE_NUMS,
            batch=batch,
        )
        if batch:
            body = encode_messages(bodies, [p.encode("utf-8") for p in properties])
            req = RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, ext, body)
        else:
            req = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, bodies[0])
        return await self.remoting.invoke(addr, req, self.timeout)

    async def pull(
        self, addr: str, group: str, topic: str, queue_id: int, offset: int, max_nums: int, suspend_ms: int
    ) -> RemotingCommand:
        req = pull_message(topic, queue_id, offset, group=group, max_nums=max_nums, suspend_ms=suspend_ms)
        return await self.remoting.invoke(addr, req, self.timeout + suspend_ms / 1000.0)

    async def _offset(self, code: int, addr: str, ext: dict[str, str]) -> RemotingCommand:
        return await self.remoting.invoke(addr, RemotingCommand.request(code, ext), self.timeout)

    async def query_consumer_offset(self, addr: str, group: str, topic: str, queue_id: int) -> int:
        """The group's committed offset, or -1 when it has none."""
        ext = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id)}
        r = await self._offset(RequestCode.QUERY_CONSUMER_OFFSET, addr, ext)
        if r.code == ResponseCode.QUERY_NOT_FOUND:
            return -1
        if r.code != ResponseCode.SUCCESS:
            raise MQClientException(r.code, r.remark)
        return int((r.ext_fields or {})["offset"])

    async def min_offset(self, addr: str, topic: str, queue_id: int) -> int:
        r = await self._offset(RequestCode.GET_MIN_OFFSET, addr, {"topic": topic, "queueId": str(queue_id)})
        if r.code != ResponseCode.SUCCESS:
            raise MQClientException(r.code, r.remark)
        return int((r.ext_fields or {})["offset"])

    async def update_consumer_offset(self, addr: str, group: str, topic: str, queue_id: int, offset: int) -> None:
        ext = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id), "commitOffset": str(offset)}
        r = await self._offset(RequestCode.UPDATE_CONSUMER_OFFSET, addr, ext)
        if r.code != ResponseCode.SUCCESS:
            raise MQClientException(r.code, r.remark)

    async def query_message(self, addr: str, topic: str, key: str, max_num: int) -> bytes:
        """QUERY_MESSAGE by key (the index; mqadmin queryMsgByKey asks every master of the
        topic): the stored records back to back, empty when none matched."""
        ext = {
            "topic": topic,
            "key": key,
            "maxNum": str(max_num),
            "beginTimestamp": "0",
            "endTimestamp": str(2**63 - 1),
            "_UNIQUE_KEY_QUERY": "false",
        }
        r = await self.remoting.invoke(addr, RemotingCommand.request(RequestCode.QUERY_MESSAGE, ext), self.timeout)
        if r.code == ResponseCode.QUERY_NOT_FOUND:
            return b""
        if r.code != ResponseCode.SUCCESS:
            raise MQClientException(r.code, r.remark)
        return bytes(r.body or b"")

    async def view_message(self, addr: str, phys_offset: int) -> bytes:
        """VIEW_MESSAGE_BY_ID: the record at a commit-log offset (an offset message id's)."""
        req = RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(phys_offset)})
        r = await self.remoting.invoke(addr, req, self.timeout)
        if r.code != ResponseCode.SUCCESS:
            raise MQClientException(r.code, r.remark)
        return bytes(r.body or b"")

    async def master_addrs(self, topic: str) -> list[str]:
        """The masters (brokerId 0) of the brokers that hold the topic."""
        route = await self.topic_route(topic)
        if route is None:
            return []
        return [b.broker_addrs[0] for b in route.broker_datas if 0 in b.broker_addrs]


def _queues(route: TopicRouteData | None, perm: int, count: Callable[[QueueData], int]) -> list[tuple[str, int]]:
    if route is None:
        return []
    masters = {b.broker_name: b.broker_addrs.get(0) for b in route.broker_datas}
    out: list[tuple[str, int]] = []
    for q in sorted(route.queue_datas, key=lambda q: q.broker_name):
        addr = masters.get(q.broker_name)
        if addr and q.perm & perm:
            out.extend(zip(itertools.repeat(addr), range(count(q))))
    return out


__all__ = ["MQClientAPI", "MQClientException"]
