/*
 * test-mig-fault-matrix -- every fault kind in every migration phase.
 *
 * One test case per cell /mig/fault-matrix/<kind>/<phase>, each on a
 * fresh rig (tests/soak/rig.h: sides A and B, a vgpu-server and a QEMU
 * each, the VM with a VRAM model and a workload) with 4 MiB of VRAM.
 * Kinds: cancel, kill-dst-qemu, kill-dst-server, kill-src-server,
 * drop-link, slow-link, corrupt-stream; phases: setup, pre-copy,
 * stop-copy, resume, post-copy (rig.h says how each is reached
 * deterministically: pause-before-switchover for stop-copy, a
 * destination started with -S for resume, migrate-start-postcopy with
 * QEMU's post-copy RAM rate held down for post-copy, where a dropped link
 * pauses both sides and the rig recovers them with migrate-recover and
 * migrate with resume, as `virsh migrate --postcopy-resume` does), and
 * restore (the VM saved with "migrate file:" and restored on the other
 * side with "migrate-incoming file:", its server slowed so that the fault
 * lands while VRAM still comes from the file; a destination killed then
 * leaves the source to go on, a source server killed then changes
 * nothing: the restore needs only the file).  Every cell
 * asserts the outcome: the migration's final status, the side the VM runs on
 * (exactly one: query-status of both), the phase the fault landed in, all of
 * VRAM and the DMA buffer equal to the model, the servers' checksums equal
 * after a switchover, and no process, socket file, fd or memfd left over.  A
 * migration after the fault must then succeed.  Cells that cannot apply are
 * skipped with the reason (g_test_skip, shown by prove); link faults need root.
 *
 * Cells /mig/fault-matrix/2-vgpus/<kind>/<phase> do the same with a VM
 * of two vGPUs (a server, workload and model each) where the fault hits
 * one device only, the second: its destination server is killed, or its
 * source server corrupts its stream, while the first migrates normally.
 * The outcome must be the same as with one vGPU: the migration fails and
 * the VM runs on at the source with both vGPUs intact (all of VRAM and
 * the DMA buffer of each equal to its model, FENCE, registers answering),
 * or it completes with both vGPUs intact where one vGPU's cell does; and
 * then a clean migration of the VM with both succeeds.
 *
 * Corruption offsets come from the stream of a clean migration of the
 * same VM (idle, so its stream has the same length every time): the
 * header (setup), the first MiB (sent while the migration is held in
 * pre-copy), the DEVICE_STATE record (stop-copy only), and the END record
 * (checked as the destination finishes loading: resume).
 */
#include <glib.h>
#include <string.h>

#include "tests/soak/rig.h"

#define VRAM "4M"

struct cell {
    enum fault_kind kind;
    enum mig_phase phase;
    unsigned vgpus; /* the fault hits the last one */
};

/* What the cell must end as. */
struct expect {
    const char *status; /* final status of the migration */
    bool moved;         /* the VM runs on the destination */
    bool source_continued;
};

static struct expect expected(enum fault_kind k, enum mig_phase p)
{
    switch (k) {
    case FK_CANCEL:
        return (struct expect){"cancelled", false, false};
    case FK_KILL_DST_QEMU:
    case FK_KILL_DST_SERVER:
        /* After completion (a save: the restore) the destination is
         * lost: the source goes on. */
        return p == PH_RESUME || p == PH_RESTORE
                   ? (struct expect){"completed", false, true}
                   : (struct expect){"failed", false, false};
    case FK_KILL_SRC_SERVER:
        return (struct expect){"completed", true, false};
    case FK_DROP:
        /* In post-copy QEMU pauses, and the rig recovers it. */
        return p == PH_POSTCOPY ? (struct expect){"completed", true, false}
                                : (struct expect){"failed", false, false};
    case FK_SLOW:
    case FK_NONE:
        return (struct expect){"completed", true, false};
    case FK_CORRUPT:
    default:
        return (struct expect){"failed", false, false};
    }
}

static void open_rig(struct rig *r, uint64_t seed, unsigned vgpus)
{
    struct rig_opts o = {
        .tag = "fmatrix",
        .vram = VRAM,
        .page = "64K",
        .ram_mib = 128,
        .seed = seed,
        .netns = true,
        .leg_timeout_ms = 60000,
        .vgpus = vgpus,
        .fault_vgpu = vgpus - 1,
    };
    struct vg_error err = {0};

    if (rig_open(r, &o, &err) < 0) {
        g_error("%s", err.msg);
    }
    g_test_message("run directory %s", r->dir);
}

/* Run @p; the rig must be able to go on (no error return). */
static void leg(struct rig *r, const struct leg_plan *p, struct leg_result *res)
{
    struct vg_error err = {0};

    if (rig_leg(r, p, res, &err) < 0) {
        g_error("leg: %s", err.msg);
    }
    g_test_message(
        "leg %s/%s: %s, phase seen %s, moved %d, downtime %" G_GINT64_FORMAT
        " ms, device stream %" G_GINT64_FORMAT " + %" G_GINT64_FORMAT
        " bytes%s%s",
        fault_name(p->kind), phase_name(p->phase), res->status,
        phase_name(res->phase_seen), res->moved, res->downtime_ms,
        res->stream_pre, res->stream_stop, res->why[0] ? "; " : "", res->why);
}

