"""The Kafka listeners' SASL mechanisms (broker/security/sasl.py) against stored SCRAM credentials: RFC 7677's own
exchange byte for byte, SCRAM-SHA-512 and PLAIN with a client written from the RFCs, and every way an exchange
must fail."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac

import pytest

from broker.security import sasl
from broker.security.authn import Authenticator
from broker.security.sasl import PlainServer, ScramServer, new_mechanism, parse_mechanisms
from odradek.protocol import scram
from odradek.protocol.errors import AuthenticationFailedError

RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
USERS: dict[str, dict[str, str]] = {
    "user": {"SCRAM-SHA-256": scram.make_credential("SCRAM-SHA-256", "pencil", 4096, RFC_SALT).encode()},
    "alice": {"SCRAM-SHA-512": scram.make_credential("SCRAM-SHA-512", "alice-pw").encode()},
    "a,b=c": {"SCRAM-SHA-256": scram.make_credential("SCRAM-SHA-256", "comma-pw").encode()},
}


def store() -> Authenticator:
    return Authenticator(lambda user: USERS.get(user, {}), None)


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


class ScramClient:
    """RFC 5802's client side, as librdkafka and the Java client run it."""

    def __init__(self, mechanism: str, user: str, password: str, nonce: str = "fyko+d2lbbFgONRv9qkxdawL",
                 authzid: str = "") -> None:
        self.algo = scram.MECHANISMS[mechanism]
        self.password = password
        self.gs2 = f"n,{'a=' + authzid if authzid else ''},"
        name = user.replace("=", "=3D").replace(",", "=2C")
        self.bare = f"n={name},r={nonce}"

    def first(self) -> bytes:
        return (self.gs2 + self.bare).encode()

    def final(self, server_first: bytes, *, tamper: bool = False, nonce: str | None = None) -> bytes:
        fields = dict(part.split("=", 1) for part in server_first.decode().split(","))
        salted = hashlib.pbkdf2_hmac(self.algo, self.password.encode(), base64.b64decode(fields["s"]),
                                     int(fields["i"]))
        client_key = hmac.new(salted, b"Client Key", self.algo).digest()
        stored_key = hashlib.new(self.algo, client_key).digest()
        without_proof = f"c={base64.b64encode(self.gs2.encode()).decode()},r={nonce or fields['r']}"
        self.auth_message = f"{self.bare},{server_first.decode()},{without_proof}".encode()
        signature = hmac.new(stored_key, self.auth_message, self.algo).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        if tamper:
            proof = bytes([proof[0] ^ 1]) + proof[1:]
        self.server_key = hmac.new(salted, b"Server Key", self.algo).digest()
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def expected_server_final(self) -> bytes:
        return b"v=" + base64.b64encode(hmac.new(self.server_key, self.auth_message, self.algo).digest())


