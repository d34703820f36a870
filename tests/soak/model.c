#include "model.h"

#include <errno.h>
#include <string.h>

#include "qclient/qtest.h"
#include "vgpu/cmd.h"

#define STAGE_SIZE   (1u << 20)
#define OUT_SIZE     (1u << 20)
#define ROWS         256u
#define ROW_BYTES    256u
#define IDX_COUNT    512u
#define MAX_CMDS     8u
#define MAX_LEN      (512u << 10)
#define CPU_MAX      (64u << 10)
#define WAIT_IDLE_MS 30000
#define ONE_F        0x3f800000u /* 1.0f */
#define CPU_WRITES   4u          /* at most, per batch */

/* A step whose writes may not all have reached the device (model.h). */
struct model_step {
    bool commands; /* else CPU writes */
    /* CPU writes, in order */
    unsigned ncpu;
    uint64_t cpu_at[CPU_WRITES], cpu_len[CPU_WRITES];
    uint8_t *cpu_data[CPU_WRITES];
    /* commands and the data DMA_TO_VRAM reads */
    struct vgpu_cmd cmd[MAX_CMDS + 1];
    unsigned ncmd;
    uint8_t *stage;
};

static const char *const mix_names[MIX_COUNT] = {
    "idle", "fill", "copy", "dma", "compute", "cpu", "mixed",
};

const char *model_mix_name(enum model_mix mix)
{
    return mix < MIX_COUNT ? mix_names[mix] : "?";
}

/* The regions of the layout in model.h. */
static uint64_t gen_end(const struct model *m)
{
    return m->vram_size / 2;
}
static uint64_t axpy_x(const struct model *m)
{
    return m->vram_size / 2;
}
static uint64_t axpy_y(const struct model *m)
{
    return m->vram_size / 2 + m->vram_size / 16;
}
static uint64_t axpy_count(const struct model *m)
{
    return m->vram_size / 16 / 4;
}
static uint64_t table_off(const struct model *m)
{
    return m->vram_size / 8 * 5;
}
static uint64_t idx_off(const struct model *m)
{
    return table_off(m) + (128u << 10);
}

void model_init(struct model *m, uint64_t vram_size, uint64_t seed)
{
    memset(m, 0, sizeof(*m));
    m->vram_size = vram_size;
    m->vram = g_malloc0(vram_size);
    m->dma_out = g_malloc0(OUT_SIZE);
    m->rng = g_rand_new_with_seed_array((const guint32 *)&seed, 2);
}

static void step_free(struct model_step *st)
{
    if (!st) {
        return;
    }
    for (unsigned i = 0; i < st->ncpu; i++) {
        g_free(st->cpu_data[i]);
    }
    g_free(st->stage);
    g_free(st);
}

void model_destroy(struct model *m)
{
    step_free(m->unsettled);
    g_free(m->vram);
    g_free(m->dma_out);
    if (m->rng) {
        g_rand_free(m->rng);
    }
    memset(m, 0, sizeof(*m));
}

/* Apply @c to the model (the command is valid). */
static void apply(struct model *m, const struct vgpu_cmd *c,
                  const uint8_t *stage)
{
    const uint64_t *a = c->arg;
    uint8_t *v = m->vram;

    switch (c->opcode) {
    case VGPU_OP_FILL:
        for (uint64_t i = 0; i < a[1]; i += 4) {
            uint32_t p = (uint32_t)a[2];
            memcpy(v + a[0] + i, &p, 4);
        }
        break;
    case VGPU_OP_COPY:
        memmove(v + a[0], v + a[1], a[2]);
        break;
    case VGPU_OP_DMA_TO_VRAM:
        memcpy(v + a[0], stage + (a[1] - m->stage_gpa), a[2]);
        break;
    case VGPU_OP_DMA_FROM_VRAM:
        memcpy(m->dma_out + (a[0] - m->out_gpa), v + a[1], a[2]);
        break;
    case VGPU_OP_AXPY: {
        float alpha, x, y;
        uint32_t bits = (uint32_t)a[3];

        memcpy(&alpha, &bits, 4);
        for (uint64_t i = 0; i < a[2]; i++) {
            memcpy(&x, v + a[1] + 4 * i, 4);
            memcpy(&y, v + a[0] + 4 * i, 4);
            y = alpha * x + y;
            memcpy(v + a[0] + 4 * i, &y, 4);
        }
        break;
    }
    case VGPU_OP_SCATTER_ADD: {
        float val, f;
        uint32_t bits = (uint32_t)a[5], r;

        memcpy(&val, &bits, 4);
        for (uint64_t i = 0; i < a[4]; i++) {
            memcpy(&r, v + a[3] + 4 * i, 4);
            for (uint64_t j = 0; j < a[2]; j += 4) {
                uint8_t *p = v + a[0] + r * a[2] + j;
                memcpy(&f, p, 4);
                f += val;
                memcpy(p, &f, 4);
            }
        }
        break;
    }
    default: /* NOP, FENCE: no VRAM effect */
        break;
    }
}

