/*
 * model.h -- a workload for the vGPU and the test's model of its VRAM.
 *
 * The workload submits batches of ring commands (FILL, COPY, DMA to and
 * from guest RAM, AXPY, SCATTER_ADD, a FENCE at the end of each batch)
 * and writes VRAM through the BAR2 mapping with qtest, as a guest CPU
 * would.  The model applies every command to a copy of VRAM (and of the
 * guest RAM buffer that DMA_FROM_VRAM writes), in ring order, as it is
 * submitted: whichever side ends up running the batch, and however many
 * migrations it goes through, the device must end with exactly these
 * bytes.  model_verify() waits until the device is idle and compares all
 * of VRAM, read back through BAR2, and the DMA buffer with the model.
 *
 * A harness's qtest writes are not stopped with the vCPUs: QEMU can stop
 * the VM for switchover between the rig's query-status and its writes.
 * The rig turns pause-before-switchover on, so such writes still land
 * before the device state and RAM's last pass go out, except guest CPU
 * writes through BAR2: QEMU sent its last log of them when it stopped the
 * VM, so a page they changed reaches the destination only if it was to
 * go anyway.  A batch is therefore made in two steps, CPU writes
 * (model_cpu_writes) then commands (model_submit), each left *unsettled*
 * until the caller settles it (model_settle), having seen the VM still
 * running after the step's last write.  On a destination, model_verify()
 * accepts a raced CPU-write step exactly so far: each byte it covered
 * holds its old or its new value.  Raced commands must have run.
 *
 * VRAM layout (V = VRAM size, at least 4 MiB):
 *   [0, V/2)          general: FILL, COPY, DMA, CPU writes
 *   [V/2, 5V/8)       AXPY: x in the first half, y in the second
 *   [5V/8, +64 KiB)   SCATTER_ADD table (256 rows of 256 bytes)
 *   [5V/8 + 128 KiB)  its index array (512 u32 rows, written once)
 *   [3V/4, V)         stays zero (zero runs in the stream)
 * All float data are small integers or halves, so every sum is exact.
 */
#ifndef VGMIG_TESTS_SOAK_MODEL_H
#define VGMIG_TESTS_SOAK_MODEL_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "qclient/harness.h"
#include "qclient/vgpu-drv.h"

/* What a batch does. */
enum model_mix {
    MIX_IDLE,    /* nothing */
    MIX_FILL,    /* FILLs */
    MIX_COPY,    /* COPYs within the general region */
    MIX_DMA,     /* DMA to and from guest RAM */
    MIX_COMPUTE, /* AXPY and SCATTER_ADD (opaque writer) */
    MIX_CPU,     /* CPU writes through BAR2 only */
    MIX_MIXED,   /* all of the above */
    MIX_COUNT
};
const char *model_mix_name(enum model_mix mix);

struct model {
    uint64_t vram_size;
    uint8_t *vram;                /* expected VRAM */
    uint8_t *dma_out;             /* expected DMA_FROM_VRAM target buffer */
    uint32_t fence;               /* FENCE value of the last batch submitted */
    struct model_step *unsettled; /* see above; NULL when none */
    GRand *rng;
    uint64_t stage_gpa, out_gpa; /* guest RAM: DMA source, DMA target */
    /* Counters for the report. */
    uint64_t batches, commands, cpu_writes;
    uint64_t raced_steps; /* CPU-write steps that raced the stop, checked
                             on a destination */
    uint64_t raced_lost;  /* ... of which not all bytes got there */
};

/* A model of a fresh VM; its workload draws from @seed. */
void model_init(struct model *m, uint64_t vram_size, uint64_t seed);
void model_destroy(struct model *m);

/* On a fresh VM (@gpu opened, ring set up, @ram its allocator): allocate
 * the DMA buffers, write the index array and the initial contents of
 * every region; waits until the device is idle. */
int model_setup(struct model *m, struct vg_vgpu *gpu, struct vg_galloc *ram,
                struct vg_error *err);

/* The two steps of one batch of @mix on an idle @gpu, each a no-op for a
 * mix without it: CPU writes through BAR2, then commands and a FENCE
 * submitted (not waited for).  Each settles the step before it, if any. */
int model_cpu_writes(struct model *m, struct vg_vgpu *gpu, enum model_mix mix,
                     struct vg_error *err);
int model_submit(struct model *m, struct vg_vgpu *gpu, enum model_mix mix,
                 struct vg_error *err);
/* Every write of the unsettled step reached the device: apply it to the
 * model.  True if there was one. */
bool model_settle(struct model *m);

/* Wait until @gpu is idle; it must not be halted, its FENCE must be the
 * last one, and VRAM and the DMA buffer must equal the model.  With
 * @may_lack_unsettled (the VM moved in a migration that an unsettled step
 * raced), raced CPU writes may be missing as above; everything else is
 * settled first.  -EILSEQ for a mismatch, with where it is in @err (the model
 * then takes the device's bytes so that later steps are checked against
 * them). */
int model_verify(struct model *m, struct vg_vgpu *gpu, bool may_lack_unsettled,
                 struct vg_error *err);

/* Bytes of VRAM the model holds that are not zero, by page. */
uint64_t model_nonzero_bytes(const struct model *m, uint64_t page_size);

#endif
