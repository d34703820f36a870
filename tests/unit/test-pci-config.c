/* Unit tests of the emulated PCI configuration space. */
#include <errno.h>
#include <glib.h>
#include <linux/pci_regs.h>

#include "vfio-user/pci-config.h"
#include "vgpu/vgpu-regs.h"

#define VRAM (64ull << 20)

static uint32_t rd32(struct pci_config *c, unsigned off)
{
    uint32_t v = 0;

    g_assert_cmpint(pci_config_read(c, off, &v, 4, NULL), ==, 0);
    return v;
}

static void wr32(struct pci_config *c, unsigned off, uint32_t v)
{
    g_assert_cmpint(pci_config_write(c, off, &v, 4, NULL), ==, 0);
}

static void test_ids(void)
{
    struct pci_config c;

    g_assert_cmpint(pci_config_init(&c, VRAM, NULL), ==, 0);
    g_assert_cmphex(rd32(&c, PCI_VENDOR_ID), ==,
                    VGPU_PCI_VENDOR_ID | (VGPU_PCI_DEVICE_ID << 16));
    g_assert_cmphex(rd32(&c, PCI_CLASS_REVISION), ==,
                    (VGPU_PCI_CLASS << 8) | VGPU_PCI_REVISION);
    g_assert_cmphex(rd32(&c, PCI_SUBSYSTEM_VENDOR_ID), ==,
                    VGPU_PCI_SUBSYS_VENDOR | (VGPU_PCI_SUBSYS_ID << 16));
    /* read-only: writes leave the IDs alone */
    wr32(&c, PCI_VENDOR_ID, 0x12345678);
    wr32(&c, PCI_CLASS_REVISION, 0);
    g_assert_cmphex(rd32(&c, PCI_VENDOR_ID), ==,
                    VGPU_PCI_VENDOR_ID | (VGPU_PCI_DEVICE_ID << 16));
    g_assert_cmphex(rd32(&c, PCI_CLASS_REVISION) >> 8, ==, VGPU_PCI_CLASS);
    g_assert_cmpint(pci_config_init(&c, 3ull << 20, NULL), ==, -EINVAL);
}

static void test_command(void)
{
    struct pci_config c;
    uint16_t v = 0xffff;

    pci_config_init(&c, VRAM, NULL);
    g_assert_false(pci_config_intx_disabled(&c));
    g_assert_cmpint(pci_config_write(&c, PCI_COMMAND, &v, 2, NULL), ==, 0);
    g_assert_cmphex(rd32(&c, PCI_COMMAND) & 0xffff, ==,
                    PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER |
                        PCI_COMMAND_PARITY | PCI_COMMAND_SERR |
                        PCI_COMMAND_INTX_DISABLE);
    g_assert_true(pci_config_intx_disabled(&c));
    /* status is read-only and advertises the capability list */
    g_assert_cmphex(rd32(&c, PCI_COMMAND) >> 16, ==, PCI_STATUS_CAP_LIST);
    pci_config_reset(&c);
    g_assert_cmphex(rd32(&c, PCI_COMMAND) & 0xffff, ==, 0);
}

