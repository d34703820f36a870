/*
 * test-vgpu-cmds.c -- every command of the ring, with results checked
 * byte-exact: FILL, COPY, DMA both ways (guest RAM through qtest), AXPY
 * against the same computation here, SCATTER_ADD, NOP, FENCE with its
 * MSI-X message (and none while masked), and a long FILL of most of VRAM.
 */
#include <glib.h>
#include <stdlib.h>
#include <string.h>

#include "vgpu-test.h"

#define IRQ_ALL (VGPU_IRQ_FENCE | VGPU_IRQ_ERROR)

static void cmds_start(struct vgt *t, const char *tag)
{
    vgt_start(t, tag);
    VGT_OK(vg_vgpu_ring_init(&t->gpu, &t->ram, 64, VGT_ERR));
    vgt_wr(t, VGPU_REG_IRQ_MASK, IRQ_ALL);
}

/* Run @n commands; they must all complete without error. */
static void run_ok(struct vgt *t, const struct vgpu_cmd *cmds, unsigned n)
{
    uint32_t done = vgt_rd(t, VGPU_REG_CMDS_DONE);

    g_assert_cmphex(vgt_run(t, cmds, n), ==, 0);
    g_assert_cmphex(vgt_rd(t, VGPU_REG_ERROR_CODE), ==, VGPU_ERR_NONE);
    g_assert_cmpuint(vgt_rd(t, VGPU_REG_CMDS_DONE), ==, done + n);
    g_assert_cmpuint(vgt_rd(t, VGPU_REG_RING_HEAD), ==, t->gpu.tail);
}

static void random_bytes(uint8_t *buf, size_t len, uint32_t seed)
{
    GRand *r = g_rand_new_with_seed(seed);
    size_t i;

    for (i = 0; i < len; i++) {
        buf[i] = (uint8_t)g_rand_int(r);
    }
    g_rand_free(r);
}

static void vram_write(struct vgt *t, uint64_t off, const void *buf, size_t len)
{
    vgt_memwrite(t, t->gpu.vram_addr + off, buf, len);
}

static void vram_read(struct vgt *t, uint64_t off, void *buf, size_t len)
{
    vgt_memread(t, t->gpu.vram_addr + off, buf, len);
}

static void test_fill(void)
{
    const uint64_t dst = 0x10000 + 12, len = 0x20000 - 4;
    uint8_t *back = g_malloc(len + 8);
    struct vgpu_cmd c;
    uint32_t w;
    struct vgt t;
    uint64_t i;

    cmds_start(&t, "cmds-fill");
    VGT_OK(vg_qtest_memset(t.qemu->qt, t.gpu.vram_addr + dst - 4, 0x77, len + 8,
                           VGT_ERR));
    c = vgpu_cmd_make(VGPU_OP_FILL, dst, len, 0xa5c3e1f0, 0, 0, 0);
    run_ok(&t, &c, 1);
    vram_read(&t, dst - 4, back, len + 8);
    for (i = 0; i < 4; i++) {
        g_assert_cmphex(back[i], ==, 0x77);
        g_assert_cmphex(back[len + 4 + i], ==, 0x77);
    }
    for (i = 4; i < len + 4; i += 4) {
        memcpy(&w, back + i, 4);
        g_assert_cmphex(GUINT32_FROM_LE(w), ==, 0xa5c3e1f0);
    }
    g_free(back);
    vgt_stop(&t);
}

static void test_copy(void)
{
    const uint64_t src = 0x100000 + 3, dst = 0x300000 + 5, len = 70001;
    uint8_t *data = g_malloc(len), *back = g_malloc(len + 2);
    struct vgpu_cmd c;
    struct vgt t;

    cmds_start(&t, "cmds-copy");
    random_bytes(data, len, 1);
    vram_write(&t, src, data, len);
    VGT_OK(vg_qtest_memset(t.qemu->qt, t.gpu.vram_addr + dst - 1, 0x33, len + 2,
                           VGT_ERR));
    c = vgpu_cmd_make(VGPU_OP_COPY, dst, src, len, 0, 0, 0);
    run_ok(&t, &c, 1);
    vram_read(&t, dst - 1, back, len + 2);
    g_assert_cmphex(back[0], ==, 0x33);
    g_assert_cmphex(back[len + 1], ==, 0x33);
    g_assert_cmpmem(back + 1, len, data, len);
    /* The source is untouched. */
    vram_read(&t, src, back, len);
    g_assert_cmpmem(back, len, data, len);
    g_free(data);
    g_free(back);
    vgt_stop(&t);
}

