/*
 * vfu-plane.c -- the data plane thread: it serves the client's
 * MIG_DATA_READ_SHM and MIG_DATA_WRITE_SHM requests, in the order they
 * came, off the control loop, so that the control loop answers the
 * guest's register accesses while a data request is being served.
 *
 * Ownership (docs/architecture.md): while the plane has a request queued
 * or in service it owns the migration module and the device model (it
 * steps the device between its requests); the control loop then serves
 * only the requests vfu_plane_prompt() allows, which touch the device's
 * registers under regs_lock and nothing the plane uses.  Before any other
 * request, the device's step, deferred migration work and a disconnect,
 * the control loop waits for the plane to be idle (vfu_plane_drain()).
 * Only pre-copy reads run beside register accesses; the plane's other
 * requests hold regs_lock.
 * The queue holds at most PLANE_QUEUE requests; a client that sends more
 * waits on its socket (the control loop waits for room).
 */
#include "vfu-server-int.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/log.h"

#define PLANE_QUEUE 8u

/* A data request parsed by the control loop. */
struct plane_req {
    struct vfu_hdr hdr;
    struct vfu_mig_shm_io io;
    struct vfu_mig_pieces pieces; /* a write's, if it has any */
};

struct vfu_plane {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond; /* a request queued, or the queue drained */
    struct plane_req q[PLANE_QUEUE];
    unsigned head, count; /* count includes the one in service */
    bool stop;
    bool lost;   /* a reply could not be sent: the control loop disconnects */
    int wake_fd; /* eventfd: the plane went idle (the control loop polls) */
    struct vfu_mig_pieces pieces; /* the read in service's, if asked for */
    uint8_t tx[sizeof(struct vfu_hdr) + sizeof(struct vfu_mig_shm_io) +
               sizeof(struct vfu_mig_pieces)];
};

/* Serve @req: the slot it names goes to or comes from the migration module;
 * 0, or a negative errno with @err set. */
static int serve(struct vfu_server *srv, struct plane_req *req,
                 struct vg_error *err)
{
    bool read = req->hdr.command == VFU_CMD_MIG_DATA_READ_SHM;
    /* A read while the device runs (pre-copy) leaves the registers alone,
     * and the guest may be polling them: the control loop serves them
     * beside it.  Anything else (a stop-copy's device state record, a
     * load) may read or write them: under regs_lock. */
    bool beside = read && !vgpu_stopped(srv->gpu);
    int ret;

    if (!beside) {
        vfu_regs_lock(srv);
    }
    if (read) {
        ret = vfu_read_shm(srv, &req->io, &srv->plane->pieces, err);
    } else {
        ret = vfu_write_shm(srv, &req->io, &req->pieces, err);
    }
    if (!beside) {
        vfu_regs_unlock(srv);
    }
    return ret;
}

/* Serve @req and send its reply. */
static void serve_and_reply(struct vfu_server *srv, struct plane_req *req)
{
    struct vfu_plane *pl = srv->plane;
    struct vg_error err = {0};
    struct vfu_hdr reply;
    bool lost;
    int ret;

    vg_trace("plane: request %u %s started", req->hdr.id,
             vfu_cmd_name(req->hdr.command));
    ret = serve(srv, req, &err);

    if (ret < 0) {
        vg_warn("request %u %s: %s", req->hdr.id,
                vfu_cmd_name(req->hdr.command), err.msg);
    }
    pthread_mutex_lock(&pl->lock);
    lost = pl->lost;
    pthread_mutex_unlock(&pl->lock);
    if (lost || (req->hdr.flags & VFU_FLAG_NO_REPLY)) {
        return; /* the client did not take a reply in time: it goes */
    }
    /* On success serve() set argsz to the reply's payload bytes */
    vfu_hdr_reply(&req->hdr, ret < 0 ? 0 : req->io.argsz, ret < 0 ? -ret : 0,
                  &reply);
    memcpy(pl->tx, &reply, sizeof(reply));
    if (ret == 0) {
        memcpy(pl->tx + sizeof(reply), &req->io, sizeof(req->io));
        memcpy(pl->tx + sizeof(reply) + sizeof(req->io), &pl->pieces,
               req->io.argsz - sizeof(req->io));
    }
    vg_trace("plane: request %u %s replying", req->hdr.id,
             vfu_cmd_name(req->hdr.command));
    if (vfu_send_msg(srv, pl->tx, reply.size, -1, &err) < 0) {
        vg_warn("request %u %s: %s", req->hdr.id,
                vfu_cmd_name(req->hdr.command), err.msg);
        pthread_mutex_lock(&pl->lock);
        pl->lost = true;
        pthread_mutex_unlock(&pl->lock);
    }
}

static void *plane_main(void *arg)
{
    struct vfu_server *srv = arg;
    struct vfu_plane *pl = srv->plane;
    struct plane_req req;
    uint64_t one = 1;

    pthread_mutex_lock(&pl->lock);
    for (;;) {
        while (pl->count == 0 && !pl->stop) {
            pthread_cond_wait(&pl->cond, &pl->lock);
        }
        if (pl->stop) {
            break;
        }
        req = pl->q[pl->head];
        pthread_mutex_unlock(&pl->lock);
        serve_and_reply(srv, &req);
        /* Owner of the migration module until the queue drains: let the
         * device run, as the control loop would after a request. */
        vfu_device_run(srv);
        vfu_mig_idle(srv, true);
        pthread_mutex_lock(&pl->lock);
        pl->head = (pl->head + 1) % PLANE_QUEUE;
        pl->count--;
        pthread_cond_broadcast(&pl->cond); /* room, or drained */
        if (pl->count == 0 && write(pl->wake_fd, &one, sizeof(one)) < 0) {
            /* the counter is far from full: nothing to do */
        }
    }
    pthread_mutex_unlock(&pl->lock);
    return NULL;
}

