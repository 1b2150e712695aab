# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The compiled twin of the per-record code of the REST path (built by ``pip install``; see speedups.py).

Why it exists: on the REST Proxy path every record crossed pure Python several times (base64, Kafka's murmur2,
varints, a dict per record in the answer), so the broker, not the network, was the limit. Here each of those
loops runs in C over the bytes, with no Python object per record where the reference builds several.

The pure Python code stays the reference (odradek/protocol/records/, partitioner.py, speedups.py's ``py_*``
functions); tests/unit/protocol/test_speedups.py checks byte-identical output. Anything unusual (a field this
code does not handle, bad base64, a corrupt batch, deep JSON) makes a function here return ``None`` instead of
raising, and the caller takes the reference path, which says precisely what is wrong: the error behaviour
is the reference's by construction.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItem, PyDict_Size
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.object cimport PyObject
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memchr, memcpy

import crc32c as _crc32c
import orjson

from odradek.protocol.records.batch import Record
from odradek.protocol.records.compression import compress as _compress
from odradek.protocol.records.compression import decompress as _decompress

cdef extern from "Python.h":
    bint PyUnicode_IS_COMPACT_ASCII(object o)
    void* PyUnicode_DATA(object o)
    Py_ssize_t PyUnicode_GET_LENGTH(object o)

_crc = _crc32c.crc32c
_loads = orjson.loads
_dumps = orjson.dumps
_JSONDecodeError = orjson.JSONDecodeError

DEF HEADER_SIZE = 61
DEF LOG_OVERHEAD = 12
DEF MIN_BATCH_LENGTH = 49
DEF ATTRIBUTES_POS = 21
DEF CRC_POS = 17
DEF MAX_DEPTH = 128

cdef const char* _B64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
cdef signed char _UNB64[256]
cdef int _i
for _i in range(256):
    _UNB64[_i] = -1
for _i in range(64):
    _UNB64[<uint8_t>_B64[_i]] = _i

# ------------------------------------------------------------------------------------------------ murmur2


cdef inline int32_t _murmur2(const uint8_t* data, Py_ssize_t n) noexcept nogil:
    cdef uint32_t m = 0x5BD1E995
    cdef uint32_t h = (<uint32_t>0x9747B28C) ^ <uint32_t>n
    cdef uint32_t k
    cdef Py_ssize_t i, end = n & ~3
    for i in range(0, end, 4):
        k = data[i] | (<uint32_t>data[i + 1] << 8) | (<uint32_t>data[i + 2] << 16) | (<uint32_t>data[i + 3] << 24)
        k *= m
        k ^= k >> 24
        k *= m
        h *= m
        h ^= k
    cdef int rem = n & 3
    if rem == 3:
        h ^= <uint32_t>data[end + 2] << 16
    if rem >= 2:
        h ^= <uint32_t>data[end + 1] << 8
    if rem >= 1:
        h ^= data[end]
        h *= m
    h ^= h >> 13
    h *= m
    h ^= h >> 15
    return <int32_t>h


def b64decode(data) -> bytes | None:
    """``base64.b64decode(data, validate=True)`` as REST produce bodies are decoded (AVX2 where the CPU has it), or
    None where that would raise (or for a non-canonical text the reference accepts); for the tests."""
    cdef bytes b = data if type(data) is bytes else bytes(data)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(b)
    out = PyBytes_FromStringAndSize(NULL, n // 4 * 3 + 4)
    cdef Py_ssize_t got = _b64_decode_checked(<const uint8_t*>PyBytes_AS_STRING(b), n,
                                              <uint8_t*>PyBytes_AS_STRING(out))
    return None if got < 0 else out[:got]


def murmur2(data) -> int:
    """Kafka's ``Utils.murmur2`` (signed int32), as odradek.protocol.partitioner.murmur2."""
    cdef bytes b = data if type(data) is bytes else bytes(data)
    return _murmur2(<const uint8_t*>PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b))


# ------------------------------------------------------------------------------------------------ varints


cdef inline int _varint_size(int64_t v) noexcept nogil:
    cdef uint64_t z = (<uint64_t>v << 1) ^ <uint64_t>(v >> 63)
    cdef int n = 1
    while z >= 0x80:
        z >>= 7
        n += 1
    return n