static void test_dma(void)
{
    const uint64_t len = 3 * 4096 + 123, voff = 0x250001;
    uint8_t *data = g_malloc(len), *back = g_malloc(len + 2);
    uint64_t ram_src, ram_dst;
    struct vgpu_cmd c[2];
    struct vgt t;

    cmds_start(&t, "cmds-dma");
    ram_src = vgt_alloc(&t, len) + 7;
    ram_dst = vgt_alloc(&t, len + 4096) + 9;
    random_bytes(data, len, 2);
    vgt_memwrite(&t, ram_src, data, len);
    VGT_OK(vg_qtest_memset(t.qemu->qt, ram_dst - 1, 0xee, len + 2, VGT_ERR));

    /* guest RAM -> VRAM, checked through BAR2 */
    c[0] = vgpu_cmd_make(VGPU_OP_DMA_TO_VRAM, voff, ram_src, len, 0, 0, 0);
    run_ok(&t, c, 1);
    vram_read(&t, voff, back, len);
    g_assert_cmpmem(back, len, data, len);

    /* VRAM -> guest RAM, after changing VRAM through BAR2 */
    random_bytes(data, len, 3);
    vram_write(&t, voff, data, len);
    c[0] = vgpu_cmd_make(VGPU_OP_DMA_FROM_VRAM, ram_dst, voff, len, 0, 0, 0);
    c[1] = vgpu_cmd_make(VGPU_OP_FENCE, 1, 0, 0, 0, 0, 0);
    run_ok(&t, c, 2);
    vgt_memread(&t, ram_dst - 1, back, len + 2);
    g_assert_cmphex(back[0], ==, 0xee);
    g_assert_cmphex(back[len + 1], ==, 0xee);
    g_assert_cmpmem(back + 1, len, data, len);
    g_free(data);
    g_free(back);
    vgt_stop(&t);
}

static float f32(uint32_t bits)
{
    float f;

    memcpy(&f, &bits, 4);
    return f;
}

static uint32_t bits32(float f)
{
    uint32_t b;

    memcpy(&b, &f, 4);
    return b;
}

static void put_floats(struct vgt *t, uint64_t off, const float *v, size_t n)
{
    uint32_t *le = g_new(uint32_t, n);
    size_t i;

    for (i = 0; i < n; i++) {
        le[i] = GUINT32_TO_LE(bits32(v[i]));
    }
    vram_write(t, off, le, n * 4);
    g_free(le);
}

static void get_floats(struct vgt *t, uint64_t off, float *v, size_t n)
{
    uint32_t *le = g_new(uint32_t, n);
    size_t i;

    vram_read(t, off, le, n * 4);
    for (i = 0; i < n; i++) {
        v[i] = f32(GUINT32_FROM_LE(le[i]));
    }
    g_free(le);
}

static void test_axpy(void)
{
    enum { N = 5000 };
    const uint64_t xo = 0x400000, yo = 0x500000 + 4;
    float *x = g_new(float, N), *y = g_new(float, N), *want = g_new(float, N);
    float *got = g_new(float, N);
    const float a = -1.75f;
    GRand *r = g_rand_new_with_seed(4);
    struct vgpu_cmd c;
    struct vgt t;
    int i;

    cmds_start(&t, "cmds-axpy");
    for (i = 0; i < N; i++) {
        x[i] = (float)g_rand_double_range(r, -1000, 1000);
        y[i] = (float)g_rand_double_range(r, -1000, 1000);
        want[i] = a * x[i] + y[i];
    }
    put_floats(&t, xo, x, N);
    put_floats(&t, yo, y, N);
    c = vgpu_cmd_make(VGPU_OP_AXPY, yo, xo, N, bits32(a), 0, 0);
    run_ok(&t, &c, 1);
    get_floats(&t, yo, got, N);
    for (i = 0; i < N; i++) {
        /* a*x+y rounded once or twice: within one ulp of each other */
        if (got[i] != want[i]) {
            g_assert_cmpint(abs((int)(bits32(got[i]) - bits32(want[i]))), <=,
                            1);
        }
    }
    get_floats(&t, xo, got, N);
    g_assert_cmpmem(got, N * 4, x, N * 4);
    /* x and y the same range: y = (a + 1) * y, exact for these values */
    for (i = 0; i < N; i++) {
        y[i] = (float)(i - N / 2);
    }
    put_floats(&t, yo, y, N);
    c = vgpu_cmd_make(VGPU_OP_AXPY, yo, yo, N, bits32(3.0f), 0, 0);
    run_ok(&t, &c, 1);
    get_floats(&t, yo, got, N);
    for (i = 0; i < N; i++) {
        g_assert_cmpfloat(got[i], ==, 4.0f * y[i]);
    }
    g_rand_free(r);
    g_free(x);
    g_free(y);
    g_free(want);
    g_free(got);
    vgt_stop(&t);
}

