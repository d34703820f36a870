/*
 * hash-avx2.c -- XXH3-64, one-shot and running, inlined for AVX2 (built
 * with -mavx2; called only where the CPU has it, hash.c).
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "hash-impl.h"

HASH_IMPL_DECLARE(avx2);
HASH_IMPL_DEFINE(avx2)
