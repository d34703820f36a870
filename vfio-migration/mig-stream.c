/*
 * mig-stream.c -- the migration stream's format (docs/migration-stream.md):
 * record checksums, bounds and names, the HEADER's check, the page hash.
 * The encoder is mig-enc.c, the decoder mig-dec.c.
 */
#include "mig-stream.h"
#include "common/hash.h"
#include "common/le.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

uint64_t mig_rec_checksum(const uint8_t *hdr, const uint8_t *payload,
                          uint32_t len)
{
    return vg_hash(payload, len, vg_get_le64(hdr));
}

/* XXH3-64, seeded with bytes 0..7 of the record header @hdr, of the
 * @head_len bytes at @head (at most a pieces header's) followed by @n
 * hashes as little-endian u64s (at most MIG_RUN_MAX_PAGES of them). */
static uint64_t hashes_sum(const uint8_t *hdr, const uint8_t *head,
                           size_t head_len, const uint64_t *hashes, uint32_t n)
{
    uint8_t buf[MIG_PIECES_HDR_SIZE + MIG_RUN_MAX_PAGES * 8];

    n = n < MIG_RUN_MAX_PAGES ? n : MIG_RUN_MAX_PAGES;
    memcpy(buf, head, head_len);
    for (uint32_t i = 0; i < n; i++) {
        vg_put_le64(buf + head_len + 8 * i, hashes[i]);
    }
    return vg_hash(buf, head_len + (size_t)n * 8, vg_get_le64(hdr));
}

uint64_t mig_pages_checksum(const uint8_t *hdr, const uint8_t *run,
                            const uint64_t *hashes, uint32_t count)
{
    return hashes_sum(hdr, run, MIG_RUN_HDR_SIZE, hashes, count);
}

uint64_t mig_pieces_hashes_checksum(const uint8_t *hdr, const uint8_t *phdr,
                                    const uint64_t *piece_hash, unsigned n)
{
    return hashes_sum(hdr, phdr, MIG_PIECES_HDR_SIZE, piece_hash,
                      n < MIG_PAGE_PIECES ? n : MIG_PAGE_PIECES);
}

uint64_t mig_pieces_checksum(const uint8_t *hdr, const uint8_t *phdr,
                             const uint8_t *pieces, uint32_t piece, unsigned n,
                             uint64_t *piece_hash)
{
    uint64_t own[MIG_PAGE_PIECES];
    uint64_t *h = piece_hash ? piece_hash : own;

    n = n < MIG_PAGE_PIECES ? n : MIG_PAGE_PIECES;
    for (unsigned i = 0; i < n; i++) {
        h[i] = vg_hash(pieces + (size_t)i * piece, piece, 0);
    }
    return mig_pieces_hashes_checksum(hdr, phdr, h, n);
}

size_t mig_rec_digest_size(uint32_t version, const uint8_t *hdr)
{
    if (version >= MIG_PIECE_HASH_VERSION &&
        vg_get_le16(hdr) == MIG_REC_PAGE_PIECES) {
        return MIG_REC_HDR_SIZE + MIG_PIECES_HDR_SIZE;
    }
    return MIG_REC_HDR_SIZE + (size_t)vg_get_le32(hdr + 4);
}

bool mig_rec_bounds(uint32_t page_size, uint32_t run_max, uint32_t type,
                    uint32_t *min, uint32_t *max)
{
    switch (type) {
    case MIG_REC_HEADER:
        *min = *max = MIG_HEADER_SIZE;
        return true;
    case MIG_REC_PAGES:
        *min = MIG_RUN_HDR_SIZE + page_size;
        *max = MIG_RUN_HDR_SIZE + run_max;
        return true;
    case MIG_REC_PAGES_LISTED:
        *min = MIG_RUN_HDR_SIZE + 8 + page_size;
        *max = MIG_RUN_HDR_SIZE + (run_max / page_size) * 8 + run_max;
        return true;
    case MIG_REC_ZEROS:
        *min = *max = MIG_RUN_HDR_SIZE;
        return true;
    case MIG_REC_PAGE_PIECES:
        *min = MIG_PIECES_HDR_SIZE + page_size / MIG_PAGE_PIECES;
        *max = MIG_PIECES_HDR_SIZE + page_size;
        return true;
    case MIG_REC_DEVICE_STATE:
        *min = 1;
        *max = MIG_STATE_MAX;
        return true;
    case MIG_REC_END:
        *min = *max = MIG_END_SIZE;
        return true;
    case MIG_REC_POSTCOPY:
        *min = *max = MIG_POSTCOPY_SIZE;
        return true;
    default:
        return false;
    }
}

