#include "vfu-caps.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define JSON_MAX_DEPTH 16

static const char *const cap_names[VFU_CAP_COUNT] = {
    [VFU_CAP_MAX_MSG_FDS] = "max_msg_fds",
    [VFU_CAP_MAX_XFER] = "max_data_xfer_size",
    [VFU_CAP_PGSIZES] = "pgsizes",
    [VFU_CAP_MAX_DMA_MAPS] = "max_dma_maps",
};

struct json {
    const char *s;
    size_t len;
    size_t pos;
    struct vg_error *err;
};

static int json_fail(struct json *j, const char *what)
{
    return vg_error_set(j->err, EINVAL, "capabilities JSON: %s at byte %zu",
                        what, j->pos);
}

static void json_ws(struct json *j)
{
    while (j->pos < j->len && strchr(" \t\r\n", j->s[j->pos]) &&
           j->s[j->pos] != '\0') {
        j->pos++;
    }
}

static bool json_eat(struct json *j, char c)
{
    json_ws(j);
    if (j->pos < j->len && j->s[j->pos] == c) {
        j->pos++;
        return true;
    }
    return false;
}

static int json_hex4(struct json *j)
{
    for (int i = 0; i < 4; i++) {
        if (j->pos >= j->len ||
            !strchr("0123456789abcdefABCDEF", j->s[j->pos]) ||
            j->s[j->pos] == '\0') {
            return json_fail(j, "bad \\u escape");
        }
        j->pos++;
    }
    return 0;
}

/* Parse a string; copy up to @size - 1 bytes of it (escapes kept as is)
 * into @out when @out is not NULL. */
static int json_string(struct json *j, char *out, size_t size)
{
    size_t n = 0;

    if (!json_eat(j, '"')) {
        return json_fail(j, "expected a string");
    }
    while (j->pos < j->len) {
        unsigned char c = (unsigned char)j->s[j->pos++];
        if (c == '"') {
            if (out) {
                out[n] = '\0';
            }
            return 0;
        }
        if (c < 0x20) {
            return json_fail(j, "control character in string");
        }
        if (out && n + 1 < size) {
            out[n++] = (char)c;
        }
        if (c != '\\') {
            continue;
        }
        if (j->pos >= j->len) {
            break;
        }
        c = (unsigned char)j->s[j->pos++];
        if (c == 'u') {
            int ret = json_hex4(j);
            if (ret < 0) {
                return ret;
            }
        } else if (!strchr("\"\\/bfnrt", c) || c == '\0') {
            return json_fail(j, "bad escape in string");
        }
    }
    return json_fail(j, "unterminated string");
}

/* Parse a number; *@uint gets its value when it is a non-negative integer
 * that fits 64 bits, else *@is_uint is false. */
static int json_number(struct json *j, uint64_t *uint, bool *is_uint)
{
    size_t start = j->pos;
    uint64_t v = 0;
    bool ok = true;

    json_ws(j);
    start = j->pos;
    if (j->pos < j->len && j->s[j->pos] == '-') {
        ok = false;
        j->pos++;
    }
    if (j->pos >= j->len || j->s[j->pos] < '0' || j->s[j->pos] > '9') {
        return json_fail(j, "expected a value");
    }
    while (j->pos < j->len && j->s[j->pos] >= '0' && j->s[j->pos] <= '9') {
        unsigned d = (unsigned)(j->s[j->pos++] - '0');
        if (v > (UINT64_MAX - d) / 10) {
            ok = false;
        }
        v = v * 10 + d;
    }
    if (j->pos - start > 1 && j->s[start] == '0') {
        return json_fail(j, "leading zero in number");
    }
    while (j->pos < j->len && j->s[j->pos] != '\0' &&
           strchr(".eE+-0123456789", j->s[j->pos])) {
        ok = false;
        j->pos++;
    }
    *uint = v;
    *is_uint = ok;
    return 0;
}

static int json_value(struct json *j, int depth);

/* Parse true or false into *@v. */
static int json_bool(struct json *j, bool *v)
{
    json_ws(j);
    if (j->len - j->pos >= 4 && memcmp(j->s + j->pos, "true", 4) == 0) {
        j->pos += 4;
        *v = true;
        return 0;
    }
    if (j->len - j->pos >= 5 && memcmp(j->s + j->pos, "false", 5) == 0) {
        j->pos += 5;
        *v = false;
        return 0;
    }
    return json_fail(j, "expected true or false");
}

static int json_literal(struct json *j)
{
    static const char *const words[] = {"true", "false", "null"};

    for (unsigned i = 0; i < 3; i++) {
        size_t n = strlen(words[i]);
        if (j->len - j->pos >= n && memcmp(j->s + j->pos, words[i], n) == 0) {
            j->pos += n;
            return 0;
        }
    }
    return json_fail(j, "unexpected character");
}

