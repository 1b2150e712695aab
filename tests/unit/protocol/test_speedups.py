"""The compiled record codec against the pure Python reference: byte-identical output, or the reference's error.

Why property tests: the two implementations share no code, so only many generated inputs (odd lengths for
murmur2, every base64 padding case, nested JSON with whitespace and escapes, corrupt batches) show they agree.
Under ODRADEK_NO_EXTENSIONS=1 the compiled side is absent and these tests skip; CI then runs the REST tests on
the reference (tests/unit/protocol/test_speedups_selection.py checks which one is loaded).
"""

from __future__ import annotations

import base64
import itertools

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.api import raw_json
from broker.api.embedded import record_json
from odradek.protocol import speedups
from odradek.protocol.errors import OdradekError
from odradek.protocol.partitioner import murmur2 as py_murmur2
from odradek.protocol.records import GZIP, NONE, ZSTD, decode_records, encode_batch

if not speedups.COMPILED:
    pytest.skip("the compiled codec is not in use (ODRADEK_NO_EXTENSIONS=1 or no compiler)", allow_module_level=True)

from odradek.protocol import _speedups as c

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
maybe_bytes = st.none() | st.binary(max_size=300)
header = st.tuples(st.text(max_size=8), maybe_bytes)
record = st.tuples(maybe_bytes, maybe_bytes, st.none() | st.integers(0, 1 << 42), st.lists(header, max_size=3))


def test_base64_every_length_and_byte_as_the_standard_library() -> None:
    """Every length up to 200 (the AVX2 steps take 24 bytes when 28 can be read: 28, 52, 76, ...; the scalar tail
    every remainder and padding after them), every byte value in every position of a step."""
    for n in range(201):
        data = bytes((i * 97 + n) & 0xFF for i in range(n))
        assert c.b64encode(data) == base64.b64encode(data), n
    for b in range(256):
        data = bytes([b]) * 57 + bytes((b + k) & 0xFF for k in range(7)) * 3  # 78: two AVX2 steps, then the tail
        assert c.b64encode(data) == base64.b64encode(data), b


def test_the_cpus_base64_path_is_reported() -> None:
    """On a CPU with AVX2 the vector path is the one the tests above ran (ours have it), elsewhere the scalar one."""
    with open("/proc/cpuinfo") as f:
        avx2 = " avx2" in f.read()
    assert c.simd_base64() == avx2


@SETTINGS
@given(st.binary(max_size=1000))
def test_base64_as_the_standard_library(data: bytes) -> None:
    assert c.b64encode(data) == base64.b64encode(data)
    assert c.b64encode(memoryview(data)) == base64.b64encode(data)


def _reference_decode(text: bytes) -> bytes | None:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        return None


def test_base64_decoding_every_length_and_every_wrong_character_as_the_standard_library() -> None:
    """Every length up to 200 characters (the AVX2 steps take 32 when 40 are there: 40, 72, ...; the scalar code
    the rest and the padding), and at every position of a 128-character text each kind of character outside the
    alphabet (each class of the vector check: '=' and '@' beside the letters, '`' and '{', ':', '-', '.', a
    space, NUL, bytes past ASCII): the compiled decoder answers the reference's bytes, or None where it raises."""
    for n in range(0, 151):
        data = bytes((i * 89 + n) & 0xFF for i in range(n))
        text = base64.b64encode(data)
        assert c.b64decode(text) == data, n
    text = base64.b64encode(bytes(range(96)))
    assert len(text) == 128
    for i in range(len(text)):
        for wrong in b"=@[`{:-. \x00\x7f\x80\xff":
            bad = text[:i] + bytes([wrong]) + text[i + 1:]
            got = c.b64decode(bad)
            assert got == _reference_decode(bad), (i, wrong)


@SETTINGS
@given(st.binary(max_size=1000))
def test_base64_decoding_as_the_standard_library(data: bytes) -> None:
    text = base64.b64encode(data)
    assert c.b64decode(text) == data


@SETTINGS
@given(st.binary(min_size=40, max_size=200))
def test_base64_decoding_of_any_text_is_the_standard_librarys_or_none(text: bytes) -> None:
    got = c.b64decode(text)
    assert got is None or got == _reference_decode(text)


@SETTINGS
@given(st.binary(max_size=64))
def test_murmur2(data: bytes) -> None:
    assert c.murmur2(data) == py_murmur2(data)
    assert c.murmur2(bytearray(data)) == py_murmur2(data)


