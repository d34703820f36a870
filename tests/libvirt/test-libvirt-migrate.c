/*
 * test-libvirt-migrate.c -- `virsh migrate --live` of a vGPU domain
 * between two libvirt hosts on this machine, judged by the guest.
 *
 * tests/libvirt/lv-hosts.sh ($VGMIG_LIBVIRT_HOSTS) starts hosts a and b:
 * Debian's libvirtd, each in its own namespaces, joined by a veth pair
 * (10.77.0.1, 10.77.0.2), with the vgmig hook ($VGMIG_HOOK) installed.
 * Host a defines and starts a domain whose metadata asks for a vGPU; its
 * hook starts vgpu-server as the QEMU user.  The guest (the image of
 * `make guest-image`, $VGMIG_GUEST_DIR) runs vgpu-guest with a workload
 * on the vGPU and a model of all of VRAM, printing on the serial console,
 * which libvirt logs to a file on each host.  The domain migrates a -> b
 * with `virsh migrate --live --verbose` over the veth while `virsh
 * domjobinfo` must show progress (the job starts at 32 MiB/s, and once a
 * poll has seen data processed, `virsh migrate-setspeed` lifts the limit:
 * an unlimited migration can end before the first poll on a fast host),
 * then the guest checks every page of
 * VRAM against its model on b (a "verify" command on the console); then
 * back b -> a, checked the same way.  The pause the guest felt is the
 * gap between its last heartbeat logged on the source and its first on
 * the destination, as this test sees them arrive.  Then a -> b again with
 * `virsh migrate --live --parallel --parallel-connections 3` (multifd),
 * and back b -> a without it; then a -> b with `virsh migrate --live
 * --postcopy --postcopy-after-precopy` (the destination's server fetches
 * what the switchover left behind from the source's over the hosts' link,
 * and the guest checks every page) and back without it.  Then a -> b
 * again, b's servers' page servers slowed down (--fault postcopy-delay),
 * and back by post-copy: once b's QEMU is gone and VRAM pages are still on
 * b, every link between the hosts but libvirt's is cut (ss -K in b's
 * network namespace); a's servers reconnect and get them all.
 *
 * Which path the vGPU's state took is read from QEMU trace events: the
 * domain's XML passes -trace for them to both QEMUs, which log them to
 * the domain's log on their host (DOM.log, read from where it ended
 * before the migration).  With --parallel: as many multifd channel
 * threads as connections on either side (multifd_send/recv_thread_start),
 * and, while the job runs, QEMU's multifd capability on with that many
 * multifd-channels if a query got in before the switchover; the source's
 * save thread (vfio_save_complete_precopy_thread_*) read exactly the
 * stop-copy bytes the source server reports in its final statistics
 * (hook log), the destination's load thread (vfio_load_bufs_thread_*)
 * wrote exactly those to its server, the buffers came in on the multifd
 * channels (vfio_load_state_device_buffer_incoming), enough of them for
 * those bytes at the source's data buffer size, and the config space did
 * not come on the main channel.  Without --parallel: no channel threads,
 * no save or load thread, no multifd buffers, the stop-copy bytes read by
 * vfio_save_complete_precopy() and the config space on the main channel.
 * Every successful migration is checked this way.  Then b's hook is
 * configured to allow less VRAM than the vGPU has: the migration must fail
 * with the hook's message, nothing may be left on b, and the domain must
 * go on running on a with its vGPU intact (a clean verify); so must a
 * migration cancelled midway with `virsh domjobabort`, after b's hook
 * started its server.  Destroying the domain must leave no server, socket
 * or record, and so must a start whose server dies at once (which fails
 * with the hook's reason).  Then a second domain with two vGPUs: the hook
 * starts a server per vGPU (sockets vgpu0.sock and vgpu1.sock of one
 * directory), vgpu-guest --all-devices drives both and models all of their
 * VRAM, and the domain migrates a -> b and back (without --parallel): after
 * each hop the guest verifies every page of both vGPUs on the destination,
 * each vGPU's source and destination servers took the same VRAM checksum,
 * each vGPU's stop-copy went over the main channel, and nothing of the
 * source's servers, sockets or their directory is left.  Destroying it
 * stops both servers.  Tearing the hosts down must leave no process.
 *
 * Root only: anyone else gets a TAP SKIP with the reason.
 */
#include <errno.h>
#include <fcntl.h>
#include <glib-unix.h>
#include <glib.h>
#include <glib/gstdio.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "qclient/vfio-trace.h"

/* The VRAM of each vGPU. */
#define VRAM       "32M"
#define VRAM_BYTES (32ull << 20)
#define PAGE       "64K"
#define RAM_MIB    256
/* vgpu-guest drives every vGPU it finds. */
#define GUEST_ARGS "--profile,all,--seed,7,--all-devices"
/* virsh migrate --parallel-connections of /libvirt/migrate-parallel. */
#define PARALLEL_CONNECTIONS 3
/* Booting under TCG on a busy 2-core machine. */
#define BOOT_TIMEOUT_S 240
#define LINE_TIMEOUT_S 90
#define MIG_TIMEOUT_S  240
/* A migration starts at this many MiB/s, so that domjobinfo polls (every
 * 250 ms) see it; the limit goes to FULL_BANDWIDTH_MIBS once one has. */
#define START_BANDWIDTH_MIBS "32"
#define FULL_BANDWIDTH_MIBS  "10240"
/* If QEMU has not switched over after this long, allow a long downtime
 * (noted in the output); everything is still checked. */
#define FORCE_AFTER_S     30
#define DOWNTIME_MS       300
#define FORCE_DOWNTIME_MS 10000
#define WARMUP_HB         8

#define FAIL(...)                                                              \
    do {                                                                       \
        char *msg_ = g_strdup_printf(__VA_ARGS__);                             \
        g_assertion_message(G_LOG_DOMAIN, __FILE__, __LINE__, G_STRFUNC,       \
                            msg_);                                             \
        g_free(msg_);                                                          \
    } while (0)

/* ---------------------------------------------------------------- hosts -- */

/* A domain the test defines on host a: its name, UUID and vGPUs. */
struct dom_spec {
    const char *name;
    const char *uuid;
    unsigned nvgpu;
};

static const struct dom_spec dom_one = {
    "vgmig-lv", "3c0ffee0-5a1e-4d1e-9a7e-00000000c0de", 1};
static const struct dom_spec dom_two = {
    "vgmig-lv2", "3c0ffee0-5a1e-4d1e-9a7e-00000000c0df", 2};

struct console;
struct host;

/* The domain under test. */
static struct {
    const struct dom_spec *spec;
    struct console *con; /* on the host the domain runs on */
    struct host *on;     /* that host */
    gint64 pages;        /* VRAM pages of the guest's model, all vGPUs */
} dom = {&dom_one, NULL, NULL, 0};

#define DOM (dom.spec->name)

/* The domain's files, as each host sees them (g_free). */
static char *sock_path(unsigned i)
{
    return g_strdup_printf("/run/vgmig/%s/vgpu%u.sock", DOM, i);
}

static char *stats_path(unsigned i)
{
    return g_strdup_printf("/run/vgmig/%s/vgpu%u.stats.json", DOM, i);
}

static char *serial_log(void)
{
    return g_strdup_printf("/var/log/libvirt/qemu/%s-serial.log", DOM);
}

static char *serial_sock(void)
{
    return g_strdup_printf("/var/lib/libvirt/qemu/%s-serial.sock", DOM);
}

static char *hook_log_path(void)
{
    return g_strdup_printf("/var/log/libvirt/qemu/%s-vgpu.log", DOM);
}

/* QEMU's standard error: its trace events (stdio_handler = "file"). */
static char *qemu_log(void)
{
    return g_strdup_printf("/var/log/libvirt/qemu/%s.log", DOM);
}

struct host {
    char name;        /* 'a' or 'b' */
    const char *addr; /* its libvirtd's address */
    pid_t pid;        /* a process in its namespaces */
};

static struct {
    char *dir;
    GPid script;
    int script_in;  /* its standard input: closing it tears down */
    int script_out; /* its standard output */
    struct host a, b;
    bool down;
} lv;

/* A host's view of @path (its mount namespace through /proc). */
static char *hpath(const struct host *h, const char *path)
{
    return g_strdup_printf("/proc/%d/root%s", (int)h->pid, path);
}

/* hpath() of @path, which it frees. */
static char *hpath_take(const struct host *h, char *path)
{
    char *p = hpath(h, path);

    g_free(path);
    return p;
}

static char *virsh_uri(const struct host *h)
{
    return g_strdup_printf("qemu+tcp://%s/system", h->addr);
}

/* Run virsh in @h's namespaces against its own daemon with @args; returns
 * the exit status, output in *@out and *@err when not NULL. */
