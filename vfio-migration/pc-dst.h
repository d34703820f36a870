/*
 * pc-dst.h -- the destination's side of a post-copy migration: VRAM on
 * demand.
 *
 * pc_dst_start() runs while the device is still stopped: it connects to
 * the source's page server (pc-src.h), takes the bitmap of the pages this
 * VRAM lacks, drops the stale copies pre-copy left of them (holes in the
 * VRAM memfd) and registers the client's mappings of VRAM with the
 * client's userfaultfd (uffd.h).  From then on, while the VM runs:
 *   - a fetch thread asks for the pages in order, pages someone waits for
 *     first, and installs each with UFFDIO_COPY (atomically, for every
 *     mapping of the memfd);
 *   - a fault thread turns the client's faults on missing pages into
 *     urgent requests (a fault on a page that is not pending is a page
 *     of zeros, installed at once);
 *   - pc_dst_ready() holds an engine command whose pages are missing, and
 *     pc_dst_wait() makes the device's own accesses (trapped BAR
 *     accesses) wait for their pages.
 * Each page is installed once and checked by its reply's hash; at the end
 * a digest of every page received is compared with the source's, the
 * ranges are unregistered and the channel closed.
 * A channel that breaks is connected again, with the same token, for up
 * to ten minutes (a network cut that heals); what was asked for meanwhile
 * goes first.  A source that answers wrongly fails the post-copy.
 * Without a userfaultfd (or with mappings it cannot cover whole pages of)
 * pc_dst_start() fetches every pending page before it returns.  Where
 * VRAM is not mapped here (a GPU's: the client traps every access to it,
 * which waits with pc_dst_wait()), the fetch thread installs the pages
 * through @write and no fault thread is needed.
 *
 * Restore on demand is the same with a save file (stream-file.h) in place
 * of the page server: the pages are those the file holds, read and
 * verified record by record, and the end checks the stream's digest.
 * With VRAM mapped here, @threads fetch threads read the file at once,
 * each a run of pages at a time with a reader of its own; the last one
 * done ends the load.
 */
#ifndef PC_DST_H
#define PC_DST_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "pc-wire.h"

/* A mapping of VRAM [vram_off, +size) at vaddr in the userfaultfd's
 * address space. */
struct pc_dst_area {
    uint64_t vaddr;
    uint64_t vram_off;
    uint64_t size;
};

struct sf; /* stream-file.h */

struct pc_dst_config {
    struct sf *file;           /* restore: pages from it (borrowed), or */
    char address[PC_ADDR_MAX]; /* the POSTCOPY record's page server */
    uint8_t token[PC_TOKEN_SIZE];
    uint64_t npages;
    uint64_t pending; /* what the record promised (not with @file) */
    uint32_t page_size;
    uint32_t hash_version; /* the stream's: its page hash */
    uint8_t *vram;         /* VRAM mapped here, or NULL: */
    /* ...pages go through this (from the fetch thread) */
    int (*write)(void *opaque, uint64_t off, const void *data, uint64_t len,
                 struct vg_error *err);
    void *write_opaque;
    int vram_fd; /* its memfd, -1 if none */
    int uffd;    /* -1: none; else taken over (closed by pc_dst_free) */
    const struct pc_dst_area *areas;
    unsigned nareas;
    /* Restore with VRAM mapped here: threads reading the file (0 or 1:
     * one; at most 16).  A page server is always read by one. */
    unsigned threads;
};

struct pc_dst_stats {
    uint64_t pending;     /* pages lacking at the switchover */
    uint64_t fetched;     /* of those, received so far */
    uint64_t requests;    /* page requests sent */
    uint64_t faults;      /* faults on pending pages (urgent requests) */
    uint64_t zero_faults; /* faults on pages of zeros */
    uint64_t waits;       /* device accesses that waited */
    double elapsed_ms;    /* pc_dst_start() to the last page */
    double max_fault_ms;  /* longest a faulting access waited */
    bool on_demand;       /* the VM ran before every page was here */
    bool done;            /* every page is here */
    bool verified;        /* ...and the digests matched */
    bool reconnecting;    /* the channel broke; connecting again */
    uint64_t reconnects;  /* times it was connected again */
    char channel_error[VG_ERROR_MAX]; /* why it last broke */
    char error[VG_ERROR_MAX];         /* why it failed, "" if it did not */
};

struct pc_dst;

int pc_dst_start(const struct pc_dst_config *cfg, struct pc_dst **out,
                 struct vg_error *err);
/* Stop the threads, close the channel and the userfaultfd; NULL ignored. */
void pc_dst_free(struct pc_dst *d);

/* Wait until VRAM [@off, +@len) is all here, asking for its pages first;
 * -EIO if the channel failed (those pages can never arrive). */
int pc_dst_wait(struct pc_dst *d, uint64_t off, uint64_t len,
                struct vg_error *err);
/* Whether VRAM [@off, +@len) is all here, without waiting: if not, its
 * missing pages are asked for first (a held engine command). */
bool pc_dst_ready(struct pc_dst *d, uint64_t off, uint64_t len);
/* Every page is here (whether or not the digests matched). */
bool pc_dst_done(struct pc_dst *d);
/* Whether page @page was pending at the start: it is fetched, whatever
 * VRAM held of it before (any thread; the set does not change). */
bool pc_dst_fetches(const struct pc_dst *d, uint64_t page);
/* Once done: the hash of each page received, as it arrived, into
 * @hash[page], its bit set in @known. */
void pc_dst_page_hashes(struct pc_dst *d, uint64_t *hash, uint64_t *known);
void pc_dst_get_stats(struct pc_dst *d, struct pc_dst_stats *st);

#endif
