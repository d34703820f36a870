#include "vfu-dma.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "vfio-migration/uffd.h"

struct dma_map {
    uint64_t iova;
    uint64_t size;
    void *base;     /* mmap() result, NULL if not accessible */
    size_t map_len; /* length given to mmap() */
    uint8_t *host;  /* host address of iova */
    bool readable;
    bool writable;
};

/* One logged IOVA range: pages of the log's page size from @base. */
struct log_range {
    uint64_t base; /* iova rounded down to the page size */
    uint64_t end;  /* iova + length rounded up */
    uint64_t *bits;
};

struct dma_log {
    uint64_t page_size;
    uint32_t n;
    struct log_range *ranges;
};

struct vfu_dma {
    struct dma_log log;  /* n == 0: logging off */
    int uffd;            /* DMA_UFFD's userfaultfd, -1 if none */
    bool uffd_listening; /* the mappings with an fd are registered */
    bool log_drop;       /* test-only fault: writes are not marked */
    unsigned max;
    unsigned count;
    struct dma_map maps[];
};

int vfu_dma_new(unsigned max_maps, struct vfu_dma **out, struct vg_error *err)
{
    struct vfu_dma *dma;

    dma = calloc(1, sizeof(*dma) + (size_t)max_maps * sizeof(dma->maps[0]));
    if (!dma) {
        return vg_error_set(err, ENOMEM, "DMA table of %u entries", max_maps);
    }
    dma->max = max_maps;
    dma->uffd = -1;
    *out = dma;
    return 0;
}

void vfu_dma_free(struct vfu_dma *dma)
{
    if (dma) {
        vfu_dma_log_stop(dma);
        vfu_dma_uffd_end(dma);
        vfu_dma_unmap_all(dma);
        free(dma);
    }
}

unsigned vfu_dma_count(const struct vfu_dma *dma)
{
    return dma->count;
}

/*
 * Guest memory must keep its size for as long as it is mapped: a page of
 * a mapping beyond the end of its file raises SIGBUS when the device
 * touches it, be the range past the end at map time (found by
 * tests/fuzz/fuzz-vfu.c) or the file shrunk later (issue 13).  So the fd
 * must be a memfd sealed against shrinking, as QEMU's
 * memory-backend-memfd makes it (seal=on, the default), and the range
 * must lie within it.
 */
static int check_fd(int fd, uint64_t offset, uint64_t size,
                    struct vg_error *err)
{
    struct stat st;
    int seals = fcntl(fd, F_GET_SEALS);

    if (seals < 0) {
        return vg_error_set(err, EINVAL,
                            "fd %d cannot carry seals (%s): guest memory must "
                            "be a memfd sealed against shrinking "
                            "(memory-backend-memfd)",
                            fd, strerror(errno));
    }
    if (!(seals & F_SEAL_SHRINK)) {
        return vg_error_set(err, EINVAL,
                            "fd %d is a memfd without F_SEAL_SHRINK (seals "
                            "%#x): the client could shrink it under the "
                            "device; use memory-backend-memfd with seal=on",
                            fd, (unsigned)seals);
    }
    if (fstat(fd, &st) < 0) {
        return vg_error_set(err, errno, "fstat of fd %d: %s", fd,
                            strerror(errno));
    }
    if (offset > (uint64_t)st.st_size || size > (uint64_t)st.st_size - offset) {
        return vg_error_set(err, EINVAL,
                            "fd %d offset 0x%llx + size 0x%llx is beyond "
                            "the end of the file (0x%llx bytes)",
                            fd, (unsigned long long)offset,
                            (unsigned long long)size,
                            (unsigned long long)st.st_size);
    }
    return 0;
}

static int map_fd(struct dma_map *m, int fd, uint64_t offset,
                  struct vg_error *err)
{
    uint64_t pgsz = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t skip = offset & (pgsz - 1);
    int prot = (m->readable ? PROT_READ : 0) | (m->writable ? PROT_WRITE : 0);
    int ret;

    if (m->size > SIZE_MAX - skip) {
        return vg_error_set(err, EINVAL, "mapping too large");
    }
    ret = check_fd(fd, offset, m->size, err);
    if (ret < 0) {
        return ret;
    }
    m->map_len = (size_t)(m->size + skip);
    m->base = mmap(NULL, m->map_len, prot ? prot : PROT_NONE, MAP_SHARED, fd,
                   (off_t)(offset - skip));
    if (m->base == MAP_FAILED) {
        m->base = NULL;
        return vg_error_set(err, errno, "mmap of fd %d at 0x%llx: %s", fd,
                            (unsigned long long)offset, strerror(errno));
    }
    m->host = (uint8_t *)m->base + skip;
    return 0;
}

