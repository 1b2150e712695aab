"""The workload: producers writing unique values with acks=all, and a consumer group committing after processing.

Every operation is recorded with its send and completion times (seconds since the run started, monotonic), its
outcome and, when acknowledged, its offset: that history is all the checker needs. Values are
``<producer>-<seq>`` with ``seq`` increasing per producer, so a value names its writer and its place in that
writer's order without any lookup.

Producers go through the Python client (``Producer``, the binary path, idempotent: its retries after an
ambiguous failure carry the same producer id and sequence, so the leader recognises them and nothing is written
twice; a duplicate then fails the run) or, with ``--via rest``, through REST Proxy v2 JSON produce, one record per
request against a rotating broker, with no retries and no idempotence (a failed request may still have written,
and that is allowed: only acknowledged values must survive; duplicates are reported, not failed), or, with
``--via kafka``, through librdkafka (confluent-kafka's ``Producer`` against the brokers' Kafka listeners, acks=all,
idempotent unless ``--kafka-idempotence off``, with librdkafka's own batching and retries): a write is acknowledged
only by its delivery report, with the partition and offset librdkafka reports. With ``--via kafka`` the group
members are librdkafka consumers too (the classic group protocol over the Kafka listeners).
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field
from typing import Any

from odradek.client import Producer, RecordMetadata, TopicPartition


@dataclass(slots=True)
class WriteOp:
    producer: str
    seq: int
    value: str
    partition: int
    t_send: float
    t_done: float | None = None
    ok: bool | None = None  # None: never completed (still pending at the end)
    offset: int | None = None
    error: str | None = None


@dataclass(slots=True)
class PollOp:
    member: str
    generation: int
    partition: int
    offset: int
    value: str
    t: float


@dataclass(slots=True)
class CommitOp:
    member: str
    generation: int
    offsets: dict[int, int]  # partition -> next offset to read
    processed: dict[int, int]  # partition -> highest offset this member had processed when it committed
    t: float
    ok: bool
    error: str | None = None


@dataclass(slots=True)
class TxnOp:
    """One transaction of the transactional workload (odradek_verify/txn.py). ``outcome``: "committed" (the commit
    answered), "aborted" (aborted on purpose or after a failed send: the commit was never asked, so it can never
    become visible), "unknown" (the commit was asked and its answer errored or was lost), None (never ended)."""

    txn: str  # "<writer>.<n>": each value it writes is "<txn>:<i>"
    writer: str
    intent: str  # "commit" or "abort" (1 in --txn-abort-every on purpose)
    ctp: bool  # consume-transform-produce: reads (read_committed) and commits its offsets in the transaction
    writes: list[tuple[str, int, str]]  # (topic, partition, value)
    reads: list[tuple[str, int, int, str]]  # consume-transform-produce inputs: (topic, partition, offset, value)
    t_start: float
    t_end: float | None = None
    outcome: str | None = None
    error: str | None = None


@dataclass(slots=True)
class TxnPollOp:
    """A record a read_committed reader (or a consume-transform-produce worker) polled. ``assignment`` changes
    where the reader legitimately moves back (a seek after an abort, a new assignment)."""

    reader: str
    assignment: int
    topic: str
    partition: int
    offset: int
    value: str
    t: float


@dataclass
class History:
    """Thread-safe record of every operation, shared by workload threads and read by the checker."""

    t0: float = field(default_factory=time.monotonic)
    writes: list[WriteOp] = field(default_factory=list)
    polls: list[PollOp] = field(default_factory=list)
    commits: list[CommitOp] = field(default_factory=list)
    txns: list[TxnOp] = field(default_factory=list)
    txn_polls: list[TxnPollOp] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def to_json(self) -> dict[str, Any]:
        with self.lock:
            return {"writes": [asdict(w) for w in self.writes], "polls": [asdict(p) for p in self.polls],
                    "commits": [asdict(c) for c in self.commits], "txns": [asdict(t) for t in self.txns],
                    "txn_polls": [asdict(p) for p in self.txn_polls], "notes": list(self.notes)}


def value_of(raw: bytes | None) -> str:
    """A record's value as the workload wrote it (REST JSON values arrive as JSON strings)."""
    if raw is None:
        return "<null>"
    text = raw.decode("utf-8", errors="replace")
    if text.startswith('"'):
        with contextlib.suppress(ValueError):
            return str(json.loads(text))
    return text


