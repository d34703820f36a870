#include "pci.h"

#include <errno.h>
#include <linux/pci_regs.h>
#include <string.h>

#define CFG_ADDR_PORT 0xcf8
#define CFG_DATA_PORT 0xcfc

static int cfg_select(struct vg_qtest *qt, uint8_t devfn, uint8_t off,
                      struct vg_error *err)
{
    return vg_qtest_outl(qt, CFG_ADDR_PORT,
                         0x80000000u | ((uint32_t)devfn << 8) | (off & 0xfc),
                         err);
}

int vg_pci_cfg_read8(struct vg_qtest *qt, uint8_t devfn, uint8_t off,
                     uint8_t *val, struct vg_error *err)
{
    int rc = cfg_select(qt, devfn, off, err);

    return rc < 0 ? rc : vg_qtest_inb(qt, CFG_DATA_PORT + (off & 3), val, err);
}

int vg_pci_cfg_read16(struct vg_qtest *qt, uint8_t devfn, uint8_t off,
                      uint16_t *val, struct vg_error *err)
{
    int rc = cfg_select(qt, devfn, off, err);

    return rc < 0 ? rc : vg_qtest_inw(qt, CFG_DATA_PORT + (off & 2), val, err);
}

int vg_pci_cfg_read32(struct vg_qtest *qt, uint8_t devfn, uint8_t off,
                      uint32_t *val, struct vg_error *err)
{
    int rc = cfg_select(qt, devfn, off, err);

    return rc < 0 ? rc : vg_qtest_inl(qt, CFG_DATA_PORT, val, err);
}

int vg_pci_cfg_write8(struct vg_qtest *qt, uint8_t devfn, uint8_t off,
                      uint8_t val, struct vg_error *err)
{
    int rc = cfg_select(qt, devfn, off, err);

    return rc < 0 ? rc : vg_qtest_outb(qt, CFG_DATA_PORT + (off & 3), val, err);
}

int vg_pci_cfg_write16(struct vg_qtest *qt, uint8_t devfn, uint8_t off,
                       uint16_t val, struct vg_error *err)
{
    int rc = cfg_select(qt, devfn, off, err);

    return rc < 0 ? rc : vg_qtest_outw(qt, CFG_DATA_PORT + (off & 2), val, err);
}

int vg_pci_cfg_write32(struct vg_qtest *qt, uint8_t devfn, uint8_t off,
                       uint32_t val, struct vg_error *err)
{
    int rc = cfg_select(qt, devfn, off, err);

    return rc < 0 ? rc : vg_qtest_outl(qt, CFG_DATA_PORT, val, err);
}

int vg_pci_find_cap(struct vg_pci_dev *dev, uint8_t cap_id, uint8_t *off,
                    struct vg_error *err)
{
    uint16_t status;
    uint8_t pos, id;
    int guard;
    int rc;

    *off = 0;
    rc = vg_pci_cfg_read16(dev->qt, dev->devfn, PCI_STATUS, &status, err);
    if (rc < 0 || !(status & PCI_STATUS_CAP_LIST)) {
        return rc;
    }
    rc = vg_pci_cfg_read8(dev->qt, dev->devfn, PCI_CAPABILITY_LIST, &pos, err);
    /* At most 48 capabilities fit in 192 bytes: a longer list loops. */
    for (guard = 0; rc == 0 && pos >= 0x40 && guard < 48; guard++) {
        pos &= 0xfc;
        rc = vg_pci_cfg_read8(dev->qt, dev->devfn, pos, &id, err);
        if (rc == 0 && id == cap_id) {
            *off = pos;
            return 0;
        }
        if (rc == 0) {
            rc = vg_pci_cfg_read8(dev->qt, dev->devfn, pos + 1, &pos, err);
        }
    }
    return rc;
}