static int virsh(const struct host *h, char **out, char **err,
                 const char *const *args)
{
    g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
    g_autoptr(GError) gerr = NULL;
    g_autofree char *o = NULL, *e = NULL;
    int status = -1;

    g_ptr_array_add(argv, g_strdup("timeout"));
    g_ptr_array_add(argv, g_strdup("120"));
    g_ptr_array_add(argv, g_strdup("nsenter"));
    g_ptr_array_add(argv, g_strdup_printf("--target=%d", (int)h->pid));
    g_ptr_array_add(argv, g_strdup("-m"));
    g_ptr_array_add(argv, g_strdup("-u"));
    g_ptr_array_add(argv, g_strdup("-n"));
    g_ptr_array_add(argv, g_strdup("virsh"));
    g_ptr_array_add(argv, g_strdup("-q"));
    g_ptr_array_add(argv, g_strdup("-c"));
    g_ptr_array_add(argv, virsh_uri(h));
    for (unsigned i = 0; args[i]; i++) {
        g_ptr_array_add(argv, g_strdup(args[i]));
    }
    g_ptr_array_add(argv, NULL);
    if (!g_spawn_sync(NULL, (char **)argv->pdata, NULL, G_SPAWN_SEARCH_PATH,
                      NULL, NULL, &o, &e, &status, &gerr)) {
        FAIL("cannot run virsh: %s", gerr->message);
    }
    if (out) {
        *out = g_steal_pointer(&o);
    }
    if (err) {
        *err = g_steal_pointer(&e);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

#define VIRSH(h, out, err, ...)                                                \
    virsh((h), (out), (err), (const char *const[]){__VA_ARGS__, NULL})

/* virsh that must succeed; its output (g_free). */
static char *virsh_ok(const struct host *h, const char *const *args)
{
    g_autofree char *err = NULL;
    char *out = NULL;
    int rc = virsh(h, &out, &err, args);

    if (rc != 0) {
        FAIL("virsh on host %c: %s ...: exit %d: %s", h->name, args[0], rc,
             err);
    }
    return out;
}

#define VIRSH_OK(h, ...) virsh_ok((h), (const char *const[]){__VA_ARGS__, NULL})

static char *domstate(const struct host *h)
{
    g_autofree char *out = NULL;
    int rc = VIRSH(h, &out, NULL, "domstate", DOM);

    return rc == 0 ? g_strdup(g_strstrip(out)) : g_strdup("(none)");
}

static bool is_running_on(const struct host *h)
{
    g_autofree char *st = domstate(h);

    return strcmp(st, "running") == 0;
}

/* ------------------------------------------------------------- console -- */

/* The guest's serial console as one host's libvirt logs it, read as it
 * grows; each line stamped with our clock on arrival. */
struct line {
    gint64 t_us;
    char *text;
};

struct console {
    char *path;
    off_t off;
    GString *partial;
    GPtrArray *lines; /* struct line * */
    GThread *thread;
    GMutex lock;
    GCond cond;
    bool stop;
};

static void line_free(gpointer p)
{
    struct line *l = p;

    g_free(l->text);
    g_free(l);
}

static gpointer console_thread(gpointer opaque)
{
    struct console *c = opaque;
    char buf[65536];
    int fd = -1;

    for (;;) {
        ssize_t n;

        g_mutex_lock(&c->lock);
        if (c->stop) {
            g_mutex_unlock(&c->lock);
            break;
        }
        g_mutex_unlock(&c->lock);
        if (fd < 0) {
            fd = open(c->path, O_RDONLY | O_CLOEXEC);
        }
        n = fd >= 0 ? pread(fd, buf, sizeof(buf), c->off) : 0;
        if (n <= 0) {
            g_usleep(10000);
            continue;
        }
        c->off += n;
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] == '\n') {
                struct line *l = g_new0(struct line, 1);

                l->t_us = g_get_monotonic_time();
                g_strchomp(c->partial->str);
                l->text = g_strdup(c->partial->str);
                g_string_truncate(c->partial, 0);
                g_mutex_lock(&c->lock);
                g_ptr_array_add(c->lines, l);
                g_cond_broadcast(&c->cond);
                g_mutex_unlock(&c->lock);
            } else if (buf[i] != '\r') {
                g_string_append_c(c->partial, buf[i]);
            }
        }
    }
    if (fd >= 0) {
        close(fd);
    }
    return NULL;
}

/* Follow @h's serial log of the domain (it may not exist yet). */
static struct console *console_open(const struct host *h)
{
    struct console *c = g_new0(struct console, 1);

    c->path = hpath_take(h, serial_log());
    c->partial = g_string_new(NULL);
    c->lines = g_ptr_array_new_with_free_func(line_free);
    g_mutex_init(&c->lock);
    g_cond_init(&c->cond);
    c->thread = g_thread_new("console", console_thread, c);
    return c;
}

static void console_close(struct console *c)
{
    if (!c) {
        return;
    }
    g_mutex_lock(&c->lock);
    c->stop = true;
    g_mutex_unlock(&c->lock);
    g_thread_join(c->thread);
    g_ptr_array_free(c->lines, TRUE);
    g_string_free(c->partial, TRUE);
    g_mutex_clear(&c->lock);
    g_cond_clear(&c->cond);
    g_free(c->path);
    g_free(c);
}

static guint console_end(struct console *c)
{
    guint n;

    g_mutex_lock(&c->lock);
    n = c->lines->len;
    g_mutex_unlock(&c->lock);
    return n;
}

/* The key=value part of a "vgpu-guest: KIND ..." line, or NULL. */
static const char *match(const char *text, const char *kind)
{
    const char *p = strstr(text, "vgpu-guest: ");
    size_t kl = strlen(kind);

    if (!p) {
        return NULL;
    }
    p += strlen("vgpu-guest: ");
    if (strncmp(p, kind, kl) != 0 || (p[kl] != ' ' && p[kl] != '\0')) {
        return NULL;
    }
    return p + kl;
}

static gint64 kv(const char *text, const char *key)
{
    size_t kl = strlen(key);
    const char *p = text;

    while ((p = strstr(p, key))) {
        if ((p == text || p[-1] == ' ') && p[kl] == '=') {
            return (gint64)g_ascii_strtoull(p + kl + 1, NULL, 0);
        }
        p += kl;
    }
    return -1;
}

/* Wait for a line of @kind at or after *@idx; fails on the tool's error
 * and CORRUPT lines.  Returns the line (g_free), its arrival in *@t_us. */
static char *console_wait(struct console *c, guint *idx, const char *kind,
                          int timeout_s, gint64 *t_us)
{
    gint64 end = g_get_monotonic_time() + (gint64)timeout_s * G_USEC_PER_SEC;

    g_mutex_lock(&c->lock);
    for (;;) {
        while (*idx < c->lines->len) {
            struct line *l = g_ptr_array_index(c->lines, *idx);

            (*idx)++;
            if (match(l->text, "error:") || match(l->text, "CORRUPT")) {
                g_autofree char *t = g_strdup(l->text);
                g_mutex_unlock(&c->lock);
                FAIL("guest console (%s): %s", c->path, t);
            }
            if (match(l->text, kind)) {
                char *t = g_strdup(l->text);
                if (t_us) {
                    *t_us = l->t_us;
                }
                g_mutex_unlock(&c->lock);
                return t;
            }
        }
        if (!g_cond_wait_until(&c->cond, &c->lock, end)) {
            g_mutex_unlock(&c->lock);
            FAIL("guest console (%s): no '%s' line within %d s", c->path, kind,
                 timeout_s);
        }
    }
}

/* The arrival time of the last line of @kind, 0 if none. */
static gint64 console_last(struct console *c, const char *kind)
{
    gint64 t = 0;

    g_mutex_lock(&c->lock);
    for (guint i = 0; i < c->lines->len; i++) {
        struct line *l = g_ptr_array_index(c->lines, i);
        if (match(l->text, kind)) {
            t = l->t_us;
        }
    }
    g_mutex_unlock(&c->lock);
    return t;
}

/* Type @cmd on the guest's console on host @h (libvirt's bound socket). */
static void console_send(const struct host *h, const char *cmd)
{
    g_autofree char *path = hpath_take(h, serial_sock());
    g_autofree char *line = g_strdup_printf("%s\n", cmd);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpuint(strlen(path), <, sizeof(addr.sun_path));
    strcpy(addr.sun_path, path);
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        FAIL("connect %s: %s", path, strerror(errno));
    }
    g_assert_cmpint(write(fd, line, strlen(line)), ==, (ssize_t)strlen(line));
    /* Let QEMU read it before the hang-up. */
    g_usleep(200000);
    close(fd);
}

/* A full check of VRAM by the guest on @h: verify, no corrupt page. */
static void guest_verify(const struct host *h, struct console *c, gint64 pages)
{
    guint idx = console_end(c);
    g_autofree char *v = NULL;
    g_autofree char *hb = NULL;
    gint64 steps0, steps1;

    console_send(h, "verify");
    v = console_wait(c, &idx, "verify", LINE_TIMEOUT_S, NULL);
    g_test_message("host %c: %s", h->name, v);
    g_assert_cmpint(kv(match(v, "verify"), "pages"), ==, pages);
    g_assert_cmpint(kv(match(v, "verify"), "corrupt"), ==, 0);
    /* And the workload goes on. */
    hb = console_wait(c, &idx, "hb", LINE_TIMEOUT_S, NULL);
    steps0 = kv(match(hb, "hb"), "steps");
    g_free(hb);
    /* The second heartbeat after the one above: at least one full period
     * of work. */
    g_free(console_wait(c, &idx, "hb", LINE_TIMEOUT_S, NULL));
    hb = console_wait(c, &idx, "hb", LINE_TIMEOUT_S, NULL);
    steps1 = kv(match(hb, "hb"), "steps");
    g_assert_cmpint(kv(match(hb, "hb"), "corrupt"), ==, 0);
    g_assert_cmpint(steps1, >, steps0);
}

/* ------------------------------------------------------------ the state -- */

/* The domain's XML: its vGPUs in the hook's metadata and as
 * vfio-user-pci devices, each on a socket of its own. */
