#include "qtest.h"

#include <errno.h>
#include <glib.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "io.h"

#define BULK_CHUNK (1u << 20)

struct vg_qtest {
    struct vg_linebuf lb;
    int timeout_ms;
};

int vg_qtest_open_fd(int fd, struct vg_qtest **out, struct vg_error *err)
{
    struct vg_qtest *qt;
    int rc;

    qt = g_new0(struct vg_qtest, 1);
    rc = vg_linebuf_init(&qt->lb, fd, err);
    if (rc < 0) {
        close(fd);
        g_free(qt);
        vg_error_prefix(err, "qtest");
        return rc;
    }
    qt->timeout_ms = VG_QTEST_DEFAULT_TIMEOUT_MS;
    *out = qt;
    return 0;
}

void vg_qtest_close(struct vg_qtest *qt)
{
    if (qt) {
        vg_linebuf_destroy(&qt->lb);
        g_free(qt);
    }
}

void vg_qtest_set_timeout(struct vg_qtest *qt, int timeout_ms)
{
    qt->timeout_ms = timeout_ms;
}

int vg_qtest_send(struct vg_qtest *qt, const char *reqs, size_t len,
                  struct vg_error *err)
{
    vg_trace("qtest > %.*s", (int)(len < 200 ? len : 200), reqs);
    return vg_linebuf_write(&qt->lb, reqs, len, vg_now_ms() + qt->timeout_ms,
                            err);
}

int vg_qtest_reply(struct vg_qtest *qt, char **reply, struct vg_error *err)
{
    int64_t deadline = vg_now_ms() + qt->timeout_ms;
    char *line = NULL;
    int rc;

    for (;;) {
        rc = vg_linebuf_read_line(&qt->lb, &line, deadline, err);
        if (rc < 0) {
            return rc;
        }
        vg_trace("qtest < %.200s", line);
        if (strncmp(line, "IRQ ", 4) != 0) {
            break;
        }
        g_free(line);
    }
    if (strcmp(line, "OK") == 0 || strncmp(line, "OK ", 3) == 0) {
        if (reply) {
            *reply = g_strdup(line[2] ? line + 3 : "");
        }
    } else {
        rc = vg_error_set(err, EIO, "QEMU replied \"%.200s\"", line);
    }
    g_free(line);
    return rc;
}

/* Send @req (without newline) and wait for its reply line. */
static int transact(struct vg_qtest *qt, const char *req, char **reply,
                    struct vg_error *err)
{
    char *line = g_strconcat(req, "\n", NULL);
    char *msg;
    int rc = vg_qtest_send(qt, line, strlen(line), err);

    g_free(line);
    if (rc == 0) {
        rc = vg_qtest_reply(qt, reply, err);
    }
    if (rc < 0) {
        msg = g_strndup(req, 60);
        vg_error_prefix(err, "qtest \"%s%s\"", msg,
                        strlen(req) > 60 ? "..." : "");
        g_free(msg);
    }
    return rc;
}

int vg_qtest_cmd(struct vg_qtest *qt, char **reply, struct vg_error *err,
                 const char *fmt, ...)
{
    va_list ap;
    char *req;
    int rc;

    va_start(ap, fmt);
    req = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    rc = transact(qt, req, reply, err);
    g_free(req);
    return rc;
}

/* Run a request whose reply is "OK <integer>"; parse it. */
static int cmd_value(struct vg_qtest *qt, uint64_t *val, struct vg_error *err,
                     const char *req)
{
    char *reply = NULL;
    char *end;
    int rc = transact(qt, req, &reply, err);

    if (rc < 0) {
        return rc;
    }
    errno = 0;
    *val = strtoull(reply, &end, 0);
    if (errno || end == reply || *end != '\0') {
        rc = vg_error_set(err, EPROTO, "qtest \"%s\": bad value \"%.60s\"", req,
                          reply);
    }
    g_free(reply);
    return rc;
}

static int read_n(struct vg_qtest *qt, const char *op, uint64_t addr,
                  uint64_t *val, struct vg_error *err)
{
    char req[64];

    snprintf(req, sizeof(req), "%s 0x%" PRIx64, op, addr);
    return cmd_value(qt, val, err, req);
}

static int write_n(struct vg_qtest *qt, const char *op, uint64_t addr,
                   uint64_t val, struct vg_error *err)
{
    char req[80];

    snprintf(req, sizeof(req), "%s 0x%" PRIx64 " 0x%" PRIx64, op, addr, val);
    return transact(qt, req, NULL, err);
}

int vg_qtest_readb(struct vg_qtest *qt, uint64_t addr, uint8_t *val,
                   struct vg_error *err)
{
    uint64_t v = 0;
    int rc = read_n(qt, "readb", addr, &v, err);

    *val = (uint8_t)v;
    return rc;
}