@SETTINGS
@given(st.lists(record, min_size=1, max_size=30), st.sampled_from([NONE, GZIP, ZSTD]), st.integers(0, 1 << 40),
       st.integers(-1, 1000), st.booleans())
def test_encode_batch(records: list, codec: int, base: int, epoch: int, log_append: bool) -> None:
    kwargs = {"base_offset": base, "compression": codec, "partition_leader_epoch": epoch,
              "timestamp_type": 1 if log_append else 0, "now_ms": 1_700_000_000_000}
    assert c.encode_batch(records, **kwargs) == encode_batch(records, **kwargs)


def test_encode_batch_errors_are_the_references() -> None:
    for bad in ([], [(None, b"v", None, ())]):
        with pytest.raises(OdradekError):
            encode_batch(bad)
        with pytest.raises(OdradekError):
            c.encode_batch(bad)
    assert c.encode_batch([(bytearray(b"k"), b"v", 5, ())]) == encode_batch([(bytearray(b"k"), b"v", 5, ())])


@SETTINGS
@given(st.lists(st.lists(record, min_size=1, max_size=10), min_size=1, max_size=4),
       st.sampled_from([NONE, GZIP]), st.booleans(), st.binary(max_size=40), st.binary(max_size=8))
def test_decode_records_and_render(batches: list, codec: int, binary: bool, head: bytes, tail: bytes) -> None:
    buf = b"".join(encode_batch(rs, base_offset=100 * i, compression=codec, now_ms=7) for i, rs in enumerate(batches))
    assert c.decode_records(buf) == decode_records(buf)
    assert c.decode_records(bytearray(buf)) == decode_records(buf)
    prefix = speedups.read_prefix("t-1", 3)
    rendered = c.render_records(buf, 150, prefix, binary)
    assert rendered == speedups.py_render_records(buf, 150, prefix, binary)
    fmt = "binary" if binary else "json"
    expected = orjson.dumps([record_json("t-1", 3, r, fmt) for r in decode_records(buf) if r.offset >= 150])
    assert rendered == expected
    assert c.render_records(buf, 150, prefix, binary, head, tail) == head + expected + tail
    assert c.render_records(memoryview(buf), 150, prefix, binary, head, tail) == \
        speedups.py_render_records(buf, 150, prefix, binary, head, tail)


def _answer(buf: bytes, start: int, binary: bool) -> tuple[bytes, bytes]:
    """(compiled, reference) read answer bodies, the compiled one written whole as broker/api/fetch.py does."""
    fields = {"topic": "t.x", "partition": 7, "high_watermark": 1 << 40, "log_start_offset": 0, "next_offset": 12}
    prefix = speedups.read_prefix("t.x", 7)
    body = c.render_records(buf, start, prefix, binary, orjson.dumps(fields)[:-1] + b',"records":', b"}")
    fmt = "binary" if binary else "json"
    records = [record_json("t.x", 7, r, fmt) for r in decode_records(buf) if r.offset >= start]
    return body, orjson.dumps({**fields, "records": records})


def test_render_answer_is_the_json_response() -> None:
    """What broker/api/fetch.py sends is what orjson writes for the answer dict, records and all."""
    values = [(b"k%d" % i, bytes(range(i % 256)) * 3, 1_700_000_000_000 + i, ()) for i in range(300)]
    json_values = [(b'"k%d"' % i, orjson.dumps({"i": i, "s": "é" * (i % 5), "l": [1.5, None, True]}), None, ())
                   for i in range(300)]
    for rows, binary in ((values, True), (json_values, False)):
        buf = b"".join(encode_batch(rows[i:i + 70], base_offset=i, now_ms=9) for i in range(0, 300, 70))
        for start in (0, 1, 140, 299, 300):
            body, reference = _answer(buf, start, binary)
            assert body == reference
        assert _answer(b"", 0, binary)[0] == _answer(b"", 0, binary)[1]


@SETTINGS
@given(st.binary(min_size=61, max_size=400), st.integers(0, 400))
def test_corrupt_batches_go_to_the_reference(noise: bytes, cut: int) -> None:
    good = encode_batch([(b"k", b"v" * 20, 1, [("h", b"x")])] * 3)
    for buf in (noise, good[:cut], good[:cut] + noise[: len(good) - cut]):
        try:
            expected = decode_records(buf)
        except OdradekError:
            expected = None
        got = c.decode_records(buf)
        assert got is None or got == expected
        assert speedups.decode_records(buf) == expected if expected is not None else True


