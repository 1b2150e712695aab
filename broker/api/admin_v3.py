"""Confluent REST Proxy v3 shapes for clusters, topics and topic configs.

Answers are ``application/json`` (v3's only media type; an Accept that excludes it is a 406). Errors take v3's
content type and codes in broker/api/errors.py (a duplicate topic is 400 with 40002, as Confluent answers).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from aiohttp import web

from broker.admin.topics import validate_topic_name
from broker.api.context import BROKER, json_response
from broker.api.params import INT32_MAX, int_param, is_json_type, limits, load_json_object, negotiate
from broker.security.visibility import describe_filter
from odradek.protocol import media
from odradek.protocol.errors import (
    BrokerNotFoundError,
    ClusterNotFoundError,
    InvalidRequestError,
    PolicyViolationError,
    UnknownPartitionError,
    UnknownTopicError,
    UnsupportedMediaTypeError,
)

ADMIN_TIMEOUT_S = 15.0


def _base(request: web.Request) -> str:
    """Links name the broker's advertised URL (what it registered in ZooKeeper), never the request's Host header,
    which any client sets: echoing it would let one client plant links that other clients follow."""
    return f"{request.app[BROKER].info().url}/v3"


def _cluster(request: web.Request) -> dict[str, Any]:
    broker = request.app[BROKER]
    cid = broker.cluster_id
    base = f"{_base(request)}/clusters/{cid}"
    controller = broker.controller_id
    return {
        "kind": "KafkaCluster", "metadata": {"self": base, "resource_name": f"crn:///kafka={cid}"},
        "cluster_id": cid,
        "controller": {"related": f"{base}/brokers/{controller}"} if controller is not None else None,
        "acls": {"related": f"{base}/acls"}, "brokers": {"related": f"{base}/brokers"},
        "broker_configs": {"related": f"{base}/broker-configs"},
        "consumer_groups": {"related": f"{base}/consumer-groups"}, "topics": {"related": f"{base}/topics"},
        "partition_reassignments": {"related": f"{base}/topics/-/partitions/-/reassignment"},
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
        "partition_reassignments": {"related": f"{base}/partitions/-/reassignment"},
    }


async def _body(request: web.Request) -> dict[str, Any]:
    """The JSON object a v3 request carries. Only JSON content types are taken (415 otherwise), as Confluent's
    v3 resources declare ``@Consumes(application/json)``: a text/plain POST is what any web page can send
    cross-origin without a preflight, and it must not create or change anything."""
    raw = await request.read()
    if raw and not is_json_type(request.content_type):
        raise UnsupportedMediaTypeError(
            f"v3 requests take {media.PLAIN_JSON}, not {request.content_type or '(no Content-Type)'}")
    return load_json_object(raw or b"{}")


def _wait_s(request: web.Request) -> float:
    """How long a create, delete or partition change waits for the controller: ``timeout_ms`` (default and
    maximum 15 s); 0 answers 202 at once unless the change is already visible."""
    return int_param(request, "timeout_ms", int(ADMIN_TIMEOUT_S * 1000), maximum=int(ADMIN_TIMEOUT_S * 1000)) / 1000


def _pending(request: web.Request, what: str, check: str) -> web.Response:
    """202: the change is written to ZooKeeper but the controller has not confirmed it within the wait."""
    response = _json(request, {"kind": "KafkaPendingOperation", "status": "PENDING",
                               "message": f"{what} was accepted but not confirmed within the wait; "
                                          f"check with GET {check}", "check": check}, status=202)
    response.headers["Location"] = check
    return response


def _check_partition_limits(request: web.Request, name: str, total: int) -> None:
    """max.partitions.per.topic and max.partitions (KIP-578): checked before anything is written."""
    config = limits(request)
    if total > config.max_partitions_per_topic:
        raise PolicyViolationError(f"{total} partitions for topic '{name}'; the limit is "
                                   f"{config.max_partitions_per_topic} (max.partitions.per.topic)")
    topics = request.app[BROKER].cache.topics
    others = sum(len(a.partitions) for t, a in topics.items() if t != name)
    if others + total > config.max_partitions:
        raise PolicyViolationError(f"the cluster would have {others + total} partitions; the limit is "
                                   f"{config.max_partitions} (max.partitions)")


def _config_value(request: web.Request, key: str, value: Any) -> str:
    if not isinstance(key, str) or (not isinstance(value, str | int | float | bool) and value is not None):
        raise InvalidRequestError(f"config {str(key)[:60]!r} must have a string value")
    text = str(value).lower() if isinstance(value, bool) else str(value)
    limit = limits(request).max_config_value_bytes
    if len(text.encode()) > limit:
        raise PolicyViolationError(f"the value of config {key} is {len(text.encode())} bytes; the limit is {limit} "
                                   "(max.config.value.bytes)")
    return text


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


def _broker(request: web.Request, cid: str, broker_id: int) -> dict[str, Any]:
    """Confluent's BrokerData (resources/v3/BrokersResource.java): one registered broker, with its configs."""
    info = request.app[BROKER].cache.brokers.get(broker_id)
    if info is None:
        raise BrokerNotFoundError(f"Broker {broker_id} could not be found.")
    base = f"{_base(request)}/clusters/{cid}/brokers/{broker_id}"
    return {"kind": "KafkaBroker",
            "metadata": {"self": base, "resource_name": f"crn:///kafka={cid}/broker={broker_id}"},
            "cluster_id": cid, "broker_id": broker_id, "host": info.host, "port": info.port, "rack": info.rack,
            "configs": {"related": f"{base}/configs"}}