static char *domain_xml(void)
{
    g_autofree char *img = g_build_filename(lv.dir, "img", NULL);
    g_autofree char *bin = g_build_filename(lv.dir, "bin", NULL);
    g_autofree char *ssock = serial_sock(), *slog = serial_log();
    g_autoptr(GString) trace = g_string_new(NULL);
    g_autoptr(GString) meta = g_string_new(NULL);
    g_autoptr(GString) devs = g_string_new(NULL);

    for (unsigned i = 0; i < dom.spec->nvgpu; i++) {
        g_autofree char *sock = sock_path(i);

        g_string_append_printf(meta,
                               "      <vgmig:vgpu device='vgpu%u' size='" VRAM
                               "' page-size='" PAGE "' backend='cpu'/>\n",
                               i);
        g_string_append_printf(
            devs,
            "    <qemu:arg value='-device'/>\n"
            "    <qemu:arg value='{\"driver\":\"vfio-user-pci\",\"id\":"
            "\"vgpu%u\",\"bus\":\"pci.0\",\"addr\":\"0x%x\",\"socket\":"
            "{\"type\":\"unix\",\"path\":\"%s\"}}'/>\n",
            i, 0x10 + i, sock);
    }

    for (unsigned i = 0; i < VG_VFIO_TRACE_NEVENTS; i++) {
        g_string_append_printf(trace,
                               "    <qemu:arg value='-trace'/>"
                               "<qemu:arg value='%s'/>\n",
                               vg_vfio_trace_events[i]);
    }
    return g_strdup_printf(
        "<domain type='qemu' "
        "xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>\n"
        "  <name>%s</name>\n"
        "  <uuid>%s</uuid>\n"
        "  <metadata>\n"
        "    <vgmig:vgpus xmlns:vgmig='https://vgmig.example/xmlns/vgpu/1'>\n"
        "%s"
        "    </vgmig:vgpus>\n"
        "  </metadata>\n"
        "  <memory unit='MiB'>%d</memory>\n"
        "  <memoryBacking><source type='memfd'/><access mode='shared'/>"
        "</memoryBacking>\n"
        "  <vcpu>1</vcpu>\n"
        "  <os>\n"
        "    <type arch='x86_64' machine='pc'>hvm</type>\n"
        "    <kernel>%s/kernel</kernel>\n"
        "    <initrd>%s/initrd.img</initrd>\n"
        "    <cmdline>console=ttyS0 quiet loglevel=1 panic=-1 "
        "vgpu_guest=" GUEST_ARGS "</cmdline>\n"
        "  </os>\n"
        "  <features><acpi/></features>\n"
        "  <on_poweroff>destroy</on_poweroff>\n"
        "  <on_reboot>destroy</on_reboot>\n"
        "  <on_crash>destroy</on_crash>\n"
        "  <devices>\n"
        "    <emulator>%s/qemu-system-x86_64</emulator>\n"
        "    <serial type='unix'>\n"
        "      <source mode='bind' path='%s'/>\n"
        "      <log file='%s' append='off'/>\n"
        "      <target port='0'/>\n"
        "    </serial>\n"
        "    <controller type='usb' model='none'/>\n"
        "    <memballoon model='none'/>\n"
        "  </devices>\n"
        "  <qemu:commandline>\n"
        "    <qemu:arg value='-L'/><qemu:arg value='%s/fw'/>\n"
        "    <qemu:arg value='-L'/><qemu:arg value='%s'/>\n"
        "    <qemu:arg value='-machine'/>"
        "<qemu:arg value='suppress-vmdesc=on'/>\n"
        "%s"
        "%s"
        "  </qemu:commandline>\n"
        "</domain>\n",
        DOM, dom.spec->uuid, meta->str, RAM_MIB, img, img, bin, ssock, slog,
        img,
        g_getenv("VGMIG_FIRMWARE") ? g_getenv("VGMIG_FIRMWARE")
                                   : "/usr/share/seabios",
        devs->str, trace->str);
}

/* The hook's sockets on @h, one per vGPU of the domain, for the QEMU
 * user only. */
static void assert_vgpu_served(const struct host *h)
{
    for (unsigned i = 0; i < dom.spec->nvgpu; i++) {
        g_autofree char *sock = hpath_take(h, sock_path(i));
        g_autofree char *dir = g_path_get_dirname(sock);
        struct stat sb;

        g_assert_cmpint(lstat(sock, &sb), ==, 0);
        g_assert_true(S_ISSOCK(sb.st_mode));
        g_assert_cmpuint(sb.st_mode & 0777, ==, 0600);
        g_assert_cmpuint(sb.st_uid, ==, 64055); /* the QEMU user */
        g_assert_cmpint(stat(dir, &sb), ==, 0);
        g_assert_cmpuint(sb.st_mode & 0777, ==, 0700);
        g_assert_cmpuint(sb.st_uid, ==, 64055);
    }
}

static unsigned count_entries(const char *path)
{
    GDir *d = g_dir_open(path, 0, NULL);
    unsigned n = 0;

    if (!d) {
        return 0;
    }
    while (g_dir_read_name(d)) {
        n++;
    }
    g_dir_close(d);
    return n;
}

/* Processes of @h's namespaces running vgpu-server. */
static unsigned count_servers(const struct host *h)
{
    g_autofree char *netns = g_strdup_printf("/proc/%d/ns/net", (int)h->pid);
    g_autofree char *want = g_file_read_link(netns, NULL);
    GDir *d = g_dir_open("/proc", 0, NULL);
    const char *e;
    unsigned n = 0;

    g_assert_nonnull(want);
    while ((e = g_dir_read_name(d))) {
        g_autofree char *ns = NULL, *ns_path = NULL, *cmd_path = NULL;
        g_autofree char *cmd = NULL;

        if (!g_ascii_isdigit(e[0])) {
            continue;
        }
        ns_path = g_strdup_printf("/proc/%s/ns/net", e);
        ns = g_file_read_link(ns_path, NULL);
        if (!ns || strcmp(ns, want) != 0) {
            continue;
        }
        cmd_path = g_strdup_printf("/proc/%s/cmdline", e);
        if (g_file_get_contents(cmd_path, &cmd, NULL, NULL) &&
            g_str_has_suffix(cmd, "/vgpu-server")) {
            n++;
        }
    }
    g_dir_close(d);
    return n;
}

static void assert_nothing_left(const struct host *h)
{
    g_autofree char *run = hpath(h, "/run/vgmig");

    for (unsigned i = 0; i < dom.spec->nvgpu; i++) {
        g_autofree char *sock = hpath_take(h, sock_path(i));

        g_assert_false(g_file_test(sock, G_FILE_TEST_EXISTS));
    }
    /* Neither socket directories nor the hook's records. */
    g_assert_cmpuint(count_entries(run), ==, 0);
    g_assert_cmpuint(count_servers(h), ==, 0);
}

static char *hook_log(const struct host *h)
{
    g_autofree char *path = hpath_take(h, hook_log_path());
    char *text = NULL;

    if (!g_file_get_contents(path, &text, NULL, NULL)) {
        return g_strdup("");
    }
    return text;
}

/* The value of "vram_checksum" in JSON text @json ("" if none). */
static char *checksum_in(const char *json)
{
    const char *p = json ? strstr(json, "\"vram_checksum\": \"") : NULL;
    const char *end;

    if (!p) {
        return g_strdup("");
    }
    p += strlen("\"vram_checksum\": \"");
    end = strchr(p, '"');
    return end ? g_strndup(p, (gsize)(end - p)) : g_strdup("");
}

/* The final statistics the hook logged last on @h for the server of
 * vGPU @i (the source's, stopped after the switchover; g_free; "" if
 * none). */
static char *last_stats(const struct host *h, unsigned i)
{
    g_autofree char *log = hook_log(h);
    g_autofree char *sock = sock_path(i);
    g_autofree char *key = g_strdup_printf("final statistics of %s:", sock);
    const char *p = log, *last = NULL;
    const char *nl;

    while ((p = strstr(p, key))) {
        last = p++;
    }
    if (!last) {
        return g_strdup("");
    }
    nl = strchr(last, '\n');
    return nl ? g_strndup(last, (gsize)(nl - last)) : g_strdup(last);
}

/* The VRAM checksum of @h's running server of vGPU @i (taken when it
 * loaded). */
static char *dst_checksum(const struct host *h, unsigned i)
{
    g_autofree char *path = hpath_take(h, stats_path(i));
    g_autofree char *text = NULL;

    g_file_get_contents(path, &text, NULL, NULL);
    return checksum_in(text);
}

/* The stats of @h's running server of vGPU @i once its VRAM is all in
 * (a restore loads it on demand, after the VM runs): its text. */
static char *dst_stats_loaded(const struct host *h, unsigned i)
{
    g_autofree char *path = hpath_take(h, stats_path(i));
    gint64 until = g_get_monotonic_time() + 60 * G_USEC_PER_SEC;
    char *text = NULL;

    for (;;) {
        g_autofree char *sum = NULL;

        g_free(text);
        text = NULL;
        g_file_get_contents(path, &text, NULL, NULL);
        sum = checksum_in(text);
        if (sum[0] || g_get_monotonic_time() > until) {
            return text ? text : g_strdup("");
        }
        g_usleep(50 * 1000);
    }
}

/* The integer after "@key": in JSON text @json, -1 if none. */
static gint64 stat_in(const char *json, const char *key)
{
    g_autofree char *k = g_strdup_printf("\"%s\":", key);
    const char *p = json ? strstr(json, k) : NULL;
    char *end;
    gint64 v;

    if (!p) {
        return -1;
    }
    p += strlen(k);
    v = g_ascii_strtoll(p, &end, 10);
    return end == p ? -1 : v;
}

/* ---------------------------------------------------------------- trace -- */

/* The size of @h's QEMU log of the domain (0 if none yet). */
static goffset qemu_log_size(const struct host *h)
{
    g_autofree char *path = hpath_take(h, qemu_log());
    struct stat sb;

    return stat(path, &sb) == 0 ? (goffset)sb.st_size : 0;
}

/* The trace events in @h's QEMU log from offset @from (from its start if
 * the log is now shorter: a new file). */
static void trace_read(const struct host *h, goffset from,
                       struct vg_vfio_trace *tr)
{
    g_autofree char *path = hpath_take(h, qemu_log());
    g_autofree char *text = NULL;
    g_autoptr(GError) gerr = NULL;
    struct vg_error err = {0};
    gsize len = 0;

    if (!g_file_get_contents(path, &text, &len, &gerr)) {
        FAIL("reading %s: %s", path, gerr->message);
    }
    if ((goffset)len < from) {
        from = 0;
    }
    if (vg_vfio_trace_parse(text + from, tr, &err) < 0) {
        FAIL("%s: %s", path, err.msg);
    }
}

static void trace_log(const struct host *h, const char *what,
                      const struct vg_vfio_trace *tr)
{
    g_autofree char *text = vg_vfio_trace_describe(tr);

    g_test_message("%s %c trace: %s", what, h->name, text);
}

/* The path the vGPUs' state took from @src to @dst, whose QEMU logs were
 * @src_off and @dst_off long before the migration: over @channels multifd
 * channels, pre-copy data and stop-copy state (the device property's
 * default), or the main channel if 0.  The source servers sent @precopy
 * bytes in pre-copy and @stopcopy bytes in stop-copy, all vGPUs together;
 * each vGPU has its own save and load threads over multifd, its own
 * stop-copy and config section on the main channel. */
static void assert_state_path(const struct host *src, goffset src_off,
                              const struct host *dst, goffset dst_off,
                              unsigned channels, gint64 precopy,
                              gint64 stopcopy)
{
    struct vg_vfio_path want = {.channels = channels,
                                .multifd = channels > 0,
                                .multifd_precopy = channels > 0,
                                .precopy = precopy,
                                .stopcopy = stopcopy,
                                .devices = dom.spec->nvgpu,
                                .data_shm = true};
    struct vg_error err = {0};
    struct vg_vfio_trace s, d;

    trace_read(src, src_off, &s);
    trace_read(dst, dst_off, &d);
    trace_log(src, "source", &s);
    trace_log(dst, "destination", &d);
    if (vg_vfio_trace_check(&s, &d, &want, &err) < 0) {
        FAIL("state path %c to %c: %s", src->name, dst->name, err.msg);
    }
}

