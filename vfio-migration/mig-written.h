/*
 * mig-written.h -- which pieces of each page a source's stop-copy sends
 * (stream version 4, PAGE_PIECES records; MIG_PAGE_PIECES pieces a page).
 *
 * Per page it keeps the pieces the guest CPU's log wrote since the last
 * epoch, all of them once anything else wrote the page (an engine's
 * write, or one the tracker found by hash, could be anywhere in it).  At
 * each epoch the dirty pages' pieces join those of the pass: a page the
 * pass holds adds them to the pieces it has, one new to it starts from
 * them, so a page's pieces cover every write since it last went.  It also
 * keeps whether that last send went from VRAM in pre-copy, by reference:
 * the destination's copy may then be torn, and the page's pieces carry
 * its hash.
 *
 * One thread: the source's saving session.
 */
#ifndef MIG_WRITTEN_H
#define MIG_WRITTEN_H

#include <stdbool.h>
#include <stdint.h>

#define MIG_WRITTEN_WHOLE (~0ull) /* every piece of the page */

struct mig_written;

/* For @npages pages; NULL if out of memory. */
struct mig_written *mig_written_new(uint64_t npages);
void mig_written_free(struct mig_written *w);

/* The pieces of page @page (of @page_size bytes) that the bytes
 * [@off, +@len) touch (@len > 0); 0 if none. */
uint64_t mig_written_touched(uint64_t page, uint32_t page_size, uint64_t off,
                             uint64_t len);

/* Page @page was written: pieces @mask by the guest CPU (its log), or
 * whole by anything else; @in_pass: the pass holds the page. */
void mig_written_cpu(struct mig_written *w, uint64_t page, uint64_t mask,
                     bool in_pass);
void mig_written_whole(struct mig_written *w, uint64_t page, bool in_pass);

/*
 * An epoch's dirty pages of bitmap words [@w0, @w1) join the pass (@pass,
 * the bitmap before they join it): each takes the pieces written since
 * the last epoch, or all of them where @parts is false (an epoch that
 * may not leave a page a part of itself) or its log says nothing; the
 * pieces counted for the words start over.
 */
void mig_written_merge(struct mig_written *w, const uint64_t *dirty,
                       const uint64_t *pass, uint64_t w0, uint64_t w1,
                       bool parts);

/* The pieces of page @page of the pass that its next send needs. */
uint64_t mig_written_pass(const struct mig_written *w, uint64_t page);

/* Page @page left the pass: it went, with every write logged so far. */
void mig_written_leave(struct mig_written *w, uint64_t page);

/*
 * What a stop-copy would send if it began now, for the size estimate:
 * pages sent whole, and pages sent in parts with their pieces;
 * mig_written_in_pass() for the pages of the pass (its pieces and those
 * written since the epoch), mig_written_fresh() for pages outside it
 * written since.  Kept as the pass
 * changes, where every page leaves it through mig_written_leave().
 * mig_written_grown() counts every piece a write added to either, 64 a
 * page written whole, since the start: its growth over time is the rate
 * at which what a stop-copy sends grows.
 */
struct mig_written_sum {
    uint64_t whole, parts, pieces;
};

struct mig_written_sum mig_written_in_pass(const struct mig_written *w);
struct mig_written_sum mig_written_fresh(const struct mig_written *w);
uint64_t mig_written_grown(const struct mig_written *w);

/* Pages [@page, +@n) went, by reference from VRAM in pre-copy or not;
 * whether the last send of @page went so. */
void mig_written_sent(struct mig_written *w, uint64_t page, uint64_t n,
                      bool by_ref);
bool mig_written_by_ref(const struct mig_written *w, uint64_t page);

#endif
