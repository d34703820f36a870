#include "vfu-server.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/vfio.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "vfio-migration/mig.h"
#include "pci-config.h"
#include "vfu-dma.h"
#include "vfu-eventfd.h"
#include "vfu-mig-msg.h"
#include "vfu-msg.h"

#define MAX_XFER        (1024u * 1024u)
#define MAX_MSG         (MAX_XFER + 64u)
#define MAX_FDS         8u
#define MAX_DMA_MAPS    1024u
#define DMA_PGSIZE      4096u
#define NUM_IRQS        (VFIO_PCI_MSIX_IRQ_INDEX + 1)
#define MAX_IRQ_VECTORS VGPU_MSIX_VECTORS
/* A message in progress: at most this long without a byte, and this long
 * in all (a client trickling bytes cannot hold the server); a reply must
 * be taken by the client within IO_TIMEOUT_MS in all. */
#define RX_TIMEOUT_MS  2000
#define MSG_TIMEOUT_MS 5000
#define IO_TIMEOUT_MS  5000
/* Bytes read per wake-up before going back to poll (signals, the device,
 * timeouts): a whole message of the largest size. */
#define RX_BUDGET      MAX_MSG
#define STEP_BUDGET    (1u << 20)
#define MSIX_AREA      (VGPU_BAR0_SIZE - VGPU_MSIX_TABLE_OFFSET)
#define MSIX_TABLE_LEN (VGPU_MSIX_VECTORS * 16u)

/* A request being received. */
struct rx_state {
    struct vfu_hdr hdr;
    size_t have;   /* bytes of the message received */
    uint64_t skip; /* bytes of a refused message still to discard */
    int refused;   /* errno for a refused message being discarded */
    int fds[MAX_FDS];
    unsigned nfds;
    bool fds_lost;    /* more fds than MAX_FDS came */
    int64_t deadline; /* ms, for a message started but not complete */
    int64_t started;  /* ms, when its first byte came */
};

struct vfu_server {
    char *path;
    int listen_fd;
    int client_fd;
    bool negotiated;
    bool precopy_info;  /* the client negotiated MIG_GET_PRECOPY_INFO */
    bool region_log;    /* ... and REGION_DIRTY_LOG (it logs BAR2 writes) */
    bool no_migration;  /* --no-migration: no migration features */
    bool no_region_log; /* --no-region-log: refuse REGION_DIRTY_LOG */
    bool drop;          /* disconnect after the current reply */
    uint32_t tx_len;    /* no client: size of the last reply, 0: none */
    struct vgpu *gpu;
    struct mig *mig;
    struct vfu_dma *dma;
    struct pci_config cfg;
    uint8_t msix[MSIX_AREA];
    int irq_fds[NUM_IRQS][MAX_IRQ_VECTORS];
    bool intx_masked;
    uint64_t region_size[VFIO_PCI_NUM_REGIONS];
    uint32_t irq_count[NUM_IRQS];
    struct vfu_limits lim;
    struct rx_state rx;
    uint8_t *rxbuf; /* MAX_MSG */
    uint8_t *txbuf; /* MAX_MSG */
};

/* A reply being built: payload length and an fd to pass (-1: none). */
struct reply {
    uint32_t len;
    int fd;
};

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------------ interrupts */

static void raise_irq(void *opaque, unsigned vector)
{
    struct vfu_server *srv = opaque;
    int msix = vector < VGPU_MSIX_VECTORS
                   ? srv->irq_fds[VFIO_PCI_MSIX_IRQ_INDEX][vector]
                   : -1;
    int intx = srv->irq_fds[VFIO_PCI_INTX_IRQ_INDEX][0];

    if (msix >= 0) {
        vfu_eventfd_signal(msix);
    } else if (intx >= 0 && !srv->intx_masked &&
               !pci_config_intx_disabled(&srv->cfg)) {
        srv->intx_masked = true; /* INTx is automasked until UNMASK */
        vfu_eventfd_signal(intx);
    } else {
        vg_trace("interrupt vector %u not delivered", vector);
    }
}

static void *dma_ptr(void *opaque, uint64_t iova, uint64_t len, bool write)
{
    struct vfu_server *srv = opaque;

    return vfu_dma_ptr(srv->dma, iova, len, write);
}

static void irqs_close(struct vfu_server *srv, unsigned index)
{
    for (unsigned i = 0; i < MAX_IRQ_VECTORS; i++) {
        if (srv->irq_fds[index][i] >= 0) {
            close(srv->irq_fds[index][i]);
            srv->irq_fds[index][i] = -1;
        }
    }
}

/* ------------------------------------------------------- socket plumbing */

static void rx_reset(struct rx_state *rx)
{
    for (unsigned i = 0; i < rx->nfds; i++) {
        if (rx->fds[i] >= 0) {
            close(rx->fds[i]);
        }
    }
    memset(rx, 0, sizeof(*rx));
}

/* Stop DMA logging; the statistics record it if it was on. */
static void dma_log_stop(struct vfu_server *srv)
{
    if (vfu_dma_logging(srv->dma)) {
        vfu_dma_log_stop(srv->dma);
        mig_note_dma_logging(srv->mig, false);
    }
}

static void client_close(struct vfu_server *srv)
{
    if (srv->client_fd < 0) {
        return;
    }
    vg_info("client disconnected; releasing %u DMA mappings and IRQ fds",
            vfu_dma_count(srv->dma));
    close(srv->client_fd);
    srv->client_fd = -1;
    srv->negotiated = false;
    srv->precopy_info = false;
    srv->region_log = false;
    mig_note_bar2_logged(srv->mig, false);
    srv->drop = false;
    rx_reset(&srv->rx);
    dma_log_stop(srv);
    vfu_dma_unmap_all(srv->dma);
    for (unsigned i = 0; i < NUM_IRQS; i++) {
        irqs_close(srv, i);
    }
}

/* Send all of @buf (the first chunk carries @fd if >= 0), within
 * IO_TIMEOUT_MS in all however slowly the client reads. */
