#include "migrate.h"

#include <errno.h>
#include <glib.h>
#include <inttypes.h>
#include <json-glib/json-glib.h>
#include <stdio.h>
#include <string.h>

#include "io.h"

#define RUNSTATE_POLL_US 10000
#define STATS_POLL_US    20000

bool vg_mig_status_final(const char *status)
{
    return !strcmp(status, "completed") || !strcmp(status, "failed") ||
           !strcmp(status, "cancelled");
}

int vg_mig_set_capability(struct vg_qmp *qmp, const char *cap, bool on,
                          struct vg_error *err)
{
    g_autofree char *args = g_strdup_printf(
        "{\"capabilities\": [{\"capability\": \"%s\", \"state\": %s}]}", cap,
        on ? "true" : "false");
    int rc =
        vg_qmp_execute_json(qmp, "migrate-set-capabilities", args, NULL, err);

    if (rc < 0) {
        vg_error_prefix(err, "capability %s", cap);
    }
    return rc;
}

int vg_mig_set_parameter(struct vg_qmp *qmp, const char *param, int64_t value,
                         struct vg_error *err)
{
    g_autofree char *args =
        g_strdup_printf("{\"%s\": %" PRId64 "}", param, value);
    int rc =
        vg_qmp_execute_json(qmp, "migrate-set-parameters", args, NULL, err);

    if (rc < 0) {
        vg_error_prefix(err, "parameter %s", param);
    }
    return rc;
}

int vg_mig_set_channels(struct vg_qmp *qmp, unsigned channels,
                        struct vg_error *err)
{
    int rc;

    if (channels == 0) {
        return vg_error_set(err, EINVAL, "0 migration channels");
    }
    rc = vg_mig_set_capability(qmp, "multifd", channels > 1, err);
    if (rc == 0 && channels > 1) {
        rc = vg_mig_set_parameter(qmp, "multifd-channels", channels, err);
    }
    return rc;
}

/* "tcp:HOST:PORT" from the first inet member of query-migrate's
 * socket-address list. */
static int socket_uri(JsonNode *ret, char **uri, struct vg_error *err)
{
    JsonObject *o = json_node_get_object(ret);
    JsonArray *a;
    JsonObject *sa;

    if (!json_object_has_member(o, "socket-address")) {
        return vg_error_set(err, EPROTO,
                            "query-migrate on the destination has no "
                            "socket-address");
    }
    a = json_object_get_array_member(o, "socket-address");
    if (!a || json_array_get_length(a) == 0) {
        return vg_error_set(err, EPROTO, "socket-address list is empty");
    }
    sa = json_array_get_object_element(a, 0);
    if (!sa || !json_object_has_member(sa, "host") ||
        !json_object_has_member(sa, "port")) {
        return vg_error_set(err, EPROTO, "socket-address without host/port");
    }
    *uri =
        g_strdup_printf("tcp:%s:%s", json_object_get_string_member(sa, "host"),
                        json_object_get_string_member(sa, "port"));
    return 0;
}

int vg_mig_incoming(struct vg_qmp *dst, char **uri, struct vg_error *err)
{
    return vg_mig_incoming_on(dst, "127.0.0.1", uri, err);
}

/* QMP @cmd (migrate-incoming, migrate-recover) listening on @host at a
 * port QEMU picks; the URI it listens on into *@uri. */
static int listen_on(struct vg_qmp *dst, const char *cmd, const char *host,
                     char **uri, struct vg_error *err)
{
    g_autofree char *args = g_strdup_printf("{\"uri\": \"tcp:%s:0\"}", host);
    JsonNode *ret = NULL;
    int rc = vg_qmp_execute_json(dst, cmd, args, NULL, err);

    if (rc == 0) {
        rc = vg_qmp_execute(dst, "query-migrate", NULL, &ret, err);
    }
    if (rc == 0) {
        rc = socket_uri(ret, uri, err);
    }
    if (ret) {
        json_node_unref(ret);
    }
    return rc;
}

int vg_mig_incoming_on(struct vg_qmp *dst, const char *host, char **uri,
                       struct vg_error *err)
{
    int rc = listen_on(dst, "migrate-incoming", host, uri, err);

    if (rc < 0) {
        vg_error_prefix(err, "incoming migration");
    }
    return rc;
}

int vg_mig_recover_on(struct vg_qmp *dst, const char *host, char **uri,
                      struct vg_error *err)
{
    int rc = listen_on(dst, "migrate-recover", host, uri, err);

