/*
 * mig.h -- the vGPU's migration data path behind the VFIO v2 FSM.
 *
 * Source: RUNNING -> PRE_COPY opens a saving session: round 0 sends
 * every page while the device runs (zero pages go as ZEROS runs), each
 * later round the pages dirtied since they were last sent (libdirtytrack,
 * fed by the device's write observer; see mig-rounds.h for the modes);
 * PRE_COPY -> PRE_COPY_P2P quiesces the device (so do RUNNING ->
 * RUNNING_P2P and, from RUNNING_P2P, RUNNING_P2P -> PRE_COPY_P2P opens
 * the session quiesced); PRE_COPY_P2P -> STOP_COPY (or STOP -> STOP_COPY)
 * closes a last epoch and sends the final dirty set, then the device
 * state and the END record.
 * mig_read() serves the stream, whole records where they fit (a read that
 * cannot hold the next one whole ends short of its size); a read of 0
 * bytes means no more data now.
 * Leaving the saving group ends the session; the source's VRAM and
 * device are never modified by it, so a failed migration resumes intact.
 *
 * Destination: STOP -> RESUMING resets the registers and opens a loading
 * session; mig_write() feeds the stream decoder, which writes pages
 * straight into VRAM (bounds-checked); RESUMING -> STOP succeeds only if
 * the stream ended with a valid END (digest included) after a device
 * state, which is then applied; otherwise the SET fails and the device
 * goes to ERROR.
 *
 * Statistics (mig_stats_json) go to the stats file, if any, atomically
 * (temporary file + rename) at every state change, when DMA logging
 * starts or stops, and on mig_free().
 */
#ifndef MIG_H
#define MIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "mig-fsm.h"
#include "mig-rounds.h"
#include "vgpu/vgpu.h"

/* Test-only fault injection: on the source's outgoing stream, and in
 * DMA logging (applied by the vfio-user server, see vfu-dma.h). */
struct mig_fault {
    bool corrupt;    /* flip (xor 0xff) one byte of each saving session */
    bool random;     /* pick the offset from @seed, else use @offset */
    uint64_t offset; /* stream offset of the byte */
    uint64_t seed;
    uint64_t session; /* 0: every saving session, else only this one
                         (1 for the server's first) */
    bool no_dma_log;  /* DMA logging never marks the pages the device wrote */
    bool late_dma;    /* the device writes a page at @late_dma_gpa as it */
    uint64_t late_dma_gpa;      /* leaves a running state (vfu-data.c) */
    unsigned postcopy_delay_ms; /* the page server waits before each reply */
    unsigned read_delay_ms;     /* each mig_read() waits first: slow data */
    unsigned write_delay_ms;    /* each mig_write() waits first: slow load */
    bool bad_piece;     /* a read's first VRAM piece points past VRAM (vfu) */
    bool shifted_piece; /* ...4 KiB away, inside VRAM (vfu) */
};

struct mig_config {
    struct vgpu *gpu;
    uint32_t features;      /* VGPU_FEAT_* the destination must match */
    const char *stats_path; /* NULL: no stats file */
    struct mig_fault fault;
    enum mig_precopy_mode precopy; /* --precopy */
    enum mig_track_mode track;     /* --dirty-track */
    enum mig_gpu_hash gpu_hash;    /* --gpu-hash */
    unsigned hash_threads;         /* 0: 2 */
    unsigned stream_version;       /* written as a source; 0: the newest */
    /* As a source: runs of at most MIG_RUN_SMALL_BYTES of pages, for a
     * destination that predates larger ones (--small-records). */
    bool small_records;
    /* Where a post-copy source's page server puts its socket; NULL: no
     * post-copy (mig_postcopy_capable() is false). */
    const char *runtime_dir;
    /* NULL: the page server listens on a UNIX socket in runtime_dir; else
     * on TCP at this host name or address (another host can reach it). */
    const char *postcopy_listen;
    /* Load a save file's stream before the VM runs, never on demand. */
    bool no_restore_on_demand;
    /* VRAM is backed with memory from the start (--prealloc): so are the
     * tables a session fills as the stream flows (mig-tree.h). */
    bool prealloc;
};

/* Counters: "total" ones over the process lifetime, the others for the
 * last migration session. */