/* ------------------------------------------------------------ migration -- */

struct mig_result {
    int rc;
    char *out, *err;
    unsigned jobinfo_polls;    /* domjobinfo answers with an active job */
    unsigned jobinfo_progress; /* ... that showed data processed > 0 */
    char *last_jobinfo;
    bool forced;
    bool aborted;       /* domjobabort was sent */
    bool unlimited;     /* migrate-setspeed lifted the starting limit */
    guint64 first_done; /* the first and last non-zero "Data processed" */
    guint64 last_done;
    /* The source QEMU's migration settings while the job ran, if a query
     * got in before the switchover: the multifd capability (0 or 1) and
     * multifd-channels; -1 if not seen. */
    int multifd;
    gint64 multifd_channels;
};

/* The state of capability @cap in query-migrate-capabilities' answer
 * @json: 1 or 0, -1 if not found. */
static int capability_in(const char *json, const char *cap)
{
    g_autofree char *name = g_strdup_printf("\"%s\"", cap);
    const char *p = json ? strstr(json, name) : NULL;
    const char *start, *end;
    g_autofree char *obj = NULL;

    if (!p) {
        return -1;
    }
    /* Its object: {"state": BOOL, "capability": "NAME"}, either order. */
    for (start = p; start > json && *start != '{'; start--) {
    }
    end = strchr(p, '}');
    if (*start != '{' || !end) {
        return -1;
    }
    obj = g_strndup(start, (gsize)(end - start));
    return strstr(obj, "true") ? 1 : strstr(obj, "false") ? 0 : -1;
}

/* The domain's QEMU on @h took the second -machine of its command line
 * (docs/operations.md): it will not describe its migration stream. */
static void assert_no_vmdesc(const struct host *h)
{
    g_autofree char *out = VIRSH_OK(
        h, "qemu-monitor-command", DOM,
        "{\"execute\":\"qom-get\",\"arguments\":{\"path\":\"/machine\","
        "\"property\":\"suppress-vmdesc\"}}");

    g_assert_nonnull(strstr(out, "\"return\":true"));
}

/* The source QEMU's multifd settings into @r, once, while the job runs
 * (the query fails once QEMU has gone: then nothing is recorded). */
static void query_multifd(const struct host *src, struct mig_result *r)
{
    g_autofree char *caps = NULL, *params = NULL;
    int multifd;

    if (r->multifd >= 0 ||
        VIRSH(src, &caps, NULL, "qemu-monitor-command", DOM,
              "{\"execute\":\"query-migrate-capabilities\"}") != 0 ||
        VIRSH(src, &params, NULL, "qemu-monitor-command", DOM,
              "{\"execute\":\"query-migrate-parameters\"}") != 0) {
        return;
    }
    multifd = capability_in(caps, "multifd");
    g_assert_cmpint(multifd, >=, 0);
    r->multifd_channels = stat_in(params, "multifd-channels");
    r->multifd = multifd;
}

static guint64 jobinfo_value(const char *info, const char *field)
{
    const char *p = strstr(info, field);

    if (!p) {
        return 0;
    }
    p += strlen(field);
    while (*p == ' ' || *p == ':') {
        p++;
    }
    /* "102.750 MiB": virsh scales to B, KiB, MiB, GiB. */
    {
        char *end;
        double v = g_ascii_strtod(p, &end);
        static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};

        while (*end == ' ') {
            end++;
        }
        for (unsigned i = 0; i < G_N_ELEMENTS(units); i++) {
            if (g_str_has_prefix(end, units[i]) &&
                (end[strlen(units[i])] == '\0' ||
                 g_ascii_isspace(end[strlen(units[i])]))) {
                return (guint64)(v * (double)(1ull << (10 * i)));
            }
        }
        return (guint64)v;
    }
}

/* virsh migrate --live from @src to @dst, polling domjobinfo meanwhile;
 * with @abort, `virsh domjobabort` as soon as the job shows progress;
 * with @channels, --parallel --parallel-connections @channels (multifd);
 * with @postcopy, --postcopy --postcopy-after-precopy. */
static void migrate(struct host *src, struct host *dst, bool abort,
                    unsigned channels, bool postcopy, struct mig_result *r)
{
    g_autofree char *src_uri = virsh_uri(src);
    g_autofree char *dst_uri = virsh_uri(dst);
    g_autofree char *mig_uri = g_strdup_printf("tcp://%s", dst->addr);
    g_autofree char *target = g_strdup_printf("--target=%d", (int)src->pid);
    g_autofree char *conns = g_strdup_printf("%u", channels);
    const char *base[] = {
        "timeout",   "600",   "nsenter", target,         "-m",      "-u",
        "-n",        "virsh", "-c",      src_uri,        "migrate", "--live",
        "--verbose", DOM,     dst_uri,   "--migrateuri", mig_uri};
    g_autoptr(GPtrArray) argv = g_ptr_array_new();
    g_autoptr(GError) gerr = NULL;
    GPid pid;
    int out_fd, err_fd, status;
    gint64 t0 = g_get_monotonic_time();
    GString *out = g_string_new(NULL), *err = g_string_new(NULL);

    memset(r, 0, sizeof(*r));
    r->multifd = -1;
    r->multifd_channels = -1;
    for (unsigned i = 0; i < G_N_ELEMENTS(base); i++) {
        g_ptr_array_add(argv, (gpointer)base[i]);
    }
    /* Slow enough (MiB/s) that the polls see the job: the abort comes
     * well before the end, or the limit is lifted once one has seen it. */
    g_ptr_array_add(argv, "--bandwidth");
    g_ptr_array_add(argv, abort ? "16" : START_BANDWIDTH_MIBS);
    if (channels) {
        g_ptr_array_add(argv, "--parallel");
        g_ptr_array_add(argv, "--parallel-connections");
        g_ptr_array_add(argv, conns);
    }
    if (postcopy) {
        g_ptr_array_add(argv, "--postcopy");
        g_ptr_array_add(argv, "--postcopy-after-precopy");
    }
    g_ptr_array_add(argv, NULL);
    /* Post-copy: a limit no pre-copy meets, at the starting bandwidth,
     * so that libvirt switches over after the first pass. */
    g_free(VIRSH_OK(src, "migrate-setmaxdowntime", DOM,
                    postcopy ? "1" : G_STRINGIFY(DOWNTIME_MS)));
    if (!g_spawn_async_with_pipes(
            NULL, (char **)argv->pdata, NULL,
            G_SPAWN_SEARCH_PATH | G_SPAWN_DO_NOT_REAP_CHILD, NULL, NULL, &pid,
            NULL, &out_fd, &err_fd, &gerr)) {
        FAIL("cannot run virsh migrate: %s", gerr->message);
    }
    g_unix_set_fd_nonblocking(out_fd, TRUE, NULL);
    g_unix_set_fd_nonblocking(err_fd, TRUE, NULL);
    for (;;) {
        char buf[4096];
        ssize_t n;
        pid_t w;
        g_autofree char *info = NULL;

        while ((n = read(out_fd, buf, sizeof(buf))) > 0) {
            g_string_append_len(out, buf, n);
        }
        while ((n = read(err_fd, buf, sizeof(buf))) > 0) {
            g_string_append_len(err, buf, n);
        }
        w = waitpid(pid, &status, WNOHANG);
        if (w == pid) {
            break;
        }
        if (VIRSH(src, &info, NULL, "domjobinfo", DOM) == 0 &&
            strstr(info, "Unbounded")) {
            r->jobinfo_polls++;
            guint64 done = jobinfo_value(info, "Data processed");
            if (done > 0) {
                r->jobinfo_progress++;
                r->first_done = r->first_done ? r->first_done : done;
                r->last_done = done;
            }
            g_free(r->last_jobinfo);
            r->last_jobinfo = g_steal_pointer(&info);
            if (done > 0 && !abort) {
                /* QEMU is migrating: libvirt has set it up. */
                query_multifd(src, r);
            }
            if (done > 0 && !abort && !postcopy && !r->unlimited) {
                r->unlimited = true;
                g_assert_cmpint(VIRSH(src, NULL, NULL, "migrate-setspeed", DOM,
                                      FULL_BANDWIDTH_MIBS),
                                ==, 0);
            }
        }
        if (abort && r->jobinfo_progress > 0 && !r->aborted) {
            g_autofree char *aerr = NULL;
            r->aborted = true;
            g_assert_cmpint(VIRSH(src, NULL, &aerr, "domjobabort", DOM), ==, 0);
        }
        if (!abort && !postcopy && !r->forced &&
            g_get_monotonic_time() - t0 > FORCE_AFTER_S * G_USEC_PER_SEC) {
            /* QEMU's own switchover has not come: allow a long downtime. */
            r->forced = true;
            g_test_message("no switchover after %d s: downtime limit %d ms",
                           FORCE_AFTER_S, FORCE_DOWNTIME_MS);
            VIRSH(src, NULL, NULL, "migrate-setmaxdowntime", DOM,
                  G_STRINGIFY(FORCE_DOWNTIME_MS));
        }
        if (g_get_monotonic_time() - t0 > MIG_TIMEOUT_S * G_USEC_PER_SEC) {
            kill(pid, SIGTERM);
        }
        g_usleep(250000);
    }
    {
        char buf[4096];
        ssize_t n;
        g_unix_set_fd_nonblocking(out_fd, FALSE, NULL);
        g_unix_set_fd_nonblocking(err_fd, FALSE, NULL);
        while ((n = read(out_fd, buf, sizeof(buf))) > 0) {
            g_string_append_len(out, buf, n);
        }
        while ((n = read(err_fd, buf, sizeof(buf))) > 0) {
            g_string_append_len(err, buf, n);
        }
    }
    close(out_fd);
    close(err_fd);
    g_spawn_close_pid(pid);
    r->rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r->out = g_string_free(out, FALSE);
    r->err = g_string_free(err, FALSE);
}

static void mig_result_clear(struct mig_result *r)
{
    g_free(r->out);
    g_free(r->err);
    g_free(r->last_jobinfo);
}

/* A successful live migration of the domain to @dst, judged by the guest;
 * with @channels multifd channels (virsh migrate --parallel), else none.
 * The vGPU's state must have taken the path that goes with it. */
