#include "dmamem.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/log.h"

#define HUGE_SIZE       (2u << 20)
#define PAGEMAP_PRESENT (1ull << 63)
#define PAGEMAP_PFN     ((1ull << 55) - 1)

/* Read a number from a /proc/sys file; -1 on failure. */
static long sysctl_get(const char *path)
{
    char buf[32] = "";
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n;

    if (fd < 0) {
        return -1;
    }
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    return n > 0 ? strtol(buf, NULL, 10) : -1;
}

static bool sysctl_set(const char *path, long val)
{
    char buf[32];
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    int len = snprintf(buf, sizeof(buf), "%ld\n", val);
    bool ok;

    if (fd < 0) {
        return false;
    }
    ok = write(fd, buf, (size_t)len) == len;
    close(fd);
    return ok;
}

/* Huge pages for @size bytes, adding to the pool if needed; NULL if not
 * possible. */
static void *alloc_huge(size_t size)
{
    static const char pool[] = "/proc/sys/vm/nr_hugepages";
    long have = sysctl_get(pool);
    void *p;

    if (have >= 0) {
        sysctl_set(pool, have + (long)(size / HUGE_SIZE));
    }
    p = mmap(NULL, size, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* The physical address of every page of @d from /proc/self/pagemap. */
static int read_pagemap(struct vgg_dma *d, struct vg_error *err)
{
    size_t pages = d->size / VGG_DMA_PAGE;
    uint64_t first = (uint64_t)(uintptr_t)d->buf / VGG_DMA_PAGE;
    int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    ssize_t n;

    if (fd < 0) {
        return vg_error_set(err, errno, "/proc/self/pagemap: %s",
                            strerror(errno));
    }
    n = pread(fd, d->phys, pages * sizeof(uint64_t),
              (off_t)(first * sizeof(uint64_t)));
    close(fd);
    if (n != (ssize_t)(pages * sizeof(uint64_t))) {
        return vg_error_set(err, n < 0 ? errno : EIO,
                            "/proc/self/pagemap: short read");
    }
    for (size_t i = 0; i < pages; i++) {
        uint64_t e = d->phys[i];

        if (!(e & PAGEMAP_PRESENT) || !(e & PAGEMAP_PFN)) {
            return vg_error_set(err, EPERM,
                                "/proc/self/pagemap: page %zu has no "
                                "frame number (entry 0x%016" PRIx64
                                "; not root?)",
                                i, e);
        }
        d->phys[i] = (e & PAGEMAP_PFN) * VGG_DMA_PAGE;
    }
    return 0;
}

int vgg_dma_alloc(struct vgg_dma *d, size_t size, bool no_huge,
                  struct vg_error *err)
{
    int rc;

    memset(d, 0, sizeof(*d));
    if (size == 0 || size % VGG_DMA_PAGE) {
        return vg_error_set(err, EINVAL,
                            "DMA buffer size %zu not a multiple of %u", size,
                            VGG_DMA_PAGE);
    }
    /* Locked pages must stay where they are. */
    sysctl_set("/proc/sys/vm/compact_unevictable_allowed", 0);
    if (!no_huge && size % HUGE_SIZE == 0) {
        d->buf = alloc_huge(size);
        d->huge = d->buf != NULL;
    }
    if (!d->buf) {
        void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);

        if (p == MAP_FAILED) {
            return vg_error_set(err, errno, "mmap %zu bytes: %s", size,
                                strerror(errno));
        }
        d->buf = p;
    }
    d->size = size;
    memset(d->buf, 0, size);
    if (mlock(d->buf, size) < 0) {
        rc = vg_error_set(err, errno, "mlock %zu bytes: %s", size,
                          strerror(errno));
        vgg_dma_free(d);
        return rc;
    }
    d->phys = calloc(size / VGG_DMA_PAGE, sizeof(uint64_t));
    if (!d->phys) {
        vgg_dma_free(d);
        return vg_error_set(err, ENOMEM, "out of memory");
    }
    rc = read_pagemap(d, err);
    if (rc < 0) {
        vgg_dma_free(d);
        return rc;
    }
    vg_dbg("DMA buffer: %zu bytes at guest physical 0x%" PRIx64 "%s", size,
           d->phys[0], d->huge ? " (huge pages)" : "");
    return 0;
}

void vgg_dma_free(struct vgg_dma *d)
{
    if (d->buf) {
        munmap(d->buf, d->size);
    }
    free(d->phys);
    memset(d, 0, sizeof(*d));
}

uint64_t vgg_dma_addr(const struct vgg_dma *d, size_t off)
{
    return d->phys[off / VGG_DMA_PAGE] + off % VGG_DMA_PAGE;
}

size_t vgg_dma_contig(const struct vgg_dma *d, size_t off, size_t len)
{
    size_t n = VGG_DMA_PAGE - off % VGG_DMA_PAGE;
    size_t page = off / VGG_DMA_PAGE;

    while (n < len && page + 1 < d->size / VGG_DMA_PAGE &&
           d->phys[page + 1] == d->phys[page] + VGG_DMA_PAGE) {
        n += VGG_DMA_PAGE;
        page++;
    }
    return n < len ? n : len;
}
