/*
 * mig-save.c -- the source's saving session: the passes over VRAM, the
 * device state and END, served to MIG_DATA_READ one record at a time,
 * and the size estimates behind PRECOPY_INFO and MIG_DATA_SIZE.
 */
#include "mig-int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

/* Record overhead of one run: record header + run header. */
#define RUN_OVERHEAD (MIG_REC_HDR_SIZE + MIG_RUN_HDR_SIZE)
#define HEADER_BYTES (MIG_REC_HDR_SIZE + MIG_HEADER_SIZE)
#define TAIL_BYTES   (MIG_REC_HDR_SIZE + VGPU_STATE_SIZE + END_BYTES)
#define END_BYTES    (MIG_REC_HDR_SIZE + MIG_END_SIZE)
/* Pages one ZEROS record may cover (bounds the work of one read). */
#define ZERO_RUN_MAX 16384u

enum save_phase {
    SAVE_PRECOPY,      /* initial pass, device running */
    SAVE_PRECOPY_DONE, /* initial pass sent: nothing more in PRE_COPY */
    SAVE_STOPCOPY,     /* stop-copy pass, device quiesced */
    SAVE_STATE,        /* device state next */
    SAVE_END,          /* END next */
    SAVE_DONE,         /* END staged; the stream ends after it */
};

struct mig_save {
    struct mig_enc *enc;
    enum save_phase phase;
    bool header_sent;
    uint8_t *buf;       /* the staged record (MIG_REC_MAX) */
    size_t len, pos;    /* its size and the bytes read of it */
    uint64_t *pass;     /* pages the current pass still has to send */
    uint64_t cursor;    /* no page below it is left in the pass */
    uint64_t left;      /* pages left in the pass */
    uint64_t left_nz;   /* of those, pages last seen non-zero */
    uint64_t sent;      /* stream bytes read */
    double stopcopy_t0; /* ms at STOP_COPY entry */
    bool end_timed;
    bool fault_armed;
    uint64_t fault_offset;
};

static size_t bitmap_words(uint64_t bits)
{
    return (size_t)((bits + 63) / 64);
}

static uint32_t run_pages(const struct mig *m)
{
    return MIG_RUN_MAX_BYTES / m->scfg.page_size;
}

/* Encoded size of a pass over @pages pages, @nz of them non-zero. */
static uint64_t pass_bytes(const struct mig *m, uint64_t pages, uint64_t nz)
{
    uint64_t records = (nz + run_pages(m) - 1) / run_pages(m);

    return nz * m->scfg.page_size +
           RUN_OVERHEAD * (records + (pages > nz ? 1 : 0));
}

