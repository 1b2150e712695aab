"""FindCoordinator over Kafka's wire protocol: which broker coordinates a consumer group (key type GROUP) or a
transactional id (key type TRANSACTION), named by its address on the listener the request came on.

Who coordinates a key is whoever holds its coordinator znode; a key nobody coordinates is claimed by this broker
on the spot (the group coordinator's and the transaction coordinator's ``locate``), as a Kafka client that asks
is about to send its group or transaction requests there. v0-v3 ask for one key, v4+ for a batch (KIP-699), each
answered on its own.

Answers, as Kafka's: Describe on the group (GROUP_AUTHORIZATION_FAILED) or on the transactional id
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED) is required; an id this broker cannot keep is INVALID_GROUP_ID or
INVALID_REQUEST; a key type other than GROUP and TRANSACTION (share groups, KIP-932) is INVALID_REQUEST; a
coordinator with no address on this listener, or ZooKeeper out of reach, is COORDINATOR_NOT_AVAILABLE
(retriable: the client asks again).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from broker.kafka import codec
from broker.kafka.authorization import TRANSACTIONAL_ID, KafkaAuthorizer
from broker.kafka.codec import Request, make, nested
from broker.kafka.errors import code, coordinator_typed
from broker.kafka.groups import NO_THROTTLE, Handler, group_refusal
from broker.kafka.network import Connection
from odradek.protocol.errors import (
    CoordinatorNotAvailableError,
    InvalidRequestError,
    OdradekError,
    TransactionalIdAuthorizationFailedError,
)

if TYPE_CHECKING:
    from broker.group_router import GroupRouter
    from broker.metadata.cache import MetadataCache
    from broker.transaction_router import TransactionRouter

FIND_COORDINATOR = 10
GROUP_KEY = 0
TRANSACTION_KEY = 1
_TXN_ID = re.compile(r"[A-Za-z0-9._-]{1,249}")  # the ids the transaction coordinator keeps (a ZooKeeper name)


class CoordinatorCluster(Protocol):
    """What FindCoordinator uses of the broker (``broker.server.Broker`` is one)."""

    group_router: GroupRouter
    txn_router: TransactionRouter


class KafkaCoordinators:
    def __init__(self, cluster: CoordinatorCluster, cache: MetadataCache, authorizer: KafkaAuthorizer) -> None:
        self._cluster = cluster
        self._cache = cache
        self._auth = authorizer

    def handlers(self) -> dict[int, Handler]:
        return {FIND_COORDINATOR: self.handle_find_coordinator}

    async def handle_find_coordinator(self, conn: Connection, request: Request) -> Any:
        version = request.header.api_version
        body = request.body
        cls = codec.response_class(FIND_COORDINATOR, version)
        key_type = int(getattr(body, "key_type", GROUP_KEY))
        if version >= 4:
            answers = [await self._find(conn, key_type, str(key)) for key in body.coordinator_keys]
            coordinator_cls = nested(cls, "Coordinator")
            return make(cls, throttle_time=NO_THROTTLE, coordinators=tuple(
                make(coordinator_cls, key=key, node_id=node, host=host, port=port, error_code=code(error),
                     error_message=None if error is None else error.message)
                for key, (node, host, port, error) in zip(body.coordinator_keys, answers, strict=True)))
        node, host, port, error = await self._find(conn, key_type, str(body.key))
        return make(cls, throttle_time=NO_THROTTLE, error_code=code(error),
                    error_message=None if error is None else error.message, node_id=node, host=host, port=port)

    async def _find(self, conn: Connection, key_type: int, key: str) -> tuple[int, str, int, OdradekError | None]:
        error: OdradekError | None
        locate: Callable[[str], Awaitable[int]]
        if key_type == GROUP_KEY:
            error = group_refusal(self._auth, conn, "Describe", key)
            locate = self._cluster.group_router.locate
        elif key_type == TRANSACTION_KEY:
            error = None
            if not _TXN_ID.fullmatch(key) or key in (".", ".."):
                error = InvalidRequestError(f"transactional id must be 1 to 249 characters of [A-Za-z0-9._-], "
                                            f"not {key!r}")
            elif not self._auth.allowed(conn, "Describe", TRANSACTIONAL_ID, key):
                error = TransactionalIdAuthorizationFailedError(
                    f"{self._auth.principal(conn)} may not Describe transactional id {key}")
            locate = self._cluster.txn_router.coordinator.locate
        else:
            return -1, "", -1, InvalidRequestError(f"coordinator key type {key_type} is not GROUP (0) or "
                                                   "TRANSACTION (1)")
        if error is not None:
            return -1, "", -1, error
        try:
            node = await locate(key)
        except Exception as e:
            return -1, "", -1, coordinator_typed(e, f"find the coordinator of {key!r}")
        endpoint = self._endpoint(node, conn.listener.name)
        if endpoint is None:
            return -1, "", -1, CoordinatorNotAvailableError(
                f"the coordinator of {key!r} (broker {node}) has no live address on listener {conn.listener.name}")
        return node, endpoint[0], endpoint[1], None

    def _endpoint(self, broker_id: int, listener: str) -> tuple[str, int] | None:
        info = self._cache.brokers.get(broker_id)
        if info is None:
            return None
        return next(((e.host, e.port) for e in info.kafka_endpoints if e.listener == listener), None)
