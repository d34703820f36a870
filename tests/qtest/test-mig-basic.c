/*
 * test-mig-basic -- live migration of an idle vGPU between two QEMUs.
 *
 * A vGPU whose VRAM holds known patterns, random data and zero pages
 * migrates, started once through QMP and once through HMP: the
 * destination's VRAM equals the source's (both servers'
 * checksums, and samples of every page read through BAR2), the registers
 * equal, the configuration space came along (BARs, MSI-X), the source
 * stays in postmigrate, and the destination's vGPU keeps working; also
 * with both servers preallocating VRAM (--prealloc).  Both servers
 * populate their migration data areas: once the migration takes them, or
 * with --prealloc as soon as QEMU negotiated them, before it.  While
 * a migration runs, the main channel has Nagle's algorithm off on both
 * sides (patch 0020), so the end of the stream does not wait for a
 * delayed ACK inside the downtime.  The device stream moves through the
 * servers' shared memory areas (data_shm, patch 0021), every byte of it
 * on both sides, and through the socket with x-migration-data-shm=off or
 * with servers that do not offer it (--no-data-shm).  The stream is of
 * the newest version by default, and a source server told
 * --stream-version 1, 2, 4 (the page hash before version 5's trees) or 5
 * (pieces checksummed whole, before version 6) migrates to a default
 * destination, which reads those versions.  With the servers on a GPU
 * (VGMIG_SERVER_BACKEND=cuda, tests/cuda/gpu-pack.sh's qtest step) a
 * source writes version 4 where told 5 or later, as its --help says.
 */
#include <stdlib.h>

#include "mig-test.h"
#include "qclient/tcp-census.h"
#include "vfio-migration/mig-stream.h"

/* Pre-copy rate while the channel is looked at: 64 MiB of VRAM take 4 s. */
#define NODELAY_HOLD_BW (16ll << 20)
/* For a server's 64 MiB of VRAM to be preallocated, at the latest. */
#define PREALLOC_WAIT_MS 20000

static const uint32_t saved_regs[] = {
    VGPU_REG_FENCE_LO,  VGPU_REG_FENCE_HI,   VGPU_REG_RING_HEAD,
    VGPU_REG_RING_TAIL, VGPU_REG_IRQ_MASK,   VGPU_REG_SCRATCH,
    VGPU_REG_RING_SIZE, VGPU_REG_IRQ_STATUS, VGPU_REG_ERROR_CODE,
    VGPU_REG_STATUS,    VGPU_REG_CMDS_DONE,
};

/* Known VRAM and register contents on the source; the samples read back
 * in *@samples and the registers in @regs. */
static void prepare_source(struct mt *t, uint8_t **samples, uint32_t *regs)
{
    g_autofree uint8_t *want = mt_expected_samples();

    mt_fill_vram(t);
    VGT_OK(vg_vgpu_wr(&t->gpu, VGPU_REG_SCRATCH, 0x1234abcdu, VGT_ERR));
    mt_fence(&t->gpu, 0x77);
    *samples = mt_vram_samples(&t->gpu);
    mt_assert_samples(*samples, want, "source before migration");
    for (unsigned i = 0; i < G_N_ELEMENTS(saved_regs); i++) {
        regs[i] = mt_rd(&t->gpu, saved_regs[i]);
    }
    g_assert_cmphex(regs[1 /* FENCE_HI */], ==, 0);
    g_assert_cmphex(regs[0 /* FENCE_LO */], ==, 0x77);
    g_assert_cmphex(regs[5 /* SCRATCH */], ==, 0x1234abcdu);
}

/* The destination's vGPU runs commands and raises its MSI-X message. */
static void check_dst_works(struct mt *t)
{
    struct vgpu_cmd c =
        vgpu_cmd_make(VGPU_OP_FILL, 60u << 20, 1u << 20, 0x600dcafe, 0, 0, 0);
    uint32_t v = 0;

    mt_run(&t->dgpu, &c, 1);
    mt_fence(&t->dgpu, 0x78);
    VGT_OK(vg_qtest_readl(t->dst.qemu->qt,
                          t->dgpu.vram_addr + (60u << 20) + 4096, &v, VGT_ERR));
    g_assert_cmphex(v, ==, 0x600dcafe);
    g_assert_cmphex(mt_rd(&t->dgpu, VGPU_REG_ERROR_CODE), ==, VGPU_ERR_NONE);
}

