"""Which broker holds a REST consumer instance, found in one step, so a request that reaches another broker is
forwarded to the holder in one hop (never by asking brokers in turn).

Two sources, both fixed when the instance is created: an id the broker generates names its broker
(``rest-consumer-<broker id>-<uuid>``); a name the client chose is written to ZooKeeper (zk/rest_consumers.py)
by the holder. A client may not choose a name of the generated form that names another broker.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid

from zk import rest_consumers as registry
from zk.client import ZkClient

log = logging.getLogger(__name__)

_GENERATED = re.compile(r"^rest-consumer-(\d+)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def generated_name(broker_id: int) -> str:
    return f"rest-consumer-{broker_id}-{uuid.uuid4()}"


def holder_in_name(name: str) -> int | None:
    """The broker a generated instance id names; None for a name the client chose."""
    m = _GENERATED.match(name)
    return int(m.group(1)) if m else None


class ConsumerLocator:
    def __init__(self, zk: ZkClient, broker_id: int) -> None:
        self._zk = zk
        self._broker_id = broker_id

    async def created(self, group: str, name: str) -> None:
        """Record a client-named instance held here. A failure is logged, not raised: the instance still works
        through its ``base_uri``; only forwarding from other brokers cannot find it."""
        if holder_in_name(name) is not None:
            return
        try:
            await asyncio.to_thread(registry.register_instance, self._zk, group, name, self._broker_id)
        except Exception as e:
            log.warning("cannot record consumer instance %s/%s in ZooKeeper: %s", group, name, e)

    async def deleted(self, group: str, name: str) -> None:
        if holder_in_name(name) is not None:
            return
        try:
            await asyncio.to_thread(registry.unregister_instance, self._zk, group, name, self._broker_id)
        except Exception as e:
            log.warning("cannot remove consumer instance %s/%s from ZooKeeper: %s", group, name, e)

    async def holder(self, group: str, name: str) -> int | None:
        """The broker that holds the instance, or None when no broker is known to."""
        found = holder_in_name(name)
        if found is not None:
            return found
        return await asyncio.to_thread(registry.instance_holder, self._zk, group, name)
