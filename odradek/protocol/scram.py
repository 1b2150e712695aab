"""SCRAM-SHA-256/512 credentials as Kafka stores them in ``/config/users/<user>`` (RFC 5802 keys).

Stored value (Kafka's ``ScramCredentialUtils``): ``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=4096``
under the config key ``SCRAM-SHA-256`` or ``SCRAM-SHA-512``. The broker never stores or sees a password at rest:
it keeps ``StoredKey = H(HMAC(Hi(password, salt, i), "Client Key"))``, and checks a password presented over TLS
(HTTP Basic) by recomputing the client key and comparing its hash with ``stored_key`` in constant time. That is
the check a SCRAM exchange makes, without the round trips an HTTP request cannot hold.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from dataclasses import dataclass

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
