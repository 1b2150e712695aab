"""SCRAM-SHA-256/512 credentials as Kafka stores them in ``/config/users/<user>`` (RFC 5802 keys).

Stored value (Kafka's ``ScramCredentialUtils``): ``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=4096``
under the config key ``SCRAM-SHA-256`` or ``SCRAM-SHA-512``. The broker never stores or sees a password at rest:
it keeps ``StoredKey = H(HMAC(Hi(password, salt, i), "Client Key"))``, and checks a password presented over TLS
(HTTP Basic) by recomputing the client key and comparing its hash with ``stored_key`` in constant time. That is
the check a SCRAM exchange makes, without the round trips an HTTP request cannot hold.

``ScramClient`` is RFC 5802's client side (as Kafka's ``ScramSaslClient``), for a broker authenticating to another
broker's SASL listener (broker/kafka/channel.py); the server side is broker/security/sasl.py's ``ScramServer``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
from dataclasses import dataclass

from odradek.protocol.errors import AuthenticationFailedError

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
DEFAULT_ITERATIONS = 4096
MIN_ITERATIONS = 4096  # Kafka's minimum for SCRAM credentials
_ALTER = re.compile(r"^\[(?P<body>.*)\]$")


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def encode(self) -> str:
        b64 = base64.b64encode
        return (f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
                f"server_key={b64(self.server_key).decode()},iterations={self.iterations}")

    @staticmethod
    def decode(value: str) -> ScramCredential:
        fields = dict(part.split("=", 1) for part in value.split(",") if "=" in part)
        try:
            return ScramCredential(base64.b64decode(fields["salt"]), base64.b64decode(fields["stored_key"]),
                                   base64.b64decode(fields["server_key"]), int(fields["iterations"]))
        except (KeyError, ValueError) as e:
            raise ValueError(f"not a SCRAM credential: {e}") from None


def _keys(mechanism: str, password: str, salt: bytes, iterations: int) -> tuple[bytes, bytes]:
    algo = MECHANISMS[mechanism]
    salted = hashlib.pbkdf2_hmac(algo, password.encode("utf-8"), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", algo).digest()
    server_key = hmac.new(salted, b"Server Key", algo).digest()
    return hashlib.new(algo, client_key).digest(), server_key


def make_credential(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r} (one of {', '.join(MECHANISMS)})")
    if iterations < MIN_ITERATIONS:
        raise ValueError(f"iterations must be at least {MIN_ITERATIONS}")
    salt = salt if salt is not None else os.urandom(24)
    stored_key, server_key = _keys(mechanism, password, salt, iterations)
    return ScramCredential(salt, stored_key, server_key, iterations)


def verify(mechanism: str, password: str, credential: ScramCredential) -> bool:
    """H(ClientKey(password)) == stored_key, in constant time."""
    stored_key, _ = _keys(mechanism, password, credential.salt, credential.iterations)
    return hmac.compare_digest(stored_key, credential.stored_key)


def parse_alter_value(mechanism: str, value: str) -> str:
    """``[password=secret]`` or ``[iterations=8192,password=secret]`` (kafka-configs.sh's syntax) -> the
    stored form. A value already in stored form is checked and kept (copying credentials between clusters)."""
    m = _ALTER.match(value.strip())
    # kafka-configs' parser hands over ``K=[a,b]`` as ``a,b``: a value naming a password is the alter syntax too.
    body = m.group("body") if m is not None else (value if "password=" in value and "stored_key=" not in value
                                                  else None)
    if body is None:
        ScramCredential.decode(value)
        return value
    fields: dict[str, str] = {}
    for part in body.split(","):
        key, sep, val = part.partition("=")
        if not sep:
            raise ValueError(f"{mechanism}: {part!r} is not key=value")
        fields[key.strip()] = val
    if "password" not in fields:
        raise ValueError(f"{mechanism}: give [password=...]")
    iterations = int(fields.get("iterations", DEFAULT_ITERATIONS))
    return make_credential(mechanism, fields["password"], iterations).encode()


class ScramClient:
    """One client side of a SCRAM-SHA-256/512 exchange (RFC 5802, RFC 7677; no channel binding, as Kafka):
    ``first()`` -> client-first; ``final(server_first)`` -> client-final; ``verify(server_final)`` checks the
    server's signature, so a server that does not hold the user's credential is not believed.

    Refuses (AuthenticationFailedError) what Kafka's ``ScramSaslClient`` refuses: a server nonce that does not
    extend the client's, fewer iterations than ``MIN_ITERATIONS``, a server-final with an error or a wrong
    signature. One instance serves one exchange."""

    def __init__(self, mechanism: str, user: str, password: str, nonce: str | None = None) -> None:
        if mechanism not in MECHANISMS:
            raise ValueError(f"unknown SCRAM mechanism {mechanism!r} (one of {', '.join(MECHANISMS)})")
        self.mechanism = mechanism
        self._algo = MECHANISMS[mechanism]
        self._password = password
        self._nonce = nonce or secrets.token_urlsafe(24)
        self._gs2 = "n,,"
        self._bare = f"n={user.replace('=', '=3D').replace(',', '=2C')},r={self._nonce}"
        self._expected_signature: bytes | None = None

    def first(self) -> bytes:
        return (self._gs2 + self._bare).encode("utf-8")

    def final(self, server_first: bytes) -> bytes:
        try:
            text = server_first.decode("utf-8")
            fields = dict(part.split("=", 1) for part in text.split(","))
            nonce, salt, iterations = fields["r"], base64.b64decode(fields["s"], validate=True), int(fields["i"])
        except (UnicodeDecodeError, ValueError, KeyError) as e:
            raise AuthenticationFailedError(f"{self.mechanism}: invalid server first message: {e}") from None
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise AuthenticationFailedError(f"{self.mechanism}: the server nonce does not extend the client's")
        if iterations < MIN_ITERATIONS:
            raise AuthenticationFailedError(f"{self.mechanism}: requested iterations {iterations} is less than the "
                                            f"minimum {MIN_ITERATIONS}")
        salted = hashlib.pbkdf2_hmac(self._algo, self._password.encode("utf-8"), salt, iterations)
        client_key = hmac.new(salted, b"Client Key", self._algo).digest()
        stored_key = hashlib.new(self._algo, client_key).digest()
        without_proof = f"c={base64.b64encode(self._gs2.encode()).decode()},r={nonce}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        signature = hmac.new(stored_key, auth_message, self._algo).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = hmac.new(salted, b"Server Key", self._algo).digest()
        self._expected_signature = hmac.new(server_key, auth_message, self._algo).digest()
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        """AuthenticationFailedError unless ``server_final`` is ``v=<the server signature we expect>``."""
        text = server_final.decode("utf-8", "replace")
        if text.startswith("e="):
            raise AuthenticationFailedError(f"{self.mechanism}: the server refused: {text[2:]}")
        if self._expected_signature is None or not text.startswith("v="):
            raise AuthenticationFailedError(f"{self.mechanism}: invalid server final message")
        try:
            signature = base64.b64decode(text[2:], validate=True)
        except ValueError:
            raise AuthenticationFailedError(f"{self.mechanism}: invalid server final message") from None
        if not hmac.compare_digest(signature, self._expected_signature):
            raise AuthenticationFailedError(f"{self.mechanism}: invalid server signature")