/* The running server of vGPU @i on @h has every page a post-copy left
 * behind, their digest verified (it waits for them). */
static void assert_postcopy_done(const struct host *h, unsigned i)
{
    g_autofree char *path = hpath_take(h, stats_path(i));
    gint64 deadline = g_get_monotonic_time() + 60 * G_USEC_PER_SEC;

    for (;;) {
        g_autofree char *text = NULL;

        g_file_get_contents(path, &text, NULL, NULL);
        if (text && strstr(text, "\"postcopy_done\": true")) {
            g_test_message("vGPU %u on %c: post-copy fetched %" G_GINT64_FORMAT
                           " of %" G_GINT64_FORMAT " pages (%" G_GINT64_FORMAT
                           " on a fault)",
                           i, h->name, stat_in(text, "postcopy_fetched"),
                           stat_in(text, "postcopy_pages"),
                           stat_in(text, "postcopy_faults"));
            g_assert_nonnull(strstr(text, "\"postcopy\": true"));
            g_assert_nonnull(strstr(text, "\"postcopy_verified\": true"));
            g_assert_cmpint(stat_in(text, "postcopy_fetched"), ==,
                            stat_in(text, "postcopy_pages"));
            return;
        }
        if (g_get_monotonic_time() > deadline) {
            FAIL("vGPU %u on %c: post-copy not done after 60 s: %s", i, h->name,
                 text ? text : "(no statistics)");
        }
        g_usleep(20000);
    }
}

static void migrate_ok_pc(struct host *dst, unsigned channels, bool postcopy);

/* The destination's statistics of its completed incoming job.  After a
 * post-copy, virsh may return before the destination's job has ended
 * (its last pages still coming): wait for them up to 10 s. */
static char *completed_incoming_job(const struct host *dst)
{
    int64_t deadline = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;
    char *info = VIRSH_OK(dst, "domjobinfo", DOM, "--completed");

    while (!strstr(info, "Incoming migration") &&
           g_get_monotonic_time() < deadline) {
        g_free(info);
        g_usleep(100 * 1000);
        info = VIRSH_OK(dst, "domjobinfo", DOM, "--completed");
    }
    return info;
}

static void migrate_ok(struct host *dst, unsigned channels)
{
    migrate_ok_pc(dst, channels, false);
}

/* A successful live migration, with @postcopy switched over in post-copy
 * after the first pass: the destination's server then fetches what is
 * left while the guest runs, and takes its checksum when the last page is
 * in, the guest running (so it is not compared: the guest checks every
 * page itself), and the source's served every page before it stopped. */
static void migrate_ok_pc(struct host *dst, unsigned channels, bool postcopy)
{
    struct host *src = dom.on;
    struct console *dcon;
    struct mig_result r;
    g_autofree char *old_log = hpath_take(dst, serial_log());
    g_autofree char *hb = NULL, *done_info = NULL, *log = NULL;
    g_autofree char *provide = NULL;
    gint64 t_last_src, t_first_dst = 0, t0, precopy = 0, stopcopy = 0;
    goffset src_off = qemu_log_size(src), dst_off = qemu_log_size(dst);
    guint idx = 0;

    /* A new destination QEMU writes a new log; no stale lines. */
    g_unlink(old_log);
    dcon = console_open(dst);
    t0 = g_get_monotonic_time();
    migrate(src, dst, false, channels, postcopy, &r);
    g_test_message(
        "virsh migrate %c -> %c%s%s: exit %d in %.1f s%s; %s", src->name,
        dst->name, channels ? " --parallel" : "", postcopy ? " --postcopy" : "",
        r.rc, (g_get_monotonic_time() - t0) / 1e6,
        r.forced ? " (downtime limit raised)" : "", g_strstrip(r.err));
    if (r.rc != 0) {
        FAIL("virsh migrate %c -> %c failed (exit %d): %s %s", src->name,
             dst->name, r.rc, r.out, r.err);
    }
    /* virsh --verbose reported progress, and so did domjobinfo. */
    g_assert_nonnull(strstr(r.err, "Migration: ["));
    g_assert_nonnull(strstr(r.err, "100 %"));
    g_test_message("domjobinfo: %u polls during the job, %u with data "
                   "processed; the last:\n%s",
                   r.jobinfo_polls, r.jobinfo_progress,
                   r.last_jobinfo ? r.last_jobinfo : "(none)");
    g_assert_cmpuint(r.jobinfo_progress, >, 0);
    g_test_message("domjobinfo data processed: %" G_GUINT64_FORMAT
                   " bytes, later %" G_GUINT64_FORMAT " bytes",
                   r.first_done, r.last_done);
    /* A short migration may be seen by one poll only: then first = last. */
    g_assert_cmpuint(r.last_done, >=, r.first_done);
    if (r.jobinfo_progress > 1 && r.last_done == r.first_done) {
        g_test_message("domjobinfo: no growth between polls (switchover)");
    }

    g_assert_true(is_running_on(dst));
    g_assert_false(is_running_on(src));
    /* The destination keeps the statistics of the completed job. */
    done_info = completed_incoming_job(dst);
    g_test_message("completed job on %c:\n%s", dst->name, done_info);
    g_assert_nonnull(strstr(done_info, "Incoming migration"));

    /* The pause the guest felt: its last heartbeat seen on the source to
     * its first on the destination. */
    hb = console_wait(dcon, &idx, "hb", LINE_TIMEOUT_S, &t_first_dst);
    t_last_src = console_last(dom.con, "hb");
    g_assert_cmpint(t_last_src, >, 0);
    g_test_message("pause felt by the guest: %.0f ms (heartbeats every "
                   "250 ms; last on %c, first on %c: %s)",
                   (t_first_dst - t_last_src) / 1e3, src->name, dst->name, hb);

    /* The source's servers are gone with its QEMU, the destination's
     * run; the two servers of each vGPU took the same VRAM checksum at
     * switchover. */
    assert_nothing_left(src);
    for (unsigned i = 0; i < dom.spec->nvgpu; i++) {
        g_autofree char *stats = last_stats(src, i);
        g_autofree char *src_sum = checksum_in(stats);
        g_autofree char *dst_sum = dst_checksum(dst, i);

        g_test_message("vGPU %u: VRAM checksum at switchover: source %s, "
                       "destination %s",
                       i, src_sum, dst_sum);
        g_assert_cmpstr(src_sum, !=, "");
        if (postcopy) {
            assert_postcopy_done(dst, i);
            g_assert_nonnull(strstr(stats, "\"postcopy\": true"));
            g_assert_cmpint(stat_in(stats, "postcopy_served"), ==,
                            stat_in(stats, "postcopy_pages"));
        } else {
            g_assert_cmpstr(src_sum, ==, dst_sum);
        }
        g_assert_cmpint(stat_in(stats, "stopcopy_bytes"), >, 0);
        stopcopy += stat_in(stats, "stopcopy_bytes");
        precopy += stat_in(stats, "precopy_bytes");
    }

    /* The source QEMU's settings while it migrated, if seen in time. */
    if (r.multifd >= 0) {
        g_test_message("source QEMU during the job: multifd %s, "
                       "multifd-channels %" G_GINT64_FORMAT,
                       r.multifd ? "on" : "off", r.multifd_channels);
        g_assert_cmpint(r.multifd, ==, channels > 0);
        if (channels) {
            g_assert_cmpint(r.multifd_channels, ==, channels);
        }
    } else {
        g_test_message("source QEMU's migration settings not queried in time "
                       "(the trace below still counts the channels)");
    }
    /* The path of the vGPUs' state, by the trace events. */
    assert_state_path(src, src_off, dst, dst_off, channels, precopy, stopcopy);
    assert_vgpu_served(dst);
    g_assert_cmpuint(count_servers(dst), ==, dom.spec->nvgpu);
    log = hook_log(dst);
    provide = g_strdup_printf("can provide the %u vGPU(s)", dom.spec->nvgpu);
    g_assert_nonnull(strstr(log, provide));
    console_close(dom.con);
    dom.con = dcon;
    dom.on = dst;
    guest_verify(dst, dom.con, dom.pages);
    mig_result_clear(&r);
}

/* ---------------------------------------------------------------- tests -- */

static void test_hosts(void)
{
    g_autofree char *ha = VIRSH_OK(&lv.a, "hostname");
    g_autofree char *hb = VIRSH_OK(&lv.b, "hostname");
    g_autofree char *ca = VIRSH_OK(&lv.a, "capabilities");
    g_autofree char *cb = VIRSH_OK(&lv.b, "capabilities");
    g_autofree char *via = NULL;
    g_autofree char *target = g_strdup_printf("--target=%d", (int)lv.a.pid);
    const char *remote_b[] = {
        "timeout",  "60",    "nsenter", target,
        "-n",       "virsh", "-c",      "qemu+tcp://10.77.0.2/system",
        "hostname", NULL};
    int status;

    g_assert_cmpstr(g_strstrip(ha), ==, "vgmig-a");
    g_assert_cmpstr(g_strstrip(hb), ==, "vgmig-b");
    g_assert_nonnull(strstr(ca, "7a1e5b00-0000-4000-8000-00000000000a"));
    g_assert_nonnull(strstr(cb, "7a1e5b00-0000-4000-8000-00000000000b"));
    /* Host b is reachable from a's network namespace over the veth. */
    g_assert_true(g_spawn_sync(NULL, (char **)remote_b, NULL,
                               G_SPAWN_SEARCH_PATH, NULL, NULL, &via, NULL,
                               &status, NULL));
    g_assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    g_assert_cmpstr(g_strstrip(via), ==, "vgmig-b");
}

/* "accepts on SOCKET" for vGPU @i of the domain (g_free). */
static char *accepts_on(unsigned i)
{
    g_autofree char *sock = sock_path(i);

    return g_strdup_printf("accepts on %s", sock);
}

/* Define and start domain @spec on host a: the hook starts a server per
 * vGPU, the guest drives all of them and checks all of their VRAM. */
