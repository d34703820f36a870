/*
 * Unit tests of the migration stream codec (mig-stream): encode -> decode
 * round trips fed in random chunk sizes (stream versions 1 to 6), page
 * data fed in place (mig_dec_feed_placed), the byte layout of a version 2
 * PAGES record, version 3's PAGES_LISTED records and their stale pages,
 * version 4's PAGE_PIECES records, version 5's tree page hashes, version
 * 6's PAGE_PIECES checksums over their pieces' hashes, and every kind
 * of malformed input with the precise error it must produce.
 */
#include <endian.h>
#include <errno.h>
#include <glib.h>
#include <string.h>
#include <xxhash.h>

#include "common/hash.h"
#include "common/le.h"
#include "vfio-migration/mig-stream.h"

#define PAGE   4096u
#define NPAGES 256u
#define VRAM   (PAGE * NPAGES)
#define FEAT   7u

static const struct mig_stream_config cfg = {VRAM, PAGE, FEAT};

/* A growing stream. */
struct sb {
    struct mig_enc *enc;
    uint8_t *data;
    size_t len;
    uint8_t *rec; /* MIG_REC_MAX scratch */
};

/* A stream of @version. */
static void sb_init_version(struct sb *b, uint32_t version)
{
    struct vg_error err;

    memset(b, 0, sizeof(*b));
    g_assert_cmpint(
        mig_enc_new(version, PAGE, MIG_RUN_MAX_BYTES, &b->enc, &err), ==, 0);
    b->rec = g_malloc(MIG_REC_MAX);
    b->data = g_malloc(64 << 20);
}

static void sb_init(struct sb *b)
{
    sb_init_version(b, MIG_STREAM_VERSION);
}

static void sb_fini(struct sb *b)
{
    mig_enc_free(b->enc);
    g_free(b->rec);
    g_free(b->data);
}

