"""``odradek verify``: start (or attach to) a cluster, run the workload under the nemesis, heal, read back, check.

Exit codes: 0 the checks passed, 1 a check failed (the summary names it), 2 the run itself could not be made.
Everything the run creates (processes, namespaces, the loop disk and its mount) is removed in a ``finally``,
failures included; ``--cleanup DIR`` removes what a killed run left (its ``netlab.json``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

from odradek_local.cluster import listen_port_range
from odradek_verify import checker, clockshift, report, txn_checker
from odradek_verify.cluster import LoopDisk, VerifyCluster
from odradek_verify.nemesis import ALL_KINDS, CLOCK_KINDS, NETWORK_KINDS, SCENARIOS, Nemesis, NemesisConfig
from odradek_verify.netns import CLIENT, NetLab, cleanup_leftovers, netns_supported
from odradek_verify.txn import (
    ClientProcessor,
    ClientReader,
    ClientTxnWriter,
    KafkaProcessor,
    KafkaReader,
    KafkaTxnWriter,
    final_read_committed,
    txn_topics,
)
from odradek_verify.workload import (
    ClientProducerWorker,
    GroupMemberWorker,
    History,
    KafkaGroupMemberWorker,
    KafkaProducerWorker,
    RestProducerWorker,
    group_consumer_usable,
    kafka_client_usable,
)

# The brokers' planted bugs (BrokerConfig.unsafe_*): only this self-test turns them on, each by the broker flag of
# the same name (docs/verify.md, "A checker that can fail").
UNSAFE_BROKER_FLAG = "--unsafe-ack-before-isr"
UNSAFE_BROKER_FLAGS = (UNSAFE_BROKER_FLAG, "--unsafe-read-uncommitted-as-committed", "--unsafe-partial-commit-markers")
WORKLOADS = ("queue", "txn")


def broker_flags(args: argparse.Namespace) -> list[str]:
    """The flags every broker of the run is started with (restarts included)."""
    flags = ["--replica-lag-time-max-ms", str(args.replica_lag_time_max_ms)]
    if args.replica_fetch_transport is not None:
        flags += ["--replica-fetch-transport", args.replica_fetch_transport]
    return flags + _unsafe(args)


def _unsafe(args: argparse.Namespace) -> list[str]:
    """The planted-bug broker flags this run gives its brokers."""
    return [f for f in UNSAFE_BROKER_FLAGS if getattr(args, f[2:].replace("-", "_"), False)]


def workloads(args: argparse.Namespace) -> list[str]:
    return [w for w in WORKLOADS if w in {x.strip() for x in args.workload.split(",")}]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="odradek verify", description=(
        "Run producers (acks=all) and a consumer group while a nemesis injects faults, heal, read everything "
        "back and check it (lost, duplicated, misplaced, reordered, unexpected, divergent, group skips)."))
    p.add_argument("--out", type=Path, default=None, help="directory for report.json, history.json, timeline.png")
    p.add_argument("--duration", type=float, default=60.0, help="seconds of faults (default 60)")
    p.add_argument("--min-faults", type=int, default=0,
                   help="go on past --duration until this many faults were applied (at most --max-duration)")
    p.add_argument("--max-duration", type=float, default=None,
                   help="with --min-faults: the fault phase never runs longer (default 4 x --duration)")
    p.add_argument("--seed", type=int, default=None, help="replay a schedule (default: random, printed)")
    p.add_argument("--scenario", choices=sorted(SCENARIOS), default="all", help="named set of fault kinds")
    p.add_argument("--faults", default=None, help=f"comma-separated kinds instead: {','.join(ALL_KINDS)}")
    p.add_argument("--concurrency", type=int, default=1, help="faults in force at once (default 1)")
    p.add_argument("--quiet", default="1,3", help="seconds between faults, MIN,MAX (default 1,3)")
    p.add_argument("--via", choices=("client", "rest", "kafka"), default="client",
                   help="producers' path: the Python client (binary), REST v2, or librdkafka (confluent-kafka) "
                        "on the Kafka listeners, whose group members are then librdkafka consumers too")
    p.add_argument("--kafka-idempotence", choices=("on", "off"), default="on",
                   help="with --via kafka: librdkafka's enable.idempotence (default on: duplicates fail the run)")
    p.add_argument("--workload", default="queue",
                   help="queue (unique values, a consumer group), txn (transactions over two topics, "
                        "read_committed readers) or queue,txn (both at once; default queue)")
    p.add_argument("--txn-producers", type=int, default=2, help="with txn: transactional writers")
    p.add_argument("--txn-processors", type=int, default=1,
                   help="with txn: consume-transform-produce workers (send_offsets_to_transaction)")
    p.add_argument("--txn-readers", type=int, default=1, help="with txn: read_committed readers polling throughout")
    p.add_argument("--txn-abort-every", type=int, default=5,
                   help="with txn: 1 transaction in N is aborted on purpose (0: none)")
    p.add_argument("--producers", type=int, default=3)
    p.add_argument("--rate", type=float, default=120.0, help="writes per second over all producers")
    p.add_argument("--group-members", type=int, default=2, help="consumer-group members (0: no group)")
    p.add_argument("--partitions", type=int, default=3)
    p.add_argument("--replication-factor", type=int, default=3)
    p.add_argument("--min-insync-replicas", type=int, default=2)
    p.add_argument("--brokers", type=int, default=3)
    p.add_argument("--zookeepers", type=int, default=3, choices=(1, 3, 5))
    p.add_argument("--session-timeout-ms", type=int, default=3000, help="brokers' ZooKeeper session")
    p.add_argument("--tick-ms", type=int, default=500, help="ZooKeeper tickTime")
    p.add_argument("--replica-lag-time-max-ms", type=int, default=3000)
    p.add_argument("--replica-fetch-transport", choices=("auto", "http", "kafka"), default=None,
                   help="how followers fetch from leaders (the brokers' default when not given)")
    p.add_argument("--retention-ms", type=int, default=7 * 24 * 3600 * 1000,
                   help="the topic's retention.ms (default 7 days); clock steps stay under a tenth of it")
    p.add_argument("--netns", choices=("auto", "on", "off"), default="auto",
                   help="run hosts in network namespaces (needed for partitions; auto: when root)")
    p.add_argument("--disk", choices=("auto", "on", "off"), default="auto", help="loop-mounted disk for disk-full")
    p.add_argument("--bootstrap-server", default=None, help="check an existing cluster instead of starting one")
    p.add_argument("--kafka-bootstrap-server", default=None,
                   help="with --bootstrap-server and --via kafka: the cluster's Kafka listeners (host:port,...)")
    p.add_argument("--cluster-dir", type=Path, default=None,
                   help="with --bootstrap-server: the `odradek cluster` data dir, for process faults")
    p.add_argument("--cleanup", type=Path, default=None, help="remove what a killed run in DIR left, and exit")
    # Hidden: the self-test of the checker (docs/verify.md, "A checker that can fail"). The run's brokers get
    # --unsafe-ack-before-isr, a planted bug that acknowledges acks=all before the ISR has the write.
    p.add_argument("--unsafe-ack-before-isr", action="store_true", help=argparse.SUPPRESS)
    # Hidden too, the transactional checks' planted bugs: read_committed served as read_uncommitted (G1a), and
    # a commit's marker left off its last partition (torn transactions, lost writes).
    p.add_argument("--unsafe-read-uncommitted-as-committed", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--unsafe-partial-commit-markers", action="store_true", help=argparse.SUPPRESS)
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.cleanup is not None:
        errors = cleanup(args.cleanup.absolute())
        print("\n".join(errors) or "cleaned up")
        return 1 if errors else 0
    import logging

    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    logging.basicConfig(level=logging.ERROR)
    try:
        result = Run(args).execute()
    except KeyboardInterrupt:
        return 130
    except RunError as e:
        print(f"odradek verify: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # one line, as every odradek command; the traceback helps nobody running a check
        print(f"odradek verify: the run failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    return 0 if not report.verdict(result) else 1


class RunError(RuntimeError):
    """The run could not be made; one line for the user."""


class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.seed = args.seed if args.seed is not None else random.randrange(1 << 31)
        self.out: Path = (args.out or Path(f"verify-{time.strftime('%Y%m%d-%H%M%S')}")).absolute()
        self.topic = f"verify-{self.seed}"
        self.lab: NetLab | None = None
        self.disk: LoopDisk | None = None
        self.cluster: VerifyCluster | Any = None
        self.owns_cluster = args.bootstrap_server is None
        self.skipped: dict[str, str] = {}
        self._root_ns: int | None = None
        self.kafka_bootstrap: str | None = None

    # ----------------------------------------------------------------------------------------- set-up

    def _kinds(self) -> list[str]:
        kinds = ([k.strip() for k in self.args.faults.split(",") if k.strip()] if self.args.faults
                 else list(SCENARIOS[self.args.scenario]))
        unknown = [k for k in kinds if k not in ALL_KINDS]
        if unknown:
            raise RunError(f"unknown fault kinds {unknown}; known: {', '.join(ALL_KINDS)}")
        return kinds

    def _setup_lab(self, kinds: list[str]) -> None:
        mode = self.args.netns
        why = netns_supported() if mode != "off" and self.owns_cluster else "off"
        if not self.owns_cluster:
            why = "the cluster is not ours"
        if why is None:
            self.lab = NetLab.for_cluster(self.args.zookeepers, self.args.brokers)
            self.lab.create()
            self.lab.save(self.out / "netlab.json")
            self._root_ns = os.open("/proc/self/ns/net", os.O_RDONLY)
            self.lab.enter(CLIENT)
        elif mode == "on":
            raise RunError(f"--netns on, but {why}")
        else:
            for k in NETWORK_KINDS:
                if k in kinds:
                    self.skipped[k] = f"no network lab ({why})"

    def _start_cluster(self, kinds: list[str]) -> None:
        a = self.args
        clock_lib: Path | None = None
        if any(k in kinds for k in CLOCK_KINDS):
            clock_lib, why_not = clockshift.prepare(self.out / "clockshift", sys.executable)
            for k in CLOCK_KINDS:
                if why_not is not None and k in kinds:
                    self.skipped[k] = why_not
        base_port, zk_base = (9092, 2181) if self.lab else _free_ports()
        broker_args = broker_flags(a)
        self.cluster = VerifyCluster(
            self.out / "cluster", lab=self.lab, brokers=a.brokers, zookeepers=a.zookeepers, base_port=base_port,
            zk_base_port=zk_base, tick_ms=a.tick_ms, session_timeout_ms=a.session_timeout_ms,
            broker_args=broker_args, clock_lib=clock_lib)
        if "disk-full" in kinds:
            why = LoopDisk.supported() if a.disk != "off" else "--disk off"
            if why is None:
                b = max(self.cluster.slots)
                self.disk = LoopDisk(self.out / "cluster" / "disk.img", self.cluster.slots[b].data_dir)
                try:
                    self.disk.create()
                except Exception as e:
                    self.disk.destroy()
                    self.disk = None
                    why = f"could not make a loop-mounted disk: {e}"
                else:
                    self.disk_broker = b
            if why is not None:
                if a.disk == "on":
                    raise RunError(why)
                self.skipped["disk-full"] = why
        self.cluster.up(timeout=120)

    def _attach(self, kinds: list[str]) -> None:
        """An existing cluster: process faults only through its `odradek cluster` state, if given."""
        if unsafe := _unsafe(self.args):
            raise RunError(f"{unsafe[0]} plants the bug in brokers this run starts; "
                           "it cannot be used with --bootstrap-server")
        if self.args.cluster_dir is not None:
            from odradek_local.cluster import LocalCluster

            self.cluster = LocalCluster.load(self.args.cluster_dir)
            self.args.session_timeout_ms = self.cluster.session_timeout_ms  # the faults' timing follows it
            self.cluster.lab = None
            self.cluster.clock_lib = None
            self.cluster.serving = self.cluster._serving
            for k in ("disk-full", *CLOCK_KINDS, *NETWORK_KINDS):
                if k in kinds:
                    self.skipped[k] = "not applicable to an attached cluster"
        else:
            for k in kinds:
                self.skipped[k] = "the cluster is not local (no --cluster-dir): checks only"

    def _kafka_bootstrap(self) -> str:
        """librdkafka's bootstrap.servers: the brokers' Kafka listeners (the run's own cluster starts them on the
        lab hosts' addresses, reachable from the client namespace exactly as the HTTP ones are)."""
        found = self.args.kafka_bootstrap_server or getattr(self.cluster, "kafka_bootstrap", None)
        if not found:
            raise RunError("--via kafka needs the brokers' Kafka listeners: give --kafka-bootstrap-server "
                           "(or --cluster-dir of a cluster started with them)")
        return str(found)

    # ------------------------------------------------------------------------------------------- run

    def execute(self) -> dict[str, Any]:
        self.out.mkdir(parents=True, exist_ok=True)
        old = self.out / "cluster"
        if self.owns_cluster and old.exists():  # a previous run's cluster in the same --out: start afresh
            if any(os.path.ismount(d) for d in old.glob("broker-*/data")):
                raise RunError(f"{old} still has a mounted disk; run `odradek verify --cleanup {self.out}`")
            import shutil

            shutil.rmtree(old)
        kinds = self._kinds()
        chosen = workloads(self.args)
        if not chosen or len(chosen) != len([x for x in self.args.workload.split(",") if x.strip()]):
            raise RunError(f"--workload {self.args.workload!r}: give queue, txn or queue,txn")
        if "txn" in chosen and self.args.via == "rest":
            raise RunError("--workload txn: REST v2 produce has no transactions; use --via client or --via kafka")
        if self.args.via == "kafka" and (why := kafka_client_usable()):
            raise RunError(f"--via kafka: {why}")
        self.disk_broker: int | None = None
        print(f"odradek verify: seed {self.seed}, output in {self.out}", flush=True)
        try:
            self._setup_lab(kinds)
            if self.owns_cluster:
                self._start_cluster(kinds)
                bootstrap = self.cluster.bootstrap()
            else:
                self._attach(kinds)
                bootstrap = self.args.bootstrap_server
            if self.args.via == "kafka":
                self.kafka_bootstrap = self._kafka_bootstrap()
            return self._workload_and_check(bootstrap, kinds)
        finally:
            self._teardown()

    def _workload_and_check(self, bootstrap: str, kinds: list[str]) -> dict[str, Any]:
        from odradek.client import AdminClient

        a = self.args
        urls = [u if "://" in u else f"http://{u}" for u in bootstrap.split(",")]
        chosen = workloads(a)
        topics = [self.topic, *(txn_topics(self.topic) if "txn" in chosen else ())]
        with AdminClient(bootstrap) as admin:
            for topic in topics:
                admin.create_topic(topic, partitions=a.partitions, replication_factor=a.replication_factor,
                                   configs={"min.insync.replicas": str(a.min_insync_replicas),
                                            "retention.ms": str(a.retention_ms)})
        history = History()
        stop = threading.Event()
        workers: list[Any] = []
        per = a.rate / max(1, a.producers)
        for i in range(a.producers if "queue" in chosen else 0):
            name = f"p{i}"
            if a.via == "rest":
                workers.append(RestProducerWorker(name, urls, self.topic, a.partitions, per, history, stop,
                                                  self.seed + i))
            elif a.via == "kafka":
                assert self.kafka_bootstrap is not None
                workers.append(KafkaProducerWorker(name, self.kafka_bootstrap, self.topic, a.partitions, per, history,
                                                   stop, self.seed + i, idempotent=a.kafka_idempotence == "on"))
            else:
                workers.append(ClientProducerWorker(name, bootstrap, self.topic, a.partitions, per, history, stop,
                                                    self.seed + i))
        group_skipped = group_consumer_usable() if a.group_members > 0 else "--group-members 0"
        if "queue" not in chosen:
            group_skipped = "--workload txn"
        members: list[GroupMemberWorker | KafkaGroupMemberWorker] = []
        group_stop = threading.Event()
        if "queue" not in chosen:
            pass
        elif a.via == "kafka" and a.group_members > 0:  # librdkafka's group members, over the Kafka listeners
            assert self.kafka_bootstrap is not None
            group_skipped = None
            members = [KafkaGroupMemberWorker(f"m{i}", self.kafka_bootstrap, self.topic, f"verify-group-{self.seed}",
                                              history, group_stop, session_timeout_ms=6000)
                       for i in range(a.group_members)]
        elif group_skipped is None:
            members = [GroupMemberWorker(f"m{i}", bootstrap, self.topic, f"verify-group-{self.seed}", history,
                                         group_stop, session_timeout_ms=6000) for i in range(a.group_members)]
        nemesis = None
        if self.cluster is not None and kinds:
            quiet = [float(x) for x in a.quiet.split(",")]
            config = NemesisConfig(kinds, a.concurrency, quiet[0], quiet[-1], a.session_timeout_ms,
                                   a.replica_lag_time_max_ms, self.seed, dict(self.skipped),
                                   max_clock_step_s=clockshift.max_step_s(a.retention_ms))
            nemesis = Nemesis(self.cluster, self.topic, a.partitions, config, history, self.disk, self.disk_broker)
        txn_workers, txn_readers = self._txn_workers(bootstrap, history, stop, group_stop) if "txn" in chosen \
            else ([], [])
        for w in [*workers, *members, *txn_workers, *txn_readers]:
            w.start()
        if nemesis is not None:
            nemesis.start()
        print(f"odradek verify: workload and nemesis running for {a.duration:.0f} s", flush=True)
        started = time.monotonic()
        time.sleep(a.duration)
        if nemesis is not None and a.min_faults > 0:  # a slow machine runs fewer faults a second: count them
            hard_stop = started + (a.max_duration if a.max_duration is not None else 4 * a.duration)
            while nemesis.applied() < a.min_faults and time.monotonic() < hard_stop:
                time.sleep(0.2)
        heal_notes: list[str] = []
        if nemesis is not None:
            nemesis.stop()
            heal_notes = nemesis.heal_all()
        t_healed = history.now()
        time.sleep(5.0)  # writes after the heal: every partition must serve again
        stop.set()
        t_writes_end = history.now()
        # where the run's time goes after the heal: each phase's end, in seconds since the start
        phases: dict[str, float] = {"healed": t_healed, "writes_stopped": t_writes_end}
        for w in workers:
            w.join(10)
            w.finish(40.0)
        phases["producers_finished"] = history.now()
        for t in txn_workers:  # each ends the transaction it is in
            t.finish(60.0)
        phases["txn_workers_finished"] = history.now()
        time.sleep(3.0)  # let the group and the read_committed readers consume the tail
        group_stop.set()
        for m in [*members, *txn_readers]:
            m.finish(30.0)
        t_end = history.now()
        phases["consumers_finished"] = t_end
        states = self._wait_isr_full(a.partitions, nemesis)
        phases["isr_full"] = history.now()
        ends, reads, final_read = checker.final_read(urls, bootstrap, self.topic, a.partitions)
        committed = self._committed(f"verify-group-{self.seed}", a.partitions) if members else {}
        txn_result: dict[str, Any] | None = None
        if "txn" in chosen:
            txn_reads, txn_final = final_read_committed(urls, bootstrap, txn_topics(self.topic), a.partitions)
            txn_result = txn_checker.check_txn(history, txn_reads)
            txn_result["final_read_notes"] = txn_final
        phases["final_read"] = history.now()
        events = nemesis.events_json() if nemesis is not None else []
        if nemesis is not None:
            nemesis.close()
        replicas: dict[int, dict[int, dict[int, str]]] = {}
        queue = checker.check_queue(history, reads)
        if self.cluster is not None:
            if self.owns_cluster:
                self.cluster.down()
            data_dirs = {b: s.data_dir for b, s in self.cluster.slots.items()}
            replicas = checker.read_replicas(data_dirs, self.topic, a.partitions)
            if a.via == "kafka":
                checker.split_duplicates(queue, data_dirs, self.topic)
        queue.pop("duplicated_all", None)
        # (no queue producers, --workload txn: the transactional producers are idempotent by definition)
        idempotent = all(getattr(w, "idempotent", False) for w in workers) if workers else a.via != "rest"
        result: dict[str, Any] = {
            "seed": self.seed, "via": a.via, "idempotent_producer": idempotent, "netns": self.lab is not None,
            "topic": self.topic,
            "kafka_bootstrap": self.kafka_bootstrap,
            # librdkafka producer instances ended by a fatal error (a sequence desynchronisation: the broker
            # lost what it had acknowledged, or fenced the producer); each was replaced by a new one
            "kafka_fatal_errors": [e for w in workers for e in getattr(w, "fatal_errors", [])],
            "duration_s": t_end, "healed_at_s": t_healed, "bootstrap": bootstrap,
            "unsafe_ack_before_isr": bool(a.unsafe_ack_before_isr),
            "unsafe_broker_flags": _unsafe(a),
            "workloads": chosen,
            "txn": txn_result,
            "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
            "queue": queue,
            "replicas": (checker.check_divergence(replicas, ends, {p: s[1] for p, s in states.items()})
                         if replicas else {"divergent": 0, "offsets_compared": 0, "note": "no segment files"}),
            "group": checker.check_group(history, reads, committed) if members else None,
            "group_skipped": group_skipped,
            "availability": checker.availability(history, a.partitions, t_writes_end),
            "faults_by_kind": checker.faults_by_kind(events),
            "faults": events,
            "skipped_faults": self.skipped,
            "heal_notes": heal_notes,
            "end_offsets": ends,
            "final_read": final_read,
            "phases_s": {k: round(v, 3) for k, v in phases.items()},
            "notes": history.notes[:50],
        }
        result["recovery"] = checker.recovery_times(history, events, a.partitions)
        result["verdict"] = report.verdict(result) or "pass"
        report.write_json(self.out, result, history)
        why = report.plot_timeline(self.out / "timeline.png", history, events, t_end)
        if why:
            print(f"odradek verify: no timeline: {why}")
        report.print_summary(result)
        return result

    def _txn_workers(self, bootstrap: str, history: History, stop: threading.Event, readers_stop: threading.Event
                     ) -> tuple[list[Any], list[Any]]:
        """The transactional workload's writers and consume-transform-produce workers (stopped with the
        producers) and its read_committed readers (stopped with the group, after the tail)."""
        a = self.args
        topics = txn_topics(self.topic)
        kafka = a.via == "kafka"
        where = self.kafka_bootstrap if kafka else bootstrap
        assert where is not None
        writer, processor, reader = ((KafkaTxnWriter, KafkaProcessor, KafkaReader) if kafka
                                     else (ClientTxnWriter, ClientProcessor, ClientReader))
        workers: list[Any] = [writer(f"tw{i}", where, topics, a.partitions, history, stop, self.seed + 100 + i,
                                     abort_every=a.txn_abort_every) for i in range(a.txn_producers)]
        workers += [processor(f"tp{i}", where, topics, a.partitions, history, stop, self.seed + 200 + i,
                              group=f"verify-txn-{self.seed}-{i}", abort_every=a.txn_abort_every)
                    for i in range(a.txn_processors)]
        readers = [reader(f"tr{i}", where, topics, a.partitions, history, readers_stop)
                   for i in range(a.txn_readers)]
        return workers, readers

    def _wait_isr_full(self, partitions: int, nemesis: Nemesis | None, timeout: float = 60.0
                       ) -> dict[int, tuple[int, list[int]]]:
        """After the heal, wait until every replica is back in every ISR, so divergence is checked over all."""
        states: dict[int, tuple[int, list[int]]] = {}
        if nemesis is None:
            return states
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = {p: s for p in range(partitions) if (s := nemesis.partition_state(p)) is not None}
            if len(states) == partitions and all(len(s[1]) >= self.args.replication_factor for s in states.values()):
                break
            time.sleep(0.5)
        return states

    def _committed(self, group: str, partitions: int) -> dict[int, int]:
        """The group's committed offsets, straight from ZooKeeper (where the coordinator keeps them)."""
        from zk.znodes import ConsumerGroupOffsetZNode

        out: dict[int, int] = {}
        if self.cluster is None:
            return out
        client = self.cluster.zk_client()
        try:
            for p in range(partitions):
                with contextlib.suppress(Exception):
                    out[p] = ConsumerGroupOffsetZNode.decode(
                        client.kazoo.get(ConsumerGroupOffsetZNode.path(group, self.topic, p))[0])[0]
        finally:
            client.close()
        return out

    # -------------------------------------------------------------------------------------- teardown

    def _teardown(self) -> None:
        problems: list[str] = []
        if self.owns_cluster and self.cluster is not None:
            try:
                if self.lab is not None:
                    self.lab.heal()
                for b in self.cluster.slots:
                    with contextlib.suppress(Exception):
                        self.cluster.resume_broker(b)
                self.cluster.down()
            except Exception as e:
                problems.append(f"cluster down: {e}")
        if self.disk is not None:
            problems += self.disk.destroy()
        if self.lab is not None:
            if self._root_ns is not None:
                import ctypes

                ctypes.CDLL(None, use_errno=True).setns(self._root_ns, 0x40000000)
                os.close(self._root_ns)
            problems += self.lab.destroy()
        for p in problems:
            print(f"odradek verify: cleanup: {p}", file=sys.stderr)


def cleanup(out: Path) -> list[str]:
    """What a killed run in ``out`` left: its processes (by pid), its mount and loop device, its namespaces."""
    import subprocess

    errors: list[str] = []
    if (out / "cluster" / "cluster.json").exists():
        from odradek_local.cluster import LocalCluster

        try:
            LocalCluster.load(out / "cluster").down()
        except Exception as e:
            errors.append(f"cluster down: {e}")
    for d in (out / "cluster").glob("broker-*/data"):
        if os.path.ismount(d):
            res = subprocess.run(["umount", "-l", str(d)], capture_output=True, text=True)
            if res.returncode:
                errors.append(f"umount {d}: {res.stderr.strip()}")
    image = out / "cluster" / "disk.img"
    if image.exists():
        found = subprocess.run(["losetup", "-j", str(image)], capture_output=True, text=True).stdout
        for line in found.splitlines():
            device = line.split(":", 1)[0]
            res = subprocess.run(["losetup", "-d", device], capture_output=True, text=True)
            if res.returncode:
                errors.append(f"losetup -d {device}: {res.stderr.strip()}")
    if (out / "netlab.json").exists():
        errors += cleanup_leftovers(out / "netlab.json")
    return errors


def _free_ports() -> tuple[int, int]:
    """Broker and ZooKeeper port bases on 127.0.0.1 nobody uses (other clusters may run on this machine)."""
    import socket

    rng = random.Random()
    while True:
        low, high = listen_port_range()
        base = rng.randrange(low, high - 1110)
        ports = [*range(base, base + 10), *range(base + 1000, base + 1010), *range(base + 1100, base + 1110)]
        ok = True
        for port in ports:
            with socket.socket() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    ok = False
                    break
        if ok:
            return base, base + 1000
