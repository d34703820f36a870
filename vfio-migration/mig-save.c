/*
 * mig-save.c -- the source's saving session: the rounds over VRAM (round
 * 0 sends every page, each later round the pages dirtied since they were
 * last sent, found with libdirtytrack), the stop-copy pass, the device
 * state and END, served to MIG_DATA_READ one record at a time.  The size
 * estimates behind PRECOPY_INFO and MIG_DATA_SIZE are in mig-save-size.c.
 *
 * A PAGES record of at least MIG_SPLIT_BYTES has its pages copied into
 * it (from VRAM mapped here, in pre-copy), hashed for the stream and
 * hashed for the tracker's baseline by the session's thread pool, in
 * pieces (mig_run_pieces()); the record is then sealed from those hashes
 * on the session's thread.
 */
#include "mig-save-int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "common/log.h"

/* Reads further apart than this are not one stream (QEMU paused them). */
#define STREAM_GAP_MS 50.0

/* One PAGES record's pages being copied and hashed (on the pool). */
struct save_job {
    uint32_t page_size;
    uint64_t count;
    const uint8_t *src;    /* the pages */
    uint8_t *dst;          /* where they are copied, NULL: not copied */
    uint64_t *stream_hash; /* their page hashes (seed 0) */
    uint32_t version;      /* ...as the stream's version takes them */
    struct mig_tree *tree; /* ...kept here (pages @first on), or NULL */
    uint64_t first;
    const struct dt_tracker *dt; /* NULL, or the tracker whose hashes... */
    uint64_t *track_hash;        /* ...of the pages that went go here */
};

static size_t bitmap_words(uint64_t bits)
{
    return (size_t)((bits + 63) / 64);
}

static uint32_t run_pages(const struct mig *m)
{
    return m->save->run_cap;
}

/* Whether the @len bytes at @p are all zero.  A page that is not mostly
 * has a non-zero first word: that one cache line decides it, as QEMU's
 * buffer_is_zero() looks at a few words before it scans. */
static bool page_is_zero(const uint8_t *p, uint32_t len)
{
    const uint64_t *w = (const uint64_t *)p;

    if (w[0] != 0) {
        return false;
    }
    for (uint32_t i = 0; i < len / 8; i += 64) {
        uint64_t acc = 0;
        for (uint32_t j = i; j < i + 64 && j < len / 8; j++) {
            acc |= w[j];
        }
        if (acc) {
            return false;
        }
    }
    return true;
}

static bool vram_page_zero(struct mig *m, uint64_t page)
{
    return page_is_zero(vgpu_vram(m->gpu) + page * m->scfg.page_size,
                        m->scfg.page_size);
}

/* Record page @page as seen zero or not. */
static void note_page(struct mig *m, uint64_t page, bool zero)
{
    if (mig_bit(m->nonzero, page) != zero) {
        return;
    }
    if (zero) {
        m->nonzero_count--;
    } else {
        m->nonzero_count++;
    }
    mig_bit_put(m->nonzero, page, !zero);
}

/* Classify every page (device running: only an estimate).  VRAM not
 * mapped here: the device says which pages are zero. */
static void zero_scan(struct mig *m)
{
    uint64_t *hashes = NULL, *zero = NULL;
    struct vg_error err;

    if (!vgpu_vram(m->gpu)) {
        hashes = malloc(m->npages * 8);
        zero = calloc(bitmap_words(m->npages), 8);
        if (!hashes || !zero ||
            vgpu_vram_hash(m->gpu, NULL, 0, hashes, zero, &err) < 0) {
            vg_warn("migration: zero scan: %s", zero ? err.msg : "no memory");
            free(hashes);
            free(zero);
            return; /* the estimate counts every page as non-zero */
        }
    }
    for (uint64_t p = 0; p < m->npages; p++) {
        note_page(m, p, zero ? mig_bit(zero, p) : vram_page_zero(m, p));
    }
    free(hashes);
    free(zero);
    vg_dbg("migration: zero scan: %" PRIu64 " of %" PRIu64 " pages non-zero",
           m->nonzero_count, m->npages);
}

/* ------------------------------------------------------ dirty tracking */

/* Page @p was written (by the device or, as QEMU's log says, the guest
 * CPU): the estimates count it as non-zero, and as pending if the pass
 * does not hold it already. */
static void mark_written(struct mig *m, uint64_t p)
{
    struct mig_save *s = m->save;
    bool in_pass = mig_bit(s->pass, p);

    if (!mig_bit(m->nonzero, p)) {
        note_page(m, p, false);
        s->left_nz += in_pass;
    }
    if (!in_pass && !mig_bit(s->marked, p)) {
        mig_bit_put(s->marked, p, true);
        s->marked_count++;
    }
}

/* The device wrote [@off, +@len): remember it for the estimate, and tell
 * the tracker (hash mode rehashes everything anyway). */
static void apply_device_write(void *opaque, uint64_t off, uint64_t len,
                               bool exact)
{
    struct mig *m = opaque;
    struct mig_save *s = m->save;
    uint64_t ps = m->scfg.page_size;

    if (!s || len == 0 || off >= m->scfg.vram_size) {
        return;
    }
    for (uint64_t p = off / ps; p <= (off + len - 1) / ps && p < m->npages;
         p++) {
        mark_written(m, p);
        if (s->written) { /* not the guest CPU's */
            mig_written_whole(s->written, p, mig_bit(s->pass, p));
        }
    }
    if (!s->dt || m->track == MIG_TRACK_HASH) {
        return;
    }
    exact = exact || s->sent_listed;
    if ((exact ? dt_mark_exact : dt_mark_opaque)(s->dt, off, len, NULL) < 0) {
        dt_mark_all_opaque(s->dt); /* never miss a write */
    }
}

/* The device's write observer, on whichever thread steps it: logged for
 * the module's next call (mig-wlog.h). */
static void log_device_write(void *opaque, uint64_t off, uint64_t len,
                             bool exact)
{
    struct mig *m = opaque;

    if (len > 0 && off < m->scfg.vram_size) {
        mig_wlog_add(&m->wlog, off, len, exact);
    }
}

void mig_save_fold_writes(struct mig *m)
{
    mig_wlog_drain(&m->wlog, m->save ? apply_device_write : NULL, m);
}

/*
 * A bitmap from the client's REGION_DIRTY_LOG: bit i says [@off + i *
 * @gran, +@gran) was written.  Bits past @nbits in the last word are not
 * the client's to set and are ignored; every page of the VRAM that a set
 * bit covers is marked (a granule larger than a page covers several, a
 * smaller one part of one), and nothing past the last page is touched
 * whatever @gran is.
 */
