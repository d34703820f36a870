/*
 * guest-test.h -- fixture of the real-guest tests: a TCG guest booted from
 * the image of `make guest-image` (guest/, docs/guest.md), running
 * vgpu-guest on its serial console, and the host side of that console.
 *
 * The image comes from $VGMIG_GUEST_DIR (vmlinuz, initrd.img, fw/).  Every
 * console has a reader thread that stamps each line with the host's
 * monotonic clock on arrival, so heartbeat gaps are measured as an outside
 * observer sees them; all lines also go to <dir>/<name>-console.log.
 * Lines of vgpu-guest look like "vgpu-guest: KIND key=value ..."
 * (vgpu-guest --help); gt_kv() reads a value.  Every wait is bounded.
 */
#ifndef VGMIG_TESTS_GUEST_GUEST_TEST_H
#define VGMIG_TESTS_GUEST_GUEST_TEST_H

#include <errno.h>
#include <glib.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "qclient/harness.h"
#include "qclient/io.h"
#include "qclient/migrate.h"
#include "qclient/pause.h"

#define GT_PREFIX "vgpu-guest: "
/* Booting the kernel under TCG on a busy 2-core machine. */
#define GT_BOOT_TIMEOUT_MS 180000
#define GT_LINE_TIMEOUT_MS 60000
#define GT_RAM_MIB         256

static struct vg_error gt_err;
#define GT_ERR (&gt_err)

static inline void gt_check(int rc, const char *expr, const char *file,
                            int line, const char *func)
{
    char *msg;

    if (rc >= 0) {
        return;
    }
    msg = g_strdup_printf("%s failed: %s", expr, gt_err.msg);
    g_assertion_message(G_LOG_DOMAIN, file, line, func, msg);
    g_free(msg);
}

#define GT_OK(call) gt_check((call), #call, __FILE__, __LINE__, G_STRFUNC)

#define GT_FAIL(...)                                                           \
    do {                                                                       \
        char *gt_msg_ = g_strdup_printf(__VA_ARGS__);                          \
        g_assertion_message(G_LOG_DOMAIN, __FILE__, __LINE__, G_STRFUNC,       \
                            gt_msg_);                                          \
        g_free(gt_msg_);                                                       \
    } while (0)

/* --------------------------------------------------------------- console */

struct gt_line {
    int64_t t_ms; /* vg_now_ms() when it arrived */
    int64_t t_us; /* g_get_real_time() then: QMP timestamps' clock */
    char *text;   /* without the line end */
};

struct gt_console {
    char *name;
    int fd; /* ours (a dup of the QEMU's serial socket) */
    FILE *log;
    GThread *thread;
    GMutex lock;
    GCond cond;
    GPtrArray *lines; /* struct gt_line *, in arrival order */
    bool eof;
    bool stop;
};

static inline void gt_line_free(gpointer p)
{
    struct gt_line *l = p;

    g_free(l->text);
    g_free(l);
}

static inline gpointer gt_console_thread(gpointer opaque)
{
    struct gt_console *c = opaque;
    struct vg_linebuf lb = {0};
    struct vg_error err;
    int rc = vg_linebuf_init(&lb, dup(c->fd), &err);

    while (rc == 0) {
        char *text = NULL;

        g_mutex_lock(&c->lock);
        if (c->stop) {
            g_mutex_unlock(&c->lock);
            break;
        }
        g_mutex_unlock(&c->lock);
        rc = vg_linebuf_read_line(&lb, &text, vg_now_ms() + 100, &err);
        if (rc == -ETIMEDOUT) {
            rc = 0;
            continue;
        }
        if (rc == 0) {
            struct gt_line *l = g_new0(struct gt_line, 1);

            l->t_ms = vg_now_ms();
            l->t_us = g_get_real_time();
            l->text = text;
            fprintf(c->log, "%s\n", text);
            fflush(c->log);
            g_mutex_lock(&c->lock);
            g_ptr_array_add(c->lines, l);
            g_cond_broadcast(&c->cond);
            g_mutex_unlock(&c->lock);
        }
    }
    vg_linebuf_destroy(&lb);
    g_mutex_lock(&c->lock);
    c->eof = true;
    g_cond_broadcast(&c->cond);
    g_mutex_unlock(&c->lock);
    return NULL;
}

