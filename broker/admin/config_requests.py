"""Kafka's DescribeConfigs, AlterConfigs and IncrementalAlterConfigs of topics and brokers, as a service.

Over the two stores the HTTP API uses too: topic overrides through ``TopicAdmin`` (``/config/topics/<t>``,
validated against the log's config rules) and broker dynamic configs through ``EntityConfigAdmin``
(``/config/brokers/<id>`` and ``<default>``, validated by zk/configs.py), so what one front door writes the other
reads at once. Rules are Kafka's ZooKeeper-era admin manager's:

* a broker resource is named by this broker's id, or ``""`` for the cluster-wide default; another broker's id is
  INVALID_REQUEST (clients send a broker's config requests to that broker, who alone knows its start-up
  settings);
* AlterConfigs replaces the resource's whole set of overrides; IncrementalAlterConfigs applies SET, DELETE,
  APPEND and SUBTRACT (the last two on list configs only) to the current set; a null value (outside DELETE)
  and a key named twice are INVALID_REQUEST; deleting a key that is not set is not an error;
* ``validate_only`` runs every check and writes nothing.

Topic config values longer than ``max.config.value.bytes`` are POLICY_VIOLATION, as over HTTP. Every method
raises typed errors (odradek.protocol.errors); ZooKeeper work runs in a thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum

from broker.admin.config_entries import LIST_CONFIGS, ConfigEntry, broker_entries, list_default, topic_entries
from broker.admin.entity_configs import DEFAULT_ENTITY, EntityConfigAdmin
from broker.admin.topics import TopicAdmin, validate_topic_name
from broker.log.config import TOPIC_CONFIG_NAMES
from odradek.protocol.errors import InvalidConfigError, InvalidRequestError, PolicyViolationError
from zk.configs import BROKER_CONFIGS, validate_alter


class ResourceType(IntEnum):
    """Kafka's ConfigResource.Type ids."""

    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8


