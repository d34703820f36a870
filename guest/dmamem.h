/*
 * dmamem.h -- guest RAM that the vGPU can reach by DMA.
 *
 * The device addresses guest RAM by guest physical address (there is no
 * IOMMU in the guest).  vgg_dma_alloc() takes locked memory, preferably
 * one 2 MiB huge page (physically contiguous; it raises
 * vm.nr_hugepages if needed), else ordinary pages, and learns the physical
 * address of every 4 KiB page from /proc/self/pagemap (root only).
 * Locked pages are not swapped; compaction of locked pages is switched
 * off (vm.compact_unevictable_allowed = 0) so the addresses stay valid.
 */
#ifndef VGG_DMAMEM_H
#define VGG_DMAMEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define VGG_DMA_PAGE 4096u

struct vgg_dma {
    uint8_t *buf;
    size_t size;
    uint64_t *phys; /* guest physical address of each 4 KiB page */
    bool huge;      /* backed by huge pages */
};

/* @size bytes (a multiple of VGG_DMA_PAGE) of DMA-able memory, zeroed;
 * ordinary pages only if @no_huge. */
int vgg_dma_alloc(struct vgg_dma *d, size_t size, bool no_huge,
                  struct vg_error *err);
void vgg_dma_free(struct vgg_dma *d);

/* Guest physical address of byte @off of @d. */
uint64_t vgg_dma_addr(const struct vgg_dma *d, size_t off);
/* How many bytes from @off on (at most @len) are physically contiguous. */
size_t vgg_dma_contig(const struct vgg_dma *d, size_t off, size_t len);

#endif
