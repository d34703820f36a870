/*
 * bench-report.c -- vgmig-bench's results: the cells and anchors as JSON,
 * the plot's data, and the Markdown report with the issues' targets.
 */
#include <errno.h>
#include <glib.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <xxhash.h>

#include "common/error.h"
#include "common/median.h"
#include "bench-mig.h"
#include "ram-anchor.h"
#include "report-text.h"
#include "qclient/vfio-trace.h"
#include "vgmig-bench.h"

/* ------------------------------------------------------------- report */

/* Stream throughput for @vram: the idle "ours" cell's pre-copy rate, else
 * the highest rate of any cell of that size. */
static double stream_rate(const struct cell *cells, unsigned n, uint64_t vram)
{
    double best = 0;

    for (unsigned i = 0; i < n; i++) {
        const struct cell *c = &cells[i];

        if (c->vram != vram) {
            continue;
        }
        if (c->wl == WL_IDLE && c->mode == MODE_OURS && c->stream_bps > 0) {
            return c->stream_bps;
        }
        best = MAX(best, c->stream_bps);
    }
    return best;
}

static double floor_ms(const struct cell *c, double rate)
{
    return rate > 0 && c->final_dirty >= 0
               ? (double)c->final_dirty * 1000.0 / rate
               : -1;
}

/* The verified RAM anchor of @size in @an, or NULL. */
static const struct ram_anchor *find_anchor(const struct anchors *an,
                                            uint64_t size)
{
    for (unsigned i = 0; i < an->n; i++) {
        if (an->a[i].size == size && an->a[i].verified) {
            return &an->a[i];
        }
    }
    return NULL;
}

/* The RAM anchor's throughput for @size; 0 without one. */
double ram_rate(const struct anchors *an, uint64_t size)
{
    const struct ram_anchor *a = find_anchor(an, size);

    return a ? ram_anchor_bps(a) : 0;
}

/* The slowest verified RAM anchor's throughput; 0 without one. */
double ram_rate_min(const struct anchors *an)
{
    double min = 0;

    for (unsigned i = 0; i < an->n; i++) {
        double bps = an->a[i].verified ? ram_anchor_bps(&an->a[i]) : 0;

        if (bps > 0 && (min == 0 || bps < min)) {
            min = bps;
        }
    }
    return min;
}

static void json_cell(GString *js, const struct cell *c, double rate,
                      double ram)
{
    g_autofree char *error = report_json_text(c->error);

    g_string_append_printf(
        js,
        "  {\"workload\": \"%s\", \"vram_bytes\": %" PRIu64
        ", \"vgpus\": %u, \"mode\": \"%s\", \"precopy\": \"%s\", "
        "\"dirty_track\": \"%s\", \"channels\": %u, "
        "\"downtime_limit_ms\": %" PRId64 ", "
        "\"downtime_ms\": %" PRId64 ", \"downtime_trace_ms\": %.3f, "
        "\"device_stopcopy_ms\": %.3f, "
        "\"stopcopy_read_ms\": %.3f, \"total_ms\": %" PRId64
        ", \"setup_ms\": %" PRId64 ", \"bytes_sent\": %" PRId64
        ", \"precopy_bytes\": %" PRId64 ", \"stopcopy_bytes\": %" PRId64
        ", \"nonzero_vram_bytes\": %" PRIu64 ", \"final_dirty_bytes\": %" PRId64
        ", \"stream_bytes_per_s\": %.0f, \"cell_precopy_bytes_per_s\": %.0f, "
        "\"floor_ms\": %.3f, \"ram_anchor_bytes_per_s\": %.0f, "
        "\"floor_ram_ms\": %.3f, \"stopcopy_estimate_bytes\": %" PRId64
        ", \"rounds\": %" PRId64 ", \"throttle\": %" PRId64
        ", \"cpu_writes_before_stop\": %" PRIu64
        ", \"cpu_writes_uncertain\": %" PRIu64 ", \"cpu_writes_per_s\": %.0f"
        ", \"postcopy_bytes\": %" PRId64 ", \"postcopy_ms\": %.3f"
        ", \"precopy_reads\": %" PRId64 ", \"precopy_read_ms\": %.3f"
        ", \"load_writes\": %" PRId64 ", \"load_write_ms\": %.3f"
        ", \"reg_read_before_us\": %.1f, \"reg_reads\": %u"
        ", \"reg_read_p50_us\": %.1f, \"reg_read_p90_us\": %.1f"
        ", \"reg_read_p99_us\": %.1f, \"fence_before_us\": %.1f"
        ", \"fences\": %u, \"fence_p50_us\": %.1f, \"fence_p90_us\": %.1f"
        ", \"fence_p99_us\": %.1f, \"forced\": %s, \"verified\": %s, "
        "\"error\": \"%s\", \"downtime_points_ms\": {",
        wl_names[c->wl], c->vram, c->vgpus, modes[c->mode].name,
        modes[c->mode].precopy, modes[c->mode].track, c->channels,
        c->dt_limit_ms, c->downtime_ms, c->downtime_trace_ms, c->stopcopy_ms,
        c->stopcopy_read_ms, c->total_ms, c->setup_ms, c->bytes_sent,
        c->precopy_bytes, c->stopcopy_bytes, c->vram * c->vgpus, c->final_dirty,
        rate, c->stream_bps, floor_ms(c, rate), ram, floor_ms(c, ram),
        c->estimate, c->rounds, c->throttle, c->cpu_writes, c->cpu_uncertain,
        c->cpu_rate, c->postcopy_bytes, c->postcopy_ms, c->reads, c->read_ms,
        c->writes, c->write_ms, c->reg.before_us, c->reg.n, c->reg.p50_us,
        c->reg.p90_us, c->reg.p99_us, c->fence.before_us, c->fence.n,
        c->fence.p50_us, c->fence.p90_us, c->fence.p99_us,
        c->forced ? "true" : "false", c->verified ? "true" : "false", error);
    for (unsigned p = 0; p < VG_DOWNTIME_POINTS; p++) {
        g_string_append_printf(js, "%s\"%s\": %.3f", p ? ", " : "",
                               vg_downtime_points[p], c->point_ms[p]);
    }
    g_string_append(js, "}}");
}

static int write_file(const char *path, const GString *s, struct vg_error *err)
{
    GError *gerr = NULL;

    if (!g_file_set_contents(path, s->str, (gssize)s->len, &gerr)) {
        vg_error_set(err, EIO, "cannot write %s: %s", path, gerr->message);
        g_error_free(gerr);
        return -EIO;
    }
    return 0;
}

static void json_anchor(GString *js, const struct ram_anchor *a)
{
    g_autofree char *error = report_json_text(a->error);

    g_string_append_printf(
        js,
        "  {\"ram_bytes\": %" PRIu64
        ", \"channels\": %u, \"max_bandwidth\": %" PRId64
        ", \"prealloc\": %s, \"total_ms\": %" PRId64 ", \"setup_ms\": %" PRId64
        ", \"downtime_ms\": %" PRId64 ", \"transferred_bytes\": %" PRId64
        ", \"bytes_per_s\": %.0f, "
        "\"active_bytes_per_s\": %.0f, \"checksum\": \"%016" PRIx64
        "\", \"verified\": %s, \"error\": \"%s\"}",
        a->size, a->channels, a->max_bandwidth, a->prealloc ? "true" : "false",
        a->total_ms, a->setup_ms, a->downtime_ms, a->ram_bytes,
        ram_anchor_bps(a), a->active_bps, a->checksum,
        a->verified ? "true" : "false", error);
}

/* OUT/ram-anchor.json: the RAM anchors. */
static int write_anchor_json(const struct bench_opts *o,
                             const struct anchors *an, struct vg_error *err)
{
    g_autofree char *path =
        g_build_filename(o->out_dir, "ram-anchor.json", NULL);
    GString *js = g_string_new("[\n");
    int ret;

    for (unsigned i = 0; i < an->n; i++) {
        json_anchor(js, &an->a[i]);
        g_string_append(js, i + 1 < an->n ? ",\n" : "\n");
    }
    g_string_append(js, "]\n");
    ret = write_file(path, js, err);
    g_string_free(js, TRUE);
    return ret;
}