/* A random 4-aligned range of @len bytes (4-aligned, <= @size) in
 * [@base, @base + @size). */
static uint64_t rand_at(struct model *m, uint64_t base, uint64_t size,
                        uint64_t len)
{
    return base + ((uint64_t)g_rand_int_range(m->rng, 0,
                                              (gint32)((size - len) / 4 + 1))
                   << 2);
}

static uint64_t rand_len(struct model *m, uint64_t max)
{
    return (uint64_t)g_rand_int_range(m->rng, 1, (gint32)(max / 4) + 1) << 2;
}

bool model_settle(struct model *m)
{
    struct model_step *st = m->unsettled;

    if (!st) {
        return false;
    }
    for (unsigned i = 0; i < st->ncpu; i++) {
        memcpy(m->vram + st->cpu_at[i], st->cpu_data[i], st->cpu_len[i]);
    }
    for (unsigned i = 0; i < st->ncmd; i++) {
        apply(m, &st->cmd[i], st->stage);
    }
    step_free(st);
    m->unsettled = NULL;
    return true;
}

/* Submit the @st->ncmd commands of @st plus a FENCE; @st becomes the
 * unsettled step. */
static int submit(struct model *m, struct vg_vgpu *gpu, struct model_step *st,
                  struct vg_error *err)
{
    enum vgpu_error_code code;

    st->commands = true;
    st->cmd[st->ncmd++] =
        vgpu_cmd_make(VGPU_OP_FENCE, ++m->fence, 0, 0, 0, 0, 0);
    for (unsigned i = 0; i < st->ncmd; i++) {
        if (!vgpu_cmd_validate(&st->cmd[i], m->vram_size, &code)) {
            unsigned op = st->cmd[i].opcode;

            m->fence--;
            step_free(st);
            return vg_error_set(err, EINVAL,
                                "workload generated an invalid command: op %u "
                                "(error %u)",
                                op, code);
        }
    }
    m->unsettled = st;
    m->batches++;
    m->commands += st->ncmd;
    return vg_vgpu_submit(gpu, st->cmd, st->ncmd, err);
}

/* A command of kind @op with random arguments (DMA_TO uses @stage). */
static int make_cmd(struct model *m, struct vg_vgpu *gpu, uint16_t op,
                    uint8_t *stage, bool *staged, struct vgpu_cmd *c,
                    struct vg_error *err)
{
    uint64_t len, dst, src;

