/*
 * vgpu-guest -- the in-guest workload and checker of the vgmig vGPU.
 *
 * Runs inside a (TCG) guest as root: finds the vGPU through sysfs, drives
 * it through its BARs and command ring, keeps a model of all of VRAM and
 * checks VRAM against it: a sample after every step, everything on
 * request.  Output lines start with "vgpu-guest: " and are meant to be
 * parsed (see --help and docs/guest.md).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "common/log.h"
#include "gpu.h"
#include "pulse.h"
#include "workload.h"

#define PREFIX "vgpu-guest: "
/* CORRUPT lines printed per full verification. */
#define MAX_REPORTS 32u

struct opts {
    const char *bdf;
    unsigned profiles;
    unsigned interval_ms;
    unsigned heartbeat_ms;
    unsigned pulse_ms;
    unsigned sample;
    unsigned duration_s;
    uint64_t seed;
    bool no_huge;
    bool no_device;
    bool all_devices;
};

/* One vGPU the tool drives, with its model. */
struct unit {
    struct vgg_gpu gpu;
    struct vgg_work work;
    uint64_t sample_next; /* round-robin cursor of the sample */
    uint64_t dma_reported;
};

struct state {
    struct opts o;
    struct unit units[VGG_MAX_DEVICES];
    unsigned nunits;
    uint64_t t0_ms;
    uint64_t sampled, sample_corrupt, verify_corrupt;
    unsigned verifies;
    uint64_t hb_seq, last_hb_ms, max_gap_ms, max_stall_ms;
    char line[256];
    size_t line_len;
    bool stdin_ok;
};

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void usage(FILE *f)
{
    fprintf(
        f,
        "Usage: vgpu-guest [OPTION]...\n"
        "\n"
        "Drive the vgmig vGPU from inside a guest and check that VRAM\n"
        "holds what was written to it, before, during and after live\n"
        "migrations.  Runs as root (sysfs BAR mappings, /proc/self/pagemap).\n"
        "\n"
        "The tool finds the device (PCI %04x:%04x) in /sys/bus/pci/devices,\n"
        "enables memory decoding and bus mastering, maps BAR0 (registers)\n"
        "and BAR2 (VRAM) through the sysfs resource files, puts its command\n"
        "ring and DMA buffers in locked guest RAM whose physical addresses\n"
        "it reads from /proc/self/pagemap, and polls the FENCE register\n"
        "(no interrupts).  It writes an initial content to every 4 KiB page\n"
        "of VRAM and keeps a model of every page: a kind, a generation and\n"
        "parameters from which the page's content is computed, so that any\n"
        "page can be checked at any time.\n"
        "\n"
        "Options:\n"
        "  -p, --profile LIST    workload profiles, comma-separated:\n"
        "                        idle        no writes; sample checks only\n"
        "                        inference   DMA uploads of inputs,\n"
        "                                    SCATTER_ADD over activation\n"
        "                                    rows, DMA read-back of rows\n"
        "                        training    FILL of a gradient, AXPY of a\n"
        "                                    weights chunk, COPY checkpoints,\n"
        "                                    FILL of a scratch slice\n"
        "                        sparse      SCATTER_ADD to a few random rows\n"
        "                        cpu-writes  guest CPU stores through the\n"
        "                                    BAR2 mapping (4-byte stamps and\n"
        "                                    whole pages of 8-byte stores)\n"
        "                        all         every profile but idle\n"
        "                        [default: all]\n"
        "  -d, --device BDF      use PCI device BDF (e.g. 0000:00:02.0)\n"
        "                        instead of the first vGPU found\n"
        "  -a, --all-devices     drive every vGPU found (at most %u), each\n"
        "                        with its own ring, model and workload\n"
        "                        (seed N + its index, in bus order);\n"
        "                        counts and checks cover all of them\n"
        "  -i, --interval MS     at most one workload step every MS\n"
        "                        milliseconds [20]\n"
        "  -b, --heartbeat MS    heartbeat period [250]\n"
        "  -P, --pulse MS        print a pulse line every MS milliseconds\n"
        "                        from a thread of its own, to time pauses\n"
        "                        finely (0: none) [0]\n"
        "  -s, --sample N        pages checked after every step [16]\n"
        "  -t, --duration SEC    stop after SEC seconds (0: run until the\n"
        "                        'quit' command) [0]\n"
        "  -r, --seed N          seed of the random choices [1]\n"
        "  -l, --log-level L     error, warn, info, debug or trace [info]\n"
        "      --no-huge-pages   put the ring and DMA buffers in ordinary\n"
        "                        pages, not a 2 MiB huge page: DMA is then\n"
        "                        split where they are not contiguous and\n"
        "                        the ring has at most 64 entries\n"
        "      --no-device       no vGPU: heartbeats, pulses and commands\n"
        "                        only (a VM without a vGPU, the baseline\n"
        "                        of the pause at a switchover); verify\n"
        "                        checks no page, inject is refused\n"
        "  -h, --help            show this text and exit\n"
        "\n"
        "Commands, one per line on standard input (the serial console):\n"
        "  verify    check every page of VRAM now\n"
        "  status    print a heartbeat line now\n"
        "  inject    self-test of the checker: flip bits of one word of a\n"
        "            page that is never written again, behind the model's\n"
        "            back (on the first vGPU); prints 'injected page=\n"
        "            offset= word= expected= actual= dev=', which the next\n"
        "            verify must report\n"
        "  quit      check every page, print the 'done' line and exit\n"
        "\n"
        "Output (standard output, one line each, parseable as key=value):\n"
        "  vgpu-guest: device dev= bdf= vram= pages= device_page= ring=\n"
        "      huge=   one line per vGPU driven, before ready\n"
        "  vgpu-guest: ready devices= bdf= vram= pages= profiles= init_ms=\n"
        "      bdf is a comma-separated list, vram and pages the totals\n"
        "  vgpu-guest: hb seq= t_ms= steps= cmds= pages_written= cpu_stores=\n"
        "      dma_checks= sampled= corrupt= gap_ms= max_gap_ms= stall_ms=\n"
        "      heartbeats every --heartbeat ms; gap_ms is the guest time\n"
        "      since the previous one, max_gap_ms the longest so far,\n"
        "      stall_ms the longest single pass of the main loop (a\n"
        "      step, its checks and the heartbeat; not the wait)\n"
        "      pulses= pulse_max_gap_us= (0 without --pulse): pulses\n"
        "      printed, the longest guest time between two\n"
        "  vgpu-guest: pulse seq= gap_us=\n"
        "      every --pulse ms; gap_us is the guest time since the\n"
        "      previous pulse\n"
        "  vgpu-guest: verify seq= pages= corrupt= ms=\n"
        "      pages and corrupt count all vGPUs driven\n"
        "  vgpu-guest: CORRUPT check= page= offset= kind= gen= word=\n"
        "      expected= actual= words= dev=\n"
        "      a page that differs from the model: the first differing\n"
        "      32-bit word, expected and actual value, how many words\n"
        "      differ (check is sample, verify or dma)\n"
        "  vgpu-guest: done steps= corrupt= verifies=\n"
        "  vgpu-guest: error: MESSAGE\n"
        "\n"
        "Exit status: 0 no corruption found, 1 corruption found, 2 an\n"
        "error (device error, usage).\n"
        "\n"
        "The guest's clock does not advance while the VM is stopped for a\n"
        "migration's switchover; the pause an outside observer sees is the\n"
        "gap between heartbeat lines as they arrive on the console.\n",
        VGPU_PCI_VENDOR_ID, VGPU_PCI_DEVICE_ID, VGG_MAX_DEVICES);
}

