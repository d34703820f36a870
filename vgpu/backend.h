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

/* Page hashing where VRAM lives (vgpu_vram_hash() documents it). */
struct vgpu_hash_req {
    uint32_t page_size;
    uint64_t pages;         /* hash pages [0, pages) ... */
    const uint64_t *select; /* ... whose bit is set here; NULL: all */
    uint64_t seed;          /* XXH3-64 seed */
    uint64_t *hashes;       /* out: hashes[p] for each selected page */
    uint64_t *zero;         /* out, may be NULL: bit p set iff all zero */
};

/* Hashes of the pages a read or write copies (vgpu.h). */
struct vgpu_copy_hashes;

/* SCATTER_ADD's arguments (vgpu-regs.h), for the device op. */
struct vgpu_scatter_args {
    uint64_t table, rows, row_bytes, idx;
    float value;
};

struct vgpu_backend_ops {
    const char *name;
    /* Allocate @be->size bytes of zeroed VRAM; set @be->base and @be->fd,
     * or leave base NULL and provide the device ops. */
    int (*init)(struct vgpu_backend *be, struct vg_error *err);
    /* Release what init allocated. */
    void (*fini)(struct vgpu_backend *be);

    /* Device ops; offsets and lengths are checked by the caller. */
    int (*read)(struct vgpu_backend *be, uint64_t off, void *dst, uint64_t len,
                struct vg_error *err);
    int (*write)(struct vgpu_backend *be, uint64_t off, const void *src,
                 uint64_t len, struct vg_error *err);
    /* Hint: [off, off + len) will be read soon; start copying it. */
    void (*prefetch)(struct vgpu_backend *be, uint64_t off, uint64_t len);
    /* Optional: [off, off + len) will be read into @dst next; where @dst
     * is registered memory, start copying it there (see
     * vgpu_vram_read_ahead).  write_async: write, not waiting for a copy
     * from registered memory.  settle waits for those copies. */
    void (*read_ahead)(struct vgpu_backend *be, uint64_t off, void *dst,
                       uint64_t len, const struct vgpu_copy_hashes *h);
    /* Optional: read, and hash the pages read where VRAM lives, from the
     * bytes the copy takes.  A read_ahead of the same range with the same
     * @h (seeds, page size) hashed them already. */
    int (*read_hashed)(struct vgpu_backend *be, uint64_t off, void *dst,
                       uint64_t len, const struct vgpu_copy_hashes *h,
                       struct vg_error *err);
    /* Optional (with read_hashed): write, then hash the pages written
     * where VRAM lives. */
    int (*write_hashed)(struct vgpu_backend *be, uint64_t off, const void *src,
                        uint64_t len, const struct vgpu_copy_hashes *h,
                        struct vg_error *err);
    int (*write_async)(struct vgpu_backend *be, uint64_t off, const void *src,
                       uint64_t len, struct vg_error *err);
    int (*settle)(struct vgpu_backend *be, struct vg_error *err);
    /* Store the 32-bit @pattern over [off, off + len), 4-aligned. */
    int (*fill)(struct vgpu_backend *be, uint64_t off, uint64_t len,
                uint32_t pattern, struct vg_error *err);
    int (*copy)(struct vgpu_backend *be, uint64_t dst, uint64_t src,
                uint64_t len, struct vg_error *err);
    /* y[i] = a * x[i] + y[i] for @n float32 (two roundings, like C). */
    int (*axpy)(struct vgpu_backend *be, uint64_t y, uint64_t x, uint64_t n,
                float a, struct vg_error *err);
    /* Add @v to each float32 in [off, off + len). */
    int (*add)(struct vgpu_backend *be, uint64_t off, uint64_t len, float v,
               struct vg_error *err);
    /* SCATTER_ADD of whole rows for indices [first, first + count): stops
     * before the first index >= rows; *@done = indices applied. */
    int (*scatter)(struct vgpu_backend *be, const struct vgpu_scatter_args *a,
                   uint64_t first, uint64_t count, uint64_t *done,
                   struct vg_error *err);
    int (*hash)(struct vgpu_backend *be, const struct vgpu_hash_req *req,
                struct vg_error *err);
    /* Optional, for a backend without a host mapping: @len bytes at @ptr
     * will often be read into and written from (the migration's shared
     * area): let the device reach them directly, so that read and write
     * skip the staging copy there.  An error only means they do not. */
    int (*host_register)(struct vgpu_backend *be, void *ptr, uint64_t len,
                         struct vg_error *err);
    /* Undo host_register of @ptr; nothing may be in flight to or from it. */
    void (*host_unregister)(struct vgpu_backend *be, void *ptr);
    /* One line naming the device, e.g. the GPU model and driver. */
    const char *(*describe)(const struct vgpu_backend *be);
};

struct vgpu_backend {
    const struct vgpu_backend_ops *ops;
    uint64_t size; /* bytes */
    uint8_t *base; /* host mapping of [0, size), or NULL (device ops) */
    int fd;        /* mmap-able descriptor of VRAM, or -1 */
    int device;    /* "cuda:N": N (GPU ordinal), else 0 */
    /* Bytes read or written straight between VRAM and registered host
     * memory (host_register), without a staging copy. */
    uint64_t direct_bytes;
    void *priv; /* the backend's own state */
};

/* The CPU backend: a memfd of @size bytes, mapped shared. */
extern const struct vgpu_backend_ops vgpu_backend_cpu_ops;
/* The CUDA backend (backend-cuda.c): VRAM in GPU memory. */
extern const struct vgpu_backend_ops vgpu_backend_cuda_ops;

/*
 * Open backend @name ("cpu", "cuda" or "cuda:N" for GPU N; NULL means
 * "cpu") with @size bytes of VRAM.  Fails with -EINVAL for an unknown
 * name, or the backend's error.
 */
int vgpu_backend_open(const char *name, uint64_t size,
                      struct vgpu_backend **out, struct vg_error *err);
/* Close a backend from vgpu_backend_open; NULL is ignored. */
void vgpu_backend_close(struct vgpu_backend *be);

#endif
