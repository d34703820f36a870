#include "pcidev.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vgpu/vgpu-regs.h"

#define PCI_COMMAND        0x04
#define PCI_COMMAND_MEMORY 0x2
#define PCI_COMMAND_MASTER 0x4

/* Read sysfs attribute @attr of device @bdf as a number. */
static int read_hex_attr(const char *bdf, const char *attr, unsigned long *val,
                         struct vg_error *err)
{
    char path[256], buf[64];
    ssize_t n;
    int fd;

    snprintf(path, sizeof(path), "%s/%s/%s", VGG_SYSFS_PCI, bdf, attr);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return vg_error_set(err, errno, "%s: %s", path, strerror(errno));
    }
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) {
        return vg_error_set(err, n < 0 ? errno : EIO, "read %s: %s", path,
                            n < 0 ? strerror(errno) : "empty");
    }
    buf[n] = '\0';
    *val = strtoul(buf, NULL, 0);
    return 0;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(a, b);
}

int vgg_pci_find_all(char (*bdfs)[VGG_BDF_LEN], unsigned max, unsigned *n,
                     struct vg_error *err)
{
    DIR *d = opendir(VGG_SYSFS_PCI);
    struct dirent *de;

    *n = 0;
    if (!d) {
        return vg_error_set(err, errno, "%s: %s", VGG_SYSFS_PCI,
                            strerror(errno));
    }
    while ((de = readdir(d))) {
        unsigned long ven = 0, dev = 0;

        if (de->d_name[0] == '.' ||
            read_hex_attr(de->d_name, "vendor", &ven, NULL) < 0 ||
            read_hex_attr(de->d_name, "device", &dev, NULL) < 0 ||
            ven != VGPU_PCI_VENDOR_ID || dev != VGPU_PCI_DEVICE_ID) {
            continue;
        }
        if (*n == max) {
            closedir(d);
            return vg_error_set(
                err, E2BIG, "more than %u vGPUs (PCI %04x:%04x) in %s", max,
                VGPU_PCI_VENDOR_ID, VGPU_PCI_DEVICE_ID, VGG_SYSFS_PCI);
        }
        if (strlen(de->d_name) >= VGG_BDF_LEN) {
            continue; /* not a PCI address */
        }
        memcpy(bdfs[(*n)++], de->d_name, strlen(de->d_name) + 1);
    }
    closedir(d);
    if (*n == 0) {
        return vg_error_set(err, ENODEV,
                            "no PCI device %04x:%04x in %s (is the "
                            "vfio-user-pci device attached?)",
                            VGPU_PCI_VENDOR_ID, VGPU_PCI_DEVICE_ID,
                            VGG_SYSFS_PCI);
    }
    /* In bus order: the same device is vGPU 0 on every boot. */
    qsort(bdfs, *n, VGG_BDF_LEN, cmp_name);
    return 0;
}

int vgg_pci_find(char *bdf, size_t len, struct vg_error *err)
{
    char bdfs[VGG_MAX_DEVICES][VGG_BDF_LEN];
    unsigned n;
    int rc = vgg_pci_find_all(bdfs, VGG_MAX_DEVICES, &n, err);

    if (rc == 0) {
        snprintf(bdf, len, "%s", bdfs[0]);
    }
    return rc;
}

/* Turn on memory decoding and bus mastering: "enable" does the first,
 * the command register write both (the device DMAs to guest RAM). */
static int enable(const char *bdf, struct vg_error *err)
{
    char path[256];
    uint16_t cmd = 0;
    int fd;

    snprintf(path, sizeof(path), "%s/%s/enable", VGG_SYSFS_PCI, bdf);
    fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        /* May fail harmlessly (already enabled): the command register
         * write below is what counts. */
        ssize_t n = write(fd, "1", 1);

        (void)n;
        close(fd);
    }
    snprintf(path, sizeof(path), "%s/%s/config", VGG_SYSFS_PCI, bdf);
    fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        return vg_error_set(err, errno, "%s: %s", path, strerror(errno));
    }
    if (pread(fd, &cmd, sizeof(cmd), PCI_COMMAND) != sizeof(cmd)) {
        close(fd);
        return vg_error_set(err, EIO, "%s: cannot read the command register",
                            path);
    }
    cmd |= PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER;
    if (pwrite(fd, &cmd, sizeof(cmd), PCI_COMMAND) != sizeof(cmd)) {
        int e = errno;

        close(fd);
        return vg_error_set(err, e, "%s: write command register: %s", path,
                            strerror(e));
    }
    close(fd);
    return 0;
}

