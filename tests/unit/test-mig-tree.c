/*
 * Unit tests of the kept hashes of pages' pieces (vfio-migration/
 * mig-tree.h): a page hashed whole has a version 5 stream's page hash;
 * one whose masked pieces changed, hashed again from those, has the same
 * hash as hashed whole, with 64 KiB pages (a mask bit a tree piece) and 4
 * KiB ones (16 mask bits a tree piece); a page never hashed, or forgotten,
 * is hashed whole whatever the mask says.
 */
#include <glib.h>
#include <string.h>

#include "vfio-migration/mig-stream.h"
#include "vfio-migration/mig-tree.h"

#define NPAGES 3u

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
    struct mig_tree *t = mig_tree_new(NPAGES, ps);
    uint8_t *page = vram + ps;

    g_assert_nonnull(t);
    fill(vram, NPAGES * ps);
    g_assert_cmphex(mig_tree_hash(t, 1, page), ==, whole(page, ps));
    /* pieces 0, 9 and 63 change, and the mask says so */
    page[5] ^= 1;
    page[9 * piece + 3] ^= 2;
    page[ps - 1] ^= 4;
    g_assert_cmphex(mig_tree_rehash(t, 1, page, 1ull | 1ull << 9 | 1ull << 63),
                    ==, whole(page, ps));
    /* a change the mask does not name stays unseen: the kept hash */
    page[20 * piece] ^= 8;
    g_assert_cmphex(mig_tree_rehash(t, 1, page, 1), !=, whole(page, ps));
    mig_tree_forget(t, 1);
    g_assert_cmphex(mig_tree_rehash(t, 1, page, 0), ==, whole(page, ps));
    /* page 2 was never hashed: whole */
    g_assert_cmphex(mig_tree_rehash(t, 2, vram + 2 * ps, 1ull << 5), ==,
                    whole(vram + 2 * ps, ps));
    mig_tree_free(t);
}

static void test_rehash_64k(void)
{
    rehash_sizes(64u << 10);
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
    return g_test_run();
}
