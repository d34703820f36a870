/*
 * vgmig-soak -- ping-pong live migrations of a vGPU VM with random
 * faults; see usage() and docs/soak.md.
 */
#include <errno.h>
#include <getopt.h>
#include <glib.h>
#include <glib/gstdio.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/log.h"
#include "qclient/io.h"
#include "report.h"
#include "rig.h"

static void usage(FILE *out)
{
    fprintf(
        out,
        "Usage: vgmig-soak [OPTION]...\n"
        "\n"
        "Migrate a VM with vGPUs back and forth between two sides (A and B,\n"
        "each a vgpu-server per vGPU and a QEMU under -accel qtest, fresh\n"
        "processes on the freed side every time) while a workload runs on\n"
        "every vGPU, and inject random faults: migrate_cancel; SIGKILL of\n"
        "the destination QEMU, of the destination vgpu-server, or of the\n"
        "source vgpu-server once the stream is complete; the migration link\n"
        "dropped or slowed (network namespaces, ip and tc from iproute2;\n"
        "needs root); a corrupted device stream (vgpu-server --fault\n"
        "corrupt-stream).  The server faults hit one vGPU of a VM of\n"
        "several.  Each fault lands in a phase: setup, pre-copy, stop-copy\n"
        "or resume.\n"
        "After every migration attempt the VM must run on exactly one side,\n"
        "every vGPU's VRAM must equal the test's model of it, and no\n"
        "process, socket file, fd or memfd may be left over.\n"
        "\n"
        "Options:\n"
        "  -n, --migrations N   stop after N migration attempts (default 20)\n"
        "  -d, --duration TIME  stop after TIME (seconds, or with s, m, h\n"
        "                       suffix), whichever comes first\n"
        "  -s, --seed N         seed of all random choices (default: random,\n"
        "                       printed); the same seed replays the same\n"
        "                       plan of faults, phases and workloads\n"
        "  -f, --fault-rate P   share of attempts with a fault, 0..1\n"
        "                       (default 0.6)\n"
        "      --postcopy-rate P  share of the attempts without a fault that\n"
        "                       switch over in post-copy (migrate-start-\n"
        "                       postcopy when released), 0..1 (default 0.3)\n"
        "      --restore-rate P  share of the other attempts without a\n"
        "                       fault that go through a save file (migrate\n"
        "                       file:, then migrate-incoming file: on the\n"
        "                       other side, VRAM on demand), 0..1 (default\n"
        "                       0.2)\n"
        "  -k, --faults LIST    comma-separated fault kinds to use (default\n"
        "                       all): cancel, kill-dst-qemu, kill-dst-server,\n"
        "                       kill-src-server, drop-link, slow-link,\n"
        "                       corrupt-stream\n"
        "      --vram SIZE      VRAM of each vGPU (default 16M, at least 4M)\n"
        "      --vgpus LIST     comma-separated vGPU counts (1 to %u) the\n"
        "                       VMs draw from, each VM booted one of them\n"
        "                       (default 1,2); the server faults hit the\n"
        "                       last vGPU of a VM of several\n"
        "      --vm-legs N      boot a new VM after N migration attempts\n"
        "                       (default 10; 0: only when one is lost or\n"
        "                       sits on a server that corrupts streams)\n"
        "      --page-size SIZE dirty-tracking page (default 64K)\n"
        "      --ram MIB        guest RAM in MiB (default 128)\n"
        "      --no-netns       no network namespaces: QEMUs on loopback,\n"
        "                       link faults skipped\n"
        "  -o, --out DIR        write DIR/report.json and DIR/summary.txt\n"
        "                       (default build/soak)\n"
        "      --keep-logs      keep every process log (default: only the\n"
        "                       logs of attempts with a problem)\n"
        "      --stop-on-failure  end at the first corruption, leak or lost\n"
        "                       VM, keeping the run directory\n"
        "  -l, --log-level LVL  error, warn, info (default), debug\n"
        "  -h, --help           show this help and exit\n"
        "\n"
        "PHASES\n"
        "setup: status \"setup\", the link held down meanwhile so QEMU cannot\n"
        "connect yet; pre-copy: device data flowing, the migration held there\n"
        "by a 1 ms downtime limit; stop-copy: the VM stopped, the source\n"
        "device in STOP_COPY (pause-before-switchover); resume: the source\n"
        "completed, the destination (started with -S) loaded, not continued.\n"
        "After a fault the VM is recovered as a management layer would: the\n"
        "destination is continued if intact, else the source.\n"
        "\n"
        "REPORT\n"
        "DIR/report.json: seed, result, legs (attempts), migrations (the VM\n"
        "moved), faults by kind and by the phase they landed in, with how\n"
        "those migrations ended, recoveries, corruptions, leaks, vm_lost,\n"
        "stuck, errors, downtime_ms and total_ms (p50, p95, max), bytes;\n"
        "DIR/summary.txt: the same as a table.  docs/soak.md has the details.\n"
        "\n"
        "Needs VGMIG_QEMU, VGMIG_SERVER and VGMIG_FIRMWARE in the environment\n"
        "(make soak sets them).  Logs of the processes go to a directory\n"
        "under $TMPDIR, printed at start; it is removed at the end of a run\n"
        "that passed.  Exit status: 0 if no corruption, leak, lost VM, stuck\n"
        "migration or error was seen, 1 otherwise, 2 on usage errors.\n",
        RIG_MAX_VGPUS);
}

