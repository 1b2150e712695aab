# Included by _speedups.pyx (one extension module; split only to keep files short). The JSON format's raw-text scanner.
# ------------------------------------------------------------------------------ JSON format: raw texts


cdef inline Py_ssize_t _ws(const uint8_t* s, Py_ssize_t pos, Py_ssize_t end) noexcept nogil:
    while pos < end and (s[pos] == b' ' or s[pos] == b'\t' or s[pos] == b'\n' or s[pos] == b'\r'):
        pos += 1
    return pos


cdef inline Py_ssize_t _string_end(const uint8_t* s, Py_ssize_t pos, Py_ssize_t end) noexcept nogil:
    """Position after the string starting at ``pos`` (a '"'), or -1. memchr finds the closing quote (SIMD in
    libc); only a string with a backslash before it takes the byte loop."""
    cdef const uint8_t* q
    cdef const uint8_t* b
    pos += 1
    if pos >= end:
        return -1
    q = <const uint8_t*>memchr(s + pos, 34, end - pos)  # '"'
    if q == NULL:
        return -1
    b = <const uint8_t*>memchr(s + pos, 92, q - (s + pos))  # '\\'
    if b == NULL:
        return q - s + 1
    pos = b - s
    while pos < end:
        if s[pos] == b'\\':
            pos += 2
        elif s[pos] == b'"':
            return pos + 1
        else:
            pos += 1
    return -1


cdef Py_ssize_t _value_end(const uint8_t* s, Py_ssize_t pos, Py_ssize_t end) noexcept nogil:
    """Position after the JSON value at ``pos`` (orjson validated it), or -1 (also when it nests deeper
    than MAX_DEPTH: the reference decides what such a value means)."""
    cdef uint8_t c
    cdef int depth = 0
    if pos >= end:
        return -1
    c = s[pos]
    if c == b'"':
        return _string_end(s, pos, end)
    if c != b'{' and c != b'[':
        while pos < end and s[pos] != b',' and s[pos] != b'}' and s[pos] != b']' and s[pos] != b' ' \
                and s[pos] != b'\t' and s[pos] != b'\n' and s[pos] != b'\r':
            pos += 1
        return pos
    while pos < end:
        c = s[pos]
        if c == b'"':
            pos = _string_end(s, pos, end)
            if pos < 0:
                return -1
            continue
        if c == b'{' or c == b'[':
            depth += 1
            if depth > MAX_DEPTH:
                return -1
        elif c == b'}' or c == b']':
            depth -= 1
            if depth == 0:
                return pos + 1
        pos += 1
    return -1


cdef object _compact(const uint8_t* s, Py_ssize_t start, Py_ssize_t end):
    """raw_json.compact of s[start:end] as bytes, or None when its brackets exceed MAX_DEPTH (the reference's
    depth check decides then)."""
    cdef Py_ssize_t i, brackets = 0, spaces = 0
    cdef bint in_str = False
    cdef uint8_t c
    if s[start] == b'"':  # a string: no insignificant whitespace, and depth 0 whatever brackets it holds
        return PyBytes_FromStringAndSize(<const char*>s + start, end - start)
    for i in range(start, end):
        c = s[i]
        if c == b'[' or c == b'{':
            brackets += 1
        elif c == b' ' or c == b'\t' or c == b'\n' or c == b'\r':
            spaces += 1
    if brackets > MAX_DEPTH:
        return None
    if s[start] == b'"' or spaces == 0:
        return PyBytes_FromStringAndSize(<const char*>s + start, end - start)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, end - start)
    cdef uint8_t* w = <uint8_t*>PyBytes_AS_STRING(out)
    cdef Py_ssize_t n = 0
    i = start
    while i < end:
        c = s[i]
        if in_str:
            w[n] = c
            n += 1
            if c == b'\\' and i + 1 < end:
                w[n] = s[i + 1]
                n += 1
                i += 1
            elif c == b'"':
                in_str = False
        elif c == b'"':
            in_str = True
            w[n] = c
            n += 1
        elif not (c == b' ' or c == b'\t' or c == b'\n' or c == b'\r'):
            w[n] = c
            n += 1
        i += 1
    return out[:n]


