"""The exactly-once writer (odradek_spark/exactly_once.py): a streaming query killed (SIGKILL of its driver and
JVM) and restarted from its checkpoint leaves each record once for read_committed readers; and, without Spark's
timing in the way, each window of the two-phase commit: a batch replayed after the driver committed writes
nothing, one replayed before the commit fences and aborts the first attempt."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from odradek import Consumer, TopicPartition
from odradek.protocol.errors import OdradekError
from odradek_spark.exactly_once import end_transactions, last_committed_batch, write_transactional
from odradek_spark.options import parse_sink_options
from odradek_spark.writer import SinkLayout
from tests.harness.cluster import LocalProcessBackend
from tests.harness.http import metadata, request
from tests.harness.wait import wait_until
from tests.spark.conftest import bootstrap, new_topic, produce

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
VALUE_ONLY = SinkLayout(topic_column=False, key_column=False, partition_column=False, headers_column=False)
# Generous deadlines for a loaded 2-core machine (a cold Spark start alone is 5-10 s there).
PROGRESS_DEADLINE_S = 600.0
STOP_FEEDER_S = 60.0
CATCH_UP_DEADLINE_S = 600
READ_DEADLINE_S = 120.0  # one read of a topic to its end, with the cluster up


def committed_values(c: LocalProcessBackend, topic: str, partitions: int, *,
                     isolation: str = "read_committed") -> list[bytes]:
    """Every value a read_committed reader sees (or, for a diagnosis, a read_uncommitted one): read until the
    consumer's position reaches each partition's end (the last stable offset, or the high watermark) as it was
    when the read began, not until a poll comes back empty, which on a slow machine can be before the end."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer = Consumer(bootstrap(c), isolation_level=isolation, auto_offset_reset="earliest")
    consumer.assign(tps)
    out: list[bytes] = []
    try:
        consumer.seek_to_end(*tps)
        ends = {tp: consumer.position(tp) for tp in tps}
        consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + READ_DEADLINE_S
        while any(consumer.position(tp) < end for tp, end in ends.items()):
            if time.monotonic() > deadline:
                at = {tp.partition: consumer.position(tp) for tp in tps}
                raise AssertionError(f"read {len(out)} values of {topic} in {READ_DEADLINE_S} s: positions {at}, "
                                     f"ends {({tp.partition: e for tp, e in ends.items()})}")
            out += [r.value or b"" for rs in consumer.poll(500).values() for r in rs]
        return out
    finally:
        consumer.close()


def rows(*values: str) -> Iterator[pa.RecordBatch]:
    yield pa.RecordBatch.from_pydict({"value": [v.encode() for v in values]})


def test_each_window_of_the_two_phase_commit(cluster: LocalProcessBackend) -> None:
    sink = new_topic(cluster, partitions=1, rf=3, prefix="eo-direct")
    prefix = f"eo-{uuid.uuid4().hex[:8]}"
    options = parse_sink_options({"bootstrap.servers": bootstrap(cluster), "topic": sink, "exactlyOnce": "true"})
    assert options.exactly_once
    assert last_committed_batch(options, prefix, 0) == -1

    first = write_transactional(options, VALUE_ONLY, rows("b0-a", "b0-b"), prefix, 0, 0)
    assert first.records == 2 and first.transactional_id == f"{prefix}-0"
    assert committed_values(cluster, sink, 1) == []  # written, not committed: invisible
    assert end_transactions(options, [first], commit=True) == 2
    assert last_committed_batch(options, prefix, 0) == 0
    # The driver committed, then died before Spark recorded the batch: the replay writes nothing.
    replay = write_transactional(options, VALUE_ONLY, rows("b0-a", "b0-b"), prefix, 0, 0)
    assert replay.skipped_batch and replay.transactional_id is None
    end_transactions(options, [replay], commit=True)

    # Batch 1 written, then the query died before the driver's commit: the replay fences the first attempt.
    zombie = write_transactional(options, VALUE_ONLY, rows("b1-a"), prefix, 0, 1)
    again = write_transactional(options, VALUE_ONLY, rows("b1-a"), prefix, 0, 1)
    assert again.producer_epoch > zombie.producer_epoch
    with pytest.raises(OdradekError):
        end_transactions(options, [zombie], commit=True)  # a zombie driver's commit is refused
    end_transactions(options, [again], commit=True)
    # Batch 2 aborted by the driver: nothing of it is visible, and the batch is not marked committed.
    aborted = write_transactional(options, VALUE_ONLY, rows("b2-x"), prefix, 0, 2)
    end_transactions(options, [aborted], commit=False)
    assert last_committed_batch(options, prefix, 0) == 1
    assert committed_values(cluster, sink, 1) == [b"b0-a", b"b0-b", b"b1-a"]


