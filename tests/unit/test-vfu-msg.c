/* Unit tests of vfu-msg and vfu-caps: parsing, validation, encoding. */
#include <errno.h>
#include <glib.h>
#include <linux/vfio.h>
#include <string.h>

#include "vfio-user/vfu-mig-msg.h"
#include "vfio-user/vfu-msg.h"

static const uint64_t region_size[9] = {0x4000, 0, 0x100000, 0, 0, 0, 0, 256};
static const uint32_t irq_count[3] = {1, 0, 2};
static const struct vfu_limits lim = {
    .max_msg_size = 4096,
    .max_xfer = 1024,
    .num_regions = 9,
    .region_size = region_size,
    .num_irqs = 3,
    .irq_count = irq_count,
    .dma_pgsize = 4096,
};

static void test_hdr(void)
{
    struct vfu_hdr h = {.id = 7, .command = VFU_CMD_REGION_READ, .size = 32};
    struct vfu_hdr r;
    struct vg_error err;

    g_assert_cmpint(vfu_hdr_check(&h, &lim, &err), ==, 0);
    h.size = 15; /* shorter than the header */
    g_assert_cmpint(vfu_hdr_check(&h, &lim, &err), ==, -EINVAL);
    g_assert_nonnull(strstr(err.msg, "smaller than the header"));
    h.size = 4097; /* oversized */
    g_assert_cmpint(vfu_hdr_check(&h, &lim, &err), ==, -E2BIG);
    h.size = 16;
    h.flags = VFU_FLAG_REPLY;
    g_assert_cmpint(vfu_hdr_check(&h, &lim, &err), ==, -EINVAL);
    h.flags = 0x100; /* unknown flag */
    g_assert_cmpint(vfu_hdr_check(&h, &lim, &err), ==, -EINVAL);
    h.flags = VFU_FLAG_ERROR;
    g_assert_cmpint(vfu_hdr_check(&h, &lim, &err), ==, -EINVAL);
    h.flags = VFU_FLAG_NO_REPLY;
    g_assert_cmpint(vfu_hdr_check(&h, &lim, &err), ==, 0);

    vfu_hdr_reply(&h, 40, 0, &r);
    g_assert_cmpuint(r.id, ==, 7);
    g_assert_cmpuint(r.size, ==, 56);
    g_assert_cmpuint(r.flags, ==, VFU_FLAG_REPLY);
    vfu_hdr_reply(&h, 40, EINVAL, &r);
    g_assert_cmpuint(r.size, ==, 16);
    g_assert_cmpuint(r.flags, ==, VFU_FLAG_REPLY | VFU_FLAG_ERROR);
    g_assert_cmpuint(r.error, ==, EINVAL);
    g_assert_cmpstr(vfu_cmd_name(VFU_CMD_DMA_MAP), ==, "DMA_MAP");
    g_assert_cmpstr(vfu_cmd_name(999), ==, "unknown");
}

static size_t version_msg(uint8_t *buf, const char *json)
{
    struct vfu_version v = {0, 0};

    memcpy(buf, &v, sizeof(v));
    strcpy((char *)buf + sizeof(v), json);
    return sizeof(v) + strlen(json) + 1;
}

static void test_version(void)
{
    uint8_t buf[512];
    struct vfu_version_req req;
    struct vg_error err;
    size_t len;

    len = version_msg(buf, "{\"capabilities\":{\"max_msg_fds\":16,"
                           "\"migration\":{\"pgsize\":4096},"
                           "\"pgsizes\":4096,\"write_multiple\":true}}");
    g_assert_cmpint(vfu_parse_version(buf, len, &req, &err), ==, 0);
    g_assert_true(req.caps.present[VFU_CAP_MAX_MSG_FDS]);
    g_assert_cmpuint(req.caps.value[VFU_CAP_MAX_MSG_FDS], ==, 16);
    g_assert_true(req.caps.present[VFU_CAP_PGSIZES]);
    g_assert_false(req.caps.present[VFU_CAP_MAX_XFER]);
    /* no JSON at all is fine */
    g_assert_cmpint(vfu_parse_version(buf, 4, &req, &err), ==, 0);
    g_assert_cmpint(vfu_parse_version(buf, 3, &req, &err), ==, -EINVAL);
    /* not NUL-terminated */
    g_assert_cmpint(vfu_parse_version(buf, len - 1, &req, &err), ==, -EINVAL);
    len = version_msg(buf, "{\"capabilities\":{\"max_msg_fds\":-1}}");
    g_assert_cmpint(vfu_parse_version(buf, len, &req, &err), ==, -EINVAL);
    g_assert_nonnull(strstr(err.msg, "max_msg_fds"));
    len = version_msg(buf, "{\"capabilities\":{\"pgsizes\":4096}");
    g_assert_cmpint(vfu_parse_version(buf, len, &req, &err), ==, -EINVAL);
    len = version_msg(buf, "{} x");
    g_assert_cmpint(vfu_parse_version(buf, len, &req, &err), ==, -EINVAL);
    len = version_msg(
        buf, "[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]");
    g_assert_cmpint(vfu_parse_version(buf, len, &req, &err), ==, -EINVAL);
    len = version_msg(
        buf, "{\"a\":[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]}");
    g_assert_cmpint(vfu_parse_version(buf, len, &req, &err), ==, -EINVAL);
    g_assert_nonnull(strstr(err.msg, "nesting"));
}

static void test_caps_format(void)
{
    struct vfu_caps client = {.present = {true, false, true, false}};
    struct vfu_caps ours = {.present = {true, true, true, true},
                            .value = {8, 1024, 4096, 10}};
    char buf[128];
    struct vg_error err;
    int n;

    n = vfu_caps_format(&client, &ours, buf, sizeof(buf), &err);
    g_assert_cmpstr(buf, ==,
                    "{\"capabilities\":{\"max_msg_fds\":8,\"pgsizes\":4096}}");
    g_assert_cmpint(n, ==, (int)strlen(buf) + 1);
    g_assert_cmpint(vfu_caps_format(&client, &ours, buf, 20, &err), ==,
                    -ENOSPC);
}

/* The "migration" object: answered with the members proposed; the
 * precopy_info, region_dirty_log, data_shm, postcopy and load-from-file
 * extensions only when proposed true (and, for region_dirty_log and
 * load-from-file, not refused by us). */
