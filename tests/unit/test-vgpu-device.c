/*
 * test-vgpu-device.c -- the vGPU device model driven through BAR0 with a
 * fake host: guest RAM in two adjacent DMA mappings, an interrupt recorder.
 * Every command's effect is compared byte for byte with a reference model
 * of VRAM and guest RAM kept by the test.
 */
#include <errno.h>
#include <glib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "common/nt-copy.h"
#include "vgpu/cmd.h"
#include "vgpu/vgpu.h"

#define VRAM_SIZE (32u * 1024 * 1024)
#define PAGE      (64u * 1024)
#define MAP_A     0x100000ull /* IOVA of mapping A */
#define MAP_A_LEN (2u * 1024 * 1024)
#define MAP_B     (MAP_A + MAP_A_LEN) /* mapping B, adjacent to A */
#define MAP_B_LEN (1u * 1024 * 1024)
#define RING      MAP_A /* ring at the start of mapping A */
#define RING_N    64u
#define DATA      (MAP_A + 0x10000) /* guest buffers after the ring */

struct tb {
    struct vgpu *gpu;
    uint8_t *a, *b; /* guest RAM of mappings A and B */
    bool b_mapped;  /* mapping B present */
    unsigned irqs[VGPU_MSIX_VECTORS];
    uint32_t tail;  /* the driver's copy of RING_TAIL */
    uint8_t *ref;   /* reference VRAM */
    uint8_t *ref_a; /* reference guest RAM of mapping A */
};

static void *fake_dma_ptr(void *opaque, uint64_t iova, uint64_t len, bool write)
{
    struct tb *t = opaque;

    g_assert_cmpuint(len, >, 0);
    if (iova >= MAP_A && iova - MAP_A < MAP_A_LEN &&
        len <= MAP_A_LEN - (iova - MAP_A)) {
        return t->a + (iova - MAP_A);
    }
    if (t->b_mapped && iova >= MAP_B && iova - MAP_B < MAP_B_LEN &&
        len <= MAP_B_LEN - (iova - MAP_B)) {
        return t->b + (iova - MAP_B);
    }
    return NULL;
}

static void fake_raise_irq(void *opaque, unsigned vector)
{
    struct tb *t = opaque;

    g_assert_cmpuint(vector, <, VGPU_MSIX_VECTORS);
    t->irqs[vector]++;
}

static void fill_random(uint8_t *p, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        p[i] = (uint8_t)g_test_rand_int();
    }
}

static void tb_init(struct tb *t)
{
    struct vgpu_host host = {t, fake_dma_ptr, fake_raise_irq};
    struct vgpu_config cfg = {VRAM_SIZE, PAGE, "cpu", false};
    struct vg_error err = {0};

    memset(t, 0, sizeof(*t));
    t->a = g_malloc0(MAP_A_LEN);
    t->b = g_malloc0(MAP_B_LEN);
    t->b_mapped = true;
    t->ref = g_malloc(VRAM_SIZE);
    t->ref_a = g_malloc(MAP_A_LEN);
    host.opaque = t;
    g_assert_cmpint(vgpu_new(&cfg, &host, &t->gpu, &err), ==, 0);
    /* random VRAM and guest data, mirrored in the reference */
    fill_random(vgpu_vram(t->gpu), 1024 * 1024);
    memcpy(t->ref, vgpu_vram(t->gpu), VRAM_SIZE);
    fill_random(t->a + (DATA - MAP_A), 256 * 1024);
}

static void tb_fini(struct tb *t)
{
    vgpu_free(t->gpu);
    g_free(t->a);
    g_free(t->b);
    g_free(t->ref);
    g_free(t->ref_a);
}

static uint32_t rd(struct tb *t, uint64_t off)
{
    uint32_t v;

    g_assert_cmpint(vgpu_bar0_read(t->gpu, off, &v, 4), ==, 0);
    return v;
}

static void wr(struct tb *t, uint64_t off, uint32_t v)
{
    g_assert_cmpint(vgpu_bar0_write(t->gpu, off, &v, 4), ==, 0);
}

static void ring_on(struct tb *t)
{
    wr(t, VGPU_REG_RING_BASE_LO, (uint32_t)RING);
    wr(t, VGPU_REG_RING_BASE_HI, (uint32_t)(RING >> 32));
    wr(t, VGPU_REG_RING_SIZE, RING_N);
    t->tail = 0;
}

/* Put @c at the tail of the ring without telling the device. */
static void push(struct tb *t, struct vgpu_cmd c)
{
    vgpu_cmd_encode(&c, t->a + (RING - MAP_A) + t->tail * VGPU_CMD_SIZE);
    t->tail = (t->tail + 1) % RING_N;
}

static void kick(struct tb *t)
{
    wr(t, VGPU_REG_RING_TAIL, t->tail);
    wr(t, VGPU_REG_DOORBELL, 1);
}

/* Run until idle with @budget per step; returns the number of steps. */
static unsigned drain(struct tb *t, uint64_t budget)
{
    unsigned n = 1;

    while (vgpu_step(t->gpu, budget)) {
        n++;
        g_assert_cmpuint(n, <, 1000000);
    }
    return n;
}

static void check_vram(struct tb *t)
{
    g_assert_cmpmem(vgpu_vram(t->gpu), VRAM_SIZE, t->ref, VRAM_SIZE);
}

/* ---- reference model ---- */

static void ref_fill(uint8_t *m, uint64_t dst, uint64_t len, uint32_t pat)
{
    uint64_t i;

    for (i = 0; i < len; i++) {
        m[dst + i] = (uint8_t)(pat >> (8 * (i % 4)));
    }
}

