/*
 * Unit tests of common/hash.c: every implementation this CPU runs gives
 * XXH3_64bits_withSeed()'s result (libxxhash, the reference) for every
 * length class of XXH3 and unaligned data, one-shot and running (fed in
 * pieces), and vg_hash() uses the widest.
 */
#include <glib.h>
#include <string.h>
#include <xxhash.h>

#include "common/hash.h"

#define BUF (256u << 10)

static uint8_t *random_buf(void)
{
    uint8_t *b = g_malloc(BUF + 64);
    GRand *r = g_rand_new_with_seed(20261125);

    for (size_t i = 0; i < BUF + 64; i++) {
        b[i] = (uint8_t)g_rand_int(r);
    }
    g_rand_free(r);
    return b;
}

static void check_impl(const struct vg_hash_impl *im, const uint8_t *b)
{
    /* XXH3 has paths for 0, 1-3, 4-8, 9-16, 17-128, 129-240 bytes, then
     * stripes and blocks of 1 KiB (more with a seed's secret). */
    static const size_t big[] = {241,  255,   1023,      1024, 1025,
                                 4096, 65536, 65536 + 7, BUF};
    static const uint64_t seeds[] = {0, 1, 0x9e3779b97f4a7c15ull};
    size_t checked = 0;

    for (size_t s = 0; s < G_N_ELEMENTS(seeds); s++) {
        for (size_t off = 0; off < 4; off++) {
            for (size_t len = 0; len <= 300; len++, checked++) {
                g_assert_cmphex(im->fn(b + off, len, seeds[s]), ==,
                                XXH3_64bits_withSeed(b + off, len, seeds[s]));
            }
            for (size_t i = 0; i < G_N_ELEMENTS(big); i++, checked++) {
                size_t len = big[i] - (off && big[i] == BUF ? off : 0);

                g_assert_cmphex(im->fn(b + off, len, seeds[s]), ==,
                                XXH3_64bits_withSeed(b + off, len, seeds[s]));
            }
        }
    }
    g_test_message("%s: %zu hashes equal to libxxhash's", im->name, checked);
}

static void test_equal(void)
{
    g_autofree uint8_t *b = random_buf();
    const struct vg_hash_impl *im;
    size_t n, ran = 0;

    im = vg_hash_impls(&n);
    for (size_t i = 0; i < n; i++) {
        if (!im[i].usable) {
            g_test_message("%s: not on this CPU, not run", im[i].name);
            continue;
        }
        check_impl(&im[i], b);
        ran++;
    }
    g_assert_cmpuint(ran, >=, 1); /* sse2 is baseline x86-64 */
    g_assert_cmphex(vg_hash(b, 4096, 7), ==, XXH3_64bits_withSeed(b, 4096, 7));
}

/* Implementation @im's running hash of @b[0, @len) fed in pieces of the
 * sizes @cut gives in turn (0: all that is left), with @seed. */
static uint64_t digest_in_pieces(const struct vg_hash_impl *im,
                                 const uint8_t *b, size_t len, uint64_t seed,
                                 const size_t *cut, size_t ncut)
{
    XXH3_state_t *st = XXH3_createState();
    uint64_t v;

    g_assert_nonnull(st);
    im->digest_reset(st, seed);
    for (size_t at = 0, i = 0; at < len; i++) {
        size_t n = cut[i % ncut] ? cut[i % ncut] : len - at;

        n = n < len - at ? n : len - at;
        im->digest_update(st, b + at, n);
        at += n;
    }
    v = im->digest_value(st);
    XXH3_freeState(st);
    return v;
}

/* Every implementation this CPU runs: the running hash of bytes fed in
 * pieces of every size class (and an empty one) is libxxhash's one-shot
 * hash of them; and vg_digest_*() agree, reset to another seed. */