static int send_all(struct vfu_server *srv, const uint8_t *buf, size_t len,
                    int fd, struct vg_error *err)
{
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct pollfd pfd = {.fd = srv->client_fd, .events = POLLOUT};
    int64_t deadline = now_ms() + IO_TIMEOUT_MS;
    size_t total = len;

    while (len) {
        struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
        int64_t left = deadline - now_ms();
        ssize_t n;

        if (fd >= 0) {
            mh.msg_control = ctl.buf;
            mh.msg_controllen = sizeof(ctl.buf);
            struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
            c->cmsg_level = SOL_SOCKET;
            c->cmsg_type = SCM_RIGHTS;
            c->cmsg_len = CMSG_LEN(sizeof(int));
            memcpy(CMSG_DATA(c), &fd, sizeof(int));
        }
        n = sendmsg(srv->client_fd, &mh, MSG_NOSIGNAL);
        if (n < 0 && errno == EAGAIN && left > 0 &&
            poll(&pfd, 1, (int)left) > 0) {
            continue;
        }
        if (n < 0 && errno == EAGAIN) {
            return vg_error_set(err, ETIMEDOUT,
                                "send reply: the client took %zu of %zu "
                                "bytes in %d ms",
                                total - len, total, IO_TIMEOUT_MS);
        }
        if (n <= 0) {
            return vg_error_set(err, n < 0 ? errno : EIO, "send reply: %s",
                                n < 0 ? strerror(errno) : "no progress");
        }
        buf += n;
        len -= (size_t)n;
        fd = -1;
    }
    return 0;
}

/* Reply to @req: an error reply if @errnum, else @r's payload in txbuf. */
static void send_reply(struct vfu_server *srv, const struct vfu_hdr *req,
                       int errnum, const struct reply *r)
{
    struct vfu_hdr hdr;
    struct vg_error err;

    vfu_hdr_reply(req, r->len, errnum, &hdr);
    memcpy(srv->txbuf, &hdr, sizeof(hdr));
    if (srv->client_fd < 0) { /* vfu_server_handle() hands it out */
        srv->tx_len = hdr.size;
        return;
    }
    if (send_all(srv, srv->txbuf, hdr.size, errnum ? -1 : r->fd, &err) < 0) {
        vg_warn("%s", err.msg);
        srv->drop = true;
    }
}

/* ------------------------------------------------------------- handlers */

#define PAYLOAD(srv) ((srv)->txbuf + sizeof(struct vfu_hdr))

static int handle_version(struct vfu_server *srv, const uint8_t *p, size_t len,
                          struct reply *r, struct vg_error *err)
{
    struct vfu_version_req req;
    struct vfu_version ver = {VFU_VERSION_MAJOR, VFU_VERSION_MINOR};
    struct vfu_caps ours = {
        .present = {true, true, true, true},
        .value = {MAX_FDS, MAX_XFER, DMA_PGSIZE, MAX_DMA_MAPS},
        .migr = {.has_pgsize = true,
                 .has_max_bitmap = true,
                 .precopy_info = true,
                 .region_dirty_log = true,
                 .pgsize = DMA_PGSIZE,
                 .max_bitmap_size = MAX_XFER},
    };
    int ret;

    if (srv->negotiated) {
        return vg_error_set(err, EINVAL, "version already negotiated");
    }
    if (srv->no_migration) {
        ours.migr = (struct vfu_migr_caps){0};
    }
    ours.migr.region_dirty_log &= !srv->no_region_log;
    ret = vfu_parse_version(p, len, &req, err);
    if (ret < 0) {
        return ret;
    }
    if (req.major != VFU_VERSION_MAJOR) {
        srv->drop = true;
        return vg_error_set(err, ENOTSUP, "protocol major %u unsupported (%u)",
                            req.major, VFU_VERSION_MAJOR);
    }
    memcpy(PAYLOAD(srv), &ver, sizeof(ver));
    ret = vfu_caps_format(&req.caps, &ours, (char *)PAYLOAD(srv) + sizeof(ver),
                          MAX_MSG - sizeof(struct vfu_hdr) - sizeof(ver), err);
    if (ret < 0) {
        return ret;
    }
    r->len = (uint32_t)(sizeof(ver) + (size_t)ret);
    srv->negotiated = true;
    srv->precopy_info = req.caps.migr.precopy_info;
    srv->region_log =
        req.caps.migr.region_dirty_log && ours.migr.region_dirty_log;
    mig_note_bar2_logged(srv->mig, srv->region_log);
    vg_info("client negotiated vfio-user %u.%u", VFU_VERSION_MAJOR,
            VFU_VERSION_MINOR);
    return 0;
}

static int handle_dma_map(struct vfu_server *srv, const uint8_t *p, size_t len,
                          struct reply *r, struct vg_error *err)
{
    struct vfu_dma_map m;
    int ret;

    ret = vfu_parse_dma_map(p, len, &srv->lim, &m, err);
    if (ret < 0) {
        return ret;
    }
    if (srv->rx.nfds > 1) {
        return vg_error_set(err, EINVAL, "%u file descriptors, expected 0 or 1",
                            srv->rx.nfds);
    }
    return vfu_dma_map(srv->dma, m.iova, m.size,
                       srv->rx.nfds ? srv->rx.fds[0] : -1, m.offset,
                       m.flags & VFIO_DMA_MAP_FLAG_READ,
                       m.flags & VFIO_DMA_MAP_FLAG_WRITE, err);
}

static int handle_dma_unmap(struct vfu_server *srv, const uint8_t *p,
                            size_t len, struct reply *r, struct vg_error *err)
{
    struct vfu_dma_unmap u;
    int ret;

    ret = vfu_parse_dma_unmap(p, len, &srv->lim, &u, err);
    if (ret < 0) {
        return ret;
    }
    if (u.flags & VFIO_DMA_UNMAP_FLAG_ALL) {
        vfu_dma_unmap_all(srv->dma);
    } else {
        ret = vfu_dma_unmap(srv->dma, u.iova, u.size, err);
    }
    if (ret == 0) {
        u.argsz = sizeof(u);
        memcpy(PAYLOAD(srv), &u, sizeof(u));
        r->len = sizeof(u);
    }
    return ret;
}

static int handle_device_info(struct vfu_server *srv, const uint8_t *p,
                              size_t len, struct reply *r, struct vg_error *err)
{
    struct vfu_device_info info;
    int ret;

    ret = vfu_parse_device_info(p, len, &info, err);
    if (ret < 0) {
        return ret;
    }
    info = (struct vfu_device_info){
        .argsz = sizeof(info),
        .flags = VFIO_DEVICE_FLAGS_RESET | VFIO_DEVICE_FLAGS_PCI,
        .num_regions = VFIO_PCI_NUM_REGIONS,
        .num_irqs = NUM_IRQS,
    };
    memcpy(PAYLOAD(srv), &info, sizeof(info));
    r->len = sizeof(info);
    return 0;
}

