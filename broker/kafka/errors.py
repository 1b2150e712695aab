"""Kafka protocol errors that only the Kafka front door raises (no HTTP route can meet them).

They join the one hierarchy (``OdradekError``: a Kafka name and code, an HTTP envelope for completeness), so
every answer of the front door takes its code from a typed error.
"""

from __future__ import annotations

from odradek.protocol.error_base import OdradekError


class UnsupportedVersionError(OdradekError):
    """A request at an API version this broker does not serve."""

    name = "UNSUPPORTED_VERSION"
    kafka_code = 35
    error_code = 40011
    http_status = 400


class InvalidRequiredAcksError(OdradekError):
    """A produce request whose ``acks`` is not 0, 1 or -1."""

    name = "INVALID_REQUIRED_ACKS"
    kafka_code = 21
    error_code = 40012
    http_status = 400
