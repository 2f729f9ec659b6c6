/* Copy bytes with non-temporal (streaming) stores: the destination's cache lines are written straight to memory,
 * not first read into the cache (read for ownership) and later evicted.  x86-64 only (SSE2, part of the
 * architecture); elsewhere memcpy.  And a stager: pieces of one copy taken in order by the caller and by threads of
 * a pool of this library's own, each piece's OpenCL user event completed as soon as it is copied (below).
 *
 * A plain C library (no Python API), loaded by hpu.core.streaming through ctypes, which releases the GIL around
 * each call. */
#define _GNU_SOURCE /* pthread_setname_np */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>

int hpu_streams(void) /* whether hpu_stream_copy streams (1) or is memcpy (0) */
{
    return 1;
}

void hpu_stream_copy(void *dst, const void *src, size_t n)
{
    char *d = (char *)dst;
    const char *s = (const char *)src;
    size_t head = (size_t)(-(uintptr_t)d & 63); /* streaming stores of whole, aligned cache lines */
    if (head > n)
        head = n;
    memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    for (; n >= 256; n -= 256, d += 256, s += 256) { /* four cache lines: all loads before the stores */
        __m128i r[16];
        for (int i = 0; i < 16; i++)
            r[i] = _mm_loadu_si128((const __m128i *)(s + 16 * i));
        for (int i = 0; i < 16; i++)
            _mm_stream_si128((__m128i *)(d + 16 * i), r[i]);
    }
    memcpy(d, s, n);
    _mm_sfence(); /* the streamed lines are visible before the caller reports the copy done */
}
#else
int hpu_streams(void)
{
    return 0;
}

void hpu_stream_copy(void *dst, const void *src, size_t n)
{
    memcpy(dst, src, n);
}
#endif

/* -- The stager ---------------------------------------------------------------------------------------------------
 *
 * Python's threads pass the global interpreter lock from one to the next: each staging task of a pool of Python
 * threads must hold it to start, to take a piece and to complete the piece's event, and the tasks then start one
 * after another, a thread's wake-up apart.  Here a job's pieces are taken, copied and their events completed by
 * threads that never hold it: hpu_stage_start wakes up to `helpers` threads of the pool at once and returns;
 * hpu_stage_finish copies pieces on the caller until none is left, then waits until every helper that joined has
 * ended.  Each piece is taken once (an atomic counter), so the pieces start in order; or, with a job's `slice`, each
 * slice of each piece, so that all threads copy one piece after another and the pieces also end about in order, the
 * copy up of each following right behind its staging (with a piece a thread, the threads' pieces end at about one time
 * and their copies up queue behind each other).  A piece's event is set by the thread that copies its last byte,
 * or, where the events are made after the copies began (hpu_stage_events), by whichever of the two comes second.
 *
 * A job lives from hpu_stage_start to the return of hpu_stage_finish; its memory (the job, its arrays, the bytes
 * copied) belongs to the caller, who must call hpu_stage_finish exactly once.  After a fork the child's pool is
 * empty (its threads are the parent's; the pool's lock is held across the fork, so that the child's is free); a job
 * started before the fork is not the child's to finish. */

typedef int32_t (*hpu_set_status)(void *event, int32_t status); /* clSetUserEventStatus */

struct hpu_stage_job {
    const int64_t *spans;  /* piece k: spans[3k + 2] bytes copied from address spans[3k] to address spans[3k + 1] */
    void *const *events;   /* per piece, an OpenCL user event set CL_COMPLETE (0) once copied; NULL: none, or given
                            * later by hpu_stage_events */
    hpu_set_status set_status;
    double *times;         /* per piece: start and end (CLOCK_MONOTONIC seconds), and the thread (0: the caller) that
                            * ended it */
    int64_t pieces;
    int64_t stream_from;   /* copies of at least this many bytes by streaming stores, others by memcpy */
    int32_t helpers;       /* pool threads wanted */
    int32_t most;          /* the most threads the pool may hold for it (it makes no more than the largest asked) */
    int64_t slice;         /* > 0: each piece copied in slices of this many bytes (the last shorter), each slice by
                            * whichever thread takes it, so that the threads copy a piece together and the pieces
                            * end one after another, about in order; <= 0: each piece by one thread (one slice) */
    int64_t *first;        /* pieces + 1 entries, the caller's memory: the stager's own (a piece's first slice, the
                            * slices in all last) */
    int64_t *state;        /* 2 * pieces entries, the caller's memory: the stager's own (a piece's slices left to
                            * copy, and whether it is copied (1) and its event given (2)) */
    /* the stager's own */
    int64_t next;          /* the next piece or slice to take (atomic) */
    int32_t status;        /* the first non-zero status of set_status, else 0 */
    int32_t joined, left;  /* helpers that joined it, that ended */
    struct hpu_stage_job *queued; /* the next job of the pool's queue */
};

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_work = PTHREAD_COND_INITIALIZER, pool_done = PTHREAD_COND_INITIALIZER;
static struct hpu_stage_job *pool_queue; /* jobs that want more helpers, in start order */
static int32_t pool_threads, pool_idle;
static int pool_atfork;

