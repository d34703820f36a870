/*
 * mig-fsm.c -- the VFIO migration v2 state machine: next-step table,
 * composed transitions, arc actions, ERROR and reset.
 */
#include "mig-fsm.h"

#include <errno.h>
#include <stddef.h>

#include "common/log.h"

#define ERROR        MIG_STATE_ERROR
#define STOP         MIG_STATE_STOP
#define RUNNING      MIG_STATE_RUNNING
#define STOP_COPY    MIG_STATE_STOP_COPY
#define RESUMING     MIG_STATE_RESUMING
#define RUNNING_P2P  MIG_STATE_RUNNING_P2P
#define PRE_COPY     MIG_STATE_PRE_COPY
#define PRE_COPY_P2P MIG_STATE_PRE_COPY_P2P

/*
 * next_step[cur][target]: the next state on the way from cur to target,
 * for a device with every optional state (the table of the kernel's
 * vfio_mig_get_next_state()).  This device supports them all, so no
 * state met on the way is skipped.
 */
static const uint8_t next_step[MIG_STATE_COUNT][MIG_STATE_COUNT] = {
    [STOP] =
        {
            [STOP] = STOP,
            [RUNNING] = RUNNING_P2P,
            [PRE_COPY] = RUNNING_P2P,
            [PRE_COPY_P2P] = RUNNING_P2P,
            [STOP_COPY] = STOP_COPY,
            [RESUMING] = RESUMING,
            [RUNNING_P2P] = RUNNING_P2P,
            [ERROR] = ERROR,
        },
    [RUNNING] =
        {
            [STOP] = RUNNING_P2P,
            [RUNNING] = RUNNING,
            [PRE_COPY] = PRE_COPY,
            [PRE_COPY_P2P] = RUNNING_P2P,
            [STOP_COPY] = RUNNING_P2P,
            [RESUMING] = RUNNING_P2P,
            [RUNNING_P2P] = RUNNING_P2P,
            [ERROR] = ERROR,
        },
    [PRE_COPY] =
        {
            [STOP] = RUNNING,
            [RUNNING] = RUNNING,
            [PRE_COPY] = PRE_COPY,
            [PRE_COPY_P2P] = PRE_COPY_P2P,
            [STOP_COPY] = PRE_COPY_P2P,
            [RESUMING] = RUNNING,
            [RUNNING_P2P] = RUNNING,
            [ERROR] = ERROR,
        },
    [PRE_COPY_P2P] =
        {
            [STOP] = RUNNING_P2P,
            [RUNNING] = RUNNING_P2P,
            [PRE_COPY] = PRE_COPY,
            [PRE_COPY_P2P] = PRE_COPY_P2P,
            [STOP_COPY] = STOP_COPY,
            [RESUMING] = RUNNING_P2P,
            [RUNNING_P2P] = RUNNING_P2P,
            [ERROR] = ERROR,
        },
    [STOP_COPY] =
        {
            [STOP] = STOP,
            [RUNNING] = STOP,
            [PRE_COPY] = ERROR,
            [PRE_COPY_P2P] = ERROR,
            [STOP_COPY] = STOP_COPY,
            [RESUMING] = STOP,
            [RUNNING_P2P] = STOP,
            [ERROR] = ERROR,
        },
    [RESUMING] =
        {
            [STOP] = STOP,
            [RUNNING] = STOP,
            [PRE_COPY] = STOP,
            [PRE_COPY_P2P] = STOP,
            [STOP_COPY] = STOP,
            [RESUMING] = RESUMING,
            [RUNNING_P2P] = STOP,
            [ERROR] = ERROR,
        },
    [RUNNING_P2P] =
        {
            [STOP] = STOP,
            [RUNNING] = RUNNING,
            [PRE_COPY] = RUNNING,
            [PRE_COPY_P2P] = PRE_COPY_P2P,
            [STOP_COPY] = STOP,
            [RESUMING] = STOP,
            [RUNNING_P2P] = RUNNING_P2P,
            [ERROR] = ERROR,
        },
    [ERROR] =
        {
            [STOP] = ERROR,
            [RUNNING] = ERROR,
            [PRE_COPY] = ERROR,
            [PRE_COPY_P2P] = ERROR,
            [STOP_COPY] = ERROR,
            [RESUMING] = ERROR,
            [RUNNING_P2P] = ERROR,
            [ERROR] = ERROR,
        },
};

static const char *const state_names[MIG_STATE_COUNT] = {
    [ERROR] = "ERROR",       [STOP] = "STOP",
    [RUNNING] = "RUNNING",   [STOP_COPY] = "STOP_COPY",
    [RESUMING] = "RESUMING", [RUNNING_P2P] = "RUNNING_P2P",
    [PRE_COPY] = "PRE_COPY", [PRE_COPY_P2P] = "PRE_COPY_P2P",
};

const char *mig_state_name(uint32_t state)
{
    return state < MIG_STATE_COUNT ? state_names[state] : "?";
}