static void start_domain(const struct dom_spec *spec)
{
    g_autofree char *xml = NULL, *xml_path = NULL;
    g_autofree char *ready = NULL, *v = NULL, *log = NULL;
    guint idx = 0;
    gint64 t0;

    dom.spec = spec;
    xml = domain_xml();
    xml_path = g_strdup_printf("%s/%s.xml", lv.dir, DOM);
    g_assert_true(g_file_set_contents(xml_path, xml, -1, NULL));
    g_free(VIRSH_OK(&lv.a, "define", xml_path));
    dom.con = console_open(&lv.a);
    dom.on = &lv.a;
    t0 = g_get_monotonic_time();
    g_free(VIRSH_OK(&lv.a, "start", DOM));
    assert_vgpu_served(&lv.a);
    assert_no_vmdesc(&lv.a);
    g_assert_cmpuint(count_servers(&lv.a), ==, spec->nvgpu);
    log = hook_log(&lv.a);
    for (unsigned i = 0; i < spec->nvgpu; i++) {
        g_autofree char *accepts = accepts_on(i);

        g_assert_nonnull(strstr(log, accepts));
    }

    ready = console_wait(dom.con, &idx, "ready", BOOT_TIMEOUT_S, NULL);
    g_test_message("guest ready %.1f s after virsh start: %s",
                   (g_get_monotonic_time() - t0) / 1e6, ready);
    g_assert_cmpint(kv(match(ready, "ready"), "devices"), ==, spec->nvgpu);
    dom.pages = kv(match(ready, "ready"), "pages");
    g_assert_cmpint(dom.pages, ==, (gint64)(spec->nvgpu * (VRAM_BYTES / 4096)));
    /* The tool's first full check, then a warm-up of the workload. */
    v = console_wait(dom.con, &idx, "verify", LINE_TIMEOUT_S, NULL);
    g_assert_cmpint(kv(match(v, "verify"), "corrupt"), ==, 0);
    for (int i = 0; i < WARMUP_HB; i++) {
        g_free(console_wait(dom.con, &idx, "hb", LINE_TIMEOUT_S, NULL));
    }
}

static void test_start(void)
{
    start_domain(&dom_one);
}

static void test_migrate_there(void)
{
    g_assert_true(dom.on == &lv.a);
    migrate_ok(&lv.b, 0);
    assert_no_vmdesc(&lv.b);
}

static void test_migrate_back(void)
{
    g_assert_true(dom.on == &lv.b);
    migrate_ok(&lv.a, 0);
}

/* virsh migrate --live --parallel --parallel-connections N: the vGPU's
 * stop-copy state over the multifd channels. */
static void test_migrate_parallel(void)
{
    g_assert_true(dom.on == &lv.a);
    migrate_ok(&lv.b, PARALLEL_CONNECTIONS);
}

/* And back without --parallel: the main channel again. */
static void test_migrate_parallel_back(void)
{
    g_assert_true(dom.on == &lv.b);
    migrate_ok(&lv.a, 0);
}

/* QEMU runs as libvirt-qemu, which may create a userfaultfd (for RAM
 * post-copy and for the vGPU's) only with vm.unprivileged_userfaultfd =
 * 1 (Debian 12's libvirt 9.0 does not open /dev/userfaultfd for it):
 * `make check-libvirt` sets it around this test, as docs/operations.md
 * tells operators to. */
#define UFFD_SYSCTL "/proc/sys/vm/unprivileged_userfaultfd"

/* virsh migrate --live --postcopy --postcopy-after-precopy: after its
 * first pass the VM switches over and runs on b while b's server fetches
 * the rest of VRAM from a's page server over the hosts' link (the hook's
 * postcopy_listen); the guest checks every page on b. */
static void assert_userfaultfd_allowed(void)
{
    g_autofree char *uffd = NULL;

    g_assert_true(g_file_get_contents(UFFD_SYSCTL, &uffd, NULL, NULL));
    if (strcmp(g_strstrip(uffd), "1") != 0) {
        FAIL("%s is %s: QEMU as libvirt-qemu cannot create a userfaultfd, "
             "so neither RAM nor the vGPU can do post-copy (make "
             "check-libvirt sets it to 1)",
             UFFD_SYSCTL, uffd);
    }
}

static void test_migrate_postcopy(void)
{
    assert_userfaultfd_allowed();
    g_assert_true(dom.on == &lv.a);
    migrate_ok_pc(&lv.b, 0, true);
}

/* And back without post-copy. */
static void test_migrate_postcopy_back(void)
{
    g_assert_true(dom.on == &lv.b);
    migrate_ok(&lv.a, 0);
}

/* ------------------------------------- post-copy, page channels cut -- */

/* Poll (bounded) until @h has no vGPU server, socket or record left. */
static void wait_nothing_left(const struct host *h)
{
    g_autofree char *run = hpath(h, "/run/vgmig");

    for (int i = 0; i < 300; i++) {
        if (count_servers(h) == 0 && count_entries(run) == 0) {
            break;
        }
        g_usleep(100000);
    }
    assert_nothing_left(h);
}

static unsigned count_str(const char *text, const char *needle)
{
    unsigned n = 0;

    for (const char *p = text; (p = strstr(p, needle)); p++) {
        n++;
    }
    return n;
}

/* `virsh migrate` run in a thread: its exit status and standard error. */
struct virsh_job {
    const struct host *h;
    const char *const *args;
    GThread *thread;
    int rc;
    char *err;
};

static gpointer virsh_job_run(gpointer opaque)
{
    struct virsh_job *j = opaque;

    j->rc = virsh(j->h, NULL, &j->err, j->args);
    return NULL;
}

/* Cut every TCP connection of host @h to @peer but libvirt's own (port
 * 16509), as a network failure would: the kernel aborts them (ss -K) and
 * both ends get an error.  Returns how many were cut. */
static unsigned cut_links(const struct host *h, const struct host *peer)
{
    g_autofree char *target = g_strdup_printf("--target=%d", (int)h->pid);
    const char *argv[] = {"nsenter", target,  "-n",  "ss",       "-K",
                          "-t",      "-n",    "dst", peer->addr, "and",
                          "not",     "dport", "=",   ":16509",   "and",
                          "not",     "sport", "=",   ":16509",   NULL};
    g_autofree char *out = NULL, *err = NULL;
    g_autoptr(GError) gerr = NULL;
    int status;

    if (!g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_SEARCH_PATH, NULL,
                      NULL, &out, &err, &status, &gerr)) {
        FAIL("cannot run ss: %s", gerr->message);
    }
    g_test_message("ss -K on %c (exit %d):\n%s%s", h->name,
                   WIFEXITED(status) ? WEXITSTATUS(status) : -1, out, err);
    return count_str(out, "ESTAB");
}

/* Migrate the domain to b, whose hook starts each vGPU's server with a
 * page server that waits @delay_ms before each reply (a slow source for
 * a post-copy back to a). */
static void migrate_to_slow_pages(unsigned delay_ms)
{
    g_autofree char *conf = hpath(&lv.b, "/etc/vgmig/hook.conf");
    g_autofree char *wrapper =
        g_strdup_printf("%s/bin/vgpu-server-slow", lv.dir);
    g_autofree char *script = g_strdup_printf(
        "#!/bin/sh\nexec %s/bin/vgpu-server --fault postcopy-delay:%u "
        "\"$@\"\n",
        lv.dir, delay_ms);
    g_autofree char *saved = NULL, *slow = NULL;

    g_assert_true(g_file_set_contents(wrapper, script, -1, NULL));
    g_assert_cmpint(chmod(wrapper, 0755), ==, 0);
    g_assert_true(g_file_get_contents(conf, &saved, NULL, NULL));
    slow = g_strdup_printf("%sserver = %s\n", saved, wrapper);
    g_assert_true(g_file_set_contents(conf, slow, -1, NULL));
    migrate_ok(&lv.b, 0);
    g_assert_true(g_file_set_contents(conf, saved, -1, NULL));
}

/* Whether @h's QEMU log has said, after offset @from, that libvirt
 * stopped it because the domain migrated. */
static bool qemu_stopped_migrated(const struct host *h, goffset from)
{
    g_autofree char *path = hpath_take(h, qemu_log());
    g_autofree char *text = NULL;
    gsize len = 0;

    return g_file_get_contents(path, &text, &len, NULL) &&
           (goffset)len > from && strstr(text + from, "reason=migrated");
}

/* Post-copy from b back to a, with b's page server replying every
 * 800 ms: once QEMU's part is over (RAM all moved, b's QEMU gone) and
 * VRAM pages are still on b, every link between the hosts but libvirt's
 * is cut.  a's servers reconnect to b's page servers and get every page
 * they were missing, `virsh migrate` succeeds (b's hook waits for its
 * servers to finish serving), and the guest finds its VRAM model
 * intact. */
static void test_migrate_postcopy_cut(void)
{
    struct host *src, *dst = &lv.a;
    g_autofree char *dst_uri = virsh_uri(dst);
    g_autofree char *mig_uri = g_strdup_printf("tcp://%s", dst->addr);
    /* At START_BANDWIDTH_MIBS pre-copy never meets the 1 ms limit, so
     * libvirt switches to post-copy after the first pass. */
    const char *const args[] = {"migrate",
                                "--live",
                                "--postcopy",
                                "--postcopy-after-precopy",
                                DOM,
                                dst_uri,
                                "--migrateuri",
                                mig_uri,
                                "--bandwidth",
                                START_BANDWIDTH_MIBS,
                                NULL};
    struct virsh_job job = {.args = args};
    g_autofree char *old_log = hpath_take(dst, serial_log());
    struct console *dcon;
    goffset src_off;

    assert_userfaultfd_allowed();
    g_assert_true(dom.on == &lv.a);
    migrate_to_slow_pages(800);
    src = dom.on;
    job.h = src;
    src_off = qemu_log_size(src);
    g_unlink(old_log);
    dcon = console_open(dst);
    /* A limit no pre-copy meets: libvirt switches after the first pass. */
    g_free(VIRSH_OK(src, "migrate-setmaxdowntime", DOM, "1"));
    job.thread = g_thread_new("virsh-migrate", virsh_job_run, &job);
    for (int i = 0; i < 1200 && !qemu_stopped_migrated(src, src_off); i++) {
        g_usleep(50000);
    }
    g_assert_true(qemu_stopped_migrated(src, src_off));
    for (unsigned i = 0; i < dom.spec->nvgpu; i++) {
        g_autofree char *path = hpath_take(dst, stats_path(i));
        g_autofree char *text = NULL;

        g_assert_true(g_file_get_contents(path, &text, NULL, NULL));
        g_test_message("vGPU %u on %c at the cut: %" G_GINT64_FORMAT
                       " of %" G_GINT64_FORMAT " pages fetched",
                       i, dst->name, stat_in(text, "postcopy_fetched"),
                       stat_in(text, "postcopy_pages"));
        g_assert_cmpint(stat_in(text, "postcopy_fetched"), <,
                        stat_in(text, "postcopy_pages"));
    }
    g_assert_cmpuint(cut_links(src, dst), >=, dom.spec->nvgpu);
    g_thread_join(job.thread);
    g_test_message("virsh migrate --postcopy, page channels cut: exit %d: %s",
                   job.rc, g_strstrip(job.err));
    g_assert_cmpint(job.rc, ==, 0);
    g_free(job.err);

    g_assert_true(is_running_on(dst));
    g_assert_false(is_running_on(src));
    wait_nothing_left(src);
    for (unsigned i = 0; i < dom.spec->nvgpu; i++) {
        g_autofree char *path = hpath_take(dst, stats_path(i));
        g_autofree char *text = NULL;
        g_autofree char *stats = last_stats(src, i);

        assert_postcopy_done(dst, i);
        g_assert_true(g_file_get_contents(path, &text, NULL, NULL));
        g_assert_cmpint(stat_in(text, "postcopy_reconnects"), >=, 1);
        g_assert_cmpint(stat_in(stats, "postcopy_served"), >=,
                        stat_in(stats, "postcopy_pages"));
    }
    assert_vgpu_served(dst);
    g_free(console_wait(dcon, &(guint){0}, "hb", LINE_TIMEOUT_S, NULL));
    console_close(dom.con);
    dom.con = dcon;
    dom.on = dst;
    guest_verify(dst, dom.con, dom.pages);
}

