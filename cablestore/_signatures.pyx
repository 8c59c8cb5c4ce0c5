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

A :class:`Verifier` runs plain C threads (pthreads) that never take the
GIL (a Python thread that finished its share of a batch would wait up to
the interpreter's 5 ms switch interval while the indexing thread runs
Python) and start no interpreter.  They take batches from a queue and
share each batch's work through an atomic cursor: each claims the next few
posts, checks them and publishes each verdict with a release store.  The
thread consuming the verdicts in order helps when it gets ahead of the
workers (it claims posts too), and otherwise waits only for posts already
claimed, so no core idles while posts are left.  A batch's memory (and the
``bytes`` it points into) lives until the last thread inside it has left:
a worker enters a batch only under the queue's lock, and a batch leaves
the queue, then waits for its ``inside`` count to reach zero, before it is
freed.

A Cable post is ``public_key (32) | signature (64) | body``; the signed
message is the body, so ``signature | body`` is exactly the "signed message"
``crypto_sign_open`` takes.  The pure-Python twin is
``cablestore.wire.crypto.verify_post``; ``tests/test_speedups.py`` checks
that both give the same verdict on good, forged, short and odd posts.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport uintptr_t
from libc.stdlib cimport free, malloc, realloc

ctypedef int (*sign_open_t)(unsigned char* m, unsigned long long* mlen, const unsigned char* sm,
                            unsigned long long smlen, const unsigned char* pk) nogil

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_t:
        pass
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef struct pthread_cond_t:
        pass
    int pthread_create(pthread_t* thread, void* attr, void* (*start)(void*) noexcept nogil, void* arg)
    int pthread_join(pthread_t thread, void** retval)
    int pthread_mutex_init(pthread_mutex_t* m, void* attr)
    int pthread_mutex_destroy(pthread_mutex_t* m)
    int pthread_mutex_lock(pthread_mutex_t* m)
    int pthread_mutex_unlock(pthread_mutex_t* m)
    int pthread_cond_init(pthread_cond_t* c, void* attr)
    int pthread_cond_destroy(pthread_cond_t* c)
    int pthread_cond_wait(pthread_cond_t* c, pthread_mutex_t* m)
    int pthread_cond_broadcast(pthread_cond_t* c)

cdef extern from *:
    """
    #include <sched.h>
    static inline Py_ssize_t cs_claim(Py_ssize_t* cursor, Py_ssize_t step) { return __atomic_fetch_add(cursor, step, __ATOMIC_RELAXED); }
    static inline Py_ssize_t cs_load(Py_ssize_t* v) { return __atomic_load_n(v, __ATOMIC_ACQUIRE); }
    static inline void cs_add(Py_ssize_t* v, Py_ssize_t d) { __atomic_fetch_add(v, d, __ATOMIC_ACQ_REL); }
    static inline void cs_publish(unsigned char* slot, unsigned char v) { __atomic_store_n(slot, v, __ATOMIC_RELEASE); }
    static inline unsigned char cs_read(const unsigned char* slot) { return __atomic_load_n(slot, __ATOMIC_ACQUIRE); }
    static inline void cs_pause(void) { sched_yield(); }
    """
    Py_ssize_t cs_claim(Py_ssize_t* cursor, Py_ssize_t step) nogil
    Py_ssize_t cs_load(Py_ssize_t* v) nogil
    void cs_add(Py_ssize_t* v, Py_ssize_t d) nogil
    void cs_publish(unsigned char* slot, unsigned char v) nogil
    unsigned char cs_read(const unsigned char* slot) nogil
    void cs_pause() nogil

DEF PUBLIC_KEY = 32
DEF HEADER = 96
DEF STEP = 8  # posts claimed at a time: ~0.3 ms of work, so a waiting consumer waits little
DEF VALID = 1
DEF INVALID = 2  # 0: not checked yet
DEF NO_MEMORY = 3  # a worker had no memory to check it: the consumer checks it itself
DEF MAX_THREADS = 256


cdef struct Job:
    const unsigned char** data
    Py_ssize_t* sizes
    unsigned char* verdicts
    Py_ssize_t n
    Py_ssize_t longest
    Py_ssize_t cursor  # the next unclaimed post (atomic)
    Py_ssize_t inside  # worker threads inside this job (atomic; entered under the queue's lock)
    sign_open_t sign_open
    Job* next  # the queue