static float getf(const uint8_t *p)
{
    float f;

    memcpy(&f, p, 4);
    return f;
}

static void putf(uint8_t *p, float f)
{
    memcpy(p, &f, 4);
}

static float bits_f(uint32_t b)
{
    float f;

    memcpy(&f, &b, 4);
    return f;
}

static void ref_axpy(uint8_t *m, uint64_t y, uint64_t x, uint64_t n, uint32_t a)
{
    uint64_t i;

    for (i = 0; i < n; i++) {
        float ax = bits_f(a) * getf(m + x + 4 * i);

        putf(m + y + 4 * i, ax + getf(m + y + 4 * i));
    }
}

static void ref_scatter(uint8_t *m, uint64_t table, uint64_t row_bytes,
                        uint64_t idx, uint64_t count, uint32_t v)
{
    uint64_t i, j;

    for (i = 0; i < count; i++) {
        uint32_t row;

        memcpy(&row, m + idx + 4 * i, 4);
        for (j = 0; j < row_bytes; j += 4) {
            uint8_t *p = m + table + row * row_bytes + j;

            putf(p, getf(p) + bits_f(v));
        }
    }
}

/* Small float values in VRAM [off, off + 4n), mirrored in the reference. */
static void put_floats(struct tb *t, uint64_t off, uint64_t n)
{
    uint64_t i;

    for (i = 0; i < n; i++) {
        putf(vgpu_vram(t->gpu) + off + 4 * i,
             (float)g_test_rand_double_range(-100, 100));
    }
    memcpy(t->ref + off, vgpu_vram(t->gpu) + off, 4 * n);
}

/* ---- tests ---- */

static void test_identity_regs(void)
{
    struct tb t;
    struct vgpu_stats st;
    uint32_t v = 0;

    tb_init(&t);
    g_assert_cmphex(rd(&t, VGPU_REG_ID), ==, VGPU_ID_MAGIC);
    g_assert_cmphex(rd(&t, VGPU_REG_VERSION), ==, VGPU_VERSION);
    g_assert_cmphex(rd(&t, VGPU_REG_VRAM_SIZE_LO), ==, VRAM_SIZE);
    g_assert_cmphex(rd(&t, VGPU_REG_VRAM_SIZE_HI), ==, 0);
    g_assert_cmphex(rd(&t, VGPU_REG_PAGE_SIZE), ==, PAGE);
    g_assert_cmphex(rd(&t, VGPU_REG_FEATURES), ==,
                    VGPU_FEAT_DMA | VGPU_FEAT_AXPY | VGPU_FEAT_SCATTER);
    /* RO: writes ignored */
    wr(&t, VGPU_REG_ID, 0);
    wr(&t, VGPU_REG_RING_HEAD, 5);
    wr(&t, VGPU_REG_FENCE_LO, 5);
    wr(&t, VGPU_REG_ERROR_CODE, 5);
    g_assert_cmphex(rd(&t, VGPU_REG_ID), ==, VGPU_ID_MAGIC);
    g_assert_cmphex(rd(&t, VGPU_REG_RING_HEAD), ==, 0);
    g_assert_cmphex(rd(&t, VGPU_REG_FENCE_LO), ==, 0);
    g_assert_cmphex(rd(&t, VGPU_REG_ERROR_CODE), ==, 0);
    /* RW */
    wr(&t, VGPU_REG_SCRATCH, 0xa5a5f00d);
    g_assert_cmphex(rd(&t, VGPU_REG_SCRATCH), ==, 0xa5a5f00d);
    wr(&t, VGPU_REG_IRQ_MASK, 0xffffffff);
    g_assert_cmphex(rd(&t, VGPU_REG_IRQ_MASK), ==,
                    VGPU_IRQ_FENCE | VGPU_IRQ_ERROR);
    /* WO reads as 0 */
    wr(&t, VGPU_REG_DOORBELL, 0x1234);
    g_assert_cmphex(rd(&t, VGPU_REG_DOORBELL), ==, 0);
    /* bad accesses: ignored, counted, reads all ones */
    g_assert_cmpint(vgpu_bar0_read(t.gpu, VGPU_REG_ID, &v, 2), ==, -EINVAL);
    g_assert_cmphex(v & 0xffff, ==, 0xffff);
    v = 0;
    g_assert_cmpint(vgpu_bar0_read(t.gpu, 0x2, &v, 4), ==, -EINVAL);
    g_assert_cmphex(v, ==, 0xffffffff);
    g_assert_cmpint(vgpu_bar0_read(t.gpu, 0x018, &v, 4), ==, -EINVAL);
    g_assert_cmpint(vgpu_bar0_read(t.gpu, VGPU_MSIX_TABLE_OFFSET, &v, 4), ==,
                    -EINVAL);
    g_assert_cmpint(vgpu_bar0_write(t.gpu, VGPU_REG_SCRATCH + 1, &v, 4), ==,
                    -EINVAL);
    g_assert_cmpint(vgpu_bar0_write(t.gpu, VGPU_REG_SCRATCH, &v, 8), ==,
                    -EINVAL);
    g_assert_cmpint(vgpu_bar0_write(t.gpu, 0x05c, &v, 4), ==, -EINVAL);
    g_assert_cmphex(rd(&t, VGPU_REG_SCRATCH), ==, 0xa5a5f00d);
    vgpu_get_stats(t.gpu, &st);
    g_assert_cmpuint(st.bad_reg_access, ==, 7);
    tb_fini(&t);
}

