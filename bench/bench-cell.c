/*
 * bench-cell.c -- one cell of vgmig-bench: its two sides' servers and
 * QEMUs, its workload, the migration and the checks of what arrived.
 */
#include <errno.h>
#include <glib.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"
#include "bench-mig.h"
#include "reg-probe.h"
#include "qclient/cpu-writer.h"
#include "qclient/harness.h"
#include "qclient/io.h"
#include "qclient/migrate.h"
#include "qclient/qtest.h"
#include "qclient/vfio-trace.h"
#include "qclient/vgpu-drv.h"
#include "vgpu/cmd.h"
#include "vgmig-bench.h"

const char *const wl_names[WL_COUNT] = {"idle",   "inference",  "training",
                                        "sparse", "cpu-writes", "cpu-heavy"};

const struct mode modes[MODE_COUNT] = {
    {"stop-copy", "none", "none", false},
    {"precopy-notrack", "iterative", "none", false},
    {"gmig", "one-shot", "hash", false},
    {"ours", "iterative", "hybrid", false},
    {"postcopy", "iterative", "hybrid", true},
};

/* One side of a cell: a server per vGPU, the QEMU, the servers'
 * statistics files. */
struct side {
    struct vg_server *server[MAX_VGPUS];
    struct vg_qemu *qemu;
    char *stats[MAX_VGPUS];
};

/* One vGPU of the running cell's VM and its workload's cursors. */
struct dev {
    struct vg_vgpu gpu;
    uint32_t step; /* training steps, sparse index cursor */
    uint64_t done; /* sparse pages issued */
};

/* State of one running cell. */
struct run {
    const struct bench_opts *o;
    struct cell *c;
    char *dir;
    struct side src, dst;
    struct vg_galloc ram;
    struct dev dev[MAX_VGPUS];
    struct dev *d; /* the one the workload functions act on */
    GRand *rng;
    gint64 t0_us;             /* migrate issued */
    int64_t force_ms;         /* force switchover after this long */
    gint64 pass_us;           /* when pre-copy had moved one VRAM's worth */
    struct vg_cpu_writer *cw; /* cpu-writes workloads */
    uint8_t *image;           /* their VRAM before the first write */
    struct bench_rate rate;   /* of the bytes moved while active */
    struct reg_probe probe;   /* register reads while active */
    struct reg_probe fence;   /* FENCE round trips while active */
    uint32_t fence_value;     /* the last one submitted */
};

/* ---------------------------------------------------------- processes */

/* Resident shared memory of process @pid in bytes (RssShmem), -1 if it
 * cannot be read. */
static int64_t rss_shmem(pid_t pid)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/status", (int)pid);
    g_autofree char *text = NULL;
    const char *at;

    if (!g_file_get_contents(path, &text, NULL, NULL) ||
        !(at = strstr(text, "\nRssShmem:"))) {
        return -1;
    }
    return g_ascii_strtoll(at + strlen("\nRssShmem:"), NULL, 10) * 1024;
}

/* The size of process @pid's largest mapping of the memfd named @memfd
 * ("vgpu-vram", "vgpu-mig-data"), from /proc/PID/maps (which, unlike
 * smaps, walks no page table); 0 where it maps none, -1 if maps cannot
 * be read. */
static int64_t memfd_mapped(pid_t pid, const char *memfd)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/maps", (int)pid);
    g_autofree char *name = g_strdup_printf(" /memfd:%s ", memfd);
    g_autofree char *text = NULL;
    g_auto(GStrv) lines = NULL;
    int64_t size = 0;

    if (!g_file_get_contents(path, &text, NULL, NULL)) {
        return -1;
    }
    lines = g_strsplit(text, "\n", -1);
    for (char **l = lines; *l; l++) {
        uint64_t start, end;

        if (strstr(*l, name) &&
            sscanf(*l, "%" SCNx64 "-%" SCNx64, &start, &end) == 2 &&
            end > start && (int64_t)(end - start) > size) {
            size = (int64_t)(end - start);
        }
    }
    return size;
}

/* With --prealloc, a CPU-backend server's VRAM is all resident before
 * the cell goes on, as a GPU's is from power-on and as a destination
 * started ahead of its migration has it, and with @data_area, once QEMU
 * negotiated it, its migration data area too, whatever its size
 * (--data-slots; none where QEMU did not negotiate data_shm); else the
 * preallocation threads would compete with the migration for the CPUs.
 * The sizes come from the server's mappings (memfd_mapped()), the
 * resident bytes from RssShmem, both cheap to read every 10 ms.  (The
 * CUDA backend's VRAM is device memory: nothing to wait for.)
 * @backend: the server's, NULL for $VGMIG_SERVER_BACKEND's. */
static int wait_preallocated(struct run *r, struct vg_server *srv,
                             const char *backend, bool data_area,
                             struct vg_error *err)
{
    const char *what = data_area ? "VRAM and migration data area" : "VRAM";
    pid_t pid = srv->proc.pid;
    int64_t vram, area = 0, need, rss, deadline;

