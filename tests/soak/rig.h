/*
 * rig.h -- ping-pong live migration of a vGPU VM with faults injected in
 * a chosen phase, and the checks after every migration.
 *
 * A rig has two sides, A and B, each run by a vgpu-server and a QEMU
 * (-accel qtest) of its own, in its own network namespace when the
 * channel can be faulted (netfault.h).  The VM runs on one side with the
 * workload of model.h; rig_leg() starts fresh processes on the other
 * side (QEMU with -S and -incoming, like libvirt's destination),
 * migrates the VM there with QEMU's return path on, and injects one
 * fault in one phase:
 *
 *   setup     status "setup": right after "migrate" returns, while the
 *             link is held down so that it cannot connect yet (without
 *             namespaces: right after "migrate", racing its set-up); a
 *             dropped or slowed link is in place before "migrate"
 *   pre-copy  while the device streams pre-copy data (status "active";
 *             the migration is held there by a tiny downtime limit)
 *   stop-copy with the VM stopped and the source device in STOP_COPY
 *             (capability pause-before-switchover, status
 *             "pre-switchover"), before the stop-copy data is read
 *   resume    after the source completed, with the destination loaded
 *             but not yet continued
 *
 * Faults: migrate_cancel; SIGKILL of the destination QEMU, of the
 * destination vgpu-server or of the source vgpu-server; the link taken
 * down; the link slowed; a corrupted device stream (the source server
 * was started with vgpu-server --fault corrupt-stream:OFFSET, see
 * rig_plan_corrupt()).  Then the rig recovers as a management layer
 * would: a completed migration continues on the destination if it is
 * intact, else the source is continued; a failed or cancelled one must
 * leave the source running by itself.
 *
 * After every leg: the VM runs on exactly one side (query-status of
 * both); the other side is shut down; the model verifies on the running
 * side (all of VRAM and the DMA buffer, FENCE, no halt) and, after a
 * switchover, the servers' VRAM checksums agree; no process, socket
 * file, fd or memfd is left over (the children of this process, the
 * run directory, /proc/PID/fd of the survivors and of this process).
 * Expected outcomes are results (struct leg_result); an error return
 * means the rig itself could not go on.
 *
 * The VM may have several vGPUs (rig_opts.vgpus), each with a server, a
 * workload and a model of its own; the server faults (kill-dst-server,
 * kill-src-server, corrupt-stream) hit one of them (rig_opts.fault_vgpu)
 * while the others migrate normally, and every check covers every vGPU.
 */
#ifndef VGMIG_TESTS_SOAK_RIG_H
#define VGMIG_TESTS_SOAK_RIG_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "model.h"
#include "netfault.h"
#include "qclient/harness.h"
#include "qclient/migrate.h"
#include "qclient/vgpu-drv.h"

enum fault_kind {
    FK_NONE,
    FK_CANCEL,
    FK_KILL_DST_QEMU,
    FK_KILL_DST_SERVER,
    FK_KILL_SRC_SERVER,
    FK_DROP,
    FK_SLOW,
    FK_CORRUPT,
    FK_COUNT
};

/* PH_POSTCOPY: switched over in post-copy (postcopy-active), QEMU's RAM
 * and the vGPU's pages still coming from the source.  PH_RESTORE: the VM
 * was saved to a file and a destination restored it, its vGPU's pages
 * still coming from the file (a slowed server, docs/restore.md). */
enum mig_phase {
    PH_SETUP,
    PH_PRECOPY,
    PH_STOPCOPY,
    PH_RESUME,
    PH_POSTCOPY,
    PH_RESTORE,
    PH_COUNT
};

/* The most vGPUs of a rig's VM. */
#define RIG_MAX_VGPUS 4

const char *fault_name(enum fault_kind k);
const char *phase_name(enum mig_phase p); /* PH_COUNT: "none" */

struct rig_opts {
    const char *tag;     /* run directory vgmig-<tag>-XXXXXX */
    const char *vram;    /* --vram, e.g. "8M" (at least 4M) */
    const char *page;    /* --page-size, e.g. "64K" */
    unsigned ram_mib;    /* guest RAM */
    uint64_t seed;       /* the workload's randomness */
    bool netns;          /* put the sides in network namespaces if root */
    bool keep_logs;      /* keep the logs of clean legs too */
    const char *srv_log; /* server --log-level, NULL: "info" */
    int leg_timeout_ms;  /* a migration that takes longer is stuck */
    unsigned vgpus;      /* vGPUs of the VM (0: 1), each --vram */
    unsigned fault_vgpu; /* the vGPU whose server the faults hit */
};

struct rig_side {
    struct vg_server *srv[RIG_MAX_VGPUS]; /* one per vGPU */
    struct vg_qemu *qemu;
    char *stats[RIG_MAX_VGPUS];
    /* The files this side's processes write: QEMU's, then the servers'. */
    char *names[1 + RIG_MAX_VGPUS];
    bool srv_killed[RIG_MAX_VGPUS]; /* got SIGKILL: its socket is stale */
    bool corrupting;                /* rig_opts.fault_vgpu's server was started
                                       with --fault corrupt-stream */
    uint64_t corrupt_offset;        /* ... at this stream offset */
    /* At the last steady state. */
    struct vg_fd_census srv_fds[RIG_MAX_VGPUS], qemu_fds;
};

