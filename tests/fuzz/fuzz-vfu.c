/*
 * fuzz-vfu.c -- fuzz target: vfio-user messages into the server's
 * decoding and dispatch (vfu_server_handle), on a fresh in-process
 * vgpu-server per input (no socket), the device running between
 * messages.  Input format: fuzz.h.
 *
 * Checked beyond "no crash, no sanitizer report, no access to a guard
 * page": every reply is a well-formed reply to its request (REPLY type,
 * same id and command, an error reply is a bare header, a size the
 * server's limit allows), and no file descriptor leaks across inputs.
 */
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/log.h"
#include "fuzz.h"
#include "vfio-migration/vfu-proto.h"
#include "vfio-migration/vfu-server.h"

#define MAX_FDS   15u
#define MAX_REPLY ((1u << 20) + 64u) /* the server's message limit */

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz-vfu: check failed: %s (%s:%d)\n", #cond,     \
                    __FILE__, __LINE__);                                       \
            abort();                                                           \
        }                                                                      \
    } while (0)

static uint8_t msgbuf[FUZZ_MAX_INPUT];

static void setup_once(void)
{
    static bool done;

    if (!done) {
        done = true;
        vg_log_set_prog("fuzz-vfu");
        fuzz_log_level();
    }
}

/* Lowest fd number free now: grows if a descriptor leaks. */
static int next_fd(void)
{
    int fd = dup(0);

    CHECK(fd >= 0);
    close(fd);
    return fd;
}

/* The harness's own message: write bytes into guest RAM. */
static void poke(int ram, const uint8_t *p, size_t len)
{
    uint32_t off;

    if (len < 4) {
        return;
    }
    memcpy(&off, p, 4);
    off %= FUZZ_VFU_RAM;
    len -= 4;
    if (len > FUZZ_VFU_RAM - off) {
        len = FUZZ_VFU_RAM - off;
    }
    CHECK(pwrite(ram, p + 4, len, off) == (ssize_t)len);
}

static void check_reply(const struct vfu_hdr *req, const uint8_t *reply)
{
    struct vfu_hdr h;

    memcpy(&h, reply, sizeof(h));
    CHECK((h.flags & VFU_FLAG_TYPE_MASK) == VFU_FLAG_REPLY);
    CHECK(h.id == req->id);
    CHECK(h.command == req->command);
    CHECK(h.size >= sizeof(h) && h.size <= MAX_REPLY);
    if (h.flags & VFU_FLAG_ERROR) {
        CHECK(h.error != 0 && h.size == sizeof(h));
    } else {
        CHECK(h.error == 0);
    }
}

/* Send one message of @len bytes at @p (@len >= header size). */
static bool send_one(struct vfu_server *srv, int ram, const uint8_t *p,
                     size_t len)
{
    int fds[MAX_FDS];
    const uint8_t *reply;
    struct vfu_hdr h;
    unsigned nfds;
    int drop;

    memcpy(&h, p, sizeof(h));
    if (h.command == FUZZ_VFU_POKE) {
        poke(ram, p + sizeof(h), len - sizeof(h));
        return true;
    }
    nfds = h.error & FUZZ_VFU_NFDS;
    for (unsigned i = 0; i < nfds; i++) {
        fds[i] = h.command == VFU_CMD_DMA_MAP
                     ? fcntl(ram, F_DUPFD_CLOEXEC, 0)
                     : eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        CHECK(fds[i] >= 0);
    }
    memcpy(msgbuf, p, len);
    memset(msgbuf + offsetof(struct vfu_hdr, error), 0, 4);
    drop = vfu_server_handle(srv, msgbuf, len, fds, nfds, &reply);
    CHECK(drop == 0 || drop == 1);
    if (reply) {
        check_reply(&h, reply);
    }
    return !drop;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct vfu_server_config cfg = {
        .socket_path = NULL,
        .gpu = {.vram_size = FUZZ_VRAM, .page_size = FUZZ_PAGE},
    };
    struct vfu_server *srv;
    struct vg_error err;
    size_t pos = 0;
    int fd0, ram;

    setup_once();
    if (size > FUZZ_MAX_INPUT) {
        return 0;
    }
    fd0 = next_fd();
    if (vfu_server_new(&cfg, &srv, &err) < 0) {
        fprintf(stderr, "fuzz-vfu: %s\n", err.msg);
        abort();
    }
    /* sealed as QEMU's memory-backend-memfd does: the server refuses
     * guest RAM that could shrink under it */
    ram = memfd_create("fuzz-guest-ram", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    CHECK(ram >= 0 && ftruncate(ram, FUZZ_VFU_RAM) == 0);
    CHECK(fcntl(ram, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
    while (size - pos >= sizeof(struct vfu_hdr)) {
        struct vfu_hdr h;
        size_t len;

        memcpy(&h, data + pos, sizeof(h));
        len = h.size < sizeof(h) ? sizeof(h) : h.size;
        if (len > size - pos) {
            len = size - pos; /* the last message is cut short */
        }
        if (!send_one(srv, ram, data + pos, len)) {
            break;
        }
        pos += len;
    }
    vfu_server_free(srv);
    close(ram);
    CHECK(next_fd() == fd0);
    CHECK(fuzz_guarded_maps() == 0);
    return 0;
}