    backend = backend ? backend : g_getenv("VGMIG_SERVER_BACKEND");
    if (!r->o->prealloc || (backend && g_str_has_prefix(backend, "cuda"))) {
        return 0;
    }
    vram = memfd_mapped(pid, "vgpu-vram");
    if (data_area) {
        area = memfd_mapped(pid, "vgpu-mig-data");
    }
    if (vram <= 0 || area < 0) {
        return vg_error_set(err, EIO, "%s: %s", srv->proc.name,
                            vram < 0 || area < 0 ? "cannot read its maps"
                                                 : "maps no VRAM");
    }
    need = vram + area;
    deadline =
        vg_now_ms() + PREALLOC_WAIT_MS + (need >> 20) * PREALLOC_MS_PER_MIB;
    while ((rss = rss_shmem(pid)) < need) {
        if (rss < 0 || vg_now_ms() > deadline) {
            return vg_error_set(err, ETIMEDOUT,
                                "%s: %" PRId64 " of %" PRId64
                                " bytes of its %s preallocated",
                                srv->proc.name, rss, need, what);
        }
        g_usleep(10000);
    }
    return 0;
}

/* vGPU @i's server's --backend on the destination (@incoming) or the
 * source; NULL for $VGMIG_SERVER_BACKEND's, else the server's default. */
static const char *vgpu_backend(const struct bench_opts *o, bool incoming,
                                unsigned i)
{
    const char *dst = backend_of(&o->dst_backends, i);

    return incoming && dst ? dst : backend_of(&o->src_backends, i);
}

/* A cell's QEMU's own arguments: threads named (mig/src/main,
 * mig/src/send_N, ...) for whoever samples them; the downtime's
 * checkpoints to the microsecond on both sides (trace_downtime());
 * --place-data on both sides. */
static const char *const *qemu_extra_args(const struct bench_opts *o)
{
    static const char *const timed[] = {"-name",  "debug-threads=on",
                                        "-msg",   "timestamp=on",
                                        "-trace", "vmstate_downtime_checkpoint",
                                        NULL};
    static const char *const timed_placed[] = {
        "-name",   "debug-threads=on",
        "-msg",    "timestamp=on",
        "-trace",  "vmstate_downtime_checkpoint",
        "-global", "vfio-user-pci.x-migration-place-data=on",
        NULL};

    return o->place_data ? timed_placed : timed;
}

static int start_side(struct run *r, struct side *s, const char *name,
                      bool incoming, struct vg_error *err)
{
    const struct mode *md = &modes[r->c->mode];
    g_autofree char *pa = g_strdup_printf("--precopy=%s", md->precopy);
    g_autofree char *ta = g_strdup_printf("--dirty-track=%s", md->track);
    g_autofree char *vram = g_strdup_printf("%" PRIu64 "M", r->c->vram >> 20);
    g_autofree char *qname = g_strdup_printf("qemu-%s", name);
    g_autofree char *page = g_strdup_printf("%" PRIu64, r->o->track_page);
    const char *extra[7] = {pa, ta};
    unsigned nextra = 2;
    struct vg_server_opts so = {.dir = r->dir,
                                .vram = vram,
                                .page_size = page,
                                .log_level = r->o->log_level_name,
                                .name = name,
                                .extra_args = extra};
    const char *more[MAX_VGPUS] = {NULL}; /* vgpu1.., NULL-terminated */

    if (r->o->prealloc) {
        extra[nextra++] = "--prealloc";
    }
    if (r->o->no_data_plane) {
        extra[nextra++] = "--no-data-plane";
    }
    if (r->o->no_device_thread) {
        extra[nextra++] = "--no-device-thread";
    }
    if (r->o->no_data_vram) {
        extra[nextra++] = "--no-data-vram";
    }
    struct vg_qemu_opts qo = {.dir = r->dir,
                              .name = qname,
                              .ram_mib = GUEST_RAM_MIB,
                              .prealloc = r->o->prealloc,
                              .incoming = incoming ? "defer" : NULL,
                              .vgpu_socks = more,
                              .extra_args = qemu_extra_args(r->o)};
    int ret = 0;

    for (unsigned i = 0; ret == 0 && i < r->c->vgpus; i++) {
        g_autofree char *sname =
            i ? g_strdup_printf("%s-%u", name, i) : g_strdup(name);

        s->stats[i] = g_strdup_printf("%s/%s-stats.json", r->dir, sname);
        so.name = sname;
        so.stats_file = s->stats[i];
        so.backend = vgpu_backend(r->o, incoming, i);
        ret = vg_server_start(&so, &s->server[i], err);
        if (ret == 0) {
            ret = wait_preallocated(r, s->server[i], so.backend, false, err);
        }
        if (ret == 0 && i > 0) {
            more[i - 1] = s->server[i]->socket;
        }
    }
    if (ret == 0) {
        qo.vgpu_sock = s->server[0]->socket;
        ret = vg_qemu_start(&qo, &s->qemu, err);
    }
    /* --prealloc: each server populates its migration data area once QEMU
     * negotiated it, also before the migration. */
    for (unsigned i = 0; ret == 0 && i < r->c->vgpus; i++) {
        ret = wait_preallocated(r, s->server[i],
                                vgpu_backend(r->o, incoming, i), true, err);
    }
    if (ret < 0) {
        vg_error_prefix(err, "starting %s", name);
    }
    return ret;
}

