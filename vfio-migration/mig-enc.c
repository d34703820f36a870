/*
 * mig-enc.c -- the migration stream's encoder: a source's records, their
 * checksums and the running digest END carries (docs/migration-stream.md).
 */
#include "mig-stream.h"
#include "common/hash.h"
#include "common/le.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct mig_enc {
    struct vg_digest *digest;
    struct vg_digest *check; /* a record's checksum over pieces */
    uint64_t bytes;
    uint64_t records;
    uint32_t page_size;
    uint32_t version;
    uint32_t run_max;
    uint8_t hash_le[MIG_RUN_MAX_PAGES * 8]; /* a PAGES record's, version 2 */
};

int mig_enc_new(uint32_t version, uint32_t page_size, uint32_t run_max,
                struct mig_enc **out, struct vg_error *err)
{
    struct mig_enc *enc;

    if (version < MIG_STREAM_VERSION_MIN || version > MIG_STREAM_VERSION_MAX) {
        return vg_error_set(err, EINVAL,
                            "stream version %u: this encoder writes "
                            "versions %u to %u",
                            version, MIG_STREAM_VERSION_MIN,
                            MIG_STREAM_VERSION_MAX);
    }
    if (run_max != MIG_RUN_MAX_BYTES && run_max != MIG_RUN_SMALL_BYTES) {
        return vg_error_set(err, EINVAL,
                            "runs of up to %u bytes: this encoder writes %u "
                            "or %u",
                            run_max, MIG_RUN_SMALL_BYTES, MIG_RUN_MAX_BYTES);
    }
    enc = calloc(1, sizeof(*enc));
    if (enc) {
        enc->digest = vg_digest_new();
        enc->check = vg_digest_new();
    }
    if (!enc || !enc->digest || !enc->check) {
        mig_enc_free(enc);
        return vg_error_set(err, ENOMEM, "stream encoder");
    }
    enc->page_size = page_size;
    enc->version = version;
    enc->run_max = run_max;
    *out = enc;
    return 0;
}

uint32_t mig_enc_run_max(const struct mig_enc *enc)
{
    return enc->run_max;
}

void mig_enc_free(struct mig_enc *enc)
{
    if (enc) {
        vg_digest_free(enc->digest);
        vg_digest_free(enc->check);
        free(enc);
    }
}

uint64_t mig_enc_bytes(const struct mig_enc *enc)
{
    return enc->bytes;
}

/* Header bytes 0..7 of a record of @type with @len payload bytes. */
static void rec_head(uint8_t *buf, uint16_t type, uint32_t len)
{
    buf[0] = (uint8_t)type;
    buf[1] = (uint8_t)(type >> 8);
    buf[2] = buf[3] = 0; /* flags */
    vg_put_le32(buf + 4, len);
}

/* Finish the record of @len payload bytes at @buf; returns its size. */
static size_t rec_seal(struct mig_enc *enc, uint8_t *buf, uint16_t type,
                       uint32_t len)
{
    size_t size = MIG_REC_HDR_SIZE + len;

    rec_head(buf, type, len);
    vg_put_le64(buf + 8, mig_rec_checksum(buf, buf + MIG_REC_HDR_SIZE, len));
    if (type != MIG_REC_END) {
        vg_digest_update(enc->digest, buf, size);
    }
    enc->bytes += size;
    enc->records++;
    return size;
}

size_t mig_enc_header(struct mig_enc *enc, const struct mig_stream_config *cfg,
                      uint8_t *buf)
{
    uint8_t *p = buf + MIG_REC_HDR_SIZE;

    memset(p, 0, MIG_HEADER_SIZE);
    memcpy(p, MIG_STREAM_MAGIC, 8);
    vg_put_le32(p + 8, enc->version);
    vg_put_le32(p + 12, cfg->page_size);
    vg_put_le64(p + 16, cfg->vram_size);
    vg_put_le32(p + 24, cfg->features);
    vg_put_le32(p + 28,
                enc->run_max == MIG_RUN_MAX_BYTES ? MIG_HDR_LARGE_RUNS : 0);
    return rec_seal(enc, buf, MIG_REC_HEADER, MIG_HEADER_SIZE);
}

/* The run header of PAGES and ZEROS at @p: first page, page count (a
 * PAGES count is le32 followed by 4 zero bytes, the same bytes). */
static void run_head(uint8_t *p, uint64_t first, uint64_t count)
{
    vg_put_le64(p, first);
    vg_put_le64(p + 8, count);
}

