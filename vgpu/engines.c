/*
 * engines.c -- FILL, COPY, DMA, AXPY and SCATTER_ADD on a CPU mapping of
 * VRAM, each advanced slice by slice through a struct vgpu_job.
 */
#include "engines.h"

#include <endian.h>
#include <string.h>

void vgpu_job_init(struct vgpu_job *job, const struct vgpu_cmd *cmd,
                   uint32_t index)
{
    memset(job, 0, sizeof(*job));
    job->cmd = *cmd;
    job->ring_index = index;
}

static void wrote(const struct vgpu_engine_env *env, uint64_t off, uint64_t len,
                  enum vgpu_write_kind kind)
{
    env->wrote(env->opaque, off, len, kind);
}

static uint32_t load32(const uint8_t *p)
{
    uint32_t v;

    memcpy(&v, p, 4);
    return le32toh(v);
}

static void store32(uint8_t *p, uint32_t v)
{
    v = htole32(v);
    memcpy(p, &v, 4);
}

static float load_f32(const uint8_t *p)
{
    uint32_t bits = load32(p);
    float f;

    memcpy(&f, &bits, 4);
    return f;
}

static void store_f32(uint8_t *p, float f)
{
    uint32_t bits;

    memcpy(&bits, &f, 4);
    store32(p, bits);
}

static enum vgpu_exec_status run_fill(const struct vgpu_engine_env *env,
                                      struct vgpu_job *job, uint64_t *budget)
{
    uint64_t dst = job->cmd.arg[0] + job->done;
    uint64_t n = vgpu_slice_len(job->cmd.arg[1] - job->done, *budget, 4);
    uint32_t pattern = (uint32_t)job->cmd.arg[2];
    uint64_t i;

    for (i = 0; i < n; i += 4) {
        store32(env->vram + dst + i, pattern);
    }
    wrote(env, dst, n, VGPU_WRITE_EXACT);
    job->done += n;
    vgpu_charge(budget, n);
    return job->done == job->cmd.arg[1] ? VGPU_EXEC_DONE : VGPU_EXEC_MORE;
}

static enum vgpu_exec_status run_copy(const struct vgpu_engine_env *env,
                                      struct vgpu_job *job, uint64_t *budget)
{
    uint64_t dst = job->cmd.arg[0] + job->done;
    uint64_t src = job->cmd.arg[1] + job->done;
    uint64_t n = vgpu_slice_len(job->cmd.arg[2] - job->done, *budget, 1);

    memcpy(env->vram + dst, env->vram + src, n);
    wrote(env, dst, n, VGPU_WRITE_EXACT);
    job->done += n;
    vgpu_charge(budget, n);
    return job->done == job->cmd.arg[2] ? VGPU_EXEC_DONE : VGPU_EXEC_MORE;
}

/*
 * DMA between VRAM offset @vram and guest IOVA @iova, @len bytes in all;
 * @to_vram gives the direction.  The whole IOVA range must lie in one
 * mapping when the command starts; each chunk is looked up again because
 * the guest's mappings may change between slices.
 */
static enum vgpu_exec_status run_dma(const struct vgpu_engine_env *env,
                                     struct vgpu_job *job, uint64_t *budget,
                                     uint64_t vram, uint64_t iova, uint64_t len,
                                     bool to_vram, enum vgpu_error_code *code)
{
    const struct vgpu_host *h = env->host;
    uint64_t n = vgpu_slice_len(len - job->done, *budget, 1);
    uint64_t off = 0;

    if (job->done == 0 && !h->dma_ptr(h->opaque, iova, len, !to_vram)) {
        *code = VGPU_ERR_DMA_FAULT;
        return VGPU_EXEC_ERROR;
    }
    while (off < n) {
        uint64_t pos = job->done;
        uint64_t c = n - off < VGPU_DMA_CHUNK ? n - off : VGPU_DMA_CHUNK;
        uint8_t *p = h->dma_ptr(h->opaque, iova + pos, c, !to_vram);

        if (!p) {
            *code = VGPU_ERR_DMA_FAULT;
            return VGPU_EXEC_ERROR;
        }
        if (to_vram) {
            memmove(env->vram + vram + pos, p, c);
            wrote(env, vram + pos, c, VGPU_WRITE_EXACT);
        } else {
            memmove(p, env->vram + vram + pos, c);
        }
        off += c;
        job->done += c;
        vgpu_charge(budget, c);
    }
    return job->done == len ? VGPU_EXEC_DONE : VGPU_EXEC_MORE;
}

