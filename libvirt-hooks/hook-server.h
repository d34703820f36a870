/*
 * hook-server.h -- start and stop the vgpu-server processes of a domain.
 *
 * Every managed vGPU gets its own vgpu-server, detached from the hook
 * (a new session, reparented to init), running as the QEMU user so that
 * its socket (mode 0600) admits only QEMU.  The socket's directory is
 * created owned by that user, mode 0700, when missing; an existing one
 * must already belong to it.  The servers' output and the hook's own
 * notes go to LOG_DIR/<domain>-vgpu.log.
 *
 * The hook remembers each server in STATE_DIR/<uuid>-<index>.state
 * (pid, socket, statistics file, the directory it created), written
 * before it waits for the socket, so a later stop finds every server it
 * ever started for the domain, even after a failed start.  A pid is only
 * signalled while /proc shows it is still the vgpu-server of that socket.
 */
#ifndef VGMIG_HOOK_SERVER_H
#define VGMIG_HOOK_SERVER_H

#include <stdbool.h>
#include <sys/types.h>

#include "common/error.h"
#include "hook-config.h"
#include "hook-domain.h"

/* Who runs the servers: the domain's DAC label, else the configuration's
 * qemu_user/qemu_group. */
int vgh_server_owner(const struct vgh_config *cfg, const struct vgh_domain *dom,
                     uid_t *uid, gid_t *gid, struct vg_error *err);

/*
 * Start a server for every managed vGPU of @dom that has none running and
 * wait until each socket accepts a connection (cfg->start_timeout).  A
 * server already running for a socket is kept (the call is idempotent).
 * For unmanaged vGPUs only check that their socket accepts.  On failure
 * every server this call started is stopped again and the message says
 * which vGPU failed and why (with the end of the server's log).
 */
int vgh_servers_start(const struct vgh_config *cfg,
                      const struct vgh_domain *dom, uid_t uid, gid_t gid,
                      struct vg_error *err);

/*
 * Stop every server started for @dom (SIGTERM, SIGKILL after
 * cfg->stop_timeout), remove their sockets, statistics and state files and
 * the socket directories the hook created; remove stale sockets at the
 * managed vGPUs' paths.  Nothing to stop is success.
 */
int vgh_servers_stop(const struct vgh_config *cfg, const struct vgh_domain *dom,
                     struct vg_error *err);

/* True if a UNIX socket at @path accepts a connection now. */
bool vgh_socket_accepts(const char *path);

/* Append a time-stamped line to the domain's log (best effort). */
void vgh_note(const struct vgh_config *cfg, const struct vgh_domain *dom,
              const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
