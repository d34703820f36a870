/*
 * Unit tests of the destination's loading session (mig-load.c): a stream
 * saved from a CPU-backend vGPU is loaded into another, with the pool
 * writing and hashing large PAGES records in parallel (hash_threads 4)
 * and with one thread, fed in pieces that cut records anywhere.  VRAM
 * and the checksums must come out equal to the source's either way.
 * The source stages a record straight into a read's buffer where it fits
 * whole, so its records follow the read sizes: streams read in pieces of
 * many sizes, from pre-copy and from stop-copy, load the same VRAM.
 * Read as pieces (mig_read_pieces), a stop-copy leaves its pages in VRAM
 * and the pieces, gathered, are the same stream; written as pieces
 * (mig_write_pieces) whose page data a client put in place, hashed
 * there by the pool or by one thread, they load the same VRAM, and pieces
 * that do not match the stream fail the load.  Guest CPU writes logged in
 * 4 KiB granules after pre-copy's round 0 go in stop-copy as the pieces
 * of their pages (stream version 4), and the destination's VRAM and
 * checksums still come out equal.  Pages zero but for one byte, anywhere
 * in them, go as pages.
 */
#include <errno.h>
#include <glib.h>
#include <inttypes.h>
#include <string.h>

#include "common/le.h"
#include "vfio-migration/mig-stream.h"
#include "vfio-migration/mig.h"

#define PAGE  (64u << 10)
#define PAGES 256u
#define VRAM  ((uint64_t)PAGES * PAGE)

static void *no_dma(void *opaque, uint64_t iova, uint64_t len, bool write)
{
    return NULL;
}

static void no_irq(void *opaque, unsigned vector)
{
}

static struct mig *new_mig_mode(struct vgpu **gpu, unsigned threads,
                                enum mig_precopy_mode precopy)
{
    struct vgpu_config gc = {.vram_size = VRAM, .page_size = PAGE};
    struct vgpu_host host = {NULL, no_dma, no_irq};
    struct mig_config mc = {.precopy = precopy, .hash_threads = threads};
    struct vg_error err;
    struct mig *m;

    g_assert_cmpint(vgpu_new(&gc, &host, gpu, &err), ==, 0);
    mc.gpu = *gpu;
    vgpu_bar0_read(*gpu, VGPU_REG_FEATURES, &mc.features, 4);
    g_assert_cmpint(mig_new(&mc, &m, &err), ==, 0);
    return m;
}

static struct mig *new_mig(struct vgpu **gpu, unsigned threads)
{
    return new_mig_mode(gpu, threads, MIG_PRECOPY_NONE);
}

static void set_state(struct mig *m, enum mig_state s)
{
    struct vg_error err;

    g_assert_cmpint(mig_set_state(m, s, &err), ==, 0);
}

/* Call mig_idle() as the server's loop does when no request comes, until
 * it wants no more calls: the work deferred to idle times is done. */
static void idle_out(struct mig *m)
{
    int ms;

    mig_idle(m, true); /* as after the last reply */
    while ((ms = mig_idle_wait_ms(m)) >= 0) {
        g_usleep((gulong)ms * 1000);
        mig_idle(m, false);
    }
}

/* Source VRAM: random pages, every 7th page zero. */
static void fill(struct vgpu *gpu)
{
    GRand *r = g_rand_new_with_seed(1234);
    uint32_t *w = (uint32_t *)vgpu_vram(gpu);

    for (uint64_t i = 0; i < VRAM / 4; i++) {
        w[i] = (i / (PAGE / 4)) % 7 ? g_rand_int(r) : 0;
    }
    g_rand_free(r);
}

/* Read @m's stream in pieces of up to @size bytes until a read returns
 * none, appending it to @out.  Each read gets a buffer of its own, which
 * is poisoned once read: nothing may be staged past its end or taken
 * from it later (ASan, in check-sanitize, also sees a write past it). */
static void read_out(struct mig *m, uint32_t size, GByteArray *out)
{
    struct vg_error err;
    uint32_t got;

    do {
        uint8_t *buf = g_malloc(size);

        g_assert_cmpint(mig_read(m, buf, size, &got, &err), ==, 0);
        g_assert_cmpuint(got, <=, size);
        g_byte_array_append(out, buf, got);
        memset(buf, 0xa5, size);
        g_free(buf);
    } while (got);
}

/* Read @m's stream as read_out(), each read as at most @max pieces
 * (mig_read_pieces), which are checked and gathered into @out: the
 * buffer's packed from its start, VRAM's only in STOP_COPY, each of
 * MIG_PIECE_VRAM_MIN bytes or more. */
