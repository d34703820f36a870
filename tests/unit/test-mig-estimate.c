/*
 * Unit tests of the size estimates QEMU switches over on: the stop-copy
 * size (MIG_DATA_SIZE) must never be below what stop-copy then sends,
 * whoever wrote VRAM.  A source session runs on a CPU-backend vGPU of 64
 * pages, half of them non-zero; the guest CPU's writes reach it as QEMU's
 * region dirty log would (mig_region_dirty_log) or, for a client without
 * the log, not at all.
 */
#include <glib.h>
#include <string.h>

#include "common/log.h"
#include "vfio-migration/mig.h"

#define PAGE  (64u << 10)
#define PAGES 64u
#define VRAM  ((uint64_t)PAGES * PAGE)

struct fx {
    struct vgpu *gpu;
    struct mig *mig;
};

static void *no_dma(void *opaque, uint64_t iova, uint64_t len, bool write)
{
    return NULL;
}

static void no_irq(void *opaque, unsigned vector)
{
}

static void fx_init(struct fx *f, enum mig_track_mode track)
{
    struct vgpu_config gc = {.vram_size = VRAM, .page_size = PAGE};
    struct vgpu_host host = {NULL, no_dma, no_irq};
    struct mig_config mc = {.precopy = MIG_PRECOPY_ITERATIVE, .track = track};
    struct vg_error err;

    g_assert_cmpint(vgpu_new(&gc, &host, &f->gpu, &err), ==, 0);
    memset(vgpu_vram(f->gpu), 0x5a, VRAM / 2); /* pages 0..31 non-zero */
    mc.gpu = f->gpu;
    vgpu_bar0_read(f->gpu, VGPU_REG_FEATURES, &mc.features, 4);
    g_assert_cmpint(mig_new(&mc, &f->mig, &err), ==, 0);
    mig_note_bar2_shared(f->mig);
}

static void fx_free(struct fx *f)
{
    mig_free(f->mig);
    vgpu_free(f->gpu);
}

static void set_state(struct fx *f, enum mig_state s)
{
    struct vg_error err;

    g_assert_cmpint(mig_set_state(f->mig, s, &err), ==, 0);
}

/* Read the stream until no more data now; the bytes read. */
static uint64_t drain(struct fx *f)
{
    static uint8_t buf[1u << 20];
    uint64_t total = 0;
    struct vg_error err;
    uint32_t got;

    do {
        g_assert_cmpint(mig_read(f->mig, buf, sizeof(buf), &got, &err), ==, 0);
        total += got;
    } while (got > 0);
    return total;
}

/* The guest CPU wrote pages [@first, +@n): VRAM changes, QEMU logs it. */
static void cpu_write(struct fx *f, unsigned first, unsigned n, bool logged)
{
    uint64_t bitmap[PAGES / 64] = {0};
    struct vg_error err;

    for (unsigned p = first; p < first + n; p++) {
        vgpu_vram(f->gpu)[(uint64_t)p * PAGE + 100] ^= 0x11;
        bitmap[p / 64] |= 1ull << (p % 64);
    }
    if (logged) {
        g_assert_cmpint(
            mig_region_dirty_log(f->mig, 0, bitmap, PAGES, PAGE, &err), ==, 0);
    }
}

#define PIECE (PAGE / 64)

/* The guest CPU wrote @n bytes at piece @piece of pages [@first, +@n),
 * logged by QEMU a piece at a time: a stop-copy sends those pieces. */
static void cpu_write_piece(struct fx *f, unsigned first, unsigned n,
                            unsigned piece)
{
    uint64_t bitmap[PAGES] = {0}; /* a bit a piece */
    struct vg_error err;

    for (unsigned p = first; p < first + n; p++) {
        uint64_t bit = (uint64_t)p * 64 + piece;

        vgpu_vram(f->gpu)[bit * PIECE + 8] ^= 0x11;
        bitmap[bit / 64] |= 1ull << (bit % 64);
    }
    g_assert_cmpint(
        mig_region_dirty_log(f->mig, 0, bitmap, PAGES * 64, PIECE, &err), ==,
        0);
}

