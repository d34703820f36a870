/*
 * vfu-mig-msg.c -- parsing of the vfio-user migration messages.
 */
#include "vfu-mig-msg.h"

#include <errno.h>
#include <inttypes.h>
#include <linux/vfio.h>
#include <string.h>

#define FEATURE_OPS                                                            \
    (VFIO_DEVICE_FEATURE_GET | VFIO_DEVICE_FEATURE_SET |                       \
     VFIO_DEVICE_FEATURE_PROBE)

int vfu_parse_feature(const void *p, size_t len, struct vfu_feature_req *out,
                      struct vg_error *err)
{
    struct vfu_device_feature h;

    if (len < sizeof(h)) {
        return vg_error_set(err, EINVAL, "payload is %zu bytes, expected %zu",
                            len, sizeof(h));
    }
    memcpy(&h, p, sizeof(h));
    if (h.argsz < sizeof(h) ||
        (h.flags & ~(FEATURE_OPS | VFIO_DEVICE_FEATURE_MASK)) ||
        !(h.flags & FEATURE_OPS)) {
        return vg_error_set(err, EINVAL, "argsz %u flags %#x invalid", h.argsz,
                            h.flags);
    }
    *out = (struct vfu_feature_req){
        .argsz = h.argsz,
        .index = h.flags & VFIO_DEVICE_FEATURE_MASK,
        .get = h.flags & VFIO_DEVICE_FEATURE_GET,
        .set = h.flags & VFIO_DEVICE_FEATURE_SET,
        .probe = h.flags & VFIO_DEVICE_FEATURE_PROBE,
        .data = (const uint8_t *)p + sizeof(h),
        .data_len = len - sizeof(h),
    };
    if (out->get && out->set && !out->probe) {
        return vg_error_set(err, EINVAL, "GET and SET together");
    }
    return 0;
}

int vfu_feature_check_argsz(const struct vfu_feature_req *f, size_t data_out,
                            struct vg_error *err)
{
    if (f->argsz < sizeof(struct vfu_device_feature) + data_out) {
        return vg_error_set(err, EINVAL,
                            "argsz %u leaves no room for %zu bytes of data",
                            f->argsz, data_out);
    }
    return 0;
}

/* The feature data is exactly @want bytes. */
static int data_exact(const struct vfu_feature_req *f, size_t want,
                      struct vg_error *err)
{
    if (f->data_len != want) {
        return vg_error_set(err, EINVAL,
                            "feature %u data is %zu bytes, expected %zu",
                            f->index, f->data_len, want);
    }
    return 0;
}

int vfu_parse_mig_state(const struct vfu_feature_req *f, uint32_t *state,
                        struct vg_error *err)
{
    struct vfu_feature_mig_state s;
    int ret = data_exact(f, sizeof(s), err);

    if (ret == 0) {
        memcpy(&s, f->data, sizeof(s));
        *state = s.device_state;
    }
    return ret;
}

int vfu_parse_logging_start(const struct vfu_feature_req *f,
                            uint64_t *page_size,
                            struct vfu_dma_log_range *ranges, uint32_t *n,
                            struct vg_error *err)
{
    struct vfu_dma_logging_control c;
    int ret;

    if (f->data_len < sizeof(c)) {
        return data_exact(f, sizeof(c), err);
    }
    memcpy(&c, f->data, sizeof(c));
    if (c.num_ranges == 0 || c.num_ranges > VFU_DMA_LOG_MAX_RANGES) {
        return vg_error_set(err, EINVAL, "%u ranges, expected 1..%u",
                            c.num_ranges, VFU_DMA_LOG_MAX_RANGES);
    }
    ret = data_exact(f,
                     sizeof(c) + (size_t)c.num_ranges *
                                     sizeof(struct vfu_dma_logging_range),
                     err);
    if (ret < 0) {
        return ret;
    }
    for (uint32_t i = 0; i < c.num_ranges; i++) {
        struct vfu_dma_logging_range r;
        memcpy(&r, f->data + sizeof(c) + i * sizeof(r), sizeof(r));
        ranges[i] = (struct vfu_dma_log_range){r.iova, r.length};
    }
    *page_size = c.page_size;
    *n = c.num_ranges;
    return 0;
}

int vfu_parse_logging_report(const struct vfu_feature_req *f, size_t max_bitmap,
                             struct vfu_dma_logging_report *out,
                             size_t *bitmap_bytes, struct vg_error *err)
{
    uint64_t pages, words;
    int ret = data_exact(f, sizeof(*out), err);

    if (ret < 0) {
        return ret;
    }
    memcpy(out, f->data, sizeof(*out));
    if (out->length == 0 || out->page_size == 0 ||
        (out->page_size & (out->page_size - 1))) {
        return vg_error_set(err, EINVAL,
                            "report length %#llx page size %#llx invalid",
                            (unsigned long long)out->length,
                            (unsigned long long)out->page_size);
    }
    pages = out->length / out->page_size + !!(out->length % out->page_size);
    words = pages / 64 + !!(pages % 64);
    if (words > max_bitmap / 8) {
        return vg_error_set(err, E2BIG,
                            "bitmap of %llu pages exceeds %zu bytes",
                            (unsigned long long)pages, max_bitmap);
    }
    *bitmap_bytes = (size_t)words * 8;
    return vfu_feature_check_argsz(f, sizeof(*out) + *bitmap_bytes, err);
}

