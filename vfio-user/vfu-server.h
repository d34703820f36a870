/*
 * vfu-server.h -- the vfio-user server of the vGPU.
 *
 * Listens on a UNIX socket (mode 0600, peers must have our uid or be root)
 * and serves one client at a time (others wait in the backlog) from the
 * caller's thread, the control loop (vfu-loop.c).  Beside it run the data
 * plane (vfu-plane.c: the data_shm area's reads and writes) and the
 * device's own thread (vfu-devthread.c: the command processor), unless
 * the config turns them off; docs/architecture.md says which thread owns
 * what.  A malformed request gets an error reply and serving goes on; a message
 * that cannot be framed (size below the header, or stalled mid-message) gets an
 * error reply and the client is disconnected.  On disconnect DMA mappings, DMA
 * logging and interrupt eventfds are released; device state (the migration
 * state included) is kept for the next client.
 *
 * Migration (mig.h): DEVICE_FEATURE with the MIGRATION, MIG_DEVICE_STATE,
 * MIG_DATA_SIZE and DMA_LOGGING_START/STOP/REPORT features, MIG_DATA_READ,
 * MIG_DATA_WRITE and, once the client proposed "precopy_info" in the
 * "migration" capability, MIG_GET_PRECOPY_INFO (19).  The command
 * processor runs only in RUNNING and PRE_COPY.
 */
#ifndef VFU_SERVER_H
#define VFU_SERVER_H

#include "common/error.h"
#include "vfio-migration/mig.h"
#include "vgpu/vgpu.h"

struct vfu_server;

/* Slots of the data_shm area (MIG_DATA_SHM): at least a read and a read
 * ahead, at most what QEMU maps; with more than two, QEMU lends the slots
 * it reads into to its migration channels instead of copying the data out
 * (QEMU patch 0031). */
#define VFU_DATA_SLOTS_MIN     2u
#define VFU_DATA_SLOTS_MAX     64u
#define VFU_DATA_SLOTS_DEFAULT 32u
#define VFU_DATA_SLOT_SIZE     (4u << 20) /* pre-copy reads of patch 0022 */

struct vfu_server_config {
    const char *socket_path;
    struct vgpu_config gpu;        /* vram_size must be a power of two */
    const char *stats_path;        /* migration statistics file, NULL: none */
    struct mig_fault fault;        /* test-only fault injection */
    bool no_migration;             /* refuse the migration features */
    bool no_region_log;            /* refuse REGION_DIRTY_LOG */
    bool no_data_shm;              /* refuse data_shm */
    bool no_data_vram;             /* refuse data_vram */
    bool no_data_plane;            /* serve its requests on the control loop */
    bool device_thread;            /* step the device on a thread of its own */
    bool no_postcopy;              /* refuse postcopy */
    bool no_restore_on_demand;     /* refuse load-from-file */
    const char *postcopy_listen;   /* TCP host of the page server, or NULL */
    unsigned data_slots;           /* slots of the data_shm area, 0: default */
    enum mig_precopy_mode precopy; /* pre-copy mode (mig-rounds.h) */
    enum mig_track_mode track;     /* dirty tracking mode */
    enum mig_gpu_hash gpu_hash;    /* which copies a GPU hashes */
    unsigned migration_threads;    /* hashing and loading, 0: mig's default */
    unsigned stream_version;       /* written as a source, 0: mig's default */
    bool small_records;            /* ...with runs of at most 2 MiB */
};

int vfu_server_new(const struct vfu_server_config *cfg, struct vfu_server **out,
                   struct vg_error *err);
/* Serve until @signal_fd (a signalfd) becomes readable; returns 0 then.
 * Needs the socket: accepts a client and serves it with
 * vfu_server_serve_fd(), one at a time. */
int vfu_server_run(struct vfu_server *srv, int signal_fd, struct vg_error *err);
/*
 * Serve @fd, a connected stream socket (taken over: made non-blocking and
 * closed at the end), as a client, until it disconnects, is disconnected
 * (a message that cannot be framed or completed in time, a reply it does
 * not take) or @signal_fd (a signalfd, or -1 for none) becomes readable;
 * the device runs meanwhile.  Its DMA mappings and interrupt fds are
 * released at the end, as on any disconnect.  vfu_server_run() serves
 * each accepted client with it; a server without a socket (socket_path
 * NULL) can serve a socketpair end (the socket-level fuzz target).
 * Returns 0 when the client is gone, 1 on the signal (the client was
 * disconnected), a negative errno if a client is connected already or
 * poll fails.
 */
int vfu_server_serve_fd(struct vfu_server *srv, int fd, int signal_fd,
                        struct vg_error *err);
/* Disconnect, write the statistics file a last time, free the device,
 * close and remove the socket. */
void vfu_server_free(struct vfu_server *srv);

/*
 * In-process use (fuzzing, tests): a config with socket_path NULL makes a
 * server without a socket; vfu_server_run() refuses it.  Instead
 * vfu_server_handle() takes one message (@len bytes, header included)
 * with @nfds file descriptors @fds (taken over) as from a connected
 * client -- one whose length is not its header's size as a message
 * truncated on the socket -- then runs the device for one step.
 * *@reply is the reply (header and payload, valid until the next call)
 * or NULL when none is sent.  Returns 1 if a socket client would now be
 * disconnected (then send nothing more), else 0.  Not while a client
 * is being served.
 */
int vfu_server_handle(struct vfu_server *srv, const void *msg, size_t len,
                      const int *fds, unsigned nfds, const uint8_t **reply);

#endif
