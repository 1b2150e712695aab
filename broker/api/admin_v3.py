"""Confluent REST Proxy v3 shapes for clusters, topics and topic configs.

Answers are ``application/json`` (v3's only media type; an Accept that excludes it is a 406). Errors take v3's
content type and codes in broker/api/errors.py (a duplicate topic is 400 with 40002, as Confluent answers).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import orjson
from aiohttp import web

from broker.api.context import BROKER, json_response
from broker.api.params import negotiate
from odradek.protocol import media
from odradek.protocol.errors import ClusterNotFoundError, InvalidRequestError, MalformedJsonError, UnknownTopicError

ADMIN_TIMEOUT_S = 15.0


def _base(request: web.Request) -> str:
    return f"{request.scheme}://{request.host}/v3"


def _cluster(request: web.Request) -> dict[str, Any]:
    broker = request.app[BROKER]
    cid = broker.cluster_id
    base = f"{_base(request)}/clusters/{cid}"
    controller = broker.controller_id
    return {
        "kind": "KafkaCluster", "metadata": {"self": base, "resource_name": f"crn:///kafka={cid}"},
        "cluster_id": cid,
        "controller": {"related": f"{base}/brokers/{controller}"} if controller is not None else None,
        "brokers": {"related": f"{base}/brokers"}, "topics": {"related": f"{base}/topics"},
    }


def _check_cluster(request: web.Request) -> str:
    """Every v3 handler starts here: negotiate first, so a 406 never follows a change already made."""
    negotiate(request, (media.PLAIN_JSON,))
    cid = request.match_info["cluster_id"]
    if cid != request.app[BROKER].cluster_id:
        raise ClusterNotFoundError(f"cluster {cid} not found; this is cluster {request.app[BROKER].cluster_id}")
    return cid


def _topic(request: web.Request, name: str) -> dict[str, Any]:
    cache = request.app[BROKER].cache
    assignment = cache.topics.get(name)
    if assignment is None:
        raise UnknownTopicError(f"topic '{name}' does not exist")
    cid = request.app[BROKER].cluster_id
    base = f"{_base(request)}/clusters/{cid}/topics/{name}"
    return {
        "kind": "KafkaTopic", "metadata": {"self": base, "resource_name": f"crn:///kafka={cid}/topic={name}"},
        "cluster_id": cid, "topic_name": name, "topic_id": assignment.topic_id, "is_internal": False,
        "replication_factor": len(next(iter(assignment.partitions.values()), [])),
        "partitions_count": len(assignment.partitions),
        "partitions": {"related": f"{base}/partitions"}, "configs": {"related": f"{base}/configs"},
    }


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = orjson.loads(await request.read() or b"{}")
    except orjson.JSONDecodeError as e:
        raise MalformedJsonError(f"the request body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise InvalidRequestError("the request body must be a JSON object")
    return body


async def _wait_for(request: web.Request, done: Any, timeout: float = ADMIN_TIMEOUT_S) -> bool:
    """Wait until ``done()`` holds in the broker's metadata (the controller acted); False on timeout."""
    broker = request.app[BROKER]
    deadline = time.monotonic() + timeout
    while not done():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        with contextlib.suppress(TimeoutError):
            await broker.metadata.changed(min(remaining, 0.5))
    return True


def _json(request: web.Request, body: Any, status: int = 200) -> web.Response:
    return json_response(body, status=status, content_type=negotiate(request, (media.PLAIN_JSON,)))


def _all_led(request: web.Request, name: str, count: int) -> bool:
    cache = request.app[BROKER].cache
    return all((p := cache.partitions.get((name, i))) is not None and p.leader >= 0 for i in range(count))


async def list_clusters(request: web.Request) -> web.Response:
    return _json(request, {"kind": "KafkaClusterList", "metadata": {"self": f"{_base(request)}/clusters"},
                          "data": [_cluster(request)]})


async def get_cluster(request: web.Request) -> web.Response:
    _check_cluster(request)
    return _json(request, _cluster(request))


async def list_topics(request: web.Request) -> web.Response:
    cid = _check_cluster(request)
    names = sorted(request.app[BROKER].cache.topics)
    return _json(request, {"kind": "KafkaTopicList",
                          "metadata": {"self": f"{_base(request)}/clusters/{cid}/topics"},
                          "data": [_topic(request, n) for n in names]})


