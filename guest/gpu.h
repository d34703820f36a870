/*
 * gpu.h -- the in-guest driver of vgpu-guest: command ring, fences and a
 * DMA staging area in guest RAM.
 *
 * Commands are queued with vgg_gpu_push() and run in batches:
 * vgg_gpu_flush() appends a FENCE, rings the doorbell and polls the FENCE
 * register (the guest takes no interrupts) until the batch is done, so
 * after a flush the device is idle and VRAM holds the result of every
 * command pushed.  A full ring flushes by itself.  Staging memory
 * (vgg_gpu_stage) stays valid until the next vgg_gpu_stage() call that
 * finds no room, which flushes first: data staged for a DMA command is
 * never overwritten before the command ran.  A device error (STATUS
 * HALTED) fails the flush with the error code and the offending command.
 */
#ifndef VGG_GPU_H
#define VGG_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "dmamem.h"
#include "pcidev.h"
#include "vgpu/cmd.h"

#define VGG_RING_ENTRIES_MAX 256u
#define VGG_DMA_ARENA_SIZE   (2u << 20)
/* A batch that does not complete within this much guest time is an
 * error (the guest's clock stands still while the VM is stopped). */
#define VGG_FENCE_TIMEOUT_MS 60000

struct vgg_gpu {
    struct vgg_dev dev;
    struct vgg_dma dma; /* ring at offset 0, then the staging area */
    uint32_t ring_entries;
    uint32_t tail;
    uint32_t queued; /* entries pushed since the last flush */
    uint64_t fence;  /* value of the last FENCE pushed */
    size_t stage_start, stage_off;
    /* Counters */
    uint64_t cmds;        /* commands completed (FENCEs not counted) */
    uint64_t batches;     /* flushes that ran commands */
    uint64_t wait_max_us; /* longest wait for a batch */
};

/* Find the vGPU (or use @bdf if not NULL), map it, set up the ring and
 * the staging area (in ordinary pages, not a huge page, if @no_huge). */
int vgg_gpu_open(struct vgg_gpu *g, const char *bdf, bool no_huge,
                 struct vg_error *err);
void vgg_gpu_close(struct vgg_gpu *g);

/* Queue @c (checked with vgpu_cmd_validate() first). */
int vgg_gpu_push(struct vgg_gpu *g, const struct vgpu_cmd *c,
                 struct vg_error *err);
/* Run everything queued and wait until it completed. */
int vgg_gpu_flush(struct vgg_gpu *g, struct vg_error *err);

/* @len bytes (rounded up to 4 KiB) of staging memory: offset in *@off of
 * g->dma.buf.  At most the staging area's size. */
int vgg_gpu_stage(struct vgg_gpu *g, size_t len, size_t *off,
                  struct vg_error *err);
/* Queue DMA of staging bytes [@off, @off + @len) to VRAM at @vram_off, or
 * of VRAM to staging, one command per physically contiguous piece. */
int vgg_gpu_dma_to_vram(struct vgg_gpu *g, uint64_t vram_off, size_t off,
                        size_t len, struct vg_error *err);
int vgg_gpu_dma_from_vram(struct vgg_gpu *g, size_t off, uint64_t vram_off,
                          size_t len, struct vg_error *err);

#endif
