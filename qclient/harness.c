#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io.h"

#define POLL_INTERVAL_US 5000

int vg_tmpdir_create(const char *tag, char **path, struct vg_error *err)
{
    const char *base = g_getenv("TMPDIR");
    char *tmpl;

    tmpl = g_strdup_printf("%s/vgmig-%s-XXXXXX", base && *base ? base : "/tmp",
                           tag);
    if (!mkdtemp(tmpl)) {
        int rc =
            vg_error_set(err, errno, "mkdtemp %s: %s", tmpl, strerror(errno));
        g_free(tmpl);
        return rc;
    }
    *path = tmpl;
    return 0;
}

int vg_tmpdir_remove(const char *path, struct vg_error *err)
{
    DIR *d = opendir(path);
    struct dirent *de;
    char *f;
    int rc = 0;

    if (!d) {
        return vg_error_set(err, errno, "opendir %s: %s", path,
                            strerror(errno));
    }
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) {
            continue;
        }
        f = g_build_filename(path, de->d_name, NULL);
        if (unlink(f) < 0 && rc == 0) {
            rc = vg_error_set(err, errno, "unlink %s: %s", f, strerror(errno));
        }
        g_free(f);
    }
    closedir(d);
    if (rmdir(path) < 0 && rc == 0) {
        rc = vg_error_set(err, errno, "rmdir %s: %s", path, strerror(errno));
    }
    return rc;
}

int vg_env_path(const char *name, const char **path, struct vg_error *err)
{
    const char *v = g_getenv(name);

    if (!v || !*v) {
        return vg_error_set(err, ENOENT, "environment variable %s is not set",
                            name);
    }
    if (access(v, F_OK) < 0) {
        return vg_error_set(err, errno, "%s=%s: %s", name, v, strerror(errno));
    }
    *path = v;
    return 0;
}