static void read_pieces_out(struct mig *m, struct vgpu *gpu, uint32_t size,
                            unsigned max, GByteArray *out)
{
    struct mig_piece piece[64];
    struct vg_error err;
    uint32_t got;
    unsigned n;

    g_assert_cmpuint(max, <=, G_N_ELEMENTS(piece));
    do {
        uint8_t *buf = g_malloc(size);
        uint64_t used = 0, total = 0;

        g_assert_cmpint(
            mig_read_pieces(m, buf, size, &got, piece, max, &n, &err), ==, 0);
        g_assert_cmpuint(n, <=, max);
        for (unsigned i = 0; i < n; i++) {
            const uint8_t *from = buf + piece[i].offset;

            g_assert_cmpuint(piece[i].len, >, 0);
            if (piece[i].in_vram) {
                /* stop-copy, or pre-copy's PAGES_LISTED records */
                g_assert_true(mig_state(m) == MIG_STATE_STOP_COPY ||
                              mig_read_pass(m) > 0);
                g_assert_cmpuint(piece[i].len, >=, MIG_PIECE_VRAM_MIN);
                g_assert_cmpuint(piece[i].offset + piece[i].len, <=, VRAM);
                from = vgpu_vram(gpu) + piece[i].offset;
            } else {
                g_assert_cmpuint(piece[i].offset, ==, used);
                used += piece[i].len;
            }
            g_byte_array_append(out, from, piece[i].len);
            total += piece[i].len;
        }
        g_assert_cmpuint(total, ==, got);
        g_assert_cmpuint(used, <=, size);
        memset(buf, 0xa5, size);
        g_free(buf);
    } while (got);
}

/* The whole stream of @m (of @gpu) read in pieces of @size: its pre-copy
 * round 0 if @precopy, then stop-copy; as pieces, at most @max a read, if
 * not 0. */
static GByteArray *save_read(struct mig *m, struct vgpu *gpu, uint32_t size,
                             bool precopy, unsigned max)
{
    GByteArray *out = g_byte_array_new();

    if (precopy) {
        set_state(m, MIG_STATE_PRE_COPY);
        if (max) {
            read_pieces_out(m, gpu, size, max, out);
        } else {
            read_out(m, size, out);
        }
        g_assert_cmpuint(out->len, >, VRAM / 2); /* round 0 went */
        set_state(m, MIG_STATE_STOP_COPY);
    } else {
        set_state(m, MIG_STATE_STOP);
        set_state(m, MIG_STATE_STOP_COPY);
    }
    if (max) {
        read_pieces_out(m, gpu, size, max, out);
    } else {
        read_out(m, size, out);
    }
    set_state(m, MIG_STATE_STOP);
    mig_idle(m, true); /* the source's checksums */
    return out;
}

static GByteArray *save_sized(struct mig *m, uint32_t size, bool precopy)
{
    return save_read(m, NULL, size, precopy, 0);
}

/* The whole stop-copy stream of @m. */
static GByteArray *save_all(struct mig *m)
{
    return save_sized(m, 1u << 20, false);
}

/* Load @stream into a fresh destination of @threads loading threads, fed
 * in writes of @pieces[i] bytes in turn (@npieces of them); its VRAM and
 * checksums must be @sgpu's and @src's. */
static void load_equal(struct mig *src, struct vgpu *sgpu, GByteArray *stream,
                       unsigned threads, const uint32_t *pieces, size_t npieces)
{
    struct vgpu *dgpu;
    struct mig *dst = new_mig(&dgpu, threads);
    struct mig_stats ss, ds;
    struct vg_error err;

    set_state(dst, MIG_STATE_RESUMING);
    for (size_t off = 0, i = 0; off < stream->len; i++) {
        uint32_t n = MIN(pieces[i % npieces], stream->len - off);

        g_assert_cmpint(mig_write(dst, stream->data + off, n, &err), ==, 0);
        off += n;
    }
    set_state(dst, MIG_STATE_STOP);
    g_assert_cmpint(memcmp(vgpu_vram(sgpu), vgpu_vram(dgpu), VRAM), ==, 0);
    mig_get_stats(dst, &ds);
    g_assert_false(ds.have_checksums); /* taken after the reply... */
    idle_out(dst);                     /* ...once idle */
    mig_get_stats(src, &ss);
    mig_get_stats(dst, &ds);
    g_assert_true(ss.have_checksums);
    g_assert_true(ds.have_checksums);
    g_assert_cmphex(ss.vram_checksum, ==, ds.vram_checksum);
    g_assert_cmphex(ss.device_state_checksum, ==, ds.device_state_checksum);
    mig_free(dst);
    vgpu_free(dgpu);
}

static void test_load(gconstpointer data)
{
    /* Piece sizes that cut records and headers at odd places. */
    static const uint32_t pieces[] = {(1u << 20) - 7, 13, 3u << 20, 100003};
    struct vgpu *sgpu;
    struct mig *src = new_mig(&sgpu, 2);
    g_autoptr(GByteArray) stream = NULL;

    fill(sgpu);
    stream = save_all(src);
    load_equal(src, sgpu, stream, GPOINTER_TO_UINT(data), pieces,
               G_N_ELEMENTS(pieces));
    mig_free(src);
    vgpu_free(sgpu);
}