/* How migrate_idle() migrates. */
enum idle_way {
    IDLE_QMP,
    IDLE_HMP,
    IDLE_PREALLOC, /* QMP, both servers with --prealloc */
};

/* Wait until @srv logged @want; fail if it logged @stopped first. */
static void assert_logged(struct vg_server *srv, const char *want,
                          const char *stopped)
{
    for (int i = 0; i < PREALLOC_WAIT_MS / 10; i++) {
        g_autofree char *log = NULL;

        g_assert_true(g_file_get_contents(srv->proc.log, &log, NULL, NULL));
        if (strstr(log, want)) {
            return;
        }
        g_assert_null(strstr(log, stopped));
        g_usleep(10000);
    }
    MT_FAIL("%s: no \"%s\" within %d ms", srv->proc.log, want,
            PREALLOC_WAIT_MS);
}

/* Wait until @srv logged that its VRAM preallocation finished, or, on a
 * GPU (VGMIG_SERVER_BACKEND=cuda...), that device memory needs none. */
static void assert_preallocated(struct vg_server *srv)
{
    assert_logged(srv,
                  mt_vram_on_gpu() ? "device memory: nothing to preallocate"
                                   : "VRAM preallocated: 64 MiB",
                  "VRAM preallocation stopped");
}

/* Wait until @srv logged that the migration data area is populated: with
 * --prealloc once QEMU negotiated it, before any migration; else once a
 * migration took it. */
static void assert_area_populated(struct vg_server *srv)
{
    assert_logged(srv, "migration data area preallocated: ",
                  "migration data area preallocation stopped");
}

static void migrate_idle(enum idle_way way)
{
    static const char *const prealloc[] = {"--prealloc", NULL};
    const char *const *srv_extra = way == IDLE_PREALLOC ? prealloc : NULL;
    bool hmp = way == IDLE_HMP;
    uint32_t regs[G_N_ELEMENTS(saved_regs)];
    g_autofree uint8_t *src_samples = NULL;
    g_autofree uint8_t *dst_samples = NULL;
    struct vg_stats sst, dst;
    struct vg_mig_info info;
    struct mt t;

    mt_start_src(&t, hmp ? "mig-hmp" : "mig-basic", srv_extra);
    prepare_source(&t, &src_samples, regs);
    mt_start_dst(&t, VGT_VRAM_ARG, srv_extra);
    if (way == IDLE_PREALLOC) {
        assert_area_populated(t.src.srv);
        assert_area_populated(t.dst.srv);
    }
    if (hmp) {
        VGT_OK(vg_mig_start_hmp(t.src.qemu->qmp, t.uri, VGT_ERR));
        mt_migrate_wait(&t, NULL, NULL, &info);
    } else {
        mt_migrate(&t, NULL, NULL, &info);
    }
    g_assert_true(info.has_vfio);
    g_assert_cmpint(info.vfio_transferred, >, 0);
    g_assert_cmpint(info.downtime_ms, >=, 0);
    mt_attach_dst(&t);
    mt_assert_stats_equal(&t, &sst, &dst);
    if (!g_getenv("VGMIG_SERVER_BACKEND")) {
        g_autofree char *backend = vg_stats_str(&sst, "backend");

        g_assert_cmpstr(backend, ==, "cpu");
    }
    dst_samples = mt_vram_samples(&t.dgpu);
    mt_assert_samples(dst_samples, src_samples, "destination");
    for (unsigned i = 0; i < G_N_ELEMENTS(saved_regs); i++) {
        g_assert_cmphex(mt_rd(&t.dgpu, saved_regs[i]), ==, regs[i]);
    }
    check_dst_works(&t);
    vg_stats_clear(&sst);
    vg_stats_clear(&dst);
    g_assert_true(vg_proc_alive(&t.src.srv->proc));
    g_assert_true(vg_proc_alive(&t.dst.srv->proc));
    if (way == IDLE_PREALLOC) {
        assert_preallocated(t.src.srv);
        assert_preallocated(t.dst.srv);
    }
    assert_area_populated(t.src.srv);
    assert_area_populated(t.dst.srv);
    mt_stop(&t);
}

static void test_idle_qmp(void)
{
    migrate_idle(IDLE_QMP);
}

static void test_idle_hmp(void)
{
    migrate_idle(IDLE_HMP);
}

/* Both servers preallocate VRAM while the destination loads the stream
 * (docs/data-path.md): the same checks as the idle migration. */
