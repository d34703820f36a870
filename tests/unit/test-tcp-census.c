/* Unit tests for qclient/tcp-census.c: this process's own loopback
 * connection, counted by local and by remote port, with Nagle's algorithm
 * on and then off on one end. */
#include <arpa/inet.h>
#include <glib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "qclient/tcp-census.h"

struct conn {
    int listener, client, server;
    int port;
};

static void conn_open(struct conn *c)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof(sa);

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    c->listener = socket(AF_INET, SOCK_STREAM, 0);
    g_assert_cmpint(c->listener, >=, 0);
    g_assert_cmpint(bind(c->listener, (struct sockaddr *)&sa, sizeof(sa)), ==,
                    0);
    g_assert_cmpint(listen(c->listener, 1), ==, 0);
    g_assert_cmpint(getsockname(c->listener, (struct sockaddr *)&sa, &len), ==,
                    0);
    c->port = ntohs(sa.sin_port);
    c->client = socket(AF_INET, SOCK_STREAM, 0);
    g_assert_cmpint(connect(c->client, (struct sockaddr *)&sa, sizeof(sa)), ==,
                    0);
    c->server = accept(c->listener, NULL, NULL);
    g_assert_cmpint(c->server, >=, 0);
}

static void conn_close(struct conn *c)
{
    close(c->client);
    close(c->server);
    close(c->listener);
}

static void census(int port, bool remote, struct vg_tcp_census *c)
{
    struct vg_error err = {0};

    g_assert_cmpint(vg_tcp_census(getpid(), port, remote, c, &err), ==, 0);
}

static void test_counts_by_port(void)
{
    struct vg_tcp_census c;
    struct conn k;
    int one = 1;

    conn_open(&k);
    /* The client's remote port; the accepted socket's local one (the
     * listener is not connected and does not count). */
    census(k.port, true, &c);
    g_assert_cmpuint(c.sockets, ==, 1);
    g_assert_cmpuint(c.nodelay, ==, 0);
    census(k.port, false, &c);
    g_assert_cmpuint(c.sockets, ==, 1);
    g_assert_cmpuint(c.nodelay, ==, 0);

    g_assert_cmpint(
        setsockopt(k.server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)), ==,
        0);
    census(k.port, false, &c);
    g_assert_cmpuint(c.sockets, ==, 1);
    g_assert_cmpuint(c.nodelay, ==, 1);
    census(k.port, true, &c);
    g_assert_cmpuint(c.nodelay, ==, 0);
    conn_close(&k);

    census(k.port, true, &c);
    g_assert_cmpuint(c.sockets, ==, 0);
}

static void test_no_such_process(void)
{
    struct vg_error err = {0};
    struct vg_tcp_census c;

    g_assert_cmpint(vg_tcp_census(0x7ffffff0, 1, true, &c, &err), <, 0);
    g_assert_nonnull(strstr(err.msg, "pidfd_open"));
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/tcp-census/counts-by-port", test_counts_by_port);
    g_test_add_func("/tcp-census/no-such-process", test_no_such_process);
    return g_test_run();
}