class ClientProducerWorker(threading.Thread):
    """One producer (its own ``Producer``), sending at ``rate`` per second to partitions it picks at random."""

    def __init__(self, name: str, bootstrap: str, topic: str, partitions: int, rate: float, history: History,
                 stop: threading.Event, seed: int, max_outstanding: int = 500) -> None:
        super().__init__(name=f"verify-{name}", daemon=True)
        self.pname, self.topic, self.partitions, self.history, self.stop_event = name, topic, partitions, history, stop
        self.interval = 1.0 / rate
        self.rng = random.Random(seed)
        self.max_outstanding = max_outstanding
        self.outstanding = threading.Semaphore(max_outstanding)
        self.producer = Producer(bootstrap, acks="all", enable_idempotence=True, linger_ms=2, retry_backoff_ms=100,
                                 request_timeout_ms=5000, delivery_timeout_ms=30_000, max_block_ms=10_000)
        self.idempotent = self.producer.idempotent  # the report's idempotent_producer: duplicates then fail

    def _done(self, op: WriteOp) -> Callable[[Future[RecordMetadata]], None]:
        def callback(fut: Future[RecordMetadata]) -> None:
            op.t_done = self.history.now()
            exc = fut.exception()
            if exc is None:
                op.ok, op.offset = True, fut.result().offset
            else:
                op.ok, op.error = False, type(exc).__name__
            self.outstanding.release()

        return callback

    def run(self) -> None:
        seq = 0
        next_t = time.monotonic()
        while not self.stop_event.is_set():
            if not self.outstanding.acquire(timeout=0.2):
                continue
            seq += 1
            op = WriteOp(self.pname, seq, f"{self.pname}-{seq}", self.rng.randrange(self.partitions),
                         self.history.now())
            with self.history.lock:
                self.history.writes.append(op)
            try:
                fut = self.producer.send(self.topic, op.value.encode(), partition=op.partition)
            except RuntimeError as e:
                op.t_done, op.ok, op.error = self.history.now(), False, str(e)
                self.outstanding.release()
                break
            fut.add_done_callback(self._done(op))
            next_t += self.interval
            delay = next_t - time.monotonic()
            if delay > 0:
                self.stop_event.wait(delay)
            else:
                next_t = time.monotonic()

    def finish(self, timeout: float) -> None:
        """Wait for every outstanding send to complete (acknowledged or failed), then close the producer."""
        with contextlib.suppress(Exception):
            self.producer.flush(timeout)
        self.producer.close(timeout=5)


class RestProducerWorker(threading.Thread):
    """One producer over REST Proxy v2: a JSON produce per record to a partition, acks=all, no retries."""

    idempotent = False  # REST v2 produce has no producer id or sequences (as Confluent's REST Proxy)

    def __init__(self, name: str, urls: list[str], topic: str, partitions: int, rate: float, history: History,
                 stop: threading.Event, seed: int) -> None:
        super().__init__(name=f"verify-{name}", daemon=True)
        self.pname, self.urls, self.topic, self.partitions = name, urls, topic, partitions
        self.history, self.stop_event = history, stop
        self.interval = 1.0 / rate
        self.rng = random.Random(seed)

    def _post(self, url: str, partition: int, value: str) -> int:
        body = json.dumps({"records": [{"value": value}]}).encode()
        req = urllib.request.Request(
            f"{url}/topics/{self.topic}/partitions/{partition}?acks=all&timeout_ms=5000", data=body, method="POST",
            headers={"Content-Type": "application/vnd.kafka.json.v2+json"})
        with urllib.request.urlopen(req, timeout=8) as resp:
            answer = json.loads(resp.read())
        entry = answer["offsets"][0]
        if entry.get("error_code") is not None or entry.get("offset") is None:
            raise RuntimeError(entry.get("error_name") or entry.get("error") or "no offset")
        return int(entry["offset"])

    def run(self) -> None:
        seq, i = 0, self.rng.randrange(len(self.urls))
        while not self.stop_event.is_set():
            seq += 1
            op = WriteOp(self.pname, seq, f"{self.pname}-{seq}", self.rng.randrange(self.partitions),
                         self.history.now())
            with self.history.lock:
                self.history.writes.append(op)
            try:
                op.offset = self._post(self.urls[i % len(self.urls)], op.partition, op.value)
                op.ok = True
            except (OSError, ValueError, KeyError, RuntimeError, urllib.error.HTTPError) as e:
                op.ok, op.error = False, type(e).__name__
                i += 1  # another broker next time: this one may be down or cut off
            op.t_done = self.history.now()
            self.stop_event.wait(self.interval)

    def finish(self, timeout: float) -> None:
        self.join(timeout)


