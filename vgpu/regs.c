/*
 * regs.c -- the BAR0 register file: access checks, RO/RW/RW1C/WO
 * semantics, ring configuration checks, interrupt status and mask.
 */
#include "vgpu-int.h"

#include <endian.h>
#include <errno.h>
#include <string.h>

#include "cmd.h"
#include "common/log.h"

#define IRQ_ALL  (VGPU_IRQ_FENCE | VGPU_IRQ_ERROR)
#define FEATURES (VGPU_FEAT_DMA | VGPU_FEAT_AXPY | VGPU_FEAT_SCATTER)

void vgpu_regs_reset(struct vgpu_regs *regs)
{
    memset(regs, 0, sizeof(*regs));
}

static unsigned irq_vector(uint32_t bit)
{
    return bit == VGPU_IRQ_FENCE ? VGPU_MSIX_VEC_FENCE : VGPU_MSIX_VEC_ERROR;
}

/* Deliver the interrupts in @bits (each set in IRQ_STATUS and unmasked). */
static void irq_deliver(struct vgpu *gpu, uint32_t bits)
{
    uint32_t bit;

    for (bit = 1; bit & IRQ_ALL; bit <<= 1) {
        if (bits & bit) {
            gpu->stats.irqs_raised++;
            gpu->host.raise_irq(gpu->host.opaque, irq_vector(bit));
        }
    }
}

void vgpu_irq_set(struct vgpu *gpu, uint32_t bits)
{
    uint32_t newly = bits & ~gpu->regs.irq_status;

    gpu->regs.irq_status |= bits;
    irq_deliver(gpu, newly & gpu->regs.irq_mask);
}

void vgpu_error_latch(struct vgpu *gpu, uint32_t code, uint32_t index)
{
    vg_dbg("vgpu: error %s (ring index %#x)", vgpu_error_name(code), index);
    if (gpu->regs.error_code != VGPU_ERR_NONE) {
        return; /* the first error stays until the guest clears it */
    }
    gpu->regs.error_code = code;
    gpu->regs.error_index = index;
    vgpu_irq_set(gpu, VGPU_IRQ_ERROR);
}

static uint32_t status_reg(const struct vgpu *gpu)
{
    uint32_t s = 0;

    if (gpu->job_active || gpu->regs.ring_head != gpu->regs.ring_tail) {
        s |= VGPU_STATUS_BUSY;
    }
    if (gpu->regs.error_code != VGPU_ERR_NONE) {
        s |= VGPU_STATUS_HALTED;
    }
    return s;
}

/* Value of register @off; false if @off is no register. */
static bool reg_read(const struct vgpu *gpu, uint64_t off, uint32_t *v)
{
    const struct vgpu_regs *r = &gpu->regs;

    switch (off) {
    case VGPU_REG_ID:
        *v = VGPU_ID_MAGIC;
        break;
    case VGPU_REG_VERSION:
        *v = VGPU_VERSION;
        break;
    case VGPU_REG_VRAM_SIZE_LO:
        *v = (uint32_t)gpu->vram_size;
        break;
    case VGPU_REG_VRAM_SIZE_HI:
        *v = (uint32_t)(gpu->vram_size >> 32);
        break;
    case VGPU_REG_PAGE_SIZE:
        *v = gpu->page_size;
        break;
    case VGPU_REG_FEATURES:
        *v = FEATURES;
        break;
    case VGPU_REG_RING_BASE_LO:
        *v = (uint32_t)r->ring_base;
        break;
    case VGPU_REG_RING_BASE_HI:
        *v = (uint32_t)(r->ring_base >> 32);
        break;
    case VGPU_REG_RING_SIZE:
        *v = r->ring_size;
        break;
    case VGPU_REG_RING_HEAD:
        *v = r->ring_head;
        break;
    case VGPU_REG_RING_TAIL:
        *v = r->ring_tail;
        break;
    case VGPU_REG_DOORBELL:
        *v = 0;
        break;
    case VGPU_REG_FENCE_LO:
        *v = (uint32_t)r->fence;
        break;
    case VGPU_REG_FENCE_HI:
        *v = (uint32_t)(r->fence >> 32);
        break;
    case VGPU_REG_IRQ_STATUS:
        *v = r->irq_status;
        break;
    case VGPU_REG_IRQ_MASK:
        *v = r->irq_mask;
        break;
    case VGPU_REG_ERROR_CODE:
        *v = r->error_code;
        break;
    case VGPU_REG_ERROR_INDEX:
        *v = r->error_index;
        break;
    case VGPU_REG_STATUS:
        *v = status_reg(gpu);
        break;
    case VGPU_REG_CMDS_DONE:
        *v = r->cmds_done;
        break;
    case VGPU_REG_SCRATCH:
        *v = r->scratch;
        break;
    default:
        return false;
    }
    return true;
}

