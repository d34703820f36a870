/*
 * dt-bench -- libdirtytrack microbenchmark: how fast pages are hashed,
 * against memcpy and a plain read of the same buffer, in the same run.
 *
 * GB/s are 1e9 bytes of the buffer per second (a memcpy of N bytes counts
 * N), best of --reps runs, the steps interleaved in every run so that
 * all see the same machine.  "pool" is dt_epoch hashing every page
 * (dt_mark_all_opaque) with 1 to --threads threads; "empty epoch" is
 * dt_epoch_begin and dt_epoch_end with nothing marked, the final epoch of
 * an idle device's stop-copy, in microseconds (the best run).  "running"
 * is the stream digest's XXH3 fed a record at a time (vg_digest_update),
 * against libxxhash's own streaming code.  "pieces" copies 1 KiB pieces
 * from the start of the buffer to scattered places of the other (one in
 * 16 of its pieces, as a destination's stop-copy writes pieces into
 * VRAM), with memcpy and with vg_nt_copy() (fenced once), in ns a piece.
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "common/error.h"
#include "common/hash.h"
#include "common/nt-copy.h"
#include "common/size.h"
#include "dirty-track/dirtytrack.h"

struct opts {
    uint64_t size;
    uint64_t page;
    unsigned threads;
    unsigned reps;
};

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* GB/s of @bytes processed since @t0. */
static double gbps_since(double t0, uint64_t bytes)
{
    return (double)bytes / (now_s() - t0) / 1e9;
}

static double once_memcpy(const struct opts *o, const uint8_t *src,
                          uint8_t *dst)
{
    double t0 = now_s();

    memcpy(dst, src, o->size);
    __asm__ volatile("" : : "r"(dst) : "memory");
    return gbps_since(t0, o->size);
}

#define PIECE 1024u

/* Pieces of PIECE bytes, one in 16 of @dst's, from the start of @src to
 * scattered places of @dst (an odd step modulo a power of two: each
 * place once), by memcpy or vg_nt_copy(): ns a piece. */
static double once_pieces(const struct opts *o, const uint8_t *src,
                          uint8_t *dst, bool nt)
{
    uint64_t slots = o->size / PIECE, n = slots / 16;
    double t0 = now_s();

    for (uint64_t i = 0; i < n; i++) {
        uint8_t *to = dst + (i * 0x9e3779b1ull & (slots - 1)) * PIECE;

        if (nt) {
            vg_nt_copy(to, src + i * PIECE, PIECE);
        } else {
            memcpy(to, src + i * PIECE, PIECE);
        }
    }
    if (nt) {
        vg_nt_fence();
    }
    __asm__ volatile("" : : "r"(dst) : "memory");
    return (now_s() - t0) * 1e9 / (double)n;
}

static double once_read(const struct opts *o, const uint8_t *src)
{
    const uint64_t *w = (const uint64_t *)src;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    double t0 = now_s();

    for (uint64_t i = 0; i < o->size / 8; i += 4) { /* size % 4K == 0 */
        s0 += w[i];
        s1 += w[i + 1];
        s2 += w[i + 2];
        s3 += w[i + 3];
    }
    __asm__ volatile("" : : "r"(s0 + s1 + s2 + s3));
    return gbps_since(t0, o->size);
}

static double once_xxh3(const struct opts *o, const uint8_t *src)
{
    uint64_t acc = 0;
    double t0 = now_s();

    for (uint64_t off = 0; off < o->size; off += o->page) {
        acc ^= vg_hash(src + off, o->page, 0x5eed);
    }
    __asm__ volatile("" : : "r"(acc));
    return gbps_since(t0, o->size);
}

/* The stream digest's running XXH3 over the buffer fed in records of
 * DIGEST_RECORD bytes (a PAGE_PIECES record of five 1 KiB pieces): with
 * vg_digest_update() (@ours) or libxxhash's XXH3_64bits_update(). */
#define DIGEST_RECORD (16 + 24 + 5 * 1024)

static double once_digest(const struct opts *o, const uint8_t *src, bool ours)
{
    struct vg_digest *d = vg_digest_new();
    XXH3_state_t *st = XXH3_createState();
    uint64_t fed = 0, acc;
    double t0 = now_s();

    if (!d || !st) {
        vg_digest_free(d);
        XXH3_freeState(st);
        return 0;
    }
    XXH3_64bits_reset(st);
    for (; fed + DIGEST_RECORD <= o->size; fed += DIGEST_RECORD) {
        if (ours) {
            vg_digest_update(d, src + fed, DIGEST_RECORD);
        } else {
            XXH3_64bits_update(st, src + fed, DIGEST_RECORD);
        }
    }
    acc = ours ? vg_digest_value(d) : XXH3_64bits_digest(st);
    __asm__ volatile("" : : "r"(acc));
    vg_digest_free(d);
    XXH3_freeState(st);
    return gbps_since(t0, fed);
}