/* Size BAR @i (memory decode must be off); fills dev->bar[i]. */
static int size_bar(struct vg_pci_dev *dev, unsigned i, struct vg_error *err)
{
    struct vg_pci_bar *b = &dev->bar[i];
    uint8_t reg = PCI_BASE_ADDRESS_0 + 4 * i;
    uint32_t orig, lo, hi = 0xffffffffu;
    uint64_t mask;
    int rc;

    rc = vg_pci_cfg_read32(dev->qt, dev->devfn, reg, &orig, err);
    if (rc == 0) {
        rc = vg_pci_cfg_write32(dev->qt, dev->devfn, reg, 0xffffffffu, err);
    }
    if (rc == 0) {
        rc = vg_pci_cfg_read32(dev->qt, dev->devfn, reg, &lo, err);
    }
    if (rc == 0) {
        rc = vg_pci_cfg_write32(dev->qt, dev->devfn, reg, orig, err);
    }
    if (rc < 0 || lo == 0) {
        return rc;
    }
    b->io = lo & PCI_BASE_ADDRESS_SPACE_IO;
    if (b->io) {
        b->size = (uint64_t)(~(lo & PCI_BASE_ADDRESS_IO_MASK) & 0xffffu) + 1;
        return 0;
    }
    b->prefetch = lo & PCI_BASE_ADDRESS_MEM_PREFETCH;
    b->is64 =
        (lo & PCI_BASE_ADDRESS_MEM_TYPE_MASK) == PCI_BASE_ADDRESS_MEM_TYPE_64;
    if (b->is64) {
        if (i + 1 >= VG_PCI_NUM_BARS) {
            return vg_error_set(err, EPROTO, "BAR%u: 64-bit BAR in last slot",
                                i);
        }
        rc = vg_pci_cfg_read32(dev->qt, dev->devfn, reg + 4, &orig, err);
        if (rc == 0) {
            rc = vg_pci_cfg_write32(dev->qt, dev->devfn, reg + 4, 0xffffffffu,
                                    err);
        }
        if (rc == 0) {
            rc = vg_pci_cfg_read32(dev->qt, dev->devfn, reg + 4, &hi, err);
        }
        if (rc == 0) {
            rc = vg_pci_cfg_write32(dev->qt, dev->devfn, reg + 4, orig, err);
        }
        if (rc < 0) {
            return rc;
        }
    }
    mask = ((uint64_t)hi << 32) | (lo & PCI_BASE_ADDRESS_MEM_MASK);
    b->size = ~mask + 1;
    return 0;
}

static int msix_check(struct vg_pci_dev *dev, unsigned vec,
                      struct vg_error *err);

/* Find @vendor:@device on bus 0; fill @dev's location and IDs. */
static int pci_locate(struct vg_qtest *qt, uint16_t vendor, uint16_t device,
                      unsigned nth, struct vg_pci_dev *dev,
                      struct vg_error *err)
{
    unsigned devfn;
    uint32_t id;
    int rc;

    memset(dev, 0, sizeof(*dev));
    dev->qt = qt;
    for (devfn = 0; devfn < 256; devfn++) {
        rc = vg_pci_cfg_read32(qt, (uint8_t)devfn, PCI_VENDOR_ID, &id, err);
        if (rc < 0) {
            return rc;
        }
        if ((id & 0xffff) == vendor && (id >> 16) == device && nth-- == 0) {
            dev->devfn = (uint8_t)devfn;
            dev->vendor_id = vendor;
            dev->device_id = device;
            return 0;
        }
    }
    return vg_error_set(err, ENODEV, "no PCI device %04x:%04x #%u on bus 0",
                        vendor, device, nth);
}

