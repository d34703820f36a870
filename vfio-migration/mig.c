/*
 * mig.c -- the migration module's core: the FSM's arc actions on the
 * device and the sessions, the message-level entry points and the
 * statistics file.
 */
#include "mig-int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/vfio.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/hash.h"
#include "common/log.h"

/* Not in every <linux/vfio.h> (Debian 12 ships Linux 6.1's). */
#define MIGRATION_PRE_COPY (1u << 2)

/* The saving group's states in which pre-copy data flows. */
static bool in_precopy(enum mig_state s)
{
    return s == MIG_STATE_PRE_COPY || s == MIG_STATE_PRE_COPY_P2P;
}

#define STATS_JSON_MAX 8192
/* The statistics file follows a change once no request has come for
 * STATS_QUIET_MS, or STATS_STALE_MS after the change at the latest. */
#define STATS_QUIET_MS 2.0
#define STATS_STALE_MS 50.0

double mig_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

uint64_t mig_page_hash(const struct mig *m, uint64_t page)
{
    return mig_stream_page_hash(m->hash_version,
                                vgpu_vram(m->gpu) + page * m->scfg.page_size,
                                m->scfg.page_size, NULL);
}

/* VRAM not mapped here, the stream's page hash not the GPU's (a tree):
 * read the pages @known lacks and hash them here. */
static bool mig_read_unknown(struct mig *m, uint64_t *hashes,
                             const uint64_t *known)
{
    uint32_t ps = m->scfg.page_size;
    uint8_t *page = malloc(ps);
    struct vg_error err;

    if (!page) {
        vg_warn("migration: no memory for the VRAM checksum");
        return false;
    }
    for (uint64_t p = 0; p < m->npages; p++) {
        if (known && mig_bit(known, p)) {
            continue;
        }
        if (vgpu_vram_read(m->gpu, p * ps, page, ps, &err) < 0) {
            vg_warn("migration: no VRAM checksum: %s", err.msg);
            free(page);
            return false;
        }
        hashes[p] = mig_stream_page_hash(m->hash_version, page, ps, NULL);
    }
    free(page);
    return true;
}

/* VRAM not mapped here: hash the pages @known lacks on the device. */
static bool mig_hash_unknown(struct mig *m, uint64_t *hashes,
                             const uint64_t *known)
{
    uint64_t words = (m->npages + 63) / 64;
    uint64_t *select = known ? malloc(words * 8) : NULL;
    struct vg_error err;
    int ret;

    if (known && !select) {
        vg_warn("migration: no memory for the VRAM checksum");
        return false;
    }
    for (uint64_t w = 0; known && w < words; w++) {
        select[w] = ~known[w];
    }
    ret = vgpu_vram_hash(m->gpu, select, 0, hashes, NULL, &err);
    free(select);
    if (ret < 0) {
        vg_warn("migration: no VRAM checksum: %s", err.msg);
    }
    return ret == 0;
}

/* Whether @known has the bit of every page set. */
static bool all_known(const struct mig *m, const uint64_t *known)
{
    uint64_t full = m->npages / 64, tail = m->npages % 64;

    for (uint64_t w = 0; w < full; w++) {
        if (known[w] != UINT64_MAX) {
            return false;
        }
    }
    return !tail || (known[full] | (UINT64_MAX << tail)) == UINT64_MAX;
}

bool mig_fill_hashes(struct mig *m, uint64_t *page_hash, const uint64_t *known)
{
    if (known && all_known(m, known)) {
        return true;
    }
    if (vgpu_vram(m->gpu)) {
        for (uint64_t p = 0; p < m->npages; p++) {
            if (!known || !mig_bit(known, p)) {
                page_hash[p] = mig_page_hash(m, p);
            }
        }
    } else if (m->hash_version >= MIG_TREE_HASH_VERSION) {
        return mig_read_unknown(m, page_hash, known);
    } else if (!mig_hash_unknown(m, page_hash, known)) {
        return false;
    }
    return true;
}

void mig_publish_checksums(struct mig *m, const uint64_t *page_hash,
                           const uint8_t *state)
{
    m->stats.vram_checksum = XXH3_64bits(page_hash, m->npages * 8);
    m->stats.device_state_checksum = XXH3_64bits(state, VGPU_STATE_SIZE);
    m->stats.have_checksums = true;
    vg_info("migration: VRAM checksum %016" PRIx64
            ", device state checksum %016" PRIx64,
            m->stats.vram_checksum, m->stats.device_state_checksum);
}

void mig_take_checksums(struct mig *m, uint64_t *page_hash,
                        const uint64_t *known, const uint8_t *state)
{
    uint8_t blob[VGPU_STATE_SIZE];
    uint64_t *hashes = page_hash ? page_hash : malloc(m->npages * 8);

    if (!hashes) {
        vg_warn("migration: no memory for the VRAM checksum");
        return;
    }
    if (mig_fill_hashes(m, hashes, known)) {
        if (state) {
            memcpy(blob, state, sizeof(blob));
        } else {
            vgpu_state_save(m->gpu, blob, sizeof(blob), NULL);
        }
        mig_publish_checksums(m, hashes, blob);
    }
    if (!page_hash) {
        free(hashes);
    }
}

