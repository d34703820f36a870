/*
 * mig-rounds.c -- pre-copy round decisions and GPU auto-converge.
 */
#include "mig-rounds.h"

#include <string.h>

static const char *const precopy_names[] = {
    [MIG_PRECOPY_ITERATIVE] = "iterative",
    [MIG_PRECOPY_ONE_SHOT] = "one-shot",
    [MIG_PRECOPY_NONE] = "none",
};

static const char *const track_names[] = {
    [MIG_TRACK_HYBRID] = "hybrid",
    [MIG_TRACK_HASH] = "hash",
    [MIG_TRACK_NONE] = "none",
};

static const char *const gpu_hash_names[] = {
    [MIG_GPU_HASH_AUTO] = "auto",
    [MIG_GPU_HASH_SOURCE] = "source",
    [MIG_GPU_HASH_BOTH] = "both",
    [MIG_GPU_HASH_NONE] = "none",
};

#define NAMES      3u
#define HASH_NAMES 4u

const char *mig_precopy_mode_name(enum mig_precopy_mode mode)
{
    return (unsigned)mode < NAMES ? precopy_names[mode] : NULL;
}

const char *mig_track_mode_name(enum mig_track_mode mode)
{
    return (unsigned)mode < NAMES ? track_names[mode] : NULL;
}

const char *mig_gpu_hash_name(enum mig_gpu_hash mode)
{
    return (unsigned)mode < HASH_NAMES ? gpu_hash_names[mode] : NULL;
}

static int find_name(const char *const *names, unsigned count, const char *name)
{
    for (unsigned i = 0; i < count; i++) {
        if (strcmp(names[i], name) == 0) {
            return (int)i;
        }
    }
    return -1;
}

int mig_precopy_mode_parse(const char *name, enum mig_precopy_mode *out)
{
    int i = find_name(precopy_names, NAMES, name);

    if (i >= 0) {
        *out = (enum mig_precopy_mode)i;
    }
    return i < 0 ? -1 : 0;
}

int mig_gpu_hash_parse(const char *name, enum mig_gpu_hash *out)
{
    int i = find_name(gpu_hash_names, HASH_NAMES, name);

    if (i >= 0) {
        *out = (enum mig_gpu_hash)i;
    }
    return i < 0 ? -1 : 0;
}

int mig_track_mode_parse(const char *name, enum mig_track_mode *out)
{
    int i = find_name(track_names, NAMES, name);

    if (i >= 0) {
        *out = (enum mig_track_mode)i;
    }
    return i < 0 ? -1 : 0;
}

void mig_rounds_init(struct mig_rounds *r, enum mig_precopy_mode mode,
                     bool tracking, double now_ms)
{
    memset(r, 0, sizeof(*r));
    r->mode = mode;
    r->tracking = tracking;
    r->last_epoch_ms = now_ms;
}

bool mig_rounds_want_epoch(const struct mig_rounds *r, double now_ms)
{
    return r->mode == MIG_PRECOPY_ITERATIVE &&
           now_ms - r->last_epoch_ms >= MIG_EPOCH_MIN_MS;
}

void mig_rounds_epoch(struct mig_rounds *r, uint64_t dirtied, uint64_t drained,
                      double now_ms)
{
    r->last_epoch_ms = now_ms;
    if (r->level > 0) {
        r->throttle_rounds++;
    }
    if (!r->tracking || dirtied == 0 ||
        dirtied * 100 < drained * MIG_CONVERGE_PERCENT) {
        r->faster = 0;
        return;
    }
    if (++r->faster < MIG_CONVERGE_ROUNDS) {
        return;
    }
    r->faster = 0;
    if (r->level < MIG_THROTTLE_MAX) {
        r->level++;
    }
    if (r->level > r->max_level) {
        r->max_level = r->level;
    }
}

unsigned mig_rounds_throttle_percent(const struct mig_rounds *r)
{
    return r->level * 10u;
}

double mig_rounds_step_wait_ms(const struct mig_rounds *r, double now_ms)
{
    if (r->level == 0 || now_ms >= r->next_step_ms) {
        return 0;
    }
    return r->next_step_ms - now_ms;
}

void mig_rounds_stepped(struct mig_rounds *r, double start_ms, double end_ms)
{
    double ran = end_ms - start_ms;
    unsigned p = mig_rounds_throttle_percent(r);

    if (p == 0) {
        return;
    }
    /* At least 50 us of run time counted, so that tiny steps pace too. */
    ran = ran < 0.05 ? 0.05 : ran;
    r->next_step_ms = end_ms + ran * p / (100 - p);
    r->held_ms += ran * p / (100 - p);
}