/* Parse an object; for each member call @member (NULL: skip values). */
typedef int (*json_member_fn)(struct json *j, const char *key, int depth,
                              void *opaque);

static int json_object(struct json *j, int depth, json_member_fn member,
                       void *opaque)
{
    char key[64];
    int ret;

    if (depth > JSON_MAX_DEPTH) {
        return json_fail(j, "nesting too deep");
    }
    if (!json_eat(j, '{')) {
        return json_fail(j, "expected an object");
    }
    if (json_eat(j, '}')) {
        return 0;
    }
    do {
        ret = json_string(j, key, sizeof(key));
        if (ret < 0) {
            return ret;
        }
        if (!json_eat(j, ':')) {
            return json_fail(j, "expected ':'");
        }
        ret = member ? member(j, key, depth, opaque) : json_value(j, depth);
        if (ret < 0) {
            return ret;
        }
    } while (json_eat(j, ','));
    return json_eat(j, '}') ? 0 : json_fail(j, "expected ',' or '}'");
}

static int json_array(struct json *j, int depth)
{
    int ret;

    if (depth > JSON_MAX_DEPTH) {
        return json_fail(j, "nesting too deep");
    }
    j->pos++; /* '[' */
    if (json_eat(j, ']')) {
        return 0;
    }
    do {
        ret = json_value(j, depth);
        if (ret < 0) {
            return ret;
        }
    } while (json_eat(j, ','));
    return json_eat(j, ']') ? 0 : json_fail(j, "expected ',' or ']'");
}

static int json_value(struct json *j, int depth)
{
    uint64_t v;
    bool is_uint;

    json_ws(j);
    if (j->pos >= j->len) {
        return json_fail(j, "expected a value");
    }
    switch (j->s[j->pos]) {
    case '{':
        return json_object(j, depth + 1, NULL, NULL);
    case '[':
        return json_array(j, depth + 1);
    case '"':
        return json_string(j, NULL, 0);
    case 't':
    case 'f':
    case 'n':
        return json_literal(j);
    default:
        return json_number(j, &v, &is_uint);
    }
}

/* A non-negative integer member @key into *@v. */
static int json_uint_member(struct json *j, const char *key, uint64_t *v)
{
    bool is_uint;
    int ret = json_number(j, v, &is_uint);

    if (ret == 0 && !is_uint) {
        ret = vg_error_set(j->err, EINVAL,
                           "capability %s: not a non-negative integer", key);
    }
    return ret;
}

static int migr_member(struct json *j, const char *key, int depth, void *opaque)
{
    struct vfu_migr_caps *mc = opaque;
    int ret;

    if (strcmp(key, "pgsize") == 0) {
        ret = json_uint_member(j, "migration.pgsize", &mc->pgsize);
        mc->has_pgsize = ret == 0;
        return ret;
    }
    if (strcmp(key, "max_bitmap_size") == 0) {
        ret = json_uint_member(j, "migration.max_bitmap_size",
                               &mc->max_bitmap_size);
        mc->has_max_bitmap = ret == 0;
        return ret;
    }
    if (strcmp(key, "precopy_info") == 0) {
        return json_bool(j, &mc->precopy_info);
    }
    if (strcmp(key, "region_dirty_log") == 0) {
        return json_bool(j, &mc->region_dirty_log);
    }
    if (strcmp(key, "data_shm") == 0) {
        return json_bool(j, &mc->data_shm);
    }
    if (strcmp(key, "data_vram") == 0) {
        return json_bool(j, &mc->data_vram);
    }
    if (strcmp(key, "postcopy") == 0) {
        return json_bool(j, &mc->postcopy);
    }
    if (strcmp(key, "load-from-file") == 0) {
        return json_bool(j, &mc->load_from_file);
    }
    if (strcmp(key, "postcopy-dma") == 0) {
        return json_bool(j, &mc->postcopy_dma);
    }
    return json_value(j, depth);
}

static int caps_member(struct json *j, const char *key, int depth, void *opaque)
{
    struct vfu_caps *caps = opaque;
    bool is_uint;
    int ret;

    if (strcmp(key, "migration") == 0) {
        json_ws(j);
        return json_object(j, depth + 1, migr_member, &caps->migr);
    }

    for (unsigned i = 0; i < VFU_CAP_COUNT; i++) {
        if (strcmp(key, cap_names[i]) != 0) {
            continue;
        }
        ret = json_number(j, &caps->value[i], &is_uint);
        if (ret == 0 && !is_uint) {
            ret =
                vg_error_set(j->err, EINVAL,
                             "capability %s: not a non-negative integer", key);
        }
        caps->present[i] = ret == 0;
        return ret;
    }
    return json_value(j, depth);
}

