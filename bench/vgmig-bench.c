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
#include <glib.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <xxhash.h>

#include "common/error.h"
#include "common/log.h"
#include "common/median.h"
#include "common/size.h"
#include "bench-mig.h"
#include "ram-anchor.h"
#include "reg-probe.h"
#include "report-text.h"
#include "qclient/cpu-writer.h"
#include "qclient/harness.h"
#include "qclient/io.h"
#include "qclient/migrate.h"
#include "qclient/qtest.h"
#include "qclient/vfio-trace.h"
#include "qclient/vgpu-drv.h"
#include "vfio-user/vfu-server.h"
#include "vgpu/cmd.h"

/* --prealloc: a server's VRAM must be resident within this, plus this
 * per MiB (first touches ran at 477-677 MB/s on the 2-core VMs). */
#define PREALLOC_WAIT_MS    20000
#define PREALLOC_MS_PER_MIB 10

#define GUEST_RAM_MIB    256
#define RAM_START        ((uint64_t)16 << 20)
#define PAGE_SIZE        (64u << 10)
#define PAGE_ARG         "64K"
#define RING_ENTRIES     256u
#define FILL_CHUNK       ((uint64_t)64 << 20)
#define WAIT_MS          120000
#define STATS_WAIT_MS    60000
#define MAX_SIZES        8
#define MAX_CELLS        256
#define FORCE_DT_MS      60000
#define FORCE_SW_BW      (10ll << 30)
#define IDX_OFF          0u                   /* index arrays, never written */
#define TABLE_OFF        ((uint64_t)16 << 20) /* sparse table start */
#define ACT_BYTES        ((uint64_t)64 << 20) /* inference activations */
#define ACT_ROW          4096u
#define ACT_ROWS         ((uint32_t)(ACT_BYTES / ACT_ROW))
#define SPARSE_IDX       65536u
#define SPARSE_RATE      1600u  /* pages per second */
#define CPU_RATE         800u   /* 4-byte writes to random pages per second */
#define HEAVY_RATE       35000u /* 8-64 byte writes per second, asked for */
#define HEAVY_HOT        ((uint64_t)4 << 20) /* hot set of 60% of them */
#define HEAVY_HOT_PCT    60u
#define HEAVY_STRADDLE   10u /* percent crossing a 64 KiB page boundary */
#define WRITE_SLICE_MS   60  /* guest CPU writing per poll sample */
#define DT_SLACK_MS      50  /* downtime target: limit + this */
#define EST_SLACK        ((int64_t)1 << 20) /* sent <= 1.2 x est + this */
#define MAX_PER_TICK     512u
#define FORCE_BASE_MS    5000 /* force after this + per GiB at the latest, */
#define FORCE_PER_GIB_MS 5000
#define FORCE_PASSES     2 /* or + this many passes at the RAM anchor's rate */
#define ANCHOR_RUNS      2 /* runs of each RAM anchor; the faster counts */
#define FORCE_AFTER_MS   3000 /* after a full pass, or with no pre-copy */
#define QMP_TIMEOUT_MS   300000
#define RATE_MIN_BYTES   ((int64_t)1 << 20) /* less: mostly fixed cost */
#define MAX_VGPUS        4
#define PROBE_BEFORE     40          /* timed register reads before migrating */
#define PROBE_PER_TICK   4           /* and at each poll while it is active */
#define PROBE_MAX        4096        /* at most */
#define FENCE_BEFORE     20          /* timed FENCE commands before migrating */
#define FENCE_TIMEOUT_MS 200         /* one not done by then is not timed */
#define FENCE_BASE       0xfe000000u /* the probe's fence values */
#define MULTI_VGPUS      2           /* vGPUs of the --multi-vgpu cells */
#define MULTI_TARGET     1.2         /* their downtime / one vGPU's, at most */
#define MAX_MULTI_ROUNDS 9
#define MAX_MULTI_CELLS  (4 * MAX_MULTI_ROUNDS)

enum workload {
    WL_IDLE,
    WL_INFER,
    WL_TRAIN,
    WL_SPARSE,
    WL_CPU,
    WL_CPU_HEAVY,
    WL_COUNT
};

static const char *const wl_names[WL_COUNT] = {
    "idle", "inference", "training", "sparse", "cpu-writes", "cpu-heavy"};

struct mode {
    const char *name;
    const char *precopy;
    const char *track;
    bool postcopy; /* postcopy-ram, switched over at once (see migrate) */
};

enum {
    MODE_STOPCOPY,
    MODE_NOTRACK,
    MODE_GMIG,
    MODE_OURS,
    MODE_POSTCOPY,
    MODE_COUNT
};

static const struct mode modes[MODE_COUNT] = {
    {"stop-copy", "none", "none", false},
    {"precopy-notrack", "iterative", "none", false},
    {"gmig", "one-shot", "hash", false},
    {"ours", "iterative", "hybrid", false},
    {"postcopy", "iterative", "hybrid", true},
};

#define MAX_APPEND   4  /* --append files */
#define MAX_CHANNELS 64 /* --channels */

struct bench_opts {
    uint64_t sizes[MAX_SIZES];
    unsigned nsizes;
    unsigned wl_mask;
    unsigned mode_mask;
    uint64_t big_limit; /* sizes above run only idle and inference */
    unsigned channels;  /* migration channels: > 1 is multifd */
    bool ram_anchor;    /* a RAM anchor per size */
    const char *out_dir;
    const char *doc;
    const char *cmdline;
    bool quick;
    uint64_t multi_size;            /* --multi-vgpu, 0: none */
    unsigned multi_rounds;          /* --multi-rounds */
    bool keep;                      /* keep every cell's directory */
    const char *append[MAX_APPEND]; /* files appended to the report */
    unsigned nappend;
    enum vg_log_level log_level;
    bool prealloc;          /* servers --prealloc, QEMUs prealloc=on */
    bool no_data_plane;     /* servers --no-data-plane */
    bool no_device_thread;  /* servers --no-device-thread */
    bool no_data_vram;      /* servers --no-data-vram */
    bool place_data;        /* sources' x-migration-place-data=on */
    uint64_t max_bandwidth; /* --max-bandwidth, bytes per second */
    /* --src-backend and --dst-backend: vGPU i's server takes entry i
     * modulo their count; NULL: $VGMIG_SERVER_BACKEND, else the server's */
    struct backends {
        char *list[MAX_VGPUS];
        unsigned n;
        char *text; /* as given */
    } src_backends, dst_backends;
};

/* What a probe took (reg-probe.h), us: the median before the migration;
 * the median, 90th and 99th percentiles while it was active (-1: none). */
struct probe_result {
    double before_us, p50_us, p90_us, p99_us;
    unsigned n; /* taken while active */
};

/* One measured cell. */
struct cell {
    enum workload wl;
    unsigned mode;
    uint64_t vram;     /* of each vGPU */
    unsigned vgpus;    /* of the VM */
    unsigned channels; /* --channels */
    double ram_bps;    /* its size's RAM anchor throughput; 0: none */
    int64_t downtime_ms, total_ms;
    double downtime_trace_ms; /* the same to the microsecond, -1: none */
    /* Each of vg_downtime_points, ms after src-downtime-start, -1: none */
    double point_ms[VG_DOWNTIME_POINTS];
    int64_t
        setup_ms; /* QEMU's setup phase, the devices' PRE_COPY entry in it */
    double stopcopy_ms;
    double stopcopy_read_ms; /* of it, the source producing the data */
    int64_t bytes_sent, precopy_bytes, stopcopy_bytes, final_dirty;
    int64_t estimate; /* the last stop-copy estimate QEMU got */
    int64_t rounds, throttle;
    uint64_t cpu_writes;      /* guest CPU writes that reached VRAM in time */
    uint64_t cpu_uncertain;   /* in flight at the stop, or after it */
    double cpu_rate;          /* writes per second achieved */
    double stream_bps;        /* this cell's device pre-copy rate */
    int64_t postcopy_bytes;   /* post-copy: pages the page channel moved */
    double postcopy_ms;       /* ...from the load's end to the last page */
    int64_t reads, writes;    /* the servers' pre-copy reads, load writes */
    double read_ms, write_ms; /* ...and the time inside them */
    /* The first vGPU's STATUS read through qtest (reg-probe.h), and a
     * FENCE command's round trip on it in the cells whose workload gives
     * its engines nothing (fence_probed()). */
    struct probe_result reg, fence;
    bool forced, verified;
    char error[VG_MIG_TEXT_MAX];
};

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

