"""The nemesis: faults injected one at a time or overlapping, each healed after a while, all recorded.

A fault is one function that injects, holds, and heals; it returns a short detail string. Targets are chosen
by a seeded ``random.Random`` (so a schedule replays with the same seed, up to the cluster's own timing), by
role: any broker, the leader of a random partition, or the controller (read from ZooKeeper). A process or host
is touched by one fault at a time (``busy``), and at most one ZooKeeper node is down at a time, so overlapping
faults stress the cluster without making every outcome a trivial outage.

Kinds and what they do (S is the brokers' ZooKeeper session timeout):

=====================  ==============================================================================
kill-broker            SIGKILL a broker (random, leader or controller); restart it after 1-3 s
term-broker            SIGTERM (controlled shutdown); restart after 1-3 s
pause-short            SIGSTOP for S/3, then SIGCONT: shorter than the session
pause-long             SIGSTOP for 2S: the session expires while the process is frozen
kill-zk, kill-zk-leader SIGKILL a ZooKeeper node (the ensemble's leader for the second); restart after 1-3 s
session-expire         a running broker's session expires: cut from every ZooKeeper node for 2S (network
                       lab), or frozen for 2S without one
disk-full              fill the loop-mounted data disk of one broker for 3-6 s, then free it
clock-jump             step a broker's wall clock forward or back by 1 s..2 h (log-uniform, at most a tenth
                       of the topic's retention.ms) for 3-6 s, then back to true time (the clock shim,
                       clockshift.c: monotonic time and sleeps are untouched, as with an NTP step)
clock-strobe           a broker's wall clock stepped back and forth every 50-300 ms for 3-5 s, then true
part-leader-followers  cut a partition leader from the other brokers (not ZooKeeper, not clients)
part-broker-zk         cut a broker from every ZooKeeper node, but not from brokers or clients
part-majority-minority one broker and one ZooKeeper node against the rest (clients reach all)
part-2013              Jepsen 2013: a leader cut from its followers until its ISR shrinks to itself,
                       then from ZooKeeper too, then healed
part-leader-isolated   a leader cut from its followers and ZooKeeper at once (clients still reach it) for
                       2S: a follower takes over while the old leader may still be asked to write
=====================  ==============================================================================

The schedule first deals every enabled kind once, in a seeded random order (a short run covers them all), then
draws kinds at random; a kind dealt while no target was free goes back to the end of the deck (``REDEALS``).
"""

from __future__ import annotations

import contextlib
import itertools
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from odradek_verify import clockshift
from odradek_verify.cluster import LoopDisk, VerifyCluster
from odradek_verify.workload import History
from zk.znodes import TopicPartitionStateZNode

PROCESS_KINDS = ["kill-broker", "term-broker", "pause-short", "pause-long", "kill-zk", "kill-zk-leader",
                 "session-expire"]
NETWORK_KINDS = ["part-leader-followers", "part-broker-zk", "part-majority-minority", "part-2013",
                 "part-leader-isolated"]
CLOCK_KINDS = ["clock-jump", "clock-strobe"]
ALL_KINDS = [*PROCESS_KINDS, "disk-full", *CLOCK_KINDS, *NETWORK_KINDS]
SCENARIOS: dict[str, list[str]] = {
    "all": ALL_KINDS,
    "process": PROCESS_KINDS,
    "network": [*NETWORK_KINDS, "session-expire"],
    "zookeeper": ["kill-zk", "kill-zk-leader", "session-expire", "part-broker-zk"],
    "clock": CLOCK_KINDS,
    "jepsen-2013": ["part-2013"],
    "kill-leaders": ["kill-broker"],
    "none": [],
}
ROLES = ("random", "leader", "controller")
REDEALS = 5  # a kind dealt while no target was free is dealt again, this many times at most


@dataclass
class FaultEvent:
    id: int
    kind: str
    target: str
    t_start: float
    role: str = ""
    t_heal: float | None = None
    t_end: float | None = None
    detail: str = ""
    error: str | None = None


@dataclass
class NemesisConfig:
    kinds: list[str]
    concurrency: int = 1
    quiet_min_s: float = 1.0
    quiet_max_s: float = 3.0
    session_timeout_ms: int = 3000
    replica_lag_time_max_ms: int = 3000
    seed: int = 0
    skipped: dict[str, str] = field(default_factory=dict)  # kind -> why it cannot run here
    max_clock_step_s: float = clockshift.MAX_STEP_S  # clockshift.max_step_s(the topic's retention.ms)


