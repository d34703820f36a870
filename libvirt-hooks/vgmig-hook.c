/*
 * vgmig-hook -- libvirt's qemu hook for vgmig vGPUs, installed as
 * /etc/libvirt/hooks/qemu.  See usage() and docs/operations.md.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <glib.h>

#include "common/log.h"
#include "hook-config.h"
#include "hook-domain.h"
#include "hook-policy.h"
#include "hook-server.h"

static void usage(FILE *out)
{
    struct vgh_config d;

    vgh_config_defaults(&d);
    fprintf(
        out,
        "Usage: /etc/libvirt/hooks/qemu DOMAIN OPERATION SUB-OPERATION "
        "EXTRA < DOMAIN-XML\n"
        "\n"
        "libvirt's qemu hook for vgmig vGPUs.  libvirtd runs it at every "
        "step of a\n"
        "domain's life with the domain XML on standard input.  A domain "
        "asks for\n"
        "vGPUs in its <metadata>:\n"
        "  <vgmig:vgpus xmlns:vgmig=\"" VGH_XMLNS "\">\n"
        "    <vgmig:vgpu device=\"vgpu0\" size=\"256M\" page-size=\"64K\" "
        "backend=\"cpu\"/>\n"
        "  </vgmig:vgpus>\n"
        "(size: VRAM, a power of two; page-size: 4K to 2M, default 64K;\n"
        "backend: default cpu; device: the id of its vfio-user-pci device; "
        "managed:\n"
        "yes (default) or no, when the operator runs the server, e.g. with\n"
        "vgpu-server@.service) and attaches each with a vfio-user-pci "
        "device in\n"
        "<qemu:commandline>, whose UNIX socket path the hook serves.\n"
        "\n"
        "Phases:\n"
        "  migrate begin   on a migration's destination, before anything "
        "starts:\n"
        "                  check that this host can provide the vGPUs "
        "(backend,\n"
        "                  max_vram, memory, the server binary); a "
        "refusal fails\n"
        "                  the migration with this hook's message and the "
        "source\n"
        "                  keeps running\n"
        "  prepare begin   check the same, then start one vgpu-server per "
        "managed\n"
        "                  vGPU as the QEMU user (socket mode 0600 in a "
        "directory\n"
        "                  of that user), wait until its socket accepts, "
        "fail the\n"
        "                  start with the reason otherwise\n"
        "  stopped end, release end\n"
        "                  stop the servers (SIGTERM, then SIGKILL), "
        "remove their\n"
        "                  sockets, statistics and records\n"
        "Every other phase does nothing.  All phases are idempotent; "
        "nothing is\n"
        "printed on standard output, so the domain XML is never changed.\n"
        "\n"
        "Files:\n"
        "  " VGH_CONFIG_PATH "    the host's settings (server, backends,\n"
        "                  max_vram, reserve_memory, socket_root, "
        "state_dir,\n"
        "                  log_dir, qemu_user, qemu_group, start_timeout,\n"
        "                  stop_timeout, server_log_level, server_prealloc,\n"
        "                  postcopy_listen, postcopy_timeout); a missing file "
        "means\n"
        "                  the defaults; $VGMIG_HOOK_CONF names another "
        "file\n"
        "  STATE_DIR/UUID-N.state  the servers this hook started "
        "(/run/vgmig)\n"
        "  LOG_DIR/DOMAIN-vgpu.log the servers' output and the hook's "
        "notes\n"
        "                  (/var/log/libvirt/qemu)\n"
        "\n"
        "Options:\n"
        "  -h, --help      show this help and exit\n"
        "\n"
        "Exit status: 0 on success or nothing to do, 1 when the host "
        "refuses or a\n"
        "server cannot be started or stopped, 2 on usage errors.\n"
        "\n"
        "Defaults: server = %s, state_dir = %s, log_dir = %s.\n",
        d.server, d.state_dir, d.log_dir);
}

static char *read_stdin(size_t *len)
{
    GString *buf = g_string_new(NULL);
    char chunk[65536];
    ssize_t n;

    while ((n = read(0, chunk, sizeof(chunk))) != 0) {
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            break;
        }
        g_string_append_len(buf, chunk, n);
    }
    *len = buf->len;
    return g_string_free(buf, FALSE);
}

static bool server_ok(const char *path)
{
    struct stat sb;

    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode) &&
           access(path, X_OK) == 0;
}

int main(int argc, char **argv)
{
    const char *conf_path = getenv("VGMIG_HOOK_CONF");
    enum vgh_action action;
    struct vgh_config cfg;
    struct vgh_domain dom;
    struct vgh_host host;
    struct vg_error err = {0};
    g_autofree char *xml = NULL;
    char hostname[256] = "?";
    size_t len = 0;
    uid_t uid;
    gid_t gid;
    int ret;

    vg_log_set_prog("vgmig-hook");
    if (argc >= 2 &&
        (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        usage(stdout);
        return 0;
    }
    if (argc < 4) {
        usage(stderr);
        return 2;
    }
    /* Read all of the XML even when there is nothing to do, so libvirt
     * never writes into a closed pipe. */
    xml = read_stdin(&len);
    action = vgh_phase_action(argv[2], argv[3]);
    if (action == VGH_NONE) {
        return 0;
    }
    ret = vgh_config_load(
        conf_path && conf_path[0] ? conf_path : VGH_CONFIG_PATH, &cfg, &err);
    if (ret < 0) {
        vg_err("%s", err.msg);
        return 1;
    }
    ret = vgh_domain_parse(xml, len, &dom, &err);
    if (ret < 0 && !(action == VGH_STOP && dom.name)) {
        vg_err("%s", err.msg);
        vgh_domain_clear(&dom);
        return 1;
    }
    if (ret < 0) {
        /* Stop what was recorded for the domain even if its metadata is
         * unreadable now. */
        vg_warn("%s; stopping what was started for it", err.msg);
        vg_error_clear(&err);
    }
    if (dom.n_vgpus == 0 && action != VGH_STOP) {
        vgh_domain_clear(&dom);
        return 0;
    }
    gethostname(hostname, sizeof(hostname) - 1);
    host.hostname = hostname;
    host.mem_available = vgh_mem_available();
    host.server_ok = server_ok(cfg.server);

    switch (action) {
    case VGH_CHECK:
        ret = vgh_check_host(&cfg, &dom, &host, &err);
        if (ret == 0) {
            vgh_note(&cfg, &dom, "host %s can provide the %u vGPU(s) of '%s'",
                     hostname, dom.n_vgpus, dom.name);
        }
        break;
    case VGH_START:
        ret = vgh_check_host(&cfg, &dom, &host, &err);
        if (ret == 0) {
            ret = vgh_server_owner(&cfg, &dom, &uid, &gid, &err);
        }
        if (ret == 0) {
            ret = vgh_servers_start(&cfg, &dom, uid, gid, &err);
        }
        break;
    case VGH_STOP:
        ret = vgh_servers_stop(&cfg, &dom, &err);
        break;
    case VGH_NONE:
        break;
    }
    if (ret < 0) {
        vgh_note(&cfg, &dom, "%s %s failed: %s", argv[2], argv[3], err.msg);
        vg_err("%s", err.msg);
    }
    vgh_domain_clear(&dom);
    return ret < 0 ? 1 : 0;
}