/* Seal the PAGES record whose headers are at @buf (run header written)
 * and whose @count pages are at @data, with their page hashes @hashes if
 * not NULL: record header, checksum, digest. */
static void pages_seal(struct mig_enc *enc, uint8_t *buf, const uint8_t *data,
                       uint32_t count, const uint64_t *hashes)
{
    uint32_t n = count * enc->page_size;
    const void *body = data; /* what stands for the pages: v1 their bytes */
    size_t body_len = n;

    if (enc->version >= 2 && hashes) {
        for (uint32_t i = 0; i < count; i++) {
            vg_put_le64(enc->hash_le + 8 * i, hashes[i]);
        }
    } else if (enc->version >= 2) {
        mig_stream_page_hashes(enc->version, data, count, enc->page_size,
                               enc->hash_le, NULL);
    }
    if (enc->version >= 2) {
        body = enc->hash_le;
        body_len = (size_t)count * 8;
    }
    rec_head(buf, MIG_REC_PAGES, MIG_RUN_HDR_SIZE + n);
    vg_digest_reset(enc->check, vg_get_le64(buf));
    vg_digest_update(enc->check, buf + MIG_REC_HDR_SIZE, MIG_RUN_HDR_SIZE);
    vg_digest_update(enc->check, body, body_len);
    vg_put_le64(buf + 8, vg_digest_value(enc->check));
    vg_digest_update(enc->digest, buf, MIG_RUN_HEADERS_SIZE);
    vg_digest_update(enc->digest, body, body_len);
    enc->bytes += MIG_RUN_HEADERS_SIZE + n;
    enc->records++;
}

size_t mig_enc_pages(struct mig_enc *enc, uint64_t first, uint32_t count,
                     const uint8_t *data, uint8_t *buf)
{
    uint8_t *p = buf + MIG_RUN_HEADERS_SIZE;
    size_t n = (size_t)count * enc->page_size;

    run_head(buf + MIG_REC_HDR_SIZE, first, count);
    if (data != p) {
        memcpy(p, data, n);
    }
    pages_seal(enc, buf, p, count, NULL);
    return MIG_RUN_HEADERS_SIZE + n;
}

size_t mig_enc_pages_hashed(struct mig_enc *enc, uint64_t first, uint32_t count,
                            const uint64_t *hashes, uint8_t *buf)
{
    run_head(buf + MIG_REC_HDR_SIZE, first, count);
    pages_seal(enc, buf, mig_enc_pages_data(buf), count, hashes);
    return MIG_RUN_HEADERS_SIZE + (size_t)count * enc->page_size;
}

size_t mig_enc_pages_ref(struct mig_enc *enc, uint64_t first, uint32_t count,
                         const uint8_t *data, const uint64_t *hashes,
                         uint8_t *buf)
{
    run_head(buf + MIG_REC_HDR_SIZE, first, count);
    pages_seal(enc, buf, data, count, hashes);
    return MIG_RUN_HEADERS_SIZE;
}

size_t mig_enc_pages_listed_ref(struct mig_enc *enc, uint64_t first,
                                uint32_t count, const uint64_t *hashes,
                                bool may_be_stale, uint8_t *buf)
{
    uint32_t list = count * 8;
    uint8_t *run = buf + MIG_REC_HDR_SIZE;

    run_head(run, first, count);
    for (uint32_t i = 0; i < count; i++) {
        vg_put_le64(run + MIG_RUN_HDR_SIZE + 8 * i, hashes[i]);
    }
    rec_head(buf, MIG_REC_PAGES_LISTED,
             MIG_RUN_HDR_SIZE + list + count * enc->page_size);
    buf[2] = may_be_stale ? MIG_LISTED_MAY_BE_STALE : 0;
    vg_put_le64(buf + 8, mig_rec_checksum(buf, run, MIG_RUN_HDR_SIZE + list));
    vg_digest_update(enc->digest, buf, MIG_RUN_HEADERS_SIZE + list);
    enc->bytes += MIG_RUN_HEADERS_SIZE + list + (size_t)count * enc->page_size;
    enc->records++;
    return MIG_RUN_HEADERS_SIZE + list;
}

uint8_t *mig_enc_pages_data(uint8_t *buf)
{
    return buf + MIG_REC_HDR_SIZE + MIG_RUN_HDR_SIZE;
}

