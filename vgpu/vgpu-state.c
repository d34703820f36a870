/*
 * vgpu-state.c -- the device state blob of migration: registers, ring
 * state and the in-flight command with its cursor, saved and restored
 * with full validation (nothing in a blob is trusted).
 *
 * Layout (little endian, VGPU_STATE_SIZE bytes; docs/migration-stream.md):
 *   0 magic u32, 4 version u16, 6 size u16, 8 vram_size u64,
 *   16 page_size u32, 20 flags u32 (bit 0 kicked, bit 1 job active),
 *   24 ring_base u64, 32 ring_size, 36 ring_head, 40 ring_tail,
 *   44 irq_status, 48 fence u64, 56 irq_mask, 60 error_code,
 *   64 error_index, 68 cmds_done, 72 scratch, 76 job ring_index (u32),
 *   80 job command (64-byte ring entry), 144 job done, 152 job row,
 *   160 job row_done (u64).
 */
#include "vgpu-int.h"

#include <endian.h>
#include <errno.h>
#include <string.h>

#include "cmd.h"
#include "common/log.h"
#include "common/le.h"

#define IRQ_ALL          (VGPU_IRQ_FENCE | VGPU_IRQ_ERROR)
#define FLAG_KICKED      (1u << 0)
#define FLAG_JOB_ACTIVE  (1u << 1)
#define FLAGS_ALL        (FLAG_KICKED | FLAG_JOB_ACTIVE)
#define OFF_JOB_CMD      80u
#define OFF_JOB_DONE     144u
#define OFF_JOB_ROW      152u
#define OFF_JOB_ROW_DONE 160u

_Static_assert(OFF_JOB_CMD + VGPU_CMD_SIZE == OFF_JOB_DONE, "state layout");
_Static_assert(OFF_JOB_ROW_DONE + 8 == VGPU_STATE_SIZE, "state size");

static void save_regs(const struct vgpu_regs *r, uint8_t *b)
{
    vg_put_le64(b + 24, r->ring_base);
    vg_put_le32(b + 32, r->ring_size);
    vg_put_le32(b + 36, r->ring_head);
    vg_put_le32(b + 40, r->ring_tail);
    vg_put_le32(b + 44, r->irq_status);
    vg_put_le64(b + 48, r->fence);
    vg_put_le32(b + 56, r->irq_mask);
    vg_put_le32(b + 60, r->error_code);
    vg_put_le32(b + 64, r->error_index);
    vg_put_le32(b + 68, r->cmds_done);
    vg_put_le32(b + 72, r->scratch);
}

static void save_job(const struct vgpu_job *job, uint8_t *b)
{
    vg_put_le32(b + 76, job->ring_index);
    vgpu_cmd_encode(&job->cmd, b + OFF_JOB_CMD);
    vg_put_le64(b + OFF_JOB_DONE, job->done);
    vg_put_le64(b + OFF_JOB_ROW, job->row);
    vg_put_le64(b + OFF_JOB_ROW_DONE, job->row_done);
}

int vgpu_state_save(const struct vgpu *gpu, void *buf, size_t size,
                    struct vg_error *err)
{
    uint8_t *b = buf;

    if (size < VGPU_STATE_SIZE) {
        return vg_error_set(err, ENOSPC,
                            "device state needs %u bytes, buffer has %zu",
                            VGPU_STATE_SIZE, size);
    }
    memset(b, 0, VGPU_STATE_SIZE);
    vg_put_le32(b, VGPU_STATE_MAGIC);
    vg_put_le16(b + 4, VGPU_STATE_VERSION);
    vg_put_le16(b + 6, VGPU_STATE_SIZE);
    vg_put_le64(b + 8, gpu->vram_size);
    vg_put_le32(b + 16, gpu->page_size);
    vg_put_le32(b + 20, (gpu->kicked ? FLAG_KICKED : 0) |
                            (gpu->job_active ? FLAG_JOB_ACTIVE : 0));
    save_regs(&gpu->regs, b);
    if (gpu->job_active) {
        save_job(&gpu->job, b);
    }
    return VGPU_STATE_SIZE;
}