cdef inline int _name_is(const uint8_t* s, Py_ssize_t start, Py_ssize_t stop, const char* name, Py_ssize_t n
                         ) noexcept nogil:
    """1 when the member name s[start:stop] (quotes included) is ``name``; -1 when it has an escape."""
    cdef Py_ssize_t i
    for i in range(start + 1, stop - 1):
        if s[i] == b'\\':
            return -1
    if stop - start - 2 != n:
        return 0
    for i in range(n):
        if s[start + 1 + i] != <uint8_t>name[i]:
            return 0
    return 1


def record_texts(bytes body):
    """broker/api/raw_json.record_texts as bytes: for each element of the body's (last) ``records`` array, the
    compact raw text of its last ``key`` and ``value`` members; None when the body needs the reference (a
    member name with an escape, a value nesting deeper than MAX_DEPTH, a shape orjson's checks refuse)."""
    cdef const uint8_t* s = <const uint8_t*>PyBytes_AS_STRING(body)
    cdef Py_ssize_t end = PyBytes_GET_SIZE(body), pos, name_end, vstart, vend, rstart = -1, rend = -1
    cdef Py_ssize_t ks, ke, vs, ve, nstart
    cdef int is_name
    cdef list out = []
    pos = _ws(s, 0, end)
    if pos >= end or s[pos] != b'{':
        return None
    pos = _ws(s, pos + 1, end)
    while pos < end and s[pos] != b'}':
        if s[pos] != b'"':
            return None
        name_end = _string_end(s, pos, end)
        if name_end < 0:
            return None
        is_name = _name_is(s, pos, name_end, "records", 7)
        if is_name < 0:
            return None
        pos = _ws(s, name_end, end)
        vstart = _ws(s, pos + 1, end)  # after the ':'
        vend = _value_end(s, vstart, end)
        if vend < 0:
            return None
        if is_name:
            rstart, rend = vstart, vend
        pos = _ws(s, vend, end)
        if pos < end and s[pos] == b',':
            pos = _ws(s, pos + 1, end)
    if rstart < 0:
        return out
    if s[rstart] != b'[':
        return None
    pos = _ws(s, rstart + 1, rend)
    while pos < rend - 1:
        if s[pos] != b'{':
            out.append((None, None))
            pos = _value_end(s, pos, rend)
            if pos < 0:
                return None
        else:
            ks = ke = vs = ve = -1
            pos = _ws(s, pos + 1, rend)
            while pos < rend and s[pos] != b'}':
                if s[pos] != b'"':
                    return None
                nstart = pos
                name_end = _string_end(s, pos, rend)
                if name_end < 0:
                    return None
                pos = _ws(s, name_end, rend)
                vstart = _ws(s, pos + 1, rend)
                vend = _value_end(s, vstart, rend)
                if vend < 0:
                    return None
                if _name_is(s, nstart, name_end, "key", 3) == 1:
                    ks, ke = vstart, vend
                elif _name_is(s, nstart, name_end, "value", 5) == 1:
                    vs, ve = vstart, vend
                elif _name_is(s, nstart, name_end, "x", 1) < 0:
                    return None
                pos = _ws(s, vend, rend)
                if pos < rend and s[pos] == b',':
                    pos = _ws(s, pos + 1, rend)
            pos += 1  # the '}'
            key = None if ks < 0 else _compact(s, ks, ke)
            value = None if vs < 0 else _compact(s, vs, ve)
            if (ks >= 0 and key is None) or (vs >= 0 and value is None):
                return None
            out.append((key, value))
        pos = _ws(s, pos, rend)
        if pos < rend and s[pos] == b',':
            pos = _ws(s, pos + 1, rend)
    return out
