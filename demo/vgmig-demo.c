/*
 * vgmig-demo -- the program behind `make demo`.
 *
 * Starts a vgpu-server and the patched QEMU (-accel qtest), finds the vGPU
 * on the PCI bus, and runs a workload through its command ring: uploads by
 * DMA, FILL, COPY, AXPY, SCATTER_ADD, downloads by DMA and fences with
 * MSI-X interrupts.  Every result is checked against a computation done
 * here; the summary is printed and written as JSON.
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
#include "qclient/vgpu-drv.h"
#include "vgpu/cmd.h"

#define GUEST_RAM_MIB  512
#define CHUNK          (1u << 20) /* bytes uploaded per step */
#define AXPY_COUNT     (64u * 1024)
#define SCATTER_ROWS   4096u
#define SCATTER_ROWLEN 256u
#define SCATTER_COUNT  1024u
#define WAIT_MS        60000

struct demo_opts {
    const char *out_dir;
    const char *vram;
    unsigned steps;
    enum vg_log_level log_level;
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
    double elapsed_ms;
};

struct demo {
    struct demo_opts opts;
    char *dir;
    struct vg_server *server;
    struct vg_qemu *qemu;
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
    fprintf(f,
            "Usage: vgmig-demo [OPTION]...\n"
            "\n"
            "Run a vGPU VM and a workload on its vGPU, and check every "
            "result.\n"
            "\n"
            "Starts $VGMIG_SERVER (vgpu-server) and $VGMIG_QEMU (the patched "
            "QEMU,\n"
            "-accel qtest, firmware from $VGMIG_FIRMWARE), finds the vGPU on "
            "the PCI\n"
            "bus, then for each step uploads data by DMA, runs FILL, COPY, "
            "AXPY and\n"
            "SCATTER_ADD, downloads the result by DMA and waits for a fence "
            "and its\n"
            "MSI-X interrupt.  The results are compared with the same "
            "computation\n"
            "done by this program.\n"
            "\n"
            "Options:\n"
            "  --out DIR         write result.json to DIR [build/demo]\n"
            "  --vram SIZE       VRAM of the vGPU, e.g. 64M, 1G [256M]\n"
            "  --steps N         workload steps, 1..1000 [8]\n"
            "  --log-level L     error, warn, info, debug or trace [info]\n"
            "  -h, --help        show this text\n"
            "\n"
            "Exit status: 0 if every check passed, 1 on a failed check or "
            "error,\n"
            "2 on bad usage.\n");
}

