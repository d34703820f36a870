/*
 * vgmig-bench -- the program behind `make bench`: live migration of a
 * vGPU VM for several VRAM sizes, workloads and migration modes.
 *
 * Every cell (VRAM size x workload x mode) starts two vgpu-servers and two
 * patched QEMUs (qclient/harness.h), fills the whole VRAM with non-zero
 * patterns (one FILL per 64 MiB), starts the workload, migrates with
 * QEMU's defaults except max-bandwidth (--max-bandwidth; downtime-limit
 * 300 ms, avail-switchover-bandwidth 0: QEMU decides the switchover) and
 * keeps the workload going from the poll callback until the migration
 * completes.  A cell that has not completed after its force time (longer
 * on a host whose RAM anchor is slow) gets a
 * downtime-limit of 60 s and a switchover bandwidth of 10 GiB/s, and is
 * marked "forced".  Both servers' VRAM checksums at switchover must match.
 * The cells go to OUT/results.json, a gnuplot data file to OUT/downtime.dat
 * and, with --doc, the table to a Markdown file.
 *
 * With --multi-vgpu SIZE, cells of a VM with one vGPU of SIZE and of a VM
 * with MULTI_VGPUS vGPUs of SIZE each (a vgpu-server each, the same
 * workload on every vGPU, mode "ours") compare QEMU's downtime: several
 * devices' stop-copy should run side by side (issue 17's target: at most
 * 1.2 x the one vGPU's).  They run --multi-rounds times, one vGPU and
 * several in turn, and are judged on the medians of QEMU's downtime to the
 * microsecond, from its vmstate_downtime_checkpoint trace points (the
 * source QEMU runs with -msg timestamp=on and that event): query-migrate's
 * whole milliseconds make a ratio of downtimes of a few ms jump by 20 to
 * 30 % either way.  They are reported on their own.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"
#include "common/size.h"
#include "bench-mig.h"
#include "ram-anchor.h"
#include "vgmig-bench.h"

static void usage(FILE *f)
{
    fprintf(
        f,
        "Usage: vgmig-bench [OPTION]...\n"
        "\n"
        "Live-migrate a VM with a vGPU for every VRAM size x workload x "
        "mode and\n"
        "record QEMU's downtime, the device's stop-copy time, total time, "
        "bytes\n"
        "on the wire, rounds and throttle; and for every size QEMU's own "
        "RAM\n"
        "migration of that many non-zero bytes (the RAM anchor), to "
        "compare the\n"
        "device's throughput with.  Needs $VGMIG_SERVER, $VGMIG_QEMU and\n"
        "$VGMIG_FIRMWARE like the tests.\n"
        "\n"
        "Workloads: idle, inference, training, sparse, cpu-writes, "
        "cpu-heavy.\n"
        "Modes: stop-copy (--precopy=none), precopy-notrack (iterative, "
        "none),\n"
        "gmig (one-shot, hash), ours (iterative, hybrid), postcopy (ours\n"
        "with postcopy-ram, switched over at once (migrate-start-postcopy "
        "right after migrate): VRAM then\n"
        "comes on demand while the VM runs on the destination).\n"
        "\n"
        "Options:\n"
        "  --sizes LIST      VRAM sizes, e.g. 256M,1G,4G [256M,1G,4G]\n"
        "  --workloads LIST  comma-separated workloads [all]\n"
        "  --modes LIST      comma-separated modes [all]\n"
        "  --big SIZE        sizes above SIZE run idle and inference only "
        "[1G]\n"
        "  --prealloc        every vgpu-server preallocates its VRAM\n"
        "                    and its migration data area (--prealloc;\n"
        "                    a cell starts once both are resident)\n"
        "                    and every QEMU (the cells'\n"
        "                    and the RAM anchors') its guest RAM\n"
        "                    (prealloc=on), so no side allocates\n"
        "                    memory while the stream goes: a source\n"
        "                    QEMU reading never-touched guest RAM\n"
        "                    would allocate it, which a running\n"
        "                    guest's QEMU does not\n"
        "  --channels N      migration channels of every cell: 1 is QEMU's "
        "one\n"
        "                    main channel; N > 1 turns multifd on with\n"
        "                    multifd-channels N on both sides [1]\n"
        "  --max-bandwidth SIZE\n"
        "                    QEMU's max-bandwidth, per second, for every\n"
        "                    cell and RAM anchor, e.g. 10G [%lldG]: above\n"
        "                    what the host moves, or the RAM anchor\n"
        "                    measures the cap\n"
        "  --downtime-limit MS\n"
        "                    QEMU's downtime-limit for every cell and RAM\n"
        "                    anchor, 1 to %d [%d]: QEMU switches over\n"
        "                    once it expects the stop-copy to take less;\n"
        "                    a cell that does not get there in time is\n"
        "                    forced (a limit of %d ms)\n"
        "  --page-size SIZE  every vgpu-server's dirty-tracking page,\n"
        "                    4K to 2M, a power of two [64K]; the\n"
        "                    workloads' shapes stay in 64 KiB pages\n"
        "  --no-data-plane   every vgpu-server serves the data requests on\n"
        "                    its control loop (--no-data-plane), as a\n"
        "                    server without the data plane's thread\n"
        "                    does: the baseline of the register reads'\n"
        "                    table\n"
        "  --no-data-vram    every vgpu-server refuses to let QEMU take\n"
        "                    stop-copy pages from a read-only view of\n"
        "                    VRAM (--no-data-vram), as a server without\n"
        "                    data_vram does: it then copies them into its\n"
        "                    shared area\n"
        "  --place-data      every QEMU has x-migration-place-data=on\n"
        "                    (patches 0078-0080; off by default): the\n"
        "                    source sends the stop-copy pages it takes\n"
        "                    from VRAM with their place, the destination\n"
        "                    receives them straight into its view of\n"
        "                    VRAM, populated during the pre-copy, and its\n"
        "                    server only checks them\n"
        "  --no-device-thread\n"
        "                    every vgpu-server steps its device on the\n"
        "                    thread that served the last request\n"
        "                    (--no-device-thread), as a server without the\n"
        "                    device's thread does: the guest's commands\n"
        "                    then wait while a pre-copy read is served\n"
        "  --src-backend LIST, --dst-backend LIST\n"
        "                    the source's and the destination's servers'\n"
        "                    --backend: cpu, cuda or cuda:N, or up to 4\n"
        "                    of them separated by commas, one per vGPU\n"
        "                    of a VM in turn; e.g. --dst-backend cuda:1\n"
        "                    on a machine with two GPUs, as between two\n"
        "                    hosts, or --src-backend cuda:0,cuda:1\n"
        "                    --dst-backend cuda:2,cuda:3 for a GPU per\n"
        "                    vGPU with --multi-vgpu [the source's:\n"
        "                    $VGMIG_SERVER_BACKEND, else the server's;\n"
        "                    the destination's: as the source's]\n"
        "  --no-ram-anchor   skip the RAM anchors: before the cells of "
        "each size,\n"
        "                    a VM without a vGPU whose guest RAM of that "
        "size\n"
        "                    is all non-zero migrates the same way, twice;\n"
        "                    the faster run's throughput is what the "
        "device's\n"
        "                    is compared with\n"
        "  --out DIR         results.json and downtime.dat go here "
        "[build/bench]\n"
        "  --doc FILE        also write the Markdown report to FILE\n"
        "  --cmdline TEXT    command to print in the report\n"
        "  --quick           smoke run: 256M, idle and sparse, all modes\n"
        "  --multi-vgpu SIZE also compare the downtime of a VM with %d\n"
        "                    vGPUs of SIZE with one of one vGPU of SIZE\n"
        "                    (idle and inference, mode ours; reported on\n"
        "                    their own, target <= %.1f x)\n"
        "  --multi-rounds N  run those cells N times (1 to %d), judged on\n"
        "                    the medians [3]\n"
        "  --keep            keep every cell's directory (logs, stats\n"
        "                    files); failed cells' are always kept\n"
        "  --append FILE     append FILE (output of another benchmark of\n"
        "                    the same run) to the report; up to 4 times\n"
        "  --log-level L     error, warn, info, debug or trace, for the\n"
        "                    bench and every vgpu-server it starts (their\n"
        "                    logs: a cell's directory, see --keep) [warn]\n"
        "  -h, --help        show this text\n"
        "\n"
        "Exit status: 0 if every cell completed with equal checksums, 1 "
        "otherwise,\n"
        "2 on bad usage.\n",
        BENCH_BANDWIDTH >> 30, MAX_DT_LIMIT_MS, BENCH_DT_MS, FORCE_DT_MS,
        MULTI_VGPUS, MULTI_TARGET, MAX_MULTI_ROUNDS);
}

/* ------------------------------------------------------------- options */

