/*
 * vfu-server-int.h -- inside the server of vfu-server.h: its state, and
 * what its parts call of each other.
 *
 * The parts, by the thread that runs them (docs/architecture.md):
 *   control loop  vfu-loop.c (poll loop), vfu-socket.c (listen, accept,
 *                 disconnect), vfu-io.c (framing, timeouts, replies),
 *                 vfu-dispatch.c (VERSION and the command table);
 *   data plane    vfu-data.c: the migration requests, served by mig.h;
 *                 vfu-plane.c: its thread, which serves the data requests
 *                 of the data_shm area (MIG_DATA_{READ,WRITE}_SHM);
 *   device        vfu-device.c (regions, DMA map, reset, info, the step),
 *                 vfu-irq.c (interrupt eventfds);
 *                 vfu-devthread.c: its thread, which runs the step.
 * vfu-server.c creates and frees the server.  struct vfu_server groups its
 * fields by the part that owns them.  The control loop runs every part but
 * the plane's requests; while the plane has requests, it owns the
 * migration module and the device (and steps it), and the control loop
 * serves only vfu_plane_prompt() requests (vfu-plane.c says how).
 */
#ifndef VFU_SERVER_INT_H
#define VFU_SERVER_INT_H

#include <linux/vfio.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pci-config.h"
#include "vfu-msg.h"
#include "vfu-server.h"

#define MAX_XFER        (1024u * 1024u)
#define MAX_MSG         (MAX_XFER + 64u)
#define MAX_FDS         8u
#define SHM_SLOT_SIZE   VFU_DATA_SLOT_SIZE
#define MAX_DMA_MAPS    1024u
#define DMA_PGSIZE      4096u
#define NUM_IRQS        (VFIO_PCI_MSIX_IRQ_INDEX + 1)
#define MAX_IRQ_VECTORS VGPU_MSIX_VECTORS
#define MSIX_AREA       (VGPU_BAR0_SIZE - VGPU_MSIX_TABLE_OFFSET)
#define MSIX_TABLE_LEN  (VGPU_MSIX_VECTORS * 16u)

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
    /* Fixed by vfu_server_new(); every part reads them. */
    bool no_migration;  /* --no-migration: no migration features */
    bool no_region_log; /* --no-region-log: refuse REGION_DIRTY_LOG */
    bool no_data_shm;   /* --no-data-shm: refuse data_shm */
    bool no_data_vram;  /* --no-data-vram: refuse data_vram */
    bool no_postcopy;   /* --no-postcopy: refuse postcopy */
    unsigned shm_slots; /* --data-slots: slots of the data_shm area */
    bool prealloc_shm;  /* --prealloc: populate it when it is created */
    /* TEST ONLY --fault (the server applies late-dma, vfu-data.c) */
    struct mig_fault fault;
    uint64_t region_size[VFIO_PCI_NUM_REGIONS];
    uint32_t irq_count[NUM_IRQS];
    struct vfu_limits lim;

    /* Control loop: the socket, the client and the message in flight.
     * A handler reads rx's fds (DMA_MAP, SET_IRQS take them over) and
     * writes its reply into txbuf. */
    char *path;
    int listen_fd;
    int client_fd;
    bool negotiated;
    bool drop;       /* disconnect after the current reply */
    uint32_t tx_len; /* no client: size of the last reply, 0: none */
    struct rx_state rx;
    uint8_t *rxbuf; /* MAX_MSG */
    uint8_t *txbuf; /* MAX_MSG */
    /* Held while a message goes out: the control loop's replies and the
     * plane's interleave whole. */
    pthread_mutex_t tx_lock;

    /* Set by VERSION on the control loop, read by the data plane;
     * cleared on disconnect. */
    bool precopy_info;   /* the client negotiated MIG_GET_PRECOPY_INFO */
    bool region_log;     /* ... and REGION_DIRTY_LOG (it logs BAR2 writes) */
    bool data_shm;       /* ... and MIG_DATA_SHM, MIG_DATA_{READ,WRITE}_SHM */
    bool data_vram;      /* ... and MIG_DATA_VRAM, reads left in VRAM */
    bool postcopy;       /* ... and REGION_UFFD, MIG_POSTCOPY */
    bool load_from_file; /* ... and MIG_DATA_FILE */
    bool postcopy_dma;   /* ... and DMA_UFFD */

    /* Data plane: the shared memory area of MIG_DATA_SHM (NULL until the
     * client asks for it, freed on disconnect).  The client may write it
     * at any time: what reads it copies what it checks (mig_write). */
    int shm_fd;
    int vram_ro_fd; /* MIG_DATA_VRAM's read-only fd of VRAM, -1: none */
    uint8_t *shm;
    /* The thread populating the area (shm_populate()), or NULL. */
    struct vg_populate *shm_populate;

    /* Data plane: the migration module.  The device's step runs through
     * it too (mig_gpu_step(): tracking sees every engine write). */
    struct mig *mig;
    /* Its thread (vfu-plane.c); NULL: --no-data-plane, all inline. */
    struct vfu_plane *plane;

    /* Device: the model, its config space and MSI-X table, its interrupt
     * eventfds and the guest memory it reaches by DMA (mapped by the
     * control loop, logged for the data plane). */
    struct vgpu *gpu;
    /* Held around the device's step, every request the control loop
     * serves, deferred migration work and the plane's requests but
     * pre-copy reads (vfu-devthread.c). */
    pthread_mutex_t regs_lock;
    /* Threads waiting in vfu_regs_lock(): the device's thread lets them
     * have the lock before its next step. */
    atomic_uint regs_waiters;
    /* The device's own thread; NULL: the step runs inline, after each
     * request (vfu_device_run()). */
    struct vfu_devthread *devthread;
    struct pci_config cfg;
    uint8_t msix[MSIX_AREA];
    int irq_fds[NUM_IRQS][MAX_IRQ_VECTORS];
    bool intx_masked;
    struct vfu_dma *dma;
};

