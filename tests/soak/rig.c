#include "rig.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/size.h"
#include "qclient/io.h"
#include "qclient/qmp.h"

#define RING_ENTRIES       256u
#define DEFAULT_HOLD_BW    (32ll << 20)
#define RELEASE_DOWNTIME   2000
#define RELEASE_BW         (10ll << 30)
#define RELEASE_SWITCHOVER (1ll << 30)
#define RUNSTATE_WAIT_MS   20000
#define SETTLE_MS          5000
#define STATS_WAIT_MS      10000
#define STOP_MS            10000
/* A restore's destination in phase restore reads its file this slowly,
 * so that the fault lands while pages are still in the file. */
#define RESTORE_SLOW "postcopy-delay:50"

static const char *const fault_names[FK_COUNT] = {
    "none",
    "cancel",
    "kill-dst-qemu",
    "kill-dst-server",
    "kill-src-server",
    "drop-link",
    "slow-link",
    "corrupt-stream",
};
static const char *const phase_names[PH_COUNT + 1] = {
    "setup", "pre-copy", "stop-copy", "resume", "post-copy", "restore", "none",
};

const char *fault_name(enum fault_kind k)
{
    return k < FK_COUNT ? fault_names[k] : "?";
}

const char *phase_name(enum mig_phase p)
{
    return p <= PH_COUNT ? phase_names[p] : "?";
}

bool rig_fault_applies(const struct rig *r, enum fault_kind k, enum mig_phase p,
                       const char **why)
{
    const char *w = NULL;

    if (p == PH_RESTORE && (k == FK_DROP || k == FK_SLOW)) {
        w = "a restore reads a local file: no link to cut or slow";
    } else if (p == PH_RESTORE && k == FK_CANCEL) {
        w = "the save has completed, and a restore from a file has nothing "
            "to cancel";
    } else if (p == PH_RESTORE && k == FK_CORRUPT) {
        w = "a damaged save file is /mig/restore/damaged-file and "
            "/stream-file/*";
    } else if (p == PH_POSTCOPY && k == FK_CORRUPT) {
        w = "the stream ends at a post-copy switchover; the pages that "
            "follow come over the page channel, each run checked by its hash "
            "(tests/unit/test-postcopy)";
    } else if (p == PH_POSTCOPY && k == FK_CANCEL) {
        w = "a post-copy cannot be undone: the destination has the VM";
    } else if (p == PH_POSTCOPY && k != FK_DROP && k != FK_SLOW) {
        w = "after a post-copy switchover the destination runs the VM with "
            "pages only the source has: losing either side loses the VM, as "
            "for RAM (docs/postcopy.md; /mig/postcopy/source-lost)";
    }
    switch (w ? FK_NONE : k) {
    case FK_CANCEL:
        if (p == PH_RESUME) {
            w = "the source has completed: migrate_cancel has nothing left "
                "to cancel";
        }
        break;
    case FK_KILL_SRC_SERVER:
        if (p != PH_RESUME && p != PH_RESTORE) {
            w = "before the stream is complete the source vgpu-server holds "
                "the only copy of VRAM and device state: killing it loses "
                "the vGPU by design";
        }
        break;
    case FK_DROP:
    case FK_SLOW:
        if (!r->nf.enabled) {
            w = r->nf.why[0] ? r->nf.why : "network namespaces not set up";
        } else if (p == PH_RESUME) {
            w = "the migration stream has ended before resume: the channel "
                "carries nothing left to drop or slow";
        }
        break;
    default:
        break;
    }
    if (why) {
        *why = w;
    }
    return w == NULL;
}

/* ------------------------------------------------------------ sides -- */

static void side_files_remove(struct rig *r, struct rig_side *sd)
{
    for (unsigned i = 0; i < G_N_ELEMENTS(sd->names); i++) {
        if (sd->names[i]) {
            g_autofree char *log =
                g_strdup_printf("%s/%s.log", r->dir, sd->names[i]);
            unlink(log);
        }
    }
    for (unsigned d = 0; d < RIG_MAX_VGPUS; d++) {
        if (sd->stats[d]) {
            unlink(sd->stats[d]);
        }
    }
}

/* Stop side @s (whatever is left of it) and forget it; a SIGKILLed
 * server's stale socket is removed, as a management layer would. */
static void side_stop(struct rig *r, int s, bool remove_files)
{
    struct rig_side *sd = &r->side[s];

    vg_qemu_free(sd->qemu);
    for (unsigned d = 0; d < RIG_MAX_VGPUS; d++) {
        g_autofree char *sock =
            sd->srv[d] ? g_strdup(sd->srv[d]->socket) : NULL;

        vg_server_free(sd->srv[d]);
        if (sock && sd->srv_killed[d]) {
            unlink(sock);
        }
    }
    if (remove_files && !r->o.keep_logs) {
        side_files_remove(r, sd);
    }
    for (unsigned d = 0; d < RIG_MAX_VGPUS; d++) {
        g_free(sd->stats[d]);
    }
    for (unsigned i = 0; i < G_N_ELEMENTS(sd->names); i++) {
        g_free(sd->names[i]);
    }
    memset(sd, 0, sizeof(*sd));
}

/* Start the server of vGPU @d of side @s, the @n-th side started; the
 * faulted vGPU's gets the planned --fault. */
static int server_start(struct rig *r, int s, unsigned n, unsigned d,
                        struct vg_error *err)
{
    struct rig_side *sd = &r->side[s];
    const char *extra[5] = {NULL, NULL, NULL, NULL, NULL};
    unsigned n_extra = 0;
    struct vg_server_opts so = {
        .dir = r->dir,
        .vram = r->o.vram,
        .page_size = r->o.page,
        .log_level = r->o.srv_log ? r->o.srv_log : "info",
        .extra_args = extra,
    };

    sd->names[1 + d] = d ? g_strdup_printf("srv%c%u-%u", 'a' + s, n, d)
                         : g_strdup_printf("srv%c%u", 'a' + s, n);
    sd->stats[d] =
        g_strdup_printf("%s/%s-stats.json", r->dir, sd->names[1 + d]);
    so.name = sd->names[1 + d];
    so.stats_file = sd->stats[d];
    if (r->next_fault && d == r->o.fault_vgpu) {
        extra[n_extra++] = "--fault";
        extra[n_extra++] = r->next_fault;
        sd->corrupting = true;
        sd->corrupt_offset = r->next_offset;
    }
    if (r->slow_next) {
        extra[n_extra++] = "--fault";
        extra[n_extra++] = RESTORE_SLOW;
    }
    return vg_server_start(&so, &sd->srv[d], err);
}

