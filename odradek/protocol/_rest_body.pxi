# Included by _speedups.pyx (one extension module). REST v2 produce: the request body's bytes straight to batches.
# ---------------------------------------------------------------------------- REST v2 produce from the body
#
# Why: orjson's object tree (a dict and two str per record) and a second walk for the JSON format's raw texts
# cost about half of the produce path's event loop. ``produce_body`` reads the body once, validating it as
# orjson would, and keeps per record only where its key and value are; base64 is decoded as it is checked, in
# the same pass, into one scratch buffer (the arena) and copied from there into the batch buffers; raw JSON text
# is compacted straight into them.
#
# Invariant: it returns a result only for bodies today's path (orjson.loads + checked_records + record_texts +
# produce_batches) accepts, and then the same bytes; None otherwise, and the caller takes today's path, which
# answers or names the error. So it never has to name an error, and it bails out on whatever is outside a small
# subset: a member name other than the ones below (escaped ones included), a duplicate member, a record member
# other than "key" and "value", a binary key or value that is not null or canonical padded base64, a number
# orjson might turn into infinity (more than two exponent digits, or longer than 64 characters), nesting deeper
# than MAX_DEPTH, a \u escape naming a lone surrogate, more than ``max_records`` records, a body over the value
# bound (checked_records' PolicyViolationError). Inside that subset it validates fully (RFC 8259: strings with
# escapes and UTF-8 per Unicode's table 3-7, control characters refused, numbers, literals, nothing but
# whitespace after the top-level value); tests/unit/protocol/test_rest_body.py checks it against today's path.

cdef struct _BodyField:
    Py_ssize_t start  # first byte of the text in the body (binary: inside the quotes)
    Py_ssize_t raw    # bytes of text in the body
    Py_ssize_t size   # bytes stored: decoded (binary) or compacted (JSON); -1 for null or absent
    Py_ssize_t at     # binary: where its decoded bytes are in the arena


cdef struct _Arena:
    uint8_t* p        # decoded base64 of the body's fields, one after the other
    Py_ssize_t n      # bytes used; a body's fields decode to at most 3/4 of its size, which ``p`` has room for


# The arena kept between calls (the event loop produces one body after another: no allocation, no fresh pages
# each time); a call that finds it taken (re-entered) or too small for its body gets one of its own.
cdef uint8_t* _KEPT_ARENA = NULL
cdef Py_ssize_t _KEPT_CAP = 0
cdef bint _KEPT_BUSY = False
DEF KEPT_ARENA_MAX = 16 * 1024 * 1024


cdef struct _BodyRec:
    _BodyField key
    _BodyField value
    int64_t part
    int64_t body      # the record's encoded length, less its length varint


# Bytes that may stand for themselves inside a JSON string: printable ASCII but '"' and '\\'.
cdef char _PLAIN_STR[256]
for _i in range(256):
    _PLAIN_STR[_i] = 1 if 0x20 <= _i < 0x80 and _i != 34 and _i != 92 else 0

DEF MAX_NUMBER_CHARS = 64


cdef inline Py_ssize_t _ws_count(const uint8_t* s, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t* spaces
                                 ) noexcept nogil:
    cdef Py_ssize_t after = _ws(s, pos, end)
    spaces[0] += after - pos
    return after


cdef inline int _hex4(const uint8_t* s, Py_ssize_t pos, Py_ssize_t end) noexcept nogil:
    """The four hex digits at ``pos`` as a number, or -1."""
    cdef int v = 0, i, d
    cdef uint8_t c
    if pos + 4 > end:
        return -1
    for i in range(4):
        c = s[pos + i]
        if 48 <= c <= 57:
            d = c - 48
        elif 97 <= c <= 102:
            d = c - 87
        elif 65 <= c <= 70:
            d = c - 55
        else:
            return -1
        v = (v << 4) | d
    return v


