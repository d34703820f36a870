/*
 * engines-dev.c -- the engines on a backend without a host mapping of
 * VRAM (cuda): the same commands, slices and job cursor as engines.c,
 * with the work done by the backend's device ops.
 *
 * A slice is one device op (a kernel, a copy), so slices are larger here
 * (vgpu_step scales the budget by VGPU_DEV_BUDGET_SCALE).  SCATTER_ADD
 * runs whole rows in one kernel; which rows it touched depends on the
 * indices, which stay on the device, so it reports the whole table as
 * its opaque write-set and dirty tracking rehashes the table on the GPU.
 * A failed device op fails the command with VGPU_ERR_DEVICE.
 */
#include "engines.h"

#include "backend.h"
#include "cmd.h"
#include "common/log.h"

/* Log a failed device op; the command fails with VGPU_ERR_DEVICE. */
static enum vgpu_exec_status failed(const struct vgpu_job *job, int ret,
                                    const struct vg_error *err,
                                    enum vgpu_error_code *code)
{
    vg_err("vgpu: %s (ring entry %u) failed on the device: %s",
           vgpu_op_name(job->cmd.opcode), job->ring_index,
           ret < 0 ? err->msg : "?");
    *code = VGPU_ERR_DEVICE;
    return VGPU_EXEC_ERROR;
}

static enum vgpu_exec_status advance(struct vgpu_job *job, uint64_t *budget,
                                     uint64_t n, uint64_t total)
{
    job->done += n;
    vgpu_charge(budget, n);
    return job->done == total ? VGPU_EXEC_DONE : VGPU_EXEC_MORE;
}

static enum vgpu_exec_status dev_fill(const struct vgpu_engine_env *env,
                                      struct vgpu_job *job, uint64_t *budget,
                                      enum vgpu_error_code *code)
{
    struct vgpu_backend *be = env->be;
    uint64_t dst = job->cmd.arg[0] + job->done;
    uint64_t n = vgpu_slice_len(job->cmd.arg[1] - job->done, *budget, 4);
    struct vg_error err;
    int ret = be->ops->fill(be, dst, n, (uint32_t)job->cmd.arg[2], &err);

    if (ret < 0) {
        return failed(job, ret, &err, code);
    }
    env->wrote(env->opaque, dst, n, VGPU_WRITE_EXACT);
    return advance(job, budget, n, job->cmd.arg[1]);
}

static enum vgpu_exec_status dev_copy(const struct vgpu_engine_env *env,
                                      struct vgpu_job *job, uint64_t *budget,
                                      enum vgpu_error_code *code)
{
    struct vgpu_backend *be = env->be;
    uint64_t dst = job->cmd.arg[0] + job->done;
    uint64_t src = job->cmd.arg[1] + job->done;
    uint64_t n = vgpu_slice_len(job->cmd.arg[2] - job->done, *budget, 1);
    struct vg_error err;
    int ret = be->ops->copy(be, dst, src, n, &err);

    if (ret < 0) {
        return failed(job, ret, &err, code);
    }
    env->wrote(env->opaque, dst, n, VGPU_WRITE_EXACT);
    return advance(job, budget, n, job->cmd.arg[2]);
}

/* DMA between VRAM offset @vram and guest IOVA @iova, as engines.c's
 * run_dma: the whole range is checked when the command starts, each
 * chunk looked up again. */
static enum vgpu_exec_status dev_dma(const struct vgpu_engine_env *env,
                                     struct vgpu_job *job, uint64_t *budget,
                                     uint64_t vram, uint64_t iova, uint64_t len,
                                     bool to_vram, enum vgpu_error_code *code)
{
    const struct vgpu_host *h = env->host;
    struct vgpu_backend *be = env->be;
    uint64_t n = vgpu_slice_len(len - job->done, *budget, 1), off = 0;
    struct vg_error err;

    if (job->done == 0 && !h->dma_ptr(h->opaque, iova, len, !to_vram)) {
        *code = VGPU_ERR_DMA_FAULT;
        return VGPU_EXEC_ERROR;
    }
    while (off < n) {
        uint64_t pos = job->done;
        uint64_t c = n - off < VGPU_DMA_CHUNK ? n - off : VGPU_DMA_CHUNK;
        uint8_t *p = h->dma_ptr(h->opaque, iova + pos, c, !to_vram);
        int ret;

        if (!p) {
            *code = VGPU_ERR_DMA_FAULT;
            return VGPU_EXEC_ERROR;
        }
        ret = to_vram ? be->ops->write(be, vram + pos, p, c, &err)
                      : be->ops->read(be, vram + pos, p, c, &err);
        if (ret < 0) {
            return failed(job, ret, &err, code);
        }
        if (to_vram) {
            env->wrote(env->opaque, vram + pos, c, VGPU_WRITE_EXACT);
        }
        off += c;
        job->done += c;
        vgpu_charge(budget, c);
    }
    return job->done == len ? VGPU_EXEC_DONE : VGPU_EXEC_MORE;
}

