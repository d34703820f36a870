/*
 * populate.h -- back a shared mapping with memory before it is needed.
 *
 * A memfd's pages are allocated and zeroed by the kernel at first touch:
 * one fault per 4 KiB page, in whichever thread touches it first.  For
 * the CPU backend's VRAM on a migration's destination, and for the data
 * area both sides' copies and sockets go through, those faults would fall
 * inside the stream (docs/data-path.md measures them).
 * vg_populate_start() populates [base, base + size) on a thread of its
 * own, in VG_POPULATE_STEP pieces, with MADV_POPULATE_WRITE: page contents
 * are never changed, so it may run while others read and write the
 * mapping.  It stops at the end, at the first error (logged: a kernel
 * without MADV_POPULATE_WRITE, or no memory left) or when
 * vg_populate_stop() asks, which joins the thread; its progress stays
 * readable until vg_populate_free().  @what names the mapping in the log
 * ("VRAM preallocated: 64 MiB in 9 ms ...").
 */
#ifndef VG_POPULATE_H
#define VG_POPULATE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

#define VG_POPULATE_STEP (2u << 20)

struct vg_populate;

/* What the thread has done so far. */
struct vg_populate_progress {
    uint64_t done; /* bytes populated, from base up */
    bool finished; /* the thread has stopped */
    int error;     /* 0, or the -errno it stopped on */
    double elapsed_ms;
};

int vg_populate_start(uint8_t *base, uint64_t size, const char *what,
                      struct vg_populate **out, struct vg_error *err);
/* vg_populate_start() for memory that works without it: where the thread
 * cannot start, warn that the pages come at first touch and leave *@out
 * NULL. */
void vg_populate_hint(uint8_t *base, uint64_t size, const char *what,
                      struct vg_populate **out);
/* Stop the thread (if it still runs) and join it.  Not concurrently with
 * itself or vg_populate_free(). */
void vg_populate_stop(struct vg_populate *p);
/* vg_populate_stop(), then free; NULL is ignored. */
void vg_populate_free(struct vg_populate *p);
/* Any thread, until vg_populate_free(). */
void vg_populate_progress(struct vg_populate *p,
                          struct vg_populate_progress *out);

#endif
