"""SCRAM credentials (Kafka's stored form, RFC 5802 keys) and bearer tokens: the checks the broker relies on."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from broker.security.authn import Authenticator, TokenSigner, basic_header
from odradek.protocol import scram
from odradek.protocol.errors import AuthenticationFailedError


def test_credential_is_rfc5802_and_kafka_shaped() -> None:
    salt = b"0123456789abcdef"
    cred = scram.make_credential("SCRAM-SHA-256", "pencil", salt=salt)
    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", salt, 4096)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    assert cred.stored_key == hashlib.sha256(client_key).digest()
    assert cred.server_key == hmac.new(salted, b"Server Key", "sha256").digest()
    text = cred.encode()
    assert text == (f"salt={base64.b64encode(salt).decode()},stored_key={base64.b64encode(cred.stored_key).decode()},"
                    f"server_key={base64.b64encode(cred.server_key).decode()},iterations=4096")
    assert scram.ScramCredential.decode(text) == cred


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_verify_accepts_the_password_only(mechanism: str) -> None:
    cred = scram.make_credential(mechanism, "s3cret")
    assert scram.verify(mechanism, "s3cret", cred)
    assert not scram.verify(mechanism, "s3cret ", cred)
    assert not scram.verify(mechanism, "", cred)


def test_alter_syntax_salts_and_never_keeps_the_password() -> None:
    stored = scram.parse_alter_value("SCRAM-SHA-512", "[iterations=8192,password=horse-battery,with=comma]")
    assert "horse-battery" not in stored and "password" not in stored  # "-" is not a base64 character
    cred = scram.ScramCredential.decode(stored)
    assert cred.iterations == 8192 and scram.verify("SCRAM-SHA-512", "horse-battery", cred)
    bare = scram.parse_alter_value("SCRAM-SHA-256", "password=horse-battery")  # the configs tool drops the []
    assert scram.verify("SCRAM-SHA-256", "horse-battery", scram.ScramCredential.decode(bare))
    with pytest.raises(ValueError):
        scram.parse_alter_value("SCRAM-SHA-256", "[iterations=10,password=pw]")
    with pytest.raises(ValueError):
        scram.parse_alter_value("SCRAM-SHA-256", "[secret=pw]")
    with pytest.raises(ValueError):
        scram.parse_alter_value("SCRAM-SHA-256", "not a credential")


def _authenticator(creds: dict[str, dict[str, str]], signer: TokenSigner | None = None) -> Authenticator:
    return Authenticator(lambda user: creds.get(user, {}), signer)


def test_basic_header_checks_stored_key() -> None:
    creds = {"alice": {"SCRAM-SHA-256": scram.make_credential("SCRAM-SHA-256", "pw").encode(),
                       "producer_byte_rate": "100"}}
    auth = _authenticator(creds)
    assert auth.from_header(basic_header("alice", "pw")) == "User:alice"
    assert auth.from_header(basic_header("alice", "pw")) == "User:alice"  # remembered, same answer
    for bad in (basic_header("alice", "wrong"), basic_header("bob", "pw"), "Basic !!!", "Basic " +
                base64.b64encode(b"nocolon").decode(), "Digest x", "Bearer nope"):
        with pytest.raises(AuthenticationFailedError):
            auth.from_header(bad)


def test_tokens_expire_and_cannot_be_forged() -> None:
    now = [1000.0]
    signer = TokenSigner(b"k" * 32, lifetime_ms=60_000, clock=lambda: now[0])
    auth = _authenticator({}, signer)
    token, life = signer.issue("User:alice")
    assert life == 60_000 and auth.from_header(f"Bearer {token}") == "User:alice"
    assert signer.issue("User:alice", lifetime_ms=10**9)[1] == 60_000  # never longer than the broker's lifetime
    prefix, _payload, sig = token.split(".")
    forged_payload = base64.urlsafe_b64encode(b'{"sub":"User:admin","exp":99999999999999}').rstrip(b"=").decode()
    with pytest.raises(AuthenticationFailedError):
        auth.from_header(f"Bearer {prefix}.{forged_payload}.{sig}")
    other = TokenSigner(b"x" * 32, 60_000, clock=lambda: now[0]).issue("User:alice")[0]
    with pytest.raises(AuthenticationFailedError):
        auth.from_header(f"Bearer {other}")
    now[0] += 61.0
    with pytest.raises(AuthenticationFailedError, match="expired"):
        auth.from_header(f"Bearer {token}")