/* Start reading the serial stream of @q into console @name. */
static inline struct gt_console *
gt_console_open(const char *dir, const char *name, struct vg_qemu *q)
{
    struct gt_console *c = g_new0(struct gt_console, 1);
    g_autofree char *path = g_strdup_printf("%s/%s-console.log", dir, name);

    g_assert_cmpint(q->serial_fd, >=, 0);
    c->name = g_strdup(name);
    c->fd = q->serial_fd;
    c->log = fopen(path, "w");
    g_assert_nonnull(c->log);
    g_mutex_init(&c->lock);
    g_cond_init(&c->cond);
    c->lines = g_ptr_array_new_with_free_func(gt_line_free);
    c->thread = g_thread_new(name, gt_console_thread, c);
    return c;
}

static inline void gt_console_close(struct gt_console *c)
{
    if (!c) {
        return;
    }
    g_mutex_lock(&c->lock);
    c->stop = true;
    g_mutex_unlock(&c->lock);
    g_thread_join(c->thread);
    g_ptr_array_free(c->lines, TRUE);
    g_mutex_clear(&c->lock);
    g_cond_clear(&c->cond);
    fclose(c->log);
    g_free(c->name);
    g_free(c);
}

/* Send command @cmd (a line) to the guest. */
static inline void gt_console_send(struct gt_console *c, const char *cmd)
{
    g_autofree char *line = g_strdup_printf("%s\n", cmd);
    size_t done = 0, len = strlen(line);

    while (done < len) {
        ssize_t n = write(c->fd, line + done, len - done);

        if (n > 0) {
            done += (size_t)n;
        } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            struct pollfd p = {.fd = c->fd, .events = POLLOUT};

            poll(&p, 1, 100);
        } else {
            GT_FAIL("console %s: write: %s", c->name, strerror(errno));
        }
    }
}

/* Number of lines of @c so far: where to wait from for what comes next. */
static inline guint gt_console_end(struct gt_console *c)
{
    guint n;

    g_mutex_lock(&c->lock);
    n = c->lines->len;
    g_mutex_unlock(&c->lock);
    return n;
}

/* The vgpu-guest line of kind @kind (e.g. "hb", "verify") in @text, or
 * NULL: its key=value part (after "vgpu-guest: KIND "). */
static inline const char *gt_match(const char *text, const char *kind)
{
    const char *p = strstr(text, GT_PREFIX);
    size_t kl = strlen(kind);

    if (!p) {
        return NULL;
    }
    p += strlen(GT_PREFIX);
    if (strncmp(p, kind, kl) != 0 || (p[kl] != ' ' && p[kl] != '\0')) {
        return NULL;
    }
    return p + kl;
}

/* Value of "@key=" in the key=value part @kv as a number (decimal or
 * 0x-hex); -1 if absent. */
static inline int64_t gt_kv(const char *kv, const char *key)
{
    size_t kl = strlen(key);
    const char *p = kv;

    while ((p = strstr(p, key))) {
        if ((p == kv || p[-1] == ' ') && p[kl] == '=') {
            return (int64_t)g_ascii_strtoull(p + kl + 1, NULL, 0);
        }
        p += kl;
    }
    return -1;
}

/* Wait until line number *@idx or a later one of @c is a vgpu-guest line
 * of @kind; *@idx then points past it, its text (g_free) in *@text and
 * its arrival in *@t_ms if not NULL.  Fails the test on "error:" lines,
 * on EOF and after @timeout_ms. */
