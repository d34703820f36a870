/*
 * cuda-bench -- GPU page hashing against the GPU's own read bandwidth.
 *
 * Allocates VRAM through the CUDA backend, fills it with non-zero data,
 * then times, back to back in each of --reps rounds: a kernel that only
 * reads all of VRAM, vg_hash_pages over every page, and a device-to-device
 * copy of half of VRAM onto the other half.  Prints the median of each as
 * GB/s (bytes read; the copy also as bytes moved, read + written) and the
 * ratio hash / read measured in this run.  Then the copies the migration
 * makes between VRAM and the server's shared area: the backend's read and
 * write of 4 MiB pieces to and from a registered memfd mapping, each
 * waited for, as a server's MIG_DATA_READ_SHM and WRITE_SHM do: the PCIe
 * ceiling of one device's data path.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/median.h"
#include "common/size.h"
#include "vgpu/backend-cuda.h"

#define REPS_MAX   100
#define HOST_PIECE (4u << 20)  /* a read or write of the data path */
#define HOST_AREA  (64u << 20) /* the shared area: 16 pieces */

struct opts {
    uint64_t size;
    uint64_t page;
    unsigned reps;
    const char *backend;
};

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: cuda-bench [--size SIZE] [--page-size SIZE] [--reps N]\n"
            "                  [--backend cuda|cuda:N]\n"
            "\n"
            "Time GPU page hashing (XXH3-64, a warp per page) against a\n"
            "kernel that only reads VRAM and a device-to-device copy, in the\n"
            "same run, on the CUDA backend's VRAM; then the backend's\n"
            "copies of 4 MiB pieces between VRAM and registered host memory\n"
            "(the migration's shared area), each waited for.\n"
            "\n"
            "  --size SIZE       VRAM to allocate [16G]\n"
            "  --page-size SIZE  hashing page size, 4K to 2M [64K]\n"
            "  --reps N          rounds; medians are printed [20]\n"
            "  --backend NAME    cuda or cuda:N [cuda]\n"
            "  -h, --help        this text\n"
            "\n"
            "Exit status: 0, 1 if the GPU cannot be used, 2 on bad usage.\n");
}

