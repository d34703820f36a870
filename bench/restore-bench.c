/*
 * restore-bench -- a vGPU VM restored from a save file with VRAM on
 * demand, against restoring everything first (docs/restore.md).
 *
 * For each VRAM size a VM whose VRAM the engines filled (no page of
 * zeros) is saved with QMP "migrate file:PATH", then restored by two
 * fresh destinations with "migrate-incoming file:PATH": one whose server
 * reads VRAM from the file on demand (the default), one started with
 * --no-restore-on-demand (every byte loaded before the VM runs).  Each
 * restore is timed from migrate-incoming to the VM running (query-status
 * polled every millisecond), and the on-demand one also to its last page
 * (the server's statistics); both restored VRAMs must have the source's
 * checksum.  The save file was just written, so it is read from the page
 * cache: the comparison is of the two ways of loading, not of the disk.
 * Prints a markdown section on stdout.
 */
#include <errno.h>
#include <getopt.h>
#include <glib.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/log.h"
#include "common/size.h"
#include "qclient/harness.h"
#include "qclient/migrate.h"
#include "qclient/qmp.h"
#include "qclient/vgpu-drv.h"
#include "vgpu/cmd.h"

#define GUEST_RAM_MIB 256
#define RAM_START     ((uint64_t)16 << 20)
#define PAGE_ARG      "64K"
#define RING_ENTRIES  256u
#define FILL_CHUNK    ((uint64_t)64 << 20)
#define WAIT_MS       600000
#define MAX_SIZES     8

struct result {
    uint64_t vram;
    uint64_t file_bytes;
    double eager_run_ms;  /* everything first: migrate-incoming to running */
    double demand_run_ms; /* on demand: the same */
    double demand_all_ms; /* on demand: to the last page */
    int64_t faults;       /* on demand: guest faults on missing pages */
    char backend[160];    /* the servers' VRAM backend */
};

static double now_ms(void)
{
    return (double)g_get_monotonic_time() / 1000.0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: restore-bench [--sizes LIST]\n"
            "\n"
            "Save a vGPU VM with VRAM filled to a file, restore it with VRAM\n"
            "on demand and with everything loaded first, and print the time\n"
            "from migrate-incoming to the VM running for both (markdown).\n"
            "Needs VGMIG_QEMU and VGMIG_SERVER (make bench sets them).\n"
            "\n"
            "  --sizes LIST   comma-separated VRAM sizes [1G,4G]\n"
            "  -h, --help     show this help and exit\n"
            "\n"
            "Exit status: 0 if every restore had the source's VRAM, 1 if\n"
            "not or on errors, 2 on usage errors.\n");
}

static int parse_sizes(const char *text, uint64_t *sizes, unsigned *n)
{
    g_auto(GStrv) parts = g_strsplit(text, ",", -1);

    *n = 0;
    for (unsigned i = 0; parts[i]; i++) {
        struct vg_error err = {0};

        if (*n == MAX_SIZES ||
            vg_parse_size(parts[i], FILL_CHUNK, 1ull << 40, &sizes[*n], &err) <
                0 ||
            sizes[*n] % FILL_CHUNK) {
            fprintf(stderr,
                    "restore-bench: --sizes: '%s' is not a size that is a "
                    "multiple of 64M (at most %u sizes)\n",
                    parts[i], MAX_SIZES);
            return -1;
        }
        (*n)++;
    }
    return *n ? 0 : -1;
}

struct side {
    struct vg_server *srv;
    struct vg_qemu *qemu;
    char *stats;
};

static int start_side(const char *dir, uint64_t vram, const char *name,
                      const char *const *extra, bool incoming, struct side *s,
                      struct vg_error *err)
{
    g_autofree char *size = g_strdup_printf("%" PRIu64 "M", vram >> 20);
    g_autofree char *qname = g_strdup_printf("qemu-%s", name);
    struct vg_server_opts so = {.dir = dir,
                                .vram = size,
                                .page_size = PAGE_ARG,
                                .log_level = "warn",
                                .name = name,
                                .extra_args = extra};
    struct vg_qemu_opts qo = {.dir = dir,
                              .name = qname,
                              .ram_mib = GUEST_RAM_MIB,
                              .incoming = incoming ? "defer" : NULL};
    int ret;

    s->stats = g_strdup_printf("%s/%s-stats.json", dir, name);
    so.stats_file = s->stats;
    ret = vg_server_start(&so, &s->srv, err);
    if (ret == 0) {
        qo.vgpu_sock = s->srv->socket;
        ret = vg_qemu_start(&qo, &s->qemu, err);
    }
    if (ret == 0) {
        vg_qmp_set_timeout(s->qemu->qmp, WAIT_MS);
    }
    return ret;
}

static void side_free(struct side *s)
{
    vg_qemu_free(s->qemu);
    vg_server_free(s->srv);
    g_free(s->stats);
    memset(s, 0, sizeof(*s));
}

