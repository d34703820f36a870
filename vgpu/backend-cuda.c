/*
 * backend-cuda.c -- VRAM in GPU memory, engines as CUDA kernels, page
 * hashes computed on the GPU.
 *
 * libcuda is loaded with dlopen (cuda-drv.c) and the kernels come from
 * the fatbin embedded at build time (cuda-kernels.cu).  All work goes to
 * one stream.  Host copies go through pinned buffers:
 *  - stage: two halves; a write copies into the current half after what
 *    it holds and starts the host-to-device copy without waiting, so the
 *    next write (the next record of a migration stream, or the guest's
 *    next store through the trapped BAR2) fills the rest of it or the
 *    other half meanwhile; a half is reused once its copies are done;
 *  - slots: read-ahead buffers filled by prefetch() with asynchronous
 *    device-to-host copies, consumed by read(); any write to VRAM through
 *    this backend drops the slots it overlaps.
 * Host memory registered with host_register() (the migration's shared
 * area) is pinned by the driver: reads into it and writes from it copy
 * straight between it and VRAM, waiting for the copy instead of staging
 * it, and prefetch() is then skipped (its copy would be staged).
 * Hashing uploads the page selection, runs vg_hash_pages and brings back
 * 8 bytes per page and the zero bitmap: page data never crosses PCIe.
 * A hashed read (read_hashed, or a read_ahead given hashes) queues the
 * hash kernel on the pages just before the copy that takes them, on the
 * one stream under op_lock, so both see the same bytes; a hashed write
 * queues it just after the copy that writes them.
 */
#include "backend-cuda.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "common/log.h"
#include "cuda-drv.h"
#include "cuda-fatbin.h"
#include "vgpu.h"

#define STAGE_HALF        (4u << 20) /* bytes in each half of the stage */
#define SLOT_BYTES        (2u << 20) /* a read-ahead slot */
#define SLOTS             4
#define THREADS           256u
#define MAX_BLOCKS        4096u
#define SECRET_BYTES      192
#define HOST_RANGES       4 /* host_register() ranges at once */
#define RUN_HASH_LAUNCHES 100

/* Must match struct vg_xxh3_keys and vg_hash_keys in cuda-kernels.cu. */
struct xxh3_keys {
    uint64_t stripe[24];
    uint64_t last[8];
    uint64_t merge[8];
};

struct hash_keys {
    struct xxh3_keys k[2];
};

struct slot {
    uint8_t *buf; /* pinned, SLOT_BYTES */
    CUevent done;
    uint64_t off, len;
    bool valid;
};

struct half {
    uint8_t *buf;  /* pinned, STAGE_HALF */
    CUevent done;  /* recorded after the last copy that reads buf */
    uint64_t used; /* bytes of buf taken by copies since it was free */
    bool busy;
};

struct host_range {
    uint8_t *ptr; /* NULL: free */
    uint64_t len;
};

struct cuda_be {
    struct vgc_api api;
    CUdevice dev;
    CUcontext ctx;
    bool ctx_retained;
    CUmodule mod;
    CUfunction axpy, add, scatter_check, scatter_add, hash, hash_run, read_only;
    CUstream stream;
    CUdeviceptr vram;
    struct half stage[2];
    unsigned next_half;
    struct slot slots[SLOTS];
    unsigned next_slot;
    uint64_t *misc; /* pinned, one word for small results */
    /* Hashing scratch, for up to hash_pages pages. */
    uint64_t hash_pages;
    CUdeviceptr d_select, d_hashes, d_zero, d_misc;
    uint64_t *h_hashes, *h_zero; /* pinned */
    /* Hashes of a hashed read, for up to run_pages pages: seed 0's, seed
     * 1's, then the zero bitmap, on the device and pinned. */
    uint64_t run_pages;
    CUdeviceptr d_run;
    uint64_t *h_run;
    pthread_mutex_t host_lock; /* host[] */
    pthread_mutex_t op_lock;   /* one call at a time (see "Any thread") */
    struct host_range host[HOST_RANGES];
    bool reads_direct; /* the last read went straight to host memory */
    struct {           /* a copy to or from registered memory in flight */
        uint64_t off, len;
        const void *host;
        bool on, write;             /* write_async, else read_ahead */
        bool hashed;                /* a read_ahead with hashes ... */
        uint32_t page_size, nseeds; /* ... of these pages and seeds */
        uint64_t seeds[2];
    } ahead;
    char desc[160];
};

static struct cuda_be *cb(const struct vgpu_backend *be)
{
    return be->priv;
}

static int check(struct cuda_be *c, CUresult r, const char *what,
                 struct vg_error *err)
{
    return vgc_check(&c->api, r, what, err);
}

/* Make the context current for this thread (any thread may call). */
static int enter(struct cuda_be *c, struct vg_error *err)
{
    return check(c, c->api.CtxSetCurrent(c->ctx), "cuCtxSetCurrent", err);
}

static int sync_stream(struct cuda_be *c, struct vg_error *err)
{
    return check(c, c->api.StreamSynchronize(c->stream), "cuStreamSynchronize",
                 err);
}

static unsigned blocks_for(uint64_t n, unsigned per_block)
{
    uint64_t b = (n + per_block - 1) / per_block;

    return b < 1 ? 1 : b > MAX_BLOCKS ? MAX_BLOCKS : (unsigned)b;
}

static int launch(struct cuda_be *c, CUfunction fn, unsigned blocks,
                  unsigned threads, void **params, const char *what,
                  struct vg_error *err)
{
    return check(c,
                 c->api.LaunchKernel(fn, blocks, 1, 1, threads, 1, 1, 0,
                                     c->stream, params, NULL),
                 what, err);
}

/* --------------------------------------------------------------- set-up */

