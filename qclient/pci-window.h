/*
 * pci-window.h -- where the QEMU client places a VM's memory BARs.
 *
 * Memory BARs go, naturally aligned, into the pc machine's 32-bit PCI
 * hole; a 64-bit BAR too large for what is left of it (a VRAM of 1 GiB
 * or more) goes into a 64-bit window above any guest RAM.  One struct
 * vg_pci_windows holds both cursors, and every device of a VM is placed
 * with the same one, so that no two BARs overlap.
 */
#ifndef VG_QCLIENT_PCI_WINDOW_H
#define VG_QCLIENT_PCI_WINDOW_H

#include <stdbool.h>
#include <stdint.h>

/* The 32-bit window: above any RAM a test uses (< 3 GiB), below the
 * IOAPIC. */
#define VG_PCI_MMIO_BASE  0xc0000000ull
#define VG_PCI_MMIO_LIMIT 0xfec00000ull
/* The 64-bit window: from 64 GiB to 512 GiB. */
#define VG_PCI_MMIO64_BASE  0x1000000000ull
#define VG_PCI_MMIO64_LIMIT 0x8000000000ull

struct vg_pci_windows {
    uint64_t mmio;   /* next free address in the 32-bit window */
    uint64_t mmio64; /* ... and in the 64-bit one */
};

#define VG_PCI_WINDOWS_INIT                                                    \
    {                                                                          \
        VG_PCI_MMIO_BASE, VG_PCI_MMIO64_BASE                                   \
    }

/*
 * Place a memory BAR of @size bytes (a power of two), 64-bit if @is64:
 * its address in *@addr, and the window it went into advanced past it.
 * -ENOSPC if it fits in neither (a 32-bit BAR only in the 32-bit one).
 */
int vg_pci_place_mem_bar(struct vg_pci_windows *w, uint64_t size, bool is64,
                         uint64_t *addr);

#endif
