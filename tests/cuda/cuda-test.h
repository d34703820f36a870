/*
 * cuda-test.h -- what the CUDA backend's tests share: opening a "cuda"
 * backend, and skipping visibly when this machine cannot run one.
 *
 * Without an NVIDIA driver or GPU, or in a build without CUDA kernels,
 * a test program prints "1..0 # SKIP <why>" (TAP: prove reports the
 * program as skipped, with the reason) and exits 0.
 */
#ifndef VGMIG_TESTS_CUDA_TEST_H
#define VGMIG_TESTS_CUDA_TEST_H

#include <errno.h>
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>

#include "vgpu/backend.h"

/* The backend name the tests use: $VGMIG_CUDA_BACKEND or "cuda". */
static inline const char *ct_backend_name(void)
{
    const char *b = getenv("VGMIG_CUDA_BACKEND");

    return b && *b ? b : "cuda";
}

/* The destination's backend in migration tests: $VGMIG_CUDA_DST_BACKEND
 * (e.g. "cuda:1": a second GPU) or ct_backend_name(). */
static inline const char *ct_dst_backend_name(void)
{
    const char *b = getenv("VGMIG_CUDA_DST_BACKEND");

    return b && *b ? b : ct_backend_name();
}

/* Exit with a TAP skip plan unless backend @name opens here (1 MiB). */
static inline void ct_require(const char *name)
{
    struct vgpu_backend *be = NULL;
    struct vg_error err = {0};
    int ret = vgpu_backend_open(name, 1u << 20, &be, &err);

    if (ret == -ENOENT || ret == -ENODEV || ret == -ENOTSUP || ret == -ENOSYS) {
        printf("1..0 # SKIP no usable GPU for the CUDA backend: %s\n", err.msg);
        exit(0);
    }
    if (ret < 0) {
        fprintf(stderr, "cuda backend failed to open: %s\n", err.msg);
        exit(1);
    }
    vgpu_backend_close(be);
}

static inline void ct_require_gpu(void)
{
    ct_require(ct_backend_name());
}

#endif
