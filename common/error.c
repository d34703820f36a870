#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int vg_error_set(struct vg_error *err, int code, const char *fmt, ...)
{
    va_list ap;

    if (err) {
        err->code = code;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        va_end(ap);
    }
    return -code;
}

void vg_error_prefix(struct vg_error *err, const char *fmt, ...)
{
    char prefix[VG_ERROR_MAX];
    char old[VG_ERROR_MAX];
    va_list ap;

    if (!err) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof(old));
    snprintf(err->msg, sizeof(err->msg), "%s: %s", prefix, old);
}

void vg_error_clear(struct vg_error *err)
{
    if (err) {
        err->code = 0;
        err->msg[0] = '\0';
    }
}
