"""Listings show only what the caller may Describe (Kafka's Metadata and ListGroups), and cost nothing when
security is off: the handlers run on a fake broker, with and without a security service."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import orjson
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from broker.api import admin_v3, groups, metadata
from broker.api.context import BROKER
from broker.security.authorizer import Acl
from broker.security.middleware import PRINCIPAL_KEY, SECURITY, SecurityService
from broker.security.settings import SecuritySettings, parse_listeners
from broker.security.visibility import describe_filter

TOPICS = ("orders", "other", "public")
GROUPS = ("billing", "other-group")
ACLS = {
    ("Topic", "LITERAL"): {"orders": [Acl("User:alice", "Allow", "Read")],
                           "other": [Acl("User:alice", "Allow", "AlterConfigs")],  # does not imply Describe
                           "public": [Acl("User:*", "Allow", "Describe"), Acl("User:mallory", "Deny", "Describe")]},
    ("Group", "LITERAL"): {"billing": [Acl("User:alice", "Allow", "Read")]},
    ("Cluster", "LITERAL"): {"kafka-cluster": [Acl("User:ops", "Allow", "Describe")]},
}


def _broker() -> Any:
    ready = asyncio.Event()
    ready.set()
    assignment = SimpleNamespace(partitions={0: [1]}, topic_id="id")
    store = SimpleNamespace(list_groups=lambda: list(GROUPS), get_state=lambda g: {"state": "Empty"},
                            get_coordinator=lambda g: 1)
    return SimpleNamespace(
        ready=ready, cluster_id="c1", controller_id=1, info=lambda: SimpleNamespace(url="http://b1"),
        cache=SimpleNamespace(topics={t: assignment for t in TOPICS}, partitions={},
                              brokers={1: SimpleNamespace(broker_id=1, url="http://b1", rack=None)}),
        groups=SimpleNamespace(store=store),
    )


def _service(*, allow_if_no_acl: bool = False, authorizer: str = "acl") -> SecurityService:
    settings = SecuritySettings(listeners=tuple(parse_listeners("SSL://127.0.0.1:9093")),
                                super_users=frozenset({"User:CN=admin"}), authorizer=authorizer,
                                allow_everyone_if_no_acl_found=allow_if_no_acl)
    service = SecurityService(settings, None)
    service.authorizer.replace(ACLS)
    return service


def _app(service: SecurityService | None) -> web.Application:
    app = web.Application()
    app[BROKER] = _broker()
    app[SECURITY] = service
    return app


def _call(app: web.Application, handler: Any, path: str, principal: str | None, **match: str) -> Any:
    transport = SimpleNamespace(get_extra_info=lambda key, default=None: ("127.0.0.1", 5555) if key == "peername"
                                else default, is_closing=lambda: False)
    request = make_mocked_request("GET", path, app=app, match_info=match, transport=transport)
    if principal is not None:
        request[PRINCIPAL_KEY] = principal
    response = asyncio.run(handler(request))
    assert response.status == 200
    return orjson.loads(response.body)


def _listings(app: web.Application, principal: str | None) -> dict[str, list[str]]:
    return {
        "metadata": [t["name"] for t in _call(app, metadata.metadata, "/metadata", principal)["topics"]],
        "v2": _call(app, metadata.topics, "/topics", principal),
        "v3": [t["topic_name"] for t in _call(app, admin_v3.list_topics, "/v3/clusters/c1/topics", principal,
                                              cluster_id="c1")["data"]],
        "groups": [g["group"] for g in _call(app, groups.list_groups, "/groups", principal)["groups"]],
    }


def _all(topics: tuple[str, ...] = TOPICS, groups_: tuple[str, ...] = GROUPS) -> dict[str, list[str]]:
    return {"metadata": list(topics), "v2": list(topics), "v3": list(topics), "groups": list(groups_)}


def test_security_off_lists_everything() -> None:
    assert _listings(_app(None), None) == _all()


def test_a_principal_sees_what_it_may_describe() -> None:
    app = _app(_service())
    assert _listings(app, "User:alice") == _all(("orders", "public"), ("billing",))  # Read implies Describe
    assert _listings(app, "User:mallory") == _all((), ())  # Deny Describe hides "public"
    assert _listings(app, "User:ops") == _all(("public",))  # Cluster Describe lists every group
    assert _listings(app, "User:CN=admin") == _all()


def test_a_named_topic_it_may_not_describe_is_refused_existing_or_not() -> None:
    app = _app(_service())
    body = _call(app, metadata.metadata, "/metadata?topics=orders,other,ghost", "User:alice")
    assert [(t["name"], t["error"], bool(t["partitions"])) for t in body["topics"]] == [
        ("orders", None, True), ("other", "TOPIC_AUTHORIZATION_FAILED", False),
        ("ghost", "TOPIC_AUTHORIZATION_FAILED", False)]
    body = _call(app, metadata.metadata, "/metadata?topics=other,ghost", "User:CN=admin")
    assert [(t["name"], t["error"]) for t in body["topics"]] == [("other", None), ("ghost", "UNKNOWN_TOPIC")]


def test_allow_everyone_if_no_acl_found() -> None:
    app = _app(_service(allow_if_no_acl=True))
    app[BROKER].cache.topics["no-acl"] = app[BROKER].cache.topics["orders"]
    listed = _listings(app, "User:dave")
    assert listed["v2"] == ["no-acl", "public"] and listed["groups"] == ["other-group"]


def test_no_per_item_check_when_everything_is_visible() -> None:
    def refuse(*args: object) -> bool:
        raise AssertionError(f"per-item authorization without need: {args}")

    for service, principal in ((None, None), (_service(authorizer="none"), "User:alice"),
                               (_service(), "User:CN=admin")):
        app = _app(service)
        if service is not None:
            service.authorizer.authorize = refuse  # type: ignore[method-assign]
        assert _listings(app, principal) == _all()
        request = make_mocked_request("GET", "/topics", app=app)
        if principal is not None:
            request[PRINCIPAL_KEY] = principal
        assert describe_filter(request, "Topic") is None
