/* dirtytrack.c -- see dirtytrack.h. */
#include "dirtytrack.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <xxhash.h>

#include "common/hash.h"
#include "common/log.h"
#include "hash-pool.h"

struct dt_tracker {
    const uint8_t *base;
    dt_hash_fn *hash_fn; /* base NULL: hashes come from here... */
    void *hash_opaque;
    uint64_t *dev_hashes; /* ...into these, before the pool compares */
    uint64_t *dev_zero;
    uint64_t *dev_select;
    uint64_t size;
    uint32_t page_size;
    uint64_t pages;
    uint64_t words; /* of each bitmap */
    uint64_t seed;
    uint64_t zero_hash; /* hash of an all-zero page with this seed */
    uint64_t *hashes;   /* per page, meaningful where hvalid is set */
    uint64_t *hvalid;   /* hashes[p] is the hash of the content last seen */
    uint64_t *exact;    /* exact log since the last epoch */
    uint64_t *opaque;   /* opaque write-set since the last epoch */
    uint64_t *zero;     /* hashed by the last epoch and all-zero */
    bool all_opaque;    /* hash every page at the next epoch */
    bool unread_epoch;  /* the next epoch hashes nothing (the first one,
                           with dt_config.baseline_from_sends) */
    uint64_t *out;      /* dirty bitmap of the epoch in progress */
    struct dt_epoch_stats stats;
    struct dt_pool *pool;
    /* An epoch run by dt_epoch_begin(): words finished, in any order. */
    bool open;
    bool pooled; /* on the pool's threads, else done by dt_epoch_begin */
    uint64_t start_ns;
    uint64_t end_ns;      /* when the last word that hashed was finished */
    uint8_t *word_done;   /* set (release) once out[w] is final */
    uint64_t words_ready; /* words [0, words_ready) all final */
    pthread_mutex_t mu;   /* with cv: waiting for a word */
    pthread_cond_t cv;
    unsigned waiters; /* threads in dt_epoch_ready's wait (changed under mu) */
};

static uint64_t bit(uint64_t page)
{
    return 1ull << (page % 64);
}

static uint64_t popcount(uint64_t w)
{
    return (uint64_t)__builtin_popcountll(w);
}

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------ creation -- */

static int check_config(const struct dt_config *cfg, uint32_t ps,
                        struct vg_error *err)
{
    if (!cfg->base && !cfg->hash) {
        return vg_error_set(err, EINVAL,
                            "VRAM base is NULL and no hash "
                            "function given");
    }
    if (ps < DT_PAGE_SIZE_MIN || ps > DT_PAGE_SIZE_MAX || (ps & (ps - 1))) {
        return vg_error_set(err, EINVAL,
                            "page size %" PRIu32
                            ": must be a power of two from %u to %u",
                            ps, DT_PAGE_SIZE_MIN, DT_PAGE_SIZE_MAX);
    }
    if (cfg->size == 0 || cfg->size % ps) {
        return vg_error_set(err, EINVAL,
                            "VRAM size 0x%" PRIx64
                            ": must be a non-zero multiple of the page size "
                            "0x%" PRIx32,
                            cfg->size, ps);
    }
    if (cfg->threads < 1 || cfg->threads > DT_THREADS_MAX) {
        return vg_error_set(err, EINVAL, "%u threads: must be 1 to %u",
                            cfg->threads, DT_THREADS_MAX);
    }
    return 0;
}

static int draw_seed(uint64_t *seed, struct vg_error *err)
{
    for (;;) {
        ssize_t n = getrandom(seed, sizeof(*seed), 0);

        if (n == sizeof(*seed) && *seed != 0) {
            return 0; /* 0 means "draw one" in the config: draw again */
        }
        if (n < 0 && errno != EINTR) {
            return vg_error_set(err, errno, "getrandom: %s", strerror(errno));
        }
        if (n >= 0 && n != sizeof(*seed)) {
            return vg_error_set(err, EIO, "getrandom: short read");
        }
    }
}

