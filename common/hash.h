/*
 * hash.h -- XXH3-64 on the widest vector unit the CPU has.
 *
 * vg_hash() returns exactly XXH3_64bits_withSeed(@data, @len, @seed): the
 * result is the same everywhere, only the speed differs.  Debian's
 * libxxhash is built for baseline x86-64 (SSE2); the same algorithm
 * inlined with AVX2 or AVX-512 hashes about twice as fast, and every
 * byte of device data is hashed on both sides of a migration.  The
 * implementation is chosen once, at load, from what the CPU (and the
 * kernel, for the registers' state) supports.
 */
#ifndef VG_HASH_H
#define VG_HASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef uint64_t vg_hash_fn(const void *data, size_t len, uint64_t seed);

uint64_t vg_hash(const void *data, size_t len, uint64_t seed);

/* One implementation built in; usable says whether this CPU runs it. */
struct vg_hash_impl {
    const char *name; /* "avx512", "avx2" or "sse2" (libxxhash) */
    vg_hash_fn *fn;
    bool usable;
};

/* Every implementation built in, widest first (*@n of them). */
const struct vg_hash_impl *vg_hash_impls(size_t *n);
/* The name of the one vg_hash() uses. */
const char *vg_hash_impl_name(void);

#endif