int mig_save_cpu_log(struct mig *m, uint64_t off, const uint64_t *bitmap,
                     uint64_t nbits, uint64_t gran, struct vg_error *err)
{
    struct mig_save *s = m->save;
    uint64_t ps = m->scfg.page_size;
    int ret = 0;

    if (gran == 0 || off > m->scfg.vram_size ||
        nbits > (m->scfg.vram_size - off) / gran) {
        return vg_error_set(err, ERANGE,
                            "CPU log of %" PRIu64 " pages of %" PRIu64
                            " bytes at %#" PRIx64 " leaves VRAM",
                            nbits, gran, off);
    }
    /* Without tracking or in hash mode every page is read anyway. */
    if (s->dt && m->track == MIG_TRACK_HYBRID) {
        ret = dt_merge_log(s->dt, off, bitmap, nbits, gran, err);
    }
    for (uint64_t w = 0; ret == 0 && w < (nbits + 63) / 64; w++) {
        uint64_t bits = bitmap[w];

        if (w == nbits / 64) {
            bits &= (1ull << (nbits % 64)) - 1; /* past nbits: not ours */
        }
        for (; bits; bits &= bits - 1) {
            uint64_t at =
                off + (w * 64 + (uint64_t)__builtin_ctzll(bits)) * gran;
            uint64_t last = (at + gran - 1) / ps;

            m->stats.cpu_log_pages++;
            for (uint64_t p = at / ps; p <= last && p < m->npages; p++) {
                mark_written(m, p);
                if (s->written) {
                    mig_written_cpu(s->written, p,
                                    mig_written_touched(p, ps, at, gran),
                                    mig_bit(s->pass, p));
                }
            }
        }
    }
    return ret;
}

/* Before closing an epoch: the estimate starts over, and what the
 * tracker cannot see is marked for hashing. */
static void epoch_prepare(struct mig *m)
{
    struct mig_save *s = m->save;

    memset(s->marked, 0, bitmap_words(m->npages) * 8);
    s->marked_count = 0;
    s->rate_ref_ms = mig_now_ms();
    s->rate_ref_marked = 0;
    s->rate_ref_grown = grown(s);
    if (s->dt && (m->track == MIG_TRACK_HASH || cpu_writes_unseen(m))) {
        dt_mark_all_opaque(s->dt); /* CPU writes through BAR2 are unseen */
    }
    s->writes_unseen_once |= cpu_writes_unseen(m);
}

static void epoch_done(struct mig *m, const struct dt_epoch_stats *st)
{
    if (st->pages_hashed) { /* the statistics give the hash rate */
        m->stats.pages_hashed += st->pages_hashed;
        m->stats.hash_ms += (double)st->hash_ns / 1e6;
    }
    vg_dbg("migration: epoch %" PRIu64 ": %" PRIu64 " dirty (%" PRIu64
           " exact, %" PRIu64 " hash), %" PRIu64 " hashed at %.1f GB/s",
           st->epoch, st->dirty, st->dirty_exact,
           st->dirty_hash + st->dirty_baseline, st->pages_hashed,
           st->hash_gbps);
}

/*
 * The epoch just taken at @now found s->dirty: the pages in it that the
 * epoch before did not find, over the time between the two, are a rate
 * of new pages until a window of this epoch measures it
 * (mig_save_note_size_query()), where it is above the last window's.  A
 * window counts no write to a page the pass holds, and the pass of the
 * round the epoch ends differs from the next one's, so its last window's
 * rate may be far too low for the next round; the epoch's is too low
 * where it follows a longer epoch that found the same pages (a writer
 * that sweeps VRAM in steps).  After the baseline every page found
 * counts, twice: the first round's pass held all of VRAM, and a page
 * written before it went was sent as written, so a page could be found
 * written for half the round on average.
 */
static void epoch_rate(struct mig *m, double now)
{
    struct mig_save *s = m->save;
    uint64_t words = bitmap_words(m->npages), fresh = 0;
    uint64_t more = grown(s) - s->epoch_grown;

    for (uint64_t w = 0; w < words; w++) {
        fresh +=
            (uint64_t)__builtin_popcountll(s->dirty[w] & ~s->prev_dirty[w]);
    }
    memcpy(s->prev_dirty, s->dirty, words * 8);
    if (s->epochs == 1) {
        fresh *= 2;
        more *= 2;
    }
    if (now > s->epoch_ms) {
        double rate = (double)fresh / (now - s->epoch_ms);

        if (rate > s->new_pages_per_ms) {
            s->new_pages_per_ms = rate;
        }
        rate = (double)more / (now - s->epoch_ms);
        if (rate > s->grown_per_ms) {
            s->grown_per_ms = rate;
        }
    }
}

/* Close an epoch into s->dirty: every page without tracking. */
static void take_epoch(struct mig *m)
{
    struct mig_save *s = m->save;
    double now = mig_now_ms();
    struct dt_epoch_stats st;
    struct vg_error err;

    epoch_prepare(m);
    s->pieces_epoch = false;
    if (!s->dt || dt_epoch(s->dt, s->dirty, &st, &err) < 0) {
        if (s->dt) {
            vg_warn("migration: %s; resending every page", err.msg);
        }
        mig_bitmap_fill(s->dirty, m->npages);
        return;
    }
    epoch_done(m, &st);
    if (!s->epoch_taken) {
        for (uint64_t p = 0; p < m->npages; p++) {
            note_page(m, p, dt_page_is_zero(s->dt, p));
        }
    } else {
        epoch_rate(m, now);
        s->pieces_epoch = pieces_ok(m); /* the baseline sends pages whole */
    }
    s->epoch_taken = true;
    s->epoch_ms = now;
    s->epoch_grown = grown(s);
    s->epochs++;
}

/* Add words [@w0, @w1) of the epoch's dirty set to the pass; returns the
 * pages added. */
static uint64_t pass_merge_words(struct mig *m, uint64_t w0, uint64_t w1)
{
    struct mig_save *s = m->save;
    uint64_t added = 0;

    if (s->written) {
        mig_written_merge(s->written, s->dirty, s->pass, w0, w1,
                          s->pieces_epoch);
    }
    for (uint64_t w = w0; w < w1; w++) {
        uint64_t nw = s->dirty[w] & ~s->pass[w];

        s->pass[w] |= nw;
        while (nw) {
            uint64_t p = w * 64 + (uint64_t)__builtin_ctzll(nw);

            nw &= nw - 1;
            added++;
            s->left_nz += mig_bit(m->nonzero, p);
        }
    }
    s->left += added;
    return added;
}

/* Add the epoch's dirty set to the pass; returns the pages added. */
static uint64_t pass_merge(struct mig *m)
{
    m->save->cursor = 0;
    return pass_merge_words(m, 0, bitmap_words(m->npages));
}

/* A new round: the pages dirtied since they were last sent.  Returns the
 * pages it has to send. */
static uint64_t round_begin(struct mig *m)
{
    struct mig_save *s = m->save;
    uint64_t added;

    take_epoch(m);
    added = pass_merge(m);
    if (added > 0 || s->phase == SAVE_STOPCOPY) {
        m->stats.rounds++;
    }
    s->round++;
    s->round_bytes = 0;
    return added;
}

/* ---------------------------------------------------------------- passes */

/* Next page of the pass at or after @i and below @limit (a multiple of
 * 64, or npages); @limit if none. */