size_t mig_enc_zeros(struct mig_enc *enc, uint64_t first, uint64_t count,
                     uint8_t *buf)
{
    run_head(buf + MIG_REC_HDR_SIZE, first, count);
    return rec_seal(enc, buf, MIG_REC_ZEROS, MIG_RUN_HDR_SIZE);
}

size_t mig_enc_pieces_fill(const struct mig_enc *enc, uint64_t page,
                           uint64_t mask, const uint8_t *page_data,
                           uint64_t *piece_hash, uint8_t *buf)
{
    uint32_t piece = enc->page_size / MIG_PAGE_PIECES;
    bool hash = enc->version >= MIG_PIECE_HASH_VERSION;
    uint8_t *p = buf + MIG_REC_HDR_SIZE, *at = p + MIG_PIECES_HDR_SIZE;

    vg_put_le64(p, page);
    vg_put_le64(p + 8, mask);
    for (uint64_t left = mask; left; left &= left - 1) {
        memcpy(at, page_data + (size_t)__builtin_ctzll(left) * piece, piece);
        if (hash) {
            *piece_hash++ = vg_hash(at, piece, 0);
        }
        at += piece;
    }
    rec_head(buf, MIG_REC_PAGE_PIECES, (uint32_t)(at - p));
    return (size_t)(at - buf);
}

void mig_enc_pieces_seal(const struct mig_enc *enc, uint8_t *buf, bool hashed,
                         uint64_t hash, const uint64_t *piece_hash)
{
    uint8_t *p = buf + MIG_REC_HDR_SIZE;
    uint32_t len = vg_get_le32(buf + 4);

    vg_put_le64(p + 16, hashed ? hash : 0);
    buf[2] = hashed ? MIG_PIECES_HASHED : 0;
    vg_put_le64(buf + 8, enc->version >= MIG_PIECE_HASH_VERSION
                             ? mig_pieces_hashes_checksum(
                                   buf, p, piece_hash,
                                   (len - MIG_PIECES_HDR_SIZE) /
                                       (enc->page_size / MIG_PAGE_PIECES))
                             : mig_rec_checksum(buf, p, len));
}

void mig_enc_add_records(struct mig_enc *enc, const uint8_t *recs, size_t len,
                         uint64_t n)
{
    for (size_t at = 0; at < len;
         at += MIG_REC_HDR_SIZE + (size_t)vg_get_le32(recs + at + 4)) {
        vg_digest_update(enc->digest, recs + at,
                         mig_rec_digest_size(enc->version, recs + at));
    }
    enc->bytes += len;
    enc->records += n;
}

size_t mig_enc_page_pieces(struct mig_enc *enc, uint64_t page, uint64_t mask,
                           const uint8_t *page_data, bool hashed, uint64_t hash,
                           uint8_t *buf)
{
    uint64_t piece_hash[MIG_PAGE_PIECES];
    size_t size =
        mig_enc_pieces_fill(enc, page, mask, page_data, piece_hash, buf);

    mig_enc_pieces_seal(enc, buf, hashed, hash, piece_hash);
    mig_enc_add_records(enc, buf, size, 1);
    return size;
}

size_t mig_enc_state(struct mig_enc *enc, const void *blob, uint32_t len,
                     uint8_t *buf)
{
    memcpy(buf + MIG_REC_HDR_SIZE, blob, len);
    return rec_seal(enc, buf, MIG_REC_DEVICE_STATE, len);
}

size_t mig_enc_postcopy(struct mig_enc *enc,
                        const struct mig_postcopy_info *info, uint8_t *buf)
{
    uint8_t *p = buf + MIG_REC_HDR_SIZE;

    memset(p, 0, MIG_POSTCOPY_SIZE);
    vg_put_le64(p, info->npages);
    vg_put_le64(p + 8, info->pending);
    memcpy(p + 16, info->token, MIG_POSTCOPY_TOKEN);
    memcpy(p + 32, info->addr, strnlen(info->addr, MIG_POSTCOPY_ADDR - 1));
    return rec_seal(enc, buf, MIG_REC_POSTCOPY, MIG_POSTCOPY_SIZE);
}

size_t mig_enc_end(struct mig_enc *enc, uint8_t *buf)
{
    uint8_t *p = buf + MIG_REC_HDR_SIZE;

    vg_put_le64(p, vg_digest_value(enc->digest));
    vg_put_le64(p + 8, enc->bytes);
    vg_put_le64(p + 16, enc->records);
    return rec_seal(enc, buf, MIG_REC_END, MIG_END_SIZE);
}
