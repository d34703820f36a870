/*
 * error.h -- errors that carry context up the call chain.
 *
 * A function that can fail takes a `struct vg_error *err` last and returns
 * 0 or a negative errno.  The innermost failure says what went wrong
 * (vg_error_set); callers add which object or operation it was about
 * (vg_error_prefix), giving e.g.
 *   "region 2: write at 0x1000+8: outside the region (size 0x1000)".
 * @err may be NULL when the caller does not want the text.
 */
#ifndef VG_ERROR_H
#define VG_ERROR_H

#define VG_ERROR_MAX 512

struct vg_error {
    int code; /* positive errno, 0 when unset */
    char msg[VG_ERROR_MAX];
};

/* Record @code (a positive errno) and a message; returns -@code. */
int vg_error_set(struct vg_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prepend "<text>: " to the message already in @err. */
void vg_error_prefix(struct vg_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void vg_error_clear(struct vg_error *err);

#endif
