/*
 * vfu-data.c -- the migration's data plane on the transport: DEVICE_FEATURE
 * (MIGRATION, MIG_DEVICE_STATE, MIG_DATA_SIZE, DMA_LOGGING_*), MIG_DATA_READ
 * and MIG_DATA_WRITE, MIG_GET_PRECOPY_INFO and REGION_DIRTY_LOG, each
 * parsed here and served by the migration module (mig.h).  Runs on the
 * control loop today; the data plane's worker is to run it.
 */
#include "vfu-server-int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/log.h"
#include "common/populate.h"
#include "vfu-dma.h"
#include "vfu-mig-msg.h"

/* ----------------------------------------------------------- the module */

int vfu_data_init(struct vfu_server *srv, const struct vfu_server_config *cfg,
                  struct vg_error *err)
{
    char dir[PATH_MAX];
    const char *slash =
        cfg->socket_path ? strrchr(cfg->socket_path, '/') : NULL;
    struct mig_config mc = {
        .gpu = srv->gpu,
        .stats_path = cfg->stats_path,
        .fault = cfg->fault,
        .precopy = cfg->precopy,
        .track = cfg->track,
        .gpu_hash = cfg->gpu_hash,
        .hash_threads = cfg->migration_threads,
        .stream_version = cfg->stream_version,
        .small_records = cfg->small_records,
        .postcopy_listen = cfg->postcopy_listen,
        .no_restore_on_demand = cfg->no_restore_on_demand,
        .prealloc = cfg->gpu.prealloc,
    };

    /* A post-copy page server's socket goes beside ours. */
    if (cfg->socket_path && !cfg->no_postcopy) {
        snprintf(dir, sizeof(dir), "%.*s",
                 slash ? (int)(slash - cfg->socket_path) : 1,
                 slash ? cfg->socket_path : ".");
        mc.runtime_dir = dir[0] ? dir : "/";
    }
    srv->shm_fd = -1;
    srv->vram_ro_fd = -1;
    /* The destination must offer the features the source's guest saw. */
    vgpu_bar0_read(srv->gpu, VGPU_REG_FEATURES, &mc.features, 4);
    return mig_new(&mc, &srv->mig, err);
}

/* Unmap and close the shared memory area of MIG_DATA_SHM, if any. */
static void shm_release(struct vfu_server *srv)
{
    vg_populate_free(srv->shm_populate); /* joined before the unmap */
    srv->shm_populate = NULL;
    if (srv->shm) {
        vgpu_host_unregister(srv->gpu, srv->shm);
        munmap(srv->shm, (size_t)srv->shm_slots * SHM_SLOT_SIZE);
        srv->shm = NULL;
    }
    if (srv->shm_fd >= 0) {
        close(srv->shm_fd);
        srv->shm_fd = -1;
    }
    if (srv->vram_ro_fd >= 0) {
        close(srv->vram_ro_fd);
        srv->vram_ro_fd = -1;
    }
}

void vfu_data_free(struct vfu_server *srv)
{
    shm_release(srv);
    mig_free(srv->mig);
}

/* Stop DMA logging; the statistics record it if it was on. */
static void dma_log_stop(struct vfu_server *srv)
{
    if (vfu_dma_logging(srv->dma)) {
        vfu_dma_log_stop(srv->dma);
        mig_note_dma_logging(srv->mig, false);
    }
}

void vfu_data_release(struct vfu_server *srv)
{
    srv->precopy_info = false;
    srv->region_log = false;
    srv->data_shm = false;
    srv->data_vram = false;
    shm_release(srv);
    mig_note_bar2_logged(srv->mig, false);
    dma_log_stop(srv);
}

void vfu_mig_idle(struct vfu_server *srv, bool served)
{
    vfu_regs_lock(srv);
    mig_idle(srv->mig, served);
    vfu_regs_unlock(srv);
}

/* ------------------------------------------------------- DEVICE_FEATURE */

/* Reply to DEVICE_FEATURE request @p: its header with argsz covering
 * @n bytes of @data (NULL: the request's own data, echoed). */
