"""Who a Kafka connection is to the authorizer (broker/kafka/authorization.py): the connection's principal, asked
of the security service the HTTP middleware asks, so both doors decide alike; an open cluster allows all."""

from __future__ import annotations

from broker.kafka.authorization import KafkaAuthorizer
from broker.kafka.listeners import KafkaListener
from broker.kafka.network import Connection
from broker.security.authn import ANONYMOUS, Authenticator
from broker.security.authorizer import Acl
from broker.security.middleware import SecurityService
from broker.security.settings import SecuritySettings

SASL = KafkaListener("SASL_SSL", "127.0.0.1", 9093, "SASL_SSL")


def service() -> SecurityService:
    security = SecurityService(SecuritySettings(authorizer="acl", super_users=frozenset({"User:CN=admin"})), None)
    security.authorizer.replace({("Topic", "LITERAL"): {"orders": [Acl("User:alice", "Allow", "Write"),
                                                                   Acl("User:bob", "Allow", "Read", "10.0.0.9")]}})
    return security


def test_decisions_are_the_security_services_for_the_connections_principal_and_host() -> None:
    security = service()
    auth = KafkaAuthorizer(security)
    alice = Connection("a", SASL, "127.0.0.1", 1, principal="User:alice")
    bob = Connection("b", SASL, "127.0.0.1", 2, principal="User:bob")
    admin = Connection("c", SASL, "127.0.0.1", 3, principal="User:CN=admin")
    for conn in (alice, bob, admin, Connection("d", SASL, "127.0.0.1", 4)):
        for op in ("Write", "Read", "Describe"):
            assert auth.allowed(conn, op, "Topic", "orders") == security.allowed(conn.principal, conn.host, op,
                                                                                 "Topic", "orders")
    assert auth.allowed(alice, "Write", "Topic", "orders") and auth.allowed(alice, "Describe", "Topic", "orders")
    assert not auth.allowed(alice, "Read", "Topic", "orders")
    assert not auth.allowed(bob, "Read", "Topic", "orders")  # his ACL names another host
    assert auth.allowed(admin, "Read", "Topic", "anything")  # a super user
    assert auth.principal(Connection("d", SASL, "127.0.0.1", 4)) == ANONYMOUS
    assert auth.enforcing and auth.authenticator is security.authenticator


def test_an_open_cluster_allows_all_and_still_has_credentials_to_authenticate_with() -> None:
    users = Authenticator(lambda user: {}, None)
    auth = KafkaAuthorizer(None, users)
    assert not auth.enforcing and auth.authenticator is users
    assert auth.allowed(Connection("a", SASL, "127.0.0.1", 1), "Write", "Topic", "orders")
