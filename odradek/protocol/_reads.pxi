# Included by _speedups.pyx (one extension module; split only to keep files short). Batch decoding and REST read answers.
# -------------------------------------------------------------------------- decoding and REST read answers

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.string cimport memcmp

cdef extern from "Python.h":
    char* _rr_bytes_data "PyBytes_AS_STRING" (PyObject* o) nogil
    int _rr_bytes_resize "_PyBytes_Resize" (PyObject** o, Py_ssize_t n) except -1
    PyObject* _rr_bytes_new "PyBytes_FromStringAndSize" (const char* s, Py_ssize_t n) except NULL
    void _rr_xdecref "Py_XDECREF" (PyObject* o)
    void _rr_set_size "Py_SET_SIZE" (PyObject* o, Py_ssize_t n)


cdef struct _Buf:
    PyObject* obj     # the answer: a bytes object written in place (grown by _PyBytes_Resize; _rr_finish)
    uint8_t* p
    Py_ssize_t n
    Py_ssize_t cap
    Py_ssize_t items  # records written so far (a comma before every one but the first)


cdef int _reserve(_Buf* b, Py_ssize_t more) except -1:
    cdef Py_ssize_t cap
    if b.n + more <= b.cap:
        return 0
    cap = max(b.cap * 2, b.n + more + 4096)
    if b.obj == NULL:
        b.obj = _rr_bytes_new(NULL, cap)
    else:
        _rr_bytes_resize(&b.obj, cap)  # on failure it frees the object, sets NULL and raises MemoryError
    b.p = <uint8_t*>_rr_bytes_data(b.obj)
    b.cap = cap
    return 0


cdef int _rr_finish(_Buf* b) except -1:
    """Give the answer its length. Within half of the room reserved, only the length changes (as bytearray
    does): a realloc would hand the allocator a smaller block than the next answer's estimate, and glibc would
    then map (and the kernel fault in and zero) fresh pages for every answer."""
    if b.n >= b.cap // 2:
        _rr_set_size(b.obj, b.n)
        b.p[b.n] = 0
        return 0
    return _rr_bytes_resize(&b.obj, b.n)


cdef inline int _put(_Buf* b, const void* data, Py_ssize_t n) except -1:
    if b.n + n > b.cap:
        _reserve(b, n)
    memcpy(b.p + b.n, data, n)
    b.n += n
    return 0


cdef inline int _put_bytes(_Buf* b, bytes data) except -1:
    return _put(b, PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))


# Tables of the per-record writers: base64 two characters per lookup (12 bits), decimal two digits per lookup.
cdef uint8_t _RR_B64PAIR[8192]
cdef uint8_t _RR_DIGITS[200]
for _i in range(4096):
    _RR_B64PAIR[2 * _i] = <uint8_t>_B64[_i >> 6]
    _RR_B64PAIR[2 * _i + 1] = <uint8_t>_B64[_i & 63]
