/*
 * backend.c -- VRAM backend selection.
 */
#include "backend.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const struct vgpu_backend_ops *const backends[] = {
    &vgpu_backend_cpu_ops,
    &vgpu_backend_cuda_ops,
};

/* The backend called @name, with an optional ":N" device number (0 to
 * 255) in *@device. */
static const struct vgpu_backend_ops *backend_find(const char *name,
                                                   int *device)
{
    const char *colon = strchr(name, ':');
    size_t len = colon ? (size_t)(colon - name) : strlen(name);
    size_t i;

    *device = 0;
    if (colon) {
        char *end;
        unsigned long n;

        errno = 0;
        n = strtoul(colon + 1, &end, 10);
        if (errno || end == colon + 1 || *end || n > 255 || colon[1] == '-' ||
            colon[1] == '+') {
            return NULL;
        }
        *device = (int)n;
    }
    for (i = 0; i < sizeof(backends) / sizeof(backends[0]); i++) {
        if (strlen(backends[i]->name) == len &&
            strncmp(backends[i]->name, name, len) == 0) {
            /* only a GPU backend takes a device number */
            return colon && backends[i] == &vgpu_backend_cpu_ops ? NULL
                                                                 : backends[i];
        }
    }
    return NULL;
}

int vgpu_backend_open(const char *name, uint64_t size,
                      struct vgpu_backend **out, struct vg_error *err)
{
    const struct vgpu_backend_ops *ops;
    struct vgpu_backend *be;
    int device, ret;

    ops = backend_find(name ? name : "cpu", &device);
    if (!ops) {
        return vg_error_set(
            err, EINVAL, "unknown VRAM backend '%s' (cpu, cuda, cuda:N)", name);
    }
    be = calloc(1, sizeof(*be));
    if (!be) {
        return vg_error_set(err, ENOMEM, "out of memory");
    }
    be->ops = ops;
    be->size = size;
    be->fd = -1;
    be->device = device;
    ret = ops->init(be, err);
    if (ret < 0) {
        vg_error_prefix(err, "VRAM backend '%s'", ops->name);
        free(be);
        return ret;
    }
    *out = be;
    return 0;
}

void vgpu_backend_close(struct vgpu_backend *be)
{
    if (!be) {
        return;
    }
    be->ops->fini(be);
    free(be);
}
