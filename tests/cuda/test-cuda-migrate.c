/*
 * test-cuda-migrate -- live migration between two vgpu-servers with the
 * CUDA backend (the source on $VGMIG_CUDA_BACKEND, default "cuda" = GPU
 * 0; the destination on $VGMIG_CUDA_DST_BACKEND, default the same GPU),
 * through two real QEMUs, with the whole of VRAM checked byte for byte.
 *
 * The source's VRAM gets patterns (FILL), random data (DMA) and an index
 * array; then the migration starts and is held in pre-copy while batches
 * of AXPY, SCATTER_ADD (repeated indices: not idempotent) and COPY run on
 * the GPU, so pre-copy rounds must find their writes (GPU page hashing).
 * Once the last batch is done the hold is lifted.  On the destination,
 * DMA_FROM_VRAM copies every MiB of VRAM into guest RAM and the test reads
 * it: it must equal a reference that the CPU engines computed from the
 * same commands.  Both servers' checksums agree, and the source hashed
 * its pages (a GPU on the GPU, also those it sends with
 * --gpu-hash=source, and those it loads with --gpu-hash=both; with the
 * default, auto, at least the first copy on each side).  The same runs
 * between a CPU-backed and a CUDA-backed server, both ways: the stream does not
 * depend on the backend. Post-copy (docs/postcopy.md) the same ways: switched
 * over at the release with the batches' pages still on the source, slowed, so
 * that the destination's DMA of every MiB waits for pages from the page server;
 * the page server of a GPU source reads its VRAM on demand. Restore on demand
 * (docs/restore.md) the same ways: the VM is saved with "migrate file:" after
 * the batches and restored by a server that reads the file on demand, slowed on
 * each read so that the engines' DMA of every MiB waits for pages still in the
 * file; VRAM must equal the reference and the checksums agree. Skipped (TAP
 * "1..0 # SKIP") without a GPU.
 */
#include "../qtest/mig-test.h"
#include "cuda-test.h"
#include "vfio-migration/mig-stream.h"
#include "vgpu/engines.h"

#define BATCHES   6u
#define Y_OFF     (8u << 20)  /* AXPY y: 4 MiB of patterns */
#define X_OFF     (20u << 20) /* AXPY x */
#define AXPY_N    (1u << 20)  /* floats */
#define TABLE_OFF (30u << 20)
#define ROWS      1024u
#define ROW_BYTES 512u
#define IDX_OFF   (40u << 20)
#define IDX_COUNT 3000u
#define COPY_DST  (52u << 20)
#define COPY_LEN  (1u << 20)
#define HOLD_BW   (32ll << 20)

struct run {
    struct mt *t;
    uint8_t *ref; /* VRAM as the CPU engines compute it */
    unsigned batches;
    bool released;
    bool postcopy; /* switch over in post-copy at the release */
};

static uint32_t fbits(float f)
{
    uint32_t u;

    memcpy(&u, &f, 4);
    return u;
}

static void ref_wrote(void *opaque, uint64_t off, uint64_t len,
                      enum vgpu_write_kind kind)
{
}

/* Apply @c to the reference with the CPU engines (no DMA commands). */
static void ref_apply(struct run *r, const struct vgpu_cmd *c)
{
    struct vgpu_engine_env env = {r->ref,    VGT_VRAM_SIZE, NULL,
                                  ref_wrote, NULL,          NULL};
    enum vgpu_error_code code;
    struct vgpu_job job;
    uint64_t budget;

    vgpu_job_init(&job, c, 0);
    do {
        budget = 64u << 20;
    } while (vgpu_engine_run(&env, &job, &budget, &code) == VGPU_EXEC_MORE);
    g_assert_cmpint(code, ==, VGPU_ERR_NONE);
}

/* mt_fill_vram() on the source, an index array by DMA, both mirrored in
 * the reference. */