    if (rc < 0) {
        vg_error_prefix(err, "post-copy recovery");
    }
    return rc;
}

int vg_mig_start(struct vg_qmp *src, const char *uri, struct vg_error *err)
{
    JsonBuilder *b = json_builder_new();
    JsonNode *args;
    int rc;

    json_builder_begin_object(b);
    json_builder_set_member_name(b, "uri");
    json_builder_add_string_value(b, uri);
    json_builder_end_object(b);
    args = json_builder_get_root(b);
    rc = vg_qmp_execute(src, "migrate", args, NULL, err);
    json_node_unref(args);
    g_object_unref(b);
    if (rc < 0) {
        vg_error_prefix(err, "migrate to %s", uri);
    }
    return rc;
}

int vg_mig_start_hmp(struct vg_qmp *src, const char *uri, struct vg_error *err)
{
    g_autofree char *cmd = g_strdup_printf("migrate -d %s", uri);
    g_autofree char *out = NULL;
    int rc = vg_qmp_hmp(src, cmd, &out, err);

    if (rc == 0 && out && *g_strstrip(out)) {
        rc = vg_error_set(err, EREMOTEIO, "%s", out);
    }
    if (rc < 0) {
        vg_error_prefix(err, "HMP '%s'", cmd);
    }
    return rc;
}

int vg_mig_cancel(struct vg_qmp *src, struct vg_error *err)
{
    int rc = vg_qmp_execute(src, "migrate_cancel", NULL, NULL, err);

    if (rc < 0) {
        vg_error_prefix(err, "migrate_cancel");
    }
    return rc;
}

/* Integer member @name of @o (may be NULL); -1 if absent or no number. */
static int64_t get_int(JsonObject *o, const char *name)
{
    JsonNode *n = o ? json_object_get_member(o, name) : NULL;

    if (!n || !JSON_NODE_HOLDS_VALUE(n)) {
        return -1;
    }
    if (json_node_get_value_type(n) == G_TYPE_INT64) {
        return json_node_get_int(n);
    }
    if (json_node_get_value_type(n) == G_TYPE_DOUBLE) {
        return (int64_t)json_node_get_double(n);
    }
    return -1;
}

/* String member @name of @o into @buf; "" if absent or not a string. */
static void copy_str(JsonObject *o, const char *name, char *buf, size_t len)
{
    JsonNode *n = json_object_get_member(o, name);
    const char *v = NULL;

    if (n && JSON_NODE_HOLDS_VALUE(n) &&
        json_node_get_value_type(n) == G_TYPE_STRING) {
        v = json_node_get_string(n);
    }
    g_strlcpy(buf, v ? v : "", len);
}

/* Join the strings of array member @name with "; " into @buf. */
static void join_strs(JsonObject *o, const char *name, char *buf, size_t len)
{
    JsonArray *a = NULL;
    guint i;

    buf[0] = '\0';
    if (json_object_has_member(o, name)) {
        a = json_object_get_array_member(o, name);
    }
    for (i = 0; a && i < json_array_get_length(a); i++) {
        const char *s = json_array_get_string_element(a, i);

        if (i) {
            g_strlcat(buf, "; ", len);
        }
        g_strlcat(buf, s ? s : "", len);
    }
}

/* Object member @name of @o, NULL if absent or not an object. */
static JsonObject *member_obj(JsonObject *o, const char *name)
{
    JsonNode *n = json_object_get_member(o, name);

    return n && JSON_NODE_HOLDS_OBJECT(n) ? json_node_get_object(n) : NULL;
}

static void parse_info(JsonObject *o, struct vg_mig_info *info)
{
    JsonObject *ram, *vfio;

    memset(info, 0, sizeof(*info));
    copy_str(o, "status", info->status, sizeof(info->status));
    copy_str(o, "error-desc", info->error_desc, sizeof(info->error_desc));
    join_strs(o, "blocked-reasons", info->blocked_reasons,
              sizeof(info->blocked_reasons));
    info->total_time_ms = get_int(o, "total-time");
    info->downtime_ms = get_int(o, "downtime");
    info->expected_downtime_ms = get_int(o, "expected-downtime");
    info->setup_time_ms = get_int(o, "setup-time");
    ram = member_obj(o, "ram");
    info->ram_transferred = get_int(ram, "transferred");
    info->ram_total = get_int(ram, "total");
    info->ram_remaining = get_int(ram, "remaining");
    info->ram_dirty_sync_count = get_int(ram, "dirty-sync-count");
    info->ram_mbps = get_int(ram, "mbps");
    vfio = member_obj(o, "vfio");
    info->has_vfio = vfio != NULL;
    info->vfio_transferred = get_int(vfio, "transferred");
}