static void side_free(struct side *s)
{
    vg_qemu_free(s->qemu);
    for (unsigned i = 0; i < MAX_VGPUS; i++) {
        vg_server_free(s->server[i]);
        g_free(s->stats[i]);
    }
}

/* Submit @n commands, at most half a ring at a time, and wait until the
 * device is idle again. */
static int run_cmds(struct run *r, const struct vgpu_cmd *cmds, unsigned n,
                    struct vg_error *err)
{
    uint32_t status = 0;
    int ret = 0;

    for (unsigned i = 0; ret == 0 && i < n; i += RING_ENTRIES / 2) {
        unsigned k = n - i < RING_ENTRIES / 2 ? n - i : RING_ENTRIES / 2;

        ret = vg_vgpu_submit(&r->d->gpu, cmds + i, k, err);
        if (ret == 0) {
            ret = vg_vgpu_wait_idle(&r->d->gpu, WAIT_MS, &status, err);
        }
        if (status & VGPU_STATUS_HALTED) {
            break;
        }
    }
    if (ret == 0 && (status & VGPU_STATUS_HALTED)) {
        uint32_t code = 0;

        vg_vgpu_rd(&r->d->gpu, VGPU_REG_ERROR_CODE, &code, NULL);
        ret =
            vg_error_set(err, EIO, "the vGPU halted with error code %u", code);
    }
    return ret;
}

/* Every 64 MiB of VRAM gets its own non-zero pattern. */
static int fill_vram(struct run *r, struct vg_error *err)
{
    unsigned n = (unsigned)(r->c->vram / FILL_CHUNK);
    g_autofree struct vgpu_cmd *c = g_new(struct vgpu_cmd, n);

    for (unsigned i = 0; i < n; i++) {
        c[i] = vgpu_cmd_make(VGPU_OP_FILL, i * FILL_CHUNK, FILL_CHUNK,
                             0x3f800000u + i * 0x1011u, 0, 0, 0);
    }
    return run_cmds(r, c, n, err);
}

/* VRAM as fill_vram() leaves it, for the CPU writers' model. */
static uint8_t *filled_image(uint64_t vram)
{
    uint8_t *img = g_malloc(vram);

    for (uint64_t off = 0; off < vram; off += 4) {
        uint32_t v = 0x3f800000u + (uint32_t)(off / FILL_CHUNK) * 0x1011u;

        memcpy(img + off, &v, 4);
    }
    return img;
}

/* Write @n u32 indices below @rows to VRAM at IDX_OFF through BAR2. */
static int write_indices(struct run *r, uint32_t n, uint32_t rows,
                         struct vg_error *err)
{
    g_autofree uint32_t *idx = g_new(uint32_t, n);

    for (uint32_t i = 0; i < n; i++) {
        idx[i] = g_rand_int_range(r->rng, 0, (gint32)rows);
    }
    return vg_qtest_memwrite(r->d->gpu.qt, r->d->gpu.vram_addr + IDX_OFF, idx,
                             n * sizeof(uint32_t), err);
}

static uint32_t sparse_rows(const struct run *r)
{
    return (uint32_t)((r->c->vram - TABLE_OFF) / PAGE_SIZE);
}

static int setup_workload(struct run *r, struct vg_error *err)
{
    switch (r->c->wl) {
    case WL_INFER:
        return write_indices(r, ACT_ROWS, ACT_ROWS, err);
    case WL_SPARSE:
        return write_indices(r, SPARSE_IDX, sparse_rows(r), err);
    case WL_CPU:
    case WL_CPU_HEAVY:
        r->image = filled_image(r->c->vram);
        return 0;
    default:
        return 0;
    }
}

/* The guest CPU writer of the cpu-writes workloads, started with the
 * migration: light (4-byte writes anywhere) or heavy. */
/* The guest CPU writer of a cpu-writes or cpu-heavy cell.  A post-copy
 * cell's writes go one at a time: after its switchover the source's VRAM
 * is served to the destination page by page while the writes in flight
 * at the stop may still land there, so the destination may hold any of
 * them, not a prefix (qclient/cpu-writer.h); with one in flight it holds
 * it or not. */