static int parse_sizes(const char *text, struct bench_opts *o)
{
    g_auto(GStrv) parts = g_strsplit(text, ",", -1);
    struct vg_error err = {0};

    o->nsizes = 0;
    for (unsigned i = 0; parts[i]; i++) {
        if (o->nsizes == MAX_SIZES ||
            vg_parse_size(parts[i], 256ull << 20, 16ull << 30,
                          &o->sizes[o->nsizes], &err) < 0) {
            fprintf(stderr, "vgmig-bench: --sizes: %s\n",
                    err.msg[0] ? err.msg : "too many sizes");
            return -1;
        }
        o->nsizes++;
    }
    return o->nsizes ? 0 : -1;
}

/* Comma-separated names of @names into a bit mask. */
static int parse_names(const char *opt, const char *text,
                       const char *const *names, unsigned n, unsigned *mask)
{
    g_auto(GStrv) parts = g_strsplit(text, ",", -1);

    *mask = 0;
    for (unsigned i = 0; parts[i]; i++) {
        unsigned k = 0;

        while (k < n && strcmp(names[k], parts[i]) != 0) {
            k++;
        }
        if (k == n) {
            fprintf(stderr, "vgmig-bench: --%s: unknown '%s'\n", opt, parts[i]);
            return -1;
        }
        *mask |= 1u << k;
    }
    return *mask ? 0 : -1;
}

