/*
 * gen-seeds.c -- write the seed corpora of the fuzz targets.
 *
 * Every seed is a small valid input (or a deliberately bad one whose
 * refusal the regression replay keeps checking), built with the
 * project's own encoders: vfio-user messages as QEMU would send them,
 * migration streams from mig-stream's encoder and vgpu_state_save(), ring
 * entries from vgpu_cmd_encode().  The output is deterministic, so
 * `make fuzz-seeds` rewrites the checked-in files byte for byte.
 */
#include <errno.h>
#include <linux/vfio.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/le.h"
#include "fuzz.h"
#include "vfio-migration/mig-stream.h"
#include "vfio-user/vfu-proto.h"
#include "vgpu/cmd.h"
#include "vgpu/vgpu.h"

#define RAM_IOVA 0x100000ull /* where the vfu seeds map guest RAM */

static const char *outdir;

struct buf {
    uint8_t *p;
    size_t len, cap;
};

static void put(struct buf *b, const void *data, size_t len)
{
    if (len == 0) {
        return;
    }
    if (b->len + len > b->cap) {
        b->cap = (b->len + len) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p) {
            perror("gen-seeds");
            exit(1);
        }
    }
    memcpy(b->p + b->len, data, len);
    b->len += len;
}

static void put_u8(struct buf *b, uint8_t v)
{
    put(b, &v, 1);
}

static void save(const char *target, const char *name, const struct buf *b)
{
    char path[4096];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", outdir, target);
    if (mkdir(path, 0755) < 0 && errno != EEXIST) {
        fprintf(stderr, "gen-seeds: mkdir %s: %s\n", path, strerror(errno));
        exit(1);
    }
    snprintf(path, sizeof(path), "%s/%s/seed-%s", outdir, target, name);
    f = fopen(path, "wb");
    if (!f || fwrite(b->p, 1, b->len, f) != b->len || fclose(f) != 0) {
        fprintf(stderr, "gen-seeds: write %s: %s\n", path, strerror(errno));
        exit(1);
    }
}

static void reset(struct buf *b)
{
    b->len = 0;
}

/* ---------------------------------------------- a device to take state */

static uint8_t host_ram[64 << 10];

static void *host_dma(void *opaque, uint64_t iova, uint64_t len, bool write)
{
    if (iova < RAM_IOVA || iova - RAM_IOVA >= sizeof(host_ram) ||
        len > sizeof(host_ram) - (iova - RAM_IOVA)) {
        return NULL;
    }
    return host_ram + (iova - RAM_IOVA);
}

static void host_irq(void *opaque, unsigned vector)
{
}

static struct vgpu *new_gpu(void)
{
    struct vgpu_config gc = {.vram_size = FUZZ_VRAM, .page_size = FUZZ_PAGE};
    struct vgpu_host host = {NULL, host_dma, host_irq};
    struct vg_error err;
    struct vgpu *gpu;

    if (vgpu_new(&gc, &host, &gpu, &err) < 0) {
        fprintf(stderr, "gen-seeds: %s\n", err.msg);
        exit(1);
    }
    return gpu;
}

static void wr32(struct vgpu *gpu, uint32_t reg, uint32_t v)
{
    vgpu_bar0_write(gpu, reg, &v, 4);
}

static uint32_t features(struct vgpu *gpu)
{
    uint32_t f;

    vgpu_bar0_read(gpu, VGPU_REG_FEATURES, &f, 4);
    return f;
}

/* State blob of a device with a FILL of all of VRAM in flight. */
static void busy_state(uint8_t *blob)
{
    struct vgpu *gpu = new_gpu();
    struct vgpu_cmd c =
        vgpu_cmd_make(VGPU_OP_FILL, 0, FUZZ_VRAM, 0x5a5a5a5a, 0, 0, 0);

    vgpu_cmd_encode(&c, host_ram);
    wr32(gpu, VGPU_REG_RING_BASE_LO, (uint32_t)RAM_IOVA);
    wr32(gpu, VGPU_REG_RING_SIZE, 4);
    wr32(gpu, VGPU_REG_RING_TAIL, 1);
    wr32(gpu, VGPU_REG_DOORBELL, 1);
    vgpu_step(gpu, 4096 + VGPU_CMD_SIZE);
    vgpu_state_save(gpu, blob, VGPU_STATE_SIZE, NULL);
    vgpu_free(gpu);
}

/* ------------------------------------------------------ stream seeds */

struct stream_opts {
    bool busy;            /* device state with a command in flight */
    bool bad_range;       /* a PAGES run past the end of VRAM */
    bool zeros_wrap;      /* a ZEROS run whose end wraps around */
    bool short_state;     /* a DEVICE_STATE of the wrong size */
    bool truncate;        /* no END record */
    unsigned zeros_flood; /* this many ZEROS of all of VRAM first */
    bool postcopy;        /* a POSTCOPY record before the state */
    int listed;           /* version 3: page 1 as a PAGES_LISTED record;
                             < 0: its data not those listed (stale) */
    uint32_t version;     /* stream version, 0: MIG_STREAM_VERSION */
    bool pieces; /* version 4: PAGE_PIECES of page 1 (with its hash; all
                    its pieces where it is stale, which mends it) and of
                    page 0 */
};

static void make_stream(struct buf *b, const struct stream_opts *o)
{
    static uint8_t rec[MIG_REC_MAX];
    uint8_t pages[4 * FUZZ_PAGE], blob[VGPU_STATE_SIZE];
    struct vgpu *gpu = new_gpu();
    struct mig_stream_config cfg = {FUZZ_VRAM, FUZZ_PAGE, features(gpu)};
    const uint64_t npages = FUZZ_VRAM / FUZZ_PAGE;
    const uint32_t version = o->version ? o->version : MIG_STREAM_VERSION;
    struct mig_enc *enc;
    struct vg_error err;
    uint64_t hash;

    if (mig_enc_new(version, FUZZ_PAGE, MIG_RUN_MAX_BYTES, &enc, &err) < 0) {
        fprintf(stderr, "gen-seeds: %s\n", err.msg);
        exit(1);
    }
    for (size_t i = 0; i < sizeof(pages); i++) {
        pages[i] = (uint8_t)(i * 7 + i / FUZZ_PAGE);
    }
    put(b, rec, mig_enc_header(enc, &cfg, rec));
    for (unsigned i = 0; i < o->zeros_flood; i++) {
        put(b, rec, mig_enc_zeros(enc, 0, npages, rec));
    }
    put(b, rec, mig_enc_pages(enc, 0, 2, pages, rec));
    put(b, rec, mig_enc_zeros(enc, 2, npages - 4, rec));
    if (o->bad_range) {
        put(b, rec, mig_enc_pages(enc, npages - 1, 2, pages, rec));
    }
    if (o->zeros_wrap) {
        put(b, rec, mig_enc_zeros(enc, UINT64_MAX, 2, rec));
    }
    put(b, rec, mig_enc_pages(enc, npages - 2, 2, pages + 2 * FUZZ_PAGE, rec));
    hash =
        mig_stream_page_hash(version, pages + 3 * FUZZ_PAGE, FUZZ_PAGE, NULL);
    if (o->listed) {
        put(b, rec, mig_enc_pages_listed_ref(enc, 1, 1, &hash, true, rec));
        put(b, pages + (o->listed < 0 ? 2 : 3) * FUZZ_PAGE, FUZZ_PAGE);
    } else {
        put(b, rec, mig_enc_pages(enc, 1, 1, pages + 3 * FUZZ_PAGE, rec));
    }
    if (o->pieces) {
        put(b, rec,
            mig_enc_page_pieces(enc, 1, o->listed < 0 ? ~0ull : 0x8001,
                                pages + 3 * FUZZ_PAGE, true, hash, rec));
        put(b, rec,
            mig_enc_page_pieces(enc, 0, 1ull << 63, pages + FUZZ_PAGE, false, 0,
                                rec));
    }
    if (o->postcopy) {
        struct mig_postcopy_info pc = {.npages = npages, .pending = 3};

        memset(pc.token, 0x5c, sizeof(pc.token));
        snprintf(pc.addr, sizeof(pc.addr), "/nonexistent/vgpu-pages.sock");
        put(b, rec, mig_enc_postcopy(enc, &pc, rec));
    }
    if (o->busy) {
        busy_state(blob);
    } else {
        vgpu_state_save(gpu, blob, sizeof(blob), NULL);
    }
    put(b, rec,
        mig_enc_state(enc, blob, o->short_state ? 100 : sizeof(blob), rec));
    if (!o->truncate) {
        put(b, rec, mig_enc_end(enc, rec));
    }
    mig_enc_free(enc);
    vgpu_free(gpu);
}