cdef inline Py_ssize_t _utf8_char(const uint8_t* s, Py_ssize_t pos, Py_ssize_t end) noexcept nogil:
    """Length of the well-formed UTF-8 sequence of a non-ASCII character at ``pos`` (Unicode 15, table 3-7:
    no overlong forms, no surrogates, nothing past U+10FFFF), or -1."""
    cdef uint8_t c = s[pos], lo = 0x80, hi = 0xBF
    cdef Py_ssize_t n, i
    if 0xC2 <= c <= 0xDF:
        n = 2
    elif 0xE0 <= c <= 0xEF:
        n = 3
        if c == 0xE0:
            lo = 0xA0
        elif c == 0xED:
            hi = 0x9F
    elif 0xF0 <= c <= 0xF4:
        n = 4
        if c == 0xF0:
            lo = 0x90
        elif c == 0xF4:
            hi = 0x8F
    else:
        return -1
    if pos + n > end or not (lo <= s[pos + 1] <= hi):
        return -1
    for i in range(2, n):
        if not (0x80 <= s[pos + i] <= 0xBF):
            return -1
    return n


cdef uint64_t _ONES = 0x0101010101010101
cdef uint64_t _HIGHS = 0x8080808080808080
cdef uint64_t _QUOTES = 0x22 * _ONES
cdef uint64_t _BACKSLASHES = 0x5C * _ONES
cdef uint64_t _SPACES = 0x20 * _ONES


cdef inline Py_ssize_t _plain_run(const uint8_t* s, Py_ssize_t pos, Py_ssize_t end) noexcept nogil:
    """Past the bytes at ``pos`` that stand for themselves in a JSON string (_PLAIN_STR), eight at a time while
    none of them is a quote, a backslash, a control character or non-ASCII (exact tests: a byte equal to c has
    a zero in ``x ^ c*_ONES``; a byte below 0x20 borrows in ``x - _SPACES``), then one at a time."""
    cdef uint64_t x, q, b
    while pos + 8 <= end:
        memcpy(&x, s + pos, 8)
        q = x ^ _QUOTES
        b = x ^ _BACKSLASHES
        if (((q - _ONES) & ~q) | ((b - _ONES) & ~b) | ((x - _SPACES) & ~x) | x) & _HIGHS:
            break
        pos += 8
    while pos < end and _PLAIN_STR[s[pos]]:
        pos += 1
    return pos


cdef Py_ssize_t _j_string(const uint8_t* s, Py_ssize_t pos, Py_ssize_t end) noexcept nogil:
    """Position after the JSON string at ``pos`` (its opening quote), or -1: not valid, or a \\u escape of a
    lone surrogate (orjson refuses those; the reference says so)."""
    cdef uint8_t c
    cdef int cp
    cdef Py_ssize_t n
    pos += 1
    while pos < end:
        pos = _plain_run(s, pos, end)
        if pos >= end:
            return -1
        c = s[pos]
        if _PLAIN_STR[c]:
            pos += 1
        elif c == 34:  # '"'
            return pos + 1
        elif c == 92:  # '\\'
            if pos + 1 >= end:
                return -1
            c = s[pos + 1]
            if c == b'"' or c == b'\\' or c == b'/' or c == b'b' or c == b'f' or c == b'n' or c == b'r' \
                    or c == b't':
                pos += 2
            elif c == b'u':
                cp = _hex4(s, pos + 2, end)
                if cp < 0 or 0xDC00 <= cp <= 0xDFFF:
                    return -1
                pos += 6
                if 0xD800 <= cp <= 0xDBFF:  # a high surrogate: a low one must follow
                    if pos + 1 >= end or s[pos] != b'\\' or s[pos + 1] != b'u':
                        return -1
                    cp = _hex4(s, pos + 2, end)
                    if not 0xDC00 <= cp <= 0xDFFF:
                        return -1
                    pos += 6
            else:
                return -1
        elif c < 0x20:
            return -1
        else:
            n = _utf8_char(s, pos, end)
            if n < 0:
                return -1
            pos += n
    return -1