/* Read the MSI-X capability's table size and table/PBA locations. */
static int read_msix_cap(struct vg_pci_dev *dev, struct vg_error *err)
{
    uint16_t flags;
    uint32_t bir;
    int rc = vg_pci_find_cap(dev, PCI_CAP_ID_MSIX, &dev->msix_cap, err);

    if (rc < 0 || !dev->msix_cap) {
        return rc;
    }
    rc = vg_pci_cfg_read16(dev->qt, dev->devfn, dev->msix_cap + PCI_MSIX_FLAGS,
                           &flags, err);
    dev->msix_entries = (flags & PCI_MSIX_FLAGS_QSIZE) + 1;
    if (rc == 0) {
        rc = vg_pci_cfg_read32(dev->qt, dev->devfn,
                               dev->msix_cap + PCI_MSIX_TABLE, &bir, err);
        dev->msix_table_bar = bir & PCI_MSIX_TABLE_BIR;
        dev->msix_table_off = bir & PCI_MSIX_TABLE_OFFSET;
    }
    if (rc == 0) {
        rc = vg_pci_cfg_read32(dev->qt, dev->devfn,
                               dev->msix_cap + PCI_MSIX_PBA, &bir, err);
        dev->msix_pba_bar = bir & PCI_MSIX_PBA_BIR;
        dev->msix_pba_off = bir & PCI_MSIX_PBA_OFFSET;
    }
    return rc;
}

int vg_pci_find(struct vg_qtest *qt, uint16_t vendor, uint16_t device,
                struct vg_pci_dev *dev, struct vg_error *err)
{
    return vg_pci_find_nth(qt, vendor, device, 0, dev, err);
}

int vg_pci_find_nth(struct vg_qtest *qt, uint16_t vendor, uint16_t device,
                    unsigned nth, struct vg_pci_dev *dev, struct vg_error *err)
{
    uint16_t cmd;
    unsigned i;
    int rc = pci_locate(qt, vendor, device, nth, dev, err);

    if (rc < 0) {
        return rc;
    }
    rc = vg_pci_cfg_read16(qt, dev->devfn, PCI_COMMAND, &cmd, err);
    if (rc == 0) {
        rc = vg_pci_cfg_write16(qt, dev->devfn, PCI_COMMAND,
                                cmd & ~(PCI_COMMAND_MEMORY | PCI_COMMAND_IO),
                                err);
    }
    for (i = 0; rc == 0 && i < VG_PCI_NUM_BARS; i++) {
        rc = size_bar(dev, i, err);
        if (dev->bar[i].is64) {
            i++;
        }
    }
    if (rc == 0) {
        rc = vg_pci_cfg_write16(qt, dev->devfn, PCI_COMMAND, cmd, err);
    }
    if (rc == 0) {
        rc = read_msix_cap(dev, err);
    }
    if (rc < 0) {
        vg_error_prefix(err, "PCI %02x.%x", dev->devfn >> 3, dev->devfn & 7);
    }
    return rc;
}

/* Address and type of BAR @i as programmed, without sizing it. */
static int read_bar(struct vg_pci_dev *dev, unsigned i, struct vg_error *err)
{
    struct vg_pci_bar *b = &dev->bar[i];
    uint8_t reg = PCI_BASE_ADDRESS_0 + 4 * i;
    uint32_t lo, hi = 0;
    int rc = vg_pci_cfg_read32(dev->qt, dev->devfn, reg, &lo, err);

    if (rc < 0) {
        return rc;
    }
    b->io = lo & PCI_BASE_ADDRESS_SPACE_IO;
    if (b->io) {
        b->addr = lo & PCI_BASE_ADDRESS_IO_MASK;
        return 0;
    }
    b->prefetch = lo & PCI_BASE_ADDRESS_MEM_PREFETCH;
    b->is64 =
        (lo & PCI_BASE_ADDRESS_MEM_TYPE_MASK) == PCI_BASE_ADDRESS_MEM_TYPE_64;
    if (b->is64 && i + 1 < VG_PCI_NUM_BARS) {
        rc = vg_pci_cfg_read32(dev->qt, dev->devfn, reg + 4, &hi, err);
    }
    b->addr = ((uint64_t)hi << 32) | (lo & PCI_BASE_ADDRESS_MEM_MASK);
    return rc;
}