async def list_brokers(request: web.Request) -> web.Response:
    cid = _check_cluster(request)
    ids = sorted(request.app[BROKER].cache.brokers)
    return _json(request, {"kind": "KafkaBrokerList",
                           "metadata": {"self": f"{_base(request)}/clusters/{cid}/brokers"},
                           "data": [_broker(request, cid, b) for b in ids]})


async def get_broker(request: web.Request) -> web.Response:
    cid = _check_cluster(request)
    raw = request.match_info["broker_id"]
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 10):
        raise BrokerNotFoundError(f"Broker {raw} could not be found.")
    return _json(request, _broker(request, cid, int(raw)))


def _partition_ids(request: web.Request, topic: str) -> list[int]:
    assignment = request.app[BROKER].cache.topics.get(topic)
    if assignment is None:
        raise UnknownTopicError(f"topic '{topic}' does not exist")
    return sorted(assignment.partitions)


def _path_partition(request: web.Request, topic: str) -> int:
    raw = request.match_info["partition"]
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 10) or int(raw) not in _partition_ids(request, topic):
        raise UnknownPartitionError(f"partition {raw} of topic '{topic}' does not exist")
    return int(raw)


def _partition(request: web.Request, cid: str, topic: str, partition: int) -> dict[str, Any]:
    """Confluent's PartitionData (resources/v3/PartitionsResource.java): the leader as a link to its replica."""
    info = request.app[BROKER].cache.partitions.get((topic, partition))
    base = f"{_base(request)}/clusters/{cid}/topics/{topic}/partitions/{partition}"
    leader = info.leader if info is not None and info.leader >= 0 else None
    return {"kind": "KafkaPartition",
            "metadata": {"self": base, "resource_name": f"crn:///kafka={cid}/topic={topic}/partition={partition}"},
            "cluster_id": cid, "topic_name": topic, "partition_id": partition,
            "leader": {"related": f"{base}/replicas/{leader}"} if leader is not None else None,
            "replicas": {"related": f"{base}/replicas"}, "reassignment": {"related": f"{base}/reassignment"}}


def _replica(request: web.Request, cid: str, topic: str, partition: int, broker_id: int) -> dict[str, Any]:
    """Confluent's ReplicaData (resources/v3/ReplicasResource.java)."""
    info = request.app[BROKER].cache.partitions.get((topic, partition))
    base = f"{_base(request)}/clusters/{cid}/topics/{topic}/partitions/{partition}/replicas/{broker_id}"
    return {"kind": "KafkaReplica",
            "metadata": {"self": base, "resource_name":
                         f"crn:///kafka={cid}/topic={topic}/partition={partition}/replica={broker_id}"},
            "cluster_id": cid, "topic_name": topic, "partition_id": partition, "broker_id": broker_id,
            "is_leader": info is not None and info.leader == broker_id,
            "is_in_sync": info is not None and broker_id in info.isr,
            "broker": {"related": f"{_base(request)}/clusters/{cid}/brokers/{broker_id}"}}


def _replica_ids(request: web.Request, topic: str, partition: int) -> list[int]:
    return list(request.app[BROKER].cache.topics[topic].partitions[partition])


async def list_partitions(request: web.Request) -> web.Response:
    cid = _check_cluster(request)
    topic = request.match_info["topic"]
    return _json(request, {"kind": "KafkaPartitionList",
                           "metadata": {"self": f"{_base(request)}/clusters/{cid}/topics/{topic}/partitions"},
                           "data": [_partition(request, cid, topic, p) for p in _partition_ids(request, topic)]})


async def get_partition(request: web.Request) -> web.Response:
    cid = _check_cluster(request)
    topic = request.match_info["topic"]
    return _json(request, _partition(request, cid, topic, _path_partition(request, topic)))


async def list_replicas(request: web.Request) -> web.Response:
    cid = _check_cluster(request)
    topic = request.match_info["topic"]
    p = _path_partition(request, topic)
    return _json(request, {"kind": "KafkaReplicaList", "metadata": {
        "self": f"{_base(request)}/clusters/{cid}/topics/{topic}/partitions/{p}/replicas"},
        "data": [_replica(request, cid, topic, p, b) for b in _replica_ids(request, topic, p)]})


