"""SASL mechanisms of the Kafka listeners: PLAIN, and SCRAM-SHA-256/512 as RFC 5802/7677's real exchange.

Both check what HTTP Basic checks (broker/security/authn.py): the SCRAM credentials in ``/config/users/<user>``
(Kafka's ``ScramCredentialUtils`` format, odradek/protocol/scram.py), so a user made with ``odradek configs``
(or kafka-configs.sh) authenticates on every door with one password, and becomes the same ``User:<name>`` the
ACLs name.

* PLAIN (RFC 4616: ``[authzid] NUL authcid NUL passwd``): Kafka's PLAIN checks a password against users listed
  in the broker's JAAS file; this broker has no such list, so it computes the salted password from the stored
  SCRAM credential's salt and iterations and compares ``H(HMAC(salted, "Client Key"))`` with its ``stored_key``
  (``Authenticator.check_password``, in a thread: PBKDF2). The password crosses the wire, so PLAIN belongs on
  SASL_SSL; on SASL_PLAINTEXT it is as exposed as on Kafka.
* SCRAM: client-first (``n,[a=authzid],n=user,r=cnonce``), server-first (``r=cnonce+snonce,s=salt,i=iterations``
  from the stored credential), client-final (``c=biws,r=nonce,p=proof``), server-final (``v=signature``). The
  broker verifies the proof against ``stored_key`` and signs with ``server_key``; the password never reaches it.

Invariants: a mechanism object serves one exchange on one connection; ``evaluate`` either returns the next
server message or raises ``AuthenticationFailedError``, after which the object is dead (the connection is
closed). Failures whose detail would tell a guesser something (unknown user, no credential for the mechanism, a
wrong password or proof) all carry one message, as Kafka's ("... due to invalid credentials with SASL mechanism
X"); only protocol errors (a malformed message, an authorization id that is not the user) say what was wrong.
Delegation tokens (SCRAM's ``tokenauth`` extension) are not served: such an exchange fails.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import logging
import re
import secrets
from collections.abc import Callable
from typing import Protocol, TypeVar

from odradek.protocol import scram
from odradek.protocol.errors import AuthenticationFailedError, OdradekError

log = logging.getLogger(__name__)
T = TypeVar("T")

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)

# RFC 5802 section 7 (and Kafka's ScramMessages): gs2 header with no channel binding, then the bare message.
_CLIENT_FIRST = re.compile(
    r"n,(?:a=(?P<authzid>[^,]*))?,"
    r"(?P<bare>n=(?P<saslname>[^,]+),r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)(?P<extensions>(?:,[A-Za-z0-9]+=[^,]*)*))",
    re.DOTALL)
_CLIENT_FINAL = re.compile(
    r"(?P<without_proof>c=(?P<channel>[A-Za-z0-9/+]+=*),r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)"
    r"(?:,[A-Za-z0-9]+=[^,]*)*),p=(?P<proof>[A-Za-z0-9/+]+=*)",
    re.DOTALL)


class Credentials(Protocol):
    """What the mechanisms need of broker/security/authn.py's ``Authenticator`` (both blocking: ZooKeeper)."""

    def credentials(self, user: str) -> dict[str, str]: ...

    def check_password(self, user: str, password: str) -> str: ...


def parse_mechanisms(spec: str) -> tuple[str, ...]:
    """``--kafka-sasl-enabled-mechanisms``: a comma-separated subset of MECHANISMS (ValueError otherwise)."""
    chosen = tuple(dict.fromkeys(m.strip().upper() for m in spec.split(",") if m.strip()))
    unknown = [m for m in chosen if m not in MECHANISMS]
    if unknown or not chosen:
        raise ValueError(f"--kafka-sasl-enabled-mechanisms: {', '.join(unknown) or 'none given'}; "
                         f"served: {', '.join(MECHANISMS)}")
    return chosen


def invalid_credentials(mechanism: str) -> AuthenticationFailedError:
    return AuthenticationFailedError(
        f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}")


class SaslMechanism(Protocol):
    mechanism: str
    complete: bool
    principal: str | None  # set once complete

    async def evaluate(self, token: bytes) -> bytes:
        """The server's answer to the client's next message; AuthenticationFailedError ends the exchange."""
        ...


def new_mechanism(mechanism: str, credentials: Credentials) -> SaslMechanism:
    if mechanism == PLAIN:
        return PlainServer(credentials)
    if mechanism in scram.MECHANISMS:
        return ScramServer(mechanism, credentials)
    raise ValueError(f"no SASL mechanism {mechanism}")


