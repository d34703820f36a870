/*
 * Unit tests of the VFIO migration v2 state machine (mig-fsm): the path of
 * every (from, to) pair of the eight states (P2P ones included) against a
 * table written from <linux/vfio.h>'s rules, the composed paths QEMU
 * drives for a VM with several devices, refusals that leave the state
 * unchanged, a failing arc action that puts the device in ERROR, reset
 * out of ERROR.
 */
#include <errno.h>
#include <glib.h>
#include <string.h>

#include "vfio-migration/mig-fsm.h"

#define E   MIG_STATE_ERROR
#define S   MIG_STATE_STOP
#define R   MIG_STATE_RUNNING
#define SC  MIG_STATE_STOP_COPY
#define RS  MIG_STATE_RESUMING
#define RP  MIG_STATE_RUNNING_P2P
#define PC  MIG_STATE_PRE_COPY
#define PCP MIG_STATE_PRE_COPY_P2P
#define NO  -1 /* refused */

static const enum mig_state states[] = {E, S, R, SC, RS, RP, PC, PCP};

/*
 * Expected path (states after each arc, terminated by 0 = ERROR, which no
 * path visits) for every pair; {NO} marks a refused transition.  Written
 * from <linux/vfio.h>: the 15 direct arcs, and a composed transition
 * takes the shortest path without saving-group states (PC, PCP, SC)
 * inside it.
 */
static const int paths[8][8][5] = {
    [R] = {[R] = {0},
           [S] = {RP, S},
           [SC] = {RP, S, SC},
           [RS] = {RP, S, RS},
           [RP] = {RP},
           [PC] = {PC},
           [PCP] = {RP, PCP},
           [E] = {NO}},
    [S] = {[R] = {RP, R},
           [S] = {0},
           [SC] = {SC},
           [RS] = {RS},
           [RP] = {RP},
           [PC] = {RP, R, PC},
           [PCP] = {RP, PCP},
           [E] = {NO}},
    [SC] = {[R] = {S, RP, R},
            [S] = {S},
            [SC] = {0},
            [RS] = {S, RS},
            [RP] = {S, RP},
            [PC] = {NO},
            [PCP] = {NO},
            [E] = {NO}},
    [RS] = {[R] = {S, RP, R},
            [S] = {S},
            [SC] = {S, SC},
            [RS] = {0},
            [RP] = {S, RP},
            [PC] = {S, RP, R, PC},
            [PCP] = {S, RP, PCP},
            [E] = {NO}},
    [RP] = {[R] = {R},
            [S] = {S},
            [SC] = {S, SC},
            [RS] = {S, RS},
            [RP] = {0},
            [PC] = {R, PC},
            [PCP] = {PCP},
            [E] = {NO}},
    [PC] = {[R] = {R},
            [S] = {R, RP, S},
            [SC] = {PCP, SC},
            [RS] = {R, RP, S, RS},
            [RP] = {R, RP},
            [PC] = {0},
            [PCP] = {PCP},
            [E] = {NO}},
    [PCP] = {[R] = {RP, R},
             [S] = {RP, S},
             [SC] = {SC},
             [RS] = {RP, S, RS},
             [RP] = {RP},
             [PC] = {PC},
             [PCP] = {0},
             [E] = {NO}},
    [E] = {[R] = {NO},
           [S] = {NO},
           [SC] = {NO},
           [RS] = {NO},
           [RP] = {NO},
           [PC] = {NO},
           [PCP] = {NO},
           [E] = {NO}},
};

/* A data path that records the arcs it is asked to take. */
struct rec {
    char log[256];
    const char *fail; /* arc name whose action fails, NULL: none */
    unsigned resets;
    unsigned changes;
};

static int arc(struct rec *r, const char *name, struct vg_error *err)
{
    g_strlcat(r->log, name, sizeof(r->log));
    g_strlcat(r->log, " ", sizeof(r->log));
    if (r->fail && strcmp(r->fail, name) == 0) {
        return vg_error_set(err, EIO, "injected failure");
    }
    return 0;
}

