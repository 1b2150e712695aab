"""Dynamic entity configs in ZooKeeper: client and user quotas, broker dynamic configs (Kafka's AdminZkClient part).

Layout (classic Kafka, paths and codecs in zk/znodes.py):

    /config/clients/<sanitized client id>        {"version":1,"config":{"producer_byte_rate":"1048576"}}
    /config/users/<sanitized user>               same shape
    /config/users/<user>/clients/<client id>     same shape: Kafka's nested user+client quota entity
    /config/brokers/<id> and /config/brokers/<default>
    /config/changes/config_change_<seq>          {"version":2,"entity_path":"clients/<sanitized client id>"}
                                                 (nested: "users/<user>/clients/<client id>")

Why here and not in the brokers: as in Kafka's ZooKeeper-era ``kafka-configs.sh --zookeeper``, the writer is
whoever holds a ZooKeeper session (a broker's HTTP handler, or the admin tool directly), and every writer must
validate the same way, so the checks sit next to the write. An alter reads the node, merges, and writes the
whole property set and the change notification in one multi that is conditional on the node's version: two
concurrent alters cannot lose each other's keys, and the notification exists exactly when the write happened.
Readers (brokers applying quotas) re-read the entity when a notification appears; the notification is only a
trigger, as in Kafka's DynamicConfigManager.

Names are "sanitized" as Kafka's ``Sanitizer`` does (URL-encoded, ``*`` as ``%2A``), so any client id maps to
one safe znode name; the default entity is the literal ``<default>`` (either level of a nested entity may be
it: ``/config/users/<default>/clients/app1``). Topic configs are not handled here
(their values are checked against the log's config rules in broker/admin/topics.py).

Concurrency: blocking, thread-safe (kazoo is); asyncio callers use ``asyncio.to_thread``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import quote, unquote

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from odradek.protocol.errors import CoordinationUnavailableError, InvalidConfigError, InvalidRequestError
from zk.client import ZkClient, split_chroot
from zk.znodes import ClusterIdZNode, ConfigChangesZNode, ConfigEntityTypeZNode, ConfigEntityZNode

DEFAULT_ENTITY = "<default>"
ENTITY_TYPES = ("clients", "users", "brokers")
MAX_NAME = 255
INT64_MAX = 2**63 - 1
_BROKER_ID = re.compile(r"^[0-9]{1,10}$")

Validator = Callable[[str, str], str]


def _long(low: int) -> Validator:
    def check(key: str, value: str) -> str:
        try:
            n = int(value.strip())
        except ValueError:
            raise InvalidConfigError(f"Invalid value {value} for configuration {key}: Not a number of type LONG"
                                     ) from None
        if not low <= n <= INT64_MAX:
            raise InvalidConfigError(f"Invalid value {value} for configuration {key}: Value must be at least {low}")
        return str(n)

    return check


def _positive_double(key: str, value: str) -> str:
    try:
        x = float(value.strip())
    except ValueError:
        raise InvalidConfigError(f"Invalid value {value} for configuration {key}: Not a number of type DOUBLE"
                                 ) from None
    if not x > 0 or x != x or x == float("inf"):
        raise InvalidConfigError(f"Invalid value {value} for configuration {key}: Value must be positive")
    return value.strip()


def _boolean(key: str, value: str) -> str:
    if value.strip().lower() not in ("true", "false"):
        raise InvalidConfigError(f"Invalid value {value} for configuration {key}: Expected value to be either "
                                 "true or false")
    return value.strip().lower()


def _choice(*allowed: str, many: bool = False) -> Validator:
    def check(key: str, value: str) -> str:
        items = [v.strip() for v in value.split(",")] if many else [value.strip()]
        bad = [v for v in items if v not in allowed]
        if bad or not items:
            raise InvalidConfigError(f"Invalid value {value} for configuration {key}: String must be one of: "
                                     f"{', '.join(allowed)}")
        return ",".join(items)

    return check


# Kafka's quota keys (QuotaConfigs); rates are bytes per second per broker, request_percentage of one thread.
QUOTA_CONFIGS: dict[str, Validator] = {
    "producer_byte_rate": _long(1),
    "consumer_byte_rate": _long(1),
    "request_percentage": _positive_double,
    "controller_mutation_rate": _positive_double,
}

# The broker configs that may change without a restart (a subset of Kafka's DynamicBrokerConfig).
BROKER_CONFIGS: dict[str, Validator] = {
    "leader.replication.throttled.rate": _long(0),
    "follower.replication.throttled.rate": _long(0),
    "replica.alter.log.dirs.io.max.bytes.per.second": _long(0),
    "log.retention.ms": _long(-1),
    "log.retention.bytes": _long(-1),
    "log.segment.bytes": _long(14),
    "log.cleanup.policy": _choice("delete", "compact", many=True),
    "log.flush.interval.messages": _long(1),
    "log.flush.interval.ms": _long(0),
    "message.max.bytes": _long(0),
    "min.insync.replicas": _long(1),
    "unclean.leader.election.enable": _boolean,
    "compression.type": _choice("producer", "uncompressed", "gzip", "lz4", "zstd", "snappy"),
    "quota.producer.default": _long(1),
    "quota.consumer.default": _long(1),
}



def _scram(key: str, value: str) -> str:
    """``[password=...]`` (kafka-configs.sh's syntax) is salted and stored as Kafka stores it; the password
    itself is never written (odradek/protocol/scram.py)."""
    from odradek.protocol.scram import parse_alter_value

    try:
        return parse_alter_value(key, value)
    except ValueError as e:
        raise InvalidConfigError(str(e)) from None


# A user's SCRAM credentials live next to its quotas, in /config/users/<user> (Kafka's layout).
USER_CONFIGS: dict[str, Validator] = {**QUOTA_CONFIGS, "SCRAM-SHA-256": _scram, "SCRAM-SHA-512": _scram}
# The nested user+client entity holds quotas only (Kafka: SCRAM credentials belong to the user alone).
USER_CLIENT = "users/clients"
ALLOWED: dict[str, dict[str, Validator]] = {"clients": QUOTA_CONFIGS, "users": USER_CONFIGS,
                                            "brokers": BROKER_CONFIGS, USER_CLIENT: QUOTA_CONFIGS}


def sanitize(name: str) -> str:
    """Kafka's Sanitizer: URL-encode (a space as %20, ``*`` as %2A); ``<default>`` stays literal."""
    return name if name == DEFAULT_ENTITY else quote(name, safe="")


def desanitize(name: str) -> str:
    return name if name == DEFAULT_ENTITY else unquote(name)


def validate_entity(entity_type: str, name: str) -> str:
    """Check the entity type and name (a broker is an integer id or ``<default>``); return the znode name."""
    if entity_type not in ENTITY_TYPES:
        raise InvalidRequestError(f"entity type must be one of {', '.join(ENTITY_TYPES)}, not {entity_type[:40]!r}")
    if not isinstance(name, str) or not name or len(name) > MAX_NAME:
        raise InvalidRequestError(f"the {entity_type} entity name must be 1 to {MAX_NAME} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise InvalidRequestError(f"the {entity_type} entity name must not contain control characters")
    if entity_type == "brokers" and name != DEFAULT_ENTITY and not (_BROKER_ID.match(name) and int(name) < 2**31):
        raise InvalidRequestError(f"a broker entity name is a broker id (a non-negative integer) or "
                                  f"{DEFAULT_ENTITY}, not {name[:40]!r}")
    return sanitize(name)


def validate_user_client(user: str, client: str) -> tuple[str, str]:
    """Check a nested entity's user and client id (either may be ``<default>``); return their znode names."""
    return validate_entity("users", user), validate_entity("clients", client)


def validate_alter(entity_type: str, set_: Mapping[str, str],
                   delete: Iterable[str]) -> tuple[dict[str, str], list[str]]:
    """Names known for the entity type, values parsed and normalised; a key may not be both set and deleted."""
    allowed = ALLOWED[entity_type]
    clean: dict[str, str] = {}
    for key, value in set_.items():
        if key not in allowed:
            raise InvalidConfigError(f"Invalid config(s): {key} (allowed for {entity_type}: {', '.join(allowed)})")
        if not isinstance(value, str):
            raise InvalidConfigError(f"the value of {key} must be a string")
        clean[key] = allowed[key](key, value)
    gone = list(dict.fromkeys(delete))
    both = sorted(set(gone) & set(clean))
    if both:
        raise InvalidConfigError(f"Invalid config(s): {', '.join(both)} (both set and deleted)")
    return clean, gone


class EntityConfigs:
    """Read and alter /config/{clients,users,brokers}/<name> and /config/users/<user>/clients/<client id>, with
    change notifications."""

    fresh_reads = False
    """Whether reads sync first unless told otherwise: an admin's view (EntityConfigAdmin) does."""

    def __init__(self, zk: ZkClient) -> None:
        self._zk = zk

    def _sync_if(self, fresh: bool | None, path: str) -> None:
        """A :meth:`ZkClient.sync` first when ``fresh`` says so (None: as ``fresh_reads``). Admin reads take it;
        the brokers' own re-reads follow change notifications instead."""
        if self.fresh_reads if fresh is None else fresh:
            self._zk.sync(path)

    def _read(self, path: str, fresh: bool | None) -> dict[str, str]:
        self._sync_if(fresh, path)
        try:
            data, _ = self._zk.retrying(self._zk.kazoo.get, path)
        except NoNodeError:
            return {}
        return ConfigEntityZNode.decode(data)

    def describe(self, entity_type: str, name: str, *, fresh: bool | None = None) -> dict[str, str]:
        """The entity's stored overrides (empty when none); ``fresh``: after a ``sync``."""
        return self._read(ConfigEntityZNode.path(entity_type, validate_entity(entity_type, name)), fresh)

    def describe_user_client(self, user: str, client: str, *, fresh: bool | None = None) -> dict[str, str]:
        """The nested user+client entity's stored overrides (empty when none); ``fresh``: after a ``sync``."""
        return self._read(ConfigEntityZNode.user_client_path(*validate_user_client(user, client)), fresh)

    def list_entities(self, entity_type: str, *, fresh: bool | None = None) -> dict[str, dict[str, str]]:
        """Every entity of the type that has a config node, by (desanitized) name, with its overrides;
        ``fresh``: after a ``sync`` (one covers the reads that follow: they are this session's, in order)."""
        validate_entity(entity_type, DEFAULT_ENTITY)
        self._sync_if(fresh, ConfigEntityTypeZNode.path(entity_type))
        try:
            names = self._zk.retrying(self._zk.kazoo.get_children, ConfigEntityTypeZNode.path(entity_type))
        except NoNodeError:
            return {}
        out: dict[str, dict[str, str]] = {}
        for raw in sorted(names):
            config = self.describe(entity_type, desanitize(raw), fresh=False)
            if config:
                out[desanitize(raw)] = config
        return out

    def list_user_clients(self, *, fresh: bool | None = None) -> dict[tuple[str, str], dict[str, str]]:
        """Every nested user+client entity with overrides, by (desanitized) (user, client id); ``fresh``: after a
        ``sync``.

        Pipelined: one listing of the users, then every user's ``clients`` child and every leaf read
        concurrently, so the broker's re-read on each notification costs three round trips, not one per user.
        """
        kazoo = self._zk.kazoo

        def read() -> dict[tuple[str, str], dict[str, str]]:
            try:
                users = kazoo.get_children(ConfigEntityTypeZNode.path("users"))
            except NoNodeError:
                return {}
            listings = [(u, kazoo.get_children_async(ConfigEntityZNode.user_client_path(u))) for u in sorted(users)]
            leaves = []
            for user, listing in listings:
                try:
                    clients = listing.get()
                except NoNodeError:
                    continue  # a user with no nested entities (the common case)
                leaves += [(user, c, kazoo.get_async(ConfigEntityZNode.user_client_path(user, c)))
                           for c in sorted(clients)]
            out: dict[tuple[str, str], dict[str, str]] = {}
            for user, client, got in leaves:
                try:
                    data, _ = got.get()
                except NoNodeError:
                    continue
                config = ConfigEntityZNode.decode(data)
                if config:
                    out[(desanitize(user), desanitize(client))] = config
            return out

        self._sync_if(fresh, ConfigEntityTypeZNode.path("users"))
        found: dict[tuple[str, str], dict[str, str]] = self._zk.retrying(read)
        return found

    def alter(self, entity_type: str, name: str, set_: Mapping[str, str], delete: Iterable[str]) -> dict[str, str]:
        """Merge ``set_`` and remove ``delete`` keys; write the whole set and a notification; return the new set.

        Raises:
            InvalidRequestError: a bad entity type or name.
            InvalidConfigError: an unknown key, a bad value, or deleting a key that is not set (Kafka:
                ``Invalid config(s): k``).
        """
        znode_name = validate_entity(entity_type, name)
        clean, gone = validate_alter(entity_type, set_, delete)
        return self._write(ConfigEntityZNode.path(entity_type, znode_name), ConfigEntityTypeZNode.path(entity_type),
                           (entity_type, znode_name), clean, gone)

    def alter_user_client(self, user: str, client: str, set_: Mapping[str, str],
                          delete: Iterable[str]) -> dict[str, str]:
        """``alter`` of the nested ``/config/users/<user>/clients/<client id>`` (quota keys only); the
        notification's entity_path is ``users/<user>/clients/<client id>``, as Kafka writes it."""
        user_node, client_node = validate_user_client(user, client)
        clean, gone = validate_alter(USER_CLIENT, set_, delete)
        return self._write(ConfigEntityZNode.user_client_path(user_node, client_node),
                           ConfigEntityZNode.user_client_path(user_node),
                           ("users", f"{user_node}/clients/{client_node}"), clean, gone)

    def _write(self, path: str, parent: str, notice: tuple[str, str], clean: dict[str, str],
               gone: list[str]) -> dict[str, str]:
        """Read, merge, and write the node and its notification in one multi conditional on the node's version
        (created if absent; its parents first, outside the multi: they carry no data, as Kafka's). The read follows
        a ``sync``: a node just written through another broker is merged with, not found missing (a key to delete
        refused as not set) or at a version the write then loses to, round after round."""
        kazoo = self._zk.kazoo

        def attempt() -> dict[str, str] | None:
            kazoo.ensure_path(parent)
            kazoo.ensure_path(ConfigChangesZNode.path)
            kazoo.sync(path)  # (ZkClient.sync's reason; already under the retry policy here)
            try:
                data, stat = kazoo.get(path)
                current, version = ConfigEntityZNode.decode(data), stat.version
            except NoNodeError:
                current, version = {}, -1
            missing = [k for k in gone if k not in current]
            if missing:
                raise InvalidConfigError(f"Invalid config(s): {', '.join(missing)}")
            merged = {k: v for k, v in current.items() if k not in gone} | clean
            tx = kazoo.transaction()
            if version < 0:
                tx.create(path, ConfigEntityZNode.encode(merged))
            else:
                tx.set_data(path, ConfigEntityZNode.encode(merged), version=version)
            tx.create(ConfigChangesZNode.prefix, ConfigChangesZNode.encode(*notice), sequence=True)
            results: list[Any] = tx.commit()
            if any(isinstance(r, BadVersionError | NodeExistsError | NoNodeError) for r in results):
                return None  # someone else wrote in between: read again and merge again
            failed = [r for r in results if isinstance(r, Exception)]
            if failed:
                raise failed[0]
            return merged

        while True:
            merged = self._zk.retrying(attempt)
            if merged is not None:
                return merged


def open_admin_session(connect: str, timeout_s: float) -> ZkClient:
    """A started ZkClient for an admin tool, only if ``connect`` (with its chroot) holds an Odradek cluster.

    Why check first: ZkClient creates a missing chroot (right for a broker's first start), but an operator who
    mistypes the chroot must get an error, not an empty new tree that silently takes their configs.
    """
    hosts, chroot = split_chroot(connect)
    probe = KazooClient(hosts=hosts, timeout=max(timeout_s, 2.0))
    try:
        probe.start(timeout=timeout_s)
    except KazooTimeoutError:
        probe.close()
        raise CoordinationUnavailableError(f"cannot connect to ZooKeeper at {hosts} within {timeout_s:.0f} s") from None
    try:
        found = probe.exists((chroot or "") + ClusterIdZNode.path) is not None
    except Exception as e:  # a one-shot probe: any kazoo failure means the ensemble is not usable now
        raise CoordinationUnavailableError(f"ZooKeeper at {hosts} did not answer: {e!r}") from None
    finally:
        probe.stop()
        probe.close()
    if not found:
        raise InvalidRequestError(f"no Odradek cluster at {connect} (no {(chroot or '') + ClusterIdZNode.path})")
    # A secured cluster's ZooKeeper (zk/acls.py): the tools authenticate as the brokers do, from the environment.
    digest = os.environ.get("ODRADEK_ZK_DIGEST") or None
    zk = ZkClient(connect, connect_timeout_s=timeout_s, op_deadline_s=timeout_s, digest=digest,
                  set_acl=digest is not None)
    zk.start()
    return zk
