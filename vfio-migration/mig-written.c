/*
 * mig-written.c -- which pieces of each page a source's stop-copy sends
 * (mig-written.h).
 */
#include "mig-written.h"

#include <stdlib.h>
#include <string.h>

#include "mig-int.h"

struct mig_written {
    uint64_t *cpu;    /* a mask a page: written since the last epoch */
    uint64_t *pass;   /* a mask a page: written since its last send */
    uint64_t *by_ref; /* a bit a page: its last send went by reference */
};

struct mig_written *mig_written_new(uint64_t npages)
{
    struct mig_written *w = calloc(1, sizeof(*w));
    uint64_t words = (npages + 63) / 64;

    if (!w) {
        return NULL;
    }
    /* Masks for whole bitmap words: mig_written_merge() clears by word. */
    w->cpu = calloc(words * 64, 8);
    w->pass = calloc(words * 64, 8);
    w->by_ref = calloc(words, 8);
    if (!w->cpu || !w->pass || !w->by_ref) {
        mig_written_free(w);
        return NULL;
    }
    return w;
}

void mig_written_free(struct mig_written *w)
{
    if (w) {
        free(w->cpu);
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

void mig_written_cpu(struct mig_written *w, uint64_t page, uint64_t mask)
{
    w->cpu[page] |= mask;
}

void mig_written_whole(struct mig_written *w, uint64_t page)
{
    w->cpu[page] = MIG_WRITTEN_WHOLE;
}

void mig_written_merge(struct mig_written *w, const uint64_t *dirty,
                       const uint64_t *pass, uint64_t w0, uint64_t w1,
                       bool parts)
{
    for (uint64_t i = w0; i < w1; i++) {
        for (uint64_t d = dirty[i]; d; d &= d - 1) {
            uint64_t p = i * 64 + (uint64_t)__builtin_ctzll(d);
            uint64_t now = parts && w->cpu[p] ? w->cpu[p] : MIG_WRITTEN_WHOLE;

            w->pass[p] = mig_bit(pass, p) ? w->pass[p] | now : now;
        }
        memset(&w->cpu[i * 64], 0, 64 * 8);
    }
}

uint64_t mig_written_pass(const struct mig_written *w, uint64_t page)
{
    return w->pass[page];
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