/* Reject (and count) accesses that are not aligned 4-byte accesses. */
static bool access_ok(struct vgpu *gpu, uint64_t off, uint32_t len)
{
    if (len != 4 || (off & 3)) {
        gpu->stats.bad_reg_access++;
        return false;
    }
    return true;
}

int vgpu_bar0_read(struct vgpu *gpu, uint64_t off, void *data, uint32_t len)
{
    uint32_t v;

    if (!access_ok(gpu, off, len)) {
        memset(data, 0xff, len);
        return -EINVAL;
    }
    if (!reg_read(gpu, off, &v)) {
        gpu->stats.bad_reg_access++;
        memset(data, 0xff, len);
        return -EINVAL;
    }
    v = htole32(v);
    memcpy(data, &v, 4);
    return 0;
}

/* The ring moved or was switched: start over at entry 0. */
static void ring_restart(struct vgpu *gpu)
{
    gpu->regs.ring_head = 0;
    gpu->regs.ring_tail = 0;
    gpu->kicked = false;
}

static void write_ring_base_lo(struct vgpu *gpu, uint32_t v)
{
    if (v % VGPU_RING_ALIGN) {
        vgpu_error_latch(gpu, VGPU_ERR_RING_CONFIG, VGPU_ERROR_INDEX_NONE);
        return;
    }
    gpu->regs.ring_base = (gpu->regs.ring_base & ~(uint64_t)UINT32_MAX) | v;
    ring_restart(gpu);
}

static void write_ring_base_hi(struct vgpu *gpu, uint32_t v)
{
    gpu->regs.ring_base =
        (gpu->regs.ring_base & UINT32_MAX) | ((uint64_t)v << 32);
    ring_restart(gpu);
}

static void write_ring_size(struct vgpu *gpu, uint32_t v)
{
    if ((v & (v - 1)) || v > VGPU_RING_MAX_ENTRIES) {
        vgpu_error_latch(gpu, VGPU_ERR_RING_CONFIG, VGPU_ERROR_INDEX_NONE);
        return;
    }
    gpu->regs.ring_size = v;
    ring_restart(gpu);
}

static void write_ring_tail(struct vgpu *gpu, uint32_t v)
{
    if (v >= gpu->regs.ring_size) {
        vgpu_error_latch(gpu, VGPU_ERR_RING_CONFIG, VGPU_ERROR_INDEX_NONE);
        return;
    }
    gpu->regs.ring_tail = v;
}

/* RW1C: clearing VGPU_IRQ_ERROR also clears the error and un-halts. */
static void write_irq_status(struct vgpu *gpu, uint32_t v)
{
    v &= IRQ_ALL;
    gpu->regs.irq_status &= ~v;
    if (v & VGPU_IRQ_ERROR) {
        gpu->regs.error_code = VGPU_ERR_NONE;
        gpu->regs.error_index = 0;
    }
}

/* Unmasking a source whose status bit is set delivers it. */
static void write_irq_mask(struct vgpu *gpu, uint32_t v)
{
    uint32_t enabled = v & IRQ_ALL & ~gpu->regs.irq_mask;

    gpu->regs.irq_mask = v & IRQ_ALL;
    irq_deliver(gpu, enabled & gpu->regs.irq_status);
}

/* Apply a write to register @off; false if @off is no register.  Writes
 * to read-only registers are ignored. */
static bool reg_write(struct vgpu *gpu, uint64_t off, uint32_t v)
{
    uint32_t dummy;

    switch (off) {
    case VGPU_REG_RING_BASE_LO:
        write_ring_base_lo(gpu, v);
        return true;
    case VGPU_REG_RING_BASE_HI:
        write_ring_base_hi(gpu, v);
        return true;
    case VGPU_REG_RING_SIZE:
        write_ring_size(gpu, v);
        return true;
    case VGPU_REG_RING_TAIL:
        write_ring_tail(gpu, v);
        return true;
    case VGPU_REG_DOORBELL:
        gpu->kicked = true;
        return true;
    case VGPU_REG_IRQ_STATUS:
        write_irq_status(gpu, v);
        return true;
    case VGPU_REG_IRQ_MASK:
        write_irq_mask(gpu, v);
        return true;
    case VGPU_REG_SCRATCH:
        gpu->regs.scratch = v;
        return true;
    default:
        return reg_read(gpu, off, &dummy);
    }
}

int vgpu_bar0_write(struct vgpu *gpu, uint64_t off, const void *data,
                    uint32_t len)
{
    uint32_t v;

    if (!access_ok(gpu, off, len)) {
        return -EINVAL;
    }
    memcpy(&v, data, 4);
    if (!reg_write(gpu, off, le32toh(v))) {
        gpu->stats.bad_reg_access++;
        return -EINVAL;
    }
    return 0;
}
