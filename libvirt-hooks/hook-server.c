#include "hook-server.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <grp.h>
#include <inttypes.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <glib.h>

#include "common/log.h"

#define POLL_MS 20

/* What the hook remembers about one server. */
struct state {
    pid_t pid;
    char *socket;
    char *stats;
    char *dir; /* the socket directory the hook created, or NULL */
};

static void state_clear(struct state *st)
{
    g_free(st->socket);
    g_free(st->stats);
    g_free(st->dir);
    memset(st, 0, sizeof(*st));
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}

static const char *dom_key(const struct vgh_domain *dom)
{
    return dom->uuid && dom->uuid[0] ? dom->uuid : dom->name;
}

static char *log_path(const struct vgh_config *cfg,
                      const struct vgh_domain *dom)
{
    return g_strdup_printf("%s/%s-vgpu.log", cfg->log_dir, dom->name);
}

static int open_log(const struct vgh_config *cfg, const struct vgh_domain *dom)
{
    g_autofree char *path = log_path(cfg, dom);

    if (g_mkdir_with_parents(cfg->log_dir, 0700) < 0) {
        return -1;
    }
    return open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY,
                0640);
}

void vgh_note(const struct vgh_config *cfg, const struct vgh_domain *dom,
              const char *fmt, ...)
{
    g_autoptr(GDateTime) now = g_date_time_new_now_utc();
    g_autofree char *stamp = g_date_time_format(now, "%F %T");
    g_autofree char *text = NULL;
    g_autofree char *line = NULL;
    va_list ap;
    int fd = open_log(cfg, dom);

    va_start(ap, fmt);
    text = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    vg_dbg("%s", text);
    if (fd < 0) {
        return;
    }
    line =
        g_strdup_printf("%s vgmig-hook[%d]: %s\n", stamp, (int)getpid(), text);
    if (write(fd, line, strlen(line)) < 0) {
        /* best effort: the message also went to stderr */
    }
    close(fd);
}

bool vgh_socket_accepts(const char *path)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    int fd, ret;

    if (strlen(path) >= sizeof(addr.sun_path)) {
        return false;
    }
    memcpy(addr.sun_path, path, strlen(path) + 1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return false;
    }
    ret = connect(fd, (struct sockaddr *)&addr, sizeof(addr));
    close(fd);
    return ret == 0;
}

/* ------------------------------------------------------- state files -- */

static char *state_path(const struct vgh_config *cfg,
                        const struct vgh_domain *dom, unsigned idx)
{
    return g_strdup_printf("%s/%s-%u.state", cfg->state_dir, dom_key(dom), idx);
}

static int state_write(const char *path, const struct state *st,
                       struct vg_error *err)
{
    g_autofree char *text = g_strdup_printf(
        "pid=%d\nsocket=%s\nstats=%s\ndir=%s\n", (int)st->pid, st->socket,
        st->stats ? st->stats : "", st->dir ? st->dir : "");
    g_autoptr(GError) gerr = NULL;

    if (!g_file_set_contents(path, text, -1, &gerr)) {
        return vg_error_set(err, EIO, "cannot record the server: %s",
                            gerr->message);
    }
    return 0;
}

static int state_read(const char *path, struct state *st)
{
    g_autofree char *text = NULL;
    g_auto(GStrv) lines = NULL;

    memset(st, 0, sizeof(*st));
    if (!g_file_get_contents(path, &text, NULL, NULL)) {
        return -ENOENT;
    }
    lines = g_strsplit(text, "\n", -1);
    for (unsigned i = 0; lines[i]; i++) {
        const char *l = lines[i];
        if (g_str_has_prefix(l, "pid=")) {
            st->pid = (pid_t)atoi(l + 4);
        } else if (g_str_has_prefix(l, "socket=") && l[7]) {
            st->socket = g_strdup(l + 7);
        } else if (g_str_has_prefix(l, "stats=") && l[6]) {
            st->stats = g_strdup(l + 6);
        } else if (g_str_has_prefix(l, "dir=") && l[4]) {
            st->dir = g_strdup(l + 4);
        }
    }
    return st->socket ? 0 : -EINVAL;
}