static void test_caps_migration(void)
{
    static const struct {
        const char *json;
        const char *reply;
    } cases[] = {
        {"{\"capabilities\":{\"migration\":{\"pgsize\":4096,"
         "\"max_bitmap_size\":268435456,\"precopy_info\":true}}}",
         "{\"capabilities\":{\"migration\":{\"pgsize\":4096,"
         "\"max_bitmap_size\":1048576,\"precopy_info\":true}}}"},
        {"{\"capabilities\":{\"max_msg_fds\":2,\"migration\":{\"pgsize\":"
         "8192,\"max_bitmap_size\":512}}}",
         "{\"capabilities\":{\"max_msg_fds\":8,\"migration\":{\"pgsize\":"
         "4096,\"max_bitmap_size\":512}}}"},
        {"{\"capabilities\":{\"migration\":{\"precopy_info\":false}}}",
         "{\"capabilities\":{}}"},
        {"{\"capabilities\":{\"migration\":{\"precopy_info\":true}}}",
         "{\"capabilities\":{\"migration\":{\"precopy_info\":true}}}"},
        {"{\"capabilities\":{\"migration\":{}}}", "{\"capabilities\":{}}"},
        {"{\"capabilities\":{\"migration\":{\"pgsize\":4096,"
         "\"precopy_info\":true,\"region_dirty_log\":true}}}",
         "{\"capabilities\":{\"migration\":{\"pgsize\":4096,"
         "\"precopy_info\":true,\"region_dirty_log\":true}}}"},
        {"{\"capabilities\":{\"migration\":{\"region_dirty_log\":false}}}",
         "{\"capabilities\":{}}"},
        {"{\"capabilities\":{\"migration\":{\"data_shm\":true}}}",
         "{\"capabilities\":{\"migration\":{\"data_shm\":true}}}"},
        {"{\"capabilities\":{\"migration\":{\"data_shm\":false}}}",
         "{\"capabilities\":{}}"},
        {"{\"capabilities\":{\"migration\":{\"postcopy\":true}}}",
         "{\"capabilities\":{\"migration\":{\"postcopy\":true}}}"},
        {"{\"capabilities\":{\"migration\":{\"postcopy\":false}}}",
         "{\"capabilities\":{}}"},
        {"{\"capabilities\":{\"migration\":{\"load-from-file\":true}}}",
         "{\"capabilities\":{\"migration\":{\"load-from-file\":true}}}"},
        {"{\"capabilities\":{\"migration\":{\"load-from-file\":false}}}",
         "{\"capabilities\":{}}"},
        /* 13: every member at once, each echoed in the reply */
        {"{\"capabilities\":{\"migration\":{\"pgsize\":4096,"
         "\"max_bitmap_size\":268435456,\"precopy_info\":true,"
         "\"region_dirty_log\":true,\"data_shm\":true,\"postcopy\":true,"
         "\"load-from-file\":true,\"postcopy-dma\":true}}}",
         "{\"capabilities\":{\"migration\":{\"pgsize\":4096,"
         "\"max_bitmap_size\":1048576,\"precopy_info\":true,"
         "\"region_dirty_log\":true,\"data_shm\":true,\"postcopy\":true,"
         "\"load-from-file\":true,\"postcopy-dma\":true}}}"},
        {"{\"capabilities\":{\"migration\":{\"postcopy-dma\":true}}}",
         "{\"capabilities\":{\"migration\":{\"postcopy-dma\":true}}}"},
        {"{\"capabilities\":{\"migration\":{\"postcopy-dma\":false}}}",
         "{\"capabilities\":{}}"},
    };
    struct vfu_caps ours = {.present = {true, true, true, true},
                            .value = {8, 1024, 4096, 10},
                            .migr = {.has_pgsize = true,
                                     .has_max_bitmap = true,
                                     .precopy_info = true,
                                     .region_dirty_log = true,
                                     .data_shm = true,
                                     .postcopy = true,
                                     .load_from_file = true,
                                     .postcopy_dma = true,
                                     .pgsize = 4096,
                                     .max_bitmap_size = 1048576}};
    static const char bad[] =
        "{\"capabilities\":{\"migration\":{\"precopy_info\":1}}}";
    struct vfu_caps client;
    struct vg_error err;
    char buf[256];

    for (unsigned i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_assert_cmpint(
            vfu_caps_parse(cases[i].json, strlen(cases[i].json), &client, &err),
            ==, 0);
        g_assert_cmpint(vfu_caps_format(&client, &ours, buf, sizeof(buf), &err),
                        >, 0);
        g_assert_cmpstr(buf, ==, cases[i].reply);
    }
    g_assert_cmpint(vfu_caps_parse(bad, strlen(bad), &client, &err), ==,
                    -EINVAL);
    g_assert_nonnull(strstr(err.msg, "expected true or false"));

    /* A server that refuses the log (--no-region-log) leaves it out. */
    ours.migr.region_dirty_log = false;
    g_assert_cmpint(
        vfu_caps_parse(cases[5].json, strlen(cases[5].json), &client, &err), ==,
        0);
    g_assert_true(client.migr.region_dirty_log);
    g_assert_cmpint(vfu_caps_format(&client, &ours, buf, sizeof(buf), &err), >,
                    0);
    g_assert_null(strstr(buf, "region_dirty_log"));

    /* "load-from-file" only when both sides have it: a server that cannot
     * restore from a file (no VRAM mapped here) leaves it out, the rest of
     * the object stays; a client that does not propose it does not get
     * it. */
    ours.migr.region_dirty_log = true;
    ours.migr.load_from_file = false;
    g_assert_cmpint(
        vfu_caps_parse(cases[13].json, strlen(cases[13].json), &client, &err),
        ==, 0);
    g_assert_true(client.migr.load_from_file);
    g_assert_cmpint(vfu_caps_format(&client, &ours, buf, sizeof(buf), &err), >,
                    0);
    g_assert_null(strstr(buf, "load-from-file"));
    g_assert_nonnull(strstr(buf, "\"postcopy\":true,\"postcopy-dma\":true}}}"));
    g_assert_cmpint(
        vfu_caps_parse(cases[11].json, strlen(cases[11].json), &client, &err),
        ==, 0);
    g_assert_cmpint(vfu_caps_format(&client, &ours, buf, sizeof(buf), &err), >,
                    0);
    g_assert_cmpstr(buf, ==, "{\"capabilities\":{}}");
    ours.migr.load_from_file = true;
    g_assert_cmpint(
        vfu_caps_parse(cases[9].json, strlen(cases[9].json), &client, &err), ==,
        0);
    g_assert_false(client.migr.load_from_file);
    g_assert_cmpint(vfu_caps_format(&client, &ours, buf, sizeof(buf), &err), >,
                    0);
    g_assert_null(strstr(buf, "load-from-file"));
    /* "postcopy-dma" likewise: a server without post-copy leaves it out. */
    ours.migr.postcopy_dma = false;
    g_assert_cmpint(
        vfu_caps_parse(cases[14].json, strlen(cases[14].json), &client, &err),
        ==, 0);
    g_assert_true(client.migr.postcopy_dma);
    g_assert_cmpint(vfu_caps_format(&client, &ours, buf, sizeof(buf), &err), >,
                    0);
    g_assert_cmpstr(buf, ==, "{\"capabilities\":{}}");
    /* its value must be a boolean */
    {
        static const char bad_lff[] =
            "{\"capabilities\":{\"migration\":{\"load-from-file\":\"yes\"}}}";

        g_assert_cmpint(vfu_caps_parse(bad_lff, strlen(bad_lff), &client, &err),
                        ==, -EINVAL);
        g_assert_nonnull(strstr(err.msg, "expected true or false"));
    }
}

