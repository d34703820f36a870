/*
 * guard.c -- guard pages around every shared mapping of a file.
 *
 * Linked with -Wl,--wrap=mmap -Wl,--wrap=munmap, so the library's mmap()
 * of VRAM (the CPU backend's memfd) and of guest RAM (vfu-dma.c) lands
 * between two inaccessible pages: a write (or read) just outside VRAM or
 * a DMA mapping faults at once instead of silently corrupting memory
 * that ASan does not watch (it only watches the heap, stack and globals).
 * Other mappings pass through unchanged.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/log.h"
#include "fuzz.h"

#define MAX_GUARDED 4096
#define GUARD_PAGES 16

void *__real_mmap(void *addr, size_t len, int prot, int flags, int fd,
                  off_t off);
int __real_munmap(void *addr, size_t len);
void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd,
                  off_t off);
int __wrap_munmap(void *addr, size_t len);

struct guarded {
    uint8_t *user;    /* what mmap returned */
    uint8_t *reserve; /* the whole reservation, guards included */
    size_t total;
};

static struct guarded maps[MAX_GUARDED];
static size_t nmaps;

void fuzz_log_level(void)
{
    const char *s = getenv("FUZZ_LOG");
    enum vg_log_level level = VG_LOG_ERROR;

    if (s && !vg_log_parse_level(s, &level)) {
        level = VG_LOG_INFO;
    }
    vg_log_set_level(level);
}

size_t fuzz_guarded_maps(void)
{
    return nmaps;
}

void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd,
                  off_t off)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    size_t guard = GUARD_PAGES * pg;
    size_t body, total;
    uint8_t *res;
    void *p;

    if (addr || fd < 0 || !(flags & MAP_SHARED) || nmaps == MAX_GUARDED ||
        len == 0 || len > SIZE_MAX / 2) {
        return __real_mmap(addr, len, prot, flags, fd, off);
    }
    body = (len + pg - 1) / pg * pg;
    total = body + 2 * guard;
    res = __real_mmap(NULL, total, PROT_NONE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (res == MAP_FAILED) {
        return MAP_FAILED;
    }
    p = __real_mmap(res + guard, len, prot, flags | MAP_FIXED, fd, off);
    if (p == MAP_FAILED) {
        int e = errno;
        __real_munmap(res, total);
        errno = e;
        return MAP_FAILED;
    }
    maps[nmaps++] = (struct guarded){p, res, total};
    return p;
}

int __wrap_munmap(void *addr, size_t len)
{
    for (size_t i = 0; i < nmaps; i++) {
        if (maps[i].user == addr) {
            int ret = __real_munmap(maps[i].reserve, maps[i].total);
            maps[i] = maps[--nmaps];
            return ret;
        }
    }
    return __real_munmap(addr, len);
}