/* ------------------------------------------------------------ processes -- */

/*
 * True while @pid exists and is not a zombie whose threads are all gone:
 * a killed server's main thread can be a zombie while its other threads
 * (the data plane's) still exit, holding its socket open.  num_threads is
 * the 18th field after the command's closing parenthesis.
 */
static bool alive(pid_t pid)
{
    g_autofree char *path = NULL;
    g_autofree char *stat = NULL;
    g_auto(GStrv) fields = NULL;
    const char *close_paren;

    if (pid <= 1) {
        return false;
    }
    path = g_strdup_printf("/proc/%d/stat", (int)pid);
    if (!g_file_get_contents(path, &stat, NULL, NULL)) {
        return false;
    }
    close_paren = strrchr(stat, ')');
    if (!close_paren || close_paren[1] != ' ') {
        return false;
    }
    if (close_paren[2] != 'Z' && close_paren[2] != 'X') {
        return true;
    }
    fields = g_strsplit(close_paren + 2, " ", 19);
    return g_strv_length(fields) > 17 && atoi(fields[17]) > 1;
}

/*
 * True while @pid is a live vgpu-server serving @socket.  Only for servers
 * started by an earlier run of the hook: right after exec() the kernel
 * may not show the new command line yet.
 */
static bool is_our_server(pid_t pid, const char *socket)
{
    g_autofree char *path = NULL;
    g_autofree char *cmdline = NULL;
    gsize len = 0;

    if (!alive(pid)) {
        return false;
    }
    path = g_strdup_printf("/proc/%d/cmdline", (int)pid);
    if (!g_file_get_contents(path, &cmdline, &len, NULL)) {
        return false;
    }
    for (gsize off = 0; off < len;) {
        const char *arg = cmdline + off;
        gsize alen = strlen(arg);
        gsize next = off + alen + 1;
        if ((strcmp(arg, "--socket") == 0 || strcmp(arg, "-s") == 0) &&
            next < len && strcmp(cmdline + next, socket) == 0) {
            return true;
        }
        off = next;
    }
    return false;
}

/* Whether the statistics at @stats say the server still serves the pages
 * a post-copy left behind to a destination (its VM's only copy). */
static bool serving_postcopy(const char *stats)
{
    g_autofree char *text = NULL;

    if (!stats || !g_file_get_contents(stats, &text, NULL, NULL)) {
        return false;
    }
    return strstr(text, "\"postcopy\": true") &&
           strstr(text, "\"postcopy_done\": false");
}

/*
 * SIGTERM, then SIGKILL after the timeout (postcopy_timeout while the
 * server's statistics @stats say it serves a post-copy destination);
 * true once it is gone.  Unless @spawned (started by this very run), @pid
 * must first prove to be the server of @socket.
 */
static bool terminate(const struct vgh_config *cfg, pid_t pid,
                      const char *socket, const char *stats, bool spawned)
{
    unsigned waited = 0;

    if (spawned ? !alive(pid) : !is_our_server(pid, socket)) {
        return true;
    }
    kill(pid, SIGTERM);
    while (alive(pid)) {
        if (waited >= cfg->stop_timeout * 1000u &&
            (waited >= cfg->postcopy_timeout * 1000u ||
             !serving_postcopy(stats))) {
            kill(pid, SIGKILL);
            for (unsigned i = 0; i < 250 && alive(pid); i++) {
                sleep_ms(POLL_MS);
            }
            return !alive(pid);
        }
        sleep_ms(POLL_MS);
        waited += POLL_MS;
    }
    return true;
}