cdef Py_ssize_t _j_number(const uint8_t* s, Py_ssize_t pos, Py_ssize_t end) noexcept nogil:
    """Position after the JSON number at ``pos``, or -1 (not RFC 8259's grammar, or one that orjson might parse
    as infinity: more than two exponent digits or MAX_NUMBER_CHARS characters; the reference decides)."""
    cdef Py_ssize_t start = pos, digits
    if s[pos] == b'-':
        pos += 1
    if pos >= end:
        return -1
    if s[pos] == b'0':
        pos += 1
    elif 49 <= s[pos] <= 57:
        while pos < end and 48 <= s[pos] <= 57:
            pos += 1
    else:
        return -1
    if pos < end and s[pos] == b'.':
        pos += 1
        digits = pos
        while pos < end and 48 <= s[pos] <= 57:
            pos += 1
        if pos == digits:
            return -1
    if pos < end and (s[pos] == b'e' or s[pos] == b'E'):
        pos += 1
        if pos < end and (s[pos] == b'+' or s[pos] == b'-'):
            pos += 1
        digits = pos
        while pos < end and 48 <= s[pos] <= 57:
            pos += 1
        if pos == digits or pos - digits > 2:
            return -1
    if pos - start > MAX_NUMBER_CHARS:
        return -1
    return pos


cdef inline bint _is_lit(const uint8_t* s, Py_ssize_t pos, Py_ssize_t end, const char* lit, Py_ssize_t n
                         ) noexcept nogil:
    cdef Py_ssize_t i
    if pos + n > end:
        return False
    for i in range(n):
        if s[pos + i] != <uint8_t>lit[i]:
            return False
    return True


cdef Py_ssize_t _j_value(const uint8_t* s, Py_ssize_t pos, Py_ssize_t end, int depth, Py_ssize_t* spaces
                         ) noexcept nogil:
    """Position after the JSON value at ``pos`` (no whitespace before it), or -1 when it is not valid or nests
    deeper than MAX_DEPTH; ``spaces`` grows by its insignificant whitespace (what compaction removes)."""
    cdef uint8_t c, close
    if pos >= end:
        return -1
    c = s[pos]
    if c == b'"':
        return _j_string(s, pos, end)
    if c == b'{' or c == b'[':
        if depth >= MAX_DEPTH:
            return -1
        close = b'}' if c == b'{' else b']'
        pos = _ws_count(s, pos + 1, end, spaces)
        if pos < end and s[pos] == close:
            return pos + 1
        while True:
            if c == b'{':
                if pos >= end or s[pos] != b'"':
                    return -1
                pos = _j_string(s, pos, end)
                if pos < 0:
                    return -1
                pos = _ws_count(s, pos, end, spaces)
                if pos >= end or s[pos] != b':':
                    return -1
                pos = _ws_count(s, pos + 1, end, spaces)
            pos = _j_value(s, pos, end, depth + 1, spaces)
            if pos < 0:
                return -1
            pos = _ws_count(s, pos, end, spaces)
            if pos >= end:
                return -1
            if s[pos] == close:
                return pos + 1
            if s[pos] != b',':
                return -1
            pos = _ws_count(s, pos + 1, end, spaces)
    if c == b't':
        return pos + 4 if _is_lit(s, pos, end, "true", 4) else -1
    if c == b'f':
        return pos + 5 if _is_lit(s, pos, end, "false", 5) else -1
    if c == b'n':
        return pos + 4 if _is_lit(s, pos, end, "null", 4) else -1
    if c == b'-' or 48 <= c <= 57:
        return _j_number(s, pos, end)
    return -1


