/*
 * hash.c -- see hash.h.  The vector variants are hash-avx2.c and
 * hash-avx512.c, each compiled for its unit alone (Makefile).
 */
#include "hash.h"

#include <endian.h>
#include <xxhash.h>

vg_hash_fn vg_hash_avx2;
vg_hash_fn vg_hash_avx512;

static uint64_t hash_sse2(const void *data, size_t len, uint64_t seed)
{
    return XXH3_64bits_withSeed(data, len, seed);
}

static struct vg_hash_impl impls[] = {
    {"avx512", vg_hash_avx512, false},
    {"avx2", vg_hash_avx2, false},
    {"sse2", hash_sse2, true},
};

static const struct vg_hash_impl *chosen = &impls[2];

/* Before main(), so vg_hash() needs no lock: the first usable, widest
 * first.  __builtin_cpu_supports() also checks that the kernel saves the
 * registers (XCR0). */
__attribute__((constructor)) static void choose(void)
{
    __builtin_cpu_init();
    impls[0].usable = __builtin_cpu_supports("avx512f");
    impls[1].usable = __builtin_cpu_supports("avx2");
    for (size_t i = 0; i < sizeof(impls) / sizeof(impls[0]); i++) {
        if (impls[i].usable) {
            chosen = &impls[i];
            return;
        }
    }
}

uint64_t vg_hash(const void *data, size_t len, uint64_t seed)
{
    return chosen->fn(data, len, seed);
}

unsigned vg_hash_tree_pieces(size_t len)
{
    size_t n = len / 1024;

    return n > VG_TREE_PIECES ? VG_TREE_PIECES : n ? (unsigned)n : 1;
}

uint64_t vg_hash_tree_join(const uint64_t *piece_hash, unsigned n,
                           uint64_t seed)
{
    uint64_t le[VG_TREE_PIECES];

    for (unsigned i = 0; i < n; i++) {
        le[i] = htole64(piece_hash[i]);
    }
    return vg_hash(le, (size_t)n * 8, seed);
}

uint64_t vg_hash_tree(const void *page, size_t len, uint64_t seed,
                      uint64_t *piece_hash)
{
    unsigned n = vg_hash_tree_pieces(len);
    size_t piece = len / n;
    uint64_t h[VG_TREE_PIECES], *out = piece_hash ? piece_hash : h;

    for (unsigned i = 0; i < n; i++) {
        out[i] = vg_hash((const uint8_t *)page + i * piece, piece, seed);
    }
    return vg_hash_tree_join(out, n, seed);
}

const struct vg_hash_impl *vg_hash_impls(size_t *n)
{
    *n = sizeof(impls) / sizeof(impls[0]);
    return impls;
}

const char *vg_hash_impl_name(void)
{
    return chosen->name;
}
