/*
 * Unit tests of when the migration module writes its statistics file
 * (mig.h, mig_idle()): a state change is written once the server has
 * served no request for a moment, or once it is old enough while
 * requests keep coming, never inside the burst of state changes of a
 * switchover; an error, and the last state at mig_free(), at once.
 */
#include <glib.h>
#include <glib/gstdio.h>
#include <string.h>
#include <unistd.h>

#include "vfio-migration/mig.h"

#define PAGE  (64u << 10)
#define PAGES 64u

struct fixture {
    char *dir, *path;
    struct vgpu *gpu;
    struct mig *m;
};

static void *no_dma(void *opaque, uint64_t iova, uint64_t len, bool write)
{
    return NULL;
}

static void no_irq(void *opaque, unsigned vector)
{
}

static void setup(struct fixture *f, gconstpointer data)
{
    struct vgpu_config gc = {.vram_size = (uint64_t)PAGES * PAGE,
                             .page_size = PAGE};
    struct vgpu_host host = {NULL, no_dma, no_irq};
    struct mig_config mc = {.precopy = MIG_PRECOPY_ITERATIVE};
    struct vg_error err;

    f->dir = g_dir_make_tmp("vgmig-stats-XXXXXX", NULL);
    g_assert_nonnull(f->dir);
    f->path = g_build_filename(f->dir, "stats.json", NULL);
    g_assert_cmpint(vgpu_new(&gc, &host, &f->gpu, &err), ==, 0);
    mc.gpu = f->gpu;
    mc.stats_path = f->path;
    vgpu_bar0_read(f->gpu, VGPU_REG_FEATURES, &mc.features, 4);
    g_assert_cmpint(mig_new(&mc, &f->m, &err), ==, 0);
}

static void teardown(struct fixture *f, gconstpointer data)
{
    if (f->m) {
        mig_free(f->m);
    }
    vgpu_free(f->gpu);
    g_unlink(f->path);
    g_rmdir(f->dir);
    g_free(f->path);
    g_free(f->dir);
}

/* The state the file names now. */
static char *file_state(const struct fixture *f)
{
    g_autofree char *text = NULL;
    const char *at, *end;

    g_assert_true(g_file_get_contents(f->path, &text, NULL, NULL));
    at = strstr(text, "\"state\": \"");
    g_assert_nonnull(at);
    at += strlen("\"state\": \"");
    end = strchr(at, '"');
    g_assert_nonnull(end);
    return g_strndup(at, end - at);
}

static void assert_file_state(const struct fixture *f, const char *want)
{
    g_autofree char *got = file_state(f);

    g_assert_cmpstr(got, ==, want);
}

static void set_state(struct fixture *f, enum mig_state s)
{
    struct vg_error err;

    g_assert_cmpint(mig_set_state(f->m, s, &err), ==, 0);
    mig_idle(f->m, true); /* as after the reply */
}

/* Call mig_idle() the way the control loop does while nothing comes:
 * sleep for what mig_idle_wait_ms() asks, at most @rounds times. */
static void wait_idle(struct fixture *f, unsigned rounds)
{
    for (unsigned i = 0; i < rounds; i++) {
        int ms = mig_idle_wait_ms(f->m);

        if (ms < 0) {
            return;
        }
        g_usleep((gulong)ms * 1000);
        mig_idle(f->m, false);
    }
}

/* A switchover's state changes, requests coming back to back: the file
 * is not written among them, and is once the requests stop.  The
 * session's start (its counters reset) is written at once. */
static void test_burst_deferred(struct fixture *f, gconstpointer data)
{
    assert_file_state(f, "RUNNING"); /* written at creation */
    g_assert_cmpint(mig_idle_wait_ms(f->m), ==, -1);
    set_state(f, MIG_STATE_PRE_COPY);
    assert_file_state(f, "PRE_COPY");
    set_state(f, MIG_STATE_PRE_COPY_P2P);
    set_state(f, MIG_STATE_STOP_COPY);
    assert_file_state(f, "PRE_COPY");
    g_assert_cmpint(mig_idle_wait_ms(f->m), >, 0);
    wait_idle(f, 10);
    assert_file_state(f, "STOP_COPY");
    g_assert_cmpint(mig_idle_wait_ms(f->m), ==, -1);
}