/* fork and exec @argv with output to @p->log; the child dies with us. */
static int proc_spawn(struct vg_proc *p, const char *name, const char *dir,
                      char *const argv[], struct vg_error *err)
{
    pid_t parent = getpid();
    int logfd;
    pid_t pid;

    memset(p, 0, sizeof(*p));
    p->name = g_strdup(name);
    p->log = g_strdup_printf("%s/%s.log", dir, name);
    logfd = open(p->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (logfd < 0) {
        return vg_error_set(err, errno, "%s: %s", p->log, strerror(errno));
    }
    fflush(NULL);
    pid = fork();
    if (pid < 0) {
        close(logfd);
        return vg_error_set(err, errno, "fork: %s", strerror(errno));
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) {
            _exit(127);
        }
        dup2(logfd, STDOUT_FILENO);
        dup2(logfd, STDERR_FILENO);
        execv(argv[0], argv);
        dprintf(STDERR_FILENO, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(logfd);
    p->pid = pid;
    return 0;
}

bool vg_proc_alive(struct vg_proc *p)
{
    pid_t r;

    if (p->reaped || p->pid <= 0) {
        return false;
    }
    do {
        r = waitpid(p->pid, &p->status, WNOHANG);
    } while (r < 0 && errno == EINTR);
    if (r == p->pid || (r < 0 && errno == ECHILD)) {
        p->reaped = true;
        return false;
    }
    return true;
}

/* Describe how a reaped child ended. */
static void describe_exit(const struct vg_proc *p, char *buf, size_t len)
{
    if (WIFEXITED(p->status)) {
        snprintf(buf, len, "exited with status %d", WEXITSTATUS(p->status));
    } else if (WIFSIGNALED(p->status)) {
        snprintf(buf, len, "killed by signal %d", WTERMSIG(p->status));
    } else {
        snprintf(buf, len, "ended (wait status 0x%x)", p->status);
    }
}

int vg_proc_kill(struct vg_proc *p, int sig, int timeout_ms,
                 struct vg_error *err)
{
    int64_t deadline = vg_now_ms() + timeout_ms;

    if (!vg_proc_alive(p)) {
        return 0;
    }
    if (kill(p->pid, sig) < 0) {
        return vg_error_set(err, errno, "%s: kill(%d): %s", p->name, sig,
                            strerror(errno));
    }
    while (vg_proc_alive(p)) {
        if (vg_now_ms() > deadline) {
            return vg_error_set(err, ETIMEDOUT,
                                "%s (pid %d) still alive %d ms after signal "
                                "%d",
                                p->name, (int)p->pid, timeout_ms, sig);
        }
        g_usleep(POLL_INTERVAL_US);
    }
    return 0;
}

int vg_proc_stop(struct vg_proc *p, int timeout_ms, struct vg_error *err)
{
    if (vg_proc_kill(p, SIGTERM, timeout_ms, NULL) == 0) {
        return 0;
    }
    return vg_proc_kill(p, SIGKILL, timeout_ms, err);
}

char *vg_proc_log_tail(const struct vg_proc *p, size_t max)
{
    gchar *text = NULL;
    gsize len = 0;
    char *tail;

    if (!p->log || !g_file_get_contents(p->log, &text, &len, NULL)) {
        return g_strdup("(no log)");
    }
    tail = g_strdup(len > max ? text + len - max : text);
    g_free(text);
    return tail;
}

static void proc_destroy(struct vg_proc *p)
{
    g_free(p->name);
    g_free(p->log);
    p->name = NULL;
    p->log = NULL;
}

/* Error for a child that died while we waited for it. */
static int died(struct vg_proc *p, const char *what, struct vg_error *err)
{
    char how[64];
    char *tail = vg_proc_log_tail(p, 300);
    int rc;

    describe_exit(p, how, sizeof(how));
    rc = vg_error_set(err, ECHILD, "%s %s while %s; log %s ends: %s", p->name,
                      how, what, p->log, tail);
    g_free(tail);
    return rc;
}

/* Whether a socket bound to @path is listening (from /proc/net/unix),
 * checked without connecting, since a vfio-user server serves the first
 * client that connects. */
static bool unix_listening(const char *path)
{
    gchar *text = NULL;
    gchar **lines;
    unsigned long flags;
    char sockpath[256];
    bool found = false;
    int i;

    if (!g_file_get_contents("/proc/net/unix", &text, NULL, NULL)) {
        return false;
    }
    lines = g_strsplit(text, "\n", -1);
    for (i = 1; lines[i] && !found; i++) {
        /* Num RefCount Protocol Flags Type St Inode Path */
        if (sscanf(lines[i], "%*s %*s %*s %lx %*s %*s %*s %255s", &flags,
                   sockpath) == 2 &&
            (flags & 0x10000) && !strcmp(sockpath, path)) {
            found = true;
        }
    }
    g_strfreev(lines);
    g_free(text);
    return found;
}

/* ---- Leak checks (added for the soak and the fault matrix) ---- */

int vg_fd_census(pid_t pid, struct vg_fd_census *c, struct vg_error *err)
{
    g_autofree char *dir = g_strdup_printf("/proc/%d/fd", (int)pid);
    DIR *d = opendir(dir);
    struct dirent *de;
    char target[256];

    memset(c, 0, sizeof(*c));
    if (!d) {
        return vg_error_set(err, errno, "opendir %s: %s", dir, strerror(errno));
    }
    while ((de = readdir(d))) {
        g_autofree char *link = NULL;
        ssize_t n;

        if (de->d_name[0] == '.') {
            continue;
        }
        link = g_strdup_printf("%s/%s", dir, de->d_name);
        n = readlink(link, target, sizeof(target) - 1);
        if (n < 0) {
            continue; /* closed meanwhile */
        }
        target[n] = '\0';
        c->fds++;
        if (g_str_has_prefix(target, "/memfd:")) {
            c->memfds++;
        } else if (g_str_has_prefix(target, "socket:")) {
            c->sockets++;
        } else if (strcmp(target, "anon_inode:[userfaultfd]") == 0) {
            c->uffds++;
        }
    }
    closedir(d);
    return 0;
}

int vg_child_pids(pid_t *pids, int max, struct vg_error *err)
{
    DIR *d = opendir("/proc");
    struct dirent *de;
    int n = 0;

    if (!d) {
        return vg_error_set(err, errno, "opendir /proc: %s", strerror(errno));
    }
    while ((de = readdir(d))) {
        g_autofree char *path = NULL;
        g_autofree char *text = NULL;
        const char *rp;
        int ppid = 0;

        if (!g_ascii_isdigit(de->d_name[0])) {
            continue;
        }
        path = g_strdup_printf("/proc/%s/stat", de->d_name);
        if (!g_file_get_contents(path, &text, NULL, NULL)) {
            continue;
        }
        /* pid (comm) state ppid ...; comm may hold spaces and ')' */
        rp = strrchr(text, ')');
        if (!rp || sscanf(rp + 1, " %*c %d", &ppid) != 1 ||
            ppid != (int)getpid()) {
            continue;
        }
        if (n < max) {
            pids[n] = (pid_t)atoi(de->d_name);
        }
        n++;
    }
    closedir(d);
    return n;
}

/* Append the NULL-terminated @args (may be NULL) to @argv. */
/* Append copies of @args (NULL-terminated, may be NULL) to @argv. */
static void add_args(GPtrArray *argv, const char *const *args)
{
    for (size_t i = 0; args && args[i]; i++) {
        g_ptr_array_add(argv, g_strdup(args[i]));
    }
}

/* Append option @opt and its value @val (taken over) to @argv. */
static void add_opt(GPtrArray *argv, const char *opt, char *val)
{
    g_ptr_array_add(argv, g_strdup(opt));
    g_ptr_array_add(argv, val);
}

/* Command line of the server described by @o, listening on @socket. */
static GPtrArray *server_argv(const struct vg_server_opts *o, const char *bin,
                              const char *socket)
{
    GPtrArray *argv = g_ptr_array_new_with_free_func(g_free);

    g_ptr_array_add(argv, g_strdup(bin));
    add_opt(argv, "--socket", g_strdup(socket));
    add_opt(argv, "--vram", g_strdup(o->vram));
    add_opt(argv, "--page-size", g_strdup(o->page_size));
    add_opt(argv, "--log-level",
            g_strdup(o->log_level ? o->log_level : "info"));
    if (o->stats_file) {
        add_opt(argv, "--stats-file", g_strdup(o->stats_file));
    }
    if (o->backend) {
        add_opt(argv, "--backend", g_strdup(o->backend));
    } else if (g_getenv("VGMIG_SERVER_BACKEND") &&
               *g_getenv("VGMIG_SERVER_BACKEND")) {
        add_opt(argv, "--backend", g_strdup(g_getenv("VGMIG_SERVER_BACKEND")));
    }
    add_args(argv, o->extra_args);
    g_ptr_array_add(argv, NULL);
    return argv;
}

/* Wait until @s listens on its socket, or died, or @deadline passed. */
static int server_wait_listening(struct vg_server *s, int64_t deadline,
                                 struct vg_error *err)
{
    while (!unix_listening(s->socket)) {
        if (!vg_proc_alive(&s->proc)) {
            return died(&s->proc, "starting", err);
        }
        if (vg_now_ms() > deadline) {
            return vg_error_set(
                err, ETIMEDOUT, "%s not listening on %s after %d ms",
                s->proc.name, s->socket, VG_HARNESS_START_TIMEOUT_MS);
        }
        g_usleep(POLL_INTERVAL_US);
    }
    return 0;
}

int vg_server_start(const struct vg_server_opts *o, struct vg_server **out,
                    struct vg_error *err)
{
    int64_t deadline = vg_now_ms() + VG_HARNESS_START_TIMEOUT_MS;
    const char *name = o->name ? o->name : "vgpu-server";
    struct vg_server *s;
    GPtrArray *argv;
    const char *bin;
    int rc = vg_env_path("VGMIG_SERVER", &bin, err);

    if (rc < 0) {
        return rc;
    }
    s = g_new0(struct vg_server, 1);
    s->socket = o->name ? g_strdup_printf("%s/%s.sock", o->dir, o->name)
                        : g_strdup_printf("%s/vgpu.sock", o->dir);
    s->stats_file = g_strdup(o->stats_file);
    argv = server_argv(o, bin, s->socket);
    rc = proc_spawn(&s->proc, name, o->dir, (char **)argv->pdata, err);
    g_ptr_array_free(argv, TRUE);
    if (rc == 0) {
        rc = server_wait_listening(s, deadline, err);
    }
    if (rc < 0) {
        vg_error_prefix(err, "start %s", name);
        vg_server_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

void vg_server_free(struct vg_server *s)
{
    if (s) {
        vg_proc_stop(&s->proc, VG_HARNESS_STOP_TIMEOUT_MS, NULL);
        proc_destroy(&s->proc);
        g_free(s->socket);
        g_free(s->stats_file);
        g_free(s);
    }
}

/* JSON for -device "vgpu<@index>" with the vfio-user socket @sock. */
static char *vgpu_device_json(const char *sock, unsigned index)
{
    JsonBuilder *b = json_builder_new();
    g_autofree char *id = g_strdup_printf("vgpu%u", index);
    JsonNode *root;
    char *text;

    json_builder_begin_object(b);
    json_builder_set_member_name(b, "driver");
    json_builder_add_string_value(b, "vfio-user-pci");
    json_builder_set_member_name(b, "id");
    json_builder_add_string_value(b, id);
    json_builder_set_member_name(b, "socket");
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "type");
    json_builder_add_string_value(b, "unix");
    json_builder_set_member_name(b, "path");
    json_builder_add_string_value(b, sock);
    json_builder_end_object(b);
    json_builder_end_object(b);
    root = json_builder_get_root(b);
    text = json_to_string(root, FALSE);
    json_node_unref(root);
    g_object_unref(b);
    return text;
}

/* Accept on @lfd while checking that QEMU is still alive. */
static int accept_from(struct vg_qemu *q, int lfd, int64_t deadline,
                       const char *what, int *fd, struct vg_error *err)
{
    int rc;

    for (;;) {
        rc = vg_unix_accept(lfd, fd, vg_now_ms() + 100, err);
        if (rc != -ETIMEDOUT) {
            return rc;
        }
        if (!vg_proc_alive(&q->proc)) {
            return died(&q->proc, what, err);
        }
        if (vg_now_ms() > deadline) {
            return vg_error_set(err, ETIMEDOUT, "%s: QEMU did not connect",
                                what);
        }
    }
}

/* Command line of QEMU described by @o, connecting to the qtest (NULL:
 * none), QMP and serial (NULL: none) sockets at @qtest_path, @qmp_path
 * and @serial_path. */
static GPtrArray *qemu_argv(const struct vg_qemu_opts *o, const char *bin,
                            const char *fw, const char *qtest_path,
                            const char *qmp_path, const char *serial_path)
{
    static const char *const fixed[] = {"-nodefaults", "-display", "none",
                                        NULL};
    GPtrArray *argv = g_ptr_array_new_with_free_func(g_free);

    g_ptr_array_add(argv, g_strdup(bin));
    add_opt(argv, "-accel", g_strdup(o->accel ? o->accel : "qtest"));
    add_args(argv, fixed);
    add_opt(argv, "-L", g_strdup(fw));
    add_opt(
        argv, "-object",
        g_strdup_printf("memory-backend-memfd,id=mem,size=%" G_GUINT64_FORMAT
                        "M,share=on%s",
                        o->ram_mib, o->prealloc ? ",prealloc=on" : ""));
    /* suppress-vmdesc: no JSON description of every device's fields,
     * which QEMU builds while the VM is stopped and no destination reads
     * (docs/operations.md, Tuning: "The stream's self-description"). */
    add_opt(argv, "-machine",
            g_strdup("pc,memory-backend=mem,suppress-vmdesc=on"));
    add_opt(argv, "-m", g_strdup_printf("%" G_GUINT64_FORMAT "M", o->ram_mib));
    if (qtest_path) {
        add_opt(argv, "-qtest", g_strdup_printf("unix:%s", qtest_path));
        /* Its protocol log would go to stderr, our log, where its lines
         * can split the trace lines other threads write (and the
         * trace checks miss those events). */
        add_opt(argv, "-qtest-log", g_strdup("none"));
    }
    add_opt(argv, "-chardev",
            g_strdup_printf("socket,id=qmp0,path=%s", qmp_path));
    add_opt(argv, "-mon", g_strdup("chardev=qmp0,mode=control"));
    if (serial_path) {
        add_opt(argv, "-chardev",
                g_strdup_printf("socket,id=serial0,path=%s", serial_path));
        add_opt(argv, "-serial", g_strdup("chardev:serial0"));
    }
    if (o->vgpu_sock) {
        add_opt(argv, "-device", vgpu_device_json(o->vgpu_sock, 0));
    }
    for (unsigned i = 0; o->vgpu_socks && o->vgpu_socks[i]; i++) {
        add_opt(argv, "-device", vgpu_device_json(o->vgpu_socks[i], i + 1));
    }
    if (o->incoming) {
        add_opt(argv, "-incoming", g_strdup(o->incoming));
    }
    add_args(argv, o->extra_args);
    g_ptr_array_add(argv, NULL);
    return argv;
}

/* Accept QEMU's qtest (if @lqt >= 0), QMP and serial (if @lser >= 0)
 * connections on @lqt, @lqmp and @lser. */
static int qemu_connect(struct vg_qemu *q, int lqt, int lqmp, int lser,
                        int64_t deadline, struct vg_error *err)
{
    int fd = -1;
    int rc = 0;

    if (lqt >= 0) {
        rc = accept_from(q, lqt, deadline, "qtest connection", &fd, err);
        if (rc == 0) {
            rc = vg_qtest_open_fd(fd, &q->qt, err);
        }
    }
    if (rc == 0) {
        rc = accept_from(q, lqmp, deadline, "QMP connection", &fd, err);
    }
    if (rc == 0) {
        rc = vg_qmp_open_fd_by(fd, deadline, &q->qmp, err);
    }
    if (rc == 0 && lser >= 0) {
        rc = accept_from(q, lser, deadline, "serial connection", &q->serial_fd,
                         err);
    }
    return rc;
}

/* Stop listening on @fd at @path, if it was opened. */
static void listen_close(int fd, const char *path)
{
    if (fd >= 0) {
        close(fd);
        unlink(path);
    }
}

/* First touches of never-used memory ran at 477-677 MB/s on the 2-core
 * test VMs (docs/data-path.md): a QEMU preallocating its RAM gets a
 * millisecond per 100 KiB more to start, i.e. at least 100 MiB/s. */
#define PREALLOC_MS_PER_MIB 10

int vg_qemu_start(const struct vg_qemu_opts *o, struct vg_qemu **out,
                  struct vg_error *err)
{
    int64_t deadline =
        vg_now_ms() + VG_HARNESS_START_TIMEOUT_MS +
        (o->prealloc ? (int64_t)o->ram_mib * PREALLOC_MS_PER_MIB : 0);
    g_autofree char *qtest_path = NULL, *qmp_path = NULL, *ser_path = NULL;
    const char *bin, *fw;
    int lqt = -1, lqmp = -1, lser = -1;
    struct vg_qemu *q;
    GPtrArray *argv;
    int rc;

    rc = vg_env_path("VGMIG_QEMU", &bin, err);
    if (rc == 0) {
        rc = vg_env_path("VGMIG_FIRMWARE", &fw, err);
    }
    if (rc < 0) {
        return rc;
    }
    q = g_new0(struct vg_qemu, 1);
    q->serial_fd = -1;
    q->ram_bytes = o->ram_mib << 20;
    if (!o->accel || !strcmp(o->accel, "qtest")) {
        qtest_path = g_strdup_printf("%s/%s-qtest.sock", o->dir, o->name);
    }
    qmp_path = g_strdup_printf("%s/%s-qmp.sock", o->dir, o->name);
    if (o->serial) {
        ser_path = g_strdup_printf("%s/%s-serial.sock", o->dir, o->name);
    }
    argv = qemu_argv(o, bin, fw, qtest_path, qmp_path, ser_path);
    rc = qtest_path ? vg_unix_listen(qtest_path, &lqt, err) : 0;
    if (rc == 0) {
        rc = vg_unix_listen(qmp_path, &lqmp, err);
    }
    if (rc == 0 && ser_path) {
        rc = vg_unix_listen(ser_path, &lser, err);
    }
    if (rc == 0) {
        rc = proc_spawn(&q->proc, o->name, o->dir, (char **)argv->pdata, err);
    }
    if (rc == 0) {
        rc = qemu_connect(q, lqt, lqmp, lser, deadline, err);
    }
    listen_close(lqt, qtest_path);
    listen_close(lqmp, qmp_path);
    listen_close(lser, ser_path);
    g_ptr_array_free(argv, TRUE);
    if (rc < 0) {
        vg_error_prefix(err, "start QEMU %s", o->name);
        vg_qemu_free(q);
        return rc;
    }
    *out = q;
    return 0;
}

static void qemu_disconnect(struct vg_qemu *q)
{
    vg_qtest_close(q->qt);
    vg_qmp_close(q->qmp);
    q->qt = NULL;
    q->qmp = NULL;
    if (q->serial_fd >= 0) {
        close(q->serial_fd);
        q->serial_fd = -1;
    }
}

int vg_qemu_kill9(struct vg_qemu *q, struct vg_error *err)
{
    int rc = vg_proc_kill(&q->proc, SIGKILL, VG_HARNESS_STOP_TIMEOUT_MS, err);

    qemu_disconnect(q);
    return rc;
}

void vg_qemu_free(struct vg_qemu *q)
{
    if (!q) {
        return;
    }
    if (q->qmp && vg_proc_alive(&q->proc)) {
        vg_qmp_execute(q->qmp, "quit", NULL, NULL, NULL);
    }
    qemu_disconnect(q);
    vg_proc_stop(&q->proc, VG_HARNESS_STOP_TIMEOUT_MS, NULL);
    proc_destroy(&q->proc);
    g_free(q);
}

/* Descriptor @name of @pid reopened read-write if it is a memfd of
 * @size bytes, its inode into *@ino; else -1. */
static int open_memfd_of(pid_t pid, const char *name, uint64_t size, ino_t *ino)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/fd/%s", (int)pid, name);
    char target[256];
    ssize_t n = readlink(path, target, sizeof(target) - 1);
    struct stat st;
    int fd;

    if (n < 0) {
        return -1; /* closed meanwhile, or "." and ".." */
    }
    target[n] = '\0';
    if (!g_str_has_prefix(target, "/memfd:")) {
        return -1;
    }
    fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd >= 0 && (fstat(fd, &st) < 0 || (uint64_t)st.st_size != size)) {
        close(fd);
        return -1;
    }
    *ino = fd >= 0 ? st.st_ino : 0;
    return fd;
}

/* The one memfd of @size bytes that @pid holds (more descriptors of the
 * same one are fine), opened read-write into *@out. */
static int find_ram_memfd(pid_t pid, uint64_t size, int *out,
                          struct vg_error *err)
{
    g_autofree char *dir = g_strdup_printf("/proc/%d/fd", (int)pid);
    DIR *d = opendir(dir);
    struct dirent *de;
    ino_t found_ino = 0, ino = 0;
    int fd, rc = 0;

    *out = -1;
    if (!d) {
        return vg_error_set(err, errno, "opendir %s: %s", dir, strerror(errno));
    }
    while (rc == 0 && (de = readdir(d))) {
        fd = open_memfd_of(pid, de->d_name, size, &ino);
        if (fd >= 0 && *out >= 0 && ino != found_ino) {
            rc = vg_error_set(err, EEXIST,
                              "%s: more than one memfd of %" PRIu64 " bytes",
                              dir, size);
        }
        if (fd >= 0 && *out < 0) {
            *out = fd;
            found_ino = ino;
        } else if (fd >= 0) {
            close(fd);
        }
    }
    closedir(d);
    if (rc == 0 && *out < 0) {
        rc = vg_error_set(err, ENOENT, "%s: no memfd of %" PRIu64 " bytes", dir,
                          size);
    }
    if (rc < 0 && *out >= 0) {
        close(*out);
        *out = -1;
    }
    return rc;
}

int vg_qemu_map_ram(const struct vg_qemu *q, struct vg_ram_map *m,
                    struct vg_error *err)
{
    void *p = MAP_FAILED;
    int fd;
    int rc = find_ram_memfd(q->proc.pid, q->ram_bytes, &fd, err);

    memset(m, 0, sizeof(*m));
    if (rc == 0) {
        p = mmap(NULL, q->ram_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            rc = vg_error_set(err, errno, "mmap: %s", strerror(errno));
        }
        close(fd);
    }
    if (rc < 0) {
        vg_error_prefix(err, "guest RAM of %s", q->proc.name);
        return rc;
    }
    m->base = p;
    m->size = q->ram_bytes;
    return 0;
}

void vg_ram_unmap(struct vg_ram_map *m)
{
    if (m->base) {
        munmap(m->base, m->size);
    }
    memset(m, 0, sizeof(*m));
}

void vg_galloc_init(struct vg_galloc *a, uint64_t start, uint64_t end)
{
    a->next = start;
    a->end = end;
}

int vg_galloc_alloc(struct vg_galloc *a, uint64_t size, uint64_t align,
                    uint64_t *addr, struct vg_error *err)
{
    uint64_t at;

    if (align == 0 || (align & (align - 1))) {
        return vg_error_set(
            err, EINVAL,
            "alignment 0x%" G_GINT64_MODIFIER "x not a power of two", align);
    }
    at = (a->next + align - 1) & ~(align - 1);
    if (at < a->next || size > a->end || at > a->end - size) {
        return vg_error_set(err, ENOMEM,
                            "guest RAM: no room for 0x%" G_GINT64_MODIFIER
                            "x bytes (next 0x%" G_GINT64_MODIFIER
                            "x, end 0x%" G_GINT64_MODIFIER "x)",
                            size, a->next, a->end);
    }
    a->next = at + size;
    *addr = at;
    return 0;
}
