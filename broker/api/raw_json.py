"""The raw JSON text of each produced record's key and value, so the JSON embedded format stores what was sent.

Why not parse and re-encode: a JSON library turns 123456789012345678901234567890 into a float and merges
duplicate keys, so the stored bytes would no longer be what the producer sent (and a consumer reading them with
another library would see different data). Confluent's REST Proxy keeps Jackson's tree, which keeps both.

How: the body is first validated by orjson (fast, and the structure checks run on its result); then this module
walks the same text once more and, for each element of the top-level ``records`` array, slices out the text of
its ``key`` and ``value`` members. Each member value is skipped with the C scanner of the standard ``json``
module (``scan_once`` returns where the value ends), so the Python walk only visits top-level keys and record
members, never the inside of a value. Duplicate names resolve as orjson resolves them (the last one wins), so
the slices always belong to the record orjson validated. Insignificant whitespace is removed from a slice
(``{"a": 1}`` is stored as ``{"a":1}``, the compact form a re-encoding gives); nothing else changes.
"""

from __future__ import annotations

import json
import json.scanner
import re

from odradek.protocol.errors import ConstraintViolationError, MalformedJsonError

# Deeper values are refused on produce (422): nothing legitimate nests this deep, and every later reader of the
# record (Python's json, Jackson's 1000-level default, orjson's 254 when re-encoding) has a recursion limit.
MAX_DEPTH = 128


def _ignore(_text: str) -> None:
    return None


# Numbers are not converted (a 5000-digit integer would hit Python's int-conversion limit): only positions matter.
_scan_once = json.scanner.c_make_scanner(json.JSONDecoder(parse_int=_ignore, parse_float=_ignore,
                                                          parse_constant=_ignore))
_WS = re.compile(r"[ \t\n\r]*")
_HAS_WS = re.compile(r"[ \t\n\r]")
_COMPACT = re.compile(r'("(?:[^"\\]|\\.)*")|[ \t\n\r]+')
_DEPTH_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')

RawPair = tuple[str | None, str | None]  # (key text, value text); None when the member is absent


_WS_CHARS = " \t\n\r"


def _skip(text: str, pos: int) -> int:
    """The first position at or after ``pos`` that is not whitespace (compact JSON: no regex call at all)."""
    if text[pos] in _WS_CHARS:
        return _WS.match(text, pos).end()  # type: ignore[union-attr]
    return pos


def _value_end(text: str, pos: int) -> int:
    try:
        return int(_scan_once(text, pos)[1])
    except StopIteration:
        raise MalformedJsonError(f"the request body is not valid JSON at character {pos}") from None
    except RecursionError:
        raise ConstraintViolationError(f"a JSON value nests deeper than {MAX_DEPTH} levels") from None


def _members(text: str, pos: int) -> tuple[list[tuple[str, int, int]], int]:
    """The (name, value start, value end) of the object at ``pos``, and the position after it.

    The per-record loop of the JSON produce path: whitespace is skipped inline (compact bodies never call the
    regex), names and values are delimited by the C scanner.
    """
    scan = _scan_once
    ws = _WS_CHARS
    pos += 1
    if text[pos] in ws:
        pos = _skip(text, pos)
    out: list[tuple[str, int, int]] = []
    if text[pos] == "}":
        return out, pos + 1
    try:
        while True:
            if text[pos] != '"':
                raise MalformedJsonError(f"expected a member name at character {pos}")
            name, pos = scan(text, pos)
            if text[pos] in ws:
                pos = _skip(text, pos)
            pos += 1  # the ':' (orjson validated the syntax)
            if text[pos] in ws:
                pos = _skip(text, pos)
            start = pos
            pos = scan(text, pos)[1]
            out.append((name, start, pos))
            if text[pos] in ws:
                pos = _skip(text, pos)
            if text[pos] == "}":
                return out, pos + 1
            pos += 1  # ','
            if text[pos] in ws:
                pos = _skip(text, pos)
    except StopIteration:
        raise MalformedJsonError(f"the request body is not valid JSON at character {pos}") from None
    except RecursionError:
        raise ConstraintViolationError(f"a JSON value nests deeper than {MAX_DEPTH} levels") from None


def compact(raw: str) -> str:
    """``raw`` without insignificant whitespace (strings untouched)."""
    if raw[0] == '"' or not _HAS_WS.search(raw):  # a string (or a scalar) has no insignificant whitespace
        return raw
    return _COMPACT.sub(lambda m: m.group(1) or "", raw)


def depth(raw: str) -> int:
    """An upper bound of the nesting depth of a JSON text (exact when it has more than ``MAX_DEPTH`` brackets),
    cheap for the common value: a text cannot nest deeper than it has opening brackets."""
    openers = raw.count("[") + raw.count("{")
    if openers <= MAX_DEPTH:
        return openers
    deepest = level = 0
    for m in _DEPTH_TOKENS.finditer(raw):
        c = m.group()
        if c in "[{":
            level += 1
            deepest = max(deepest, level)
        elif c in "]}":
            level -= 1
    return deepest


def check_depth(raw: str, what: str) -> None:
    if depth(raw) > MAX_DEPTH:
        raise ConstraintViolationError(f"{what} nests deeper than {MAX_DEPTH} levels")


def record_texts(text: str) -> list[RawPair]:
    """For each record of the body's ``records`` array (the last such member, as orjson keeps), the compact raw
    text of its last ``key`` and ``value`` members. ``text`` must be JSON that orjson accepted."""
    pos = _skip(text, 0)
    top, _ = _members(text, pos)
    found = [(start, end) for name, start, end in top if name == "records"]
    if not found:
        return []
    start, end = found[-1]
    out: list[RawPair] = []
    pos = _skip(text, start + 1)
    if text[pos] == "]":
        return out
    while pos < end:
        if text[pos] != "{":
            out.append((None, None))  # not an object: the structure check refuses it
            pos = _value_end(text, pos)
        else:
            members, pos = _members(text, pos)
            key = value = None
            for name, s, e in members:
                if name == "key":
                    key = text[s:e]
                elif name == "value":
                    value = text[s:e]
            out.append((None if key is None else compact(key), None if value is None else compact(value)))
        pos = _skip(text, pos)
        if text[pos] == "]":
            break
        pos = _skip(text, pos + 1)
    return out


def is_null(raw: str | None) -> bool:
    return raw is None or raw == "null"