static int write_json(const struct bench_opts *o, const struct cell *cells,
                      unsigned n, const struct anchors *an,
                      struct vg_error *err)
{
    g_autofree char *path = g_build_filename(o->out_dir, "results.json", NULL);
    GString *js = g_string_new("[\n");
    int ret;

    for (unsigned i = 0; i < n; i++) {
        json_cell(js, &cells[i], stream_rate(cells, n, cells[i].vram),
                  ram_rate(an, cells[i].vram));
        g_string_append(js, i + 1 < n ? ",\n" : "\n");
    }
    g_string_append(js, "]\n");
    ret = write_file(path, js, err);
    g_string_free(js, TRUE);
    return ret < 0 ? ret : write_anchor_json(o, an, err);
}

/* downtime.dat: one block per mode (workload idle and inference, the
 * series of the plot): "MiB downtime_ms stopcopy_ms". */
static int write_plot_data(const struct bench_opts *o, const struct cell *cells,
                           unsigned n, struct vg_error *err)
{
    g_autofree char *path = g_build_filename(o->out_dir, "downtime.dat", NULL);
    GString *s = g_string_new("");
    int ret;

    for (unsigned w = 0; w < 2; w++) {
        for (unsigned m = 0; m < MODE_COUNT; m++) {
            g_string_append_printf(s, "# %s %s\n", wl_names[w], modes[m].name);
            for (unsigned i = 0; i < n; i++) {
                const struct cell *c = &cells[i];

                if (c->wl == w && c->mode == m && c->downtime_ms >= 0) {
                    g_string_append_printf(s, "%" PRIu64 " %" PRId64 " %.3f\n",
                                           c->vram >> 20, c->downtime_ms,
                                           c->stopcopy_ms);
                }
            }
            g_string_append(s, "\n\n");
        }
    }
    ret = write_file(path, s, err);
    g_string_free(s, TRUE);
    return ret;
}

static const struct cell *find_cell(const struct cell *cells, unsigned n,
                                    enum workload wl, uint64_t vram,
                                    unsigned mode)
{
    for (unsigned i = 0; i < n; i++) {
        if (cells[i].wl == wl && cells[i].vram == vram &&
            cells[i].mode == mode && cells[i].verified) {
            return &cells[i];
        }
    }
    return NULL;
}

static void md_size(GString *s, uint64_t v)
{
    if (v >= (1ull << 30)) {
        g_string_append_printf(s, "%" PRIu64 " GiB", v >> 30);
    } else {
        g_string_append_printf(s, "%" PRIu64 " MiB", v >> 20);
    }
}

/* Bytes the cell moved (its stream and its post-copy pages) over VRAM. */
static double wire_over_vram(const struct cell *c)
{
    return (double)(c->bytes_sent + c->postcopy_bytes) /
           (double)(c->vram * c->vgpus);
}

static void md_row(GString *s, const struct cell *c, double rate)
{
    g_string_append_printf(s, "| %s | ", wl_names[c->wl]);
    md_size(s, c->vram);
    if (!c->verified) {
        g_autofree char *why = report_md_cell(c->error);

        g_string_append_printf(s, " | %s | failed: %s | | | | | | | | | |\n",
                               modes[c->mode].name, why);
        return;
    }
    g_string_append_printf(
        s,
        " | %s | %" PRId64 " | %.1f | %.1f | %" PRId64
        " | %.2f | %.1f | %.1f / %.1f | %" PRId64 " | %" PRId64 "%% | %s |\n",
        modes[c->mode].name, c->downtime_ms, c->stopcopy_ms, floor_ms(c, rate),
        c->total_ms, wire_over_vram(c), (double)c->final_dirty / (1 << 20),
        (double)c->estimate / (1 << 20), (double)c->stopcopy_bytes / (1 << 20),
        c->rounds, c->throttle, c->forced ? "yes" : "no");
}