/* The RAM anchors of the run, one per size (ram-anchor.h). */
struct anchors {
    struct ram_anchor a[MAX_SIZES];
    unsigned n;
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
        "  --log-level L     error, warn, info, debug or trace [warn]\n"
        "  -h, --help        show this text\n"
        "\n"
        "Exit status: 0 if every cell completed with equal checksums, 1 "
        "otherwise,\n"
        "2 on bad usage.\n",
        BENCH_BANDWIDTH >> 30, MULTI_VGPUS, MULTI_TARGET, MAX_MULTI_ROUNDS);
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
static const char *backend_of(const struct backends *b, unsigned i)
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
    o->multi_rounds = 3;
    o->ram_anchor = true;
    o->out_dir = "build/bench";
    o->log_level = VG_LOG_WARN;
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
    const char *extra[7] = {pa, ta};
    unsigned nextra = 2;
    struct vg_server_opts so = {.dir = r->dir,
                                .vram = vram,
                                .page_size = PAGE_ARG,
                                .log_level = "warn",
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
static int start_cpu_writer(struct run *r, struct vg_error *err)
{
    bool heavy = r->c->wl == WL_CPU_HEAVY;
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
        .batch = heavy ? 256 : 16,
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
                            r->o->max_bandwidth, &uri, err);
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

static void record_stats(struct cell *c, const struct vg_stats *s)
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
    c->postcopy_bytes = MAX(stat_or(s, "postcopy_served"), 0) * PAGE_SIZE;
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
    vg_cpu_writer_checksums(r->cw, r->image, PAGE_SIZE, sums);
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

    record_stats(&one, s);
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
        record_stats(r->c, &s);
        ret = verify_cpu(r, &s, &d, err);
    } else if (ret == 0) {
        record_stats(r->c, &s);
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

static int run_cell(const struct bench_opts *o, struct cell *c)
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

/* ------------------------------------------------------------- report */

/* Stream throughput for @vram: the idle "ours" cell's pre-copy rate, else
 * the highest rate of any cell of that size. */
static double stream_rate(const struct cell *cells, unsigned n, uint64_t vram)
{
    double best = 0;

    for (unsigned i = 0; i < n; i++) {
        const struct cell *c = &cells[i];

        if (c->vram != vram) {
            continue;
        }
        if (c->wl == WL_IDLE && c->mode == MODE_OURS && c->stream_bps > 0) {
            return c->stream_bps;
        }
        best = MAX(best, c->stream_bps);
    }
    return best;
}

static double floor_ms(const struct cell *c, double rate)
{
    return rate > 0 && c->final_dirty >= 0
               ? (double)c->final_dirty * 1000.0 / rate
               : -1;
}

/* The verified RAM anchor of @size in @an, or NULL. */
static const struct ram_anchor *find_anchor(const struct anchors *an,
                                            uint64_t size)
{
    for (unsigned i = 0; i < an->n; i++) {
        if (an->a[i].size == size && an->a[i].verified) {
            return &an->a[i];
        }
    }
    return NULL;
}

/* The RAM anchor's throughput for @size; 0 without one. */
static double ram_rate(const struct anchors *an, uint64_t size)
{
    const struct ram_anchor *a = find_anchor(an, size);

    return a ? ram_anchor_bps(a) : 0;
}

/* The slowest verified RAM anchor's throughput; 0 without one. */
static double ram_rate_min(const struct anchors *an)
{
    double min = 0;

    for (unsigned i = 0; i < an->n; i++) {
        double bps = an->a[i].verified ? ram_anchor_bps(&an->a[i]) : 0;

        if (bps > 0 && (min == 0 || bps < min)) {
            min = bps;
        }
    }
    return min;
}

static void json_cell(GString *js, const struct cell *c, double rate,
                      double ram)
{
    g_autofree char *error = report_json_text(c->error);

    g_string_append_printf(
        js,
        "  {\"workload\": \"%s\", \"vram_bytes\": %" PRIu64
        ", \"vgpus\": %u, \"mode\": \"%s\", \"precopy\": \"%s\", "
        "\"dirty_track\": \"%s\", \"channels\": %u, "
        "\"downtime_ms\": %" PRId64 ", \"downtime_trace_ms\": %.3f, "
        "\"device_stopcopy_ms\": %.3f, "
        "\"stopcopy_read_ms\": %.3f, \"total_ms\": %" PRId64
        ", \"setup_ms\": %" PRId64 ", \"bytes_sent\": %" PRId64
        ", \"precopy_bytes\": %" PRId64 ", \"stopcopy_bytes\": %" PRId64
        ", \"nonzero_vram_bytes\": %" PRIu64 ", \"final_dirty_bytes\": %" PRId64
        ", \"stream_bytes_per_s\": %.0f, \"cell_precopy_bytes_per_s\": %.0f, "
        "\"floor_ms\": %.3f, \"ram_anchor_bytes_per_s\": %.0f, "
        "\"floor_ram_ms\": %.3f, \"stopcopy_estimate_bytes\": %" PRId64
        ", \"rounds\": %" PRId64 ", \"throttle\": %" PRId64
        ", \"cpu_writes_before_stop\": %" PRIu64
        ", \"cpu_writes_uncertain\": %" PRIu64 ", \"cpu_writes_per_s\": %.0f"
        ", \"postcopy_bytes\": %" PRId64 ", \"postcopy_ms\": %.3f"
        ", \"precopy_reads\": %" PRId64 ", \"precopy_read_ms\": %.3f"
        ", \"load_writes\": %" PRId64 ", \"load_write_ms\": %.3f"
        ", \"reg_read_before_us\": %.1f, \"reg_reads\": %u"
        ", \"reg_read_p50_us\": %.1f, \"reg_read_p90_us\": %.1f"
        ", \"reg_read_p99_us\": %.1f, \"fence_before_us\": %.1f"
        ", \"fences\": %u, \"fence_p50_us\": %.1f, \"fence_p90_us\": %.1f"
        ", \"fence_p99_us\": %.1f, \"forced\": %s, \"verified\": %s, "
        "\"error\": \"%s\", \"downtime_points_ms\": {",
        wl_names[c->wl], c->vram, c->vgpus, modes[c->mode].name,
        modes[c->mode].precopy, modes[c->mode].track, c->channels,
        c->downtime_ms, c->downtime_trace_ms, c->stopcopy_ms,
        c->stopcopy_read_ms, c->total_ms, c->setup_ms, c->bytes_sent,
        c->precopy_bytes, c->stopcopy_bytes, c->vram * c->vgpus, c->final_dirty,
        rate, c->stream_bps, floor_ms(c, rate), ram, floor_ms(c, ram),
        c->estimate, c->rounds, c->throttle, c->cpu_writes, c->cpu_uncertain,
        c->cpu_rate, c->postcopy_bytes, c->postcopy_ms, c->reads, c->read_ms,
        c->writes, c->write_ms, c->reg.before_us, c->reg.n, c->reg.p50_us,
        c->reg.p90_us, c->reg.p99_us, c->fence.before_us, c->fence.n,
        c->fence.p50_us, c->fence.p90_us, c->fence.p99_us,
        c->forced ? "true" : "false", c->verified ? "true" : "false", error);
    for (unsigned p = 0; p < VG_DOWNTIME_POINTS; p++) {
        g_string_append_printf(js, "%s\"%s\": %.3f", p ? ", " : "",
                               vg_downtime_points[p], c->point_ms[p]);
    }
    g_string_append(js, "}}");
}

static int write_file(const char *path, const GString *s, struct vg_error *err)
{
    GError *gerr = NULL;

    if (!g_file_set_contents(path, s->str, (gssize)s->len, &gerr)) {
        vg_error_set(err, EIO, "cannot write %s: %s", path, gerr->message);
        g_error_free(gerr);
        return -EIO;
    }
    return 0;
}

static void json_anchor(GString *js, const struct ram_anchor *a)
{
    g_autofree char *error = report_json_text(a->error);

    g_string_append_printf(
        js,
        "  {\"ram_bytes\": %" PRIu64
        ", \"channels\": %u, \"max_bandwidth\": %" PRId64
        ", \"prealloc\": %s, \"total_ms\": %" PRId64 ", \"setup_ms\": %" PRId64
        ", \"downtime_ms\": %" PRId64 ", \"transferred_bytes\": %" PRId64
        ", \"bytes_per_s\": %.0f, "
        "\"active_bytes_per_s\": %.0f, \"checksum\": \"%016" PRIx64
        "\", \"verified\": %s, \"error\": \"%s\"}",
        a->size, a->channels, a->max_bandwidth, a->prealloc ? "true" : "false",
        a->total_ms, a->setup_ms, a->downtime_ms, a->ram_bytes,
        ram_anchor_bps(a), a->active_bps, a->checksum,
        a->verified ? "true" : "false", error);
}

/* OUT/ram-anchor.json: the RAM anchors. */
static int write_anchor_json(const struct bench_opts *o,
                             const struct anchors *an, struct vg_error *err)
{
    g_autofree char *path =
        g_build_filename(o->out_dir, "ram-anchor.json", NULL);
    GString *js = g_string_new("[\n");
    int ret;

    for (unsigned i = 0; i < an->n; i++) {
        json_anchor(js, &an->a[i]);
        g_string_append(js, i + 1 < an->n ? ",\n" : "\n");
    }
    g_string_append(js, "]\n");
    ret = write_file(path, js, err);
    g_string_free(js, TRUE);
    return ret;
}

static int write_json(const struct bench_opts *o, const struct cell *cells,
                      unsigned n, const struct anchors *an,
                      struct vg_error *err)
{
    g_autofree char *path = g_build_filename(o->out_dir, "results.json", NULL);
    GString *js = g_string_new("[\n");
    int ret;

    for (unsigned i = 0; i < n; i++) {
        json_cell(js, &cells[i], stream_rate(cells, n, cells[i].vram),
                  ram_rate(an, cells[i].vram));
        g_string_append(js, i + 1 < n ? ",\n" : "\n");
    }
    g_string_append(js, "]\n");
    ret = write_file(path, js, err);
    g_string_free(js, TRUE);
    return ret < 0 ? ret : write_anchor_json(o, an, err);
}

/* downtime.dat: one block per mode (workload idle and inference, the
 * series of the plot): "MiB downtime_ms stopcopy_ms". */
static int write_plot_data(const struct bench_opts *o, const struct cell *cells,
                           unsigned n, struct vg_error *err)
{
    g_autofree char *path = g_build_filename(o->out_dir, "downtime.dat", NULL);
    GString *s = g_string_new("");
    int ret;

    for (unsigned w = 0; w < 2; w++) {
        for (unsigned m = 0; m < MODE_COUNT; m++) {
            g_string_append_printf(s, "# %s %s\n", wl_names[w], modes[m].name);
            for (unsigned i = 0; i < n; i++) {
                const struct cell *c = &cells[i];

                if (c->wl == w && c->mode == m && c->downtime_ms >= 0) {
                    g_string_append_printf(s, "%" PRIu64 " %" PRId64 " %.3f\n",
                                           c->vram >> 20, c->downtime_ms,
                                           c->stopcopy_ms);
                }
            }
            g_string_append(s, "\n\n");
        }
    }
    ret = write_file(path, s, err);
    g_string_free(s, TRUE);
    return ret;
}

static const struct cell *find_cell(const struct cell *cells, unsigned n,
                                    enum workload wl, uint64_t vram,
                                    unsigned mode)
{
    for (unsigned i = 0; i < n; i++) {
        if (cells[i].wl == wl && cells[i].vram == vram &&
            cells[i].mode == mode && cells[i].verified) {
            return &cells[i];
        }
    }
    return NULL;
}

static void md_size(GString *s, uint64_t v)
{
    if (v >= (1ull << 30)) {
        g_string_append_printf(s, "%" PRIu64 " GiB", v >> 30);
    } else {
        g_string_append_printf(s, "%" PRIu64 " MiB", v >> 20);
    }
}

/* Bytes the cell moved (its stream and its post-copy pages) over VRAM. */
static double wire_over_vram(const struct cell *c)
{
    return (double)(c->bytes_sent + c->postcopy_bytes) /
           (double)(c->vram * c->vgpus);
}

static void md_row(GString *s, const struct cell *c, double rate)
{
    g_string_append_printf(s, "| %s | ", wl_names[c->wl]);
    md_size(s, c->vram);
    if (!c->verified) {
        g_autofree char *why = report_md_cell(c->error);

        g_string_append_printf(s, " | %s | failed: %s | | | | | | | | | |\n",
                               modes[c->mode].name, why);
        return;
    }
    g_string_append_printf(
        s,
        " | %s | %" PRId64 " | %.1f | %.1f | %" PRId64
        " | %.2f | %.1f | %.1f / %.1f | %" PRId64 " | %" PRId64 "%% | %s |\n",
        modes[c->mode].name, c->downtime_ms, c->stopcopy_ms, floor_ms(c, rate),
        c->total_ms, wire_over_vram(c), (double)c->final_dirty / (1 << 20),
        (double)c->estimate / (1 << 20), (double)c->stopcopy_bytes / (1 << 20),
        c->rounds, c->throttle, c->forced ? "yes" : "no");
}

static void md_table(GString *s, const struct cell *cells, unsigned n)
{
    g_string_append(
        s, "| workload | VRAM | mode | downtime ms (QEMU) | device stop-copy "
           "ms | floor ms | total ms | wire / VRAM | final dirty MiB | "
           "stop-copy estimate / sent MiB | rounds | throttle | forced |\n"
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for (unsigned i = 0; i < n; i++) {
        md_row(s, &cells[i], stream_rate(cells, n, cells[i].vram));
    }
}

static void md_ratio(GString *s, const struct cell *ours,
                     const struct cell *base)
{
    if (!base) {
        g_string_append(s, " n/a |");
        return;
    }
    g_string_append_printf(
        s, " %.3g / %.3g / %.3g |",
        (double)ours->downtime_ms / (double)MAX(base->downtime_ms, 1),
        ours->stopcopy_ms / MAX(base->stopcopy_ms, 0.001),
        (double)ours->bytes_sent / (double)MAX(base->bytes_sent, 1));
}

static void md_ratios(GString *s, const struct cell *cells, unsigned n)
{
    g_string_append(s, "\nRatios of ours to each baseline (downtime / device "
                       "stop-copy / bytes on the wire; below 1 means ours is "
                       "lower):\n\n| workload | VRAM | vs stop-copy | vs "
                       "precopy-notrack | vs gmig |\n|---|---|---|---|---|\n");
    for (unsigned i = 0; i < n; i++) {
        const struct cell *o = &cells[i];

        if (o->mode != MODE_OURS || !o->verified) {
            continue;
        }
        g_string_append_printf(s, "| %s | ", wl_names[o->wl]);
        md_size(s, o->vram);
        g_string_append(s, " |");
        for (unsigned m = 0; m < MODE_OURS; m++) {
            md_ratio(s, o, find_cell(cells, n, o->wl, o->vram, m));
        }
        g_string_append(s, "\n");
    }
}

static void md_rates(GString *s, const struct cell *cells, unsigned n,
                     const struct bench_opts *o)
{
    g_string_append(
        s, "\nStream throughput per VRAM size, measured in this run: the "
           "growth of query-migrate's vfio transferred bytes (the device's; "
           "ram transferred counts every byte of the stream, so it is not "
           "added) between the first and the last 'active' sample of the "
           "idle/ours cell of "
           "that size (its pre-copy, which streams VRAM as fast as the "
           "channel goes).  The floor of a cell is its final dirty bytes "
           "divided by it.\n\n");
    for (unsigned i = 0; i < o->nsizes; i++) {
        g_string_append(s, "- ");
        md_size(s, o->sizes[i]);
        g_string_append_printf(s, ": %.0f MiB/s\n",
                               stream_rate(cells, n, o->sizes[i]) / (1 << 20));
    }
}

/* " V |" with @prec decimals, or " - |" when @v < 0 (not measured). */
static void md_num(GString *s, double v, int prec)
{
    if (v < 0) {
        g_string_append(s, " - |");
    } else {
        g_string_append_printf(s, " %.*f |", prec, v);
    }
}

static double mib(double bytes)
{
    return bytes / (1 << 20);
}

static void md_anchor_row(GString *s, const struct ram_anchor *a)
{
    g_string_append(s, "| ");
    md_size(s, a->size);
    g_string_append_printf(s, " | %u |", a->channels);
    if (!a->verified) {
        g_autofree char *why = report_md_cell(a->error);

        g_string_append_printf(s, " failed: %s | | | | | |\n", why);
        return;
    }
    g_string_append_printf(
        s, " %.0f | %.0f | %" PRId64 " | %" PRId64 " | %" PRId64 " | %.1f |\n",
        mib(ram_anchor_bps(a)), mib(a->active_bps), a->total_ms, a->setup_ms,
        a->downtime_ms, mib((double)a->ram_bytes));
}

static void md_anchors(GString *s, const struct anchors *an)
{
    g_string_append(
        s, "\n## Against QEMU's RAM migration (RAM anchor)\n\n"
           "Before the cells of each size, the same run migrates a VM "
           "without a vGPU whose guest RAM has that size, with the same "
           "QEMU, capabilities, parameters and channels as the vGPU cells, "
           "twice; the faster verified run is the anchor (runs vary by "
           "about 15 % here, and the strongest baseline counts).  "
           "Every 8 bytes of its RAM are non-zero (written through the "
           "memfd that backs guest RAM, before the migration), so every "
           "page goes in full; the destination's RAM, read back the same "
           "way, has the source's XXH3-64 checksum.  RAM MiB/s, the anchor, "
           "is query-migrate's ram.transferred over its total-time; active "
           "MiB/s is the growth of ram.transferred between the first and "
           "the last 'active' sample, the way the device's pre-copy rate is "
           "taken.\n\n| RAM | channels | RAM MiB/s | active MiB/s | total ms "
           "| setup ms | downtime ms | transferred MiB |\n"
           "|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (unsigned i = 0; i < an->n; i++) {
        md_anchor_row(s, &an->a[i]);
    }
}

/* The device's stop-copy throughput: stop-copy bytes over the device's
 * stop-copy time; -1 if it moved less than RATE_MIN_BYTES. */
static double stopcopy_bps(const struct cell *c)
{
    return c->stopcopy_bytes >= RATE_MIN_BYTES && c->stopcopy_ms > 0
               ? (double)c->stopcopy_bytes * 1000.0 / c->stopcopy_ms
               : -1;
}

/* @v / @ram, -1 unless both were measured. */
static double over(double v, double ram)
{
    return v > 0 && ram > 0 ? v / ram : -1;
}

/* Idle cells: total time over the time the RAM anchor's throughput
 * needs for VRAM's bytes; -1 for the others. */
static double idle_vs_ram(const struct cell *c, double ram)
{
    if (c->wl != WL_IDLE || ram <= 0 || c->total_ms <= 0) {
        return -1;
    }
    return (double)c->total_ms / ((double)c->vram * 1000.0 / ram);
}

static void md_vs_ram_row(GString *s, const struct cell *c, double ram)
{
    double pre = c->stream_bps > 0 ? c->stream_bps : -1;
    double sc = stopcopy_bps(c);

    g_string_append_printf(s, "| %s | ", wl_names[c->wl]);
    md_size(s, c->vram);
    g_string_append_printf(s, " | %s |", modes[c->mode].name);
    md_num(s, pre > 0 ? mib(pre) : -1, 0);
    md_num(s, over(pre, ram), 3);
    md_num(s, sc > 0 ? mib(sc) : -1, 0);
    md_num(s, over(sc, ram), 3);
    md_num(s, floor_ms(c, ram), 1);
    md_num(s, idle_vs_ram(c, ram), 2);
    g_string_append(s, "\n");
}

/* The RAM anchors and every verified cell against its size's. */
static void md_vs_ram(GString *s, const struct cell *cells, unsigned n,
                      const struct anchors *an)
{
    if (an->n == 0) {
        g_string_append(s, "\nNo RAM anchor in this run "
                           "(--no-ram-anchor).\n");
        return;
    }
    md_anchors(s, an);
    g_string_append(
        s, "\nEach verified cell against the RAM anchor of its size: the "
           "device's pre-copy rate (as in the stream throughput above) and "
           "its stop-copy rate (stop-copy bytes over device stop-copy ms), "
           "each also over RAM MiB/s (/ RAM; 1 is the speed of QEMU's RAM "
           "path); the floor at the RAM rate, final dirty bytes over RAM "
           "MiB/s (what the stop-copy would take if the device's data moved "
           "like RAM); and for idle cells the total time over the time RAM "
           "MiB/s needs for VRAM's bytes.  With more than one channel QEMU "
           "moves the device's stop-copy data over multifd from its own "
           "threads, so the device can have handed all of it over before it "
           "is on the wire: QEMU's downtime in the first table bounds that "
           "rate too.  - : not measured (no pre-copy, "
           "less than 1 MiB sent in stop-copy, not idle, or no anchor).\n\n"
           "| workload | VRAM | mode | pre-copy MiB/s | / RAM | stop-copy "
           "MiB/s | / RAM | floor at RAM rate ms | total / (VRAM / RAM) |\n"
           "|---|---|---|---:|---:|---:|---:|---:|---:|\n");
    for (unsigned i = 0; i < n; i++) {
        if (cells[i].verified) {
            md_vs_ram_row(s, &cells[i], ram_rate(an, cells[i].vram));
        }
    }
}

/* The mean time inside one request, "-" without any. */
static void md_per_request(GString *s, int64_t count, double ms)
{
    md_num(s, count > 0 && ms >= 0 ? ms / (double)count : -1, 3);
}

static void md_server_rows(GString *s, const struct cell *cells, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        const struct cell *c = &cells[i];

        if (!c->verified || c->reads <= 0) {
            continue;
        }
        g_string_append_printf(s, "| %s | ", wl_names[c->wl]);
        md_size(s, c->vram);
        g_string_append_printf(s, " | %u | %s | %" PRId64 " |", c->vgpus,
                               modes[c->mode].name, c->reads);
        md_per_request(s, c->reads, c->read_ms);
        g_string_append_printf(s, " %" PRId64 " |", MAX(c->writes, 0));
        md_per_request(s, c->writes, c->write_ms);
        g_string_append(s, "\n");
    }
}

/* The servers' time inside each data request of the verified cells with
 * pre-copy (@cells, then the several-vGPU cells @multi). */
static void md_server_time(GString *s, const struct cell *cells, unsigned n,
                           const struct cell *multi, unsigned nmulti)
{
    g_string_append(
        s, "\n## The servers' time per data request\n\nThe source servers' "
           "pre-copy reads (`precopy_reads` of their statistics) and the "
           "destination servers' writes of the load (`load_writes`), with "
           "the mean time a server spent inside one (`precopy_read_ms`, "
           "`load_write_ms`; several vGPUs: all devices' requests).  QEMU "
           "asks for the next read as soon as one returns, so where ms per "
           "read times reads is close to the pre-copy's time, the source "
           "server sets the pace of its device's data.\n\n"
           "| workload | VRAM | vGPUs | mode | reads | ms per read | writes | "
           "ms per write |\n|---|---|---:|---|---:|---:|---:|---:|\n");
    md_server_rows(s, cells, n);
    md_server_rows(s, multi, nmulti);
}

/* The rows of the probe @fence (else the register reads) of @cells. */
static void md_probe_rows(GString *s, const struct cell *cells, unsigned n,
                          bool fence)
{
    for (unsigned i = 0; i < n; i++) {
        const struct cell *c = &cells[i];
        const struct probe_result *p = fence ? &c->fence : &c->reg;

        if (!c->verified || p->n == 0) {
            continue;
        }
        g_string_append_printf(s, "| %s | ", wl_names[c->wl]);
        md_size(s, c->vram);
        g_string_append_printf(s, " | %u | %s |", c->vgpus,
                               modes[c->mode].name);
        md_num(s, p->before_us, 0);
        g_string_append_printf(s, " %u |", p->n);
        md_num(s, p->p50_us, 0);
        md_num(s, p->p90_us, 0);
        md_num(s, p->p99_us, 0);
        g_string_append(s, "\n");
    }
}

/* The table of the probe @fence (else the register reads), @cells then
 * the several-vGPU cells @multi, under its heading and text @intro. */
static void md_probe_table(GString *s, const char *intro,
                           const struct cell *cells, unsigned n,
                           const struct cell *multi, unsigned nmulti,
                           bool fence)
{
    g_string_append_printf(
        s,
        "%s\n\n| workload | VRAM | vGPUs | mode | before, median us | %s "
        "while active | median us | 90th percentile us | 99th percentile "
        "us |\n|---|---|---:|---|---:|---:|---:|---:|---:|\n",
        intro, fence ? "fences" : "reads");
    md_probe_rows(s, cells, n, fence);
    md_probe_rows(s, multi, nmulti, fence);
}

/* How long the guest waited for a register read before and while the
 * device's data moved (@cells, then the several-vGPU cells @multi). */
static void md_reg_reads(GString *s, const struct cell *cells, unsigned n,
                         const struct cell *multi, unsigned nmulti)
{
    g_autofree char *intro = g_strdup_printf(
        "\n## The guest's register reads while the data moves\n\nThe "
        "first vGPU's STATUS register read through qtest, as a guest's MMIO "
        "read goes (QEMU, the vfio-user socket, the server), timed by the "
        "bench: %u reads a millisecond apart before the migration (their "
        "median), then %u at every poll while it was active, that is in "
        "pre-copy, and for the poll that falls into the switchover, inside "
        "the downtime.  The server's control loop serves them beside a data "
        "request its data plane's thread is serving; with --no-data-plane "
        "a read that comes during one waits for it.",
        PROBE_BEFORE, PROBE_PER_TICK);

    md_probe_table(s, intro, cells, n, multi, nmulti, false);
}

/* How long the guest waited for a command before and while the device's
 * data moved (@cells, then the several-vGPU cells @multi). */
static void md_fences(GString *s, const struct cell *cells, unsigned n,
                      const struct cell *multi, unsigned nmulti)
{
    g_autofree char *intro = g_strdup_printf(
        "\n## The guest's commands while the data moves\n\nIn the cells "
        "whose workload leaves the engines idle (idle, cpu-writes, "
        "cpu-heavy), the bench submits a FENCE command to the first vGPU "
        "through qtest and reads its FENCE register until the command is "
        "done: a command's round trip as a guest's driver waits for one.  "
        "%u a millisecond apart before the migration (their median), then "
        "one at every poll while it was active (one not done within %d ms, "
        "a device stopped for the switchover, is not timed).  With the "
        "device's own thread (vgpu-server's default) the command runs "
        "while a pre-copy read is being served; with --no-device-thread it "
        "waits for the read.",
        FENCE_BEFORE, FENCE_TIMEOUT_MS);

    md_probe_table(s, intro, cells, n, multi, nmulti, true);
}

/* One issue target: @ok, with what was measured. */
static void md_target(GString *s, const char *what, int ok, const char *got)
{
    g_string_append_printf(s, "- %s: **%s** (%s)\n", what,
                           ok < 0 ? "not measured"
                           : ok   ? "met"
                                  : "missed",
                           got);
}

static void md_target_idle(GString *s, const struct cell *ours)
{
    g_autofree char *got =
        ours ? g_strdup_printf("%.2f ms", ours->stopcopy_ms) : g_strdup("-");

    md_target(s, "idle 4 GiB device stop-copy <= 5 ms",
              ours ? ours->stopcopy_ms <= 5.0 : -1, got);
}

static void md_target_infer(GString *s, const struct cell *ours,
                            const struct cell *sc, const struct cell *gm,
                            double rate)
{
    double fl = ours ? floor_ms(ours, rate) : -1;
    g_autofree char *g1 =
        ours ? g_strdup_printf("%.2f ms, floor %.2f ms", ours->stopcopy_ms, fl)
             : g_strdup("-");
    g_autofree char *g2 =
        ours && sc ? g_strdup_printf("%.1fx", sc->stopcopy_ms /
                                                  MAX(ours->stopcopy_ms, 1e-3))
                   : g_strdup("-");
    g_autofree char *g3 =
        ours && gm ? g_strdup_printf("%.1fx", gm->stopcopy_ms /
                                                  MAX(ours->stopcopy_ms, 1e-3))
                   : g_strdup("-");

    md_target(s, "inference 4 GiB stop-copy <= 1.3 x floor + 5 ms",
              ours ? ours->stopcopy_ms <= 1.3 * fl + 5 : -1, g1);
    md_target(s, "inference 4 GiB stop-copy >= 20x lower than stop-and-copy",
              ours && sc ? sc->stopcopy_ms >= 20 * ours->stopcopy_ms : -1, g2);
    md_target(s, "inference 4 GiB stop-copy >= 5x lower than gMig-style",
              ours && gm ? gm->stopcopy_ms >= 5 * ours->stopcopy_ms : -1, g3);
}

static void md_target_wire(GString *s, const struct cell *cells, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        const struct cell *c = &cells[i];
        g_autofree char *what = NULL;
        g_autofree char *got = NULL;
        double bound;

        if (c->mode != MODE_OURS || c->wl > WL_INFER || !c->verified) {
            continue;
        }
        bound = 1.15 * (double)(c->vram + (uint64_t)MAX(c->final_dirty, 0));
        what = g_strdup_printf("%s %" PRIu64 " MiB bytes on the wire <= 1.15 x "
                               "(non-zero VRAM + final dirty)",
                               wl_names[c->wl], c->vram >> 20);
        got = g_strdup_printf("%.3f x", (double)c->bytes_sent / (bound / 1.15));
        md_target(s, what, (double)c->bytes_sent <= bound, got);
    }
}