static int zero_page_hash(struct dt_tracker *t, struct vg_error *err)
{
    void *zeros = calloc(1, t->page_size);

    if (!zeros) {
        return vg_error_set(err, ENOMEM, "out of memory");
    }
    t->zero_hash = XXH3_64bits_withSeed(zeros, t->page_size, t->seed);
    free(zeros);
    return 0;
}

static int alloc_arrays(struct dt_tracker *t, struct vg_error *err)
{
    t->hashes = calloc(t->pages, sizeof(uint64_t));
    t->hvalid = calloc(t->words, sizeof(uint64_t));
    t->exact = calloc(t->words, sizeof(uint64_t));
    t->opaque = calloc(t->words, sizeof(uint64_t));
    t->zero = calloc(t->words, sizeof(uint64_t));
    t->word_done = calloc(t->words, 1);
    if (!t->base) {
        t->dev_hashes = calloc(t->pages, sizeof(uint64_t));
        t->dev_zero = calloc(t->words, sizeof(uint64_t));
        t->dev_select = calloc(t->words, sizeof(uint64_t));
        if (!t->dev_hashes || !t->dev_zero || !t->dev_select) {
            return vg_error_set(err, ENOMEM,
                                "out of memory for %" PRIu64 " page hashes",
                                t->pages);
        }
    }
    if (!t->hashes || !t->hvalid || !t->exact || !t->opaque || !t->zero ||
        !t->word_done) {
        return vg_error_set(err, ENOMEM, "out of memory for %" PRIu64 " pages",
                            t->pages);
    }
    return 0;
}

static int tracker_init(struct dt_tracker *t, const struct dt_config *cfg,
                        struct vg_error *err)
{
    int rc;

    t->page_size = cfg->page_size ? cfg->page_size : DT_PAGE_SIZE_DEFAULT;
    rc = check_config(cfg, t->page_size, err);
    if (rc) {
        return rc;
    }
    t->base = cfg->base;
    t->hash_fn = cfg->hash;
    t->hash_opaque = cfg->hash_opaque;
    t->size = cfg->size;
    t->pages = t->size / t->page_size;
    t->words = (t->pages + 63) / 64;
    t->seed = cfg->seed;
    t->all_opaque = true; /* the first epoch takes the baseline */
    t->unread_epoch = cfg->baseline_from_sends;
    if (!t->seed) {
        rc = draw_seed(&t->seed, err);
    }
    if (!rc) {
        rc = alloc_arrays(t, err);
    }
    if (!rc) {
        rc = zero_page_hash(t, err);
    }
    if (!rc) {
        rc = dt_pool_new(cfg->threads, &t->pool, err);
    }
    return rc;
}

int dt_new(const struct dt_config *cfg, struct dt_tracker **out,
           struct vg_error *err)
{
    struct dt_tracker *t;
    int rc;

    if (!cfg || !out) {
        return vg_error_set(err, EINVAL, "dirty tracker: NULL %s",
                            cfg ? "output" : "config");
    }
    t = calloc(1, sizeof(*t));
    if (!t) {
        return vg_error_set(err, ENOMEM, "dirty tracker: out of memory");
    }
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    rc = tracker_init(t, cfg, err);
    if (rc) {
        vg_error_prefix(err, "dirty tracker");
        dt_free(t);
        return rc;
    }
    vg_dbg("dirty tracker: %" PRIu64 " pages of %" PRIu32 " bytes, %u threads",
           t->pages, t->page_size, cfg->threads);
    *out = t;
    return 0;
}

void dt_free(struct dt_tracker *t)
{
    if (!t) {
        return;
    }
    if (t->open && t->pooled) {
        dt_pool_wait(t->pool);
    }
    dt_pool_free(t->pool);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    free(t->word_done);
    free(t->dev_hashes);
    free(t->dev_zero);
    free(t->dev_select);
    free(t->hashes);
    free(t->hvalid);
    free(t->exact);
    free(t->opaque);
    free(t->zero);
    free(t);
}

uint64_t dt_pages(const struct dt_tracker *t)
{
    return t->pages;
}

