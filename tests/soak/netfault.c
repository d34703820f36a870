#include "netfault.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

#define NS_PREFIX "vgsoak"

static const char *const addrs[2] = {"10.213.0.1", "10.213.0.2"};

/* Run @argv (NULL-terminated); its output becomes the error text. */
static int run(struct vg_error *err, const char *const *argv)
{
    g_autofree char *out = NULL;
    g_autofree char *cmd = g_strjoinv(" ", (char **)argv);
    GError *gerr = NULL;
    int status = 0;

    vg_dbg("netfault: %s", cmd);
    if (!g_spawn_sync(NULL, (char **)argv, NULL,
                      G_SPAWN_SEARCH_PATH | G_SPAWN_STDOUT_TO_DEV_NULL, NULL,
                      NULL, NULL, &out, &status, &gerr)) {
        int rc = vg_error_set(err, EIO, "%s: %s", cmd, gerr->message);

        g_error_free(gerr);
        return rc;
    }
    if (!g_spawn_check_wait_status(status, NULL)) {
        return vg_error_set(err, EIO, "%s failed: %s", cmd,
                            out ? g_strstrip(out) : "");
    }
    return 0;
}

#define RUN(err, ...) run((err), (const char *const[]){__VA_ARGS__, NULL})

/* Remove namespaces NS_PREFIX<pid>... whose process is gone. */
static void remove_stale(void)
{
    DIR *d = opendir("/run/netns");
    struct dirent *de;

    while (d && (de = readdir(d))) {
        const char *p = de->d_name;
        long pid;

        if (!g_str_has_prefix(p, NS_PREFIX)) {
            continue;
        }
        pid = strtol(p + strlen(NS_PREFIX), NULL, 10);
        if (pid > 0 && kill((pid_t)pid, 0) < 0 && errno == ESRCH) {
            vg_info("netfault: removing stale namespace %s", p);
            RUN(NULL, "ip", "netns", "delete", p);
        }
    }
    if (d) {
        closedir(d);
    }
}

/* Whether the kernel knows qdisc netem (tried on a dummy veth). */
static bool probe_netem(struct nf *n)
{
    return RUN(NULL, "ip", "-n", n->ns[0], "link", "add", "nfprobe0", "type",
               "veth", "peer", "name", "nfprobe1") == 0 &&
           RUN(NULL, "tc", "-n", n->ns[0], "qdisc", "add", "dev", "nfprobe0",
               "root", "netem", "delay", "1ms") == 0;
}

static int side_setup(struct nf *n, int s, struct vg_error *err)
{
    g_autofree char *cidr = g_strdup_printf("%s/24", addrs[s]);
    g_autofree char *path = g_strdup_printf("/run/netns/%s", n->ns[s]);
    int rc;

    rc = RUN(err, "ip", "-n", n->ns[s], "addr", "add", cidr, "dev", n->dev[s]);
    if (rc == 0) {
        rc = RUN(err, "ip", "-n", n->ns[s], "link", "set", n->dev[s], "up");
    }
    if (rc == 0) {
        rc = RUN(err, "ip", "-n", n->ns[s], "link", "set", "lo", "up");
    }
    if (rc == 0) {
        rc = RUN(err, "ip", "netns", "exec", n->ns[s], "sysctl", "-q", "-w",
                 "net.ipv4.tcp_retries2=3", "net.ipv4.tcp_syn_retries=1");
    }
    if (rc == 0) {
        n->ns_fd[s] = open(path, O_RDONLY | O_CLOEXEC);
        if (n->ns_fd[s] < 0) {
            rc = vg_error_set(err, errno, "%s: %s", path, strerror(errno));
        }
    }
    return rc;
}

int nf_setup(struct nf *n, const char *tag, struct vg_error *err)
{
    g_autofree char *ip = NULL;
    g_autofree char *tc = NULL;
    int rc;

    memset(n, 0, sizeof(*n));
    n->ns_fd[0] = n->ns_fd[1] = n->root_fd = -1;
    if (geteuid() != 0) {
        g_strlcpy(n->why, "not root: network namespaces need CAP_SYS_ADMIN",
                  sizeof(n->why));
        return 0;
    }
    ip = g_find_program_in_path("ip");
    tc = g_find_program_in_path("tc");
    if (!ip || !tc) {
        g_strlcpy(n->why, "ip or tc (iproute2) not installed", sizeof(n->why));
        return 0;
    }
    remove_stale();
    for (int s = 0; s < 2; s++) {
        g_snprintf(n->ns[s], sizeof(n->ns[s]), NS_PREFIX "%d%s%c",
                   (int)getpid(), tag, 'a' + s);
        g_snprintf(n->dev[s], sizeof(n->dev[s]), "vgs%c", 'a' + s);
    }
    n->root_fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    rc = n->root_fd < 0 ? vg_error_set(err, errno, "/proc/self/ns/net: %s",
                                       strerror(errno))
                        : 0;
    if (rc == 0) {
        rc = RUN(err, "ip", "netns", "add", n->ns[0]);
    }
    if (rc == 0) {
        rc = RUN(err, "ip", "netns", "add", n->ns[1]);
    }
    if (rc == 0) {
        rc = RUN(err, "ip", "-n", n->ns[0], "link", "add", n->dev[0], "type",
                 "veth", "peer", "name", n->dev[1], "netns", n->ns[1]);
    }
    for (int s = 0; s < 2 && rc == 0; s++) {
        rc = side_setup(n, s, err);
    }
    if (rc < 0) {
        vg_error_prefix(err, "network namespaces");
        nf_teardown(n);
        return rc;
    }
    n->netem = probe_netem(n);
    RUN(NULL, "ip", "-n", n->ns[0], "link", "del", "nfprobe0");
    n->enabled = true;
    vg_info("netfault: namespaces %s (%s) and %s (%s), slow with %s", n->ns[0],
            addrs[0], n->ns[1], addrs[1], n->netem ? "netem" : "tbf");
    return 0;
}

