#include "size.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <strings.h>

static int suffix_shift(const char *s)
{
    static const struct {
        const char *name;
        int shift;
    } suffixes[] = {
        {"", 0},     {"B", 0},   {"K", 10},   {"KB", 10},  {"KiB", 10},
        {"M", 20},   {"MB", 20}, {"MiB", 20}, {"G", 30},   {"GB", 30},
        {"GiB", 30}, {"T", 40},  {"TB", 40},  {"TiB", 40},
    };
    for (unsigned i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        if (strcasecmp(s, suffixes[i].name) == 0) {
            return suffixes[i].shift;
        }
    }
    return -1;
}

int vg_parse_size(const char *text, uint64_t min, uint64_t max, uint64_t *out,
                  struct vg_error *err)
{
    uint64_t value = 0;
    const char *p = text;
    int shift;

    if (!isdigit((unsigned char)*p)) {
        return vg_error_set(err, EINVAL, "'%s' is not a size", text);
    }
    for (; isdigit((unsigned char)*p); p++) {
        unsigned digit = (unsigned)(*p - '0');
        if (value > (UINT64_MAX - digit) / 10) {
            return vg_error_set(err, ERANGE, "'%s' is too large", text);
        }
        value = value * 10 + digit;
    }
    shift = suffix_shift(p);
    if (shift < 0) {
        return vg_error_set(err, EINVAL,
                            "'%s': unknown suffix '%s' (use K, M, G or T)",
                            text, p);
    }
    if (shift && value > (UINT64_MAX >> shift)) {
        return vg_error_set(err, ERANGE, "'%s' is too large", text);
    }
    value <<= shift;
    if (value < min || value > max) {
        return vg_error_set(err, ERANGE,
                            "'%s' is out of range (%llu to %llu bytes)", text,
                            (unsigned long long)min, (unsigned long long)max);
    }
    *out = value;
    return 0;
}

int vg_parse_size_opt(const char *prog, const char *opt, const char *text,
                      uint64_t min, uint64_t max, uint64_t *out)
{
    struct vg_error err = {0};

    if (vg_parse_size(text, min, max, out, &err) < 0) {
        fprintf(stderr, "%s: --%s: %s\n", prog, opt, err.msg);
        return -1;
    }
    return 0;
}
