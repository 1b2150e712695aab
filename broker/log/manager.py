"""The log manager: every partition log of one data directory, their checkpoints and background work.

Layout of the data directory (Kafka's, with Odradek's marker name)::

    <data dir>/
      .lock                               flock'd while a broker uses the directory
      .odradek_cleanshutdown              written by close(); present at startup = skip recovery scans
      recovery-point-offset-checkpoint    "<topic> <partition> <offset>": flushed up to here
      log-start-offset-checkpoint         log start offsets (DeleteRecords moves them inside a segment)
      cleaner-offset-checkpoint           first dirty offset of each compacted log
      <topic>-<partition>/                one Log (see log.py)
      <topic>-<partition>.<uuid>-delete/  a deleted partition waiting for file.delete.delay.ms

The broker's own disk I/O (appends, reads, truncations, checkpoints) runs on ``executor``, per-partition
queues on a small pool (``executor.py``), so that its event loop never waits on the disk.

Background work runs on two daemon threads so that none of it blocks appends:

* ``odradek-log-maintenance``: flushes requested by segment rolls, ``flush.ms``, retention every
  ``retention_check_interval_ms`` (Kafka's ``log.retention.check.interval.ms``), delayed file deletion, and
  the checkpoint files every ``checkpoint_interval_ms``;
* ``odradek-log-cleaner``: compaction, one log at a time (the dirtiest first), backing off
  ``cleaner_backoff_ms`` when no log needs it.

Every piece is also callable directly (``run_maintenance``, ``run_cleaner``) with an explicit time, which is
how tests drive it with an injected clock and ``background=False``.

Concurrency: thread-safe. ``_lock`` guards the map of logs; it is held while a new log is created (so two
callers cannot create the same one) and never while calling into a live Log.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path

from odradek.protocol.errors import KafkaStorageError
from odradek.protocol.model import TopicPartition

from . import checkpoint
from .cleaner import DEFAULT_MAX_MAP_ENTRIES, clean, needs_cleaning, plan
from .config import LogConfig
from .executor import StorageExecutor
from .log import Log

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".odradek_cleanshutdown"
LOCK_FILE = ".lock"
RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_FILE = "log-start-offset-checkpoint"
CLEANER_OFFSET_FILE = "cleaner-offset-checkpoint"
DELETE_SUFFIX = "-delete"



def log_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_log_dir_name(name: str) -> TopicPartition | None:
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        return None
    return topic, int(partition)


class LogManager:
    """Owns a data directory: opens, recovers, checkpoints, cleans and deletes its logs."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        defaults: Mapping[str, str] | None = None,
        topic_configs: Callable[[str], Mapping[str, str] | None] | None = None,
        now: Callable[[], float] = time.time,
        background: bool = True,
        retention_check_interval_ms: int = 300_000,
        flush_check_interval_ms: int = 1_000,
        checkpoint_interval_ms: int = 60_000,
        cleaner_backoff_ms: int = 15_000,
        max_map_entries: int = DEFAULT_MAX_MAP_ENTRIES,
    ) -> None:
        self.data_dir = Path(data_dir)
        self._defaults = dict(defaults or {})
        LogConfig.from_topic_config(None, self._defaults)  # refuse bad broker defaults at startup
        self._topic_configs = topic_configs or (lambda topic: None)
        self._now = now
        self._background = background
        self.retention_check_interval_ms = retention_check_interval_ms
        self.flush_check_interval_ms = flush_check_interval_ms
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self.cleaner_backoff_ms = cleaner_backoff_ms
        self.max_map_entries = max_map_entries
        self._lock = threading.Lock()
        self.executor = StorageExecutor()  # the broker's appends, reads, truncations and checkpoints of this dir
        self._logs: dict[TopicPartition, Log] = {}
        self._tasks: deque[Callable[[], None]] = deque()
        self._pending_dir_deletes: list[tuple[int, Log | None, Path]] = []
        self._wake = threading.Condition()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock_fd: int | None = None
        self.had_clean_shutdown = False
        self._last_retention_ms = self._last_flush_check_ms = self._last_checkpoint_ms = 0

    def _now_ms(self) -> int:
        return int(self._now() * 1000)

    # ------------------------------------------------------------------------------------------ startup

    def startup(self) -> None:
        """Lock the directory, open and recover every log, then start the background threads.

        Raises:
            KafkaStorageError: another process holds the directory.
        """
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(self.data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(self._lock_fd)
            self._lock_fd = None
            raise KafkaStorageError(f"{self.data_dir} is in use by another process") from exc
        marker = self.data_dir / CLEAN_SHUTDOWN_FILE
        self.had_clean_shutdown = marker.exists()
        recovery_points = self._read_checkpoint(RECOVERY_POINT_FILE)
        log_starts = self._read_checkpoint(LOG_START_FILE)
        first_dirty = self._read_checkpoint(CLEANER_OFFSET_FILE)
        if not self.had_clean_shutdown:
            log.warning("%s: no clean shutdown marker; recovering logs after their recovery points", self.data_dir)
        for path in sorted(self.data_dir.iterdir()):
            if not path.is_dir():
                continue
            if path.name.endswith(DELETE_SUFFIX):
                shutil.rmtree(path, ignore_errors=True)
                continue
            tp = parse_log_dir_name(path.name)
            if tp is None:
                continue
            self._logs[tp] = Log.open(
                path,
                self._config_for(tp[0]),
                now=self._now,
                recovery_point=recovery_points.get(tp, 0),
                log_start_offset=log_starts.get(tp),
                first_dirty_offset=first_dirty.get(tp),
                clean_shutdown=self.had_clean_shutdown,
                scheduler=self._submit,
            )
        # Only now: a crash during loading must recover again next time.
        with contextlib.suppress(FileNotFoundError):
            marker.unlink()
        self.checkpoint()
        now_ms = self._now_ms()
        self._last_retention_ms = self._last_flush_check_ms = self._last_checkpoint_ms = now_ms
        if self._background:
            for name, target in (
                ("odradek-log-maintenance", self._maintenance_loop),
                ("odradek-log-cleaner", self._cleaner_loop),
            ):
                thread = threading.Thread(target=target, name=name, daemon=True)
                thread.start()
                self._threads.append(thread)

    def _read_checkpoint(self, name: str) -> dict[TopicPartition, int]:
        try:
            return checkpoint.read_offsets(self.data_dir / name)
        except KafkaStorageError as exc:
            # Losing a recovery point only costs a longer recovery; losing log starts re-exposes deleted
            # records until retention runs. Neither justifies refusing to start.
            log.error("%s; ignoring it", exc)
            return {}

    def _config_for(self, topic: str, overrides: Mapping[str, str] | None = None) -> LogConfig:
        return LogConfig.from_topic_config(
            overrides if overrides is not None else self._topic_configs(topic), self._defaults
        )

    # --------------------------------------------------------------------------------------------- logs

    def get_log(self, topic: str, partition: int) -> Log | None:
        with self._lock:
            return self._logs.get((topic, partition))

    def all_logs(self) -> dict[TopicPartition, Log]:
        with self._lock:
            return dict(self._logs)

    def get_or_create_log(self, topic: str, partition: int, config: Mapping[str, str] | None = None) -> Log:
        """The log of ``topic``/``partition``, created empty if it does not exist yet.

        ``config`` is the topic's overrides (Kafka names, string values); None asks ``topic_configs``.

        Raises:
            InvalidConfigError: the merged config is invalid.
        """
        tp = (topic, partition)
        with self._lock:
            existing = self._logs.get(tp)
            if existing is not None:
                return existing
            new_log = Log.open(
                self.data_dir / log_dir_name(topic, partition),
                self._config_for(topic, config),
                now=self._now,
                scheduler=self._submit,
            )
            self._logs[tp] = new_log
            return new_log

    def update_topic_config(self, topic: str, overrides: Mapping[str, str]) -> None:
        """Apply a topic config change (from ZooKeeper) to every local partition of the topic."""
        config = self._config_for(topic, overrides)
        for (t, _p), lg in self.all_logs().items():
            if t == topic:
                lg.update_config(config)

    def delete_log(self, topic: str, partition: int) -> bool:
        """Topic deletion: rename the directory ``*-delete`` now, delete it after ``file.delete.delay.ms``.

        The log refuses new operations at once; reads already in flight finish on open descriptors.
        """
        with self._lock:
            lg = self._logs.pop((topic, partition), None)
        if lg is None:
            return False
        lg.retire()
        target = self.data_dir / f"{log_dir_name(topic, partition)}.{uuid.uuid4().hex}{DELETE_SUFFIX}"
        os.replace(lg.dir, target)
        checkpoint.fsync_dir(self.data_dir)
        due = self._now_ms() + lg.config.file_delete_delay_ms
        with self._lock:
            self._pending_dir_deletes.append((due, lg, target))
        if lg.config.file_delete_delay_ms <= 0:
            self._delete_due_dirs(self._now_ms())
        return True

    def _delete_due_dirs(self, now_ms: int) -> None:
        with self._lock:
            due = [d for d in self._pending_dir_deletes if d[0] <= now_ms]
            self._pending_dir_deletes = [d for d in self._pending_dir_deletes if d[0] > now_ms]
        for _t, lg, path in due:
            if lg is not None:
                # Pending index entries would be written to the pre-rename path, which is gone: the whole
                # directory is being deleted, so a failure to flush them does not matter.
                with contextlib.suppress(OSError):
                    lg.close_handlers()
            shutil.rmtree(path, ignore_errors=True)

    # --------------------------------------------------------------------------------------- checkpoints

    def checkpoint(self) -> None:
        """Write the recovery-point, log-start and cleaner-offset checkpoint files."""
        logs = self.all_logs()
        checkpoint.write_offsets(
            self.data_dir / RECOVERY_POINT_FILE, {tp: lg.recovery_point for tp, lg in logs.items()}
        )
        checkpoint.write_offsets(self.data_dir / LOG_START_FILE, {tp: lg.log_start_offset for tp, lg in logs.items()})
        checkpoint.write_offsets(
            self.data_dir / CLEANER_OFFSET_FILE,
            {tp: lg.first_dirty_offset for tp, lg in logs.items() if lg.config.compact},
        )

    # ---------------------------------------------------------------------------------------- background

    def _submit(self, task: Callable[[], None]) -> None:
        """The scheduler handed to logs: run ``task`` soon on the maintenance thread."""
        self._tasks.append(task)
        with self._wake:
            self._wake.notify_all()

    def run_maintenance(self, now_ms: int | None = None, *, force: bool = False) -> None:
        """One round of everything but compaction; each part only when its interval is due (or ``force``)."""
        now_ms = self._now_ms() if now_ms is None else now_ms
        while self._tasks:
            task = self._tasks.popleft()
            self._guarded(task)
        logs = list(self.all_logs().values())
        if force or now_ms - self._last_flush_check_ms >= self.flush_check_interval_ms:
            self._last_flush_check_ms = now_ms
            for lg in logs:
                self._guarded(lambda lg=lg: lg.flush_if_due(now_ms))  # type: ignore[misc]
        if force or now_ms - self._last_retention_ms >= self.retention_check_interval_ms:
            self._last_retention_ms = now_ms
            for lg in logs:
                self._guarded(lambda lg=lg: lg.delete_old_segments(now_ms))  # type: ignore[misc]
        for lg in logs:
            self._guarded(lambda lg=lg: lg.delete_expired_files(now_ms))  # type: ignore[misc]
        self._delete_due_dirs(now_ms)
        if force or now_ms - self._last_checkpoint_ms >= self.checkpoint_interval_ms:
            self._last_checkpoint_ms = now_ms
            self._guarded(self.checkpoint)

    def run_cleaner(self, now_ms: int | None = None) -> Log | None:
        """Compact the dirtiest log that needs it; returns that log, or None when none did."""
        now_ms = self._now_ms() if now_ms is None else now_ms
        candidates = []
        for lg in self.all_logs().values():
            if lg.config.compact:
                p = plan(lg, now_ms)
                if p is not None and needs_cleaning(p):
                    candidates.append((not p.must_clean, -p.dirty_ratio, id(lg), lg))
        if not candidates:
            return None
        lg = min(candidates)[3]
        clean(lg, now_ms, max_map_entries=self.max_map_entries)
        return lg

    def _guarded(self, task: Callable[[], object]) -> None:
        try:
            task()
        except Exception:
            log.exception("log maintenance task failed")

    def _maintenance_loop(self) -> None:
        while not self._stopping.is_set():
            self._guarded(self.run_maintenance)
            with self._wake:
                if not self._tasks and not self._stopping.is_set():
                    self._wake.wait(min(self.flush_check_interval_ms, 1000) / 1000)

    def _cleaner_loop(self) -> None:
        while not self._stopping.is_set():
            cleaned = None
            try:
                cleaned = self.run_cleaner()
            except Exception:
                log.exception("log cleaner pass failed")
            if cleaned is None:
                self._stopping.wait(self.cleaner_backoff_ms / 1000)

    # ---------------------------------------------------------------------------------------- shutdown

    def close_handlers(self) -> None:
        """Stop, close every descriptor and release the directory without flushing or writing anything.

        For a failed data directory (nothing written to it can be trusted) and for crash tests; the next
        startup recovers as after a crash.
        """
        self._stop_threads()
        self.executor.shutdown()
        for lg in self.all_logs().values():
            lg.close_handlers()
        self._release_lock()

    def _stop_threads(self) -> None:
        self._stopping.set()
        with self._wake:
            self._wake.notify_all()
        for thread in self._threads:
            thread.join()
        self._threads = []

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def close(self) -> None:
        """Stop the threads, flush and close every log, write the checkpoints and the clean marker."""
        self._stop_threads()
        self.executor.shutdown()
        while self._tasks:
            self._guarded(self._tasks.popleft())
        for lg in self.all_logs().values():
            lg.close()
        self.checkpoint()
        self._delete_due_dirs(2**63 - 1)
        marker = self.data_dir / CLEAN_SHUTDOWN_FILE
        marker.touch()
        checkpoint.fsync_dir(self.data_dir)
        self._release_lock()