/* MIG_DATA_SHM and MIG_DATA_{READ,WRITE}_SHM: exact sizes, zero flags,
 * the slot and its size bounded. */
static void test_mig_shm(void)
{
    const uint32_t setup[2] = {16, 0}, setup_flags[2] = {16, 1};
    const uint32_t setup_small[2] = {15, 0};
    struct vfu_mig_shm_io io = {16, 1, 4096, 0}, out;
    struct vg_error err;

    g_assert_cmpint(vfu_parse_mig_shm(setup, sizeof(setup), &err), ==, 0);
    g_assert_cmpint(vfu_parse_mig_shm(setup, 4, &err), ==, -EINVAL);
    g_assert_cmpint(vfu_parse_mig_shm(setup_flags, 8, &err), ==, -EINVAL);
    g_assert_nonnull(strstr(err.msg, "flags 0x1"));
    g_assert_cmpint(vfu_parse_mig_shm(setup_small, 8, &err), ==, -EINVAL);

    g_assert_cmpint(
        vfu_parse_mig_shm_io(&io, sizeof(io), 2, 4096, 0, &out, &err), ==, 0);
    g_assert_cmpuint(out.slot, ==, 1);
    g_assert_cmpuint(out.size, ==, 4096);
    g_assert_cmpint(vfu_parse_mig_shm_io(&io, 12, 2, 4096, 0, &out, &err), ==,
                    -EINVAL);
    g_assert_cmpint(
        vfu_parse_mig_shm_io(&io, sizeof(io), 1, 4096, 0, &out, &err), ==,
        -EINVAL);
    g_assert_nonnull(strstr(err.msg, "slot 1 (of 1)"));
    g_assert_cmpint(
        vfu_parse_mig_shm_io(&io, sizeof(io), 2, 4095, 0, &out, &err), ==,
        -EINVAL);
    g_assert_nonnull(strstr(err.msg, "size 4096 (max 4095)"));
    io.flags = VFU_MIG_SHM_IO_PIECES;
    g_assert_cmpint(
        vfu_parse_mig_shm_io(&io, sizeof(io), 2, 4096, 0, &out, &err), ==,
        -EINVAL);
    g_assert_nonnull(strstr(err.msg, "flags 0x2"));
    /* A read may ask for pieces where data_vram was negotiated */
    g_assert_cmpint(vfu_parse_mig_shm_io(&io, sizeof(io), 2, 4096,
                                         VFU_MIG_SHM_IO_PIECES, &out, &err),
                    ==, 0);
    g_assert_cmpuint(out.flags, ==, VFU_MIG_SHM_IO_PIECES);
    io.flags = VFU_MIG_SHM_IO_PIECES | VFU_MIG_SHM_IO_END;
    g_assert_cmpint(vfu_parse_mig_shm_io(&io, sizeof(io), 2, 4096,
                                         VFU_MIG_SHM_IO_PIECES, &out, &err),
                    ==, -EINVAL);
    io.flags = 0;
    io.argsz = 8;
    g_assert_cmpint(
        vfu_parse_mig_shm_io(&io, sizeof(io), 2, 4096, 0, &out, &err), ==,
        -EINVAL);
}

/* MIG_DATA_WRITE_SHM with pieces: only where data_vram was negotiated,
 * exactly the pieces it counts, each inside the slot or of VRAM, adding
 * up to the write's size; MIG_DATA_VRAM's flags. */