static void expect_error(struct tb *t, uint32_t code, uint32_t index)
{
    g_assert_cmpuint(rd(t, VGPU_REG_ERROR_CODE), ==, code);
    g_assert_cmphex(rd(t, VGPU_REG_ERROR_INDEX), ==, index);
    g_assert_true(rd(t, VGPU_REG_STATUS) & VGPU_STATUS_HALTED);
    g_assert_true(rd(t, VGPU_REG_IRQ_STATUS) & VGPU_IRQ_ERROR);
}

static void clear_error(struct tb *t)
{
    wr(t, VGPU_REG_IRQ_STATUS, VGPU_IRQ_ERROR);
    g_assert_cmpuint(rd(t, VGPU_REG_ERROR_CODE), ==, VGPU_ERR_NONE);
    g_assert_false(rd(t, VGPU_REG_STATUS) & VGPU_STATUS_HALTED);
    g_assert_false(rd(t, VGPU_REG_IRQ_STATUS) & VGPU_IRQ_ERROR);
}

static void test_ring_config(void)
{
    struct tb t;

    tb_init(&t);
    wr(&t, VGPU_REG_IRQ_MASK, VGPU_IRQ_ERROR);
    wr(&t, VGPU_REG_RING_SIZE, 16);
    wr(&t, VGPU_REG_RING_SIZE, 3); /* not a power of two */
    expect_error(&t, VGPU_ERR_RING_CONFIG, VGPU_ERROR_INDEX_NONE);
    g_assert_cmpuint(t.irqs[VGPU_MSIX_VEC_ERROR], ==, 1);
    g_assert_cmpuint(rd(&t, VGPU_REG_RING_SIZE), ==, 16);
    /* a second error does not replace the first, nor re-raise */
    wr(&t, VGPU_REG_RING_TAIL, 99);
    g_assert_cmpuint(t.irqs[VGPU_MSIX_VEC_ERROR], ==, 1);
    clear_error(&t);
    wr(&t, VGPU_REG_RING_SIZE, VGPU_RING_MAX_ENTRIES * 2);
    expect_error(&t, VGPU_ERR_RING_CONFIG, VGPU_ERROR_INDEX_NONE);
    g_assert_cmpuint(t.irqs[VGPU_MSIX_VEC_ERROR], ==, 2);
    clear_error(&t);
    wr(&t, VGPU_REG_RING_SIZE, VGPU_RING_MAX_ENTRIES);
    g_assert_cmpuint(rd(&t, VGPU_REG_RING_SIZE), ==, VGPU_RING_MAX_ENTRIES);
    wr(&t, VGPU_REG_RING_BASE_LO, 0x1020); /* not 64-aligned */
    expect_error(&t, VGPU_ERR_RING_CONFIG, VGPU_ERROR_INDEX_NONE);
    g_assert_cmphex(rd(&t, VGPU_REG_RING_BASE_LO), ==, 0);
    clear_error(&t);
    wr(&t, VGPU_REG_RING_TAIL, VGPU_RING_MAX_ENTRIES); /* == size */
    expect_error(&t, VGPU_ERR_RING_CONFIG, VGPU_ERROR_INDEX_NONE);
    clear_error(&t);
    wr(&t, VGPU_REG_RING_TAIL, 5);
    g_assert_cmpuint(rd(&t, VGPU_REG_RING_TAIL), ==, 5);
    g_assert_true(rd(&t, VGPU_REG_STATUS) & VGPU_STATUS_BUSY);
    /* writing the base restarts the ring at 0 */
    wr(&t, VGPU_REG_RING_BASE_HI, 1);
    g_assert_cmphex(rd(&t, VGPU_REG_RING_BASE_HI), ==, 1);
    g_assert_cmpuint(rd(&t, VGPU_REG_RING_TAIL), ==, 0);
    g_assert_cmpuint(rd(&t, VGPU_REG_RING_HEAD), ==, 0);
    wr(&t, VGPU_REG_RING_SIZE, 0);
    wr(&t, VGPU_REG_RING_TAIL, 0); /* any tail is bad with the ring off */
    expect_error(&t, VGPU_ERR_RING_CONFIG, VGPU_ERROR_INDEX_NONE);
    tb_fini(&t);
}