cdef inline uint8_t* _put_varint(uint8_t* p, int64_t v) noexcept nogil:
    cdef uint64_t z = (<uint64_t>v << 1) ^ <uint64_t>(v >> 63)
    while z >= 0x80:
        p[0] = <uint8_t>((z & 0x7F) | 0x80)
        p += 1
        z >>= 7
    p[0] = <uint8_t>z
    return p + 1


cdef inline int _get_varint(const uint8_t* p, Py_ssize_t end, Py_ssize_t* pos, int64_t* out) noexcept nogil:
    """0 and the value, or -1 when the varint runs past ``end`` or is longer than 10 bytes."""
    cdef uint64_t z = 0
    cdef int shift = 0
    cdef uint8_t b
    cdef Py_ssize_t i = pos[0]
    while True:
        if i >= end or shift > 63:
            return -1
        b = p[i]
        i += 1
        if shift == 63 and b > 1:
            return -1  # beyond 64 bits: the reference's Python ints would differ
        z |= <uint64_t>(b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
    pos[0] = i
    out[0] = <int64_t>(z >> 1) ^ -(<int64_t>(z & 1))
    return 0


cdef inline void _put_be(uint8_t* p, uint64_t v, int width) noexcept nogil:
    cdef int i
    for i in range(width):
        p[width - 1 - i] = <uint8_t>(v >> (8 * i))


cdef inline int64_t _get_be(const uint8_t* p, int width) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(width):
        v = (v << 8) | p[i]
    if width < 8 and v >> (8 * width - 1):
        v -= <uint64_t>1 << (8 * width)
    return <int64_t>v


# ------------------------------------------------------------------------------------------------- base64


cdef Py_ssize_t _b64_len(const uint8_t* s, Py_ssize_t n) noexcept nogil:
    """Decoded length of canonical-alphabet, padded base64, or -1 for anything else (the caller falls back to
    ``b64decode(validate=True)``, which either accepts it too or names the error)."""
    if n & 3:
        return -1
    if n == 0:
        return 0
    cdef Py_ssize_t pad = 0, i
    if s[n - 1] == b'=':
        pad = 2 if s[n - 2] == b'=' else 1
    for i in range(0, n - 4, 4):  # -1 has every bit set: one test per quantum
        if (_UNB64[s[i]] | _UNB64[s[i + 1]] | _UNB64[s[i + 2]] | _UNB64[s[i + 3]]) < 0:
            return -1
    for i in range(n - 4, n - pad):
        if _UNB64[s[i]] < 0:
            return -1
    return n // 4 * 3 - pad


cdef void _b64_decode(const uint8_t* s, Py_ssize_t n, uint8_t* out) noexcept nogil:
    """Decode what _b64_len accepted (trailing bits of the last quantum dropped, as a2b_base64 does)."""
    cdef Py_ssize_t i
    cdef uint32_t v
    cdef Py_ssize_t full = n if n == 0 or s[n - 1] != b'=' else n - 4
    for i in range(0, full, 4):
        v = (<uint32_t>_UNB64[s[i]] << 18) | (<uint32_t>_UNB64[s[i + 1]] << 12) | \
            (<uint32_t>_UNB64[s[i + 2]] << 6) | <uint32_t>_UNB64[s[i + 3]]
        out[0] = <uint8_t>(v >> 16)
        out[1] = <uint8_t>(v >> 8)
        out[2] = <uint8_t>v
        out += 3
    if full != n:
        v = (<uint32_t>_UNB64[s[full]] << 18) | (<uint32_t>_UNB64[s[full + 1]] << 12)
        out[0] = <uint8_t>(v >> 16)
        if s[full + 2] != b'=':
            v |= <uint32_t>_UNB64[s[full + 2]] << 6
            out[1] = <uint8_t>(v >> 8)


cdef extern from *:
    """
    /* 32 base64 characters to 24 bytes per step with AVX2 (Mula and Lemire's method), where the CPU has it (chosen
       at run time). Checking: a character is valid when the bit of its high nibble's class is clear in the mask
       its low nibble looks up. The classes: high nibble 0, 1 or 8-15 (nothing valid), 2 ('+' at B, '/' at F), 3
       (digits, 0-9), 4 and 6 (letters, 1-F), 5 and 7 (letters, 0-A); '=' is not valid here, so the caller leaves
       the last quantum to the scalar code. Values: the character plus an offset looked up by its high nibble
       ('/' moved to its own entry). Packing: two multiply-adds join four 6-bit values into 24 bits per 32-bit
       word, a shuffle takes the three bytes of each word in order, and each lane's 12 bytes are stored (16-byte
       stores: the caller leaves 8 more characters, whose bytes overwrite the 4 spare ones). */
    #if defined(__x86_64__) && defined(__GNUC__)
    #include <immintrin.h>
    static int odradek_b64d_avx2_ok = -1;

    __attribute__((target("avx2")))
    static Py_ssize_t odradek_b64d_avx2_run(const unsigned char* s, Py_ssize_t n, unsigned char* out, int* bad) {
        const __m256i lut_lo = _mm256_setr_epi8(0x0B, 0x03, 0x03, 0x03, 0x03, 0x03, 0x03, 0x03,
                                                0x03, 0x03, 0x07, 0x15, 0x17, 0x17, 0x17, 0x15,
                                                0x0B, 0x03, 0x03, 0x03, 0x03, 0x03, 0x03, 0x03,
                                                0x03, 0x03, 0x07, 0x15, 0x17, 0x17, 0x17, 0x15);
        const __m256i lut_hi = _mm256_setr_epi8(0x01, 0x01, 0x02, 0x04, 0x08, 0x10, 0x08, 0x10,
                                                0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01,
                                                0x01, 0x01, 0x02, 0x04, 0x08, 0x10, 0x08, 0x10,
                                                0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01);
        const __m256i lut_roll = _mm256_setr_epi8(0, 16, 19, 4, -65, -65, -71, -71, 0, 0, 0, 0, 0, 0, 0, 0,
                                                  0, 16, 19, 4, -65, -65, -71, -71, 0, 0, 0, 0, 0, 0, 0, 0);
        const __m256i nibble = _mm256_set1_epi8(0x0F), slash = _mm256_set1_epi8('/');
        const __m256i join6 = _mm256_set1_epi32(0x01400140), join12 = _mm256_set1_epi32(0x00011000);
        const __m256i take3 = _mm256_setr_epi8(2, 1, 0, 6, 5, 4, 10, 9, 8, 14, 13, 12, -1, -1, -1, -1,
                                               2, 1, 0, 6, 5, 4, 10, 9, 8, 14, 13, 12, -1, -1, -1, -1);
        __m256i wrong = _mm256_setzero_si256();
        Py_ssize_t i = 0;
        for (; i + 40 <= n; i += 32, out += 24) {
            __m256i in = _mm256_loadu_si256((const __m256i*)(s + i));
            __m256i hi = _mm256_and_si256(_mm256_srli_epi32(in, 4), nibble);
            __m256i lo = _mm256_and_si256(in, nibble);
            wrong = _mm256_or_si256(wrong, _mm256_and_si256(_mm256_shuffle_epi8(lut_lo, lo),
                                                            _mm256_shuffle_epi8(lut_hi, hi)));
            __m256i roll = _mm256_shuffle_epi8(lut_roll, _mm256_add_epi8(_mm256_cmpeq_epi8(in, slash), hi));
            __m256i v = _mm256_add_epi8(in, roll);
            v = _mm256_madd_epi16(_mm256_maddubs_epi16(v, join6), join12);
            v = _mm256_shuffle_epi8(v, take3);
            _mm_storeu_si128((__m128i*)out, _mm256_castsi256_si128(v));
            _mm_storeu_si128((__m128i*)(out + 12), _mm256_extracti128_si256(v, 1));
        }
        *bad = !_mm256_testz_si256(wrong, wrong);
        return i;
    }

    /* Characters decoded at out (a multiple of 32, leaving at least 8; 3/4 as many bytes written), 0 without AVX2;
       *bad set when one of them is not in the alphabet. */
    static inline Py_ssize_t odradek_b64d_avx2(const unsigned char* s, Py_ssize_t n, unsigned char* out, int* bad) {
        *bad = 0;
        if (odradek_b64d_avx2_ok < 0) {
            __builtin_cpu_init();
            odradek_b64d_avx2_ok = __builtin_cpu_supports("avx2") ? 1 : 0;
        }
        return odradek_b64d_avx2_ok && n >= 40 ? odradek_b64d_avx2_run(s, n, out, bad) : 0;
    }
    #else
    static inline Py_ssize_t odradek_b64d_avx2(const unsigned char* s, Py_ssize_t n, unsigned char* out, int* bad) {
        *bad = 0;
        return 0;
    }
    #endif
    """
    Py_ssize_t _b64d_avx2 "odradek_b64d_avx2"(const uint8_t* s, Py_ssize_t n, uint8_t* out, int* bad) noexcept nogil


cdef Py_ssize_t _b64_decode_checked(const uint8_t* s, Py_ssize_t n, uint8_t* out) noexcept nogil:
    """_b64_len and _b64_decode in one pass: the decoded length, written at ``out`` (room for ``n // 4 * 3``),
    or -1 for what _b64_len refuses (then ``out`` holds garbage). 32 characters at a time with AVX2 where the CPU
    has it (the last quantum and its padding always here)."""
    if n & 3:
        return -1
    if n == 0:
        return 0
    cdef Py_ssize_t pad = 0, i, full, first
    cdef signed char a, b, c, d, bad = 0
    cdef uint32_t v
    cdef int wrong = 0
    if s[n - 1] == b'=':
        pad = 2 if s[n - 2] == b'=' else 1
    full = n - 4 if pad else n
    first = _b64d_avx2(s, n, out, &wrong)
    if wrong:
        return -1
    out += first // 4 * 3
    for i in range(first, full, 4):
        a = _UNB64[s[i]]
        b = _UNB64[s[i + 1]]
        c = _UNB64[s[i + 2]]
        d = _UNB64[s[i + 3]]
        bad |= a | b | c | d  # -1 has every bit set: one test at the end
        v = (<uint32_t><uint8_t>a << 18) | (<uint32_t><uint8_t>b << 12) | (<uint32_t><uint8_t>c << 6) | <uint8_t>d
        out[0] = <uint8_t>(v >> 16)
        out[1] = <uint8_t>(v >> 8)
        out[2] = <uint8_t>v
        out += 3
    if pad:
        a = _UNB64[s[full]]
        b = _UNB64[s[full + 1]]
        c = _UNB64[s[full + 2]] if pad == 1 else 0
        bad |= a | b | c
        v = (<uint32_t><uint8_t>a << 18) | (<uint32_t><uint8_t>b << 12) | (<uint32_t><uint8_t>c << 6)
        out[0] = <uint8_t>(v >> 16)
        if pad == 1:
            out[1] = <uint8_t>(v >> 8)
    return -1 if bad < 0 else n // 4 * 3 - pad


cdef inline Py_ssize_t _b64_encoded_len(Py_ssize_t n) noexcept nogil:
    return (n + 2) // 3 * 4


cdef uint8_t* _b64_encode(const uint8_t* s, Py_ssize_t n, uint8_t* out) noexcept nogil:
    cdef Py_ssize_t i = 0
    cdef uint32_t v
    while i + 3 <= n:
        v = (<uint32_t>s[i] << 16) | (<uint32_t>s[i + 1] << 8) | s[i + 2]
        out[0] = _B64[v >> 18]
        out[1] = _B64[(v >> 12) & 63]
        out[2] = _B64[(v >> 6) & 63]
        out[3] = _B64[v & 63]
        out += 4
        i += 3
    if n - i == 1:
        v = <uint32_t>s[i] << 16
        out[0] = _B64[v >> 18]
        out[1] = _B64[(v >> 12) & 63]
        out[2] = b'='
        out[3] = b'='
        out += 4
    elif n - i == 2:
        v = (<uint32_t>s[i] << 16) | (<uint32_t>s[i + 1] << 8)
        out[0] = _B64[v >> 18]
        out[1] = _B64[(v >> 12) & 63]
        out[2] = _B64[(v >> 6) & 63]
        out[3] = b'='
        out += 4
    return out


# --------------------------------------------------------------------------------------- batch framing


cdef void _write_header(uint8_t* p, int64_t base_offset, Py_ssize_t block_len, int32_t epoch, int attrs,
                        int32_t last_offset_delta, int64_t first_ts, int64_t max_ts, int64_t producer_id,
                        int producer_epoch, int32_t base_sequence, int32_t count) noexcept nogil:
    _put_be(p, <uint64_t>base_offset, 8)
    _put_be(p + 8, <uint64_t>(HEADER_SIZE - LOG_OVERHEAD + block_len), 4)
    _put_be(p + 12, <uint64_t><uint32_t>epoch, 4)
    p[16] = 2
    _put_be(p + 17, 0, 4)
    _put_be(p + 21, <uint64_t>attrs, 2)
    _put_be(p + 23, <uint64_t><uint32_t>last_offset_delta, 4)
    _put_be(p + 27, <uint64_t>first_ts, 8)
    _put_be(p + 35, <uint64_t>max_ts, 8)
    _put_be(p + 43, <uint64_t>producer_id, 8)
    _put_be(p + 51, <uint64_t>producer_epoch, 2)
    _put_be(p + 53, <uint64_t><uint32_t>base_sequence, 4)
    _put_be(p + 57, <uint64_t><uint32_t>count, 4)


cdef object _seal(bytes out):
    """Write the CRC-32C of bytes 21.. into bytes 17..20 (the batch was just built: nobody else holds it)."""
    cdef uint32_t crc = _crc(memoryview(out)[ATTRIBUTES_POS:])
    _put_be(<uint8_t*>PyBytes_AS_STRING(out) + CRC_POS, crc, 4)
    return out


# ----------------------------------------------------------------------------------------------- encoding

from odradek.protocol.records.batch import encode_batch as _py_encode_batch


cdef inline Py_ssize_t _field_size(object field) except -2:
    """Encoded size of a nullable bytes field (-1 for a type the reference must handle)."""
    if field is None:
        return 1
    if type(field) is not bytes:
        return -1
    cdef Py_ssize_t n = PyBytes_GET_SIZE(field)
    return _varint_size(n) + n


cdef inline uint8_t* _put_field(uint8_t* p, object field):
    if field is None:
        p[0] = 1  # varint(-1)
        return p + 1
    cdef Py_ssize_t n = PyBytes_GET_SIZE(field)
    p = _put_varint(p, n)
    memcpy(p, PyBytes_AS_STRING(field), n)
    return p + n


def encode_batch(records, *, int64_t base_offset=0, int compression=0, int timestamp_type=0,
                 int32_t partition_leader_epoch=-1, int64_t producer_id=-1, int producer_epoch=-1,
                 int32_t base_sequence=-1, bint is_transactional=False, bint is_control=False, now_ms=None):
    """odradek.protocol.records.encode_batch, byte for byte (the reference handles what this does not)."""
    cdef list rows = records if type(records) is list else list(records)
    cdef Py_ssize_t n = len(rows), i, j, total = 0, ks, vs, hs, body
    if n == 0 or n > 0x7FFFFFFF:
        return _py_encode_batch(rows, base_offset=base_offset, compression=compression,
                                timestamp_type=timestamp_type, partition_leader_epoch=partition_leader_epoch,
                                producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
                                is_transactional=is_transactional, is_control=is_control, now_ms=now_ms)
    cdef int64_t* deltas = <int64_t*>malloc(n * sizeof(int64_t) * 2)
    cdef int64_t* bodies = deltas + n
    cdef int64_t first_ts = 0, max_ts = 0, ts
    cdef list encoded_headers = None
    cdef object rec, key, value, raw_ts, headers, hk, hv
    cdef bytes out
    cdef uint8_t* p
    try:
        for i in range(n):
            rec = rows[i]
            if type(rec) is not tuple or len(<tuple>rec) != 4:
                rec = tuple(rec)
                if len(<tuple>rec) != 4:
                    raise _Fallback()
            key, value, raw_ts, headers = rec
            if raw_ts is None:
                if now_ms is None:
                    raise _Fallback()
                raw_ts = now_ms
            ts = raw_ts
            if i == 0:
                first_ts = max_ts = ts
            elif ts > max_ts:
                max_ts = ts
            deltas[i] = ts - first_ts
            ks = _field_size(key)
            vs = _field_size(value)
            if ks < 0 or vs < 0:
                raise _Fallback()
            if headers:
                if encoded_headers is None:
                    encoded_headers = [None] * n
                hl = []
                hs = _varint_size(len(headers))
                for hk, hv in headers:
                    hk = (<str?>hk).encode()
                    if _field_size(hv) < 0:
                        raise _Fallback()
                    hs += _field_size(hk) + _field_size(hv)
                    hl.append((hk, hv))
                encoded_headers[i] = hl
            else:
                hs = 1
            body = 1 + _varint_size(deltas[i]) + _varint_size(i) + ks + vs + hs
            bodies[i] = body
            total += _varint_size(body) + body
        out = PyBytes_FromStringAndSize(NULL, HEADER_SIZE + total)
        p = <uint8_t*>PyBytes_AS_STRING(out) + HEADER_SIZE
        for i in range(n):
            rec = rows[i]
            if type(rec) is not tuple:
                rec = tuple(rec)
            key, value, raw_ts, headers = rec
            p = _put_varint(p, bodies[i])
            p[0] = 0
            p = _put_varint(p + 1, deltas[i])
            p = _put_varint(p, i)
            p = _put_field(p, key)
            p = _put_field(p, value)
            if encoded_headers is not None and encoded_headers[i] is not None:
                hl = encoded_headers[i]
                p = _put_varint(p, len(hl))
                for hk, hv in hl:
                    p = _put_field(p, hk)
                    p = _put_field(p, hv)
            else:
                p[0] = 0
                p += 1
    except (_Fallback, TypeError, ValueError, OverflowError, UnicodeError):
        return _py_encode_batch(rows, base_offset=base_offset, compression=compression,
                                timestamp_type=timestamp_type, partition_leader_epoch=partition_leader_epoch,
                                producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
                                is_transactional=is_transactional, is_control=is_control, now_ms=now_ms)
    finally:
        free(deltas)
    cdef int attributes = compression | (0x08 if timestamp_type == 1 else 0)
    attributes |= (0x10 if is_transactional else 0) | (0x20 if is_control else 0)
    if compression != 0:
        block = _compress(compression, memoryview(out)[HEADER_SIZE:].tobytes())
        out = PyBytes_FromStringAndSize(NULL, HEADER_SIZE + len(block))
        memcpy(PyBytes_AS_STRING(out) + HEADER_SIZE, PyBytes_AS_STRING(block), len(block))
        total = len(block)
    _write_header(<uint8_t*>PyBytes_AS_STRING(out), base_offset, total, partition_leader_epoch, attributes,
                  <int32_t>(n - 1), first_ts, max_ts, producer_id, producer_epoch, base_sequence, <int32_t>n)
    return _seal(out)


class _Fallback(Exception):
    """Internal: this input is the reference's to handle."""


# ------------------------------------------------------------------------------------- REST v2 produce

_KEY = "key"
_VALUE = "value"


cdef inline Py_ssize_t _rest_field(object field, bint binary, Py_ssize_t* dlen) except -2:
    """Decoded length of a record's key or value (-1: null); -2 raised as _Fallback for the reference."""
    if field is None:
        dlen[0] = -1
        return 0
    if binary:
        if type(field) is not str or not PyUnicode_IS_COMPACT_ASCII(field):
            raise _Fallback()
        dlen[0] = _b64_len(<const uint8_t*>PyUnicode_DATA(field), PyUnicode_GET_LENGTH(field))
        if dlen[0] < 0:
            raise _Fallback()
        return 0
    if type(field) is not bytes:
        raise _Fallback()
    dlen[0] = PyBytes_GET_SIZE(field)
    return 0


cdef inline uint8_t* _put_rest_field(uint8_t* p, object field, Py_ssize_t dlen, bint binary):
    if dlen < 0:
        p[0] = 1
        return p + 1
    p = _put_varint(p, dlen)
    if binary:
        _b64_decode(<const uint8_t*>PyUnicode_DATA(field), PyUnicode_GET_LENGTH(field), p)
    else:
        memcpy(p, PyBytes_AS_STRING(field), dlen)
    return p + dlen


def produce_batches(list records, list texts, bint binary, Py_ssize_t count, Py_ssize_t fixed, counter,
                    int64_t now_ms):
    """A REST v2 produce request's records (orjson's parse of the body) straight into one v2 batch per
    partition: ``({partition: batch}, [partition of each record])``, or None when any record is not the plain
    ``{"key", "value"}`` shape this handles (the caller then takes the reference path, which also names errors).

    ``binary``: keys and values are base64 strings; else (JSON format) ``texts[i]`` holds record i's raw
    (key, value) JSON text as bytes, used where orjson's value is not null. Partitions: ``fixed`` when >= 0, else
    murmur2 of the key's bytes modulo ``count``, else ``next(counter) % count`` (keyless round-robin).
    """
    cdef Py_ssize_t n = PyList_GET_SIZE(records), i, p, klen, vlen, body, nparts = 0
    if n == 0 or count <= 0 or (not binary and (texts is None or PyList_GET_SIZE(texts) != n)):
        return None
    cdef int64_t* info = <int64_t*>malloc(n * 5 * sizeof(int64_t) + count * 3 * sizeof(int64_t))
    if info == NULL:
        raise MemoryError()
    cdef int64_t* part_of = info
    cdef int64_t* delta_of = info + n
    cdef int64_t* klens = info + 2 * n
    cdef int64_t* vlens = info + 3 * n
    cdef int64_t* bodies = info + 4 * n
    cdef int64_t* pcount = info + 5 * n
    cdef int64_t* psize = pcount + count
    cdef int64_t* pcursor = psize + count
    cdef object rec, key, value, pair
    cdef PyObject* got
    cdef uint8_t small[192]
    cdef uint8_t* kbuf
    cdef list order = []
    cdef list partitions = [None] * n
    cdef dict batches = {}
    cdef bytes out
    cdef uint8_t* w
    try:
        for p in range(count):
            pcount[p] = 0
            psize[p] = 0
        for i in range(n):
            rec = <object>PyList_GET_ITEM(records, i)
            if type(rec) is not dict:
                return None
            got = PyDict_GetItem(rec, _KEY)
            key = None if got == NULL else <object>got
            got = PyDict_GetItem(rec, _VALUE)
            value = None if got == NULL else <object>got
            if PyDict_Size(rec) != (PyDict_GetItem(rec, _KEY) != NULL) + (PyDict_GetItem(rec, _VALUE) != NULL) \
                    or PyDict_Size(rec) == 0:
                return None
            if not binary:
                pair = <object>PyList_GET_ITEM(texts, i)
                key = None if key is None else pair[0]
                value = None if value is None else pair[1]
            _rest_field(key, binary, &klen)
            _rest_field(value, binary, &vlen)
            if fixed >= 0:
                p = fixed
            elif klen < 0:
                p = next(counter) % count
            elif not binary:
                p = (_murmur2(<const uint8_t*>PyBytes_AS_STRING(key), klen) & 0x7FFFFFFF) % count
            else:
                if klen <= 192:
                    kbuf = &small[0]
                else:
                    kbuf = <uint8_t*>malloc(klen)
                _b64_decode(<const uint8_t*>PyUnicode_DATA(key), PyUnicode_GET_LENGTH(key), kbuf)
                p = (_murmur2(kbuf, klen) & 0x7FFFFFFF) % count
                if kbuf != &small[0]:
                    free(kbuf)
            if p < 0 or p >= count:
                return None
            if pcount[p] == 0:
                order.append(p)
            part_of[i] = p
            delta_of[i] = pcount[p]
            pcount[p] += 1
            klens[i] = klen
            vlens[i] = vlen
            body = 1 + 1 + _varint_size(delta_of[i]) + (1 if klen < 0 else _varint_size(klen) + klen) \
                + (1 if vlen < 0 else _varint_size(vlen) + vlen) + 1
            bodies[i] = body
            psize[p] += _varint_size(body) + body
            partitions[i] = p
        outs = {}
        for p in order:
            outs[p] = PyBytes_FromStringAndSize(NULL, HEADER_SIZE + psize[p])
            pcursor[p] = HEADER_SIZE
        for i in range(n):
            rec = <object>PyList_GET_ITEM(records, i)
            p = part_of[i]
            w = <uint8_t*>PyBytes_AS_STRING(outs[p]) + pcursor[p]
            start = w
            if binary:
                key = (<dict>rec).get(_KEY)
                value = (<dict>rec).get(_VALUE)
            else:
                pair = <object>PyList_GET_ITEM(texts, i)
                key, value = pair[0], pair[1]
            w = _put_varint(w, bodies[i])
            w[0] = 0  # attributes
            w[1] = 0  # timestamp delta: every record takes now_ms
            w = _put_varint(w + 2, delta_of[i])
            w = _put_rest_field(w, key, klens[i], binary)
            w = _put_rest_field(w, value, vlens[i], binary)
            w[0] = 0  # no headers
            pcursor[p] += (w + 1) - start
        for p in order:
            out = outs[p]
            _write_header(<uint8_t*>PyBytes_AS_STRING(out), 0, psize[p], -1, 0, <int32_t>(pcount[p] - 1), now_ms,
                          now_ms, -1, -1, -1, <int32_t>pcount[p])
            batches[p] = _seal(out)
    except _Fallback:
        return None
    finally:
        free(info)
    return batches, partitions


cdef inline uint8_t* _dec_int(uint8_t* p, int64_t v) noexcept nogil:
    """Decimal digits of ``v`` at ``p`` (as Python's str(int) writes them); the position after them."""
    cdef uint8_t tmp[20]
    cdef int n = 0
    cdef uint64_t u
    if v < 0:
        p[0] = 45  # '-'
        p += 1
        u = <uint64_t>(-(v + 1)) + 1
    else:
        u = <uint64_t>v
    while True:
        tmp[n] = <uint8_t>(48 + u % 10)  # '0' + digit
        n += 1
        u //= 10
        if u == 0:
            break
    while n:
        n -= 1
        p[0] = tmp[n]
        p += 1
    return p


cdef inline uint8_t* _dec_lit(uint8_t* p, const char* lit, Py_ssize_t n) noexcept nogil:
    memcpy(p, lit, n)
    return p + n


def render_offsets(list partitions, dict bases):
    """The body of a REST v2 produce answer when every partition succeeded: offsets in request order, each
    ``bases[p] + its index among p's records`` (null when ``bases[p]`` is None: acks=0). One C pass into one
    buffer: per record this is on the produce path of every REST client. None for a partition number it does
    not index: speedups.py then runs the reference."""
    cdef Py_ssize_t n = len(partitions), i, top = -1, q
    cdef int64_t p
    cdef object base
    for key in bases:
        if type(key) is not int or key < 0 or key > 1 << 20:
            return None
        if key > top:
            top = key
    cdef int64_t* next_offset = <int64_t*>malloc((top + 1) * sizeof(int64_t))
    cdef char* known = <char*>malloc(top + 1)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, 64 + n * 110)
    cdef uint8_t* w = <uint8_t*>PyBytes_AS_STRING(out)
    cdef uint8_t* start = w
    if next_offset == NULL or known == NULL:
        free(next_offset)
        free(known)
        raise MemoryError()
    try:
        for q in range(top + 1):
            known[q] = 0
        for key, base in bases.items():
            q = key
            if base is None:
                known[q] = 1
            else:
                known[q] = 2
                next_offset[q] = base
        w = _dec_lit(w, b'{"key_schema_id":null,"value_schema_id":null,"offsets":[', 56)
        for i in range(n):
            obj = partitions[i]
            if type(obj) is not int or obj < 0 or obj > top or not known[<Py_ssize_t>obj]:
                return None  # the reference answers (or raises on a partition without a base)
            p = obj
            if i:
                w[0] = b','
                w += 1
            w = _dec_lit(w, b'{"partition":', 13)
            w = _dec_int(w, p)
            if known[p] == 1:
                w = _dec_lit(w, b',"offset":null', 14)
            else:
                w = _dec_lit(w, b',"offset":', 10)
                w = _dec_int(w, next_offset[p])
                next_offset[p] += 1
            w = _dec_lit(w, b',"error_code":null,"error":null}', 32)
        w = _dec_lit(w, b']}', 2)
    finally:
        free(next_offset)
        free(known)
    return out[:w - start]


include "_raw_texts.pxi"
include "_rest_body.pxi"
include "_reads.pxi"
include "_validate.pxi"