/* Pages per piece of a record of @page_size pages (mig-int.h). */
static uint64_t piece_pages(uint32_t page_size)
{
    return page_size >= MIG_PIECE_BYTES ? 1 : MIG_PIECE_BYTES / page_size;
}

uint64_t mig_piece(uint64_t piece, uint32_t page_size, uint64_t count,
                   uint64_t *first)
{
    uint64_t n = piece_pages(page_size);

    *first = piece * n;
    return count - *first < n ? count : *first + n;
}

void mig_run_pieces(struct dt_pool *pool, uint32_t page_size, uint64_t count,
                    dt_pool_fn *fn, void *arg)
{
    uint64_t n = piece_pages(page_size), pieces = (count + n - 1) / n;

    if (count * page_size < MIG_SPLIT_BYTES || dt_pool_threads(pool) < 2) {
        for (uint64_t i = 0; i < pieces; i++) {
            fn(arg, i);
        }
        return;
    }
    dt_pool_run(pool, pieces, fn, arg);
}

/* Pool job: the page hashes of listed pages. */
struct listed_job {
    const struct mig *m;
    struct mig_tree *tree;
    const uint64_t *page;
    const uint64_t *mask;
    uint64_t *hash;
    unsigned count;
};

static void hash_listed_piece(void *arg, uint64_t piece)
{
    struct listed_job *job = arg;
    uint32_t ps = job->m->scfg.page_size;
    uint64_t i, end = mig_piece(piece, ps, job->count, &i);

    for (; i < end; i++) {
        const uint8_t *data = vgpu_vram(job->m->gpu) + job->page[i] * ps;

        job->hash[i] = job->tree ? mig_tree_rehash(job->tree, job->page[i],
                                                   data, job->mask[i], NULL)
                                 : mig_page_hash(job->m, job->page[i]);
    }
}

void mig_hash_listed(const struct mig *m, struct dt_pool *pool,
                     struct mig_tree *tree, const uint64_t *page,
                     const uint64_t *mask, unsigned n, uint64_t *hash)
{
    struct listed_job job = {m, tree, page, mask, hash, n};

    mig_run_pieces(pool, m->scfg.page_size, n, hash_listed_piece, &job);
}

void mig_note_error(struct mig *m, const char *msg)
{
    snprintf(m->stats.last_error, sizeof(m->stats.last_error), "%s", msg);
    mig_stats_flush(m, NULL);
}

void mig_note_dma_logging(struct mig *m, bool on)
{
    m->stats.dma_logging = on;
    if (on) { /* the report counters are per logging session */
        m->stats.dma_log_reports = 0;
        m->stats.dma_log_reports_idle = 0;
    }
    mig_stats_flush(m, NULL);
}

/* ------------------------------------------------------------ arc actions */

/* A new session: per-migration counters start over. */
static void session_started(struct mig *m)
{
    m->stats.migrations_started++;
    m->stats.precopy_bytes = 0;
    m->stats.stopcopy_bytes = 0;
    m->stats.rounds = 0;
    m->stats.final_dirty_bytes = 0;
    m->stats.stopcopy_estimate_bytes = 0;
    m->stats.stopcopy_hash_bytes = 0;
    m->stats.throttle_percent = 0;
    m->stats.throttle_rounds = 0;
    m->stats.throttle_held_ms = 0;
    m->stats.pages_hashed = 0;
    m->stats.cpu_log_pages = 0;
    m->stats.hash_ms = 0;
    m->stats.device_stopcopy_ms = -1;
    m->stats.stopcopy_reads = 0;
    m->stats.stopcopy_read_ms = 0;
    m->stats.precopy_reads = 0;
    m->stats.precopy_read_ms = 0;
    m->stats.load_writes = 0;
    m->stats.load_write_ms = 0;
    m->stats.data_hash_ms = 0;
    m->stats.data_copy_ms = 0;
    m->stats.shm_bytes = 0;
    m->stats.in_place_bytes = 0;
    m->stats.vram_piece_bytes = 0;
    m->stats.listed_bytes = 0;
    m->stats.pieces_pages = 0;
    m->stats.pieces_bytes = 0;
    m->stats.stale_pages = 0;
    m->stats.gpu_direct_bytes = 0;
    m->stats.gpu_hashed_bytes = 0;
    m->direct_base = vgpu_direct_bytes(m->gpu);
    m->stats.stream_version = 0;
    m->stats.stream_run_max = 0;
    m->stats.have_checksums = false;
    m->checksums_due = false;
    m->stats.postcopy = false;
    m->stats.postcopy_pages = 0;
    m->stats.postcopy_served = 0;
    m->stats.postcopy_fetched = 0;
    m->stats.postcopy_faults = 0;
    m->stats.postcopy_zero_faults = 0;
    m->stats.postcopy_waits = 0;
    m->stats.postcopy_ms = 0;
    m->stats.postcopy_max_fault_ms = 0;
    m->stats.postcopy_on_demand = false;
    m->stats.postcopy_done = false;
    m->stats.postcopy_verified = false;
    m->stats.postcopy_reconnects = 0;
    m->stats.restore_on_demand = false;
    m->stats_reset = true;
}