class OpType(IntEnum):
    """Kafka's AlterConfigOp.OpType ids."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True, slots=True)
class ConfigResource:
    type: int  # a ResourceType id (others are refused)
    name: str


@dataclass(frozen=True, slots=True)
class AlterOp:
    name: str
    op: int  # an OpType id
    value: str | None


class ConfigRequests:
    def __init__(self, topics: TopicAdmin, entities: EntityConfigAdmin, broker_id: int,
                 max_value_bytes: int) -> None:
        self._topics = topics
        self._entities = entities
        self._broker_id = broker_id
        self._max_value_bytes = max_value_bytes

    # ------------------------------------------------------------------------------------------- describe

    async def describe(self, resource: ConfigResource, keys: Iterable[str] | None = None) -> list[ConfigEntry]:
        """The resource's configs (``keys``: only those names)."""
        if resource.type == ResourceType.TOPIC:
            validate_topic_name(resource.name)
            overrides, effective = await asyncio.to_thread(self._topics.describe_configs, resource.name)
            return topic_entries(overrides, effective, keys=keys)
        entity = self._broker_entity(resource)
        if entity == DEFAULT_ENTITY:
            default = await asyncio.to_thread(self._entities.describe, "brokers", DEFAULT_ENTITY)
            return broker_entries({}, {}, default, BROKER_CONFIGS, per_broker=False, keys=keys)

        def read() -> tuple[dict[str, str], dict[str, str]]:
            return (self._entities.describe("brokers", entity), self._entities.describe("brokers", DEFAULT_ENTITY))

        dynamic, default = await asyncio.to_thread(read)
        static = self._entities.static_configs(entity) or {}
        return broker_entries(static, dynamic, default, BROKER_CONFIGS, per_broker=True, keys=keys)

    # ---------------------------------------------------------------------------------------------- alter

    async def alter(self, resource: ConfigResource, configs: Mapping[str, str | None], *,
                    validate_only: bool = False) -> None:
        """Kafka's AlterConfigs: ``configs`` becomes the resource's whole set of overrides."""
        nulls = sorted(k for k, v in configs.items() if v is None)
        if nulls:
            raise InvalidRequestError(f"Null value not supported for : {','.join(nulls)}")
        wanted = {k: v for k, v in configs.items() if v is not None}
        if resource.type == ResourceType.TOPIC:
            validate_topic_name(resource.name)
            self._check_sizes(wanted)
            await asyncio.to_thread(self._topics.replace_configs, resource.name, wanted, validate_only=validate_only)
            return
        entity = self._broker_entity(resource)

        def replace() -> None:
            current = self._entities.describe("brokers", entity)
            gone = [k for k in current if k not in wanted]
            if validate_only:
                validate_alter("brokers", wanted, gone)
            else:
                self._entities.alter("brokers", entity, wanted, gone)

        await asyncio.to_thread(replace)

    async def incremental_alter(self, resource: ConfigResource, ops: Sequence[AlterOp], *,
                                validate_only: bool = False) -> None:
        """Kafka's IncrementalAlterConfigs: ``ops`` applied to the resource's current overrides."""
        names = [op.name for op in ops]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise InvalidRequestError(f"Error due to duplicate config keys : {','.join(twice)}")
        nulls = [f"{_op_name(op.op)}:{op.name}" for op in ops if op.value is None and op.op != OpType.DELETE]
        if nulls:
            raise InvalidRequestError(f"Null value not supported for : {','.join(nulls)}")
        for op in ops:
            if op.op not in tuple(OpType):
                raise InvalidRequestError(f"Unknown config operation {op.op} for {op.name}")
        if resource.type == ResourceType.TOPIC:
            validate_topic_name(resource.name)
            self._check_sizes({op.name: op.value for op in ops if op.value is not None})

            def apply_topic() -> None:
                overrides, _ = self._topics.describe_configs(resource.name)
                updated = _apply(overrides, ops, TOPIC_CONFIG_NAMES)
                self._topics.replace_configs(resource.name, updated, validate_only=validate_only)

            await asyncio.to_thread(apply_topic)
            return
        entity = self._broker_entity(resource)

        def apply_broker() -> None:
            current = self._entities.describe("brokers", entity)
            updated = _apply(current, ops, BROKER_CONFIGS)
            set_ = {k: v for k, v in updated.items() if current.get(k) != v}
            gone = [k for k in current if k not in updated]
            if validate_only:
                validate_alter("brokers", set_, gone)
            elif set_ or gone:
                self._entities.alter("brokers", entity, set_, gone)

        await asyncio.to_thread(apply_broker)

    # ------------------------------------------------------------------------------------------ internals

    def _broker_entity(self, resource: ConfigResource) -> str:
        """The broker config entity a resource names: this broker's id, or ``<default>`` for ``""``."""
        if resource.type != ResourceType.BROKER:
            raise InvalidRequestError(f"Unsupported resource type: {resource.type} (topics ({ResourceType.TOPIC}) "
                                      f"and brokers ({ResourceType.BROKER}) only)")
        if not resource.name:
            return DEFAULT_ENTITY
        try:
            broker_id = int(resource.name)
        except ValueError:
            raise InvalidRequestError(f"Broker id must be an integer, but it is: {resource.name[:40]}") from None
        if broker_id != self._broker_id:
            raise InvalidRequestError(f"Unexpected broker id, expected {self._broker_id} or empty string, but "
                                      f"received {resource.name[:40]}")
        return str(broker_id)

    def _check_sizes(self, values: Mapping[str, str]) -> None:
        limit = self._max_value_bytes
        for key, value in values.items():
            if len(value.encode()) > limit:
                raise PolicyViolationError(f"the value of config {key[:80]} is {len(value.encode())} bytes; the "
                                           f"limit is {limit} (max.config.value.bytes)")


def _op_name(op: int) -> str:
    try:
        return OpType(op).name
    except ValueError:
        return str(op)


def _apply(current: Mapping[str, str], ops: Sequence[AlterOp], known: Container[str]) -> dict[str, str]:
    """Kafka's ``prepareIncrementalConfigs``: the overrides after ``ops``, in order. APPEND and SUBTRACT take
    list configs only (INVALID_CONFIG for a name not in ``known``, INVALID_REQUEST for a known non-list one)."""
    out = dict(current)
    for op in ops:
        if op.op == OpType.SET:
            out[op.name] = str(op.value)
        elif op.op == OpType.DELETE:
            out.pop(op.name, None)
        else:
            verb = "append" if op.op == OpType.APPEND else "subtract"
            if op.name not in known:
                raise InvalidConfigError(f"Unknown config name: {op.name[:80]}")
            if op.name not in LIST_CONFIGS:
                raise InvalidRequestError(f"Config value {verb} is not allowed for config key: {op.name[:80]}")
            old = out.get(op.name, list_default(op.name))
            items = [v for v in old.split(",") if v]
            given = [v for v in str(op.value).split(",") if v]
            if op.op == OpType.APPEND:
                items += [v for v in given if v not in items]
            else:
                items = [v for v in items if v not in given]
            out[op.name] = ",".join(items)
    return out

