/*
 * Unit tests of the libvirt hook (libvirt-hooks/): the domain XML and its
 * vGPUs, hook.conf, the phase table, the host checks, and starting and
 * stopping real vgpu-server processes ($VGMIG_SERVER) with the records,
 * sockets and directories they leave, including failed starts.
 */
#include <errno.h>
#include <glib.h>
#include <glib/gstdio.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libvirt-hooks/hook-config.h"
#include "libvirt-hooks/hook-domain.h"
#include "libvirt-hooks/hook-policy.h"
#include "libvirt-hooks/hook-server.h"

#define NS "xmlns:vgmig='" VGH_XMLNS "'"

/* A domain XML with @metadata inside <metadata> and @args (qemu:arg
 * elements) inside <qemu:commandline>. */
static char *domain_xml(const char *metadata, const char *args)
{
    return g_strdup_printf(
        "<domain type='qemu' "
        "xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>\n"
        "  <name>vm1</name>\n"
        "  <uuid>0b7e4b52-1d2c-4f63-9a1e-2f0c7d5e9a01</uuid>\n"
        "  <metadata>%s</metadata>\n"
        "  <seclabel type='dynamic' model='dac' relabel='yes'>\n"
        "    <label>+64055:+64056</label>\n"
        "  </seclabel>\n"
        "  <qemu:commandline>%s</qemu:commandline>\n"
        "</domain>\n",
        metadata, args);
}

static int parse(const char *metadata, const char *args, struct vgh_domain *dom,
                 struct vg_error *err)
{
    g_autofree char *xml = domain_xml(metadata, args);

    return vgh_domain_parse(xml, strlen(xml), dom, err);
}

#define DEV_JSON(id, path)                                                     \
    "<qemu:arg value='-device'/><qemu:arg value='{\"driver\":"                 \
    "\"vfio-user-pci\",\"id\":\"" id "\",\"socket\":{\"type\":\"unix\","       \
    "\"path\":\"" path "\"}}'/>"

static void test_domain_json_device(void)
{
    struct vgh_domain dom;
    struct vg_error err = {0};

    g_assert_cmpint(
        parse("<vgmig:vgpus " NS "><vgmig:vgpu device='gpu0' "
              "size='256M' page-size='4K' backend='cpu'/>"
              "</vgmig:vgpus>",
              "<qemu:arg value='-L'/><qemu:arg value='/fw'/>" DEV_JSON(
                  "gpu0", "/run/vgmig/vm1/vgpu0.sock"),
              &dom, &err),
        ==, 0);
    g_assert_cmpstr(dom.name, ==, "vm1");
    g_assert_cmpstr(dom.uuid, ==, "0b7e4b52-1d2c-4f63-9a1e-2f0c7d5e9a01");
    g_assert_true(dom.has_label);
    g_assert_cmpuint(dom.uid, ==, 64055);
    g_assert_cmpuint(dom.gid, ==, 64056);
    g_assert_cmpuint(dom.n_vgpus, ==, 1);
    g_assert_cmpstr(dom.vgpus[0].socket, ==, "/run/vgmig/vm1/vgpu0.sock");
    g_assert_cmpuint(dom.vgpus[0].size, ==, 256u << 20);
    g_assert_cmpuint(dom.vgpus[0].page_size, ==, 4096);
    g_assert_cmpstr(dom.vgpus[0].backend, ==, "cpu");
    g_assert_true(dom.vgpus[0].managed);
    vgh_domain_clear(&dom);
}

