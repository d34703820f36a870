/*
 * mig-dec.c -- the migration stream's incremental, validating decoder: a
 * destination's records checked (bounds, checksums, order, the digest)
 * before the sink applies them to VRAM (docs/migration-stream.md).
 */
#include "mig-stream.h"
#include "common/hash.h"
#include "common/le.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(MIG_RUN_MAX_PAGES >= MIG_PAGE_PIECES,
               "a decoder's hashes hold a PAGE_PIECES record's");

/* Version 6 PAGE_PIECES records applied at once (mig_dec_sink.run). */
#define DEC_BATCH_MAX 256u

/* One record of such a batch: its headers, copied and checked, and its
 * pieces where they arrived; then what applying it gave. */
struct dec_job {
    uint8_t head[MIG_REC_HDR_SIZE + MIG_PIECES_HDR_SIZE];
    const uint8_t *pieces;
    uint64_t offset, index; /* the record's, for its errors */
    bool stale;             /* its page was: the sink gives its hash */
    uint64_t sum, hash;
    int ret;
    struct vg_error err;
    uint64_t piece_hash[MIG_PAGE_PIECES];
};

struct mig_dec {
    struct mig_stream_config cfg;
    struct mig_dec_sink sink;
    uint64_t npages;
    struct vg_digest *digest;
    struct vg_digest *check; /* a version 2 PAGES record's checksum */
    uint8_t *rec;            /* the record being received (MIG_REC_MAX) */
    size_t have;             /* bytes of it received */
    size_t want;             /* its size: header, then header + payload */
    uint64_t offset;         /* stream offset of the record */
    uint64_t index;          /* its index (0 = first record) */
    uint32_t version;        /* the HEADER's, once accepted */
    uint32_t run_max;        /* the most page data in a run, by the HEADER */
    bool seen_header;        /* a HEADER was accepted */
    bool seen_state;         /* a DEVICE_STATE was accepted */
    bool seen_end;           /* an END was accepted */
    bool seen_postcopy;      /* a POSTCOPY was accepted */
    int failed;              /* sticky -errno */
    struct vg_error error;
    /* A record that arrived whole in one chunk, read in place there
     * (NULL: all of it is in @rec): a version 2 PAGES record's page data,
     * after its headers in @rec, or a PAGE_PIECES record's payload, whose
     * own header is copied into @rec too, for what the decoder checks. */
    const uint8_t *data_at;
    uint64_t in_place; /* page data bytes read so */
    bool placed;       /* ...at their place in VRAM (mig_dec_feed_placed) */
    bool written;      /* the sink has this record's pages in VRAM */
    /* Version 2: the page hashes of the PAGES record in @rec; version 6:
     * the piece hashes of the PAGE_PIECES record in @rec. */
    uint64_t hashes[MIG_RUN_MAX_PAGES];
    uint8_t hash_le[MIG_RUN_MAX_PAGES * 8];
    /* Version 4: the pages a PAGES, PAGES_LISTED or ZEROS record brought,
     * a bit each (PAGE_PIECES only change such a page). */
    uint64_t *brought;
    /* Version 3: the stale pages (mig_dec_stale_pages), a bit each. */
    uint64_t *stale;
    uint64_t stale_count;
    uint64_t stale_marked;
    /* Version 6 with the sink's run(): the batch (DEC_BATCH_MAX jobs)
     * and the page of each job. */
    struct dec_job *batch;
    uint64_t batch_page[DEC_BATCH_MAX];
    unsigned batched;
};

int mig_dec_new(const struct mig_stream_config *cfg,
                const struct mig_dec_sink *sink, struct mig_dec **out,
                struct vg_error *err)
{
    uint32_t ps = cfg->page_size;
    struct mig_dec *dec;

    if (ps < MIG_PAGE_SIZE_MIN || ps > MIG_PAGE_SIZE_MAX || (ps & (ps - 1)) ||
        cfg->vram_size % ps || cfg->vram_size == 0) {
        return vg_error_set(err, EINVAL,
                            "decoder: bad configuration (VRAM %" PRIu64
                            " bytes, page size %u)",
                            cfg->vram_size, ps);
    }
    dec = calloc(1, sizeof(*dec));
    if (dec) {
        dec->rec = malloc(MIG_REC_MAX);
        dec->digest = vg_digest_new();
        dec->check = vg_digest_new();
    }
    if (!dec || !dec->rec || !dec->digest || !dec->check) {
        mig_dec_free(dec);
        return vg_error_set(err, ENOMEM, "stream decoder");
    }
    dec->cfg = *cfg;
    dec->sink = *sink;
    dec->npages = cfg->vram_size / ps;
    dec->want = MIG_REC_HDR_SIZE;
    dec->run_max = MIG_RUN_SMALL_BYTES;
    *out = dec;
    return 0;
}

void mig_dec_free(struct mig_dec *dec)
{
    if (dec) {
        vg_digest_free(dec->digest);
        vg_digest_free(dec->check);
        free(dec->rec);
        free(dec->brought);
        free(dec->stale);
        free(dec->batch);
        free(dec);
    }
}