/* Stop-copy now: what it sends must fit @est, an estimate given before. */
static void stop_copy_within(struct fx *f, uint64_t est)
{
    uint64_t sent;

    set_state(f, MIG_STATE_STOP_COPY);
    sent = drain(f);
    g_test_message("stop-copy estimate %" G_GUINT64_FORMAT
                   ", sent %" G_GUINT64_FORMAT,
                   est, sent);
    g_assert_cmpuint(sent, <=, est);
    set_state(f, MIG_STATE_STOP);
}

/* Stop-copy now: what it sends must fit the estimate given just before. */
static void stop_copy_fits(struct fx *f)
{
    stop_copy_within(f, mig_stopcopy_size(f->mig));
}

/*
 * Hybrid tracking with BAR2 logged, in PRE_COPY: a size query (the
 * reference of the estimate's rate), round 0 drained, then 25 ms.
 */
static void start_after_round0(struct fx *f)
{
    fx_init(f, MIG_TRACK_HYBRID);
    mig_note_bar2_logged(f->mig, true);
    set_state(f, MIG_STATE_PRE_COPY);
    mig_stopcopy_size(f->mig);
    drain(f);
    g_usleep(25 * 1000);
}

/*
 * Round 0 reads no page before it sends it (the tracker's baseline is what
 * was sent), so every page it has not read yet counts as non-zero, zero
 * or not, also after the guest writes some of them.
 */
static void test_unread_pages_in_pass(void)
{
    struct fx f;

    fx_init(&f, MIG_TRACK_HYBRID);
    mig_note_bar2_logged(f.mig, true);
    set_state(&f, MIG_STATE_PRE_COPY);
    g_assert_cmpuint(mig_stopcopy_size(f.mig), >=, VRAM);
    cpu_write(&f, 40, 8, true); /* zero pages, not read yet */
    g_assert_cmpuint(mig_stopcopy_size(f.mig), >=, VRAM);
    stop_copy_fits(&f);
    fx_free(&f);
}

/* Pages written after round 0 went out, in every tracking mode. */
static void test_logged_after_round0(gconstpointer data)
{
    enum mig_track_mode track = GPOINTER_TO_INT(data);
    struct fx f;

    fx_init(&f, track);
    mig_note_bar2_logged(f.mig, true);
    set_state(&f, MIG_STATE_PRE_COPY);
    drain(&f);
    cpu_write(&f, 4, 6, true);  /* non-zero pages */
    cpu_write(&f, 50, 6, true); /* zero pages */
    g_assert_cmpuint(mig_stopcopy_size(f.mig), >=, 12ull * PAGE);
    stop_copy_fits(&f);
    fx_free(&f);
}

/* A client that does not log BAR2: any page may have changed. */
static void test_unlogged(gconstpointer data)
{
    enum mig_track_mode track = GPOINTER_TO_INT(data);
    struct fx f;

    fx_init(&f, track);
    set_state(&f, MIG_STATE_PRE_COPY);
    drain(&f);
    g_assert_cmpuint(mig_stopcopy_size(f.mig), >=, VRAM);
    cpu_write(&f, 0, PAGES, false);
    stop_copy_fits(&f);
    fx_free(&f);
}

/*
 * Stop-copy hashes what the tracker cannot see before it sends anything:
 * with every page to hash (hash mode) the estimate holds the bytes QEMU's
 * link would carry meanwhile, and nothing when no page is to be hashed
 * (hybrid with a logged BAR2) or nothing is tracked.
 */
static void test_final_hash(gconstpointer data)
{
    enum mig_track_mode track = GPOINTER_TO_INT(data);
    struct mig_stats st;
    uint64_t est;
    struct fx f;

    fx_init(&f, track);
    mig_note_bar2_logged(f.mig, true);
    set_state(&f, MIG_STATE_PRE_COPY);
    drain(&f);
    est = mig_stopcopy_size(f.mig);
    mig_get_stats(f.mig, &st);
    g_test_message("estimate %" G_GUINT64_FORMAT
                   ", of it for the hash %" G_GUINT64_FORMAT
                   ", %" G_GUINT64_FORMAT " pages hashed "
                   "in %.3f ms",
                   est, st.stopcopy_hash_bytes, st.pages_hashed, st.hash_ms);
    g_assert_cmpuint(st.stopcopy_estimate_bytes, ==, est);
    if (track == MIG_TRACK_HASH) {
        g_assert_cmpuint(st.stopcopy_hash_bytes, >, 0);
        g_assert_cmpuint(est, >, st.stopcopy_hash_bytes);
    } else {
        g_assert_cmpuint(st.stopcopy_hash_bytes, ==, 0);
    }
    stop_copy_fits(&f);
    fx_free(&f);
}

