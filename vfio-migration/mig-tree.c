/*
 * mig-tree.c -- see mig-tree.h.
 */
#include "mig-tree.h"

#include <stdbool.h>
#include <stdlib.h>

#include "common/hash.h"
#include "mig-stream.h"

struct mig_tree {
    uint32_t page_size;
    unsigned pieces; /* vg_hash_tree_pieces(page_size) */
    uint64_t *kept;  /* @pieces hashes a page */
    uint8_t *valid;  /* a byte a page (no two threads share one): kept */
};

struct mig_tree *mig_tree_new(uint64_t npages, uint32_t page_size)
{
    struct mig_tree *t = calloc(1, sizeof(*t));

    if (!t) {
        return NULL;
    }
    t->page_size = page_size;
    t->pieces = vg_hash_tree_pieces(page_size);
    t->kept = calloc(npages, (size_t)t->pieces * 8);
    t->valid = calloc(npages, 1);
    if (!t->kept || !t->valid) {
        mig_tree_free(t);
        return NULL;
    }
    return t;
}

void mig_tree_free(struct mig_tree *t)
{
    if (t) {
        free(t->kept);
        free(t->valid);
        free(t);
    }
}

uint64_t mig_tree_hash(struct mig_tree *t, uint64_t page, const uint8_t *data)
{
    uint64_t h =
        vg_hash_tree(data, t->page_size, 0, t->kept + page * t->pieces);

    t->valid[page] = true;
    return h;
}

/* Whether tree piece @j covers a piece of @mask: each covers
 * MIG_PAGE_PIECES / pieces of them. */
static bool piece_touched(const struct mig_tree *t, unsigned j, uint64_t mask)
{
    unsigned per = MIG_PAGE_PIECES / t->pieces;

    return per >= 64 ? mask != 0 : (mask >> (j * per)) & ((1ull << per) - 1);
}

uint64_t mig_tree_rehash(struct mig_tree *t, uint64_t page, const uint8_t *data,
                         uint64_t mask, const uint64_t *piece_hash)
{
    uint64_t *kept = t->kept + page * t->pieces;
    uint32_t piece = t->page_size / t->pieces;

    if (!t->valid[page]) {
        return mig_tree_hash(t, page, data);
    }
    if (piece_hash && t->pieces == MIG_PAGE_PIECES) {
        for (uint64_t left = mask; left; left &= left - 1) {
            kept[__builtin_ctzll(left)] = *piece_hash++;
        }
        return vg_hash_tree_join(kept, t->pieces, 0);
    }
    for (unsigned j = 0; j < t->pieces; j++) {
        if (piece_touched(t, j, mask)) {
            kept[j] = vg_hash(data + (size_t)j * piece, piece, 0);
        }
    }
    return vg_hash_tree_join(kept, t->pieces, 0);
}

void mig_tree_forget(struct mig_tree *t, uint64_t page)
{
    t->valid[page] = false;
}