static void feature_reply(struct vfu_server *srv, const uint8_t *p,
                          const void *data, size_t n, struct vfu_reply *r)
{
    struct vfu_device_feature h;

    memcpy(&h, p, sizeof(h));
    h.argsz = (uint32_t)(sizeof(h) + n);
    memcpy(vfu_payload(srv), &h, sizeof(h));
    memmove(vfu_payload(srv) + sizeof(h), data ? data : p + sizeof(h), n);
    r->len = (uint32_t)(sizeof(h) + n);
}

/* The feature supports GET (@get) and/or SET (@set) only. */
static int feature_ops(const struct vfu_feature_req *f, bool get, bool set,
                       struct vg_error *err)
{
    if ((f->get && !get) || (f->set && !set)) {
        return vg_error_set(err, EINVAL, "feature %u: %s not supported",
                            f->index, f->get && !get ? "GET" : "SET");
    }
    return 0;
}

static int feature_migration(struct vfu_server *srv, const uint8_t *p,
                             const struct vfu_feature_req *f,
                             struct vfu_reply *r, struct vg_error *err)
{
    struct vfu_feature_migration m = {mig_flags()};
    int ret = vfu_feature_check_argsz(f, sizeof(m), err);

    if (ret == 0) {
        feature_reply(srv, p, &m, sizeof(m), r);
    }
    return ret;
}

/* A page the device writes as it finishes its DMA in flight */
#define LATE_DMA_SIZE    4096u
#define LATE_DMA_PATTERN 0x1a7ed3a0u

static bool state_running(enum mig_state s)
{
    return s == MIG_STATE_RUNNING || s == MIG_STATE_PRE_COPY;
}

/*
 * TEST ONLY (--fault late-dma:GPA): on its way out of a running state,
 * the device writes one page at GPA by DMA, logged as any DMA, as a
 * device finishing the DMA it had in flight would.  Only the RAM dirty
 * sync inside the downtime can find that page.
 */
static void late_dma(struct vfu_server *srv, enum mig_state to)
{
    uint32_t *page;

    if (!srv->fault.late_dma || !state_running(mig_state(srv->mig)) ||
        state_running(to)) {
        return;
    }
    page = vfu_dma_ptr(srv->dma, srv->fault.late_dma_gpa, LATE_DMA_SIZE, true);
    if (!page) {
        vg_warn("late-dma: 0x%" PRIx64 " is not in a writable DMA mapping",
                srv->fault.late_dma_gpa);
        return;
    }
    for (unsigned i = 0; i < LATE_DMA_SIZE / sizeof(*page); i++) {
        page[i] = LATE_DMA_PATTERN;
    }
    vg_info("late-dma: wrote 0x%" PRIx64 " on the way to %s",
            srv->fault.late_dma_gpa, mig_state_name(to));
}

static int feature_mig_state(struct vfu_server *srv, const uint8_t *p,
                             const struct vfu_feature_req *f,
                             struct vfu_reply *r, struct vg_error *err)
{
    struct vfu_feature_mig_state st = {0, -1};
    int ret = vfu_feature_check_argsz(f, sizeof(st), err);

    if (ret == 0 && f->set) {
        ret = vfu_parse_mig_state(f, &st.device_state, err);
        if (ret == 0) {
            late_dma(srv, st.device_state);
            ret = mig_set_state(srv->mig, st.device_state, err);
        }
    }
    if (ret == 0) {
        st.device_state = mig_state(srv->mig);
        feature_reply(srv, p, &st, sizeof(st), r);
    }
    return ret;
}

static int feature_data_size(struct vfu_server *srv, const uint8_t *p,
                             const struct vfu_feature_req *f,
                             struct vfu_reply *r, struct vg_error *err)
{
    struct vfu_feature_mig_data_size ds = {mig_stopcopy_size(srv->mig)};
    int ret = vfu_feature_check_argsz(f, sizeof(ds), err);

    if (ret == 0) {
        feature_reply(srv, p, &ds, sizeof(ds), r);
    }
    return ret;
}

static int feature_log_start(struct vfu_server *srv, const uint8_t *p,
                             const struct vfu_feature_req *f,
                             struct vfu_reply *r, struct vg_error *err)
{
    struct vfu_dma_log_range ranges[VFU_DMA_LOG_MAX_RANGES];
    struct vfu_dma_logging_control c;
    uint32_t n;
    int ret;