    switch (op) {
    case VGPU_OP_FILL:
        len = rand_len(m, MAX_LEN);
        *c = vgpu_cmd_make(op, rand_at(m, 0, gen_end(m), len), len,
                           g_rand_int(m->rng), 0, 0, 0);
        return 0;
    case VGPU_OP_COPY:
        len = rand_len(m, MAX_LEN / 2);
        /* Source in one half of the region, destination in the other. */
        src = rand_at(m, 0, gen_end(m) / 2, len);
        dst = rand_at(m, gen_end(m) / 2, gen_end(m) / 2, len);
        if (g_rand_boolean(m->rng)) {
            uint64_t t = src;
            src = dst;
            dst = t;
        }
        *c = vgpu_cmd_make(op, dst, src, len, 0, 0, 0);
        return 0;
    case VGPU_OP_DMA_TO_VRAM:
        len = rand_len(m, STAGE_SIZE / 4);
        if (!*staged) {
            for (uint64_t i = 0; i < STAGE_SIZE; i += 4) {
                uint32_t r = g_rand_int(m->rng);
                memcpy(stage + i, &r, 4);
            }
            *staged = true;
            if (vg_qtest_memwrite(gpu->qt, m->stage_gpa, stage, STAGE_SIZE,
                                  err) < 0) {
                return -EIO;
            }
        }
        src = rand_at(m, 0, STAGE_SIZE, len);
        *c = vgpu_cmd_make(op, rand_at(m, 0, gen_end(m), len),
                           m->stage_gpa + src, len, 0, 0, 0);
        return 0;
    case VGPU_OP_DMA_FROM_VRAM:
        len = rand_len(m, OUT_SIZE / 4);
        dst = rand_at(m, 0, OUT_SIZE, len);
        *c = vgpu_cmd_make(op, m->out_gpa + dst, rand_at(m, 0, gen_end(m), len),
                           len, 0, 0, 0);
        return 0;
    case VGPU_OP_AXPY: {
        static const uint32_t alphas[] = {0x3f800000u, 0x40000000u,
                                          0x3f000000u}; /* 1, 2, 0.5 */
        uint64_t n =
            (uint64_t)g_rand_int_range(m->rng, 1, (gint32)axpy_count(m) + 1);
        uint64_t i0 = (uint64_t)g_rand_int_range(
            m->rng, 0, (gint32)(axpy_count(m) - n + 1));

        *c = vgpu_cmd_make(op, axpy_y(m) + 4 * i0, axpy_x(m) + 4 * i0, n,
                           alphas[g_rand_int_range(m->rng, 0, 3)], 0, 0);
        return 0;
    }
    case VGPU_OP_SCATTER_ADD:
        *c = vgpu_cmd_make(op, table_off(m), ROWS, ROW_BYTES, idx_off(m),
                           g_rand_int_range(m->rng, 1, IDX_COUNT + 1), ONE_F);
        return 0;
    default:
        return vg_error_set(err, EINVAL, "no generator for op %u", op);
    }
}

/* CPU writes: 1..CPU_WRITES random ranges of the general region through
 * BAR2; they become the unsettled step. */
int model_cpu_writes(struct model *m, struct vg_vgpu *gpu, enum model_mix mix,
                     struct vg_error *err)
{
    struct model_step *st;
    unsigned n;

    if (mix != MIX_CPU && mix != MIX_MIXED) {
        return 0;
    }
    model_settle(m);
    st = g_new0(struct model_step, 1);
    m->unsettled = st;
    n = g_rand_int_range(m->rng, 1, CPU_WRITES + 1);
    for (; st->ncpu < n; st->ncpu++) {
        uint64_t len = rand_len(m, CPU_MAX);
        uint64_t at = rand_at(m, 0, gen_end(m), len);
        uint8_t *data = g_malloc(len);

        for (uint64_t b = 0; b < len; b += 4) {
            uint32_t r = g_rand_int(m->rng);
            memcpy(data + b, &r, 4);
        }
        st->cpu_at[st->ncpu] = at;
        st->cpu_len[st->ncpu] = len;
        st->cpu_data[st->ncpu] = data;
        m->cpu_writes++;
        if (vg_qtest_memwrite(gpu->qt, gpu->vram_addr + at, data, len, err) <
            0) {
            st->ncpu++;
            vg_error_prefix(err, "CPU write to VRAM");
            return -EIO;
        }
    }
    return 0;
}

int model_submit(struct model *m, struct vg_vgpu *gpu, enum model_mix mix,
                 struct vg_error *err)
{
    static const uint16_t all[] = {
        VGPU_OP_FILL,          VGPU_OP_COPY, VGPU_OP_DMA_TO_VRAM,
        VGPU_OP_DMA_FROM_VRAM, VGPU_OP_AXPY, VGPU_OP_SCATTER_ADD,
    };
    struct model_step *st;
    unsigned want;
    bool staged = false;
    int rc = 0;

