/*
 * mig-rounds.h -- the pre-copy planner's decisions, without I/O: when to
 * close a dirty-tracking epoch and start the next round, and GPU
 * auto-converge (throttle the command processor step by step while the
 * vGPU dirties VRAM faster than the stream drains it).
 */
#ifndef MIG_ROUNDS_H
#define MIG_ROUNDS_H

#include <stdbool.h>
#include <stdint.h>

enum mig_precopy_mode {
    MIG_PRECOPY_ITERATIVE, /* rounds until QEMU switches over (default) */
    MIG_PRECOPY_ONE_SHOT,  /* round 0 only (gMig's single pass) */
    MIG_PRECOPY_NONE,      /* no data in PRE_COPY: stop-and-copy */
};

enum mig_track_mode {
    MIG_TRACK_HYBRID, /* exact logs + hashing of the opaque write-set */
    MIG_TRACK_HASH,   /* hash every page every epoch */
    MIG_TRACK_NONE,   /* no tracking: every round resends every page */
};

/* Which copies of page data a GPU hashes itself (vgpu_copies_hash). */
enum mig_gpu_hash {
    MIG_GPU_HASH_AUTO,   /* reads and writes, where faster (mig-hashway.h) */
    MIG_GPU_HASH_SOURCE, /* a source's reads; a destination's CPU hashes */
    MIG_GPU_HASH_BOTH,   /* and a destination's writes */
    MIG_GPU_HASH_NONE,   /* neither: the servers' CPUs hash every copy */
};

/* Names as on the command line; NULL for a bad value. */
const char *mig_precopy_mode_name(enum mig_precopy_mode mode);
const char *mig_track_mode_name(enum mig_track_mode mode);
const char *mig_gpu_hash_name(enum mig_gpu_hash mode);
/* 0, or -1 if @name is no mode. */
int mig_precopy_mode_parse(const char *name, enum mig_precopy_mode *out);
int mig_track_mode_parse(const char *name, enum mig_track_mode *out);
int mig_gpu_hash_parse(const char *name, enum mig_gpu_hash *out);

/* Least time between two pre-copy epochs (an idle device then reports
 * no dirty data between them, so QEMU converges). */
#define MIG_EPOCH_MIN_MS 20.0
/* The throttle rises after MIG_CONVERGE_ROUNDS rounds in a row in which
 * the vGPU dirtied at least MIG_CONVERGE_PERCENT % of what the stream
 * drained (the rounds do not shrink: pre-copy does not converge; 50 % is
 * also QEMU's default throttle-trigger-threshold for RAM). */
#define MIG_CONVERGE_ROUNDS  3u
#define MIG_CONVERGE_PERCENT 50u
#define MIG_THROTTLE_MAX     9u /* levels; percent = 10 x level */

struct mig_rounds {
    enum mig_precopy_mode mode;
    bool tracking;            /* dirty tracking on (auto-converge needs it) */
    double last_epoch_ms;     /* when the last epoch was taken */
    unsigned faster;          /* consecutive rounds that dirtied faster */
    unsigned level;           /* throttle level now, 0 .. MIG_THROTTLE_MAX */
    unsigned max_level;       /* highest level applied this session */
    uint64_t throttle_rounds; /* rounds that ran throttled */
    double next_step_ms;      /* a throttled device steps again from then */
    double held_ms;           /* time taken from the device so far */
};

void mig_rounds_init(struct mig_rounds *r, enum mig_precopy_mode mode,
                     bool tracking, double now_ms);
/*
 * In PRE_COPY, with the current round drained (everything of it read):
 * start the next round now?  Only in iterative mode, and at most once per
 * MIG_EPOCH_MIN_MS.
 */
bool mig_rounds_want_epoch(const struct mig_rounds *r, double now_ms);
/*
 * A pre-copy epoch closed at @now_ms: @dirtied bytes of pages written
 * during the round that just ended, which drained @drained bytes.  Raises
 * the throttle after MIG_CONVERGE_ROUNDS rounds in a row of dirtying at
 * least MIG_CONVERGE_PERCENT % of what was drained (and drops the count
 * on a round that did not).
 */
void mig_rounds_epoch(struct mig_rounds *r, uint64_t dirtied, uint64_t drained,
                      double now_ms);
/* Percent of the command processor's time taken away now (0 .. 90). */
unsigned mig_rounds_throttle_percent(const struct mig_rounds *r);
/* Ms to wait before the next step of the command processor (0: now). */
double mig_rounds_step_wait_ms(const struct mig_rounds *r, double now_ms);
/* A step ran from @start_ms to @end_ms: pace the next one so the device
 * runs at most (100 - percent)% of the time; held_ms adds the pause. */
void mig_rounds_stepped(struct mig_rounds *r, double start_ms, double end_ms);

#endif