    ret = vfu_parse_logging_start(f, &c.page_size, ranges, &n, err);
    if (ret == 0) {
        ret = vfu_dma_log_start(srv->dma, &c.page_size, ranges, n, err);
    }
    if (ret == 0) {
        feature_reply(srv, p, NULL, f->data_len, r);
        memcpy(vfu_payload(srv) + sizeof(struct vfu_device_feature),
               &c.page_size, sizeof(c.page_size)); /* the page size we chose */
        mig_note_dma_logging(srv->mig, true);
    }
    return ret;
}

static int feature_log_stop(struct vfu_server *srv, const uint8_t *p,
                            const struct vfu_feature_req *f,
                            struct vfu_reply *r, struct vg_error *err)
{
    if (f->data_len) {
        return vg_error_set(err, EINVAL, "DMA_LOGGING_STOP with %zu data bytes",
                            f->data_len);
    }
    dma_log_stop(srv);
    feature_reply(srv, p, NULL, 0, r);
    return 0;
}

static int feature_log_report(struct vfu_server *srv, const uint8_t *p,
                              const struct vfu_feature_req *f,
                              struct vfu_reply *r, struct vg_error *err)
{
    uint8_t *out = vfu_payload(srv) + sizeof(struct vfu_device_feature);
    struct vfu_dma_logging_report rep;
    size_t bytes;
    int ret;

    ret = vfu_parse_logging_report(f, MAX_XFER, &rep, &bytes, err);
    if (ret < 0) {
        return ret;
    }
    memset(out + sizeof(rep), 0, bytes);
    ret = vfu_dma_log_report(srv->dma, rep.iova, rep.length, rep.page_size,
                             (uint64_t *)(out + sizeof(rep)), err);
    if (ret == 0) {
        mig_note_dma_log_report(srv->mig, !vfu_dma_writable_overlap(
                                              srv->dma, rep.iova, rep.length));
        memcpy(out, &rep, sizeof(rep));
        feature_reply(srv, p, out, sizeof(rep) + bytes, r);
    }
    return ret;
}

typedef int feature_fn(struct vfu_server *srv, const uint8_t *p,
                       const struct vfu_feature_req *f, struct vfu_reply *r,
                       struct vg_error *err);

static const struct {
    feature_fn *fn;
    bool get, set;
} features[] = {
    [VFU_FEATURE_MIGRATION] = {feature_migration, true, false},
    [VFU_FEATURE_MIG_DEVICE_STATE] = {feature_mig_state, true, true},
    [VFU_FEATURE_DMA_LOGGING_START] = {feature_log_start, false, true},
    [VFU_FEATURE_DMA_LOGGING_STOP] = {feature_log_stop, false, true},
    [VFU_FEATURE_DMA_LOGGING_REPORT] = {feature_log_report, true, false},
    [VFU_FEATURE_MIG_DATA_SIZE] = {feature_data_size, true, false},
};

int vfu_handle_feature(struct vfu_server *srv, const uint8_t *p, size_t len,
                       struct vfu_reply *r, struct vg_error *err)
{
    struct vfu_feature_req f;
    int ret;

    ret = vfu_parse_feature(p, len, &f, err);
    if (ret < 0) {
        return ret;
    }
    if (srv->no_migration) {
        return vg_error_set(err, ENOTSUP,
                            "device feature %u: migration is disabled "
                            "(--no-migration)",
                            f.index);
    }
    if (f.index >= sizeof(features) / sizeof(features[0]) ||
        !features[f.index].fn) {
        return vg_error_set(err, ENOTTY, "device feature %u not supported",
                            f.index);
    }
    ret = feature_ops(&f, features[f.index].get, features[f.index].set, err);
    if (ret < 0 || f.probe) {
        if (ret == 0) {
            feature_reply(srv, p, NULL, f.data_len, r);
        }
        return ret;
    }
    ret = features[f.index].fn(srv, p, &f, r, err);
    if (ret < 0) {
        vg_error_prefix(err, "device feature %u", f.index);
    }
    return ret;
}

/* ------------------------------------------------------- migration data */

int vfu_handle_mig_data_read(struct vfu_server *srv, const uint8_t *p,
                             size_t len, struct vfu_reply *r,
                             struct vg_error *err)
{
    struct vfu_mig_data d;
    uint32_t size;
    int ret;