static uint64_t pass_next_from(const struct mig *m, uint64_t i, uint64_t limit)
{
    const struct mig_save *s = m->save;

    while (i < limit) {
        uint64_t w = s->pass[i / 64] >> (i % 64);
        if (w) {
            uint64_t p = i + (uint64_t)__builtin_ctzll(w);
            return p < limit ? p : limit;
        }
        i = (i / 64 + 1) * 64;
    }
    return limit;
}

/* The same from the cursor on. */
static uint64_t pass_next(const struct mig *m, uint64_t limit)
{
    return pass_next_from(m, m->save->cursor, limit);
}

/* Pages below the result may be staged: all of them, except while the
 * stop-copy epoch is still hashed; its finished part joins the pass
 * here, and the epoch is closed once it is all there.  With @wait, wait
 * until it covers more than the pages merged so far. */
static uint64_t pass_limit(struct mig *m, bool wait)
{
    struct mig_save *s = m->save;
    struct dt_epoch_stats st;
    uint64_t ready;

    if (!s->epoch_open) {
        return m->npages;
    }
    ready = dt_epoch_ready(s->dt, wait ? s->merged + 1 : 0);
    pass_merge_words(m, s->merged / 64, bitmap_words(ready));
    s->merged = ready;
    if (ready == m->npages) {
        dt_epoch_end(s->dt, &st);
        epoch_done(m, &st);
        s->epoch_open = false;
    }
    return ready;
}

/* Take page @p out of the pass, now seen @zero. */
static void pass_take(struct mig *m, uint64_t p, bool zero)
{
    struct mig_save *s = m->save;

    mig_bit_put(s->pass, p, false);
    if (s->written) {
        mig_written_leave(s->written, p);
    }
    s->left--;
    if (mig_bit(m->nonzero, p)) {
        s->left_nz--;
    }
    note_page(m, p, zero);
}

/* Pages of the pass from @p on that follow each other, below @limit, at
 * most @cap (run_span: one record's worth). */
static uint64_t span_upto(const struct mig *m, uint64_t p, uint64_t limit,
                          uint32_t cap)
{
    uint64_t n = 0;

    while (n < cap && p + n < limit && mig_bit(m->save->pass, p + n)) {
        n++;
    }
    return n;
}

static uint64_t run_span(const struct mig *m, uint64_t p, uint64_t limit)
{
    return span_upto(m, p, limit, run_pages(m));
}

/* Stream bytes a page takes in a PAGES record, and in a PAGES_LISTED
 * record (which version 3 streams may have). */
static uint32_t page_bytes(const struct mig *m)
{
    return m->scfg.page_size + (m->stream_version >= 3 ? 8 : 0);
}

/* Pages a PAGES record staged in @room bytes of a read's buffer holds at
 * most. */
static uint32_t run_cap_for(const struct mig *m, uint32_t room)
{
    uint32_t full = m->run_max / m->scfg.page_size;
    uint32_t fit = (room - MIG_RUN_HEADERS_SIZE) / page_bytes(m);

    return fit < full ? fit : full;
}

/* Any record fits whole in @room bytes (a PAGES record holding no more
 * pages than fit). */
static bool record_fits(const struct mig *m, uint32_t room)
{
    return room >= MIG_RUN_HEADERS_SIZE + page_bytes(m) &&
           room >= MIG_REC_HDR_SIZE + MIG_STATE_MAX;
}

/* Wait for a read ahead that the next record does not use. */
static void settle_ahead(struct mig *m)
{
    struct mig_save *s = m->save;

    if (s->ahead) {
        s->ahead = false;
        if (vgpu_vram_settle(m->gpu, &s->error) < 0) {
            vg_error_prefix(&s->error, "migration: reading VRAM ahead");
            s->failed = true;
        }
    }
}

/* What a read of VRAM not mapped here asks the GPU to hash: the stream's
 * page hashes (seed 0) and, in pre-copy with a tracker, its baselines. */
static void read_hashes(const struct mig *m, struct vgpu_copy_hashes *h)
{
    struct mig_save *s = m->save;
    bool track = s->dt && s->phase == SAVE_PRECOPY;

    *h = (struct vgpu_copy_hashes){
        .page_size = m->scfg.page_size,
        .nseeds = track ? 2 : 1,
        .seeds = {0, track ? dt_seed(s->dt) : 0},
        .hashes = {s->stream_hash, s->track_hash},
        .zero = s->run_zero,
    };
}

/*
 * The run at @next comes after the @n pages just read into a PAGES record
 * (@zero false) staged in the read's buffer: where the next record will
 * fit there too, start copying its pages out of VRAM to where its page
 * data will be, so the copy overlaps hashing this record.  Also the
 * backend's own read-ahead (a staged copy where the buffer is not the
 * GPU's to reach).
 */
static void read_ahead(struct mig *m, uint64_t next, uint64_t limit, uint64_t n,
                       bool zero)
{
    struct mig_save *s = m->save;
    uint32_t ps = m->scfg.page_size;
    uint64_t len = MIG_RUN_HEADERS_SIZE + n * ps;

    if (!zero && s->room > len && record_fits(m, s->room - (uint32_t)len)) {
        uint32_t cap = run_cap_for(m, s->room - (uint32_t)len);
        uint8_t *into = s->rec + len + MIG_RUN_HEADERS_SIZE;
        uint64_t bytes = span_upto(m, next, limit, cap) * ps;
        struct vgpu_copy_hashes h;

        if (s->gpu_hashes) {
            read_hashes(m, &h);
            vgpu_vram_read_ahead_hashed(m->gpu, next * ps, into, bytes, &h);
        } else {
            vgpu_vram_read_ahead(m->gpu, next * ps, into, bytes);
        }
        s->ahead = true;
    }
    vgpu_vram_prefetch(m->gpu, next * ps, run_span(m, next, limit) * ps);
}

/* Page @i of the run read last is all zero. */
static bool run_page_zero(const struct mig *m, const uint8_t *data, uint64_t i)
{
    const struct mig_save *s = m->save;
    uint32_t ps = m->scfg.page_size;

    if (s->run_hashed) {
        return (s->run_zero[i / 64] >> (i % 64)) & 1;
    }
    return page_is_zero(data + i * ps, ps);
}

/* Read the span of @n pages at @p into @data: hashed by the GPU where it
 * can (s->run_hashed then set). */
static int device_read(struct mig *m, uint64_t p, uint64_t n, uint8_t *data)
{
    struct mig_save *s = m->save;
    uint32_t ps = m->scfg.page_size;
    struct vgpu_copy_hashes h;
    int ret;

    s->run_hashed = false;
    if (!s->gpu_hashes) {
        return vgpu_vram_read(m->gpu, p * ps, data, n * ps, &s->error);
    }
    read_hashes(m, &h);
    ret = vgpu_vram_read_hashed(m->gpu, p * ps, data, n * ps, &h, &s->error);
    if (ret == 0) {
        s->run_hashed = true;
        m->stats.gpu_hashed_bytes += n * ps;
    }
    return ret;
}

