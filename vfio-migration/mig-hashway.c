/*
 * mig-hashway.c -- the faster way to hash a read's pages, learnt.
 */
#include "mig-hashway.h"

#define WEIGHT 0.25 /* of the newest read in the moving average */

enum mig_way mig_hashway_choose(struct mig_hashway *h)
{
    enum mig_way best, other;

    h->reads++;
    if (h->ms_per_mib[MIG_WAY_GPU] == 0) {
        return MIG_WAY_GPU;
    }
    if (h->ms_per_mib[MIG_WAY_THREADS] == 0) {
        return MIG_WAY_THREADS;
    }
    best = h->ms_per_mib[MIG_WAY_GPU] <= h->ms_per_mib[MIG_WAY_THREADS]
               ? MIG_WAY_GPU
               : MIG_WAY_THREADS;
    other = best == MIG_WAY_GPU ? MIG_WAY_THREADS : MIG_WAY_GPU;
    return h->reads % MIG_HASHWAY_PROBE == 0 ? other : best;
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