static void test_domain_defaults_and_order(void)
{
    struct vgh_domain dom;
    struct vg_error err = {0};

    /* Two vGPUs without device ids take the devices in order; the keyval
     * form works too, and an unrelated -device is ignored. */
    g_assert_cmpint(
        parse("<vgmig:vgpus " NS "><vgmig:vgpu size='64M'/>"
              "<vgmig:vgpu size='1G' managed='no'/></vgmig:vgpus>",
              "<qemu:arg value='-device'/><qemu:arg value='virtio-rng-pci'/>"
              "<qemu:arg value='-device'/><qemu:arg value='vfio-user-pci,"
              "socket.type=unix,socket.path=/run/a,,b.sock'/>" DEV_JSON(
                  "x", "/run/b.sock"),
              &dom, &err),
        ==, 0);
    g_assert_cmpuint(dom.n_vgpus, ==, 2);
    g_assert_cmpstr(dom.vgpus[0].socket, ==, "/run/a,b.sock");
    g_assert_cmpuint(dom.vgpus[0].page_size, ==, 64 << 10);
    g_assert_cmpstr(dom.vgpus[0].backend, ==, "cpu");
    g_assert_true(dom.vgpus[0].managed);
    g_assert_cmpstr(dom.vgpus[1].socket, ==, "/run/b.sock");
    g_assert_cmpstr(dom.vgpus[1].device, ==, "x");
    g_assert_false(dom.vgpus[1].managed);
    vgh_domain_clear(&dom);

    /* By id, whatever the order on the command line. */
    g_assert_cmpint(parse("<vgmig:vgpus " NS ">"
                          "<vgmig:vgpu device='b' size='16M'/>"
                          "<vgmig:vgpu device='a' size='32M'/></vgmig:vgpus>",
                          DEV_JSON("a", "/s/a.sock") DEV_JSON("b", "/s/b.sock"),
                          &dom, &err),
                    ==, 0);
    g_assert_cmpstr(dom.vgpus[0].socket, ==, "/s/b.sock");
    g_assert_cmpstr(dom.vgpus[1].socket, ==, "/s/a.sock");
    vgh_domain_clear(&dom);
}

static void test_domain_without_vgpus(void)
{
    struct vgh_domain dom;
    struct vg_error err = {0};

    /* Other metadata, and a vfio-user device nobody claims. */
    g_assert_cmpint(parse("<other:x xmlns:other='urn:other'><other:vgpu "
                          "size='1G'/></other:x>",
                          DEV_JSON("g", "/run/g.sock"), &dom, &err),
                    ==, 0);
    g_assert_cmpuint(dom.n_vgpus, ==, 0);
    vgh_domain_clear(&dom);
}

static void test_domain_errors(void)
{
    static const struct {
        const char *meta, *args, *needle;
    } cases[] = {
        {"<vgmig:vgpus " NS "><vgmig:vgpu/></vgmig:vgpus>",
         DEV_JSON("g", "/s.sock"), "no size"},
        {"<vgmig:vgpus " NS "><vgmig:vgpu size='3M'/></vgmig:vgpus>",
         DEV_JSON("g", "/s.sock"), "power of two"},
        {"<vgmig:vgpus " NS "><vgmig:vgpu size='16M' page-size='1K'/>"
         "</vgmig:vgpus>",
         DEV_JSON("g", "/s.sock"), "page-size"},
        {"<vgmig:vgpus " NS "><vgmig:vgpu size='16M' managed='maybe'/>"
         "</vgmig:vgpus>",
         DEV_JSON("g", "/s.sock"), "managed"},
        {"<vgmig:vgpus " NS "><vgmig:vgpu size='16M' backend='a b'/>"
         "</vgmig:vgpus>",
         DEV_JSON("g", "/s.sock"), "backend"},
        {"<vgmig:vgpus " NS "><vgmig:vgpu size='16M'/></vgmig:vgpus>", "",
         "no vfio-user-pci device"},
        {"<vgmig:vgpus " NS "><vgmig:vgpu device='h' size='16M'/>"
         "</vgmig:vgpus>",
         DEV_JSON("g", "/s.sock"), "id 'h'"},
        {"<vgmig:vgpus " NS "><vgmig:vgpu size='16M'/></vgmig:vgpus>",
         DEV_JSON("g", "rel.sock"), "not absolute"},
        {"<vgmig:vgpus " NS "><vgmig:vgpu size='16M'/></vgmig:vgpus>",
         DEV_JSON("g", "/a/../b.sock"), "plain file"},
        {"<vgmig:vgpus " NS "><vgmig:vgpu size='16M'/>"
         "<vgmig:vgpu size='16M'/></vgmig:vgpus>",
         DEV_JSON("g", "/s.sock") DEV_JSON("h", "/s.sock"), "share"},
        {"<vgmig:vgpus " NS "><vgmig:vgpu size='16M'/></vgmig:vgpus>",
         "<qemu:arg value='-device'/><qemu:arg value='{\"driver\":"
         "\"vfio-user-pci\",\"socket\":{\"type\":\"inet\",\"host\":\"h\"}}'/>",
         "unix"},
        {"<vgmig:vgpus " NS "><vgmig:vgpu size='16M'/></vgmig:vgpus>",
         "<qemu:arg value='-device'/><qemu:arg value='{\"driver\":'/>",
         "not valid JSON"},
    };

    for (unsigned i = 0; i < G_N_ELEMENTS(cases); i++) {
        struct vgh_domain dom;
        struct vg_error err = {0};

        g_assert_cmpint(parse(cases[i].meta, cases[i].args, &dom, &err), <, 0);
        if (!strstr(err.msg, cases[i].needle)) {
            g_error("case %u: '%s' lacks '%s'", i, err.msg, cases[i].needle);
        }
        g_assert_nonnull(strstr(err.msg, "domain 'vm1'"));
        vgh_domain_clear(&dom);
    }
}

