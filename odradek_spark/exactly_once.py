"""Exactly-once writes (option ``exactlyOnce=true`` or ``transactional.id.prefix``): two-phase commit over the
brokers' transactions (docs/transactions.md).

Why this shape. Spark runs a micro-batch as tasks on executors and then calls ``commit`` on the driver once
every task succeeded; a batch whose commit never ran is run again after a restart, from the checkpoint, with the
same input. So each task writes its rows inside **one transaction it does not commit**: it hands the producer id
and epoch to the driver in its commit message, and the driver ends every task's transaction (commit, or abort on
``abort``) through the coordinator, which needs only the transactional id, producer id and epoch, not the
producer that sent the records.

* **Transactional id** ``<prefix>-<Spark partition id>``, the prefix being the option or ``spark-<query id>``
  (Spark's query id is kept in the checkpoint, so a restarted query has the same ids). A task's
  ``init_transactions`` fences every earlier attempt of the same partition (a failed task, a killed query's
  leftovers) and aborts its open transaction, or completes it if the driver had already decided to commit.
* **What was committed**: inside the same transaction the task commits an offset ``batchId + 1`` for the
  pseudo-partition ``(__spark_batches, partition id)`` of the group ``<prefix>.spark-batches``
  (send_offsets_to_transaction). The coordinator writes it with the commit decision, so it is committed exactly
  when the records are. A task that finds its batch already there (the driver committed, then the query died
  before Spark recorded the batch) writes nothing: a replayed batch is not written twice.
* **Assumption**: a replayed micro-batch gives each Spark partition the same rows (true of this source and
  Spark's Kafka source without a non-deterministic repartition before the sink); Spark speculation must be off
  (a second attempt fences the first).

Batch writes take the same path without the marker: each task's records are invisible to read_committed
readers until the driver commits all of them at the end of the job (all or nothing), under a prefix unique to
the job.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import WriterCommitMessage

from odradek_spark.options import SinkOptions

if TYPE_CHECKING:
    import pyarrow as pa

    from odradek_spark.writer import SinkLayout

__all__ = ["MARKER_TOPIC", "TxnCommitMessage", "end_transactions", "last_committed_batch", "marker_group",
           "write_transactional"]

log = logging.getLogger(__name__)

MARKER_TOPIC = "__spark_batches"  # a pseudo-topic: only a name in the marker group's committed offsets
BATCH_ID_PROPERTY = "streaming.sql.batchId"  # Spark's MicroBatchExecution.BATCH_ID_KEY (a task local property)
QUERY_ID_PROPERTY = "sql.streaming.queryId"  # StreamExecution.QUERY_ID_KEY: stable across restarts


@dataclass
class TxnCommitMessage(WriterCommitMessage):
    """One task's open transaction, for the driver to end; ``transactional_id`` None: nothing to end."""

    records: int
    transactional_id: str | None = None
    producer_id: int = -1
    producer_epoch: int = -1
    skipped_batch: bool = False  # this batch was already committed by an earlier run: nothing written
    transaction: int | None = None  # the transaction's number, as the coordinator answered the task's adds


def marker_group(prefix: str) -> str:
    return f"{prefix}.spark-batches"


def job_prefix() -> str:
    """A batch job's own prefix (no checkpoint to be stable across): decided once on the driver."""
    return f"spark-job-{uuid.uuid4().hex[:12]}"


