#include "hook-config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <glib.h>

#include "common/log.h"
#include "common/size.h"

void vgh_config_defaults(struct vgh_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    snprintf(cfg->path, sizeof(cfg->path), "%s", VGH_CONFIG_PATH);
    snprintf(cfg->server, sizeof(cfg->server), "%s", VGH_DEFAULT_SERVER);
    snprintf(cfg->backends, sizeof(cfg->backends), "cpu");
    cfg->max_vram = 0;
    cfg->reserve_memory = 256ull << 20;
    snprintf(cfg->socket_root, sizeof(cfg->socket_root), "/run/vgmig");
    snprintf(cfg->state_dir, sizeof(cfg->state_dir), "/run/vgmig");
    snprintf(cfg->log_dir, sizeof(cfg->log_dir), "/var/log/libvirt/qemu");
    snprintf(cfg->qemu_user, sizeof(cfg->qemu_user), "libvirt-qemu");
    snprintf(cfg->qemu_group, sizeof(cfg->qemu_group), "libvirt-qemu");
    cfg->start_timeout = 10;
    cfg->stop_timeout = 5;
    cfg->postcopy_timeout = 60;
    snprintf(cfg->server_log_level, sizeof(cfg->server_log_level), "info");
}

static int set_string(char *dst, size_t size, const char *value, bool absolute,
                      struct vg_error *err)
{
    if (strlen(value) >= size) {
        return vg_error_set(err, ENAMETOOLONG, "'%s' is longer than %zu bytes",
                            value, size - 1);
    }
    if (absolute && value[0] != '/') {
        return vg_error_set(err, EINVAL, "'%s' is not an absolute path", value);
    }
    snprintf(dst, size, "%s", value);
    return 0;
}

static int set_seconds(unsigned *dst, const char *value, struct vg_error *err)
{
    char *end;
    unsigned long v;

    errno = 0;
    v = strtoul(value, &end, 10);
    if (!isdigit((unsigned char)value[0]) || *end || errno || v == 0 ||
        v > 3600) {
        return vg_error_set(err, EINVAL, "'%s' is not 1 to 3600 seconds",
                            value);
    }
    *dst = (unsigned)v;
    return 0;
}

/* "yes" or "no". */
static int set_bool(bool *dst, const char *value, struct vg_error *err)
{
    if (strcmp(value, "yes") != 0 && strcmp(value, "no") != 0) {
        return vg_error_set(err, EINVAL, "'%s' is not yes or no", value);
    }
    *dst = strcmp(value, "yes") == 0;
    return 0;
}

static int set_key(struct vgh_config *cfg, const char *key, const char *value,
                   struct vg_error *err)
{
    enum vg_log_level level;

    if (strcmp(key, "server") == 0) {
        return set_string(cfg->server, sizeof(cfg->server), value, true, err);
    }
    if (strcmp(key, "backends") == 0) {
        return set_string(cfg->backends, sizeof(cfg->backends), value, false,
                          err);
    }
    if (strcmp(key, "max_vram") == 0) {
        return vg_parse_size(value, 0, UINT64_MAX, &cfg->max_vram, err);
    }
    if (strcmp(key, "reserve_memory") == 0) {
        return vg_parse_size(value, 0, UINT64_MAX, &cfg->reserve_memory, err);
    }
    if (strcmp(key, "socket_root") == 0) {
        return set_string(cfg->socket_root, sizeof(cfg->socket_root), value,
                          true, err);
    }
    if (strcmp(key, "state_dir") == 0) {
        return set_string(cfg->state_dir, sizeof(cfg->state_dir), value, true,
                          err);
    }
    if (strcmp(key, "log_dir") == 0) {
        return set_string(cfg->log_dir, sizeof(cfg->log_dir), value, true, err);
    }
    if (strcmp(key, "qemu_user") == 0) {
        return set_string(cfg->qemu_user, sizeof(cfg->qemu_user), value, false,
                          err);
    }
    if (strcmp(key, "qemu_group") == 0) {
        return set_string(cfg->qemu_group, sizeof(cfg->qemu_group), value,
                          false, err);
    }
    if (strcmp(key, "start_timeout") == 0) {
        return set_seconds(&cfg->start_timeout, value, err);
    }
    if (strcmp(key, "stop_timeout") == 0) {
        return set_seconds(&cfg->stop_timeout, value, err);
    }
    if (strcmp(key, "server_log_level") == 0) {
        if (!vg_log_parse_level(value, &level)) {
            return vg_error_set(err, EINVAL,
                                "'%s' is not error, warn, info, debug or "
                                "trace",
                                value);
        }
        return set_string(cfg->server_log_level, sizeof(cfg->server_log_level),
                          value, false, err);
    }
    if (strcmp(key, "server_prealloc") == 0) {
        return set_bool(&cfg->server_prealloc, value, err);
    }
    if (strcmp(key, "postcopy_listen") == 0) {
        if (strpbrk(value, " \t/")) {
            return vg_error_set(err, EINVAL,
                                "'%s' is not a host name or address", value);
        }
        return set_string(cfg->postcopy_listen, sizeof(cfg->postcopy_listen),
                          value, false, err);
    }
    if (strcmp(key, "postcopy_timeout") == 0) {
        return set_seconds(&cfg->postcopy_timeout, value, err);
    }
    return vg_error_set(err, EINVAL, "unknown key '%s'", key);
}

int vgh_config_parse(const char *text, const char *path, struct vgh_config *cfg,
                     struct vg_error *err)
{
    g_auto(GStrv) lines = g_strsplit(text, "\n", -1);

    snprintf(cfg->path, sizeof(cfg->path), "%s", path);
    for (unsigned n = 0; lines[n]; n++) {
        char *line = lines[n];
        char *hash = strchr(line, '#');
        char *eq;
        int ret;

        if (hash) {
            *hash = '\0';
        }
        g_strstrip(line);
        if (!line[0]) {
            continue;
        }
        eq = strchr(line, '=');
        if (!eq) {
            return vg_error_set(err, EINVAL, "%s:%u: expected 'key = value'",
                                path, n + 1);
        }
        *eq = '\0';
        g_strstrip(line);
        g_strstrip(eq + 1);
        ret = set_key(cfg, line, eq + 1, err);
        if (ret < 0) {
            vg_error_prefix(err, "%s:%u: %s", path, n + 1, line);
            return ret;
        }
    }
    return 0;
}

int vgh_config_load(const char *path, struct vgh_config *cfg,
                    struct vg_error *err)
{
    g_autofree char *text = NULL;
    g_autoptr(GError) gerr = NULL;

    vgh_config_defaults(cfg);
    snprintf(cfg->path, sizeof(cfg->path), "%s", path);
    if (!g_file_get_contents(path, &text, NULL, &gerr)) {
        if (g_error_matches(gerr, G_FILE_ERROR, G_FILE_ERROR_NOENT)) {
            return 0;
        }
        return vg_error_set(err, EIO, "%s", gerr->message);
    }
    return vgh_config_parse(text, path, cfg, err);
}

bool vgh_config_has_backend(const struct vgh_config *cfg, const char *backend)
{
    g_auto(GStrv) names = g_strsplit(cfg->backends, ",", -1);

    for (unsigned i = 0; names[i]; i++) {
        if (strcmp(g_strstrip(names[i]), backend) == 0) {
            return true;
        }
    }
    return false;
}
