# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The compiled twin of cablestore's per-post hot path (Cython).

Each function here has a pure-Python original, kept where it always was and
used when this extension is missing or ``CABLESTORE_PURE=1`` is set
(:mod:`cablestore.compiled` chooses at import).  The two give byte-identical
results; ``tests/test_speedups.py`` checks that on generated workloads, for
each function and for whole stores.  Anything unusual (a moderation post,
a post/delete, a malformed post) is handed to the pure original, so errors
and rare cases have one definition.

This module imports nothing from cablestore: the Python modules bind what
it needs (classes, the pure originals) when they import it, so it sits
outside the layers of docs/architecture.md.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize, PyByteArray_GET_SIZE
from cpython.dict cimport PyDict_GetItem
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF, Py_XDECREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.stdint cimport uint64_t
from libc.stdio cimport snprintf
from libc.string cimport memchr, memcmp, memcpy, memset


include "_source_digest.pxi"


cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        const char* name
        int type
        Py_ssize_t offset
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member
    object PyUnicode_DecodeUTF8(const char* s, Py_ssize_t size, const char* errors)
    Py_ssize_t PyUnicode_GET_LENGTH(object u)
    object _PyLong_FromByteArray(const unsigned char* bytes, size_t n, int little_endian, int is_signed)


DEF HEADER = 96
DEF HASH = 32
DEF ACC = 40  # views.recon.ACC_SIZE
DEF ROW_VALUE = 40  # views.recon.VALUE_SIZE: a !recon row's count (BE64) then its sum (32 bytes LE)
DEF TEXT = 0
DEF DELETE = 1
DEF INFO = 2
DEF TOPIC = 3
DEF JOIN = 4
DEF LEAVE = 5


# --- frozen slotted dataclasses, filled without their __init__ -------------
# A slot of a __slots__ class is a member descriptor holding an offset into
# the instance; the slot setter stores the object there.  Storing it directly
# is what the setter does, without a Python call per field.

cdef Py_ssize_t _offset(cls, str name) except -1:
    descr = cls.__dict__[name]
    if type(descr).__name__ != "member_descriptor":
        raise TypeError(f"{cls.__name__}.{name} is not a slot")
    return (<PyMemberDescrObject*>descr).d_member.offset


cdef inline void _set(object obj, Py_ssize_t offset, object value):
    cdef PyObject** slot = <PyObject**>((<char*><PyObject*>obj) + offset)
    Py_INCREF(value)
    Py_XDECREF(slot[0])
    slot[0] = <PyObject*>value


cdef object _Post = None
cdef object _post_new = None
cdef Py_ssize_t _POST_OFF[18]
cdef object _decode_py = None


def bind_codec(post_cls, decode_py):
    """Bind the ``Post`` class and the pure decoder (called by :mod:`cablestore.wire.codec`)."""
    global _Post, _post_new, _decode_py
    names = tuple(post_cls.__dataclass_fields__)
    if len(names) != 18:
        raise TypeError("Post has changed: update cablestore/_speedups.pyx")
    for i, name in enumerate(names):
        _POST_OFF[i] = _offset(post_cls, name)
    _Post, _post_new, _decode_py = post_cls, object.__new__, decode_py


include "_decoding.pxi"


# --- keys --------------------------------------------------------------------

cdef inline bytes _mono(uint64_t ts, bytes h):
    cdef bytes out = PyBytes_FromStringAndSize(NULL, 8 + PyBytes_GET_SIZE(h))
    cdef unsigned char* q = <unsigned char*>PyBytes_AS_STRING(out)
    cdef int i
    for i in range(8):
        q[i] = (ts >> (8 * (7 - i))) & 0xFF
    memcpy(q + 8, PyBytes_AS_STRING(h), PyBytes_GET_SIZE(h))
    return out


def mono(timestamp, bytes post_hash):
    """Compiled :func:`cablestore.keyspace.keys.mono`."""
    return _mono(<uint64_t>timestamp, post_hash)


