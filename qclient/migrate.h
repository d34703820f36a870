/*
 * migrate.h -- drive QEMU live migration over QMP, and read the
 * statistics file of vgpu-server (--stats-file).
 *
 * The destination QEMU is started with "-incoming defer" (vg_qemu_opts
 * .incoming); vg_mig_incoming() then listens on a TCP port of loopback that
 * QEMU picks itself and returns the URI for the source's "migrate".  A
 * migration is watched with vg_mig_poll(), which reads query-migrate at a
 * fixed interval, hands every sample to a callback (progress lines, a
 * workload that keeps submitting, a fault to inject at the right moment)
 * and stops at a final state or at its deadline: every wait is bounded.
 */
#ifndef VG_QCLIENT_MIGRATE_H
#define VG_QCLIENT_MIGRATE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "qmp.h"

#define VG_MIG_POLL_INTERVAL_MS 20
#define VG_MIG_STATUS_MAX       32
#define VG_MIG_TEXT_MAX         512

/* One sample of query-migrate.  Integers are -1 when QEMU left them out. */
struct vg_mig_info {
    char status[VG_MIG_STATUS_MAX]; /* "" when no migration was started */
    int64_t total_time_ms;
    int64_t downtime_ms; /* only once completed */
    int64_t expected_downtime_ms;
    int64_t setup_time_ms;
    int64_t ram_transferred; /* bytes */
    int64_t ram_total;
    int64_t ram_remaining;
    int64_t ram_dirty_sync_count; /* bitmap syncs: 2 after the first pass */
    int64_t ram_mbps;
    bool has_vfio;
    int64_t vfio_transferred;              /* bytes sent by VFIO devices */
    char error_desc[VG_MIG_TEXT_MAX];      /* "" if none */
    char blocked_reasons[VG_MIG_TEXT_MAX]; /* "; "-joined, "" if none */
};

/* Whether @status ends a migration: completed, failed or cancelled. */
bool vg_mig_status_final(const char *status);

/* Set migration capability @cap ("return-path", "switchover-ack", ...). */
int vg_mig_set_capability(struct vg_qmp *qmp, const char *cap, bool on,
                          struct vg_error *err);
/* Set integer migration parameter @param ("downtime-limit" in ms,
 * "max-bandwidth" in bytes per second, ...). */
int vg_mig_set_parameter(struct vg_qmp *qmp, const char *param, int64_t value,
                         struct vg_error *err);

/* Migration channels: @channels > 1 turns QEMU's multifd capability on
 * with parameter multifd-channels @channels; 1 turns multifd off (the
 * one main channel).  Both sides need the same, before
 * vg_mig_incoming() and vg_mig_start(). */
int vg_mig_set_channels(struct vg_qmp *qmp, unsigned channels,
                        struct vg_error *err);

/* On a destination started with -incoming defer: listen on 127.0.0.1 at a
 * port QEMU picks, and return "tcp:127.0.0.1:PORT" in *@uri (g_free()). */
int vg_mig_incoming(struct vg_qmp *dst, char **uri, struct vg_error *err);

/* As vg_mig_incoming(), listening on address @host (e.g. "10.0.0.2" in
 * a network namespace the destination QEMU runs in) instead of
 * 127.0.0.1.  (Added for the soak and fault tests.) */
int vg_mig_incoming_on(struct vg_qmp *dst, const char *host, char **uri,
                       struct vg_error *err);

/* On a destination whose post-copy paused (postcopy-paused): listen again
 * with QMP migrate-recover on address @host at a port QEMU picks, and
 * return "tcp:HOST:PORT" in *@uri (g_free()) for the source's "migrate"
 * with "resume": true. */
int vg_mig_recover_on(struct vg_qmp *dst, const char *host, char **uri,
                      struct vg_error *err);

