"""Security errors (docs/security.md): 401 when a request carries no valid identity, 403 when the
identity may not do what it asked (Kafka's SASL_AUTHENTICATION_FAILED and *_AUTHORIZATION_FAILED codes).

Apart from errors.py only for its length; errors.py imports this module, so ``error_for`` knows these names."""

from __future__ import annotations

from odradek.protocol.error_base import OdradekError


class AuthenticationFailedError(OdradekError):
    """No identity, a wrong password, an expired or forged token, or credentials over plaintext."""

    name = "SASL_AUTHENTICATION_FAILED"
    kafka_code = 58
    error_code = 40101
    http_status = 401


class IllegalSaslStateError(OdradekError):
    """A Kafka SASL request out of turn: SaslHandshake or SaslAuthenticate after authentication, or on a listener
    that authenticates no one (SASL exchanges happen only on the Kafka listeners)."""

    name = "ILLEGAL_SASL_STATE"
    kafka_code = 34
    error_code = 40102
    http_status = 401


class UnsupportedSaslMechanismError(OdradekError):
    """A Kafka SaslHandshake naming a mechanism the listener does not enable."""

    name = "UNSUPPORTED_SASL_MECHANISM"
    kafka_code = 33
    error_code = 40103
    http_status = 401


class TopicAuthorizationFailedError(OdradekError):
    name = "TOPIC_AUTHORIZATION_FAILED"
    kafka_code = 29
    error_code = 40301
    http_status = 403


class GroupAuthorizationFailedError(OdradekError):
    name = "GROUP_AUTHORIZATION_FAILED"
    kafka_code = 30
    error_code = 40302
    http_status = 403


class ClusterAuthorizationFailedError(OdradekError):
    name = "CLUSTER_AUTHORIZATION_FAILED"
    kafka_code = 31
    error_code = 40303
    http_status = 403


class TransactionalIdAuthorizationFailedError(OdradekError):
    name = "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    kafka_code = 53
    error_code = 40304
    http_status = 403