uint64_t mig_dec_bytes(const struct mig_dec *dec)
{
    return dec->offset + dec->have;
}

uint64_t mig_dec_bytes_in_place(const struct mig_dec *dec)
{
    return dec->in_place;
}

uint32_t mig_dec_version(const struct mig_dec *dec)
{
    return dec->seen_header ? dec->version : 0;
}

uint64_t mig_dec_stale_pages(const struct mig_dec *dec, uint64_t *first)
{
    *first = 0;
    for (uint64_t w = 0; dec->stale_count && w < (dec->npages + 63) / 64; w++) {
        if (dec->stale[w]) {
            *first = w * 64 + (uint64_t)__builtin_ctzll(dec->stale[w]);
            break;
        }
    }
    return dec->stale_count;
}

uint64_t mig_dec_stale_marked(const struct mig_dec *dec)
{
    return dec->stale_marked;
}

bool mig_dec_page_stale(const struct mig_dec *dec, uint64_t page)
{
    return dec->stale && page < dec->npages &&
           (dec->stale[page / 64] >> (page % 64)) & 1;
}

/* Pages [@first, +@count) were brought by a record (version 4). */
static void set_brought(struct mig_dec *dec, uint64_t first, uint64_t count)
{
    for (uint64_t p = first; dec->brought && p < first + count; p++) {
        dec->brought[p / 64] |= 1ull << (p % 64);
    }
}

/* Mark pages [@first, +@count) stale or not. */
static void set_stale(struct mig_dec *dec, uint64_t first, uint64_t count,
                      bool stale)
{
    for (uint64_t p = first; dec->stale && p < first + count; p++) {
        uint64_t bit = 1ull << (p % 64), *w = &dec->stale[p / 64];

        if (stale && !(*w & bit)) {
            *w |= bit;
            dec->stale_count++;
            dec->stale_marked++;
        } else if (!stale && (*w & bit)) {
            *w &= ~bit;
            dec->stale_count--;
        }
    }
}

/* Fail the stream: "<TYPE> record #<index> at offset <off>: <what>". */
static int __attribute__((format(printf, 3, 4)))
dec_fail(struct mig_dec *dec, int code, const char *fmt, ...);