    if (mix == MIX_IDLE || mix == MIX_CPU) {
        return 0;
    }
    model_settle(m);
    st = g_new0(struct model_step, 1);
    st->stage = g_malloc(STAGE_SIZE);
    want = g_rand_int_range(m->rng, 1, MAX_CMDS + 1);
    for (; st->ncmd < want && rc == 0; st->ncmd++) {
        uint16_t op;

        switch (mix) {
        case MIX_FILL:
            op = VGPU_OP_FILL;
            break;
        case MIX_COPY:
            op = VGPU_OP_COPY;
            break;
        case MIX_DMA:
            op = g_rand_boolean(m->rng) ? VGPU_OP_DMA_TO_VRAM
                                        : VGPU_OP_DMA_FROM_VRAM;
            break;
        case MIX_COMPUTE:
            op = g_rand_boolean(m->rng) ? VGPU_OP_AXPY : VGPU_OP_SCATTER_ADD;
            break;
        default:
            op = all[g_rand_int_range(m->rng, 0, G_N_ELEMENTS(all))];
            break;
        }
        rc = make_cmd(m, gpu, op, st->stage, &staged, &st->cmd[st->ncmd], err);
    }
    if (rc < 0) {
        step_free(st);
        return rc;
    }
    return submit(m, gpu, st, err);
}

int model_setup(struct model *m, struct vg_vgpu *gpu, struct vg_galloc *ram,
                struct vg_error *err)
{
    g_autofree uint8_t *stage = g_malloc0(STAGE_SIZE);
    struct vgpu_cmd c[8];
    uint32_t status = 0;
    unsigned n = 0;
    int rc;

    rc = vg_galloc_alloc(ram, STAGE_SIZE, 4096, &m->stage_gpa, err);
    if (rc == 0) {
        rc = vg_galloc_alloc(ram, OUT_SIZE, 4096, &m->out_gpa, err);
    }
    if (rc == 0) {
        rc = vg_qtest_memset(gpu->qt, m->out_gpa, 0, OUT_SIZE, err);
    }
    for (unsigned i = 0; i < IDX_COUNT; i++) {
        uint32_t r = g_rand_int_range(m->rng, 0, ROWS);
        memcpy(stage + 4 * i, &r, 4);
    }
    if (rc == 0) {
        rc = vg_qtest_memwrite(gpu->qt, m->stage_gpa, stage, STAGE_SIZE, err);
    }
    if (rc < 0) {
        vg_error_prefix(err, "workload set-up");
        return rc;
    }
    /* The index array, x := 1.0, y := 0, table := 0, some general data. */
    c[n++] = vgpu_cmd_make(VGPU_OP_DMA_TO_VRAM, idx_off(m), m->stage_gpa,
                           IDX_COUNT * 4, 0, 0, 0);
    c[n++] = vgpu_cmd_make(VGPU_OP_FILL, axpy_x(m), axpy_count(m) * 4, ONE_F, 0,
                           0, 0);
    c[n++] = vgpu_cmd_make(VGPU_OP_FILL, 0, gen_end(m) / 2, g_rand_int(m->rng),
                           0, 0, 0);
    for (unsigned i = 0; i < n; i++) {
        apply(m, &c[i], stage);
    }
    c[n++] = vgpu_cmd_make(VGPU_OP_FENCE, ++m->fence, 0, 0, 0, 0, 0);
    rc = vg_vgpu_submit(gpu, c, n, err);
    if (rc == 0) {
        rc = vg_vgpu_wait_idle(gpu, WAIT_IDLE_MS, &status, err);
    }
    if (rc == 0 && (status & VGPU_STATUS_HALTED)) {
        rc = vg_error_set(err, EIO, "vGPU halted during the workload set-up");
    }
    return rc;
}

/* Compare @got with @want (@len bytes); describe the first difference. */
static int compare(const char *what, uint64_t base, const uint8_t *got,
                   const uint8_t *want, uint64_t len, struct vg_error *err)
{
    uint64_t first = len, last = 0, bytes = 0;

    if (memcmp(got, want, len) == 0) {
        return 0;
    }
    for (uint64_t i = 0; i < len; i++) {
        if (got[i] != want[i]) {
            first = MIN(first, i);
            last = i;
            bytes++;
        }
    }
    return vg_error_set(
        err, EILSEQ,
        "%s differs from the model: %" G_GUINT64_FORMAT
        " bytes in [0x%" G_GINT64_MODIFIER "x, 0x%" G_GINT64_MODIFIER
        "x]; at 0x%" G_GINT64_MODIFIER "x: 0x%02x, model 0x%02x",
        what, bytes, base + first, base + last, base + first, got[first],
        want[first]);
}

/* The value the unsettled CPU writes left at byte @b they cover: the last
 * one's. */
