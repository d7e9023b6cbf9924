"""Classic master/slave HA on RocketMQ 4.9.4's wire protocol (seed-spec §6): ``ha_service``
(HAService, AcceptSocketService), ``ha_connection`` (HAConnection), ``ha_client`` (HAClient),
``group_transfer_service`` (GroupTransferService)."""
