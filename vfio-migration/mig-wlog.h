/*
 * mig-wlog.h -- the engine writes that the device's step reports, kept
 * for the migration module's own thread.
 *
 * The device may step on a thread of its own (vfio-user/vfu-devthread.c)
 * while the module serves a pre-copy read: its write observer adds each
 * written range here under the log's lock, and the module applies the
 * ranges (its marks and estimates) when one of its calls begins.  A write
 * applied later than it happened is still seen: a page still in the pass
 * is read after it, any other is marked for the next round.  A full log
 * keeps one opaque range that covers every write past it.
 */
#ifndef MIG_WLOG_H
#define MIG_WLOG_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define MIG_WLOG_MAX 1024u

struct mig_wlog_entry {
    uint64_t off, len;
    bool exact; /* exactly what was written, else a bound (opaque) */
};

struct mig_wlog {
    pthread_mutex_t lock;
    struct mig_wlog_entry e[MIG_WLOG_MAX];
    unsigned n;
    uint64_t spill_lo, spill_hi; /* past a full log: [lo, hi), opaque */
    uint64_t spilled;            /* writes that went to the spill range */
};

typedef void mig_wlog_fn(void *opaque, uint64_t off, uint64_t len, bool exact);

void mig_wlog_init(struct mig_wlog *l);
void mig_wlog_destroy(struct mig_wlog *l);
/* Any thread: [@off, +@len) was written (@len > 0). */
void mig_wlog_add(struct mig_wlog *l, uint64_t off, uint64_t len, bool exact);
/* Give every range logged so far to @fn, oldest first, and empty the log;
 * @fn NULL only empties it.  The writer waits meanwhile. */
void mig_wlog_drain(struct mig_wlog *l, mig_wlog_fn *fn, void *opaque);

#endif
