/*
 * vgpu.c -- the vGPU device model: creation, VRAM, trapped BAR2 access,
 * reset and statistics.  Registers are in regs.c, the command processor in
 * ring.c, the engines in engines.c.
 */
#include "vgpu-int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/log.h"
#include "common/nt-copy.h"
#include "common/populate.h"

#define PAGE_SIZE_MIN (4u * 1024)
#define PAGE_SIZE_MAX (2u * 1024 * 1024)
/* Host VRAM writes and clears from this size on are worth a system call
 * that populates or frees the host pages in one go. */
#define VRAM_BULK_MIN (64u * 1024)

static int config_check(const struct vgpu_config *cfg,
                        const struct vgpu_host *host, struct vg_error *err)
{
    uint32_t ps = cfg->page_size;

    if (ps < PAGE_SIZE_MIN || ps > PAGE_SIZE_MAX || (ps & (ps - 1))) {
        return vg_error_set(err, EINVAL,
                            "page size %u: not a power of two in 4K..2M", ps);
    }
    if (cfg->vram_size < ps || cfg->vram_size % ps) {
        return vg_error_set(err, EINVAL,
                            "VRAM size %#llx: not a non-zero multiple of the "
                            "page size %u",
                            (unsigned long long)cfg->vram_size, ps);
    }
    if (!host || !host->dma_ptr || !host->raise_irq) {
        return vg_error_set(err, EINVAL, "host lacks dma_ptr or raise_irq");
    }
    return 0;
}

/* Engine write hook: counts and tells the observer (dirty tracking). */
static void vram_wrote(void *opaque, uint64_t off, uint64_t len,
                       enum vgpu_write_kind kind)
{
    struct vgpu *gpu = opaque;

    gpu->stats.bytes_written += len;
    vg_trace("vgpu: wrote VRAM [%#llx, +%#llx) %s", (unsigned long long)off,
             (unsigned long long)len,
             kind == VGPU_WRITE_EXACT ? "exact" : "opaque");
    if (gpu->observer) {
        gpu->observer(gpu->observer_opaque, off, len, kind == VGPU_WRITE_EXACT);
    }
}

void vgpu_set_write_observer(struct vgpu *gpu, vgpu_write_fn fn, void *opaque)
{
    gpu->observer = fn;
    gpu->observer_opaque = opaque;
}

/* Populate mapped VRAM on a thread; device memory needs nothing. */
static int start_prealloc(struct vgpu *gpu, struct vg_error *err)
{
    if (!gpu->be->base) {
        vg_info("VRAM is %s device memory: nothing to preallocate",
                gpu->be->ops->name);
        return 0;
    }
    return vg_populate_start(gpu->be->base, gpu->vram_size, "VRAM",
                             &gpu->prealloc, err);
}

int vgpu_new(const struct vgpu_config *cfg, const struct vgpu_host *host,
             struct vgpu **out, struct vg_error *err)
{
    struct vgpu *gpu;
    int ret;

    ret = config_check(cfg, host, err);
    if (ret < 0) {
        return ret;
    }
    gpu = calloc(1, sizeof(*gpu));
    if (!gpu) {
        return vg_error_set(err, ENOMEM, "out of memory");
    }
    ret = vgpu_backend_open(cfg->backend, cfg->vram_size, &gpu->be, err);
    if (ret < 0) {
        free(gpu);
        return ret;
    }
    gpu->host = *host;
    gpu->vram_size = cfg->vram_size;
    gpu->page_size = cfg->page_size;
    gpu->env = (struct vgpu_engine_env){
        .vram = gpu->be->base,
        .be = gpu->be,
        .vram_size = cfg->vram_size,
        .host = &gpu->host,
        .wrote = vram_wrote,
        .opaque = gpu,
    };
    vgpu_reset(gpu);
    if (cfg->prealloc) {
        ret = start_prealloc(gpu, err);
        if (ret < 0) {
            vgpu_free(gpu);
            return ret;
        }
    }
    *out = gpu;
    return 0;
}

void vgpu_free(struct vgpu *gpu)
{
    if (!gpu) {
        return;
    }
    vg_populate_free(gpu->prealloc);
    vgpu_backend_close(gpu->be);
    free(gpu);
}

uint64_t vgpu_vram_size(const struct vgpu *gpu)
{
    return gpu->vram_size;
}