static void test_domain_not_xml(void)
{
    struct vgh_domain dom;
    struct vg_error err = {0};
    const char *bad = "<domain><name>x</name>";

    g_assert_cmpint(vgh_domain_parse(bad, strlen(bad), &dom, &err), ==,
                    -EINVAL);
    g_assert_nonnull(strstr(err.msg, "not well-formed"));
    vgh_domain_clear(&dom);
}

static void test_dac_label(void)
{
    struct vg_error err = {0};
    uid_t uid = 1;
    gid_t gid = 1;

    g_assert_cmpint(vgh_parse_dac_label("+0:+0", &uid, &gid, &err), ==, 0);
    g_assert_cmpuint(uid, ==, 0);
    g_assert_cmpuint(gid, ==, 0);
    g_assert_cmpint(vgh_parse_dac_label("root:root", &uid, &gid, &err), ==, 0);
    g_assert_cmpint(vgh_parse_dac_label("+12", &uid, &gid, &err), ==, -EINVAL);
    g_assert_cmpint(vgh_parse_dac_label("+x:+1", &uid, &gid, &err), ==,
                    -EINVAL);
    g_assert_cmpint(
        vgh_parse_dac_label("no-such-user-vgmig:root", &uid, &gid, &err), ==,
        -ENOENT);
}

static void test_config(void)
{
    struct vgh_config cfg;
    struct vg_error err = {0};

    vgh_config_defaults(&cfg);
    g_assert_cmpstr(cfg.state_dir, ==, "/run/vgmig");
    g_assert_cmpuint(cfg.max_vram, ==, 0);
    g_assert_cmpuint(cfg.start_timeout, ==, 10);
    g_assert_false(cfg.server_prealloc);
    g_assert_cmpstr(cfg.postcopy_listen, ==, "");
    g_assert_cmpuint(cfg.postcopy_timeout, ==, 60);
    g_assert_true(vgh_config_has_backend(&cfg, "cpu"));
    g_assert_false(vgh_config_has_backend(&cfg, "cuda"));

    g_assert_cmpint(vgh_config_parse("# comment\n\n"
                                     "max_vram = 512M  # trailing\n"
                                     "backends = cpu, cuda\n"
                                     "server=/opt/vgpu-server\n"
                                     "start_timeout = 3\n"
                                     "server_log_level = debug\n"
                                     "server_prealloc = yes\n"
                                     "postcopy_listen = 10.0.0.7\n"
                                     "postcopy_timeout = 90\n",
                                     "t.conf", &cfg, &err),
                    ==, 0);
    g_assert_true(cfg.server_prealloc);
    g_assert_cmpstr(cfg.postcopy_listen, ==, "10.0.0.7");
    g_assert_cmpuint(cfg.postcopy_timeout, ==, 90);
    g_assert_cmpuint(cfg.max_vram, ==, 512u << 20);
    g_assert_true(vgh_config_has_backend(&cfg, "cuda"));
    g_assert_cmpstr(cfg.server, ==, "/opt/vgpu-server");
    g_assert_cmpuint(cfg.start_timeout, ==, 3);
    g_assert_cmpstr(cfg.server_log_level, ==, "debug");

    g_assert_cmpint(vgh_config_parse("\nmax_ram = 1G\n", "t.conf", &cfg, &err),
                    ==, -EINVAL);
    g_assert_nonnull(strstr(err.msg, "t.conf:2"));
    g_assert_nonnull(strstr(err.msg, "unknown key 'max_ram'"));
    g_assert_cmpint(vgh_config_parse("max_vram = lots\n", "t.conf", &cfg, &err),
                    ==, -EINVAL);
    g_assert_cmpint(
        vgh_config_parse("server = relative\n", "t.conf", &cfg, &err), ==,
        -EINVAL);
    g_assert_cmpint(
        vgh_config_parse("stop_timeout = 0\n", "t.conf", &cfg, &err), ==,
        -EINVAL);
    g_assert_cmpint(
        vgh_config_parse("postcopy_listen = /run/x\n", "t.conf", &cfg, &err),
        ==, -EINVAL);
    g_assert_nonnull(strstr(err.msg, "not a host name or address"));
    g_assert_cmpint(vgh_config_parse("just words\n", "t.conf", &cfg, &err), ==,
                    -EINVAL);
    g_assert_cmpint(
        vgh_config_parse("server_prealloc = 1\n", "t.conf", &cfg, &err), ==,
        -EINVAL);
    g_assert_nonnull(strstr(err.msg, "'1' is not yes or no"));

    /* A missing file is all defaults. */
    g_assert_cmpint(vgh_config_load("/nonexistent/vgmig/hook.conf", &cfg, &err),
                    ==, 0);
    g_assert_cmpuint(cfg.max_vram, ==, 0);
}