/*
 * VRAM not mapped here (a GPU): copy the run at @p into the record's data
 * area (from the read-ahead copy started by the previous call), ask for
 * the next run to be copied while this one is sent, and classify pages
 * (on the copy, or from the GPU's zero bits).  Returns the pages of the
 * run that are all zero (@zero) or all not, or 0 with s->error set.
 */
static uint64_t device_run(struct mig *m, uint64_t p, uint64_t limit,
                           bool *zero)
{
    struct mig_save *s = m->save;
    uint8_t *data = mig_enc_pages_data(s->rec);
    uint64_t span = run_span(m, p, limit), n = 1, next;

    double t0 = mig_now_ms();
    int ret;

    s->ahead = false; /* the read settles it */
    ret = device_read(m, p, span, data);
    m->stats.data_copy_ms += mig_now_ms() - t0;
    if (ret < 0) {
        vg_error_prefix(&s->error,
                        "migration: reading pages %" PRIu64 "+%" PRIu64
                        " from VRAM",
                        p, span);
        return 0;
    }
    *zero = run_page_zero(m, data, 0);
    while (n < span && run_page_zero(m, data, n) == *zero) {
        n++;
    }
    s->cursor = p + n;
    next = pass_next(m, limit);
    if (next < limit) {
        read_ahead(m, next, limit, n, *zero);
    }
    return n;
}

/* Pool job: piece @piece of the record's pages. */
static void save_piece(void *arg, uint64_t piece)
{
    struct save_job *job = arg;
    uint64_t i, end = mig_piece(piece, job->page_size, job->count, &i);

    for (; i < end; i++) {
        size_t off = i * job->page_size;
        const uint8_t *page = job->src + off;

        if (job->dst) {
            memcpy(job->dst + off, page, job->page_size);
            page = job->dst + off; /* what goes is what is hashed */
        }
        if (job->stream_hash && job->tree) {
            job->stream_hash[i] =
                mig_tree_hash(job->tree, job->first + i, page);
        } else if (job->stream_hash) {
            job->stream_hash[i] =
                mig_stream_page_hash(job->version, page, job->page_size, NULL);
        }
        if (job->track_hash) {
            job->track_hash[i] = dt_page_hash(job->dt, page);
        }
    }
}

/* Copy the @n pages at @src (pages @p on) to @dst (unless NULL) and hash
 * them into s->stream_hash (version 2 streams; keeping their pieces'
 * hashes in s->tree) and, if @track, s->track_hash: on the pool where the
 * record is large enough to pay off. */
static void save_pages(struct mig *m, uint64_t p, const uint8_t *src,
                       uint8_t *dst, uint64_t n, bool track)
{
    struct mig_save *s = m->save;
    uint32_t ps = m->scfg.page_size;
    struct save_job job = {
        .page_size = ps,
        .count = n,
        .src = src,
        .dst = dst,
        .stream_hash = m->stream_version >= 2 ? s->stream_hash : NULL,
        .version = m->hash_version,
        .tree = s->tree,
        .first = p,
        .dt = s->dt,
        .track_hash = track ? s->track_hash : NULL,
    };

    double t0 = mig_now_ms();

    mig_run_pieces(s->pool, ps, n, save_piece, &job);
    m->stats.data_hash_ms += mig_now_ms() - t0;
}

/* Whether pre-copy pages go from VRAM, as PAGES_LISTED records: in a
 * version 3 stream, to a read that lists pieces, where every write is
 * seen.  A page written while it goes out is then in the next epoch's
 * dirty set, whatever its hash says: a device write is exact (or made so,
 * sent_listed), a guest CPU write logged. */
static bool listed_ok(const struct mig *m)
{
    const struct mig_save *s = m->save;

    return m->stream_version >= 3 && s->phase == SAVE_PRECOPY &&
           s->pieces_read && vgpu_vram(m->gpu) && writes_all_seen(m);
}

/* Pages [@p, +@n) go now, from VRAM in pre-copy (@by_ref) or not. */
static void note_by_ref(struct mig_save *s, uint64_t p, uint64_t n, bool by_ref)
{
    if (s->written) {
        mig_written_sent(s->written, p, n, by_ref);
    }
}

/* Encode the run [@p, +@n) of @zero pages, or with their content at @data,
 * and baseline what went out. */
static bool stage_encode(struct mig *m, uint64_t p, uint64_t n, bool zero,
                         const uint8_t *data)
{
    struct mig_save *s = m->save;
    bool track = s->dt && s->phase == SAVE_PRECOPY;
    uint8_t *into = mig_enc_pages_data(s->rec);

    /* No epoch follows stop-copy: only pre-copy needs the baselines. */
    note_by_ref(s, p, n, false); /* unless listed_ok(), below */
    if (zero) {
        s->len = mig_enc_zeros(s->enc, p, n, s->rec);
        if (s->dt && s->phase == SAVE_PRECOPY) {
            dt_note_sent_zero(s->dt, p, n);
        }
        return true;
    }
    if (s->phase == SAVE_STOPCOPY && vgpu_vram(m->gpu)) {
        /* @data is mapped VRAM, quiesced: it stays as hashed until the
         * reads copy it out.  A version 3 stream lists the hashes of
         * every record that goes from VRAM, so that its length does not
         * depend on how much of it went in pre-copy. */
        save_pages(m, p, data, NULL, n, false);
        s->ref_at =
            m->stream_version >= 3
                ? mig_enc_pages_listed_ref(s->enc, p, (uint32_t)n,
                                           s->stream_hash, false, s->rec)
                : mig_enc_pages_ref(s->enc, p, (uint32_t)n, data,
                                    s->stream_hash, s->rec);
        s->ref = data;
        s->len = s->ref_at + n * m->scfg.page_size;
    } else if (listed_ok(m)) {
        /* What the destination checks is what was hashed here: a page
         * written before it went out is stale there until sent again.
         * Every write is exact: the tracker needs no hash of it. */
        save_pages(m, p, data, NULL, n, false);
        s->ref_at = mig_enc_pages_listed_ref(s->enc, p, (uint32_t)n,
                                             s->stream_hash, true, s->rec);
        s->ref = data;
        s->len = s->ref_at + n * m->scfg.page_size;
        s->ref_listed = s->sent_listed = true;
        dt_note_sent_unhashed(s->dt, p, n);
        note_by_ref(s, p, n, true);
        track = false;
    } else {
        if (!s->run_hashed) {
            save_pages(m, p, data, data == into ? NULL : into, n, track);
        }
        s->len = mig_enc_pages_hashed(s->enc, p, (uint32_t)n, s->stream_hash,
                                      s->rec);
    }
    if (track) {
        /* Baseline what actually went: the copy in the record. */
        dt_note_sent_hashes(s->dt, p, n, s->track_hash);
    }
    if (s->phase == SAVE_STOPCOPY) {
        m->stats.final_dirty_bytes += n * m->scfg.page_size;
    }
    return true;
}

