"""Errors of transactions that only Kafka's transaction APIs name, kept apart from errors.py by concept.

errors.py imports this module at its end, so every class here is registered (``error_for`` finds it by name)
and importable from ``odradek.protocol.errors``. Each carries Kafka's name and code, which the Kafka front door
answers with; the HTTP envelope codes are this module's own.
"""

from __future__ import annotations

from odradek.protocol.error_base import OdradekError


class TransactionalIdNotFoundError(OdradekError):
    """DescribeTransactions of a transactional id no producer ever initialized."""

    name = "TRANSACTIONAL_ID_NOT_FOUND"
    kafka_code = 105
    error_code = 40450
    http_status = 404


class OperationNotAttemptedError(OdradekError):
    """A part of a request left undone because another part of it failed (AddPartitionsToTxn and TxnOffsetCommit
    are all or nothing: the partitions that were fine carry this code beside the ones that were refused)."""

    name = "OPERATION_NOT_ATTEMPTED"
    kafka_code = 55
    error_code = 40050
    http_status = 400