/* Whether stop-copy sent at most 1.2 x the last estimate + 1 MiB. */
static bool estimate_held(const struct cell *c)
{
    return c->stopcopy_bytes * 10 <= c->estimate * 12 + 10 * EST_SLACK;
}

/* Whether QEMU kept its downtime limit (+ DT_SLACK_MS) when it switched
 * over by itself. */
static bool downtime_held(const struct cell *c)
{
    return c->forced || c->downtime_ms <= BENCH_DT_MS + DT_SLACK_MS;
}

/* The estimate and downtime targets over all cells: the ones that held
 * (*@est_ok, *@dt_ok) of the verified ones (*@n_est) and of those QEMU
 * switched over by itself (*@n_dt). */
static void count_bounds(const struct cell *cells, unsigned n, unsigned *est_ok,
                         unsigned *n_est, unsigned *dt_ok, unsigned *n_dt)
{
    *est_ok = *n_est = *dt_ok = *n_dt = 0;
    for (unsigned i = 0; i < n; i++) {
        if (!cells[i].verified) {
            continue;
        }
        (*n_est)++;
        *est_ok += estimate_held(&cells[i]);
        *n_dt += !cells[i].forced;
        *dt_ok += !cells[i].forced && downtime_held(&cells[i]);
    }
}

static void md_target_bounds(GString *s, const struct cell *cells, unsigned n)
{
    unsigned est_ok, n_est, dt_ok, n_dt;
    g_autofree char *g1 = NULL;
    g_autofree char *g2 = NULL;

    count_bounds(cells, n, &est_ok, &n_est, &dt_ok, &n_dt);
    g1 = g_strdup_printf("held in %u of %u cells", est_ok, n_est);
    g2 = g_strdup_printf("held in %u of %u cells QEMU switched over by itself",
                         dt_ok, n_dt);
    md_target(s,
              "every cell: stop-copy bytes sent <= 1.2 x the last "
              "estimate + 1 MiB",
              n_est ? est_ok == n_est : -1, g1);
    md_target(s, "QEMU downtime <= downtime-limit + 50 ms when not forced",
              n_dt ? dt_ok == n_dt : -1, g2);
    for (unsigned i = 0; i < n; i++) {
        const struct cell *c = &cells[i];

        if (c->verified && (!estimate_held(c) || !downtime_held(c))) {
            g_string_append_printf(
                s,
                "  - missed by %s %" PRIu64 " MiB %s: estimate %.1f MiB, "
                "sent %.1f MiB, downtime %" PRId64 " ms\n",
                wl_names[c->wl], c->vram >> 20, modes[c->mode].name,
                (double)c->estimate / (1 << 20),
                (double)c->stopcopy_bytes / (1 << 20), c->downtime_ms);
        }
    }
}

