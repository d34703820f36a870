/*
 * Unit tests of the destination's loading session (mig-load.c): a stream
 * saved from a CPU-backend vGPU is loaded into another, with the pool
 * writing and hashing large PAGES records in parallel (hash_threads 4)
 * and with one thread, fed in pieces that cut records anywhere.  VRAM
 * and the checksums must come out equal to the source's either way.
 */
#include <glib.h>
#include <string.h>

#include "vfio-migration/mig.h"

#define PAGE  (64u << 10)
#define PAGES 256u
#define VRAM  ((uint64_t)PAGES * PAGE)

static void *no_dma(void *opaque, uint64_t iova, uint64_t len, bool write)
{
    return NULL;
}

static void no_irq(void *opaque, unsigned vector)
{
}

static struct mig *new_mig(struct vgpu **gpu, unsigned threads)
{
    struct vgpu_config gc = {.vram_size = VRAM, .page_size = PAGE};
    struct vgpu_host host = {NULL, no_dma, no_irq};
    struct mig_config mc = {.precopy = MIG_PRECOPY_NONE,
                            .hash_threads = threads};
    struct vg_error err;
    struct mig *m;

    g_assert_cmpint(vgpu_new(&gc, &host, gpu, &err), ==, 0);
    mc.gpu = *gpu;
    vgpu_bar0_read(*gpu, VGPU_REG_FEATURES, &mc.features, 4);
    g_assert_cmpint(mig_new(&mc, &m, &err), ==, 0);
    return m;
}

static void set_state(struct mig *m, enum mig_state s)
{
    struct vg_error err;

    g_assert_cmpint(mig_set_state(m, s, &err), ==, 0);
}

/* Source VRAM: random pages, every 7th page zero. */
static void fill(struct vgpu *gpu)
{
    GRand *r = g_rand_new_with_seed(1234);
    uint32_t *w = (uint32_t *)vgpu_vram(gpu);

    for (uint64_t i = 0; i < VRAM / 4; i++) {
        w[i] = (i / (PAGE / 4)) % 7 ? g_rand_int(r) : 0;
    }
    g_rand_free(r);
}

/* The whole stop-copy stream of @m. */
static GByteArray *save_all(struct mig *m)
{
    GByteArray *out = g_byte_array_new();
    static uint8_t buf[1u << 20];
    struct vg_error err;
    uint32_t got;

    set_state(m, MIG_STATE_STOP);
    set_state(m, MIG_STATE_STOP_COPY);
    do {
        g_assert_cmpint(mig_read(m, buf, sizeof(buf), &got, &err), ==, 0);
        g_byte_array_append(out, buf, got);
    } while (got);
    set_state(m, MIG_STATE_STOP);
    mig_idle(m); /* the source's checksums */
    return out;
}

static void test_load(gconstpointer data)
{
    unsigned threads = GPOINTER_TO_UINT(data);
    struct vgpu *sgpu, *dgpu;
    struct mig *src = new_mig(&sgpu, 2), *dst = new_mig(&dgpu, threads);
    struct mig_stats ss, ds;
    struct vg_error err;
    g_autoptr(GByteArray) stream = NULL;
    /* Piece sizes that cut records and headers at odd places. */
    static const uint32_t pieces[] = {(1u << 20) - 7, 13, 3u << 20, 100003};

    fill(sgpu);
    stream = save_all(src);
    set_state(dst, MIG_STATE_RESUMING);
    for (size_t off = 0, i = 0; off < stream->len; i++) {
        uint32_t n = pieces[i % G_N_ELEMENTS(pieces)];

        n = MIN(n, stream->len - off);
        g_assert_cmpint(mig_write(dst, stream->data + off, n, &err), ==, 0);
        off += n;
    }
    set_state(dst, MIG_STATE_STOP);
    g_assert_cmpint(memcmp(vgpu_vram(sgpu), vgpu_vram(dgpu), VRAM), ==, 0);
    mig_get_stats(src, &ss);
    mig_get_stats(dst, &ds);
    g_assert_true(ss.have_checksums);
    g_assert_true(ds.have_checksums);
    g_assert_cmphex(ss.vram_checksum, ==, ds.vram_checksum);
    g_assert_cmphex(ss.device_state_checksum, ==, ds.device_state_checksum);
    mig_free(src);
    mig_free(dst);
    vgpu_free(sgpu);
    vgpu_free(dgpu);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_data_func("/mig/load/one-thread", GUINT_TO_POINTER(1),
                         test_load);
    g_test_add_data_func("/mig/load/pool-of-4", GUINT_TO_POINTER(4), test_load);
    return g_test_run();
}