static int start_cpu_writer(struct run *r, struct vg_error *err)
{
    bool heavy = r->c->wl == WL_CPU_HEAVY;
    uint32_t batch = modes[r->c->mode].postcopy ? 1 : heavy ? 256 : 16;
    struct vg_cpu_writer_opts wo = {
        .qt = r->d->gpu.qt,
        .qmp = r->src.qemu->qmp,
        .vram_addr = r->d->gpu.vram_addr,
        .vram_size = r->c->vram,
        .page_size = PAGE_SIZE,
        .rate = heavy ? HEAVY_RATE : CPU_RATE,
        .min_len = heavy ? 8 : 4,
        .max_len = heavy ? 64 : 4,
        .hot_bytes = heavy ? HEAVY_HOT : 0,
        .hot_percent = heavy ? HEAVY_HOT_PCT : 0,
        .straddle_percent = heavy ? HEAVY_STRADDLE : 0,
        .batch = batch,
        .seed = 0x76676d67u ^ r->c->vram,
    };

    return r->image ? vg_cpu_writer_new(&wo, &r->cw, err) : 0;
}

/* Open vGPU @i of the source, fill its VRAM, set its workload up. */
static int start_vgpu(struct run *r, unsigned i, struct vg_pci_windows *win,
                      struct vg_error *err)
{
    int ret =
        vg_vgpu_open_nth(r->src.qemu->qt, &r->ram, i, win, &r->dev[i].gpu, err);

    r->d = &r->dev[i];
    if (ret == 0) {
        ret = vg_vgpu_ring_init(&r->d->gpu, &r->ram, RING_ENTRIES, err);
    }
    if (ret == 0) {
        ret = fill_vram(r, err);
    }
    if (ret == 0) {
        ret = setup_workload(r, err);
    }
    r->d = &r->dev[0];
    if (ret < 0) {
        vg_error_prefix(err, "vGPU %u", i);
    }
    return ret;
}

static int start_source(struct run *r, struct vg_error *err)
{
    struct vg_pci_windows win = VG_PCI_WINDOWS_INIT;
    int ret = start_side(r, &r->src, "vgpu-src", false, err);

    vg_galloc_init(&r->ram, RAM_START, (uint64_t)GUEST_RAM_MIB << 20);
    for (unsigned i = 0; ret == 0 && i < r->c->vgpus; i++) {
        ret = start_vgpu(r, i, &win, err);
    }
    if (ret < 0) {
        vg_error_prefix(err, "source");
    }
    return ret;
}

/* --------------------------------------------------------- workloads */

static int busy(struct run *r, bool *is_busy, struct vg_error *err)
{
    uint32_t st = 0;
    int ret = vg_vgpu_rd(&r->d->gpu, VGPU_REG_STATUS, &st, err);

    *is_busy = (st & VGPU_STATUS_BUSY) != 0;
    return ret;
}

/* Submit @cmd unless the device is still running the previous one. */
static int submit_if_idle(struct run *r, struct vgpu_cmd cmd,
                          struct vg_error *err)
{
    bool b = true;
    int ret = busy(r, &b, err);

    if (ret == 0 && !b) {
        ret = vg_vgpu_submit(&r->d->gpu, &cmd, 1, err);
        r->d->step++;
    }
    return ret;
}

static uint32_t float_bits(float f)
{
    uint32_t u;

    memcpy(&u, &f, sizeof(u));
    return u;
}

static int tick_infer(struct run *r, struct vg_error *err)
{
    uint64_t act = r->c->vram - ACT_BYTES;

    return submit_if_idle(r,
                          vgpu_cmd_make(VGPU_OP_SCATTER_ADD, act, ACT_ROWS,
                                        ACT_ROW, IDX_OFF, ACT_ROWS,
                                        float_bits(0.5f)),
                          err);
}

static int tick_train(struct run *r, struct vg_error *err)
{
    uint64_t q = r->c->vram / 4;

    return submit_if_idle(r,
                          vgpu_cmd_make(VGPU_OP_FILL, (r->d->step % 4) * q, q,
                                        0x40000000u + r->d->step, 0, 0, 0),
                          err);
}

/* How many units are due at @rate per second since the migration began. */
static uint32_t due(struct run *r, uint32_t rate)
{
    uint64_t want =
        (uint64_t)(g_get_monotonic_time() - r->t0_us) * rate / 1000000u;

    return want > r->d->done ? (uint32_t)MIN(want - r->d->done, MAX_PER_TICK)
                             : 0;
}

static int tick_sparse(struct run *r, struct vg_error *err)
{
    uint32_t n = due(r, SPARSE_RATE);
    uint32_t first = (uint32_t)(r->d->done % (SPARSE_IDX - MAX_PER_TICK));
    bool b = true;
    int ret = n ? busy(r, &b, err) : 0;

    if (ret == 0 && n && !b) {
        struct vgpu_cmd c = vgpu_cmd_make(
            VGPU_OP_SCATTER_ADD, TABLE_OFF, sparse_rows(r), PAGE_SIZE,
            IDX_OFF + 4ull * first, n, float_bits(1.0f));

        ret = vg_vgpu_submit(&r->d->gpu, &c, 1, err);
        r->d->done += n;
    }
    return ret;
}