/* What the guest CPU writers did in each of their cells. */
static void md_cpu_writes(GString *s, const struct cell *cells, unsigned n)
{
    g_string_append(s, "\nGuest CPU writes through BAR2 (cpu-writes, "
                       "cpu-heavy): writes made before QEMU's STOP event, "
                       "all found on the destination; those in flight at "
                       "the stop or after it (either way allowed); the rate "
                       "the writer achieved.\n\n| workload | VRAM | mode | "
                       "before the stop | in flight or after | writes/s |\n"
                       "|---|---|---|---:|---:|---:|\n");
    for (unsigned i = 0; i < n; i++) {
        const struct cell *c = &cells[i];

        if ((c->wl != WL_CPU && c->wl != WL_CPU_HEAVY) || !c->verified) {
            continue;
        }
        g_string_append_printf(s, "| %s | ", wl_names[c->wl]);
        md_size(s, c->vram);
        g_string_append_printf(
            s, " | %s | %" PRIu64 " | %" PRIu64 " | %.0f |\n",
            modes[c->mode].name, c->cpu_writes, c->cpu_uncertain, c->cpu_rate);
    }
}

/* The lowest downtime of a verified pre-copy cell (any mode but
 * post-copy) of @c's workload and size; NULL if none. */
static const struct cell *best_precopy(const struct cell *cells, unsigned n,
                                       const struct cell *c)
{
    const struct cell *best = NULL;

    for (unsigned m = 0; m < MODE_POSTCOPY; m++) {
        const struct cell *o = find_cell(cells, n, c->wl, c->vram, m);

        if (o && (!best || o->downtime_ms < best->downtime_ms)) {
            best = o;
        }
    }
    return best;
}

