/*
 * mig-postcopy.c -- post-copy in the migration module: the page server of
 * a source (pc-src.c), VRAM on demand on a destination (pc-dst.c) from
 * the page server or from a save file (a restore), and the rules they
 * impose on the device (mig.h, "Post-copy").
 */
#include "mig-int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "pc-dst.h"
#include "pc-src.h"
#include "stream-file.h"

/* How often a destination's statistics show the pages arriving. */
#define PROGRESS_MS 100.0

/* How long a stopping server waits for a destination still fetching. */
#define SERVE_GRACE_MS 60000

bool mig_postcopy_capable(const struct mig *m)
{
    return m->runtime_dir != NULL;
}

/* The page server's way into VRAM that is not mapped here (a GPU's). */
static int vram_read(void *opaque, uint64_t off, void *dst, uint64_t len,
                     struct vg_error *err)
{
    struct mig *m = opaque;

    return vgpu_vram_read(m->gpu, off, dst, len, err);
}

bool mig_restore_capable(const struct mig *m)
{
    return !m->no_restore_on_demand;
}

int mig_postcopy_prepare(struct mig *m, struct vg_error *err)
{
    enum mig_state s = m->fsm.state;

    if (!mig_postcopy_capable(m)) {
        return vg_error_set(err, ENOTSUP, "post-copy is not available here");
    }
    if (s != MIG_STATE_PRE_COPY && s != MIG_STATE_PRE_COPY_P2P) {
        return vg_error_set(err, EINVAL, "post-copy switchover in %s",
                            mig_state_name(s));
    }
    return mig_save_postcopy(m, err);
}

void mig_note_client_uffd(struct mig *m, int fd,
                          const struct mig_client_area *areas, unsigned n)
{
    struct mig_client_area *copy = calloc(n ? n : 1, sizeof(*copy));

    mig_client_gone(m);
    if (!copy) {
        vg_warn("post-copy: no memory for the client's mappings");
        close(fd);
        return;
    }
    memcpy(copy, areas, n * sizeof(*copy));
    m->client_uffd = fd;
    m->client_areas = copy;
    m->client_nareas = n;
    vg_info("post-copy: the client's userfaultfd covers %u mapping%s of VRAM",
            n, n == 1 ? "" : "s");
}

void mig_client_gone(struct mig *m)
{
    if (m->client_uffd >= 0) {
        close(m->client_uffd);
    }
    m->client_uffd = -1;
    free(m->client_areas);
    m->client_areas = NULL;
    m->client_nareas = 0;
}

/* ----------------------------------------------------------------- source */

int mig_postcopy_serve(struct mig *m, const uint64_t *pending,
                       struct mig_postcopy_info *info, struct vg_error *err)
{
    struct pc_src_config cfg = {
        .vram = vgpu_vram(m->gpu),
        .read = vram_read,
        .read_opaque = m,
        .npages = m->npages,
        .page_size = m->scfg.page_size,
        .hash_version = m->hash_version,
        .pending = pending,
        .dir = m->runtime_dir,
        .tcp_host = m->postcopy_listen,
        .delay_ms = m->fault.postcopy_delay_ms,
    };
    struct pc_src_stats st;
    int ret;

    mig_postcopy_free(m);
    ret = pc_src_start(&cfg, &m->pc_src, err);
    if (ret < 0) {
        return ret;
    }
    pc_src_get_stats(m->pc_src, &st);
    memset(info, 0, sizeof(*info));
    info->npages = m->npages;
    info->pending = st.pending;
    pc_src_token(m->pc_src, info->token);
    snprintf(info->addr, sizeof(info->addr), "%s", pc_src_address(m->pc_src));
    m->stats.postcopy = true;
    m->stats.postcopy_pages = st.pending;
    m->pc_noted = false;
    vg_info("post-copy: %" PRIu64 " pages left to the page server at %s",
            st.pending, info->addr);
    return 0;
}

/* ------------------------------------------------------------ destination */

/* The engines' gate (vgpu_set_vram_gate) while pages arrive. */
static bool vram_ready(void *opaque, uint64_t off, uint64_t len)
{
    struct mig *m = opaque;

    return !m->pc_dst || pc_dst_ready(m->pc_dst, off, len);
}

/* pc-dst's way into VRAM that is not mapped here (a GPU's). */
static int vram_write(void *opaque, uint64_t off, const void *data,
                      uint64_t len, struct vg_error *err)
{
    struct mig *m = opaque;

    return vgpu_vram_write(m->gpu, off, data, len, err);
}