static int tick_cpu(struct run *r, struct vg_error *err)
{
    int ret = vg_cpu_writer_run(r->cw, WRITE_SLICE_MS, err);

    return ret < 0 ? ret : 0;
}

static int tick_one(struct run *r, struct vg_error *err)
{
    switch (r->c->wl) {
    case WL_INFER:
        return tick_infer(r, err);
    case WL_TRAIN:
        return tick_train(r, err);
    case WL_SPARSE:
        return tick_sparse(r, err);
    case WL_CPU:
    case WL_CPU_HEAVY:
        return tick_cpu(r, err);
    default:
        return 0;
    }
}

/* The workload's next tick on every vGPU. */
static int tick(struct run *r, struct vg_error *err)
{
    int ret = 0;

    for (unsigned i = 0; ret == 0 && i < r->c->vgpus; i++) {
        r->d = &r->dev[i];
        ret = tick_one(r, err);
    }
    r->d = &r->dev[0];
    return ret;
}

/* ---------------------------------------------------------- migration */

/* Pre-copy rate of the device: VFIO bytes moved between the first and
 * last active samples.  (query-migrate's ram.transferred counts every
 * byte of the stream, the device's included, so it is no part of it.) */
static void note_rate(struct run *r, const struct vg_mig_info *info)
{
    bench_rate_note(&r->rate, info->status, info->vfio_transferred);
}

/* Whether QEMU has had its chance to switch over by itself: FORCE_AFTER_MS
 * after a full pass of VRAM (at once for stop-and-copy, which has no
 * pre-copy), r->force_ms at the latest. */
static bool force_due(struct run *r, const struct vg_mig_info *info)
{
    gint64 now = g_get_monotonic_time();
    int64_t since;

    if (!r->pass_us &&
        (modes[r->c->mode].precopy[0] == 'n' ||
         info->vfio_transferred >= (int64_t)(r->c->vram * r->c->vgpus))) {
        r->pass_us = now;
    }
    since = r->pass_us ? (now - r->pass_us) / 1000 : 0;
    return since > FORCE_AFTER_MS || (now - r->t0_us) / 1000 > r->force_ms;
}

/* Whether @c's workload leaves the first vGPU's engines idle, so that a
 * FENCE's round trip is the device's answer alone. */
static bool fence_probed(const struct cell *c)
{
    return c->wl == WL_IDLE || c->wl == WL_CPU || c->wl == WL_CPU_HEAVY;
}

/* Time one FENCE round trip on the first vGPU into @p. */
static int probe_fence(struct run *r, struct reg_probe *p, struct vg_error *err)
{
    int ret = reg_probe_fence(p, &r->dev[0].gpu, FENCE_BASE + ++r->fence_value,
                              FENCE_TIMEOUT_MS, err);

    return ret < 0 ? ret : 0;
}

static int poll_cb(const struct vg_mig_info *info, void *opaque,
                   struct vg_error *err)
{
    struct run *r = opaque;
    int ret;

    note_rate(r, info);
    if (strcmp(info->status, "active") != 0) {
        return 0;
    }
    ret = reg_probe_read(&r->probe, &r->dev[0].gpu, VGPU_REG_STATUS,
                         PROBE_PER_TICK, err);
    if (ret == 0 && fence_probed(r->c)) {
        ret = probe_fence(r, &r->fence, err);
    }
    if (ret == 0) {
        ret = tick(r, err);
    }
    if (ret == 0 && !modes[r->c->mode].postcopy && !r->c->forced &&
        force_due(r, info)) {
        r->c->forced = true;
        ret = bench_mig_set_params(r->src.qemu->qmp, r->o->max_bandwidth,
                                   FORCE_DT_MS, FORCE_SW_BW, err);
    }
    if (ret < 0) {
        vg_error_prefix(err, "workload %s", wl_names[r->c->wl]);
    }
    return ret;
}

/* When @c is forced at the latest: a slow host gets the time for pre-copy
 * to make FORCE_PASSES passes at the RAM anchor's rate. */
static int64_t force_after_ms(const struct cell *c)
{
    uint64_t bytes = c->vram * c->vgpus;
    int64_t per_gib = (int64_t)(bytes >> 30) * FORCE_PER_GIB_MS;
    int64_t passes =
        c->ram_bps > 0
            ? (int64_t)(FORCE_PASSES * (double)bytes / c->ram_bps * 1000)
            : 0;

    return FORCE_BASE_MS + (passes > per_gib ? passes : per_gib);
}

/* QEMU @q's last downtime in ms to the microsecond, from the timestamped
 * vmstate_downtime_checkpoint events in its log; -1 (with a warning) if
 * the log has none (a QEMU without the trace backend "log"). */