uint32_t dt_page_size(const struct dt_tracker *t)
{
    return t->page_size;
}

uint64_t dt_bitmap_words(const struct dt_tracker *t)
{
    return t->words;
}

uint64_t dt_seed(const struct dt_tracker *t)
{
    return t->seed;
}

/* ------------------------------------------------------------- marking -- */

static int check_range(const struct dt_tracker *t, const char *what,
                       uint64_t off, uint64_t len, struct vg_error *err)
{
    if (off > t->size || len > t->size - off) {
        return vg_error_set(err, ERANGE,
                            "%s at 0x%" PRIx64 "+0x%" PRIx64
                            ": outside VRAM (size 0x%" PRIx64 ")",
                            what, off, len, t->size);
    }
    return 0;
}

/* Set the bits of the pages touched by [off, off + len), a checked range. */
static void set_pages(const struct dt_tracker *t, uint64_t *map, uint64_t off,
                      uint64_t len)
{
    uint64_t first, last, w, mask;

    if (len == 0) {
        return;
    }
    first = off / t->page_size;
    last = (off + len - 1) / t->page_size;
    for (w = first / 64; w <= last / 64; w++) {
        mask = ~0ull;
        if (w == first / 64) {
            mask &= ~0ull << (first % 64);
        }
        if (w == last / 64) {
            mask &= ~0ull >> (63 - last % 64);
        }
        __atomic_fetch_or(&map[w], mask, __ATOMIC_RELAXED);
    }
}

int dt_mark_exact(struct dt_tracker *t, uint64_t off, uint64_t len,
                  struct vg_error *err)
{
    int rc = check_range(t, "exact write", off, len, err);

    if (!rc) {
        set_pages(t, t->exact, off, len);
    }
    return rc;
}

int dt_mark_opaque(struct dt_tracker *t, uint64_t off, uint64_t len,
                   struct vg_error *err)
{
    int rc = check_range(t, "opaque write-set", off, len, err);

    if (!rc) {
        set_pages(t, t->opaque, off, len);
    }
    return rc;
}

void dt_verify_exact(struct dt_tracker *t)
{
    for (uint64_t w = 0; w < t->words; w++) {
        uint64_t exact = __atomic_exchange_n(&t->exact[w], 0, __ATOMIC_RELAXED);

        if (exact) {
            __atomic_fetch_or(&t->opaque[w], exact, __ATOMIC_RELAXED);
        }
    }
}

void dt_mark_all_opaque(struct dt_tracker *t)
{
    __atomic_store_n(&t->all_opaque, true, __ATOMIC_RELAXED);
}

int dt_merge_log(struct dt_tracker *t, uint64_t off, const uint64_t *bitmap,
                 uint64_t nbits, uint64_t gran, struct vg_error *err)
{
    uint64_t w, word;
    int rc;

    if (gran == 0 || (gran & (gran - 1))) {
        return vg_error_set(
            err, EINVAL,
            "dirty log: granularity 0x%" PRIx64 ": not a power of two", gran);
    }
    if (nbits && !bitmap) {
        return vg_error_set(err, EINVAL, "dirty log: NULL bitmap");
    }
    if (nbits > UINT64_MAX / gran) {
        return vg_error_set(err, ERANGE,
                            "dirty log: %" PRIu64 " bits of 0x%" PRIx64
                            " bytes overflow",
                            nbits, gran);
    }
    rc = check_range(t, "dirty log", off, nbits * gran, err);
    for (w = 0; !rc && w < (nbits + 63) / 64; w++) {
        word = bitmap[w];
        if (w == nbits / 64) {
            word &= bit(nbits) - 1; /* bits past nbits are not ours */
        }
        while (word) {
            uint64_t i = w * 64 + (uint64_t)__builtin_ctzll(word);
            set_pages(t, t->exact, off + i * gran, gran);
            word &= word - 1;
        }
    }
    return rc;
}

/* ------------------------------------------------------------- epochs -- */

static bool page_all_zero(const uint8_t *p, uint32_t len)
{
    return p[0] == 0 && memcmp(p, p + 1, len - 1) == 0;
}

