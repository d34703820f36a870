/*
 * prealloc.h -- back mapped VRAM with memory before it is needed.
 *
 * A real GPU's VRAM is physical from power-on; the CPU backend's is a memfd
 * whose pages the kernel allocates and zeroes at first touch.  On a
 * migration's destination those first touches fall inside the stream's
 * load, one request at a time (docs/data-path.md measures them).
 * vgpu_prealloc_start() populates [base, base + size) on a thread of its
 * own, in VGPU_PREALLOC_STEP pieces, with MADV_POPULATE_WRITE: page
 * contents are never changed, so it may run while the device and the
 * loader write VRAM.  It stops at the end, at the first error (logged:
 * a kernel without MADV_POPULATE_WRITE, or no memory left) or when
 * vgpu_prealloc_stop() asks, which joins the thread.
 */
#ifndef VGPU_PREALLOC_H
#define VGPU_PREALLOC_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

#define VGPU_PREALLOC_STEP (2u << 20)

struct vgpu_prealloc;

/* What the thread has done so far. */
struct vgpu_prealloc_progress {
    uint64_t done; /* bytes populated, from base up */
    bool finished; /* the thread has stopped */
    int error;     /* 0, or the -errno it stopped on */
    double elapsed_ms;
};

int vgpu_prealloc_start(uint8_t *base, uint64_t size,
                        struct vgpu_prealloc **out, struct vg_error *err);
/* Stop the thread (if it still runs), join it and free; NULL is ignored. */
void vgpu_prealloc_stop(struct vgpu_prealloc *p);
void vgpu_prealloc_progress(struct vgpu_prealloc *p,
                            struct vgpu_prealloc_progress *out);

#endif
