#include "vgpu-drv.h"

#include <endian.h>
#include <errno.h>
#include <glib.h>
#include <linux/pci_regs.h>
#include <string.h>

#include "io.h"

#define POLL_INTERVAL_US 1000

int vg_vgpu_open(struct vg_qtest *qt, struct vg_galloc *ram,
                 struct vg_vgpu *gpu, struct vg_error *err)
{
    struct vg_pci_windows win = VG_PCI_WINDOWS_INIT;

    return vg_vgpu_open_nth(qt, ram, 0, &win, gpu, err);
}

int vg_vgpu_open_nth(struct vg_qtest *qt, struct vg_galloc *ram, unsigned nth,
                     struct vg_pci_windows *win, struct vg_vgpu *gpu,
                     struct vg_error *err)
{
    unsigned v;
    int rc;

    memset(gpu, 0, sizeof(*gpu));
    gpu->qt = qt;
    rc = vg_pci_find_nth(qt, VGPU_PCI_VENDOR_ID, VGPU_PCI_DEVICE_ID, nth,
                         &gpu->pci, err);
    if (rc == 0) {
        rc = vg_pci_map_bars(&gpu->pci, win, err);
    }
    if (rc == 0 && (!gpu->pci.bar[VGPU_BAR_REGS].size ||
                    !gpu->pci.bar[VGPU_BAR_VRAM].size)) {
        rc = vg_error_set(err, ENODEV, "BAR%d or BAR%d missing", VGPU_BAR_REGS,
                          VGPU_BAR_VRAM);
    }
    if (rc == 0) {
        rc = vg_pci_msix_enable(&gpu->pci, err);
    }
    for (v = 0; rc == 0 && v < VGPU_MSIX_VECTORS; v++) {
        rc = vg_galloc_alloc(ram, 4, 64, &gpu->msi_slot[v], err);
        if (rc == 0) {
            rc = vg_qtest_writel(qt, gpu->msi_slot[v], 0, err);
        }
        if (rc == 0) {
            rc = vg_pci_msix_set_vector(&gpu->pci, v, gpu->msi_slot[v],
                                        VG_VGPU_MSI_DATA(v), err);
        }
    }
    if (rc < 0) {
        vg_error_prefix(err, "vGPU setup");
        return rc;
    }
    gpu->regs_addr = gpu->pci.bar[VGPU_BAR_REGS].addr;
    gpu->vram_addr = gpu->pci.bar[VGPU_BAR_VRAM].addr;
    gpu->vram_size = gpu->pci.bar[VGPU_BAR_VRAM].size;
    return 0;
}

/* Memory decode, bus master and MSI-X must be on, as the source left
 * them; a device that lost its configuration fails here. */
static int check_enabled(struct vg_pci_dev *pci, struct vg_error *err)
{
    uint16_t cmd = 0, flags = 0;
    int rc = vg_pci_cfg_read16(pci->qt, pci->devfn, PCI_COMMAND, &cmd, err);

    if (rc == 0 && !pci->msix_cap) {
        rc = vg_error_set(err, ENODEV, "no MSI-X capability");
    }
    if (rc == 0) {
        rc = vg_pci_cfg_read16(pci->qt, pci->devfn,
                               pci->msix_cap + PCI_MSIX_FLAGS, &flags, err);
    }
    if (rc == 0 && ((cmd & (PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER)) !=
                        (PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER) ||
                    !(flags & PCI_MSIX_FLAGS_ENABLE) ||
                    (flags & PCI_MSIX_FLAGS_MASKALL))) {
        rc = vg_error_set(err, EPROTO,
                          "device not configured: COMMAND 0x%04x, MSI-X "
                          "flags 0x%04x",
                          cmd, flags);
    }
    return rc;
}

/* Take the MSI-X slots from the vector table: each vector must carry the
 * message vg_vgpu_open() programmed, unmasked. */
static int attach_msix(struct vg_vgpu *gpu, struct vg_error *err)
{
    uint32_t data = 0;
    bool masked = true;
    unsigned v;
    int rc = 0;

    for (v = 0; rc == 0 && v < VGPU_MSIX_VECTORS; v++) {
        rc = vg_pci_msix_get_vector(&gpu->pci, v, &gpu->msi_slot[v], &data,
                                    &masked, err);
        if (rc == 0 &&
            (data != VG_VGPU_MSI_DATA(v) || masked || !gpu->msi_slot[v])) {
            rc = vg_error_set(err, EPROTO,
                              "MSI-X vector %u: address 0x%" G_GINT64_MODIFIER
                              "x data 0x%x%s, not set up by vg_vgpu_open()",
                              v, gpu->msi_slot[v], data,
                              masked ? " masked" : "");
        }
    }
    return rc;
}

