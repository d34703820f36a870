/*
 * mig-load.c -- the destination's loading session: the stream decoder
 * writes pages into VRAM; the device state is applied only when the
 * stream is complete and valid.
 */
#include "mig-int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "common/log.h"

struct mig_load {
    struct mig_dec *dec;
    uint64_t *page_hash; /* mig_page_hash() of pages loaded... */
    uint64_t *hashed;    /* ...where this bitmap says so */
    uint64_t zero_hash;  /* of a zero page */
    uint8_t state[MIG_STATE_MAX];
    uint32_t state_len;
    bool failed; /* a write failed (reported once) */
};

/* Pages [first, first + count) are inside VRAM (re-checked here). */
static int pages_ok(struct mig *m, uint64_t first, uint64_t count,
                    struct vg_error *err)
{
    if (first >= m->npages || count > m->npages - first) {
        return vg_error_set(err, ERANGE,
                            "pages %" PRIu64 "+%" PRIu64 " outside VRAM", first,
                            count);
    }
    return 0;
}

/* Write the pages (host-to-device copies on a GPU) and hash them as they
 * landed: from VRAM where it is mapped here, else from what was written. */
static int sink_pages(void *opaque, uint64_t first, uint64_t count,
                      const uint8_t *data, struct vg_error *err)
{
    struct mig *m = opaque;
    uint32_t ps = m->scfg.page_size;
    int ret = pages_ok(m, first, count, err);

    if (ret == 0) {
        ret = vgpu_vram_write(m->gpu, first * ps, data, count * ps, err);
    }
    for (uint64_t i = 0; ret == 0 && i < count; i++) {
        m->load->page_hash[first + i] = vgpu_vram(m->gpu)
                                            ? mig_page_hash(m, first + i)
                                            : XXH3_64bits(data + i * ps, ps);
        mig_bit_put(m->load->hashed, first + i, true);
    }
    return ret;
}

static int sink_zeros(void *opaque, uint64_t first, uint64_t count,
                      struct vg_error *err)
{
    struct mig *m = opaque;
    uint32_t ps = m->scfg.page_size;
    int ret = pages_ok(m, first, count, err);

    if (ret == 0) {
        ret = vgpu_vram_clear(m->gpu, first * ps, count * ps, err);
    }
    if (ret < 0) {
        return ret;
    }
    for (uint64_t i = first; i < first + count; i++) {
        m->load->page_hash[i] = m->load->zero_hash;
        mig_bit_put(m->load->hashed, i, true);
    }
    return 0;
}

/* Keep the device state; it is validated and applied at the end. */
static int sink_state(void *opaque, const uint8_t *blob, uint32_t len,
                      struct vg_error *err)
{
    struct mig *m = opaque;

    if (len != VGPU_STATE_SIZE) {
        return vg_error_set(err, EINVAL,
                            "device state of %u bytes, expected %u", len,
                            VGPU_STATE_SIZE);
    }
    memcpy(m->load->state, blob, len);
    m->load->state_len = len;
    return 0;
}

int mig_load_open(struct mig *m, struct vg_error *err)
{
    struct mig_dec_sink sink = {m, sink_pages, sink_zeros, sink_state};
    uint8_t *zero;
    int ret;

    m->load = calloc(1, sizeof(*m->load));
    if (!m->load) {
        return vg_error_set(err, ENOMEM, "loading session");
    }
    m->load->page_hash = calloc(m->npages, 8);
    m->load->hashed = calloc((m->npages + 63) / 64, 8);
    zero = calloc(1, m->scfg.page_size);
    if (!m->load->page_hash || !m->load->hashed || !zero) {
        free(zero);
        mig_load_close(m);
        return vg_error_set(err, ENOMEM, "loading session page hashes");
    }
    m->load->zero_hash = XXH3_64bits(zero, m->scfg.page_size);
    free(zero);
    ret = mig_dec_new(&m->scfg, &sink, &m->load->dec, err);
    if (ret < 0) {
        mig_load_close(m);
        return ret;
    }
    vgpu_reset(m->gpu);
    return 0;
}

int mig_load_write(struct mig *m, const uint8_t *data, uint32_t size,
                   struct vg_error *err)
{
    struct mig_load *l = m->load;
    int ret = mig_dec_feed(l->dec, data, size, err);

    if (ret == 0) {
        m->stats.bytes_received += size;
    } else if (!l->failed) {
        l->failed = true;
        mig_note_error(m, err ? err->msg : "migration data refused");
    }
    return ret;
}

int mig_load_finish(struct mig *m, struct vg_error *err)
{
    struct mig_load *l = m->load;
    int ret = mig_dec_finish(l->dec, err);

    if (ret == 0) {
        ret = vgpu_state_load(m->gpu, l->state, l->state_len, err);
    }
    if (ret == 0) {
        mig_take_checksums(m, l->page_hash, l->hashed);
        vg_info("migration: stream of %" PRIu64 " bytes loaded",
                mig_dec_bytes(l->dec));
    }
    mig_load_close(m);
    return ret;
}

void mig_load_close(struct mig *m)
{
    if (m->load) {
        mig_dec_free(m->load->dec);
        free(m->load->page_hash);
        free(m->load->hashed);
        free(m->load);
        m->load = NULL;
    }
}