static void test_idle_prealloc(void)
{
    migrate_idle(IDLE_PREALLOC);
}

/* The port of a "tcp:HOST:PORT" URI. */
static int uri_port(const char *uri)
{
    const char *colon = strrchr(uri, ':');

    g_assert_nonnull(colon);
    return atoi(colon + 1);
}

/* @side's QEMU holds exactly one TCP socket on @port, with TCP_NODELAY. */
static void assert_main_channel_nodelay(struct mt_side *side, int port,
                                        bool remote, const char *what)
{
    struct vg_tcp_census c;

    VGT_OK(vg_tcp_census(side->qemu->proc.pid, port, remote, &c, VGT_ERR));
    g_test_message("%s: %u TCP socket(s) on port %d, %u with TCP_NODELAY", what,
                   c.sockets, port, c.nodelay);
    if (c.sockets != 1 || c.nodelay != 1) {
        MT_FAIL("%s: %u migration socket(s), %u with TCP_NODELAY; expected "
                "the main channel, with TCP_NODELAY",
                what, c.sockets, c.nodelay);
    }
}

static void test_main_channel_nodelay(void)
{
    struct vg_stats st;
    struct mt t;
    int port;

    mt_start_src(&t, "mig-nodelay", NULL);
    mt_fill_vram(&t);
    mt_start_dst(&t, VGT_VRAM_ARG, NULL);
    port = uri_port(t.uri);
    mt_hold(&t, NODELAY_HOLD_BW);
    VGT_OK(vg_mig_start(t.src.qemu->qmp, t.uri, VGT_ERR));
    VGT_OK(vg_stats_wait_state(t.src.stats, "PRE_COPY", MT_STATS_TIMEOUT_MS,
                               &st, VGT_ERR));
    vg_stats_clear(&st);
    assert_main_channel_nodelay(&t.src, port, true, "source");
    assert_main_channel_nodelay(&t.dst, port, false, "destination");
    VGT_OK(mt_release(&t, VGT_ERR));
    mt_migrate_wait(&t, NULL, NULL, NULL);
    mt_stop(&t);
}

/* Where a migration's device stream goes. */
enum data_path {
    DATA_SHM,         /* the default: the servers' shared memory areas */
    DATA_QEMU_SOCKET, /* QEMU with x-migration-data-shm=off: the sockets */
    DATA_OLD_SERVER,  /* servers without data_shm (--no-data-shm) */
};

/* The version a source asked for @asked writes: that one, but 4 for 5
 * and later where its VRAM is on a GPU (whose kernels hash pages whole,
 * not as trees). */
static int64_t written_version(int64_t asked)
{
    return mt_vram_on_gpu() && asked >= MIG_TREE_HASH_VERSION
               ? MIG_TREE_HASH_VERSION - 1
               : asked;
}

/* Both servers' statistics name stream @version. */
static void assert_stream_version(struct vg_stats *sst, struct vg_stats *dst,
                                  int64_t version)
{
    g_assert_cmpint(mt_stat_int(sst, "stream_version"), ==, version);
    g_assert_cmpint(mt_stat_int(dst, "stream_version"), ==, version);
}

/* A source with VRAM filled, its server given @src_srv and its QEMU
 * @qemu_extra, migrated to a destination whose server is given @dst_srv
 * and its QEMU @qemu_extra, which attaches the vGPU; both servers'
 * statistics, equal where they must be, in @sst and @dst. */
static void migrate_filled(struct mt *t, const char *tag,
                           const char *const *src_srv,
                           const char *const *dst_srv,
                           const char *const *qemu_extra, struct vg_stats *sst,
                           struct vg_stats *dst)
{
    mt_start_src_with(t, tag, VGT_VRAM_ARG, src_srv, qemu_extra);
    mt_fill_vram(t);
    mt_start_dst_with(t, VGT_VRAM_ARG, dst_srv, qemu_extra);
    mt_listen(t);
    mt_migrate(t, NULL, NULL, NULL);
    mt_attach_dst(t);
    mt_assert_stats_equal(t, sst, dst);
}

/* After migrate_filled(): the destination's vGPU works; all stopped. */
static void finish_migrated(struct mt *t, struct vg_stats *sst,
                            struct vg_stats *dst)
{
    check_dst_works(t);
    vg_stats_clear(sst);
    vg_stats_clear(dst);
    mt_stop(t);
}