int vfu_parse_mig_data_read(const void *p, size_t len, uint32_t max_xfer,
                            uint32_t *size, struct vg_error *err)
{
    struct vfu_mig_data d;

    if (len != sizeof(d)) {
        return vg_error_set(err, EINVAL, "payload is %zu bytes, expected %zu",
                            len, sizeof(d));
    }
    memcpy(&d, p, sizeof(d));
    if (d.size > max_xfer || d.argsz < sizeof(d) + (uint64_t)d.size) {
        return vg_error_set(err, EINVAL, "size %u (max %u) or argsz %u invalid",
                            d.size, max_xfer, d.argsz);
    }
    *size = d.size;
    return 0;
}

int vfu_parse_mig_data_write(const void *p, size_t len, uint32_t max_xfer,
                             const uint8_t **data, uint32_t *size,
                             struct vg_error *err)
{
    struct vfu_mig_data d;

    if (len < sizeof(d)) {
        return vg_error_set(err, EINVAL, "payload is %zu bytes, expected %zu",
                            len, sizeof(d));
    }
    memcpy(&d, p, sizeof(d));
    if (d.size > max_xfer || d.size != len - sizeof(d) || d.argsz < sizeof(d)) {
        return vg_error_set(err, EINVAL,
                            "size %u (max %u) with %zu data bytes, argsz %u",
                            d.size, max_xfer, len - sizeof(d), d.argsz);
    }
    *data = (const uint8_t *)p + sizeof(d);
    *size = d.size;
    return 0;
}

int vfu_parse_precopy_info(const void *p, size_t len, struct vg_error *err)
{
    uint32_t req[2];

    if (len != sizeof(req)) {
        return vg_error_set(err, EINVAL, "payload is %zu bytes, expected %zu",
                            len, sizeof(req));
    }
    memcpy(req, p, sizeof(req));
    if (req[0] < sizeof(struct vfu_precopy_info) || req[1] != 0) {
        return vg_error_set(err, EINVAL, "argsz %u flags %#x invalid", req[0],
                            req[1]);
    }
    return 0;
}

int vfu_parse_mig_postcopy(const void *p, size_t len, struct vg_error *err)
{
    struct vfu_mig_postcopy req;

    if (len != sizeof(req)) {
        return vg_error_set(err, EINVAL, "payload is %zu bytes, expected %zu",
                            len, sizeof(req));
    }
    memcpy(&req, p, sizeof(req));
    if (req.argsz != sizeof(req) || req.flags != 0) {
        return vg_error_set(err, EINVAL, "argsz %u flags %#x invalid",
                            req.argsz, req.flags);
    }
    return 0;
}

int vfu_parse_mig_data_file(const void *p, size_t len, uint32_t *flags,
                            struct vfu_file_extent *ext, uint32_t *n,
                            struct vg_error *err)
{
    struct vfu_mig_data_file h;
    const uint8_t *at = (const uint8_t *)p + sizeof(h);

    if (len < sizeof(h)) {
        return vg_error_set(err, EINVAL, "payload is %zu bytes, expected %zu+",
                            len, sizeof(h));
    }
    memcpy(&h, p, sizeof(h));
    if ((h.flags & ~VFU_MIG_DATA_FILE_FD) || h.reserved || h.count == 0 ||
        h.count > VFU_MIG_DATA_FILE_MAX ||
        len != sizeof(h) + (size_t)h.count * sizeof(*ext) || h.argsz != len) {
        return vg_error_set(err, EINVAL,
                            "argsz %u flags %#x reserved %#x extents %u for "
                            "%zu bytes invalid",
                            h.argsz, h.flags, h.reserved, h.count, len);
    }
    for (uint32_t i = 0; i < h.count; i++) {
        memcpy(&ext[i], at + i * sizeof(*ext), sizeof(*ext));
        if (ext[i].size == 0 || ext[i].offset + ext[i].size < ext[i].offset) {
            return vg_error_set(err, EINVAL,
                                "extent %u: %#" PRIx64 "+%#" PRIx64
                                " is empty or wraps",
                                i, ext[i].offset, ext[i].size);
        }
    }
    *flags = h.flags;
    *n = h.count;
    return 0;
}

