/*
 * backend.h -- where VRAM lives.
 *
 * The device model reaches VRAM through a small backend so that a CUDA
 * backend can replace the CPU one later.  A backend provides a host mapping
 * of the whole VRAM (the engines and the migration code read and write it)
 * and, where it can, a file descriptor that the transport hands to QEMU so
 * BAR2 is mmap'd directly into the guest.
 */
#ifndef VGPU_BACKEND_H
#define VGPU_BACKEND_H

#include <stdint.h>

#include "common/error.h"

struct vgpu_backend;

struct vgpu_backend_ops {
    const char *name;
    /* Allocate @be->size bytes of zeroed VRAM; set @be->base and @be->fd. */
    int (*init)(struct vgpu_backend *be, struct vg_error *err);
    /* Release what init allocated. */
    void (*fini)(struct vgpu_backend *be);
};

struct vgpu_backend {
    const struct vgpu_backend_ops *ops;
    uint64_t size; /* bytes */
    uint8_t *base; /* host mapping of [0, size) */
    int fd;        /* mmap-able descriptor of VRAM, or -1 */
};

/* The CPU backend: a memfd of @size bytes, mapped shared. */
extern const struct vgpu_backend_ops vgpu_backend_cpu_ops;

/*
 * Open backend @name ("cpu"; NULL means "cpu") with @size bytes of VRAM.
 * Fails with -EINVAL for an unknown name, or the backend's error.
 */
int vgpu_backend_open(const char *name, uint64_t size,
                      struct vgpu_backend **out, struct vg_error *err);
/* Close a backend from vgpu_backend_open; NULL is ignored. */
void vgpu_backend_close(struct vgpu_backend *be);

#endif
