/*
 * test-vgpu-regs.c -- the BAR0 register map of vgpu-regs.h: identity
 * values, read-only registers ignore writes, read-write registers read
 * back, RW1C interrupt status, ring configuration checks, and VRAM through
 * BAR2 (including its last page).
 */
#include <glib.h>

#include "vgpu-test.h"

#define IRQ_ALL (VGPU_IRQ_FENCE | VGPU_IRQ_ERROR)

static void test_identity(void)
{
    struct vgt t;

    vgt_start(&t, "regs-id");
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_ID), ==, VGPU_ID_MAGIC);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_VERSION), ==, VGPU_VERSION);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_VRAM_SIZE_LO), ==,
                    (uint32_t)VGT_VRAM_SIZE);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_VRAM_SIZE_HI), ==,
                    (uint32_t)(VGT_VRAM_SIZE >> 32));
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_PAGE_SIZE), ==, VGT_PAGE_SIZE);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_FEATURES), ==,
                    VGPU_FEAT_DMA | VGPU_FEAT_AXPY | VGPU_FEAT_SCATTER);
    /* Reset state */
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_RING_SIZE), ==, 0);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_RING_HEAD), ==, 0);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_RING_TAIL), ==, 0);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_STATUS), ==, 0);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_ERROR_CODE), ==, VGPU_ERR_NONE);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_IRQ_STATUS), ==, 0);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_IRQ_MASK), ==, 0);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_FENCE_LO), ==, 0);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_FENCE_HI), ==, 0);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_CMDS_DONE), ==, 0);
    vgt_stop(&t);
}

static void test_read_only(void)
{
    static const uint32_t ro[] = {
        VGPU_REG_ID,           VGPU_REG_VERSION,     VGPU_REG_VRAM_SIZE_LO,
        VGPU_REG_VRAM_SIZE_HI, VGPU_REG_PAGE_SIZE,   VGPU_REG_FEATURES,
        VGPU_REG_RING_HEAD,    VGPU_REG_FENCE_LO,    VGPU_REG_FENCE_HI,
        VGPU_REG_ERROR_CODE,   VGPU_REG_ERROR_INDEX, VGPU_REG_STATUS,
        VGPU_REG_CMDS_DONE,
    };
    uint32_t before[G_N_ELEMENTS(ro)];
    struct vgt t;
    size_t i;

    vgt_start(&t, "regs-ro");
    for (i = 0; i < G_N_ELEMENTS(ro); i++) {
        before[i] = vgt_rd(&t, ro[i]);
    }
    for (i = 0; i < G_N_ELEMENTS(ro); i++) {
        vgt_wr(&t, ro[i], 0xdeadbeef);
        vgt_wr(&t, ro[i], 0);
    }
    for (i = 0; i < G_N_ELEMENTS(ro); i++) {
        g_test_message("RO register 0x%03x", ro[i]);
        g_assert_cmphex(vgt_rd(&t, ro[i]), ==, before[i]);
    }
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_ID), ==, VGPU_ID_MAGIC);
    vgt_stop(&t);
}

