/*
 * hash.c -- see hash.h.  The vector variants are hash-avx2.c and
 * hash-avx512.c, each compiled for its unit alone (Makefile).
 */
#include "hash.h"
#include "hash-impl.h"

#include <endian.h>
#include <xxhash.h>

HASH_IMPL_DECLARE(avx2);
HASH_IMPL_DECLARE(avx512);
HASH_IMPL_DECLARE(sse2);
HASH_IMPL_DEFINE(sse2) /* libxxhash's, built for baseline x86-64 */

static struct vg_hash_impl impls[] = {
    HASH_IMPL(avx512),
    HASH_IMPL(avx2),
    HASH_IMPL(sse2),
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
    impls[2].usable = true; /* baseline x86-64 */
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

/* A struct vg_digest is an XXH3_state_t, libxxhash's allocation (aligned
 * as the state wants); the implementations share its layout, the same
 * header's. */
struct vg_digest *vg_digest_new(void)
{
    XXH3_state_t *st = XXH3_createState();

    if (st) {
        chosen->digest_reset(st, 0);
    }
    return (struct vg_digest *)st;
}

void vg_digest_free(struct vg_digest *d)
{
    XXH3_freeState((XXH3_state_t *)d);
}

void vg_digest_reset(struct vg_digest *d, uint64_t seed)
{
    chosen->digest_reset(d, seed);
}

void vg_digest_update(struct vg_digest *d, const void *data, size_t len)
{
    chosen->digest_update(d, data, len);
}

uint64_t vg_digest_value(const struct vg_digest *d)
{
    return chosen->digest_value(d);
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