static void stream_seed(const char *name, uint8_t flags, uint8_t chunking,
                        const struct stream_opts *o)
{
    struct buf b = {0};

    put_u8(&b, flags);
    put_u8(&b, chunking);
    make_stream(&b, o);
    save("stream", name, &b);
    free(b.p);
}

static void stream_seeds(void)
{
    const uint8_t fix = FUZZ_STREAM_RESEAL | FUZZ_STREAM_FIX_END;

    stream_seed("valid-one-write", 0, 0, &(struct stream_opts){0});
    stream_seed("valid-chunks-128", 0, 7, &(struct stream_opts){0});
    stream_seed("valid-chunks-1", 0, 21, &(struct stream_opts){0});
    stream_seed("valid-resealed", fix, 12, &(struct stream_opts){0});
    stream_seed("valid-v1", 0, 7, &(struct stream_opts){.version = 1});
    stream_seed("valid-v2", 0, 7, &(struct stream_opts){.version = 2});
    stream_seed("valid-v3-listed", 0, 7,
                &(struct stream_opts){.listed = 1, .version = 3});
    stream_seed("stale-v3-listed", 0, 7,
                &(struct stream_opts){.listed = -1, .version = 3});
    stream_seed("valid-v4-pieces", 0, 7,
                &(struct stream_opts){.pieces = true, .version = 4});
    stream_seed(
        "stale-v4-mended", 0, 7,
        &(struct stream_opts){.listed = -1, .pieces = true, .version = 4});
    stream_seed("valid-v5-pieces", 0, 7,
                &(struct stream_opts){.pieces = true, .version = 5});
    stream_seed(
        "stale-v5-mended", 0, 7,
        &(struct stream_opts){.listed = -1, .pieces = true, .version = 5});
    stream_seed("valid-v6-pieces", 0, 7, &(struct stream_opts){.pieces = true});
    stream_seed("stale-v6-mended", 0, 7,
                &(struct stream_opts){.listed = -1, .pieces = true});
    stream_seed("valid-v6-pieces-resealed", fix, 7,
                &(struct stream_opts){.pieces = true});
    stream_seed("valid-v1-resealed", fix, 12,
                &(struct stream_opts){.version = 1});
    stream_seed("valid-busy-device", fix, 0,
                &(struct stream_opts){.busy = true});
    stream_seed("bad-pages-past-end", fix, 9,
                &(struct stream_opts){.bad_range = true});
    stream_seed("bad-zeros-wrap", fix, 0,
                &(struct stream_opts){.zeros_wrap = true});
    stream_seed("bad-state-size", fix, 0,
                &(struct stream_opts){.short_state = true});
    stream_seed("bad-truncated", 0, 5, &(struct stream_opts){.truncate = true});
    stream_seed("postcopy", fix, 3, &(struct stream_opts){.postcopy = true});
    stream_seed("zeros-flood", fix, 0,
                &(struct stream_opts){.zeros_flood = 2000});
    stream_seed("zeros-flood-chunked", fix, 8,
                &(struct stream_opts){.zeros_flood = 200, .busy = true});
}

/* --------------------------------------------------------- cmd seeds */

static void put_cmd(struct buf *b, uint16_t op, uint64_t a0, uint64_t a1,
                    uint64_t a2, uint64_t a3, uint64_t a4, uint64_t a5)
{
    struct vgpu_cmd c = vgpu_cmd_make(op, a0, a1, a2, a3, a4, a5);
    uint8_t raw[VGPU_CMD_SIZE];

    vgpu_cmd_encode(&c, raw);
    put(b, raw, sizeof(raw));
}

static void cmd_seeds(void)
{
    const uint64_t ram = 0x100000; /* fuzz-cmd's guest RAM */
    struct buf b = {0};

    /* 64 KiB VRAM (4 KiB << 4), slices of 256 bytes */
    put_u8(&b, 4);
    put_u8(&b, 8);
    put_cmd(&b, VGPU_OP_NOP, 0, 0, 0, 0, 0, 0);
    put_cmd(&b, VGPU_OP_FILL, 0x1000, 0x2000, 0xdeadbeef, 0, 0, 0);
    put_cmd(&b, VGPU_OP_COPY, 0x4000, 0x1000, 0x2000, 0, 0, 0);
    put_cmd(&b, VGPU_OP_DMA_TO_VRAM, 0x8000, ram, 0x3000, 0, 0, 0);
    put_cmd(&b, VGPU_OP_DMA_FROM_VRAM, ram + 0x4000, 0x1000, 0x1000, 0, 0, 0);
    put_cmd(&b, VGPU_OP_AXPY, 0x4000, 0x1000, 0x400, 0x3f800000, 0, 0);
    put_cmd(&b, VGPU_OP_FENCE, 42, 0, 0, 0, 0, 0);
    save("cmd", "every-op", &b);

    /* SCATTER_ADD: indices FILLed first (all 3), then an index 9 >= rows */
    reset(&b);
    put_u8(&b, 4);
    put_u8(&b, 2);
    put_cmd(&b, VGPU_OP_FILL, 0xf000, 0x100, 3, 0, 0, 0);
    put_cmd(&b, VGPU_OP_SCATTER_ADD, 0, 8, 0x200, 0xf000, 0x40, 0x3f800000);
    put_cmd(&b, VGPU_OP_FILL, 0xf000, 4, 9, 0, 0, 0);
    put_cmd(&b, VGPU_OP_SCATTER_ADD, 0, 8, 0x200, 0xf000, 0x40, 0x3f800000);
    save("cmd", "scatter", &b);

    /* 4 KiB VRAM, one slice: edges of VRAM and of guest RAM */
    reset(&b);
    put_u8(&b, 0);
    put_u8(&b, 20);
    put_cmd(&b, VGPU_OP_FILL, 0, 4096, 1, 0, 0, 0);
    put_cmd(&b, VGPU_OP_FILL, 4092, 4, 1, 0, 0, 0);
    put_cmd(&b, VGPU_OP_FILL, 4092, 8, 1, 0, 0, 0);
    put_cmd(&b, VGPU_OP_COPY, 0, 2048, 2048, 0, 0, 0);
    put_cmd(&b, VGPU_OP_COPY, 0, 2047, 2048, 0, 0, 0);
    put_cmd(&b, VGPU_OP_DMA_TO_VRAM, 0, ram + 0xf000, 0x1000, 0, 0, 0);
    put_cmd(&b, VGPU_OP_DMA_TO_VRAM, 0, ram + 0xf001, 0x1000, 0, 0, 0);
    put_cmd(&b, VGPU_OP_DMA_FROM_VRAM, UINT64_MAX - 15, 0, 32, 0, 0, 0);
    put_cmd(&b, VGPU_OP_AXPY, 0, 0, 1024, 0x40000000, 0, 0);
    put_cmd(&b, VGPU_OP_SCATTER_ADD, 0, 1, 4092, 4092, 1, 0);
    save("cmd", "edges", &b);
    free(b.p);
}

