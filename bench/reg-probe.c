/*
 * reg-probe.c -- timed reads of a device register (reg-probe.h).
 */
#include "reg-probe.h"

#include <glib.h>
#include <string.h>

#include "qclient/pause.h"
#include "vgpu/cmd.h"

void reg_probe_init(struct reg_probe *p, unsigned cap)
{
    p->us = g_new(int64_t, cap);
    p->n = 0;
    p->cap = cap;
}

void reg_probe_free(struct reg_probe *p)
{
    g_free(p->us);
    memset(p, 0, sizeof(*p));
}

int reg_probe_read(struct reg_probe *p, struct vg_vgpu *gpu, uint32_t reg,
                   unsigned count, struct vg_error *err)
{
    for (unsigned i = 0; i < count; i++) {
        gint64 t0 = g_get_monotonic_time();
        uint32_t v;
        int ret = vg_vgpu_rd(gpu, reg, &v, err);

        if (ret < 0) {
            return ret;
        }
        if (p->n < p->cap) {
            p->us[p->n++] = g_get_monotonic_time() - t0;
        }
    }
    return 0;
}

int reg_probe_fence(struct reg_probe *p, struct vg_vgpu *gpu, uint32_t value,
                    int timeout_ms, struct vg_error *err)
{
    struct vgpu_cmd cmd = vgpu_cmd_make(VGPU_OP_FENCE, value, 0, 0, 0, 0, 0);
    gint64 t0 = g_get_monotonic_time();
    uint32_t v = ~value;
    int ret = vg_vgpu_submit(gpu, &cmd, 1, err);

    while (ret == 0 && v != value) {
        ret = vg_vgpu_rd(gpu, VGPU_REG_FENCE_LO, &v, err);
        if (ret == 0 && v != value &&
            g_get_monotonic_time() - t0 > (gint64)timeout_ms * 1000) {
            return 1;
        }
    }
    if (ret == 0 && p->n < p->cap) {
        p->us[p->n++] = g_get_monotonic_time() - t0;
    }
    return ret;
}

double reg_probe_pct(const struct reg_probe *p, unsigned pct)
{
    g_autofree int64_t *v = NULL;

    if (p->n == 0) {
        return -1;
    }
    v = g_memdup2(p->us, p->n * sizeof(*p->us));
    return (double)vg_percentile(v, p->n, pct);
}
