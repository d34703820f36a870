/*
 * vfu-server.c -- creating and freeing the server of vfu-server.h: its
 * message buffers, the device (vfu-device.c), the migration module
 * (vfu-data.c), the data plane's thread (vfu-plane.c) and the listening
 * socket (vfu-socket.c).  Runs on the caller's thread, before and after
 * the control loop.
 */
#include "vfu-server-int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

static int server_init(struct vfu_server *srv,
                       const struct vfu_server_config *cfg,
                       struct vg_error *err)
{
    int ret;

    srv->no_migration = cfg->no_migration;
    srv->no_region_log = cfg->no_region_log;
    srv->no_data_shm = cfg->no_data_shm;
    srv->no_data_vram = cfg->no_data_vram;
    srv->no_postcopy = cfg->no_postcopy;
    srv->prealloc_shm = cfg->gpu.prealloc;
    srv->fault = cfg->fault;
    srv->shm_slots = cfg->data_slots ? cfg->data_slots : VFU_DATA_SLOTS_DEFAULT;
    if (srv->shm_slots < VFU_DATA_SLOTS_MIN ||
        srv->shm_slots > VFU_DATA_SLOTS_MAX) {
        return vg_error_set(err, EINVAL, "%u data slots: the area has %u to %u",
                            srv->shm_slots, VFU_DATA_SLOTS_MIN,
                            VFU_DATA_SLOTS_MAX);
    }
    srv->rxbuf = malloc(MAX_MSG);
    srv->txbuf = malloc(MAX_MSG);
    if (!srv->rxbuf || !srv->txbuf) {
        return vg_error_set(err, ENOMEM, "message buffers");
    }
    ret = vfu_device_init(srv, cfg, err);
    if (ret == 0) {
        ret = vfu_data_init(srv, cfg, err);
    }
    if (ret == 0 && !cfg->no_data_plane) {
        ret = vfu_plane_start(srv, err);
    }
    if (ret == 0 && cfg->device_thread) {
        ret = vfu_devthread_start(srv, err);
    }
    if (ret < 0) {
        return ret;
    }
    if (!cfg->socket_path) { /* vfu_server_handle(), vfu_server_serve_fd() */
        return 0;
    }
    ret = vfu_listen(srv, cfg->socket_path, err);
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
    pthread_mutex_init(&srv->tx_lock, NULL);
    pthread_mutex_init(&srv->regs_lock, NULL);
    memset(srv->irq_fds, -1, sizeof(srv->irq_fds));
    ret = server_init(srv, cfg, err);
    if (ret < 0) {
        vfu_server_free(srv);
        return ret;
    }
    *out = srv;
    vg_info("listening on %s (VRAM %llu MiB, page %u KiB, %u migration "
            "threads)",
            srv->path ? srv->path : "nothing (in-process)",
            (unsigned long long)(vgpu_vram_size(srv->gpu) >> 20),
            vgpu_page_size(srv->gpu) >> 10, mig_threads(srv->mig));
    return 0;
}

void vfu_server_free(struct vfu_server *srv)
{
    if (!srv) {
        return;
    }
    vfu_client_close(srv);
    vfu_plane_stop(srv);
    vfu_devthread_stop(srv);
    if (srv->listen_fd >= 0) {
        close(srv->listen_fd);
    }
    if (srv->path) {
        unlink(srv->path);
        free(srv->path);
    }
    vfu_data_free(srv);
    vfu_device_free(srv); /* the IRQ fds of an in-process server too */
    free(srv->rxbuf);
    free(srv->txbuf);
    pthread_mutex_destroy(&srv->tx_lock);
    pthread_mutex_destroy(&srv->regs_lock);
    free(srv);
}