/* @q's downtime trace points into @tr; false (warned) if it has none. */
static bool parse_trace(struct vg_qemu *q, struct vg_vfio_trace *tr)
{
    g_autofree char *text = NULL;
    struct vg_error err = {0};

    if (!g_file_get_contents(q->proc.log, &text, NULL, NULL) ||
        vg_vfio_trace_parse(text, tr, &err) < 0) {
        vg_warn("%s: no trace in %s%s%s", q->proc.name, q->proc.log,
                err.msg[0] ? ": " : "", err.msg);
        return false;
    }
    return true;
}

/* The cell's downtime to the microsecond and its checkpoints from both
 * QEMUs' trace points (-1 where missing). */
static void trace_downtime(struct run *r)
{
    struct vg_vfio_trace src, dst;
    bool have_src = parse_trace(r->src.qemu, &src);

    r->c->downtime_trace_ms = have_src ? src.downtime_ms : -1;
    if (have_src && src.downtime_ms < 0) {
        vg_warn("%s: no timestamped downtime trace points in %s",
                r->src.qemu->proc.name, r->src.qemu->proc.log);
    }
    if (have_src && parse_trace(r->dst.qemu, &dst)) {
        vg_downtime_phases(&src, &dst, r->c->point_ms);
    }
}

/* The first vGPU's register reads and FENCE round trips before the
 * migration, a millisecond apart: what the guest waits with no device
 * data moving. */
static int probe_before(struct run *r, struct vg_error *err)
{
    struct reg_probe p, f;
    int ret = 0;

    reg_probe_init(&p, PROBE_BEFORE);
    reg_probe_init(&f, FENCE_BEFORE);
    for (unsigned i = 0; ret == 0 && i < PROBE_BEFORE; i++) {
        ret = reg_probe_read(&p, &r->dev[0].gpu, VGPU_REG_STATUS, 1, err);
        g_usleep(1000);
    }
    for (unsigned i = 0; ret == 0 && fence_probed(r->c) && i < FENCE_BEFORE;
         i++) {
        ret = probe_fence(r, &f, err);
        g_usleep(1000);
    }
    r->c->reg.before_us = reg_probe_pct(&p, 50);
    r->c->fence.before_us = reg_probe_pct(&f, 50);
    reg_probe_free(&p);
    reg_probe_free(&f);
    return ret;
}

/* What @p took while the migration was active, into @res. */
static void probe_take(struct probe_result *res, const struct reg_probe *p)
{
    res->n = p->n;
    res->p50_us = reg_probe_pct(p, 50);
    res->p90_us = reg_probe_pct(p, 90);
    res->p99_us = reg_probe_pct(p, 99);
}

/* ... and while it was active. */
static void probe_record(struct run *r)
{
    probe_take(&r->c->reg, &r->probe);
    probe_take(&r->c->fence, &r->fence);
}

static int migrate(struct run *r, struct vg_error *err)
{
    g_autofree char *uri = NULL;
    struct vg_mig_info info;
    int ret;

    /* The main loop of the source stalls while the device's stop-copy
     * runs under the BQL: seconds for a large VRAM.  A guest CPU write in
     * flight at the stop waits for it too. */
    vg_qmp_set_timeout(r->src.qemu->qmp, QMP_TIMEOUT_MS);
    vg_qmp_set_timeout(r->dst.qemu->qmp, QMP_TIMEOUT_MS);
    vg_qtest_set_timeout(r->src.qemu->qt, QMP_TIMEOUT_MS); /* CPU writes */
    if (modes[r->c->mode].postcopy) {
        ret =
            vg_mig_set_capability(r->src.qemu->qmp, "postcopy-ram", true, err);
        if (ret == 0) {
            ret = vg_mig_set_capability(r->dst.qemu->qmp, "postcopy-ram", true,
                                        err);
        }
        if (ret < 0) {
            return ret;
        }
    }
    ret = bench_mig_prepare(r->src.qemu->qmp, r->dst.qemu->qmp, r->o->channels,
                            r->o->max_bandwidth, r->o->dt_limit_ms, &uri, err);
    if (ret == 0) {
        ret = probe_before(r, err);
    }
    r->force_ms = force_after_ms(r->c);
    r->t0_us = g_get_monotonic_time();
    if (ret == 0) {
        ret = start_cpu_writer(r, err);
    }
    if (ret == 0) {
        ret = vg_mig_start(r->src.qemu->qmp, uri, err);
    }
    if (ret == 0 && modes[r->c->mode].postcopy) {
        /* Switch over at once: every page then crosses once, most of them
         * after the VM runs on the destination. */
        ret = vg_qmp_execute(r->src.qemu->qmp, "migrate-start-postcopy", NULL,
                             NULL, err);
    }
    if (ret == 0) {
        ret =
            vg_mig_wait_completed(r->src.qemu->qmp, (int)r->force_ms + WAIT_MS,
                                  poll_cb, r, &info, err);
    }
    if (ret == 0) {
        r->c->downtime_ms = info.downtime_ms;
        r->c->total_ms = info.total_time_ms;
        r->c->setup_ms = info.setup_time_ms;
        trace_downtime(r);
    }
    r->c->stream_bps = bench_rate_bps(&r->rate);
    probe_record(r);
    return ret;
}

