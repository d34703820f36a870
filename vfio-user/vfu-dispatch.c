/*
 * vfu-dispatch.c -- serving a complete request: VERSION (the capabilities
 * we offer, what the client negotiated), then the command table, which
 * hands each command to its part (the device's vfu-device.c and
 * vfu-irq.c, the data plane's vfu-data.c), and the reply.  Runs on the
 * control loop.
 */
#include "vfu-server-int.h"

#include <errno.h>
#include <string.h>

#include "common/log.h"
#include "vfu-dma.h"

static int handle_version(struct vfu_server *srv, const uint8_t *p, size_t len,
                          struct vfu_reply *r, struct vg_error *err)
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
                 .data_shm = true,
                 .data_vram = true,
                 .postcopy = true,
                 .load_from_file = true,
                 .postcopy_dma = true,
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
    ours.migr.data_shm &= !srv->no_data_shm;
    /* Only VRAM mapped from a memfd can be lent to the client. */
    ours.migr.data_vram &=
        ours.migr.data_shm && !srv->no_data_vram && vgpu_vram_fd(srv->gpu) >= 0;
    ours.migr.postcopy &= !srv->no_postcopy && mig_postcopy_capable(srv->mig);
    ours.migr.load_from_file &= mig_restore_capable(srv->mig);
    ours.migr.postcopy_dma &= ours.migr.postcopy;
    ret = vfu_parse_version(p, len, &req, err);
    if (ret < 0) {
        return ret;
    }
    if (req.major != VFU_VERSION_MAJOR) {
        srv->drop = true;
        return vg_error_set(err, ENOTSUP, "protocol major %u unsupported (%u)",
                            req.major, VFU_VERSION_MAJOR);
    }
    if (req.caps.migr.postcopy_dma && ours.migr.postcopy_dma) {
        struct vg_error uffd_err = {0};

        if (vfu_dma_uffd_probe(&uffd_err) < 0) {
            vg_warn("postcopy-dma not offered (QEMU then refuses post-copy "
                    "for this device): %s",
                    uffd_err.msg);
            ours.migr.postcopy_dma = false;
        }
    }
    if (req.caps.migr.data_shm && ours.migr.data_shm) {
        struct vg_error shm_err = {0};

        if (vfu_data_shm_open(srv, &shm_err) < 0) {
            vg_warn("data_shm not offered: %s", shm_err.msg);
            ours.migr.data_shm = false;
        }
    }
    ours.migr.data_vram &= ours.migr.data_shm;
    if (req.caps.migr.data_vram && ours.migr.data_vram) {
        struct vg_error vram_err = {0};

        if (vfu_data_vram_open(srv, &vram_err) < 0) {
            vg_warn("data_vram not offered: %s", vram_err.msg);
            ours.migr.data_vram = false;
        }
    }
    memcpy(vfu_payload(srv), &ver, sizeof(ver));
    ret = vfu_caps_format(&req.caps, &ours,
                          (char *)vfu_payload(srv) + sizeof(ver),
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
    srv->data_shm = req.caps.migr.data_shm && ours.migr.data_shm;
    srv->data_vram =
        srv->data_shm && req.caps.migr.data_vram && ours.migr.data_vram;
    srv->postcopy = req.caps.migr.postcopy && ours.migr.postcopy;
    srv->load_from_file =
        req.caps.migr.load_from_file && ours.migr.load_from_file;
    srv->postcopy_dma = req.caps.migr.postcopy_dma && ours.migr.postcopy_dma;
    vg_info("client negotiated vfio-user %u.%u", VFU_VERSION_MAJOR,
            VFU_VERSION_MINOR);
    return 0;
}