/* Pages that are zero but for one byte, in their first word or past it,
 * go as pages, not as zeros: the source looks at a page's first word
 * before it scans the rest.  fill()'s zero pages (every 7th) get the
 * bytes; data != 0: pre-copy's round 0 sends them, else stop-copy. */
static void test_nearly_zero_pages(gconstpointer data)
{
    static const uint32_t at[] = {0, 7, 8, 511, 512, PAGE / 2, PAGE - 1};
    static const uint32_t mib = 1u << 20;
    bool precopy = GPOINTER_TO_UINT(data);
    struct vgpu *sgpu;
    struct mig *src = new_mig_mode(
        &sgpu, 2, precopy ? MIG_PRECOPY_ITERATIVE : MIG_PRECOPY_NONE);
    g_autoptr(GByteArray) stream = NULL;

    fill(sgpu);
    for (size_t i = 0; i < G_N_ELEMENTS(at); i++) {
        vgpu_vram(sgpu)[(7 * (i + 1)) * (uint64_t)PAGE + at[i]] = 0x5a;
    }
    stream = save_sized(src, mib, precopy);
    load_equal(src, sgpu, stream, 2, &mib, 1);
    mig_free(src);
    vgpu_free(sgpu);
}

/* A destination's checksums wait past the VM's start (RUNNING_P2P and
 * RUNNING take none of that work) and are of what was loaded, whatever
 * the device does once it runs; a state change that starts other work
 * takes them first. */
static void test_checksums_after_start(gconstpointer data)
{
    bool until_idle = GPOINTER_TO_UINT(data);
    struct vgpu *sgpu, *dgpu;
    struct mig *src = new_mig(&sgpu, 1), *dst = new_mig(&dgpu, 1);
    g_autoptr(GByteArray) stream = NULL;
    struct mig_stats ss, ds;
    struct vg_error err;

    fill(sgpu);
    stream = save_all(src);
    set_state(dst, MIG_STATE_RESUMING);
    g_assert_cmpint(mig_write(dst, stream->data, stream->len, &err), ==, 0);
    set_state(dst, MIG_STATE_STOP);
    set_state(dst, MIG_STATE_RUNNING_P2P);
    set_state(dst, MIG_STATE_RUNNING);
    mig_get_stats(dst, &ds);
    g_assert_false(ds.have_checksums);
    memset(vgpu_vram(dgpu), 0xa5, PAGE); /* the running VM writes VRAM */
    if (until_idle) {
        idle_out(dst);
    } else {
        set_state(dst, MIG_STATE_RUNNING_P2P);
        mig_get_stats(dst, &ds);
        g_assert_false(ds.have_checksums);
        set_state(dst, MIG_STATE_STOP); /* the way to the next session */
    }
    mig_get_stats(src, &ss);
    mig_get_stats(dst, &ds);
    g_assert_true(ds.have_checksums);
    g_assert_cmphex(ds.vram_checksum, ==, ss.vram_checksum);
    g_assert_cmphex(ds.device_state_checksum, ==, ss.device_state_checksum);
    mig_free(src);
    mig_free(dst);
    vgpu_free(sgpu);
    vgpu_free(dgpu);
}

static void test_read_sizes(void)
{
    /* Above, at and below a whole record (2 MiB + 32), a page and a
     * record header; odd ones that leave odd room. */
    static const uint32_t sizes[] = {
        5u << 20,
        (4u << 20) + 1,
        (2u << 20) + 32,
        (2u << 20) + 31,
        1u << 20,
        PAGE + 32,
        PAGE + 31,
        70001,
        4111,
        33,
        1,
    };
    static const uint32_t mib = 1u << 20;

    for (size_t i = 0; i < G_N_ELEMENTS(sizes); i++) {
        for (int precopy = 0; precopy < 2; precopy++) {
            struct vgpu *sgpu;
            struct mig *src = new_mig_mode(
                &sgpu, 2, precopy ? MIG_PRECOPY_ITERATIVE : MIG_PRECOPY_NONE);
            g_autoptr(GByteArray) stream = NULL;

            fill(sgpu);
            stream = save_sized(src, sizes[i], precopy);
            load_equal(src, sgpu, stream, 2, &mib, 1);
            mig_free(src);
            vgpu_free(sgpu);
        }
    }
}

/* Reads as pieces, 64 or 2 at most, of several sizes: the stream they
 * gather loads the same VRAM, and a stop-copy of all of VRAM left all but
 * its records' headers there. */
