/*
 * dirtytrack.h -- libdirtytrack: which VRAM pages changed since the last
 * migration epoch.
 *
 * A tracker covers one VRAM range [base, base + size) cut into pages of
 * page_size bytes (a power of two, 4 KiB to 2 MiB; default 64 KiB).  Pages
 * are numbered from 0; bitmaps are arrays of uint64_t where bit (p % 64) of
 * word (p / 64) stands for page p (dt_bitmap_words() gives the length).
 *
 * VRAM has three kinds of writer (DESIGN.md, "Dirty tracking"):
 *  - writers with known ranges (FILL, COPY, DMA, declared kernels, and
 *    QEMU's log of guest CPU writes): dt_mark_exact / dt_merge_log; those
 *    pages are reported dirty at the next epoch, without hashing;
 *  - opaque writers (kernels whose writes nobody sees): dt_mark_opaque with
 *    every buffer the kernel could write; only those pages are rehashed at
 *    the next epoch (write-set bounding) and reported if their hash changed;
 *  - the guest CPU through a BAR2 mapping that QEMU does not log: mark the
 *    mapped range opaque, or dt_mark_all_opaque, before every epoch.
 *
 * Hashes are XXH3-64 keyed by a seed drawn from getrandom() per tracker (per
 * migration), so a guest cannot engineer collisions.  Hashing runs on a pool
 * of threads -- or, for VRAM that is not mapped in this process (a GPU),
 * on the device through dt_config.hash, and only the hashes come back.
 *
 * Guarantee: a page that changed since the previous epoch is reported by
 * the next one PROVIDED every write was marked (exact or opaque) before
 * that epoch.  An unmarked write outside the marked opaque ranges is never
 * seen: there is no guarantee for a writer the caller forgets to mark.
 *
 * Threads: the dt_mark_* calls may run concurrently with each other (they
 * set bits atomically), but not with dt_epoch or dt_free; everything else
 * is for one thread at a time.  Memory must not be written while dt_epoch
 * runs (pause the writers, or mark those writes for the next epoch).
 */
#ifndef DT_DIRTYTRACK_H
#define DT_DIRTYTRACK_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

#define DT_PAGE_SIZE_DEFAULT (64u << 10)
#define DT_PAGE_SIZE_MIN     (4u << 10)
#define DT_PAGE_SIZE_MAX     (2u << 20)
#define DT_THREADS_MAX       64u

struct dt_tracker;

/*
 * Hash pages where they live: for each page p whose bit is set in @select,
 * hashes[p] = XXH3_64bits_withSeed(page p, page_size, @seed) and bit p of
 * @zero set iff the page is all zero (clear otherwise).  0 or -errno.
 */
typedef int dt_hash_fn(void *opaque, const uint64_t *select, uint64_t seed,
                       uint64_t *hashes, uint64_t *zero, struct vg_error *err);

struct dt_config {
    const uint8_t *base; /* host mapping of VRAM, read by dt_epoch */
    uint64_t size;       /* bytes, a non-zero multiple of page_size */
    uint32_t page_size;  /* 0 means DT_PAGE_SIZE_DEFAULT */
    unsigned threads;    /* hashing threads, 1 to DT_THREADS_MAX */
    uint64_t seed;       /* hash seed; 0 draws one from getrandom() */
    dt_hash_fn *hash;    /* base NULL: hashes pages where they live */
    void *hash_opaque;
    /* The first epoch reads nothing: it reports every page dirty and
     * leaves each without a baseline until dt_note_sent() gives it one.
     * For a caller that sends every page once and hashes its copies
     * anyway; it saves a pass over all of memory. */
    bool baseline_from_sends;
};