int vg_pci_attach(struct vg_qtest *qt, uint16_t vendor, uint16_t device,
                  struct vg_pci_dev *dev, struct vg_error *err)
{
    return vg_pci_attach_nth(qt, vendor, device, 0, dev, err);
}

int vg_pci_attach_nth(struct vg_qtest *qt, uint16_t vendor, uint16_t device,
                      unsigned nth, struct vg_pci_dev *dev,
                      struct vg_error *err)
{
    unsigned i;
    int rc = pci_locate(qt, vendor, device, nth, dev, err);

    for (i = 0; rc == 0 && i < VG_PCI_NUM_BARS; i++) {
        rc = read_bar(dev, i, err);
        if (dev->bar[i].is64) {
            i++;
        }
    }
    if (rc == 0) {
        rc = read_msix_cap(dev, err);
    }
    if (rc < 0) {
        vg_error_prefix(err, "PCI %02x.%x (attach)", dev->devfn >> 3,
                        dev->devfn & 7);
    }
    return rc;
}

int vg_pci_msix_get_vector(struct vg_pci_dev *dev, unsigned vec, uint64_t *addr,
                           uint32_t *data, bool *masked, struct vg_error *err)
{
    uint64_t e = dev->msix_table_off + (uint64_t)vec * PCI_MSIX_ENTRY_SIZE;
    uint32_t lo = 0, hi = 0, ctl = 0;
    int rc = msix_check(dev, vec, err);

    if (rc == 0) {
        rc = vg_pci_bar_read32(dev, dev->msix_table_bar,
                               e + PCI_MSIX_ENTRY_LOWER_ADDR, &lo, err);
    }
    if (rc == 0) {
        rc = vg_pci_bar_read32(dev, dev->msix_table_bar,
                               e + PCI_MSIX_ENTRY_UPPER_ADDR, &hi, err);
    }
    if (rc == 0) {
        rc = vg_pci_bar_read32(dev, dev->msix_table_bar,
                               e + PCI_MSIX_ENTRY_DATA, data, err);
    }
    if (rc == 0) {
        rc = vg_pci_bar_read32(dev, dev->msix_table_bar,
                               e + PCI_MSIX_ENTRY_VECTOR_CTRL, &ctl, err);
    }
    if (rc < 0) {
        vg_error_prefix(err, "MSI-X vector %u", vec);
        return rc;
    }
    *addr = ((uint64_t)hi << 32) | lo;
    *masked = ctl & PCI_MSIX_ENTRY_CTRL_MASKBIT;
    return 0;
}

static uint64_t align_up(uint64_t v, uint64_t a)
{
    return (v + a - 1) & ~(a - 1);
}

int vg_pci_map_bars(struct vg_pci_dev *dev, struct vg_pci_windows *win,
                    struct vg_error *err)
{
    uint64_t io_next = VG_PCI_IO_BASE;
    bool done[VG_PCI_NUM_BARS] = {false};
    struct vg_pci_bar *b;
    unsigned i, best;
    uint8_t reg;
    uint16_t cmd;
    int rc = 0;

