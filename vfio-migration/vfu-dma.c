#include "vfu-dma.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/log.h"

struct dma_map {
    uint64_t iova;
    uint64_t size;
    void *base;     /* mmap() result, NULL if not accessible */
    size_t map_len; /* length given to mmap() */
    uint8_t *host;  /* host address of iova */
    bool readable;
    bool writable;
};

struct vfu_dma {
    unsigned max;
    unsigned count;
    struct dma_map maps[];
};

int vfu_dma_new(unsigned max_maps, struct vfu_dma **out, struct vg_error *err)
{
    struct vfu_dma *dma;

    dma = calloc(1, sizeof(*dma) + (size_t)max_maps * sizeof(dma->maps[0]));
    if (!dma) {
        return vg_error_set(err, ENOMEM, "DMA table of %u entries", max_maps);
    }
    dma->max = max_maps;
    *out = dma;
    return 0;
}

void vfu_dma_free(struct vfu_dma *dma)
{
    if (dma) {
        vfu_dma_unmap_all(dma);
        free(dma);
    }
}

unsigned vfu_dma_count(const struct vfu_dma *dma)
{
    return dma->count;
}

static int map_fd(struct dma_map *m, int fd, uint64_t offset,
                  struct vg_error *err)
{
    uint64_t pgsz = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t skip = offset & (pgsz - 1);
    int prot = (m->readable ? PROT_READ : 0) | (m->writable ? PROT_WRITE : 0);

    if (m->size > SIZE_MAX - skip) {
        return vg_error_set(err, EINVAL, "mapping too large");
    }
    m->map_len = (size_t)(m->size + skip);
    m->base = mmap(NULL, m->map_len, prot ? prot : PROT_NONE, MAP_SHARED, fd,
                   (off_t)(offset - skip));
    if (m->base == MAP_FAILED) {
        m->base = NULL;
        return vg_error_set(err, errno, "mmap of fd %d at 0x%llx: %s", fd,
                            (unsigned long long)offset, strerror(errno));
    }
    m->host = (uint8_t *)m->base + skip;
    return 0;
}

int vfu_dma_map(struct vfu_dma *dma, uint64_t iova, uint64_t size, int fd,
                uint64_t offset, bool readable, bool writable,
                struct vg_error *err)
{
    struct dma_map m = {
        .iova = iova, .size = size, .readable = readable, .writable = writable};
    int ret;

    if (size == 0 || iova + size < iova) {
        return vg_error_set(err, EINVAL, "bad range 0x%llx+0x%llx",
                            (unsigned long long)iova, (unsigned long long)size);
    }
    for (unsigned i = 0; i < dma->count; i++) {
        const struct dma_map *o = &dma->maps[i];
        if (iova < o->iova + o->size && o->iova < iova + size) {
            return vg_error_set(
                err, EEXIST, "0x%llx+0x%llx overlaps mapping 0x%llx+0x%llx",
                (unsigned long long)iova, (unsigned long long)size,
                (unsigned long long)o->iova, (unsigned long long)o->size);
        }
    }
    if (dma->count == dma->max) {
        return vg_error_set(err, ENOSPC, "all %u DMA mappings in use",
                            dma->max);
    }
    if (fd >= 0) {
        ret = map_fd(&m, fd, offset, err);
        if (ret < 0) {
            return ret;
        }
    }
    dma->maps[dma->count++] = m;
    vg_dbg("DMA map 0x%llx+0x%llx %s%s%s", (unsigned long long)iova,
           (unsigned long long)size, readable ? "r" : "-", writable ? "w" : "-",
           fd >= 0 ? "" : " (no fd)");
    return 0;
}

static void unmap_index(struct vfu_dma *dma, unsigned i)
{
    if (dma->maps[i].base) {
        munmap(dma->maps[i].base, dma->maps[i].map_len);
    }
    dma->maps[i] = dma->maps[--dma->count];
}

int vfu_dma_unmap(struct vfu_dma *dma, uint64_t iova, uint64_t size,
                  struct vg_error *err)
{
    for (unsigned i = 0; i < dma->count; i++) {
        if (dma->maps[i].iova == iova && dma->maps[i].size == size) {
            unmap_index(dma, i);
            vg_dbg("DMA unmap 0x%llx+0x%llx", (unsigned long long)iova,
                   (unsigned long long)size);
            return 0;
        }
    }
    return vg_error_set(err, ENOENT, "no DMA mapping is exactly 0x%llx+0x%llx",
                        (unsigned long long)iova, (unsigned long long)size);
}

void vfu_dma_unmap_all(struct vfu_dma *dma)
{
    while (dma->count) {
        unmap_index(dma, dma->count - 1);
    }
}

void *vfu_dma_ptr(struct vfu_dma *dma, uint64_t iova, uint64_t len, bool write)
{
    for (unsigned i = 0; i < dma->count; i++) {
        const struct dma_map *m = &dma->maps[i];
        if (iova < m->iova || iova - m->iova >= m->size) {
            continue;
        }
        if (!m->host || len > m->size - (iova - m->iova) ||
            !(write ? m->writable : m->readable)) {
            return NULL;
        }
        return m->host + (iova - m->iova);
    }
    return NULL;
}
