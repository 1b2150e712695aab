"""The transactional half of the Producer (KIP-98): talks to the transaction coordinator over HTTP.

Kept out of producer.py so that the non-transactional producer's code path is unchanged. Every call goes to
any broker (it forwards to the transactional id's coordinator) and is retried on retriable errors
(CONCURRENT_TRANSACTIONS while the previous transaction completes, a coordinator moving, a broker down) until
``max_block_ms``. A fencing error (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH) is final: this producer is a zombie.

Every add and the end name the transaction's number, as the coordinator answered the first add (-1 before any add
was answered): a retried call leaves its first attempt behind on some broker, and should that attempt reach the
coordinator late, after this producer went on to its next transaction, the number makes it INVALID_TXN_STATE there
instead of ending or joining the open transaction (transaction_coordinator/state.py "Transaction numbers").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

import orjson

from odradek.client.metadata import Metadata
from odradek.client.transport import Transport, quote_path
from odradek.client.types import TopicPartition
from odradek.protocol.errors import InvalidTxnStateError, OdradekError, RequestTimedOutError

NEW_TXN = -1  # no add of the open transaction answered yet


class TransactionManager:
    def __init__(self, transport: Transport, metadata: Metadata, transactional_id: str, timeout_ms: int,
                 max_block_ms: int, backoff_s: float) -> None:
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self._transport = transport
        self._metadata = metadata
        self._max_block_ms = max_block_ms
        self._backoff = backoff_s
        self.lock = threading.Lock()
        self.producer: tuple[int, int] | None = None
        self.in_transaction = False
        self.partitions: set[TopicPartition] = set()
        # The open transaction's number, as the coordinator answered an add of it; None: name none (the open one).
        self.number: int | None = NEW_TXN
        self.error: BaseException | None = None  # a send failed: the transaction can only be aborted

    def _call(self, verb: str, body: dict[str, Any]) -> dict[str, Any]:
        path = quote_path("transactions", self.transactional_id, verb)
        deadline = time.monotonic() + self._max_block_ms / 1000
        data = orjson.dumps(body)
        last: OdradekError | None = None
        while True:
            for url in self._metadata.broker_urls():
                try:
                    answer = self._transport.request(url, "POST", path, body=data, content_type="application/json",
                                                     timeout_ms=self._max_block_ms).json()
                    return answer if isinstance(answer, dict) else {}
                except OdradekError as exc:
                    if not exc.retriable:
                        raise
                    last = exc
            if time.monotonic() + self._backoff > deadline:
                raise last or RequestTimedOutError(f"no broker answered {verb} for {self.transactional_id!r}")
            time.sleep(self._backoff)

    def _ids(self) -> dict[str, int]:
        if self.producer is None:
            raise InvalidTxnStateError("call init_transactions() first")
        ids = {"producer_id": self.producer[0], "producer_epoch": self.producer[1]}
        if self.number is not None:
            ids["transaction"] = self.number
        return ids

    def _added(self, answer: dict[str, Any]) -> None:
        number = answer.get("transaction")
        if isinstance(number, int):
            self.number = number

    def init(self) -> tuple[int, int]:
        answer = self._call("init", {"transaction_timeout_ms": self.timeout_ms})
        self.producer = int(answer["producer_id"]), int(answer["producer_epoch"])
        self.in_transaction = False
        self.partitions.clear()
        self.number = NEW_TXN
        self.error = None
        return self.producer

    def begin(self) -> None:
        self._ids()
        if self.in_transaction:
            raise InvalidTxnStateError("a transaction is already open")
        self.in_transaction = True
        self.partitions.clear()
        self.number = NEW_TXN
        self.error = None

    def ensure_partition(self, tp: TopicPartition) -> None:
        """AddPartitionsToTxn before the first batch to ``tp`` in this transaction (on the I/O thread)."""
        if tp in self.partitions:
            return
        self._added(self._call("partitions", {**self._ids(), "partitions": [[tp.topic, tp.partition]]}))
        self.partitions.add(tp)

    def add_offsets(self, offsets: Mapping[TopicPartition, int], group: str, generation: int) -> None:
        if not self.in_transaction:
            raise InvalidTxnStateError("send_offsets_to_transaction() outside a transaction")
        self._added(self._call("offsets", {
            **self._ids(), "group": group, "generation": generation,
            "offsets": [[tp.topic, tp.partition, int(o), ""] for tp, o in offsets.items()]}))

    def end(self, commit: bool) -> str:
        if not self.in_transaction:
            raise InvalidTxnStateError("no transaction is open")
        try:
            return str(self._call("end", {**self._ids(), "commit": commit}).get("state"))
        finally:
            if not commit:
                self.in_transaction = False

    def finish(self) -> None:
        self.in_transaction = False
        self.partitions.clear()
        self.number = NEW_TXN
        self.error = None
