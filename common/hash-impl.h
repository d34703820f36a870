/*
 * hash-impl.h -- the functions of one implementation of hash.h's XXH3
 * (struct vg_hash_impl), named after its unit: HASH_IMPL_DECLARE(unit)
 * declares them, HASH_IMPL_DEFINE(unit) defines them in a file that
 * included <xxhash.h> (with XXH_INLINE_ALL, built for that unit alone:
 * hash-avx2.c, hash-avx512.c; or libxxhash's own, hash.c), and
 * HASH_IMPL(unit) is its entry in hash.c's table.
 */
#ifndef VG_HASH_IMPL_H
#define VG_HASH_IMPL_H

#include "hash.h"

#define HASH_IMPL_DECLARE(unit)                                                \
    vg_hash_fn vg_hash_##unit;                                                 \
    void vg_digest_reset_##unit(void *state, uint64_t seed);                   \
    void vg_digest_update_##unit(void *state, const void *data, size_t len);   \
    uint64_t vg_digest_value_##unit(const void *state)

#define HASH_IMPL_DEFINE(unit)                                                 \
    uint64_t vg_hash_##unit(const void *data, size_t len, uint64_t seed)       \
    {                                                                          \
        return XXH3_64bits_withSeed(data, len, seed);                          \
    }                                                                          \
    void vg_digest_reset_##unit(void *state, uint64_t seed)                    \
    {                                                                          \
        XXH3_64bits_reset_withSeed(state, seed);                               \
    }                                                                          \
    void vg_digest_update_##unit(void *state, const void *data, size_t len)    \
    {                                                                          \
        XXH3_64bits_update(state, data, len);                                  \
    }                                                                          \
    uint64_t vg_digest_value_##unit(const void *state)                         \
    {                                                                          \
        return XXH3_64bits_digest(state);                                      \
    }

#define HASH_IMPL(unit)                                                        \
    {                                                                          \
        .name = #unit, .fn = vg_hash_##unit,                                   \
        .digest_reset = vg_digest_reset_##unit,                                \
        .digest_update = vg_digest_update_##unit,                              \
        .digest_value = vg_digest_value_##unit                                 \
    }

#endif
