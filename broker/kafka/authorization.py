"""Who a Kafka connection is and what it may do: the HTTP API's authorizer, asked with Kafka's operations.

The principal is the connection's (broker/kafka/network.py): ``User:ANONYMOUS`` on PLAINTEXT (as on Kafka), the
client certificate's subject on SSL (``User:CN=...``, the HTTP side's mapping; ANONYMOUS without one), and the
SASL user on SASL_PLAINTEXT and SASL_SSL (``User:<name>``, as HTTP Basic names the same SCRAM user). The host ACLs
match is the client's address. Decisions are the broker's one authorizer's (``SecurityService``: ACLs from
ZooKeeper, super users, ``allow.everyone.if.no.acl.found``), so a Kafka request and an HTTP request by the same
principal get the same answer; an open cluster (no security service, or ``--authorizer none``) allows
everything, as its HTTP API does.

``authenticator`` is what the SASL mechanisms check passwords and proofs against (broker/security/authn.py): the
security service's when there is one, else one over the same ``/config/users`` credentials built by the front
door, since Kafka authenticates on a SASL listener whether or not an authorizer is configured.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.kafka.network import Connection
from broker.security.authn import ANONYMOUS, Authenticator

if TYPE_CHECKING:
    from broker.security.middleware import SecurityService

TOPIC = "Topic"
GROUP = "Group"
CLUSTER = "Cluster"
TRANSACTIONAL_ID = "TransactionalId"
CLUSTER_NAME = "kafka-cluster"


class KafkaAuthorizer:
    def __init__(self, security: SecurityService | None, authenticator: Authenticator | None = None) -> None:
        self._security = security
        self._authenticator = authenticator

    @property
    def authenticator(self) -> Authenticator | None:
        if self._authenticator is not None or self._security is None:
            return self._authenticator
        return self._security.authenticator

    @property
    def enforcing(self) -> bool:
        return self._security is not None and self._security.enforce

    def principal(self, conn: Connection) -> str:
        return conn.principal or ANONYMOUS

    def allowed(self, conn: Connection, operation: str, resource_type: str, name: str) -> bool:
        if self._security is None:
            return True
        return self._security.allowed(self.principal(conn), conn.host, operation, resource_type, name)
