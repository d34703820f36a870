#include "pci-config.h"

#include <errno.h>
#include <linux/pci_regs.h>
#include <string.h>

#include "vgpu/vgpu-regs.h"

/* Command bits a driver may change: memory, bus master, parity, SERR,
 * INTx disable (the device has no I/O BARs). */
#define CMD_WRITABLE                                                           \
    (PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER | PCI_COMMAND_PARITY |            \
     PCI_COMMAND_SERR | PCI_COMMAND_INTX_DISABLE)

static void put8(struct pci_config *cfg, unsigned off, uint8_t v, uint8_t wm)
{
    cfg->data[off] = v;
    cfg->wmask[off] = wm;
}

static void put16(struct pci_config *cfg, unsigned off, uint16_t v, uint16_t wm)
{
    put8(cfg, off, (uint8_t)v, (uint8_t)wm);
    put8(cfg, off + 1, (uint8_t)(v >> 8), (uint8_t)(wm >> 8));
}

static void put32(struct pci_config *cfg, unsigned off, uint32_t v, uint32_t wm)
{
    put16(cfg, off, (uint16_t)v, (uint16_t)wm);
    put16(cfg, off + 2, (uint16_t)(v >> 16), (uint16_t)(wm >> 16));
}

static void init_header(struct pci_config *cfg)
{
    put16(cfg, PCI_VENDOR_ID, VGPU_PCI_VENDOR_ID, 0);
    put16(cfg, PCI_DEVICE_ID, VGPU_PCI_DEVICE_ID, 0);
    put16(cfg, PCI_COMMAND, 0, CMD_WRITABLE);
    put16(cfg, PCI_STATUS, PCI_STATUS_CAP_LIST, 0);
    put8(cfg, PCI_REVISION_ID, VGPU_PCI_REVISION, 0);
    put8(cfg, PCI_CLASS_PROG, (uint8_t)VGPU_PCI_CLASS, 0);
    put16(cfg, PCI_CLASS_DEVICE, (uint16_t)(VGPU_PCI_CLASS >> 8), 0);
    put8(cfg, PCI_CACHE_LINE_SIZE, 0, 0xff);
    put8(cfg, PCI_LATENCY_TIMER, 0, 0xff);
    put8(cfg, PCI_HEADER_TYPE, PCI_HEADER_TYPE_NORMAL, 0);
    put16(cfg, PCI_SUBSYSTEM_VENDOR_ID, VGPU_PCI_SUBSYS_VENDOR, 0);
    put16(cfg, PCI_SUBSYSTEM_ID, VGPU_PCI_SUBSYS_ID, 0);
    put8(cfg, PCI_CAPABILITY_LIST, PCI_CONFIG_MSIX_CAP, 0);
    put8(cfg, PCI_INTERRUPT_LINE, 0, 0xff);
    put8(cfg, PCI_INTERRUPT_PIN, 1, 0); /* INTA */
}

static void init_bars(struct pci_config *cfg, uint64_t bar2_size)
{
    uint64_t mask2 = ~(bar2_size - 1);

    put32(cfg, PCI_BASE_ADDRESS_0, PCI_BASE_ADDRESS_MEM_TYPE_32,
          ~(uint32_t)(VGPU_BAR0_SIZE - 1));
    put32(cfg, PCI_BASE_ADDRESS_2,
          PCI_BASE_ADDRESS_MEM_TYPE_64 | PCI_BASE_ADDRESS_MEM_PREFETCH,
          (uint32_t)mask2 & (uint32_t)PCI_BASE_ADDRESS_MEM_MASK);
    put32(cfg, PCI_BASE_ADDRESS_3, 0, (uint32_t)(mask2 >> 32));
}

static void init_msix(struct pci_config *cfg)
{
    unsigned cap = PCI_CONFIG_MSIX_CAP;

    put8(cfg, cap + PCI_CAP_LIST_ID, PCI_CAP_ID_MSIX, 0);
    put8(cfg, cap + PCI_CAP_LIST_NEXT, 0, 0);
    put16(cfg, cap + PCI_MSIX_FLAGS, VGPU_MSIX_VECTORS - 1,
          PCI_MSIX_FLAGS_ENABLE | PCI_MSIX_FLAGS_MASKALL);
    put32(cfg, cap + PCI_MSIX_TABLE, VGPU_MSIX_TABLE_OFFSET | VGPU_BAR_REGS, 0);
    put32(cfg, cap + PCI_MSIX_PBA, VGPU_MSIX_PBA_OFFSET | VGPU_BAR_REGS, 0);
}

int pci_config_init(struct pci_config *cfg, uint64_t bar2_size,
                    struct vg_error *err)
{
    if (bar2_size < 4096 || (bar2_size & (bar2_size - 1))) {
        return vg_error_set(err, EINVAL,
                            "BAR2 size 0x%llx is not a power of two >= 4 KiB",
                            (unsigned long long)bar2_size);
    }
    memset(cfg, 0, sizeof(*cfg));
    init_header(cfg);
    init_bars(cfg, bar2_size);
    init_msix(cfg);
    memcpy(cfg->reset, cfg->data, sizeof(cfg->reset));
    return 0;
}

void pci_config_reset(struct pci_config *cfg)
{
    memcpy(cfg->data, cfg->reset, sizeof(cfg->data));
}

static int check_range(uint64_t off, uint32_t len, struct vg_error *err)
{
    if (len > PCI_CONFIG_SIZE || off > PCI_CONFIG_SIZE - len) {
        return vg_error_set(err, EINVAL,
                            "config access at 0x%llx+%u outside %u bytes",
                            (unsigned long long)off, len, PCI_CONFIG_SIZE);
    }
    return 0;
}

int pci_config_read(const struct pci_config *cfg, uint64_t off, void *buf,
                    uint32_t len, struct vg_error *err)
{
    int ret = check_range(off, len, err);

    if (ret == 0) {
        memcpy(buf, cfg->data + off, len);
    }
    return ret;
}

int pci_config_write(struct pci_config *cfg, uint64_t off, const void *buf,
                     uint32_t len, struct vg_error *err)
{
    const uint8_t *src = buf;
    int ret = check_range(off, len, err);

    for (uint32_t i = 0; ret == 0 && i < len; i++) {
        uint8_t wm = cfg->wmask[off + i];
        cfg->data[off + i] =
            (uint8_t)((cfg->data[off + i] & ~wm) | (src[i] & wm));
    }
    return ret;
}

bool pci_config_intx_disabled(const struct pci_config *cfg)
{
    return cfg->data[PCI_COMMAND + 1] & (PCI_COMMAND_INTX_DISABLE >> 8);
}