/* Start VRAM on demand from the source @cfg names (the rest is filled
 * here); the previous one was freed. */
static int fetch_start(struct mig *m, struct pc_dst_config *cfg,
                       struct vg_error *err)
{
    struct pc_dst_area *areas = calloc(m->client_nareas + 1, sizeof(*areas));
    int ret;

    if (!areas) {
        return vg_error_set(err, ENOMEM, "no memory for post-copy");
    }
    for (unsigned i = 0; i < m->client_nareas; i++) {
        areas[i] = (struct pc_dst_area){m->client_areas[i].vaddr,
                                        m->client_areas[i].vram_off,
                                        m->client_areas[i].size};
    }
    cfg->npages = m->npages;
    cfg->page_size = m->scfg.page_size;
    cfg->hash_version = m->hash_version;
    cfg->vram = vgpu_vram(m->gpu);
    cfg->write = vram_write;
    cfg->write_opaque = m;
    cfg->vram_fd = vgpu_vram_fd(m->gpu);
    cfg->uffd = -1;
    cfg->areas = areas;
    cfg->nareas = m->client_nareas;
    if (m->client_uffd >= 0 && m->bar2_shared) {
        cfg->uffd = dup(m->client_uffd);
    }
    vgpu_prealloc_end(m->gpu); /* it would fill the holes with zeros */
    ret = pc_dst_start(cfg, &m->pc_dst, err);
    if (ret < 0 && cfg->uffd >= 0) {
        close(cfg->uffd);
    }
    if (ret == 0 && !pc_dst_done(m->pc_dst)) {
        vgpu_set_vram_gate(m->gpu, vram_ready, m); /* per command */
    }
    free(areas);
    m->pc_noted = false;
    return ret;
}

int mig_postcopy_fetch(struct mig *m, const struct mig_postcopy_info *info,
                       struct vg_error *err)
{
    struct pc_dst_config cfg = {.pending = info->pending};

    mig_postcopy_free(m);
    memcpy(cfg.address, info->addr, sizeof(cfg.address));
    memcpy(cfg.token, info->token, sizeof(cfg.token));
    m->stats.postcopy = true;
    m->stats.postcopy_pages = info->pending;
    return fetch_start(m, &cfg, err);
}

int mig_restore_fetch(struct mig *m, struct sf *file, struct vg_error *err)
{
    struct pc_dst_config cfg = {.file = file, .threads = mig_threads(m)};
    struct pc_dst_stats st;
    int ret;

    mig_postcopy_free(m);
    m->restore = file;
    ret = fetch_start(m, &cfg, err);
    if (ret == 0) {
        pc_dst_get_stats(m->pc_dst, &st);
        m->stats.postcopy_pages = st.pending;
    }
    return ret;
}

bool mig_postcopy_fetches(const struct mig *m, uint64_t page)
{
    return m->pc_dst && pc_dst_fetches(m->pc_dst, page);
}

bool mig_postcopy_fetching(const struct mig *m)
{
    return m->pc_dst && !pc_dst_done(m->pc_dst);
}

int mig_vram_wait(struct mig *m, uint64_t off, uint64_t len,
                  struct vg_error *err)
{
    return m->pc_dst ? pc_dst_wait(m->pc_dst, off, len, err) : 0;
}

static void note_dst(struct mig *m)
{
    struct pc_dst_stats st;

    pc_dst_get_stats(m->pc_dst, &st);
    m->stats.postcopy_fetched = st.fetched;
    m->stats.postcopy_faults = st.faults;
    m->stats.postcopy_zero_faults = st.zero_faults;
    m->stats.postcopy_waits = st.waits;
    m->stats.postcopy_ms = st.elapsed_ms;
    m->stats.postcopy_max_fault_ms = st.max_fault_ms;
    m->stats.postcopy_on_demand = st.on_demand;
    m->stats.postcopy_done = st.done;
    m->stats.postcopy_verified = st.verified;
    m->stats.postcopy_reconnects = st.reconnects;
    if (st.error[0]) {
        mig_note_error(m, st.error);
    } else if (st.reconnecting) {
        char msg[VG_ERROR_MAX];

        snprintf(msg, sizeof(msg),
                 "post-copy: page channel broke (%.400s): "
                 "reconnecting",
                 st.channel_error);
        mig_note_error(m, msg);
    }
}

static void note_src(struct mig *m)
{
    struct pc_src_stats st;

    pc_src_get_stats(m->pc_src, &st);
    m->stats.postcopy_served = st.pages_served;
    m->stats.postcopy_done = st.finished;
    if (st.error[0]) {
        mig_note_error(m, st.error);
    }
}

