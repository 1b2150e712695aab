"""Dynamic configs of brokers, clients and users over HTTP (v3 style), stored in ZooKeeper by zk/configs.py.

Confluent's v3 has broker configs (``/brokers/{id}/configs``, ``/broker-configs`` for the cluster-wide default)
but no quota resource; Kafka's AdminClient has describe/alterClientQuotas. Odradek gives clients and users the
same shape as brokers, so one tool and one client path serve all three:

    GET  /v3/clusters/{c}/brokers/{id}/configs             KafkaBrokerConfigList (dynamic; ``?all=true`` adds
                                                            this broker's static configs when {id} is this broker)
    POST /v3/clusters/{c}/brokers/{id}/configs:alter       {"data": [{"name", "value"?, "operation": SET|DELETE}]}
    GET  /v3/clusters/{c}/broker-configs                   the <default> broker entity
    POST /v3/clusters/{c}/broker-configs:alter
    GET  /v3/clusters/{c}/{clients|users}                  every entity with a quota: [{"entity_name", "configs"}]
    GET  /v3/clusters/{c}/{clients|users}/{name}/configs   ({name} may be <default>, URL-encoded)
    POST /v3/clusters/{c}/{clients|users}/{name}/configs:alter
    GET  /v3/clusters/{c}/users/{name}/configs?client_id={id}         Kafka's nested user+client quota entity
    POST /v3/clusters/{c}/users/{name}/configs:alter?client_id={id}   (/config/users/<user>/clients/<id>; either
    GET  /v3/clusters/{c}/users?clients=true                          may be <default>), and every such entity

Why a query parameter for the nested entity and not more routes: it is the same resource shape (a user's quota
narrowed to one client id), and the answer names the client id in its ``metadata`` (and each entry), so a tool
can tell a broker that understood it from an older one that ignored the parameter.

Why any broker may write: as Kafka's ZooKeeper-era tool, the write is a ZooKeeper multi (config node and change
notification) that every broker applies from the notification, so no broker has to own it. Every input is
checked (entity name, keys, values, body shape): a bad one is a 4xx, never a 500.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from aiohttp import web

from broker.admin.entity_configs import DEFAULT_ENTITY, EntityConfigAdmin
from broker.api.context import BROKER, json_response
from odradek.protocol.errors import ClusterNotFoundError, InvalidRequestError, MalformedJsonError

MAX_OPS = 1000
MAX_VALUE = 4096


def _check_cluster(request: web.Request) -> str:
    cid = request.match_info["cluster_id"]
    if cid != request.app[BROKER].cluster_id:
        raise ClusterNotFoundError(f"cluster {cid} not found; this is cluster {request.app[BROKER].cluster_id}")
    return cid


def _entity(request: web.Request) -> tuple[str, str]:
    """(entity type, name) from the path: brokers by id or the default, clients and users by name."""
    info = request.match_info
    if "broker_id" in info:
        return "brokers", info["broker_id"]
    if request.path.rstrip("/").split("/")[-1].startswith("broker-configs"):
        return "brokers", DEFAULT_ENTITY
    return info["entity_type"], info["name"]


def _client_id(request: web.Request, entity_type: str) -> str | None:
    """The nested entity's client id (``?client_id=``), only for users; None for the user entity itself."""
    client = request.query.get("client_id")
    if client is not None and entity_type != "users":
        raise InvalidRequestError("client_id narrows a users entity only (users/<user>/clients/<client id>)")
    return client


def _store(request: web.Request) -> EntityConfigAdmin:
    return request.app[BROKER].entity_configs


def _entries(request: web.Request, entity_type: str, name: str, overrides: dict[str, str],
             static: dict[str, str] | None = None, client: str | None = None) -> list[dict[str, Any]]:
    cid = request.app[BROKER].cluster_id
    default = name == DEFAULT_ENTITY
    source = {"brokers": "DYNAMIC_DEFAULT_BROKER_CONFIG" if default else "DYNAMIC_BROKER_CONFIG",
              "clients": "CLIENT_QUOTA_CONFIG", "users": "USER_QUOTA_CONFIG"}[entity_type]
    nested = {} if client is None else {"client_id": client}
    if client is not None:
        source = "USER_CLIENT_QUOTA_CONFIG"
    out = [{"kind": "KafkaEntityConfig", "cluster_id": cid, "entity_type": entity_type, "entity_name": name,
            **nested, "name": k, "value": v, "is_default": False, "is_read_only": False, "is_sensitive": False,
            "source": source} for k, v in sorted(overrides.items())]
    out += [{"kind": "KafkaEntityConfig", "cluster_id": cid, "entity_type": entity_type, "entity_name": name,
             "name": k, "value": v, "is_default": True, "is_read_only": True, "is_sensitive": False,
             "source": "STATIC_BROKER_CONFIG"} for k, v in sorted((static or {}).items()) if k not in overrides]
    return out


