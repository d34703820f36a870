/*
 * test-vgpu-cmd.c -- the pure ring entry validator and the entry codec.
 */
#include <glib.h>
#include <string.h>

#include "vgpu/cmd.h"

#define V (1024u * 1024) /* VRAM size of the tests */

static void expect(struct vgpu_cmd c, enum vgpu_error_code want)
{
    enum vgpu_error_code code = 12345;
    bool ok = vgpu_cmd_validate(&c, V, &code);

    if (code != want) {
        g_test_message(
            "opcode %u args %#llx %#llx %#llx %#llx %#llx %#llx: "
            "got %s, want %s",
            c.opcode, (unsigned long long)c.arg[0],
            (unsigned long long)c.arg[1], (unsigned long long)c.arg[2],
            (unsigned long long)c.arg[3], (unsigned long long)c.arg[4],
            (unsigned long long)c.arg[5], vgpu_error_name(code),
            vgpu_error_name(want));
    }
    g_assert_cmpint(code, ==, want);
    g_assert_cmpint(ok, ==, want == VGPU_ERR_NONE);
}

/* A valid instance of every opcode. */
static struct vgpu_cmd valid_cmd(unsigned op)
{
    switch (op) {
    case VGPU_OP_FILL:
        return vgpu_cmd_make(op, 0, V, 0xdeadbeef, 0, 0, 0);
    case VGPU_OP_COPY:
        return vgpu_cmd_make(op, 0, V / 2, V / 2, 0, 0, 0);
    case VGPU_OP_DMA_TO_VRAM:
        return vgpu_cmd_make(op, 16, 0x1000, 100, 0, 0, 0);
    case VGPU_OP_DMA_FROM_VRAM:
        return vgpu_cmd_make(op, 0x1000, 16, 100, 0, 0, 0);
    case VGPU_OP_AXPY:
        return vgpu_cmd_make(op, 0, 4096, 1024, 0x3f800000, 0, 0);
    case VGPU_OP_SCATTER_ADD:
        return vgpu_cmd_make(op, 0, 16, 64, 4096, 8, 0x3f800000);
    case VGPU_OP_FENCE:
        return vgpu_cmd_make(op, UINT64_MAX, 0, 0, 0, 0, 0);
    default:
        return vgpu_cmd_make(VGPU_OP_NOP, 0, 0, 0, 0, 0, 0);
    }
}

/* Arguments each opcode uses (the rest must be zero). */
static const unsigned nargs[VGPU_OP_COUNT] = {0, 3, 3, 3, 3, 4, 6, 1};

static void test_valid_each_opcode(void)
{
    unsigned op;

    for (op = 0; op < VGPU_OP_COUNT; op++) {
        expect(valid_cmd(op), VGPU_ERR_NONE);
    }
}

static void test_bad_opcode(void)
{
    expect(vgpu_cmd_make(VGPU_OP_COUNT, 0, 0, 0, 0, 0, 0), VGPU_ERR_BAD_OPCODE);
    expect(vgpu_cmd_make(0xffff, 0, 0, 0, 0, 0, 0), VGPU_ERR_BAD_OPCODE);
}

static void test_flags_reserved_unused(void)
{
    unsigned op, i;

    for (op = 0; op < VGPU_OP_COUNT; op++) {
        struct vgpu_cmd c = valid_cmd(op);

        c.flags = 1;
        expect(c, VGPU_ERR_BAD_FLAGS);
        c = valid_cmd(op);
        c.reserved = 0x80000000u;
        expect(c, VGPU_ERR_BAD_FLAGS);
        for (i = nargs[op]; i < 7; i++) {
            c = valid_cmd(op);
            c.arg[i] = 1;
            expect(c, VGPU_ERR_BAD_FLAGS);
        }
    }
}

/* 32-bit arguments must have their high halves clear. */
static void test_u32_args(void)
{
    struct vgpu_cmd c = valid_cmd(VGPU_OP_FILL);

    c.arg[2] = 0x1ffffffffull;
    expect(c, VGPU_ERR_BAD_FLAGS);
    c = valid_cmd(VGPU_OP_AXPY);
    c.arg[3] |= 1ull << 32;
    expect(c, VGPU_ERR_BAD_FLAGS);
    c = valid_cmd(VGPU_OP_SCATTER_ADD);
    c.arg[5] |= 1ull << 63;
    expect(c, VGPU_ERR_BAD_FLAGS);
}

