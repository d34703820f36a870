/*
 * nt-copy.h -- copies that go around the CPU's caches.
 *
 * A store to a line that is not in the cache reads the line in first.
 * Where the bytes copied are not read again soon (a migration's pieces
 * landing all over VRAM at the destination) that read is wasted: on the
 * 2-core host `build/dt-bench` ("pieces") copied a 1 KiB piece to a
 * scattered place in 256 MiB in 310 ns with memcpy() and 174 ns with
 * AVX-512 non-temporal stores.
 *
 * vg_nt_copy() copies @len bytes from @src to @dst (not overlapping):
 * non-temporal stores of the widest vector unit the CPU has (AVX-512F,
 * AVX2, else SSE2) for the whole 64-byte lines of @dst, memcpy() for the
 * rest.  Such stores are weakly ordered: the thread that made them calls
 * vg_nt_fence() once, after its last vg_nt_copy(), before it lets another
 * thread know the bytes are there: a fence after every 1 KiB copy took
 * back most of the gain (docs/dirty-tracking.md), one per batch does not.
 */
#ifndef VG_NT_COPY_H
#define VG_NT_COPY_H

#include <stddef.h>

void vg_nt_copy(void *dst, const void *src, size_t len);
void vg_nt_fence(void);

/* The vector unit vg_nt_copy() uses: "avx512", "avx2" or "sse2". */
const char *vg_nt_copy_unit(void);
/* Use @unit from now on (tests, benchmarks; not while others copy): 0, or
 * -ENOTSUP where the CPU lacks it or there is no such unit. */
int vg_nt_copy_use(const char *unit);

#endif