/* Run one of each data command, with @budget per step, and compare. */
static void test_commands(gconstpointer data)
{
    uint64_t budget = GPOINTER_TO_UINT(data);
    struct vgpu_stats st;
    uint64_t written = 0;
    uint32_t idx[6] = {3, 0, 3, 7, 1, 3};
    struct tb t;
    unsigned op;

    tb_init(&t);
    ring_on(&t);
    memcpy(t.ref_a, t.a, MAP_A_LEN);
    push(&t, vgpu_cmd_make(VGPU_OP_NOP, 0, 0, 0, 0, 0, 0));
    /* FILL [0x1000, +0x30004) */
    push(&t, vgpu_cmd_make(VGPU_OP_FILL, 0x1000, 0x30004, 0x11223344, 0, 0, 0));
    ref_fill(t.ref, 0x1000, 0x30004, 0x11223344);
    written += 0x30004;
    /* COPY odd sizes and offsets */
    push(&t, vgpu_cmd_make(VGPU_OP_COPY, 0x50003, 0x1fff1, 0x2345f, 0, 0, 0));
    memcpy(t.ref + 0x50003, t.ref + 0x1fff1, 0x2345f);
    written += 0x2345f;
    /* DMA in: 150001 bytes of guest data */
    push(&t, vgpu_cmd_make(VGPU_OP_DMA_TO_VRAM, 0x80001, DATA + 7, 150001, 0, 0,
                           0));
    memcpy(t.ref + 0x80001, t.a + (DATA - MAP_A) + 7, 150001);
    written += 150001;
    /* DMA out: VRAM to guest RAM */
    push(&t, vgpu_cmd_make(VGPU_OP_DMA_FROM_VRAM, DATA + 0x30000 + 3, 0x1003,
                           99999, 0, 0, 0));
    /* AXPY, distinct x and y; then x == y */
    put_floats(&t, 0x100000, 40000);
    put_floats(&t, 0x140000, 40000);
    push(&t, vgpu_cmd_make(VGPU_OP_AXPY, 0x100000, 0x140000, 40000, 0x3fc00000,
                           0, 0));
    ref_axpy(t.ref, 0x100000, 0x140000, 40000, 0x3fc00000);
    push(&t, vgpu_cmd_make(VGPU_OP_AXPY, 0x140000, 0x140000, 1000, 0xc0000000,
                           0, 0));
    written += 4 * 41000;
    /* SCATTER_ADD: 8 rows of 0x2004 bytes, indices with repeats */
    put_floats(&t, 0x200000, 8 * 0x2004 / 4);
    memcpy(vgpu_vram(t.gpu) + 0x220000, idx, sizeof(idx));
    memcpy(t.ref + 0x220000, idx, sizeof(idx));
    push(&t, vgpu_cmd_make(VGPU_OP_SCATTER_ADD, 0x200000, 8, 0x2004, 0x220000,
                           6, 0x40490fdb));
    written += 6 * 0x2004;
    push(&t, vgpu_cmd_make(VGPU_OP_FENCE, 42, 0, 0, 0, 0, 0));
    kick(&t);
    g_assert_cmpuint(drain(&t, budget), >=, budget == 1 ? 100000 : 1);

    /* the reference for ops that read what earlier ops wrote */
    memcpy(t.ref_a + (DATA - MAP_A) + 0x30000 + 3, t.ref + 0x1003, 99999);
    ref_axpy(t.ref, 0x140000, 0x140000, 1000, 0xc0000000);
    ref_scatter(t.ref, 0x200000, 0x2004, 0x220000, 6, 0x40490fdb);
    check_vram(&t);
    g_assert_cmpmem(t.a + (DATA - MAP_A), MAP_A_LEN - (DATA - MAP_A),
                    t.ref_a + (DATA - MAP_A), MAP_A_LEN - (DATA - MAP_A));
    g_assert_cmpuint(rd(&t, VGPU_REG_CMDS_DONE), ==, 9);
    g_assert_cmpuint(rd(&t, VGPU_REG_RING_HEAD), ==, 9);
    g_assert_cmpuint(rd(&t, VGPU_REG_FENCE_LO), ==, 42);
    g_assert_cmpuint(rd(&t, VGPU_REG_STATUS), ==, 0);
    g_assert_false(vgpu_busy(t.gpu));
    vgpu_get_stats(t.gpu, &st);
    g_assert_cmpuint(st.cmds_done, ==, 9);
    g_assert_cmpuint(st.cmds_failed, ==, 0);
    g_assert_cmpuint(st.bytes_written, ==, written);
    for (op = 0; op < VGPU_OP_COUNT; op++) {
        g_assert_cmpuint(st.cmds_by_op[op], ==, op == VGPU_OP_AXPY ? 2 : 1);
    }
    tb_fini(&t);
}

static void test_fence_irq(void)
{
    struct tb t;

    tb_init(&t);
    ring_on(&t);
    wr(&t, VGPU_REG_IRQ_MASK, VGPU_IRQ_FENCE);
    push(&t,
         vgpu_cmd_make(VGPU_OP_FENCE, 0x123456789abcdef0ull, 0, 0, 0, 0, 0));
    kick(&t);
    drain(&t, 1 << 20);
    g_assert_cmphex(rd(&t, VGPU_REG_FENCE_LO), ==, 0x9abcdef0);
    g_assert_cmphex(rd(&t, VGPU_REG_FENCE_HI), ==, 0x12345678);
    g_assert_cmphex(rd(&t, VGPU_REG_IRQ_STATUS), ==, VGPU_IRQ_FENCE);
    g_assert_cmpuint(t.irqs[VGPU_MSIX_VEC_FENCE], ==, 1);
    g_assert_cmpuint(t.irqs[VGPU_MSIX_VEC_ERROR], ==, 0);
    /* status still set: the next fence raises no new interrupt */
    push(&t, vgpu_cmd_make(VGPU_OP_FENCE, 2, 0, 0, 0, 0, 0));
    kick(&t);
    drain(&t, 1 << 20);
    g_assert_cmpuint(rd(&t, VGPU_REG_FENCE_LO), ==, 2);
    g_assert_cmpuint(t.irqs[VGPU_MSIX_VEC_FENCE], ==, 1);
    /* acknowledged: the next one does */
    wr(&t, VGPU_REG_IRQ_STATUS, VGPU_IRQ_FENCE);
    g_assert_cmphex(rd(&t, VGPU_REG_IRQ_STATUS), ==, 0);
    push(&t, vgpu_cmd_make(VGPU_OP_FENCE, 3, 0, 0, 0, 0, 0));
    kick(&t);
    drain(&t, 1 << 20);
    g_assert_cmpuint(t.irqs[VGPU_MSIX_VEC_FENCE], ==, 2);
    tb_fini(&t);
}