/* dt_epoch over every page of @t; its own GB/s figure. */
static int once_pool(struct dt_tracker *t, uint64_t *dirty, double *out,
                     struct vg_error *err)
{
    struct dt_epoch_stats st;
    int rc;

    dt_mark_all_opaque(t);
    rc = dt_epoch(t, dirty, &st, err);
    *out = st.hash_gbps;
    return rc;
}

/* dt_epoch_begin and dt_epoch_end with nothing to hash: microseconds. */
static double once_empty_epoch(struct dt_tracker *t, uint64_t *dirty,
                               struct vg_error *err)
{
    double t0 = now_s();

    if (dt_epoch_begin(t, dirty, err)) {
        return -1;
    }
    dt_epoch_end(t, NULL);
    return (now_s() - t0) * 1e6;
}

static void keep_least(double *least, double us)
{
    if (*least == 0 || us < *least) {
        *least = us;
    }
}

static void keep_best(double *best, double g)
{
    if (g > *best) {
        *best = g;
    }
}

/* Trackers with 1 .. o->threads threads, each with its baseline taken. */
static int pools_new(const struct opts *o, const uint8_t *src,
                     struct dt_tracker **t, uint64_t **dirty,
                     struct vg_error *err)
{
    for (unsigned n = 1; n <= o->threads; n++) {
        struct dt_config cfg = {src,  o->size, (uint32_t)o->page, n, 0, NULL,
                                NULL, false};
        double g;
        int rc = dt_new(&cfg, &t[n - 1], err);

        if (rc) {
            return rc;
        }
        dirty[n - 1] = calloc(dt_bitmap_words(t[n - 1]), sizeof(uint64_t));
        if (!dirty[n - 1]) {
            return vg_error_set(err, ENOMEM, "out of memory");
        }
        rc = once_pool(t[n - 1], dirty[n - 1], &g, err); /* the baseline */
        if (rc) {
            return rc;
        }
    }
    return 0;
}

/*
 * Every rep measures every step once, in turn (memcpy, read, XXH3, the
 * pool with 1 .. threads threads), so that all of them see the same
 * machine; the best of each is kept.
 */
static int measure(const struct opts *o, const uint8_t *src, uint8_t *dst,
                   double *mc, double *rd, double *xx, double *digest,
                   double *pieces_ns, double *pool, double *empty_us,
                   struct vg_error *err)
{
    struct dt_tracker *t[DT_THREADS_MAX] = {0};
    uint64_t *dirty[DT_THREADS_MAX] = {0};
    int rc = pools_new(o, src, t, dirty, err);

    for (unsigned r = 0; !rc && r < o->reps; r++) {
        keep_best(mc, once_memcpy(o, src, dst));
        keep_best(rd, once_read(o, src));
        keep_best(xx, once_xxh3(o, src));
        keep_best(&digest[0], once_digest(o, src, true));
        keep_best(&digest[1], once_digest(o, src, false));
        keep_least(&pieces_ns[0], once_pieces(o, src, dst, false));
        keep_least(&pieces_ns[1], once_pieces(o, src, dst, true));
        for (unsigned n = 1; !rc && n <= o->threads; n++) {
            double g;

            rc = once_pool(t[n - 1], dirty[n - 1], &g, err);
            keep_best(&pool[n - 1], g);
        }
        for (unsigned n = 1; !rc && n <= o->threads; n++) {
            double us = once_empty_epoch(t[n - 1], dirty[n - 1], err);

            rc = us < 0 ? -1 : 0;
            keep_least(&empty_us[n - 1], us);
        }
    }
    for (unsigned n = 0; n < o->threads; n++) {
        free(dirty[n]);
        dt_free(t[n]);
    }
    return rc;
}