static void test_scatter_add(void)
{
    enum { ROWS = 16, ROW_FLOATS = 24, COUNT = 6 };
    const uint64_t table = 0x600000, idx_off = 0x700000;
    const uint32_t idx[COUNT] = {3, 5, 3, 15, 0, 3};
    float *tab = g_new0(float, ROWS *ROW_FLOATS);
    float *got = g_new0(float, ROWS *ROW_FLOATS);
    uint32_t le_idx[COUNT];
    struct vgpu_cmd c;
    struct vgt t;
    int i, j;

    cmds_start(&t, "cmds-scatter");
    for (i = 0; i < ROWS * ROW_FLOATS; i++) {
        tab[i] = (float)i;
    }
    put_floats(&t, table, tab, ROWS * ROW_FLOATS);
    for (i = 0; i < COUNT; i++) {
        le_idx[i] = GUINT32_TO_LE(idx[i]);
    }
    vram_write(&t, idx_off, le_idx, sizeof(le_idx));
    c = vgpu_cmd_make(VGPU_OP_SCATTER_ADD, table, ROWS, ROW_FLOATS * 4, idx_off,
                      COUNT, bits32(0.5f));
    run_ok(&t, &c, 1);
    for (i = 0; i < COUNT; i++) {
        for (j = 0; j < ROW_FLOATS; j++) {
            tab[idx[i] * ROW_FLOATS + j] += 0.5f;
        }
    }
    get_floats(&t, table, got, ROWS * ROW_FLOATS);
    g_assert_cmpmem(got, ROWS * ROW_FLOATS * 4, tab, ROWS * ROW_FLOATS * 4);
    g_free(tab);
    g_free(got);
    vgt_stop(&t);
}

static void test_nop(void)
{
    struct vgpu_cmd c[5];
    struct vgt t;
    int i;

    cmds_start(&t, "cmds-nop");
    for (i = 0; i < 5; i++) {
        c[i] = vgpu_cmd_make(VGPU_OP_NOP, 0, 0, 0, 0, 0, 0);
    }
    run_ok(&t, c, 5);
    g_assert_cmpuint(vgt_rd(&t, VGPU_REG_CMDS_DONE), ==, 5);
    g_assert_cmpuint(vgt_rd(&t, VGPU_REG_RING_HEAD), ==, 5);
    /* Wrap around the 64-entry ring. */
    for (i = 0; i < 13; i++) {
        run_ok(&t, c, 5);
    }
    g_assert_cmpuint(vgt_rd(&t, VGPU_REG_CMDS_DONE), ==, 70);
    g_assert_cmpuint(vgt_rd(&t, VGPU_REG_RING_HEAD), ==, 70 % 64);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_IRQ_STATUS), ==, 0);
    vgt_stop(&t);
}

