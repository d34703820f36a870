/*
 * mig-int.h -- state shared by mig.c (FSM actions, statistics), mig-save.c
 * (the source's saving session) and mig-load.c (the destination's loading
 * session).  Not an API: users include mig.h.
 */
#ifndef MIG_INT_H
#define MIG_INT_H

#include <pthread.h>

#include "dirty-track/hash-pool.h"
#include "mig-tree.h"
#include "mig-stream.h"
#include "mig-wlog.h"
#include "mig.h"

struct mig_save; /* mig-save.c */
struct mig_load; /* mig-load.c */
struct pc_src;   /* pc-src.h */
struct pc_dst;   /* pc-dst.h */
struct sf;       /* stream-file.h */

struct mig {
    struct mig_fsm fsm;
    struct vgpu *gpu;
    struct mig_stream_config scfg;
    char *stats_path;
    struct mig_fault fault;
    uint64_t npages;
    /* Pages last seen non-zero (zero scan at PRE_COPY entry, updated as
     * pages are sent); without a scan every page counts as non-zero. */
    uint64_t *nonzero;
    uint64_t nonzero_count;
    enum mig_precopy_mode precopy;
    enum mig_track_mode track;
    enum mig_gpu_hash gpu_hash;
    unsigned hash_threads;   /* hashing and loading threads, >= 1 */
    unsigned stream_version; /* written by saving sessions */
    uint32_t run_max;        /* ...with runs of at most this much data */
    uint32_t hash_version;   /* the last session's stream: its page hash */
    bool bar2_shared;   /* a client got the VRAM fd: CPU writes are unseen */
    bool bar2_logged;   /* ... unless the client logs them (REGION_DIRTY_LOG) */
    bool checksums_due; /* saved in STOP_COPY: checksum VRAM once idle */
    bool load_retire_due;     /* loaded: checksums, then free it, once idle */
    double stats_due_ms;      /* first change not in the stats file yet; 0 */
    double stats_busy_ms;     /* last request served or change */
    bool stats_reset;         /* a session reset them: write the file at once */
    uint64_t saves_started;   /* saving sessions since the server started */
    uint64_t direct_base;     /* vgpu_direct_bytes() when the stats reset */
    struct mig_rounds rounds; /* planner and throttle of the session */
    /* What the device's step shares with the module, which may run on
     * another thread (mig_gpu_step()): the throttle in rounds, under
     * step_lock, and the engine writes it reports, applied by
     * mig_save_fold_writes() when a call of the module begins. */
    pthread_mutex_t step_lock;
    struct mig_wlog wlog;
    struct mig_save *save;
    struct mig_load *load;
    /* The kept piece hashes of every session (mig_session_tree()), or
     * NULL until one needs them; made at start with --prealloc. */
    struct mig_tree *tree;
    struct mig_stats stats;
    /* Post-copy (mig-postcopy.c) */
    char *runtime_dir;     /* NULL: not capable */
    char *postcopy_listen; /* TCP host of the page server, or NULL */
    int client_uffd;       /* -1: none */
    struct mig_client_area *client_areas;
    unsigned client_nareas;
    struct pc_src *pc_src; /* serving the last switchover's pages */
    struct pc_dst *pc_dst; /* fetching the last stream's pages */
    struct sf *restore;    /* ...from this save file (restore on demand) */
    /* VRAM and device state as that load delivered them, for its
     * checksums once the last page is in (the device may run before). */
    uint64_t *pc_hash;  /* the stream's page hashes, then the fetched */
    uint64_t *pc_known; /* ...bitmap of the pages in pc_hash */
    uint8_t pc_state[VGPU_STATE_SIZE];
    bool no_restore_on_demand; /* --no-restore-on-demand */
    bool pc_noted;             /* its end is in the statistics */
    double pc_progress_ms;     /* the statistics last showed its progress */
};

/* Apply the engine writes logged since the last call (mig-wlog.h) to the
 * saving session's marks and estimates; without one, forget them. */
void mig_save_fold_writes(struct mig *m);

/* Milliseconds of CLOCK_MONOTONIC. */
double mig_now_ms(void);
/* XXH3-64 (seed 0) of page @page of VRAM. */
/* The page hash of page @page of mapped VRAM, as the stream of the last
 * session (m->hash_version) takes it: mig_stream_page_hash(). */
