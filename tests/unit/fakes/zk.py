"""An in-memory fake of OUR ZooKeeper facade (``zk.client.ZkClient``), for unit tests of the controller.

Why a fake of the facade and not of kazoo or ZooKeeper: the controller talks to ZooKeeper only through the
facade's domain verbs, so the fake needs only what those verbs promise: zkVersions that make conditional writes
fail on a concurrent change (``ZkVersionConflict`` / ``StateWrites.to_retry``), the controller epoch's zkVersion
that fences every controller write (``ControllerMovedError``), one-shot watches, and ``CoordinationUnavailableError``
while "ZooKeeper is down". Integration tests run against real ZooKeeper; this fake is for unit tests only.

Watches fire synchronously on the thread that made the change (tests make changes on the event loop's thread;
the controller's watch callbacks only ``call_soon_threadsafe`` an event, as with kazoo).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from odradek.protocol.errors import ControllerMovedError, CoordinationUnavailableError, TopicAlreadyExistsError
from odradek.protocol.model import BrokerInfo, LeaderAndIsr, TopicAssignment, TopicPartition
from zk.client import ControllerClaim, StateWrites, ZkVersionConflict

Watch = Callable[[], None]
State = tuple[LeaderAndIsr, int]


@dataclass
class Calls:
    """What the controller asked for, to show batching (a few round trips, not 2N)."""

    state_reads: list[int] = field(default_factory=list)  # batch sizes of get_partition_states
    state_writes: list[int] = field(default_factory=list)  # batch sizes of set_partition_states
    single_state_calls: int = 0


class FakeZk:
    """The verbs of ``ZkClient`` the controller (and a partition leader) use, over dicts."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.brokers: dict[int, BrokerInfo] = {}
        self.assignments: dict[str, TopicAssignment] = {}
        self.configs: dict[str, dict[str, str]] = {}
        self.states: dict[TopicPartition, State] = {}
        self.to_delete: set[str] = set()
        self.preferred: list[TopicPartition] | None = None
        self.reassignment: dict[TopicPartition, list[int]] | None = None
        self.config_changes: list[str] = []
        self.controller: int | None = None
        self.controller_epoch = 0
        self.epoch_zk_version = 0
        self.unavailable = False
        self.calls = Calls()
        self._watches: dict[str, list[Watch]] = defaultdict(list)
        self._next_czxid = 100
        self.before_state_write: Callable[[], None] | None = None  # runs once, between a read and a write

    # ----------------------------------------------------------------------------------- test controls

    def add_broker(self, broker_id: int) -> BrokerInfo:
        with self._lock:
            self._next_czxid += 1
            info = BrokerInfo(broker_id, "127.0.0.1", 9000 + broker_id, None, 0, epoch=self._next_czxid)
            self.brokers[broker_id] = info
        self._fire("brokers")
        return info

    def remove_broker(self, broker_id: int) -> None:
        with self._lock:
            del self.brokers[broker_id]
        self._fire("brokers")

    def add_topic(self, topic: str, partitions: dict[int, list[int]], config: dict[str, str] | None = None) -> None:
        with self._lock:
            self.configs[topic] = dict(config or {})
            self.assignments[topic] = TopicAssignment(partitions, topic_id=f"id-{topic}")
        self._fire("topics")

    def set_state(self, topic: str, partition: int, state: LeaderAndIsr) -> int:
        """Someone else (a leader changing its ISR, an earlier controller) writes a partition's state."""
        tp = TopicPartition(topic, partition)
        with self._lock:
            version = self.states[tp][1] + 1 if tp in self.states else 0
            self.states[tp] = (state, version)
        self._fire(f"state:{topic}:{partition}")
        return version

    def another_controller(self, broker_id: int) -> None:
        """A newer controller claims the role: the epoch's zkVersion moves, fencing every older claim."""
        with self._lock:
            self.controller = broker_id
            self.controller_epoch += 1
            self.epoch_zk_version += 1
        self._fire("controller")

    def state(self, topic: str, partition: int) -> LeaderAndIsr:
        return self.states[TopicPartition(topic, partition)][0]

    def _fire(self, key: str) -> None:
        with self._lock:
            watches = self._watches.pop(key, [])
        for watch in watches:
            watch()

    def _arm(self, key: str, watch: Watch | None) -> None:
        if watch is not None:
            with self._lock:
                self._watches[key].append(watch)

    def _check_up(self) -> None:
        if self.unavailable:
            raise CoordinationUnavailableError("ZooKeeper did not answer within 1.5 s (ConnectionLoss)")

    def _check_claim(self, claim: ControllerClaim) -> None:
        if claim.epoch_zk_version != self.epoch_zk_version:
            raise ControllerMovedError(
                f"controller epoch {claim.epoch} of broker {claim.broker_id} is stale: a newer controller exists")

    # ------------------------------------------------------------------------------------- the facade

    def claim_controller(self, broker_id: int) -> ControllerClaim:
        self._check_up()
        with self._lock:
            if self.controller is not None and self.controller != broker_id:
                raise ControllerMovedError(f"broker {broker_id} could not claim the controller")
            self.controller = broker_id
            self.controller_epoch += 1
            self.epoch_zk_version += 1
            return ControllerClaim(broker_id, self.controller_epoch, self.epoch_zk_version)

    def resign_controller(self, claim: ControllerClaim) -> None:
        self._check_up()
        with self._lock:
            if claim.epoch_zk_version == self.epoch_zk_version and self.controller == claim.broker_id:
                self.controller = None

    def get_controller(self, watch: Watch | None = None) -> int | None:
        self._check_up()
        self._arm("controller", watch)
        return self.controller

    def get_brokers(self, watch: Watch | None = None) -> dict[int, BrokerInfo]:
        self._check_up()
        self._arm("brokers", watch)
        with self._lock:
            return dict(self.brokers)

    def get_broker_ids(self, watch: Watch | None = None) -> list[int]:
        return sorted(self.get_brokers(watch))

    def get_topics(self, watch: Watch | None = None, *, fresh: bool = False) -> list[str]:  # one copy: always fresh
        self._check_up()
        self._arm("topics", watch)
        with self._lock:
            return sorted(self.assignments)

    def get_topic_assignment(self, topic: str, watch: Watch | None = None, *,
                             fresh: bool = False) -> TopicAssignment | None:
        self._check_up()
        self._arm(f"assignment:{topic}", watch)
        return self.assignments.get(topic)

    def get_topic_config(self, topic: str, watch: Watch | None = None) -> dict[str, str]:
        self._check_up()
        self._arm(f"config:{topic}", watch)
        return dict(self.configs.get(topic, {}))

    def create_topic(self, topic: str, assignment: TopicAssignment, config: dict[str, str]) -> None:
        self._check_up()
        if topic in self.assignments:
            raise TopicAlreadyExistsError(f"topic '{topic}' already exists")
        self.add_topic(topic, assignment.partitions, config)

    def get_config_changes(self, watch: Watch | None = None) -> list[str]:
        self._check_up()
        self._arm("config_changes", watch)
        return list(self.config_changes)

    def get_topics_to_delete(self, watch: Watch | None = None) -> list[str]:
        self._check_up()
        self._arm("delete_topics", watch)
        return sorted(self.to_delete)

    def delete_topic_znodes(self, claim: ControllerClaim, topic: str) -> None:
        self._check_up()
        with self._lock:
            self._check_claim(claim)
            self.assignments.pop(topic, None)
            self.configs.pop(topic, None)
            self.to_delete.discard(topic)
            for tp in [tp for tp in self.states if tp.topic == topic]:
                del self.states[tp]
        self._fire("topics")

    def request_preferred_election(self, partitions: list[TopicPartition]) -> bool:
        self._check_up()
        with self._lock:
            if self.preferred is not None:
                return False
            self.preferred = list(partitions)
        self._fire("preferred")
        return True

    def get_preferred_election(self, watch: Watch | None = None) -> list[TopicPartition] | None:
        self._check_up()
        self._arm("preferred", watch)
        return None if self.preferred is None else list(self.preferred)

    def get_reassignment(self, watch: Watch | None = None, *,
                         fresh: bool = False) -> dict[TopicPartition, list[int]] | None:
        self._check_up()
        self._arm("reassign", watch)
        with self._lock:
            return None if self.reassignment is None else dict(self.reassignment)

    def request_reassignment(self, moves: Mapping[TopicPartition, list[int]], *, merge: bool = False) -> bool:
        """As zk/client.py: refused when one runs and ``merge`` is not set; merged per partition otherwise."""
        self._check_up()
        with self._lock:
            if self.reassignment is not None and not merge:
                return False
            self.reassignment = {**(self.reassignment or {}), **{tp: list(r) for tp, r in moves.items()}}
        self._fire("reassign")
        return True

    def finish_preferred_election(self, claim: ControllerClaim) -> None:
        self._check_up()
        with self._lock:
            self._check_claim(claim)
            self.preferred = None
        self._fire("preferred")

    # ---------------------------------------------------------------------------------- partition state

    def get_partition_state(self, topic: str, partition: int, watch: Watch | None = None) -> State | None:
        self.calls.single_state_calls += 1
        self._check_up()
        self._arm(f"state:{topic}:{partition}", watch)
        return self.states.get(TopicPartition(topic, partition))

    def get_partition_states(
        self, partitions: Iterable[tuple[str, int]], watch_for: Callable[[str, int], Watch] | None = None
    ) -> dict[TopicPartition, State | None]:
        self._check_up()
        wanted = [TopicPartition(*tp) for tp in partitions]
        self.calls.state_reads.append(len(wanted))
        if watch_for is not None:
            for tp in wanted:
                self._arm(f"state:{tp.topic}:{tp.partition}", watch_for(*tp))
        with self._lock:
            return {tp: self.states.get(tp) for tp in wanted}

    def create_partition_states(self, claim: ControllerClaim, topic: str, states: dict[int, LeaderAndIsr]) -> None:
        self._check_up()
        with self._lock:
            self._check_claim(claim)
            for partition, state in states.items():
                self.states.setdefault(TopicPartition(topic, partition), (state, 0))
        for partition in states:
            self._fire(f"state:{topic}:{partition}")

    def set_partition_states(self, claim: ControllerClaim,
                             updates: dict[TopicPartition, State] | dict[tuple[str, int], State]) -> StateWrites:
        self._check_up()
        self.calls.state_writes.append(len(updates))
        if self.before_state_write is not None:
            hook, self.before_state_write = self.before_state_write, None
            hook()
        out = StateWrites()
        changed: list[TopicPartition] = []
        with self._lock:
            self._check_claim(claim)
            for key, (state, expected) in updates.items():
                tp = TopicPartition(*key)
                current = self.states.get(tp)
                if current is None:
                    out.failed[tp] = KeyError(f"no state node for {tp}")
                elif current[1] != expected:
                    out.to_retry.append(tp)
                else:
                    self.states[tp] = (state, expected + 1)
                    out.done[tp] = (state, expected + 1)
                    changed.append(tp)
        for tp in changed:
            self._fire(f"state:{tp.topic}:{tp.partition}")
        return out

    def set_partition_state(self, claim: ControllerClaim, topic: str, partition: int, state: LeaderAndIsr,
                            expected_version: int) -> int:
        self.calls.single_state_calls += 1
        result = self.set_partition_states(claim, {TopicPartition(topic, partition): (state, expected_version)})
        if result.done:
            return next(iter(result.done.values()))[1]
        raise ZkVersionConflict(f"{topic}-{partition}")

    def update_isr(self, topic: str, partition: int, state: LeaderAndIsr, expected_version: int) -> int:
        self._check_up()
        tp = TopicPartition(topic, partition)
        with self._lock:
            if self.states[tp][1] != expected_version:
                raise ZkVersionConflict(f"{topic}-{partition}")
        return self.set_state(topic, partition, state)