async def get_replica(request: web.Request) -> web.Response:
    cid = _check_cluster(request)
    topic = request.match_info["topic"]
    p = _path_partition(request, topic)
    raw = request.match_info["broker_id"]
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 10) or int(raw) not in _replica_ids(request, topic, p):
        raise BrokerNotFoundError(f"Replica {raw} of {topic}-{p} could not be found.")
    return _json(request, _replica(request, cid, topic, p, int(raw)))


async def list_topics(request: web.Request) -> web.Response:
    cid = _check_cluster(request)
    names = sorted(request.app[BROKER].cache.topics)
    visible = describe_filter(request, "Topic")  # with ACLs: only the topics the caller may Describe
    if visible is not None:
        names = list(filter(visible, names))
    return _json(request, {"kind": "KafkaTopicList",
                          "metadata": {"self": f"{_base(request)}/clusters/{cid}/topics"},
                          "data": [_topic(request, n) for n in names]})


async def create_topic(request: web.Request) -> web.Response:
    _check_cluster(request)
    body = await _body(request)
    name = body.get("topic_name")
    if not isinstance(name, str):
        raise InvalidRequestError('"topic_name" is required')
    validate_topic_name(name)
    configs = body.get("configs") or []
    if not isinstance(configs, list) or not all(isinstance(c, dict) and isinstance(c.get("name"), str)
                                                 for c in configs):
        raise InvalidRequestError('"configs" must be an array of {"name", "value"}')
    values = {c["name"]: _config_value(request, c["name"], c.get("value")) for c in configs}
    assignment = _assignment(body.get("replicas_assignments"))
    partitions = _optional_int(body, "partitions_count")
    rf = _optional_int(body, "replication_factor")
    _check_partition_limits(request, name, len(assignment) if assignment else partitions or 1)
    created = await asyncio.to_thread(request.app[BROKER].admin.create_topic, name, partitions, rf, values,
                                      assignment)
    count = len(created.partitions)
    if not await _wait_for(request, lambda: _all_led(request, name, count), _wait_s(request)):
        return _pending(request, f"creating topic {name}", _topic_url(request, name))
    return _json(request, _topic(request, name), status=201)


def _topic_url(request: web.Request, name: str) -> str:
    return f"{_base(request)}/clusters/{request.app[BROKER].cluster_id}/topics/{name}"


def _assignment(raw: Any) -> dict[int, list[int]] | None:
    if raw is None:
        return None
    usage = '"replicas_assignments" must be [{"partition_id": int, "broker_ids": [int]}]'
    if not isinstance(raw, list):
        raise InvalidRequestError(usage)
    out: dict[int, list[int]] = {}
    for a in raw:
        if not isinstance(a, dict) or not isinstance(a.get("broker_ids"), list):
            raise InvalidRequestError(usage)
        p, brokers = a.get("partition_id"), a["broker_ids"]
        if not _small_int(p) or not all(_small_int(b) for b in brokers):
            raise InvalidRequestError(usage)
        out[p] = brokers
    return out


def _small_int(value: Any) -> bool:
    return type(value) is int and 0 <= value <= INT32_MAX


def _optional_int(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if type(value) is not int or not 0 <= value <= INT32_MAX:
        raise InvalidRequestError(f'"{key}" must be a non-negative 32-bit integer')
    return value


async def get_topic(request: web.Request) -> web.Response:
    _check_cluster(request)
    return _json(request, _topic(request, request.match_info["topic"]))


async def delete_topic(request: web.Request) -> web.Response:
    _check_cluster(request)
    name = request.match_info["topic"]
    cache = request.app[BROKER].cache
    await asyncio.to_thread(request.app[BROKER].admin.delete_topic, name)
    if not await _wait_for(request, lambda: name not in cache.topics, _wait_s(request)):
        return _pending(request, f"deleting topic {name}", _topic_url(request, name))
    return web.Response(status=204)


async def update_topic(request: web.Request) -> web.Response:
    _check_cluster(request)
    name = request.match_info["topic"]
    count = _optional_int(await _body(request), "partitions_count")
    if count is None:
        raise InvalidRequestError('"partitions_count" is required')
    _check_partition_limits(request, name, count)
    await asyncio.to_thread(request.app[BROKER].admin.add_partitions, name, count)
    if not await _wait_for(request, lambda: _all_led(request, name, count), _wait_s(request)):
        return _pending(request, f"growing topic {name} to {count} partitions", _topic_url(request, name))
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
    await asyncio.to_thread(request.app[BROKER].admin.alter_configs, name, {key: _config_value(request, key,
                                                                                              body["value"])}, [])
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
        if not isinstance(entry["name"], str):
            raise InvalidRequestError('each entry\'s "name" must be a string')
        if str(entry.get("operation", "SET")).upper() == "DELETE":
            delete.append(entry["name"])
        else:
            set_[entry["name"]] = _config_value(request, entry["name"], entry.get("value"))
    await asyncio.to_thread(request.app[BROKER].admin.alter_configs, name, set_, delete)
    return web.Response(status=204)