#define ARC(fn, name)                                                          \
    static int fn(void *o, struct vg_error *err)                               \
    {                                                                          \
        return arc(o, name, err);                                              \
    }
ARC(r_rp, "R>RP")
ARC(rp_r, "RP>R")
ARC(rp_s, "RP>S")
ARC(s_rp, "S>RP")
ARC(r_pc, "R>PC")
ARC(pc_r, "PC>R")
ARC(rp_pcp, "RP>PCP")
ARC(pcp_rp, "PCP>RP")
ARC(pc_pcp, "PC>PCP")
ARC(pcp_pc, "PCP>PC")
ARC(pcp_sc, "PCP>SC")
ARC(s_sc, "S>SC")
ARC(sc_s, "SC>S")
ARC(s_rs, "S>RS")
ARC(rs_s, "RS>S")

static void on_reset(void *o)
{
    ((struct rec *)o)->resets++;
}

static void on_changed(void *o, enum mig_state from, enum mig_state to)
{
    ((struct rec *)o)->changes++;
}

static const struct mig_fsm_ops ops = {
    .running_to_p2p = r_rp,
    .p2p_to_running = rp_r,
    .p2p_to_stop = rp_s,
    .stop_to_p2p = s_rp,
    .running_to_precopy = r_pc,
    .precopy_to_running = pc_r,
    .p2p_to_precopy_p2p = rp_pcp,
    .precopy_p2p_to_p2p = pcp_rp,
    .precopy_to_precopy_p2p = pc_pcp,
    .precopy_p2p_to_precopy = pcp_pc,
    .precopy_p2p_to_stopcopy = pcp_sc,
    .stop_to_stopcopy = s_sc,
    .stopcopy_to_stop = sc_s,
    .stop_to_resuming = s_rs,
    .resuming_to_stop = rs_s,
    .reset = on_reset,
    .changed = on_changed,
};

/* The 15 direct arcs of <linux/vfio.h> with every optional state. */
static const struct {
    enum mig_state from, to;
    const char *name;
} direct_arcs[] = {
    {R, RP, "R>RP"},     {RP, R, "RP>R"},     {RP, S, "RP>S"},
    {S, RP, "S>RP"},     {R, PC, "R>PC"},     {PC, R, "PC>R"},
    {RP, PCP, "RP>PCP"}, {PCP, RP, "PCP>RP"}, {PC, PCP, "PC>PCP"},
    {PCP, PC, "PCP>PC"}, {PCP, SC, "PCP>SC"}, {S, SC, "S>SC"},
    {SC, S, "SC>S"},     {S, RS, "S>RS"},     {RS, S, "RS>S"},
};

/* The arc name for a step @from -> @to. */
static const char *arc_name(enum mig_state from, enum mig_state to)
{
    for (unsigned i = 0; i < G_N_ELEMENTS(direct_arcs); i++) {
        if (direct_arcs[i].from == from && direct_arcs[i].to == to) {
            return direct_arcs[i].name;
        }
    }
    g_assert_not_reached();
}

static void check_pair(enum mig_state from, enum mig_state to)
{
    const int *want = paths[from][to];
    enum mig_state path[MIG_FSM_MAX_PATH];
    struct rec r = {.fail = NULL};
    char expect[256] = "";
    struct mig_fsm fsm;
    struct vg_error err = {0};
    int n = 0, got, ret;

    while (n < MIG_FSM_MAX_PATH && want[n] > 0) {
        g_strlcat(expect,
                  arc_name(n ? (enum mig_state)want[n - 1] : from,
                           (enum mig_state)want[n]),
                  sizeof(expect));
        g_strlcat(expect, " ", sizeof(expect));
        n++;
    }
    got = mig_fsm_path(from, to, path);
    mig_fsm_init(&fsm, &ops, &r);
    fsm.state = from;
    ret = mig_fsm_set(&fsm, to, &err);
    if (want[0] == NO) {
        g_assert_cmpint(got, ==, -EINVAL);
        g_assert_cmpint(ret, ==, -EINVAL);
        g_assert_cmpint(fsm.state, ==, from); /* unchanged */
        g_assert_cmpstr(r.log, ==, "");
        g_assert_nonnull(strstr(err.msg, "not allowed"));
        return;
    }
    g_assert_cmpint(got, ==, n);
    for (int i = 0; i < n; i++) {
        g_assert_cmpint(path[i], ==, want[i]);
    }
    g_assert_cmpint(ret, ==, 0);
    g_assert_cmpint(fsm.state, ==, to);
    g_assert_cmpstr(r.log, ==, expect);
    g_assert_cmpuint(r.changes, ==, (unsigned)n);
}

