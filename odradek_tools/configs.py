"""``odradek configs`` (scripts/odradek-configs.sh): Kafka's kafka-configs.sh for topics, brokers, clients, users.

Two modes, as Kafka 2.x had:

* ``--bootstrap-server``: over HTTP. Topic configs through v3 ``/topics/{t}/configs``; broker dynamic configs and
  client/user quotas through broker/api/entity_configs.py. Output is Kafka's broker mode: ``Completed updating
  config for topic foo.``, ``Dynamic configs for topic foo are:`` then ``  k=v sensitive=false synonyms={..}``,
  and ``Quota configs for client-id 'c1' are k=v,..``.
* ``--zookeeper``: the znodes directly (``/config/<type>/<name>`` and a ``/config/changes`` notification),
  through zk/configs.py and broker/admin/topics.py, with the same validation as the brokers. Output is Kafka's
  ZooKeeper mode: ``Completed updating config for entity: client-id 'c1'.`` and ``Configs for topic 'foo' are
  k=v,..``.

Entities: ``--entity-type T --entity-name N | --entity-default`` or Kafka 2.5's shorthands (``--topic``,
``--client``, ``--user``, ``--broker``, ``--client-defaults``, ``--user-defaults``, ``--broker-defaults``).
Kafka's nested user+client quota entity (``/config/users/<user>/clients/<client id>``) takes two pairs,
``--entity-type users --entity-name alice --entity-type clients --entity-name app1`` (either as
``--entity-default``, in either order; names pair with types in the order given, and ``--describe`` may leave
the later ones out to list every match), or ``--user alice --client app1``. Only users and clients nest, as in
Kafka; a bad combination of entity options is one line and exit code 2.
"""

from __future__ import annotations

import argparse
from typing import Any

from odradek.client.admin import AdminClient
from odradek.client.transport import quote_path
from odradek_tools import common
from odradek_tools.common import ToolError
from zk.configs import DEFAULT_ENTITY, validate_entity

PROG = "odradek-configs.sh"
USAGE_EXIT = 2
ENTITY_TYPES = ("topics", "brokers", "clients", "users")
SHORTHANDS = {"topic": "topics", "client": "clients", "user": "users", "broker": "brokers"}
SINGULAR = {"topics": "topic", "brokers": "broker", "clients": "client-id", "users": "user-principal"}

Part = tuple[str, str | None]  # (entity type, name, <default>, or None: every entity of the type)
Entity = tuple[Part, ...]  # one part, or (users part, clients part): Kafka's nested user+client entity


class UsageError(ToolError):
    """A bad combination of entity options: reported in one line, with exit code 2 (a usage error)."""


def build_parser() -> argparse.ArgumentParser:
    p = common.parser(PROG, "Describe and alter dynamic configs of topics, brokers, clients and users.")
    common.add_bootstrap(p, zookeeper=True)
    p.add_argument("--describe", action="store_true", help="show the entity's configs")
    p.add_argument("--alter", action="store_true", help="change them (--add-config / --delete-config)")
    p.add_argument("--entity-type", action="append", metavar="topics|brokers|clients|users",
                   help="the entity type; users and clients together name a user's quota for one client id")
    # one ordered list, so the n-th name or default pairs with the n-th --entity-type, as Kafka pairs them
    p.add_argument("--entity-name", dest="entity_names", action="append",
                   help="topic name, broker id, client id or user principal")
    p.add_argument("--entity-default", dest="entity_names", action="append_const", const=DEFAULT_ENTITY,
                   help="the <default> client, user or broker entity")
    for short, plural in SHORTHANDS.items():
        p.add_argument(f"--{short}", metavar="NAME", help=f"same as --entity-type {plural} --entity-name NAME")
    for plural in ("clients", "users", "brokers"):
        p.add_argument(f"--{plural[:-1]}-defaults", action="store_true",
                       help=f"same as --entity-type {plural} --entity-default")
    p.add_argument("--add-config", metavar="K1=V1,K2=[A,B]", help="configs to set")
    p.add_argument("--delete-config", metavar="K1,K2", help="configs to remove")
    p.add_argument("--all", action="store_true", help="--describe: static and default values too")
    return p


