/*
 * fuzz-vfu.c -- fuzz target: vfio-user messages into the server's
 * decoding and dispatch (vfu_server_handle), on a fresh in-process
 * vgpu-server per input (no socket), the device running between
 * messages.  Input format: fuzz.h.
 *
 * The input picks the device's page size and the server's --dirty-track
 * and --precopy modes (FUZZ_VFU_CONFIG), the kind of each fd passed
 * (sealed or unsealed memfd, pipe, socket, regular file, eventfd,
 * /dev/null) and may shrink the unsealed guest RAM memfd after it was
 * offered (FUZZ_VFU_TRUNCATE): the server must refuse what could shrink
 * and never die of SIGBUS.
 *
 * Checked beyond "no crash, no sanitizer report, no access to a guard
 * page": every reply is a well-formed reply to its request (REPLY type,
 * same id and command, an error reply is a bare header, a size the
 * server's limit allows), and no file descriptor leaks across inputs.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "fuzz.h"
#include "vfio-user/vfu-proto.h"
#include "vfio-user/vfu-server.h"

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

struct harness {
    struct vfu_server *srv; /* created by the first message */
    int ram;                /* guest RAM, sealed as QEMU's */
    int loose;              /* the same size, unsealed */
};

/* The server, with the configuration of FUZZ_VFU_CONFIG's @p (NULL or
 * short: the defaults). */
static void server_new(struct harness *hs, const uint8_t *p, size_t len)
{
    uint8_t c[3] = {0, 0, 0};
    struct vfu_server_config cfg = {
        .socket_path = NULL,
        .gpu = {.vram_size = FUZZ_VRAM, .page_size = FUZZ_PAGE},
    };
    struct vg_error err;

    if (p) {
        memcpy(c, p, len < sizeof(c) ? len : sizeof(c));
    }
    if (c[0] & 1) {
        cfg.gpu = (struct vgpu_config){.vram_size = FUZZ_VRAM_64K,
                                       .page_size = FUZZ_PAGE_64K};
    }
    cfg.track = (enum mig_track_mode)(c[1] % 3);
    cfg.precopy = (enum mig_precopy_mode)(c[2] % 3);
    if (vfu_server_new(&cfg, &hs->srv, &err) < 0) {
        fprintf(stderr, "fuzz-vfu: %s\n", err.msg);
        abort();
    }
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

/* The harness's own message: resize the unsealed guest RAM. */
static void truncate_loose(int loose, const uint8_t *p, size_t len)
{
    uint32_t size = 0;

    memcpy(&size, p, len < 4 ? len : 4);
    CHECK(ftruncate(loose, size % (FUZZ_VFU_RAM + 1)) == 0);
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

/* The harness's own messages; true if @h was one. */
static bool harness_msg(struct harness *hs, const struct vfu_hdr *h,
                        const uint8_t *p, size_t len)
{
    switch (h->command) {
    case FUZZ_VFU_POKE:
        poke(hs->ram, p, len);
        return true;
    case FUZZ_VFU_TRUNCATE:
        truncate_loose(hs->loose, p, len);
        return true;
    case FUZZ_VFU_CONFIG: /* only first, see LLVMFuzzerTestOneInput */
        return true;
    default:
        return false;
    }
}

/* Send one message of @len bytes at @p (@len >= header size). */
static bool send_one(struct harness *hs, const uint8_t *p, size_t len)
{
    int fds[MAX_FDS];
    const uint8_t *reply;
    struct vfu_hdr h;
    unsigned nfds, kind;
    int drop;

    memcpy(&h, p, sizeof(h));
    if (harness_msg(hs, &h, p + sizeof(h), len - sizeof(h))) {
        return true;
    }
    nfds = h.error & FUZZ_VFU_NFDS;
    kind = (h.error >> FUZZ_VFU_FD_SHIFT) & 0xf;
    for (unsigned i = 0; i < nfds; i++) {
        fds[i] = fuzz_new_fd(kind, h.command, hs->ram, hs->loose);
        CHECK(fds[i] >= 0);
    }
    memcpy(msgbuf, p, len);
    memset(msgbuf + offsetof(struct vfu_hdr, error), 0, 4);
    drop = vfu_server_handle(hs->srv, msgbuf, len, fds, nfds, &reply);
    CHECK(drop == 0 || drop == 1);
    if (reply) {
        check_reply(&h, reply);
    }
    return !drop;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct harness hs;
    struct vfu_hdr h;
    size_t pos = 0;
    int fd0;

    setup_once();
    if (size > FUZZ_MAX_INPUT) {
        return 0;
    }
    fd0 = next_fd();
    hs.ram = fuzz_ram_fd(true);
    hs.loose = fuzz_ram_fd(false);
    if (size >= sizeof(h)) {
        memcpy(&h, data, sizeof(h));
    }
    if (size >= sizeof(h) && h.command == FUZZ_VFU_CONFIG && h.size > 16 &&
        h.size <= size) {
        server_new(&hs, data + sizeof(h), h.size - sizeof(h));
    } else {
        server_new(&hs, NULL, 0);
    }
    while (size - pos >= sizeof(struct vfu_hdr)) {
        size_t len;

        memcpy(&h, data + pos, sizeof(h));
        len = h.size < sizeof(h) ? sizeof(h) : h.size;
        if (len > size - pos) {
            len = size - pos; /* the last message is cut short */
        }
        if (!send_one(&hs, data + pos, len)) {
            break;
        }
        pos += len;
    }
    vfu_server_free(hs.srv);
    close(hs.ram);
    close(hs.loose);
    CHECK(next_fd() == fd0);
    CHECK(fuzz_guarded_maps() == 0);
    return 0;
}
