/*
 * backend-cuda.h -- what the CUDA backend offers beyond struct
 * vgpu_backend_ops: the kernel timings of `make bench-cuda`.
 */
#ifndef VGPU_BACKEND_CUDA_H
#define VGPU_BACKEND_CUDA_H

#include <stdint.h>

#include "backend.h"

/* Milliseconds of one pass over all of VRAM by each kernel, timed with
 * CUDA events on the device, back to back in one run. */
struct vgc_timing {
    double read_ms; /* a kernel that only reads VRAM */
    double hash_ms; /* vg_hash_pages over every page */
    double copy_ms; /* device-to-device copy of half of VRAM to the other */
    /* vg_hash_pages with two seeds over the pages of one 2 MiB record, as
     * a hashed read runs it: the mean of RUN_HASH_LAUNCHES launches. */
    double run_hash_ms;
};

/* Time each kernel once on @be (a "cuda" backend) with @page_size pages. */
int vgc_time_kernels(struct vgpu_backend *be, uint32_t page_size,
                     struct vgc_timing *t, struct vg_error *err);

#endif