static void md_table(GString *s, const struct cell *cells, unsigned n)
{
    g_string_append(
        s, "| workload | VRAM | mode | downtime ms (QEMU) | device stop-copy "
           "ms | floor ms | total ms | wire / VRAM | final dirty MiB | "
           "stop-copy estimate / sent MiB | rounds | throttle | forced |\n"
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for (unsigned i = 0; i < n; i++) {
        md_row(s, &cells[i], stream_rate(cells, n, cells[i].vram));
    }
}

static void md_ratio(GString *s, const struct cell *ours,
                     const struct cell *base)
{
    if (!base) {
        g_string_append(s, " n/a |");
        return;
    }
    g_string_append_printf(
        s, " %.3g / %.3g / %.3g |",
        (double)ours->downtime_ms / (double)MAX(base->downtime_ms, 1),
        ours->stopcopy_ms / MAX(base->stopcopy_ms, 0.001),
        (double)ours->bytes_sent / (double)MAX(base->bytes_sent, 1));
}

static void md_ratios(GString *s, const struct cell *cells, unsigned n)
{
    g_string_append(s, "\nRatios of ours to each baseline (downtime / device "
                       "stop-copy / bytes on the wire; below 1 means ours is "
                       "lower):\n\n| workload | VRAM | vs stop-copy | vs "
                       "precopy-notrack | vs gmig |\n|---|---|---|---|---|\n");
    for (unsigned i = 0; i < n; i++) {
        const struct cell *o = &cells[i];

        if (o->mode != MODE_OURS || !o->verified) {
            continue;
        }
        g_string_append_printf(s, "| %s | ", wl_names[o->wl]);
        md_size(s, o->vram);
        g_string_append(s, " |");
        for (unsigned m = 0; m < MODE_OURS; m++) {
            md_ratio(s, o, find_cell(cells, n, o->wl, o->vram, m));
        }
        g_string_append(s, "\n");
    }
}

static void md_rates(GString *s, const struct cell *cells, unsigned n,
                     const struct bench_opts *o)
{
    g_string_append(
        s, "\nStream throughput per VRAM size, measured in this run: the "
           "growth of query-migrate's vfio transferred bytes (the device's; "
           "ram transferred counts every byte of the stream, so it is not "
           "added) between the first and the last 'active' sample of the "
           "idle/ours cell of "
           "that size (its pre-copy, which streams VRAM as fast as the "
           "channel goes).  The floor of a cell is its final dirty bytes "
           "divided by it.\n\n");
    for (unsigned i = 0; i < o->nsizes; i++) {
        g_string_append(s, "- ");
        md_size(s, o->sizes[i]);
        g_string_append_printf(s, ": %.0f MiB/s\n",
                               stream_rate(cells, n, o->sizes[i]) / (1 << 20));
    }
}

/* " V |" with @prec decimals, or " - |" when @v < 0 (not measured). */
static void md_num(GString *s, double v, int prec)
{
    if (v < 0) {
        g_string_append(s, " - |");
    } else {
        g_string_append_printf(s, " %.*f |", prec, v);
    }
}

static double mib(double bytes)
{
    return bytes / (1 << 20);
}

static void md_anchor_row(GString *s, const struct ram_anchor *a)
{
    g_string_append(s, "| ");
    md_size(s, a->size);
    g_string_append_printf(s, " | %u |", a->channels);
    if (!a->verified) {
        g_autofree char *why = report_md_cell(a->error);

        g_string_append_printf(s, " failed: %s | | | | | |\n", why);
        return;
    }
    g_string_append_printf(
        s, " %.0f | %.0f | %" PRId64 " | %" PRId64 " | %" PRId64 " | %.1f |\n",
        mib(ram_anchor_bps(a)), mib(a->active_bps), a->total_ms, a->setup_ms,
        a->downtime_ms, mib((double)a->ram_bytes));
}

static void md_anchors(GString *s, const struct anchors *an)
{
    g_string_append(
        s, "\n## Against QEMU's RAM migration (RAM anchor)\n\n"
           "Before the cells of each size, the same run migrates a VM "
           "without a vGPU whose guest RAM has that size, with the same "
           "QEMU, capabilities, parameters and channels as the vGPU cells, "
           "twice; the faster verified run is the anchor (runs vary by "
           "about 15 % here, and the strongest baseline counts).  "
           "Every 8 bytes of its RAM are non-zero (written through the "
           "memfd that backs guest RAM, before the migration), so every "
           "page goes in full; the destination's RAM, read back the same "
           "way, has the source's XXH3-64 checksum.  RAM MiB/s, the anchor, "
           "is query-migrate's ram.transferred over its total-time; active "
           "MiB/s is the growth of ram.transferred between the first and "
           "the last 'active' sample, the way the device's pre-copy rate is "
           "taken.\n\n| RAM | channels | RAM MiB/s | active MiB/s | total ms "
           "| setup ms | downtime ms | transferred MiB |\n"
           "|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (unsigned i = 0; i < an->n; i++) {
        md_anchor_row(s, &an->a[i]);
    }
}

/* The device's stop-copy throughput: stop-copy bytes over the device's
 * stop-copy time; -1 if it moved less than RATE_MIN_BYTES. */
static double stopcopy_bps(const struct cell *c)
{
    return c->stopcopy_bytes >= RATE_MIN_BYTES && c->stopcopy_ms > 0
               ? (double)c->stopcopy_bytes * 1000.0 / c->stopcopy_ms
               : -1;
}

/* @v / @ram, -1 unless both were measured. */
static double over(double v, double ram)
{
    return v > 0 && ram > 0 ? v / ram : -1;
}

/* Idle cells: total time over the time the RAM anchor's throughput
 * needs for VRAM's bytes; -1 for the others. */
static double idle_vs_ram(const struct cell *c, double ram)
{
    if (c->wl != WL_IDLE || ram <= 0 || c->total_ms <= 0) {
        return -1;
    }
    return (double)c->total_ms / ((double)c->vram * 1000.0 / ram);
}

static void md_vs_ram_row(GString *s, const struct cell *c, double ram)
{
    double pre = c->stream_bps > 0 ? c->stream_bps : -1;
    double sc = stopcopy_bps(c);

    g_string_append_printf(s, "| %s | ", wl_names[c->wl]);
    md_size(s, c->vram);
    g_string_append_printf(s, " | %s |", modes[c->mode].name);
    md_num(s, pre > 0 ? mib(pre) : -1, 0);
    md_num(s, over(pre, ram), 3);
    md_num(s, sc > 0 ? mib(sc) : -1, 0);
    md_num(s, over(sc, ram), 3);
    md_num(s, floor_ms(c, ram), 1);
    md_num(s, idle_vs_ram(c, ram), 2);
    g_string_append(s, "\n");
}

/* The RAM anchors and every verified cell against its size's. */
static void md_vs_ram(GString *s, const struct cell *cells, unsigned n,
                      const struct anchors *an)
{
    if (an->n == 0) {
        g_string_append(s, "\nNo RAM anchor in this run "
                           "(--no-ram-anchor).\n");
        return;
    }
    md_anchors(s, an);
    g_string_append(
        s, "\nEach verified cell against the RAM anchor of its size: the "
           "device's pre-copy rate (as in the stream throughput above) and "
           "its stop-copy rate (stop-copy bytes over device stop-copy ms), "
           "each also over RAM MiB/s (/ RAM; 1 is the speed of QEMU's RAM "
           "path); the floor at the RAM rate, final dirty bytes over RAM "
           "MiB/s (what the stop-copy would take if the device's data moved "
           "like RAM); and for idle cells the total time over the time RAM "
           "MiB/s needs for VRAM's bytes.  With more than one channel QEMU "
           "moves the device's stop-copy data over multifd from its own "
           "threads, so the device can have handed all of it over before it "
           "is on the wire: QEMU's downtime in the first table bounds that "
           "rate too.  - : not measured (no pre-copy, "
           "less than 1 MiB sent in stop-copy, not idle, or no anchor).\n\n"
           "| workload | VRAM | mode | pre-copy MiB/s | / RAM | stop-copy "
           "MiB/s | / RAM | floor at RAM rate ms | total / (VRAM / RAM) |\n"
           "|---|---|---|---:|---:|---:|---:|---:|---:|\n");
    for (unsigned i = 0; i < n; i++) {
        if (cells[i].verified) {
            md_vs_ram_row(s, &cells[i], ram_rate(an, cells[i].vram));
        }
    }
}

/* The mean time inside one request, "-" without any. */
static void md_per_request(GString *s, int64_t count, double ms)
{
    md_num(s, count > 0 && ms >= 0 ? ms / (double)count : -1, 3);
}

/* The share (%) of @c's active phase (from setup's end to the downtime)
 * that @ms of one device's requests fill, "-" without a pre-copy. */
static void md_busy(GString *s, const struct cell *c, double ms)
{
    int64_t active = c->total_ms - c->setup_ms - c->downtime_ms;
    bool precopy = c->precopy_bytes > 0 && active > 0 && ms >= 0;

    md_num(s, precopy ? 100 * ms / c->vgpus / active : -1, 0);
}

static void md_server_rows(GString *s, const struct cell *cells, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        const struct cell *c = &cells[i];

        if (!c->verified || c->reads <= 0) {
            continue;
        }
        g_string_append_printf(s, "| %s | ", wl_names[c->wl]);
        md_size(s, c->vram);
        g_string_append_printf(s, " | %u | %s | %" PRId64 " |", c->vgpus,
                               modes[c->mode].name, c->reads);
        md_per_request(s, c->reads, c->read_ms);
        md_busy(s, c, c->read_ms);
        g_string_append_printf(s, " %" PRId64 " |", MAX(c->writes, 0));
        md_per_request(s, c->writes, c->write_ms);
        md_busy(s, c, c->write_ms);
        g_string_append(s, "\n");
    }
}

/* The servers' time inside each data request of the verified cells with
 * pre-copy (@cells, then the several-vGPU cells @multi). */
static void md_server_time(GString *s, const struct cell *cells, unsigned n,
                           const struct cell *multi, unsigned nmulti)
{
    g_string_append(
        s, "\n## The servers' time per data request\n\nThe source servers' "
           "pre-copy reads (`precopy_reads` of their statistics) and the "
           "destination servers' writes of the load (`load_writes`), with "
           "the mean time a server spent inside one (`precopy_read_ms`, "
           "`load_write_ms`; several vGPUs: all devices' requests).  QEMU "
           "asks for the next read as soon as one returns, so where ms per "
           "read times reads is close to the pre-copy's time, the source "
           "server sets the pace of its device's data.  \"Busy\" is that "
           "time, per device, over the migration's active phase (its total "
           "less setup and downtime; the writes include stop-copy's): well "
           "under 100 %, the servers waited for QEMU.\n\n"
           "| workload | VRAM | vGPUs | mode | reads | ms per read | busy % "
           "| writes | ms per write | busy % |\n"
           "|---|---|---:|---|---:|---:|---:|---:|---:|---:|\n");
    md_server_rows(s, cells, n);
    md_server_rows(s, multi, nmulti);
}

/* The rows of the probe @fence (else the register reads) of @cells. */
static void md_probe_rows(GString *s, const struct cell *cells, unsigned n,
                          bool fence)
{
    for (unsigned i = 0; i < n; i++) {
        const struct cell *c = &cells[i];
        const struct probe_result *p = fence ? &c->fence : &c->reg;

        if (!c->verified || p->n == 0) {
            continue;
        }
        g_string_append_printf(s, "| %s | ", wl_names[c->wl]);
        md_size(s, c->vram);
        g_string_append_printf(s, " | %u | %s |", c->vgpus,
                               modes[c->mode].name);
        md_num(s, p->before_us, 0);
        g_string_append_printf(s, " %u |", p->n);
        md_num(s, p->p50_us, 0);
        md_num(s, p->p90_us, 0);
        md_num(s, p->p99_us, 0);
        g_string_append(s, "\n");
    }
}

/* The table of the probe @fence (else the register reads), @cells then
 * the several-vGPU cells @multi, under its heading and text @intro. */
static void md_probe_table(GString *s, const char *intro,
                           const struct cell *cells, unsigned n,
                           const struct cell *multi, unsigned nmulti,
                           bool fence)
{
    g_string_append_printf(
        s,
        "%s\n\n| workload | VRAM | vGPUs | mode | before, median us | %s "
        "while active | median us | 90th percentile us | 99th percentile "
        "us |\n|---|---|---:|---|---:|---:|---:|---:|---:|\n",
        intro, fence ? "fences" : "reads");
    md_probe_rows(s, cells, n, fence);
    md_probe_rows(s, multi, nmulti, fence);
}

