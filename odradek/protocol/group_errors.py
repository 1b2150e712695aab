"""Errors of Kafka's classic group protocol (JoinGroup, SyncGroup, OffsetCommit) that the server-side groups of
docs/consumer-groups.md never meet: protocol negotiation, the member id round trip of KIP-394, static membership
(KIP-345) and offset metadata bounds.

Apart from errors.py only for its length; errors.py imports this module, so ``error_for`` knows these names."""

from __future__ import annotations

from odradek.protocol.error_base import OdradekError


class OffsetMetadataTooLargeError(OdradekError):
    """A committed offset's metadata is longer than offset.metadata.max.bytes (4096): nothing is written for it."""

    name = "OFFSET_METADATA_TOO_LARGE"
    kafka_code = 12
    error_code = 40016
    http_status = 400


class InconsistentGroupProtocolError(OdradekError):
    """The member's protocol type, or every protocol it offers, is foreign to the group's current members; also a
    client of one kind of group (server-side assignment over HTTP, or Kafka's classic protocol) joining a group
    whose members are of the other kind."""

    name = "INCONSISTENT_GROUP_PROTOCOL"
    kafka_code = 23
    error_code = 40909
    http_status = 409


class MemberIdRequiredError(OdradekError):
    """KIP-394: a new dynamic member (JoinGroup v4+) is handed its member id and must join again with it, so a
    client that retries a timed-out join never leaves a ghost member behind."""

    name = "MEMBER_ID_REQUIRED"
    kafka_code = 79
    error_code = 40910
    http_status = 409


class FencedInstanceIdError(OdradekError):
    """KIP-345: another member now holds this group.instance.id (a newer instance of the same static member)."""

    name = "FENCED_INSTANCE_ID"
    kafka_code = 82
    error_code = 40911
    http_status = 409
