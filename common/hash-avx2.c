/*
 * hash-avx2.c -- XXH3-64, one-shot and running, inlined for AVX2 (built with
 * -mavx2; called only where the CPU has it, hash.c).
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "hash.h"

vg_hash_fn vg_hash_avx2;
void vg_digest_reset_avx2(void *state, uint64_t seed);
void vg_digest_update_avx2(void *state, const void *data, size_t len);
uint64_t vg_digest_value_avx2(const void *state);

uint64_t vg_hash_avx2(const void *data, size_t len, uint64_t seed)
{
    return XXH3_64bits_withSeed(data, len, seed);
}

void vg_digest_reset_avx2(void *state, uint64_t seed)
{
    XXH3_64bits_reset_withSeed(state, seed);
}

void vg_digest_update_avx2(void *state, const void *data, size_t len)
{
    XXH3_64bits_update(state, data, len);
}

uint64_t vg_digest_value_avx2(const void *state)
{
    return XXH3_64bits_digest(state);
}