static enum vgpu_exec_status dev_axpy(const struct vgpu_engine_env *env,
                                      struct vgpu_job *job, uint64_t *budget,
                                      enum vgpu_error_code *code)
{
    struct vgpu_backend *be = env->be;
    uint64_t y = job->cmd.arg[0] + job->done;
    uint64_t x = job->cmd.arg[1] + job->done;
    uint64_t total = job->cmd.arg[2] * 4;
    uint64_t n = vgpu_slice_len(total - job->done, *budget, 4);
    struct vg_error err;
    int ret =
        be->ops->axpy(be, y, x, n / 4, vgpu_arg_f32(job->cmd.arg[3]), &err);

    if (ret < 0) {
        return failed(job, ret, &err, code);
    }
    env->wrote(env->opaque, y, n, VGPU_WRITE_EXACT);
    return advance(job, budget, n, total);
}

/* Part of one row, at most the budget (a row started by an earlier slice,
 * or a budget smaller than a row): engines.c's per-row step, the index
 * read back from VRAM. */
static enum vgpu_exec_status scatter_part(const struct vgpu_engine_env *env,
                                          struct vgpu_job *job,
                                          uint64_t *budget,
                                          enum vgpu_error_code *code)
{
    struct vgpu_backend *be = env->be;
    const uint64_t *a = job->cmd.arg;
    uint64_t off, n;
    struct vg_error err;
    int ret = 0;

    if (job->row_done == 0) {
        uint8_t b[4];

        ret = be->ops->read(be, a[3] + job->done * 4, b, 4, &err);
        job->row = (uint64_t)b[0] | (uint64_t)b[1] << 8 | (uint64_t)b[2] << 16 |
                   (uint64_t)b[3] << 24;
        if (ret == 0 && job->row >= a[1]) {
            *code = VGPU_ERR_INDEX_RANGE;
            return VGPU_EXEC_ERROR;
        }
    }
    off = a[0] + job->row * a[2] + job->row_done;
    n = vgpu_slice_len(a[2] - job->row_done, *budget, 4);
    if (ret == 0) {
        ret = be->ops->add(be, off, n, vgpu_arg_f32(a[5]), &err);
    }
    if (ret < 0) {
        return failed(job, ret, &err, code);
    }
    env->wrote(env->opaque, off, n, VGPU_WRITE_OPAQUE);
    vgpu_charge(budget, n);
    job->row_done += n;
    if (job->row_done == a[2]) {
        job->row_done = 0;
        job->done++;
    }
    return VGPU_EXEC_MORE;
}

/* As many whole rows as the budget pays for, in one kernel. */
static enum vgpu_exec_status scatter_rows(const struct vgpu_engine_env *env,
                                          struct vgpu_job *job,
                                          uint64_t *budget,
                                          enum vgpu_error_code *code)
{
    struct vgpu_backend *be = env->be;
    const uint64_t *a = job->cmd.arg;
    struct vgpu_scatter_args sa = {a[0], a[1], a[2], a[3], vgpu_arg_f32(a[5])};
    uint64_t rows = *budget / a[2], done = 0;
    struct vg_error err;
    int ret;

    rows = rows < a[4] - job->done ? rows : a[4] - job->done;
    ret = be->ops->scatter(be, &sa, job->done, rows, &done, &err);
    if (ret < 0) {
        return failed(job, ret, &err, code);
    }
    if (done > 0) {
        env->wrote(env->opaque, a[0], a[1] * a[2], VGPU_WRITE_OPAQUE);
    }
    job->done += done;
    vgpu_charge(budget, done * a[2]);
    if (done < rows) {
        *code = VGPU_ERR_INDEX_RANGE;
        return VGPU_EXEC_ERROR;
    }
    return VGPU_EXEC_MORE;
}

/* The same slices as engines.c's run_scatter: whole rows while the budget
 * covers one, then part of a row with what is left. */
static enum vgpu_exec_status dev_scatter(const struct vgpu_engine_env *env,
                                         struct vgpu_job *job, uint64_t *budget,
                                         enum vgpu_error_code *code)
{
    const uint64_t *a = job->cmd.arg;

    do {
        enum vgpu_exec_status st = job->row_done != 0 || *budget < a[2]
                                       ? scatter_part(env, job, budget, code)
                                       : scatter_rows(env, job, budget, code);

        if (st == VGPU_EXEC_ERROR) {
            return st;
        }
    } while (*budget > 0 && job->done < a[4]);
    return job->done == a[4] ? VGPU_EXEC_DONE : VGPU_EXEC_MORE;
}

enum vgpu_exec_status vgpu_engine_run_dev(const struct vgpu_engine_env *env,
                                          struct vgpu_job *job,
                                          uint64_t *budget,
                                          enum vgpu_error_code *code)
{
    const uint64_t *a = job->cmd.arg;

    *code = VGPU_ERR_NONE;
    switch (job->cmd.opcode) {
    case VGPU_OP_FILL:
        return dev_fill(env, job, budget, code);
    case VGPU_OP_COPY:
        return dev_copy(env, job, budget, code);
    case VGPU_OP_DMA_TO_VRAM:
        return dev_dma(env, job, budget, a[0], a[1], a[2], true, code);
    case VGPU_OP_DMA_FROM_VRAM:
        return dev_dma(env, job, budget, a[1], a[0], a[2], false, code);
    case VGPU_OP_AXPY:
        return dev_axpy(env, job, budget, code);
    case VGPU_OP_SCATTER_ADD:
        return dev_scatter(env, job, budget, code);
    default: /* NOP, FENCE */
        return VGPU_EXEC_DONE;
    }
}