NO_OFFSET = "acknowledged without an offset"  # WriteOp.error of an ok write whose offset the client did not learn


def _rdkafka_logger() -> logging.Logger:
    """librdkafka logs to stderr by default, a line per refused connection while a broker is down: its errors
    reach the history's notes through ``error_cb`` instead, and its log goes nowhere."""
    logger = logging.getLogger("odradek_verify.librdkafka")
    logger.propagate = False
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
    return logger


def kafka_client_usable() -> str | None:
    """None when confluent-kafka (librdkafka) imports; else why ``--via kafka`` cannot run."""
    try:
        import confluent_kafka  # noqa: F401
    except Exception as e:
        return f"confluent-kafka (librdkafka) does not import: {type(e).__name__}: {e} (pip install confluent-kafka)"
    return None


class KafkaProducerWorker(threading.Thread):
    """One producer through librdkafka (``confluent_kafka.Producer``), to partitions it picks at random.

    librdkafka batches (``linger.ms``) and retries by itself; with ``enable.idempotence`` its retries carry the
    producer id and sequence, so a duplicate fails the run as with the Python client. Each write is recorded as
    acknowledged only in its delivery report, with the partition and offset that report gives (a report for
    another partition than asked is recorded as acknowledged there, so the checker calls it misplaced if it is
    not found there). A successful report may carry no offset: librdkafka's idempotent producer delivers a
    message whose own answer it never got (its request timed out, its connection dropped) as persisted, offset
    -1, once a later message of that partition is acknowledged (its "implicit ack": the sequences say the
    broker has it), and so a retry the broker answers with DUPLICATE_SEQUENCE_NUMBER. Such a write is
    acknowledged all the same (it must be read back, once, in its partition, in order), its offset recorded as
    unknown. A failed report (message timeout, a fatal idempotence error, a purge at the end) is a failure, which
    may still have been written: only acknowledged values must survive. Delivery reports are served by this
    thread's ``poll`` (by ``finish`` once the thread ended).
    """

    def __init__(self, name: str, bootstrap: str, topic: str, partitions: int, rate: float, history: History,
                 stop: threading.Event, seed: int, idempotent: bool = True, max_outstanding: int = 500) -> None:
        super().__init__(name=f"verify-{name}", daemon=True)
        self.pname, self.topic, self.partitions, self.history, self.stop_event = name, topic, partitions, history, stop
        self.interval = 1.0 / rate
        self.rng = random.Random(seed)
        self.max_outstanding = max_outstanding
        self.outstanding = 0
        self.idempotent = idempotent  # the report's idempotent_producer: duplicates then fail
        self.config: dict[str, Any] = {
            "bootstrap.servers": bootstrap, "client.id": f"verify-{name}", "acks": "all",
            "enable.idempotence": idempotent, "linger.ms": 5, "retry.backoff.ms": 100,
            "request.timeout.ms": 5000, "message.timeout.ms": 30_000, "socket.timeout.ms": 5000,
            "reconnect.backoff.max.ms": 1000, "topic.metadata.refresh.interval.ms": 2000,
            "error_cb": self._error, "logger": _rdkafka_logger(),
        }
        if not idempotent:
            # Without idempotence librdkafka may reorder on retry with several requests in flight: one at a
            # time keeps a producer's order (a retried batch may still be written twice: reported only).
            self.config["max.in.flight.requests.per.connection"] = 1
        self.fatal: str | None = None
        self.fatal_errors: list[str] = []  # one per producer instance replaced (report.json: kafka_fatal_errors)
        self.notes_left = 20
        # Made here, in the thread that runs the driver: in a network lab its threads must live in the client
        # namespace, which the driver's thread joined (threads started afterwards inherit it).
        self.producer = self._new_producer()

    def _new_producer(self) -> Any:
        from confluent_kafka import Producer as KafkaProducer

        return KafkaProducer(self.config)

    def _error(self, err: Any) -> None:
        """librdkafka's global errors: transient ones (a broker down, all brokers down) it recovers from alone;
        a fatal one (an idempotence guarantee it cannot keep) ends this producer instance: the thread makes a
        new one (a new producer id) after failing what the old one still held."""
        if err.fatal():
            self.fatal = f"{err.name()}: {err.str()}"
        self._note(f"error{' (fatal)' if err.fatal() else ''}: {err.name()}: {err.str()}")

    def _note(self, text: str) -> None:
        with self.history.lock:
            if len(self.history.notes) < 200 and self.notes_left > 0:  # faults make many: leave room for others
                self.notes_left -= 1
                self.history.notes.append(f"{self.pname}: {text}")

    def _report(self, op: WriteOp) -> Callable[[Any, Any], None]:
        def on_delivery(err: Any, msg: Any) -> None:
            t = self.history.now()
            with self.history.lock:
                op.t_done = t
                if err is None:
                    op.ok = True
                    op.partition = msg.partition()
                    offset = msg.offset()
                    if offset is not None and offset >= 0:
                        op.offset = offset
                    else:  # librdkafka's implicit ack ("persisted", offset -1): acknowledged, offset unknown
                        op.error = NO_OFFSET
                else:
                    op.ok, op.error = False, err.name()
            self.outstanding -= 1

        return on_delivery

    def _poll(self, timeout: float, producer: Any = None) -> None:
        """Serve delivery reports for up to ``timeout`` s. confluent-kafka raises a fatal error from ``poll`` (and
        ``flush``) as KafkaException: it marks this instance for replacement instead of ending the thread."""
        from confluent_kafka import KafkaException

        try:
            (producer or self.producer).poll(timeout)
        except KafkaException as e:
            err = e.args[0] if e.args else None
            if err is not None and hasattr(err, "fatal") and err.fatal():
                if self.fatal is None:
                    self.fatal = f"{err.name()}: {err.str()}"
            else:
                self._note(f"poll: {e}")
            time.sleep(min(timeout, 0.05))

    def _replace_fatal(self) -> None:
        """The instance hit a fatal error: purge what it holds (each reported failed) and go on with a new one
        (a new producer id: its sequences start afresh, which the checker does not mind, values being unique)."""
        from confluent_kafka import KafkaException

        self.fatal_errors.append(self.fatal or "?")
        self._note(f"fatal error, a new producer instance: {self.fatal}")
        old = self.producer
        with contextlib.suppress(KafkaException, RuntimeError):
            old.purge()
        deadline = time.monotonic() + 5
        while self.outstanding > 0 and time.monotonic() < deadline:
            self._poll(0.1, old)  # serves the failed reports of what it held
        self.outstanding = 0  # reports it never gave leave their writes pending (never acknowledged)
        self.fatal = None
        self.producer = self._new_producer()

    def run(self) -> None:
        from confluent_kafka import KafkaException

        seq = 0
        next_t = time.monotonic()
        while not self.stop_event.is_set():
            if self.fatal is not None:
                self._replace_fatal()
            if self.outstanding >= self.max_outstanding:
                self._poll(0.1)
                continue
            seq += 1
            op = WriteOp(self.pname, seq, f"{self.pname}-{seq}", self.rng.randrange(self.partitions),
                         self.history.now())
            with self.history.lock:
                self.history.writes.append(op)
            while True:
                try:
                    self.producer.produce(self.topic, op.value.encode(), partition=op.partition,
                                          on_delivery=self._report(op))
                    self.outstanding += 1
                except BufferError:  # librdkafka's local queue is full: serve reports, then try again
                    self._poll(0.1)
                    if not self.stop_event.is_set() and self.fatal is None:
                        continue
                    op.t_done, op.ok, op.error = self.history.now(), False, "BufferError"
                except (KafkaException, RuntimeError) as e:  # a fatal state: the write never left
                    op.t_done, op.ok, op.error = self.history.now(), False, type(e).__name__
                    err = e.args[0] if e.args else None
                    if self.fatal is None and getattr(err, "fatal", lambda: False)():
                        self.fatal = str(err)
                break
            next_t += self.interval
            delay = next_t - time.monotonic()
            self._poll(max(0.0, delay))  # serves delivery reports while pacing
            if delay <= 0:
                next_t = time.monotonic()

    def finish(self, timeout: float) -> None:
        """Wait (after the thread ended) for every delivery report; what is still queued then (or held by an
        instance that hit a fatal error) is purged and reported failed, so nothing stays pending."""
        from confluent_kafka import KafkaException

        self.join(timeout)
        deadline = time.monotonic() + timeout
        while self.outstanding > 0 and self.fatal is None and time.monotonic() < deadline:
            self._poll(0.2)
        if self.fatal is not None:
            self.fatal_errors.append(self.fatal)
            self._note(f"fatal error: {self.fatal}")
        if self.outstanding > 0:
            with contextlib.suppress(KafkaException, RuntimeError):
                self.producer.purge()
            end = time.monotonic() + 10
            while self.outstanding > 0 and time.monotonic() < end:
                self._poll(0.1)
        close = getattr(self.producer, "close", None)  # confluent-kafka >= 2.13; else it goes with the object
        if close is not None:
            with contextlib.suppress(KafkaException, RuntimeError):
                close()


