/*
 * populate.c -- see populate.h.
 */
#include "populate.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "common/log.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

struct vg_populate {
    const char *what;
    uint8_t *base;
    uint64_t size;
    pthread_t thread;
    bool joined; /* the thread was joined (vg_populate_stop()) */
    atomic_bool stop;
    _Atomic uint64_t done;
    atomic_bool finished;
    atomic_int error;
    double start_ms;
    _Atomic uint64_t end_us; /* since start, once finished */
};

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Log how the thread ended. */
static void report(const struct vg_populate *p, double ms)
{
    double done = (double)atomic_load(&p->done) / (1 << 20);
    double size = (double)p->size / (1 << 20);
    int error = atomic_load(&p->error);

    if (error) {
        vg_warn("%s preallocation stopped after %.0f of %.0f MiB: %s", p->what,
                done, size, strerror(-error));
    } else if (done < size) {
        vg_info("%s preallocation stopped after %.0f of %.0f MiB (asked to)",
                p->what, done, size);
    } else {
        vg_info("%s preallocated: %.0f MiB in %.0f ms (%.0f MiB/s)", p->what,
                size, ms, ms > 0 ? size / (ms / 1e3) : 0.0);
    }
}

static void *populate_thread(void *arg)
{
    struct vg_populate *p = arg;
    uint64_t off = 0;

    while (off < p->size && !atomic_load(&p->stop)) {
        uint64_t len =
            p->size - off < VG_POPULATE_STEP ? p->size - off : VG_POPULATE_STEP;

        if (madvise(p->base + off, len, MADV_POPULATE_WRITE) < 0) {
            atomic_store(&p->error, -errno);
            break;
        }
        off += len;
        atomic_store(&p->done, off);
    }
    atomic_store(&p->end_us, (uint64_t)((now_ms() - p->start_ms) * 1e3));
    atomic_store(&p->finished, true);
    report(p, (double)atomic_load(&p->end_us) / 1e3);
    return NULL;
}

int vg_populate_start(uint8_t *base, uint64_t size, const char *what,
                      struct vg_populate **out, struct vg_error *err)
{
    struct vg_populate *p = calloc(1, sizeof(*p));
    int rc;

    if (!p) {
        return vg_error_set(err, ENOMEM, "%s preallocation: out of memory",
                            what);
    }
    p->what = what;
    p->base = base;
    p->size = size;
    p->start_ms = now_ms();
    rc = pthread_create(&p->thread, NULL, populate_thread, p);
    if (rc) {
        free(p);
        return vg_error_set(err, rc, "%s preallocation thread: %s", what,
                            strerror(rc));
    }
    pthread_setname_np(p->thread, "vgs/populate");
    *out = p;
    return 0;
}

void vg_populate_hint(uint8_t *base, uint64_t size, const char *what,
                      struct vg_populate **out)
{
    struct vg_error err = {0};

    if (vg_populate_start(base, size, what, out, &err) < 0) {
        vg_warn("%s (its pages come at first touch)", err.msg);
    }
}

void vg_populate_stop(struct vg_populate *p)
{
    atomic_store(&p->stop, true);
    if (!p->joined) {
        pthread_join(p->thread, NULL);
        p->joined = true;
    }
}

void vg_populate_free(struct vg_populate *p)
{
    if (p) {
        vg_populate_stop(p);
        free(p);
    }
}

void vg_populate_progress(struct vg_populate *p,
                          struct vg_populate_progress *out)
{
    out->finished = atomic_load(&p->finished);
    out->done = atomic_load(&p->done);
    out->error = atomic_load(&p->error);
    out->elapsed_ms = out->finished ? (double)atomic_load(&p->end_us) / 1e3
                                    : now_ms() - p->start_ms;
}
