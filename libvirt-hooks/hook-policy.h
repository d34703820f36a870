/*
 * hook-policy.h -- what the hook does in each libvirt phase, and whether
 * this host can provide a domain's vGPUs.
 *
 * libvirt runs /etc/libvirt/hooks/qemu DOMAIN OPERATION SUB-OPERATION
 * EXTRA with the domain XML on stdin.  The hook acts on:
 *   migrate begin   (destination, before anything starts)  check the host
 *   prepare begin   (before QEMU starts, also on a
 *                    migration's destination)               check, start
 *   stopped end, release end                                stop
 * and ignores every other phase (start, started, restore, reconnect,
 * attach, ...), printing nothing: an empty stdout leaves the XML as it is.
 */
#ifndef VGMIG_HOOK_POLICY_H
#define VGMIG_HOOK_POLICY_H

#include <stdint.h>

#include "common/error.h"
#include "hook-config.h"
#include "hook-domain.h"

enum vgh_action {
    VGH_NONE,  /* nothing to do */
    VGH_CHECK, /* check that this host can provide the vGPUs */
    VGH_START, /* check, then start the servers and wait for them */
    VGH_STOP,  /* stop the servers, remove their sockets */
};

enum vgh_action vgh_phase_action(const char *op, const char *subop);
const char *vgh_action_name(enum vgh_action action);

/* What the host has, for vgh_check_host(). */
struct vgh_host {
    const char *hostname;
    uint64_t mem_available; /* bytes the kernel says are available */
    bool server_ok;         /* cfg->server is an executable file */
};

/*
 * Check that this host can provide every managed vGPU of @dom: its
 * backend is in cfg->backends, its socket lies below cfg->socket_root
 * (the hook creates directories there as root), its size is within
 * cfg->max_vram, the
 * server binary exists, and the VRAM of the domain's cpu-backend vGPUs
 * plus cfg->reserve_memory fits in the available memory.  The message
 * names the host, the vGPU and the limit (with the configuration file).
 * Unmanaged vGPUs are served by the operator: only their backend is
 * checked.
 */
int vgh_check_host(const struct vgh_config *cfg, const struct vgh_domain *dom,
                   const struct vgh_host *host, struct vg_error *err);

/* MemAvailable of /proc/meminfo in bytes, 0 if it cannot be read. */
uint64_t vgh_mem_available(void);

/* Format @bytes as "256 MiB" into @buf. */
const char *vgh_fmt_size(uint64_t bytes, char *buf, size_t size);

#endif