static int parse_opts(int argc, char **argv, struct demo_opts *o)
{
    static const struct option longopts[] = {
        {"out", required_argument, NULL, 'o'},
        {"vram", required_argument, NULL, 'v'},
        {"steps", required_argument, NULL, 's'},
        {"log-level", required_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct vg_error err = {0};
    uint64_t n;
    int c;

    *o = (struct demo_opts){"build/demo", "256M", 8, VG_LOG_INFO};
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'o':
            o->out_dir = optarg;
            break;
        case 'v':
            if (vg_parse_size(optarg, 16u << 20, 4ull << 30, &n, &err) < 0) {
                fprintf(stderr, "vgmig-demo: --vram: %s\n", err.msg);
                return -1;
            }
            o->vram = optarg;
            break;
        case 's':
            if (vg_parse_size(optarg, 1, 1000, &n, &err) < 0) {
                fprintf(stderr, "vgmig-demo: --steps: %s\n", err.msg);
                return -1;
            }
            o->steps = (unsigned)n;
            break;
        case 'l':
            if (!vg_log_parse_level(optarg, &o->log_level)) {
                fprintf(stderr, "vgmig-demo: --log-level: unknown level '%s'\n",
                        optarg);
                return -1;
            }
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
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

static int start_vm(struct demo *d, struct vg_error *err)
{
    struct vg_server_opts so = {.dir = d->dir,
                                .vram = d->opts.vram,
                                .page_size = "64K",
                                .log_level = "warn"};
    struct vg_qemu_opts qo = {.dir = d->dir,
                              .name = "qemu",
                              .ram_mib = GUEST_RAM_MIB,
                              .vgpu_sock = NULL};
    int ret;

    ret = vg_server_start(&so, &d->server, err);
    if (ret < 0) {
        vg_error_prefix(err, "starting vgpu-server");
        return ret;
    }
    qo.vgpu_sock = d->server->socket;
    ret = vg_qemu_start(&qo, &d->qemu, err);
    if (ret < 0) {
        vg_error_prefix(err, "starting QEMU");
        return ret;
    }
    vg_galloc_init(&d->ram, 16u << 20, (uint64_t)GUEST_RAM_MIB << 20);
    ret = vg_vgpu_open(d->qemu->qt, &d->ram, &d->gpu, err);
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

static int write_json(struct demo *d, bool ok, struct vg_error *err)
{
    static const char *const names[VGPU_OP_COUNT] = {
        "nop",           "fill", "copy",        "dma_to_vram",
        "dma_from_vram", "axpy", "scatter_add", "fence"};
    g_autofree char *path =
        g_build_filename(d->opts.out_dir, "result.json", NULL);
    GString *js = g_string_new("{\n");
    GError *gerr = NULL;

    g_string_append_printf(js, "  \"vram_bytes\": %" PRIu64 ",\n",
                           d->gpu.vram_size);
    g_string_append_printf(js, "  \"steps\": %u,\n", d->opts.steps);
    g_string_append(js, "  \"commands\": {");
    for (unsigned i = 1; i < VGPU_OP_COUNT; i++) {
        g_string_append_printf(js, "%s\"%s\": %" PRIu64, i > 1 ? ", " : "",
                               names[i], d->st.cmds[i]);
    }
    g_string_append_printf(
        js,
        "},\n  \"bytes_moved\": %" PRIu64 ",\n  \"fences\": %" PRIu64
        ",\n  \"msix_interrupts\": %" PRIu64 ",\n  \"checks\": %" PRIu64
        ",\n  \"elapsed_ms\": %.1f,\n  \"verified\": %s\n}\n",
        d->st.bytes_moved, d->st.fences, d->st.irqs, d->st.checks,
        d->st.elapsed_ms, ok ? "true" : "false");
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

static void print_summary(struct demo *d)
{
    uint64_t total = 0;

    for (unsigned i = 0; i < VGPU_OP_COUNT; i++) {
        total += d->st.cmds[i];
    }
    printf("\nworkload summary\n");
    printf("  VRAM                %" PRIu64 " MiB\n", d->gpu.vram_size >> 20);
    printf("  steps               %u\n", d->opts.steps);
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

static int run_demo(struct demo *d, struct vg_error *err)
{
    gint64 t0;
    int ret;

    ret = start_vm(d, err);
    if (ret < 0) {
        return ret;
    }
    print_device(d);
    ret = plan_layout(d, err);
    if (ret == 0) {
        ret = init_workload(d, err);
    }
    t0 = g_get_monotonic_time();
    for (unsigned s = 0; ret == 0 && s < d->opts.steps; s++) {
        ret = run_step(d, s, err);
        d->st.elapsed_ms = (double)(g_get_monotonic_time() - t0) / 1000.0;
        printf("\rstep %u/%u: %" PRIu64 " checks passed, %.0f ms", s + 1,
               d->opts.steps, d->st.checks, d->st.elapsed_ms);
        fflush(stdout);
    }
    printf("\n");
    return ret;
}

static void demo_cleanup(struct demo *d)
{
    if (d->qemu) {
        vg_qemu_free(d->qemu);
    }
    if (d->server) {
        vg_server_free(d->server);
    }
    if (d->dir) {
        vg_tmpdir_remove(d->dir, NULL);
        g_free(d->dir);
    }
    g_free(d->y_model);
    g_free(d->table_model);
    if (d->rng) {
        g_rand_free(d->rng);
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
        print_summary(&d);
    }
    if (d.gpu.vram_size && write_json(&d, ret == 0, ret ? NULL : &err) < 0 &&
        ret == 0) {
        ret = -EIO;
    }
    if (ret < 0) {
        fprintf(stderr, "vgmig-demo: FAILED: %s\n", err.msg);
        if (d.server) {
            g_autofree char *tail = vg_proc_log_tail(&d.server->proc, 2000);
            fprintf(stderr, "--- vgpu-server log (tail) ---\n%s\n", tail);
        }
    } else {
        printf("vgmig-demo: PASSED: every result matched\n");
    }
    demo_cleanup(&d);
    return ret < 0 ? 1 : 0;
}