cdef Py_ssize_t _body_field(const uint8_t* s, Py_ssize_t pos, Py_ssize_t end, bint binary, _BodyField* f,
                            _Arena* arena) noexcept nogil:
    """A record's key or value at ``pos``: where its text is and how long it is stored; the position after it,
    or -1 for what the reference must handle."""
    cdef Py_ssize_t after, spaces = 0, i, brackets = 0
    cdef const uint8_t* q
    if _is_lit(s, pos, end, "null", 4):
        f.start = pos
        f.raw = 4
        f.size = -1
        return pos + 4
    if binary:  # a base64 string: its alphabet holds neither quotes, backslashes nor anything non-ASCII
        if pos >= end or s[pos] != b'"':
            return -1
        q = <const uint8_t*>memchr(s + pos + 1, 34, end - pos - 1)
        if q == NULL:
            return -1
        f.start = pos + 1
        f.raw = q - (s + pos + 1)
        f.at = arena.n
        f.size = _b64_decode_checked(s + f.start, f.raw, arena.p + arena.n)
        if f.size < 0:
            return -1
        arena.n += f.size
        return q - s + 1
    after = _j_value(s, pos, end, 0, &spaces)
    if after < 0:
        return -1
    f.start = pos
    f.raw = after - pos
    f.size = f.raw - spaces
    if s[pos] != b'"':  # record_texts' _compact leaves a value with this many brackets to the reference
        for i in range(pos, after):
            if s[i] == b'[' or s[i] == b'{':
                brackets += 1
        if brackets > MAX_DEPTH:
            return -1
    return after


cdef uint8_t* _compact_into(const uint8_t* s, Py_ssize_t start, Py_ssize_t end, uint8_t* w) noexcept nogil:
    """Valid JSON text s[start:end] without its insignificant whitespace (record_texts' ``_compact``) at ``w``."""
    cdef Py_ssize_t i = start
    cdef bint in_str = False
    cdef uint8_t c
    while i < end:
        c = s[i]
        if in_str:
            w[0] = c
            w += 1
            if c == b'\\':
                w[0] = s[i + 1]
                w += 1
                i += 1
            elif c == b'"':
                in_str = False
        elif c == b'"':
            in_str = True
            w[0] = c
            w += 1
        elif not (c == b' ' or c == b'\t' or c == b'\n' or c == b'\r'):
            w[0] = c
            w += 1
        i += 1
    return w


cdef uint8_t* _put_body_field(uint8_t* w, const uint8_t* s, _BodyField* f, bint binary, const uint8_t* arena
                              ) noexcept nogil:
    if f.size < 0:
        w[0] = 1  # varint(-1): null
        return w + 1
    w = _put_varint(w, f.size)
    if binary:
        memcpy(w, arena + f.at, f.size)
    elif f.size == f.raw:
        memcpy(w, s + f.start, f.raw)
    else:
        _compact_into(s, f.start, f.start + f.raw, w)
    return w + f.size


cdef int32_t _key_hash(const uint8_t* s, _BodyField* f, bint binary, const uint8_t* arena) noexcept nogil:
    """murmur2 of the key's stored bytes as a positive int32 (Kafka's toPositive), or -1 when no buffer could
    be had."""
    cdef uint8_t small[256]
    cdef uint8_t* buf
    cdef int32_t h
    if binary:
        return _murmur2(arena + f.at, f.size) & 0x7FFFFFFF
    if f.size == f.raw:
        return _murmur2(s + f.start, f.raw) & 0x7FFFFFFF
    buf = &small[0] if f.size <= 256 else <uint8_t*>malloc(f.size)
    if buf == NULL:
        return -1
    _compact_into(s, f.start, f.start + f.raw, buf)
    h = _murmur2(buf, f.size) & 0x7FFFFFFF
    if buf != &small[0]:
        free(buf)
    return h


# Top-level members of a v2 produce request besides "records", with their raw text (quotes included); their
# values are validated, never used (checked_records ignores them for the json and binary formats).
_IGNORED_TOP = (b'"key_schema"', b'"key_schema_id"', b'"value_schema"', b'"value_schema_id"')


cdef inline bint _name(const uint8_t* s, Py_ssize_t pos, Py_ssize_t end, bytes name) noexcept:
    return _is_lit(s, pos, end, PyBytes_AS_STRING(name), PyBytes_GET_SIZE(name))


