/*
 * test-mig-restore -- save a vGPU VM to a file and restore it, VRAM on
 * demand.
 *
 * The source is saved with QMP "migrate file:PATH" (what virsh save
 * does, through an fd) and a fresh destination restores it with
 * "migrate-incoming file:PATH".  QEMU hands the server the device data
 * as extents of the file (VFIO_USER_MIG_DATA_FILE, patches 0042-0044);
 * the server scans it, the VM runs, and VRAM loads from the file in the
 * background and on first touch.  A server slowed down on each read of
 * the file (--fault postcopy-delay) shows the VM running while pages are
 * still missing; the destination's engines then COPY out of pages that
 * may be missing, BAR2 is read whole, and both must equal the source's
 * VRAM; the checksums must match and the file's digest be verified.
 * With --no-restore-on-demand the same restore loads everything first.
 * A save file with one damaged page still restores the state, and the
 * server says which record of the file is damaged as soon as it reads it.
 */
#include <fcntl.h>
#include <unistd.h>

#include "mig-test.h"

#define MIB (1ull << 20)
/* A COPY the restored VM runs first: from filled MiBs to zero ones. */
#define COPY_SRC (40 * MIB)
#define COPY_DST (56 * MIB)
#define COPY_LEN (4 * MIB)
/* Each read of the file waits this long: 48 MiB in reads of 1 MiB take
 * at least 2.4 s, time for the test to see the VM run first. */
#define READ_DELAY "postcopy-delay:50"

static bool restore_seen(const struct vg_stats *st, void *opaque)
{
    g_autofree char *v = vg_stats_str(st, "restore_on_demand");
    g_autofree char *pages = vg_stats_str(st, "postcopy_pages");

    return v && pages && strcmp(v, opaque) == 0 && st->vram_checksum[0] == 0;
}

static bool restore_done(const struct vg_stats *st, void *opaque)
{
    g_autofree char *done = vg_stats_str(st, "postcopy_done");

    return done && strcmp(done, "true") == 0 && st->vram_checksum[0];
}

static bool loaded(const struct vg_stats *st, void *opaque)
{
    return st->vram_checksum[0] != 0;
}

static bool damage_reported(const struct vg_stats *st, void *opaque)
{
    g_autofree char *e = vg_stats_str(st, "last_error");

    return e && strstr(e, "changed or is damaged");
}

/* Save the source, with VRAM filled, to a file (its path returned, for
 * g_free()); its VRAM into @vram. */
static char *save(struct mt *t, uint8_t *vram)
{
    g_autofree char *uri = NULL;
    char *path;
    struct vg_mig_info info;
    struct vg_stats s;

    mt_start_src(t, "restore", NULL);
    mt_fill_vram(t);
    path = g_strdup_printf("%s/vm.sav", t->dir);
    uri = g_strdup_printf("file:%s", path);
    VGT_OK(vg_mig_start(t->src.qemu->qmp, uri, VGT_ERR));
    mt_migrate_wait(t, NULL, NULL, &info);
    VGT_OK(vg_stats_wait(t->src.stats, loaded, NULL, MT_STATS_TIMEOUT_MS, &s,
                         VGT_ERR));
    vg_stats_clear(&s);
    VGT_OK(vg_qtest_memread(t->src.qemu->qt, t->gpu.vram_addr, vram,
                            VGT_VRAM_SIZE, VGT_ERR));
    return path;
}

/* A fresh destination (server arguments @srv_extra) restores @path. */
static void restore(struct mt *t, const char *path,
                    const char *const *srv_extra)
{
    g_autofree char *args = g_strdup_printf("{\"uri\": \"file:%s\"}", path);

    mt_start_dst_with(t, VGT_VRAM_ARG, srv_extra, NULL);
    VGT_OK(vg_qmp_execute_json(t->dst.qemu->qmp, "migrate-incoming", args, NULL,
                               VGT_ERR));
    mt_attach_dst(t);
}

/* The restored VM's engines COPY first, then BAR2 is read whole: both
 * must be the saved VRAM. */
static void check_vram(struct mt *t, uint8_t *saved)
{
    g_autofree uint8_t *got = g_malloc(VGT_VRAM_SIZE);
    struct vgpu_cmd copy =
        vgpu_cmd_make(VGPU_OP_COPY, COPY_DST, COPY_SRC, COPY_LEN, 0, 0, 0);

    mt_run(&t->dgpu, &copy, 1);
    memcpy(saved + COPY_DST, saved + COPY_SRC, COPY_LEN);
    VGT_OK(vg_qtest_memread(t->dst.qemu->qt, t->dgpu.vram_addr, got,
                            VGT_VRAM_SIZE, VGT_ERR));
    for (uint64_t off = 0; off < VGT_VRAM_SIZE; off += VGT_PAGE_SIZE) {
        if (memcmp(saved + off, got + off, VGT_PAGE_SIZE) != 0) {
            MT_FAIL("restored VRAM differs at 0x%" G_GINT64_MODIFIER "x", off);
        }
    }
}