static int load_module(struct cuda_be *c, struct vg_error *err)
{
    static const struct {
        const char *name;
        size_t offset;
    } fns[] = {
        {"vg_axpy", offsetof(struct cuda_be, axpy)},
        {"vg_add", offsetof(struct cuda_be, add)},
        {"vg_scatter_check", offsetof(struct cuda_be, scatter_check)},
        {"vg_scatter_add", offsetof(struct cuda_be, scatter_add)},
        {"vg_hash_pages", offsetof(struct cuda_be, hash)},
        {"vg_hash_run", offsetof(struct cuda_be, hash_run)},
        {"vg_read_only", offsetof(struct cuda_be, read_only)},
    };
    int ret = check(c, c->api.ModuleLoadData(&c->mod, vgc_fatbin),
                    "loading the embedded kernels (cuModuleLoadData)", err);

    for (size_t i = 0; ret == 0 && i < sizeof(fns) / sizeof(fns[0]); i++) {
        CUfunction *fn = (CUfunction *)((char *)c + fns[i].offset);

        ret = check(c, c->api.ModuleGetFunction(fn, c->mod, fns[i].name),
                    fns[i].name, err);
    }
    return ret;
}

static int open_device(struct cuda_be *c, int ordinal, struct vg_error *err)
{
    char name[96] = "?";
    int count = 0, version = 0;
    int ret = check(c, c->api.DeviceGetCount(&count), "cuDeviceGetCount", err);

    if (ret == 0 && ordinal >= count) {
        return vg_error_set(err, ENODEV, "GPU %d: this machine has %d GPU%s",
                            ordinal, count, count == 1 ? "" : "s");
    }
    if (ret == 0) {
        ret = check(c, c->api.DeviceGet(&c->dev, ordinal), "cuDeviceGet", err);
    }
    if (ret == 0) {
        ret = check(c, c->api.DevicePrimaryCtxRetain(&c->ctx, c->dev),
                    "cuDevicePrimaryCtxRetain", err);
        c->ctx_retained = ret == 0;
    }
    if (ret == 0) {
        ret = enter(c, err);
    }
    if (ret == 0) {
        c->api.DeviceGetName(name, sizeof(name), c->dev);
        c->api.DriverGetVersion(&version);
        snprintf(c->desc, sizeof(c->desc), "%s (GPU %d), CUDA driver %d.%d",
                 name, ordinal, version / 1000, version % 1000 / 10);
    }
    return ret;
}

static int alloc_buffers(struct cuda_be *c, uint64_t size, struct vg_error *err)
{
    struct vgc_api *a = &c->api;
    int ret = check(c, a->StreamCreate(&c->stream, VGC_STREAM_NON_BLOCKING),
                    "cuStreamCreate", err);

    if (ret == 0) {
        ret = check(c, a->MemAlloc(&c->vram, size), "allocating VRAM", err);
    }
    if (ret == 0) {
        ret = check(c, a->MemsetD32Async(c->vram, 0, size / 4, c->stream),
                    "clearing VRAM", err);
    }
    for (unsigned i = 0; ret == 0 && i < 2; i++) {
        ret = check(c, a->MemAllocHost((void **)&c->stage[i].buf, STAGE_HALF),
                    "pinned staging buffer", err);
        if (ret == 0) {
            ret = check(c, a->EventCreate(&c->stage[i].done, VGC_EVENT_DEFAULT),
                        "cuEventCreate", err);
        }
    }
    for (unsigned i = 0; ret == 0 && i < SLOTS; i++) {
        ret = check(c, a->MemAllocHost((void **)&c->slots[i].buf, SLOT_BYTES),
                    "pinned read-ahead buffer", err);
        if (ret == 0) {
            ret = check(c, a->EventCreate(&c->slots[i].done, VGC_EVENT_DEFAULT),
                        "cuEventCreate", err);
        }
    }
    if (ret == 0) {
        ret = check(c, a->MemAllocHost((void **)&c->misc, 64),
                    "pinned result word", err);
    }
    if (ret == 0) {
        ret = check(c, a->MemAlloc(&c->d_misc, 64), "device result word", err);
    }
    return ret == 0 ? sync_stream(c, err) : ret;
}

static void free_hash_scratch(struct cuda_be *c)
{
    if (c->d_select) {
        c->api.MemFree(c->d_select);
    }
    if (c->h_hashes) {
        c->api.MemFreeHost(c->h_hashes);
    }
    if (c->h_zero) {
        c->api.MemFreeHost(c->h_zero);
    }
    c->d_select = c->d_hashes = c->d_zero = 0;
    c->h_hashes = c->h_zero = NULL;
    c->hash_pages = 0;
}

static void free_run_scratch(struct cuda_be *c)
{
    if (c->d_run) {
        c->api.MemFree(c->d_run);
    }
    if (c->h_run) {
        c->api.MemFreeHost(c->h_run);
    }
    c->d_run = 0;
    c->h_run = NULL;
    c->run_pages = 0;
}

static void cuda_fini(struct vgpu_backend *be)
{
    struct cuda_be *c = cb(be);
    struct vgc_api *a = &c->api;

    if (!c) {
        return;
    }
    if (c->ctx_retained) {
        a->CtxSetCurrent(c->ctx);
        if (c->stream) {
            a->StreamSynchronize(c->stream);
        }
        free_hash_scratch(c);
        free_run_scratch(c);
        for (unsigned i = 0; i < HOST_RANGES; i++) {
            if (c->host[i].ptr) {
                a->MemHostUnregister(c->host[i].ptr);
            }
        }
        for (unsigned i = 0; i < SLOTS; i++) {
            if (c->slots[i].buf) {
                a->MemFreeHost(c->slots[i].buf);
            }
            if (c->slots[i].done) {
                a->EventDestroy(c->slots[i].done);
            }
        }
        for (unsigned i = 0; i < 2; i++) {
            if (c->stage[i].buf) {
                a->MemFreeHost(c->stage[i].buf);
            }
            if (c->stage[i].done) {
                a->EventDestroy(c->stage[i].done);
            }
        }
        if (c->misc) {
            a->MemFreeHost(c->misc);
        }
        if (c->d_misc) {
            a->MemFree(c->d_misc);
        }
        if (c->vram) {
            a->MemFree(c->vram);
        }
        if (c->stream) {
            a->StreamDestroy(c->stream);
        }
        if (c->mod) {
            a->ModuleUnload(c->mod);
        }
        a->DevicePrimaryCtxRelease(c->dev);
    }
    vgc_unload(a);
    pthread_mutex_destroy(&c->host_lock);
    pthread_mutex_destroy(&c->op_lock);
    free(c);
    be->priv = NULL;
}

