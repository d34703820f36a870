#include "pause.h"

#include <errno.h>
#include <stdlib.h>

int vg_pause_measure(const struct vg_pulse *src, size_t nsrc,
                     const struct vg_pulse *dst, size_t ndst, int64_t stop_us,
                     int64_t resume_us, struct vg_pause *out,
                     struct vg_error *err)
{
    const struct vg_pulse *s = nsrc ? &src[nsrc - 1] : NULL;
    const struct vg_pulse *d = ndst ? &dst[0] : NULL;

    if (resume_us < stop_us) {
        return vg_error_set(err, EINVAL,
                            "RESUME (%lld us) is before STOP (%lld us)",
                            (long long)resume_us, (long long)stop_us);
    }
    if (!s || !d) {
        return vg_error_set(err, EINVAL, "no pulse on the %s",
                            !s ? "source" : "destination");
    }
    if (d->seq <= s->seq) {
        return vg_error_set(err, EINVAL,
                            "the destination's first pulse (seq %lld) does "
                            "not follow the source's last (seq %lld)",
                            (long long)d->seq, (long long)s->seq);
    }
    *out = (struct vg_pause){
        .felt_us = d->host_us - s->host_us,
        .before_stop_us = stop_us - s->host_us,
        .stopped_us = resume_us - stop_us,
        .after_resume_us = d->host_us - resume_us,
        .guest_gap_us = d->gap_us,
        .lost = d->seq - s->seq - 1,
    };
    return 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return x < y ? -1 : x > y;
}

int64_t vg_percentile(int64_t *v, size_t n, unsigned pct)
{
    size_t rank;

    if (n == 0) {
        return 0;
    }
    qsort(v, n, sizeof(*v), cmp_i64);
    pct = pct > 100 ? 100 : pct;
    /* Nearest rank: the smallest value with at least pct % at or below. */
    rank = ((size_t)pct * n + 99) / 100;
    return v[rank ? rank - 1 : 0];
}
