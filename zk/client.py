"""The facade of domain verbs over kazoo: the only code in Odradek that talks to ZooKeeper.

Why a facade: every write the controller makes must be fenced by the controller epoch (a ``check`` of
``/controller_epoch``'s zkVersion in the same multi), conditional writes must go through one retry policy,
and callers must not have to know paths or kazoo's types. Callers get domain values (``BrokerInfo``,
``LeaderAndIsr``) and typed errors (``BrokerIdInUseError``, ``ControllerMovedError``) instead.

Retries: every kazoo call goes through ``retrying`` (zk/retry.py): a connection loss or a slow server is retried
with backoff until the call's deadline (``op_deadline_s``, the session timeout by default, so a caller never
waits longer than ZooKeeper would take to expire it; while a broker starts, its connection timeout: ``patient``);
what still fails then, and a session expiry, leave as ``CoordinationUnavailableError`` (retriable, HTTP 503),
never as a kazoo exception.

Concurrency: ``ZkClient`` is thread-safe (kazoo is); its methods block for one or a few ZooKeeper round trips,
so asyncio callers run them with ``asyncio.to_thread``. Watches are one-shot: a verb that takes ``watch`` arms
it on the node it reads, and the callback runs on a kazoo thread with no arguments. Callers must only hand a
signal to their event loop from it and re-read state when they handle the signal (the read re-arms it).

Partition states (``/brokers/topics/<t>/partitions/<p>/state``) are read and written one at a time and in
batches. Why batches: a controller failover, a broker's death or a controlled shutdown decides the state of many
partitions at once. One synchronous read and one write per partition costs 2N round trips, one after the other;
kazoo's asynchronous API pipelines N requests on the session's connection, so a batch costs about one round
trip's latency whatever N is (Kafka's ``KafkaZkClient.getTopicPartitionStates`` / ``updateLeaderAndIsr``).
Each write in a batch is its own small multi, ``check(/controller_epoch, zkVersion)`` + ``setData(state,
expectedVersion)``, rather than one multi for all: a multi is atomic, so one partition whose leader changed
its ISR meanwhile would fail all the others. Results come back as (done, to retry, failed), as in Kafka:
a version conflict is "re-read and decide again"; a failed epoch check anywhere means a newer controller
exists and raises ControllerMovedError.

Reassignment: ``/admin/reassign_partitions`` has two writers with different rules. The admin tool (or a
broker's admin endpoint) creates it, and refuses when one is already running, as Kafka's legacy ZooKeeper
route did ("There is an existing assignment running."), or merges into it for ``--additional`` and
``--cancel``; the controller removes finished partitions from it, fenced by its epoch. Both sides rewrite it
conditionally on the node's version, so a tool's merge and the controller's removal never lose each other.
The topic's assignment znode carries the in-progress state (KIP-455): ``partitions`` holds RS (target replicas
first, then the ones being removed), with ``adding_replicas`` / ``removing_replicas``; the controller writes it
fenced by its epoch (``set_topic_assignment_fenced``), since a deposed controller must not move replicas.

kazoo's ``commit()`` and ``commit_async()`` do not raise for a failed multi: the result list holds exception
instances (the failing op's error, ``RolledBackError``/``RuntimeInconsistency`` for the others).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from base64 import urlsafe_b64encode
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import WatchedEvent

from odradek.protocol.errors import (
    BrokerIdInUseError,
    ControllerMovedError,
    CoordinationUnavailableError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicError,
)
from odradek.protocol.model import BrokerInfo, LeaderAndIsr, TopicAssignment, TopicPartition
from zk.retry import UNAVAILABLE, ZkRetry, unavailable
from zk.znodes import (
    PERSISTENT_PATHS,
    BrokerIdsZNode,
    BrokerIdZNode,
    ClusterIdZNode,
    ConfigChangesZNode,
    ConfigEntityZNode,
    ControllerElectionZNode,
    ControllerEpochZNode,
    ControllerZNode,
    DeleteTopicsZNode,
    DeleteTopicZNode,
    PreferredReplicaElectionZNode,
    ReassignPartitionsZNode,
    SchemaRegistryElectionZNode,
    SchemaRegistryWriterZNode,
    TopicNameClaimsZNode,
    TopicNameClaimZNode,
    TopicPartitionStateZNode,
    TopicPartitionsZNode,
    TopicPartitionZNode,
    TopicsZNode,
    TopicZNode,
)

__all__ = ["CONNECTED", "LOST", "SUSPENDED", "ControllerClaim", "StateWrites", "ZkClient", "ZkVersionConflict"]

log = logging.getLogger(__name__)

T = TypeVar("T")
Watch = Callable[[], None]
StateListener = Callable[[str], None]

# Connection states as plain strings so nothing outside zk/ needs kazoo's enums.
CONNECTED = "CONNECTED"
SUSPENDED = "SUSPENDED"
LOST = "LOST"


@dataclass(frozen=True, slots=True)
class ControllerClaim:
    """Proof of a won controller election: the epoch and the zkVersion that fences every later write."""

    broker_id: int
    epoch: int
    epoch_zk_version: int


State = tuple[LeaderAndIsr, int]  # a partition's state and its node's zkVersion
WatchFor = Callable[[str, int], Watch]
Moves = dict[TopicPartition, list[int]]  # partition -> target replicas


class ZkVersionConflict(Exception):
    """A conditional write lost to a concurrent one: re-read the node and decide again."""


@dataclass
class StateWrites:
    """The outcome of a batch of conditional state writes (Kafka's UpdateLeaderAndIsrResult)."""

    done: dict[TopicPartition, State] = field(default_factory=dict)
    to_retry: list[TopicPartition] = field(default_factory=list)
    failed: dict[TopicPartition, Exception] = field(default_factory=dict)


# Tries of a topic creation whose name claim changes between our read and our multi (a stale claim taken over
# by another creation, a holder deleted meanwhile): each try re-reads it, so more than a few means contention.
_CLAIM_ATTEMPTS = 5


def is_rollback(error: Exception) -> bool:
    return isinstance(error, (RolledBackError, RuntimeInconsistency))


def _key(tp: tuple[str, int]) -> TopicPartition:
    return tp if isinstance(tp, TopicPartition) else TopicPartition(*tp)


def split_chroot(connect: str) -> tuple[str, str | None]:
    """``"h1:2181,h2:2181/odradek"`` -> ``("h1:2181,h2:2181", "/odradek")``."""
    hosts, sep, chroot = connect.partition("/")
    return hosts, (("/" + chroot.rstrip("/")) if sep and chroot.strip("/") else None)


def new_cluster_id() -> str:
    """Kafka's cluster id shape: a random UUID as 22 characters of URL-safe base64."""
    return urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _secure_kazoo_kwargs(digest: str | None, set_acl: bool) -> dict[str, Any]:
    """kazoo arguments for a digest identity (and secure default ACLs); none for an open cluster."""
    if not digest:
        return {"cls": KazooClient}
    from zk.acls import SecuredKazooClient, digest_auth

    auth, user, password = digest_auth(digest)
    if not set_acl:
        return {"cls": KazooClient, "auth_data": auth}
    return {"cls": SecuredKazooClient, "auth_data": auth, "digest_user": user, "digest_password": password}


class ZkClient:
    """A ZooKeeper session and the verbs Odradek needs.

    ``session_timeout_s`` is requested from the servers, which clamp it to [2, 20] x tickTime.
    ``op_deadline_s`` bounds each verb's retries (default: the session timeout).
    """

    def __init__(self, connect: str, *, session_timeout_s: float = 6.0, connect_timeout_s: float = 15.0,
                 op_deadline_s: float | None = None, digest: str | None = None, set_acl: bool = False):
        self.connect = connect
        self._hosts, self._chroot = split_chroot(connect)
        self._connect_timeout_s = connect_timeout_s
        self._connected = threading.Event()
        # Security (zk/acls.py): a digest identity (kazoo auth_data) and, with set_acl, secure ACLs on every
        # znode this session creates (Kafka's zookeeper.set.acl).
        self._secure_kwargs = _secure_kazoo_kwargs(digest, set_acl)
        kazoo_cls = self._secure_kwargs.pop("cls")
        self._kazoo = kazoo_cls(
            **self._secure_kwargs,
            hosts=connect,
            timeout=session_timeout_s,
            connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 1.0},
            command_retry={"max_tries": 5, "delay": 0.1, "backoff": 2, "max_delay": 1.0},
        )
        self._listeners: list[StateListener] = []
        self._listener_lock = threading.Lock()
        self._kazoo.add_listener(self._on_state)
        self._retry = ZkRetry(lambda: bool(self._kazoo.connected), self._connected,
                              op_deadline_s if op_deadline_s is not None else session_timeout_s)

    @property
    def op_deadline_s(self) -> float:
        """How long a verb retries before it raises CoordinationUnavailableError (see ``patient``)."""
        return self._retry.deadline_s

    @contextlib.contextmanager
    def patient(self, deadline_s: float) -> Iterator[None]:
        """Every verb called meanwhile, from any thread, retries for at least ``deadline_s``.

        Why: a broker that starts while its ZooKeeper is slow (a loaded machine, a node restarting) should wait
        for it as Kafka's does (each request waits up to ``zookeeper.connection.timeout.ms`` for the connection),
        not give up after the per-call deadline meant for requests answered with a retriable 503. Not nested.
        """
        saved = self._retry.deadline_s
        self._retry.deadline_s = max(saved, deadline_s)
        try:
            yield
        finally:
            self._retry.deadline_s = saved

    # ---------------------------------------------------------------------------------------- lifecycle

    def start(self) -> None:
        if self._chroot:
            self._ensure_chroot()
        try:
            self._kazoo.start(timeout=self._connect_timeout_s)
        except KazooTimeoutError as e:
            self._kazoo.stop()
            raise CoordinationUnavailableError(
                f"cannot connect to ZooKeeper at {self.connect} within {self._connect_timeout_s:.0f} s"
            ) from e

    def _ensure_chroot(self) -> None:
        bootstrap = type(self._kazoo)(hosts=self._hosts, timeout=self._connect_timeout_s, **self._secure_kwargs)
        try:
            bootstrap.start(timeout=self._connect_timeout_s)
        except KazooTimeoutError as e:
            bootstrap.stop()
            raise CoordinationUnavailableError(f"cannot connect to ZooKeeper at {self._hosts}") from e
        try:
            ZkRetry(lambda: bool(bootstrap.connected), threading.Event(), self.op_deadline_s)(
                bootstrap.ensure_path, self._chroot or "/")
        finally:
            bootstrap.stop()
            bootstrap.close()

    def close(self) -> None:
        """End the session cleanly, so this client's ephemeral nodes go at once."""
        try:
            self._kazoo.stop()
        finally:
            self._kazoo.close()

    def add_state_listener(self, listener: StateListener) -> None:
        """``listener(state)`` runs on a kazoo thread with CONNECTED, SUSPENDED or LOST; it must not block."""
        with self._listener_lock:
            self._listeners.append(listener)

    def _on_state(self, state: str) -> None:
        name = {KazooState.CONNECTED: CONNECTED, KazooState.SUSPENDED: SUSPENDED, KazooState.LOST: LOST}.get(
            state, str(state)
        )
        if name == CONNECTED:
            self._connected.set()
        else:
            self._connected.clear()
        with self._listener_lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(name)
            except Exception:  # a listener's bug must not break kazoo's connection thread
                log.exception("ZooKeeper state listener failed")

    @property
    def state(self) -> str:
        return str(self._kazoo.state)

    @property
    def session_id(self) -> int | None:
        cid = self._kazoo.client_id
        return None if cid is None else int(cid[0])

    @staticmethod
    def _arm(watch: Watch | None) -> Callable[[WatchedEvent], None] | None:
        if watch is None:
            return None

        def fire(_event: WatchedEvent) -> None:
            watch()

        return fire

    def _get_watching_existence(self, path: str, watch: Watch | None) -> tuple[bytes, Any] | None:
        """Read a node that may not exist yet; the watch fires on its creation, change or deletion."""
        if watch is not None and self.retrying(self._kazoo.exists, path, watch=self._arm(watch)) is None:
            return None
        try:
            return self.retrying(self._kazoo.get, path)
        except NoNodeError:
            return None

    # ---------------------------------------------------------------------------------- for other zk/ modules

    @property
    def kazoo(self) -> KazooClient:
        """The kazoo client, for other modules of zk/ only (groups, ...): nothing outside zk/ may touch it."""
        return self._kazoo

    def sync(self, path: str) -> None:
        """ZooKeeper's ``sync``: this session's server applies everything the quorum committed before the call, so
        the session's next reads see it, whichever server committed it. A server answers reads from its own copy,
        which may lag the leader: without it, a topic another broker just deleted is still listed here, one it just
        created is unknown, and a config it just wrote is read-modified-written here from the value before.
        ``path`` only names the request (ZooKeeper syncs the whole server)."""
        self.retrying(self._kazoo.sync, path)

    def retrying(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn`` (a function making kazoo calls) under the one retry policy, translating kazoo's
        connection errors to CoordinationUnavailableError. Every ZooKeeper call in zk/ goes through here.

        ``fn`` may run more than once: it must be safe to repeat (reads, conditional writes, creates whose
        NodeExistsError the caller interprets).
        """
        return self._retry(fn, *args, **kwargs)

    # ------------------------------------------------------------------------------------- bootstrapping

    def ensure_persistent_paths(self) -> None:
        for path in PERSISTENT_PATHS:
            self.retrying(self._kazoo.ensure_path, path)

    def get_or_create_cluster_id(self) -> str:
        """The first broker up writes /cluster/id; everyone after reads it."""
        try:
            data, _ = self.retrying(self._kazoo.get, ClusterIdZNode.path)
            return ClusterIdZNode.decode(data)
        except NoNodeError:
            pass
        candidate = new_cluster_id()
        try:
            self.retrying(self._kazoo.create, ClusterIdZNode.path, ClusterIdZNode.encode(candidate), makepath=True)
            return candidate
        except NodeExistsError:
            data, _ = self.retrying(self._kazoo.get, ClusterIdZNode.path)
            return ClusterIdZNode.decode(data)

    # -------------------------------------------------------------------------------------------- brokers

    def register_broker(self, info: BrokerInfo) -> int:
        """Create the ephemeral /brokers/ids/<id>; return the broker epoch (the znode's czxid).

        Raises BrokerIdInUseError when another live session holds the id. A node left by this same session
        (a retried create that had succeeded) counts as ours, as Kafka 2.2+ does (KAFKA-7165).
        """
        path = BrokerIdZNode.path(info.broker_id)
        try:
            self.retrying(self._kazoo.create, path, BrokerIdZNode.encode(info), ephemeral=True, makepath=True)
        except NodeExistsError:
            try:
                _, stat = self.retrying(self._kazoo.get, path)
            except NoNodeError:
                return self.register_broker(info)  # the holder's session ended between our two calls
            if stat.ephemeralOwner != self.session_id:
                holder = self.get_broker(info.broker_id)
                where = f" (registered from {holder.url})" if holder else ""
                raise BrokerIdInUseError(
                    f"broker id {info.broker_id} is already registered by live ZooKeeper session "
                    f"0x{stat.ephemeralOwner:x}{where}; pick another --id or stop that broker first",
                    broker_id=info.broker_id,
                ) from None
        _, stat = self.retrying(self._kazoo.get, path)
        return int(stat.czxid)

    def deregister_broker(self, broker_id: int) -> None:
        """Delete our own registration (only if this session owns it)."""
        path = BrokerIdZNode.path(broker_id)
        try:
            _, stat = self.retrying(self._kazoo.get, path)
            if stat.ephemeralOwner == self.session_id:
                self.retrying(self._kazoo.delete, path, version=stat.version)
        except (NoNodeError, BadVersionError):
            pass

    def get_broker_ids(self, watch: Watch | None = None) -> list[int]:
        try:
            children = self.retrying(self._kazoo.get_children, BrokerIdsZNode.path, watch=self._arm(watch))
        except NoNodeError:  # no broker has started in this chroot yet
            return []
        return sorted(int(c) for c in children if c.isdigit())

    def get_broker(self, broker_id: int, watch: Watch | None = None) -> BrokerInfo | None:
        try:
            data, stat = self.retrying(self._kazoo.get, BrokerIdZNode.path(broker_id), watch=self._arm(watch))
        except NoNodeError:
            return None
        return BrokerIdZNode.decode(broker_id, data, int(stat.czxid))

    def get_brokers(self, watch: Watch | None = None) -> dict[int, BrokerInfo]:
        brokers: dict[int, BrokerInfo] = {}
        for broker_id in self.get_broker_ids(watch):
            info = self.get_broker(broker_id)
            if info is not None:
                brokers[broker_id] = info
        return brokers

    # ----------------------------------------------------------------------------------------- controller

    def controller_election(self, identifier: str) -> ControllerElection:
        return ControllerElection(self._kazoo, ControllerElectionZNode.path, identifier)

    def schema_registry_election(self, identifier: str) -> ControllerElection:
        """The Schema Registry primary's election (SchemaRegistryElectionZNode), the same recipe as the
        controller's."""
        return ControllerElection(self._kazoo, SchemaRegistryElectionZNode.path, identifier)

    def claim_schema_registry_writer(self, new_producer_id: Callable[[], int]) -> tuple[int, int]:
        """The next (producer id, epoch) for ``_schemas`` writes (SchemaRegistryWriterZNode): the epoch one
        more than the last primary's, written conditionally on the node's version; a new producer id (from
        ``new_producer_id``) with epoch 0 the first time and when the epoch would pass Kafka's maximum, as Kafka
        does for an exhausted epoch."""

        def claim(data: bytes) -> tuple[bytes, tuple[int, int]]:
            last = SchemaRegistryWriterZNode.decode(data)
            claimed = (new_producer_id(), 0) if last is None or last[1] >= SchemaRegistryWriterZNode.MAX_EPOCH \
                else (last[0], last[1] + 1)
            return SchemaRegistryWriterZNode.encode(*claimed), claimed

        return self.update_conditionally(SchemaRegistryWriterZNode.path, claim)

    def update_conditionally(self, path: str, update: Callable[[bytes], tuple[bytes, T]]) -> T:
        """Read ``path`` (created empty when missing), write ``update(data)[0]`` conditionally on the version
        read, and answer ``update(data)[1]``; another writer first (BADVERSION) makes it read and update again.
        So no two callers ever build on the same version. A retried set whose first attempt in fact succeeded
        fails BADVERSION too and updates once more: ``update`` must claim something new each time (a block, an
        epoch), never re-apply a delta it cannot repeat."""
        k = self._kazoo

        def attempt() -> tuple[T] | None:
            try:
                data, stat = k.get(path)
            except NoNodeError:
                with contextlib.suppress(NodeExistsError):
                    k.create(path, b"", makepath=True)
                return None
            new, answer = update(data)
            try:
                k.set(path, new, version=stat.version)
            except BadVersionError:
                return None  # another writer meanwhile: read again
            return (answer,)

        while True:
            done = self.retrying(attempt)
            if done is not None:
                return done[0]

    def get_schema_registry_primary(self) -> int | None:
        """The broker id leading the Schema Registry's election (the first contender), None while nobody does."""
        contenders = self.retrying(self._kazoo.Election(SchemaRegistryElectionZNode.path).contenders)
        for c in contenders:
            try:
                return int(c)
            except ValueError:
                continue
        return None

    def get_controller(self, watch: Watch | None = None) -> int | None:
        """The active controller's broker id, arming ``watch`` for its creation, change or deletion."""
        stat = self.retrying(self._kazoo.exists, ControllerZNode.path, watch=self._arm(watch))
        if stat is None:
            return None
        try:
            data, _ = self.retrying(self._kazoo.get, ControllerZNode.path)
        except NoNodeError:
            return None
        return ControllerZNode.decode(data)

    def get_controller_epoch(self) -> tuple[int, int]:
        """(epoch, zkVersion) of /controller_epoch, creating it as 0 if absent."""
        try:
            data, stat = self.retrying(self._kazoo.get, ControllerEpochZNode.path)
            return ControllerEpochZNode.decode(data), int(stat.version)
        except NoNodeError:
            with contextlib.suppress(NodeExistsError):
                self.retrying(self._kazoo.create, ControllerEpochZNode.path, ControllerEpochZNode.encode(0))
            return self.get_controller_epoch()

    def claim_controller(self, broker_id: int) -> ControllerClaim:
        """Write /controller and bump /controller_epoch in one multi, conditional on the epoch's zkVersion.

        Called by the winner of the controller election. Raises ControllerMovedError when /controller names
        another broker or the epoch moved under us (another claim won the race).
        """
        epoch, version = self.get_controller_epoch()

        def build(tx: Any) -> None:
            tx.create(ControllerZNode.path, ControllerZNode.encode(broker_id), ephemeral=True)
            tx.set_data(ControllerEpochZNode.path, ControllerEpochZNode.encode(epoch + 1), version=version)

        results = self._multi(build)
        if not any(isinstance(r, Exception) for r in results):
            return ControllerClaim(broker_id, epoch + 1, int(results[1].version))
        # A retried multi may in fact have succeeded: accept it only if both nodes say so.
        current = self.get_controller()
        new_epoch, new_version = self.get_controller_epoch()
        if current == broker_id and new_epoch == epoch + 1:
            return ControllerClaim(broker_id, new_epoch, new_version)
        raise ControllerMovedError(
            f"broker {broker_id} could not claim the controller: /controller names {current}, "
            f"epoch is {new_epoch}"
        )

    def resign_controller(self, claim: ControllerClaim) -> None:
        """Delete /controller if our claim still holds; a deposed controller's delete is a no-op."""
        def build(tx: Any) -> None:
            tx.check(ControllerEpochZNode.path, claim.epoch_zk_version)
            tx.delete(ControllerZNode.path)

        self._multi(build)  # a failure means someone else already controls, or nobody does: nothing to undo

    def _multi(self, build: Callable[[Any], None]) -> list[Any]:
        """Commit ``build(tx)``'s operations as one multi under the retry policy (a new transaction per
        attempt: kazoo's cannot be committed twice). Failed operations come back as exception instances."""

        def attempt() -> list[Any]:
            tx = self._kazoo.transaction()
            build(tx)
            return list(tx.commit())

        return list(self.retrying(attempt))

    def _commit_fenced(self, claim: ControllerClaim, build: Callable[[Any], None]) -> list[Any]:
        """Run ``build(tx)``'s operations in one multi behind a check of the controller epoch's zkVersion."""
        def fenced(tx: Any) -> None:
            tx.check(ControllerEpochZNode.path, claim.epoch_zk_version)
            build(tx)

        results = self._multi(fenced)
        # A failed multi reports the failing op's error and RolledBackError/RuntimeInconsistency for the
        # rest, so only a BadVersion (or NoNode) on the check itself means we were deposed.
        if isinstance(results[0], (BadVersionError, NoNodeError)):
            raise ControllerMovedError(
                f"controller epoch {claim.epoch} of broker {claim.broker_id} is stale: a newer controller exists"
            )
        failures = [r for r in results[1:] if isinstance(r, Exception) and not is_rollback(r)]
        if failures:
            raise failures[0]
        return results[1:]

    # ------------------------------------------------------------------------------------------- topics

    def get_topics(self, watch: Watch | None = None, *, fresh: bool = False) -> list[str]:
        """The topics' names. ``fresh``: after a :meth:`sync`, so the list holds every creation and deletion the
        quorum committed before this call, whichever broker made it."""
        if fresh:
            self.sync(TopicsZNode.path)
        return sorted(self.retrying(self._kazoo.get_children, TopicsZNode.path, watch=self._arm(watch)))

    def get_topic_assignment(self, topic: str, watch: Watch | None = None, *,
                             fresh: bool = False) -> TopicAssignment | None:
        """The topic's assignment, None when it does not exist. ``fresh``: after a :meth:`sync`,
        so a topic another broker just created is found even where this session's server has not applied it."""
        if fresh:
            self.sync(TopicZNode.path(topic))
        got = self._get_watching_existence(TopicZNode.path(topic), watch)
        return None if got is None else TopicZNode.decode(got[0])

    def create_topic(self, topic: str, assignment: TopicAssignment, config: dict[str, str]) -> None:
        """Admin path: the config node, the assignment (which the controller watches for) and the name's claim
        (``TopicNameClaimZNode``, keyed by the name with '.' made '_'), in one multi.

        The claim makes Kafka's collision rule ZooKeeper's to enforce: of two colliding names created at once
        through different brokers, the second multi fails on the claim, and the creation is InvalidTopicError
        naming the holder ("Topic 'a_b' collides with existing topics: a.b"). A claim whose holder has no topic
        znode is stale (a topic removed by hand, or deleted by a controller from before the claims): it is taken
        over with a set conditional on the version read, so of two takers only one wins it. A missing claims
        parent (a cluster whose brokers predate it) is created on first use.

        Raises:
            TopicAlreadyExistsError: the topic exists (a retried multi that had in fact created it returns).
            InvalidTopicError: a colliding topic holds the claim.
            CoordinationUnavailableError: the claim kept changing under us (retriable).
        """
        claim = TopicNameClaimZNode.path(topic)
        stale: int | None = None  # the version of a stale claim to take over; None: create the claim

        def build(tx: Any) -> None:
            tx.create(ConfigEntityZNode.path("topics", topic), ConfigEntityZNode.encode(config))
            tx.create(TopicZNode.path(topic), TopicZNode.encode(assignment))
            if stale is None:
                tx.create(claim, TopicNameClaimZNode.encode(topic))
            else:
                tx.set_data(claim, TopicNameClaimZNode.encode(topic), version=stale)

        for _ in range(_CLAIM_ATTEMPTS):
            results = self._multi(build)
            # Only the first failing op carries its own error; the others say rolled back.
            failures = [(i, r) for i, r in enumerate(results) if isinstance(r, Exception) and not is_rollback(r)]
            if not failures:
                return
            index, error = failures[0]
            if index < 2 and isinstance(error, NodeExistsError):
                existing = self.get_topic_assignment(topic)
                if existing is not None and existing.topic_id == assignment.topic_id and assignment.topic_id:
                    return  # a retried multi that had succeeded: the topic is ours
                raise TopicAlreadyExistsError(f"topic '{topic}' already exists")
            if index < 2:
                raise error
            if isinstance(error, NoNodeError) and stale is None:
                self.retrying(self._kazoo.ensure_path, TopicNameClaimsZNode.path)
                continue
            # The claim exists (our create failed) or changed since we read it (our takeover failed): who holds it?
            stale = self._stale_claim_version(topic, claim)
        raise CoordinationUnavailableError(f"the name claim of topic '{topic}' ({claim}) kept changing; try again")

    def _stale_claim_version(self, topic: str, claim: str) -> int | None:
        """The claim's version if it is stale (its holder has no topic znode), None if it is gone; raises when
        a topic holds it: TopicAlreadyExistsError for ``topic`` itself, InvalidTopicError for a colliding one.
        Read after a :meth:`sync`: the multi that failed on the claim was judged by the leader."""
        self.sync(claim)
        try:
            data, stat = self.retrying(self._kazoo.get, claim)
        except NoNodeError:
            return None
        holder = TopicNameClaimZNode.decode(data)
        if holder is not None and self.retrying(self._kazoo.exists, TopicZNode.path(holder)) is not None:
            if holder == topic:
                raise TopicAlreadyExistsError(f"topic '{topic}' already exists")
            raise InvalidTopicError(f"Topic '{topic}' collides with existing topics: {holder}")
        log.warning("topic name claim %s names %s, which does not exist: topic %s takes it over", claim, holder,
                    topic)
        return int(stat.version)

    def set_topic_assignment(self, topic: str, assignment: TopicAssignment) -> None:
        try:
            self.retrying(self._kazoo.set, TopicZNode.path(topic), TopicZNode.encode(assignment))
        except NoNodeError:
            raise UnknownTopicError(f"topic '{topic}' does not exist") from None

    def get_topic_config(self, topic: str, watch: Watch | None = None) -> dict[str, str]:
        got = self._get_watching_existence(ConfigEntityZNode.path("topics", topic), watch)
        return {} if got is None else ConfigEntityZNode.decode(got[0])

    def set_entity_config(self, entity_type: str, name: str, config: dict[str, str]) -> None:
        """Write an entity's whole config and announce it with a sequential change notification."""
        path = ConfigEntityZNode.path(entity_type, name)
        payload = ConfigEntityZNode.encode(config)
        try:
            self.retrying(self._kazoo.set, path, payload)
        except NoNodeError:
            self.retrying(self._kazoo.create, path, payload, makepath=True)
        self.retrying(self._kazoo.create, ConfigChangesZNode.prefix, ConfigChangesZNode.encode(entity_type, name),
                      sequence=True)

    def get_config_changes(self, watch: Watch | None = None) -> list[str]:
        """The sequential change notifications (their names only: watchers re-read the configs they care about)."""
        try:
            return sorted(self.retrying(self._kazoo.get_children, ConfigChangesZNode.path, watch=self._arm(watch)))
        except NoNodeError:
            return []

    def purge_config_changes(self, max_age_ms: int = 15 * 60 * 1000, now_ms: int | None = None) -> int:
        """Delete config-change notifications older than ``max_age_ms`` (Kafka's changeExpirationMs, 15 min,
        compared with each node's ctime as Kafka's ZkNodeChangeNotificationListener does); returns how many.

        Notifications are only triggers (readers re-read the configs), so an old one carries nothing; without
        this they accumulate forever. Sequence order is creation order, so the scan stops at the first young one.
        """
        cutoff = (int(time.time() * 1000) if now_ms is None else now_ms) - max_age_ms
        deleted = 0
        for name in self.get_config_changes():
            path = f"{ConfigChangesZNode.path}/{name}"
            stat = self.retrying(self._kazoo.exists, path)
            if stat is None:
                continue
            if stat.ctime >= cutoff:
                break
            with contextlib.suppress(NoNodeError):
                self.retrying(self._kazoo.delete, path)
                deleted += 1
        return deleted

    def mark_topic_for_deletion(self, topic: str) -> None:
        """Queue ``topic`` for the controller to delete; UnknownTopicError when it does not exist (read after a
        :meth:`sync`: a topic just created through another broker exists)."""
        self.sync(TopicZNode.path(topic))
        if self.retrying(self._kazoo.exists, TopicZNode.path(topic)) is None:
            raise UnknownTopicError(f"topic '{topic}' to delete does not exist")
        with contextlib.suppress(NodeExistsError):  # already marked: deleting twice is not an error
            self.retrying(self._kazoo.create, DeleteTopicZNode.path(topic))

    def get_topics_to_delete(self, watch: Watch | None = None) -> list[str]:
        return sorted(self.retrying(self._kazoo.get_children, DeleteTopicsZNode.path, watch=self._arm(watch)))

    def delete_topic_znodes(self, claim: ControllerClaim, topic: str) -> None:
        """Controller: remove a deleted topic's assignment, states, config, deletion marker and name claim,
        fenced. The claim goes only if it names ``topic`` (a topic from before the claims has none, and of two
        colliding topics from then only one can hold it), conditional on the version read."""
        try:
            partitions = self.retrying(self._kazoo.get_children, TopicPartitionsZNode.path(topic))
        except NoNodeError:
            partitions = []
        paths: list[str] = []
        for p in sorted(int(c) for c in partitions if c.isdigit()):
            if self.retrying(self._kazoo.exists, TopicPartitionStateZNode.path(topic, p)):
                paths.append(TopicPartitionStateZNode.path(topic, p))
            paths.append(TopicPartitionZNode.path(topic, p))
        if partitions or self.retrying(self._kazoo.exists, TopicPartitionsZNode.path(topic)):
            paths.append(TopicPartitionsZNode.path(topic))
        if self.retrying(self._kazoo.exists, TopicZNode.path(topic)):
            paths.append(TopicZNode.path(topic))
        name_claim = TopicNameClaimZNode.path(topic)
        try:
            data, stat = self.retrying(self._kazoo.get, name_claim)
            claim_version = stat.version if TopicNameClaimZNode.decode(data) == topic else None
        except NoNodeError:
            claim_version = None

        def build(tx: Any) -> None:
            for path in paths:
                tx.delete(path)
            if claim_version is not None:
                tx.delete(name_claim, version=claim_version)
            if self.retrying(self._kazoo.exists, ConfigEntityZNode.path("topics", topic)):
                tx.delete(ConfigEntityZNode.path("topics", topic))
            if self.retrying(self._kazoo.exists, DeleteTopicZNode.path(topic)):
                tx.delete(DeleteTopicZNode.path(topic))

        try:
            self._commit_fenced(claim, build)
        except (NoNodeError, NotEmptyError, BadVersionError):
            log.warning("topic %s changed while it was being deleted; the controller will retry", topic)
            raise

    # ------------------------------------------------------------------------------- preferred election

    def request_preferred_election(self, partitions: list[TopicPartition]) -> bool:
        """Admin: ask the controller for a preferred leader election; False if one is already pending."""
        try:
            self.retrying(self._kazoo.create, PreferredReplicaElectionZNode.path,
                          PreferredReplicaElectionZNode.encode(partitions), makepath=True)
            return True
        except NodeExistsError:
            return False

    def get_preferred_election(self, watch: Watch | None = None) -> list[TopicPartition] | None:
        got = self._get_watching_existence(PreferredReplicaElectionZNode.path, watch)
        return None if got is None else PreferredReplicaElectionZNode.decode(got[0])

    def finish_preferred_election(self, claim: ControllerClaim) -> None:
        with contextlib.suppress(NoNodeError):
            self._commit_fenced(claim, lambda tx: tx.delete(PreferredReplicaElectionZNode.path))

    # ---------------------------------------------------------------------------------- partition state

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

    # ------------------------------------------------------------------------------------- reassignment

    def get_reassignment(self, watch: Watch | None = None, *, fresh: bool = False) -> Moves | None:
        """The requested moves (partition -> target replicas), or None when no reassignment is running.

        The watch fires on the node's creation, change or deletion. ``fresh``: after a :meth:`sync`, so this read
        and the session's next ones see what other brokers committed before it.
        """
        if fresh:
            self.sync(ReassignPartitionsZNode.path)
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


class ControllerElection:
    """kazoo's Election recipe, wrapped so that callers need not import kazoo.

    ``run(func)`` blocks until this contender wins, calls ``func()`` while it leads, and releases the lock
    when ``func`` returns. ``cancel()`` stops a pending ``run``.
    """

    def __init__(self, kazoo: KazooClient, path: str, identifier: str) -> None:
        self._election = kazoo.Election(path, identifier)

    def run(self, func: Callable[[], None]) -> None:
        self._election.run(func)

    def cancel(self) -> None:
        self._election.cancel()
