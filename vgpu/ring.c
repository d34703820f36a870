/*
 * ring.c -- the command processor: fetch ring entries from guest RAM,
 * validate them, run them through the engines in budgeted slices, complete
 * them (CMDS_DONE, FENCE) or latch their error.
 */
#include "vgpu-int.h"

#include "cmd.h"
#include "common/log.h"

/* True if the ring has an entry the device may fetch now. */
static bool ring_can_fetch(struct vgpu *gpu)
{
    const struct vgpu_regs *r = &gpu->regs;

    if (!gpu->kicked || r->ring_size == 0 || r->error_code != VGPU_ERR_NONE) {
        return false;
    }
    if (r->ring_head == r->ring_tail) {
        gpu->kicked = false; /* drained: wait for the next doorbell */
        return false;
    }
    return true;
}

/* Host pointer of ring entry @index, or NULL if it is not mapped. */
static const void *ring_entry(struct vgpu *gpu, uint32_t index)
{
    uint64_t base = gpu->regs.ring_base;
    uint64_t end = (uint64_t)(index + 1) * VGPU_CMD_SIZE;

    if (base > UINT64_MAX - end) {
        return NULL;
    }
    return gpu->host.dma_ptr(gpu->host.opaque, base + end - VGPU_CMD_SIZE,
                             VGPU_CMD_SIZE, false);
}

static void cmd_failed(struct vgpu *gpu, uint32_t code, uint32_t index)
{
    gpu->stats.cmds_failed++;
    vgpu_error_latch(gpu, code, index);
}

/* Fetch and validate the entry at HEAD, advancing HEAD past it; on success
 * it becomes the job in flight. */
static void ring_fetch(struct vgpu *gpu)
{
    uint32_t index = gpu->regs.ring_head;
    const void *raw = ring_entry(gpu, index);
    enum vgpu_error_code code;
    struct vgpu_cmd cmd;

    gpu->regs.ring_head = (index + 1) & (gpu->regs.ring_size - 1);
    if (!raw) {
        cmd_failed(gpu, VGPU_ERR_RING_FETCH, index);
        return;
    }
    vgpu_cmd_decode(raw, &cmd);
    if (!vgpu_cmd_validate(&cmd, gpu->vram_size, &code)) {
        vg_dbg("vgpu: ring entry %u (opcode %u) rejected", index, cmd.opcode);
        cmd_failed(gpu, code, index);
        return;
    }
    vgpu_job_init(&gpu->job, &cmd, index);
    gpu->job_active = true;
}

static void job_complete(struct vgpu *gpu)
{
    const struct vgpu_cmd *cmd = &gpu->job.cmd;

    gpu->job_active = false;
    gpu->regs.cmds_done++;
    gpu->stats.cmds_done++;
    gpu->stats.cmds_by_op[cmd->opcode]++;
    if (cmd->opcode == VGPU_OP_FENCE) {
        gpu->regs.fence = cmd->arg[0];
        gpu->stats.fences++;
        vgpu_irq_set(gpu, VGPU_IRQ_FENCE);
    }
}

static void job_run(struct vgpu *gpu, uint64_t *budget)
{
    enum vgpu_error_code code;

    switch (vgpu_engine_run(&gpu->env, &gpu->job, budget, &code)) {
    case VGPU_EXEC_DONE:
        job_complete(gpu);
        break;
    case VGPU_EXEC_ERROR:
        gpu->job_active = false;
        cmd_failed(gpu, code, gpu->job.ring_index);
        break;
    case VGPU_EXEC_MORE:
        break;
    }
}

void vgpu_set_vram_gate(struct vgpu *gpu, vgpu_vram_ready_fn ready,
                        void *opaque)
{
    gpu->vram_ready = ready;
    gpu->vram_ready_opaque = opaque;
}

/* The gate lets the job in flight touch its VRAM ranges. */
static bool job_may_run(struct vgpu *gpu)
{
    struct vgpu_vram_range r[2];
    unsigned n;

    if (!gpu->vram_ready) {
        return true;
    }
    n = vgpu_cmd_vram_ranges(&gpu->job.cmd, r);
    for (unsigned i = 0; i < n; i++) {
        if (r[i].len &&
            !gpu->vram_ready(gpu->vram_ready_opaque, r[i].off, r[i].len)) {
            return false;
        }
    }
    return true;
}

bool vgpu_step(struct vgpu *gpu, uint64_t budget)
{
    if (gpu->stopped) {
        return false;
    }
    if (!gpu->env.vram) {
        budget = budget < UINT64_MAX / VGPU_DEV_BUDGET_SCALE
                     ? budget * VGPU_DEV_BUDGET_SCALE
                     : UINT64_MAX;
    }
    while (budget > 0) {
        if (gpu->job_active && !job_may_run(gpu)) {
            break; /* its pages are on their way */
        } else if (gpu->job_active) {
            job_run(gpu, &budget);
        } else if (ring_can_fetch(gpu)) {
            budget = budget > VGPU_CMD_SIZE ? budget - VGPU_CMD_SIZE : 0;
            ring_fetch(gpu);
        } else {
            break;
        }
    }
    return vgpu_busy(gpu);
}

bool vgpu_busy(const struct vgpu *gpu)
{
    const struct vgpu_regs *r = &gpu->regs;

    return gpu->job_active ||
           (gpu->kicked && r->ring_size != 0 && r->ring_head != r->ring_tail &&
            r->error_code == VGPU_ERR_NONE);
}

void vgpu_set_stopped(struct vgpu *gpu, bool stopped)
{
    vg_dbg("vgpu: %s (job %s)", stopped ? "stopped" : "resumed",
           gpu->job_active ? "in flight" : "none");
    gpu->stopped = stopped;
}

bool vgpu_stopped(const struct vgpu *gpu)
{
    return gpu->stopped;
}

bool vgpu_runnable(const struct vgpu *gpu)
{
    return !gpu->stopped && vgpu_busy(gpu);
}