/* Start migrating to @uri with QMP "migrate". */
int vg_mig_start(struct vg_qmp *src, const char *uri, struct vg_error *err);
/* The same with HMP "migrate -d URI" through human-monitor-command; any
 * output of the command is an error. */
int vg_mig_start_hmp(struct vg_qmp *src, const char *uri, struct vg_error *err);
/* QMP migrate_cancel. */
int vg_mig_cancel(struct vg_qmp *src, struct vg_error *err);

/* One query-migrate sample into @info. */
int vg_mig_query(struct vg_qmp *qmp, struct vg_mig_info *info,
                 struct vg_error *err);

/* Called with every sample: < 0 aborts the wait with that error (the
 * callback sets @err), > 0 ends it early, 0 goes on. */
typedef int (*vg_mig_poll_fn)(const struct vg_mig_info *info, void *opaque,
                              struct vg_error *err);

/* Sample query-migrate every VG_MIG_POLL_INTERVAL_MS until the status is
 * final or @fn (may be NULL) returns > 0; -ETIMEDOUT after @timeout_ms,
 * naming the last status.  The last sample stays in @info. */
int vg_mig_poll(struct vg_qmp *qmp, int timeout_ms, vg_mig_poll_fn fn,
                void *opaque, struct vg_mig_info *info, struct vg_error *err);
/* As vg_mig_poll(), then anything but "completed" is an error (-EIO)
 * carrying QEMU's error-desc. */
int vg_mig_wait_completed(struct vg_qmp *qmp, int timeout_ms, vg_mig_poll_fn fn,
                          void *opaque, struct vg_mig_info *info,
                          struct vg_error *err);

/* The run state of the VM (query-status "status": "running",
 * "postmigrate", "inmigrate", "paused", ...), into @buf of @len bytes. */
int vg_mig_runstate(struct vg_qmp *qmp, char *buf, size_t len,
                    struct vg_error *err);
/* Wait up to @timeout_ms for run state @want. */
int vg_mig_wait_runstate(struct vg_qmp *qmp, const char *want, int timeout_ms,
                         struct vg_error *err);

/* vgpu-server's statistics file (--stats-file), as far as known fields
 * go; every other member stays reachable through vg_stats_int() and
 * vg_stats_str().  Checksums are kept as text (hex strings or decimal
 * numbers, as the file has them) and compared as text. */
struct vg_stats {
    void *root; /* JsonNode of the whole object */
    char state[VG_MIG_STATUS_MAX];
    int64_t bytes_sent;             /* -1 if absent */
    int64_t bytes_received;         /* -1 if absent */
    double device_stopcopy_ms;      /* < 0 if absent */
    char vram_checksum[64];         /* "" if absent or null */
    char device_state_checksum[64]; /* "" if absent or null */
    char last_error[VG_MIG_TEXT_MAX];
};

/* Parse the file at @path into @st (vg_stats_clear() it afterwards). */
int vg_stats_read(const char *path, struct vg_stats *st, struct vg_error *err);
void vg_stats_clear(struct vg_stats *st);
/* Integer member @name (a number); -ENOENT if absent. */
int vg_stats_int(const struct vg_stats *st, const char *name, int64_t *val,
                 struct vg_error *err);
/* Member @name as text (strings as they are, numbers printed), g_free(). */
char *vg_stats_str(const struct vg_stats *st, const char *name);
/* Which stats the wait wants: return true when @st is it. */
typedef bool (*vg_stats_pred)(const struct vg_stats *st, void *opaque);
/* Re-read @path until @pred holds (a missing or half-written file is read
 * again), at most @timeout_ms; the matching stats stay in @st. */
int vg_stats_wait(const char *path, vg_stats_pred pred, void *opaque,
                  int timeout_ms, struct vg_stats *st, struct vg_error *err);
/* Wait for state @state (compared without case). */
int vg_stats_wait_state(const char *path, const char *state, int timeout_ms,
                        struct vg_stats *st, struct vg_error *err);

#endif