/* The commands after VERSION, by the part that serves them. */
static const struct {
    vfu_handler_fn *fn;
    bool takes_fds; /* the request may carry file descriptors */
} commands[] = {
    /* device: vfu-device.c, vfu-irq.c */
    [VFU_CMD_DMA_MAP] = {vfu_handle_dma_map, true},
    [VFU_CMD_DMA_UNMAP] = {vfu_handle_dma_unmap, false},
    [VFU_CMD_DEVICE_GET_INFO] = {vfu_handle_device_info, false},
    [VFU_CMD_DEVICE_GET_REGION_INFO] = {vfu_handle_region_info, false},
    [VFU_CMD_DEVICE_GET_IRQ_INFO] = {vfu_handle_irq_info, false},
    [VFU_CMD_DEVICE_SET_IRQS] = {vfu_handle_set_irqs, true},
    [VFU_CMD_REGION_READ] = {vfu_handle_region_read, false},
    [VFU_CMD_REGION_WRITE] = {vfu_handle_region_write, false},
    [VFU_CMD_DEVICE_RESET] = {vfu_handle_reset, false},
    /* data plane: vfu-data.c */
    [VFU_CMD_DEVICE_FEATURE] = {vfu_handle_feature, false},
    [VFU_CMD_MIG_DATA_READ] = {vfu_handle_mig_data_read, false},
    [VFU_CMD_MIG_DATA_WRITE] = {vfu_handle_mig_data_write, false},
    [VFU_CMD_MIG_GET_PRECOPY_INFO] = {vfu_handle_precopy_info, false},
    [VFU_CMD_REGION_DIRTY_LOG] = {vfu_handle_region_dirty_log, false},
    [VFU_CMD_MIG_DATA_SHM] = {vfu_handle_mig_data_shm, false},
    [VFU_CMD_MIG_DATA_READ_SHM] = {vfu_handle_mig_data_read_shm, false},
    [VFU_CMD_MIG_DATA_VRAM] = {vfu_handle_mig_data_vram, false},
    [VFU_CMD_MIG_DATA_WRITE_SHM] = {vfu_handle_mig_data_write_shm, false},
    [VFU_CMD_REGION_UFFD] = {vfu_handle_region_uffd, true},
    [VFU_CMD_MIG_POSTCOPY] = {vfu_handle_mig_postcopy, false},
    [VFU_CMD_MIG_DATA_FILE] = {vfu_handle_mig_data_file, true},
    [VFU_CMD_DMA_UFFD] = {vfu_handle_dma_uffd, false},
};

static int dispatch(struct vfu_server *srv, uint16_t cmd, const uint8_t *p,
                    size_t len, struct vfu_reply *r, struct vg_error *err)
{
    bool known =
        cmd < sizeof(commands) / sizeof(commands[0]) && commands[cmd].fn;

    if (cmd == VFU_CMD_VERSION) {
        return handle_version(srv, p, len, r, err);
    }
    if (!srv->negotiated) {
        return vg_error_set(err, EINVAL, "VERSION must come first");
    }
    if (srv->rx.nfds && !(known && commands[cmd].takes_fds)) {
        return vg_error_set(err, EINVAL, "unexpected file descriptors");
    }
    if (!known) {
        return vg_error_set(err, ENOTSUP, "command %u (%s) not supported", cmd,
                            vfu_cmd_name(cmd));
    }
    return commands[cmd].fn(srv, p, len, r, err);
}

/* A data request for the plane: queued (1), or refused (a negative errno
 * with @err set); 0: it is not one. */
static int to_plane(struct vfu_server *srv, const uint8_t *p, size_t len,
                    struct vg_error *err)
{
    int ret;

    if (!vfu_plane_takes(srv, &srv->rx.hdr) || srv->rx.fds_lost ||
        srv->rx.nfds || !srv->negotiated) {
        return 0; /* dispatch() serves or refuses it */
    }
    ret = vfu_data_queue_shm(srv, p, len, err);
    return ret < 0 ? ret : 1;
}

void vfu_serve_request(struct vfu_server *srv)
{
    const struct vfu_hdr *hdr = &srv->rx.hdr;
    const uint8_t *p = srv->rxbuf + sizeof(*hdr);
    size_t len = hdr->size - sizeof(*hdr);
    struct vfu_reply r = {.len = 0, .fd = -1};
    struct vg_error err = {0};
    int ret;

    vg_trace("request %u %s size %u", hdr->id, vfu_cmd_name(hdr->command),
             hdr->size);
    ret = to_plane(srv, p, len, &err);
    if (ret == 1) {
        return; /* the plane replies */
    }
    if (ret == 0 && !vfu_plane_prompt(srv, hdr, p, len)) {
        vfu_plane_drain(srv); /* in order, and the model is ours */
    }
    if (ret == 0) {
        /* Beside the device's step and the plane's requests that may
         * touch the model (vfu-devthread.c). */
        vfu_regs_lock(srv);
        ret = srv->rx.fds_lost
                  ? vg_error_set(&err, EINVAL, "more than %u file descriptors",
                                 MAX_FDS)
                  : dispatch(srv, hdr->command, p, len, &r, &err);
        vfu_regs_unlock(srv);
    }
    if (ret < 0) {
        vg_warn("request %u %s: %s", hdr->id, vfu_cmd_name(hdr->command),
                err.msg);
    }
    if (!(hdr->flags & VFU_FLAG_NO_REPLY)) {
        vfu_send_reply(srv, hdr, ret < 0 ? -ret : 0, &r);
    }
    if (!vfu_plane_busy(srv)) {
        vfu_mig_idle(srv, true);
    }
    if (srv->devthread) {
        vfu_devthread_kick(srv); /* the request may have given it work */
    }
}