static void test_mig_shm_write(void)
{
    struct {
        struct vfu_mig_shm_io io;
        uint32_t count, pass;
        struct vfu_mig_piece piece[3];
    } w = {{16, 1, 4096, VFU_MIG_SHM_IO_PIECES},
           3,
           0,
           {{0, 32, VFU_MIG_PIECE_SLOT},
            {1u << 20, 4000, VFU_MIG_PIECE_VRAM},
            {32, 64, VFU_MIG_PIECE_SLOT}}};
    static const struct {
        size_t off;   /* byte of @w changed */
        uint32_t val; /* to this (a 32-bit word) */
        size_t len;   /* payload bytes, 0: all */
        const char *msg;
    } bad[] = {
        {offsetof(__typeof__(w), count), 0, 0, "0 pieces"},
        {offsetof(__typeof__(w), count), 65, 0, "65 pieces"},
        {offsetof(__typeof__(w), count), 2, 0, "2 pieces"},
        {offsetof(__typeof__(w), pass), 1, 0, "pass 0x1"}, /* reads' only */
        {offsetof(__typeof__(w), piece[1].len), 0, 0, "piece 1: 0 bytes"},
        {offsetof(__typeof__(w), piece[1].len), 4001, 0, "hold 4097 bytes"},
        {offsetof(__typeof__(w), piece[2].where), 2, 0, "of where 2"},
        {offsetof(__typeof__(w), piece[2].offset), 4090, 0, "piece 2"},
        {0, 16, sizeof(w) - 1, "in 55 bytes"},
        {0, 16, 20, "at least 8"},
    };
    struct vfu_mig_shm_io out;
    struct vfu_mig_pieces pieces;
    struct vg_error err;
    uint32_t flags = 7;
    const uint32_t vram[2] = {16, VFU_MIG_VRAM_WRITE}, vram_bad[2] = {16, 2};

    g_assert_cmpint(vfu_parse_mig_shm_write(&w, sizeof(w), 2, 4096, true, &out,
                                            &pieces, &err),
                    ==, 0);
    g_assert_cmpuint(pieces.count, ==, 3);
    g_assert_cmpuint(pieces.piece[1].offset, ==, 1u << 20);
    g_assert_cmpuint(pieces.piece[1].where, ==, VFU_MIG_PIECE_VRAM);
    /* Without data_vram, and a plain write with bytes after it */
    g_assert_cmpint(vfu_parse_mig_shm_write(&w, sizeof(w), 2, 4096, false, &out,
                                            &pieces, &err),
                    ==, -EINVAL);
    g_assert_nonnull(strstr(err.msg, "flags 0x2"));
    w.io.flags = 0;
    g_assert_cmpint(vfu_parse_mig_shm_write(&w, sizeof(w), 2, 4096, true, &out,
                                            &pieces, &err),
                    ==, -EINVAL);
    g_assert_cmpint(vfu_parse_mig_shm_write(&w, sizeof(w.io), 2, 4096, true,
                                            &out, &pieces, &err),
                    ==, 0);
    g_assert_cmpuint(pieces.count, ==, 0);
    w.io.flags = VFU_MIG_SHM_IO_PIECES;
    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        __typeof__(w) c = w;

        memcpy((uint8_t *)&c + bad[i].off, &bad[i].val, 4);
        g_assert_cmpint(vfu_parse_mig_shm_write(&c, bad[i].len ?: sizeof(c), 2,
                                                4096, true, &out, &pieces,
                                                &err),
                        ==, -EINVAL);
        g_assert_nonnull(strstr(err.msg, bad[i].msg));
    }

    g_assert_cmpint(vfu_parse_mig_vram(vram, sizeof(vram), &flags, &err), ==,
                    0);
    g_assert_cmpuint(flags, ==, VFU_MIG_VRAM_WRITE);
    g_assert_cmpint(
        vfu_parse_mig_vram(vram_bad, sizeof(vram_bad), &flags, &err), ==,
        -EINVAL);
    g_assert_nonnull(strstr(err.msg, "flags 0x2"));
    g_assert_cmpint(vfu_parse_mig_vram(vram, 4, &flags, &err), ==, -EINVAL);
}

/* REGION_DIRTY_LOG: every field bounded, the bitmap exactly as long as
 * the range needs. */
static void test_region_dirty_log(void)
{
    const uint64_t region = 1u << 20; /* 256 pages of 4 KiB */
    struct {
        struct vfu_region_dirty_log h;
        uint64_t bitmap[4];
    } m = {{32 + 32, 2, 4096, 0, 0, region}, {1, 2, 3, 4}};
    struct vfu_region_dirty_log out;
    const uint64_t *bm = NULL;
    struct vg_error err;

    g_assert_cmpint(
        vfu_parse_region_dirty_log(&m, sizeof(m), region, &out, &bm, &err), ==,
        0);
    g_assert_cmpuint(out.size, ==, region);
    g_assert_true(bm == m.bitmap);
    /* argsz must equal the payload; a short header is refused */
    g_assert_cmpint(
        vfu_parse_region_dirty_log(&m, sizeof(m) - 8, region, &out, &bm, &err),
        ==, -EINVAL);
    g_assert_cmpint(vfu_parse_region_dirty_log(&m, 16, region, &out, &bm, &err),
                    ==, -EINVAL);
    /* the bitmap must cover the range exactly: 2 pages need 1 word */
    m.h.size = 2 * 4096;
    g_assert_cmpint(
        vfu_parse_region_dirty_log(&m, sizeof(m), region, &out, &bm, &err), ==,
        -EINVAL);
    g_assert_nonnull(strstr(err.msg, "bitmap"));
    m.h.argsz = 40;
    g_assert_cmpint(vfu_parse_region_dirty_log(&m, 40, region, &out, &bm, &err),
                    ==, 0);
    /* out of the region, wrapping, unaligned, empty */
    m.h.offset = region - 4096;
    g_assert_cmpint(vfu_parse_region_dirty_log(&m, 40, region, &out, &bm, &err),
                    ==, -ERANGE);
    m.h.offset = UINT64_MAX - 4095;
    g_assert_cmpint(vfu_parse_region_dirty_log(&m, 40, region, &out, &bm, &err),
                    ==, -ERANGE);
    m.h.offset = 512;
    g_assert_cmpint(vfu_parse_region_dirty_log(&m, 40, region, &out, &bm, &err),
                    ==, -ERANGE);
    m.h.offset = 0;
    m.h.size = 0;
    g_assert_cmpint(vfu_parse_region_dirty_log(&m, 40, region, &out, &bm, &err),
                    ==, -ERANGE);
    /* page size: a power of two from 512 bytes to 1 GiB; flags zero */
    m.h.size = 2 * 4096;
    m.h.pgsize = 3000;
    g_assert_cmpint(vfu_parse_region_dirty_log(&m, 40, region, &out, &bm, &err),
                    ==, -EINVAL);
    m.h.pgsize = 256;
    g_assert_cmpint(vfu_parse_region_dirty_log(&m, 40, region, &out, &bm, &err),
                    ==, -EINVAL);
    m.h.pgsize = 4096;
    m.h.flags = 1;
    g_assert_cmpint(vfu_parse_region_dirty_log(&m, 40, region, &out, &bm, &err),
                    ==, -EINVAL);
}

