"""The route table and the application factory: every path the broker serves, in one place."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker.api import admin_v3, controller_ops, fetch, metadata, ops, produce
from broker.api.context import BROKER, OPENAPI
from broker.api.errors import error_middleware
from broker.api.openapi import spec

if TYPE_CHECKING:
    from broker.server import Broker


@web.middleware
async def metrics_middleware(request: web.Request,
                             handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    started = time.perf_counter()
    response = await handler(request)
    route = request.match_info.route.resource.canonical if request.match_info.route.resource else "unmatched"
    metrics = request.app[BROKER].metrics
    metrics.requests.labels(route, str(response.status)).inc()
    metrics.latency.labels(route).observe(time.perf_counter() - started)
    return response


def routes() -> list[web.RouteDef]:
    t, p = "/topics/{topic}", "/topics/{topic}/partitions/{partition}"
    c = "/v3/clusters/{cluster_id}"
    return [
        web.get("/health", ops.health),
        web.get("/metrics", ops.metrics),
        web.get("/openapi.json", ops.openapi),
        web.get("/metadata", metadata.metadata),
        web.get("/brokers", metadata.brokers),
        web.get("/topics", metadata.topics),
        web.get(t, metadata.topic),
        web.post(t, produce.produce_json),
        web.get(f"{t}/partitions", metadata.partitions),
        web.get(p, metadata.partition),
        web.post(p, produce.produce_json),
        web.get(f"{p}/offsets", metadata.partition_offsets),
        web.get(f"{p}/records", fetch.read_records),
        web.get(f"{p}/batches", fetch.fetch_batches),
        web.post(f"{p}/batches", produce.produce_batches),
        web.get(f"{p}/epoch_end_offset", fetch.epoch_end_offset),
        web.post("/controller/controlled_shutdown", controller_ops.controlled_shutdown),
        web.post("/admin/preferred_leader_election", controller_ops.preferred_election),
        web.get("/v3/clusters", admin_v3.list_clusters),
        web.get(c, admin_v3.get_cluster),
        web.get(f"{c}/topics", admin_v3.list_topics),
        web.post(f"{c}/topics", admin_v3.create_topic),
        web.get(f"{c}/topics/{{topic}}", admin_v3.get_topic),
        web.delete(f"{c}/topics/{{topic}}", admin_v3.delete_topic),
        web.patch(f"{c}/topics/{{topic}}", admin_v3.update_topic),
        web.get(f"{c}/topics/{{topic}}/configs", admin_v3.list_configs),
        web.post(f"{c}/topics/{{topic}}/configs:alter", admin_v3.alter_configs),
        web.get(f"{c}/topics/{{topic}}/configs/{{name}}", admin_v3.get_config),
        web.put(f"{c}/topics/{{topic}}/configs/{{name}}", admin_v3.put_config),
        web.delete(f"{c}/topics/{{topic}}/configs/{{name}}", admin_v3.delete_config),
    ]


def create_app(broker: Broker, *, client_max_size: int = 64 * 1024 * 1024) -> web.Application:
    app = web.Application(middlewares=[metrics_middleware, error_middleware], client_max_size=client_max_size)
    app[BROKER] = broker
    app[OPENAPI] = spec(route_table())
    app.add_routes(routes())
    return app


def route_table() -> list[tuple[str, str]]:
    """(method, path) of every route, for the OpenAPI document and its test."""
    out: list[tuple[str, str]] = []
    for r in routes():
        info: Any = r
        out.append((info.method, info.path))
    return out
