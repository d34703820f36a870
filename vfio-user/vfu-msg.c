#include "vfu-msg.h"

#include <errno.h>
#include <linux/vfio.h>
#include <string.h>

#define IRQ_SET_DATA_MASK                                                      \
    (VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_DATA_BOOL |                         \
     VFIO_IRQ_SET_DATA_EVENTFD)
#define IRQ_SET_ACTION_MASK                                                    \
    (VFIO_IRQ_SET_ACTION_MASK | VFIO_IRQ_SET_ACTION_UNMASK |                   \
     VFIO_IRQ_SET_ACTION_TRIGGER)

static const char *const cmd_names[] = {
    [VFU_CMD_VERSION] = "VERSION",
    [VFU_CMD_DMA_MAP] = "DMA_MAP",
    [VFU_CMD_DMA_UNMAP] = "DMA_UNMAP",
    [VFU_CMD_DEVICE_GET_INFO] = "DEVICE_GET_INFO",
    [VFU_CMD_DEVICE_GET_REGION_INFO] = "DEVICE_GET_REGION_INFO",
    [VFU_CMD_DEVICE_GET_REGION_IO_FDS] = "DEVICE_GET_REGION_IO_FDS",
    [VFU_CMD_DEVICE_GET_IRQ_INFO] = "DEVICE_GET_IRQ_INFO",
    [VFU_CMD_DEVICE_SET_IRQS] = "DEVICE_SET_IRQS",
    [VFU_CMD_REGION_READ] = "REGION_READ",
    [VFU_CMD_REGION_WRITE] = "REGION_WRITE",
    [VFU_CMD_DMA_READ] = "DMA_READ",
    [VFU_CMD_DMA_WRITE] = "DMA_WRITE",
    [VFU_CMD_DEVICE_RESET] = "DEVICE_RESET",
    [VFU_CMD_DIRTY_PAGES] = "DIRTY_PAGES",
    [VFU_CMD_REGION_WRITE_MULTI] = "REGION_WRITE_MULTI",
    [VFU_CMD_DEVICE_FEATURE] = "DEVICE_FEATURE",
    [VFU_CMD_MIG_DATA_READ] = "MIG_DATA_READ",
    [VFU_CMD_MIG_DATA_WRITE] = "MIG_DATA_WRITE",
    [VFU_CMD_MIG_GET_PRECOPY_INFO] = "MIG_GET_PRECOPY_INFO",
    [VFU_CMD_REGION_DIRTY_LOG] = "REGION_DIRTY_LOG",
    [VFU_CMD_MIG_DATA_SHM] = "MIG_DATA_SHM",
    [VFU_CMD_MIG_DATA_READ_SHM] = "MIG_DATA_READ_SHM",
    [VFU_CMD_MIG_DATA_WRITE_SHM] = "MIG_DATA_WRITE_SHM",
    [VFU_CMD_REGION_UFFD] = "REGION_UFFD",
    [VFU_CMD_MIG_POSTCOPY] = "MIG_POSTCOPY",
    [VFU_CMD_MIG_DATA_FILE] = "MIG_DATA_FILE",
    [VFU_CMD_DMA_UFFD] = "DMA_UFFD",
    [VFU_CMD_MIG_DATA_VRAM] = "MIG_DATA_VRAM",
};

const char *vfu_cmd_name(uint16_t cmd)
{
    if (cmd < sizeof(cmd_names) / sizeof(cmd_names[0]) && cmd_names[cmd]) {
        return cmd_names[cmd];
    }
    return "unknown";
}

int vfu_hdr_check(const struct vfu_hdr *hdr, const struct vfu_limits *lim,
                  struct vg_error *err)
{
    uint32_t type = hdr->flags & VFU_FLAG_TYPE_MASK;
    uint32_t known = VFU_FLAG_TYPE_MASK | VFU_FLAG_NO_REPLY | VFU_FLAG_ERROR;

