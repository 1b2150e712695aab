"""The ACL authorizer: Kafka's AclAuthorizer rules over an in-memory copy of the ACLs in ZooKeeper.

Why a cache: every request is authorized, and a ZooKeeper read per request would put the ensemble on the data
path. The broker loads every ACL at startup and re-loads when a notification appears under
``/kafka-acl-changes`` or ``/kafka-acl-extended-changes`` (a one-shot watch, re-armed by each read), so a change
applies within a ZooKeeper round trip, well inside a second.

Rules (kafka-classic.md 8.3): super users pass; a resource matches ACLs on its literal name, on ``*``, and on
every prefixed pattern it starts with; with no matching ACL the answer is ``allow_everyone_if_no_acl_found``;
a matching Deny (same operation or All) wins over any Allow; Describe is implied by Read, Write, Delete and
Alter, and DescribeConfigs by AlterConfigs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

log = logging.getLogger(__name__)

PURGE_EVERY_S = 60.0  # old ACL change notifications are purged at most this often (by every broker, harmlessly)

OPERATIONS = ("Read", "Write", "Create", "Delete", "Alter", "Describe", "DescribeConfigs", "AlterConfigs",
              "ClusterAction", "IdempotentWrite", "All")
CLUSTER_NAME = "kafka-cluster"
ANONYMOUS = "User:ANONYMOUS"
_IMPLIED = {
    "Describe": {"Describe", "Read", "Write", "Delete", "Alter"},
    "DescribeConfigs": {"DescribeConfigs", "AlterConfigs"},
}


@dataclass(frozen=True, slots=True)
class Acl:
    principal: str
    permission: str  # Allow | Deny
    operation: str
    host: str = "*"


# {(resource type, pattern type): {name: [Acl, ...]}}
AclSnapshot = dict[tuple[str, str], dict[str, list[Acl]]]


def normalize_operation(op: str) -> str:
    """``READ``, ``read``, ``describe_configs`` -> Kafka's camel case names."""
    key = op.replace("_", "").replace("-", "").lower()
    for known in OPERATIONS:
        if known.lower() == key:
            return known
    raise ValueError(f"unknown operation {op!r} (one of {', '.join(OPERATIONS)})")


class Authorizer:
    def __init__(self, super_users: Iterable[str], allow_if_no_acl: bool) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._acls: AclSnapshot = {}
        self.version = 0  # bumped on each reload (tests and /metrics can tell a change applied)

    def replace(self, snapshot: AclSnapshot) -> None:
        self._acls = snapshot
        self.version += 1

    def matching(self, resource_type: str, name: str) -> list[Acl]:
        literal = self._acls.get((resource_type, "LITERAL"), {})
        out = list(literal.get(name, ())) + (list(literal.get("*", ())) if name != "*" else [])
        for prefix, acls in self._acls.get((resource_type, "PREFIXED"), {}).items():
            if name.startswith(prefix):
                out += acls
        return out

    def authorize(self, principal: str, host: str, operation: str, resource_type: str, name: str) -> bool:
        if principal in self.super_users:
            return True
        acls = self.matching(resource_type, name)
        if not acls:
            return self.allow_if_no_acl

        def applies(acl: Acl) -> bool:
            return acl.principal in (principal, "User:*") and acl.host in (host, "*")

        if any(a.permission == "Deny" and a.operation in (operation, "All") and applies(a) for a in acls):
            return False
        allowed_by = _IMPLIED.get(operation, {operation}) | {"All"}
        return any(a.permission == "Allow" and a.operation in allowed_by and applies(a) for a in acls)


class AclCache:
    """Keeps an ``Authorizer`` in step with ZooKeeper: ``load`` reads every ACL (blocking, in a thread) and arms
    the change watches; ``run`` re-loads whenever a watch fires."""

    def __init__(self, authorizer: Authorizer, store: object) -> None:
        self.authorizer = authorizer
        self._store = store
        self._changed = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._purged = float("-inf")

    def _signal(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._changed.set)

    def _read(self) -> AclSnapshot:
        store = self._store
        store.changes(watch=self._signal)  # type: ignore[attr-defined]  # arm before reading: no lost change
        snapshot: AclSnapshot = {}
        for (rtype, name, pattern), entries in store.list_all().items():  # type: ignore[attr-defined]
            snapshot.setdefault((rtype, pattern), {})[name] = [
                Acl(e.principal, e.permission, e.operation, e.host) for e in entries]
        return snapshot

    async def load(self) -> None:
        self._loop = asyncio.get_running_loop()
        await asyncio.to_thread(self._store.ensure_paths)  # type: ignore[attr-defined]
        self.authorizer.replace(await asyncio.to_thread(self._read))

    async def run(self, fallback_s: float = 30.0, on_error: Callable[[Exception], None] | None = None) -> None:
        """Re-load on each notification (and every ``fallback_s``, in case a watch was lost with a connection)."""
        while True:
            with contextlib.suppress(TimeoutError):  # asyncio.timeout: a cancellation is never lost (3.11's wait_for)
                async with asyncio.timeout(fallback_s):
                    await self._changed.wait()
            self._changed.clear()
            try:
                self.authorizer.replace(await asyncio.to_thread(self._read))
                if time.monotonic() - self._purged > PURGE_EVERY_S:
                    self._purged = time.monotonic()
                    await asyncio.to_thread(self._store.purge_changes)  # type: ignore[attr-defined]
            except Exception as e:  # ZooKeeper away: keep the last ACLs, retry on the next signal
                log.warning("cannot re-load ACLs: %s", e)
                if on_error is not None:
                    on_error(e)
                await asyncio.sleep(1.0)
                self._changed.set()