static void sb_put(struct sb *b, const void *p, size_t n)
{
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

static void sb_add(struct sb *b, size_t n)
{
    sb_put(b, b->rec, n);
}

/* A hand-made record with a valid checksum (not in the encoder's digest). */
static void sb_raw(struct sb *b, uint16_t type, const void *payload,
                   uint32_t len)
{
    uint8_t hdr[16];
    uint64_t seed, sum;

    memset(hdr, 0, sizeof(hdr));
    hdr[0] = (uint8_t)type;
    hdr[1] = (uint8_t)(type >> 8);
    len = htole32(len);
    memcpy(hdr + 4, &len, 4);
    len = le32toh(len);
    memcpy(&seed, hdr, 8);
    sum = htole64(XXH3_64bits_withSeed(payload, len, le64toh(seed)));
    memcpy(hdr + 8, &sum, 8);
    sb_put(b, hdr, sizeof(hdr));
    sb_put(b, payload, len);
}

/* HEADER payload with the given fields. */
static void header_payload(uint8_t *p, const char *magic, uint32_t version,
                           uint32_t page, uint64_t vram, uint32_t feat)
{
    uint32_t v;
    uint64_t w;

    memset(p, 0, MIG_HEADER_SIZE);
    memcpy(p, magic, 8);
    v = htole32(version);
    memcpy(p + 8, &v, 4);
    v = htole32(page);
    memcpy(p + 12, &v, 4);
    w = htole64(vram);
    memcpy(p + 16, &w, 8);
    v = htole32(feat);
    memcpy(p + 24, &v, 4);
}

/* The page hash of a stream of @version (1 to 5): of the whole page, or
 * from version 5 on its tree (vg_hash_tree(), checked against libxxhash
 * in test-hash). */
static uint64_t page_hash(uint32_t version, const uint8_t *page)
{
    return version >= 5 ? vg_hash_tree(page, PAGE, 0, NULL)
                        : XXH3_64bits(page, PAGE);
}

/* The destination: the stream's version (its header sink), VRAM and the
 * device state it received; how many
 * PAGES records came with page hashes, and how many without; how many
 * were handed over in place, in the chunk being fed. */
struct dst {
    uint32_t version;
    uint8_t vram[VRAM];
    uint8_t state[MIG_STATE_MAX];
    uint32_t state_len;
    unsigned hashed, unhashed, in_place;
    const uint8_t *chunk;
    size_t chunk_len;
    /* The sink hashes the pages for the decoder (hash_pages): how many
     * records it did, and whether it gets page 0 of each wrong. */
    bool sink_hashes, wrong_hash;
    unsigned sink_hashed;
    /* The sink writes the pages before the check (write_hashed): how
     * many records it wrote so, and how many pages() then confirmed. */
    bool writes_first;
    unsigned written_first, confirmed;
    /* POSTCOPY records received (none without a postcopy sink). */
    bool no_postcopy_sink;
    bool no_pieces_sink;
    unsigned pieces_hashed;   /* pages the pieces sink hashed */
    unsigned pieces_in_place; /* records whose pieces were in the chunk */
    unsigned piece_hashes;    /* pieces' hashes the decoder gave, checked */
    /* The sink applies version 6 pieces in batches (run(), pieces_mt()),
     * each batch's jobs last to first: the batches and their jobs. */
    bool batches;
    unsigned batch_runs, batch_jobs;
    unsigned postcopies;
    struct mig_postcopy_info pc;
};

static int dst_postcopy(void *o, const struct mig_postcopy_info *info,
                        struct vg_error *err)
{
    struct dst *d = o;

    d->pc = *info;
    d->postcopies++;
    return 0;
}

static void dst_header(void *o, uint32_t version)
{
    struct dst *d = o;

    d->version = version;
}

static void dst_hash_pages(void *o, const uint8_t *data, uint64_t count,
                           uint64_t *hashes)
{
    struct dst *d = o;

    for (uint64_t i = 0; i < count; i++) {
        hashes[i] = page_hash(d->version, data + i * PAGE);
    }
    hashes[0] ^= d->wrong_hash;
    d->sink_hashed++;
}

static int dst_pages(void *o, uint64_t first, uint64_t count,
                     const uint8_t *data, const uint64_t *hashes,
                     struct vg_error *err)
{
    struct dst *d = o;

    g_assert_cmpuint(first + count, <=, NPAGES);
    if (!data) { /* dst_write_hashed wrote them; the hashes are theirs */
        g_assert_true(d->writes_first);
        for (uint64_t i = 0; i < count; i++) {
            g_assert_cmphex(
                hashes[i], ==,
                page_hash(d->version, d->vram + (first + i) * PAGE));
        }
        d->confirmed++;
        return 0;
    }
    memcpy(d->vram + first * PAGE, data, count * PAGE);
    d->in_place += data >= d->chunk && data < d->chunk + d->chunk_len;
    for (uint64_t i = 0; hashes && i < count; i++) {
        g_assert_cmphex(hashes[i], ==, page_hash(d->version, data + i * PAGE));
    }
    if (hashes) {
        d->hashed++;
    } else {
        d->unhashed++;
    }
    return 0;
}

static int dst_zeros(void *o, uint64_t first, uint64_t count,
                     struct vg_error *err)
{
    struct dst *d = o;

    g_assert_cmpuint(first + count, <=, NPAGES);
    memset(d->vram + first * PAGE, 0, count * PAGE);
    return 0;
}

static int dst_state(void *o, const uint8_t *blob, uint32_t len,
                     struct vg_error *err)
{
    struct dst *d = o;

    memcpy(d->state, blob, len);
    d->state_len = len;
    return 0;
}

/* From version 6 on the decoder gives each piece's hash (checked here). */
static int dst_pieces(void *o, uint64_t page, uint64_t mask,
                      uint32_t piece_size, const uint8_t *data,
                      const uint64_t *piece_hash, uint64_t *hash,
                      struct vg_error *err)
{
    struct dst *d = o;

    g_assert_cmpuint(page, <, NPAGES);
    g_assert_cmpuint(piece_size, ==, PAGE / MIG_PAGE_PIECES);
    g_assert_true(!piece_hash == (d->version < MIG_PIECE_HASH_VERSION));
    for (int i = 0; piece_hash && i < __builtin_popcountll(mask); i++) {
        g_assert_cmphex(piece_hash[i], ==,
                        XXH3_64bits(data + (size_t)i * piece_size, piece_size));
        d->piece_hashes++;
    }
    d->pieces_in_place += data >= d->chunk && data < d->chunk + d->chunk_len;
    for (; mask; mask &= mask - 1) {
        memcpy(d->vram + page * PAGE +
                   (size_t)__builtin_ctzll(mask) * piece_size,
               data, piece_size);
        data += piece_size;
    }
    if (hash) {
        *hash = page_hash(d->version, d->vram + page * PAGE);
        d->pieces_hashed++;
    }
    return 0;
}

static void dst_run(void *o, uint64_t n, void (*fn)(void *arg, uint64_t i),
                    void *arg)
{
    struct dst *d = o;

    d->batch_runs++;
    d->batch_jobs += (unsigned)n;
    for (uint64_t i = n; i > 0; i--) {
        fn(arg, i - 1);
    }
}

static int dst_write_hashed(void *o, uint64_t first, uint64_t count,
                            const uint8_t *data, uint64_t *hashes,
                            struct vg_error *err)
{
    struct dst *d = o;

    g_assert_cmpuint(first + count, <=, NPAGES);
    memcpy(d->vram + first * PAGE, data, count * PAGE);
    for (uint64_t i = 0; i < count; i++) {
        hashes[i] = page_hash(d->version, d->vram + (first + i) * PAGE);
    }
    d->written_first++;
    return 0;
}

/* Decode @len bytes of @data in chunks (0: random sizes); returns the
 * first error (feed or finish) with its message in @err. */
static int decode(const struct mig_stream_config *c, const uint8_t *data,
                  size_t len, size_t chunk, struct dst *d, struct vg_error *err)
{
    struct mig_dec_sink sink = {
        .opaque = d,
        .header = dst_header,
        .pages = dst_pages,
        .zeros = dst_zeros,
        .pieces = d->no_pieces_sink ? NULL : dst_pieces,
        .state = dst_state,
        .hash_pages = d->sink_hashes ? dst_hash_pages : NULL,
        .postcopy = d->no_postcopy_sink ? NULL : dst_postcopy,
        .write_hashed = d->writes_first ? dst_write_hashed : NULL,
        .run = d->batches ? dst_run : NULL,
        .pieces_mt = d->batches ? dst_pieces : NULL};
    struct mig_dec *dec;
    size_t off = 0;
    int ret;

    memset(d->vram, 0xee, VRAM);
    d->version = 0;
    d->hashed = d->unhashed = d->in_place = d->sink_hashed = 0;
    d->pieces_in_place = 0;
    d->piece_hashes = 0;
    d->batch_runs = d->batch_jobs = 0;
    d->written_first = d->confirmed = 0;
    d->postcopies = 0;
    g_assert_cmpint(mig_dec_new(c, &sink, &dec, err), ==, 0);
    while (off < len) {
        size_t n = chunk ? chunk : (size_t)g_test_rand_int_range(1, 70000);
        if (n > len - off) {
            n = len - off;
        }
        d->chunk = data + off;
        d->chunk_len = n;
        ret = mig_dec_feed(dec, data + off, n, err);
        if (ret < 0) {
            /* sticky: the next feed fails the same way */
            char first[VG_ERROR_MAX];
            g_strlcpy(first, err->msg, sizeof(first));
            g_assert_cmpint(mig_dec_feed(dec, data, 1, err), ==, ret);
            g_assert_cmpstr(err->msg, ==, first);
            mig_dec_free(dec);
            return ret;
        }
        off += n;
    }
    g_assert_cmpuint(mig_dec_bytes(dec), ==, len);
    ret = mig_dec_finish(dec, err);
    mig_dec_free(dec);
    return ret;
}

/* Random VRAM with zero pages; the stream of one full pass over it, a
 * partial second pass (pages sent twice), the state and the END. */
static void build_valid(struct sb *b, uint8_t *vram, uint8_t *state)
{
    for (unsigned i = 0; i < VRAM; i++) {
        vram[i] = (uint8_t)g_test_rand_int();
    }
    memset(vram + 10 * PAGE, 0, 30 * PAGE);
    memset(vram + (NPAGES - 1) * PAGE, 0, PAGE);
    for (unsigned i = 0; i < 100; i++) {
        state[i] = (uint8_t)i;
    }
    sb_add(b, mig_enc_header(b->enc, &cfg, b->rec));
    for (unsigned p = 0; p < NPAGES;) {
        if (p >= 10 && p < 40) {
            sb_add(b, mig_enc_zeros(b->enc, 10, 30, b->rec));
            p = 40;
        } else if (p == NPAGES - 1) {
            sb_add(b, mig_enc_zeros(b->enc, p, 1, b->rec));
            p++;
        } else {
            uint32_t n =
                p < 10 ? 10 - p : (NPAGES - 1 - p > 64 ? 64 : NPAGES - 1 - p);
            sb_add(b, mig_enc_pages(b->enc, p, n, vram + p * PAGE, b->rec));
            p += n;
        }
    }
    /* second pass: pages 3..5 changed, page 12 now non-zero */
    memset(vram + 3 * PAGE, 0x5a, 3 * PAGE);
    sb_add(b, mig_enc_pages(b->enc, 3, 3, vram + 3 * PAGE, b->rec));
    memset(vram + 12 * PAGE, 0x77, PAGE);
    sb_add(b, mig_enc_pages(b->enc, 12, 1, vram + 12 * PAGE, b->rec));
    sb_add(b, mig_enc_state(b->enc, state, 100, b->rec));
    sb_add(b, mig_enc_end(b->enc, b->rec));
    g_assert_cmpuint(mig_enc_bytes(b->enc), ==, b->len);
}

/* Every version decodes to the same VRAM; from version 2 on the page
 * hashes come too (checked against the pages by dst_pages: from version
 * 5 on their trees). */
static void test_round_trip(void)
{
    static uint8_t vram[VRAM];
    static struct dst d;
    uint8_t state[100];
    struct vg_error err = {0};
    struct sb b;

    for (uint32_t v = MIG_STREAM_VERSION_MIN; v <= MIG_STREAM_VERSION_MAX;
         v++) {
        sb_init_version(&b, v);
        build_valid(&b, vram, state);
        g_assert_cmpuint(b.data[16 + 8], ==, v); /* HEADER's version */
        for (unsigned round = 0; round < 20; round++) {
            size_t chunk = round == 0 ? 1 : round == 1 ? b.len : 0;
            g_assert_cmpint(decode(&cfg, b.data, b.len, chunk, &d, &err), ==,
                            0);
            g_assert_cmpuint(d.version, ==, v); /* the header sink's */
            g_assert_true(memcmp(d.vram, vram, VRAM) == 0);
            g_assert_cmpuint(d.state_len, ==, 100);
            g_assert_true(memcmp(d.state, state, 100) == 0);
            g_assert_cmpuint(d.hashed + d.unhashed, ==, 7);
            g_assert_cmpuint(d.hashed, ==, v >= 2 ? 7 : 0);
            /* Version 2 page data whole in the chunk are read in place;
             * byte by byte, every record is copied. */
            if (chunk == b.len) {
                g_assert_cmpuint(d.in_place, ==, v >= 2 ? 7 : 0);
            } else if (chunk == 1) {
                g_assert_cmpuint(d.in_place, ==, 0);
            }
            g_assert_cmpuint(d.in_place, <=, d.hashed);
        }
        sb_fini(&b);
    }
}

/* A sink that hashes the pages itself (on threads of its own, say) is
 * used for version 2 records, and a wrong hash from it fails the record. */
/* build_valid() into a new stream of @version. */
static void build_valid_version(struct sb *b, uint32_t version, uint8_t *vram)
{
    uint8_t state[100];

    sb_init_version(b, version);
    build_valid(b, vram, state);
}

static void test_sink_hashes(void)
{
    static uint8_t vram[VRAM];
    static struct dst d;
    struct vg_error err = {0};
    struct sb b;

    build_valid_version(&b, MIG_STREAM_VERSION, vram);
    d.sink_hashes = true;
    g_assert_cmpint(decode(&cfg, b.data, b.len, b.len, &d, &err), ==, 0);
    g_assert_true(memcmp(d.vram, vram, VRAM) == 0);
    g_assert_cmpuint(d.sink_hashed, ==, 7);
    d.wrong_hash = true;
    g_assert_cmpint(decode(&cfg, b.data, b.len, b.len, &d, &err), ==, -EBADMSG);
    g_assert_nonnull(strstr(err.msg, "checksum"));
    d.sink_hashes = d.wrong_hash = false;
    sb_fini(&b);
}

/* A sink that writes a record's pages before the check (write_hashed)
 * gets every PAGES record of a version 2 stream that way, its hashes
 * check the record, and pages() only confirms them; a page changed on the
 * way is written but fails the record, and the stream with it.  Version
 * 1 records carry no page hashes: they go to pages() as before. */
static void test_write_hashed(void)
{
    static uint8_t vram[VRAM];
    static struct dst d;
    struct vg_error err = {0};
    struct sb b;

    build_valid_version(&b, MIG_STREAM_VERSION, vram);
    d.writes_first = true;
    g_assert_cmpint(decode(&cfg, b.data, b.len, 0, &d, &err), ==, 0);
    g_assert_true(memcmp(d.vram, vram, VRAM) == 0);
    g_assert_cmpuint(d.written_first, ==, 7);
    g_assert_cmpuint(d.confirmed, ==, 7);
    g_assert_cmpuint(d.hashed + d.unhashed, ==, 0);
    b.data[b.len / 2] ^= 0x40; /* page data of a PAGES record */
    g_assert_cmpint(decode(&cfg, b.data, b.len, b.len, &d, &err), ==, -EBADMSG);
    g_assert_nonnull(strstr(err.msg, "checksum"));
    g_assert_cmpuint(d.written_first, ==, d.confirmed + 1);
    sb_fini(&b);

    build_valid_version(&b, 1, vram);
    g_assert_cmpint(decode(&cfg, b.data, b.len, 0, &d, &err), ==, 0);
    g_assert_true(memcmp(d.vram, vram, VRAM) == 0);
    g_assert_cmpuint(d.written_first, ==, 0);
    g_assert_cmpuint(d.unhashed, ==, 7);
    d.writes_first = false;
    sb_fini(&b);
}

/* Feed @b's stream as a destination's client with a writable view of
 * @d's VRAM would: the page data of every PAGES record put in place there
 * (at @shift pages from their own, flipped in one byte if @corrupt) and
 * fed as such; every other byte fed as it is.  The first error, or the
 * finish's. */
static int decode_placed(const struct sb *b, struct dst *d, int shift,
                         bool corrupt, uint64_t *in_place, struct vg_error *err)
{
    struct mig_dec_sink sink = {.opaque = d,
                                .header = dst_header,
                                .pages = dst_pages,
                                .zeros = dst_zeros,
                                .state = dst_state};
    struct mig_dec *dec;
    size_t off = 0;
    int ret = 0;

    memset(d->vram, 0xee, VRAM);
    d->confirmed = 0;
    d->writes_first = true; /* pages() then gets the data NULL */
    g_assert_cmpint(mig_dec_new(&cfg, &sink, &dec, err), ==, 0);
    while (ret == 0 && off < b->len) {
        const uint8_t *r = b->data + off;
        size_t size = MIG_REC_HDR_SIZE + le32toh(*(const uint32_t *)(r + 4));
        uint64_t at;

        if (le16toh(*(const uint16_t *)r) != MIG_REC_PAGES) {
            ret = mig_dec_feed(dec, r, size, err);
            off += size;
            continue;
        }
        at = (le64toh(*(const uint64_t *)(r + 16)) + shift) * PAGE;
        memcpy(d->vram + at, r + 32, size - 32);
        d->vram[at] ^= corrupt;
        ret = mig_dec_feed(dec, r, 32, err);
        ret = ret ? ret
                  : mig_dec_feed_placed(dec, at, d->vram + at, size - 32, err);
        off += size;
    }
    ret = ret ? ret : mig_dec_finish(dec, err);
    *in_place = mig_dec_bytes_in_place(dec);
    d->writes_first = false;
    mig_dec_free(dec);
    return ret;
}

/* Page data put in place by the feeder (mig_dec_feed_placed) are hashed
 * there and check their records, which pages() only confirms; page data
 * in place at the wrong pages, in a version 1 stream, or changed after
 * the source hashed them fail the stream. */
static void test_feed_placed(void)
{
    static uint8_t vram[VRAM];
    static struct dst d;
    struct vg_error err = {0};
    uint64_t in_place = 0;
    struct sb b;

    build_valid_version(&b, MIG_STREAM_VERSION, vram);
    g_assert_cmpint(decode_placed(&b, &d, 0, false, &in_place, &err), ==, 0);
    g_assert_true(memcmp(d.vram, vram, VRAM) == 0);
    g_assert_cmpuint(d.confirmed, ==, 7);
    g_assert_cmpuint(in_place, ==, (NPAGES - 31 + 4) * PAGE);
    g_assert_cmpint(decode_placed(&b, &d, 1, false, &in_place, &err), ==,
                    -EINVAL);
    g_assert_nonnull(strstr(err.msg, "the record's are"));
    g_assert_cmpint(decode_placed(&b, &d, 0, true, &in_place, &err), ==,
                    -EBADMSG);
    g_assert_nonnull(strstr(err.msg, "checksum"));
    sb_fini(&b);

    build_valid_version(&b, 1, vram);
    g_assert_cmpint(decode_placed(&b, &d, 0, false, &in_place, &err), ==,
                    -EINVAL);
    g_assert_nonnull(strstr(err.msg, "no version 2 PAGES"));
    sb_fini(&b);
}

/* A version 2 PAGES record as docs/migration-stream.md lays it out, built
 * here by hand: the checksum is XXH3-64 of the run header and the pages'
 * little-endian XXH3-64 hashes, seeded with header bytes 0..7; the pages
 * follow as they are. */
static void test_pages_v2_layout(void)
{
    uint8_t pages[3 * PAGE], want[32 + 3 * PAGE], hashes[3 * 8];
    uint64_t first = htole64(17), seed, sum;
    uint32_t count = htole32(3), len = htole32(16 + 3 * PAGE);
    struct sb b;

    for (unsigned i = 0; i < sizeof(pages); i++) {
        pages[i] = (uint8_t)(i * 7 + i / 1000);
    }
    memset(want, 0, 32);
    want[0] = MIG_REC_PAGES;
    memcpy(want + 4, &len, 4);
    memcpy(want + 16, &first, 8);
    memcpy(want + 24, &count, 4);
    memcpy(want + 32, pages, sizeof(pages));
    for (unsigned i = 0; i < 3; i++) {
        uint64_t h = htole64(XXH3_64bits(pages + i * PAGE, PAGE));

        memcpy(hashes + 8 * i, &h, 8);
    }
    memcpy(&seed, want, 8);
    {
        uint8_t body[16 + sizeof(hashes)];

        memcpy(body, want + 16, 16);
        memcpy(body + 16, hashes, sizeof(hashes));
        sum = htole64(XXH3_64bits_withSeed(body, sizeof(body), le64toh(seed)));
    }
    memcpy(want + 8, &sum, 8);
    sb_init_version(&b, 2);
    g_assert_cmpuint(mig_enc_pages(b.enc, 17, 3, pages, b.rec), ==,
                     sizeof(want));
    g_assert_cmpmem(b.rec, sizeof(want), want, sizeof(want));
    sb_fini(&b);
}

/* A version 6 PAGE_PIECES record as docs/migration-stream.md lays it out,
 * built here by hand: its checksum is XXH3-64 of its pieces header and
 * its pieces' little-endian XXH3-64 hashes, seeded with header bytes
 * 0..7, the pieces follow as they are; the END digest takes its 40 header
 * bytes only. */
static void test_pieces_v6_layout(void)
{
    enum { PIECE = PAGE / MIG_PAGE_PIECES };
    static uint8_t page[PAGE], head[MIG_REC_MAX];
    uint8_t want[40 + 2 * PIECE], body[24 + 2 * 8], end[16 + 24];
    uint64_t mask = 1ull << 2 | 1ull << 60, v, seed;
    uint32_t len = htole32(24 + 2 * PIECE);
    size_t head_len;
    XXH3_state_t *st = XXH3_createState();
    struct sb b;

    for (unsigned i = 0; i < PAGE; i++) {
        page[i] = (uint8_t)(i * 13 + i / 700);
    }
    memset(want, 0, 16);
    want[0] = MIG_REC_PAGE_PIECES;
    want[2] = MIG_PIECES_HASHED;
    memcpy(want + 4, &len, 4);
    v = htole64(5);
    memcpy(want + 16, &v, 8);
    v = htole64(mask);
    memcpy(want + 24, &v, 8);
    v = htole64(0xabcdef);
    memcpy(want + 32, &v, 8);
    memcpy(want + 40, page + 2 * PIECE, PIECE);
    memcpy(want + 40 + PIECE, page + 60 * PIECE, PIECE);
    memcpy(body, want + 16, 24);
    for (unsigned i = 0; i < 2; i++) {
        v = htole64(XXH3_64bits(want + 40 + i * PIECE, PIECE));
        memcpy(body + 24 + 8 * i, &v, 8);
    }
    memcpy(&seed, want, 8);
    v = htole64(XXH3_64bits_withSeed(body, sizeof(body), le64toh(seed)));
    memcpy(want + 8, &v, 8);
    sb_init_version(&b, 6);
    head_len = mig_enc_header(b.enc, &cfg, head);
    g_assert_cmpuint(
        mig_enc_page_pieces(b.enc, 5, mask, page, true, 0xabcdef, b.rec), ==,
        sizeof(want));
    g_assert_cmpmem(b.rec, sizeof(want), want, sizeof(want));
    g_assert_cmpuint(mig_enc_end(b.enc, end), ==, sizeof(end));
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, head, head_len);
    XXH3_64bits_update(st, want, 40);
    v = htole64(XXH3_64bits_digest(st));
    g_assert_cmpmem(end + 16, 8, &v, 8);
    XXH3_freeState(st);
    sb_fini(&b);
}

