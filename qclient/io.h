/*
 * io.h -- line-oriented socket I/O with deadlines, shared by the QMP and
 * qtest clients.
 *
 * A struct vg_linebuf owns a connected stream socket and buffers what was
 * read past the end of the last line.  Every read waits at most a caller
 * given number of milliseconds; nothing blocks forever.
 */
#ifndef VG_QCLIENT_IO_H
#define VG_QCLIENT_IO_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

struct vg_linebuf {
    int fd;
    char *buf; /* bytes read but not yet returned */
    size_t len;
    size_t cap;
};

/* Milliseconds on CLOCK_MONOTONIC, for deadlines. */
int64_t vg_now_ms(void);

/* Take ownership of connected socket @fd (made non-blocking). */
int vg_linebuf_init(struct vg_linebuf *lb, int fd, struct vg_error *err);
/* Close the socket and free the buffer; safe on a zeroed struct. */
void vg_linebuf_destroy(struct vg_linebuf *lb);

/* Write all of @data before @deadline_ms (vg_now_ms() based). */
int vg_linebuf_write(struct vg_linebuf *lb, const void *data, size_t len,
                     int64_t deadline_ms, struct vg_error *err);
/* Read one line ending in '\n'; return it without "\n" or "\r\n" in
 * *@line (caller g_free()s).  -ETIMEDOUT after @deadline_ms, -EPIPE when
 * the peer closed the connection. */
int vg_linebuf_read_line(struct vg_linebuf *lb, char **line,
                         int64_t deadline_ms, struct vg_error *err);

/* Bind and listen on a UNIX stream socket at @path (removed first). */
int vg_unix_listen(const char *path, int *fd, struct vg_error *err);
/* Accept one connection on listening socket @lfd before @deadline_ms. */
int vg_unix_accept(int lfd, int *fd, int64_t deadline_ms, struct vg_error *err);

#endif