    if (hdr->size < sizeof(*hdr)) {
        return vg_error_set(err, EINVAL,
                            "message size %u is smaller than the header (%zu)",
                            hdr->size, sizeof(*hdr));
    }
    if (hdr->size > lim->max_msg_size) {
        return vg_error_set(err, E2BIG, "message size %u exceeds the limit %u",
                            hdr->size, lim->max_msg_size);
    }
    if (type != VFU_FLAG_REQUEST) {
        return vg_error_set(err, EINVAL,
                            "message type %u is not a request (flags 0x%x)",
                            type, hdr->flags);
    }
    if (hdr->flags & ~known) {
        return vg_error_set(err, EINVAL, "unknown flags 0x%x",
                            hdr->flags & ~known);
    }
    if (hdr->flags & VFU_FLAG_ERROR) {
        return vg_error_set(err, EINVAL, "error flag set in a request");
    }
    return 0;
}

void vfu_hdr_reply(const struct vfu_hdr *req, uint32_t payload_len, int errnum,
                   struct vfu_hdr *reply)
{
    reply->id = req->id;
    reply->command = req->command;
    reply->size = (uint32_t)sizeof(*reply) + (errnum ? 0 : payload_len);
    reply->flags = VFU_FLAG_REPLY | (errnum ? VFU_FLAG_ERROR : 0);
    reply->error = (uint32_t)errnum;
}

/* The payload is exactly (@exact) or at least @want bytes. */
static int check_len(size_t len, size_t want, bool exact, struct vg_error *err)
{
    if (len < want || (exact && len != want)) {
        return vg_error_set(err, EINVAL, "payload is %zu bytes, expected %s%zu",
                            len, exact ? "" : "at least ", want);
    }
    return 0;
}

static int check_argsz(uint32_t argsz, size_t want, struct vg_error *err)
{
    if (argsz < want) {
        return vg_error_set(err, EINVAL, "argsz %u is smaller than %zu", argsz,
                            want);
    }
    return 0;
}

/* Copy a payload of exactly @size bytes that starts with its argsz field
 * into @out, checking both lengths. */
static int copy_fixed(const void *p, size_t len, void *out, size_t size,
                      struct vg_error *err)
{
    uint32_t argsz;
    int ret;

    ret = check_len(len, size, true, err);
    if (ret < 0) {
        return ret;
    }
    memcpy(out, p, size);
    memcpy(&argsz, out, sizeof(argsz));
    return check_argsz(argsz, size, err);
}

int vfu_parse_version(const void *p, size_t len, struct vfu_version_req *out,
                      struct vg_error *err)
{
    const char *json = (const char *)p + sizeof(struct vfu_version);
    struct vfu_version v;
    size_t jlen;
    int ret;

    ret = check_len(len, sizeof(v), false, err);
    if (ret < 0) {
        return ret;
    }
    memcpy(&v, p, sizeof(v));
    out->major = v.major;
    out->minor = v.minor;
    memset(&out->caps, 0, sizeof(out->caps));
    if (len == sizeof(v)) {
        return 0;
    }
    jlen = len - sizeof(v);
    if (json[jlen - 1] != '\0' || memchr(json, '\0', jlen - 1)) {
        return vg_error_set(err, EINVAL,
                            "version data is not one NUL-terminated string");
    }
    return vfu_caps_parse(json, jlen - 1, &out->caps, err);
}

/* [@iova, @iova + @size) is non-empty, page aligned and does not wrap. */
static int check_dma_range(uint64_t iova, uint64_t size,
                           const struct vfu_limits *lim, struct vg_error *err)
{
    if (size == 0) {
        return vg_error_set(err, EINVAL, "size is 0");
    }
    if ((iova | size) & (lim->dma_pgsize - 1)) {
        return vg_error_set(err, EINVAL,
                            "iova 0x%llx or size 0x%llx not aligned to 0x%llx",
                            (unsigned long long)iova, (unsigned long long)size,
                            (unsigned long long)lim->dma_pgsize);
    }
    if (iova + size < iova) {
        return vg_error_set(err, EINVAL, "iova 0x%llx + size 0x%llx overflows",
                            (unsigned long long)iova, (unsigned long long)size);
    }
    return 0;
}

int vfu_parse_dma_map(const void *p, size_t len, const struct vfu_limits *lim,
                      struct vfu_dma_map *out, struct vg_error *err)
{
    uint32_t known = VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE;
    int ret;

