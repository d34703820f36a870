/*
 * Unit tests of stream-file (a migration stream read lazily from a save
 * file): a stream written by the encoder into a temporary file between
 * bytes of another format (as QEMU frames device data), handed over as
 * extents cut at random points; the pages read back must be the last
 * ones the stream wrote, and every damage to the file must be refused
 * with the error that names it: at the scan for the small records, at
 * the read of a PAGES record, at the digest for a record no page needs.
 * A version 4 file's PAGE_PIECES records go over their pages in order as
 * they are read, and mend a page torn in pre-copy only with its hash.
 */
#include <errno.h>
#include <glib.h>
#include <glib/gstdio.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "vfio-migration/mig-stream.h"
#include "vfio-migration/stream-file.h"

#define PAGE   4096u
#define NPAGES 64u
#define VRAM   (PAGE * NPAGES)
#define FEAT   3u

static const struct mig_stream_config cfg = {VRAM, PAGE, FEAT};

/* What the sink saw. */
struct seen {
    uint8_t zeroed[NPAGES];
    uint8_t state[64];
    uint32_t state_len;
};

static int sink_zeros(void *o, uint64_t first, uint64_t count,
                      struct vg_error *err)
{
    struct seen *s = o;

    (void)err;
    memset(s->zeroed + first, 1, count);
    return 0;
}

static int sink_state(void *o, const uint8_t *blob, uint32_t len,
                      struct vg_error *err)
{
    struct seen *s = o;

    (void)err;
    g_assert_cmpuint(len, <=, sizeof(s->state));
    memcpy(s->state, blob, len);
    s->state_len = len;
    return 0;
}

/* The stream, its records' offsets, and the VRAM it leaves. */
struct stream {
    uint32_t version;
    GByteArray *bytes;
    uint8_t vram[VRAM];
    size_t rec_at[16];
    unsigned nrec;
};

static void put(struct stream *st, const uint8_t *buf, size_t n)
{
    st->rec_at[st->nrec++] = st->bytes->len;
    g_byte_array_append(st->bytes, buf, (guint)n);
}

static void fill(uint8_t *p, uint32_t pages, unsigned seed)
{
    for (size_t i = 0; i < (size_t)pages * PAGE; i++) {
        p[i] = (uint8_t)(i * 7 + seed * 13 + i / PAGE);
    }
}

/*
 * HEADER, PAGES 0+32, PAGES 32+32, ZEROS 8+4, PAGES 10+1 (rewrites a
 * zeroed page), PAGES 40+2 (rewrites two pages of the second run),
 * [POSTCOPY], DEVICE_STATE, END.  With @all_again, a last PAGES 32+32
 * rewrites the second run whole: no page needs the first copy any more.
 */
static void build(struct stream *st, uint32_t version, bool all_again)
{
    static const uint8_t state[40] = "vgpu device state of forty bytes";
    struct mig_stream_config c = cfg;
    struct mig_enc *enc;
    struct vg_error err;
    uint8_t *rec = g_malloc(MIG_REC_MAX);
    uint8_t data[32 * PAGE];

    memset(st, 0, sizeof(*st));
    st->version = version;
    st->bytes = g_byte_array_new();
    g_assert_cmpint(mig_enc_new(version, PAGE, MIG_RUN_MAX_BYTES, &enc, &err),
                    ==, 0);
    put(st, rec, mig_enc_header(enc, &c, rec));
    for (unsigned run = 0; run < 2; run++) {
        fill(data, 32, run);
        memcpy(st->vram + run * 32 * PAGE, data, sizeof(data));
        put(st, rec, mig_enc_pages(enc, run * 32, 32, data, rec));
    }
    put(st, rec, mig_enc_zeros(enc, 8, 4, rec));
    memset(st->vram + 8 * PAGE, 0, 4 * PAGE);
    fill(data, 1, 7);
    memcpy(st->vram + 10 * PAGE, data, PAGE);
    put(st, rec, mig_enc_pages(enc, 10, 1, data, rec));
    fill(data, 2, 9);
    memcpy(st->vram + 40 * PAGE, data, 2 * PAGE);
    put(st, rec, mig_enc_pages(enc, 40, 2, data, rec));
    if (all_again) {
        fill(data, 32, 11);
        memcpy(st->vram + 32 * PAGE, data, 32 * PAGE);
        put(st, rec, mig_enc_pages(enc, 32, 32, data, rec));
    }
    put(st, rec, mig_enc_state(enc, state, sizeof(state), rec));
    put(st, rec, mig_enc_end(enc, rec));
    mig_enc_free(enc);
    g_free(rec);
}

