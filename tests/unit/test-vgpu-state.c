/*
 * Unit tests of the device state blob (vgpu-state.c) and the migration
 * quiesce: a device stopped in the middle of a sliced command is saved,
 * restored into a second device with a copy of VRAM and guest RAM, and
 * both then finish identically; every malformed blob is refused and
 * leaves the device unchanged.
 */
#include <endian.h>
#include <errno.h>
#include <glib.h>
#include <string.h>

#include "vgpu/cmd.h"
#include "vgpu/vgpu.h"
#include "common/le.h"

#define VRAM_SIZE (8u * 1024 * 1024)
#define PAGE      (64u * 1024)
#define RAM       0x100000ull /* IOVA of guest RAM */
#define RAM_LEN   (1u * 1024 * 1024)
#define RING_N    16u
#define DATA      (RAM + 0x10000)

/* A device with its own guest RAM. */
struct dev {
    struct vgpu *gpu;
    uint8_t *ram;
    unsigned irqs;
};

static void *fake_dma_ptr(void *opaque, uint64_t iova, uint64_t len, bool write)
{
    struct dev *d = opaque;

    if (iova >= RAM && iova - RAM < RAM_LEN && len <= RAM_LEN - (iova - RAM)) {
        return d->ram + (iova - RAM);
    }
    return NULL;
}

static void fake_raise_irq(void *opaque, unsigned vector)
{
    ((struct dev *)opaque)->irqs++;
}

static void dev_init(struct dev *d)
{
    struct vgpu_host host = {d, fake_dma_ptr, fake_raise_irq};
    struct vgpu_config cfg = {VRAM_SIZE, PAGE, "cpu", false};
    struct vg_error err;

    memset(d, 0, sizeof(*d));
    d->ram = g_malloc0(RAM_LEN);
    g_assert_cmpint(vgpu_new(&cfg, &host, &d->gpu, &err), ==, 0);
}

static void dev_fini(struct dev *d)
{
    vgpu_free(d->gpu);
    g_free(d->ram);
}

static void wr(struct dev *d, uint64_t off, uint32_t v)
{
    g_assert_cmpint(vgpu_bar0_write(d->gpu, off, &v, 4), ==, 0);
}

static uint32_t rd(struct dev *d, uint64_t off)
{
    uint32_t v;

    g_assert_cmpint(vgpu_bar0_read(d->gpu, off, &v, 4), ==, 0);
    return v;
}

/* Ring on; the commands @c[0..n) in it; doorbell. */
static void submit(struct dev *d, const struct vgpu_cmd *c, unsigned n)
{
    wr(d, VGPU_REG_RING_BASE_LO, (uint32_t)RAM);
    wr(d, VGPU_REG_RING_SIZE, RING_N);
    wr(d, VGPU_REG_IRQ_MASK, VGPU_IRQ_FENCE | VGPU_IRQ_ERROR);
    for (unsigned i = 0; i < n; i++) {
        vgpu_cmd_encode(&c[i], d->ram + i * VGPU_CMD_SIZE);
    }
    wr(d, VGPU_REG_RING_TAIL, n);
    wr(d, VGPU_REG_DOORBELL, 1);
}

static void drain(struct dev *d)
{
    for (unsigned i = 0; vgpu_step(d->gpu, 100000); i++) {
        g_assert_cmpuint(i, <, 100000);
    }
}

static void save(struct dev *d, uint8_t *blob)
{
    struct vg_error err;

    g_assert_cmpint(vgpu_state_save(d->gpu, blob, VGPU_STATE_SIZE, &err), ==,
                    (int)VGPU_STATE_SIZE);
}

/* Commands whose execution the tests interrupt: a long FILL, a DMA from
 * guest RAM, an AXPY, a SCATTER_ADD (not idempotent) and a FENCE. */