static void test_bars(void)
{
    struct pci_config c;

    pci_config_init(&c, VRAM, NULL);
    wr32(&c, PCI_BASE_ADDRESS_0, 0xffffffff);
    g_assert_cmphex(rd32(&c, PCI_BASE_ADDRESS_0), ==,
                    ~(uint32_t)(VGPU_BAR0_SIZE - 1));
    wr32(&c, PCI_BASE_ADDRESS_0, 0xfebfc123);
    g_assert_cmphex(rd32(&c, PCI_BASE_ADDRESS_0), ==, 0xfebfc000);
    wr32(&c, PCI_BASE_ADDRESS_2, 0xffffffff);
    wr32(&c, PCI_BASE_ADDRESS_3, 0xffffffff);
    g_assert_cmphex(rd32(&c, PCI_BASE_ADDRESS_2), ==,
                    (uint32_t) ~(VRAM - 1) | PCI_BASE_ADDRESS_MEM_TYPE_64 |
                        PCI_BASE_ADDRESS_MEM_PREFETCH);
    g_assert_cmphex(rd32(&c, PCI_BASE_ADDRESS_3), ==, 0xffffffff);
    /* unused BARs and the ROM are hard-wired to 0 */
    wr32(&c, PCI_BASE_ADDRESS_1, 0xffffffff);
    wr32(&c, PCI_BASE_ADDRESS_4, 0xffffffff);
    wr32(&c, PCI_ROM_ADDRESS, 0xffffffff);
    g_assert_cmphex(rd32(&c, PCI_BASE_ADDRESS_1), ==, 0);
    g_assert_cmphex(rd32(&c, PCI_BASE_ADDRESS_4), ==, 0);
    g_assert_cmphex(rd32(&c, PCI_ROM_ADDRESS), ==, 0);
}

static void test_msix(void)
{
    struct pci_config c;
    unsigned cap;
    uint32_t v;

    pci_config_init(&c, VRAM, NULL);
    cap = rd32(&c, PCI_CAPABILITY_LIST) & 0xff;
    g_assert_cmpuint(cap, ==, PCI_CONFIG_MSIX_CAP);
    v = rd32(&c, cap);
    g_assert_cmpuint(v & 0xff, ==, PCI_CAP_ID_MSIX);
    g_assert_cmpuint((v >> 8) & 0xff, ==, 0);
    g_assert_cmpuint((v >> 16) & PCI_MSIX_FLAGS_QSIZE, ==,
                     VGPU_MSIX_VECTORS - 1);
    g_assert_cmphex(rd32(&c, cap + PCI_MSIX_TABLE), ==,
                    VGPU_MSIX_TABLE_OFFSET | VGPU_BAR_REGS);
    g_assert_cmphex(rd32(&c, cap + PCI_MSIX_PBA), ==,
                    VGPU_MSIX_PBA_OFFSET | VGPU_BAR_REGS);
    /* enable and mask-all are writable, the table size is not */
    wr32(&c, cap, 0xffffffff);
    g_assert_cmphex(rd32(&c, cap) >> 16, ==,
                    PCI_MSIX_FLAGS_ENABLE | PCI_MSIX_FLAGS_MASKALL |
                        (VGPU_MSIX_VECTORS - 1));
    wr32(&c, cap + PCI_MSIX_TABLE, 0);
    g_assert_cmphex(rd32(&c, cap + PCI_MSIX_TABLE), ==, VGPU_MSIX_TABLE_OFFSET);
}

static void test_bounds(void)
{
    struct pci_config c;
    struct vg_error err;
    uint8_t b[8];

    pci_config_init(&c, VRAM, NULL);
    g_assert_cmpint(pci_config_read(&c, 252, b, 4, &err), ==, 0);
    g_assert_cmpint(pci_config_read(&c, 253, b, 4, &err), ==, -EINVAL);
    g_assert_cmpint(pci_config_write(&c, 256, b, 1, &err), ==, -EINVAL);
    g_assert_cmpint(pci_config_read(&c, UINT64_MAX, b, 2, &err), ==, -EINVAL);
    g_assert_cmpint(pci_config_read(&c, 0, b, 257, &err), ==, -EINVAL);
    /* a 1-byte write of the interrupt line works */
    b[0] = 0x0b;
    g_assert_cmpint(pci_config_write(&c, PCI_INTERRUPT_LINE, b, 1, &err), ==,
                    0);
    g_assert_cmphex(rd32(&c, PCI_INTERRUPT_LINE), ==, 0x010b);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/pci-config/ids", test_ids);
    g_test_add_func("/pci-config/command", test_command);
    g_test_add_func("/pci-config/bars", test_bars);
    g_test_add_func("/pci-config/msix", test_msix);
    g_test_add_func("/pci-config/bounds", test_bounds);
    return g_test_run();
}