/*
 * The estimate once the rate of new pages has fallen to zero: the rate is
 * measured over windows of at least 20 ms between size queries, so the
 * second window opened after the last write saw no new page.
 */
static uint64_t quiet_estimate(struct fx *f)
{
    for (unsigned i = 0; i < 2; i++) {
        mig_stopcopy_size(f->mig);
        g_usleep(30 * 1000);
    }
    return mig_stopcopy_size(f->mig);
}

/*
 * A writer that keeps dirtying new pages will dirty more between QEMU's
 * last size query and the stop: the estimate adds the pages newly written
 * per ms lately times a lag of 50 ms, and drops that part again when the
 * writer stops.
 */
static void test_new_page_rate(void)
{
    uint64_t before, busy, quiet;
    struct fx f;

    fx_init(&f, MIG_TRACK_HYBRID);
    mig_note_bar2_logged(f.mig, true);
    set_state(&f, MIG_STATE_PRE_COPY);
    drain(&f);
    cpu_write(&f, 0, 4, true);
    before = quiet_estimate(&f); /* the reference: no rate part */
    g_usleep(40 * 1000);
    cpu_write(&f, 4, 16, true); /* 16 new pages in 40 ms or a bit more */
    busy = mig_stopcopy_size(f.mig);
    g_usleep(40 * 1000);
    quiet = mig_stopcopy_size(f.mig); /* no new page since */
    g_test_message("estimate %" G_GUINT64_FORMAT ", writing %" G_GUINT64_FORMAT
                   ", quiet %" G_GUINT64_FORMAT,
                   before, busy, quiet);
    g_assert_cmpuint(busy, >=, before + 16ull * PAGE + 1ull * PAGE);
    g_assert_cmpuint(quiet, <, busy);
    g_assert_cmpuint(quiet, >=, before + 16ull * PAGE);
    stop_copy_fits(&f);
    fx_free(&f);
}

/*
 * The rate of new pages a window measured says little of the next round's:
 * a write to a page the pass holds is not new, and the pass changes with
 * each round.  Right after the epoch that begins a round, before a window
 * of the round has measured anything, the estimate takes the rate from
 * that epoch: here no new page in the last window, then 16 written before
 * the epoch and 8 more before the stop.
 */
static void test_rate_from_epoch(void)
{
    uint64_t info[2], est;
    struct vg_error err;
    struct fx f;

    start_after_round0(&f);
    mig_stopcopy_size(f.mig); /* a window without a new page */
    cpu_write(&f, 40, 16, true);
    g_assert_cmpint(mig_precopy_info(f.mig, &info[0], &info[1], &err), ==, 0);
    g_assert_cmpuint(info[0] + info[1], >=, 16ull * PAGE); /* those 16 */
    est = mig_stopcopy_size(f.mig);
    cpu_write(&f, 0, 8, true);
    stop_copy_within(&f, est);
    fx_free(&f);
}

/*
 * An epoch that finds the same pages as the one before (a writer that
 * sweeps VRAM, found again) has no new page of its own: the rate of new
 * pages measured before it stays, or the next pages the writer moves on to
 * are missing from the estimate.
 */
static void test_rate_after_same_pages(void)
{
    uint64_t info[2], est;
    struct vg_error err;
    struct fx f;

    start_after_round0(&f);
    cpu_write(&f, 0, 16, true);
    g_assert_cmpint(mig_precopy_info(f.mig, &info[0], &info[1], &err), ==, 0);
    drain(&f); /* round 1: those 16 */
    g_usleep(25 * 1000);
    cpu_write(&f, 0, 16, true); /* the same 16 again */
    g_assert_cmpint(mig_precopy_info(f.mig, &info[0], &info[1], &err), ==, 0);
    g_assert_cmpuint(info[0] + info[1], >=, 16ull * PAGE);
    est = mig_stopcopy_size(f.mig);
    cpu_write(&f, 16, 8, true); /* the writer moves on */
    stop_copy_within(&f, est);
    fx_free(&f);
}

