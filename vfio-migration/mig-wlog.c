/*
 * mig-wlog.c -- the engine writes that the device's step reports, kept
 * for the migration module's own thread (mig-wlog.h).
 */
#include "mig-wlog.h"

#include <string.h>

void mig_wlog_init(struct mig_wlog *l)
{
    memset(l, 0, sizeof(*l));
    pthread_mutex_init(&l->lock, NULL);
}

void mig_wlog_destroy(struct mig_wlog *l)
{
    pthread_mutex_destroy(&l->lock);
}

/* Whether [@off, +@len) continues or repeats the last entry: merged. */
static bool merge_last(struct mig_wlog *l, uint64_t off, uint64_t len,
                       bool exact)
{
    struct mig_wlog_entry *last = l->n ? &l->e[l->n - 1] : NULL;

    if (!last || last->exact != exact || off < last->off ||
        off > last->off + last->len) {
        return false;
    }
    if (off + len > last->off + last->len) {
        last->len = off + len - last->off;
    }
    return true;
}

void mig_wlog_add(struct mig_wlog *l, uint64_t off, uint64_t len, bool exact)
{
    pthread_mutex_lock(&l->lock);
    if (merge_last(l, off, len, exact)) {
        /* nothing more */
    } else if (l->n < MIG_WLOG_MAX) {
        l->e[l->n++] = (struct mig_wlog_entry){off, len, exact};
    } else {
        if (l->spilled++ == 0 || off < l->spill_lo) {
            l->spill_lo = off;
        }
        if (off + len > l->spill_hi) {
            l->spill_hi = off + len;
        }
    }
    pthread_mutex_unlock(&l->lock);
}

void mig_wlog_drain(struct mig_wlog *l, mig_wlog_fn *fn, void *opaque)
{
    pthread_mutex_lock(&l->lock);
    for (unsigned i = 0; fn && i < l->n; i++) {
        fn(opaque, l->e[i].off, l->e[i].len, l->e[i].exact);
    }
    if (fn && l->spilled) {
        fn(opaque, l->spill_lo, l->spill_hi - l->spill_lo, false);
    }
    l->n = 0;
    l->spilled = 0;
    l->spill_lo = l->spill_hi = 0;
    pthread_mutex_unlock(&l->lock);
}