/* Fill every byte of VRAM through the engines: no page of zeros. */
static int fill(struct side *s, uint64_t vram, struct vg_error *err)
{
    struct vg_galloc ram;
    struct vg_vgpu gpu;
    uint32_t status = 0;
    int ret;

    vg_galloc_init(&ram, RAM_START, (uint64_t)GUEST_RAM_MIB << 20);
    ret = vg_vgpu_open(s->qemu->qt, &ram, &gpu, err);
    if (ret == 0) {
        ret = vg_vgpu_ring_init(&gpu, &ram, RING_ENTRIES, err);
    }
    for (uint64_t i = 0; ret == 0 && i < vram / FILL_CHUNK; i++) {
        struct vgpu_cmd c =
            vgpu_cmd_make(VGPU_OP_FILL, i * FILL_CHUNK, FILL_CHUNK,
                          0x3f800000u + (uint32_t)i * 0x1011u, 0, 0, 0);

        ret = vg_vgpu_submit(&gpu, &c, 1, err);
        if (ret == 0) {
            ret = vg_vgpu_wait_idle(&gpu, WAIT_MS, &status, err);
        }
        if (ret == 0 && (status & VGPU_STATUS_HALTED)) {
            ret = vg_error_set(err, EIO, "the vGPU halted filling VRAM");
        }
    }
    return ret;
}

static bool have_checksum(const struct vg_stats *st, void *opaque)
{
    return st->vram_checksum[0] != 0;
}

/* Save a filled VM of @vram to @path; its VRAM checksum into @sum. */
static int save(const char *dir, uint64_t vram, const char *path, char *sum,
                struct vg_error *err)
{
    g_autofree char *uri = g_strdup_printf("file:%s", path);
    struct side s = {0};
    struct vg_mig_info info;
    struct vg_stats st = {0};
    int ret = start_side(dir, vram, "vgpu-src", NULL, false, &s, err);

    if (ret == 0) {
        ret = fill(&s, vram, err);
    }
    if (ret == 0) {
        ret = vg_mig_start(s.qemu->qmp, uri, err);
    }
    if (ret == 0) {
        ret =
            vg_mig_wait_completed(s.qemu->qmp, WAIT_MS, NULL, NULL, &info, err);
    }
    if (ret == 0) {
        ret = vg_stats_wait(s.stats, have_checksum, NULL, WAIT_MS, &st, err);
    }
    if (ret == 0) {
        snprintf(sum, sizeof(st.vram_checksum), "%s", st.vram_checksum);
    }
    vg_stats_clear(&st);
    side_free(&s);
    if (ret < 0) {
        vg_error_prefix(err, "saving %" PRIu64 " MiB", vram >> 20);
    }
    return ret;
}

/* migrate-incoming until the VM runs, polled every millisecond. */
static int incoming_until_running(struct side *s, const char *path, double *ms,
                                  struct vg_error *err)
{
    g_autofree char *args = g_strdup_printf("{\"uri\": \"file:%s\"}", path);
    double t0 = now_ms();
    char state[VG_MIG_STATUS_MAX] = "";
    int ret =
        vg_qmp_execute_json(s->qemu->qmp, "migrate-incoming", args, NULL, err);

    while (ret == 0 && strcmp(state, "running") != 0) {
        if (now_ms() - t0 > WAIT_MS) {
            return vg_error_set(err, ETIMEDOUT, "the restored VM never ran");
        }
        ret = vg_mig_runstate(s->qemu->qmp, state, sizeof(state), err);
        if (ret == 0 && strcmp(state, "running") != 0) {
            g_usleep(1000);
        }
    }
    *ms = now_ms() - t0;
    return ret;
}

static bool all_in(const struct vg_stats *st, void *opaque)
{
    g_autofree char *done = vg_stats_str(st, "postcopy_done");
    g_autofree char *lazy = vg_stats_str(st, "restore_on_demand");
    bool on_demand = lazy && strcmp(lazy, "true") == 0;

    return st->vram_checksum[0] &&
           (!on_demand || (done && strcmp(done, "true") == 0));
}

/* One restore of @path: to running in *@run_ms, to the last page in
 * *@all_ms; its checksum must be @sum, and it must have gone on demand
 * unless @eager. */
static int restore(const char *dir, uint64_t vram, const char *path,
                   const char *sum, bool eager, struct result *r,
                   struct vg_error *err)
{
    static const char *const no_demand[] = {"--no-restore-on-demand", NULL};
    struct side s = {0};
    struct vg_stats st = {0};
    double t0 = 0, run_ms = 0;
    g_autofree char *lazy = NULL;
    int ret = start_side(dir, vram, eager ? "vgpu-eager" : "vgpu-demand",
                         eager ? no_demand : NULL, true, &s, err);

