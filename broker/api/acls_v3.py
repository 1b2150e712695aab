"""ACLs under Confluent's v3 API, on the ACL admin service (broker/admin/acls.py, the store kafka-acls.sh and the
Kafka door's CreateAcls/DeleteAcls/DescribeAcls share):

    GET    /v3/clusters/{c}/acls?resource_type=&resource_name=&pattern_type=&principal=&host=&operation=&permission=
                                          KafkaAclList: the ACLs the filter matches (every field optional)
    POST   /v3/clusters/{c}/acls          one ACL {"resource_type", "resource_name", "pattern_type", "principal",
                                          "host", "operation", "permission"}: 201, Location naming it
    POST   /v3/clusters/{c}/acls:batch    {"data": [ACL, ...]}: 201
    DELETE /v3/clusters/{c}/acls?...      the ACLs the filter matches, removed: {"data": [KafkaAcl, ...]}
                                          (resource_type, pattern_type, operation, permission required; ANY allowed)

As kafka-rest's resources/v3/AclsResource.java, CreateAclBatchAction.java and entities/v3/AclData.java (and
api/v3/openapi.yaml): names are Kafka's enum names (TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID; LITERAL, PREFIXED,
MATCH, ANY; READ, WRITE, ..., CLUSTER_ACTION, DESCRIBE_CONFIGS, ...; ALLOW, DENY), read case-insensitively;
UNKNOWN is 400, and ANY (or MATCH) where an ACL needs a value is 400. Each ACL's ``metadata.self`` is the
search that finds exactly it. Lists are sorted by resource type, name, pattern type, principal, host,
operation and permission (Kafka's enum orders), as Confluent sorts them.

As Kafka's brokers do, a broker that runs no authorizer refuses ACL requests (400 SECURITY_DISABLED): ACLs it
stored would not be enforced, and an operator must not believe they are. Authorization is the route table's:
Cluster Describe to list, Cluster Alter to create or delete (Kafka's DescribeAcls/CreateAcls/DeleteAcls rules).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from broker.admin.acls import AclAdmin, AclBinding, AclFilter
from broker.api.context import BROKER
from broker.api.links_v3 import V3, check_cluster, json_v3, v3
from broker.api.params import load_json_object
from broker.security.middleware import SECURITY
from odradek.protocol.errors import InvalidRequestError, OdradekError, SecurityDisabledError

# Kafka's enum names (their declaration order is Confluent's sort order) <-> the names the store uses.
RESOURCE_TYPES = {"TOPIC": "Topic", "GROUP": "Group", "CLUSTER": "Cluster", "TRANSACTIONAL_ID": "TransactionalId"}
PATTERN_TYPES = {"MATCH": "MATCH", "LITERAL": "LITERAL", "PREFIXED": "PREFIXED"}
OPERATIONS = {"ALL": "All", "READ": "Read", "WRITE": "Write", "CREATE": "Create", "DELETE": "Delete",
              "ALTER": "Alter", "DESCRIBE": "Describe", "CLUSTER_ACTION": "ClusterAction",
              "DESCRIBE_CONFIGS": "DescribeConfigs", "ALTER_CONFIGS": "AlterConfigs",
              "IDEMPOTENT_WRITE": "IdempotentWrite"}
PERMISSIONS = {"DENY": "Deny", "ALLOW": "Allow"}
FIELDS = ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation", "permission")
MAX_BATCH = 1000


def _choice(raw: Any, table: dict[str, str], field: str, *, any_ok: bool) -> str | None:
    """A Kafka enum name as the store's name; None for ANY where a filter allows it (400 otherwise)."""
    if not isinstance(raw, str):
        raise InvalidRequestError(f'"{field}" must be a string')
    name = raw.strip().upper()
    if name == "ANY" and any_ok:
        return None
    value = table.get(name)
    if value is None or (not any_ok and name == "MATCH"):  # MATCH is a filter's pattern type, not an ACL's
        allowed = [k for k in table if any_ok or k != "MATCH"] + (["ANY"] if any_ok else [])
        raise InvalidRequestError(f"{field} cannot be {raw[:40]!r}: one of {', '.join(allowed)}")
    return value


def _kafka_name(table: dict[str, str], value: str) -> str:
    return next(k for k, v in table.items() if v == value)


def acl_filter(query: dict[str, str], *, required: tuple[str, ...] = ()) -> AclFilter:
    """A search (GET) or delete (DELETE) filter from the query; an empty name, principal or host matches any."""
    for field in required:
        if field not in query:
            raise InvalidRequestError(f'"{field}" is required (ANY matches every value)')

    def get(field: str) -> str:
        return query.get(field, "ANY")

    pattern = _choice(get("pattern_type"), PATTERN_TYPES, "pattern_type", any_ok=True)
    return AclFilter(
        resource_type=_choice(get("resource_type"), RESOURCE_TYPES, "resource_type", any_ok=True),
        name=query.get("resource_name") or None, pattern=pattern or "ANY",
        principal=query.get("principal") or None, host=query.get("host") or None,
        operation=_choice(get("operation"), OPERATIONS, "operation", any_ok=True),
        permission=_choice(get("permission"), PERMISSIONS, "permission", any_ok=True))