static void test_masked_irq(void)
{
    struct vgpu_stats st;
    struct tb t;

    tb_init(&t);
    ring_on(&t);
    push(&t, vgpu_cmd_make(VGPU_OP_FENCE, 7, 0, 0, 0, 0, 0));
    push(&t, vgpu_cmd_make(0x77, 0, 0, 0, 0, 0, 0));
    kick(&t);
    drain(&t, 1 << 20);
    g_assert_cmphex(rd(&t, VGPU_REG_IRQ_STATUS), ==,
                    VGPU_IRQ_FENCE | VGPU_IRQ_ERROR);
    g_assert_cmpuint(t.irqs[0] + t.irqs[1], ==, 0);
    /* unmasking a pending source delivers it once */
    wr(&t, VGPU_REG_IRQ_MASK, VGPU_IRQ_ERROR);
    g_assert_cmpuint(t.irqs[VGPU_MSIX_VEC_ERROR], ==, 1);
    g_assert_cmpuint(t.irqs[VGPU_MSIX_VEC_FENCE], ==, 0);
    wr(&t, VGPU_REG_IRQ_MASK, VGPU_IRQ_ERROR | VGPU_IRQ_FENCE);
    g_assert_cmpuint(t.irqs[VGPU_MSIX_VEC_FENCE], ==, 1);
    g_assert_cmpuint(t.irqs[VGPU_MSIX_VEC_ERROR], ==, 1);
    vgpu_get_stats(t.gpu, &st);
    g_assert_cmpuint(st.irqs_raised, ==, 2);
    g_assert_cmpuint(st.fences, ==, 1);
    tb_fini(&t);
}

/* A bad entry halts the ring past it; clearing the error resumes. */
static void test_bad_entry_resume(void)
{
    struct vgpu_stats st;
    struct tb t;

    tb_init(&t);
    ring_on(&t);
    wr(&t, VGPU_REG_IRQ_MASK, VGPU_IRQ_ERROR);
    push(&t, vgpu_cmd_make(VGPU_OP_FILL, 0, 64, 0xaaaaaaaa, 0, 0, 0));
    push(&t, vgpu_cmd_make(VGPU_OP_FILL, 2, 64, 0xbbbbbbbb, 0, 0, 0));
    push(&t, vgpu_cmd_make(VGPU_OP_FILL, 128, 64, 0xcccccccc, 0, 0, 0));
    kick(&t);
    drain(&t, 1 << 20);
    ref_fill(t.ref, 0, 64, 0xaaaaaaaa);
    check_vram(&t);
    expect_error(&t, VGPU_ERR_ALIGNMENT, 1);
    g_assert_cmpuint(rd(&t, VGPU_REG_RING_HEAD), ==, 2);
    g_assert_cmpuint(rd(&t, VGPU_REG_CMDS_DONE), ==, 1);
    g_assert_cmpuint(t.irqs[VGPU_MSIX_VEC_ERROR], ==, 1);
    g_assert_true(rd(&t, VGPU_REG_STATUS) & VGPU_STATUS_BUSY);
    g_assert_false(vgpu_busy(t.gpu));
    g_assert_false(vgpu_step(t.gpu, 1 << 20));
    clear_error(&t);
    g_assert_true(vgpu_busy(t.gpu));
    drain(&t, 1 << 20);
    ref_fill(t.ref, 128, 64, 0xcccccccc);
    check_vram(&t);
    g_assert_cmpuint(rd(&t, VGPU_REG_CMDS_DONE), ==, 2);
    g_assert_cmpuint(rd(&t, VGPU_REG_RING_HEAD), ==, 3);
    vgpu_get_stats(t.gpu, &st);
    g_assert_cmpuint(st.cmds_failed, ==, 1);
    tb_fini(&t);
}

static void run_one_expect_error(struct tb *t, struct vgpu_cmd c, uint32_t code)
{
    uint32_t index = t->tail;

    push(t, c);
    kick(t);
    drain(t, 1 << 20);
    expect_error(t, code, index);
    clear_error(t);
}

static void test_exec_faults(void)
{
    uint32_t idx[3] = {0, 4, 1};
    struct tb t;

    tb_init(&t);
    ring_on(&t);
    /* unmapped IOVA, both directions */
    run_one_expect_error(
        &t, vgpu_cmd_make(VGPU_OP_DMA_TO_VRAM, 0, 0x5000, 16, 0, 0, 0),
        VGPU_ERR_DMA_FAULT);
    run_one_expect_error(
        &t, vgpu_cmd_make(VGPU_OP_DMA_FROM_VRAM, 0x5000, 0, 16, 0, 0, 0),
        VGPU_ERR_DMA_FAULT);
    /* mapped, but across two mappings */
    run_one_expect_error(
        &t, vgpu_cmd_make(VGPU_OP_DMA_TO_VRAM, 0, MAP_B - 8, 16, 0, 0, 0),
        VGPU_ERR_DMA_FAULT);
    /* chunk-aligned across A and B: each 64 KiB chunk alone is mapped, the
     * range is not in one mapping, so nothing may be copied */
    run_one_expect_error(&t,
                         vgpu_cmd_make(VGPU_OP_DMA_TO_VRAM, 0x300000,
                                       MAP_B - 0x10000, 0x20000, 0, 0, 0),
                         VGPU_ERR_DMA_FAULT);
    check_vram(&t);
    /* wholly in B works */
    push(&t, vgpu_cmd_make(VGPU_OP_DMA_FROM_VRAM, MAP_B, 0x100, 16, 0, 0, 0));
    kick(&t);
    drain(&t, 1 << 20);
    g_assert_cmpmem(t.b, 16, t.ref + 0x100, 16);
    check_vram(&t);
    /* SCATTER_ADD index 4 >= rows 4: row 0 updated, row 1 not */
    put_floats(&t, 0x10000, 4 * 16);
    memcpy(vgpu_vram(t.gpu) + 0x20000, idx, sizeof(idx));
    memcpy(t.ref + 0x20000, idx, sizeof(idx));
    run_one_expect_error(&t,
                         vgpu_cmd_make(VGPU_OP_SCATTER_ADD, 0x10000, 4, 64,
                                       0x20000, 3, 0x3f800000),
                         VGPU_ERR_INDEX_RANGE);
    ref_scatter(t.ref, 0x10000, 64, 0x20000, 1, 0x3f800000);
    check_vram(&t);
    tb_fini(&t);
}