/* Stage_run for VRAM not mapped here. */
static bool stage_device_run(struct mig *m, uint64_t p, uint64_t limit)
{
    bool zero;
    uint64_t n = device_run(m, p, limit, &zero);

    if (n == 0) {
        m->save->failed = true;
        return false;
    }
    for (uint64_t i = 0; i < n; i++) {
        pass_take(m, p + i, zero);
    }
    if (!zero) {
        m->save->read_page_bytes += n * m->scfg.page_size;
    }
    return stage_encode(m, p, n, zero, mig_enc_pages_data(m->save->rec));
}

/* Whether stop-copy sends only some pieces of page @p of the pass. */
static bool page_in_pieces(const struct mig *m, uint64_t p)
{
    const struct mig_save *s = m->save;

    return s->written && s->phase == SAVE_STOPCOPY &&
           mig_written_pass(s->written, p) != MIG_WRITTEN_WHOLE;
}

/* The pages of the pass from @p (one that goes as pieces) on, below
 * @limit, that go as pieces one after the other, and where each one's
 * record goes, as many as fit in @room bytes (the first always does,
 * record_fits()), at most PIECES_BATCH. */
static void pieces_gather(struct mig *m, uint64_t p, uint64_t limit,
                          uint32_t room)
{
    struct mig_save *s = m->save;
    uint32_t piece = m->scfg.page_size / MIG_PAGE_PIECES, at = 0;
    unsigned n = 0;

    while (n < PIECES_BATCH && p < limit && mig_bit(s->pass, p) &&
           page_in_pieces(m, p)) {
        uint64_t mask = mig_written_pass(s->written, p);
        uint32_t size = MIG_REC_HDR_SIZE + MIG_PIECES_HDR_SIZE +
                        (uint32_t)__builtin_popcountll(mask) * piece;

        if (n > 0 && size > room - at) {
            break;
        }
        s->pieces_batch.page[n] = p;
        s->pieces_batch.mask[n] = mask;
        s->pieces_batch.at[n++] = at;
        at += size;
        p = p + 1 < limit ? pass_next_from(m, p + 1, limit) : limit;
    }
    s->pieces_batch.at[n] = at;
    s->pieces_batch.n = n;
}

/* Pool job: the records of pieces_batch's @chunk, each with its page's
 * hash where the page's last send went from VRAM (it may be stale at the
 * destination), from its pieces' hashes where they are kept (those of
 * the record's pieces from the record, version 6). */
static void pieces_encode(void *arg, uint64_t chunk)
{
    struct mig *m = arg;
    struct mig_save *s = m->save;
    uint32_t ps = m->scfg.page_size;
    uint64_t i, end = mig_piece(chunk, ps, s->pieces_batch.n, &i);

    for (; i < end; i++) {
        uint64_t p = s->pieces_batch.page[i], mask = s->pieces_batch.mask[i];
        uint64_t piece_hash[MIG_PAGE_PIECES], hash = 0;
        uint8_t *rec = s->rec + s->pieces_batch.at[i];
        const uint8_t *page = vgpu_vram(m->gpu) + p * ps;
        bool hashed = mig_written_by_ref(s->written, p);
        bool have = m->hash_version >= MIG_PIECE_HASH_VERSION;

        mig_enc_pieces_fill(s->enc, p, mask, page, piece_hash, rec);
        if (hashed) {
            hash = s->tree ? mig_tree_rehash(s->tree, p, page, mask,
                                             have ? piece_hash : NULL)
                           : mig_page_hash(m, p);
        }
        mig_enc_pieces_seal(s->enc, rec, hashed, hash, piece_hash);
    }
}

/* Stage the PAGE_PIECES records of page @p of the pass and of those that
 * follow it in the pass as pieces, below @limit, as many as fit where the
 * record goes: the pieces of each written since it went, from VRAM
 * (quiesced), copied into the record, on the pool. */
static bool stage_pieces(struct mig *m, uint64_t p, uint64_t limit)
{
    struct mig_save *s = m->save;
    uint32_t piece = m->scfg.page_size / MIG_PAGE_PIECES;

    pieces_gather(m, p, limit, s->room ? s->room : MIG_REC_MAX);
    mig_run_pieces(s->pool, m->scfg.page_size, s->pieces_batch.n, pieces_encode,
                   m);
    mig_enc_add_records(s->enc, s->rec, s->pieces_batch.at[s->pieces_batch.n],
                        s->pieces_batch.n);
    for (unsigned i = 0; i < s->pieces_batch.n; i++) {
        uint64_t bytes =
            (uint64_t)__builtin_popcountll(s->pieces_batch.mask[i]) * piece;

        pass_take(m, s->pieces_batch.page[i], false);
        m->stats.final_dirty_bytes += bytes;
        m->stats.pieces_pages++;
        m->stats.pieces_bytes += bytes;
    }
    s->cursor = s->pieces_batch.page[s->pieces_batch.n - 1] + 1;
    s->len = s->pieces_batch.at[s->pieces_batch.n];
    return true;
}

/* Stage the next run of the pass; false when the pass is over (or failed:
 * s->error says why). */
static bool stage_run(struct mig *m)
{
    struct mig_save *s = m->save;
    uint64_t limit = pass_limit(m, false), p = pass_next(m, limit), n = 1;
    bool zero;

    while (p == limit && s->epoch_open) {
        limit = pass_limit(m, true);
        p = pass_next(m, limit);
    }
    if (p == limit) {
        settle_ahead(m);
        return false;
    }
    if (!vgpu_vram(m->gpu)) {
        return stage_device_run(m, p, limit);
    }
    if (page_in_pieces(m, p)) {
        return stage_pieces(m, p, limit);
    }
    zero = vram_page_zero(m, p);
    pass_take(m, p, zero);
    while (n < (zero ? MIG_ZEROS_MAX_PAGES : run_pages(m)) && p + n < limit &&
           mig_bit(s->pass, p + n) && !page_in_pieces(m, p + n) &&
           vram_page_zero(m, p + n) == zero) {
        pass_take(m, p + n, zero);
        n++;
    }
    s->cursor = p + n;
    return stage_encode(m, p, n, zero,
                        vgpu_vram(m->gpu) + p * m->scfg.page_size);
}

static void stage_state(struct mig *m)
{
    struct mig_save *s = m->save;
    uint8_t blob[VGPU_STATE_SIZE];
    int n = vgpu_state_save(m->gpu, blob, sizeof(blob), NULL);

    s->len = mig_enc_state(s->enc, blob, (uint32_t)n, s->rec);
}

