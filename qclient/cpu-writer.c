#include "cpu-writer.h"

#include <errno.h>
#include <glib.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "common/hash.h"

#define MAX_LEN       64u
#define DEFAULT_BATCH 64u
#define MAX_BATCH     256u

struct rec {
    uint64_t off;
    uint32_t len;
    uint32_t data; /* offset of its bytes in w->data */
    int64_t sent_us, reply_us;
};

struct vg_cpu_writer {
    struct vg_cpu_writer_opts o;
    GRand *rng;
    GArray *recs;      /* struct rec, in the order QEMU applied them */
    GByteArray *data;  /* the bytes of every write */
    GByteArray *undo;  /* what the uncertain writes overwrote in the image */
    int64_t t0_us;     /* monotonic start, for the rate */
    int64_t t0_real;   /* real-time start: older STOP events do not count */
    int64_t stop_us;   /* STOP's timestamp, -1 until seen */
    uint64_t image_at; /* candidate the image holds; UINT64_MAX: raw */
    GString *batch;
};

int vg_cpu_writer_new(const struct vg_cpu_writer_opts *o,
                      struct vg_cpu_writer **out, struct vg_error *err)
{
    struct vg_cpu_writer *w;

    if (!o->qt || !o->qmp || o->min_len == 0 || o->max_len > MAX_LEN ||
        o->min_len > o->max_len || o->vram_size < 2 * (uint64_t)MAX_LEN ||
        o->hot_bytes > o->vram_size || o->hot_percent > 100 ||
        o->straddle_percent > 100 || o->batch > MAX_BATCH ||
        (o->straddle_percent && (o->page_size < MAX_LEN || o->max_len < 2 ||
                                 o->page_size >= o->vram_size))) {
        return vg_error_set(err, EINVAL,
                            "CPU writer: bad options (lengths %u..%u, VRAM "
                            "%" PRIu64 ", hot set %" PRIu64 ", page %u)",
                            o->min_len, o->max_len, o->vram_size, o->hot_bytes,
                            o->page_size);
    }
    w = g_new0(struct vg_cpu_writer, 1);
    w->o = *o;
    if (!w->o.batch) {
        w->o.batch = DEFAULT_BATCH;
    }
    w->rng = g_rand_new_with_seed((guint32)(o->seed ^ (o->seed >> 32)));
    w->recs = g_array_new(FALSE, FALSE, sizeof(struct rec));
    w->data = g_byte_array_new();
    w->undo = g_byte_array_new();
    w->batch = g_string_new(NULL);
    w->t0_us = g_get_monotonic_time();
    w->t0_real = g_get_real_time();
    w->stop_us = -1;
    w->image_at = UINT64_MAX;
    *out = w;
    return 0;
}

void vg_cpu_writer_free(struct vg_cpu_writer *w)
{
    if (!w) {
        return;
    }
    g_rand_free(w->rng);
    g_array_free(w->recs, TRUE);
    g_byte_array_free(w->data, TRUE);
    g_byte_array_free(w->undo, TRUE);
    g_string_free(w->batch, TRUE);
    g_free(w);
}

static uint64_t rand_below(GRand *rng, uint64_t n)
{
    uint64_t r = ((uint64_t)g_rand_int(rng) << 32) | g_rand_int(rng);

    return n ? r % n : 0;
}

/* Where the next write of @len bytes goes. */
static uint64_t pick_offset(struct vg_cpu_writer *w, uint32_t len)
{
    const struct vg_cpu_writer_opts *o = &w->o;
    uint64_t span = o->vram_size;

    if (o->hot_bytes >= 2 * (uint64_t)MAX_LEN &&
        g_rand_int_range(w->rng, 0, 100) < (gint32)o->hot_percent) {
        span = o->hot_bytes;
    }
    if (len >= 2 && span > o->page_size &&
        g_rand_int_range(w->rng, 0, 100) < (gint32)o->straddle_percent) {
        uint64_t boundary =
            (1 + rand_below(w->rng, span / o->page_size - 1)) * o->page_size;

        return boundary - 1 - rand_below(w->rng, len - 1);
    }
    return rand_below(w->rng, span - len + 1);
}