class GroupMemberWorker(threading.Thread):
    """A consumer-group member: poll, "process" (record), then commit what it processed, by hand.

    The ``generation`` of a poll counts the assignments and losses this member went through (callbacks run
    inside ``poll``), as KafkaGroupMemberWorker's does: a position may move back exactly there (a partition
    starts again from the committed offset), also when a member that lost its partitions is given them again
    within the same group generation."""

    def __init__(self, name: str, bootstrap: str, topic: str, group: str, history: History,
                 stop: threading.Event, session_timeout_ms: int) -> None:
        super().__init__(name=f"verify-{name}", daemon=True)
        from odradek.client import GroupConsumer

        self.member, self.topic, self.history, self.stop_event = name, topic, history, stop
        self.consumer = GroupConsumer(bootstrap, group_id=group, client_id=name, enable_auto_commit=False,
                                      auto_offset_reset="earliest", session_timeout_ms=session_timeout_ms,
                                      heartbeat_interval_ms=max(100, session_timeout_ms // 4),
                                      request_timeout_ms=5000)
        self.processed: dict[int, int] = {}
        self.error: str | None = None
        self.generation = 0

    def _moved(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self.generation += 1

    def run(self) -> None:
        c = self.consumer
        try:
            c.subscribe([self.topic], on_assign=self._moved, on_revoke=self._moved, on_lost=self._moved)
            while not self.stop_event.is_set():
                try:
                    batch = c.poll(500)
                except Exception as e:  # a fault can make any poll fail; the member carries on like an app would
                    self._note(f"poll failed: {type(e).__name__}: {e}")
                    self.stop_event.wait(0.2)
                    continue
                if not batch:
                    continue
                gen = self.generation  # callbacks run inside poll: what it returned belongs to this one
                now = self.history.now()
                polls = [PollOp(self.member, gen, tp.partition, r.offset, value_of(r.value), now)
                         for tp, recs in batch.items() for r in recs]
                for tp, recs in batch.items():
                    if recs:
                        self.processed[tp.partition] = max(self.processed.get(tp.partition, -1), recs[-1].offset)
                with self.history.lock:
                    self.history.polls.extend(polls)
                self._commit(gen, {tp.partition: recs[-1].offset + 1 for tp, recs in batch.items() if recs})
        finally:
            with contextlib.suppress(Exception):
                c.close(autocommit=False)

    def _commit(self, gen: int, offsets: dict[int, int]) -> None:
        processed = dict(self.processed)
        try:
            self.consumer.commit({TopicPartition(self.topic, p): o for p, o in offsets.items()})
            op = CommitOp(self.member, gen, offsets, processed, self.history.now(), True)
        except Exception as e:  # fenced or a fault: recorded, and the next poll goes on
            op = CommitOp(self.member, gen, offsets, processed, self.history.now(), False, type(e).__name__)
        with self.history.lock:
            self.history.commits.append(op)

    def _note(self, text: str) -> None:
        with self.history.lock:
            if len(self.history.notes) < 200:
                self.history.notes.append(f"{self.member}: {text}")

    def finish(self, timeout: float) -> None:
        self.join(timeout)
        with contextlib.suppress(Exception):
            self.consumer.close(autocommit=False)


class KafkaGroupMemberWorker(threading.Thread):
    """A consumer-group member through librdkafka (``confluent_kafka.Consumer``, classic group protocol, no
    auto-commit): poll, "process" (record), then commit what it processed, synchronously.

    librdkafka does not expose the group's generation id, so the member counts its own assignments: the
    ``generation`` of a poll is the number of assignments this member has received, which changes exactly
    where a position may legitimately move back (a rebalance hands a partition over and it resumes from the
    committed offset); within one assignment polls must not skip or go back, as in GroupMemberWorker.
    """

    def __init__(self, name: str, bootstrap: str, topic: str, group: str, history: History,
                 stop: threading.Event, session_timeout_ms: int) -> None:
        super().__init__(name=f"verify-{name}", daemon=True)
        from confluent_kafka import Consumer as KafkaConsumer

        self.member, self.topic, self.history, self.stop_event = name, topic, history, stop
        self.generation = 0
        self.processed: dict[int, int] = {}
        self.consumer = KafkaConsumer({
            "bootstrap.servers": bootstrap, "group.id": group, "client.id": f"verify-{name}",
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "session.timeout.ms": session_timeout_ms, "heartbeat.interval.ms": max(100, session_timeout_ms // 4),
            "socket.timeout.ms": 5000, "reconnect.backoff.max.ms": 1000, "fetch.wait.max.ms": 200,
            "topic.metadata.refresh.interval.ms": 2000, "error_cb": lambda err: self._note(f"error: {err}"),
            "logger": _rdkafka_logger(),
        })

    def _assigned(self, consumer: Any, partitions: list[Any]) -> None:
        self.generation += 1

    def _revoked(self, consumer: Any, partitions: list[Any]) -> None:
        self.generation += 1

    def run(self) -> None:
        from confluent_kafka import KafkaException

        c = self.consumer
        try:
            c.subscribe([self.topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._revoked)
            while not self.stop_event.is_set():
                try:
                    msgs = c.consume(num_messages=500, timeout=0.5)
                except (KafkaException, RuntimeError) as e:
                    self._note(f"poll failed: {type(e).__name__}: {e}")
                    self.stop_event.wait(0.2)
                    continue
                gen = self.generation  # callbacks run inside consume: what it returned belongs to this one
                now = self.history.now()
                polls: list[PollOp] = []
                last: dict[int, int] = {}
                for m in msgs:
                    if m.error() is not None:
                        self._note(f"poll: {m.error()}")
                        continue
                    polls.append(PollOp(self.member, gen, m.partition(), m.offset(), value_of(m.value()), now))
                    last[m.partition()] = max(last.get(m.partition(), -1), m.offset())
                if not polls:
                    continue
                for p, off in last.items():
                    self.processed[p] = max(self.processed.get(p, -1), off)
                with self.history.lock:
                    self.history.polls.extend(polls)
                self._commit(gen, {p: off + 1 for p, off in last.items()})
        finally:
            with contextlib.suppress(Exception):
                c.close()

    def _commit(self, gen: int, offsets: dict[int, int]) -> None:
        from confluent_kafka import TopicPartition as KafkaTopicPartition

        processed = dict(self.processed)
        try:
            result = self.consumer.commit(offsets=[KafkaTopicPartition(self.topic, p, o) for p, o in offsets.items()],
                                          asynchronous=False)
            failed = [tp for tp in result or [] if tp.error is not None]
            if failed:
                raise RuntimeError(str(failed[0].error))
            op = CommitOp(self.member, gen, offsets, processed, self.history.now(), True)
        except Exception as e:  # a rebalance or a fault: recorded, and the next poll goes on
            op = CommitOp(self.member, gen, offsets, processed, self.history.now(), False, type(e).__name__)
        with self.history.lock:
            self.history.commits.append(op)

    def _note(self, text: str) -> None:
        with self.history.lock:
            if len(self.history.notes) < 200:
                self.history.notes.append(f"{self.member}: {text}")

    def finish(self, timeout: float) -> None:
        self.join(timeout)


def group_consumer_usable() -> str | None:
    """None when ``odradek.client.GroupConsumer`` imports; else why the group part is skipped."""
    try:
        from odradek.client import GroupConsumer  # noqa: F401
    except Exception as e:  # another helper is finishing it; a broken import must not stop the producers
        return f"GroupConsumer does not import: {type(e).__name__}: {e}"
    return None
