/*
 * pci-config.h -- emulated PCI configuration space of the vGPU.
 *
 * 256 bytes: IDs and class from vgpu-regs.h, BAR0 (32-bit memory,
 * VGPU_BAR0_SIZE), BAR2/3 (64-bit prefetchable memory, VRAM size), INTA,
 * and an MSI-X capability (VGPU_MSIX_VECTORS, table and PBA in BAR0).  A
 * per-byte write mask keeps read-only bits; BARs answer all-ones writes
 * with their size mask.  Any access inside the 256 bytes is allowed.
 */
#ifndef PCI_CONFIG_H
#define PCI_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

#define PCI_CONFIG_SIZE     256
#define PCI_CONFIG_MSIX_CAP 0x40

struct pci_config {
    uint8_t data[PCI_CONFIG_SIZE];
    uint8_t wmask[PCI_CONFIG_SIZE];
    uint8_t reset[PCI_CONFIG_SIZE];
};

/* @bar2_size: a power of two >= 4 KiB (the VRAM size). */
int pci_config_init(struct pci_config *cfg, uint64_t bar2_size,
                    struct vg_error *err);
/* Back to the power-on values. */
void pci_config_reset(struct pci_config *cfg);
int pci_config_read(const struct pci_config *cfg, uint64_t off, void *buf,
                    uint32_t len, struct vg_error *err);
int pci_config_write(struct pci_config *cfg, uint64_t off, const void *buf,
                     uint32_t len, struct vg_error *err);
/* Command register bit "interrupt disable" (INTx off). */
bool pci_config_intx_disabled(const struct pci_config *cfg);

#endif