static void test_on_demand(void)
{
    static const char *const slow[] = {"--fault", READ_DELAY, NULL};
    g_autofree uint8_t *saved = g_malloc(VGT_VRAM_SIZE);
    g_autofree char *path = NULL, *verified = NULL, *done = NULL;
    struct mt t;
    struct vg_stats d, s;
    int64_t pages;

    path = save(&t, saved);
    restore(&t, path, slow);
    /* The VM runs; the pages are still coming. */
    VGT_OK(vg_stats_wait(t.dst.stats, restore_seen, "true", MT_STATS_TIMEOUT_MS,
                         &d, VGT_ERR));
    done = vg_stats_str(&d, "postcopy_done");
    pages = mt_stat_int(&d, "postcopy_pages");
    g_test_message("running with %" G_GINT64_FORMAT " of %" G_GINT64_FORMAT
                   " pages from the file (done: %s)",
                   mt_stat_int(&d, "postcopy_fetched"), pages, done);
    g_assert_cmpstr(done, ==, "false");
    g_assert_cmpint(mt_stat_int(&d, "postcopy_fetched"), <, pages);
    g_assert_cmpint(pages, >=, (int64_t)(MT_FILLED_MIB * MIB / VGT_PAGE_SIZE));
    vg_stats_clear(&d);
    check_vram(&t, saved);
    VGT_OK(vg_stats_wait(t.dst.stats, restore_done, NULL, MT_STATS_TIMEOUT_MS,
                         &d, VGT_ERR));
    verified = vg_stats_str(&d, "postcopy_verified");
    g_test_message(
        "restored: %" G_GINT64_FORMAT " pages in %.1f ms, %" G_GINT64_FORMAT
        " faults, %" G_GINT64_FORMAT " waits",
        mt_stat_int(&d, "postcopy_fetched"), mt_stat_double(&d, "postcopy_ms"),
        mt_stat_int(&d, "postcopy_faults"), mt_stat_int(&d, "postcopy_waits"));
    g_assert_cmpint(mt_stat_int(&d, "postcopy_fetched"), ==, pages);
    g_assert_cmpstr(verified, ==, "true");
    /* The checksums are of what the file delivered, although the COPY
     * ran before the last page: the source's at the save. */
    VGT_OK(vg_stats_read(t.src.stats, &s, VGT_ERR));
    g_assert_cmpstr(d.vram_checksum, ==, s.vram_checksum);
    g_assert_cmpstr(d.device_state_checksum, ==, s.device_state_checksum);
    vg_stats_clear(&s);
    mt_fence(&t.dgpu, 0x5eed);
    vg_stats_clear(&d);
    mt_stop(&t);
}

/* --no-restore-on-demand: everything is loaded before the VM runs. */
static void test_eager(void)
{
    static const char *const eager[] = {"--no-restore-on-demand", NULL};
    g_autofree uint8_t *saved = g_malloc(VGT_VRAM_SIZE);
    g_autofree char *path = NULL;
    struct mt t;
    struct vg_stats d;

    path = save(&t, saved);
    restore(&t, path, eager);
    VGT_OK(vg_stats_wait(t.dst.stats, loaded, NULL, MT_STATS_TIMEOUT_MS, &d,
                         VGT_ERR));
    {
        g_autofree char *v = vg_stats_str(&d, "restore_on_demand");
        g_autofree char *src_sum = NULL;
        struct vg_stats s;

        VGT_OK(vg_stats_read(t.src.stats, &s, VGT_ERR));
        g_assert_cmpstr(v, ==, "false");
        g_assert_cmpstr(d.vram_checksum, ==, s.vram_checksum);
        g_assert_cmpint(mt_stat_int(&d, "bytes_received"), >=,
                        (int64_t)(MT_FILLED_MIB * MIB));
        vg_stats_clear(&s);
    }
    check_vram(&t, saved);
    vg_stats_clear(&d);
    mt_stop(&t);
}

/* Flip one byte of page data in the file (the first PAGES record's
 * first page at or after @from bytes): the stream's small records are
 * intact, so the restore runs, and the damage is reported when the
 * record is read. */
static void damage_page(const char *path, uint64_t from)
{
    int fd = open(path, O_RDWR);
    uint8_t b;

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(pread(fd, &b, 1, (off_t)from), ==, 1);
    b ^= 0xff;
    g_assert_cmpint(pwrite(fd, &b, 1, (off_t)from), ==, 1);
    close(fd);
}

static void test_damaged(void)
{
    g_autofree uint8_t *saved = g_malloc(VGT_VRAM_SIZE);
    g_autofree uint8_t *pattern = g_malloc(VGT_PAGE_SIZE);
    g_autofree char *path = NULL, *contents = NULL, *verified = NULL;
    gsize len = 0;
    struct mt t;
    struct vg_stats d;
    uint8_t *at;

    path = save(&t, saved);
    /* A page of MiB 30 (pattern-filled, unique in VRAM) in the file. */
    memcpy(pattern, saved + 30 * MIB, VGT_PAGE_SIZE);
    g_assert_true(g_file_get_contents(path, &contents, &len, NULL));
    at = memmem(contents, len, pattern, VGT_PAGE_SIZE);
    g_assert_nonnull(at);
    damage_page(path, (uint64_t)(at - (uint8_t *)contents) + 100);
    restore(&t, path, NULL);
    VGT_OK(vg_stats_wait(t.dst.stats, damage_reported, NULL,
                         MT_STATS_TIMEOUT_MS, &d, VGT_ERR));
    {
        g_autofree char *e = vg_stats_str(&d, "last_error");

        g_test_message("destination: %s", e);
        /* a PAGES_LISTED record where the page went in pre-copy */
        g_assert_nonnull(strstr(e, "PAGES"));
        g_assert_nonnull(strstr(e, " record #"));
    }
    verified = vg_stats_str(&d, "postcopy_verified");
    g_assert_cmpstr(verified, ==, "false");
    vg_stats_clear(&d);
    mt_stop(&t);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/mig/restore/on-demand", test_on_demand);
    g_test_add_func("/mig/restore/eager", test_eager);
    g_test_add_func("/mig/restore/damaged-file", test_damaged);
    return g_test_run();
}
