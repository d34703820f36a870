/*
 * vfu-eventfd.h -- the interrupt eventfds a client passes with SET_IRQS.
 *
 * The server writes to them from its only thread, so a descriptor that
 * blocks on write (a pipe whose reader never reads fills up after 8192
 * interrupts) would stop it answering anyone.  Only eventfds are taken,
 * and they are switched to non-blocking: a counter at its maximum (the
 * client never reads it) drops the interrupt instead of blocking.
 */
#ifndef VFU_EVENTFD_H
#define VFU_EVENTFD_H

#include "common/error.h"

/* Take @fd as an interrupt eventfd: -EINVAL if it is not an eventfd, else
 * it is made non-blocking (O_NONBLOCK on the open file, which the client
 * shares: QEMU's event notifiers are non-blocking anyway). */
int vfu_eventfd_take(int fd, struct vg_error *err);

/* Add 1 to the eventfd's counter; never blocks.  A full counter (EAGAIN)
 * drops the interrupt quietly, other errors are logged. */
void vfu_eventfd_signal(int fd);

#endif
