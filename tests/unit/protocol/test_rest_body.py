"""The compiled one-pass REST produce (``produce_body``) against today's path, body by body.

Today's path is what broker/api/produce.py ran before it: ``plain_records`` (orjson.loads, checked_records and,
for the JSON format, record_texts) then the compiled ``produce_batches``, else the reference
``parse_produce_body`` partitioned and encoded as broker/produce/service.py does. The invariant checked here:
``produce_body`` never accepts a body today's path refuses, and where it answers, its batches and partitions are
byte for byte today's. It may leave any body to today's path (None), but the ordinary ones must not be left,
or it would be a slower no-op: the generated well-formed bodies check that it takes them.
"""

from __future__ import annotations

import base64
import itertools
import json
import random
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.api.embedded import BINARY, JSON, parse_produce_body, plain_records, value_bound
from odradek.protocol import speedups
from odradek.protocol.errors import OdradekError
from odradek.protocol.partitioner import murmur2, to_positive
from odradek.protocol.records import decode_records, encode_batch

if not speedups.COMPILED:
    pytest.skip("the compiled codec is not in use (ODRADEK_NO_EXTENSIONS=1 or no compiler)", allow_module_level=True)

from odradek.protocol import _speedups as c

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NOW = 1_700_000_000_123
MAX_RECORDS = 50
REFUSED = "refused"  # today's path raises (400, 422 or a policy violation)
OTHER = "other"  # today's path accepts with something produce_body never handles (partitions, headers, timestamps)

Result = tuple[dict[int, bytes], list[int]]


def today(body: bytes, fmt: str, count: int, fixed: int, start: int, max_records: int = MAX_RECORDS
          ) -> Result | str:
    """What broker/api/produce.py made of this body before produce_body existed."""
    binary = fmt == BINARY
    try:
        plain = plain_records(body, fmt, max_records)
    except OdradekError:
        return REFUSED
    if plain is not None:
        got = c.produce_batches(*plain, binary, count, fixed, itertools.count(start), NOW)
        if got is not None:
            return got  # type: ignore[no-any-return]
    try:
        rows, named = parse_produce_body(body, fmt, max_records)
    except OdradekError:
        return REFUSED
    if named is not None or any(ts is not None or headers for _, _, ts, headers in rows):
        return OTHER
    counter = itertools.count(start)
    partitions = [fixed if fixed >= 0 else next(counter) % count if key is None else to_positive(murmur2(key)) % count
                  for key, _, _, _ in rows]
    groups: dict[int, list[Any]] = {}
    for (key, value, _, _), p in zip(rows, partitions, strict=True):
        groups.setdefault(p, []).append((key, value, None, ()))
    return {p: encode_batch(group, now_ms=NOW) for p, group in groups.items()}, partitions


def check(body: bytes, fmt: str, count: int = 5, fixed: int = -1, start: int = 7,
          max_records: int = MAX_RECORDS) -> Result | None:
    """produce_body's answer, after asserting it against today's path (and that its batches decode)."""
    got = c.produce_body(body, fmt == BINARY, count, fixed, itertools.count(start), NOW, max_records,
                         value_bound(max_records))
    want = today(body, fmt, count, fixed, start, max_records)
    if want in (REFUSED, OTHER):
        assert got is None, f"today's path gives {want}, produce_body accepted {body!r}"
        return None
    if got is None:
        return None
    batches, partitions = got
    assert partitions == want[1]  # type: ignore[index]
    assert list(batches) == list(want[0])  # type: ignore[index]  # the same partitions, in the same order
    assert batches == want[0], body  # type: ignore[index]
    for p, batch in batches.items():
        records = decode_records(batch)
        assert [r.offset for r in records] == list(range(partitions.count(p)))
        assert all(r.timestamp == NOW and not r.headers for r in records)
    return got  # type: ignore[no-any-return]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# ---------------------------------------------------------------------------------------------- by hand

