/* hash-pool.c -- see hash-pool.h.
 *
 * A job's chunks are handed out by one atomic counter tagged with the
 * job's generation, (gen << 32) | next chunk, so a thread that read one
 * job and takes a chunk after the next job began gets none.  The caller
 * waits for the job's chunks to be done, not for every thread to have
 * woken: a thread that wakes late finds nothing left.
 */
#include "hash-pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Polls of the done count before the caller sleeps: about the time of
 * the last chunks that other threads are finishing. */
#define WAIT_SPINS 4096

struct dt_pool {
    unsigned threads; /* the caller included */
    unsigned started; /* pthreads running */
    pthread_t *tids;
    pthread_mutex_t mu;
    pthread_cond_t go;   /* a new job, or stop */
    pthread_cond_t done; /* the job's last chunk is done */
    uint32_t gen;        /* bumped for each job */
    bool stop;
    /* The current job. */
    dt_pool_fn *fn;
    void *arg;
    uint64_t nchunks;
    uint64_t next;     /* (gen << 32) | next chunk to take, atomically */
    uint64_t finished; /* chunks done, atomically */
};

struct job {
    uint32_t gen;
    dt_pool_fn *fn;
    void *arg;
    uint64_t nchunks;
};

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* The next chunk of @job into *@chunk; false when none is left (or the
 * pool has moved on to a newer job). */
static bool take_chunk(struct dt_pool *pool, const struct job *job,
                       uint64_t *chunk)
{
    uint64_t v = __atomic_load_n(&pool->next, __ATOMIC_ACQUIRE);

    for (;;) {
        if ((uint32_t)(v >> 32) != job->gen ||
            (v & UINT32_MAX) >= job->nchunks) {
            return false;
        }
        if (__atomic_compare_exchange_n(&pool->next, &v, v + 1, true,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            *chunk = v & UINT32_MAX;
            return true;
        }
    }
}

static void pool_work(struct dt_pool *pool, const struct job *job)
{
    uint64_t c;

    while (take_chunk(pool, job, &c)) {
        job->fn(job->arg, c);
        if (__atomic_add_fetch(&pool->finished, 1, __ATOMIC_ACQ_REL) ==
            job->nchunks) {
            pthread_mutex_lock(&pool->mu);
            pthread_cond_broadcast(&pool->done);
            pthread_mutex_unlock(&pool->mu);
        }
    }
}

/* The current job, read under pool->mu. */
static struct job current_job(const struct dt_pool *pool)
{
    return (struct job){pool->gen, pool->fn, pool->arg, pool->nchunks};
}

static void *pool_thread(void *opaque)
{
    struct dt_pool *pool = opaque;
    uint32_t seen = 0;

    pthread_mutex_lock(&pool->mu);
    for (;;) {
        struct job job;

        while (!pool->stop && pool->gen == seen) {
            pthread_cond_wait(&pool->go, &pool->mu);
        }
        if (pool->stop) {
            break;
        }
        job = current_job(pool);
        seen = job.gen;
        pthread_mutex_unlock(&pool->mu);
        pool_work(pool, &job);
        pthread_mutex_lock(&pool->mu);
    }
    pthread_mutex_unlock(&pool->mu);
    return NULL;
}

static int pool_start(struct dt_pool *pool, struct vg_error *err)
{
    int rc;

    while (pool->started < pool->threads - 1) {
        rc =
            pthread_create(&pool->tids[pool->started], NULL, pool_thread, pool);
        if (rc) {
            return vg_error_set(err, rc, "hash pool: starting thread %u: %s",
                                pool->started + 1, strerror(rc));
        }
        pthread_setname_np(pool->tids[pool->started], "vgs/hash");
        pool->started++;
    }
    return 0;
}

int dt_pool_new(unsigned threads, struct dt_pool **out, struct vg_error *err)
{
    struct dt_pool *pool;
    int rc;

    if (threads < 1 || threads > DT_POOL_MAX_THREADS) {
        return vg_error_set(err, EINVAL,
                            "hash pool: %u threads: must be 1 to %u", threads,
                            DT_POOL_MAX_THREADS);
    }
    pool = calloc(1, sizeof(*pool));
    if (!pool || !(pool->tids = calloc(threads, sizeof(pthread_t)))) {
        free(pool);
        return vg_error_set(err, ENOMEM, "hash pool: out of memory");
    }
    pool->threads = threads;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->go, NULL);
    pthread_cond_init(&pool->done, NULL);
    rc = pool_start(pool, err);
    if (rc) {
        dt_pool_free(pool);
        return rc;
    }
    *out = pool;
    return 0;
}

void dt_pool_free(struct dt_pool *pool)
{
    if (!pool) {
        return;
    }
    pthread_mutex_lock(&pool->mu);
    pool->stop = true;
    pthread_cond_broadcast(&pool->go);
    pthread_mutex_unlock(&pool->mu);
    for (unsigned i = 0; i < pool->started; i++) {
        pthread_join(pool->tids[i], NULL);
    }
    pthread_cond_destroy(&pool->done);
    pthread_cond_destroy(&pool->go);
    pthread_mutex_destroy(&pool->mu);
    free(pool->tids);
    free(pool);
}

/* Publish a job of @nchunks chunks; returns it as the threads see it. */
static struct job publish(struct dt_pool *pool, uint64_t nchunks,
                          dt_pool_fn *fn, void *arg)
{
    struct job job;

    pthread_mutex_lock(&pool->mu);
    pool->fn = fn;
    pool->arg = arg;
    pool->nchunks = nchunks;
    __atomic_store_n(&pool->finished, 0, __ATOMIC_RELAXED);
    pool->gen++;
    __atomic_store_n(&pool->next, (uint64_t)pool->gen << 32, __ATOMIC_RELEASE);
    job = current_job(pool);
    if (pool->started > 0 && nchunks > 0) {
        pthread_cond_broadcast(&pool->go);
    }
    pthread_mutex_unlock(&pool->mu);
    return job;
}

void dt_pool_start(struct dt_pool *pool, uint64_t nchunks, dt_pool_fn *fn,
                   void *arg)
{
    struct job job = publish(pool, nchunks, fn, arg);

    if (pool->started == 0) {
        pool_work(pool, &job);
    }
}

void dt_pool_wait(struct dt_pool *pool)
{
    uint64_t n = pool->nchunks; /* only the caller changes it */

    for (unsigned i = 0; i < WAIT_SPINS; i++) {
        if (__atomic_load_n(&pool->finished, __ATOMIC_ACQUIRE) >= n) {
            return;
        }
        cpu_relax();
    }
    pthread_mutex_lock(&pool->mu);
    while (__atomic_load_n(&pool->finished, __ATOMIC_ACQUIRE) < n) {
        pthread_cond_wait(&pool->done, &pool->mu);
    }
    pthread_mutex_unlock(&pool->mu);
}

void dt_pool_run(struct dt_pool *pool, uint64_t nchunks, dt_pool_fn *fn,
                 void *arg)
{
    struct job job = publish(pool, nchunks, fn, arg);

    pool_work(pool, &job); /* the caller takes chunks too */
    dt_pool_wait(pool);
}

unsigned dt_pool_threads(const struct dt_pool *pool)
{
    return pool->threads;
}
