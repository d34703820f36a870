#include "qmp.h"

#include <errno.h>
#include <glib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "io.h"

struct vg_qmp {
    struct vg_linebuf lb;
    int timeout_ms;
    unsigned next_id;
    GQueue events; /* JsonNode * of event objects, oldest first */
};

/* Read and parse one message; must be a JSON object. */
static int read_msg(struct vg_qmp *qmp, int64_t deadline, JsonNode **msg,
                    struct vg_error *err)
{
    JsonParser *parser;
    GError *gerr = NULL;
    char *line = NULL;
    int rc;

    do {
        g_free(line);
        rc = vg_linebuf_read_line(&qmp->lb, &line, deadline, err);
        if (rc < 0) {
            return rc;
        }
    } while (line[0] == '\0');
    vg_trace("qmp < %.300s", line);
    parser = json_parser_new();
    if (!json_parser_load_from_data(parser, line, -1, &gerr)) {
        rc = vg_error_set(err, EPROTO, "bad JSON from QEMU: %s: %.100s",
                          gerr->message, line);
        g_error_free(gerr);
    } else if (!JSON_NODE_HOLDS_OBJECT(json_parser_get_root(parser))) {
        rc = vg_error_set(err, EPROTO, "QMP message not an object: %.100s",
                          line);
    } else {
        *msg = json_node_copy(json_parser_get_root(parser));
    }
    g_object_unref(parser);
    g_free(line);
    return rc;
}

static int send_node(struct vg_qmp *qmp, JsonNode *node, int64_t deadline,
                     struct vg_error *err)
{
    char *text = json_to_string(node, FALSE);
    int rc;

    vg_trace("qmp > %.300s", text);
    rc = vg_linebuf_write(&qmp->lb, text, strlen(text), deadline, err);
    if (rc == 0) {
        rc = vg_linebuf_write(&qmp->lb, "\n", 1, deadline, err);
    }
    g_free(text);
    return rc;
}

int vg_qmp_open_fd(int fd, struct vg_qmp **out, struct vg_error *err)
{
    return vg_qmp_open_fd_by(fd, vg_now_ms() + VG_QMP_DEFAULT_TIMEOUT_MS, out,
                             err);
}

int vg_qmp_open_fd_by(int fd, int64_t deadline, struct vg_qmp **out,
                      struct vg_error *err)
{
    struct vg_qmp *qmp = g_new0(struct vg_qmp, 1);
    JsonNode *msg = NULL;
    int rc;

    g_queue_init(&qmp->events);
    qmp->timeout_ms = VG_QMP_DEFAULT_TIMEOUT_MS;
    rc = vg_linebuf_init(&qmp->lb, fd, err);
    if (rc < 0) {
        close(fd);
        g_free(qmp);
        vg_error_prefix(err, "QMP");
        return rc;
    }
    rc = read_msg(qmp, deadline, &msg, err);
    if (rc == 0 && !json_object_has_member(json_node_get_object(msg), "QMP")) {
        rc = vg_error_set(err, EPROTO, "no QMP greeting");
    }
    if (msg) {
        json_node_unref(msg);
    }
    if (rc == 0) {
        rc = vg_qmp_execute(qmp, "qmp_capabilities", NULL, NULL, err);
    }
    if (rc < 0) {
        vg_error_prefix(err, "QMP handshake");
        vg_qmp_close(qmp);
        return rc;
    }
    *out = qmp;
    return 0;
}

void vg_qmp_close(struct vg_qmp *qmp)
{
    if (qmp) {
        g_queue_clear_full(&qmp->events, (GDestroyNotify)json_node_unref);
        vg_linebuf_destroy(&qmp->lb);
        g_free(qmp);
    }
}

void vg_qmp_set_timeout(struct vg_qmp *qmp, int timeout_ms)
{
    qmp->timeout_ms = timeout_ms;
}

/* Turn the reply @obj to command @cmd into *@ret or an error. */
static int take_reply(JsonObject *obj, const char *cmd, JsonNode **ret,
                      struct vg_error *err)
{
    JsonObject *e;

    if (json_object_has_member(obj, "return")) {
        if (ret) {
            *ret = json_node_copy(json_object_get_member(obj, "return"));
        }
        return 0;
    }
    if (json_object_has_member(obj, "error") &&
        JSON_NODE_HOLDS_OBJECT(json_object_get_member(obj, "error"))) {
        e = json_object_get_object_member(obj, "error");
        return vg_error_set(
            err, EREMOTEIO, "%s: %s: %s", cmd,
            json_object_get_string_member_with_default(e, "class", "?"),
            json_object_get_string_member_with_default(e, "desc", "?"));
    }
    return vg_error_set(err, EPROTO, "%s: reply has neither return nor error",
                        cmd);
}

int vg_qmp_execute(struct vg_qmp *qmp, const char *cmd, JsonNode *args,
                   JsonNode **ret, struct vg_error *err)
{
    int64_t deadline = vg_now_ms() + qmp->timeout_ms;
    JsonObject *req = json_object_new();
    JsonNode *node = json_node_new(JSON_NODE_OBJECT);
    JsonNode *msg = NULL;
    JsonObject *obj;
    unsigned id = ++qmp->next_id;
    int rc;

    json_object_set_string_member(req, "execute", cmd);
    if (args) {
        json_object_set_member(req, "arguments", json_node_copy(args));
    }
    json_object_set_int_member(req, "id", id);
    json_node_take_object(node, req);
    rc = send_node(qmp, node, deadline, err);
    json_node_unref(node);
    while (rc == 0) {
        rc = read_msg(qmp, deadline, &msg, err);
        if (rc < 0) {
            break;
        }
        obj = json_node_get_object(msg);
        if (json_object_has_member(obj, "event")) {
            g_queue_push_tail(&qmp->events, msg);
            continue;
        }
        if (json_object_has_member(obj, "id") &&
            json_node_get_value_type(json_object_get_member(obj, "id")) ==
                G_TYPE_INT64 &&
            json_object_get_int_member(obj, "id") == id) {
            rc = take_reply(obj, cmd, ret, err);
            json_node_unref(msg);
            return rc;
        }
        vg_warn("QMP: dropping unexpected message while waiting for %s", cmd);
        json_node_unref(msg);
    }
    vg_error_prefix(err, "QMP %s", cmd);
    return rc;
}

