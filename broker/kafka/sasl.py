"""SASL on the Kafka listeners: Kafka's ``SaslServerAuthenticator`` (``SaslGate``) and its ``KafkaApis`` side
(``SaslApis``).

A connection on a SASL_PLAINTEXT or SASL_SSL listener goes through ``SaslGate`` until it has authenticated, as in
Kafka:

1. it may send ApiVersions (answered by ``KafkaApis``, any number of times) and then SaslHandshake naming a
   mechanism; any other request closes the connection ("unexpected request during SASL handshake"); a mechanism
   the listener does not enable is answered UNSUPPORTED_SASL_MECHANISM (with the enabled ones) and the
   connection closed;
2. after a SaslHandshake v1, each SASL message comes in a SaslAuthenticate request and the server's in its
   response (``session_lifetime_ms`` 0: no re-authentication is asked for); after a v0 handshake (clients before
   KIP-152), they are raw size-prefixed tokens with no Kafka header. Any other request closes the connection;
3. when the mechanism completes (broker/security/sasl.py: PLAIN, SCRAM-SHA-256/512 against the credentials in
   ``/config/users``), the connection's principal is the user (``User:<name>``) and it is authenticated: from then
   on every frame goes straight to the next dispatcher, and every handler authorizes that principal;
4. a failed authentication is answered SASL_AUTHENTICATION_FAILED with the mechanism's message (one message for
   every credential failure, so a guesser learns nothing), after ``connection.failed.authentication.delay.ms``
   (Kafka's 100 ms), and the connection is closed; with raw tokens the connection is just closed.

Once authenticated, or on a listener without SASL, a SaslHandshake or SaslAuthenticate reaches ``KafkaApis``,
where ``SaslApis`` answers ILLEGAL_SASL_STATE, as Kafka's KafkaApis does.

Invariant: no request other than ApiVersions, SaslHandshake and SaslAuthenticate is decoded, let alone handled,
for a connection that has not authenticated; the network layer caps its frames at
``sasl.server.max.receive.size`` (broker/kafka/network.py).
"""

from __future__ import annotations

import asyncio
import logging
import struct
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from broker.kafka import codec
from broker.kafka.codec import API_VERSIONS, SASL_AUTHENTICATE, SASL_HANDSHAKE, Request, make
from broker.kafka.errors import code
from broker.kafka.frames import ResponseFrame
from broker.kafka.network import CloseConnection, Connection, Dispatch
from broker.security.sasl import Credentials, SaslMechanism, new_mechanism
from odradek.protocol.errors import (
    AuthenticationFailedError,
    IllegalSaslStateError,
    InvalidRequestError,
    UnsupportedSaslMechanismError,
    UnsupportedVersionError,
)

log = logging.getLogger(__name__)

FAILED_AUTHENTICATION_DELAY_S = 0.1  # Kafka's connection.failed.authentication.delay.ms
NONE = ErrorCode(0)
_SIZE = struct.Struct(">i")



class SaslApis:
    """SaslHandshake and SaslAuthenticate that reach ``KafkaApis``: the connection is past SASL (or never had
    it), so the request is out of turn."""

    def handlers(self) -> dict[int, Any]:
        return {SASL_HANDSHAKE: self.handle_sasl_handshake, SASL_AUTHENTICATE: self.handle_sasl_authenticate}

    async def handle_sasl_handshake(self, conn: Connection, request: Request) -> Any:
        cls = codec.response_class(SASL_HANDSHAKE, request.header.api_version)
        return make(cls, error_code=code(IllegalSaslStateError("")), mechanisms=())

    async def handle_sasl_authenticate(self, conn: Connection, request: Request) -> Any:
        error = IllegalSaslStateError("SaslAuthenticate request received after successful authentication"
                                      if conn.listener.sasl else
                                      f"listener {conn.listener.name} ({conn.listener.security_protocol}) "
                                      "does not authenticate with SASL")
        cls = codec.response_class(SASL_AUTHENTICATE, request.header.api_version)
        return make(cls, error_code=code(error), error_message=error.message, auth_bytes=b"")


@dataclass(slots=True)
class _Exchange:
    """One connection's progress through SASL (``Connection.sasl``)."""

    mechanism: SaslMechanism | None = None  # chosen by SaslHandshake
    raw: bool = False  # SaslHandshake v0: raw tokens, no SaslAuthenticate