static int handle_region_info(struct vfu_server *srv, const uint8_t *p,
                              size_t len, struct reply *r, struct vg_error *err)
{
    struct vfu_region_info req, info = {0};
    struct vfu_area area = {0, 0};
    uint32_t nr_areas = 0;
    int vram_fd = vgpu_vram_fd(srv->gpu);
    int ret;

    ret = vfu_parse_region_info(p, len, &srv->lim, &req, err);
    if (ret < 0) {
        return ret;
    }
    info.index = req.index;
    info.size = srv->region_size[req.index];
    if (info.size) {
        info.flags = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
    }
    if (req.index == VGPU_BAR_VRAM && vram_fd >= 0) {
        info.flags |= VFIO_REGION_INFO_FLAG_MMAP;
        area.size = info.size;
        nr_areas = 1;
        r->fd = vram_fd;
        mig_note_bar2_shared(srv->mig);
    }
    ret =
        vfu_encode_region_info(&info, &area, nr_areas, req.argsz, PAYLOAD(srv),
                               MAX_MSG - sizeof(struct vfu_hdr), err);
    if (ret < 0) {
        return ret;
    }
    r->len = (uint32_t)ret;
    return 0;
}

static int handle_irq_info(struct vfu_server *srv, const uint8_t *p, size_t len,
                           struct reply *r, struct vg_error *err)
{
    struct vfu_irq_info info;
    int ret;

    ret = vfu_parse_irq_info(p, len, &srv->lim, &info, err);
    if (ret < 0) {
        return ret;
    }
    info.argsz = sizeof(info);
    info.count = srv->irq_count[info.index];
    info.flags = VFIO_IRQ_INFO_EVENTFD;
    if (info.index == VFIO_PCI_INTX_IRQ_INDEX) {
        info.flags |= VFIO_IRQ_INFO_MASKABLE | VFIO_IRQ_INFO_AUTOMASKED;
    } else {
        info.flags |= VFIO_IRQ_INFO_NORESIZE;
    }
    memcpy(PAYLOAD(srv), &info, sizeof(info));
    r->len = sizeof(info);
    return 0;
}

/* SET_IRQS with DATA_EVENTFD and ACTION_TRIGGER: take the fds (none: the
 * range is de-assigned). */
static void irq_set_eventfds(struct vfu_server *srv,
                             const struct vfu_irq_set *s)
{
    for (uint32_t i = 0; i < s->count; i++) {
        int *slot = &srv->irq_fds[s->index][s->start + i];
        if (*slot >= 0) {
            close(*slot);
        }
        *slot = -1;
        if (srv->rx.nfds) {
            *slot = srv->rx.fds[i];
            srv->rx.fds[i] = -1; /* now owned by the IRQ table */
        }
    }
    if (s->index == VFIO_PCI_INTX_IRQ_INDEX) {
        srv->intx_masked = false;
    }
}

static int irq_set_action(struct vfu_server *srv, const struct vfu_irq_set *s,
                          const uint8_t *bools, struct vg_error *err)
{
    uint32_t action =
        s->flags & (VFIO_IRQ_SET_ACTION_MASK | VFIO_IRQ_SET_ACTION_UNMASK |
                    VFIO_IRQ_SET_ACTION_TRIGGER);

    if (action != VFIO_IRQ_SET_ACTION_TRIGGER &&
        s->index != VFIO_PCI_INTX_IRQ_INDEX) {
        return vg_error_set(err, ENOTSUP, "IRQ index %u cannot be masked",
                            s->index);
    }
    for (uint32_t i = 0; i < s->count; i++) {
        int fd = srv->irq_fds[s->index][s->start + i];
        if (bools && !bools[i]) {
            continue;
        }
        if (action == VFIO_IRQ_SET_ACTION_TRIGGER && fd >= 0) {
            vfu_eventfd_signal(fd);
        } else if (action != VFIO_IRQ_SET_ACTION_TRIGGER) {
            srv->intx_masked = action == VFIO_IRQ_SET_ACTION_MASK;
        }
    }
    return 0;
}

static int handle_set_irqs(struct vfu_server *srv, const uint8_t *p, size_t len,
                           struct reply *r, struct vg_error *err)
{
    struct vfu_irq_set s;
    const uint8_t *bools;
    int ret;

    ret = vfu_parse_irq_set(p, len, &srv->lim, srv->rx.nfds, &s, &bools, err);
    if (ret < 0) {
        return ret;
    }
    if (s.count == 0) {
        irqs_close(srv, s.index);
        return 0;
    }
    if (s.flags & VFIO_IRQ_SET_DATA_EVENTFD) {
        if (!(s.flags & VFIO_IRQ_SET_ACTION_TRIGGER)) {
            return vg_error_set(err, ENOTSUP,
                                "eventfds for mask/unmask not supported");
        }
        for (unsigned i = 0; i < srv->rx.nfds; i++) { /* all or none */
            ret = vfu_eventfd_take(srv->rx.fds[i], err);
            if (ret < 0) {
                vg_error_prefix(err, "IRQ index %u vector %u", s.index,
                                s.start + i);
                return ret;
            }
        }
        irq_set_eventfds(srv, &s);
        return 0;
    }
    return irq_set_action(srv, &s, bools, err);
}

static int bar0_access(struct vfu_server *srv, uint64_t off, uint8_t *data,
                       uint32_t count, bool write, struct vg_error *err)
{
    if (off < VGPU_MSIX_TABLE_OFFSET) {
        if (count > VGPU_MSIX_TABLE_OFFSET - off) {
            return vg_error_set(err, EINVAL,
                                "access crosses into the MSI-X area");
        }
        /* The model ignores (and counts) bad accesses; reads give ~0. */
        if (write) {
            vgpu_bar0_write(srv->gpu, off, data, count);
        } else {
            vgpu_bar0_read(srv->gpu, off, data, count);
        }
        return 0;
    }
    off -= VGPU_MSIX_TABLE_OFFSET;
    if (!write) {
        memcpy(data, srv->msix + off, count);
    } else if (off < MSIX_TABLE_LEN) {
        memcpy(srv->msix + off, data,
               count < MSIX_TABLE_LEN - off ? count : MSIX_TABLE_LEN - off);
    }
    return 0;
}