/*
 * A stop-copy sends a page the guest CPU wrote a few pieces of as those
 * pieces (stream version 4 on): once the rate of new writes is down to
 * nothing, the estimate counts them and their records, not the pages,
 * for pages written since the last epoch and for pages of the pass.
 */
static void test_pieces(void)
{
    uint64_t info[2], est;
    struct vg_error err;
    struct fx f;

    start_after_round0(&f);
    cpu_write_piece(&f, 0, 16, 3);
    cpu_write_piece(&f, 0, 16, 40);
    est = quiet_estimate(&f);
    g_test_message(
        "16 pages, 2 pieces each, not in the pass: %" G_GUINT64_FORMAT, est);
    g_assert_cmpuint(est, >=, 32ull * PIECE);
    g_assert_cmpuint(est, <, 4ull * PAGE);

    /* The next round's pass holds them; then a piece more in four */
    g_assert_cmpint(mig_precopy_info(f.mig, &info[0], &info[1], &err), ==, 0);
    g_assert_cmpuint(info[1], >=, 16ull * PAGE); /* pre-copy sends pages */
    est = quiet_estimate(&f);
    g_test_message("...in the pass: %" G_GUINT64_FORMAT, est);
    g_assert_cmpuint(est, >=, 32ull * PIECE);
    g_assert_cmpuint(est, <, 4ull * PAGE);
    cpu_write_piece(&f, 0, 4, 9);
    stop_copy_within(&f, est);
    fx_free(&f);
}

/* A page of the pass that went in pre-copy starts over: a stop-copy sends
 * only the pieces written after it went. */
static void test_pieces_after_send(void)
{
    uint64_t info[2], sent;
    struct vg_error err;
    struct fx f;

    start_after_round0(&f);
    for (unsigned piece = 0; piece < 32; piece++) {
        cpu_write_piece(&f, 0, 8, piece);
    }
    g_assert_cmpint(mig_precopy_info(f.mig, &info[0], &info[1], &err), ==, 0);
    drain(&f); /* the 8 pages, whole */
    cpu_write_piece(&f, 0, 8, 50);
    g_assert_cmpuint(quiet_estimate(&f), <, 2ull * PAGE);
    set_state(&f, MIG_STATE_STOP_COPY);
    sent = drain(&f);
    g_test_message("stop-copy sent %" G_GUINT64_FORMAT, sent);
    g_assert_cmpuint(sent, >=, 8ull * PIECE);
    g_assert_cmpuint(sent, <, 16ull * PIECE + 4096);
    set_state(&f, MIG_STATE_STOP);
    fx_free(&f);
}

int main(int argc, char **argv)
{
    static const char *const names[] = {"hybrid", "hash", "none"};
    static const enum mig_track_mode modes[] = {MIG_TRACK_HYBRID,
                                                MIG_TRACK_HASH, MIG_TRACK_NONE};

    g_test_init(&argc, &argv, NULL);
    vg_log_set_level(VG_LOG_WARN);
    g_test_add_func("/mig/estimate/unread-pages-in-pass",
                    test_unread_pages_in_pass);
    g_test_add_func("/mig/estimate/new-page-rate", test_new_page_rate);
    g_test_add_func("/mig/estimate/rate-from-epoch", test_rate_from_epoch);
    g_test_add_func("/mig/estimate/rate-after-same-pages",
                    test_rate_after_same_pages);
    g_test_add_func("/mig/estimate/pieces", test_pieces);
    g_test_add_func("/mig/estimate/pieces-after-send", test_pieces_after_send);
    for (unsigned i = 0; i < 3; i++) {
        g_autofree char *p1 =
            g_strdup_printf("/mig/estimate/logged-after-round0/%s", names[i]);
        g_autofree char *p2 =
            g_strdup_printf("/mig/estimate/unlogged/%s", names[i]);
        g_autofree char *p3 =
            g_strdup_printf("/mig/estimate/final-hash/%s", names[i]);

        g_test_add_data_func(p1, GINT_TO_POINTER(modes[i]),
                             test_logged_after_round0);
        g_test_add_data_func(p2, GINT_TO_POINTER(modes[i]), test_unlogged);
        g_test_add_data_func(p3, GINT_TO_POINTER(modes[i]), test_final_hash);
    }
    return g_test_run();
}