/* How long the guest waited for a register read before and while the
 * device's data moved (@cells, then the several-vGPU cells @multi). */
static void md_reg_reads(GString *s, const struct cell *cells, unsigned n,
                         const struct cell *multi, unsigned nmulti)
{
    g_autofree char *intro = g_strdup_printf(
        "\n## The guest's register reads while the data moves\n\nThe "
        "first vGPU's STATUS register read through qtest, as a guest's MMIO "
        "read goes (QEMU, the vfio-user socket, the server), timed by the "
        "bench: %u reads a millisecond apart before the migration (their "
        "median), then %u at every poll while it was active, that is in "
        "pre-copy, and for the poll that falls into the switchover, inside "
        "the downtime.  The server's control loop serves them beside a data "
        "request its data plane's thread is serving; with --no-data-plane "
        "a read that comes during one waits for it.",
        PROBE_BEFORE, PROBE_PER_TICK);

    md_probe_table(s, intro, cells, n, multi, nmulti, false);
}

/* How long the guest waited for a command before and while the device's
 * data moved (@cells, then the several-vGPU cells @multi). */
static void md_fences(GString *s, const struct cell *cells, unsigned n,
                      const struct cell *multi, unsigned nmulti)
{
    g_autofree char *intro = g_strdup_printf(
        "\n## The guest's commands while the data moves\n\nIn the cells "
        "whose workload leaves the engines idle (idle, cpu-writes, "
        "cpu-heavy), the bench submits a FENCE command to the first vGPU "
        "through qtest and reads its FENCE register until the command is "
        "done: a command's round trip as a guest's driver waits for one.  "
        "%u a millisecond apart before the migration (their median), then "
        "one at every poll while it was active (one not done within %d ms, "
        "a device stopped for the switchover, is not timed).  With the "
        "device's own thread (vgpu-server's default) the command runs "
        "while a pre-copy read is being served; with --no-device-thread it "
        "waits for the read.",
        FENCE_BEFORE, FENCE_TIMEOUT_MS);

    md_probe_table(s, intro, cells, n, multi, nmulti, true);
}

/* One issue target: @ok, with what was measured. */
static void md_target(GString *s, const char *what, int ok, const char *got)
{
    g_string_append_printf(s, "- %s: **%s** (%s)\n", what,
                           ok < 0 ? "not measured"
                           : ok   ? "met"
                                  : "missed",
                           got);
}

static void md_target_idle(GString *s, const struct cell *ours)
{
    g_autofree char *got =
        ours ? g_strdup_printf("%.2f ms", ours->stopcopy_ms) : g_strdup("-");

    md_target(s, "idle 4 GiB device stop-copy <= 5 ms",
              ours ? ours->stopcopy_ms <= 5.0 : -1, got);
}

static void md_target_infer(GString *s, const struct cell *ours,
                            const struct cell *sc, const struct cell *gm,
                            double rate)
{
    double fl = ours ? floor_ms(ours, rate) : -1;
    g_autofree char *g1 =
        ours ? g_strdup_printf("%.2f ms, floor %.2f ms", ours->stopcopy_ms, fl)
             : g_strdup("-");
    g_autofree char *g2 =
        ours && sc ? g_strdup_printf("%.1fx", sc->stopcopy_ms /
                                                  MAX(ours->stopcopy_ms, 1e-3))
                   : g_strdup("-");
    g_autofree char *g3 =
        ours && gm ? g_strdup_printf("%.1fx", gm->stopcopy_ms /
                                                  MAX(ours->stopcopy_ms, 1e-3))
                   : g_strdup("-");

    md_target(s, "inference 4 GiB stop-copy <= 1.3 x floor + 5 ms",
              ours ? ours->stopcopy_ms <= 1.3 * fl + 5 : -1, g1);
    md_target(s, "inference 4 GiB stop-copy >= 20x lower than stop-and-copy",
              ours && sc ? sc->stopcopy_ms >= 20 * ours->stopcopy_ms : -1, g2);
    md_target(s, "inference 4 GiB stop-copy >= 5x lower than gMig-style",
              ours && gm ? gm->stopcopy_ms >= 5 * ours->stopcopy_ms : -1, g3);
}

static void md_target_wire(GString *s, const struct cell *cells, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        const struct cell *c = &cells[i];
        g_autofree char *what = NULL;
        g_autofree char *got = NULL;
        double bound;

        if (c->mode != MODE_OURS || c->wl > WL_INFER || !c->verified) {
            continue;
        }
        bound = 1.15 * (double)(c->vram + (uint64_t)MAX(c->final_dirty, 0));
        what = g_strdup_printf("%s %" PRIu64 " MiB bytes on the wire <= 1.15 x "
                               "(non-zero VRAM + final dirty)",
                               wl_names[c->wl], c->vram >> 20);
        got = g_strdup_printf("%.3f x", (double)c->bytes_sent / (bound / 1.15));
        md_target(s, what, (double)c->bytes_sent <= bound, got);
    }
}

/* Whether stop-copy sent at most 1.2 x the last estimate + 1 MiB. */
static bool estimate_held(const struct cell *c)
{
    return c->stopcopy_bytes * 10 <= c->estimate * 12 + 10 * EST_SLACK;
}

/* Whether QEMU kept its downtime limit (+ DT_SLACK_MS) when it switched
 * over by itself. */
static bool downtime_held(const struct cell *c)
{
    return c->forced || c->downtime_ms <= c->dt_limit_ms + DT_SLACK_MS;
}

/* The estimate and downtime targets over all cells: the ones that held
 * (*@est_ok, *@dt_ok) of the verified ones (*@n_est) and of those QEMU
 * switched over by itself (*@n_dt). */
static void count_bounds(const struct cell *cells, unsigned n, unsigned *est_ok,
                         unsigned *n_est, unsigned *dt_ok, unsigned *n_dt)
{
    *est_ok = *n_est = *dt_ok = *n_dt = 0;
    for (unsigned i = 0; i < n; i++) {
        if (!cells[i].verified) {
            continue;
        }
        (*n_est)++;
        *est_ok += estimate_held(&cells[i]);
        *n_dt += !cells[i].forced;
        *dt_ok += !cells[i].forced && downtime_held(&cells[i]);
    }
}

static void md_target_bounds(GString *s, const struct cell *cells, unsigned n)
{
    unsigned est_ok, n_est, dt_ok, n_dt;
    g_autofree char *g1 = NULL;
    g_autofree char *g2 = NULL;

    count_bounds(cells, n, &est_ok, &n_est, &dt_ok, &n_dt);
    g1 = g_strdup_printf("held in %u of %u cells", est_ok, n_est);
    g2 = g_strdup_printf("held in %u of %u cells QEMU switched over by itself",
                         dt_ok, n_dt);
    md_target(s,
              "every cell: stop-copy bytes sent <= 1.2 x the last "
              "estimate + 1 MiB",
              n_est ? est_ok == n_est : -1, g1);
    md_target(s, "QEMU downtime <= downtime-limit + 50 ms when not forced",
              n_dt ? dt_ok == n_dt : -1, g2);
    for (unsigned i = 0; i < n; i++) {
        const struct cell *c = &cells[i];

        if (c->verified && (!estimate_held(c) || !downtime_held(c))) {
            g_string_append_printf(
                s,
                "  - missed by %s %" PRIu64 " MiB %s: estimate %.1f MiB, "
                "sent %.1f MiB, downtime %" PRId64 " ms\n",
                wl_names[c->wl], c->vram >> 20, modes[c->mode].name,
                (double)c->estimate / (1 << 20),
                (double)c->stopcopy_bytes / (1 << 20), c->downtime_ms);
        }
    }
}

