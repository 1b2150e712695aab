# Included by _speedups.pyx: the compiled twin of validate.check_block_records (Kafka's LogValidator inner loop).
#
# Why: the binary produce path checks every record of a client's batch before the leader appends it; in Python
# that loop built a Record per record and was most of the broker's time on a 1,000-record batch. This walks
# the same bytes in C without the GIL and answers only "certainly valid": anything else (a bad record, a header
# key that is not UTF-8, a value that could overflow int64) answers False and the reference runs, which names
# the error. So it may be stricter than the reference, never looser.

cdef extern from "Python.h":
    object PyUnicode_DecodeUTF8(const char* s, Py_ssize_t size, const char* errors)

cdef int64_t TS_BOUND = (<int64_t>1) << 62  # beyond it C's int64 sums could overflow where Python's do not


cdef int _check_records(const uint8_t* d, Py_ssize_t n, Py_ssize_t count, int64_t first_ts, bint check_ts,
                        int64_t now_ms, int64_t max_diff, Py_ssize_t* header_keys) noexcept nogil:
    """1 when all ``count`` records parse exactly to the end of ``d`` with offset deltas 0..count-1 and their
    timestamps within ``max_diff`` of ``now_ms`` (when ``check_ts``); 0 otherwise. Header keys are not checked
    here (UTF-8 needs the GIL): their count goes to ``header_keys`` and the caller checks them."""
    cdef Py_ssize_t pos = 0, end, i, h
    cdef int64_t length, ts_delta, offset_delta, klen, vlen, nheaders, hk, hv, ts, diff
    header_keys[0] = 0
    for i in range(count):
        if _get_varint(d, n, &pos, &length) or length < 0:
            return 0
        end = pos + length
        if end > n:
            return 0
        pos += 1  # record attributes
        if _get_varint(d, end, &pos, &ts_delta) or _get_varint(d, end, &pos, &offset_delta):
            return 0
        if offset_delta != i:
            return 0
        if check_ts:
            if ts_delta >= TS_BOUND or ts_delta <= -TS_BOUND:
                return 0
            ts = first_ts + ts_delta
            if ts >= 0:
                diff = ts - now_ms if ts >= now_ms else now_ms - ts
                if diff > max_diff:
                    return 0
        if _get_varint(d, end, &pos, &klen) or klen < -1 or klen > end - pos:
            return 0
        if klen > 0:
            pos += klen
        if _get_varint(d, end, &pos, &vlen) or vlen < -1 or vlen > end - pos:
            return 0
        if vlen > 0:
            pos += vlen
        if _get_varint(d, end, &pos, &nheaders) or nheaders < 0:
            return 0
        for h in range(nheaders):
            if _get_varint(d, end, &pos, &hk) or hk < 0 or hk > end - pos:
                return 0
            pos += hk
            if _get_varint(d, end, &pos, &hv) or hv < -1 or hv > end - pos:
                return 0
            if hv > 0:
                pos += hv
        header_keys[0] += nheaders
        if pos != end:
            return 0
    return pos == n


cdef int _header_keys_utf8(const uint8_t* d, Py_ssize_t n, Py_ssize_t count):
    """1 when every header key of the (already framed-checked) records decodes as UTF-8, else 0."""
    cdef Py_ssize_t pos = 0, i, h
    cdef int64_t length, skip, klen, vlen, nheaders, hk, hv
    for i in range(count):
        _get_varint(d, n, &pos, &length)
        pos += 1
        _get_varint(d, n, &pos, &skip)
        _get_varint(d, n, &pos, &skip)
        _get_varint(d, n, &pos, &klen)
        if klen > 0:
            pos += klen
        _get_varint(d, n, &pos, &vlen)
        if vlen > 0:
            pos += vlen
        _get_varint(d, n, &pos, &nheaders)
        for h in range(nheaders):
            _get_varint(d, n, &pos, &hk)
            try:
                PyUnicode_DecodeUTF8(<const char*>(d + pos), hk, NULL)
            except UnicodeDecodeError:
                return 0
            pos += hk
            _get_varint(d, n, &pos, &hv)
            if hv > 0:
                pos += hv
    return 1


def check_records(data, Py_ssize_t count, int64_t first_ts, bint log_append_time, int64_t now_ms,
                  int64_t max_diff) -> bool:
    """True when the records block of one batch (decompressed, after the 61-byte header) certainly passes
    validate.check_block_records; False sends the caller to that reference for its verdict and message."""
    cdef const uint8_t[::1] view = data
    cdef const uint8_t* d = &view[0] if view.shape[0] else NULL
    cdef Py_ssize_t n = view.shape[0], header_keys = 0
    cdef bint check_ts = not log_append_time
    cdef int ok
    if count <= 0 or d == NULL or first_ts >= TS_BOUND or first_ts <= -TS_BOUND:
        return False
    with nogil:
        ok = _check_records(d, n, count, first_ts, check_ts, now_ms, max_diff, &header_keys)
    if ok and header_keys:
        ok = _header_keys_utf8(d, n, count)
    return bool(ok)
