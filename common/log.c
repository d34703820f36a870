#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const level_names[] = {
    [VG_LOG_ERROR] = "error", [VG_LOG_WARN] = "warn",   [VG_LOG_INFO] = "info",
    [VG_LOG_DEBUG] = "debug", [VG_LOG_TRACE] = "trace",
};

static enum vg_log_level threshold = VG_LOG_INFO;
static const char *prog_name = "vgmig";

void vg_log_set_prog(const char *prog)
{
    prog_name = prog;
}

void vg_log_set_level(enum vg_log_level level)
{
    threshold = level;
}

bool vg_log_parse_level(const char *name, enum vg_log_level *level)
{
    for (unsigned i = 0; i < sizeof(level_names) / sizeof(level_names[0]);
         i++) {
        if (strcmp(name, level_names[i]) == 0) {
            *level = (enum vg_log_level)i;
            return true;
        }
    }
    return false;
}

bool vg_log_enabled(enum vg_log_level level)
{
    return level <= threshold;
}

/* "[SECONDS.MICROSECONDS] " of the real-time clock, as QEMU's QMP event
 * timestamps, when $VGMIG_LOG_TIME is set; else "". */
static int time_prefix(char *buf, size_t size)
{
    static int wanted = -1; /* any thread may log: relaxed atomics */
    int w = __atomic_load_n(&wanted, __ATOMIC_RELAXED);
    struct timespec ts;

    if (w < 0) {
        w = getenv("VGMIG_LOG_TIME") != NULL;
        __atomic_store_n(&wanted, w, __ATOMIC_RELAXED);
    }
    if (!w) {
        buf[0] = '\0';
        return 0;
    }
    clock_gettime(CLOCK_REALTIME, &ts);
    return snprintf(buf, size, "[%lld.%06ld] ", (long long)ts.tv_sec,
                    ts.tv_nsec / 1000);
}

void vg_log(enum vg_log_level level, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    int n;

    if (!vg_log_enabled(level)) {
        return;
    }
    n = time_prefix(line, sizeof(line));
    n += snprintf(line + n, sizeof(line) - (size_t)n, "%s[%d]: %s: ", prog_name,
                  (int)getpid(), level_names[level]);
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    /* One write per line so lines of concurrent threads never interleave. */
    fprintf(stderr, "%s\n", line);
}