bool mig_state_supported(uint32_t state)
{
    return state < MIG_STATE_COUNT;
}

void mig_fsm_init(struct mig_fsm *fsm, const struct mig_fsm_ops *ops,
                  void *opaque)
{
    fsm->state = RUNNING;
    fsm->ops = ops;
    fsm->opaque = opaque;
}

int mig_fsm_path(uint32_t from, uint32_t to, enum mig_state *path)
{
    enum mig_state cur = (enum mig_state)from;
    int n = 0;

    if (!mig_state_supported(from) || !mig_state_supported(to) || to == ERROR) {
        return -EINVAL;
    }
    while (cur != to) {
        cur = (enum mig_state)next_step[cur][to];
        if (cur == ERROR || n == MIG_FSM_MAX_PATH) {
            return -EINVAL;
        }
        path[n++] = cur;
    }
    return n;
}

/* The action of direct arc @from -> @to (only arcs of a path come here). */
static mig_arc_fn arc_action(const struct mig_fsm_ops *ops, enum mig_state from,
                             enum mig_state to)
{
#define ARC(a, b) ((a)*MIG_STATE_COUNT + (b))
    switch (ARC(from, to)) {
    case ARC(RUNNING, RUNNING_P2P):
        return ops->running_to_p2p;
    case ARC(RUNNING_P2P, RUNNING):
        return ops->p2p_to_running;
    case ARC(RUNNING_P2P, STOP):
        return ops->p2p_to_stop;
    case ARC(STOP, RUNNING_P2P):
        return ops->stop_to_p2p;
    case ARC(RUNNING, PRE_COPY):
        return ops->running_to_precopy;
    case ARC(PRE_COPY, RUNNING):
        return ops->precopy_to_running;
    case ARC(RUNNING_P2P, PRE_COPY_P2P):
        return ops->p2p_to_precopy_p2p;
    case ARC(PRE_COPY_P2P, RUNNING_P2P):
        return ops->precopy_p2p_to_p2p;
    case ARC(PRE_COPY, PRE_COPY_P2P):
        return ops->precopy_to_precopy_p2p;
    case ARC(PRE_COPY_P2P, PRE_COPY):
        return ops->precopy_p2p_to_precopy;
    case ARC(PRE_COPY_P2P, STOP_COPY):
        return ops->precopy_p2p_to_stopcopy;
    case ARC(STOP, STOP_COPY):
        return ops->stop_to_stopcopy;
    case ARC(STOP_COPY, STOP):
        return ops->stopcopy_to_stop;
    case ARC(STOP, RESUMING):
        return ops->stop_to_resuming;
    default: /* RESUMING -> STOP: the table has no other arcs */
        return ops->resuming_to_stop;
    }
#undef ARC
}

static void set_state(struct mig_fsm *fsm, enum mig_state to)
{
    enum mig_state from = fsm->state;

    fsm->state = to;
    if (fsm->ops->changed) {
        fsm->ops->changed(fsm->opaque, from, to);
    }
}

/* Take the direct arc to @to; ERROR if its action fails. */
static int take_arc(struct mig_fsm *fsm, enum mig_state to,
                    struct vg_error *err)
{
    enum mig_state from = fsm->state;
    mig_arc_fn fn = arc_action(fsm->ops, from, to);
    int ret;

    vg_dbg("migration: arc %s -> %s", state_names[from], state_names[to]);
    ret = fn ? fn(fsm->opaque, err) : 0;
    if (ret < 0) {
        vg_error_prefix(err, "arc %s -> %s", state_names[from],
                        state_names[to]);
        vg_warn("migration: %s; device state ERROR", err ? err->msg : "");
        set_state(fsm, ERROR);
        return ret;
    }
    set_state(fsm, to);
    return 0;
}

int mig_fsm_set(struct mig_fsm *fsm, uint32_t target, struct vg_error *err)
{
    enum mig_state path[MIG_FSM_MAX_PATH];
    int n = mig_fsm_path(fsm->state, target, path);

    if (n < 0) {
        vg_dbg("migration: %s -> %s refused", state_names[fsm->state],
               mig_state_name(target));
        return vg_error_set(
            err, EINVAL, "device state %s -> %s (%u) not allowed",
            state_names[fsm->state], mig_state_name(target), target);
    }
    for (int i = 0; i < n; i++) {
        int ret = take_arc(fsm, path[i], err);
        if (ret < 0) {
            return ret;
        }
    }
    return 0;
}

void mig_fsm_fail(struct mig_fsm *fsm, const char *why)
{
    if (fsm->state == ERROR) {
        return;
    }
    vg_warn("migration: %s in %s; device state ERROR", why,
            state_names[fsm->state]);
    set_state(fsm, ERROR);
}

void mig_fsm_reset(struct mig_fsm *fsm)
{
    vg_dbg("migration: reset from %s", state_names[fsm->state]);
    if (fsm->ops->reset) {
        fsm->ops->reset(fsm->opaque);
    }
    set_state(fsm, RUNNING);
}
