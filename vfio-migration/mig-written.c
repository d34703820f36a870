/*
 * mig-written.c -- which pieces of each page a source's stop-copy sends
 * (mig-written.h).
 */
#include "mig-written.h"

#include <stdlib.h>

#include "mig-int.h"

struct mig_written {
    uint64_t *cpu;     /* a mask a page: written since the last epoch */
    uint64_t *cpu_any; /* a bit a page: its cpu mask is not 0 */
    uint64_t *pass;    /* a mask a page: written since its last send */
    uint64_t *by_ref;  /* a bit a page: its last send went by reference */
    struct mig_written_sum in_pass, fresh; /* mig_written_in_pass(), _fresh() */
    uint64_t grown;
};

struct mig_written *mig_written_new(uint64_t npages)
{
    struct mig_written *w = calloc(1, sizeof(*w));
    uint64_t words = (npages + 63) / 64;

    if (!w) {
        return NULL;
    }
    /* Masks for whole bitmap words, as mig_written_merge() walks them. */
    w->cpu = calloc(words * 64, 8);
    w->cpu_any = calloc(words, 8);
    w->pass = calloc(words * 64, 8);
    w->by_ref = calloc(words, 8);
    if (!w->cpu || !w->cpu_any || !w->pass || !w->by_ref) {
        mig_written_free(w);
        return NULL;
    }
    return w;
}

void mig_written_free(struct mig_written *w)
{
    if (w) {
        free(w->cpu);
        free(w->cpu_any);
        free(w->pass);
        free(w->by_ref);
        free(w);
    }
}

uint64_t mig_written_touched(uint64_t page, uint32_t page_size, uint64_t off,
                             uint64_t len)
{
    uint64_t piece = page_size / MIG_PAGE_PIECES, base = page * page_size;
    uint64_t from = off > base ? off - base : 0;
    uint64_t to = off + len < base + page_size ? off + len - base : page_size;
    unsigned first, last;

    if (len == 0 || off >= base + page_size || off + len <= base) {
        return 0;
    }
    first = (unsigned)(from / piece);
    last = (unsigned)((to - 1) / piece);
    return (last == 63 ? ~0ull : (2ull << last) - 1) & (~0ull << first);
}

/* Add (@sign 1) or take (-1) a page whose send needs pieces @mask. */
static void sum_put(struct mig_written_sum *s, uint64_t mask, int sign)
{
    if (mask == MIG_WRITTEN_WHOLE) {
        s->whole += (uint64_t)(int64_t)sign;
    } else if (mask) {
        s->parts += (uint64_t)(int64_t)sign;
        s->pieces += (uint64_t)(int64_t)sign * __builtin_popcountll(mask);
    }
}

/* The pieces a stop-copy beginning now sends of page @page. */
static uint64_t pending(const struct mig_written *w, uint64_t page,
                        bool in_pass)
{
    return in_pass ? w->pass[page] | w->cpu[page] : w->cpu[page];
}

static void add_cpu(struct mig_written *w, uint64_t page, uint64_t mask,
                    bool in_pass)
{
    struct mig_written_sum *s = in_pass ? &w->in_pass : &w->fresh;
    uint64_t old = pending(w, page, in_pass), now;

    w->cpu[page] |= mask;
    mig_bit_put(w->cpu_any, page, w->cpu[page] != 0);
    now = pending(w, page, in_pass);
    if (now != old) {
        sum_put(s, old, -1);
        sum_put(s, now, 1);
        w->grown +=
            (uint64_t)(__builtin_popcountll(now) - __builtin_popcountll(old));
    }
}

void mig_written_cpu(struct mig_written *w, uint64_t page, uint64_t mask,
                     bool in_pass)
{
    add_cpu(w, page, mask, in_pass);
}

void mig_written_whole(struct mig_written *w, uint64_t page, bool in_pass)
{
    add_cpu(w, page, MIG_WRITTEN_WHOLE, in_pass);
}

/* Page @p of an epoch's merge, dirty in it or written by the guest CPU
 * since the last one: @in_pass before it, @dirty in the epoch.  Its
 * pieces written since the last epoch start over. */
static void merge_page(struct mig_written *w, uint64_t p, bool in_pass,
                       bool dirty, bool parts)
{
    uint64_t cpu = w->cpu[p];

    sum_put(in_pass ? &w->in_pass : &w->fresh, pending(w, p, in_pass), -1);
    w->cpu[p] = 0;
    if (dirty) {
        uint64_t now = parts && cpu ? cpu : MIG_WRITTEN_WHOLE;

        w->pass[p] = in_pass ? w->pass[p] | now : now;
    }
    if (in_pass || dirty) {
        sum_put(&w->in_pass, w->pass[p], 1);
    }
}

void mig_written_merge(struct mig_written *w, const uint64_t *dirty,
                       const uint64_t *pass, uint64_t w0, uint64_t w1,
                       bool parts)
{
    for (uint64_t i = w0; i < w1; i++) {
        /* A page neither dirty nor written keeps what it has. */
        uint64_t visit = dirty[i] | w->cpu_any[i];

        w->cpu_any[i] = 0;
        while (visit) {
            unsigned b = (unsigned)__builtin_ctzll(visit);
            uint64_t p = i * 64 + b;

            visit &= visit - 1;
            merge_page(w, p, pass[i] >> b & 1, dirty[i] >> b & 1, parts);
        }
    }
}

uint64_t mig_written_pass(const struct mig_written *w, uint64_t page)
{
    return w->pass[page];
}

void mig_written_leave(struct mig_written *w, uint64_t page)
{
    sum_put(&w->in_pass, pending(w, page, true), -1);
    w->cpu[page] = 0;
    mig_bit_put(w->cpu_any, page, false);
}

struct mig_written_sum mig_written_in_pass(const struct mig_written *w)
{
    return w->in_pass;
}

struct mig_written_sum mig_written_fresh(const struct mig_written *w)
{
    return w->fresh;
}

uint64_t mig_written_grown(const struct mig_written *w)
{
    return w->grown;
}

void mig_written_sent(struct mig_written *w, uint64_t page, uint64_t n,
                      bool by_ref)
{
    for (uint64_t p = page; p < page + n; p++) {
        mig_bit_put(w->by_ref, p, by_ref);
    }
}

bool mig_written_by_ref(const struct mig_written *w, uint64_t page)
{
    return mig_bit(w->by_ref, page);
}