int vfu_plane_start(struct vfu_server *srv, struct vg_error *err)
{
    struct vfu_plane *pl = calloc(1, sizeof(*pl));
    int ret;

    if (!pl) {
        return vg_error_set(err, ENOMEM, "data plane");
    }
    pl->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (pl->wake_fd < 0) {
        ret = errno;
        free(pl);
        return vg_error_set(err, ret, "data plane: eventfd: %s", strerror(ret));
    }
    pthread_mutex_init(&pl->lock, NULL);
    pthread_cond_init(&pl->cond, NULL);
    srv->plane = pl;
    ret = pthread_create(&pl->thread, NULL, plane_main, srv);
    if (ret != 0) {
        srv->plane = NULL;
        close(pl->wake_fd);
        free(pl);
        return vg_error_set(err, ret, "data plane thread: %s", strerror(ret));
    }
    pthread_setname_np(pl->thread, "vgs/plane");
    return 0;
}

void vfu_plane_stop(struct vfu_server *srv)
{
    struct vfu_plane *pl = srv->plane;

    if (!pl) {
        return;
    }
    vfu_plane_drain(srv);
    pthread_mutex_lock(&pl->lock);
    pl->stop = true;
    pthread_cond_broadcast(&pl->cond);
    pthread_mutex_unlock(&pl->lock);
    pthread_join(pl->thread, NULL);
    pthread_mutex_destroy(&pl->lock);
    pthread_cond_destroy(&pl->cond);
    close(pl->wake_fd);
    free(pl);
    srv->plane = NULL;
}

bool vfu_plane_busy(struct vfu_server *srv)
{
    struct vfu_plane *pl = srv->plane;
    bool busy;

    if (!pl) {
        return false;
    }
    pthread_mutex_lock(&pl->lock);
    busy = pl->count > 0;
    pthread_mutex_unlock(&pl->lock);
    return busy;
}

void vfu_plane_drain(struct vfu_server *srv)
{
    struct vfu_plane *pl = srv->plane;

    if (!pl) {
        return;
    }
    pthread_mutex_lock(&pl->lock);
    while (pl->count > 0) {
        pthread_cond_wait(&pl->cond, &pl->lock);
    }
    pthread_mutex_unlock(&pl->lock);
}

int vfu_plane_wake_fd(const struct vfu_server *srv)
{
    return srv->plane ? srv->plane->wake_fd : -1;
}

bool vfu_plane_woken(struct vfu_server *srv)
{
    struct vfu_plane *pl = srv->plane;
    uint64_t n;
    bool lost;

    if (!pl) {
        return false;
    }
    if (read(pl->wake_fd, &n, sizeof(n)) < 0) {
        /* not signalled since the last read */
    }
    pthread_mutex_lock(&pl->lock);
    lost = pl->lost;
    pthread_mutex_unlock(&pl->lock);
    return lost;
}

void vfu_plane_detach(struct vfu_server *srv)
{
    struct vfu_plane *pl = srv->plane;

    if (!pl) {
        return;
    }
    vfu_plane_drain(srv);
    pthread_mutex_lock(&pl->lock);
    pl->lost = false;
    pthread_mutex_unlock(&pl->lock);
}

bool vfu_plane_prompt(const struct vfu_server *srv, const struct vfu_hdr *hdr,
                      const uint8_t *p, size_t len)
{
    struct vfu_region_rw rw;

    if (hdr->command != VFU_CMD_REGION_READ &&
        hdr->command != VFU_CMD_REGION_WRITE) {
        return false;
    }
    if (len < sizeof(rw) || srv->rx.nfds) {
        return false; /* the handler refuses it: in order */
    }
    memcpy(&rw, p, sizeof(rw));
    if (rw.region == VFIO_PCI_CONFIG_REGION_INDEX) {
        return hdr->command == VFU_CMD_REGION_READ;
    }
    return rw.region == VGPU_BAR_REGS && rw.offset < VGPU_MSIX_TABLE_OFFSET &&
           rw.count <= VGPU_MSIX_TABLE_OFFSET - rw.offset;
}

bool vfu_plane_takes(const struct vfu_server *srv, const struct vfu_hdr *hdr)
{
    return srv->plane && srv->client_fd >= 0 &&
           (hdr->command == VFU_CMD_MIG_DATA_READ_SHM ||
            hdr->command == VFU_CMD_MIG_DATA_WRITE_SHM);
}

void vfu_plane_submit(struct vfu_server *srv, const struct vfu_hdr *hdr,
                      const struct vfu_mig_shm_io *io,
                      const struct vfu_mig_pieces *pieces)
{
    struct vfu_plane *pl = srv->plane;
    struct plane_req *req;

    pthread_mutex_lock(&pl->lock);
    while (pl->count == PLANE_QUEUE) {
        pthread_cond_wait(&pl->cond, &pl->lock);
    }
    req = &pl->q[(pl->head + pl->count) % PLANE_QUEUE];
    req->hdr = *hdr;
    req->io = *io;
    req->pieces.count = 0;
    if (hdr->command == VFU_CMD_MIG_DATA_WRITE_SHM) {
        memcpy(&req->pieces, pieces,
               offsetof(struct vfu_mig_pieces, piece) +
                   pieces->count * sizeof(pieces->piece[0]));
    }
    pl->count++;
    pthread_cond_broadcast(&pl->cond);
    pthread_mutex_unlock(&pl->lock);
}
