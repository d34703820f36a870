#include "bench-mig.h"

#include <inttypes.h>
#include <string.h>

#include "common/log.h"
#include "qclient/migrate.h"

/* switchover-ack (over the return path): QEMU switches over only after
 * the destination has loaded the devices' initial pre-copy data; and the
 * migration channels.  Both sides need the same. */
static int set_caps(struct vg_qmp *qmp, unsigned channels, struct vg_error *err)
{
    int ret = vg_mig_set_capability(qmp, "return-path", true, err);

    if (ret == 0) {
        ret = vg_mig_set_capability(qmp, "switchover-ack", true, err);
    }
    if (ret == 0) {
        ret = vg_mig_set_channels(qmp, channels, err);
    }
    return ret;
}

int bench_mig_prepare(struct vg_qmp *src, struct vg_qmp *dst, unsigned channels,
                      int64_t max_bw, int64_t downtime_ms, char **uri,
                      struct vg_error *err)
{
    int ret = set_caps(src, channels, err);

    if (ret < 0) {
        vg_error_prefix(err, "source");
        return ret;
    }
    ret = set_caps(dst, channels, err);
    if (ret == 0) {
        ret = vg_mig_incoming(dst, uri, err);
    }
    if (ret < 0) {
        vg_error_prefix(err, "destination");
        return ret;
    }
    ret = bench_mig_set_params(src, max_bw, downtime_ms, 0, err);
    if (ret < 0) {
        vg_error_prefix(err, "source");
    }
    return ret;
}

int bench_mig_set_params(struct vg_qmp *src, int64_t max_bw,
                         int64_t downtime_ms, int64_t sw_bw,
                         struct vg_error *err)
{
    int ret = vg_mig_set_parameter(src, "max-bandwidth", max_bw, err);

    if (ret == 0) {
        ret = vg_mig_set_parameter(src, "downtime-limit", downtime_ms, err);
    }
    if (ret == 0) {
        ret =
            vg_mig_set_parameter(src, "avail-switchover-bandwidth", sw_bw, err);
    }
    return ret;
}

void bench_rate_note(struct bench_rate *r, const char *status, int64_t bytes)
{
    gint64 now = g_get_monotonic_time();

    vg_trace("rate sample: %s, %" PRId64 " bytes, %.1f ms after the first",
             status, bytes, r->t0_us ? (now - r->t0_us) / 1e3 : 0.0);
    if (strcmp(status, "active") != 0 || bytes <= 0) {
        return;
    }
    if (!r->t0_us) {
        r->t0_us = now;
        r->bytes0 = bytes;
    }
    r->t1_us = now;
    r->bytes1 = bytes;
}

double bench_rate_bps(const struct bench_rate *r)
{
    if (r->t1_us <= r->t0_us) {
        return 0;
    }
    return (double)(r->bytes1 - r->bytes0) * 1e6 /
           (double)(r->t1_us - r->t0_us);
}