/* The device stream of a migration moves through the servers' shared
 * memory areas, every byte of it on each side, or through the sockets,
 * none of it; the VRAM arrives either way. */
static void migrate_data_path(enum data_path path)
{
    static const char *const qemu_off[] = {
        "-global", "vfio-user-pci.x-migration-data-shm=off", NULL};
    static const char *const srv_off[] = {"--no-data-shm", NULL};
    static const char *const tags[] = {"mig-shm", "mig-socket",
                                       "mig-old-server"};
    const char *const *qemu_extra = path == DATA_QEMU_SOCKET ? qemu_off : NULL;
    const char *const *srv_extra = path == DATA_OLD_SERVER ? srv_off : NULL;
    bool shm = path == DATA_SHM;
    struct vg_stats sst, dst;
    int64_t sent = 0, received = 0;
    struct mt t;

    migrate_filled(&t, tags[path], srv_extra, srv_extra, qemu_extra, &sst,
                   &dst);
    VGT_OK(vg_stats_int(&sst, "bytes_sent", &sent, VGT_ERR));
    VGT_OK(vg_stats_int(&dst, "bytes_received", &received, VGT_ERR));
    g_assert_cmpint(sent, >, 0);
    g_assert_cmpint(mt_stat_int(&sst, "shm_bytes"), ==, shm ? sent : 0);
    g_assert_cmpint(mt_stat_int(&dst, "shm_bytes"), ==, shm ? received : 0);
    assert_stream_version(&sst, &dst, written_version(MIG_STREAM_VERSION));
    finish_migrated(&t, &sst, &dst);
}

static void test_data_shm(void)
{
    migrate_data_path(DATA_SHM);
}

static void test_data_socket(void)
{
    migrate_data_path(DATA_QEMU_SOCKET);
}

static void test_data_old_server(void)
{
    migrate_data_path(DATA_OLD_SERVER);
}

/* A source writing an older stream version (for a destination that
 * reads only that one) migrates to a destination of today. */
static void test_stream_version(const void *opaque)
{
    const char *version = opaque;
    const char *const args[] = {"--stream-version", version, NULL};
    g_autofree char *tag = g_strdup_printf("mig-stream-v%s", version);
    struct vg_stats sst, dst;
    struct mt t;

    migrate_filled(&t, tag, args, NULL, NULL, &sst, &dst);
    assert_stream_version(&sst, &dst, written_version(atoi(version)));
    /* Only version 3 and later send pre-copy pages from VRAM */
    if (atoi(version) < 3) {
        g_assert_cmpint(mt_stat_int(&sst, "listed_bytes"), ==, 0);
    }
    finish_migrated(&t, &sst, &dst);
}

/* A source with --small-records (for a destination that predates 4 MiB
 * records) puts at most 2 MiB of pages in a record, and migrates to a
 * destination of today; by default a record carries up to 4 MiB. */
static void test_small_records(void)
{
    static const char *const args[] = {"--small-records", NULL};
    struct vg_stats sst, dst;
    struct mt t;

    for (int small = 1; small >= 0; small--) {
        migrate_filled(&t, small ? "mig-small-rec" : "mig-large-rec",
                       small ? args : NULL, NULL, NULL, &sst, &dst);
        g_assert_cmpint(mt_stat_int(&sst, "stream_run_max"), ==,
                        small ? 2 << 20 : 4 << 20);
        finish_migrated(&t, &sst, &dst);
    }
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/mig/basic/idle-vram", test_idle_qmp);
    g_test_add_func("/mig/basic/hmp", test_idle_hmp);
    g_test_add_func("/mig/basic/prealloc", test_idle_prealloc);
    g_test_add_func("/mig/basic/main-channel-nodelay",
                    test_main_channel_nodelay);
    g_test_add_func("/mig/basic/data-shm", test_data_shm);
    g_test_add_func("/mig/basic/data-socket", test_data_socket);
    g_test_add_func("/mig/basic/data-old-server", test_data_old_server);
    g_test_add_data_func("/mig/basic/stream-v1", "1", test_stream_version);
    g_test_add_data_func("/mig/basic/stream-v2", "2", test_stream_version);
    g_test_add_data_func("/mig/basic/stream-v4", "4", test_stream_version);
    g_test_add_data_func("/mig/basic/stream-v5", "5", test_stream_version);
    g_test_add_func("/mig/basic/small-records", test_small_records);
    return g_test_run();
}