static int cuda_init(struct vgpu_backend *be, struct vg_error *err)
{
    struct cuda_be *c;
    int ret;

    if (vgc_fatbin_size == 0) {
        return vg_error_set(err, ENOTSUP,
                            "this build has no CUDA kernels: it was configured "
                            "without CUDA (./configure --with-cuda=yes needs "
                            "nvcc and cuda.h)");
    }
    c = calloc(1, sizeof(*c));
    if (!c) {
        return vg_error_set(err, ENOMEM, "out of memory");
    }
    pthread_mutex_init(&c->host_lock, NULL);
    pthread_mutex_init(&c->op_lock, NULL);
    be->priv = c;
    ret = vgc_load(&c->api, err);
    if (ret == 0) {
        ret = open_device(c, be->device, err);
    }
    if (ret == 0) {
        ret = load_module(c, err);
    }
    if (ret == 0) {
        ret = alloc_buffers(c, be->size, err);
    }
    if (ret < 0) {
        cuda_fini(be);
        return ret;
    }
    vg_info("cuda backend: %" PRIu64 " MiB of VRAM on %s", be->size >> 20,
            c->desc);
    return 0;
}

static const char *cuda_describe(const struct vgpu_backend *be)
{
    return cb(be)->desc;
}

/* ------------------------------------------------------------- hashing */

/* XXH3's keys for @seed, laid out for the kernel. */
static void xxh3_keys(uint64_t seed, struct xxh3_keys *k)
{
    uint8_t secret[SECRET_BYTES];

    XXH3_generateSecret_fromSeed(secret, seed);
    memcpy(k->stripe, secret, sizeof(k->stripe));
    for (unsigned i = 0; i < 8; i++) {
        memcpy(&k->last[i], secret + SECRET_BYTES - 64 - 7 + 8 * i, 8);
        memcpy(&k->merge[i], secret + 11 + 8 * i, 8);
    }
}

static int hash_scratch(struct cuda_be *c, uint64_t pages, struct vg_error *err)
{
    uint64_t words = (pages + 63) / 64;
    int ret;

    if (pages <= c->hash_pages) {
        return 0;
    }
    free_hash_scratch(c);
    /* one allocation: select words, hashes, zero words */
    ret = check(c, c->api.MemAlloc(&c->d_select, (words * 2 + pages) * 8),
                "hash scratch", err);
    if (ret == 0) {
        c->d_hashes = c->d_select + words * 8;
        c->d_zero = c->d_hashes + pages * 8;
        ret = check(c, c->api.MemAllocHost((void **)&c->h_hashes, pages * 8),
                    "pinned hash array", err);
    }
    if (ret == 0) {
        ret = check(c, c->api.MemAllocHost((void **)&c->h_zero, words * 8),
                    "pinned zero bitmap", err);
    }
    if (ret == 0) {
        c->hash_pages = pages;
    } else {
        free_hash_scratch(c);
    }
    return ret;
}

/* Enqueue vg_hash_pages over every page, or @select's, into d_hashes
 * and d_zero. */
static int hash_all(struct cuda_be *c, uint64_t pages, uint32_t page_size,
                    const uint64_t *select, uint64_t seed, struct vg_error *err)
{
    uint64_t words = (pages + 63) / 64, warps_per_block = THREADS / 32;
    CUdeviceptr d_sel = select ? c->d_select : 0;
    struct xxh3_keys keys;
    void *params[] = {&c->vram, &pages,       &page_size, &d_sel,
                      &keys,    &c->d_hashes, &c->d_zero};
    int ret = 0;

    xxh3_keys(seed, &keys);
    if (select) {
        memcpy(c->h_zero, select, words * 8); /* pinned bounce */
        ret = check(c,
                    c->api.MemcpyHtoDAsync(c->d_select, c->h_zero, words * 8,
                                           c->stream),
                    "page selection", err);
    }
    if (ret == 0) {
        ret =
            check(c, c->api.MemsetD32Async(c->d_zero, 0, words * 2, c->stream),
                  "zero bitmap", err);
    }
    if (ret == 0) {
        ret = check(
            c,
            c->api.LaunchKernel(
                c->hash,
                (unsigned)((pages + warps_per_block - 1) / warps_per_block), 1,
                1, THREADS, 1, 1, 0, c->stream, params, NULL),
            "page hash kernel", err);
    }
    return ret;
}

/* Enqueue vg_hash_run over the @pages pages at VRAM offset @off with
 * @nseeds of @seeds, into @d_hashes (seed 1's follow seed 0's) and
 * @d_zero, which it clears first. */
static int hash_run(struct cuda_be *c, uint64_t off, uint64_t pages,
                    uint32_t page_size, const uint64_t *seeds, uint32_t nseeds,
                    CUdeviceptr d_hashes, CUdeviceptr d_zero,
                    struct vg_error *err)
{
    CUdeviceptr base = c->vram + off, d_h1 = d_hashes + pages * 8;
    struct hash_keys keys = {0};
    void *params[] = {&base,   &pages,    &page_size, &keys,
                      &nseeds, &d_hashes, &d_h1,      &d_zero};
    int ret;

    for (uint32_t k = 0; k < nseeds; k++) {
        xxh3_keys(seeds[k], &keys.k[k]);
    }
    ret = check(
        c, c->api.MemsetD32Async(d_zero, 0, (pages + 63) / 64 * 2, c->stream),
        "zero bitmap", err);
    if (ret == 0) {
        ret = check(c,
                    c->api.LaunchKernel(c->hash_run, (unsigned)pages, 1, 1,
                                        THREADS, 1, 1, 0, c->stream, params,
                                        NULL),
                    "read hash kernel", err);
    }
    return ret;
}

/* Room for the hashes of a read of @pages pages. */
static int run_scratch(struct cuda_be *c, uint64_t pages, struct vg_error *err)
{
    uint64_t bytes = (2 * pages + (pages + 63) / 64) * 8;
    int ret;

    if (pages <= c->run_pages) {
        return 0;
    }
    free_run_scratch(c);
    ret = check(c, c->api.MemAlloc(&c->d_run, bytes), "read hash scratch", err);
    if (ret == 0) {
        ret = check(c, c->api.MemAllocHost((void **)&c->h_run, bytes),
                    "pinned read hashes", err);
    }
    if (ret == 0) {
        c->run_pages = pages;
    } else {
        free_run_scratch(c);
    }
    return ret;
}