static bool stats_done(const struct vg_stats *st, void *opaque)
{
    return st->vram_checksum[0] && !g_ascii_strcasecmp(st->state, opaque);
}

/* As stats_done, and a post-copy's page channel is over (if there was
 * one): the source counts the pages it served when the channel ends. */
static bool stats_done_all(const struct vg_stats *st, void *opaque)
{
    g_autofree char *pc = vg_stats_str(st, "postcopy");
    g_autofree char *done = vg_stats_str(st, "postcopy_done");

    return stats_done(st, opaque) &&
           (!pc || strcmp(pc, "true") != 0 || (done && !strcmp(done, "true")));
}

static int64_t stat_or(const struct vg_stats *st, const char *name)
{
    int64_t v = -1;

    vg_stats_int(st, name, &v, NULL);
    return v;
}

/* A statistic with decimals, -1 if absent. */
static double stat_ms(const struct vg_stats *st, const char *name)
{
    g_autofree char *v = vg_stats_str(st, name);

    return v ? g_ascii_strtod(v, NULL) : -1;
}

static void record_stats(struct cell *c, const struct vg_stats *s,
                         uint64_t page_size)
{
    c->stopcopy_ms = s->device_stopcopy_ms;
    c->stopcopy_read_ms = stat_ms(s, "stopcopy_read_ms");
    c->reads = stat_or(s, "precopy_reads");
    c->read_ms = stat_ms(s, "precopy_read_ms");
    c->bytes_sent = s->bytes_sent;
    c->precopy_bytes = stat_or(s, "precopy_bytes");
    c->stopcopy_bytes = stat_or(s, "stopcopy_bytes");
    c->final_dirty = stat_or(s, "final_dirty_bytes");
    c->estimate = stat_or(s, "stopcopy_estimate_bytes");
    c->rounds = stat_or(s, "rounds");
    c->throttle = stat_or(s, "throttle_percent");
    c->postcopy_bytes = MAX(stat_or(s, "postcopy_served"), 0) * page_size;
}

/* The destination's side: its writes, and how long a post-copy's pages
 * took. */
static void record_dst_stats(struct cell *c, const struct vg_stats *d)
{
    c->postcopy_ms = MAX(stat_ms(d, "postcopy_ms"), 0);
    c->writes = stat_or(d, "load_writes");
    c->write_ms = stat_ms(d, "load_write_ms");
}

/* Guest CPU writes: the destination must hold VRAM as filled plus every
 * write made before the stop (and a prefix of those in flight).  The
 * source's checksum must say the same unless writes reached it after the
 * stop: those may land while it is taken. */
static int verify_cpu(struct run *r, const struct vg_stats *s,
                      const struct vg_stats *d, struct vg_error *err)
{
    uint64_t k = vg_cpu_writer_uncertain(r->cw);
    g_autofree uint64_t *sums = g_new(uint64_t, k + 1);
    struct vg_cpu_writer_counts cnt;
    int64_t got;

    vg_cpu_writer_counts(r->cw, &cnt);
    r->c->cpu_writes = cnt.before;
    r->c->cpu_uncertain = k;
    r->c->cpu_rate = cnt.rate;
    vg_cpu_writer_checksums(r->cw, r->image, (uint32_t)r->o->track_page,
                            stat_or(d, "stream_version") >= 5, sums);
    got = vg_cpu_writer_find_sum(d->vram_checksum, sums, k + 1);
    r->c->verified =
        got >= 0 &&
        (k > 0 || vg_cpu_writer_find_sum(s->vram_checksum, sums, 1) == 0);
    if (!r->c->verified) {
        return vg_error_set(
            err, EIO,
            "VRAM checksum %s at the destination, %s at the "
            "source: neither is VRAM as filled plus the %" PRIu64
            " guest CPU writes made before the stop (%" PRIu64
            " more in flight or after)",
            d->vram_checksum, s->vram_checksum, cnt.before, k);
    }
    return 0;
}

/* The statistics of another vGPU of the VM (source @s, destination @d):
 * bytes, requests and their times add up, the device's stop-copy is the
 * longest one's. */
static void add_stats(struct cell *c, const struct vg_stats *s,
                      const struct vg_stats *d)
{
    struct cell one = {0};

    record_stats(&one, s, 0); /* post-copy bytes are not summed */
    record_dst_stats(&one, d);
    if (one.reads > 0 && one.read_ms >= 0) {
        c->reads += one.reads;
        c->read_ms += one.read_ms;
    }
    if (one.writes > 0 && one.write_ms >= 0) {
        c->writes += one.writes;
        c->write_ms += one.write_ms;
    }
    c->stopcopy_ms = MAX(c->stopcopy_ms, one.stopcopy_ms);
    c->stopcopy_read_ms = MAX(c->stopcopy_read_ms, one.stopcopy_read_ms);
    c->bytes_sent += one.bytes_sent;
    c->precopy_bytes += one.precopy_bytes;
    c->stopcopy_bytes += one.stopcopy_bytes;
    c->final_dirty += one.final_dirty;
    c->estimate += one.estimate;
    c->rounds = MAX(c->rounds, one.rounds);
    c->throttle = MAX(c->throttle, one.throttle);
}

