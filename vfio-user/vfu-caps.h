/*
 * vfu-caps.h -- the capability JSON of the vfio-user VERSION message.
 *
 * vfu_caps_parse() validates the client's JSON (strict syntax, bounded
 * nesting) and records which known capabilities it proposed and their
 * values; unknown ones are skipped.  vfu_caps_format() writes our reply:
 * only capabilities the client proposed (the spec requires a subset), with
 * our limits.  Pure functions, no I/O.
 *
 * The "migration" object (QEMU proposes {"pgsize": N, "max_bitmap_size":
 * N}) is answered with the members the client proposed: pgsize (ours),
 * max_bitmap_size (the smaller of both), and the vgmig extension
 * "precopy_info": true (VFIO_USER_MIG_GET_PRECOPY_INFO is available) only
 * if the client proposed "precopy_info": true, and likewise the extension
 * "region_dirty_log" (the client logs guest writes to mmap'ed regions in
 * pre-copy and sends them with VFIO_USER_REGION_DIRTY_LOG) and "data_shm"
 * (migration data may move through a shared memory area: MIG_DATA_SHM,
 * MIG_DATA_READ_SHM, MIG_DATA_WRITE_SHM) and "postcopy" (REGION_UFFD and
 * MIG_POSTCOPY, docs/postcopy.md), "data_vram" (MIG_DATA_VRAM and reads
 * whose replies leave page data in VRAM), "postcopy-dma" (DMA_UFFD) and
 * "load-from-file" (MIG_DATA_FILE,
 * docs/restore.md).  An object
 * with none of these members is left out of the reply.
 */
#ifndef VFU_CAPS_H
#define VFU_CAPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

enum vfu_cap {
    VFU_CAP_MAX_MSG_FDS,
    VFU_CAP_MAX_XFER,
    VFU_CAP_PGSIZES,
    VFU_CAP_MAX_DMA_MAPS,
    VFU_CAP_COUNT,
};

/* The "migration" capability object. */
struct vfu_migr_caps {
    bool has_pgsize;
    bool has_max_bitmap;
    bool precopy_info;     /* "precopy_info": true */
    bool region_dirty_log; /* "region_dirty_log": true */
    bool data_shm;         /* "data_shm": true */
    bool data_vram;        /* "data_vram": true */
    bool postcopy;         /* "postcopy": true */
    bool load_from_file;   /* "load-from-file": true */
    bool postcopy_dma;     /* "postcopy-dma": true */
    uint64_t pgsize;
    uint64_t max_bitmap_size;
};

struct vfu_caps {
    bool present[VFU_CAP_COUNT];
    uint64_t value[VFU_CAP_COUNT];
    struct vfu_migr_caps migr;
};

/* Parse @len bytes of @json (no NUL needed) into @out. */
int vfu_caps_parse(const char *json, size_t len, struct vfu_caps *out,
                   struct vg_error *err);

/* Write the reply JSON (NUL-terminated) for capabilities present in
 * @client with the values of @ours; returns its length with the NUL, or
 * -ENOSPC if @size is too small. */
int vfu_caps_format(const struct vfu_caps *client, const struct vfu_caps *ours,
                    char *buf, size_t size, struct vg_error *err);

#endif
