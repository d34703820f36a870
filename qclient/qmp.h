/*
 * qmp.h -- client for the QEMU Machine Protocol.
 *
 * vg_qmp_open_fd() reads the greeting and negotiates capabilities.  Each
 * command carries an "id"; the matching reply's "return" is handed back as
 * a json-glib node, a reply with "error" becomes a vg_error whose message
 * holds QEMU's class and description.  Events that arrive meanwhile are
 * queued and can be awaited by name.  Every wait is bounded by a timeout.
 */
#ifndef VG_QCLIENT_QMP_H
#define VG_QCLIENT_QMP_H

#include <json-glib/json-glib.h>

#include "common/error.h"

struct vg_qmp;

#define VG_QMP_DEFAULT_TIMEOUT_MS 10000

/* Take connected socket @fd (ownership taken, also on failure), read the
 * greeting and run qmp_capabilities. */
int vg_qmp_open_fd(int fd, struct vg_qmp **out, struct vg_error *err);
/* The same, waiting for the greeting until @deadline (vg_now_ms()): QEMU
 * sends it only once the machine is set up, which takes longer with
 * preallocated RAM. */
int vg_qmp_open_fd_by(int fd, int64_t deadline, struct vg_qmp **out,
                      struct vg_error *err);
void vg_qmp_close(struct vg_qmp *qmp);
/* Timeout for each reply or event wait, in milliseconds. */
void vg_qmp_set_timeout(struct vg_qmp *qmp, int timeout_ms);

/* Execute @cmd with arguments @args (a JSON object node, or NULL); on
 * success store the "return" value in *@ret if @ret is not NULL (free with
 * json_node_unref()).  A QMP error fails with -EREMOTEIO and
 * "<cmd>: <class>: <desc>". */
int vg_qmp_execute(struct vg_qmp *qmp, const char *cmd, JsonNode *args,
                   JsonNode **ret, struct vg_error *err);
/* As vg_qmp_execute() with @args_json the arguments as JSON text ("{...}"),
 * or NULL. */
int vg_qmp_execute_json(struct vg_qmp *qmp, const char *cmd,
                        const char *args_json, JsonNode **ret,
                        struct vg_error *err);
/* Run HMP command @cmdline through human-monitor-command; its output in
 * *@output (caller g_free()s). */
int vg_qmp_hmp(struct vg_qmp *qmp, const char *cmdline, char **output,
               struct vg_error *err);

/* Wait up to @timeout_ms for event @name (queued or arriving); remove it
 * from the queue and store the whole event object in *@event if not NULL.
 * -ETIMEDOUT if it does not come. */
int vg_qmp_wait_event(struct vg_qmp *qmp, const char *name, int timeout_ms,
                      JsonNode **event, struct vg_error *err);
/* Without waiting: whether event @name with a timestamp at or after
 * @after_us (microseconds since the epoch, QEMU's clock and
 * g_get_real_time()'s) has arrived; 1 and its timestamp in *@time_us if
 * so, else 0.  The event stays queued. */
int vg_qmp_event_time(struct vg_qmp *qmp, const char *name, int64_t after_us,
                      int64_t *time_us, struct vg_error *err);

#endif