int vg_mig_query(struct vg_qmp *qmp, struct vg_mig_info *info,
                 struct vg_error *err)
{
    JsonNode *ret = NULL;
    int rc = vg_qmp_execute(qmp, "query-migrate", NULL, &ret, err);

    if (rc == 0 && !JSON_NODE_HOLDS_OBJECT(ret)) {
        rc = vg_error_set(err, EPROTO, "query-migrate: not an object");
    }
    if (rc == 0) {
        parse_info(json_node_get_object(ret), info);
    }
    if (ret) {
        json_node_unref(ret);
    }
    return rc;
}

int vg_mig_poll(struct vg_qmp *qmp, int timeout_ms, vg_mig_poll_fn fn,
                void *opaque, struct vg_mig_info *info, struct vg_error *err)
{
    int64_t deadline = vg_now_ms() + timeout_ms;
    int rc;

    for (;;) {
        rc = vg_mig_query(qmp, info, err);
        if (rc < 0) {
            return rc;
        }
        if (vg_mig_status_final(info->status)) {
            return 0;
        }
        rc = fn ? fn(info, opaque, err) : 0;
        if (rc != 0) {
            return rc < 0 ? rc : 0;
        }
        if (vg_now_ms() > deadline) {
            return vg_error_set(err, ETIMEDOUT,
                                "migration still '%s' after %d ms (RAM %" PRId64
                                " of %" PRId64 " bytes sent)",
                                info->status, timeout_ms, info->ram_transferred,
                                info->ram_total);
        }
        g_usleep(VG_MIG_POLL_INTERVAL_MS * 1000);
    }
}

int vg_mig_wait_completed(struct vg_qmp *qmp, int timeout_ms, vg_mig_poll_fn fn,
                          void *opaque, struct vg_mig_info *info,
                          struct vg_error *err)
{
    int rc = vg_mig_poll(qmp, timeout_ms, fn, opaque, info, err);

    if (rc == 0 && strcmp(info->status, "completed") != 0) {
        rc = vg_error_set(err, EIO, "migration %s: %s",
                          info->status[0] ? info->status : "not started",
                          info->error_desc[0] ? info->error_desc
                                              : "(no error-desc)");
    }
    return rc;
}

int vg_mig_runstate(struct vg_qmp *qmp, char *buf, size_t len,
                    struct vg_error *err)
{
    JsonNode *ret = NULL;
    int rc = vg_qmp_execute(qmp, "query-status", NULL, &ret, err);

    if (rc == 0 && !JSON_NODE_HOLDS_OBJECT(ret)) {
        rc = vg_error_set(err, EPROTO, "query-status: not an object");
    }
    if (rc == 0) {
        copy_str(json_node_get_object(ret), "status", buf, len);
    }
    if (ret) {
        json_node_unref(ret);
    }
    return rc;
}

int vg_mig_wait_runstate(struct vg_qmp *qmp, const char *want, int timeout_ms,
                         struct vg_error *err)
{
    int64_t deadline = vg_now_ms() + timeout_ms;
    char state[VG_MIG_STATUS_MAX];
    int rc;

    for (;;) {
        rc = vg_mig_runstate(qmp, state, sizeof(state), err);
        if (rc < 0 || !strcmp(state, want)) {
            return rc;
        }
        if (vg_now_ms() > deadline) {
            return vg_error_set(err, ETIMEDOUT,
                                "VM is '%s', not '%s', after %d ms", state,
                                want, timeout_ms);
        }
        g_usleep(RUNSTATE_POLL_US);
    }
}

/* Member @name as text: strings as they are, integers in decimal, other
 * numbers with %g, null or absent as NULL. */
static char *member_text(JsonObject *o, const char *name)
{
    JsonNode *n = json_object_get_member(o, name);
    GType t;

    if (!n || !JSON_NODE_HOLDS_VALUE(n)) {
        return NULL;
    }
    t = json_node_get_value_type(n);
    if (t == G_TYPE_STRING) {
        return g_strdup(json_node_get_string(n));
    }
    if (t == G_TYPE_INT64) {
        return g_strdup_printf("%" PRId64, json_node_get_int(n));
    }
    if (t == G_TYPE_DOUBLE) {
        return g_strdup_printf("%.17g", json_node_get_double(n));
    }
    if (t == G_TYPE_BOOLEAN) {
        return g_strdup(json_node_get_boolean(n) ? "true" : "false");
    }
    return NULL;
}

