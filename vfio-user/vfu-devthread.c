/*
 * vfu-devthread.c -- the device's own thread: it runs the command
 * processor (vfu_device_step_locked()) whenever the device has work, so
 * that the guest's commands go on while the control loop waits on the
 * client and while the data plane serves a pre-copy read.
 *
 * Ownership (docs/architecture.md): each step holds regs_lock, as does
 * every request the control loop serves and every data plane request but
 * a pre-copy read; so the model, its registers, the MSI-X table, the
 * interrupt eventfds and the DMA mappings change under one lock.  A
 * pre-copy read runs beside a step: it reads VRAM, which the step may
 * write, and the migration module takes the step's writes from its
 * write log (vfio-migration/mig-wlog.h) when its next call begins.
 * The others take regs_lock through vfu_regs_lock(): a device with work
 * steps again as soon as it can, and a plain mutex would let it take the
 * lock again before a waiting register access ever gets it, so the
 * thread waits until every such waiter has had it.
 * The control loop kicks the thread after each request it serves (only
 * those can give the device work: a doorbell, a state change, a reset);
 * with no work, it sleeps until kicked, or for as long as the throttle
 * or post-copy asks (vfu_device_wait_ms()).
 */
#include "vfu-server-int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"

struct vfu_devthread {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond; /* kicked, or stop */
    bool kicked;
    bool stop;
};

/* Step once; the milliseconds the device can wait for its next step, 0:
 * at once, -1: until kicked. */
static int step_once(struct vfu_server *srv)
{
    int wait;

    pthread_mutex_lock(&srv->regs_lock);
    vfu_device_step_locked(srv);
    wait = vfu_device_wait_ms(srv);
    pthread_mutex_unlock(&srv->regs_lock);
    return wait;
}

/* Sleep until kicked, stopped or @ms have passed (-1: no limit). */
static void sleep_until_kicked(struct vfu_devthread *dt, int ms)
{
    struct timespec until;

    if (ms >= 0) {
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += ms / 1000;
        until.tv_nsec += (long)(ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    while (!dt->kicked && !dt->stop) {
        if (ms < 0) {
            pthread_cond_wait(&dt->cond, &dt->lock);
        } else if (pthread_cond_timedwait(&dt->cond, &dt->lock, &until) ==
                   ETIMEDOUT) {
            break;
        }
    }
}

static void *devthread_main(void *arg)
{
    struct vfu_server *srv = arg;
    struct vfu_devthread *dt = srv->devthread;

    pthread_mutex_lock(&dt->lock);
    while (!dt->stop) {
        int wait;

        dt->kicked = false;
        pthread_mutex_unlock(&dt->lock);
        wait = step_once(srv);
        pthread_mutex_lock(&dt->lock);
        /* A thread waiting for regs_lock has it before the next step: a
         * mutex would let this thread take it again first. */
        while (atomic_load(&srv->regs_waiters) > 0 && !dt->stop) {
            pthread_cond_wait(&dt->cond, &dt->lock);
        }
        if (wait != 0) {
            sleep_until_kicked(dt, wait);
        }
    }
    pthread_mutex_unlock(&dt->lock);
    return NULL;
}

int vfu_devthread_start(struct vfu_server *srv, struct vg_error *err)
{
    struct vfu_devthread *dt = calloc(1, sizeof(*dt));
    pthread_condattr_t attr;
    int ret;

    if (!dt) {
        return vg_error_set(err, ENOMEM, "device thread");
    }
    pthread_mutex_init(&dt->lock, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&dt->cond, &attr);
    pthread_condattr_destroy(&attr);
    srv->devthread = dt;
    ret = pthread_create(&dt->thread, NULL, devthread_main, srv);
    if (ret != 0) {
        srv->devthread = NULL;
        pthread_cond_destroy(&dt->cond);
        pthread_mutex_destroy(&dt->lock);
        free(dt);
        return vg_error_set(err, ret, "device thread: %s", strerror(ret));
    }
    pthread_setname_np(dt->thread, "vgs/device");
    return 0;
}

void vfu_devthread_stop(struct vfu_server *srv)
{
    struct vfu_devthread *dt = srv->devthread;

    if (!dt) {
        return;
    }
    pthread_mutex_lock(&dt->lock);
    dt->stop = true;
    pthread_cond_signal(&dt->cond);
    pthread_mutex_unlock(&dt->lock);
    pthread_join(dt->thread, NULL);
    pthread_cond_destroy(&dt->cond);
    pthread_mutex_destroy(&dt->lock);
    free(dt);
    srv->devthread = NULL;
}

void vfu_devthread_kick(struct vfu_server *srv)
{
    struct vfu_devthread *dt = srv->devthread;

    pthread_mutex_lock(&dt->lock);
    dt->kicked = true;
    pthread_cond_signal(&dt->cond);
    pthread_mutex_unlock(&dt->lock);
}

void vfu_regs_lock(struct vfu_server *srv)
{
    atomic_fetch_add(&srv->regs_waiters, 1);
    pthread_mutex_lock(&srv->regs_lock);
    if (atomic_fetch_sub(&srv->regs_waiters, 1) == 1 && srv->devthread) {
        vfu_devthread_kick(srv); /* the last waiter is in */
    }
}

void vfu_regs_unlock(struct vfu_server *srv)
{
    pthread_mutex_unlock(&srv->regs_lock);
}