uint32_t vgpu_page_size(const struct vgpu *gpu)
{
    return gpu->page_size;
}

void vgpu_prealloc_end(struct vgpu *gpu)
{
    atomic_store(&gpu->vram_holes, true);
    if (gpu->prealloc) {
        vg_populate_stop(gpu->prealloc);
    }
}

uint8_t *vgpu_vram(struct vgpu *gpu)
{
    return gpu->be->base;
}

int vgpu_vram_fd(const struct vgpu *gpu)
{
    return gpu->be->fd;
}

/* [off, off + len) is a non-empty range inside VRAM. */
static bool vram_ok(const struct vgpu *gpu, uint64_t off, uint64_t len)
{
    return len != 0 && len <= gpu->vram_size && off <= gpu->vram_size - len;
}

static int vram_range_error(const struct vgpu *gpu, uint64_t off, uint64_t len,
                            struct vg_error *err)
{
    return vg_error_set(err, ERANGE,
                        "VRAM [%#llx, +%#llx) outside VRAM (size %#llx)",
                        (unsigned long long)off, (unsigned long long)len,
                        (unsigned long long)gpu->vram_size);
}

int vgpu_vram_read(struct vgpu *gpu, uint64_t off, void *dst, uint64_t len,
                   struct vg_error *err)
{
    struct vgpu_backend *be = gpu->be;

    if (!vram_ok(gpu, off, len)) {
        return vram_range_error(gpu, off, len, err);
    }
    if (be->base) {
        memcpy(dst, be->base + off, len);
        return 0;
    }
    return be->ops->read(be, off, dst, len, err);
}

/* Whether the preallocation thread populated [@off, +@len) and no hole
 * was made in VRAM since. */
static bool vram_preallocated(struct vgpu *gpu, uint64_t off, uint64_t len)
{
    struct vg_populate_progress pr;

    if (!gpu->prealloc || atomic_load(&gpu->vram_holes)) {
        return false;
    }
    vg_populate_progress(gpu->prealloc, &pr);
    return off + len <= pr.done;
}

/*
 * Host VRAM is a shared memfd mapping: the first write to each of its host
 * pages costs a page fault (4 us and more in a VM).  Populate a large range
 * writably in one call before copying into it, unless preallocated (the
 * call would only walk the page tables, and drain the LRU lists under
 * their lock); only a hint, the copy faults the pages in as before if it
 * fails (a kernel before 5.14).
 */
static void vram_populate(struct vgpu *gpu, uint64_t off, uint64_t len)
{
#ifdef MADV_POPULATE_WRITE
    uintptr_t hp, a, b;

    if (len < VRAM_BULK_MIN || vram_preallocated(gpu, off, len)) {
        return;
    }
    hp = (uintptr_t)sysconf(_SC_PAGESIZE);
    a = (uintptr_t)(gpu->be->base + off) & ~(hp - 1);
    b = ((uintptr_t)(gpu->be->base + off + len) + hp - 1) & ~(hp - 1);
    madvise((void *)a, b - a, MADV_POPULATE_WRITE);
#else
    (void)gpu, (void)off, (void)len;
#endif
}

/* Zero [off, off + len) of host VRAM by freeing its host pages, which then
 * read as zero here and in QEMU's mapping, and take no memory; false if it
 * cannot (not whole host pages, too small, no descriptor). */
static bool vram_discard(struct vgpu_backend *be, uint64_t off, uint64_t len)
{
    uint64_t hp = (uint64_t)sysconf(_SC_PAGESIZE);

    return be->fd >= 0 && len >= VRAM_BULK_MIN && off % hp == 0 &&
           len % hp == 0 &&
           fallocate(be->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                     (off_t)off, (off_t)len) == 0;
}

static void copy_cached(void *dst, const void *src, size_t len)
{
    memcpy(dst, src, len);
}

/* A write of VRAM: by @copy where the backend maps it here, else by the
 * backend's own write. */
static int vram_write_with(struct vgpu *gpu, uint64_t off, const void *src,
                           uint64_t len,
                           void (*copy)(void *, const void *, size_t),
                           struct vg_error *err)
{
    struct vgpu_backend *be = gpu->be;

