/*
 * vfu-device.c -- the device behind the transport: its set-up, regions
 * (config space, BAR0 with the MSI-X table, BAR2's VRAM) and their
 * accesses, DMA map and unmap, the device/region info, reset, and the
 * step of its command processor.  The accesses run on the control loop,
 * the step on the device's thread (vfu-devthread.c), or inline without
 * one; all of them under regs_lock.
 */
#include "vfu-server-int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "vfu-dma.h"
#include "vfu-mig-msg.h"

#define STEP_BUDGET (1u << 20)

/* ----------------------------------------------------------- the device */

/* The model reaches guest memory (struct vgpu_host's dma_ptr). */
static void *dma_ptr(void *opaque, uint64_t iova, uint64_t len, bool write)
{
    struct vfu_server *srv = opaque;

    return vfu_dma_ptr(srv->dma, iova, len, write);
}

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

int vfu_device_init(struct vfu_server *srv, const struct vfu_server_config *cfg,
                    struct vg_error *err)
{
    struct vgpu_host host = {srv, dma_ptr, vfu_irq_raise};
    int ret;

    ret = pci_config_init(&srv->cfg, cfg->gpu.vram_size, err);
    if (ret == 0) {
        ret = vfu_dma_new(MAX_DMA_MAPS, &srv->dma, err);
    }
    if (ret == 0) {
        vfu_dma_log_set_drop(srv->dma, cfg->fault.no_dma_log);
        ret = vgpu_new(&cfg->gpu, &host, &srv->gpu, err);
    }
    if (ret == 0) {
        init_limits(srv);
    }
    return ret;
}

void vfu_device_free(struct vfu_server *srv)
{
    vfu_irqs_close_all(srv);
    if (srv->gpu) {
        vgpu_free(srv->gpu);
    }
    vfu_dma_free(srv->dma);
}

void vfu_device_release(struct vfu_server *srv)
{
    vfu_dma_uffd_end(srv->dma);
    vfu_dma_unmap_all(srv->dma);
    vfu_irqs_close_all(srv);
}

/* Not in STOP, STOP_COPY, RESUMING or ERROR: the device is stopped there. */
void vfu_device_step_locked(struct vfu_server *srv)
{
    mig_postcopy_poll(srv->mig);
    if (vgpu_runnable(srv->gpu)) {
        mig_gpu_step(srv->mig, STEP_BUDGET);
    }
}

void vfu_device_run(struct vfu_server *srv)
{
    if (srv->devthread) {
        return; /* it runs by itself; requests kick it (vfu-dispatch.c) */
    }
    vfu_regs_lock(srv);
    vfu_device_step_locked(srv);
    vfu_regs_unlock(srv);
}

int vfu_device_wait_ms(const struct vfu_server *srv)
{
    int gpu = vgpu_runnable(srv->gpu) ? mig_gpu_wait_ms(srv->mig) : -1;
    int postcopy = mig_postcopy_poll(srv->mig);

    return gpu < 0 || (postcopy >= 0 && postcopy < gpu) ? postcopy : gpu;
}

int vfu_handle_reset(struct vfu_server *srv, const uint8_t *p, size_t len,
                     struct vfu_reply *r, struct vg_error *err)
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

/* ------------------------------------------------------------------ DMA */

int vfu_handle_dma_map(struct vfu_server *srv, const uint8_t *p, size_t len,
                       struct vfu_reply *r, struct vg_error *err)
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

/* Whether @fd is a userfaultfd (anon inode "[userfaultfd]"). */
static bool is_userfaultfd(int fd)
{
    char link[64], target[64];
    ssize_t n;

    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    n = readlink(link, target, sizeof(target) - 1);
    if (n < 0) {
        return false;
    }
    target[n] = '\0';
    return strcmp(target, "anon_inode:[userfaultfd]") == 0;
}

int vfu_handle_region_uffd(struct vfu_server *srv, const uint8_t *p, size_t len,
                           struct vfu_reply *r, struct vg_error *err)
{
    struct vfu_uffd_area areas[VFU_UFFD_MAX_AREAS];
    struct mig_client_area vram[VFU_UFFD_MAX_AREAS];
    struct vfu_region_uffd reply = {sizeof(reply), 0, 0, 0};
    uint32_t n, nvram = 0;
    int ret;

    if (!srv->postcopy) {
        return vg_error_set(err, ENOTSUP, "postcopy was not negotiated");
    }
    ret = vfu_parse_region_uffd(p, len, srv->region_size, VFIO_PCI_NUM_REGIONS,
                                areas, &n, err);
    if (ret < 0) {
        return ret;
    }
    if (srv->rx.nfds != 1 || !is_userfaultfd(srv->rx.fds[0])) {
        return vg_error_set(err, EINVAL,
                            "REGION_UFFD needs one userfaultfd (%u fds came)",
                            srv->rx.nfds);
    }
    for (uint32_t i = 0; i < n; i++) {
        if (areas[i].region == VGPU_BAR_VRAM) { /* BAR2 offset = VRAM's */
            vram[nvram++] = (struct mig_client_area){
                areas[i].offset, areas[i].size, areas[i].vaddr};
        }
    }
    mig_note_client_uffd(srv->mig, srv->rx.fds[0], vram, nvram);
    srv->rx.fds[0] = -1; /* taken over */
    memcpy(vfu_payload(srv), &reply, 8);
    r->len = 8;
    return 0;
}

