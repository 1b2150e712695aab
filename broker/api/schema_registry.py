"""Confluent Schema Registry's REST API on every broker (issue 26, docs/schema-registry.md).

Paths, bodies, statuses and error codes are Confluent's (core/.../rest/resources/SubjectsResource.java,
SubjectVersionsResource.java, SchemasResource.java, ConfigResource.java, ModeResource.java,
CompatibilityResource.java; rest/exceptions/Errors.java), so its clients (confluent-kafka's
SchemaRegistryClient and serializers) work unchanged. Each handler parses, calls the one
SchemaRegistryService (broker/schema_registry/service.py), and renders: reads answer from this broker's copy of
``_schemas``, writes go to the elected primary through the service. The reads that answer a schema take
Confluent's ``format`` query parameter: ``serialized`` answers a Protobuf schema as the base64 of its
FileDescriptorProto (what confluent-kafka's Protobuf serdes fetch), any other value the stored text.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from broker.api.context import BROKER, json_response
from broker.schema_registry.formats import SCHEMA_TYPES
from broker.schema_registry.service import WRITES_PATH, SchemaRegistryService
from broker.schema_registry.store import SchemaVersion
from odradek.protocol.errors import InvalidRequestError, SchemaNotFoundError

SR_TYPE = "application/vnd.schemaregistry.v1+json"


def _service(request: web.Request) -> SchemaRegistryService:
    return request.app[BROKER].schema_registry


async def _synced(request: web.Request) -> SchemaRegistryService:
    """The service once its copy has caught up with ``_schemas`` (its ``sync``), for a read that must see every
    write acknowledged before it, wherever that write was made."""
    service = _service(request)
    await service.sync()
    return service


def _ok(obj: object) -> web.Response:
    return json_response(obj, content_type=SR_TYPE)


def _raw(text: str) -> web.Response:
    return web.Response(text=text, content_type=SR_TYPE)


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").lower() == "true"


async def _body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    try:
        body = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError as e:
        raise InvalidRequestError(f"the body is not JSON: {e}") from None
    if not isinstance(body, dict):
        raise InvalidRequestError("the body must be a JSON object")
    return body


def _schema_id(request: web.Request) -> int:
    try:
        return int(request.match_info["id"])
    except ValueError:
        raise SchemaNotFoundError(f"Schema {request.match_info['id']} not found") from None


def _optional_int(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidRequestError(f"{key} must be a positive integer")
    return value


# ----------------------------------------------------------------------------------------------- subjects


async def list_subjects(request: web.Request) -> web.Response:
    return _ok((await _synced(request)).subjects(deleted=_flag(request, "deleted"),
                                          prefix=request.query.get("subjectPrefix", "")))


async def list_versions(request: web.Request) -> web.Response:
    return _ok((await _synced(request)).versions(request.match_info["subject"], deleted=_flag(request, "deleted")))


async def register(request: web.Request) -> web.Response:
    """POST /subjects/{subject}/versions: the id of the schema (the same schema again answers the same id)."""
    body = await _body(request)
    op = {"op": "register", "subject": request.match_info["subject"], "schema": body.get("schema"),
          "schemaType": body.get("schemaType"), "references": body.get("references") or [],
          "normalize": _flag(request, "normalize") or bool(body.get("normalize")),
          "id": _optional_int(body, "id"), "version": _optional_int(body, "version")}
    return _ok(await _service(request).write(op))


async def lookup(request: web.Request) -> web.Response:
    body = await _body(request)
    if _flag(request, "normalize"):
        body["normalize"] = True
    found = (await _synced(request)).lookup(request.match_info["subject"], body, deleted=_flag(request, "deleted"))
    return _ok(found.render())


def _formatted(request: web.Request, v: SchemaVersion) -> dict[str, Any]:
    """A version's rendering with its schema in the asked ``format``."""
    out = v.render()
    out["schema"] = _service(request).schema_text(v, request.query.get("format"))
    return out


async def get_version(request: web.Request) -> web.Response:
    v = (await _synced(request)).version(request.match_info["subject"], request.match_info["version"],
                                  deleted=_flag(request, "deleted"))
    return _ok(_formatted(request, v))


async def get_version_schema(request: web.Request) -> web.Response:
    v = (await _synced(request)).version(request.match_info["subject"], request.match_info["version"],
                                  deleted=_flag(request, "deleted"))
    return _raw(_service(request).schema_text(v, request.query.get("format")))


async def referenced_by(request: web.Request) -> web.Response:
    return _ok((await _synced(request)).referenced_by(request.match_info["subject"], request.match_info["version"]))


async def delete_subject(request: web.Request) -> web.Response:
    return _ok(await _service(request).write({"op": "delete_subject", "subject": request.match_info["subject"],
                                              "permanent": _flag(request, "permanent")}))


