"""Topic creation, growth, deletion and configs: validation here, writes through the ZooKeeper facade.

As in Kafka, the broker that takes an admin request validates it and writes ZooKeeper (config node first,
then the assignment); the controller reacts to the new znodes and elects leaders. Methods block on
ZooKeeper; HTTP handlers call them with ``asyncio.to_thread``.
"""

from __future__ import annotations

import re
import uuid
from base64 import urlsafe_b64encode
from collections.abc import Iterable, Mapping

from broker.admin.assignment import assign_replicas
from broker.log.config import LogConfig
from odradek.protocol.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    PolicyViolationError,
    ReassignmentInProgressError,
    TopicAlreadyExistsError,
    UnknownTopicError,
)
from odradek.protocol.model import TopicAssignment
from zk.client import ZkClient
from zk.znodes import TopicNameClaimZNode

MAX_TOPIC_NAME = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
# Topic-level settings Odradek adds to Kafka's log configs (replication and leadership).
BOOLEAN_CONFIGS = ("unclean.leader.election.enable",)


def validate_topic_name(name: str) -> None:
    """Kafka's rule, which also keeps every name inside the data directory (no '/', no '..')."""
    if not name:
        raise InvalidTopicError("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicError("Topic name cannot be \".\" or \"..\"")
    if len(name) > MAX_TOPIC_NAME:
        raise InvalidTopicError(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME} characters, topic name: {name[:40]}..."
        )
    if not _LEGAL.match(name):
        raise InvalidTopicError(
            f"Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' "
            "and '-'"
        )


def colliding_topics(name: str, existing: Iterable[str]) -> list[str]:
    """Kafka's ``Topic.hasCollision``: the names in ``existing``, other than ``name`` itself, that differ from it
    only in '.' against '_' (their metric names would be the same). The rule is the claim znode's key."""
    key = TopicNameClaimZNode.key(name)
    return [t for t in existing if t != name and TopicNameClaimZNode.key(t) == key]


def validate_configs(configs: dict[str, str]) -> dict[str, str]:
    """Check names and values now, so a bad config fails the request rather than a broker later."""
    clean = {str(k): str(v) for k, v in configs.items()}
    for name in BOOLEAN_CONFIGS:
        if name in clean and clean[name].lower() not in ("true", "false"):
            raise InvalidConfigError(f"Invalid value {clean[name]} for configuration {name}: expected true or false")
        if name in clean:
            clean[name] = clean[name].lower()
    LogConfig.from_topic_config(clean)
    return clean


def effective_topic_config(overrides: Mapping[str, str]) -> dict[str, str]:
    """Every topic config with its value: the overrides over the log's defaults and Odradek's replication ones."""
    effective = LogConfig.from_topic_config(overrides).to_topic_config()
    effective.setdefault("min.insync.replicas", "1")
    effective.setdefault("unclean.leader.election.enable", "false")
    effective.update(overrides)
    return effective


def check_partition_limits(topics: Mapping[str, TopicAssignment], name: str, total: int, *, per_topic: int,
                           cluster: int) -> None:
    """``max.partitions.per.topic`` and ``max.partitions`` (KIP-578) for ``name`` at ``total`` partitions, against
    the topics known now (``topics``: the metadata cache's); checked before anything is written.

    Raises:
        PolicyViolationError: naming the limit and its broker config.
    """
    if total > per_topic:
        raise PolicyViolationError(f"{total} partitions for topic '{name}'; the limit is {per_topic} "
                                   "(max.partitions.per.topic)")
    others = sum(len(a.partitions) for t, a in topics.items() if t != name)
    if others + total > cluster:
        raise PolicyViolationError(f"the cluster would have {others + total} partitions; the limit is {cluster} "
                                   "(max.partitions)")