static int parse_modes(const char *text, unsigned *mask)
{
    const char *names[MODE_COUNT];

    for (unsigned i = 0; i < MODE_COUNT; i++) {
        names[i] = modes[i].name;
    }
    return parse_names("modes", text, names, MODE_COUNT, mask);
}

static int parse_channels(const char *text, unsigned *channels)
{
    char *end;
    unsigned long v = strtoul(text, &end, 10);

    if (!*text || *end || v < 1 || v > MAX_CHANNELS) {
        fprintf(stderr, "vgmig-bench: --channels: '%s' is not 1 to %d\n", text,
                MAX_CHANNELS);
        return -1;
    }
    *channels = (unsigned)v;
    return 0;
}

static int parse_rounds(const char *text, unsigned *rounds)
{
    char *end;
    unsigned long v = strtoul(text, &end, 10);

    if (!*text || *end || v < 1 || v > MAX_MULTI_ROUNDS) {
        fprintf(stderr, "vgmig-bench: --multi-rounds: '%s' is not 1 to %d\n",
                text, MAX_MULTI_ROUNDS);
        return -1;
    }
    *rounds = (unsigned)v;
    return 0;
}

static int parse_downtime_limit(const char *text, int64_t *ms)
{
    char *end;
    unsigned long v = strtoul(text, &end, 10);

    if (!*text || *end || text[0] == '-' || v < 1 || v > MAX_DT_LIMIT_MS) {
        fprintf(stderr,
                "vgmig-bench: --downtime-limit: '%s' is not 1 to %d "
                "(milliseconds)\n",
                text, MAX_DT_LIMIT_MS);
        return -1;
    }
    *ms = (int64_t)v;
    return 0;
}

/* A vgpu-server --backend name: cpu, cuda or cuda:N. */
static bool backend_name_ok(const char *name)
{
    const char *n;

    if (!strcmp(name, "cpu") || !strcmp(name, "cuda")) {
        return true;
    }
    if (!g_str_has_prefix(name, "cuda:")) {
        return false;
    }
    n = name + strlen("cuda:");
    return *n && strlen(n) <= 3 && strspn(n, "0123456789") == strlen(n);
}

/* --@opt's @text: backend names separated by commas, one per vGPU in
 * turn, into @b (pointing into @text, which is split in place). */