/* What the guest CPU writers did in each of their cells. */
static void md_cpu_writes(GString *s, const struct cell *cells, unsigned n)
{
    g_string_append(s, "\nGuest CPU writes through BAR2 (cpu-writes, "
                       "cpu-heavy): writes made before QEMU's STOP event, "
                       "all found on the destination; those in flight at "
                       "the stop or after it (either way allowed); the rate "
                       "the writer achieved.\n\n| workload | VRAM | mode | "
                       "before the stop | in flight or after | writes/s |\n"
                       "|---|---|---|---:|---:|---:|\n");
    for (unsigned i = 0; i < n; i++) {
        const struct cell *c = &cells[i];

        if ((c->wl != WL_CPU && c->wl != WL_CPU_HEAVY) || !c->verified) {
            continue;
        }
        g_string_append_printf(s, "| %s | ", wl_names[c->wl]);
        md_size(s, c->vram);
        g_string_append_printf(
            s, " | %s | %" PRIu64 " | %" PRIu64 " | %.0f |\n",
            modes[c->mode].name, c->cpu_writes, c->cpu_uncertain, c->cpu_rate);
    }
}

/* The lowest downtime of a verified pre-copy cell (any mode but
 * post-copy) of @c's workload and size; NULL if none. */
static const struct cell *best_precopy(const struct cell *cells, unsigned n,
                                       const struct cell *c)
{
    const struct cell *best = NULL;

    for (unsigned m = 0; m < MODE_POSTCOPY; m++) {
        const struct cell *o = find_cell(cells, n, c->wl, c->vram, m);

        if (o && (!best || o->downtime_ms < best->downtime_ms)) {
            best = o;
        }
    }
    return best;
}

static void md_postcopy_row(GString *s, const struct cell *cells, unsigned n,
                            const struct cell *c, const struct cell *idle)
{
    const struct cell *pre = best_precopy(cells, n, c);
    const struct cell *sc = find_cell(cells, n, c->wl, c->vram, MODE_STOPCOPY);

    g_string_append_printf(s, "| %s | ", wl_names[c->wl]);
    md_size(s, c->vram);
    g_string_append_printf(s, " | %" PRId64 " |", c->downtime_ms);
    if (idle) {
        g_string_append_printf(s, " %+" PRId64 " |",
                               c->downtime_ms - idle->downtime_ms);
    } else {
        g_string_append(s, " - |");
    }
    if (pre) {
        g_string_append_printf(s, " %" PRId64 " (%s) |", pre->downtime_ms,
                               modes[pre->mode].name);
    } else {
        g_string_append(s, " - |");
    }
    md_num(s, sc ? (double)sc->downtime_ms : -1, 0);
    g_string_append_printf(s, " %.3f | %.0f | %" PRId64 " |\n",
                           wire_over_vram(c), c->postcopy_ms, c->total_ms);
}

/* Post-copy cells against the best pre-copy and stop-and-copy of the same
 * workload and size, and the targets for them. */
static void md_postcopy(GString *s, const struct cell *cells, unsigned n)
{
    g_autofree char *got_worst = NULL, *got_most = NULL;
    int within = -1, bytes = -1;
    int64_t worst = 0;
    double most = 0;

    g_string_append(
        s, "\n## Post-copy\n\nThe postcopy cells turn postcopy-ram on and "
           "send migrate-start-postcopy right after migrate (at the first "
           "iteration QEMU switches over): the destination runs while its "
           "server fetches the "
           "pages from the source's page server, those the VM touches "
           "first on demand (docs/postcopy.md).  Against each cell: the "
           "idle post-copy cell of its size, the pre-copy mode with the "
           "lowest downtime, and stop-and-copy.  Bytes are the stream's and "
           "the page channel's; pages ms is the destination's time from "
           "the end of the load to the last page.\n\n| workload | VRAM | "
           "downtime ms | - idle's | best pre-copy downtime ms | stop-copy "
           "downtime ms | bytes / VRAM | pages ms | total ms |\n"
           "|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (unsigned i = 0; i < n; i++) {
        const struct cell *c = &cells[i];
        const struct cell *idle =
            find_cell(cells, n, WL_IDLE, c->vram, MODE_POSTCOPY);

        if (c->mode != MODE_POSTCOPY || !c->verified) {
            continue;
        }
        md_postcopy_row(s, cells, n, c, idle);
        if (idle) {
            worst = MAX(worst, c->downtime_ms - idle->downtime_ms);
            within = worst <= 20;
        }
        most = MAX(most, wire_over_vram(c));
        bytes = most <= 1.05;
    }
    got_worst = g_strdup_printf("worst %+" PRId64 " ms", worst);
    got_most = g_strdup_printf("at most %.3f", most);
    g_string_append(s, "\n");
    md_target(s,
              "post-copy downtime within 20 ms of the idle VM's, whatever "
              "the workload",
              within, got_worst);
    md_target(s, "total bytes moved <= 1.05 x VRAM", bytes, got_most);
}

/* Issue 15's throughput and time targets at the size of @c, an idle
 * ours cell: its device pre-copy rate at least the RAM anchor's, and its
 * total time at most 1.3 x the time the anchor's rate needs for VRAM. */
static void md_target_idle_ram(GString *s, const struct cell *c,
                               const struct anchors *an)
{
    double ram = ram_rate(an, c->vram);
    double r = over(c->stream_bps, ram), t = idle_vs_ram(c, ram);
    g_autofree char *w1 = g_strdup_printf(
        "device pre-copy >= 1.0 x RAM at %" PRIu64 " MiB", c->vram >> 20);
    g_autofree char *w2 = g_strdup_printf(
        "idle %" PRIu64 " MiB total time <= 1.3 x (VRAM / RAM rate)",
        c->vram >> 20);
    g_autofree char *g1 = r > 0 ? g_strdup_printf("%.3f x", r) : g_strdup("-");
    g_autofree char *g2 = t > 0 ? g_strdup_printf("%.2f x", t) : g_strdup("-");

    md_target(s, w1, r > 0 ? r >= 1.0 : -1, g1);
    md_target(s, w2, t > 0 ? t <= 1.3 : -1, g2);
}

/* Issue 15's stop-copy target over every verified ours cell that moved
 * pages in its stop-copy: device stop-copy <= 1.3 x its floor at the RAM
 * anchor's rate + 5 ms.  Names the cell furthest over or nearest. */
static void md_target_stopcopy_ram(GString *s, const struct cell *cells,
                                   unsigned n, const struct anchors *an)
{
    const struct cell *worst = NULL;
    double worst_over = 0;
    unsigned held = 0, all = 0;
    g_autofree char *got = NULL;

    for (unsigned i = 0; i < n; i++) {
        const struct cell *c = &cells[i];
        double fl = floor_ms(c, ram_rate(an, c->vram));

        if (c->mode != MODE_OURS || !c->verified || c->vgpus != 1 ||
            c->final_dirty < RATE_MIN_BYTES || fl < 0) {
            continue;
        }
        all++;
        held += c->stopcopy_ms <= 1.3 * fl + 5;
        if (!worst || c->stopcopy_ms - (1.3 * fl + 5) > worst_over) {
            worst = c;
            worst_over = c->stopcopy_ms - (1.3 * fl + 5);
        }
    }
    got = worst
              ? g_strdup_printf("held in %u of %u cells; furthest: %s %" PRIu64
                                " MiB, %.1f ms against %.1f ms",
                                held, all, wl_names[worst->wl],
                                worst->vram >> 20, worst->stopcopy_ms,
                                worst->stopcopy_ms - worst_over)
              : g_strdup("-");
    md_target(s,
              "device stop-copy <= 1.3 x final dirty / RAM rate + 5 ms "
              "(ours, every cell that moved pages)",
              all ? held == all : -1, got);
}

/* Issue 15's targets against the RAM anchors of the same run (the issue
 * names 1 and 4 GiB here, 16 GiB on the GPU machine: every size run). */
static void md_targets_ram(GString *s, const struct cell *cells, unsigned n,
                           const struct anchors *an)
{
    if (an->n == 0) {
        return;
    }
    g_string_append(s, "\nTargets of the parallel data path (issue 15), "
                       "against the RAM anchors above:\n\n");
    for (unsigned i = 0; i < n; i++) {
        const struct cell *c = &cells[i];

        if (c->wl == WL_IDLE && c->mode == MODE_OURS && c->vgpus == 1 &&
            c->verified) {
            md_target_idle_ram(s, c, an);
        }
    }
    md_target_stopcopy_ram(s, cells, n, an);
}