/* Stage the next record; false if there is none now. */
static bool stage_next(struct mig *m)
{
    struct mig_save *s = m->save;

    s->pos = 0;
    s->len = 0;
    s->ref = NULL;
    s->ref_listed = false;
    if (s->phase != SAVE_PRECOPY && s->phase != SAVE_STOPCOPY) {
        settle_ahead(m); /* no run reads what is ahead */
    }
    if (s->failed) {
        return false;
    }
    if (s->phase == SAVE_PRECOPY && s->left == 0) {
        return false; /* nothing in PRE_COPY now: not even the header */
    }
    if (!s->header_sent) {
        s->header_sent = true;
        s->len = mig_enc_header(s->enc, &m->scfg, s->rec);
        return true;
    }
    switch (s->phase) {
    case SAVE_PRECOPY:
        return stage_run(m);
    case SAVE_STOPCOPY:
        if (stage_run(m)) {
            return true;
        }
        if (s->failed) {
            return false;
        }
        vg_dbg("migration: stop-copy pass sent (stream at %" PRIu64 " bytes)",
               mig_enc_bytes(s->enc));
        s->phase = SAVE_STATE;
        return stage_next(m);
    case SAVE_POSTCOPY:
        s->len = mig_enc_postcopy(s->enc, &s->pc_info, s->rec);
        s->phase = SAVE_STATE;
        return true;
    case SAVE_STATE:
        stage_state(m);
        s->phase = SAVE_END;
        return true;
    case SAVE_END:
        s->len = mig_enc_end(s->enc, s->rec);
        s->phase = SAVE_DONE;
        return true;
    default: /* SAVE_DONE */
        return false;
    }
}

static void inject_fault(struct mig *m, uint8_t *out, uint32_t n)
{
    struct mig_save *s = m->save;

    if (s->fault_armed && s->fault_offset >= s->sent &&
        s->fault_offset - s->sent < n) {
        out[s->fault_offset - s->sent] ^= 0xff;
        s->fault_armed = false;
        vg_warn("fault injection: flipped stream byte at offset %" PRIu64,
                s->fault_offset);
    }
}

static void account(struct mig *m, uint32_t n)
{
    struct mig_save *s = m->save;

    s->sent += n;
    s->round_bytes += n;
    m->stats.bytes_sent += n;
    if (s->phase == SAVE_PRECOPY) {
        m->stats.precopy_bytes += n;
    } else {
        m->stats.stopcopy_bytes += n;
    }
    if (s->phase == SAVE_DONE && s->pos == s->len && !s->end_timed) {
        s->end_timed = true;
        m->stats.device_stopcopy_ms = mig_now_ms() - s->stopcopy_t0;
        vg_info("migration: stream of %" PRIu64 " bytes read; device "
                "stop-copy %.3f ms, %" PRIu64
                " page bytes, estimate was %" PRIu64 " of %" PRIu64 " bytes",
                s->sent, m->stats.device_stopcopy_ms,
                m->stats.final_dirty_bytes, m->stats.stopcopy_estimate_bytes,
                m->stats.stopcopy_bytes);
    }
}

/* A pre-copy read returned @n bytes: time the stream QEMU reads at the
 * pace of its link (gaps between rounds left out). */
static void time_stream(struct mig_save *s, uint32_t n)
{
    double now = mig_now_ms();

    if (s->last_read_ms > 0 && now - s->last_read_ms < STREAM_GAP_MS) {
        s->stream_ms += now - s->last_read_ms;
        s->stream_bytes += n;
    }
    s->last_read_ms = now;
}

/* The staged bytes from s->pos on that lie together, at most @max: their
 * count, and where they are in *@from. */
static uint32_t staged_piece(const struct mig_save *s, uint32_t max,
                             const uint8_t **from)
{
    size_t end = s->ref && s->pos < s->ref_at ? s->ref_at : s->len;

    *from = s->ref && s->pos >= s->ref_at ? s->ref + (s->pos - s->ref_at)
                                          : s->rec + s->pos;
    return end - s->pos < max ? (uint32_t)(end - s->pos) : max;
}

/* Stage the next record into @out where any record fits in its @room
 * bytes (a PAGES record then holds no more pages than fit), so that the
 * read takes it without copying it; else into s->buf.  False if there is
 * no record now. */
static bool stage_into(struct mig *m, uint8_t *out, uint32_t room)
{
    struct mig_save *s = m->save;

    s->rec = s->buf;
    s->run_cap = m->run_max / m->scfg.page_size;
    s->room = 0;
    if (record_fits(m, room)) {
        s->rec = out;
        s->run_cap = run_cap_for(m, room);
        s->room = room;
    }
    return stage_next(m);
}

/* How this read's pages are hashed: on the GPU or by the threads. */
static void hashway_choose(struct mig *m)
{
    struct mig_save *s = m->save;

    s->read_page_bytes = 0;
    s->gpu_hashes =
        s->can_gpu_hash && (m->gpu_hash != MIG_GPU_HASH_AUTO ||
                            mig_hashway_choose(&s->hashway) == MIG_WAY_GPU);
}

/* What the read that took @ms taught about its way. */
static void hashway_learn(struct mig *m, double ms)
{
    struct mig_save *s = m->save;

    if (s->can_gpu_hash && m->gpu_hash == MIG_GPU_HASH_AUTO) {
        mig_hashway_learn(&s->hashway,
                          s->gpu_hashes ? MIG_WAY_GPU : MIG_WAY_THREADS, ms,
                          s->read_page_bytes);
    }
}

/* Whether the next @n staged bytes may stay in VRAM rather than go into
 * the read's buffer (mig_read_pieces): page data of a record by reference
 * (see staged_piece). */
static bool piece_stays(const struct mig *m, const struct mig_pieces *pieces,
                        uint32_t n)
{
    const struct mig_save *s = m->save;

    return pieces && s->ref && s->pos >= s->ref_at && n >= MIG_PIECE_VRAM_MIN &&
           !s->fault_armed;
}

/* Append @n bytes at @offset (of VRAM, or of the read's buffer) to
 * @pieces, extending the last piece where they follow it. */
static void piece_add(struct mig_pieces *pieces, bool in_vram, uint64_t offset,
                      uint32_t n)
{
    struct mig_piece *last =
        pieces->count ? &pieces->piece[pieces->count - 1] : NULL;

    if (last && last->in_vram == in_vram &&
        last->offset + last->len == offset) {
        last->len += n;
        return;
    }
    pieces->piece[pieces->count++] =
        (struct mig_piece){.offset = offset, .len = n, .in_vram = in_vram};
}

/* Take @n staged bytes at @from into the read: into @out, or as a piece of
 * VRAM; returns the bytes of @out used. */
static uint32_t take_piece(struct mig *m, struct mig_pieces *pieces,
                           const uint8_t *from, uint32_t n, uint8_t *out,
                           uint64_t out_offset)
{
    if (piece_stays(m, pieces, n)) {
        piece_add(pieces, true, (uint64_t)(from - vgpu_vram(m->gpu)), n);
        if (m->save->ref_listed) {
            m->stats.listed_bytes += n;
        } else {
            m->stats.vram_piece_bytes += n;
        }
        return 0;
    }
    if (from != out) {
        memcpy(out, from, n);
    }
    inject_fault(m, out, n);
    if (pieces) {
        piece_add(pieces, false, out_offset, n);
    }
    return n;
}

/* Room for the pieces of one more record: its headers and its pages. */
static bool pieces_room(const struct mig_pieces *pieces)
{
    return !pieces || pieces->count + 2 <= pieces->max;
}