    if (ret == 0) {
        t0 = now_ms();
        ret = incoming_until_running(&s, path, &run_ms, err);
    }
    if (ret == 0) {
        ret = vg_stats_wait(s.stats, all_in, NULL, WAIT_MS, &st, err);
    }
    if (ret == 0) {
        lazy = vg_stats_str(&st, "restore_on_demand");
        if (strcmp(st.vram_checksum, sum) != 0) {
            ret = vg_error_set(err, EIO, "restored VRAM checksum %s, saved %s",
                               st.vram_checksum, sum);
        } else if (!lazy || strcmp(lazy, eager ? "false" : "true") != 0) {
            ret = vg_error_set(err, EPROTO, "restore_on_demand is %s",
                               lazy ? lazy : "missing");
        }
    }
    if (ret == 0 && eager) {
        r->eager_run_ms = run_ms;
    } else if (ret == 0) {
        int64_t faults = 0;

        vg_stats_int(&st, "postcopy_faults", &faults, NULL);
        r->demand_run_ms = run_ms;
        g_autofree char *be = vg_stats_str(&st, "backend");

        r->demand_all_ms = now_ms() - t0;
        r->faults = faults;
        snprintf(r->backend, sizeof(r->backend), "%s", be ? be : "?");
    }
    vg_stats_clear(&st);
    side_free(&s);
    if (ret < 0) {
        vg_error_prefix(err, "restoring %" PRIu64 " MiB %s", vram >> 20,
                        eager ? "everything first" : "on demand");
    }
    return ret;
}

static int run_size(uint64_t vram, struct result *r, struct vg_error *err)
{
    g_autofree char *dir = NULL, *path = NULL;
    char sum[64] = "";
    struct stat st;
    int ret = vg_tmpdir_create("restore-bench", &dir, err);

    r->vram = vram;
    if (ret < 0) {
        return ret;
    }
    path = g_strdup_printf("%s/vm.sav", dir);
    ret = save(dir, vram, path, sum, err);
    if (ret == 0 && stat(path, &st) == 0) {
        r->file_bytes = (uint64_t)st.st_size;
    }
    if (ret == 0) {
        ret = restore(dir, vram, path, sum, true, r, err);
    }
    if (ret == 0) {
        ret = restore(dir, vram, path, sum, false, r, err);
    }
    vg_tmpdir_remove(dir, NULL);
    return ret;
}

static void report(const struct result *r, unsigned n)
{
    printf("## Restore on demand\n\n"
           "A VM with VRAM filled is saved with `migrate file:` and restored "
           "with `migrate-incoming file:` twice: with VRAM on demand from "
           "the file (the server's default) and with "
           "`--no-restore-on-demand` (everything loaded before the VM "
           "runs).  \"To running\" is from migrate-incoming to query-status "
           "saying running; \"all in\" is to the last page of VRAM loaded. "
           "Both restores' VRAM checksums equal the source's.  The file "
           "was just written (page cache).  Measured by `restore-bench` "
           "(`make bench`).  VRAM backend: %s.\n\n"
           "| VRAM | save file | everything first: to running | on demand: "
           "to running | ratio | on demand: all in | faults |\n"
           "|---|---|---|---|---|---|---|\n",
           n ? r[0].backend : "-");
    for (unsigned i = 0; i < n; i++) {
        printf("| %" PRIu64 " MiB | %.0f MiB | %.0f ms | %.0f ms | %.1fx | "
               "%.0f ms | %" PRId64 " |\n",
               r[i].vram >> 20, (double)r[i].file_bytes / 1048576.0,
               r[i].eager_run_ms, r[i].demand_run_ms,
               r[i].eager_run_ms /
                   (r[i].demand_run_ms > 0 ? r[i].demand_run_ms : 1),
               r[i].demand_all_ms, r[i].faults);
    }
    if (n >= 2) {
        printf("\nOn demand, the time to running at %" PRIu64
               " MiB is %.2fx that at %" PRIu64
               " MiB (issue 18's target: independent of VRAM size); "
               "everything first, %.2fx.\n",
               r[n - 1].vram >> 20,
               r[n - 1].demand_run_ms /
                   (r[0].demand_run_ms > 0 ? r[0].demand_run_ms : 1),
               r[0].vram >> 20,
               r[n - 1].eager_run_ms /
                   (r[0].eager_run_ms > 0 ? r[0].eager_run_ms : 1));
    }
    printf("\n");
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"sizes", required_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    uint64_t sizes[MAX_SIZES] = {1ull << 30, 4ull << 30};
    struct result res[MAX_SIZES] = {0};
    unsigned n = 2;
    int c;

    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (c == 'h') {
            usage(stdout);
            return 0;
        }
        if (c != 's' || parse_sizes(optarg, sizes, &n) < 0) {
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return 2;
    }
    for (unsigned i = 0; i < n; i++) {
        struct vg_error err = {0};

        fprintf(stderr, "restore-bench: %" PRIu64 " MiB...\n", sizes[i] >> 20);
        if (run_size(sizes[i], &res[i], &err) < 0) {
            fprintf(stderr, "restore-bench: %s\n", err.msg);
            return 1;
        }
    }
    report(res, n);
    return 0;
}