static void test_refused(void)
{
    g_autofree char *conf = hpath(&lv.b, "/etc/vgmig/hook.conf");
    g_autofree char *saved = NULL, *limited = NULL, *log = NULL;
    struct mig_result r;
    guint idx;
    g_autofree char *hb = NULL;

    g_assert_true(dom.on == &lv.a);
    g_assert_true(g_file_get_contents(conf, &saved, NULL, NULL));
    limited = g_strdup_printf("%smax_vram = 16M\n", saved);
    g_assert_true(g_file_set_contents(conf, limited, -1, NULL));

    migrate(&lv.a, &lv.b, false, 0, false, &r);
    g_test_message("refused migration: exit %d: %s", r.rc, g_strstrip(r.err));
    g_assert_cmpint(r.rc, !=, 0);
    /* The hook's own words reach the operator. */
    g_assert_nonnull(strstr(r.err, "host vgmig-b cannot provide vGPU 0"));
    g_assert_nonnull(strstr(r.err, "max_vram = 16 MiB"));
    mig_result_clear(&r);

    /* Nothing on b; the domain runs on a with its vGPU intact. */
    assert_nothing_left(&lv.b);
    g_assert_false(is_running_on(&lv.b));
    g_assert_true(is_running_on(&lv.a));
    assert_vgpu_served(&lv.a);
    g_assert_cmpuint(count_servers(&lv.a), ==, 1);
    log = hook_log(&lv.b);
    g_assert_nonnull(strstr(log, "migrate begin failed"));
    idx = console_end(dom.con);
    hb = console_wait(dom.con, &idx, "hb", LINE_TIMEOUT_S, NULL);
    guest_verify(&lv.a, dom.con, dom.pages);

    g_assert_true(g_file_set_contents(conf, saved, -1, NULL));
}

/* A migration cancelled midway, after b's hook has started its server:
 * b's QEMU and server go, the domain runs on with its vGPU on a. */
static void test_aborted(void)
{
    struct mig_result r;
    g_autofree char *before = hook_log(&lv.b);
    g_autofree char *after = NULL;
    g_autofree char *accepts = accepts_on(0);

    g_assert_true(dom.on == &lv.a);
    migrate(&lv.a, &lv.b, true, 0, false, &r);
    g_test_message("aborted migration: exit %d after domjobabort: %s", r.rc,
                   g_strstrip(r.err));
    g_assert_true(r.aborted);
    g_assert_cmpint(r.rc, !=, 0);
    mig_result_clear(&r);
    /* b's hook had started a server for the incoming domain. */
    after = hook_log(&lv.b);
    g_assert_cmpuint(count_str(after, accepts), ==,
                     count_str(before, accepts) + 1);
    wait_nothing_left(&lv.b);
    g_assert_false(is_running_on(&lv.b));
    g_assert_true(is_running_on(&lv.a));
    assert_vgpu_served(&lv.a);
    g_assert_cmpuint(count_servers(&lv.a), ==, 1);
    guest_verify(&lv.a, dom.con, dom.pages);
}

/* virsh save, then virsh restore: the vGPU's VRAM goes into the file
 * with the rest of the domain's state (QEMU migrates to it), the hook
 * stops the server with the domain and starts a new one for the
 * restore, which loads the same VRAM; the guest's own check of its VRAM
 * model passes and its workload goes on.  libvirt hands QEMU the image
 * itself, so VRAM comes on demand from it (docs/restore.md); with
 * --bypass-cache libvirt pipes the image through its I/O helper, which
 * QEMU cannot seek, and the restore loads everything first. */
static void save_restore(bool bypass)
{
    g_autofree char *file =
        g_strdup_printf("/var/lib/libvirt/qemu/save/%s.sav", DOM);
    g_autofree char *old_log = hpath_take(&lv.a, serial_log());
    g_autofree char *saved = NULL, *saved_sum = NULL, *restored_sum = NULL;
    g_autofree char *out = NULL, *err = NULL, *image = hpath(&lv.a, file);
    g_autofree char *restored = NULL;
    const char *opt = "--bypass-cache";
    struct console *con;
    gint64 t0 = g_get_monotonic_time();
    int rc;

    g_assert_true(dom.on == &lv.a);
    rc = bypass ? VIRSH(&lv.a, &out, &err, "save", DOM, file, "--verbose", opt)
                : VIRSH(&lv.a, &out, &err, "save", DOM, file, "--verbose");
    g_test_message("virsh save%s: exit %d in %.1f s: %s",
                   bypass ? " --bypass-cache" : "", rc,
                   (g_get_monotonic_time() - t0) / 1e6, g_strstrip(err));
    g_assert_cmpint(rc, ==, 0);
    g_assert_nonnull(strstr(err, "Save: ["));
    g_assert_false(is_running_on(&lv.a));
    wait_nothing_left(&lv.a);
    g_assert_true(g_file_test(image, G_FILE_TEST_IS_REGULAR));
    saved = last_stats(&lv.a, 0);
    saved_sum = checksum_in(saved);
    g_assert_cmpstr(saved_sum, !=, "");
    g_assert_cmpint(stat_in(saved, "stopcopy_bytes"), >, 0);

    g_unlink(old_log);
    con = console_open(&lv.a);
    t0 = g_get_monotonic_time();
    g_free(out);
    g_free(err);
    rc = bypass ? VIRSH(&lv.a, &out, &err, "restore", file, opt)
                : VIRSH(&lv.a, &out, &err, "restore", file);
    g_test_message("virsh restore%s%s: exit %d in %.1f s: %s %s",
                   bypass ? " " : "", bypass ? opt : "", rc,
                   (g_get_monotonic_time() - t0) / 1e6, g_strstrip(out),
                   g_strstrip(err));
    g_assert_cmpint(rc, ==, 0);
    g_assert_true(is_running_on(&lv.a));
    assert_vgpu_served(&lv.a);
    g_assert_cmpuint(count_servers(&lv.a), ==, 1);
    restored = dst_stats_loaded(&lv.a, 0);
    restored_sum = checksum_in(restored);
    g_test_message("VRAM checksum saved %s, restored %s", saved_sum,
                   restored_sum);
    g_assert_cmpstr(restored_sum, ==, saved_sum);
    g_assert_nonnull(strstr(restored, bypass ? "\"restore_on_demand\": false"
                                             : "\"restore_on_demand\": true"));
    if (!bypass) {
        g_assert_nonnull(strstr(restored, "\"postcopy_verified\": true"));
    }
    console_close(dom.con);
    dom.con = con;
    guest_verify(&lv.a, dom.con, dom.pages);
    g_assert_cmpint(g_unlink(image), ==, 0);
}

static void test_save_restore(void)
{
    save_restore(false);
}

static void test_save_restore_bypass(void)
{
    save_restore(true);
}

/* virsh snapshot-create-as with an external memory snapshot: libvirt
 * pauses the domain, QEMU migrates its state (VRAM included) to the
 * memory file, and the domain runs on with the same server.  The memory
 * file is a save image: after a destroy, virsh restore of it brings back
 * the VRAM of the snapshot, and the guest's check of its model passes. */
static void test_snapshot_memory(void)
{
    g_autofree char *file =
        g_strdup_printf("/var/lib/libvirt/qemu/save/%s-snapshot.mem", DOM);
    g_autofree char *spec = g_strdup_printf("file=%s,snapshot=external", file);
    g_autofree char *old_log = hpath_take(&lv.a, serial_log());
    g_autofree char *image = hpath(&lv.a, file);
    g_autofree char *stats = hpath_take(&lv.a, stats_path(0));
    g_autofree char *before = NULL, *after = NULL, *snap_sum = NULL;
    g_autofree char *restored_sum = NULL, *out = NULL, *err = NULL;
    g_autofree char *restored = NULL;
    struct console *con;
    int rc;

    g_assert_true(dom.on == &lv.a);
    g_file_get_contents(stats, &before, NULL, NULL);
    rc = VIRSH(&lv.a, &out, &err, "snapshot-create-as", DOM, "vgmig-snap",
               "--memspec", spec, "--no-metadata");
    g_test_message("virsh snapshot-create-as: exit %d: %s %s", rc,
                   g_strstrip(out), g_strstrip(err));
    g_assert_cmpint(rc, ==, 0);
    g_assert_true(g_file_test(image, G_FILE_TEST_IS_REGULAR));
    /* The domain runs on, served by the same server, which moved its
     * state into the file once more. */
    g_assert_true(is_running_on(&lv.a));
    assert_vgpu_served(&lv.a);
    g_assert_cmpuint(count_servers(&lv.a), ==, 1);
    g_file_get_contents(stats, &after, NULL, NULL);
    g_assert_cmpint(stat_in(after, "migrations_started"), ==,
                    stat_in(before, "migrations_started") + 1);
    g_assert_cmpint(stat_in(after, "stopcopy_bytes"), >, 0);
    snap_sum = checksum_in(after);
    g_assert_cmpstr(snap_sum, !=, "");
    guest_verify(&lv.a, dom.con, dom.pages);

    /* Back to the snapshot's state through the memory file. */
    g_free(VIRSH_OK(&lv.a, "destroy", DOM));
    wait_nothing_left(&lv.a);
    g_unlink(old_log);
    con = console_open(&lv.a);
    g_free(out);
    g_free(err);
    rc = VIRSH(&lv.a, &out, &err, "restore", file);
    g_test_message("virsh restore of the snapshot's memory: exit %d: %s %s", rc,
                   g_strstrip(out), g_strstrip(err));
    g_assert_cmpint(rc, ==, 0);
    g_assert_true(is_running_on(&lv.a));
    assert_vgpu_served(&lv.a);
    restored = dst_stats_loaded(&lv.a, 0);
    restored_sum = checksum_in(restored);
    g_test_message("VRAM checksum at the snapshot %s, restored %s", snap_sum,
                   restored_sum);
    g_assert_cmpstr(restored_sum, ==, snap_sum);
    console_close(dom.con);
    dom.con = con;
    guest_verify(&lv.a, dom.con, dom.pages);
    g_assert_cmpint(g_unlink(image), ==, 0);
}

