/*
 * mig-tree.h -- the kept hashes of every page's pieces, for the page hash
 * of a version 5 stream (vg_hash_tree(), seed 0), so that a page whose
 * pieces changed is hashed again from those pieces alone.
 *
 * mig_tree_hash() hashes a page whole and keeps its pieces' hashes;
 * mig_tree_rehash() takes again only the pieces a PAGE_PIECES mask
 * (MIG_PAGE_PIECES pieces a page) touches, or their hashes where a
 * caller has them, and joins them with the kept ones, where they are kept (else
 * it hashes the page whole).  A page written any other way must be forgotten
 * (mig_tree_forget()).
 *
 * A device keeps one tree for all its sessions (mig_session_tree()): its
 * VRAM / 128 bytes of hashes are allocated and zeroed by the kernel at
 * first touch, which would fall inside the first pass's stream, so
 * mig_tree_new() can populate them at once (--prealloc) and
 * mig_tree_reset() forgets every page for the next session.
 *
 * Threads: calls for different pages may run at once; one page's calls
 * one at a time.
 */
#ifndef MIG_TREE_H
#define MIG_TREE_H

#include <stdbool.h>
#include <stdint.h>

struct mig_tree;

/* For @npages pages of @page_size bytes, nothing kept; with
 * @populate_now, a thread backs the kept hashes with memory (logged).
 * NULL if out of memory. */
struct mig_tree *mig_tree_new(uint64_t npages, uint32_t page_size,
                              bool populate_now);
void mig_tree_free(struct mig_tree *t);
/* Forget every page (a new session); not while others use @t. */
void mig_tree_reset(struct mig_tree *t);

/* The page hash of page @page, whose bytes are at @data. */
uint64_t mig_tree_hash(struct mig_tree *t, uint64_t page, const uint8_t *data);
/* The same, where only pieces @mask of it changed since its pieces'
 * hashes were kept.  @piece_hash, if not NULL: the hashes of those pieces
 * (XXH3-64, seed 0, in bit order), taken in place of hashing them where a
 * tree piece is a PAGE_PIECES piece (64 KiB pages). */
uint64_t mig_tree_rehash(struct mig_tree *t, uint64_t page, const uint8_t *data,
                         uint64_t mask, const uint64_t *piece_hash);
/* Page @page changed some other way: nothing of it is kept. */
void mig_tree_forget(struct mig_tree *t, uint64_t page);

#endif