static void test_phases(void)
{
    static const struct {
        const char *op, *sub;
        enum vgh_action action;
    } cases[] = {
        {"migrate", "begin", VGH_CHECK}, {"prepare", "begin", VGH_START},
        {"start", "begin", VGH_NONE},    {"started", "begin", VGH_NONE},
        {"stopped", "end", VGH_STOP},    {"release", "end", VGH_STOP},
        {"restore", "begin", VGH_NONE},  {"reconnect", "begin", VGH_NONE},
        {"attach", "begin", VGH_NONE},   {"prepare", "end", VGH_NONE},
        {"migrate", "end", VGH_NONE},    {"unknown", "-", VGH_NONE},
    };

    for (unsigned i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_assert_cmpint(vgh_phase_action(cases[i].op, cases[i].sub), ==,
                        cases[i].action);
    }
    g_assert_cmpstr(vgh_action_name(VGH_STOP), ==, "stop");
}

static void one_vgpu(struct vgh_domain *dom, uint64_t size, const char *backend,
                     bool managed)
{
    memset(dom, 0, sizeof(*dom));
    dom->name = g_strdup("vm1");
    dom->n_vgpus = 1;
    dom->vgpus[0].size = size;
    dom->vgpus[0].page_size = 64 << 10;
    dom->vgpus[0].backend = g_strdup(backend);
    dom->vgpus[0].socket = g_strdup("/run/vgmig/vm1/vgpu0.sock");
    dom->vgpus[0].managed = managed;
}

static void test_check_host(void)
{
    struct vgh_config cfg;
    struct vgh_domain dom;
    struct vgh_host host = {"hostB", 8ull << 30, true};
    struct vg_error err = {0};

    vgh_config_defaults(&cfg);
    one_vgpu(&dom, 1ull << 30, "cpu", true);
    g_assert_cmpint(vgh_check_host(&cfg, &dom, &host, &err), ==, 0);

    cfg.max_vram = 512ull << 20;
    g_assert_cmpint(vgh_check_host(&cfg, &dom, &host, &err), ==, -E2BIG);
    g_assert_nonnull(strstr(err.msg, "host hostB"));
    g_assert_nonnull(strstr(err.msg, "1 GiB"));
    g_assert_nonnull(strstr(err.msg, "max_vram = 512 MiB"));
    cfg.max_vram = 1ull << 30; /* the limit itself is allowed */
    g_assert_cmpint(vgh_check_host(&cfg, &dom, &host, &err), ==, 0);

    host.mem_available = (1ull << 30) + (255ull << 20);
    g_assert_cmpint(vgh_check_host(&cfg, &dom, &host, &err), ==, -ENOMEM);
    g_assert_nonnull(strstr(err.msg, "reserve_memory"));
    host.mem_available = 8ull << 30;

    host.server_ok = false;
    g_assert_cmpint(vgh_check_host(&cfg, &dom, &host, &err), ==, -ENOENT);
    g_assert_nonnull(strstr(err.msg, cfg.server));
    host.server_ok = true;

    /* Sockets only below socket_root. */
    g_snprintf(cfg.socket_root, sizeof(cfg.socket_root), "/run/vgmig/vm");
    g_assert_cmpint(vgh_check_host(&cfg, &dom, &host, &err), ==, -EPERM);
    g_assert_nonnull(strstr(err.msg, "socket_root"));
    g_snprintf(cfg.socket_root, sizeof(cfg.socket_root), "/run/vgmig/");
    g_assert_cmpint(vgh_check_host(&cfg, &dom, &host, &err), ==, 0);
    g_snprintf(cfg.socket_root, sizeof(cfg.socket_root), "/");
    g_assert_cmpint(vgh_check_host(&cfg, &dom, &host, &err), ==, 0);
    vgh_domain_clear(&dom);

    one_vgpu(&dom, 1ull << 30, "cuda", true);
    g_assert_cmpint(vgh_check_host(&cfg, &dom, &host, &err), ==, -ENOTSUP);
    g_assert_nonnull(strstr(err.msg, "backend 'cuda'"));
    vgh_domain_clear(&dom);

    /* Unmanaged: only the backend matters, not size, memory or binary. */
    one_vgpu(&dom, 4ull << 30, "cpu", false);
    host.server_ok = false;
    host.mem_available = 0;
    g_assert_cmpint(vgh_check_host(&cfg, &dom, &host, &err), ==, 0);
    vgh_domain_clear(&dom);
}