static void stats_text(JsonObject *o, const char *name, char *buf, size_t len)
{
    g_autofree char *v = member_text(o, name);

    g_strlcpy(buf, v ? v : "", len);
}

static double stats_double(JsonObject *o, const char *name)
{
    JsonNode *n = json_object_get_member(o, name);

    if (!n || !JSON_NODE_HOLDS_VALUE(n)) {
        return -1;
    }
    return json_node_get_double(n);
}

static void stats_fill(JsonObject *o, struct vg_stats *st)
{
    stats_text(o, "state", st->state, sizeof(st->state));
    stats_text(o, "vram_checksum", st->vram_checksum,
               sizeof(st->vram_checksum));
    stats_text(o, "device_state_checksum", st->device_state_checksum,
               sizeof(st->device_state_checksum));
    stats_text(o, "last_error", st->last_error, sizeof(st->last_error));
    st->bytes_sent = get_int(o, "bytes_sent");
    st->bytes_received = get_int(o, "bytes_received");
    st->device_stopcopy_ms = stats_double(o, "device_stopcopy_ms");
}

int vg_stats_read(const char *path, struct vg_stats *st, struct vg_error *err)
{
    JsonParser *parser = json_parser_new();
    GError *gerr = NULL;
    JsonNode *root;
    int rc = 0;

    memset(st, 0, sizeof(*st));
    if (!json_parser_load_from_file(parser, path, &gerr)) {
        rc = vg_error_set(err, gerr->domain == G_FILE_ERROR ? ENOENT : EPROTO,
                          "stats %s: %s", path, gerr->message);
        g_error_free(gerr);
    } else if (!(root = json_parser_get_root(parser)) ||
               !JSON_NODE_HOLDS_OBJECT(root)) {
        rc = vg_error_set(err, EPROTO, "stats %s: not a JSON object", path);
    } else {
        st->root = json_node_copy(root);
        stats_fill(json_node_get_object(root), st);
    }
    g_object_unref(parser);
    return rc;
}

void vg_stats_clear(struct vg_stats *st)
{
    if (st->root) {
        json_node_unref(st->root);
    }
    memset(st, 0, sizeof(*st));
}

int vg_stats_int(const struct vg_stats *st, const char *name, int64_t *val,
                 struct vg_error *err)
{
    JsonObject *o = st->root ? json_node_get_object(st->root) : NULL;
    JsonNode *n = o ? json_object_get_member(o, name) : NULL;

    if (!n || !JSON_NODE_HOLDS_VALUE(n) ||
        (json_node_get_value_type(n) != G_TYPE_INT64 &&
         json_node_get_value_type(n) != G_TYPE_DOUBLE)) {
        return vg_error_set(err, ENOENT, "stats: no number '%s'", name);
    }
    *val = json_node_get_value_type(n) == G_TYPE_INT64
               ? json_node_get_int(n)
               : (int64_t)json_node_get_double(n);
    return 0;
}

char *vg_stats_str(const struct vg_stats *st, const char *name)
{
    return st->root ? member_text(json_node_get_object(st->root), name) : NULL;
}

int vg_stats_wait(const char *path, vg_stats_pred pred, void *opaque,
                  int timeout_ms, struct vg_stats *st, struct vg_error *err)
{
    int64_t deadline = vg_now_ms() + timeout_ms;
    struct vg_error last = {0};

    for (;;) {
        if (vg_stats_read(path, st, &last) == 0) {
            if (pred(st, opaque)) {
                return 0;
            }
            g_snprintf(last.msg, sizeof(last.msg),
                       "last state '%s', error '%s'", st->state,
                       st->last_error);
            vg_stats_clear(st);
        }
        if (vg_now_ms() > deadline) {
            return vg_error_set(err, ETIMEDOUT,
                                "stats %s: not as expected after %d ms (%s)",
                                path, timeout_ms, last.msg);
        }
        g_usleep(STATS_POLL_US);
    }
}

static bool state_is(const struct vg_stats *st, void *opaque)
{
    return !g_ascii_strcasecmp(st->state, opaque);
}

int vg_stats_wait_state(const char *path, const char *state, int timeout_ms,
                        struct vg_stats *st, struct vg_error *err)
{
    int rc = vg_stats_wait(path, state_is, (void *)state, timeout_ms, st, err);

    if (rc < 0) {
        vg_error_prefix(err, "waiting for state %s", state);
    }
    return rc;
}
