/*
 * Robustness of the real vgpu-server against a raw vfio-user client: every
 * malformed message gets an error reply (or, where the stream cannot be
 * re-framed, a reply and a disconnect) and the server keeps serving.  Also
 * checks the socket mode and that SIGTERM removes the socket.
 */
#include <errno.h>
#include <glib.h>
#include <linux/vfio.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vfio-user/vfu-proto.h"
#include "vgpu/vgpu-regs.h"

struct server {
    GPid pid;
    char *dir;
    char *path;
};

static struct server srv;

/* The server dies with the test, even when an assertion aborts it. */
static void die_with_parent(gpointer data)
{
    prctl(PR_SET_PDEATHSIG, SIGTERM);
}

static void server_start(void)
{
    const char *bin = getenv("VGMIG_SERVER");
    GError *gerr = NULL;

    if (!bin) {
        bin = "build/vgpu-server";
    }
    srv.dir = g_dir_make_tmp("vfu-robust-XXXXXX", &gerr);
    g_assert_no_error(gerr);
    srv.path = g_build_filename(srv.dir, "vgpu.sock", NULL);
    char *argv[] = {(char *)bin, "--socket",    srv.path, "--vram",
                    "16M",       "--log-level", "error",  NULL};
    g_spawn_async(NULL, argv, NULL,
                  G_SPAWN_DO_NOT_REAP_CHILD | G_SPAWN_STDOUT_TO_DEV_NULL,
                  die_with_parent, NULL, &srv.pid, &gerr);
    g_assert_no_error(gerr);
    for (int i = 0; i < 500 && !g_file_test(srv.path, G_FILE_TEST_EXISTS);
         i++) {
        g_usleep(10000);
    }
    g_assert_true(g_file_test(srv.path, G_FILE_TEST_EXISTS));
}

static int connect_server(void)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);

    g_assert_cmpint(fd, >=, 0);
    g_strlcpy(addr.sun_path, srv.path, sizeof(addr.sun_path));
    g_assert_cmpint(connect(fd, (struct sockaddr *)&addr, sizeof(addr)), ==, 0);
    return fd;
}

static void send_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;

    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        g_assert_cmpint(n, >, 0);
        p += n;
        len -= (size_t)n;
    }
}

/* Send a request whose header claims @size (0: the real size). */
static void send_req(int fd, uint16_t id, uint16_t cmd, const void *payload,
                     size_t len, uint32_t size)
{
    struct vfu_hdr h = {.id = id,
                        .command = cmd,
                        .size = size ? size : (uint32_t)(sizeof(h) + len)};

    send_all(fd, &h, sizeof(h));
    if (len) {
        send_all(fd, payload, len);
    }
}

/* Receive a reply within @timeout_ms; false on EOF. */
static bool recv_reply(int fd, struct vfu_hdr *h, void *buf, size_t size,
                       int timeout_ms)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    size_t got = 0, body;
    ssize_t n;

    g_assert_cmpint(poll(&pfd, 1, timeout_ms), ==, 1);
    n = recv(fd, h, sizeof(*h), MSG_WAITALL);
    if (n == 0) {
        return false;
    }
    if (n < 0) {
        g_error("recv reply header: %s", strerror(errno));
    }
    g_assert_cmpint(n, ==, sizeof(*h));
    g_assert_cmpuint(h->flags & VFU_FLAG_TYPE_MASK, ==, VFU_FLAG_REPLY);
    g_assert_cmpuint(h->size, >=, sizeof(*h));
    body = h->size - sizeof(*h);
    g_assert_cmpuint(body, <=, size);
    while (got < body) {
        n = recv(fd, (char *)buf + got, body - got, 0);
        g_assert_cmpint(n, >, 0);
        got += (size_t)n;
    }
    return true;
}

static void expect_error(int fd, uint16_t id, uint32_t errnum)
{
    struct vfu_hdr h;
    char buf[64];

    g_assert_true(recv_reply(fd, &h, buf, sizeof(buf), 5000));
    g_assert_cmpuint(h.id, ==, id);
    g_assert_cmpuint(h.flags & VFU_FLAG_ERROR, !=, 0);
    g_assert_cmpuint(h.error, ==, errnum);
    g_assert_cmpuint(h.size, ==, sizeof(h));
}

static void expect_eof(int fd)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    char c;

    g_assert_cmpint(poll(&pfd, 1, 5000), ==, 1);
    g_assert_cmpint(recv(fd, &c, 1, 0), ==, 0);
}

static void do_version(int fd)
{
    static const char caps[] = "{\"capabilities\":{\"max_msg_fds\":16,"
                               "\"max_data_xfer_size\":1048576,"
                               "\"pgsizes\":4096,\"migration\":{}}}";
    char msg[sizeof(struct vfu_version) + sizeof(caps)];
    struct vfu_version v = {0, 0};
    struct vfu_hdr h;
    char reply[512];

    memcpy(msg, &v, sizeof(v));
    memcpy(msg + sizeof(v), caps, sizeof(caps));
    send_req(fd, 1, VFU_CMD_VERSION, msg, sizeof(msg), 0);
    g_assert_true(recv_reply(fd, &h, reply, sizeof(reply) - 1, 5000));
    g_assert_cmpuint(h.flags & VFU_FLAG_ERROR, ==, 0);
    reply[h.size - sizeof(h)] = '\0';
    g_assert_nonnull(strstr(reply + 4, "\"max_data_xfer_size\":1048576"));
    g_assert_null(strstr(reply + 4, "migration"));
}