def resolve_entity(args: argparse.Namespace) -> Entity:
    """The addressed entity from long or short options: one (type, name) part, or (users, clients) parts for
    Kafka's nested user+client entity. A name of None means every entity of that type (``--describe``).

    Raises:
        UsageError: an unknown or unsupported type, names without types, or a combination Kafka refuses.
    """
    types: list[str] = list(args.entity_type or ())
    names: list[str] = list(args.entity_names or ())
    for entity_type in types:
        if entity_type in ("broker-loggers", "ips"):
            raise UsageError(f"--entity-type {entity_type} is not supported by Odradek")
        if entity_type not in ENTITY_TYPES:
            raise UsageError(f"Invalid entity type {entity_type}, the entity type must be one of "
                             f"{', '.join(ENTITY_TYPES)}")
    if len(names) > len(types):
        raise UsageError("--entity-name and --entity-default need --entity-type" if not types else
                         "each --entity-type takes at most one --entity-name or --entity-default")
    chosen: list[Part] = [(t, names[i] if i < len(names) else None) for i, t in enumerate(types)]
    for short, plural in SHORTHANDS.items():
        if getattr(args, short) is not None:
            chosen.append((plural, getattr(args, short)))
    for plural in ("clients", "users", "brokers"):
        if getattr(args, f"{plural[:-1]}_defaults"):
            chosen.append((plural, DEFAULT_ENTITY))
    if not chosen:
        raise UsageError("Missing required argument \"[entity-type]\" (or --topic, --client, --user, --broker)")
    kinds = [t for t, _ in chosen]
    duplicates = sorted({t for t in kinds if kinds.count(t) > 1})
    if duplicates:
        raise UsageError(f"Duplicate entity type(s) specified: {', '.join(duplicates)}")
    if len(chosen) > 1 and set(kinds) != {"users", "clients"}:
        raise UsageError("Only 'users' and 'clients' entity types may be specified together (a user's quota "
                         f"for a client id), not {' and '.join(kinds)}")
    chosen.sort(key=lambda part: part[0] != "users")  # users first: /config/users/<user>/clients/<client id>
    for entity_type, name in chosen:
        if name is None:
            continue
        if name == "":
            raise ToolError("--entity-name must not be empty")
        if entity_type == "topics":
            if name == DEFAULT_ENTITY:
                raise UsageError("--entity-default is not supported for topics")
            from broker.admin.topics import validate_topic_name
            validate_topic_name(name)
        else:
            validate_entity(entity_type, name)
    return tuple(chosen)


def validate(args: argparse.Namespace) -> tuple[Entity, dict[str, str], list[str]]:
    common.check_connection(args)
    if args.describe == args.alter:
        raise ToolError("Command must include exactly one action: --describe, --alter")
    entity = resolve_entity(args)
    set_: dict[str, str] = {}
    delete: list[str] = []
    if args.alter:
        if any(name is None for _, name in entity):
            raise UsageError("--entity-name or --entity-default must be specified with each --entity-type for "
                             "--alter" if len(entity) > 1 else
                             "an entity name or default entity must be specified with --alter")
        if not args.add_config and not args.delete_config:
            raise ToolError("At least one of --add-config or --delete-config must be specified with --alter")
        set_ = common.parse_config_list(args.add_config) if args.add_config else {}
        delete = common.parse_key_list(args.delete_config) if args.delete_config else []
        both = sorted(set(set_) & set(delete))
        if both:
            raise ToolError(f"Invalid config(s): {', '.join(both)} (both added and deleted)")
    elif args.add_config or args.delete_config:
        raise ToolError("--add-config and --delete-config can only be used with --alter")
    if args.all and (not args.describe or len(entity) > 1 or entity[0][0] not in ("topics", "brokers")):
        raise UsageError("--all can only be used with --describe of topics or brokers")
    return entity, set_, delete


def entity_string(entity_type: str, name: str) -> str:
    """Kafka's ZooKeeper-mode rendering: ``topic 'foo'``, ``client-id 'c1'``, ``default client-id``."""
    if name == DEFAULT_ENTITY:
        return f"default {SINGULAR[entity_type]}"
    return f"{SINGULAR[entity_type]} '{name}'"


def user_client_string(user: str, client: str, *, quota: bool = False) -> str:
    """A nested entity as Kafka renders it: ``user-principal 'alice', client-id 'app1'`` (ZooKeeper mode);
    with ``quota`` as its quota describe does: ``user-principal 'alice', the default client-id``."""
    return ", ".join(("the " if quota and n == DEFAULT_ENTITY else "") + entity_string(t, n)
                     for t, n in (("users", user), ("clients", client)))


def joined(config: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(config.items()))


def _matches(found: dict[tuple[str, str], dict[str, str]], user: str | None,
             client: str | None) -> dict[tuple[str, str], dict[str, str]]:
    return {k: c for k, c in found.items() if user in (None, k[0]) and client in (None, k[1])}


# -------------------------------------------------------------------------------------------- HTTP mode


def _entity_path(entity_type: str, name: str) -> str:
    base = "/v3/clusters/{cluster_id}"
    if entity_type == "topics":
        return base + quote_path("topics", name, "configs")
    if entity_type == "brokers":
        return base + ("/broker-configs" if name == DEFAULT_ENTITY else quote_path("brokers", name, "configs"))
    return base + quote_path(entity_type, name, "configs")