static void test_read_pieces(void)
{
    static const uint32_t sizes[] = {4u << 20, (2u << 20) + 32, 1u << 20,
                                     PAGE + 32, 70001};
    static const unsigned maxes[] = {64, 2};
    static const uint32_t mib = 1u << 20;

    for (size_t i = 0; i < G_N_ELEMENTS(sizes); i++) {
        for (size_t j = 0; j < G_N_ELEMENTS(maxes); j++) {
            for (int precopy = 0; precopy < 2; precopy++) {
                struct vgpu *sgpu;
                struct mig *src = new_mig_mode(&sgpu, 2,
                                               precopy ? MIG_PRECOPY_ITERATIVE
                                                       : MIG_PRECOPY_NONE);
                g_autoptr(GByteArray) stream = NULL;
                struct mig_stats st;

                fill(sgpu);
                stream = save_read(src, sgpu, sizes[i], precopy, maxes[j]);
                mig_get_stats(src, &st);
                if (precopy) {
                    /* pre-copy's pages listed (version 3), from VRAM
                     * where a read holds a run of 32 KiB or more */
                    g_assert_cmpuint(st.vram_piece_bytes, ==, 0);
                    if (sizes[i] >= mib) {
                        g_assert_cmpuint(st.listed_bytes, >=, VRAM / 2);
                    }
                } else {
                    /* every non-zero page (6 of 7) */
                    g_assert_cmpuint(st.vram_piece_bytes, ==,
                                     st.final_dirty_bytes);
                    g_assert_cmpuint(st.vram_piece_bytes, >=, VRAM / 2);
                }
                load_equal(src, sgpu, stream, 2, &mib, 1);
                mig_free(src);
                vgpu_free(sgpu);
            }
        }
    }
}

/* The same stream read whole and as pieces, byte for byte. */
static void test_pieces_same_stream(void)
{
    struct vgpu *ga, *gb;
    struct mig *a = new_mig(&ga, 2), *b = new_mig(&gb, 2);
    g_autoptr(GByteArray) whole = NULL, pieces = NULL;

    fill(ga);
    fill(gb);
    whole = save_read(a, ga, 1u << 20, false, 0);
    pieces = save_read(b, gb, 1u << 20, false, 64);
    g_assert_cmpuint(whole->len, ==, pieces->len);
    g_assert_cmpint(memcmp(whole->data, pieces->data, whole->len), ==, 0);
    mig_free(a);
    mig_free(b);
    vgpu_free(ga);
    vgpu_free(gb);
}

/*
 * A page written after a pre-copy read listed it, before its bytes were
 * taken from VRAM (as QEMU's channel sends them later): the destination
 * finds it stale.  Where the write is logged (the guest's BAR2 log, as
 * QEMU sends it), stop-copy sends the page again and the load ends with
 * the source's VRAM; an unlogged write (which a client that logs BAR2
 * never lets happen) leaves it stale, and END fails naming it.
 */
/* A source of VRAM filled whose guest CPU writes through BAR2 are
 * logged, in PRE_COPY. */
static struct mig *logged_source(struct vgpu **gpu)
{
    struct mig *src = new_mig_mode(gpu, 2, MIG_PRECOPY_ITERATIVE);

    fill(*gpu);
    mig_note_bar2_shared(src);
    mig_note_bar2_logged(src, true);
    set_state(src, MIG_STATE_PRE_COPY);
    return src;
}

/* What @src has to read now into @stream, in reads of @size bytes: as
 * copies (@max 0) or as at most @max pieces a read. */
static void read_sized(struct mig *src, struct vgpu *gpu, uint32_t size,
                       unsigned max, GByteArray *stream)
{
    if (max) {
        read_pieces_out(src, gpu, size, max, stream);
    } else {
        read_out(src, size, stream);
    }
}

static void read_now(struct mig *src, struct vgpu *gpu, unsigned max,
                     GByteArray *stream)
{
    read_sized(src, gpu, 4u << 20, max, stream);
}

/* @src's stop-copy into @stream in reads of @size bytes, then STOP; its
 * statistics in @ss. */
static void stop_copy_sized(struct mig *src, struct vgpu *gpu, uint32_t size,
                            unsigned max, GByteArray *stream,
                            struct mig_stats *ss)
{
    set_state(src, MIG_STATE_STOP_COPY);
    read_sized(src, gpu, size, max, stream);
    set_state(src, MIG_STATE_STOP);
    mig_idle(src, true);
    mig_get_stats(src, ss);
}

static void stop_copy_out(struct mig *src, struct vgpu *gpu, unsigned max,
                          GByteArray *stream, struct mig_stats *ss)
{
    stop_copy_sized(src, gpu, 4u << 20, max, stream, ss);
}

/* A page listed from VRAM in pre-copy is torn by a guest CPU write, which
 * QEMU logs (@data 1: the whole page; 2: in a 4 KiB granule, so that in
 * stream version 4 the page goes as its written pieces, with the page
 * hash that mends it) or does not (0: the load fails at END). */