static int arc_quiesce(void *opaque, struct vg_error *err)
{
    struct mig *m = opaque;

    vgpu_set_stopped(m->gpu, true);
    return 0;
}

static int arc_resume(void *opaque, struct vg_error *err)
{
    struct mig *m = opaque;

    vgpu_set_stopped(m->gpu, false);
    return 0;
}

static int arc_precopy_start(void *opaque, struct vg_error *err)
{
    struct mig *m = opaque;

    session_started(m);
    return mig_save_open(m, true, err);
}

static int arc_save_end(void *opaque, struct vg_error *err)
{
    mig_save_close(opaque);
    return 0;
}

/* The stream is out and the device stays quiesced: its checksums are
 * taken after the reply (mig_idle), outside the migration's downtime. */
static int arc_stopcopy_end(void *opaque, struct vg_error *err)
{
    struct mig *m = opaque;

    mig_save_close(m);
    m->checksums_due = true;
    return 0;
}

/* A change the statistics file should show, written by mig_idle(). */
static void stats_changed(struct mig *m)
{
    double now = mig_now_ms();

    if (m->stats_due_ms == 0) {
        m->stats_due_ms = now;
    }
    m->stats_busy_ms = now;
}

void mig_note_dma_log_report(struct mig *m, bool idle)
{
    m->stats.dma_log_reports++;
    m->stats.dma_log_reports_idle += idle;
    stats_changed(m);
}

int mig_idle_wait_ms(const struct mig *m)
{
    double now = mig_now_ms(), quiet, stale, left;

    if (m->stats_due_ms == 0) {
        return -1;
    }
    quiet = m->stats_busy_ms + STATS_QUIET_MS - now;
    stale = m->stats_due_ms + STATS_STALE_MS - now;
    left = quiet < stale ? quiet : stale;
    return left > 0 ? (int)left + 1 : 0;
}

/* A call of the module begins: what the device did since the last one
 * (it may step on another thread) goes into the session and statistics. */
static void fold_device(struct mig *m)
{
    mig_save_fold_writes(m);
    pthread_mutex_lock(&m->step_lock);
    m->stats.throttle_held_ms = m->rounds.held_ms;
    pthread_mutex_unlock(&m->step_lock);
}

void mig_idle(struct mig *m, bool served)
{
    fold_device(m);
    if (served) {
        m->stats_busy_ms = mig_now_ms();
    }
    if (m->checksums_due) {
        m->checksums_due = false;
        if (m->fsm.state == MIG_STATE_STOP) {
            mig_take_checksums(m, NULL, NULL, NULL);
            mig_stats_flush(m, NULL);
        }
    }
    if (m->load_retire_due && m->stats_due_ms == 0) {
        stats_changed(m); /* retired once quiet: the VM is starting */
    }
    if (m->load_retire_due && mig_idle_wait_ms(m) == 0) {
        mig_load_retire(m);
    }
    if (m->stats_due_ms > 0 && mig_idle_wait_ms(m) == 0) {
        mig_stats_flush(m, NULL);
    }
}

/* PRE_COPY_P2P -> STOP_COPY: the device is quiesced since PRE_COPY ->
 * PRE_COPY_P2P; the final pass starts. */
static int arc_precopy_to_stopcopy(void *opaque, struct vg_error *err)
{
    mig_save_stopcopy(opaque);
    return 0;
}

static int arc_stopcopy_start(void *opaque, struct vg_error *err)
{
    struct mig *m = opaque;

    session_started(m);
    return mig_save_open(m, false, err);
}

static int arc_resume_start(void *opaque, struct vg_error *err)
{
    struct mig *m = opaque;

    session_started(m);
    return mig_load_open(m, err);
}

static int arc_resume_end(void *opaque, struct vg_error *err)
{
    return mig_load_finish(opaque, err);
}

static void fsm_reset(void *opaque)
{
    struct mig *m = opaque;

    mig_save_close(m);
    mig_load_retire(m); /* a session loaded before: its checksums */
    mig_load_close(m);
    vgpu_set_stopped(m->gpu, false);
}

/* After every change: ERROR keeps the device quiesced and ends sessions.
 * The stats file shows ERROR and a new session's reset counters at once
 * (never an earlier session's checksums), other states once idle. */