/* Mapping B disappears between slices of a DMA into it. */
static void test_dma_unmapped_midway(void)
{
    struct tb t;

    tb_init(&t);
    ring_on(&t);
    push(&t,
         vgpu_cmd_make(VGPU_OP_DMA_FROM_VRAM, MAP_B, 0, MAP_B_LEN, 0, 0, 0));
    kick(&t);
    g_assert_true(vgpu_step(t.gpu, 256 * 1024));
    g_assert_cmpuint(rd(&t, VGPU_REG_ERROR_CODE), ==, 0);
    t.b_mapped = false;
    drain(&t, 256 * 1024);
    expect_error(&t, VGPU_ERR_DMA_FAULT, 0);
    g_assert_cmpmem(t.b, 128 * 1024, t.ref, 128 * 1024);
    tb_fini(&t);
}

static void test_ring_fetch_fault(void)
{
    struct tb t;

    tb_init(&t);
    wr(&t, VGPU_REG_RING_BASE_LO, 0x40000);
    wr(&t, VGPU_REG_RING_SIZE, 4);
    wr(&t, VGPU_REG_RING_TAIL, 2);
    wr(&t, VGPU_REG_DOORBELL, 1);
    drain(&t, 1 << 20);
    expect_error(&t, VGPU_ERR_RING_FETCH, 0);
    g_assert_cmpuint(rd(&t, VGPU_REG_RING_HEAD), ==, 1);
    /* a ring whose end wraps the address space cannot be fetched */
    clear_error(&t);
    wr(&t, VGPU_REG_RING_BASE_LO, 0xffffffc0);
    wr(&t, VGPU_REG_RING_BASE_HI, 0xffffffff);
    wr(&t, VGPU_REG_RING_SIZE, 4);
    wr(&t, VGPU_REG_RING_TAIL, 2);
    wr(&t, VGPU_REG_DOORBELL, 1);
    drain(&t, 1 << 20);
    expect_error(&t, VGPU_ERR_RING_FETCH, 0);
    tb_fini(&t);
}

static void test_doorbell_needed(void)
{
    struct tb t;

    tb_init(&t);
    ring_on(&t);
    push(&t, vgpu_cmd_make(VGPU_OP_FILL, 0, 64, 1, 0, 0, 0));
    wr(&t, VGPU_REG_RING_TAIL, t.tail);
    g_assert_false(vgpu_busy(t.gpu));
    g_assert_false(vgpu_step(t.gpu, 1 << 20));
    g_assert_cmpuint(rd(&t, VGPU_REG_RING_HEAD), ==, 0);
    wr(&t, VGPU_REG_DOORBELL, 0);
    g_assert_true(vgpu_busy(t.gpu));
    drain(&t, 1 << 20);
    ref_fill(t.ref, 0, 64, 1);
    check_vram(&t);
    /* the ring drained: the next TAIL write again needs a doorbell */
    push(&t, vgpu_cmd_make(VGPU_OP_FILL, 64, 64, 2, 0, 0, 0));
    wr(&t, VGPU_REG_RING_TAIL, t.tail);
    g_assert_false(vgpu_step(t.gpu, 1 << 20));
    g_assert_cmpuint(rd(&t, VGPU_REG_RING_HEAD), ==, 1);
    check_vram(&t);
    tb_fini(&t);
}

/* The ring wraps around: 3 rounds through a 64-entry ring. */
static void test_ring_wrap(void)
{
    struct tb t;
    unsigned i;

    tb_init(&t);
    ring_on(&t);
    for (i = 0; i < 3 * RING_N; i++) {
        push(&t, vgpu_cmd_make(VGPU_OP_FILL, 4 * i, 4, i, 0, 0, 0));
        ref_fill(t.ref, 4 * i, 4, i);
        if (i % 50 == 49) {
            kick(&t);
            drain(&t, 1 << 20);
        }
    }
    kick(&t);
    drain(&t, 1 << 20);
    check_vram(&t);
    g_assert_cmpuint(rd(&t, VGPU_REG_CMDS_DONE), ==, 3 * RING_N);
    g_assert_cmpuint(rd(&t, VGPU_REG_RING_HEAD), ==, 0);
    tb_fini(&t);
}

static void test_slicing(void)
{
    uint64_t len = 16u * 1024 * 1024;
    struct tb t;
    unsigned steps = 0;

    tb_init(&t);
    ring_on(&t);
    push(&t, vgpu_cmd_make(VGPU_OP_FILL, 0x100000, len, 0x5a5a1234, 0, 0, 0));
    kick(&t);
    while (vgpu_step(t.gpu, 1024 * 1024)) {
        steps++;
        g_assert_true(rd(&t, VGPU_REG_STATUS) & VGPU_STATUS_BUSY);
        g_assert_cmpuint(vgpu_vram(t.gpu)[0x100000 + len - 1], ==,
                         t.ref[0x100000 + len - 1]);
        g_assert_cmpuint(steps, <, 100);
    }
    steps++;
    g_assert_cmpuint(steps, >=, 16);
    g_assert_cmpuint(steps, <=, 18);
    ref_fill(t.ref, 0x100000, len, 0x5a5a1234);
    check_vram(&t);
    tb_fini(&t);
}

