/*
 * mig-save-size.c -- the source's estimates of what its stream has left:
 * the round's bytes behind PRECOPY_INFO, and the stop-copy's behind
 * MIG_DATA_SIZE (the pass still to send, what the next epoch may add,
 * and the time the stop-copy's hashing takes, in bytes of the stream).
 * Upper bounds: QEMU switches over when they fit its downtime limit.
 */
#include "mig-save-int.h"

/* The pages newly written per ms, measured over at least this long (until
 * then, over the last epoch), times SWITCHOVER_LAG_MS: what may be written
 * between QEMU's last size query and the stop. */
#define RATE_WINDOW_MS    20.0
#define SWITCHOVER_LAG_MS 50.0
/* A PAGE_PIECES record costs the two sides about as much time as this
 * many more bytes of whole pages (docs/dirty-tracking.md, "The estimate
 * counts pieces"): QEMU takes the estimate for a time. */
#define PIECES_RECORD_COST (8u << 10)

uint64_t mig_save_round_left(const struct mig *m)
{
    const struct mig_save *s = m->save;

    if (s->left == 0 && s->pos == s->len) {
        return 0;
    }
    return (s->len - s->pos) + (s->header_sent ? 0 : HEADER_BYTES) +
           pass_bytes(m, s->left, s->left_nz);
}

/* Whether a stop-copy beginning now sends pages in parts: an epoch
 * after the baseline may leave them so (pieces_ok()). */
static bool stopcopy_in_parts(const struct mig *m)
{
    return m->save->epoch_taken && pieces_ok(m);
}

/* Upper bound of the encoded size of the pages @t counts (pages sent
 * whole as non-zero, each in a record of its own), with each record of
 * pieces counted PIECES_RECORD_COST bytes more. */
static uint64_t sum_bytes(const struct mig *m, const struct mig_written_sum *t)
{
    return t->whole * pass_bytes(m, 1, 1) +
           t->parts *
               (MIG_REC_HDR_SIZE + MIG_PIECES_HDR_SIZE + PIECES_RECORD_COST) +
           t->pieces * (m->scfg.page_size / MIG_PAGE_PIECES);
}

/* Upper bound of what the next epoch adds: the pages written since the
 * last one (the device's writes and QEMU's log of the guest's) and those
 * the recent rate of new pages adds within SWITCHOVER_LAG_MS; or every
 * page not in the pass without tracking, before the baseline epoch, or
 * when guest CPU writes are unseen (then any page may be non-zero).
 * Where a stop-copy sends pages in parts, the pieces written since the
 * last epoch and those the recent rate of new pieces adds within the lag
 * (with a record for each new page), if that is less. */
static uint64_t pending_bytes(const struct mig *m)
{
    const struct mig_save *s = m->save;
    uint64_t rest = m->npages - s->left, lag, whole, parts;
    struct mig_written_sum fresh;

    if (cpu_writes_unseen(m)) {
        return pass_bytes(m, rest, rest);
    }
    if (!s->dt || !s->epoch_taken) {
        return pass_bytes(m, rest, m->nonzero_count - s->left_nz);
    }
    lag = (uint64_t)(s->new_pages_per_ms * SWITCHOVER_LAG_MS + 0.5);
    lag = lag < rest - s->marked_count ? lag : rest - s->marked_count;
    whole = pass_bytes(m, s->marked_count + lag, s->marked_count + lag);
    if (!stopcopy_in_parts(m)) {
        return whole;
    }
    fresh = mig_written_fresh(s->written);
    parts = sum_bytes(m, &fresh) +
            (uint64_t)(s->grown_per_ms * SWITCHOVER_LAG_MS + 0.5) *
                (m->scfg.page_size / MIG_PAGE_PIECES) +
            lag * (MIG_REC_HDR_SIZE + MIG_PIECES_HDR_SIZE + PIECES_RECORD_COST);
    return parts < whole ? parts : whole;
}