/* Decoding @b must fail with @code and a message containing @what. */
static void expect_fail_dst(const struct mig_stream_config *c, struct sb *b,
                            struct dst *d, int code, const char *what)
{
    struct vg_error err = {0};
    size_t chunks[] = {1, 7, 4096, 0, b->len}; /* whole: in place */

    for (unsigned i = 0; i < G_N_ELEMENTS(chunks); i++) {
        g_assert_cmpint(decode(c, b->data, b->len, chunks[i], d, &err), ==,
                        -code);
        if (!strstr(err.msg, what)) {
            g_error("expected \"%s\" in \"%s\"", what, err.msg);
        }
    }
    g_test_message("%s", err.msg);
}

static void expect_fail(const struct mig_stream_config *c, struct sb *b,
                        int code, const char *what)
{
    static struct dst d;

    expect_fail_dst(c, b, &d, code, what);
}

/* A record checksummed the other version's way is refused. */
static void test_version_confusion(void)
{
    static uint8_t page[PAGE];
    struct sb v1, v2;

    memset(page, 0x3c, sizeof(page));
    sb_init_version(&v1, 1);
    sb_init_version(&v2, 2);
    sb_add(&v1, mig_enc_header(v1.enc, &cfg, v1.rec));
    sb_add(&v2, mig_enc_header(v2.enc, &cfg, v2.rec));
    /* each stream's PAGES record after the other's HEADER */
    sb_put(&v1, v2.rec, mig_enc_pages(v2.enc, 0, 1, page, v2.rec));
    sb_put(&v2, v1.rec, mig_enc_pages(v1.enc, 0, 1, page, v1.rec));
    expect_fail(&cfg, &v1, EBADMSG, "PAGES record #1 at offset 48: checksum");
    expect_fail(&cfg, &v2, EBADMSG, "PAGES record #1 at offset 48: checksum");
    sb_fini(&v1);
    sb_fini(&v2);
}

static void add_header(struct sb *b)
{
    sb_add(b, mig_enc_header(b->enc, &cfg, b->rec));
}