/* Requests that never pause: the file still follows within the bound. */
static void test_stale_bound(struct fixture *f, gconstpointer data)
{
    gint64 start;
    gint64 took;

    set_state(f, MIG_STATE_PRE_COPY);
    start = g_get_monotonic_time();
    set_state(f, MIG_STATE_PRE_COPY_P2P);
    while (mig_idle_wait_ms(f->m) >= 0) {
        g_assert_cmpint(g_get_monotonic_time() - start, <, 2000 * 1000);
        g_usleep(500);
        mig_idle(f->m, true);
    }
    took = g_get_monotonic_time() - start;
    assert_file_state(f, "PRE_COPY_P2P");
    g_test_message("written after %" G_GINT64_FORMAT " us of requests", took);
    g_assert_cmpint(took, >=, 40 * 1000);
}

static bool file_has_checksum(const struct fixture *f)
{
    g_autofree char *text = NULL;

    g_assert_true(g_file_get_contents(f->path, &text, NULL, NULL));
    return strstr(text, "\"vram_checksum\": \"") != NULL;
}

/* A saving session's checksums are written as soon as they are taken,
 * after the reply to STOP_COPY -> STOP; the next session's start clears
 * them in the file at once, so a reader never takes them for its own. */
static void test_checksums_at_once(struct fixture *f, gconstpointer data)
{
    uint8_t *buf = g_malloc(1 << 20);
    struct vg_error err;
    uint32_t got;

    set_state(f, MIG_STATE_STOP);
    set_state(f, MIG_STATE_STOP_COPY);
    do {
        g_assert_cmpint(mig_read(f->m, buf, 1 << 20, &got, &err), ==, 0);
    } while (got > 0);
    g_assert_false(file_has_checksum(f));
    set_state(f, MIG_STATE_STOP);
    g_assert_true(file_has_checksum(f));
    set_state(f, MIG_STATE_STOP_COPY);
    g_assert_false(file_has_checksum(f));
    g_free(buf);
}

/* An error reaches the file at once, with what went wrong. */
static void test_error_at_once(struct fixture *f, gconstpointer data)
{
    static const uint8_t junk[64] = {0xde, 0xad};
    struct vg_error err;
    g_autofree char *text = NULL;

    set_state(f, MIG_STATE_STOP);
    set_state(f, MIG_STATE_RESUMING);
    g_assert_cmpint(mig_write(f->m, junk, sizeof(junk), &err), <, 0);
    g_assert_true(g_file_get_contents(f->path, &text, NULL, NULL));
    g_test_message("%s", err.msg);
    g_assert_nonnull(strstr(text, err.msg));
    /* A refused state change is in the file at once too. */
    g_assert_cmpint(mig_set_state(f->m, MIG_STATE_PRE_COPY, &err), <, 0);
    g_clear_pointer(&text, g_free);
    g_assert_true(g_file_get_contents(f->path, &text, NULL, NULL));
    g_assert_nonnull(strstr(text, err.msg));
}

/* A server that goes away leaves its last state in the file. */
static void test_free_writes(struct fixture *f, gconstpointer data)
{
    set_state(f, MIG_STATE_STOP);
    assert_file_state(f, "RUNNING");
    mig_free(f->m);
    f->m = NULL;
    assert_file_state(f, "STOP");
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add("/mig/stats/burst-deferred", struct fixture, NULL, setup,
               test_burst_deferred, teardown);
    g_test_add("/mig/stats/stale-bound", struct fixture, NULL, setup,
               test_stale_bound, teardown);
    g_test_add("/mig/stats/checksums-at-once", struct fixture, NULL, setup,
               test_checksums_at_once, teardown);
    g_test_add("/mig/stats/error-at-once", struct fixture, NULL, setup,
               test_error_at_once, teardown);
    g_test_add("/mig/stats/free-writes", struct fixture, NULL, setup,
               test_free_writes, teardown);
    return g_test_run();
}