uint64_t mig_page_hash(const struct mig *m, uint64_t page);
/* Take the checksums of VRAM and of the device state into the stats.  The
 * VRAM checksum is XXH3-64 of the array of the pages' mig_page_hash()
 * values, so a destination can hash pages as they arrive: @page_hash has
 * the hash of each page whose bit is set in @known; the others are read
 * now (both NULL: every page is).  @state: the device state blob to
 * checksum, NULL: the device's now.  In two steps: mig_fill_hashes()
 * reads the pages @known lacks into @page_hash (false if it could not,
 * with a warning), mig_publish_checksums() takes the
 * checksums from a whole @page_hash and a VGPU_STATE_SIZE-byte @state
 * without reading the device. */
void mig_take_checksums(struct mig *m, uint64_t *page_hash,
                        const uint64_t *known, const uint8_t *state);
bool mig_fill_hashes(struct mig *m, uint64_t *page_hash, const uint64_t *known);
void mig_publish_checksums(struct mig *m, const uint64_t *page_hash,
                           const uint8_t *state);
/* Record @msg as the last error and rewrite the stats file. */
void mig_note_error(struct mig *m, const char *msg);
/* The kept piece hashes for the session that begins, every page
 * forgotten: the device's, made on first use (sessions never overlap, so
 * one at a time uses them); NULL if out of memory. */
struct mig_tree *mig_session_tree(struct mig *m);

/*
 * A PAGES record of at least MIG_SPLIT_BYTES has its per-page work done by
 * the session's pool, in pieces of MIG_PIECE_BYTES or one page.
 * mig_piece() gives piece @piece of a record of @count pages of
 * @page_size bytes: its first page in *@first, and its end.
 * mig_run_pieces() runs @fn(@arg, piece) over a record's pieces: on @pool
 * where the record is large enough and the pool has threads to share the
 * work, else here.
 */
#define MIG_SPLIT_BYTES (256u * 1024)
#define MIG_PIECE_BYTES (64u * 1024)
uint64_t mig_piece(uint64_t piece, uint32_t page_size, uint64_t count,
                   uint64_t *first);
void mig_run_pieces(struct dt_pool *pool, uint32_t page_size, uint64_t count,
                    dt_pool_fn *fn, void *arg);

/* Pages hashed together on the pool, MIG_HASH_BATCH at most:
 * mig_hash_listed() puts in @hash[i] the page hash of page @page[i] of
 * VRAM (mapped here), for i < @n: whole, or where @tree is not NULL (a
 * version 5 stream's) from the pieces @mask[i] names that changed
 * (mig_tree_rehash()). */
#define MIG_HASH_BATCH 256u
void mig_hash_listed(const struct mig *m, struct dt_pool *pool,
                     struct mig_tree *tree, const uint64_t *page,
                     const uint64_t *mask, unsigned n, uint64_t *hash);

/* Bitmaps of pages. */
static inline bool mig_bit(const uint64_t *bm, uint64_t i)
{
    return bm[i / 64] >> (i % 64) & 1;
}

static inline void mig_bit_put(uint64_t *bm, uint64_t i, bool v)
{
    if (v) {
        bm[i / 64] |= 1ull << (i % 64);
    } else {
        bm[i / 64] &= ~(1ull << (i % 64));
    }
}

/* Set the first @bits bits of @bm (the rest of its last word clear). */
static inline void mig_bitmap_fill(uint64_t *bm, uint64_t bits)
{
    for (uint64_t i = 0; i < bits / 64; i++) {
        bm[i] = UINT64_MAX;
    }
    if (bits % 64) {
        bm[bits / 64] = (1ull << (bits % 64)) - 1;
    }
}

/* mig-save.c: open a saving session; @precopy: start the initial pass
 * (running), else wait for mig_save_stopcopy. */
int mig_save_open(struct mig *m, bool precopy, struct vg_error *err);
/* The device is quiesced: start the stop-copy pass. */
void mig_save_stopcopy(struct mig *m);
void mig_save_close(struct mig *m);
/* Whether the stream's last byte (END's) has been read. */
bool mig_save_ended(const struct mig *m);
/* mig_read_pass(): the current round where the last read could list
 * pages of VRAM in pre-copy, else 0. */
