"""One broker process: its ZooKeeper session and registration, its controller candidacy, its HTTP server.

Startup order (as Kafka's ``KafkaServer.startup``): connect to ZooKeeper and create the persistent paths,
read or create the cluster id, bind the HTTP and Kafka listeners (so a port clash fails before we announce ourselves),
register the ephemeral ``/brokers/ids/<id>`` (refusing to start if a live session holds the id), then
campaign for controller. SIGTERM shuts down cleanly in reverse: resign the controller role, deregister, stop
serving, close the session. After SIGKILL the ephemeral nodes go when the session times out.

Session expiry: kazoo reports LOST, then CONNECTED with a new session. On LOST the broker gives up the
controller role at once (its claim died with the session, and a fenced write would fail anyway); on the new
session it registers again and campaigns again.

Concurrency: broker state is owned by the broker's event task (``EventQueue``); kazoo's threads only signal it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import gc
import logging
import logging.handlers
import os
import signal
import sys
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, NoReturn

from aiohttp import web

from broker import cpu_affinity
from broker.admin.elections import ElectionAdmin
from broker.admin.entity_configs import EntityConfigAdmin, static_broker_configs
from broker.admin.reassignment import ReassignmentAdmin
from broker.admin.topics import TopicAdmin
from broker.api.app import make_runner
from broker.config import BrokerConfig
from broker.controller.candidate import ControllerCandidate
from broker.controller.controller import Controller, Elected, RebalanceSettings, Resign, Resync
from broker.controller.requests import ControllerRequests
from broker.fetch.offsets import OffsetsService
from broker.fetch.service import FetchService
from broker.group_router import GroupRouter
from broker.interbroker import InterBrokerClient
from broker.kafka.front_door import KafkaFrontDoor
from broker.kafka.leader_endpoint import kafka_leaders, leader_endpoints
from broker.loop_monitor import LoopMonitor, watch_gc
from broker.metadata.cache import MetadataCache
from broker.metadata.events import Event, EventQueue
from broker.metadata.watcher import MetadataWatcher, PartitionStateChanged
from broker.metrics import BrokerMetrics
from broker.produce import forwarding
from broker.produce.routing import LeaderRouter
from broker.produce.service import BatchLimits, ProduceService
from broker.quotas import ClientQuotaManager
from broker.replication.follower_fetch import FollowerFetchService
from broker.replication.replica_manager import ReplicaManager
from broker.rest_consumers import RestInstanceManager
from broker.schema_registry.service import SchemaRegistryService
from broker.security.listeners import inter_broker_headers, listener_sites, registration
from broker.security.middleware import SecurityService
from broker.security.tls import broker_client_context
from broker.transaction_router import TransactionRouter
from consumer_coordinator.coordinator import GroupCoordinator
from odradek.protocol.errors import BrokerIdInUseError, OdradekError
from odradek.protocol.model import BrokerInfo
from transaction_coordinator.coordinator import TxnCoordinator
from transaction_coordinator.marker_writer import LeaderMarkerWriter
from zk.client import CONNECTED, LOST, ZkClient
from zk.ensemble import ensemble_status

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_STARTUP_FAILED = 2
EXIT_FENCED = 3


@dataclass(frozen=True, slots=True)
class SessionLost(Event):
    pass


@dataclass(frozen=True, slots=True)
class SessionRecreated(Event):
    pass


@dataclass(frozen=True, slots=True)
class Reconnected(Event):
    """The connection came back within the same session: re-read what we watch (a change may have been missed
    while no watch could fire, and kazoo dropped its watches with the connection)."""


@dataclass(frozen=True, slots=True)
class ControllerChange(Event):
    pass


@dataclass(frozen=True, slots=True)
class PausedResync(Event):
    pass


class StartupError(Exception):
    """A reason to refuse to start, printed as one line."""


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.cluster_id: str | None = None
        self.broker_epoch: int | None = None
        self.controller_id: int | None = None
        self.zk = ZkClient(
            config.zk_connect,
            session_timeout_s=config.zk_session_timeout_ms / 1000,
            connect_timeout_s=config.zk_connect_timeout_ms / 1000,
            digest=config.security.zk_digest, set_acl=config.security.zk_set_acl,
        )
        # Security (broker/security/, docs/security.md): None on an open cluster (no TLS listener, no authorizer).
        sec = config.security
        self.security = SecurityService(sec, self.zk) if sec.secured or sec.authorizer_enabled else None
        self.cache = MetadataCache()
        # The one inter-broker client (broker/interbroker.py): its pool opens in run(); its users get it passed.
        self.interbroker = InterBrokerClient(
            self.broker_id, self.cache.leader_url, ssl_context=broker_client_context(sec),
            headers=inter_broker_headers(sec), max_connections=config.inter_broker_max_connections)
        # The same client under the name broker/api/groups.py and broker/rest_consumers.py use.
        self.http_session: InterBrokerClient | None = self.interbroker
        self.quotas = ClientQuotaManager(self.cache)  # client quotas (KIP-219), read from the cache
        self.admin = TopicAdmin(self.zk)
        self.reassignments = ReassignmentAdmin(self.zk, self.cache)
        self.elections = ElectionAdmin(self.zk, self.cache)
        self.entity_configs = EntityConfigAdmin(self.zk, self.broker_id, static_broker_configs(config))
        self._zk_state = "CONNECTING"
        self._session_was_lost = False
        self._stop = asyncio.Event()
        self.ready = asyncio.Event()  # set once the metadata cache holds what ZooKeeper holds
        self._exit_code = EXIT_OK
        self.started_at = time.time()
        self.kafka: KafkaFrontDoor | None = None  # Kafka's wire protocol, with --kafka-listeners (broker/kafka/)

        # Every service is built here, once, and handed its collaborators; run() only starts them, in order.
        # Nothing here talks to ZooKeeper or the network. The event queues bind to the running loop, so a Broker
        # is built on the loop that runs it (run_broker). The lambdas read values that change while the broker
        # lives (its epoch, the controller's id), not collaborators that come later.
        self.events = EventQueue(f"broker-{self.broker_id}", self._handle)
        self.controller = Controller(self.broker_id, self.zk, self._release_election, RebalanceSettings(
            enabled=config.auto_leader_rebalance_enable,
            check_interval_s=config.leader_imbalance_check_interval_s,
            per_broker_percentage=config.leader_imbalance_per_broker_percentage,
        ))
        kafka_fetch = config.effective_replica_fetch_transport() == "kafka"
        self.replicas = ReplicaManager(self.broker_id, config.data_dir, self.zk, self.cache,
                                       replica_lag_time_max_ms=config.replica_lag_time_max_ms,
                                       retention_check_interval_ms=config.log_retention_check_interval_ms,
                                       producer_id_expiration_ms=config.producer_id_expiration_ms,
                                       unsafe_ack_before_isr=config.unsafe_ack_before_isr,
                                       interbroker=self.interbroker,
                                       broker_epoch=lambda: self.broker_epoch,  # follower fetches carry it
                                       leader_endpoints=leader_endpoints(config, self.cache)
                                       if kafka_fetch else None,
                                       num_replica_fetchers=config.num_replica_fetchers,
                                       kafka_leader=kafka_leaders(config, self.cache) if kafka_fetch else None)
        self.metadata = MetadataWatcher(self.zk, self.events, self.cache, self.replicas)
        self.follower_fetches = FollowerFetchService(  # a newer leader epoch in a fetch: re-read our state
            self.broker_id, self.cache, self.replicas.throttle,
            reread_state=lambda topic, partition: self.events.put(PartitionStateChanged(topic, partition)))
        self.metrics = BrokerMetrics(lambda: list(self.replicas.partitions.values()))
        if self.replicas.fetcher_manager is not None:  # followers over Kafka's protocol
            self.metrics.watch_replica_fetchers(self.replicas.fetcher_manager)
        self.candidate = ControllerCandidate(  # runs on its own thread: it signals the controller's queue
            self.zk, self.broker_id, functools.partial(self.controller.queue.signal_threadsafe, Elected()))
        # Who leads a partition, for every service that writes or reads one (waits end on metadata changes).
        self.router = LeaderRouter(self.replicas, self.metadata.changed,
                                   lambda topic: asyncio.to_thread(self.zk.get_topic_assignment, topic, fresh=True))
        self.produce = ProduceService(self.replicas, self.interbroker, router=self.router, batch_limits=BatchLimits(
            config.max_records_per_batch, config.max_decompressed_batch_bytes))
        # Forwarded long-polls share upstream reads and hold at most half the forward connections (the rest stay
        # free for forwarded produces and calls): broker/fetch/forwarded_reads.py.
        self.fetches = FetchService(self.broker_id, self.router, self.follower_fetches, self.interbroker,
                                    max_forwarded_polls=max(1, config.inter_broker_max_connections // 2))
        if config.unsafe_read_uncommitted_as_committed:  # planted bug for `odradek verify` only (docs/verify.md)
            self.fetches.unsafe_read_uncommitted_as_committed = True
        self.offsets = OffsetsService(self.replicas, self.interbroker)
        self.controller_requests = ControllerRequests(self.broker_id, self.controller, self.cache, self.interbroker,
                                                      lambda: self.controller_id)
        self.groups = GroupCoordinator(  # consumer groups (consumer_coordinator/); started once metadata is in
            self.broker_id, self.zk, self.cache, lambda: self.broker_epoch, queue_factory=EventQueue,
            changed=self.metadata.changed, offsets_retention_minutes=config.offsets_retention_minutes,
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms)
        # "run this on group G's coordinator", local or one hop away (broker/api/groups.py, rest_consumers.py)
        self.group_router = GroupRouter(self.groups, self.interbroker)
        # transactions (transaction_coordinator/); state in ZooKeeper, markers via the leaders
        self.txn_markers = LeaderMarkerWriter(
            self.router.await_route,
            lambda url, body, timeout_s: forwarding.request_json(
                self.interbroker, "POST", url, body, headers={"Content-Type": "application/json"},
                timeout_s=timeout_s))
        self.txn = TxnCoordinator(
            self.broker_id, self.zk, lambda: self.broker_epoch, self.replicas.producer_ids.next_id,
            self.txn_markers.write)
        if config.unsafe_partial_commit_markers:  # planted bug for `odradek verify` only (docs/verify.md)
            self.txn.unsafe_partial_commit_markers = True
        # "run this on transactional id T's coordinator", local or one hop away (broker/api/transactions.py)
        self.txn_router = TransactionRouter(self.txn, self.interbroker)
        self.rest_consumers = RestInstanceManager(  # REST Proxy v2 consumer instances (broker/api/consumers_v2.py)
            self, instance_timeout_ms=config.consumer_instance_timeout_ms)
        # Confluent Schema Registry (broker/schema_registry/): a copy of _schemas here, writes via the primary
        self.schema_registry = SchemaRegistryService(self.broker_id, self.zk, self.produce, self.fetches,
                                                     self.admin, self.interbroker, self.cache,
                                                     new_producer_id=self.replicas.producer_ids.next_id)

    # ------------------------------------------------------------------------------------------ lifecycle

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        runner: web.AppRunner | None = None
        try:
            await asyncio.to_thread(self.zk.start)
            self.zk.add_state_listener(self._on_zk_state)
            self._zk_state = CONNECTED
            # Until it is registered, the broker waits for a slow or reconnecting ZooKeeper as long as for its
            # first connection, rather than exiting after one call's deadline.
            with self.zk.patient(self.config.zk_connect_timeout_ms / 1000):
                await asyncio.to_thread(self.zk.ensure_persistent_paths)
                self.cluster_id = await asyncio.to_thread(self.zk.get_or_create_cluster_id)
                if self.security is not None:
                    await self.security.start()
                await self.interbroker.start()
                await self.replicas.start()
                runner = await self._start_http()
                await self._start_kafka()
                await self._register()
        except (StartupError, OdradekError) as e:
            log.error("broker %d cannot start: %s", self.broker_id, e)
            print(f"odradek broker {self.broker_id}: cannot start: {e}", flush=True)
            if self.kafka is not None:
                await self.kafka.stop()
            if runner is not None:
                await runner.cleanup()
            await self.replicas.close()
            await self.interbroker.close()
            await asyncio.to_thread(self.zk.close)
            return EXIT_STARTUP_FAILED

        tasks = [asyncio.create_task(self.events.run()), asyncio.create_task(self.controller.queue.run())]
        self.candidate.start()
        await self._refresh_controller()
        await self.metadata.start()
        self.ready.set()
        await self.groups.start()
        await self.txn.start()
        await self.schema_registry.start()
        # What exists now (modules, classes, the started services: most of a broker's objects) lives as long as
        # the process: moved out of the cyclic collector's reach, a full collection walks only what came after
        # (measured: 0.1-0.3 s stalls of the loop per collection of the oldest generation without it).
        gc.collect()
        gc.freeze()
        tasks.append(asyncio.create_task(self._pause_detector()))
        log.info("broker %d started on %s (cluster %s, broker epoch %s)", self.broker_id,
                 self.info().url, self.cluster_id, self.broker_epoch)
        await self._stop.wait()
        await self._shutdown(runner, tasks)
        return self._exit_code

    async def _start_http(self) -> web.AppRunner:
        runner = make_runner(self)
        await runner.setup()
        for host, port, ssl_context in listener_sites(self.config):  # one site per listener (TLS or not)
            site = web.TCPSite(runner, host, port, reuse_address=True, ssl_context=ssl_context)
            try:
                await site.start()
            except OSError as e:
                await runner.cleanup()
                raise StartupError(f"cannot listen on {host}:{port}: {e.strerror}") from e
        return runner

    async def _start_kafka(self) -> None:
        """Kafka's wire protocol on --kafka-listeners (broker/kafka/), bound before we register, as HTTP is."""
        if not self.config.kafka_listeners:
            return
        kafka = KafkaFrontDoor(self)
        try:
            await kafka.start()
        except OSError as e:
            raise StartupError(e.strerror or str(e)) from e
        self.kafka = kafka

    async def _controlled_shutdown(self, retries: int = 3, backoff_s: float = 0.5, budget_s: float = 10.0) -> None:
        """Ask the controller to move our leaderships first (Kafka's controlled shutdown), so clients see at most
        a retry; after ``retries`` attempts, or ``budget_s`` seconds, we stop anyway."""
        deadline = time.monotonic() + budget_s
        for attempt in range(1, retries + 1):
            try:
                remaining = await asyncio.wait_for(self.controller_requests.request_own_shutdown(self.broker_epoch),
                                                   max(0.1, deadline - time.monotonic()))
            except Exception as e:
                log.warning("controlled shutdown attempt %d failed: %s", attempt, e)
                await asyncio.sleep(backoff_s)
                continue
            if not remaining:
                break
            log.info("controlled shutdown: still leading %s (attempt %d)", remaining, attempt)
            await asyncio.sleep(backoff_s)
        # Wait (briefly) until the new states reached us, so in-flight produces fail over now, not at exit.
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline and any(
            p.role == "leader" and len(p.replicas) > 1 and len(p.isr) > 1 for p in self.replicas.partitions.values()
        ):
            await asyncio.sleep(0.05)

    async def _shutdown(self, runner: web.AppRunner | None, tasks: list[asyncio.Task[None]]) -> None:
        """Reverse of startup. ZooKeeper steps are bounded: with ZooKeeper gone, the broker still stops (its
        ephemeral nodes then go with its session)."""
        log.info("broker %d shutting down", self.broker_id)
        if self.broker_epoch is not None:
            await self._controlled_shutdown()
        self.controller.queue.put(Resign("controlled shutdown"))
        self.controller.queue.close()
        await self._bounded(tasks[1], "resigning the controller role")
        await self._bounded(asyncio.to_thread(self.candidate.stop), "leaving the controller election")
        await self._bounded(self.rest_consumers.close(), "closing REST consumer instances")
        await self._bounded(self.txn.stop(), "stopping the transaction coordinator")
        await self._bounded(self.schema_registry.stop(), "stopping the schema registry")
        await self._bounded(self.groups.stop(), "stopping the group coordinator")
        if self.security is not None:
            await self.security.stop()
        self.events.close()
        await self._bounded(tasks[0], "draining broker events")
        tasks[2].cancel()
        await self._bounded(asyncio.to_thread(self.zk.deregister_broker, self.broker_id), "deregistering")
        if self.kafka is not None:
            await self._bounded(self.kafka.stop(), "closing Kafka connections")
        if runner is not None:
            await runner.cleanup()
        await self.replicas.close()
        await self.interbroker.close()
        await self._bounded(asyncio.to_thread(self.zk.close), "closing the ZooKeeper session")
        log.info("broker %d stopped", self.broker_id)

    async def _bounded(self, aw: Awaitable[object], what: str, timeout_s: float = 5.0) -> None:
        try:
            await asyncio.wait_for(aw, timeout_s)
        except TimeoutError:
            log.warning("broker %d: %s took over %.0f s; going on without it", self.broker_id, what, timeout_s)
        except Exception as e:
            log.warning("broker %d: %s failed: %s", self.broker_id, what, e)

    async def zookeeper_ensemble(self) -> list[dict[str, Any]]:
        """Each ZooKeeper server of this broker's connect string, as its ``srvr`` answer describes it."""
        return [status.to_json() for status in await asyncio.to_thread(ensemble_status, self.config.zk_connect)]

    def info(self) -> BrokerInfo:
        # Kafka endpoints beside the HTTP ones: every broker's Metadata answer names the others' Kafka addresses.
        return dataclasses.replace(registration(self.broker_id, self.config, int(self.started_at * 1000)),
                                   kafka_endpoints=self.config.kafka_endpoints())

    async def _pause_detector(self, tick_s: float = 0.1) -> None:
        """Fence our leaderships if this process was frozen for a good part of a session timeout.

        A broker stopped (SIGSTOP, a long GC-like stall, a VM pause) may have lost its session and its
        leaderships without knowing yet: kazoo reports the expiry only after it reconnects, and requests queued
        meanwhile would run first. So when the loop-lag monitor (which also feeds the lag histogram on
        /metrics) sees such a gap, the broker stops acknowledging at once and re-reads the partition states
        from ZooKeeper before leading again. Disk I/O is off the loop (storage executor), so only a real
        stall of the whole loop counts: a slow fsync cannot make a broker fence itself.
        """

        def on_stall(lag_s: float) -> None:
            log.warning("broker %d was paused for %.1f s; fencing its leaderships until ZooKeeper confirms them",
                        self.broker_id, lag_s + tick_s)
            self.replicas.on_session_lost()
            self.events.put(PausedResync())

        watch_gc(self.metrics.gc_pause)
        threshold_s = self.config.zk_session_timeout_ms / 1000 / 3 - tick_s
        monitor = LoopMonitor(self.metrics.loop_lag, tick_s=tick_s, stall_threshold_s=threshold_s,
                              on_stall=on_stall, watch_s=min(0.25, threshold_s / 2))
        await monitor.run()

    async def _register(self) -> None:
        self.broker_epoch = await asyncio.to_thread(self.zk.register_broker, self.info())

    def _release_election(self) -> None:
        self.candidate.release()

    # ------------------------------------------------------------------------------------ ZooKeeper events

    def _on_zk_state(self, state: str) -> None:
        """kazoo thread: record and signal only."""
        previous, self._zk_state = self._zk_state, state
        if state == LOST:
            self._session_was_lost = True
            self.controller.session_lost_threadsafe()
            self.events.signal_threadsafe(SessionLost())
        elif state == CONNECTED and self._session_was_lost:
            self._session_was_lost = False
            self.events.signal_threadsafe(SessionRecreated())
            self.controller.queue.signal_threadsafe(Resync())
        elif state == CONNECTED and previous != CONNECTED:
            self.events.signal_threadsafe(Reconnected())
            self.controller.queue.signal_threadsafe(Resync())

    async def _handle(self, event: Event) -> None:
        if await self.metadata.handle(event):
            return
        match event:
            case SessionLost():
                log.warning("broker %d lost its ZooKeeper session", self.broker_id)
                self.broker_epoch = None
                self.replicas.on_session_lost()
            case SessionRecreated():
                try:
                    await self._register()
                except BrokerIdInUseError as e:
                    log.error("broker %d is fenced: %s", self.broker_id, e)
                    self._exit_code = EXIT_FENCED
                    self._stop.set()
                    return
                log.info("broker %d re-registered with a new session (broker epoch %s)",
                         self.broker_id, self.broker_epoch)
                await self._refresh_controller()
                await self.metadata.resync()
            case Reconnected():
                log.info("broker %d reconnected to ZooKeeper; re-reading the cluster's metadata", self.broker_id)
                await self._refresh_controller()
                await self.metadata.resync(force=False)
            case ControllerChange():
                await self._refresh_controller()
            case PausedResync():
                await self.metadata.resync()

    async def _refresh_controller(self) -> None:
        self.controller_id = await asyncio.to_thread(
            self.zk.get_controller, self.events.watcher(ControllerChange())
        )

    # ------------------------------------------------------------------------------------------- queries

    def health(self) -> dict[str, Any]:
        return {
            "status": ("ok" if self.ready.is_set() else "starting") if self.broker_epoch is not None else "degraded",
            "broker_id": self.broker_id,
            "cluster_id": self.cluster_id,
            "broker_epoch": self.broker_epoch,
            "controller_id": self.controller_id,
            "is_controller": self.controller.active,
            "controller_epoch": self.controller.epoch,
            "zk_state": self._zk_state,
            "zk_session_id": self.zk.session_id,
        }


