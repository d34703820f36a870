/*
 * vgpu-int.h -- the device state shared by the vgpu/ modules (not an API:
 * users include vgpu.h).
 *
 * vgpu.c owns the lifecycle, VRAM and statistics; regs.c the BAR0 register
 * file and interrupt/error signalling; ring.c the command processor.
 */
#ifndef VGPU_INT_H
#define VGPU_INT_H

#include <stdatomic.h>

#include "backend.h"
#include "engines.h"
#include "vgpu.h"

/* Guest-visible register state (what BAR0 shows, besides constants). */
struct vgpu_regs {
    uint64_t ring_base;
    uint32_t ring_size;
    uint32_t ring_head;
    uint32_t ring_tail;
    uint64_t fence;
    uint32_t irq_status;
    uint32_t irq_mask;
    uint32_t error_code; /* VGPU_ERR_*; not NONE = ring halted */
    uint32_t error_index;
    uint32_t cmds_done;
    uint32_t scratch;
};

struct vgpu {
    struct vgpu_host host;
    struct vgpu_backend *be;
    struct vg_populate *prealloc; /* VRAM's (vgpu_config.prealloc), or NULL */
    atomic_bool vram_holes; /* pages freed since: the preallocation is off */
    uint64_t vram_size;
    uint32_t page_size;
    struct vgpu_regs regs;
    bool kicked;     /* DOORBELL written since the ring last drained */
    bool stopped;    /* quiesced for migration: vgpu_step does nothing */
    bool job_active; /* @job holds a command in flight */
    struct vgpu_job job;
    struct vgpu_engine_env env;
    struct vgpu_stats stats;
    vgpu_vram_ready_fn vram_ready; /* vgpu_set_vram_gate() */
    void *vram_ready_opaque;
    vgpu_write_fn observer; /* vgpu_set_write_observer() */
    void *observer_opaque;
};

/* regs.c: put every register at its reset value. */
void vgpu_regs_reset(struct vgpu_regs *regs);
/* regs.c: set IRQ_STATUS @bits; deliver those newly set and unmasked. */
void vgpu_irq_set(struct vgpu *gpu, uint32_t bits);
/* regs.c: latch error @code for ring entry @index (VGPU_ERROR_INDEX_NONE if
 * none) unless an error is already latched; halt the ring; raise the error
 * interrupt. */
void vgpu_error_latch(struct vgpu *gpu, uint32_t code, uint32_t index);

#endif
