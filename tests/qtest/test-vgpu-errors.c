/*
 * test-vgpu-errors.c -- every kind of malformed ring entry: ERROR_CODE and
 * ERROR_INDEX are set, STATUS says HALTED, the error MSI-X message comes,
 * the entries after the bad one wait, both processes survive, and writing
 * VGPU_IRQ_ERROR to IRQ_STATUS resumes the ring with the next entry.
 */
#include <glib.h>
#include <stdint.h>

#include "vgpu-test.h"

#define IRQ_ALL (VGPU_IRQ_FENCE | VGPU_IRQ_ERROR)
#define V       VGT_VRAM_SIZE
/* Guest RAM ends at VGT_RAM_END; nothing is mapped from there to 4 GiB
 * but MMIO, and nothing above 4 GiB. */
#define UNMAPPED_IOVA ((uint64_t)1 << 32)

struct bad_case {
    const char *name;
    struct vgpu_cmd cmd;
    uint32_t code;
};

#define CMD(op, ...)                                                           \
    {                                                                          \
        .opcode = (op), .arg = { __VA_ARGS__ }                                 \
    }

static const struct bad_case cases[] = {
    {"opcode-8", {.opcode = VGPU_OP_COUNT}, VGPU_ERR_BAD_OPCODE},
    {"opcode-ffff", {.opcode = 0xffff}, VGPU_ERR_BAD_OPCODE},
    {"flags", {.opcode = VGPU_OP_NOP, .flags = 1}, VGPU_ERR_BAD_FLAGS},
    {"flags-high",
     {.opcode = VGPU_OP_FENCE, .flags = 0x8000},
     VGPU_ERR_BAD_FLAGS},
    {"reserved",
     {.opcode = VGPU_OP_NOP, .reserved = 0x100},
     VGPU_ERR_BAD_FLAGS},
    {"nop-arg0", CMD(VGPU_OP_NOP, 1), VGPU_ERR_BAD_FLAGS},
    {"fence-arg1", CMD(VGPU_OP_FENCE, 1, 1), VGPU_ERR_BAD_FLAGS},
    {"fill-arg6", CMD(VGPU_OP_FILL, 0, 64, 0, 0, 0, 0, 1), VGPU_ERR_BAD_FLAGS},
    {"fill-pattern-64bit", CMD(VGPU_OP_FILL, 0, 64, (uint64_t)1 << 32),
     VGPU_ERR_BAD_FLAGS},
    {"axpy-a-64bit", CMD(VGPU_OP_AXPY, 0, 4096, 16, (uint64_t)1 << 40),
     VGPU_ERR_BAD_FLAGS},
    {"fill-past-end", CMD(VGPU_OP_FILL, V - 64, 128, 0), VGPU_ERR_VRAM_RANGE},
    {"fill-at-end", CMD(VGPU_OP_FILL, V, 4, 0), VGPU_ERR_VRAM_RANGE},
    {"copy-src-past-end", CMD(VGPU_OP_COPY, 0, V - 4096, 8192),
     VGPU_ERR_VRAM_RANGE},
    {"copy-dst-past-end", CMD(VGPU_OP_COPY, V - 4095, 0, 4096),
     VGPU_ERR_VRAM_RANGE},
    {"dma-to-vram-past-end", CMD(VGPU_OP_DMA_TO_VRAM, V - 16, 0x2000000, 32),
     VGPU_ERR_VRAM_RANGE},
    {"dma-from-vram-past-end",
     CMD(VGPU_OP_DMA_FROM_VRAM, 0x2000000, V - 16, 32), VGPU_ERR_VRAM_RANGE},
    {"axpy-past-end", CMD(VGPU_OP_AXPY, V - 64, 0, 32, 0), VGPU_ERR_VRAM_RANGE},
    {"scatter-table-past-end",
     CMD(VGPU_OP_SCATTER_ADD, V - 1024, 8, 256, 0, 4, 0), VGPU_ERR_VRAM_RANGE},
    {"fill-offset-overflow", CMD(VGPU_OP_FILL, UINT64_MAX - 63, 128, 0),
     VGPU_ERR_VRAM_RANGE},
    {"copy-offset-overflow", CMD(VGPU_OP_COPY, 0, UINT64_MAX - 4095, 8192),
     VGPU_ERR_VRAM_RANGE},
    {"dma-iova-overflow", CMD(VGPU_OP_DMA_TO_VRAM, 0, UINT64_MAX - 15, 32),
     VGPU_ERR_DMA_FAULT},
    {"fill-dst-misaligned", CMD(VGPU_OP_FILL, 2, 64, 0), VGPU_ERR_ALIGNMENT},
    {"fill-len-misaligned", CMD(VGPU_OP_FILL, 0, 6, 0), VGPU_ERR_ALIGNMENT},
    {"axpy-x-misaligned", CMD(VGPU_OP_AXPY, 0, 4097, 16, 0),
     VGPU_ERR_ALIGNMENT},
    {"scatter-row-misaligned", CMD(VGPU_OP_SCATTER_ADD, 0, 4, 6, 4096, 1, 0),
     VGPU_ERR_ALIGNMENT},
    {"fill-zero", CMD(VGPU_OP_FILL, 0, 0, 0), VGPU_ERR_BAD_LENGTH},
    {"copy-zero", CMD(VGPU_OP_COPY, 0, 4096, 0), VGPU_ERR_BAD_LENGTH},
    {"dma-zero", CMD(VGPU_OP_DMA_TO_VRAM, 0, 0x2000000, 0),
     VGPU_ERR_BAD_LENGTH},
    {"axpy-zero", CMD(VGPU_OP_AXPY, 0, 4096, 0, 0), VGPU_ERR_BAD_LENGTH},
    {"scatter-zero-count", CMD(VGPU_OP_SCATTER_ADD, 0, 4, 64, 4096, 0, 0),
     VGPU_ERR_BAD_LENGTH},
    {"fill-too-long", CMD(VGPU_OP_FILL, 0, V + 4, 0), VGPU_ERR_BAD_LENGTH},
    {"copy-overlap", CMD(VGPU_OP_COPY, 0, 0x100, 0x200), VGPU_ERR_OVERLAP},
    {"copy-same", CMD(VGPU_OP_COPY, 0x1000, 0x1000, 0x10), VGPU_ERR_OVERLAP},
    {"axpy-overlap", CMD(VGPU_OP_AXPY, 0, 4, 16, 0), VGPU_ERR_OVERLAP},
    {"scatter-idx-in-table", CMD(VGPU_OP_SCATTER_ADD, 0, 4, 64, 128, 1, 0),
     VGPU_ERR_OVERLAP},
    {"dma-to-vram-unmapped", CMD(VGPU_OP_DMA_TO_VRAM, 0, UNMAPPED_IOVA, 4096),
     VGPU_ERR_DMA_FAULT},
    {"dma-from-vram-unmapped",
     CMD(VGPU_OP_DMA_FROM_VRAM, UNMAPPED_IOVA, 0, 4096), VGPU_ERR_DMA_FAULT},
    {"dma-past-ram-end",
     CMD(VGPU_OP_DMA_FROM_VRAM, VGT_RAM_END - 4096, 0, 8192),
     VGPU_ERR_DMA_FAULT},
    {"dma-bar-iova", CMD(VGPU_OP_DMA_TO_VRAM, 0, VG_PCI_MMIO_BASE, 4096),
     VGPU_ERR_DMA_FAULT},
};