static void test_bad_header(void)
{
    static const struct mig_stream_config big = {128u << 20, 65536, FEAT};
    static const struct mig_stream_config dev64 = {64u << 20, 65536, FEAT};
    uint8_t p[MIG_HEADER_SIZE];
    struct sb b;

    sb_init(&b);
    header_payload(p, "VGMIGSTX", 1, PAGE, VRAM, FEAT);
    sb_raw(&b, MIG_REC_HEADER, p, sizeof(p));
    expect_fail(&cfg, &b, EINVAL, "HEADER record #0 at offset 0: bad magic");
    b.len = 0;
    header_payload(p, MIG_STREAM_MAGIC, 7, PAGE, VRAM, FEAT);
    sb_raw(&b, MIG_REC_HEADER, p, sizeof(p));
    expect_fail(&cfg, &b, EPROTO,
                "unknown stream version 7, this device reads versions 1 to 6");
    b.len = 0;
    header_payload(p, MIG_STREAM_MAGIC, 0, PAGE, VRAM, FEAT);
    sb_raw(&b, MIG_REC_HEADER, p, sizeof(p));
    expect_fail(&cfg, &b, EPROTO, "unknown stream version 0");
    /* another VRAM size: both values named */
    b.len = 0;
    sb_add(&b, mig_enc_header(b.enc, &big, b.rec));
    expect_fail(&dev64, &b, EINVAL,
                "VRAM size mismatch: stream has 134217728 bytes, this device "
                "has 67108864");
    b.len = 0;
    header_payload(p, MIG_STREAM_MAGIC, 1, 4096, 64u << 20, FEAT);
    sb_raw(&b, MIG_REC_HEADER, p, sizeof(p));
    expect_fail(&dev64, &b, EINVAL,
                "page size mismatch: stream has 4096 bytes, this device has "
                "65536");
    b.len = 0;
    header_payload(p, MIG_STREAM_MAGIC, 1, PAGE, VRAM, 1);
    sb_raw(&b, MIG_REC_HEADER, p, sizeof(p));
    expect_fail(&cfg, &b, EINVAL, "features mismatch: stream has 0x1");
    /* the first record must be the HEADER */
    b.len = 0;
    sb_add(&b, mig_enc_zeros(b.enc, 0, 1, b.rec));
    expect_fail(&cfg, &b, EINVAL,
                "ZEROS record #0 at offset 0: the stream must start with "
                "HEADER");
    sb_fini(&b);
}

static void test_bad_checksum(void)
{
    static uint8_t vram[VRAM];
    uint8_t state[100];
    struct sb b;

    for (uint32_t v = MIG_STREAM_VERSION_MIN; v <= MIG_STREAM_VERSION_MAX;
         v++) {
        sb_init_version(&b, v);
        build_valid(&b, vram, state);
        b.data[48 + 16 + 16 + 100] ^= 0x01; /* inside the first PAGES data */
        expect_fail(&cfg, &b, EBADMSG,
                    "PAGES record #1 at offset 48: checksum");
        b.data[48 + 16 + 16 + 100] ^= 0x01;
        b.data[48 + 16 + 16 + 9 * PAGE + 5] ^= 0x10; /* its last page */
        expect_fail(&cfg, &b, EBADMSG,
                    "PAGES record #1 at offset 48: checksum");
        b.data[48 + 16 + 16 + 9 * PAGE + 5] ^= 0x10;
        b.data[48 + 8] ^= 0x80; /* the checksum field itself */
        expect_fail(&cfg, &b, EBADMSG,
                    "PAGES record #1 at offset 48: checksum");
        b.data[48 + 8] ^= 0x80;
        b.data[48 + 16 + 3] ^= 0x01; /* the first page number */
        expect_fail(&cfg, &b, EBADMSG,
                    "PAGES record #1 at offset 48: checksum");
        b.data[48 + 16 + 3] ^= 0x01;
        sb_fini(&b);
    }
    /* the length: the record takes one more byte (version 1 checksums it;
     * version 2 sees a payload that is not whole pages first) */
    sb_init_version(&b, 1);
    build_valid(&b, vram, state);
    b.data[48 + 4] ^= 0x01;
    expect_fail(&cfg, &b, EBADMSG, "PAGES record #1 at offset 48: checksum");
    sb_fini(&b);
    sb_init_version(&b, 2);
    build_valid(&b, vram, state);
    b.data[48 + 4] ^= 0x01;
    expect_fail(&cfg, &b, EINVAL,
                "PAGES record #1 at offset 48: run of 10 pages of 4096 bytes "
                "does not match payload length 40977");
    sb_fini(&b);
}

static void test_truncated(void)
{
    static uint8_t vram[VRAM];
    uint8_t state[100];
    struct sb b;
    size_t full;

    sb_init(&b);
    build_valid(&b, vram, state);
    full = b.len;
    b.len = 48 + 16 + 10; /* inside the first PAGES record */
    expect_fail(&cfg, &b, EINVAL,
                "truncated: PAGES record #1 at offset 48 has 26 of 40992 "
                "bytes");
    b.len = 48 + 5; /* inside a record header */
    expect_fail(&cfg, &b, EINVAL,
                "truncated: PAGES record #1 at offset 48 has 5 of 16 bytes");
    b.len = 48 + 1; /* not even the type */
    expect_fail(&cfg, &b, EINVAL,
                "truncated: a record #1 at offset 48 has 1 of 16 bytes");
    b.len = full - (16 + MIG_END_SIZE); /* no END */
    expect_fail(&cfg, &b, EINVAL, "truncated: no END record after");
    b.len = 0; /* nothing at all */
    expect_fail(&cfg, &b, EINVAL,
                "no END record after 0 bytes in 0 records, "
                "no HEADER, no DEVICE_STATE");
    sb_fini(&b);
}

static void test_duplicates(void)
{
    uint8_t state[8] = {1};
    struct sb b;

    sb_init(&b);
    add_header(&b);
    add_header(&b);
    expect_fail(&cfg, &b, EINVAL, "HEADER record #1 at offset 48: duplicate");
    b.len = 0;
    add_header(&b);
    sb_add(&b, mig_enc_state(b.enc, state, 8, b.rec));
    sb_add(&b, mig_enc_state(b.enc, state, 8, b.rec));
    expect_fail(&cfg, &b, EINVAL,
                "DEVICE_STATE record #2 at offset 72: "
                "duplicate DEVICE_STATE");
    b.len = 0;
    add_header(&b);
    sb_add(&b, mig_enc_state(b.enc, state, 8, b.rec));
    sb_add(&b, mig_enc_zeros(b.enc, 0, 1, b.rec));
    expect_fail(&cfg, &b, EINVAL,
                "ZEROS record #2 at offset 72: page data "
                "after DEVICE_STATE");
    sb_fini(&b);
}

static void test_ranges(void)
{
    static uint8_t page[2 * PAGE];
    uint8_t p[MIG_RUN_HDR_SIZE + PAGE];
    uint32_t v;
    struct sb b;

    sb_init(&b);
    add_header(&b);
    sb_add(&b, mig_enc_pages(b.enc, NPAGES - 1, 2, page, b.rec));
    expect_fail(&cfg, &b, ERANGE,
                "PAGES record #1 at offset 48: pages 255+2 outside VRAM of "
                "256 pages");
    b.len = 0;
    add_header(&b);
    sb_add(&b, mig_enc_zeros(b.enc, UINT64_MAX - 1, 4, b.rec)); /* wraps */
    expect_fail(&cfg, &b, ERANGE, "outside VRAM of 256 pages");
    b.len = 0;
    add_header(&b);
    sb_add(&b, mig_enc_zeros(b.enc, 0, 0, b.rec));
    expect_fail(&cfg, &b, ERANGE, "pages 0+0 outside VRAM");
    /* a run whose count does not match its data */
    b.len = 0;
    add_header(&b);
    memset(p, 0, sizeof(p));
    v = htole32(2);
    memcpy(p + 8, &v, 4); /* 2 pages, one page of data */
    sb_raw(&b, MIG_REC_PAGES, p, sizeof(p));
    expect_fail(&cfg, &b, EINVAL,
                "run of 2 pages of 4096 bytes does not match payload length "
                "4112");
    sb_fini(&b);
}

static void test_after_end_and_digest(void)
{
    static uint8_t vram[VRAM];
    uint8_t state[100], end[MIG_END_SIZE];
    struct sb b;
    size_t full;

    sb_init(&b);
    build_valid(&b, vram, state);
    full = b.len;
    sb_put(&b, "x", 1);
    expect_fail(&cfg, &b, EINVAL, "1 bytes after the END record");
    /* a wrong digest (the END record itself intact) */
    b.len = full - (16 + MIG_END_SIZE);
    memcpy(end, b.data + b.len + 16, sizeof(end));
    end[0] ^= 1;
    sb_raw(&b, MIG_REC_END, end, sizeof(end));
    expect_fail(&cfg, &b, EBADMSG, "END record #");
    expect_fail(&cfg, &b, EBADMSG, "stream digest");
    /* wrong byte count */
    b.len = full - (16 + MIG_END_SIZE);
    end[0] ^= 1;
    end[8] ^= 1;
    sb_raw(&b, MIG_REC_END, end, sizeof(end));
    expect_fail(&cfg, &b, EINVAL, "END counts");
    /* END without DEVICE_STATE */
    b.len = 0;
    add_header(&b);
    sb_add(&b, mig_enc_end(b.enc, b.rec));
    expect_fail(&cfg, &b, EINVAL, "END before any DEVICE_STATE");
    sb_fini(&b);
}

static void test_bad_record_header(void)
{
    uint8_t hdr[16] = {0};
    struct sb b;

    sb_init(&b);
    add_header(&b);
    hdr[0] = MIG_REC_PAGES;
    memset(hdr + 4, 0xff, 4); /* payload length 4294967295 */
    sb_put(&b, hdr, sizeof(hdr));
    expect_fail(&cfg, &b, EINVAL,
                "PAGES record #1 at offset 48: payload length 4294967295 "
                "outside [4112, 4194320]");
    b.len = 48;
    hdr[0] = 9;
    sb_put(&b, hdr, sizeof(hdr));
    expect_fail(&cfg, &b, EINVAL, "unknown record type 9");
    b.len = 48;
    hdr[0] = MIG_REC_ZEROS;
    hdr[2] = 1; /* flags */
    sb_put(&b, hdr, sizeof(hdr));
    expect_fail(&cfg, &b, EINVAL, "flags 0x1, expected 0");
    sb_fini(&b);
}

static struct mig_postcopy_info pc_info(void)
{
    struct mig_postcopy_info info = {.npages = NPAGES, .pending = 7};

    memset(info.token, 0x3d, sizeof(info.token));
    g_strlcpy(info.addr, "/run/vgmig/vgpu-pages-1-0.sock", sizeof(info.addr));
    return info;
}