static void test_listed_torn(gconstpointer data)
{
    unsigned log = GPOINTER_TO_UINT(data);
    bool logged = log > 0;
    struct vgpu *sgpu, *dgpu;
    struct mig *src = logged_source(&sgpu);
    struct mig *dst = new_mig(&dgpu, 2);
    g_autoptr(GByteArray) stream = g_byte_array_new();
    uint8_t *buf = g_malloc(4u << 20);
    struct mig_piece piece[64];
    uint64_t page = UINT64_MAX, one = 1;
    struct mig_stats ss, ds;
    struct vg_error err;
    uint32_t got;
    unsigned n;
    int ret;

    g_assert_cmpint(
        mig_read_pieces(src, buf, 4u << 20, &got, piece, 64, &n, &err), ==, 0);
    g_assert_cmpuint(mig_read_pass(src), ==, 1);
    for (unsigned i = 0; i < n && page == UINT64_MAX; i++) {
        page = piece[i].in_vram ? piece[i].offset / PAGE : page;
    }
    g_assert_cmpuint(page, !=, UINT64_MAX);    /* a page listed from VRAM */
    vgpu_vram(sgpu)[page * PAGE + 17] ^= 0x42; /* written while it goes */
    if (logged) {
        g_assert_cmpint(mig_region_dirty_log(src, page * PAGE, &one, 1,
                                             log == 1 ? PAGE : 4096, &err),
                        ==, 0);
    }
    for (unsigned i = 0; i < n; i++) {
        g_byte_array_append(stream,
                            piece[i].in_vram ? vgpu_vram(sgpu) + piece[i].offset
                                             : buf + piece[i].offset,
                            piece[i].len);
    }
    read_pieces_out(src, sgpu, 4u << 20, 64, stream);
    set_state(src, MIG_STATE_STOP_COPY);
    read_pieces_out(src, sgpu, 4u << 20, 64, stream);
    set_state(src, MIG_STATE_STOP);
    mig_get_stats(src, &ss);
    g_assert_cmpuint(ss.pieces_pages, ==, log == 2 ? 1 : 0);

    set_state(dst, MIG_STATE_RESUMING);
    ret = mig_write(dst, stream->data, stream->len, &err);
    mig_get_stats(dst, &ds);
    g_assert_cmpuint(ds.stale_pages, ==, 1);
    if (logged) {
        g_assert_cmpint(ret, ==, 0);
        set_state(dst, MIG_STATE_STOP);
        g_assert_cmpint(memcmp(vgpu_vram(sgpu), vgpu_vram(dgpu), VRAM), ==, 0);
    } else {
        g_autofree char *want =
            g_strdup_printf("1 pages stale, the first page %" PRIu64, page);

        g_assert_cmpint(ret, ==, -EBADMSG);
        g_assert_nonnull(strstr(err.msg, want));
    }
    g_free(buf);
    mig_free(src);
    mig_free(dst);
    vgpu_free(sgpu);
    vgpu_free(dgpu);
}

/* The guest CPU writes @len bytes at @off of @gpu's VRAM (bytes flipped),
 * and QEMU logs the 4 KiB granules it touched. */
static void cpu_write_logged(struct mig *m, struct vgpu *gpu, uint64_t off,
                             uint64_t len)
{
    uint64_t first = off / 4096, n = (off + len - 1) / 4096 - first + 1;
    uint64_t bitmap = (1ull << n) - 1;
    struct vg_error err;

    for (uint64_t i = 0; i < len; i++) {
        vgpu_vram(gpu)[off + i] ^= 0x5a;
    }
    g_assert_cmpint(
        mig_region_dirty_log(m, first * 4096, &bitmap, n, 4096, &err), ==, 0);
}

/* After round 0, the guest CPU writes a few bytes into pages 3 and 20 and
 * across pages 21 and 22: stop-copy sends those pages' 1 KiB pieces in
 * the 4 KiB granules QEMU logged, 16 KiB in all, and the destination
 * ends up with the source's VRAM.  @data: read as copies (0) or as at
 * most that many pieces a read. */
static void test_cpu_pieces(gconstpointer data)
{
    unsigned max = GPOINTER_TO_UINT(data);
    static const uint32_t writes[] = {1u << 20, 4096, 777};
    struct vgpu *sgpu;
    struct mig *src = logged_source(&sgpu);
    g_autoptr(GByteArray) stream = g_byte_array_new();
    struct mig_stats ss;

    read_now(src, sgpu, max, stream);
    g_assert_cmpuint(stream->len, >, VRAM / 2); /* round 0 went */
    cpu_write_logged(src, sgpu, 3 * PAGE + 100, 8);
    cpu_write_logged(src, sgpu, 20 * PAGE + 40000, 8);
    cpu_write_logged(src, sgpu, 22 * PAGE - 6, 12);
    stop_copy_out(src, sgpu, max, stream, &ss);
    g_assert_cmpuint(ss.stream_version, ==, MIG_STREAM_VERSION);
    g_assert_cmpuint(ss.pieces_pages, ==, 4);
    g_assert_cmpuint(ss.pieces_bytes, ==, 4 * 4096);
    g_assert_cmpuint(ss.final_dirty_bytes, ==, 4 * 4096);
    load_equal(src, sgpu, stream, 2, writes, G_N_ELEMENTS(writes));
    mig_free(src);
    vgpu_free(sgpu);
}