static void setup(struct run *r)
{
    g_autofree uint8_t *dma = mt_dma_data();
    g_autofree uint32_t *idx = g_malloc(IDX_COUNT * 4);
    struct vgpu_cmd c;
    uint64_t buf = 0;

    mt_fill_vram(r->t);
    for (unsigned i = 0; i < MT_FILLED_MIB; i++) {
        uint32_t pat = MT_PATTERN(i);

        for (uint32_t k = 0; k < (1u << 20); k += 4) {
            memcpy(r->ref + ((uint64_t)i << 20) + k, &pat, 4);
        }
    }
    memcpy(r->ref + ((uint64_t)MT_DMA_MIB << 20), dma, 1u << 20);
    for (unsigned i = 0; i < IDX_COUNT; i++) {
        idx[i] = (i * 40503u) % (ROWS / 4); /* each row about 12 times */
    }
    VGT_OK(vg_galloc_alloc(&r->t->ram, IDX_COUNT * 4, 4096, &buf, VGT_ERR));
    VGT_OK(vg_qtest_memwrite(r->t->src.qemu->qt, buf, idx, IDX_COUNT * 4,
                             VGT_ERR));
    c = vgpu_cmd_make(VGPU_OP_DMA_TO_VRAM, IDX_OFF, buf, IDX_COUNT * 4, 0, 0,
                      0);
    mt_run(&r->t->gpu, &c, 1);
    memcpy(r->ref + IDX_OFF, idx, IDX_COUNT * 4);
}

/* Batch @k: on the source's ring (waiting until done) and the reference. */
static void run_batch(struct run *r, unsigned k)
{
    struct vgpu_cmd c[3] = {
        vgpu_cmd_make(VGPU_OP_AXPY, Y_OFF, X_OFF, AXPY_N,
                      fbits(0.5f + (float)k / 8), 0, 0),
        vgpu_cmd_make(VGPU_OP_SCATTER_ADD, TABLE_OFF, ROWS, ROW_BYTES, IDX_OFF,
                      IDX_COUNT, fbits(0.125f * (float)k)),
        vgpu_cmd_make(VGPU_OP_COPY, COPY_DST + (k % 4) * COPY_LEN, Y_OFF,
                      COPY_LEN, 0, 0, 0),
    };

    mt_run(&r->t->gpu, c, 3);
    for (unsigned i = 0; i < 3; i++) {
        ref_apply(r, &c[i]);
    }
}

/* Poll callback: the batches while pre-copy is held, then the release. */
static int drive(const struct vg_mig_info *info, void *opaque,
                 struct vg_error *err)
{
    struct run *r = opaque;

    if (r->released || strcmp(info->status, "active") != 0) {
        return 0;
    }
    if (r->batches < BATCHES) {
        run_batch(r, ++r->batches);
        return 0;
    }
    r->released = true;
    g_test_message("%u batches ran in pre-copy; releasing%s", r->batches,
                   r->postcopy ? " in post-copy" : "");
    if (r->postcopy &&
        vg_qmp_execute(r->t->src.qemu->qmp, "migrate-start-postcopy", NULL,
                       NULL, err) < 0) {
        return -1;
    }
    return mt_release(r->t, err);
}

/* Every MiB of the destination's VRAM, by DMA into guest RAM and qtest,
 * equals the reference. */
static void check_dst_vram(struct run *r)
{
    g_autofree uint8_t *got = g_malloc(1u << 20);
    uint64_t buf = 0;

    VGT_OK(vg_galloc_alloc(&r->t->ram, 1u << 20, 4096, &buf, VGT_ERR));
    for (uint64_t mib = 0; mib < VGT_VRAM_SIZE >> 20; mib++) {
        struct vgpu_cmd c = vgpu_cmd_make(VGPU_OP_DMA_FROM_VRAM, buf, mib << 20,
                                          1u << 20, 0, 0, 0);

        mt_run(&r->t->dgpu, &c, 1);
        VGT_OK(
            vg_qtest_memread(r->t->dst.qemu->qt, buf, got, 1u << 20, VGT_ERR));
        for (uint64_t off = 0; off < (1u << 20); off += 4096) {
            if (memcmp(got + off, r->ref + (mib << 20) + off, 4096) != 0) {
                MT_FAIL("destination VRAM differs from the reference in "
                        "[%#llx, +4096)",
                        (unsigned long long)((mib << 20) + off));
            }
        }
    }
}

/* The statistics of a server started with --backend @name say so: "cpu",
 * or the GPU's description "<model> (GPU N), CUDA driver X.Y". */
static void assert_backend(const struct vg_stats *st, const char *name)
{
    g_autofree char *got = vg_stats_str(st, "backend");
    const char *colon = strchr(name, ':');
    g_autofree char *gpu =
        g_strdup_printf("(GPU %s), CUDA driver", colon ? colon + 1 : "0");

    g_test_message("backend %s: %s", name, got ? got : "(none)");
    g_assert_nonnull(got);
    if (strcmp(name, "cpu") == 0) {
        g_assert_cmpstr(got, ==, "cpu");
    } else {
        g_assert_nonnull(strstr(got, gpu));
    }
}

