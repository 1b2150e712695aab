# Included by _speedups.pyx (one extension module; split only to keep files short). Batch decoding and REST read answers.
# -------------------------------------------------------------------------- decoding and REST read answers

cdef struct _Buf:
    uint8_t* p
    Py_ssize_t n
    Py_ssize_t cap


cdef int _reserve(_Buf* b, Py_ssize_t more) except -1:
    cdef Py_ssize_t cap
    cdef uint8_t* grown
    if b.n + more <= b.cap:
        return 0
    cap = max(b.cap * 2, b.n + more + 4096)
    grown = <uint8_t*>realloc(b.p, cap)
    if grown == NULL:
        raise MemoryError()
    b.p = grown
    b.cap = cap
    return 0


cdef inline int _put(_Buf* b, const void* data, Py_ssize_t n) except -1:
    _reserve(b, n)
    memcpy(b.p + b.n, data, n)
    b.n += n
    return 0


cdef inline int _put_bytes(_Buf* b, bytes data) except -1:
    return _put(b, PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))


cdef int _put_int(_Buf* b, int64_t v) except -1:
    cdef char tmp[24]
    cdef int i = 24
    cdef uint64_t u = <uint64_t>(-v) if v < 0 else <uint64_t>v
    while True:
        i -= 1
        tmp[i] = <char>(48 + u % 10)
        u //= 10
        if u == 0:
            break
    if v < 0:
        i -= 1
        tmp[i] = b'-'
    return _put(b, tmp + i, 24 - i)


cdef int _put_b64(_Buf* b, const uint8_t* s, Py_ssize_t n) except -1:
    _reserve(b, _b64_encoded_len(n) + 2)
    b.p[b.n] = b'"'
    b.n = _b64_encode(s, n, b.p + b.n + 1) - b.p
    b.p[b.n] = b'"'
    b.n += 1
    return 0


cdef int _put_json_field(_Buf* b, const uint8_t* s, Py_ssize_t n) except -1:
    """A stored key or value in a JSON-format answer: its text when it is JSON, else a JSON string of it."""
    cdef bytes data = PyBytes_FromStringAndSize(<const char*>s, n)
    try:
        _loads(data)
    except _JSONDecodeError:
        return _put_bytes(b, _dumps(data.decode("utf-8", "replace")))
    return _put_bytes(b, data)


cdef struct _Rec:
    int64_t offset
    int64_t timestamp
    Py_ssize_t key      # start, or -1: null
    Py_ssize_t key_len
    Py_ssize_t value
    Py_ssize_t value_len
    Py_ssize_t headers  # position of the header count
    int64_t header_count


cdef int _next_record(const uint8_t* d, Py_ssize_t n, Py_ssize_t* pos, int64_t base, int64_t first_ts,
                      int64_t override, bint has_override, _Rec* r) noexcept nogil:
    """Parse the record at pos[0] into r; -1 for anything the reference decoder would refuse (or might)."""
    cdef int64_t length, ts_delta, offset_delta, klen, vlen, hcount, hl
    cdef Py_ssize_t p = pos[0], end, j
    if _get_varint(d, n, &p, &length) < 0 or length < 0:
        return -1
    end = p + length
    if end > n:
        return -1
    p += 1  # attributes
    if _get_varint(d, end, &p, &ts_delta) < 0 or _get_varint(d, end, &p, &offset_delta) < 0:
        return -1
    if _get_varint(d, end, &p, &klen) < 0 or klen < -1 or p + klen > end:
        return -1
    r.key = p if klen >= 0 else -1
    r.key_len = klen
    if klen > 0:
        p += klen
    if _get_varint(d, end, &p, &vlen) < 0 or vlen < -1 or p + vlen > end:
        return -1
    r.value = p if vlen >= 0 else -1
    r.value_len = vlen
    if vlen > 0:
        p += vlen
    r.headers = p
    if _get_varint(d, end, &p, &hcount) < 0 or hcount < 0:
        return -1
    r.header_count = hcount
    for j in range(hcount):
        if _get_varint(d, end, &p, &hl) < 0 or hl < 0 or p + hl > end:
            return -1
        p += hl
        if _get_varint(d, end, &p, &hl) < 0 or hl < -1 or p + hl > end:
            return -1
        if hl > 0:
            p += hl
    if p != end:
        return -1
    r.offset = base + offset_delta
    r.timestamp = override if has_override else first_ts + ts_delta
    pos[0] = end
    return 0


cdef list _headers(const uint8_t* d, _Rec* r):
    cdef Py_ssize_t p = r.headers
    cdef int64_t count, kl, vl
    cdef list out = []
    _get_varint(d, p + 10, &p, &count)
    for _ in range(count):
        _get_varint(d, p + 10, &p, &kl)
        name = PyBytes_FromStringAndSize(<const char*>d + p, kl).decode()
        p += kl
        _get_varint(d, p + 10, &p, &vl)
        if vl < 0:
            out.append((name, None))
        else:
            out.append((name, PyBytes_FromStringAndSize(<const char*>d + p, vl)))
            p += vl
    return out


