/*
 * vgmig-demo -- the program behind `make demo`: live migration of a VM
 * whose vGPU is computing.
 *
 * Starts two vgpu-servers (source and destination, each writing its
 * statistics file) and two patched QEMUs (-accel qtest; the destination
 * with -incoming on TCP loopback).  A workload runs through the vGPU's
 * command ring on the source: uploads by DMA, FILL, COPY, AXPY,
 * SCATTER_ADD, downloads by DMA and fences with MSI-X interrupts, every
 * result checked against a computation done here.  The VM migrates
 * through QMP while the workload runs; then the destination's VRAM and
 * device state must equal the source's at switchover (the checksums the
 * two servers took) and the workload goes on at the destination with its
 * checks passing.  The summary is printed and written as JSON.
 */
#include <errno.h>
#include <getopt.h>
#include <glib.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/error.h"
#include "common/log.h"
#include "common/size.h"
#include "qclient/harness.h"
#include "qclient/io.h"
#include "qclient/migrate.h"
#include "qclient/vgpu-drv.h"
#include "vgpu/cmd.h"

#define GUEST_RAM_MIB  512
#define CHUNK          (1u << 20) /* bytes uploaded per step */
#define AXPY_COUNT     (64u * 1024)
#define SCATTER_ROWS   4096u
#define SCATTER_ROWLEN 256u
#define SCATTER_COUNT  1024u
#define WAIT_MS        60000
#define MIG_TIMEOUT_MS 300000
#define STATS_WAIT_MS  30000
#define PROGRESS_MS    250
/* While the workload runs during the migration, hold it in pre-copy: a
 * qtest client (this program plays the guest's vCPU) is not stopped with
 * the VM, so it must not touch the device once QEMU may switch over. */
#define HOLD_DOWNTIME_MS      1
#define HOLD_BANDWIDTH        (32ll << 20)
#define HOLD_SWITCHOVER_BW    1000 /* bytes/s: a threshold of 1 byte */
#define FULL_BANDWIDTH        (10ll << 30)
#define DEFAULT_SWITCHOVER_BW 0 /* QEMU measures the bandwidth itself */
#define INFLIGHT_FILL         (4u << 20) /* running at switchover */

struct demo_opts {
    const char *out_dir;
    const char *vram;
    unsigned steps;
    unsigned downtime_ms;
    uint64_t switchover_bw; /* bytes/s */
    enum vg_log_level log_level;
};

/* One side of the migration. */
struct demo_side {
    struct vg_server *server;
    struct vg_qemu *qemu;
    char *stats;
};

/* What the migration reported. */
struct demo_mig {
    char *uri;
    unsigned steps_before, steps_during, steps_after;
    uint32_t inflight_fence; /* fenced by the batch left running */
    struct vg_mig_info info;
    struct vg_stats src, dst;
    bool device_state_equal;
    bool vram_equal;
    int64_t last_progress_ms;
};

/* Where each buffer lives, in VRAM offsets or guest RAM addresses. */
struct demo_layout {
    uint64_t up_src;   /* guest RAM: data to upload */
    uint64_t down_dst; /* guest RAM: downloaded data */
    uint64_t upload;   /* VRAM */
    uint64_t copy;     /* VRAM */
    uint64_t fill;     /* VRAM */
    uint64_t fill_len;
    uint64_t axpy_x, axpy_y; /* VRAM */
    uint64_t table, index;   /* VRAM */
};

struct demo_stats {
    uint64_t cmds[VGPU_OP_COUNT];
    uint64_t bytes_moved;
    uint64_t fences;
    uint64_t irqs;
    uint64_t checks;
    gint64 t0_us; /* start of the first step */
    double elapsed_ms;
};

struct demo {
    struct demo_opts opts;
    char *dir;
    struct demo_side src, dst;
    struct demo_mig mig;
    struct vg_galloc ram;
    struct vg_vgpu gpu;
    struct demo_layout at;
    struct demo_stats st;
    GRand *rng;
    float *y_model; /* expected AXPY y */
    float *table_model;
};

static void usage(FILE *f)
{
    fprintf(
        f,
        "Usage: vgmig-demo [OPTION]...\n"
        "\n"
        "Live-migrate a VM whose vGPU runs a checked workload.\n"
        "\n"
        "Starts two $VGMIG_SERVER (vgpu-server: source and destination, each "
        "with\n"
        "--stats-file) and two $VGMIG_QEMU (the patched QEMU, -accel qtest, "
        "firmware\n"
        "from $VGMIG_FIRMWARE; the destination with -incoming on TCP "
        "loopback).\n"
        "Each workload step uploads data by DMA, runs FILL, COPY, AXPY and\n"
        "SCATTER_ADD, downloads the result by DMA and waits for a fence and "
        "its\n"
        "MSI-X interrupt; every result is compared with the same computation "
        "done\n"
        "by this program.\n"
        "\n"
        "The first quarter of the steps runs on the source; then QMP "
        "'migrate'\n"
        "starts and half of the steps run while it copies; a last FILL and "
        "FENCE\n"
        "are left running on the device at switchover.  This program drives "
        "the\n"
        "device through qtest, which QEMU does not stop with the VM, so while "
        "those\n"
        "steps run it holds the migration in pre-copy (downtime limit %d ms,\n"
        "bandwidth %lld MiB/s, switchover bandwidth %d bytes/s), then sets "
        "the\n"
        "real limits and touches the device no more until the migration "
        "completes.\n"
        "QEMU switches over once what is pending fits in the switchover "
        "bandwidth\n"
        "times the downtime limit; the switchover bandwidth is given "
        "explicitly\n"
        "because QEMU's own estimate decays towards 0 once pre-copy has "
        "nothing\n"
        "left to send.\n"
        "\n"
        "On the destination the VRAM and device state checksums that the two\n"
        "servers took must be equal, the batch left running must finish, and "
        "the\n"
        "remaining steps run there.  A progress line is shown while migrating; "
        "the\n"
        "summary (VRAM size, bytes sent, total time, QEMU's downtime, the "
        "device's\n"
        "stop-copy time) is also written to DIR/result.json.\n"
        "\n"
        "Options:\n"
        "  --out DIR           write result.json to DIR [build/demo]\n"
        "  --vram SIZE         VRAM of the vGPU, e.g. 64M, 1G [256M]\n"
        "  --steps N           workload steps, 3..1000 [8]\n"
        "  --downtime-limit MS QEMU's downtime-limit, 1..60000 [300]\n"
        "  --switchover-bandwidth SIZE\n"
        "                      QEMU's avail-switchover-bandwidth in bytes per\n"
        "                      second, 0..1T; 0 lets QEMU use the bandwidth\n"
        "                      it measures [0]\n"
        "  --log-level L       error, warn, info, debug or trace [info]\n"
        "  -h, --help          show this text\n"
        "\n"
        "Exit status: 0 if the migration completed and every check passed, 1 "
        "on a\n"
        "failed check or error, 2 on bad usage.\n",
        HOLD_DOWNTIME_MS, HOLD_BANDWIDTH >> 20, HOLD_SWITCHOVER_BW);
}