/*
 * VRAM is not written through REGION_WRITE while a migration reads or
 * fills it: in STOP_COPY the final pass (and the hash pool's threads, on
 * the tracking bitmaps) would race the write, which would be lost from
 * the stream; in RESUMING the incoming stream owns VRAM.  The device is
 * stopped in both, so QEMU never writes there.
 */
static int vram_busy(struct vfu_server *srv, struct vg_error *err)
{
    enum mig_state st = mig_state(srv->mig);

    if (st == MIG_STATE_STOP_COPY || st == MIG_STATE_RESUMING) {
        return vg_error_set(err, EBUSY, "VRAM write refused in %s",
                            mig_state_name(st));
    }
    return 0;
}

static int region_access(struct vfu_server *srv, const struct vfu_region_rw *rw,
                         uint8_t *data, bool write, struct vg_error *err)
{
    switch (rw->region) {
    case VFIO_PCI_CONFIG_REGION_INDEX:
        return write ? pci_config_write(&srv->cfg, rw->offset, data, rw->count,
                                        err)
                     : pci_config_read(&srv->cfg, rw->offset, data, rw->count,
                                       err);
    case VGPU_BAR_REGS:
        return bar0_access(srv, rw->offset, data, rw->count, write, err);
    case VGPU_BAR_VRAM:
        if (write && vram_busy(srv, err) < 0) {
            return -EBUSY;
        }
        if ((write
                 ? vgpu_bar2_write(srv->gpu, rw->offset, data, rw->count)
                 : vgpu_bar2_read(srv->gpu, rw->offset, data, rw->count)) < 0) {
            return vg_error_set(err, EINVAL, "VRAM access refused");
        }
        return 0;
    default: /* the parser allows only regions of non-zero size */
        return vg_error_set(err, EINVAL, "region %u has no accessor",
                            rw->region);
    }
}

static int handle_region_rw(struct vfu_server *srv, const uint8_t *p,
                            size_t len, bool write, struct reply *r,
                            struct vg_error *err)
{
    struct vfu_region_rw rw;
    const uint8_t *wdata;
    uint8_t *out = PAYLOAD(srv) + sizeof(rw);
    int ret;

    ret = vfu_parse_region_rw(p, len, &srv->lim, write, &rw, &wdata, err);
    if (ret < 0) {
        return ret;
    }
    if (write) {
        memcpy(out, wdata, rw.count); /* the model gets a private copy */
    }
    ret = region_access(srv, &rw, out, write, err);
    if (ret < 0) {
        vg_error_prefix(err, "region %u: %s at 0x%llx+%u", rw.region,
                        write ? "write" : "read", (unsigned long long)rw.offset,
                        rw.count);
        return ret;
    }
    memcpy(PAYLOAD(srv), &rw, sizeof(rw));
    r->len = (uint32_t)sizeof(rw) + (write ? 0 : rw.count);
    return 0;
}

static int handle_reset(struct vfu_server *srv, size_t len,
                        struct vg_error *err)
{
    if (len) {
        return vg_error_set(err, EINVAL, "DEVICE_RESET has %zu payload bytes",
                            len);
    }
    mig_reset(srv->mig);
    vgpu_reset(srv->gpu);
    pci_config_reset(&srv->cfg);
    memset(srv->msix, 0, sizeof(srv->msix));
    srv->intx_masked = false;
    vg_info("device reset");
    return 0;
}

/* ------------------------------------------------------------ migration */

/* Reply to DEVICE_FEATURE request @p: its header with argsz covering
 * @n bytes of @data (NULL: the request's own data, echoed). */
static void feature_reply(struct vfu_server *srv, const uint8_t *p,
                          const void *data, size_t n, struct reply *r)
{
    struct vfu_device_feature h;

    memcpy(&h, p, sizeof(h));
    h.argsz = (uint32_t)(sizeof(h) + n);
    memcpy(PAYLOAD(srv), &h, sizeof(h));
    memmove(PAYLOAD(srv) + sizeof(h), data ? data : p + sizeof(h), n);
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
                             const struct vfu_feature_req *f, struct reply *r,
                             struct vg_error *err)
{
    struct vfu_feature_migration m = {mig_flags()};
    int ret = vfu_feature_check_argsz(f, sizeof(m), err);

    if (ret == 0) {
        feature_reply(srv, p, &m, sizeof(m), r);
    }
    return ret;
}

static int feature_mig_state(struct vfu_server *srv, const uint8_t *p,
                             const struct vfu_feature_req *f, struct reply *r,
                             struct vg_error *err)
{
    struct vfu_feature_mig_state st = {0, -1};
    int ret = vfu_feature_check_argsz(f, sizeof(st), err);

    if (ret == 0 && f->set) {
        ret = vfu_parse_mig_state(f, &st.device_state, err);
        if (ret == 0) {
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
                             const struct vfu_feature_req *f, struct reply *r,
                             struct vg_error *err)
{
    struct vfu_feature_mig_data_size ds = {mig_stopcopy_size(srv->mig)};
    int ret = vfu_feature_check_argsz(f, sizeof(ds), err);

    if (ret == 0) {
        feature_reply(srv, p, &ds, sizeof(ds), r);
    }
    return ret;
}

static int feature_log_start(struct vfu_server *srv, const uint8_t *p,
                             const struct vfu_feature_req *f, struct reply *r,
                             struct vg_error *err)
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
        memcpy(PAYLOAD(srv) + sizeof(struct vfu_device_feature), &c.page_size,
               sizeof(c.page_size)); /* the page size we chose */
        mig_note_dma_logging(srv->mig, true);
    }
    return ret;
}

static int feature_log_stop(struct vfu_server *srv, const uint8_t *p,
                            const struct vfu_feature_req *f, struct reply *r,
                            struct vg_error *err)
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
                              const struct vfu_feature_req *f, struct reply *r,
                              struct vg_error *err)
{
    uint8_t *out = PAYLOAD(srv) + sizeof(struct vfu_device_feature);
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
        memcpy(out, &rep, sizeof(rep));
        feature_reply(srv, p, out, sizeof(rep) + bytes, r);
    }
    return ret;
}

typedef int (*feature_fn)(struct vfu_server *srv, const uint8_t *p,
                          const struct vfu_feature_req *f, struct reply *r,
                          struct vg_error *err);