struct mig_stats {
    uint64_t migrations_started; /* total: saving + loading sessions */
    uint64_t bytes_sent;         /* total: stream bytes read */
    uint64_t bytes_received;     /* total: stream bytes written */
    uint64_t precopy_bytes;      /* read in PRE_COPY */
    uint64_t stopcopy_bytes;     /* read in STOP_COPY */
    uint64_t rounds;             /* passes that sent pages, stop-copy's too */
    uint64_t final_dirty_bytes;  /* page data bytes sent in STOP_COPY */
    uint64_t stopcopy_estimate_bytes; /* last MIG_DATA_SIZE before it */
    uint64_t stopcopy_hash_bytes;     /* of it, standing for the final hash */
    unsigned throttle_percent;        /* highest GPU throttle applied */
    uint64_t throttle_rounds;         /* pre-copy rounds run throttled */
    double throttle_held_ms;          /* time the throttle took from it */
    uint64_t pages_hashed;            /* by dirty tracking, this session */
    double hash_ms;                   /* wall time of those hash passes */
    double device_stopcopy_ms; /* STOP_COPY entry to END read; -1: none */
    uint64_t stopcopy_reads;   /* MIG_DATA_READs served in STOP_COPY */
    double stopcopy_read_ms;   /* time spent producing their data */
    uint64_t precopy_reads;    /* MIG_DATA_READs served in PRE_COPY */
    double precopy_read_ms;    /* time spent producing their data */
    uint64_t load_writes;      /* MIG_DATA_WRITEs served in RESUMING */
    double load_write_ms;      /* time spent decoding and applying them */
    /* Of the time in those reads and writes: hashing page data (and, on
     * host VRAM, copying it as it is hashed) ... */
    double data_hash_ms;
    /* ...and waiting for a GPU's copies that the hashing did not hide. */
    double data_copy_ms;
    uint64_t shm_bytes;      /* of those, through the shared area (data_shm) */
    uint64_t in_place_bytes; /* page data loaded without a copy (version 2
                                PAGES and PAGE_PIECES records whole in
                                one write) */
    uint64_t vram_piece_bytes; /* read or written as pieces of VRAM
                                  (mig_read_pieces, mig_write_pieces), not
                                  copied by the server */
    uint64_t listed_bytes;     /* pre-copy page bytes read so, in PAGES_LISTED
                                  records (version 3) */
    uint64_t pieces_pages;     /* stop-copy pages sent in part, as their
                                  pieces the guest CPU wrote (version 4) */
    uint64_t pieces_bytes;     /* ...and those pieces' bytes */
    uint64_t stale_pages;      /* destination: times a page's listed data
                                  did not match (written while it went) */
    uint64_t gpu_direct_bytes; /* copied between the GPU and the shared
                                  area without staging (vgpu_host_register) */
    uint64_t gpu_hashed_bytes; /* page data the GPU hashed as it was read
                                  or written (vgpu_vram_read_hashed,
                                  vgpu_vram_write_hashed), not the CPU */
    uint32_t stream_version;   /* written or read (HEADER), 0: not yet */
    uint32_t stream_run_max;   /* as a source, the most page data one
                                  record of that stream carries */
    bool have_checksums;
    uint64_t vram_checksum;         /* XXH3-64 of VRAM, seed 0 */
    uint64_t device_state_checksum; /* XXH3-64 of the state blob */
    bool dma_logging;               /* the client's DMA logging is on */
    uint64_t dma_log_reports;       /* DMA_LOGGING_REPORTs answered... */
    uint64_t dma_log_reports_idle;  /* ...of ranges it could not write */
    bool bar2_logged;               /* the client logs guest writes to BAR2 */
    uint64_t cpu_log_pages;         /* pages its logs reported, this session */
    char last_error[VG_ERROR_MAX];
    /* Post-copy (mig-postcopy.c), of the last migration: */
    bool postcopy;                 /* it switched over in post-copy */
    uint64_t postcopy_pages;       /* pages left to the page channel */
    uint64_t postcopy_served;      /* source: pages the page server sent */
    uint64_t postcopy_fetched;     /* destination: pages received so far */
    uint64_t postcopy_faults;      /* ...faults on missing pages */
    uint64_t postcopy_zero_faults; /* ...faults on pages of zeros */
    uint64_t postcopy_waits;       /* ...device accesses that waited */
    double postcopy_ms;            /* ...load end to the last page */
    double postcopy_max_fault_ms;  /* ...longest wait of a fault */
    bool postcopy_on_demand;       /* ...the VM ran before every page was in */
    bool postcopy_done;            /* every page is at the destination */
    bool postcopy_verified;        /* ...and the digests of both ends match */
    uint64_t postcopy_reconnects;  /* destination: the channel broke and
                                      was connected again */
    /* A restore whose save file is read on demand; the postcopy_* counters
     * of a destination describe its pages. */
    bool restore_on_demand;
};

struct mig;

int mig_new(const struct mig_config *cfg, struct mig **out,
            struct vg_error *err);
/* Ends any session and writes the stats file a last time. */
void mig_free(struct mig *m);

/* VFIO_MIGRATION_* flags of VFIO_DEVICE_FEATURE_MIGRATION. */
uint64_t mig_flags(void);
enum mig_state mig_state(const struct mig *m);
/* VFIO_DEVICE_FEATURE_MIG_DEVICE_STATE SET (see mig_fsm_set). */
int mig_set_state(struct mig *m, uint32_t target, struct vg_error *err);
/* DEVICE_RESET: end sessions, device running, state RUNNING. */
void mig_reset(struct mig *m);

