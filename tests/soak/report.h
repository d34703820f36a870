/*
 * report.h -- what a soak run counts, as JSON (report.json) and as a
 * human summary.
 *
 * Every leg (one migration attempt) is added with report_leg(): whether
 * the VM moved, the fault's kind and the phase it landed in, the
 * migration's final status, recoveries, corruptions, leaks, QEMU's
 * downtime and the bytes moved.  docs/soak.md describes the fields.
 */
#ifndef VGMIG_TESTS_SOAK_REPORT_H
#define VGMIG_TESTS_SOAK_REPORT_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "common/error.h"
#include "rig.h"

struct report {
    uint64_t seed;
    char vram[16], page[16];
    bool netns;
    char netns_why[160];
    bool netem;
    int64_t t_start_ms, t_end_ms;
    unsigned legs;       /* migration attempts */
    unsigned migrations; /* attempts that moved the VM */
    unsigned postcopy;   /* ...of them in post-copy, every page in */
    unsigned restored;   /* ...through a save file, every page in */
    /* The same by the VM's number of vGPUs. */
    unsigned legs_by_vgpus[RIG_MAX_VGPUS + 1];
    unsigned migrations_by_vgpus[RIG_MAX_VGPUS + 1];
    unsigned faults[FK_COUNT][PH_COUNT + 1]; /* by kind, phase seen */
    unsigned outcome[FK_COUNT][3];           /* completed, failed, cancelled */
    unsigned recoveries, source_continued, corruptions, leaks, lost, stuck,
        errors, generations;
    GArray *downtime_ms; /* int64_t, of migrations that moved the VM */
    GArray *total_ms;
    int64_t vfio_bytes, ram_bytes;
    uint64_t batches, commands, cpu_writes;
    uint64_t raced_steps, raced_lost; /* CPU writes that raced a stop */
    GPtrArray *problems;              /* "leg N: ..." lines */
    char skipped[FK_COUNT][160];      /* kinds never injected: why, or "" */
};

void report_init(struct report *rep, uint64_t seed, const char *vram,
                 const char *page);
void report_destroy(struct report *rep);
/* Leg number @n was run with plan @p and ended as @res. */
void report_leg(struct report *rep, unsigned n, const struct leg_plan *p,
                const struct leg_result *res);
/* Something went wrong in leg @n that is not a counted outcome. */
void report_problem(struct report *rep, unsigned n, const char *what);
/* Whether the run passed: no corruption, leak, lost VM, stuck
 * migration or error. */
bool report_passed(const struct report *rep);
int report_write_json(const struct report *rep, const char *path,
                      struct vg_error *err);
void report_print(const struct report *rep, FILE *out);

#endif