static double monotonic(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void set_event(struct hpu_stage_job *job, int64_t k)
{
    const int32_t st = job->set_status(job->events[k], 0);
    if (st != 0) {
        int32_t zero = 0;
        __atomic_compare_exchange_n(&job->status, &zero, st, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    }
}

static void copied(struct hpu_stage_job *job, int64_t k, double t1, int32_t who) /* piece k's last byte is copied */
{
    if (job->times) {
        job->times[3 * k + 1] = t1;
        job->times[3 * k + 2] = who;
    }
    /* The event is set by whichever comes second: this thread, or hpu_stage_events giving it.  Acquire and release:
     * the events' array is read only once given, and every slice's streamed stores (each copy ends with a fence)
     * are visible before the event says the piece is in. */
    if (__atomic_fetch_or(&job->state[2 * k + 1], 1, __ATOMIC_ACQ_REL) & 2)
        set_event(job, k);
}

static void copy(const struct hpu_stage_job *job, void *dst, const void *src, size_t n)
{
    if (job->stream_from >= 0 && n >= (size_t)job->stream_from)
        hpu_stream_copy(dst, src, n);
    else
        memcpy(dst, src, n);
}

static void run_pieces(struct hpu_stage_job *job, int32_t who)
{
    int64_t k = 0; /* the piece of the last slice taken: slices are taken in order, so it only grows */
    for (;;) {
        const int64_t u = __atomic_fetch_add(&job->next, 1, __ATOMIC_RELAXED);
        if (u >= job->first[job->pieces])
            return;
        while (job->first[k + 1] <= u)
            k++;
        const int64_t s = u - job->first[k], n = job->spans[3 * k + 2]; /* s > 0 only with slices */
        const int64_t off = s * job->slice;
        const int64_t len = job->slice > 0 && n - off > job->slice ? job->slice : n - off;
        const double t0 = monotonic();
        if (s == 0 && job->times)
            job->times[3 * k] = t0;
        copy(job, (char *)(intptr_t)job->spans[3 * k + 1] + off, (const char *)(intptr_t)job->spans[3 * k] + off,
             (size_t)len);
        if (__atomic_sub_fetch(&job->state[2 * k], 1, __ATOMIC_ACQ_REL) == 0)
            copied(job, k, monotonic(), who);
    }
}

static void unqueue(struct hpu_stage_job *job) /* pool_lock held */
{
    for (struct hpu_stage_job **p = &pool_queue; *p; p = &(*p)->queued)
        if (*p == job) {
            *p = job->queued;
            return;
        }
}

static void *pool_main(void *arg)
{
    const int32_t who = (int32_t)(intptr_t)arg;
    pthread_mutex_lock(&pool_lock);
    for (;;) {
        while (!pool_queue) {
            pool_idle++;
            pthread_cond_wait(&pool_work, &pool_lock);
            pool_idle--;
        }
        struct hpu_stage_job *job = pool_queue;
        if (++job->joined >= job->helpers)
            unqueue(job);
        pthread_mutex_unlock(&pool_lock);
        run_pieces(job, who);
        pthread_mutex_lock(&pool_lock);
        job->left++;
        pthread_cond_broadcast(&pool_done);
    }
    return NULL;
}

static void before_fork(void)
{
    pthread_mutex_lock(&pool_lock);
}

static void after_fork_in_parent(void)
{
    pthread_mutex_unlock(&pool_lock);
}

static void after_fork_in_child(void)
{
    pthread_mutex_init(&pool_lock, NULL);
    pthread_cond_init(&pool_work, NULL);
    pthread_cond_init(&pool_done, NULL);
    pool_queue = NULL;
    pool_threads = pool_idle = 0;
}

/* Start the job: queue it for job->helpers pool threads (made as needed, at most job->most and 256 in all) and wake
 * them; helpers busy with other jobs join it when free, if it still wants them.  With job->events NULL (and a
 * set_status), the events are given later by hpu_stage_events.
 * Returns 0, or the error of pthread_create when not one helper could be made (then no helper will join: the
 * caller's hpu_stage_finish copies every piece). */
int hpu_stage_start(struct hpu_stage_job *job)
{
    int err = 0;
    job->next = 0;
    job->status = job->joined = job->left = 0;
    job->queued = NULL;
    job->first[0] = 0;
    for (int64_t k = 0; k < job->pieces; k++) { /* an empty piece is one empty slice: it too is ended, its event set */
        const int64_t n = job->spans[3 * k + 2];
        const int64_t slices = job->slice > 0 && n > 0 ? n / job->slice + (n % job->slice != 0) : 1;
        job->first[k + 1] = job->first[k] + slices;
        job->state[2 * k] = slices;
        job->state[2 * k + 1] = job->events && job->set_status ? 2 : 0;
    }
    if (job->helpers <= 0)
        return 0;
    pthread_mutex_lock(&pool_lock);
    if (!pool_atfork)
        pool_atfork = pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child) == 0;
    struct hpu_stage_job **tail = &pool_queue;
    while (*tail)
        tail = &(*tail)->queued;
    *tail = job;
    int32_t wanted = 0; /* helpers wanted by every queued job: threads beyond the idle ones are made */
    for (struct hpu_stage_job *j = pool_queue; j; j = j->queued)
        wanted += j->helpers - j->joined;
    const int32_t most = job->most < 256 ? job->most : 256;
    for (int32_t spare = pool_idle; spare < wanted && pool_threads < most; spare++) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        err = pthread_create(&t, &attr, pool_main, (void *)(intptr_t)(pool_threads + 1));
        pthread_attr_destroy(&attr);
        if (err)
            break;
#if defined(__GLIBC__)
        char name[16];
        snprintf(name, sizeof name, "hpu-stage_%d", (int)pool_threads);
        pthread_setname_np(t, name);
#endif
        pool_threads++;
    }
    for (int32_t i = 0; i < job->helpers; i++) /* the idle threads it wants, woken at once (new ones look first) */
        pthread_cond_signal(&pool_work);
    pthread_mutex_unlock(&pool_lock);
    return err && pool_threads == 0 ? err : 0;
}