/* MIG_DATA_READ: up to @size stream bytes into @buf, ending short of
 * @size before a record that would not fit whole; *@got 0 means no more
 * data now.  -EINVAL outside PRE_COPY, PRE_COPY_P2P and STOP_COPY. */
int mig_read(struct mig *m, uint8_t *buf, uint32_t size, uint32_t *got,
             struct vg_error *err);
/* A piece of a read's data (mig_read_pieces): @len bytes at @offset of
 * the read's buffer, or of VRAM if @in_vram. */
struct mig_piece {
    uint64_t offset;
    uint32_t len;
    bool in_vram;
};
/* Stop-copy pages from mapped VRAM, quiesced, in runs of at least this
 * many bytes, are left where they are (smaller ones are copied). */
#define MIG_PIECE_VRAM_MIN (32u * 1024)
/* mig_read, but in STOP_COPY the page data of runs of mapped VRAM stay
 * in VRAM, unchanged until the device leaves STOP_COPY: the read's
 * stream bytes are @pieces[0..*@npieces) in order, the buffer's packed
 * from @buf on; at most @max pieces (>= 2).  So do pre-copy's in PAGES_LISTED
 * records (stream version 3), which may change before they are sent. */
int mig_read_pieces(struct mig *m, uint8_t *buf, uint32_t size, uint32_t *got,
                    struct mig_piece *pieces, unsigned max, unsigned *npieces,
                    struct vg_error *err);
/* After a mig_read_pieces in pre-copy that may leave page data in VRAM:
 * the pass over VRAM the read belongs to, from 1 (each pass sends a page
 * at most once); 0 otherwise. */
uint32_t mig_read_pass(const struct mig *m);
/* Whether the reads have taken the stream's last byte, in STOP_COPY: a
 * further mig_read() gets nothing. */
bool mig_read_ended(const struct mig *m);
/* MIG_DATA_WRITE: -EINVAL outside RESUMING, or the decoder's error, which
 * also puts the device in ERROR.  @data may be memory that another process
 * writes at the same time: every byte the decoder checks is copied first,
 * and page data changed meanwhile only differ from their page hashes
 * (mig_dec_feed); nothing of @data is read after this returns. */
int mig_write(struct mig *m, const uint8_t *data, uint32_t size,
              struct vg_error *err);
/* mig_write of the stream bytes @pieces[0..@n) in order: those of the
 * @size bytes at @buf, and page data already written to their place in
 * VRAM (where it is mapped here), each the whole page data of the PAGES
 * record before it, hashed there (mig_dec_feed_placed).  Every piece is
 * checked against @size or VRAM before it is used. */
int mig_write_pieces(struct mig *m, const uint8_t *buf, uint32_t size,
                     const struct mig_piece *pieces, unsigned n,
                     struct vg_error *err);
/* VFIO_MIG_GET_PRECOPY_INFO: -EINVAL outside PRE_COPY and PRE_COPY_P2P.
 * @initial: bytes
 * of round 0 not read yet; @dirty: bytes of the current later round not
 * read yet.  When the current round is drained, iterative mode closes a
 * dirty-tracking epoch here (at most every MIG_EPOCH_MIN_MS) and the
 * pages dirtied since they were sent become the next round. */
int mig_precopy_info(struct mig *m, uint64_t *initial, uint64_t *dirty,
                     struct vg_error *err);
/* VFIO_DEVICE_FEATURE_MIG_DATA_SIZE: estimated stream bytes stop-copy
 * would send if it started now (in STOP_COPY: those not read yet); never
 * 0.  Outside STOP_COPY the value is kept as stopcopy_estimate_bytes. */
uint64_t mig_stopcopy_size(struct mig *m);

/* Threads that hash pages and write large incoming records. */
unsigned mig_threads(const struct mig *m);

void mig_get_stats(const struct mig *m, struct mig_stats *st);
/* Write the stats JSON into @buf; returns its length or -ENOSPC. */
int mig_stats_json(const struct mig *m, char *buf, size_t size,
                   struct vg_error *err);
/* The client started (@on) or stopped DMA logging: the stats say so,
 * and the stats file is rewritten. */
void mig_note_dma_logging(struct mig *m, bool on);
/* A DMA log report was answered; @idle: of a range without a writable
 * accessible mapping, where the device cannot have written. */
void mig_note_dma_log_report(struct mig *m, bool idle);
/* The client got the VRAM memfd to map BAR2: the guest CPU may write
 * VRAM unseen from now on (hybrid tracking then hashes every page,
 * unless the client logs those writes). */
