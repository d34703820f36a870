/*
 * vgpu-drv.h -- drive the vgmig vGPU (vgpu/vgpu-regs.h) through qtest.
 *
 * vg_vgpu_open() finds the device on the pc machine's bus 0, assigns its
 * BARs, enables bus mastering and MSI-X, and points each MSI-X vector at
 * its own 4-byte slot in guest RAM with data VG_VGPU_MSI_DATA(vector): an
 * interrupt shows up as that value in the slot.  The command ring lives in
 * guest RAM; submission writes entries with qtest, moves RING_TAIL and
 * rings the doorbell.  Every wait is bounded.
 */
#ifndef VG_QCLIENT_VGPU_DRV_H
#define VG_QCLIENT_VGPU_DRV_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "harness.h"
#include "pci.h"
#include "qtest.h"
#include "vgpu/vgpu-regs.h"

#define VG_VGPU_MSI_DATA(vec) (0x5a5a0000u | (vec))

struct vg_vgpu {
    struct vg_qtest *qt;
    struct vg_pci_dev pci;
    uint64_t regs_addr; /* BAR0 */
    uint64_t vram_addr; /* BAR2 */
    uint64_t vram_size; /* from the BAR size */
    uint64_t msi_slot[VGPU_MSIX_VECTORS];
    uint64_t ring_addr; /* guest RAM, 0 until vg_vgpu_ring_init() */
    uint32_t ring_entries;
    uint32_t tail;
};

/* Find, map and enable the vGPU; MSI-X slots come from @ram (zeroed). */
int vg_vgpu_open(struct vg_qtest *qt, struct vg_galloc *ram,
                 struct vg_vgpu *gpu, struct vg_error *err);

/* Attach to a vGPU that vg_vgpu_open() set up, typically in the source
 * of a migration, without reprogramming anything: BAR addresses from the
 * configuration space, MSI-X slots from the vector table (each must carry
 * VG_VGPU_MSI_DATA(vector), unmasked), the ring from RING_BASE, RING_SIZE
 * and RING_TAIL.  Fails if memory decode, bus mastering or MSI-X is off. */
int vg_vgpu_attach(struct vg_qtest *qt, struct vg_vgpu *gpu,
                   struct vg_error *err);

/* Several vGPUs in one VM: vg_vgpu_open() and vg_vgpu_attach() for the
 * @nth vGPU (from 0, in devfn order: the order of the -device options).
 * vg_vgpu_open_nth() places the BARs in *@win (VG_PCI_WINDOWS_INIT, then
 * the same windows for every vGPU of the VM, so that no BARs overlap). */
int vg_vgpu_open_nth(struct vg_qtest *qt, struct vg_galloc *ram, unsigned nth,
                     struct vg_pci_windows *win, struct vg_vgpu *gpu,
                     struct vg_error *err);
int vg_vgpu_attach_nth(struct vg_qtest *qt, unsigned nth, struct vg_vgpu *gpu,
                       struct vg_error *err);

/* 32-bit register access at BAR0 offset @reg. */
int vg_vgpu_rd(struct vg_vgpu *gpu, uint32_t reg, uint32_t *val,
               struct vg_error *err);
int vg_vgpu_wr(struct vg_vgpu *gpu, uint32_t reg, uint32_t val,
               struct vg_error *err);

/* Current value of MSI-X slot @vec; clear it to 0. */
int vg_vgpu_msi_read(struct vg_vgpu *gpu, unsigned vec, uint32_t *val,
                     struct vg_error *err);
int vg_vgpu_msi_clear(struct vg_vgpu *gpu, unsigned vec, struct vg_error *err);
/* Wait up to @timeout_ms for the message of vector @vec in its slot. */
int vg_vgpu_msi_wait(struct vg_vgpu *gpu, unsigned vec, int timeout_ms,
                     struct vg_error *err);

/* Allocate a ring of @entries (power of two) from @ram, zero it, program
 * RING_BASE and RING_SIZE; tail starts at 0. */
int vg_vgpu_ring_init(struct vg_vgpu *gpu, struct vg_galloc *ram,
                      uint32_t entries, struct vg_error *err);
/* Write @n commands at the tail, advance RING_TAIL, ring the doorbell. */
int vg_vgpu_submit(struct vg_vgpu *gpu, const struct vgpu_cmd *cmds, unsigned n,
                   struct vg_error *err);
/* Poll STATUS until BUSY is clear or HALTED is set, at most @timeout_ms;
 * the final STATUS value in *@status if not NULL. */
int vg_vgpu_wait_idle(struct vg_vgpu *gpu, int timeout_ms, uint32_t *status,
                      struct vg_error *err);
/* Poll register @reg until it equals @want, at most @timeout_ms. */
int vg_vgpu_wait_reg(struct vg_vgpu *gpu, uint32_t reg, uint32_t want,
                     int timeout_ms, struct vg_error *err);

#endif
