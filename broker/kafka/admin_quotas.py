"""DescribeClientQuotas and AlterClientQuotas (KIP-546) over Kafka's wire protocol.

Each handler decodes, authorizes as Kafka's KafkaApis does (DescribeConfigs on the cluster to read quotas,
AlterConfigs to change them: CLUSTER_AUTHORIZATION_FAILED otherwise), calls broker/admin/client_quotas.py and
renders the answer. A default entity has a null name on the wire.
"""

from __future__ import annotations

from typing import Any

from broker.admin.client_quotas import ClientQuotaAdmin, QuotaComponent, QuotaOp
from broker.kafka import codec
from broker.kafka.apis import NO_THROTTLE, NONE, Handler, code
from broker.kafka.authorization import CLUSTER, CLUSTER_NAME, KafkaAuthorizer
from broker.kafka.codec import Request, make, nested
from broker.kafka.network import Connection
from odradek.protocol.errors import ClusterAuthorizationFailedError, OdradekError

DESCRIBE_CLIENT_QUOTAS = 48
ALTER_CLIENT_QUOTAS = 49


class QuotaApis:
    def __init__(self, quotas: ClientQuotaAdmin, authorizer: KafkaAuthorizer) -> None:
        self._quotas = quotas
        self._auth = authorizer

    def handlers(self) -> dict[int, Handler]:
        return {DESCRIBE_CLIENT_QUOTAS: self.handle_describe_client_quotas,
                ALTER_CLIENT_QUOTAS: self.handle_alter_client_quotas}

    def _refusal(self, conn: Connection, operation: str) -> OdradekError | None:
        if self._auth.allowed(conn, operation, CLUSTER, CLUSTER_NAME):
            return None
        return ClusterAuthorizationFailedError(f"{self._auth.principal(conn)} may not {operation} the cluster")

    async def handle_describe_client_quotas(self, conn: Connection, request: Request) -> Any:
        body = request.body
        cls = codec.response_class(DESCRIBE_CLIENT_QUOTAS, request.header.api_version)
        error = self._refusal(conn, "DescribeConfigs")
        found = {}
        if error is None:
            components = [QuotaComponent(str(c.entity_type), int(c.match_type), c.match) for c in body.components]
            try:
                found = await self._quotas.describe(components, bool(body.strict))
            except OdradekError as e:
                error = e
        if error is not None:
            return make(cls, throttle_time=NO_THROTTLE, error_code=code(error), error_message=error.message,
                        entries=None)
        entry_cls = nested(cls, "EntryData")
        entity_cls = nested(cls, "EntityData")
        value_cls = nested(cls, "ValueData")
        entries = tuple(
            make(entry_cls, entity=tuple(make(entity_cls, entity_type=t, entity_name=n) for t, n in entity),
                 values=tuple(make(value_cls, key=k, value=v) for k, v in sorted(values.items())))
            for entity, values in sorted(found.items(), key=lambda item: [(t, n or "") for t, n in item[0]]))
        return make(cls, throttle_time=NO_THROTTLE, error_code=NONE, error_message=None, entries=entries)

    async def handle_alter_client_quotas(self, conn: Connection, request: Request) -> Any:
        body = request.body
        cls = codec.response_class(ALTER_CLIENT_QUOTAS, request.header.api_version)
        wanted = [([(str(e.entity_type), e.entity_name) for e in entry.entity],
                   [QuotaOp(str(op.key), float(op.value), bool(op.remove)) for op in entry.ops])
                  for entry in body.entries]
        refusal = self._refusal(conn, "AlterConfigs")
        outcomes = ([refusal for _ in wanted] if refusal is not None
                    else await self._quotas.alter(wanted, validate_only=bool(body.validate_only)))
        entry_cls = nested(cls, "EntryData")
        entity_cls = nested(cls, "EntityData")
        return make(cls, throttle_time=NO_THROTTLE, entries=tuple(
            make(entry_cls, error_code=code(error), error_message=None if error is None else error.message,
                 entity=tuple(make(entity_cls, entity_type=t, entity_name=n) for t, n in entity))
            for (entity, _), error in zip(wanted, outcomes, strict=True)))