static void test_digest(void)
{
    g_autofree uint8_t *b = random_buf();
    static const size_t cuts[][4] = {{0},
                                     {1, 0, 0, 0},
                                     {7, 300, 1, 0},
                                     {1023, 1025, 24, 4096},
                                     {5160, 0, 0, 0},
                                     {64, 256, 1024, 3}};
    static const size_t lens[] = {0, 1, 240, 241, 1024, 5000, 65600, BUF};
    const struct vg_hash_impl *im;
    struct vg_digest *d;
    size_t n;

    im = vg_hash_impls(&n);
    for (size_t i = 0; i < n; i++) {
        if (!im[i].usable) {
            continue;
        }
        for (size_t c = 0; c < G_N_ELEMENTS(cuts); c++) {
            for (size_t l = 0; l < G_N_ELEMENTS(lens); l++) {
                g_assert_cmphex(
                    digest_in_pieces(&im[i], b + 3, lens[l] - (l == 7 ? 3 : 0),
                                     c, cuts[c], 4),
                    ==,
                    XXH3_64bits_withSeed(b + 3, lens[l] - (l == 7 ? 3 : 0), c));
            }
        }
    }
    d = vg_digest_new();
    g_assert_nonnull(d);
    g_assert_cmphex(vg_digest_value(d), ==, XXH3_64bits(NULL, 0));
    vg_digest_update(d, b, 100);
    vg_digest_reset(d, 42);
    vg_digest_update(d, b, 5000);
    vg_digest_update(d, b + 5000, 60000);
    g_assert_cmphex(vg_digest_value(d), ==, XXH3_64bits_withSeed(b, 65000, 42));
    vg_digest_free(d);
}

static void test_widest_chosen(void)
{
    const struct vg_hash_impl *im;
    size_t n;

    im = vg_hash_impls(&n);
    for (size_t i = 0; i < n; i++) {
        if (im[i].usable) {
            g_assert_cmpstr(vg_hash_impl_name(), ==, im[i].name);
            g_test_message("vg_hash() runs %s", im[i].name);
            return;
        }
    }
    g_assert_not_reached();
}

/* The tree hash against its definition written out with libxxhash, and a
 * page hashed again from one changed piece and the others' kept hashes. */
static void test_tree(void)
{
    static const size_t sizes[] = {4096, 65536, 2 << 20};
    g_autofree uint8_t *b = g_malloc(2 << 20);
    uint64_t kept[VG_TREE_PIECES], le[VG_TREE_PIECES];

    for (size_t i = 0; i < (2u << 20); i++) {
        b[i] = (uint8_t)(i * 131 + (i >> 11));
    }
    g_assert_cmpuint(vg_hash_tree_pieces(4096), ==, 4);
    g_assert_cmpuint(vg_hash_tree_pieces(65536), ==, 64);
    g_assert_cmpuint(vg_hash_tree_pieces(2 << 20), ==, 64);
    for (size_t k = 0; k < G_N_ELEMENTS(sizes); k++) {
        size_t len = sizes[k];
        unsigned n = vg_hash_tree_pieces(len);
        size_t piece = len / n;
        uint64_t whole;

        for (unsigned i = 0; i < n; i++) {
            le[i] =
                GUINT64_TO_LE(XXH3_64bits_withSeed(b + i * piece, piece, 9));
        }
        whole = XXH3_64bits_withSeed(le, n * 8, 9);
        g_assert_cmphex(vg_hash_tree(b, len, 9, kept), ==, whole);
        g_assert_cmphex(vg_hash_tree(b, len, 9, NULL), ==, whole);
        g_assert_cmphex(whole, !=, XXH3_64bits_withSeed(b, len, 9));

        b[piece * (n - 1) + 5] ^= 0x40; /* the last piece changes */
        kept[n - 1] = vg_hash(b + piece * (n - 1), piece, 9);
        g_assert_cmphex(vg_hash_tree_join(kept, n, 9), ==,
                        vg_hash_tree(b, len, 9, NULL));
        g_assert_cmphex(vg_hash_tree_join(kept, n, 9), !=, whole);
        b[piece * (n - 1) + 5] ^= 0x40;
    }
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/hash/digest", test_digest);
    g_test_add_func("/hash/equal", test_equal);
    g_test_add_func("/hash/widest-chosen", test_widest_chosen);
    g_test_add_func("/hash/tree", test_tree);
    return g_test_run();
}