/* HEADER, a page, POSTCOPY @info, and (if @rest) the state and END. */
static void build_postcopy(struct sb *b, const struct mig_postcopy_info *info,
                           bool rest)
{
    static uint8_t page[PAGE];
    uint8_t state[8] = {1};

    add_header(b);
    sb_add(b, mig_enc_pages(b->enc, 2, 1, page, b->rec));
    sb_add(b, mig_enc_postcopy(b->enc, info, b->rec));
    if (rest) {
        sb_add(b, mig_enc_state(b->enc, state, sizeof(state), b->rec));
        sb_add(b, mig_enc_end(b->enc, b->rec));
    }
}

/* A POSTCOPY record reaches the sink as sent; every rule about it holds:
 * its VRAM, its address, once, before DEVICE_STATE, no page data after
 * it, only in version 2, only where the destination can fetch pages. */
static void test_postcopy(void)
{
    static struct dst d;
    struct mig_postcopy_info info = pc_info(), got;
    uint8_t raw[MIG_POSTCOPY_SIZE], page[PAGE] = {0}, state[8] = {1};
    struct vg_error err = {0};
    struct sb b;

    sb_init(&b);
    build_postcopy(&b, &info, true);
    g_assert_cmpint(decode(&cfg, b.data, b.len, 0, &d, &err), ==, 0);
    g_assert_cmpuint(d.postcopies, ==, 1);
    got = d.pc;
    g_assert_cmpuint(got.npages, ==, NPAGES);
    g_assert_cmpuint(got.pending, ==, 7);
    g_assert_cmpmem(got.token, 16, info.token, 16);
    g_assert_cmpstr(got.addr, ==, info.addr);
    d.no_postcopy_sink = true;
    expect_fail_dst(&cfg, &b, &d, ENOTSUP, "cannot fetch pages");
    sb_fini(&b);

    sb_init(&b); /* twice */
    build_postcopy(&b, &info, false);
    sb_add(&b, mig_enc_postcopy(b.enc, &info, b.rec));
    expect_fail(&cfg, &b, EINVAL, "POSTCOPY twice");
    sb_fini(&b);

    sb_init(&b); /* page data after it */
    build_postcopy(&b, &info, false);
    sb_add(&b, mig_enc_pages(b.enc, 3, 1, page, b.rec));
    expect_fail(&cfg, &b, EINVAL, "page data after POSTCOPY");
    sb_fini(&b);

    sb_init(&b); /* after DEVICE_STATE */
    add_header(&b);
    sb_add(&b, mig_enc_state(b.enc, state, sizeof(state), b.rec));
    sb_add(&b, mig_enc_postcopy(b.enc, &info, b.rec));
    expect_fail(&cfg, &b, EINVAL, "POSTCOPY after DEVICE_STATE");
    sb_fini(&b);

    sb_init_version(&b, 1);
    build_postcopy(&b, &info, false);
    expect_fail(&cfg, &b, EINVAL, "POSTCOPY in a version 1 stream");
    sb_fini(&b);

    info.npages = NPAGES + 1; /* another VRAM */
    sb_init(&b);
    build_postcopy(&b, &info, false);
    expect_fail(&cfg, &b, ERANGE, "VRAM has");
    sb_fini(&b);
    info = pc_info();
    info.pending = NPAGES + 1;
    sb_init(&b);
    build_postcopy(&b, &info, false);
    expect_fail(&cfg, &b, ERANGE, "POSTCOPY of");
    sb_fini(&b);

    /* An address without its NUL, and reserved bytes set. */
    info = pc_info();
    sb_init(&b);
    add_header(&b);
    mig_enc_postcopy(b.enc, &info, b.rec);
    memcpy(raw, b.rec + MIG_REC_HDR_SIZE, sizeof(raw));
    memset(raw + 32, 'a', MIG_POSTCOPY_ADDR);
    sb_raw(&b, MIG_REC_POSTCOPY, raw, sizeof(raw));
    expect_fail(&cfg, &b, EINVAL, "not NUL-terminated");
    b.len = 0;
    add_header(&b);
    mig_enc_postcopy(b.enc, &info, b.rec);
    memcpy(raw, b.rec + MIG_REC_HDR_SIZE, sizeof(raw));
    raw[140] = 1;
    sb_raw(&b, MIG_REC_POSTCOPY, raw, sizeof(raw));
    expect_fail(&cfg, &b, EINVAL, "reserved bytes");
    sb_fini(&b);
    g_assert_cmpstr(mig_rec_name(MIG_REC_POSTCOPY), ==, "POSTCOPY");
}

static void test_bad_config(void)
{
    struct mig_stream_config c = {VRAM, 3000, 0};
    struct mig_dec_sink sink = {
        .pages = dst_pages, .zeros = dst_zeros, .state = dst_state};
    struct mig_dec *dec;
    struct mig_enc *enc;
    struct vg_error err;

    g_assert_cmpint(mig_enc_new(7, PAGE, MIG_RUN_MAX_BYTES, &enc, &err), ==,
                    -EINVAL);
    g_assert_nonnull(strstr(err.msg, "stream version 7: this encoder writes "
                                     "versions 1 to 6"));
    g_assert_cmpint(mig_enc_new(6, PAGE, 3u << 20, &enc, &err), ==, -EINVAL);
    g_assert_nonnull(strstr(err.msg, "runs of up to 3145728 bytes: this "
                                     "encoder writes 2097152 or 4194304"));
    g_assert_cmpint(mig_dec_new(&c, &sink, &dec, &err), ==, -EINVAL);
    g_assert_nonnull(strstr(err.msg, "page size 3000"));
    g_assert_cmpstr(mig_rec_name(MIG_REC_DEVICE_STATE), ==, "DEVICE_STATE");
    g_assert_cmpstr(mig_rec_name(77), ==, "unknown");
}

/* PAGES records encoded by reference, or with page hashes the caller
 * computed, are byte for byte those encoded by copy, and so is the END
 * digest over them, in either version. */
static void pages_by_reference(uint32_t version)
{
    struct sb a, b, c;
    uint8_t *pages = g_malloc(32 * PAGE);
    uint64_t hashes[32];
    uint8_t state[8] = {1, 2, 3, 4, 5, 6, 7, 8};

    for (unsigned i = 0; i < 32 * PAGE; i++) {
        pages[i] = (uint8_t)(i * 131 + i / PAGE);
    }
    for (unsigned i = 0; i < 32; i++) {
        hashes[i] = page_hash(version, pages + i * PAGE);
    }
    sb_init_version(&a, version);
    sb_init_version(&b, version);
    sb_init_version(&c, version);
    sb_add(&a, mig_enc_header(a.enc, &cfg, a.rec));
    sb_add(&b, mig_enc_header(b.enc, &cfg, b.rec));
    sb_add(&c, mig_enc_header(c.enc, &cfg, c.rec));
    for (unsigned r = 0; r < 4; r++) {
        uint32_t count = 1 + r * 5;
        size_t hdr;

        sb_add(&a, mig_enc_pages(a.enc, r * 40, count, pages, a.rec));
        /* by reference, hashing here (even r) or with the hashes given */
        hdr = mig_enc_pages_ref(b.enc, r * 40, count, pages,
                                r % 2 ? hashes : NULL, b.rec);
        g_assert_cmpuint(hdr, ==, MIG_REC_HDR_SIZE + MIG_RUN_HDR_SIZE);
        sb_add(&b, hdr);
        sb_put(&b, pages, (size_t)count * PAGE);
        memcpy(mig_enc_pages_data(c.rec), pages, (size_t)count * PAGE);
        sb_add(&c, mig_enc_pages_hashed(c.enc, r * 40, count, hashes, c.rec));
    }
    g_assert_cmpuint(mig_enc_bytes(a.enc), ==, mig_enc_bytes(b.enc));
    g_assert_cmpuint(mig_enc_bytes(a.enc), ==, mig_enc_bytes(c.enc));
    sb_add(&a, mig_enc_state(a.enc, state, sizeof(state), a.rec));
    sb_add(&b, mig_enc_state(b.enc, state, sizeof(state), b.rec));
    sb_add(&c, mig_enc_state(c.enc, state, sizeof(state), c.rec));
    sb_add(&a, mig_enc_end(a.enc, a.rec));
    sb_add(&b, mig_enc_end(b.enc, b.rec));
    sb_add(&c, mig_enc_end(c.enc, c.rec));
    g_assert_cmpuint(a.len, ==, b.len);
    g_assert_cmpmem(a.data, a.len, b.data, b.len);
    g_assert_cmpmem(a.data, a.len, c.data, c.len);
    sb_fini(&a);
    sb_fini(&b);
    sb_fini(&c);
    g_free(pages);
}

static void test_pages_by_reference(void)
{
    for (uint32_t v = MIG_STREAM_VERSION_MIN; v <= MIG_STREAM_VERSION_MAX;
         v++) {
        pages_by_reference(v);
    }
}

/* A version 3 stream of @count pages from page @first as one PAGES_LISTED
 * record, listing the hashes of @hashed but carrying @sent (a page written
 * between its hash and its send differs), then @then (a record, or
 * nothing), the state and the END. */
static void build_listed_version(struct sb *b, uint32_t version, uint64_t first,
                                 uint32_t count, const uint8_t *hashed,
                                 const uint8_t *sent,
                                 void (*then)(struct sb *b))
{
    uint64_t hashes[64];
    uint8_t state[4] = {9, 8, 7, 6};
    size_t hdr;

    for (uint32_t i = 0; i < count; i++) {
        hashes[i] = page_hash(version, hashed + (size_t)i * PAGE);
    }
    sb_init_version(b, version);
    sb_add(b, mig_enc_header(b->enc, &cfg, b->rec));
    hdr = mig_enc_pages_listed_ref(b->enc, first, count, hashes, true, b->rec);
    g_assert_cmpuint(hdr, ==, MIG_REC_HDR_SIZE + MIG_RUN_HDR_SIZE + 8 * count);
    sb_add(b, hdr);
    sb_put(b, sent, (size_t)count * PAGE);
    if (then) {
        then(b);
    }
    sb_add(b, mig_enc_state(b->enc, state, sizeof(state), b->rec));
    sb_add(b, mig_enc_end(b->enc, b->rec));
    g_assert_cmpuint(mig_enc_bytes(b->enc), ==, b->len);
}