/* Enqueue the hashes of the pages of [@off, +@len) (whole pages, @h's
 * size and seeds) and their copy back into h_run; the caller copies the
 * pages next, on the same stream. */
static int run_hash_enqueue(struct cuda_be *c, uint64_t off, uint64_t len,
                            const struct vgpu_copy_hashes *h,
                            struct vg_error *err)
{
    uint64_t pages = len / h->page_size;
    uint64_t bytes = (2 * pages + (pages + 63) / 64) * 8;
    int ret = run_scratch(c, pages, err);

    if (ret == 0) {
        ret = hash_run(c, off, pages, h->page_size, h->seeds, h->nseeds,
                       c->d_run, c->d_run + 2 * pages * 8, err);
    }
    if (ret == 0) {
        ret = check(
            c, c->api.MemcpyDtoHAsync(c->h_run, c->d_run, bytes, c->stream),
            "read hashes", err);
    }
    return ret;
}

/* Hand out the hashes of a read of @len bytes, once its stream is done. */
static void run_hash_out(struct cuda_be *c, uint64_t len,
                         const struct vgpu_copy_hashes *h)
{
    uint64_t pages = len / h->page_size;

    for (uint32_t k = 0; k < h->nseeds; k++) {
        memcpy(h->hashes[k], c->h_run + k * pages, pages * 8);
    }
    if (h->zero) {
        memcpy(h->zero, c->h_run + 2 * pages, (pages + 63) / 64 * 8);
    }
}

static int cuda_hash(struct vgpu_backend *be, const struct vgpu_hash_req *r,
                     struct vg_error *err)
{
    struct cuda_be *c = cb(be);
    uint64_t words = (r->pages + 63) / 64;
    int ret = enter(c, err);

    if (ret == 0) {
        ret = hash_scratch(c, r->pages, err);
    }
    if (ret == 0) {
        ret = hash_all(c, r->pages, r->page_size, r->select, r->seed, err);
    }
    if (ret == 0) {
        ret = check(c,
                    c->api.MemcpyDtoHAsync(c->h_hashes, c->d_hashes,
                                           r->pages * 8, c->stream),
                    "page hashes", err);
    }
    if (ret == 0) {
        ret = check(
            c,
            c->api.MemcpyDtoHAsync(c->h_zero, c->d_zero, words * 8, c->stream),
            "zero bitmap", err);
    }
    if (ret == 0) {
        ret = sync_stream(c, err);
    }
    for (uint64_t w = 0; ret == 0 && w < words; w++) {
        uint64_t sel = r->select ? r->select[w] : ~0ull, left = sel;

        if (w == words - 1 && r->pages % 64) {
            sel &= (1ull << (r->pages % 64)) - 1;
            left = sel;
        }
        while (left) {
            uint64_t p = w * 64 + (uint64_t)__builtin_ctzll(left);

            r->hashes[p] = c->h_hashes[p];
            left &= left - 1;
        }
        if (r->zero) {
            r->zero[w] = (r->zero[w] & ~sel) | (c->h_zero[w] & sel);
        }
    }
    return ret;
}

/* ------------------------------------------------------- host <-> VRAM */

static bool overlaps(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
    return a < b + blen && b < a + alen;
}

/* VRAM [off, off + len) is about to change: drop read-ahead copies of it. */
static void slots_drop(struct cuda_be *c, uint64_t off, uint64_t len)
{
    for (unsigned i = 0; i < SLOTS; i++) {
        if (c->slots[i].valid &&
            overlaps(off, len, c->slots[i].off, c->slots[i].len)) {
            c->slots[i].valid = false;
        }
    }
}

static struct slot *slot_covering(struct cuda_be *c, uint64_t off, uint64_t len)
{
    for (unsigned i = 0; i < SLOTS; i++) {
        struct slot *s = &c->slots[i];

        if (s->valid && off >= s->off && off + len <= s->off + s->len) {
            return s;
        }
    }
    return NULL;
}

/* Whether [@p, @p + @len) lies in registered host memory. */
static bool host_direct(struct cuda_be *c, const void *p, uint64_t len)
{
    const uint8_t *b = p;
    bool in = false;

    pthread_mutex_lock(&c->host_lock);
    for (unsigned i = 0; i < HOST_RANGES && !in; i++) {
        const struct host_range *h = &c->host[i];

        in = h->ptr && b >= h->ptr && len <= h->len &&
             (uint64_t)(b - h->ptr) <= h->len - len;
    }
    pthread_mutex_unlock(&c->host_lock);
    return in;
}

/* The stream has drained: both halves of the stage are free. */
static void stage_free(struct cuda_be *c)
{
    for (unsigned i = 0; i < 2; i++) {
        c->stage[i].busy = false;
        c->stage[i].used = 0;
    }
}

/* Wait for a direct copy of @len bytes queued last (and everything before
 * it: the stage is free again too), and count it. */
static int direct_done(struct vgpu_backend *be, uint64_t len,
                       struct vg_error *err)
{
    struct cuda_be *c = cb(be);
    int ret = sync_stream(c, err);

    if (ret == 0) {
        stage_free(c);
        be->direct_bytes += len;
    }
    return ret;
}

/* A direct copy of [@off, +@len) into registered @dst, not waited for. */
static void cuda_read_ahead(struct vgpu_backend *be, uint64_t off, void *dst,
                            uint64_t len, const struct vgpu_copy_hashes *h)
{
    struct cuda_be *c = cb(be);

    if (c->ahead.on || len == 0 || !host_direct(c, dst, len) ||
        enter(c, NULL) < 0 || (h && run_hash_enqueue(c, off, len, h, NULL))) {
        return;
    }
    c->ahead.on =
        c->api.MemcpyDtoHAsync(dst, c->vram + off, len, c->stream) == 0;
    c->ahead.off = off;
    c->ahead.host = dst;
    c->ahead.len = len;
    c->ahead.write = false;
    c->ahead.hashed = h != NULL;
    if (h) {
        c->ahead.page_size = h->page_size;
        c->ahead.nseeds = h->nseeds;
        memcpy(c->ahead.seeds, h->seeds, sizeof(c->ahead.seeds));
    }
}

