/*
 * ram-anchor.h -- the RAM anchor of vgmig-bench: QEMU's own RAM
 * migration, to compare the vGPU's data path with.
 *
 * Two QEMUs under -accel qtest without a vGPU, guest RAM of the anchor's
 * size; the bench fills every 8 bytes of the source's RAM with a non-zero
 * value through the memfd that backs it (vg_qemu_map_ram(), before the
 * migration, so every page is sent in full), migrates with the capabilities,
 * parameters and channels of the vGPU cells (bench_mig_prepare()) and
 * checks that the destination's RAM, read back the same way, has the
 * source's XXH3-64 checksum.
 */
#ifndef VGMIG_BENCH_RAM_ANCHOR_H
#define VGMIG_BENCH_RAM_ANCHOR_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "qclient/migrate.h"

struct ram_anchor {
    uint64_t size;         /* guest RAM, every page of it non-zero */
    unsigned channels;     /* bench_mig_prepare() */
    int64_t max_bandwidth; /* bench_mig_prepare() */
    int64_t dt_limit_ms;   /* bench_mig_prepare() */
    bool prealloc;         /* both QEMUs allocate guest RAM at start */
    int64_t total_ms, downtime_ms, setup_ms; /* QEMU's query-migrate */
    int64_t ram_bytes; /* ram.transferred at the end: the whole stream */
    double active_bps; /* growth of ram.transferred while active */
    uint64_t checksum; /* XXH3-64 of the source's RAM before migrating */
    bool verified;     /* the destination's RAM has that checksum */
    char error[VG_MIG_TEXT_MAX];
};

/* Migrate a VM of @a->size bytes of non-zero RAM over @a->channels and
 * fill in the rest of @a.  The children's logs go to a directory under
 * $TMPDIR, removed unless the anchor failed or @keep. */
int ram_anchor_run(struct ram_anchor *a, bool keep, struct vg_error *err);

/* The anchor's throughput: RAM bytes over the migration's total time
 * (0 unless verified). */
double ram_anchor_bps(const struct ram_anchor *a);

#endif