static void fsm_changed(void *opaque, enum mig_state from, enum mig_state to)
{
    struct mig *m = opaque;

    vg_info("migration: device state %s -> %s", mig_state_name(from),
            mig_state_name(to));
    if (to == MIG_STATE_ERROR) {
        vgpu_set_stopped(m->gpu, true);
        mig_save_close(m);
        mig_load_retire(m);
        mig_load_close(m);
    }
    if (to == MIG_STATE_ERROR || m->stats_reset) {
        m->stats_reset = false;
        mig_stats_flush(m, NULL);
        return;
    }
    stats_changed(m);
}

/*
 * A P2P state is quiesced like STOP (vgpu_set_stopped: the command
 * processor runs nothing, so no DMA and no engine writes to guest RAM or
 * VRAM), so RUNNING_P2P <-> STOP have nothing to do; the saving session of
 * PRE_COPY stays open through PRE_COPY_P2P.
 */
static const struct mig_fsm_ops fsm_ops = {
    .running_to_p2p = arc_quiesce,
    .p2p_to_running = arc_resume,
    .p2p_to_stop = NULL,
    .stop_to_p2p = NULL,
    .running_to_precopy = arc_precopy_start,
    .precopy_to_running = arc_save_end,
    .p2p_to_precopy_p2p = arc_precopy_start,
    .precopy_p2p_to_p2p = arc_save_end,
    .precopy_to_precopy_p2p = arc_quiesce,
    .precopy_p2p_to_precopy = arc_resume,
    .precopy_p2p_to_stopcopy = arc_precopy_to_stopcopy,
    .stop_to_stopcopy = arc_stopcopy_start,
    .stopcopy_to_stop = arc_stopcopy_end,
    .stop_to_resuming = arc_resume_start,
    .resuming_to_stop = arc_resume_end,
    .reset = fsm_reset,
    .changed = fsm_changed,
};

/* ------------------------------------------------------------- lifecycle */

/* Whether @name is a temporary file of write_atomic() for a file named
 * @base: "@base.tmp." and the six characters mkostemp() put there. */
static bool is_stale_tmp(const char *name, const char *base)
{
    size_t n = strlen(base);

    return strncmp(name, base, n) == 0 && strncmp(name + n, ".tmp.", 5) == 0 &&
           strlen(name + n + 5) == 6 &&
           strspn(name + n + 5, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopq"
                                "rstuvwxyz0123456789") == 6;
}

/*
 * Remove the temporary files a server killed between write_atomic()'s
 * create and rename left beside the statistics file @path (a server
 * writes only its own; the next rename would not have reached them).
 */
static void remove_stale_tmp(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, (size_t)(slash - path + 1)) : strdup(".");
    const char *base = slash ? slash + 1 : path;
    DIR *d = dir ? opendir(dir) : NULL;
    struct dirent *e;
    unsigned removed = 0;

    while (d && (e = readdir(d)) != NULL) {
        if (is_stale_tmp(e->d_name, base) &&
            unlinkat(dirfd(d), e->d_name, 0) == 0) {
            removed++;
        }
    }
    if (removed) {
        vg_info("stats file %s: removed %u temporary file%s left by a server "
                "that was killed",
                path, removed, removed == 1 ? "" : "s");
    }
    if (d) {
        closedir(d);
    }
    free(dir);
}

int mig_new(const struct mig_config *cfg, struct mig **out,
            struct vg_error *err)
{
    struct mig *m = calloc(1, sizeof(*m));
    bool tree_now; /* --prealloc: the kept piece hashes too */
    int ret;

    if (!m) {
        return vg_error_set(err, ENOMEM, "migration state");
    }
    pthread_mutex_init(&m->step_lock, NULL);
    mig_wlog_init(&m->wlog);
    m->gpu = cfg->gpu;
    m->scfg = (struct mig_stream_config){
        .vram_size = vgpu_vram_size(cfg->gpu),
        .page_size = vgpu_page_size(cfg->gpu),
        .features = cfg->features,
    };
    m->npages = m->scfg.vram_size / m->scfg.page_size;
    m->fault = cfg->fault;
    m->precopy = cfg->precopy;
    m->track = cfg->track;
    m->gpu_hash = cfg->gpu_hash;
    m->hash_threads = cfg->hash_threads ? cfg->hash_threads : 2;
    m->stream_version =
        cfg->stream_version ? cfg->stream_version : MIG_STREAM_VERSION;
    m->run_max = cfg->small_records ? MIG_RUN_SMALL_BYTES : MIG_RUN_MAX_BYTES;
    m->nonzero = calloc((size_t)(m->npages + 63) / 64, 8);
    tree_now = cfg->prealloc && vgpu_vram(m->gpu);
    m->tree =
        tree_now ? mig_tree_new(m->npages, m->scfg.page_size, true) : NULL;
    m->stats_path = cfg->stats_path ? strdup(cfg->stats_path) : NULL;
    m->runtime_dir = cfg->runtime_dir ? strdup(cfg->runtime_dir) : NULL;
    m->no_restore_on_demand = cfg->no_restore_on_demand;
    m->postcopy_listen =
        cfg->postcopy_listen ? strdup(cfg->postcopy_listen) : NULL;
    m->client_uffd = -1;
    if (!m->nonzero || (tree_now && !m->tree) ||
        (cfg->stats_path && !m->stats_path) ||
        (cfg->runtime_dir && !m->runtime_dir) ||
        (cfg->postcopy_listen && !m->postcopy_listen)) {
        mig_free(m);
        return vg_error_set(err, ENOMEM, "migration state");
    }
    mig_bitmap_fill(m->nonzero, m->npages);
    m->nonzero_count = m->npages;
    m->stats.device_stopcopy_ms = -1;
    mig_fsm_init(&m->fsm, &fsm_ops, m);
    if (m->stats_path) {
        remove_stale_tmp(m->stats_path);
    }
    ret = mig_stats_flush(m, err);
    if (ret < 0) {
        free(m->stats_path);
        m->stats_path = NULL; /* no second attempt from mig_free */
        mig_free(m);
        return ret;
    }
    *out = m;
    return 0;
}

