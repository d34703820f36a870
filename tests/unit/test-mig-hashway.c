/*
 * Unit tests of the choice of the way to hash a copy's pages
 * (vfio-migration/mig-hashway.h): the GPU, then the threads are tried
 * first; then the cheaper way, with the other after MIG_HASHWAY_PROBE
 * copies and then at intervals twice as long each time, up to
 * MIG_HASHWAY_PROBE_MAX; a change of choice starts the intervals again;
 * a way that turns slower loses its turn; small copies teach nothing.
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

/* The copies among the next @n that take the other way than @best, at
 * the positions (1 = the next copy) listed in @at, @nat of them. */
static void assert_probes_at(struct mig_hashway *h, enum mig_way best,
                             unsigned n, const unsigned *at, unsigned nat)
{
    unsigned found = 0;

    for (unsigned i = 1; i <= n; i++) {
        if (mig_hashway_choose(h) != best) {
            g_assert_cmpuint(found, <, nat);
            g_assert_cmpuint(i, ==, at[found]);
            found++;
        }
    }
    g_assert_cmpuint(found, ==, nat);
}

static void test_cheaper_way_and_probes(void)
{
    struct mig_hashway h = {
        .ms_per_mib = {0.2, 0.04}}; /* threads 0.2, GPU 0.04 ms */
    /* After 16 copies, then 32, 64, 128 and 256 at most. */
    const unsigned at[] = {17, 49, 113, 241, 497, 753};

    assert_probes_at(&h, MIG_WAY_GPU, 1000, at, G_N_ELEMENTS(at));
    g_assert_cmpuint(h.probes, ==, G_N_ELEMENTS(at));
}

static void test_changed_choice_probes_again_soon(void)
{
    struct mig_hashway h = {.ms_per_mib = {0.2, 0.04}};
    const unsigned backed_off[] = {17, 49, 113, 241, 497, 753};
    const unsigned again[] = {17, 49}; /* after the change */

    assert_probes_at(&h, MIG_WAY_GPU, 1000, backed_off,
                     G_N_ELEMENTS(backed_off));
    h.ms_per_mib[MIG_WAY_GPU] = 0.5; /* the GPU got slower */
    assert_probes_at(&h, MIG_WAY_THREADS, 100, again, G_N_ELEMENTS(again));
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
    g_assert_cmpint(mig_hashway_choose(&h), ==, MIG_WAY_THREADS);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/mig-hashway/tries-both-first", test_tries_both_first);
    g_test_add_func("/mig-hashway/cheaper-way-and-probes",
                    test_cheaper_way_and_probes);
    g_test_add_func("/mig-hashway/changed-choice-probes-again-soon",
                    test_changed_choice_probes_again_soon);
    g_test_add_func("/mig-hashway/learning", test_learning);
    return g_test_run();
}
