/*
 * mig-save-int.h -- what the source's saving session (mig-save.c) shares
 * with its size estimates (mig-save-size.c): the session's state and the
 * small helpers both take.  Internal to those two files.
 */
#ifndef MIG_SAVE_INT_H
#define MIG_SAVE_INT_H

#include "dirty-track/dirtytrack.h"
#include "mig-hashway.h"
#include "mig-int.h"
#include "mig-written.h"

#define HEADER_BYTES (MIG_REC_HDR_SIZE + MIG_HEADER_SIZE)
#define TAIL_BYTES   (MIG_REC_HDR_SIZE + VGPU_STATE_SIZE + END_BYTES)
#define END_BYTES    (MIG_REC_HDR_SIZE + MIG_END_SIZE)
/* PAGE_PIECES records staged at once, on the pool (stage_pieces()). */
#define PIECES_BATCH 256u

enum save_phase {
    SAVE_PRECOPY,  /* rounds, device running; nothing to read when drained */
    SAVE_STOPCOPY, /* final pass, device quiesced */
    SAVE_POSTCOPY, /* post-copy: the POSTCOPY record next */
    SAVE_STATE,    /* device state next */
    SAVE_END,      /* END next */
    SAVE_DONE,     /* END staged; the stream ends after it */
};

struct mig_save {
    struct mig_enc *enc;
    enum save_phase phase;
    bool header_sent;
    uint8_t *buf; /* a record's staging buffer (MIG_REC_MAX) */
    /* Where the staged record lies: @buf, or the buffer of the read that
     * staged it, where it fitted whole (that read takes it whole). */
    uint8_t *rec;
    size_t len, pos;  /* its size and the bytes read of it */
    uint32_t run_cap; /* pages a PAGES record may hold, to fit there */
    uint32_t room;    /* bytes from rec to the end of the read's buffer,
                         0: rec is buf */
    bool ahead;       /* a read ahead of the next run may be in flight */
    /* In stop-copy, a PAGES record's page data are not copied into @rec:
     * they follow its @ref_at header bytes there, from VRAM at @ref.  So
     * do a PAGES_LISTED record's in pre-copy, where the read being served
     * lists pieces (@pieces_read) and every write is seen (listed_ok()). */
    const uint8_t *ref;
    size_t ref_at;
    bool ref_listed; /* the record by reference is a PAGES_LISTED */
    bool pieces_read;
    /* Pages went out from VRAM in pre-copy: an opaque write to one may
     * have torn its copy, so opaque writes count as exact from then on
     * (a page written back to what was hashed must go again). */
    bool sent_listed;
    uint64_t *pass; /* pages the current round still has to send */
    /* Version 4, VRAM mapped here, hybrid tracking (else NULL): the
     * pieces of each page a stop-copy sends (mig-written.h).
     * @pieces_epoch: the epoch being merged may leave a page of the pass
     * a part of it. */
    struct mig_written *written;
    /* ...and, version 5, the hashes of their pages' pieces as each page
     * went (else NULL): a page sent as pieces is hashed from those.  The
     * device's (mig_session_tree()), not freed with the session. */
    struct mig_tree *tree;
    /* Pages of the pass that go as pieces, their records staged a batch
     * at a time (stage_pieces()): record i at @rec + @at[i]. */
    struct {
        uint64_t page[PIECES_BATCH];
        uint64_t mask[PIECES_BATCH];
        uint32_t at[PIECES_BATCH + 1];
        unsigned n;
    } pieces_batch;
    bool pieces_epoch;
    bool writes_unseen_once; /* guest CPU writes went unseen meanwhile */
    uint64_t *dirty;         /* an epoch's dirty set */
    uint64_t *marked;        /* pages the device wrote since the last epoch
                                and not in the pass (for the estimate) */
    uint64_t marked_count;
    uint64_t *prev_dirty;  /* the epoch before's dirty set (for the rate) */
    double epoch_ms;       /* when the last epoch was taken */
    uint64_t epochs;       /* taken; the first is the baseline */
    uint64_t cursor;       /* no page below it is left in the pass */
    uint64_t left;         /* pages left in the pass */
    uint64_t left_nz;      /* of those, pages last seen non-zero */
    uint64_t round;        /* rounds started; round 0 is the first */
    uint64_t round_bytes;  /* stream bytes read in the current round */
    struct dt_tracker *dt; /* NULL: --dirty-track=none */
    bool epoch_taken;      /* dt's baseline epoch is done */
    bool epoch_open;       /* stop-copy's epoch is still being hashed */
    uint64_t merged;       /* ...and its dirty pages below this are merged */
    uint64_t sent;         /* stream bytes read */
    double stopcopy_t0;    /* ms at STOP_COPY entry */
    double last_read_ms;   /* when a pre-copy read last returned data */
    double stream_ms;      /* time pre-copy reads were streaming... */
    uint64_t stream_bytes; /* ...and the bytes they returned meanwhile */
    uint64_t sample_pages; /* pages hashed in place at open, cold... */
    double sample_ms;      /* ...and the time it took: the hash rate
                              until an epoch has hashed */
    double rate_ref_ms;    /* newly marked pages are counted from here */
    uint64_t rate_ref_marked;
    /* Over the last RATE_WINDOW_MS or more, or the last epoch */
    double new_pages_per_ms;
    /* The same for the pieces a stop-copy would send (@written's
     * mig_written_grown(), from @rate_ref_grown; at the last epoch
     * @epoch_grown) */
    double grown_per_ms;
    uint64_t rate_ref_grown, epoch_grown;
    bool end_timed;
    bool fault_armed;
    uint64_t fault_offset;
    bool postcopy; /* the stop-copy is a post-copy switchover */
    struct mig_postcopy_info pc_info; /* its POSTCOPY record */
    bool failed;                      /* reading VRAM failed: @error says why */
    struct vg_error error;
    struct dt_pool *pool; /* copies and hashes large records */
    uint64_t stream_hash[MIG_RUN_MAX_PAGES]; /* a record's page hashes */
    uint64_t track_hash[MIG_RUN_MAX_PAGES];  /* ...and the tracker's */
    /* VRAM not mapped here: the GPU may hash the pages it reads
     * (can_gpu_hash), and does for the read being served (gpu_hashes,
     * chosen per read with --gpu-hash=auto); the run read last is all
     * zero where its bit is set, and run_hashed says its hashes are in
     * the arrays above already. */
    bool can_gpu_hash;
    bool gpu_hashes;
    struct mig_hashway hashway;
    uint64_t read_page_bytes; /* page data hashed in the read being served */
    bool run_hashed;
    uint64_t run_zero[MIG_RUN_MAX_PAGES / 64];
};