struct rig {
    struct rig_opts o;
    unsigned nvgpu; /* rig_opts.vgpus, at least 1 */
    uint64_t vram_size, page_size;
    char *dir;
    struct nf nf;
    struct rig_side side[2];
    int cur;             /* the side that runs the VM */
    unsigned started;    /* sides started, for file names */
    unsigned generation; /* VMs booted */
    struct vg_galloc ram;
    uint64_t ballast; /* guest RAM that post-copy legs dirty, 0: none */
    struct vg_vgpu gpu[RIG_MAX_VGPUS];
    struct model model[RIG_MAX_VGPUS];
    unsigned self_fds;    /* this process's fds at steady state */
    char *next_fault;     /* --fault for the next server started, or NULL */
    bool slow_next;       /* ...and postcopy-delay (a restore's reads) */
    uint64_t next_offset; /* its corrupt-stream offset */
    bool have_ref;        /* a migrated-in side was measured */
    /* ... with these fds */
    struct vg_fd_census ref_srv[RIG_MAX_VGPUS], ref_qemu;
};

struct leg_plan {
    enum fault_kind kind;
    enum mig_phase phase;
    enum model_mix mix;     /* workload while held in pre-copy */
    unsigned work_ms;       /* how long it is held there (at least) */
    unsigned inject_ms;     /* pre-copy: delay after data starts flowing */
    unsigned slow_kbit;     /* FK_SLOW: link rate */
    unsigned slow_delay_ms; /* FK_SLOW with netem: added delay */
    unsigned drop_ms;       /* FK_DROP: link up again after this; 0: stays
                               down until the connection aborts */
    uint64_t hold_bw;       /* bytes/s while held; 0: 32 MiB/s */
    bool postcopy; /* no fault: switch over in post-copy when released */
    bool via_file; /* no fault: saved to a file ("migrate file:") and
                      restored from it on the other side, VRAM on demand
                      (docs/restore.md) */
};

struct leg_result {
    bool skipped;
    char why[200];                  /* skipped: why; else a note */
    enum mig_phase phase_seen;      /* where the fault landed, PH_COUNT: none */
    char status[VG_MIG_STATUS_MAX]; /* the migration's final status */
    bool moved;                     /* the VM now runs on the other side */
    bool recovered;                 /* a fault, and the VM survived it */
    unsigned vgpus;                 /* the VM's vGPUs */
    bool source_continued;          /* the source needed "cont" */
    bool lost;                      /* the VM ran nowhere: a failure */
    bool stuck;                     /* the migration did not end in time */
    bool postcopy; /* it switched over in post-copy, every page came */
    bool restored; /* it went through a save file read on demand, every
                      page came and the file's digest matched */
    int64_t downtime_ms, total_ms, vfio_bytes, ram_bytes;
    int64_t stream_pre, stream_stop; /* source device stream, -1: unknown */
    bool corruption;
    char corruption_detail[VG_ERROR_MAX];
    unsigned leaks;
    char leak_detail[VG_ERROR_MAX];
};

/* Whether fault @k can happen in phase @p on this rig; *@why (if not)
 * says why not. */
bool rig_fault_applies(const struct rig *r, enum fault_kind k, enum mig_phase p,
                       const char **why);

/* Run directory, namespaces, and the first VM booted on side A. */
int rig_open(struct rig *r, const struct rig_opts *o, struct vg_error *err);
/* Stop everything, remove namespaces; the run directory is removed
 * unless @keep_dir. */
void rig_close(struct rig *r, bool keep_dir);

/* The next server started (the next leg's destination, and so the source
 * of the leg after it) gets --fault corrupt-stream:@offset; every stream
 * it sends is corrupted there. */
void rig_plan_corrupt(struct rig *r, uint64_t offset);
/* Whether the VM runs on a server that corrupts every stream it sends
 * (only rig_opts.fault_vgpu's is started so). */
bool rig_source_corrupts(const struct rig *r);
/* Shut the VM down (after verifying it) and boot a fresh one, with a
 * new model seeded @seed, on the other side; with @vgpus (1 to
 * RIG_MAX_VGPUS, 0: as many as before) vGPUs, the faults then hitting the
 * last of them. */
int rig_reboot(struct rig *r, uint64_t seed, unsigned vgpus,
               struct vg_error *err);

/* One migration of the VM to the other side with the fault of @p. */
int rig_leg(struct rig *r, const struct leg_plan *p, struct leg_result *res,
            struct vg_error *err);

/* The source's device stream sizes of the last migration, of the vGPU
 * the faults hit: pre-copy and stop-copy bytes (from its stats file), for
 * corruption offsets. */
int rig_last_stream(struct rig *r, int side, int64_t *pre, int64_t *stop,
                    struct vg_error *err);

#endif