/* The read ahead in flight took the hashes @h asks for (any, if NULL). */
static bool ahead_hashes(const struct cuda_be *c,
                         const struct vgpu_copy_hashes *h)
{
    if (!h) {
        return true;
    }
    if (!c->ahead.hashed || c->ahead.page_size != h->page_size ||
        c->ahead.nseeds != h->nseeds) {
        return false;
    }
    for (uint32_t k = 0; k < h->nseeds; k++) {
        if (c->ahead.seeds[k] != h->seeds[k]) {
            return false;
        }
    }
    return true;
}

/* Wait for a copy in flight; its bytes count as copied directly if @used
 * (a write_async always is). */
static int ahead_settle(struct vgpu_backend *be, bool used,
                        struct vg_error *err)
{
    struct cuda_be *c = cb(be);
    int ret;

    if (!c->ahead.on) {
        return 0;
    }
    c->ahead.on = false;
    ret = enter(c, err);
    used = used || c->ahead.write;
    return ret ? ret : direct_done(be, used ? c->ahead.len : 0, err);
}

static int cuda_settle(struct vgpu_backend *be, struct vg_error *err)
{
    return ahead_settle(be, false, err);
}

static int cuda_host_register(struct vgpu_backend *be, void *ptr, uint64_t len,
                              struct vg_error *err)
{
    struct cuda_be *c = cb(be);
    struct host_range *h = NULL;
    int ret = enter(c, err);

    pthread_mutex_lock(&c->host_lock);
    for (unsigned i = 0; i < HOST_RANGES && !h; i++) {
        h = c->host[i].ptr ? NULL : &c->host[i];
    }
    if (ret == 0 && !h) {
        ret = vg_error_set(err, ENOSPC, "%d host ranges are registered already",
                           HOST_RANGES);
    }
    if (ret == 0) {
        ret = check(c, c->api.MemHostRegister(ptr, len, 0),
                    "pinning host memory (cuMemHostRegister)", err);
    }
    if (ret == 0) {
        h->ptr = ptr;
        h->len = len;
    }
    pthread_mutex_unlock(&c->host_lock);
    return ret;
}

static void cuda_host_unregister(struct vgpu_backend *be, void *ptr)
{
    struct cuda_be *c = cb(be);

    ahead_settle(be, false, NULL);
    pthread_mutex_lock(&c->host_lock);
    for (unsigned i = 0; i < HOST_RANGES; i++) {
        if (ptr && c->host[i].ptr == ptr) {
            if (enter(c, NULL) == 0) {
                c->api.MemHostUnregister(ptr);
            }
            c->host[i].ptr = NULL;
            c->host[i].len = 0;
        }
    }
    pthread_mutex_unlock(&c->host_lock);
}

static void cuda_prefetch(struct vgpu_backend *be, uint64_t off, uint64_t len)
{
    struct cuda_be *c = cb(be);
    struct slot *s;

    len = len < SLOT_BYTES ? len : SLOT_BYTES;
    if (len == 0 || c->reads_direct || slot_covering(c, off, len) ||
        enter(c, NULL) < 0) {
        return;
    }
    s = &c->slots[c->next_slot++ % SLOTS];
    s->valid =
        c->api.MemcpyDtoHAsync(s->buf, c->vram + off, len, c->stream) == 0 &&
        c->api.EventRecord(s->done, c->stream) == 0;
    s->off = off;
    s->len = len;
}

/* Copy [@off, +@len) of VRAM to @dst: from a prefetched slot (unless
 * @fresh), straight into registered memory, or through the stage. */
static int copy_out(struct vgpu_backend *be, uint64_t off, void *dst,
                    uint64_t len, bool fresh, struct vg_error *err)
{
    struct cuda_be *c = cb(be);
    struct slot *s = fresh ? NULL : slot_covering(c, off, len);
    int ret = 0;

    c->reads_direct = host_direct(c, dst, len);
    if (s) {
        ret = check(c, c->api.EventSynchronize(s->done), "read-ahead", err);
        if (ret == 0) {
            memcpy(dst, s->buf + (off - s->off), len);
            return 0;
        }
    }
    if (ret == 0 && c->reads_direct) {
        ret =
            check(c, c->api.MemcpyDtoHAsync(dst, c->vram + off, len, c->stream),
                  "copy from VRAM", err);
        return ret ? ret : direct_done(be, len, err);
    }
    for (uint64_t done = 0; ret == 0 && done < len;) {
        uint64_t n = len - done < STAGE_HALF ? len - done : STAGE_HALF;
        struct half *h = &c->stage[0];

        ret = check(
            c,
            c->api.MemcpyDtoHAsync(h->buf, c->vram + off + done, n, c->stream),
            "copy from VRAM", err);
        if (ret == 0) {
            ret = sync_stream(c, err);
        }
        if (ret == 0) {
            memcpy((uint8_t *)dst + done, h->buf, n);
            done += n;
        }
    }
    if (ret == 0) {
        stage_free(c); /* stream drained */
    }
    return ret;
}

/* A read, hashed if @h: from the read ahead of the same range, or the
 * hash kernel queued just before the copy, both on the stream. */
static int read_range(struct vgpu_backend *be, uint64_t off, void *dst,
                      uint64_t len, const struct vgpu_copy_hashes *h,
                      struct vg_error *err)
{
    struct cuda_be *c = cb(be);
    bool same = c->ahead.on && !c->ahead.write && c->ahead.off == off &&
                c->ahead.host == dst && c->ahead.len == len &&
                ahead_hashes(c, h);
    int ret = ahead_settle(be, same, err);

    if (same || ret) {
        c->reads_direct = c->reads_direct || same;
    } else {
        ret = enter(c, err);
        if (ret == 0 && h) {
            ret = run_hash_enqueue(c, off, len, h, err);
        }
        if (ret == 0) {
            ret = copy_out(be, off, dst, len, h != NULL, err);
        }
    }
    if (ret == 0 && h) {
        run_hash_out(c, len, h);
    }
    return ret;
}