def new_topic_id() -> str:
    return urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class TopicAdmin:
    """Topic creation, growth, deletion and configs, written to ZooKeeper by whichever broker is asked.

    Every operation reads after a ZooKeeper ``sync`` (``fresh``): a broker's session reads its own server's copy,
    which may not have applied what another broker just committed, and an admin request often follows one sent to
    another broker (create there, alter here). Without it a topic just created would be unknown here, one just
    deleted would still collide, and a config change read-modified-written here would drop one made there."""

    def __init__(self, zk: ZkClient) -> None:
        self._zk = zk

    def create_topic(
        self,
        name: str,
        partitions: int | None = None,
        replication_factor: int | None = None,
        configs: dict[str, str] | None = None,
        replica_assignment: dict[int, list[int]] | None = None,
        *,
        validate_only: bool = False,
    ) -> TopicAssignment:
        """Validate, then (unless ``validate_only``) write the config and the assignment; the assignment (with
        the new topic id) either way, so a dry run answers what it would have created.

        Names that collide ('.' against '_', ``colliding_topics``) are refused with INVALID_TOPIC_EXCEPTION
        twice over. First against the topics read here, as Kafka's ``AdminZkClient.validateTopicCreate`` does
        (it reads ``getAllTopicsInCluster``, then writes ``/config/topics/<t>`` and ``/brokers/topics/<t>``); this
        check alone is a check-then-act race, which Kafka's ZooKeeper mode has too: two creations sent to two
        brokers at once both pass it and both create. Where Odradek differs: the write itself
        (``ZkClient.create_topic``) also creates a claim znode keyed by the name with '.' made '_', in the same
        multi as the topic's znodes (the controller deletes it in the same multi as them), so ZooKeeper lets
        exactly one of two racing colliders through and the other gets the collision error naming the winner.
        Kafka's KRaft closes the race another way (one controller thread checks ``topicsWithCollisionChars``,
        KAFKA-13743); Odradek keeps classic Kafka's design, where any broker writes a new topic to ZooKeeper,
        so ZooKeeper is the only place both creations meet. The read check stays for topics created before the
        claims (they have no claim znode): such a topic exists before any new collider is attempted, so the read
        sees it. Only a collider created at the same moment by a broker running older code escapes both checks.
        """
        validate_topic_name(name)
        clean = validate_configs(configs or {})
        existing = self._zk.get_topics(fresh=True)  # a deletion through another broker has been seen
        if name in existing:
            raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        collides = colliding_topics(name, existing)
        if collides:
            raise InvalidTopicError(f"Topic '{name}' collides with existing topics: {', '.join(collides)}")
        brokers = self._zk.get_brokers()
        if replica_assignment is not None:
            if partitions is not None or replication_factor is not None:
                raise InvalidRequestError("give either partitions and replication factor, or a replica assignment")
            assignment = self._check_assignment(replica_assignment, set(brokers))
        else:
            if not brokers:
                raise InvalidReplicationFactorError("no broker is registered")
            assignment = assign_replicas(
                sorted(brokers), partitions if partitions is not None else 1,
                replication_factor if replication_factor is not None else 1,
                racks={b: info.rack for b, info in brokers.items()},
            )  # fmt: skip
        min_isr = int(clean.get("min.insync.replicas", "1"))
        rf = len(next(iter(assignment.values())))
        if min_isr > rf:
            raise InvalidConfigError(f"min.insync.replicas ({min_isr}) is larger than the replication factor ({rf})")
        topic = TopicAssignment(assignment, topic_id=new_topic_id())
        if not validate_only:
            self._zk.create_topic(name, topic, clean)
        return topic

    @staticmethod
    def _check_assignment(assignment: dict[int, list[int]], live: set[int]) -> dict[int, list[int]]:
        """Kafka's rules for a topic's replica assignment (INVALID_REPLICA_ASSIGNMENT otherwise)."""
        if not assignment:
            raise InvalidReplicaAssignmentError("the replica assignment is empty")
        if sorted(assignment) != list(range(len(assignment))):
            raise InvalidReplicaAssignmentError("partitions should be a consecutive 0-based integer sequence")
        sizes = {len(r) for r in assignment.values()}
        if len(sizes) != 1 or 0 in sizes:
            raise InvalidReplicaAssignmentError("All partitions should have the same, non-zero number of replicas")
        for p, replicas in assignment.items():
            TopicAdmin._check_replicas(p, replicas, live)
        return {p: list(r) for p, r in assignment.items()}

    @staticmethod
    def _check_replicas(partition: int, replicas: list[int], live: set[int]) -> None:
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(f"Duplicate brokers not allowed in replica assignment: partition "
                                                f"{partition} has {replicas}")
        unknown = [b for b in replicas if b not in live]
        if unknown:
            raise InvalidReplicaAssignmentError(f"Unknown broker(s) in replica assignment of partition {partition}: "
                                                f"{unknown}")

    def add_partitions(self, name: str, total: int, assignment: list[list[int]] | None = None, *,
                       validate_only: bool = False) -> TopicAssignment:
        """Grow ``name`` to ``total`` partitions; ``assignment``: the new partitions' replicas, in order (Kafka's
        CreatePartitions), else placed as at creation. Refused while the topic is being reassigned."""
        current = self._zk.get_topic_assignment(name, fresh=True)
        if current is None:
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        if name in self._zk.get_topics_to_delete():
            raise InvalidTopicError(f"The topic '{name}' is queued for deletion.")
        if any(current.adding_replicas.values()) or any(current.removing_replicas.values()):
            raise ReassignmentInProgressError(f"A partition reassignment is in progress for the topic '{name}'.")
        have = len(current.partitions)
        if total < have:
            raise InvalidPartitionsError(f"Topic currently has {have} partitions, which is higher than the requested "
                                         f"{total}.")
        if total == have:
            raise InvalidPartitionsError(f"Topic already has {have} partitions.")
        rf = len(current.partitions[0])
        brokers = self._zk.get_brokers()
        if assignment is not None:
            if len(assignment) != total - have:
                raise InvalidReplicaAssignmentError(f"Increasing the number of partitions by {total - have} but "
                                                    f"{len(assignment)} assignments provided.")
            extra: dict[int, list[int]] = {}
            for i, replicas in enumerate(assignment):
                self._check_replicas(have + i, replicas, set(brokers))
                if len(replicas) != rf:
                    raise InvalidReplicaAssignmentError(f"Inconsistent replication factor between partitions, "
                                                        f"partition 0 has {rf} while partition {have + i} has "
                                                        f"replication factor {len(replicas)}")
                extra[have + i] = list(replicas)
        else:
            extra = assign_replicas(sorted(brokers), total - have, rf, start_partition=have,
                                    racks={b: info.rack for b, info in brokers.items()})
        grown = TopicAssignment({**current.partitions, **extra}, current.topic_id,
                                current.adding_replicas, current.removing_replicas)
        if not validate_only:
            self._zk.set_topic_assignment(name, grown)
        return grown

    def delete_topic(self, name: str) -> None:
        validate_topic_name(name)
        self._zk.mark_topic_for_deletion(name)

    def describe_configs(self, name: str) -> tuple[dict[str, str], dict[str, str]]:
        """(topic overrides, effective values with defaults)."""
        if self._zk.get_topic_assignment(name, fresh=True) is None:
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        overrides = self._zk.get_topic_config(name)
        return overrides, effective_topic_config(overrides)

    def alter_configs(self, name: str, set_: dict[str, str], delete: list[str], *,
                      validate_only: bool = False) -> dict[str, str]:
        """Merge ``set_`` into the topic's overrides and drop ``delete``; the validated result, written unless
        ``validate_only``."""
        if self._zk.get_topic_assignment(name, fresh=True) is None:
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        config = self._zk.get_topic_config(name)
        config.update(set_)
        for key in delete:
            config.pop(key, None)
        clean = validate_configs(config)
        if not validate_only:
            self._zk.set_entity_config("topics", name, clean)
        return clean

    def replace_configs(self, name: str, configs: dict[str, str], *, validate_only: bool = False) -> dict[str, str]:
        """Kafka's (non-incremental) AlterConfigs: ``configs`` becomes the topic's whole set of overrides."""
        if self._zk.get_topic_assignment(name, fresh=True) is None:
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        clean = validate_configs(configs)
        if not validate_only:
            self._zk.set_entity_config("topics", name, clean)
        return clean