/* Pages of word @w that exist (the last word may be partial). */
static uint64_t word_pages(const struct dt_tracker *t, uint64_t w)
{
    uint64_t n = t->pages - w * 64;

    return n >= 64 ? ~0ull : bit(n) - 1;
}

uint64_t dt_pages_to_hash(const struct dt_tracker *t)
{
    uint64_t n = 0;

    if (t->unread_epoch) {
        return 0;
    }
    if (__atomic_load_n(&t->all_opaque, __ATOMIC_RELAXED)) {
        return t->pages;
    }
    for (uint64_t w = 0; w < t->words; w++) {
        n += popcount(__atomic_load_n(&t->opaque[w], __ATOMIC_RELAXED) &
                      word_pages(t, w));
    }
    return n;
}

struct word_result {
    uint64_t hashed, changed, baseline, zero;
};

static void hash_word(struct dt_tracker *t, uint64_t w, struct word_result *r)
{
    uint64_t left = r->hashed;

    if (!t->base) { /* hashed on the device by epoch_device_hash */
        r->zero = t->dev_zero[w] & left;
    }
    while (left) {
        uint64_t p = w * 64 + (uint64_t)__builtin_ctzll(left);
        uint64_t h;

        if (t->base) {
            const uint8_t *data = t->base + p * t->page_size;

            h = vg_hash(data, t->page_size, t->seed);
            if (h == t->zero_hash && page_all_zero(data, t->page_size)) {
                r->zero |= bit(p);
            }
        } else {
            h = t->dev_hashes[p];
        }
        if (!(t->hvalid[w] & bit(p))) {
            r->baseline |= bit(p);
        } else if (h != t->hashes[p]) {
            r->changed |= bit(p);
        }
        t->hashes[p] = h;
        left &= left - 1;
    }
}

/* Page @p went out with hash @h: that is its baseline, and exact writes
 * logged before the copy are in what was sent. */
static void set_baseline(struct dt_tracker *t, uint64_t p, uint64_t h)
{
    t->hashes[p] = h;
    t->hvalid[p / 64] |= bit(p);
    __atomic_fetch_and(&t->exact[p / 64], ~bit(p), __ATOMIC_RELAXED);
}

void dt_note_sent(struct dt_tracker *t, uint64_t page, uint64_t n,
                  const uint8_t *data)
{
    for (uint64_t i = 0; i < n && page + i < t->pages; i++) {
        set_baseline(t, page + i, dt_page_hash(t, data + i * t->page_size));
    }
}

uint64_t dt_page_hash(const struct dt_tracker *t, const uint8_t *data)
{
    return vg_hash(data, t->page_size, t->seed);
}

void dt_note_sent_hashes(struct dt_tracker *t, uint64_t page, uint64_t n,
                         const uint64_t *hashes)
{
    for (uint64_t i = 0; i < n && page + i < t->pages; i++) {
        set_baseline(t, page + i, hashes[i]);
    }
}

void dt_note_sent_unhashed(struct dt_tracker *t, uint64_t page, uint64_t n)
{
    for (uint64_t i = 0; i < n && page + i < t->pages; i++) {
        uint64_t p = page + i;

        t->hvalid[p / 64] &= ~bit(p);
        __atomic_fetch_and(&t->exact[p / 64], ~bit(p), __ATOMIC_RELAXED);
    }
}

void dt_note_sent_zero(struct dt_tracker *t, uint64_t page, uint64_t n)
{
    for (uint64_t i = 0; i < n && page + i < t->pages; i++) {
        set_baseline(t, page + i, t->zero_hash);
    }
}

static void add_stat(uint64_t *counter, uint64_t n)
{
    if (n) {
        __atomic_fetch_add(counter, n, __ATOMIC_RELAXED);
    }
}

