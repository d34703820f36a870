/*
 * vfu-caps.h -- the capability JSON of the vfio-user VERSION message.
 *
 * vfu_caps_parse() validates the client's JSON (strict syntax, bounded
 * nesting) and records which known capabilities it proposed and their
 * values; unknown ones are skipped.  vfu_caps_format() writes our reply:
 * only capabilities the client proposed (the spec requires a subset), with
 * our limits.  Pure functions, no I/O.
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

struct vfu_caps {
    bool present[VFU_CAP_COUNT];
    uint64_t value[VFU_CAP_COUNT];
};

/* Name of @cap in the JSON ("max_msg_fds", ...). */
const char *vfu_cap_name(enum vfu_cap cap);

/* Parse @len bytes of @json (no NUL needed) into @out. */
int vfu_caps_parse(const char *json, size_t len, struct vfu_caps *out,
                   struct vg_error *err);

/* Write the reply JSON (NUL-terminated) for capabilities present in
 * @client with the values of @ours; returns its length with the NUL, or
 * -ENOSPC if @size is too small. */
int vfu_caps_format(const struct vfu_caps *client, const struct vfu_caps *ours,
                    char *buf, size_t size, struct vg_error *err);

#endif
