"""The consumer (manual assignment; group_consumer.py adds groups): fetches record batches from partition leaders.

How several partitions are read without one starving the others: the binary fetch is per partition, so each
assigned partition has at most one fetch in flight on a small thread pool, each a long-poll of up to
``fetch_max_wait_ms``. ``poll`` returns whatever has arrived, round-robin over partitions, and starts the next
fetch of every partition it drained. Fetches therefore run ahead of the application (Kafka's prefetching) by at
most one response per partition. Every fetch carries the partition's *epoch*, bumped by ``seek`` and offset
resets, and an answer for an old epoch is dropped, so a seek is never undone by a fetch already in flight.

OFFSET_OUT_OF_RANGE resets a position only when the position is really outside the log (``out_of_range_action``):
below the log start, or above the log end of a leader that is current, confirmed after a metadata refresh. A new
leader's high watermark may lag the old one's, so it can call a valid position out of range; resetting at once
(``auto_offset_reset="earliest"``) would rewind a group member to the log start and re-read everything.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from odradek.client.metadata import REFRESH_ERRORS, Metadata, check_authorized
from odradek.client.security import ClientSecurity
from odradek.client.transport import BATCHES_MEDIA_TYPE, Transport, parse_bootstrap, quote_path
from odradek.client.types import ConsumerRecord, TopicPartition
from odradek.protocol import media
from odradek.protocol.errors import (
    InvalidConfigError,
    NotLeaderOrFollowerError,
    OdradekError,
    OffsetOutOfRangeError,
    UnknownTopicError,
)
from odradek.protocol.records import decode_batch, iter_batch_headers

__all__ = ["Consumer"]

_CLIENT_IDS = itertools.count(1)
_RESETS = ("earliest", "latest", "none")


def _retry_later(exc: OdradekError) -> bool:
    """Whether a poll waits and asks again: a retriable error, or an unknown topic, as Kafka's consumer treats
    UNKNOWN_TOPIC_OR_PARTITION (an InvalidMetadataException): a topic just created is unknown to a broker whose
    metadata has not caught up yet, and an assigned topic that never appears leaves poll empty, not failing."""
    return exc.retriable or isinstance(exc, UnknownTopicError)

RESET, RETRY, CONFIRM = "reset", "retry", "confirm"  # what an OFFSET_OUT_OF_RANGE answer makes the consumer do


def out_of_range_action(position: int, details: Mapping[str, Any], known_epoch: int, suspected: bool) -> str:
    """What an OFFSET_OUT_OF_RANGE answer for a fetch at ``position`` means (Kafka's KIP-320 reasoning).

    ``details`` are the error's (the leader's ``log_start_offset``, ``log_end_offset`` and ``leader_epoch``);
    ``known_epoch`` the newest leader epoch this partition was fetched from; ``suspected`` whether the previous
    fetch at this position, before a metadata refresh, was already called out of range above the log end.

    * ``RESET``: below the log start (retention or a deletion removed the records), or above the log end of the
      current leader twice, with a metadata refresh in between: the position really is gone.
    * ``RETRY``: the position is within the answering log (a leader whose high watermark lags: the records exist,
      they are not readable yet), or the answer came from a leader older than one already fetched from (a
      deposed leader that does not know it yet): refresh metadata and fetch again, never move.
    * ``CONFIRM``: above the log end, first time: refresh metadata and fetch again before believing it.
    """
    start, end, epoch = details.get("log_start_offset"), details.get("log_end_offset"), details.get("leader_epoch")
    if start is not None and position < int(start):
        return RESET
    if end is not None and position <= int(end):
        return RETRY
    if epoch is not None and int(epoch) < known_epoch:
        return RETRY
    return RESET if suspected else CONFIRM


class _Fetched:
    """One fetch answer waiting to be handed to the application."""

    __slots__ = ("epoch", "error", "index", "next_offset", "records")

    def __init__(
        self, epoch: int, records: list[ConsumerRecord], next_offset: int, error: OdradekError | None = None
    ) -> None:
        self.epoch = epoch
        self.records = records
        self.index = 0
        self.next_offset = next_offset
        self.error = error


class _PartitionState:
    __slots__ = ("buffered", "epoch", "fetching", "leader_epoch", "position", "reset", "retry_at", "suspect")

    def __init__(self, reset: str | None) -> None:
        self.position: int | None = None
        self.reset = reset  # strategy to apply before the next fetch, when position is None
        self.epoch = 0
        self.fetching = False  # a fetch for the current epoch is in flight
        self.buffered: _Fetched | None = None
        self.retry_at = 0.0
        self.leader_epoch = -1  # the newest leader epoch a fetch of this partition was answered by
        self.suspect: tuple[int, object] | None = None  # (position, metadata view) of an unconfirmed out-of-range

    def moved(self) -> None:
        """Position changed by the application or a reset: whatever is buffered or in flight is stale."""
        self.epoch += 1
        self.fetching = False
        self.buffered = None


class Consumer:
    """Reads records of assigned partitions. Not thread-safe: one thread polls, as with Kafka's consumer.

    ``close()`` alone may come from another thread; it ends an iteration at its next wake-up.

    Args:
        bootstrap_servers: ``"host:port,host:port"`` or a list; ``http://`` is optional.
        fetch_max_bytes: bytes per partition per fetch (whole batches; at least one batch comes back).
        fetch_max_wait_ms: how long a fetch waits at the high watermark for new records.
        auto_offset_reset: where to start without a position or after OFFSET_OUT_OF_RANGE: ``"earliest"``,
            ``"latest"``, or ``"none"`` (raise :class:`OffsetOutOfRangeError` from ``poll``).
        consumer_timeout_ms: iteration (``for record in consumer``) stops after this long without records;
            None iterates until ``close()``.
        fetch_threads: concurrent fetches (one per partition at most).
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        fetch_max_bytes: int = 1 << 20,
        fetch_max_wait_ms: int = 500,
        auto_offset_reset: str = "earliest",
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        metadata_max_age_ms: int = 300_000,
        consumer_timeout_ms: float | None = None,
        fetch_threads: int = 8,
        client_id: str | None = None,
        isolation_level: str = "read_uncommitted",
        **security: Any,  # ssl_cafile, ssl_certfile, ssl_keyfile, sasl_username, sasl_password, sasl_token
    ) -> None:
        if isolation_level not in ("read_uncommitted", "read_committed"):
            raise InvalidConfigError(f"isolation_level must be read_uncommitted or read_committed, not "
                                     f"{isolation_level!r}")
        # read_committed: the leader reads up to the last stable offset and drops aborted transactions
        # (docs/transactions.md), so the decoding below is the same for both levels.
        self._isolation = isolation_level
        if auto_offset_reset not in _RESETS:
            raise InvalidConfigError(f"auto_offset_reset must be one of {_RESETS}, not {auto_offset_reset!r}")
        self._max_bytes = fetch_max_bytes
        self._max_wait_ms = fetch_max_wait_ms
        self._reset = auto_offset_reset
        self._backoff = retry_backoff_ms / 1000.0
        self._request_timeout_ms = request_timeout_ms
        self._consumer_timeout_ms = consumer_timeout_ms
        self._threads = max(1, fetch_threads)
        self.client_id = client_id or f"consumer-{next(_CLIENT_IDS)}"  # Kafka's default client.id shape
        self._transport = Transport(request_timeout_ms=request_timeout_ms, client_id=self.client_id,
                                    security=ClientSecurity.from_kwargs(security))
        self._metadata = Metadata(
            self._transport,
            parse_bootstrap(bootstrap_servers),
            retry_backoff_ms=retry_backoff_ms,
            metadata_max_age_ms=metadata_max_age_ms,
        )
        self._states: dict[TopicPartition, _PartitionState] = {}
        self._order: list[TopicPartition] = []  # round-robin order of hand-out
        self._next = 0
        self._cond = threading.Condition()
        self._arrived = 0  # bumped (under _cond) whenever a fetch answer lands
        self._drained = False  # _collect emptied a partition's buffer: its next fetch can start
        self._pool: ThreadPoolExecutor | None = None
        self._refreshing = False  # a metadata refresh is queued or running on the pool
        self._closed = False

    # ------------------------------------------------------------------------------------------ assignment

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Replace the assignment; partitions kept keep their position."""
        tps = [TopicPartition(*tp) for tp in partitions]
        with self._cond:
            self._states = {tp: self._states.get(tp) or _PartitionState(None) for tp in tps}
            for state in self._states.values():
                if state.position is None and state.reset is None:
                    state.reset = self._reset
            self._order = list(self._states)
            self._next = 0
        self._metadata.add_topics({tp.topic for tp in tps})

    def assignment(self) -> set[TopicPartition]:
        return set(self._states)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Read ``tp`` from ``offset`` next (checked against the log only by the next fetch)."""
        if offset < 0:
            raise ValueError("offset must be >= 0")
        with self._cond:
            state = self._state(tp)
            state.moved()
            state.position = offset
            state.reset = None

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Start from the log start offset (resolved lazily, at the next ``poll`` or ``position``)."""
        self._seek_lazily(partitions, "earliest")

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Start from the end: the high watermark, or for a read_committed consumer the last stable offset (resolved
        lazily, at the next ``poll`` or ``position``), as Kafka's seekToEnd."""
        self._seek_lazily(partitions, "latest")

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record ``poll`` will return for ``tp`` (resolving a pending reset now)."""
        state = self._state(tp)
        if state.position is None:
            self._resolve(tp, state, raise_errors=True)
        assert state.position is not None
        return state.position

    def _seek_lazily(self, partitions: Sequence[TopicPartition], strategy: str) -> None:
        with self._cond:
            for tp in partitions or list(self._states):
                state = self._state(tp)
                state.moved()
                state.position = None
                state.reset = strategy

    def _state(self, tp: TopicPartition) -> _PartitionState:
        state = self._states.get(TopicPartition(*tp))
        if state is None:
            raise ValueError(f"{tp} is not assigned to this consumer")
        return state

    # ------------------------------------------------------------------------------------------------ poll

    def poll(self, timeout_ms: float = 0, max_records: int | None = None) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records that have arrived, per partition, waiting up to ``timeout_ms`` for at least one.

        Raises:
            OffsetOutOfRangeError: a position is out of range (or missing) and ``auto_offset_reset="none"``.
            OdradekError: a non-retriable fetch error (say the topic was deleted), once per failed fetch.
        """
        if self._closed:
            raise RuntimeError("poll() after close()")
        deadline = time.monotonic() + max(0.0, timeout_ms) / 1000.0
        limit = max_records if max_records is not None else 1 << 62
        while True:
            self._prepare()
            with self._cond:
                out = self._collect(limit)
                seen = self._arrived
            if out:
                self._start_fetches()  # prefetch what was just drained
                return out
            self._start_fetches()
            with self._cond:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._closed:
                    return {}
                if self._arrived == seen:
                    self._cond.wait(min(remaining, self._idle_wait()))

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """Records one at a time, long-polling as needed; the position advances per record yielded."""
        idle_since = time.monotonic()
        while not self._closed:
            with self._cond:  # fast path: the next record of a buffered answer, no fetch bookkeeping
                self._drained = False
                batch = self._collect(1)
            if self._drained or not batch:
                if not batch:
                    try:
                        batch = self.poll(timeout_ms=self._max_wait_ms, max_records=1)
                    except RuntimeError:
                        if self._closed:  # close() from another thread
                            return
                        raise
                self._start_fetches()
            for records in batch.values():
                yield from records
                idle_since = time.monotonic()
            if (
                not batch
                and self._consumer_timeout_ms is not None
                and time.monotonic() - idle_since >= self._consumer_timeout_ms / 1000.0
            ):
                return

    def close(self) -> None:
        """Stop fetching and close connections; fetches in flight end on their own (within their long-poll)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self._transport.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---------------------------------------------------------------------------------------------- internals

    def _idle_wait(self) -> float:
        """How long poll sleeps before looking again when nothing arrived (retries of failed partitions)."""
        return max(self._backoff, 0.01)

    def _prepare(self) -> None:
        """Refresh metadata if asked, and resolve pending offset resets (both rare).

        The first refresh blocks (nothing can be fetched without leaders); later ones run on the fetch pool, so a
        hung broker does not stall ``poll`` on the partitions that are fine.
        """
        metadata = self._metadata
        if not self._refreshing and metadata.needs_refresh():
            if not metadata.view.topics:
                metadata.maybe_refresh()
            else:
                self._refreshing = True
                self._executor().submit(self._refresh_metadata)
        for topic in {tp.topic for tp in self._states}:
            check_authorized(metadata.topic(topic))  # Kafka's poll raises TopicAuthorizationException too
        now = time.monotonic()
        for tp, state in list(self._states.items()):
            if state.position is None and now >= state.retry_at:
                self._resolve(tp, state, raise_errors=False)

    def _refresh_metadata(self) -> None:
        try:
            self._metadata.maybe_refresh()
        finally:
            with self._cond:
                self._refreshing = False
                self._arrived += 1  # leaders may have changed: let poll look again
                self._cond.notify_all()

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            # One more than the fetches in flight, so a metadata refresh never queues behind long-polls.
            self._pool = ThreadPoolExecutor(max_workers=self._threads + 1, thread_name_prefix="odradek-fetch")
        return self._pool

    def _resolve(self, tp: TopicPartition, state: _PartitionState, *, raise_errors: bool) -> None:
        strategy = state.reset or self._reset
        if strategy == "none":
            raise OffsetOutOfRangeError(f"{tp} has no position and auto_offset_reset is 'none'",
                                        topic=tp.topic, partition=tp.partition)
        epoch = state.epoch
        try:
            offsets = self._offsets(tp)
        except OdradekError as exc:
            if raise_errors or not _retry_later(exc):
                raise
            state.retry_at = time.monotonic() + self._backoff
            return
        with self._cond:
            if state.epoch == epoch and state.position is None:
                state.position = int(offsets["beginning_offset" if strategy == "earliest" else "end_offset"])
                state.reset = None

    def _offsets(self, tp: TopicPartition) -> dict[str, Any]:
        path = quote_path("topics", tp.topic, "partitions", tp.partition, "offsets")
        url = self._metadata.leader_url(tp.topic, tp.partition)
        urls = ([url] if url else []) + [u for u in self._metadata.broker_urls() if u != url]
        last: OdradekError | None = None
        for u in urls:
            try:
                # read_committed: the end is the last stable offset, as Kafka's seekToEnd and auto reset give it.
                return self._transport.get_json(u, path, query={"isolation": self._isolation})
            except OdradekError as exc:
                if isinstance(exc, (*REFRESH_ERRORS, UnknownTopicError)):
                    self._metadata.request_update()
                if not _retry_later(exc):
                    raise
                last = exc
        raise last or OdradekError("no broker to ask for offsets")

    def _start_fetches(self) -> None:
        if self._closed:
            return
        now = time.monotonic()
        n = len(self._states)
        # More partitions than threads: shorten each long-poll so a full round still takes about max_wait.
        wait_ms = self._max_wait_ms if n <= self._threads else self._max_wait_ms * self._threads // n
        for tp, state in self._states.items():
            if state.fetching or state.buffered is not None or state.position is None or now < state.retry_at:
                continue
            url = self._metadata.leader_url(tp.topic, tp.partition)
            if url is None:
                self._metadata.request_update()
                state.retry_at = now + self._backoff
                continue
            state.fetching = True
            self._executor().submit(self._fetch, tp, state, state.epoch, url, state.position, wait_ms)

    def _fetch(self, tp: TopicPartition, state: _PartitionState, epoch: int, url: str, offset: int,
               wait_ms: int) -> None:
        """One binary fetch, decoded; runs on a pool thread and leaves its answer in ``state.buffered``."""
        leader_epoch = -1
        try:
            resp = self._transport.request(
                url,
                "GET",
                quote_path("topics", tp.topic, "partitions", tp.partition, "batches"),
                query={"offset": offset, "max_bytes": self._max_bytes, "timeout_ms": wait_ms,
                       "isolation": self._isolation},
                accept=BATCHES_MEDIA_TYPE,
                timeout_ms=self._request_timeout_ms + wait_ms,
            )
            records, next_offset = _decode(tp, resp.body, offset)
            fetched = _Fetched(epoch, records, next_offset)
            raw_epoch = resp.headers.get(media.LEADER_EPOCH) or ""
            leader_epoch = int(raw_epoch) if raw_epoch.lstrip("-").isdigit() else -1
        except OdradekError as exc:
            fetched = _Fetched(epoch, [], offset, exc)
        except Exception as exc:  # a decoding bug must not kill the pool thread silently
            fetched = _Fetched(epoch, [], offset, OdradekError(f"fetch of {tp} failed: {exc!r}"))
        with self._cond:
            if state.epoch == epoch:
                state.fetching = False
                if fetched.error is None:
                    state.buffered = fetched
                    state.suspect = None
                    state.leader_epoch = max(state.leader_epoch, leader_epoch)
                else:
                    self._on_fetch_error(tp, state, fetched)
            self._arrived += 1
            self._cond.notify_all()

    def _on_fetch_error(self, tp: TopicPartition, state: _PartitionState, fetched: _Fetched) -> None:
        """Decide what a failed fetch means (under ``_cond``): reset, retry later, or report to poll."""
        exc = fetched.error
        assert exc is not None
        if isinstance(exc, OffsetOutOfRangeError) and state.position is not None:
            view = self._metadata.view
            suspect = state.suspect
            suspected = suspect is not None and suspect[0] == state.position and suspect[1] is not view
            action = out_of_range_action(state.position, exc.details, state.leader_epoch, suspected)
            if action != RESET:  # never move on a leader's word alone: refresh metadata and ask again
                if action == CONFIRM and (state.suspect is None or state.suspect[0] != state.position):
                    state.suspect = (state.position, view)
                self._metadata.request_update()
                state.retry_at = time.monotonic() + self._backoff
                return
            state.suspect = None
            if self._reset != "none":
                state.moved()
                details = exc.details
                bound = details.get("log_start_offset" if self._reset == "earliest" else "high_watermark")
                state.position = int(bound) if bound is not None else None
                state.reset = self._reset if bound is None else None
                return
        if isinstance(exc, REFRESH_ERRORS):
            if isinstance(exc, NotLeaderOrFollowerError):
                self._metadata.hint_leader(tp.topic, tp.partition, exc.details.get("leader"),
                                           exc.details.get("leader_url"))
            self._metadata.request_update()
        state.retry_at = time.monotonic() + self._backoff
        if not exc.retriable:
            state.buffered = fetched  # poll raises it, once

    def _collect(self, limit: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Hand out buffered records round-robin over partitions (under ``_cond``); advance positions."""
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        order = self._order
        n = len(order)
        if not n:
            return out
        start = self._next % n
        for i in range(n):
            if limit <= 0:
                break
            tp = order[(start + i) % n]
            state = self._states.get(tp)
            if state is None:
                continue
            fetched = state.buffered
            if fetched is None:
                continue
            if fetched.error is not None:
                if out:  # hand out what we have; the error is raised by the next call
                    break
                state.buffered = None
                raise fetched.error
            records = fetched.records
            j = fetched.index
            take = records[j : j + limit]
            if take:
                out[tp] = take
                limit -= len(take)
                fetched.index = j + len(take)
                state.position = take[-1].offset + 1
                self._next = (start + i + 1) % n
            if fetched.index >= len(records):
                state.buffered = None
                self._drained = True
                if state.position is None or fetched.next_offset > state.position:
                    state.position = fetched.next_offset
        return out


def _decode(tp: TopicPartition, body: bytes, offset: int) -> tuple[list[ConsumerRecord], int]:
    """Records at or after ``offset`` from whole batches, and the offset after the last batch.

    The position jumps to the end of each batch rather than past its last record, so gaps left by compaction and
    control batches are skipped instead of fetched again.
    """
    topic, partition = tp
    out: list[ConsumerRecord] = []
    add = out.append
    next_offset = offset
    for pos, header in iter_batch_headers(body):
        batch_next = header.base_offset + header.last_offset_delta + 1
        if batch_next <= offset:
            continue
        if not header.is_control and header.record_count:
            for r in decode_batch(body, pos):
                if r.offset >= offset:
                    add(ConsumerRecord(topic, partition, r.offset, r.timestamp, r.key, r.value, r.headers))
        if batch_next > next_offset:
            next_offset = batch_next
    return out, next_offset
