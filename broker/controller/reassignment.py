"""Partition reassignment in the controller (Kafka's ``onPartitionReassignment``, with KIP-455's persisted state).

Terms, as in KIP-455: ORS the original replicas, TRS the target, RS the replicas assigned while moving,
AR / RR the adding and removing replicas. For each partition requested in ``/admin/reassign_partitions``:

1. Write RS = TRS + (ORS - TRS) to the topic znode, with ``adding_replicas`` = TRS - ORS and
   ``removing_replicas`` = ORS - TRS (so a controller failover resumes from ZooKeeper alone), then bump the
   leader epoch: every broker re-reads the partition, the new replicas open it as followers and start fetching,
   and the leader learns its new followers.
2. Wait until every replica of TRS is in the ISR (the leader adds each one once it has caught up). The
   controller watches the state znodes of moving partitions; each change is a ``ReassignmentIsrChange`` event.
3. Then in one conditional state write: keep the leader if it is in TRS, else elect the first live TRS replica
   in the ISR (so leadership moves before the old replicas go), and shrink the ISR to TRS. Acknowledged records
   are on every ISR member, the new leader is one of them, and nothing leaves the ISR before TRS has joined it:
   no acknowledged record can be lost.
4. Write RS = TRS with no adding/removing replicas. The removed brokers see that they are no longer replicas
   and stop and delete their copies (broker/replication/replica_manager.py). This write comes last because it
   drops the only persisted copy of ORS.
5. Drop the partition from ``/admin/reassign_partitions`` (the node is deleted when empty).

A new request for a partition that is already moving replaces its target (ORS stays what it was before the
first move); ``--cancel`` is such a request with ORS as the target. Requests the controller cannot act on
(unknown topic or partition, an empty or duplicated replica list) are dropped from the node, as Kafka 2.4+
does, so a bad entry cannot block the node forever.

Concurrency: every method runs on the controller's event task (the state lives in ``ControllerContext``).

The manager sees the controller only through what it is built with: the ZooKeeper client, the current context
(read on every call, since the controller starts a new one on each election), the event queue's watcher
factory, the current claim, and the controller's batched state update (re-read, decide, write fenced).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from broker.metadata.events import Event
from odradek.protocol.model import LeaderAndIsr, TopicAssignment, TopicPartition

if TYPE_CHECKING:
    from broker.controller.controller import ControllerContext, Decide
    from zk.client import ControllerClaim, ZkClient

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReassignPartitions(Event):
    """/admin/reassign_partitions was created or changed."""


@dataclass(frozen=True, slots=True)
class ReassignmentIsrChange(Event):
    """The state of a moving partition changed: its target replicas may all be in the ISR now."""

    topic: str
    partition: int


# ------------------------------------------------------------------------------------- pure rules (tested)


def moving_replicas(current: Sequence[int], adding: Sequence[int],
                    target: Sequence[int]) -> tuple[list[int], list[int], list[int]]:
    """(RS, adding, removing) for a move of a partition now on ``current`` (of which ``adding`` are still being
    added by an earlier move) to ``target``. Replicas being added by the earlier move that the new target
    drops stay in RS until the move completes, so nothing in the ISR disappears before completion."""
    original = [r for r in current if r not in adding]
    rs = list(target) + [r for r in current if r not in target]
    return rs, [r for r in target if r not in original], [r for r in rs if r not in target]


def completion(state: LeaderAndIsr, target: Sequence[int], live: set[int],
               controller_epoch: int) -> LeaderAndIsr | None:
    """The state that completes a move once every target replica is in the ISR; None while waiting (or when
    nothing changes). The leader stays if it is a live target replica; otherwise the first live target replica
    in the ISR takes over. The ISR shrinks to the target replicas."""
    if not set(target) <= set(state.isr):
        return None
    if state.leader in target and state.leader in live:
        leader = state.leader
    else:
        candidates = [r for r in target if r in state.isr and r in live]
        if not candidates:
            return None
        leader = candidates[0]
    isr = [r for r in state.isr if r in target]
    if leader == state.leader and isr == list(state.isr):
        return None
    return state.new_leader_and_isr(leader, isr, controller_epoch)


def is_complete(state: LeaderAndIsr, target: Sequence[int]) -> bool:
    return state.leader in target and set(state.isr) == set(target)


def valid_target(target: Sequence[int]) -> bool:
    return bool(target) and len(set(target)) == len(target) and all(r >= 0 for r in target)


# ------------------------------------------------------------------------------------------------ manager


class ReassignmentManager:
    """The controller's reassignment steps; ``ctx.reassignments`` holds the targets being worked on."""

    def __init__(
        self,
        zk: ZkClient,
        context: Callable[[], ControllerContext],
        watcher: Callable[[Event], Callable[[], None]],
        claim: Callable[[], ControllerClaim],
        update_states: Callable[[dict[TopicPartition, Decide]], Awaitable[dict[TopicPartition, LeaderAndIsr]]],
    ) -> None:
        self._zk = zk
        self._context = context
        self._watcher = watcher
        self._claim = claim
        self._update_states = update_states

    async def on_request(self) -> None:
        """Read the requested moves (re-arming the node's watch), start the new ones, check them all."""
        ctx = self._context()
        requested = await asyncio.to_thread(self._zk.get_reassignment, self._watcher(ReassignPartitions()))
        if requested is None:
            ctx.reassignments.clear()
            return
        dropped: set[TopicPartition] = set()
        starts: dict[str, dict[int, list[int]]] = {}
        for tp, target in sorted(requested.items()):
            assignment = ctx.assignments.get(tp.topic)
            if assignment is None or tp.partition not in assignment.partitions or not valid_target(target):
                log.warning("controller: dropping the reassignment of %s to %s (unknown partition or bad replica "
                            "list)", tp, target)
                dropped.add(tp)
                continue
            if ctx.reassignments.get(tp) == target:
                continue
            ctx.reassignments[tp] = list(target)
            starts.setdefault(tp.topic, {})[tp.partition] = list(target)
        for topic, targets in starts.items():
            await self._start(topic, targets)
        if dropped:
            await asyncio.to_thread(self._zk.finish_reassignments, self._claim(), dropped)
        await self._check([tp for tp in ctx.reassignments if tp not in dropped])

    async def on_isr_change(self, tp: TopicPartition) -> None:
        if tp in self._context().reassignments:
            await self._check([tp])

    def forget_topic(self, topic: str) -> None:
        reassignments = self._context().reassignments
        for tp in [tp for tp in reassignments if tp.topic == topic]:
            del reassignments[tp]

    async def _start(self, topic: str, targets: dict[int, list[int]]) -> None:
        """Step 1 for one topic's partitions: persist RS/adding/removing, then bump the leader epochs."""
        ctx = self._context()
        assignment = ctx.assignments[topic]
        partitions, adding, removing = dict(assignment.partitions), dict(assignment.adding_replicas), dict(
            assignment.removing_replicas)
        changed: list[int] = []
        for p, target in sorted(targets.items()):
            rs, add, rem = moving_replicas(partitions[p], adding.get(p, []), target)
            if (rs, add, rem) == (partitions[p], adding.get(p, []), removing.get(p, [])):
                continue  # a failover resuming a move it already persisted
            partitions[p] = rs
            adding[p], removing[p] = add, rem
            if not add and not rem:
                adding.pop(p)
                removing.pop(p)
            changed.append(p)
            log.info("controller: reassigning %s-%d to %s (replicas now %s, adding %s, removing %s)", topic, p,
                     target, rs, add, rem)
        if not changed:
            return
        new = replace(assignment, partitions=partitions, adding_replicas=adding, removing_replicas=removing)
        await asyncio.to_thread(self._zk.set_topic_assignment_fenced, self._claim(), topic, new)
        ctx.assignments[topic] = new
        epoch = self._claim().epoch
        await self._update_states({
            TopicPartition(topic, p): (lambda s: s.new_leader(s.leader, epoch) if s.has_leader else None)
            for p in changed
        })

    async def _check(self, tps: list[TopicPartition]) -> None:
        """Steps 2-5 for the partitions whose target replicas are all in the ISR; re-arms their state watches."""
        if not tps:
            return
        ctx = self._context()
        got = await asyncio.to_thread(
            self._zk.get_partition_states, tps, lambda t, p: self._watcher(ReassignmentIsrChange(t, p)))
        ready = [tp for tp, s in got.items() if s is not None and set(ctx.reassignments[tp]) <= set(s[0].isr)]
        if not ready:
            return
        live, epoch = set(ctx.live_brokers), self._claim().epoch
        await self._update_states({
            tp: (lambda s, target=ctx.reassignments[tp]: completion(s, target, live, epoch)) for tp in ready
        })
        done: set[TopicPartition] = set()
        by_topic: dict[str, list[TopicPartition]] = {}
        for tp in ready:
            state = ctx.states.get(tp)
            if state is not None and is_complete(state[0], ctx.reassignments[tp]):
                by_topic.setdefault(tp.topic, []).append(tp)
        for topic, finished in by_topic.items():
            assignment = ctx.assignments.get(topic)
            if assignment is None:
                continue
            partitions, adding, removing = dict(assignment.partitions), dict(assignment.adding_replicas), dict(
                assignment.removing_replicas)
            for tp in finished:
                partitions[tp.partition] = list(ctx.reassignments[tp])
                adding.pop(tp.partition, None)
                removing.pop(tp.partition, None)
            new: TopicAssignment = replace(assignment, partitions=partitions, adding_replicas=adding,
                                           removing_replicas=removing)
            await asyncio.to_thread(self._zk.set_topic_assignment_fenced, self._claim(), topic, new)
            ctx.assignments[topic] = new
            done.update(finished)
        if done:
            for tp in sorted(done):
                log.info("controller: reassignment of %s to %s is complete", tp, ctx.reassignments.pop(tp))
            await asyncio.to_thread(self._zk.finish_reassignments, self._claim(), done)