struct opts {
    unsigned migrations;
    int64_t duration_ms;
    uint64_t seed;
    bool have_seed;
    double fault_rate;
    double postcopy_rate; /* of the legs without a fault */
    double restore_rate;  /* of the others without a fault */
    bool kinds[FK_COUNT];
    const char *vram, *page, *out;
    unsigned ram_mib;
    unsigned vgpus[RIG_MAX_VGPUS]; /* the counts VMs draw from */
    unsigned n_vgpus;
    unsigned vm_legs;
    bool netns, keep_logs, stop_on_failure;
};

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    interrupted = sig;
}

static int parse_duration(const char *s, int64_t *ms)
{
    char *end;
    double v = strtod(s, &end);
    double mult = 1000;

    if (end == s || v < 0) {
        return -1;
    }
    if (*end == 'm') {
        mult = 60000;
    } else if (*end == 'h') {
        mult = 3600000;
    } else if (*end != 's' && *end) {
        return -1;
    }
    if (*end && end[1]) {
        return -1;
    }
    *ms = (int64_t)(v * mult);
    return 0;
}

static int parse_kinds(const char *list, bool *kinds)
{
    g_auto(GStrv) parts = g_strsplit(list, ",", -1);

    memset(kinds, 0, sizeof(bool) * FK_COUNT);
    for (unsigned i = 0; parts[i]; i++) {
        int k;

        for (k = FK_NONE + 1; k < FK_COUNT; k++) {
            if (!strcmp(parts[i], fault_name(k))) {
                kinds[k] = true;
                break;
            }
        }
        if (k == FK_COUNT) {
            fprintf(stderr, "vgmig-soak: unknown fault kind '%s'\n", parts[i]);
            return -1;
        }
    }
    return 0;
}