/* The guest CPU writes a few bytes into every page after round 0: the
 * destination takes the hashes of pages written by pieces a batch at a
 * time (256 of them, as many as VRAM has), and ends up with the source's
 * VRAM and checksums. */
static void test_cpu_pieces_every_page(void)
{
    static const uint32_t writes[] = {1u << 20};
    struct vgpu *sgpu;
    struct mig *src = logged_source(&sgpu);
    g_autoptr(GByteArray) stream = g_byte_array_new();
    struct mig_stats ss;

    read_now(src, sgpu, 0, stream);
    for (uint64_t p = 0; p < PAGES; p++) {
        cpu_write_logged(src, sgpu, p * PAGE + (p * 4099) % (PAGE - 8), 8);
    }
    stop_copy_out(src, sgpu, 0, stream, &ss);
    g_assert_cmpuint(ss.pieces_pages, ==, PAGES);
    load_equal(src, sgpu, stream, 2, writes, G_N_ELEMENTS(writes));
    mig_free(src);
    vgpu_free(sgpu);
}

/* PAGE_PIECES records of @stream that carry their page's hash. */
static uint64_t hashed_pieces_records(const GByteArray *stream)
{
    uint64_t n = 0;

    for (size_t off = 0; off + MIG_REC_HDR_SIZE <= stream->len;) {
        const uint8_t *h = stream->data + off;

        n += vg_get_le16(h) == MIG_REC_PAGE_PIECES &&
             (vg_get_le16(h + 2) & MIG_PIECES_HASHED);
        off += MIG_REC_HDR_SIZE + vg_get_le32(h + 4);
    }
    return n;
}

/* The guest CPU writes a few bytes into four pages of every five after
 * round 0 (read as copies, @data 0, or as at most that many pieces a
 * read: from VRAM, so that the pieces of every page that went so carry
 * its page hash) and
 * all of every fifth: stop-copy, in reads of 64 KiB and 7 bytes, stages
 * the pieces' records a batch at a time between the whole pages, as
 * many as a read's room holds, and the destination ends up with the
 * source's VRAM and checksums. */
static void test_cpu_pieces_mixed(gconstpointer data)
{
    unsigned max = GPOINTER_TO_UINT(data);
    static const uint32_t writes[] = {1u << 20, 65536 + 7};
    const uint32_t size = 65536 + 7;
    struct vgpu *sgpu;
    struct mig *src = logged_source(&sgpu);
    g_autoptr(GByteArray) stream = g_byte_array_new();
    struct mig_stats ss;
    uint64_t whole = (PAGES + 4) / 5, listed = 0;

    read_now(src, sgpu, max, stream);
    for (uint64_t p = 0; p < PAGES; p++) {
        if (p % 5 == 0) {
            cpu_write_logged(src, sgpu, p * PAGE, PAGE);
        } else {
            cpu_write_logged(src, sgpu, p * PAGE + (p * 4099) % (PAGE - 8), 8);
            listed += p % 7 != 0; /* fill()'s zero pages went as ZEROS */
        }
    }
    stop_copy_sized(src, sgpu, size, max, stream, &ss);
    g_assert_cmpuint(ss.pieces_pages, ==, PAGES - whole);
    g_assert_cmpuint(ss.final_dirty_bytes, ==,
                     ss.pieces_bytes + whole * (uint64_t)PAGE);
    g_assert_cmpuint(ss.pieces_bytes, >=, (PAGES - whole) * 4096);
    g_assert_cmpuint(hashed_pieces_records(stream), ==, max ? listed : 0);
    load_equal(src, sgpu, stream, 2, writes, G_N_ELEMENTS(writes));
    mig_free(src);
    vgpu_free(sgpu);
}

/* Too little room for the pieces of one record is refused. */
static void test_pieces_room(void)
{
    struct vgpu *gpu;
    struct mig *m = new_mig(&gpu, 1);
    struct mig_piece piece[1];
    struct vg_error err;
    uint8_t buf[64];
    uint32_t got;
    unsigned n = 7;

    set_state(m, MIG_STATE_STOP);
    set_state(m, MIG_STATE_STOP_COPY);
    g_assert_cmpint(
        mig_read_pieces(m, buf, sizeof(buf), &got, piece, 1, &n, &err), ==,
        -EINVAL);
    g_assert_cmpuint(n, ==, 0);
    g_assert_nonnull(strstr(err.msg, "room for 1 pieces"));
    mig_free(m);
    vgpu_free(gpu);
}

/* Move one read of @src's as a destination's client would with a writable
 * view of @dgpu's VRAM: its VRAM pieces copied to their place there, its
 * buffer's packed into another; then mig_write_pieces().  Its bytes, or
 * 0 at the end. */
static uint32_t move_pieces(struct mig *src, struct vgpu *sgpu, struct mig *dst,
                            struct vgpu *dgpu, uint32_t size)
{
    struct mig_piece piece[64];
    uint8_t *buf = g_malloc(size), *slot = g_malloc(size);
    struct vg_error err;
    uint32_t got, used = 0;
    unsigned n;