void mig_save_note_size_query(struct mig *m)
{
    struct mig_save *s = m->save;
    double now = mig_now_ms(), elapsed;

    if (!s || s->phase != SAVE_PRECOPY) {
        return;
    }
    if (s->rate_ref_ms == 0) {
        s->rate_ref_ms = now;
        s->rate_ref_marked = s->marked_count;
        s->rate_ref_grown = grown(s);
        return;
    }
    elapsed = now - s->rate_ref_ms;
    if (elapsed >= RATE_WINDOW_MS) {
        s->new_pages_per_ms =
            (double)(s->marked_count - s->rate_ref_marked) / elapsed;
        s->grown_per_ms = (double)(grown(s) - s->rate_ref_grown) / elapsed;
        s->rate_ref_ms = now;
        s->rate_ref_marked = s->marked_count;
        s->rate_ref_grown = grown(s);
    }
}

/* Upper bound of the pass still to send: its pages last seen zero may be
 * written unseen, too.  Where a stop-copy sends pages in parts, the pieces
 * each page of the pass needs, if that is less. */
static uint64_t pass_left_bytes(const struct mig *m)
{
    const struct mig_save *s = m->save;
    uint64_t whole =
        pass_bytes(m, s->left, cpu_writes_unseen(m) ? s->left : s->left_nz);
    struct mig_written_sum in_pass;
    uint64_t parts;

    if (!stopcopy_in_parts(m)) {
        return whole;
    }
    in_pass = mig_written_in_pass(s->written);
    parts = sum_bytes(m, &in_pass);
    return parts < whole ? parts : whole;
}

uint64_t mig_save_stopcopy_hash_bytes(const struct mig *m)
{
    const struct mig_save *s = m->save;
    uint64_t pages, hashed;
    double hash_ms, hash_rate, stream_rate;

    if (!s || s->phase != SAVE_PRECOPY || !s->dt || !s->epoch_taken) {
        return 0;
    }
    /* One thread's rate: the stop-copy epoch hashes on the pool while the
     * device's data goes out on the same CPUs, where the pre-copy epochs
     * had them to themselves.  The epochs' rate over their threads, or
     * before one has hashed, the sample's (sample_hash_rate()). */
    hashed = m->stats.pages_hashed ? m->stats.pages_hashed : s->sample_pages;
    hash_ms = m->stats.pages_hashed ? m->stats.hash_ms * m->hash_threads
                                    : s->sample_ms;
    if (hashed == 0 || hash_ms <= 0 || s->stream_ms <= 0) {
        return 0;
    }
    pages = m->track == MIG_TRACK_HASH || cpu_writes_unseen(m)
                ? m->npages
                : dt_pages_to_hash(s->dt);
    hash_rate = (double)hashed / hash_ms;
    stream_rate = (double)s->stream_bytes / s->stream_ms;
    return (uint64_t)((double)pages / hash_rate * stream_rate);
}

uint64_t mig_save_stopcopy_left(const struct mig *m)
{
    const struct mig_save *s = m->save;
    uint64_t unread;

    if (!s) {
        return HEADER_BYTES + pass_bytes(m, m->npages, m->nonzero_count) +
               TAIL_BYTES;
    }
    unread = s->len - s->pos;
    switch (s->phase) {
    case SAVE_PRECOPY:
        return unread + (s->header_sent ? 0 : HEADER_BYTES) +
               pass_left_bytes(m) + pending_bytes(m) + TAIL_BYTES +
               mig_save_stopcopy_hash_bytes(m);
    case SAVE_STOPCOPY:
        return unread + (s->header_sent ? 0 : HEADER_BYTES) +
               pass_bytes(m, s->left, s->left_nz) + TAIL_BYTES;
    case SAVE_STATE:
        return unread + TAIL_BYTES;
    case SAVE_END:
        return unread + END_BYTES;
    default:
        return unread;
    }
}
