#include "model.h"

#include <string.h>

/* The 32-bit finalizer of a multiply-xorshift hash. */
static uint32_t fmix(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x7feb352du;
    h ^= h >> 15;
    h *= 0x846ca68bu;
    h ^= h >> 16;
    return h;
}

uint32_t vgg_mix(uint32_t a, uint32_t b, uint32_t c)
{
    return fmix(fmix(a * 0x9e3779b1u + b) ^ (c * 0x85ebca77u + 0x165667b1u));
}

uint32_t vgg_fill_pattern(uint32_t origin, uint32_t gen)
{
    uint32_t p = vgg_mix(origin, gen, 0xf111f111u);

    return p ? p : 1;
}

uint32_t vgg_float_bits(uint32_t aux, uint32_t gen)
{
    float f = (float)aux + 0.5f * (float)gen;
    uint32_t u;

    memcpy(&u, &f, sizeof(u));
    return u;
}

uint32_t vgg_cpu_word(uint32_t origin, uint32_t gen)
{
    return vgg_mix(origin, gen, 0xc0dec0deu) % VGG_PAGE_WORDS;
}

uint32_t vgg_cpu_stamp(uint32_t origin, uint32_t gen)
{
    /* Different from the FILL pattern of the page (a stamp must show). */
    return vgg_mix(origin, gen, 0x57a3057au) | 0x80000000u;
}

const char *vgg_kind_name(uint32_t kind)
{
    static const char *const names[VGG_KIND_COUNT] = {"zero", "fill",  "data",
                                                      "idx",  "float", "cpu"};

    return kind < VGG_KIND_COUNT ? names[kind] : "?";
}

bool vgg_page_uniform(const struct vgg_page *e, uint32_t *value)
{
    switch (e->kind) {
    case VGG_ZERO:
        *value = 0;
        return true;
    case VGG_FILL:
        *value = vgg_fill_pattern(e->origin, e->gen);
        return true;
    case VGG_FLOAT:
        *value = vgg_float_bits(e->aux, e->gen);
        return true;
    default:
        return false;
    }
}

uint32_t vgg_page_word(const struct vgg_page *e, uint32_t i)
{
    uint32_t v;

    if (vgg_page_uniform(e, &v)) {
        return v;
    }
    switch (e->kind) {
    case VGG_DATA:
        return vgg_mix(e->origin, e->gen, i);
    case VGG_IDX:
        return vgg_mix(e->origin, e->gen, i) % e->aux;
    case VGG_CPU:
        return i == vgg_cpu_word(e->origin, e->gen)
                   ? vgg_cpu_stamp(e->origin, e->gen)
                   : vgg_fill_pattern(e->origin, e->aux);
    default:
        return 0xdeadbeefu; /* unknown kind: never matches real data */
    }
}

void vgg_page_render(const struct vgg_page *e, uint32_t *buf)
{
    uint32_t v;

    if (vgg_page_uniform(e, &v)) {
        for (uint32_t i = 0; i < VGG_PAGE_WORDS; i++) {
            buf[i] = v;
        }
        return;
    }
    for (uint32_t i = 0; i < VGG_PAGE_WORDS; i++) {
        buf[i] = vgg_page_word(e, i);
    }
}

/* Fill @m for @page from the words of @actual that differ from @want. */
static void describe(uint64_t page, const volatile uint32_t *actual,
                     const uint32_t *want, struct vgg_mismatch *m)
{
    memset(m, 0, sizeof(*m));
    m->page = page;
    for (uint32_t i = 0; i < VGG_PAGE_WORDS; i++) {
        uint32_t a = actual[i];

        if (a != want[i]) {
            if (m->nwords++ == 0) {
                m->word = i;
                m->expected = want[i];
                m->actual = a;
            }
        }
    }
}

bool vgg_page_check(const struct vgg_page *e, uint64_t page,
                    const volatile void *actual, struct vgg_mismatch *m)
{
    const volatile uint64_t *a64 = actual;
    uint32_t want[VGG_PAGE_WORDS];
    uint32_t v;

    if (vgg_page_uniform(e, &v)) {
        uint64_t vv = ((uint64_t)v << 32) | v;
        uint64_t diff = 0;

        for (uint32_t i = 0; i < VGG_PAGE_WORDS / 2; i++) {
            diff |= a64[i] ^ vv;
        }
        if (!diff) {
            return true;
        }
        for (uint32_t i = 0; i < VGG_PAGE_WORDS; i++) {
            want[i] = v;
        }
    } else {
        vgg_page_render(e, want);
        if (e->kind == VGG_CPU) {
            /* Mostly uniform: compare 8 bytes at a time. */
            uint32_t f = vgg_fill_pattern(e->origin, e->aux);
            uint32_t w = vgg_cpu_word(e->origin, e->gen);
            uint64_t ff = ((uint64_t)f << 32) | f;
            uint64_t diff = 0;

            for (uint32_t i = 0; i < VGG_PAGE_WORDS / 2; i++) {
                if (i != w / 2) {
                    diff |= a64[i] ^ ff;
                }
            }
            if (!diff && ((const volatile uint32_t *)actual)[w] == want[w] &&
                ((const volatile uint32_t *)actual)[w ^ 1] == want[w ^ 1]) {
                return true;
            }
        } else {
            uint64_t diff = 0;

            for (uint32_t i = 0; i < VGG_PAGE_WORDS / 2; i++) {
                uint64_t w64;

                memcpy(&w64, want + 2 * i, sizeof(w64));
                diff |= a64[i] ^ w64;
            }
            if (!diff) {
                return true;
            }
        }
    }
    describe(page, actual, want, m);
    /* A page that changed between the two reads is still corrupt: the
     * device is idle whenever pages are checked. */
    if (m->nwords == 0) {
        m->nwords = 1;
        m->word = 0;
        m->expected = want[0];
        m->actual = ((const volatile uint32_t *)actual)[0];
    }
    return false;
}