def http_describe_entries(client: AdminClient, entity_type: str, name: str, all_: bool) -> list[dict[str, Any]]:
    path = _entity_path(entity_type, name)
    if entity_type == "brokers" and all_ and name != DEFAULT_ENTITY:  # static configs come from that broker
        url = client.brokers().get(int(name))
        if url is None:
            raise ToolError(f"broker {name} is not alive: its static configs cannot be read")
        with AdminClient(url) as one:
            return list(one.request_json("GET", path, query={"all": "true"}).get("data") or ())
    data = list(client.request_json("GET", path).get("data") or ())
    return data if all_ else [e for e in data if not e.get("is_default")]


def http_describe(client: AdminClient, entity_type: str, name: str | None, all_: bool) -> list[str]:
    if entity_type in ("clients", "users"):
        if name is None:
            body = client.request_json("GET", "/v3/clusters/{cluster_id}" + quote_path(entity_type))
            found = {e["entity_name"]: {c["name"]: c["value"] for c in e.get("configs") or ()}
                     for e in body.get("data") or ()}
        else:
            found = {name: {e["name"]: e["value"] for e in http_describe_entries(client, entity_type, name, False)}}
        return [f"Quota configs for {'the ' if n == DEFAULT_ENTITY else ''}{entity_string(entity_type, n)} are "
                f"{joined(c)}" for n, c in sorted(found.items())]
    if name is not None:
        names = [name]
    elif entity_type == "topics":
        names = client.list_topics()
    else:
        names = [str(b) for b in sorted(client.brokers())] + [DEFAULT_ENTITY]
    source = "All" if all_ else "Dynamic"
    out: list[str] = []
    for n in names:
        if n == DEFAULT_ENTITY:
            out.append(f"{source} default configs for brokers in the cluster are:")
        else:
            out.append(f"{source} configs for {entity_type[:-1]} {n} are:")
        for e in http_describe_entries(client, entity_type, n, all_):
            out.append(f"  {e['name']}={e.get('value')} sensitive={str(bool(e.get('is_sensitive'))).lower()} "
                       f"synonyms={{{e.get('source')}:{e['name']}={e.get('value')}}}")
    return out


def http_alter(client: AdminClient, entity_type: str, name: str, set_: dict[str, str], delete: list[str]) -> str:
    if delete:
        current = {e["name"] for e in http_describe_entries(client, entity_type, name, False)}
        missing = [k for k in delete if k not in current]
        if missing:
            raise ToolError(f"Invalid config(s): {', '.join(missing)}")
    if entity_type == "topics":
        client.alter_configs(name, set=set_, delete=delete)
    else:
        ops = [{"name": k, "value": v, "operation": "SET"} for k, v in set_.items()]
        ops += [{"name": k, "operation": "DELETE"} for k in delete]
        client.request_json("POST", _entity_path(entity_type, name) + ":alter", {"data": ops})
    if name == DEFAULT_ENTITY:
        return f"Completed updating default config for {entity_type} in the cluster."
    return f"Completed updating config for {entity_type[:-1]} {name}."


def http_describe_user_clients(client: AdminClient, user: str | None, client_id: str | None) -> list[str]:
    """``--describe`` of nested user+client entities: one, a user's (or a client id's), or all."""
    if user is not None and client_id is not None:
        body = client.request_json("GET", _entity_path("users", user), query={"client_id": client_id})
        _check_nested(body, client_id)
        found = {(user, client_id): {e["name"]: e["value"] for e in body.get("data") or ()}}
    else:
        body = client.request_json("GET", "/v3/clusters/{cluster_id}/users", query={"clients": "true"})
        if not (body.get("metadata") or {}).get("clients"):
            raise ToolError("the broker does not know nested user+client entities (an older version?): "
                            "use --zookeeper")
        found = _matches({(e["entity_name"], e["client_id"]): {c["name"]: c["value"] for c in e.get("configs") or ()}
                          for e in body.get("data") or ()}, user, client_id)
    return [f"Quota configs for {user_client_string(u, c, quota=True)} are {joined(config)}"
            for (u, c), config in sorted(found.items())]


def _check_nested(body: Any, client_id: str) -> None:
    """An older broker ignores ``?client_id=`` and would answer (or alter!) the user entity itself."""
    if (body.get("metadata") or {}).get("client_id") != client_id:
        raise ToolError("the broker does not know nested user+client entities (an older version?): "
                        "use --zookeeper")