    if (!vram_ok(gpu, off, len)) {
        return vram_range_error(gpu, off, len, err);
    }
    if (be->base) {
        vram_populate(gpu, off, len);
        copy(be->base + off, src, len);
        return 0;
    }
    return be->ops->write(be, off, src, len, err);
}

int vgpu_vram_write(struct vgpu *gpu, uint64_t off, const void *src,
                    uint64_t len, struct vg_error *err)
{
    return vram_write_with(gpu, off, src, len, copy_cached, err);
}

int vgpu_vram_write_nt(struct vgpu *gpu, uint64_t off, const void *src,
                       uint64_t len, struct vg_error *err)
{
    return vram_write_with(gpu, off, src, len, vg_nt_copy, err);
}

int vgpu_vram_clear(struct vgpu *gpu, uint64_t off, uint64_t len,
                    struct vg_error *err)
{
    struct vgpu_backend *be = gpu->be;

    if (!vram_ok(gpu, off, len) || off % 4 || len % 4) {
        return vram_range_error(gpu, off, len, err);
    }
    if (be->base) {
        if (vram_discard(be, off, len)) {
            atomic_store(&gpu->vram_holes, true);
        } else {
            memset(be->base + off, 0, len);
        }
        return 0;
    }
    return be->ops->fill(be, off, len, 0, err);
}

void vgpu_vram_prefetch(struct vgpu *gpu, uint64_t off, uint64_t len)
{
    if (!gpu->be->base && vram_ok(gpu, off, len)) {
        gpu->be->ops->prefetch(gpu->be, off, len);
    }
}

void vgpu_vram_read_ahead(struct vgpu *gpu, uint64_t off, void *dst,
                          uint64_t len)
{
    const struct vgpu_backend_ops *ops = gpu->be->ops;

    if (!gpu->be->base && ops->read_ahead && vram_ok(gpu, off, len)) {
        ops->read_ahead(gpu->be, off, dst, len, NULL);
    }
}

bool vgpu_copies_hash(const struct vgpu *gpu)
{
    return !gpu->be->base && gpu->be->ops->read_hashed &&
           gpu->be->ops->write_hashed;
}

/* Whole pages of a size the hash kernels take (4 KiB to 2 MiB). */
static bool hashed_copy_ok(const struct vgpu *gpu, uint64_t off, uint64_t len,
                           const struct vgpu_copy_hashes *h)
{
    uint32_t ps = h->page_size;

    return vram_ok(gpu, off, len) && ps >= 4096 && ps <= (2u << 20) &&
           (ps & (ps - 1)) == 0 && off % ps == 0 && len % ps == 0 &&
           (h->nseeds == 1 || h->nseeds == 2);
}

/* 0 if @gpu hashes copies, and [@off, +@len) is whole pages of VRAM of
 * a size and seeds @h may ask for; else the error, naming @what. */
static int hashed_copy_check(const struct vgpu *gpu, uint64_t off, uint64_t len,
                             const struct vgpu_copy_hashes *h, const char *what,
                             struct vg_error *err)
{
    if (!vgpu_copies_hash(gpu)) {
        return vg_error_set(err, ENOTSUP, "VRAM is mapped here: no hashed %s",
                            what);
    }
    if (!hashed_copy_ok(gpu, off, len, h)) {
        return vg_error_set(err, EINVAL,
                            "hashed VRAM %s [%#llx, +%#llx) of %u-byte pages "
                            "with %u seeds: not whole pages in VRAM",
                            what, (unsigned long long)off,
                            (unsigned long long)len, h->page_size, h->nseeds);
    }
    return 0;
}

int vgpu_vram_read_hashed(struct vgpu *gpu, uint64_t off, void *dst,
                          uint64_t len, const struct vgpu_copy_hashes *h,
                          struct vg_error *err)
{
    int ret = hashed_copy_check(gpu, off, len, h, "read", err);

    return ret ? ret
               : gpu->be->ops->read_hashed(gpu->be, off, dst, len, h, err);
}

int vgpu_vram_write_hashed(struct vgpu *gpu, uint64_t off, const void *src,
                           uint64_t len, const struct vgpu_copy_hashes *h,
                           struct vg_error *err)
{
    int ret = hashed_copy_check(gpu, off, len, h, "write", err);

    return ret ? ret
               : gpu->be->ops->write_hashed(gpu->be, off, src, len, h, err);
}