/* A reply being built: payload length and an fd to pass (-1: none). */
struct vfu_reply {
    uint32_t len;
    int fd;
};

/* Where a handler writes its reply's payload: after the header. */
static inline uint8_t *vfu_payload(struct vfu_server *srv)
{
    return srv->txbuf + sizeof(struct vfu_hdr);
}

/*
 * A request's handler: @p is its payload of @len bytes; on success the
 * reply's payload is in vfu_payload(@srv), *@r says how long and which fd
 * goes with it.  0, or a negative errno with @err set (the error reply).
 */
typedef int vfu_handler_fn(struct vfu_server *srv, const uint8_t *p, size_t len,
                           struct vfu_reply *r, struct vg_error *err);

/* ------------------------------------------- control loop: vfu-socket.c */

/* Listen on @path (mode 0600), replacing a stale socket. */
int vfu_listen(struct vfu_server *srv, const char *path, struct vg_error *err);
/* A new connection whose peer may use us, or -1. */
int vfu_accept(struct vfu_server *srv);
/* Make @fd, a connected stream socket, the client. */
void vfu_client_attach(struct vfu_server *srv, int fd);
/* Disconnect the client, releasing what it set up (no-op without one). */
void vfu_client_close(struct vfu_server *srv);

/* ----------------------------------------------- control loop: vfu-io.c */

void vfu_rx_reset(struct rx_state *rx);
/* The header in rxbuf is complete: check it; a refused one is discarded. */
void vfu_rx_header_done(struct vfu_server *srv);
/* A discarded message is complete: reply with its error. */
void vfu_rx_refused_done(struct vfu_server *srv);
/* The client's socket is readable: receive, and serve what completes. */
void vfu_client_readable(struct vfu_server *srv);
/* Milliseconds until the message in progress times out, -1: none is. */
int vfu_rx_wait_ms(const struct vfu_server *srv);
bool vfu_rx_expired(const struct vfu_server *srv);
/* The message in progress timed out: error reply, disconnect. */
void vfu_rx_timeout(struct vfu_server *srv);
/* Reply to @req: an error reply if @errnum, else @r's payload in txbuf. */
void vfu_send_reply(struct vfu_server *srv, const struct vfu_hdr *req,
                    int errnum, const struct vfu_reply *r);
/* Send the message of @len bytes at @msg (with @fd if >= 0) whole, under
 * tx_lock; any thread. */
int vfu_send_msg(struct vfu_server *srv, const uint8_t *msg, size_t len, int fd,
                 struct vg_error *err);

/* ----------------------------------------- control loop: vfu-dispatch.c */

/* Serve the complete request in rxbuf, reply unless NO_REPLY. */
void vfu_serve_request(struct vfu_server *srv);

/* ----------------------------------------------- data plane: vfu-data.c */

int vfu_data_init(struct vfu_server *srv, const struct vfu_server_config *cfg,
                  struct vg_error *err);
void vfu_data_free(struct vfu_server *srv);
/* The client is gone: forget what it negotiated, stop DMA logging. */
void vfu_data_release(struct vfu_server *srv);
/* Deferred migration work (mig_idle()), under regs_lock. */
void vfu_mig_idle(struct vfu_server *srv, bool served);
int vfu_handle_feature(struct vfu_server *srv, const uint8_t *p, size_t len,
                       struct vfu_reply *r, struct vg_error *err);