/* ----------------------------------------------- real server processes -- */

struct rig {
    char *dir;
    struct vgh_config cfg;
    struct vgh_domain dom;
    char *sock;
};

/* A domain of @nvgpu vGPUs of 1 MiB on sockets vgpuN.sock of one
 * directory, served by @server (or the real one). */
static bool rig_init_n(struct rig *r, const char *server, unsigned nvgpu)
{
    const char *real = g_getenv("VGMIG_SERVER");
    g_autofree char *xml = NULL;
    g_autoptr(GString) meta = g_string_new("<vgmig:vgpus " NS ">");
    g_autoptr(GString) args = g_string_new(NULL);
    struct vg_error err = {0};

    if (!server && (!real || !g_file_test(real, G_FILE_TEST_IS_EXECUTABLE))) {
        g_test_skip("VGMIG_SERVER does not name a vgpu-server");
        return false;
    }
    memset(r, 0, sizeof(*r));
    r->dir = g_dir_make_tmp("vgmig-hook-XXXXXX", NULL);
    g_assert_nonnull(r->dir);
    vgh_config_defaults(&r->cfg);
    g_snprintf(r->cfg.server, sizeof(r->cfg.server), "%s",
               server ? server : real);
    g_snprintf(r->cfg.state_dir, sizeof(r->cfg.state_dir), "%s/state", r->dir);
    g_snprintf(r->cfg.log_dir, sizeof(r->cfg.log_dir), "%s/log", r->dir);
    g_snprintf(r->cfg.socket_root, sizeof(r->cfg.socket_root), "%s/run",
               r->dir);
    r->cfg.start_timeout = 60;
    r->sock = g_strdup_printf("%s/run/vm1/vgpu0.sock", r->dir);
    for (unsigned i = 0; i < nvgpu; i++) {
        g_string_append(meta, "<vgmig:vgpu size='1M' page-size='4K'/>");
        g_string_append_printf(args,
                               "<qemu:arg value='-device'/><qemu:arg "
                               "value='vfio-user-pci,socket.path=%s/run/vm1/"
                               "vgpu%u.sock'/>",
                               r->dir, i);
    }
    g_string_append(meta, "</vgmig:vgpus>");
    xml = domain_xml(meta->str, args->str);
    g_assert_cmpint(vgh_domain_parse(xml, strlen(xml), &r->dom, &err), ==, 0);
    /* Run the server as ourselves, as a QEMU user would. */
    r->dom.uid = getuid();
    r->dom.gid = getgid();
    return true;
}

static bool rig_init(struct rig *r, const char *server)
{
    return rig_init_n(r, server, 1);
}

static char *rig_state_file(struct rig *r)
{
    return g_strdup_printf("%s/%s-0.state", r->cfg.state_dir, r->dom.uuid);
}

static pid_t rig_pid(struct rig *r)
{
    g_autofree char *path = rig_state_file(r);
    g_autofree char *text = NULL;

    if (!g_file_get_contents(path, &text, NULL, NULL)) {
        return 0;
    }
    g_assert_true(g_str_has_prefix(text, "pid="));
    return (pid_t)atoi(text + 4);
}

static void rig_finish(struct rig *r)
{
    g_autofree char *cmd = g_strdup_printf("rm -rf '%s'", r->dir);

    g_assert_cmpint(system(cmd), ==, 0);
    vgh_domain_clear(&r->dom);
    g_free(r->dir);
    g_free(r->sock);
}

/* True once @pid has exited (a zombie counts: init reaps it when it
 * likes; the server is not our child). */
