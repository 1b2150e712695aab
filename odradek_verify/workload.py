"""The workload: producers writing unique values with acks=all, and a consumer group committing after processing.

Every operation is recorded with its send and completion times (seconds since the run started, monotonic), its
outcome and, when acknowledged, its offset: that history is all the checker needs. Values are
``<producer>-<seq>`` with ``seq`` increasing per producer, so a value names its writer and its place in that
writer's order without any lookup.

Producers go through the Python client (``Producer``, the binary path, idempotent: its retries after an
ambiguous failure carry the same producer id and sequence, so the leader recognises them and nothing is written
twice; a duplicate then fails the run) or, with ``--via rest``, through REST Proxy v2 JSON produce, one record per
request against a rotating broker, with no retries and no idempotence (a failed request may still have written,
and that is allowed: only acknowledged values must survive; duplicates are reported, not failed).
"""

from __future__ import annotations

import contextlib
import json
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


@dataclass
class History:
    """Thread-safe record of every operation, shared by workload threads and read by the checker."""

    t0: float = field(default_factory=time.monotonic)
    writes: list[WriteOp] = field(default_factory=list)
    polls: list[PollOp] = field(default_factory=list)
    commits: list[CommitOp] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def to_json(self) -> dict[str, Any]:
        with self.lock:
            return {"writes": [asdict(w) for w in self.writes], "polls": [asdict(p) for p in self.polls],
                    "commits": [asdict(c) for c in self.commits], "notes": list(self.notes)}


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


class GroupMemberWorker(threading.Thread):
    """A consumer-group member: poll, "process" (record), then commit what it processed, by hand."""

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

    def run(self) -> None:
        c = self.consumer
        try:
            c.subscribe([self.topic])
            while not self.stop_event.is_set():
                try:
                    batch = c.poll(500)
                except Exception as e:  # a fault can make any poll fail; the member carries on like an app would
                    self._note(f"poll failed: {type(e).__name__}: {e}")
                    self.stop_event.wait(0.2)
                    continue
                if not batch:
                    continue
                gen = c.generation
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


def group_consumer_usable() -> str | None:
    """None when ``odradek.client.GroupConsumer`` imports; else why the group part is skipped."""
    try:
        from odradek.client import GroupConsumer  # noqa: F401
    except Exception as e:  # another helper is finishing it; a broken import must not stop the producers
        return f"GroupConsumer does not import: {type(e).__name__}: {e}"
    return None