static void remove_socket(const char *path)
{
    struct stat sb;

    if (lstat(path, &sb) == 0 && S_ISSOCK(sb.st_mode)) {
        unlink(path);
    }
}

/* Stop what @state_file records and remove its traces.  The socket
 * directory the hook created goes too if it is empty, or, with @dirs, is
 * added to @dirs for the caller to remove once the other servers that
 * share it are stopped. */
static int stop_recorded(const struct vgh_config *cfg,
                         const struct vgh_domain *dom, const char *state_file,
                         bool spawned, GPtrArray *dirs, struct vg_error *err)
{
    struct state st;
    g_autofree char *stats = NULL;

    if (state_read(state_file, &st) < 0) {
        unlink(state_file); /* unreadable: nothing we can act on */
        return 0;
    }
    if (!terminate(cfg, st.pid, st.socket, st.stats, spawned)) {
        int ret = vg_error_set(err, EBUSY,
                               "vgpu-server pid %d of %s does not exit even "
                               "after SIGKILL",
                               (int)st.pid, st.socket);
        state_clear(&st);
        return ret;
    }
    if (st.stats && g_file_get_contents(st.stats, &stats, NULL, NULL)) {
        g_strstrip(stats);
        g_strdelimit(stats, "\n", ' ');
        vgh_note(cfg, dom, "final statistics of %s: %s", st.socket, stats);
        unlink(st.stats);
    }
    if (st.stats) {
        /* The server writes its statistics through STATS.tmp.PID. */
        g_autofree char *tmp =
            g_strdup_printf("%s.tmp.%d", st.stats, (int)st.pid);
        unlink(tmp);
    }
    remove_socket(st.socket);
    if (st.dir && dirs) {
        g_ptr_array_add(dirs, g_steal_pointer(&st.dir));
    } else if (st.dir) {
        rmdir(st.dir); /* only when empty */
    }
    vgh_note(cfg, dom, "stopped vgpu-server pid %d, removed %s", (int)st.pid,
             st.socket);
    unlink(state_file);
    state_clear(&st);
    return 0;
}

int vgh_servers_stop(const struct vgh_config *cfg, const struct vgh_domain *dom,
                     struct vg_error *err)
{
    g_autofree char *pattern =
        g_strdup_printf("%s/%s-*.state", cfg->state_dir, dom_key(dom));
    g_autoptr(GPtrArray) dirs = g_ptr_array_new_with_free_func(g_free);
    glob_t g = {0};
    int ret = 0;

    if (glob(pattern, 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++) {
            struct vg_error e = {0};
            if (stop_recorded(cfg, dom, g.gl_pathv[i], false, dirs, &e) < 0 &&
                ret == 0) {
                ret = vg_error_set(err, e.code, "%s", e.msg);
            }
        }
    }
    globfree(&g);
    /* Sockets nobody serves any more (e.g. a server that was killed). */
    for (unsigned i = 0; i < dom->n_vgpus; i++) {
        if (dom->vgpus[i].managed && dom->vgpus[i].socket &&
            !vgh_socket_accepts(dom->vgpus[i].socket)) {
            remove_socket(dom->vgpus[i].socket);
        }
    }
    /* Several vGPUs of a domain share their socket directory, which the
     * first server's record names: it is empty only now. */
    for (guint i = 0; i < dirs->len; i++) {
        rmdir(g_ptr_array_index(dirs, i)); /* only when empty */
    }
    return ret;
}

/* --------------------------------------------------------------- start -- */

int vgh_server_owner(const struct vgh_config *cfg, const struct vgh_domain *dom,
                     uid_t *uid, gid_t *gid, struct vg_error *err)
{
    struct passwd *pw;
    struct group *gr;

    if (dom->has_label) {
        *uid = dom->uid;
        *gid = dom->gid;
        return 0;
    }
    pw = getpwnam(cfg->qemu_user);
    if (!pw) {
        return vg_error_set(err, ENOENT,
                            "the domain XML has no DAC label and there is "
                            "no user '%s' (qemu_user in %s)",
                            cfg->qemu_user, cfg->path);
    }
    gr = getgrnam(cfg->qemu_group);
    if (!gr) {
        return vg_error_set(err, ENOENT, "no group '%s' (qemu_group in %s)",
                            cfg->qemu_group, cfg->path);
    }
    *uid = pw->pw_uid;
    *gid = gr->gr_gid;
    return 0;
}

