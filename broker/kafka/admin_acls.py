"""DescribeAcls, CreateAcls and DeleteAcls over Kafka's wire protocol, and Kafka's ACL wire codes.

Each handler decodes, authorizes as Kafka's KafkaApis does (Describe on the cluster to list ACLs, Alter on the
cluster to change them: CLUSTER_AUTHORIZATION_FAILED otherwise), calls broker/admin/acls.py and renders the
request's version. A broker that runs no authorizer answers SECURITY_DISABLED, as Kafka does: ACLs it stored
would not be enforced, and an operator must not believe they are. A code Kafka defines but this broker cannot
store (a USER or DELEGATION_TOKEN resource, the token operations) or one that is not a valid choice (UNKNOWN,
ANY where a binding needs a value) is INVALID_REQUEST for that item.
"""

from __future__ import annotations

from typing import Any

from broker.admin.acls import AclAdmin, AclBinding, AclFilter
from broker.kafka import codec
from broker.kafka.apis import NO_THROTTLE, NONE, Handler, code
from broker.kafka.authorization import CLUSTER, CLUSTER_NAME, KafkaAuthorizer
from broker.kafka.codec import Request, make, nested
from broker.kafka.network import Connection
from odradek.protocol.errors import (
    ClusterAuthorizationFailedError,
    InvalidRequestError,
    OdradekError,
    SecurityDisabledError,
)

DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31

# Kafka's wire codes (org.apache.kafka.common.resource / acl) <-> the names the authorizer and the store use.
ANY = 1
RESOURCE_TYPES = {2: "Topic", 3: "Group", 4: "Cluster", 5: "TransactionalId"}
PATTERN_TYPES = {1: "ANY", 2: "MATCH", 3: "LITERAL", 4: "PREFIXED"}
OPERATIONS = {2: "All", 3: "Read", 4: "Write", 5: "Create", 6: "Delete", 7: "Alter", 8: "Describe",
              9: "ClusterAction", 10: "DescribeConfigs", 11: "AlterConfigs", 12: "IdempotentWrite"}
PERMISSIONS = {2: "Deny", 3: "Allow"}
CODES: dict[str, int] = {name: c for table in (RESOURCE_TYPES, PATTERN_TYPES, OPERATIONS, PERMISSIONS)
                         for c, name in table.items()}


def _named(table: dict[int, str], value: int, what: str, any_ok: bool) -> str | None:
    """The name of a wire code; None for ANY where a filter allows it."""
    if any_ok and value == ANY:
        return None
    name = table.get(value)
    if name is None:
        raise InvalidRequestError(f"{what} {value} is not one this broker can store or match")
    return name


def decode_filter(f: Any) -> AclFilter:
    """A DescribeAcls request or a DeleteAcls filter as an ``AclFilter`` (INVALID_REQUEST for an unknown code)."""
    pattern = PATTERN_TYPES.get(int(getattr(f, "pattern_type_filter", 3)))
    if pattern is None:
        raise InvalidRequestError(f"pattern type {getattr(f, 'pattern_type_filter', None)} is not a filter's")
    return AclFilter(
        resource_type=_named(RESOURCE_TYPES, int(f.resource_type_filter), "resource type", True),
        name=f.resource_name_filter, pattern=pattern, principal=f.principal_filter, host=f.host_filter,
        operation=_named(OPERATIONS, int(f.operation), "operation", True),
        permission=_named(PERMISSIONS, int(f.permission_type), "permission type", True))


def decode_binding(c: Any) -> AclBinding:
    pattern = PATTERN_TYPES.get(int(getattr(c, "resource_pattern_type", 3)), "")
    if pattern not in ("LITERAL", "PREFIXED"):
        raise InvalidRequestError("an ACL's pattern type is LITERAL (3) or PREFIXED (4)")
    return AclBinding(str(_named(RESOURCE_TYPES, int(c.resource_type), "resource type", False)),
                      str(c.resource_name), pattern, str(c.principal), str(c.host),
                      str(_named(OPERATIONS, int(c.operation), "operation", False)),
                      str(_named(PERMISSIONS, int(c.permission_type), "permission type", False)))