void mig_free(struct mig *m)
{
    if (!m) {
        return;
    }
    mig_save_close(m);
    mig_load_retire(m);
    mig_load_close(m);
    mig_postcopy_free(m);
    mig_client_gone(m);
    if (m->nonzero) {
        mig_stats_flush(m, NULL);
    }
    mig_tree_free(m->tree);
    free(m->nonzero);
    free(m->stats_path);
    free(m->runtime_dir);
    free(m->postcopy_listen);
    mig_wlog_destroy(&m->wlog);
    pthread_mutex_destroy(&m->step_lock);
    free(m);
}

/* --------------------------------------------------------- entry points */

uint64_t mig_flags(void)
{
    return VFIO_MIGRATION_STOP_COPY | VFIO_MIGRATION_P2P | MIGRATION_PRE_COPY;
}

enum mig_state mig_state(const struct mig *m)
{
    return m->fsm.state;
}

/* The arcs of a VM starting: a loaded session may be retired after them,
 * out of the downtime. */
static bool starts_device(uint32_t target)
{
    return target == MIG_STATE_RUNNING_P2P || target == MIG_STATE_RUNNING;
}

int mig_set_state(struct mig *m, uint32_t target, struct vg_error *err)
{
    int ret;

    fold_device(m);
    if (!starts_device(target)) {
        mig_load_retire(m); /* before other work; see mig_idle() */
    }
    ret = mig_postcopy_check_arc(m, (enum mig_state)target, err);

    if (ret == 0) {
        ret = mig_fsm_set(&m->fsm, target, err);
    }
    if (ret < 0 && err) {
        mig_note_error(m, err->msg);
    }
    return ret;
}

struct mig_tree *mig_session_tree(struct mig *m)
{
    if (!m->tree) {
        m->tree = mig_tree_new(m->npages, m->scfg.page_size, false);
    } else {
        mig_tree_reset(m->tree);
    }
    return m->tree;
}

void mig_reset(struct mig *m)
{
    mig_fsm_reset(&m->fsm);
}

static int read_stream(struct mig *m, uint8_t *buf, uint32_t size,
                       uint32_t *got, struct mig_pieces *pieces,
                       struct vg_error *err)
{
    enum mig_state s = m->fsm.state;

    double t0;
    int ret;

    if (!in_precopy(s) && s != MIG_STATE_STOP_COPY) {
        return vg_error_set(err, EINVAL, "no migration data to read in %s",
                            mig_state_name(s));
    }
    fold_device(m);
    t0 = mig_now_ms();
    if (m->fault.read_delay_ms) {
        usleep(m->fault.read_delay_ms * 1000u);
    }
    ret = mig_save_read(m, buf, size, got, pieces, err);
    if (s == MIG_STATE_STOP_COPY) {
        m->stats.stopcopy_reads++;
        m->stats.stopcopy_read_ms += mig_now_ms() - t0;
    } else {
        m->stats.precopy_reads++;
        m->stats.precopy_read_ms += mig_now_ms() - t0;
    }
    return ret;
}

int mig_read(struct mig *m, uint8_t *buf, uint32_t size, uint32_t *got,
             struct vg_error *err)
{
    return read_stream(m, buf, size, got, NULL, err);
}

int mig_read_pieces(struct mig *m, uint8_t *buf, uint32_t size, uint32_t *got,
                    struct mig_piece *pieces, unsigned max, unsigned *npieces,
                    struct vg_error *err)
{
    struct mig_pieces p = {.piece = pieces, .max = max};
    int ret;

    *npieces = 0;
    if (max < 2) {
        return vg_error_set(err, EINVAL, "room for %u pieces, at least 2", max);
    }
    ret = read_stream(m, buf, size, got, &p, err);
    *npieces = p.count;
    return ret;
}

uint32_t mig_read_pass(const struct mig *m)
{
    return m->save ? mig_save_pass(m) : 0;
}

bool mig_read_ended(const struct mig *m)
{
    return m->fsm.state == MIG_STATE_STOP_COPY && mig_save_ended(m);
}

