"""The Schema Registry calls the connector makes (Confluent's REST API): a subject's version, a schema by id, and a
registration; over the client's keep-alive transport, trying each registry URL in turn. ``version_info`` and
``schema_info`` answer any schema type with its references (JSON Schema, Protobuf; ``format=serialized`` gives a
Protobuf schema as the base64 of its FileDescriptorProto).

The default registry is the cluster's own: every broker serves Confluent's API on its HTTP port, so the
bootstrap servers are registry URLs too.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import quote

from odradek.client.transport import Transport
from odradek.protocol.errors import OdradekError
from odradek_spark.security import SecurityPairs, client_security

__all__ = ["NOT_FOUND", "RegistryClient", "RegistryError"]

SR_TYPE = "application/vnd.schemaregistry.v1+json"
NOT_FOUND = frozenset({40401, 40402})  # Confluent's codes for a subject / a version that does not exist
MAX_REFERENCE_DEPTH = 32  # as the registry itself bounds a chain of references
T = TypeVar("T")


class RegistryError(RuntimeError):
    """The registry refused a call (its message kept, and its ``error_code`` as ``code``), or no registry URL
    answered (``code`` None)."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class RegistryClient:
    def __init__(self, urls: Sequence[str], request_timeout_ms: int = 30_000,
                 security: SecurityPairs = ()) -> None:
        self._urls = list(urls)
        self._transport = Transport(request_timeout_ms=request_timeout_ms, security=client_security(security))

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _each(self, what: str, call: Callable[[str], T]) -> T:
        last: OdradekError | None = None
        for url in self._urls:
            try:
                return call(url)
            except OdradekError as e:
                if not e.retriable:
                    raise RegistryError(f"{what}: {e}", e.error_code) from None
                last = e
        raise RegistryError(f"{what}: no Schema Registry answered ({', '.join(self._urls)}): {last}")

    def version(self, subject: str, version: int | str = "latest") -> tuple[int, int, str]:
        """``(schema id, version, schema text)`` of a subject's version (AVRO only)."""
        path = f"/subjects/{quote(subject, safe='')}/versions/{version}"
        body = self._each(f"subject {subject!r} version {version}",
                          lambda url: self._transport.get_json(url, path, accept=SR_TYPE))
        kind = body.get("schemaType", "AVRO")
        if kind != "AVRO":
            raise RegistryError(f"subject {subject!r} version {body['version']} is a {kind} schema, not AVRO")
        return int(body["id"]), int(body["version"]), str(body["schema"])

    def version_info(self, subject: str, version: int | str = "latest", fmt: str | None = None) -> dict[str, Any]:
        """A subject's version as the registry answers it (``id``, ``version``, ``schema``, ``schemaType``
        absent for AVRO, ``references``), the schema in the asked ``format``."""
        path = f"/subjects/{quote(subject, safe='')}/versions/{version}" + (f"?format={fmt}" if fmt else "")
        body = self._each(f"subject {subject!r} version {version}",
                          lambda url: self._transport.get_json(url, path, accept=SR_TYPE))
        return dict(body)

    def referenced(self, references: Sequence[dict[str, Any]], fmt: str | None = None,
                   _chain: tuple[tuple[str, int | str], ...] = ()) -> list[tuple[str, dict[str, Any]]]:
        """Every schema ``references`` (a version's ``references``: ``name``, ``subject``, ``version``) names,
        transitively, as ``(reference name, version_info)``: each one's own references before it, each name once,
        as the registry resolves them when it parses a schema (a .proto imports a file by its name; a JSON
        Schema's ``$ref`` names one by its name or its ``$id``). RegistryError on a cycle or a chain deeper than
        the registry allows."""
        out: list[tuple[str, dict[str, Any]]] = []
        seen: set[str] = set()
        for r in references:
            name, where = str(r["name"]), (str(r["subject"]), r["version"])
            if name in seen:
                continue
            if where in _chain:
                raise RegistryError(f"reference {name!r} (subject {where[0]!r} version {where[1]}) refers back to "
                                    "itself")
            if len(_chain) >= MAX_REFERENCE_DEPTH:
                raise RegistryError(f"references nested more than {MAX_REFERENCE_DEPTH} deep (at {name!r})")
            body = self.version_info(where[0], where[1], fmt)
            for inner in self.referenced(body.get("references") or [], fmt, (*_chain, where)):
                if inner[0] not in seen:
                    seen.add(inner[0])
                    out.append(inner)
            if name not in seen:
                seen.add(name)
                out.append((name, body))
        return out

    def schema_info(self, schema_id: int, fmt: str | None = None) -> dict[str, Any]:
        """A schema by id (``schema``, ``schemaType``, ``references``), in the asked ``format``."""
        path = f"/schemas/ids/{schema_id}" + (f"?format={fmt}" if fmt else "")
        body = self._each(f"schema id {schema_id}", lambda url: self._transport.get_json(url, path, accept=SR_TYPE))
        return dict(body)

    def register_typed(self, subject: str, schema: str, schema_type: str) -> tuple[int, int]:
        """Register (or find) the schema text ``schema`` of ``schema_type`` (``JSON``, ``PROTOBUF``) under
        ``subject``: ``(schema id, version)``."""
        path = f"/subjects/{quote(subject, safe='')}/versions"
        payload = {"schema": schema, "schemaType": schema_type}
        body = self._each(f"registering under subject {subject!r}", lambda url: self._transport.send_json(
            url, "POST", path, payload, content_type=SR_TYPE, accept=SR_TYPE))
        found = self._each(f"looking up subject {subject!r}", lambda url: self._transport.send_json(
            url, "POST", f"/subjects/{quote(subject, safe='')}", payload, content_type=SR_TYPE, accept=SR_TYPE))
        return int(body["id"]), int(found["version"])

    def schema(self, schema_id: int) -> str:
        body = self._each(f"schema id {schema_id}",
                          lambda url: self._transport.get_json(url, f"/schemas/ids/{schema_id}", accept=SR_TYPE))
        return str(body["schema"])

    def register(self, subject: str, schema: Any) -> tuple[int, int]:
        """Register (or find) ``schema`` under ``subject``: ``(schema id, version)``."""
        path = f"/subjects/{quote(subject, safe='')}/versions"
        payload = {"schema": json.dumps(schema, separators=(",", ":")), "schemaType": "AVRO"}
        body = self._each(f"registering under subject {subject!r}", lambda url: self._transport.send_json(
            url, "POST", path, payload, content_type=SR_TYPE, accept=SR_TYPE))
        found = self._each(f"looking up subject {subject!r}", lambda url: self._transport.send_json(
            url, "POST", f"/subjects/{quote(subject, safe='')}", payload, content_type=SR_TYPE, accept=SR_TYPE))
        return int(body["id"]), int(found["version"])
