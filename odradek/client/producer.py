"""The producer: batches records per partition and ships each batch to the partition's leader on the binary path.

Why this shape (Kafka's): ``send()`` only appends a tuple to an in-memory batch and returns a future, so the
caller's cost per record is a few microseconds; a background *sender* thread decides when batches leave (full,
lingered, flushed) and hands each partition's sendable batches, as one request, to a small pool of I/O threads.
One request per partition at a time keeps per-partition order across retries.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any
from urllib.parse import quote

from odradek.client.accumulator import (
    APPENDED,
    ProducerBatch,
    RecordAccumulator,
    RecordTuple,
    append_keyless,
    estimate_size,
)
from odradek.client.metadata import REFRESH_ERRORS, Metadata
from odradek.client.security import ClientSecurity
from odradek.client.transactions import TransactionManager
from odradek.client.transport import BATCHES_MEDIA_TYPE, Transport, parse_bootstrap, quote_path
from odradek.client.types import Header, RecordMetadata, TopicPartition
from odradek.protocol.errors import (
    InvalidConfigError,
    InvalidTxnStateError,
    NotLeaderOrFollowerError,
    OdradekError,
    RequestTimedOutError,
    UnknownPartitionError,
)
from odradek.protocol.media import TRANSACTIONAL_ID as TRANSACTIONAL_ID_HEADER
from odradek.protocol.partitioner import DefaultPartitioner, murmur2
from odradek.protocol.records import COMPRESSION_CODECS

__all__ = ["Producer"]

log = logging.getLogger(__name__)

_CLIENT_IDS = itertools.count(1)
_ACKS = {"all": "all", "-1": "all", "1": "1", "0": "0"}
IDEMPOTENT_WINDOW = 5  # batches a leader remembers per producer (NUM_BATCHES_TO_RETAIN, as Kafka)


def _to_bytes(data: bytes | str | None, what: str) -> bytes | None:
    if data is None or type(data) is bytes:
        return data
    if isinstance(data, str):
        return data.encode()
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"{what} must be bytes, str or None, not {type(data).__name__}")


def _headers(headers: Mapping[str, Any] | Iterable[tuple[str, Any]] | None) -> tuple[Header, ...]:
    if not headers:
        return ()
    items = headers.items() if isinstance(headers, Mapping) else headers
    return tuple((str(k), _to_bytes(v, "a header value")) for k, v in items)


class Producer:
    """Sends records to Odradek topics; each ``send`` returns a future of its :class:`RecordMetadata`.

    Thread-safety: ``send``, ``flush`` and ``close`` may be called from any number of threads at once; records
    sent from one thread to one partition are written in ``send`` order. Futures are resolved (and their
    callbacks run) on the producer's I/O threads, so a callback must be quick and must not call ``flush`` or
    ``close`` (they wait for those very threads).

    Delivery: ``acks="all"`` (default) waits until every in-sync replica has the batch, ``1`` only for the
    leader's append, ``0`` answers at once and offsets come back as -1. Retriable errors (leader moved, broker
    down, not enough replicas, timeouts) refresh metadata and resend the same batch, in order, after
    ``retry_backoff_ms``, until ``retries`` or ``delivery_timeout_ms`` run out; other errors fail every record of
    the batch with the typed error. Idempotent (the default with acks="all"; ``enable_idempotence``): batches
    carry a producer id and per-partition sequences, so a retry after an ambiguous failure is recognised by the
    leader and never written twice; without it a retry can duplicate a batch (docs/transactions.md).

    Args:
        bootstrap_servers: ``"host:port,host:port"`` or a list; ``http://`` is optional.
        acks: ``"all"``/``-1``, ``1`` or ``0`` (ints or strings).
        batch_size: bytes of records per partition batch before it is sent without waiting for the linger.
        linger_ms: how long a partition's batch waits for more records.
        compression: ``None``, ``"gzip"``, ``"lz4"`` or ``"zstd"`` (the whole batch is compressed).
        max_block_ms: how long ``send`` may block for the metadata of a topic it has not seen.
        io_threads: concurrent requests (one per partition at most).
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        acks: str | int = "all",
        batch_size: int = 16384,
        linger_ms: float = 5,
        retries: int = 2_147_483_647,
        retry_backoff_ms: int = 100,
        delivery_timeout_ms: int = 120_000,
        request_timeout_ms: int = 30_000,
        compression: str | None = None,
        max_request_size: int = 1 << 20,
        max_block_ms: int = 60_000,
        metadata_max_age_ms: int = 300_000,
        io_threads: int = 8,
        partitioner: DefaultPartitioner | None = None,
        client_id: str | None = None,
        enable_idempotence: bool | None = None,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60_000,
        **security: Any,  # ssl_cafile, ssl_certfile, ssl_keyfile, sasl_username, sasl_password, sasl_token
    ) -> None:
        acks_s = _ACKS.get(str(acks).lower())
        if acks_s is None:
            raise InvalidConfigError(f"acks must be 'all', -1, 1 or 0, not {acks!r}")
        if enable_idempotence and acks_s != "all":
            raise InvalidConfigError("enable_idempotence requires acks='all'")
        # Kafka 3's default: idempotent unless the user chose weaker acks (then silently off, as Kafka does).
        self.idempotent = acks_s == "all" if enable_idempotence is None else enable_idempotence
        if transactional_id is not None and not self.idempotent:
            raise InvalidConfigError("a transactional producer is idempotent: it needs acks='all'")
        self._pid_lock = threading.Lock()
        self._producer: tuple[int, int] | None = None  # (producer id, epoch) from InitProducerId
        self._sequences: dict[TopicPartition, int] = {}  # next base sequence per partition, for that id
        codec = COMPRESSION_CODECS.get((compression or "none").lower())
        if codec is None:
            raise InvalidConfigError(f"unknown compression {compression!r}")
        self.acks = acks_s
        self._codec = codec
        self._retries = retries
        self._backoff = retry_backoff_ms / 1000.0
        self._request_timeout_ms = request_timeout_ms
        self._max_block_ms = max_block_ms
        self.client_id = client_id or f"producer-{next(_CLIENT_IDS)}"  # Kafka's default client.id shape
        self._transport = Transport(request_timeout_ms=request_timeout_ms, client_id=self.client_id,
                                    security=ClientSecurity.from_kwargs(security))
        self._metadata = Metadata(
            self._transport,
            parse_bootstrap(bootstrap_servers),
            retry_backoff_ms=retry_backoff_ms,
            metadata_max_age_ms=metadata_max_age_ms,
        )
        self._acc = RecordAccumulator(batch_size, linger_ms, delivery_timeout_ms, max_request_size,
                                      max_batches_per_request=IDEMPOTENT_WINDOW if self.idempotent else None)
        self._partitioner = partitioner or DefaultPartitioner()
        self._cond = threading.Condition()
        self._closed = False
        self._sender_done = False  # forced close: the sender stops even with batches in flight
        self._refreshing = False  # a metadata refresh is queued or running on the I/O pool
        self._io = ThreadPoolExecutor(max_workers=io_threads, thread_name_prefix="odradek-producer-io")
        # Transactions (odradek/client/transactions.py; docs/transactions.md): None unless transactional_id.
        self._txn = None if transactional_id is None else TransactionManager(
            self._transport, self._metadata, transactional_id, transaction_timeout_ms, max_block_ms, self._backoff)
        # The leader verifies transactional batches with the coordinator under this id (KIP-890).
        self._batch_headers = None if transactional_id is None else {
            TRANSACTIONAL_ID_HEADER: quote(transactional_id, safe="")}
        self._sender = threading.Thread(target=self._run_sender, name="odradek-producer-sender", daemon=True)
        self._sender.start()

    # ------------------------------------------------------------------------------------------------ API

    def send(
        self,
        topic: str,
        value: bytes | str | None,
        key: bytes | str | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Mapping[str, bytes | str | None] | Iterable[tuple[str, bytes | str | None]] | None = None,
    ) -> Future[RecordMetadata]:
        """Queue one record; the future resolves when the leader acknowledges its batch (or fails for good).

        Blocks only the first time a topic is seen, for its metadata (up to ``max_block_ms``). Errors about the
        record's destination (unknown topic or partition) fail the returned future rather than raise, like any
        other delivery error; bad argument types raise ``TypeError`` at once, and ``RuntimeError`` after
        ``close()``.
        """
        if self._closed:
            raise RuntimeError("send() after close()")
        if self._txn is not None and not self._txn.in_transaction:
            raise InvalidTxnStateError("a transactional producer sends inside begin_transaction() .. commit")
        key_b = _to_bytes(key, "key")
        value_b = _to_bytes(value, "value")
        hdrs = _headers(headers) if headers else ()
        ts = time.time_ns() // 1_000_000 if timestamp_ms is None else timestamp_ms
        fut: Future[RecordMetadata] = Future()
        meta = self._metadata.topic(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            try:
                meta = self._metadata.wait_for_topic(topic, self._max_block_ms)
            except OdradekError as exc:
                fut.set_exception(exc)
                return fut
        n = len(meta.partitions)
        if partition is not None:
            if partition >= n:  # the topic may have grown since we looked
                with contextlib.suppress(OdradekError):
                    meta = self._metadata.refresh([topic]).topics.get(topic) or meta
                n = len(meta.partitions)
            if not 0 <= partition < n:
                fut.set_exception(
                    UnknownPartitionError(f"topic '{topic}' has {n} partitions, not {partition}", topic=topic)
                )
                return fut
        elif key_b is not None:
            partition = (murmur2(key_b) & 0x7FFFFFFF) % n
        record: RecordTuple = (key_b, value_b, ts, hdrs)
        size = estimate_size(key_b, value_b, hdrs)
        with self._cond:
            if self._closed:
                raise RuntimeError("send() after close()")
            now = time.monotonic()
            if partition is not None:
                res = self._acc.append(TopicPartition(topic, partition), record, fut, size, now)
            else:
                res = append_keyless(self._acc, self._partitioner, topic, n, meta.available, record, fut, size, now)
            if res != APPENDED:
                self._cond.notify()
        return fut

    # ----------------------------------------------------------------------------- transactions (KIP-98)

    def init_transactions(self) -> None:
        """Take this transactional id's producer id and a new epoch: the previous instance is fenced and its
        open transaction aborted (or completed, if it had decided to commit)."""
        txn = self._require_txn()
        with self._pid_lock:
            self._producer = txn.init()
            self._sequences.clear()

    def begin_transaction(self) -> None:
        self._require_txn().begin()

    def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, int], group: Any) -> None:
        """Commit a group's offsets (the next offset to read, per partition) with this transaction. ``group``
        is a GroupConsumer (its generation fences the commit) or a group id (no generation check)."""
        txn = self._require_txn()
        if isinstance(group, str):
            txn.add_offsets(offsets, group, -1)
        else:
            txn.add_offsets(offsets, group.group_id, int(group.generation))

    def commit_transaction(self) -> None:
        """Flush, then commit: every record sent in the transaction becomes visible to read_committed readers
        at once, or (on an error raised here) the transaction must be aborted."""
        txn = self._require_txn()
        self.flush()
        if txn.error is not None:
            raise txn.error
        txn.end(commit=True)
        txn.finish()

    def abort_transaction(self) -> None:
        txn = self._require_txn()
        with contextlib.suppress(Exception):
            self.flush()
        txn.end(commit=False)
        txn.finish()

    def _require_txn(self) -> TransactionManager:
        if self._txn is None:
            raise InvalidConfigError("this producer has no transactional_id")
        return self._txn

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now, and wait until each record sent before this call is acknowledged or failed.

        Raises:
            TimeoutError: ``timeout`` seconds passed first (the records stay queued).
        """
        with self._cond:
            pending = self._acc.begin_flush()
            self._cond.notify()
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            for batch in pending:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not batch.done.wait(remaining):
                    raise TimeoutError(f"flush did not finish within {timeout} s")
        finally:
            with self._cond:
                self._acc.end_flush()

    def partitions_for(self, topic: str) -> list[int]:
        """The topic's partition ids (fetching its metadata if needed)."""
        return [p.partition for p in self._metadata.wait_for_topic(topic, self._max_block_ms).partitions]

    def close(self, timeout: float | None = None) -> None:
        """Send what is queued, wait for it, then stop the threads and close connections.

        With a ``timeout`` (seconds), records still unsent when it passes fail with ``RequestTimedOutError``.
        """
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._acc.closing = True
            self._cond.notify()
        self._sender.join(timeout)
        if self._sender.is_alive():
            with self._cond:
                aborted = self._acc.abort_all()
                self._sender_done = True
                self._cond.notify()
            exc = RequestTimedOutError("the producer was closed before the record was sent")
            for batch in aborted:
                batch.fail(exc)
            self._sender.join()
        self._io.shutdown(wait=True)
        self._transport.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -------------------------------------------------------------------------------------------- sender

    def _leader_of(self, tp: TopicPartition) -> str | None:
        return self._metadata.leader_url(tp.topic, tp.partition)

    def _run_sender(self) -> None:
        """Drain sendable batches to the I/O pool; sleep until the next linger deadline or a wake-up."""
        while True:
            try:
                if not self._sender_round():
                    return
            except Exception:  # a bug here would silently hang every future: log it and keep going
                log.exception("producer sender round failed")
                time.sleep(self._backoff)

    def _sender_round(self) -> bool:
        """One pass of the sender; False when the producer is closed and nothing is left to do."""
        acc = self._acc
        metadata = self._metadata
        with self._cond:
            now = time.monotonic()
            expired = acc.expire(now)
            requests, leaderless = acc.drain(now, self._leader_of)
            if leaderless:
                metadata.request_update()
            refresh = not self._refreshing and metadata.needs_refresh()
            if refresh:
                self._refreshing = True
            elif not requests and not expired:
                if self._sender_done or (acc.closing and acc.incomplete == 0):
                    return False
                delay = acc.next_deadline(now)
                if leaderless:  # look again after the metadata backoff
                    delay = self._backoff if delay is None else min(delay, self._backoff)
                self._cond.wait(delay)
                return True
        for batch in expired:
            batch.fail(
                RequestTimedOutError(
                    f"expiring {len(batch)} record(s) for {batch.topic}-{batch.partition}: "
                    f"{acc.delivery_timeout:.0f} s have passed since the batch was created"
                )
            )
        try:
            while requests:
                tp, url, batches = requests[0]
                self._io.submit(self._send_request, tp, url, batches)
                requests.pop(0)
            if refresh:  # on the pool, so a broker that hangs does not stall the partitions that are fine
                self._io.submit(self._refresh_metadata)
        except RuntimeError:  # "cannot schedule new futures after shutdown": nothing can be sent any more
            self._stop_sending(requests)
            return False
        return True

    def _stop_sending(self, unsent: list[tuple[TopicPartition, str, list[ProducerBatch]]]) -> None:
        """The I/O pool refuses work: the interpreter is exiting (its atexit hook shuts every pool down while this
        daemon thread still runs), or the producer was torn down around us. Fail every record not yet sent, with
        an error that says so, and let the sender end; retrying would only log the same refusal in a loop (e.g. after
        a timed-out flush)."""
        with self._cond:
            self._sender_done = True
            self._refreshing = False
            aborted = self._acc.abort_all()
            for tp, _url, batches in unsent:
                self._acc.finish(tp, batches)
            self._cond.notify_all()
        exc = RequestTimedOutError("the producer stopped (closed, or the interpreter is exiting) before the record "
                                   "was sent")
        for batch in [b for _tp, _url, batches in unsent for b in batches] + aborted:
            batch.fail(exc)

    def _refresh_metadata(self) -> None:
        try:
            self._metadata.maybe_refresh()
        finally:
            with self._cond:
                self._refreshing = False
                self._cond.notify()

    def _send_request(self, tp: TopicPartition, url: str, batches: list[ProducerBatch]) -> None:
        """One POST of a partition's batches; resolve, requeue or fail them. Runs on an I/O thread."""
        try:
            codec = self._codec
            if self.idempotent:
                body = self._encode_idempotent(tp, batches)
            else:
                body = batches[0].encode(codec) if len(batches) == 1 else b"".join([b.encode(codec) for b in batches])
            answer = self._transport.request(
                url,
                "POST",
                quote_path("topics", tp.topic, "partitions", tp.partition, "batches"),
                query={"acks": self.acks, "timeout_ms": self._request_timeout_ms},
                body=body,
                content_type=BATCHES_MEDIA_TYPE,
                timeout_ms=self._request_timeout_ms + 5000,
                headers=self._batch_headers,
            ).json()
        except OdradekError as exc:
            self._on_error(tp, batches, exc)
            return
        except Exception as exc:  # an encoding bug or a codec library error: fail the records, keep the producer
            log.exception("sending %d batch(es) to %s failed", len(batches), tp)
            self._fail(tp, batches, exc)
            return
        answer = answer if isinstance(answer, dict) else {}
        base = answer.get("base_offset")
        offset = -1 if self.acks == "0" or base is None or base < 0 else int(base)
        # Under LogAppendTime the broker's clock is every record's timestamp; otherwise the producer's stands.
        log_append_time = answer.get("log_append_time")
        if log_append_time is not None and log_append_time < 0:
            log_append_time = None
        starts = answer.get("batch_base_offsets")  # an idempotent retry answered partly from the leader's state
        if isinstance(starts, list) and len(starts) == len(batches) and offset >= 0:
            for batch, start in zip(batches, starts, strict=True):
                batch.complete(int(start), log_append_time)
        else:
            for batch in batches:
                batch.complete(offset, log_append_time)
                if offset >= 0:
                    offset += len(batch)
        with self._cond:
            self._acc.finish(tp, batches)
            self._cond.notify()

    def _encode_idempotent(self, tp: TopicPartition, batches: list[ProducerBatch]) -> bytes:
        """Number the batches sent for the first time with this partition's next sequences (a retried batch
        keeps its bytes); the partition has one request in flight, so numbering follows the queue order."""
        codec = self._codec
        txn = self._txn
        if txn is not None and any(b.encoded is None for b in batches):
            txn.ensure_partition(tp)  # AddPartitionsToTxn before the partition's first batch of the transaction
        with self._pid_lock:
            if txn is not None and self._producer is None:
                raise InvalidTxnStateError("call init_transactions() first")
            if self._producer is None and any(b.encoded is None for b in batches):
                self._producer = self._init_producer_id()
                self._sequences.clear()
            parts = []
            for b in batches:
                if b.encoded is None:
                    assert self._producer is not None
                    seq = self._sequences.get(tp, 0)
                    self._sequences[tp] = (seq + len(b)) & 0x7FFFFFFF
                    parts.append(b.encode(codec, self._producer[0], self._producer[1], seq, txn is not None))
                else:
                    parts.append(b.encoded)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _init_producer_id(self) -> tuple[int, int]:
        """InitProducerId on any broker (the first that answers)."""
        last: OdradekError | None = None
        for url in self._metadata.broker_urls():
            try:
                answer = self._transport.request(url, "POST", "/producer_ids").json()
                return int(answer["producer_id"]), int(answer["producer_epoch"])
            except OdradekError as exc:
                last = exc
        raise last or RequestTimedOutError("no broker answered InitProducerId")

    def _on_error(self, tp: TopicPartition, batches: list[ProducerBatch], exc: OdradekError) -> None:
        if isinstance(exc, REFRESH_ERRORS):
            if isinstance(exc, NotLeaderOrFollowerError):
                self._metadata.hint_leader(tp.topic, tp.partition, exc.details.get("leader"),
                                           exc.details.get("leader_url"))
            self._metadata.request_update()
        now = time.monotonic()
        first = batches[0]
        retry = exc.retriable and first.attempts < self._retries and now + self._backoff < first.deadline
        if retry:
            with self._cond:
                if not self._sender_done:  # after a forced close nobody would send the retry
                    log.debug("retrying %d batch(es) for %s after %s", len(batches), tp, exc.name)
                    self._acc.requeue(tp, batches, now + self._backoff)
                    self._cond.notify()
                    return
        self._fail(tp, batches, exc)

    def _fail(self, tp: TopicPartition, batches: list[ProducerBatch], exc: BaseException) -> None:
        if self._txn is not None:
            self._txn.error = exc  # the transaction can only be aborted now (Kafka's abortable error)
        elif self.idempotent and any(b.encoded is not None for b in batches):
            # Their sequences are spent: later batches would leave a gap. Start over with a fresh producer id
            # (Kafka bumps the epoch), so the partition's next batch starts again at sequence 0.
            with self._pid_lock:
                self._producer = None
                self._sequences.clear()
        for batch in batches:
            batch.fail(exc)
        with self._cond:
            self._acc.finish(tp, batches)
            self._cond.notify()