/* Bad entry @bad at ring index 1, between a FILL and a FENCE. */
static void test_bad_entry(const void *data)
{
    const struct bad_case *bc = data;
    struct vgpu_cmd c[3];
    uint32_t status, w = 0;
    struct vgt t;

    vgt_start(&t, "errors");
    VGT_OK(vg_vgpu_ring_init(&t.gpu, &t.ram, 16, VGT_ERR));
    vgt_wr(&t, VGPU_REG_IRQ_MASK, IRQ_ALL);
    c[0] = vgpu_cmd_make(VGPU_OP_FILL, 0x1000, 64, 0x11111111, 0, 0, 0);
    c[1] = bc->cmd;
    c[2] = vgpu_cmd_make(VGPU_OP_FENCE, 5, 0, 0, 0, 0, 0);
    status = vgt_run(&t, c, 3);
    g_assert_cmphex(status & VGPU_STATUS_HALTED, ==, VGPU_STATUS_HALTED);
    g_assert_cmpuint(vgt_rd(&t, VGPU_REG_ERROR_CODE), ==, bc->code);
    g_assert_cmpuint(vgt_rd(&t, VGPU_REG_ERROR_INDEX), ==, 1);
    g_assert_cmpuint(vgt_rd(&t, VGPU_REG_RING_HEAD), ==, 2);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_IRQ_STATUS), ==, VGPU_IRQ_ERROR);
    VGT_OK(
        vg_vgpu_msi_wait(&t.gpu, VGPU_MSIX_VEC_ERROR, VGT_TIMEOUT_MS, VGT_ERR));
    /* The FILL before ran; the FENCE after waits. */
    VGT_OK(vg_qtest_readl(t.qemu->qt, t.gpu.vram_addr + 0x1000, &w, VGT_ERR));
    g_assert_cmphex(w, ==, 0x11111111);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_FENCE_LO), ==, 0);
    vgt_assert_alive(&t);

    /* Clearing the error resumes with the FENCE. */
    vgt_wr(&t, VGPU_REG_IRQ_STATUS, VGPU_IRQ_ERROR);
    VGT_OK(vg_vgpu_wait_reg(&t.gpu, VGPU_REG_FENCE_LO, 5, VGT_TIMEOUT_MS,
                            VGT_ERR));
    VGT_OK(vg_vgpu_wait_idle(&t.gpu, VGT_TIMEOUT_MS, &status, VGT_ERR));
    g_assert_cmphex(status, ==, 0);
    g_assert_cmpuint(vgt_rd(&t, VGPU_REG_ERROR_CODE), ==, VGPU_ERR_NONE);
    /* And the next valid command runs. */
    c[0] = vgpu_cmd_make(VGPU_OP_FILL, 0x2000, 64, 0x22222222, 0, 0, 0);
    g_assert_cmphex(vgt_run(&t, c, 1), ==, 0);
    VGT_OK(vg_qtest_readl(t.qemu->qt, t.gpu.vram_addr + 0x2000, &w, VGT_ERR));
    g_assert_cmphex(w, ==, 0x22222222);
    vgt_assert_alive(&t);
    vgt_stop(&t);
}