/* Add the next write to the batch text and the record. */
static void add_write(struct vg_cpu_writer *w)
{
    uint32_t len = (uint32_t)g_rand_int_range(w->rng, (gint32)w->o.min_len,
                                              (gint32)w->o.max_len + 1);
    struct rec r = {.off = pick_offset(w, len), .len = len};
    uint8_t bytes[MAX_LEN];
    gchar *b64;

    for (uint32_t i = 0; i < len; i++) {
        bytes[i] = (uint8_t)g_rand_int(w->rng);
    }
    r.data = w->data->len;
    g_byte_array_append(w->data, bytes, len);
    g_array_append_val(w->recs, r);
    b64 = g_base64_encode(bytes, len);
    g_string_append_printf(w->batch, "b64write 0x%" PRIx64 " 0x%x %s\n",
                           w->o.vram_addr + r.off, len, b64);
    g_free(b64);
}

/* Send @n writes at once, then take their replies. */
static int write_batch(struct vg_cpu_writer *w, uint32_t n,
                       struct vg_error *err)
{
    guint first = w->recs->len;
    int64_t sent;
    int ret;

    g_string_truncate(w->batch, 0);
    for (uint32_t i = 0; i < n; i++) {
        add_write(w);
    }
    sent = g_get_real_time();
    ret = vg_qtest_send(w->o.qt, w->batch->str, w->batch->len, err);
    for (guint i = first; ret == 0 && i < w->recs->len; i++) {
        struct rec *r = &g_array_index(w->recs, struct rec, i);

        ret = vg_qtest_reply(w->o.qt, NULL, err);
        r->sent_us = sent;
        r->reply_us = g_get_real_time();
    }
    if (ret < 0) {
        vg_error_prefix(err, "CPU writer: BAR2 write");
    }
    return ret;
}

int vg_cpu_writer_stopped(struct vg_cpu_writer *w, struct vg_error *err)
{
    int64_t t;
    int ret;

    if (w->stop_us >= 0) {
        return 1;
    }
    ret = vg_qmp_event_time(w->o.qmp, "STOP", w->t0_real, &t, err);
    if (ret == 1) {
        w->stop_us = t;
    }
    return ret;
}

int vg_cpu_writer_run(struct vg_cpu_writer *w, int max_ms, struct vg_error *err)
{
    int64_t until = g_get_monotonic_time() + (int64_t)max_ms * 1000;

    for (;;) {
        int64_t now = g_get_monotonic_time();
        uint64_t due = (uint64_t)(now - w->t0_us) * w->o.rate / 1000000u;
        int ret = vg_cpu_writer_stopped(w, err);

        if (ret != 0 || due <= w->recs->len || now >= until) {
            return ret;
        }
        ret =
            write_batch(w, (uint32_t)MIN(due - w->recs->len, w->o.batch), err);
        if (ret < 0) {
            return ret;
        }
    }
}

/* Writes known to have reached VRAM before the stop: a prefix. */
static uint64_t before_count(const struct vg_cpu_writer *w)
{
    uint64_t n = 0;

    while (n < w->recs->len &&
           (w->stop_us < 0 ||
            g_array_index(w->recs, struct rec, n).reply_us < w->stop_us)) {
        n++;
    }
    return n;
}

void vg_cpu_writer_counts(const struct vg_cpu_writer *w,
                          struct vg_cpu_writer_counts *c)
{
    uint64_t n = before_count(w);

    memset(c, 0, sizeof(*c));
    c->before = n;
    c->stop_us = w->stop_us;
    c->last_before_us =
        n && w->stop_us >= 0
            ? g_array_index(w->recs, struct rec, n - 1).reply_us - w->stop_us
            : INT64_MIN;
    for (uint64_t i = n; i < w->recs->len; i++) {
        const struct rec *r = &g_array_index(w->recs, struct rec, i);

        if (r->sent_us > w->stop_us) {
            c->after++;
        } else {
            c->in_flight++;
        }
    }
    c->bytes = w->data->len;
    if (w->recs->len > 1) {
        const struct rec *first = &g_array_index(w->recs, struct rec, 0);
        const struct rec *last =
            &g_array_index(w->recs, struct rec, w->recs->len - 1);

        c->rate = (double)w->recs->len * 1e6 /
                  (double)MAX(last->reply_us - first->sent_us, 1);
        c->last_reply_us = last->reply_us - w->stop_us;
    }
}