/* The stream in a file, cut into extents of random sizes with other
 * bytes between them; the file's fd, and the extents in @off/@len. */
static int save_file(const struct stream *st, uint64_t *off, uint64_t *len,
                     unsigned *n, unsigned seed)
{
    GRand *r = g_rand_new_with_seed(seed);
    char path[] = "/tmp/test-stream-file-XXXXXX";
    int fd = g_mkstemp(path);
    size_t done = 0;
    uint64_t at = 0;

    g_assert_cmpint(fd, >=, 0);
    g_unlink(path);
    *n = 0;
    while (done < st->bytes->len) {
        uint8_t junk[24];
        size_t take = (size_t)g_rand_int_range(r, 1, 300000);

        take = MIN(take, st->bytes->len - done);
        memset(junk, 0xa5, sizeof(junk));
        g_assert_cmpint(pwrite(fd, junk, sizeof(junk), (off_t)at), ==,
                        sizeof(junk));
        at += sizeof(junk);
        g_assert_cmpint(pwrite(fd, st->bytes->data + done, take, (off_t)at), ==,
                        (ssize_t)take);
        off[*n] = at;
        len[*n] = take;
        (*n)++;
        at += take;
        done += take;
    }
    g_rand_free(r);
    return fd;
}

static struct sf *open_sf(int fd, struct seen *seen)
{
    struct sf_config c = {cfg, fd, 0, {.opaque = seen}};
    struct vg_error err = {0};
    struct sf *s = NULL;

    c.sink.zeros = sink_zeros;
    c.sink.state = sink_state;
    g_assert_cmpint(sf_new(&c, &s, &err), ==, 0);
    return s;
}

/* Hand every extent over; the first error, 0 if none. */
static int add_all(struct sf *s, const uint64_t *off, const uint64_t *len,
                   unsigned n, struct vg_error *err)
{
    for (unsigned i = 0; i < n; i++) {
        int ret = sf_add(s, off[i], len[i], err);

        if (ret < 0) {
            return ret;
        }
    }
    return 0;
}

/* Flip a byte at stream offset @pos in the file. */
static void damage(int fd, const uint64_t *off, const uint64_t *len, unsigned n,
                   uint64_t pos)
{
    for (unsigned i = 0; i < n; i++) {
        if (pos < len[i]) {
            uint8_t b;

            g_assert_cmpint(pread(fd, &b, 1, (off_t)(off[i] + pos)), ==, 1);
            b ^= 0xff;
            g_assert_cmpint(pwrite(fd, &b, 1, (off_t)(off[i] + pos)), ==, 1);
            return;
        }
        pos -= len[i];
    }
    g_assert_not_reached();
}

/* @st in a save file of @seed's extents, every extent handed over and
 * the end checked. */
static struct sf *file_scanned(const struct stream *st, unsigned seed,
                               struct seen *seen)
{
    uint64_t off[256], len[256];
    struct vg_error err = {0};
    unsigned n;
    struct sf *s = open_sf(save_file(st, off, len, &n, seed), seen);

    g_assert_cmpint(add_all(s, off, len, n, &err), ==, 0);
    g_assert_cmpint(sf_end(s, &err), ==, 0);
    return s;
}