int vg_qmp_execute_json(struct vg_qmp *qmp, const char *cmd,
                        const char *args_json, JsonNode **ret,
                        struct vg_error *err)
{
    GError *gerr = NULL;
    JsonNode *args;
    int rc;

    if (!args_json) {
        return vg_qmp_execute(qmp, cmd, NULL, ret, err);
    }
    args = json_from_string(args_json, &gerr);
    if (!args) {
        rc = vg_error_set(err, EINVAL, "QMP %s: bad arguments: %s", cmd,
                          gerr ? gerr->message : "empty");
        if (gerr) {
            g_error_free(gerr);
        }
        return rc;
    }
    if (!JSON_NODE_HOLDS_OBJECT(args)) {
        json_node_unref(args);
        return vg_error_set(err, EINVAL, "QMP %s: arguments not an object",
                            cmd);
    }
    rc = vg_qmp_execute(qmp, cmd, args, ret, err);
    json_node_unref(args);
    return rc;
}

int vg_qmp_hmp(struct vg_qmp *qmp, const char *cmdline, char **output,
               struct vg_error *err)
{
    JsonObject *obj = json_object_new();
    JsonNode *args = json_node_new(JSON_NODE_OBJECT);
    JsonNode *ret = NULL;
    int rc;

    json_object_set_string_member(obj, "command-line", cmdline);
    json_node_take_object(args, obj);
    rc = vg_qmp_execute(qmp, "human-monitor-command", args, &ret, err);
    json_node_unref(args);
    if (rc < 0) {
        vg_error_prefix(err, "HMP \"%s\"", cmdline);
        return rc;
    }
    if (json_node_get_value_type(ret) != G_TYPE_STRING) {
        json_node_unref(ret);
        return vg_error_set(err, EPROTO, "HMP \"%s\": output not a string",
                            cmdline);
    }
    *output = g_strdup(json_node_get_string(ret));
    json_node_unref(ret);
    return 0;
}

/* Remove the first queued event called @name; NULL if none. */
static JsonNode *take_event(struct vg_qmp *qmp, const char *name)
{
    GList *l;
    JsonNode *ev;

    for (l = qmp->events.head; l; l = l->next) {
        ev = l->data;
        if (g_strcmp0(json_object_get_string_member_with_default(
                          json_node_get_object(ev), "event", ""),
                      name) == 0) {
            g_queue_delete_link(&qmp->events, l);
            return ev;
        }
    }
    return NULL;
}

int vg_qmp_wait_event(struct vg_qmp *qmp, const char *name, int timeout_ms,
                      JsonNode **event, struct vg_error *err)
{
    int64_t deadline = vg_now_ms() + timeout_ms;
    JsonNode *msg = NULL;
    int rc;

    for (;;) {
        msg = take_event(qmp, name);
        if (msg) {
            if (event) {
                *event = msg;
            } else {
                json_node_unref(msg);
            }
            return 0;
        }
        rc = read_msg(qmp, deadline, &msg, err);
        if (rc < 0) {
            vg_error_prefix(err, "QMP: waiting for event %s", name);
            return rc;
        }
        if (json_object_has_member(json_node_get_object(msg), "event")) {
            g_queue_push_tail(&qmp->events, msg);
        } else {
            vg_warn("QMP: dropping unexpected non-event message");
            json_node_unref(msg);
        }
    }
}

/* The event's "timestamp" in microseconds since the epoch; -1 if none. */
static int64_t event_time_us(JsonNode *ev)
{
    JsonObject *o = json_node_get_object(ev);
    JsonObject *ts;

    if (!json_object_has_member(o, "timestamp") ||
        !JSON_NODE_HOLDS_OBJECT(json_object_get_member(o, "timestamp"))) {
        return -1;
    }
    ts = json_object_get_object_member(o, "timestamp");
    return json_object_get_int_member_with_default(ts, "seconds", -1) *
               1000000 +
           json_object_get_int_member_with_default(ts, "microseconds", 0);
}

int vg_qmp_event_time(struct vg_qmp *qmp, const char *name, int64_t after_us,
                      int64_t *time_us, struct vg_error *err)
{
    JsonNode *msg = NULL;
    int rc;

    /* Queue whatever has arrived, without waiting. */
    while ((rc = read_msg(qmp, 0, &msg, err)) == 0) {
        if (json_object_has_member(json_node_get_object(msg), "event")) {
            g_queue_push_tail(&qmp->events, msg);
        } else {
            vg_warn("QMP: dropping unexpected non-event message");
            json_node_unref(msg);
        }
        msg = NULL;
    }
    if (rc != -ETIMEDOUT) {
        vg_error_prefix(err, "QMP: looking for event %s", name);
        return rc;
    }
    for (GList *l = qmp->events.head; l; l = l->next) {
        JsonObject *o = json_node_get_object(l->data);
        int64_t t = event_time_us(l->data);

        if (!g_strcmp0(json_object_get_string_member(o, "event"), name) &&
            t >= after_us) {
            *time_us = t;
            return 1;
        }
    }
    return 0;
}