cdef struct Queue:
    pthread_mutex_t lock
    pthread_cond_t wake
    Job* head
    Job* tail
    int stop
    int threads
    pthread_t ids[MAX_THREADS]


cdef int _claim_and_check(Job* job, unsigned char** scratch, Py_ssize_t* room) noexcept nogil:
    """Check the next STEP unclaimed posts of ``job``; 0 when none was left (or no memory)."""
    cdef Py_ssize_t start = cs_claim(&job.cursor, STEP), i, size
    cdef unsigned long long mlen
    cdef unsigned char* grown
    if start >= job.n:
        return 0
    if room[0] < job.longest + 1:  # crypto_sign_open writes the message out here
        grown = <unsigned char*>realloc(scratch[0], job.longest + 1)
        if grown == NULL:
            for i in range(start, min(start + STEP, job.n)):
                cs_publish(&job.verdicts[i], NO_MEMORY)  # the consumer checks these itself (see valid)
            return 0
        scratch[0], room[0] = grown, job.longest + 1
    for i in range(start, min(start + STEP, job.n)):
        size = job.sizes[i]
        if size >= HEADER and job.sign_open(scratch[0], &mlen, job.data[i] + PUBLIC_KEY, size - PUBLIC_KEY, job.data[i]) == 0:
            cs_publish(&job.verdicts[i], VALID)
        else:
            cs_publish(&job.verdicts[i], INVALID)
    return 1


cdef void* _worker(void* arg) noexcept nogil:
    cdef Queue* q = <Queue*>arg
    cdef Job* job
    cdef unsigned char* scratch = NULL
    cdef Py_ssize_t room = 0
    while True:
        pthread_mutex_lock(&q.lock)
        while q.head == NULL and not q.stop:
            pthread_cond_wait(&q.wake, &q.lock)
        if q.stop:
            pthread_mutex_unlock(&q.lock)
            break
        job = q.head
        cs_add(&job.inside, 1)
        pthread_mutex_unlock(&q.lock)
        while _claim_and_check(job, &scratch, &room):
            pass
        pthread_mutex_lock(&q.lock)
        if q.head == job:  # every post claimed: the next job
            q.head = job.next
            if q.head == NULL:
                q.tail = NULL
        cs_add(&job.inside, -1)
        pthread_mutex_unlock(&q.lock)
    free(scratch)
    return NULL


cdef class Verifier:
    """``workers`` C threads checking the :class:`Batch` es submitted to them, until :meth:`shutdown`."""

    cdef Queue* q
    cdef readonly int workers
    cdef uintptr_t sign_open

    def __cinit__(self, int workers, uintptr_t sign_open):
        cdef int i
        if not 1 <= workers <= MAX_THREADS:
            raise ValueError(f"1 to {MAX_THREADS} workers, not {workers}")
        self.q = <Queue*>malloc(sizeof(Queue))
        if self.q == NULL:
            raise MemoryError()
        self.q.head = self.q.tail = NULL
        self.q.stop = 0
        self.q.threads = 0
        pthread_mutex_init(&self.q.lock, NULL)
        pthread_cond_init(&self.q.wake, NULL)
        self.workers, self.sign_open = workers, sign_open
        for i in range(workers):
            if pthread_create(&self.q.ids[i], NULL, _worker, self.q) != 0:
                self.shutdown()
                raise OSError("cannot start a signature-checking thread")
            self.q.threads += 1

    @property
    def running(self):
        """How many of its threads are running (0 after :meth:`shutdown`)."""
        return self.q.threads

    def batch(self, bufs):
        """A :class:`Batch` of ``bufs`` that the threads start on now."""
        cdef Batch b = Batch(bufs, self.sign_open)
        if self.q.stop:
            raise RuntimeError("the verifier is shut down")
        b.queue, b.owner = self.q, self
        with nogil:
            pthread_mutex_lock(&self.q.lock)
            if self.q.tail == NULL:
                self.q.head = &b.job
            else:
                self.q.tail.next = &b.job
            self.q.tail = &b.job
            pthread_cond_broadcast(&self.q.wake)
            pthread_mutex_unlock(&self.q.lock)
        return b

    def shutdown(self, wait=True, cancel_futures=True):
        """Stop the threads (they finish the posts they claimed) and wait for them."""
        cdef int i, n = self.q.threads
        with nogil:
            pthread_mutex_lock(&self.q.lock)
            self.q.stop = 1
            pthread_cond_broadcast(&self.q.wake)
            pthread_mutex_unlock(&self.q.lock)
            for i in range(n):
                pthread_join(self.q.ids[i], NULL)
        self.q.threads = 0

    def __dealloc__(self):
        if self.q != NULL:
            if self.q.threads:
                self.shutdown()
            pthread_cond_destroy(&self.q.wake)
            pthread_mutex_destroy(&self.q.lock)
            free(self.q)