PLAIN_BINARY = [
    b'{"records":[{"key":"azE=","value":"dmFsdWU="}]}',
    b'{"records":[{"value":"dmFsdWU="},{"key":null,"value":null},{"key":"","value":""},{"key":"QUJD"}]}',
    b' \r\n\t{ "records" :\n[ { "value" : "QQ==" , "key" : "QUI=" } ,{"key":"QUJD"} ] } \n',
    b'{"value_schema_id":null,"key_schema":{"a":[1,2]},"records":[{"value":"QQ=="}],"value_schema":"x"}',
    b'{"records":[{"value":"QR=="}]}',  # non-canonical trailing bits: b64decode(validate=True) drops them too
    b'{"records":[{"key":"' + b64(b"k" * 400).encode() + b'","value":"' + b64(bytes(range(256)) * 3).encode() + b'"}]}',
]
PLAIN_JSON = [
    b'{"records":[{"key":"k1","value":{"a":1}}]}',
    b'{"records":[{"key":{"a" : [1, 2.5e3, "x y", {"n": null}]},"value":"\\u00e9\\ud83d\\ude00 \\" \\\\ \\/ \\b"}]}',
    b'{"records":[{"value":null},{"key":null,"value":[ ]},{"key":-0,"value":1E+5},{"value":true},{"value":false}]}',
    '{"records":[{"key":"\u00e9\u4e2d\U0001f600","value":"caf\u00e9 \u2028"}]}'.encode(),
    b'{"records":[{"value":123456789012345678901234567890},{"value":-9223372036854775809},{"value":1e-99}]}',
    b'{"records":[{"key":[ 1 , [ 2 ] ],"value":{ "a" : { "b" : [ ] } , "a" : 2 }}]}',  # nested duplicates: kept
    b'{"records":[{"value":"[[[[ {{{{"}]}',
    b'{"records":[{"value":' + b"[" * 128 + b"]" * 128 + b'}]}',
    b'\n{"records":[{"key":"\x7f","value":"tab\\tnl\\n"}]}\n',
]
# Record values (in {"records":[{"value": ...}]}) today's path refuses in both formats, or in binary.
ODD_VALUES = [
    b'"QQ"', b'"Q Q=="', b'"=QQ="', b'"QQ=Q"', b'"A==="', b'"QQ\\u003d="', b'"a\\/b="', b'"-_-_"', b'"\xc3\xa9QQ="',
    b'"\x00"', b'"a\nb"', b'"\xed\xa0\x80"', b'"\xc0\x80"', b'"\xf4\x90\x80\x80"', b'"\xff"', b'"\xe2\x82"',
    b'"\\ud800"', b'"\\udc00"', b'"\\ud800\\u0041"', b'"\\u00"', b'"\\x41"', b'"\\U0041"', b'"\\"', b"01", b"1.",
    b".5", b"+1", b"-", b"1e", b"1e400", b"-1e400", b"1e0400", b"1" + b"0" * 400, b"NaN", b"Infinity", b"tru", b"nul",
    b"nullx", b"truex", b"[1,]", b'{"a":1,}', b'{"a"}', b"{1:2}", b"[1 2]", b"[" * 129 + b"]" * 129,
    b"[" + b"[1]," * 129 + b"2]",
]
REFUSED_OR_LEFT = [
    b"", b" ", b"null", b"[]", b"{}", b'{"records":null}', b'{"records":[]}', b'{"records":{}}', b'{"records":[{}]}',
    b'{"records":[1]}', b'{"records":[null]}', b'{"records":[[]]}', b'{"records":[{"value":"QQ=="}]}x',
    b'{"records":[{"value":"QQ=="}]}{}', b'{"records":[{"value":"QQ=="}],}', b'{"records":[{"value":"QQ=="},]}',
    b'{"records":[{"value":"QQ==",}]}', b'{"records":[{"value":"QQ=="}]', b'{"records":[{"value":"QQ=="}',
    b'{"records":[{"value":"QQ=="', b'{"records":[{"value":"QQ==}]}', b'{"records" [{"value":"QQ=="}]}',
    b'{"records":[{"value" "QQ=="}]}', b'{"records":[{"value":"QQ=="} {"value":"QQ=="}]}',
    b'{records:[{"value":"QQ=="}]}', b"{'records':[{'value':'QQ=='}]}", b'\xef\xbb\xbf{"records":[{"value":"QQ=="}]}',
    b'{"records":[{"value":"QQ=="}],"records":[{"value":"Qg=="}]}',
    b'{"records":[{"value":"QQ==","value":"Qg=="}]}', b'{"records":[{"key":"QQ==","key":null,"value":"Qg=="}]}',
    b'{"records":[{"value":"QQ==","partition":1}]}', b'{"records":[{"value":"QQ==","partition":-1}]}',
    b'{"records":[{"value":"QQ==","headers":[]}]}', b'{"records":[{"value":"QQ==","timestamp":5}]}',
    b'{"records":[{"value":"QQ==","headers":[{"name":"h","value":"QQ=="}]}]}',
    b'{"records":[{"value":"QQ==","extra":1}]}', b'{"records":[{"value":"QQ=="}],"extra":1}',
    b'{"rec\\u006frds":[{"value":"QQ=="}]}', b'{"records":[{"k\\u0065y":"QQ==","value":"QQ=="}]}',
    b'{"records":[{"key":5,"value":"QQ=="}]}', b'{"records":[{"key":true,"value":"QQ=="}]}',
    b'{"records":[{"value":"x"}]}\x00', b'{"records":[{"value":"QQ=="}]}\xc2\xa0',
    b'{"records":[{"value":"QQ=="}]}\x0b',
    *(b'{"records":[{"value":' + value + b"}]}" for value in ODD_VALUES),
]


