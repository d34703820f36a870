/*
 * mig-hashway.c -- the faster way to hash a copy's pages, learnt.
 */
#include "mig-hashway.h"

#define WEIGHT 0.25 /* of the newest copy in the moving average */

static enum mig_way other_way(enum mig_way way)
{
    return way == MIG_WAY_GPU ? MIG_WAY_THREADS : MIG_WAY_GPU;
}

/* Probe again after the first interval, from copy @now on. */
static void restart_probes(struct mig_hashway *h, enum mig_way best,
                           uint64_t now)
{
    h->best = best;
    h->interval = MIG_HASHWAY_PROBE;
    h->next_probe = now + MIG_HASHWAY_PROBE;
}

enum mig_way mig_hashway_choose(struct mig_hashway *h)
{
    enum mig_way best;

    h->copies++;
    if (h->ms_per_mib[MIG_WAY_GPU] == 0) {
        return MIG_WAY_GPU;
    }
    if (h->ms_per_mib[MIG_WAY_THREADS] == 0) {
        return MIG_WAY_THREADS;
    }
    best = h->ms_per_mib[MIG_WAY_GPU] <= h->ms_per_mib[MIG_WAY_THREADS]
               ? MIG_WAY_GPU
               : MIG_WAY_THREADS;
    if (h->interval == 0 || best != h->best) {
        restart_probes(h, best, h->copies);
        return best;
    }
    if (h->copies < h->next_probe) {
        return best;
    }
    if (h->interval < MIG_HASHWAY_PROBE_MAX) {
        h->interval *= 2;
    }
    h->next_probe = h->copies + h->interval;
    h->probes++;
    return other_way(best);
}

void mig_hashway_learn(struct mig_hashway *h, enum mig_way way, double ms,
                       uint64_t bytes)
{
    double cost, *avg = &h->ms_per_mib[way];

    if (bytes < MIG_HASHWAY_MIN_BYTES || ms < 0) {
        return;
    }
    cost = ms * (double)(1u << 20) / (double)bytes;
    cost = cost > 0 ? cost : 1e-9; /* 0 means not measured */
    *avg = *avg == 0 ? cost : *avg + WEIGHT * (cost - *avg);
}