    ret = copy_fixed(p, len, out, sizeof(*out), err);
    if (ret < 0) {
        return ret;
    }
    if (out->flags & ~known) {
        return vg_error_set(err, EINVAL, "unknown DMA map flags 0x%x",
                            out->flags & ~known);
    }
    if (out->offset + out->size < out->offset) {
        return vg_error_set(err, EINVAL, "fd offset 0x%llx + size overflows",
                            (unsigned long long)out->offset);
    }
    return check_dma_range(out->iova, out->size, lim, err);
}

int vfu_parse_dma_unmap(const void *p, size_t len, const struct vfu_limits *lim,
                        struct vfu_dma_unmap *out, struct vg_error *err)
{
    int ret;

    ret = copy_fixed(p, len, out, sizeof(*out), err);
    if (ret < 0) {
        return ret;
    }
    if (out->flags == VFIO_DMA_UNMAP_FLAG_ALL) {
        if (out->iova || out->size) {
            return vg_error_set(err, EINVAL,
                                "unmap-all with non-zero iova or size");
        }
        return 0;
    }
    if (out->flags) {
        return vg_error_set(err, ENOTSUP, "unsupported DMA unmap flags 0x%x",
                            out->flags);
    }
    return check_dma_range(out->iova, out->size, lim, err);
}

int vfu_parse_device_info(const void *p, size_t len,
                          struct vfu_device_info *out, struct vg_error *err)
{
    return copy_fixed(p, len, out, sizeof(*out), err);
}

int vfu_parse_region_info(const void *p, size_t len,
                          const struct vfu_limits *lim,
                          struct vfu_region_info *out, struct vg_error *err)
{
    int ret;

    ret = copy_fixed(p, len, out, sizeof(*out), err);
    if (ret < 0) {
        return ret;
    }
    if (out->index >= lim->num_regions) {
        return vg_error_set(err, EINVAL,
                            "region %u does not exist (%u regions)", out->index,
                            lim->num_regions);
    }
    return 0;
}

int vfu_parse_irq_info(const void *p, size_t len, const struct vfu_limits *lim,
                       struct vfu_irq_info *out, struct vg_error *err)
{
    int ret;

    ret = copy_fixed(p, len, out, sizeof(*out), err);
    if (ret < 0) {
        return ret;
    }
    if (out->index >= lim->num_irqs) {
        return vg_error_set(err, EINVAL,
                            "IRQ index %u does not exist (%u indexes)",
                            out->index, lim->num_irqs);
    }
    return 0;
}

/* Exactly one bit of @mask is set in @flags. */
static bool one_of(uint32_t flags, uint32_t mask)
{
    uint32_t bits = flags & mask;

    return bits && !(bits & (bits - 1));
}

static int check_irq_set_flags(const struct vfu_irq_set *s,
                               struct vg_error *err)
{
    if (s->flags & ~(IRQ_SET_DATA_MASK | IRQ_SET_ACTION_MASK)) {
        return vg_error_set(err, EINVAL, "unknown IRQ set flags 0x%x",
                            s->flags);
    }
    if (!one_of(s->flags, IRQ_SET_DATA_MASK) ||
        !one_of(s->flags, IRQ_SET_ACTION_MASK)) {
        return vg_error_set(err, EINVAL,
                            "IRQ set flags 0x%x: need one data type and one "
                            "action",
                            s->flags);
    }
    return 0;
}

static int check_irq_set_range(const struct vfu_irq_set *s,
                               const struct vfu_limits *lim,
                               struct vg_error *err)
{
    uint32_t n;

    if (s->index >= lim->num_irqs) {
        return vg_error_set(err, EINVAL,
                            "IRQ index %u does not exist (%u indexes)",
                            s->index, lim->num_irqs);
    }
    n = lim->irq_count[s->index];
    if (s->count == 0) {
        if (s->start || !(s->flags & VFIO_IRQ_SET_DATA_NONE)) {
            return vg_error_set(err, EINVAL,
                                "count 0 needs start 0 and no data");
        }
        return 0;
    }
    if (s->start >= n || s->count > n - s->start) {
        return vg_error_set(err, EINVAL,
                            "IRQs %u+%u outside index %u (%u vectors)",
                            s->start, s->count, s->index, n);
    }
    return 0;
}

