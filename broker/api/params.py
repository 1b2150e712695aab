"""Query and path parameters, and Accept negotiation, with the statuses Confluent's REST Proxy gives.

This is the one validation of names and numbers every route uses (the app's validation middleware applies
the path checks to every route that has a ``{topic}`` or ``{partition}``), so that no handler ever calls
``int()`` on client text or puts a client's topic name into a ZooKeeper path or a file name unchecked:

* numbers are ASCII decimal digits (an optional ``-`` where negatives mean something), at most 19 digits and in
  the parameter's range: ``str.isdigit`` takes ``²`` and ``int`` takes the Arabic-Indic digit one as 1, and
  ``int("1" * 400)`` works but overflows every later use, so neither is used on client text;
* topic names follow Kafka's rules (``[a-zA-Z0-9._-]{1,249}``, not ``.`` or ``..``), checked on the path segment
  as decoded once by the router (``%2F`` decodes to ``/``, which is refused; ``%252F`` to ``%2F``, refused too).

A query parameter that does not parse is a 400 (it names the parameter). A path parameter that does not
convert (``/topics/t/partitions/abc``) is a 404: Confluent's resources declare ``@PathParam("partition") int``,
and Jersey answers a failed path conversion as a route that does not match.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import orjson
from aiohttp import web

from broker.admin.topics import validate_topic_name
from broker.config import BrokerConfig
from odradek.protocol import media as media_types
from odradek.protocol.errors import InvalidRequestError, MalformedJsonError, NotAcceptableError, RouteNotFoundError
from transaction_coordinator.markers import READ_UNCOMMITTED, isolation_level

# The broker's request limits (its BrokerConfig), given to create_app explicitly.
LIMITS = web.AppKey("limits", BrokerConfig)

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
_ASCII_INT = re.compile(r"-?[0-9]{1,19}")


def parse_ascii_int(raw: str, lo: int = INT64_MIN, hi: int = INT64_MAX) -> int | None:
    """The integer ``raw`` spells in ASCII digits, if it is one within ``[lo, hi]``; else None."""
    if not _ASCII_INT.fullmatch(raw):
        return None
    value = int(raw)
    return value if lo <= value <= hi else None


def int_param(request: web.Request, name: str, default: int | None = None, *, minimum: int = 0,
              maximum: int = INT64_MAX) -> int:
    """A query parameter as an integer in ``[minimum, maximum]``: 400 naming it when it is not one."""
    raw = request.query.get(name)
    if raw is None or raw == "":
        if default is None:
            raise InvalidRequestError(f"query parameter {name} is required")
        return default
    value = parse_ascii_int(raw, INT64_MIN, INT64_MAX)
    if value is None:
        raise InvalidRequestError(f"query parameter {name} must be an integer in ASCII digits, not {raw[:40]!r}")
    if value < minimum:
        raise InvalidRequestError(f"query parameter {name} must be at least {minimum}")
    if value > maximum:
        raise InvalidRequestError(f"query parameter {name} must be at most {maximum}")
    return value


def optional_int_param(request: web.Request, name: str, *, minimum: int = 0, maximum: int = INT64_MAX) -> int | None:
    """:func:`int_param` for a parameter whose absence (or empty value) means "the service's default": None."""
    if not request.query.get(name):
        return None
    return int_param(request, name, minimum=minimum, maximum=maximum)


def isolation_param(request: web.Request) -> str:
    """The ``isolation`` parameter: read_uncommitted (the default) or read_committed (docs/transactions.md)."""
    return isolation_level(request.query.get("isolation", READ_UNCOMMITTED))


def limits(request: web.Request) -> BrokerConfig:
    return request.app[LIMITS]


def wait_param(request: web.Request, name: str, default: int = 0) -> int:
    """A long-poll wait in ms, clamped to the broker's ``fetch.max.wait.ms`` cap: a client asking for 10^9 ms
    waits the cap and gets an answer, never a connection held for days. Values that are not an int32 at all
    are a 400."""
    return min(int_param(request, name, default, maximum=INT32_MAX), request.app[LIMITS].fetch_max_wait_ms)


def partition_param(request: web.Request) -> int:
    raw = request.match_info["partition"]
    value = parse_ascii_int(raw, 0, INT32_MAX) if not raw.startswith("-") else None
    if value is None:
        raise RouteNotFoundError(f"HTTP 404 Not Found: partition {raw[:40]!r} is not an integer partition id")
    return value


def topic_param(request: web.Request, key: str = "topic") -> str:
    """The path's topic name, checked by Kafka's rules (400 INVALID_TOPIC_EXCEPTION otherwise)."""
    name = request.match_info[key]
    validate_topic_name(name)
    return name


def check_path_params(request: web.Request) -> None:
    """What the validation middleware runs before every handler: the path's topic and partition, if any."""
    info = request.match_info
    if "topic" in info:
        topic_param(request)
    if "partition" in info:
        partition_param(request)


