"""``last_batch_header`` reads only lengths on its way, and answers what ``iter_batch_headers`` yields last: for
whole batches, from an offset, and before a partial or malformed tail."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from odradek.protocol.records import encode_batch, iter_batch_headers, last_batch_header


def _log(counts: list[int]) -> bytes:
    out, base = b"", 0
    for n in counts:
        out += encode_batch([(b"k", b"v" * i, None, []) for i in range(n)], base_offset=base, now_ms=1)
        base += n
    return out


@given(st.lists(st.integers(1, 5), max_size=8), st.integers(0, 200), st.integers(0, 3))
def test_it_is_the_last_header_iter_batch_headers_yields(counts: list[int], cut: int, skip: int) -> None:
    buf = _log(counts)
    offset = next((pos for i, (pos, _) in enumerate(iter_batch_headers(buf)) if i == skip), 0)
    for data in (buf, buf[:max(0, len(buf) - cut)], buf + b"\x00" * 30):  # whole, a partial tail, a short tail
        headers = [h for _, h in iter_batch_headers(data, offset)]
        assert last_batch_header(data, offset) == (headers[-1] if headers else None)


def test_a_tail_whose_length_is_impossible_ends_the_walk() -> None:
    buf = bytearray(_log([2, 3]))
    first_end = next(iter_batch_headers(buf))[1].batch_length + 12
    buf[first_end + 8:first_end + 12] = (5).to_bytes(4, "big")  # shorter than any batch
    header = last_batch_header(buf)
    assert header is not None and header.base_offset == 0 and header.next_offset == 2