static void md_postcopy_row(GString *s, const struct cell *cells, unsigned n,
                            const struct cell *c, const struct cell *idle)
{
    const struct cell *pre = best_precopy(cells, n, c);
    const struct cell *sc = find_cell(cells, n, c->wl, c->vram, MODE_STOPCOPY);

    g_string_append_printf(s, "| %s | ", wl_names[c->wl]);
    md_size(s, c->vram);
    g_string_append_printf(s, " | %" PRId64 " |", c->downtime_ms);
    if (idle) {
        g_string_append_printf(s, " %+" PRId64 " |",
                               c->downtime_ms - idle->downtime_ms);
    } else {
        g_string_append(s, " - |");
    }
    if (pre) {
        g_string_append_printf(s, " %" PRId64 " (%s) |", pre->downtime_ms,
                               modes[pre->mode].name);
    } else {
        g_string_append(s, " - |");
    }
    md_num(s, sc ? (double)sc->downtime_ms : -1, 0);
    g_string_append_printf(s, " %.3f | %.0f | %" PRId64 " |\n",
                           wire_over_vram(c), c->postcopy_ms, c->total_ms);
}

/* Post-copy cells against the best pre-copy and stop-and-copy of the same
 * workload and size, and the issue's targets for them. */
static void md_postcopy(GString *s, const struct cell *cells, unsigned n)
{
    g_autofree char *got_worst = NULL, *got_most = NULL;
    int within = -1, bytes = -1;
    int64_t worst = 0;
    double most = 0;

    g_string_append(
        s, "\n## Post-copy\n\nThe postcopy cells turn postcopy-ram on and "
           "send migrate-start-postcopy right after migrate (at the first "
           "iteration QEMU switches over): the destination runs while its "
           "server fetches the "
           "pages from the source's page server, those the VM touches "
           "first on demand (docs/postcopy.md).  Against each cell: the "
           "idle post-copy cell of its size, the pre-copy mode with the "
           "lowest downtime, and stop-and-copy.  Bytes are the stream's and "
           "the page channel's; pages ms is the destination's time from "
           "the end of the load to the last page.\n\n| workload | VRAM | "
           "downtime ms | - idle's | best pre-copy downtime ms | stop-copy "
           "downtime ms | bytes / VRAM | pages ms | total ms |\n"
           "|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (unsigned i = 0; i < n; i++) {
        const struct cell *c = &cells[i];
        const struct cell *idle =
            find_cell(cells, n, WL_IDLE, c->vram, MODE_POSTCOPY);

        if (c->mode != MODE_POSTCOPY || !c->verified) {
            continue;
        }
        md_postcopy_row(s, cells, n, c, idle);
        if (idle) {
            worst = MAX(worst, c->downtime_ms - idle->downtime_ms);
            within = worst <= 20;
        }
        most = MAX(most, wire_over_vram(c));
        bytes = most <= 1.05;
    }
    got_worst = g_strdup_printf("worst %+" PRId64 " ms", worst);
    got_most = g_strdup_printf("at most %.3f", most);
    g_string_append(s, "\n");
    md_target(s,
              "post-copy downtime within 20 ms of the idle VM's, whatever "
              "the workload",
              within, got_worst);
    md_target(s, "total bytes moved <= 1.05 x VRAM", bytes, got_most);
}

/* Issue 15's throughput and time targets at the size of @c, an idle
 * ours cell: its device pre-copy rate at least the RAM anchor's, and its
 * total time at most 1.3 x the time the anchor's rate needs for VRAM. */
static void md_target_idle_ram(GString *s, const struct cell *c,
                               const struct anchors *an)
{
    double ram = ram_rate(an, c->vram);
    double r = over(c->stream_bps, ram), t = idle_vs_ram(c, ram);
    g_autofree char *w1 = g_strdup_printf(
        "device pre-copy >= 1.0 x RAM at %" PRIu64 " MiB", c->vram >> 20);
    g_autofree char *w2 = g_strdup_printf(
        "idle %" PRIu64 " MiB total time <= 1.3 x (VRAM / RAM rate)",
        c->vram >> 20);
    g_autofree char *g1 = r > 0 ? g_strdup_printf("%.3f x", r) : g_strdup("-");
    g_autofree char *g2 = t > 0 ? g_strdup_printf("%.2f x", t) : g_strdup("-");

    md_target(s, w1, r > 0 ? r >= 1.0 : -1, g1);
    md_target(s, w2, t > 0 ? t <= 1.3 : -1, g2);
}

