/*
 * Unit tests of the choice of the way to hash a read's pages
 * (vfio-migration/mig-hashway.h): the GPU, then the threads are tried
 * first; then the cheaper way, with every MIG_HASHWAY_PROBE-th read the
 * other; a way that turns slower loses its turn; small reads teach
 * nothing.
 */
#include <glib.h>

#include "vfio-migration/mig-hashway.h"

#define MIB (1u << 20)

static void test_tries_both_first(void)
{
    struct mig_hashway h = {0};

    g_assert_cmpint(mig_hashway_choose(&h), ==, MIG_WAY_GPU);
    mig_hashway_learn(&h, MIG_WAY_GPU, 0.15, 4 * MIB);
    g_assert_cmpint(mig_hashway_choose(&h), ==, MIG_WAY_THREADS);
    mig_hashway_learn(&h, MIG_WAY_THREADS, 0.25, 4 * MIB);
    g_assert_cmpint(mig_hashway_choose(&h), ==, MIG_WAY_GPU);
}

/* Count the reads of @n that take the GPU. */
static unsigned gpu_reads(struct mig_hashway *h, unsigned n)
{
    unsigned gpu = 0;

    for (unsigned i = 0; i < n; i++) {
        gpu += mig_hashway_choose(h) == MIG_WAY_GPU;
    }
    return gpu;
}

static void test_cheaper_way_and_probes(void)
{
    struct mig_hashway h = {{0.2, 0.04}, 2}; /* threads 0.2, GPU 0.04 ms */

    g_assert_cmpuint(gpu_reads(&h, 10 * MIG_HASHWAY_PROBE), ==,
                     10 * MIG_HASHWAY_PROBE - 10);
    h.ms_per_mib[MIG_WAY_GPU] = 0.5; /* the GPU got slower */
    g_assert_cmpuint(gpu_reads(&h, 10 * MIG_HASHWAY_PROBE), ==, 10);
}

static void test_learning(void)
{
    struct mig_hashway h = {0};

    mig_hashway_learn(&h, MIG_WAY_GPU, 1.0, MIB / 2); /* too small */
    g_assert_cmpfloat(h.ms_per_mib[MIG_WAY_GPU], ==, 0);
    mig_hashway_learn(&h, MIG_WAY_GPU, 0.4, 4 * MIB);
    g_assert_cmpfloat_with_epsilon(h.ms_per_mib[MIG_WAY_GPU], 0.1, 1e-9);
    /* A read four times as slow per MiB moves the average a quarter of
     * the way. */
    mig_hashway_learn(&h, MIG_WAY_GPU, 1.6, 4 * MIB);
    g_assert_cmpfloat_with_epsilon(h.ms_per_mib[MIG_WAY_GPU], 0.175, 1e-9);
    /* The contended GPU loses to the threads after a few reads. */
    mig_hashway_learn(&h, MIG_WAY_THREADS, 0.8, 4 * MIB);
    for (unsigned i = 0; i < 8; i++) {
        mig_hashway_learn(&h, MIG_WAY_GPU, 2.4, 4 * MIB);
    }
    g_assert_cmpfloat(h.ms_per_mib[MIG_WAY_GPU], >,
                      h.ms_per_mib[MIG_WAY_THREADS]);
    h.reads = 1;
    g_assert_cmpint(mig_hashway_choose(&h), ==, MIG_WAY_THREADS);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/mig-hashway/tries-both-first", test_tries_both_first);
    g_test_add_func("/mig-hashway/cheaper-way-and-probes",
                    test_cheaper_way_and_probes);
    g_test_add_func("/mig-hashway/learning", test_learning);
    return g_test_run();
}