/* An index >= rows stops SCATTER_ADD; the rows before it are updated. */
static void test_scatter_index(void)
{
    const uint32_t idx[3] = {GUINT32_TO_LE(1), GUINT32_TO_LE(4),
                             GUINT32_TO_LE(2)};
    const uint64_t table = 0x10000, idx_off = 0x20000;
    struct vgpu_cmd c;
    uint32_t row[4];
    uint32_t status;
    struct vgt t;
    int r;

    vgt_start(&t, "errors-scatter");
    VGT_OK(vg_vgpu_ring_init(&t.gpu, &t.ram, 16, VGT_ERR));
    vgt_wr(&t, VGPU_REG_IRQ_MASK, IRQ_ALL);
    VGT_OK(
        vg_qtest_memset(t.qemu->qt, t.gpu.vram_addr + table, 0, 64, VGT_ERR));
    vgt_memwrite(&t, t.gpu.vram_addr + idx_off, idx, sizeof(idx));
    /* rows 4, 16 bytes each, value 1.0f */
    c = vgpu_cmd_make(VGPU_OP_SCATTER_ADD, table, 4, 16, idx_off, 3,
                      0x3f800000);
    status = vgt_run(&t, &c, 1);
    g_assert_cmphex(status & VGPU_STATUS_HALTED, ==, VGPU_STATUS_HALTED);
    g_assert_cmpuint(vgt_rd(&t, VGPU_REG_ERROR_CODE), ==, VGPU_ERR_INDEX_RANGE);
    g_assert_cmpuint(vgt_rd(&t, VGPU_REG_ERROR_INDEX), ==, 0);
    VGT_OK(
        vg_vgpu_msi_wait(&t.gpu, VGPU_MSIX_VEC_ERROR, VGT_TIMEOUT_MS, VGT_ERR));
    for (r = 0; r < 4; r++) {
        vgt_memread(&t, t.gpu.vram_addr + table + r * 16, row, sizeof(row));
        g_assert_cmphex(GUINT32_FROM_LE(row[0]), ==, r == 1 ? 0x3f800000 : 0);
        g_assert_cmphex(GUINT32_FROM_LE(row[3]), ==, r == 1 ? 0x3f800000 : 0);
    }
    vgt_assert_alive(&t);
    vgt_wr(&t, VGPU_REG_IRQ_STATUS, VGPU_IRQ_ERROR);
    c = vgpu_cmd_make(VGPU_OP_FENCE, 9, 0, 0, 0, 0, 0);
    g_assert_cmphex(vgt_run(&t, &c, 1), ==, 0);
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_FENCE_LO), ==, 9);
    vgt_stop(&t);
}

