/*
 * test-hostile -- the defects of issue 13, each reproduced through a real
 * socket against the real vgpu-server by a raw vfio-user client that plays
 * a hostile QEMU (tests/qtest/vfu-client.h).  After each attack the
 * server must still be running and answer the next request, and where a
 * migration was under way it either goes on correctly or fails cleanly
 * with the source's VRAM and device intact.
 *
 *  - dirty-log-oob: REGION_DIRTY_LOG with one 64 MiB granule (nbits 1)
 *    and a bitmap word of all ones; the bits past nbits are not the
 *    client's and must not index past the tracking bitmaps (they did:
 *    SIGSEGV with 4 KiB pages, a silent heap overflow with 64 KiB ones).
 */
#include <sys/stat.h>
#include <sys/wait.h>

#include "vfu-client.h"

#define H_VRAM     ((uint64_t)64 << 20)
#define H_VRAM_ARG "64M"

/* ------------------------------------------------------ helpers */

static uint32_t dirty_log(struct conn *c, uint32_t region, uint32_t pgsize,
                          uint64_t off, uint64_t size, const uint64_t *bitmap,
                          size_t words)
{
    size_t len = sizeof(struct vfu_region_dirty_log) + words * 8;
    struct vfu_region_dirty_log d = {(uint32_t)len, region, pgsize, 0, off,
                                     size};
    g_autofree uint8_t *p = g_malloc(len);

    memcpy(p, &d, sizeof(d));
    memcpy(p + sizeof(d), bitmap, words * 8);
    return request(c, VFU_CMD_REGION_DIRTY_LOG, p, len);
}

/* Read the current phase of the stream until a read returns nothing. */
static void read_phase(struct conn *c, GByteArray *out)
{
    uint32_t got;

    do {
        g_assert_cmpuint(mig_data_read(c, VC_MAX_XFER, out, &got), ==, 0);
    } while (got);
}

/* Load @stream into a fresh server of the same geometry; its VRAM must
 * then equal @want. */
static void load_and_compare(const char *page_arg, const GByteArray *stream,
                             const uint8_t *want)
{
    g_autoptr(GByteArray) chunk = g_byte_array_new();
    struct conn c;
    struct sec s;
    uint8_t *vram;

    sec_start_opts(&s, "hostile-dst", H_VRAM_ARG, page_arg, NULL);
    conn_open_caps(&c, &s, VC_CAPS_EXT);
    vram = map_vram_size(&c, H_VRAM);
    g_assert_cmpuint(set_state(&c, MIG_STATE_STOP), ==, 0);
    g_assert_cmpuint(set_state(&c, MIG_STATE_RESUMING), ==, 0);
    for (guint off = 0; off < stream->len; off += VC_MAX_XFER) {
        guint n = MIN(VC_MAX_XFER, stream->len - off);
        g_byte_array_set_size(chunk, 0);
        g_byte_array_append(chunk, stream->data + off, n);
        g_assert_cmpuint(mig_data_write(&c, chunk), ==, 0);
    }
    g_assert_cmpuint(set_state(&c, MIG_STATE_STOP), ==, 0);
    g_assert_true(memcmp(vram, want, H_VRAM) == 0);
    munmap(vram, H_VRAM);
    conn_close(&c);
    sec_stop(&s);
}

/* ----------------------------------------------- REGION_DIRTY_LOG */

static void dirty_log_oob(const char *page_arg)
{
    const uint64_t ones = ~0ull;
    g_autoptr(GByteArray) stream = g_byte_array_new();
    g_autofree uint8_t *want = g_malloc(H_VRAM);
    struct conn c;
    struct sec s;
    uint8_t *vram;

    g_test_message("page size %s", page_arg);
    sec_start_opts(&s, "hostile-log", H_VRAM_ARG, page_arg, NULL);
    conn_open_caps(&c, &s, VC_CAPS_EXT);
    vram = map_vram_size(&c, H_VRAM);
    fill_pattern(vram, H_VRAM / 4, 7);
    g_assert_cmpuint(set_state(&c, MIG_STATE_PRE_COPY), ==, 0);
    read_phase(&c, stream);
    /* the input: nbits = 1, a word of all ones */
    g_assert_cmpuint(dirty_log(&c, VGPU_BAR_VRAM, 64u << 20, 0, H_VRAM, &ones,
                               1),
                     ==, 0);
    assert_serving(&c);
    /* the granule covers all of VRAM: a later write anywhere is sent */
    memset(vram + H_VRAM - 4096, 0x5a, 4096);
    g_assert_cmpuint(dirty_log(&c, VGPU_BAR_VRAM, 64u << 20, 0, H_VRAM, &ones,
                               1),
                     ==, 0);
    read_phase(&c, stream);
    g_assert_cmpuint(set_state(&c, MIG_STATE_STOP_COPY), ==, 0);
    read_phase(&c, stream);
    g_assert_cmpuint(set_state(&c, MIG_STATE_STOP), ==, 0);
    memcpy(want, vram, H_VRAM);
    g_assert_cmpuint(set_state(&c, MIG_STATE_RUNNING), ==, 0);
    assert_serving(&c);
    load_and_compare(page_arg, stream, want);
    munmap(vram, H_VRAM);
    conn_close(&c);
    sec_stop(&s);
}

static void test_dirty_log_oob_4k(void)
{
    dirty_log_oob("4K");
}

static void test_dirty_log_oob_64k(void)
{
    dirty_log_oob("64K");
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/hostile/dirty-log-oob/4k", test_dirty_log_oob_4k);
    g_test_add_func("/hostile/dirty-log-oob/64k", test_dirty_log_oob_64k);
    return g_test_run();
}
