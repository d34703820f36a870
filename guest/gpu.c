#include "gpu.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <time.h>

#include "common/log.h"

#define POLL_MIN_US 50
#define POLL_MAX_US 2000

static uint64_t now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void sleep_us(uint64_t us)
{
    struct timespec ts = {.tv_sec = (time_t)(us / 1000000u),
                          .tv_nsec = (long)(us % 1000000u) * 1000};

    nanosleep(&ts, NULL);
}

/* Largest power of two <= VGG_RING_ENTRIES_MAX whose entries are
 * physically contiguous at the start of the DMA arena. */
static uint32_t ring_fit(const struct vgg_dma *d)
{
    size_t contig = vgg_dma_contig(d, 0, VGG_RING_ENTRIES_MAX * VGPU_CMD_SIZE);
    uint32_t n = VGG_RING_ENTRIES_MAX;

    while (n > 2 && (size_t)n * VGPU_CMD_SIZE > contig) {
        n /= 2;
    }
    return n;
}

int vgg_gpu_open(struct vgg_gpu *g, const char *bdf, bool no_huge,
                 struct vg_error *err)
{
    char found[32];
    uint64_t base;
    int rc = 0;

    memset(g, 0, sizeof(*g));
    if (!bdf) {
        rc = vgg_pci_find(found, sizeof(found), err);
        bdf = found;
    }
    if (rc == 0) {
        rc = vgg_pci_open(bdf, &g->dev, err);
    }
    if (rc == 0) {
        rc = vgg_dma_alloc(&g->dma, VGG_DMA_ARENA_SIZE, no_huge, err);
        if (rc < 0) {
            vgg_pci_close(&g->dev);
        }
    }
    if (rc < 0) {
        return rc;
    }
    g->ring_entries = ring_fit(&g->dma);
    g->stage_start =
        ((size_t)g->ring_entries * VGPU_CMD_SIZE + VGG_DMA_PAGE - 1) &
        ~(size_t)(VGG_DMA_PAGE - 1);
    g->stage_off = g->stage_start;
    base = vgg_dma_addr(&g->dma, 0);
    /* Take the device as it is: interrupts off, any old error cleared,
     * the ring (re)programmed, which resets HEAD and TAIL. */
    vgg_wr(&g->dev, VGPU_REG_IRQ_MASK, 0);
    vgg_wr(&g->dev, VGPU_REG_IRQ_STATUS, VGPU_IRQ_FENCE | VGPU_IRQ_ERROR);
    vgg_wr(&g->dev, VGPU_REG_RING_BASE_LO, (uint32_t)base);
    vgg_wr(&g->dev, VGPU_REG_RING_BASE_HI, (uint32_t)(base >> 32));
    vgg_wr(&g->dev, VGPU_REG_RING_SIZE, g->ring_entries);
    g->fence = ((uint64_t)vgg_rd(&g->dev, VGPU_REG_FENCE_HI) << 32) |
               vgg_rd(&g->dev, VGPU_REG_FENCE_LO);
    if (vgg_rd(&g->dev, VGPU_REG_ERROR_CODE) != VGPU_ERR_NONE ||
        vgg_rd(&g->dev, VGPU_REG_RING_SIZE) != g->ring_entries) {
        vgg_gpu_close(g);
        return vg_error_set(err, EIO,
                            "%s: ring setup at 0x%" PRIx64 " (%u entries) "
                            "refused: ERROR_CODE %u",
                            bdf, base, g->ring_entries,
                            vgg_rd(&g->dev, VGPU_REG_ERROR_CODE));
    }
    vg_info("vGPU %s: VRAM %" PRIu64 " MiB, device page %u KiB, ring %u "
            "entries at 0x%" PRIx64 "%s",
            g->dev.bdf, g->dev.vram_size >> 20, g->dev.page_size >> 10,
            g->ring_entries, base, g->dma.huge ? " (huge page)" : "");
    return 0;
}

void vgg_gpu_close(struct vgg_gpu *g)
{
    if (g->dev.regs) {
        vgg_wr(&g->dev, VGPU_REG_RING_SIZE, 0);
    }
    vgg_dma_free(&g->dma);
    vgg_pci_close(&g->dev);
}

/* Write @c at TAIL and advance. */
static void ring_put(struct vgg_gpu *g, const struct vgpu_cmd *c)
{
    vgpu_cmd_encode(c, g->dma.buf + (size_t)g->tail * VGPU_CMD_SIZE);
    g->tail = (g->tail + 1) & (g->ring_entries - 1);
    g->queued++;
}

int vgg_gpu_push(struct vgg_gpu *g, const struct vgpu_cmd *c,
                 struct vg_error *err)
{
    enum vgpu_error_code code = VGPU_ERR_NONE;
    int rc;

    if (!vgpu_cmd_validate(c, g->dev.vram_size, &code)) {
        return vg_error_set(err, EINVAL,
                            "bug: %s [0x%" PRIx64 ", 0x%" PRIx64 ", 0x%" PRIx64
                            "] would fail with %s",
                            vgpu_op_name(c->opcode), c->arg[0], c->arg[1],
                            c->arg[2], vgpu_error_name(code));
    }
    /* Keep one entry for the FENCE and one free (a full ring holds
     * RING_SIZE - 1 entries). */
    if (g->queued + 2 >= g->ring_entries) {
        rc = vgg_gpu_flush(g, err);
        if (rc < 0) {
            return rc;
        }
    }
    ring_put(g, c);
    return 0;
}