/* Gone, or a zombie whose threads have all exited (and so closed its
 * files: the data plane's thread may outlive a killed main thread). */
static bool gone(pid_t pid)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/stat", (int)pid);
    g_autofree char *stat = NULL;
    g_auto(GStrv) fields = NULL;
    const char *paren;

    if (!g_file_get_contents(path, &stat, NULL, NULL)) {
        return true;
    }
    paren = strrchr(stat, ')');
    if (!paren || (paren[2] != 'Z' && paren[2] != 'X')) {
        return false;
    }
    fields = g_strsplit(paren + 2, " ", 19); /* [17]: num_threads */
    return g_strv_length(fields) > 17 && atoi(fields[17]) <= 1;
}

static void wait_gone(pid_t pid)
{
    for (int i = 0; i < 1000 && !gone(pid); i++) {
        g_usleep(10000);
    }
}

/* Nothing of the server may remain: process, socket, directory, record. */
static void assert_gone(struct rig *r, pid_t pid)
{
    g_autofree char *state = rig_state_file(r);
    g_autofree char *sockdir = g_path_get_dirname(r->sock);

    if (pid > 0) {
        g_assert_true(gone(pid));
    }
    g_assert_false(g_file_test(r->sock, G_FILE_TEST_EXISTS));
    g_assert_false(g_file_test(sockdir, G_FILE_TEST_EXISTS));
    g_assert_false(g_file_test(state, G_FILE_TEST_EXISTS));
}

static void test_server_start_stop(void)
{
    struct rig r;
    struct vg_error err = {0};
    struct stat sb;
    pid_t pid, again;
    g_autofree char *log = NULL;
    g_autofree char *log_text = NULL;

    if (!rig_init(&r, NULL)) {
        return;
    }
    g_assert_cmpint(
        vgh_servers_start(&r.cfg, &r.dom, r.dom.uid, r.dom.gid, &err), ==, 0);
    pid = rig_pid(&r);
    g_assert_cmpint(pid, >, 1);
    g_assert_false(gone(pid));
    g_assert_true(vgh_socket_accepts(r.sock));
    /* Only the QEMU user can reach and connect to the socket. */
    g_assert_cmpint(lstat(r.sock, &sb), ==, 0);
    g_assert_true(S_ISSOCK(sb.st_mode));
    g_assert_cmpuint(sb.st_mode & 0777, ==, 0600);
    g_assert_cmpuint(sb.st_uid, ==, r.dom.uid);
    {
        g_autofree char *sockdir = g_path_get_dirname(r.sock);
        g_assert_cmpint(stat(sockdir, &sb), ==, 0);
        g_assert_cmpuint(sb.st_mode & 0777, ==, 0700);
        g_assert_cmpuint(sb.st_uid, ==, r.dom.uid);
    }

    /* Idempotent: the running server is kept. */
    g_assert_cmpint(
        vgh_servers_start(&r.cfg, &r.dom, r.dom.uid, r.dom.gid, &err), ==, 0);
    again = rig_pid(&r);
    g_assert_cmpint(again, ==, pid);

    g_assert_cmpint(vgh_servers_stop(&r.cfg, &r.dom, &err), ==, 0);
    wait_gone(pid);
    assert_gone(&r, pid);
    g_assert_cmpint(vgh_servers_stop(&r.cfg, &r.dom, &err), ==, 0);

    log = g_strdup_printf("%s/vm1-vgpu.log", r.cfg.log_dir);
    g_assert_true(g_file_get_contents(log, &log_text, NULL, NULL));
    g_assert_nonnull(strstr(log_text, "listening on"));
    g_assert_nonnull(strstr(log_text, "final statistics"));
    g_assert_nonnull(strstr(log_text, "stopped vgpu-server"));
    rig_finish(&r);
}

/* server_prealloc = yes: the server gets --prealloc (its log says its
 * VRAM was preallocated). */
static void test_server_prealloc(void)
{
    g_autofree char *log = NULL;
    struct vg_error err = {0};
    struct rig r;
    pid_t pid;
    bool done = false;

    if (!rig_init(&r, NULL)) {
        return;
    }
    r.cfg.server_prealloc = true;
    g_assert_cmpint(
        vgh_servers_start(&r.cfg, &r.dom, r.dom.uid, r.dom.gid, &err), ==, 0);
    pid = rig_pid(&r);
    log = g_strdup_printf("%s/vm1-vgpu.log", r.cfg.log_dir);
    for (int i = 0; i < 1000 && !done; i++) {
        g_autofree char *text = NULL;

        g_assert_true(g_file_get_contents(log, &text, NULL, NULL));
        done = strstr(text, "VRAM preallocated: 1 MiB") != NULL;
        if (!done) {
            g_usleep(10000);
        }
    }
    g_assert_true(done);
    g_assert_cmpint(vgh_servers_stop(&r.cfg, &r.dom, &err), ==, 0);
    wait_gone(pid);
    assert_gone(&r, pid);
    rig_finish(&r);
}