static bool parse_uint(const char *s, unsigned max, unsigned *out)
{
    char *end;
    unsigned long v;

    errno = 0;
    v = strtoul(s, &end, 10);
    if (errno || end == s || *end || v > max) {
        return false;
    }
    *out = (unsigned)v;
    return true;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
    static const struct option longopts[] = {
        {"profile", required_argument, NULL, 'p'},
        {"device", required_argument, NULL, 'd'},
        {"all-devices", no_argument, NULL, 'a'},
        {"interval", required_argument, NULL, 'i'},
        {"heartbeat", required_argument, NULL, 'b'},
        {"pulse", required_argument, NULL, 'P'},
        {"sample", required_argument, NULL, 's'},
        {"duration", required_argument, NULL, 't'},
        {"seed", required_argument, NULL, 'r'},
        {"log-level", required_argument, NULL, 'l'},
        {"no-huge-pages", no_argument, NULL, 'H'},
        {"no-device", no_argument, NULL, 'N'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    enum vg_log_level level;
    unsigned seed;
    int c;

    *o = (struct opts){
        .interval_ms = 20, .heartbeat_ms = 250, .sample = 16, .seed = 1};
    vgg_profiles_parse("all", &o->profiles);
    while ((c = getopt_long(argc, argv, "p:d:ai:b:P:s:t:r:l:h", longopts,
                            NULL)) != -1) {
        bool ok = true;

        switch (c) {
        case 'p':
            ok = vgg_profiles_parse(optarg, &o->profiles);
            break;
        case 'd':
            o->bdf = optarg;
            break;
        case 'a':
            o->all_devices = true;
            break;
        case 'i':
            ok = parse_uint(optarg, 60000, &o->interval_ms);
            break;
        case 'b':
            ok = parse_uint(optarg, 60000, &o->heartbeat_ms) &&
                 o->heartbeat_ms > 0;
            break;
        case 'P':
            ok = parse_uint(optarg, 60000, &o->pulse_ms);
            break;
        case 's':
            ok = parse_uint(optarg, 1u << 20, &o->sample);
            break;
        case 't':
            ok = parse_uint(optarg, 1u << 30, &o->duration_s);
            break;
        case 'r':
            ok = parse_uint(optarg, 0xffffffffu, &seed);
            o->seed = seed;
            break;
        case 'l':
            ok = vg_log_parse_level(optarg, &level);
            if (ok) {
                vg_log_set_level(level);
            }
            break;
        case 'H':
            o->no_huge = true;
            break;
        case 'N':
            o->no_device = true;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return -1;
        }
        if (!ok) {
            fprintf(stderr, "vgpu-guest: bad value '%s' for -%c (see --help)\n",
                    optarg, c);
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "vgpu-guest: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (o->all_devices && (o->bdf || o->no_device)) {
        fprintf(stderr, "vgpu-guest: --all-devices goes with neither "
                        "--device nor --no-device\n");
        return -1;
    }
    return 0;
}

static void report(const char *check, unsigned dev, const struct vgg_page *e,
                   const struct vgg_mismatch *m)
{
    printf(PREFIX "CORRUPT check=%s page=%" PRIu64 " offset=0x%" PRIx64
                  " kind=%s gen=%u word=%u expected=0x%08x actual=0x%08x "
                  "words=%u dev=%u\n",
           check, m->page, m->page * VGG_PAGE_SIZE + m->word * 4u,
           vgg_kind_name(e->kind), e->gen, m->word, m->expected, m->actual,
           m->nwords, dev);
}

/* Check every page of every vGPU; print the result line; the corrupt
 * page count. */
static uint64_t verify_all(struct state *s)
{
    uint64_t t0 = now_ms(), bad = 0, pages = 0;
    struct vgg_mismatch m;

    for (unsigned d = 0; d < s->nunits; d++) {
        const struct vgg_work *w = &s->units[d].work;

        for (uint64_t p = 0; p < w->npages; p++) {
            if (!vgg_work_check(w, p, &m) && bad++ < MAX_REPORTS) {
                report("verify", d, &w->model[p], &m);
            }
        }
        pages += w->npages;
    }
    printf(PREFIX "verify seq=%u pages=%" PRIu64 " corrupt=%" PRIu64
                  " ms=%" PRIu64 "\n",
           s->verifies++, pages, bad, now_ms() - t0);
    s->verify_corrupt += bad;
    return bad;
}

/* The sample of vGPU @d after a step: alternately the next page of a
 * sweep over its VRAM and a random page. */
static void verify_sample(struct state *s, unsigned d)
{
    struct unit *u = &s->units[d];
    struct vgg_mismatch m;

    for (unsigned i = 0; i < s->o.sample; i++) {
        uint64_t p;

        if (i % 2 == 0) {
            p = u->sample_next;
            u->sample_next = (u->sample_next + 1) % u->work.npages;
        } else {
            p = vgg_work_rand(&u->work) % u->work.npages;
        }
        s->sampled++;
        if (!vgg_work_check(&u->work, p, &m) &&
            s->sample_corrupt++ < MAX_REPORTS) {
            report("sample", d, &u->work.model[p], &m);
        }
    }
    while (u->dma_reported < u->work.dma_corrupt) {
        /* Only the first DMA mismatch is kept in detail. */
        if (u->dma_reported++ == 0) {
            report("dma", d, &u->work.model[u->work.dma_first.page],
                   &u->work.dma_first);
        }
    }
}

/* Steps of the busiest profile of the first vGPU (every vGPU makes the
 * same steps). */
static uint64_t total_steps(const struct state *s)
{
    uint64_t n = 0;

    for (unsigned p = 0; s->nunits && p < VGG_P_COUNT; p++) {
        n = s->units[0].work.steps[p] > n ? s->units[0].work.steps[p] : n;
    }
    return n;
}

/* Sums over the vGPUs driven. */
struct totals {
    uint64_t cmds, pages_written, cpu_stores, dma_checks, dma_corrupt;
};

static struct totals totals(const struct state *s)
{
    struct totals t = {0};

    for (unsigned d = 0; d < s->nunits; d++) {
        const struct unit *u = &s->units[d];

        t.cmds += u->gpu.cmds;
        t.pages_written += u->work.pages_written;
        t.cpu_stores += u->work.cpu_stores;
        t.dma_checks += u->work.dma_checks;
        t.dma_corrupt += u->work.dma_corrupt;
    }
    return t;
}

static uint64_t corrupt_total(const struct state *s)
{
    return s->sample_corrupt + s->verify_corrupt + totals(s).dma_corrupt;
}

static void heartbeat(struct state *s, uint64_t now)
{
    uint64_t gap = s->hb_seq ? now - s->last_hb_ms : 0;
    struct totals t = totals(s);
    struct vgg_pulse_stats ps;

    vgg_pulse_stats(&ps);
    s->max_gap_ms = gap > s->max_gap_ms ? gap : s->max_gap_ms;
    printf(PREFIX "hb seq=%" PRIu64 " t_ms=%" PRIu64 " steps=%" PRIu64
                  " cmds=%" PRIu64 " pages_written=%" PRIu64
                  " cpu_stores=%" PRIu64 " dma_checks=%" PRIu64
                  " sampled=%" PRIu64 " corrupt=%" PRIu64 " gap_ms=%" PRIu64
                  " max_gap_ms=%" PRIu64 " stall_ms=%" PRIu64 " pulses=%" PRIu64
                  " pulse_max_gap_us=%" PRIu64 "\n",
           s->hb_seq, now - s->t0_ms, total_steps(s), t.cmds, t.pages_written,
           t.cpu_stores, t.dma_checks, s->sampled, corrupt_total(s), gap,
           s->max_gap_ms, s->max_stall_ms, ps.count, ps.max_gap_us);
    s->hb_seq++;
    s->last_hb_ms = now;
}

static int finish(struct state *s)
{
    uint64_t bad;

    verify_all(s);
    bad = corrupt_total(s);
    printf(PREFIX "done steps=%" PRIu64 " corrupt=%" PRIu64 " verifies=%u\n",
           total_steps(s), bad, s->verifies);
    return bad ? 1 : 0;
}

/* Run command @cmd; true when the tool should stop. */
static bool command(struct state *s, const char *cmd)
{
    if (!strcmp(cmd, "verify")) {
        verify_all(s);
    } else if (!strcmp(cmd, "status")) {
        heartbeat(s, now_ms());
    } else if (!strcmp(cmd, "inject") && s->o.no_device) {
        printf(PREFIX "error: inject needs the vGPU (--no-device)\n");
    } else if (!strcmp(cmd, "inject")) {
        struct vgg_mismatch m;

        vgg_work_inject(&s->units[0].work, &m);
        printf(PREFIX "injected page=%" PRIu64 " offset=0x%" PRIx64
                      " word=%u expected=0x%08x actual=0x%08x dev=0\n",
               m.page, m.page * VGG_PAGE_SIZE + m.word * 4u, m.word, m.expected,
               m.actual);
    } else if (!strcmp(cmd, "quit")) {
        return true;
    } else if (cmd[0]) {
        printf(PREFIX "unknown command '%s' (verify, status, inject, "
                      "quit)\n",
               cmd);
    }
    return false;
}

/* Wait up to @timeout_ms for a command on stdin and run what came; true
 * when the tool should stop. */
static bool poll_commands(struct state *s, int timeout_ms)
{
    struct pollfd pfd = {.fd = STDIN_FILENO, .events = POLLIN};
    char buf[128];
    ssize_t n;

    if (!s->stdin_ok) {
        if (timeout_ms > 0) {
            poll(NULL, 0, timeout_ms);
        }
        return false;
    }
    if (poll(&pfd, 1, timeout_ms) <= 0 || !(pfd.revents & (POLLIN | POLLHUP))) {
        return false;
    }
    n = read(STDIN_FILENO, buf, sizeof(buf));
    if (n <= 0) {
        s->stdin_ok = false; /* end of input: no more commands */
        return false;
    }
    for (ssize_t i = 0; i < n; i++) {
        if (buf[i] == '\n' || buf[i] == '\r') {
            s->line[s->line_len] = '\0';
            s->line_len = 0;
            if (command(s, s->line)) {
                return true;
            }
        } else if (s->line_len + 1 < sizeof(s->line)) {
            s->line[s->line_len++] = buf[i];
        }
    }
    return false;
}

/* Commands arrive as lines; do not echo them back onto the console. */
static void quiet_stdin(void)
{
    struct termios t;

    if (tcgetattr(STDIN_FILENO, &t) == 0) {
        t.c_lflag &= ~(tcflag_t)(ECHO | ECHONL);
        tcsetattr(STDIN_FILENO, TCSANOW, &t);
    }
}

/* One step of every vGPU, each followed by its sample. */
static int step(struct state *s, bool busy, struct vg_error *err)
{
    for (unsigned d = 0; d < s->nunits; d++) {
        struct unit *u = &s->units[d];

        if (busy && vgg_work_step(&u->work, err) < 0) {
            vg_error_prefix(err, "vGPU %u (%s)", d, u->gpu.dev.bdf);
            return -1;
        }
        if (!busy) {
            u->work.steps[VGG_P_IDLE]++;
        }
        verify_sample(s, d);
    }
    return 0;
}

static int run(struct state *s)
{
    bool busy = s->o.profiles & ~(1u << VGG_P_IDLE);
    uint64_t now = now_ms(), next_step = now, next_hb = now;
    struct vg_error err = {0};

    for (;;) {
        uint64_t wake, t;

        now = now_ms();
        if (now >= next_step) {
            if (step(s, busy, &err) < 0) {
                printf(PREFIX "error: %s\n", err.msg);
                return 2;
            }
            next_step = now + (busy ? s->o.interval_ms : s->o.heartbeat_ms);
        }
        if (now >= next_hb) {
            heartbeat(s, now);
            next_hb = next_hb + s->o.heartbeat_ms > now
                          ? next_hb + s->o.heartbeat_ms
                          : now + s->o.heartbeat_ms;
        }
        if (s->o.duration_s &&
            now - s->t0_ms >= (uint64_t)s->o.duration_s * 1000u) {
            return finish(s);
        }
        fflush(stdout);
        wake = next_step < next_hb ? next_step : next_hb;
        t = now_ms();
        /* The loop's work, without its wait for the next step. */
        s->max_stall_ms = t - now > s->max_stall_ms ? t - now : s->max_stall_ms;
        if (poll_commands(s, wake > t ? (int)(wake - t) : 0)) {
            return finish(s);
        }
    }
}

/* --no-device: heartbeats and commands until quit. */
static int run_without_device(struct state *s)
{
    uint64_t next_hb = now_ms();

    for (;;) {
        uint64_t now = now_ms();

        if (now >= next_hb) {
            heartbeat(s, now);
            next_hb = now + s->o.heartbeat_ms;
        }
        if (poll_commands(s, (int)(next_hb - now))) {
            return finish(s);
        }
    }
}

static int start_pulse(const struct state *s)
{
    int rc = s->o.pulse_ms ? vgg_pulse_start(s->o.pulse_ms) : 0;

    if (rc < 0) {
        printf(PREFIX "error: cannot start the pulse thread: %s\n",
               strerror(-rc));
    }
    return rc;
}

/* Open the vGPUs to drive (--device, the first found, or all of them
 * with --all-devices) and lay out their VRAM. */
static int open_units(struct state *s, struct vg_error *err)
{
    char bdfs[VGG_MAX_DEVICES][VGG_BDF_LEN];
    unsigned n = 1;
    int rc = 0;

    if (s->o.all_devices) {
        rc = vgg_pci_find_all(bdfs, VGG_MAX_DEVICES, &n, err);
    } else if (s->o.bdf) {
        snprintf(bdfs[0], sizeof(bdfs[0]), "%s", s->o.bdf);
    } else {
        rc = vgg_pci_find(bdfs[0], sizeof(bdfs[0]), err);
    }
    for (unsigned d = 0; rc == 0 && d < n; d++) {
        struct unit *u = &s->units[d];

        rc = vgg_gpu_open(&u->gpu, bdfs[d], s->o.no_huge, err);
        if (rc == 0) {
            rc = vgg_work_init(&u->work, &u->gpu, s->o.profiles, s->o.seed + d,
                               err);
            if (rc < 0) {
                vgg_gpu_close(&u->gpu); /* the model is freed already */
            }
        }
        if (rc == 0) {
            s->nunits++;
        } else {
            vg_error_prefix(err, "vGPU %u (%s)", d, bdfs[d]);
        }
    }
    return rc;
}

static void close_units(struct state *s)
{
    for (unsigned d = 0; d < s->nunits; d++) {
        vgg_work_free(&s->units[d].work);
        vgg_gpu_close(&s->units[d].gpu);
    }
    s->nunits = 0;
}

/* A device line per vGPU, then the ready line with the totals. */
static void print_ready(const struct state *s)
{
    char names[96], bdfs[VGG_MAX_DEVICES * VGG_BDF_LEN] = "";
    uint64_t vram = 0, pages = 0;

    for (unsigned d = 0; d < s->nunits; d++) {
        const struct unit *u = &s->units[d];

        printf(PREFIX "device dev=%u bdf=%s vram=%" PRIu64 " pages=%" PRIu64
                      " device_page=%u ring=%u huge=%d\n",
               d, u->gpu.dev.bdf, u->gpu.dev.vram_size, u->work.npages,
               u->gpu.dev.page_size, u->gpu.ring_entries,
               u->gpu.dma.huge ? 1 : 0);
        vram += u->gpu.dev.vram_size;
        pages += u->work.npages;
        snprintf(bdfs + strlen(bdfs), sizeof(bdfs) - strlen(bdfs), "%s%s",
                 d ? "," : "", u->gpu.dev.bdf);
    }
    vgg_profiles_format(s->o.profiles, names, sizeof(names));
    printf(PREFIX "ready devices=%u bdf=%s vram=%" PRIu64 " pages=%" PRIu64
                  " device_page=%u ring=%u huge=%d profiles=%s init_ms=%" PRIu64
                  "\n",
           s->nunits, bdfs, vram, pages, s->units[0].gpu.dev.page_size,
           s->units[0].gpu.ring_entries, s->units[0].gpu.dma.huge ? 1 : 0,
           names, now_ms() - s->t0_ms);
}

int main(int argc, char **argv)
{
    static struct state s;
    struct vg_error err = {0};
    int rc;

    vg_log_set_prog("vgpu-guest");
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (parse_opts(argc, argv, &s.o) < 0) {
        return 2;
    }
    s.stdin_ok = true;
    if (isatty(STDIN_FILENO)) {
        quiet_stdin();
    }
    s.t0_ms = now_ms();
    if (s.o.no_device) {
        printf(PREFIX "ready device=none pages=0\n");
        return start_pulse(&s) < 0 ? 2 : run_without_device(&s);
    }
    if (open_units(&s, &err) < 0) {
        printf(PREFIX "error: %s\n", err.msg);
        close_units(&s);
        return 2;
    }
    print_ready(&s);
    if (start_pulse(&s) < 0) {
        close_units(&s);
        return 2;
    }
    s.t0_ms = now_ms();
    verify_all(&s);
    rc = run(&s);
    fflush(stdout);
    close_units(&s);
    return rc;
}
