/*
 * pulse.h -- the guest's fine-grained sign of life.
 *
 * A thread of its own prints "vgpu-guest: pulse seq=N gap_us=G" every
 * period on standard output, whatever the workload does, so that an
 * observer on the host can time a pause to a few milliseconds: the
 * pause the guest felt at a migration's switchover is the gap between
 * the source's last pulse and the destination's first as they arrive.
 * gap_us is the guest's own time since the previous pulse: the guest's
 * clock stands still while the VM is stopped, so across a switchover it
 * is the part of the pause where the VM was running but the pulse thread
 * made no progress.
 */
#ifndef VGG_PULSE_H
#define VGG_PULSE_H

#include <stdint.h>

struct vgg_pulse_stats {
    uint64_t count;      /* pulses printed */
    uint64_t max_gap_us; /* longest guest time between two */
};

/* Start the pulse thread with period @period_ms (> 0); 0 or -errno. */
int vgg_pulse_start(unsigned period_ms);
/* What it has done so far (zero if it was never started). */
void vgg_pulse_stats(struct vgg_pulse_stats *st);

#endif