/* --------------------------------------------------------- vfu seeds */

static uint16_t msg_id;

static void msg(struct buf *b, uint16_t cmd, const void *payload, size_t len,
                unsigned nfds)
{
    struct vfu_hdr h = {.id = msg_id++,
                        .command = cmd,
                        .size = (uint32_t)(sizeof(h) + len),
                        .error = nfds};

    put(b, &h, sizeof(h));
    put(b, payload, len);
}

/* VERSION with the capabilities JSON @json (NUL included in the message). */
static void msg_version_json(struct buf *b, const char *json)
{
    struct vfu_version v = {VFU_VERSION_MAJOR, VFU_VERSION_MINOR};
    uint8_t p[512];

    memcpy(p, &v, sizeof(v));
    memcpy(p + sizeof(v), json, strlen(json) + 1);
    msg(b, VFU_CMD_VERSION, p, sizeof(v) + strlen(json) + 1, 0);
}

/* VERSION proposing migration with both protocol extensions. */
static void msg_version_ext(struct buf *b)
{
    msg_version_json(b, "{\"capabilities\":{\"max_msg_fds\":16,"
                        "\"max_data_xfer_size\":1048576,\"pgsizes\":4096,"
                        "\"migration\":{\"pgsize\":4096,"
                        "\"max_bitmap_size\":1048576,"
                        "\"precopy_info\":true,\"region_dirty_log\":true}}}");
}

/* VERSION proposing migration with data_shm too (patch 0021). */
static void msg_version_shm(struct buf *b)
{
    msg_version_json(b, "{\"capabilities\":{\"max_msg_fds\":16,"
                        "\"max_data_xfer_size\":1048576,\"pgsizes\":4096,"
                        "\"migration\":{\"pgsize\":4096,"
                        "\"max_bitmap_size\":1048576,"
                        "\"precopy_info\":true,\"region_dirty_log\":true,"
                        "\"data_shm\":true}}}");
}

static void msg_version(struct buf *b, bool migration)
{
    static const char plain[] = "{\"capabilities\":{\"max_msg_fds\":16,"
                                "\"max_data_xfer_size\":1048576,"
                                "\"pgsizes\":4096,\"max_dma_maps\":65535}}";
    static const char mig[] =
        "{\"capabilities\":{\"max_msg_fds\":16,"
        "\"max_data_xfer_size\":1048576,\"pgsizes\":4096,"
        "\"migration\":{\"pgsize\":4096,\"max_bitmap_size\":1048576,"
        "\"precopy_info\":true}}}";

    msg_version_json(b, migration ? mig : plain);
}

static void msg_rw(struct buf *b, bool write, uint32_t region, uint64_t off,
                   const void *data, uint32_t count)
{
    struct vfu_region_rw rw = {off, region, count};
    uint8_t p[sizeof(rw) + 256];

    memcpy(p, &rw, sizeof(rw));
    if (write) {
        memcpy(p + sizeof(rw), data, count);
    }
    msg(b, write ? VFU_CMD_REGION_WRITE : VFU_CMD_REGION_READ, p,
        sizeof(rw) + (write ? count : 0), 0);
}

static void reg_wr(struct buf *b, uint32_t reg, uint32_t v)
{
    msg_rw(b, true, VGPU_BAR_REGS, reg, &v, 4);
}

static void reg_rd(struct buf *b, uint32_t reg)
{
    msg_rw(b, false, VGPU_BAR_REGS, reg, NULL, 4);
}

static void msg_dma_map(struct buf *b, uint64_t iova, uint64_t size,
                        uint64_t off, uint32_t flags, bool fd)
{
    struct vfu_dma_map m = {sizeof(m), flags, off, iova, size};

    msg(b, VFU_CMD_DMA_MAP, &m, sizeof(m), fd ? 1 : 0);
}

static void msg_dma_unmap(struct buf *b, uint64_t iova, uint64_t size,
                          uint32_t flags)
{
    struct vfu_dma_unmap u = {sizeof(u), flags, iova, size};

    msg(b, VFU_CMD_DMA_UNMAP, &u, sizeof(u), 0);
}

static void msg_feature(struct buf *b, uint32_t flags, uint32_t argsz,
                        const void *data, size_t len)
{
    struct vfu_device_feature f = {argsz, flags};
    uint8_t p[4096];

    memcpy(p, &f, sizeof(f));
    if (len) {
        memcpy(p + sizeof(f), data, len);
    }
    msg(b, VFU_CMD_DEVICE_FEATURE, p, sizeof(f) + len, 0);
}

static void msg_mig_state(struct buf *b, uint32_t state)
{
    struct vfu_feature_mig_state st = {state, -1};

    msg_feature(b, VFIO_DEVICE_FEATURE_SET | VFU_FEATURE_MIG_DEVICE_STATE,
                sizeof(struct vfu_device_feature) + sizeof(st), &st,
                sizeof(st));
}

static void msg_mig_read(struct buf *b, uint32_t size)
{
    struct vfu_mig_data d = {sizeof(d) + size, size};

    msg(b, VFU_CMD_MIG_DATA_READ, &d, sizeof(d), 0);
}

/* MIG_DATA_{READ,WRITE}_SHM of @size bytes at @slot, with @flags. */
static void msg_shm_io_flags(struct buf *b, uint16_t cmd, uint32_t slot,
                             uint32_t size, uint32_t flags)
{
    struct vfu_mig_shm_io io = {sizeof(io), slot, size, flags};

    msg(b, cmd, &io, sizeof(io), 0);
}

/* MIG_DATA_{READ,WRITE}_SHM of @size bytes at @slot. */
static void msg_shm_io(struct buf *b, uint16_t cmd, uint32_t slot,
                       uint32_t size)
{
    msg_shm_io_flags(b, cmd, slot, size, 0);
}

/* The harness's configuration (first message): 64 KiB pages if @big. */
static void msg_config(struct buf *b, bool big, uint8_t track, uint8_t precopy)
{
    uint8_t p[3] = {big, track, precopy};

    msg(b, FUZZ_VFU_CONFIG, p, sizeof(p), 0);
}

/* REGION_DIRTY_LOG of BAR2: @size bytes at @off in @pgsize granules, every
 * bitmap word @word. */
static void msg_dirty_log(struct buf *b, uint32_t pgsize, uint64_t off,
                          uint64_t size, uint64_t word)
{
    uint64_t words = (size / pgsize + 63) / 64;
    struct vfu_region_dirty_log d = {
        (uint32_t)(sizeof(d) + words * 8), VGPU_BAR_VRAM, pgsize, 0, off, size};
    struct buf m = {0};

    put(&m, &d, sizeof(d));
    for (uint64_t i = 0; i < words; i++) {
        put(&m, &word, 8);
    }
    msg(b, VFU_CMD_REGION_DIRTY_LOG, m.p, m.len, 0);
    free(m.p);
}

