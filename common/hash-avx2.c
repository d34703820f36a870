/*
 * hash-avx2.c -- XXH3-64 inlined for AVX2 (built with -mavx2; called only
 * where the CPU has it, hash.c).
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "hash.h"

vg_hash_fn vg_hash_avx2;

uint64_t vg_hash_avx2(const void *data, size_t len, uint64_t seed)
{
    return XXH3_64bits_withSeed(data, len, seed);
}