int vfu_dma_map(struct vfu_dma *dma, uint64_t iova, uint64_t size, int fd,
                uint64_t offset, bool readable, bool writable,
                struct vg_error *err)
{
    struct dma_map m = {
        .iova = iova, .size = size, .readable = readable, .writable = writable};
    int ret;

    if (size == 0 || iova + size < iova) {
        return vg_error_set(err, EINVAL, "bad range 0x%llx+0x%llx",
                            (unsigned long long)iova, (unsigned long long)size);
    }
    for (unsigned i = 0; i < dma->count; i++) {
        const struct dma_map *o = &dma->maps[i];
        if (iova < o->iova + o->size && o->iova < iova + size) {
            return vg_error_set(
                err, EEXIST, "0x%llx+0x%llx overlaps mapping 0x%llx+0x%llx",
                (unsigned long long)iova, (unsigned long long)size,
                (unsigned long long)o->iova, (unsigned long long)o->size);
        }
    }
    if (dma->count == dma->max) {
        return vg_error_set(err, ENOSPC, "all %u DMA mappings in use",
                            dma->max);
    }
    if (fd >= 0) {
        ret = map_fd(&m, fd, offset, err);
        if (ret < 0) {
            return ret;
        }
    }
    dma->maps[dma->count++] = m;
    vg_dbg("DMA map 0x%llx+0x%llx %s%s%s", (unsigned long long)iova,
           (unsigned long long)size, readable ? "r" : "-", writable ? "w" : "-",
           fd >= 0 ? "" : " (no fd)");
    return 0;
}

static void unmap_index(struct vfu_dma *dma, unsigned i)
{
    if (dma->maps[i].base) {
        munmap(dma->maps[i].base, dma->maps[i].map_len);
    }
    dma->maps[i] = dma->maps[--dma->count];
}

int vfu_dma_unmap(struct vfu_dma *dma, uint64_t iova, uint64_t size,
                  struct vg_error *err)
{
    for (unsigned i = 0; i < dma->count; i++) {
        if (dma->maps[i].iova == iova && dma->maps[i].size == size) {
            unmap_index(dma, i);
            vg_dbg("DMA unmap 0x%llx+0x%llx", (unsigned long long)iova,
                   (unsigned long long)size);
            return 0;
        }
    }
    return vg_error_set(err, ENOENT, "no DMA mapping is exactly 0x%llx+0x%llx",
                        (unsigned long long)iova, (unsigned long long)size);
}

void vfu_dma_unmap_all(struct vfu_dma *dma)
{
    while (dma->count) {
        unmap_index(dma, dma->count - 1);
    }
}

static void log_mark(struct dma_log *log, uint64_t iova, uint64_t len);

void *vfu_dma_ptr(struct vfu_dma *dma, uint64_t iova, uint64_t len, bool write)
{
    for (unsigned i = 0; i < dma->count; i++) {
        const struct dma_map *m = &dma->maps[i];
        if (iova < m->iova || iova - m->iova >= m->size) {
            continue;
        }
        if (!m->host || len > m->size - (iova - m->iova) ||
            !(write ? m->writable : m->readable)) {
            return NULL;
        }
        if (write && dma->log.n && len && !dma->log_drop) {
            log_mark(&dma->log, iova, len);
        }
        return m->host + (iova - m->iova);
    }
    return NULL;
}

bool vfu_dma_writable_overlap(const struct vfu_dma *dma, uint64_t iova,
                              uint64_t len)
{
    for (unsigned i = 0; i < dma->count; i++) {
        const struct dma_map *m = &dma->maps[i];

        if (m->host && m->writable && iova < m->iova + m->size &&
            m->iova < iova + len) {
            return true;
        }
    }
    return false;
}

/* ------------------------------------------------------------ DMA logging */

static uint64_t clamp_pgsize(uint64_t hint)
{
    if (hint < VFU_DMA_LOG_PGSIZE_MIN) {
        return VFU_DMA_LOG_PGSIZE_MIN;
    }
    return hint > VFU_DMA_LOG_PGSIZE_MAX ? VFU_DMA_LOG_PGSIZE_MAX : hint;
}

