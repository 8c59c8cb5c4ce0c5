# Included by _speedups.pyx (one extension, one compilation unit): the range sums' part of ingest.

# --- the range sums' finest buckets (views/recon.py) ---------------------------
cdef bytes _R_CHAT = None
cdef int _R_SHIFT = 0


def bind_recon(bytes chat_prefix, int finest_shift):
    """Bind the ``!chat`` prefix and the finest bucket's shift (``views.recon.SHIFTS[0]``) of :func:`recon_add`."""
    global _R_CHAT, _R_SHIFT
    _R_CHAT, _R_SHIFT = chat_prefix, finest_shift


cdef inline uint64_t _le64(const unsigned char* p) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(7, -1, -1):
        v = (v << 8) | p[i]
    return v


cdef inline void _put_le64(unsigned char* p, uint64_t v) noexcept nogil:
    cdef int i
    for i in range(8):
        p[i] = <unsigned char>(v >> (8 * i))


cdef inline uint64_t _be64(const unsigned char* p) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(8):
        v = (v << 8) | p[i]
    return v


cdef inline void _put_be64(unsigned char* p, uint64_t v) noexcept nogil:
    cdef int i
    for i in range(8):
        p[7 - i] = <unsigned char>(v >> (8 * i))


cdef inline void _acc_add(unsigned char* a, const unsigned char* b, bint take_away=False) noexcept nogil:
    """``a += b`` (or ``a -= b``), both accumulators: the sum mod 2**256 limb by limb, the signed count.

    Taking away adds the two's complement: each limb of ``b`` inverted, and one carried into the first.
    """
    cdef uint64_t x, y, s, carry = 1 if take_away else 0
    cdef int i
    for i in range(0, HASH, 8):
        x, y = _le64(a + i), _le64(b + i)
        if take_away:
            y = ~y
        s = x + y
        _put_le64(a + i, s + carry)
        carry = 1 if (s < x or s + carry < s) else 0
    y = _le64(b + HASH)
    _put_le64(a + HASH, _le64(a + HASH) - y if take_away else _le64(a + HASH) + y)


cdef unsigned char* _acc_of(object acc) except NULL:
    if type(acc) is not bytearray or PyByteArray_GET_SIZE(acc) != ACC:
        raise ValueError("a range sums' accumulator is not a bytearray of 40 bytes")
    return <unsigned char*>PyByteArray_AS_STRING(acc)


def recon_add(dict fine, int post_type, entries, int sign=1, bint in_view_order=False):
    """Compiled ``views.recon.add``: the same accumulators in ``fine``, summed in 64-bit limbs without a Python int."""
    if post_type != TEXT and post_type != DELETE:
        return
    cdef bint seen = False
    cdef bytes key, group
    cdef Py_ssize_t n, cn = PyBytes_GET_SIZE(_R_CHAT)
    cdef const unsigned char* p
    cdef unsigned char one[ACC]  # the post's hash and a count of one, as an accumulator
    cdef PyObject* found
    _put_le64(one + HASH, 1)
    for entry in entries:
        key = entry if type(entry) is bytes else entry[0]
        n = PyBytes_GET_SIZE(key)
        p = <const unsigned char*>PyBytes_AS_STRING(key)
        if n < cn + 8 + HASH or memcmp(p, PyBytes_AS_STRING(_R_CHAT), cn) != 0:
            if seen and in_view_order:
                return
            continue
        seen = True
        group = PyBytes_FromStringAndSize(NULL, n - HASH)  # the channel's !chat prefix, then the bucket big-endian
        memcpy(PyBytes_AS_STRING(group), p, n - 8 - HASH)
        _put_be64(<unsigned char*>PyBytes_AS_STRING(group) + n - 8 - HASH, _be64(p + n - 8 - HASH) >> _R_SHIFT)
        found = PyDict_GetItem(fine, group)
        if found is NULL:
            acc = PyByteArray_FromStringAndSize(NULL, ACC)
            memset(PyByteArray_AS_STRING(acc), 0, ACC)
            fine[group] = acc
        else:
            acc = <object>found
        memcpy(one, p + n - HASH, HASH)
        _acc_add(_acc_of(acc), one, sign != 1)


# --- a batch's rows (views/recon.py write_rows) ------------------------------------
cdef bytes _R_ROWS = None
cdef int _R_NLEVELS = 0
cdef int _R_UP[8]
cdef unsigned char _R_LEVEL[8]


