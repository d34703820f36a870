/*
 * workload.h -- the workload profiles of vgpu-guest and the VRAM model
 * they keep up to date.
 *
 * VRAM is laid out in regions of 4 KiB model pages (model.h), all of
 * them initialised whatever the profiles, so that every kind of content
 * is present and checked:
 *   static   DATA pages uploaded once by DMA, never written again
 *   input    DATA pages, re-uploaded by DMA (inference)
 *   act      FLOAT rows, SCATTER_ADD over all of them (inference)
 *   idx      IDX pages: the row indices of the SCATTER_ADDs
 *   weights  FLOAT pages, AXPY += gradient chunk by chunk (training)
 *   grad     FLOAT gradient, FILLed with a new value every step
 *   ckpt     COPY of a weights chunk every fourth step (training)
 *   scratch  FILL pages, a slice FILLed again every step (training)
 *   table    FLOAT rows, SCATTER_ADD of a few random rows (sparse)
 *   cpu      FILL pages with a stamp word moved by guest CPU stores
 *            through the BAR2 mapping; now and then a whole page
 *            rewritten with 8-byte stores (cpu-writes)
 *   rest     ZERO, never written
 * Each step of a profile queues its commands, updates the model as the
 * commands will leave VRAM, and the caller flushes: after vgg_work_step()
 * the device is idle and every page must match its model entry.
 */
#ifndef VGG_WORKLOAD_H
#define VGG_WORKLOAD_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "gpu.h"
#include "model.h"

enum vgg_profile {
    VGG_P_IDLE,
    VGG_P_INFER,
    VGG_P_TRAIN,
    VGG_P_SPARSE,
    VGG_P_CPU,
    VGG_P_COUNT
};

struct vgg_region {
    uint64_t first; /* model page */
    uint64_t count;
};

struct vgg_work {
    struct vgg_gpu *gpu;
    uint64_t npages;
    struct vgg_page *model;
    unsigned profiles; /* 1u << enum vgg_profile */
    uint64_t rng;
    struct vgg_region statics, input, act, idx_act, weights, grad, ckpt,
        scratch, table, idx_table, cpu;
    /* Cursors */
    uint64_t input_next, scratch_next, idx_table_next;
    /* Counters */
    uint64_t steps[VGG_P_COUNT];
    uint64_t pages_written;        /* model pages given new content */
    uint64_t cpu_stores;           /* guest CPU stores to BAR2 */
    uint64_t dma_checks;           /* pages read back by DMA and compared */
    uint64_t dma_corrupt;          /* of those, pages that differed */
    struct vgg_mismatch dma_first; /* the first of them */
};

/* Parse "idle", "inference", "training", "sparse", "cpu-writes" or
 * "all" (all but idle), comma-separated, into a mask; false on a bad
 * name. */
bool vgg_profiles_parse(const char *text, unsigned *mask);
/* The mask as text ("inference,sparse"), into @buf of @len bytes. */
void vgg_profiles_format(unsigned mask, char *buf, size_t len);

/* Lay VRAM of @g out, write the initial content of every region and
 * flush.  @seed drives the random choices. */
int vgg_work_init(struct vgg_work *w, struct vgg_gpu *g, unsigned profiles,
                  uint64_t seed, struct vg_error *err);
void vgg_work_free(struct vgg_work *w);

/* One step of every enabled profile, then flush.  Pages read back by
 * DMA (inference) that differ are counted in dma_corrupt. */
int vgg_work_step(struct vgg_work *w, struct vg_error *err);

/* Check model page @page against VRAM (through BAR2); false and @m if it
 * differs.  Only meaningful while the device is idle. */
bool vgg_work_check(const struct vgg_work *w, uint64_t page,
                    struct vgg_mismatch *m);

/* Self-test of the checker: flip bits of one word of a random page of
 * the static region (never written again) through BAR2, without telling
 * the model; what the next check must report in @m. */
void vgg_work_inject(struct vgg_work *w, struct vgg_mismatch *m);

/* Next number of the tool's xorshift generator. */
uint64_t vgg_work_rand(struct vgg_work *w);

#endif
