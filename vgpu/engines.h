/*
 * engines.h -- execution of validated commands, in bounded slices.
 *
 * A struct vgpu_job is one command in flight: a copy of the validated ring
 * entry and a progress cursor.  vgpu_engine_run() advances it by about a
 * given number of bytes of work and returns; the next call resumes where it
 * stopped.  The job holds everything needed to resume, so it is the
 * in-flight part of the device state that migration saves and restores.
 *
 * Every VRAM byte an engine writes is reported through env->wrote, once per
 * written range, as exact (the range is known from the arguments: FILL,
 * COPY, DMA_TO_VRAM, AXPY) or opaque (it depends on data: SCATTER_ADD).
 */
#ifndef VGPU_ENGINES_H
#define VGPU_ENGINES_H

#include <stdbool.h>
#include <stdint.h>

#include "vgpu.h"

/* Bytes moved per DMA mapping lookup. */
#define VGPU_DMA_CHUNK (64u * 1024)

enum vgpu_write_kind {
    VGPU_WRITE_EXACT,  /* range declared by the command's arguments */
    VGPU_WRITE_OPAQUE, /* range depends on data the device read */
};

struct vgpu_backend;

/* What the engines work on. */
struct vgpu_engine_env {
    uint8_t *vram; /* host mapping, or NULL: use be's device ops */
    uint64_t vram_size;
    const struct vgpu_host *host;
    /* Called for every VRAM range [off, off + len) an engine wrote. */
    void (*wrote)(void *opaque, uint64_t off, uint64_t len,
                  enum vgpu_write_kind kind);
    void *opaque;
    struct vgpu_backend *be;
};

struct vgpu_job {
    struct vgpu_cmd cmd; /* validated, host byte order */
    uint32_t ring_index; /* where it came from, for ERROR_INDEX */
    uint64_t done;       /* bytes (SCATTER_ADD: indices) completed */
    uint64_t row;        /* SCATTER_ADD: row being updated */
    uint64_t row_done;   /* SCATTER_ADD: bytes of that row done, 0 = next
                            index not read yet */
};

enum vgpu_exec_status {
    VGPU_EXEC_DONE,  /* the command completed */
    VGPU_EXEC_MORE,  /* budget spent; call again */
    VGPU_EXEC_ERROR, /* the command failed; *code says why */
};

/* Bytes to do in a slice: what is @left, capped by @budget rounded down to
 * @unit, but at least one @unit (@left is a multiple of @unit). */
static inline uint64_t vgpu_slice_len(uint64_t left, uint64_t budget,
                                      uint64_t unit)
{
    uint64_t n = budget - budget % unit;

    if (n < unit) {
        n = unit;
    }
    return n < left ? n : left;
}

/* Take @n bytes of work off *@budget (not below 0). */
static inline void vgpu_charge(uint64_t *budget, uint64_t n)
{
    *budget = n < *budget ? *budget - n : 0;
}

/* The float32 whose bits are the low 32 of a command argument. */
static inline float vgpu_arg_f32(uint64_t bits)
{
    union {
        uint32_t u;
        float f;
    } v = {.u = (uint32_t)bits};

    return v.f;
}

/* Start @job for validated command @cmd from ring entry @index. */
void vgpu_job_init(struct vgpu_job *job, const struct vgpu_cmd *cmd,
                   uint32_t index);

/*
 * Advance @job by at most about *@budget bytes of work (at least one unit
 * of progress, e.g. 4 bytes, when *@budget > 0) and subtract the work done
 * from *@budget.  On VGPU_EXEC_ERROR, *@code is the VGPU_ERR_*.
 */
enum vgpu_exec_status vgpu_engine_run(const struct vgpu_engine_env *env,
                                      struct vgpu_job *job, uint64_t *budget,
                                      enum vgpu_error_code *code);

/* Budget multiplier of a backend without a host mapping: one slice is one
 * kernel launch, so it should be worth one. */
#define VGPU_DEV_BUDGET_SCALE 64u

/* vgpu_engine_run() for env->vram NULL (engines-dev.c). */
enum vgpu_exec_status vgpu_engine_run_dev(const struct vgpu_engine_env *env,
                                          struct vgpu_job *job,
                                          uint64_t *budget,
                                          enum vgpu_error_code *code);

#endif