/* Through the shared area, a GPU copies the pages to or from it itself:
 * at least the pages filled; on the destination no more than came
 * through it (the source may read a page twice: a read that ends in a
 * run of the other kind, zero or not, is read again from there).  The
 * CPU backend copies nothing so. */
static void assert_direct(struct vg_stats *st, const char *backend, bool source)
{
    int64_t shm = 0, direct = 0;

    VGT_OK(vg_stats_int(st, "shm_bytes", &shm, VGT_ERR));
    VGT_OK(vg_stats_int(st, "gpu_direct_bytes", &direct, VGT_ERR));
    g_test_message("%s: %" G_GINT64_FORMAT
                   " bytes through the area, %" G_GINT64_FORMAT
                   " copied by the GPU directly",
                   backend, shm, direct);
    if (!source) {
        g_assert_cmpint(direct, <=, shm);
    }
    if (strcmp(backend, "cpu") == 0 || shm == 0) {
        g_assert_cmpint(direct, ==, 0);
    } else {
        g_assert_cmpint(direct, >=, (int64_t)MT_FILLED_MIB << 20);
    }
}

/* A GPU hashes the pages a source reads and a destination writes, at
 * least the pages filled (with @auto_hash, at least those of the first
 * copy); a CPU backend's server hashes them itself. */
static void assert_gpu_hashed(struct vg_stats *st, const char *backend,
                              bool auto_hash)
{
    int64_t hashed = 0, version = 0;

    VGT_OK(vg_stats_int(st, "gpu_hashed_bytes", &hashed, VGT_ERR));
    VGT_OK(vg_stats_int(st, "stream_version", &version, VGT_ERR));
    g_test_message("%s: the GPU hashed %" G_GINT64_FORMAT
                   " bytes of the pages read, stream version %" G_GINT64_FORMAT,
                   backend, hashed, version);
    /* A GPU source writes version 4 (its kernels hash pages whole); a
     * version 5 stream's page hashes are trees, which a GPU destination
     * takes on its CPUs. */
    if (strcmp(backend, "cpu") == 0 || version >= 5) {
        g_assert_cmpint(hashed, ==, 0);
    } else if (auto_hash) {
        g_assert_cmpint(hashed, >=, 1 << 20);
    } else {
        g_assert_cmpint(hashed, >=, (int64_t)MT_FILLED_MIB << 20);
    }
}

/*
 * Migrate from a server with backend @from to one with backend @to, the
 * GPU hashing every copy (the source's reads with --gpu-hash=source, the
 * destination's writes with --gpu-hash=both), or, with @auto_hash, where
 * it is faster (the default): the first copies on each side take the GPU.
 */
static void migrate(const char *from, const char *to, bool auto_hash)
{
    const char *src_args[] = {"--backend", from, "--gpu-hash=source", NULL};
    const char *dst_args[] = {"--backend", to, "--gpu-hash=both", NULL};
    struct vg_stats sst, dst;
    struct vg_mig_info info;
    int64_t hashed = 0;
    struct mt t;
    struct run r = {&t, g_malloc0(VGT_VRAM_SIZE), 0, false, false};

    g_test_message("%s -> %s%s", from, to,
                   auto_hash ? ", --gpu-hash=auto" : "");
    if (auto_hash) {
        src_args[2] = dst_args[2] = "--gpu-hash=auto";
    }
    mt_start_src(&t, "cuda-mig", src_args);
    setup(&r);
    mt_start_dst(&t, VGT_VRAM_ARG, dst_args);
    mt_hold(&t, HOLD_BW);
    VGT_OK(vg_mig_start(t.src.qemu->qmp, t.uri, VGT_ERR));
    mt_migrate_wait(&t, drive, &r, &info);
    g_assert_cmpuint(r.batches, ==, BATCHES);
    g_assert_true(info.has_vfio);
    mt_attach_dst(&t);
    mt_assert_stats_equal(&t, &sst, &dst);
    assert_backend(&sst, from);
    assert_backend(&dst, to);
    g_assert_cmpint(mt_stat_int(&sst, "stream_version"), ==,
                    strcmp(from, "cpu") == 0 ? MIG_STREAM_VERSION : 4);
    VGT_OK(vg_stats_int(&sst, "pages_hashed", &hashed, VGT_ERR));
    g_test_message("source hashed %" G_GINT64_FORMAT " pages", hashed);
    /* A GPU source hashes all of VRAM on the GPU for its baseline; a CPU
     * source takes round 0's baselines from the pages it sends and hashes
     * only what the tracker cannot see (docs/dirty-tracking.md). */
    if (!strcmp(from, "cuda")) {
        g_assert_cmpint(hashed, >=, VGT_VRAM_SIZE / VGT_PAGE_SIZE);
    }
    assert_gpu_hashed(&sst, from, auto_hash);
    assert_gpu_hashed(&dst, to, auto_hash);
    assert_direct(&sst, from, true);
    assert_direct(&dst, to, false);
    check_dst_vram(&r);
    vg_stats_clear(&sst);
    vg_stats_clear(&dst);
    g_free(r.ref);
    mt_stop(&t);
}

