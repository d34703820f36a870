#include "report.h"

#include <errno.h>
#include <json-glib/json-glib.h>
#include <string.h>

#include "qclient/io.h"

#define MAX_PROBLEMS 100

void report_init(struct report *rep, uint64_t seed, const char *vram,
                 const char *page)
{
    memset(rep, 0, sizeof(*rep));
    rep->seed = seed;
    g_strlcpy(rep->vram, vram, sizeof(rep->vram));
    g_strlcpy(rep->page, page, sizeof(rep->page));
    rep->t_start_ms = vg_now_ms();
    rep->downtime_ms = g_array_new(FALSE, FALSE, sizeof(int64_t));
    rep->total_ms = g_array_new(FALSE, FALSE, sizeof(int64_t));
    rep->problems = g_ptr_array_new_with_free_func(g_free);
}

void report_destroy(struct report *rep)
{
    g_array_free(rep->downtime_ms, TRUE);
    g_array_free(rep->total_ms, TRUE);
    g_ptr_array_free(rep->problems, TRUE);
    memset(rep, 0, sizeof(*rep));
}

void report_problem(struct report *rep, unsigned n, const char *what)
{
    if (rep->problems->len < MAX_PROBLEMS) {
        g_ptr_array_add(rep->problems, g_strdup_printf("leg %u: %s", n, what));
    }
}

void report_leg(struct report *rep, unsigned n, const struct leg_plan *p,
                const struct leg_result *res)
{
    rep->t_end_ms = vg_now_ms();
    if (res->skipped) {
        return;
    }
    rep->legs++;
    rep->legs_by_vgpus[MIN(res->vgpus, RIG_MAX_VGPUS)]++;
    rep->migrations_by_vgpus[MIN(res->vgpus, RIG_MAX_VGPUS)] += res->moved;
    if (p->kind != FK_NONE) {
        rep->faults[p->kind][res->phase_seen]++;
    }
    if (!strcmp(res->status, "completed")) {
        rep->outcome[p->kind][0]++;
    } else if (!strcmp(res->status, "failed")) {
        rep->outcome[p->kind][1]++;
    } else if (!strcmp(res->status, "cancelled")) {
        rep->outcome[p->kind][2]++;
    }
    if (res->moved) {
        rep->migrations++;
        rep->postcopy += res->postcopy;
        rep->restored += res->restored;
        if (res->downtime_ms >= 0) {
            g_array_append_val(rep->downtime_ms, res->downtime_ms);
        }
        if (res->total_ms >= 0) {
            g_array_append_val(rep->total_ms, res->total_ms);
        }
    }
    rep->recoveries += res->recovered;
    rep->source_continued += res->source_continued;
    if (res->vfio_bytes > 0) {
        rep->vfio_bytes += res->vfio_bytes;
    }
    if (res->ram_bytes > 0) {
        rep->ram_bytes += res->ram_bytes;
    }
    if (res->corruption) {
        rep->corruptions++;
        report_problem(rep, n, res->corruption_detail);
    }
    if (res->leaks) {
        rep->leaks += res->leaks;
        report_problem(rep, n, res->leak_detail);
    }
    if (res->lost) {
        rep->lost++;
        report_problem(rep, n, res->why[0] ? res->why : "VM lost");
    }
    if (res->stuck) {
        rep->stuck++;
        report_problem(rep, n, "migration did not end in time");
    }
}