/* Map BAR @bar of @bdf read-write; its size in *@size. */
static int map_bar(const char *bdf, int bar, void **out, uint64_t *size,
                   struct vg_error *err)
{
    char path[256];
    struct stat st;
    void *p;
    int fd;

    snprintf(path, sizeof(path), "%s/%s/resource%d", VGG_SYSFS_PCI, bdf, bar);
    fd = open(path, O_RDWR | O_SYNC | O_CLOEXEC);
    if (fd < 0) {
        return vg_error_set(err, errno, "%s: %s", path, strerror(errno));
    }
    if (fstat(fd, &st) < 0 || st.st_size <= 0) {
        close(fd);
        return vg_error_set(err, EIO, "%s: no size", path);
    }
    p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
             0);
    close(fd);
    if (p == MAP_FAILED) {
        return vg_error_set(err, errno, "mmap %s (%lld bytes): %s", path,
                            (long long)st.st_size, strerror(errno));
    }
    *out = p;
    *size = (uint64_t)st.st_size;
    return 0;
}

int vgg_pci_open(const char *bdf, struct vgg_dev *dev, struct vg_error *err)
{
    uint64_t regs_size = 0, vram_size = 0, reg_vram;
    void *regs = NULL, *vram = NULL;
    uint32_t id;
    int rc;

    memset(dev, 0, sizeof(*dev));
    snprintf(dev->bdf, sizeof(dev->bdf), "%s", bdf);
    rc = enable(bdf, err);
    if (rc == 0) {
        rc = map_bar(bdf, VGPU_BAR_REGS, &regs, &regs_size, err);
    }
    if (rc == 0 && regs_size < VGPU_BAR0_SIZE) {
        rc = vg_error_set(err, EINVAL, "BAR0 is %" PRIu64 " bytes, not %u",
                          regs_size, VGPU_BAR0_SIZE);
    }
    if (rc == 0) {
        dev->regs = regs;
        dev->regs_size = regs_size;
        id = vgg_rd(dev, VGPU_REG_ID);
        if (id != VGPU_ID_MAGIC) {
            rc = vg_error_set(err, EINVAL, "ID register 0x%08x, not 0x%08x", id,
                              VGPU_ID_MAGIC);
        }
    }
    if (rc == 0) {
        rc = map_bar(bdf, VGPU_BAR_VRAM, &vram, &vram_size, err);
    }
    if (rc == 0) {
        dev->vram = vram;
        dev->vram_size = vram_size;
        dev->page_size = vgg_rd(dev, VGPU_REG_PAGE_SIZE);
        reg_vram = ((uint64_t)vgg_rd(dev, VGPU_REG_VRAM_SIZE_HI) << 32) |
                   vgg_rd(dev, VGPU_REG_VRAM_SIZE_LO);
        if (reg_vram != vram_size) {
            rc = vg_error_set(err, EINVAL,
                              "VRAM_SIZE says %" PRIu64
                              " bytes, BAR2 is %" PRIu64,
                              reg_vram, vram_size);
        }
    }
    if (rc < 0) {
        vg_error_prefix(err, "PCI device %s", bdf);
        if (regs) {
            munmap(regs, regs_size);
        }
        if (vram) {
            munmap(vram, vram_size);
        }
        memset(dev, 0, sizeof(*dev));
    }
    return rc;
}

void vgg_pci_close(struct vgg_dev *dev)
{
    if (dev->regs) {
        munmap((void *)dev->regs, dev->regs_size);
    }
    if (dev->vram) {
        munmap((void *)dev->vram, dev->vram_size);
    }
    memset(dev, 0, sizeof(*dev));
}