static bool postcopy_done(const struct vg_stats *st, void *opaque)
{
    g_autofree char *done = vg_stats_str(st, "postcopy_done");

    return done && strcmp(done, "true") == 0 && st->vram_checksum[0];
}

/* Post-copy from a server with backend @from to one with backend @to. */
static void postcopy(const char *from, const char *to)
{
    const char *src_args[] = {"--backend", from, "--fault", "postcopy-delay:20",
                              NULL};
    const char *dst_args[] = {"--backend", to, NULL};
    struct vg_stats sst, dst;
    struct vg_mig_info info;
    struct mt t;
    struct run r = {&t, g_malloc0(VGT_VRAM_SIZE), 0, false, true};
    g_autofree char *verified = NULL, *on_demand = NULL;
    int64_t pages = 0;

    g_test_message("post-copy %s -> %s", from, to);
    mt_start_src(&t, "cuda-postcopy", src_args);
    setup(&r);
    VGT_OK(
        vg_mig_set_capability(t.src.qemu->qmp, "postcopy-ram", true, VGT_ERR));
    mt_start_dst_with(&t, VGT_VRAM_ARG, dst_args, NULL);
    VGT_OK(
        vg_mig_set_capability(t.dst.qemu->qmp, "postcopy-ram", true, VGT_ERR));
    mt_listen(&t);
    mt_hold(&t, HOLD_BW);
    VGT_OK(vg_mig_start(t.src.qemu->qmp, t.uri, VGT_ERR));
    mt_migrate_wait(&t, drive, &r, &info);
    g_assert_cmpuint(r.batches, ==, BATCHES);
    mt_attach_dst(&t);
    check_dst_vram(&r);
    VGT_OK(vg_stats_wait(t.dst.stats, postcopy_done, NULL, MT_STATS_TIMEOUT_MS,
                         &dst, VGT_ERR));
    VGT_OK(vg_stats_wait(t.src.stats, postcopy_done, NULL, MT_STATS_TIMEOUT_MS,
                         &sst, VGT_ERR));
    VGT_OK(vg_stats_int(&sst, "postcopy_pages", &pages, VGT_ERR));
    verified = vg_stats_str(&dst, "postcopy_verified");
    on_demand = vg_stats_str(&dst, "postcopy_on_demand");
    g_test_message("%" G_GINT64_FORMAT " pages left to the page server; "
                   "downtime %" G_GINT64_FORMAT " ms",
                   pages, info.downtime_ms);
    assert_backend(&sst, from);
    assert_backend(&dst, to);
    g_assert_cmpint(pages, >, 0);
    g_assert_cmpstr(verified, ==, "true");
    g_assert_cmpstr(on_demand, ==, "true");
    vg_stats_clear(&sst);
    vg_stats_clear(&dst);
    g_free(r.ref);
    mt_stop(&t);
}

static void test_postcopy_cuda(void)
{
    postcopy(ct_backend_name(), ct_dst_backend_name());
}

static void test_postcopy_cpu_to_cuda(void)
{
    postcopy("cpu", ct_dst_backend_name());
}

static void test_postcopy_cuda_to_cpu(void)
{
    postcopy(ct_backend_name(), "cpu");
}

static bool restore_running(const struct vg_stats *st, void *opaque)
{
    g_autofree char *v = vg_stats_str(st, "restore_on_demand");

    return v && strcmp(v, "true") == 0;
}

static bool restore_done(const struct vg_stats *st, void *opaque)
{
    g_autofree char *done = vg_stats_str(st, "postcopy_done");

    return done && strcmp(done, "true") == 0 && st->vram_checksum[0];
}