static void test_read_write(void)
{
    static const uint32_t patterns[] = {0xffffffff, 0, 0xa5a5a5a5, 0x5a5a5a5a,
                                        0x12345678};
    struct vgt t;
    size_t i;

    vgt_start(&t, "regs-rw");
    for (i = 0; i < G_N_ELEMENTS(patterns); i++) {
        vgt_wr(&t, VGPU_REG_SCRATCH, patterns[i]);
        g_assert_cmphex(vgt_rd(&t, VGPU_REG_SCRATCH), ==, patterns[i]);
    }
    vgt_wr(&t, VGPU_REG_RING_BASE_LO, 0x12345640);
    vgt_wr(&t, VGPU_REG_RING_BASE_HI, 0x9);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_RING_BASE_LO), ==, 0x12345640);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_RING_BASE_HI), ==, 0x9);
    vgt_wr(&t, VGPU_REG_RING_SIZE, 256);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_RING_SIZE), ==, 256);
    vgt_wr(&t, VGPU_REG_RING_SIZE, VGPU_RING_MAX_ENTRIES);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_RING_SIZE), ==, VGPU_RING_MAX_ENTRIES);
    vgt_wr(&t, VGPU_REG_RING_SIZE, 0);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_RING_SIZE), ==, 0);
    vgt_wr(&t, VGPU_REG_RING_SIZE, 1);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_RING_SIZE), ==, 1);
    vgt_wr(&t, VGPU_REG_RING_SIZE, 16);
    vgt_wr(&t, VGPU_REG_RING_BASE_HI, 0);
    vgt_wr(&t, VGPU_REG_RING_BASE_LO, (uint32_t)vgt_alloc(&t, 16 * 64));
    vgt_wr(&t, VGPU_REG_RING_TAIL, 0);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_RING_TAIL), ==, 0);
    vgt_wr(&t, VGPU_REG_IRQ_MASK, VGPU_IRQ_FENCE);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_IRQ_MASK), ==, VGPU_IRQ_FENCE);
    vgt_wr(&t, VGPU_REG_IRQ_MASK, IRQ_ALL);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_IRQ_MASK), ==, IRQ_ALL);
    vgt_wr(&t, VGPU_REG_IRQ_MASK, 0);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_IRQ_MASK), ==, 0);
    /* No register changed the error state. */
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_ERROR_CODE), ==, VGPU_ERR_NONE);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_STATUS), ==, 0);
    vgt_stop(&t);
}

/* Accesses other than aligned 4-byte ones are ignored, reads give ones. */
static void test_bad_access(void)
{
    struct vg_qtest *qt;
    uint16_t w = 0;
    uint8_t b = 0;
    struct vgt t;

    vgt_start(&t, "regs-bad-access");
    qt = t.qemu->qt;
    VGT_OK(vg_qtest_readb(qt, t.gpu.regs_addr + VGPU_REG_ID, &b, VGT_ERR));
    g_assert_cmphex(b, ==, 0xff);
    VGT_OK(vg_qtest_readw(qt, t.gpu.regs_addr + VGPU_REG_ID + 2, &w, VGT_ERR));
    g_assert_cmphex(w, ==, 0xffff);
    VGT_OK(
        vg_qtest_writeb(qt, t.gpu.regs_addr + VGPU_REG_SCRATCH, 0x11, VGT_ERR));
    VGT_OK(vg_qtest_writew(qt, t.gpu.regs_addr + VGPU_REG_SCRATCH, 0x2222,
                           VGT_ERR));
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_SCRATCH), ==, 0);
    /* Unused offsets */
    g_assert_cmphex(vgt_rd(&t, 0x018), ==, 0xffffffff);
    g_assert_cmphex(vgt_rd(&t, 0x100), ==, 0xffffffff);
    vgt_wr(&t, 0x100, 1);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_ERROR_CODE), ==, VGPU_ERR_NONE);
    vgt_assert_alive(&t);
    vgt_stop(&t);
}

/* A FENCE with a ring set up at @t; leaves IRQ_STATUS.FENCE set. */
static void run_fence(struct vgt *t, uint64_t value)
{
    struct vgpu_cmd c = vgpu_cmd_make(VGPU_OP_FENCE, value, 0, 0, 0, 0, 0);

    g_assert_cmphex(vgt_run(t, &c, 1), ==, 0);
    g_assert_cmphex(vgt_rd(t, VGPU_REG_FENCE_LO), ==, (uint32_t)value);
}

