/*
 * hash-pool.h -- a small pthread pool that runs a job over numbered chunks.
 *
 * libdirtytrack hashes VRAM pages in parallel: the page range is cut into
 * chunks (one bitmap word, 64 pages, each) and the pool's threads take
 * chunks from a shared counter until none are left, so a sparse write-set
 * still spreads evenly.  The calling thread works too: a pool of N threads
 * starts N - 1 pthreads, and a pool of 1 runs every job inline.
 */
#ifndef DT_HASH_POOL_H
#define DT_HASH_POOL_H

#include <stdint.h>

#include "common/error.h"

#define DT_POOL_MAX_THREADS 64

struct dt_pool;

/* Called once for every chunk in [0, nchunks), from any pool thread. */
typedef void dt_pool_fn(void *arg, uint64_t chunk);

/*
 * Start a pool of @threads threads (1 to DT_POOL_MAX_THREADS, the caller
 * included).  -EINVAL for a bad count, -ENOMEM, or pthread_create's error.
 */
int dt_pool_new(unsigned threads, struct dt_pool **out, struct vg_error *err);
/* Stop and join the threads; NULL is ignored.  No job may be running. */
void dt_pool_free(struct dt_pool *pool);
/*
 * Run @fn(@arg, c) for every c in [0, @nchunks), each exactly once, and
 * return when all calls have returned (not waiting for threads that had
 * no chunk).  One job at a time per pool; @nchunks < 2^32.
 */
void dt_pool_run(struct dt_pool *pool, uint64_t nchunks, dt_pool_fn *fn,
                 void *arg);
/*
 * The same without waiting: the pool's pthreads run the job while the
 * caller goes on (a pool of 1 thread runs it here, before returning).
 * dt_pool_wait() returns when every call has returned; it must be called
 * before the next job.
 */
void dt_pool_start(struct dt_pool *pool, uint64_t nchunks, dt_pool_fn *fn,
                   void *arg);
void dt_pool_wait(struct dt_pool *pool);
unsigned dt_pool_threads(const struct dt_pool *pool);

#endif
