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

/*
 * The tree page hash (stream version 5): a page of @len bytes (a power of
 * two, at least 1 KiB) is cut into vg_hash_tree_pieces(@len) equal pieces
 * of at least 1 KiB, at most VG_TREE_PIECES; its hash is vg_hash() of the
 * array of its pieces' vg_hash() values as little-endian u64s, all with
 * @seed.  A page whose pieces changed is hashed again from those pieces
 * and the kept hashes of the others (vg_hash_tree_join()).  It hashes as
 * fast as vg_hash() of the whole page.  @piece_hash, unless NULL, gets the
 * pieces' hashes.
 */
#define VG_TREE_PIECES 64
unsigned vg_hash_tree_pieces(size_t len);
uint64_t vg_hash_tree(const void *page, size_t len, uint64_t seed,
                      uint64_t *piece_hash);
uint64_t vg_hash_tree_join(const uint64_t *piece_hash, unsigned n,
                           uint64_t seed);

/*
 * A running XXH3-64 of bytes fed in any pieces (the stream's digest, a
 * checksum over parts of a record): vg_digest_value() is exactly
 * XXH3_64bits_withSeed() of all that vg_digest_update() fed since
 * vg_digest_reset(), on vg_hash()'s implementation (libxxhash's own
 * streaming code runs at about half the speed).  vg_digest_new() returns
 * one reset with seed 0, NULL if out of memory.
 */
struct vg_digest;
struct vg_digest *vg_digest_new(void);
void vg_digest_free(struct vg_digest *d);
void vg_digest_reset(struct vg_digest *d, uint64_t seed);
void vg_digest_update(struct vg_digest *d, const void *data, size_t len);
uint64_t vg_digest_value(const struct vg_digest *d);

/* One implementation built in; usable says whether this CPU runs it.
 * The digest functions take an XXH3_state_t. */
struct vg_hash_impl {
    const char *name; /* "avx512", "avx2" or "sse2" (libxxhash) */
    vg_hash_fn *fn;
    void (*digest_reset)(void *state, uint64_t seed);
    void (*digest_update)(void *state, const void *data, size_t len);
    uint64_t (*digest_value)(const void *state);
    bool usable;
};

/* Every implementation built in, widest first (*@n of them). */
const struct vg_hash_impl *vg_hash_impls(size_t *n);
/* The name of the one vg_hash() uses. */
const char *vg_hash_impl_name(void);

#endif