/* build(2, @seed % 2)'s stream in a save file of @seed's extents, every
 * extent handed over and the end checked. */
static struct sf *scanned(unsigned seed, struct stream *st, struct seen *seen)
{
    build(st, 2, seed % 2);
    return file_scanned(st, seed, seen);
}

static void test_read_back(void)
{
    for (unsigned seed = 1; seed <= 8; seed++) {
        uint64_t bm[1], hashes[3];
        struct stream st;
        struct seen seen = {0};
        struct vg_error err = {0};
        uint8_t *got = g_malloc(VRAM);
        struct sf *s = scanned(seed, &st, &seen);

        g_assert_cmpuint(sf_bytes(s), ==, st.bytes->len);
        /* Pages 8, 9, 11 were cleared last: not to be read. */
        g_assert_cmpuint(sf_pending(s, bm), ==, NPAGES - 3);
        g_assert_cmpuint(bm[0], ==, ~(uint64_t)0 & ~(0xbull << 8));
        g_assert_true(seen.zeroed[8] && seen.zeroed[11] && !seen.zeroed[12]);
        g_assert_cmpuint(seen.state_len, ==, 40);
        g_assert_cmpmem(seen.state, 8, "vgpu dev", 8);
        /* Backwards, page by page: a record is read when a page needs it. */
        for (int p = NPAGES - 1; p >= 0; p--) {
            if (bm[0] >> p & 1) {
                g_assert_cmpint(
                    sf_read(s, (uint64_t)p, 1, got + p * PAGE, NULL, &err), ==,
                    0);
            } else {
                memset(got + p * PAGE, 0, PAGE);
            }
        }
        g_assert_cmpmem(got, VRAM, st.vram, VRAM);
        g_assert_cmpint(sf_read(s, 32, 3, got, hashes, &err), ==, 0);
        g_assert_cmpmem(got, 3 * PAGE, st.vram + 32 * PAGE, 3 * PAGE);
        for (unsigned k = 0; k < 3; k++) {
            g_assert_cmphex(hashes[k], ==,
                            XXH3_64bits(st.vram + (32 + k) * PAGE, PAGE));
        }
        g_assert_cmpint(sf_read(s, 9, 1, got, NULL, &err), ==, -EINVAL);
        g_assert_nonnull(strstr(err.msg, "page 9 is not in the save file"));
        g_assert_cmpint(sf_verify(s, &err), ==, 0);
        sf_free(s);
        g_byte_array_free(st.bytes, TRUE);
        g_free(got);
    }
}

/* One of several threads reading the pages of a save file at once. */
struct reader_job {
    struct sf *s;
    uint64_t bm;
    unsigned first; /* every 4th pending page from this one */
    uint8_t *got;
    uint64_t *hashes;
    int ret;
};

static gpointer read_every_fourth(gpointer opaque)
{
    struct reader_job *j = opaque;
    struct vg_error err = {0};
    struct sf_reader *rd = NULL;

    j->ret = sf_reader_new(j->s, &rd, &err);
    for (unsigned p = j->first; j->ret == 0 && p < NPAGES; p += 4) {
        if (j->bm >> p & 1) {
            j->ret = sf_read_with(rd, p, 1, j->got + (size_t)p * PAGE,
                                  j->hashes + p, &err);
        }
    }
    sf_reader_free(rd);
    return NULL;
}

/* Four threads with a reader each read every page, interleaved so that
 * they read the same records; the pages, their hashes and then the
 * digest all hold. */