# Deeper JSON request bodies are refused (400): nothing legitimate nests this deep, and the structures built from
# them are walked recursively later (repr, re-encoding), where Python's recursion limit would make a 500.
MAX_JSON_DEPTH = 64
_DEPTH_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def json_depth(raw: bytes) -> int:
    """An upper bound of the nesting depth of a JSON text, exact when it has more than MAX_JSON_DEPTH brackets."""
    openers = raw.count(b"[") + raw.count(b"{")
    if openers <= MAX_JSON_DEPTH:
        return openers
    deepest = level = 0
    for m in _DEPTH_TOKENS.finditer(raw):
        c = m.group()
        if c in (b"[", b"{"):
            level += 1
            deepest = max(deepest, level)
        elif c in (b"]", b"}"):
            level -= 1
    return deepest


def load_json_object(raw: bytes, what: str = "the request body") -> dict[str, Any]:
    """A small JSON request body (admin, controller, config requests) as an object: 400 when it is not JSON,
    not an object, or nests deeper than MAX_JSON_DEPTH."""
    if json_depth(raw) > MAX_JSON_DEPTH:
        raise MalformedJsonError(f"{what} nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise MalformedJsonError(f"{what} is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise InvalidRequestError(f"{what} must be a JSON object")
    return body


def is_json_type(content_type: str) -> bool:
    """``application/json`` or a JSON-based ``application/*+json`` type."""
    return content_type == "application/json" or (content_type.startswith("application/")
                                                   and content_type.endswith("+json"))


def _accepted(accept: str) -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    for part in accept.split(","):
        fields = [f.strip() for f in part.split(";")]
        kind = fields[0].lower()
        if not kind:
            continue
        q = 1.0
        for f in fields[1:]:
            if f.startswith("q="):
                try:
                    q = float(f[2:])
                except ValueError:
                    q = 0.0
        out.append((kind, q))
    return out


def negotiate(request: web.Request, offered: Sequence[str]) -> str:
    """The offered media type the client's Accept header prefers (the first offered when there is no header,
    or for ``*/*``); 406 NOT_ACCEPTABLE when it accepts none of them, as JAX-RS content negotiation does."""
    accept = request.headers.get("Accept", "")
    if not accept.strip():
        return offered[0]
    best: tuple[float, int] | None = None
    chosen = ""
    for kind, q in _accepted(accept):
        if q <= 0:
            continue
        for rank, media in enumerate(offered):
            major = media.split("/")[0]
            if kind in (media, "*/*", f"{major}/*"):
                key = (q, -rank)
                if best is None or key > best:
                    best, chosen = key, media
    if not chosen:
        raise NotAcceptableError(f"HTTP 406 Not Acceptable: cannot answer with {accept}; this endpoint answers "
                                 f"{', '.join(offered)}")
    return chosen


def _media_type(header: str) -> str:
    return header.split(";")[0].strip().lower()


def is_v1(request: web.Request) -> bool:
    """Whether a request on a path REST Proxy v1 and v2 share is a v1 request: its Content-Type is a v1 type
    (``media.V1_TYPES``), or it names no version and its Accept names a v1 type and no v2 one (the Node client
    commits with a v1 Content-Type and no body; the Python ones send only a v1 Accept). Everything else is v2,
    unchanged."""
    content_type = _media_type(request.headers.get("Content-Type", ""))
    if content_type in media_types.V1_TYPES:
        return True
    if ".v2+" in content_type or content_type == media_types.KAFKA_V2:
        return False
    accepted = [_media_type(part) for part in request.headers.get("Accept", "").split(",")]
    return any(kind in media_types.V1_TYPES for kind in accepted) and not any(".v2+" in kind for kind in accepted)
