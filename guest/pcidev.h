/*
 * pcidev.h -- find the vGPU in the guest and map its BARs from user space.
 *
 * The device is looked up in /sys/bus/pci/devices by vendor and device
 * ID (vgpu/vgpu-regs.h).  Opening it enables it (sysfs "enable", then
 * memory decoding and bus mastering in the command register, since the
 * device DMAs to guest RAM) and maps BAR0 (registers) and BAR2 (VRAM)
 * through the "resource0" and "resource2" files.  No kernel driver is
 * needed; the tool must run as root.
 */
#ifndef VGG_PCIDEV_H
#define VGG_PCIDEV_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define VGG_SYSFS_PCI "/sys/bus/pci/devices"
#define VGG_BDF_LEN   32
/* The most vGPUs one vgpu-guest drives (--all-devices). */
#define VGG_MAX_DEVICES 8

struct vgg_dev {
    char bdf[VGG_BDF_LEN];   /* e.g. "0000:00:02.0" */
    volatile uint32_t *regs; /* BAR0 */
    uint64_t regs_size;
    volatile uint8_t *vram; /* BAR2 */
    uint64_t vram_size;
    uint32_t page_size; /* the device's tracking page (PAGE_SIZE) */
};

/* Names of all vGPUs in sysfs, in bus order, into @bdfs (at most @max;
 * more is an error -E2BIG), their number in *@n; -ENODEV if there is
 * none. */
int vgg_pci_find_all(char (*bdfs)[VGG_BDF_LEN], unsigned max, unsigned *n,
                     struct vg_error *err);
/* Name of the first vGPU (in bus order) into @bdf (@len bytes); -ENODEV
 * if there is none. */
int vgg_pci_find(char *bdf, size_t len, struct vg_error *err);
/* Enable device @bdf and map its BARs; checks the ID register and that
 * the VRAM_SIZE registers match BAR2's size. */
int vgg_pci_open(const char *bdf, struct vgg_dev *dev, struct vg_error *err);
void vgg_pci_close(struct vgg_dev *dev);

static inline uint32_t vgg_rd(const struct vgg_dev *dev, uint32_t reg)
{
    return dev->regs[reg / 4];
}

static inline void vgg_wr(const struct vgg_dev *dev, uint32_t reg, uint32_t val)
{
    dev->regs[reg / 4] = val;
}

#endif
