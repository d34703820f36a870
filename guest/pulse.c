#include "pulse.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

static unsigned pulse_period_ms;
static _Atomic uint64_t pulse_count, pulse_max_gap_us;

static uint64_t now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Sleep until @deadline_us on the monotonic clock. */
static void sleep_until(uint64_t deadline_us)
{
    struct timespec ts = {.tv_sec = (time_t)(deadline_us / 1000000u),
                          .tv_nsec = (long)(deadline_us % 1000000u) * 1000};

    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
           EINTR) {
    }
}

static void *pulse_thread(void *arg)
{
    uint64_t period_us = (uint64_t)pulse_period_ms * 1000u;
    uint64_t last = now_us(), next = last + period_us;

    (void)arg;
    for (uint64_t seq = 0;; seq++) {
        uint64_t now = now_us(), gap = now - last;

        if (gap > atomic_load(&pulse_max_gap_us)) {
            atomic_store(&pulse_max_gap_us, gap);
        }
        /* One locked printf and flush: lines of other threads stay whole. */
        flockfile(stdout);
        printf("vgpu-guest: pulse seq=%" PRIu64 " gap_us=%" PRIu64 "\n", seq,
               gap);
        fflush(stdout);
        funlockfile(stdout);
        atomic_fetch_add(&pulse_count, 1);
        last = now;
        /* After a long gap, keep the period from now on: no burst. */
        next = next + period_us > now ? next + period_us : now + period_us;
        sleep_until(next);
    }
    return NULL;
}

int vgg_pulse_start(unsigned period_ms)
{
    pthread_t t;
    int rc;

    if (period_ms == 0) {
        return -EINVAL;
    }
    pulse_period_ms = period_ms;
    rc = pthread_create(&t, NULL, pulse_thread, NULL);
    if (rc == 0) {
        pthread_detach(t);
    }
    return -rc;
}

void vgg_pulse_stats(struct vgg_pulse_stats *st)
{
    st->count = atomic_load(&pulse_count);
    st->max_gap_us = atomic_load(&pulse_max_gap_us);
}