def bind_recon_rows(bytes row_prefix, tuple ups, tuple level_bytes):
    """Bind the ``!recon`` prefix and each granularity's shift from the finest and its shift byte, for :func:`recon_write`."""
    global _R_ROWS, _R_NLEVELS
    if len(ups) != len(level_bytes) or len(ups) > 8:
        raise ValueError("one shift byte for each granularity, at most 8")
    _R_ROWS, _R_NLEVELS = row_prefix, len(ups)
    cdef int i
    for i in range(_R_NLEVELS):
        _R_UP[i], _R_LEVEL[i] = ups[i], level_bytes[i]


cdef inline bint _zero(const unsigned char* a) noexcept nogil:
    cdef int i
    for i in range(ACC):
        if a[i]:
            return False
    return True


cdef bytes _row_of(const unsigned char* k, Py_ssize_t ch, uint64_t bucket, int lv):
    """The row of granularity ``lv`` of the bucket ``bucket`` (finest) of the channel ``k[:ch]`` (escaped)."""
    cdef Py_ssize_t rn = PyBytes_GET_SIZE(_R_ROWS)
    cdef bytes row = PyBytes_FromStringAndSize(NULL, rn + ch + 9)
    cdef unsigned char* r = <unsigned char*>PyBytes_AS_STRING(row)
    memcpy(r, PyBytes_AS_STRING(_R_ROWS), rn)
    memcpy(r + rn, k, ch)
    r[rn + ch] = _R_LEVEL[lv]
    _put_be64(r + rn + ch + 1, bucket >> _R_UP[lv])
    return row


cdef int _write_row(bytes row, const unsigned char* delta, dict cached, get, dict writes, dict written) except -1:
    """One row: its committed value (``cached``, else ``get``) plus ``delta``, into ``writes`` and ``written``."""
    cdef unsigned char work[ACC]
    cdef unsigned char held[ACC]
    cdef const unsigned char* k
    cdef PyObject* found = NULL if cached is None else PyDict_GetItem(cached, row)
    stored = <object>found if found is not NULL else get(row)
    memcpy(work, delta, ACC)
    if type(stored) is bytes and PyBytes_GET_SIZE(stored) == ROW_VALUE:  # else no row, or a damaged one: empty
        k = <const unsigned char*>PyBytes_AS_STRING(stored)
        memcpy(held, k + 8, HASH)
        _put_le64(held + HASH, _be64(k))
        _acc_add(work, held)
    if <long long>_le64(work + HASH) <= 0:
        writes[row] = written[row] = None
        return 0
    cdef bytes value = PyBytes_FromStringAndSize(NULL, ROW_VALUE)
    cdef unsigned char* r = <unsigned char*>PyBytes_AS_STRING(value)
    _put_be64(r, _le64(work + HASH))
    memcpy(r + 8, work, HASH)
    writes[row] = written[row] = value
    return 0


def recon_write(dict fine, dict cached, get, dict writes, dict written):
    """Compiled ``views.recon.write_rows``: the same new values in ``writes`` and ``written``, without a Python int."""
    cdef dict out = {}
    cdef Py_ssize_t n, cn = PyBytes_GET_SIZE(_R_CHAT)
    cdef const unsigned char* k
    cdef unsigned char* a
    cdef uint64_t bucket
    cdef int lv
    cdef PyObject* found
    cdef bint alone = len(fine) == 1  # one bucket (a post a batch): its rows are its own, nothing to add up
    for key, acc in fine.items():  # every granularity's delta, as accumulators
        a = _acc_of(acc)
        if _zero(a):
            continue
        if type(key) is not bytes or PyBytes_GET_SIZE(key) < cn + 8:
            raise ValueError("a range sums' group is not a !chat prefix and a bucket")
        k, n = <const unsigned char*>PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key)
        bucket = _be64(k + n - 8)
        for lv in range(_R_NLEVELS):
            row = _row_of(k + cn, n - 8 - cn, bucket, lv)
            if alone:
                _write_row(row, a, cached, get, writes, written)
                continue
            found = PyDict_GetItem(out, row)
            if found is NULL:
                out[row] = PyByteArray_FromStringAndSize(<char*>a, ACC)
            else:
                _acc_add(<unsigned char*>PyByteArray_AS_STRING(<object>found), a)
    for row, delta in out.items():  # each row: its committed value plus the delta
        a = <unsigned char*>PyByteArray_AS_STRING(delta)
        if not _zero(a):
            _write_row(row, a, cached, get, writes, written)