uint64_t vg_cpu_writer_uncertain(const struct vg_cpu_writer *w)
{
    return w->recs->len - before_count(w);
}

static void apply(const struct vg_cpu_writer *w, uint8_t *image, uint64_t i)
{
    const struct rec *r = &g_array_index(w->recs, struct rec, i);

    memcpy(image + r->off, w->data->data + r->data, r->len);
}

/* Apply write @i, saving what it covers. */
static void apply_saved(struct vg_cpu_writer *w, uint8_t *image, uint64_t i)
{
    const struct rec *r = &g_array_index(w->recs, struct rec, i);

    g_byte_array_append(w->undo, image + r->off, r->len);
    apply(w, image, i);
}

static void undo(struct vg_cpu_writer *w, uint8_t *image, uint64_t i)
{
    const struct rec *r = &g_array_index(w->recs, struct rec, i);

    g_byte_array_set_size(w->undo, w->undo->len - r->len);
    memcpy(image + r->off, w->undo->data + w->undo->len, r->len);
}

void vg_cpu_writer_image(struct vg_cpu_writer *w, uint8_t *image, uint64_t i)
{
    uint64_t before = before_count(w);

    if (w->image_at == UINT64_MAX) {
        for (uint64_t k = 0; k < before; k++) {
            apply(w, image, k);
        }
        g_byte_array_set_size(w->undo, 0);
        w->image_at = 0;
    }
    while (w->image_at < i) {
        apply_saved(w, image, before + w->image_at++);
    }
    while (w->image_at > i) {
        undo(w, image, before + --w->image_at);
    }
}

/* The page hash of the page at @page: a tree, or XXH3-64 of it whole. */
static uint64_t page_hash(const uint8_t *page, uint32_t page_size, bool tree)
{
    return tree ? vg_hash_tree(page, page_size, 0, NULL)
                : XXH3_64bits(page, page_size);
}

/* Rehash the pages write @i touches. */
static void rehash(const struct vg_cpu_writer *w, const uint8_t *image,
                   uint32_t page_size, bool tree, uint64_t *hashes, uint64_t i)
{
    const struct rec *r = &g_array_index(w->recs, struct rec, i);

    for (uint64_t p = r->off / page_size;
         p <= (r->off + r->len - 1) / page_size; p++) {
        hashes[p] = page_hash(image + p * page_size, page_size, tree);
    }
}

void vg_cpu_writer_checksums(struct vg_cpu_writer *w, uint8_t *image,
                             uint32_t page_size, bool tree, uint64_t *sums)
{
    uint64_t npages = w->o.vram_size / page_size;
    uint64_t *hashes = g_new(uint64_t, npages);
    uint64_t before = before_count(w), k = w->recs->len - before;

    vg_cpu_writer_image(w, image, 0);
    for (uint64_t p = 0; p < npages; p++) {
        hashes[p] = page_hash(image + p * page_size, page_size, tree);
    }
    sums[0] = XXH3_64bits(hashes, npages * 8);
    for (uint64_t i = 1; i <= k; i++) {
        vg_cpu_writer_image(w, image, i);
        rehash(w, image, page_size, tree, hashes, before + i - 1);
        sums[i] = XXH3_64bits(hashes, npages * 8);
    }
    vg_cpu_writer_image(w, image, 0);
    g_free(hashes);
}

int64_t vg_cpu_writer_match(struct vg_cpu_writer *w, uint8_t *image,
                            const uint8_t *vram, uint64_t *diff_off)
{
    uint64_t k = vg_cpu_writer_uncertain(w);

    for (uint64_t i = 0; i <= k; i++) {
        vg_cpu_writer_image(w, image, i);
        if (memcmp(image, vram, w->o.vram_size) == 0) {
            return (int64_t)i;
        }
    }
    vg_cpu_writer_image(w, image, 0);
    for (*diff_off = 0; *diff_off < w->o.vram_size; (*diff_off)++) {
        if (image[*diff_off] != vram[*diff_off]) {
            break;
        }
    }
    return -1;
}

int64_t vg_cpu_writer_find_sum(const char *hex, const uint64_t *sums,
                               uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        char text[32];

        snprintf(text, sizeof(text), "%016" PRIx64, sums[i]);
        if (!g_ascii_strcasecmp(hex, text)) {
            return (int64_t)i;
        }
    }
    return -1;
}
