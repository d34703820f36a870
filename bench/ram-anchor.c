#include "ram-anchor.h"

#include <errno.h>
#include <glib.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "bench-mig.h"
#include "qclient/harness.h"

#define ANCHOR_WAIT_MS     120000 /* for the migration to complete, */
#define ANCHOR_PER_GIB_MS  20000  /* + this per GiB of RAM */
#define ANCHOR_RUNSTATE_MS 20000
#define FILL_MUL           0x9e3779b97f4a7c15ull /* odd: no product is 0 */

struct anchor_run {
    struct ram_anchor *a;
    char *dir;
    struct vg_qemu *src, *dst;
    struct bench_rate rate;
};

static int start_qemus(struct anchor_run *r, struct vg_error *err)
{
    struct vg_qemu_opts so = {.dir = r->dir,
                              .name = "qemu-src",
                              .ram_mib = r->a->size >> 20,
                              .prealloc = r->a->prealloc};
    struct vg_qemu_opts dopt = {.dir = r->dir,
                                .name = "qemu-dst",
                                .ram_mib = r->a->size >> 20,
                                .incoming = "defer",
                                .prealloc = r->a->prealloc};
    int ret = vg_qemu_start(&so, &r->src, err);

    if (ret == 0) {
        ret = vg_qemu_start(&dopt, &r->dst, err);
    }
    return ret;
}

/* Word i of RAM gets (i + 1) x FILL_MUL: never 0, so no page is a zero
 * page, and no two words within 2^64 of each other are equal. */
static void fill_ram(const struct vg_ram_map *m)
{
    uint64_t *w = (uint64_t *)m->base;
    uint64_t n = m->size / sizeof(*w);

    for (uint64_t i = 0; i < n; i++) {
        w[i] = (i + 1) * FILL_MUL;
    }
}

/* Fill the source's RAM and take its checksum. */
static int fill_source(struct anchor_run *r, struct vg_error *err)
{
    struct vg_ram_map m;
    int ret = vg_qemu_map_ram(r->src, &m, err);

    if (ret == 0) {
        fill_ram(&m);
        r->a->checksum = XXH3_64bits(m.base, m.size);
        vg_ram_unmap(&m);
    }
    return ret;
}

static int on_sample(const struct vg_mig_info *info, void *opaque,
                     struct vg_error *err)
{
    struct anchor_run *r = opaque;

    bench_rate_note(&r->rate, info->status, info->ram_transferred);
    return 0;
}

static int migrate_ram(struct anchor_run *r, struct vg_error *err)
{
    int timeout = ANCHOR_WAIT_MS + (int)(r->a->size >> 30) * ANCHOR_PER_GIB_MS;
    g_autofree char *uri = NULL;
    struct vg_mig_info info;
    int ret =
        bench_mig_prepare(r->src->qmp, r->dst->qmp, r->a->channels,
                          r->a->max_bandwidth, r->a->dt_limit_ms, &uri, err);

    if (ret == 0) {
        ret = vg_mig_start(r->src->qmp, uri, err);
    }
    if (ret == 0) {
        ret = vg_mig_wait_completed(r->src->qmp, timeout, on_sample, r, &info,
                                    err);
    }
    if (ret == 0) {
        r->a->total_ms = info.total_time_ms;
        r->a->downtime_ms = info.downtime_ms;
        r->a->setup_ms = info.setup_time_ms;
        r->a->ram_bytes = info.ram_transferred;
        r->a->active_bps = bench_rate_bps(&r->rate);
    }
    return ret;
}

/* The destination, running, holds the source's RAM. */
static int verify_dst(struct anchor_run *r, struct vg_error *err)
{
    struct vg_ram_map m;
    uint64_t sum;
    int ret =
        vg_mig_wait_runstate(r->dst->qmp, "running", ANCHOR_RUNSTATE_MS, err);

    if (ret == 0) {
        ret = vg_qemu_map_ram(r->dst, &m, err);
    }
    if (ret < 0) {
        vg_error_prefix(err, "destination");
        return ret;
    }
    sum = XXH3_64bits(m.base, m.size);
    vg_ram_unmap(&m);
    r->a->verified = sum == r->a->checksum;
    if (!r->a->verified) {
        return vg_error_set(err, EIO,
                            "RAM checksum %016" PRIx64 " at the destination, "
                            "%016" PRIx64 " at the source",
                            sum, r->a->checksum);
    }
    return 0;
}

static int run_steps(struct anchor_run *r, struct vg_error *err)
{
    int ret = start_qemus(r, err);

    if (ret == 0) {
        ret = fill_source(r, err);
    }
    if (ret == 0) {
        ret = migrate_ram(r, err);
    }
    if (ret == 0) {
        ret = verify_dst(r, err);
    }
    return ret;
}

int ram_anchor_run(struct ram_anchor *a, bool keep, struct vg_error *err)
{
    struct anchor_run r = {.a = a};
    int ret = vg_tmpdir_create("ram-anchor", &r.dir, err);

    if (ret == 0) {
        ret = run_steps(&r, err);
    }
    vg_qemu_free(r.dst);
    vg_qemu_free(r.src);
    if (ret < 0) {
        vg_error_prefix(err, "RAM anchor %" PRIu64 " MiB (logs in %s)",
                        a->size >> 20, r.dir ? r.dir : "?");
        g_strlcpy(a->error, err->msg, sizeof(a->error));
    } else if (keep) {
        fprintf(stderr,
                "vgmig-bench: RAM anchor %" PRIu64 " MiB: logs kept "
                "in %s\n",
                a->size >> 20, r.dir);
    } else {
        vg_tmpdir_remove(r.dir, NULL);
    }
    g_free(r.dir);
    return ret;
}

double ram_anchor_bps(const struct ram_anchor *a)
{
    if (!a->verified || a->total_ms <= 0) {
        return 0;
    }
    return (double)a->ram_bytes * 1000.0 / (double)a->total_ms;
}