def test_json_values_render_as_stored() -> None:
    stored = [(None, b'{"n":123456789012345678901234567890,"n":1}', 1, ()), (b'"k"', b"not json \xff", 2, ())]
    buf = encode_batch(stored)
    prefix = speedups.read_prefix("t", 0)
    out = c.render_records(buf, 0, prefix, False)
    assert out == speedups.py_render_records(buf, 0, prefix, False)
    assert b'"value":{"n":123456789012345678901234567890,"n":1}' in out


b64_text = st.one_of(st.binary(max_size=40).map(lambda b: base64.b64encode(b).decode()),
                     st.text(alphabet="QUJDRA==+/x-_ é", max_size=12))
plain = st.fixed_dictionaries({}, optional={"key": st.none() | b64_text, "value": st.none() | b64_text})


@SETTINGS
@given(st.lists(plain | st.just({"key": "YQ==", "partition": 1}) | st.just(3), min_size=1, max_size=40),
       st.integers(1, 12), st.integers(-1, 2))
def test_produce_batches_binary(records: list, count: int, fixed: int) -> None:
    fixed = fixed if fixed < count else -1
    got = c.produce_batches(records, None, True, count, fixed, itertools.count(5), 1_700_000_000_000)
    want = speedups.py_produce_batches(records, None, True, count, fixed, itertools.count(5), 1_700_000_000_000)
    assert got == want


int64 = st.integers(-(1 << 63), (1 << 63) - 1)
json_value = st.recursive(st.none() | st.booleans() | int64 | st.floats(allow_nan=False) | st.text(),
                          lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                      max_size=3), max_leaves=8)


def _spaced(doc: object, rnd: int) -> bytes:
    """JSON text with insignificant whitespace sprinkled in (the stored text must be compacted identically)."""
    text = orjson.dumps(doc, option=orjson.OPT_INDENT_2) if rnd % 2 else orjson.dumps(doc)
    return text.replace(b":", b" : ") if rnd % 3 == 0 else text


@SETTINGS
@given(st.lists(st.fixed_dictionaries({}, optional={"key": json_value, "value": json_value})
                | st.integers(0, 999), min_size=1, max_size=12), st.integers(0, 5), st.integers(1, 8))
def test_record_texts_and_json_produce(records: list, rnd: int, count: int) -> None:
    body = _spaced({"records": records}, rnd)
    texts = c.record_texts(body)
    reference = [(None if k is None else k.encode(), None if v is None else v.encode())
                 for k, v in raw_json.record_texts(body.decode())]
    if texts is None:  # deep nesting: the reference decides; nothing here is that deep
        pytest.fail("record_texts gave up on an ordinary body")
    assert texts == reference
    parsed = orjson.loads(body)["records"]
    got = c.produce_batches(parsed, texts, False, count, -1, itertools.count(), 9)
    assert got == speedups.py_produce_batches(parsed, reference, False, count, -1, itertools.count(), 9)


def test_record_texts_edge_cases() -> None:
    cases = [b'{"records":[]}', b'{"key_schema": {"a": [1, 2]}, "records": [{"value": [1, {"b": " x "}]}]}',
             b'{"records": [{"key": "a\\"b", "value": 1e400}], "records": [{"value": {"x" : 1}}]}',
             b' \n{ "records" : [ {"value":"\\u00e9 \\\\"} , 5 , {"key" : null} ] }']
    for body in cases:
        texts = c.record_texts(body)
        assert texts == [(None if k is None else k.encode(), None if v is None else v.encode())
                         for k, v in raw_json.record_texts(body.decode())]
    assert c.record_texts(b'{"rec\\u006frds": [{"value": 1}]}') is None  # escaped names: the reference
    deep = b"[" * 200 + b"]" * 200
    assert c.record_texts(b'{"records": [{"value": ' + deep + b"}]}") is None


@SETTINGS
@given(st.lists(st.integers(0, 5), min_size=1, max_size=50), st.booleans())
def test_render_offsets(partitions: list[int], acks0: bool) -> None:
    bases: dict[int, int | None] = {p: None if acks0 else p * 1000 for p in set(partitions)}
    assert c.render_offsets(partitions, bases) == speedups.py_render_offsets(partitions, bases)