static void test_reset(void)
{
    struct tb t;

    tb_init(&t);
    ring_on(&t);
    wr(&t, VGPU_REG_IRQ_MASK, VGPU_IRQ_FENCE);
    wr(&t, VGPU_REG_SCRATCH, 9);
    push(&t, vgpu_cmd_make(VGPU_OP_FILL, 0, 8u << 20, 0x01020304, 0, 0, 0));
    push(&t, vgpu_cmd_make(VGPU_OP_FENCE, 5, 0, 0, 0, 0, 0));
    push(&t, vgpu_cmd_make(0x99, 0, 0, 0, 0, 0, 0));
    kick(&t);
    vgpu_step(t.gpu, 1 << 20); /* FILL half done */
    memcpy(t.ref, vgpu_vram(t.gpu), VRAM_SIZE);
    vgpu_reset(t.gpu);
    g_assert_false(vgpu_busy(t.gpu));
    g_assert_false(vgpu_step(t.gpu, UINT64_MAX));
    check_vram(&t); /* kept, and the dropped FILL did not continue */
    g_assert_cmphex(rd(&t, VGPU_REG_RING_BASE_LO), ==, 0);
    g_assert_cmphex(rd(&t, VGPU_REG_RING_SIZE), ==, 0);
    g_assert_cmphex(rd(&t, VGPU_REG_RING_HEAD), ==, 0);
    g_assert_cmphex(rd(&t, VGPU_REG_RING_TAIL), ==, 0);
    g_assert_cmphex(rd(&t, VGPU_REG_IRQ_MASK), ==, 0);
    g_assert_cmphex(rd(&t, VGPU_REG_SCRATCH), ==, 0);
    g_assert_cmphex(rd(&t, VGPU_REG_STATUS), ==, 0);
    g_assert_cmphex(rd(&t, VGPU_REG_FENCE_LO), ==, 0);
    g_assert_cmphex(rd(&t, VGPU_REG_CMDS_DONE), ==, 0);
    g_assert_cmphex(rd(&t, VGPU_REG_ID), ==, VGPU_ID_MAGIC);
    /* the device works after reset */
    ring_on(&t);
    push(&t, vgpu_cmd_make(VGPU_OP_FENCE, 6, 0, 0, 0, 0, 0));
    kick(&t);
    drain(&t, 1 << 20);
    g_assert_cmpuint(rd(&t, VGPU_REG_FENCE_LO), ==, 6);
    tb_fini(&t);
}

