/*
 * pci.h -- PCI devices of a qtest-driven pc machine.
 *
 * Configuration space through the 0xcf8/0xcfc ports (bus 0 only, the pc
 * machine's root bus), BAR sizing and assignment from a simple memory
 * window, command register, and MSI-X programming: vector entries point at
 * guest RAM, so a message the device sends becomes a 32-bit write of the
 * entry's data to that address, which a test can read with qtest.
 */
#ifndef VG_QCLIENT_PCI_H
#define VG_QCLIENT_PCI_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "pci-window.h"
#include "qtest.h"

#define VG_PCI_NUM_BARS 6

#define VG_PCI_IO_BASE  0xc000u
#define VG_PCI_IO_LIMIT 0x10000u

struct vg_pci_bar {
    uint64_t addr; /* assigned address, 0 if unassigned */
    uint64_t size; /* 0 if the device has no such BAR */
    bool io;
    bool is64; /* occupies this and the next BAR register */
    bool prefetch;
};

struct vg_pci_dev {
    struct vg_qtest *qt;
    uint8_t devfn;
    uint16_t vendor_id;
    uint16_t device_id;
    struct vg_pci_bar bar[VG_PCI_NUM_BARS];
    uint8_t msix_cap;      /* config offset of MSI-X capability, 0 if none */
    uint16_t msix_entries; /* table size */
    uint8_t msix_table_bar;
    uint32_t msix_table_off;
    uint8_t msix_pba_bar;
    uint32_t msix_pba_off;
};

/* Configuration space of bus 0, device/function @devfn. */
int vg_pci_cfg_read8(struct vg_qtest *qt, uint8_t devfn, uint8_t off,
                     uint8_t *val, struct vg_error *err);
int vg_pci_cfg_read16(struct vg_qtest *qt, uint8_t devfn, uint8_t off,
                      uint16_t *val, struct vg_error *err);
int vg_pci_cfg_read32(struct vg_qtest *qt, uint8_t devfn, uint8_t off,
                      uint32_t *val, struct vg_error *err);
int vg_pci_cfg_write8(struct vg_qtest *qt, uint8_t devfn, uint8_t off,
                      uint8_t val, struct vg_error *err);
int vg_pci_cfg_write16(struct vg_qtest *qt, uint8_t devfn, uint8_t off,
                       uint16_t val, struct vg_error *err);
int vg_pci_cfg_write32(struct vg_qtest *qt, uint8_t devfn, uint8_t off,
                       uint32_t val, struct vg_error *err);

/* Find the first function on bus 0 with @vendor:@device; fill @dev with
 * its location, IDs, BAR sizes (via sizing, memory decode off meanwhile)
 * and MSI-X capability.  -ENODEV if absent. */
int vg_pci_find(struct vg_qtest *qt, uint16_t vendor, uint16_t device,
                struct vg_pci_dev *dev, struct vg_error *err);
/* Find the device as vg_pci_find() does but only read its configuration:
 * BAR addresses and types as programmed (by firmware, a test, or the
 * source of a migration), MSI-X capability; BAR sizes stay 0 (the caller
 * fills in what it knows).  For devices that must not be reprogrammed. */
int vg_pci_attach(struct vg_qtest *qt, uint16_t vendor, uint16_t device,
                  struct vg_pci_dev *dev, struct vg_error *err);
/* As vg_pci_find() and vg_pci_attach(), for the @nth (from 0) function
 * with @vendor:@device in devfn order (several devices of a kind). */
int vg_pci_find_nth(struct vg_qtest *qt, uint16_t vendor, uint16_t device,
                    unsigned nth, struct vg_pci_dev *dev, struct vg_error *err);
int vg_pci_attach_nth(struct vg_qtest *qt, uint16_t vendor, uint16_t device,
                      unsigned nth, struct vg_pci_dev *dev,
                      struct vg_error *err);
/* Offset of capability @cap_id in *@off, 0 if the device lacks it. */
int vg_pci_find_cap(struct vg_pci_dev *dev, uint8_t cap_id, uint8_t *off,
                    struct vg_error *err);
/* Assign all implemented BARs, largest first, memory BARs where
 * vg_pci_place_mem_bar() puts them in *@win (pass the same windows for
 * every device of a VM), I/O from VG_PCI_IO_BASE.  Then enable memory,
 * I/O and bus master. */
int vg_pci_map_bars(struct vg_pci_dev *dev, struct vg_pci_windows *win,
                    struct vg_error *err);

/* Move memory BAR @bar to @addr, as a guest driver would: memory decode
 * off, the BAR written, decode back as it was; dev->bar[@bar].addr
 * follows.  -EINVAL for a BAR that is not an assigned memory BAR or an
 * address it cannot take (unaligned, above 4 GiB for a 32-bit BAR). */
int vg_pci_move_bar(struct vg_pci_dev *dev, unsigned bar, uint64_t addr,
                    struct vg_error *err);

/* 32-bit BAR accesses at @off into BAR @bar (memory BARs only). */
int vg_pci_bar_read32(struct vg_pci_dev *dev, unsigned bar, uint64_t off,
                      uint32_t *val, struct vg_error *err);
int vg_pci_bar_write32(struct vg_pci_dev *dev, unsigned bar, uint64_t off,
                       uint32_t val, struct vg_error *err);

/* Enable MSI-X (function mask off) with every vector masked. */
int vg_pci_msix_enable(struct vg_pci_dev *dev, struct vg_error *err);
/* Program vector @vec: message address @addr, data @data, then unmask. */
int vg_pci_msix_set_vector(struct vg_pci_dev *dev, unsigned vec, uint64_t addr,
                           uint32_t data, struct vg_error *err);
/* Read vector @vec's message address, data and mask bit. */
int vg_pci_msix_get_vector(struct vg_pci_dev *dev, unsigned vec, uint64_t *addr,
                           uint32_t *data, bool *masked, struct vg_error *err);
/* Mask or unmask vector @vec. */
int vg_pci_msix_mask(struct vg_pci_dev *dev, unsigned vec, bool masked,
                     struct vg_error *err);
/* Whether vector @vec's pending bit is set in the PBA. */
int vg_pci_msix_pending(struct vg_pci_dev *dev, unsigned vec, bool *pending,
                        struct vg_error *err);

#endif