static const struct {
    feature_fn fn;
    bool get, set;
} features[] = {
    [VFU_FEATURE_MIGRATION] = {feature_migration, true, false},
    [VFU_FEATURE_MIG_DEVICE_STATE] = {feature_mig_state, true, true},
    [VFU_FEATURE_DMA_LOGGING_START] = {feature_log_start, false, true},
    [VFU_FEATURE_DMA_LOGGING_STOP] = {feature_log_stop, false, true},
    [VFU_FEATURE_DMA_LOGGING_REPORT] = {feature_log_report, true, false},
    [VFU_FEATURE_MIG_DATA_SIZE] = {feature_data_size, true, false},
};

static int handle_feature(struct vfu_server *srv, const uint8_t *p, size_t len,
                          struct reply *r, struct vg_error *err)
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

static int handle_mig_data_read(struct vfu_server *srv, const uint8_t *p,
                                size_t len, struct reply *r,
                                struct vg_error *err)
{
    struct vfu_mig_data d;
    uint32_t size;
    int ret;

    ret = vfu_parse_mig_data_read(p, len, MAX_XFER, &size, err);
    if (ret == 0) {
        ret = mig_read(srv->mig, PAYLOAD(srv) + sizeof(d), size, &d.size, err);
    }
    if (ret == 0) {
        d.argsz = (uint32_t)sizeof(d) + d.size;
        memcpy(PAYLOAD(srv), &d, sizeof(d));
        r->len = d.argsz;
    }
    return ret;
}

static int handle_mig_data_write(struct vfu_server *srv, const uint8_t *p,
                                 size_t len, struct vg_error *err)
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

static int handle_precopy_info(struct vfu_server *srv, const uint8_t *p,
                               size_t len, struct reply *r,
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
        memcpy(PAYLOAD(srv), &info, sizeof(info));
        r->len = sizeof(info);
    }
    return ret;
}

static int handle_region_dirty_log(struct vfu_server *srv, const uint8_t *p,
                                   size_t len, struct vg_error *err)
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

static int dispatch(struct vfu_server *srv, uint16_t cmd, const uint8_t *p,
                    size_t len, struct reply *r, struct vg_error *err)
{
    if (cmd == VFU_CMD_VERSION) {
        return handle_version(srv, p, len, r, err);
    }
    if (!srv->negotiated) {
        return vg_error_set(err, EINVAL, "VERSION must come first");
    }
    if (srv->rx.nfds && cmd != VFU_CMD_DMA_MAP &&
        cmd != VFU_CMD_DEVICE_SET_IRQS) {
        return vg_error_set(err, EINVAL, "unexpected file descriptors");
    }
    switch (cmd) {
    case VFU_CMD_DMA_MAP:
        return handle_dma_map(srv, p, len, r, err);
    case VFU_CMD_DMA_UNMAP:
        return handle_dma_unmap(srv, p, len, r, err);
    case VFU_CMD_DEVICE_GET_INFO:
        return handle_device_info(srv, p, len, r, err);
    case VFU_CMD_DEVICE_GET_REGION_INFO:
        return handle_region_info(srv, p, len, r, err);
    case VFU_CMD_DEVICE_GET_IRQ_INFO:
        return handle_irq_info(srv, p, len, r, err);
    case VFU_CMD_DEVICE_SET_IRQS:
        return handle_set_irqs(srv, p, len, r, err);
    case VFU_CMD_REGION_READ:
    case VFU_CMD_REGION_WRITE:
        return handle_region_rw(srv, p, len, cmd == VFU_CMD_REGION_WRITE, r,
                                err);
    case VFU_CMD_DEVICE_RESET:
        return handle_reset(srv, len, err);
    case VFU_CMD_DEVICE_FEATURE:
        return handle_feature(srv, p, len, r, err);
    case VFU_CMD_MIG_DATA_READ:
        return handle_mig_data_read(srv, p, len, r, err);
    case VFU_CMD_MIG_DATA_WRITE:
        return handle_mig_data_write(srv, p, len, err);
    case VFU_CMD_MIG_GET_PRECOPY_INFO:
        return handle_precopy_info(srv, p, len, r, err);
    case VFU_CMD_REGION_DIRTY_LOG:
        return handle_region_dirty_log(srv, p, len, err);
    default:
        return vg_error_set(err, ENOTSUP, "command %u (%s) not supported", cmd,
                            vfu_cmd_name(cmd));
    }
}

/* A complete request is in rxbuf. */
static void process(struct vfu_server *srv)
{
    const struct vfu_hdr *hdr = &srv->rx.hdr;
    struct reply r = {.len = 0, .fd = -1};
    struct vg_error err = {0};
    int ret;

    vg_trace("request %u %s size %u", hdr->id, vfu_cmd_name(hdr->command),
             hdr->size);
    ret = srv->rx.fds_lost
              ? vg_error_set(&err, EINVAL, "more than %u file descriptors",
                             MAX_FDS)
              : dispatch(srv, hdr->command, srv->rxbuf + sizeof(*hdr),
                         hdr->size - sizeof(*hdr), &r, &err);
    if (ret < 0) {
        vg_warn("request %u %s: %s", hdr->id, vfu_cmd_name(hdr->command),
                err.msg);
    }
    if (!(hdr->flags & VFU_FLAG_NO_REPLY)) {
        send_reply(srv, hdr, ret < 0 ? -ret : 0, &r);
    }
    mig_idle(srv->mig);
}

/* ------------------------------------------------------------ receiving */

static void take_fds(struct rx_state *rx, struct msghdr *mh)
{
    for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
        size_t n;
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
            continue;
        }
        n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            if (rx->nfds < MAX_FDS) {
                rx->fds[rx->nfds++] = fd;
            } else {
                close(fd);
                rx->fds_lost = true;
            }
        }
    }
    if (mh->msg_flags & MSG_CTRUNC) {
        rx->fds_lost = true;
    }
}

