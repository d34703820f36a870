/*
 * vgmig-bench.h -- what vgmig-bench's parts share: the parameters of its
 * cells (which the runner applies and the report describes), the options,
 * one measured cell, and the run's RAM anchors.
 *
 * vgmig-bench.c parses the options and runs the cells and anchors in
 * turn; bench-cell.c runs one cell (processes, workload, migration,
 * verification); bench-report.c writes the JSON, the plot data and the
 * Markdown report of the cells.
 */
#ifndef VGMIG_BENCH_H
#define VGMIG_BENCH_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "common/log.h"
#include "qclient/migrate.h"
#include "qclient/vfio-trace.h"
#include "ram-anchor.h"

/* --prealloc: a server's VRAM must be resident within this, plus this
 * per MiB (first touches ran at 477-677 MB/s on the 2-core VMs). */
#define PREALLOC_WAIT_MS    20000
#define PREALLOC_MS_PER_MIB 10

#define GUEST_RAM_MIB    256
#define RAM_START        ((uint64_t)16 << 20)
#define PAGE_SIZE        (64u << 10) /* the workloads' page (rows, straddles) */
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
#define MAX_DT_LIMIT_MS  60000 /* --downtime-limit */
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

/* The workloads' names, as --workloads takes them. */
extern const char *const wl_names[WL_COUNT];

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

/* The migration modes, as --modes takes them (bench-cell.c). */
extern const struct mode modes[MODE_COUNT];

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
    const char *log_level_name; /* the same, every vgpu-server's */
    bool prealloc;              /* servers --prealloc, QEMUs prealloc=on */
    bool no_data_plane;         /* servers --no-data-plane */
    bool no_device_thread;      /* servers --no-device-thread */
    bool no_data_vram;          /* servers --no-data-vram */
    bool place_data;            /* sources' x-migration-place-data=on */
    uint64_t max_bandwidth;     /* --max-bandwidth, bytes per second */
    int64_t dt_limit_ms;        /* --downtime-limit */
    uint64_t track_page;        /* --page-size: the servers' tracking page */
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
    int64_t dt_limit_ms;      /* QEMU's downtime-limit, until forced */
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

/* The RAM anchors of the run, one per size (ram-anchor.h). */
struct anchors {
    struct ram_anchor a[MAX_SIZES];
    unsigned n;
};

/* vGPU @i's entry of --src-backend or --dst-backend @b, NULL for none
 * (vgmig-bench.c). */
const char *backend_of(const struct backends *b, unsigned i);

/* ------------------------------------------------ bench-cell.c: one cell */

/* Run cell @c (its workload, mode, VRAM and vGPUs set) with @o and record
 * what it measured into it; -1 if it failed (c->error says why). */
int run_cell(const struct bench_opts *o, struct cell *c);

/* ------------------------------------------------ bench-report.c: reports */

/* The throughput of the RAM anchor of @size in @an; 0 without one. */
double ram_rate(const struct anchors *an, uint64_t size);
/* The slowest verified RAM anchor's throughput; 0 without one. */
double ram_rate_min(const struct anchors *an);

/* Note the host's load average as the run begins, for the report. */
void report_note_load(void);

/* One line on stdout for cell @c, or for RAM anchor @a, as it ends. */
void print_cell(const struct cell *c);
void print_anchor(const struct ram_anchor *a);

/* Write the run's results into @o->out_dir (results.json,
 * ram-anchor.json, downtime.dat, results-multi.json with --multi-vgpu)
 * and, with --doc, the report (@seconds: the run's time); -1 with @err
 * set if a file cannot be written. */
int report_write(const struct bench_opts *o, const struct cell *cells,
                 unsigned n, const struct cell *multi, unsigned nmulti,
                 const struct anchors *an, double seconds,
                 struct vg_error *err);

/* The ratios against the issues' targets, the several-vGPU table and how
 * many cells held their stop-copy estimate and downtime, on stdout. */
void report_print_summary(const struct cell *cells, unsigned n,
                          const struct cell *multi, unsigned nmulti,
                          const struct anchors *an);

#endif