/*
 * Make sure the socket's directory exists and belongs to @uid; *created
 * gets the directory if this call made it.
 */
static int socket_dir(const char *socket, uid_t uid, gid_t gid, char **created,
                      struct vg_error *err)
{
    g_autofree char *dir = g_path_get_dirname(socket);
    g_autofree char *parent = g_path_get_dirname(dir);
    struct stat sb;

    *created = NULL;
    if (stat(dir, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode)) {
            return vg_error_set(err, ENOTDIR, "%s is not a directory", dir);
        }
        if (sb.st_uid != uid) {
            return vg_error_set(err, EPERM,
                                "socket directory %s belongs to uid %u; it "
                                "must belong to the QEMU user (uid %u) or "
                                "not exist, so that the hook creates it",
                                dir, (unsigned)sb.st_uid, (unsigned)uid);
        }
        return 0;
    }
    if (g_mkdir_with_parents(parent, 0755) < 0) {
        return vg_error_set(err, errno, "cannot create %s: %s", parent,
                            strerror(errno));
    }
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        return vg_error_set(err, errno, "cannot create %s: %s", dir,
                            strerror(errno));
    }
    if (chown(dir, uid, gid) < 0) {
        int e = errno;
        rmdir(dir);
        return vg_error_set(err, e, "cannot give %s to uid %u: %s", dir,
                            (unsigned)uid, strerror(e));
    }
    *created = g_strdup(dir);
    return 0;
}

static char *stats_path(const char *socket)
{
    g_autofree char *base = g_str_has_suffix(socket, ".sock")
                                ? g_strndup(socket, strlen(socket) - 5)
                                : g_strdup(socket);
    return g_strdup_printf("%s.stats.json", base);
}

struct msg {
    int tag; /* 1: the server's pid, 2: exec failed with errno */
    int value;
};

/* The detached grandchild: become the server or report why not. */
static void exec_server(const struct vgh_config *cfg, char **argv, int log_fd,
                        int status_fd, uid_t uid, gid_t gid)
{
    struct msg m = {2, 0};
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);

    if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(log_fd, 1) < 0 ||
        dup2(log_fd, 2) < 0) {
        goto fail;
    }
    /* Keep only stdio and the status pipe (close-on-exec) across exec. */
    if (status_fd > 3) {
        close_range(3, (unsigned)status_fd - 1, 0);
    }
    close_range((unsigned)status_fd + 1, ~0u, 0);
    if (chdir("/") < 0) {
        goto fail;
    }
    umask(0077);
    if (geteuid() != uid || getegid() != gid) {
        if (setgroups(0, NULL) < 0 || setgid(gid) < 0 || setuid(uid) < 0) {
            goto fail;
        }
    }
    signal(SIGPIPE, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    execv(cfg->server, argv);
fail:
    m.value = errno;
    if (write(status_fd, &m, sizeof(m)) < 0) {
        /* the hook reports a silent failure as an early exit */
    }
    _exit(127);
}