/* Read up to @len bytes into @buf (NULL: discard); 0 on EOF. */
static ssize_t rx_read(struct vfu_server *srv, uint8_t *buf, size_t len)
{
    static uint8_t sink[65536];
    union {
        char buf[CMSG_SPACE(MAX_FDS * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {.iov_base = buf ? buf : sink,
                        .iov_len =
                            buf || len < sizeof(sink) ? len : sizeof(sink)};
    struct msghdr mh = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = ctl.buf,
                        .msg_controllen = sizeof(ctl.buf)};
    ssize_t n = recvmsg(srv->client_fd, &mh, MSG_CMSG_CLOEXEC);

    if (n > 0) {
        take_fds(&srv->rx, &mh);
    }
    return n;
}

/* The header is complete: check it; a refused message is discarded. */
static void header_done(struct vfu_server *srv)
{
    struct rx_state *rx = &srv->rx;
    struct vg_error err;
    struct reply r = {0, -1};
    int ret;

    memcpy(&rx->hdr, srv->rxbuf, sizeof(rx->hdr));
    ret = vfu_hdr_check(&rx->hdr, &srv->lim, &err);
    if (ret == 0) {
        return;
    }
    vg_warn("message %u (%s): %s", rx->hdr.id, vfu_cmd_name(rx->hdr.command),
            err.msg);
    if (rx->hdr.size < sizeof(rx->hdr)) {
        send_reply(srv, &rx->hdr, -ret, &r); /* cannot find the next one */
        srv->drop = true;
        return;
    }
    rx->refused = -ret;
    rx->skip = rx->hdr.size - sizeof(rx->hdr);
}

/* Finish a discarded message: reply with its error. */
static void refused_done(struct vfu_server *srv)
{
    struct reply r = {0, -1};

    send_reply(srv, &srv->rx.hdr, srv->rx.refused, &r);
    rx_reset(&srv->rx);
}

/*
 * Make progress on the current message: -1 on EOF or error, 1 if part of a
 * message was read and more may be waiting, 0 if the socket is drained or a
 * message was completed.
 */
static int rx_step(struct vfu_server *srv, size_t *budget)
{
    struct rx_state *rx = &srv->rx;
    size_t want;
    ssize_t n;

    if (rx->refused) {
        n = rx_read(srv, NULL, rx->skip);
    } else {
        want = rx->have < sizeof(rx->hdr) ? sizeof(rx->hdr) : rx->hdr.size;
        n = rx_read(srv, srv->rxbuf + rx->have, want - rx->have);
    }
    if (n <= 0) {
        return n < 0 && (errno == EAGAIN || errno == EINTR) ? 0 : -1;
    }
    *budget -= (size_t)n < *budget ? (size_t)n : *budget;
    if (rx->have == 0 && !rx->refused) {
        rx->started = now_ms();
    }
    rx->deadline = now_ms() + RX_TIMEOUT_MS;
    if (rx->refused) {
        rx->skip -= (uint64_t)n;
        if (rx->skip == 0) {
            refused_done(srv);
            return srv->drop ? -1 : 0;
        }
        return 1;
    }
    rx->have += (size_t)n;
    if (rx->have == sizeof(rx->hdr)) {
        header_done(srv);
        if (rx->refused && rx->skip == 0) {
            refused_done(srv);
            return srv->drop ? -1 : 0;
        }
    }
    if (!rx->refused && rx->have >= sizeof(rx->hdr) &&
        rx->have == rx->hdr.size) {
        process(srv);
        rx_reset(rx);
        return srv->drop ? -1 : 0;
    }
    return srv->drop ? -1 : 1;
}

static void client_readable(struct vfu_server *srv)
{
    size_t budget = RX_BUDGET;
    int ret;

    /*
     * Read until the socket is drained, a message is complete or the
     * budget is spent: a large message (MIG_DATA_WRITE) arrives in pieces
     * of the client's send buffer size, and a poll round trip per piece
     * only adds latency.  Stopping after each message keeps the device
     * stepping between requests, and the budget keeps a client that sends
     * without end (a refused message of 4 GiB being discarded) from
     * holding the loop; poll is level-triggered and brings us back.
     */
    do {
        ret = rx_step(srv, &budget);
    } while (ret > 0 && budget > 0);
    if (ret < 0) {
        client_close(srv);
    }
}

/* When the message in progress times out: no byte for RX_TIMEOUT_MS, or
 * not complete MSG_TIMEOUT_MS after its first byte. */
static int64_t rx_deadline(const struct rx_state *rx)
{
    int64_t whole = rx->started + MSG_TIMEOUT_MS;

    return rx->deadline < whole ? rx->deadline : whole;
}

/* A message started but did not complete in time. */
static void rx_timeout(struct vfu_server *srv)
{
    struct vfu_hdr hdr = {0};
    struct reply r = {0, -1};
    bool idle = now_ms() >= srv->rx.deadline;

    memcpy(&hdr, srv->rxbuf,
           srv->rx.have < sizeof(hdr) ? srv->rx.have : sizeof(hdr));
    vg_warn("message %u truncated: %zu of %u bytes%s, %s %d ms; "
            "disconnecting",
            hdr.id, srv->rx.have, srv->rx.have < sizeof(hdr) ? 16u : hdr.size,
            srv->rx.refused ? " (refused, being discarded)" : "",
            idle ? "no byte for" : "not complete after",
            idle ? RX_TIMEOUT_MS : MSG_TIMEOUT_MS);
    if (!(hdr.flags & VFU_FLAG_NO_REPLY)) {
        send_reply(srv, &hdr, EINVAL, &r);
    }
    client_close(srv);
}

/* ---------------------------------------------------------------- accept */

static bool peer_allowed(int fd)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);

    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
        vg_warn("SO_PEERCRED: %s", strerror(errno));
        return false;
    }
    if (cred.uid != geteuid() && cred.uid != 0) {
        vg_warn("refusing client pid %d uid %u (not our uid %u)", (int)cred.pid,
                (unsigned)cred.uid, (unsigned)geteuid());
        return false;
    }
    vg_info("client pid %d uid %u connected", (int)cred.pid,
            (unsigned)cred.uid);
    return true;
}

/* Make @fd, a connected stream socket, the client. */
static void client_attach(struct vfu_server *srv, int fd)
{
    int sndbuf = (int)MAX_MSG;
    int fl = fcntl(fd, F_GETFL);

    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        vg_warn("client fd %d: O_NONBLOCK: %s", fd, strerror(errno));
    }
    /*
     * On AF_UNIX stream sockets the sender's SO_SNDBUF bounds the bytes in
     * flight. The default (net.core.wmem_default, 208 KiB) splits a
     * MIG_DATA_READ reply of MAX_XFER bytes into five sendmsg calls, each
     * waiting for the client to drain the previous one. Ask for room for a
     * whole reply (the kernel doubles the value for its overhead and caps
     * it at net.core.wmem_max); failing that, replies are merely slower.
     */
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)) < 0) {
        vg_warn("SO_SNDBUF: %s", strerror(errno));
    }
    srv->client_fd = fd;
}