static void test_bar2_and_fd(void)
{
    uint8_t buf[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    uint8_t out[16];
    struct tb t;
    uint8_t *map;

    tb_init(&t);
    g_assert_cmpint(vgpu_bar2_write(t.gpu, VRAM_SIZE - 16, buf, 16), ==, 0);
    g_assert_cmpint(vgpu_bar2_read(t.gpu, VRAM_SIZE - 16, out, 16), ==, 0);
    g_assert_cmpmem(out, 16, buf, 16);
    g_assert_cmpint(vgpu_bar2_write(t.gpu, VRAM_SIZE - 15, buf, 16), ==,
                    -EINVAL);
    g_assert_cmpint(vgpu_bar2_read(t.gpu, UINT64_MAX - 3, out, 16), ==,
                    -EINVAL);
    g_assert_cmpint(vgpu_bar2_read(t.gpu, 0, out, 0), ==, -EINVAL);
    /* the fd maps the same memory */
    g_assert_cmpint(vgpu_vram_fd(t.gpu), >=, 0);
    map = mmap(NULL, VRAM_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED,
               vgpu_vram_fd(t.gpu), 0);
    g_assert_true(map != MAP_FAILED);
    g_assert_cmpmem(map + VRAM_SIZE - 16, 16, buf, 16);
    map[7] = 0x77;
    g_assert_cmpint(vgpu_bar2_read(t.gpu, 0, out, 8), ==, 0);
    g_assert_cmpuint(out[7], ==, 0x77);
    munmap(map, VRAM_SIZE);
    g_assert_cmpuint(vgpu_vram_size(t.gpu), ==, VRAM_SIZE);
    g_assert_cmpuint(vgpu_page_size(t.gpu), ==, PAGE);
    tb_fini(&t);
}

/* Host blocks (512 bytes) the VRAM memfd holds. */
static int64_t vram_blocks(struct tb *t)
{
    struct stat st;

    g_assert_cmpint(fstat(vgpu_vram_fd(t->gpu), &st), ==, 0);
    return (int64_t)st.st_blocks;
}

/* Migration's writes and clears of VRAM: a large clear frees the host
 * pages (zero afterwards, less memory), a small or unaligned one zeroes
 * exactly its range. */
/* VRAM mapped here (the CPU backend): no hashed copies, said so. */
static void test_vram_hashed_copies(void)
{
    uint64_t h0[1], zero[1];
    struct vgpu_copy_hashes h = {65536, 1, {0, 0}, {h0, NULL}, zero};
    uint8_t page[65536];
    struct vg_error err = {0};
    struct tb t;

    tb_init(&t);
    g_assert_false(vgpu_copies_hash(t.gpu));
    g_assert_cmpint(
        vgpu_vram_read_hashed(t.gpu, 0, page, sizeof(page), &h, &err), ==,
        -ENOTSUP);
    g_assert_nonnull(strstr(err.msg, "no hashed read"));
    g_assert_cmpint(
        vgpu_vram_write_hashed(t.gpu, 0, page, sizeof(page), &h, &err), ==,
        -ENOTSUP);
    g_assert_nonnull(strstr(err.msg, "no hashed write"));
    tb_fini(&t);
}

static void test_vram_write_clear(void)
{
    const uint64_t len = 256 * 1024;
    g_autofree uint8_t *data = g_malloc(len);
    g_autofree uint8_t *out = g_malloc(len);
    struct vg_error err = {0};
    int64_t full;
    struct tb t;

    tb_init(&t);
    memset(data, 0xa5, len);
    g_assert_cmpint(vgpu_vram_write(t.gpu, 0, data, len, &err), ==, 0);
    g_assert_cmpint(vgpu_vram_read(t.gpu, 0, out, len, &err), ==, 0);
    g_assert_cmpmem(out, len, data, len);
    full = vram_blocks(&t);
    g_assert_cmpint(full, >=, (int64_t)(len / 512));
    /* large and aligned: freed */
    g_assert_cmpint(vgpu_vram_clear(t.gpu, 64 * 1024, 128 * 1024, &err), ==, 0);
    g_assert_cmpint(vram_blocks(&t), <=, full - 128 * 1024 / 512);
    /* small and unaligned: zeroed in place */
    g_assert_cmpint(vgpu_vram_clear(t.gpu, 4, 8, &err), ==, 0);
    g_assert_cmpint(vgpu_vram_read(t.gpu, 0, out, len, &err), ==, 0);
    for (uint64_t i = 0; i < len; i++) {
        bool zero = (i >= 4 && i < 12) || (i >= 64 * 1024 && i < 192 * 1024);

        if (out[i] != (zero ? 0 : 0xa5)) {
            g_error("VRAM byte %" G_GUINT64_FORMAT " is %#x", i, out[i]);
        }
    }
    g_assert_cmpint(vgpu_vram_clear(t.gpu, 2, 8, &err), ==, -ERANGE);
    tb_fini(&t);
}

/* vgpu_vram_write_nt: the same bytes as vgpu_vram_write (at an odd
 * offset and length, so lines are cut at both ends), the same range
 * check. */
static void test_vram_write_nt(void)
{
    const uint64_t off = 4096 + 3, len = 3 * 1024 + 5;
    g_autofree uint8_t *data = g_malloc(len);
    struct vg_error err = {0};
    struct tb t;

    tb_init(&t);
    for (uint64_t i = 0; i < len; i++) {
        data[i] = (uint8_t)(i * 7 + 1);
    }
    g_assert_cmpint(vgpu_vram_write_nt(t.gpu, off, data, len, &err), ==, 0);
    vg_nt_fence();
    memcpy(t.ref + off, data, len);
    g_assert_cmpmem(vgpu_vram(t.gpu) + off - 1, len + 2, t.ref + off - 1,
                    len + 2);
    g_assert_cmpint(vgpu_vram_write_nt(t.gpu, VRAM_SIZE - 8, data, 16, &err),
                    ==, -ERANGE);
    g_assert_cmpmem(vgpu_vram(t.gpu) + VRAM_SIZE - 8, 8, t.ref + VRAM_SIZE - 8,
                    8);
    tb_fini(&t);
}

static void expect_new_fails(uint64_t vram, uint32_t page, const char *be)
{
    struct vgpu_host host = {NULL, fake_dma_ptr, fake_raise_irq};
    struct vgpu_config cfg = {vram, page, be, false};
    struct vg_error err = {0};
    struct vgpu *gpu = NULL;

    g_assert_cmpint(vgpu_new(&cfg, &host, &gpu, &err), ==, -EINVAL);
    g_assert_null(gpu);
    g_assert_cmpint(err.code, ==, EINVAL);
    g_assert_cmpstr(err.msg, !=, "");
}

static void test_new_config(void)
{
    expect_new_fails(1 << 20, 3000, "cpu");
    expect_new_fails(1 << 20, 2048, "cpu");
    expect_new_fails(1 << 20, 4u << 20, "cpu");
    expect_new_fails((1 << 20) + 4096, 64 * 1024, "cpu");
    expect_new_fails(32 * 1024, 64 * 1024, "cpu");
    expect_new_fails(1 << 20, 64 * 1024, "no-such-backend");
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/vgpu/device/identity-regs", test_identity_regs);
    g_test_add_func("/vgpu/device/ring-config", test_ring_config);
    g_test_add_data_func("/vgpu/device/commands/unbounded",
                         GUINT_TO_POINTER(UINT32_MAX), test_commands);
    g_test_add_data_func("/vgpu/device/commands/budget-4100",
                         GUINT_TO_POINTER(4100), test_commands);
    g_test_add_data_func("/vgpu/device/commands/budget-1", GUINT_TO_POINTER(1),
                         test_commands);
    g_test_add_func("/vgpu/device/fence-irq", test_fence_irq);
    g_test_add_func("/vgpu/device/masked-irq", test_masked_irq);
    g_test_add_func("/vgpu/device/bad-entry-resume", test_bad_entry_resume);
    g_test_add_func("/vgpu/device/exec-faults", test_exec_faults);
    g_test_add_func("/vgpu/device/dma-unmapped-midway",
                    test_dma_unmapped_midway);
    g_test_add_func("/vgpu/device/ring-fetch-fault", test_ring_fetch_fault);
    g_test_add_func("/vgpu/device/doorbell-needed", test_doorbell_needed);
    g_test_add_func("/vgpu/device/ring-wrap", test_ring_wrap);
    g_test_add_func("/vgpu/device/slicing", test_slicing);
    g_test_add_func("/vgpu/device/reset", test_reset);
    g_test_add_func("/vgpu/device/vram-write-clear", test_vram_write_clear);
    g_test_add_func("/vgpu/device/vram-write-nt", test_vram_write_nt);
    g_test_add_func("/vgpu/device/vram-hashed-copies", test_vram_hashed_copies);
    g_test_add_func("/vgpu/device/bar2-and-fd", test_bar2_and_fd);
    g_test_add_func("/vgpu/device/new-config", test_new_config);
    return g_test_run();
}