async def _serve(config: BrokerConfig) -> int:
    """Build the broker on the loop that runs it (its event queues bind to that loop), and run it."""
    return await Broker(config).run()


def run_broker(config: BrokerConfig) -> NoReturn:
    if config.cpu_affinity is not None:  # first: every thread started from here on inherits it
        try:
            cpu_affinity.apply(config.cpu_affinity)
        except ValueError as e:
            raise SystemExit(f"odradek broker: {e}") from None
    handlers: list[logging.Handler] | None = None
    if config.log_file is not None:  # rotated, so that no stream of request errors can fill the disk
        config.log_file.parent.mkdir(parents=True, exist_ok=True)
        handlers = [logging.handlers.RotatingFileHandler(config.log_file, maxBytes=config.log_max_bytes,
                                                         backupCount=config.log_backup_count)]
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s broker-{config.broker_id} %(levelname)s %(name)s: %(message)s",
        handlers=handlers,
    )
    logging.getLogger("kazoo.client").setLevel(logging.WARNING)
    config.data_dir.mkdir(parents=True, exist_ok=True)
    loop = asyncio.new_event_loop()
    code = loop.run_until_complete(_serve(config))
    # Exit without joining worker threads: a ZooKeeper call stuck on a dead ensemble must not keep a stopped
    # broker alive. Everything that matters (logs, checkpoints, the session) was closed or abandoned above.
    logging.shutdown()
    sys.stdout.flush()
    os._exit(code)