/* A message for the harness carrying the kind of its @nfds fds. */
static void msg_fds(struct buf *b, uint16_t cmd, const void *payload,
                    size_t len, unsigned nfds, unsigned kind)
{
    msg(b, cmd, payload, len, nfds | kind << FUZZ_VFU_FD_SHIFT);
}

static void poke(struct buf *b, uint32_t off, const void *data, size_t len)
{
    uint8_t p[4096];

    memcpy(p, &off, 4);
    memcpy(p + 4, data, len);
    msg(b, FUZZ_VFU_POKE, p, 4 + len, 0);
}

/* Ring of 16 entries at guest RAM offset 0 with @n entries; run them. */
static void ring_run(struct buf *b, const struct vgpu_cmd *cmds, unsigned n)
{
    uint8_t raw[16 * VGPU_CMD_SIZE];

    for (unsigned i = 0; i < n; i++) {
        vgpu_cmd_encode(&cmds[i], raw + i * VGPU_CMD_SIZE);
    }
    poke(b, 0, raw, n * VGPU_CMD_SIZE);
    reg_wr(b, VGPU_REG_RING_BASE_LO, (uint32_t)RAM_IOVA);
    reg_wr(b, VGPU_REG_RING_BASE_HI, 0);
    reg_wr(b, VGPU_REG_RING_SIZE, 16);
    reg_wr(b, VGPU_REG_IRQ_MASK, VGPU_IRQ_FENCE | VGPU_IRQ_ERROR);
    reg_wr(b, VGPU_REG_RING_TAIL, n);
    reg_wr(b, VGPU_REG_DOORBELL, 1);
    reg_rd(b, VGPU_REG_FENCE_LO);
    reg_rd(b, VGPU_REG_ERROR_CODE);
    reg_rd(b, VGPU_REG_CMDS_DONE);
}

/*
 * A source migration as the patched QEMU drives it with both protocol
 * extensions: BAR2 mapped (its fd), pre-copy with PRECOPY_INFO, guest
 * CPU writes to BAR2 reported with REGION_DIRTY_LOG (QEMU's 4 KiB pages
 * and, as issue 13's input, one granule of all of VRAM with a word of all
 * ones), a ring writing VRAM, stop-copy read to the end.
 */
static void mig_save_ext(struct buf *b, bool big)
{
    const uint64_t vram = big ? FUZZ_VRAM_64K : FUZZ_VRAM;
    struct vfu_region_info ri = {sizeof(ri), 0, VGPU_BAR_VRAM, 0, 0, 0};
    struct vfu_precopy_info pi = {sizeof(pi), 0, 0, 0};
    uint8_t data[64];

    memset(data, 0x3c, sizeof(data));
    msg_version_ext(b);
    msg(b, VFU_CMD_DEVICE_GET_REGION_INFO, &ri, sizeof(ri), 0);
    msg_dma_map(b, RAM_IOVA, FUZZ_VFU_RAM, 0,
                VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE, true);
    msg_mig_state(b, 6 /* PRE_COPY */);
    msg(b, VFU_CMD_MIG_GET_PRECOPY_INFO, &pi, 8, 0);
    msg_mig_read(b, 65536);
    msg_rw(b, true, VGPU_BAR_VRAM, 0x2000, data, sizeof(data));
    msg_dirty_log(b, 4096, 0, vram, 0x4ull);
    msg_dirty_log(b, (uint32_t)vram, 0, vram, ~0ull);
    {
        const struct vgpu_cmd cmds[] = {
            vgpu_cmd_make(VGPU_OP_FILL, 0x10000, 0x1000, 0x77, 0, 0, 0),
            vgpu_cmd_make(VGPU_OP_DMA_TO_VRAM, 0x20000, RAM_IOVA + 0x1000,
                          0x1000, 0, 0, 0),
        };
        ring_run(b, cmds, 2);
    }
    msg(b, VFU_CMD_MIG_GET_PRECOPY_INFO, &pi, 8, 0);
    msg_mig_read(b, 65536);
    msg_mig_read(b, 65536);
    msg(b, VFU_CMD_MIG_GET_PRECOPY_INFO, &pi, 8, 0);
    msg_mig_state(b, 3 /* STOP_COPY */);
    msg_rw(b, true, VGPU_BAR_VRAM, 0, data, sizeof(data)); /* refused */
    for (int i = 0; i < (big ? 20 : 6); i++) {
        msg_mig_read(b, 65536);
    }
    msg_mig_state(b, 1 /* STOP */);
    msg_mig_state(b, 2 /* RUNNING */);
}

/*
 * A source and a destination migration through the data_shm area: the
 * area asked for (twice), pre-copy and stop-copy read through both
 * slots, a slot and a size out of range; then RESUMING written from a
 * slot.
 */
static void mig_shm(struct buf *b)
{
    const uint32_t shm[2] = {sizeof(struct vfu_mig_shm), 0};
    struct vfu_precopy_info pi = {sizeof(pi), 0, 0, 0};

    msg_version_shm(b);
    msg(b, VFU_CMD_MIG_DATA_SHM, shm, sizeof(shm), 0);
    msg_mig_state(b, 6 /* PRE_COPY */);
    msg(b, VFU_CMD_MIG_GET_PRECOPY_INFO, &pi, 8, 0);
    msg_shm_io(b, VFU_CMD_MIG_DATA_READ_SHM, 0, 65536);
    msg_shm_io(b, VFU_CMD_MIG_DATA_READ_SHM, 1, 65536);
    msg_shm_io(b, VFU_CMD_MIG_DATA_READ_SHM, 2, 65536);
    msg_shm_io(b, VFU_CMD_MIG_DATA_READ_SHM, 0, (1u << 20) + 1);
    msg(b, VFU_CMD_MIG_DATA_SHM, shm, sizeof(shm), 0);
    msg_mig_state(b, 3 /* STOP_COPY */);
    for (uint32_t i = 0; i < 6; i++) {
        msg_shm_io(b, VFU_CMD_MIG_DATA_READ_SHM, i % 2, 65536);
    }
    msg_mig_state(b, 1 /* STOP */);
    msg_mig_state(b, 4 /* RESUMING */);
    msg_shm_io(b, VFU_CMD_MIG_DATA_WRITE_SHM, 0, 4096);
    msg_mig_state(b, 1 /* STOP */);
    msg_mig_state(b, 2 /* RUNNING */);
}

/* The data_shm extension's seed (after the others, whose message ids it
 * would otherwise shift). */
static void vfu_seeds_data_shm(void)
{
    struct buf b = {0};

    mig_shm(&b);
    save("vfu", "mig-data-shm", &b);
    free(b.p);
}

/*
 * The data_vram extension (patches 0074-0076, 0079): the view of VRAM
 * asked for (also writable, refused outside RESUMING), stop-copy read as
 * pieces through both slots, a write that asks for pieces without listing
 * them, the writable view in RESUMING and a write that lists its pieces;
 * after every other seed, whose message ids it would otherwise shift.
 */
