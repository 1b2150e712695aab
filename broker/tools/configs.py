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
"""

from __future__ import annotations

import argparse
from typing import Any

from broker.tools import common
from broker.tools.common import ToolError
from odradek.client.admin import AdminClient
from odradek.client.transport import quote_path
from zk.configs import DEFAULT_ENTITY, validate_entity

PROG = "odradek-configs.sh"
ENTITY_TYPES = ("topics", "brokers", "clients", "users")
SHORTHANDS = {"topic": "topics", "client": "clients", "user": "users", "broker": "brokers"}
SINGULAR = {"topics": "topic", "brokers": "broker", "clients": "client-id", "users": "user-principal"}


def build_parser() -> argparse.ArgumentParser:
    p = common.parser(PROG, "Describe and alter dynamic configs of topics, brokers, clients and users.")
    common.add_bootstrap(p, zookeeper=True)
    p.add_argument("--describe", action="store_true", help="show the entity's configs")
    p.add_argument("--alter", action="store_true", help="change them (--add-config / --delete-config)")
    p.add_argument("--entity-type", choices=None, metavar="topics|brokers|clients|users")
    p.add_argument("--entity-name", help="topic name, broker id, client id or user principal")
    p.add_argument("--entity-default", action="store_true", help="the <default> client, user or broker entity")
    for short, plural in SHORTHANDS.items():
        p.add_argument(f"--{short}", metavar="NAME", help=f"same as --entity-type {plural} --entity-name NAME")
    for plural in ("clients", "users", "brokers"):
        p.add_argument(f"--{plural[:-1]}-defaults", action="store_true",
                       help=f"same as --entity-type {plural} --entity-default")
    p.add_argument("--add-config", metavar="K1=V1,K2=[A,B]", help="configs to set")
    p.add_argument("--delete-config", metavar="K1,K2", help="configs to remove")
    p.add_argument("--all", action="store_true", help="--describe: static and default values too")
    return p


def resolve_entity(args: argparse.Namespace) -> tuple[str, str | None]:
    """(entity type, name or ``<default>`` or None for every entity of the type), from long or short options."""
    chosen: list[tuple[str, str | None]] = []
    if args.entity_type:
        if args.entity_type in ("broker-loggers", "ips"):
            raise ToolError(f"--entity-type {args.entity_type} is not supported by Odradek")
        if args.entity_type not in ENTITY_TYPES:
            raise ToolError(f"Invalid entity type {args.entity_type}, the entity type must be one of "
                            f"{', '.join(ENTITY_TYPES)}")
        if args.entity_name is not None and args.entity_default:
            raise ToolError("--entity-name and --entity-default cannot be used together")
        chosen.append((args.entity_type, DEFAULT_ENTITY if args.entity_default else args.entity_name))
    elif args.entity_name is not None or args.entity_default:
        raise ToolError("--entity-name and --entity-default need --entity-type")
    for short, plural in SHORTHANDS.items():
        if getattr(args, short) is not None:
            chosen.append((plural, getattr(args, short)))
    for plural in ("clients", "users", "brokers"):
        if getattr(args, f"{plural[:-1]}_defaults"):
            chosen.append((plural, DEFAULT_ENTITY))
    if not chosen:
        raise ToolError("Missing required argument \"[entity-type]\" (or --topic, --client, --user, --broker)")
    if len(chosen) > 1:
        raise ToolError("Only one entity may be addressed at a time (nested user/client quotas are not supported)")
    entity_type, name = chosen[0]
    if name is not None:
        if name == "":
            raise ToolError("--entity-name must not be empty")
        if entity_type == "topics":
            if name == DEFAULT_ENTITY:
                raise ToolError("--entity-default is not supported for topics")
            from broker.admin.topics import validate_topic_name
            validate_topic_name(name)
        else:
            validate_entity(entity_type, name)
    return entity_type, name


def validate(args: argparse.Namespace) -> tuple[str, str | None, dict[str, str], list[str]]:
    common.check_connection(args)
    if args.describe == args.alter:
        raise ToolError("Command must include exactly one action: --describe, --alter")
    entity_type, name = resolve_entity(args)
    set_: dict[str, str] = {}
    delete: list[str] = []
    if args.alter:
        if name is None:
            raise ToolError("an entity name or default entity must be specified with --alter")
        if not args.add_config and not args.delete_config:
            raise ToolError("At least one of --add-config or --delete-config must be specified with --alter")
        set_ = common.parse_config_list(args.add_config) if args.add_config else {}
        delete = common.parse_key_list(args.delete_config) if args.delete_config else []
        both = sorted(set(set_) & set(delete))
        if both:
            raise ToolError(f"Invalid config(s): {', '.join(both)} (both added and deleted)")
    elif args.add_config or args.delete_config:
        raise ToolError("--add-config and --delete-config can only be used with --alter")
    if args.all and (not args.describe or entity_type not in ("topics", "brokers")):
        raise ToolError("--all can only be used with --describe of topics or brokers")
    return entity_type, name, set_, delete


def entity_string(entity_type: str, name: str) -> str:
    """Kafka's ZooKeeper-mode rendering: ``topic 'foo'``, ``client-id 'c1'``, ``default client-id``."""
    if name == DEFAULT_ENTITY:
        return f"default {SINGULAR[entity_type]}"
    return f"{SINGULAR[entity_type]} '{name}'"


def joined(config: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(config.items()))


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


def _main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    entity_type, name, set_, delete = validate(args)
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