static int dec_fail(struct mig_dec *dec, int code, const char *fmt, ...)
{
    char what[VG_ERROR_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    vg_error_set(&dec->error, code,
                 "migration stream: %s%srecord #%" PRIu64 " at offset %" PRIu64
                 ": %s",
                 dec->have >= 2 ? mig_rec_name(vg_get_le16(dec->rec)) : "",
                 dec->have >= 2 ? " " : "", dec->index, dec->offset, what);
    dec->failed = -code;
    return dec->failed;
}

/* Sink errors keep their text, with the record prefixed. */
static int dec_sink_failed(struct mig_dec *dec, int ret, struct vg_error *se)
{
    return dec_fail(dec, -ret, "%s", se->msg);
}

/* The record header is in: check type, flags and length. */
static int dec_rec_header(struct mig_dec *dec)
{
    uint32_t type = vg_get_le16(dec->rec), flags = vg_get_le16(dec->rec + 2);
    uint32_t len = vg_get_le32(dec->rec + 4), min, max;

    if (!mig_rec_bounds(dec->cfg.page_size, dec->run_max, type, &min, &max)) {
        return dec_fail(dec, EINVAL, "unknown record type %u", type);
    }
    if (flags & ~mig_rec_flags(type)) {
        return dec_fail(dec, EINVAL, "flags %#x, expected 0", flags);
    }
    if (len < min || len > max) {
        return dec_fail(dec, EINVAL,
                        "payload length %u outside [%u, %u] for this type", len,
                        min, max);
    }
    if (!dec->seen_header && type != MIG_REC_HEADER) {
        return dec_fail(dec, EINVAL, "the stream must start with HEADER");
    }
    if ((type == MIG_REC_PAGES_LISTED && dec->version < 3) ||
        (type == MIG_REC_PAGE_PIECES && dec->version < 4)) {
        return dec_fail(dec, EINVAL, "%s in a version %u stream",
                        mig_rec_name(type), dec->version);
    }
    dec->want = MIG_REC_HDR_SIZE + len;
    return 0;
}

static int dec_header(struct mig_dec *dec, const uint8_t *p)
{
    struct vg_error e = {0};

    if (dec->seen_header) {
        return dec_fail(dec, EINVAL, "duplicate HEADER");
    }
    if (mig_header_check(&dec->cfg, p, &dec->version, &dec->run_max, &e) < 0) {
        return dec_fail(dec, e.code, "%s", e.msg);
    }
    if (dec->version >= 3) {
        dec->stale = calloc((dec->npages + 63) / 64, 8);
        dec->brought =
            dec->version >= 4 ? calloc((dec->npages + 63) / 64, 8) : NULL;
        if (!dec->stale || (dec->version >= 4 && !dec->brought)) {
            return dec_fail(dec, ENOMEM, "no memory for the pages' bitmaps");
        }
    }
    if (dec->version >= MIG_PIECE_HASH_VERSION && dec->sink.run &&
        dec->sink.pieces_mt) {
        dec->batch = malloc(DEC_BATCH_MAX * sizeof(*dec->batch));
        if (!dec->batch) {
            return dec_fail(dec, ENOMEM, "no memory for a batch of pieces");
        }
        /* Its pages faulted in now: its first use is a stop-copy's */
        memset(dec->batch, 0, DEC_BATCH_MAX * sizeof(*dec->batch));
    }
    dec->seen_header = true;
    if (dec->sink.header) {
        dec->sink.header(dec->sink.opaque, dec->version);
    }
    return 0;
}

/* Pages [first, first + count) inside VRAM and before DEVICE_STATE. */
static int dec_range(struct mig_dec *dec, uint64_t first, uint64_t count)
{
    if (dec->seen_state) {
        return dec_fail(dec, EINVAL, "page data after DEVICE_STATE");
    }
    if (dec->seen_postcopy) {
        return dec_fail(dec, EINVAL, "page data after POSTCOPY");
    }
    if (count == 0 || first >= dec->npages || count > dec->npages - first) {
        return dec_fail(dec, ERANGE,
                        "pages %" PRIu64 "+%" PRIu64 " outside VRAM of %" PRIu64
                        " pages",
                        first, count, dec->npages);
    }
    return 0;
}

/* The record in @rec is a PAGES_LISTED. */
static bool is_listed(const struct mig_dec *dec)
{
    return vg_get_le16(dec->rec) == MIG_REC_PAGES_LISTED;
}

/* The bytes of the record in @rec before its page data: the headers, and
 * a PAGES_LISTED record's hashes, as many as its length says. */
static size_t headers_size(const struct mig_dec *dec)
{
    size_t per_page = dec->cfg.page_size + 8;

    return MIG_RUN_HEADERS_SIZE +
           (is_listed(dec) ? (dec->want - MIG_RUN_HEADERS_SIZE) / per_page * 8
                           : 0);
}

/* The run header of PAGES (or PAGES_LISTED) at @p matches its payload
 * length @len. */
static int pages_shape(struct mig_dec *dec, const uint8_t *p, uint32_t len)
{
    uint32_t count = vg_get_le32(p + 8), ps = dec->cfg.page_size;
    uint64_t per_page = ps + (is_listed(dec) ? 8 : 0);

    if (vg_get_le32(p + 12)) {
        return dec_fail(dec, EINVAL, "reserved field %#x, expected 0",
                        vg_get_le32(p + 12));
    }
    if (count > dec->run_max / ps ||
        len != MIG_RUN_HDR_SIZE + (uint64_t)count * per_page) {
        return dec_fail(dec, EINVAL,
                        "run of %u pages of %u bytes does not match payload "
                        "length %u",
                        count, ps, len);
    }
    return 0;
}

/* A version 2 PAGES record or a PAGES_LISTED (shape checked): hash its
 * pages. */
static bool hashed_pages(const struct mig_dec *dec)
{
    return (dec->version >= 2 && vg_get_le16(dec->rec) == MIG_REC_PAGES) ||
           is_listed(dec);
}

/* Bytes of the record in @rec before what may be read in place, where it
 * arrives whole in one chunk: a version 2 PAGES record's headers, a
 * PAGE_PIECES record's record header; 0 for a record read whole into
 * @rec. */
static size_t in_place_from(const struct mig_dec *dec)
{
    if (dec->want == MIG_REC_HDR_SIZE) {
        return 0;
    }
    if (hashed_pages(dec)) {
        return headers_size(dec);
    }
    return vg_get_le16(dec->rec) == MIG_REC_PAGE_PIECES ? MIG_REC_HDR_SIZE : 0;
}

/* The payload, @p in @rec, of a record other than a version 2 PAGES one,
 * as the checksum and digest take it: where it arrived, if it was read in
 * place.  What the decoder checks comes from @rec. */
static const uint8_t *payload(const struct mig_dec *dec, const uint8_t *p)
{
    return dec->data_at ? dec->data_at : p;
}

/* The pieces of the PAGE_PIECES record whose payload is @p in @rec. */
static const uint8_t *pieces_data(const struct mig_dec *dec, const uint8_t *p)
{
    return payload(dec, p) + MIG_PIECES_HDR_SIZE;
}

/* The page data of the PAGES record whose payload is @p. */
static const uint8_t *pages_data(const struct mig_dec *dec, const uint8_t *p)
{
    return dec->data_at ? dec->data_at
                        : p + (headers_size(dec) - MIG_REC_HDR_SIZE);
}

/* What a record brought of pages [@first, +@count): a PAGES_LISTED
 * record's pages whose data did not match their listed hashes are stale
 * (or fail the stream, unless the record says they may be), every other
 * page of a record is not. */
static int note_stale(struct mig_dec *dec, const uint8_t *p, uint64_t first,
                      uint64_t count)
{
    bool may = vg_get_le16(dec->rec + 2) & MIG_LISTED_MAY_BE_STALE;

    if (!dec->stale) {
        return 0;
    }
    if (!is_listed(dec)) {
        set_stale(dec, first, count, false);
        return 0;
    }
    for (uint64_t i = 0; i < count; i++) {
        uint64_t listed = vg_get_le64(p + MIG_RUN_HDR_SIZE + 8 * i);

        if (dec->hashes[i] != listed && !may) {
            return dec_fail(dec, EBADMSG,
                            "page %" PRIu64 ": hash %016" PRIx64
                            ", listed %016" PRIx64,
                            first + i, dec->hashes[i], listed);
        }
        set_stale(dec, first + i, 1, dec->hashes[i] != listed);
    }
    return 0;
}

static int dec_pages(struct mig_dec *dec, const uint8_t *p, uint32_t len)
{
    uint64_t first = vg_get_le64(p);
    uint32_t count = vg_get_le32(p + 8);
    struct vg_error se;
    int ret = pages_shape(dec, p, len);

    if (ret == 0) {
        ret = dec_range(dec, first, count);
    }
    if (ret == 0) {
        ret = dec->sink.pages(dec->sink.opaque, first, count,
                              dec->written ? NULL : pages_data(dec, p),
                              hashed_pages(dec) ? dec->hashes : NULL, &se);
        if (ret < 0) {
            return dec_sink_failed(dec, ret, &se);
        }
        set_brought(dec, first, count);
        ret = note_stale(dec, p, first, count);
    }
    return ret;
}

/* A PAGE_PIECES record's shape: its mask, of a page that a record brought. */
static int pieces_shape(struct mig_dec *dec, const uint8_t *p, uint32_t len)
{
    uint64_t page = vg_get_le64(p), mask = vg_get_le64(p + 8);
    uint32_t piece = dec->cfg.page_size / MIG_PAGE_PIECES;
    bool hashed = vg_get_le16(dec->rec + 2) & MIG_PIECES_HASHED;

    if (mask == 0 || len != MIG_PIECES_HDR_SIZE +
                                (uint64_t)__builtin_popcountll(mask) * piece) {
        return dec_fail(dec, EINVAL,
                        "mask %016" PRIx64 " of %u-byte pieces does not "
                        "match payload length %u",
                        mask, piece, len);
    }
    if (!hashed && vg_get_le64(p + 16)) {
        return dec_fail(dec, EINVAL, "page hash %016" PRIx64 " not flagged",
                        vg_get_le64(p + 16));
    }
    if (dec_range(dec, page, 1) < 0) {
        return dec->failed;
    }
    if (!((dec->brought[page / 64] >> (page % 64)) & 1)) {
        return dec_fail(dec, EINVAL,
                        "page %" PRIu64 ": pieces of a page that no record "
                        "before brought",
                        page);
    }
    return 0;
}

/* A PAGE_PIECES record: its pieces written over the page.  A stale page
 * is whole again only where the record carries the page's hash and the
 * page as written has it. */
/* A PAGE_PIECES record's shape, and a stale page only with its hash. */
static int pieces_admit(struct mig_dec *dec, const uint8_t *p, uint32_t len)
{
    uint64_t page = vg_get_le64(p);
    bool hashed = vg_get_le16(dec->rec + 2) & MIG_PIECES_HASHED;
    int ret = pieces_shape(dec, p, len);

    if (ret == 0 && !hashed && mig_dec_page_stale(dec, page)) {
        return dec_fail(dec, EBADMSG,
                        "page %" PRIu64 " is stale, and a record without "
                        "its page hash cannot mend it",
                        page);
    }
    return ret;
}

/* A stale page @page whose pieces gave it @hash, listed @listed. */
static int pieces_mended(struct mig_dec *dec, uint64_t page, uint64_t hash,
                         uint64_t listed)
{
    if (hash != listed) {
        return dec_fail(dec, EBADMSG,
                        "page %" PRIu64 ": hash %016" PRIx64
                        " with its pieces, listed %016" PRIx64,
                        page, hash, listed);
    }
    return 0;
}

static int dec_pieces(struct mig_dec *dec, const uint8_t *p, uint32_t len)
{
    uint64_t page = vg_get_le64(p), hash = 0;
    bool stale = mig_dec_page_stale(dec, page);
    struct vg_error se;
    int ret = pieces_admit(dec, p, len);

    if (ret == 0 && !dec->sink.pieces) {
        return dec_fail(dec, ENOTSUP, "this destination cannot write pieces");
    }
    if (ret == 0) {
        ret = dec->sink.pieces(
            dec->sink.opaque, page, vg_get_le64(p + 8),
            dec->cfg.page_size / MIG_PAGE_PIECES, pieces_data(dec, p),
            dec->version >= MIG_PIECE_HASH_VERSION ? dec->hashes : NULL,
            stale ? &hash : NULL, &se);
        ret = ret < 0 ? dec_sink_failed(dec, ret, &se) : 0;
    }
    if (ret == 0 && stale) {
        ret = pieces_mended(dec, page, hash, vg_get_le64(p + 16));
    }
    if (ret == 0) {
        set_stale(dec, page, 1, false);
    }
    return ret;
}

static int dec_zeros(struct mig_dec *dec, const uint8_t *p)
{
    uint64_t first = vg_get_le64(p), count = vg_get_le64(p + 8);
    struct vg_error se;
    int ret = dec_range(dec, first, count);

    if (ret == 0 && count > MIG_ZEROS_MAX_PAGES) {
        ret = dec_fail(dec, EINVAL,
                       "zero run of %" PRIu64 " pages exceeds %u per record",
                       count, MIG_ZEROS_MAX_PAGES);
    }
    if (ret == 0) {
        ret = dec->sink.zeros(dec->sink.opaque, first, count, &se);
        if (ret < 0) {
            return dec_sink_failed(dec, ret, &se);
        }
        set_brought(dec, first, count);
        set_stale(dec, first, count, false);
    }
    return ret;
}

static int dec_state(struct mig_dec *dec, const uint8_t *p, uint32_t len)
{
    struct vg_error se;
    int ret;

    if (dec->seen_state) {
        return dec_fail(dec, EINVAL, "duplicate DEVICE_STATE");
    }
    ret = dec->sink.state(dec->sink.opaque, p, len, &se);
    if (ret < 0) {
        return dec_sink_failed(dec, ret, &se);
    }
    dec->seen_state = true;
    return 0;
}

static int dec_postcopy(struct mig_dec *dec, const uint8_t *p)
{
    struct mig_postcopy_info info;
    struct vg_error se;
    size_t alen;
    int ret;

    if (dec->version < 2 || dec->seen_postcopy || dec->seen_state) {
        return dec_fail(dec, EINVAL, "POSTCOPY %s",
                        dec->version < 2  ? "in a version 1 stream"
                        : dec->seen_state ? "after DEVICE_STATE"
                                          : "twice");
    }
    info.npages = vg_get_le64(p);
    info.pending = vg_get_le64(p + 8);
    memcpy(info.token, p + 16, MIG_POSTCOPY_TOKEN);
    memcpy(info.addr, p + 32, MIG_POSTCOPY_ADDR);
    alen = strnlen(info.addr, MIG_POSTCOPY_ADDR);
    if (info.npages != dec->npages || info.pending > info.npages) {
        return dec_fail(dec, ERANGE,
                        "POSTCOPY of %" PRIu64 " pending of %" PRIu64
                        " pages, VRAM has %" PRIu64,
                        info.pending, info.npages, dec->npages);
    }
    if (alen == 0 || alen == MIG_POSTCOPY_ADDR) {
        return dec_fail(dec, EINVAL, "POSTCOPY address is %s",
                        alen ? "not NUL-terminated" : "empty");
    }
    if (vg_get_le32(p + 140)) {
        return dec_fail(dec, EINVAL, "POSTCOPY reserved bytes %#x, expected 0",
                        vg_get_le32(p + 140));
    }
    if (!dec->sink.postcopy) {
        return dec_fail(dec, ENOTSUP,
                        "POSTCOPY: this destination cannot fetch pages");
    }
    ret = dec->sink.postcopy(dec->sink.opaque, &info, &se);
    if (ret < 0) {
        return dec_sink_failed(dec, ret, &se);
    }
    dec->seen_postcopy = true;
    return 0;
}

static int dec_end(struct mig_dec *dec, const uint8_t *p)
{
    uint64_t digest = vg_digest_value(dec->digest);

    uint64_t first_stale, stale = mig_dec_stale_pages(dec, &first_stale);

    if (!dec->seen_state) {
        return dec_fail(dec, EINVAL, "END before any DEVICE_STATE");
    }
    /* A post-copy fetches the pages written since they went
     * (mig_load_check_stale). */
    if (stale && !dec->seen_postcopy) {
        return dec_fail(dec, EBADMSG,
                        "%" PRIu64 " pages stale, the first page %" PRIu64
                        ": their last PAGES_LISTED data did not match the "
                        "listed hashes, and no record brought them since",
                        stale, first_stale);
    }
    if (vg_get_le64(p + 8) != dec->offset ||
        vg_get_le64(p + 16) != dec->index) {
        return dec_fail(dec, EINVAL,
                        "END counts %" PRIu64 " bytes in %" PRIu64
                        " records, received %" PRIu64 " bytes in %" PRIu64,
                        vg_get_le64(p + 8), vg_get_le64(p + 16), dec->offset,
                        dec->index);
    }
    if (vg_get_le64(p) != digest) {
        return dec_fail(dec, EBADMSG,
                        "stream digest %016" PRIx64 ", computed %016" PRIx64,
                        vg_get_le64(p), digest);
    }
    dec->seen_end = true;
    return 0;
}

static int dec_dispatch(struct mig_dec *dec, const uint8_t *p, uint32_t len)
{
    switch (vg_get_le16(dec->rec)) {
    case MIG_REC_HEADER:
        return dec_header(dec, p);
    case MIG_REC_PAGES:
    case MIG_REC_PAGES_LISTED:
        return dec_pages(dec, p, len);
    case MIG_REC_ZEROS:
        return dec_zeros(dec, p);
    case MIG_REC_PAGE_PIECES:
        return dec_pieces(dec, p, len);
    case MIG_REC_DEVICE_STATE:
        return dec_state(dec, p, len);
    case MIG_REC_POSTCOPY:
        return dec_postcopy(dec, p);
    default: /* MIG_REC_END: rec_bounds admits no other type */
        return dec_end(dec, p);
    }
}

/* A version 6 PAGE_PIECES record, its checksum over its pieces' hashes. */
static bool hashed_pieces(const struct mig_dec *dec)
{
    return dec->version >= MIG_PIECE_HASH_VERSION &&
           vg_get_le16(dec->rec) == MIG_REC_PAGE_PIECES;
}

/* The checksum of the record in @rec, payload @p of @len bytes: version 2
 * PAGES records take their page hashes (computed here, into @hashes and
 * @hash_le) in place of the pages, PAGES_LISTED records the hashes they
 * list (those of their pages are computed all the same, for note_stale),
 * version 6 PAGE_PIECES records their pieces' hashes (into @hashes; as
 * many whole pieces as the length holds: pieces_shape() checks it). */
static int dec_checksum(struct mig_dec *dec, const uint8_t *p, uint32_t len,
                        uint64_t *sum)
{
    uint32_t count, piece = dec->cfg.page_size / MIG_PAGE_PIECES;

    if (hashed_pieces(dec)) {
        *sum = mig_pieces_checksum(dec->rec, p, pieces_data(dec, p), piece,
                                   (len - MIG_PIECES_HDR_SIZE) / piece,
                                   dec->hashes);
        return 0;
    }
    if (!hashed_pages(dec)) {
        *sum = mig_rec_checksum(dec->rec, payload(dec, p), len);
        return 0;
    }
    if (pages_shape(dec, p, len) < 0) {
        return dec->failed;
    }
    count = vg_get_le32(p + 8);
    if (dec->sink.write_hashed && !dec->placed) {
        struct vg_error se;
        int ret = dec_range(dec, vg_get_le64(p), count);

        ret = ret ? ret
                  : dec->sink.write_hashed(dec->sink.opaque, vg_get_le64(p),
                                           count, pages_data(dec, p),
                                           dec->hashes, &se);
        if (ret < 0) {
            return dec->failed ? dec->failed : dec_sink_failed(dec, ret, &se);
        }
        dec->written = true;
        for (uint32_t i = 0; i < count; i++) {
            vg_put_le64(dec->hash_le + 8 * i, dec->hashes[i]);
        }
    } else if (dec->sink.hash_pages) {
        dec->sink.hash_pages(dec->sink.opaque, pages_data(dec, p), count,
                             dec->hashes);
        for (uint32_t i = 0; i < count; i++) {
            vg_put_le64(dec->hash_le + 8 * i, dec->hashes[i]);
        }
    } else {
        mig_stream_page_hashes(dec->version, pages_data(dec, p), count,
                               dec->cfg.page_size, dec->hash_le, dec->hashes);
    }
    dec->written = dec->written || dec->placed;
    vg_digest_reset(dec->check, vg_get_le64(dec->rec));
    vg_digest_update(dec->check, p, MIG_RUN_HDR_SIZE);
    /* A PAGES_LISTED record's checksum covers the hashes it lists. */
    vg_digest_update(dec->check,
                     is_listed(dec) ? p + MIG_RUN_HDR_SIZE : dec->hash_le,
                     (size_t)count * 8);
    *sum = vg_digest_value(dec->check);
    return 0;
}

/* The record's share of the stream digest. */
static void dec_digest(struct mig_dec *dec)
{
    if (is_listed(dec)) {
        vg_digest_update(dec->digest, dec->rec, headers_size(dec));
    } else if (hashed_pages(dec)) {
        vg_digest_update(dec->digest, dec->rec, MIG_RUN_HEADERS_SIZE);
        vg_digest_update(dec->digest, dec->hash_le,
                         (size_t)vg_get_le32(dec->rec + 24) * 8);
    } else if (hashed_pieces(dec)) {
        vg_digest_update(dec->digest, dec->rec,
                         mig_rec_digest_size(dec->version, dec->rec));
    } else if (vg_get_le16(dec->rec) != MIG_REC_END) {
        vg_digest_update(dec->digest, dec->rec, MIG_REC_HDR_SIZE);
        vg_digest_update(dec->digest, payload(dec, dec->rec + MIG_REC_HDR_SIZE),
                         dec->want - MIG_REC_HDR_SIZE);
    }
}

/* A whole record is in: verify its checksum, apply it, move on. */
static int dec_record(struct mig_dec *dec)
{
    const uint8_t *p = dec->rec + MIG_REC_HDR_SIZE;
    uint32_t len = (uint32_t)(dec->want - MIG_REC_HDR_SIZE);
    uint64_t sum = 0;
    int ret;

    dec->written = false;
    ret = dec_checksum(dec, p, len, &sum);

    if (ret < 0) {
        return ret;
    }
    if (sum != vg_get_le64(dec->rec + 8)) {
        return dec_fail(dec, EBADMSG,
                        "checksum %016" PRIx64 ", computed %016" PRIx64
                        " over %u payload bytes",
                        vg_get_le64(dec->rec + 8), sum, len);
    }
    ret = dec_dispatch(dec, p, len);
    if (ret < 0) {
        return ret;
    }
    dec_digest(dec);
    dec->offset += dec->want;
    dec->index++;
    dec->have = 0;
    dec->want = MIG_REC_HDR_SIZE;
    return 0;
}

/* A job of the batch applied, on one of the sink's threads: its pieces'
 * hashes and checksum, then the sink's write. */
static void job_apply(void *arg, uint64_t i)
{
    struct mig_dec *dec = arg;
    struct dec_job *j = &dec->batch[i];
    const uint8_t *p = j->head + MIG_REC_HDR_SIZE;
    uint32_t piece = dec->cfg.page_size / MIG_PAGE_PIECES;
    uint32_t len = vg_get_le32(j->head + 4);

    j->sum =
        mig_pieces_checksum(j->head, p, j->pieces, piece,
                            (len - MIG_PIECES_HDR_SIZE) / piece, j->piece_hash);
    j->ret = dec->sink.pieces_mt(
        dec->sink.opaque, vg_get_le64(p), vg_get_le64(p + 8), piece, j->pieces,
        j->piece_hash, j->stale ? &j->hash : NULL, &j->err);
}

/* A job's record taken, in stream order: its checksum, the sink's write
 * and a stale page's hash checked, as dec_record() would, and errors
 * named after the record. */
static int job_take(struct mig_dec *dec, struct dec_job *j)
{
    const uint8_t *p = j->head + MIG_REC_HDR_SIZE;
    uint32_t len = vg_get_le32(j->head + 4);
    uint64_t page = vg_get_le64(p);

    if (j->sum == vg_get_le64(j->head + 8) && j->ret == 0 &&
        (!j->stale || j->hash == vg_get_le64(p + 16))) {
        set_stale(dec, page, 1, false);
        vg_digest_update(dec->digest, j->head, sizeof(j->head));
        return 0;
    }
    memcpy(dec->rec, j->head, sizeof(j->head));
    dec->have = sizeof(j->head);
    dec->offset = j->offset;
    dec->index = j->index;
    if (j->sum != vg_get_le64(j->head + 8)) {
        return dec_fail(dec, EBADMSG,
                        "checksum %016" PRIx64 ", computed %016" PRIx64
                        " over %u payload bytes",
                        vg_get_le64(j->head + 8), j->sum, len);
    }
    if (j->ret < 0) {
        return dec_sink_failed(dec, j->ret, &j->err);
    }
    return pieces_mended(dec, page, j->hash, vg_get_le64(p + 16));
}

/* Apply the batch: every job on the sink's threads, then each taken in
 * order until one fails. */
static void dec_flush(struct mig_dec *dec)
{
    unsigned n = dec->batched;

    dec->batched = 0;
    if (n == 0 || dec->failed) {
        return;
    }
    dec->sink.run(dec->sink.opaque, n, job_apply, dec);
    for (unsigned i = 0; i < n && !dec->failed; i++) {
        job_take(dec, &dec->batch[i]);
    }
}

/* Whether page @page has a job in the batch. */
static bool batch_has(const struct mig_dec *dec, uint64_t page)
{
    for (unsigned i = 0; i < dec->batched; i++) {
        if (dec->batch_page[i] == page) {
            return true;
        }
    }
    return false;
}

/* The version 6 PAGE_PIECES record in @rec, whole at data_at, joins the
 * batch, checked as dec_record() would but for its checksum; after the
 * batch's record of its page, if the batch has one. */
static void dec_queue(struct mig_dec *dec)
{
    const uint8_t *p = dec->rec + MIG_REC_HDR_SIZE;
    uint64_t page = vg_get_le64(p);
    struct dec_job *j;

    if (batch_has(dec, page)) {
        dec_flush(dec);
    }
    if (dec->failed ||
        pieces_admit(dec, p, (uint32_t)(dec->want - MIG_REC_HDR_SIZE)) < 0) {
        return;
    }
    j = &dec->batch[dec->batched];
    dec->batch_page[dec->batched++] = page;
    memcpy(j->head, dec->rec, sizeof(j->head));
    j->pieces = pieces_data(dec, p);
    j->offset = dec->offset;
    j->index = dec->index;
    j->stale = mig_dec_page_stale(dec, page);
    dec->offset += dec->want;
    dec->index++;
    dec->have = 0;
    dec->want = MIG_REC_HDR_SIZE;
    if (dec->batched == DEC_BATCH_MAX) {
        dec_flush(dec);
    }
}

/* A whole record is in: into the batch where it may go, else applied
 * after the batch. */
static void dec_complete(struct mig_dec *dec)
{
    if (dec->batch && dec->data_at && hashed_pieces(dec)) {
        dec_queue(dec);
    } else {
        dec_flush(dec);
        if (!dec->failed) {
            dec_record(dec);
        }
    }
    dec->data_at = NULL;
}

/* Bytes to copy into @rec next, of @len at hand: up to the record's end,
 * but one that may be read in place stops before that part
 * (in_place_from()), so that it is read there if all of it is at hand. */
static size_t dec_take(const struct mig_dec *dec, size_t len)
{
    size_t stop = dec->want, from = in_place_from(dec);

    if (from && dec->have < from) {
        stop = from;
    }
    return stop - dec->have < len ? stop - dec->have : len;
}

int mig_dec_feed(struct mig_dec *dec, const void *data, size_t len,
                 struct vg_error *err)
{
    const uint8_t *in = data;

    while (len && !dec->failed) {
        size_t n = dec_take(dec, len);

        if (dec->seen_end) {
            dec_fail(dec, EINVAL, "%zu bytes after the END record", len);
            break;
        }
        memcpy(dec->rec + dec->have, in, n);
        dec->have += n;
        in += n;
        len -= n;
        if (dec->have == MIG_REC_HDR_SIZE && dec->want == MIG_REC_HDR_SIZE) {
            dec_rec_header(dec);
        }
        if (!dec->failed && in_place_from(dec) &&
            dec->have == in_place_from(dec) && len >= dec->want - dec->have) {
            dec->data_at = in;        /* the whole record is at hand */
            if (!hashed_pages(dec)) { /* PAGE_PIECES: its header, checked */
                memcpy(dec->rec + dec->have, in, MIG_PIECES_HDR_SIZE);
            }
            dec->in_place += dec->want - dec->have -
                             (hashed_pages(dec) ? 0 : MIG_PIECES_HDR_SIZE);
            in += dec->want - dec->have;
            len -= dec->want - dec->have;
            dec->have = dec->want;
        }
        if (!dec->failed && dec->have == dec->want &&
            dec->want > MIG_REC_HDR_SIZE) {
            dec_complete(dec);
        }
    }
    dec_flush(dec); /* its pieces lie in @data */
    if (dec->failed && err) {
        *err = dec->error;
    }
    return dec->failed;
}

/* The page data of the version 2 PAGES record whose headers were fed
 * last, already at their place @at, VRAM offset @vram_off. */
static void dec_place(struct mig_dec *dec, uint64_t vram_off, const uint8_t *at,
                      size_t len)
{
    uint64_t first = vg_get_le64(dec->rec + MIG_REC_HDR_SIZE);

    if (dec->seen_end) {
        dec_fail(dec, EINVAL, "%zu bytes after the END record", len);
        return;
    }
    if (dec->want == MIG_REC_HDR_SIZE || !hashed_pages(dec) ||
        dec->have != headers_size(dec)) {
        dec_fail(dec, EINVAL,
                 "%zu bytes of page data in place at VRAM offset %#" PRIx64
                 " where no version 2 PAGES record's page data begin",
                 len, vram_off);
        return;
    }
    if (len != dec->want - dec->have || first >= dec->npages ||
        vram_off != first * dec->cfg.page_size) {
        dec_fail(dec, EINVAL,
                 "%zu bytes of page data in place at VRAM offset %#" PRIx64
                 ", the record's are %zu bytes from page %" PRIu64,
                 len, vram_off, dec->want - dec->have, first);
        return;
    }
    dec->data_at = at;
    dec->placed = true;
    dec->in_place += len;
    dec->have = dec->want;
    dec_record(dec);
    dec->data_at = NULL;
    dec->placed = false;
}

int mig_dec_feed_placed(struct mig_dec *dec, uint64_t vram_off,
                        const uint8_t *at, size_t len, struct vg_error *err)
{
    if (!dec->failed) {
        dec_place(dec, vram_off, at, len);
    }
    if (dec->failed && err) {
        *err = dec->error;
    }
    return dec->failed;
}

int mig_dec_finish(struct mig_dec *dec, struct vg_error *err)
{
    if (dec->failed) {
        if (err) {
            *err = dec->error;
        }
        return dec->failed;
    }
    if (dec->have) {
        return vg_error_set(err, EINVAL,
                            "migration stream truncated: %s record #%" PRIu64
                            " at offset %" PRIu64 " has %zu of %zu bytes",
                            dec->have >= 2 ? mig_rec_name(vg_get_le16(dec->rec))
                                           : "a",
                            dec->index, dec->offset, dec->have, dec->want);
    }
    if (!dec->seen_end) {
        return mig_stream_truncated(err, dec->offset, dec->index,
                                    dec->seen_header, dec->seen_state);
    }
    return 0;
}