static void test_fill(void)
{
    expect(vgpu_cmd_make(1, V - 4, 4, 0, 0, 0, 0),
           VGPU_ERR_NONE); /* ends at V */
    expect(vgpu_cmd_make(1, V - 4, 8, 0, 0, 0, 0), VGPU_ERR_VRAM_RANGE);
    expect(vgpu_cmd_make(1, V, 4, 0, 0, 0, 0), VGPU_ERR_VRAM_RANGE);
    expect(vgpu_cmd_make(1, UINT64_MAX - 3, 8, 0, 0, 0, 0),
           VGPU_ERR_VRAM_RANGE);
    expect(vgpu_cmd_make(1, 0, 0, 0, 0, 0, 0), VGPU_ERR_BAD_LENGTH);
    expect(vgpu_cmd_make(1, 0, V + 4, 0, 0, 0, 0), VGPU_ERR_BAD_LENGTH);
    expect(vgpu_cmd_make(1, 0, UINT64_MAX - 3, 0, 0, 0, 0),
           VGPU_ERR_BAD_LENGTH);
    expect(vgpu_cmd_make(1, 2, 4, 0, 0, 0, 0), VGPU_ERR_ALIGNMENT);
    expect(vgpu_cmd_make(1, 0, 6, 0, 0, 0, 0), VGPU_ERR_ALIGNMENT);
    /* check order: length before alignment before range */
    expect(vgpu_cmd_make(1, 3, 0, 0, 0, 0, 0), VGPU_ERR_BAD_LENGTH);
    expect(vgpu_cmd_make(1, V + 2, 4, 0, 0, 0, 0), VGPU_ERR_ALIGNMENT);
}

static void test_copy(void)
{
    expect(vgpu_cmd_make(2, 1, 100, 3, 0, 0, 0),
           VGPU_ERR_NONE); /* no alignment */
    expect(vgpu_cmd_make(2, 0, 10, 10, 0, 0, 0), VGPU_ERR_NONE); /* adjacent */
    expect(vgpu_cmd_make(2, 10, 0, 10, 0, 0, 0), VGPU_ERR_NONE);
    expect(vgpu_cmd_make(2, 0, 9, 10, 0, 0, 0), VGPU_ERR_OVERLAP);
    expect(vgpu_cmd_make(2, 9, 0, 10, 0, 0, 0), VGPU_ERR_OVERLAP);
    expect(vgpu_cmd_make(2, 5, 5, 1, 0, 0, 0), VGPU_ERR_OVERLAP);
    expect(vgpu_cmd_make(2, V - 10, 0, 10, 0, 0, 0), VGPU_ERR_NONE);
    expect(vgpu_cmd_make(2, V - 9, 0, 10, 0, 0, 0), VGPU_ERR_VRAM_RANGE);
    expect(vgpu_cmd_make(2, 0, V - 9, 10, 0, 0, 0), VGPU_ERR_VRAM_RANGE);
    expect(vgpu_cmd_make(2, 0, UINT64_MAX, 10, 0, 0, 0), VGPU_ERR_VRAM_RANGE);
    expect(vgpu_cmd_make(2, 0, 10, 0, 0, 0, 0), VGPU_ERR_BAD_LENGTH);
    expect(vgpu_cmd_make(2, 0, 0, V + 1, 0, 0, 0), VGPU_ERR_BAD_LENGTH);
}

/* DMA in both directions: @vi and @ii are the VRAM and IOVA arg slots. */
static void check_dma(uint16_t op, int vi, int ii)
{
    struct vgpu_cmd c = vgpu_cmd_make(op, 0, 0, 0, 0, 0, 0);

    c.arg[vi] = V - 100;
    c.arg[ii] = 0x1000;
    c.arg[2] = 100;
    expect(c, VGPU_ERR_NONE);
    c.arg[vi] = V - 99;
    expect(c, VGPU_ERR_VRAM_RANGE);
    c.arg[vi] = UINT64_MAX - 50;
    expect(c, VGPU_ERR_VRAM_RANGE);
    c.arg[vi] = 1;
    c.arg[ii] = UINT64_MAX - 100; /* end = UINT64_MAX */
    expect(c, VGPU_ERR_NONE);
    c.arg[ii] = UINT64_MAX - 99; /* end = 2^64: not representable */
    expect(c, VGPU_ERR_DMA_FAULT);
    c.arg[ii] = 0;
    c.arg[2] = 0;
    expect(c, VGPU_ERR_BAD_LENGTH);
    c.arg[2] = V + 1;
    expect(c, VGPU_ERR_BAD_LENGTH);
}

