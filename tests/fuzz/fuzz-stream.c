/*
 * fuzz-stream.c -- fuzz target: migration stream bytes, in chunks of
 * fuzzer-chosen sizes, into a destination's loading session (mig.h:
 * STOP -> RESUMING, mig_write per chunk, RESUMING -> STOP), the path of
 * VFIO_USER_MIG_DATA_WRITE.  Input format: fuzz.h.
 *
 * The VRAM lies between guard pages (guard.c), so a write outside it
 * faults.  Random bytes rarely carry a right XXH3 checksum, so with
 * FUZZ_STREAM_RESEAL the harness recomputes each record's checksum (and
 * with FUZZ_STREAM_FIX_END the END record's digest and counts) before
 * feeding: the fuzzer then reaches the checks behind the checksum.
 *
 * Checked: the load ends in STOP (the device state applied) or in ERROR
 * with a message; a load that failed never leaves the device running; a
 * load that succeeded left VRAM exactly as the stream's PAGES, ZEROS and
 * PAGE_PIECES records say, applied in order to what VRAM held before (a model
 * kept by the harness).  Then the loaded device runs: the device state it got
 * from the stream (registers, ring, a command in flight) drives it for a
 * bounded number of steps, its ring and DMA reaching the first
 * FUZZ_STREAM_RAM bytes of the input; it must stay inside VRAM (guard
 * pages) and stop when told.  An input, load and run, must take less
 * than FUZZ_STREAM_MAX_MS (a ZEROS flood took seconds before issue 13).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "common/le.h"
#include "common/log.h"
#include "fuzz.h"
#include "vfio-migration/mig-stream.h"
#include "vfio-migration/mig.h"
#include "vgpu/vgpu.h"

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz-stream: check failed: %s (%s:%d)\n", #cond,  \
                    __FILE__, __LINE__);                                       \
            abort();                                                           \
        }                                                                      \
    } while (0)

static uint8_t stream[FUZZ_MAX_INPUT];
static uint8_t model[FUZZ_VRAM]; /* what VRAM must hold after the load */

/* Guest RAM of the device run after a load: the input's first bytes. */
static uint8_t guest_ram[FUZZ_STREAM_RAM];

static void *input_dma(void *opaque, uint64_t iova, uint64_t len, bool write)
{
    if (iova < FUZZ_STREAM_IOVA ||
        iova - FUZZ_STREAM_IOVA >= sizeof(guest_ram) ||
        len > sizeof(guest_ram) - (iova - FUZZ_STREAM_IOVA)) {
        return NULL;
    }
    return guest_ram + (iova - FUZZ_STREAM_IOVA);
}

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void no_irq(void *opaque, unsigned vector)
{
}

static struct vgpu *gpu;
static struct mig *mig;

static void setup_once(void)
{
    struct vgpu_config gc = {.vram_size = FUZZ_VRAM, .page_size = FUZZ_PAGE};
    struct vgpu_host host = {NULL, input_dma, no_irq};
    struct mig_config mc = {0};
    struct vg_error err;

    if (gpu) {
        return;
    }
    vg_log_set_prog("fuzz-stream");
    fuzz_log_level();
    if (vgpu_new(&gc, &host, &gpu, &err) < 0) {
        fprintf(stderr, "fuzz-stream: %s\n", err.msg);
        abort();
    }
    mc.gpu = gpu;
    vgpu_bar0_read(gpu, VGPU_REG_FEATURES, &mc.features, 4);
    if (mig_new(&mc, &mig, &err) < 0) {
        fprintf(stderr, "fuzz-stream: %s\n", err.msg);
        abort();
    }
    CHECK(fuzz_guarded_maps() == 1); /* VRAM */
}

/* A version 3 PAGES_LISTED record (whole pages with their hashes) at @h:
 * its listed hashes made its pages' (so that it loads), the run header
 * and those hashes copied into @body; returns the body's length, or 0 if
 * the record is not of that shape. */