uint32_t mig_save_pass(const struct mig *m);
/* mig_read, and mig_read_pieces where @pieces is not NULL. */
struct mig_pieces {
    struct mig_piece *piece;
    unsigned max, count;
};
int mig_save_read(struct mig *m, uint8_t *buf, uint32_t size, uint32_t *got,
                  struct mig_pieces *pieces, struct vg_error *err);
/* PRECOPY_INFO: bytes of round 0 and of a later round not read yet;
 * a drained round may start the next one first. */
void mig_save_precopy_info(struct mig *m, uint64_t *initial, uint64_t *dirty);
/* The guest CPU wrote the pages of VRAM that @bitmap marks (see
 * mig_region_dirty_log); -ERANGE beyond VRAM. */
int mig_save_cpu_log(struct mig *m, uint64_t off, const uint64_t *bitmap,
                     uint64_t nbits, uint64_t gran, struct vg_error *err);
/* mig-save-size.c: QEMU asks for the stop-copy size: measure how fast pages are
 * newly written, for the part of the estimate that covers the writes between
 * QEMU's last query and the stop. */
void mig_save_note_size_query(struct mig *m);
/* Bytes a stop-copy pass still has to deliver from now, counting
 * mig_save_stopcopy_hash_bytes. */
uint64_t mig_save_stopcopy_left(const struct mig *m);
/* Stop-copy's final epoch hashes pages before it knows what to send: the
 * stream bytes QEMU's link would carry in that time (pages to hash / the
 * session's hash rate * the rate QEMU reads pre-copy data at), so that
 * QEMU's downtime prediction (bytes / bandwidth) includes it.  0 outside
 * PRE_COPY, without tracking, and before the baseline epoch and the first
 * reads have given the two rates. */
uint64_t mig_save_stopcopy_hash_bytes(const struct mig *m);

/* mig-save.c: the coming stop-copy is a post-copy switchover. */
int mig_save_postcopy(struct mig *m, struct vg_error *err);

/* mig-postcopy.c: start serving the @pending pages (a bitmap of
 * m->npages bits) and fill *@info for the POSTCOPY record. */
int mig_postcopy_serve(struct mig *m, const uint64_t *pending,
                       struct mig_postcopy_info *info, struct vg_error *err);
/* Start fetching what a POSTCOPY record said (the device is stopped). */
int mig_postcopy_fetch(struct mig *m, const struct mig_postcopy_info *info,
                       struct vg_error *err);
/* Start loading the pages of the save file @file (taken over) while the
 * VM runs: the restore's VRAM on demand. */
int mig_restore_fetch(struct mig *m, struct sf *file, struct vg_error *err);
/* May the FSM go to @to?  A source whose pages a destination fetches may
 * not run; a destination still fetching may not start a migration. */
int mig_postcopy_check_arc(struct mig *m, enum mig_state to,
                           struct vg_error *err);
/* Pages are still arriving (destination): a held engine command is
 * retried every few ms. */
bool mig_postcopy_fetching(const struct mig *m);
/* The post-copy fetches page @page (it was pending at the switchover). */
bool mig_postcopy_fetches(const struct mig *m, uint64_t page);
/* End and free what post-copy left (waiting up to a minute for a
 * destination that is still fetching from this source). */
void mig_postcopy_free(struct mig *m);

/* mig-load.c: open a loading session (registers reset). */
int mig_load_open(struct mig *m, struct vg_error *err);
int mig_load_write(struct mig *m, const uint8_t *data, uint32_t size,
                   struct vg_error *err);
/* The page data of the PAGES record fed last, already in VRAM at [@off,
 * +@len) (mig_write_pieces). */
int mig_load_placed(struct mig *m, uint64_t off, uint32_t len,
                    struct vg_error *err);
/* Stream bytes at [@off, +@len) of a save file; the first extent of the
 * session brings the file (@fd, taken over), the others -1. */
int mig_load_file(struct mig *m, int fd, uint64_t off, uint64_t len,
                  struct vg_error *err);
/* Check the stream is complete, apply the device state, close. */
int mig_load_finish(struct mig *m, struct vg_error *err);
/* Once the server is idle after the RESUMING -> STOP that
 * mig_load_finish() left due (mig_idle()), or before a state change that
 * starts other work: take the checksums of what was loaded (hashed and
 * captured at the finish) and free the session. */
void mig_load_retire(struct mig *m);
void mig_load_close(struct mig *m);

#endif