void vgpu_vram_read_ahead_hashed(struct vgpu *gpu, uint64_t off, void *dst,
                                 uint64_t len, const struct vgpu_copy_hashes *h)
{
    if (vgpu_copies_hash(gpu) && gpu->be->ops->read_ahead &&
        hashed_copy_ok(gpu, off, len, h)) {
        gpu->be->ops->read_ahead(gpu->be, off, dst, len, h);
    }
}

int vgpu_vram_write_async(struct vgpu *gpu, uint64_t off, const void *src,
                          uint64_t len, struct vg_error *err)
{
    struct vgpu_backend *be = gpu->be;

    if (be->base || !be->ops->write_async || !vram_ok(gpu, off, len)) {
        return vgpu_vram_write(gpu, off, src, len, err);
    }
    return be->ops->write_async(be, off, src, len, err);
}

int vgpu_vram_settle(struct vgpu *gpu, struct vg_error *err)
{
    const struct vgpu_backend_ops *ops = gpu->be->ops;

    return gpu->be->base || !ops->settle ? 0 : ops->settle(gpu->be, err);
}

int vgpu_host_register(struct vgpu *gpu, void *ptr, uint64_t len,
                       struct vg_error *err)
{
    struct vgpu_backend *be = gpu->be;
    int ret;

    if (be->base || !be->ops->host_register) {
        return 0;
    }
    ret = be->ops->host_register(be, ptr, len, err);
    return ret < 0 ? ret : 1;
}

void vgpu_host_unregister(struct vgpu *gpu, void *ptr)
{
    struct vgpu_backend *be = gpu->be;

    if (!be->base && be->ops->host_unregister) {
        be->ops->host_unregister(be, ptr);
    }
}

uint64_t vgpu_direct_bytes(const struct vgpu *gpu)
{
    return gpu->be->direct_bytes;
}

int vgpu_vram_hash(struct vgpu *gpu, const uint64_t *select, uint64_t seed,
                   uint64_t *hashes, uint64_t *zero, struct vg_error *err)
{
    struct vgpu_hash_req req = {
        .page_size = gpu->page_size,
        .pages = gpu->vram_size / gpu->page_size,
        .select = select,
        .seed = seed,
        .hashes = hashes,
        .zero = zero,
    };

    if (gpu->be->base) { /* libdirtytrack hashes a mapping itself */
        return vg_error_set(err, ENOTSUP,
                            "VRAM is mapped here: hash it with dt_epoch");
    }
    return gpu->be->ops->hash(gpu->be, &req, err);
}

const char *vgpu_backend_describe(const struct vgpu *gpu)
{
    const struct vgpu_backend *be = gpu->be;

    return be->ops->describe ? be->ops->describe(be) : be->ops->name;
}

int vgpu_bar2_read(struct vgpu *gpu, uint64_t off, void *data, uint32_t len)
{
    struct vg_error err;
    int ret;

    if (!vram_ok(gpu, off, len)) {
        return -EINVAL;
    }
    ret = vgpu_vram_read(gpu, off, data, len, &err);
    if (ret < 0) {
        vg_err("vgpu: BAR2 read at %#llx: %s", (unsigned long long)off,
               err.msg);
        memset(data, 0xff, len);
    }
    return ret;
}

int vgpu_bar2_write(struct vgpu *gpu, uint64_t off, const void *data,
                    uint32_t len)
{
    struct vg_error err;
    int ret;

    if (!vram_ok(gpu, off, len)) {
        return -EINVAL;
    }
    ret = vgpu_vram_write(gpu, off, data, len, &err);
    if (ret < 0) {
        vg_err("vgpu: BAR2 write at %#llx: %s", (unsigned long long)off,
               err.msg);
        return ret;
    }
    if (gpu->observer) {
        gpu->observer(gpu->observer_opaque, off, len, true);
    }
    return 0;
}

void vgpu_reset(struct vgpu *gpu)
{
    vgpu_regs_reset(&gpu->regs);
    gpu->kicked = false;
    gpu->job_active = false;
    memset(&gpu->job, 0, sizeof(gpu->job));
}

void vgpu_get_stats(const struct vgpu *gpu, struct vgpu_stats *stats)
{
    *stats = gpu->stats;
}
