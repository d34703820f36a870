/*
 * vfu-msg.h -- pure parsing, validation and encoding of vfio-user messages.
 *
 * vfu_hdr_check() validates a request header against the message size
 * limit.  Each vfu_parse_*() takes a request payload (the bytes after the
 * header) and its length, checks every field against the device's limits
 * (struct vfu_limits) and fills a host struct; on failure it returns
 * -errno and says what was wrong in @err.  Encoders build reply payloads in
 * a caller buffer and never write past its size.  No I/O, no device state.
 */
#ifndef VFU_MSG_H
#define VFU_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "vfu-caps.h"
#include "vfu-proto.h"

/* What a request may refer to; filled by the server from the device. */
struct vfu_limits {
    uint32_t max_msg_size; /* whole message, header included */
    uint32_t max_xfer;     /* REGION_READ/WRITE count */
    uint32_t num_regions;
    const uint64_t *region_size; /* [num_regions] */
    uint32_t num_irqs;
    const uint32_t *irq_count; /* [num_irqs] */
    uint64_t dma_pgsize;       /* DMA map alignment, power of two */
};

/* Name of @cmd for messages ("REGION_READ"), "unknown" if not a command. */
const char *vfu_cmd_name(uint16_t cmd);

/* A request header: size in [16, max_msg_size], type request, no unknown or
 * reply-only flags. */
int vfu_hdr_check(const struct vfu_hdr *hdr, const struct vfu_limits *lim,
                  struct vg_error *err);

/* Fill @reply as the reply header to @req with @payload_len bytes after it;
 * an error reply when @errnum != 0 (then the payload must be empty). */
void vfu_hdr_reply(const struct vfu_hdr *req, uint32_t payload_len, int errnum,
                   struct vfu_hdr *reply);

struct vfu_version_req {
    uint16_t major;
    uint16_t minor;
    struct vfu_caps caps;
};

int vfu_parse_version(const void *p, size_t len, struct vfu_version_req *out,
                      struct vg_error *err);
int vfu_parse_dma_map(const void *p, size_t len, const struct vfu_limits *lim,
                      struct vfu_dma_map *out, struct vg_error *err);
int vfu_parse_dma_unmap(const void *p, size_t len, const struct vfu_limits *lim,
                        struct vfu_dma_unmap *out, struct vg_error *err);
int vfu_parse_device_info(const void *p, size_t len,
                          struct vfu_device_info *out, struct vg_error *err);
int vfu_parse_region_info(const void *p, size_t len,
                          const struct vfu_limits *lim,
                          struct vfu_region_info *out, struct vg_error *err);
int vfu_parse_irq_info(const void *p, size_t len, const struct vfu_limits *lim,
                       struct vfu_irq_info *out, struct vg_error *err);
/* *@bools points into @p at the booleans of VFIO_IRQ_SET_DATA_BOOL, else
 * NULL.  @nfds: file descriptors that came with the message. */
int vfu_parse_irq_set(const void *p, size_t len, const struct vfu_limits *lim,
                      unsigned nfds, struct vfu_irq_set *out,
                      const uint8_t **bools, struct vg_error *err);
/* REGION_READ (@write false) or REGION_WRITE: the range lies inside the
 * region and count <= max_xfer; *@data points at the write data. */
int vfu_parse_region_rw(const void *p, size_t len, const struct vfu_limits *lim,
                        bool write, struct vfu_region_rw *out,
                        const uint8_t **data, struct vg_error *err);

/* One mmap-able area of a region for the sparse-mmap capability. */
struct vfu_area {
    uint64_t offset;
    uint64_t size;
};

/*
 * Region info reply payload into @buf (@size bytes).  @info has flags,
 * index, size and offset set; with @nr_areas > 0 a sparse-mmap capability
 * follows it.  If the client's @argsz is too small for it the capability is
 * left out and argsz tells the size needed.  Returns the payload length.
 */
int vfu_encode_region_info(const struct vfu_region_info *info,
                           const struct vfu_area *areas, uint32_t nr_areas,
                           uint32_t argsz, void *buf, size_t size,
                           struct vg_error *err);

#endif