int vfu_parse_irq_set(const void *p, size_t len, const struct vfu_limits *lim,
                      unsigned nfds, struct vfu_irq_set *out,
                      const uint8_t **bools, struct vg_error *err)
{
    size_t want = sizeof(*out);
    int ret;

    ret = check_len(len, sizeof(*out), false, err);
    if (ret < 0) {
        return ret;
    }
    memcpy(out, p, sizeof(*out));
    ret = check_argsz(out->argsz, sizeof(*out), err);
    if (ret == 0) {
        ret = check_irq_set_flags(out, err);
    }
    if (ret == 0) {
        ret = check_irq_set_range(out, lim, err);
    }
    if (ret < 0) {
        return ret;
    }
    if (out->flags & VFIO_IRQ_SET_DATA_BOOL) {
        want += out->count;
    }
    ret = check_len(len, want, true, err);
    if (ret < 0) {
        return ret;
    }
    if (nfds &&
        !((out->flags & VFIO_IRQ_SET_DATA_EVENTFD) && nfds == out->count)) {
        return vg_error_set(err, EINVAL,
                            "%u file descriptors for %u IRQs (flags 0x%x)",
                            nfds, out->count, out->flags);
    }
    *bools = (out->flags & VFIO_IRQ_SET_DATA_BOOL)
                 ? (const uint8_t *)p + sizeof(*out)
                 : NULL;
    return 0;
}

int vfu_parse_region_rw(const void *p, size_t len, const struct vfu_limits *lim,
                        bool write, struct vfu_region_rw *out,
                        const uint8_t **data, struct vg_error *err)
{
    uint64_t rsize;
    int ret;

    ret = check_len(len, sizeof(*out), false, err);
    if (ret < 0) {
        return ret;
    }
    memcpy(out, p, sizeof(*out));
    if (out->region >= lim->num_regions) {
        return vg_error_set(err, EINVAL,
                            "region %u does not exist (%u regions)",
                            out->region, lim->num_regions);
    }
    if (out->count == 0 || out->count > lim->max_xfer) {
        return vg_error_set(err, out->count ? E2BIG : EINVAL,
                            "count %u not in [1, %u]", out->count,
                            lim->max_xfer);
    }
    ret = check_len(len, sizeof(*out) + (write ? out->count : 0), true, err);
    if (ret < 0) {
        return ret;
    }
    rsize = lim->region_size[out->region];
    if (out->count > rsize || out->offset > rsize - out->count) {
        return vg_error_set(err, EINVAL,
                            "region %u: access at 0x%llx+%u outside the region "
                            "(size 0x%llx)",
                            out->region, (unsigned long long)out->offset,
                            out->count, (unsigned long long)rsize);
    }
    *data = write ? (const uint8_t *)p + sizeof(*out) : NULL;
    return 0;
}

int vfu_encode_region_info(const struct vfu_region_info *info,
                           const struct vfu_area *areas, uint32_t nr_areas,
                           uint32_t argsz, void *buf, size_t size,
                           struct vg_error *err)
{
    size_t cap_len = nr_areas ? sizeof(struct vfu_sparse_mmap) +
                                    nr_areas * sizeof(struct vfu_area)
                              : 0;
    size_t full = sizeof(*info) + cap_len;
    struct vfu_region_info out = *info;
    struct vfu_sparse_mmap cap = {
        .header = {.id = VFIO_REGION_INFO_CAP_SPARSE_MMAP, .version = 1},
        .nr_areas = nr_areas,
    };
    bool with_cap = cap_len && argsz >= full;
    size_t len = with_cap ? full : sizeof(out);

    if (len > size) {
        return vg_error_set(err, ENOSPC, "region info needs %zu bytes", len);
    }
    out.argsz = (uint32_t)full;
    out.cap_offset = with_cap ? (uint32_t)sizeof(out) : 0;
    out.flags &= ~(uint32_t)VFIO_REGION_INFO_FLAG_CAPS;
    out.flags |= with_cap ? VFIO_REGION_INFO_FLAG_CAPS : 0;
    memcpy(buf, &out, sizeof(out));
    if (with_cap) {
        memcpy((char *)buf + sizeof(out), &cap, sizeof(cap));
        memcpy((char *)buf + sizeof(out) + sizeof(cap), areas,
               nr_areas * sizeof(*areas));
    }
    return (int)len;
}