static size_t listed_body(uint8_t *h, uint32_t version, uint8_t *body)
{
    uint32_t len = vg_get_le32(h + 4), n;
    uint8_t *p = h + MIG_REC_HDR_SIZE;

    if (version < 3 || vg_get_le16(h) != MIG_REC_PAGES_LISTED ||
        len < MIG_RUN_HDR_SIZE || len > MIG_REC_MAX_PAYLOAD ||
        (len - MIG_RUN_HDR_SIZE) % (FUZZ_PAGE + 8)) {
        return 0;
    }
    n = (len - MIG_RUN_HDR_SIZE) / (FUZZ_PAGE + 8);
    for (uint32_t i = 0; i < n; i++) {
        vg_put_le64(p + MIG_RUN_HDR_SIZE + 8 * i,
                    mig_stream_page_hash(
                        version, p + MIG_RUN_HDR_SIZE + 8 * n + i * FUZZ_PAGE,
                        FUZZ_PAGE, NULL));
    }
    memcpy(body, p, MIG_RUN_HDR_SIZE + 8 * n);
    return MIG_RUN_HDR_SIZE + 8 * n;
}

/* A version 2 PAGES record (whole pages) at @h: the run header and its
 * pages' little-endian hashes into @body (16 + 8 * pages bytes); returns
 * the body's length, or 0 if the record is anything else (a PAGES_LISTED
 * record: listed_body()). */
static size_t hashed_body(uint8_t *h, uint32_t version, uint8_t *body)
{
    uint32_t len = vg_get_le32(h + 4);
    const uint8_t *p = h + MIG_REC_HDR_SIZE;

    if (vg_get_le16(h) == MIG_REC_PAGES_LISTED) {
        return listed_body(h, version, body);
    }
    if (version < 2 || vg_get_le16(h) != MIG_REC_PAGES ||
        len < MIG_RUN_HDR_SIZE || len > MIG_REC_MAX_PAYLOAD ||
        (len - MIG_RUN_HDR_SIZE) % FUZZ_PAGE) {
        return 0;
    }
    memcpy(body, p, MIG_RUN_HDR_SIZE);
    for (uint32_t i = 0; i < (len - MIG_RUN_HDR_SIZE) / FUZZ_PAGE; i++) {
        vg_put_le64(body + MIG_RUN_HDR_SIZE + 8 * i,
                    mig_stream_page_hash(version,
                                         p + MIG_RUN_HDR_SIZE + i * FUZZ_PAGE,
                                         FUZZ_PAGE, NULL));
    }
    return MIG_RUN_HDR_SIZE + 8 * ((len - MIG_RUN_HDR_SIZE) / FUZZ_PAGE);
}

/* A version 6 PAGE_PIECES record at @h (pieces header in its length):
 * reseal it over its pieces' hashes; false if it is anything else. */
static bool reseal_pieces(uint8_t *h, uint32_t version, XXH3_state_t *digest)
{
    uint32_t len = vg_get_le32(h + 4), piece = FUZZ_PAGE / MIG_PAGE_PIECES;

    if (version < MIG_PIECE_HASH_VERSION ||
        vg_get_le16(h) != MIG_REC_PAGE_PIECES || len < MIG_PIECES_HDR_SIZE ||
        len > MIG_PIECES_HDR_SIZE + FUZZ_PAGE) {
        return false;
    }
    vg_put_le64(h + 8, mig_pieces_checksum(
                           h, h + MIG_REC_HDR_SIZE,
                           h + MIG_REC_HDR_SIZE + MIG_PIECES_HDR_SIZE, piece,
                           (len - MIG_PIECES_HDR_SIZE) / piece, NULL));
    XXH3_64bits_update(digest, h, MIG_REC_HDR_SIZE + MIG_PIECES_HDR_SIZE);
    return true;
}

/* Any other record at @h: its checksum over its payload, or over its
 * page hashes (into @body) where its version takes them. */