static void build_listed(struct sb *b, uint64_t first, uint32_t count,
                         const uint8_t *hashed, const uint8_t *sent,
                         void (*then)(struct sb *b))
{
    build_listed_version(b, 3, first, count, hashed, sent, then);
}

static uint8_t listed_pages[16 * PAGE], torn_pages[16 * PAGE];

/* Pages 5 and 9 of the record were written while they went out. */
static void make_listed_pages(void)
{
    for (unsigned i = 0; i < sizeof(listed_pages); i++) {
        listed_pages[i] = (uint8_t)(i * 7 + i / PAGE);
    }
    memcpy(torn_pages, listed_pages, sizeof(torn_pages));
    torn_pages[5 * PAGE + 100] ^= 0x40;
    memset(torn_pages + 9 * PAGE, 0x11, PAGE / 2);
}

static void then_resend_5(struct sb *b)
{
    sb_add(b, mig_enc_pages(b->enc, 40 + 5, 1, torn_pages + 5 * PAGE, b->rec));
}

static void then_resend_5_zero_9(struct sb *b)
{
    then_resend_5(b);
    sb_add(b, mig_enc_zeros(b->enc, 40 + 9, 1, b->rec));
}

/* PAGES_LISTED records that say their pages may be stale: whole ones load
 * in every chunking (in place where whole in a chunk); a page whose data
 * do not match its listed hash is stale, and END fails while one is left,
 * naming how many and the first; a later PAGES or ZEROS record of it clears it.
 */
static void test_listed(void)
{
    static struct dst d;
    struct vg_error err = {0};
    size_t chunks[] = {1, 7, 4096, 0};
    struct sb b;

    make_listed_pages();
    build_listed(&b, 40, 16, listed_pages, listed_pages, NULL);
    for (unsigned i = 0; i < G_N_ELEMENTS(chunks) + 1; i++) {
        size_t chunk = i < G_N_ELEMENTS(chunks) ? chunks[i] : b.len;

        g_assert_cmpint(decode(&cfg, b.data, b.len, chunk, &d, &err), ==, 0);
        g_assert_cmpmem(d.vram + 40 * PAGE, sizeof(listed_pages), listed_pages,
                        sizeof(listed_pages));
        g_assert_cmpuint(d.hashed, ==, 1);
        /* whole in the chunk: in place; in chunks of 4096 or less: not */
        if (chunk == b.len || (chunk && chunk <= 4096)) {
            g_assert_cmpuint(d.in_place, ==, chunk == b.len ? 1 : 0);
        }
    }
    sb_fini(&b);
    /* 5 and 9 torn: two stale, the first 45 */
    build_listed(&b, 40, 16, listed_pages, torn_pages, NULL);
    expect_fail(&cfg, &b, EBADMSG,
                "END record #3 at offset 65764: 2 pages stale, the first page "
                "45: their last PAGES_LISTED data did not match the listed "
                "hashes");
    sb_fini(&b);
    /* 5 sent again: 9 is left */
    build_listed(&b, 40, 16, listed_pages, torn_pages, then_resend_5);
    expect_fail(&cfg, &b, EBADMSG, "1 pages stale, the first page 49");
    sb_fini(&b);
    /* 9 cleared by a ZEROS record too: the stream loads */
    build_listed(&b, 40, 16, listed_pages, torn_pages, then_resend_5_zero_9);
    g_assert_cmpint(decode(&cfg, b.data, b.len, 0, &d, &err), ==, 0);
    g_assert_cmpmem(d.vram + 45 * PAGE, PAGE, torn_pages + 5 * PAGE, PAGE);
    g_assert_cmpuint(d.vram[49 * PAGE], ==, 0);
    sb_fini(&b);
    /* the sink writing first sees the same */
    d.writes_first = true;
    build_listed(&b, 40, 16, listed_pages, torn_pages, NULL);
    expect_fail_dst(&cfg, &b, &d, EBADMSG, "2 pages stale, the first page 45");
    g_assert_cmpuint(d.written_first, ==, 1);
    d.writes_first = false;
    sb_fini(&b);
}

/* A PAGES_LISTED record's data placed in VRAM first (mig_dec_feed_placed)
 * are checked against its listed hashes as fed ones are. */
static void test_listed_placed(void)
{
    static struct dst d;
    struct mig_dec_sink sink = {.opaque = &d,
                                .header = dst_header,
                                .pages = dst_pages,
                                .zeros = dst_zeros,
                                .state = dst_state};
    size_t hdr = MIG_REC_HDR_SIZE + MIG_RUN_HDR_SIZE + 8 * 16;
    uint64_t first_stale;
    struct vg_error err = {0};
    struct mig_dec *dec;
    struct sb b;

    make_listed_pages();
    build_listed(&b, 40, 16, listed_pages, torn_pages, NULL);
    d.writes_first = true; /* pages() then checks the hashes in d.vram */
    memset(d.vram, 0xee, VRAM);
    memcpy(d.vram + 40 * PAGE, torn_pages, sizeof(torn_pages));
    d.confirmed = 0;
    g_assert_cmpint(mig_dec_new(&cfg, &sink, &dec, &err), ==, 0);
    g_assert_cmpint(mig_dec_feed(dec, b.data, 48 + hdr, &err), ==, 0);
    /* a place that is not the record's pages is refused */
    g_assert_cmpint(mig_dec_feed_placed(dec, 41 * PAGE, d.vram + 41 * PAGE,
                                        sizeof(torn_pages), &err),
                    ==, -EINVAL);
    g_assert_nonnull(strstr(err.msg, "the record's are 65536 bytes from page "
                                     "40"));
    mig_dec_free(dec);
    g_assert_cmpint(mig_dec_new(&cfg, &sink, &dec, &err), ==, 0);
    g_assert_cmpint(mig_dec_feed(dec, b.data, 48 + hdr, &err), ==, 0);
    g_assert_cmpint(mig_dec_feed_placed(dec, 40 * PAGE, d.vram + 40 * PAGE,
                                        sizeof(torn_pages), &err),
                    ==, 0);
    g_assert_cmpuint(mig_dec_stale_pages(dec, &first_stale), ==, 2);
    g_assert_cmpuint(mig_dec_stale_marked(dec), ==, 2);
    g_assert_cmpuint(first_stale, ==, 45);
    g_assert_true(mig_dec_page_stale(dec, 49));
    g_assert_false(mig_dec_page_stale(dec, 46));
    g_assert_cmpuint(mig_dec_bytes_in_place(dec), ==, sizeof(torn_pages));
    g_assert_cmpuint(d.confirmed, ==, 1);
    d.writes_first = false;
    sb_fini(&b);
    mig_dec_free(dec);
}

/* Malformed PAGES_LISTED records: in a version 2 stream, a listed hash
 * changed on the way (the checksum covers the list), a length that is
 * not whole pages with their hashes, a page that does not match in a
 * record that does not say its pages may be stale (stop-copy's), a flag
 * that is not that one. */
static void test_listed_bad(void)
{
    uint8_t payload[16 + 2 * (8 + PAGE)];
    uint64_t hashes[16];
    struct sb b;

    make_listed_pages();
    sb_init_version(&b, 2);
    add_header(&b);
    memset(payload, 0, sizeof(payload));
    payload[8] = 2; /* pages 0+2 */
    sb_raw(&b, MIG_REC_PAGES_LISTED, payload, sizeof(payload));
    expect_fail(&cfg, &b, EINVAL,
                "PAGES_LISTED record #1 at offset 48: PAGES_LISTED in a "
                "version 2 stream");
    sb_fini(&b);
    build_listed(&b, 40, 16, listed_pages, listed_pages, NULL);
    b.data[48 + 32 + 8 * 3 + 2] ^= 0x04; /* the fourth listed hash */
    expect_fail(&cfg, &b, EBADMSG,
                "PAGES_LISTED record #1 at offset 48: "
                "checksum");
    sb_fini(&b);
    sb_init_version(&b, 3);
    add_header(&b);
    sb_raw(&b, MIG_REC_PAGES_LISTED, payload, sizeof(payload) - 8);
    expect_fail(&cfg, &b, EINVAL,
                "run of 2 pages of 4096 bytes does not match payload length "
                "8216");
    sb_fini(&b);
    sb_init_version(&b, 3);
    add_header(&b);
    for (unsigned i = 0; i < 16; i++) {
        hashes[i] = XXH3_64bits(listed_pages + i * PAGE, PAGE);
    }
    sb_add(&b, mig_enc_pages_listed_ref(b.enc, 40, 16, hashes, false, b.rec));
    sb_put(&b, torn_pages, sizeof(torn_pages));
    expect_fail(&cfg, &b, EBADMSG,
                "PAGES_LISTED record #1 at offset 48: page 45: hash");
    b.len = 48;
    sb_add(&b, mig_enc_pages_listed_ref(b.enc, 40, 16, hashes, true, b.rec));
    b.data[48 + 2] = 3; /* a flag beside MIG_LISTED_MAY_BE_STALE */
    sb_put(&b, listed_pages, sizeof(listed_pages));
    expect_fail(&cfg, &b, EINVAL, "flags 0x3, expected 0");
    sb_fini(&b);
}

/* Pieces 0, 1, 7 and 63 of page 45 (5 of the listed record at 40) and
 * piece 3 of page 47, with bytes of @pieces_src; the first with the page
 * hash of page 45 as they leave it. */
#define PIECES_MASK_45 ((1ull << 0) | (1ull << 1) | (1ull << 7) | (1ull << 63))
static uint8_t pieces_src[PAGE], pieces_want[16 * PAGE];
static uint32_t pieces_version = 4; /* of the stream then_pieces() ends */