# Stored JSON-format texts: JSON as clients send it (spaced, nested, escaped, non-ASCII), and near-JSON that
# orjson refuses or that lies outside the compiled check's subset (the reference then decides).
json_texts = st.one_of(
    st.builds(_spaced, json_value, st.integers(0, 5)),
    st.text(alphabet='{}[],:"\\ -+.eE0123456789tfrunlasé\n\t\x00\x7f\ud7ff\ue000', max_size=24).map(
        lambda t: t.encode("utf-8", "surrogatepass")),
    st.binary(max_size=12).map(lambda b: b'"' + b + b'"'),
    st.sampled_from([b'"\\ud800"', b'"\\udfff x"', b'"\\ud83d\\ude00"', b'"\\u00e9\\u0000"', b'"\\uZZZZ"',
                     b'"\xed\xa0\x80"', b'"\xc0\x80"', b'"\xe0\x80\x80"', b'"\xf0\x80\x80\x80"', b'"\xf4\x90\x80\x80"',
                     b'"\xef\xbb\xbf"', b"\xef\xbb\xbf1", b'"\xf0\x9f\x98\x80"', b'"\xe2\x82"', b"01", b"-", b"-0",
                     b"1e400", b"1E2", b"1.", b".5", b"0.12345678901234567890", b"0.123456789012345678901",
                     b"123456789012345678", b"1234567890123456789", b"18446744073709551616", b"[1,]", b'{"a":1,}',
                     b'{"a"}', b"{,}", b"[,1]", b"[ ]", b"{ }", b' "x" ', b"\t\r\n null \n", b"tru", b"nulll", b"",
                     b" ", b'"\t"', b'"\x7f"', b"[" * 64 + b"]" * 64, b"[" * 65 + b"]" * 65,
                     b'{"a":' * 70 + b"1" + b"}" * 70, b'{"n":123456789012345678901234567890,"n":1}']),
)


@SETTINGS
@given(st.lists(st.tuples(st.none() | json_texts, st.none() | json_texts), min_size=1, max_size=12),
       st.integers(0, 3), st.booleans())
def test_render_json_texts(stored: list, start: int, binary: bool) -> None:
    buf = encode_batch([(k, v, 5, ()) for k, v in stored], base_offset=1)
    prefix = speedups.read_prefix("t", 0)
    assert c.render_records(buf, start, prefix, binary) == speedups.py_render_records(buf, start, prefix, binary)
    body, reference = _answer(buf, start, binary)
    assert body == reference


def test_render_offsets_leaves_unusual_partitions_to_the_reference() -> None:
    huge = {1 << 21: 5}
    assert c.render_offsets([1 << 21], huge) is None
    assert speedups.render_offsets([1 << 21], huge) == speedups.py_render_offsets([1 << 21], huge)
    with pytest.raises(KeyError):  # a partition without a base: the reference's error
        speedups.render_offsets([0, 1], {0: 3})


@pytest.mark.parametrize("special", [b'\\"', b"\\\\", b"\\n", b"\\u00e9", b"\\ud800", "é".encode(), b"\x7f", b"\x1f",
                                     b"\xff", b"\xed\xa0\x80", b"\xf0\x9f\x98\x80", b'"'])
def test_a_stored_json_string_scanned_eight_bytes_at_a_time_stops_at_every_special_byte(special: bytes) -> None:
    """A read's JSON strings are skipped eight plain bytes at a time (``_plain_run``): a special byte at any place
    of a window still gets its own look, so the answer is the reference's (text as stored, or a JSON string of
    what orjson refuses)."""
    stored = [(None, b'"' + b"a" * at + special + b"b" * (19 - at) + b'"', 5, ()) for at in range(18)]
    buf = encode_batch(stored)
    prefix = speedups.read_prefix("t", 0)
    assert c.render_records(buf, 0, prefix, False) == speedups.py_render_records(buf, 0, prefix, False)


def test_rendered_offsets_and_timestamps_at_every_digit_count_are_pythons() -> None:
    """The compiled render counts a number's digits before writing them in place: each boundary (9 -> 10 digits
    and so on, both int64 ends, -1 as a timestamp) is checked against str(int)."""
    edges = sorted({0, 1, -1, (1 << 63) - 1, -(1 << 63)} | {s * (10 ** k + d) for k in range(19) for d in (-1, 0)
                                                             for s in (1, -1)})
    prefix = speedups.read_prefix("t", 0)
    buf = b"".join(encode_batch([(b"k", b"v", ts, ())], base_offset=i, now_ms=1) for i, ts in enumerate(edges))
    for binary in (True, False):
        assert c.render_records(buf, 0, prefix, binary) == speedups.py_render_records(buf, 0, prefix, binary)
    for base in [v for v in edges if 0 <= v <= (1 << 63) - 2]:
        one = encode_batch([(None, b"1", 5, ())], base_offset=base)
        assert c.render_records(one, 0, prefix, True) == speedups.py_render_records(one, 0, prefix, True)
        assert b'"offset":%d,' % base in c.render_records(one, 0, prefix, True)
