# cython: language_level=3, boundscheck=False, wraparound=False
"""Ed25519 checks of whole batches of posts without the GIL (Cython).

:class:`Batch` calls libsodium's ``crypto_sign_open`` (the very
function pynacl's ``nacl.bindings.crypto_sign_open`` calls, reached through
the pointer pynacl's own cffi module gives, so there is one libsodium and
one verdict) for every post of a batch with the GIL released.  A thread
running it verifies on one core while the indexing thread runs Python on
another: no worker processes, no pickling.  pynacl's cffi calls release the
GIL too, but take it back after every post, and the hand-off slows the
indexing thread more than the parallel check gains.

Threads share a batch's work through an atomic cursor: each thread in
:meth:`Batch.work` (the GIL released for the whole call) claims the next
few posts, checks them and publishes each verdict with a release store.
The thread consuming the verdicts in order (:meth:`Batch.valid`) helps
when it gets ahead of the workers (it claims posts too), and otherwise
waits only for posts already claimed, so no core idles while posts are
left.  A thread in :meth:`Batch.work` holds a reference to the batch, so
its memory and the ``bytes`` it points into outlive every thread reading
them.  (Plain C threads with a queue of their own were tried: no faster on
two cores, and a batch's lifetime then depended on the order the collector
freed objects at exit, which hung an interpreter's shutdown.)

A Cable post is ``public_key (32) | signature (64) | body``; the signed
message is the body, so ``signature | body`` is exactly the "signed message"
``crypto_sign_open`` takes.  The pure-Python twin is
``cablestore.wire.crypto.verify_post``; ``tests/test_speedups.py`` checks
that both give the same verdict on good, forged, short and odd posts.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport uintptr_t
from libc.stdlib cimport free, malloc, realloc


include "_source_digest.pxi"

# noexcept: libsodium raises no Python exception.  Without it Cython 3 checks for one
# after every call, taking the GIL for each post, and a verify thread then waits for the
# indexing thread's GIL between posts (docs/performance.md, "fourth pass").
ctypedef int (*sign_open_t)(unsigned char* m, unsigned long long* mlen, const unsigned char* sm,
                            unsigned long long smlen, const unsigned char* pk) noexcept nogil

cdef extern from *:
    """
    #include <sched.h>
    static inline Py_ssize_t cs_claim(Py_ssize_t* cursor, Py_ssize_t step) { return __atomic_fetch_add(cursor, step, __ATOMIC_RELAXED); }
    static inline void cs_publish(unsigned char* slot, unsigned char v) { __atomic_store_n(slot, v, __ATOMIC_RELEASE); }
    static inline unsigned char cs_read(const unsigned char* slot) { return __atomic_load_n(slot, __ATOMIC_ACQUIRE); }
    static inline void cs_pause(void) { sched_yield(); }
    """
    Py_ssize_t cs_claim(Py_ssize_t* cursor, Py_ssize_t step) nogil
    void cs_publish(unsigned char* slot, unsigned char v) nogil
    unsigned char cs_read(const unsigned char* slot) nogil
    void cs_pause() nogil

DEF PUBLIC_KEY = 32
DEF HEADER = 96
DEF STEP = 8  # posts claimed at a time: ~0.3 ms of work, so a waiting consumer waits little
DEF VALID = 1
DEF INVALID = 2  # 0: not checked yet
DEF NO_MEMORY = 3  # a worker had no memory to check it: the consumer checks it itself


cdef class Batch:
    """The signature checks of one batch of posts (a sequence of ``bytes``), shared by threads.

    ``sign_open``: the address of libsodium's ``crypto_sign_open``.  Any
    number of threads may call :meth:`work`; one thread reads the verdicts
    with :meth:`valid`, checking posts itself when no worker has.
    """

    cdef tuple held  # the posts: their bytes stay alive while threads read them without the GIL
    cdef const unsigned char** data
    cdef Py_ssize_t* sizes
    cdef unsigned char* verdicts
    cdef Py_ssize_t n, longest, cursor
    cdef sign_open_t sign_open

    def __cinit__(self, bufs, uintptr_t sign_open):
        cdef Py_ssize_t i
        self.held = tuple(bufs)
        self.n = len(self.held)
        for i in range(self.n):
            if type(self.held[i]) is not bytes:
                raise TypeError(f"a post is bytes, not {type(self.held[i]).__name__}")
        self.data = <const unsigned char**>malloc((self.n + 1) * sizeof(unsigned char*))
        self.sizes = <Py_ssize_t*>malloc((self.n + 1) * sizeof(Py_ssize_t))
        self.verdicts = <unsigned char*>malloc(self.n + 1)
        if self.data == NULL or self.sizes == NULL or self.verdicts == NULL:
            raise MemoryError()
        for i in range(self.n):
            self.data[i] = <const unsigned char*>PyBytes_AS_STRING(self.held[i])
            self.sizes[i] = PyBytes_GET_SIZE(self.held[i])
            self.verdicts[i] = 0
            if self.sizes[i] > self.longest:
                self.longest = self.sizes[i]
        self.sign_open = <sign_open_t>sign_open

    def __dealloc__(self):
        free(self.data)
        free(self.sizes)
        free(self.verdicts)

    def __len__(self):
        return self.n

    cdef int _claim_and_check(self, unsigned char** scratch, Py_ssize_t* room) noexcept nogil:
        """Check the next STEP unclaimed posts; 0 when none was left (or no memory)."""
        cdef Py_ssize_t start = cs_claim(&self.cursor, STEP), i, size
        cdef unsigned long long mlen
        cdef unsigned char* grown
        if start >= self.n:
            return 0
        if room[0] < self.longest + 1:  # crypto_sign_open writes the message out here
            grown = <unsigned char*>realloc(scratch[0], self.longest + 1)
            if grown == NULL:
                for i in range(start, min(start + STEP, self.n)):
                    cs_publish(&self.verdicts[i], NO_MEMORY)  # the consumer checks these itself (see valid)
                return 0
            scratch[0], room[0] = grown, self.longest + 1
        for i in range(start, min(start + STEP, self.n)):
            size = self.sizes[i]
            if size >= HEADER and self.sign_open(scratch[0], &mlen, self.data[i] + PUBLIC_KEY, size - PUBLIC_KEY, self.data[i]) == 0:
                cs_publish(&self.verdicts[i], VALID)
            else:
                cs_publish(&self.verdicts[i], INVALID)
        return 1

    def work(self):
        """Check posts until none is left unclaimed (from any thread; the GIL is released throughout)."""
        cdef unsigned char* scratch = NULL
        cdef Py_ssize_t room = 0
        with nogil:
            while self._claim_and_check(&scratch, &room):
                pass
        free(scratch)

    def valid(self, Py_ssize_t i):
        """Post ``i``'s verdict, checking posts itself while it is not ready and some are unclaimed."""
        cdef unsigned char* scratch = NULL
        cdef Py_ssize_t room = 0
        cdef unsigned char v
        cdef unsigned long long mlen
        if not 0 <= i < self.n:
            raise IndexError(i)
        v = cs_read(&self.verdicts[i])
        if v == 0:
            with nogil:
                while True:
                    v = cs_read(&self.verdicts[i])
                    if v != 0:
                        break
                    if not self._claim_and_check(&scratch, &room):
                        cs_pause()  # claimed by a worker, at most STEP posts from done
            free(scratch)
        if v == NO_MEMORY:
            scratch = <unsigned char*>malloc(self.sizes[i])
            if scratch == NULL:
                raise MemoryError()
            with nogil:
                v = VALID if self.sign_open(scratch, &mlen, self.data[i] + PUBLIC_KEY, self.sizes[i] - PUBLIC_KEY, self.data[i]) == 0 else INVALID
            free(scratch)
        return v == VALID

    def checked(self):
        """How many posts have a verdict so far (any thread; for progress and tests)."""
        cdef Py_ssize_t i, k = 0
        for i in range(self.n):
            if cs_read(&self.verdicts[i]) != 0:
                k += 1
        return k

    def verdicts_list(self):
        """Every verdict, in order, as booleans (checking in this thread what no worker has)."""
        return [self.valid(i) for i in range(self.n)]