static int parse_backends(const char *opt, char *text, struct backends *b)
{
    char *save = NULL, *name;

    b->text = g_strdup(text);
    b->n = 0;
    for (name = strtok_r(text, ",", &save); name;
         name = strtok_r(NULL, ",", &save)) {
        if (!backend_name_ok(name)) {
            fprintf(stderr,
                    "vgmig-bench: --%s: '%s' is not cpu, cuda or cuda:N\n", opt,
                    name);
            return -1;
        }
        if (b->n == MAX_VGPUS) {
            fprintf(stderr, "vgmig-bench: --%s: more than %d backends\n", opt,
                    MAX_VGPUS);
            return -1;
        }
        b->list[b->n++] = name;
    }
    if (b->n == 0) {
        fprintf(stderr, "vgmig-bench: --%s: no backend in '%s'\n", opt,
                b->text);
        return -1;
    }
    return 0;
}

/* The --backend of vGPU @i's server on one side, NULL for the default. */
const char *backend_of(const struct backends *b, unsigned i)
{
    return b->n ? b->list[i % b->n] : NULL;
}

static int parse_opt(int c, struct bench_opts *o)
{
    switch (c) {
    case 's':
        return parse_sizes(optarg, o);
    case 'w':
        return parse_names("workloads", optarg, wl_names, WL_COUNT,
                           &o->wl_mask);
    case 'm':
        return parse_modes(optarg, &o->mode_mask);
    case 'b':
        return vg_parse_size_opt("vgmig-bench", "big", optarg, 0, 1ull << 40,
                                 &o->big_limit);
    case 'C':
        return parse_channels(optarg, &o->channels);
    case 'o':
        o->out_dir = optarg;
        return 0;
    case 'd':
        o->doc = optarg;
        return 0;
    case 'c':
        o->cmdline = optarg;
        return 0;
    case 'N':
        o->ram_anchor = false;
        return 0;
    case 'q':
        o->quick = true;
        return 0;
    case 'M':
        return vg_parse_size_opt("vgmig-bench", "multi-vgpu", optarg,
                                 256ull << 20, 16ull << 30, &o->multi_size);
    case 'R':
        return parse_rounds(optarg, &o->multi_rounds);
    case 'k':
        o->keep = true;
        return 0;
    case 'P':
        o->prealloc = true;
        return 0;
    case 'p':
        o->no_data_plane = true;
        return 0;
    case 'T':
        o->no_device_thread = true;
        return 0;
    case 'V':
        o->no_data_vram = true;
        return 0;
    case 'U':
        o->place_data = true;
        return 0;
    case 'B':
        return vg_parse_size_opt("vgmig-bench", "max-bandwidth", optarg,
                                 1ull << 20, 1ull << 40, &o->max_bandwidth);
    case 'L':
        return parse_downtime_limit(optarg, &o->dt_limit_ms);
    case 'g':
        if (vg_parse_size_opt("vgmig-bench", "page-size", optarg, 4ull << 10,
                              2ull << 20, &o->track_page) < 0) {
            return -1;
        }
        if (o->track_page & (o->track_page - 1)) {
            fprintf(stderr,
                    "vgmig-bench: --page-size: %" PRIu64
                    " is not a power of two\n",
                    o->track_page);
            return -1;
        }
        return 0;
    case 'S':
        return parse_backends("src-backend", optarg, &o->src_backends);
    case 'D':
        return parse_backends("dst-backend", optarg, &o->dst_backends);
    case 'a':
        if (o->nappend == MAX_APPEND) {
            fprintf(stderr, "vgmig-bench: --append: at most %d files\n",
                    MAX_APPEND);
            return -1;
        }
        o->append[o->nappend++] = optarg;
        return 0;
    case 'l':
        if (!vg_log_parse_level(optarg, &o->log_level)) {
            fprintf(stderr, "vgmig-bench: --log-level: unknown '%s'\n", optarg);
            return -1;
        }
        o->log_level_name = optarg;
        return 0;
    default:
        usage(stderr);
        return -1;
    }
}

