/*
 * stream-file.c -- a migration stream in a file, read lazily (see
 * stream-file.h).
 */
#include "stream-file.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/le.h"

/* latest[]: 0 = not in the stream, SF_ZERO = cleared by ZEROS, else the
 * index + 1 of the PAGES record that wrote the page last. */
#define SF_ZERO  UINT32_MAX
#define SF_HEADS (MIG_REC_HDR_SIZE + MIG_RUN_HDR_SIZE)

struct sf_extent {
    uint64_t pos; /* stream offset */
    uint64_t off; /* file offset */
    uint64_t len;
};

struct sf_rec {
    uint64_t pos;           /* stream offset of its record header */
    uint8_t head[SF_HEADS]; /* record header (+ a PAGES run header) */
    uint8_t *bytes;         /* a small record, whole */
    uint64_t *hashes;       /* a PAGES record's page hashes, once read */
    uint32_t next_pieces;   /* PAGE_PIECES: index + 1 of the next one of
                               its page, 0: none (yet) */
};

/* The last two PAGES records read, payload whole, and their page hashes. */
struct sf_reader {
    struct sf *s;
    uint8_t *buf[2];
    uint64_t *hashes[2];
    size_t buf_rec[2]; /* record index + 1, 0: none */
    unsigned buf_old;  /* the one to reuse next */
};

struct sf {
    struct sf_config cfg;
    uint64_t npages;
    uint64_t file_size;
    struct sf_extent *ext;
    size_t next, ext_cap;
    uint64_t total; /* stream bytes handed over */
    uint64_t scan;  /* stream offset of the next record to scan */
    struct sf_rec *rec;
    size_t nrec, rec_cap;
    uint64_t records; /* records scanned, END excluded */
    uint32_t *latest;
    /* Per page, index + 1 of the first and the last PAGE_PIECES record
     * since the record in latest[] (0: none); next_pieces links them. */
    uint32_t *pieces_head, *pieces_tail;
    uint32_t version; /* the HEADER's */
    uint32_t run_max; /* the most page data in a run, by the HEADER */
    bool seen_header, seen_state, seen_end;
    uint64_t end_digest;
    /* Guards failed, error and each record's hashes while readers run. */
    pthread_mutex_t lock;
    int failed;
    struct vg_error error;
    struct sf_reader *own; /* sf_read()'s and sf_verify()'s */
};

static int __attribute__((format(printf, 4, 5)))
sf_fail(struct sf *s, struct vg_error *err, int code, const char *fmt, ...)
{
    va_list ap;
    int ret;

    pthread_mutex_lock(&s->lock);
    if (!s->failed) {
        va_start(ap, fmt);
        vsnprintf(s->error.msg, sizeof(s->error.msg), fmt, ap);
        va_end(ap);
        s->error.code = code;
        s->failed = -code;
    }
    if (err) {
        *err = s->error;
    }
    ret = s->failed;
    pthread_mutex_unlock(&s->lock);
    return ret;
}

/* The stream's sticky error, if any, into *@err. */
static int sf_failed(struct sf *s, struct vg_error *err)
{
    int ret;

    pthread_mutex_lock(&s->lock);
    ret = s->failed;
    if (ret) {
        *err = s->error;
    }
    pthread_mutex_unlock(&s->lock);
    return ret;
}

int sf_reader_new(struct sf *s, struct sf_reader **out, struct vg_error *err)
{
    size_t nhash = MIG_REC_MAX / s->cfg.stream.page_size + 1;
    struct sf_reader *rd = calloc(1, sizeof(*rd));

    if (rd) {
        rd->s = s;
        for (unsigned i = 0; i < 2; i++) {
            rd->buf[i] = malloc(MIG_REC_MAX);
            rd->hashes[i] = malloc(nhash * sizeof(uint64_t));
        }
    }
    if (!rd || !rd->buf[0] || !rd->buf[1] || !rd->hashes[0] || !rd->hashes[1]) {
        sf_reader_free(rd);
        return vg_error_set(err, ENOMEM, "save file: no memory for a reader");
    }
    *out = rd;
    return 0;
}

void sf_reader_free(struct sf_reader *rd)
{
    if (rd) {
        for (unsigned i = 0; i < 2; i++) {
            free(rd->buf[i]);
            free(rd->hashes[i]);
        }
        free(rd);
    }
}