@pytest.fixture
def job_processes() -> Iterator[list[subprocess.Popen[str]]]:
    """Spark job processes, each the leader of its own process group (its JVM is a child): SIGKILLed by
    process-group id at teardown if still running."""
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(30)


def start_job(procs: list[subprocess.Popen[str]], *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = subprocess.Popen([sys.executable, "-m", "tests.spark_eo_job", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    procs.append(proc)
    return proc


IDLE_JVM_THREAD = ("ThreadPoolExecutor.getTask", "ForkJoinPool.awaitWork", "SelectorImpl.select",
                   "ReferenceQueue.remove", "Object.wait(java.base", "LinkedBlockingQueue.take")


def busy_jvm_threads(jstack: str) -> str:
    """jstack's thread blocks without the idle pool and selector threads (hundreds of them in a Spark JVM)."""
    blocks = jstack.split("\n\n")
    return "\n\n".join(b for b in blocks if b.startswith('"') and not any(m in b for m in IDLE_JVM_THREAD))


def job_stacks(leader: int) -> str:
    """What every process of a job's process group is doing: the Python stacks of the driver and Spark's Python
    workers (py-spy) and the JVM's busy threads (jstack), for a test that timed out waiting on the job."""
    py_spy = Path(sys.executable).with_name("py-spy")
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            pid, fields = int(stat.parent.name), stat.read_text().rsplit(")", 1)[1].split()
            exe = os.readlink(f"/proc/{pid}/exe")
        except (OSError, ValueError):
            continue
        if int(fields[2]) != leader:  # the process group id
            continue
        java = "java" in exe
        cmd = ["jstack", str(pid)] if java else [str(py_spy), "dump", "--pid", str(pid)] \
            if "python" in exe and py_spy.exists() else None
        if cmd is None:
            continue
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            text = busy_jvm_threads(done.stdout) if java else done.stdout
            out.append(f"--- pid {pid} ({exe}):\n{text[-20000:]}{done.stderr[-2000:]}")
        except (OSError, subprocess.TimeoutExpired) as e:
            out.append(f"--- pid {pid} ({exe}): {e!r}")
    return "\n".join(out)


def checkpoint_state(checkpoint: str) -> str:
    """The query's write-ahead log against its commit log: micro-batches planned (``offsets/``) and done
    (``commits/``), with the last planned batch's source offsets."""
    def ids(sub: str) -> list[int]:
        return sorted(int(f.name) for f in (Path(checkpoint) / sub).glob("[0-9]*"))
    planned, done = ids("offsets"), ids("commits")
    last = (Path(checkpoint) / "offsets" / str(planned[-1])).read_text().splitlines()[-1] if planned else "-"
    return f"micro-batches planned {len(planned)}, committed {len(done)}; the last planned batch's offsets: {last}"


def sink_transactions(c: LocalProcessBackend, checkpoint: str, sink: str) -> str:
    """The coordinator's state of each of the job's transactional ids (``spark-<query id>-<partition>``) and the
    sink partitions' leaders, for a stream whose commits stopped showing."""
    url = c.broker_url(c.broker_ids()[0])
    try:
        query = json.loads((Path(checkpoint) / "metadata").read_text())["id"]
        states = [request("GET", f"{url}/transactions/spark-{query}-{p}")[1] for p in range(2)]
        return f"transactions {states}; sink partitions {metadata(url, sink)['partitions']}"
    except (OSError, ValueError, KeyError, AssertionError) as e:
        return f"transactions: not read ({e!r})"


def thread_stack(thread: threading.Thread) -> str:
    frame = sys._current_frames().get(thread.ident or -1)
    return "".join(traceback.format_stack(frame)) if frame is not None else "(not running)"


class JobOutput(threading.Thread):
    """Reads a job's standard output to its end, so nothing the job (or its JVM and Python workers, which share
    the pipe) writes can fill the pipe and block it; ``started`` is set at the job's ``started`` line."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        super().__init__(name=f"job-{proc.pid}-stdout", daemon=True)
        self.proc, self.started, self.lines = proc, threading.Event(), list[str]()
        self.start()

    def run(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip() == "started":
                self.started.set()
            self.lines = [*self.lines[-50:], line.rstrip()]


class SourceFeeder(threading.Thread):
    """Keeps the source topic a fixed backlog ahead of what the sink has committed, so the streaming job is
    always in the middle of the stream however fast the machine is: the job never runs dry before the kill, and
    the kill never finds it finished. Values are ``r-<i>``, partition ``i % 2``, in chunks of ``chunk``."""

    def __init__(self, c: LocalProcessBackend, topic: str, backlog: int, chunk: int = 20) -> None:
        super().__init__(name="eo-source-feeder", daemon=True)
        self.c, self.topic, self.backlog, self.chunk = c, topic, backlog, chunk
        self.produced = 0
        self.committed_seen = 0  # raised by the test as it observes the sink
        self.error: BaseException | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        try:
            while not self._halt.is_set():
                if self.produced >= self.committed_seen + self.backlog:
                    self._halt.wait(0.05)
                    continue
                first = self.produced
                produce(self.c, self.topic,
                        [{"value": f"r-{i}", "partition": i % 2} for i in range(first, first + self.chunk)])
                self.produced = first + self.chunk
        except BaseException as e:  # reported by stop(): a feeder that died must fail the test
            self.error = e

    def stop(self) -> int:
        """Stop after the chunk in flight; the number of records produced, all acknowledged."""
        self._halt.set()
        self.join(STOP_FEEDER_S)
        assert not self.is_alive(), "the source feeder did not stop"
        if self.error is not None:
            raise AssertionError(f"the source feeder failed: {self.error!r}") from self.error
        return self.produced


@pytest.mark.timeout(PROGRESS_DEADLINE_S + CATCH_UP_DEADLINE_S + 120)
def test_a_killed_and_restarted_streaming_query_leaves_each_record_once(
        cluster: LocalProcessBackend, tmp_path: Path, job_processes: list[subprocess.Popen[str]]) -> None:
    """The kill is driven by what the test sees, not by the machine's speed: the feeder keeps ``backlog`` records
    ahead of the sink, and the job is SIGKILLed once ``kill_after`` records are committed while a backlog is
    still unread, so it dies inside the stream (mid micro-batch or between two) on a fast or a slow machine."""
    source = new_topic(cluster, partitions=2, rf=3, prefix="eo-src")
    sink = new_topic(cluster, partitions=2, rf=3, prefix="eo-dst")
    per_trigger, kill_after, backlog = 20, 60, 100
    feeder = SourceFeeder(cluster, source, backlog)
    feeder.start()
    checkpoint = str(tmp_path / "checkpoint")
    args = (bootstrap(cluster), source, sink, checkpoint, "--per-trigger", str(per_trigger))

    started = time.monotonic()
    progress: list[tuple[float, int]] = []  # (seconds since the start, records committed) at each change
    first = start_job(job_processes, *args)
    first_out = JobOutput(first)
    wait_until(first_out.started.is_set, PROGRESS_DEADLINE_S, "the streaming job to start")

    def mid_stream() -> bool:
        if first.poll() is not None:  # pytest.fail is not an Exception: wait_until does not swallow it
            pytest.fail(f"the streaming job exited ({first.returncode}) before it was killed")
        if feeder.error is not None:
            pytest.fail(f"the source feeder failed: {feeder.error!r}")
        committed = len(committed_values(cluster, sink, 2))
        feeder.committed_seen = committed
        if not progress or progress[-1][1] != committed:
            progress.append((round(time.monotonic() - started, 1), committed))
        return committed >= kill_after and feeder.produced > committed

    try:
        wait_until(mid_stream, PROGRESS_DEADLINE_S, f"{kill_after} records committed with a backlog still unread")
    except AssertionError as e:  # say where the stream stood: written but not committed, or not written at all
        summary = (f"{e}; source produced {feeder.produced}, sink read_committed {feeder.committed_seen}, "
                   f"read_uncommitted {len(committed_values(cluster, sink, 2, isolation='read_uncommitted'))}; "
                   f"{checkpoint_state(checkpoint)}; committed over time (s, records): {progress}; "
                   f"{sink_transactions(cluster, checkpoint, sink)}")
        # The summary first: a failure report that is cut keeps its beginning.
        print(f"{summary}\nthe job's stdout: {first_out.lines}\nthe feeder: {thread_stack(feeder)}\n"
              f"{job_stacks(first.pid)}", file=sys.stderr)
        raise AssertionError(summary) from None
    os.killpg(first.pid, signal.SIGKILL)  # the driver and its JVM, wherever they are in a micro-batch
    first.wait(30)
    killed_at = len(committed_values(cluster, sink, 2))
    n = feeder.stop()
    assert kill_after <= killed_at < n, f"killed at {killed_at} of {n}: the job was not inside the stream"

    # The restart replays the killed micro-batch with the offsets its log recorded; the batches after it may be
    # larger (fewer transactions to copy the rest).
    second = start_job(job_processes, *args, "--per-trigger", str(5 * per_trigger), "--available-now")
    JobOutput(second)
    assert second.wait(CATCH_UP_DEADLINE_S) == 0

    values = committed_values(cluster, sink, 2)
    counts = Counter(values)
    assert set(counts) == {f"r-{i}".encode() for i in range(n)}  # nothing lost
    duplicated = {v: c for v, c in counts.items() if c > 1}
    assert not duplicated, f"{len(duplicated)} records written more than once (killed at {killed_at} of {n})"


def test_options_of_the_exactly_once_writer_and_read_committed_reader() -> None:
    from odradek_spark.options import OptionError, parse_source_options

    base = {"bootstrap.servers": "http://127.0.0.1:1", "topic": "t"}
    assert not parse_sink_options(base).exactly_once
    implied = parse_sink_options({**base, "transactional.id.prefix": "etl-1"})
    assert implied.exactly_once and implied.transactional_id_prefix == "etl-1"
    with pytest.raises(OptionError, match="acks=all"):
        parse_sink_options({**base, "exactlyOnce": "true", "kafka.acks": "1"})
    with pytest.raises(OptionError, match="prefix"):
        parse_sink_options({**base, "transactional.id.prefix": "bad/prefix"})
    source = {"bootstrap.servers": "http://127.0.0.1:1", "subscribe": "t"}
    assert parse_source_options({**source, "kafka.isolation.level": "read_committed"}, streaming=True).read_committed
    with pytest.raises(OptionError, match="disagree"):
        parse_source_options({**source, "isolation.level": "read_committed",
                              "kafka.isolation.level": "read_uncommitted"}, streaming=False)
