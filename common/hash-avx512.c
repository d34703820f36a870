/*
 * hash-avx512.c -- XXH3-64, one-shot and running, inlined for AVX-512 (built
 * with -mavx512f; called only where the CPU has it, hash.c).
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "hash-impl.h"

HASH_IMPL_DECLARE(avx512);
HASH_IMPL_DEFINE(avx512)