@pytest.mark.parametrize("fmt", [BINARY, JSON])
@pytest.mark.parametrize("fixed", [-1, 0, 3])
def test_hand_written_bodies(fmt: str, fixed: int) -> None:
    for body in PLAIN_BINARY + PLAIN_JSON + REFUSED_OR_LEFT:
        check(body, fmt, fixed=fixed)
    for body in PLAIN_BINARY if fmt == BINARY else PLAIN_JSON + PLAIN_BINARY:
        assert check(body, fmt, fixed=fixed) is not None, body  # ordinary bodies: taken, not left


def test_what_it_leaves_is_today_s_to_refuse() -> None:
    """The bodies produce_body leaves to today's path, and which of them that path refuses (spot checks that the
    differential test above is not vacuous: these really are refused)."""
    for body in (b"", b"{}", b'{"records":[]}', b'{"records":[{"value":"QQ"}]}', b'{"records":[{"value":01}]}',
                 b'{"records":[{"value":"QQ=="}]}x', b'{"records":[{"value":"\xff"}]}'):
        assert today(body, BINARY, 5, -1, 0) == REFUSED
        assert c.produce_body(body, True, 5, -1, itertools.count(), NOW, MAX_RECORDS, 10**9) is None


def test_request_limits_stay_reachable() -> None:
    """Past max.records.per.request or the body's value bound, produce_body leaves the body to checked_records,
    whose PolicyViolationError is the answer; at the limit it takes it."""
    records = [{"key": b64(b"k%d" % i), "value": b64(b"v")} for i in range(4)]
    body = orjson.dumps({"records": records})
    assert check(body, BINARY, max_records=4) is not None
    assert c.produce_body(body, True, 5, -1, itertools.count(), NOW, 3, value_bound(3)) is None
    assert today(body, BINARY, 5, -1, 0, max_records=3) == REFUSED
    # value bound: 2 records allowed, so 128 values; a body longer than that holding more values is refused
    many = orjson.dumps({"records": [{"value": [[1]] * 100}]})
    assert len(many) > value_bound(2)
    assert today(many, JSON, 5, -1, 0, max_records=2) == REFUSED
    assert check(many, JSON, max_records=2) is None
    assert check(many, JSON, max_records=10) is not None


def test_keyless_records_take_the_counter_in_order_and_only_when_accepted() -> None:
    body = orjson.dumps({"records": [{"value": b64(b"%d" % i)} for i in range(7)]})
    counter = itertools.count(3)
    got = c.produce_body(body, True, 4, -1, counter, NOW, MAX_RECORDS, value_bound(MAX_RECORDS))
    assert got is not None and got[1] == [3, 0, 1, 2, 3, 0, 1] and next(counter) == 10
    counter = itertools.count(3)
    assert c.produce_body(body + b"x", True, 4, -1, counter, NOW, MAX_RECORDS, value_bound(MAX_RECORDS)) is None
    assert next(counter) == 3  # a body left to today's path has not moved the round robin


def test_partition_bounds() -> None:
    body = PLAIN_BINARY[0]
    for count, fixed in ((0, -1), (-1, -1), (3, 3), (3, 7)):
        assert c.produce_body(body, True, count, fixed, itertools.count(), NOW, MAX_RECORDS, 10**9) is None
    assert c.produce_body(body, True, 3, 2, itertools.count(), NOW, 0, 10**9) is None