/*
 * Word @w of an open epoch is final: publish it, and wake dt_epoch_ready()
 * if it waits.  Most words of a stop-copy's epoch hash nothing, so they
 * neither take the mutex nor move the epoch's end (@hashed: this word
 * hashed pages): on many threads the shared lock and clock word cost more
 * than the words themselves.  The sequentially consistent store and load
 * pair with dt_epoch_ready()'s: either it sees the word done, or this
 * thread sees it waiting and wakes it under the mutex.
 */
static void word_finished(struct dt_tracker *t, uint64_t w, bool hashed)
{
    if (hashed) {
        uint64_t now = now_ns(), seen = __atomic_load_n(&t->end_ns, 0);

        while (seen < now && !__atomic_compare_exchange_n(
                                 &t->end_ns, &seen, now, true, __ATOMIC_RELAXED,
                                 __ATOMIC_RELAXED)) {
        }
    }
    __atomic_store_n(&t->word_done[w], 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&t->waiters, __ATOMIC_SEQ_CST)) {
        pthread_mutex_lock(&t->mu);
        pthread_cond_broadcast(&t->cv);
        pthread_mutex_unlock(&t->mu);
    }
}

/* One pool chunk: the 64 pages of bitmap word @w. */
static void epoch_word(void *arg, uint64_t w)
{
    struct dt_tracker *t = arg;
    struct dt_epoch_stats *st = &t->stats;
    uint64_t exact = t->exact[w];
    struct word_result r = {0};

    if (t->unread_epoch) {
        r.baseline = word_pages(t, w); /* dt_note_sent() gives them one */
    } else {
        r.hashed = (t->all_opaque ? ~0ull : t->opaque[w]) & word_pages(t, w);
        hash_word(t, w, &r);
    }
    t->hvalid[w] = (t->hvalid[w] & ~exact) | r.hashed;
    t->zero[w] = r.zero;
    t->exact[w] = 0;
    t->opaque[w] = 0;
    t->out[w] = exact | r.changed | r.baseline;

    add_stat(&st->pages_hashed, popcount(r.hashed));
    add_stat(&st->dirty_exact, popcount(exact));
    add_stat(&st->dirty_hash, popcount(r.changed & ~exact));
    add_stat(&st->dirty_baseline, popcount(r.baseline & ~exact));
    add_stat(&st->zero, popcount(r.zero));
    if (t->open) {
        word_finished(t, w, r.hashed != 0);
    }
}

/* VRAM not mapped here: hash this epoch's pages on the device first. */
static int epoch_device_hash(struct dt_tracker *t, struct vg_error *err)
{
    int rc;

    for (uint64_t w = 0; w < t->words; w++) {
        t->dev_select[w] =
            (t->all_opaque ? ~0ull : t->opaque[w]) & word_pages(t, w);
    }
    rc = t->hash_fn(t->hash_opaque, t->dev_select, t->seed, t->dev_hashes,
                    t->dev_zero, err);
    if (rc < 0) {
        vg_error_prefix(err, "epoch %" PRIu64 ": hashing on the device",
                        t->stats.epoch + 1);
    }
    return rc;
}

static int epoch_start(struct dt_tracker *t, uint64_t *dirty,
                       struct vg_error *err)
{
    struct dt_epoch_stats *s = &t->stats;
    uint64_t start = now_ns();
    int rc;

    if (!dirty || t->open) {
        return vg_error_set(err, EINVAL, "epoch %" PRIu64 ": %s", s->epoch + 1,
                            dirty ? "another epoch is open"
                                  : "NULL dirty bitmap");
    }
    if (!t->base && !t->unread_epoch) {
        rc = epoch_device_hash(t, err);
        if (rc < 0) {
            return rc;
        }
    }
    *s = (struct dt_epoch_stats){.epoch = s->epoch + 1, .pages = t->pages};
    t->out = dirty;
    t->start_ns = start;
    return 0;
}