static uint8_t cpu_written(const struct model_step *st, uint64_t b)
{
    unsigned w = st->ncpu;

    while (w-- > 0 &&
           !(b >= st->cpu_at[w] && b < st->cpu_at[w] + st->cpu_len[w])) {
    }
    return st->cpu_data[w][b - st->cpu_at[w]];
}

/* Whether @v is the value at byte @b before the writes or one of the
 * unsettled CPU writes put there. */
static bool cpu_byte_ok(const struct model *m, const struct model_step *st,
                        uint64_t b, uint8_t v)
{
    if (v == m->vram[b]) {
        return true;
    }
    for (unsigned w = 0; w < st->ncpu; w++) {
        if (b >= st->cpu_at[w] && b < st->cpu_at[w] + st->cpu_len[w] &&
            v == st->cpu_data[w][b - st->cpu_at[w]]) {
            return true;
        }
    }
    return false;
}

/* The unsettled CPU writes raced the stop: every byte they covered must
 * hold its old value or one they wrote; the model takes those bytes. */
static void resolve_cpu_writes(struct model *m, const uint8_t *vram)
{
    struct model_step *st = m->unsettled;
    bool all = true;

    for (unsigned i = 0; i < st->ncpu; i++) {
        for (uint64_t b = st->cpu_at[i]; b < st->cpu_at[i] + st->cpu_len[i];
             b++) {
            all = all && vram[b] == cpu_written(st, b);
            if (cpu_byte_ok(m, st, b, vram[b])) {
                m->vram[b] = vram[b];
            }
        }
    }
    m->raced_steps++;
    m->raced_lost += !all;
    step_free(st);
    m->unsettled = NULL;
}

int model_verify(struct model *m, struct vg_vgpu *gpu, bool may_lack_unsettled,
                 struct vg_error *err)
{
    g_autofree uint8_t *vram = g_malloc(m->vram_size);
    g_autofree uint8_t *out = g_malloc(OUT_SIZE);
    uint32_t status = 0, fence = 0, code = 0;
    int rc;

    /* Commands that raced the stop reached the device before its state
     * went out (pause-before-switchover): they must have run. */
    if (!may_lack_unsettled || (m->unsettled && m->unsettled->commands)) {
        model_settle(m);
    }
    rc = vg_vgpu_wait_idle(gpu, WAIT_IDLE_MS, &status, err);
    if (rc == 0) {
        rc = vg_vgpu_rd(gpu, VGPU_REG_FENCE_LO, &fence, err);
    }
    if (rc == 0) {
        rc = vg_vgpu_rd(gpu, VGPU_REG_ERROR_CODE, &code, err);
    }
    if (rc == 0 && (status & VGPU_STATUS_HALTED)) {
        rc = vg_error_set(err, EILSEQ, "vGPU halted, ERROR_CODE %u", code);
    }
    if (rc == 0 && fence != m->fence) {
        rc = vg_error_set(err, EILSEQ, "FENCE is %u, the last batch set %u",
                          fence, m->fence);
    }
    if (rc == 0) {
        rc = vg_qtest_memread(gpu->qt, gpu->vram_addr, vram, m->vram_size, err);
    }
    if (rc == 0) {
        rc = vg_qtest_memread(gpu->qt, m->out_gpa, out, OUT_SIZE, err);
    }
    if (rc == 0 && m->unsettled) {
        resolve_cpu_writes(m, vram);
    }
    if (rc == 0) {
        rc = compare("VRAM", 0, vram, m->vram, m->vram_size, err);
        if (rc == 0) {
            rc = compare("DMA buffer in guest RAM", m->out_gpa, out, m->dma_out,
                         OUT_SIZE, err);
        }
        if (rc < 0) {
            /* Go on from what the device has. */
            memcpy(m->vram, vram, m->vram_size);
            memcpy(m->dma_out, out, OUT_SIZE);
        }
    }
    return rc;
}

uint64_t model_nonzero_bytes(const struct model *m, uint64_t page_size)
{
    uint64_t n = 0;

    for (uint64_t p = 0; p < m->vram_size; p += page_size) {
        for (uint64_t i = 0; i < page_size; i++) {
            if (m->vram[p + i]) {
                n += page_size;
                break;
            }
        }
    }
    return n;
}
