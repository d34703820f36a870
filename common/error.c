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
    char old[VG_ERROR_MAX];
    va_list ap;
    int n;

    if (!err) {
        return;
    }
    memcpy(old, err->msg, sizeof(old));
    va_start(ap, fmt);
    n = vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(err->msg)) {
        return; /* the prefix alone fills the buffer */
    }
    /* The tail is truncated if needed; the text stays terminated. */
    snprintf(err->msg + n, sizeof(err->msg) - (size_t)n, ": %s", old);
}

void vg_error_clear(struct vg_error *err)
{
    if (err) {
        err->code = 0;
        err->msg[0] = '\0';
    }
}
