"""Topic creation, growth, deletion and configs: validation here, writes through the ZooKeeper facade.

As in Kafka, the broker that takes an admin request validates it and writes ZooKeeper (config node first,
then the assignment); the controller reacts to the new znodes and elects leaders. Methods block on
ZooKeeper; HTTP handlers call them with ``asyncio.to_thread``.
"""

from __future__ import annotations

import re
import uuid
from base64 import urlsafe_b64encode

from broker.admin.assignment import assign_replicas
from broker.log.config import LogConfig
from odradek.protocol.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicError,
)
from odradek.protocol.model import TopicAssignment
from zk.client import ZkClient

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


def new_topic_id() -> str:
    return urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class TopicAdmin:
    def __init__(self, zk: ZkClient) -> None:
        self._zk = zk

    def create_topic(
        self,
        name: str,
        partitions: int | None = None,
        replication_factor: int | None = None,
        configs: dict[str, str] | None = None,
        replica_assignment: dict[int, list[int]] | None = None,
    ) -> TopicAssignment:
        validate_topic_name(name)
        clean = validate_configs(configs or {})
        existing = self._zk.get_topics()
        if name in existing:
            raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        collides = [t for t in existing if t.replace(".", "_") == name.replace(".", "_")]
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
        self._zk.create_topic(name, topic, clean)
        return topic

    @staticmethod
    def _check_assignment(assignment: dict[int, list[int]], live: set[int]) -> dict[int, list[int]]:
        if not assignment:
            raise InvalidPartitionsError("the replica assignment is empty")
        if sorted(assignment) != list(range(len(assignment))):
            raise InvalidPartitionsError("partitions in a replica assignment must be 0..N-1")
        sizes = {len(r) for r in assignment.values()}
        if len(sizes) != 1 or 0 in sizes:
            raise InvalidReplicationFactorError("every partition must have the same, non-zero number of replicas")
        for p, replicas in assignment.items():
            if len(set(replicas)) != len(replicas):
                raise InvalidRequestError(f"partition {p} lists a broker twice: {replicas}")
            unknown = [b for b in replicas if b not in live]
            if unknown:
                raise InvalidRequestError(f"partition {p} is assigned to unknown brokers {unknown}")
        return {p: list(r) for p, r in assignment.items()}

    def add_partitions(self, name: str, total: int) -> TopicAssignment:
        current = self._zk.get_topic_assignment(name)
        if current is None:
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        have = len(current.partitions)
        if total < have:
            raise InvalidPartitionsError(f"Topic currently has {have} partitions, which is higher than the requested "
                                         f"{total}.")
        if total == have:
            raise InvalidPartitionsError(f"Topic already has {have} partitions.")
        rf = len(current.partitions[0])
        brokers = self._zk.get_brokers()
        extra = assign_replicas(sorted(brokers), total - have, rf, start_partition=have,
                                racks={b: info.rack for b, info in brokers.items()})
        grown = TopicAssignment({**current.partitions, **extra}, current.topic_id,
                                current.adding_replicas, current.removing_replicas)
        self._zk.set_topic_assignment(name, grown)
        return grown

    def delete_topic(self, name: str) -> None:
        validate_topic_name(name)
        self._zk.mark_topic_for_deletion(name)

    def describe_configs(self, name: str) -> tuple[dict[str, str], dict[str, str]]:
        """(topic overrides, effective values with defaults)."""
        if self._zk.get_topic_assignment(name) is None:
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        overrides = self._zk.get_topic_config(name)
        effective = LogConfig.from_topic_config(overrides).to_topic_config()
        effective.setdefault("min.insync.replicas", "1")
        effective.setdefault("unclean.leader.election.enable", "false")
        effective.update(overrides)
        return overrides, effective

    def alter_configs(self, name: str, set_: dict[str, str], delete: list[str]) -> dict[str, str]:
        if self._zk.get_topic_assignment(name) is None:
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        config = self._zk.get_topic_config(name)
        config.update(set_)
        for key in delete:
            config.pop(key, None)
        clean = validate_configs(config)
        self._zk.set_entity_config("topics", name, clean)
        return clean
