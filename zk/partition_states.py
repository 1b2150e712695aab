"""Partition state znodes, one at a time and in batches: the verbs of ``ZkClient`` that leaders and the controller
use to read and write ``/brokers/topics/<t>/partitions/<p>/state``.

Why batches: a controller failover, a broker's death or a controlled shutdown decides the state of many
partitions at once. One synchronous read and one write per partition costs 2N round trips, one after the other;
kazoo's asynchronous API pipelines N requests on the session's connection, so a batch costs about one round
trip's latency whatever N is (Kafka's ``KafkaZkClient.getTopicPartitionStates`` / ``updateLeaderAndIsr``).

Each write in a batch is its own small multi, ``check(/controller_epoch, zkVersion)`` + ``setData(state,
expectedVersion)``, rather than one multi for all: a multi is atomic, so one partition whose leader changed
its ISR meanwhile would fail all the others. Results come back as (done, to retry, failed), as in Kafka:
a version conflict is "re-read and decide again"; a failed epoch check anywhere means a newer controller
exists and raises ControllerMovedError.

kazoo's ``commit()`` and ``commit_async()`` do not raise for a failed multi: the result list holds exception
instances (the failing op's error, ``RolledBackError``/``RuntimeInconsistency`` for the others).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError, RuntimeInconsistency

from odradek.protocol.errors import ControllerMovedError
from odradek.protocol.model import LeaderAndIsr, TopicPartition
from zk.retry import UNAVAILABLE, unavailable
from zk.znodes import ControllerEpochZNode, TopicPartitionStateZNode, TopicPartitionsZNode, TopicPartitionZNode

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from zk.client import ControllerClaim, Watch

State = tuple[LeaderAndIsr, int]
WatchFor = Callable[[str, int], "Watch"]


class ZkVersionConflict(Exception):
    """A conditional write lost to a concurrent one: re-read the node and decide again."""


@dataclass
class StateWrites:
    """The outcome of a batch of conditional state writes (Kafka's UpdateLeaderAndIsrResult)."""

    done: dict[TopicPartition, State] = field(default_factory=dict)
    to_retry: list[TopicPartition] = field(default_factory=list)
    failed: dict[TopicPartition, Exception] = field(default_factory=dict)


def is_rollback(error: Exception) -> bool:
    return isinstance(error, (RolledBackError, RuntimeInconsistency))


def _key(tp: tuple[str, int]) -> TopicPartition:
    return tp if isinstance(tp, TopicPartition) else TopicPartition(*tp)


class PartitionStatesMixin:
    """Mixed into ``ZkClient``: needs its ``retrying``, ``_kazoo``, ``_arm``, ``_commit_fenced`` and deadline."""

    _kazoo: KazooClient
    op_deadline_s: float

    def retrying(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any: ...
    def _arm(self, watch: Watch | None) -> Any: ...
    def _commit_fenced(self, claim: ControllerClaim, build: Callable[[Any], None]) -> list[Any]: ...
    def _get_watching_existence(self, path: str, watch: Watch | None) -> tuple[bytes, Any] | None: ...

    # ---------------------------------------------------------------------------------- one partition

    def get_partition_state(self, topic: str, partition: int, watch: Watch | None = None) -> State | None:
        """(state, zkVersion), or None when the partition has no state node yet."""
        got = self._get_watching_existence(TopicPartitionStateZNode.path(topic, partition), watch)
        if got is None:
            return None
        return TopicPartitionStateZNode.decode(got[0]), int(got[1].version)

    def update_isr(self, topic: str, partition: int, state: LeaderAndIsr, expected_version: int) -> int:
        """Leader: conditional write of its partition's ISR (Kafka before AlterIsr); returns the new zkVersion.

        Not fenced by the controller epoch (the leader is not the controller) but by the zkVersion: any
        controller decision since the leader read the node makes this fail. As in Kafka, a write whose content
        is already there counts as done (a retried write that had succeeded). Raises ZkVersionConflict.
        """
        path = TopicPartitionStateZNode.path(topic, partition)
        try:
            stat = self.retrying(self._kazoo.set, path, TopicPartitionStateZNode.encode(state),
                                 version=expected_version)
            return int(stat.version)
        except (BadVersionError, NoNodeError):
            current = self.get_partition_state(topic, partition)
            if current is not None and current[0] == state:
                return current[1]
            raise ZkVersionConflict(path) from None

    def set_partition_state(
        self, claim: ControllerClaim, topic: str, partition: int, state: LeaderAndIsr, expected_version: int
    ) -> int:
        """Controller: conditional write of one partition's state; returns the new zkVersion.

        Raises ControllerMovedError when deposed, ZkVersionConflict when the node changed since it was read.
        """
        result = self.set_partition_states(claim, {TopicPartition(topic, partition): (state, expected_version)})
        tp = TopicPartition(topic, partition)
        if tp in result.done:
            return result.done[tp][1]
        if tp in result.failed:
            raise result.failed[tp]
        raise ZkVersionConflict(TopicPartitionStateZNode.path(topic, partition))

    def create_partition_states(self, claim: ControllerClaim, topic: str, states: dict[int, LeaderAndIsr]) -> None:
        """Controller: initialise new partitions' state nodes in one multi, fenced by the controller epoch.

        A retried multi that had in fact succeeded finds the nodes there; the partitions whose state nodes
        exist are then skipped, as they were created (by us or a predecessor) and the caller re-reads them.
        """
        parent = TopicPartitionsZNode.path(topic)
        existing = self.get_partition_states([(topic, p) for p in states])
        todo = {p: s for p, s in states.items() if existing[TopicPartition(topic, p)] is None}
        if not todo:
            return
        need_parent = self.retrying(self._kazoo.exists, parent) is None
        have_node = {p for p in todo if self.retrying(self._kazoo.exists, TopicPartitionZNode.path(topic, p))}

        def build(tx: Any) -> None:
            if need_parent:
                tx.create(parent)
            for partition, state in sorted(todo.items()):
                if partition not in have_node:
                    tx.create(TopicPartitionZNode.path(topic, partition))
                tx.create(TopicPartitionStateZNode.path(topic, partition), TopicPartitionStateZNode.encode(state))

        try:
            self._commit_fenced(claim, build)
        except NodeExistsError:
            # Someone (a retried attempt of ours, or a previous controller) created them meanwhile: retry once
            # for whatever is still missing; a second collision is a real conflict for the caller.
            missing = {p: s for p, s in todo.items()
                       if self.get_partition_state(topic, p) is None}
            if missing:

                def build_missing(tx: Any) -> None:
                    for p, s in sorted(missing.items()):
                        tx.create(TopicPartitionStateZNode.path(topic, p), TopicPartitionStateZNode.encode(s))

                self._commit_fenced(claim, build_missing)

    # ---------------------------------------------------------------------------------------- batches

    def get_partition_states(
        self, partitions: Iterable[tuple[str, int]], watch_for: WatchFor | None = None
    ) -> dict[TopicPartition, State | None]:
        """Many partitions' (state, zkVersion) in about one round trip (pipelined asynchronous reads).

        With ``watch_for``, ``watch_for(topic, partition)`` is armed on each state node for its creation,
        change or deletion (an exists watch, so it is armed for a node not created yet too).
        """
        wanted = [_key(tp) for tp in partitions]
        if not wanted:
            return {}
        return dict(self.retrying(self._read_states, wanted, watch_for))

    def _read_states(self, wanted: list[TopicPartition],
                     watch_for: WatchFor | None) -> list[tuple[TopicPartition, State | None]]:
        started = time.monotonic()
        present = wanted
        if watch_for is not None:
            exists = [(tp, self._kazoo.exists_async(TopicPartitionStateZNode.path(*tp),
                                                    watch=self._arm(watch_for(*tp)))) for tp in wanted]
            present = [tp for tp, r in exists if r.get(timeout=self._left(started)) is not None]
        gets = [(tp, self._kazoo.get_async(TopicPartitionStateZNode.path(*tp))) for tp in present]
        out: dict[TopicPartition, State | None] = dict.fromkeys(wanted)
        for tp, r in gets:
            try:
                data, stat = r.get(timeout=self._left(started))
            except NoNodeError:
                continue
            out[tp] = (TopicPartitionStateZNode.decode(data), int(stat.version))
        return list(out.items())

    def set_partition_states(self, claim: ControllerClaim,
                             updates: dict[TopicPartition, State] | dict[tuple[str, int], State]) -> StateWrites:
        """Controller: conditional writes of many partitions' states, each fenced by the controller epoch.

        ``updates`` maps a partition to (new state, the zkVersion it was decided from). Returns what was written
        (with new zkVersions), what lost to a concurrent write (re-read and decide again) and what failed (the
        node is gone). Raises ControllerMovedError when deposed, CoordinationUnavailableError when ZooKeeper
        stays unreachable past the deadline (writes already made stay made; a re-read shows them).
        """
        result = StateWrites()
        pending = {_key(tp): v for tp, v in updates.items()}
        started = time.monotonic()
        while pending:
            commits = []
            for tp, (state, version) in pending.items():
                tx = self._kazoo.transaction()
                tx.check(ControllerEpochZNode.path, claim.epoch_zk_version)
                tx.set_data(TopicPartitionStateZNode.path(*tp), TopicPartitionStateZNode.encode(state),
                            version=version)
                commits.append((tp, tx.commit_async()))
            lost: dict[TopicPartition, State] = {}
            last_error: BaseException | None = None
            for tp, r in commits:
                try:
                    results = r.get(timeout=self._left(started))
                except UNAVAILABLE as e:  # this one may or may not have been applied: write it again
                    lost[tp] = pending[tp]
                    last_error = e
                    continue
                self._classify(claim, tp, pending[tp][0], results, result)
            pending = lost
            if pending:
                if time.monotonic() - started >= self.op_deadline_s:
                    assert last_error is not None
                    raise unavailable(last_error, self.op_deadline_s) from last_error
                # One retry policy: wait for the connection under the same deadline, then resend the rest.
                self.retrying(lambda: None)
        return result

    @staticmethod
    def _classify(claim: ControllerClaim, tp: TopicPartition, state: LeaderAndIsr, results: list[Any],
                  out: StateWrites) -> None:
        check, write = results[0], results[1]
        if isinstance(check, (BadVersionError, NoNodeError)):
            raise ControllerMovedError(
                f"controller epoch {claim.epoch} of broker {claim.broker_id} is stale: a newer controller exists")
        if not isinstance(write, Exception):
            out.done[tp] = (state, int(write.version))
        elif isinstance(write, BadVersionError):
            out.to_retry.append(tp)
        else:
            out.failed[tp] = write

    def _left(self, started: float) -> float:
        return max(0.001, started + self.op_deadline_s - time.monotonic())
