/*
 * Unit tests of the VFIO migration v2 state machine (mig-fsm): the path of
 * every (from, to) pair of the six states against a table written from
 * <linux/vfio.h>'s rules, refusals that leave the state unchanged, a
 * failing arc action that puts the device in ERROR, reset out of ERROR.
 */
#include <errno.h>
#include <glib.h>
#include <string.h>

#include "vfio-migration/mig-fsm.h"

#define E  MIG_STATE_ERROR
#define S  MIG_STATE_STOP
#define R  MIG_STATE_RUNNING
#define SC MIG_STATE_STOP_COPY
#define RS MIG_STATE_RESUMING
#define PC MIG_STATE_PRE_COPY
#define NO -1 /* refused */

static const enum mig_state states[] = {E, S, R, SC, RS, PC};

/* Expected path (states after each arc, terminated by 0 = ERROR, which no
 * path visits) for every pair; {NO} marks a refused transition. */
static const int paths[8][8][4] = {
    [R] = {[R] = {0},
           [S] = {S},
           [SC] = {S, SC},
           [RS] = {S, RS},
           [PC] = {PC},
           [E] = {NO}},
    [S] = {[R] = {R},
           [S] = {0},
           [SC] = {SC},
           [RS] = {RS},
           [PC] = {R, PC},
           [E] = {NO}},
    [SC] = {[R] = {S, R},
            [S] = {S},
            [SC] = {0},
            [RS] = {S, RS},
            [PC] = {NO},
            [E] = {NO}},
    [RS] = {[R] = {S, R},
            [S] = {S},
            [SC] = {S, SC},
            [RS] = {0},
            [PC] = {S, R, PC},
            [E] = {NO}},
    [PC] = {[R] = {R},
            [S] = {R, S},
            [SC] = {SC},
            [RS] = {R, S, RS},
            [PC] = {0},
            [E] = {NO}},
    [E] = {[R] = {NO},
           [S] = {NO},
           [SC] = {NO},
           [RS] = {NO},
           [PC] = {NO},
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
ARC(r_s, "R>S")
ARC(s_r, "S>R")
ARC(r_pc, "R>PC")
ARC(pc_r, "PC>R")
ARC(pc_sc, "PC>SC")
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
    r_s, s_r, r_pc, pc_r, pc_sc, s_sc, sc_s, s_rs, rs_s, on_reset, on_changed,
};

/* The arc name for a step @from -> @to. */
static const char *arc_name(enum mig_state from, enum mig_state to)
{
    static const struct {
        enum mig_state from, to;
        const char *name;
    } arcs[] = {
        {R, S, "R>S"},   {S, R, "S>R"},     {R, PC, "R>PC"},
        {PC, R, "PC>R"}, {PC, SC, "PC>SC"}, {S, SC, "S>SC"},
        {SC, S, "SC>S"}, {S, RS, "S>RS"},   {RS, S, "RS>S"},
    };
    for (unsigned i = 0; i < G_N_ELEMENTS(arcs); i++) {
        if (arcs[i].from == from && arcs[i].to == to) {
            return arcs[i].name;
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

    while (n < 4 && want[n] > 0) {
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

/* P2P states and values outside the enum are refused from every state. */
static void test_unsupported_targets(void)
{
    static const uint32_t bad[] = {MIG_STATE_RUNNING_P2P,
                                   MIG_STATE_PRE_COPY_P2P, 8, 1000, UINT32_MAX};
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
    g_assert_false(mig_state_supported(MIG_STATE_RUNNING_P2P));
    g_assert_cmpstr(mig_state_name(MIG_STATE_PRE_COPY), ==, "PRE_COPY");
    g_assert_cmpstr(mig_state_name(99), ==, "?");
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
    g_assert_cmpstr(r.log, ==, "PC>R R>S S>RS ");
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
    static const struct {
        enum mig_state from, to;
        const char *name;
    } cases[] = {
        {R, S, "R>S"},   {S, R, "S>R"},     {R, PC, "R>PC"},
        {PC, R, "PC>R"}, {PC, SC, "PC>SC"}, {S, SC, "S>SC"},
        {SC, S, "SC>S"}, {S, RS, "S>RS"},   {RS, S, "RS>S"},
    };
    for (unsigned i = 0; i < G_N_ELEMENTS(cases); i++) {
        struct rec r = {.fail = cases[i].name};
        struct mig_fsm fsm;
        struct vg_error err;

        mig_fsm_init(&fsm, &ops, &r);
        fsm.state = cases[i].from;
        g_assert_cmpint(mig_fsm_set(&fsm, cases[i].to, &err), ==, -EIO);
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
    g_test_add_func("/mig-fsm/arc-failure", test_arc_failure);
    g_test_add_func("/mig-fsm/each-arc-fails", test_each_arc_fails);
    g_test_add_func("/mig-fsm/reset", test_reset_everywhere);
    g_test_add_func("/mig-fsm/data-path-failure", test_data_path_failure);
    return g_test_run();
}