static int parse(int argc, char **argv, struct opts *o)
{
    static const struct option lo[] = {
        {"size", required_argument, NULL, 's'},
        {"page-size", required_argument, NULL, 'p'},
        {"reps", required_argument, NULL, 'r'},
        {"backend", required_argument, NULL, 'b'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct vg_error err = {0};
    int c;

    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        char *end;

        switch (c) {
        case 's':
        case 'p':
            if (vg_parse_size(optarg, c == 's' ? 1u << 20 : 4096,
                              c == 's' ? 1ull << 40 : 2u << 20,
                              c == 's' ? &o->size : &o->page, &err) < 0) {
                fprintf(stderr, "cuda-bench: --%s: %s\n",
                        c == 's' ? "size" : "page-size", err.msg);
                return -1;
            }
            break;
        case 'r':
            o->reps = (unsigned)strtoul(optarg, &end, 10);
            if (*end || o->reps < 1 || o->reps > REPS_MAX) {
                fprintf(stderr, "cuda-bench: --reps: 1 to %u, not '%s'\n",
                        REPS_MAX, optarg);
                return -1;
            }
            break;
        case 'b':
            o->backend = optarg;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            return -1;
        }
    }
    if (o->page < 4096 || o->page > (2u << 20) || (o->page & (o->page - 1)) ||
        o->size < o->page * 2 || o->size % o->page) {
        fprintf(stderr, "cuda-bench: page size must be a power of two from 4K "
                        "to 2M and divide the size (at least two pages)\n");
        return -1;
    }
    return optind == argc ? 0 : -1;
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* One pass of HOST_AREA through @be's read (@to_host) or write, a piece
 * at a time; seconds, or -1 with @err set. */
static double host_pass(struct vgpu_backend *be, uint8_t *area, bool to_host,
                        struct vg_error *err)
{
    double t0 = now_s();

    for (uint64_t off = 0; off < HOST_AREA; off += HOST_PIECE) {
        int ret = to_host
                      ? be->ops->read(be, off, area + off, HOST_PIECE, err)
                      : be->ops->write(be, off, area + off, HOST_PIECE, err);

        if (ret < 0) {
            return -1;
        }
    }
    return now_s() - t0;
}

/* The backend's copies to and from a registered memfd mapping. */
static int run_host(const struct opts *o, struct vgpu_backend *be)
{
    double rd[REPS_MAX], wr[REPS_MAX], gb = HOST_AREA / 1e9;
    struct vg_error err = {0};
    int fd = memfd_create("cuda-bench-area", MFD_CLOEXEC);
    uint8_t *area = MAP_FAILED;
    bool registered = false;
    int ret = 1;

    if (fd >= 0 && ftruncate(fd, HOST_AREA) == 0) {
        area = mmap(NULL, HOST_AREA, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    if (area == MAP_FAILED) {
        fprintf(stderr, "cuda-bench: shared area: %m\n");
        goto out;
    }
    memset(area, 0x5a, HOST_AREA);
    if (!be->ops->host_register ||
        be->ops->host_register(be, area, HOST_AREA, &err) < 0) {
        fprintf(stderr, "cuda-bench: registering the area: %s\n", err.msg);
        goto out;
    }
    registered = true;
    for (unsigned i = 0; i <= o->reps; i++) { /* round 0 warms up */
        double r = host_pass(be, area, true, &err);
        double w = r < 0 ? -1 : host_pass(be, area, false, &err);

        if (w < 0) {
            fprintf(stderr, "cuda-bench: host copies: %s\n", err.msg);
            goto out;
        }
        if (i > 0) {
            rd[i - 1] = r;
            wr[i - 1] = w;
        }
    }
    printf("VRAM <-> registered host memory, %u MiB pieces, each waited for "
           "(the data path's copies), median of %u rounds of %u MiB:\n",
           HOST_PIECE >> 20, o->reps, HOST_AREA >> 20);
    printf("  VRAM to host (read)  %7.1f GB/s  %.3f ms per piece\n",
           gb / vg_median(rd, o->reps),
           vg_median(rd, o->reps) * 1e3 / (HOST_AREA / HOST_PIECE));
    printf("  host to VRAM (write) %7.1f GB/s  %.3f ms per piece\n",
           gb / vg_median(wr, o->reps),
           vg_median(wr, o->reps) * 1e3 / (HOST_AREA / HOST_PIECE));
    ret = 0;
out:
    if (registered) {
        be->ops->host_unregister(be, area);
    }
    if (area != MAP_FAILED) {
        munmap(area, HOST_AREA);
    }
    if (fd >= 0) {
        close(fd);
    }
    return ret;
}

static int run(const struct opts *o, struct vgpu_backend *be)
{
    double rd[REPS_MAX], hs[REPS_MAX], cp[REPS_MAX], rh[REPS_MAX];
    struct vg_error err = {0};
    struct vgc_timing t;
    double gb = (double)o->size / 1e9, r, h, c, run;

    for (uint64_t off = 0; off < o->size; off += 1u << 30) {
        uint64_t n = o->size - off < (1u << 30) ? o->size - off : 1u << 30;

        if (be->ops->fill(be, off, n, 0x9e3779b9u ^ (uint32_t)(off >> 20),
                          &err) < 0) {
            fprintf(stderr, "cuda-bench: fill: %s\n", err.msg);
            return 1;
        }
    }
    if (vgc_time_kernels(be, (uint32_t)o->page, &t, &err) < 0) { /* warm-up */
        fprintf(stderr, "cuda-bench: %s\n", err.msg);
        return 1;
    }
    for (unsigned i = 0; i < o->reps; i++) {
        if (vgc_time_kernels(be, (uint32_t)o->page, &t, &err) < 0) {
            fprintf(stderr, "cuda-bench: %s\n", err.msg);
            return 1;
        }
        rd[i] = t.read_ms;
        hs[i] = t.hash_ms;
        cp[i] = t.copy_ms;
        rh[i] = t.run_hash_ms;
    }
    r = vg_median(rd, o->reps);
    h = vg_median(hs, o->reps);
    c = vg_median(cp, o->reps);
    run = vg_median(rh, o->reps);
    printf("GPU: %s\n", be->ops->describe(be));
    printf("VRAM %.1f GiB, %llu KiB pages, median of %u rounds "
           "(CUDA events):\n",
           (double)o->size / (1u << 30), (unsigned long long)(o->page >> 10),
           o->reps);
    printf("  read-only kernel   %8.3f ms  %7.1f GB/s\n", r, gb / r * 1e3);
    printf("  page hash (XXH3)   %8.3f ms  %7.1f GB/s  %llu pages, 8 B each "
           "back\n",
           h, gb / h * 1e3, (unsigned long long)(o->size / o->page));
    printf("  D2D copy of half   %8.3f ms  %7.1f GB/s read, %.1f GB/s moved\n",
           c, gb / 2 / c * 1e3, gb / c * 1e3);
    printf("  2 MiB record, 2 seeds %6.1f us  %7.1f GB/s  as a hashed read "
           "runs it\n",
           run * 1e3, 2.0 * (1u << 20) / 1e9 / run * 1e3);
    printf("hash / read bandwidth: %.3f\n", r / h);
    printf("hash / copy (bytes read): %.3f\n", (c * 2) / h);
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o = {16ull << 30, 64u << 10, 20, "cuda"};
    struct vgpu_backend *be = NULL;
    struct vg_error err = {0};
    int ret;

    if (parse(argc, argv, &o) < 0) {
        usage(stderr);
        return 2;
    }
    if (vgpu_backend_open(o.backend, o.size, &be, &err) < 0) {
        fprintf(stderr, "cuda-bench: %s\n", err.msg);
        return 1;
    }
    ret = run(&o, be);
    if (ret == 0) {
        ret = run_host(&o, be);
    }
    vgpu_backend_close(be);
    return ret;
}