/* A valid config space read returns the vendor and device IDs. */
static void check_read_ids(int fd, uint16_t id)
{
    struct vfu_region_rw rw = {0, VFIO_PCI_CONFIG_REGION_INDEX, 4};
    struct vfu_hdr h;
    uint8_t buf[64];
    uint32_t ids;

    send_req(fd, id, VFU_CMD_REGION_READ, &rw, sizeof(rw), 0);
    g_assert_true(recv_reply(fd, &h, buf, sizeof(buf), 5000));
    g_assert_cmpuint(h.id, ==, id);
    g_assert_cmpuint(h.flags & VFU_FLAG_ERROR, ==, 0);
    g_assert_cmpuint(h.size, ==, sizeof(h) + sizeof(rw) + 4);
    memcpy(&ids, buf + sizeof(rw), 4);
    g_assert_cmphex(ids, ==, VGPU_PCI_VENDOR_ID | (VGPU_PCI_DEVICE_ID << 16));
}

static void test_socket_mode(void)
{
    struct stat st;

    g_assert_cmpint(stat(srv.path, &st), ==, 0);
    g_assert_true(S_ISSOCK(st.st_mode));
    g_assert_cmpuint(st.st_mode & 07777, ==, 0600);
}

static void test_bad_requests(void)
{
    int fd = connect_server();
    struct vfu_region_rw rw = {0, VFIO_PCI_CONFIG_REGION_INDEX, 4};
    struct vfu_hdr bad = {
        .id = 9, .command = VFU_CMD_REGION_READ, .size = 16, .flags = 5};

    /* before VERSION */
    send_req(fd, 2, VFU_CMD_REGION_READ, &rw, sizeof(rw), 0);
    expect_error(fd, 2, EINVAL);
    do_version(fd);
    check_read_ids(fd, 3);
    /* short payload: 8 bytes of a 16-byte REGION_READ */
    send_req(fd, 4, VFU_CMD_REGION_READ, &rw, 8, 0);
    expect_error(fd, 4, EINVAL);
    /* unknown command */
    send_req(fd, 5, 99, NULL, 0, 0);
    expect_error(fd, 5, ENOTSUP);
    /* out-of-range region reads */
    rw.offset = 254;
    send_req(fd, 6, VFU_CMD_REGION_READ, &rw, sizeof(rw), 0);
    expect_error(fd, 6, EINVAL);
    rw = (struct vfu_region_rw){UINT64_MAX - 1, VGPU_BAR_VRAM, 4};
    send_req(fd, 7, VFU_CMD_REGION_READ, &rw, sizeof(rw), 0);
    expect_error(fd, 7, EINVAL);
    rw = (struct vfu_region_rw){0, 12, 4};
    send_req(fd, 8, VFU_CMD_REGION_READ, &rw, sizeof(rw), 0);
    expect_error(fd, 8, EINVAL);
    /* garbage flags (type 5) */
    send_all(fd, &bad, sizeof(bad));
    expect_error(fd, 9, EINVAL);
    check_read_ids(fd, 10);
    close(fd);
}

static void test_oversized(void)
{
    int fd = connect_server();
    size_t big = 4u << 20;
    char *junk = g_malloc0(big);

    do_version(fd);
    send_req(fd, 11, VFU_CMD_REGION_WRITE, junk, big,
             (uint32_t)(sizeof(struct vfu_hdr) + big));
    expect_error(fd, 11, E2BIG);
    check_read_ids(fd, 12);
    g_free(junk);
    close(fd);
}

static void test_unframeable(void)
{
    static const uint8_t garbage[16] = {0xde, 0xad, 0xbe, 0xef, 3, 0, 0, 0};
    struct vfu_hdr h = {.id = 13, .command = VFU_CMD_REGION_READ, .size = 32};
    int fd = connect_server();

    /* size below the header: error reply, then disconnect */
    do_version(fd);
    send_all(fd, garbage, sizeof(garbage));
    expect_error(fd, 0xadde, EINVAL);
    expect_eof(fd);
    close(fd);

    /* truncated message: half a header, then silence */
    fd = connect_server();
    do_version(fd);
    send_all(fd, &h, 10);
    expect_error(fd, 13, EINVAL);
    expect_eof(fd);
    close(fd);

    /* the server still serves */
    fd = connect_server();
    do_version(fd);
    check_read_ids(fd, 14);
    close(fd);
}

static void test_sigterm(void)
{
    int status;

    g_assert_cmpint(kill(srv.pid, SIGTERM), ==, 0);
    g_assert_cmpint(waitpid(srv.pid, &status, 0), ==, srv.pid);
    g_assert_true(WIFEXITED(status));
    g_assert_cmpint(WEXITSTATUS(status), ==, 0);
    g_assert_false(g_file_test(srv.path, G_FILE_TEST_EXISTS));
    rmdir(srv.dir);
}

int main(int argc, char **argv)
{
    int ret;

    g_test_init(&argc, &argv, NULL);
    server_start();
    g_test_add_func("/vfu-robust/socket-mode", test_socket_mode);
    g_test_add_func("/vfu-robust/bad-requests", test_bad_requests);
    g_test_add_func("/vfu-robust/oversized", test_oversized);
    g_test_add_func("/vfu-robust/unframeable", test_unframeable);
    g_test_add_func("/vfu-robust/sigterm", test_sigterm);
    ret = g_test_run();
    if (srv.pid > 0 && waitpid(srv.pid, NULL, WNOHANG) == 0) {
        kill(srv.pid, SIGTERM);
        waitpid(srv.pid, NULL, 0);
    }
    return ret;
}