static void test_dma(void)
{
    check_dma(VGPU_OP_DMA_TO_VRAM, 0, 1);
    check_dma(VGPU_OP_DMA_FROM_VRAM, 1, 0);
}

static void test_axpy(void)
{
    expect(vgpu_cmd_make(5, 64, 64, 16, 0, 0, 0), VGPU_ERR_NONE); /* x == y */
    expect(vgpu_cmd_make(5, 0, 64, 16, 0, 0, 0), VGPU_ERR_NONE);  /* adjacent */
    expect(vgpu_cmd_make(5, 0, 60, 16, 0, 0, 0), VGPU_ERR_OVERLAP);
    expect(vgpu_cmd_make(5, 60, 0, 16, 0, 0, 0), VGPU_ERR_OVERLAP);
    expect(vgpu_cmd_make(5, V - 64, 0, 16, 0, 0, 0), VGPU_ERR_NONE);
    expect(vgpu_cmd_make(5, V - 60, 0, 16, 0, 0, 0), VGPU_ERR_VRAM_RANGE);
    expect(vgpu_cmd_make(5, 0, V - 60, 16, 0, 0, 0), VGPU_ERR_VRAM_RANGE);
    expect(vgpu_cmd_make(5, 0, 2, 16, 0, 0, 0), VGPU_ERR_ALIGNMENT);
    expect(vgpu_cmd_make(5, 1, 64, 16, 0, 0, 0), VGPU_ERR_ALIGNMENT);
    expect(vgpu_cmd_make(5, 0, 64, 0, 0, 0, 0), VGPU_ERR_BAD_LENGTH);
    expect(vgpu_cmd_make(5, 0, 0, V / 4, 0, 0, 0), VGPU_ERR_NONE);
    expect(vgpu_cmd_make(5, 0, 0, V / 4 + 1, 0, 0, 0), VGPU_ERR_BAD_LENGTH);
    /* count * 4 wraps to a small number */
    expect(vgpu_cmd_make(5, 0, 64, (1ull << 62) + 1, 0, 0, 0),
           VGPU_ERR_BAD_LENGTH);
}

static void test_scatter(void)
{
    /* table [0, 1024), idx [1024, 1056) */
    expect(vgpu_cmd_make(6, 0, 16, 64, 1024, 8, 0), VGPU_ERR_NONE);
    expect(vgpu_cmd_make(6, 0, 16, 64, 1020, 8, 0), VGPU_ERR_OVERLAP);
    expect(vgpu_cmd_make(6, 1032, 16, 64, 1004, 8, 0), VGPU_ERR_OVERLAP);
    expect(vgpu_cmd_make(6, 1032, 16, 64, 1000, 8, 0),
           VGPU_ERR_NONE); /* adjacent */
    expect(vgpu_cmd_make(6, 0, 0, 64, 1024, 8, 0), VGPU_ERR_BAD_LENGTH);
    expect(vgpu_cmd_make(6, 0, 16, 0, 1024, 8, 0), VGPU_ERR_BAD_LENGTH);
    expect(vgpu_cmd_make(6, 0, 16, 64, 1024, 0, 0), VGPU_ERR_BAD_LENGTH);
    expect(vgpu_cmd_make(6, 0, 16, 64, 1024, V / 4 + 1, 0),
           VGPU_ERR_BAD_LENGTH);
    expect(vgpu_cmd_make(6, 0, 1ull << 40, 1ull << 30, 1024, 8, 0),
           VGPU_ERR_BAD_LENGTH);
    expect(vgpu_cmd_make(6, 0, 2, V, 1024, 8, 0), VGPU_ERR_BAD_LENGTH);
    expect(vgpu_cmd_make(6, 0, 1, V + 4, 1024, 8, 0), VGPU_ERR_BAD_LENGTH);
    expect(vgpu_cmd_make(6, 0, 16, 62, 1024, 8, 0), VGPU_ERR_ALIGNMENT);
    expect(vgpu_cmd_make(6, 2, 16, 64, 1024, 8, 0), VGPU_ERR_ALIGNMENT);
    expect(vgpu_cmd_make(6, 0, 16, 64, 1026, 8, 0), VGPU_ERR_ALIGNMENT);
    expect(vgpu_cmd_make(6, V - 1024, 16, 64, 0, 8, 0), VGPU_ERR_NONE);
    expect(vgpu_cmd_make(6, V - 1020, 16, 64, 0, 8, 0), VGPU_ERR_VRAM_RANGE);
    expect(vgpu_cmd_make(6, 0, 16, 64, V - 32, 8, 0), VGPU_ERR_NONE);
    expect(vgpu_cmd_make(6, 0, 16, 64, V - 28, 8, 0), VGPU_ERR_VRAM_RANGE);
}