/* The fixed fields: magic, version, size, device configuration, flags. */
static int check_frame(const struct vgpu *gpu, const uint8_t *b, size_t len,
                       struct vg_error *err)
{
    if (len != VGPU_STATE_SIZE) {
        return vg_error_set(err, EINVAL, "size %zu, expected %u", len,
                            VGPU_STATE_SIZE);
    }
    if (vg_get_le32(b) != VGPU_STATE_MAGIC) {
        return vg_error_set(err, EINVAL, "bad magic %#x (expected %#x)",
                            vg_get_le32(b), VGPU_STATE_MAGIC);
    }
    if (vg_get_le16(b + 4) != VGPU_STATE_VERSION || vg_get_le16(b + 6) != len) {
        return vg_error_set(err, EINVAL,
                            "version %u size %u unsupported (this device: "
                            "version %u size %u)",
                            vg_get_le16(b + 4), vg_get_le16(b + 6),
                            VGPU_STATE_VERSION, VGPU_STATE_SIZE);
    }
    if (vg_get_le64(b + 8) != gpu->vram_size ||
        vg_get_le32(b + 16) != gpu->page_size) {
        return vg_error_set(
            err, EINVAL,
            "state of a device with VRAM %llu bytes and page size %u, this "
            "device has %llu and %u",
            (unsigned long long)vg_get_le64(b + 8), vg_get_le32(b + 16),
            (unsigned long long)gpu->vram_size, gpu->page_size);
    }
    if (vg_get_le32(b + 20) & ~FLAGS_ALL) {
        return vg_error_set(err, EINVAL, "unknown flags %#x",
                            vg_get_le32(b + 20));
    }
    return 0;
}

static void load_regs(const uint8_t *b, struct vgpu_regs *r)
{
    r->ring_base = vg_get_le64(b + 24);
    r->ring_size = vg_get_le32(b + 32);
    r->ring_head = vg_get_le32(b + 36);
    r->ring_tail = vg_get_le32(b + 40);
    r->irq_status = vg_get_le32(b + 44);
    r->fence = vg_get_le64(b + 48);
    r->irq_mask = vg_get_le32(b + 56);
    r->error_code = vg_get_le32(b + 60);
    r->error_index = vg_get_le32(b + 64);
    r->cmds_done = vg_get_le32(b + 68);
    r->scratch = vg_get_le32(b + 72);
}

static int check_ring(const struct vgpu_regs *r, struct vg_error *err)
{
    uint32_t n = r->ring_size;

    if (r->ring_base % VGPU_RING_ALIGN) {
        return vg_error_set(err, EINVAL, "ring base %#llx not %u-aligned",
                            (unsigned long long)r->ring_base, VGPU_RING_ALIGN);
    }
    if ((n & (n - 1)) || n > VGPU_RING_MAX_ENTRIES) {
        return vg_error_set(err, EINVAL,
                            "ring size %u: not 0 or a power of two <= %u", n,
                            VGPU_RING_MAX_ENTRIES);
    }
    if ((n == 0 && (r->ring_head || r->ring_tail)) ||
        (n && (r->ring_head >= n || r->ring_tail >= n))) {
        return vg_error_set(err, EINVAL,
                            "ring head %u / tail %u outside ring size %u",
                            r->ring_head, r->ring_tail, n);
    }
    return 0;
}

static int check_irq_error(const struct vgpu_regs *r, struct vg_error *err)
{
    if ((r->irq_status | r->irq_mask) & ~IRQ_ALL) {
        return vg_error_set(err, EINVAL,
                            "interrupt status %#x / mask %#x has unknown bits",
                            r->irq_status, r->irq_mask);
    }
    if (r->error_code > VGPU_ERR_DEVICE) {
        return vg_error_set(err, EINVAL, "unknown error code %u",
                            r->error_code);
    }
    if (r->error_code == VGPU_ERR_NONE && r->error_index != 0) {
        return vg_error_set(err, EINVAL, "error index %u without an error",
                            r->error_index);
    }
    if (r->error_code != VGPU_ERR_NONE &&
        r->error_index != VGPU_ERROR_INDEX_NONE &&
        r->error_index >= r->ring_size) {
        return vg_error_set(err, EINVAL, "error index %u outside ring size %u",
                            r->error_index, r->ring_size);
    }
    return 0;
}

/* Units of work of @cmd: bytes, or indices for SCATTER_ADD; 0 for none. */
static uint64_t job_total(const struct vgpu_cmd *cmd)
{
    switch (cmd->opcode) {
    case VGPU_OP_FILL:
        return cmd->arg[1];
    case VGPU_OP_COPY:
    case VGPU_OP_DMA_TO_VRAM:
    case VGPU_OP_DMA_FROM_VRAM:
        return cmd->arg[2];
    case VGPU_OP_AXPY:
        return cmd->arg[2] * 4;
    case VGPU_OP_SCATTER_ADD:
        return cmd->arg[4];
    default:
        return 0;
    }
}