/* Check @ranges; the total number of pages at @ps goes to *@pages. */
static int log_check(const struct vfu_dma_log_range *ranges, uint32_t n,
                     uint64_t ps, uint64_t *pages, struct vg_error *err)
{
    *pages = 0;
    for (uint32_t i = 0; i < n; i++) {
        const struct vfu_dma_log_range *r = &ranges[i];
        if (r->length == 0 || r->iova > UINT64_MAX - r->length ||
            r->iova + r->length > UINT64_MAX - ps) {
            return vg_error_set(err, EINVAL, "range %u: bad range %#llx+%#llx",
                                i, (unsigned long long)r->iova,
                                (unsigned long long)r->length);
        }
        for (uint32_t j = 0; j < i; j++) {
            if (r->iova < ranges[j].iova + ranges[j].length &&
                ranges[j].iova < r->iova + r->length) {
                return vg_error_set(err, EINVAL, "range %u overlaps range %u",
                                    i, j);
            }
        }
        *pages += (r->iova % ps + r->length + ps - 1) / ps;
        if (*pages > VFU_DMA_LOG_MAX_PAGES) {
            return vg_error_set(err, E2BIG,
                                "ranges need more than %u pages of %llu bytes",
                                VFU_DMA_LOG_MAX_PAGES, (unsigned long long)ps);
        }
    }
    return 0;
}

int vfu_dma_log_start(struct vfu_dma *dma, uint64_t *page_size,
                      const struct vfu_dma_log_range *ranges, uint32_t n,
                      struct vg_error *err)
{
    uint64_t ps = clamp_pgsize(*page_size), pages;
    struct dma_log log = {.page_size = ps, .n = n};
    int ret;

    if (dma->log.n) {
        return vg_error_set(err, EBUSY, "DMA logging already started");
    }
    if (*page_size == 0 || (*page_size & (*page_size - 1)) || n == 0 ||
        n > VFU_DMA_LOG_MAX_RANGES) {
        return vg_error_set(err, EINVAL,
                            "page size %#llx (power of two needed), %u ranges "
                            "(1..%u)",
                            (unsigned long long)*page_size, n,
                            VFU_DMA_LOG_MAX_RANGES);
    }
    ret = log_check(ranges, n, ps, &pages, err);
    if (ret < 0) {
        return ret;
    }
    log.ranges = calloc(n, sizeof(*log.ranges));
    for (uint32_t i = 0; log.ranges && i < n; i++) {
        struct log_range *r = &log.ranges[i];
        r->base = ranges[i].iova - ranges[i].iova % ps;
        r->end = (ranges[i].iova + ranges[i].length + ps - 1) / ps * ps;
        r->bits = calloc((size_t)((r->end - r->base) / ps + 63) / 64, 8);
        if (!r->bits) {
            dma->log = log;
            vfu_dma_log_stop(dma);
            return vg_error_set(err, ENOMEM, "DMA log bitmaps");
        }
    }
    if (!log.ranges) {
        return vg_error_set(err, ENOMEM, "DMA log ranges");
    }
    dma->log = log;
    *page_size = ps;
    vg_dbg("DMA logging started: %u ranges, %llu pages of %llu bytes", n,
           (unsigned long long)pages, (unsigned long long)ps);
    return 0;
}

void vfu_dma_log_stop(struct vfu_dma *dma)
{
    if (!dma->log.ranges) {
        return;
    }
    for (uint32_t i = 0; i < dma->log.n; i++) {
        free(dma->log.ranges[i].bits);
    }
    free(dma->log.ranges);
    memset(&dma->log, 0, sizeof(dma->log));
    vg_dbg("DMA logging stopped");
}

bool vfu_dma_logging(const struct vfu_dma *dma)
{
    return dma->log.n != 0;
}

void vfu_dma_log_set_drop(struct vfu_dma *dma, bool drop)
{
    dma->log_drop = drop;
}

/* Mark the logged pages of [iova, iova + len), len > 0. */
static void log_mark(struct dma_log *log, uint64_t iova, uint64_t len)
{
    uint64_t last = iova + len - 1;

    for (uint32_t i = 0; i < log->n; i++) {
        struct log_range *r = &log->ranges[i];
        uint64_t lo = iova > r->base ? iova : r->base;
        uint64_t hi = last < r->end - 1 ? last : r->end - 1;
        for (uint64_t p = (lo - r->base) / log->page_size;
             lo <= hi && p <= (hi - r->base) / log->page_size; p++) {
            r->bits[p / 64] |= 1ull << (p % 64);
        }
    }
}

/* Set the report bits of [a, b) within [iova, end). */
static void report_span(uint64_t *bitmap, uint64_t iova, uint64_t end,
                        uint64_t ps, uint64_t a, uint64_t b)
{
    uint64_t lo = a > iova ? a : iova, hi = b < end ? b : end;

    for (uint64_t k = (lo - iova) / ps; k <= (hi - 1 - iova) / ps; k++) {
        bitmap[k / 64] |= 1ull << (k % 64);
    }
}