/* Ring base, size and tail from the registers. */
static int attach_ring(struct vg_vgpu *gpu, struct vg_error *err)
{
    uint32_t lo = 0, hi = 0, size = 0, tail = 0;
    int rc = vg_vgpu_rd(gpu, VGPU_REG_RING_BASE_LO, &lo, err);

    if (rc == 0) {
        rc = vg_vgpu_rd(gpu, VGPU_REG_RING_BASE_HI, &hi, err);
    }
    if (rc == 0) {
        rc = vg_vgpu_rd(gpu, VGPU_REG_RING_SIZE, &size, err);
    }
    if (rc == 0) {
        rc = vg_vgpu_rd(gpu, VGPU_REG_RING_TAIL, &tail, err);
    }
    gpu->ring_addr = ((uint64_t)hi << 32) | lo;
    gpu->ring_entries = size;
    gpu->tail = tail;
    return rc;
}

int vg_vgpu_attach(struct vg_qtest *qt, struct vg_vgpu *gpu,
                   struct vg_error *err)
{
    return vg_vgpu_attach_nth(qt, 0, gpu, err);
}

int vg_vgpu_attach_nth(struct vg_qtest *qt, unsigned nth, struct vg_vgpu *gpu,
                       struct vg_error *err)
{
    uint32_t lo = 0, hi = 0;
    int rc;

    memset(gpu, 0, sizeof(*gpu));
    gpu->qt = qt;
    rc = vg_pci_attach_nth(qt, VGPU_PCI_VENDOR_ID, VGPU_PCI_DEVICE_ID, nth,
                           &gpu->pci, err);
    if (rc == 0) {
        rc = check_enabled(&gpu->pci, err);
    }
    if (rc == 0 && (!gpu->pci.bar[VGPU_BAR_REGS].addr ||
                    !gpu->pci.bar[VGPU_BAR_VRAM].addr)) {
        rc = vg_error_set(err, EPROTO, "BAR%d or BAR%d has no address",
                          VGPU_BAR_REGS, VGPU_BAR_VRAM);
    }
    gpu->regs_addr = gpu->pci.bar[VGPU_BAR_REGS].addr;
    gpu->pci.bar[VGPU_BAR_REGS].size = VGPU_BAR0_SIZE;
    if (rc == 0) {
        rc = vg_vgpu_rd(gpu, VGPU_REG_VRAM_SIZE_LO, &lo, err);
    }
    if (rc == 0) {
        rc = vg_vgpu_rd(gpu, VGPU_REG_VRAM_SIZE_HI, &hi, err);
    }
    gpu->vram_size = ((uint64_t)hi << 32) | lo;
    gpu->vram_addr = gpu->pci.bar[VGPU_BAR_VRAM].addr;
    gpu->pci.bar[VGPU_BAR_VRAM].size = gpu->vram_size;
    if (rc == 0) {
        rc = attach_msix(gpu, err);
    }
    if (rc == 0) {
        rc = attach_ring(gpu, err);
    }
    if (rc < 0) {
        vg_error_prefix(err, "vGPU attach");
    }
    return rc;
}

int vg_vgpu_rd(struct vg_vgpu *gpu, uint32_t reg, uint32_t *val,
               struct vg_error *err)
{
    int rc = vg_qtest_readl(gpu->qt, gpu->regs_addr + reg, val, err);

    if (rc < 0) {
        vg_error_prefix(err, "vGPU register 0x%03x", reg);
    }
    return rc;
}

int vg_vgpu_wr(struct vg_vgpu *gpu, uint32_t reg, uint32_t val,
               struct vg_error *err)
{
    int rc = vg_qtest_writel(gpu->qt, gpu->regs_addr + reg, val, err);

    if (rc < 0) {
        vg_error_prefix(err, "vGPU register 0x%03x", reg);
    }
    return rc;
}

int vg_vgpu_msi_read(struct vg_vgpu *gpu, unsigned vec, uint32_t *val,
                     struct vg_error *err)
{
    if (vec >= VGPU_MSIX_VECTORS) {
        return vg_error_set(err, EINVAL, "no MSI-X vector %u", vec);
    }
    return vg_qtest_readl(gpu->qt, gpu->msi_slot[vec], val, err);
}

int vg_vgpu_msi_clear(struct vg_vgpu *gpu, unsigned vec, struct vg_error *err)
{
    if (vec >= VGPU_MSIX_VECTORS) {
        return vg_error_set(err, EINVAL, "no MSI-X vector %u", vec);
    }
    return vg_qtest_writel(gpu->qt, gpu->msi_slot[vec], 0, err);
}

int vg_vgpu_msi_wait(struct vg_vgpu *gpu, unsigned vec, int timeout_ms,
                     struct vg_error *err)
{
    int64_t deadline = vg_now_ms() + timeout_ms;
    uint32_t v;
    int rc;

