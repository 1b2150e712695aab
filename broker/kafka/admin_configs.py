"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs over Kafka's wire protocol.

Each handler decodes, authorizes each resource as Kafka's KafkaApis does (DescribeConfigs / AlterConfigs on the
topic, or on the cluster for a broker resource: TOPIC_ or CLUSTER_AUTHORIZATION_FAILED for that resource only),
calls broker/admin/config_requests.py and renders the request's version: synonyms only when asked
(``include_synonyms``), documentation only when asked (v3+), config types from v3. Resources are answered in
the order asked, each with its own error.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any

from broker.admin.config_entries import ConfigEntry
from broker.admin.config_requests import AlterOp, ConfigRequests, ConfigResource, ResourceType
from broker.admin.topic_requests import typed
from broker.kafka import codec
from broker.kafka.apis import NO_THROTTLE, NONE, Handler, code
from broker.kafka.authorization import CLUSTER, CLUSTER_NAME, TOPIC, KafkaAuthorizer
from broker.kafka.codec import Request, make, nested
from broker.kafka.network import Connection
from odradek.protocol.errors import (
    ClusterAuthorizationFailedError,
    InvalidRequestError,
    OdradekError,
    TopicAuthorizationFailedError,
)

DESCRIBE_CONFIGS = 32
ALTER_CONFIGS = 33
INCREMENTAL_ALTER_CONFIGS = 44


