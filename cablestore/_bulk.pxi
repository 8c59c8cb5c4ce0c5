# Included by _speedups.pyx (one extension, one compilation unit): the loops of the bulk jobs.

# --- the rebuild's digest fold -------------------------------------------------

def fold_entries(dict digests, wanted, dict kept, long parts, dict views, pairs, blake, crc32):
    """Compiled loop of ``rebuild.fold.Fold.add_entries`` (same sums, same buckets)."""
    cdef bytes key, value, name, data
    cdef Py_ssize_t lk, lv, cut
    cdef int head_len
    cdef const char* kp
    cdef const void* bang
    cdef char head[24]
    cdef char* q
    for key, value in pairs:
        kp = PyBytes_AS_STRING(key)
        lk = PyBytes_GET_SIZE(key)
        bang = memchr(kp + 1, 33, lk - 1) if lk > 1 else NULL  # the view's "!...!" prefix
        cut = 0 if bang == NULL else (<const char*>bang - kp) + 1
        name = PyBytes_FromStringAndSize(kp, cut)
        b = (views.get(name, "unknown"), crc32(key) % parts)
        head_len = snprintf(head, sizeof(head), "%zd:", lk)
        lv = PyBytes_GET_SIZE(value)
        data = PyBytes_FromStringAndSize(NULL, head_len + lk + lv)
        q = PyBytes_AS_STRING(data)
        memcpy(q, head, head_len)
        memcpy(q + head_len, kp, lk)
        memcpy(q + head_len + lk, PyBytes_AS_STRING(value), lv)
        raw = blake(data).digest()
        digest = _PyLong_FromByteArray(<const unsigned char*>PyBytes_AS_STRING(raw), PyBytes_GET_SIZE(raw), 0, 0)
        d = digests.get(b)
        if d is None:
            digests[b] = [digest, 1]
        else:
            d[0] += digest
            d[1] += 1
        if wanted is not None and b in wanted:
            kept[key] = value


# --- the bulk reindex ----------------------------------------------------------

def reindex_chunk(list chunk, Py_ssize_t start, dict on_target, dict made_by, list puts, dict best, tuple grouped, dict rankers, post_hash):
    """The posts phase of ``rebuild.reindex`` for the plain posts of one chunk of ``(key, blob)``.

    A post with tombstones on it or made by it, or one the rebuild would
    call faulty (hash, decoding), is returned for the pure path; every other
    post's entries go to ``puts`` and its group
    candidates into ``best``, as the pure loop does.  Returns
    ``(slow posts, posts indexed, entries written)``.
    """
    cdef list slow = []
    cdef Py_ssize_t indexed = 0, written = 0
    cdef bytes key, h
    for key, blob in chunk:
        h = key[start:]
        if h in on_target or h in made_by:
            slow.append((key, blob))
            continue
        if post_hash(blob) != h:
            slow.append((key, blob))
            continue
        try:
            post = decode_post(blob)
        except Exception:
            slow.append((key, blob))
            continue
        ip = new_indexed(h, post, ())
        es = entries(ip)
        puts.extend(es)
        written += len(es)
        indexed += 1
        for view, g in groups(ip):
            if view not in grouped:
                continue
            ranker = rankers[view]
            rank = _get(ip, _IDX_OFF[2]) if ranker is None else ranker(g, ip)
            k = (view.NAME, g)
            held = best.get(k)
            if held is None or rank > held[0]:
                best[k] = (rank, h)
    return slow, indexed, written


def put_all(put, pairs):
    """``put(key, value)`` for every pair (a WriteBatch's loop, without the interpreter's)."""
    for key, value in pairs:
        put(key, value)


def delete_some(delete, keys, Py_ssize_t limit):
    """``delete(key)`` for the next ``limit`` keys of the iterator ``keys`` (fewer at its end); returns how many."""
    cdef Py_ssize_t n = 0
    while n < limit:
        try:
            key = next(keys)
        except StopIteration:
            break
        delete(key)
        n += 1
    return n


def write_sorted(put, delete, list keys, dict writes):
    """A transaction's writes into a WriteBatch in the order of ``keys``: ``put`` each value, ``delete`` each key whose value is None."""
    for key in keys:
        value = writes[key]
        if value is None:
            delete(key)
        else:
            put(key, value)