static void test_all_pairs(void)
{
    for (unsigned i = 0; i < G_N_ELEMENTS(states); i++) {
        for (unsigned j = 0; j < G_N_ELEMENTS(states); j++) {
            check_pair(states[i], states[j]);
        }
    }
}

/* Values outside the enum are refused from every state; the P2P states
 * are supported. */
static void test_unsupported_targets(void)
{
    static const uint32_t bad[] = {8, 1000, UINT32_MAX};
    struct rec r = {.fail = NULL};
    struct mig_fsm fsm;

    for (unsigned i = 0; i < G_N_ELEMENTS(states); i++) {
        for (unsigned j = 0; j < G_N_ELEMENTS(bad); j++) {
            struct vg_error err;
            mig_fsm_init(&fsm, &ops, &r);
            fsm.state = states[i];
            g_assert_cmpint(mig_fsm_set(&fsm, bad[j], &err), ==, -EINVAL);
            g_assert_cmpint(fsm.state, ==, states[i]);
        }
    }
    g_assert_cmpstr(r.log, ==, "");
    g_assert_true(mig_state_supported(MIG_STATE_RUNNING_P2P));
    g_assert_true(mig_state_supported(MIG_STATE_PRE_COPY_P2P));
    g_assert_false(mig_state_supported(8));
    g_assert_cmpstr(mig_state_name(MIG_STATE_PRE_COPY), ==, "PRE_COPY");
    g_assert_cmpstr(mig_state_name(MIG_STATE_RUNNING_P2P), ==, "RUNNING_P2P");
    g_assert_cmpstr(mig_state_name(MIG_STATE_PRE_COPY_P2P), ==, "PRE_COPY_P2P");
    g_assert_cmpstr(mig_state_name(99), ==, "?");
}

/* Every direct arc is one step calling its own action, and nothing else
 * is direct: a pair of distinct states that is no direct arc has a
 * longer path or none. */
static void test_direct_arcs(void)
{
    for (unsigned i = 0; i < G_N_ELEMENTS(states); i++) {
        for (unsigned j = 0; j < G_N_ELEMENTS(states); j++) {
            enum mig_state path[MIG_FSM_MAX_PATH];
            int n = mig_fsm_path(states[i], states[j], path);
            bool direct = false;

            for (unsigned k = 0; k < G_N_ELEMENTS(direct_arcs); k++) {
                direct |= direct_arcs[k].from == states[i] &&
                          direct_arcs[k].to == states[j];
            }
            g_assert_cmpint(n == 1, ==, direct);
        }
    }
    for (unsigned k = 0; k < G_N_ELEMENTS(direct_arcs); k++) {
        struct rec r = {.fail = NULL};
        struct vg_error err = {0};
        struct mig_fsm fsm;
        char want[16];

        mig_fsm_init(&fsm, &ops, &r);
        fsm.state = direct_arcs[k].from;
        g_assert_cmpint(mig_fsm_set(&fsm, direct_arcs[k].to, &err), ==, 0);
        g_assert_cmpint(fsm.state, ==, direct_arcs[k].to);
        g_snprintf(want, sizeof(want), "%s ", direct_arcs[k].name);
        g_assert_cmpstr(r.log, ==, want);
        g_assert_cmpuint(r.changes, ==, 1);
    }
}

/* Step @fsm to @to and check the arcs its data path was asked for. */
static void step(struct mig_fsm *fsm, struct rec *r, enum mig_state to,
                 const char *arcs)
{
    struct vg_error err = {0};

    r->log[0] = '\0';
    g_assert_cmpint(mig_fsm_set(fsm, to, &err), ==, 0);
    g_assert_cmpint(fsm->state, ==, to);
    g_assert_cmpstr(r->log, ==, arcs);
}

