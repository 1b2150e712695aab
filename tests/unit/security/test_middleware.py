"""Who a request is, per listener: credentials only over TLS, SASL_SSL needs an identity, SSL may be anonymous,
and the forwarded-principal header is believed only from a broker (ClusterAction)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from broker.security.authn import ANONYMOUS, basic_header
from broker.security.authorizer import Acl
from broker.security.middleware import PRINCIPAL_HEADER, SecurityService
from broker.security.settings import SecuritySettings, parse_listeners
from odradek.protocol import scram
from odradek.protocol.errors import AuthenticationFailedError

LISTENERS = tuple(parse_listeners("PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093,SASL_SSL://127.0.0.1:9094"))


def _service() -> SecurityService:
    service = SecurityService(SecuritySettings(listeners=LISTENERS, super_users=frozenset({"User:CN=broker-1"})),
                              None)
    cred = scram.make_credential("SCRAM-SHA-256", "pw").encode()
    service.authenticator._lookup = lambda user: {"SCRAM-SHA-256": cred} if user == "alice" else {}
    service.authorizer.replace({("Cluster", "LITERAL"): {"kafka-cluster": [
        Acl("User:CN=broker-2", "Allow", "ClusterAction")]}})
    return service


def _request(port: int, headers: dict[str, str] | None = None, cert: dict[str, Any] | None = None) -> Any:
    extra = {"sockname": ("127.0.0.1", port), "peercert": cert}
    return SimpleNamespace(headers=headers or {}, transport=SimpleNamespace(get_extra_info=extra.get))


def _who(service: SecurityService, request: Any) -> str:
    return asyncio.run(service.authenticate(request, service.listener_of(request)))


def test_credentials_only_over_tls() -> None:
    s = _service()
    alice = {"Authorization": basic_header("alice", "pw")}
    with pytest.raises(AuthenticationFailedError, match="plaintext"):
        _who(s, _request(9092, alice))
    assert _who(s, _request(9092)) == ANONYMOUS
    assert _who(s, _request(9093, alice)) == "User:alice"
    assert _who(s, _request(9094, alice)) == "User:alice"


def test_sasl_ssl_needs_an_identity_ssl_may_be_anonymous() -> None:
    s = _service()
    # getpeercert() lists RDNs most general first; Kafka's principal (X500Principal.getName) is most specific first
    cert = {"subject": ((("organizationName", "acme"),), (("commonName", "carol"),))}
    assert _who(s, _request(9093)) == ANONYMOUS
    with pytest.raises(AuthenticationFailedError):
        _who(s, _request(9094))
    assert _who(s, _request(9094, cert=cert)) == "User:CN=carol,O=acme"


def test_forwarded_principal_only_from_brokers() -> None:
    s = _service()
    req = _request(9094, {PRINCIPAL_HEADER: "User:alice"})
    assert s.effective_principal(req, "User:mallory", "h") == "User:mallory"
    assert s.effective_principal(req, "User:CN=broker-2", "h") == "User:alice"  # ClusterAction ACL
    assert s.effective_principal(req, "User:CN=broker-1", "h") == "User:alice"  # super user


def test_allow_everyone_if_no_acl_found_lets_no_one_speak_for_another() -> None:
    """With no cluster ACL at all, allow.everyone.if.no.acl.found would grant ClusterAction to every principal:
    the forwarded-principal header must still be believed only from a broker (super user or an explicit ACL)."""
    s = SecurityService(SecuritySettings(listeners=LISTENERS, super_users=frozenset({"User:CN=broker-1"}),
                                         allow_everyone_if_no_acl_found=True), None)
    req = _request(9094, {PRINCIPAL_HEADER: "User:alice"})
    assert s.allowed("User:mallory", "h", "ClusterAction", "Cluster", "kafka-cluster")  # the fallback says yes
    assert s.effective_principal(req, "User:mallory", "h") == "User:mallory"
    assert s.effective_principal(req, "User:CN=broker-1", "h") == "User:alice"