static void test_dma(void)
{
    struct vfu_dma_map m = {32, VFIO_DMA_MAP_FLAG_READ, 0, 0x10000, 0x2000};
    struct vfu_dma_unmap u = {24, 0, 0x10000, 0x2000};
    struct vfu_dma_map om;
    struct vfu_dma_unmap ou;
    struct vg_error err;

    g_assert_cmpint(vfu_parse_dma_map(&m, sizeof(m), &lim, &om, &err), ==, 0);
    g_assert_cmpuint(om.iova, ==, 0x10000);
    g_assert_cmpint(vfu_parse_dma_map(&m, sizeof(m) - 1, &lim, &om, &err), ==,
                    -EINVAL);
    m.flags = 4;
    g_assert_cmpint(vfu_parse_dma_map(&m, sizeof(m), &lim, &om, &err), ==,
                    -EINVAL);
    m.flags = 3;
    m.size = 0x1001;
    g_assert_cmpint(vfu_parse_dma_map(&m, sizeof(m), &lim, &om, &err), ==,
                    -EINVAL);
    m.size = 0x2000;
    m.iova = UINT64_MAX - 0xfff;
    g_assert_cmpint(vfu_parse_dma_map(&m, sizeof(m), &lim, &om, &err), ==,
                    -EINVAL);
    g_assert_nonnull(strstr(err.msg, "overflows"));

    g_assert_cmpint(vfu_parse_dma_unmap(&u, sizeof(u), &lim, &ou, &err), ==, 0);
    u.flags = VFIO_DMA_UNMAP_FLAG_ALL;
    g_assert_cmpint(vfu_parse_dma_unmap(&u, sizeof(u), &lim, &ou, &err), ==,
                    -EINVAL);
    u.iova = u.size = 0;
    g_assert_cmpint(vfu_parse_dma_unmap(&u, sizeof(u), &lim, &ou, &err), ==, 0);
    u.flags = VFIO_DMA_UNMAP_FLAG_GET_DIRTY_BITMAP;
    g_assert_cmpint(vfu_parse_dma_unmap(&u, sizeof(u), &lim, &ou, &err), ==,
                    -ENOTSUP);
}

static void test_info(void)
{
    struct vfu_device_info di = {16, 0, 0, 0}, odi;
    struct vfu_region_info ri = {.argsz = 32, .index = 7}, ori;
    struct vfu_irq_info ii = {.argsz = 16, .index = 2}, oii;
    struct vg_error err;

    g_assert_cmpint(vfu_parse_device_info(&di, sizeof(di), &odi, &err), ==, 0);
    di.argsz = 8;
    g_assert_cmpint(vfu_parse_device_info(&di, sizeof(di), &odi, &err), ==,
                    -EINVAL);
    g_assert_cmpint(vfu_parse_region_info(&ri, sizeof(ri), &lim, &ori, &err),
                    ==, 0);
    g_assert_cmpuint(ori.index, ==, 7);
    ri.index = 9;
    g_assert_cmpint(vfu_parse_region_info(&ri, sizeof(ri), &lim, &ori, &err),
                    ==, -EINVAL);
    g_assert_nonnull(strstr(err.msg, "region 9"));
    g_assert_cmpint(vfu_parse_irq_info(&ii, sizeof(ii), &lim, &oii, &err), ==,
                    0);
    ii.index = 3;
    g_assert_cmpint(vfu_parse_irq_info(&ii, sizeof(ii), &lim, &oii, &err), ==,
                    -EINVAL);
}

static void test_irq_set(void)
{
    struct {
        struct vfu_irq_set s;
        uint8_t bools[2];
    } m = {
        {20, VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER, 2, 0, 2},
        {1, 0}};
    struct vfu_irq_set o;
    const uint8_t *bools;
    struct vg_error err;

    g_assert_cmpint(vfu_parse_irq_set(&m, 20, &lim, 2, &o, &bools, &err), ==,
                    0);
    g_assert_null(bools);
    /* fds given but not as many as IRQs */
    g_assert_cmpint(vfu_parse_irq_set(&m, 20, &lim, 1, &o, &bools, &err), ==,
                    -EINVAL);
    /* vectors past the index */
    m.s.start = 1;
    g_assert_cmpint(vfu_parse_irq_set(&m, 20, &lim, 0, &o, &bools, &err), ==,
                    -EINVAL);
    m.s.start = UINT32_MAX;
    g_assert_cmpint(vfu_parse_irq_set(&m, 20, &lim, 0, &o, &bools, &err), ==,
                    -EINVAL);
    m.s.start = 0;
    m.s.flags = VFIO_IRQ_SET_DATA_BOOL | VFIO_IRQ_SET_ACTION_TRIGGER;
    g_assert_cmpint(vfu_parse_irq_set(&m, 20, &lim, 0, &o, &bools, &err), ==,
                    -EINVAL);
    g_assert_cmpint(vfu_parse_irq_set(&m, 22, &lim, 0, &o, &bools, &err), ==,
                    0);
    g_assert_nonnull(bools);
    g_assert_cmpuint(bools[0], ==, 1);
    /* two data types */
    m.s.flags = VFIO_IRQ_SET_DATA_BOOL | VFIO_IRQ_SET_DATA_NONE |
                VFIO_IRQ_SET_ACTION_TRIGGER;
    g_assert_cmpint(vfu_parse_irq_set(&m, 22, &lim, 0, &o, &bools, &err), ==,
                    -EINVAL);
    /* count 0 = disable all, only with DATA_NONE */
    m.s.flags = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER;
    m.s.count = 0;
    g_assert_cmpint(vfu_parse_irq_set(&m, 20, &lim, 0, &o, &bools, &err), ==,
                    0);
    m.s.flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
    g_assert_cmpint(vfu_parse_irq_set(&m, 20, &lim, 0, &o, &bools, &err), ==,
                    -EINVAL);
}