class SaslGate:
    """The dispatcher in front of ``KafkaApis`` on every listener; it holds back connections of SASL listeners
    until they authenticate (see the module's docstring)."""

    def __init__(self, dispatch: Dispatch, credentials: Credentials | None, mechanisms: tuple[str, ...]) -> None:
        self._dispatch = dispatch
        self._credentials = credentials
        self.mechanisms = mechanisms

    async def dispatch(self, conn: Connection, frame: bytes) -> bytes | ResponseFrame | None:
        if conn.authenticated:
            return await self._dispatch(conn, frame)
        exchange: _Exchange = conn.sasl if conn.sasl is not None else _Exchange()
        conn.sasl = exchange
        if exchange.raw:
            return await self._raw_token(conn, exchange, frame)
        try:
            header = codec.read_header(frame)
        except InvalidRequestError as e:
            raise CloseConnection(f"{e.message} before authenticating (a client without SASL on a SASL "
                                  "listener?)") from None
        if exchange.mechanism is None:
            if header.api_key == API_VERSIONS:
                return await self._dispatch(conn, frame)
            if header.api_key != SASL_HANDSHAKE:
                raise CloseConnection(f"unexpected request (API {header.api_key}) during SASL handshake")
            return self._handshake(conn, exchange, self._decode(frame))
        if header.api_key != SASL_AUTHENTICATE:
            raise CloseConnection(f"unexpected request (API {header.api_key}) during SASL authentication")
        return await self._authenticate(conn, exchange, self._decode(frame))

    @staticmethod
    def _decode(frame: bytes) -> Request:
        try:
            return codec.decode_request(frame)
        except (UnsupportedVersionError, InvalidRequestError) as e:
            raise CloseConnection(f"{e.message} during SASL authentication") from None

    def _handshake(self, conn: Connection, exchange: _Exchange, request: Request) -> bytes:
        version = request.header.api_version
        chosen = str(request.body.mechanism)
        cls = codec.response_class(SASL_HANDSHAKE, version)
        if chosen not in self.mechanisms or self._credentials is None:
            error = UnsupportedSaslMechanismError(f"SASL mechanism {chosen!r} is not enabled on listener "
                                                  f"{conn.listener.name}; enabled: {', '.join(self.mechanisms)}")
            body = make(cls, error_code=code(error), mechanisms=self.mechanisms)
            raise CloseConnection(error.message, codec.encode_response(
                SASL_HANDSHAKE, version, request.header.correlation_id, body))
        exchange.mechanism = new_mechanism(chosen, self._credentials)
        exchange.raw = version == 0
        return codec.encode_response(SASL_HANDSHAKE, version, request.header.correlation_id,
                                     make(cls, error_code=NONE, mechanisms=self.mechanisms))

    async def _authenticate(self, conn: Connection, exchange: _Exchange, request: Request) -> bytes:
        mechanism = exchange.mechanism
        assert mechanism is not None
        version = request.header.api_version
        cls = codec.response_class(SASL_AUTHENTICATE, version)
        try:
            answer = await mechanism.evaluate(bytes(request.body.auth_bytes))
        except AuthenticationFailedError as e:
            await self._failed(conn, mechanism, e)
            body = make(cls, error_code=code(e), error_message=e.message, auth_bytes=b"")
            raise CloseConnection(f"authentication failed: {e.message}", codec.encode_response(
                SASL_AUTHENTICATE, version, request.header.correlation_id, body)) from None
        self._maybe_complete(conn, mechanism)
        return codec.encode_response(SASL_AUTHENTICATE, version, request.header.correlation_id,
                                     make(cls, error_code=NONE, error_message=None, auth_bytes=answer))

    async def _raw_token(self, conn: Connection, exchange: _Exchange, token: bytes) -> bytes:
        mechanism = exchange.mechanism
        assert mechanism is not None
        try:
            answer = await mechanism.evaluate(token)
        except AuthenticationFailedError as e:
            await self._failed(conn, mechanism, e)
            raise CloseConnection(f"authentication failed: {e.message}") from None
        self._maybe_complete(conn, mechanism)
        return _SIZE.pack(len(answer)) + answer

    @staticmethod
    def _maybe_complete(conn: Connection, mechanism: SaslMechanism) -> None:
        if mechanism.complete:
            assert mechanism.principal is not None
            conn.principal = mechanism.principal
            conn.authenticated = True
            conn.sasl = None
            log.debug("Kafka connection %s authenticated as %s (%s)", conn.id, conn.principal, mechanism.mechanism)

    @staticmethod
    async def _failed(conn: Connection, mechanism: SaslMechanism, error: AuthenticationFailedError) -> None:
        log.info("Kafka connection %s from %s: %s authentication failed: %s", conn.id, conn.host,
                 mechanism.mechanism, error.message)
        await asyncio.sleep(FAILED_AUTHENTICATION_DELAY_S)