static int cuda_read(struct vgpu_backend *be, uint64_t off, void *dst,
                     uint64_t len, struct vg_error *err)
{
    return read_range(be, off, dst, len, NULL, err);
}

/* The stage half the next write copies into, with room left: the current
 * one, else the other once its copies are done (0, or the error). */
static int stage_half(struct cuda_be *c, struct half **out,
                      struct vg_error *err)
{
    struct half *h = &c->stage[c->next_half % 2];
    int ret = 0;

    if (h->used == STAGE_HALF) {
        h = &c->stage[++c->next_half % 2];
        if (h->busy) {
            ret =
                check(c, c->api.EventSynchronize(h->done), "copy to VRAM", err);
        }
        h->busy = false;
        h->used = 0;
    }
    *out = h;
    return ret;
}

/*
 * Copy into the stage after what its current half holds and start the copy
 * to VRAM: a small write (a guest's through a trapped BAR2) waits for
 * nothing, and a half is reused only once its copies are done.  A read
 * ahead of other pages stays in flight: the stream keeps the write after
 * it, and the migration module marks the page the write changes.
 */
static int cuda_write(struct vgpu_backend *be, uint64_t off, const void *src,
                      uint64_t len, struct vg_error *err)
{
    struct cuda_be *c = cb(be);
    bool keep_ahead = c->ahead.on && !c->ahead.write &&
                      !overlaps(off, len, c->ahead.off, c->ahead.len);
    int ret = keep_ahead ? 0 : ahead_settle(be, false, err);

    ret = ret ? ret : enter(c, err);
    slots_drop(c, off, len);
    if (ret == 0 && host_direct(c, src, len)) {
        ret =
            check(c, c->api.MemcpyHtoDAsync(c->vram + off, src, len, c->stream),
                  "copy to VRAM", err);
        return ret ? ret : direct_done(be, len, err); /* @src is free again */
    }
    for (uint64_t done = 0; ret == 0 && done < len;) {
        struct half *h = NULL;
        uint64_t n = 0;

        ret = stage_half(c, &h, err);
        if (ret == 0) {
            n = len - done < STAGE_HALF - h->used ? len - done
                                                  : STAGE_HALF - h->used;
            memcpy(h->buf + h->used, (const uint8_t *)src + done, n);
            ret = check(c,
                        c->api.MemcpyHtoDAsync(c->vram + off + done,
                                               h->buf + h->used, n, c->stream),
                        "copy to VRAM", err);
        }
        if (ret == 0) {
            ret = check(c, c->api.EventRecord(h->done, c->stream),
                        "cuEventRecord", err);
            h->busy = ret == 0;
            h->used += n;
            done += n;
        }
    }
    return ret;
}

/* A write whose copy straight from registered memory is not waited for. */
static int cuda_write_async(struct vgpu_backend *be, uint64_t off,
                            const void *src, uint64_t len, struct vg_error *err)
{
    struct cuda_be *c = cb(be);
    int ret = ahead_settle(be, false, err);

    if (ret || !host_direct(c, src, len)) {
        return ret ? ret : cuda_write(be, off, src, len, err);
    }
    slots_drop(c, off, len);
    ret = enter(c, err);
    ret =
        ret ? ret
            : check(c,
                    c->api.MemcpyHtoDAsync(c->vram + off, src, len, c->stream),
                    "copy to VRAM", err);
    c->ahead.on = ret == 0;
    c->ahead.off = off;
    c->ahead.host = src;
    c->ahead.len = len;
    c->ahead.write = true;
    return ret;
}

/* Write, then hash the pages as they are in VRAM (the stream's order). */
static int write_hashed(struct vgpu_backend *be, uint64_t off, const void *src,
                        uint64_t len, const struct vgpu_copy_hashes *h,
                        struct vg_error *err)
{
    struct cuda_be *c = cb(be);
    int ret = cuda_write_async(be, off, src, len, err), settled;

    if (ret == 0) {
        ret = run_hash_enqueue(c, off, len, h, err);
    }
    settled = ahead_settle(be, true, ret ? NULL : err);
    ret = ret ? ret : settled;
    if (ret == 0) {
        ret = sync_stream(c, err); /* a staged write did not wait */
    }
    if (ret == 0) {
        run_hash_out(c, len, h);
    }
    return ret;
}

/* ------------------------------------------------------------- engines */

static int cuda_fill(struct vgpu_backend *be, uint64_t off, uint64_t len,
                     uint32_t pattern, struct vg_error *err)
{
    struct cuda_be *c = cb(be);
    int ret = enter(c, err);

    slots_drop(c, off, len);
    if (ret == 0) {
        ret = check(
            c,
            c->api.MemsetD32Async(c->vram + off, pattern, len / 4, c->stream),
            "FILL", err);
    }
    return ret ? ret : sync_stream(c, err);
}

static int cuda_copy(struct vgpu_backend *be, uint64_t dst, uint64_t src,
                     uint64_t len, struct vg_error *err)
{
    struct cuda_be *c = cb(be);
    int ret = enter(c, err);

    slots_drop(c, dst, len);
    if (ret == 0) {
        ret = check(c,
                    c->api.MemcpyDtoDAsync(c->vram + dst, c->vram + src, len,
                                           c->stream),
                    "COPY", err);
    }
    return ret ? ret : sync_stream(c, err);
}

static int cuda_axpy(struct vgpu_backend *be, uint64_t y, uint64_t x,
                     uint64_t n, float a, struct vg_error *err)
{
    struct cuda_be *c = cb(be);
    CUdeviceptr py = c->vram + y, px = c->vram + x;
    void *params[] = {&py, &px, &n, &a};
    int ret = enter(c, err);

    slots_drop(c, y, n * 4);
    if (ret == 0) {
        ret = launch(c, c->axpy, blocks_for(n, THREADS), THREADS, params,
                     "AXPY kernel", err);
    }
    return ret ? ret : sync_stream(c, err);
}

static int cuda_add(struct vgpu_backend *be, uint64_t off, uint64_t len,
                    float v, struct vg_error *err)
{
    struct cuda_be *c = cb(be);
    CUdeviceptr p = c->vram + off;
    uint64_t n = len / 4;
    void *params[] = {&p, &n, &v};
    int ret = enter(c, err);

    slots_drop(c, off, len);
    if (ret == 0) {
        ret = launch(c, c->add, blocks_for(n, THREADS), THREADS, params,
                     "SCATTER_ADD row kernel", err);
    }
    return ret ? ret : sync_stream(c, err);
}