cdef bytes _cat(bytes a, bytes b, bytes c=None, bytes d=None, bytes e=None):
    """``a + b + c + d + e`` in one allocation (None parts are skipped)."""
    cdef Py_ssize_t la = PyBytes_GET_SIZE(a), lb = PyBytes_GET_SIZE(b)
    cdef Py_ssize_t lc = 0 if c is None else PyBytes_GET_SIZE(c)
    cdef Py_ssize_t ld = 0 if d is None else PyBytes_GET_SIZE(d)
    cdef Py_ssize_t le = 0 if e is None else PyBytes_GET_SIZE(e)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, la + lb + lc + ld + le)
    cdef char* q = PyBytes_AS_STRING(out)
    memcpy(q, PyBytes_AS_STRING(a), la)
    q += la
    memcpy(q, PyBytes_AS_STRING(b), lb)
    q += lb
    if lc:
        memcpy(q, PyBytes_AS_STRING(c), lc)
        q += lc
    if ld:
        memcpy(q, PyBytes_AS_STRING(d), ld)
        q += ld
    if le:
        memcpy(q, PyBytes_AS_STRING(e), le)
    return out


# --- Indexed -------------------------------------------------------------------

cdef object _Indexed = None
cdef Py_ssize_t _IDX_OFF[5]
cdef object _canonical = None
cdef Py_ssize_t _P_KEY, _P_LINKS, _P_TYPE, _P_TS, _P_CHANNEL, _P_INFO, _P_TOPIC


def bind_records(indexed_cls, canonical_channel):
    """Bind ``Indexed`` and ``canonical_channel`` (called by :mod:`cablestore.keyspace.records`)."""
    global _Indexed, _canonical, _P_KEY, _P_LINKS, _P_TYPE, _P_TS, _P_CHANNEL, _P_INFO, _P_TOPIC
    names = tuple(indexed_cls.__dataclass_fields__)
    if names != ("hash", "post", "mono", "channel", "tombstones"):
        raise TypeError("Indexed has changed: update cablestore/_speedups.pyx")
    for i, name in enumerate(names):
        _IDX_OFF[i] = _offset(indexed_cls, name)
    _Indexed, _canonical = indexed_cls, canonical_channel


cdef inline object _get(object obj, Py_ssize_t offset):
    cdef PyObject* v = (<PyObject**>((<char*><PyObject*>obj) + offset))[0]
    if v == NULL:
        raise AttributeError("slot not set")
    return <object>v


def new_indexed(bytes h, post, tombstones):
    """Compiled twin of ``Indexed.of(buf, post, h, tombstones)`` (post and hash known)."""
    cdef object t = post.post_type
    cdef int pt = t
    channel = _canonical(post.channel) if (pt == TEXT or pt == TOPIC or pt == JOIN or pt == LEAVE) else None
    ip = _post_new(_Indexed)
    _set(ip, _IDX_OFF[0], h)
    _set(ip, _IDX_OFF[1], post)
    _set(ip, _IDX_OFF[2], _mono(<uint64_t>post.timestamp, h))
    _set(ip, _IDX_OFF[3], channel)
    _set(ip, _IDX_OFF[4], tombstones if type(tombstones) is tuple else tuple(tombstones))
    return ip


# --- view entries ------------------------------------------------------------

cdef object _entries_py = None
cdef object _groups_py = None
cdef object _escape = None
cdef tuple _VIEWS = ()
cdef object _V_STATE = None, _V_USER = None, _V_CHANNEL = None, _V_LINKS = None
cdef bytes _EMPTY = b""
# The key prefixes, bound from the view modules (which take them from
# cablestore.keyspace.keys): never spelled here.
cdef bytes _K_CHAT = None, _K_STATE = None, _K_AUTHOR = None, _K_USER = None, _K_CHANNEL = None, _K_HEADS = None
cdef bytes _K_REV = None
# Sub-keys, from the views that own them (views.SUBKEYS): the state's member and topic rows, the user view's
# post rows and latest-hash group, the linker rows, the channel's member and topic groups.
cdef bytes _S_MEMBER = None, _S_TOPIC = None, _S_USER_POSTS = None, _S_USER_HASH = None, _S_LINKER = None
cdef bytes _G_MEMBER = None, _G_TOPIC = None
cdef tuple _TYPE_BYTE = tuple(bytes([i]) for i in range(256))


