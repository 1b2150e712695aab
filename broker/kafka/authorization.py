"""Who a Kafka connection is and what it may do: the HTTP API's authorizer, asked with Kafka's operations.

A PLAINTEXT listener authenticates nobody, so every request on it is ``User:ANONYMOUS`` (as on Kafka), and the
host ACLs match is the client's address. Decisions are the broker's one authorizer's (``SecurityService``:
ACLs from ZooKeeper, super users, ``allow.everyone.if.no.acl.found``); an open cluster (no security service, or
``--authorizer none``) allows everything, as its HTTP API does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.kafka.network import Connection
from broker.security.authn import ANONYMOUS

if TYPE_CHECKING:
    from broker.security.middleware import SecurityService

TOPIC = "Topic"
TRANSACTIONAL_ID = "TransactionalId"


class KafkaAuthorizer:
    def __init__(self, security: SecurityService | None) -> None:
        self._security = security

    @property
    def enforcing(self) -> bool:
        return self._security is not None and self._security.enforce

    def principal(self, conn: Connection) -> str:
        return ANONYMOUS  # PLAINTEXT only: no authentication on the Kafka listener yet

    def allowed(self, conn: Connection, operation: str, resource_type: str, name: str) -> bool:
        if self._security is None:
            return True
        return self._security.allowed(self.principal(conn), conn.host, operation, resource_type, name)
