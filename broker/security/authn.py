"""Who is asking: the principal of a request, from its TLS certificate, an HTTP Basic password or a bearer token.

Order: an ``Authorization`` header wins (Basic: a SCRAM user's password, checked against ``/config/users``;
Bearer: a token this cluster issued); else the client certificate's subject (``User:CN=...``); else
``User:ANONYMOUS``, which a SASL_SSL listener refuses with 401 and an SSL listener hands to the authorizer (as
Kafka does with ``ssl.client.auth=none``). Credentials are refused on a plaintext listener: a password or token
that crossed the wire in clear is no proof of anything.

Tokens (``POST /auth/token``) are ``odt1.<payload>.<hmac>``: the payload names the principal and the expiry, and
the HMAC-SHA256 key is the cluster's (``/delegation_token/secret``, readable only with the brokers' ZooKeeper
identity when ZooKeeper ACLs are on), so a token from one broker is good on every broker until it expires.
Passwords are checked with PBKDF2 (4096 rounds); a successful check is remembered for a short while, keyed by
a hash of user, password and stored credential, so a client sending Basic on every request costs one check.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Callable

from broker.security.authorizer import ANONYMOUS
from odradek.protocol import scram
from odradek.protocol.errors import AuthenticationFailedError

TOKEN_PREFIX = "odt1"
_VERIFIED_TTL_S = 60.0
_CREDENTIAL_TTL_S = 1.0

# user -> {mechanism: stored credential string}; blocking (ZooKeeper), called in a thread.
CredentialLookup = Callable[[str], dict[str, str]]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class TokenSigner:
    def __init__(self, key: bytes, lifetime_ms: int, clock: Callable[[], float] = time.time) -> None:
        self._key = key
        self.lifetime_ms = lifetime_ms
        self._clock = clock

    def issue(self, principal: str, lifetime_ms: int | None = None) -> tuple[str, int]:
        life = self.lifetime_ms if lifetime_ms is None else min(lifetime_ms, self.lifetime_ms)
        payload = _b64(json.dumps({"sub": principal, "exp": int(self._clock() * 1000) + life}).encode())
        sig = _b64(hmac.new(self._key, f"{TOKEN_PREFIX}.{payload}".encode(), hashlib.sha256).digest())
        return f"{TOKEN_PREFIX}.{payload}.{sig}", life

    def verify(self, token: str) -> str:
        try:
            prefix, payload, sig = token.split(".")
            if prefix != TOKEN_PREFIX:
                raise ValueError("prefix")
            want = hmac.new(self._key, f"{prefix}.{payload}".encode(), hashlib.sha256).digest()
            if not hmac.compare_digest(want, _unb64(sig)):
                raise ValueError("signature")
            claims = json.loads(_unb64(payload))
        except (ValueError, binascii.Error, json.JSONDecodeError):
            raise AuthenticationFailedError("invalid bearer token") from None
        if int(claims.get("exp", 0)) <= int(self._clock() * 1000):
            raise AuthenticationFailedError("the bearer token has expired; ask POST /auth/token for a new one")
        return str(claims["sub"])


class Authenticator:
    def __init__(self, lookup: CredentialLookup, signer: TokenSigner | None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._lookup = lookup
        self.signer = signer
        self._clock = clock
        self._verified: dict[bytes, float] = {}
        self._credentials: dict[str, tuple[float, dict[str, str]]] = {}

    def credentials(self, user: str) -> dict[str, str]:
        """The user's SCRAM credentials, re-read from ZooKeeper at most once a second (blocking)."""
        now = self._clock()
        cached = self._credentials.get(user)
        if cached is not None and now - cached[0] < _CREDENTIAL_TTL_S:
            return cached[1]
        found = {k: v for k, v in self._lookup(user).items() if k in scram.MECHANISMS}
        if len(self._credentials) > 10_000:
            self._credentials.clear()
        self._credentials[user] = (now, found)
        return found

    def check_password(self, user: str, password: str) -> str:
        """``User:<user>`` if the password matches a stored SCRAM credential (blocking: run it in a thread)."""
        creds = self.credentials(user)
        for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
            stored = creds.get(mechanism)
            if stored is None:
                continue
            memo = hashlib.sha256(f"{mechanism}\0{user}\0{password}\0{stored}".encode()).digest()
            now = self._clock()
            if now - self._verified.get(memo, -1e18) < _VERIFIED_TTL_S:
                return f"User:{user}"
            try:
                ok = scram.verify(mechanism, password, scram.ScramCredential.decode(stored))
            except ValueError:
                ok = False
            if ok:
                if len(self._verified) > 10_000:
                    self._verified.clear()
                self._verified[memo] = now
                return f"User:{user}"
        raise AuthenticationFailedError("authentication failed: unknown user or wrong password")

    def needs_thread(self, authorization: str) -> bool:
        return authorization[:6].lower() == "basic "

    def from_header(self, authorization: str) -> str:
        """The principal an ``Authorization`` header proves (blocking for Basic); 401 if it proves nothing."""
        scheme, _, value = authorization.strip().partition(" ")
        scheme = scheme.lower()
        if scheme == "bearer":
            if self.signer is None:
                raise AuthenticationFailedError("bearer tokens are not enabled")
            return self.signer.verify(value.strip())
        if scheme == "basic":
            try:
                user, sep, password = base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")
            except (ValueError, binascii.Error, UnicodeDecodeError):
                raise AuthenticationFailedError("malformed Basic credentials") from None
            if not sep or not user:
                raise AuthenticationFailedError("malformed Basic credentials")
            return self.check_password(user, password)
        raise AuthenticationFailedError("unsupported Authorization scheme (Basic or Bearer)")


def basic_header(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


__all__ = ["ANONYMOUS", "Authenticator", "TokenSigner", "basic_header"]