static int top_member(struct json *j, const char *key, int depth, void *opaque)
{
    if (strcmp(key, "capabilities") == 0) {
        json_ws(j);
        return json_object(j, depth + 1, caps_member, opaque);
    }
    return json_value(j, depth);
}

int vfu_caps_parse(const char *json, size_t len, struct vfu_caps *out,
                   struct vg_error *err)
{
    struct json j = {.s = json, .len = len, .err = err};
    int ret;

    memset(out, 0, sizeof(*out));
    ret = json_object(&j, 1, top_member, out);
    if (ret < 0) {
        return ret;
    }
    json_ws(&j);
    if (j.pos != j.len) {
        return json_fail(&j, "trailing data");
    }
    return 0;
}

/* The "migration" member of the reply (snprintf's return convention);
 * nothing if the client proposed none of its members. */
static int format_migr(const struct vfu_migr_caps *client,
                       const struct vfu_migr_caps *ours, const char *sep,
                       char *buf, size_t size)
{
    uint64_t bitmap = ours->max_bitmap_size;
    char members[320] = "";
    size_t n = 0;

    if (client->has_max_bitmap && client->max_bitmap_size < bitmap) {
        bitmap = client->max_bitmap_size;
    }
    if (client->has_pgsize && ours->has_pgsize) {
        n += (size_t)snprintf(members + n, sizeof(members) - n,
                              ",\"pgsize\":%llu",
                              (unsigned long long)ours->pgsize);
    }
    if (client->has_max_bitmap && ours->has_max_bitmap) {
        n += (size_t)snprintf(members + n, sizeof(members) - n,
                              ",\"max_bitmap_size\":%llu",
                              (unsigned long long)bitmap);
    }
    if (client->precopy_info && ours->precopy_info) {
        n += (size_t)snprintf(members + n, sizeof(members) - n,
                              ",\"precopy_info\":true");
    }
    if (client->region_dirty_log && ours->region_dirty_log) {
        n += (size_t)snprintf(members + n, sizeof(members) - n,
                              ",\"region_dirty_log\":true");
    }
    if (client->data_shm && ours->data_shm) {
        n += (size_t)snprintf(members + n, sizeof(members) - n,
                              ",\"data_shm\":true");
    }
    if (client->data_vram && ours->data_vram) {
        n += (size_t)snprintf(members + n, sizeof(members) - n,
                              ",\"data_vram\":true");
    }
    if (client->postcopy && ours->postcopy) {
        n += (size_t)snprintf(members + n, sizeof(members) - n,
                              ",\"postcopy\":true");
    }
    if (client->load_from_file && ours->load_from_file) {
        n += (size_t)snprintf(members + n, sizeof(members) - n,
                              ",\"load-from-file\":true");
    }
    if (client->postcopy_dma && ours->postcopy_dma) {
        n += (size_t)snprintf(members + n, sizeof(members) - n,
                              ",\"postcopy-dma\":true");
    }
    if (n == 0) {
        return snprintf(buf, size, "%s", "");
    }
    /* members starts with a comma */
    return snprintf(buf, size, "%s\"migration\":{%s}", sep, members + 1);
}

int vfu_caps_format(const struct vfu_caps *client, const struct vfu_caps *ours,
                    char *buf, size_t size, struct vg_error *err)
{
    size_t n = 0;
    int w;
    const char *sep = "";

    w = snprintf(buf, size, "{\"capabilities\":{");
    for (unsigned i = 0; w >= 0 && (size_t)w < size - n && i < VFU_CAP_COUNT;
         i++) {
        n += (size_t)w;
        w = 0;
        if (client->present[i] && ours->present[i]) {
            w = snprintf(buf + n, size - n, "%s\"%s\":%llu", sep, cap_names[i],
                         (unsigned long long)ours->value[i]);
            sep = ",";
        }
    }
    if (w >= 0 && (size_t)w < size - n) {
        n += (size_t)w;
        w = format_migr(&client->migr, &ours->migr, sep, buf + n, size - n);
    }
    if (w >= 0 && (size_t)w < size - n) {
        n += (size_t)w;
        w = snprintf(buf + n, size - n, "}}");
    }
    if (w < 0 || (size_t)w >= size - n) {
        return vg_error_set(err, ENOSPC, "capabilities reply exceeds %zu bytes",
                            size);
    }
    return (int)(n + (size_t)w + 1);
}
