"""Which items of a listing a caller may see: Kafka's per-item Describe filter for topic and group listings.

Why in the handlers and not in the middleware: a listing is allowed to any authenticated caller (its rule in
acl_table.py is ``AUTHENTICATED``), but what it shows depends on each item, which only the handler enumerates.
Kafka's rules (KafkaApis): Metadata for all topics shows only the topics the caller may Describe; a topic named
in the request that the caller may not Describe is answered TOPIC_AUTHORIZATION_FAILED whether or not it exists
(so a name's existence does not leak); ListGroups shows every group to a caller allowed Cluster Describe and
otherwise only the groups it may Describe. "May Describe" is the authorizer's own decision, with its implied
operations (Read, Write, Delete and Alter imply Describe), super users and ``allow.everyone.if.no.acl.found``.

Cost: ``describe_filter`` answers None when every item is visible (no security, ``--authorizer none``, a super
user such as another broker, a group listing by a Cluster Describe holder); handlers then do no per-item work.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from broker.security.authorizer import ANONYMOUS, CLUSTER_NAME
from broker.security.middleware import PRINCIPAL_KEY, SECURITY

Visible = Callable[[str], bool]


def describe_filter(request: web.Request, resource_type: str, *, cluster_describe_sees_all: bool = False) -> \
        Visible | None:
    """None: the caller sees every ``resource_type`` item. Otherwise a predicate: may it Describe this name?"""
    service = request.app.get(SECURITY)
    if service is None or not service.enforce:
        return None
    authorizer = service.authorizer
    principal = request.get(PRINCIPAL_KEY) or ANONYMOUS  # set by the middleware on every non-public route
    if principal in authorizer.super_users:
        return None
    host = request.remote or "*"  # as the middleware checks it
    if cluster_describe_sees_all and authorizer.authorize(principal, host, "Describe", "Cluster", CLUSTER_NAME):
        return None
    authorize = authorizer.authorize
    return lambda name: authorize(principal, host, "Describe", resource_type, name)
