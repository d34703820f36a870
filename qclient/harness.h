/*
 * harness.h -- run vgpu-server and QEMU for qtest-driven tests.
 *
 * Every test gets a private temporary directory holding the sockets and
 * the children's logs (stdout and stderr of each child go to
 * <dir>/<name>.log).  Children get SIGKILL if the test process dies, so an
 * aborted test leaves no processes behind.  All waits are bounded.
 * The binaries come from the environment: VGMIG_SERVER, VGMIG_QEMU and
 * VGMIG_FIRMWARE; a missing one is an error, never a silent skip.
 * VGMIG_SERVER_BACKEND, if set, is every server's --backend (e.g. "cuda":
 * the whole qtest suite on a GPU); a test's own extra arguments win.
 */
#ifndef VG_QCLIENT_HARNESS_H
#define VG_QCLIENT_HARNESS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"
#include "qmp.h"
#include "qtest.h"

#define VG_HARNESS_START_TIMEOUT_MS 20000
#define VG_HARNESS_STOP_TIMEOUT_MS  10000

/* Create a fresh directory under $TMPDIR (or /tmp), "vgmig-<tag>-XXXXXX". */
int vg_tmpdir_create(const char *tag, char **path, struct vg_error *err);
/* Remove @path and the files in it (not recursive). */
int vg_tmpdir_remove(const char *path, struct vg_error *err);

/* Value of environment variable @name that must name an existing file. */
int vg_env_path(const char *name, const char **path, struct vg_error *err);

/* A child process. */
struct vg_proc {
    char *name;
    char *log; /* path of its output */
    pid_t pid;
    bool reaped;
    int status; /* waitpid status once reaped */
};

/* Whether the child is still running (reaps it if it exited). */
bool vg_proc_alive(struct vg_proc *p);
/* Send @sig and wait up to @timeout_ms for the child to exit (reaped). */
int vg_proc_kill(struct vg_proc *p, int sig, int timeout_ms,
                 struct vg_error *err);
/* SIGTERM, then SIGKILL if still alive after @timeout_ms; reaped. */
int vg_proc_stop(struct vg_proc *p, int timeout_ms, struct vg_error *err);
/* Last @max bytes of the child's log (caller g_free()s), for messages. */
char *vg_proc_log_tail(const struct vg_proc *p, size_t max);

/* ---- Leak checks (added for the soak and the fault matrix) ---- */

/* What process @pid has open, from /proc/PID/fd: all descriptors, the
 * memfds among them ("/memfd:" links), the sockets and the userfaultfds. */
struct vg_fd_census {
    unsigned fds;
    unsigned memfds;
    unsigned sockets;
    unsigned uffds;
};
int vg_fd_census(pid_t pid, struct vg_fd_census *c, struct vg_error *err);
/* The children of this process that exist (running or zombie), from the
 * ppid field of /proc/PID/stat: up to @max pids into @pids; returns how
 * many there are (may exceed @max) or a negative errno. */
int vg_child_pids(pid_t *pids, int max, struct vg_error *err);

struct vg_server_opts {
    const char *dir;       /* where the socket and log go */
    const char *vram;      /* --vram, e.g. "64M" */
    const char *page_size; /* --page-size, e.g. "64K" */
    const char *log_level; /* --log-level, NULL: "info" */
    /* Optional: */
    const char *name;       /* NULL: log vgpu-server.log, socket vgpu.sock;
                               else <name>.log and <name>.sock */
    const char *stats_file; /* --stats-file PATH, NULL: none */
    const char *backend;    /* --backend NAME, NULL: $VGMIG_SERVER_BACKEND
                               if set */
    const char *const *extra_args; /* more arguments, NULL-terminated */
};

struct vg_server {
    struct vg_proc proc;
    char *socket;
    char *stats_file; /* copy of the option, NULL if none */
};

/* Start $VGMIG_SERVER and wait until it listens on its socket
 * (<dir>/vgpu.sock or <dir>/<name>.sock). */
int vg_server_start(const struct vg_server_opts *o, struct vg_server **out,
                    struct vg_error *err);
/* Stop (if running), reap and free. */
void vg_server_free(struct vg_server *s);

struct vg_qemu_opts {
    const char *dir;       /* where sockets and log go */
    const char *name;      /* file name prefix, e.g. "qemu1" */
    uint64_t ram_mib;      /* guest RAM (memfd, shared) */
    const char *vgpu_sock; /* vfio-user socket, NULL: no vGPU device */
    /* Optional: */
    /* More vGPUs after vgpu_sock ("vgpu1", "vgpu2", ...): their sockets,
     * NULL-terminated. */
    const char *const *vgpu_socks;
    const char *incoming;          /* -incoming value, e.g. "defer" */
    const char *const *extra_args; /* more arguments, NULL-terminated */
    /* NULL: -accel qtest, with the qtest connection in vg_qemu.qt; else
     * the accelerator (e.g. "tcg") of a real guest: no qtest, qt NULL. */
    const char *accel;
    /* Connect the guest's first serial port (COM1) to a socket this
     * function listens on: vg_qemu.serial_fd. */
    bool serial;
    /* Allocate guest RAM before the VM starts (prealloc=on). */
    bool prealloc;
};

struct vg_qemu {
    struct vg_proc proc;
    struct vg_qtest *qt; /* NULL unless under qtest */
    struct vg_qmp *qmp;
    int serial_fd;      /* COM1's stream (vg_qemu_opts.serial), else -1 */
    uint64_t ram_bytes; /* guest RAM (vg_qemu_opts.ram_mib) */
};

/* Start $VGMIG_QEMU under -accel qtest (or @o->accel) with a pc machine,
 * connected to a qtest (qtest only), a QMP and (if @o->serial) a serial
 * socket this function listens on; the vGPU, if any, is device "vgpu0",
 * those of vgpu_socks "vgpu1", "vgpu2", ... */
int vg_qemu_start(const struct vg_qemu_opts *o, struct vg_qemu **out,
                  struct vg_error *err);
/* Close the connections, SIGKILL QEMU and reap it (for crash tests). */
int vg_qemu_kill9(struct vg_qemu *q, struct vg_error *err);
/* QMP quit, then as vg_proc_stop; reaped and freed. */
void vg_qemu_free(struct vg_qemu *q);

/* The guest RAM of a running QEMU, mapped shared into this process. */
struct vg_ram_map {
    uint8_t *base;
    uint64_t size;
};

/* Map the guest RAM of @q: its memory-backend-memfd (the one memfd of
 * vg_qemu.ram_bytes among QEMU's descriptors), reopened through
 * /proc/PID/fd.  Bytes written through the map are guest RAM, but QEMU's
 * dirty log does not see them: write before a migration starts. */
int vg_qemu_map_ram(const struct vg_qemu *q, struct vg_ram_map *m,
                    struct vg_error *err);
/* Unmap (a zeroed @m is left alone). */
void vg_ram_unmap(struct vg_ram_map *m);

/* Bump allocator for guest physical RAM. */
struct vg_galloc {
    uint64_t next;
    uint64_t end;
};

/* Hand out [@start, @end); tests use RAM above 1 MiB. */
void vg_galloc_init(struct vg_galloc *a, uint64_t start, uint64_t end);
/* Allocate @size bytes aligned to @align (a power of two). */
int vg_galloc_alloc(struct vg_galloc *a, uint64_t size, uint64_t align,
                    uint64_t *addr, struct vg_error *err);

#endif
