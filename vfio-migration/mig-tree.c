/*
 * mig-tree.c -- see mig-tree.h.
 */
#include "mig-tree.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/hash.h"
#include "common/populate.h"
#include "mig-stream.h"

struct mig_tree {
    uint32_t page_size;
    unsigned pieces; /* vg_hash_tree_pieces(page_size) */
    uint64_t npages;
    uint64_t *kept; /* @pieces hashes a page, mapped on its own */
    size_t kept_bytes;
    uint8_t *valid; /* a byte a page (no two threads share one): kept */
    struct vg_populate *populate; /* mig_tree_new(@populate_now), or NULL */
};

struct mig_tree *mig_tree_new(uint64_t npages, uint32_t page_size,
                              bool populate_now)
{
    struct mig_tree *t = calloc(1, sizeof(*t));
    void *kept;

    if (!t) {
        return NULL;
    }
    t->page_size = page_size;
    t->pieces = vg_hash_tree_pieces(page_size);
    t->npages = npages;
    t->kept_bytes = (size_t)npages * t->pieces * 8;
    kept = mmap(NULL, t->kept_bytes, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    t->kept = kept == MAP_FAILED ? NULL : kept;
    t->valid = calloc(npages, 1);
    if (!t->kept || !t->valid) {
        mig_tree_free(t);
        return NULL;
    }
    if (populate_now) {
        vg_populate_hint((uint8_t *)t->kept, t->kept_bytes, "kept piece hashes",
                         &t->populate);
    }
    return t;
}

void mig_tree_free(struct mig_tree *t)
{
    if (t) {
        vg_populate_free(t->populate);
        if (t->kept) {
            munmap(t->kept, t->kept_bytes);
        }
        free(t->valid);
        free(t);
    }
}

void mig_tree_reset(struct mig_tree *t)
{
    memset(t->valid, 0, t->npages);
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
