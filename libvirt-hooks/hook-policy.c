#include "hook-policy.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

enum vgh_action vgh_phase_action(const char *op, const char *subop)
{
    static const struct {
        const char *op, *subop;
        enum vgh_action action;
    } table[] = {
        {"migrate", "begin", VGH_CHECK},
        {"prepare", "begin", VGH_START},
        {"stopped", "end", VGH_STOP},
        {"release", "end", VGH_STOP},
    };

    for (unsigned i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        if (strcmp(op, table[i].op) == 0 &&
            strcmp(subop, table[i].subop) == 0) {
            return table[i].action;
        }
    }
    return VGH_NONE;
}

const char *vgh_action_name(enum vgh_action action)
{
    switch (action) {
    case VGH_CHECK:
        return "check";
    case VGH_START:
        return "start";
    case VGH_STOP:
        return "stop";
    case VGH_NONE:
        break;
    }
    return "none";
}

const char *vgh_fmt_size(uint64_t bytes, char *buf, size_t size)
{
    static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    unsigned u = 0;

    while (u + 1 < sizeof(units) / sizeof(units[0]) && bytes >= 1024 &&
           bytes % 1024 == 0) {
        bytes /= 1024;
        u++;
    }
    snprintf(buf, size, "%" PRIu64 " %s", bytes, units[u]);
    return buf;
}

/* True if @path lies strictly below directory @root. */
static bool under_root(const char *path, const char *root)
{
    size_t n = strlen(root);

    while (n > 1 && root[n - 1] == '/') {
        n--;
    }
    if (n == 1 && root[0] == '/') {
        return path[0] == '/' && path[1] != '\0';
    }
    return strncmp(path, root, n) == 0 && path[n] == '/' && path[n + 1] != '\0';
}

int vgh_check_host(const struct vgh_config *cfg, const struct vgh_domain *dom,
                   const struct vgh_host *host, struct vg_error *err)
{
    uint64_t need = 0;
    bool any_managed = false;
    char a[32], b[32], c[32];

    for (unsigned i = 0; i < dom->n_vgpus; i++) {
        const struct vgh_vgpu *v = &dom->vgpus[i];

        if (!vgh_config_has_backend(cfg, v->backend)) {
            return vg_error_set(err, ENOTSUP,
                                "host %s cannot provide vGPU %u of domain "
                                "'%s': backend '%s' is not available here "
                                "(backends = %s in %s)",
                                host->hostname, i, dom->name, v->backend,
                                cfg->backends, cfg->path);
        }
        if (!v->managed) {
            continue;
        }
        any_managed = true;
        if (!under_root(v->socket, cfg->socket_root)) {
            return vg_error_set(err, EPERM,
                                "vGPU %u of domain '%s': socket %s is not "
                                "below %s, where this hook may create "
                                "sockets (socket_root in %s)",
                                i, dom->name, v->socket, cfg->socket_root,
                                cfg->path);
        }
        if (cfg->max_vram && v->size > cfg->max_vram) {
            return vg_error_set(
                err, E2BIG,
                "host %s cannot provide vGPU %u of domain '%s': its VRAM "
                "%s is larger than this host allows (max_vram = %s in %s)",
                host->hostname, i, dom->name,
                vgh_fmt_size(v->size, a, sizeof(a)),
                vgh_fmt_size(cfg->max_vram, b, sizeof(b)), cfg->path);
        }
        if (strcmp(v->backend, "cpu") == 0) {
            need += v->size;
        }
    }
    if (!any_managed) {
        return 0;
    }
    if (!host->server_ok) {
        return vg_error_set(err, ENOENT,
                            "host %s cannot provide the vGPUs of domain "
                            "'%s': %s is not an executable vgpu-server "
                            "(server in %s)",
                            host->hostname, dom->name, cfg->server, cfg->path);
    }
    if (need + cfg->reserve_memory > host->mem_available) {
        return vg_error_set(
            err, ENOMEM,
            "host %s cannot provide the vGPUs of domain '%s': they need %s "
            "of memory and %s must stay free (reserve_memory in %s), but "
            "only %s is available",
            host->hostname, dom->name, vgh_fmt_size(need, a, sizeof(a)),
            vgh_fmt_size(cfg->reserve_memory, b, sizeof(b)), cfg->path,
            vgh_fmt_size(host->mem_available, c, sizeof(c)));
    }
    return 0;
}

uint64_t vgh_mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "re");
    char line[256];
    uint64_t kib = 0;

    if (!f) {
        return 0;
    }
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, "MemAvailable: %" SCNu64 " kB", &kib) == 1) {
            break;
        }
    }
    fclose(f);
    return kib * 1024;
}