/*
 * The sequences QEMU drives for a VM with several devices (every device
 * advertises VFIO_MIGRATION_P2P; vfio_vmstate_change_prepare moves each
 * to a P2P state before vfio_vmstate_change moves any further).
 */
static void test_qemu_p2p_paths(void)
{
    struct rec r = {.fail = NULL};
    struct mig_fsm fsm;

    /* Source with pre-copy: stop, then the final pass, then done. */
    mig_fsm_init(&fsm, &ops, &r);
    step(&fsm, &r, PC, "R>PC ");
    step(&fsm, &r, PCP, "PC>PCP ");
    step(&fsm, &r, SC, "PCP>SC ");
    step(&fsm, &r, S, "SC>S ");
    /* The migration failed after the stop: the source VM starts again. */
    step(&fsm, &r, RP, "S>RP ");
    step(&fsm, &r, R, "RP>R ");

    /* Source without pre-copy (a VM stopped by the user, savevm). */
    step(&fsm, &r, RP, "R>RP ");
    step(&fsm, &r, S, "RP>S ");
    step(&fsm, &r, SC, "S>SC ");
    step(&fsm, &r, S, "SC>S ");

    /* The VM is resumed from RUNNING_P2P before going further. */
    mig_fsm_init(&fsm, &ops, &r);
    step(&fsm, &r, RP, "R>RP ");
    step(&fsm, &r, R, "RP>R ");

    /* A stop during pre-copy that is taken back (cont): PCP -> PC. */
    step(&fsm, &r, PC, "R>PC ");
    step(&fsm, &r, PCP, "PC>PCP ");
    step(&fsm, &r, PC, "PCP>PC ");
    step(&fsm, &r, R, "PC>R ");

    /* Destination: load, then start through RUNNING_P2P. */
    mig_fsm_init(&fsm, &ops, &r);
    step(&fsm, &r, RS, "R>RP RP>S S>RS ");
    step(&fsm, &r, S, "RS>S ");
    step(&fsm, &r, RP, "S>RP ");
    step(&fsm, &r, R, "RP>R ");

    /* A client that knows no P2P state gets them composed in. */
    step(&fsm, &r, S, "R>RP RP>S ");
    step(&fsm, &r, R, "S>RP RP>R ");
    step(&fsm, &r, PC, "R>PC ");
    step(&fsm, &r, SC, "PC>PCP PCP>SC ");
}

/* STOP_COPY -> PRE_COPY_P2P (and -> PRE_COPY) have no arc: refused, the
 * saving session untouched. */
static void test_refused_p2p(void)
{
    struct rec r = {.fail = NULL};
    struct vg_error err = {0};
    struct mig_fsm fsm;

    mig_fsm_init(&fsm, &ops, &r);
    step(&fsm, &r, SC, "R>RP RP>S S>SC ");
    r.log[0] = '\0';
    g_assert_cmpint(mig_fsm_set(&fsm, PCP, &err), ==, -EINVAL);
    g_assert_nonnull(strstr(err.msg, "STOP_COPY -> PRE_COPY_P2P"));
    g_assert_cmpint(mig_fsm_set(&fsm, PC, &err), ==, -EINVAL);
    g_assert_cmpint(fsm.state, ==, SC);
    g_assert_cmpstr(r.log, ==, "");
    g_assert_cmpint(mig_fsm_set(&fsm, E, &err), ==, -EINVAL);
    g_assert_cmpint(fsm.state, ==, SC);
}