class PlainServer:
    mechanism = PLAIN

    def __init__(self, credentials: Credentials) -> None:
        self._credentials = credentials
        self.complete = False
        self.principal: str | None = None

    async def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise AuthenticationFailedError("SASL/PLAIN: the exchange is already complete")
        try:
            parts = token.decode("utf-8").split("\0")
        except UnicodeDecodeError:
            raise AuthenticationFailedError("Invalid SASL/PLAIN response: not UTF-8") from None
        if len(parts) != 3:
            raise AuthenticationFailedError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, user, password = parts
        if not user:
            raise AuthenticationFailedError("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailedError("Authentication failed: password not specified")
        if authzid and authzid != user:
            raise AuthenticationFailedError("Authentication failed: Client requested an authorization id that is "
                                            "different from username")
        try:
            self.principal = await _blocking(self._credentials.check_password, user, password)
        except AuthenticationFailedError:
            raise AuthenticationFailedError("Authentication failed: Invalid username or password") from None
        self.complete = True
        return b""


async def _blocking(call: Callable[..., T], *args: str) -> T:
    """A credential lookup or check, off the event loop. A name the store refuses is a failed authentication;
    a store that cannot be read (ZooKeeper away) fails it too, with a message that says so, and is logged."""
    try:
        return await asyncio.to_thread(call, *args)
    except AuthenticationFailedError:
        raise
    except OdradekError:
        raise AuthenticationFailedError("Authentication failed: invalid user name") from None
    except Exception as e:
        log.warning("SASL: cannot read SCRAM credentials: %s", e)
        raise AuthenticationFailedError("Authentication failed: the credential store cannot be read now; "
                                        "try again") from None


def _saslname(name: str) -> str:
    """RFC 5802's saslname: ``=2C`` is a comma and ``=3D`` an equals sign; any other ``=`` is malformed."""
    if re.search(r"=(?!2C|3D)", name):
        raise AuthenticationFailedError("Invalid SCRAM client first message: malformed user name")
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """One server side of a SCRAM exchange: client-first -> server-first, client-final -> server-final."""

    def __init__(self, mechanism: str, credentials: Credentials) -> None:
        self.mechanism = mechanism
        self._algo = scram.MECHANISMS[mechanism]
        self._credentials = credentials
        self.complete = False
        self.principal: str | None = None
        self._step = 0
        self._user = ""
        self._gs2 = ""
        self._nonce = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._credential: scram.ScramCredential | None = None

    async def evaluate(self, token: bytes) -> bytes:
        try:
            message = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailedError(f"Invalid {self.mechanism} message: not UTF-8") from None
        if self._step == 0:
            return (await self._client_first(message)).encode()
        if self._step == 1:
            return self._client_final(message).encode()
        raise AuthenticationFailedError(f"{self.mechanism}: the exchange is already complete")

    async def _client_first(self, message: str) -> str:
        m = _CLIENT_FIRST.fullmatch(message)
        if m is None:
            raise AuthenticationFailedError("Invalid SCRAM client first message (channel binding is not supported)")
        user = _saslname(m["saslname"])
        extensions = dict(e.split("=", 1) for e in m["extensions"].split(",") if e)
        if extensions.get("tokenauth", "").lower() == "true":
            raise invalid_credentials(self.mechanism)  # delegation tokens: none are issued on this door
        authzid = m["authzid"]
        if authzid and _saslname(authzid) != user:
            raise AuthenticationFailedError("Authentication failed: Client requested an authorization id that is "
                                            "different from username")
        stored = (await _blocking(self._credentials.credentials, user)).get(self.mechanism)
        try:
            credential = scram.ScramCredential.decode(stored) if stored else None
        except ValueError:
            credential = None
        if credential is None:
            raise invalid_credentials(self.mechanism)
        self._user, self._credential = user, credential
        self._gs2 = message[:len(message) - len(m["bare"])]
        self._client_first_bare = m["bare"]
        self._nonce = m["nonce"] + secrets.token_urlsafe(24)
        self._server_first = (f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},"
                              f"i={credential.iterations}")
        self._step = 1
        return self._server_first

    def _client_final(self, message: str) -> str:
        m = _CLIENT_FINAL.fullmatch(message)
        if m is None:
            raise AuthenticationFailedError("Invalid SCRAM client final message")
        credential = self._credential
        assert credential is not None
        # Kafka 3.x's rule (ScramSaslServer): the nonce ends with the one the server sent. librdkafka 2.0.x sends the
        # client's nonce twice; the proof covers the nonce as sent, so the server's fresh part still binds it.
        if not m["nonce"].endswith(self._nonce):
            raise AuthenticationFailedError("Invalid SCRAM client final message: the nonce does not match")
        try:
            channel = base64.b64decode(m["channel"], validate=True).decode("utf-8")
            proof = base64.b64decode(m["proof"], validate=True)
        except (binascii.Error, UnicodeDecodeError):
            raise AuthenticationFailedError("Invalid SCRAM client final message: bad base64") from None
        if channel != self._gs2:
            raise AuthenticationFailedError("Invalid SCRAM client final message: channel binding mismatch")
        auth_message = f"{self._client_first_bare},{self._server_first},{m['without_proof']}".encode()
        signature = hmac.new(credential.stored_key, auth_message, self._algo).digest()
        self._step = 2  # one proof per exchange, right or wrong
        if len(proof) != len(signature):
            raise invalid_credentials(self.mechanism)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self._algo, client_key).digest(), credential.stored_key):
            raise invalid_credentials(self.mechanism)
        self.complete = True
        self.principal = f"User:{self._user}"
        server_signature = hmac.new(credential.server_key, auth_message, self._algo).digest()
        return "v=" + base64.b64encode(server_signature).decode()