/* Issue 15's stop-copy target over every verified ours cell that moved
 * pages in its stop-copy: device stop-copy <= 1.3 x its floor at the RAM
 * anchor's rate + 5 ms.  Names the cell furthest over or nearest. */
static void md_target_stopcopy_ram(GString *s, const struct cell *cells,
                                   unsigned n, const struct anchors *an)
{
    const struct cell *worst = NULL;
    double worst_over = 0;
    unsigned held = 0, all = 0;
    g_autofree char *got = NULL;

    for (unsigned i = 0; i < n; i++) {
        const struct cell *c = &cells[i];
        double fl = floor_ms(c, ram_rate(an, c->vram));

        if (c->mode != MODE_OURS || !c->verified || c->vgpus != 1 ||
            c->final_dirty < RATE_MIN_BYTES || fl < 0) {
            continue;
        }
        all++;
        held += c->stopcopy_ms <= 1.3 * fl + 5;
        if (!worst || c->stopcopy_ms - (1.3 * fl + 5) > worst_over) {
            worst = c;
            worst_over = c->stopcopy_ms - (1.3 * fl + 5);
        }
    }
    got = worst
              ? g_strdup_printf("held in %u of %u cells; furthest: %s %" PRIu64
                                " MiB, %.1f ms against %.1f ms",
                                held, all, wl_names[worst->wl],
                                worst->vram >> 20, worst->stopcopy_ms,
                                worst->stopcopy_ms - worst_over)
              : g_strdup("-");
    md_target(s,
              "device stop-copy <= 1.3 x final dirty / RAM rate + 5 ms "
              "(ours, every cell that moved pages)",
              all ? held == all : -1, got);
}

/* Issue 15's targets against the RAM anchors of the same run (the issue
 * names 1 and 4 GiB here, 16 GiB on the GPU machine: every size run). */
static void md_targets_ram(GString *s, const struct cell *cells, unsigned n,
                           const struct anchors *an)
{
    if (an->n == 0) {
        return;
    }
    g_string_append(s, "\nTargets of the parallel data path (issue 15), "
                       "against the RAM anchors above:\n\n");
    for (unsigned i = 0; i < n; i++) {
        const struct cell *c = &cells[i];

        if (c->wl == WL_IDLE && c->mode == MODE_OURS && c->vgpus == 1 &&
            c->verified) {
            md_target_idle_ram(s, c, an);
        }
    }
    md_target_stopcopy_ram(s, cells, n, an);
}

static void md_targets(GString *s, const struct cell *cells, unsigned n)
{
    uint64_t g4 = 4ull << 30;
    const struct cell *oi = find_cell(cells, n, WL_INFER, g4, MODE_OURS);

    g_string_append(s, "\n## Targets from the issue\n\n");
    md_target_idle(s, find_cell(cells, n, WL_IDLE, g4, MODE_OURS));
    md_target_infer(s, oi, find_cell(cells, n, WL_INFER, g4, MODE_STOPCOPY),
                    find_cell(cells, n, WL_INFER, g4, MODE_GMIG),
                    stream_rate(cells, n, g4));
    md_target_wire(s, cells, n);
    md_target_bounds(s, cells, n);
}

/* /proc/loadavg when the run began. */
static char load0[64] = "unknown";

static void note_load(void)
{
    g_autofree char *text = NULL;

    if (g_file_get_contents("/proc/loadavg", &text, NULL, NULL)) {
        g_auto(GStrv) f = g_strsplit(text, " ", 4);

        if (f[0] && f[1] && f[2]) {
            g_snprintf(load0, sizeof(load0), "%s %s %s", f[0], f[1], f[2]);
        }
    }
}

/* The host's shmem_enabled setting, the one in brackets (g_free()). */
static char *shmem_thp(void)
{
    g_autofree char *text = NULL;
    char *open, *close;

    if (!g_file_get_contents("/sys/kernel/mm/transparent_hugepage/"
                             "shmem_enabled",
                             &text, NULL, NULL) ||
        !(open = strchr(text, '[')) || !(close = strchr(open, ']'))) {
        return g_strdup("unknown");
    }
    return g_strndup(open + 1, close - open - 1);
}

static void md_machine(GString *s)
{
    g_autofree char *cpu = NULL;
    g_autofree char *model = NULL;
    g_autofree char *thp = shmem_thp();
    struct utsname u;
    char *p;

    if (g_file_get_contents("/proc/cpuinfo", &cpu, NULL, NULL) &&
        (p = strstr(cpu, "model name")) && (p = strchr(p, ':'))) {
        model = g_strndup(p + 2, strcspn(p + 2, "\n"));
    }
    uname(&u);
    g_string_append_printf(s,
                           "Machine: %s, %ld CPUs online, %s %s; QEMU "
                           "-accel qtest, migration over TCP loopback.  "
                           "Load average when the run began: %s.  Huge "
                           "pages for shared memory (/sys/kernel/mm/"
                           "transparent_hugepage/shmem_enabled): %s; where "
                           "`never`, every mapping of VRAM and of guest RAM "
                           "is of 4 KiB pages (docs/operations.md, "
                           "Tuning).\n\n",
                           model ? model : "unknown CPU",
                           sysconf(_SC_NPROCESSORS_ONLN), u.sysname, u.release,
                           load0, thp);
}

/* How --channels @n migrates, for the report (g_free()). */
static char *channels_text(unsigned n)
{
    return n > 1 ? g_strdup_printf("%u channels (capability multifd, "
                                   "multifd-channels %u, on both sides)",
                                   n, n)
                 : g_strdup("one channel (multifd off)");
}

/* The backends one side's servers were given with --@opt, if any. */
static void md_backends(GString *s, const char *side, const char *opt,
                        const struct backends *b)
{
    if (b->n) {
        g_string_append_printf(s,
                               "The %s vgpu-servers run with --backend %s "
                               "(--%s; a VM's vGPUs take them in turn).  ",
                               side, b->text, opt);
    }
}

static void md_method(GString *s, const struct bench_opts *o)
{
    g_autofree char *ch = channels_text(o->channels);

    if (o->prealloc) {
        g_string_append(s, "With --prealloc: every vgpu-server preallocates "
                           "its VRAM (--prealloc) and every QEMU, the cells' "
                           "and the RAM anchors', its guest RAM "
                           "(prealloc=on).  ");
    }
    if (o->no_data_plane) {
        g_string_append(s, "With --no-data-plane: every vgpu-server serves "
                           "the data requests on its control loop "
                           "(--no-data-plane).  ");
    }
    if (o->no_device_thread) {
        g_string_append(s, "With --no-device-thread: every vgpu-server steps "
                           "its device on the thread that served the last "
                           "request (--no-device-thread).  ");
    }
    if (o->no_data_vram) {
        g_string_append(s, "With --no-data-vram: every vgpu-server copies "
                           "the stop-copy's pages into its shared area "
                           "(--no-data-vram).  ");
    }
    if (o->place_data) {
        g_string_append(s, "With --place-data: every source QEMU sends "
                           "the stop-copy's pages with their place, which "
                           "the destination's QEMU receives there, in its "
                           "view of VRAM populated during the pre-copy "
                           "(x-migration-place-data=on on both).  ");
    }
    md_backends(s, "source's", "src-backend", &o->src_backends);
    md_backends(s, "destination's", "dst-backend", &o->dst_backends);

    g_string_append_printf(
        s,
        "Each cell starts two vgpu-servers (page size %s) and two QEMUs "
        "(%d MiB guest RAM; like the RAM anchors' QEMUs, with "
        "suppress-vmdesc=on, docs/operations.md), fills all of VRAM with "
        "non-zero patterns "
        "(so non-zero VRAM = VRAM size), starts the workload and migrates "
        "with max-bandwidth %" PRIu64 " MiB/s, downtime-limit %d ms, "
        "avail-switchover-bandwidth 0 (QEMU decides the switchover) over "
        "%s.  A "
        "cell not completed %d ms after QEMU has sent one VRAM's worth of "
        "device data (at once for stop-copy, which has no pre-copy), or "
        "after %d ms + %d ms per GiB of VRAM (or + the time of %d passes "
        "at the RAM anchor's throughput, if longer) at the latest, gets "
        "downtime-limit %d ms and avail-switchover-bandwidth 10 GiB/s "
        "(forced = yes).  Workloads, driven through qtest from the bench "
        "process every 20 ms while the migration is active: idle (no "
        "writes); inference (SCATTER_ADD over a 64 MiB activation buffer "
        "at the end of VRAM, resubmitted whenever the device is idle); "
        "training (FILL of a quarter of VRAM per step, next quarter each "
        "step, whenever idle); sparse (SCATTER_ADD of %u random 64 KiB "
        "pages per second); cpu-writes (%u 4-byte guest-CPU writes per "
        "second anywhere in VRAM through BAR2); cpu-heavy (%u guest-CPU "
        "writes per second asked for, of 8 to 64 bytes, %u%% in a 4 MiB "
        "hot set and the rest anywhere, %u%% across a 64 KiB page "
        "boundary; pipelined qtest writes, so the rate achieved is lower "
        "and reported below).  The CPU writers record every write "
        "against QEMU's STOP event (qclient/cpu-writer.h): the "
        "destination's VRAM checksum must name VRAM as filled plus every "
        "write made before the stop.  VRAM sizes above ",
        PAGE_ARG, GUEST_RAM_MIB, o->max_bandwidth >> 20, BENCH_DT_MS, ch,
        FORCE_AFTER_MS, FORCE_BASE_MS, FORCE_PER_GIB_MS, FORCE_PASSES,
        FORCE_DT_MS, SPARSE_RATE, CPU_RATE, HEAVY_RATE, HEAVY_HOT_PCT,
        HEAVY_STRADDLE);
    md_size(s, o->big_limit);
    g_string_append(
        s, " run the idle and inference workloads only (time box).  "
           "Downtime is QEMU's query-migrate downtime, device stop-copy is "
           "the source server's device_stopcopy_ms, wire / VRAM is the "
           "server's bytes_sent over the VRAM size; the floor is "
           "final_dirty_bytes over the stream throughput.  Every cell's "
           "VRAM checksums (source after stop-copy, destination after load) "
           "matched unless marked failed.\n\n");
}

