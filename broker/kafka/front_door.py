"""One broker's Kafka front door: ``KafkaApis`` over the broker's services, behind the socket server.

The broker builds it over the services its HTTP API uses too (the produce, fetch and offsets services, the
transaction router, the metadata cache, the security service), with the broker's one fetch-session cache
(KIP-227) and its request counters in /metrics, and starts it before registering in ZooKeeper,
as it binds HTTP first: a port clash then fails startup before anyone is told the address. It is stopped at
shutdown with the HTTP server, closing every Kafka connection.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from broker.fetch.sessions import FetchSessionCache
from broker.kafka.apis import KafkaApis
from broker.kafka.authorization import KafkaAuthorizer
from broker.kafka.network import KafkaServer
from broker.kafka.partitions import PartitionServices
from broker.kafka.quotas import KafkaQuotas
from broker.kafka.request_metrics import MeteredDispatch
from broker.kafka.sasl import SaslGate
from broker.security.authn import Authenticator
from broker.security.listeners import kafka_server_context

if TYPE_CHECKING:
    from broker.server import Broker


class KafkaFrontDoor:
    def __init__(self, broker: Broker) -> None:
        config = broker.config
        self.fetch_sessions = FetchSessionCache(config.max_incremental_fetch_session_cache_slots,
                                                config.min_incremental_fetch_session_eviction_ms)
        broker.metrics.watch_fetch_sessions(self.fetch_sessions.stats)
        leaders = PartitionServices(broker.produce, broker.fetches, broker.offsets, self.fetch_sessions,
                                    broker.txn_router)
        # SASL checks /config/users whether or not an authorizer runs (then without one: all is allowed).
        users = None if broker.security else Authenticator(functools.partial(broker.entity_configs.describe, "users"),
                                                           None)
        authorizer = KafkaAuthorizer(broker.security, users)
        self.apis = KafkaApis(broker, broker.cache, leaders, authorizer, config)
        # SASL gate (authenticate first) -> client quotas (Produce, Fetch) -> KafkaApis
        dispatch = SaslGate(KafkaQuotas(self.apis.handle, broker.quotas).dispatch, authorizer.authenticator,
                            config.kafka_sasl_mechanisms).dispatch
        written = broker.metrics.kafka_response_bytes.labels("write")
        sendfile = broker.metrics.kafka_response_bytes.labels("sendfile")

        def sent_bytes(through_transport: int, with_sendfile: int) -> None:
            written.inc(through_transport)
            if with_sendfile:
                sendfile.inc(with_sendfile)

        self.server = KafkaServer(config.kafka_listeners, MeteredDispatch(dispatch, broker.metrics).dispatch,
                                  max_request_bytes=config.socket_request_max_bytes,
                                  idle_timeout_ms=config.connections_max_idle_ms,
                                  ssl_context=kafka_server_context(config), sent_bytes=sent_bytes)

    async def start(self) -> None:
        """Bind every Kafka listener (OSError naming the address when one cannot be bound)."""
        await self.server.start()

    async def stop(self) -> None:
        await self.server.stop()