def acl_binding(body: Any) -> AclBinding:
    """One ACL to create (CreateAclRequest): every field required, no ANY."""
    if not isinstance(body, dict):
        raise InvalidRequestError("an ACL must be a JSON object")
    missing = [f for f in FIELDS if not isinstance(body.get(f), str)]
    if missing:
        raise InvalidRequestError(f"an ACL needs string fields {', '.join(FIELDS)}; missing or not strings: "
                                  f"{', '.join(missing)}")
    for f in FIELDS:
        try:
            body[f].encode()
        except UnicodeEncodeError:  # a lone surrogate ("\\ud800"): the store writes UTF-8
            raise InvalidRequestError(f'"{f}" holds a lone UTF-16 surrogate, which is not text') from None
    return AclBinding(str(_choice(body["resource_type"], RESOURCE_TYPES, "resource_type", any_ok=False)),
                      body["resource_name"],
                      str(_choice(body["pattern_type"], PATTERN_TYPES, "pattern_type", any_ok=False)),
                      body["principal"], body["host"],
                      str(_choice(body["operation"], OPERATIONS, "operation", any_ok=False)),
                      str(_choice(body["permission"], PERMISSIONS, "permission", any_ok=False)))


def acl_query(b: AclBinding) -> dict[str, str]:
    return {"resource_type": _kafka_name(RESOURCE_TYPES, b.resource_type), "resource_name": b.name,
            "pattern_type": b.pattern, "principal": b.principal, "host": b.host,
            "operation": _kafka_name(OPERATIONS, b.operation), "permission": _kafka_name(PERMISSIONS, b.permission)}


def acl_data(links: V3, b: AclBinding) -> dict[str, Any]:
    q = acl_query(b)
    return {"kind": "KafkaAcl", "metadata": {"self": links.url("acls", query=q)}, "cluster_id": links.cluster_id,
            **q}


def sort_key(b: AclBinding) -> tuple[Any, ...]:
    order = (list(RESOURCE_TYPES.values()), ["MATCH", "LITERAL", "PREFIXED"], list(OPERATIONS.values()),
             list(PERMISSIONS.values()))
    return (order[0].index(b.resource_type) if b.resource_type in order[0] else 99, b.name,
            order[1].index(b.pattern) if b.pattern in order[1] else 99, b.principal, b.host,
            order[2].index(b.operation) if b.operation in order[2] else 99,
            order[3].index(b.permission) if b.permission in order[3] else 99)


def _filter_query(query: dict[str, str]) -> dict[str, str]:
    """The search as Confluent's ``metadata.self`` spells it: every field, enums upper-case."""
    return {f: (query.get(f, "") if f in ("resource_name", "principal", "host") else query.get(f, "ANY").upper())
            for f in FIELDS}


# -------------------------------------------------------------------------------------------------- handlers


def _admin(request: web.Request) -> AclAdmin:
    """The ACL service over this broker's ZooKeeper client; refused (SECURITY_DISABLED) without an authorizer."""
    service = request.app.get(SECURITY)
    if service is None or not service.enforce:
        raise SecurityDisabledError("No Authorizer is configured on the broker: ACLs would not be enforced "
                                    "(start brokers with --authorizer acl)")
    return AclAdmin(request.app[BROKER].zk)


async def search_acls(request: web.Request) -> web.Response:
    check_cluster(request)
    f = acl_filter(dict(request.query))
    found = sorted(await _admin(request).describe(f), key=sort_key)
    links = v3(request)
    return json_v3(request, {"kind": "KafkaAclList",
                             "metadata": {"self": links.url("acls", query=_filter_query(dict(request.query)))},
                             "data": [acl_data(links, b) for b in found]})


async def _create(request: web.Request, bindings: list[AclBinding]) -> None:
    outcomes = await _admin(request).create(bindings)
    failed: list[OdradekError] = [e for e in outcomes if e is not None]
    if failed:
        raise failed[0]


async def create_acl(request: web.Request) -> web.Response:
    check_cluster(request)
    binding = acl_binding(load_json_object(await request.read() or b"{}"))
    await _create(request, [binding])
    response = web.Response(status=201)
    response.headers["Location"] = v3(request).url("acls", query=acl_query(binding))
    return response


async def create_acls_batch(request: web.Request) -> web.Response:
    check_cluster(request)
    body = load_json_object(await request.read() or b"{}")
    items = body.get("data")
    if not isinstance(items, list) or len(items) > MAX_BATCH:
        raise InvalidRequestError(f'the body must be {{"data": [ACL, ...]}} with at most {MAX_BATCH} ACLs')
    bindings = [acl_binding(item) for item in items]  # all checked before any is created
    if bindings:
        await _create(request, bindings)
    return web.Response(status=201)


async def delete_acls(request: web.Request) -> web.Response:
    check_cluster(request)
    f = acl_filter(dict(request.query), required=("resource_type", "pattern_type", "operation", "permission"))
    (outcome,) = await _admin(request).delete([f])
    if isinstance(outcome, OdradekError):
        raise outcome
    links = v3(request)
    return json_v3(request, {"data": [acl_data(links, b) for b in sorted(outcome, key=sort_key)]})


def routes() -> list[web.RouteDef]:
    c = "/v3/clusters/{cluster_id}"
    return [
        web.get(f"{c}/acls", search_acls),
        web.post(f"{c}/acls", create_acl),
        web.delete(f"{c}/acls", delete_acls),
        web.post(f"{c}/acls:batch", create_acls_batch),
    ]