static void md_targets(GString *s, const struct cell *cells, unsigned n)
{
    uint64_t g4 = 4ull << 30;
    const struct cell *oi = find_cell(cells, n, WL_INFER, g4, MODE_OURS);

    g_string_append(s, "\n## Targets from the issue\n\n");
    md_target_idle(s, find_cell(cells, n, WL_IDLE, g4, MODE_OURS));
    md_target_infer(s, oi, find_cell(cells, n, WL_INFER, g4, MODE_STOPCOPY),
                    find_cell(cells, n, WL_INFER, g4, MODE_GMIG),
                    stream_rate(cells, n, g4));
    md_target_wire(s, cells, n);
    md_target_bounds(s, cells, n);
}

/* /proc/loadavg when the run began. */
static char load0[64] = "unknown";

void report_note_load(void)
{
    g_autofree char *text = NULL;

    if (g_file_get_contents("/proc/loadavg", &text, NULL, NULL)) {
        g_auto(GStrv) f = g_strsplit(text, " ", 4);

        if (f[0] && f[1] && f[2]) {
            g_snprintf(load0, sizeof(load0), "%s %s %s", f[0], f[1], f[2]);
        }
    }
}

/* The host's shmem_enabled setting, the one in brackets (g_free()). */
static char *shmem_thp(void)
{
    g_autofree char *text = NULL;
    char *open, *close;

    if (!g_file_get_contents("/sys/kernel/mm/transparent_hugepage/"
                             "shmem_enabled",
                             &text, NULL, NULL) ||
        !(open = strchr(text, '[')) || !(close = strchr(open, ']'))) {
        return g_strdup("unknown");
    }
    return g_strndup(open + 1, close - open - 1);
}

static void md_machine(GString *s)
{
    g_autofree char *cpu = NULL;
    g_autofree char *model = NULL;
    g_autofree char *thp = shmem_thp();
    struct utsname u;
    char *p;

    if (g_file_get_contents("/proc/cpuinfo", &cpu, NULL, NULL) &&
        (p = strstr(cpu, "model name")) && (p = strchr(p, ':'))) {
        model = g_strndup(p + 2, strcspn(p + 2, "\n"));
    }
    uname(&u);
    g_string_append_printf(s,
                           "Machine: %s, %ld CPUs online, %s %s; QEMU "
                           "-accel qtest, migration over TCP loopback.  "
                           "Load average when the run began: %s.  Huge "
                           "pages for shared memory (/sys/kernel/mm/"
                           "transparent_hugepage/shmem_enabled): %s; where "
                           "`never`, every mapping of VRAM and of guest RAM "
                           "is of 4 KiB pages (docs/operations.md, "
                           "Tuning).\n\n",
                           model ? model : "unknown CPU",
                           sysconf(_SC_NPROCESSORS_ONLN), u.sysname, u.release,
                           load0, thp);
}

/* How --channels @n migrates, for the report (g_free()). */
static char *channels_text(unsigned n)
{
    return n > 1 ? g_strdup_printf("%u channels (capability multifd, "
                                   "multifd-channels %u, on both sides)",
                                   n, n)
                 : g_strdup("one channel (multifd off)");
}

/* The backends one side's servers were given with --@opt, if any. */
static void md_backends(GString *s, const char *side, const char *opt,
                        const struct backends *b)
{
    if (b->n) {
        g_string_append_printf(s,
                               "The %s vgpu-servers run with --backend %s "
                               "(--%s; a VM's vGPUs take them in turn).  ",
                               side, b->text, opt);
    }
}

static void md_method(GString *s, const struct bench_opts *o)
{
    g_autofree char *ch = channels_text(o->channels);

    if (o->prealloc) {
        g_string_append(s, "With --prealloc: every vgpu-server preallocates "
                           "its VRAM (--prealloc) and every QEMU, the cells' "
                           "and the RAM anchors', its guest RAM "
                           "(prealloc=on).  ");
    }
    if (o->no_data_plane) {
        g_string_append(s, "With --no-data-plane: every vgpu-server serves "
                           "the data requests on its control loop "
                           "(--no-data-plane).  ");
    }
    if (o->no_device_thread) {
        g_string_append(s, "With --no-device-thread: every vgpu-server steps "
                           "its device on the thread that served the last "
                           "request (--no-device-thread).  ");
    }
    if (o->no_data_vram) {
        g_string_append(s, "With --no-data-vram: every vgpu-server copies "
                           "the stop-copy's pages into its shared area "
                           "(--no-data-vram).  ");
    }
    if (o->place_data) {
        g_string_append(s, "With --place-data: every source QEMU sends "
                           "the pages it takes from VRAM (stop-copy's, and "
                           "pre-copy's from a version 3 server) with their "
                           "place, which the destination's QEMU receives "
                           "there, in its view of VRAM populated during the "
                           "pre-copy (x-migration-place-data=on on both).  ");
    }
    md_backends(s, "source's", "src-backend", &o->src_backends);
    md_backends(s, "destination's", "dst-backend", &o->dst_backends);

    g_string_append_printf(
        s,
        "Each cell starts two vgpu-servers (page size %" PRIu64
        " KiB) and two QEMUs "
        "(%d MiB guest RAM; like the RAM anchors' QEMUs, with "
        "suppress-vmdesc=on, docs/operations.md), fills all of VRAM with "
        "non-zero patterns "
        "(so non-zero VRAM = VRAM size), starts the workload and migrates "
        "with max-bandwidth %" PRIu64 " MiB/s, downtime-limit %d ms, "
        "avail-switchover-bandwidth 0 (QEMU decides the switchover) over "
        "%s.  A "
        "cell not completed %d ms after QEMU has sent one VRAM's worth of "
        "device data (at once for stop-copy, which has no pre-copy), or "
        "after %d ms + %d ms per GiB of VRAM (or + the time of %d passes "
        "at the RAM anchor's throughput, if longer) at the latest, gets "
        "downtime-limit %d ms and avail-switchover-bandwidth 10 GiB/s "
        "(forced = yes).  Workloads, driven through qtest from the bench "
        "process every 20 ms while the migration is active: idle (no "
        "writes); inference (SCATTER_ADD over a 64 MiB activation buffer "
        "at the end of VRAM, resubmitted whenever the device is idle); "
        "training (FILL of a quarter of VRAM per step, next quarter each "
        "step, whenever idle); sparse (SCATTER_ADD of %u random 64 KiB "
        "pages per second); cpu-writes (%u 4-byte guest-CPU writes per "
        "second anywhere in VRAM through BAR2); cpu-heavy (%u guest-CPU "
        "writes per second asked for, of 8 to 64 bytes, %u%% in a 4 MiB "
        "hot set and the rest anywhere, %u%% across a 64 KiB page "
        "boundary; pipelined qtest writes, so the rate achieved is lower "
        "and reported below; in post-copy cells one write at a time, "
        "since the source's VRAM is served after the stop while the "
        "writes in flight may still land there).  The CPU writers record "
        "every write against QEMU's STOP event (qclient/cpu-writer.h): "
        "the destination's VRAM checksum must name VRAM as filled plus "
        "every write made before the stop.  VRAM sizes above ",
        o->track_page >> 10, GUEST_RAM_MIB, o->max_bandwidth >> 20,
        (int)o->dt_limit_ms, ch, FORCE_AFTER_MS, FORCE_BASE_MS,
        FORCE_PER_GIB_MS, FORCE_PASSES, FORCE_DT_MS, SPARSE_RATE, CPU_RATE,
        HEAVY_RATE, HEAVY_HOT_PCT, HEAVY_STRADDLE);
    md_size(s, o->big_limit);
    g_string_append(
        s, " run the idle and inference workloads only (time box).  "
           "Downtime is QEMU's query-migrate downtime, device stop-copy is "
           "the source server's device_stopcopy_ms, wire / VRAM is the "
           "server's bytes_sent over the VRAM size; the floor is "
           "final_dirty_bytes over the stream throughput.  Every cell's "
           "VRAM checksums (source after stop-copy, destination after load) "
           "matched unless marked failed.\n\n");
}

