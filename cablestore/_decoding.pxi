# Included by _speedups.pyx (one extension, one compilation unit): decoding a post.

# --- decoding --------------------------------------------------------------

cdef inline Py_ssize_t _varint(const unsigned char* p, Py_ssize_t pos, Py_ssize_t n, uint64_t* out) nogil:
    """A minimal LEB128 u64 at ``pos``: the new position, or -1 for anything the pure reader refuses."""
    cdef uint64_t result = 0
    cdef unsigned int shift = 0
    cdef Py_ssize_t start = pos
    cdef unsigned char b
    if pos >= n:
        return -1
    b = p[pos]
    if b < 0x80:
        out[0] = b
        return pos + 1
    while True:
        if pos >= n or pos - start >= 10:
            return -1
        b = p[pos]
        pos += 1
        if shift == 63 and (b & 0x7F) > 1:
            return -1  # beyond u64
        result |= (<uint64_t>(b & 0x7F)) << shift
        if b < 0x80:
            break
        shift += 7
    if b == 0:
        return -1  # non-minimal
    out[0] = result
    return pos


cdef inline bytes _slice(const unsigned char* p, Py_ssize_t start, Py_ssize_t size):
    return PyBytes_FromStringAndSize(<const char*>p + start, size)


cdef class _Reader:
    cdef const unsigned char* p
    cdef Py_ssize_t pos, n
    cdef bint bad

    cdef inline uint64_t varint(self):
        cdef uint64_t v = 0
        cdef Py_ssize_t pos = _varint(self.p, self.pos, self.n, &v)
        if pos < 0:
            self.bad = True
            return 0
        self.pos = pos
        return v

    cdef object text(self, Py_ssize_t* size):
        """A length-prefixed UTF-8 string, or None (bad set) when the pure reader would refuse it."""
        cdef uint64_t length = self.varint()
        if self.bad or length > <uint64_t>(self.n - self.pos):
            self.bad = True
            return None
        try:
            s = PyUnicode_DecodeUTF8(<const char*>self.p + self.pos, <Py_ssize_t>length, "strict")
        except UnicodeDecodeError:
            self.bad = True
            return None
        self.pos += <Py_ssize_t>length
        size[0] = <Py_ssize_t>length
        return s

    cdef tuple hashes(self):
        cdef uint64_t count = self.varint()
        cdef Py_ssize_t i
        if self.bad or count > <uint64_t>((self.n - self.pos) // HASH):
            self.bad = True
            return None
        out = PyTuple_New(<Py_ssize_t>count)
        for i in range(<Py_ssize_t>count):
            h = _slice(self.p, self.pos + i * HASH, HASH)
            Py_INCREF(h)
            PyTuple_SET_ITEM(out, i, h)
        self.pos += <Py_ssize_t>count * HASH
        return out

    cdef object channel(self):
        cdef Py_ssize_t size = 0
        s = self.text(&size)
        if self.bad:
            return None
        cdef Py_ssize_t cps = PyUnicode_GET_LENGTH(s)
        if cps < 1 or cps > 64:
            self.bad = True
            return None
        return s


def decode_post(buf):
    """Compiled :func:`cablestore.wire.codec.decode_post`: types 0-5 here, everything else by the pure decoder."""
    if type(buf) is not bytes:
        return _decode_py(buf)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(buf)
    if n < HEADER:
        return _decode_py(buf)
    cdef _Reader r = _Reader.__new__(_Reader)
    r.p = <const unsigned char*>PyBytes_AS_STRING(buf)
    r.n = n
    r.pos = HEADER
    r.bad = False
    cdef Py_ssize_t size = 0, cps
    cdef uint64_t post_type, timestamp
    links = r.hashes()
    if r.bad:
        return _decode_py(buf)
    post_type = r.varint()
    if r.bad or post_type > LEAVE:
        return _decode_py(buf)  # moderation posts, unknown types: the pure decoder
    timestamp = r.varint()
    if r.bad:
        return _decode_py(buf)
    channel = text = hashes = info = topic = None
    if post_type == TEXT:
        channel = r.channel()
        if r.bad:
            return _decode_py(buf)
        text = r.text(&size)
        if r.bad or size > 4096:
            return _decode_py(buf)
    elif post_type == DELETE:
        hashes = r.hashes()
        if r.bad or len(hashes) == 0:
            return _decode_py(buf)
    elif post_type == INFO:
        pairs = []
        while True:
            key = r.text(&size)
            if r.bad:
                return _decode_py(buf)
            if size == 0:
                break
            cps = PyUnicode_GET_LENGTH(key)
            if cps < 1 or cps > 128:
                return _decode_py(buf)
            value = r.text(&size)
            if r.bad or size > 4096:
                return _decode_py(buf)
            if key == "name":
                cps = PyUnicode_GET_LENGTH(value)
                if cps < 1 or cps > 32:
                    return _decode_py(buf)
            elif key == "accept-role":
                return _decode_py(buf)  # its value is a varint, checked (and refused) by the pure decoder
            pairs.append((key, value))
        info = tuple(pairs)
    elif post_type == TOPIC:
        channel = r.channel()
        if r.bad:
            return _decode_py(buf)
        topic = r.text(&size)
        if r.bad or PyUnicode_GET_LENGTH(topic) > 512:
            return _decode_py(buf)
    else:
        channel = r.channel()
        if r.bad:
            return _decode_py(buf)
    if r.pos != n:
        return _decode_py(buf)
    post = _post_new(_Post)
    _set(post, _POST_OFF[0], _slice(r.p, 0, 32))
    _set(post, _POST_OFF[1], _slice(r.p, 32, 64))
    _set(post, _POST_OFF[2], links)
    _set(post, _POST_OFF[3], <int>post_type)
    _set(post, _POST_OFF[4], timestamp)
    _set(post, _POST_OFF[5], channel)
    _set(post, _POST_OFF[6], text)
    _set(post, _POST_OFF[7], hashes)
    _set(post, _POST_OFF[8], info)
    _set(post, _POST_OFF[9], topic)
    cdef int i
    for i in range(10, 18):
        _set(post, _POST_OFF[i], None)
    return post
