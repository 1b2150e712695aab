"""Broker dynamic configs and client/user quotas: the service the HTTP API calls (the API never imports zk/).

As broker/admin/topics.py does for topics, this sits between the handlers (broker/api/entity_configs.py) and
the ZooKeeper verbs (zk/configs.py, which validate names, keys and values and write the config node and its
change notification in one multi). Methods block on ZooKeeper; handlers call them with ``asyncio.to_thread``.
"""

from __future__ import annotations

from zk.client import ZkClient
from zk.configs import DEFAULT_ENTITY, EntityConfigs

__all__ = ["DEFAULT_ENTITY", "EntityConfigAdmin"]


class EntityConfigAdmin(EntityConfigs):
    """describe / list_entities / alter of /config/{brokers,clients,users}/<name> (see zk.configs)."""

    def __init__(self, zk: ZkClient) -> None:
        super().__init__(zk)