/* Report the logged pages of @r within [iova, end) and clear those the
 * report covers whole; a word of 64 clean pages at a time is skipped. */
static void report_range(struct dma_log *log, struct log_range *r,
                         uint64_t iova, uint64_t end, uint64_t ps,
                         uint64_t *bitmap)
{
    uint64_t lo = iova > r->base ? iova : r->base;
    uint64_t hi = end < r->end ? end : r->end;
    uint64_t lps = log->page_size;
    uint64_t first, last;

    if (lo >= hi) {
        return;
    }
    first = (lo - r->base) / lps;
    last = (hi - 1 - r->base) / lps;
    for (uint64_t w = first / 64; w <= last / 64; w++) {
        uint64_t word = r->bits[w];

        while (word) {
            uint64_t p = w * 64 + (uint64_t)__builtin_ctzll(word);
            uint64_t a = r->base + p * lps, b = a + lps;

            word &= word - 1;
            if (p < first || p > last) {
                continue;
            }
            report_span(bitmap, iova, end, ps, a, b);
            if (a >= iova && b <= end) {
                r->bits[w] &= ~(1ull << (p % 64));
            }
        }
    }
}

int vfu_dma_log_report(struct vfu_dma *dma, uint64_t iova, uint64_t length,
                       uint64_t page_size, uint64_t *bitmap,
                       struct vg_error *err)
{
    if (!dma->log.n) {
        return vg_error_set(err, EINVAL, "DMA logging not started");
    }
    if (length == 0 || iova > UINT64_MAX - length || page_size == 0 ||
        (page_size & (page_size - 1))) {
        return vg_error_set(
            err, EINVAL, "bad report range %#llx+%#llx page size %#llx",
            (unsigned long long)iova, (unsigned long long)length,
            (unsigned long long)page_size);
    }
    for (uint32_t i = 0; i < dma->log.n; i++) {
        report_range(&dma->log, &dma->log.ranges[i], iova, iova + length,
                     page_size, bitmap);
    }
    return 0;
}

/* ------------------------------------------------ post-copy: DMA_UFFD -- */

int vfu_dma_uffd_probe(struct vg_error *err)
{
    int fd = uffd_open(err);

    if (fd < 0) {
        return fd;
    }
    close(fd);
    return 0;
}

int vfu_dma_uffd_advise(struct vfu_dma *dma, int *fd, struct vg_error *err)
{
    int ret;

    vfu_dma_uffd_end(dma);
    ret = uffd_open(err);
    if (ret < 0) {
        return ret;
    }
    dma->uffd = ret;
    *fd = ret;
    return 0;
}

/* The whole pages of @m's mmap() (an fd offset inside a page makes its
 * length no multiple of the page). */
static uint64_t map_pages(const struct dma_map *m)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);

    return (m->map_len + page - 1) / page * page;
}

static void uffd_unregister_maps(struct vfu_dma *dma, unsigned upto)
{
    for (unsigned i = 0; i < upto; i++) {
        if (dma->maps[i].base) {
            uffd_unregister(dma->uffd, (uintptr_t)dma->maps[i].base,
                            map_pages(&dma->maps[i]), NULL);
        }
    }
}

int vfu_dma_uffd_listen(struct vfu_dma *dma, struct vfu_dma_area *out,
                        unsigned max, unsigned *n, struct vg_error *err)
{
    unsigned k = 0;

    if (dma->uffd < 0 || dma->uffd_listening) {
        return vg_error_set(err, EINVAL, "%s",
                            dma->uffd < 0
                                ? "no userfaultfd: ADVISE comes first"
                                : "the mappings are registered already");
    }
    for (unsigned i = 0; i < dma->count; i++) {
        const struct dma_map *m = &dma->maps[i];
        int ret = 0;

        if (!m->base) {
            continue;
        }
        if (k == max) {
            ret = vg_error_set(err, E2BIG,
                               "more than %u DMA mappings of guest RAM", max);
        } else {
            ret =
                uffd_register(dma->uffd, (uintptr_t)m->base, map_pages(m), err);
        }
        if (ret < 0) {
            uffd_unregister_maps(dma, i);
            return ret;
        }
        out[k++] = (struct vfu_dma_area){m->iova, m->size, (uintptr_t)m->host};
    }
    dma->uffd_listening = true;
    *n = k;
    return 0;
}

void vfu_dma_uffd_end(struct vfu_dma *dma)
{
    if (dma->uffd < 0) {
        return;
    }
    if (dma->uffd_listening) {
        uffd_unregister_maps(dma, dma->count);
    }
    close(dma->uffd);
    dma->uffd = -1;
    dma->uffd_listening = false;
}