void mig_note_bar2_shared(struct mig *m);
/* The client negotiated (@on) REGION_DIRTY_LOG: in pre-copy it sends the
 * log of the guest's writes to BAR2 before every PRECOPY_INFO and before
 * STOP_COPY, so hybrid tracking needs not hash the mapping. */
void mig_note_bar2_logged(struct mig *m, bool on);
/* @bytes of migration data moved through the client's shared memory
 * area (MIG_DATA_READ_SHM, MIG_DATA_WRITE_SHM), not the socket. */
void mig_note_shm_bytes(struct mig *m, uint64_t bytes);
/* REGION_DIRTY_LOG: bit i of @bitmap (@nbits bits) means the guest wrote
 * VRAM [@off + i * @gran, + @gran).  -EINVAL outside PRE_COPY and
 * PRE_COPY_P2P, -ERANGE
 * beyond VRAM (checked before anything is marked). */
int mig_region_dirty_log(struct mig *m, uint64_t off, const uint64_t *bitmap,
                         uint64_t nbits, uint64_t gran, struct vg_error *err);
/* Run the command processor for @budget bytes unless auto-converge
 * holds it back now; mig_gpu_wait_ms() says for how long (0: not).  These
 * two may run on a thread of the device's own, beside the module's other
 * calls (serialised among themselves): the engine writes are logged, and
 * the module's next call applies them (mig-wlog.h). */
void mig_gpu_step(struct mig *m, uint64_t budget);
int mig_gpu_wait_ms(struct mig *m);

/*
 * Work deferred until the reply to the last message is out: the source's
 * checksums after STOP_COPY -> STOP (VRAM is unchanged until the device
 * runs again), the statistics file after a state change, and a
 * destination's checksums and freeing of its loading session (from the
 * hashes and device state it kept at RESUMING -> STOP).  The file and the
 * destination's work wait until no request has been served for a
 * moment, or until the oldest unwritten change is old enough, so that
 * the state changes of a switchover (every device's RUNNING_P2P and
 * RUNNING) do not wait on them inside the downtime (errors are written
 * at once).  Call it with @served after serving a request,
 * and without whenever the server wakes; mig_idle_wait_ms() says when it
 * wants the next call without a request (-1: no need).
 */
void mig_idle(struct mig *m, bool served);
int mig_idle_wait_ms(const struct mig *m);

/*
 * Post-copy (mig-postcopy.c; docs/postcopy.md).  A source that is told
 * the coming stop-copy is a post-copy switchover (VFIO_USER_MIG_POSTCOPY:
 * mig_postcopy_prepare, in PRE_COPY or PRE_COPY_P2P) sends the device
 * state and a POSTCOPY record in place of the pages still dirty, and
 * serves those from a page server; once a destination has fetched any,
 * the device refuses to run here again until it has them all.  A
 * destination whose stream has a POSTCOPY record fetches the pages while
 * the VM runs: the client's userfaultfd (mig_note_client_uffd) serves
 * the guest's accesses through its mappings of VRAM, an engine command
 * waits for the pages it reads or writes (vgpu_set_vram_gate), trapped
 * accesses wait for theirs (mig_vram_wait), and the device cannot leave
 * RUNNING for another migration until every page is in.
 */
bool mig_postcopy_capable(const struct mig *m);
int mig_postcopy_prepare(struct mig *m, struct vg_error *err);
/* The client's mapping of VRAM [@vram_off, +@size) at @vaddr. */
struct mig_client_area {
    uint64_t vram_off;
    uint64_t size;
    uint64_t vaddr;
};
/* The client's userfaultfd @fd (taken over) over its mappings @areas. */
void mig_note_client_uffd(struct mig *m, int fd,
                          const struct mig_client_area *areas, unsigned n);
/* The client is gone: its userfaultfd is closed. */
void mig_client_gone(struct mig *m);
/* Wait until VRAM [@off, +@len) is here (post-copy destination). */
int mig_vram_wait(struct mig *m, uint64_t off, uint64_t len,
                  struct vg_error *err);
/*
 * Restore on demand (docs/restore.md).  In RESUMING the stream may come
 * as extents of a save file (mig_write_file; the first brings the file).
 * A version 2 stream is scanned, not read: once it is whole the VM runs
 * and its pages load in the background and on first touch, as in a
 * post-copy, from the file.
 */
bool mig_restore_capable(const struct mig *m);
int mig_write_file(struct mig *m, int fd, uint64_t off, uint64_t len,
                   struct vg_error *err);
/* Notice the end of a post-copy (statistics, checksums, stats file):
 * returns the ms until it should be called again, -1 if none runs. */
int mig_postcopy_poll(struct mig *m);

/* Rewrite the stats file now (no-op without one). */
int mig_stats_flush(struct mig *m, struct vg_error *err);

#endif