# --------------------------------------------------------------------------------------------- generated

SPACES = ["", " ", "\n", "\t", "\r\n  ", "  \n\t "]
int64 = st.integers(-(1 << 63), (1 << 63) - 1)
plain_value = st.none() | st.booleans() | st.integers() | st.floats(-1e50, 1e50).filter(
    lambda f: f == 0 or abs(f) > 1e-90) | st.text()
json_value = st.recursive(plain_value, lambda inner: st.lists(inner, max_size=3)
                          | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=8)
odd_value = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                         lambda inner: st.lists(inner, max_size=3)
                         | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=8)


def dump(value: Any, rnd: random.Random) -> str:
    """JSON text of ``value`` in one of several encoders' styles (escaped non-ASCII, indentation, spaces)."""
    style = rnd.randrange(4)
    if style == 0:  # orjson's compact form (Python's for integers past 64 bits, which orjson does not write)
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if style == 1:
        return json.dumps(value)  # ensure_ascii: \\u escapes, surrogate pairs for astral characters
    if style == 2:
        return json.dumps(value, ensure_ascii=False, indent=rnd.choice([None, 1, "\t"]))
    return json.dumps(value, ensure_ascii=False, separators=(" , ", " :  "))


def render(members: list[tuple[str, str]], rnd: random.Random) -> str:
    """An object from raw member texts (so that duplicate and odd names survive), whitespace chosen by ``rnd``."""
    ws = lambda: rnd.choice(SPACES)  # noqa: E731
    return "{" + ws() + ("," + ws()).join(f"{name}{ws()}:{ws()}{text}{ws()}" for name, text in members) + "}"