static void test_readers(void)
{
    for (unsigned seed = 1; seed <= 8; seed++) {
        uint64_t bm[1];
        uint64_t *hashes = g_new0(uint64_t, NPAGES);
        uint8_t *got = g_malloc0(VRAM);
        struct reader_job jobs[4];
        GThread *th[4];
        struct stream st;
        struct seen seen = {0};
        struct vg_error err = {0};
        struct sf *s = scanned(seed, &st, &seen);

        sf_pending(s, bm);
        for (unsigned i = 0; i < 4; i++) {
            jobs[i] = (struct reader_job){s, bm[0], i, got, hashes, 0};
            th[i] = g_thread_new("sf-reader", read_every_fourth, &jobs[i]);
        }
        for (unsigned i = 0; i < 4; i++) {
            g_thread_join(th[i]);
            g_assert_cmpint(jobs[i].ret, ==, 0);
        }
        for (unsigned p = 0; p < NPAGES; p++) {
            if (bm[0] >> p & 1) {
                g_assert_cmpmem(got + (size_t)p * PAGE, PAGE,
                                st.vram + (size_t)p * PAGE, PAGE);
                g_assert_cmphex(hashes[p], ==,
                                XXH3_64bits(st.vram + (size_t)p * PAGE, PAGE));
            }
        }
        g_assert_cmpint(sf_verify(s, &err), ==, 0);
        sf_free(s);
        g_byte_array_free(st.bytes, TRUE);
        g_free(got);
        g_free(hashes);
    }
}

/* The stream of build(@all_again) in a file, damaged at byte @plus of
 * record @rec, scanned whole: the small records are intact. */
static struct sf *scan_damaged(struct stream *st, bool all_again, unsigned rec,
                               uint64_t plus, struct seen *seen)
{
    uint64_t off[256], len[256];
    struct vg_error err = {0};
    struct sf *s;
    unsigned n;
    int fd;

    build(st, 2, all_again);
    fd = save_file(st, off, len, &n, 3 + rec);
    damage(fd, off, len, n, st->rec_at[rec] + plus);
    s = open_sf(fd, seen);
    g_assert_cmpint(add_all(s, off, len, n, &err), ==, 0);
    g_assert_cmpint(sf_end(s, &err), ==, 0);
    return s;
}

/* A damaged page: its record is refused when a page of it is read. */
static void test_damaged_page(void)
{
    struct stream st;
    struct seen seen = {0};
    struct vg_error err = {0};
    uint8_t page[PAGE];
    /* A byte of page 33, in the second PAGES record. */
    struct sf *s = scan_damaged(&st, false, 2, 32 + PAGE + 100, &seen);

    g_assert_cmpint(sf_read(s, 0, 1, page, NULL, &err), ==, 0);
    g_assert_cmpint(sf_read(s, 50, 1, page, NULL, &err), ==, -EBADMSG);
    g_assert_nonnull(strstr(err.msg, "PAGES record #2"));
    g_assert_nonnull(strstr(err.msg, "pages 32+32"));
    g_assert_nonnull(strstr(err.msg, "changed or is damaged"));
    /* Sticky: nothing more is handed out. */
    g_assert_cmpint(sf_read(s, 0, 1, page, NULL, &err), ==, -EBADMSG);
    sf_free(s);
    g_byte_array_free(st.bytes, TRUE);
}

/* A damaged record that no page needs any more: the digest finds it. */
static void test_damaged_superseded(void)
{
    uint64_t bm[1];
    struct stream st;
    struct seen seen = {0};
    struct vg_error err = {0};
    uint8_t page[PAGE];
    struct sf *s = scan_damaged(&st, true, 2, 32 + 5 * PAGE, &seen);

    sf_pending(s, bm);
    for (unsigned p = 0; p < NPAGES; p++) {
        if (bm[0] >> p & 1) {
            g_assert_cmpint(sf_read(s, p, 1, page, NULL, &err), ==, 0);
        }
    }
    g_assert_cmpint(sf_verify(s, &err), ==, -EBADMSG);
    g_assert_nonnull(strstr(err.msg, "PAGES record #2"));
    sf_free(s);
    g_byte_array_free(st.bytes, TRUE);
}