static void test_region_rw(void)
{
    struct {
        struct vfu_region_rw rw;
        uint8_t data[8];
    } m = {{0x10, 0, 4}, {1, 2, 3, 4}};
    struct vfu_region_rw o;
    const uint8_t *data;
    struct vg_error err;

    g_assert_cmpint(vfu_parse_region_rw(&m, 16, &lim, false, &o, &data, &err),
                    ==, 0);
    g_assert_cmpint(vfu_parse_region_rw(&m, 20, &lim, true, &o, &data, &err),
                    ==, 0);
    g_assert_cmpuint(data[3], ==, 4);
    /* write with the wrong amount of data */
    g_assert_cmpint(vfu_parse_region_rw(&m, 24, &lim, true, &o, &data, &err),
                    ==, -EINVAL);
    /* read carrying data */
    g_assert_cmpint(vfu_parse_region_rw(&m, 20, &lim, false, &o, &data, &err),
                    ==, -EINVAL);
    g_assert_cmpint(vfu_parse_region_rw(&m, 12, &lim, false, &o, &data, &err),
                    ==, -EINVAL);
    m.rw.offset = 0x3ffd; /* crosses the end of region 0 */
    g_assert_cmpint(vfu_parse_region_rw(&m, 16, &lim, false, &o, &data, &err),
                    ==, -EINVAL);
    g_assert_nonnull(strstr(err.msg, "outside the region"));
    m.rw.offset = UINT64_MAX - 1; /* offset + count overflows */
    g_assert_cmpint(vfu_parse_region_rw(&m, 16, &lim, false, &o, &data, &err),
                    ==, -EINVAL);
    m.rw.offset = 0;
    m.rw.region = 1; /* size 0 */
    g_assert_cmpint(vfu_parse_region_rw(&m, 16, &lim, false, &o, &data, &err),
                    ==, -EINVAL);
    m.rw.region = 9;
    g_assert_cmpint(vfu_parse_region_rw(&m, 16, &lim, false, &o, &data, &err),
                    ==, -EINVAL);
    m.rw.region = 2;
    m.rw.count = 1025;
    g_assert_cmpint(vfu_parse_region_rw(&m, 16, &lim, false, &o, &data, &err),
                    ==, -E2BIG);
    m.rw.count = 0;
    g_assert_cmpint(vfu_parse_region_rw(&m, 16, &lim, false, &o, &data, &err),
                    ==, -EINVAL);
}

static void test_region_info_encode(void)
{
    struct vfu_region_info info = {
        .flags = VFIO_REGION_INFO_FLAG_MMAP, .index = 2, .size = 0x100000};
    struct vfu_area area = {0, 0x100000};
    struct vfu_region_info out;
    struct vfu_sparse_mmap cap;
    uint8_t buf[64];
    struct vg_error err;

    /* argsz too small: no capability, argsz says what is needed */
    g_assert_cmpint(
        vfu_encode_region_info(&info, &area, 1, 32, buf, sizeof(buf), &err), ==,
        32);
    memcpy(&out, buf, sizeof(out));
    g_assert_cmpuint(out.argsz, ==, 64);
    g_assert_cmpuint(out.flags & VFIO_REGION_INFO_FLAG_CAPS, ==, 0);
    g_assert_cmpint(
        vfu_encode_region_info(&info, &area, 1, 64, buf, sizeof(buf), &err), ==,
        64);
    memcpy(&out, buf, sizeof(out));
    memcpy(&cap, buf + 32, sizeof(cap));
    g_assert_cmpuint(out.flags & VFIO_REGION_INFO_FLAG_CAPS, !=, 0);
    g_assert_cmpuint(out.cap_offset, ==, 32);
    g_assert_cmpuint(cap.header.id, ==, VFIO_REGION_INFO_CAP_SPARSE_MMAP);
    g_assert_cmpuint(cap.nr_areas, ==, 1);
    g_assert_cmpint(vfu_encode_region_info(&info, &area, 1, 64, buf, 40, &err),
                    ==, -ENOSPC);
}

/* MIG_POSTCOPY: exactly argsz 8 and flags 0. */
static void test_mig_postcopy(void)
{
    struct vfu_mig_postcopy m = {sizeof(m), 0};
    struct vg_error err;

    g_assert_cmpint(vfu_parse_mig_postcopy(&m, sizeof(m), &err), ==, 0);
    g_assert_cmpint(vfu_parse_mig_postcopy(&m, sizeof(m) - 1, &err), ==,
                    -EINVAL);
    m.flags = 1;
    g_assert_cmpint(vfu_parse_mig_postcopy(&m, sizeof(m), &err), ==, -EINVAL);
    m.flags = 0;
    m.argsz = 4;
    g_assert_cmpint(vfu_parse_mig_postcopy(&m, sizeof(m), &err), ==, -EINVAL);
}

/* MIG_DATA_FILE: the header and exactly its extents, each non-empty and
 * not wrapping; a bad message names what. */
/* DMA_UFFD: 16 bytes, argsz 16, op ADVISE..END, count and reserved 0. */
static void test_dma_uffd(void)
{
    struct vfu_dma_uffd in = {sizeof(in), VFU_DMA_UFFD_LISTEN, 0, 0}, out;
    uint8_t m[sizeof(in) + 1] = {0};
    struct vg_error err;

    for (uint32_t op = VFU_DMA_UFFD_ADVISE; op <= VFU_DMA_UFFD_END; op++) {
        in.op = op;
        memcpy(m, &in, sizeof(in));
        g_assert_cmpint(vfu_parse_dma_uffd(m, sizeof(in), &out, &err), ==, 0);
        g_assert_cmpuint(out.op, ==, op);
    }
    g_assert_cmpint(vfu_parse_dma_uffd(m, sizeof(in) - 1, &out, &err), ==,
                    -EINVAL);
    g_assert_nonnull(strstr(err.msg, "payload is 15 bytes"));
    g_assert_cmpint(vfu_parse_dma_uffd(m, sizeof(in) + 1, &out, &err), ==,
                    -EINVAL);
    for (unsigned field = 0; field < 4; field++) {
        struct vfu_dma_uffd bad = {sizeof(bad), VFU_DMA_UFFD_ADVISE, 0, 0};
        uint32_t *f = (uint32_t *)&bad + field;

        *f = field == 1 ? VFU_DMA_UFFD_END + 1 : *f + 1;
        memcpy(m, &bad, sizeof(bad));
        g_assert_cmpint(vfu_parse_dma_uffd(m, sizeof(bad), &out, &err), ==,
                        -EINVAL);
        g_assert_nonnull(strstr(err.msg, "invalid"));
    }
}