/* postcopy_listen: the server gets --postcopy-listen with that address,
 * with and without --prealloc. */
#define LISTEN_ARGS                                                            \
    "--postcopy-listen\0"                                                      \
    "127.0.0.1"
static void test_server_postcopy_listen(void)
{
    struct vg_error err = {0};
    struct rig r;

    if (!rig_init(&r, NULL)) {
        return;
    }
    snprintf(r.cfg.postcopy_listen, sizeof(r.cfg.postcopy_listen), "127.0.0.1");
    for (int prealloc = 0; prealloc < 2; prealloc++) {
        g_autofree char *cmdline = NULL, *path = NULL;
        gsize len = 0;
        pid_t pid;

        r.cfg.server_prealloc = prealloc;
        g_assert_cmpint(
            vgh_servers_start(&r.cfg, &r.dom, r.dom.uid, r.dom.gid, &err), ==,
            0);
        pid = rig_pid(&r);
        path = g_strdup_printf("/proc/%d/cmdline", (int)pid);
        g_assert_true(g_file_get_contents(path, &cmdline, &len, NULL));
        g_assert_true(memmem(cmdline, len, LISTEN_ARGS, sizeof(LISTEN_ARGS)) !=
                      NULL);
        g_assert_cmpint(vgh_servers_stop(&r.cfg, &r.dom, &err), ==, 0);
        wait_gone(pid);
        assert_gone(&r, pid);
    }
    rig_finish(&r);
}

/* Two vGPUs whose sockets share a directory: a server each, and stopping
 * them removes both sockets, both records and the directory. */
static void test_server_two_vgpus(void)
{
    g_autofree char *sock1 = NULL, *state1 = NULL, *sockdir = NULL;
    g_autofree char *text = NULL;
    struct vg_error err = {0};
    struct rig r;
    pid_t pid0, pid1;

    if (!rig_init_n(&r, NULL, 2)) {
        return;
    }
    g_assert_cmpuint(r.dom.n_vgpus, ==, 2);
    sock1 = g_strdup_printf("%s/run/vm1/vgpu1.sock", r.dir);
    state1 = g_strdup_printf("%s/%s-1.state", r.cfg.state_dir, r.dom.uuid);
    sockdir = g_path_get_dirname(r.sock);
    g_assert_cmpint(
        vgh_servers_start(&r.cfg, &r.dom, r.dom.uid, r.dom.gid, &err), ==, 0);
    pid0 = rig_pid(&r);
    g_assert_true(g_file_get_contents(state1, &text, NULL, NULL));
    g_assert_true(g_str_has_prefix(text, "pid="));
    pid1 = (pid_t)atoi(text + 4);
    g_assert_cmpint(pid0, >, 1);
    g_assert_cmpint(pid1, >, 1);
    g_assert_cmpint(pid0, !=, pid1);
    g_assert_true(vgh_socket_accepts(r.sock));
    g_assert_true(vgh_socket_accepts(sock1));

    g_assert_cmpint(vgh_servers_stop(&r.cfg, &r.dom, &err), ==, 0);
    wait_gone(pid0);
    wait_gone(pid1);
    assert_gone(&r, pid0);
    g_assert_true(gone(pid1));
    g_assert_false(g_file_test(sock1, G_FILE_TEST_EXISTS));
    g_assert_false(g_file_test(state1, G_FILE_TEST_EXISTS));
    g_assert_false(g_file_test(sockdir, G_FILE_TEST_EXISTS));
    rig_finish(&r);
}