static void test_fence(void)
{
    const uint64_t v1 = 0x123456789abcdef0ull, v2 = 42, v3 = 43;
    struct vgpu_cmd c;
    uint32_t msi = 1;
    struct vgt t;

    cmds_start(&t, "cmds-fence");
    c = vgpu_cmd_make(VGPU_OP_FENCE, v1, 0, 0, 0, 0, 0);
    run_ok(&t, &c, 1);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_FENCE_LO), ==, (uint32_t)v1);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_FENCE_HI), ==, (uint32_t)(v1 >> 32));
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_IRQ_STATUS), ==, VGPU_IRQ_FENCE);
    VGT_OK(
        vg_vgpu_msi_wait(&t.gpu, VGPU_MSIX_VEC_FENCE, VGT_TIMEOUT_MS, VGT_ERR));
    VGT_OK(vg_vgpu_msi_read(&t.gpu, VGPU_MSIX_VEC_ERROR, &msi, VGT_ERR));
    g_assert_cmphex(msi, ==, 0);

    /* Acknowledge; the next fence sends a new message. */
    vgt_wr(&t, VGPU_REG_IRQ_STATUS, VGPU_IRQ_FENCE);
    VGT_OK(vg_vgpu_msi_clear(&t.gpu, VGPU_MSIX_VEC_FENCE, VGT_ERR));
    c = vgpu_cmd_make(VGPU_OP_FENCE, v2, 0, 0, 0, 0, 0);
    run_ok(&t, &c, 1);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_FENCE_LO), ==, v2);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_FENCE_HI), ==, 0);
    VGT_OK(
        vg_vgpu_msi_wait(&t.gpu, VGPU_MSIX_VEC_FENCE, VGT_TIMEOUT_MS, VGT_ERR));

    /* Masked source: status set, no message; unmasking delivers it. */
    vgt_wr(&t, VGPU_REG_IRQ_STATUS, VGPU_IRQ_FENCE);
    VGT_OK(vg_vgpu_msi_clear(&t.gpu, VGPU_MSIX_VEC_FENCE, VGT_ERR));
    vgt_wr(&t, VGPU_REG_IRQ_MASK, VGPU_IRQ_ERROR);
    c = vgpu_cmd_make(VGPU_OP_FENCE, v3, 0, 0, 0, 0, 0);
    run_ok(&t, &c, 1);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_FENCE_LO), ==, v3);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_IRQ_STATUS), ==, VGPU_IRQ_FENCE);
    g_assert_cmpint(vg_vgpu_msi_wait(&t.gpu, VGPU_MSIX_VEC_FENCE, 300, NULL),
                    ==, -ETIMEDOUT);
    vgt_wr(&t, VGPU_REG_IRQ_MASK, IRQ_ALL);
    VGT_OK(
        vg_vgpu_msi_wait(&t.gpu, VGPU_MSIX_VEC_FENCE, VGT_TIMEOUT_MS, VGT_ERR));

    /* A masked MSI-X vector: the message waits in the PBA until unmasked. */
    vgt_wr(&t, VGPU_REG_IRQ_STATUS, VGPU_IRQ_FENCE);
    VGT_OK(vg_vgpu_msi_clear(&t.gpu, VGPU_MSIX_VEC_FENCE, VGT_ERR));
    VGT_OK(vg_pci_msix_mask(&t.gpu.pci, VGPU_MSIX_VEC_FENCE, true, VGT_ERR));
    c = vgpu_cmd_make(VGPU_OP_FENCE, v3 + 1, 0, 0, 0, 0, 0);
    run_ok(&t, &c, 1);
    g_assert_cmpint(vg_vgpu_msi_wait(&t.gpu, VGPU_MSIX_VEC_FENCE, 300, NULL),
                    ==, -ETIMEDOUT);
    VGT_OK(vg_pci_msix_mask(&t.gpu.pci, VGPU_MSIX_VEC_FENCE, false, VGT_ERR));
    VGT_OK(
        vg_vgpu_msi_wait(&t.gpu, VGPU_MSIX_VEC_FENCE, VGT_TIMEOUT_MS, VGT_ERR));
    vgt_stop(&t);
}

static void test_long_fill(void)
{
    const uint64_t len = VGT_VRAM_SIZE - VGT_PAGE_SIZE;
    const uint64_t probes[] = {0, VGT_PAGE_SIZE * 17, len / 2, len - 4096};
    uint32_t *page = g_malloc(4096);
    struct vgpu_cmd c[2];
    uint32_t status = 0;
    struct vgt t;
    size_t i, j;

    cmds_start(&t, "cmds-long");
    c[0] = vgpu_cmd_make(VGPU_OP_FILL, 0, len, 0x0badf00d, 0, 0, 0);
    c[1] = vgpu_cmd_make(VGPU_OP_FENCE, 99, 0, 0, 0, 0, 0);
    VGT_OK(vg_qtest_writel(t.qemu->qt, t.gpu.vram_addr + len, 0x5555, VGT_ERR));
    VGT_OK(vg_vgpu_submit(&t.gpu, c, 2, VGT_ERR));
    VGT_OK(vg_vgpu_wait_reg(&t.gpu, VGPU_REG_FENCE_LO, 99, VGT_TIMEOUT_MS,
                            VGT_ERR));
    VGT_OK(vg_vgpu_wait_idle(&t.gpu, VGT_TIMEOUT_MS, &status, VGT_ERR));
    g_assert_cmphex(status, ==, 0);
    VGT_OK(
        vg_vgpu_msi_wait(&t.gpu, VGPU_MSIX_VEC_FENCE, VGT_TIMEOUT_MS, VGT_ERR));
    for (i = 0; i < G_N_ELEMENTS(probes); i++) {
        vram_read(&t, probes[i], page, 4096);
        for (j = 0; j < 1024; j++) {
            g_assert_cmphex(GUINT32_FROM_LE(page[j]), ==, 0x0badf00d);
        }
    }
    vram_read(&t, len, page, 4);
    g_assert_cmphex(GUINT32_FROM_LE(page[0]), ==, 0x5555);
    g_free(page);
    vgt_stop(&t);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/vgpu/cmds/fill", test_fill);
    g_test_add_func("/vgpu/cmds/copy", test_copy);
    g_test_add_func("/vgpu/cmds/dma", test_dma);
    g_test_add_func("/vgpu/cmds/axpy", test_axpy);
    g_test_add_func("/vgpu/cmds/scatter-add", test_scatter_add);
    g_test_add_func("/vgpu/cmds/nop", test_nop);
    g_test_add_func("/vgpu/cmds/fence", test_fence);
    g_test_add_func("/vgpu/cmds/long-fill", test_long_fill);
    return g_test_run();
}