int mig_save_read(struct mig *m, uint8_t *buf, uint32_t size, uint32_t *got,
                  struct mig_pieces *pieces, struct vg_error *err)
{
    struct mig_save *s = m->save;
    double t0 = mig_now_ms();
    uint32_t used = 0; /* bytes of @buf filled */

    *got = 0;
    s->pieces_read = pieces != NULL;
    hashway_choose(m);
    while (*got < size) {
        const uint8_t *from;
        uint32_t n;

        /* A read ends before a record it cannot hold whole: the
         * destination then reads its page data in place. */
        if (s->pos == s->len && ((*got > 0 && (!record_fits(m, size - *got) ||
                                               !pieces_room(pieces))) ||
                                 !stage_into(m, buf + used, size - *got))) {
            break;
        }
        n = staged_piece(s, size - *got, &from);
        used += take_piece(m, pieces, from, n, buf + used, used);
        s->pos += n;
        *got += n;
        account(m, n);
    }
    settle_ahead(m); /* the buffer goes back to QEMU */
    hashway_learn(m, mig_now_ms() - t0);
    if (*got > 0 && s->phase == SAVE_PRECOPY) {
        time_stream(s, *got);
    }
    if (s->failed && *got == 0) {
        *err = s->error;
        return -EIO;
    }
    return 0;
}

uint32_t mig_save_pass(const struct mig *m)
{
    return listed_ok(m) ? (uint32_t)m->save->round : 0;
}

bool mig_save_ended(const struct mig *m)
{
    const struct mig_save *s = m->save;

    return s && s->phase == SAVE_DONE && s->pos == s->len;
}

/* The current round is drained: in iterative mode, maybe the next one. */
static void precopy_next_round(struct mig *m)
{
    struct mig_save *s = m->save;
    double now = mig_now_ms();
    uint64_t drained = s->round_bytes, added;

    if (!mig_rounds_want_epoch(&m->rounds, now)) {
        return;
    }
    added = round_begin(m);
    pthread_mutex_lock(&m->step_lock); /* the device may be stepping */
    mig_rounds_epoch(&m->rounds, added * m->scfg.page_size, drained,
                     mig_now_ms());
    pthread_mutex_unlock(&m->step_lock);
    if (mig_rounds_throttle_percent(&m->rounds) > m->stats.throttle_percent) {
        m->stats.throttle_percent = mig_rounds_throttle_percent(&m->rounds);
        vg_info("migration: auto-converge: GPU throttled %u%%",
                m->stats.throttle_percent);
        mig_stats_flush(m, NULL); /* so that it can be watched */
    }
    m->stats.throttle_rounds = m->rounds.throttle_rounds;
}

void mig_save_precopy_info(struct mig *m, uint64_t *initial, uint64_t *dirty)
{
    struct mig_save *s = m->save;
    uint64_t left;

    if (s->phase == SAVE_PRECOPY && mig_save_round_left(m) == 0 &&
        s->round > 0) {
        precopy_next_round(m);
    }
    left = s->phase == SAVE_PRECOPY ? mig_save_round_left(m) : 0;
    *initial = s->round <= 1 ? left : 0;
    *dirty = s->round > 1 ? left : 0;
}

/* SplitMix64: the test-only fault offset from the seed. */
static uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void arm_fault(struct mig *m)
{
    struct mig_save *s = m->save;
    uint64_t span =
        HEADER_BYTES + pass_bytes(m, m->npages, m->nonzero_count) + TAIL_BYTES;

    if (!m->fault.corrupt ||
        (m->fault.session && m->fault.session != m->saves_started)) {
        return;
    }
    s->fault_armed = true;
    s->fault_offset =
        m->fault.random
            ? splitmix64(m->fault.seed + m->stats.migrations_started) % span
            : m->fault.offset;
    vg_warn("fault injection: will flip stream byte at offset %" PRIu64
            "%s (seed %" PRIu64 ") of saving session %" PRIu64,
            s->fault_offset, m->fault.random ? ", random" : "", m->fault.seed,
            m->saves_started);
}

/* dt_hash_fn for VRAM not mapped here: the backend hashes on the GPU. */
static int device_hash(void *opaque, const uint64_t *select, uint64_t seed,
                       uint64_t *hashes, uint64_t *zero, struct vg_error *err)
{
    return vgpu_vram_hash(opaque, select, seed, hashes, zero, err);
}

/* The tracker of the session (none with --dirty-track=none). */
static int tracker_new(struct mig *m, struct vg_error *err)
{
    struct dt_config dc = {
        .base = vgpu_vram(m->gpu),
        .hash = vgpu_vram(m->gpu) ? NULL : device_hash,
        .hash_opaque = m->gpu,
        .size = m->scfg.vram_size,
        .page_size = m->scfg.page_size,
        .threads = m->hash_threads,
        .seed = 0, /* drawn from getrandom(); never sent */
        /* Mapped here, every page is read to be sent in round 0 anyway:
         * hashing it all first would be one more pass over VRAM.  On a
         * GPU the device hashes it in a few ms and says which pages are
         * zero, which the copies would not know until they are made.  In
         * hash mode every epoch hashes all of VRAM, and the first one
         * gives the stop-copy estimate its rate before the others. */
        .baseline_from_sends =
            vgpu_vram(m->gpu) != NULL && m->track == MIG_TRACK_HYBRID,
    };

    if (m->track == MIG_TRACK_NONE) {
        return 0;
    }
    return dt_new(&dc, &m->save->dt, err);
}

/* The version this session writes: the server's, but where VRAM is not
 * mapped here the GPU hashes pages whole, not as trees (version 5). */
static uint32_t session_version(const struct mig *m)
{
    if (m->stream_version >= MIG_TREE_HASH_VERSION && !vgpu_vram(m->gpu)) {
        vg_info("migration: VRAM on the GPU, writing stream version %u",
                MIG_TREE_HASH_VERSION - 1);
        return MIG_TREE_HASH_VERSION - 1;
    }
    return m->stream_version;
}

