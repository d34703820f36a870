/*
 * mig-fsm.h -- the VFIO migration v2 device state machine.
 *
 * States and arcs are those of <linux/vfio.h> (enum vfio_device_mig_state)
 * for a device that supports VFIO_MIGRATION_STOP_COPY,
 * VFIO_MIGRATION_PRE_COPY and VFIO_MIGRATION_P2P: all eight states.  The
 * state values are the VFIO ones, so they go on the wire unchanged.
 *
 * Direct arcs (each has one action callback into the data path):
 *   RUNNING -> RUNNING_P2P        RUNNING_P2P -> RUNNING
 *   RUNNING_P2P -> STOP           STOP -> RUNNING_P2P
 *   RUNNING -> PRE_COPY           PRE_COPY -> RUNNING
 *   RUNNING_P2P -> PRE_COPY_P2P   PRE_COPY_P2P -> RUNNING_P2P
 *   PRE_COPY -> PRE_COPY_P2P      PRE_COPY_P2P -> PRE_COPY
 *   PRE_COPY_P2P -> STOP_COPY
 *   STOP -> STOP_COPY             STOP_COPY -> STOP
 *   STOP -> RESUMING              RESUMING -> STOP
 * RUNNING -> STOP and PRE_COPY -> STOP_COPY are not direct: they pass
 * through RUNNING_P2P and PRE_COPY_P2P.  Any other (from, to) pair is
 * composed of direct arcs along the shortest path whose interior states
 * are not in the saving group (PRE_COPY, PRE_COPY_P2P, STOP_COPY), as the
 * kernel's vfio_mig_get_next_state() computes it; the longest are
 * PRE_COPY <-> RESUMING (4 arcs).  STOP_COPY -> PRE_COPY and STOP_COPY ->
 * PRE_COPY_P2P have no path and are refused.  ERROR is never a valid
 * target; from ERROR only DEVICE_RESET (mig_fsm_reset) leads out, to
 * RUNNING.
 *
 * The P2P states are the quiescent states QEMU uses to stop several
 * devices of one VM without one of them writing into another while the
 * others stop (QEMU migrates a VM with several VFIO devices only if all
 * of them support P2P).  With several devices QEMU drives:
 *   source:      RUNNING -> PRE_COPY, then on stop for every device
 *                PRE_COPY -> PRE_COPY_P2P before any goes on to
 *                PRE_COPY_P2P -> STOP_COPY -> STOP (RUNNING -> RUNNING_P2P
 *                -> STOP without pre-copy);
 *   destination: RESUMING -> STOP, then on start STOP -> RUNNING_P2P for
 *                every device before any goes on to RUNNING (so does the
 *                source when the migration fails after the stop).
 * For this device a P2P state is a quiesced one, like STOP: the command
 * processor runs nothing, so the device initiates no DMA and no engine
 * writes guest RAM or VRAM; register and BAR accesses are still
 * accepted.  PRE_COPY_P2P keeps the pre-copy saving session open: its
 * data can still be read.
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
    MIG_STATE_RUNNING_P2P = 5,
    MIG_STATE_PRE_COPY = 6,
    MIG_STATE_PRE_COPY_P2P = 7,
};
#define MIG_STATE_COUNT 8

/* The longest composed transition has 4 arcs (PRE_COPY -> RESUMING:
 * RUNNING, RUNNING_P2P, STOP, RESUMING). */
#define MIG_FSM_MAX_PATH 4

/*
 * Arc actions.  Each returns 0 or a negative errno with @err set; a NULL
 * action does nothing.  @opaque is the data path.
 */
typedef int (*mig_arc_fn)(void *opaque, struct vg_error *err);

struct mig_fsm_ops {
    mig_arc_fn running_to_p2p;          /* quiesce the device */
    mig_arc_fn p2p_to_running;          /* resume the device */
    mig_arc_fn p2p_to_stop;             /* (already quiesced) */
    mig_arc_fn stop_to_p2p;             /* (stays quiesced) */
    mig_arc_fn running_to_precopy;      /* open a saving session, running */
    mig_arc_fn precopy_to_running;      /* end the saving session */
    mig_arc_fn p2p_to_precopy_p2p;      /* open a saving session, quiesced */
    mig_arc_fn precopy_p2p_to_p2p;      /* end the saving session */
    mig_arc_fn precopy_to_precopy_p2p;  /* quiesce, the session stays */
    mig_arc_fn precopy_p2p_to_precopy;  /* resume, the session stays */
    mig_arc_fn precopy_p2p_to_stopcopy; /* stream the final data */
    mig_arc_fn stop_to_stopcopy;        /* open a saving session, stopped */
    mig_arc_fn stopcopy_to_stop;        /* end the saving session */
    mig_arc_fn stop_to_resuming;        /* open a loading session */
    mig_arc_fn resuming_to_stop;        /* validate and apply the loaded data */
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

/* True if @state is a state this device supports (any in range). */
bool mig_state_supported(uint32_t state);

/* Start in RUNNING. */
void mig_fsm_init(struct mig_fsm *fsm, const struct mig_fsm_ops *ops,
                  void *opaque);

/*
 * The states visited from @from to reach @to, @to included, into
 * @path[MIG_FSM_MAX_PATH]; returns their number (0 when @from == @to), or
 * -EINVAL if @to cannot be reached (unsupported or ERROR target, ERROR
 * source, STOP_COPY -> PRE_COPY or PRE_COPY_P2P).  Pure.
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