/* --vgpus: counts 1..RIG_MAX_VGPUS, each once. */
static int parse_vgpus(const char *list, struct opts *o)
{
    g_auto(GStrv) parts = g_strsplit(list, ",", -1);

    o->n_vgpus = 0;
    for (unsigned i = 0; parts[i]; i++) {
        char *end;
        unsigned long v = strtoul(parts[i], &end, 10);

        if (*end || !*parts[i] || v < 1 || v > RIG_MAX_VGPUS ||
            o->n_vgpus == RIG_MAX_VGPUS) {
            fprintf(stderr,
                    "vgmig-soak: bad vGPU count '%s' in --vgpus (1 to %u, "
                    "at most %u of them)\n",
                    parts[i], RIG_MAX_VGPUS, RIG_MAX_VGPUS);
            return -1;
        }
        o->vgpus[o->n_vgpus++] = (unsigned)v;
    }
    return o->n_vgpus ? 0 : -1;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
    enum {
        OPT_VRAM = 256,
        OPT_PAGE,
        OPT_RAM,
        OPT_NONETNS,
        OPT_KEEP,
        OPT_STOP,
        OPT_VGPUS,
        OPT_VM_LEGS,
        OPT_POSTCOPY_RATE,
        OPT_RESTORE_RATE
    };
    static const struct option longopts[] = {
        {"migrations", required_argument, NULL, 'n'},
        {"duration", required_argument, NULL, 'd'},
        {"seed", required_argument, NULL, 's'},
        {"fault-rate", required_argument, NULL, 'f'},
        {"postcopy-rate", required_argument, NULL, OPT_POSTCOPY_RATE},
        {"restore-rate", required_argument, NULL, OPT_RESTORE_RATE},
        {"faults", required_argument, NULL, 'k'},
        {"vram", required_argument, NULL, OPT_VRAM},
        {"vgpus", required_argument, NULL, OPT_VGPUS},
        {"vm-legs", required_argument, NULL, OPT_VM_LEGS},
        {"page-size", required_argument, NULL, OPT_PAGE},
        {"ram", required_argument, NULL, OPT_RAM},
        {"no-netns", no_argument, NULL, OPT_NONETNS},
        {"out", required_argument, NULL, 'o'},
        {"keep-logs", no_argument, NULL, OPT_KEEP},
        {"stop-on-failure", no_argument, NULL, OPT_STOP},
        {"log-level", required_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    enum vg_log_level lvl;
    char *end;
    int c;

    *o = (struct opts){.migrations = 20,
                       .fault_rate = 0.6,
                       .postcopy_rate = 0.3,
                       .restore_rate = 0.2,
                       .vram = "16M",
                       .page = "64K",
                       .out = "build/soak",
                       .ram_mib = 128,
                       .vgpus = {1, 2},
                       .n_vgpus = 2,
                       .vm_legs = 10,
                       .netns = true};
    for (int k = FK_NONE + 1; k < FK_COUNT; k++) {
        o->kinds[k] = true;
    }
    while ((c = getopt_long(argc, argv, "n:d:s:f:k:o:l:h", longopts, NULL)) !=
           -1) {
        switch (c) {
        case 'n':
            o->migrations = (unsigned)strtoul(optarg, &end, 10);
            if (*end || !*optarg) {
                goto bad;
            }
            break;
        case 'd':
            if (parse_duration(optarg, &o->duration_ms) < 0) {
                goto bad;
            }
            break;
        case 's':
            o->seed = strtoull(optarg, &end, 0);
            o->have_seed = true;
            if (*end || !*optarg) {
                goto bad;
            }
            break;
        case 'f':
            o->fault_rate = strtod(optarg, &end);
            if (*end || o->fault_rate < 0 || o->fault_rate > 1) {
                goto bad;
            }
            break;
        case OPT_POSTCOPY_RATE:
            o->postcopy_rate = strtod(optarg, &end);
            if (*end || !*optarg || o->postcopy_rate < 0 ||
                o->postcopy_rate > 1) {
                goto bad;
            }
            break;
        case OPT_RESTORE_RATE:
            o->restore_rate = strtod(optarg, &end);
            if (*end || !*optarg || o->restore_rate < 0 ||
                o->restore_rate > 1) {
                goto bad;
            }
            break;
        case 'k':
            if (parse_kinds(optarg, o->kinds) < 0) {
                return 2;
            }
            break;
        case OPT_VRAM:
            o->vram = optarg;
            break;
        case OPT_VGPUS:
            if (parse_vgpus(optarg, o) < 0) {
                return 2;
            }
            break;
        case OPT_VM_LEGS:
            o->vm_legs = (unsigned)strtoul(optarg, &end, 10);
            if (*end || !*optarg) {
                goto bad;
            }
            break;
        case OPT_PAGE:
            o->page = optarg;
            break;
        case OPT_RAM:
            o->ram_mib = (unsigned)strtoul(optarg, &end, 10);
            if (*end || o->ram_mib < 64) {
                goto bad;
            }
            break;
        case OPT_NONETNS:
            o->netns = false;
            break;
        case 'o':
            o->out = optarg;
            break;
        case OPT_KEEP:
            o->keep_logs = true;
            break;
        case OPT_STOP:
            o->stop_on_failure = true;
            break;
        case 'l':
            if (!vg_log_parse_level(optarg, &lvl)) {
                goto bad;
            }
            vg_log_set_level(lvl);
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "vgmig-soak: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    return 0;
bad:
    fprintf(stderr, "vgmig-soak: bad value '%s' for -%c\n", optarg,
            c < 256 ? c : '-');
    return 2;
}

static unsigned pick(GRand *rng, unsigned lo, unsigned hi)
{
    return (unsigned)g_rand_int_range(rng, (gint32)lo, (gint32)hi + 1);
}

/* The next leg's plan. */
static void plan_leg(const struct opts *o, struct rig *r, GRand *rng,
                     struct leg_plan *p)
{
    enum fault_kind kinds[FK_COUNT];
    enum mig_phase phases[PH_COUNT];
    unsigned nk = 0, np = 0;

    memset(p, 0, sizeof(*p));
    p->mix = (enum model_mix)pick(rng, 0, MIX_COUNT - 1);
    p->work_ms = pick(rng, 100, 1200);
    p->inject_ms = pick(rng, 0, 400);
    p->hold_bw = (int64_t)pick(rng, 8, 64) << 20;
    p->phase = PH_COUNT;
    if (rig_source_corrupts(r)) {
        p->kind = FK_CORRUPT; /* the source server was started for it */
        p->phase = PH_PRECOPY;
        return;
    }
    if (g_rand_double(rng) >= o->fault_rate) {
        p->kind = FK_NONE;
        p->postcopy = g_rand_double(rng) < o->postcopy_rate;
        p->via_file = !p->postcopy && g_rand_double(rng) < o->restore_rate;
        return;
    }
    for (int k = FK_NONE + 1; k < FK_COUNT; k++) {
        if (o->kinds[k] && k != FK_CORRUPT &&
            rig_fault_applies(r, k, 0, NULL)) {
            kinds[nk++] = k;
        } else if (o->kinds[k] && k != FK_CORRUPT &&
                   rig_fault_applies(r, k, PH_RESUME, NULL)) {
            kinds[nk++] = k;
        }
    }
    if (o->kinds[FK_CORRUPT]) {
        kinds[nk++] = FK_CORRUPT;
    }
    if (nk == 0) {
        p->kind = FK_NONE;
        return;
    }
    p->kind = kinds[pick(rng, 0, nk - 1)];
    if (p->kind == FK_CORRUPT) {
        /* The next destination will corrupt what it sends later: pick
         * the offset now; this leg itself has no fault. */
        uint64_t est =
            model_nonzero_bytes(&r->model[r->o.fault_vgpu], r->page_size);
        uint64_t span = est + est / 50 + 4096;
        unsigned where = pick(rng, 0, 3);
        uint64_t off =
            where == 0 ? pick(rng, 0, 47)
            : where == 3
                ? est + pick(rng, 0, 8192)
                : 48 + (uint64_t)(g_rand_double(rng) * (double)(span - 48));

        rig_plan_corrupt(r, off);
        p->kind = FK_NONE;
        return;
    }
    for (int ph = 0; ph < PH_COUNT; ph++) {
        if (rig_fault_applies(r, p->kind, ph, NULL)) {
            phases[np++] = ph;
        }
    }
    p->phase = phases[pick(rng, 0, np - 1)];
    p->slow_kbit = pick(rng, 20, 400) * 1000;
    p->slow_delay_ms = pick(rng, 1, 50);
    p->drop_ms = g_rand_boolean(rng) ? pick(rng, 200, 2000) : 0;
}

static void log_leg(unsigned n, const struct rig *r, const struct leg_plan *p,
                    const struct leg_result *res)
{
    vg_info("leg %u: %s%s%s%s (%s) workload %s -> %s%s, now on side %c%s%s%s",
            n, fault_name(p->kind),
            p->postcopy   ? " (post-copy)"
            : p->via_file ? " (save and restore)"
                          : "",
            p->kind ? " in " : "", p->kind ? phase_name(res->phase_seen) : "",
            p->kind ? phase_name(p->phase) : "planned", model_mix_name(p->mix),
            res->skipped ? "skipped" : res->status, res->moved ? ", moved" : "",
            'A' + r->cur, res->corruption ? ", CORRUPTION" : "",
            res->leaks ? ", LEAK" : "", res->lost ? ", VM LOST" : "");
}

/* The work of the VM's models into @rep (before they are replaced). */
static void count_work(struct report *rep, const struct rig *r)
{
    for (unsigned d = 0; d < r->nvgpu; d++) {
        rep->batches += r->model[d].batches;
        rep->commands += r->model[d].commands;
        rep->cpu_writes += r->model[d].cpu_writes;
        rep->raced_steps += r->model[d].raced_steps;
        rep->raced_lost += r->model[d].raced_lost;
    }
}

/* The vGPUs of the next VM, drawn from --vgpus. */
static unsigned pick_vgpus(const struct opts *o, GRand *rng)
{
    return o->vgpus[pick(rng, 0, o->n_vgpus - 1)];
}

/* The VM must go on after a leg: a new one where it was lost, or where
 * it sits on a server that corrupts every stream it sends; and one every
 * --vm-legs attempts (unless a corrupt stream is planned for the next
 * destination), so that VMs of every --vgpus count take part.  @legs
 * counts the attempts of the VM, reset here. */
static int after_leg(const struct opts *o, struct rig *r, struct report *rep,
                     GRand *rng, const struct leg_plan *p,
                     const struct leg_result *res, unsigned *legs,
                     struct vg_error *err)
{
    const char *why = res->lost ? "the VM was lost"
                      : p->kind == FK_CORRUPT && rig_source_corrupts(r)
                          ? "its server corrupts streams"
                      : o->vm_legs && ++*legs >= o->vm_legs && !r->next_fault
                          ? "--vm-legs"
                          : NULL;
    uint64_t seed;
    unsigned vgpus;

    if (!why) {
        return 0;
    }
    count_work(rep, r);
    seed = ((uint64_t)g_rand_int(rng) << 32) | g_rand_int(rng);
    vgpus = pick_vgpus(o, rng);
    vg_info("booting a new VM with %u vGPU(s) (%s)", vgpus, why);
    rep->generations++;
    *legs = 0;
    return rig_reboot(r, seed, vgpus, err);
}

int main(int argc, char **argv)
{
    struct vg_error err = {0};
    struct rig_opts ro = {0};
    struct report rep;
    struct rig r;
    struct opts o;
    GRand *rng;
    g_autofree char *json = NULL;
    g_autofree char *txt = NULL;
    unsigned n = 0, vm_legs = 0;
    bool keep_dir = false;
    FILE *f;
    int rc;

    vg_log_set_prog("vgmig-soak");
    rc = parse_args(argc, argv, &o);
    if (rc) {
        return rc;
    }
    if (!o.have_seed && getrandom(&o.seed, sizeof(o.seed), 0) != 8) {
        o.seed = (uint64_t)g_get_real_time();
    }
    o.seed &= INT64_MAX; /* printable as a JSON integer */
    printf("vgmig-soak: seed %" G_GUINT64_FORMAT
           " (replay with --seed %" G_GUINT64_FORMAT ")\n",
           o.seed, o.seed);
    fflush(stdout);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    rng = g_rand_new_with_seed_array((const guint32 *)&o.seed, 2);
    report_init(&rep, o.seed, o.vram, o.page);
    ro.tag = "soak";
    ro.vram = o.vram;
    ro.page = o.page;
    ro.ram_mib = o.ram_mib;
    ro.seed = ((uint64_t)g_rand_int(rng) << 32) | g_rand_int(rng);
    ro.vgpus = pick_vgpus(&o, rng);
    ro.fault_vgpu = ro.vgpus - 1;
    ro.netns = o.netns;
    ro.keep_logs = o.keep_logs;
    if (rig_open(&r, &ro, &err) < 0) {
        fprintf(stderr, "vgmig-soak: %s\n", err.msg);
        return 1;
    }
    printf("vgmig-soak: run directory %s; channel faults: %s\n", r.dir,
           r.nf.enabled ? (r.nf.netem ? "netem" : "tbf, link down") : r.nf.why);
    fflush(stdout);
    rep.generations = 1;
    rep.netns = r.nf.enabled;
    rep.netem = r.nf.netem;
    g_strlcpy(rep.netns_why, r.nf.why, sizeof(rep.netns_why));
    for (int k = FK_NONE + 1; k < FK_COUNT; k++) {
        const char *why = NULL;

        if (!o.kinds[k]) {
            g_strlcpy(rep.skipped[k], "not selected (--faults)",
                      sizeof(rep.skipped[k]));
        } else if (!rig_fault_applies(&r, k, PH_PRECOPY, &why) &&
                   !rig_fault_applies(&r, k, PH_RESUME, NULL)) {
            g_strlcpy(rep.skipped[k], why, sizeof(rep.skipped[k]));
            printf("vgmig-soak: SKIP fault %s: %s\n", fault_name(k), why);
        }
    }
    while (n < o.migrations && !interrupted &&
           (!o.duration_ms || vg_now_ms() - rep.t_start_ms < o.duration_ms)) {
        struct leg_plan p;
        struct leg_result res;

        plan_leg(&o, &r, rng, &p);
        rc = rig_leg(&r, &p, &res, &err);
        if (res.skipped) {
            continue;
        }
        n++;
        if (rc < 0) {
            rep.errors++;
            report_problem(&rep, n, err.msg);
            vg_err("leg %u: %s", n, err.msg);
            res.lost = true; /* start over with a new VM */
        } else {
            report_leg(&rep, n, &p, &res);
            log_leg(n, &r, &p, &res);
        }
        if (o.stop_on_failure && !report_passed(&rep)) {
            keep_dir = true;
            break;
        }
        if (after_leg(&o, &r, &rep, rng, &p, &res, &vm_legs, &err) < 0) {
            rep.errors++;
            report_problem(&rep, n, err.msg);
            vg_err("%s", err.msg);
            keep_dir = true;
            break;
        }
        if (n % 10 == 0) {
            printf("vgmig-soak: %u attempts, %u migrations, %u faults "
                   "recovered, %u corruptions, %u leaks\n",
                   n, rep.migrations, rep.recoveries, rep.corruptions,
                   rep.leaks);
            fflush(stdout);
        }
    }
    rep.t_end_ms = vg_now_ms();
    count_work(&rep, &r);
    keep_dir = keep_dir || !report_passed(&rep);
    if (keep_dir) {
        printf("vgmig-soak: logs kept in %s\n", r.dir);
    }
    rig_close(&r, keep_dir);
    g_mkdir_with_parents(o.out, 0755);
    json = g_build_filename(o.out, "report.json", NULL);
    txt = g_build_filename(o.out, "summary.txt", NULL);
    if (report_write_json(&rep, json, &err) < 0) {
        fprintf(stderr, "vgmig-soak: %s\n", err.msg);
    }
    f = fopen(txt, "w");
    if (f) {
        report_print(&rep, f);
        fclose(f);
    }
    report_print(&rep, stdout);
    printf("vgmig-soak: report in %s%s\n", json,
           interrupted ? " (interrupted)" : "");
    rc = report_passed(&rep) ? 0 : 1;
    report_destroy(&rep);
    g_rand_free(rng);
    return rc;
}