/* mig_written_grown(), 0 without pieces kept. */
static inline uint64_t grown(const struct mig_save *s)
{
    return s->written ? mig_written_grown(s->written) : 0;
}

/* Upper bound of the encoded size of a pass over @pages pages, @nz of
 * them non-zero: how zero and non-zero pages and the gaps of the pass
 * split it into records is not known, but no record covers less than a
 * page. */
static inline uint64_t pass_bytes(const struct mig *m, uint64_t pages,
                                  uint64_t nz)
{
    return nz * (m->scfg.page_size + (m->stream_version >= 3 ? 8 : 0)) +
           MIG_RUN_HEADERS_SIZE * pages;
}

/* Whether the guest CPU may write VRAM without the server learning of it:
 * BAR2 is mapped by the client, which does not log those writes. */
static inline bool cpu_writes_unseen(const struct mig *m)
{
    return m->bar2_shared && !m->bar2_logged;
}

/* Whether every write to VRAM is seen: the device's own (observed) and
 * the guest CPU's (logged, or none). */
static inline bool writes_all_seen(const struct mig *m)
{
    return m->save->dt && m->track == MIG_TRACK_HYBRID && !cpu_writes_unseen(m);
}

/* Whether an epoch may leave pages of the pass a part of themselves: the
 * pieces are kept, and every write since the session began was seen (a
 * write outside the logs could be anywhere in a page). */
static inline bool pieces_ok(const struct mig *m)
{
    const struct mig_save *s = m->save;

    return s->written && !s->writes_unseen_once && writes_all_seen(m);
}

/* Bytes of the current round not read yet (staged record, header
 * included). */
uint64_t mig_save_round_left(const struct mig *m);

#endif /* MIG_SAVE_INT_H */