async def create_topic(request: web.Request) -> web.Response:
    _check_cluster(request)
    body = await _body(request)
    name = body.get("topic_name")
    if not isinstance(name, str):
        raise InvalidRequestError('"topic_name" is required')
    configs = body.get("configs") or []
    if not isinstance(configs, list) or not all(isinstance(c, dict) and "name" in c for c in configs):
        raise InvalidRequestError('"configs" must be an array of {"name", "value"}')
    assignment = None
    if body.get("replicas_assignments") is not None:
        try:
            assignment = {int(a["partition_id"]): [int(b) for b in a["broker_ids"]]
                          for a in body["replicas_assignments"]}
        except (KeyError, TypeError, ValueError):
            raise InvalidRequestError('"replicas_assignments" must be [{"partition_id", "broker_ids"}]') from None
    partitions = _optional_int(body, "partitions_count")
    rf = _optional_int(body, "replication_factor")
    created = await asyncio.to_thread(
        request.app[BROKER].admin.create_topic, name, partitions, rf,
        {str(c["name"]): str(c.get("value")) for c in configs}, assignment,
    )
    count = len(created.partitions)
    await _wait_for(request, lambda: _all_led(request, name, count))
    return _json(request, _topic(request, name), status=201)


def _optional_int(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidRequestError(f'"{key}" must be an integer')
    return value


async def get_topic(request: web.Request) -> web.Response:
    _check_cluster(request)
    return _json(request, _topic(request, request.match_info["topic"]))


async def delete_topic(request: web.Request) -> web.Response:
    _check_cluster(request)
    name = request.match_info["topic"]
    cache = request.app[BROKER].cache
    await asyncio.to_thread(request.app[BROKER].admin.delete_topic, name)
    await _wait_for(request, lambda: name not in cache.topics)
    return web.Response(status=204)


async def update_topic(request: web.Request) -> web.Response:
    _check_cluster(request)
    name = request.match_info["topic"]
    count = _optional_int(await _body(request), "partitions_count")
    if count is None:
        raise InvalidRequestError('"partitions_count" is required')
    await asyncio.to_thread(request.app[BROKER].admin.add_partitions, name, count)
    await _wait_for(request, lambda: _all_led(request, name, count))
    return _json(request, _topic(request, name))


def _config_entry(request: web.Request, name: str, key: str, value: str, overrides: dict[str, str]) -> dict[str, Any]:
    cid = request.app[BROKER].cluster_id
    return {
        "kind": "KafkaTopicConfig",
        "metadata": {"self": f"{_base(request)}/clusters/{cid}/topics/{name}/configs/{key}"},
        "cluster_id": cid, "topic_name": name, "name": key, "value": value,
        "is_default": key not in overrides, "is_read_only": False, "is_sensitive": False,
        "source": "DYNAMIC_TOPIC_CONFIG" if key in overrides else "DEFAULT_CONFIG",
    }


async def list_configs(request: web.Request) -> web.Response:
    _check_cluster(request)
    name = request.match_info["topic"]
    overrides, effective = await asyncio.to_thread(request.app[BROKER].admin.describe_configs, name)
    return _json(request, {"kind": "KafkaTopicConfigList", "metadata": {}, "data": [
        _config_entry(request, name, k, v, overrides) for k, v in sorted(effective.items())
    ]})


async def get_config(request: web.Request) -> web.Response:
    _check_cluster(request)
    name, key = request.match_info["topic"], request.match_info["name"]
    overrides, effective = await asyncio.to_thread(request.app[BROKER].admin.describe_configs, name)
    if key not in effective:
        raise InvalidRequestError(f"unknown topic config {key}")
    return _json(request, _config_entry(request, name, key, effective[key], overrides))


async def put_config(request: web.Request) -> web.Response:
    _check_cluster(request)
    name, key = request.match_info["topic"], request.match_info["name"]
    body = await _body(request)
    if "value" not in body:
        raise InvalidRequestError('"value" is required')
    await asyncio.to_thread(request.app[BROKER].admin.alter_configs, name, {key: str(body["value"])}, [])
    return web.Response(status=204)


async def delete_config(request: web.Request) -> web.Response:
    _check_cluster(request)
    name, key = request.match_info["topic"], request.match_info["name"]
    await asyncio.to_thread(request.app[BROKER].admin.alter_configs, name, {}, [key])
    return web.Response(status=204)


async def alter_configs(request: web.Request) -> web.Response:
    _check_cluster(request)
    name = request.match_info["topic"]
    body = await _body(request)
    entries = body.get("data")
    if not isinstance(entries, list):
        raise InvalidRequestError('"data" must be an array of {"name", "value", "operation"}')
    set_: dict[str, str] = {}
    delete: list[str] = []
    for entry in entries:
        if not isinstance(entry, dict) or "name" not in entry:
            raise InvalidRequestError('each entry needs a "name"')
        if str(entry.get("operation", "SET")).upper() == "DELETE":
            delete.append(str(entry["name"]))
        else:
            set_[str(entry["name"])] = str(entry.get("value"))
    await asyncio.to_thread(request.app[BROKER].admin.alter_configs, name, set_, delete)
    return web.Response(status=204)