int vg_qtest_readw(struct vg_qtest *qt, uint64_t addr, uint16_t *val,
                   struct vg_error *err)
{
    uint64_t v = 0;
    int rc = read_n(qt, "readw", addr, &v, err);

    *val = (uint16_t)v;
    return rc;
}

int vg_qtest_readl(struct vg_qtest *qt, uint64_t addr, uint32_t *val,
                   struct vg_error *err)
{
    uint64_t v = 0;
    int rc = read_n(qt, "readl", addr, &v, err);

    *val = (uint32_t)v;
    return rc;
}

int vg_qtest_readq(struct vg_qtest *qt, uint64_t addr, uint64_t *val,
                   struct vg_error *err)
{
    return read_n(qt, "readq", addr, val, err);
}

int vg_qtest_writeb(struct vg_qtest *qt, uint64_t addr, uint8_t val,
                    struct vg_error *err)
{
    return write_n(qt, "writeb", addr, val, err);
}

int vg_qtest_writew(struct vg_qtest *qt, uint64_t addr, uint16_t val,
                    struct vg_error *err)
{
    return write_n(qt, "writew", addr, val, err);
}

int vg_qtest_writel(struct vg_qtest *qt, uint64_t addr, uint32_t val,
                    struct vg_error *err)
{
    return write_n(qt, "writel", addr, val, err);
}

int vg_qtest_writeq(struct vg_qtest *qt, uint64_t addr, uint64_t val,
                    struct vg_error *err)
{
    return write_n(qt, "writeq", addr, val, err);
}

int vg_qtest_memread(struct vg_qtest *qt, uint64_t addr, void *buf, size_t len,
                     struct vg_error *err)
{
    uint8_t *p = buf;
    char *reply;
    guchar *data;
    gsize dlen;
    size_t n;
    int rc;

    while (len > 0) {
        n = len < BULK_CHUNK ? len : BULK_CHUNK;
        rc = vg_qtest_cmd(qt, &reply, err, "b64read 0x%" PRIx64 " 0x%zx", addr,
                          n);
        if (rc < 0) {
            return rc;
        }
        data = g_base64_decode(reply, &dlen);
        g_free(reply);
        if (dlen != n) {
            g_free(data);
            return vg_error_set(err, EPROTO,
                                "b64read 0x%" PRIx64 ": got %zu bytes, "
                                "expected %zu",
                                addr, (size_t)dlen, n);
        }
        memcpy(p, data, n);
        g_free(data);
        p += n;
        addr += n;
        len -= n;
    }
    return 0;
}

int vg_qtest_memwrite(struct vg_qtest *qt, uint64_t addr, const void *buf,
                      size_t len, struct vg_error *err)
{
    const uint8_t *p = buf;
    gchar *b64;
    size_t n;
    int rc;

    while (len > 0) {
        n = len < BULK_CHUNK ? len : BULK_CHUNK;
        b64 = g_base64_encode(p, n);
        rc = vg_qtest_cmd(qt, NULL, err, "b64write 0x%" PRIx64 " 0x%zx %s",
                          addr, n, b64);
        g_free(b64);
        if (rc < 0) {
            return rc;
        }
        p += n;
        addr += n;
        len -= n;
    }
    return 0;
}

int vg_qtest_memset(struct vg_qtest *qt, uint64_t addr, uint8_t val, size_t len,
                    struct vg_error *err)
{
    return vg_qtest_cmd(qt, NULL, err, "memset 0x%" PRIx64 " 0x%zx 0x%02x",
                        addr, len, val);
}

int vg_qtest_inb(struct vg_qtest *qt, uint16_t port, uint8_t *val,
                 struct vg_error *err)
{
    uint64_t v = 0;
    int rc = read_n(qt, "inb", port, &v, err);

    *val = (uint8_t)v;
    return rc;
}

int vg_qtest_inw(struct vg_qtest *qt, uint16_t port, uint16_t *val,
                 struct vg_error *err)
{
    uint64_t v = 0;
    int rc = read_n(qt, "inw", port, &v, err);

    *val = (uint16_t)v;
    return rc;
}

int vg_qtest_inl(struct vg_qtest *qt, uint16_t port, uint32_t *val,
                 struct vg_error *err)
{
    uint64_t v = 0;
    int rc = read_n(qt, "inl", port, &v, err);

    *val = (uint32_t)v;
    return rc;
}

int vg_qtest_outb(struct vg_qtest *qt, uint16_t port, uint8_t val,
                  struct vg_error *err)
{
    return write_n(qt, "outb", port, val, err);
}

int vg_qtest_outw(struct vg_qtest *qt, uint16_t port, uint16_t val,
                  struct vg_error *err)
{
    return write_n(qt, "outw", port, val, err);
}

int vg_qtest_outl(struct vg_qtest *qt, uint16_t port, uint32_t val,
                  struct vg_error *err)
{
    return write_n(qt, "outl", port, val, err);
}
