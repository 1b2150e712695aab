"""The active controller: reacts to brokers and topics coming and going, one event at a time.

Lifecycle: a broker's ``ControllerCandidate`` wins kazoo's Election and signals ``Elected``; the controller then
claims ``/controller`` and bumps ``/controller_epoch`` in one multi (``ZkClient.claim_controller``), reads the
cluster from ZooKeeper and arms its watches (Kafka's ``onControllerFailover``). Every later write goes through
``ZkClient``'s fenced verbs with that claim, so a deposed controller's writes fail with ControllerMovedError,
upon which it resigns. Resignation (SIGTERM, session loss, being deposed) drops all state and releases the
election lock so another broker can win.

Batching: a broker's death, a controlled shutdown or a preferred election decides many partitions at once. Their
states are read in one pipelined batch and written in another (``ZkClient.get_partition_states`` /
``set_partition_states``, each write fenced by the controller epoch), and only the partitions whose write lost
to a concurrent one (a leader changing its ISR) are read and decided again: a failover over N partitions costs a
few round trips, not 2N (Kafka's ``PartitionStateMachine`` with ``KafkaZkClient.updateLeaderAndIsr``).

ZooKeeper outages: a handler whose ZooKeeper call fails with CoordinationUnavailableError is retried by the event
queue until it succeeds (its re-read re-arms its watch); after a reconnect the broker enqueues ``Resync``, which
re-reads everything the controller watches (Kafka's session/reconnect handlers).

Concurrency: every method runs on the controller's event task (``EventQueue``); the context below is owned
by it and needs no locks. ZooKeeper calls are blocking and run in worker threads via ``asyncio.to_thread``;
the task awaits each one, so events are still handled strictly one at a time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.controller import leadership
from broker.controller.reassignment import ReassignmentIsrChange, ReassignmentManager, ReassignPartitions
from broker.metadata.events import Event, EventQueue
from odradek.protocol.errors import ControllerMovedError, NotControllerError, OdradekError, StaleBrokerEpochError
from odradek.protocol.model import BrokerInfo, LeaderAndIsr, TopicAssignment, TopicPartition
from zk.client import ControllerClaim, ZkClient

Decide = Callable[[LeaderAndIsr], LeaderAndIsr | None]
MAX_DECISION_ROUNDS = 10

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Elected(Event):
    """This broker won the controller election."""


@dataclass(frozen=True, slots=True)
class Resign(Event):
    reason: str = ""
    session_lost: bool = False


@dataclass(frozen=True, slots=True)
class Resync(Event):
    """The ZooKeeper connection came back: re-read everything the controller watches, re-arming the watches."""


@dataclass(frozen=True, slots=True)
class BrokerChange(Event):
    """The children of /brokers/ids changed."""


@dataclass(frozen=True, slots=True)
class TopicChange(Event):
    """The children of /brokers/topics changed."""


@dataclass(frozen=True, slots=True)
class PartitionModifications(Event):
    """A topic's assignment changed (partitions were added)."""

    topic: str


@dataclass(frozen=True, slots=True)
class TopicDeletion(Event):
    """The children of /admin/delete_topics changed."""


@dataclass(frozen=True, slots=True)
class ConfigChange(Event):
    """A config change notification appeared (e.g. unclean.leader.election.enable was turned on)."""


@dataclass(frozen=True, slots=True)
class PreferredElection(Event):
    """/admin/preferred_replica_election was created or changed."""


@dataclass(frozen=True, slots=True)
class AutoRebalance(Event):
    """Time for the leader-imbalance check (auto.leader.rebalance.enable)."""


@dataclass(frozen=True, eq=False)
class UncleanElection(Event):
    """An operator asks for an unclean election of these partitions; ``reply`` gets, per partition, the leader
    elected (or already leading), or None when no replica is alive."""

    partitions: tuple[TopicPartition, ...]
    reply: asyncio.Future[dict[TopicPartition, int | None]]


@dataclass(frozen=True, eq=False)
class ControlledShutdown(Event):
    """A broker asks to have its leaderships moved before it stops; ``reply`` gets the partitions it still leads."""

    broker_id: int
    broker_epoch: int
    reply: asyncio.Future[list[tuple[str, int]]]


