/*
 * hash-avx512.c -- XXH3-64 inlined for AVX-512 (built with -mavx512f;
 * called only where the CPU has it, hash.c).
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "hash.h"

vg_hash_fn vg_hash_avx512;

uint64_t vg_hash_avx512(const void *data, size_t len, uint64_t seed)
{
    return XXH3_64bits_withSeed(data, len, seed);
}