static void vfu_seeds_data_vram(void)
{
    const uint32_t shm[2] = {sizeof(struct vfu_mig_shm), 0};
    const uint32_t view[2] = {sizeof(struct vfu_mig_vram), 0};
    const uint32_t view_flags[2] = {sizeof(struct vfu_mig_vram), 1};
    const struct {
        struct vfu_mig_shm_io io;
        uint32_t count, reserved;
        struct vfu_mig_piece piece[2];
    } placed = {{sizeof(placed), 1, 32 + 4096, VFU_MIG_SHM_IO_PIECES},
                2,
                0,
                {{0, 32, VFU_MIG_PIECE_SLOT}, {0, 4096, VFU_MIG_PIECE_VRAM}}};
    struct buf b = {0};

    msg_version_json(&b, "{\"capabilities\":{\"max_msg_fds\":16,"
                         "\"max_data_xfer_size\":1048576,\"pgsizes\":4096,"
                         "\"migration\":{\"pgsize\":4096,"
                         "\"max_bitmap_size\":1048576,"
                         "\"precopy_info\":true,\"data_shm\":true,"
                         "\"data_vram\":true}}}");
    msg(&b, VFU_CMD_MIG_DATA_SHM, shm, sizeof(shm), 0);
    msg(&b, VFU_CMD_MIG_DATA_VRAM, view, sizeof(view), 0);
    msg(&b, VFU_CMD_MIG_DATA_VRAM, view_flags, sizeof(view_flags), 0);
    msg_mig_state(&b, 6 /* PRE_COPY */);
    msg_shm_io_flags(&b, VFU_CMD_MIG_DATA_READ_SHM, 0, 65536,
                     VFU_MIG_SHM_IO_PIECES);
    msg_mig_state(&b, 3 /* STOP_COPY */);
    for (uint32_t i = 0; i < 6; i++) {
        msg_shm_io_flags(&b, VFU_CMD_MIG_DATA_READ_SHM, i % 2, 1u << 20,
                         VFU_MIG_SHM_IO_PIECES);
    }
    msg_mig_state(&b, 1 /* STOP */);
    msg_mig_state(&b, 4 /* RESUMING */);
    msg_shm_io_flags(&b, VFU_CMD_MIG_DATA_WRITE_SHM, 0, 4096,
                     VFU_MIG_SHM_IO_PIECES);
    /* the writable view, and a write of a slot piece and a VRAM piece */
    msg(&b, VFU_CMD_MIG_DATA_VRAM, view_flags, sizeof(view_flags), 0);
    msg(&b, VFU_CMD_MIG_DATA_WRITE_SHM, &placed, sizeof(placed), 0);
    msg_mig_state(&b, 1 /* STOP */);
    save("vfu", "mig-data-vram", &b);
    free(b.p);
}

/* Issue 13's seeds: the extensions, every mode, every fd kind. */
static void vfu_seeds_issue13(void)
{
    static const char *const track[] = {"hybrid", "hash", "none"};
    static const char *const precopy[] = {"iterative", "one-shot", "none"};
    const uint32_t rw = VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE;
    struct buf b = {0};
    char name[64];

    /* the issue's three messages, 4 KiB pages */
    msg_version_ext(&b);
    msg_mig_state(&b, 6 /* PRE_COPY */);
    msg_dirty_log(&b, FUZZ_VRAM, 0, FUZZ_VRAM, ~0ull);
    save("vfu", "dirty-log-past-nbits", &b);

    for (uint8_t t = 0; t < 3; t++) {
        for (uint8_t p = 0; p < 3; p++) {
            reset(&b);
            msg_config(&b, true, t, p);
            mig_save_ext(&b, true);
            snprintf(name, sizeof(name), "mig-save-64k-%s-%s", track[t],
                     precopy[p]);
            save("vfu", name, &b);
        }
    }
    reset(&b);
    mig_save_ext(&b, false);
    save("vfu", "mig-save-ext-4k", &b);

    /* every kind of fd for DMA_MAP and SET_IRQS; the unsealed memfd
     * shrunk; a ring where it would be mapped */
    reset(&b);
    msg_version(&b, false);
    for (unsigned k = 0; k < FUZZ_FD_KINDS; k++) {
        struct vfu_dma_map m = {sizeof(m), rw, 0, RAM_IOVA + k * 0x100000ull,
                                FUZZ_VFU_RAM};
        struct vfu_irq_set is = {
            sizeof(is), VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
            VFIO_PCI_MSIX_IRQ_INDEX, k % 2, 1};
        msg_fds(&b, VFU_CMD_DMA_MAP, &m, sizeof(m), 1, k);
        msg_fds(&b, VFU_CMD_DEVICE_SET_IRQS, &is, sizeof(is), 1, k);
        is.flags = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER;
        msg(&b, VFU_CMD_DEVICE_SET_IRQS, &is, sizeof(is), 0);
    }
    {
        uint32_t size = 0;
        msg(&b, FUZZ_VFU_TRUNCATE, &size, sizeof(size), 0);
        reg_wr(&b, VGPU_REG_RING_BASE_LO,
               (uint32_t)(RAM_IOVA + FUZZ_FD_LOOSE * 0x100000ull));
        reg_wr(&b, VGPU_REG_RING_SIZE, 16);
        reg_wr(&b, VGPU_REG_RING_TAIL, 1);
        reg_wr(&b, VGPU_REG_DOORBELL, 1);
        reg_rd(&b, VGPU_REG_ERROR_CODE);
        size = FUZZ_VFU_RAM / 2;
        msg(&b, FUZZ_VFU_TRUNCATE, &size, sizeof(size), 0);
    }
    msg_dma_unmap(&b, 0, 0, VFIO_DMA_UNMAP_FLAG_ALL);
    save("vfu", "fd-kinds", &b);
    free(b.p);
}

