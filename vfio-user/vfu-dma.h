/*
 * vfu-dma.h -- the table of guest memory the client mapped for DMA.
 *
 * Each VFIO_USER_DMA_MAP with a file descriptor is mmap()ed MAP_SHARED with
 * the protection it grants; one without an fd is recorded but not
 * accessible (we never use DMA_READ/WRITE messages).  Mappings may not
 * overlap; unmap needs the exact range.  vfu_dma_ptr() is the bounds-checked
 * lookup behind struct vgpu_host.dma_ptr.
 *
 * DMA logging (VFIO_DEVICE_FEATURE_DMA_LOGGING_*): while started, every
 * vfu_dma_ptr() lookup for writing marks the pages of its range in the
 * logged IOVA ranges.  The device writes guest RAM only through such a
 * pointer, right after the lookup, and the server is single-threaded, so
 * a report never falls between a lookup and its write: every page written
 * is reported dirty at least once after the write.
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
 * @fd stays owned by the caller and must be a memfd sealed against
 * shrinking (F_SEAL_SHRINK) that holds the range, else -EINVAL.  -EEXIST
 * on overlap, -ENOSPC when full. */
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
/* Whether a writable accessible mapping overlaps [iova, iova + len): only
 * there can the device write, so only there can a DMA log report find a
 * page dirty. */
bool vfu_dma_writable_overlap(const struct vfu_dma *dma, uint64_t iova,
                              uint64_t len);

/*
 * Post-copy (DMA_UFFD, docs/postcopy.md): on a post-copy destination the
 * pages of guest RAM not received yet are holes in the mappings.  ADVISE
 * creates a userfaultfd (*@fd, which stays ours; the client gets a copy);
 * LISTEN registers every mapping with an fd with it for missing pages, so
 * that the device's accesses there wait until the client has placed the
 * page and woken them, and lists them into @out (at most @max, else
 * -E2BIG); END unregisters them and closes it (also done by ADVISE again,
 * unmap-all's caller on disconnect, and vfu_dma_free).  Mappings made
 * after LISTEN are not registered.
 */
struct vfu_dma_area {
    uint64_t iova;
    uint64_t size;
    uint64_t vaddr; /* where this process mapped iova */
};

int vfu_dma_uffd_advise(struct vfu_dma *dma, int *fd, struct vg_error *err);
/* Whether this process may create a userfaultfd at all (ADVISE's first
 * step): 0, or the error it would get (e.g. no CAP_SYS_PTRACE where
 * vm.unprivileged_userfaultfd is 0, or a seccomp filter). */
int vfu_dma_uffd_probe(struct vg_error *err);
int vfu_dma_uffd_listen(struct vfu_dma *dma, struct vfu_dma_area *out,
                        unsigned max, unsigned *n, struct vg_error *err);
void vfu_dma_uffd_end(struct vfu_dma *dma);

/* Bounds of DMA logging. */
#define VFU_DMA_LOG_MAX_RANGES 256u
#define VFU_DMA_LOG_MAX_PAGES  (1u << 27) /* bits over all ranges */
#define VFU_DMA_LOG_PGSIZE_MIN 4096u
#define VFU_DMA_LOG_PGSIZE_MAX (1u << 30)

struct vfu_dma_log_range {
    uint64_t iova;
    uint64_t length;
};

/*
 * Start logging writes to @n (1..VFU_DMA_LOG_MAX_RANGES) non-overlapping,
 * non-empty @ranges.  *@page_size (a power of two) is the hint; the page
 * size used, the hint clamped to [VFU_DMA_LOG_PGSIZE_MIN,
 * VFU_DMA_LOG_PGSIZE_MAX], is stored back.  -EBUSY if already started.
 */
int vfu_dma_log_start(struct vfu_dma *dma, uint64_t *page_size,
                      const struct vfu_dma_log_range *ranges, uint32_t n,
                      struct vg_error *err);
/* Stop logging (nothing happens if it is not started). */
void vfu_dma_log_stop(struct vfu_dma *dma);
bool vfu_dma_logging(const struct vfu_dma *dma);
/*
 * TEST ONLY (vgpu-server --fault no-dma-log): while @drop is set, writes
 * are not marked, so logging starts, stops and reports as usual but
 * reports nothing the device wrote.  Off by default.
 */
void vfu_dma_log_set_drop(struct vfu_dma *dma, bool drop);
/*
 * Report and clear the log for [iova, iova + length): set bit k of
 * @bitmap (which the caller zeroed, ceil(length / page_size) bits) if a
 * page of size @page_size (a power of two) starting at iova + k *
 * page_size was written since the last report.  Logged pages partly
 * outside the range stay logged.  -EINVAL if logging is not started.
 */
int vfu_dma_log_report(struct vfu_dma *dma, uint64_t iova, uint64_t length,
                       uint64_t page_size, uint64_t *bitmap,
                       struct vg_error *err);

#endif