/*
 * A stream of @version into @st: HEADER, PAGES 0+32, PAGES_LISTED 32+32
 * whose page 34 was written after its hash (its data are not those
 * listed; the byte in its piece 0), then @more's records, DEVICE_STATE,
 * END.
 */
static void build_torn(struct stream *st, uint32_t version,
                       void (*more)(struct stream *st, struct mig_enc *enc,
                                    uint8_t *rec, bool opt),
                       bool opt)
{
    static const uint8_t state[8] = "listed!";
    struct mig_enc *enc;
    struct vg_error err;
    uint8_t *rec = g_malloc(MIG_REC_MAX);
    uint8_t data[32 * PAGE];
    uint64_t hashes[32];

    memset(st, 0, sizeof(*st));
    st->version = version;
    st->bytes = g_byte_array_new();
    g_assert_cmpint(mig_enc_new(version, PAGE, MIG_RUN_MAX_BYTES, &enc, &err),
                    ==, 0);
    put(st, rec, mig_enc_header(enc, &cfg, rec));
    fill(data, 32, 1);
    memcpy(st->vram, data, sizeof(data));
    put(st, rec, mig_enc_pages(enc, 0, 32, data, rec));
    fill(data, 32, 2);
    for (unsigned k = 0; k < 32; k++) {
        hashes[k] = mig_stream_page_hash(version, data + k * PAGE, PAGE, NULL);
    }
    data[2 * PAGE + 9] ^= 0x20; /* written while it went */
    memcpy(st->vram + 32 * PAGE, data, sizeof(data));
    put(st, rec, mig_enc_pages_listed_ref(enc, 32, 32, hashes, true, rec));
    g_byte_array_append(st->bytes, data, sizeof(data));
    more(st, enc, rec, opt);
    put(st, rec, mig_enc_state(enc, state, sizeof(state), rec));
    put(st, rec, mig_enc_end(enc, rec));
    g_assert_cmpuint(mig_enc_bytes(enc), ==, st->bytes->len);
    mig_enc_free(enc);
    g_free(rec);
}

/* With @resend, PAGES 34+1 again, as VRAM holds it. */
static void then_resend(struct stream *st, struct mig_enc *enc, uint8_t *rec,
                        bool resend)
{
    if (resend) {
        put(st, rec, mig_enc_pages(enc, 34, 1, st->vram + 34 * PAGE, rec));
    }
}

/* Version 3: build_torn() with @resend PAGES 34+1 again. */
static void build_listed(struct stream *st, bool resend)
{
    build_torn(st, 3, then_resend, resend);
}

/* Read @s back: pages 0-33 and then, without @fail, the others, which
 * must be @st's VRAM with its page hashes, the digest holding; with
 * @fail (NULL-terminated), reading page 34 must fail saying each. */
static void read_back(struct sf *s, const struct stream *st,
                      const char *const *fail)
{
    uint64_t hashes[NPAGES];
    struct vg_error err = {0};
    g_autofree uint8_t *got = g_malloc(VRAM);

    g_assert_cmpint(sf_read(s, 0, 34, got, hashes, &err), ==, 0);
    if (fail) {
        g_assert_cmpint(sf_read(s, 34, 1, got + 34 * PAGE, NULL, &err), ==,
                        -EBADMSG);
        for (; *fail; fail++) {
            g_assert_nonnull(strstr(err.msg, *fail));
        }
        return;
    }
    g_assert_cmpint(sf_read(s, 34, 30, got + 34 * PAGE, hashes + 34, &err), ==,
                    0);
    g_assert_cmpmem(got, VRAM, st->vram, VRAM);
    for (unsigned p = 0; p < NPAGES; p++) {
        g_assert_cmphex(
            hashes[p], ==,
            mig_stream_page_hash(st->version, st->vram + p * PAGE, PAGE, NULL));
    }
    g_assert_cmpint(sf_verify(s, &err), ==, 0);
}

