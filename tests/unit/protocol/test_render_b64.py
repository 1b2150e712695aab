"""The compiled REST read renders every key and value length as base64.b64encode does: the six-bytes-at-a-time
step (it reads eight) must stop in time and hand the tail to the three-byte step and the padding."""

from __future__ import annotations

import base64
import random

import orjson
import pytest

from odradek.protocol import speedups
from odradek.protocol.records import encode_batch

pytestmark = pytest.mark.skipif(not speedups.COMPILED, reason="the compiled codec is not built")


def test_every_length_up_to_200_bytes_renders_as_b64encode() -> None:
    rnd = random.Random(7)
    rows = [(rnd.randbytes(n % 23), rnd.randbytes(n), 1_700_000_000_000 + n, ()) for n in range(201)]
    buf = encode_batch(rows)
    answer = orjson.loads(speedups.render_records(buf, 0, speedups.read_prefix("t", 0), True, b"", b""))
    assert [r["value"] for r in answer] == [base64.b64encode(v).decode() for _, v, _, _ in rows]
    assert [r["key"] for r in answer] == [base64.b64encode(k).decode() for k, _, _, _ in rows]