static void reseal_record(uint8_t *h, uint32_t version, uint8_t *body,
                          XXH3_state_t *digest)
{
    uint32_t len = vg_get_le32(h + 4);
    size_t blen = hashed_body(h, version, body);

    if (blen) {
        vg_put_le64(h + 8, XXH3_64bits_withSeed(body, blen, vg_get_le64(h)));
        XXH3_64bits_update(digest, h, MIG_REC_HDR_SIZE);
        XXH3_64bits_update(digest, body, blen);
    } else {
        vg_put_le64(h + 8, XXH3_64bits_withSeed(h + MIG_REC_HDR_SIZE, len,
                                                vg_get_le64(h)));
        XXH3_64bits_update(digest, h, MIG_REC_HDR_SIZE + len);
    }
}

/* Recompute record checksums (and END's fields) in place, the way the
 * stream's version (its first record's, if a HEADER) computes them. */
static void reseal(uint8_t *s, size_t n, bool fix_end)
{
    static uint8_t body[MIG_RUN_HDR_SIZE + 8 * MIG_RUN_MAX_PAGES];
    XXH3_state_t *digest = XXH3_createState();
    uint32_t version = 1;
    size_t pos = 0;
    uint64_t index = 0;

    CHECK(digest);
    XXH3_64bits_reset(digest);
    if (n >= MIG_REC_HDR_SIZE + 12 && vg_get_le16(s) == MIG_REC_HEADER) {
        version = vg_get_le32(s + MIG_REC_HDR_SIZE + 8);
    }
    while (n - pos >= MIG_REC_HDR_SIZE) {
        uint8_t *h = s + pos;
        uint32_t len = vg_get_le32(h + 4);

        if (len > n - pos - MIG_REC_HDR_SIZE) {
            break; /* a truncated last record stays as it is */
        }
        if (fix_end && vg_get_le16(h) == MIG_REC_END && len == MIG_END_SIZE) {
            vg_put_le64(h + 16, XXH3_64bits_digest(digest));
            vg_put_le64(h + 24, pos);
            vg_put_le64(h + 32, index);
        }
        if (!reseal_pieces(h, version, digest)) {
            reseal_record(h, version, body, digest);
        }
        pos += MIG_REC_HDR_SIZE + len;
        index++;
    }
    XXH3_freeState(digest);
}

/* Apply the page records of a stream that loaded to the model of VRAM
 * (the decoder accepted them all, so they are well-formed). */
static void model_apply(const uint8_t *s, size_t n)
{
    const uint64_t npages = FUZZ_VRAM / FUZZ_PAGE;
    size_t pos = 0;

    while (n - pos >= MIG_REC_HDR_SIZE) {
        const uint8_t *h = s + pos, *p = h + MIG_REC_HDR_SIZE;
        uint32_t len = vg_get_le32(h + 4);
        uint64_t first = len >= MIG_RUN_HDR_SIZE ? vg_get_le64(p) : 0;

        CHECK(len <= n - pos - MIG_REC_HDR_SIZE);
        if (vg_get_le16(h) == MIG_REC_PAGES ||
            vg_get_le16(h) == MIG_REC_PAGES_LISTED) {
            uint64_t count = vg_get_le32(p + 8);
            uint64_t list = vg_get_le16(h) == MIG_REC_PAGES ? 0 : 8 * count;
            CHECK(first < npages && count <= npages - first);
            CHECK(len == MIG_RUN_HDR_SIZE + list + count * FUZZ_PAGE);
            memcpy(model + first * FUZZ_PAGE, p + MIG_RUN_HDR_SIZE + list,
                   count * FUZZ_PAGE);
        } else if (vg_get_le16(h) == MIG_REC_ZEROS) {
            uint64_t count = vg_get_le64(p + 8);
            CHECK(first < npages && count <= npages - first);
            memset(model + first * FUZZ_PAGE, 0, count * FUZZ_PAGE);
        } else if (vg_get_le16(h) == MIG_REC_PAGE_PIECES) {
            const uint32_t piece = FUZZ_PAGE / MIG_PAGE_PIECES;
            const uint8_t *data = p + MIG_PIECES_HDR_SIZE;
            uint64_t mask = vg_get_le64(p + 8);

            CHECK(first < npages &&
                  len == MIG_PIECES_HDR_SIZE +
                             (uint64_t)__builtin_popcountll(mask) * piece);
            for (; mask; mask &= mask - 1, data += piece) {
                memcpy(model + first * FUZZ_PAGE +
                           (size_t)__builtin_ctzll(mask) * piece,
                       data, piece);
            }
        }
        pos += MIG_REC_HDR_SIZE + len;
    }
    CHECK(pos == n);
}

