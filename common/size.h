/*
 * size.h -- parse sizes given on command lines ("64K", "256M", "4G").
 */
#ifndef VG_SIZE_H
#define VG_SIZE_H

#include <stdint.h>

#include "error.h"

/*
 * Parse @text as a byte count: digits with an optional K, M, G or T suffix
 * (powers of 1024; "KiB"/"MiB"/"GiB"/"TiB" and a trailing "B" accepted).
 * Fails with -EINVAL on anything else, or -ERANGE outside [@min, @max].
 */
int vg_parse_size(const char *text, uint64_t min, uint64_t max, uint64_t *out,
                  struct vg_error *err);

/*
 * The same for option --@opt of program @prog's command line: on failure
 * it says so on stderr ("@prog: --@opt: why") and returns -1.
 */
int vg_parse_size_opt(const char *prog, const char *opt, const char *text,
                      uint64_t min, uint64_t max, uint64_t *out);

#endif