def produce_body(bytes body, bint binary, Py_ssize_t count, Py_ssize_t fixed, counter, int64_t now_ms,
                 Py_ssize_t max_records, Py_ssize_t max_values):
    """A REST v2 produce body straight to ``({partition: batch}, [partition of each record])``, as
    ``produce_batches`` makes from ``checked_records`` and ``record_texts``; None for anything else (see above).

    ``binary``: keys and values are base64; else JSON values, stored as their compact text. Partitions: ``fixed``
    when >= 0, else murmur2 of the key's bytes modulo ``count``, else ``next(counter) % count`` (called only
    once the body is known good, in record order). ``max_records`` is max.records.per.request; ``max_values``
    the bound checked_records puts on a body's JSON values (VALUES_PER_RECORD per record)."""
    cdef const uint8_t* s = <const uint8_t*>PyBytes_AS_STRING(body)
    cdef Py_ssize_t end = PyBytes_GET_SIZE(body), pos, i, n = 0, cap = 0, values = 0, spaces = 0, p
    cdef bint seen_records = False, seen_key, seen_value, ignored
    cdef _BodyRec* recs = NULL
    cdef _BodyRec* grown
    cdef _BodyRec* r
    cdef int64_t* info = NULL
    cdef int64_t* pcount
    cdef int64_t* psize
    cdef int64_t* pcursor
    cdef int64_t delta
    cdef list order = []
    cdef list partitions
    cdef dict outs = {}
    cdef dict batches = {}
    cdef bytes out
    cdef uint8_t* w
    cdef uint8_t* start
    cdef uint8_t** bases = NULL
    cdef _Arena arena
    cdef bint kept = False
    cdef Py_ssize_t need
    global _KEPT_ARENA, _KEPT_CAP, _KEPT_BUSY
    arena.p = NULL
    arena.n = 0
    if count <= 0 or fixed >= count or max_records <= 0:
        return None
    if end > max_values:  # checked_records' bound on parsing cost: its PolicyViolationError is the reference's
        for i in range(end):
            if s[i] == b',' or s[i] == b'{' or s[i] == b'[':
                values += 1
        if values > max_values:
            return None
    try:
        if binary:
            need = end // 4 * 3 + 4
            if not _KEPT_BUSY and need <= KEPT_ARENA_MAX:
                if need > _KEPT_CAP:
                    free(_KEPT_ARENA)
                    _KEPT_CAP = 0
                    _KEPT_ARENA = <uint8_t*>malloc(need)
                    if _KEPT_ARENA == NULL:
                        raise MemoryError()
                    _KEPT_CAP = need
                arena.p = _KEPT_ARENA
                kept = _KEPT_BUSY = True
            else:
                arena.p = <uint8_t*>malloc(need)
                if arena.p == NULL:
                    raise MemoryError()
        pos = _ws(s, 0, end)
        if pos >= end or s[pos] != b'{':
            return None
        pos = _ws(s, pos + 1, end)
        while True:  # the request object's members; "records" must be among them (an empty object is refused)
            if _name(s, pos, end, b'"records"'):
                if seen_records:
                    return None
                seen_records = True
                pos = _ws(s, pos + 9, end)
                if pos >= end or s[pos] != b':':
                    return None
                pos = _ws(s, pos + 1, end)
                if pos >= end or s[pos] != b'[':
                    return None
                pos = _ws(s, pos + 1, end)
                while True:  # the records: at least one, each {"key": ..., "value": ...} with at least one
                    if n == max_records or pos >= end or s[pos] != b'{':
                        return None
                    if n == cap:
                        cap = 64 if cap == 0 else min(cap * 2, max_records)
                        grown = <_BodyRec*>realloc(recs, cap * sizeof(_BodyRec))
                        if grown == NULL:
                            raise MemoryError()
                        recs = grown
                    r = &recs[n]
                    r.key.size = -1
                    r.value.size = -1
                    seen_key = seen_value = False
                    pos = _ws(s, pos + 1, end)
                    while True:
                        if _is_lit(s, pos, end, '"key"', 5) and not seen_key:
                            seen_key = True
                            pos = _ws(s, pos + 5, end)
                            if pos >= end or s[pos] != b':':
                                return None
                            pos = _body_field(s, _ws(s, pos + 1, end), end, binary, &r.key, &arena)
                        elif _is_lit(s, pos, end, '"value"', 7) and not seen_value:
                            seen_value = True
                            pos = _ws(s, pos + 7, end)
                            if pos >= end or s[pos] != b':':
                                return None
                            pos = _body_field(s, _ws(s, pos + 1, end), end, binary, &r.value, &arena)
                        else:
                            return None  # another member, a duplicate, an empty record, not an object
                        if pos < 0:
                            return None
                        pos = _ws(s, pos, end)
                        if pos < end and s[pos] == b',':
                            pos = _ws(s, pos + 1, end)
                        elif pos < end and s[pos] == b'}':
                            break
                        else:
                            return None
                    n += 1
                    pos = _ws(s, pos + 1, end)
                    if pos < end and s[pos] == b',':
                        pos = _ws(s, pos + 1, end)
                    elif pos < end and s[pos] == b']':
                        break
                    else:
                        return None
                pos += 1
            else:
                ignored = False
                for name in _IGNORED_TOP:
                    if _name(s, pos, end, name):
                        ignored = True
                        pos = _ws(s, pos + PyBytes_GET_SIZE(name), end)
                        break
                if not ignored or pos >= end or s[pos] != b':':
                    return None
                pos = _j_value(s, _ws(s, pos + 1, end), end, 0, &spaces)
                if pos < 0:
                    return None
            pos = _ws(s, pos, end)
            if pos < end and s[pos] == b',':
                pos = _ws(s, pos + 1, end)
            elif pos < end and s[pos] == b'}':
                break
            else:
                return None
        if not seen_records or _ws(s, pos + 1, end) != end:
            return None
        # The body is good: choose partitions (the round-robin counter only now), then size and write.
        info = <int64_t*>malloc(count * 3 * sizeof(int64_t))
        if info == NULL:
            raise MemoryError()
        pcount = info
        psize = info + count
        pcursor = info + 2 * count
        for p in range(count):
            pcount[p] = 0
            psize[p] = 0
        partitions = [None] * n
        for i in range(n):
            r = &recs[i]
            if fixed >= 0:
                p = fixed
            elif r.key.size < 0:
                p = next(counter) % count
            else:
                p = _key_hash(s, &r.key, binary, arena.p)
                if p < 0:
                    raise MemoryError()
                p = p % count
            if pcount[p] == 0:
                order.append(p)
            delta = pcount[p]
            pcount[p] += 1
            r.part = p
            r.body = 1 + 1 + _varint_size(delta) + (1 if r.key.size < 0 else _varint_size(r.key.size) + r.key.size) \
                + (1 if r.value.size < 0 else _varint_size(r.value.size) + r.value.size) + 1
            psize[p] += _varint_size(r.body) + r.body
            partitions[i] = p
        bases = <uint8_t**>malloc(count * sizeof(uint8_t*))
        if bases == NULL:
            raise MemoryError()
        for p in order:
            out = PyBytes_FromStringAndSize(NULL, HEADER_SIZE + psize[p])
            outs[p] = out
            bases[p] = <uint8_t*>PyBytes_AS_STRING(out)
            pcursor[p] = HEADER_SIZE
            pcount[p] = 0
        for i in range(n):
            r = &recs[i]
            p = r.part
            start = bases[p] + pcursor[p]
            w = _put_varint(start, r.body)
            w[0] = 0  # attributes
            w[1] = 0  # timestamp delta: every record takes now_ms
            w = _put_varint(w + 2, pcount[p])
            pcount[p] += 1
            w = _put_body_field(w, s, &r.key, binary, arena.p)
            w = _put_body_field(w, s, &r.value, binary, arena.p)
            w[0] = 0  # no headers
            pcursor[p] += (w + 1) - start
        for p in order:
            out = outs[p]
            _write_header(<uint8_t*>PyBytes_AS_STRING(out), 0, psize[p], -1, 0, <int32_t>(pcount[p] - 1), now_ms,
                          now_ms, -1, -1, -1, <int32_t>pcount[p])
            batches[p] = _seal(out)
    finally:
        free(recs)
        free(info)
        free(bases)
        if kept:
            _KEPT_BUSY = False
        else:
            free(arena.p)
    return batches, partitions