int mig_write_file(struct mig *m, int fd, uint64_t off, uint64_t len,
                   struct vg_error *err)
{
    int ret;

    if (m->fsm.state != MIG_STATE_RESUMING) {
        if (fd >= 0) {
            close(fd);
        }
        return vg_error_set(err, EINVAL, "migration data refused in %s",
                            mig_state_name(m->fsm.state));
    }
    ret = mig_load_file(m, fd, off, len, err);
    m->stats.load_writes++;
    if (ret < 0) {
        mig_fsm_fail(&m->fsm, "bad migration stream");
    }
    return ret;
}

/* One piece of a write: inside the @size bytes at @buf, or in VRAM. */
static int write_piece(struct mig *m, const uint8_t *buf, uint32_t size,
                       const struct mig_piece *p, struct vg_error *err)
{
    if (p->in_vram) {
        return mig_load_placed(m, p->offset, p->len, err);
    }
    if (p->offset > size || p->len > size - p->offset) {
        return vg_error_set(err, ERANGE,
                            "piece of %u bytes at %" PRIu64
                            " outside the write's %u bytes",
                            p->len, p->offset, size);
    }
    return mig_load_write(m, buf + p->offset, p->len, err);
}

int mig_write_pieces(struct mig *m, const uint8_t *buf, uint32_t size,
                     const struct mig_piece *pieces, unsigned n,
                     struct vg_error *err)
{
    double t0;
    int ret = 0;

    if (m->fsm.state != MIG_STATE_RESUMING) {
        return vg_error_set(err, EINVAL, "migration data refused in %s",
                            mig_state_name(m->fsm.state));
    }
    t0 = mig_now_ms();
    if (m->fault.write_delay_ms) {
        usleep(m->fault.write_delay_ms * 1000u);
    }
    for (unsigned i = 0; ret == 0 && i < n; i++) {
        ret = write_piece(m, buf, size, &pieces[i], err);
    }
    m->stats.load_writes++;
    m->stats.load_write_ms += mig_now_ms() - t0;
    if (ret < 0) {
        /* Nothing loaded can be trusted any more. */
        mig_fsm_fail(&m->fsm, "bad migration stream");
    }
    return ret;
}

int mig_write(struct mig *m, const uint8_t *data, uint32_t size,
              struct vg_error *err)
{
    const struct mig_piece all = {.offset = 0, .len = size, .in_vram = false};

    return mig_write_pieces(m, data, size, &all, 1, err);
}

int mig_precopy_info(struct mig *m, uint64_t *initial, uint64_t *dirty,
                     struct vg_error *err)
{
    if (!in_precopy(m->fsm.state)) {
        return vg_error_set(err, EINVAL, "pre-copy info outside PRE_COPY (%s)",
                            mig_state_name(m->fsm.state));
    }
    fold_device(m);
    mig_save_precopy_info(m, initial, dirty);
    return 0;
}

unsigned mig_threads(const struct mig *m)
{
    return m->hash_threads;
}

uint64_t mig_stopcopy_size(struct mig *m)
{
    uint64_t n;

    fold_device(m);
    mig_save_note_size_query(m);
    n = mig_save_stopcopy_left(m);

    if (m->fsm.state != MIG_STATE_STOP_COPY) {
        m->stats.stopcopy_estimate_bytes = n;
        m->stats.stopcopy_hash_bytes = mig_save_stopcopy_hash_bytes(m);
    }
    return n;
}

void mig_note_bar2_shared(struct mig *m)
{
    if (!m->bar2_shared) {
        vg_dbg("migration: BAR2 shared with the client: hybrid tracking "
               "hashes every page");
    }
    m->bar2_shared = true;
}

void mig_note_shm_bytes(struct mig *m, uint64_t bytes)
{
    m->stats.shm_bytes += bytes;
    m->stats.gpu_direct_bytes = vgpu_direct_bytes(m->gpu) - m->direct_base;
}

void mig_note_bar2_logged(struct mig *m, bool on)
{
    if (on != m->bar2_logged) {
        vg_dbg("migration: the client %s guest writes to BAR2",
               on ? "logs" : "no longer logs");
    }
    m->bar2_logged = on;
    m->stats.bar2_logged = on;
}

int mig_region_dirty_log(struct mig *m, uint64_t off, const uint64_t *bitmap,
                         uint64_t nbits, uint64_t gran, struct vg_error *err)
{
    if (!in_precopy(m->fsm.state)) {
        return vg_error_set(err, EINVAL, "BAR2 dirty log outside PRE_COPY (%s)",
                            mig_state_name(m->fsm.state));
    }
    fold_device(m);
    return mig_save_cpu_log(m, off, bitmap, nbits, gran, err);
}