/* SCATTER_ADD's row cursor; other commands have none. */
static int check_rows(const struct vgpu_job *job, struct vg_error *err)
{
    const uint64_t *a = job->cmd.arg;
    bool scatter = job->cmd.opcode == VGPU_OP_SCATTER_ADD;

    if (!scatter && (job->row || job->row_done)) {
        return vg_error_set(err, EINVAL, "row cursor %llu/%llu on a %s",
                            (unsigned long long)job->row,
                            (unsigned long long)job->row_done,
                            vgpu_op_name(job->cmd.opcode));
    }
    if (scatter &&
        (job->row >= a[1] || job->row_done >= a[2] || job->row_done % 4)) {
        return vg_error_set(err, EINVAL,
                            "row cursor %llu/%llu outside %llu rows of %llu "
                            "bytes",
                            (unsigned long long)job->row,
                            (unsigned long long)job->row_done,
                            (unsigned long long)a[1], (unsigned long long)a[2]);
    }
    return 0;
}

static int check_job(const struct vgpu_job *job, uint64_t vram_size,
                     uint32_t ring_size, struct vg_error *err)
{
    enum vgpu_error_code code;
    uint64_t total = job_total(&job->cmd);
    bool align4 =
        job->cmd.opcode == VGPU_OP_FILL || job->cmd.opcode == VGPU_OP_AXPY;

    if (!vgpu_cmd_validate(&job->cmd, vram_size, &code)) {
        return vg_error_set(err, EINVAL, "command %s (opcode %u) invalid: %s",
                            vgpu_op_name(job->cmd.opcode), job->cmd.opcode,
                            vgpu_error_name(code));
    }
    if (job->ring_index >= ring_size) {
        return vg_error_set(err, EINVAL, "ring index %u outside ring size %u",
                            job->ring_index, ring_size);
    }
    if ((job->done && job->done >= total) || (align4 && job->done % 4)) {
        return vg_error_set(err, EINVAL, "cursor %llu outside %s of %llu units",
                            (unsigned long long)job->done,
                            vgpu_op_name(job->cmd.opcode),
                            (unsigned long long)total);
    }
    return check_rows(job, err);
}

/* Decode the in-flight job; a blob without one must have it all zero. */
static int load_job(const uint8_t *b, bool active, uint64_t vram_size,
                    uint32_t ring_size, struct vgpu_job *job,
                    struct vg_error *err)
{
    static const uint8_t zero[VGPU_STATE_SIZE - 76];

    if (!active) {
        memset(job, 0, sizeof(*job));
        return memcmp(b + 76, zero, sizeof(zero))
                   ? vg_error_set(err, EINVAL,
                                  "job fields set without a job in flight")
                   : 0;
    }
    job->ring_index = vg_get_le32(b + 76);
    vgpu_cmd_decode(b + OFF_JOB_CMD, &job->cmd);
    job->done = vg_get_le64(b + OFF_JOB_DONE);
    job->row = vg_get_le64(b + OFF_JOB_ROW);
    job->row_done = vg_get_le64(b + OFF_JOB_ROW_DONE);
    return check_job(job, vram_size, ring_size, err);
}

int vgpu_state_load(struct vgpu *gpu, const void *buf, size_t len,
                    struct vg_error *err)
{
    const uint8_t *b = buf;
    struct vgpu_regs regs;
    struct vgpu_job job;
    uint32_t flags;
    int ret;

    ret = check_frame(gpu, b, len, err);
    if (ret == 0) {
        load_regs(b, &regs);
        ret = check_ring(&regs, err);
    }
    if (ret == 0) {
        ret = check_irq_error(&regs, err);
    }
    flags = ret == 0 ? vg_get_le32(b + 20) : 0;
    if (ret == 0) {
        ret = load_job(b, flags & FLAG_JOB_ACTIVE, gpu->vram_size,
                       regs.ring_size, &job, err);
    }
    if (ret < 0) {
        vg_error_prefix(err, "device state");
        return ret;
    }
    gpu->regs = regs;
    gpu->job = job;
    gpu->job_active = flags & FLAG_JOB_ACTIVE;
    gpu->kicked = flags & FLAG_KICKED;
    vg_dbg("vgpu: state loaded: ring %u entries head %u tail %u, job %s",
           regs.ring_size, regs.ring_head, regs.ring_tail,
           gpu->job_active ? vgpu_op_name(job.cmd.opcode) : "none");
    return 0;
}