static enum vgpu_exec_status run_axpy(const struct vgpu_engine_env *env,
                                      struct vgpu_job *job, uint64_t *budget)
{
    uint64_t y = job->cmd.arg[0] + job->done;
    uint64_t x = job->cmd.arg[1] + job->done;
    uint64_t total = job->cmd.arg[2] * 4;
    uint64_t n = vgpu_slice_len(total - job->done, *budget, 4);
    float a = vgpu_arg_f32(job->cmd.arg[3]);
    uint64_t i;

    for (i = 0; i < n; i += 4) {
        float ax = a * load_f32(env->vram + x + i);

        store_f32(env->vram + y + i, ax + load_f32(env->vram + y + i));
    }
    wrote(env, y, n, VGPU_WRITE_EXACT);
    job->done += n;
    vgpu_charge(budget, n);
    return job->done == total ? VGPU_EXEC_DONE : VGPU_EXEC_MORE;
}

/* Add @v to the float32 values in [p, p + len). */
static void add_f32(uint8_t *p, uint64_t len, float v)
{
    uint64_t i;

    for (i = 0; i < len; i += 4) {
        store_f32(p + i, load_f32(p + i) + v);
    }
}

static enum vgpu_exec_status run_scatter(const struct vgpu_engine_env *env,
                                         struct vgpu_job *job, uint64_t *budget,
                                         enum vgpu_error_code *code)
{
    const uint64_t *a = job->cmd.arg;
    uint64_t table = a[0], rows = a[1], row_bytes = a[2];
    float v = vgpu_arg_f32(a[5]);

    do {
        uint64_t off, n;

        if (job->row_done == 0) {
            job->row = load32(env->vram + a[3] + job->done * 4);
            if (job->row >= rows) {
                *code = VGPU_ERR_INDEX_RANGE;
                return VGPU_EXEC_ERROR;
            }
        }
        off = table + job->row * row_bytes + job->row_done;
        n = vgpu_slice_len(row_bytes - job->row_done, *budget, 4);
        add_f32(env->vram + off, n, v);
        wrote(env, off, n, VGPU_WRITE_OPAQUE);
        vgpu_charge(budget, n);
        job->row_done += n;
        if (job->row_done == row_bytes) {
            job->row_done = 0;
            job->done++;
        }
    } while (*budget > 0 && job->done < a[4]);
    return job->done == a[4] ? VGPU_EXEC_DONE : VGPU_EXEC_MORE;
}

enum vgpu_exec_status vgpu_engine_run(const struct vgpu_engine_env *env,
                                      struct vgpu_job *job, uint64_t *budget,
                                      enum vgpu_error_code *code)
{
    const uint64_t *a = job->cmd.arg;

    if (!env->vram) {
        return vgpu_engine_run_dev(env, job, budget, code);
    }
    *code = VGPU_ERR_NONE;
    switch (job->cmd.opcode) {
    case VGPU_OP_FILL:
        return run_fill(env, job, budget);
    case VGPU_OP_COPY:
        return run_copy(env, job, budget);
    case VGPU_OP_DMA_TO_VRAM:
        return run_dma(env, job, budget, a[0], a[1], a[2], true, code);
    case VGPU_OP_DMA_FROM_VRAM:
        return run_dma(env, job, budget, a[1], a[0], a[2], false, code);
    case VGPU_OP_AXPY:
        return run_axpy(env, job, budget);
    case VGPU_OP_SCATTER_ADD:
        return run_scatter(env, job, budget, code);
    default: /* NOP, FENCE: no engine work; the device completes them */
        return VGPU_EXEC_DONE;
    }
}
