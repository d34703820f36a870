/*
 * vfu-dma.h -- the table of guest memory the client mapped for DMA.
 *
 * Each VFIO_USER_DMA_MAP with a file descriptor is mmap()ed MAP_SHARED with
 * the protection it grants; one without an fd is recorded but not
 * accessible (we never use DMA_READ/WRITE messages).  Mappings may not
 * overlap; unmap needs the exact range.  vfu_dma_ptr() is the bounds-checked
 * lookup behind struct vgpu_host.dma_ptr.
 */
#ifndef VFU_DMA_H
#define VFU_DMA_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

struct vfu_dma;

int vfu_dma_new(unsigned max_maps, struct vfu_dma **out, struct vg_error *err);
/* Unmaps everything. */
void vfu_dma_free(struct vfu_dma *dma);

/* Map [iova, iova + size) from @fd at @offset (fd -1: not accessible);
 * @fd stays owned by the caller.  -EEXIST on overlap, -ENOSPC when full. */
int vfu_dma_map(struct vfu_dma *dma, uint64_t iova, uint64_t size, int fd,
                uint64_t offset, bool readable, bool writable,
                struct vg_error *err);
int vfu_dma_unmap(struct vfu_dma *dma, uint64_t iova, uint64_t size,
                  struct vg_error *err);
void vfu_dma_unmap_all(struct vfu_dma *dma);
unsigned vfu_dma_count(const struct vfu_dma *dma);

/* Host pointer for [iova, iova + len) if it lies in one accessible mapping
 * allowing @write access, else NULL. */
void *vfu_dma_ptr(struct vfu_dma *dma, uint64_t iova, uint64_t len, bool write);

#endif