/* What one epoch did; every count is in pages. */
struct dt_epoch_stats {
    uint64_t epoch;          /* 1 for the first dt_epoch call */
    uint64_t pages;          /* pages tracked */
    uint64_t pages_hashed;   /* pages read and hashed by this epoch */
    uint64_t hash_ns;        /* wall time of the hash pass */
    double hash_gbps;        /* pages_hashed bytes / hash_ns, in GB/s */
    uint64_t dirty;          /* pages reported: the three below summed */
    uint64_t dirty_exact;    /* in the exact log (counted here first) */
    uint64_t dirty_hash;     /* not exact-logged; hash differs from last */
    uint64_t dirty_baseline; /* hashed with no valid previous hash */
    uint64_t zero;           /* hashed pages found all-zero */
};

/*
 * Create a tracker for @cfg (copied; @cfg->base must stay mapped until
 * dt_free).  Reads no memory yet.  -EINVAL with the reason for a bad
 * config, -ENOMEM, or the error of getrandom() or of starting threads.
 */
int dt_new(const struct dt_config *cfg, struct dt_tracker **out,
           struct vg_error *err);
/* Stop the threads and free the tracker; NULL is ignored. */
void dt_free(struct dt_tracker *t);

/* Pages tracked, the page size, and uint64_t words in a page bitmap. */
uint64_t dt_pages(const struct dt_tracker *t);
uint32_t dt_page_size(const struct dt_tracker *t);
uint64_t dt_bitmap_words(const struct dt_tracker *t);
/* The seed in use (drawn at dt_new when the config said 0). */
uint64_t dt_seed(const struct dt_tracker *t);

/*
 * A writer with a known range wrote [@off, @off + @len): the pages it
 * touches are reported dirty at the next epoch.  @len 0 marks nothing.
 * -ERANGE if the range leaves [0, size) or wraps around; nothing is marked.
 */
int dt_mark_exact(struct dt_tracker *t, uint64_t off, uint64_t len,
                  struct vg_error *err);
/*
 * An opaque writer may have written anywhere in [@off, @off + @len): the
 * pages it touches are rehashed at the next epoch and reported if changed.
 * Same range rules and errors as dt_mark_exact.
 */
int dt_mark_opaque(struct dt_tracker *t, uint64_t off, uint64_t len,
                   struct vg_error *err);
/* Anything may have changed anywhere: the next epoch rehashes every page. */
void dt_mark_all_opaque(struct dt_tracker *t);
/*
 * The next epoch checks the pages in the exact log by their hashes, as if
 * the writes had been opaque: a page rewritten with what it held when it
 * went out is not reported (one without a baseline still is).  Worth it
 * where hashing costs much less than sending, e.g. a GPU that hashes its
 * own memory in stop-copy.  May run beside dt_mark_*.
 */
void dt_verify_exact(struct dt_tracker *t);
/* Pages the next epoch would hash if it closed now (every page before the
 * baseline, unless it is taken from sends, and after dt_mark_all_opaque).  May
 * run beside dt_mark_*. */
uint64_t dt_pages_to_hash(const struct dt_tracker *t);
/*
 * Merge an exact log kept at another granularity, e.g. QEMU's dirty log of
 * the BAR2 mapping (4 KiB host pages): bit i of @bitmap (same layout as
 * ours, @nbits bits) means [@off + i * @gran, + @gran) was written.
 * -EINVAL unless @gran is a power of two; -ERANGE as dt_mark_exact for the
 * whole span [@off, @off + @nbits * @gran), checked before marking.
 */
int dt_merge_log(struct dt_tracker *t, uint64_t off, const uint64_t *bitmap,
                 uint64_t nbits, uint64_t gran, struct vg_error *err);

/*
 * Close an epoch: write the dirty set to @dirty (dt_bitmap_words() words,
 * every word overwritten, bits past the last page 0) and clear the logs.
 *
 * The first epoch hashes every page (the baseline; none with
 * dt_config.baseline_from_sends) and reports every page dirty: everything
 * must be sent once.  Each later epoch hashes the pages
 * of the opaque write-set (all pages after dt_mark_all_opaque) and reports
 *   (pages in the exact log) U (hashed pages whose hash differs from the
 *   one stored when they were last hashed, or that have no valid hash).
 * An exact-logged page that is not hashed loses its stored hash (its new
 * content was never read), so a later hash of it reports it again instead
 * of comparing with stale content.
 * @st (may be NULL) receives the statistics, also kept for dt_get_stats.
 * -EINVAL if @dirty is NULL; the error of dt_config.hash, and then the
 * logs are kept and the next epoch tries again.
 */