def test_rfc7677_exchange_byte_for_byte(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sasl.secrets, "token_urlsafe", lambda n: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    server = ScramServer("SCRAM-SHA-256", store())
    first = run(server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"))
    assert first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    assert not server.complete
    final = run(server.evaluate(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                                b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="))
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.principal == "User:user"


@pytest.mark.parametrize(("mechanism", "user", "password", "authzid"), [
    ("SCRAM-SHA-512", "alice", "alice-pw", ""),
    ("SCRAM-SHA-512", "alice", "alice-pw", "alice"),  # an authorization id that is the user is fine
    ("SCRAM-SHA-256", "a,b=c", "comma-pw", ""),  # saslname escaping (=2C, =3D)
])
def test_a_client_with_the_password_completes_and_checks_the_servers_signature(
        mechanism: str, user: str, password: str, authzid: str) -> None:
    server, client = ScramServer(mechanism, store()), ScramClient(mechanism, user, password, authzid=authzid)
    server_first = run(server.evaluate(client.first()))
    assert server_first.startswith(b"r=fyko+d2lbbFgONRv9qkxdawL") and len(server_first.split(b",")[0]) > 30
    assert run(server.evaluate(client.final(server_first))) == client.expected_server_final()
    assert (server.complete, server.principal) == (True, f"User:{user}")


def failure(server: object, *messages: bytes) -> str:
    with pytest.raises(AuthenticationFailedError) as e:
        for m in messages:
            run(server.evaluate(m))  # type: ignore[attr-defined]
    assert not server.complete  # type: ignore[attr-defined]
    return e.value.message


def test_every_credential_failure_says_the_same_thing() -> None:
    invalid = "Authentication failed during authentication due to invalid credentials with SASL mechanism"
    wrong = ScramClient("SCRAM-SHA-512", "alice", "not-her-password")
    server = ScramServer("SCRAM-SHA-512", store())
    first = run(server.evaluate(wrong.first()))
    assert failure(server, wrong.final(first)) == f"{invalid} SCRAM-SHA-512"
    right = ScramClient("SCRAM-SHA-512", "alice", "alice-pw")
    server = ScramServer("SCRAM-SHA-512", store())
    assert failure(server, right.first(), b"").startswith("Invalid SCRAM client final message")
    server = ScramServer("SCRAM-SHA-512", store())
    first = run(server.evaluate(right.first()))
    assert failure(server, right.final(first, tamper=True)) == f"{invalid} SCRAM-SHA-512"
    assert failure(ScramServer("SCRAM-SHA-512", store()), b"n,,n=nobody,r=abc") == f"{invalid} SCRAM-SHA-512"
    # alice has no SCRAM-SHA-256 credential: the same answer as an unknown user
    assert failure(ScramServer("SCRAM-SHA-256", store()), b"n,,n=alice,r=abc") == f"{invalid} SCRAM-SHA-256"
    assert failure(ScramServer("SCRAM-SHA-512", store()), b"n,,n=alice,r=abc,tokenauth=true") == \
        f"{invalid} SCRAM-SHA-512"  # no delegation tokens


def test_a_final_nonce_that_ends_with_the_servers_is_accepted_as_kafka_3_does() -> None:
    client = ScramClient("SCRAM-SHA-512", "alice", "alice-pw")
    server = ScramServer("SCRAM-SHA-512", store())
    first = run(server.evaluate(client.first()))
    nonce = first.decode().split(",")[0][2:]
    final = client.final(first, nonce="fyko+d2lbbFgONRv9qkxdawL" + nonce)  # librdkafka 2.0.x: client nonce twice
    assert run(server.evaluate(final)) == client.expected_server_final() and server.complete


def test_protocol_errors_fail_with_what_was_wrong() -> None:
    client = ScramClient("SCRAM-SHA-512", "alice", "alice-pw")
    for first in (b"y,,n=alice,r=abc", b"p=tls-unique,,n=alice,r=abc", b"n=alice,r=abc", b"\xff\xfe"):
        assert "Invalid" in failure(ScramServer("SCRAM-SHA-512", store()), first)
    assert "authorization id" in failure(ScramServer("SCRAM-SHA-512", store()), b"n,a=bob,n=alice,r=abc")
    assert "malformed user name" in failure(ScramServer("SCRAM-SHA-512", store()), b"n,,n=al=ice,r=abc")
    server = ScramServer("SCRAM-SHA-512", store())
    first = run(server.evaluate(client.first()))
    assert "nonce" in failure(server, client.final(first, nonce="fyko+d2lbbFgONRv9qkxdawLother"))
    server = ScramServer("SCRAM-SHA-512", store())
    first = run(server.evaluate(client.first()))
    final = client.final(first).replace(b"c=biws", b"c=eSws")  # "y,," instead of what the client-first said
    assert "channel binding" in failure(server, final)
    server = ScramServer("SCRAM-SHA-512", store())
    first = run(server.evaluate(client.first()))
    run(server.evaluate(client.final(first)))
    with pytest.raises(AuthenticationFailedError, match="already complete"):
        run(server.evaluate(b"anything"))


def test_a_store_that_cannot_be_read_or_refuses_the_name_fails_the_exchange() -> None:
    from odradek.protocol.errors import InvalidRequestError

    def refuse(user: str) -> dict[str, str]:
        raise InvalidRequestError("the users entity name must not contain control characters")

    def away(user: str) -> dict[str, str]:
        raise ConnectionError("ZooKeeper is away")

    assert "invalid user name" in failure(ScramServer("SCRAM-SHA-256", Authenticator(refuse, None)),
                                          b"n,,n=a\x01,r=abc")
    assert "cannot be read" in failure(ScramServer("SCRAM-SHA-256", Authenticator(away, None)), b"n,,n=a,r=abc")
    assert failure(PlainServer(Authenticator(away, None)), b"\0alice\0pw") == \
        "Authentication failed: Invalid username or password"


def test_plain_checks_the_password_against_the_stored_scram_credential() -> None:
    server = PlainServer(store())
    assert run(server.evaluate(b"\0alice\0alice-pw")) == b""
    assert (server.complete, server.principal) == (True, "User:alice")
    assert run(PlainServer(store()).evaluate(b"alice\0alice\0alice-pw")) == b""
    cases = {
        b"\0alice\0wrong": "Authentication failed: Invalid username or password",
        b"\0nobody\0pw": "Authentication failed: Invalid username or password",
        b"bob\0alice\0alice-pw": "Client requested an authorization id that is different from username",
        b"\0\0pw": "username not specified",
        b"\0alice\0": "password not specified",
        b"alice\0alice-pw": "expected 3 tokens, got 2",
        b"\xff\0a\0b": "not UTF-8",
    }
    for token, message in cases.items():
        assert message in failure(PlainServer(store()), token)


def test_mechanisms_are_chosen_from_those_served() -> None:
    assert parse_mechanisms("scram-sha-512, PLAIN,PLAIN") == ("SCRAM-SHA-512", "PLAIN")
    for bad in ("GSSAPI", "", "PLAIN,OAUTHBEARER"):
        with pytest.raises(ValueError, match="--kafka-sasl-enabled-mechanisms"):
            parse_mechanisms(bad)
    assert isinstance(new_mechanism("PLAIN", store()), PlainServer)
    assert isinstance(new_mechanism("SCRAM-SHA-256", store()), ScramServer)