/* vGPU @i (> 0) of a VM of several: both servers agree on its VRAM. */
static int verify_more(struct run *r, unsigned i, struct vg_error *err)
{
    struct vg_stats s = {0}, d = {0};
    int ret = vg_stats_wait(r->src.stats[i], stats_done, "stop", STATS_WAIT_MS,
                            &s, err);

    if (ret == 0) {
        ret = vg_stats_wait(r->dst.stats[i], stats_done, "running",
                            STATS_WAIT_MS, &d, err);
    }
    if (ret == 0) {
        add_stats(r->c, &s, &d);
        if (strcmp(s.vram_checksum, d.vram_checksum) != 0) {
            r->c->verified = false;
            ret = vg_error_set(err, EIO,
                               "vGPU %u: VRAM checksum %s at the source, %s "
                               "at the destination",
                               i, s.vram_checksum, d.vram_checksum);
        }
    }
    vg_stats_clear(&s);
    vg_stats_clear(&d);
    return ret;
}

static int verify(struct run *r, struct vg_error *err)
{
    struct vg_stats s = {0}, d = {0};
    int ret = vg_stats_wait(r->src.stats[0], stats_done_all, "stop",
                            STATS_WAIT_MS, &s, err);

    if (ret == 0) {
        ret = vg_stats_wait(r->dst.stats[0], stats_done, "running",
                            STATS_WAIT_MS, &d, err);
    }
    if (ret == 0) {
        record_dst_stats(r->c, &d);
    }
    if (ret == 0 && r->cw) {
        record_stats(r->c, &s, r->o->track_page);
        ret = verify_cpu(r, &s, &d, err);
    } else if (ret == 0) {
        record_stats(r->c, &s, r->o->track_page);
        r->c->verified = !strcmp(s.vram_checksum, d.vram_checksum);
        if (!r->c->verified) {
            ret = vg_error_set(err, EIO,
                               "VRAM checksum %s at the source, %s "
                               "at the destination",
                               s.vram_checksum, d.vram_checksum);
        }
    }
    vg_stats_clear(&s);
    vg_stats_clear(&d);
    for (unsigned i = 1; ret == 0 && i < r->c->vgpus; i++) {
        ret = verify_more(r, i, err);
    }
    return ret;
}

static int run_cell_steps(struct run *r, struct vg_error *err)
{
    int ret = start_source(r, err);

    if (ret == 0) {
        ret = start_side(r, &r->dst, "vgpu-dst", true, err);
    }
    if (ret == 0) {
        ret = migrate(r, err);
    }
    if (ret == 0) {
        ret = verify(r, err);
    }
    return ret;
}

int run_cell(const struct bench_opts *o, struct cell *c)
{
    struct run r = {.o = o, .c = c};
    struct vg_error err = {0};
    int ret;

    r.d = &r.dev[0];
    r.rng = g_rand_new_with_seed(0x76676d67u ^ (uint32_t)c->wl);
    reg_probe_init(&r.probe, PROBE_MAX);
    reg_probe_init(&r.fence, PROBE_MAX);
    c->reg = c->fence = (struct probe_result){-1, -1, -1, -1, 0};
    for (unsigned i = 0; i < VG_DOWNTIME_POINTS; i++) {
        c->point_ms[i] = -1;
    }
    ret = vg_tmpdir_create("bench", &r.dir, &err);
    if (ret == 0) {
        ret = run_cell_steps(&r, &err);
    }
    if (ret < 0) {
        g_strlcpy(c->error, err.msg, sizeof(c->error));
        fprintf(stderr, "vgmig-bench: %s/%" PRIu64 "M/%s: %s (logs in %s)\n",
                wl_names[c->wl], c->vram >> 20, modes[c->mode].name, err.msg,
                r.dir ? r.dir : "?");
    }
    vg_cpu_writer_free(r.cw);
    g_free(r.image);
    side_free(&r.dst);
    side_free(&r.src);
    if (ret == 0 && r.dir && !o->keep) {
        vg_tmpdir_remove(r.dir, NULL);
    } else if (ret == 0 && r.dir) {
        fprintf(stderr, "vgmig-bench: %s/%" PRIu64 "M/%s: logs kept in %s\n",
                wl_names[c->wl], c->vram >> 20, modes[c->mode].name, r.dir);
    }
    g_free(r.dir);
    g_rand_free(r.rng);
    reg_probe_free(&r.probe);
    reg_probe_free(&r.fence);
    return ret;
}
