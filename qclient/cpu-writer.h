/*
 * cpu-writer.h -- guest CPU writes to the vGPU's VRAM through BAR2, made
 * with qtest while a migration runs, each recorded with when it reached
 * VRAM relative to the source VM's stop, and the VRAM the destination
 * must then hold.
 *
 * QEMU stops the VM (the STOP event, timestamped by QEMU with the host's
 * real-time clock) with the big QEMU lock held, and holds it until the
 * device's stop-copy data is out; qtest commands run under that lock
 * too.  So a write whose reply arrived before the STOP event's timestamp
 * reached VRAM before the stop and must be on the destination ("before");
 * one sent after that timestamp reached the source's VRAM after the
 * stream, and the destination never sees it ("after"); one in flight
 * across the stop may be either ("in flight").  The writer looks for the
 * STOP event before every batch and writes nothing once it has seen one,
 * so only the last batch can be in flight or after.  Writes are kept in
 * the order QEMU applied them: the destination holds every "before"
 * write and some prefix of the rest.
 *
 * Where writes go: @hot_percent of them inside the first @hot_bytes of
 * VRAM, the rest anywhere; @straddle_percent of them cross a boundary of
 * @page_size bytes; lengths from @min_len to @max_len bytes.
 */
#ifndef VG_QCLIENT_CPU_WRITER_H
#define VG_QCLIENT_CPU_WRITER_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "qmp.h"
#include "qtest.h"

struct vg_cpu_writer_opts {
    struct vg_qtest *qt; /* the source QEMU's qtest */
    struct vg_qmp *qmp;  /* its QMP, for the STOP event */
    uint64_t vram_addr;  /* BAR2's guest physical address */
    uint64_t vram_size;
    uint32_t page_size;        /* the boundary straddling writes cross */
    uint32_t rate;             /* writes per second */
    uint32_t min_len, max_len; /* 1..64 bytes */
    uint64_t hot_bytes;        /* 0: no hot set */
    unsigned hot_percent;
    unsigned straddle_percent;
    uint32_t batch; /* writes per pipelined batch, 1..256 (0: 64) */
    uint64_t seed;
};

/* Counts of writes by when they reached VRAM. */
struct vg_cpu_writer_counts {
    uint64_t before, in_flight, after;
    uint64_t bytes;         /* written in all */
    int64_t stop_us;        /* STOP's timestamp; -1 if not seen */
    int64_t last_before_us; /* reply of the last "before" write, from STOP;
                               INT64_MIN if none */
    int64_t last_reply_us;  /* reply of the last write, from STOP */
    double rate;            /* writes per second, first sent to last replied */
};

struct vg_cpu_writer;

int vg_cpu_writer_new(const struct vg_cpu_writer_opts *o,
                      struct vg_cpu_writer **out, struct vg_error *err);
void vg_cpu_writer_free(struct vg_cpu_writer *w);

/* Make the writes due at the rate since vg_cpu_writer_new(), for at most
 * @max_ms; nothing once the VM stopped.  Returns 1 when it saw the STOP
 * event (now or before), 0 otherwise. */
int vg_cpu_writer_run(struct vg_cpu_writer *w, int max_ms,
                      struct vg_error *err);
/* Whether the STOP event came (looks for it now). */
int vg_cpu_writer_stopped(struct vg_cpu_writer *w, struct vg_error *err);
void vg_cpu_writer_counts(const struct vg_cpu_writer *w,
                          struct vg_cpu_writer_counts *c);

/* Candidates for what VRAM holds after the writes: candidate i is @image
 * (VRAM before the first write, vram_size bytes) with every "before"
 * write applied, then the first i of the others.  Candidates 0 to
 * vg_cpu_writer_uncertain() exist.  @image is modified in place:
 * vg_cpu_writer_image() moves it to candidate i (any order). */
uint64_t vg_cpu_writer_uncertain(const struct vg_cpu_writer *w);
void vg_cpu_writer_image(struct vg_cpu_writer *w, uint8_t *image, uint64_t i);

/* vgpu-server's VRAM checksum (XXH3-64 of the page hashes of every page
 * of @page_size bytes: XXH3-64 of the page, or its vg_hash_tree() if
 * @tree, as a stream of version 5 or later takes them) of each
 * candidate, into @sums (uncertain() + 1 entries).  Leaves @image at
 * candidate 0. */
void vg_cpu_writer_checksums(struct vg_cpu_writer *w, uint8_t *image,
                             uint32_t page_size, bool tree, uint64_t *sums);
/* The index among @n checksums @sums of the one vgpu-server writes as
 * @hex (its stats file's "vram_checksum"), or -1. */
int64_t vg_cpu_writer_find_sum(const char *hex, const uint64_t *sums,
                               uint64_t n);
/* The candidate @vram (a whole VRAM read back) equals, or -1; the first
 * differing offset from candidate 0 in *@diff_off if none. */
int64_t vg_cpu_writer_match(struct vg_cpu_writer *w, uint8_t *image,
                            const uint8_t *vram, uint64_t *diff_off);

#endif