static bool page_is_zero(const uint8_t *p, uint32_t len)
{
    const uint64_t *w = (const uint64_t *)p;

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

/* Classify every page (device running: only an estimate). */
static void zero_scan(struct mig *m)
{
    for (uint64_t p = 0; p < m->npages; p++) {
        note_page(m, p, vram_page_zero(m, p));
    }
    vg_dbg("migration: zero scan: %" PRIu64 " of %" PRIu64 " pages non-zero",
           m->nonzero_count, m->npages);
}

/* Start a pass over every page.  (Dirty tracking will put only the
 * pages written since the last pass into this set.) */
static void pass_begin(struct mig *m)
{
    struct mig_save *s = m->save;

    mig_bitmap_fill(s->pass, m->npages);
    s->cursor = 0;
    s->left = m->npages;
    s->left_nz = m->nonzero_count;
    m->stats.rounds++;
}

/* Next page of the pass at or after the cursor; npages if none. */
static uint64_t pass_next(const struct mig *m)
{
    const struct mig_save *s = m->save;
    uint64_t i = s->cursor;

    while (i < m->npages) {
        uint64_t w = s->pass[i / 64] >> (i % 64);
        if (w) {
            return i + (uint64_t)__builtin_ctzll(w);
        }
        i = (i / 64 + 1) * 64;
    }
    return m->npages;
}

/* Take page @p out of the pass, now seen @zero. */
static void pass_take(struct mig *m, uint64_t p, bool zero)
{
    struct mig_save *s = m->save;

    mig_bit_put(s->pass, p, false);
    s->left--;
    if (mig_bit(m->nonzero, p)) {
        s->left_nz--;
    }
    note_page(m, p, zero);
}

/* Stage the next run of the pass; false when the pass is over. */
static bool stage_run(struct mig *m)
{
    struct mig_save *s = m->save;
    uint64_t p = pass_next(m), n = 1;
    bool zero;

    if (p == m->npages) {
        return false;
    }
    zero = vram_page_zero(m, p);
    pass_take(m, p, zero);
    while (n < (zero ? ZERO_RUN_MAX : run_pages(m)) && p + n < m->npages &&
           mig_bit(s->pass, p + n) && vram_page_zero(m, p + n) == zero) {
        pass_take(m, p + n, zero);
        n++;
    }
    s->cursor = p + n;
    s->len =
        zero ? mig_enc_zeros(s->enc, p, n, s->buf)
             : mig_enc_pages(s->enc, p, (uint32_t)n,
                             vgpu_vram(m->gpu) + p * m->scfg.page_size, s->buf);
    return true;
}

static void stage_state(struct mig *m)
{
    struct mig_save *s = m->save;
    uint8_t blob[VGPU_STATE_SIZE];
    int n = vgpu_state_save(m->gpu, blob, sizeof(blob), NULL);

    s->len = mig_enc_state(s->enc, blob, (uint32_t)n, s->buf);
}

/* Stage the next record; false if there is none now. */
static bool stage_next(struct mig *m)
{
    struct mig_save *s = m->save;

    s->pos = 0;
    s->len = 0;
    if (!s->header_sent) {
        s->header_sent = true;
        s->len = mig_enc_header(s->enc, &m->scfg, s->buf);
        return true;
    }
    switch (s->phase) {
    case SAVE_PRECOPY:
    case SAVE_STOPCOPY:
        if (stage_run(m)) {
            return true;
        }
        vg_dbg("migration: %s pass sent (stream at %" PRIu64 " bytes)",
               s->phase == SAVE_PRECOPY ? "pre-copy" : "stop-copy",
               mig_enc_bytes(s->enc));
        s->phase = s->phase == SAVE_PRECOPY ? SAVE_PRECOPY_DONE : SAVE_STATE;
        return stage_next(m);
    case SAVE_STATE:
        stage_state(m);
        s->phase = SAVE_END;
        return true;
    case SAVE_END:
        s->len = mig_enc_end(s->enc, s->buf);
        s->phase = SAVE_DONE;
        return true;
    default: /* SAVE_PRECOPY_DONE, SAVE_DONE */
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
    m->stats.bytes_sent += n;
    if (s->phase == SAVE_PRECOPY || s->phase == SAVE_PRECOPY_DONE) {
        m->stats.precopy_bytes += n;
    } else {
        m->stats.stopcopy_bytes += n;
    }
    if (s->phase == SAVE_DONE && s->pos == s->len && !s->end_timed) {
        s->end_timed = true;
        m->stats.device_stopcopy_ms = mig_now_ms() - s->stopcopy_t0;
        vg_info("migration: stream of %" PRIu64 " bytes read; device "
                "stop-copy %.3f ms",
                s->sent, m->stats.device_stopcopy_ms);
    }
}

int mig_save_read(struct mig *m, uint8_t *buf, uint32_t size, uint32_t *got)
{
    struct mig_save *s = m->save;

    *got = 0;
    while (*got < size) {
        uint32_t n;

        if (s->pos == s->len && !stage_next(m)) {
            break;
        }
        n = s->len - s->pos < size - *got ? (uint32_t)(s->len - s->pos)
                                          : size - *got;
        memcpy(buf + *got, s->buf + s->pos, n);
        inject_fault(m, buf + *got, n);
        s->pos += n;
        *got += n;
        account(m, n);
    }
    return 0;
}

uint64_t mig_save_initial_left(const struct mig *m)
{
    const struct mig_save *s = m->save;
    uint64_t unread = s->len - s->pos;

    if (s->phase == SAVE_PRECOPY) {
        return unread + (s->header_sent ? 0 : HEADER_BYTES) +
               pass_bytes(m, s->left, s->left_nz);
    }
    return s->phase == SAVE_PRECOPY_DONE ? unread : 0;
}

uint64_t mig_save_stopcopy_left(const struct mig *m)
{
    const struct mig_save *s = m->save;
    uint64_t full = pass_bytes(m, m->npages, m->nonzero_count) + TAIL_BYTES;

    if (!s) {
        return HEADER_BYTES + full;
    }
    full += (s->header_sent ? 0 : HEADER_BYTES) + (s->len - s->pos);
    switch (s->phase) {
    case SAVE_PRECOPY:
    case SAVE_PRECOPY_DONE:
        return full;
    case SAVE_STOPCOPY:
        return full - pass_bytes(m, m->npages, m->nonzero_count) +
               pass_bytes(m, s->left, s->left_nz);
    case SAVE_STATE:
        return (s->len - s->pos) + TAIL_BYTES;
    case SAVE_END:
        return (s->len - s->pos) + END_BYTES;
    default:
        return s->len - s->pos;
    }
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
    uint64_t span = mig_save_stopcopy_left(m);

    if (!m->fault.corrupt) {
        return;
    }
    s->fault_armed = true;
    s->fault_offset =
        m->fault.random
            ? splitmix64(m->fault.seed + m->stats.migrations_started) % span
            : m->fault.offset;
    vg_warn("fault injection: will flip stream byte at offset %" PRIu64
            "%s (seed %" PRIu64 ")",
            s->fault_offset, m->fault.random ? ", random" : "", m->fault.seed);
}

static int save_alloc(struct mig *m, struct vg_error *err)
{
    struct mig_save *s = calloc(1, sizeof(*s));
    int ret;

    if (!s) {
        return vg_error_set(err, ENOMEM, "saving session");
    }
    m->save = s;
    s->buf = malloc(MIG_REC_MAX);
    s->pass = malloc(bitmap_words(m->npages) * 8);
    if (!s->buf || !s->pass) {
        mig_save_close(m);
        return vg_error_set(err, ENOMEM, "saving session buffers");
    }
    ret = mig_enc_new(m->scfg.page_size, &s->enc, err);
    if (ret < 0) {
        mig_save_close(m);
    }
    return ret;
}

int mig_save_open(struct mig *m, bool precopy, struct vg_error *err)
{
    int ret = save_alloc(m, err);

    if (ret < 0) {
        return ret;
    }
    if (precopy) {
        zero_scan(m);
        m->save->phase = SAVE_PRECOPY;
        pass_begin(m);
    }
    arm_fault(m);
    if (!precopy) {
        mig_save_stopcopy(m);
    }
    return 0;
}

void mig_save_stopcopy(struct mig *m)
{
    struct mig_save *s = m->save;

    s->stopcopy_t0 = mig_now_ms();
    mig_take_checksums(m);
    s->phase = SAVE_STOPCOPY;
    pass_begin(m);
}

void mig_save_close(struct mig *m)
{
    struct mig_save *s = m->save;

    if (!s) {
        return;
    }
    mig_enc_free(s->enc);
    free(s->buf);
    free(s->pass);
    free(s);
    m->save = NULL;
    /* Outside a session the device runs: forget what was seen. */
    mig_bitmap_fill(m->nonzero, m->npages);
    m->nonzero_count = m->npages;
}
