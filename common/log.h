/*
 * log.h -- the one logging facility of vgmig programs.
 *
 * Messages go to stderr as "prog[pid]: LEVEL: text", with the real-time
 * clock in front ("[1795000000.123456] ", the form of QEMU's QMP event
 * timestamps) when the environment has VGMIG_LOG_TIME.  The threshold is set
 * once at start-up (vg_log_set_level) and read lock-free afterwards.
 */
#ifndef VG_LOG_H
#define VG_LOG_H

#include <stdbool.h>

enum vg_log_level {
    VG_LOG_ERROR,
    VG_LOG_WARN,
    VG_LOG_INFO,
    VG_LOG_DEBUG,
    VG_LOG_TRACE,
};

/* Program name shown in every line (default "vgmig"). */
void vg_log_set_prog(const char *prog);
void vg_log_set_level(enum vg_log_level level);
/* Parse "error|warn|info|debug|trace"; false if @name is none of those. */
bool vg_log_parse_level(const char *name, enum vg_log_level *level);
bool vg_log_enabled(enum vg_log_level level);

void vg_log(enum vg_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define vg_err(...)  vg_log(VG_LOG_ERROR, __VA_ARGS__)
#define vg_warn(...) vg_log(VG_LOG_WARN, __VA_ARGS__)
#define vg_info(...) vg_log(VG_LOG_INFO, __VA_ARGS__)
#define vg_dbg(...)  vg_log(VG_LOG_DEBUG, __VA_ARGS__)
#define vg_trace(...)                                                          \
    do {                                                                       \
        if (vg_log_enabled(VG_LOG_TRACE))                                      \
            vg_log(VG_LOG_TRACE, __VA_ARGS__);                                 \
    } while (0)

#endif