static void vfu_seeds(void)
{
    const uint32_t rw = VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE;
    struct buf b = {0};
    uint8_t data[256];

    for (size_t i = 0; i < sizeof(data); i++) {
        data[i] = (uint8_t)(i ^ 0x5c);
    }

    msg_version(&b, false);
    save("vfu", "version", &b);

    /* what QEMU asks at realize */
    reset(&b);
    msg_version(&b, true);
    {
        struct vfu_device_info di = {sizeof(di), 0, 0, 0};
        msg(&b, VFU_CMD_DEVICE_GET_INFO, &di, sizeof(di), 0);
    }
    for (uint32_t i = 0; i < VFIO_PCI_NUM_REGIONS; i++) {
        struct vfu_region_info ri = {sizeof(ri), 0, i, 0, 0, 0};
        msg(&b, VFU_CMD_DEVICE_GET_REGION_INFO, &ri, sizeof(ri), 0);
        ri.argsz = 64; /* room for the sparse mmap capability */
        msg(&b, VFU_CMD_DEVICE_GET_REGION_INFO, &ri, sizeof(ri), 0);
    }
    for (uint32_t i = 0; i < VFIO_PCI_NUM_IRQS; i++) {
        struct vfu_irq_info ii = {sizeof(ii), 0, i, 0};
        msg(&b, VFU_CMD_DEVICE_GET_IRQ_INFO, &ii, sizeof(ii), 0);
    }
    save("vfu", "realize", &b);

    /* region accesses: config space, BAR0 registers and MSI-X, BAR2 */
    reset(&b);
    msg_version(&b, false);
    msg_rw(&b, false, VFIO_PCI_CONFIG_REGION_INDEX, 0, NULL, 64);
    {
        uint16_t cmd = 0x0006; /* memory space, bus master */
        msg_rw(&b, true, VFIO_PCI_CONFIG_REGION_INDEX, 4, &cmd, 2);
    }
    msg_rw(&b, false, VFIO_PCI_CONFIG_REGION_INDEX, 0x40, NULL, 16);
    reg_rd(&b, VGPU_REG_ID);
    reg_rd(&b, VGPU_REG_VRAM_SIZE_LO);
    reg_wr(&b, VGPU_REG_SCRATCH, 0x12345678);
    reg_rd(&b, VGPU_REG_SCRATCH);
    msg_rw(&b, true, VGPU_BAR_REGS, VGPU_MSIX_TABLE_OFFSET, data, 32);
    msg_rw(&b, false, VGPU_BAR_REGS, VGPU_MSIX_TABLE_OFFSET, NULL, 32);
    msg_rw(&b, false, VGPU_BAR_REGS, VGPU_MSIX_PBA_OFFSET, NULL, 8);
    msg_rw(&b, true, VGPU_BAR_VRAM, 0x1000, data, 256);
    msg_rw(&b, false, VGPU_BAR_VRAM, 0x1000, NULL, 256);
    msg_rw(&b, false, VGPU_BAR_VRAM, FUZZ_VRAM - 16, NULL, 16);
    save("vfu", "regions", &b);

    /* DMA and the ring: every command, a bad one, error clear, unmap */
    reset(&b);
    msg_version(&b, false);
    msg_dma_map(&b, RAM_IOVA, FUZZ_VFU_RAM / 2, 0, rw, true);
    msg_dma_map(&b, RAM_IOVA + FUZZ_VFU_RAM / 2, FUZZ_VFU_RAM / 2,
                FUZZ_VFU_RAM / 2, VFIO_DMA_MAP_FLAG_READ, true);
    msg_dma_map(&b, 0x40000000, 0x10000, 0, rw, false);
    {
        const uint64_t r = RAM_IOVA;
        const struct vgpu_cmd cmds[] = {
            vgpu_cmd_make(VGPU_OP_FILL, 0, 0x4000, 0xabcdef01, 0, 0, 0),
            vgpu_cmd_make(VGPU_OP_COPY, 0x8000, 0, 0x4000, 0, 0, 0),
            vgpu_cmd_make(VGPU_OP_DMA_TO_VRAM, 0x10000, r + 0x1000, 0x2000, 0,
                          0, 0),
            vgpu_cmd_make(VGPU_OP_DMA_FROM_VRAM, r + 0x8000, 0, 0x1000, 0, 0,
                          0),
            vgpu_cmd_make(VGPU_OP_AXPY, 0x8000, 0, 0x100, 0x3f800000, 0, 0),
            vgpu_cmd_make(VGPU_OP_FILL, 0x20000, 0x40, 1, 0, 0, 0),
            vgpu_cmd_make(VGPU_OP_SCATTER_ADD, 0x30000, 4, 0x100, 0x20000, 0x10,
                          0x40000000),
            vgpu_cmd_make(VGPU_OP_FENCE, 7, 0, 0, 0, 0, 0),
            /* into the read-only half: a DMA fault */
            vgpu_cmd_make(VGPU_OP_DMA_FROM_VRAM, r + FUZZ_VFU_RAM / 2, 0,
                          0x1000, 0, 0, 0),
        };
        ring_run(&b, cmds, sizeof(cmds) / sizeof(cmds[0]));
    }
    reg_wr(&b, VGPU_REG_IRQ_STATUS, VGPU_IRQ_ERROR);
    reg_rd(&b, VGPU_REG_STATUS);
    msg_dma_unmap(&b, RAM_IOVA, FUZZ_VFU_RAM / 2, 0);
    msg_dma_unmap(&b, 0, 0, VFIO_DMA_UNMAP_FLAG_ALL);
    save("vfu", "dma-ring", &b);

    /* interrupts: MSI-X eventfds, INTx with mask/unmask, disable */
    reset(&b);
    msg_version(&b, false);
    {
        struct vfu_irq_set s = {
            sizeof(s), VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
            VFIO_PCI_MSIX_IRQ_INDEX, 0, 2};
        msg(&b, VFU_CMD_DEVICE_SET_IRQS, &s, sizeof(s), 2);
        s.flags = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER;
        msg(&b, VFU_CMD_DEVICE_SET_IRQS, &s, sizeof(s), 0);
        s = (struct vfu_irq_set){
            sizeof(s), VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
            VFIO_PCI_INTX_IRQ_INDEX, 0, 1};
        msg(&b, VFU_CMD_DEVICE_SET_IRQS, &s, sizeof(s), 1);
        uint8_t p[sizeof(s) + 1];
        s.flags = VFIO_IRQ_SET_DATA_BOOL | VFIO_IRQ_SET_ACTION_UNMASK;
        memcpy(p, &s, sizeof(s));
        p[sizeof(s)] = 1;
        msg(&b, VFU_CMD_DEVICE_SET_IRQS, p, sizeof(p), 0);
        s.flags = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_MASK;
        msg(&b, VFU_CMD_DEVICE_SET_IRQS, &s, sizeof(s), 0);
        s = (struct vfu_irq_set){
            sizeof(s), VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER,
            VFIO_PCI_MSIX_IRQ_INDEX, 0, 0};
        msg(&b, VFU_CMD_DEVICE_SET_IRQS, &s, sizeof(s), 0);
    }
    msg(&b, VFU_CMD_DEVICE_RESET, NULL, 0, 0);
    save("vfu", "irqs-reset", &b);

    /* source side: pre-copy, DMA logging, stop-copy, read all */
    reset(&b);
    msg_version(&b, true);
    {
        uint64_t u64 = 0;
        msg_feature(&b, VFIO_DEVICE_FEATURE_GET | VFU_FEATURE_MIGRATION, 16,
                    &u64, 0);
        msg_feature(&b,
                    VFIO_DEVICE_FEATURE_PROBE | VFIO_DEVICE_FEATURE_SET |
                        VFU_FEATURE_DMA_LOGGING_START,
                    8, NULL, 0);
    }
    msg_dma_map(&b, RAM_IOVA, FUZZ_VFU_RAM, 0, rw, true);
    {
        struct {
            struct vfu_dma_logging_control c;
            struct vfu_dma_logging_range r;
        } lc = {{4096, 1, 0}, {RAM_IOVA, FUZZ_VFU_RAM}};
        msg_feature(&b, VFIO_DEVICE_FEATURE_SET | VFU_FEATURE_DMA_LOGGING_START,
                    sizeof(struct vfu_device_feature) + sizeof(lc), &lc,
                    sizeof(lc));
    }
    reg_wr(&b, VGPU_REG_SCRATCH, 1);
    msg_mig_state(&b, 6 /* PRE_COPY */);
    {
        struct vfu_precopy_info pi = {sizeof(pi), 0, 0, 0};
        msg(&b, VFU_CMD_MIG_GET_PRECOPY_INFO, &pi, 8, 0);
    }
    msg_mig_read(&b, 65536);
    msg_mig_read(&b, 100);
    {
        const struct vgpu_cmd cmds[] = {
            vgpu_cmd_make(VGPU_OP_FILL, 0x3000, 0x100, 9, 0, 0, 0),
            vgpu_cmd_make(VGPU_OP_DMA_FROM_VRAM, RAM_IOVA + 0x2000, 0x3000,
                          0x100, 0, 0, 0),
        };
        ring_run(&b, cmds, 2);
    }
    {
        struct vfu_dma_logging_report rep = {RAM_IOVA, FUZZ_VFU_RAM, 4096};
        msg_feature(&b,
                    VFIO_DEVICE_FEATURE_GET | VFU_FEATURE_DMA_LOGGING_REPORT,
                    sizeof(struct vfu_device_feature) + sizeof(rep) + 64, &rep,
                    sizeof(rep));
        uint64_t ds = 0;
        msg_feature(&b, VFIO_DEVICE_FEATURE_GET | VFU_FEATURE_MIG_DATA_SIZE, 16,
                    &ds, 0);
    }
    msg_mig_state(&b, 3 /* STOP_COPY */);
    for (int i = 0; i < 6; i++) {
        msg_mig_read(&b, 65536);
    }
    msg_feature(&b, VFIO_DEVICE_FEATURE_SET | VFU_FEATURE_DMA_LOGGING_STOP, 8,
                NULL, 0);
    msg_mig_state(&b, 1 /* STOP */);
    msg_mig_state(&b, 2 /* RUNNING */);
    save("vfu", "mig-save", &b);

    /* destination side: a whole valid stream in two writes */
    reset(&b);
    msg_version(&b, true);
    msg_mig_state(&b, 1 /* STOP */);
    msg_mig_state(&b, 4 /* RESUMING */);
    {
        struct buf s = {0};
        make_stream(&s, &(struct stream_opts){.busy = true});
        size_t half = s.len / 2;
        for (int part = 0; part < 2; part++) {
            size_t off = part ? half : 0, n = part ? s.len - half : half;
            struct vfu_mig_data d = {sizeof(d) + (uint32_t)n, (uint32_t)n};
            struct buf m = {0};
            put(&m, &d, sizeof(d));
            put(&m, s.p + off, n);
            msg(&b, VFU_CMD_MIG_DATA_WRITE, m.p, m.len, 0);
            free(m.p);
        }
        free(s.p);
    }
    msg_mig_state(&b, 1 /* STOP */);
    reg_rd(&b, VGPU_REG_RING_HEAD);
    msg_mig_state(&b, 2 /* RUNNING */);
    save("vfu", "mig-load", &b);

    /* malformed: before VERSION, unknown command, bad flags, then a header
     * that cannot be framed (size 8), which ends the connection */
    reset(&b);
    reg_rd(&b, VGPU_REG_ID);
    msg_version(&b, false);
    msg(&b, 99, NULL, 0, 0);
    {
        struct vfu_hdr h = {.id = 1, .command = 9, .size = 16, .flags = 5};
        put(&b, &h, sizeof(h));
        h = (struct vfu_hdr){.id = 2, .command = 9, .size = 8};
        put(&b, &h, sizeof(h));
    }
    save("vfu", "malformed", &b);
    free(b.p);
}