/* xorshift64: the chunk sizes. */
static uint64_t next_rand(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* Run the device that a stream loaded: at most 64 steps of 64 KiB, then
 * stop it again. */
static void run_loaded(const uint8_t *data, size_t size)
{
    struct vg_error err;

    memset(guest_ram, 0, sizeof(guest_ram));
    memcpy(guest_ram, data,
           size < sizeof(guest_ram) ? size : sizeof(guest_ram));
    CHECK(mig_set_state(mig, MIG_STATE_RUNNING, &err) == 0);
    for (int i = 0; i < 64 && vgpu_runnable(gpu); i++) {
        mig_gpu_step(mig, 64u << 10);
    }
    CHECK(mig_set_state(mig, MIG_STATE_STOP, &err) == 0);
    CHECK(vgpu_stopped(gpu));
}

static int one_input(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    double t0 = now_ms();
    int ret = one_input(data, size);
    double ms = now_ms() - t0;

    if (ms >= FUZZ_STREAM_MAX_MS) {
        fprintf(stderr, "fuzz-stream: input of %zu bytes took %.0f ms\n", size,
                ms);
        abort();
    }
    return ret;
}

static int one_input(const uint8_t *data, size_t size)
{
    struct vg_error err = {0};
    uint64_t rnd;
    unsigned flags, chunking;
    size_t n, pos = 0;
    int ret = 0;

    setup_once();
    if (size < 2 || size - 2 > sizeof(stream)) {
        return 0;
    }
    flags = data[0];
    chunking = data[1];
    n = size - 2;
    memcpy(stream, data + 2, n);
    if (flags & FUZZ_STREAM_RESEAL) {
        reseal(stream, n, flags & FUZZ_STREAM_FIX_END);
    }
    mig_reset(mig);
    memcpy(model, vgpu_vram(gpu), FUZZ_VRAM);
    CHECK(mig_set_state(mig, MIG_STATE_STOP, &err) == 0);
    CHECK(mig_set_state(mig, MIG_STATE_RESUMING, &err) == 0);
    /* chunking 0: one write; else sizes of 1 .. 2^(chunking % 21) bytes
     * drawn from the chunking byte. */
    rnd = 0x9e3779b97f4a7c15ull ^ chunking;
    while (pos < n && ret == 0) {
        size_t c = n - pos;
        if (chunking) {
            size_t max = (size_t)1 << (chunking % 21);
            size_t want = 1 + (size_t)(next_rand(&rnd) % max);
            c = want < c ? want : c;
        }
        ret = mig_write(mig, stream + pos, (uint32_t)c, &err);
        pos += c;
    }
    if (ret < 0) {
        CHECK(err.msg[0] != '\0');
        CHECK(mig_state(mig) == MIG_STATE_ERROR);
        return 0;
    }
    ret = mig_set_state(mig, MIG_STATE_STOP, &err);
    if (ret == 0) {
        CHECK(mig_state(mig) == MIG_STATE_STOP);
        model_apply(stream, n);
        CHECK(memcmp(model, vgpu_vram(gpu), FUZZ_VRAM) == 0);
        run_loaded(data, size);
    } else {
        CHECK(err.msg[0] != '\0');
        CHECK(mig_state(mig) == MIG_STATE_ERROR);
        CHECK(vgpu_stopped(gpu));
    }
    return 0;
}