class Nemesis:
    """Runs ``concurrency`` fault loops until ``stop``; ``heal_all`` undoes whatever is still in force."""

    def __init__(self, cluster: VerifyCluster, topic: str, partitions: int, config: NemesisConfig,
                 history: History, disk: LoopDisk | None, disk_broker: int | None) -> None:
        self.cluster, self.topic, self.partitions, self.config = cluster, topic, partitions, config
        self.history, self.disk, self.disk_broker = history, disk, disk_broker
        self.events: list[FaultEvent] = []
        self._ids = itertools.count(1)
        self.lock = threading.Lock()
        self.busy: set[str] = set()
        self.stop_event = threading.Event()
        self.threads: list[threading.Thread] = []
        self.zk = cluster.zk_client(session_timeout_s=10.0)
        self.session_s = config.session_timeout_ms / 1000
        self.kinds = [k for k in config.kinds if k not in config.skipped]
        self.deck: list[tuple[str, int]] = [(k, 0) for k in dict.fromkeys(self.kinds)]
        random.Random(config.seed).shuffle(self.deck)

    # ------------------------------------------------------------------------------------------ observing

    def controller(self) -> int | None:
        with contextlib.suppress(Exception):
            return self.zk.get_controller()
        return None

    def partition_state(self, partition: int) -> tuple[int, list[int]] | None:
        """(leader, isr) from the state znode, or None when it cannot be read now."""
        with contextlib.suppress(Exception):
            state = TopicPartitionStateZNode.decode(
                self.zk.kazoo.get(TopicPartitionStateZNode.path(self.topic, partition))[0])
            return state.leader, list(state.isr)
        return None

    # ------------------------------------------------------------------------------------------ schedule

    def start(self) -> None:
        for i in range(self.config.concurrency if self.kinds else 0):
            t = threading.Thread(target=self._loop, args=(random.Random(self.config.seed * 1000 + i),),
                                 name=f"verify-nemesis-{i}", daemon=True)
            t.start()
            self.threads.append(t)

    def applied(self) -> int:
        """Faults applied and healed so far, errors not counted (the report's faults without an error)."""
        with self.lock:
            return sum(1 for e in self.events if e.error is None)

    def stop(self, timeout: float = 120.0) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(timeout)

    def _loop(self, rng: random.Random) -> None:
        while not self.stop_event.wait(rng.uniform(self.config.quiet_min_s, self.config.quiet_max_s)):
            with self.lock:
                kind, dealt = self.deck.pop(0) if self.deck else (rng.choice(self.kinds), -1)
            if self.run_fault(kind, rng) is None and 0 <= dealt < REDEALS:
                with self.lock:
                    self.deck.append((kind, dealt + 1))  # no target was free: deal it again later

    def run_fault(self, kind: str, rng: random.Random) -> FaultEvent | None:
        fn: Callable[[random.Random, FaultEvent], str | None] = getattr(self, "_f_" + kind.replace("-", "_"))
        with self.lock:
            event = FaultEvent(next(self._ids), kind, "", self.history.now())
        try:
            detail = fn(rng, event)
        except Exception as e:  # a fault that could not be applied is recorded, never fatal to the run
            event.error = f"{type(e).__name__}: {e}"
            detail = None
        finally:
            self._release(event)
        if detail is None and event.error is None:
            return None  # no target free now: not a fault
        event.detail = detail or ""
        event.t_end = self.history.now()
        if event.t_heal is None:
            event.t_heal = event.t_end
        with self.lock:
            self.events.append(event)
        return event

    # --------------------------------------------------------------------------------------- helpers

    def _claim(self, event: FaultEvent, *names: str) -> bool:
        with self.lock:
            if any(n in self.busy for n in names):
                return False
            self.busy.update(names)
            event.target = ",".join(names)
            return True

    def _release(self, event: FaultEvent) -> None:
        with self.lock:
            for n in event.target.split(","):
                self.busy.discard(n)

    def _pick_broker(self, rng: random.Random, event: FaultEvent, role: str | None = None) -> int | None:
        role = role or rng.choice(ROLES)
        event.role = role
        broker: int | None = None
        if role == "leader":
            state = self.partition_state(rng.randrange(self.partitions))
            broker = state[0] if state and state[0] >= 0 else None
        elif role == "controller":
            broker = self.controller()
        if broker is None or broker not in self.cluster.slots or f"b{broker}" in self.busy:
            event.role = "random"  # no such broker now, or another fault holds it: any free one
            free = [b for b in self.cluster.slots if f"b{b}" not in self.busy]
            broker = rng.choice(free) if free else None
        if broker is None or self.cluster.broker_pid(broker) is None or not self._claim(event, f"b{broker}"):
            return None
        return broker

    def _hold(self, seconds: float) -> None:
        """Sleep through a fault; stopping the run cuts holds short (the heal still runs)."""
        self.stop_event.wait(seconds)

    def _healing(self, event: FaultEvent) -> None:
        event.t_heal = self.history.now()

    def _restart_broker(self, broker: int) -> None:
        self.cluster.start_broker(broker, wait=True, timeout=4 * self.session_s + 30)

    def _signal(self, broker: int, sig: signal.Signals) -> None:
        self.cluster._proc(broker).send_signal(sig)

    # ----------------------------------------------------------------------------------------- faults

    def _f_kill_broker(self, rng: random.Random, event: FaultEvent) -> str | None:
        b = self._pick_broker(rng, event)
        if b is None:
            return None
        self.cluster.kill_broker(b)
        self._hold(rng.uniform(1, 3))
        self._healing(event)
        self._restart_broker(b)
        return f"SIGKILL broker {b} ({event.role}), restarted"

    def _f_term_broker(self, rng: random.Random, event: FaultEvent) -> str | None:
        b = self._pick_broker(rng, event)
        if b is None:
            return None
        self.cluster.stop_broker(b, timeout=30)
        self._hold(rng.uniform(1, 3))
        self._healing(event)
        self._restart_broker(b)
        return f"SIGTERM broker {b} ({event.role}), restarted"

    def _pause(self, rng: random.Random, event: FaultEvent, seconds: float) -> str | None:
        b = self._pick_broker(rng, event)
        if b is None:
            return None
        self._signal(b, signal.SIGSTOP)
        try:
            self._hold(seconds)
        finally:
            self._healing(event)
            self._signal(b, signal.SIGCONT)
        return f"SIGSTOP broker {b} ({event.role}) for {seconds:.1f} s"

    def _f_pause_short(self, rng: random.Random, event: FaultEvent) -> str | None:
        return self._pause(rng, event, self.session_s / 3)

    def _f_pause_long(self, rng: random.Random, event: FaultEvent) -> str | None:
        return self._pause(rng, event, 2 * self.session_s)

    def _kill_zk(self, rng: random.Random, event: FaultEvent, leader: bool) -> str | None:
        ensemble = self.cluster.ensemble
        if ensemble.size < 3:
            return None
        with self.lock:
            if any(n.startswith("zk") for n in self.busy):
                return None  # one ZooKeeper node down at a time: the ensemble keeps its quorum
        node = ensemble.leader_id() if leader else rng.choice(sorted(ensemble.nodes))
        if node is None or not self._claim(event, f"zk{node}"):
            return None
        event.role = "leader" if leader else "random"
        ensemble.kill_node(node)
        self._hold(rng.uniform(1, 3))
        self._healing(event)
        ensemble.start_node(node)
        ensemble.wait_quorum(timeout=60)
        return f"SIGKILL ZooKeeper {node}{' (leader)' if leader else ''}, restarted"

    def _f_kill_zk(self, rng: random.Random, event: FaultEvent) -> str | None:
        return self._kill_zk(rng, event, leader=False)

    def _f_kill_zk_leader(self, rng: random.Random, event: FaultEvent) -> str | None:
        return self._kill_zk(rng, event, leader=True)

    def _f_session_expire(self, rng: random.Random, event: FaultEvent) -> str | None:
        lab = self.cluster.lab
        if lab is None:
            detail = self._pause(rng, event, 2 * self.session_s)
            return detail and detail + " (session expiry by freezing: no network lab)"
        b = self._pick_broker(rng, event)
        if b is None:
            return None
        zks = [f"zk{n}" for n in self.cluster.ensemble.nodes]
        lab.cut_groups([f"b{b}"], zks)
        try:
            self._hold(2 * self.session_s)
        finally:
            self._healing(event)
            for z in zks:
                lab.uncut(f"b{b}", z)
        return f"broker {b} ({event.role}) cut from ZooKeeper for {2 * self.session_s:.1f} s while running"

    def _f_disk_full(self, rng: random.Random, event: FaultEvent) -> str | None:
        if self.disk is None or self.disk_broker is None or not self._claim(event, f"b{self.disk_broker}"):
            return None
        b = self.disk_broker
        written = self.disk.fill()
        self._hold(rng.uniform(3, 6))
        self._healing(event)
        self.disk.free()
        note = ""
        if self.cluster.broker_pid(b) is None or not _wait(lambda: self.cluster.serving(b), 10):
            with contextlib.suppress(Exception):
                if self.cluster.broker_pid(b) is not None:
                    self.cluster.stop_broker(b, timeout=20)
            self._restart_broker(b)
            note = "; it did not serve after the disk was freed and was restarted"
        return f"broker {b}'s data disk filled ({written >> 20} MiB of filler){note}"

    def _f_clock_jump(self, rng: random.Random, event: FaultEvent) -> str | None:
        if getattr(self.cluster, "clock_lib", None) is None:
            return None
        b = self._pick_broker(rng, event)
        if b is None:
            return None
        step = clockshift.random_step_ns(rng, self.config.max_clock_step_s)
        self.cluster.set_clock_offset(b, step)
        try:
            self._hold(rng.uniform(3, 6))
        finally:
            self._healing(event)
            self.cluster.set_clock_offset(b, 0)
        return f"broker {b}'s ({event.role}) wall clock stepped {step / 1e9:+.1f} s, then back"

    def _f_clock_strobe(self, rng: random.Random, event: FaultEvent) -> str | None:
        if getattr(self.cluster, "clock_lib", None) is None:
            return None
        b = self._pick_broker(rng, event)
        if b is None:
            return None
        seconds = rng.uniform(3, 5)
        end = time.monotonic() + seconds
        steps, sign, largest = 0, rng.choice((-1, 1)), 0
        try:
            while time.monotonic() < end and not self.stop_event.is_set():
                step = sign * abs(clockshift.random_step_ns(rng, self.config.max_clock_step_s))
                self.cluster.set_clock_offset(b, step)
                steps, sign, largest = steps + 1, -sign, max(largest, abs(step))
                self._hold(rng.uniform(0.05, 0.3))
        finally:
            self._healing(event)
            self.cluster.set_clock_offset(b, 0)
        return (f"broker {b}'s ({event.role}) wall clock strobed: {steps} steps back and forth within "
                f"+-{largest / 1e9:.1f} s for {seconds:.1f} s, then true")

    def _net_hold(self, event: FaultEvent, pairs: list[tuple[str, str]], seconds: float) -> None:
        lab = self.cluster.lab
        assert lab is not None
        try:
            for a, b in pairs:
                lab.cut(a, b)
            self._hold(seconds)
        finally:
            self._healing(event)
            for a, b in pairs:
                lab.uncut(a, b)

    def _f_part_leader_followers(self, rng: random.Random, event: FaultEvent) -> str | None:
        if self.cluster.lab is None:
            return None
        b = self._pick_broker(rng, event, role="leader")
        if b is None:
            return None
        others = [f"b{o}" for o in self.cluster.slots if o != b]
        seconds = rng.uniform(2, 2 + 2 * self.config.replica_lag_time_max_ms / 1000)
        self._net_hold(event, [(f"b{b}", o) for o in others], seconds)
        return f"broker {b} ({event.role}) cut from the other brokers for {seconds:.1f} s"

    def _f_part_broker_zk(self, rng: random.Random, event: FaultEvent) -> str | None:
        if self.cluster.lab is None:
            return None
        b = self._pick_broker(rng, event)
        if b is None:
            return None
        seconds = rng.uniform(0.5, 2.0) * self.session_s
        self._net_hold(event, [(f"b{b}", f"zk{z}") for z in self.cluster.ensemble.nodes], seconds)
        return f"broker {b} ({event.role}) cut from ZooKeeper (not clients) for {seconds:.1f} s"

    def _f_part_majority_minority(self, rng: random.Random, event: FaultEvent) -> str | None:
        if self.cluster.lab is None:
            return None
        brokers = [f"b{b}" for b in self.cluster.slots]
        zks = [f"zk{z}" for z in self.cluster.ensemble.nodes]
        minority = [rng.choice(brokers), rng.choice(zks)]
        with self.lock:
            if self.busy:
                return None  # a split involves every host: only when nothing else is going on
        if not self._claim(event, *brokers, *zks):
            return None
        event.role = "split"
        majority = [h for h in brokers + zks if h not in minority]
        seconds = 2 * self.session_s
        self._net_hold(event, [(a, b) for a in minority for b in majority], seconds)
        return f"{'+'.join(minority)} | {'+'.join(majority)} for {seconds:.1f} s"

    def _f_part_leader_isolated(self, rng: random.Random, event: FaultEvent) -> str | None:
        if self.cluster.lab is None:
            return None
        b = self._pick_broker(rng, event, role="leader")
        if b is None:
            return None
        peers = [f"b{o}" for o in self.cluster.slots if o != b] + [f"zk{z}" for z in self.cluster.ensemble.nodes]
        self._net_hold(event, [(f"b{b}", h) for h in peers], 2 * self.session_s)
        return f"broker {b} ({event.role}) cut from brokers and ZooKeeper (not clients) for {2 * self.session_s:.1f} s"

    def _f_part_2013(self, rng: random.Random, event: FaultEvent) -> str | None:
        lab = self.cluster.lab
        if lab is None:
            return None
        p = rng.randrange(self.partitions)
        state = self.partition_state(p)
        if state is None or state[0] < 0:
            return None
        b = state[0]
        if self.cluster.broker_pid(b) is None or not self._claim(event, f"b{b}"):
            return None
        event.role = "leader"
        leader = f"b{b}"
        followers = [(leader, f"b{o}") for o in self.cluster.slots if o != b]
        zks = [(leader, f"zk{z}") for z in self.cluster.ensemble.nodes]
        shrunk = False
        try:
            for x, y in followers:
                lab.cut(x, y)
            deadline = time.monotonic() + self.config.replica_lag_time_max_ms / 1000 + 3 * self.session_s
            while time.monotonic() < deadline and not self.stop_event.is_set():
                now = self.partition_state(p)
                if now is not None and now[1] == [b]:
                    shrunk = True
                    break
                time.sleep(0.2)
            for x, y in zks:
                lab.cut(x, y)
            self._hold(2 * self.session_s)
        finally:
            self._healing(event)
            for x, y in followers + zks:
                lab.uncut(x, y)
        isr = "shrank to itself" if shrunk else "not shrunk"
        return (f"leader {b} of partition {p} cut from followers (ISR {isr}),"
                f" then from ZooKeeper for {2 * self.session_s:.1f} s")

    # --------------------------------------------------------------------------------------------- heal

    def heal_all(self, timeout: float = 120.0) -> list[str]:
        """Undo everything: network whole, processes resumed and running, clocks true, disk free."""
        notes: list[str] = []
        cluster = self.cluster
        if cluster.lab is not None:
            cluster.lab.heal()
        if self.disk is not None:
            self.disk.free()
        for b in cluster.slots:
            with contextlib.suppress(Exception):
                if getattr(cluster, "clock_lib", None) is not None:
                    cluster.set_clock_offset(b, 0)
            if cluster.broker_pid(b) is not None:
                with contextlib.suppress(Exception):
                    self._signal(b, signal.SIGCONT)
        for z in cluster.ensemble.nodes:
            if not cluster.ensemble.is_running(z):
                cluster.ensemble.start_node(z)
                notes.append(f"restarted ZooKeeper {z}")
        cluster.ensemble.wait_ready(timeout=timeout)
        for b in cluster.slots:
            if cluster.broker_pid(b) is None:
                self._restart_broker(b)
                notes.append(f"restarted broker {b}")
        try:
            cluster.wait_registered(list(cluster.slots), timeout=4 * self.session_s + 20)
        except Exception:  # a broker that does not come back by itself is a finding; restart it to check the data
            for b in cluster.slots:
                if not cluster.serving(b):
                    with contextlib.suppress(Exception):
                        cluster.kill_broker(b)
                    self._restart_broker(b)
                    notes.append(f"broker {b} did not serve again after the heal (liveness); killed and restarted")
            cluster.wait_registered(list(cluster.slots), timeout=timeout)
        return notes

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.zk.close()

    def events_json(self) -> list[dict[str, Any]]:
        return [asdict(e) for e in sorted(self.events, key=lambda e: e.t_start)]


def _wait(cond: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.25)
    return False