/* Parse count option --@name, a decimal number in [@min, @max]. */
static int parse_num(const char *name, const char *text, uint64_t min,
                     uint64_t max, uint64_t *out)
{
    GError *gerr = NULL;

    if (!g_ascii_string_to_unsigned(text, 10, min, max, out, &gerr)) {
        fprintf(stderr, "vgmig-demo: --%s: %s\n", name, gerr->message);
        g_error_free(gerr);
        return -1;
    }
    return 0;
}

static int parse_opt(int c, struct demo_opts *o)
{
    uint64_t n;

    switch (c) {
    case 'o':
        o->out_dir = optarg;
        return 0;
    case 'v':
        o->vram = optarg;
        return vg_parse_size_opt("vgmig-demo", "vram", optarg, 16u << 20,
                                 4ull << 30, &n);
    case 's':
        if (parse_num("steps", optarg, 3, 1000, &n) < 0) {
            return -1;
        }
        o->steps = (unsigned)n;
        return 0;
    case 'd':
        if (parse_num("downtime-limit", optarg, 1, 60000, &n) < 0) {
            return -1;
        }
        o->downtime_ms = (unsigned)n;
        return 0;
    case 'b':
        return vg_parse_size_opt("vgmig-demo", "switchover-bandwidth", optarg,
                                 0, 1ull << 40, &o->switchover_bw);
    case 'l':
        if (!vg_log_parse_level(optarg, &o->log_level)) {
            fprintf(stderr, "vgmig-demo: --log-level: unknown level '%s'\n",
                    optarg);
            return -1;
        }
        return 0;
    default:
        usage(stderr);
        return -1;
    }
}

