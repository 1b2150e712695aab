"""ACLs in ZooKeeper, in Kafka's layout (AclAuthorizer, 2.x), and the ZooKeeper-side ACLs of our own znodes.

Layout::

    /kafka-acl/<ResourceType>/<name>                    literal patterns (``*`` = every resource of the type)
    /kafka-acl-extended/prefixed/<ResourceType>/<name>  prefixed patterns
    /kafka-acl-changes/acl_changes_<seq>                "Topic:name" (a literal resource changed)
    /kafka-acl-extended-changes/acl_changes_<seq>       {"version":1,"resourceType","name","patternType"}

A resource node holds ``{"version":1,"acls":[{"principal","permissionType","operation","host"}]}``. A change
rewrites the node conditionally on its version (two admins adding at once cannot lose each other's entry) and
adds a notification in the same multi, as Kafka does; brokers re-read the resource a notification names.

ZooKeeper ACLs (``zookeeper.set.acl``): ``secure_acls`` gives a path CREATOR_ALL for the cluster's digest
identity plus world READ, except the sensitive roots (user credentials, the token key), which get no world READ.
Concurrency: blocking, thread-safe; asyncio callers use ``asyncio.to_thread``.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.security import ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE, make_digest_acl

if TYPE_CHECKING:
    from zk.client import ZkClient

ACL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
CHANGE_EXPIRY_MS = 15 * 60 * 1000  # Kafka's AclChangeNotificationHandler / ZkNodeChangeNotificationListener
RESOURCE_TYPES = ("Topic", "Group", "Cluster", "TransactionalId")
ACL_PATHS = (ACL_ROOT, PREFIXED_ROOT, CHANGES, EXTENDED_CHANGES,
             *(f"{ACL_ROOT}/{t}" for t in RESOURCE_TYPES), *(f"{PREFIXED_ROOT}/{t}" for t in RESOURCE_TYPES))
# Readable by the cluster's identity only (Kafka's ZkData.sensitiveRootPaths, plus our token key).
SENSITIVE_ROOTS = ("/config/users", "/config/brokers", "/delegation_token")
TOKEN_KEY_PATH = "/delegation_token/secret"


@dataclass(frozen=True, slots=True, order=True)
class AclEntry:
    principal: str
    permission: str  # Allow | Deny
    operation: str
    host: str = "*"

    def to_json(self) -> dict[str, str]:
        return {"principal": self.principal, "permissionType": self.permission, "operation": self.operation,
                "host": self.host}

    @staticmethod
    def from_json(obj: dict[str, Any]) -> AclEntry:
        return AclEntry(str(obj["principal"]), str(obj["permissionType"]), str(obj["operation"]),
                        str(obj.get("host", "*")))


def resource_path(resource_type: str, name: str, pattern: str = "LITERAL") -> str:
    if resource_type not in RESOURCE_TYPES:
        raise ValueError(f"resource type must be one of {', '.join(RESOURCE_TYPES)}")
    if not name or "/" in name:
        raise ValueError(f"bad resource name {name!r}")
    root = PREFIXED_ROOT if pattern.upper() == "PREFIXED" else ACL_ROOT
    return f"{root}/{resource_type}/{name}"


def _encode(entries: Iterable[AclEntry]) -> bytes:
    return json.dumps({"version": 1, "acls": [e.to_json() for e in sorted(set(entries))]},
                      separators=(",", ":")).encode()


def _decode(data: bytes | None) -> set[AclEntry]:
    if not data:
        return set()
    return {AclEntry.from_json(a) for a in json.loads(data).get("acls", [])}


class AclStore:
    """The verbs over ACL znodes, every call through ``ZkClient.retrying``."""

    def __init__(self, zk: ZkClient) -> None:
        self._zk = zk
        self._kz = zk.kazoo

    def ensure_paths(self) -> None:
        for path in ACL_PATHS:
            self._zk.retrying(self._kz.ensure_path, path)

    def get(self, resource_type: str, name: str, pattern: str = "LITERAL") -> set[AclEntry]:
        try:
            data, _ = self._zk.retrying(self._kz.get, resource_path(resource_type, name, pattern))
        except NoNodeError:
            return set()
        return _decode(data)

    def list_all(self, *, fresh: bool = False) -> dict[tuple[str, str, str], set[AclEntry]]:
        """{(resource type, name, LITERAL|PREFIXED): entries} for every resource with ACLs; ``fresh``: after one
        ``sync`` (the reads that follow are this session's, in order, so it covers them all)."""
        if fresh:
            self._zk.sync(ACL_ROOT)
        out: dict[tuple[str, str, str], set[AclEntry]] = {}
        for pattern, root in (("LITERAL", ACL_ROOT), ("PREFIXED", PREFIXED_ROOT)):
            for rtype in RESOURCE_TYPES:
                try:
                    names = self._zk.retrying(self._kz.get_children, f"{root}/{rtype}")
                except NoNodeError:
                    continue
                for name in names:
                    entries = self.get(rtype, name, pattern)
                    if entries:
                        out[(rtype, name, pattern)] = entries
        return out

    def change(self, resource_type: str, name: str, pattern: str, add: Iterable[AclEntry] = (),
               remove: Iterable[AclEntry] | None = ()) -> set[AclEntry]:
        """Add and remove entries (``remove=None``: all of them), conditionally on the node's version, with the
        change notification in the same multi. Returns the entries now stored."""
        path = resource_path(resource_type, name, pattern)
        add, remove_set = set(add), (None if remove is None else set(remove))
        self.ensure_paths()
        if pattern.upper() == "PREFIXED":
            notice_root = EXTENDED_CHANGES
            notice = json.dumps({"version": 1, "resourceType": resource_type, "name": name,
                                 "patternType": "Prefixed"}).encode()
        else:
            notice_root, notice = CHANGES, f"{resource_type}:{name}".encode()

        def attempt() -> set[AclEntry] | None:
            self._kz.sync(path)  # the node as the quorum has it (ZkClient.sync); already under the retry policy
            try:
                data, stat = self._kz.get(path)
                current, version = _decode(data), stat.version
            except NoNodeError:
                current, version = set(), -1
            wanted = (set() if remove_set is None else current - remove_set) | add
            tx = self._kz.transaction()
            if version < 0:
                tx.create(path, _encode(wanted))
            else:
                tx.set_data(path, _encode(wanted), version=version)
            tx.create(f"{notice_root}/{CHANGE_PREFIX}", notice, sequence=True)
            results = tx.commit()
            if any(isinstance(r, (BadVersionError, NodeExistsError, NoNodeError)) for r in results):
                return None
            for r in results:
                if isinstance(r, Exception):
                    raise r
            return wanted

        while True:
            done = self._zk.retrying(attempt)
            if done is not None:
                return done

    def changes(self, watch: Any = None) -> list[str]:
        """Notification names under both change roots, oldest first (arming ``watch`` on both)."""
        out: list[str] = []
        for root in (CHANGES, EXTENDED_CHANGES):
            try:
                out += [f"{root}/{c}" for c in self._zk.retrying(self._kz.get_children, root,
                                                                  watch=(lambda _e: watch()) if watch else None)]
            except NoNodeError:
                continue
        return sorted(out, key=lambda p: p.rsplit("_", 1)[-1])

    def purge_changes(self, older_than_ms: int = CHANGE_EXPIRY_MS, now_ms: int | None = None) -> int:
        """Delete change notifications created more than ``older_than_ms`` ago (Kafka's
        ZkNodeChangeNotificationListener purges them after 15 minutes): every live broker has read them long
        since, and a starting broker reads all ACLs, not the notifications. Returns how many went; brokers purge
        concurrently, so one already gone is skipped."""
        now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        removed = 0
        for path in self.changes():
            try:
                _, stat = self._zk.retrying(self._kz.get, path)
                if now - stat.ctime > older_than_ms:
                    self._zk.retrying(self._kz.delete, path)
                    removed += 1
            except NoNodeError:
                continue
        return removed

    def get_or_create_token_key(self, fresh: bytes) -> bytes:
        """The cluster's bearer-token HMAC key: the first broker writes it, every broker reads the same."""
        with contextlib.suppress(NodeExistsError):
            self._zk.retrying(self._kz.create, TOKEN_KEY_PATH, fresh, makepath=True)
        data, _ = self._zk.retrying(self._kz.get, TOKEN_KEY_PATH)
        return bytes(data)


# ------------------------------------------------------------------------------------ ZooKeeper's own ACLs


def digest_auth(digest: str) -> tuple[list[tuple[str, str]], str, str]:
    user, sep, password = digest.partition(":")
    if not sep or not user:
        raise ValueError("the ZooKeeper digest must be USER:PASSWORD")
    return [("digest", f"{user}:{password}")], user, password


def secure_acls(path: str, user: str, password: str) -> list[ACL]:
    """CREATOR_ALL (as the digest identity) plus world READ, except under the sensitive roots."""
    owner = make_digest_acl(user, password, all=True)
    if any(path == root or path.startswith(root + "/") for root in SENSITIVE_ROOTS):
        return [owner]
    return [owner, *READ_ACL_UNSAFE]


def migrate(zk: ZkClient, mode: str, user: str, password: str, root: str = "/") -> int:
    """Kafka's zookeeper-security-migration: walk the tree from ``root`` and set every znode's ACL to the
    secure ones (``secure``) or to world-all (``unsecure``). Returns how many znodes were set."""
    from zk.client import split_chroot

    kz = zk.kazoo
    count = 0
    stack = [root]
    while stack:
        path = stack.pop()
        if path == "/zookeeper" or path.startswith("/zookeeper/"):
            continue
        acls = secure_acls(path, user, password) if mode == "secure" else OPEN_ACL_UNSAFE
        try:
            if path != "/" or split_chroot(zk.connect)[1]:  # a chroot's own node is the cluster's too
                zk.retrying(kz.set_acls, path, acls)
                count += 1
            children = zk.retrying(kz.get_children, path)
        except NoNodeError:
            continue
        stack.extend(f"{path.rstrip('/')}/{c}" for c in children)
    return count


class _SecuredTransaction(TransactionRequest):
    def create(self, path: str, value: bytes = b"", acl: Any = None, ephemeral: bool = False,
               sequence: bool = False) -> None:
        if acl is None:
            acl = self.client.acl_for(path)
        super().create(path, value, acl, ephemeral, sequence)


class SecuredKazooClient(KazooClient):
    """A kazoo client that gives every znode it creates the secure ACLs for its path (``secure_acls``), in
    plain creates, ``makepath`` parents, ``ensure_path`` and multis alike. kazoo has one ``default_acl`` for
    every path; Kafka's policy differs by path (sensitive roots are not world-readable), hence this subclass.
    """

    def __init__(self, *args: Any, digest_user: str, digest_password: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._digest = (digest_user, digest_password)

    def acl_for(self, path: str) -> list[ACL]:
        return secure_acls(path, *self._digest)

    def create_async(self, path: str, value: bytes = b"", acl: Any = None, *args: Any, **kwargs: Any) -> Any:
        return super().create_async(path, value, acl if acl is not None else self.acl_for(path), *args, **kwargs)

    def ensure_path_async(self, path: str, acl: Any = None) -> Any:
        return super().ensure_path_async(path, acl if acl is not None else self.acl_for(path))

    def transaction(self) -> TransactionRequest:
        return _SecuredTransaction(self)
