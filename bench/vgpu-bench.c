/*
 * vgpu-bench -- the vGPU command processor's own throughput, in-process,
 * with and without the migration module's dirty tracking.
 *
 * Three identical devices (vgpu_new() with a fake host: guest RAM in one
 * DMA mapping, an interrupt counter) run the same ring workload, one per
 * configuration:
 *   A  the device alone: vgpu_step() in a loop, no migration module;
 *   B  a migration in PRE_COPY: mig_new() as vgpu-server makes it, and
 *      RUNNING -> PRE_COPY at the start of every repetition (a saving
 *      session: the dirty-tracking write observer is installed and the
 *      hash baseline taken, outside the timed part), stepped with
 *      mig_gpu_step() as the server's loop does; PRE_COPY -> RUNNING at
 *      the end of the repetition;
 *   C  after a cancelled migration (RUNNING -> PRE_COPY -> RUNNING once
 *      at start-up): mig_gpu_step(), the tracking code present but idle.
 * A repetition runs them in short slices, A B C A B C ..., until each has
 * had --seconds, so all three see the same load on a busy machine.
 * Throughput is VRAM bytes the engines wrote (vgpu_stats.bytes_written),
 * per wall-clock second and per CPU second of the stepping thread.  The
 * report gives the median of each configuration and the ratios B/A and
 * C/A of this run; nothing is asserted about timings.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

#include "common/error.h"
#include "common/log.h"
#include "common/size.h"
#include "vfio-migration/mig.h"
#include "vgpu/cmd.h"
#include "vgpu/vgpu.h"

#define MIB ((uint64_t)1 << 20)

/* Guest RAM: one DMA mapping holding the ring and the DMA source. */
#define RAM_IOVA  0x100000ull
#define RAM_LEN   (8 * MIB)
#define RING_IOVA RAM_IOVA
#define RING_N    16u
#define DMA_IOVA  (RAM_IOVA + MIB)
#define DMA_LEN   (4 * MIB)

/* VRAM layout of the workload (offsets and lengths in bytes). */
#define IDX4K_OFF   0
#define IDX64K_OFF  (512u << 10)
#define AXPY_X_OFF  (1 * MIB)
#define AXPY_Y_OFF  (9 * MIB)
#define AXPY_LEN    (8 * MIB)
#define COPY_SRC    (17 * MIB)
#define COPY_DST    (33 * MIB)
#define COPY_LEN    (16 * MIB)
#define FILL_OFF    (49 * MIB)
#define FILL_LEN    (32 * MIB)
#define DMA_DST     (81 * MIB)
#define SA4K_TABLE  (85 * MIB)
#define SA4K_ROW    4096u
#define SA4K_ROWS   4096u /* a 16 MiB table */
#define SA4K_COUNT  4096u /* 16 MiB of row updates per command */
#define SA64K_TABLE (101 * MIB)
#define SA64K_ROW   (64u << 10)
#define SA64K_ROWS  512u /* a 32 MiB table */
#define SA64K_COUNT 128u /* 8 MiB of row updates per command */
#define LAYOUT_END  (133 * MIB)

#define F32_ONE  0x3f800000u
#define F32_HALF 0x3f000000u

enum config { CFG_A, CFG_B, CFG_C, CFG_COUNT };

static const char *const cfg_name[CFG_COUNT] = {"A", "B", "C"};
static const char *const cfg_desc[CFG_COUNT] = {
    "device alone, vgpu_step",
    "in PRE_COPY, tracking on",
    "after cancel, mig_gpu_step",
};

#define MAX_REPS 1000u

struct opts {
    uint64_t vram;
    uint64_t page;
    uint64_t budget;
    unsigned reps;
    double seconds;
    double slice_ms; /* 0: one block of --seconds per configuration */
    bool drain;
    enum mig_track_mode track;
    unsigned hash_threads;
    const char *json_path;
};

/* What one configuration did in one repetition (its slices summed). */
struct sample {
    double wall_s, cpu_s, sys_s;
    uint64_t bytes, cmds, steps, throttled, faults, slices;
};

/* One device with its fake host; @mig NULL for configuration A. */
struct dev {
    struct vgpu *gpu;
    struct mig *mig;
    uint8_t *ram; /* guest RAM of the one DMA mapping */
    uint32_t tail;
    uint64_t batches;
    uint64_t irqs[VGPU_MSIX_VECTORS];
};

struct bench {
    const struct opts *o;
    struct dev dev[CFG_COUNT];
    struct sample s[CFG_COUNT][MAX_REPS];
    double baseline_ms_max; /* longest RUNNING -> PRE_COPY (untimed) */
    uint64_t drained;       /* stream bytes read out (untimed) */
    uint64_t estimate_min;  /* B's stop-copy estimate after its slices */
};