void nf_teardown(struct nf *n)
{
    if (n->root_fd >= 0) {
        setns(n->root_fd, CLONE_NEWNET);
        close(n->root_fd);
    }
    for (int s = 0; s < 2; s++) {
        if (n->ns_fd[s] >= 0) {
            close(n->ns_fd[s]);
        }
        if (n->ns[s][0]) {
            RUN(NULL, "ip", "netns", "delete", n->ns[s]);
        }
    }
    memset(n, 0, sizeof(*n));
    n->ns_fd[0] = n->ns_fd[1] = n->root_fd = -1;
}

int nf_enter(struct nf *n, int side, struct vg_error *err)
{
    if (n->enabled && setns(n->ns_fd[side], CLONE_NEWNET) < 0) {
        return vg_error_set(err, errno, "setns %s: %s", n->ns[side],
                            strerror(errno));
    }
    return 0;
}

int nf_leave(struct nf *n, struct vg_error *err)
{
    if (n->enabled && setns(n->root_fd, CLONE_NEWNET) < 0) {
        return vg_error_set(err, errno, "setns back: %s", strerror(errno));
    }
    return 0;
}

const char *nf_addr(const struct nf *n, int side)
{
    return n->enabled ? addrs[side] : "127.0.0.1";
}

int nf_link(struct nf *n, int side, bool up, struct vg_error *err)
{
    int rc = 0;

    if (!n->enabled) {
        return vg_error_set(err, ENOTSUP, "channel faults disabled: %s",
                            n->why);
    }
    for (int s = 0; s < 2 && rc == 0; s++) {
        if (side >= 0 && s != side) {
            continue;
        }
        rc = RUN(err, "ip", "-n", n->ns[s], "link", "set", n->dev[s],
                 up ? "up" : "down");
    }
    /* A neighbour entry that failed while the link was down would keep
     * refusing connections ("No route to host") for a while. */
    for (int s = 0; s < 2 && rc == 0 && up; s++) {
        rc = RUN(err, "ip", "-n", n->ns[s], "neigh", "flush", "dev", n->dev[s]);
    }
    n->down = rc == 0 ? !up : n->down;
    return rc;
}

int nf_slow(struct nf *n, unsigned kbit, unsigned delay_ms,
            struct vg_error *err)
{
    g_autofree char *rate = g_strdup_printf("%ukbit", kbit);
    g_autofree char *delay = g_strdup_printf("%ums", delay_ms);
    /* tbf: a burst of 10 ms at the rate (at least a few packets), and a
     * queue that holds 1 s of it. */
    g_autofree char *burst =
        g_strdup_printf("%u", MAX(kbit * 1000 / 8 / 100, 16384u));
    int rc = 0;

    if (!n->enabled) {
        return vg_error_set(err, ENOTSUP, "channel faults disabled: %s",
                            n->why);
    }
    for (int s = 0; s < 2 && rc == 0; s++) {
        if (n->netem) {
            rc = RUN(err, "tc", "-n", n->ns[s], "qdisc", "replace", "dev",
                     n->dev[s], "root", "netem", "delay", delay, "rate", rate);
        } else {
            rc = RUN(err, "tc", "-n", n->ns[s], "qdisc", "replace", "dev",
                     n->dev[s], "root", "tbf", "rate", rate, "burst", burst,
                     "latency", "1s");
        }
    }
    n->slowed = n->slowed || rc == 0;
    return rc;
}

int nf_clear(struct nf *n, struct vg_error *err)
{
    int rc = 0;

    if (!n->enabled) {
        return 0;
    }
    if (n->slowed) {
        for (int s = 0; s < 2; s++) {
            RUN(NULL, "tc", "-n", n->ns[s], "qdisc", "del", "dev", n->dev[s],
                "root");
        }
        n->slowed = false;
    }
    if (n->down) {
        rc = nf_link(n, -1, true, err);
    }
    return rc;
}