static inline void gt_wait_kind(struct gt_console *c, guint *idx,
                                const char *kind, int timeout_ms, char **text,
                                int64_t *t_ms)
{
    gint64 end = g_get_monotonic_time() + (gint64)timeout_ms * 1000;

    g_mutex_lock(&c->lock);
    for (;;) {
        while (*idx < c->lines->len) {
            struct gt_line *l = g_ptr_array_index(c->lines, *idx);

            (*idx)++;
            if (gt_match(l->text, "error:")) {
                g_autofree char *msg = g_strdup(l->text);

                g_mutex_unlock(&c->lock);
                GT_FAIL("console %s: %s", c->name, msg);
            }
            if (gt_match(l->text, kind)) {
                *text = g_strdup(l->text);
                if (t_ms) {
                    *t_ms = l->t_ms;
                }
                g_mutex_unlock(&c->lock);
                return;
            }
        }
        if (c->eof) {
            g_mutex_unlock(&c->lock);
            GT_FAIL("console %s closed while waiting for '%s'", c->name, kind);
        }
        if (!g_cond_wait_until(&c->cond, &c->lock, end)) {
            g_mutex_unlock(&c->lock);
            GT_FAIL("console %s: no '%s' line within %d ms", c->name, kind,
                    timeout_ms);
        }
    }
}

/* How many lines of @c so far are vgpu-guest lines of @kind; the first
 * of them in *@first (g_free) if not NULL and there is one. */
static inline unsigned gt_count_kind(struct gt_console *c, const char *kind,
                                     char **first)
{
    unsigned n = 0;

    g_mutex_lock(&c->lock);
    for (guint i = 0; i < c->lines->len; i++) {
        struct gt_line *l = g_ptr_array_index(c->lines, i);

        if (gt_match(l->text, kind) && n++ == 0 && first) {
            *first = g_strdup(l->text);
        }
    }
    g_mutex_unlock(&c->lock);
    return n;
}

/* ------------------------------------------------------------ the guest */

/* Paths of the guest image. */
struct gt_image {
    char *kernel;
    char *initrd;
    char *fw; /* option ROMs for -kernel */
};

static inline void gt_image_get(struct gt_image *img)
{
    const char *dir = NULL;

    GT_OK(vg_env_path("VGMIG_GUEST_DIR", &dir, GT_ERR));
    img->kernel = g_build_filename(dir, "kernel", NULL);
    img->initrd = g_build_filename(dir, "initrd.img", NULL);
    img->fw = g_build_filename(dir, "fw", NULL);
    if (access(img->kernel, R_OK) || access(img->initrd, R_OK)) {
        GT_FAIL("no guest image in %s (make guest-image)", dir);
    }
}

static inline void gt_image_clear(struct gt_image *img)
{
    g_free(img->kernel);
    g_free(img->initrd);
    g_free(img->fw);
}

/* Start QEMU @name under TCG booting @img with vgpu-guest arguments
 * @guest_args (comma-separated words), with a vGPU on each socket of
 * @socks (NULL-terminated; NULL or empty: no vGPU), incoming ("defer")
 * if @incoming; with @paused (-S) an incoming VM stays paused after the
 * migration until "cont". */
static inline struct vg_qemu *gt_qemu_start(const char *dir, const char *name,
                                            const struct gt_image *img,
                                            const char *const *socks,
                                            const char *guest_args,
                                            bool incoming, bool paused)
{
    g_autofree char *append = g_strdup_printf(
        "console=ttyS0 quiet loglevel=1 panic=-1 vgpu_guest=%s", guest_args);
    const char *extra[] = {"-L",      img->fw,     "-kernel",    img->kernel,
                           "-initrd", img->initrd, "-append",    append,
                           "-smp",    "1",         "-no-reboot", NULL,
                           NULL};
    struct vg_qemu_opts qo = {
        .dir = dir,
        .name = name,
        .ram_mib = GT_RAM_MIB,
        .vgpu_sock = socks ? socks[0] : NULL,
        .vgpu_socks = socks && socks[0] ? socks + 1 : NULL,
        .incoming = incoming ? "defer" : NULL,
        .extra_args = extra,
        .accel = "tcg",
        .serial = true,
    };
    struct vg_qemu *q = NULL;

    if (paused) {
        extra[G_N_ELEMENTS(extra) - 2] = "-S";
    }
    GT_OK(vg_qemu_start(&qo, &q, GT_ERR));
    return q;
}

#endif
