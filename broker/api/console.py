"""The web console (issue 29; docs/console.md): GET /ui serves the page, /ui/{asset} its script, style and icon,
and GET /ui/api/brokers is the one JSON view the console needs that no other route gives.

    GET /ui                  the page (broker/console/static/index.html); the console's pages are its #fragments
    GET /ui/{asset}          app.js, style.css, favicon.svg: only the assets broker/console names (404 otherwise)
    GET /ui/api/brokers      every broker of the cluster as each answers for itself: {"broker_id" (this one),
                             "controller_id", "time_ms", "brokers": [{"id", "url", "registered", "reachable",
                             "error", "health"?, "log_dirs"?, "counters"?}]}; ``?include=health,log_dirs,metrics``
                             (default health) picks what is asked of each broker

Why the console is served by every broker and calls the API from the page: the cluster's own HTTP port already
carries the API, its authentication and its ACLs, so the console adds no service to deploy and no second path to
the data. The page and its assets hold no data, so serving them needs no identity (as /openapi.json); every
figure on a page comes from a JSON route, checked by security like any client's call.

Why /ui/api/brokers: a browser may only call the origin it loaded the page from, and /health, /admin/log_dirs and
/metrics each describe the broker that answers. This route asks every broker (registered, or named in a replica
set: a dead broker is listed too, as unreachable) over the inter-broker client, in parallel with a short timeout,
and returns their answers as they are, plus a few counter totals read from each /metrics (what the overview's
rate charts difference). It is read-only and runs no rule of its own: what it shows is what each broker's own
routes answer. Its authorization is Cluster Describe, as /admin/log_dirs and /metrics.

Caching: the page is revalidated on every load (``no-cache`` with an ``ETag``); it links each asset as
``/ui/<name>?v=<content hash>`` and such a versioned link is cached for a year, ``immutable``. An asset asked for
without the current version is revalidated like the page. Every answer carries a Content-Security-Policy that
allows only this origin (no inline script, no other host), so a value shown on a page can never run as code.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from broker import console
from broker.api.context import BROKER, json_response
from broker.interbroker import Request
from odradek.protocol.errors import InvalidRequestError, OdradekError, RouteNotFoundError

PROBE_TIMEOUT_S = 2.0  # per broker: a broker slower than this to answer is shown as unreachable this time
INCLUDES = ("health", "log_dirs", "metrics")
_PATHS = {"health": "/health", "log_dirs": "/admin/log_dirs", "metrics": "/metrics"}

SECURITY_HEADERS = {
    "Content-Security-Policy": ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                                "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
                                "frame-ancestors 'none'"),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}
REVALIDATE = "no-cache"
FOREVER = "public, max-age=31536000, immutable"

# The HTTP routes whose requests the overview counts as produce or fetch requests (the request counter is by
# route, not method: "/topics/{topic}" also answers v2's GET of a topic, ".../batches" followers' fetches too).
PRODUCE_ROUTES = frozenset({"/topics/{topic}", "/topics/{topic}/partitions/{partition}",
                            "/v3/clusters/{cluster_id}/topics/{topic}/records"})
FETCH_ROUTES = frozenset({"/topics/{topic}/partitions/{partition}/records",
                          "/topics/{topic}/partitions/{partition}/batches",
                          "/topics/{topic}/partitions/{partition}/messages",
                          "/consumers/{group}/instances/{instance}/records",
                          "/consumers/{group}/instances/{instance}/topics/{topic}"})


def _asset_response(request: web.Request, asset: console.Asset, cache_control: str) -> web.Response:
    etag = f'"{asset.version}"'
    headers = {**SECURITY_HEADERS, "Cache-Control": cache_control, "ETag": etag}
    if etag in {t.strip() for t in request.headers.get("If-None-Match", "").split(",")}:
        return web.Response(status=304, headers=headers)
    return web.Response(body=asset.body, headers={**headers, "Content-Type": asset.content_type})


async def page(request: web.Request) -> web.Response:
    return _asset_response(request, console.page(), REVALIDATE)


async def asset(request: web.Request) -> web.Response:
    name = request.match_info["asset"]
    found = console.asset(name)
    if found is None or name == console.PAGE:
        raise RouteNotFoundError(f"the console has no asset {name[:100]!r}")
    versioned = request.query.get("v") == found.version
    return _asset_response(request, found, FOREVER if versioned else REVALIDATE)


def _includes(request: web.Request) -> list[str]:
    raw = request.query.get("include", "health")
    wanted = [part for part in raw.split(",") if part]
    unknown = [part for part in wanted if part not in INCLUDES]
    if unknown or not wanted:
        raise InvalidRequestError(f"include takes a comma-separated list of {', '.join(INCLUDES)}")
    return wanted


def counters(metrics_text: str) -> dict[str, float]:
    """Totals the overview's charts difference into rates: records appended to the partitions the broker leads
    (the sum of their log end offsets), and produce and fetch requests over both front doors."""
    out = {"records_in": 0.0, "produce_requests": 0.0, "fetch_requests": 0.0}
    leader_ends: dict[tuple[str, str], float] = {}
    led: set[tuple[str, str]] = set()
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "odradek_partition_log_end_offset":
                leader_ends[(labels.get("topic", ""), labels.get("partition", ""))] = sample.value
            elif sample.name == "odradek_partition_is_leader" and sample.value == 1:
                led.add((labels.get("topic", ""), labels.get("partition", "")))
            elif sample.name == "odradek_kafka_requests_total":
                api = labels.get("api")
                if api == "Produce":
                    out["produce_requests"] += sample.value
                elif api == "Fetch":
                    out["fetch_requests"] += sample.value
            elif sample.name == "odradek_http_requests_total":
                route = labels.get("route", "")
                if route in PRODUCE_ROUTES:
                    out["produce_requests"] += sample.value
                elif route in FETCH_ROUTES:
                    out["fetch_requests"] += sample.value
    out["records_in"] = sum(end for tp, end in leader_ends.items() if tp in led)
    return out


async def _ask(request: web.Request, broker_id: int, what: str) -> Any:
    reply = await request.app[BROKER].interbroker.send(broker_id, Request("GET", _PATHS[what],
                                                                          timeout_s=PROBE_TIMEOUT_S))
    if what == "metrics":
        return counters(reply.body.decode("utf-8", "replace"))
    return reply.json()


async def _probe(request: web.Request, broker_id: int, url: str | None, wanted: list[str]) -> dict[str, Any]:
    row: dict[str, Any] = {"id": broker_id, "url": url, "registered": url is not None, "reachable": False,
                           "error": None}
    if url is None:
        row["error"] = "not registered in ZooKeeper"
        return row
    answers = await asyncio.gather(*(_ask(request, broker_id, what) for what in wanted), return_exceptions=True)
    reached = False
    for what, answer in zip(wanted, answers, strict=True):
        if isinstance(answer, OdradekError):
            row["error"] = row["error"] or f"{what}: {answer.name}: {answer}"
            # an error answer is still an answer: only a transport failure means the broker is unreachable
            reached = reached or answer.name != "BROKER_NOT_AVAILABLE"
        elif isinstance(answer, BaseException):
            raise answer
        else:
            row[what if what != "metrics" else "counters"] = answer
            reached = True
    row["reachable"] = reached
    return row


async def brokers(request: web.Request) -> web.Response:
    wanted = _includes(request)
    broker = request.app[BROKER]
    cache = broker.cache
    registered = {broker_id: info.url for broker_id, info in cache.brokers.items()}
    named = {b for assignment in cache.topics.values() for replicas in assignment.partitions.values()
             for b in replicas}
    ids = sorted(set(registered) | named)
    rows = await asyncio.gather(*(_probe(request, i, registered.get(i), wanted) for i in ids))
    return json_response({"broker_id": broker.broker_id, "controller_id": broker.controller_id,
                          "time_ms": int(time.time() * 1000), "brokers": rows})


async def zookeeper(request: web.Request) -> web.Response:
    """The ZooKeeper ensemble of this broker's connect string, each server as it describes itself (its mode:
    leader, follower, standalone; a server that does not answer is listed with why)."""
    return json_response({"servers": await request.app[BROKER].zookeeper_ensemble()})


def routes() -> list[web.RouteDef]:
    return [
        web.get("/ui", page),
        web.get("/ui/api/brokers", brokers),
        web.get("/ui/api/zookeeper", zookeeper),
        web.get("/ui/{asset}", asset),
    ]