static void test_mig_data_file(void)
{
    const size_t hsz = sizeof(struct vfu_mig_data_file);
    const size_t esz = sizeof(struct vfu_file_extent);
    const size_t max_len = hsz + (VFU_MIG_DATA_FILE_MAX + 1) * esz;
    g_autofree uint8_t *m = g_malloc0(max_len);
    g_autofree struct vfu_file_extent *out =
        g_new0(struct vfu_file_extent, VFU_MIG_DATA_FILE_MAX);
    struct vfu_mig_data_file h = {hsz + esz, 0, 1, 0};
    struct vfu_file_extent e = {0x1000, 0x2000};
    struct vg_error err;
    uint32_t flags = 99, n = 0;

    /* One extent, without and with the file. */
    memcpy(m, &h, hsz);
    memcpy(m + hsz, &e, esz);
    g_assert_cmpint(
        vfu_parse_mig_data_file(m, hsz + esz, &flags, out, &n, &err), ==, 0);
    g_assert_cmpuint(flags, ==, 0);
    g_assert_cmpuint(n, ==, 1);
    g_assert_cmphex(out[0].offset, ==, 0x1000);
    g_assert_cmphex(out[0].size, ==, 0x2000);
    h.flags = VFU_MIG_DATA_FILE_FD;
    memcpy(m, &h, hsz);
    g_assert_cmpint(
        vfu_parse_mig_data_file(m, hsz + esz, &flags, out, &n, &err), ==, 0);
    g_assert_cmpuint(flags, ==, VFU_MIG_DATA_FILE_FD);
    g_assert_cmpuint(n, ==, 1);

    /* The most extents a message may carry, each copied. */
    for (uint32_t i = 0; i < VFU_MIG_DATA_FILE_MAX; i++) {
        struct vfu_file_extent x = {(uint64_t)i << 16, i + 1};
        memcpy(m + hsz + i * esz, &x, esz);
    }
    for (unsigned fd = 0; fd < 2; fd++) {
        h = (struct vfu_mig_data_file){hsz + VFU_MIG_DATA_FILE_MAX * esz,
                                       fd ? VFU_MIG_DATA_FILE_FD : 0,
                                       VFU_MIG_DATA_FILE_MAX, 0};
        memcpy(m, &h, hsz);
        n = 0;
        g_assert_cmpint(
            vfu_parse_mig_data_file(m, h.argsz, &flags, out, &n, &err), ==, 0);
        g_assert_cmpuint(flags, ==, h.flags);
        g_assert_cmpuint(n, ==, VFU_MIG_DATA_FILE_MAX);
        g_assert_cmphex(out[1023].offset, ==, (uint64_t)1023 << 16);
        g_assert_cmphex(out[1023].size, ==, 1024);
    }

    /* Shorter than the header. */
    g_assert_cmpint(vfu_parse_mig_data_file(m, hsz - 1, &flags, out, &n, &err),
                    ==, -EINVAL);
    g_assert_nonnull(strstr(err.msg, "payload is 15 bytes, expected 16+"));
    g_assert_cmpint(vfu_parse_mig_data_file(m, 0, &flags, out, &n, &err), ==,
                    -EINVAL);
    g_assert_nonnull(strstr(err.msg, "payload is 0 bytes"));

    /* argsz not the payload's size. */
    h = (struct vfu_mig_data_file){hsz + esz + 16, 0, 1, 0};
    memcpy(m, &h, hsz);
    memcpy(m + hsz, &e, esz);
    g_assert_cmpint(
        vfu_parse_mig_data_file(m, hsz + esz, &flags, out, &n, &err), ==,
        -EINVAL);
    g_assert_nonnull(
        strstr(err.msg, "argsz 48 flags 0 reserved 0 extents 1 for 32 bytes"));

    /* A flag bit not defined. */
    h = (struct vfu_mig_data_file){hsz + esz, VFU_MIG_DATA_FILE_FD | 2, 1, 0};
    memcpy(m, &h, hsz);
    g_assert_cmpint(
        vfu_parse_mig_data_file(m, hsz + esz, &flags, out, &n, &err), ==,
        -EINVAL);
    g_assert_nonnull(strstr(err.msg, "flags 0x3"));
    h.flags = 1u << 31;
    memcpy(m, &h, hsz);
    g_assert_cmpint(
        vfu_parse_mig_data_file(m, hsz + esz, &flags, out, &n, &err), ==,
        -EINVAL);
    g_assert_nonnull(strstr(err.msg, "flags 0x80000000"));

    /* reserved not zero: the message names it. */
    h = (struct vfu_mig_data_file){hsz + esz, 0, 1, 1};
    memcpy(m, &h, hsz);
    g_assert_cmpint(
        vfu_parse_mig_data_file(m, hsz + esz, &flags, out, &n, &err), ==,
        -EINVAL);
    g_assert_nonnull(strstr(err.msg, "reserved 0x1 extents 1 for 32 bytes"));

    /* No extent, one too many. */
    h = (struct vfu_mig_data_file){hsz, 0, 0, 0};
    memcpy(m, &h, hsz);
    g_assert_cmpint(vfu_parse_mig_data_file(m, hsz, &flags, out, &n, &err), ==,
                    -EINVAL);
    g_assert_nonnull(strstr(err.msg, "extents 0 for 16 bytes"));
    h = (struct vfu_mig_data_file){(uint32_t)max_len, 0,
                                   VFU_MIG_DATA_FILE_MAX + 1, 0};
    memcpy(m, &h, hsz);
    g_assert_cmpint(vfu_parse_mig_data_file(m, max_len, &flags, out, &n, &err),
                    ==, -EINVAL);
    g_assert_nonnull(strstr(err.msg, "extents 1025 for 16416 bytes"));

    /* The payload not 16 + 16 * count: an extent missing, one extra, a
     * partial one (argsz always the payload's size). */
    h = (struct vfu_mig_data_file){hsz + esz, 0, 2, 0};
    memcpy(m, &h, hsz);
    g_assert_cmpint(
        vfu_parse_mig_data_file(m, hsz + esz, &flags, out, &n, &err), ==,
        -EINVAL);
    g_assert_nonnull(strstr(err.msg, "extents 2 for 32 bytes"));
    h = (struct vfu_mig_data_file){hsz + 2 * esz, 0, 1, 0};
    memcpy(m, &h, hsz);
    g_assert_cmpint(
        vfu_parse_mig_data_file(m, hsz + 2 * esz, &flags, out, &n, &err), ==,
        -EINVAL);
    g_assert_nonnull(strstr(err.msg, "extents 1 for 48 bytes"));
    h = (struct vfu_mig_data_file){hsz + esz + 8, 0, 1, 0};
    memcpy(m, &h, hsz);
    g_assert_cmpint(
        vfu_parse_mig_data_file(m, hsz + esz + 8, &flags, out, &n, &err), ==,
        -EINVAL);
    g_assert_nonnull(strstr(err.msg, "extents 1 for 40 bytes"));

    /* An empty extent, here the second of two. */
    h = (struct vfu_mig_data_file){hsz + 2 * esz, 0, 2, 0};
    memcpy(m, &h, hsz);
    memcpy(m + hsz, &e, esz);
    e = (struct vfu_file_extent){0x1000, 0};
    memcpy(m + hsz + esz, &e, esz);
    g_assert_cmpint(
        vfu_parse_mig_data_file(m, hsz + 2 * esz, &flags, out, &n, &err), ==,
        -EINVAL);
    g_assert_nonnull(strstr(err.msg, "extent 1: 0x1000+0 is empty or wraps"));

    /* An extent whose end wraps past 2^64; one ending exactly there is
     * fine. */
    e = (struct vfu_file_extent){UINT64_MAX - 0xfff, 0x2000};
    memcpy(m + hsz + esz, &e, esz);
    g_assert_cmpint(
        vfu_parse_mig_data_file(m, hsz + 2 * esz, &flags, out, &n, &err), ==,
        -EINVAL);
    g_assert_nonnull(strstr(
        err.msg, "extent 1: 0xfffffffffffff000+0x2000 is empty or wraps"));
    e = (struct vfu_file_extent){1, UINT64_MAX};
    memcpy(m + hsz + esz, &e, esz);
    g_assert_cmpint(
        vfu_parse_mig_data_file(m, hsz + 2 * esz, &flags, out, &n, &err), ==,
        -EINVAL);
    g_assert_nonnull(strstr(err.msg, "extent 1: 0x1+0xffffffffffffffff"));
    e = (struct vfu_file_extent){UINT64_MAX - 0xfff, 0xfff};
    memcpy(m + hsz + esz, &e, esz);
    g_assert_cmpint(
        vfu_parse_mig_data_file(m, hsz + 2 * esz, &flags, out, &n, &err), ==,
        0);
    g_assert_cmpuint(n, ==, 2);
}