static int uffd_area_check(const struct vfu_uffd_area *a, uint32_t i,
                           const uint64_t *region_size, uint32_t nregions,
                           struct vg_error *err)
{
    if (a->region >= nregions || a->reserved || a->size == 0 ||
        a->offset > region_size[a->region] ||
        a->size > region_size[a->region] - a->offset ||
        a->vaddr + a->size < a->vaddr) {
        return vg_error_set(err, EINVAL,
                            "area %u: region %u %#" PRIx64 "+%#" PRIx64
                            " at %#" PRIx64 " is not inside a region",
                            i, a->region, a->offset, a->size, a->vaddr);
    }
    return 0;
}

int vfu_parse_dma_uffd(const void *p, size_t len, struct vfu_dma_uffd *out,
                       struct vg_error *err)
{
    if (len != sizeof(*out)) {
        return vg_error_set(err, EINVAL, "payload is %zu bytes, expected %zu",
                            len, sizeof(*out));
    }
    memcpy(out, p, sizeof(*out));
    if (out->argsz != sizeof(*out) || out->count || out->reserved ||
        out->op < VFU_DMA_UFFD_ADVISE || out->op > VFU_DMA_UFFD_END) {
        return vg_error_set(err, EINVAL,
                            "argsz %u op %u count %u reserved %u invalid",
                            out->argsz, out->op, out->count, out->reserved);
    }
    return 0;
}

int vfu_parse_region_uffd(const void *p, size_t len,
                          const uint64_t *region_size, uint32_t nregions,
                          struct vfu_uffd_area *areas, uint32_t *n,
                          struct vg_error *err)
{
    struct vfu_region_uffd h;
    const uint8_t *at = (const uint8_t *)p + sizeof(h);

    if (len < sizeof(h)) {
        return vg_error_set(err, EINVAL, "payload is %zu bytes, expected %zu+",
                            len, sizeof(h));
    }
    memcpy(&h, p, sizeof(h));
    if (h.flags || h.reserved || h.nr_areas == 0 ||
        h.nr_areas > VFU_UFFD_MAX_AREAS ||
        len != sizeof(h) + (size_t)h.nr_areas * sizeof(*areas) ||
        h.argsz != len) {
        return vg_error_set(err, EINVAL,
                            "argsz %u flags %#x areas %u for %zu bytes invalid",
                            h.argsz, h.flags, h.nr_areas, len);
    }
    for (uint32_t i = 0; i < h.nr_areas; i++) {
        memcpy(&areas[i], at + i * sizeof(*areas), sizeof(*areas));
        if (uffd_area_check(&areas[i], i, region_size, nregions, err) < 0) {
            return -EINVAL;
        }
    }
    *n = h.nr_areas;
    return 0;
}

int vfu_parse_region_dirty_log(const void *p, size_t len, uint64_t region_size,
                               struct vfu_region_dirty_log *out,
                               const uint64_t **bitmap, struct vg_error *err)
{
    struct vfu_region_dirty_log d;
    uint64_t bits, words;

    if (len < sizeof(d)) {
        return vg_error_set(err, EINVAL, "payload is %zu bytes, below %zu", len,
                            sizeof(d));
    }
    memcpy(&d, p, sizeof(d));
    if (d.argsz != len || d.flags != 0) {
        return vg_error_set(err, EINVAL, "argsz %u (payload %zu) flags %#x",
                            d.argsz, len, d.flags);
    }
    if (d.pgsize < 512 || d.pgsize > (1u << 30) ||
        (d.pgsize & (d.pgsize - 1))) {
        return vg_error_set(err, EINVAL, "page size %u", d.pgsize);
    }
    if (d.size == 0 || d.offset % d.pgsize || d.size % d.pgsize ||
        d.offset > region_size || d.size > region_size - d.offset) {
        return vg_error_set(err, ERANGE,
                            "range %#" PRIx64 "+%#" PRIx64
                            " (page %u) outside the region's %#" PRIx64
                            " bytes or unaligned",
                            d.offset, d.size, d.pgsize, region_size);
    }
    bits = d.size / d.pgsize;
    words = (bits + 63) / 64;
    if (len - sizeof(d) != words * 8) {
        return vg_error_set(err, EINVAL,
                            "bitmap of %zu bytes for %" PRIu64
                            " pages (%" PRIu64 " expected)",
                            len - sizeof(d), bits, words * 8);
    }
    *out = d;
    *bitmap = (const uint64_t *)((const uint8_t *)p + sizeof(d));
    return 0;
}

int vfu_parse_mig_shm(const void *p, size_t len, struct vg_error *err)
{
    uint32_t hdr[2];

    if (len != sizeof(hdr)) {
        return vg_error_set(err, EINVAL, "payload is %zu bytes, expected %zu",
                            len, sizeof(hdr));
    }
    memcpy(hdr, p, sizeof(hdr));
    if (hdr[0] < sizeof(struct vfu_mig_shm) || hdr[1] != 0) {
        return vg_error_set(err, EINVAL, "argsz %u (min %zu) or flags %#x",
                            hdr[0], sizeof(struct vfu_mig_shm), hdr[1]);
    }
    return 0;
}

