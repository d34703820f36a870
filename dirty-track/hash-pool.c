/* hash-pool.c -- see hash-pool.h. */
#include "hash-pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct dt_pool {
    unsigned threads; /* the caller included */
    unsigned started; /* pthreads running */
    pthread_t *tids;
    pthread_mutex_t mu;
    pthread_cond_t go;   /* a new job, or stop */
    pthread_cond_t done; /* the last helper finished its part */
    uint64_t gen;        /* bumped for each job */
    unsigned busy;       /* helpers still working on the current job */
    bool stop;
    /* The current job. */
    dt_pool_fn *fn;
    void *arg;
    uint64_t nchunks;
    uint64_t next; /* next chunk to take, atomically */
};

static void pool_work(struct dt_pool *pool)
{
    uint64_t c;

    while ((c = __atomic_fetch_add(&pool->next, 1, __ATOMIC_RELAXED)) <
           pool->nchunks) {
        pool->fn(pool->arg, c);
    }
}

static void *pool_thread(void *opaque)
{
    struct dt_pool *pool = opaque;
    uint64_t seen = 0;

    pthread_mutex_lock(&pool->mu);
    for (;;) {
        while (!pool->stop && pool->gen == seen) {
            pthread_cond_wait(&pool->go, &pool->mu);
        }
        if (pool->stop) {
            break;
        }
        seen = pool->gen;
        pthread_mutex_unlock(&pool->mu);
        pool_work(pool);
        pthread_mutex_lock(&pool->mu);
        if (--pool->busy == 0) {
            pthread_cond_signal(&pool->done);
        }
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

void dt_pool_start(struct dt_pool *pool, uint64_t nchunks, dt_pool_fn *fn,
                   void *arg)
{
    pthread_mutex_lock(&pool->mu);
    pool->fn = fn;
    pool->arg = arg;
    pool->nchunks = nchunks;
    pool->next = 0;
    pool->busy = pool->started;
    pool->gen++;
    pthread_cond_broadcast(&pool->go);
    pthread_mutex_unlock(&pool->mu);
    if (pool->started == 0) {
        pool_work(pool);
    }
}

void dt_pool_wait(struct dt_pool *pool)
{
    pthread_mutex_lock(&pool->mu);
    while (pool->busy > 0) {
        pthread_cond_wait(&pool->done, &pool->mu);
    }
    pthread_mutex_unlock(&pool->mu);
}

void dt_pool_run(struct dt_pool *pool, uint64_t nchunks, dt_pool_fn *fn,
                 void *arg)
{
    dt_pool_start(pool, nchunks, fn, arg);
    if (pool->started > 0) {
        pool_work(pool); /* the caller takes chunks too */
    }
    dt_pool_wait(pool);
}

unsigned dt_pool_threads(const struct dt_pool *pool)
{
    return pool->threads;
}