/* The --append files, verbatim. */
static int md_appendix(GString *s, const struct bench_opts *o,
                       struct vg_error *err)
{
    if (o->nappend > 0) {
        g_string_append(s, "\n## Measured by the same `make bench` run\n");
    }
    for (unsigned i = 0; i < o->nappend; i++) {
        g_autofree char *text = NULL;
        g_autofree char *name = g_path_get_basename(o->append[i]);
        GError *gerr = NULL;

        if (!g_file_get_contents(o->append[i], &text, NULL, &gerr)) {
            vg_error_set(err, EIO, "--append %s: %s", o->append[i],
                         gerr->message);
            g_error_free(gerr);
            return -EIO;
        }
        g_string_append_printf(s, "\n%s:\n\n```\n%s%s```\n", name, text,
                               g_str_has_suffix(text, "\n") ? "" : "\n");
    }
    return 0;
}

/* Sections measured elsewhere (the GPU runs) follow this line in the
 * report; a new report keeps them. */
#define DOC_KEEP_MARK "<!-- vgmig-bench keeps what follows -->"

/* The kept tail of the existing report @path, from DOC_KEEP_MARK on. */
static void md_kept(GString *s, const char *path)
{
    g_autofree char *old = NULL;
    const char *mark;

    if (g_file_get_contents(path, &old, NULL, NULL) &&
        (mark = strstr(old, DOC_KEEP_MARK)) != NULL) {
        g_string_append_printf(s, "\n%s", mark);
    }
}

static void md_multi(GString *s, const struct cell *cells, unsigned n);

static int write_doc(const struct bench_opts *o, const struct cell *cells,
                     unsigned n, const struct cell *multi, unsigned nmulti,
                     const struct anchors *an, double wall_s,
                     struct vg_error *err)
{
    GString *s = g_string_new("# vgmig live-migration benchmark\n\n");
    int ret;

    g_string_append_printf(s,
                           "Generated by build/vgmig-bench from its own run "
                           "(%u cells and %u RAM anchors, %.0f s).  Reproduce "
                           "with:\n\n    %s\n\n",
                           n, an->n, wall_s,
                           o->cmdline ? o->cmdline : "make bench");
    md_machine(s);
    md_method(s, o);
    md_table(s, cells, n);
    md_ratios(s, cells, n);
    md_rates(s, cells, n, o);
    md_vs_ram(s, cells, n, an);
    md_server_time(s, cells, n, multi, nmulti);
    md_reg_reads(s, cells, n, multi, nmulti);
    md_fences(s, cells, n, multi, nmulti);
    md_targets_ram(s, cells, n, an);
    md_cpu_writes(s, cells, n);
    md_targets(s, cells, n);
    md_postcopy(s, cells, n);
    md_multi(s, multi, nmulti);
    g_string_append(s, "\nPlot: benchmarks-downtime.png (downtime against "
                       "VRAM size per mode, idle and inference).\n\n"
                       "![downtime against VRAM size]"
                       "(benchmarks-downtime.png)\n");
    ret = md_appendix(s, o, err);
    md_kept(s, o->doc);
    if (ret == 0) {
        ret = write_file(o->doc, s, err);
    }
    g_string_free(s, TRUE);
    return ret;
}

/* ---------------------------------------------------------------- main */

static bool wanted(const struct bench_opts *o, uint64_t vram, enum workload w)
{
    if (!(o->wl_mask & (1u << w))) {
        return false;
    }
    return vram <= o->big_limit || w == WL_IDLE || w == WL_INFER;
}

static void print_cell(const struct cell *c)
{
    printf("%-10s %5" PRIu64 "M %-16s downtime %6" PRId64
           " ms, stop-copy %9.2f ms, total %6" PRId64 " ms (setup %" PRId64
           "), wire %.2fx, estimate/sent %.1f/%.1f MiB%s, rounds %" PRId64
           ", throttle %" PRId64 "%%%s%s\n",
           wl_names[c->wl], c->vram >> 20, modes[c->mode].name, c->downtime_ms,
           c->stopcopy_ms, c->total_ms, c->setup_ms, wire_over_vram(c),
           (double)c->estimate / (1 << 20),
           (double)c->stopcopy_bytes / (1 << 20),
           estimate_held(c) ? "" : " (over)", c->rounds, c->throttle,
           c->forced ? " forced" : "", c->verified ? "" : " FAILED");
    fflush(stdout);
}