int vfu_handle_mig_data_read(struct vfu_server *srv, const uint8_t *p,
                             size_t len, struct vfu_reply *r,
                             struct vg_error *err);
int vfu_handle_mig_data_write(struct vfu_server *srv, const uint8_t *p,
                              size_t len, struct vfu_reply *r,
                              struct vg_error *err);
int vfu_handle_precopy_info(struct vfu_server *srv, const uint8_t *p,
                            size_t len, struct vfu_reply *r,
                            struct vg_error *err);
/* The client negotiated data_shm: create its area (kept until it
 * disconnects, so that a server's fds do not change with migrations). */
int vfu_data_shm_open(struct vfu_server *srv, struct vg_error *err);
int vfu_handle_mig_data_shm(struct vfu_server *srv, const uint8_t *p,
                            size_t len, struct vfu_reply *r,
                            struct vg_error *err);
int vfu_handle_mig_data_read_shm(struct vfu_server *srv, const uint8_t *p,
                                 size_t len, struct vfu_reply *r,
                                 struct vg_error *err);
int vfu_handle_mig_data_write_shm(struct vfu_server *srv, const uint8_t *p,
                                  size_t len, struct vfu_reply *r,
                                  struct vg_error *err);
/* The client negotiated data_vram: open the read-only view of VRAM that
 * MIG_DATA_VRAM hands out (kept until it disconnects, like the area). */
int vfu_data_vram_open(struct vfu_server *srv, struct vg_error *err);
/* MIG_DATA_VRAM: the read-only fd of VRAM (data_vram), or in RESUMING,
 * asked for, the writable one. */
int vfu_handle_mig_data_vram(struct vfu_server *srv, const uint8_t *p,
                             size_t len, struct vfu_reply *r,
                             struct vg_error *err);
/* Serve the MIG_DATA_READ_SHM @io (parsed) into its slot: @io becomes the
 * reply (size, VFU_MIG_SHM_IO_END once the reads have taken the stop-copy
 * stream's last byte, argsz the reply's payload bytes), followed by
 * @pieces where @io asked for VFU_MIG_SHM_IO_PIECES. */
int vfu_read_shm(struct vfu_server *srv, struct vfu_mig_shm_io *io,
                 struct vfu_mig_pieces *pieces, struct vg_error *err);
/* Serve the MIG_DATA_WRITE_SHM @io (parsed), of its slot or of its
 * @pieces where it says VFU_MIG_SHM_IO_PIECES: @io becomes the reply. */
int vfu_write_shm(struct vfu_server *srv, struct vfu_mig_shm_io *io,
                  const struct vfu_mig_pieces *pieces, struct vg_error *err);
/* The payload bytes of a MIG_DATA_READ_SHM reply: @io, and @pieces if it
 * says VFU_MIG_SHM_IO_PIECES. */
size_t vfu_read_shm_reply_len(const struct vfu_mig_shm_io *io,
                              const struct vfu_mig_pieces *pieces);
/* The control loop's half of a MIG_DATA_{READ,WRITE}_SHM request that the
 * plane takes (vfu_plane_takes()): check it and queue it; the plane
 * replies.  A negative errno with @err set: the caller replies. */
int vfu_data_queue_shm(struct vfu_server *srv, const uint8_t *p, size_t len,
                       struct vg_error *err);
int vfu_handle_dma_uffd(struct vfu_server *srv, const uint8_t *p, size_t len,
                        struct vfu_reply *r, struct vg_error *err);
int vfu_handle_region_uffd(struct vfu_server *srv, const uint8_t *p, size_t len,
                           struct vfu_reply *r, struct vg_error *err);
int vfu_handle_mig_data_file(struct vfu_server *srv, const uint8_t *p,
                             size_t len, struct vfu_reply *r,
                             struct vg_error *err);
int vfu_handle_mig_postcopy(struct vfu_server *srv, const uint8_t *p,
                            size_t len, struct vfu_reply *r,
                            struct vg_error *err);
int vfu_handle_region_dirty_log(struct vfu_server *srv, const uint8_t *p,
                                size_t len, struct vfu_reply *r,
                                struct vg_error *err);

/* --------------------------------------------- data plane: vfu-plane.c */

/* Start the plane's thread (srv->plane), or stop it after its requests. */
int vfu_plane_start(struct vfu_server *srv, struct vg_error *err);
void vfu_plane_stop(struct vfu_server *srv);
/* Whether the plane has requests queued or in service (then it owns the
 * migration module and the device). */
