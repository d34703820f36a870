/*
 * pc-src.h -- the source's page server of a post-copy migration.
 *
 * At a post-copy switchover the source's saving session sends the device
 * state and, instead of the last dirty pages, the address of a page server
 * started here: a thread that listens on a UNIX socket of its own,
 * admits the one destination that shows the session's random token, and
 * serves it pages (pc-wire.h) from VRAM, which must not change while the
 * server runs: the device stays quiesced.  Once a destination got in,
 * the VRAM it was given is the VM's only copy of those pages (claimed):
 * the device must not run here again.  The server ends when the
 * destination has every page (finished) or pc_src_free() stops it; a
 * channel that breaks waits for the destination to connect again with
 * the token (a network cut that heals).
 */
#ifndef PC_SRC_H
#define PC_SRC_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "pc-wire.h"

struct pc_src_config {
    const uint8_t *vram; /* the device's VRAM, mapped here, or NULL: */
    /* ...read with this (from the page server's thread; a GPU's VRAM) */
    int (*read)(void *opaque, uint64_t off, void *dst, uint64_t len,
                struct vg_error *err);
    void *read_opaque;
    uint64_t npages;
    uint32_t page_size;
    uint32_t hash_version;   /* the stream's: its page hash */
    const uint64_t *pending; /* pages the destination lacks (copied) */
    const char *dir;         /* where a UNIX socket goes */
    unsigned delay_ms;       /* test only: wait before each reply */
    const char *tcp_host;    /* NULL: a UNIX socket in @dir; else listen on
                                TCP at this host name or address, on a port
                                the kernel picks */
};

struct pc_src_stats {
    uint64_t pending;      /* pages the destination lacked */
    uint64_t pages_served; /* pages sent, requests of any page counted */
    uint64_t requests;
    bool claimed;             /* a destination showed the token */
    bool finished;            /* it said it has every page */
    char error[VG_ERROR_MAX]; /* why the channel last broke, "" if never */
};

struct pc_src;

int pc_src_start(const struct pc_src_config *cfg, struct pc_src **out,
                 struct vg_error *err);
/* Stop serving (a destination still fetching loses the channel), join the
 * thread, remove the socket and free; NULL is ignored. */
void pc_src_free(struct pc_src *s);

/* The socket's address ("/path", or "tcp:HOST:PORT") and the token, for
 * the POSTCOPY record. */
const char *pc_src_address(const struct pc_src *s);
void pc_src_token(const struct pc_src *s, uint8_t token[PC_TOKEN_SIZE]);
void pc_src_get_stats(struct pc_src *s, struct pc_src_stats *st);
/* Wait up to @timeout_ms (< 0: for ever) for the destination to have
 * every page: true if it has. */
bool pc_src_wait(struct pc_src *s, int timeout_ms);

#endif