static void print_anchor(const struct ram_anchor *a)
{
    printf("ram-anchor %6" PRIu64 "M channels %-3u    total %6" PRId64
           " ms, downtime %4" PRId64 " ms, setup %3" PRId64
           " ms, RAM %.1f MiB, %.0f MiB/s (active %.0f MiB/s)%s\n",
           a->size >> 20, a->channels, a->total_ms, a->downtime_ms, a->setup_ms,
           mib((double)a->ram_bytes), mib(ram_anchor_bps(a)),
           mib(a->active_bps), a->verified ? "" : " FAILED");
    fflush(stdout);
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

/* Final dirty MiB per vGPU from @lo (inclusive) to @hi (exclusive); a
 * cell that does not know its own is in only the range of everything. */
struct dirty_range {
    double lo, hi;
};
static const struct dirty_range ANY_DIRTY = {-1, INFINITY};

static double dirty_per_vgpu(const struct cell *c)
{
    return c->final_dirty < 0 ? -1
                              : (double)c->final_dirty / c->vgpus / (1 << 20);
}

/* The median downtime of the verified --multi-vgpu cells of @wl with
 * @vgpus vGPUs and final dirty data in @range: to the microsecond if every
 * one has it (*@traced), else QEMU's whole ms; -1 if there is none.
 * *@runs: how many. */
static double multi_median(const struct cell *cells, unsigned n,
                           enum workload wl, unsigned vgpus,
                           struct dirty_range range, bool *traced,
                           unsigned *runs)
{
    double trace[MAX_MULTI_CELLS], whole[MAX_MULTI_CELLS], *v;
    unsigned k = 0;

    *traced = true;
    for (unsigned i = 0; i < n; i++) {
        const struct cell *c = &cells[i];
        double dirty = dirty_per_vgpu(c);

        if (c->wl == wl && c->vgpus == vgpus && c->verified &&
            dirty >= range.lo && dirty < range.hi) {
            *traced = *traced && c->downtime_trace_ms >= 0;
            trace[k] = c->downtime_trace_ms;
            whole[k++] = (double)c->downtime_ms;
        }
    }
    *runs = k;
    if (!k) {
        return -1;
    }
    v = *traced ? trace : whole;
    return vg_median(v, k);
}

/* The median final dirty MiB per vGPU of the verified --multi-vgpu cells
 * of @wl with @vgpus vGPUs (what each device had left for its stop-copy);
 * -1 if there is none. */
static double multi_dirty_median(const struct cell *cells, unsigned n,
                                 enum workload wl, unsigned vgpus)
{
    double v[MAX_MULTI_CELLS];
    unsigned k = 0;

    for (unsigned i = 0; i < n; i++) {
        const struct cell *c = &cells[i];

        if (c->wl == wl && c->vgpus == vgpus && c->verified &&
            c->final_dirty >= 0) {
            v[k++] = dirty_per_vgpu(c);
        }
    }
    return k ? vg_median(v, k) : -1;
}

/* The most final dirty MiB per vGPU of a verified cell of @wl; -1 if none
 * knows it. */
static double multi_dirty_max(const struct cell *cells, unsigned n,
                              enum workload wl)
{
    double most = -1;

    for (unsigned i = 0; i < n; i++) {
        if (cells[i].wl == wl && cells[i].verified) {
            most = MAX(most, dirty_per_vgpu(&cells[i]));
        }
    }
    return most;
}

/*
 * Two vGPUs over one among cells that had like amounts of final dirty data
 * per vGPU: where a workload's stop sometimes falls in a clean window, the
 * medians over all cells compare stops with different amounts of data.
 * The cells with at least half the workload's most and those with less,
 * each where both sides have one.
 */
static void md_multi_like(GString *s, const struct cell *cells, unsigned n,
                          enum workload wl)
{
    double half = multi_dirty_max(cells, n, wl) / 2;
    const struct dirty_range ranges[] = {{half, INFINITY}, {0, half}};
    const char *names[] = {"at least", "less than"};

    if (half < 0.5) {
        return; /* nothing dirty to speak of anywhere */
    }
    g_string_append_printf(s, "  - like for like (%s):", wl_names[wl]);
    for (unsigned i = 0; i < G_N_ELEMENTS(ranges); i++) {
        bool t1, tn;
        unsigned r1, rn;
        double one = multi_median(cells, n, wl, 1, ranges[i], &t1, &r1);
        double many =
            multi_median(cells, n, wl, MULTI_VGPUS, ranges[i], &tn, &rn);

        g_string_append_printf(s, "%s %s %.1f MiB dirty per vGPU, ",
                               i ? ";" : "", names[i], half);
        if (one < 0 || many < 0) {
            g_string_append(s, one < 0 && many < 0 ? "no cell"
                               : one < 0           ? "no cell with one vGPU"
                                                   : "no cell with several");
            continue;
        }
        g_string_append_printf(s, "%.3f / %.3f ms (%u and %u runs) = %.2f",
                               many, one, rn, r1,
                               many / MAX(one, t1 && tn ? 1e-3 : 1));
    }
    g_string_append(s, "\n");
}

/* The median of checkpoint @point (ms after src-downtime-start) over the
 * verified cells of @wl with @vgpus vGPUs that traced it; -1 if none. */
static double point_median(const struct cell *cells, unsigned n,
                           enum workload wl, unsigned vgpus, unsigned point)
{
    double v[MAX_MULTI_CELLS];
    unsigned k = 0;

    for (unsigned i = 0; i < n; i++) {
        const struct cell *c = &cells[i];

        if (c->wl == wl && c->vgpus == vgpus && c->verified &&
            c->point_ms[point] >= 0) {
            v[k++] = c->point_ms[point];
        }
    }
    return k ? vg_median(v, k) : -1;
}

/* Where the downtime went with one vGPU and with MULTI_VGPUS: the median
 * of each checkpoint both QEMUs traced, after the source's start. */
static void md_multi_points(GString *s, const struct cell *cells, unsigned n,
                            enum workload wl)
{
    g_autoptr(GString) line = g_string_new("");

    for (unsigned p = 1; p < VG_DOWNTIME_POINTS; p++) {
        double one = point_median(cells, n, wl, 1, p);
        double many = point_median(cells, n, wl, MULTI_VGPUS, p);

        if (one >= 0 && many >= 0) {
            g_string_append_printf(line, "%s %s %.3f / %.3f",
                                   line->len ? "," : "", vg_downtime_points[p],
                                   one, many);
        }
    }
    if (line->len) {
        g_string_append_printf(s,
                               "  - where it went (%s), median ms after "
                               "src-downtime-start with one / %d vGPUs:%s\n",
                               wl_names[wl], MULTI_VGPUS, line->str);
    }
}

/* The section of the --multi-vgpu cells: each cell, and per workload the
 * median downtime of MULTI_VGPUS vGPUs over that of one against the
 * target, with the final dirty data per vGPU each side had to move. */
static void md_multi(GString *s, const struct cell *cells, unsigned n)
{
    if (!n) {
        return;
    }
    g_string_append_printf(
        s,
        "\n## Several vGPUs per VM\n\nA VM with %d vGPUs of the same VRAM "
        "(a vgpu-server each, the same workload on each, mode ours) "
        "against one with one vGPU (`--multi-vgpu`), in turn, "
        "`--multi-rounds` times.  Downtime: QEMU's, in whole ms from "
        "query-migrate and to the microsecond from its "
        "vmstate_downtime_checkpoint trace points (src-downtime-start to "
        "src-downtime-end); \"where it went\": the median time of each "
        "checkpoint of both QEMUs after src-downtime-start (one host's "
        "clock).  Device stop-copy: the longest device's; final "
        "dirty: per vGPU, the mean of the devices' final dirty bytes (what "
        "each had left to move in its stop-copy; a workload's varies with "
        "where the stop falls); bytes: all devices'.\n\n| workload | VRAM per "
        "vGPU | vGPUs | downtime ms (QEMU) | downtime ms (trace) | device "
        "stop-copy ms | final dirty MiB per vGPU | total ms | bytes on the "
        "wire | forced |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n",
        MULTI_VGPUS);
    for (unsigned i = 0; i < n; i++) {
        const struct cell *c = &cells[i];

        g_string_append_printf(s, "| %s | ", wl_names[c->wl]);
        md_size(s, c->vram);
        g_string_append_printf(
            s,
            " | %u | %" PRId64 " | %.3f | %.1f | %.1f | %" PRId64 " | %" PRId64
            " | %s |\n",
            c->vgpus, c->downtime_ms, c->downtime_trace_ms, c->stopcopy_ms,
            (double)MAX(c->final_dirty, 0) / c->vgpus / (1 << 20), c->total_ms,
            c->bytes_sent,
            !c->verified ? "failed"
            : c->forced  ? "yes"
                         : "no");
    }
    g_string_append(s, "\n");
    for (unsigned w = 0; w < WL_COUNT; w++) {
        bool t1, tn;
        unsigned r1, rn;
        double one = multi_median(cells, n, w, 1, ANY_DIRTY, &t1, &r1);
        double many =
            multi_median(cells, n, w, MULTI_VGPUS, ANY_DIRTY, &tn, &rn);
        double ratio;

        if (one < 0 || many < 0) {
            continue;
        }
        ratio = many / MAX(one, t1 && tn ? 1e-3 : 1);
        g_string_append_printf(
            s,
            "- %s: median downtime with %d vGPUs / with one: %.3f / %.3f ms "
            "(%s, %u and %u runs) = %.2f (target <= %.1f: %s); median final "
            "dirty per vGPU %.1f / %.1f MiB\n",
            wl_names[w], MULTI_VGPUS, many, one,
            t1 && tn ? "trace points" : "QEMU's whole ms", rn, r1, ratio,
            MULTI_TARGET, ratio <= MULTI_TARGET ? "met" : "missed",
            multi_dirty_median(cells, n, w, MULTI_VGPUS),
            multi_dirty_median(cells, n, w, 1));
        md_multi_like(s, cells, n, w);
        md_multi_points(s, cells, n, w);
    }
}

static int write_multi_json(const struct bench_opts *o,
                            const struct cell *cells, unsigned n,
                            struct vg_error *err)
{
    g_autofree char *path =
        g_build_filename(o->out_dir, "results-multi.json", NULL);
    GString *js = g_string_new("[\n");
    int ret;

    for (unsigned i = 0; i < n; i++) {
        json_cell(js, &cells[i], 0, 0);
        g_string_append(js, i + 1 < n ? ",\n" : "\n");
    }
    g_string_append(js, "]\n");
    ret = write_file(path, js, err);
    g_string_free(js, TRUE);
    return ret;
}

static void print_ratios(const struct cell *cells, unsigned n,
                         const struct cell *multi, unsigned nmulti,
                         const struct anchors *an)
{
    GString *s = g_string_new("");

    md_ratios(s, cells, n);
    md_vs_ram(s, cells, n, an);
    md_server_time(s, cells, n, multi, nmulti);
    md_reg_reads(s, cells, n, multi, nmulti);
    md_fences(s, cells, n, multi, nmulti);
    fputs(s->str, stdout);
    g_string_free(s, TRUE);
}

int main(int argc, char **argv)
{
    static struct cell cells[MAX_CELLS];
    static struct cell multi[MAX_MULTI_CELLS];
    static struct anchors an;
    struct bench_opts o = {0};
    struct vg_error err = {0};
    unsigned n, nmulti, failed = 0, est_ok, n_est, dt_ok, n_dt;
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
    note_load();
    n = run_all(&o, cells, &an, &failed);
    nmulti = run_multi(&o, &an, multi, &failed);
    ret = write_json(&o, cells, n, &an, &err);
    if (ret == 0) {
        ret = write_plot_data(&o, cells, n, &err);
    }
    if (ret == 0 && nmulti) {
        ret = write_multi_json(&o, multi, nmulti, &err);
    }
    if (ret == 0 && o.doc) {
        ret = write_doc(&o, cells, n, multi, nmulti, &an,
                        (double)(g_get_monotonic_time() - t0) / 1e6, &err);
    }
    if (ret < 0) {
        fprintf(stderr, "vgmig-bench: %s\n", err.msg);
    }
    print_ratios(cells, n, multi, nmulti, &an);
    if (nmulti) {
        GString *ms = g_string_new("");

        md_multi(ms, multi, nmulti);
        fputs(ms->str, stdout);
        g_string_free(ms, TRUE);
    }
    count_bounds(cells, n, &est_ok, &n_est, &dt_ok, &n_dt);
    printf("vgmig-bench: stop-copy sent <= 1.2 x estimate + 1 MiB in %u of "
           "%u cells; downtime <= %d ms in %u of %u cells not forced\n",
           est_ok, n_est, BENCH_DT_MS + DT_SLACK_MS, dt_ok, n_dt);
    printf("vgmig-bench: %u cells and %u RAM anchors, %u failed, results in "
           "%s/results.json and ram-anchor.json\n",
           n, an.n, failed, o.out_dir);
    return ret < 0 || failed ? 1 : 0;
}
