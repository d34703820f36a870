/*
 * qtest.h -- client for QEMU's qtest line protocol (system/qtest.c).
 *
 * One request line, one reply line: "OK [value]" on success; "FAIL ..." or
 * "ERR ..." become errors carrying the request and QEMU's text.  Every
 * reply is awaited at most the connection's timeout.  Asynchronous "IRQ"
 * lines are skipped (interrupts are not intercepted by this client).
 * Addresses are guest physical addresses; ports are x86 I/O ports.
 */
#ifndef VG_QCLIENT_QTEST_H
#define VG_QCLIENT_QTEST_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

struct vg_qtest;

#define VG_QTEST_DEFAULT_TIMEOUT_MS 10000

/* Wrap connected socket @fd (ownership taken, also on failure). */
int vg_qtest_open_fd(int fd, struct vg_qtest **out, struct vg_error *err);
void vg_qtest_close(struct vg_qtest *qt);
/* Per-reply timeout in milliseconds (default VG_QTEST_DEFAULT_TIMEOUT_MS). */
void vg_qtest_set_timeout(struct vg_qtest *qt, int timeout_ms);

/* Send one request built from @fmt (no newline); return the text after "OK"
 * (may be empty) in *@reply if @reply is not NULL (caller g_free()s). */
int vg_qtest_cmd(struct vg_qtest *qt, char **reply, struct vg_error *err,
                 const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Pipelining: send @len bytes of complete request lines (each ending in
 * '\n') without waiting, then take their replies in order, one per
 * vg_qtest_reply() call ("OK" text in *@reply as for vg_qtest_cmd()). */
int vg_qtest_send(struct vg_qtest *qt, const char *reqs, size_t len,
                  struct vg_error *err);
int vg_qtest_reply(struct vg_qtest *qt, char **reply, struct vg_error *err);

/* Guest memory, single accesses (little endian, as the guest sees them). */
int vg_qtest_readb(struct vg_qtest *qt, uint64_t addr, uint8_t *val,
                   struct vg_error *err);
int vg_qtest_readw(struct vg_qtest *qt, uint64_t addr, uint16_t *val,
                   struct vg_error *err);
int vg_qtest_readl(struct vg_qtest *qt, uint64_t addr, uint32_t *val,
                   struct vg_error *err);
int vg_qtest_readq(struct vg_qtest *qt, uint64_t addr, uint64_t *val,
                   struct vg_error *err);
int vg_qtest_writeb(struct vg_qtest *qt, uint64_t addr, uint8_t val,
                    struct vg_error *err);
int vg_qtest_writew(struct vg_qtest *qt, uint64_t addr, uint16_t val,
                    struct vg_error *err);
int vg_qtest_writel(struct vg_qtest *qt, uint64_t addr, uint32_t val,
                    struct vg_error *err);
int vg_qtest_writeq(struct vg_qtest *qt, uint64_t addr, uint64_t val,
                    struct vg_error *err);

/* Bulk guest memory (b64read/b64write, split into 1 MiB requests). */
int vg_qtest_memread(struct vg_qtest *qt, uint64_t addr, void *buf, size_t len,
                     struct vg_error *err);
int vg_qtest_memwrite(struct vg_qtest *qt, uint64_t addr, const void *buf,
                      size_t len, struct vg_error *err);
int vg_qtest_memset(struct vg_qtest *qt, uint64_t addr, uint8_t val, size_t len,
                    struct vg_error *err);

/* x86 port I/O. */
int vg_qtest_inb(struct vg_qtest *qt, uint16_t port, uint8_t *val,
                 struct vg_error *err);
int vg_qtest_inw(struct vg_qtest *qt, uint16_t port, uint16_t *val,
                 struct vg_error *err);
int vg_qtest_inl(struct vg_qtest *qt, uint16_t port, uint32_t *val,
                 struct vg_error *err);
int vg_qtest_outb(struct vg_qtest *qt, uint16_t port, uint8_t val,
                  struct vg_error *err);
int vg_qtest_outw(struct vg_qtest *qt, uint16_t port, uint16_t val,
                  struct vg_error *err);
int vg_qtest_outl(struct vg_qtest *qt, uint16_t port, uint32_t val,
                  struct vg_error *err);

#endif