def http_alter_user_client(client: AdminClient, user: str, client_id: str, set_: dict[str, str],
                           delete: list[str]) -> str:
    path, query = _entity_path("users", user), {"client_id": client_id}
    body = client.request_json("GET", path, query=query)  # first: does the broker understand the entity?
    _check_nested(body, client_id)
    missing = [k for k in delete if k not in {e["name"] for e in body.get("data") or ()}]
    if missing:
        raise ToolError(f"Invalid config(s): {', '.join(missing)}")
    ops = [{"name": k, "value": v, "operation": "SET"} for k, v in set_.items()]
    ops += [{"name": k, "operation": "DELETE"} for k in delete]
    client.request_json("POST", path + ":alter", {"data": ops}, query=query)
    parts = [f"default {t}" if n == DEFAULT_ENTITY else f"{t} {n}" for t, n in (("user", user), ("client", client_id))]
    return f"Completed updating config for {', '.join(parts)}."


# --------------------------------------------------------------------------------------- ZooKeeper mode


def zk_describe(zk: Any, entity_type: str, name: str | None) -> list[str]:
    from broker.admin.topics import TopicAdmin
    from zk.configs import EntityConfigs

    if entity_type == "topics":
        admin = TopicAdmin(zk)
        names = [name] if name is not None else zk.get_topics()
        return [f"Configs for {entity_string('topics', n)} are {joined(admin.describe_configs(n)[0])}"
                for n in names]
    store = EntityConfigs(zk)
    found = {name: store.describe(entity_type, name)} if name is not None else store.list_entities(entity_type)
    return [f"Configs for {entity_string(entity_type, n)} are {joined(c)}" for n, c in sorted(found.items())]


def zk_alter(zk: Any, entity_type: str, name: str, set_: dict[str, str], delete: list[str]) -> str:
    from broker.admin.topics import TopicAdmin
    from zk.configs import EntityConfigs

    if entity_type == "topics":
        admin = TopicAdmin(zk)
        overrides, _ = admin.describe_configs(name)
        missing = [k for k in delete if k not in overrides]
        if missing:
            raise ToolError(f"Invalid config(s): {', '.join(missing)}")
        admin.alter_configs(name, set_, delete)
    else:
        EntityConfigs(zk).alter(entity_type, name, set_, delete)
    return f"Completed updating config for entity: {entity_string(entity_type, name)}."


def zk_describe_user_clients(zk: Any, user: str | None, client: str | None) -> list[str]:
    from zk.configs import EntityConfigs

    store = EntityConfigs(zk)
    if user is not None and client is not None:
        found = {(user, client): store.describe_user_client(user, client)}
    else:
        found = _matches(store.list_user_clients(), user, client)
    return [f"Configs for {user_client_string(u, c)} are {joined(config)}" for (u, c), config in sorted(found.items())]


def zk_alter_user_client(zk: Any, user: str, client: str, set_: dict[str, str], delete: list[str]) -> str:
    from zk.configs import EntityConfigs

    EntityConfigs(zk).alter_user_client(user, client, set_, delete)
    return f"Completed updating config for entity: {user_client_string(user, client)}."


def _nested(args: argparse.Namespace, user: str | None, client: str | None, set_: dict[str, str],
            delete: list[str]) -> list[str]:
    if args.zookeeper:
        with common.zk_session(args.zookeeper, args.command_timeout_ms) as zk:
            if args.alter:
                assert user is not None and client is not None
                return [zk_alter_user_client(zk, user, client, set_, delete)]
            return zk_describe_user_clients(zk, user, client)
    with common.admin(args) as admin:
        if args.alter:
            assert user is not None and client is not None
            return [http_alter_user_client(admin, user, client, set_, delete)]
        return http_describe_user_clients(admin, user, client)


def _main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        entity, set_, delete = validate(args)
    except UsageError as e:
        common.fail(f"Error: {e}")
        return USAGE_EXIT
    if len(entity) > 1:
        (_, user), (_, client) = entity
        for line in _nested(args, user, client, set_, delete):
            print(line)
        return 0
    entity_type, name = entity[0]
    if args.zookeeper:
        if args.all:
            raise ToolError("--all is not supported with --zookeeper")
        with common.zk_session(args.zookeeper, args.command_timeout_ms) as zk:
            if args.alter:
                assert name is not None
                lines = [zk_alter(zk, entity_type, name, set_, delete)]
            else:
                lines = zk_describe(zk, entity_type, name)
    else:
        with common.admin(args) as client:
            if args.alter:
                assert name is not None
                lines = [http_alter(client, entity_type, name, set_, delete)]
            else:
                lines = http_describe(client, entity_type, name, args.all)
    for line in lines:
        print(line)
    return 0


def main(argv: list[str]) -> int:
    return common.run(_main, argv)