cdef class Batch:
    """The signature checks of one batch of posts (a sequence of ``bytes``).

    ``sign_open``: the address of libsodium's ``crypto_sign_open``.  Made
    directly, its posts are checked by the thread reading the verdicts;
    made by :meth:`Verifier.batch`, by the verifier's threads too.  One
    thread reads the verdicts, in any order, with :meth:`valid`.
    """

    cdef tuple held  # the posts: their bytes stay alive while threads read them without the GIL
    cdef Job job
    cdef Queue* queue
    cdef object owner  # the Verifier, kept alive while this batch may be in its queue

    def __cinit__(self, bufs, uintptr_t sign_open):
        cdef Py_ssize_t i, n
        self.held = tuple(bufs)
        n = len(self.held)
        for i in range(n):
            if type(self.held[i]) is not bytes:
                raise TypeError(f"a post is bytes, not {type(self.held[i]).__name__}")
        self.job.data = <const unsigned char**>malloc((n + 1) * sizeof(unsigned char*))
        self.job.sizes = <Py_ssize_t*>malloc((n + 1) * sizeof(Py_ssize_t))
        self.job.verdicts = <unsigned char*>malloc(n + 1)
        if self.job.data == NULL or self.job.sizes == NULL or self.job.verdicts == NULL:
            raise MemoryError()
        self.job.n, self.job.longest, self.job.cursor, self.job.inside, self.job.next = n, 0, 0, 0, NULL
        for i in range(n):
            self.job.data[i] = <const unsigned char*>PyBytes_AS_STRING(self.held[i])
            self.job.sizes[i] = PyBytes_GET_SIZE(self.held[i])
            self.job.verdicts[i] = 0
            if self.job.sizes[i] > self.job.longest:
                self.job.longest = self.job.sizes[i]
        self.job.sign_open = <sign_open_t>sign_open

    def __dealloc__(self):
        cdef Job* prev
        cdef Job* cur
        if self.queue != NULL:
            with nogil:
                pthread_mutex_lock(&self.queue.lock)  # out of the queue: no thread enters it again
                prev, cur = NULL, self.queue.head
                while cur != NULL and cur != &self.job:
                    prev, cur = cur, cur.next
                if cur != NULL:
                    if prev == NULL:
                        self.queue.head = cur.next
                    else:
                        prev.next = cur.next
                    if self.queue.tail == cur:
                        self.queue.tail = prev
                pthread_mutex_unlock(&self.queue.lock)
                while cs_load(&self.job.inside) > 0:  # a thread still checking its last claimed posts
                    cs_pause()
        free(self.job.data)
        free(self.job.sizes)
        free(self.job.verdicts)

    def __len__(self):
        return self.job.n

    def valid(self, Py_ssize_t i):
        """Post ``i``'s verdict, checking posts itself while it is not ready and some are unclaimed."""
        cdef unsigned char* scratch = NULL
        cdef Py_ssize_t room = 0
        cdef unsigned char v
        cdef unsigned long long mlen
        if not 0 <= i < self.job.n:
            raise IndexError(i)
        v = cs_read(&self.job.verdicts[i])
        if v == 0:
            with nogil:
                while True:
                    v = cs_read(&self.job.verdicts[i])
                    if v != 0:
                        break
                    if not _claim_and_check(&self.job, &scratch, &room):
                        cs_pause()  # claimed by a worker, at most STEP posts from done
            free(scratch)
        if v == NO_MEMORY:
            scratch = <unsigned char*>malloc(self.job.sizes[i])
            if scratch == NULL:
                raise MemoryError()
            with nogil:
                v = VALID if self.job.sign_open(scratch, &mlen, self.job.data[i] + PUBLIC_KEY, self.job.sizes[i] - PUBLIC_KEY, self.job.data[i]) == 0 else INVALID
            free(scratch)
        return v == VALID

    def verdicts_list(self):
        """Every verdict, in order, as booleans (checking in this thread what no worker has)."""
        return [self.valid(i) for i in range(self.job.n)]
