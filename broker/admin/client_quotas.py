"""Kafka's DescribeClientQuotas and AlterClientQuotas (KIP-546) as a service, over the quota entities of
broker/admin/entity_configs.py (``/config/clients/<id>``, ``/config/users/<user>`` and the nested
``/config/users/<user>/clients/<id>``), which ``odradek configs`` (kafka-configs.sh) and the HTTP API write too
and every broker's quota manager (broker/quotas.py) applies from the change notification.

An entity is Kafka's ``ClientQuotaEntity``: a map from entity type (``user``, ``client-id``) to a name, where
None is the default entity (stored as ``<default>``). Only the quota keys are shown and written: a user's node
also holds its SCRAM credentials, which never appear here. Matching (describe) is Kafka's ZooKeeper-era rule: a
component matches an exact name, the default entity, or (SPECIFIED) any name of its type; with ``strict``, an
entity with a type no component names is left out. IP quotas (``ip``) are not kept by Odradek: describing them
finds none and altering them is INVALID_REQUEST.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

from broker.admin.entity_configs import DEFAULT_ENTITY, EntityConfigAdmin
from broker.admin.topic_requests import typed
from odradek.protocol.errors import InvalidRequestError, OdradekError
from zk.configs import QUOTA_CONFIGS, USER_CLIENT, validate_alter

USER, CLIENT_ID, IP = "user", "client-id", "ip"
LONG_KEYS = frozenset({"producer_byte_rate", "consumer_byte_rate"})  # the others are doubles

# An entity as sorted (entity type, name or None for the default) pairs.
QuotaEntity = tuple[tuple[str, str | None], ...]


class MatchType(IntEnum):
    EXACT = 0
    DEFAULT = 1
    SPECIFIED = 2


@dataclass(frozen=True, slots=True)
class QuotaComponent:
    entity_type: str
    match_type: int  # a MatchType id
    match: str | None = None  # the name, for EXACT


@dataclass(frozen=True, slots=True)
class QuotaOp:
    key: str
    value: float
    remove: bool = False


def _check_components(components: Sequence[QuotaComponent]) -> dict[str, QuotaComponent]:
    by_type: dict[str, QuotaComponent] = {}
    for c in components:
        if not c.entity_type:
            raise InvalidRequestError("Unexpected empty filter component entity type")
        if c.entity_type not in (USER, CLIENT_ID, IP):
            raise InvalidRequestError(f"Custom entity type '{c.entity_type[:40]}' not supported")
        if c.entity_type in by_type:
            raise InvalidRequestError(f"Duplicate {c.entity_type} filter component entity type")
        if c.match_type not in tuple(MatchType):
            raise InvalidRequestError(f"Unknown match type {c.match_type}")
        if c.match_type == MatchType.EXACT and c.match is None:
            raise InvalidRequestError(f"an EXACT {c.entity_type} filter component needs a name")
        by_type[c.entity_type] = c
    if IP in by_type and len(by_type) > 1:
        raise InvalidRequestError("Invalid entity filter component combination, IP filter component should not be "
                                  "used with user or clientId filter component.")
    return by_type


def _matches(component: QuotaComponent | None, entity: dict[str, str | None], entity_type: str,
             strict: bool) -> bool:
    if component is None:
        return entity_type not in entity or not strict
    if entity_type not in entity:
        return False
    name = entity[entity_type]
    if component.match_type == MatchType.EXACT:
        return name == component.match
    if component.match_type == MatchType.DEFAULT:
        return name is None
    return True


def _name(stored: str) -> str | None:
    return None if stored == DEFAULT_ENTITY else stored


def _stored(name: str | None) -> str:
    return DEFAULT_ENTITY if name is None else name


def _quotas(config: dict[str, str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in config.items():
        if key in QUOTA_CONFIGS:
            try:
                out[key] = float(value)
            except ValueError:
                continue  # validated on write; a hand-edited node must not fail the whole answer
    return out


class ClientQuotaAdmin:
    def __init__(self, entities: EntityConfigAdmin) -> None:
        self._entities = entities

    async def describe(self, components: Sequence[QuotaComponent],
                       strict: bool = False) -> dict[QuotaEntity, dict[str, float]]:
        """The quotas of every entity the filter matches."""
        by_type = _check_components(components)
        if IP in by_type:
            return {}  # no IP quotas are kept

        def read() -> dict[QuotaEntity, dict[str, float]]:
            found: list[tuple[dict[str, str | None], dict[str, str]]] = []
            found += [({USER: _name(u)}, c) for u, c in self._entities.list_entities("users").items()]
            found += [({CLIENT_ID: _name(n)}, c) for n, c in self._entities.list_entities("clients").items()]
            found += [({USER: _name(u), CLIENT_ID: _name(n)}, c)
                      for (u, n), c in self._entities.list_user_clients().items()]
            out: dict[QuotaEntity, dict[str, float]] = {}
            for entity, config in found:
                quotas = _quotas(config)
                if quotas and all(_matches(by_type.get(t), entity, t, strict) for t in (USER, CLIENT_ID)):
                    out[tuple(sorted(entity.items()))] = quotas
            return out

        return await asyncio.to_thread(read)

    async def alter(self, entries: Sequence[tuple[Sequence[tuple[str, str | None]], Sequence[QuotaOp]]], *,
                    validate_only: bool = False) -> list[OdradekError | None]:
        """Apply each entry's ops (set a quota, or remove it) to its entity; one outcome per entry, in order."""
        out: list[OdradekError | None] = []
        for entity, ops in entries:
            try:
                await asyncio.to_thread(self._alter_one, entity, ops, validate_only)
                out.append(None)
            except Exception as e:
                out.append(typed(e, "altering client quotas"))
        return out

    def _alter_one(self, entity: Sequence[tuple[str, str | None]], ops: Sequence[QuotaOp],
                   validate_only: bool) -> None:
        if not entity:
            raise InvalidRequestError("Invalid empty client quota entity")
        parts: dict[str, str | None] = {}
        for entity_type, name in entity:
            if entity_type in parts:
                raise InvalidRequestError(f"Duplicate {entity_type[:40]} entity type in a client quota entity")
            if name is not None and not name:
                raise InvalidRequestError(f"Empty {entity_type[:40]} not supported")
            parts[entity_type] = name
        if IP in parts:
            raise InvalidRequestError("IP quotas are not supported by this broker")
        if set(parts) - {USER, CLIENT_ID}:
            raise InvalidRequestError(f"Unhandled client quota entity type: {sorted(set(parts) - {USER, CLIENT_ID})}")
        set_: dict[str, str] = {}
        removed: set[str] = set()
        for op in ops:
            if op.key not in QUOTA_CONFIGS:
                raise InvalidRequestError(f"Invalid configuration key {op.key[:80]}")
            if op.remove:
                set_.pop(op.key, None)
                removed.add(op.key)
                continue
            removed.discard(op.key)
            set_[op.key] = _quota_value(op)
        if USER in parts and CLIENT_ID in parts:
            user, client = _stored(parts[USER]), _stored(parts[CLIENT_ID])
            current = self._entities.describe_user_client(user, client)
            gone = [k for k in removed if k in current]
            if validate_only:
                validate_alter(USER_CLIENT, set_, gone)
            elif set_ or gone:
                self._entities.alter_user_client(user, client, set_, gone)
            return
        entity_type, name = ("users", parts[USER]) if USER in parts else ("clients", parts[CLIENT_ID])
        current = self._entities.describe(entity_type, _stored(name))
        gone = [k for k in removed if k in current]
        if validate_only:
            validate_alter(entity_type, set_, gone)
        elif set_ or gone:
            self._entities.alter(entity_type, _stored(name), set_, gone)


def _quota_value(op: QuotaOp) -> str:
    """Kafka's rule: the byte rates are longs (a value with a fraction is INVALID_REQUEST), the others doubles."""
    if op.key in LONG_KEYS:
        whole = int(op.value + 1e-6) if op.value == op.value and abs(op.value) < 2**63 else None
        if whole is None or abs(whole - op.value) > 1e-6:
            raise InvalidRequestError(f"Configuration {op.key} must be a LONG value")
        return str(whole)
    return repr(float(op.value))
