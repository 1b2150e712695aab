"""One broker's Kafka front door: ``KafkaApis`` over the broker's services, behind the socket server.

The broker builds it over the services its HTTP API uses too (the leader router, the produce and fetch services,
the replica manager, the metadata cache, the security service) and starts it before registering in ZooKeeper,
as it binds HTTP first: a port clash then fails startup before anyone is told the address. It is stopped at
shutdown with the HTTP server, closing every Kafka connection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.kafka.apis import KafkaApis
from broker.kafka.authorization import KafkaAuthorizer
from broker.kafka.network import KafkaServer
from broker.kafka.partitions import LeaderPartitions

if TYPE_CHECKING:
    from broker.server import Broker


class KafkaFrontDoor:
    def __init__(self, broker: Broker) -> None:
        config = broker.config
        leaders = LeaderPartitions(broker.router, broker.replicas, broker.cache, broker.produce, broker.fetches)
        self.apis = KafkaApis(broker, broker.cache, leaders, KafkaAuthorizer(broker.security), config)
        self.server = KafkaServer(config.kafka_listeners, self.apis.handle,
                                  max_request_bytes=config.socket_request_max_bytes,
                                  idle_timeout_ms=config.connections_max_idle_ms)

    async def start(self) -> None:
        """Bind every Kafka listener (OSError naming the address when one cannot be bound)."""
        await self.server.start()

    async def stop(self) -> None:
        await self.server.stop()