/* Fork a detached server; returns its pid or a negative errno. */
static pid_t spawn_server(const struct vgh_config *cfg, char **argv, int log_fd,
                          uid_t uid, gid_t gid, struct vg_error *err)
{
    int fds[2];
    pid_t child, server = -1;
    struct msg m;
    int status, exec_errno = 0;

    if (pipe2(fds, O_CLOEXEC) < 0) {
        return vg_error_set(err, errno, "pipe: %s", strerror(errno));
    }
    child = fork();
    if (child < 0) {
        close(fds[0]);
        close(fds[1]);
        return vg_error_set(err, errno, "fork: %s", strerror(errno));
    }
    if (child == 0) {
        pid_t grandchild;

        close(fds[0]);
        setsid();
        grandchild = fork();
        if (grandchild == 0) {
            exec_server(cfg, argv, log_fd, fds[1], uid, gid);
        }
        m.tag = 1;
        m.value = grandchild < 0 ? -errno : (int)grandchild;
        if (write(fds[1], &m, sizeof(m)) < 0) {
            _exit(1);
        }
        _exit(0);
    }
    close(fds[1]);
    while (read(fds[0], &m, sizeof(m)) == (ssize_t)sizeof(m)) {
        if (m.tag == 1) {
            server = (pid_t)m.value;
        } else if (m.tag == 2) {
            exec_errno = m.value;
        }
    }
    close(fds[0]);
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    if (server < 0 || server == 0) {
        return vg_error_set(err, server < 0 ? -server : EIO,
                            "cannot fork the server");
    }
    if (exec_errno) {
        return vg_error_set(err, exec_errno, "cannot run %s: %s", cfg->server,
                            strerror(exec_errno));
    }
    return server;
}

/* The last lines of the domain's log, for error messages. */
static char *log_tail(const struct vgh_config *cfg,
                      const struct vgh_domain *dom)
{
    g_autofree char *path = log_path(cfg, dom);
    g_autofree char *text = NULL;
    gsize len = 0;
    const char *p;
    int lines = 0;

    if (!g_file_get_contents(path, &text, &len, NULL) || len == 0) {
        return g_strdup("");
    }
    p = text + len;
    while (p > text && lines < 4) {
        p--;
        if (*p == '\n' && p != text + len - 1) {
            lines++;
        }
    }
    if (*p == '\n') {
        p++;
    }
    return g_strdup_printf("; the end of %s:\n%s", path, p);
}