/* ------------------------------------------------------------ fake host */

static void *fake_dma_ptr(void *opaque, uint64_t iova, uint64_t len, bool write)
{
    struct dev *d = opaque;

    if (iova < RAM_IOVA || iova - RAM_IOVA >= RAM_LEN ||
        len > RAM_LEN - (iova - RAM_IOVA)) {
        return NULL;
    }
    return d->ram + (iova - RAM_IOVA);
}

static void fake_raise_irq(void *opaque, unsigned vector)
{
    struct dev *d = opaque;

    if (vector < VGPU_MSIX_VECTORS) {
        d->irqs[vector]++;
    }
}

/* ---------------------------------------------------------------- time */

static double clock_s(clockid_t id)
{
    struct timespec ts;

    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double now_s(void)
{
    return clock_s(CLOCK_MONOTONIC);
}

/* Page faults and system time of this thread so far. */
static void thread_usage(uint64_t *faults, double *sys_s)
{
    struct rusage ru;

    getrusage(RUSAGE_THREAD, &ru);
    *faults = (uint64_t)(ru.ru_minflt + ru.ru_majflt);
    *sys_s = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

/* ------------------------------------------------------------- driver */

static void reg_wr(struct dev *d, uint64_t off, uint32_t v)
{
    vgpu_bar0_write(d->gpu, off, &v, 4);
}

static uint32_t reg_rd(struct dev *d, uint64_t off)
{
    uint32_t v = 0;

    vgpu_bar0_read(d->gpu, off, &v, 4);
    return v;
}

static void push(struct dev *d, struct vgpu_cmd c)
{
    vgpu_cmd_encode(&c, d->ram + (RING_IOVA - RAM_IOVA) +
                            (uint64_t)d->tail * VGPU_CMD_SIZE);
    d->tail = (d->tail + 1) % RING_N;
}

/* One batch: every engine the workloads use, then a FENCE. */
static void submit_batch(struct dev *d)
{
    d->batches++;
    reg_wr(d, VGPU_REG_IRQ_STATUS, VGPU_IRQ_FENCE); /* ack the last one */
    push(d,
         vgpu_cmd_make(VGPU_OP_FILL, FILL_OFF, FILL_LEN,
                       0x40000000u + (uint32_t)(d->batches & 0xff), 0, 0, 0));
    push(d, vgpu_cmd_make(VGPU_OP_COPY, COPY_DST, COPY_SRC, COPY_LEN, 0, 0, 0));
    push(d, vgpu_cmd_make(VGPU_OP_AXPY, AXPY_Y_OFF, AXPY_X_OFF, AXPY_LEN / 4,
                          F32_HALF, 0, 0));
    push(d, vgpu_cmd_make(VGPU_OP_DMA_TO_VRAM, DMA_DST, DMA_IOVA, DMA_LEN, 0, 0,
                          0));
    push(d, vgpu_cmd_make(VGPU_OP_SCATTER_ADD, SA4K_TABLE, SA4K_ROWS, SA4K_ROW,
                          IDX4K_OFF, SA4K_COUNT, F32_ONE));
    push(d, vgpu_cmd_make(VGPU_OP_SCATTER_ADD, SA64K_TABLE, SA64K_ROWS,
                          SA64K_ROW, IDX64K_OFF, SA64K_COUNT, F32_ONE));
    push(d, vgpu_cmd_make(VGPU_OP_FENCE, d->batches, 0, 0, 0, 0, 0));
    reg_wr(d, VGPU_REG_RING_TAIL, d->tail);
    reg_wr(d, VGPU_REG_DOORBELL, 1);
}

/* Random u32 row indices below @rows at VRAM @off (xorshift, fixed seed). */
static void put_indices(uint8_t *vram, uint64_t off, uint32_t n, uint32_t rows,
                        uint64_t *seed)
{
    for (uint32_t i = 0; i < n; i++) {
        uint32_t r;

        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        r = (uint32_t)(*seed % rows);
        memcpy(vram + off + 4ull * i, &r, 4);
    }
}

static void fill_f32(uint8_t *p, uint64_t len, uint32_t bits)
{
    for (uint64_t i = 0; i < len; i += 4) {
        memcpy(p + i, &bits, 4);
    }
}

/* A device with the workload's data in place; a migration module on it
 * (as vgpu-server makes it) if @with_mig. */
static int dev_setup(struct dev *d, const struct opts *o, bool with_mig,
                     struct vg_error *err)
{
    struct vgpu_host host = {d, fake_dma_ptr, fake_raise_irq};
    struct vgpu_config cfg = {o->vram, (uint32_t)o->page, "cpu", false};
    struct mig_config mc = {
        .precopy = MIG_PRECOPY_ITERATIVE,
        .track = o->track,
        .hash_threads = o->hash_threads,
    };
    uint64_t seed = 0x9e3779b97f4a7c15ull; /* the same data on every device */
    uint8_t *vram;
    int ret;

    d->ram = mmap(NULL, RAM_LEN, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (d->ram == MAP_FAILED) {
        d->ram = NULL;
        return vg_error_set(err, errno, "guest RAM: mmap: %s", strerror(errno));
    }
    for (uint64_t i = 0; i < DMA_LEN; i++) {
        d->ram[DMA_IOVA - RAM_IOVA + i] = (uint8_t)(i * 131 + 7);
    }
    ret = vgpu_new(&cfg, &host, &d->gpu, err);
    if (ret < 0) {
        vg_error_prefix(err, "vgpu_new");
        return ret;
    }
    vram = vgpu_vram(d->gpu);
    put_indices(vram, IDX4K_OFF, SA4K_COUNT, SA4K_ROWS, &seed);
    put_indices(vram, IDX64K_OFF, SA64K_COUNT, SA64K_ROWS, &seed);
    fill_f32(vram + AXPY_X_OFF, AXPY_LEN, F32_ONE);
    fill_f32(vram + COPY_SRC, COPY_LEN, 0x12345678u);
    reg_wr(d, VGPU_REG_RING_BASE_LO, (uint32_t)RING_IOVA);
    reg_wr(d, VGPU_REG_RING_BASE_HI, (uint32_t)(RING_IOVA >> 32));
    reg_wr(d, VGPU_REG_RING_SIZE, RING_N);
    reg_wr(d, VGPU_REG_IRQ_MASK, VGPU_IRQ_FENCE | VGPU_IRQ_ERROR);
    if (!with_mig) {
        return 0;
    }
    mc.gpu = d->gpu;
    vgpu_bar0_read(d->gpu, VGPU_REG_FEATURES, &mc.features, 4);
    ret = mig_new(&mc, &d->mig, err);
    if (ret < 0) {
        vg_error_prefix(err, "mig_new");
    }
    return ret;
}

static void dev_teardown(struct dev *d)
{
    mig_free(d->mig);
    vgpu_free(d->gpu);
    if (d->ram) {
        munmap(d->ram, RAM_LEN);
    }
}

static int check_halted(struct dev *d, struct vg_error *err)
{
    if (reg_rd(d, VGPU_REG_STATUS) & VGPU_STATUS_HALTED) {
        uint32_t code = reg_rd(d, VGPU_REG_ERROR_CODE);

        return vg_error_set(err, EIO,
                            "the vGPU halted: error %s (%u) at ring "
                            "entry %u",
                            vgpu_error_name(code), code,
                            reg_rd(d, VGPU_REG_ERROR_INDEX));
    }
    return 0;
}

/* Keep device @d busy for @secs seconds, stepping as @cfg says; add what
 * it did to @acc. */
static int timed_slice(struct dev *d, enum config cfg, uint64_t budget,
                       double secs, struct sample *acc, struct vg_error *err)
{
    uint64_t steps = 0, throttled = 0, f0, f1;
    struct vgpu_stats st0, st1;
    double t0, t1, c0, deadline, sys0, sys1;

    vgpu_get_stats(d->gpu, &st0);
    thread_usage(&f0, &sys0);
    c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
    t0 = now_s();
    deadline = t0 + secs;
    do {
        if (!vgpu_busy(d->gpu)) {
            submit_batch(d);
        }
        if (cfg == CFG_A) {
            vgpu_step(d->gpu, budget);
        } else {
            /* the server's loop: poll timeout, then a step */
            if (mig_gpu_wait_ms(d->mig) > 0) {
                throttled++;
            }
            mig_gpu_step(d->mig, budget);
        }
        steps++;
        t1 = now_s();
    } while (t1 < deadline);
    acc->wall_s += t1 - t0;
    acc->cpu_s += clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
    thread_usage(&f1, &sys1);
    acc->faults += f1 - f0;
    acc->sys_s += sys1 - sys0;
    vgpu_get_stats(d->gpu, &st1);
    acc->bytes += st1.bytes_written - st0.bytes_written;
    acc->cmds += st1.cmds_done - st0.cmds_done;
    acc->steps += steps;
    acc->throttled += throttled;
    acc->slices++;
    return check_halted(d, err);
}

/* Read the stream until no data is left now (round 0), outside timing. */
static int drain_stream(struct mig *m, uint64_t *bytes, struct vg_error *err)
{
    static uint8_t buf[1 << 20];
    uint32_t got;
    int ret;

    do {
        ret = mig_read(m, buf, sizeof(buf), &got, err);
        *bytes += got;
    } while (ret == 0 && got > 0);
    return ret;
}

static int set_state(struct mig *m, uint32_t target, struct vg_error *err)
{
    int ret = mig_set_state(m, target, err);

    if (ret < 0) {
        vg_error_prefix(err, "migration state %s", mig_state_name(target));
    }
    return ret;
}

/* RUNNING -> PRE_COPY on @m (the hash baseline), round 0 read out if
 * --drain; all untimed. */
static int precopy_open(struct bench *b, struct mig *m, struct vg_error *err)
{
    double t = now_s();
    int ret = set_state(m, MIG_STATE_PRE_COPY, err);

    t = (now_s() - t) * 1e3;
    if (t > b->baseline_ms_max) {
        b->baseline_ms_max = t;
    }
    if (ret == 0 && b->o->drain) {
        ret = drain_stream(m, &b->drained, err);
    }
    return ret;
}

static void log_sample(unsigned rep, enum config c, const struct sample *s)
{
    vg_info("rep %u %s: %.3f GB/s wall, %.3f GB/s cpu (%.3f s wall, "
            "%.3f s cpu, %.3f s sys, %" PRIu64 " faults, %" PRIu64
            " slices, %" PRIu64 " steps, %" PRIu64 " commands)",
            rep + 1, cfg_name[c], (double)s->bytes / s->wall_s / 1e9,
            (double)s->bytes / s->cpu_s / 1e9, s->wall_s, s->cpu_s, s->sys_s,
            s->faults, s->slices, s->steps, s->cmds);
}

/* One repetition: B's migration opened, then slices A B C A B C ... until
 * each configuration has run --seconds, then B's migration cancelled. */
static int run_rep(struct bench *b, unsigned r, struct vg_error *err)
{
    const struct opts *o = b->o;
    double slice = o->slice_ms > 0 ? o->slice_ms / 1e3 : o->seconds;
    int ret = precopy_open(b, b->dev[CFG_B].mig, err);
    bool more = ret == 0;

    while (more) {
        more = false;
        for (int c = 0; ret == 0 && c < CFG_COUNT; c++) {
            double left = o->seconds - b->s[c][r].wall_s;

            if (left > 0) {
                ret =
                    timed_slice(&b->dev[c], c, o->budget,
                                left < slice ? left : slice, &b->s[c][r], err);
                more = ret == 0;
            }
        }
    }
    if (ret == 0) {
        /* proof that B's observer ran: what it marked is in the estimate */
        uint64_t est = mig_stopcopy_size(b->dev[CFG_B].mig);

        if (r == 0 || est < b->estimate_min) {
            b->estimate_min = est;
        }
        ret = set_state(b->dev[CFG_B].mig, MIG_STATE_RUNNING, err);
    }
    for (int c = 0; ret == 0 && c < CFG_COUNT; c++) {
        log_sample(r, c, &b->s[c][r]);
    }
    return ret;
}

static int run_all(struct bench *b, struct vg_error *err)
{
    const struct opts *o = b->o;
    struct sample warm = {0};
    int ret = 0;

    for (int c = 0; ret == 0 && c < CFG_COUNT; c++) {
        ret = dev_setup(&b->dev[c], o, c != CFG_A, err);
        if (ret < 0) {
            vg_error_prefix(err, "device %s", cfg_name[c]);
        }
    }
    /* warm-up: two whole batches on every device fault in every buffer;
     * then C's migration, cancelled */
    for (int c = 0; ret == 0 && c < CFG_COUNT; c++) {
        struct vgpu_stats vs = {0};

        while (ret == 0 && vs.fences < 2) {
            ret = timed_slice(&b->dev[c], CFG_A, o->budget, 0.05, &warm, err);
            vgpu_get_stats(b->dev[c].gpu, &vs);
        }
    }
    if (ret == 0) {
        ret = precopy_open(b, b->dev[CFG_C].mig, err);
    }
    if (ret == 0) {
        ret = set_state(b->dev[CFG_C].mig, MIG_STATE_RUNNING, err);
    }
    for (unsigned r = 0; ret == 0 && r < o->reps; r++) {
        ret = run_rep(b, r, err);
    }
    return ret;
}

/* ------------------------------------------------------------- report */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

/* Median, min and max of @n values (sorted in place). */
struct summary {
    double med, min, max;
};

static struct summary summarize(double *v, unsigned n)
{
    struct summary s;

    qsort(v, n, sizeof(*v), cmp_double);
    s.min = v[0];
    s.max = v[n - 1];
    s.med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    return s;
}

enum metric { M_WALL, M_CPU, M_CMDS, M_COUNT };

static double metric(const struct sample *s, enum metric m)
{
    switch (m) {
    case M_WALL:
        return (double)s->bytes / s->wall_s / 1e9;
    case M_CPU:
        return s->cpu_s > 0 ? (double)s->bytes / s->cpu_s / 1e9 : 0;
    default:
        return (double)s->cmds / s->wall_s;
    }
}

static struct summary cfg_summary(const struct bench *b, enum config c,
                                  enum metric m)
{
    double v[MAX_REPS];

    for (unsigned r = 0; r < b->o->reps; r++) {
        v[r] = metric(&b->s[c][r], m);
    }
    return summarize(v, b->o->reps);
}

/* Per-repetition ratio @c / A (paired: measured back to back). */
static struct summary paired_ratio(const struct bench *b, enum config c,
                                   enum metric m)
{
    double v[MAX_REPS];

    for (unsigned r = 0; r < b->o->reps; r++) {
        v[r] = metric(&b->s[c][r], m) / metric(&b->s[CFG_A][r], m);
    }
    return summarize(v, b->o->reps);
}

static void report(const struct bench *b)
{
    const struct opts *o = b->o;
    struct summary sum[CFG_COUNT][M_COUNT], pr[CFG_COUNT][2];
    uint64_t throttled = 0, cmds = 0, failed = 0, fences = 0, irqs = 0;
    struct mig_stats ms;
    char json[4096], slice[32];
    int n;
    FILE *f;

    mig_get_stats(b->dev[CFG_B].mig, &ms);
    for (int c = 0; c < CFG_COUNT; c++) {
        struct vgpu_stats vs;

        vgpu_get_stats(b->dev[c].gpu, &vs);
        cmds += vs.cmds_done;
        failed += vs.cmds_failed;
        fences += vs.fences;
        irqs += b->dev[c].irqs[VGPU_MSIX_VEC_FENCE];
        for (int m = 0; m < M_COUNT; m++) {
            sum[c][m] = cfg_summary(b, c, m);
        }
        pr[c][0] = paired_ratio(b, c, M_WALL);
        pr[c][1] = paired_ratio(b, c, M_CPU);
        for (unsigned r = 0; r < o->reps; r++) {
            throttled += b->s[c][r].throttled;
        }
    }
    if (o->slice_ms > 0) {
        snprintf(slice, sizeof(slice), "%g ms", o->slice_ms);
    } else {
        snprintf(slice, sizeof(slice), "%g s", o->seconds);
    }
    printf("vgpu-bench: VRAM %" PRIu64 " MiB, page %" PRIu64
           " KiB, step budget %" PRIu64 " KiB, dirty-track %s, "
           "%u repetitions of %g s per configuration in slices of %s "
           "(A B C A B C ...)\n",
           o->vram >> 20, o->page >> 10, o->budget >> 10,
           mig_track_mode_name(o->track), o->reps, o->seconds, slice);
    printf("throughput: VRAM bytes written by the engines, GB/s = 1e9 B/s; "
           "wall = per elapsed second, cpu = per CPU second of the stepping "
           "thread; median [min, max] over the repetitions\n\n");
    printf("%-3s %-27s %9s %17s %9s %17s %9s\n", "cfg", "", "wall GB/s",
           "[min, max]", "cpu GB/s", "[min, max]", "cmds/s");
    for (int c = 0; c < CFG_COUNT; c++) {
        printf("%-3s %-27s %9.3f [%6.3f, %6.3f] %9.3f [%6.3f, %6.3f] %9.1f\n",
               cfg_name[c], cfg_desc[c], sum[c][M_WALL].med, sum[c][M_WALL].min,
               sum[c][M_WALL].max, sum[c][M_CPU].med, sum[c][M_CPU].min,
               sum[c][M_CPU].max, sum[c][M_CMDS].med);
    }
    printf("\n%-8s %14s %14s %24s %24s\n", "ratio", "of wall medians",
           "of cpu medians", "paired wall [min, max]", "paired cpu [min, max]");
    for (int c = CFG_B; c < CFG_COUNT; c++) {
        printf("%s/A      %14.4f %14.4f %8.4f [%6.4f, %6.4f] %8.4f [%6.4f, "
               "%6.4f]\n",
               cfg_name[c], sum[c][M_WALL].med / sum[CFG_A][M_WALL].med,
               sum[c][M_CPU].med / sum[CFG_A][M_CPU].med, pr[c][0].med,
               pr[c][0].min, pr[c][0].max, pr[c][1].med, pr[c][1].min,
               pr[c][1].max);
    }
    printf("\nB: auto-converge throttle %u%%, %" PRIu64
           " throttled steps; RUNNING -> PRE_COPY (hash baseline, untimed) "
           "took up to %.0f ms; %" PRIu64
           " stream bytes read out before the timed runs (untimed); "
           "MIG_DATA_SIZE after the timed runs at least %" PRIu64
           " bytes (after --drain: the pages the write observer marked)\n"
           "devices: %" PRIu64 " commands, %" PRIu64 " failed, %" PRIu64
           " fences, %" PRIu64 " fence interrupts\n\n",
           ms.throttle_percent, throttled, b->baseline_ms_max, b->drained,
           b->estimate_min, cmds, failed, fences, irqs);

    n = snprintf(
        json, sizeof(json),
        "{\"bench\":\"vgpu\",\"unit\":\"GB/s of VRAM bytes written by the "
        "engines\",\"vram_bytes\":%" PRIu64 ",\"page_size\":%" PRIu64
        ",\"budget\":%" PRIu64 ",\"dirty_track\":\"%s\",\"reps\":%u,"
        "\"seconds\":%g,\"slice_ms\":%g,\"drain\":%s",
        o->vram, o->page, o->budget, mig_track_mode_name(o->track), o->reps,
        o->seconds, o->slice_ms > 0 ? o->slice_ms : o->seconds * 1e3,
        o->drain ? "true" : "false");
    for (int c = 0; c < CFG_COUNT; c++) {
        n += snprintf(json + n, sizeof(json) - n,
                      ",\"%s\":{\"wall_gbps\":%.4f,\"wall_gbps_min\":%.4f,"
                      "\"wall_gbps_max\":%.4f,\"cpu_gbps\":%.4f,"
                      "\"cpu_gbps_min\":%.4f,\"cpu_gbps_max\":%.4f,"
                      "\"cmds_per_s\":%.1f}",
                      cfg_name[c], sum[c][M_WALL].med, sum[c][M_WALL].min,
                      sum[c][M_WALL].max, sum[c][M_CPU].med, sum[c][M_CPU].min,
                      sum[c][M_CPU].max, sum[c][M_CMDS].med);
    }
    n += snprintf(
        json + n, sizeof(json) - n,
        ",\"ratio_B_A\":%.4f,\"ratio_C_A\":%.4f,"
        "\"ratio_B_A_cpu\":%.4f,\"ratio_C_A_cpu\":%.4f,"
        "\"paired_B_A\":%.4f,\"paired_C_A\":%.4f,"
        "\"paired_B_A_cpu\":%.4f,\"paired_C_A_cpu\":%.4f,"
        "\"throttle_percent\":%u,\"throttled_steps\":%" PRIu64
        ",\"stopcopy_estimate_min\":%" PRIu64 ",\"cmds_failed\":%" PRIu64 "}",
        sum[CFG_B][M_WALL].med / sum[CFG_A][M_WALL].med,
        sum[CFG_C][M_WALL].med / sum[CFG_A][M_WALL].med,
        sum[CFG_B][M_CPU].med / sum[CFG_A][M_CPU].med,
        sum[CFG_C][M_CPU].med / sum[CFG_A][M_CPU].med, pr[CFG_B][0].med,
        pr[CFG_C][0].med, pr[CFG_B][1].med, pr[CFG_C][1].med,
        ms.throttle_percent, throttled, b->estimate_min, failed);
    printf("%s\n", json);
    if (o->json_path) {
        f = fopen(o->json_path, "w");
        if (!f || fprintf(f, "%s\n", json) < 0 || fclose(f) != 0) {
            vg_warn("--json %s: %s", o->json_path, strerror(errno));
        }
    }
}

/* ------------------------------------------------------------ options */

static void usage(FILE *f)
{
    fprintf(
        f,
        "Usage: vgpu-bench [OPTION]...\n"
        "\n"
        "Measure the vGPU command processor's throughput in this process,\n"
        "with and without the migration module's dirty tracking, and print\n"
        "a table and one JSON line.  Nothing is asserted about the figures.\n"
        "\n"
        "WORKLOAD\n"
        "A ring of commands that covers every engine the benchmark\n"
        "workloads use, resubmitted whenever the device is idle: FILL of\n"
        "32 MiB, COPY of 16 MiB, AXPY over 8 MiB of float32, DMA_TO_VRAM of\n"
        "4 MiB from guest RAM, SCATTER_ADD of 4096 random 4 KiB rows of a\n"
        "16 MiB table (the inference workload's shape), SCATTER_ADD of 128\n"
        "random 64 KiB rows of a 32 MiB table (the sparse workload's\n"
        "shape), and a FENCE whose interrupt is counted.  The device is the\n"
        "CPU backend; guest RAM is faked as one DMA mapping.\n"
        "\n"
        "CONFIGURATIONS\n"
        "Three identical devices, one per configuration:\n"
        "  A  the device alone: vgpu_step() in a loop;\n"
        "  B  a migration in PRE_COPY: a migration module on the device\n"
        "     (mig_new() as vgpu-server makes it) and RUNNING -> PRE_COPY at\n"
        "     the start of every repetition, which opens a saving session:\n"
        "     the dirty-tracking write observer is installed and the hash\n"
        "     baseline taken, outside the timed part (with --drain round 0\n"
        "     is then read out, also untimed); stepped with mig_gpu_step()\n"
        "     as the server's loop does (mig_gpu_wait_ms(), then the step);\n"
        "     PRE_COPY -> RUNNING at the end of the repetition;\n"
        "  C  after a cancelled migration (RUNNING -> PRE_COPY -> RUNNING\n"
        "     once at start-up): mig_gpu_step(), the tracking code present\n"
        "     but idle, the server's normal path.\n"
        "Each repetition runs them in slices of --slice ms, A B C A B C ...,\n"
        "until each has had --seconds, so that the three see the same load\n"
        "on a busy machine.  No PRECOPY_INFO is asked during B, so no new\n"
        "round starts and auto-converge cannot raise the throttle; the\n"
        "report says whether any step was throttled all the same.\n"
        "\n"
        "OUTPUT\n"
        "Throughput is VRAM bytes written by the engines (the device's\n"
        "bytes_written statistic), GB/s = 1e9 bytes/s, both per wall-clock\n"
        "second and per CPU second of the stepping thread (the latter is\n"
        "less disturbed by other processes on a busy machine); commands/s\n"
        "are given as well.  The table shows the median, min and max over\n"
        "the repetitions of each configuration; then the ratios B/A and C/A\n"
        "of the medians, and the median, min and max of the per-repetition\n"
        "ratios (each B and C against the A of the same repetition).\n"
        "After B's runs of each repetition its MIG_DATA_SIZE is asked\n"
        "(untimed); after --drain it counts the pages the write observer\n"
        "marked, which shows the tracking was on; the smallest is reported.\n"
        "The last line is the same as one JSON object.\n"
        "\n"
        "Options:\n"
        "  -v, --vram SIZE        VRAM size of each device, a multiple of\n"
        "                         the page size of at least 134M (default\n"
        "                         256M); the workload uses the first\n"
        "                         133 MiB, the tracker covers all of it\n"
        "  -p, --page-size SIZE   dirty-tracking page size, a power of two\n"
        "                         from 4K to 2M (default 64K)\n"
        "  -r, --reps N           repetitions, 1 to 1000 (default 5)\n"
        "  -s, --seconds S        seconds of each configuration per\n"
        "                         repetition, 0.01 to 600 (default 1)\n"
        "      --slice MS         milliseconds per slice, 0.1 to 600000\n"
        "                         (default 20); 0: one slice of --seconds\n"
        "                         per configuration\n"
        "  -b, --budget SIZE      bytes of engine work per step, as\n"
        "                         vgpu-server's loop (default 1M)\n"
        "      --dirty-track=MODE hybrid (default), hash or none: the\n"
        "                         tracking mode of the migrations\n"
        "      --hash-threads N   threads of the hash pool (default 2)\n"
        "      --drain            read the stream's round 0 out after\n"
        "                         entering PRE_COPY, before the timed runs,\n"
        "                         so the observer marks pages as in a later\n"
        "                         round (default)\n"
        "      --no-drain         leave round 0 unread during B\n"
        "      --json FILE        also write the JSON line to FILE\n"
        "  -l, --log-level LEVEL  error, warn (default), info (a line per\n"
        "                         configuration and repetition), debug,\n"
        "                         trace\n"
        "  -h, --help             show this help and exit\n"
        "\n"
        "SIZE is a number with an optional K, M, G or T suffix (powers of\n"
        "1024).  Exit status: 0 when every run completed without a device\n"
        "error, 1 on errors, 2 on usage errors.\n");
}

static int parse_args(int argc, char **argv, struct opts *o)
{
    enum {
        OPT_TRACK = 256,
        OPT_THREADS,
        OPT_DRAIN,
        OPT_NO_DRAIN,
        OPT_JSON,
        OPT_SLICE,
    };
    static const struct option longopts[] = {
        {"vram", required_argument, NULL, 'v'},
        {"page-size", required_argument, NULL, 'p'},
        {"reps", required_argument, NULL, 'r'},
        {"seconds", required_argument, NULL, 's'},
        {"budget", required_argument, NULL, 'b'},
        {"dirty-track", required_argument, NULL, OPT_TRACK},
        {"hash-threads", required_argument, NULL, OPT_THREADS},
        {"drain", no_argument, NULL, OPT_DRAIN},
        {"no-drain", no_argument, NULL, OPT_NO_DRAIN},
        {"json", required_argument, NULL, OPT_JSON},
        {"slice", required_argument, NULL, OPT_SLICE},
        {"log-level", required_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct vg_error err = {0};
    enum vg_log_level level;
    uint64_t v;
    char *end;
    int c, rc = 0;

    while (!rc && (c = getopt_long(argc, argv, "v:p:r:s:b:l:h", longopts,
                                   NULL)) != -1) {
        switch (c) {
        case 'v':
            rc = vg_parse_size(optarg, LAYOUT_END + MIB, 1ull << 40, &o->vram,
                               &err);
            break;
        case 'p':
            rc = vg_parse_size(optarg, 4096, 2 * MIB, &o->page, &err);
            if (!rc && (o->page & (o->page - 1))) {
                rc = vg_error_set(&err, EINVAL, "%s: not a power of two",
                                  optarg);
            }
            break;
        case 'r':
            rc = vg_parse_size(optarg, 1, MAX_REPS, &v, &err);
            o->reps = (unsigned)v;
            break;
        case 's':
            errno = 0;
            o->seconds = strtod(optarg, &end);
            if (errno || end == optarg || *end || !(o->seconds >= 0.01) ||
                o->seconds > 600) {
                rc = vg_error_set(&err, EINVAL,
                                  "--seconds %s: not a number from 0.01 "
                                  "to 600",
                                  optarg);
            }
            break;
        case OPT_SLICE:
            errno = 0;
            o->slice_ms = strtod(optarg, &end);
            if (errno || end == optarg || *end ||
                !(o->slice_ms == 0 ||
                  (o->slice_ms >= 0.1 && o->slice_ms <= 600000))) {
                rc = vg_error_set(&err, EINVAL,
                                  "--slice %s: not 0 or a number from 0.1 "
                                  "to 600000",
                                  optarg);
            }
            break;
        case 'b':
            rc = vg_parse_size(optarg, 64, 1ull << 32, &o->budget, &err);
            break;
        case OPT_TRACK:
            if (mig_track_mode_parse(optarg, &o->track) < 0) {
                rc = vg_error_set(&err, EINVAL,
                                  "--dirty-track %s: not hybrid, hash or none",
                                  optarg);
            }
            break;
        case OPT_THREADS:
            rc = vg_parse_size(optarg, 1, 64, &v, &err);
            o->hash_threads = (unsigned)v;
            break;
        case OPT_DRAIN:
            o->drain = true;
            break;
        case OPT_NO_DRAIN:
            o->drain = false;
            break;
        case OPT_JSON:
            o->json_path = optarg;
            break;
        case 'l':
            if (!vg_log_parse_level(optarg, &level)) {
                rc = vg_error_set(&err, EINVAL, "--log-level %s: unknown",
                                  optarg);
            } else {
                vg_log_set_level(level);
            }
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            fprintf(stderr, "Try 'vgpu-bench --help'.\n");
            return 2;
        }
    }
    if (!rc && optind < argc) {
        rc = vg_error_set(&err, EINVAL, "unexpected argument '%s'",
                          argv[optind]);
    }
    if (!rc && o->vram % o->page) {
        rc = vg_error_set(&err, EINVAL,
                          "--vram %" PRIu64
                          ": not a multiple of the page size %" PRIu64,
                          o->vram, o->page);
    }
    if (rc) {
        fprintf(stderr, "vgpu-bench: %s\nTry 'vgpu-bench --help'.\n", err.msg);
        return 2;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o = {
        .vram = 256 * MIB,
        .page = 64 << 10,
        .budget = MIB,
        .reps = 5,
        .seconds = 1.0,
        .slice_ms = 20,
        .drain = true,
        .track = MIG_TRACK_HYBRID,
        .hash_threads = 2,
    };
    struct vg_error err = {0};
    struct bench *b;
    int rc;

    vg_log_set_prog("vgpu-bench");
    vg_log_set_level(VG_LOG_WARN);
    rc = parse_args(argc, argv, &o);
    if (rc) {
        return rc;
    }
    b = calloc(1, sizeof(*b));
    if (!b) {
        fprintf(stderr, "vgpu-bench: out of memory\n");
        return 1;
    }
    b->o = &o;
    rc = run_all(b, &err);
    if (rc == 0) {
        report(b);
    } else {
        vg_err("%s", err.msg);
    }
    for (int c = 0; c < CFG_COUNT; c++) {
        dev_teardown(&b->dev[c]);
    }
    free(b);
    return rc ? 1 : 0;
}