bool vfu_plane_busy(struct vfu_server *srv);
/* Wait until it has none. */
void vfu_plane_drain(struct vfu_server *srv);
/* The client goes: wait until it has none, and forget a lost reply. */
void vfu_plane_detach(struct vfu_server *srv);
/* Whether the plane takes the request @hdr (then vfu_data_queue_shm()). */
bool vfu_plane_takes(const struct vfu_server *srv, const struct vfu_hdr *hdr);
/* Whether the request @hdr with payload @p of @len bytes may be served
 * while the plane is busy: a read of config space, a register read or
 * write (BAR0 below the MSI-X area). */
bool vfu_plane_prompt(const struct vfu_server *srv, const struct vfu_hdr *hdr,
                      const uint8_t *p, size_t len);
/* Queue a checked request (a write's @pieces too); waits while the queue
 * is full. */
void vfu_plane_submit(struct vfu_server *srv, const struct vfu_hdr *hdr,
                      const struct vfu_mig_shm_io *io,
                      const struct vfu_mig_pieces *pieces);
/* An eventfd readable when the plane went idle (-1: no plane); after it
 * fired, vfu_plane_woken() clears it and says whether a reply of the
 * plane's was lost since the client came (then disconnect; the plane
 * sends no more replies to it). */
int vfu_plane_wake_fd(const struct vfu_server *srv);
bool vfu_plane_woken(struct vfu_server *srv);

/* ------------------------------------------------- device: vfu-device.c */

int vfu_device_init(struct vfu_server *srv, const struct vfu_server_config *cfg,
                    struct vg_error *err);
void vfu_device_free(struct vfu_server *srv);
/* The client is gone: unmap its DMA, close its interrupt eventfds. */
void vfu_device_release(struct vfu_server *srv);
/* Run the command processor for a while, if the device runs; the caller
 * holds regs_lock. */
void vfu_device_step_locked(struct vfu_server *srv);
/* Let the device run after a request: step it here, unless it has a
 * thread of its own (which the control loop kicks after each request it
 * serves: only those can give the device work). */
void vfu_device_run(struct vfu_server *srv);
/* How long the device can wait for its next step (0 unless throttled);
 * -1 while it is stopped or has nothing to do. */
int vfu_device_wait_ms(const struct vfu_server *srv);
int vfu_handle_dma_map(struct vfu_server *srv, const uint8_t *p, size_t len,
                       struct vfu_reply *r, struct vg_error *err);
int vfu_handle_dma_unmap(struct vfu_server *srv, const uint8_t *p, size_t len,
                         struct vfu_reply *r, struct vg_error *err);
int vfu_handle_device_info(struct vfu_server *srv, const uint8_t *p, size_t len,
                           struct vfu_reply *r, struct vg_error *err);
int vfu_handle_region_info(struct vfu_server *srv, const uint8_t *p, size_t len,
                           struct vfu_reply *r, struct vg_error *err);
int vfu_handle_region_read(struct vfu_server *srv, const uint8_t *p, size_t len,
                           struct vfu_reply *r, struct vg_error *err);
int vfu_handle_region_write(struct vfu_server *srv, const uint8_t *p,
                            size_t len, struct vfu_reply *r,
                            struct vg_error *err);
int vfu_handle_reset(struct vfu_server *srv, const uint8_t *p, size_t len,
                     struct vfu_reply *r, struct vg_error *err);

/* ---------------------------------------------- device: vfu-devthread.c */

/* Start the device's thread (srv->devthread), or stop it. */
int vfu_devthread_start(struct vfu_server *srv, struct vg_error *err);
void vfu_devthread_stop(struct vfu_server *srv);
/* The device may have work: step it now. */
void vfu_devthread_kick(struct vfu_server *srv);
/* Take regs_lock, or release it, from any thread but the device's: the
 * device's thread, which steps again as soon as it can, waits until
 * every thread waiting here has had the lock (no starving). */
void vfu_regs_lock(struct vfu_server *srv);
void vfu_regs_unlock(struct vfu_server *srv);

/* ---------------------------------------------------- device: vfu-irq.c */

/* The model raises interrupt @vector (struct vgpu_host's raise_irq). */
void vfu_irq_raise(void *opaque, unsigned vector);
void vfu_irqs_close_all(struct vfu_server *srv);
int vfu_handle_irq_info(struct vfu_server *srv, const uint8_t *p, size_t len,
                        struct vfu_reply *r, struct vg_error *err);
int vfu_handle_set_irqs(struct vfu_server *srv, const uint8_t *p, size_t len,
                        struct vfu_reply *r, struct vg_error *err);

#endif