/* The --append files, verbatim. */
static int md_appendix(GString *s, const struct bench_opts *o,
                       struct vg_error *err)
{
    if (o->nappend > 0) {
        g_string_append(s, "\n## Measured by the same `make bench` run\n");
    }
    for (unsigned i = 0; i < o->nappend; i++) {
        g_autofree char *text = NULL;
        g_autofree char *name = g_path_get_basename(o->append[i]);
        GError *gerr = NULL;

        if (!g_file_get_contents(o->append[i], &text, NULL, &gerr)) {
            vg_error_set(err, EIO, "--append %s: %s", o->append[i],
                         gerr->message);
            g_error_free(gerr);
            return -EIO;
        }
        g_string_append_printf(s, "\n%s:\n\n```\n%s%s```\n", name, text,
                               g_str_has_suffix(text, "\n") ? "" : "\n");
    }
    return 0;
}

/* Sections measured elsewhere (the GPU runs) follow this line in the
 * report; a new report keeps them. */
#define DOC_KEEP_MARK "<!-- vgmig-bench keeps what follows -->"

/* The kept tail of the existing report @path, from DOC_KEEP_MARK on. */
static void md_kept(GString *s, const char *path)
{
    g_autofree char *old = NULL;
    const char *mark;

    if (g_file_get_contents(path, &old, NULL, NULL) &&
        (mark = strstr(old, DOC_KEEP_MARK)) != NULL) {
        g_string_append_printf(s, "\n%s", mark);
    }
}

static void md_multi(GString *s, const struct cell *cells, unsigned n);

static int write_doc(const struct bench_opts *o, const struct cell *cells,
                     unsigned n, const struct cell *multi, unsigned nmulti,
                     const struct anchors *an, double wall_s,
                     struct vg_error *err)
{
    GString *s = g_string_new("# vgmig live-migration benchmark\n\n");
    int ret;

    g_string_append_printf(s,
                           "Generated by build/vgmig-bench from its own run "
                           "(%u cells and %u RAM anchors, %.0f s).  Reproduce "
                           "with:\n\n    %s\n\n",
                           n, an->n, wall_s,
                           o->cmdline ? o->cmdline : "make bench");
    md_machine(s);
    md_method(s, o);
    md_table(s, cells, n);
    md_ratios(s, cells, n);
    md_rates(s, cells, n, o);
    md_vs_ram(s, cells, n, an);
    md_server_time(s, cells, n, multi, nmulti);
    md_reg_reads(s, cells, n, multi, nmulti);
    md_fences(s, cells, n, multi, nmulti);
    md_targets_ram(s, cells, n, an);
    md_cpu_writes(s, cells, n);
    md_targets(s, cells, n);
    md_postcopy(s, cells, n);
    md_multi(s, multi, nmulti);
    g_string_append(s, "\nPlot: benchmarks-downtime.png (downtime against "
                       "VRAM size per mode, idle and inference).\n\n"
                       "![downtime against VRAM size]"
                       "(benchmarks-downtime.png)\n");
    ret = md_appendix(s, o, err);
    md_kept(s, o->doc);
    if (ret == 0) {
        ret = write_file(o->doc, s, err);
    }
    g_string_free(s, TRUE);
    return ret;
}

/* Final dirty MiB per vGPU from @lo (inclusive) to @hi (exclusive); a
 * cell that does not know its own is in only the range of everything. */
struct dirty_range {
    double lo, hi;
};
static const struct dirty_range ANY_DIRTY = {-1, INFINITY};

static double dirty_per_vgpu(const struct cell *c)
{
    return c->final_dirty < 0 ? -1
                              : (double)c->final_dirty / c->vgpus / (1 << 20);
}

/* The median downtime of the verified --multi-vgpu cells of @wl with
 * @vgpus vGPUs and final dirty data in @range: to the microsecond if every
 * one has it (*@traced), else QEMU's whole ms; -1 if there is none.
 * *@runs: how many. */
static double multi_median(const struct cell *cells, unsigned n,
                           enum workload wl, unsigned vgpus,
                           struct dirty_range range, bool *traced,
                           unsigned *runs)
{
    double trace[MAX_MULTI_CELLS], whole[MAX_MULTI_CELLS], *v;
    unsigned k = 0;

    *traced = true;
    for (unsigned i = 0; i < n; i++) {
        const struct cell *c = &cells[i];
        double dirty = dirty_per_vgpu(c);

        if (c->wl == wl && c->vgpus == vgpus && c->verified &&
            dirty >= range.lo && dirty < range.hi) {
            *traced = *traced && c->downtime_trace_ms >= 0;
            trace[k] = c->downtime_trace_ms;
            whole[k++] = (double)c->downtime_ms;
        }
    }
    *runs = k;
    if (!k) {
        return -1;
    }
    v = *traced ? trace : whole;
    return vg_median(v, k);
}

/* The median final dirty MiB per vGPU of the verified --multi-vgpu cells
 * of @wl with @vgpus vGPUs (what each device had left for its stop-copy);
 * -1 if there is none. */
static double multi_dirty_median(const struct cell *cells, unsigned n,
                                 enum workload wl, unsigned vgpus)
{
    double v[MAX_MULTI_CELLS];
    unsigned k = 0;

    for (unsigned i = 0; i < n; i++) {
        const struct cell *c = &cells[i];

        if (c->wl == wl && c->vgpus == vgpus && c->verified &&
            c->final_dirty >= 0) {
            v[k++] = dirty_per_vgpu(c);
        }
    }
    return k ? vg_median(v, k) : -1;
}

/* The most final dirty MiB per vGPU of a verified cell of @wl; -1 if none
 * knows it. */
static double multi_dirty_max(const struct cell *cells, unsigned n,
                              enum workload wl)
{
    double most = -1;

    for (unsigned i = 0; i < n; i++) {
        if (cells[i].wl == wl && cells[i].verified) {
            most = MAX(most, dirty_per_vgpu(&cells[i]));
        }
    }
    return most;
}

/*
 * Two vGPUs over one among cells that had like amounts of final dirty data
 * per vGPU: where a workload's stop sometimes falls in a clean window, the
 * medians over all cells compare stops with different amounts of data.
 * The cells with at least half the workload's most and those with less,
 * each where both sides have one.
 */
static void md_multi_like(GString *s, const struct cell *cells, unsigned n,
                          enum workload wl)
{
    double half = multi_dirty_max(cells, n, wl) / 2;
    const struct dirty_range ranges[] = {{half, INFINITY}, {0, half}};
    const char *names[] = {"at least", "less than"};

    if (half < 0.5) {
        return; /* nothing dirty to speak of anywhere */
    }
    g_string_append_printf(s, "  - like for like (%s):", wl_names[wl]);
    for (unsigned i = 0; i < G_N_ELEMENTS(ranges); i++) {
        bool t1, tn;
        unsigned r1, rn;
        double one = multi_median(cells, n, wl, 1, ranges[i], &t1, &r1);
        double many =
            multi_median(cells, n, wl, MULTI_VGPUS, ranges[i], &tn, &rn);

        g_string_append_printf(s, "%s %s %.1f MiB dirty per vGPU, ",
                               i ? ";" : "", names[i], half);
        if (one < 0 || many < 0) {
            g_string_append(s, one < 0 && many < 0 ? "no cell"
                               : one < 0           ? "no cell with one vGPU"
                                                   : "no cell with several");
            continue;
        }
        g_string_append_printf(s, "%.3f / %.3f ms (%u and %u runs) = %.2f",
                               many, one, rn, r1,
                               many / MAX(one, t1 && tn ? 1e-3 : 1));
    }
    g_string_append(s, "\n");
}

/* The median of checkpoint @point (ms after src-downtime-start) over the
 * verified cells of @wl with @vgpus vGPUs that traced it; -1 if none. */
static double point_median(const struct cell *cells, unsigned n,
                           enum workload wl, unsigned vgpus, unsigned point)
{
    double v[MAX_MULTI_CELLS];
    unsigned k = 0;

    for (unsigned i = 0; i < n; i++) {
        const struct cell *c = &cells[i];

        if (c->wl == wl && c->vgpus == vgpus && c->verified &&
            c->point_ms[point] >= 0) {
            v[k++] = c->point_ms[point];
        }
    }
    return k ? vg_median(v, k) : -1;
}

/* Where the downtime went with one vGPU and with MULTI_VGPUS: the median
 * of each checkpoint both QEMUs traced, after the source's start. */