async def delete_version(request: web.Request) -> web.Response:
    service = await _synced(request)
    service.version(request.match_info["subject"], request.match_info["version"], deleted=True)  # 404s, 42202
    return _ok(await service.write({"op": "delete_version", "subject": request.match_info["subject"],
                                    "version": request.match_info["version"],
                                    "permanent": _flag(request, "permanent")}))


# ------------------------------------------------------------------------------------------------ schemas


async def schema_by_id(request: web.Request) -> web.Response:
    v = (await _synced(request)).schema_by_id(_schema_id(request))
    out = _formatted(request, v)
    for key in ("subject", "version", "id"):
        out.pop(key)
    return _ok(out)


async def schema_by_id_raw(request: web.Request) -> web.Response:
    v = (await _synced(request)).schema_by_id(_schema_id(request))
    return _raw(_service(request).schema_text(v, request.query.get("format")))


async def schema_id_versions(request: web.Request) -> web.Response:
    return _ok((await _synced(request)).id_versions(_schema_id(request), deleted=_flag(request, "deleted")))


async def schema_id_subjects(request: web.Request) -> web.Response:
    versions = (await _synced(request)).id_versions(_schema_id(request), deleted=_flag(request, "deleted"))
    return _ok(sorted({v["subject"] for v in versions}))


async def schema_types(_request: web.Request) -> web.Response:
    return _ok(list(SCHEMA_TYPES))


# ------------------------------------------------------------------------------------- config and mode


def _subject(request: web.Request) -> str | None:
    return request.match_info.get("subject")


async def get_config(request: web.Request) -> web.Response:
    level = (await _synced(request)).get_config(_subject(request), default_to_global=_flag(request, "defaultToGlobal"))
    return _ok({"compatibilityLevel": level})


async def put_config(request: web.Request) -> web.Response:
    body = await _body(request)
    level = body.get("compatibility", body.get("compatibilityLevel"))
    return _ok(await _service(request).write({"op": "set_config", "subject": _subject(request),
                                              "compatibility": level if isinstance(level, str) else ""}))


async def delete_config(request: web.Request) -> web.Response:
    return _ok(await _service(request).write({"op": "delete_config", "subject": _subject(request)}))


async def get_mode(request: web.Request) -> web.Response:
    mode = (await _synced(request)).get_mode(_subject(request), default_to_global=_flag(request, "defaultToGlobal"))
    return _ok({"mode": mode})


async def put_mode(request: web.Request) -> web.Response:
    body = await _body(request)
    mode = body.get("mode")
    return _ok(await _service(request).write({"op": "set_mode", "subject": _subject(request),
                                              "mode": mode if isinstance(mode, str) else "",
                                              "force": _flag(request, "force")}))


async def delete_mode(request: web.Request) -> web.Response:
    return _ok(await _service(request).write({"op": "delete_mode", "subject": _subject(request)}))


# ------------------------------------------------------------------------------------------ compatibility


async def check_compatibility(request: web.Request) -> web.Response:
    body = await _body(request)
    messages = (await _synced(request)).compatibility(request.match_info["subject"], request.match_info.get("version"),
                                               body)
    out: dict[str, Any] = {"is_compatible": not messages}
    if _flag(request, "verbose"):
        out["messages"] = messages
    return _ok(out)


# ------------------------------------------------------------------------------------------ inter-broker


async def forwarded_write(request: web.Request) -> web.Response:
    """A write another broker forwarded to this one, the primary: {"result", "offset"} once applied here."""
    return json_response(await _service(request).write_forwarded(await _body(request)))


def routes() -> list[web.RouteDef]:
    s, v = "/subjects/{subject}", "/subjects/{subject}/versions/{version}"
    i = "/schemas/ids/{id}"
    c = "/compatibility/subjects/{subject}/versions"
    return [
        web.get("/subjects", list_subjects),
        web.post(s, lookup),
        web.delete(s, delete_subject),
        web.get(f"{s}/versions", list_versions),
        web.post(f"{s}/versions", register),
        web.get(v, get_version),
        web.delete(v, delete_version),
        web.get(f"{v}/schema", get_version_schema),
        web.get(f"{v}/referencedby", referenced_by),
        web.get("/schemas/types", schema_types),
        web.get(i, schema_by_id),
        web.get(f"{i}/schema", schema_by_id_raw),
        web.get(f"{i}/versions", schema_id_versions),
        web.get(f"{i}/subjects", schema_id_subjects),
        web.get("/config", get_config),
        web.put("/config", put_config),
        web.delete("/config", delete_config),
        web.get("/config/{subject}", get_config),
        web.put("/config/{subject}", put_config),
        web.delete("/config/{subject}", delete_config),
        web.get("/mode", get_mode),
        web.put("/mode", put_mode),
        web.delete("/mode", delete_mode),
        web.get("/mode/{subject}", get_mode),
        web.put("/mode/{subject}", put_mode),
        web.delete("/mode/{subject}", delete_mode),
        web.post(c, check_compatibility),
        web.post(f"{c}/{{version}}", check_compatibility),
        web.post(WRITES_PATH, forwarded_write),
    ]