for _i in range(100):
    _RR_DIGITS[2 * _i] = <uint8_t>(48 + _i // 10)
    _RR_DIGITS[2 * _i + 1] = <uint8_t>(48 + _i % 10)
cdef uint64_t _RR_POW10[20]  # _RR_POW10[k] = 10**k: a number below it has at most k digits
_RR_POW10[0] = 1
for _i in range(1, 20):
    _RR_POW10[_i] = _RR_POW10[_i - 1] * 10


cdef inline uint8_t* _rr_int(uint8_t* w, int64_t v) noexcept nogil:
    """Decimal ``v`` at ``w`` as Python's str(int) writes it; the position after it. The digits are counted first
    and written in place from the end, two per lookup (no staging buffer, no variable-length copy)."""
    cdef uint64_t u, q
    cdef uint32_t r
    cdef int k = 1
    cdef uint8_t* e
    if v < 0:
        w[0] = 45  # '-'
        w += 1
        u = <uint64_t>(-(v + 1)) + 1
    else:
        u = <uint64_t>v
    while k < 20 and u >= _RR_POW10[k]:
        k += 1
    e = w + k
    while u >= 100:
        q = u // 100
        r = <uint32_t>(u - q * 100)
        u = q
        e -= 2
        e[0] = _RR_DIGITS[2 * r]
        e[1] = _RR_DIGITS[2 * r + 1]
    if u >= 10:
        e[-2] = _RR_DIGITS[2 * u]
        e[-1] = _RR_DIGITS[2 * u + 1]
    else:
        e[-1] = <uint8_t>(48 + u)
    return w + k


cdef extern from *:
    """
    /* Six input bytes to eight base64 characters: one unaligned big-endian load (the caller guarantees eight
       readable bytes), four lookups in a table of character pairs (12 bits each), one 8-byte store. */
    static inline void odradek_b64_six(const unsigned char* s, unsigned char* w, const unsigned char* pairs) {
        unsigned long long x;
        __builtin_memcpy(&x, s, 8);
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        x = __builtin_bswap64(x);
    #endif
        __builtin_memcpy(w, pairs + 2 * (x >> 52), 2);
        __builtin_memcpy(w + 2, pairs + 2 * ((x >> 40) & 0xFFF), 2);
        __builtin_memcpy(w + 4, pairs + 2 * ((x >> 28) & 0xFFF), 2);
        __builtin_memcpy(w + 6, pairs + 2 * ((x >> 16) & 0xFFF), 2);
    }
    """
    void _b64_six "odradek_b64_six"(const uint8_t* s, uint8_t* w, const uint8_t* pairs) noexcept nogil


cdef extern from *:
    """
    /* 24 input bytes to 32 base64 characters per step with AVX2 (Mula and Lemire's method), where the CPU has it:
       chosen at run time, so the module is still built for any x86-64 and runs anywhere.

       Each 128-bit lane takes 12 bytes (the low lane s[0..11], the high lane s[12..23], loaded as two 16-byte
       loads: the caller guarantees 28 readable bytes). A byte shuffle puts each 3-byte group a, b, c in a 32-bit
       word as the bytes b, a, c, b; then as 16-bit halves the word is a:b and b:c, big-endian, and the four 6-bit
       indices sit at bits 15-10 and 9-4 of the first half and 11-6 and 5-0 of the second. Two masks and two
       16-bit multiplies (one keeping the high half, one the low) move each index to the bottom of its own byte.
       The indices become characters by adding an offset looked up by a second shuffle: 0-25 'A'.., 26-51
       'a'.., 52-61 '0'.., 62 '+', 63 '/'. */
    #if defined(__x86_64__) && defined(__GNUC__)
    #include <immintrin.h>
    static int odradek_b64_avx2_ok = -1;

    __attribute__((target("avx2")))
    static Py_ssize_t odradek_b64_avx2_run(const unsigned char* s, Py_ssize_t n, unsigned char* w) {
        const __m256i order = _mm256_setr_epi8(1, 0, 2, 1, 4, 3, 5, 4, 7, 6, 8, 7, 10, 9, 11, 10,
                                               1, 0, 2, 1, 4, 3, 5, 4, 7, 6, 8, 7, 10, 9, 11, 10);
        const __m256i high_mask = _mm256_set1_epi32(0x0FC0FC00), high_mul = _mm256_set1_epi32(0x04000040);
        const __m256i low_mask = _mm256_set1_epi32(0x003F03F0), low_mul = _mm256_set1_epi32(0x01000010);
        const __m256i offsets = _mm256_setr_epi8(65, 71, -4, -4, -4, -4, -4, -4, -4, -4, -4, -4, -19, -16, 0, 0,
                                                 65, 71, -4, -4, -4, -4, -4, -4, -4, -4, -4, -4, -19, -16, 0, 0);
        const __m256i fifty_one = _mm256_set1_epi8(51), twenty_five = _mm256_set1_epi8(25);
        Py_ssize_t i = 0;
        for (; i + 28 <= n; i += 24, w += 32) {
            __m256i in = _mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm_loadu_si128((const __m128i*)(s + i))),
                _mm_loadu_si128((const __m128i*)(s + i + 12)), 1);
            in = _mm256_shuffle_epi8(in, order);
            __m256i idx = _mm256_or_si256(_mm256_mulhi_epu16(_mm256_and_si256(in, high_mask), high_mul),
                                          _mm256_mullo_epi16(_mm256_and_si256(in, low_mask), low_mul));
            __m256i which = _mm256_sub_epi8(_mm256_subs_epu8(idx, fifty_one), _mm256_cmpgt_epi8(idx, twenty_five));
            _mm256_storeu_si256((__m256i*)w, _mm256_add_epi8(idx, _mm256_shuffle_epi8(offsets, which)));
        }
        return i;
    }

    /* Input bytes encoded at w (a multiple of 24; their 4/3 as many characters written): 0 without AVX2. */
    static inline Py_ssize_t odradek_b64_avx2(const unsigned char* s, Py_ssize_t n, unsigned char* w) {
        if (odradek_b64_avx2_ok < 0) {
            __builtin_cpu_init();
            odradek_b64_avx2_ok = __builtin_cpu_supports("avx2") ? 1 : 0;
        }
        return odradek_b64_avx2_ok && n >= 28 ? odradek_b64_avx2_run(s, n, w) : 0;
    }
    static inline int odradek_b64_avx2_used(void) {
        odradek_b64_avx2((const unsigned char*)"", 0, NULL);
        return odradek_b64_avx2_ok;
    }
    #else
    static inline Py_ssize_t odradek_b64_avx2(const unsigned char* s, Py_ssize_t n, unsigned char* w) { return 0; }
    static inline int odradek_b64_avx2_used(void) { return 0; }
    #endif
    """
    Py_ssize_t _b64_avx2 "odradek_b64_avx2"(const uint8_t* s, Py_ssize_t n, uint8_t* w) noexcept nogil
    int _b64_avx2_used "odradek_b64_avx2_used"() noexcept nogil


cdef inline uint8_t* _rr_b64(const uint8_t* s, Py_ssize_t n, uint8_t* w) noexcept nogil:
    """Standard padded base64 of ``s`` at ``w`` (as base64.b64encode); the position after it. 24 bytes at a time
    with AVX2 where the CPU has it, then six bytes at a time while eight can be loaded (one big-endian load, four
    12-bit pair lookups, one 8-byte store), then three at a time, then the padded tail."""
    cdef Py_ssize_t i = _b64_avx2(s, n, w)
    cdef uint32_t v
    w += i // 3 * 4
    while i + 8 <= n:
        _b64_six(s + i, w, _RR_B64PAIR)
        w += 8
        i += 6
    while i + 3 <= n:
        v = (<uint32_t>s[i] << 16) | (<uint32_t>s[i + 1] << 8) | s[i + 2]
        memcpy(w, &_RR_B64PAIR[2 * (v >> 12)], 2)
        memcpy(w + 2, &_RR_B64PAIR[2 * (v & 0xFFF)], 2)
        w += 4
        i += 3
    return _b64_encode(s + i, n - i, w)


cdef int _put_b64(_Buf* b, const uint8_t* s, Py_ssize_t n) except -1:
    _reserve(b, _b64_encoded_len(n) + 2)
    b.p[b.n] = b'"'
    b.n = _rr_b64(s, n, b.p + b.n + 1) - b.p
    b.p[b.n] = b'"'
    b.n += 1
    return 0


# ------------------------------------------------------------------- stored JSON text: is it surely JSON?
# A JSON-format read embeds a stored key or value as is when orjson.loads accepts it, else as a JSON string of
# its text. Calling orjson per field (a Python object per value) was most of the JSON read; _rr_json_ok says in
# C whether the text is in a plain subset of JSON that orjson surely accepts (RFC 8259 with strictly valid
# UTF-8, no surrogate escapes, integers of at most 18 digits, fractions of at most 20, no exponents,
# nesting within 64). Anything else (not JSON, or JSON outside the subset) goes to orjson as before: the
# answer is the same bytes either way.

DEF RR_MAX_DEPTH = 64


cdef inline Py_ssize_t _rr_ws(const uint8_t* s, Py_ssize_t p, Py_ssize_t n) noexcept nogil:
    while p < n and (s[p] == 32 or s[p] == 10 or s[p] == 13 or s[p] == 9):
        p += 1
    return p


cdef inline int _rr_hex(uint8_t c) noexcept nogil:
    if 48 <= c <= 57:
        return c - 48
    if 97 <= c <= 102:
        return c - 87
    if 65 <= c <= 70:
        return c - 55
    return -1


cdef inline bint _rr_cont(const uint8_t* s, Py_ssize_t p, Py_ssize_t n) noexcept nogil:
    return p < n and (s[p] & 0xC0) == 0x80


cdef Py_ssize_t _rr_string(const uint8_t* s, Py_ssize_t p, Py_ssize_t n) noexcept nogil:
    """The position after the JSON string starting (at its quote) at ``p``; -1 outside the subset."""
    cdef uint8_t c, c1
    cdef int h0, h1, h2, h3
    cdef uint32_t u
    if p >= n or s[p] != 34:
        return -1
    p += 1
    while p < n:
        p = _plain_run(s, p, n)  # eight plain bytes at a time (_rest_body.pxi)
        if p >= n:
            return -1
        c = s[p]
        if c == 34:  # '"'
            return p + 1
        if c == 92:  # '\\'
            if p + 1 >= n:
                return -1
            c1 = s[p + 1]
            if c1 == 34 or c1 == 92 or c1 == 47 or c1 == 98 or c1 == 102 or c1 == 110 or c1 == 114 or c1 == 116:
                p += 2
            elif c1 == 117 and p + 5 < n:  # \\uXXXX, never a surrogate half
                h0 = _rr_hex(s[p + 2])
                h1 = _rr_hex(s[p + 3])
                h2 = _rr_hex(s[p + 4])
                h3 = _rr_hex(s[p + 5])
                if h0 < 0 or h1 < 0 or h2 < 0 or h3 < 0:
                    return -1
                u = <uint32_t>((h0 << 12) | (h1 << 8) | (h2 << 4) | h3)
                if 0xD800 <= u <= 0xDFFF:
                    return -1
                p += 6
            else:
                return -1
        elif c < 0x20:
            return -1
        elif c < 0x80:
            p += 1
        elif 0xC2 <= c <= 0xDF:
            if not _rr_cont(s, p + 1, n):
                return -1
            p += 2
        elif 0xE0 <= c <= 0xEF:
            if p + 2 >= n or not _rr_cont(s, p + 2, n):
                return -1
            c1 = s[p + 1]
            if (c == 0xE0 and not 0xA0 <= c1 <= 0xBF) or (c == 0xED and not 0x80 <= c1 <= 0x9F) or \
                    (c != 0xE0 and c != 0xED and (c1 & 0xC0) != 0x80):
                return -1
            p += 3
        elif 0xF0 <= c <= 0xF4:
            if p + 3 >= n or not _rr_cont(s, p + 2, n) or not _rr_cont(s, p + 3, n):
                return -1
            c1 = s[p + 1]
            if (c == 0xF0 and not 0x90 <= c1 <= 0xBF) or (c == 0xF4 and not 0x80 <= c1 <= 0x8F) or \
                    (c != 0xF0 and c != 0xF4 and (c1 & 0xC0) != 0x80):
                return -1
            p += 4
        else:
            return -1
    return -1


cdef Py_ssize_t _rr_number(const uint8_t* s, Py_ssize_t p, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t q
    if s[p] == 45:  # '-'
        p += 1
    if p >= n or not 48 <= s[p] <= 57:
        return -1
    q = p
    if s[p] == 48:
        p += 1
    else:
        while p < n and 48 <= s[p] <= 57:
            p += 1
    if p - q > 18:
        return -1
    if p < n and s[p] == 46:  # '.'
        p += 1
        q = p
        while p < n and 48 <= s[p] <= 57:
            p += 1
        if p == q or p - q > 20:
            return -1
    if p < n and (s[p] == 101 or s[p] == 69):  # an exponent: orjson's double range decides, not us
        return -1
    return p


cdef inline Py_ssize_t _rr_literal(const uint8_t* s, Py_ssize_t p, Py_ssize_t n, const char* lit,
                                   Py_ssize_t k) noexcept nogil:
    if p + k <= n and memcmp(s + p, lit, k) == 0:
        return p + k
    return -1


cdef inline Py_ssize_t _rr_member(const uint8_t* s, Py_ssize_t p, Py_ssize_t n) noexcept nogil:
    """An object member's name and colon at ``p``: the position of its value, or -1."""
    p = _rr_string(s, p, n)
    if p < 0:
        return -1
    p = _rr_ws(s, p, n)
    if p >= n or s[p] != 58:  # ':'
        return -1
    return _rr_ws(s, p + 1, n)


cdef bint _rr_json_ok(const uint8_t* s, Py_ssize_t n) noexcept nogil:
    """True only when orjson.loads surely accepts the text ``s`` (see above); False sends it to orjson."""
    cdef uint8_t stack[RR_MAX_DEPTH]
    cdef int depth = 0
    cdef bint want_value = True
    cdef uint8_t c
    cdef Py_ssize_t p = _rr_ws(s, 0, n)
    while True:
        if want_value:
            if p >= n:
                return False
            c = s[p]
            if c == 34:
                p = _rr_string(s, p, n)
            elif c == 123 or c == 91:  # '{' '['
                if depth == RR_MAX_DEPTH:
                    return False
                stack[depth] = c
                depth += 1
                p = _rr_ws(s, p + 1, n)
                if p >= n:
                    return False
                if s[p] == c + 2:  # '}' or ']': empty
                    depth -= 1
                    p += 1
                elif c == 123:
                    p = _rr_member(s, p, n)
                    if p < 0:
                        return False
                    continue
                else:
                    continue
            elif c == 45 or 48 <= c <= 57:
                p = _rr_number(s, p, n)
            elif c == 116:
                p = _rr_literal(s, p, n, b"true", 4)
            elif c == 102:
                p = _rr_literal(s, p, n, b"false", 5)
            elif c == 110:
                p = _rr_literal(s, p, n, b"null", 4)
            else:
                return False
            if p < 0:
                return False
            want_value = False
        p = _rr_ws(s, p, n)
        if depth == 0:
            return p == n
        if p >= n:
            return False
        c = s[p]
        if c == 44:  # ','
            p = _rr_ws(s, p + 1, n)
            if stack[depth - 1] == 123:
                p = _rr_member(s, p, n)
                if p < 0:
                    return False
            want_value = True
        elif c == stack[depth - 1] + 2:
            depth -= 1
            p += 1
        else:
            return False


cdef int _put_json_field(_Buf* b, const uint8_t* s, Py_ssize_t n) except -1:
    """A stored key or value outside _rr_json_ok's subset, in a JSON-format answer: its text when orjson takes
    it as JSON, else a JSON string of it (the reference's rule, by the reference's parser)."""
    cdef bytes data = PyBytes_FromStringAndSize(<const char*>s, n)
    try:
        _loads(data)
    except _JSONDecodeError:
        return _put_bytes(b, _dumps(data.decode("utf-8", "replace")))
    return _put_bytes(b, data)


# ------------------------------------------------------------------------------------------- records


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
    cdef int64_t count = 0, kl = 0, vl = 0  # _next_record checked every varint here
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


cdef int _decode_batch(const uint8_t* d, Py_ssize_t n, int32_t count, int64_t base, int64_t first_ts,
                       int64_t override, bint has_override, list out) except -2:
    """Decode the records of one batch's record block into ``out``; -1 sends the whole call to the reference."""
    cdef Py_ssize_t pos = 0
    cdef _Rec r
    cdef int32_t i
    for i in range(count):
        if _next_record(d, n, &pos, base, first_ts, override, has_override, &r) < 0:
            return -1
        try:
            headers = _headers(d, &r) if r.header_count else ()
        except UnicodeDecodeError:
            return -1
        out.append(Record(r.offset, r.timestamp,
                          None if r.key < 0 else PyBytes_FromStringAndSize(<const char*>d + r.key, r.key_len),
                          None if r.value < 0 else PyBytes_FromStringAndSize(<const char*>d + r.value, r.value_len),
                          tuple(headers)))
    return 0 if pos == n else -1


cdef uint8_t* _rr_field(_Buf* b, uint8_t* w, const uint8_t* d, Py_ssize_t at, Py_ssize_t n, bint binary,
                        Py_ssize_t need) except NULL:
    """A key or value at ``w`` (room reserved by the caller): null, base64, or the stored JSON text (else the
    reference's choice through orjson, after which room for the rest of the record is reserved again)."""
    if at < 0:
        memcpy(w, b"null", 4)
        return w + 4
    if binary:
        w[0] = 34
        w = _rr_b64(d + at, n, w + 1)
        w[0] = 34
        return w + 1
    if _rr_json_ok(d + at, n):
        memcpy(w, d + at, n)
        return w + n
    b.n = w - b.p
    _put_json_field(b, d + at, n)
    _reserve(b, need)
    return b.p + b.n


cdef int _rr_headers(_Buf* b, const uint8_t* d, _Rec* r) except -2:
    """``,"headers":[...]}`` of a record that has headers (rare: through Python objects); -1: the reference."""
    try:
        headers = _headers(d, r)
    except UnicodeDecodeError:
        return -1
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
    return 0


cdef int _render_batch(const uint8_t* d, Py_ssize_t n, int32_t count, int64_t base, int64_t first_ts,
                       int64_t override, bint has_override, int64_t start, bint binary, const uint8_t* prefix,
                       Py_ssize_t prefix_len, _Buf* b) except -2:
    """Append the records (from offset ``start``) of one batch's record block to the answer, each in one pass
    over room reserved once; -1 sends the whole call to the reference."""
    cdef Py_ssize_t pos = 0, need
    cdef _Rec r
    cdef int32_t i
    cdef uint8_t* w
    for i in range(count):
        if _next_record(d, n, &pos, base, first_ts, override, has_override, &r) < 0:
            return -1
        if r.offset < start:
            continue
        # prefix, 2 x 20 digits, the constant parts (75 bytes with both null), a comma: within prefix + 108.
        need = prefix_len + 108
        if r.key >= 0:
            need += _b64_encoded_len(r.key_len) if binary else r.key_len
        if r.value >= 0:
            need += _b64_encoded_len(r.value_len) if binary else r.value_len
        if b.n + need > b.cap:
            _reserve(b, need)
        w = b.p + b.n
        if b.items:
            w[0] = 44  # ','
            w += 1
        b.items += 1
        memcpy(w, prefix, prefix_len)
        w = _rr_int(w + prefix_len, r.offset)
        memcpy(w, b',"timestamp":', 13)
        w = _rr_int(w + 13, r.timestamp)
        memcpy(w, b',"key":', 7)
        w = _rr_field(b, w + 7, d, r.key, r.key_len, binary, need)
        memcpy(w, b',"value":', 9)
        w = _rr_field(b, w + 9, d, r.value, r.value_len, binary, need)
        if r.header_count:
            b.n = w - b.p
            if _rr_headers(b, d, &r) < 0:
                return -1
        else:
            memcpy(w, b',"headers":[]}', 14)
            b.n = w + 14 - b.p
    return 0 if pos == n else -1


cdef object _walk(object buf, int64_t start, bint render, bint binary, bytes prefix, bint verify_crc,
                  bint include_control, bytes head, bytes tail):
    """Every batch of ``buf`` (checked as the reference checks it), decoded into Records or rendered into one
    answer; None when the reference must do it. The bytes are read in place (no copy of ``buf`` or of a
    batch), and the answer is written into one bytes object sized up front from the batch headers."""
    cdef Py_buffer view
    cdef const uint8_t* s
    cdef const uint8_t* d
    cdef Py_ssize_t end, pos = 0, size, estimate, n, block_len
    cdef int64_t base, first_ts, max_ts, length
    cdef int attributes, codec, rc
    cdef int32_t count
    cdef _Buf b
    cdef list out = []
    cdef const uint8_t* pre = <const uint8_t*>PyBytes_AS_STRING(prefix)
    cdef Py_ssize_t pre_len = PyBytes_GET_SIZE(prefix)
    cdef object mv = None
    b.obj = NULL
    b.p = NULL
    b.n = 0
    b.cap = 0
    b.items = 0
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        s = <const uint8_t*>view.buf
        end = view.len
        if render:
            # Room for every record of every batch: the answer then never moves while it is written.
            estimate = PyBytes_GET_SIZE(head) + PyBytes_GET_SIZE(tail) + 2
            while pos + HEADER_SIZE <= end:
                length = _get_be(s + pos + 8, 4)
                count = <int32_t>_get_be(s + pos + 57, 4)
                if length < MIN_BATCH_LENGTH or count < 0 or pos + length + LOG_OVERHEAD > end:
                    break
                block_len = length + LOG_OVERHEAD - HEADER_SIZE
                # A record takes at least 7 bytes: a corrupt count cannot ask for more than the bytes allow.
                estimate += min(<Py_ssize_t>count, block_len // 7 + 1) * (pre_len + 108) + \
                    block_len * (4 if binary else 3) // 3
                pos += length + LOG_OVERHEAD
            pos = 0
            _reserve(&b, estimate)
            _put(&b, PyBytes_AS_STRING(head), PyBytes_GET_SIZE(head))
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
                if verify_crc:
                    if mv is None:
                        mv = memoryview(buf).cast("B")  # byte offsets, whatever the exporter's item format
                    if _crc(mv[pos + ATTRIBUTES_POS:pos + size]) != <uint32_t>_get_be(s + pos + CRC_POS, 4):
                        return None
                count = <int32_t>_get_be(s + pos + 57, 4)
                if count:
                    if count < 0:
                        return None
                    base = _get_be(s + pos, 8)
                    first_ts = _get_be(s + pos + 27, 8)
                    max_ts = _get_be(s + pos + 35, 8)
                    codec = attributes & 0x07
                    if codec:
                        block = _decompress(codec, PyBytes_FromStringAndSize(<const char*>s + pos + HEADER_SIZE,
                                                                             size - HEADER_SIZE))
                        if type(block) is not bytes:
                            block = bytes(block)
                        d = <const uint8_t*>PyBytes_AS_STRING(block)
                        n = PyBytes_GET_SIZE(block)
                    else:
                        d = s + pos + HEADER_SIZE
                        n = size - HEADER_SIZE
                    if render:
                        rc = _render_batch(d, n, count, base, first_ts, max_ts, attributes & 0x08 != 0, start,
                                           binary, pre, pre_len, &b)
                    else:
                        rc = _decode_batch(d, n, count, base, first_ts, max_ts, attributes & 0x08 != 0, out)
                    if rc < 0:
                        return None
            pos += size
        if pos != end:
            return None
        if not render:
            return out
        _put(&b, b"]", 1)
        _put(&b, PyBytes_AS_STRING(tail), PyBytes_GET_SIZE(tail))
        _rr_finish(&b)
        answer = <object>b.obj
        return answer
    finally:
        _rr_xdecref(b.obj)
        PyBuffer_Release(&view)


def decode_records(buf, *, bint verify_crc=True, bint include_control=False):
    """odradek.protocol.records.decode_records; None when the reference must decode (and say what is wrong)."""
    return _walk(buf, 0, False, True, b"", verify_crc, include_control, b"", b"")


def render_records(buf, int64_t start, bytes prefix not None, bint binary, bytes head not None=b"",
                   bytes tail not None=b""):
    """``head`` + the ``records`` array of a REST read answer, as JSON bytes + ``tail``: every record at or after
    ``start`` of the batches in ``buf``, each ``prefix`` (``{"topic":..,"partition":..,"offset":``) + offset,
    timestamp, key, value (base64 when ``binary``, else the stored JSON text) and headers, exactly as orjson
    renders broker/api/embedded.record_json's dicts. With the rest of the answer as ``head`` and ``tail`` the
    result is the whole answer body, written once. None when the reference must do it (a corrupt batch)."""
    return _walk(buf, start, True, binary, prefix, True, False, head, tail)


def b64encode(data) -> bytes:
    """``base64.b64encode(data)`` as the REST read answers write their fields (with AVX2 where the CPU has it);
    for the tests, which compare the two."""
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        out = PyBytes_FromStringAndSize(NULL, _b64_encoded_len(view.len))
        _rr_b64(<const uint8_t*>view.buf, view.len, <uint8_t*>PyBytes_AS_STRING(out))
        return out
    finally:
        PyBuffer_Release(&view)


def simd_base64() -> bool:
    """Whether base64 encoding takes the AVX2 path on this CPU."""
    return _b64_avx2_used() != 0
