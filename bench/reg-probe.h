/*
 * reg-probe.h -- how long the guest waits for its vGPU's registers while
 * a migration moves the device's data.
 *
 * A probe times reads of one device register through qtest (the path of
 * a guest's MMIO read: QEMU, then the vfio-user socket, then the server,
 * which serves it between the migration's data requests) and gives
 * their percentiles; or the round trip of a FENCE command, submitted and
 * seen complete in the FENCE register.  vgmig-bench takes one set before
 * the migration and one while it is active.
 */
#ifndef VGMIG_BENCH_REG_PROBE_H
#define VGMIG_BENCH_REG_PROBE_H

#include <stdint.h>

#include "common/error.h"
#include "qclient/vgpu-drv.h"

struct reg_probe {
    int64_t *us;  /* the reads' times, microseconds */
    unsigned n;   /* taken */
    unsigned cap; /* room for; reads beyond it are not taken */
};

/* Room for @cap reads. */
void reg_probe_init(struct reg_probe *p, unsigned cap);
void reg_probe_free(struct reg_probe *p);
/* Read register @reg of @gpu @count times, timing each one (unless the
 * probe is full). */
int reg_probe_read(struct reg_probe *p, struct vg_vgpu *gpu, uint32_t reg,
                   unsigned count, struct vg_error *err);
/* Submit a FENCE of @value to @gpu and time until its FENCE_LO register
 * shows it: a command's round trip, as the guest's driver waits for one
 * (the device must have nothing else queued).  0: timed; 1: not done
 * after @timeout_ms (a device stopped for the switchover), not timed. */
int reg_probe_fence(struct reg_probe *p, struct vg_vgpu *gpu, uint32_t value,
                    int timeout_ms, struct vg_error *err);
/* The @pct-th percentile of the times taken, microseconds; -1: none. */
double reg_probe_pct(const struct reg_probe *p, unsigned pct);

#endif