static unsigned workload(struct dev *d, struct vgpu_cmd *c)
{
    uint32_t idx[64];

    for (unsigned i = 0; i < 64; i++) {
        idx[i] = (i * 7) % 32;
    }
    memcpy(vgpu_vram(d->gpu) + 0x700000, idx, sizeof(idx));
    for (unsigned i = 0; i < 0x40000; i++) {
        d->ram[0x10000 + i] = (uint8_t)(i * 13);
    }
    c[0] = vgpu_cmd_make(VGPU_OP_FILL, 0, 4u << 20, 0x3f800000, 0, 0, 0);
    c[1] = vgpu_cmd_make(VGPU_OP_DMA_TO_VRAM, 0x400000, DATA, 0x40000, 0, 0, 0);
    c[2] = vgpu_cmd_make(VGPU_OP_AXPY, 0x500000, 0, 0x10000, 0x40000000, 0, 0);
    c[3] = vgpu_cmd_make(VGPU_OP_SCATTER_ADD, 0x600000, 32, 4096, 0x700000, 64,
                         0x3f800000);
    c[4] = vgpu_cmd_make(VGPU_OP_FENCE, 42, 0, 0, 0, 0, 0);
    return 5;
}

/*
 * Stop the source after @steps slices of @budget, migrate it (VRAM, guest
 * RAM, state) into a fresh device, finish both: same VRAM, registers and
 * state.
 */
static void migrate_after(unsigned steps, uint64_t budget)
{
    uint8_t blob[VGPU_STATE_SIZE], blob2[VGPU_STATE_SIZE];
    struct vgpu_cmd c[8];
    struct dev a, b;
    struct vg_error err;
    unsigned n;

    dev_init(&a);
    dev_init(&b);
    n = workload(&a, c);
    submit(&a, c, n);
    for (unsigned i = 0; i < steps; i++) {
        vgpu_step(a.gpu, budget);
    }
    g_test_message("stopped after %u slices of %llu: %u commands done, %s",
                   steps, (unsigned long long)budget,
                   rd(&a, VGPU_REG_CMDS_DONE),
                   vgpu_busy(a.gpu) ? "busy" : "idle");
    vgpu_set_stopped(a.gpu, true);
    g_assert_false(vgpu_step(a.gpu, budget)); /* quiesced: no progress */
    g_assert_false(vgpu_runnable(a.gpu));
    save(&a, blob);
    memcpy(vgpu_vram(b.gpu), vgpu_vram(a.gpu), VRAM_SIZE);
    memcpy(b.ram, a.ram, RAM_LEN);
    vgpu_set_stopped(b.gpu, true);
    g_assert_cmpint(vgpu_state_load(b.gpu, blob, sizeof(blob), &err), ==, 0);
    save(&b, blob2);
    g_assert_true(memcmp(blob, blob2, sizeof(blob)) == 0);
    vgpu_set_stopped(a.gpu, false);
    vgpu_set_stopped(b.gpu, false);
    drain(&a);
    drain(&b);
    g_assert_cmpuint(rd(&b, VGPU_REG_FENCE_LO), ==, 42);
    g_assert_cmpuint(rd(&b, VGPU_REG_CMDS_DONE), ==, n);
    g_assert_cmpuint(rd(&b, VGPU_REG_ERROR_CODE), ==, VGPU_ERR_NONE);
    g_assert_true(memcmp(vgpu_vram(a.gpu), vgpu_vram(b.gpu), VRAM_SIZE) == 0);
    save(&a, blob);
    save(&b, blob2);
    g_assert_true(memcmp(blob, blob2, sizeof(blob)) == 0);
    dev_fini(&a);
    dev_fini(&b);
}

static void test_round_trip_in_flight(void)
{
    /* before any fetch, right after a fetch, inside the FILL, around
     * the DMA and AXPY, and with slices of 1000 bytes inside the DMA
     * (~4400), the AXPY (~4650) and mid-row in the SCATTER_ADD (~4900) */
    static const struct {
        unsigned steps;
        uint64_t budget;
    } cases[] = {
        {0, 1},       {1, 64},      {1, 1 << 20}, {4, 1 << 20},
        {5, 1 << 20}, {6, 1 << 20}, {7, 1 << 20}, {200, 1000},
        {4400, 1000}, {4650, 1000}, {4900, 1000}, {4990, 1000},
    };
    for (unsigned i = 0; i < G_N_ELEMENTS(cases); i++) {
        migrate_after(cases[i].steps, cases[i].budget);
    }
}

