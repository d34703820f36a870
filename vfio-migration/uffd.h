/*
 * uffd.h -- the few userfaultfd(2) operations a post-copy destination needs,
 * on a userfaultfd that may belong to another process (QEMU creates it and
 * hands it over: every operation then acts on QEMU's address space).
 *
 * Ranges are registered in MISSING mode: a page of a shared-memory mapping
 * that is not in the page cache blocks the thread touching it (a vCPU, or
 * QEMU's main loop) until uffd_copy() installs it or uffd_wake() finds it
 * there.  Closing the last reference to the userfaultfd unregisters every
 * range and wakes every waiter.
 */
#ifndef VG_UFFD_H
#define VG_UFFD_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

/* A userfaultfd of this process, ready (UFFDIO_API done), non-blocking:
 * for tests, and for a server that maps VRAM itself. */
int uffd_open(struct vg_error *err);
/* Register [@addr, +@len) of the userfaultfd's address space in MISSING
 * mode; -EINVAL unless both are page-aligned. */
int uffd_register(int fd, uint64_t addr, uint64_t len, struct vg_error *err);
int uffd_unregister(int fd, uint64_t addr, uint64_t len, struct vg_error *err);
/* Install @len bytes from @src at @addr and wake whoever waits there.
 * Returns 1 if installed, 0 if the range was already there (nothing
 * copied; its waiters are woken), or a negative errno: -ESRCH when the
 * userfaultfd's process has exited (its address space is gone). */
int uffd_copy(int fd, uint64_t addr, const void *src, uint64_t len,
              struct vg_error *err);
int uffd_wake(int fd, uint64_t addr, uint64_t len, struct vg_error *err);
/* The address of the next page fault, if one is queued: 1 and *@addr, 0
 * if none is (the fd is non-blocking), or a negative errno.  Events other
 * than page faults are skipped. */
int uffd_next_fault(int fd, uint64_t *addr, struct vg_error *err);

#endif