static void then_pieces(struct sb *b)
{
    sb_add(b, mig_enc_page_pieces(
                  b->enc, 45, PIECES_MASK_45, pieces_src, true,
                  page_hash(pieces_version, pieces_want + 5 * PAGE), b->rec));
    sb_add(b, mig_enc_page_pieces(b->enc, 47, 1ull << 3, pieces_src, false, 0,
                                  b->rec));
}

/* The listed pages with the pieces of then_pieces() over pages 5 and 7,
 * into pieces_want. */
static void pieces_expected(void)
{
    uint32_t piece = PAGE / MIG_PAGE_PIECES;
    uint8_t *want = pieces_want;

    for (unsigned i = 0; i < PAGE; i++) {
        pieces_src[i] = (uint8_t)(0xa5 ^ i);
    }
    memcpy(want, listed_pages, sizeof(listed_pages));
    for (uint64_t m = PIECES_MASK_45; m; m &= m - 1) {
        size_t at = (size_t)__builtin_ctzll(m) * piece;

        memcpy(want + 5 * PAGE + at, pieces_src + at, piece);
    }
    memcpy(want + 7 * PAGE + 3 * piece, pieces_src + 3 * piece, piece);
}

/* Decode @b (then_pieces() after the listed pages) in random chunks, in
 * chunks of 14 to 35 bytes and whole, the sink writing pages first or
 * not: the pages are pieces_want, and the pieces sink hashed @hashed
 * pages (the stale ones).  Whole, both records' pieces are read where
 * they arrived; in chunks smaller than a record, from the decoder's
 * copy. */
static void decode_pieces(const struct sb *b, unsigned hashed)
{
    static struct dst d;
    struct vg_error err;

    for (unsigned k = 0; k < 8; k++) {
        size_t chunk = k < 2 ? 0 : k < 6 ? 7 * k : b->len;

        d.writes_first = k % 2;
        d.pieces_hashed = 0;
        g_assert_cmpint(decode(&cfg, b->data, b->len, chunk, &d, &err), ==, 0);
        g_assert_cmpmem(d.vram + 40 * PAGE, sizeof(pieces_want), pieces_want,
                        sizeof(pieces_want));
        g_assert_cmpuint(d.pieces_hashed, ==, hashed);
        /* 4 + 1 pieces, their hashes given from version 6 on */
        g_assert_cmpuint(d.piece_hashes, ==,
                         pieces_version >= MIG_PIECE_HASH_VERSION ? 5 : 0);
        if (k >= 2) {
            g_assert_cmpuint(d.pieces_in_place, ==, k < 6 ? 0 : 2);
        }
    }
}

/* Version 4: PAGE_PIECES records change only their pieces of a page a
 * record brought, in any chunking and whether the sink writes pages first
 * or not; a record's length is the shape of its mask.  A page stale
 * there (torn while it went) is mended by pieces that carry the hash the
 * page then has, and not hashed where it was not stale; in version 5
 * that hash is the page's tree; in version 6 the checksum takes the
 * pieces' hashes, which the sink gets, and still fails a changed byte. */
static void test_pieces(const void *opaque)
{
    uint32_t v = GPOINTER_TO_UINT(opaque);
    struct sb b;

    pieces_version = v;

    make_listed_pages();
    pieces_expected();
    build_listed_version(&b, v, 40, 16, listed_pages, listed_pages,
                         then_pieces);
    /* header, listed record, pieces of 45 and of 47, state, END */
    g_assert_cmpuint(b.len, ==,
                     48 + 32 + 16 * (8 + PAGE) + 40 + 4 * (PAGE / 64) + 40 +
                         PAGE / 64 + 20 + 40);
    decode_pieces(&b, 0);
    /* a byte of the last record's pieces changed, in place or not */
    b.data[b.len - 40 - 20 - 1] ^= 0x10;
    expect_fail(&cfg, &b, EBADMSG, "PAGE_PIECES record #3 at offset");
    sb_fini(&b);
    /* page 45 torn where the pieces go (piece 1) */
    memcpy(torn_pages, listed_pages, sizeof(torn_pages));
    torn_pages[5 * PAGE + 100] ^= 0x40;
    build_listed_version(&b, v, 40, 16, listed_pages, torn_pages, then_pieces);
    decode_pieces(&b, 1);
    sb_fini(&b);
}

/* Pieces of page 45 (mask 0x3), of 45 again (0x6, other bytes: piece 1
 * depends on the order), of 47 (piece 3), of 49 (pieces 8 and 9, with
 * its hash: the page is stale in the torn stream), from pieces_src. */
static void then_pieces_twice(struct sb *b)
{
    uint8_t page49[PAGE], other[PAGE];

    for (unsigned i = 0; i < PAGE; i++) {
        other[i] = pieces_src[i] ^ 0x5a;
    }
    memcpy(page49, listed_pages + 9 * PAGE, PAGE);
    memcpy(page49 + 8 * (PAGE / 64), pieces_src + 8 * (PAGE / 64),
           2 * (PAGE / 64));
    sb_add(b,
           mig_enc_page_pieces(b->enc, 45, 0x3, pieces_src, false, 0, b->rec));
    sb_add(b, mig_enc_page_pieces(b->enc, 45, 0x6, other, false, 0, b->rec));
    sb_add(b, mig_enc_page_pieces(b->enc, 47, 1ull << 3, pieces_src, false, 0,
                                  b->rec));
    sb_add(b, mig_enc_page_pieces(b->enc, 49, 0x300, pieces_src, true,
                                  page_hash(6, page49), b->rec));
}

/* Version 6 pieces applied in batches (the sink's run(), here last job
 * first) leave VRAM as one at a time does: a record of a page already in
 * the batch waits for it (two batches here: 45, then 45 47 49), chunks
 * smaller than a record apply none that way; a stale page is mended in
 * a batch; a bad checksum or a hash that does not mend names the record
 * at fault, not the batch's last. */
static void test_pieces_batch(void)
{
    g_autofree uint8_t *serial = g_malloc(16 * PAGE);
    static struct dst d;
    struct vg_error err;
    size_t rec45;
    struct sb b;

    make_listed_pages();
    pieces_expected();
    memcpy(torn_pages, listed_pages, sizeof(torn_pages));
    torn_pages[9 * PAGE + 8 * (PAGE / 64) + 5] ^= 0x40; /* mended by 49's */
    build_listed_version(&b, 6, 40, 16, listed_pages, torn_pages,
                         then_pieces_twice);
    g_assert_cmpint(decode(&cfg, b.data, b.len, b.len, &d, &err), ==, 0);
    memcpy(serial, d.vram + 40 * PAGE, 16 * PAGE);
    g_assert_cmpuint(d.pieces_hashed, ==, 1);
    d.batches = true;
    d.pieces_hashed = 0;
    g_assert_cmpint(decode(&cfg, b.data, b.len, b.len, &d, &err), ==, 0);
    g_assert_cmpmem(d.vram + 40 * PAGE, 16 * PAGE, serial, 16 * PAGE);
    g_assert_cmpuint(d.batch_runs, ==, 2);
    g_assert_cmpuint(d.batch_jobs, ==, 4);
    g_assert_cmpuint(d.pieces_hashed, ==, 1);
    g_assert_cmpint(decode(&cfg, b.data, b.len, 7, &d, &err), ==, 0);
    g_assert_cmpmem(d.vram + 40 * PAGE, 16 * PAGE, serial, 16 * PAGE);
    g_assert_cmpuint(d.batch_jobs, ==, 0);
    /* a byte of the second record of 45 (#3, the first of the second
     * batch) changed */
    rec45 = 48 + 32 + 16 * (8 + PAGE) + 40 + 2 * (PAGE / 64);
    b.data[rec45 + 40 + 1] ^= 0x10;
    g_assert_cmpint(decode(&cfg, b.data, b.len, b.len, &d, &err), ==, -EBADMSG);
    g_assert_nonnull(strstr(err.msg, "PAGE_PIECES record #3 at offset"));
    g_assert_nonnull(strstr(err.msg, ": checksum "));
    b.data[rec45 + 40 + 1] ^= 0x10;
    sb_fini(&b);
    /* 49 torn where its pieces do not go: its hash does not mend it */
    torn_pages[9 * PAGE + 8 * (PAGE / 64) + 5] ^= 0x40;
    torn_pages[9 * PAGE + 100] ^= 0x40;
    build_listed_version(&b, 6, 40, 16, listed_pages, torn_pages,
                         then_pieces_twice);
    g_assert_cmpint(decode(&cfg, b.data, b.len, b.len, &d, &err), ==, -EBADMSG);
    g_assert_nonnull(strstr(err.msg, "PAGE_PIECES record #5 at offset"));
    g_assert_nonnull(strstr(err.msg, "page 49: hash"));
    d.batches = false;
    sb_fini(&b);
}

/* Malformed or misplaced PAGE_PIECES records: in a version 3 stream, of
 * a page no record brought, of a stale page without the page hash that
 * mends it or with one its pieces do not give, a mask that is zero or
 * does not match the length, a page hash not flagged, at a destination
 * without a pieces sink. */