int vfu_parse_mig_shm_io(const void *p, size_t len, uint32_t slots,
                         uint32_t slot_size, uint32_t flags_ok,
                         struct vfu_mig_shm_io *out, struct vg_error *err)
{
    struct vfu_mig_shm_io io;

    if (len != sizeof(io)) {
        return vg_error_set(err, EINVAL, "payload is %zu bytes, expected %zu",
                            len, sizeof(io));
    }
    memcpy(&io, p, sizeof(io));
    if (io.argsz < sizeof(io) || (io.flags & ~flags_ok)) {
        return vg_error_set(err, EINVAL, "argsz %u (min %zu) or flags %#x",
                            io.argsz, sizeof(io), io.flags);
    }
    if (io.slot >= slots || io.size > slot_size) {
        return vg_error_set(err, EINVAL,
                            "slot %u (of %u) or size %u (max %u) invalid",
                            io.slot, slots, io.size, slot_size);
    }
    *out = io;
    return 0;
}

/* The pieces of a write of @size bytes, @len bytes at @p. */
static int parse_write_pieces(const uint8_t *p, size_t len, uint32_t size,
                              uint32_t slot_size, struct vfu_mig_pieces *out,
                              struct vg_error *err)
{
    size_t head = offsetof(struct vfu_mig_pieces, piece);
    uint64_t total = 0;

    if (len < head) {
        return vg_error_set(err, EINVAL, "%zu bytes of pieces, at least %zu",
                            len, head);
    }
    memcpy(out, p, head);
    if (out->count == 0 || out->count > VFU_MIG_PIECES_MAX || out->pass ||
        len != head + (size_t)out->count * sizeof(out->piece[0])) {
        return vg_error_set(err, EINVAL,
                            "%u pieces (1 to %u), pass %#x, in %zu bytes",
                            out->count, VFU_MIG_PIECES_MAX, out->pass, len);
    }
    memcpy(out->piece, p + head, len - head);
    for (uint32_t i = 0; i < out->count; i++) {
        const struct vfu_mig_piece *pc = &out->piece[i];
        bool slot = pc->where == VFU_MIG_PIECE_SLOT;

        if (pc->len == 0 || (!slot && pc->where != VFU_MIG_PIECE_VRAM) ||
            (slot &&
             (pc->offset > slot_size || pc->len > slot_size - pc->offset))) {
            return vg_error_set(err, EINVAL,
                                "piece %u: %u bytes at %#" PRIx64
                                " of where %u (0: the slot of %u bytes, 1: "
                                "VRAM)",
                                i, pc->len, pc->offset, pc->where, slot_size);
        }
        total += pc->len;
    }
    if (total != size) {
        return vg_error_set(err, EINVAL,
                            "pieces hold %" PRIu64 " bytes, the write %u",
                            total, size);
    }
    return 0;
}

int vfu_parse_mig_shm_write(const void *p, size_t len, uint32_t slots,
                            uint32_t slot_size, bool pieces_ok,
                            struct vfu_mig_shm_io *io,
                            struct vfu_mig_pieces *pieces, struct vg_error *err)
{
    size_t head = sizeof(*io);
    int ret =
        vfu_parse_mig_shm_io(p, len < head ? len : head, slots, slot_size,
                             pieces_ok ? VFU_MIG_SHM_IO_PIECES : 0, io, err);

    pieces->count = 0;
    if (ret < 0) {
        return ret;
    }
    if (!(io->flags & VFU_MIG_SHM_IO_PIECES)) {
        return len == head ? 0
                           : vg_error_set(err, EINVAL,
                                          "payload is %zu bytes, expected %zu",
                                          len, head);
    }
    return parse_write_pieces((const uint8_t *)p + head, len - head, io->size,
                              slot_size, pieces, err);
}

int vfu_parse_mig_vram(const void *p, size_t len, uint32_t *flags,
                       struct vg_error *err)
{
    uint32_t hdr[2];

    if (len != sizeof(hdr)) {
        return vg_error_set(err, EINVAL, "payload is %zu bytes, expected %zu",
                            len, sizeof(hdr));
    }
    memcpy(hdr, p, sizeof(hdr));
    if (hdr[0] < sizeof(struct vfu_mig_vram) ||
        (hdr[1] & ~VFU_MIG_VRAM_WRITE)) {
        return vg_error_set(err, EINVAL, "argsz %u (min %zu) or flags %#x",
                            hdr[0], sizeof(struct vfu_mig_vram), hdr[1]);
    }
    *flags = hdr[1];
    return 0;
}
