"""Kafka's DescribeAcls, CreateAcls and DeleteAcls as a service, over the ACL znodes in Kafka's layout.

The store is zk/acls.py, the one the brokers' authorizer loads and ``odradek acls`` (kafka-acls.sh) writes: a
change is a conditional rewrite of the resource's node plus a change notification in one multi, so every
broker's authorizer reloads it within a ZooKeeper round trip, and ACLs written here are listed by the tool and
the other way round. Names are Kafka's as the authorizer spells them (``Topic``, ``LITERAL``, ``Read``,
``Allow``); the front door maps Kafka's wire codes to them.

Filters match as Kafka's ``AclBindingFilter``: a None field matches anything; the pattern filter ANY matches
either pattern type with the exact name, MATCH matches every pattern that applies to the named resource (its
literal name, the ``*`` wildcard, and every prefix of it), LITERAL and PREFIXED only that type.

Methods run on the loop and send ZooKeeper work to a thread; they raise typed errors, or (create, delete) return
one outcome per item, in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from broker.admin.topic_requests import typed
from broker.security.authorizer import CLUSTER_NAME, OPERATIONS
from odradek.protocol.errors import InvalidRequestError, OdradekError
from zk.acls import RESOURCE_TYPES, AclEntry, AclStore
from zk.client import ZkClient

PATTERNS = ("LITERAL", "PREFIXED")
PATTERN_FILTERS = ("ANY", "MATCH", *PATTERNS)
PERMISSIONS = ("Allow", "Deny")
WILDCARD = "*"


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    resource_type: str  # Topic | Group | Cluster | TransactionalId
    name: str
    pattern: str  # LITERAL | PREFIXED
    principal: str  # TYPE:NAME, e.g. User:alice
    host: str
    operation: str  # one of broker.security.authorizer.OPERATIONS
    permission: str  # Allow | Deny


@dataclass(frozen=True, slots=True)
class AclFilter:
    """None matches any value of that field; ``pattern`` is one of ANY, MATCH, LITERAL, PREFIXED."""

    resource_type: str | None = None
    name: str | None = None
    pattern: str = "ANY"
    principal: str | None = None
    host: str | None = None
    operation: str | None = None
    permission: str | None = None

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type is not None and b.resource_type != self.resource_type:
            return False
        if not self._matches_pattern(b):
            return False
        return ((self.principal is None or b.principal == self.principal)
                and (self.host is None or b.host == self.host)
                and (self.operation is None or b.operation == self.operation)
                and (self.permission is None or b.permission == self.permission))

    def _matches_pattern(self, b: AclBinding) -> bool:
        if self.pattern in PATTERNS and b.pattern != self.pattern:
            return False
        if self.name is None:
            return True
        if self.pattern != "MATCH":
            return b.name == self.name
        if b.pattern == "PREFIXED":
            return self.name.startswith(b.name)
        return b.name in (self.name, WILDCARD)


def check_binding(b: AclBinding) -> None:
    """Kafka's checks of an ACL to create (INVALID_REQUEST otherwise)."""
    if b.resource_type not in RESOURCE_TYPES:
        raise InvalidRequestError(f"resource type must be one of {', '.join(RESOURCE_TYPES)}, not "
                                  f"{b.resource_type[:40]}")
    if b.pattern not in PATTERNS:
        raise InvalidRequestError(f"an ACL's pattern type is LITERAL or PREFIXED, not {b.pattern[:40]}")
    if not b.name:
        raise InvalidRequestError("Resource name should not be empty")
    if "/" in b.name:
        raise InvalidRequestError(f"resource name {b.name[:80]!r} contains '/', which the ACL store cannot hold")
    if b.resource_type == "Cluster" and b.name != CLUSTER_NAME:
        raise InvalidRequestError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    kind, sep, who = b.principal.partition(":")
    if not sep or not kind or not who:
        raise InvalidRequestError(f"principal {b.principal[:80]!r} must be TYPE:NAME, e.g. User:alice")
    if not b.host:
        raise InvalidRequestError("an ACL's host must not be empty (* for any host)")
    if b.operation not in OPERATIONS:
        raise InvalidRequestError(f"operation must be one of {', '.join(OPERATIONS)}, not {b.operation[:40]}")
    if b.permission not in PERMISSIONS:
        raise InvalidRequestError(f"permission must be Allow or Deny, not {b.permission[:40]}")


class AclAdmin:
    def __init__(self, zk: ZkClient) -> None:
        self._store = AclStore(zk)

    async def describe(self, f: AclFilter) -> list[AclBinding]:
        """Every stored ACL the filter matches, sorted."""
        return sorted(b for b in await asyncio.to_thread(self._all) if f.matches(b))

    async def create(self, bindings: Sequence[AclBinding]) -> list[OdradekError | None]:
        """Add each ACL (adding one that exists is not an error); one outcome per binding."""
        out: list[OdradekError | None] = []
        for b in bindings:
            try:
                check_binding(b)
                await asyncio.to_thread(self._store.change, b.resource_type, b.name, b.pattern,
                                        add=[_entry(b)])
                out.append(None)
            except Exception as e:
                out.append(typed(e, f"creating an ACL on {b.resource_type}:{b.name}"))
        return out

    async def delete(self, filters: Sequence[AclFilter]) -> list[list[AclBinding] | OdradekError]:
        """Remove every ACL each filter matches; per filter, the ACLs it removed (sorted) or its error."""
        try:
            stored = await asyncio.to_thread(self._all)
        except Exception as e:
            error = typed(e, "reading the ACLs to delete")
            return [error for _ in filters]
        matched = [sorted(b for b in stored if f.matches(b)) for f in filters]
        doomed: dict[tuple[str, str, str], set[AclEntry]] = {}
        for bindings in matched:
            for b in bindings:
                doomed.setdefault((b.resource_type, b.name, b.pattern), set()).add(_entry(b))
        failed: dict[tuple[str, str, str], OdradekError] = {}
        for (rtype, name, pattern), entries in sorted(doomed.items()):
            try:
                await asyncio.to_thread(self._store.change, rtype, name, pattern, remove=entries)
            except Exception as e:
                failed[(rtype, name, pattern)] = typed(e, f"deleting ACLs on {rtype}:{name}")
        out: list[list[AclBinding] | OdradekError] = []
        for bindings in matched:
            errors = [failed[k] for b in bindings if (k := (b.resource_type, b.name, b.pattern)) in failed]
            out.append(errors[0] if errors else bindings)
        return out

    def _all(self) -> list[AclBinding]:
        return [AclBinding(rtype, name, pattern, e.principal, e.host, e.operation, e.permission)
                for (rtype, name, pattern), entries in self._store.list_all(fresh=True).items() for e in entries]


def _entry(b: AclBinding) -> AclEntry:
    return AclEntry(b.principal, b.permission, b.operation, b.host)