def bind_views(entries_py, groups_py, escape, chat, state, author, user, channel, links, subkeys):
    """Bind the pure ``views.entries``/``views.groups``, ``escape`` and the view modules whose entries and groups this computes.

    Their key prefixes are read from the modules (``PREFIX``, ``links.HEADS``, ``links.BULK_PREFIX``), their
    sub-keys from ``subkeys`` (``views.SUBKEYS``).
    """
    global _entries_py, _groups_py, _escape, _V_STATE, _V_USER, _V_CHANNEL, _V_LINKS
    global _K_CHAT, _K_STATE, _K_AUTHOR, _K_USER, _K_CHANNEL, _K_HEADS, _K_REV
    global _S_MEMBER, _S_TOPIC, _S_USER_POSTS, _S_USER_HASH, _S_LINKER, _G_MEMBER, _G_TOPIC
    _S_MEMBER, _S_TOPIC, _S_USER_POSTS = subkeys["state_member"], subkeys["state_topic"], subkeys["user_posts"]
    _S_USER_HASH, _S_LINKER = subkeys["user_latest_hash"], subkeys["linker"]
    _G_MEMBER, _G_TOPIC = subkeys["channel_member"], subkeys["channel_topic"]
    _entries_py, _groups_py, _escape = entries_py, groups_py, escape
    _V_STATE, _V_USER, _V_CHANNEL, _V_LINKS = state, user, channel, links
    _K_CHAT, _K_STATE, _K_AUTHOR, _K_USER, _K_CHANNEL, _K_HEADS = chat.PREFIX, state.PREFIX, author.PREFIX, user.PREFIX, channel.PREFIX, links.HEADS
    _K_REV = links.BULK_PREFIX


def bound_prefixes():
    """The key prefixes this extension was bound to, by name (``tests/test_speedups.py`` compares them with the keyspace's)."""
    return {"chat": _K_CHAT, "state": _K_STATE, "author": _K_AUTHOR, "user": _K_USER, "channel": _K_CHANNEL, "heads": _K_HEADS, "reverse": _K_REV}


def bound_subkeys():
    """The sub-keys this extension was bound to, by ``views.SUBKEYS``'s names."""
    return {"state_member": _S_MEMBER, "state_topic": _S_TOPIC, "user_posts": _S_USER_POSTS, "user_latest_hash": _S_USER_HASH,
            "linker": _S_LINKER, "channel_member": _G_MEMBER, "channel_topic": _G_TOPIC}


def entries(ip):
    """Compiled ``views.entries``: every per-post entry of a post of types 0, 2-5 (others: the pure views)."""
    post = _get(ip, _IDX_OFF[1])
    cdef int t = post.post_type
    if t > LEAVE or t == DELETE:
        return _entries_py(ip)
    cdef bytes h = _get(ip, _IDX_OFF[0])
    cdef bytes m = _get(ip, _IDX_OFF[2])
    cdef bytes pk = post.public_key
    cdef bytes tb = _TYPE_BYTE[t]
    out = []
    cdef bytes esc
    if t != INFO:
        esc = _escape(_get(ip, _IDX_OFF[3]))
    if t == TEXT:  # chat
        out.append((_cat(_K_CHAT, esc, m), _EMPTY))
    elif t == JOIN or t == LEAVE:  # state
        out.append((_cat(_K_STATE, esc, _S_MEMBER, pk, m), _EMPTY))
    elif t == TOPIC:
        out.append((_cat(_K_STATE, esc, _S_TOPIC, m), _EMPTY))
    if t == INFO:
        out.append((_cat(_K_AUTHOR, pk, tb, m), _EMPTY))  # author
        out.append((_cat(_K_USER, pk, _S_USER_POSTS, m), _EMPTY))  # user
    else:  # author: a channel post's row names its channel (the channel view has no per-post entry)
        out.append((_cat(_K_AUTHOR, pk, tb, esc, m), _EMPTY))
    links = post.links
    cdef Py_ssize_t nl = len(links)
    if nl == 1:  # links
        out.append((_cat(_K_REV, links[0], _S_LINKER, h), _EMPTY))
    elif nl > 1:
        for target in dict.fromkeys(links):
            out.append((_cat(_K_REV, target, _S_LINKER, h), _EMPTY))
    return out