static void test_pieces_bad(void)
{
    uint8_t payload[24 + 2 * (PAGE / 64)];
    static struct dst d;
    struct sb b;

    make_listed_pages();
    memset(payload, 0, sizeof(payload));
    payload[0] = 45;
    payload[8] = 3; /* pieces 0 and 1 */
    sb_init_version(&b, 3);
    add_header(&b);
    sb_raw(&b, MIG_REC_PAGE_PIECES, payload, sizeof(payload));
    expect_fail(&cfg, &b, EINVAL,
                "PAGE_PIECES record #1 at offset 48: PAGE_PIECES in a "
                "version 3 stream");
    sb_fini(&b);
    sb_init_version(&b, 4);
    add_header(&b);
    sb_raw(&b, MIG_REC_PAGE_PIECES, payload, sizeof(payload));
    expect_fail(&cfg, &b, EINVAL,
                "PAGE_PIECES record #1 at offset 48: page 45: pieces of a "
                "page that no record before brought");
    sb_fini(&b);
    /* 45 and 49 torn: stale */
    build_listed_version(&b, 4, 40, 16, listed_pages, torn_pages, NULL);
    b.len = 65744; /* the state and END go */
    sb_raw(&b, MIG_REC_PAGE_PIECES, payload, sizeof(payload));
    expect_fail(&cfg, &b, EBADMSG,
                "PAGE_PIECES record #2 at offset 65744: page 45 is stale, and "
                "a record without its page hash cannot mend it");
    b.len = 65744;
    sb_add(&b, mig_enc_page_pieces(b.enc, 45, 3, listed_pages + 5 * PAGE, true,
                                   0x1234, b.rec));
    expect_fail(&cfg, &b, EBADMSG,
                "PAGE_PIECES record #2 at offset 65744: page 45: hash");
    b.len = 65744;
    payload[16] = 1; /* a page hash, not flagged */
    sb_raw(&b, MIG_REC_PAGE_PIECES, payload, sizeof(payload));
    expect_fail(&cfg, &b, EINVAL, "page hash 0000000000000001 not flagged");
    payload[16] = 0;
    b.len = 65744;
    payload[8] = 7; /* three pieces, two sent */
    sb_raw(&b, MIG_REC_PAGE_PIECES, payload, sizeof(payload));
    expect_fail(&cfg, &b, EINVAL,
                "mask 0000000000000007 of 64-byte pieces does not match "
                "payload length 152");
    b.len = 65744;
    payload[8] = 0;
    sb_raw(&b, MIG_REC_PAGE_PIECES, payload, 24 + PAGE / 64);
    expect_fail(&cfg, &b, EINVAL, "mask 0000000000000000");
    sb_fini(&b);
    pieces_expected();
    build_listed_version(&b, 4, 40, 16, listed_pages, listed_pages,
                         then_pieces);
    d.no_pieces_sink = true;
    expect_fail_dst(&cfg, &b, &d, ENOTSUP,
                    "PAGE_PIECES record #2 at offset 65744: this destination "
                    "cannot write pieces");
    d.no_pieces_sink = false;
    sb_fini(&b);
}

/* Large runs: a VRAM of 8 MiB, a destination that counts its runs. */
#define LARGE_VRAM   (8u << 20)
#define LARGE_NPAGES (LARGE_VRAM / PAGE)

struct large_dst {
    uint8_t *vram;
    unsigned runs;
};

static int large_pages(void *o, uint64_t first, uint64_t count,
                       const uint8_t *data, const uint64_t *hashes,
                       struct vg_error *err)
{
    struct large_dst *d = o;

    g_assert_cmpuint(first + count, <=, LARGE_NPAGES);
    memcpy(d->vram + first * PAGE, data, count * PAGE);
    d->runs++;
    return 0;
}

/* The stream of @vram from an encoder whose runs carry @run_max bytes:
 * the HEADER, then all of VRAM in runs as long as they may be, into @s
 * (its length returned); @hdr_flags gets the HEADER's flags field. */
static size_t large_stream(uint32_t run_max, const uint8_t *vram, uint8_t *s,
                           uint32_t *hdr_flags)
{
    const struct mig_stream_config c = {LARGE_VRAM, PAGE, FEAT};
    uint32_t per_run = run_max / PAGE;
    struct mig_enc *enc;
    struct vg_error err;
    size_t len;

    g_assert_cmpint(mig_enc_new(MIG_STREAM_VERSION, PAGE, run_max, &enc, &err),
                    ==, 0);
    g_assert_cmpuint(mig_enc_run_max(enc), ==, run_max);
    len = mig_enc_header(enc, &c, s);
    *hdr_flags = vg_get_le32(s + MIG_REC_HDR_SIZE + 28);
    for (uint32_t p = 0; p < LARGE_NPAGES; p += per_run) {
        len += mig_enc_pages(enc, p, per_run, vram + (size_t)p * PAGE, s + len);
    }
    mig_enc_free(enc);
    return len;
}

/* Decode @len bytes of @s into @d; 0 or the error, in @err. */
static int large_decode(const uint8_t *s, size_t len, struct large_dst *d,
                        struct vg_error *err)
{
    const struct mig_stream_config c = {LARGE_VRAM, PAGE, FEAT};
    struct mig_dec_sink sink = {.opaque = d, .pages = large_pages};
    struct mig_dec *dec;
    int ret;

    d->runs = 0;
    g_assert_cmpint(mig_dec_new(&c, &sink, &dec, err), ==, 0);
    ret = mig_dec_feed(dec, s, len, err);
    mig_dec_free(dec);
    return ret;
}

/* Runs of up to 4 MiB where the HEADER says so (MIG_HDR_LARGE_RUNS), of
 * up to 2 MiB where it does not, as a decoder that predates larger runs
 * reads; a HEADER flag this decoder does not know is refused. */
static void test_large_runs(void)
{
    g_autofree uint8_t *vram = g_malloc(LARGE_VRAM);
    g_autofree uint8_t *s = g_malloc(2 * LARGE_VRAM);
    struct large_dst d = {.vram = g_malloc0(LARGE_VRAM)};
    struct vg_error err;
    uint32_t flags;
    size_t len;

    for (size_t i = 0; i < LARGE_VRAM; i++) {
        vram[i] = (uint8_t)(i * 7 + i / PAGE);
    }
    len = large_stream(MIG_RUN_MAX_BYTES, vram, s, &flags);
    g_assert_cmphex(flags, ==, MIG_HDR_LARGE_RUNS);
    g_assert_cmpint(large_decode(s, len, &d, &err), ==, 0);
    g_assert_cmpuint(d.runs, ==, LARGE_VRAM / MIG_RUN_MAX_BYTES);
    g_assert_cmpmem(d.vram, LARGE_VRAM, vram, LARGE_VRAM);

    len = large_stream(MIG_RUN_SMALL_BYTES, vram, s, &flags);
    g_assert_cmphex(flags, ==, 0);
    memset(d.vram, 0, LARGE_VRAM);
    g_assert_cmpint(large_decode(s, len, &d, &err), ==, 0);
    g_assert_cmpuint(d.runs, ==, LARGE_VRAM / MIG_RUN_SMALL_BYTES);
    g_assert_cmpmem(d.vram, LARGE_VRAM, vram, LARGE_VRAM);

    /* A 4 MiB run in a stream whose HEADER does not allow it */
    len = large_stream(MIG_RUN_MAX_BYTES, vram, s, &flags);
    s[MIG_REC_HDR_SIZE + 28] = 0;
    vg_put_le64(s + 8,
                mig_rec_checksum(s, s + MIG_REC_HDR_SIZE, MIG_HEADER_SIZE));
    g_assert_cmpint(large_decode(s, len, &d, &err), ==, -EINVAL);
    g_assert_nonnull(strstr(err.msg, "PAGES record #1 at offset 48: payload "
                                     "length 4194320 outside [4112, "
                                     "2097168]"));
    g_assert_cmpuint(d.runs, ==, 0);

    /* A HEADER flag this decoder does not know */
    s[MIG_REC_HDR_SIZE + 28] = 3;
    vg_put_le64(s + 8,
                mig_rec_checksum(s, s + MIG_REC_HDR_SIZE, MIG_HEADER_SIZE));
    g_assert_cmpint(large_decode(s, len, &d, &err), ==, -EINVAL);
    g_assert_nonnull(strstr(err.msg, "HEADER flags 0x3: this device knows "
                                     "0x1 only"));
    g_free(d.vram);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/mig-stream/large-runs", test_large_runs);
    g_test_add_func("/mig-stream/round-trip", test_round_trip);
    g_test_add_func("/mig-stream/pages-by-reference", test_pages_by_reference);
    g_test_add_func("/mig-stream/sink-hashes", test_sink_hashes);
    g_test_add_func("/mig-stream/write-hashed", test_write_hashed);
    g_test_add_func("/mig-stream/feed-placed", test_feed_placed);
    g_test_add_func("/mig-stream/pages-v2-layout", test_pages_v2_layout);
    g_test_add_func("/mig-stream/version-confusion", test_version_confusion);
    g_test_add_func("/mig-stream/bad-header", test_bad_header);
    g_test_add_func("/mig-stream/bad-checksum", test_bad_checksum);
    g_test_add_func("/mig-stream/truncated", test_truncated);
    g_test_add_func("/mig-stream/duplicates", test_duplicates);
    g_test_add_func("/mig-stream/ranges", test_ranges);
    g_test_add_func("/mig-stream/after-end-and-digest",
                    test_after_end_and_digest);
    g_test_add_func("/mig-stream/bad-record-header", test_bad_record_header);
    g_test_add_func("/mig-stream/bad-config", test_bad_config);
    g_test_add_func("/mig-stream/postcopy", test_postcopy);
    g_test_add_func("/mig-stream/listed", test_listed);
    g_test_add_func("/mig-stream/listed-placed", test_listed_placed);
    g_test_add_func("/mig-stream/listed-bad", test_listed_bad);
    g_test_add_data_func("/mig-stream/pieces", GUINT_TO_POINTER(4),
                         test_pieces);
    g_test_add_data_func("/mig-stream/pieces-v5", GUINT_TO_POINTER(5),
                         test_pieces);
    g_test_add_data_func("/mig-stream/pieces-v6", GUINT_TO_POINTER(6),
                         test_pieces);
    g_test_add_func("/mig-stream/pieces-v6-layout", test_pieces_v6_layout);
    g_test_add_func("/mig-stream/pieces-batch", test_pieces_batch);
    g_test_add_func("/mig-stream/pieces-bad", test_pieces_bad);
    return g_test_run();
}