class AclApis:
    def __init__(self, acls: AclAdmin, authorizer: KafkaAuthorizer) -> None:
        self._acls = acls
        self._auth = authorizer

    def handlers(self) -> dict[int, Handler]:
        return {DESCRIBE_ACLS: self.handle_describe_acls, CREATE_ACLS: self.handle_create_acls,
                DELETE_ACLS: self.handle_delete_acls}

    def _refusal(self, conn: Connection, operation: str) -> OdradekError | None:
        if not self._auth.enforcing:
            return SecurityDisabledError("No Authorizer is configured on the broker")
        if not self._auth.allowed(conn, operation, CLUSTER, CLUSTER_NAME):
            return ClusterAuthorizationFailedError(f"{self._auth.principal(conn)} may not {operation} the cluster")
        return None

    # ------------------------------------------------------------------------------------------ DescribeAcls

    async def handle_describe_acls(self, conn: Connection, request: Request) -> Any:
        cls = codec.response_class(DESCRIBE_ACLS, request.header.api_version)
        error = self._refusal(conn, "Describe")
        found: list[AclBinding] = []
        if error is None:
            try:
                found = await self._acls.describe(decode_filter(request.body))
            except OdradekError as e:
                error = e
        if error is not None:
            return make(cls, throttle_time=NO_THROTTLE, error_code=code(error), error_message=error.message,
                        resources=())
        resource_cls = nested(cls, "DescribeAclsResource")
        acl_cls = nested(cls, "AclDescription")
        grouped: dict[tuple[str, str, str], list[AclBinding]] = {}
        for b in found:
            grouped.setdefault((b.resource_type, b.name, b.pattern), []).append(b)
        resources = tuple(
            make(resource_cls, resource_type=CODES[rtype], resource_name=name, pattern_type=CODES[pattern],
                 acls=tuple(make(acl_cls, principal=b.principal, host=b.host, operation=CODES.get(b.operation, 0),
                                 permission_type=CODES.get(b.permission, 0)) for b in bindings))
            for (rtype, name, pattern), bindings in grouped.items())
        return make(cls, throttle_time=NO_THROTTLE, error_code=NONE, error_message=None, resources=resources)

    # -------------------------------------------------------------------------------------------- CreateAcls

    async def handle_create_acls(self, conn: Connection, request: Request) -> Any:
        cls = codec.response_class(CREATE_ACLS, request.header.api_version)
        result_cls = nested(cls, "AclCreationResult")
        creations = request.body.creations
        refusal = self._refusal(conn, "Alter")
        outcomes: list[OdradekError | None]
        if refusal is not None:
            outcomes = [refusal for _ in creations]
        else:
            decoded: list[AclBinding | OdradekError] = []
            for c in creations:
                try:
                    decoded.append(decode_binding(c))
                except OdradekError as e:
                    decoded.append(e)
            valid = [b for b in decoded if isinstance(b, AclBinding)]
            done = iter(await self._acls.create(valid))
            outcomes = [b if isinstance(b, OdradekError) else next(done) for b in decoded]
        return make(cls, throttle_time=NO_THROTTLE, results=tuple(
            make(result_cls, error_code=code(e), error_message=None if e is None else e.message) for e in outcomes))

    # -------------------------------------------------------------------------------------------- DeleteAcls

    async def handle_delete_acls(self, conn: Connection, request: Request) -> Any:
        cls = codec.response_class(DELETE_ACLS, request.header.api_version)
        result_cls = nested(cls, "DeleteAclsFilterResult")
        matching_cls = nested(cls, "DeleteAclsMatchingAcl")
        filters = request.body.filters
        refusal = self._refusal(conn, "Alter")
        outcomes: list[list[AclBinding] | OdradekError]
        if refusal is not None:
            outcomes = [refusal for _ in filters]
        else:
            decoded: list[AclFilter | OdradekError] = []
            for f in filters:
                try:
                    decoded.append(decode_filter(f))
                except OdradekError as e:
                    decoded.append(e)
            valid = [f for f in decoded if isinstance(f, AclFilter)]
            done = iter(await self._acls.delete(valid))
            outcomes = [f if isinstance(f, OdradekError) else next(done) for f in decoded]
        results = []
        for outcome in outcomes:
            if isinstance(outcome, OdradekError):
                results.append(make(result_cls, error_code=code(outcome), error_message=outcome.message,
                                    matching_acls=()))
                continue
            results.append(make(result_cls, error_code=NONE, error_message=None, matching_acls=tuple(
                make(matching_cls, error_code=NONE, error_message=None, resource_type=CODES[b.resource_type],
                     resource_name=b.name, pattern_type=CODES[b.pattern], principal=b.principal, host=b.host,
                     operation=CODES.get(b.operation, 0), permission_type=CODES.get(b.permission, 0))
                for b in outcome)))
        return make(cls, throttle_time=NO_THROTTLE, filter_results=tuple(results))
