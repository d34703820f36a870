/*
 * backend-cpu.c -- VRAM in host memory: a memfd, mapped shared, so the
 * transport can pass the descriptor to QEMU for the BAR2 mapping.  The
 * client gets the descriptor read-write, so the memfd is sealed: its size
 * cannot change (a shrunk VRAM would kill the server with SIGBUS at its
 * next access) and no further seal can be added (F_SEAL_FUTURE_WRITE
 * would keep QEMU from mapping it again).  Writes stay allowed.
 */
#include "backend.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

static int cpu_init(struct vgpu_backend *be, struct vg_error *err)
{
    void *p;
    int fd;

    if (be->size > (uint64_t)INT64_MAX || be->size > SIZE_MAX) {
        return vg_error_set(err, EINVAL, "VRAM size %#llx too large",
                            (unsigned long long)be->size);
    }
    fd = memfd_create("vgpu-vram", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
        return vg_error_set(err, errno, "memfd_create: %m");
    }
    if (ftruncate(fd, (off_t)be->size) < 0) {
        int ret = vg_error_set(err, errno, "ftruncate to %#llx: %m",
                               (unsigned long long)be->size);
        close(fd);
        return ret;
    }
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
        int ret = vg_error_set(err, errno, "sealing the VRAM memfd: %m");
        close(fd);
        return ret;
    }
    p = mmap(NULL, be->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        int ret = vg_error_set(err, errno, "mmap of %#llx bytes: %m",
                               (unsigned long long)be->size);
        close(fd);
        return ret;
    }
    /* Where the host lets shared memory have huge pages (shmem_enabled
     * "advise"), VRAM gets them: every mapping of it, QEMU's too, then
     * maps 2 MiB at a time. */
    madvise(p, be->size, MADV_HUGEPAGE);
    be->base = p;
    be->fd = fd;
    return 0;
}

static void cpu_fini(struct vgpu_backend *be)
{
    munmap(be->base, be->size);
    close(be->fd);
}

const struct vgpu_backend_ops vgpu_backend_cpu_ops = {
    .name = "cpu",
    .init = cpu_init,
    .fini = cpu_fini,
};