def body_of(records: list[list[tuple[str, str]]], rnd: random.Random, top: list[tuple[str, str]] = ()) -> bytes:
    ws = lambda: rnd.choice(SPACES)  # noqa: E731
    array = "[" + ws() + ("," + ws()).join(render(r, rnd) + ws() for r in records) + "]"
    members = [*top[: len(top) // 2], ('"records"', array), *top[len(top) // 2:]]
    return (ws() + render(members, rnd) + ws()).encode()


@SETTINGS
@given(st.lists(st.fixed_dictionaries({}, optional={"key": st.none() | st.binary(max_size=40),
                                                    "value": st.none() | st.binary(max_size=300)}).filter(bool),
                min_size=1, max_size=12), st.integers(0, 1 << 30), st.integers(1, 8), st.integers(-1, 7))
def test_plain_binary_bodies_are_taken(records: list[dict[str, bytes | None]], seed: int, count: int,
                                       fixed: int) -> None:
    rnd = random.Random(seed)
    fixed = fixed if fixed < count else -1
    raw = [[(f'"{name}"', "null" if data is None else f'"{b64(data)}"') for name, data in r.items()] for r in records]
    body = body_of(raw, rnd)
    assert check(body, BINARY, count, fixed, seed) is not None


@SETTINGS
@given(st.lists(st.fixed_dictionaries({}, optional={"key": json_value, "value": json_value}).filter(bool),
                min_size=1, max_size=12), st.integers(0, 1 << 30), st.integers(1, 8))
def test_plain_json_bodies_are_taken(records: list[dict[str, Any]], seed: int, count: int) -> None:
    rnd = random.Random(seed)
    raw = [[(f'"{name}"', dump(value, rnd)) for name, value in r.items()] for r in records]
    body = body_of(raw, rnd)
    assert check(body, JSON, count, -1, seed) is not None


member_name = st.sampled_from(['"key"', '"value"', '"key"', '"value"', '"partition"', '"headers"', '"timestamp"',
                               '"Key"', '"k\\u0065y"', '"extra"'])
member_text = (st.none().map(lambda _: "null") | st.binary(max_size=20).map(lambda b: f'"{b64(b)}"')
               | st.sampled_from(['"QQ"', '"QR=="', '"a=bc"', '"\u00e9"', '"a\\/b="', '""', "5", "-1", "[]", "{}",
                                  '[{"name":"h","value":"QQ=="}]', '[{"name":"h","value":null}]', "1e400", "01"])
               | odd_value.map(lambda v: json.dumps(v, ensure_ascii=False)))
top_member = st.tuples(st.sampled_from(['"key_schema"', '"value_schema_id"', '"records"', '"extra"']),
                       st.sampled_from(["null", "1", '"s"', '{"a":[1]}', "[]"]))


@SETTINGS
@given(st.lists(st.lists(st.tuples(member_name, member_text), max_size=4), min_size=1, max_size=8),
       st.lists(top_member, max_size=2), st.integers(0, 1 << 30), st.sampled_from([BINARY, JSON]),
       st.integers(-1, 3))
def test_odd_records(records: list[list[tuple[str, str]]], top: list[tuple[str, str]], seed: int, fmt: str,
                     fixed: int) -> None:
    check(body_of(records, random.Random(seed), top), fmt, 4, fixed, seed)


@SETTINGS
@given(st.lists(st.fixed_dictionaries({}, optional={"key": json_value, "value": json_value}), min_size=1,
                max_size=6), st.integers(0, 1 << 30), st.sampled_from([BINARY, JSON]),
       st.lists(st.tuples(st.sampled_from(["insert", "delete", "replace"]), st.integers(0, 1 << 20),
                          st.sampled_from(b'{}[],:"\\ \n0123456789.eE+-tfnulQ=/\x00\x1f\x7f\x80\xc3\xa9\xed\xff')),
                min_size=1, max_size=3))
def test_mutated_bodies(records: list[dict[str, Any]], seed: int, fmt: str, edits: list[tuple[str, int, int]]
                        ) -> None:
    """Valid bodies with a few bytes inserted, deleted or replaced: whatever today's path refuses stays refused."""
    rnd = random.Random(seed)
    if fmt == BINARY:
        records = [{k: None if v is None else b64(json.dumps(v).encode()) for k, v in r.items()} for r in records]
    body = bytearray(body_of([[(f'"{k}"', dump(v, rnd)) for k, v in r.items()] for r in records], rnd))
    for op, at, byte in edits:
        at %= len(body) + 1
        if op == "insert":
            body[at:at] = bytes([byte])
        elif at < len(body):
            body[at:at + 1] = b"" if op == "delete" else bytes([byte])
    check(bytes(body), fmt, 3, -1, seed)


@SETTINGS
@given(st.text(alphabet="AQgw+/9=Z -_\\", max_size=26), st.text(alphabet="AQgw+/9=", max_size=13),
       st.integers(1, 6))
def test_base64_like_keys_and_values_decode_as_b64decode_or_are_left_to_today(value: str, key: str,
                                                                             count: int) -> None:
    """The one-pass check-and-decode (``_b64_decode_checked``) takes exactly what ``b64decode(validate=True)``
    takes, with its bytes (keys too, which pick the partition), padding and misplaced '=' included; whatever it
    refuses goes to today's path."""
    body = ('{"records":[{"key":"' + key + '","value":"' + value + '"},{"value":"QUJD"}]}').encode()
    got = check(body, BINARY, count)
    canonical = all(len(t) % 4 == 0 and "=" not in t.rstrip("=")[: len(t) - 2] and t.count("=") <= 2
                    and set(t) <= set("AQgw+/9Z=") for t in (key, value))
    if canonical:
        try:
            base64.b64decode(key, validate=True)
            base64.b64decode(value, validate=True)
        except ValueError:
            canonical = False
    assert (got is not None) == canonical, body


@pytest.mark.parametrize("special", ['\\"', "\\\\", "\\n", "\\u00e9", "é", "\U0001f600", "\x7f", "\x1f", "\x01",
                                     "\xff", "\udcff"])
def test_a_string_scanned_eight_bytes_at_a_time_stops_at_every_special_byte(special: str) -> None:
    """JSON strings are skipped eight plain bytes at a time (``_plain_run``): a quote, backslash, control or
    non-ASCII byte at any place of a window still gets its own look (a raw control character is refused, an
    escape or UTF-8 taken as orjson takes it)."""
    for at in range(18):
        text = "a" * at + special + "b" * (19 - at)
        body = ('{"records":[{"key":"k' + text + '","value":"' + text + '"}]}').encode("utf-8", "surrogateescape")
        got = check(body, JSON, 3)
        assert (got is None) == (special in ("\x1f", "\x01", "\udcff")), (special, at)  # \udcff: a raw 0xFF
