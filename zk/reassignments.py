"""Partition reassignment in ZooKeeper: ``/admin/reassign_partitions`` and the fenced assignment writes around it.

Why a module of its own: the reassignment node has two writers with different rules. The admin tool (or a
broker's admin endpoint) creates it, and refuses when one is already running, as Kafka's legacy ZooKeeper
route did ("There is an existing assignment running."), or merges into it for ``--additional`` and
``--cancel``; the controller removes finished partitions from it, fenced by its epoch. Both sides rewrite it
conditionally on the node's version, so a tool's merge and the controller's removal never lose each other.

The topic's assignment znode carries the in-progress state (KIP-455): ``partitions`` holds RS (target replicas
first, then the ones being removed), with ``adding_replicas`` / ``removing_replicas``; the controller writes it
fenced by its epoch (``set_topic_assignment_fenced``), since a deposed controller must not move replicas.

Mixed into ``ZkClient``; blocking and thread-safe like the rest of the facade.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from odradek.protocol.errors import UnknownTopicError
from odradek.protocol.model import TopicAssignment, TopicPartition
from zk.znodes import ReassignPartitionsZNode, TopicZNode

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from zk.client import ControllerClaim, Watch

Moves = dict[TopicPartition, list[int]]


class ReassignmentsMixin:
    """Mixed into ``ZkClient``: needs its ``retrying``, ``_kazoo``, ``_commit_fenced`` and existence reads."""

    _kazoo: KazooClient

    def retrying(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any: ...
    def _commit_fenced(self, claim: ControllerClaim, build: Callable[[Any], None]) -> list[Any]: ...
    def _get_watching_existence(self, path: str, watch: Watch | None) -> tuple[bytes, Any] | None: ...

    def get_reassignment(self, watch: Watch | None = None) -> Moves | None:
        """The requested moves (partition -> target replicas), or None when no reassignment is running.

        The watch fires on the node's creation, change or deletion.
        """
        got = self._get_watching_existence(ReassignPartitionsZNode.path, watch)
        return None if got is None else ReassignPartitionsZNode.decode(got[0])

    def request_reassignment(self, moves: Mapping[TopicPartition, list[int]], *, merge: bool = False) -> bool:
        """Admin: start a reassignment; False (nothing written) when one runs and ``merge`` is not set.

        With ``merge`` the moves are added to (or replace, per partition) those already requested: Kafka 2.6's
        ``--additional``, and ``--cancel`` (whose moves are the original replicas).
        """

        def attempt() -> bool | None:
            try:
                data, stat = self._kazoo.get(ReassignPartitionsZNode.path)
            except NoNodeError:
                try:
                    self._kazoo.create(ReassignPartitionsZNode.path, ReassignPartitionsZNode.encode(dict(moves)),
                                       makepath=True)
                    return True
                except NodeExistsError:
                    return None  # created meanwhile: look again
            if not merge:
                return False
            current = ReassignPartitionsZNode.decode(data) | dict(moves)
            try:
                self._kazoo.set(ReassignPartitionsZNode.path, ReassignPartitionsZNode.encode(current),
                                version=stat.version)
                return True
            except (BadVersionError, NoNodeError):
                return None

        while True:
            done = self.retrying(attempt)
            if done is not None:
                return bool(done)

    def finish_reassignments(self, claim: ControllerClaim, finished: set[TopicPartition]) -> Moves:
        """Controller: drop finished (or invalid) partitions from the node, deleting it once empty, fenced.

        Conditional on the node's version: a tool's merge in between is re-read, not overwritten. Returns
        what is still requested.
        """
        while True:
            try:
                data, stat = self.retrying(self._kazoo.get, ReassignPartitionsZNode.path)
            except NoNodeError:
                return {}
            remaining = {tp: r for tp, r in ReassignPartitionsZNode.decode(data).items() if tp not in finished}
            version = stat.version

            def build(tx: Any, remaining: Moves = remaining, version: int = version) -> None:
                if remaining:
                    tx.set_data(ReassignPartitionsZNode.path, ReassignPartitionsZNode.encode(remaining),
                                version=version)
                else:
                    tx.delete(ReassignPartitionsZNode.path, version=version)

            try:
                self._commit_fenced(claim, build)
                return remaining
            except (BadVersionError, NoNodeError):
                continue

    def set_topic_assignment_fenced(self, claim: ControllerClaim, topic: str, assignment: TopicAssignment) -> None:
        """Controller: write a topic's assignment (RS, adding, removing), fenced by the controller epoch."""
        try:
            self._commit_fenced(claim, lambda tx: tx.set_data(TopicZNode.path(topic), TopicZNode.encode(assignment)))
        except NoNodeError:
            raise UnknownTopicError(f"topic '{topic}' does not exist") from None
