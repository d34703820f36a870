/*
 * pc-wire.h -- the post-copy page channel between two vgpu-servers.
 *
 * After a post-copy switchover the source server holds the pages the
 * destination has not got yet.  The destination server connects to the
 * address the stream's POSTCOPY record named (a UNIX socket path, or
 * "tcp:HOST:PORT") and, on that one connection, in host byte order:
 *   dst -> src  struct pc_hello (the record's token: nobody else gets in)
 *   src -> dst  struct pc_welcome, then the pending bitmap (npages bits in
 *               64-bit words; XXH3-64 of those bytes in bitmap_hash)
 *   then any number of
 *   dst -> src  struct pc_req {PC_OP_PAGES, first, count}
 *   src -> dst  struct pc_data, then count pages (XXH3-64 in hash)
 *   and finally
 *   dst -> src  struct pc_req {PC_OP_DONE}: every page has arrived
 *   src -> dst  struct pc_fin: the source's VRAM checksum (mig.h's
 *               vram_checksum), which the destination compares with its
 *               own; the source closes.
 * Both ends check every field: a request or reply outside VRAM, over
 * PC_REQ_MAX_BYTES, or not the one asked for ends the channel.
 */
#ifndef PC_WIRE_H
#define PC_WIRE_H

#include <stdint.h>

#include "common/error.h"

#define PC_MAGIC         0x3147504d47564756ull /* "VGVGMPG1" */
#define PC_VERSION       1u
#define PC_TOKEN_SIZE    16u
#define PC_ADDR_MAX      108u /* sun_path, NUL included */
#define PC_REQ_MAX_BYTES (1u << 20)

enum pc_op {
    PC_OP_PAGES = 1,
    PC_OP_DONE = 2,
};

struct pc_hello {
    uint64_t magic;
    uint32_t version;
    uint32_t reserved;
    uint8_t token[PC_TOKEN_SIZE];
};

struct pc_welcome {
    uint64_t magic;
    uint64_t npages;
    uint64_t pending; /* bits set in the bitmap that follows */
    uint32_t page_size;
    uint32_t reserved;
    uint64_t bitmap_hash;
};

struct pc_req {
    uint32_t op;
    uint32_t count;
    uint64_t first;
};

struct pc_data {
    uint64_t first;
    uint32_t count;
    uint32_t reserved;
    uint64_t hash;
};

struct pc_fin {
    uint64_t vram_checksum;
};

_Static_assert(sizeof(struct pc_hello) == 32, "pc_hello");
_Static_assert(sizeof(struct pc_welcome) == 40, "pc_welcome");
_Static_assert(sizeof(struct pc_req) == 16, "pc_req");
_Static_assert(sizeof(struct pc_data) == 24, "pc_data");

/* Send every byte of @iov (@n entries) on stream socket @fd (no SIGPIPE);
 * retried on EINTR and short writes. */
struct iovec;
int pc_send(int fd, struct iovec *iov, int n, struct vg_error *err);
/* Receive exactly @len bytes; -EPIPE if the peer closed first. */
int pc_recv(int fd, void *buf, uint64_t len, struct vg_error *err);
/* A stream socket connected to @addr ("/path" or "tcp:HOST:PORT"). */
int pc_connect(const char *addr, struct vg_error *err);
/* Bytes of a bitmap of @npages bits in 64-bit words. */
uint64_t pc_bitmap_bytes(uint64_t npages);

#endif