static void epoch_finish(struct dt_tracker *t, struct dt_epoch_stats *st)
{
    struct dt_epoch_stats *s = &t->stats;

    /* an open epoch's time ends with its last word, not with dt_epoch_end */
    s->hash_ns = (t->open ? t->end_ns : now_ns()) - t->start_ns;
    t->out = NULL;
    t->all_opaque = false;
    t->unread_epoch = false;
    s->dirty = s->dirty_exact + s->dirty_hash + s->dirty_baseline;
    s->hash_gbps = s->hash_ns ? (double)(s->pages_hashed * t->page_size) /
                                    (double)s->hash_ns
                              : 0.0;
    vg_trace("dirty tracker: epoch %" PRIu64 ": %" PRIu64 " hashed, %" PRIu64
             " dirty (%" PRIu64 " exact, %" PRIu64 " hash, %" PRIu64
             " baseline), %.2f GB/s",
             s->epoch, s->pages_hashed, s->dirty, s->dirty_exact, s->dirty_hash,
             s->dirty_baseline, s->hash_gbps);
    if (st) {
        *st = *s;
    }
}

/*
 * Whether the epoch about to run needs the pool: with no page to hash
 * each word is a few loads and stores, and the caller does them all
 * sooner than the pool's threads wake and share its counters.
 */
static bool epoch_on_pool(const struct dt_tracker *t)
{
    return dt_pool_threads(t->pool) > 1 && dt_pages_to_hash(t) > 0;
}

static void epoch_inline(struct dt_tracker *t)
{
    for (uint64_t w = 0; w < t->words; w++) {
        epoch_word(t, w);
    }
}

int dt_epoch(struct dt_tracker *t, uint64_t *dirty, struct dt_epoch_stats *st,
             struct vg_error *err)
{
    bool pooled = epoch_on_pool(t);
    int rc = epoch_start(t, dirty, err);

    if (rc) {
        return rc;
    }
    if (pooled) {
        dt_pool_run(t->pool, t->words, epoch_word, t);
    } else {
        epoch_inline(t);
    }
    epoch_finish(t, st);
    return 0;
}

int dt_epoch_begin(struct dt_tracker *t, uint64_t *dirty, struct vg_error *err)
{
    bool pooled = epoch_on_pool(t);
    int rc = epoch_start(t, dirty, err);

    if (rc) {
        return rc;
    }
    memset(t->word_done, 0, t->words);
    t->words_ready = 0;
    t->end_ns = t->start_ns;
    t->open = true;
    t->pooled = pooled;
    if (pooled) {
        dt_pool_start(t->pool, t->words, epoch_word, t);
    } else {
        epoch_inline(t);
    }
    return 0;
}

uint64_t dt_epoch_ready(struct dt_tracker *t, uint64_t want)
{
    uint64_t want_words = want / 64 + (want % 64 != 0);

    if (!t->open) {
        return t->pages;
    }
    for (;;) {
        while (
            t->words_ready < t->words &&
            __atomic_load_n(&t->word_done[t->words_ready], __ATOMIC_ACQUIRE)) {
            t->words_ready++;
        }
        if (t->words_ready >= t->words || t->words_ready >= want_words) {
            break;
        }
        pthread_mutex_lock(&t->mu);
        __atomic_store_n(&t->waiters, t->waiters + 1, __ATOMIC_SEQ_CST);
        while (
            !__atomic_load_n(&t->word_done[t->words_ready], __ATOMIC_SEQ_CST)) {
            pthread_cond_wait(&t->cv, &t->mu);
        }
        __atomic_store_n(&t->waiters, t->waiters - 1, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&t->mu);
    }
    return t->words_ready * 64 < t->pages ? t->words_ready * 64 : t->pages;
}

void dt_epoch_end(struct dt_tracker *t, struct dt_epoch_stats *st)
{
    if (!t->open) {
        if (st) {
            *st = t->stats;
        }
        return;
    }
    if (t->pooled) {
        dt_pool_wait(t->pool);
    }
    epoch_finish(t, st);
    t->open = false;
}

bool dt_page_is_zero(const struct dt_tracker *t, uint64_t page)
{
    return page < t->pages && (t->zero[page / 64] & bit(page));
}

void dt_get_stats(const struct dt_tracker *t, struct dt_epoch_stats *st)
{
    *st = t->stats;
}