/* REGION_UFFD: the header and its areas, each inside its region and not
 * wrapping the client's address space; a bad message names what. */
static void test_region_uffd(void)
{
    static const uint64_t sizes[3] = {0x1000, 0, 1u << 20};
    struct {
        struct vfu_region_uffd h;
        struct vfu_uffd_area a[2];
    } m = {{sizeof(m), 0, 2, 0},
           {{2, 0, 0, 1u << 20, 0x7f0000000000ull},
            {0, 0, 0, 0x1000, 0x7f1000000000ull}}};
    struct vfu_uffd_area out[VFU_UFFD_MAX_AREAS];
    struct vg_error err;
    uint32_t n = 0;

    g_assert_cmpint(
        vfu_parse_region_uffd(&m, sizeof(m), sizes, 3, out, &n, &err), ==, 0);
    g_assert_cmpuint(n, ==, 2);
    g_assert_cmphex(out[0].vaddr, ==, 0x7f0000000000ull);
    /* Short, argsz off, flags, no areas, too many areas. */
    g_assert_cmpint(vfu_parse_region_uffd(&m, 8, sizes, 3, out, &n, &err), ==,
                    -EINVAL);
    g_assert_cmpint(
        vfu_parse_region_uffd(&m, sizeof(m) - 32, sizes, 3, out, &n, &err), ==,
        -EINVAL);
    m.h.flags = 1;
    g_assert_cmpint(
        vfu_parse_region_uffd(&m, sizeof(m), sizes, 3, out, &n, &err), ==,
        -EINVAL);
    m.h.flags = 0;
    m.h.nr_areas = VFU_UFFD_MAX_AREAS + 1;
    g_assert_cmpint(
        vfu_parse_region_uffd(&m, sizeof(m), sizes, 3, out, &n, &err), ==,
        -EINVAL);
    m.h.nr_areas = 2;
    /* An area past its region, in a region that does not exist or has no
     * size, and one that wraps the address space. */
    m.a[1].size = 0x2000;
    g_assert_cmpint(
        vfu_parse_region_uffd(&m, sizeof(m), sizes, 3, out, &n, &err), ==,
        -EINVAL);
    g_assert_nonnull(strstr(err.msg, "area 1"));
    m.a[1].size = 0x1000;
    m.a[1].region = 7;
    g_assert_cmpint(
        vfu_parse_region_uffd(&m, sizeof(m), sizes, 3, out, &n, &err), ==,
        -EINVAL);
    m.a[1].region = 1;
    g_assert_cmpint(
        vfu_parse_region_uffd(&m, sizeof(m), sizes, 3, out, &n, &err), ==,
        -EINVAL);
    m.a[1].region = 0;
    m.a[1].vaddr = UINT64_MAX - 0x800;
    g_assert_cmpint(
        vfu_parse_region_uffd(&m, sizeof(m), sizes, 3, out, &n, &err), ==,
        -EINVAL);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/vfu-msg/header", test_hdr);
    g_test_add_func("/vfu-msg/version", test_version);
    g_test_add_func("/vfu-msg/caps-format", test_caps_format);
    g_test_add_func("/vfu-msg/caps-migration", test_caps_migration);
    g_test_add_func("/vfu-msg/dma", test_dma);
    g_test_add_func("/vfu-msg/region-dirty-log", test_region_dirty_log);
    g_test_add_func("/vfu-msg/mig-shm", test_mig_shm);
    g_test_add_func("/vfu-msg/mig-shm-write", test_mig_shm_write);
    g_test_add_func("/vfu-msg/mig-postcopy", test_mig_postcopy);
    g_test_add_func("/vfu-msg/region-uffd", test_region_uffd);
    g_test_add_func("/vfu-msg/data-file", test_mig_data_file);
    g_test_add_func("/vfu-msg/dma-uffd", test_dma_uffd);
    g_test_add_func("/vfu-msg/info", test_info);
    g_test_add_func("/vfu-msg/irq-set", test_irq_set);
    g_test_add_func("/vfu-msg/region-rw", test_region_rw);
    g_test_add_func("/vfu-msg/region-info-encode", test_region_info_encode);
    return g_test_run();
}