static int run(const struct opts *o, const uint8_t *src, uint8_t *dst)
{
    double mc = 0, rd = 0, xx = 0, digest[2] = {0}, pool[DT_THREADS_MAX] = {0};
    double empty_us[DT_THREADS_MAX] = {0}, pieces_ns[2] = {0};
    struct vg_error err = {0};

    if (measure(o, src, dst, &mc, &rd, &xx, digest, pieces_ns, pool, empty_us,
                &err)) {
        fprintf(stderr, "dt-bench: %s\n", err.msg);
        return 1;
    }
    printf("buffer %llu MiB, page %llu KiB, best of %u, steps interleaved\n",
           (unsigned long long)(o->size >> 20),
           (unsigned long long)(o->page >> 10), o->reps);
    printf("memcpy 1 thread       %8.2f GB/s\n", mc);
    printf("read   1 thread       %8.2f GB/s\n", rd);
    printf("XXH3-64 per page      %8.2f GB/s  (hash/memcpy %.2f, %s)\n", xx,
           xx / mc, vg_hash_impl_name());
    printf("XXH3-64 running       %8.2f GB/s  (in %u-byte records; "
           "libxxhash's %.2f GB/s)\n",
           digest[0], DIGEST_RECORD, digest[1]);
    printf("pieces memcpy         %8.1f ns  (1 KiB each, %llu to scattered "
           "places)\n",
           pieces_ns[0], (unsigned long long)(o->size / PIECE / 16));
    printf("pieces nt copy        %8.1f ns  (nt/memcpy %.2f, %s)\n",
           pieces_ns[1], pieces_ns[1] / pieces_ns[0], vg_nt_copy_unit());
    for (unsigned n = 1; n <= o->threads; n++) {
        printf("hash pool %2u thread%s  %8.2f GB/s  (hash/memcpy %.2f, "
               "scaling x%.2f)\n",
               n, n > 1 ? "s" : " ", pool[n - 1], pool[n - 1] / mc,
               pool[n - 1] / pool[0]);
    }
    for (unsigned n = 1; n <= o->threads; n++) {
        printf("empty epoch %2u thread%s %8.1f us  (%llu pages)\n", n,
               n > 1 ? "s" : " ", empty_us[n - 1],
               (unsigned long long)(o->size / o->page));
    }
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: dt-bench [--size BYTES] [--page BYTES] "
               "[--threads N] [--reps N]\n"
               "  --size     buffer (default 256M)\n"
               "  --page     page size, 4K to 2M (default 64K)\n"
               "  --threads  hash pool and empty epoch measured with "
               "1..N threads (default 2)\n"
               "  --reps     runs of each step, best kept (default 5)\n");
}

static int parse_args(int argc, char **argv, struct opts *o)
{
    static const struct option longopts[] = {
        {"size", required_argument, NULL, 's'},
        {"page", required_argument, NULL, 'p'},
        {"threads", required_argument, NULL, 't'},
        {"reps", required_argument, NULL, 'r'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct vg_error err = {0};
    uint64_t v;
    int c, rc = 0;

    while (!rc && (c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 's':
            rc = vg_parse_size(optarg, 1, 1ull << 40, &o->size, &err);
            break;
        case 'p':
            rc = vg_parse_size(optarg, DT_PAGE_SIZE_MIN, DT_PAGE_SIZE_MAX,
                               &o->page, &err);
            break;
        case 't':
            rc = vg_parse_size(optarg, 1, DT_THREADS_MAX, &v, &err);
            o->threads = (unsigned)v;
            break;
        case 'r':
            rc = vg_parse_size(optarg, 1, 1000, &v, &err);
            o->reps = (unsigned)v;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return 2;
        }
    }
    if (rc) {
        fprintf(stderr, "dt-bench: %s\n", err.msg);
        return 2;
    }
    o->size -= o->size % o->page;
    return o->size ? 0 : 2;
}

int main(int argc, char **argv)
{
    struct opts o = {256ull << 20, 64 << 10, 2, 5};
    uint8_t *src, *dst;
    int rc = parse_args(argc, argv, &o);

    if (rc) {
        return rc;
    }
    src = malloc(o.size);
    dst = malloc(o.size);
    if (!src || !dst) {
        fprintf(stderr, "dt-bench: out of memory for 2 x %llu bytes\n",
                (unsigned long long)o.size);
        return 1;
    }
    for (uint64_t i = 0; i < o.size / 8; i++) { /* non-zero, faulted in */
        ((uint64_t *)src)[i] = (i + 1) * 0x9e3779b97f4a7c15ull;
    }
    memset(dst, 1, o.size);
    rc = run(&o, src, dst);
    free(src);
    free(dst);
    return rc;
}