/* The invariants of every leg. */
static void assert_clean(const struct leg_result *res)
{
    if (res->lost) {
        g_error("VM lost: %s", res->why);
    }
    g_assert_false(res->stuck);
    if (res->corruption) {
        g_error("corruption: %s", res->corruption_detail);
    }
    if (res->leaks) {
        g_error("%u leaks: %s", res->leaks, res->leak_detail);
    }
}

static const struct leg_plan clean = {
    .kind = FK_NONE, .mix = MIX_IDLE, .work_ms = 0};

/* Offset of the byte to corrupt for phase @p of a stream of @pre
 * pre-copy and @stop stop-copy bytes. */
static uint64_t corrupt_offset(enum mig_phase p, int64_t pre, int64_t stop)
{
    switch (p) {
    case PH_SETUP:
        return 20; /* in the HEADER record's payload */
    case PH_PRECOPY:
        return 300000; /* the first MiB goes while held in pre-copy */
    case PH_STOPCOPY:
        /* In the DEVICE_STATE record (16 + 168 bytes, then the END
         * record's 16 + 24): only stop-copy sends it.  Where pre-copy
         * ends varies from run to run, the total does not. */
        return (uint64_t)(pre + stop - 224 + 20);
    default:
        return (uint64_t)(pre + stop - 4); /* in the END record */
    }
}

static void test_cell(gconstpointer data)
{
    const struct cell *c = data;
    struct leg_plan p = {
        .kind = c->kind,
        .phase = c->phase,
        .mix = c->kind == FK_CORRUPT ? MIX_IDLE : MIX_MIXED,
        .work_ms = 300,
        .inject_ms = 100,
        .slow_kbit = 100000,
        .slow_delay_ms = 5,
        .drop_ms = 0,
        .hold_bw = 8 << 20,
    };
    struct expect want = expected(c->kind, c->phase);
    struct leg_result res;
    const char *why = NULL;
    struct rig r;
    int start;

    open_rig(&r,
             0x6d61747269780000ull + c->vgpus * 256 + c->kind * 16 + c->phase,
             c->vgpus);
    g_assert_cmpuint(r.nvgpu, ==, c->vgpus);
    if (c->vgpus > 1) {
        g_test_message("%u vGPUs; the fault hits vGPU %u", r.nvgpu,
                       r.o.fault_vgpu);
    }
    if (!rig_fault_applies(&r, c->kind, c->phase, &why)) {
        g_test_skip(why);
        rig_close(&r, false);
        return;
    }
    if (c->kind == FK_CORRUPT) {
        /* Measure the stream, then make the next source corrupt it. */
        leg(&r, &clean, &res);
        assert_clean(&res);
        g_assert_cmpint(res.stream_pre, >, 48);
        g_assert_cmpint(res.stream_stop, >, 40);
        g_assert_cmpint(res.stream_pre + res.stream_stop, >, 300000 + 224);
        rig_plan_corrupt(
            &r, corrupt_offset(c->phase, res.stream_pre, res.stream_stop));
        leg(&r, &clean, &res);
        assert_clean(&res);
        g_assert_true(rig_source_corrupts(&r));
    }
    start = r.cur;
    leg(&r, &p, &res);
    g_assert_false(res.skipped);
    assert_clean(&res);
    g_assert_cmpstr(res.status, ==, want.status);
    g_assert_cmpint(res.moved, ==, want.moved);
    g_assert_cmpint(r.cur, ==, want.moved ? !start : start);
    g_assert_cmpint(res.source_continued, ==, want.source_continued);
    if (c->phase == PH_SETUP && !r.nf.enabled && c->kind != FK_CORRUPT &&
        res.phase_seen == PH_PRECOPY) {
        /* Without namespaces nothing holds "migrate" in setup. */
        g_test_message("fault landed in pre-copy: no link to hold setup (%s)",
                       r.nf.why);
    } else {
        g_assert_cmpstr(phase_name(res.phase_seen), ==, phase_name(c->phase));
    }
    g_assert_true(res.recovered);
    if (c->kind != FK_CORRUPT || want.moved) {
        /* Life goes on: a clean migration of the survivor succeeds. */
        leg(&r, &clean, &res);
        assert_clean(&res);
        g_assert_cmpstr(res.status, ==, "completed");
        g_assert_true(res.moved);
    }
    rig_close(&r, false);
}

int main(int argc, char **argv)
{
    /* The faults of one device of several. */
    static const enum fault_kind one_of_two[] = {FK_KILL_DST_SERVER,
                                                 FK_CORRUPT};
    static struct cell cells[FK_COUNT][PH_COUNT];
    static struct cell two[G_N_ELEMENTS(one_of_two)][PH_COUNT];

    g_test_init(&argc, &argv, NULL);
    for (int k = FK_NONE + 1; k < FK_COUNT; k++) {
        for (int p = 0; p < PH_COUNT; p++) {
            g_autofree char *path = g_strdup_printf(
                "/mig/fault-matrix/%s/%s", fault_name(k), phase_name(p));

            cells[k][p] = (struct cell){k, p, 1};
            g_test_add_data_func(path, &cells[k][p], test_cell);
        }
    }
    for (unsigned i = 0; i < G_N_ELEMENTS(one_of_two); i++) {
        for (int p = 0; p < PH_COUNT; p++) {
            g_autofree char *path =
                g_strdup_printf("/mig/fault-matrix/2-vgpus/%s/%s",
                                fault_name(one_of_two[i]), phase_name(p));

            two[i][p] = (struct cell){one_of_two[i], p, 2};
            g_test_add_data_func(path, &two[i][p], test_cell);
        }
    }
    return g_test_run();
}