/* Start servers and QEMU of side @s; a destination if @incoming. */
static int side_start(struct rig *r, int s, bool incoming, struct vg_error *err)
{
    static const char *const dst_args[] = {"-S", NULL};
    struct rig_side *sd = &r->side[s];
    const char *more[RIG_MAX_VGPUS] = {NULL}; /* vgpu1.., NULL-terminated */
    unsigned n = ++r->started;
    struct vg_qemu_opts qo = {
        .dir = r->dir,
        .ram_mib = r->o.ram_mib,
        .incoming = incoming ? "defer" : NULL,
        .extra_args = incoming ? dst_args : NULL,
        .vgpu_socks = more,
    };
    int rc = 0;

    memset(sd, 0, sizeof(*sd));
    for (unsigned d = 0; rc == 0 && d < r->nvgpu; d++) {
        rc = server_start(r, s, n, d, err);
        if (rc == 0 && d > 0) {
            more[d - 1] = sd->srv[d]->socket;
        }
    }
    g_free(r->next_fault);
    r->next_fault = NULL;
    r->slow_next = false;
    if (rc < 0) {
        return rc;
    }
    sd->names[0] = g_strdup_printf("qemu%c%u", 'a' + s, n);
    qo.name = sd->names[0];
    qo.vgpu_sock = sd->srv[0]->socket;
    rc = nf_enter(&r->nf, s, err);
    if (rc == 0) {
        rc = vg_qemu_start(&qo, &sd->qemu, err);
        if (nf_leave(&r->nf, rc < 0 ? NULL : err) < 0 && rc == 0) {
            rc = -EIO;
        }
    }
    if (rc == 0) {
        rc = vg_mig_set_capability(sd->qemu->qmp, "return-path", true, err);
    }
    return rc;
}

/* ------------------------------------------------------------ leaks -- */

static unsigned self_fds(void)
{
    struct vg_fd_census c;

    return vg_fd_census(getpid(), &c, NULL) == 0 ? c.fds : 0;
}