void mig_gpu_step(struct mig *m, uint64_t budget)
{
    double t0 = mig_now_ms();
    double wait;

    pthread_mutex_lock(&m->step_lock);
    wait = mig_rounds_step_wait_ms(&m->rounds, t0);
    pthread_mutex_unlock(&m->step_lock);
    if (wait > 0) {
        return;
    }
    vgpu_step(m->gpu, budget); /* its writes go to m->wlog */
    pthread_mutex_lock(&m->step_lock);
    mig_rounds_stepped(&m->rounds, t0, mig_now_ms());
    pthread_mutex_unlock(&m->step_lock);
}

int mig_gpu_wait_ms(struct mig *m)
{
    double w;

    pthread_mutex_lock(&m->step_lock);
    w = mig_rounds_step_wait_ms(&m->rounds, mig_now_ms());
    pthread_mutex_unlock(&m->step_lock);

    if (mig_postcopy_fetching(m)) {
        return 5; /* a command may wait for its pages */
    }
    return w > 0 ? (int)w + 1 : 0;
}

/* ------------------------------------------------------------ statistics */

void mig_get_stats(const struct mig *m, struct mig_stats *st)
{
    *st = m->stats;
}

/* @s as a JSON string body (quotes not included) into @out (@size). */
static void json_escape(const char *s, char *out, size_t size)
{
    size_t n = 0;

    for (; *s && n + 7 < size; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[n++] = '\\';
            out[n++] = (char)c;
        } else if (c < 0x20) {
            n += (size_t)snprintf(out + n, size - n, "\\u%04x", c);
        } else {
            out[n++] = (char)c;
        }
    }
    out[n] = '\0';
}

static void hex_or_null(bool have, uint64_t v, char *out, size_t size)
{
    if (have) {
        snprintf(out, size, "\"%016" PRIx64 "\"", v);
    } else {
        snprintf(out, size, "null");
    }
}

/* The post-copy statistics as JSON members, after a comma. */
static void postcopy_json(const struct mig_stats *st, char *out, size_t size)
{
    snprintf(out, size,
             ",\n  \"postcopy\": %s,\n  \"postcopy_pages\": %" PRIu64
             ",\n  \"postcopy_served\": %" PRIu64
             ",\n  \"postcopy_fetched\": %" PRIu64
             ",\n  \"postcopy_faults\": %" PRIu64
             ",\n  \"postcopy_zero_faults\": %" PRIu64
             ",\n  \"postcopy_waits\": %" PRIu64
             ",\n  \"postcopy_ms\": %.3f,\n  \"postcopy_max_fault_ms\": %.3f"
             ",\n  \"postcopy_on_demand\": %s,\n  \"postcopy_done\": %s"
             ",\n  \"postcopy_verified\": %s"
             ",\n  \"postcopy_reconnects\": %" PRIu64
             ",\n  \"restore_on_demand\": %s",
             st->postcopy ? "true" : "false", st->postcopy_pages,
             st->postcopy_served, st->postcopy_fetched, st->postcopy_faults,
             st->postcopy_zero_faults, st->postcopy_waits, st->postcopy_ms,
             st->postcopy_max_fault_ms,
             st->postcopy_on_demand ? "true" : "false",
             st->postcopy_done ? "true" : "false",
             st->postcopy_verified ? "true" : "false", st->postcopy_reconnects,
             st->restore_on_demand ? "true" : "false");
}

int mig_stats_json(const struct mig *m, char *buf, size_t size,
                   struct vg_error *err)
{
    const struct mig_stats *st = &m->stats;
    char error[VG_ERROR_MAX * 2], vram[24], state[24], ms[32], backend[320];
    char postcopy[768];
    int n;

