/*
 * hook-config.h -- the host's configuration of the vgmig libvirt hook.
 *
 * /etc/vgmig/hook.conf (VGH_CONFIG_PATH; the environment variable
 * VGMIG_HOOK_CONF overrides it, for tests) holds "key = value" lines;
 * '#' starts a comment.  A missing file means all defaults.  Keys:
 *
 *   server          path of vgpu-server          [VGH_DEFAULT_SERVER]
 *   backends        VRAM backends this host has, comma-separated  [cpu]
 *   max_vram        largest vGPU this host serves, 0 = no limit     [0]
 *   reserve_memory  host memory kept free beyond the vGPUs' VRAM  [256M]
 *   socket_root     managed vGPUs' sockets must lie below it [/run/vgmig]
 *   state_dir       the hook's records of running servers  [/run/vgmig]
 *   log_dir         the servers' logs, <domain>-vgpu.log
 *                   [/var/log/libvirt/qemu]
 *   qemu_user       who runs the servers when the domain XML has no DAC
 *   qemu_group      label                    [libvirt-qemu, libvirt-qemu]
 *   start_timeout   seconds to wait for a server's socket          [10]
 *   stop_timeout    seconds between SIGTERM and SIGKILL             [5]
 *   server_log_level  the servers' --log-level                   [info]
 *   server_prealloc   yes: start the servers with --prealloc       [no]
 *   postcopy_listen   the servers' --postcopy-listen: an address of this
 *                   host that other hosts reach, where a post-copy source
 *                   serves the pages it left behind; empty: a UNIX socket,
 *                   for destinations on this host only               []
 *   postcopy_timeout  seconds a stopping server may still serve a
 *                   post-copy destination before SIGKILL            [60]
 */
#ifndef VGMIG_HOOK_CONFIG_H
#define VGMIG_HOOK_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

#define VGH_CONFIG_PATH "/etc/vgmig/hook.conf"
#ifndef VGH_DEFAULT_SERVER
#define VGH_DEFAULT_SERVER "/usr/local/bin/vgpu-server"
#endif

struct vgh_config {
    char path[256]; /* the file read, for messages */
    char server[256];
    char backends[128];
    uint64_t max_vram;
    uint64_t reserve_memory;
    char socket_root[128];
    char state_dir[128];
    char log_dir[128];
    char qemu_user[64];
    char qemu_group[64];
    unsigned start_timeout;
    unsigned stop_timeout;
    char server_log_level[16];
    bool server_prealloc;     /* the servers' --prealloc */
    char postcopy_listen[64]; /* the servers' --postcopy-listen, or "" */
    unsigned postcopy_timeout;
};

/* Fill @cfg with the defaults. */
void vgh_config_defaults(struct vgh_config *cfg);

/*
 * Load @path over the defaults (a missing file is not an error).  Fails
 * with -EINVAL on an unknown key or a bad value, naming file and line.
 */
int vgh_config_load(const char *path, struct vgh_config *cfg,
                    struct vg_error *err);

/* Parse configuration text (the body of vgh_config_load). */
int vgh_config_parse(const char *text, const char *path, struct vgh_config *cfg,
                     struct vg_error *err);

/* True if @backend is in the comma-separated list cfg->backends. */
bool vgh_config_has_backend(const struct vgh_config *cfg, const char *backend);

#endif
