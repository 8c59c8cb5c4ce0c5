# Included by _speedups.pyx (one extension, one compilation unit): the range sums' part of ingest.

# --- the range sums' finest buckets (views/recon.py) ---------------------------
cdef bytes _R_CHAT = None
cdef int _R_SHIFT = 0


def bind_recon(bytes chat_prefix, int finest_shift):
    """Bind the ``!chat`` prefix and the finest bucket's shift (``views.recon.SHIFTS[0]``) of :func:`recon_add`."""
    global _R_CHAT, _R_SHIFT
    _R_CHAT, _R_SHIFT = chat_prefix, finest_shift


cdef inline uint64_t _le64(const unsigned char* p):
    cdef uint64_t v = 0
    cdef int i
    for i in range(7, -1, -1):
        v = (v << 8) | p[i]
    return v


cdef inline void _put_le64(unsigned char* p, uint64_t v):
    cdef int i
    for i in range(8):
        p[i] = <unsigned char>(v >> (8 * i))


def recon_add(dict fine, int post_type, entries, int sign=1, bint in_view_order=False):
    """Compiled ``views.recon.add``: the same accumulators in ``fine``, summed in 64-bit limbs without a Python int."""
    if post_type != TEXT and post_type != DELETE:
        return
    cdef bint seen = False
    cdef bytes key, group
    cdef Py_ssize_t n, cn = PyBytes_GET_SIZE(_R_CHAT)
    cdef const unsigned char* p
    cdef unsigned char* g
    cdef unsigned char* a
    cdef uint64_t ts, bucket, x, y, s, carry
    cdef Py_ssize_t i
    cdef PyObject* found
    for entry in entries:
        key = entry if type(entry) is bytes else entry[0]
        n = PyBytes_GET_SIZE(key)
        p = <const unsigned char*>PyBytes_AS_STRING(key)
        if n < cn + 8 + HASH or memcmp(p, PyBytes_AS_STRING(_R_CHAT), cn) != 0:
            if seen and in_view_order:
                return
            continue
        seen = True
        ts = 0
        for i in range(n - 8 - HASH, n - HASH):
            ts = (ts << 8) | p[i]
        bucket = ts >> _R_SHIFT
        group = PyBytes_FromStringAndSize(NULL, n - HASH)  # the channel's !chat prefix, then the bucket big-endian
        g = <unsigned char*>PyBytes_AS_STRING(group)
        memcpy(g, p, n - 8 - HASH)
        for i in range(8):
            g[n - HASH - 1 - i] = <unsigned char>(bucket >> (8 * i))
        found = PyDict_GetItem(fine, group)
        if found is NULL:
            acc = PyByteArray_FromStringAndSize(NULL, ACC)
            memset(PyByteArray_AS_STRING(acc), 0, ACC)
            fine[group] = acc
        else:
            acc = <object>found
            if type(acc) is not bytearray or PyByteArray_GET_SIZE(acc) != ACC:
                raise ValueError("a range sums' accumulator is not a bytearray of 40 bytes")
        a = <unsigned char*>PyByteArray_AS_STRING(acc)
        carry = 0
        for i in range(0, HASH, 8):  # the sum mod 2**256, limb by limb; taking away is adding the two's complement
            x, y = _le64(a + i), _le64(p + n - HASH + i)
            if sign != 1:
                y = ~y
                if i == 0:
                    carry = 1
            s = x + y
            _put_le64(a + i, s + carry)
            carry = 1 if (s < x or s + carry < s) else 0
        _put_le64(a + HASH, _le64(a + HASH) + <uint64_t>(<long long>sign))