@dataclass
class ControllerContext:
    """What the active controller knows; owned by the controller task, rebuilt on every election."""

    claim: ControllerClaim | None = None
    live_brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    assignments: dict[str, TopicAssignment] = field(default_factory=dict)
    states: dict[tuple[str, int], tuple[LeaderAndIsr, int]] = field(default_factory=dict)
    shutting_down: set[int] = field(default_factory=set)
    reassignments: dict[TopicPartition, list[int]] = field(default_factory=dict)  # moving -> target replicas


@dataclass(frozen=True, slots=True)
class RebalanceSettings:
    """Kafka's auto.leader.rebalance.enable, leader.imbalance.check.interval.seconds and
    leader.imbalance.per.broker.percentage."""

    enabled: bool = True
    check_interval_s: float = 300.0
    per_broker_percentage: int = 10


class Controller:
    def __init__(self, broker_id: int, zk: ZkClient, release_election: Callable[[], None],
                 rebalance: RebalanceSettings | None = None) -> None:
        self.broker_id = broker_id
        self._zk = zk
        self._release_election = release_election
        self.rebalance = rebalance or RebalanceSettings()
        self.config_change_expiration_ms = 15 * 60 * 1000  # Kafka's changeExpirationMs
        self.ctx = ControllerContext()
        # ZooKeeper sessions lost so far (written by kazoo's thread), and that count when the current claim was
        # made: a claim made before the latest loss is over at once, before its Resign is handled.
        self._sessions_lost = 0
        self._claimed_at = 0
        self.queue = EventQueue(f"controller-{broker_id}", self._handle)
        self._rebalance_timer: asyncio.TimerHandle | None = None
        self.reassignment = ReassignmentManager(zk, context=lambda: self.ctx, watcher=self.queue.watcher,
                                                claim=self._claim, update_states=self._update_states)

    @property
    def active(self) -> bool:
        return self.ctx.claim is not None and self._claimed_at == self._sessions_lost

    def session_lost_threadsafe(self) -> None:
        """kazoo's thread, on LOST: this broker's claim died with its session. Stop counting as the controller at
        once (the broker may register again with a new session before the controller task gets to run), drop the
        events queued for the term that is over (a pending request is refused with NOT_CONTROLLER), and resign
        before anything else is handled, as Kafka's controller does on its Expire event. An event in flight
        finishes; its writes are fenced by the controller epoch's zkVersion."""
        self._sessions_lost += 1
        self.queue.clear_and_put_threadsafe(Resign("ZooKeeper session lost", session_lost=True), self._refuse)

    def _refuse(self, event: Event) -> None:
        if isinstance(event, ControlledShutdown | UncleanElection) and not event.reply.done():
            event.reply.set_exception(NotControllerError(f"broker {self.broker_id} is not the controller"))

    @property
    def epoch(self) -> int | None:
        return None if self.ctx.claim is None else self.ctx.claim.epoch

    async def _handle(self, event: Event) -> None:
        if isinstance(event, Elected):
            await self._on_elected()
            return
        if isinstance(event, Resign):
            await self._resign(event.reason, session_lost=event.session_lost)
            return
        if not self.active:
            self._refuse(event)
            return  # a watch armed during an earlier term fired after we resigned
        try:
            match event:
                case Resync():
                    await self._load_cluster()
                case BrokerChange():
                    await self._on_broker_change()
                case TopicChange():
                    await self._on_topic_change()
                case PartitionModifications(topic=topic):
                    await self._on_partition_modifications(topic)
                case TopicDeletion():
                    await self._on_topic_deletion()
                case PreferredElection():
                    await self._on_preferred_election()
                case ConfigChange():
                    await self._on_config_change()
                case AutoRebalance():
                    await self._on_auto_rebalance()
                case ControlledShutdown():
                    await self._on_controlled_shutdown(event)
                case UncleanElection():
                    await self._on_unclean_election(event)
                case ReassignPartitions():
                    await self.reassignment.on_request()
                case ReassignmentIsrChange(topic=topic, partition=partition):
                    await self.reassignment.on_isr_change(TopicPartition(topic, partition))
        except ControllerMovedError as e:
            if isinstance(event, ControlledShutdown | UncleanElection) and not event.reply.done():
                event.reply.set_exception(e)
            await self._resign(str(e))

    # ------------------------------------------------------------------------------------ election, failover

    async def _on_elected(self) -> None:
        if self.active:
            return
        sessions_lost = self._sessions_lost
        try:
            claim = await asyncio.to_thread(self._zk.claim_controller, self.broker_id)
        except OdradekError as e:
            log.warning("broker %d won the election but could not claim /controller: %s", self.broker_id, e)
            self._release_election()
            return
        self.ctx = ControllerContext(claim=claim)
        self._claimed_at = sessions_lost  # a session lost meanwhile leaves it inactive; its Resign is queued
        log.info("broker %d is the controller (epoch %d)", self.broker_id, claim.epoch)
        try:
            await self._load_cluster()
        except ControllerMovedError as e:
            await self._resign(str(e))
            return
        except OdradekError as e:  # ZooKeeper unreachable: the queue retries a Resync until it answers
            log.warning("controller %d could not read the cluster yet: %s", self.broker_id, e)
            self.queue.put(Resync())
        self._schedule_rebalance(first=True)

    async def _load_cluster(self) -> None:
        """Read the whole cluster and arm every watch (Kafka's onControllerFailover), after an election or a
        reconnect. Safe to repeat: every step re-reads and only acts on differences."""
        await self._on_broker_change()
        await self._on_topic_change(rearm=True)
        await self._on_topic_deletion()
        await self._on_preferred_election()
        await self._on_config_change()
        await self.reassignment.on_request()

    def _schedule_rebalance(self, first: bool = False) -> None:
        if not self.rebalance.enabled or not self.active:
            return
        delay = 5.0 if first else self.rebalance.check_interval_s
        delay = min(delay, self.rebalance.check_interval_s)
        self._rebalance_timer = asyncio.get_running_loop().call_later(delay, self.queue.put, AutoRebalance())

    async def _resign(self, reason: str, *, session_lost: bool = False) -> None:
        claim = self.ctx.claim
        self.ctx = ControllerContext()
        if self._rebalance_timer is not None:
            self._rebalance_timer.cancel()
            self._rebalance_timer = None
        if claim is not None:
            log.info("broker %d resigns as controller (epoch %d): %s", self.broker_id, claim.epoch, reason)
            if not session_lost:
                try:
                    await asyncio.to_thread(self._zk.resign_controller, claim)
                except Exception as e:  # the session may be gone; /controller then goes with it
                    log.warning("could not delete /controller on resignation: %s", e)
        self._release_election()

    def _claim(self) -> ControllerClaim:
        assert self.ctx.claim is not None
        return self.ctx.claim

    # ------------------------------------------------------------------------------------------- brokers

    async def _on_broker_change(self) -> None:
        brokers = await asyncio.to_thread(self._zk.get_brokers, self.queue.watcher(BrokerChange()))
        old = self.ctx.live_brokers
        new_ids = {b for b in brokers if b not in old or brokers[b].epoch != old[b].epoch}
        dead_ids = {b for b in old if b not in brokers or brokers[b].epoch != old[b].epoch}
        if new_ids or dead_ids:
            log.info("controller: brokers joined %s, left %s; live %s", sorted(new_ids), sorted(dead_ids),
                     sorted(brokers))
        self.ctx.shutting_down -= dead_ids
        bounced = new_ids & dead_ids
        if bounced:
            # A broker that restarted between two looks (a new czxid) is handled as a failure first, as in Kafka:
            # its leaderships move to replicas that did not restart.
            self.ctx.live_brokers = {b: i for b, i in brokers.items() if b not in bounced}
            await self._elect_offline_partitions()
        self.ctx.live_brokers = brokers
        if dead_ids or new_ids:
            await self._elect_offline_partitions()

    async def _elect_offline_partitions(self) -> None:
        """Move leadership off dead brokers (clean election unless the topic allows unclean), and take dead
        followers out of ISRs."""
        live = set(self.ctx.live_brokers)
        epoch = self._claim().epoch
        unclean_by_topic: dict[str, bool] = {}
        decisions: dict[TopicPartition, Decide] = {}
        for (topic, partition), (state, _) in list(self.ctx.states.items()):
            replicas = self.replicas_of(topic, partition)
            if state.leader in live and all(r in live for r in replicas):
                continue  # (the cached ISR may be stale; with every replica alive nothing needs deciding)
            if topic not in unclean_by_topic:
                config = await asyncio.to_thread(self._zk.get_topic_config, topic)
                unclean_by_topic[topic] = config.get("unclean.leader.election.enable", "false") == "true"
            decisions[TopicPartition(topic, partition)] = leadership.offline_decision(
                replicas, live, epoch, unclean_by_topic[topic])
        if decisions:
            written = await self._update_states(decisions)
            if written:
                log.info("controller: %d partitions changed leader or ISR after brokers left", len(written))

    def replicas_of(self, topic: str, partition: int) -> list[int]:
        return self.ctx.assignments.get(topic, TopicAssignment({})).partitions.get(partition, [])

    async def _update_state(self, topic: str, partition: int, decide: Decide) -> LeaderAndIsr | None:
        """One partition's ``_update_states``; returns what was written."""
        return (await self._update_states({TopicPartition(topic, partition): decide})).get(
            TopicPartition(topic, partition))

    async def _update_states(self, decisions: dict[TopicPartition, Decide]) -> dict[TopicPartition, LeaderAndIsr]:
        """Decide partitions' next states from a fresh read and write them conditionally, in batches; the
        partitions whose write lost to a concurrent one (the leader changed the ISR meanwhile) are re-read and
        decided again, as Kafka's controller does. Leaders change ISRs themselves, so the cached state may be
        stale: decisions always start from ZooKeeper. Returns what was written.
        """
        written: dict[TopicPartition, LeaderAndIsr] = {}
        pending = dict(decisions)
        for _ in range(MAX_DECISION_ROUNDS):
            if not pending:
                return written
            current = await asyncio.to_thread(self._zk.get_partition_states, list(pending))
            updates: dict[TopicPartition, tuple[LeaderAndIsr, int]] = {}
            for tp, got in current.items():
                if got is None:
                    continue
                self.ctx.states[tp] = got
                state, version = got
                new_state = pending[tp](state)
                if new_state is not None and new_state != state:
                    updates[tp] = (new_state, version)
            if not updates:
                return written
            result = await asyncio.to_thread(self._zk.set_partition_states, self._claim(), updates)
            for tp, (state, version) in result.done.items():
                self.ctx.states[tp] = (state, version)
                written[tp] = state
            for tp, error in result.failed.items():
                log.warning("controller: could not write the state of %s: %s", tp, error)
            pending = {tp: pending[tp] for tp in result.to_retry}
        if pending:
            log.warning("controller: gave up updating %s after repeated version conflicts", sorted(pending))
        return written

    # -------------------------------------------------------------------------------------------- topics

    async def _on_topic_change(self, rearm: bool = False) -> None:
        """New and deleted topics; with ``rearm`` (failover, reconnect) every topic's assignment is re-read too,
        which re-arms its watch."""
        topics = await asyncio.to_thread(self._zk.get_topics, self.queue.watcher(TopicChange()))
        for gone in set(self.ctx.assignments) - set(topics):
            self._forget_topic(gone)
        for topic in topics:
            if rearm or topic not in self.ctx.assignments:
                await self._on_partition_modifications(topic, elect=False)
        await self._elect_offline_partitions()

    async def _on_partition_modifications(self, topic: str, elect: bool = True) -> None:
        assignment = await asyncio.to_thread(
            self._zk.get_topic_assignment, topic, self.queue.watcher(PartitionModifications(topic))
        )
        if assignment is None:
            self._forget_topic(topic)
            return
        self.ctx.assignments[topic] = assignment
        new_states: dict[int, LeaderAndIsr] = {}
        unknown = [TopicPartition(topic, p) for p in sorted(assignment.partitions) if (topic, p) not in self.ctx.states]
        existing = await asyncio.to_thread(self._zk.get_partition_states, unknown) if unknown else {}
        for tp, got in existing.items():
            if got is not None:
                self.ctx.states[tp] = got
            else:
                new_states[tp.partition] = leadership.initial_state(
                    assignment.partitions[tp.partition], self.ctx.live_brokers, self._claim().epoch
                )
        if new_states:
            await asyncio.to_thread(self._zk.create_partition_states, self._claim(), topic, new_states)
            created = await asyncio.to_thread(self._zk.get_partition_states, [(topic, p) for p in new_states])
            for tp, got in created.items():
                if got is not None:
                    self.ctx.states[tp] = got
            log.info("controller: topic %s partitions %s online", topic, sorted(new_states))
        if elect:
            await self._elect_offline_partitions()

    def _forget_topic(self, topic: str) -> None:
        self.ctx.assignments.pop(topic, None)
        self.reassignment.forget_topic(topic)
        for key in [k for k in self.ctx.states if k[0] == topic]:
            del self.ctx.states[key]

    async def _on_topic_deletion(self) -> None:
        topics = await asyncio.to_thread(self._zk.get_topics_to_delete, self.queue.watcher(TopicDeletion()))
        for topic in topics:
            await asyncio.to_thread(self._zk.delete_topic_znodes, self._claim(), topic)
            self._forget_topic(topic)
            log.info("controller: topic %s deleted", topic)

    # ------------------------------------------------------------------------- shutdown and preferred leaders

    async def _on_unclean_election(self, event: UncleanElection) -> None:
        live, epoch = set(self.ctx.live_brokers), self._claim().epoch
        known = [tp for tp in event.partitions if tp in self.ctx.states]
        written = await self._update_states(
            {tp: leadership.unclean_decision(self.replicas_of(*tp), live, epoch) for tp in known})
        for tp, state in written.items():
            log.warning("controller: unclean election: broker %d leads %s (records only the old ISR had are lost)",
                        state.leader, tp)
        leaders = {tp: (self.ctx.states[tp][0].leader if self.ctx.states[tp][0].leader in live else None)
                   for tp in known}
        if not event.reply.done():
            event.reply.set_result(leaders)

    async def _on_controlled_shutdown(self, event: ControlledShutdown) -> None:
        """Kafka's controlled shutdown: move the broker's leaderships to other ISR members, take it out of ISRs."""
        broker = event.broker_id
        info = self.ctx.live_brokers.get(broker)
        if info is None or info.epoch != event.broker_epoch:
            if not event.reply.done():
                event.reply.set_exception(StaleBrokerEpochError(
                    f"broker {broker} with epoch {event.broker_epoch} is not a live registration"))
            return
        self.ctx.shutting_down.add(broker)
        live = set(self.ctx.live_brokers)
        epoch = self._claim().epoch
        shutting_down = set(self.ctx.shutting_down)
        hosted = [TopicPartition(*k) for k in self.ctx.states if broker in self.replicas_of(*k)]
        await self._update_states({
            tp: leadership.controlled_shutdown_decision(self.replicas_of(*tp), broker, live, shutting_down, epoch)
            for tp in hosted
        })
        # What the broker still leads and a retry could move, as Kafka counts it (replicatedPartitionsBrokerLeads:
        # a single-replica partition has nowhere to go and is not counted). Beyond Kafka, a partition none of whose
        # other replicas is live and staying is not counted either: until a broker starts, a retry cannot move it,
        # and waiting out the retries only delays the shutdown (the last broker of a cluster going down).
        remaining = [(tp.topic, tp.partition) for tp in hosted if self.ctx.states[tp][0].leader == broker
                     and any(r != broker and r in live and r not in shutting_down for r in self.replicas_of(*tp))]
        log.info("controller: controlled shutdown of broker %d; it still leads %s", broker, remaining)
        if not event.reply.done():
            event.reply.set_result(remaining)

    async def _on_config_change(self) -> None:
        await asyncio.to_thread(self._zk.get_config_changes, self.queue.watcher(ConfigChange()))
        await self._elect_offline_partitions()  # a topic may now allow unclean election

    async def _on_preferred_election(self) -> None:
        requested = await asyncio.to_thread(self._zk.get_preferred_election, self.queue.watcher(PreferredElection()))
        if requested is None:
            return
        wanted = {(tp.topic, tp.partition) for tp in requested} or set(self.ctx.states)
        await self._elect_preferred(wanted)
        await asyncio.to_thread(self._zk.finish_preferred_election, self._claim())

    async def _elect_preferred(self, partitions: set[tuple[str, int]]) -> None:
        live = set(self.ctx.live_brokers) - self.ctx.shutting_down
        epoch = self._claim().epoch
        written = await self._update_states({
            TopicPartition(*key): leadership.preferred_decision(self.replicas_of(*key), live, epoch)
            for key in sorted(partitions) if key in self.ctx.states
        })
        for tp, state in sorted(written.items()):
            log.info("controller: preferred replica %d leads %s again", state.leader, tp)

    async def _on_auto_rebalance(self) -> None:
        try:
            assignments = {k: self.replicas_of(*k) for k in self.ctx.states}
            leaders = {k: s.leader for k, (s, _) in self.ctx.states.items()}
            imbalanced = leadership.imbalanced_partitions(assignments, leaders, self.rebalance.per_broker_percentage)
            if imbalanced:
                await self._elect_preferred(set(imbalanced))
        finally:
            self._schedule_rebalance()
