/*
 * cuda-bench -- GPU page hashing against the GPU's own read bandwidth.
 *
 * Allocates VRAM through the CUDA backend, fills it with non-zero data,
 * then times, back to back in each of --reps rounds: a kernel that only
 * reads all of VRAM, vg_hash_pages over every page, and a device-to-device
 * copy of half of VRAM onto the other half.  Prints the median of each as
 * GB/s (bytes read; the copy also as bytes moved, read + written) and the
 * ratio hash / read measured in this run.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/size.h"
#include "vgpu/backend-cuda.h"

#define REPS_MAX 100

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
            "same run, on the CUDA backend's VRAM.\n"
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

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static double median(double *v, unsigned n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int run(const struct opts *o, struct vgpu_backend *be)
{
    double rd[REPS_MAX], hs[REPS_MAX], cp[REPS_MAX];
    struct vg_error err = {0};
    struct vgc_timing t;
    double gb = (double)o->size / 1e9, r, h, c;

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
    }
    r = median(rd, o->reps);
    h = median(hs, o->reps);
    c = median(cp, o->reps);
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
    vgpu_backend_close(be);
    return ret;
}