/* The first index in [0, n) of @idx that is >= @rows, or n. */
static int scatter_first_bad(struct cuda_be *c, CUdeviceptr idx, uint64_t n,
                             uint64_t rows, uint64_t *bad, struct vg_error *err)
{
    void *params[] = {&idx, &n, &rows, &c->d_misc};
    int ret;

    *c->misc = n;
    ret = check(c, c->api.MemcpyHtoDAsync(c->d_misc, c->misc, 8, c->stream),
                "SCATTER_ADD check", err);
    if (ret == 0) {
        ret = launch(c, c->scatter_check, blocks_for(n, THREADS), THREADS,
                     params, "SCATTER_ADD check kernel", err);
    }
    if (ret == 0) {
        ret = check(c, c->api.MemcpyDtoHAsync(c->misc, c->d_misc, 8, c->stream),
                    "SCATTER_ADD check", err);
    }
    if (ret == 0) {
        ret = sync_stream(c, err);
    }
    *bad = *c->misc;
    return ret;
}

static int cuda_scatter(struct vgpu_backend *be,
                        const struct vgpu_scatter_args *a, uint64_t first,
                        uint64_t count, uint64_t *done, struct vg_error *err)
{
    struct cuda_be *c = cb(be);
    CUdeviceptr table = c->vram + a->table, idx = c->vram + a->idx + first * 4;
    uint64_t row_floats = a->row_bytes / 4, n = 0;
    float v = a->value;
    void *params[] = {&table, &row_floats, &idx, &n, &v};
    unsigned threads =
        row_floats >= THREADS ? THREADS : (unsigned)(row_floats + 31) / 32 * 32;
    int ret = enter(c, err);

    *done = 0;
    if (ret == 0) {
        ret = scatter_first_bad(c, idx, count, a->rows, &n, err);
    }
    if (ret == 0 && n > 0) {
        slots_drop(c, a->table, a->rows * a->row_bytes);
        ret = launch(c, c->scatter_add, blocks_for(n, 1), threads, params,
                     "SCATTER_ADD kernel", err);
        if (ret == 0) {
            ret = sync_stream(c, err);
        }
    }
    if (ret == 0) {
        *done = n;
    }
    return ret;
}

/* ---------------------------------------------------------- benchmark */

static int timed(struct cuda_be *c, CUevent t0, CUevent t1, double *ms,
                 struct vg_error *err)
{
    float f = 0;
    int ret = check(c, c->api.EventRecord(t1, c->stream), "cuEventRecord", err);

    if (ret == 0) {
        ret = check(c, c->api.EventSynchronize(t1), "cuEventSynchronize", err);
    }
    if (ret == 0) {
        ret = check(c, c->api.EventElapsedTime(&f, t0, t1),
                    "cuEventElapsedTime", err);
    }
    *ms = f;
    return ret;
}

/* The hashes of a 2 MiB record's pages (both seeds), launched back to
 * back: the mean time of one. */
static int time_run_hash(struct cuda_be *c, uint64_t size, uint32_t page_size,
                         CUevent t0, CUevent t1, double *ms,
                         struct vg_error *err)
{
    uint64_t seeds[2] = {0, 1}, pages = (2u << 20) / page_size;
    int ret = check(c, c->api.EventRecord(t0, c->stream), "cuEventRecord", err);

    pages = pages ? pages : 1;
    for (unsigned i = 0; ret == 0 && i < RUN_HASH_LAUNCHES; i++) {
        uint64_t off = (i * pages * page_size) % (size - pages * page_size + 1);

        ret = hash_run(c, off - off % page_size, pages, page_size, seeds, 2,
                       c->d_hashes, c->d_zero, err);
    }
    if (ret == 0) {
        ret = timed(c, t0, t1, ms, err);
        *ms /= RUN_HASH_LAUNCHES;
    }
    return ret;
}

static int time_all(struct cuda_be *c, uint64_t size, uint32_t page_size,
                    CUevent t0, CUevent t1, struct vgc_timing *t,
                    struct vg_error *err)
{
    uint64_t n16 = size / 16, half = size / 2;
    void *params[] = {&c->vram, &n16, &c->d_misc};
    int ret = check(c, c->api.EventRecord(t0, c->stream), "cuEventRecord", err);

    if (ret == 0) {
        ret = launch(c, c->read_only, 132 * 16, THREADS, params, "read kernel",
                     err);
    }
    if (ret == 0) {
        ret = timed(c, t0, t1, &t->read_ms, err);
    }
    if (ret == 0) {
        ret = check(c, c->api.EventRecord(t0, c->stream), "cuEventRecord", err);
    }
    if (ret == 0) {
        ret = hash_all(c, size / page_size, page_size, NULL, 1, err);
    }
    if (ret == 0) {
        ret = timed(c, t0, t1, &t->hash_ms, err);
    }
    if (ret == 0) {
        ret = check(c, c->api.EventRecord(t0, c->stream), "cuEventRecord", err);
    }
    if (ret == 0) {
        ret = check(
            c, c->api.MemcpyDtoDAsync(c->vram + half, c->vram, half, c->stream),
            "copy", err);
    }
    if (ret == 0) {
        ret = timed(c, t0, t1, &t->copy_ms, err);
    }
    if (ret == 0) {
        ret = time_run_hash(c, size, page_size, t0, t1, &t->run_hash_ms, err);
    }
    return ret;
}

int vgc_time_kernels(struct vgpu_backend *be, uint32_t page_size,
                     struct vgc_timing *t, struct vg_error *err)
{
    struct cuda_be *c;
    CUevent t0 = NULL, t1 = NULL;
    int ret;

