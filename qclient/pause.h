/*
 * pause.h -- the pause a guest felt at a migration's switchover.
 *
 * The guest prints a pulse every few milliseconds (vgpu-guest --pulse);
 * the host stamps each pulse line with its arrival time.  With QEMU's STOP
 * event on the source and RESUME event on the destination (QMP timestamps,
 * the same wall clock), vg_pause_measure() splits the pause between the
 * source's last pulse and the destination's first into the part before
 * the stop, QEMU's stop-to-resume, and the part after the resume.
 */
#ifndef VG_QCLIENT_PAUSE_H
#define VG_QCLIENT_PAUSE_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

/* One pulse line as it arrived. */
struct vg_pulse {
    int64_t seq;     /* the guest's counter, across migrations */
    int64_t gap_us;  /* guest time since the previous pulse */
    int64_t host_us; /* arrival, g_get_real_time() */
};

struct vg_pause {
    int64_t felt_us;         /* source's last pulse to destination's first */
    int64_t before_stop_us;  /* source's last pulse to STOP */
    int64_t stopped_us;      /* STOP to RESUME */
    int64_t after_resume_us; /* RESUME to the destination's first pulse */
    int64_t guest_gap_us;    /* the guest's own time across (stops count 0) */
    int64_t lost;            /* pulses printed but not seen in between */
};

/*
 * Measure from the pulses of the source (@src, @nsrc, in arrival order;
 * its VM stopped for good, so the last is the last before the stop), of
 * the destination (@dst, @ndst; its first came after the resume) and the
 * STOP / RESUME times.  A pulse printed just before the stop may arrive
 * just after it: before_stop_us is then slightly negative.  Fails
 * (-EINVAL, named in @err) without a pulse on either side, when RESUME is
 * before STOP or when the destination's first pulse does not follow the
 * source's last.
 */
int vg_pause_measure(const struct vg_pulse *src, size_t nsrc,
                     const struct vg_pulse *dst, size_t ndst, int64_t stop_us,
                     int64_t resume_us, struct vg_pause *out,
                     struct vg_error *err);

/* The @pct percentile (0 to 100, nearest rank) of @v; sorts @v.  0 if
 * @n is 0. */
int64_t vg_percentile(int64_t *v, size_t n, unsigned pct);

#endif