static void test_irq_status_rw1c(void)
{
    struct vgt t;

    vgt_start(&t, "regs-rw1c");
    VGT_OK(vg_vgpu_ring_init(&t.gpu, &t.ram, 16, VGT_ERR));
    /* Writing ones to clear bits never sets them. */
    vgt_wr(&t, VGPU_REG_IRQ_STATUS, IRQ_ALL);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_IRQ_STATUS), ==, 0);
    run_fence(&t, 7);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_IRQ_STATUS), ==, VGPU_IRQ_FENCE);
    /* Writing 0, or only other bits, leaves it. */
    vgt_wr(&t, VGPU_REG_IRQ_STATUS, 0);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_IRQ_STATUS), ==, VGPU_IRQ_FENCE);
    vgt_wr(&t, VGPU_REG_IRQ_STATUS, VGPU_IRQ_ERROR);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_IRQ_STATUS), ==, VGPU_IRQ_FENCE);
    vgt_wr(&t, VGPU_REG_IRQ_STATUS, VGPU_IRQ_FENCE);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_IRQ_STATUS), ==, 0);
    /* Both bits at once: a ring error and a fence. */
    run_fence(&t, 8);
    vgt_wr(&t, VGPU_REG_RING_SIZE, 3);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_IRQ_STATUS), ==, IRQ_ALL);
    vgt_wr(&t, VGPU_REG_IRQ_STATUS, 0xffffffff);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_IRQ_STATUS), ==, 0);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_ERROR_CODE), ==, VGPU_ERR_NONE);
    vgt_stop(&t);
}

/* After a bad ring configuration write: error latched, halted, error MSI,
 * the register unchanged; then clear the error. */
static void expect_ring_config_error(struct vgt *t, uint32_t reg,
                                     uint32_t expect)
{
    g_assert_cmphex(vgt_rd(t, VGPU_REG_ERROR_CODE), ==, VGPU_ERR_RING_CONFIG);
    g_assert_cmphex(vgt_rd(t, VGPU_REG_STATUS) & VGPU_STATUS_HALTED, ==,
                    VGPU_STATUS_HALTED);
    g_assert_cmphex(vgt_rd(t, VGPU_REG_IRQ_STATUS) & VGPU_IRQ_ERROR, ==,
                    VGPU_IRQ_ERROR);
    VGT_OK(vg_vgpu_msi_wait(&t->gpu, VGPU_MSIX_VEC_ERROR, VGT_TIMEOUT_MS,
                            VGT_ERR));
    g_assert_cmphex(vgt_rd(t, reg), ==, expect);
    vgt_wr(t, VGPU_REG_IRQ_STATUS, VGPU_IRQ_ERROR);
    VGT_OK(vg_vgpu_msi_clear(&t->gpu, VGPU_MSIX_VEC_ERROR, VGT_ERR));
    g_assert_cmphex(vgt_rd(t, VGPU_REG_ERROR_CODE), ==, VGPU_ERR_NONE);
    g_assert_cmphex(vgt_rd(t, VGPU_REG_STATUS), ==, 0);
}