int sf_new(const struct sf_config *cfg, struct sf **out, struct vg_error *err)
{
    uint32_t ps = cfg->stream.page_size;
    struct sf *s = calloc(1, sizeof(*s));
    struct stat st;

    if (!s) {
        close(cfg->fd);
        return vg_error_set(err, ENOMEM, "save file reader");
    }
    s->cfg = *cfg;
    pthread_mutex_init(&s->lock, NULL);
    if (fstat(cfg->fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        sf_free(s);
        return vg_error_set(err, EINVAL, "the save file is not a regular file");
    }
    if (ps < MIG_PAGE_SIZE_MIN || ps > MIG_PAGE_SIZE_MAX || (ps & (ps - 1)) ||
        cfg->stream.vram_size % ps || cfg->stream.vram_size == 0) {
        sf_free(s);
        return vg_error_set(err, EINVAL, "save file reader: bad configuration");
    }
    s->file_size = (uint64_t)st.st_size;
    s->npages = cfg->stream.vram_size / ps;
    s->run_max = MIG_RUN_SMALL_BYTES; /* until the HEADER says */
    s->latest = calloc(s->npages, sizeof(*s->latest));
    s->pieces_head = calloc(s->npages, sizeof(*s->pieces_head));
    s->pieces_tail = calloc(s->npages, sizeof(*s->pieces_tail));
    if (!s->latest || !s->pieces_head || !s->pieces_tail ||
        sf_reader_new(s, &s->own, err) < 0) {
        sf_free(s);
        return vg_error_set(err, ENOMEM, "save file index of %" PRIu64 " pages",
                            cfg->stream.vram_size / ps);
    }
    *out = s;
    return 0;
}

void sf_free(struct sf *s)
{
    if (!s) {
        return;
    }
    for (size_t i = 0; i < s->nrec; i++) {
        free(s->rec[i].bytes);
        free(s->rec[i].hashes);
    }
    if (s->cfg.fd >= 0) {
        close(s->cfg.fd);
    }
    free(s->rec);
    free(s->ext);
    free(s->latest);
    free(s->pieces_head);
    free(s->pieces_tail);
    sf_reader_free(s->own);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

uint64_t sf_bytes(const struct sf *s)
{
    return s->total;
}

/* ------------------------------------------------------------ reading */

/* The extent holding stream offset @pos (< total). */
static const struct sf_extent *extent_of(const struct sf *s, uint64_t pos)
{
    size_t lo = 0, hi = s->next;

    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;

        if (s->ext[mid].pos <= pos) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return &s->ext[lo];
}

/* Stream bytes [@pos, +@len) into @dst. */
static int read_stream(struct sf *s, uint64_t pos, void *dst, size_t len,
                       struct vg_error *err)
{
    uint8_t *out = dst;

    while (len) {
        const struct sf_extent *e = extent_of(s, pos);
        uint64_t in = pos - e->pos;
        size_t n = e->len - in < len ? (size_t)(e->len - in) : len;
        ssize_t got = pread(s->cfg.fd, out, n, (off_t)(e->off + in));

        if (got <= 0) {
            return sf_fail(s, err, got < 0 ? errno : EIO,
                           "save file: reading stream offset %" PRIu64
                           " at file offset %" PRIu64 ": %s",
                           pos, e->off + in,
                           got < 0 ? strerror(errno) : "the file ends there");
        }
        out += got;
        pos += (uint64_t)got;
        len -= (size_t)got;
    }
    return 0;
}

/* -------------------------------------------------------------- scanning */

/* Fail the stream: "<TYPE> record #<index> at offset <off>: <what>". */
static int __attribute__((format(printf, 4, 5)))
rec_fail(struct sf *s, uint32_t type, int code, const char *fmt, ...)
{
    char what[VG_ERROR_MAX - 64];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return sf_fail(s, NULL, code,
                   "%s record #%" PRIu64 " at offset %" PRIu64 ": %s",
                   mig_rec_name(type), s->records, s->scan, what);
}

static int add_rec(struct sf *s, const uint8_t *head, uint8_t *bytes)
{
    struct sf_rec *r;

    if (s->nrec == s->rec_cap) {
        size_t cap = s->rec_cap ? 2 * s->rec_cap : 64;

        r = realloc(s->rec, cap * sizeof(*r));
        if (!r) {
            free(bytes);
            return sf_fail(s, NULL, ENOMEM,
                           "save file: no memory for its "
                           "record index");
        }
        s->rec = r;
        s->rec_cap = cap;
    }
    r = &s->rec[s->nrec++];
    *r = (struct sf_rec){.pos = s->scan, .bytes = bytes};
    memcpy(r->head, head, SF_HEADS);
    return 0;
}

/* Pages [first, +count) inside VRAM and before DEVICE_STATE. */
static int scan_range(struct sf *s, uint32_t type, uint64_t first,
                      uint64_t count)
{
    if (s->seen_state) {
        return rec_fail(s, type, EINVAL, "page data after DEVICE_STATE");
    }
    if (count == 0 || first >= s->npages || count > s->npages - first) {
        return rec_fail(s, type, ERANGE,
                        "pages %" PRIu64 "+%" PRIu64 " outside VRAM of %" PRIu64
                        " pages",
                        first, count, s->npages);
    }
    return 0;
}

/* A PAGES_LISTED record's header: its page data follow its hashes. */
static bool listed(const uint8_t *head)
{
    return vg_get_le16(head) == MIG_REC_PAGES_LISTED;
}

/* Where a PAGES or PAGES_LISTED record of @count pages, whose headers
 * are @head, has its page data in its payload. */
static size_t data_at(const uint8_t *head, uint32_t count)
{
    return MIG_RUN_HDR_SIZE + (listed(head) ? (size_t)count * 8 : 0);
}

/* A PAGES or PAGES_LISTED record, whose record and run headers are @head:
 * located, not read. */
static int scan_pages(struct sf *s, const uint8_t *head, uint32_t len)
{
    uint32_t ps = s->cfg.stream.page_size, count, type = vg_get_le16(head);
    uint64_t first;
    int ret;

    first = vg_get_le64(head + 16);
    count = vg_get_le32(head + 24);
    if (vg_get_le32(head + 28) || count > s->run_max / ps ||
        len != data_at(head, count) + (uint64_t)count * ps) {
        return rec_fail(s, type, EINVAL,
                        "run of %u pages of %u bytes (reserved %#x) does not "
                        "match payload length %u",
                        count, ps, vg_get_le32(head + 28), len);
    }
    ret = scan_range(s, type, first, count);
    if (ret == 0) {
        ret = add_rec(s, head, NULL);
    }
    for (uint32_t i = 0; ret == 0 && i < count; i++) {
        s->latest[first + i] = (uint32_t)s->nrec;
        s->pieces_head[first + i] = s->pieces_tail[first + i] = 0;
    }
    return ret;
}

/* A PAGE_PIECES record (version 4), read whole and its checksum checked:
 * of a page an earlier record brought, its mask the shape of its length.
 * Its pieces go over that page when it is read (linked once it is
 * indexed, link_pieces()). */
static int scan_pieces(struct sf *s, const uint8_t *hdr, const uint8_t *p,
                       uint32_t len)
{
    uint64_t page = vg_get_le64(p), mask = vg_get_le64(p + 8);
    uint32_t piece = s->cfg.stream.page_size / MIG_PAGE_PIECES;
    int ret = scan_range(s, MIG_REC_PAGE_PIECES, page, 1);

    if (ret == 0 && !(vg_get_le16(hdr + 2) & MIG_PIECES_HASHED) &&
        vg_get_le64(p + 16)) {
        ret = rec_fail(s, MIG_REC_PAGE_PIECES, EINVAL,
                       "page hash %016" PRIx64 " not flagged",
                       vg_get_le64(p + 16));
    }
    if (ret == 0 && (mask == 0 ||
                     len != MIG_PIECES_HDR_SIZE +
                                (uint64_t)__builtin_popcountll(mask) * piece)) {
        ret = rec_fail(s, MIG_REC_PAGE_PIECES, EINVAL,
                       "mask %016" PRIx64 " of %u-byte pieces does not match "
                       "payload length %u",
                       mask, piece, len);
    }
    if (ret == 0 && s->latest[page] == 0) {
        ret = rec_fail(s, MIG_REC_PAGE_PIECES, EINVAL,
                       "page %" PRIu64 ": pieces of a page that no record "
                       "before brought",
                       page);
    }
    return ret;
}

/* The PAGE_PIECES record just indexed (the last) goes after its page's. */
static void link_pieces(struct sf *s)
{
    uint64_t page = vg_get_le64(s->rec[s->nrec - 1].bytes + MIG_REC_HDR_SIZE);
    uint32_t tail = s->pieces_tail[page];

    if (tail) {
        s->rec[tail - 1].next_pieces = (uint32_t)s->nrec;
    } else {
        s->pieces_head[page] = (uint32_t)s->nrec;
    }
    s->pieces_tail[page] = (uint32_t)s->nrec;
}

/* The page hash of the stream's version of the page at @data. */
static uint64_t page_hash(const struct sf *s, const uint8_t *data)
{
    return mig_stream_page_hash(s->version, data, s->cfg.stream.page_size,
                                NULL);
}

static int scan_header(struct sf *s, const uint8_t *p)
{
    struct vg_error e = {0};
    uint32_t version = 0;

    if (s->seen_header) {
        return rec_fail(s, MIG_REC_HEADER, EINVAL, "duplicate HEADER");
    }
    if (mig_header_check(&s->cfg.stream, p, &version, &s->run_max, &e) < 0) {
        return rec_fail(s, MIG_REC_HEADER, e.code, "%s", e.msg);
    }
    if (version < 2) {
        return rec_fail(s, MIG_REC_HEADER, ENOTSUP,
                        "a version %u stream cannot be read on demand",
                        version);
    }
    s->version = version;
    s->seen_header = true;
    if (s->cfg.sink.header) {
        s->cfg.sink.header(s->cfg.sink.opaque, version);
    }
    return 0;
}

static int scan_zeros(struct sf *s, const uint8_t *p)
{
    uint64_t first = vg_get_le64(p), count = vg_get_le64(p + 8);
    struct vg_error e = {0};
    int ret = scan_range(s, MIG_REC_ZEROS, first, count);

    if (ret == 0 && count > MIG_ZEROS_MAX_PAGES) {
        return rec_fail(s, MIG_REC_ZEROS, EINVAL,
                        "zero run of %" PRIu64 " pages exceeds %u per record",
                        count, MIG_ZEROS_MAX_PAGES);
    }
    if (ret == 0 && s->cfg.sink.zeros(s->cfg.sink.opaque, first, count, &e)) {
        return rec_fail(s, MIG_REC_ZEROS, e.code, "%s", e.msg);
    }
    for (uint64_t i = 0; ret == 0 && i < count; i++) {
        s->latest[first + i] = SF_ZERO;
        s->pieces_head[first + i] = s->pieces_tail[first + i] = 0;
    }
    return ret;
}

static int scan_state(struct sf *s, const uint8_t *p, uint32_t len)
{
    struct vg_error e = {0};

    if (s->seen_state) {
        return rec_fail(s, MIG_REC_DEVICE_STATE, EINVAL,
                        "duplicate DEVICE_STATE");
    }
    if (s->cfg.sink.state(s->cfg.sink.opaque, p, len, &e) < 0) {
        return rec_fail(s, MIG_REC_DEVICE_STATE, e.code, "%s", e.msg);
    }
    s->seen_state = true;
    return 0;
}

static int scan_end(struct sf *s, const uint8_t *p)
{
    if (!s->seen_state) {
        return rec_fail(s, MIG_REC_END, EINVAL, "END before any DEVICE_STATE");
    }
    if (vg_get_le64(p + 8) != s->scan || vg_get_le64(p + 16) != s->records) {
        return rec_fail(s, MIG_REC_END, EINVAL,
                        "END counts %" PRIu64 " bytes in %" PRIu64
                        " records, the file has %" PRIu64 " bytes in %" PRIu64,
                        vg_get_le64(p + 8), vg_get_le64(p + 16), s->scan,
                        s->records);
    }
    s->end_digest = vg_get_le64(p); /* checked by sf_verify() */
    s->seen_end = true;
    return 0;
}

/* The checksum of the small record at @rec, of @len payload bytes (its
 * bounds checked): a version 6 PAGE_PIECES record's over its pieces'
 * hashes. */
static uint64_t small_checksum(const struct sf *s, const uint8_t *rec,
                               uint32_t len)
{
    uint32_t piece = s->cfg.stream.page_size / MIG_PAGE_PIECES;
    const uint8_t *p = rec + MIG_REC_HDR_SIZE;

    if (s->version >= MIG_PIECE_HASH_VERSION &&
        vg_get_le16(rec) == MIG_REC_PAGE_PIECES) {
        return mig_pieces_checksum(rec, p, p + MIG_PIECES_HDR_SIZE, piece,
                                   (len - MIG_PIECES_HDR_SIZE) / piece, NULL);
    }
    return mig_rec_checksum(rec, p, len);
}

/* A small record, read whole and checked. */
static int scan_small(struct sf *s, const uint8_t *hdr, uint32_t len)
{
    uint32_t type = vg_get_le16(hdr);
    /* at least SF_HEADS bytes, zeroed past the record: add_rec() keeps
     * that many (a small record may be shorter, e.g. an 8-byte state) */
    size_t size = MIG_REC_HDR_SIZE + (size_t)len;
    uint8_t *rec = calloc(1, size < SF_HEADS ? SF_HEADS : size);
    const uint8_t *p = rec + MIG_REC_HDR_SIZE;
    int ret;

    if (!rec) {
        return sf_fail(s, NULL, ENOMEM, "save file: no memory for a record");
    }
    ret = read_stream(s, s->scan, rec, MIG_REC_HDR_SIZE + len, NULL);
    if (ret == 0 && small_checksum(s, rec, len) != vg_get_le64(rec + 8)) {
        ret = rec_fail(s, type, EBADMSG,
                       "checksum %016" PRIx64 ", computed %016" PRIx64
                       " over %u payload bytes",
                       vg_get_le64(rec + 8), small_checksum(s, rec, len), len);
    }
    if (ret == 0) {
        switch (type) {
        case MIG_REC_HEADER:
            ret = scan_header(s, p);
            break;
        case MIG_REC_ZEROS:
            ret = scan_zeros(s, p);
            break;
        case MIG_REC_DEVICE_STATE:
            ret = scan_state(s, p, len);
            break;
        case MIG_REC_END:
            ret = scan_end(s, p);
            break;
        case MIG_REC_PAGE_PIECES:
            ret = scan_pieces(s, rec, p, len);
            break;
        default: /* POSTCOPY: what it names is not in the file */
            ret = rec_fail(s, type, EINVAL, "POSTCOPY in a save file");
        }
    }
    if (ret < 0 || type == MIG_REC_END) {
        free(rec);
        return ret;
    }
    ret = add_rec(s, rec, rec);
    if (ret == 0 && type == MIG_REC_PAGE_PIECES) {
        link_pieces(s);
    }
    return ret;
}

/* The record at s->scan; *@whole false if not all of it is here yet. */
static int scan_record(struct sf *s, bool *whole)
{
    /* One read for the record header and a PAGES record's run header: a
     * restore scans a record per MiB of VRAM before the VM runs. */
    uint64_t here = s->total - s->scan;
    uint8_t hdr[SF_HEADS];
    uint32_t type, len, min, max;
    int ret =
        read_stream(s, s->scan, hdr, here < SF_HEADS ? here : SF_HEADS, NULL);

    if (ret < 0) {
        return ret;
    }
    type = vg_get_le16(hdr);
    len = vg_get_le32(hdr + 4);
    if (!mig_rec_bounds(s->cfg.stream.page_size, s->run_max, type, &min,
                        &max)) {
        return rec_fail(s, type, EINVAL, "unknown record type %u", type);
    }
    if ((vg_get_le16(hdr + 2) & ~mig_rec_flags(type)) || len < min ||
        len > max) {
        return rec_fail(s, type, EINVAL,
                        "flags %#x, payload length %u outside [%u, %u]",
                        vg_get_le16(hdr + 2), len, min, max);
    }
    if (!s->seen_header && type != MIG_REC_HEADER) {
        return rec_fail(s, type, EINVAL, "the stream must start with HEADER");
    }
    *whole = s->total - s->scan >= MIG_REC_HDR_SIZE + (uint64_t)len;
    if (!*whole) {
        return 0;
    }
    if ((type == MIG_REC_PAGES_LISTED && s->version < 3) ||
        (type == MIG_REC_PAGE_PIECES && s->version < 4)) {
        return rec_fail(s, type, EINVAL, "%s in a version %u stream",
                        mig_rec_name(type), s->version);
    }
    ret = type == MIG_REC_PAGES || type == MIG_REC_PAGES_LISTED
              ? scan_pages(s, hdr, len)
              : scan_small(s, hdr, len);
    if (ret == 0) {
        s->scan += MIG_REC_HDR_SIZE + (uint64_t)len;
        s->records += type != MIG_REC_END;
    }
    return ret;
}

static int add_extent(struct sf *s, uint64_t off, uint64_t len)
{
    struct sf_extent *e = s->next ? &s->ext[s->next - 1] : NULL;

    if (e && e->off + e->len == off) {
        e->len += len; /* contiguous in the file */
        return 0;
    }
    if (s->next == s->ext_cap) {
        size_t cap = s->ext_cap ? 2 * s->ext_cap : 256;

        e = realloc(s->ext, cap * sizeof(*e));
        if (!e) {
            return sf_fail(s, NULL, ENOMEM, "save file: no memory for extents");
        }
        s->ext = e;
        s->ext_cap = cap;
    }
    s->ext[s->next++] = (struct sf_extent){s->total, off, len};
    return 0;
}

int sf_add(struct sf *s, uint64_t off, uint64_t len, struct vg_error *err)
{
    bool whole = true;
    int ret = s->failed;

    if (ret == 0 &&
        (len == 0 || off > s->file_size || len > s->file_size - off)) {
        ret = sf_fail(s, NULL, ERANGE,
                      "extent %" PRIu64 "+%" PRIu64
                      " is not inside the save file of %" PRIu64 " bytes",
                      off, len, s->file_size);
    }
    if (ret == 0 && s->seen_end) {
        ret = sf_fail(s, NULL, EINVAL, "%" PRIu64 " bytes after the END record",
                      len);
    }
    if (ret == 0) {
        ret = add_extent(s, off, len);
    }
    if (ret == 0) {
        s->total += len;
    }
    while (ret == 0 && whole && !s->seen_end &&
           s->total - s->scan >= MIG_REC_HDR_SIZE) {
        ret = scan_record(s, &whole);
    }
    if (ret == 0 && s->seen_end && s->total > s->scan) {
        ret = sf_fail(s, NULL, EINVAL, "%" PRIu64 " bytes after the END record",
                      s->total - s->scan);
    }
    return ret < 0 ? sf_fail(s, err, -ret, "%s", s->error.msg) : 0;
}

int sf_end(struct sf *s, struct vg_error *err)
{
    if (s->failed) {
        *err = s->error;
        return s->failed;
    }
    if (!s->seen_end) {
        return mig_stream_truncated(err, s->scan, s->records, s->seen_header,
                                    s->seen_state);
    }
    return 0;
}

/* ------------------------------------------------------------ the pages */

uint64_t sf_pending(const struct sf *s, uint64_t *bm)
{
    uint64_t n = 0;

    memset(bm, 0, (s->npages + 63) / 64 * 8);
    for (uint64_t p = 0; p < s->npages; p++) {
        if ((s->latest[p] && s->latest[p] != SF_ZERO) || s->pieces_head[p]) {
            bm[p / 64] |= 1ull << (p % 64);
            n++;
        }
    }
    return n;
}

/* Publish record @r's @count page hashes for sf_verify(), once. */
static int keep_hashes(struct sf *s, struct sf_rec *r, const uint64_t *hashes,
                       uint32_t count, struct vg_error *err)
{
    bool kept;

    pthread_mutex_lock(&s->lock);
    if (!r->hashes) {
        r->hashes = malloc((size_t)count * 8);
        if (r->hashes) {
            memcpy(r->hashes, hashes, (size_t)count * 8);
        }
    }
    kept = r->hashes != NULL;
    pthread_mutex_unlock(&s->lock);
    return kept ? 0
                : sf_fail(s, err, ENOMEM,
                          "save file: no memory for page hashes");
}

/* PAGES record @i, read whole into one of @rd's buffers and verified: its
 * payload, and its page hashes in *@hashes (a PAGES_LISTED record's listed
 * ones, which its checksum covers; sf_read_with() checks each page it
 * takes against them). */
static const uint8_t *load_rec(struct sf_reader *rd, size_t i,
                               const uint64_t **hashes, struct vg_error *err)
{
    struct sf *s = rd->s;
    struct sf_rec *r = &s->rec[i];
    uint32_t ps = s->cfg.stream.page_size, len = vg_get_le32(r->head + 4);
    uint32_t count = vg_get_le32(r->head + 24);
    unsigned slot = rd->buf_rec[0] == i + 1   ? 0
                    : rd->buf_rec[1] == i + 1 ? 1
                                              : 2;
    uint8_t *p;
    uint64_t *h;

    if (slot < 2) {
        rd->buf_old = !slot;
        *hashes = rd->hashes[slot];
        return rd->buf[slot];
    }
    slot = rd->buf_old;
    rd->buf_old = !slot;
    rd->buf_rec[slot] = 0;
    p = rd->buf[slot];
    h = rd->hashes[slot];
    if (read_stream(s, r->pos + MIG_REC_HDR_SIZE, p, len, err) < 0) {
        return NULL;
    }
    for (uint32_t k = 0; k < count; k++) {
        h[k] = listed(r->head)
                   ? vg_get_le64(p + MIG_RUN_HDR_SIZE + 8 * k)
                   : page_hash(s, p + MIG_RUN_HDR_SIZE + (size_t)k * ps);
    }
    if (memcmp(p, r->head + MIG_REC_HDR_SIZE, MIG_RUN_HDR_SIZE) != 0 ||
        mig_pages_checksum(r->head, p, h, count) != vg_get_le64(r->head + 8)) {
        sf_fail(s, err, EBADMSG,
                "%s record #%zu at offset %" PRIu64 " (pages %" PRIu64
                "+%u): its checksum does not match; the save file changed "
                "or is damaged",
                mig_rec_name(vg_get_le16(r->head)), i, r->pos,
                vg_get_le64(r->head + 16), count);
        return NULL;
    }
    if (keep_hashes(s, r, h, count, err) < 0) {
        return NULL;
    }
    rd->buf_rec[slot] = i + 1;
    *hashes = h;
    return p;
}

/* Page @p as its last whole record brought it, into @out (@hash: its page
 * hash), verified: from a PAGES or PAGES_LISTED record, or zero.  *@stale:
 * the page does not match its listed hash, which only its pieces may mend
 * (without any, that fails). */
static int read_base(struct sf_reader *rd, uint64_t p, uint8_t *out,
                     uint64_t *hash, bool *stale, struct vg_error *err)
{
    struct sf *s = rd->s;
    uint32_t ps = s->cfg.stream.page_size, l = s->latest[p];
    const uint64_t *rec_hashes;
    const uint8_t *data;
    const struct sf_rec *r;
    uint64_t in;

    *stale = false;
    if (l == SF_ZERO) {
        memset(out, 0, ps);
        *hash = page_hash(s, out);
        return 0;
    }
    data = load_rec(rd, l - 1, &rec_hashes, err);
    if (!data) {
        return -err->code;
    }
    r = &s->rec[l - 1];
    in = p - vg_get_le64(r->head + 16);
    data += data_at(r->head, vg_get_le32(r->head + 24)) + in * ps;
    *stale = listed(r->head) && page_hash(s, data) != rec_hashes[in];
    if (*stale && !s->pieces_head[p]) {
        return sf_fail(s, err, EBADMSG,
                       "PAGES_LISTED record #%u at offset %" PRIu64
                       ": page %" PRIu64 " does not match its listed "
                       "hash, and no later record has it; the save "
                       "file changed or is damaged",
                       l - 1, r->pos, p);
    }
    memcpy(out, data, ps);
    *hash = rec_hashes[in];
    return 0;
}

/* The PAGE_PIECES records of page @p since its base, over @out in order
 * (each was checked whole when it was scanned), as the decoder takes
 * them: a @stale base is mended only by a record that carries the hash
 * the page then has. */
static int apply_pieces(struct sf *s, uint64_t p, uint8_t *out, bool stale,
                        struct vg_error *err)
{
    uint32_t ps = s->cfg.stream.page_size, piece = ps / MIG_PAGE_PIECES;

    for (uint32_t i = s->pieces_head[p]; i; i = s->rec[i - 1].next_pieces) {
        const uint8_t *rec = s->rec[i - 1].bytes;
        const uint8_t *payload = rec + MIG_REC_HDR_SIZE;
        const uint8_t *data = payload + MIG_PIECES_HDR_SIZE;
        bool hashed = vg_get_le16(rec + 2) & MIG_PIECES_HASHED;

        for (uint64_t m = vg_get_le64(payload + 8); m; m &= m - 1) {
            memcpy(out + (size_t)__builtin_ctzll(m) * piece, data, piece);
            data += piece;
        }
        if (stale &&
            (!hashed || page_hash(s, out) != vg_get_le64(payload + 16))) {
            return sf_fail(s, err, EBADMSG,
                           "PAGE_PIECES record #%u at offset %" PRIu64
                           ": page %" PRIu64 " was stale and is not whole "
                           "with its pieces; the save file changed or is "
                           "damaged",
                           i - 1, s->rec[i - 1].pos, p);
        }
        stale = false;
    }
    return 0;
}

int sf_read_with(struct sf_reader *rd, uint64_t first, uint32_t count,
                 uint8_t *buf, uint64_t *hashes, struct vg_error *err)
{
    struct sf *s = rd->s;
    uint32_t ps = s->cfg.stream.page_size;
    int ret = sf_failed(s, err);

    if (ret) {
        return ret;
    }
    if (s->cfg.delay_ms) {
        struct timespec ts = {s->cfg.delay_ms / 1000,
                              (long)(s->cfg.delay_ms % 1000) * 1000000L};

        nanosleep(&ts, NULL);
    }
    for (uint32_t k = 0; k < count; k++) {
        uint64_t p = first + k, h = 0;
        uint8_t *out = buf + (size_t)k * ps;
        bool stale;

        if (p >= s->npages || s->latest[p] == 0 ||
            (s->latest[p] == SF_ZERO && !s->pieces_head[p])) {
            return vg_error_set(err, EINVAL,
                                "page %" PRIu64 " is not in the save file", p);
        }
        ret = read_base(rd, p, out, &h, &stale, err);
        if (ret == 0 && s->pieces_head[p]) {
            ret = apply_pieces(s, p, out, stale, err);
            h = page_hash(s, out);
        }
        if (ret < 0) {
            return ret;
        }
        if (hashes) {
            hashes[k] = h;
        }
    }
    return 0;
}

int sf_read(struct sf *s, uint64_t first, uint32_t count, uint8_t *buf,
            uint64_t *hashes, struct vg_error *err)
{
    return sf_read_with(s->own, first, count, buf, hashes, err);
}

int sf_verify(struct sf *s, struct vg_error *err)
{
    XXH3_state_t *st = XXH3_createState();
    uint64_t digest;
    int ret = 0;

    if (!st) {
        return vg_error_set(err, ENOMEM, "save file: no memory for its digest");
    }
    XXH3_64bits_reset(st);
    for (size_t i = 0; ret == 0 && i < s->nrec; i++) {
        struct sf_rec *r = &s->rec[i];
        const uint64_t *unused;

        if (r->bytes) {
            XXH3_64bits_update(st, r->bytes,
                               mig_rec_digest_size(s->version, r->bytes));
            continue;
        }
        if (!r->hashes && !load_rec(s->own, i, &unused, err)) {
            ret = -err->code;
            break;
        }
        XXH3_64bits_update(st, r->head, SF_HEADS);
        for (uint32_t k = 0; k < vg_get_le32(r->head + 24); k++) {
            uint8_t le[8];

            vg_put_le64(le, r->hashes[k]);
            XXH3_64bits_update(st, le, 8);
        }
    }
    digest = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    if (ret == 0 && digest != s->end_digest) {
        ret = sf_fail(s, err, EBADMSG,
                      "save file: stream digest %016" PRIx64
                      ", computed %016" PRIx64,
                      s->end_digest, digest);
    }
    return ret;
}