static int start_one(const struct vgh_config *cfg, const struct vgh_domain *dom,
                     unsigned idx, uid_t uid, gid_t gid, struct vg_error *err)
{
    const struct vgh_vgpu *v = &dom->vgpus[idx];
    g_autofree char *sfile = state_path(cfg, dom, idx);
    g_autofree char *vram = g_strdup_printf("%" PRIu64, v->size);
    g_autofree char *page = g_strdup_printf("%" PRIu64, v->page_size);
    struct state st = {0};
    unsigned waited = 0;
    int log_fd, ret;

    /* Idempotent: a live server recorded for this socket is kept. */
    if (state_read(sfile, &st) == 0) {
        bool same = strcmp(st.socket, v->socket) == 0;
        if (same && is_our_server(st.pid, st.socket) &&
            vgh_socket_accepts(st.socket)) {
            vgh_note(cfg, dom, "vGPU %u: vgpu-server pid %d already serves %s",
                     idx, (int)st.pid, st.socket);
            state_clear(&st);
            return 0;
        }
        state_clear(&st);
        ret = stop_recorded(cfg, dom, sfile, false, NULL, err);
        if (ret < 0) {
            return ret;
        }
    }
    if (vgh_socket_accepts(v->socket)) {
        return vg_error_set(err, EADDRINUSE,
                            "another process already serves %s (not started "
                            "by this hook); stop it, or mark the vGPU "
                            "managed='no' in the domain metadata",
                            v->socket);
    }
    ret = socket_dir(v->socket, uid, gid, &st.dir, err);
    if (ret < 0) {
        return ret;
    }
    st.socket = g_strdup(v->socket);
    st.stats = stats_path(v->socket);
    log_fd = open_log(cfg, dom);
    if (log_fd < 0) {
        ret = vg_error_set(err, errno, "cannot open the log in %s: %s",
                           cfg->log_dir, strerror(errno));
        goto fail;
    }
    {
        char *argv[] = {
            (char *)cfg->server,
            "--socket",
            st.socket,
            "--vram",
            vram,
            "--page-size",
            page,
            "--backend",
            v->backend,
            "--log-level",
            (char *)cfg->server_log_level,
            "--stats-file",
            st.stats,
            cfg->server_prealloc ? "--prealloc" : NULL,
            NULL,
            NULL,
            NULL,
        };
        unsigned n = cfg->server_prealloc ? 14 : 13;

        if (cfg->postcopy_listen[0]) {
            argv[n++] = "--postcopy-listen";
            argv[n] = (char *)cfg->postcopy_listen;
        }
        vgh_note(cfg, dom,
                 "vGPU %u: starting %s --socket %s --vram %s --page-size %s "
                 "--backend %s%s%s%s as uid %u gid %u",
                 idx, cfg->server, st.socket, vram, page, v->backend,
                 cfg->server_prealloc ? " --prealloc" : "",
                 cfg->postcopy_listen[0] ? " --postcopy-listen " : "",
                 cfg->postcopy_listen, (unsigned)uid, (unsigned)gid);
        st.pid = spawn_server(cfg, argv, log_fd, uid, gid, err);
    }
    close(log_fd);
    if (st.pid < 0) {
        ret = st.pid;
        goto fail;
    }
    ret = state_write(sfile, &st, err);
    if (ret < 0) {
        kill(st.pid, SIGKILL);
        goto fail;
    }
    while (!vgh_socket_accepts(st.socket)) {
        if (!alive(st.pid)) {
            g_autofree char *tail = log_tail(cfg, dom);
            ret = vg_error_set(err, ECHILD, "vgpu-server exited at start-up%s",
                               tail);
            goto fail_recorded;
        }
        if (waited >= cfg->start_timeout * 1000u) {
            ret = vg_error_set(err, ETIMEDOUT,
                               "vgpu-server pid %d did not accept connections "
                               "on %s within %u s (start_timeout in %s)",
                               (int)st.pid, st.socket, cfg->start_timeout,
                               cfg->path);
            goto fail_recorded;
        }
        sleep_ms(POLL_MS);
        waited += POLL_MS;
    }
    vgh_note(cfg, dom, "vGPU %u: vgpu-server pid %d accepts on %s", idx,
             (int)st.pid, st.socket);
    state_clear(&st);
    return 0;

fail_recorded:
    stop_recorded(cfg, dom, sfile, true, NULL, NULL);
    state_clear(&st);
    return ret;
fail:
    remove_socket(v->socket);
    if (st.dir) {
        rmdir(st.dir);
    }
    state_clear(&st);
    return ret;
}

int vgh_servers_start(const struct vgh_config *cfg,
                      const struct vgh_domain *dom, uid_t uid, gid_t gid,
                      struct vg_error *err)
{
    int ret;

    if (g_mkdir_with_parents(cfg->state_dir, 0755) < 0) {
        return vg_error_set(err, errno, "cannot create %s: %s", cfg->state_dir,
                            strerror(errno));
    }
    for (unsigned i = 0; i < dom->n_vgpus; i++) {
        const struct vgh_vgpu *v = &dom->vgpus[i];

        if (!v->managed) {
            if (!vgh_socket_accepts(v->socket)) {
                ret = vg_error_set(err, ECONNREFUSED,
                                   "vGPU %u is managed='no' but nothing "
                                   "accepts connections on %s (is its "
                                   "vgpu-server@ unit running?)",
                                   i, v->socket);
                goto fail;
            }
            continue;
        }
        ret = start_one(cfg, dom, i, uid, gid, err);
        if (ret < 0) {
            vg_error_prefix(err, "vGPU %u (%s)", i, v->socket);
            goto fail;
        }
    }
    return 0;
fail:
    vgh_servers_stop(cfg, dom, NULL);
    return ret;
}