static int save_alloc(struct mig *m, struct vg_error *err)
{
    struct mig_save *s = calloc(1, sizeof(*s));
    size_t bytes = bitmap_words(m->npages) * 8;
    int ret;

    if (!s) {
        return vg_error_set(err, ENOMEM, "saving session");
    }
    m->save = s;
    m->hash_version = session_version(m);
    s->buf = malloc(MIG_REC_MAX);
    s->rec = s->buf;
    s->run_cap = m->run_max / m->scfg.page_size;
    s->can_gpu_hash =
        m->gpu_hash != MIG_GPU_HASH_NONE && vgpu_copies_hash(m->gpu);
    s->pass = calloc(1, bytes);
    s->dirty = calloc(1, bytes);
    s->marked = calloc(1, bytes);
    s->prev_dirty = calloc(1, bytes);
    if (m->stream_version >= 4 && m->track == MIG_TRACK_HYBRID &&
        vgpu_vram(m->gpu)) {
        s->written = mig_written_new(m->npages);
        s->tree = m->hash_version >= MIG_TREE_HASH_VERSION ? mig_session_tree(m)
                                                           : NULL;
        if (!s->written ||
            (m->hash_version >= MIG_TREE_HASH_VERSION && !s->tree)) {
            mig_save_close(m);
            return vg_error_set(err, ENOMEM, "saving session's pieces");
        }
    }
    if (!s->buf || !s->pass || !s->dirty || !s->marked || !s->prev_dirty) {
        mig_save_close(m);
        return vg_error_set(err, ENOMEM, "saving session buffers");
    }
    ret = mig_enc_new(m->hash_version, m->scfg.page_size, m->run_max, &s->enc,
                      err);
    if (ret == 0) {
        m->stats.stream_version = m->hash_version;
        m->stats.stream_run_max = m->run_max;
        ret = dt_pool_new(m->hash_threads, &s->pool, err);
    }
    if (ret == 0) {
        ret = tracker_new(m, err);
    }
    if (ret < 0) {
        mig_save_close(m);
    }
    return ret;
}

#define SAMPLE_PAGES 64u

/*
 * Time the hashing of SAMPLE_PAGES pages spread over VRAM where it is
 * mapped here (a fraction of a millisecond): without a first epoch over
 * all of VRAM, no epoch may have hashed before stop-copy, whose estimate
 * still needs a rate for hashing cold VRAM in place.
 */
static void sample_hash_rate(struct mig *m)
{
    struct mig_save *s = m->save;
    uint32_t ps = m->scfg.page_size;
    uint64_t n = m->npages < SAMPLE_PAGES ? m->npages : SAMPLE_PAGES;
    double t0 = mig_now_ms();

    for (uint64_t i = 0; i < n; i++) {
        vg_hash(vgpu_vram(m->gpu) + i * (m->npages / n) * ps, ps, i);
    }
    s->sample_ms = mig_now_ms() - t0;
    s->sample_pages = n;
}

int mig_save_open(struct mig *m, bool precopy, struct vg_error *err)
{
    int ret = save_alloc(m, err);

    if (ret < 0) {
        return ret;
    }
    m->saves_started++;
    pthread_mutex_lock(&m->step_lock);
    mig_rounds_init(&m->rounds, m->precopy, m->track != MIG_TRACK_NONE,
                    mig_now_ms());
    pthread_mutex_unlock(&m->step_lock);
    if (!m->save->dt || m->precopy == MIG_PRECOPY_NONE) {
        zero_scan(m); /* for the estimates until an epoch knows better */
    }
    if (m->save->dt && vgpu_vram(m->gpu)) {
        sample_hash_rate(m);
    }
    mig_wlog_drain(&m->wlog, NULL, NULL);
    vgpu_set_write_observer(m->gpu, log_device_write, m);
    if (precopy && m->precopy != MIG_PRECOPY_NONE) {
        round_begin(m); /* round 0: every page */
    }
    arm_fault(m);
    if (!precopy) {
        mig_save_stopcopy(m);
    }
    return 0;
}

/* The final epoch on the pool's threads: the pages left in the pass go
 * out while the opaque write-set is hashed (pass_limit). */
static bool stopcopy_epoch_begin(struct mig *m)
{
    struct mig_save *s = m->save;
    struct vg_error err;

    if (!s->dt || !s->epoch_taken) {
        return false; /* no baseline yet: the first epoch reads everything */
    }
    epoch_prepare(m);
    if (!vgpu_vram(m->gpu)) {
        /* A GPU hashes its VRAM far faster than it can be sent: of the
         * pages written, send those whose contents changed. */
        dt_verify_exact(s->dt);
    }
    if (dt_epoch_begin(s->dt, s->dirty, &err) < 0) {
        vg_warn("migration: %s; hashing before sending", err.msg);
        return false;
    }
    s->epoch_open = true;
    s->pieces_epoch = pieces_ok(m);
    s->merged = 0;
    s->cursor = 0;
    m->stats.rounds++;
    s->round++;
    s->round_bytes = 0;
    return true;
}

int mig_save_postcopy(struct mig *m, struct vg_error *err)
{
    if (m->stream_version < 2) {
        return vg_error_set(err, ENOTSUP,
                            "post-copy needs stream version 2 (this source "
                            "writes version %u)",
                            m->stream_version);
    }
    m->save->postcopy = true;
    vg_info("migration: the stop-copy will be a post-copy switchover");
    return 0;
}

/* A post-copy switchover: the pages still to send go to the page server,
 * not into the stream.  They are the pass and, where every write was
 * seen, the pages written since the last epoch; otherwise a last epoch
 * finds them (hashing, as a stop-copy would). */
static void postcopy_switchover(struct mig *m)
{
    struct mig_save *s = m->save;
    uint64_t words = bitmap_words(m->npages);
    struct vg_error err = {0};

    if (writes_all_seen(m)) {
        for (uint64_t w = 0; w < words; w++) {
            s->pass[w] |= s->marked[w];
        }
    } else {
        round_begin(m);
    }
    if (mig_postcopy_serve(m, s->pass, &s->pc_info, &err) < 0) {
        s->failed = true;
        s->error = err;
        vg_err("migration: %s", err.msg);
        return;
    }
    memset(s->pass, 0, words * 8);
    s->left = s->left_nz = 0;
    s->phase = SAVE_POSTCOPY;
}

void mig_save_stopcopy(struct mig *m)
{
    struct mig_save *s = m->save;

    s->stopcopy_t0 = mig_now_ms();
    s->phase = SAVE_STOPCOPY;
    m->stats.final_dirty_bytes = 0;
    if (s->postcopy) {
        postcopy_switchover(m);
        return;
    }
    if (!stopcopy_epoch_begin(m)) {
        round_begin(m); /* the final dirty set, added to what is left */
    }
    vg_info("migration: stop-copy: %" PRIu64 " pages to send (%" PRIu64
            " bytes estimated, %" PRIu64 " given to QEMU before)",
            s->left, mig_save_stopcopy_left(m),
            m->stats.stopcopy_estimate_bytes);
}

void mig_save_close(struct mig *m)
{
    struct mig_save *s = m->save;

    if (!s) {
        return;
    }
    settle_ahead(m);
    vgpu_set_write_observer(m->gpu, NULL, NULL);
    mig_wlog_drain(&m->wlog, NULL, NULL); /* nothing left to mark */
    dt_free(s->dt);
    dt_pool_free(s->pool);
    mig_enc_free(s->enc);
    free(s->buf);
    free(s->pass);
    free(s->dirty);
    free(s->marked);
    free(s->prev_dirty);
    mig_written_free(s->written);
    free(s);
    m->save = NULL;
    pthread_mutex_lock(&m->step_lock);
    m->rounds.level = 0; /* the throttle ends with the session */
    pthread_mutex_unlock(&m->step_lock);
    /* Outside a session the device runs: forget what was seen. */
    mig_bitmap_fill(m->nonzero, m->npages);
    m->nonzero_count = m->npages;
}