/* --------------------------------------------------------- sock seeds */

/* A sock input: the prefix (fuzz.h), then the messages of @msgs. */
static void sock_seed(const char *name, uint8_t flags, uint8_t chunking,
                      uint16_t seed, const struct buf *msgs)
{
    struct buf b = {0};

    put_u8(&b, flags);
    put_u8(&b, chunking);
    put(&b, &seed, sizeof(seed));
    put(&b, msgs->p, msgs->len);
    save("sock", name, &b);
    free(b.p);
}

/* A header of @size bytes whose body the harness sends as zero bytes. */
static void msg_fill(struct buf *b, uint16_t cmd, uint32_t size)
{
    struct vfu_hdr h = {
        .id = msg_id++, .command = cmd, .size = size, .error = FUZZ_SOCK_FILL};

    put(b, &h, sizeof(h));
}

/* What QEMU sends from realize to a finished source migration, its
 * memory a sealed memfd, MSI-X on eventfds, BAR2 mapped from its fd. */
static void qemu_session(struct buf *b)
{
    const uint32_t rw = VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE;
    struct vfu_device_info di = {sizeof(di), 0, 0, 0};
    struct vfu_irq_set is = {
        sizeof(is), VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
        VFIO_PCI_MSIX_IRQ_INDEX, 0, 2};
    struct vfu_precopy_info pi = {sizeof(pi), 0, 0, 0};
    uint16_t cmd = 0x0006;

    msg_version(b, true);
    msg(b, VFU_CMD_DEVICE_GET_INFO, &di, sizeof(di), 0);
    for (uint32_t i = 0; i < VFIO_PCI_NUM_REGIONS; i++) {
        struct vfu_region_info ri = {sizeof(ri), 0, i, 0, 0, 0};
        msg(b, VFU_CMD_DEVICE_GET_REGION_INFO, &ri, sizeof(ri), 0);
    }
    for (uint32_t i = 0; i < VFIO_PCI_NUM_IRQS; i++) {
        struct vfu_irq_info ii = {sizeof(ii), 0, i, 0};
        msg(b, VFU_CMD_DEVICE_GET_IRQ_INFO, &ii, sizeof(ii), 0);
    }
    msg_rw(b, false, VFIO_PCI_CONFIG_REGION_INDEX, 0, NULL, 64);
    msg_rw(b, true, VFIO_PCI_CONFIG_REGION_INDEX, 4, &cmd, 2);
    msg_dma_map(b, RAM_IOVA, FUZZ_VFU_RAM, 0, rw, true);
    msg(b, VFU_CMD_DEVICE_SET_IRQS, &is, sizeof(is), 2);
    reg_rd(b, VGPU_REG_ID);
    reg_wr(b, VGPU_REG_SCRATCH, 0x5a5a5a5a);
    reg_wr(b, VGPU_REG_RING_BASE_LO, (uint32_t)RAM_IOVA);
    reg_wr(b, VGPU_REG_RING_SIZE, 16);
    reg_wr(b, VGPU_REG_RING_TAIL, 1);
    reg_wr(b, VGPU_REG_DOORBELL, 1);
    reg_rd(b, VGPU_REG_ERROR_CODE);
    msg_mig_state(b, 6 /* PRE_COPY */);
    msg(b, VFU_CMD_MIG_GET_PRECOPY_INFO, &pi, 8, 0);
    msg_mig_read(b, 65536);
    msg_mig_state(b, 3 /* STOP_COPY */);
    for (int i = 0; i < 6; i++) {
        msg_mig_read(b, 65536);
    }
    msg_mig_state(b, 1 /* STOP */);
    msg_dma_unmap(b, 0, 0, VFIO_DMA_UNMAP_FLAG_ALL);
}

/* Every fd kind on DMA_MAP and SET_IRQS; fds on a message that takes
 * none; more fds than the server takes. */
static void sock_fd_kinds(struct buf *b)
{
    const uint32_t rw = VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE;

    msg_version(b, false);
    for (unsigned k = 0; k < FUZZ_FD_KINDS; k++) {
        struct vfu_dma_map m = {sizeof(m), rw, 0, RAM_IOVA + k * 0x100000ull,
                                FUZZ_VFU_RAM};
        struct vfu_irq_set is = {
            sizeof(is), VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
            VFIO_PCI_MSIX_IRQ_INDEX, k % 2, 1};
        msg_fds(b, VFU_CMD_DMA_MAP, &m, sizeof(m), 1, k);
        msg_fds(b, VFU_CMD_DEVICE_SET_IRQS, &is, sizeof(is), 1, k);
        is.flags = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER;
        msg(b, VFU_CMD_DEVICE_SET_IRQS, &is, sizeof(is), 0);
    }
    {
        struct vfu_region_rw r = {VGPU_REG_ID, VGPU_BAR_REGS, 4};
        struct vfu_irq_set is = {
            sizeof(is), VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
            VFIO_PCI_MSIX_IRQ_INDEX, 0, 15};
        msg_fds(b, VFU_CMD_REGION_READ, &r, sizeof(r), 3, FUZZ_FD_PIPE);
        msg_fds(b, VFU_CMD_DEVICE_SET_IRQS, &is, sizeof(is), 15,
                FUZZ_FD_EVENTFD);
        msg_fds(b, VFU_CMD_DMA_MAP, &is, 4, 9, FUZZ_FD_SEALED);
    }
    msg_dma_unmap(b, 0, 0, VFIO_DMA_UNMAP_FLAG_ALL);
    reg_rd(b, VGPU_REG_STATUS);
}