    if (be->ops != &vgpu_backend_cuda_ops) {
        return vg_error_set(err, EINVAL, "not a cuda backend");
    }
    c = cb(be);
    slots_drop(c, 0, be->size);
    ret = enter(c, err);
    if (ret == 0) {
        ret = hash_scratch(c, be->size / page_size, err);
    }
    if (ret == 0) {
        ret = check(c, c->api.EventCreate(&t0, VGC_EVENT_DEFAULT),
                    "cuEventCreate", err);
    }
    if (ret == 0) {
        ret = check(c, c->api.EventCreate(&t1, VGC_EVENT_DEFAULT),
                    "cuEventCreate", err);
    }
    if (ret == 0) {
        ret = time_all(c, be->size, page_size, t0, t1, t, err);
    }
    if (t0) {
        c->api.EventDestroy(t0);
    }
    if (t1) {
        c->api.EventDestroy(t1);
    }
    return ret;
}

/* ---------------------------------------------------------- any thread */

/*
 * The calls share one stream, the staging buffers and the read-ahead
 * slots, and each leaves them consistent for the next: any thread may
 * call (enter() makes the context current for it), one call at a time.
 * A restore or a post-copy destination installs pages from its own
 * thread while the engines run on the server's.
 */
static void op_lock(const struct vgpu_backend *be)
{
    pthread_mutex_lock(&cb(be)->op_lock);
}

static void op_unlock(const struct vgpu_backend *be)
{
    pthread_mutex_unlock(&cb(be)->op_lock);
}

static int locked_read(struct vgpu_backend *be, uint64_t off, void *dst,
                       uint64_t len, struct vg_error *err)
{
    int ret;

    op_lock(be);
    ret = cuda_read(be, off, dst, len, err);
    op_unlock(be);
    return ret;
}

static int locked_write(struct vgpu_backend *be, uint64_t off, const void *src,
                        uint64_t len, struct vg_error *err)
{
    int ret;

    op_lock(be);
    ret = cuda_write(be, off, src, len, err);
    op_unlock(be);
    return ret;
}

static void locked_read_ahead(struct vgpu_backend *be, uint64_t off, void *dst,
                              uint64_t len, const struct vgpu_copy_hashes *h)
{
    op_lock(be);
    cuda_read_ahead(be, off, dst, len, h);
    op_unlock(be);
}

static int locked_write_hashed(struct vgpu_backend *be, uint64_t off,
                               const void *src, uint64_t len,
                               const struct vgpu_copy_hashes *h,
                               struct vg_error *err)
{
    int ret;

    op_lock(be);
    ret = write_hashed(be, off, src, len, h, err);
    op_unlock(be);
    return ret;
}

static int locked_read_hashed(struct vgpu_backend *be, uint64_t off, void *dst,
                              uint64_t len, const struct vgpu_copy_hashes *h,
                              struct vg_error *err)
{
    int ret;

    op_lock(be);
    ret = read_range(be, off, dst, len, h, err);
    op_unlock(be);
    return ret;
}

static int locked_write_async(struct vgpu_backend *be, uint64_t off,
                              const void *src, uint64_t len,
                              struct vg_error *err)
{
    int ret;

    op_lock(be);
    ret = cuda_write_async(be, off, src, len, err);
    op_unlock(be);
    return ret;
}

static int locked_settle(struct vgpu_backend *be, struct vg_error *err)
{
    int ret;

    op_lock(be);
    ret = cuda_settle(be, err);
    op_unlock(be);
    return ret;
}

static void locked_prefetch(struct vgpu_backend *be, uint64_t off, uint64_t len)
{
    op_lock(be);
    cuda_prefetch(be, off, len);
    op_unlock(be);
}

static int locked_host_register(struct vgpu_backend *be, void *ptr,
                                uint64_t len, struct vg_error *err)
{
    int ret;

    op_lock(be);
    ret = cuda_host_register(be, ptr, len, err);
    op_unlock(be);
    return ret;
}

static void locked_host_unregister(struct vgpu_backend *be, void *ptr)
{
    op_lock(be);
    cuda_host_unregister(be, ptr);
    op_unlock(be);
}

static int locked_fill(struct vgpu_backend *be, uint64_t off, uint64_t len,
                       uint32_t pattern, struct vg_error *err)
{
    int ret;

    op_lock(be);
    ret = cuda_fill(be, off, len, pattern, err);
    op_unlock(be);
    return ret;
}

static int locked_copy(struct vgpu_backend *be, uint64_t dst, uint64_t src,
                       uint64_t len, struct vg_error *err)
{
    int ret;

    op_lock(be);
    ret = cuda_copy(be, dst, src, len, err);
    op_unlock(be);
    return ret;
}

static int locked_axpy(struct vgpu_backend *be, uint64_t y, uint64_t x,
                       uint64_t n, float a, struct vg_error *err)
{
    int ret;

    op_lock(be);
    ret = cuda_axpy(be, y, x, n, a, err);
    op_unlock(be);
    return ret;
}

static int locked_add(struct vgpu_backend *be, uint64_t off, uint64_t len,
                      float v, struct vg_error *err)
{
    int ret;

    op_lock(be);
    ret = cuda_add(be, off, len, v, err);
    op_unlock(be);
    return ret;
}

static int locked_scatter(struct vgpu_backend *be,
                          const struct vgpu_scatter_args *a, uint64_t first,
                          uint64_t count, uint64_t *done, struct vg_error *err)
{
    int ret;

    op_lock(be);
    ret = cuda_scatter(be, a, first, count, done, err);
    op_unlock(be);
    return ret;
}

static int locked_hash(struct vgpu_backend *be, const struct vgpu_hash_req *r,
                       struct vg_error *err)
{
    int ret;

    op_lock(be);
    ret = cuda_hash(be, r, err);
    op_unlock(be);
    return ret;
}

const struct vgpu_backend_ops vgpu_backend_cuda_ops = {
    .name = "cuda",
    .init = cuda_init,
    .fini = cuda_fini,
    .read = locked_read,
    .write = locked_write,
    .prefetch = locked_prefetch,
    .read_ahead = locked_read_ahead,
    .read_hashed = locked_read_hashed,
    .write_hashed = locked_write_hashed,
    .write_async = locked_write_async,
    .settle = locked_settle,
    .host_register = locked_host_register,
    .host_unregister = locked_host_unregister,
    .fill = locked_fill,
    .copy = locked_copy,
    .axpy = locked_axpy,
    .add = locked_add,
    .scatter = locked_scatter,
    .hash = locked_hash,
    .describe = cuda_describe,
};