cdef int _batch_records(object data, int32_t count, int64_t base, int64_t first_ts, int64_t override,
                        bint has_override, int64_t start, bint render, bint binary, bytes prefix, _Buf* b,
                        list out) except -2:
    """Decode (or render) the records of one batch's record block; -1 sends the whole call to the reference."""
    cdef const uint8_t* d = <const uint8_t*>PyBytes_AS_STRING(data)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(data), pos = 0
    cdef _Rec r
    cdef int32_t i
    for i in range(count):
        if _next_record(d, n, &pos, base, first_ts, override, has_override, &r) < 0:
            return -1
        try:
            headers = _headers(d, &r) if r.header_count else ()
        except UnicodeDecodeError:
            return -1
        if not render:
            out.append(Record(r.offset, r.timestamp,
                              None if r.key < 0 else PyBytes_FromStringAndSize(<const char*>d + r.key, r.key_len),
                              None if r.value < 0 else
                              PyBytes_FromStringAndSize(<const char*>d + r.value, r.value_len),
                              tuple(headers)))
            continue
        if r.offset < start:
            continue
        if b.n > 1:
            _put(b, b",", 1)
        _put_bytes(b, prefix)
        _put_int(b, r.offset)
        _put(b, b',"timestamp":', 13)
        _put_int(b, r.timestamp)
        _put(b, b',"key":', 7)
        if r.key < 0:
            _put(b, b"null", 4)
        elif binary:
            _put_b64(b, d + r.key, r.key_len)
        else:
            _put_json_field(b, d + r.key, r.key_len)
        _put(b, b',"value":', 9)
        if r.value < 0:
            _put(b, b"null", 4)
        elif binary:
            _put_b64(b, d + r.value, r.value_len)
        else:
            _put_json_field(b, d + r.value, r.value_len)
        _put(b, b',"headers":[', 12)
        for j, (name, hv) in enumerate(headers):
            if j:
                _put(b, b",", 1)
            _put(b, b'{"name":', 8)
            _put_bytes(b, _dumps(name))
            _put(b, b',"value":', 9)
            if hv is None:
                _put(b, b"null", 4)
            else:
                _put_b64(b, <const uint8_t*>PyBytes_AS_STRING(hv), PyBytes_GET_SIZE(hv))
            _put(b, b"}", 1)
        _put(b, b"]}", 2)
    return 0 if pos == n else -1


cdef object _walk(object buf, int64_t start, bint render, bint binary, bytes prefix, bint verify_crc,
                  bint include_control):
    cdef bytes data = buf if type(buf) is bytes else bytes(buf)
    cdef const uint8_t* s = <const uint8_t*>PyBytes_AS_STRING(data)
    cdef Py_ssize_t end = PyBytes_GET_SIZE(data), pos = 0, size
    cdef int64_t base, first_ts, max_ts, length
    cdef int attributes, codec
    cdef int32_t count
    cdef _Buf b
    cdef list out = []
    b.p = NULL
    b.n = 0
    b.cap = 0
    try:
        if render:
            _put(&b, b"[", 1)
        while pos < end:
            if end - pos < HEADER_SIZE:
                return None
            length = _get_be(s + pos + 8, 4)
            if length < MIN_BATCH_LENGTH:
                return None
            size = length + LOG_OVERHEAD
            attributes = <int>_get_be(s + pos + 21, 2)
            if include_control or not attributes & 0x20:
                if pos + size > end or s[pos + 16] != 2:
                    return None
                if verify_crc and _crc(memoryview(data)[pos + ATTRIBUTES_POS:pos + size]) != \
                        <uint32_t>_get_be(s + pos + CRC_POS, 4):
                    return None
                count = <int32_t>_get_be(s + pos + 57, 4)
                if count:
                    if count < 0:
                        return None
                    base = _get_be(s + pos, 8)
                    first_ts = _get_be(s + pos + 27, 8)
                    max_ts = _get_be(s + pos + 35, 8)
                    codec = attributes & 0x07
                    block = data[pos + HEADER_SIZE:pos + size]
                    if codec:
                        block = _decompress(codec, block)
                        if type(block) is not bytes:
                            block = bytes(block)
                    if _batch_records(block, count, base, first_ts, max_ts, attributes & 0x08 != 0, start, render,
                                      binary, prefix, &b, out) < 0:
                        return None
            pos += size
        if pos != end:
            return None
        if not render:
            return out
        _put(&b, b"]", 1)
        return PyBytes_FromStringAndSize(<const char*>b.p, b.n)
    finally:
        free(b.p)


def decode_records(buf, *, bint verify_crc=True, bint include_control=False):
    """odradek.protocol.records.decode_records; None when the reference must decode (and say what is wrong)."""
    return _walk(buf, 0, False, True, b"", verify_crc, include_control)


def render_records(buf, int64_t start, bytes prefix, bint binary):
    """The ``records`` array of a REST read answer, as JSON bytes: every record at or after ``start`` of the
    batches in ``buf``, each ``prefix`` (``{"topic":..,"partition":..,"offset":``) + offset, timestamp, key,
    value (base64 when ``binary``, else the stored JSON text) and headers, exactly as orjson renders
    broker/api/embedded.record_json's dicts. None when the reference must do it (a corrupt batch)."""
    return _walk(buf, start, True, binary, prefix, True, False)