bool report_passed(const struct report *rep)
{
    return rep->corruptions == 0 && rep->leaks == 0 && rep->lost == 0 &&
           rep->stuck == 0 && rep->errors == 0;
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

/* Percentile @pct (nearest rank) of @a, -1 if empty. */
static int64_t pctl(GArray *a, unsigned pct)
{
    g_autofree int64_t *v = NULL;
    size_t rank;

    if (a->len == 0) {
        return -1;
    }
    v = g_memdup2(a->data, a->len * sizeof(int64_t));
    qsort(v, a->len, sizeof(int64_t), cmp64);
    rank = (a->len * pct + 99) / 100;
    return v[rank ? rank - 1 : 0];
}

static void add_int(JsonBuilder *b, const char *name, int64_t v)
{
    json_builder_set_member_name(b, name);
    json_builder_add_int_value(b, v);
}

static void add_str(JsonBuilder *b, const char *name, const char *v)
{
    json_builder_set_member_name(b, name);
    json_builder_add_string_value(b, v);
}

static void add_dist(JsonBuilder *b, const char *name, GArray *a)
{
    json_builder_set_member_name(b, name);
    json_builder_begin_object(b);
    add_int(b, "count", a->len);
    add_int(b, "p50", pctl(a, 50));
    add_int(b, "p95", pctl(a, 95));
    add_int(b, "max", pctl(a, 100));
    json_builder_end_object(b);
}

static unsigned fault_total(const struct report *rep, enum fault_kind k)
{
    unsigned n = 0;

    for (int p = 0; p <= PH_COUNT; p++) {
        n += rep->faults[k][p];
    }
    return n;
}

static unsigned faults_all(const struct report *rep)
{
    unsigned n = 0;

    for (int k = FK_NONE + 1; k < FK_COUNT; k++) {
        n += fault_total(rep, k);
    }
    return n;
}

static void add_faults(JsonBuilder *b, const struct report *rep)
{
    json_builder_set_member_name(b, "faults");
    json_builder_begin_object(b);
    for (int k = FK_NONE + 1; k < FK_COUNT; k++) {
        json_builder_set_member_name(b, fault_name(k));
        json_builder_begin_object(b);
        add_int(b, "total", fault_total(rep, k));
        for (int p = 0; p <= PH_COUNT; p++) {
            add_int(b, phase_name(p), rep->faults[k][p]);
        }
        add_int(b, "completed", rep->outcome[k][0]);
        add_int(b, "failed", rep->outcome[k][1]);
        add_int(b, "cancelled", rep->outcome[k][2]);
        if (rep->skipped[k][0]) {
            add_str(b, "skipped", rep->skipped[k]);
        }
        json_builder_end_object(b);
    }
    json_builder_end_object(b);
}

/* "by_vgpus": {"N": {"legs": L, "migrations": M}, ...} for the vGPU
 * counts that ran. */
static void add_by_vgpus(JsonBuilder *b, const struct report *rep)
{
    json_builder_set_member_name(b, "by_vgpus");
    json_builder_begin_object(b);
    for (unsigned n = 0; n <= RIG_MAX_VGPUS; n++) {
        g_autofree char *key = g_strdup_printf("%u", n);

        if (!rep->legs_by_vgpus[n]) {
            continue;
        }
        json_builder_set_member_name(b, key);
        json_builder_begin_object(b);
        add_int(b, "legs", rep->legs_by_vgpus[n]);
        add_int(b, "migrations", rep->migrations_by_vgpus[n]);
        json_builder_end_object(b);
    }
    json_builder_end_object(b);
}

static void print_by_vgpus(const struct report *rep, FILE *out)
{
    fprintf(out, "  by vGPUs per VM:");
    for (unsigned n = 0; n <= RIG_MAX_VGPUS; n++) {
        if (rep->legs_by_vgpus[n]) {
            fprintf(out, "  %u: %u attempts, %u moved", n,
                    rep->legs_by_vgpus[n], rep->migrations_by_vgpus[n]);
        }
    }
    fprintf(out, "\n");
}

int report_write_json(const struct report *rep, const char *path,
                      struct vg_error *err)
{
    JsonBuilder *b = json_builder_new();
    JsonGenerator *g = json_generator_new();
    GError *gerr = NULL;
    JsonNode *root;
    int rc = 0;

    json_builder_begin_object(b);
    add_int(b, "seed", (int64_t)rep->seed);
    add_str(b, "vram", rep->vram);
    add_str(b, "page_size", rep->page);
    add_str(b, "result", report_passed(rep) ? "pass" : "FAIL");
    add_int(b, "duration_s", (rep->t_end_ms - rep->t_start_ms) / 1000);
    add_int(b, "legs", rep->legs);
    add_int(b, "migrations", rep->migrations);
    add_int(b, "postcopy_migrations", rep->postcopy);
    add_int(b, "restored_migrations", rep->restored);
    add_int(b, "vm_boots", rep->generations);
    add_by_vgpus(b, rep);
    add_faults(b, rep);
    add_int(b, "faults_total", faults_all(rep));
    add_int(b, "recoveries", rep->recoveries);
    add_int(b, "source_continued", rep->source_continued);
    add_int(b, "corruptions", rep->corruptions);
    add_int(b, "leaks", rep->leaks);
    add_int(b, "vm_lost", rep->lost);
    add_int(b, "stuck", rep->stuck);
    add_int(b, "errors", rep->errors);
    add_dist(b, "downtime_ms", rep->downtime_ms);
    add_dist(b, "total_ms", rep->total_ms);
    json_builder_set_member_name(b, "bytes");
    json_builder_begin_object(b);
    add_int(b, "device", rep->vfio_bytes);
    add_int(b, "ram", rep->ram_bytes);
    json_builder_end_object(b);
    json_builder_set_member_name(b, "workload");
    json_builder_begin_object(b);
    add_int(b, "batches", rep->batches);
    add_int(b, "commands", rep->commands);
    add_int(b, "cpu_writes", rep->cpu_writes);
    add_int(b, "raced_steps", rep->raced_steps);
    add_int(b, "raced_lost", rep->raced_lost);
    json_builder_end_object(b);
    json_builder_set_member_name(b, "channel");
    json_builder_begin_object(b);
    add_str(b, "namespaces", rep->netns ? "yes" : rep->netns_why);
    add_str(b, "slow_with", rep->netns ? (rep->netem ? "netem" : "tbf") : "");
    json_builder_end_object(b);
    json_builder_set_member_name(b, "problems");
    json_builder_begin_array(b);
    for (guint i = 0; i < rep->problems->len; i++) {
        json_builder_add_string_value(b, rep->problems->pdata[i]);
    }
    json_builder_end_array(b);
    json_builder_end_object(b);
    root = json_builder_get_root(b);
    json_generator_set_root(g, root);
    json_generator_set_pretty(g, TRUE);
    if (!json_generator_to_file(g, path, &gerr)) {
        rc = vg_error_set(err, EIO, "%s: %s", path, gerr->message);
        g_error_free(gerr);
    }
    json_node_unref(root);
    g_object_unref(g);
    g_object_unref(b);
    return rc;
}

static void human_bytes(int64_t v, char *buf, size_t len)
{
    if (v >= (1ll << 30)) {
        g_snprintf(buf, len, "%.2f GiB", v / (double)(1ll << 30));
    } else {
        g_snprintf(buf, len, "%.1f MiB", v / (double)(1 << 20));
    }
}

void report_print(const struct report *rep, FILE *out)
{
    char dev[32], ram[32];
    int64_t secs = (rep->t_end_ms - rep->t_start_ms) / 1000;

    human_bytes(rep->vfio_bytes, dev, sizeof(dev));
    human_bytes(rep->ram_bytes, ram, sizeof(ram));
    fprintf(out, "soak: %s  (seed %" G_GUINT64_FORMAT ", VRAM %s, page %s)\n",
            report_passed(rep) ? "PASS" : "FAIL", rep->seed, rep->vram,
            rep->page);
    fprintf(out,
            "  time %" G_GINT64_FORMAT "m%02" G_GINT64_FORMAT
            "s; %u migration attempts, %u migrations done (VM moved; %u "
            "in post-copy, %u through a save file), %u VM boots\n",
            secs / 60, secs % 60, rep->legs, rep->migrations, rep->postcopy,
            rep->restored, rep->generations);
    print_by_vgpus(rep, out);
    fprintf(out, "  faults injected, by phase they landed in:\n");
    fprintf(out, "    %-16s %6s %6s %6s %6s %6s %6s %6s %6s | %5s %5s %5s\n",
            "kind", "setup", "pre", "stop", "resume", "post", "restor", "none",
            "total", "compl", "fail", "canc");
    for (int k = FK_NONE + 1; k < FK_COUNT; k++) {
        fprintf(out, "    %-16s", fault_name(k));
        for (int p = 0; p <= PH_COUNT; p++) {
            fprintf(out, " %6u", rep->faults[k][p]);
        }
        fprintf(out, " %6u | %5u %5u %5u%s%s\n", fault_total(rep, k),
                rep->outcome[k][0], rep->outcome[k][1], rep->outcome[k][2],
                rep->skipped[k][0] ? "  skipped: " : "", rep->skipped[k]);
    }
    fprintf(out, "    %-16s %55s %6u | %5u %5u %5u\n", "(no fault)", "",
            rep->outcome[FK_NONE][0] + rep->outcome[FK_NONE][1] +
                rep->outcome[FK_NONE][2],
            rep->outcome[FK_NONE][0], rep->outcome[FK_NONE][1],
            rep->outcome[FK_NONE][2]);
    fprintf(out,
            "  recoveries %u (source continued by hand %u); corruptions %u; "
            "leaks %u; VM lost %u; stuck %u; errors %u\n",
            rep->recoveries, rep->source_continued, rep->corruptions,
            rep->leaks, rep->lost, rep->stuck, rep->errors);
    fprintf(out,
            "  downtime ms p50 %" G_GINT64_FORMAT " p95 %" G_GINT64_FORMAT
            " max %" G_GINT64_FORMAT "; total ms p50 %" G_GINT64_FORMAT
            " p95 %" G_GINT64_FORMAT " max %" G_GINT64_FORMAT "\n",
            pctl(rep->downtime_ms, 50), pctl(rep->downtime_ms, 95),
            pctl(rep->downtime_ms, 100), pctl(rep->total_ms, 50),
            pctl(rep->total_ms, 95), pctl(rep->total_ms, 100));
    fprintf(out,
            "  bytes: device %s, RAM %s; workload %" G_GUINT64_FORMAT
            " batches, %" G_GUINT64_FORMAT " commands, %" G_GUINT64_FORMAT
            " CPU writes\n",
            dev, ram, rep->batches, rep->commands, rep->cpu_writes);
    fprintf(out,
            "  CPU writes that raced the stop of a switchover, checked on "
            "the destination: %" G_GUINT64_FORMAT " steps (%" G_GUINT64_FORMAT
            " not whole there)\n",
            rep->raced_steps, rep->raced_lost);
    fprintf(out, "  channel faults: %s\n",
            rep->netns ? (rep->netem ? "namespaces, netem" : "namespaces, tbf")
                       : rep->netns_why);
    for (guint i = 0; i < rep->problems->len; i++) {
        fprintf(out, "  problem: %s\n", (char *)rep->problems->pdata[i]);
    }
}