static void md_multi_points(GString *s, const struct cell *cells, unsigned n,
                            enum workload wl)
{
    g_autoptr(GString) line = g_string_new("");

    for (unsigned p = 1; p < VG_DOWNTIME_POINTS; p++) {
        double one = point_median(cells, n, wl, 1, p);
        double many = point_median(cells, n, wl, MULTI_VGPUS, p);

        if (one >= 0 && many >= 0) {
            g_string_append_printf(line, "%s %s %.3f / %.3f",
                                   line->len ? "," : "", vg_downtime_points[p],
                                   one, many);
        }
    }
    if (line->len) {
        g_string_append_printf(s,
                               "  - where it went (%s), median ms after "
                               "src-downtime-start with one / %d vGPUs:%s\n",
                               wl_names[wl], MULTI_VGPUS, line->str);
    }
}

/* The section of the --multi-vgpu cells: each cell, and per workload the
 * median downtime of MULTI_VGPUS vGPUs over that of one against the
 * target, with the final dirty data per vGPU each side had to move. */
static void md_multi(GString *s, const struct cell *cells, unsigned n)
{
    if (!n) {
        return;
    }
    g_string_append_printf(
        s,
        "\n## Several vGPUs per VM\n\nA VM with %d vGPUs of the same VRAM "
        "(a vgpu-server each, the same workload on each, mode ours) "
        "against one with one vGPU (`--multi-vgpu`), in turn, "
        "`--multi-rounds` times.  Downtime: QEMU's, in whole ms from "
        "query-migrate and to the microsecond from its "
        "vmstate_downtime_checkpoint trace points (src-downtime-start to "
        "src-downtime-end); \"where it went\": the median time of each "
        "checkpoint of both QEMUs after src-downtime-start (one host's "
        "clock).  Device stop-copy: the longest device's; final "
        "dirty: per vGPU, the mean of the devices' final dirty bytes (what "
        "each had left to move in its stop-copy; a workload's varies with "
        "where the stop falls); bytes: all devices'.\n\n| workload | VRAM per "
        "vGPU | vGPUs | downtime ms (QEMU) | downtime ms (trace) | device "
        "stop-copy ms | final dirty MiB per vGPU | total ms | bytes on the "
        "wire | forced |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n",
        MULTI_VGPUS);
    for (unsigned i = 0; i < n; i++) {
        const struct cell *c = &cells[i];

        g_string_append_printf(s, "| %s | ", wl_names[c->wl]);
        md_size(s, c->vram);
        g_string_append_printf(
            s,
            " | %u | %" PRId64 " | %.3f | %.1f | %.1f | %" PRId64 " | %" PRId64
            " | %s |\n",
            c->vgpus, c->downtime_ms, c->downtime_trace_ms, c->stopcopy_ms,
            (double)MAX(c->final_dirty, 0) / c->vgpus / (1 << 20), c->total_ms,
            c->bytes_sent,
            !c->verified ? "failed"
            : c->forced  ? "yes"
                         : "no");
    }
    g_string_append(s, "\n");
    for (unsigned w = 0; w < WL_COUNT; w++) {
        bool t1, tn;
        unsigned r1, rn;
        double one = multi_median(cells, n, w, 1, ANY_DIRTY, &t1, &r1);
        double many =
            multi_median(cells, n, w, MULTI_VGPUS, ANY_DIRTY, &tn, &rn);
        double ratio;

        if (one < 0 || many < 0) {
            continue;
        }
        ratio = many / MAX(one, t1 && tn ? 1e-3 : 1);
        g_string_append_printf(
            s,
            "- %s: median downtime with %d vGPUs / with one: %.3f / %.3f ms "
            "(%s, %u and %u runs) = %.2f (target <= %.1f: %s); median final "
            "dirty per vGPU %.1f / %.1f MiB\n",
            wl_names[w], MULTI_VGPUS, many, one,
            t1 && tn ? "trace points" : "QEMU's whole ms", rn, r1, ratio,
            MULTI_TARGET, ratio <= MULTI_TARGET ? "met" : "missed",
            multi_dirty_median(cells, n, w, MULTI_VGPUS),
            multi_dirty_median(cells, n, w, 1));
        md_multi_like(s, cells, n, w);
        md_multi_points(s, cells, n, w);
    }
}

static int write_multi_json(const struct bench_opts *o,
                            const struct cell *cells, unsigned n,
                            struct vg_error *err)
{
    g_autofree char *path =
        g_build_filename(o->out_dir, "results-multi.json", NULL);
    GString *js = g_string_new("[\n");
    int ret;

    for (unsigned i = 0; i < n; i++) {
        json_cell(js, &cells[i], 0, 0);
        g_string_append(js, i + 1 < n ? ",\n" : "\n");
    }
    g_string_append(js, "]\n");
    ret = write_file(path, js, err);
    g_string_free(js, TRUE);
    return ret;
}

static void print_ratios(const struct cell *cells, unsigned n,
                         const struct cell *multi, unsigned nmulti,
                         const struct anchors *an)
{
    GString *s = g_string_new("");

    md_ratios(s, cells, n);
    md_vs_ram(s, cells, n, an);
    md_server_time(s, cells, n, multi, nmulti);
    md_reg_reads(s, cells, n, multi, nmulti);
    md_fences(s, cells, n, multi, nmulti);
    fputs(s->str, stdout);
    g_string_free(s, TRUE);
}

void print_cell(const struct cell *c)
{
    printf("%-10s %5" PRIu64 "M %-16s downtime %6" PRId64
           " ms, stop-copy %9.2f ms, total %6" PRId64 " ms (setup %" PRId64
           "), wire %.2fx, estimate/sent %.1f/%.1f MiB%s, rounds %" PRId64
           ", throttle %" PRId64 "%%%s%s\n",
           wl_names[c->wl], c->vram >> 20, modes[c->mode].name, c->downtime_ms,
           c->stopcopy_ms, c->total_ms, c->setup_ms, wire_over_vram(c),
           (double)c->estimate / (1 << 20),
           (double)c->stopcopy_bytes / (1 << 20),
           estimate_held(c) ? "" : " (over)", c->rounds, c->throttle,
           c->forced ? " forced" : "", c->verified ? "" : " FAILED");
    fflush(stdout);
}

void print_anchor(const struct ram_anchor *a)
{
    printf("ram-anchor %6" PRIu64 "M channels %-3u    total %6" PRId64
           " ms, downtime %4" PRId64 " ms, setup %3" PRId64
           " ms, RAM %.1f MiB, %.0f MiB/s (active %.0f MiB/s)%s\n",
           a->size >> 20, a->channels, a->total_ms, a->downtime_ms, a->setup_ms,
           mib((double)a->ram_bytes), mib(ram_anchor_bps(a)),
           mib(a->active_bps), a->verified ? "" : " FAILED");
    fflush(stdout);
}

int report_write(const struct bench_opts *o, const struct cell *cells,
                 unsigned n, const struct cell *multi, unsigned nmulti,
                 const struct anchors *an, double seconds, struct vg_error *err)
{
    int ret = write_json(o, cells, n, an, err);

    if (ret == 0) {
        ret = write_plot_data(o, cells, n, err);
    }
    if (ret == 0 && nmulti) {
        ret = write_multi_json(o, multi, nmulti, err);
    }
    if (ret == 0 && o->doc) {
        ret = write_doc(o, cells, n, multi, nmulti, an, seconds, err);
    }
    return ret;
}

void report_print_summary(const struct cell *cells, unsigned n,
                          const struct cell *multi, unsigned nmulti,
                          const struct anchors *an)
{
    unsigned est_ok, n_est, dt_ok, n_dt;

    print_ratios(cells, n, multi, nmulti, an);
    if (nmulti) {
        GString *ms = g_string_new("");

        md_multi(ms, multi, nmulti);
        fputs(ms->str, stdout);
        g_string_free(ms, TRUE);
    }
    count_bounds(cells, n, &est_ok, &n_est, &dt_ok, &n_dt);
    printf("vgmig-bench: stop-copy sent <= 1.2 x estimate + 1 MiB in %u of "
           "%u cells; downtime <= downtime-limit + %d ms in %u of %u cells "
           "not forced\n",
           est_ok, n_est, DT_SLACK_MS, dt_ok, n_dt);
}