class ConfigApis:
    def __init__(self, configs: ConfigRequests, authorizer: KafkaAuthorizer) -> None:
        self._configs = configs
        self._auth = authorizer

    def handlers(self) -> dict[int, Handler]:
        return {DESCRIBE_CONFIGS: self.handle_describe_configs, ALTER_CONFIGS: self.handle_alter_configs,
                INCREMENTAL_ALTER_CONFIGS: self.handle_incremental_alter_configs}

    def _refusal(self, conn: Connection, operation: str, resource: ConfigResource) -> OdradekError | None:
        """Why ``resource`` may not be described or altered by this connection (None: it may)."""
        who = self._auth.principal(conn)
        if resource.type == ResourceType.TOPIC:
            if not self._auth.allowed(conn, operation, TOPIC, resource.name):
                return TopicAuthorizationFailedError(f"{who} may not {operation} topic {resource.name}")
        elif resource.type in (ResourceType.BROKER, ResourceType.BROKER_LOGGER):
            if not self._auth.allowed(conn, operation, CLUSTER, CLUSTER_NAME):
                return ClusterAuthorizationFailedError(f"{who} may not {operation} the cluster")
        else:
            return InvalidRequestError(f"Unsupported resource type: {resource.type}")
        return None

    # --------------------------------------------------------------------------------------- DescribeConfigs

    async def handle_describe_configs(self, conn: Connection, request: Request) -> Any:
        version = request.header.api_version
        body = request.body
        cls = codec.response_class(DESCRIBE_CONFIGS, version)
        synonyms = bool(body.include_synonyms)
        docs = bool(getattr(body, "include_documentation", False))
        result_cls = nested(cls, "DescribeConfigsResult")
        entry_cls = nested(cls, "DescribeConfigsResourceResult")
        synonym_cls = nested(cls, "DescribeConfigsSynonym")
        resources = [ConfigResource(int(r.resource_type), str(r.resource_name)) for r in body.resources]
        keys = [None if r.configuration_keys is None else [str(k) for k in r.configuration_keys]
                for r in body.resources]
        outcomes = await asyncio.gather(*(self._describe(conn, res, k) for res, k in zip(resources, keys,
                                                                                           strict=True)))
        results = []
        for resource, outcome in zip(resources, outcomes, strict=True):
            if isinstance(outcome, OdradekError):
                results.append(make(result_cls, error_code=code(outcome), error_message=outcome.message,
                                    resource_type=resource.type, resource_name=resource.name, configs=()))
                continue
            entries = tuple(_entry(entry_cls, synonym_cls, e, synonyms, docs) for e in outcome)
            results.append(make(result_cls, error_code=NONE, error_message=None, resource_type=resource.type,
                                resource_name=resource.name, configs=entries))
        return make(cls, throttle_time=NO_THROTTLE, results=tuple(results))

    async def _describe(self, conn: Connection, resource: ConfigResource,
                        keys: list[str] | None) -> list[ConfigEntry] | OdradekError:
        refusal = self._refusal(conn, "DescribeConfigs", resource)
        if refusal is not None:
            return refusal
        try:
            return await self._configs.describe(resource, keys)
        except Exception as e:
            return typed(e, f"describing the configs of {resource}")

    # ------------------------------------------------------------------------------------------ AlterConfigs

    async def handle_alter_configs(self, conn: Connection, request: Request) -> Any:
        body = request.body
        validate_only = bool(body.validate_only)
        jobs: list[tuple[ConfigResource, Callable[[], Awaitable[OdradekError | None]]]] = []
        for r in body.resources:
            resource = ConfigResource(int(r.resource_type), str(r.resource_name))
            configs: dict[str, str | None] = {}
            for c in r.configs:
                configs[str(c.name)] = c.value
            jobs.append((resource, functools.partial(self._alter, conn, resource, configs, validate_only)))
        return await self._alter_answer(ALTER_CONFIGS, request, jobs)

    async def _alter(self, conn: Connection, resource: ConfigResource, configs: dict[str, str | None],
                     validate_only: bool) -> OdradekError | None:
        refusal = self._refusal(conn, "AlterConfigs", resource)
        if refusal is not None:
            return refusal
        try:
            await self._configs.alter(resource, configs, validate_only=validate_only)
            return None
        except Exception as e:
            return typed(e, f"altering the configs of {resource}")

    # ------------------------------------------------------------------------------- IncrementalAlterConfigs

    async def handle_incremental_alter_configs(self, conn: Connection, request: Request) -> Any:
        body = request.body
        validate_only = bool(body.validate_only)
        jobs: list[tuple[ConfigResource, Callable[[], Awaitable[OdradekError | None]]]] = []
        for r in body.resources:
            resource = ConfigResource(int(r.resource_type), str(r.resource_name))
            ops = [AlterOp(str(c.name), int(c.config_operation), c.value) for c in r.configs]
            jobs.append((resource, functools.partial(self._incremental, conn, resource, ops, validate_only)))
        return await self._alter_answer(INCREMENTAL_ALTER_CONFIGS, request, jobs)

    async def _incremental(self, conn: Connection, resource: ConfigResource, ops: list[AlterOp],
                           validate_only: bool) -> OdradekError | None:
        refusal = self._refusal(conn, "AlterConfigs", resource)
        if refusal is not None:
            return refusal
        try:
            await self._configs.incremental_alter(resource, ops, validate_only=validate_only)
            return None
        except Exception as e:
            return typed(e, f"altering the configs of {resource}")

    async def _alter_answer(self, api_key: int, request: Request,
                            jobs: list[tuple[ConfigResource, Callable[[], Awaitable[OdradekError | None]]]]) -> Any:
        """Run the alterations one after the other (two of one resource must not interleave their
        read-modify-write) and answer each resource in order."""
        cls = codec.response_class(api_key, request.header.api_version)
        entry_cls = nested(cls, "AlterConfigsResourceResponse")
        responses = []
        for resource, job in jobs:
            error = await job()
            responses.append(make(entry_cls, error_code=code(error), error_message=None if error is None
                                  else error.message, resource_type=resource.type, resource_name=resource.name))
        return make(cls, throttle_time=NO_THROTTLE, responses=tuple(responses))


def _entry(entry_cls: type[Any], synonym_cls: type[Any], e: ConfigEntry, synonyms: bool, docs: bool) -> Any:
    return make(entry_cls, name=e.name, value=e.value, read_only=e.read_only, config_source=int(e.source),
                is_sensitive=e.sensitive,
                synonyms=tuple(make(synonym_cls, name=s.name, value=s.value, source=int(s.source))
                               for s in e.synonyms) if synonyms else (),
                config_type=int(e.config_type), documentation=e.documentation if docs else None)
