/*
 * backend.c -- VRAM backend selection.
 */
#include "backend.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const struct vgpu_backend_ops *const backends[] = {
    &vgpu_backend_cpu_ops,
};

static const struct vgpu_backend_ops *backend_find(const char *name)
{
    size_t i;

    for (i = 0; i < sizeof(backends) / sizeof(backends[0]); i++) {
        if (strcmp(backends[i]->name, name) == 0) {
            return backends[i];
        }
    }
    return NULL;
}

int vgpu_backend_open(const char *name, uint64_t size,
                      struct vgpu_backend **out, struct vg_error *err)
{
    const struct vgpu_backend_ops *ops;
    struct vgpu_backend *be;
    int ret;

    ops = backend_find(name ? name : "cpu");
    if (!ops) {
        return vg_error_set(err, EINVAL, "unknown VRAM backend '%s'", name);
    }
    be = calloc(1, sizeof(*be));
    if (!be) {
        return vg_error_set(err, ENOMEM, "out of memory");
    }
    be->ops = ops;
    be->size = size;
    be->fd = -1;
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