def task_identity(options: SinkOptions, fixed_prefix: str | None) -> tuple[str, int, int | None]:
    """``(prefix, Spark partition id, micro-batch id or None)`` of the running task, from its TaskContext."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        raise RuntimeError("exactly-once writes run inside Spark tasks (no TaskContext)")
    if fixed_prefix is not None:  # a batch job
        return options.transactional_id_prefix or fixed_prefix, ctx.partitionId(), None
    batch = ctx.getLocalProperty(BATCH_ID_PROPERTY)
    query = ctx.getLocalProperty(QUERY_ID_PROPERTY)
    if batch is None or (query is None and options.transactional_id_prefix is None):
        raise RuntimeError(f"exactly-once: the task has no {BATCH_ID_PROPERTY}/{QUERY_ID_PROPERTY} property; set "
                           "the transactional.id.prefix option, or write from a micro-batch streaming query")
    return options.transactional_id_prefix or f"spark-{query}", ctx.partitionId(), int(batch)


def last_committed_batch(options: SinkOptions, prefix: str, partition: int) -> int:
    """The last micro-batch whose transaction committed for this Spark partition, or -1 (from the marker
    group's committed offsets, on any broker)."""
    from odradek.client.transport import Transport, quote_path
    from odradek.protocol.errors import OdradekError
    from odradek_spark.security import client_security

    transport = Transport(request_timeout_ms=options.request_timeout_ms,
                          security=client_security(options.security))
    last: OdradekError | None = None
    try:
        for url in options.bootstrap:
            try:
                body = transport.get_json(url, quote_path("groups", marker_group(prefix), "offsets"),
                                          query={"topic": MARKER_TOPIC})
            except OdradekError as exc:
                if exc.name == "GROUP_ID_NOT_FOUND":
                    return -1
                if not exc.retriable:
                    raise
                last = exc
                continue
            for o in body.get("offsets") or ():
                if o.get("topic") == MARKER_TOPIC and int(o.get("partition", -1)) == partition:
                    return int(o["offset"]) - 1
            return -1
    finally:
        transport.close()
    raise last or OdradekError("no broker answered for the exactly-once marker")


def _first_rows(batches: Iterator[pa.RecordBatch]) -> pa.RecordBatch | None:
    for batch in batches:
        if batch.num_rows:
            return batch
    return None


def write_transactional(options: SinkOptions, layout: SinkLayout, batches: Iterator[pa.RecordBatch],
                        prefix: str, partition: int, batch_id: int | None) -> TxnCommitMessage:
    """Write this task's rows inside one transaction left open for the driver (see the module docstring)."""
    import itertools

    from odradek.client.types import TopicPartition
    from odradek_spark.writer import new_producer, send_rows

    first = _first_rows(batches)
    if first is None:
        return TxnCommitMessage(0)
    tid = f"{prefix}-{partition}"
    producer = new_producer(options, transactional_id=tid, transaction_timeout_ms=options.transaction_timeout_ms)
    try:
        producer.init_transactions()  # fences earlier attempts; ends what they left open
        if batch_id is not None and last_committed_batch(options, prefix, partition) >= batch_id:
            log.info("%s: micro-batch %d was already committed; writing nothing", tid, batch_id)
            return TxnCommitMessage(0, skipped_batch=True)
        producer.begin_transaction()
        sent, errors = send_rows(producer, options, layout, itertools.chain([first], batches))
        if not errors and batch_id is not None:
            producer.send_offsets_to_transaction({TopicPartition(MARKER_TOPIC, partition): batch_id + 1},
                                                 marker_group(prefix))
        if errors:
            producer.abort_transaction()
            raise RuntimeError(f"exactly-once write of {tid} failed: {errors[0]!r}; its transaction was aborted "
                               "(nothing of it is visible to read_committed readers)") from errors[0]
        txn = producer._txn  # the open transaction's producer id, epoch and number, for the driver to end it
        assert txn is not None and txn.producer is not None
        pid, epoch = txn.producer
        return TxnCommitMessage(sent, tid, pid, epoch, transaction=txn.number)
    finally:
        producer.close()  # leaves the transaction open: the driver ends it


def end_transactions(options: SinkOptions, messages: list[WriterCommitMessage | None], commit: bool) -> int:
    """On the driver: commit (or abort) every task's transaction; returns how many records they hold.

    A commit that fails raises (the query fails, and its restart replays the batch: committed partitions are
    skipped by their marker, the others written again). An abort only logs: the next attempt's
    init_transactions or the transaction timeout aborts what is left.
    """
    from odradek.client.metadata import Metadata
    from odradek.client.transactions import TransactionManager
    from odradek.client.transport import Transport
    from odradek_spark.security import client_security

    todo = [m for m in messages if isinstance(m, TxnCommitMessage) and m.transactional_id is not None]
    total = sum(m.records for m in todo)
    if not todo:
        return total
    transport = Transport(request_timeout_ms=options.request_timeout_ms,
                          security=client_security(options.security))
    metadata = Metadata(transport, list(options.bootstrap))

    def end(m: TxnCommitMessage) -> None:
        assert m.transactional_id is not None
        txn = TransactionManager(transport, metadata, m.transactional_id, options.transaction_timeout_ms,
                                 options.delivery_timeout_ms, 0.1)
        txn.producer = (m.producer_id, m.producer_epoch)
        txn.number = m.transaction  # binds the end to the task's transaction (none named: the open one)
        txn.in_transaction = True
        try:
            txn.end(commit=commit)
        except Exception:
            if commit:
                raise
            log.warning("aborting %s failed; its next attempt or the timeout aborts it", m.transactional_id,
                        exc_info=True)

    try:
        with ThreadPoolExecutor(max_workers=min(8, len(todo)), thread_name_prefix="odradek-eos") as pool:
            for _ in pool.map(end, todo):
                pass
    finally:
        transport.close()
    return total


def new_message_total(messages: list[WriterCommitMessage | None]) -> tuple[int, int]:
    """``(records, tasks that skipped an already committed batch)``, for the driver's log line."""
    ours = [m for m in messages if isinstance(m, TxnCommitMessage)]
    return sum(m.records for m in ours), sum(m.skipped_batch for m in ours)


def describe(messages: list[Any]) -> str:
    records, skipped = new_message_total(messages)
    return f"{records} record(s)" + (f", {skipped} partition(s) already committed earlier" if skipped else "")