/* Destroy the domain on host a: its hook stops every server. */
static void destroy_domain(void)
{
    g_autofree char *log = NULL;

    g_assert_true(dom.on == &lv.a);
    g_free(VIRSH_OK(&lv.a, "destroy", DOM));
    assert_nothing_left(&lv.a);
    assert_nothing_left(&lv.b);
    log = hook_log(&lv.a);
    g_assert_cmpuint(count_str(log, "stopped vgpu-server"), >=,
                     dom.spec->nvgpu);
    console_close(dom.con);
    dom.con = NULL;
}

static void test_destroy(void)
{
    destroy_domain();
}

/* A server that dies at start-up fails `virsh start` with the hook's
 * reason, and nothing is left behind. */
static void test_start_fails(void)
{
    g_autofree char *conf = hpath(&lv.a, "/etc/vgmig/hook.conf");
    g_autofree char *saved = NULL, *broken = NULL, *err = NULL;

    g_assert_true(g_file_get_contents(conf, &saved, NULL, NULL));
    broken = g_strdup_printf("%sserver = /bin/false\n", saved);
    g_assert_true(g_file_set_contents(conf, broken, -1, NULL));
    g_assert_true(dom.spec == &dom_one);
    g_assert_cmpint(VIRSH(&lv.a, NULL, &err, "start", DOM), !=, 0);
    g_test_message("start with a failing server: %s", g_strstrip(err));
    g_assert_nonnull(strstr(err, "vgpu-server exited at start-up"));
    g_assert_false(is_running_on(&lv.a));
    assert_nothing_left(&lv.a);
    g_assert_true(g_file_set_contents(conf, saved, -1, NULL));
    g_free(VIRSH_OK(&lv.a, "undefine", DOM));
}

/* A domain with two vGPUs: the hook starts a server for each, the guest
 * drives both, and the domain migrates there and back with every page of
 * both vGPUs checked by the guest and both checksums compared. */
static void test_two_start(void)
{
    start_domain(&dom_two);
}

static void test_two_migrate_there(void)
{
    g_assert_true(dom.spec == &dom_two && dom.on == &lv.a);
    migrate_ok(&lv.b, 0);
}

static void test_two_migrate_back(void)
{
    g_assert_true(dom.spec == &dom_two && dom.on == &lv.b);
    migrate_ok(&lv.a, 0);
}

/* Both vGPUs over the multifd channels, each with its save and load
 * threads, and back on the main channel. */
static void test_two_migrate_parallel(void)
{
    g_assert_true(dom.spec == &dom_two && dom.on == &lv.a);
    migrate_ok(&lv.b, PARALLEL_CONNECTIONS);
}

static void test_two_migrate_parallel_back(void)
{
    g_assert_true(dom.spec == &dom_two && dom.on == &lv.b);
    migrate_ok(&lv.a, 0);
}

static void test_two_destroy(void)
{
    g_assert_true(dom.spec == &dom_two);
    destroy_domain();
    g_free(VIRSH_OK(&lv.a, "undefine", DOM));
}

static char *read_script_line(void)
{
    GString *s = g_string_new(NULL);
    char ch;

    while (read(lv.script_out, &ch, 1) == 1) {
        if (ch == '\n') {
            return g_string_free(s, FALSE);
        }
        g_string_append_c(s, ch);
    }
    if (s->len) {
        return g_string_free(s, FALSE);
    }
    g_string_free(s, TRUE);
    return NULL;
}

/* Close the script's input: it tears the hosts down and must report that
 * no process of them is left. */
static void test_teardown(void)
{
    char *line;
    bool clean = false;
    int status;

    close(lv.script_in);
    while ((line = read_script_line())) {
        g_test_message("lv-hosts: %s", line);
        clean |= strcmp(line, "down clean") == 0;
        g_free(line);
    }
    g_assert_cmpint(waitpid(lv.script, &status, 0), ==, lv.script);
    lv.down = true;
    g_assert_true(WIFEXITED(status));
    g_assert_cmpint(WEXITSTATUS(status), ==, 0);
    g_assert_true(clean);
}

static void start_hosts(void)
{
    const char *script = g_getenv("VGMIG_LIBVIRT_HOSTS");
    const char *argv[] = {"sh", script, NULL, NULL};
    g_autoptr(GError) gerr = NULL;
    char *line;

    lv.dir = g_dir_make_tmp("vgmig-libvirt-XXXXXX", NULL);
    g_assert_nonnull(lv.dir);
    argv[2] = lv.dir;
    lv.a = (struct host){'a', "10.77.0.1", 0};
    lv.b = (struct host){'b', "10.77.0.2", 0};
    if (!g_spawn_async_with_pipes(
            NULL, (char **)argv, NULL,
            G_SPAWN_SEARCH_PATH | G_SPAWN_DO_NOT_REAP_CHILD, NULL, NULL,
            &lv.script, &lv.script_in, &lv.script_out, NULL, &gerr)) {
        g_error("cannot run %s: %s", script, gerr->message);
    }
    while ((line = read_script_line())) {
        int pid;
        char name;

        if (sscanf(line, "host %c %d", &name, &pid) == 2) {
            (name == 'a' ? &lv.a : &lv.b)->pid = pid;
        }
        if (strcmp(line, "ready") == 0) {
            g_free(line);
            break;
        }
        g_printerr("# lv-hosts: %s\n", line);
        g_free(line);
    }
    if (!line || !lv.a.pid || !lv.b.pid) {
        g_error("%s did not bring up the hosts (see its messages above)",
                script);
    }
}

int main(int argc, char **argv)
{
    const char *need[] = {"VGMIG_LIBVIRT_HOSTS", "VGMIG_HOOK", "VGMIG_QEMU",
                          "VGMIG_SERVER", "VGMIG_GUEST_DIR"};
    g_autofree char *virsh_bin = g_find_program_in_path("virsh");
    int ret;

    g_test_init(&argc, &argv, NULL);
    if (geteuid() != 0) {
        printf("1..0 # SKIP needs root: the libvirt hosts use mount, PID "
               "and network namespaces\n");
        return 0;
    }
    if (!virsh_bin || !g_file_test("/usr/sbin/libvirtd", G_FILE_TEST_EXISTS)) {
        printf("1..0 # SKIP libvirt is not installed (Debian packages "
               "libvirt-daemon-driver-qemu libvirt-clients; ./configure "
               "installs them)\n");
        return 0;
    }
    for (unsigned i = 0; i < G_N_ELEMENTS(need); i++) {
        if (!g_getenv(need[i])) {
            g_error("%s is not set (run this test with make check-libvirt)",
                    need[i]);
        }
    }
    /* Keep our own output away from the script's pipes. */
    signal(SIGPIPE, SIG_IGN);
    start_hosts();
    g_test_add_func("/libvirt/hosts", test_hosts);
    g_test_add_func("/libvirt/start", test_start);
    g_test_add_func("/libvirt/migrate-there", test_migrate_there);
    g_test_add_func("/libvirt/migrate-back", test_migrate_back);
    g_test_add_func("/libvirt/migrate-parallel", test_migrate_parallel);
    g_test_add_func("/libvirt/migrate-parallel-back",
                    test_migrate_parallel_back);
    g_test_add_func("/libvirt/migrate-postcopy", test_migrate_postcopy);
    g_test_add_func("/libvirt/migrate-postcopy-back",
                    test_migrate_postcopy_back);
    g_test_add_func("/libvirt/migrate-postcopy-cut", test_migrate_postcopy_cut);
    g_test_add_func("/libvirt/save-restore", test_save_restore);
    g_test_add_func("/libvirt/save-restore-bypass-cache",
                    test_save_restore_bypass);
    g_test_add_func("/libvirt/snapshot-memory", test_snapshot_memory);
    g_test_add_func("/libvirt/refused", test_refused);
    g_test_add_func("/libvirt/aborted", test_aborted);
    g_test_add_func("/libvirt/destroy", test_destroy);
    g_test_add_func("/libvirt/start-fails", test_start_fails);
    g_test_add_func("/libvirt/two-vgpus-start", test_two_start);
    g_test_add_func("/libvirt/two-vgpus-migrate-there", test_two_migrate_there);
    g_test_add_func("/libvirt/two-vgpus-migrate-back", test_two_migrate_back);
    g_test_add_func("/libvirt/two-vgpus-migrate-parallel",
                    test_two_migrate_parallel);
    g_test_add_func("/libvirt/two-vgpus-migrate-parallel-back",
                    test_two_migrate_parallel_back);
    g_test_add_func("/libvirt/two-vgpus-destroy", test_two_destroy);
    g_test_add_func("/libvirt/teardown", test_teardown);
    ret = g_test_run();
    if (!lv.down) {
        close(lv.script_in);
        waitpid(lv.script, NULL, 0);
    }
    if (ret == 0) {
        g_autofree char *cmd = g_strdup_printf("rm -rf '%s'", lv.dir);
        if (system(cmd) != 0) {
            g_printerr("# could not remove %s\n", lv.dir);
        }
    } else {
        g_printerr("# hosts' files kept in %s\n", lv.dir);
    }
    return ret;
}