static void leak(struct leg_result *res, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void leak(struct leg_result *res, const char *fmt, ...)
{
    g_autofree char *msg = NULL;
    va_list ap;

    va_start(ap, fmt);
    msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    vg_err("LEAK: %s", msg);
    if (!res->leaks) {
        g_strlcpy(res->leak_detail, msg, sizeof(res->leak_detail));
    }
    res->leaks++;
}

static bool census_eq(const struct vg_fd_census *a,
                      const struct vg_fd_census *b)
{
    return a->fds == b->fds && a->memfds == b->memfds &&
           a->sockets == b->sockets;
}

/* The census of @pid once it equals @want (up to SETTLE_MS: a failed
 * migration's channel is closed by a bottom half), else the last one. */
static void census_settle(pid_t pid, const struct vg_fd_census *want,
                          struct vg_fd_census *got)
{
    int64_t deadline = vg_now_ms() + SETTLE_MS;

    do {
        if (vg_fd_census(pid, got, NULL) < 0 || census_eq(got, want)) {
            return;
        }
        g_usleep(50000);
    } while (vg_now_ms() < deadline);
}

static void check_fds(const char *who, pid_t pid,
                      const struct vg_fd_census *want, struct vg_fd_census *got,
                      struct leg_result *res)
{
    census_settle(pid, want, got);
    if (!census_eq(got, want)) {
        leak(res,
             "%s (pid %d): %u fds (%u memfds, %u sockets), expected %u "
             "(%u memfds, %u sockets)",
             who, (int)pid, got->fds, got->memfds, got->sockets, want->fds,
             want->memfds, want->sockets);
    }
}

/* Whether @pid is one of side @sd's servers. */
static bool is_server(const struct rig *r, const struct rig_side *sd, pid_t pid)
{
    for (unsigned d = 0; d < r->nvgpu; d++) {
        if (sd->srv[d] && sd->srv[d]->proc.pid == pid) {
            return true;
        }
    }
    return false;
}

/* Whether @path is the socket of one of side @sd's servers. */
static bool is_server_socket(const struct rig *r, const struct rig_side *sd,
                             const char *path)
{
    for (unsigned d = 0; d < r->nvgpu; d++) {
        if (sd->srv[d] && strcmp(path, sd->srv[d]->socket) == 0) {
            return true;
        }
    }
    return false;
}

/* The fds of the running side's servers and QEMU against those of the
 * same processes before (@same_procs) or of the first migrated-in side. */
static void check_side_fds(struct rig *r, bool same_procs,
                           struct leg_result *res)
{
    struct rig_side *sd = &r->side[r->cur];
    struct vg_fd_census srv[RIG_MAX_VGPUS], qemu;

    for (unsigned d = 0; d < r->nvgpu; d++) {
        pid_t pid = sd->srv[d]->proc.pid;

        if (same_procs) {
            check_fds("vgpu-server", pid, &sd->srv_fds[d], &srv[d], res);
        } else if (r->have_ref) {
            check_fds("migrated-in vgpu-server", pid, &r->ref_srv[d], &srv[d],
                      res);
        } else {
            vg_fd_census(pid, &srv[d], NULL);
            r->ref_srv[d] = srv[d];
        }
        sd->srv_fds[d] = srv[d];
    }
    if (same_procs) {
        check_fds("QEMU", sd->qemu->proc.pid, &sd->qemu_fds, &qemu, res);
    } else if (r->have_ref) {
        check_fds("migrated-in QEMU", sd->qemu->proc.pid, &r->ref_qemu, &qemu,
                  res);
    } else {
        vg_fd_census(sd->qemu->proc.pid, &qemu, NULL);
        r->ref_qemu = qemu;
        r->have_ref = true;
    }
    sd->qemu_fds = qemu;
}

/* After a leg: only the running side's processes are our children, the
 * run directory has only its servers' sockets, fds are as before. */
static void check_leaks(struct rig *r, bool same_procs, struct leg_result *res)
{
    struct rig_side *sd = &r->side[r->cur];
    pid_t pids[16];
    int n = vg_child_pids(pids, G_N_ELEMENTS(pids), NULL);
    DIR *d;
    struct dirent *de;
    int64_t deadline = vg_now_ms() + SETTLE_MS;
    unsigned fds;

    for (int i = 0; i < MIN(n, (int)G_N_ELEMENTS(pids)); i++) {
        if (!is_server(r, sd, pids[i]) && pids[i] != sd->qemu->proc.pid) {
            g_autofree char *comm = NULL;
            g_autofree char *path = g_strdup_printf("/proc/%d/comm", pids[i]);

            g_file_get_contents(path, &comm, NULL, NULL);
            leak(res, "process %d (%s) left over", (int)pids[i],
                 comm ? g_strstrip(comm) : "?");
        }
    }
    d = opendir(r->dir);
    while (d && (de = readdir(d))) {
        g_autofree char *path = g_build_filename(r->dir, de->d_name, NULL);

        if (g_str_has_suffix(de->d_name, ".sock") &&
            !is_server_socket(r, sd, path)) {
            leak(res, "socket file %s left over", de->d_name);
            unlink(path);
        }
    }
    if (d) {
        closedir(d);
    }
    check_side_fds(r, same_procs, res);
    while ((fds = self_fds()) != r->self_fds && vg_now_ms() < deadline) {
        g_usleep(50000);
    }
    if (fds != r->self_fds) {
        leak(res, "this process has %u fds, %u before", fds, r->self_fds);
        r->self_fds = fds;
    }
}

/* --------------------------------------------------------------- VM -- */

/* Open vGPU @d of the VM booted on side @s, set up its model. */
static int boot_vgpu(struct rig *r, int s, unsigned d,
                     struct vg_pci_windows *win, struct vg_error *err)
{
    struct vg_vgpu *gpu = &r->gpu[d];
    int rc = vg_vgpu_open_nth(r->side[s].qemu->qt, &r->ram, d, win, gpu, err);

    if (rc == 0) {
        rc = vg_vgpu_ring_init(gpu, &r->ram, RING_ENTRIES, err);
    }
    if (rc == 0) {
        rc = vg_vgpu_wr(gpu, VGPU_REG_IRQ_MASK, VGPU_IRQ_FENCE | VGPU_IRQ_ERROR,
                        err);
    }
    if (rc == 0) {
        rc = model_setup(&r->model[d], gpu, &r->ram, err);
    }
    if (rc == 0) {
        rc = model_verify(&r->model[d], gpu, false, err);
    }
    if (rc < 0) {
        vg_error_prefix(err, "vGPU %u", d);
    }
    return rc;
}

static int boot(struct rig *r, int s, uint64_t seed, struct vg_error *err)
{
    struct vg_pci_windows win = VG_PCI_WINDOWS_INIT;
    int rc = side_start(r, s, false, err);

    r->cur = s;
    r->generation++;
    for (unsigned d = 0; d < RIG_MAX_VGPUS; d++) {
        model_destroy(&r->model[d]);
    }
    for (unsigned d = 0; d < r->nvgpu; d++) {
        model_init(&r->model[d], r->vram_size, seed + d);
    }
    memset(r->gpu, 0, sizeof(r->gpu));
    if (rc < 0) {
        return rc;
    }
    vg_galloc_init(&r->ram, 16ull << 20, (uint64_t)r->o.ram_mib << 20);
    r->ballast = 0;
    for (unsigned d = 0; rc == 0 && d < r->nvgpu; d++) {
        rc = boot_vgpu(r, s, d, &win, err);
    }
    if (rc == 0) {
        for (unsigned d = 0; d < r->nvgpu; d++) {
            vg_fd_census(r->side[s].srv[d]->proc.pid, &r->side[s].srv_fds[d],
                         NULL);
        }
        vg_fd_census(r->side[s].qemu->proc.pid, &r->side[s].qemu_fds, NULL);
        r->self_fds = self_fds();
    }
    if (rc < 0) {
        vg_error_prefix(err, "boot VM %u on side %c", r->generation, 'A' + s);
    }
    return rc;
}

int rig_open(struct rig *r, const struct rig_opts *o, struct vg_error *err)
{
    struct vg_error e2;
    int rc;

    memset(r, 0, sizeof(*r));
    r->o = *o;
    r->o.leg_timeout_ms = o->leg_timeout_ms ? o->leg_timeout_ms : 120000;
    r->nvgpu = o->vgpus ? o->vgpus : 1;
    r->nf.ns_fd[0] = r->nf.ns_fd[1] = r->nf.root_fd = -1;
    if (r->nvgpu > RIG_MAX_VGPUS || o->fault_vgpu >= r->nvgpu) {
        return vg_error_set(err, EINVAL,
                            "rig: %u vGPUs (at most %u), faults on vGPU %u",
                            r->nvgpu, RIG_MAX_VGPUS, o->fault_vgpu);
    }
    rc = vg_parse_size(o->vram, 4u << 20, 1ull << 40, &r->vram_size, err);
    if (rc == 0) {
        rc = vg_parse_size(o->page, 4096, 2u << 20, &r->page_size, err);
    }
    if (rc == 0) {
        rc = vg_tmpdir_create(o->tag, &r->dir, err);
    }
    if (rc == 0 && o->netns) {
        rc = nf_setup(&r->nf, o->tag[0] ? (char[]){o->tag[0], 0} : "", err);
    } else if (rc == 0) {
        g_strlcpy(r->nf.why, "link faults not requested (no namespaces)",
                  sizeof(r->nf.why));
    }
    if (rc == 0) {
        vg_info("run directory %s", r->dir);
        rc = boot(r, 0, o->seed, err);
    }
    if (rc < 0 && r->dir) {
        vg_error_prefix(err, "rig");
        e2 = *err;
        rig_close(r, true);
        *err = e2;
    }
    return rc;
}

void rig_close(struct rig *r, bool keep_dir)
{
    side_stop(r, 0, false);
    side_stop(r, 1, false);
    nf_teardown(&r->nf);
    for (unsigned d = 0; d < RIG_MAX_VGPUS; d++) {
        model_destroy(&r->model[d]);
    }
    if (r->dir && !keep_dir) {
        vg_tmpdir_remove(r->dir, NULL);
    }
    g_free(r->dir);
    g_free(r->next_fault);
    memset(r, 0, sizeof(*r));
}

void rig_plan_corrupt(struct rig *r, uint64_t offset)
{
    g_free(r->next_fault);
    /* @1: only the server's first outgoing stream, the planned leg's */
    r->next_fault =
        g_strdup_printf("corrupt-stream:%" G_GUINT64_FORMAT "@1", offset);
    r->next_offset = offset;
}

bool rig_source_corrupts(const struct rig *r)
{
    return r->side[r->cur].corrupting;
}

int rig_reboot(struct rig *r, uint64_t seed, unsigned vgpus,
               struct vg_error *err)
{
    int s = r->cur;

    if (vgpus > RIG_MAX_VGPUS) {
        return vg_error_set(err, EINVAL, "rig: %u vGPUs (at most %u)", vgpus,
                            RIG_MAX_VGPUS);
    }
    side_stop(r, s, true);
    if (vgpus && vgpus != r->nvgpu) {
        r->nvgpu = vgpus;
        r->o.fault_vgpu = vgpus - 1;
        r->have_ref = false; /* other devices: other fds */
    }
    return boot(r, !s, seed, err);
}

/* A server writes its statistics file after the state changes of a
 * switchover once it is idle, 50 ms later at the latest (vgpu-server
 * --help): a reader that needs the settled state waits this long. */
#define STATS_SETTLE_MS  100
#define CHECKSUM_WAIT_MS 3000

/* A saving session's end: the source's checksums are written at once
 * with its last counters; a new session's start clears them. */
static bool has_checksum(const struct vg_stats *st, void *opaque)
{
    return st->vram_checksum[0] != 0;
}

int rig_last_stream(struct rig *r, int side, int64_t *pre, int64_t *stop,
                    struct vg_error *err)
{
    const char *path = r->side[side].stats[r->o.fault_vgpu];
    struct vg_stats st;
    int rc = vg_stats_wait(path, has_checksum, NULL, CHECKSUM_WAIT_MS, &st,
                           NULL) == 0
                 ? 0
                 : vg_stats_read(path, &st, err);

    if (rc == 0) {
        rc = vg_stats_int(&st, "precopy_bytes", pre, err);
    }
    if (rc == 0) {
        rc = vg_stats_int(&st, "stopcopy_bytes", stop, err);
    }
    vg_stats_clear(&st);
    return rc;
}

/* -------------------------------------------------------------- leg -- */

struct leg {
    struct rig *r;
    const struct leg_plan *p;
    struct leg_result *res;
    int s, d;
    struct vg_qmp *sq; /* source QMP */
    int64_t t0, t_data, t_drop;
    int64_t t_postcopy; /* first seen postcopy-active */
    bool postcopy;      /* switch over in post-copy when released */
    bool via_file;      /* through a save file */
    bool injected, released, continued, link_down;
    bool raced, raced_cpu; /* a workload step raced the stop (CPU writes) */
};

static enum mig_phase phase_of(const char *status)
{
    if (!strcmp(status, "setup")) {
        return PH_SETUP;
    }
    if (!strcmp(status, "active")) {
        return PH_PRECOPY;
    }
    if (!strcmp(status, "completed")) {
        return PH_RESUME;
    }
    if (!strcmp(status, "pre-switchover") || !strcmp(status, "device")) {
        return PH_STOPCOPY;
    }
    if (g_str_has_prefix(status, "postcopy")) {
        return PH_POSTCOPY;
    }
    if (!strcmp(status, "restore")) {
        return PH_RESTORE;
    }
    return PH_COUNT;
}

static int set_params(struct vg_qmp *qmp, int64_t downtime, int64_t bw,
                      int64_t switchover, struct vg_error *err)
{
    int rc = vg_mig_set_parameter(qmp, "downtime-limit", downtime, err);

    if (rc == 0) {
        rc = vg_mig_set_parameter(qmp, "max-bandwidth", bw, err);
    }
    if (rc == 0) {
        rc = vg_mig_set_parameter(qmp, "avail-switchover-bandwidth", switchover,
                                  err);
    }
    return rc;
}

/* Inject the fault now; @status is the migration's status. */
static int inject(struct leg *l, const char *status, struct vg_error *err)
{
    struct rig *r = l->r;
    const struct leg_plan *p = l->p;
    int rc = 0;

    l->injected = true;
    if (p->kind != FK_CORRUPT) {
        l->res->phase_seen = phase_of(status);
    }
    vg_info("leg: inject %s at status %s", fault_name(p->kind), status);
    switch (p->kind) {
    case FK_CANCEL:
        rc = vg_mig_cancel(l->sq, err);
        break;
    case FK_KILL_DST_QEMU:
        rc = vg_qemu_kill9(r->side[l->d].qemu, err);
        break;
    case FK_KILL_DST_SERVER:
        r->side[l->d].srv_killed[r->o.fault_vgpu] = true;
        rc = vg_proc_kill(&r->side[l->d].srv[r->o.fault_vgpu]->proc, SIGKILL,
                          STOP_MS, err);
        break;
    case FK_KILL_SRC_SERVER:
        r->side[l->s].srv_killed[r->o.fault_vgpu] = true;
        rc = vg_proc_kill(&r->side[l->s].srv[r->o.fault_vgpu]->proc, SIGKILL,
                          STOP_MS, err);
        break;
    case FK_DROP:
        rc = nf_link(&r->nf, l->d, false, err);
        l->t_drop = vg_now_ms();
        l->link_down = true;
        break;
    case FK_SLOW:
        rc = nf_slow(&r->nf, p->slow_kbit ? p->slow_kbit : 100000,
                     p->slow_delay_ms, err);
        break;
    default:
        break;
    }
    return rc;
}

typedef int model_step_fn(struct model *m, struct vg_vgpu *gpu,
                          enum model_mix mix, struct vg_error *err);

/* One step of a batch on every vGPU in @idle; the steps are settled if
 * the VM still runs after them, else they raced its stop (model.h). */
static int work_step(struct leg *l, const bool *idle, enum model_mix mix,
                     model_step_fn *fn, struct vg_error *err)
{
    struct rig *r = l->r;
    char state[VG_MIG_STATUS_MAX];
    bool any = false;
    int rc = 0;

    for (unsigned d = 0; rc == 0 && d < r->nvgpu; d++) {
        if (idle[d]) {
            rc = fn(&r->model[d], &r->gpu[d], mix, err);
            any = any || r->model[d].unsettled;
        }
    }
    if (rc == 0 && any) {
        rc = vg_mig_runstate(l->sq, state, sizeof(state), err);
    }
    if (rc < 0 || !any) {
        return rc;
    }
    if (strcmp(state, "running") != 0) {
        vg_info("leg: the workload's last %s raced the VM's stop (now '%s')",
                fn == model_cpu_writes ? "CPU writes" : "commands", state);
        l->raced = true;
        l->raced_cpu = l->raced_cpu || fn == model_cpu_writes;
        return 0;
    }
    for (unsigned d = 0; d < r->nvgpu; d++) {
        model_settle(&r->model[d]);
    }
    return 0;
}

/* A batch of @mix on every idle vGPU (the others are still busy with the
 * last one): CPU writes, then commands unless the writes raced the stop. */
static int work(struct leg *l, enum model_mix mix, struct vg_error *err)
{
    struct rig *r = l->r;
    bool idle[RIG_MAX_VGPUS] = {false};
    int rc = 0;

    for (unsigned d = 0; rc == 0 && d < r->nvgpu; d++) {
        uint32_t status = 0;

        rc = vg_vgpu_rd(&r->gpu[d], VGPU_REG_STATUS, &status, err);
        idle[d] = !(status & VGPU_STATUS_BUSY);
    }
    if (rc == 0) {
        rc = work_step(l, idle, mix, model_cpu_writes, err);
    }
    if (rc == 0 && !l->raced) {
        rc = work_step(l, idle, mix, model_submit, err);
    }
    return rc;
}

/* How fast QEMU may send RAM in post-copy before a fault there: slow
 * enough that the fault lands while it is still "postcopy-active". */
#define POSTCOPY_HOLD_BW   (2ll << 20)
#define POSTCOPY_SETTLE_MS 300
#define POSTCOPY_NOTICE_MS 3000
/* Guest RAM a post-copy leg with a fault dirties first: QEMU's post-copy
 * of RAM lasts while it goes at POSTCOPY_HOLD_BW (16 s), the window for
 * the fault.  (Without it, RAM is clean at the switchover and QEMU is at
 * once in its completion, where a cut fails the migration and restarts
 * the source: QEMU pauses a post-copy only while RAM is left to send.) */
#define BALLAST_BYTES (32ull << 20)

/* Dirty the ballast (allocated the first time) with a new byte. */
static int dirty_ballast(struct leg *l, struct vg_error *err)
{
    struct rig *r = l->r;
    int rc = 0;

    if (!r->ballast) {
        rc = vg_galloc_alloc(&r->ram, BALLAST_BYTES, 1 << 20, &r->ballast, err);
    }
    if (rc == 0) {
        rc = vg_qtest_memset(r->side[l->s].qemu->qt, r->ballast,
                             (uint8_t)(0x40 + r->started), BALLAST_BYTES, err);
    }
    return rc;
}

/* The source says postcopy-active from the moment it starts sending the
 * switchover's package (the device state among it): a fault then fails
 * the migration and the source runs on.  The destination runs the VM
 * once the package is loaded and it says postcopy-active too; a fault
 * lands in post-copy proper a moment after that. */
static bool postcopy_running(struct leg *l, int64_t now)
{
    struct vg_mig_info di = {0};

    if (!l->t_postcopy) {
        l->t_postcopy = now;
    }
    return now >= l->t_postcopy + POSTCOPY_SETTLE_MS &&
           vg_mig_query(l->r->side[l->d].qemu->qmp, &di, NULL) == 0 &&
           !strcmp(di.status, "postcopy-active");
}

/* Wait up to @ms for @qmp's migration to be postcopy-paused; 1 if it
 * is not by then. */
static int wait_paused(struct vg_qmp *qmp, int64_t ms, struct vg_error *err)
{
    struct vg_mig_info i = {0};
    int64_t deadline = vg_now_ms() + ms;
    int rc = 0;

    while (rc == 0 && strcmp(i.status, "postcopy-paused") != 0) {
        rc = vg_mig_query(qmp, &i, err);
        if (rc == 0 && strcmp(i.status, "postcopy-paused") != 0) {
            if (vg_now_ms() > deadline) {
                return 1;
            }
            g_usleep(VG_MIG_POLL_INTERVAL_MS * 1000);
        }
    }
    return rc;
}

/* The link was cut in post-copy and the source paused: the link comes
 * back; the destination, which only waits for data and so may not have
 * seen the cut, is paused too if it has not by itself (migrate-pause, as
 * an operator would); it listens again (migrate-recover) and the source
 * resumes to it, as `virsh migrate --postcopy-resume` does. */
static int postcopy_recover(struct leg *l, struct vg_error *err)
{
    struct rig *r = l->r;
    struct vg_qmp *dq = r->side[l->d].qemu->qmp;
    g_autofree char *uri = NULL, *resume = NULL;
    int rc = nf_link(&r->nf, -1, true, err);

    l->link_down = false;
    if (rc == 0) {
        rc = wait_paused(dq, POSTCOPY_NOTICE_MS, err);
    }
    if (rc == 1) {
        vg_info("leg: the destination did not notice the cut: migrate-pause");
        rc = vg_qmp_execute(dq, "migrate-pause", NULL, NULL, err);
        if (rc == 0 && wait_paused(dq, RUNSTATE_WAIT_MS, err) == 1) {
            rc = vg_error_set(err, ETIMEDOUT,
                              "destination not paused after migrate-pause");
        }
    }
    if (rc == 0) {
        rc = vg_mig_recover_on(dq, nf_addr(&r->nf, l->d), &uri, err);
    }
    if (rc == 0) {
        resume = g_strdup_printf("{\"uri\": \"%s\", \"resume\": true}", uri);
        rc = vg_qmp_execute_json(l->sq, "migrate", resume, NULL, err);
    }
    if (rc == 0) {
        rc = vg_mig_set_parameter(l->sq, "max-postcopy-bandwidth", 0, err);
    }
    vg_info("leg: post-copy recovered over %s", uri ? uri : "(none)");
    if (rc < 0) {
        vg_error_prefix(err, "post-copy recovery");
    }
    return rc;
}

/* Workload and fault while the migration runs; returns when it is final
 * (or completed), with the last sample in @info. */
static int drive(struct leg *l, struct vg_mig_info *info, struct vg_error *err)
{
    struct rig *r = l->r;
    const struct leg_plan *p = l->p;
    int64_t deadline = vg_now_ms() + r->o.leg_timeout_ms;
    char state[VG_MIG_STATUS_MAX];
    int rc;

    for (;;) {
        int64_t now = vg_now_ms();

        rc = vg_mig_query(l->sq, info, err);
        if (rc < 0) {
            return rc;
        }
        if (vg_mig_status_final(info->status)) {
            return 0;
        }
        if (!strcmp(info->status, "active")) {
            if (info->vfio_transferred > 0 && !l->t_data) {
                l->t_data = now;
            }
            if (p->phase == PH_PRECOPY && !l->injected && l->t_data &&
                now >= l->t_data + p->inject_ms) {
                rc = inject(l, info->status, err);
            }
            if (rc == 0 && !l->released && p->mix != MIX_IDLE) {
                rc = vg_mig_runstate(l->sq, state, sizeof(state), err);
                if (rc == 0 && !strcmp(state, "running")) {
                    rc = work(l, p->mix, err);
                }
            }
            /* A fault in post-copy wants most of RAM still to send
             * then: switch over at once. */
            if (rc == 0 && !l->released &&
                (now >= l->t0 + p->work_ms || p->phase == PH_POSTCOPY) &&
                (p->phase != PH_PRECOPY || l->injected || p->kind == FK_NONE ||
                 p->kind == FK_CORRUPT)) {
                l->released = true;
                rc = set_params(l->sq, RELEASE_DOWNTIME, RELEASE_BW,
                                RELEASE_SWITCHOVER, err);
                if (rc == 0 && l->postcopy) {
                    rc = vg_qmp_execute(l->sq, "migrate-start-postcopy", NULL,
                                        NULL, err);
                }
            }
        }
        if (rc == 0 && !strcmp(info->status, "pre-switchover") &&
            !l->continued) {
            if (!l->injected && p->phase == PH_STOPCOPY) {
                rc = inject(l, info->status, err);
            }
            if (rc == 0 && !(p->kind == FK_CANCEL && p->phase == PH_STOPCOPY)) {
                l->continued = true;
                rc = vg_qmp_execute_json(l->sq, "migrate-continue",
                                         "{\"state\": \"pre-switchover\"}",
                                         NULL, err);
            }
        }
        if (rc == 0 && !strcmp(info->status, "postcopy-active") &&
            p->phase == PH_POSTCOPY && !l->injected &&
            postcopy_running(l, now)) {
            rc = inject(l, info->status, err);
        }
        if (rc == 0 && !strcmp(info->status, "postcopy-paused") &&
            l->link_down) {
            rc = postcopy_recover(l, err);
        }
        if (rc == 0 && l->link_down && p->drop_ms && p->phase != PH_POSTCOPY &&
            now >= l->t_drop + p->drop_ms) {
            l->link_down = false;
            rc = nf_link(&r->nf, -1, true, err);
        }
        if (rc < 0) {
            return rc;
        }
        if (now > deadline && l->res->stuck) {
            return vg_error_set(err, ETIMEDOUT,
                                "migration still '%s' %d ms after "
                                "migrate_cancel",
                                info->status, r->o.leg_timeout_ms);
        }
        if (now > deadline) {
            l->res->stuck = true;
            vg_err("leg: migration still '%s' after %d ms: cancelling",
                   info->status, r->o.leg_timeout_ms);
            vg_mig_cancel(l->sq, NULL);
            nf_clear(&r->nf, NULL);
            deadline = now + r->o.leg_timeout_ms;
        }
        g_usleep(VG_MIG_POLL_INTERVAL_MS * 1000);
    }
}

static bool alive(const struct rig *r, struct rig_side *sd)
{
    if (!sd->qemu || !vg_proc_alive(&sd->qemu->proc) || !sd->qemu->qmp) {
        return false;
    }
    for (unsigned d = 0; d < r->nvgpu; d++) {
        if (!sd->srv[d] || !vg_proc_alive(&sd->srv[d]->proc)) {
            return false;
        }
    }
    return true;
}

/* The run state of side @s's QEMU, "" if it is gone. */
static void runstate(struct rig *r, int s, char *buf, size_t len)
{
    struct rig_side *sd = &r->side[s];

    buf[0] = '\0';
    if (sd->qemu && sd->qemu->qmp && vg_proc_alive(&sd->qemu->proc)) {
        vg_mig_runstate(sd->qemu->qmp, buf, len, NULL);
    }
}

/* Continue side @s and wait until it runs. */
static int cont(struct rig *r, int s, struct vg_error *err)
{
    struct vg_qmp *qmp = r->side[s].qemu->qmp;
    int rc = vg_qmp_execute(qmp, "cont", NULL, NULL, err);

    if (rc == 0) {
        rc = vg_mig_wait_runstate(qmp, "running", RUNSTATE_WAIT_MS, err);
    }
    if (rc < 0) {
        vg_error_prefix(err, "cont on side %c", 'A' + s);
    }
    return rc;
}

/* After the migration ended as @info says: bring the VM to run on one
 * side, as a management layer would; returns that side or -1. */
static int recover(struct leg *l, const struct vg_mig_info *info)
{
    struct rig *r = l->r;
    struct vg_error e = {0};
    char st[VG_MIG_STATUS_MAX];

    if (!strcmp(info->status, "completed")) {
        /* The destination has the VM, loaded and paused (-S); it may
         * still be finishing the load. */
        int64_t deadline = vg_now_ms() + RUNSTATE_WAIT_MS;

        runstate(r, l->d, st, sizeof(st));
        while (!strcmp(st, "inmigrate") && vg_now_ms() < deadline) {
            g_usleep(20000);
            runstate(r, l->d, st, sizeof(st));
        }
        if (alive(r, &r->side[l->d]) && !strcmp(st, "paused") &&
            cont(r, l->d, &e) == 0) {
            return l->d;
        }
        vg_info("leg: destination unusable (state '%s'%s%s): continuing "
                "the source",
                st, e.msg[0] ? ", " : "", e.msg);
        if (alive(r, &r->side[l->s])) {
            side_stop(r, l->d, false);
            l->res->source_continued = true;
            if (cont(r, l->s, &e) == 0) {
                return l->s;
            }
            vg_err("leg: %s", e.msg);
        }
        return -1;
    }
    /* failed or cancelled: the source runs again by itself. */
    if (alive(r, &r->side[l->s]) &&
        vg_mig_wait_runstate(r->side[l->s].qemu->qmp, "running",
                             RUNSTATE_WAIT_MS, &e) == 0) {
        return l->s;
    }
    vg_err("leg: source did not resume after '%s': %s", info->status, e.msg);
    return -1;
}

/* The VM must run on exactly side @s, the other one is not running. */
static void check_one_side(struct leg *l, int s)
{
    char a[VG_MIG_STATUS_MAX], b[VG_MIG_STATUS_MAX];

    runstate(l->r, 0, a, sizeof(a));
    runstate(l->r, 1, b, sizeof(b));
    vg_info("leg: side A '%s', side B '%s'", a, b);
    if (s < 0 || (!strcmp(a, "running") + !strcmp(b, "running")) != 1) {
        l->res->lost = true;
        g_snprintf(l->res->why, sizeof(l->res->why),
                   "VM runs on %d sides (A '%s', B '%s')",
                   !strcmp(a, "running") + !strcmp(b, "running"), a, b);
    }
}

/* Both servers' VRAM checksums of vGPU @d at switchover must agree. */
/* How long a post-copy destination may take to get every page. */
#define POSTCOPY_WAIT_MS 30000

/* Whether the boolean statistic @name is true. */
static bool stat_true(const struct vg_stats *st, const char *name)
{
    g_autofree char *v = vg_stats_str(st, name);

    return v && !strcmp(v, "true");
}

/* A destination's statistics after the switchover: the pages of a
 * post-copy or of a restore on demand are all in (its VRAM checksum is
 * taken then), or there were none to wait for. */
static bool postcopy_over(const struct vg_stats *st, void *opaque)
{
    return (!stat_true(st, "postcopy") &&
            !stat_true(st, "restore_on_demand")) ||
           (stat_true(st, "postcopy_done") && st->vram_checksum[0]);
}

/* A restored destination (a fresh server): its VRAM checksum is there,
 * taken at the end of the load or, on demand, once every page is in. */
static bool restore_over(const struct vg_stats *st, void *opaque)
{
    return st->vram_checksum[0] && (!stat_true(st, "restore_on_demand") ||
                                    stat_true(st, "postcopy_done"));
}

/* After a post-copy switchover or a restore on demand: every page came,
 * digest verified. */
static void check_postcopy(struct leg *l, unsigned d, const struct vg_stats *ds)
{
    bool restored = stat_true(ds, "restore_on_demand");

    if (!stat_true(ds, "postcopy") && !restored) {
        return; /* QEMU completed before it switched to post-copy */
    }
    if (!stat_true(ds, "postcopy_verified")) {
        l->res->corruption = true;
        g_snprintf(l->res->corruption_detail, sizeof(l->res->corruption_detail),
                   "vGPU %u: %s pages not verified (%s)", d,
                   restored ? "restored" : "post-copy", ds->last_error);
        return;
    }
    l->res->postcopy |= !restored;
    l->res->restored |= restored;
}

static void check_checksum(struct leg *l, unsigned d)
{
    struct vg_stats ss, ds;
    struct leg_result *res = l->res;
    struct vg_error e = {0};

    if (l->postcopy || l->via_file) {
        if (vg_stats_wait(l->r->side[l->d].stats[d],
                          l->via_file ? restore_over : postcopy_over, NULL,
                          POSTCOPY_WAIT_MS, &ds, &e) < 0) {
            res->corruption = true;
            g_snprintf(res->corruption_detail, sizeof(res->corruption_detail),
                       "vGPU %u: its pages did not all come: %s", d, e.msg);
            return;
        }
        check_postcopy(l, d, &ds);
        vg_stats_clear(&ds);
    }
    if (l->raced_cpu) {
        return; /* CPU writes may have reached the source after its stream */
    }
    /* Each server writes its checksums once the reply that took them
     * is out, and no earlier session's stay in the file meanwhile. */
    if (vg_stats_wait(l->r->side[l->s].stats[d], has_checksum, NULL,
                      CHECKSUM_WAIT_MS, &ss, NULL) < 0) {
        return; /* the source server died: nothing to compare */
    }
    if (vg_stats_wait(l->r->side[l->d].stats[d], has_checksum, NULL,
                      CHECKSUM_WAIT_MS, &ds, NULL) == 0 ||
        vg_stats_read(l->r->side[l->d].stats[d], &ds, NULL) == 0) {
        if (ss.vram_checksum[0] &&
            strcmp(ss.vram_checksum, ds.vram_checksum) != 0) {
            res->corruption = true;
            g_snprintf(res->corruption_detail, sizeof(res->corruption_detail),
                       "vGPU %u: VRAM checksum at switchover: source %s, "
                       "destination %s",
                       d, ss.vram_checksum, ds.vram_checksum);
        }
        vg_stats_clear(&ds);
    }
    vg_stats_clear(&ss);
}

static void check_checksums(struct leg *l)
{
    for (unsigned d = 0; d < l->r->nvgpu; d++) {
        check_checksum(l, d);
    }
}

/* Every vGPU on the side the VM runs on: idle, not halted, VRAM and DMA
 * buffer as its model says; CPU writes that raced the switchover may be
 * missing (@may_lack) if the VM moved. */
static void check_models(struct rig *r, bool may_lack, struct leg_result *res)
{
    for (unsigned d = 0; d < r->nvgpu; d++) {
        struct vg_error e = {0};

        if (model_verify(&r->model[d], &r->gpu[d], may_lack, &e) < 0) {
            vg_err("CORRUPTION on side %c, vGPU %u: %s", 'A' + r->cur, d,
                   e.msg);
            if (!res->corruption) {
                g_snprintf(res->corruption_detail,
                           sizeof(res->corruption_detail), "vGPU %u: %s", d,
                           e.msg);
            }
            res->corruption = true;
        }
    }
}

/* Where the corrupted byte of a corrupting source fell in its stream. */
static void corrupt_phase(struct leg *l)
{
    uint64_t off = l->r->side[l->s].corrupt_offset;
    int64_t pre = l->res->stream_pre, stop = l->res->stream_stop;

    if (pre < 0 || stop < 0) {
        return;
    }
    if (off < 48) {
        l->res->phase_seen = PH_SETUP;
    } else if ((int64_t)off < pre) {
        l->res->phase_seen = PH_PRECOPY;
    } else if ((int64_t)off < pre + stop - 40) {
        l->res->phase_seen = PH_STOPCOPY;
    } else if ((int64_t)off < pre + stop) {
        l->res->phase_seen = PH_RESUME;
    }
    /* else: the stream ended before the offset, nothing was corrupted */
}

/* A leg through a save file: no return path (a file has none), and the
 * URI of the file. */
static int file_leg_setup(struct leg *l, char **uri, struct vg_error *err)
{
    struct rig *r = l->r;
    int rc = vg_mig_set_capability(l->sq, "return-path", false, err);

    if (rc == 0) {
        rc = vg_mig_set_capability(r->side[l->d].qemu->qmp, "return-path",
                                   false, err);
    }
    *uri = g_strdup_printf("file:%s/leg%u.sav", r->dir, r->started);
    return rc;
}

/* The saved VM is in the file: the destination restores it. */
static int file_leg_restore(struct leg *l, const char *uri,
                            struct vg_error *err)
{
    g_autofree char *args = g_strdup_printf("{\"uri\": \"%s\"}", uri);

    return vg_qmp_execute_json(l->r->side[l->d].qemu->qmp, "migrate-incoming",
                               args, NULL, err);
}

/* Whether the restored destination's fault vGPU has VRAM still in the
 * file: its device is still RESUMING (QEMU leaves it there until the VM
 * runs; the pages load from then on), or it loads them on demand. */
static bool pages_in_file(struct leg *l)
{
    struct vg_stats st = {0};
    struct vg_error e = {0};
    bool pending = false;

    g_usleep(STATS_SETTLE_MS * 1000);
    if (vg_stats_read(l->r->side[l->d].stats[l->r->o.fault_vgpu], &st, &e) ==
        0) {
        pending = !strcmp(st.state, "RESUMING") ||
                  (stat_true(&st, "restore_on_demand") &&
                   !stat_true(&st, "postcopy_done"));
        vg_info("leg: restored: device %s, VRAM %s in the file", st.state,
                pending ? "still" : "no longer");
    } else {
        vg_warn("leg: the restore's statistics: %s", e.msg);
    }
    vg_stats_clear(&st);
    return pending;
}

/* Phase restore: once the destination has loaded the file's stream (its
 * pages still coming from the file, slowly), the fault. */
static int restore_fault(struct leg *l, struct vg_error *err)
{
    struct vg_qmp *dq = l->r->side[l->d].qemu->qmp;
    struct vg_mig_info di = {0};
    int64_t deadline = vg_now_ms() + RUNSTATE_WAIT_MS;
    int rc = 0;

    while (rc == 0 && strcmp(di.status, "completed") != 0) {
        rc = vg_mig_query(dq, &di, err);
        if (rc == 0 && vg_now_ms() > deadline) {
            rc = vg_error_set(err, ETIMEDOUT, "restore still '%s'", di.status);
        } else if (rc == 0 && strcmp(di.status, "completed") != 0) {
            g_usleep(VG_MIG_POLL_INTERVAL_MS * 1000);
        }
    }
    if (rc < 0) {
        return rc;
    }
    /* "restore" only if the fault vGPU's pages are still coming. */
    return inject(l, pages_in_file(l) ? "restore" : "completed", err);
}

/* After a leg through a save file: the side that runs takes the return
 * path again for live legs, and the file goes (its server holds it open
 * until every page is in). */
static void file_leg_end(struct leg *l, const char *uri, int run_on)
{
    struct vg_error e = {0};

    if (run_on >= 0 && vg_mig_set_capability(l->r->side[run_on].qemu->qmp,
                                             "return-path", true, &e) < 0) {
        vg_warn("leg: %s", e.msg);
    }
    unlink(uri + strlen("file:"));
}

int rig_leg(struct rig *r, const struct leg_plan *p, struct leg_result *res,
            struct vg_error *err)
{
    struct leg l = {.r = r,
                    .p = p,
                    .res = res,
                    .s = r->cur,
                    .d = !r->cur,
                    .postcopy = p->postcopy || p->phase == PH_POSTCOPY};
    bool via_file = (p->via_file && p->kind == FK_NONE && !l.postcopy) ||
                    p->phase == PH_RESTORE;

    l.via_file = via_file;
    g_autofree char *uri = NULL;
    struct vg_mig_info info = {0};
    const char *why = NULL;
    struct vg_error e = {0};
    bool hold_setup;
    int run_on, rc;

    memset(res, 0, sizeof(*res));
    res->phase_seen = PH_COUNT;
    res->vgpus = r->nvgpu;
    if (!rig_fault_applies(r, p->kind, p->phase, &why)) {
        res->skipped = true;
        g_strlcpy(res->why, why, sizeof(res->why));
        return 0;
    }
    l.sq = r->side[l.s].qemu->qmp;
    r->slow_next = p->phase == PH_RESTORE;
    rc = side_start(r, l.d, true, err);
    /* Both sides, before the incoming; a source that was a post-copy
     * destination keeps the capability until it is turned off. */
    if (rc == 0) {
        rc = vg_mig_set_capability(l.sq, "postcopy-ram", l.postcopy, err);
    }
    if (rc == 0) {
        rc = vg_mig_set_capability(r->side[l.d].qemu->qmp, "postcopy-ram",
                                   l.postcopy, err);
    }
    if (rc == 0 && p->phase == PH_POSTCOPY) {
        rc = dirty_ballast(&l, err);
    }
    if (rc == 0 && l.postcopy) {
        rc = vg_mig_set_parameter(
            l.sq, "max-postcopy-bandwidth",
            p->phase == PH_POSTCOPY ? POSTCOPY_HOLD_BW : 0, err);
    }
    if (rc == 0 && via_file) {
        rc = file_leg_setup(&l, &uri, err);
    } else if (rc == 0) {
        rc = vg_mig_incoming_on(r->side[l.d].qemu->qmp, nf_addr(&r->nf, l.d),
                                &uri, err);
    }
    /* Always: a workload step that races the stop then lands before the
     * device state and RAM's last pass go out (model.h). */
    if (rc == 0) {
        rc = vg_mig_set_capability(l.sq, "pause-before-switchover", true, err);
    }
    if (rc == 0) {
        rc = set_params(l.sq, 1, p->hold_bw ? p->hold_bw : DEFAULT_HOLD_BW,
                        1000, err);
    }
    /* A link fault in setup is there before the connection. */
    if (rc == 0 && p->phase == PH_SETUP &&
        (p->kind == FK_DROP || p->kind == FK_SLOW)) {
        rc = inject(&l, "setup", err);
    }
    /* Other faults in setup: with namespaces, the link is held down
     * while "migrate" connects, so the fault lands while the status is
     * "setup" for sure; it comes up right after (TCP retries the SYN
     * within a second).  Else the fault follows "migrate" at once. */
    hold_setup = rc == 0 && p->phase == PH_SETUP && !l.injected &&
                 p->kind != FK_NONE && p->kind != FK_CORRUPT && r->nf.enabled;
    if (hold_setup) {
        rc = nf_link(&r->nf, l.d, false, err);
    }
    if (rc < 0) {
        vg_error_prefix(err, "leg set-up");
        return rc;
    }
    l.t0 = vg_now_ms();
    rc = vg_mig_start(l.sq, uri, err);
    if (rc == 0 && p->phase == PH_SETUP && !l.injected && p->kind != FK_NONE &&
        p->kind != FK_CORRUPT) {
        rc = vg_mig_query(l.sq, &info, err);
        if (rc == 0) {
            rc = inject(&l, info.status[0] ? info.status : "setup", err);
        }
    }
    if (hold_setup && nf_link(&r->nf, -1, true, rc < 0 ? NULL : err) < 0 &&
        rc == 0) {
        rc = -EIO;
    }
    if (rc == 0) {
        rc = drive(&l, &info, err);
    }
    if (rc == 0 && via_file && !strcmp(info.status, "completed")) {
        rc = file_leg_restore(&l, uri, err);
    }
    if (rc == 0 && p->phase == PH_RESTORE &&
        !strcmp(info.status, "completed")) {
        rc = restore_fault(&l, err);
    }
    if (rc < 0) {
        vg_error_prefix(err, "leg %c->%c", 'A' + l.s, 'A' + l.d);
        return rc;
    }
    if (!strcmp(info.status, "completed") && p->phase == PH_RESUME &&
        p->kind != FK_NONE && p->kind != FK_CORRUPT) {
        rc = inject(&l, "completed", err);
        if (rc < 0) {
            return rc;
        }
    }
    g_strlcpy(res->status, info.status, sizeof(res->status));
    res->stream_pre = res->stream_stop = -1;
    if (r->side[l.s].srv[r->o.fault_vgpu] &&
        vg_proc_alive(&r->side[l.s].srv[r->o.fault_vgpu]->proc)) {
        rig_last_stream(r, l.s, &res->stream_pre, &res->stream_stop, NULL);
    }
    if (r->side[l.s].corrupting) {
        corrupt_phase(&l);
        r->side[l.s].corrupting = false; /* its one corrupt stream is spent */
    }
    res->total_ms = info.total_time_ms;
    res->downtime_ms = info.downtime_ms;
    res->vfio_bytes = info.vfio_transferred;
    res->ram_bytes = info.ram_transferred;
    vg_info("leg %c->%c: %s, total %" G_GINT64_FORMAT
            " ms, downtime %" G_GINT64_FORMAT " ms, vfio %" G_GINT64_FORMAT
            " bytes%s%s",
            'A' + l.s, 'A' + l.d, info.status, info.total_time_ms,
            info.downtime_ms, info.vfio_transferred,
            info.error_desc[0] ? ": " : "", info.error_desc);
    if (nf_clear(&r->nf, &e) < 0) {
        vg_warn("leg: %s", e.msg);
    }
    run_on = recover(&l, &info);
    if (via_file) {
        file_leg_end(&l, uri, run_on);
    }
    check_one_side(&l, run_on);
    res->moved = run_on == l.d;
    res->recovered = p->kind != FK_NONE && run_on >= 0 && !res->lost;
    if (run_on < 0) {
        res->lost = true;
        return 0; /* the caller reboots */
    }
    if (res->moved && !strcmp(res->status, "completed")) {
        check_checksums(&l);
    }
    side_stop(r, !run_on, res->leaks == 0);
    r->cur = run_on;
    for (unsigned d = 0; res->moved && d < r->nvgpu; d++) {
        rc = vg_vgpu_attach_nth(r->side[run_on].qemu->qt, d, &r->gpu[d], err);
        if (rc < 0) {
            vg_error_prefix(err, "attach vGPU %u on side %c", d, 'A' + run_on);
            return rc;
        }
    }
    check_models(r, res->moved && l.raced_cpu, res);
    check_leaks(r, !res->moved, res);
    return 0;
}