    for (;;) {
        rc = vg_vgpu_msi_read(gpu, vec, &v, err);
        if (rc < 0 || v == VG_VGPU_MSI_DATA(vec)) {
            return rc;
        }
        if (vg_now_ms() > deadline) {
            return vg_error_set(err, ETIMEDOUT,
                                "no MSI-X message on vector %u within %d ms "
                                "(slot holds 0x%x)",
                                vec, timeout_ms, v);
        }
        g_usleep(POLL_INTERVAL_US);
    }
}

int vg_vgpu_ring_init(struct vg_vgpu *gpu, struct vg_galloc *ram,
                      uint32_t entries, struct vg_error *err)
{
    uint64_t bytes = (uint64_t)entries * sizeof(struct vgpu_cmd);
    int rc;

    rc = vg_galloc_alloc(ram, bytes, VGPU_RING_ALIGN, &gpu->ring_addr, err);
    if (rc == 0) {
        rc = vg_qtest_memset(gpu->qt, gpu->ring_addr, 0, bytes, err);
    }
    if (rc == 0) {
        rc = vg_vgpu_wr(gpu, VGPU_REG_RING_BASE_LO, (uint32_t)gpu->ring_addr,
                        err);
    }
    if (rc == 0) {
        rc = vg_vgpu_wr(gpu, VGPU_REG_RING_BASE_HI,
                        (uint32_t)(gpu->ring_addr >> 32), err);
    }
    if (rc == 0) {
        rc = vg_vgpu_wr(gpu, VGPU_REG_RING_SIZE, entries, err);
    }
    if (rc < 0) {
        vg_error_prefix(err, "ring setup");
        return rc;
    }
    gpu->ring_entries = entries;
    gpu->tail = 0;
    return 0;
}

int vg_vgpu_submit(struct vg_vgpu *gpu, const struct vgpu_cmd *cmds, unsigned n,
                   struct vg_error *err)
{
    struct vgpu_cmd le;
    unsigned i, j;
    int rc = 0;

    if (!gpu->ring_entries) {
        return vg_error_set(err, EINVAL, "submit: ring not set up");
    }
    if (n >= gpu->ring_entries) {
        return vg_error_set(err, EINVAL, "submit: %u commands for a ring of %u",
                            n, gpu->ring_entries);
    }
    for (i = 0; rc == 0 && i < n; i++) {
        le.opcode = htole16(cmds[i].opcode);
        le.flags = htole16(cmds[i].flags);
        le.reserved = htole32(cmds[i].reserved);
        for (j = 0; j < G_N_ELEMENTS(le.arg); j++) {
            le.arg[j] = htole64(cmds[i].arg[j]);
        }
        rc = vg_qtest_memwrite(
            gpu->qt, gpu->ring_addr + (uint64_t)gpu->tail * sizeof(le), &le,
            sizeof(le), err);
        gpu->tail = (gpu->tail + 1) & (gpu->ring_entries - 1);
    }
    if (rc == 0) {
        rc = vg_vgpu_wr(gpu, VGPU_REG_RING_TAIL, gpu->tail, err);
    }
    if (rc == 0) {
        rc = vg_vgpu_wr(gpu, VGPU_REG_DOORBELL, 1, err);
    }
    if (rc < 0) {
        vg_error_prefix(err, "submit");
    }
    return rc;
}

int vg_vgpu_wait_idle(struct vg_vgpu *gpu, int timeout_ms, uint32_t *status,
                      struct vg_error *err)
{
    int64_t deadline = vg_now_ms() + timeout_ms;
    uint32_t s;
    int rc;

    for (;;) {
        rc = vg_vgpu_rd(gpu, VGPU_REG_STATUS, &s, err);
        if (rc < 0) {
            return rc;
        }
        if (status) {
            *status = s;
        }
        if (!(s & VGPU_STATUS_BUSY) || (s & VGPU_STATUS_HALTED)) {
            return 0;
        }
        if (vg_now_ms() > deadline) {
            return vg_error_set(err, ETIMEDOUT,
                                "vGPU still busy after %d ms (STATUS 0x%x)",
                                timeout_ms, s);
        }
        g_usleep(POLL_INTERVAL_US);
    }
}

int vg_vgpu_wait_reg(struct vg_vgpu *gpu, uint32_t reg, uint32_t want,
                     int timeout_ms, struct vg_error *err)
{
    int64_t deadline = vg_now_ms() + timeout_ms;
    uint32_t v;
    int rc;

    for (;;) {
        rc = vg_vgpu_rd(gpu, reg, &v, err);
        if (rc < 0 || v == want) {
            return rc;
        }
        if (vg_now_ms() > deadline) {
            return vg_error_set(err, ETIMEDOUT,
                                "register 0x%03x is 0x%x, not 0x%x, after "
                                "%d ms",
                                reg, v, want, timeout_ms);
        }
        g_usleep(POLL_INTERVAL_US);
    }
}