    ret = vfu_parse_mig_data_read(p, len, MAX_XFER, &size, err);
    if (ret == 0) {
        ret = mig_read(srv->mig, vfu_payload(srv) + sizeof(d), size, &d.size,
                       err);
    }
    if (ret == 0) {
        d.argsz = (uint32_t)sizeof(d) + d.size;
        memcpy(vfu_payload(srv), &d, sizeof(d));
        r->len = d.argsz;
    }
    return ret;
}

int vfu_handle_mig_data_write(struct vfu_server *srv, const uint8_t *p,
                              size_t len, struct vfu_reply *r,
                              struct vg_error *err)
{
    const uint8_t *data;
    uint32_t size;
    int ret;

    ret = vfu_parse_mig_data_write(p, len, MAX_XFER, &data, &size, err);
    if (ret == 0) {
        ret = mig_write(srv->mig, data, size, err);
    }
    return ret;
}

/* ------------------------------------------- MIG_DATA_*_SHM (vgmig) */

/* Let a GPU copy between VRAM and the area directly: no staging copy. */
static void shm_register(struct vfu_server *srv, size_t size)
{
    struct vg_error err;
    int ret = vgpu_host_register(srv->gpu, srv->shm, size, &err);

    if (ret < 0) {
        vg_warn("migration data: the GPU cannot reach the shared area "
                "directly, its copies are staged: %s",
                err.msg);
    } else if (ret > 0) {
        vg_info("migration data: the GPU copies to and from the shared area "
                "directly (%zu bytes pinned)",
                size);
    }
}

/*
 * Populate the area on a thread, so that neither the server's copies nor
 * the client's sockets fault its pages in one by one while the data flows
 * (docs/data-path.md): when it is created with --prealloc, else when the
 * client takes it, as a migration begins (the source's first read, the
 * destination's RESUMING).  Once per area: its pages stay until the client
 * disconnects.
 */
static void shm_populate(struct vfu_server *srv)
{
    if (!srv->shm_populate) {
        vg_populate_hint(srv->shm, (uint64_t)srv->shm_slots * SHM_SLOT_SIZE,
                         "migration data area", &srv->shm_populate);
    }
}

/* Create the area: srv->shm_slots slots of SHM_SLOT_SIZE bytes in a memfd,
 * sealed at that size (the client gets it read-write: a shrunk area would
 * fault the server's accesses) like the VRAM memfd. */