uint32_t mig_rec_flags(uint32_t type)
{
    return type == MIG_REC_PAGES_LISTED  ? MIG_LISTED_MAY_BE_STALE
           : type == MIG_REC_PAGE_PIECES ? MIG_PIECES_HASHED
                                         : 0;
}

int mig_header_check(const struct mig_stream_config *c, const uint8_t *p,
                     uint32_t *version, uint32_t *run_max, struct vg_error *err)
{
    uint32_t flags = vg_get_le32(p + 28);

    if (memcmp(p, MIG_STREAM_MAGIC, 8) != 0) {
        return vg_error_set(err, EINVAL,
                            "bad magic %02x%02x%02x%02x%02x%02x%02x%02x, "
                            "expected \"%s\"",
                            p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7],
                            MIG_STREAM_MAGIC);
    }
    if (vg_get_le32(p + 8) < MIG_STREAM_VERSION_MIN ||
        vg_get_le32(p + 8) > MIG_STREAM_VERSION_MAX) {
        return vg_error_set(err, EPROTO,
                            "unknown stream version %u, this device reads "
                            "versions %u to %u",
                            vg_get_le32(p + 8), MIG_STREAM_VERSION_MIN,
                            MIG_STREAM_VERSION_MAX);
    }
    if (vg_get_le64(p + 16) != c->vram_size) {
        return vg_error_set(err, EINVAL,
                            "VRAM size mismatch: stream has %" PRIu64
                            " bytes, this device has %" PRIu64,
                            vg_get_le64(p + 16), c->vram_size);
    }
    if (vg_get_le32(p + 12) != c->page_size) {
        return vg_error_set(err, EINVAL,
                            "page size mismatch: stream has %u bytes, this "
                            "device has %u",
                            vg_get_le32(p + 12), c->page_size);
    }
    if (vg_get_le32(p + 24) != c->features) {
        return vg_error_set(err, EINVAL,
                            "features mismatch: stream has %#x, this device "
                            "has %#x",
                            vg_get_le32(p + 24), c->features);
    }
    if (flags & ~MIG_HDR_LARGE_RUNS) {
        return vg_error_set(err, EINVAL,
                            "HEADER flags %#x: this device knows %#x only",
                            flags, MIG_HDR_LARGE_RUNS);
    }
    *version = vg_get_le32(p + 8);
    *run_max =
        flags & MIG_HDR_LARGE_RUNS ? MIG_RUN_MAX_BYTES : MIG_RUN_SMALL_BYTES;
    return 0;
}

const char *mig_rec_name(uint32_t type)
{
    switch (type) {
    case MIG_REC_HEADER:
        return "HEADER";
    case MIG_REC_PAGES:
        return "PAGES";
    case MIG_REC_ZEROS:
        return "ZEROS";
    case MIG_REC_DEVICE_STATE:
        return "DEVICE_STATE";
    case MIG_REC_END:
        return "END";
    case MIG_REC_POSTCOPY:
        return "POSTCOPY";
    case MIG_REC_PAGES_LISTED:
        return "PAGES_LISTED";
    case MIG_REC_PAGE_PIECES:
        return "PAGE_PIECES";
    default:
        return "unknown";
    }
}

uint64_t mig_stream_page_hash(uint32_t version, const void *page,
                              uint32_t page_size, uint64_t *piece_hash)
{
    return version >= MIG_TREE_HASH_VERSION
               ? vg_hash_tree(page, page_size, 0, piece_hash)
               : vg_hash(page, page_size, 0);
}

void mig_stream_page_hashes(uint32_t version, const uint8_t *data,
                            uint32_t count, uint32_t ps, uint8_t *le,
                            uint64_t *hashes)
{
    for (uint32_t i = 0; i < count; i++) {
        uint64_t h =
            mig_stream_page_hash(version, data + (size_t)i * ps, ps, NULL);

        vg_put_le64(le + 8 * i, h);
        if (hashes) {
            hashes[i] = h;
        }
    }
}

int mig_stream_truncated(struct vg_error *err, uint64_t bytes, uint64_t records,
                         bool seen_header, bool seen_state)
{
    return vg_error_set(err, EINVAL,
                        "migration stream truncated: no END record after "
                        "%" PRIu64 " bytes in %" PRIu64 " records%s%s",
                        bytes, records, seen_header ? "" : ", no HEADER",
                        seen_state ? "" : ", no DEVICE_STATE");
}