/* A new connection whose peer may use us, or -1. */
static int accept_client(struct vfu_server *srv)
{
    int fd = accept4(srv->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

    if (fd < 0) {
        vg_warn("accept: %s", strerror(errno));
        return -1;
    }
    if (!peer_allowed(fd)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Remove @path if it is a socket nobody listens on. */
static int remove_stale(const struct sockaddr_un *addr, struct vg_error *err)
{
    struct stat st;
    int fd, ret;

    if (lstat(addr->sun_path, &st) < 0) {
        return errno == ENOENT
                   ? 0
                   : vg_error_set(err, errno, "%s", strerror(errno));
    }
    if (!S_ISSOCK(st.st_mode)) {
        return vg_error_set(err, EEXIST, "exists and is not a socket");
    }
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return vg_error_set(err, errno, "socket: %s", strerror(errno));
    }
    ret = connect(fd, (const struct sockaddr *)addr, sizeof(*addr));
    close(fd);
    if (ret == 0) {
        return vg_error_set(err, EADDRINUSE, "another server is listening");
    }
    vg_info("removing stale socket %s", addr->sun_path);
    return unlink(addr->sun_path) < 0
               ? vg_error_set(err, errno, "unlink: %s", strerror(errno))
               : 0;
}

static int listen_on(struct vfu_server *srv, const char *path,
                     struct vg_error *err)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    mode_t old;
    int ret;

    if (strlen(path) >= sizeof(addr.sun_path)) {
        return vg_error_set(err, ENAMETOOLONG, "longer than %zu bytes",
                            sizeof(addr.sun_path) - 1);
    }
    strcpy(addr.sun_path, path);
    ret = remove_stale(&addr, err);
    if (ret < 0) {
        return ret;
    }
    srv->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (srv->listen_fd < 0) {
        return vg_error_set(err, errno, "socket: %s", strerror(errno));
    }
    /* The socket is born 0600; no chmod(path) after bind, which would
     * follow a link put there in the meantime. */
    old = umask(0177);
    ret = bind(srv->listen_fd, (struct sockaddr *)&addr, sizeof(addr));
    umask(old);
    if (ret < 0) {
        return vg_error_set(err, errno, "bind: %s", strerror(errno));
    }
    srv->path = strdup(path);
    if (!srv->path || listen(srv->listen_fd, 4) < 0) {
        return vg_error_set(err, errno, "set up: %s", strerror(errno));
    }
    return 0;
}

/* ------------------------------------------------------------ lifecycle */

static void init_limits(struct vfu_server *srv)
{
    srv->region_size[VGPU_BAR_REGS] = VGPU_BAR0_SIZE;
    srv->region_size[VGPU_BAR_VRAM] = vgpu_vram_size(srv->gpu);
    srv->region_size[VFIO_PCI_CONFIG_REGION_INDEX] = PCI_CONFIG_SIZE;
    srv->irq_count[VFIO_PCI_INTX_IRQ_INDEX] = 1;
    srv->irq_count[VFIO_PCI_MSI_IRQ_INDEX] = 0;
    srv->irq_count[VFIO_PCI_MSIX_IRQ_INDEX] = VGPU_MSIX_VECTORS;
    srv->lim = (struct vfu_limits){
        .max_msg_size = MAX_MSG,
        .max_xfer = MAX_XFER,
        .num_regions = VFIO_PCI_NUM_REGIONS,
        .region_size = srv->region_size,
        .num_irqs = NUM_IRQS,
        .irq_count = srv->irq_count,
        .dma_pgsize = DMA_PGSIZE,
    };
}

static int mig_init(struct vfu_server *srv, const struct vfu_server_config *cfg,
                    struct vg_error *err)
{
    struct mig_config mc = {
        .gpu = srv->gpu,
        .stats_path = cfg->stats_path,
        .fault = cfg->fault,
        .precopy = cfg->precopy,
        .track = cfg->track,
    };

    /* The destination must offer the features the source's guest saw. */
    vgpu_bar0_read(srv->gpu, VGPU_REG_FEATURES, &mc.features, 4);
    return mig_new(&mc, &srv->mig, err);
}

static int server_init(struct vfu_server *srv,
                       const struct vfu_server_config *cfg,
                       struct vg_error *err)
{
    struct vgpu_host host = {srv, dma_ptr, raise_irq};
    int ret;

    srv->no_migration = cfg->no_migration;
    srv->no_region_log = cfg->no_region_log;
    srv->rxbuf = malloc(MAX_MSG);
    srv->txbuf = malloc(MAX_MSG);
    if (!srv->rxbuf || !srv->txbuf) {
        return vg_error_set(err, ENOMEM, "message buffers");
    }
    ret = pci_config_init(&srv->cfg, cfg->gpu.vram_size, err);
    if (ret == 0) {
        ret = vfu_dma_new(MAX_DMA_MAPS, &srv->dma, err);
    }
    if (ret == 0) {
        vfu_dma_log_set_drop(srv->dma, cfg->fault.no_dma_log);
    }
    if (ret == 0) {
        ret = vgpu_new(&cfg->gpu, &host, &srv->gpu, err);
    }
    if (ret == 0) {
        ret = mig_init(srv, cfg, err);
    }
    if (ret < 0) {
        return ret;
    }
    init_limits(srv);
    if (!cfg->socket_path) { /* vfu_server_handle(), vfu_server_serve_fd() */
        return 0;
    }
    ret = listen_on(srv, cfg->socket_path, err);
    if (ret < 0) {
        vg_error_prefix(err, "socket %s", cfg->socket_path);
    }
    return ret;
}

int vfu_server_new(const struct vfu_server_config *cfg, struct vfu_server **out,
                   struct vg_error *err)
{
    struct vfu_server *srv = calloc(1, sizeof(*srv));
    int ret;

    if (!srv) {
        return vg_error_set(err, ENOMEM, "server state");
    }
    srv->listen_fd = -1;
    srv->client_fd = -1;
    memset(srv->irq_fds, -1, sizeof(srv->irq_fds));
    ret = server_init(srv, cfg, err);
    if (ret < 0) {
        vfu_server_free(srv);
        return ret;
    }
    *out = srv;
    vg_info("listening on %s (VRAM %llu MiB, page %u KiB)",
            srv->path ? srv->path : "nothing (in-process)",
            (unsigned long long)(vgpu_vram_size(srv->gpu) >> 20),
            vgpu_page_size(srv->gpu) >> 10);
    return 0;
}

void vfu_server_free(struct vfu_server *srv)
{
    if (!srv) {
        return;
    }
    client_close(srv);
    for (unsigned i = 0; i < NUM_IRQS; i++) { /* in-process: no client */
        irqs_close(srv, i);
    }
    if (srv->listen_fd >= 0) {
        close(srv->listen_fd);
    }
    if (srv->path) {
        unlink(srv->path);
        free(srv->path);
    }
    mig_free(srv->mig);
    if (srv->gpu) {
        vgpu_free(srv->gpu);
    }
    vfu_dma_free(srv->dma);
    free(srv->rxbuf);
    free(srv->txbuf);
    free(srv);
}

static int poll_timeout(const struct vfu_server *srv)
{
    int64_t left;

    if (vgpu_runnable(srv->gpu)) {
        return mig_gpu_wait_ms(srv->mig); /* 0 unless throttled */
    }
    if (srv->client_fd < 0 || (srv->rx.have == 0 && !srv->rx.refused)) {
        return -1;
    }
    left = rx_deadline(&srv->rx) - now_ms();
    return left < 0 ? 0 : (int)left;
}

static bool rx_expired(const struct vfu_server *srv)
{
    return srv->client_fd >= 0 && (srv->rx.have || srv->rx.refused) &&
           now_ms() >= rx_deadline(&srv->rx);
}

/*
 * One round of the poll loop: wait for @signal_fd, the client's socket
 * and, with @accepted, a new connection (then *@accepted, else -1); serve
 * the client, time out its message, step the device.  1 if @signal_fd
 * fired, 0 to go on, a negative errno on error.
 */
static int loop_once(struct vfu_server *srv, int signal_fd, int *accepted,
                     struct vg_error *err)
{
    struct pollfd pfd[3] = {
        {.fd = signal_fd, .events = POLLIN},
        {.fd = accepted ? srv->listen_fd : -1, .events = POLLIN},
        {.fd = srv->client_fd, .events = POLLIN},
    };
    struct signalfd_siginfo si;

    if (poll(pfd, 3, poll_timeout(srv)) < 0 && errno != EINTR) {
        return vg_error_set(err, errno, "poll: %s", strerror(errno));
    }
    if (pfd[0].revents & POLLIN) {
        if (read(signal_fd, &si, sizeof(si)) == sizeof(si)) {
            vg_info("signal %u: shutting down", si.ssi_signo);
        }
        return 1;
    }
    if (pfd[1].revents & POLLIN) {
        *accepted = accept_client(srv);
    }
    if (srv->client_fd >= 0 && pfd[2].revents) {
        client_readable(srv);
    }
    if (rx_expired(srv)) {
        rx_timeout(srv);
    }
    /* Not in STOP, STOP_COPY, RESUMING or ERROR: the device is stopped
     * there. */
    if (vgpu_runnable(srv->gpu)) {
        mig_gpu_step(srv->mig, STEP_BUDGET);
    }
    return 0;
}

int vfu_server_serve_fd(struct vfu_server *srv, int fd, int signal_fd,
                        struct vg_error *err)
{
    int ret = 0;

    if (fd < 0) {
        return vg_error_set(err, EBADF, "serve fd %d: not a descriptor", fd);
    }
    if (srv->client_fd >= 0) {
        close(fd);
        return vg_error_set(err, EBUSY,
                            "serve fd %d: client fd %d is still connected", fd,
                            srv->client_fd);
    }
    client_attach(srv, fd);
    while (ret == 0 && srv->client_fd >= 0) {
        ret = loop_once(srv, signal_fd, NULL, err);
    }
    client_close(srv);
    return ret;
}

int vfu_server_run(struct vfu_server *srv, int signal_fd, struct vg_error *err)
{
    int ret;

    if (srv->listen_fd < 0) {
        return vg_error_set(err, EINVAL, "serve: the server has no socket");
    }
    for (;;) {
        int fd = -1;

        /* One client at a time: others wait in the backlog. */
        ret = loop_once(srv, signal_fd, &fd, err);
        if (ret == 0 && fd >= 0) {
            ret = vfu_server_serve_fd(srv, fd, signal_fd, err);
        }
        if (ret != 0) {
            return ret < 0 ? ret : 0;
        }
    }
}

/* ------------------------------------------------- in-process requests */

int vfu_server_handle(struct vfu_server *srv, const void *msg, size_t len,
                      const int *fds, unsigned nfds, const uint8_t **reply)
{
    struct rx_state *rx = &srv->rx;
    struct reply r = {0, -1};

    rx_reset(rx);
    srv->drop = false;
    srv->tx_len = 0;
    for (unsigned i = 0; i < nfds; i++) {
        if (rx->nfds < MAX_FDS) {
            rx->fds[rx->nfds++] = fds[i];
        } else {
            close(fds[i]);
            rx->fds_lost = true;
        }
    }
    rx->have = len < MAX_MSG ? len : MAX_MSG;
    memcpy(srv->rxbuf, msg, rx->have);
    if (len < sizeof(rx->hdr)) { /* as a header that never completes */
        memset(&rx->hdr, 0, sizeof(rx->hdr));
        memcpy(&rx->hdr, msg, len);
        send_reply(srv, &rx->hdr, EINVAL, &r);
        srv->drop = true;
    } else {
        header_done(srv);
    }
    if (rx->refused) {
        refused_done(srv);
    } else if (!srv->drop && len != rx->hdr.size) { /* truncated */
        if (!(rx->hdr.flags & VFU_FLAG_NO_REPLY)) {
            send_reply(srv, &rx->hdr, EINVAL, &r);
        }
        srv->drop = true;
    } else if (!srv->drop) {
        process(srv);
    }
    rx_reset(rx);
    if (vgpu_runnable(srv->gpu)) {
        mig_gpu_step(srv->mig, STEP_BUDGET);
    }
    *reply = srv->tx_len ? srv->txbuf : NULL;
    return srv->drop ? 1 : 0;
}