int vfu_data_shm_open(struct vfu_server *srv, struct vg_error *err)
{
    size_t size = (size_t)srv->shm_slots * SHM_SLOT_SIZE;
    void *map;

    if (srv->shm) {
        return 0;
    }
    srv->shm_fd =
        memfd_create("vgpu-mig-data", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (srv->shm_fd < 0) {
        return vg_error_set(err, errno, "memfd_create: %s", strerror(errno));
    }
    if (ftruncate(srv->shm_fd, (off_t)size) < 0 ||
        fcntl(srv->shm_fd, F_ADD_SEALS,
              F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
        int e = errno;

        shm_release(srv);
        return vg_error_set(err, e,
                            "sizing and sealing the area of %zu "
                            "bytes: %s",
                            size, strerror(e));
    }
    map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, srv->shm_fd, 0);
    if (map == MAP_FAILED) {
        int e = errno;

        shm_release(srv);
        return vg_error_set(err, e, "mapping the area of %zu bytes: %s", size,
                            strerror(e));
    }
    srv->shm = map;
    shm_register(srv, size);
    if (srv->prealloc_shm) {
        shm_populate(srv);
    }
    return 0;
}

int vfu_handle_mig_data_shm(struct vfu_server *srv, const uint8_t *p,
                            size_t len, struct vfu_reply *r,
                            struct vg_error *err)
{
    struct vfu_mig_shm shm = {sizeof(shm), 0, srv->shm_slots, SHM_SLOT_SIZE};
    int ret;

    if (!srv->data_shm) {
        return vg_error_set(err, ENOTSUP, "data_shm was not negotiated");
    }
    ret = vfu_parse_mig_shm(p, len, err);
    if (ret == 0) {
        memcpy(vfu_payload(srv), &shm, sizeof(shm));
        r->len = sizeof(shm);
        r->fd = srv->shm_fd;
        shm_populate(srv);
    }
    return ret;
}

/* Parse the MIG_DATA_{READ,WRITE}_SHM request being served into @io and,
 * for a write, the pieces that may follow it into @pieces. */
static int shm_io_parse(struct vfu_server *srv, const uint8_t *p, size_t len,
                        struct vfu_mig_shm_io *io,
                        struct vfu_mig_pieces *pieces, struct vg_error *err)
{
    if (!srv->data_shm || !srv->shm) {
        return vg_error_set(err, ENOTSUP, "data_shm was not negotiated");
    }
    if (srv->rx.hdr.command == VFU_CMD_MIG_DATA_WRITE_SHM) {
        return vfu_parse_mig_shm_write(p, len, srv->shm_slots, SHM_SLOT_SIZE,
                                       srv->data_vram, io, pieces, err);
    }
    return vfu_parse_mig_shm_io(p, len, srv->shm_slots, SHM_SLOT_SIZE,
                                srv->data_vram ? VFU_MIG_SHM_IO_PIECES : 0, io,
                                err);
}

/* A view of VRAM the client cannot write VRAM through, even if it maps it
 * (the BAR2 fd is another matter: region info). */
int vfu_data_vram_open(struct vfu_server *srv, struct vg_error *err)
{
    char path[64];

    if (srv->vram_ro_fd >= 0) {
        return 0;
    }
    snprintf(path, sizeof(path), "/proc/self/fd/%d", vgpu_vram_fd(srv->gpu));
    srv->vram_ro_fd = open(path, O_RDONLY | O_CLOEXEC);
    if (srv->vram_ro_fd < 0) {
        return vg_error_set(err, errno, "read-only view of VRAM (%s): %s", path,
                            strerror(errno));
    }
    return 0;
}

int vfu_handle_mig_data_vram(struct vfu_server *srv, const uint8_t *p,
                             size_t len, struct vfu_reply *r,
                             struct vg_error *err)
{
    struct vfu_mig_vram vram = {sizeof(vram), 0, vgpu_vram_size(srv->gpu)};
    uint32_t flags;
    int ret;

    if (!srv->data_vram || srv->vram_ro_fd < 0) {
        return vg_error_set(err, ENOTSUP, "data_vram was not negotiated");
    }
    ret = vfu_parse_mig_vram(p, len, &flags, err);
    if (ret == 0 && (flags & VFU_MIG_VRAM_WRITE) &&
        mig_state(srv->mig) != MIG_STATE_RESUMING) {
        ret = vg_error_set(err, EPERM,
                           "a writable view of VRAM is for RESUMING, not %s",
                           mig_state_name(mig_state(srv->mig)));
    }
    if (ret < 0) {
        return ret;
    }
    vram.flags = flags;
    memcpy(vfu_payload(srv), &vram, sizeof(vram));
    r->len = sizeof(vram);
    r->fd =
        flags & VFU_MIG_VRAM_WRITE ? vgpu_vram_fd(srv->gpu) : srv->vram_ro_fd;
    return 0;
}

/* The read's pieces in the reply's form. */
static void pieces_to_reply(const struct mig_piece *in, unsigned n,
                            uint32_t pass, struct vfu_mig_pieces *out)
{
    out->count = n;
    out->pass = pass;
    for (unsigned i = 0; i < n; i++) {
        out->piece[i] = (struct vfu_mig_piece){
            .offset = in[i].offset,
            .len = in[i].len,
            .where = in[i].in_vram ? VFU_MIG_PIECE_VRAM : VFU_MIG_PIECE_SLOT,
        };
    }
}

/* TEST ONLY (--fault=bad-piece, shifted-piece): the first piece of VRAM,
 * if any, is put at @vram_size, past the end of VRAM, or 4 KiB away
 * inside it, as a hostile server could. */
static void misplace_piece(struct vfu_mig_pieces *pieces, uint64_t vram_size,
                           bool inside)
{
    for (uint32_t i = 0; i < pieces->count; i++) {
        struct vfu_mig_piece *p = &pieces->piece[i];

        if (p->where != VFU_MIG_PIECE_VRAM) {
            continue;
        }
        if (!inside) {
            p->offset = vram_size;
        } else {
            p->offset += p->offset + p->len + 4096 <= vram_size ? 4096 : -4096;
        }
        return;
    }
}

int vfu_read_shm(struct vfu_server *srv, struct vfu_mig_shm_io *io,
                 struct vfu_mig_pieces *pieces, struct vg_error *err)
{
    uint8_t *slot = srv->shm + (size_t)io->slot * SHM_SLOT_SIZE;
    struct mig_piece piece[VFU_MIG_PIECES_MAX];
    bool in_pieces = io->flags & VFU_MIG_SHM_IO_PIECES;
    unsigned n = 0;
    int ret;

    if (in_pieces) {
        ret = mig_read_pieces(srv->mig, slot, io->size, &io->size, piece,
                              VFU_MIG_PIECES_MAX, &n, err);
    } else {
        ret = mig_read(srv->mig, slot, io->size, &io->size, err);
    }
    if (ret < 0) {
        return ret;
    }
    mig_note_shm_bytes(srv->mig, io->size);
    io->flags = mig_read_ended(srv->mig) ? VFU_MIG_SHM_IO_END : 0;
    if (in_pieces) {
        io->flags |= VFU_MIG_SHM_IO_PIECES;
        pieces_to_reply(piece, n, mig_read_pass(srv->mig), pieces);
        if (srv->fault.bad_piece || srv->fault.shifted_piece) {
            misplace_piece(pieces, vgpu_vram_size(srv->gpu),
                           srv->fault.shifted_piece);
        }
    }
    io->argsz = (uint32_t)vfu_read_shm_reply_len(io, pieces);
    return 0;
}

size_t vfu_read_shm_reply_len(const struct vfu_mig_shm_io *io,
                              const struct vfu_mig_pieces *pieces)
{
    if (!(io->flags & VFU_MIG_SHM_IO_PIECES)) {
        return sizeof(*io);
    }
    return sizeof(*io) + offsetof(struct vfu_mig_pieces, piece) +
           (size_t)pieces->count * sizeof(pieces->piece[0]);
}

int vfu_handle_mig_data_read_shm(struct vfu_server *srv, const uint8_t *p,
                                 size_t len, struct vfu_reply *r,
                                 struct vg_error *err)
{
    struct vfu_mig_shm_io io;
    struct vfu_mig_pieces pieces;
    int ret = shm_io_parse(srv, p, len, &io, &pieces, err);

    if (ret == 0) {
        ret = vfu_read_shm(srv, &io, &pieces, err);
    }
    if (ret == 0) {
        memcpy(vfu_payload(srv), &io, sizeof(io));
        memcpy(vfu_payload(srv) + sizeof(io), &pieces, io.argsz - sizeof(io));
        r->len = io.argsz;
    }
    return ret;
}

int vfu_data_queue_shm(struct vfu_server *srv, const uint8_t *p, size_t len,
                       struct vg_error *err)
{
    struct vfu_mig_shm_io io;
    struct vfu_mig_pieces pieces;
    int ret = shm_io_parse(srv, p, len, &io, &pieces, err);

    if (ret == 0) {
        vfu_plane_submit(srv, &srv->rx.hdr, &io, &pieces);
    }
    return ret;
}

/*
 * The client can write the area, and VRAM through BAR2, at any time: the
 * slot goes to the migration module, which copies every byte it checks
 * before checking it; page data it reads in place (hashed, then written to
 * VRAM, or hashed where the client put them in VRAM) can only land other
 * than hashed, which the client could make so anyway.
 */
int vfu_write_shm(struct vfu_server *srv, struct vfu_mig_shm_io *io,
                  const struct vfu_mig_pieces *pieces, struct vg_error *err)
{
    uint8_t *slot = srv->shm + (size_t)io->slot * SHM_SLOT_SIZE;
    struct mig_piece piece[VFU_MIG_PIECES_MAX];
    int ret;

    if (!(io->flags & VFU_MIG_SHM_IO_PIECES)) {
        ret = mig_write(srv->mig, slot, io->size, err);
    } else {
        for (uint32_t i = 0; i < pieces->count; i++) {
            piece[i] = (struct mig_piece){
                .offset = pieces->piece[i].offset,
                .len = pieces->piece[i].len,
                .in_vram = pieces->piece[i].where == VFU_MIG_PIECE_VRAM,
            };
        }
        ret = mig_write_pieces(srv->mig, slot, SHM_SLOT_SIZE, piece,
                               pieces->count, err);
    }
    if (ret == 0) {
        mig_note_shm_bytes(srv->mig, io->size);
    }
    io->argsz = sizeof(*io);
    io->flags = 0;
    return ret;
}

int vfu_handle_mig_data_write_shm(struct vfu_server *srv, const uint8_t *p,
                                  size_t len, struct vfu_reply *r,
                                  struct vg_error *err)
{
    struct vfu_mig_shm_io io;
    struct vfu_mig_pieces pieces;
    int ret = shm_io_parse(srv, p, len, &io, &pieces, err);

    if (ret == 0) {
        ret = vfu_write_shm(srv, &io, &pieces, err);
    }
    if (ret == 0) {
        memcpy(vfu_payload(srv), &io, sizeof(io));
        r->len = sizeof(io);
    }
    return ret;
}

int vfu_handle_precopy_info(struct vfu_server *srv, const uint8_t *p,
                            size_t len, struct vfu_reply *r,
                            struct vg_error *err)
{
    struct vfu_precopy_info info = {sizeof(info), 0, 0, 0};
    int ret;

    if (!srv->precopy_info) {
        return vg_error_set(err, ENOTSUP, "precopy_info was not negotiated");
    }
    ret = vfu_parse_precopy_info(p, len, err);
    if (ret == 0) {
        ret = mig_precopy_info(srv->mig, &info.initial_bytes, &info.dirty_bytes,
                               err);
    }
    if (ret == 0) {
        memcpy(vfu_payload(srv), &info, sizeof(info));
        r->len = sizeof(info);
    }
    return ret;
}

int vfu_handle_mig_postcopy(struct vfu_server *srv, const uint8_t *p,
                            size_t len, struct vfu_reply *r,
                            struct vg_error *err)
{
    struct vfu_mig_postcopy reply = {sizeof(reply), 0};
    int ret;

    if (!srv->postcopy) {
        return vg_error_set(err, ENOTSUP, "postcopy was not negotiated");
    }
    ret = vfu_parse_mig_postcopy(p, len, err);
    if (ret == 0) {
        ret = mig_postcopy_prepare(srv->mig, err);
    }
    if (ret == 0) {
        memcpy(vfu_payload(srv), &reply, sizeof(reply));
        r->len = sizeof(reply);
    }
    return ret;
}

int vfu_handle_mig_data_file(struct vfu_server *srv, const uint8_t *p,
                             size_t len, struct vfu_reply *r,
                             struct vg_error *err)
{
    struct vfu_file_extent ext[VFU_MIG_DATA_FILE_MAX];
    uint32_t flags = 0, n = 0;
    int fd = -1, ret;

    if (!srv->load_from_file) {
        return vg_error_set(err, ENOTSUP, "load-from-file was not negotiated");
    }
    ret = vfu_parse_mig_data_file(p, len, &flags, ext, &n, err);
    if (ret < 0) {
        return ret;
    }
    if (srv->rx.nfds != (flags & VFU_MIG_DATA_FILE_FD ? 1u : 0u)) {
        return vg_error_set(err, EINVAL, "flags %#x with %u file descriptors",
                            flags, srv->rx.nfds);
    }
    if (flags & VFU_MIG_DATA_FILE_FD) {
        fd = srv->rx.fds[0];
        srv->rx.fds[0] = -1; /* taken over */
    }
    for (uint32_t i = 0; ret == 0 && i < n; i++) {
        ret = mig_write_file(srv->mig, i ? -1 : fd, ext[i].offset, ext[i].size,
                             err);
    }
    r->len = 0;
    return ret;
}

int vfu_handle_region_dirty_log(struct vfu_server *srv, const uint8_t *p,
                                size_t len, struct vfu_reply *r,
                                struct vg_error *err)
{
    struct vfu_region_dirty_log log;
    const uint64_t *bitmap;
    int ret;

    if (!srv->region_log) {
        return vg_error_set(err, ENOTSUP,
                            "region_dirty_log was not negotiated");
    }
    ret = vfu_parse_region_dirty_log(p, len, srv->region_size[VGPU_BAR_VRAM],
                                     &log, &bitmap, err);
    if (ret == 0 && log.region != VGPU_BAR_VRAM) {
        ret = vg_error_set(err, EINVAL, "region %u is not mmap'ed", log.region);
    }
    if (ret == 0) {
        ret = mig_region_dirty_log(srv->mig, log.offset, bitmap,
                                   log.size / log.pgsize, log.pgsize, err);
    }
    return ret;
}
