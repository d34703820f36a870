/*
 * test-pci-window -- placing a VM's memory BARs (qclient/pci-window.c):
 * several vGPUs whose VRAM BARs are too large for the 32-bit window get
 * disjoint addresses in the 64-bit one (they all got the same one before),
 * every BAR is naturally aligned and inside its window, and a BAR that
 * fits nowhere is refused without moving the cursors.
 */
#include <errno.h>
#include <glib.h>

#include "qclient/pci-window.h"

#define MIB (1ull << 20)
#define GIB (1ull << 30)

struct placed {
    uint64_t addr, size;
};

static void assert_disjoint(const struct placed *p, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        g_assert_cmphex(p[i].addr % p[i].size, ==, 0);
        for (unsigned j = i + 1; j < n; j++) {
            g_assert_true(p[i].addr + p[i].size <= p[j].addr ||
                          p[j].addr + p[j].size <= p[i].addr);
        }
    }
}

/* Four vGPUs of 2 GiB VRAM, each BAR2 (64-bit) then BAR0 (16 KiB), in
 * the order vg_pci_map_bars() places them (largest first). */
static void test_several_large_vgpus(void)
{
    struct vg_pci_windows w = VG_PCI_WINDOWS_INIT;
    struct placed p[8];

    for (unsigned d = 0; d < 4; d++) {
        p[2 * d].size = 2 * GIB;
        p[2 * d + 1].size = 16384;
        g_assert_cmpint(
            vg_pci_place_mem_bar(&w, p[2 * d].size, true, &p[2 * d].addr), ==,
            0);
        g_assert_cmpint(vg_pci_place_mem_bar(&w, p[2 * d + 1].size, false,
                                             &p[2 * d + 1].addr),
                        ==, 0);
        g_assert_cmphex(p[2 * d].addr, >=, VG_PCI_MMIO64_BASE);
        g_assert_cmphex(p[2 * d + 1].addr, <, VG_PCI_MMIO_LIMIT);
    }
    assert_disjoint(p, 8);
}

/* Small BARs stay in the 32-bit window until it is full; then a 64-bit
 * one goes above, a 32-bit one is refused. */
static void test_windows_fill(void)
{
    struct vg_pci_windows w = VG_PCI_WINDOWS_INIT, before;
    struct placed p[64];
    unsigned n = 0;
    uint64_t addr = 0;

    while (n < 64 &&
           vg_pci_place_mem_bar(&w, 64 * MIB, false, &p[n].addr) == 0) {
        p[n].size = 64 * MIB;
        g_assert_cmphex(p[n].addr, >=, VG_PCI_MMIO_BASE);
        g_assert_cmphex(p[n].addr + p[n].size, <=, VG_PCI_MMIO_LIMIT);
        n++;
    }
    g_assert_cmpuint(n, ==,
                     (VG_PCI_MMIO_LIMIT - VG_PCI_MMIO_BASE) / (64 * MIB));
    assert_disjoint(p, n);
    before = w;
    g_assert_cmpint(vg_pci_place_mem_bar(&w, 64 * MIB, false, &addr), ==,
                    -ENOSPC);
    g_assert_cmphex(w.mmio, ==, before.mmio);
    g_assert_cmphex(w.mmio64, ==, before.mmio64);
    g_assert_cmpint(vg_pci_place_mem_bar(&w, 64 * MIB, true, &addr), ==, 0);
    g_assert_cmphex(addr, ==, VG_PCI_MMIO64_BASE);
}

/* Beyond the 64-bit window: refused, the cursor left alone. */
static void test_too_large(void)
{
    struct vg_pci_windows w = VG_PCI_WINDOWS_INIT;
    uint64_t addr = 0;

    g_assert_cmpint(vg_pci_place_mem_bar(&w, 512 * GIB, true, &addr), ==,
                    -ENOSPC);
    g_assert_cmphex(w.mmio64, ==, VG_PCI_MMIO64_BASE);
    g_assert_cmpint(vg_pci_place_mem_bar(&w, 256 * GIB, true, &addr), ==, 0);
    g_assert_cmphex(addr, ==, 256 * GIB);
    g_assert_cmpint(vg_pci_place_mem_bar(&w, 256 * GIB, true, &addr), ==,
                    -ENOSPC);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/pci-window/several-large-vgpus",
                    test_several_large_vgpus);
    g_test_add_func("/pci-window/windows-fill", test_windows_fill);
    g_test_add_func("/pci-window/too-large", test_too_large);
    return g_test_run();
}