    for (;;) {
        best = VG_PCI_NUM_BARS;
        for (i = 0; i < VG_PCI_NUM_BARS; i++) {
            if (!done[i] && dev->bar[i].size &&
                (best == VG_PCI_NUM_BARS ||
                 dev->bar[i].size > dev->bar[best].size)) {
                best = i;
            }
        }
        if (best == VG_PCI_NUM_BARS) {
            break;
        }
        done[best] = true;
        b = &dev->bar[best];
        reg = PCI_BASE_ADDRESS_0 + 4 * best;
        if (b->io) {
            b->addr = align_up(io_next, b->size);
            if (b->addr + b->size > VG_PCI_IO_LIMIT) {
                return vg_error_set(err, ENOSPC,
                                    "BAR%u: no room for 0x%llx I/O ports", best,
                                    (unsigned long long)b->size);
            }
            io_next = b->addr + b->size;
        } else if (vg_pci_place_mem_bar(win, b->size, b->is64, &b->addr) < 0) {
            return vg_error_set(err, ENOSPC, "BAR%u: no room for 0x%llx bytes",
                                best, (unsigned long long)b->size);
        }
        rc = vg_pci_cfg_write32(dev->qt, dev->devfn, reg, (uint32_t)b->addr,
                                err);
        if (rc == 0 && b->is64) {
            rc = vg_pci_cfg_write32(dev->qt, dev->devfn, reg + 4,
                                    (uint32_t)(b->addr >> 32), err);
        }
        if (rc < 0) {
            vg_error_prefix(err, "BAR%u", best);
            return rc;
        }
    }
    rc = vg_pci_cfg_read16(dev->qt, dev->devfn, PCI_COMMAND, &cmd, err);
    if (rc == 0) {
        rc = vg_pci_cfg_write16(dev->qt, dev->devfn, PCI_COMMAND,
                                cmd | PCI_COMMAND_MEMORY | PCI_COMMAND_IO |
                                    PCI_COMMAND_MASTER,
                                err);
    }
    return rc;
}

int vg_pci_move_bar(struct vg_pci_dev *dev, unsigned bar, uint64_t addr,
                    struct vg_error *err)
{
    struct vg_pci_bar *b = bar < VG_PCI_NUM_BARS ? &dev->bar[bar] : NULL;
    uint8_t reg = PCI_BASE_ADDRESS_0 + 4 * bar;
    uint16_t cmd = 0;
    int rc;

    if (!b || !b->addr || b->io || !b->size || addr % b->size ||
        (!b->is64 && addr + b->size > (1ull << 32))) {
        return vg_error_set(err, EINVAL, "BAR%u: cannot move to 0x%llx", bar,
                            (unsigned long long)addr);
    }
    rc = vg_pci_cfg_read16(dev->qt, dev->devfn, PCI_COMMAND, &cmd, err);
    if (rc == 0) {
        rc = vg_pci_cfg_write16(dev->qt, dev->devfn, PCI_COMMAND,
                                cmd & ~PCI_COMMAND_MEMORY, err);
    }
    if (rc == 0) {
        rc = vg_pci_cfg_write32(dev->qt, dev->devfn, reg, (uint32_t)addr, err);
    }
    if (rc == 0 && b->is64) {
        rc = vg_pci_cfg_write32(dev->qt, dev->devfn, reg + 4,
                                (uint32_t)(addr >> 32), err);
    }
    if (rc == 0) {
        rc = vg_pci_cfg_write16(dev->qt, dev->devfn, PCI_COMMAND, cmd, err);
    }
    if (rc < 0) {
        vg_error_prefix(err, "moving BAR%u", bar);
        return rc;
    }
    b->addr = addr;
    return 0;
}

static int bar_addr(struct vg_pci_dev *dev, unsigned bar, uint64_t off,
                    uint64_t *addr, struct vg_error *err)
{
    if (bar >= VG_PCI_NUM_BARS || !dev->bar[bar].addr || dev->bar[bar].io ||
        off + 4 > dev->bar[bar].size) {
        return vg_error_set(err, EINVAL,
                            "BAR%u+0x%llx: not an assigned memory BAR range",
                            bar, (unsigned long long)off);
    }
    *addr = dev->bar[bar].addr + off;
    return 0;
}

int vg_pci_bar_read32(struct vg_pci_dev *dev, unsigned bar, uint64_t off,
                      uint32_t *val, struct vg_error *err)
{
    uint64_t addr = 0;
    int rc = bar_addr(dev, bar, off, &addr, err);

    return rc < 0 ? rc : vg_qtest_readl(dev->qt, addr, val, err);
}

int vg_pci_bar_write32(struct vg_pci_dev *dev, unsigned bar, uint64_t off,
                       uint32_t val, struct vg_error *err)
{
    uint64_t addr = 0;
    int rc = bar_addr(dev, bar, off, &addr, err);

    return rc < 0 ? rc : vg_qtest_writel(dev->qt, addr, val, err);
}