def groups(ip):
    """Compiled ``views.groups``: ``(view, group)`` pairs of a post of types 0, 2-5 (others: the pure views)."""
    post = _get(ip, _IDX_OFF[1])
    cdef int t = post.post_type
    if t > LEAVE or t == DELETE:
        return _groups_py(ip)
    cdef bytes h = _get(ip, _IDX_OFF[0])
    cdef bytes pk = post.public_key
    cdef bytes esc
    out = []
    if t == INFO:
        out.append((_V_USER, pk))
        out.append((_V_USER, _S_USER_HASH + pk))
    else:
        esc = _escape(_get(ip, _IDX_OFF[3]))
        if t == JOIN or t == LEAVE:
            out.append((_V_STATE, esc + pk))
        out.append((_V_CHANNEL, _cat(_G_MEMBER, esc, pk)))
        if t == TOPIC:
            out.append((_V_CHANNEL, _G_TOPIC + esc))
        out.append((_V_LINKS, h))
    links = post.links
    if len(links) == 1:
        if links[0] != h:
            out.append((_V_LINKS, links[0]))
    elif len(links) > 1:
        for target in dict.fromkeys(links):
            if target != h:
                out.append((_V_LINKS, target))
    return out


# --- Bloom filter probes (cablestore.store.write.hashfilter) ---------------------------

cdef inline uint64_t _probe(const unsigned char* h, Py_ssize_t n, Py_ssize_t i, uint64_t mask):
    # ``int.from_bytes(h[i:i+4], "big") & mask``, a short slice included (a damaged key's hash).
    cdef uint64_t v = 0
    cdef Py_ssize_t j
    if i + 4 <= n:
        v = (<uint64_t>h[i] << 24) | (<uint64_t>h[i + 1] << 16) | (<uint64_t>h[i + 2] << 8) | h[i + 3]
    else:
        for j in range(i, n):
            v = (v << 8) | h[j]
    return v & mask


cdef inline void _check_filter(Py_ssize_t nbits_bytes, uint64_t mask) except *:
    if nbits_bytes <= 0 or (mask >> 3) >= <uint64_t>nbits_bytes:
        raise ValueError("the filter's mask reaches past its bits")


def filter_set(bytearray bits not None, uint64_t mask, bytes h not None, Py_ssize_t probes):
    """``HashFilter._set``: bit ``int.from_bytes(h[i:i+4], "big") & mask`` set for each of ``probes`` 4-byte slices."""
    _check_filter(PyByteArray_GET_SIZE(bits), mask)
    cdef const unsigned char* p = <const unsigned char*>PyBytes_AS_STRING(h)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(h)
    cdef unsigned char* b = <unsigned char*>PyByteArray_AS_STRING(bits)
    cdef uint64_t pos
    cdef Py_ssize_t i
    for i in range(0, 4 * probes, 4):
        pos = _probe(p, n, i, mask)
        b[pos >> 3] |= <unsigned char>(1 << (pos & 7))


def filter_test(bytearray bits not None, uint64_t mask, bytes h not None, Py_ssize_t probes):
    """``HashFilter.might_have``: False when one probed bit is clear."""
    _check_filter(PyByteArray_GET_SIZE(bits), mask)
    cdef const unsigned char* p = <const unsigned char*>PyBytes_AS_STRING(h)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(h)
    cdef const unsigned char* b = <const unsigned char*>PyByteArray_AS_STRING(bits)
    cdef uint64_t pos
    cdef Py_ssize_t i
    for i in range(0, 4 * probes, 4):
        pos = _probe(p, n, i, mask)
        if not b[pos >> 3] & (1 << (pos & 7)):
            return False
    return True


include "_sums.pxi"


include "_bulk.pxi"