/* A version 3 save file is read on demand: a page of a PAGES_LISTED
 * record is checked against its listed hash; a page whose last record
 * is one whose data do not match is refused, one sent again after it is
 * read from there, and the digest holds. */
static void test_listed(void)
{
    static const char *const torn[] = {"PAGES_LISTED record #2",
                                       "page 34 does not match its listed hash",
                                       NULL};

    for (unsigned resend = 0; resend < 2; resend++) {
        struct stream st;
        struct seen seen = {0};
        struct sf *s;

        build_listed(&st, resend);
        s = file_scanned(&st, 5 + resend, &seen);
        read_back(s, &st, resend ? NULL : torn);
        sf_free(s);
        g_byte_array_free(st.bytes, TRUE);
    }
}

static uint32_t pieces_version; /* of the stream then_pieces() ends */

/* The pieces of @mask of the page @page of @vram changed (bytes flipped),
 * and their PAGE_PIECES record, with the page's new hash if @hashed. */
static void put_pieces(struct stream *st, struct mig_enc *enc, uint8_t *rec,
                       uint64_t page, uint64_t mask, bool hashed)
{
    uint8_t *at = st->vram + page * PAGE;

    for (uint64_t m = mask; m; m &= m - 1) {
        for (unsigned i = 0; i < PAGE / MIG_PAGE_PIECES; i++) {
            at[(size_t)__builtin_ctzll(m) * (PAGE / MIG_PAGE_PIECES) + i] ^=
                (uint8_t)(0x3c + page);
        }
    }
    put(st, rec,
        mig_enc_page_pieces(
            enc, page, mask, at, hashed,
            mig_stream_page_hash(pieces_version, at, PAGE, NULL), rec));
}

/* Page 10 cleared, then PAGE_PIECES of page 34 (over its torn byte; with
 * its hash if @hash_34), twice of page 5 and once of page 10. */
static void then_pieces(struct stream *st, struct mig_enc *enc, uint8_t *rec,
                        bool hash_34)
{
    put(st, rec, mig_enc_zeros(enc, 10, 1, rec));
    memset(st->vram + 10 * PAGE, 0, PAGE);
    put_pieces(st, enc, rec, 34, 1ull | 1ull << 40, hash_34);
    put_pieces(st, enc, rec, 5, 0xf0, false);
    put_pieces(st, enc, rec, 5, 0x3c | 1ull << 63, false);
    put_pieces(st, enc, rec, 10, 1ull << 20, false);
}

/* A version 4 or 6 save file (version 6: its PAGE_PIECES records
 * checksummed over their pieces' hashes): every page reads back as its
 * pieces left it (a cleared page too, which is then to be read), the
 * torn page only where its pieces carry its hash, and the digest holds. */
static void test_pieces(const void *opaque)
{
    static const char *const torn[] = {
        "page 34 was stale and is not whole with its pieces", NULL};

    for (unsigned hash_34 = 0; hash_34 < 2; hash_34++) {
        uint64_t pending[1];
        struct stream st;
        struct seen seen = {0};
        struct sf *s;

        pieces_version = GPOINTER_TO_UINT(opaque);
        build_torn(&st, pieces_version, then_pieces, hash_34);
        s = file_scanned(&st, 11 + hash_34, &seen);
        g_assert_cmpuint(sf_pending(s, pending), ==, NPAGES);
        g_assert_cmpuint(seen.zeroed[10], ==, 1);
        read_back(s, &st, hash_34 ? NULL : torn);
        sf_free(s);
        g_byte_array_free(st.bytes, TRUE);
    }
}