int dt_epoch(struct dt_tracker *t, uint64_t *dirty, struct dt_epoch_stats *st,
             struct vg_error *err);

/*
 * dt_epoch() in halves, so that the first pages of the dirty set can be
 * sent while the rest is still being hashed (stop-copy):
 * dt_epoch_begin() starts the epoch on the pool's threads and returns at
 * once (with 1 thread, or no page to hash, it does all the work first);
 * dt_epoch_ready() returns how many pages of @dirty, from page 0, are
 * final, waiting until at least min(@want, pages) are; dt_epoch_end()
 * waits for the rest and gives the statistics, as dt_epoch() would.
 * Between begin and end the memory must not change, no dt_mark_*,
 * dt_merge_log or dt_epoch call may be made, and dt_note_sent() only for
 * pages below what dt_epoch_ready() returned.  -EINVAL if @dirty is NULL
 * or an epoch is already open.
 */
int dt_epoch_begin(struct dt_tracker *t, uint64_t *dirty, struct vg_error *err);
uint64_t dt_epoch_ready(struct dt_tracker *t, uint64_t want);
void dt_epoch_end(struct dt_tracker *t, struct dt_epoch_stats *st);

/*
 * The caller sent @n pages from @page on, @data being the copy that went
 * out (@n * page size bytes): their hashes become the baseline the next
 * epoch compares against.  Memory may change between an epoch's hashing
 * and the send, even while the copy is made; without this, a page that
 * changed after it was hashed and then changed back would compare equal
 * and be missed, leaving the receiver with the in-between content.
 * Exact writes marked before the copy are in what was sent, so their log
 * bits are cleared: call it only with a copy made after every write
 * marked so far (e.g. from the thread that marks).
 * dt_note_sent_zero() is the same for pages sent as zero pages.  Pages
 * out of range are ignored.  Not concurrent with dt_epoch().
 */
void dt_note_sent(struct dt_tracker *t, uint64_t page, uint64_t n,
                  const uint8_t *data);
void dt_note_sent_zero(struct dt_tracker *t, uint64_t page, uint64_t n);
/*
 * dt_note_sent() in two steps, so that the hashing can run on other
 * threads: dt_page_hash() is the hash the tracker keeps for a page of
 * content @data (any thread); dt_note_sent_hashes() takes @n of them, of
 * the copies that went out, as dt_note_sent() would have computed them.
 */
uint64_t dt_page_hash(const struct dt_tracker *t, const uint8_t *data);
void dt_note_sent_hashes(struct dt_tracker *t, uint64_t page, uint64_t n,
                         const uint64_t *hashes);
/*
 * dt_note_sent() without a hash, for a caller that marks every write
 * exact: the exact writes marked so far are in what was sent, and the
 * pages have no baseline, so an epoch that hashes one of them (after
 * dt_mark_opaque or dt_mark_all_opaque) reports it.  Pages out of range
 * are ignored.  Not concurrent with dt_epoch().
 */
void dt_note_sent_unhashed(struct dt_tracker *t, uint64_t page, uint64_t n);

/*
 * True iff page @page was hashed by the last epoch and found all-zero (the
 * hash equals the seed's zero-page hash and a byte scan confirms it).  A
 * page not hashed by the last epoch reads false: unknown, send its data.
 * False for a page number out of range.
 */
bool dt_page_is_zero(const struct dt_tracker *t, uint64_t page);
/* Statistics of the last epoch (all zero before the first). */
void dt_get_stats(const struct dt_tracker *t, struct dt_epoch_stats *st);

#endif
