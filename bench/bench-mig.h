/*
 * bench-mig.h -- what every migration of vgmig-bench shares, the vGPU
 * cells and the RAM anchors alike: the capabilities, parameters and
 * channels set on both QEMUs, and the rate at which a counter of
 * query-migrate grows while the migration is active.
 */
#ifndef VGMIG_BENCH_BENCH_MIG_H
#define VGMIG_BENCH_BENCH_MIG_H

#include <glib.h>
#include <stdint.h>

#include "common/error.h"
#include "qclient/qmp.h"

/* max-bandwidth, bytes per second, unless --max-bandwidth: above what
 * QEMU's RAM path reaches on the GPU machine (12-13 GiB/s over 4
 * channels), so the RAM anchor is QEMU's speed, not the cap's. */
#define BENCH_BANDWIDTH (64ll << 30)
#define BENCH_DT_MS     300 /* downtime-limit, unless --downtime-limit */

/* Set up a migration from @src to @dst (started with -incoming defer):
 * return-path, switchover-ack and @channels (vg_mig_set_channels()) on
 * both sides; max-bandwidth @max_bw (bytes per second), downtime-limit
 * @downtime_ms and avail-switchover-bandwidth 0 on the source; the
 * destination listening on loopback, its URI for vg_mig_start() in *@uri
 * (g_free()). */
int bench_mig_prepare(struct vg_qmp *src, struct vg_qmp *dst, unsigned channels,
                      int64_t max_bw, int64_t downtime_ms, char **uri,
                      struct vg_error *err);

/* The source's max-bandwidth @max_bw, downtime-limit @downtime_ms and
 * avail-switchover-bandwidth @sw_bw. */
int bench_mig_set_params(struct vg_qmp *src, int64_t max_bw,
                         int64_t downtime_ms, int64_t sw_bw,
                         struct vg_error *err);

/* Growth of a byte counter between the first "active" sample in which it
 * is above 0 and the last "active" sample. */
struct bench_rate {
    gint64 t0_us, t1_us;
    int64_t bytes0, bytes1;
};

/* One query-migrate sample: migration @status, the counter at @bytes. */
void bench_rate_note(struct bench_rate *r, const char *status, int64_t bytes);
/* Bytes per second; 0 before two samples at different times. */
double bench_rate_bps(const struct bench_rate *r);

#endif