/* Each case: the extents (or the file) made wrong one way, the error. */
static void expect_scan_fail(const struct stream *st, uint64_t at, int code,
                             const char *msg, bool at_end)
{
    uint64_t off[256], len[256];
    struct seen seen = {0};
    struct vg_error err = {0};
    unsigned n;
    int fd = save_file(st, off, len, &n, 7);
    struct sf *s;
    int ret;

    if (at != UINT64_MAX) {
        damage(fd, off, len, n, at);
    }
    s = open_sf(fd, &seen);
    ret = add_all(s, off, len, at_end ? n - 1 : n, &err);
    if (ret == 0) {
        ret = sf_end(s, &err);
    }
    g_test_message("expected \"%s\", got: %s", msg, err.msg);
    g_assert_cmpint(ret, ==, -code);
    g_assert_nonnull(strstr(err.msg, msg));
    sf_free(s);
}

static void test_bad_files(void)
{
    struct stream st, v1;

    build(&st, 2, false);
    /* The device state's bytes: its checksum. */
    expect_scan_fail(&st, st.rec_at[6] + 20, EBADMSG,
                     "DEVICE_STATE record #6 at offset", false);
    /* A PAGES record's run header: its shape. */
    expect_scan_fail(&st, st.rec_at[1] + 16 + 12, EINVAL,
                     "does not match payload length", false);
    /* A record header's type. */
    expect_scan_fail(&st, st.rec_at[3], EINVAL, "unknown record type", false);
    /* The HEADER's VRAM size: its checksum goes first. */
    expect_scan_fail(&st, 16 + 16, EBADMSG, "HEADER record #0", false);
    /* No END. */
    expect_scan_fail(&st, UINT64_MAX, EINVAL, "truncated: no END record", true);
    /* Version 1 is not read on demand. */
    build(&v1, 1, false);
    expect_scan_fail(&v1, UINT64_MAX, ENOTSUP,
                     "version 1 stream cannot be read on demand", false);
    g_byte_array_free(st.bytes, TRUE);
    g_byte_array_free(v1.bytes, TRUE);
}

static void test_bad_extents(void)
{
    uint64_t off[256], len[256];
    struct stream st;
    struct seen seen = {0};
    struct vg_error err = {0};
    unsigned n;
    struct sf *s;
    int fd;

    build(&st, 2, false);
    fd = save_file(&st, off, len, &n, 9);
    s = open_sf(fd, &seen);
    g_assert_cmpint(sf_add(s, off[n - 1] + len[n - 1] - 4, 8, &err), ==,
                    -ERANGE);
    g_assert_nonnull(strstr(err.msg, "is not inside the save file"));
    sf_free(s);

    fd = save_file(&st, off, len, &n, 9);
    s = open_sf(fd, &seen);
    g_assert_cmpint(add_all(s, off, len, n, &err), ==, 0);
    g_assert_cmpint(sf_add(s, off[0], 4, &err), ==, -EINVAL);
    g_assert_nonnull(strstr(err.msg, "after the END record"));
    sf_free(s);
    g_byte_array_free(st.bytes, TRUE);

    {
        int p[2];
        struct sf_config c = {cfg, -1, 0, {0}};

        g_assert_cmpint(pipe(p), ==, 0);
        c.fd = p[0];
        g_assert_cmpint(sf_new(&c, &s, &err), ==, -EINVAL);
        g_assert_nonnull(strstr(err.msg, "not a regular file"));
        close(p[1]);
    }
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/stream-file/read-back", test_read_back);
    g_test_add_func("/stream-file/readers", test_readers);
    g_test_add_func("/stream-file/damaged-page", test_damaged_page);
    g_test_add_func("/stream-file/damaged-superseded", test_damaged_superseded);
    g_test_add_func("/stream-file/bad-files", test_bad_files);
    g_test_add_func("/stream-file/bad-extents", test_bad_extents);
    g_test_add_func("/stream-file/listed", test_listed);
    g_test_add_data_func("/stream-file/pieces", GUINT_TO_POINTER(4),
                         test_pieces);
    g_test_add_data_func("/stream-file/pieces-v6", GUINT_TO_POINTER(6),
                         test_pieces);
    return g_test_run();
}
