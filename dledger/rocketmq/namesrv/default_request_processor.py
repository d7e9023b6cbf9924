"""RocketMQ's namesrv DefaultRequestProcessor: the name server's answer to each request code,
with the header fields and bodies a 4.9.4 broker, client and mqadmin read."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from dledger.rocketmq.namesrv.kv_config_manager import KVConfigManager
from dledger.rocketmq.namesrv.route_info_manager import RouteInfoManager
from dledger.rocketmq.remoting import remoting_serializable
from dledger.rocketmq.remoting.netty_remoting_server import Channel
from dledger.rocketmq.remoting.protocol.register_broker_body import DataVersion, RegisterBrokerBody, crc32
from dledger.rocketmq.remoting.remoting_command import CURRENT_VERSION, RemotingCommand
from dledger.rocketmq.remoting.request_code import RequestCode
from dledger.rocketmq.remoting.response_code import ResponseCode

# NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG: its list is the body of a REGISTER_BROKER answer.
NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"
FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."
# TopicSysFlag
FLAG_UNIT = 0x1
FLAG_UNIT_SUB = 0x2


def _topic_list(topics: list[str], broker_addr: str | None = None) -> bytes:
    return remoting_serializable.encode_fastjson({"brokerAddr": broker_addr, "topicList": topics})


class DefaultRequestProcessor:
    def __init__(self, routes: RouteInfoManager, kv: KVConfigManager) -> None:
        self.routes = routes
        self.kv = kv

    def processors(self) -> dict[int, Callable[[RemotingCommand, Channel], Awaitable[RemotingCommand | None]]]:
        handlers = {
            RequestCode.PUT_KV_CONFIG: self.put_kv_config,
            RequestCode.GET_KV_CONFIG: self.get_kv_config,
            RequestCode.DELETE_KV_CONFIG: self.delete_kv_config,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self.get_kv_list_by_namespace,
            RequestCode.QUERY_DATA_VERSION: self.query_broker_topic_config,
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route_info_by_topic,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_broker_cluster_info,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self.add_write_perm,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topic_list,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
            RequestCode.GET_TOPICS_BY_CLUSTER: self.get_topics_by_cluster,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: self.get_system_topic_list,
            RequestCode.GET_UNIT_TOPIC_LIST: self.get_unit_topic_list,
            RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST: self.get_has_unit_sub_topic_list,
            RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: self.get_has_unit_sub_ununit_topic_list,
        }
        return {int(k): v for k, v in handlers.items()}

    async def unknown_code(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        """The name server's default processor. Deviation: Java's DefaultRequestProcessor returns
        null for a code it does not know (no answer, the client times out); ours answers
        REQUEST_CODE_NOT_SUPPORTED, and like Java nothing to a oneway request."""
        return req.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {req.code} not supported")

    # -- KV config -------------------------------------------------------------------------

    async def put_kv_config(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        ns, key = (req.ext_fields or {}).get("namespace"), (req.ext_fields or {}).get("key")
        if not ns or not key:
            return req.response(ResponseCode.SYSTEM_ERROR, "namespace or key is null")
        self.kv.put(ns, key, req.ext_str("value"))
        return req.response()

    async def get_kv_config(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        ns, key = req.ext_str("namespace"), req.ext_str("key")
        value = self.kv.get(ns, key)
        if value is not None:
            return req.response(ext_fields={"value": value})
        return req.response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {ns} Key: {key}", {})

    async def delete_kv_config(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        self.kv.delete(req.ext_str("namespace"), req.ext_str("key"))
        return req.response()

    async def get_kv_list_by_namespace(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        ns = req.ext_str("namespace")
        table = self.kv.list_by_namespace(ns)
        if table is None:
            return req.response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {ns}")
        return req.response(body=remoting_serializable.encode({"table": table}))

    # -- brokers ---------------------------------------------------------------------------

    async def register_broker(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        want_crc = req.ext_int("bodyCrc32", 0)
        if want_crc != 0 and crc32(req.body) != want_crc:
            return req.response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        # compressedRegister=true: RegisterBrokerBody.encode(true), deflated (CRC of those bytes).
        body = RegisterBrokerBody.decode(req.body, req.ext_bool("compressed")) if req.body else RegisterBrokerBody()
        result = self.routes.register_broker(
            req.ext_str("clusterName"),
            req.ext_str("brokerAddr"),
            req.ext_str("brokerName"),
            req.ext_int("brokerId"),
            req.ext_str("haServerAddr", ""),
            body.topic_config_table,
            body.data_version,
            body.filter_server_list if req.version >= 11 else None,  # V3_0_11: filter servers
            ch,
        )
        ext = {}
        if result.ha_server_addr is not None:
            ext["haServerAddr"] = result.ha_server_addr
        if result.master_addr is not None:
            ext["masterAddr"] = result.master_addr
        order = self.kv.list_by_namespace(NAMESPACE_ORDER_TOPIC_CONFIG)
        return req.response(
            ext_fields=ext, body=remoting_serializable.encode({"table": order}) if order is not None else b""
        )

    async def query_broker_topic_config(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        addr = req.ext_str("brokerAddr")
        version = DataVersion.from_json(remoting_serializable.decode(req.body)) if req.body else DataVersion()
        changed = self.routes.is_broker_topic_config_changed(addr, version)
        if not changed:
            self.routes.update_broker_info_update_timestamp(addr)
        ours = self.routes.query_broker_topic_config(addr)
        body = remoting_serializable.encode(ours.to_json()) if ours is not None else b""
        return req.response(ext_fields={"changed": "true" if changed else "false"}, body=body)

    async def unregister_broker(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        self.routes.unregister_broker(
            req.ext_str("clusterName"), req.ext_str("brokerAddr"), req.ext_str("brokerName"), req.ext_int("brokerId")
        )
        return req.response()

    async def wipe_write_perm(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        n = self.routes.operate_write_perm(req.ext_str("brokerName"), wipe=True)
        return req.response(ext_fields={"wipeTopicCount": str(n)})

    async def add_write_perm(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        n = self.routes.operate_write_perm(req.ext_str("brokerName"), wipe=False)
        return req.response(ext_fields={"addTopicCount": str(n)})

    # -- routes and topics -----------------------------------------------------------------

    async def get_route_info_by_topic(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        topic = req.ext_str("topic")
        route = self.routes.pickup_topic_route_data(topic)
        if route is None:
            return req.response(
                ResponseCode.TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: {topic}{FAQ}"
            )
        order = self.kv.get(NAMESPACE_ORDER_TOPIC_CONFIG, topic)
        route.order_topic_conf = order
        # A 4.9.4 client (or one that asks) gets standard JSON, quoted broker ids; older
        # ones fastjson's own form, as they parse it.
        standard = req.version >= CURRENT_VERSION or req.ext_bool("acceptStandardJsonOnly")
        return req.response(body=route.encode(quote_int_keys=standard))

    async def get_broker_cluster_info(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        return req.response(body=self.routes.get_all_cluster_info().encode())

    async def get_all_topic_list(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        return req.response(body=_topic_list(self.routes.get_all_topic_list()))

    async def delete_topic(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        cluster = (req.ext_fields or {}).get("clusterName") or None
        self.routes.delete_topic(req.ext_str("topic"), cluster)
        return req.response()

    async def get_topics_by_cluster(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        return req.response(body=_topic_list(self.routes.get_topics_by_cluster(req.ext_str("cluster"))))

    async def get_system_topic_list(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        topics, addr = self.routes.get_system_topic_list()
        return req.response(body=_topic_list(topics, addr))

    async def get_unit_topic_list(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        return req.response(body=_topic_list(self.routes.topics_by_sys_flag(lambda f: f & FLAG_UNIT)))

    async def get_has_unit_sub_topic_list(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        return req.response(body=_topic_list(self.routes.topics_by_sys_flag(lambda f: f & FLAG_UNIT_SUB)))

    async def get_has_unit_sub_ununit_topic_list(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        topics = self.routes.topics_by_sys_flag(lambda f: not f & FLAG_UNIT and f & FLAG_UNIT_SUB)
        return req.response(body=_topic_list(topics))


__all__ = ["NAMESPACE_ORDER_TOPIC_CONFIG", "DefaultRequestProcessor"]