    g_assert_cmpint(mig_read_pieces(src, buf, size, &got, piece, 64, &n, &err),
                    ==, 0);
    for (unsigned i = 0; i < n; i++) {
        if (piece[i].in_vram) {
            memcpy(vgpu_vram(dgpu) + piece[i].offset,
                   vgpu_vram(sgpu) + piece[i].offset, piece[i].len);
        } else {
            memcpy(slot + used, buf + piece[i].offset, piece[i].len);
            piece[i].offset = used;
            used += piece[i].len;
        }
    }
    g_assert_cmpint(mig_write_pieces(dst, slot, used, piece, n, &err), ==, 0);
    g_free(buf);
    g_free(slot);
    return got;
}

/* A stop-copy (after a pre-copy written whole if @data & 1) moved as
 * pieces: the destination hashes the pages in place, on a pool of 4
 * threads if @data & 2, else on one, and loads the same VRAM. */
static void test_write_pieces(gconstpointer data)
{
    bool precopy = GPOINTER_TO_UINT(data) & 1;
    unsigned dst_threads = GPOINTER_TO_UINT(data) & 2 ? 4 : 1;
    struct vgpu *sgpu, *dgpu;
    struct mig *src = new_mig_mode(
        &sgpu, 2, precopy ? MIG_PRECOPY_ITERATIVE : MIG_PRECOPY_NONE);
    struct mig *dst = new_mig(&dgpu, dst_threads);
    struct mig_stats ss, ds;

    fill(sgpu);
    set_state(dst, MIG_STATE_RESUMING);
    if (precopy) {
        g_autoptr(GByteArray) pre = g_byte_array_new();
        struct vg_error err;

        set_state(src, MIG_STATE_PRE_COPY);
        read_out(src, 1u << 20, pre);
        g_assert_cmpint(mig_write(dst, pre->data, pre->len, &err), ==, 0);
        /* the guest writes half of VRAM again: stop-copy sends it */
        memset(vgpu_vram(sgpu), 0x5a, VRAM / 2);
        mig_note_bar2_shared(src);
    } else {
        set_state(src, MIG_STATE_STOP);
    }
    set_state(src, MIG_STATE_STOP_COPY);
    while (move_pieces(src, sgpu, dst, dgpu, 1u << 20)) {
    }
    set_state(src, MIG_STATE_STOP);
    set_state(dst, MIG_STATE_STOP);
    g_assert_cmpint(memcmp(vgpu_vram(sgpu), vgpu_vram(dgpu), VRAM), ==, 0);
    mig_idle(src, true);
    idle_out(dst);
    mig_get_stats(src, &ss);
    mig_get_stats(dst, &ds);
    g_assert_cmphex(ss.vram_checksum, ==, ds.vram_checksum);
    g_assert_cmpuint(ss.vram_piece_bytes, >=, VRAM / 2);
    g_assert_cmpuint(ds.vram_piece_bytes, ==, ss.vram_piece_bytes);
    mig_free(src);
    mig_free(dst);
    vgpu_free(sgpu);
    vgpu_free(dgpu);
}

/* A destination in RESUMING, fed the stream's first read (its HEADER)
 * and the headers of a PAGES record of page 1 whose data are in place. */
static struct mig *placed_dst(struct vgpu **dgpu, GByteArray *stream)
{
    struct vgpu *sgpu;
    struct mig *src = new_mig(&sgpu, 1), *dst = new_mig(dgpu, 1);
    struct vg_error err;
    uint8_t *buf = g_malloc(1u << 20);
    uint32_t got;

    fill(sgpu);
    set_state(src, MIG_STATE_STOP);
    set_state(src, MIG_STATE_STOP_COPY);
    /* HEADER; then page 0 is zero: a ZEROS record; then PAGES of 1.. */
    g_assert_cmpint(mig_read(src, buf, 1u << 20, &got, &err), ==, 0);
    g_byte_array_append(stream, buf, got);
    memcpy(vgpu_vram(*dgpu), vgpu_vram(sgpu), VRAM);
    set_state(dst, MIG_STATE_RESUMING);
    g_free(buf);
    mig_free(src);
    vgpu_free(sgpu);
    return dst;
}

/* The offset of the page data of the stream's first PAGES or PAGES_LISTED
 * record (after its headers and hashes); its first page and its count. */
static size_t pages_data_at(const GByteArray *s, uint64_t *first,
                            uint32_t *count)
{
    size_t off = 0;

    while (off + 16 <= s->len && s->data[off] != 2 && s->data[off] != 7) {
        off += 16 + (s->data[off + 4] | s->data[off + 5] << 8 |
                     s->data[off + 6] << 16 | (uint32_t)s->data[off + 7] << 24);
    }
    g_assert_cmpuint(off + 32, <=, s->len);
    *first = s->data[off + 16] | (uint64_t)s->data[off + 17] << 8;
    *count = s->data[off + 24] | (uint32_t)s->data[off + 25] << 8;
    return off + 32 + (s->data[off] == 7 ? 8 * (size_t)*count : 0);
}