static int parse_opts(int argc, char **argv, struct bench_opts *o)
{
    static const struct option longopts[] = {
        {"sizes", required_argument, NULL, 's'},
        {"workloads", required_argument, NULL, 'w'},
        {"modes", required_argument, NULL, 'm'},
        {"big", required_argument, NULL, 'b'},
        {"channels", required_argument, NULL, 'C'},
        {"no-ram-anchor", no_argument, NULL, 'N'},
        {"out", required_argument, NULL, 'o'},
        {"doc", required_argument, NULL, 'd'},
        {"cmdline", required_argument, NULL, 'c'},
        {"quick", no_argument, NULL, 'q'},
        {"multi-vgpu", required_argument, NULL, 'M'},
        {"multi-rounds", required_argument, NULL, 'R'},
        {"keep", no_argument, NULL, 'k'},
        {"prealloc", no_argument, NULL, 'P'},
        {"no-data-plane", no_argument, NULL, 'p'},
        {"no-device-thread", no_argument, NULL, 'T'},
        {"no-data-vram", no_argument, NULL, 'V'},
        {"place-data", no_argument, NULL, 'U'},
        {"max-bandwidth", required_argument, NULL, 'B'},
        {"downtime-limit", required_argument, NULL, 'L'},
        {"page-size", required_argument, NULL, 'g'},
        {"src-backend", required_argument, NULL, 'S'},
        {"dst-backend", required_argument, NULL, 'D'},
        {"append", required_argument, NULL, 'a'},
        {"log-level", required_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;

    parse_sizes("256M,1G,4G", o);
    o->wl_mask = (1u << WL_COUNT) - 1;
    o->mode_mask = (1u << MODE_COUNT) - 1;
    o->big_limit = 1ull << 30;
    o->channels = 1;
    o->max_bandwidth = BENCH_BANDWIDTH;
    o->dt_limit_ms = BENCH_DT_MS;
    o->track_page = PAGE_SIZE;
    o->multi_rounds = 3;
    o->ram_anchor = true;
    o->out_dir = "build/bench";
    o->log_level = VG_LOG_WARN;
    o->log_level_name = "warn";
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
        fprintf(stderr, "vgmig-bench: unexpected argument '%s'\n",
                argv[optind]);
        return -1;
    }
    if (o->quick) {
        parse_sizes("256M", o);
        o->wl_mask = (1u << WL_IDLE) | (1u << WL_SPARSE);
    }
    return 0;
}

/* ---------------------------------------------------------------- main */

static bool wanted(const struct bench_opts *o, uint64_t vram, enum workload w)
{
    if (!(o->wl_mask & (1u << w))) {
        return false;
    }
    return vram <= o->big_limit || w == WL_IDLE || w == WL_INFER;
}

/* The RAM anchor of @size into @a, the faster verified one of
 * ANCHOR_RUNS runs (the strongest baseline: a run varies by 15 % here);
 * false if none was verified. */
static bool run_anchor(const struct bench_opts *o, uint64_t size,
                       struct ram_anchor *a)
{
    for (unsigned r = 0; r < ANCHOR_RUNS; r++) {
        struct vg_error err = {0};
        struct ram_anchor run = {.size = size,
                                 .channels = o->channels,
                                 .max_bandwidth = o->max_bandwidth,
                                 .dt_limit_ms = o->dt_limit_ms,
                                 .prealloc = o->prealloc,
                                 .total_ms = -1,
                                 .downtime_ms = -1,
                                 .setup_ms = -1};

        if (ram_anchor_run(&run, o->keep, &err) < 0) {
            fprintf(stderr, "vgmig-bench: %s\n", err.msg);
        }
        print_anchor(&run);
        if (r == 0 ||
            (run.verified &&
             (!a->verified || ram_anchor_bps(&run) > ram_anchor_bps(a)))) {
            *a = run;
        }
    }
    return a->verified;
}

/* The cells of size @vram from cells[@n] on, with the RAM anchor's
 * throughput @ram_bps (0: none); returns the new count. */
static unsigned run_size(const struct bench_opts *o, uint64_t vram,
                         double ram_bps, struct cell *cells, unsigned n,
                         unsigned *failed)
{
    for (unsigned w = 0; w < WL_COUNT; w++) {
        for (unsigned m = 0; m < MODE_COUNT && n < MAX_CELLS; m++) {
            if (!wanted(o, vram, w) || !(o->mode_mask & (1u << m))) {
                continue;
            }
            cells[n] = (struct cell){.wl = w,
                                     .mode = m,
                                     .vram = vram,
                                     .vgpus = 1,
                                     .channels = o->channels,
                                     .ram_bps = ram_bps,
                                     .downtime_ms = -1,
                                     .dt_limit_ms = o->dt_limit_ms,
                                     .downtime_trace_ms = -1,
                                     .total_ms = -1,
                                     .setup_ms = -1};
            *failed += run_cell(o, &cells[n]) < 0;
            print_cell(&cells[n]);
            n++;
        }
    }
    return n;
}

static unsigned run_all(const struct bench_opts *o, struct cell *cells,
                        struct anchors *an, unsigned *failed)
{
    unsigned n = 0;

    for (unsigned s = 0; s < o->nsizes; s++) {
        if (o->ram_anchor) {
            *failed += !run_anchor(o, o->sizes[s], &an->a[an->n++]);
        }
        n = run_size(o, o->sizes[s], ram_rate(an, o->sizes[s]), cells, n,
                     failed);
    }
    return n;
}

/* --multi-vgpu: idle and inference (those of --workloads), mode ours,
 * with one vGPU of the size and with MULTI_VGPUS of it, in turn, for
 * --multi-rounds rounds, forced no sooner than the slowest RAM anchor
 * allows; returns how many cells ran. */
static unsigned run_multi(const struct bench_opts *o, const struct anchors *an,
                          struct cell *cells, unsigned *failed)
{
    static const enum workload wls[] = {WL_IDLE, WL_INFER};
    unsigned n = 0;

    for (unsigned i = 0; o->multi_size && i < o->multi_rounds * 4; i++) {
        enum workload wl = wls[i / 2 % 2];
        unsigned v = i % 2 ? MULTI_VGPUS : 1;

        if (!(o->wl_mask & (1u << wl)) || n == MAX_MULTI_CELLS) {
            continue;
        }
        cells[n] = (struct cell){.wl = wl,
                                 .mode = MODE_OURS,
                                 .vram = o->multi_size,
                                 .vgpus = v,
                                 .channels = o->channels,
                                 .ram_bps = ram_rate_min(an),
                                 .downtime_ms = -1,
                                 .dt_limit_ms = o->dt_limit_ms,
                                 .downtime_trace_ms = -1,
                                 .total_ms = -1,
                                 .setup_ms = -1};
        *failed += run_cell(o, &cells[n]) < 0;
        printf("%u x ", v);
        print_cell(&cells[n]);
        n++;
    }
    return n;
}

int main(int argc, char **argv)
{
    static struct cell cells[MAX_CELLS];
    static struct cell multi[MAX_MULTI_CELLS];
    static struct anchors an;
    struct bench_opts o = {0};
    struct vg_error err = {0};
    unsigned n, nmulti, failed = 0;
    gint64 t0 = g_get_monotonic_time();
    int ret;

    vg_log_set_prog("vgmig-bench");
    if (parse_opts(argc, argv, &o) < 0) {
        return 2;
    }
    vg_log_set_level(o.log_level);
    if (g_mkdir_with_parents(o.out_dir, 0755) < 0) {
        fprintf(stderr, "vgmig-bench: cannot create %s: %s\n", o.out_dir,
                g_strerror(errno));
        return 1;
    }
    report_note_load();
    n = run_all(&o, cells, &an, &failed);
    nmulti = run_multi(&o, &an, multi, &failed);
    ret = report_write(&o, cells, n, multi, nmulti, &an,
                       (double)(g_get_monotonic_time() - t0) / 1e6, &err);
    if (ret < 0) {
        fprintf(stderr, "vgmig-bench: %s\n", err.msg);
    }
    report_print_summary(cells, n, multi, nmulti, &an);
    printf("vgmig-bench: %u cells and %u RAM anchors, %u failed, results in "
           "%s/results.json and ram-anchor.json\n",
           n, an.n, failed, o.out_dir);
    return ret < 0 || failed ? 1 : 0;
}