static void test_server_restart_after_kill(void)
{
    struct rig r;
    struct vg_error err = {0};
    pid_t pid, pid2;

    if (!rig_init(&r, NULL)) {
        return;
    }
    g_assert_cmpint(
        vgh_servers_start(&r.cfg, &r.dom, r.dom.uid, r.dom.gid, &err), ==, 0);
    pid = rig_pid(&r);
    /* The server dies behind the hook's back: its socket and record stay. */
    g_assert_cmpint(kill(pid, SIGKILL), ==, 0);
    wait_gone(pid);
    g_assert_false(vgh_socket_accepts(r.sock));
    g_assert_cmpint(
        vgh_servers_start(&r.cfg, &r.dom, r.dom.uid, r.dom.gid, &err), ==, 0);
    pid2 = rig_pid(&r);
    g_assert_cmpint(pid2, !=, pid);
    g_assert_true(vgh_socket_accepts(r.sock));
    g_assert_cmpint(vgh_servers_stop(&r.cfg, &r.dom, &err), ==, 0);
    wait_gone(pid2);
    assert_gone(&r, pid2);
    rig_finish(&r);
}

static void test_server_start_fails(void)
{
    struct rig r;
    struct vg_error err = {0};

    /* A "server" that exits at once: the start fails with its reason and
     * leaves nothing behind. */
    if (!rig_init(&r, "/bin/false")) {
        return;
    }
    g_assert_cmpint(
        vgh_servers_start(&r.cfg, &r.dom, r.dom.uid, r.dom.gid, &err), ==,
        -ECHILD);
    g_assert_nonnull(strstr(err.msg, "vGPU 0"));
    g_assert_nonnull(strstr(err.msg, "exited at start-up"));
    assert_gone(&r, 0);
    rig_finish(&r);

    /* A binary that cannot be executed. */
    if (!rig_init(&r, "/nonexistent/vgpu-server")) {
        return;
    }
    g_assert_cmpint(
        vgh_servers_start(&r.cfg, &r.dom, r.dom.uid, r.dom.gid, &err), ==,
        -ENOENT);
    g_assert_nonnull(strstr(err.msg, "cannot run"));
    assert_gone(&r, 0);
    rig_finish(&r);
}

static void test_server_foreign_socket(void)
{
    struct rig r;
    struct rig other;
    struct vg_error err = {0};
    pid_t pid;

    if (!rig_init(&r, NULL) || !rig_init(&other, NULL)) {
        return;
    }
    /* Another "domain" (other state dir) serves the same socket path. */
    g_free(other.sock);
    other.sock = g_strdup(r.sock);
    g_free(other.dom.vgpus[0].socket);
    other.dom.vgpus[0].socket = g_strdup(r.sock);
    g_assert_cmpint(
        vgh_servers_start(&other.cfg, &other.dom, r.dom.uid, r.dom.gid, &err),
        ==, 0);
    pid = rig_pid(&other);
    g_assert_cmpint(
        vgh_servers_start(&r.cfg, &r.dom, r.dom.uid, r.dom.gid, &err), ==,
        -EADDRINUSE);
    g_assert_nonnull(strstr(err.msg, "not started by this hook"));
    /* The foreign server is untouched by the failed start. */
    g_assert_true(vgh_socket_accepts(r.sock));
    g_assert_false(gone(pid));
    g_assert_cmpint(vgh_servers_stop(&other.cfg, &other.dom, &err), ==, 0);
    wait_gone(pid);
    g_assert_false(g_file_test(r.sock, G_FILE_TEST_EXISTS));
    rig_finish(&other);
    rig_finish(&r);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/hook/domain/json-device", test_domain_json_device);
    g_test_add_func("/hook/domain/defaults-and-order",
                    test_domain_defaults_and_order);
    g_test_add_func("/hook/domain/without-vgpus", test_domain_without_vgpus);
    g_test_add_func("/hook/domain/errors", test_domain_errors);
    g_test_add_func("/hook/domain/not-xml", test_domain_not_xml);
    g_test_add_func("/hook/domain/dac-label", test_dac_label);
    g_test_add_func("/hook/config", test_config);
    g_test_add_func("/hook/phases", test_phases);
    g_test_add_func("/hook/check-host", test_check_host);
    g_test_add_func("/hook/server/start-stop", test_server_start_stop);
    g_test_add_func("/hook/server/two-vgpus", test_server_two_vgpus);
    g_test_add_func("/hook/server/prealloc", test_server_prealloc);
    g_test_add_func("/hook/server/postcopy-listen",
                    test_server_postcopy_listen);
    g_test_add_func("/hook/server/restart-after-kill",
                    test_server_restart_after_kill);
    g_test_add_func("/hook/server/start-fails", test_server_start_fails);
    g_test_add_func("/hook/server/foreign-socket", test_server_foreign_socket);
    return g_test_run();
}