int vfu_handle_dma_uffd(struct vfu_server *srv, const uint8_t *p, size_t len,
                        struct vfu_reply *r, struct vg_error *err)
{
    static const char *const ops[] = {"", "ADVISE", "LISTEN", "END"};
    struct vfu_dma_area areas[VFU_DMA_UFFD_MAX_AREAS];
    struct vfu_dma_uffd req;
    unsigned n = 0;
    int ret;

    if (!srv->postcopy_dma) {
        return vg_error_set(err, ENOTSUP, "postcopy-dma was not negotiated");
    }
    ret = vfu_parse_dma_uffd(p, len, &req, err);
    if (ret < 0) {
        return ret;
    }
    if (req.op == VFU_DMA_UFFD_ADVISE) {
        ret = vfu_dma_uffd_advise(srv->dma, &r->fd, err);
    } else if (req.op == VFU_DMA_UFFD_LISTEN) {
        ret = vfu_dma_uffd_listen(srv->dma, areas, VFU_DMA_UFFD_MAX_AREAS, &n,
                                  err);
    } else {
        vfu_dma_uffd_end(srv->dma);
    }
    if (ret < 0) {
        vg_error_prefix(err, "%s", ops[req.op]);
        return ret;
    }
    _Static_assert(sizeof(areas[0]) == sizeof(struct vfu_dma_uffd_area),
                   "DMA_UFFD areas as on the wire");
    req.count = n;
    req.argsz = (uint32_t)(sizeof(req) + n * sizeof(areas[0]));
    memcpy(vfu_payload(srv), &req, sizeof(req));
    memcpy(vfu_payload(srv) + sizeof(req), areas, n * sizeof(areas[0]));
    r->len = req.argsz;
    vg_info("post-copy: guest RAM for DMA: %s%s", ops[req.op],
            req.op == VFU_DMA_UFFD_LISTEN ? " (mappings registered)" : "");
    return 0;
}

int vfu_handle_dma_unmap(struct vfu_server *srv, const uint8_t *p, size_t len,
                         struct vfu_reply *r, struct vg_error *err)
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
        memcpy(vfu_payload(srv), &u, sizeof(u));
        r->len = sizeof(u);
    }
    return ret;
}

/* ----------------------------------------------------------------- info */

int vfu_handle_device_info(struct vfu_server *srv, const uint8_t *p, size_t len,
                           struct vfu_reply *r, struct vg_error *err)
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
    memcpy(vfu_payload(srv), &info, sizeof(info));
    r->len = sizeof(info);
    return 0;
}

int vfu_handle_region_info(struct vfu_server *srv, const uint8_t *p, size_t len,
                           struct vfu_reply *r, struct vg_error *err)
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
    ret = vfu_encode_region_info(&info, &area, nr_areas, req.argsz,
                                 vfu_payload(srv),
                                 MAX_MSG - sizeof(struct vfu_hdr), err);
    if (ret < 0) {
        return ret;
    }
    r->len = (uint32_t)ret;
    return 0;
}

/* -------------------------------------------------------------- regions */

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
 * stopped in both, so QEMU never writes there.  The P2P states take
 * register and BAR accesses like RUNNING (a write in PRE_COPY_P2P is
 * seen by the write observer or the client's REGION_DIRTY_LOG, as in
 * PRE_COPY).
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
        if (mig_vram_wait(srv->mig, rw->offset, rw->count, err) < 0) {
            return -EIO;
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

static int region_rw(struct vfu_server *srv, const uint8_t *p, size_t len,
                     bool write, struct vfu_reply *r, struct vg_error *err)
{
    struct vfu_region_rw rw;
    const uint8_t *wdata;
    uint8_t *out = vfu_payload(srv) + sizeof(rw);
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
    memcpy(vfu_payload(srv), &rw, sizeof(rw));
    r->len = (uint32_t)sizeof(rw) + (write ? 0 : rw.count);
    return 0;
}

int vfu_handle_region_read(struct vfu_server *srv, const uint8_t *p, size_t len,
                           struct vfu_reply *r, struct vg_error *err)
{
    return region_rw(srv, p, len, false, r, err);
}

int vfu_handle_region_write(struct vfu_server *srv, const uint8_t *p,
                            size_t len, struct vfu_reply *r,
                            struct vg_error *err)
{
    return region_rw(srv, p, len, true, r, err);
}