/* The device halted: describe its error and the command that caused it. */
static int halted(struct vgg_gpu *g, struct vg_error *err)
{
    uint32_t code = vgg_rd(&g->dev, VGPU_REG_ERROR_CODE);
    uint32_t index = vgg_rd(&g->dev, VGPU_REG_ERROR_INDEX);
    struct vgpu_cmd c;

    if (index < g->ring_entries) {
        vgpu_cmd_decode(g->dma.buf + (size_t)index * VGPU_CMD_SIZE, &c);
        return vg_error_set(
            err, EIO,
            "vGPU halted: ERROR_CODE %s (%u) at ring index "
            "%u: %s [0x%" PRIx64 ", 0x%" PRIx64 ", 0x%" PRIx64 "]",
            vgpu_error_name(code), code, index, vgpu_op_name(c.opcode),
            c.arg[0], c.arg[1], c.arg[2]);
    }
    return vg_error_set(err, EIO, "vGPU halted: ERROR_CODE %s (%u), index 0x%x",
                        vgpu_error_name(code), code, index);
}

int vgg_gpu_flush(struct vgg_gpu *g, struct vg_error *err)
{
    uint32_t ncmds = g->queued;
    uint64_t t0, waited, poll = POLL_MIN_US;
    struct vgpu_cmd fence;

    if (ncmds == 0) {
        return 0;
    }
    g->fence++;
    fence = vgpu_cmd_make(VGPU_OP_FENCE, g->fence, 0, 0, 0, 0, 0);
    ring_put(g, &fence);
    __sync_synchronize(); /* entries in RAM before the doorbell */
    vgg_wr(&g->dev, VGPU_REG_RING_TAIL, g->tail);
    vgg_wr(&g->dev, VGPU_REG_DOORBELL, 1);
    t0 = now_us();
    for (;;) {
        uint32_t lo = vgg_rd(&g->dev, VGPU_REG_FENCE_LO);

        if (lo == (uint32_t)g->fence) {
            break;
        }
        if (vgg_rd(&g->dev, VGPU_REG_STATUS) & VGPU_STATUS_HALTED) {
            return halted(g, err);
        }
        if (now_us() - t0 > (uint64_t)VGG_FENCE_TIMEOUT_MS * 1000u) {
            return vg_error_set(err, ETIMEDOUT,
                                "FENCE %" PRIu64 " not reached after %d ms "
                                "(FENCE_LO %u, HEAD %u, TAIL %u, STATUS 0x%x)",
                                g->fence, VGG_FENCE_TIMEOUT_MS, lo,
                                vgg_rd(&g->dev, VGPU_REG_RING_HEAD), g->tail,
                                vgg_rd(&g->dev, VGPU_REG_STATUS));
        }
        sleep_us(poll);
        poll = poll * 2 > POLL_MAX_US ? POLL_MAX_US : poll * 2;
    }
    __sync_synchronize(); /* DMA results read after the fence */
    waited = now_us() - t0;
    g->wait_max_us = waited > g->wait_max_us ? waited : g->wait_max_us;
    g->cmds += ncmds;
    g->batches++;
    g->queued = 0;
    return 0;
}

int vgg_gpu_stage(struct vgg_gpu *g, size_t len, size_t *off,
                  struct vg_error *err)
{
    size_t need = (len + VGG_DMA_PAGE - 1) & ~(size_t)(VGG_DMA_PAGE - 1);
    int rc;

    if (need > g->dma.size - g->stage_start) {
        return vg_error_set(err, EINVAL, "staging %zu bytes: area is %zu", len,
                            g->dma.size - g->stage_start);
    }
    if (need > g->dma.size - g->stage_off) {
        /* What is staged may still be waiting for its DMA command. */
        rc = vgg_gpu_flush(g, err);
        if (rc < 0) {
            return rc;
        }
        g->stage_off = g->stage_start;
    }
    *off = g->stage_off;
    g->stage_off += need;
    return 0;
}

/* One DMA command per physically contiguous piece of [@off, @off+@len). */
static int dma_cmds(struct vgg_gpu *g, bool to_vram, uint64_t vram_off,
                    size_t off, size_t len, struct vg_error *err)
{
    int rc = 0;

    while (rc == 0 && len > 0) {
        size_t n = vgg_dma_contig(&g->dma, off, len);
        uint64_t iova = vgg_dma_addr(&g->dma, off);
        struct vgpu_cmd c = to_vram ? vgpu_cmd_make(VGPU_OP_DMA_TO_VRAM,
                                                    vram_off, iova, n, 0, 0, 0)
                                    : vgpu_cmd_make(VGPU_OP_DMA_FROM_VRAM, iova,
                                                    vram_off, n, 0, 0, 0);

        rc = vgg_gpu_push(g, &c, err);
        off += n;
        vram_off += n;
        len -= n;
    }
    return rc;
}

int vgg_gpu_dma_to_vram(struct vgg_gpu *g, uint64_t vram_off, size_t off,
                        size_t len, struct vg_error *err)
{
    return dma_cmds(g, true, vram_off, off, len, err);
}

int vgg_gpu_dma_from_vram(struct vgg_gpu *g, size_t off, uint64_t vram_off,
                          size_t len, struct vg_error *err)
{
    return dma_cmds(g, false, vram_off, off, len, err);
}