/* A ring in memory the device cannot read: RING_FETCH. */
static void test_ring_fetch(void)
{
    uint32_t status = 0;
    struct vgt t;

    vgt_start(&t, "errors-fetch");
    vgt_wr(&t, VGPU_REG_IRQ_MASK, IRQ_ALL);
    vgt_wr(&t, VGPU_REG_RING_BASE_LO, 0);
    vgt_wr(&t, VGPU_REG_RING_BASE_HI, (uint32_t)(UNMAPPED_IOVA >> 32));
    vgt_wr(&t, VGPU_REG_RING_SIZE, 16);
    vgt_wr(&t, VGPU_REG_RING_TAIL, 1);
    vgt_wr(&t, VGPU_REG_DOORBELL, 1);
    VGT_OK(vg_vgpu_wait_idle(&t.gpu, VGT_TIMEOUT_MS, &status, VGT_ERR));
    g_assert_cmphex(status & VGPU_STATUS_HALTED, ==, VGPU_STATUS_HALTED);
    g_assert_cmpuint(vgt_rd(&t, VGPU_REG_ERROR_CODE), ==, VGPU_ERR_RING_FETCH);
    g_assert_cmpuint(vgt_rd(&t, VGPU_REG_ERROR_INDEX), ==, 0);
    VGT_OK(
        vg_vgpu_msi_wait(&t.gpu, VGPU_MSIX_VEC_ERROR, VGT_TIMEOUT_MS, VGT_ERR));
    vgt_assert_alive(&t);
    /* Move the ring to real memory; it works again. */
    vgt_wr(&t, VGPU_REG_IRQ_STATUS, VGPU_IRQ_ERROR);
    VGT_OK(vg_vgpu_ring_init(&t.gpu, &t.ram, 16, VGT_ERR));
    {
        struct vgpu_cmd c = vgpu_cmd_make(VGPU_OP_FENCE, 3, 0, 0, 0, 0, 0);

        g_assert_cmphex(vgt_run(&t, &c, 1), ==, 0);
    }
    g_assert_cmphex(vgt_rd(&t, VGPU_REG_FENCE_LO), ==, 3);
    vgt_stop(&t);
}

int main(int argc, char **argv)
{
    size_t i;
    char *path;

    g_test_init(&argc, &argv, NULL);
    for (i = 0; i < G_N_ELEMENTS(cases); i++) {
        path = g_strdup_printf("/vgpu/errors/%s", cases[i].name);
        g_test_add_data_func(path, &cases[i], test_bad_entry);
        g_free(path);
    }
    g_test_add_func("/vgpu/errors/scatter-index-range", test_scatter_index);
    g_test_add_func("/vgpu/errors/ring-fetch", test_ring_fetch);
    return g_test_run();
}