static void test_ring_config(void)
{
    uint64_t ring;
    struct vgt t;

    vgt_start(&t, "regs-ring-config");
    vgt_wr(&t, VGPU_REG_IRQ_MASK, IRQ_ALL);
    ring = vgt_alloc(&t, 64 * 64);
    vgt_wr(&t, VGPU_REG_RING_BASE_LO, (uint32_t)ring);
    vgt_wr(&t, VGPU_REG_RING_SIZE, 64);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_ERROR_CODE), ==, VGPU_ERR_NONE);

    vgt_wr(&t, VGPU_REG_RING_SIZE, 3); /* not a power of two */
    expect_ring_config_error(&t, VGPU_REG_RING_SIZE, 64);
    vgt_wr(&t, VGPU_REG_RING_SIZE, 96);
    expect_ring_config_error(&t, VGPU_REG_RING_SIZE, 64);
    vgt_wr(&t, VGPU_REG_RING_SIZE, VGPU_RING_MAX_ENTRIES * 2);
    expect_ring_config_error(&t, VGPU_REG_RING_SIZE, 64);
    vgt_wr(&t, VGPU_REG_RING_SIZE, 0x80000000u);
    expect_ring_config_error(&t, VGPU_REG_RING_SIZE, 64);
    vgt_wr(&t, VGPU_REG_RING_BASE_LO, (uint32_t)ring + 32); /* unaligned */
    expect_ring_config_error(&t, VGPU_REG_RING_BASE_LO, (uint32_t)ring);
    vgt_wr(&t, VGPU_REG_RING_BASE_LO, (uint32_t)ring + 1);
    expect_ring_config_error(&t, VGPU_REG_RING_BASE_LO, (uint32_t)ring);
    vgt_wr(&t, VGPU_REG_RING_TAIL, 64); /* TAIL >= SIZE */
    expect_ring_config_error(&t, VGPU_REG_RING_TAIL, 0);
    vgt_wr(&t, VGPU_REG_RING_TAIL, 0xffffffff);
    expect_ring_config_error(&t, VGPU_REG_RING_TAIL, 0);
    vgt_wr(&t, VGPU_REG_RING_SIZE, 0); /* ring off: any TAIL is >= 0 */
    vgt_wr(&t, VGPU_REG_RING_TAIL, 0);
    expect_ring_config_error(&t, VGPU_REG_RING_TAIL, 0);

    /* After all that, the ring still works. */
    vgt_wr(&t, VGPU_REG_RING_SIZE, 64);
    t.gpu.ring_addr = ring;
    t.gpu.ring_entries = 64;
    t.gpu.tail = 0;
    run_fence(&t, 0x1234);
    vgt_assert_alive(&t);
    vgt_stop(&t);
}

static void fill_pattern(uint8_t *buf, size_t len, uint32_t seed)
{
    GRand *r = g_rand_new_with_seed(seed);
    size_t i;

    for (i = 0; i < len; i++) {
        buf[i] = (uint8_t)g_rand_int(r);
    }
    g_rand_free(r);
}

static void test_vram_bar(void)
{
    const uint64_t offs[] = {0, 0x12345, VGT_VRAM_SIZE / 2 - 100,
                             VGT_VRAM_SIZE - VGT_PAGE_SIZE};
    const size_t len = VGT_PAGE_SIZE;
    uint8_t *buf = g_malloc(len), *back = g_malloc(len);
    uint32_t l = 0;
    struct vgt t;
    size_t i;

    vgt_start(&t, "regs-vram");
    for (i = 0; i < G_N_ELEMENTS(offs); i++) {
        fill_pattern(buf, len, (uint32_t)i + 1);
        vgt_memwrite(&t, t.gpu.vram_addr + offs[i], buf, len);
    }
    for (i = 0; i < G_N_ELEMENTS(offs); i++) {
        fill_pattern(buf, len, (uint32_t)i + 1);
        vgt_memread(&t, t.gpu.vram_addr + offs[i], back, len);
        g_assert_cmpmem(buf, len, back, len);
    }
    /* The very last word, with a 4-byte access. */
    VGT_OK(vg_qtest_writel(t.qemu->qt, t.gpu.vram_addr + VGT_VRAM_SIZE - 4,
                           0xcafef00d, VGT_ERR));
    VGT_OK(vg_qtest_readl(t.qemu->qt, t.gpu.vram_addr + VGT_VRAM_SIZE - 4, &l,
                          VGT_ERR));
    g_assert_cmphex(l, ==, 0xcafef00d);
    g_free(buf);
    g_free(back);
    vgt_stop(&t);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/vgpu/regs/identity", test_identity);
    g_test_add_func("/vgpu/regs/read-only", test_read_only);
    g_test_add_func("/vgpu/regs/read-write", test_read_write);
    g_test_add_func("/vgpu/regs/bad-access", test_bad_access);
    g_test_add_func("/vgpu/regs/irq-status-rw1c", test_irq_status_rw1c);
    g_test_add_func("/vgpu/regs/ring-config", test_ring_config);
    g_test_add_func("/vgpu/regs/vram-bar2", test_vram_bar);
    return g_test_run();
}