/* A blob @mutate changed must be refused with @what, device unchanged. */
static void expect_refused(struct dev *d, const uint8_t *good, size_t off,
                           const void *val, size_t n, const char *what)
{
    uint8_t blob[VGPU_STATE_SIZE], before[VGPU_STATE_SIZE],
        after[VGPU_STATE_SIZE];
    struct vg_error err = {0};

    memcpy(blob, good, sizeof(blob));
    memcpy(blob + off, val, n);
    save(d, before);
    g_assert_cmpint(vgpu_state_load(d->gpu, blob, sizeof(blob), &err), ==,
                    -EINVAL);
    if (!strstr(err.msg, what)) {
        g_error("expected \"%s\" in \"%s\"", what, err.msg);
    }
    g_test_message("%s", err.msg);
    save(d, after);
    g_assert_true(memcmp(before, after, sizeof(before)) == 0);
}

static void test_malformed(void)
{
    uint8_t good[VGPU_STATE_SIZE], v[64];
    struct vgpu_cmd c[8];
    struct vg_error err;
    struct dev a, b;
    unsigned n;

    dev_init(&a);
    dev_init(&b);
    n = workload(&a, c);
    submit(&a, c, n);
    vgpu_step(a.gpu, 1 << 20); /* the FILL in flight */
    save(&a, good);
#define REFUSE(off, val, what)                                                 \
    do {                                                                       \
        vg_put_le32(v, (uint32_t)(val));                                       \
        expect_refused(&b, good, off, v, 4, what);                             \
    } while (0)
    REFUSE(0, 0x12345678, "bad magic 0x12345678");
    REFUSE(4, 2 | (VGPU_STATE_SIZE << 16), "version 2 size 168");
    REFUSE(8, 4u << 20,
           "VRAM 4194304 bytes and page size 65536, this "
           "device has 8388608 and 65536");
    REFUSE(16, 4096, "page size 4096");
    REFUSE(20, 4, "unknown flags 0x4");
    REFUSE(24, RAM + 8, "ring base 0x100008 not 64-aligned");
    REFUSE(32, 24, "ring size 24");
    REFUSE(36, RING_N, "ring head 16 / tail 5 outside ring size 16");
    REFUSE(44, 4, "has unknown bits");
    REFUSE(60, 12, "unknown error code 12");
    REFUSE(64, 3, "error index 3 without an error");
    REFUSE(76, RING_N, "ring index 16 outside ring size 16");
    REFUSE(80, 99, "opcode 99");
    REFUSE(144, 4u << 20, "cursor 4194304 outside FILL of 4194304");
    REFUSE(144, 2, "cursor 2 outside FILL");
    REFUSE(152, 1, "row cursor 1/0 on a FILL");
    /* job fields without a job in flight */
    memcpy(v, good + 20, 4);
    v[0] &= ~2u;
    memcpy(v + 4, good + 24, 60);
    expect_refused(&b, good, 20, v, 4, "job fields set without a job");
    /* short and long blobs */
    g_assert_cmpint(vgpu_state_load(b.gpu, good, sizeof(good) - 1, &err), ==,
                    -EINVAL);
    g_assert_nonnull(strstr(err.msg, "size 167, expected 168"));
    g_assert_cmpint(vgpu_state_save(a.gpu, v, 64, &err), ==, -ENOSPC);
    /* the good blob loads */
    g_assert_cmpint(vgpu_state_load(b.gpu, good, sizeof(good), &err), ==, 0);
    dev_fini(&a);
    dev_fini(&b);
}

/* SCATTER_ADD stopped mid-row: its row cursor is checked too. */
static void test_malformed_scatter(void)
{
    uint8_t good[VGPU_STATE_SIZE], v[8];
    struct vgpu_cmd c[8];
    struct dev a, b;

    dev_init(&a);
    dev_init(&b);
    workload(&a, c);
    submit(&a, &c[3], 1);
    vgpu_step(a.gpu, 1000);
    save(&a, good);
    vg_put_le32(v, 32);
    expect_refused(&b, good, 152, v, 4, "row cursor 32/");
    vg_put_le32(v, 4096);
    expect_refused(&b, good, 160, v, 4, "outside 32 rows of 4096 bytes");
    vg_put_le32(v, 2);
    expect_refused(&b, good, 160, v, 4, "outside 32 rows");
    dev_fini(&a);
    dev_fini(&b);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/vgpu/state/round-trip-in-flight",
                    test_round_trip_in_flight);
    g_test_add_func("/vgpu/state/malformed", test_malformed);
    g_test_add_func("/vgpu/state/malformed-scatter", test_malformed_scatter);
    return g_test_run();
}