static int msix_check(struct vg_pci_dev *dev, unsigned vec,
                      struct vg_error *err)
{
    if (!dev->msix_cap) {
        return vg_error_set(err, ENODEV, "device has no MSI-X capability");
    }
    if (vec >= dev->msix_entries) {
        return vg_error_set(err, EINVAL, "MSI-X vector %u >= table size %u",
                            vec, dev->msix_entries);
    }
    return 0;
}

int vg_pci_msix_mask(struct vg_pci_dev *dev, unsigned vec, bool masked,
                     struct vg_error *err)
{
    uint64_t ctl = dev->msix_table_off + (uint64_t)vec * PCI_MSIX_ENTRY_SIZE +
                   PCI_MSIX_ENTRY_VECTOR_CTRL;
    int rc = msix_check(dev, vec, err);

    return rc < 0 ? rc
                  : vg_pci_bar_write32(dev, dev->msix_table_bar, ctl,
                                       masked ? PCI_MSIX_ENTRY_CTRL_MASKBIT : 0,
                                       err);
}

int vg_pci_msix_enable(struct vg_pci_dev *dev, struct vg_error *err)
{
    uint16_t flags;
    unsigned v;
    int rc = msix_check(dev, 0, err);

    for (v = 0; rc == 0 && v < dev->msix_entries; v++) {
        rc = vg_pci_msix_mask(dev, v, true, err);
    }
    if (rc == 0) {
        rc = vg_pci_cfg_read16(dev->qt, dev->devfn,
                               dev->msix_cap + PCI_MSIX_FLAGS, &flags, err);
    }
    if (rc == 0) {
        flags = (flags | PCI_MSIX_FLAGS_ENABLE) & ~PCI_MSIX_FLAGS_MASKALL;
        rc = vg_pci_cfg_write16(dev->qt, dev->devfn,
                                dev->msix_cap + PCI_MSIX_FLAGS, flags, err);
    }
    if (rc < 0) {
        vg_error_prefix(err, "MSI-X enable");
    }
    return rc;
}

int vg_pci_msix_set_vector(struct vg_pci_dev *dev, unsigned vec, uint64_t addr,
                           uint32_t data, struct vg_error *err)
{
    uint64_t e = dev->msix_table_off + (uint64_t)vec * PCI_MSIX_ENTRY_SIZE;
    int rc = msix_check(dev, vec, err);

    if (rc == 0) {
        rc = vg_pci_bar_write32(dev, dev->msix_table_bar,
                                e + PCI_MSIX_ENTRY_LOWER_ADDR, (uint32_t)addr,
                                err);
    }
    if (rc == 0) {
        rc = vg_pci_bar_write32(dev, dev->msix_table_bar,
                                e + PCI_MSIX_ENTRY_UPPER_ADDR,
                                (uint32_t)(addr >> 32), err);
    }
    if (rc == 0) {
        rc = vg_pci_bar_write32(dev, dev->msix_table_bar,
                                e + PCI_MSIX_ENTRY_DATA, data, err);
    }
    if (rc == 0) {
        rc = vg_pci_msix_mask(dev, vec, false, err);
    }
    if (rc < 0) {
        vg_error_prefix(err, "MSI-X vector %u", vec);
    }
    return rc;
}

int vg_pci_msix_pending(struct vg_pci_dev *dev, unsigned vec, bool *pending,
                        struct vg_error *err)
{
    uint32_t word = 0;
    int rc = msix_check(dev, vec, err);

    if (rc == 0) {
        rc = vg_pci_bar_read32(dev, dev->msix_pba_bar,
                               dev->msix_pba_off + (vec / 32) * 4, &word, err);
    }
    if (rc == 0) {
        *pending = word & (1u << (vec % 32));
    }
    return rc;
}
