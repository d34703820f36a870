/*
 * mig-fsm.h -- the VFIO migration v2 device state machine.
 *
 * States and arcs are those of <linux/vfio.h> (enum vfio_device_mig_state)
 * for a device that supports VFIO_MIGRATION_STOP_COPY and
 * VFIO_MIGRATION_PRE_COPY but not VFIO_MIGRATION_P2P.  The state values
 * are the VFIO ones, so they go on the wire unchanged.
 *
 * Direct arcs (each has one action callback into the data path):
 *   RUNNING -> STOP          STOP -> RUNNING
 *   RUNNING -> PRE_COPY      PRE_COPY -> RUNNING
 *   PRE_COPY -> STOP_COPY    STOP -> STOP_COPY      STOP_COPY -> STOP
 *   STOP -> RESUMING         RESUMING -> STOP
 * Any other (from, to) pair is composed of direct arcs along the shortest
 * path whose interior states are not in the saving group (PRE_COPY,
 * STOP_COPY), as the kernel's vfio_mig_get_next_state() computes it with
 * the P2P states skipped; STOP_COPY -> PRE_COPY has no path and is
 * refused.  ERROR is never a valid target; from ERROR only DEVICE_RESET
 * (mig_fsm_reset) leads out, to RUNNING.
 *
 * The FSM is separate from the data path (like Linux's mlx5 driver): it
 * decides the path and calls the arc actions; the actions move data.  A
 * refused target leaves the state unchanged; an action that fails puts the
 * device in ERROR.  Every arc is logged at debug level.
 */
#ifndef MIG_FSM_H
#define MIG_FSM_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

enum mig_state {
    MIG_STATE_ERROR = 0,
    MIG_STATE_STOP = 1,
    MIG_STATE_RUNNING = 2,
    MIG_STATE_STOP_COPY = 3,
    MIG_STATE_RESUMING = 4,
    MIG_STATE_RUNNING_P2P = 5, /* not supported */
    MIG_STATE_PRE_COPY = 6,
    MIG_STATE_PRE_COPY_P2P = 7, /* not supported */
};
#define MIG_STATE_COUNT 8

/* The longest composed transition has 3 arcs (e.g. PRE_COPY -> RESUMING). */
#define MIG_FSM_MAX_PATH 4

/*
 * Arc actions.  Each returns 0 or a negative errno with @err set; a NULL
 * action does nothing.  @opaque is the data path.
 */
typedef int (*mig_arc_fn)(void *opaque, struct vg_error *err);

struct mig_fsm_ops {
    mig_arc_fn running_to_stop;     /* quiesce the device */
    mig_arc_fn stop_to_running;     /* resume the device */
    mig_arc_fn running_to_precopy;  /* open a saving session, running */
    mig_arc_fn precopy_to_running;  /* end the saving session */
    mig_arc_fn precopy_to_stopcopy; /* quiesce, stream the final data */
    mig_arc_fn stop_to_stopcopy;    /* open a saving session, stopped */
    mig_arc_fn stopcopy_to_stop;    /* end the saving session */
    mig_arc_fn stop_to_resuming;    /* open a loading session */
    mig_arc_fn resuming_to_stop;    /* validate and apply the loaded data */
    /* DEVICE_RESET from any state: abort sessions, device running. */
    void (*reset)(void *opaque);
    /* Called after every arc, fall into ERROR and reset (a reset in
     * RUNNING included). */
    void (*changed)(void *opaque, enum mig_state from, enum mig_state to);
};

struct mig_fsm {
    enum mig_state state;
    const struct mig_fsm_ops *ops;
    void *opaque;
};

/* "RUNNING", "STOP_COPY", ...; "?" for a value that is no state. */
const char *mig_state_name(uint32_t state);

/* True if @state is a state this device supports (not P2P, in range). */
bool mig_state_supported(uint32_t state);

/* Start in RUNNING. */
void mig_fsm_init(struct mig_fsm *fsm, const struct mig_fsm_ops *ops,
                  void *opaque);

/*
 * The states visited from @from to reach @to, @to included, into
 * @path[MIG_FSM_MAX_PATH]; returns their number (0 when @from == @to), or
 * -EINVAL if @to cannot be reached (unsupported or ERROR target, ERROR
 * source, STOP_COPY -> PRE_COPY).  Pure.
 */
int mig_fsm_path(uint32_t from, uint32_t to, enum mig_state *path);

/*
 * Move to @target through the path of mig_fsm_path(), calling each arc's
 * action.  -EINVAL (state unchanged) if @target is refused; if an action
 * fails the state becomes ERROR and its error is returned with @err
 * naming the arc.
 */
int mig_fsm_set(struct mig_fsm *fsm, uint32_t target, struct vg_error *err);

/* The data path failed in the current state (e.g. RESUMING refused a
 * record): go to ERROR, which only DEVICE_RESET leaves. */
void mig_fsm_fail(struct mig_fsm *fsm, const char *why);

/* DEVICE_RESET: call ops->reset and go to RUNNING, from any state. */
void mig_fsm_reset(struct mig_fsm *fsm);

#endif