static int parse_opts(int argc, char **argv, struct demo_opts *o)
{
    static const struct option longopts[] = {
        {"out", required_argument, NULL, 'o'},
        {"vram", required_argument, NULL, 'v'},
        {"steps", required_argument, NULL, 's'},
        {"downtime-limit", required_argument, NULL, 'd'},
        {"switchover-bandwidth", required_argument, NULL, 'b'},
        {"log-level", required_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;

    *o = (struct demo_opts){"build/demo",          "256M",     8, 300,
                            DEFAULT_SWITCHOVER_BW, VG_LOG_INFO};
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (c == 'h') {
            usage(stdout);
            exit(0);
        }
        if (parse_opt(c, o) < 0) {
            return -1;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "vgmig-demo: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    return 0;
}

static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static int submit(struct demo *d, const struct vgpu_cmd *cmds, unsigned n,
                  struct vg_error *err)
{
    uint32_t status;
    int ret;

    ret = vg_vgpu_submit(&d->gpu, cmds, n, err);
    if (ret == 0) {
        ret = vg_vgpu_wait_idle(&d->gpu, WAIT_MS, &status, err);
    }
    if (ret == 0 && (status & VGPU_STATUS_HALTED)) {
        uint32_t code = 0;
        vg_vgpu_rd(&d->gpu, VGPU_REG_ERROR_CODE, &code, NULL);
        return vg_error_set(err, EIO, "the vGPU halted with error code %u",
                            code);
    }
    for (unsigned i = 0; ret == 0 && i < n; i++) {
        d->st.cmds[cmds[i].opcode]++;
    }
    return ret;
}

/* Place the buffers: VRAM regions from offset 0 up, guest RAM above 16 MiB. */
static int plan_layout(struct demo *d, struct vg_error *err)
{
    struct demo_layout *at = &d->at;
    uint64_t vram = d->gpu.vram_size;
    int ret;

    at->upload = 0;
    at->copy = CHUNK;
    at->axpy_x = 2 * CHUNK;
    at->axpy_y = at->axpy_x + AXPY_COUNT * 4;
    at->index = at->axpy_y + AXPY_COUNT * 4;
    at->table = 4 * CHUNK;
    at->fill = at->table + SCATTER_ROWS * SCATTER_ROWLEN;
    if (at->fill >= vram) {
        return vg_error_set(err, ENOSPC,
                            "VRAM of %" PRIu64 " bytes is too "
                            "small for the demo",
                            vram);
    }
    at->fill_len = (vram - at->fill) & ~(uint64_t)3;
    ret = vg_galloc_alloc(&d->ram, CHUNK, 4096, &at->up_src, err);
    if (ret == 0) {
        ret = vg_galloc_alloc(&d->ram, CHUNK, 4096, &at->down_dst, err);
    }
    return ret;
}

static int write_guest(struct demo *d, uint64_t addr, const void *buf,
                       size_t len, struct vg_error *err)
{
    return vg_qtest_memwrite(d->gpu.qt, addr, buf, len, err);
}

/* VRAM read back through the BAR2 aperture. */
static int read_vram(struct demo *d, uint64_t off, void *buf, size_t len,
                     struct vg_error *err)
{
    return vg_qtest_memread(d->gpu.qt, d->gpu.vram_addr + off, buf, len, err);
}

static int expect_equal(struct demo *d, const char *what, const void *got,
                        const void *want, size_t len, struct vg_error *err)
{
    const uint8_t *g = got, *w = want;

    d->st.checks++;
    for (size_t i = 0; i < len; i++) {
        if (g[i] != w[i]) {
            return vg_error_set(err, EIO,
                                "%s differs at byte %zu: got 0x%02x, "
                                "expected 0x%02x",
                                what, i, g[i], w[i]);
        }
    }
    return 0;
}

/* Upload a random chunk, copy it inside VRAM, download the copy. */
static int step_dma_copy(struct demo *d, struct vg_error *err)
{
    g_autofree uint8_t *data = g_malloc(CHUNK);
    g_autofree uint8_t *back = g_malloc(CHUNK);
    const struct demo_layout *at = &d->at;
    struct vgpu_cmd c[3];
    int ret;

    for (size_t i = 0; i < CHUNK; i += 4) {
        uint32_t r = g_rand_int(d->rng);
        memcpy(data + i, &r, 4);
    }
    ret = write_guest(d, at->up_src, data, CHUNK, err);
    if (ret < 0) {
        return ret;
    }
    c[0] = vgpu_cmd_make(VGPU_OP_DMA_TO_VRAM, at->upload, at->up_src, CHUNK, 0,
                         0, 0);
    c[1] = vgpu_cmd_make(VGPU_OP_COPY, at->copy, at->upload, CHUNK, 0, 0, 0);
    c[2] = vgpu_cmd_make(VGPU_OP_DMA_FROM_VRAM, at->down_dst, at->copy, CHUNK,
                         0, 0, 0);
    ret = submit(d, c, 3, err);
    if (ret == 0) {
        ret = vg_qtest_memread(d->gpu.qt, at->down_dst, back, CHUNK, err);
    }
    if (ret == 0) {
        ret = expect_equal(d, "DMA round trip through VRAM", back, data, CHUNK,
                           err);
    }
    d->st.bytes_moved += 3ull * CHUNK;
    return ret;
}

/* FILL the big region with this step's pattern; check its ends. */
static int step_fill(struct demo *d, uint32_t pattern, struct vg_error *err)
{
    const struct demo_layout *at = &d->at;
    struct vgpu_cmd c =
        vgpu_cmd_make(VGPU_OP_FILL, at->fill, at->fill_len, pattern, 0, 0, 0);
    uint32_t head, tail;
    int ret;

    ret = submit(d, &c, 1, err);
    if (ret == 0) {
        ret = read_vram(d, at->fill, &head, 4, err);
    }
    if (ret == 0) {
        ret = read_vram(d, at->fill + at->fill_len - 4, &tail, 4, err);
    }
    if (ret == 0) {
        ret = expect_equal(d, "FILL start", &head, &pattern, 4, err);
    }
    if (ret == 0) {
        ret = expect_equal(d, "FILL end", &tail, &pattern, 4, err);
    }
    d->st.bytes_moved += at->fill_len;
    return ret;
}

/* y = a*x + y on the device and in the model; compare all of y. */
static int step_axpy(struct demo *d, float a, struct vg_error *err)
{
    g_autofree float *x = g_malloc(AXPY_COUNT * 4);
    g_autofree float *y = g_malloc(AXPY_COUNT * 4);
    const struct demo_layout *at = &d->at;
    struct vgpu_cmd c = vgpu_cmd_make(VGPU_OP_AXPY, at->axpy_y, at->axpy_x,
                                      AXPY_COUNT, float_bits(a), 0, 0);
    int ret;

    ret = read_vram(d, at->axpy_x, x, AXPY_COUNT * 4, err);
    if (ret == 0) {
        ret = submit(d, &c, 1, err);
    }
    if (ret == 0) {
        ret = read_vram(d, at->axpy_y, y, AXPY_COUNT * 4, err);
    }
    for (unsigned i = 0; i < AXPY_COUNT; i++) {
        d->y_model[i] = a * x[i] + d->y_model[i];
    }
    if (ret == 0) {
        ret =
            expect_equal(d, "AXPY result", y, d->y_model, AXPY_COUNT * 4, err);
    }
    d->st.bytes_moved += AXPY_COUNT * 4ull;
    return ret;
}

/* Add @value to random rows of the table; compare the whole table. */
static int step_scatter(struct demo *d, float value, struct vg_error *err)
{
    g_autofree uint32_t *idx = g_malloc(SCATTER_COUNT * 4);
    g_autofree float *table = g_malloc(SCATTER_ROWS * SCATTER_ROWLEN);
    const struct demo_layout *at = &d->at;
    const unsigned per_row = SCATTER_ROWLEN / 4;
    struct vgpu_cmd c[2];
    int ret;

    for (unsigned i = 0; i < SCATTER_COUNT; i++) {
        idx[i] = g_rand_int_range(d->rng, 0, SCATTER_ROWS);
        for (unsigned j = 0; j < per_row; j++) {
            float *cell = &d->table_model[idx[i] * per_row + j];
            *cell = *cell + value;
        }
    }
    /* The index array goes to VRAM by DMA, as a guest driver would do. */
    ret = write_guest(d, at->up_src, idx, SCATTER_COUNT * 4, err);
    c[0] = vgpu_cmd_make(VGPU_OP_DMA_TO_VRAM, at->index, at->up_src,
                         SCATTER_COUNT * 4, 0, 0, 0);
    c[1] = vgpu_cmd_make(VGPU_OP_SCATTER_ADD, at->table, SCATTER_ROWS,
                         SCATTER_ROWLEN, at->index, SCATTER_COUNT,
                         float_bits(value));
    if (ret == 0) {
        ret = submit(d, c, 2, err);
    }
    if (ret == 0) {
        ret =
            read_vram(d, at->table, table, SCATTER_ROWS * SCATTER_ROWLEN, err);
    }
    if (ret == 0) {
        ret = expect_equal(d, "SCATTER_ADD table", table, d->table_model,
                           SCATTER_ROWS * SCATTER_ROWLEN, err);
    }
    d->st.bytes_moved += (uint64_t)SCATTER_COUNT * SCATTER_ROWLEN;
    return ret;
}

/* FENCE @value: the register and the MSI-X message must both arrive. */
static int step_fence(struct demo *d, uint32_t value, struct vg_error *err)
{
    struct vgpu_cmd c = vgpu_cmd_make(VGPU_OP_FENCE, value, 0, 0, 0, 0, 0);
    int ret;

    ret = vg_vgpu_msi_clear(&d->gpu, VGPU_MSIX_VEC_FENCE, err);
    if (ret == 0) {
        ret = submit(d, &c, 1, err);
    }
    if (ret == 0) {
        ret = vg_vgpu_wait_reg(&d->gpu, VGPU_REG_FENCE_LO, value, WAIT_MS, err);
    }
    if (ret == 0) {
        ret = vg_vgpu_msi_wait(&d->gpu, VGPU_MSIX_VEC_FENCE, WAIT_MS, err);
    }
    if (ret == 0) {
        /* Acknowledge, so the next fence raises a new interrupt. */
        ret = vg_vgpu_wr(&d->gpu, VGPU_REG_IRQ_STATUS, VGPU_IRQ_FENCE, err);
        d->st.fences++;
        d->st.irqs++;
    }
    return ret;
}

static int run_step(struct demo *d, unsigned step, struct vg_error *err)
{
    int ret = step_dma_copy(d, err);

    if (ret == 0) {
        ret = step_fill(d, 0xc0de0000u | step, err);
    }
    if (ret == 0) {
        ret = step_axpy(d, 0.5f + (float)step, err);
    }
    if (ret == 0) {
        ret = step_scatter(d, 1.0f + (float)step / 4, err);
    }
    if (ret == 0) {
        ret = step_fence(d, 1000 + step, err);
    }
    if (ret < 0) {
        vg_error_prefix(err, "step %u", step + 1);
    }
    return ret;
}

/* Zero the AXPY y vector and the table, seed x with data, enable IRQs. */
static int init_workload(struct demo *d, struct vg_error *err)
{
    g_autofree float *x = g_malloc(AXPY_COUNT * 4);
    struct vgpu_cmd c[3];
    int ret;

    for (unsigned i = 0; i < AXPY_COUNT; i++) {
        x[i] = (float)(i % 1000) / 8.0f;
    }
    d->y_model = g_malloc0(AXPY_COUNT * 4);
    d->table_model = g_malloc0(SCATTER_ROWS * SCATTER_ROWLEN);
    ret = vg_vgpu_ring_init(&d->gpu, &d->ram, 64, err);
    if (ret == 0) {
        ret = vg_vgpu_wr(&d->gpu, VGPU_REG_IRQ_MASK,
                         VGPU_IRQ_FENCE | VGPU_IRQ_ERROR, err);
    }
    if (ret == 0) {
        ret = write_guest(d, d->at.up_src, x, AXPY_COUNT * 4, err);
    }
    c[0] = vgpu_cmd_make(VGPU_OP_DMA_TO_VRAM, d->at.axpy_x, d->at.up_src,
                         AXPY_COUNT * 4, 0, 0, 0);
    c[1] =
        vgpu_cmd_make(VGPU_OP_FILL, d->at.axpy_y, AXPY_COUNT * 4, 0, 0, 0, 0);
    c[2] = vgpu_cmd_make(VGPU_OP_FILL, d->at.table,
                         SCATTER_ROWS * SCATTER_ROWLEN, 0, 0, 0, 0);
    if (ret == 0) {
        ret = submit(d, c, 3, err);
    }
    return ret;
}

/* Start server @name and QEMU @qname into @side; the destination's QEMU
 * waits for an incoming migration. */
static int start_side(struct demo *d, struct demo_side *side, const char *name,
                      const char *qname, bool incoming, struct vg_error *err)
{
    struct vg_server_opts so = {.dir = d->dir,
                                .vram = d->opts.vram,
                                .page_size = "64K",
                                .log_level = "warn",
                                .name = name};
    struct vg_qemu_opts qo = {.dir = d->dir,
                              .name = qname,
                              .ram_mib = GUEST_RAM_MIB,
                              .incoming = incoming ? "defer" : NULL};
    int ret;

    side->stats = g_strdup_printf("%s/%s-stats.json", d->dir, name);
    so.stats_file = side->stats;
    ret = vg_server_start(&so, &side->server, err);
    if (ret < 0) {
        vg_error_prefix(err, "starting %s", name);
        return ret;
    }
    qo.vgpu_sock = side->server->socket;
    ret = vg_qemu_start(&qo, &side->qemu, err);
    if (ret < 0) {
        vg_error_prefix(err, "starting %s", qname);
    }
    return ret;
}

/* Source and destination up, the destination listening, the vGPU of the
 * source opened. */
static int start_vms(struct demo *d, struct vg_error *err)
{
    int ret = start_side(d, &d->src, "vgpu-src", "qemu-src", false, err);

    if (ret == 0) {
        ret = start_side(d, &d->dst, "vgpu-dst", "qemu-dst", true, err);
    }
    if (ret == 0) {
        ret = vg_mig_incoming(d->dst.qemu->qmp, &d->mig.uri, err);
    }
    if (ret < 0) {
        return ret;
    }
    vg_galloc_init(&d->ram, 16u << 20, (uint64_t)GUEST_RAM_MIB << 20);
    ret = vg_vgpu_open(d->src.qemu->qt, &d->ram, &d->gpu, err);
    if (ret < 0) {
        vg_error_prefix(err, "opening the vGPU");
    }
    return ret;
}

static void print_device(struct demo *d)
{
    printf("vGPU %04x:%04x at 00:%02x.%x, BAR0 0x%" PRIx64
           " (registers), BAR2 0x%" PRIx64 " (VRAM, %" PRIu64 " MiB)\n",
           d->gpu.pci.vendor_id, d->gpu.pci.device_id, d->gpu.pci.devfn >> 3,
           d->gpu.pci.devfn & 7, d->gpu.regs_addr, d->gpu.vram_addr,
           d->gpu.vram_size >> 20);
}

/* ------------------------------------------------------------ migration */

/* Print the progress line at most every PROGRESS_MS. */
static void print_progress(struct demo *d, const struct vg_mig_info *i,
                           const char *what)
{
    int64_t now = vg_now_ms();

    if (now - d->mig.last_progress_ms < PROGRESS_MS) {
        return;
    }
    d->mig.last_progress_ms = now;
    printf("\rmigrating (%s): %-9s RAM %7.1f MiB, vGPU %7.1f MiB, %6" PRId64
           " ms  ",
           what, i->status, (double)MAX(i->ram_transferred, 0) / (1 << 20),
           (double)MAX(i->vfio_transferred, 0) / (1 << 20),
           MAX(i->total_time_ms, 0));
    fflush(stdout);
}

static int progress_cb(const struct vg_mig_info *info, void *opaque,
                       struct vg_error *err)
{
    print_progress(opaque, info, "switchover");
    return 0;
}

/* The device may be touched only while the migration is in pre-copy and
 * the VM runs. */
static int check_precopy(struct demo *d, struct vg_error *err)
{
    char state[VG_MIG_STATUS_MAX];
    int ret = vg_mig_query(d->src.qemu->qmp, &d->mig.info, err);

    if (ret == 0) {
        ret = vg_mig_runstate(d->src.qemu->qmp, state, sizeof(state), err);
    }
    if (ret == 0 && ((strcmp(d->mig.info.status, "setup") != 0 &&
                      strcmp(d->mig.info.status, "active") != 0) ||
                     strcmp(state, "running") != 0)) {
        ret = vg_error_set(err, EAGAIN,
                           "migration '%s', VM '%s': left pre-copy while "
                           "held there",
                           d->mig.info.status, state);
    }
    return ret;
}

/* A FILL of INFLIGHT_FILL bytes and a FENCE, not waited for: the device
 * is busy as QEMU heads for switchover. */
static int submit_inflight(struct demo *d, struct vg_error *err)
{
    struct vgpu_cmd c[2];
    int ret;

    d->mig.inflight_fence = 0xf1f1f1f1u;
    c[0] = vgpu_cmd_make(VGPU_OP_FILL, d->at.fill,
                         MIN(d->at.fill_len, (uint64_t)INFLIGHT_FILL),
                         d->mig.inflight_fence, 0, 0, 0);
    c[1] = vgpu_cmd_make(VGPU_OP_FENCE, d->mig.inflight_fence, 0, 0, 0, 0, 0);
    ret = vg_vgpu_msi_clear(&d->gpu, VGPU_MSIX_VEC_FENCE, err);
    if (ret == 0) {
        ret = vg_vgpu_submit(&d->gpu, c, 2, err);
    }
    d->st.cmds[VGPU_OP_FILL]++;
    d->st.cmds[VGPU_OP_FENCE]++;
    return ret;
}

/* QEMU switches over once what is pending fits in @switchover_bw (bytes/s)
 * times @downtime_ms; @bandwidth caps the stream. */
static int set_limits(struct demo *d, int64_t downtime_ms, int64_t bandwidth,
                      int64_t switchover_bw, struct vg_error *err)
{
    struct vg_qmp *qmp = d->src.qemu->qmp;
    int ret = vg_mig_set_parameter(qmp, "downtime-limit", downtime_ms, err);

    if (ret == 0) {
        ret = vg_mig_set_parameter(qmp, "max-bandwidth", bandwidth, err);
    }
    if (ret == 0) {
        ret = vg_mig_set_parameter(qmp, "avail-switchover-bandwidth",
                                   switchover_bw, err);
    }
    return ret;
}

static int run_steps(struct demo *d, unsigned first, unsigned n, bool during,
                     struct vg_error *err);

/* Migrate while steps run, leave a batch running, let QEMU switch over. */
static int migrate_live(struct demo *d, struct vg_error *err)
{
    struct demo_mig *m = &d->mig;
    int ret = set_limits(d, HOLD_DOWNTIME_MS, HOLD_BANDWIDTH,
                         HOLD_SWITCHOVER_BW, err);

    if (ret == 0) {
        printf("migrating to %s\n", m->uri);
        ret = vg_mig_start(d->src.qemu->qmp, m->uri, err);
    }
    if (ret == 0) {
        ret = run_steps(d, m->steps_before, m->steps_during, true, err);
    }
    if (ret == 0) {
        ret = check_precopy(d, err);
    }
    if (ret == 0) {
        ret = submit_inflight(d, err);
    }
    if (ret == 0) {
        ret = set_limits(d, d->opts.downtime_ms, FULL_BANDWIDTH,
                         (int64_t)d->opts.switchover_bw, err);
    }
    if (ret == 0) {
        ret = vg_mig_wait_completed(d->src.qemu->qmp, MIG_TIMEOUT_MS,
                                    progress_cb, d, &m->info, err);
    }
    printf("\n");
    if (ret < 0) {
        vg_error_prefix(err, "live migration");
    }
    return ret;
}

/* Stats of a finished migration: a VRAM checksum is there (and, on the
 * destination, the device runs). */
static bool stats_done(const struct vg_stats *st, void *opaque)
{
    return st->vram_checksum[0] &&
           (!opaque || !g_ascii_strcasecmp(st->state, opaque));
}

/* Both servers' checksums: VRAM and device state at switchover on the
 * source, after loading on the destination. */
static int compare_checksums(struct demo *d, struct vg_error *err)
{
    struct demo_mig *m = &d->mig;
    int ret = vg_stats_wait(d->src.stats, stats_done, "stop", STATS_WAIT_MS,
                            &m->src, err);

    if (ret == 0) {
        ret = vg_stats_wait(d->dst.stats, stats_done, "running", STATS_WAIT_MS,
                            &m->dst, err);
    }
    if (ret < 0) {
        return ret;
    }
    m->vram_equal = !strcmp(m->src.vram_checksum, m->dst.vram_checksum);
    m->device_state_equal =
        m->src.device_state_checksum[0] &&
        !strcmp(m->src.device_state_checksum, m->dst.device_state_checksum);
    if (!m->vram_equal || !m->device_state_equal) {
        return vg_error_set(err, EIO,
                            "destination differs from the source at "
                            "switchover: VRAM %s vs %s, device state %s vs %s",
                            m->src.vram_checksum, m->dst.vram_checksum,
                            m->src.device_state_checksum,
                            m->dst.device_state_checksum);
    }
    d->st.checks++;
    return 0;
}

/* The batch left running finishes on the destination: its fence, its
 * interrupt and its FILL. */
static int finish_inflight(struct demo *d, struct vg_error *err)
{
    uint32_t v = d->mig.inflight_fence, head = 0, tail = 0;
    uint64_t len = MIN(d->at.fill_len, (uint64_t)INFLIGHT_FILL);
    int ret = vg_vgpu_wait_reg(&d->gpu, VGPU_REG_FENCE_LO, v, WAIT_MS, err);

    if (ret == 0) {
        ret = vg_vgpu_msi_wait(&d->gpu, VGPU_MSIX_VEC_FENCE, WAIT_MS, err);
    }
    if (ret == 0) {
        ret = vg_vgpu_wr(&d->gpu, VGPU_REG_IRQ_STATUS, VGPU_IRQ_FENCE, err);
    }
    if (ret == 0) {
        ret = read_vram(d, d->at.fill, &head, 4, err);
    }
    if (ret == 0) {
        ret = read_vram(d, d->at.fill + len - 4, &tail, 4, err);
    }
    if (ret == 0) {
        ret = expect_equal(d, "in-flight FILL start", &head, &v, 4, err);
    }
    if (ret == 0) {
        ret = expect_equal(d, "in-flight FILL end", &tail, &v, 4, err);
    }
    d->st.fences++;
    d->st.irqs++;
    return ret;
}

/* After completion: the source is in postmigrate, the destination runs
 * and its vGPU is attached as it came (no reprogramming). */
static int switch_to_destination(struct demo *d, struct vg_error *err)
{
    struct vg_vgpu old = d->gpu;
    char state[VG_MIG_STATUS_MAX];
    int ret = vg_mig_wait_runstate(d->dst.qemu->qmp, "running", WAIT_MS, err);

    if (ret == 0) {
        ret = vg_mig_runstate(d->src.qemu->qmp, state, sizeof(state), err);
    }
    if (ret == 0 && strcmp(state, "postmigrate") != 0) {
        ret =
            vg_error_set(err, EIO, "source VM is '%s' after migration", state);
    }
    if (ret == 0) {
        ret = vg_vgpu_attach(d->dst.qemu->qt, &d->gpu, err);
    }
    if (ret == 0 && (d->gpu.vram_addr != old.vram_addr ||
                     d->gpu.ring_addr != old.ring_addr ||
                     d->gpu.msi_slot[0] != old.msi_slot[0])) {
        ret = vg_error_set(err, EIO, "destination vGPU configured differently");
    }
    if (ret == 0) {
        ret = compare_checksums(d, err);
    }
    if (ret == 0) {
        ret = finish_inflight(d, err);
    }
    if (ret < 0) {
        vg_error_prefix(err, "destination");
    }
    return ret;
}

/* ---------------------------------------------------------------- report */

static void json_workload(struct demo *d, GString *js)
{
    static const char *const names[VGPU_OP_COUNT] = {
        "nop",           "fill", "copy",        "dma_to_vram",
        "dma_from_vram", "axpy", "scatter_add", "fence"};

    g_string_append_printf(js, "  \"steps\": %u,\n", d->opts.steps);
    g_string_append_printf(js,
                           "  \"steps_source\": %u,\n  \"steps_during\": %u,\n"
                           "  \"steps_destination\": %u,\n",
                           d->mig.steps_before, d->mig.steps_during,
                           d->mig.steps_after);
    g_string_append(js, "  \"commands\": {");
    for (unsigned i = 1; i < VGPU_OP_COUNT; i++) {
        g_string_append_printf(js, "%s\"%s\": %" PRIu64, i > 1 ? ", " : "",
                               names[i], d->st.cmds[i]);
    }
    g_string_append_printf(
        js,
        "},\n  \"bytes_moved\": %" PRIu64 ",\n  \"fences\": %" PRIu64
        ",\n  \"msix_interrupts\": %" PRIu64 ",\n  \"checks\": %" PRIu64
        ",\n  \"elapsed_ms\": %.1f,\n",
        d->st.bytes_moved, d->st.fences, d->st.irqs, d->st.checks,
        d->st.elapsed_ms);
}

/* "  "name": value,\n" with null for an unknown (negative) value. */
static void json_num(GString *js, const char *name, double v, int prec)
{
    if (v < 0) {
        g_string_append_printf(js, "  \"%s\": null,\n", name);
    } else {
        g_string_append_printf(js, "  \"%s\": %.*f,\n", name, prec, v);
    }
}

static void json_str(GString *js, const char *name, const char *v)
{
    g_string_append_printf(js, "  \"%s\": \"%s\",\n", name, v);
}

/* Integer statistic @name of the source server, -1 if absent. */
static int64_t src_stat(const struct demo_mig *m, const char *name)
{
    int64_t v = -1;

    if (m->src.root) {
        vg_stats_int(&m->src, name, &v, NULL);
    }
    return v;
}

/* Source server figures reported as they are in its stats file. */
static const char *const src_stat_names[] = {
    "rounds", "final_dirty_bytes", "stopcopy_estimate_bytes", "stopcopy_bytes",
    "throttle_percent"};

static void json_migration(struct demo *d, GString *js)
{
    const struct demo_mig *m = &d->mig;

    json_str(js, "migration_status", m->info.status);
    json_num(js, "bytes_sent", m->src.root ? (double)m->src.bytes_sent : -1, 0);
    json_num(js, "ram_bytes", (double)m->info.ram_transferred, 0);
    json_num(js, "vfio_bytes", (double)m->info.vfio_transferred, 0);
    json_num(js, "total_ms", (double)m->info.total_time_ms, 0);
    json_num(js, "downtime_ms", (double)m->info.downtime_ms, 0);
    json_num(js, "device_stopcopy_ms",
             m->src.root ? m->src.device_stopcopy_ms : -1, 3);
    json_num(js, "downtime_limit_ms", d->opts.downtime_ms, 0);
    for (size_t i = 0; i < G_N_ELEMENTS(src_stat_names); i++) {
        json_num(js, src_stat_names[i], (double)src_stat(m, src_stat_names[i]),
                 0);
    }
    json_str(js, "src_vram_checksum", m->src.vram_checksum);
    json_str(js, "dst_vram_checksum", m->dst.vram_checksum);
    json_str(js, "src_device_state_checksum", m->src.device_state_checksum);
    json_str(js, "dst_device_state_checksum", m->dst.device_state_checksum);
    g_string_append_printf(js, "  \"device_state_equal\": %s,\n",
                           m->device_state_equal ? "true" : "false");
}

static int write_json(struct demo *d, bool ok, struct vg_error *err)
{
    g_autofree char *path =
        g_build_filename(d->opts.out_dir, "result.json", NULL);
    GString *js = g_string_new("{\n");
    GError *gerr = NULL;

    g_string_append_printf(js, "  \"vram_bytes\": %" PRIu64 ",\n",
                           d->gpu.vram_size);
    json_workload(d, js);
    json_migration(d, js);
    g_string_append_printf(js, "  \"verified\": %s\n}\n",
                           ok ? "true" : "false");
    if (g_mkdir_with_parents(d->opts.out_dir, 0755) < 0 ||
        !g_file_set_contents(path, js->str, (gssize)js->len, &gerr)) {
        vg_error_set(err, EIO, "cannot write %s: %s", path,
                     gerr ? gerr->message : g_strerror(errno));
        g_clear_error(&gerr);
        g_string_free(js, TRUE);
        return -EIO;
    }
    g_string_free(js, TRUE);
    printf("result: %s\n", path);
    return 0;
}

static void print_workload_summary(struct demo *d)
{
    uint64_t total = 0;

    for (unsigned i = 0; i < VGPU_OP_COUNT; i++) {
        total += d->st.cmds[i];
    }
    printf("\nworkload summary\n");
    printf("  VRAM                %" PRIu64 " MiB\n", d->gpu.vram_size >> 20);
    printf("  steps               %u (%u on the source, %u while migrating, "
           "%u on the destination)\n",
           d->opts.steps, d->mig.steps_before, d->mig.steps_during,
           d->mig.steps_after);
    printf("  commands            %" PRIu64 " (dma %" PRIu64 ", fill %" PRIu64
           ", copy %" PRIu64 ", axpy %" PRIu64 ", scatter_add %" PRIu64
           ", fence %" PRIu64 ")\n",
           total,
           d->st.cmds[VGPU_OP_DMA_TO_VRAM] + d->st.cmds[VGPU_OP_DMA_FROM_VRAM],
           d->st.cmds[VGPU_OP_FILL], d->st.cmds[VGPU_OP_COPY],
           d->st.cmds[VGPU_OP_AXPY], d->st.cmds[VGPU_OP_SCATTER_ADD],
           d->st.cmds[VGPU_OP_FENCE]);
    printf("  bytes moved         %.1f MiB\n",
           (double)d->st.bytes_moved / (1 << 20));
    printf("  fences / MSI-X      %" PRIu64 " / %" PRIu64 "\n", d->st.fences,
           d->st.irqs);
    printf("  checks passed       %" PRIu64 "\n", d->st.checks);
    printf("  time                %.0f ms\n", d->st.elapsed_ms);
}

static void print_migration_summary(struct demo *d)
{
    const struct demo_mig *m = &d->mig;

    printf("\nmigration summary\n");
    printf("  VRAM                %" PRIu64 " MiB\n", d->gpu.vram_size >> 20);
    printf("  device bytes sent   %.1f MiB (%.2f x VRAM)\n",
           (double)m->src.bytes_sent / (1 << 20),
           (double)m->src.bytes_sent / (double)d->gpu.vram_size);
    printf("  QEMU bytes          RAM %.1f MiB, vfio %.1f MiB\n",
           (double)m->info.ram_transferred / (1 << 20),
           (double)m->info.vfio_transferred / (1 << 20));
    printf("  total time          %" PRId64 " ms\n", m->info.total_time_ms);
    printf("  downtime (QEMU)     %" PRId64 " ms (limit %u ms)\n",
           m->info.downtime_ms, d->opts.downtime_ms);
    printf("  device stop-copy    %.1f ms\n", m->src.device_stopcopy_ms);
    printf("  rounds              %" PRId64 ", final dirty %.1f MiB, "
           "stop-copy %.1f MiB (estimate %.1f MiB), throttle %" PRId64 "%%\n",
           src_stat(m, "rounds"),
           (double)src_stat(m, "final_dirty_bytes") / (1 << 20),
           (double)src_stat(m, "stopcopy_bytes") / (1 << 20),
           (double)src_stat(m, "stopcopy_estimate_bytes") / (1 << 20),
           src_stat(m, "throttle_percent"));
    printf("  VRAM checksum       source %s, destination %s\n",
           m->src.vram_checksum, m->dst.vram_checksum);
    printf("  device state        %s\n",
           m->device_state_equal ? "equal" : "DIFFERENT");
}

/* ------------------------------------------------------------------ main */

/* Steps @first .. @first + @n - 1 with a progress line; @during: the
 * migration runs, check before each step that it is still in pre-copy. */
static int run_steps(struct demo *d, unsigned first, unsigned n, bool during,
                     struct vg_error *err)
{
    char what[64];
    int ret = 0;

    d->st.t0_us = d->st.t0_us ? d->st.t0_us : g_get_monotonic_time();
    for (unsigned s = first; ret == 0 && s < first + n; s++) {
        ret = during ? check_precopy(d, err) : 0;
        if (ret == 0) {
            ret = run_step(d, s, err);
        }
        d->st.elapsed_ms =
            (double)(g_get_monotonic_time() - d->st.t0_us) / 1000.0;
        if (during) {
            g_snprintf(what, sizeof(what), "pre-copy, step %u/%u", s + 1,
                       d->opts.steps);
            d->mig.last_progress_ms = 0;
            print_progress(d, &d->mig.info, what);
        } else {
            printf("\rstep %u/%u: %" PRIu64 " checks passed, %.0f ms", s + 1,
                   d->opts.steps, d->st.checks, d->st.elapsed_ms);
            fflush(stdout);
        }
    }
    if (!during) {
        printf("\n");
    }
    return ret;
}

static void split_steps(struct demo *d)
{
    struct demo_mig *m = &d->mig;

    m->steps_before = MAX(1u, d->opts.steps / 4);
    m->steps_during = MAX(1u, d->opts.steps / 2);
    m->steps_after = d->opts.steps - m->steps_before - m->steps_during;
}

static int run_demo(struct demo *d, struct vg_error *err)
{
    struct demo_mig *m = &d->mig;
    int ret;

    ret = start_vms(d, err);
    if (ret < 0) {
        return ret;
    }
    print_device(d);
    split_steps(d);
    ret = plan_layout(d, err);
    if (ret == 0) {
        ret = init_workload(d, err);
    }
    if (ret == 0) {
        printf("on the source:\n");
        ret = run_steps(d, 0, m->steps_before, false, err);
    }
    if (ret == 0) {
        ret = migrate_live(d, err);
    }
    if (ret == 0) {
        ret = switch_to_destination(d, err);
    }
    if (ret == 0) {
        printf("on the destination:\n");
        ret = run_steps(d, m->steps_before + m->steps_during, m->steps_after,
                        false, err);
    }
    return ret;
}

static void side_free(struct demo_side *side)
{
    vg_qemu_free(side->qemu);
    vg_server_free(side->server);
    g_free(side->stats);
}

static void demo_cleanup(struct demo *d, bool keep_dir)
{
    side_free(&d->src);
    side_free(&d->dst);
    vg_stats_clear(&d->mig.src);
    vg_stats_clear(&d->mig.dst);
    g_free(d->mig.uri);
    if (d->dir && keep_dir) {
        fprintf(stderr, "vgmig-demo: logs kept in %s\n", d->dir);
    } else if (d->dir) {
        vg_tmpdir_remove(d->dir, NULL);
    }
    g_free(d->dir);
    g_free(d->y_model);
    g_free(d->table_model);
    if (d->rng) {
        g_rand_free(d->rng);
    }
}

static void print_log_tail(const char *what, const struct vg_proc *p)
{
    g_autofree char *tail = vg_proc_log_tail(p, 1500);

    fprintf(stderr, "--- %s log (tail) ---\n%s\n", what, tail);
}

static void report_failure(struct demo *d, const struct vg_error *err)
{
    fprintf(stderr, "\nvgmig-demo: FAILED: %s\n", err->msg);
    if (d->src.server) {
        print_log_tail("source vgpu-server", &d->src.server->proc);
    }
    if (d->dst.server) {
        print_log_tail("destination vgpu-server", &d->dst.server->proc);
    }
    if (d->dst.qemu) {
        print_log_tail("destination QEMU", &d->dst.qemu->proc);
    }
}

int main(int argc, char **argv)
{
    struct demo d = {0};
    struct vg_error err = {0};
    int ret;

    vg_log_set_prog("vgmig-demo");
    if (parse_opts(argc, argv, &d.opts) < 0) {
        return 2;
    }
    vg_log_set_level(d.opts.log_level);
    d.rng = g_rand_new_with_seed(0x76676d67);
    ret = vg_tmpdir_create("demo", &d.dir, &err);
    if (ret == 0) {
        ret = run_demo(&d, &err);
    }
    if (ret == 0) {
        print_workload_summary(&d);
        print_migration_summary(&d);
    }
    if (d.gpu.vram_size && write_json(&d, ret == 0, ret ? NULL : &err) < 0 &&
        ret == 0) {
        ret = -EIO;
    }
    if (ret < 0) {
        report_failure(&d, &err);
    } else {
        printf("vgmig-demo: PASSED: migrated live, destination equal to the "
               "source at switchover, every result matched\n");
    }
    demo_cleanup(&d, ret < 0);
    return ret < 0 ? 1 : 0;
}