static bool in_vram(uint64_t off, unsigned __int128 len)
{
    return len > 0 && (unsigned __int128)off + len <= V;
}

/* Property: whatever the validator accepts stays inside VRAM (checked with
 * 128-bit arithmetic) and has no partial overlap. */
static void test_random_accepted_in_range(void)
{
    static const uint64_t picks[] = {
        0,         1, 4, 60, 64, V / 2, V - 64, V - 4, V, V + 4, UINT64_MAX - 3,
        1ull << 62};
    unsigned n, accepted = 0;

    for (n = 0; n < 200000; n++) {
        struct vgpu_cmd c = {.opcode = g_test_rand_int_range(1, 7)};
        enum vgpu_error_code code;
        const uint64_t *a = c.arg;
        int i;

        for (i = 0; i < 6; i++) {
            c.arg[i] =
                g_test_rand_bit()
                    ? picks[g_test_rand_int_range(0, G_N_ELEMENTS(picks))]
                    : (uint64_t)g_test_rand_int_range(0, 4096);
        }
        for (i = nargs[c.opcode]; i < 7; i++) {
            c.arg[i] = 0;
        }
        if (c.opcode == VGPU_OP_FILL || c.opcode == VGPU_OP_AXPY ||
            c.opcode == VGPU_OP_SCATTER_ADD) {
            c.arg[nargs[c.opcode] - 1] &= UINT32_MAX;
        }
        if (!vgpu_cmd_validate(&c, V, &code)) {
            continue;
        }
        accepted++;
        switch (c.opcode) {
        case VGPU_OP_FILL:
            g_assert_true(in_vram(a[0], a[1]));
            break;
        case VGPU_OP_COPY:
            g_assert_true(in_vram(a[0], a[2]) && in_vram(a[1], a[2]));
            g_assert_true(a[0] + a[2] <= a[1] || a[1] + a[2] <= a[0]);
            break;
        case VGPU_OP_DMA_TO_VRAM:
        case VGPU_OP_DMA_FROM_VRAM:
            g_assert_true(in_vram(a[c.opcode == VGPU_OP_DMA_FROM_VRAM], a[2]));
            break;
        case VGPU_OP_AXPY:
            g_assert_true(in_vram(a[0], (unsigned __int128)a[2] * 4));
            g_assert_true(in_vram(a[1], (unsigned __int128)a[2] * 4));
            break;
        case VGPU_OP_SCATTER_ADD:
            g_assert_true(in_vram(a[0], (unsigned __int128)a[1] * a[2]));
            g_assert_true(in_vram(a[3], (unsigned __int128)a[4] * 4));
            break;
        }
    }
    g_assert_cmpuint(accepted, >, 1000);
}

static void test_codec(void)
{
    struct vgpu_cmd c =
        vgpu_cmd_make(VGPU_OP_AXPY, 0x0102030405060708ull, 2, 3, 4, 5, 6);
    struct vgpu_cmd d;
    uint8_t raw[VGPU_CMD_SIZE];

    c.flags = 0xa1b2;
    c.reserved = 0xc3d4e5f6;
    c.arg[6] = 7;
    vgpu_cmd_encode(&c, raw);
    g_assert_cmpuint(raw[0], ==, VGPU_OP_AXPY);
    g_assert_cmpuint(raw[1], ==, 0);
    g_assert_cmpuint(raw[2], ==, 0xb2);
    g_assert_cmpuint(raw[3], ==, 0xa1);
    g_assert_cmpuint(raw[4], ==, 0xf6);
    g_assert_cmpuint(raw[7], ==, 0xc3);
    g_assert_cmpuint(raw[8], ==, 0x08);
    g_assert_cmpuint(raw[15], ==, 0x01);
    g_assert_cmpuint(raw[56], ==, 7);
    vgpu_cmd_decode(raw, &d);
    g_assert_cmpmem(&c, sizeof(c), &d, sizeof(d));
}

static void test_names(void)
{
    g_assert_cmpstr(vgpu_op_name(VGPU_OP_SCATTER_ADD), ==, "SCATTER_ADD");
    g_assert_cmpstr(vgpu_op_name(VGPU_OP_COUNT), ==, "?");
    g_assert_cmpstr(vgpu_error_name(VGPU_ERR_RING_CONFIG), ==, "RING_CONFIG");
    g_assert_cmpstr(vgpu_error_name(VGPU_ERR_DEVICE), ==, "DEVICE");
    g_assert_cmpstr(vgpu_error_name(VGPU_ERR_DEVICE + 1), ==, "?");
}