/* Save a VM on backend @from to a file, restore it on backend @to. */
static void save_restore(const char *from, const char *to)
{
    const char *src_args[] = {"--backend", from, NULL};
    const char *dst_args[] = {"--backend", to, "--fault", "postcopy-delay:50",
                              NULL};
    struct mt t;
    struct run r = {&t, g_malloc0(VGT_VRAM_SIZE), 0, false, false};
    g_autofree char *path = NULL, *uri = NULL, *args = NULL, *done = NULL;
    g_autofree char *verified = NULL;
    struct vg_mig_info info;
    struct vg_stats sst, dst;

    g_test_message("save on %s, restore on %s", from, to);
    mt_start_src(&t, "cuda-restore", src_args);
    setup(&r);
    for (unsigned k = 1; k <= 3; k++) {
        run_batch(&r, k);
    }
    path = g_strdup_printf("%s/vm.sav", t.dir);
    uri = g_strdup_printf("file:%s", path);
    VGT_OK(vg_mig_start(t.src.qemu->qmp, uri, VGT_ERR));
    mt_migrate_wait(&t, NULL, NULL, &info);
    VGT_OK(vg_stats_wait(t.src.stats, mt_stats_done, NULL, MT_STATS_TIMEOUT_MS,
                         &sst, VGT_ERR));
    mt_start_dst_with(&t, VGT_VRAM_ARG, dst_args, NULL);
    args = g_strdup_printf("{\"uri\": \"%s\"}", uri);
    VGT_OK(vg_qmp_execute_json(t.dst.qemu->qmp, "migrate-incoming", args, NULL,
                               VGT_ERR));
    mt_attach_dst(&t);
    VGT_OK(vg_stats_wait(t.dst.stats, restore_running, NULL,
                         MT_STATS_TIMEOUT_MS, &dst, VGT_ERR));
    done = vg_stats_str(&dst, "postcopy_done");
    g_test_message("running: %" G_GINT64_FORMAT " of %" G_GINT64_FORMAT
                   " pages from the file",
                   mt_stat_int(&dst, "postcopy_fetched"),
                   mt_stat_int(&dst, "postcopy_pages"));
    g_assert_cmpstr(done, ==, "false");
    vg_stats_clear(&dst);
    check_dst_vram(&r);
    VGT_OK(vg_stats_wait(t.dst.stats, restore_done, NULL, MT_STATS_TIMEOUT_MS,
                         &dst, VGT_ERR));
    verified = vg_stats_str(&dst, "postcopy_verified");
    assert_backend(&dst, to);
    g_assert_cmpstr(verified, ==, "true");
    g_assert_cmpstr(dst.vram_checksum, ==, sst.vram_checksum);
    vg_stats_clear(&sst);
    vg_stats_clear(&dst);
    g_free(r.ref);
    mt_stop(&t);
}

static void test_restore_cuda(void)
{
    save_restore(ct_backend_name(), ct_dst_backend_name());
}

static void test_restore_cpu_to_cuda(void)
{
    save_restore("cpu", ct_dst_backend_name());
}

static void test_restore_cuda_to_cpu(void)
{
    save_restore(ct_backend_name(), "cpu");
}

static void test_cuda_to_cuda(void)
{
    migrate(ct_backend_name(), ct_dst_backend_name(), false);
}

static void test_cuda_to_cuda_auto(void)
{
    migrate(ct_backend_name(), ct_dst_backend_name(), true);
}

static void test_cpu_to_cuda(void)
{
    migrate("cpu", ct_dst_backend_name(), false);
}

static void test_cuda_to_cpu(void)
{
    migrate(ct_backend_name(), "cpu", false);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    ct_require_gpu();
    ct_require(ct_dst_backend_name());
    g_test_add_func("/cuda/migrate/cuda-to-cuda", test_cuda_to_cuda);
    g_test_add_func("/cuda/migrate/cuda-to-cuda-auto", test_cuda_to_cuda_auto);
    g_test_add_func("/cuda/migrate/cpu-to-cuda", test_cpu_to_cuda);
    g_test_add_func("/cuda/migrate/cuda-to-cpu", test_cuda_to_cpu);
    g_test_add_func("/cuda/postcopy/cuda-to-cuda", test_postcopy_cuda);
    g_test_add_func("/cuda/postcopy/cpu-to-cuda", test_postcopy_cpu_to_cuda);
    g_test_add_func("/cuda/postcopy/cuda-to-cpu", test_postcopy_cuda_to_cpu);
    g_test_add_func("/cuda/restore/cuda-to-cuda", test_restore_cuda);
    g_test_add_func("/cuda/restore/cpu-to-cuda", test_restore_cpu_to_cuda);
    g_test_add_func("/cuda/restore/cuda-to-cpu", test_restore_cuda_to_cpu);
    return g_test_run();
}
