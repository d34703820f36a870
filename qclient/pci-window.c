/* pci-window.c -- placing memory BARs (pci-window.h). */
#include "pci-window.h"

#include <errno.h>

static uint64_t align_up(uint64_t v, uint64_t align)
{
    return (v + align - 1) & ~(align - 1);
}

int vg_pci_place_mem_bar(struct vg_pci_windows *w, uint64_t size, bool is64,
                         uint64_t *addr)
{
    uint64_t a = align_up(w->mmio, size);

    if (a >= w->mmio && a <= VG_PCI_MMIO_LIMIT &&
        size <= VG_PCI_MMIO_LIMIT - a) {
        *addr = a;
        w->mmio = a + size;
        return 0;
    }
    a = align_up(w->mmio64, size);
    if (!is64 || a < w->mmio64 || a > VG_PCI_MMIO64_LIMIT ||
        size > VG_PCI_MMIO64_LIMIT - a) {
        return -ENOSPC;
    }
    *addr = a;
    w->mmio64 = a + size;
    return 0;
}