/* An arc action fails in the middle of a composed transition: ERROR. */
static void test_arc_failure(void)
{
    struct rec r = {.fail = "S>RS"};
    struct mig_fsm fsm;
    struct vg_error err = {0};

    mig_fsm_init(&fsm, &ops, &r);
    fsm.state = PC;
    g_assert_cmpint(mig_fsm_set(&fsm, RS, &err), ==, -EIO);
    g_assert_cmpint(fsm.state, ==, E);
    g_assert_cmpstr(r.log, ==, "PC>R R>RP RP>S S>RS ");
    g_assert_nonnull(strstr(err.msg, "arc STOP -> RESUMING"));
    g_assert_nonnull(strstr(err.msg, "injected failure"));
    /* nothing leads out of ERROR but reset */
    for (unsigned i = 0; i < G_N_ELEMENTS(states); i++) {
        g_assert_cmpint(mig_fsm_set(&fsm, states[i], &err), ==, -EINVAL);
        g_assert_cmpint(fsm.state, ==, E);
    }
    mig_fsm_reset(&fsm);
    g_assert_cmpint(fsm.state, ==, R);
    g_assert_cmpuint(r.resets, ==, 1);
    r.fail = NULL;
    g_assert_cmpint(mig_fsm_set(&fsm, SC, &err), ==, 0);
    g_assert_cmpint(fsm.state, ==, SC);
}

/* Every single arc's failure leads to ERROR, whatever the arc. */
static void test_each_arc_fails(void)
{
    for (unsigned i = 0; i < G_N_ELEMENTS(direct_arcs); i++) {
        struct rec r = {.fail = direct_arcs[i].name};
        struct mig_fsm fsm;
        struct vg_error err;

        mig_fsm_init(&fsm, &ops, &r);
        fsm.state = direct_arcs[i].from;
        g_assert_cmpint(mig_fsm_set(&fsm, direct_arcs[i].to, &err), ==, -EIO);
        g_assert_cmpint(fsm.state, ==, E);
    }
}

/* Reset works from every state and needs no data-path action. */
static void test_reset_everywhere(void)
{
    for (unsigned i = 0; i < G_N_ELEMENTS(states); i++) {
        struct rec r = {.fail = NULL};
        struct mig_fsm fsm;

        mig_fsm_init(&fsm, &ops, &r);
        fsm.state = states[i];
        mig_fsm_reset(&fsm);
        g_assert_cmpint(fsm.state, ==, R);
        g_assert_cmpuint(r.resets, ==, 1);
        g_assert_cmpuint(r.changes, ==, 1); /* RUNNING -> RUNNING too */
    }
}

/* A data-path failure goes to ERROR, refuses every target, until reset. */
static void test_data_path_failure(void)
{
    struct rec r = {.fail = NULL};
    struct vg_error err = {0};
    struct mig_fsm fsm;

    mig_fsm_init(&fsm, &ops, &r);
    g_assert_cmpint(mig_fsm_set(&fsm, RS, &err), ==, 0);
    g_assert_cmpint(fsm.state, ==, RS);
    r.changes = 0;
    mig_fsm_fail(&fsm, "bad record");
    g_assert_cmpint(fsm.state, ==, E);
    g_assert_cmpuint(r.changes, ==, 1);
    mig_fsm_fail(&fsm, "again"); /* already in ERROR: no new change */
    g_assert_cmpuint(r.changes, ==, 1);
    g_assert_cmpint(mig_fsm_set(&fsm, S, &err), ==, -EINVAL);
    g_assert_cmpint(fsm.state, ==, E);
    mig_fsm_reset(&fsm);
    g_assert_cmpint(fsm.state, ==, R);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/mig-fsm/all-pairs", test_all_pairs);
    g_test_add_func("/mig-fsm/unsupported-targets", test_unsupported_targets);
    g_test_add_func("/mig-fsm/direct-arcs", test_direct_arcs);
    g_test_add_func("/mig-fsm/qemu-p2p-paths", test_qemu_p2p_paths);
    g_test_add_func("/mig-fsm/refused-p2p", test_refused_p2p);
    g_test_add_func("/mig-fsm/arc-failure", test_arc_failure);
    g_test_add_func("/mig-fsm/each-arc-fails", test_each_arc_fails);
    g_test_add_func("/mig-fsm/reset", test_reset_everywhere);
    g_test_add_func("/mig-fsm/data-path-failure", test_data_path_failure);
    return g_test_run();
}