    json_escape(st->last_error, error, sizeof(error));
    json_escape(vgpu_backend_describe(m->gpu), backend, sizeof(backend));
    hex_or_null(st->have_checksums, st->vram_checksum, vram, sizeof(vram));
    hex_or_null(st->have_checksums, st->device_state_checksum, state,
                sizeof(state));
    if (st->device_stopcopy_ms < 0) {
        snprintf(ms, sizeof(ms), "null");
    } else {
        snprintf(ms, sizeof(ms), "%.3f", st->device_stopcopy_ms);
    }
    postcopy_json(st, postcopy, sizeof(postcopy));
    n = snprintf(
        buf, size,
        "{\n  \"state\": \"%s\",\n  \"backend\": \"%s\""
        ",\n  \"migrations_started\": %" PRIu64 ",\n  \"bytes_sent\": %" PRIu64
        ",\n  \"bytes_received\": %" PRIu64 ",\n  \"precopy_bytes\": %" PRIu64
        ",\n  \"stopcopy_bytes\": %" PRIu64 ",\n  \"rounds\": %" PRIu64
        ",\n  \"precopy_mode\": \"%s\""
        ",\n  \"dirty_track_mode\": \"%s\",\n  \"final_dirty_bytes\": %" PRIu64
        ",\n  \"stopcopy_estimate_bytes\": %" PRIu64
        ",\n  \"stopcopy_hash_bytes\": %" PRIu64
        ",\n  \"throttle_percent\": %u,\n  \"throttle_rounds\": %" PRIu64
        ",\n  \"throttle_held_ms\": %.3f"
        ",\n  \"pages_hashed\": %" PRIu64 ",\n  \"hash_ms\": %.3f"
        ",\n  \"device_stopcopy_ms\": %s,\n  \"vram_checksum\": %s,"
        "\n  \"device_state_checksum\": %s,\n  \"dma_logging\": %s,"
        "\n  \"dma_log_reports\": %" PRIu64
        ",\n  \"dma_log_reports_idle\": %" PRIu64
        ",\n  \"bar2_logged\": %s,\n  \"cpu_log_pages\": %" PRIu64
        ",\n  \"stopcopy_reads\": %" PRIu64 ",\n  \"stopcopy_read_ms\": %.3f"
        ",\n  \"precopy_reads\": %" PRIu64 ",\n  \"precopy_read_ms\": %.3f"
        ",\n  \"load_writes\": %" PRIu64 ",\n  \"load_write_ms\": %.3f"
        ",\n  \"data_hash_ms\": %.3f,\n  \"data_copy_ms\": %.3f"
        ",\n  \"shm_bytes\": %" PRIu64 ",\n  \"in_place_bytes\": %" PRIu64
        ",\n  \"vram_piece_bytes\": %" PRIu64 ",\n  \"listed_bytes\": %" PRIu64
        ",\n  \"pieces_pages\": %" PRIu64 ",\n  \"pieces_bytes\": %" PRIu64
        ",\n  \"stale_pages\": %" PRIu64 ",\n  \"gpu_direct_bytes\": %" PRIu64
        ",\n  \"gpu_hashed_bytes\": %" PRIu64 ",\n  \"stream_version\": %u"
        ",\n  \"stream_run_max\": %u"
        "%s,\n  \"last_error\": \"%s\"\n}\n",
        mig_state_name(m->fsm.state), backend, st->migrations_started,
        st->bytes_sent, st->bytes_received, st->precopy_bytes,
        st->stopcopy_bytes, st->rounds, mig_precopy_mode_name(m->precopy),
        mig_track_mode_name(m->track), st->final_dirty_bytes,
        st->stopcopy_estimate_bytes, st->stopcopy_hash_bytes,
        st->throttle_percent, st->throttle_rounds, st->throttle_held_ms,
        st->pages_hashed, st->hash_ms, ms, vram, state,
        st->dma_logging ? "true" : "false", st->dma_log_reports,
        st->dma_log_reports_idle, st->bar2_logged ? "true" : "false",
        st->cpu_log_pages, st->stopcopy_reads, st->stopcopy_read_ms,
        st->precopy_reads, st->precopy_read_ms, st->load_writes,
        st->load_write_ms, st->data_hash_ms, st->data_copy_ms, st->shm_bytes,
        st->in_place_bytes, st->vram_piece_bytes, st->listed_bytes,
        st->pieces_pages, st->pieces_bytes, st->stale_pages,
        st->gpu_direct_bytes, st->gpu_hashed_bytes, st->stream_version,
        st->stream_run_max, postcopy, error);
    if (n < 0 || (size_t)n >= size) {
        return vg_error_set(err, ENOSPC, "stats JSON exceeds %zu bytes", size);
    }
    return n;
}

/*
 * Write @len bytes of @text to @path through a temporary file + rename.
 * The temporary name is unpredictable and created exclusively (mkstemp:
 * O_CREAT | O_EXCL, so a link planted in the directory is never
 * followed), then given the mode a plain create would have had.
 */
static int write_atomic(const char *path, const char *text, size_t len,
                        struct vg_error *err)
{
    char tmp[4096];
    mode_t mask;
    int fd, ok;

    if (snprintf(tmp, sizeof(tmp), "%s.tmp.XXXXXX", path) >= (int)sizeof(tmp)) {
        return vg_error_set(err, ENAMETOOLONG, "stats file name too long");
    }
    fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        return vg_error_set(err, errno, "stats file %s: %s", tmp,
                            strerror(errno));
    }
    mask = umask(0);
    umask(mask);
    errno = EIO; /* a short write sets none */
    ok = fchmod(fd, 0666 & ~mask) == 0 && write(fd, text, len) == (ssize_t)len;
    ok = (close(fd) == 0) && ok;
    if (!ok || rename(tmp, path) < 0) {
        int e = errno;
        unlink(tmp);
        return vg_error_set(err, e, "stats file %s: %s", path, strerror(e));
    }
    return 0;
}

int mig_stats_flush(struct mig *m, struct vg_error *err)
{
    char buf[STATS_JSON_MAX];
    struct vg_error e;
    int n;

    m->stats_due_ms = 0;
    if (!m->stats_path) {
        return 0;
    }
    n = mig_stats_json(m, buf, sizeof(buf), &e);
    if (n >= 0) {
        n = write_atomic(m->stats_path, buf, (size_t)n, &e);
    }
    if (n < 0) {
        vg_warn("%s", e.msg);
        if (err) {
            *err = e;
        }
        return n;
    }
    return 0;
}
