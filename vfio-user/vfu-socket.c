/*
 * vfu-socket.c -- the server's UNIX socket: listening (mode 0600, a stale
 * socket replaced), accepting a peer of our uid or root, attaching it as
 * the client and disconnecting it.  Runs on the control loop.
 */
#include "vfu-server-int.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "vfu-dma.h"

/* ------------------------------------------------------------ listening */

/* Remove @path if it is a socket nobody listens on. */
static int remove_stale(const struct sockaddr_un *addr, struct vg_error *err)
{
    struct stat st;
    int fd, ret;

    if (lstat(addr->sun_path, &st) < 0) {
        return errno == ENOENT
                   ? 0
                   : vg_error_set(err, errno, "%s", strerror(errno));
    }
    if (!S_ISSOCK(st.st_mode)) {
        return vg_error_set(err, EEXIST, "exists and is not a socket");
    }
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return vg_error_set(err, errno, "socket: %s", strerror(errno));
    }
    ret = connect(fd, (const struct sockaddr *)addr, sizeof(*addr));
    close(fd);
    if (ret == 0) {
        return vg_error_set(err, EADDRINUSE, "another server is listening");
    }
    vg_info("removing stale socket %s", addr->sun_path);
    return unlink(addr->sun_path) < 0
               ? vg_error_set(err, errno, "unlink: %s", strerror(errno))
               : 0;
}

int vfu_listen(struct vfu_server *srv, const char *path, struct vg_error *err)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    mode_t old;
    int ret;

    if (strlen(path) >= sizeof(addr.sun_path)) {
        return vg_error_set(err, ENAMETOOLONG, "longer than %zu bytes",
                            sizeof(addr.sun_path) - 1);
    }
    strcpy(addr.sun_path, path);
    ret = remove_stale(&addr, err);
    if (ret < 0) {
        return ret;
    }
    srv->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (srv->listen_fd < 0) {
        return vg_error_set(err, errno, "socket: %s", strerror(errno));
    }
    /* The socket is born 0600; no chmod(path) after bind, which would
     * follow a link put there in the meantime. */
    old = umask(0177);
    ret = bind(srv->listen_fd, (struct sockaddr *)&addr, sizeof(addr));
    umask(old);
    if (ret < 0) {
        return vg_error_set(err, errno, "bind: %s", strerror(errno));
    }
    srv->path = strdup(path);
    if (!srv->path || listen(srv->listen_fd, 4) < 0) {
        return vg_error_set(err, errno, "set up: %s", strerror(errno));
    }
    return 0;
}

/* ------------------------------------------------------------ accepting */

static bool peer_allowed(int fd)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);

    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
        vg_warn("SO_PEERCRED: %s", strerror(errno));
        return false;
    }
    if (cred.uid != geteuid() && cred.uid != 0) {
        vg_warn("refusing client pid %d uid %u (not our uid %u)", (int)cred.pid,
                (unsigned)cred.uid, (unsigned)geteuid());
        return false;
    }
    vg_info("client pid %d uid %u connected", (int)cred.pid,
            (unsigned)cred.uid);
    return true;
}

int vfu_accept(struct vfu_server *srv)
{
    int fd = accept4(srv->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

    if (fd < 0) {
        vg_warn("accept: %s", strerror(errno));
        return -1;
    }
    if (!peer_allowed(fd)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* ----------------------------------------------------------- the client */

void vfu_client_attach(struct vfu_server *srv, int fd)
{
    int sndbuf = (int)MAX_MSG;
    int fl = fcntl(fd, F_GETFL);

    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        vg_warn("client fd %d: O_NONBLOCK: %s", fd, strerror(errno));
    }
    /*
     * On AF_UNIX stream sockets the sender's SO_SNDBUF bounds the bytes in
     * flight. The default (net.core.wmem_default, 208 KiB) splits a
     * MIG_DATA_READ reply of MAX_XFER bytes into five sendmsg calls, each
     * waiting for the client to drain the previous one. Ask for room for a
     * whole reply (the kernel doubles the value for its overhead and caps
     * it at net.core.wmem_max); failing that, replies are merely slower.
     */
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)) < 0) {
        vg_warn("SO_SNDBUF: %s", strerror(errno));
    }
    srv->client_fd = fd;
}

void vfu_client_close(struct vfu_server *srv)
{
    if (srv->client_fd < 0) {
        return;
    }
    vfu_plane_detach(srv); /* its replies go to this client */
    vg_info("client disconnected; releasing %u DMA mappings and IRQ fds",
            vfu_dma_count(srv->dma));
    close(srv->client_fd);
    srv->client_fd = -1;
    srv->negotiated = false;
    srv->drop = false;
    vfu_rx_reset(&srv->rx);
    vfu_regs_lock(srv); /* the device may be stepping */
    vfu_data_release(srv);
    vfu_device_release(srv);
    mig_client_gone(srv->mig);
    vfu_regs_unlock(srv);
}