async def describe(request: web.Request) -> web.Response:
    _check_cluster(request)
    entity_type, name = _entity(request)
    client = _client_id(request, entity_type)
    if client is not None:
        overrides = await asyncio.to_thread(_store(request).describe_user_client, name, client)
        return json_response({"kind": "KafkaClientQuotaConfigList", "metadata": {"client_id": client},
                              "data": _entries(request, entity_type, name, overrides, client=client)})
    overrides = await asyncio.to_thread(_store(request).describe, entity_type, name)
    static = None
    if entity_type == "brokers" and request.query.get("all") == "true":  # none for other brokers, or <default>
        static = _store(request).static_configs(name)
    kind = "KafkaBrokerConfigList" if entity_type == "brokers" else "KafkaClientQuotaConfigList"
    return json_response({"kind": kind, "metadata": {}, "data": _entries(request, entity_type, name, overrides,
                                                                          static)})


async def list_entities(request: web.Request) -> web.Response:
    _check_cluster(request)
    entity_type = request.match_info["entity_type"]
    if entity_type == "users" and request.query.get("clients") == "true":
        nested = await asyncio.to_thread(_store(request).list_user_clients)
        return json_response({"kind": "KafkaClientQuotaList", "metadata": {"clients": True}, "data": [
            {"entity_type": entity_type, "entity_name": user, "client_id": client,
             "configs": _entries(request, entity_type, user, config, client=client)}
            for (user, client), config in sorted(nested.items())
        ]})
    found = await asyncio.to_thread(_store(request).list_entities, entity_type)
    return json_response({"kind": "KafkaClientQuotaList", "metadata": {}, "data": [
        {"entity_type": entity_type, "entity_name": name, "configs": _entries(request, entity_type, name, config)}
        for name, config in sorted(found.items())
    ]})


def parse_alter(body: object) -> tuple[dict[str, str], list[str]]:
    """``{"data": [{"name", "value", "operation"}]}`` (the v3 configs:alter body) -> (set, delete)."""
    if not isinstance(body, dict) or not isinstance(body.get("data"), list):
        raise InvalidRequestError('the body must be {"data": [{"name", "value", "operation": "SET"|"DELETE"}]}')
    ops = body["data"]
    if len(ops) > MAX_OPS:
        raise InvalidRequestError(f"at most {MAX_OPS} config operations per request")
    set_: dict[str, str] = {}
    delete: list[str] = []
    for op in ops:
        if not isinstance(op, dict) or not isinstance(op.get("name"), str) or not op["name"]:
            raise InvalidRequestError('every operation needs a "name" (a non-empty string)')
        kind = str(op.get("operation", "SET")).upper()
        if kind == "SET":
            value = op.get("value")
            if not isinstance(value, str) or len(value) > MAX_VALUE:
                raise InvalidRequestError(f'"value" of {op["name"][:80]} must be a string of at most {MAX_VALUE} '
                                          "characters")
            set_[op["name"]] = value
        elif kind == "DELETE":
            delete.append(op["name"])
        else:
            raise InvalidRequestError(f'"operation" must be SET or DELETE, not {kind[:20]!r}')
    return set_, delete


async def alter(request: web.Request) -> web.Response:
    _check_cluster(request)
    entity_type, name = _entity(request)
    try:
        body = orjson.loads(await request.read() or b"{}")
    except orjson.JSONDecodeError as e:
        raise MalformedJsonError(f"the request body is not valid JSON: {e}") from None
    set_, delete = parse_alter(body)
    client = _client_id(request, entity_type)
    if client is not None:
        await asyncio.to_thread(_store(request).alter_user_client, name, client, set_, delete)
        return web.Response(status=204)
    await asyncio.to_thread(_store(request).alter, entity_type, name, set_, delete)
    return web.Response(status=204)


def routes() -> list[web.RouteDef]:
    c = "/v3/clusters/{cluster_id}"
    q = c + "/{entity_type:clients|users}"
    return [
        web.get(f"{c}/brokers/{{broker_id}}/configs", describe),
        web.post(f"{c}/brokers/{{broker_id}}/configs:alter", alter),
        web.get(f"{c}/broker-configs", describe),
        web.post(f"{c}/broker-configs:alter", alter),
        web.get(q, list_entities),
        web.get(f"{q}/{{name}}/configs", describe),
        web.post(f"{q}/{{name}}/configs:alter", alter),
    ]
