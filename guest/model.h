/*
 * model.h -- what vgpu-guest expects in every page of VRAM.
 *
 * The model splits VRAM into 4 KiB pages and keeps one small entry per
 * page: a kind, a generation and two parameters.  The expected content of
 * a page is a pure function of its entry, so the whole model is a few
 * bytes per page and any page can be checked at any time:
 *   ZERO   every word 0 (never written);
 *   FILL   every word vgg_fill_pattern(origin, gen) (the FILL engine);
 *   DATA   word i = vgg_mix(origin, gen, i) (uploaded by DMA);
 *   IDX    word i = vgg_mix(origin, gen, i) % aux (SCATTER_ADD indices);
 *   FLOAT  every word the float32 aux + 0.5 * gen (AXPY, SCATTER_ADD);
 *   CPU    the FILL pattern (origin, aux), except word
 *          vgg_cpu_word(origin, gen) = vgg_cpu_stamp(origin, gen)
 *          (written by the guest CPU through BAR2).
 * "origin" is the page whose (page, generation) produced the content: the
 * page itself, or the source page of a COPY, which copies the entry.
 */
#ifndef VGG_MODEL_H
#define VGG_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#define VGG_PAGE_SIZE  4096u
#define VGG_PAGE_WORDS (VGG_PAGE_SIZE / 4u)
/* FLOAT pages stay exact while aux + 0.5 * gen < 2^22. */
#define VGG_FLOAT_GEN_MAX (1u << 21)
#define VGG_FLOAT_AUX_MAX (1u << 12)

enum vgg_kind {
    VGG_ZERO,
    VGG_FILL,
    VGG_DATA,
    VGG_IDX,
    VGG_FLOAT,
    VGG_CPU,
    VGG_KIND_COUNT
};

struct vgg_page {
    uint32_t kind; /* enum vgg_kind */
    uint32_t origin;
    uint32_t gen;
    uint32_t aux;
};

/* One differing page found by a check. */
struct vgg_mismatch {
    uint64_t page;
    uint32_t word;     /* first differing word */
    uint32_t expected; /* its expected and actual value */
    uint32_t actual;
    uint32_t nwords; /* differing words in the page */
};

/* A 32-bit mix of three values (a fixed, well-spread hash). */
uint32_t vgg_mix(uint32_t a, uint32_t b, uint32_t c);
/* The FILL pattern of (@origin, @gen); never 0. */
uint32_t vgg_fill_pattern(uint32_t origin, uint32_t gen);
/* The bits of float32 @aux + 0.5 * @gen. */
uint32_t vgg_float_bits(uint32_t aux, uint32_t gen);
/* Word index and value of the CPU stamp of (@origin, @gen). */
uint32_t vgg_cpu_word(uint32_t origin, uint32_t gen);
uint32_t vgg_cpu_stamp(uint32_t origin, uint32_t gen);

const char *vgg_kind_name(uint32_t kind);

/* Expected word @i of a page with entry @e. */
uint32_t vgg_page_word(const struct vgg_page *e, uint32_t i);
/* The whole expected page into @buf (VGG_PAGE_WORDS words). */
void vgg_page_render(const struct vgg_page *e, uint32_t *buf);
/* Whether the page has one value in every word (ZERO, FILL, FLOAT); that
 * value in *@value. */
bool vgg_page_uniform(const struct vgg_page *e, uint32_t *value);

/*
 * Compare page @page with entry @e against @actual (VGG_PAGE_WORDS words,
 * e.g. the page through the BAR2 mapping, read with 8-byte loads).  Returns
 * true if equal; else fills @m.
 */
bool vgg_page_check(const struct vgg_page *e, uint64_t page,
                    const volatile void *actual, struct vgg_mismatch *m);

#endif
