/*
 * Unit tests of the kept hashes of pages' pieces (vfio-migration/
 * mig-tree.h): a page hashed whole has a version 5 stream's page hash;
 * one whose masked pieces changed, hashed again from those, has the same
 * hash as hashed whole, with 64 KiB pages (a mask bit a tree piece) and 4
 * KiB ones (16 mask bits a tree piece); a page never hashed, or forgotten,
 * is hashed whole whatever the mask says; the changed pieces' hashes a
 * caller gives stand for them with 64 KiB pages, and are not taken with 4
 * KiB ones (a mask piece is not a tree piece there).
 */
#include <glib.h>
#include <string.h>

#include "common/hash.h"
#include "vfio-migration/mig-stream.h"
#include "vfio-migration/mig-tree.h"

#define NPAGES 4u

static uint64_t whole(const uint8_t *page, uint32_t ps)
{
    return mig_stream_page_hash(5, page, ps, NULL);
}

static void fill(uint8_t *b, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        b[i] = (uint8_t)(i * 37 + (i >> 10));
    }
}

static void rehash_sizes(uint32_t ps)
{
    uint32_t piece = ps / MIG_PAGE_PIECES;
    g_autofree uint8_t *vram = g_malloc(NPAGES * ps);
    struct mig_tree *t = mig_tree_new(NPAGES, ps, false);
    uint8_t *page = vram + ps;

    g_assert_nonnull(t);
    fill(vram, NPAGES * ps);
    g_assert_cmphex(mig_tree_hash(t, 1, page), ==, whole(page, ps));
    /* pieces 0, 9 and 63 change, and the mask says so */
    page[5] ^= 1;
    page[9 * piece + 3] ^= 2;
    page[ps - 1] ^= 4;
    g_assert_cmphex(
        mig_tree_rehash(t, 1, page, 1ull | 1ull << 9 | 1ull << 63, NULL), ==,
        whole(page, ps));
    /* a change the mask does not name stays unseen: the kept hash */
    page[20 * piece] ^= 8;
    g_assert_cmphex(mig_tree_rehash(t, 1, page, 1, NULL), !=, whole(page, ps));
    mig_tree_forget(t, 1);
    g_assert_cmphex(mig_tree_rehash(t, 1, page, 0, NULL), ==, whole(page, ps));
    /* page 2 was never hashed: whole */
    g_assert_cmphex(mig_tree_rehash(t, 2, vram + 2 * ps, 1ull << 5, NULL), ==,
                    whole(vram + 2 * ps, ps));
    /* a new session forgets every page: a change no mask names is seen */
    mig_tree_hash(t, 3, vram + 3 * ps);
    vram[3 * ps + 20 * piece] ^= 16;
    mig_tree_reset(t);
    g_assert_cmphex(mig_tree_rehash(t, 3, vram + 3 * ps, 0, NULL), ==,
                    whole(vram + 3 * ps, ps));
    mig_tree_free(t);
}

/* Pieces 3 and 40 of page 1 change; their hashes are given. */
static void given_sizes(uint32_t ps)
{
    uint32_t piece = ps / MIG_PAGE_PIECES;
    g_autofree uint8_t *vram = g_malloc(NPAGES * ps);
    struct mig_tree *t = mig_tree_new(NPAGES, ps, true); /* populated */
    uint8_t *page = vram + ps;
    uint64_t given[2], bogus[2] = {1, 2};

    g_assert_nonnull(t);
    fill(vram, NPAGES * ps);
    mig_tree_hash(t, 1, page);
    page[3 * piece] ^= 1;
    page[40 * piece + piece - 1] ^= 2;
    given[0] = vg_hash(page + 3 * piece, piece, 0);
    given[1] = vg_hash(page + 40 * piece, piece, 0);
    g_assert_cmphex(mig_tree_rehash(t, 1, page, 1ull << 3 | 1ull << 40, given),
                    ==, whole(page, ps));
    /* given hashes are taken as they are (64 KiB), or not at all (4 KiB) */
    if (ps >= 64u << 10) {
        g_assert_cmphex(
            mig_tree_rehash(t, 1, page, 1ull << 3 | 1ull << 40, bogus), !=,
            whole(page, ps));
    } else {
        g_assert_cmphex(
            mig_tree_rehash(t, 1, page, 1ull << 3 | 1ull << 40, bogus), ==,
            whole(page, ps));
    }
    /* a page never hashed is hashed whole, given hashes or not */
    g_assert_cmphex(mig_tree_rehash(t, 2, vram + 2 * ps, 1ull << 3, bogus), ==,
                    whole(vram + 2 * ps, ps));
    mig_tree_free(t);
}

static void test_rehash_64k(void)
{
    rehash_sizes(64u << 10);
}

static void test_given_64k(void)
{
    given_sizes(64u << 10);
}

static void test_given_4k(void)
{
    given_sizes(4096);
}

/* 4 KiB pages: 64-byte mask pieces, 1 KiB tree pieces. */
static void test_rehash_4k(void)
{
    rehash_sizes(4096);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/mig/tree/rehash-64k", test_rehash_64k);
    g_test_add_func("/mig/tree/rehash-4k", test_rehash_4k);
    g_test_add_func("/mig/tree/given-64k", test_given_64k);
    g_test_add_func("/mig/tree/given-4k", test_given_4k);
    return g_test_run();
}