/* Refused messages: one of 2 MiB whose body is drained, one with a bad
 * type, then service goes on; a last one of 4 GiB that the client stops
 * sending. */
static void sock_oversized(struct buf *b)
{
    struct vfu_hdr h = {.id = msg_id++, .command = 3, .size = 24, .flags = 1};
    uint64_t junk = 0;

    msg_version(b, false);
    msg_fill(b, VFU_CMD_MIG_DATA_WRITE, 2u << 20);
    reg_rd(b, VGPU_REG_ID);
    put(b, &h, sizeof(h)); /* a reply, not a request */
    put(b, &junk, sizeof(junk));
    msg_fill(b, VFU_CMD_REGION_WRITE, (1u << 20) + 64); /* just fits */
    reg_rd(b, VGPU_REG_SCRATCH);
    h = (struct vfu_hdr){.id = msg_id++, .command = 3, .size = 0xffffffffu};
    put(b, &h, sizeof(h));
    put(b, &junk, sizeof(junk));
}

static void sock_seeds(void)
{
    static const uint8_t chunkings[] = {0, 1, 2, 5, 13, 21};
    struct buf b = {0};
    char name[64];

    qemu_session(&b);
    for (size_t i = 0; i < sizeof(chunkings); i++) {
        snprintf(name, sizeof(name), "qemu-session-chunk%u", chunkings[i]);
        sock_seed(name, 0, chunkings[i], (uint16_t)(0x1234 + i), &b);
    }
    sock_seed("qemu-session-64k", FUZZ_SOCK_BIG, 7, 0x77, &b);

    reset(&b);
    sock_fd_kinds(&b);
    sock_seed("fd-kinds", 0, 1, 0, &b);
    sock_seed("fd-kinds-chunk3", 0, 3, 0x42, &b);

    reset(&b);
    sock_oversized(&b);
    sock_seed("oversized", 0, 0, 0, &b);
    sock_seed("oversized-chunk9", 0, 9, 0x99, &b);

    /* a client hanging up mid-body, mid-header, after a NO_REPLY write */
    reset(&b);
    msg_version(&b, false);
    {
        size_t at = b.len;
        uint32_t flags = VFU_FLAG_REQUEST | VFU_FLAG_NO_REPLY;
        reg_wr(&b, VGPU_REG_SCRATCH, 7);
        memcpy(b.p + at + offsetof(struct vfu_hdr, flags), &flags, 4);
    }
    reg_rd(&b, VGPU_REG_SCRATCH);
    reg_wr(&b, VGPU_REG_SCRATCH, 8);
    sock_seed("close-mid-body", FUZZ_SOCK_CLOSE, 5, 3,
              &(struct buf){b.p, b.len - 6, 0});
    sock_seed("eof-mid-body", 0, 1, 0, &(struct buf){b.p, b.len - 6, 0});
    sock_seed("close-mid-header", FUZZ_SOCK_CLOSE, 0, 0,
              &(struct buf){b.p, b.len - 30, 0});
    sock_seed("eof-mid-header", 0, 2, 9, &(struct buf){b.p, b.len - 30, 0});

    /* the connection ends on an unframeable header, on a bad major */
    reset(&b);
    msg_version(&b, false);
    {
        struct vfu_hdr h = {.id = msg_id++, .command = 9, .size = 8};
        put(&b, &h, sizeof(h));
        reg_rd(&b, VGPU_REG_ID);
    }
    sock_seed("unframeable", 0, 21, 1, &b);
    reset(&b);
    {
        struct vfu_version v = {VFU_VERSION_MAJOR + 1, 0};
        msg(&b, VFU_CMD_VERSION, &v, sizeof(v), 0);
        reg_rd(&b, VGPU_REG_ID);
    }
    sock_seed("version-major", 0, 1, 0, &b);
    free(b.p);
}

/* The data plane's thread on a real socket: reads of the data_shm area
 * with register and config reads between them, whose replies may come
 * first (vfu-plane.c); a state change behind reads; a write. */
static void sock_seeds_data_plane(void)
{
    const uint32_t shm[2] = {sizeof(struct vfu_mig_shm), 0};
    struct buf b = {0};

    msg_version_shm(&b);
    msg(&b, VFU_CMD_MIG_DATA_SHM, shm, sizeof(shm), 0);
    reg_wr(&b, VGPU_REG_SCRATCH, 0x1234);
    msg_mig_state(&b, 6 /* PRE_COPY */);
    for (uint32_t i = 0; i < 10; i++) {
        msg_shm_io(&b, VFU_CMD_MIG_DATA_READ_SHM, i % 4, 1u << 20);
        reg_rd(&b, i % 2 ? VGPU_REG_STATUS : VGPU_REG_SCRATCH);
        msg_rw(&b, false, VFIO_PCI_CONFIG_REGION_INDEX, 0, NULL, 4);
    }
    msg_shm_io(&b, VFU_CMD_MIG_DATA_READ_SHM, 99, 4096); /* no such slot */
    reg_wr(&b, VGPU_REG_SCRATCH, 0x5678);
    msg_mig_state(&b, 3 /* STOP_COPY */);
    for (uint32_t i = 0; i < 4; i++) {
        msg_shm_io(&b, VFU_CMD_MIG_DATA_READ_SHM, i, 1u << 20);
        reg_rd(&b, VGPU_REG_SCRATCH);
    }
    msg_mig_state(&b, 1 /* STOP */);
    msg_mig_state(&b, 4 /* RESUMING */);
    msg_shm_io(&b, VFU_CMD_MIG_DATA_WRITE_SHM, 0, 4096);
    reg_rd(&b, VGPU_REG_ID);
    msg_mig_state(&b, 1 /* STOP */);
    sock_seed("data-plane", 0, 0, 0, &b);
    sock_seed("data-plane-chunk7", 0, 7, 0x35, &b);
    free(b.p);
}

int main(int argc, char **argv)
{
    if (argc != 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        printf("Usage: gen-seeds DIR\n"
               "Write the seed corpora of the fuzz targets into "
               "DIR/vfu, DIR/stream, DIR/cmd and DIR/sock\n"
               "(files named seed-*; other files there are left alone).\n"
               "The output is deterministic: `make fuzz-seeds` rewrites "
               "tests/fuzz/corpus.\n"
               "See tests/fuzz/fuzz.h for the input formats and "
               "docs/fuzzing.md.\n");
        return argc == 2 ? 0 : 2;
    }
    outdir = argv[1];
    if (mkdir(outdir, 0755) < 0 && errno != EEXIST) {
        fprintf(stderr, "gen-seeds: mkdir %s: %s\n", outdir, strerror(errno));
        return 1;
    }
    vfu_seeds();
    vfu_seeds_issue13();
    stream_seeds();
    cmd_seeds();
    sock_seeds(); /* msg_id goes on from the vfu seeds */
    vfu_seeds_data_shm();
    sock_seeds_data_plane(); /* msg_id goes on from the others */
    vfu_seeds_data_vram();   /* last, likewise */
    return 0;
}