/* Every page is in: the checksums of VRAM as the load delivered it (the
 * stream's pages and the fetched ones, as they arrived; the rest as they
 * are) and of the device state it loaded, comparable with the source's
 * although the device may have run meanwhile. */
static void take_delivered_checksums(struct mig *m)
{
    if (m->pc_hash && m->pc_known) {
        pc_dst_page_hashes(m->pc_dst, m->pc_hash, m->pc_known);
    }
    mig_take_checksums(m, m->pc_hash, m->pc_known, m->pc_state);
    free(m->pc_hash);
    free(m->pc_known);
    m->pc_hash = NULL;
    m->pc_known = NULL;
}

int mig_postcopy_poll(struct mig *m)
{
    if (m->pc_src && !m->pc_noted && pc_src_wait(m->pc_src, 0)) {
        note_src(m);
        m->pc_noted = true;
        mig_stats_flush(m, NULL);
        if (m->stats.postcopy_done) { /* its socket and thread go */
            pc_src_free(m->pc_src);
            m->pc_src = NULL;
        }
    }
    if (m->pc_dst && !m->pc_noted) {
        struct pc_dst_stats st;

        pc_dst_get_stats(m->pc_dst, &st);
        if (!st.done && !st.error[0] &&
            mig_now_ms() - m->pc_progress_ms >= PROGRESS_MS) {
            m->pc_progress_ms = mig_now_ms(); /* progress, for operators */
            note_dst(m);
            mig_stats_flush(m, NULL);
        }
        if (st.done || st.error[0]) {
            note_dst(m);
            m->pc_noted = true;
            if (st.done) { /* its channel, threads and userfaultfd go */
                vgpu_set_vram_gate(m->gpu, NULL, NULL);
                take_delivered_checksums(m);
                pc_dst_free(m->pc_dst);
                m->pc_dst = NULL;
                sf_free(m->restore); /* and the save file */
                m->restore = NULL;
            }
            mig_stats_flush(m, NULL);
        }
    }
    return (m->pc_src || m->pc_dst) && !m->pc_noted ? 5 : -1;
}

/* -------------------------------------------------------------- the FSM */

int mig_postcopy_check_arc(struct mig *m, enum mig_state to,
                           struct vg_error *err)
{
    struct pc_src_stats ss;

    if (m->pc_dst && !pc_dst_done(m->pc_dst) && to != MIG_STATE_RUNNING &&
        to != MIG_STATE_STOP && to != MIG_STATE_RUNNING_P2P &&
        to != MIG_STATE_ERROR) {
        return vg_error_set(err, EBUSY,
                            "post-copy: %s refused while pages still arrive "
                            "from the source",
                            mig_state_name(to));
    }
    if (!m->pc_src || (to != MIG_STATE_RUNNING && to != MIG_STATE_RUNNING_P2P &&
                       to != MIG_STATE_RESUMING)) {
        return 0;
    }
    pc_src_get_stats(m->pc_src, &ss);
    if (ss.claimed && !ss.finished) {
        return vg_error_set(err, EBUSY,
                            "post-copy: %s refused: the destination runs the "
                            "VM and still fetches this VRAM",
                            mig_state_name(to));
    }
    if (!ss.claimed) {
        vg_info("post-copy: no destination came; the page server stops");
    }
    note_src(m);
    pc_src_free(m->pc_src);
    m->pc_src = NULL;
    return 0;
}

void mig_postcopy_free(struct mig *m)
{
    struct pc_src_stats st;

    if (m->pc_src) {
        pc_src_get_stats(m->pc_src, &st);
        if (st.claimed && !st.finished) {
            vg_warn("post-copy: waiting up to %d s for the destination to "
                    "fetch its pages",
                    SERVE_GRACE_MS / 1000);
            pc_src_wait(m->pc_src, SERVE_GRACE_MS);
        }
        note_src(m);
    }
    if (m->pc_dst) {
        note_dst(m);
    }
    if (m->pc_dst) {
        vgpu_set_vram_gate(m->gpu, NULL, NULL);
    }
    pc_src_free(m->pc_src);
    pc_dst_free(m->pc_dst);
    sf_free(m->restore);
    free(m->pc_hash);
    free(m->pc_known);
    m->pc_hash = NULL;
    m->pc_known = NULL;
    m->pc_src = NULL;
    m->pc_dst = NULL;
    m->restore = NULL;
}
