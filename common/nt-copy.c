/*
 * nt-copy.c -- see nt-copy.h.  One function per vector unit, each built
 * for its unit by a target attribute, chosen once at load.
 */
#include "nt-copy.h"

#include <errno.h>
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define LINE 64u

typedef void lines_fn(uint8_t *dst, const uint8_t *src, size_t lines);

__attribute__((target("avx512f"))) static void
lines_avx512(uint8_t *dst, const uint8_t *src, size_t lines)
{
    for (size_t i = 0; i < lines; i++, dst += LINE, src += LINE) {
        _mm512_stream_si512((void *)dst, _mm512_loadu_si512(src));
    }
}

__attribute__((target("avx2"))) static void
lines_avx2(uint8_t *dst, const uint8_t *src, size_t lines)
{
    for (size_t i = 0; i < lines; i++, dst += LINE, src += LINE) {
        __m256i a = _mm256_loadu_si256((const __m256i *)src);
        __m256i b = _mm256_loadu_si256((const __m256i *)(src + 32));

        _mm256_stream_si256((__m256i *)dst, a);
        _mm256_stream_si256((__m256i *)(dst + 32), b);
    }
}

static void lines_sse2(uint8_t *dst, const uint8_t *src, size_t lines)
{
    for (size_t i = 0; i < lines; i++, dst += LINE, src += LINE) {
        for (unsigned j = 0; j < LINE; j += 16) {
            _mm_stream_si128((__m128i *)(dst + j),
                             _mm_loadu_si128((const __m128i *)(src + j)));
        }
    }
}

static struct unit {
    const char *name;
    lines_fn *fn;
    bool usable;
} units[] = {
    {"avx512", lines_avx512, false},
    {"avx2", lines_avx2, false},
    {"sse2", lines_sse2, true}, /* baseline x86-64 */
};

static const struct unit *chosen = &units[2];

/* Before main(), so vg_nt_copy() needs no lock: the widest usable.
 * __builtin_cpu_supports() also checks that the kernel saves the
 * registers. */
__attribute__((constructor)) static void choose(void)
{
    __builtin_cpu_init();
    units[0].usable = __builtin_cpu_supports("avx512f");
    units[1].usable = __builtin_cpu_supports("avx2");
    chosen = units[0].usable ? &units[0] : units[1].usable ? &units[1] : chosen;
}

void vg_nt_copy(void *dst, const void *src, size_t len)
{
    uint8_t *d = dst;
    const uint8_t *s = src;
    size_t head = (LINE - (uintptr_t)d % LINE) % LINE;

    if (len < head + LINE) {
        memcpy(d, s, len);
        return;
    }
    memcpy(d, s, head);
    chosen->fn(d + head, s + head, (len - head) / LINE);
    d += len - (len - head) % LINE;
    s += len - (len - head) % LINE;
    memcpy(d, s, (len - head) % LINE);
}

void vg_nt_fence(void)
{
    _mm_sfence();
}

const char *vg_nt_copy_unit(void)
{
    return chosen->name;
}

int vg_nt_copy_use(const char *name)
{
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(units[i].name, name) == 0 && units[i].usable) {
            chosen = &units[i];
            return 0;
        }
    }
    return -ENOTSUP;
}
