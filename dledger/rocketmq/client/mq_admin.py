"""MQAdminExt's broker calls for a classic broker: ``update_broker_role`` (as ``mqadmin
updateBrokerConfig -k brokerRole``, which here takes effect at once: changeToMaster or
changeToSlave on the running broker)."""

from __future__ import annotations

import asyncio
from typing import Any

from dledger.net.transport import RpcClient
from dledger.rocketmq.wire import MessageRequestCode


async def update_broker_role_async(
    addr: str, role: str, master_ha: str | None = None, *, timeout: float = 10.0
) -> dict[str, Any]:
    """Make the classic broker at ``addr`` ``role`` (ASYNC_MASTER, SYNC_MASTER or SLAVE, a slave
    following ``master_ha``); returns its new role. Raises DLedgerError on refusal."""
    body: dict[str, Any] = {"brokerRole": role}
    if master_ha is not None:
        body["haMasterAddress"] = master_ha
    async with RpcClient(timeout=timeout) as rpc:
        resp = await rpc.call(addr, MessageRequestCode.UPDATE_BROKER_CONFIG, body, timeout=timeout)
    return dict(resp.check().body)


def update_broker_role(addr: str, role: str, master_ha: str | None = None, *, timeout: float = 10.0) -> dict[str, Any]:
    """The blocking twin of ``update_broker_role_async``."""
    return asyncio.run(update_broker_role_async(addr, role, master_ha, timeout=timeout))