/* The VRAM ranges each command touches: what a post-copy destination's
 * engines wait for. */
static void test_vram_ranges(void)
{
    struct vgpu_vram_range r[2];
    struct vgpu_cmd c;

    c = vgpu_cmd_make(VGPU_OP_FILL, 0x1000, 0x2000, 7, 0, 0, 0);
    g_assert_cmpuint(vgpu_cmd_vram_ranges(&c, r), ==, 1);
    g_assert_cmphex(r[0].off, ==, 0x1000);
    g_assert_cmphex(r[0].len, ==, 0x2000);
    c = vgpu_cmd_make(VGPU_OP_COPY, 0x8000, 0x1000, 0x300, 0, 0, 0);
    g_assert_cmpuint(vgpu_cmd_vram_ranges(&c, r), ==, 2);
    g_assert_cmphex(r[0].off, ==, 0x8000);
    g_assert_cmphex(r[1].off, ==, 0x1000);
    g_assert_cmphex(r[1].len, ==, 0x300);
    c = vgpu_cmd_make(VGPU_OP_DMA_TO_VRAM, 0x4000, 0x99000, 0x100, 0, 0, 0);
    g_assert_cmpuint(vgpu_cmd_vram_ranges(&c, r), ==, 1);
    g_assert_cmphex(r[0].off, ==, 0x4000);
    c = vgpu_cmd_make(VGPU_OP_DMA_FROM_VRAM, 0x99000, 0x4000, 0x100, 0, 0, 0);
    g_assert_cmpuint(vgpu_cmd_vram_ranges(&c, r), ==, 1);
    g_assert_cmphex(r[0].off, ==, 0x4000);
    g_assert_cmphex(r[0].len, ==, 0x100);
    c = vgpu_cmd_make(VGPU_OP_AXPY, 0x2000, 0x6000, 16, 0, 0, 0);
    g_assert_cmpuint(vgpu_cmd_vram_ranges(&c, r), ==, 2);
    g_assert_cmphex(r[0].len, ==, 64);
    g_assert_cmphex(r[1].off, ==, 0x6000);
    /* SCATTER_ADD: the whole table (rows x row bytes) and the indexes. */
    c = vgpu_cmd_make(VGPU_OP_SCATTER_ADD, 0x10000, 8, 256, 0x9000, 5, 1);
    g_assert_cmpuint(vgpu_cmd_vram_ranges(&c, r), ==, 2);
    g_assert_cmphex(r[0].off, ==, 0x10000);
    g_assert_cmphex(r[0].len, ==, 8 * 256);
    g_assert_cmphex(r[1].off, ==, 0x9000);
    g_assert_cmphex(r[1].len, ==, 20);
    c = vgpu_cmd_make(VGPU_OP_FENCE, 1, 0, 0, 0, 0, 0);
    g_assert_cmpuint(vgpu_cmd_vram_ranges(&c, r), ==, 0);
    c = vgpu_cmd_make(VGPU_OP_NOP, 0, 0, 0, 0, 0, 0);
    g_assert_cmpuint(vgpu_cmd_vram_ranges(&c, r), ==, 0);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/vgpu/cmd/valid-each-opcode", test_valid_each_opcode);
    g_test_add_func("/vgpu/cmd/vram-ranges", test_vram_ranges);
    g_test_add_func("/vgpu/cmd/bad-opcode", test_bad_opcode);
    g_test_add_func("/vgpu/cmd/flags-reserved-unused",
                    test_flags_reserved_unused);
    g_test_add_func("/vgpu/cmd/u32-args", test_u32_args);
    g_test_add_func("/vgpu/cmd/fill", test_fill);
    g_test_add_func("/vgpu/cmd/copy", test_copy);
    g_test_add_func("/vgpu/cmd/dma", test_dma);
    g_test_add_func("/vgpu/cmd/axpy", test_axpy);
    g_test_add_func("/vgpu/cmd/scatter", test_scatter);
    g_test_add_func("/vgpu/cmd/random-accepted-in-range",
                    test_random_accepted_in_range);
    g_test_add_func("/vgpu/cmd/codec", test_codec);
    g_test_add_func("/vgpu/cmd/names", test_names);
    return g_test_run();
}