/* Give the job the events of its pieces (once, and only if hpu_stage_start had none; with a set_status): each piece
 * already copied has its event set now, each other piece as soon as it is copied.  Returns the job's status so far.
 * */
int32_t hpu_stage_events(struct hpu_stage_job *job, void *const *events)
{
    if (!events || !job->set_status)
        return 0;
    __atomic_store_n(&job->events, events, __ATOMIC_RELEASE);
    for (int64_t k = 0; k < job->pieces; k++)
        if (__atomic_fetch_or(&job->state[2 * k + 1], 2, __ATOMIC_ACQ_REL) & 1)
            set_event(job, k);
    return __atomic_load_n(&job->status, __ATOMIC_RELAXED);
}

/* Copy pieces on the caller until none is left, take the job off the queue (helpers not yet joined never will)
 * and wait until every helper that joined has ended.  Returns the job's status: the first non-zero value
 * set_status returned (every piece was still copied and every other event set), else 0. */
int32_t hpu_stage_finish(struct hpu_stage_job *job)
{
    run_pieces(job, 0);
    pthread_mutex_lock(&pool_lock);
    unqueue(job);
    while (job->left < job->joined)
        pthread_cond_wait(&pool_done, &pool_lock);
    pthread_mutex_unlock(&pool_lock);
    return job->status;
}