/* Pieces that do not match the stream fail the load, with what and where. */
static void test_write_pieces_bad(void)
{
    static const struct {
        int64_t vram_shift; /* the VRAM piece's offset against the record's */
        int len_shift;      /* its length */
        bool slot_out;      /* the slot piece past the write's bytes */
        int ret;
        const char *msg;
    } cases[] = {
        {PAGE, 0, false, -EINVAL, "the record's are"},
        {0, -(int)PAGE, false, -EINVAL, "the record's are"},
        {(int64_t)VRAM, 0, false, -ERANGE, "outside VRAM"},
        {0, 0, true, -ERANGE, "outside the write's"},
        {-1, 0, false, -EINVAL, "no version 2 PAGES"},
    };

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autoptr(GByteArray) s = g_byte_array_new();
        struct vgpu *dgpu;
        struct mig *dst = placed_dst(&dgpu, s);
        uint64_t first;
        uint32_t count;
        size_t at = pages_data_at(s, &first, &count);
        /* case -1: the page data come a run header early */
        size_t head = cases[i].vram_shift == -1 ? at - 16 : at;
        struct mig_piece piece[2] = {
            {0, (uint32_t)head + (cases[i].slot_out ? 1 : 0), false},
            {first * PAGE + (cases[i].vram_shift == -1
                                 ? 0
                                 : (uint64_t)cases[i].vram_shift),
             count * PAGE + cases[i].len_shift, true},
        };
        struct vg_error err;

        g_assert_cmpint(
            mig_write_pieces(dst, s->data, (uint32_t)head, piece, 2, &err), ==,
            cases[i].ret);
        g_assert_nonnull(strstr(err.msg, cases[i].msg));
        g_assert_cmpint(mig_state(dst), ==, MIG_STATE_ERROR);
        mig_free(dst);
        vgpu_free(dgpu);
    }
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_data_func("/mig/load/one-thread", GUINT_TO_POINTER(1),
                         test_load);
    g_test_add_data_func("/mig/load/pool-of-4", GUINT_TO_POINTER(4), test_load);
    g_test_add_data_func("/mig/load/checksums-after-start/idle",
                         GUINT_TO_POINTER(1), test_checksums_after_start);
    g_test_add_data_func("/mig/load/checksums-after-start/next-session",
                         GUINT_TO_POINTER(0), test_checksums_after_start);
    g_test_add_data_func("/mig/load/nearly-zero-pages/stop-copy",
                         GUINT_TO_POINTER(0), test_nearly_zero_pages);
    g_test_add_data_func("/mig/load/nearly-zero-pages/pre-copy",
                         GUINT_TO_POINTER(1), test_nearly_zero_pages);
    g_test_add_func("/mig/load/read-sizes", test_read_sizes);
    g_test_add_func("/mig/load/read-pieces", test_read_pieces);
    g_test_add_func("/mig/load/pieces-same-stream", test_pieces_same_stream);
    g_test_add_func("/mig/load/pieces-room", test_pieces_room);
    g_test_add_data_func("/mig/load/listed-torn/logged", GUINT_TO_POINTER(1),
                         test_listed_torn);
    g_test_add_data_func("/mig/load/listed-torn/logged-4k", GUINT_TO_POINTER(2),
                         test_listed_torn);
    g_test_add_data_func("/mig/load/cpu-pieces", GUINT_TO_POINTER(0),
                         test_cpu_pieces);
    g_test_add_data_func("/mig/load/cpu-pieces/read-pieces",
                         GUINT_TO_POINTER(64), test_cpu_pieces);
    g_test_add_func("/mig/load/cpu-pieces/every-page",
                    test_cpu_pieces_every_page);
    g_test_add_data_func("/mig/load/cpu-pieces/mixed", GUINT_TO_POINTER(0),
                         test_cpu_pieces_mixed);
    g_test_add_data_func("/mig/load/cpu-pieces/mixed/read-pieces",
                         GUINT_TO_POINTER(64), test_cpu_pieces_mixed);
    g_test_add_data_func("/mig/load/listed-torn/unlogged", GUINT_TO_POINTER(0),
                         test_listed_torn);
    g_test_add_data_func("/mig/load/write-pieces", GUINT_TO_POINTER(0),
                         test_write_pieces);
    g_test_add_data_func("/mig/load/write-pieces-after-precopy",
                         GUINT_TO_POINTER(1), test_write_pieces);
    g_test_add_data_func("/mig/load/write-pieces/pool-of-4",
                         GUINT_TO_POINTER(2), test_write_pieces);
    g_test_add_data_func("/mig/load/write-pieces-after-precopy/pool-of-4",
                         GUINT_TO_POINTER(3), test_write_pieces);
    g_test_add_func("/mig/load/write-pieces-bad", test_write_pieces_bad);
    return g_test_run();
}
