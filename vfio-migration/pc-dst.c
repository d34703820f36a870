/*
 * pc-dst.c -- VRAM on demand on a post-copy destination (see pc-dst.h).
 *
 * Threads: the caller's (pc_dst_start, pc_dst_wait), the fetch thread
 * (the only one that talks on the channel and installs pages) and the
 * fault thread (reads the userfaultfd).  @lock guards the bitmaps, the
 * urgent queue and the statistics; pages are installed outside it.
 */
#include "pc-dst.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/hash.h"
#include "common/log.h"
#include "stream-file.h"
#include "uffd.h"

#define URGENT_MAX 4096u
/* Restore from a save file: at most this many fetch threads. */
#define PC_FETCH_THREADS_MAX 16u
/* Reconnecting: how often, and for how long at most. */
#define PC_RETRY_MS    200
#define PC_RECONNECT_S 600

struct urgent {
    uint64_t page;
    double t_ms; /* when it was asked for */
};

/* A fetch thread: one run of pages at a time, into its own buffer (a
 * restore from a save file has several, each with a reader of the file). */
struct pc_worker {
    struct pc_dst *d;
    pthread_t thread;
    bool started;
    uint8_t *buf;         /* one run's pages */
    struct sf_reader *rd; /* restore: its buffers of the file's records */
};

struct pc_dst {
    struct pc_dst_config cfg;
    struct pc_dst_area *areas;
    int sock;
    int stop_fd;
    uint64_t host_page;
    struct pc_worker *workers;
    unsigned nworkers;
    unsigned fetching;    /* workers not done fetching */
    bool failed;          /* a worker failed: the load is over */
    uint64_t *pending;    /* not installed yet */
    uint64_t *requested;  /* asked for, not installed yet */
    uint64_t *queued;     /* in the urgent queue */
    uint64_t *wanted;     /* pending at the start, for the digest */
    uint64_t *page_hash;  /* of each page received */
    uint64_t bitmap_hash; /* of the first welcome's bitmap */
    uint64_t left;        /* pending pages */
    uint64_t cursor;      /* the background pass: no pending page below */
    struct urgent urgent[URGENT_MAX];
    unsigned urgent_head, urgent_len;
    pthread_mutex_t lock;
    pthread_cond_t arrived;
    pthread_t fault_thread;
    bool fault_started;
    double t0_ms;
    struct pc_dst_stats stats;
};

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static bool bit(const uint64_t *bm, uint64_t i)
{
    return bm[i / 64] >> (i % 64) & 1;
}

static void bit_put(uint64_t *bm, uint64_t i, bool v)
{
    if (v) {
        bm[i / 64] |= 1ull << (i % 64);
    } else {
        bm[i / 64] &= ~(1ull << (i % 64));
    }
}

/* ------------------------------------------------------------ the channel */

static int dst_connect(struct pc_dst *d, struct vg_error *err)
{
    struct pc_hello h = {.magic = PC_MAGIC, .version = PC_VERSION};
    struct iovec iov = {&h, sizeof(h)};

    d->sock = pc_connect(d->cfg.address, err);
    if (d->sock < 0) {
        return d->sock;
    }
    memcpy(h.token, d->cfg.token, PC_TOKEN_SIZE);
    return pc_send(d->sock, &iov, 1, err);
}

/* The welcome and the bitmap into @bm (its hash into *@hash), checked
 * against what the stream said. */
static int recv_welcome(struct pc_dst *d, uint64_t *bm, uint64_t *hash,
                        struct vg_error *err)
{
    uint64_t bytes = pc_bitmap_bytes(d->cfg.npages);
    struct pc_welcome w;
    uint64_t count = 0;
    int ret = pc_recv(d->sock, &w, sizeof(w), err);

    if (ret < 0) {
        return ret;
    }
    if (w.magic != PC_MAGIC || w.npages != d->cfg.npages ||
        w.page_size != d->cfg.page_size || w.pending != d->cfg.pending) {
        return vg_error_set(err, EPROTO,
                            "page server offers %" PRIu64 " pending of %" PRIu64
                            " pages of %u bytes (magic %#" PRIx64
                            "); the stream said %" PRIu64 " of %" PRIu64
                            " of %u",
                            w.pending, w.npages, w.page_size, w.magic,
                            d->cfg.pending, d->cfg.npages, d->cfg.page_size);
    }
    ret = pc_recv(d->sock, bm, bytes, err);
    if (ret < 0) {
        return ret;
    }
    if (d->cfg.npages % 64) {
        bm[bytes / 8 - 1] &= (1ull << (d->cfg.npages % 64)) - 1;
    }
    for (uint64_t i = 0; i < bytes / 8; i++) {
        count += (uint64_t)__builtin_popcountll(bm[i]);
    }
    *hash = XXH3_64bits(bm, bytes);
    if (*hash != w.bitmap_hash || count != w.pending) {
        return vg_error_set(err, EPROTO,
                            "pending bitmap: %" PRIu64 " pages set, %" PRIu64
                            " announced, or its hash differs",
                            count, w.pending);
    }
    return 0;
}

/* The first welcome: the pages to fetch. */
static int dst_welcome(struct pc_dst *d, struct vg_error *err)
{
    uint64_t bytes = pc_bitmap_bytes(d->cfg.npages);
    int ret = recv_welcome(d, d->wanted, &d->bitmap_hash, err);

    if (ret < 0) {
        return ret;
    }
    memcpy(d->pending, d->wanted, bytes);
    d->left = d->cfg.pending;
    d->stats.pending = d->cfg.pending;
    return 0;
}

/* Restore on demand: the pages the save file holds. */
static void file_welcome(struct pc_dst *d)
{
    d->cfg.pending = sf_pending(d->cfg.file, d->wanted);
    memcpy(d->pending, d->wanted, pc_bitmap_bytes(d->cfg.npages));
    d->left = d->cfg.pending;
    d->stats.pending = d->cfg.pending;
}

/* A welcome after a reconnection: the same source session. */
static int dst_welcome_again(struct pc_dst *d, struct vg_error *err)
{
    uint64_t *bm = malloc(pc_bitmap_bytes(d->cfg.npages));
    uint64_t hash = 0;
    int ret;

    if (!bm) {
        return vg_error_set(err, ENOMEM, "no memory for the bitmap");
    }
    ret = recv_welcome(d, bm, &hash, err);
    free(bm);
    if (ret == 0 && hash != d->bitmap_hash) {
        ret = vg_error_set(err, EPROTO,
                           "the page server offers another set of pages");
    }
    return ret;
}

/* ------------------------------------------------------- installing pages */

/* The area holding VRAM offset @off, or NULL. */
static const struct pc_dst_area *area_of_off(const struct pc_dst *d,
                                             uint64_t off)
{
    for (unsigned i = 0; i < d->cfg.nareas; i++) {
        const struct pc_dst_area *a = &d->areas[i];

        if (off >= a->vram_off && off - a->vram_off < a->size) {
            return a;
        }
    }
    return NULL;
}

static int install_page(struct pc_dst *d, uint64_t p, const uint8_t *data,
                        struct vg_error *err)
{
    uint64_t ps = d->cfg.page_size, off = p * ps;
    const struct pc_dst_area *a = d->cfg.uffd >= 0 ? area_of_off(d, off) : NULL;

    if (a) {
        int ret = uffd_copy(d->cfg.uffd, a->vaddr + (off - a->vram_off), data,
                            ps, err);
        return ret < 0 ? ret : 0;
    }
    memcpy(d->cfg.vram + off, data, ps);
    return 0;
}

/* Put the @count pages in @buf at page @first: page by page where VRAM
 * is mapped here, else in one write; each page's hash kept (the digest,
 * the destination's checksum of what arrived; a save file's pages come
 * with theirs, read_run()). */
static int install_pages(struct pc_dst *d, const uint8_t *buf, uint64_t first,
                         uint32_t count, struct vg_error *err)
{
    uint64_t ps = d->cfg.page_size;
    int ret = 0;

    if (!d->cfg.vram) {
        ret = d->cfg.write(d->cfg.write_opaque, first * ps, buf,
                           (uint64_t)count * ps, err);
    }
    for (uint32_t i = 0; ret == 0 && d->cfg.vram && i < count; i++) {
        ret = install_page(d, first + i, buf + (uint64_t)i * ps, err);
    }
    for (uint32_t i = 0; ret == 0 && !d->cfg.file && i < count; i++) {
        d->page_hash[first + i] = mig_stream_page_hash(
            d->cfg.hash_version, buf + (uint64_t)i * ps, (uint32_t)ps, NULL);
    }
    return ret;
}

/* Install the @count pages of @buf from page @first and account them. */
static int install_run(struct pc_dst *d, const uint8_t *buf, uint64_t first,
                       uint32_t count, double asked_ms, struct vg_error *err)
{
    int ret = install_pages(d, buf, first, count, err);

    if (ret < 0) {
        return ret;
    }
    pthread_mutex_lock(&d->lock);
    for (uint32_t i = 0; i < count; i++) {
        bit_put(d->pending, first + i, false);
        bit_put(d->requested, first + i, false);
    }
    d->left -= count;
    d->stats.fetched += count;
    if (asked_ms > 0 && now_ms() - asked_ms > d->stats.max_fault_ms) {
        d->stats.max_fault_ms = now_ms() - asked_ms;
    }
    pthread_cond_broadcast(&d->arrived);
    pthread_mutex_unlock(&d->lock);
    return 0;
}

/* Read pages [@first, +@count) from the save file and install them. */
static int read_run(struct pc_worker *w, uint64_t first, uint32_t count,
                    double asked_ms, struct vg_error *err)
{
    struct pc_dst *d = w->d;
    int ret =
        sf_read_with(w->rd, first, count, w->buf, d->page_hash + first, err);

    pthread_mutex_lock(&d->lock);
    d->stats.requests++;
    pthread_mutex_unlock(&d->lock);
    return ret < 0 ? ret : install_run(d, w->buf, first, count, asked_ms, err);
}

/* Ask for pages [@first, +@count) and install them. */
static int fetch_run(struct pc_worker *w, uint64_t first, uint32_t count,
                     double asked_ms, struct vg_error *err)
{
    struct pc_dst *d = w->d;
    struct pc_req req = {.op = PC_OP_PAGES, .count = count, .first = first};
    struct iovec iov = {&req, sizeof(req)};
    uint64_t len = (uint64_t)count * d->cfg.page_size;
    struct pc_data hdr;
    int ret;

    if (d->cfg.file) {
        return read_run(w, first, count, asked_ms, err);
    }
    ret = pc_send(d->sock, &iov, 1, err);

    if (ret == 0) {
        ret = pc_recv(d->sock, &hdr, sizeof(hdr), err);
    }
    if (ret == 0 && (hdr.first != first || hdr.count != count)) {
        ret = vg_error_set(err, EPROTO,
                           "asked for %u pages at %" PRIu64
                           ", got %u at %" PRIu64,
                           count, first, hdr.count, hdr.first);
    }
    if (ret == 0) {
        ret = pc_recv(d->sock, w->buf, len, err);
    }
    if (ret == 0 && XXH3_64bits(w->buf, len) != hdr.hash) {
        ret = vg_error_set(err, EBADMSG,
                           "pages %" PRIu64 "+%u differ from their hash", first,
                           count);
    }
    pthread_mutex_lock(&d->lock);
    d->stats.requests++;
    pthread_mutex_unlock(&d->lock);
    return ret < 0 ? ret : install_run(d, w->buf, first, count, asked_ms, err);
}

/* ------------------------------------------------------ choosing requests */

static uint32_t run_max(const struct pc_dst *d)
{
    uint32_t n = PC_REQ_MAX_BYTES / d->cfg.page_size;

    return n ? n : 1;
}

/* Pending pages not asked for yet from @p on, at most run_max(). */
static uint32_t run_from(const struct pc_dst *d, uint64_t p)
{
    uint32_t n = 0;

    while (n < run_max(d) && p + n < d->cfg.npages && bit(d->pending, p + n) &&
           !bit(d->requested, p + n)) {
        n++;
    }
    return n;
}

/* Under the lock: the next run to ask for, urgent ones first; false when
 * nothing is left to ask for. */
static bool next_run(struct pc_dst *d, uint64_t *first, uint32_t *count,
                     double *asked_ms)
{
    while (d->urgent_len > 0) {
        struct urgent u = d->urgent[d->urgent_head];

        d->urgent_head = (d->urgent_head + 1) % URGENT_MAX;
        d->urgent_len--;
        bit_put(d->queued, u.page, false);
        *count = run_from(d, u.page);
        if (*count) {
            *first = u.page;
            *asked_ms = u.t_ms;
            return true;
        }
    }
    while (d->cursor < d->cfg.npages) {
        uint64_t w = d->pending[d->cursor / 64] >> (d->cursor % 64);

        if (!w) {
            d->cursor = (d->cursor / 64 + 1) * 64;
            continue;
        }
        d->cursor += (uint64_t)__builtin_ctzll(w);
        if (d->cursor >= d->cfg.npages) {
            break;
        }
        *count = run_from(d, d->cursor);
        if (*count) {
            *first = d->cursor;
            *asked_ms = 0;
            return true;
        }
        d->cursor++; /* asked for already */
    }
    return false;
}

/* Under the lock: ask for page @p before the background pass; false if
 * it is asked for already (or the queue is full: the pass brings it). */
static bool push_urgent(struct pc_dst *d, uint64_t p)
{
    if (d->urgent_len == URGENT_MAX || bit(d->requested, p) ||
        bit(d->queued, p)) {
        return false;
    }
    d->urgent[(d->urgent_head + d->urgent_len) % URGENT_MAX] =
        (struct urgent){p, now_ms()};
    d->urgent_len++;
    bit_put(d->queued, p, true);
    return true;
}

/* -------------------------------------------------------------- the end */

/* DONE, and the source's digest in *@fin. */
static int exchange_done(struct pc_dst *d, struct pc_fin *fin,
                         struct vg_error *err)
{
    struct pc_req req = {.op = PC_OP_DONE};
    struct iovec iov = {&req, sizeof(req)};
    int ret = pc_send(d->sock, &iov, 1, err);

    return ret < 0 ? ret : pc_recv(d->sock, fin, sizeof(*fin), err);
}

static int reconnect(struct pc_dst *d, struct vg_error *err);
static bool recoverable(const struct vg_error *err);

/* Restore on demand: every page is in; the file's digest checked. */
static int finish_file(struct pc_dst *d, struct vg_error *err)
{
    int ret = sf_verify(d->cfg.file, err);

    for (unsigned i = 0; d->cfg.uffd >= 0 && i < d->cfg.nareas; i++) {
        uffd_unregister(d->cfg.uffd, d->areas[i].vaddr, d->areas[i].size, NULL);
    }
    pthread_mutex_lock(&d->lock);
    d->stats.done = true;
    d->stats.verified = ret == 0;
    d->stats.elapsed_ms = now_ms() - d->t0_ms;
    pthread_cond_broadcast(&d->arrived);
    pthread_mutex_unlock(&d->lock);
    return ret;
}

static int finish(struct pc_dst *d, struct vg_error *err)
{
    struct vg_digest *st = vg_digest_new();
    struct pc_fin fin = {0};
    uint64_t digest = 0;
    int ret = exchange_done(d, &fin, err);

    while (ret < 0 && recoverable(err) && reconnect(d, err) == 0) {
        ret = exchange_done(d, &fin, err);
    }
    if (st) {
        vg_digest_reset(st, 0);
        for (uint64_t p = 0; p < d->cfg.npages; p++) {
            if (bit(d->wanted, p)) {
                vg_digest_update(st, &d->page_hash[p], 8);
            }
        }
        digest = vg_digest_value(st);
        vg_digest_free(st);
    } else if (ret == 0) {
        ret = vg_error_set(err, ENOMEM,
                           "no memory for the received pages' digest");
    }
    for (unsigned i = 0; d->cfg.uffd >= 0 && i < d->cfg.nareas; i++) {
        uffd_unregister(d->cfg.uffd, d->areas[i].vaddr, d->areas[i].size, NULL);
    }
    pthread_mutex_lock(&d->lock);
    d->stats.done = true;
    d->stats.verified = ret == 0 && fin.vram_checksum == digest;
    d->stats.elapsed_ms = now_ms() - d->t0_ms;
    pthread_cond_broadcast(&d->arrived);
    pthread_mutex_unlock(&d->lock);
    if (ret == 0 && !d->stats.verified) {
        ret = vg_error_set(err, EBADMSG,
                           "received pages' digest %016" PRIx64
                           " differs from the source's %016" PRIx64,
                           digest, fin.vram_checksum);
    }
    return ret;
}

/* Loading stops: an error, or the client exited (its pages' address space
 * is gone; QEMU quit mid-restore or mid-migration: nothing is wrong here). */
static void fail(struct pc_dst *d, const struct vg_error *err)
{
    if (err->code == ESRCH) {
        vg_info("post-copy: loading stops: %s", err->msg);
    } else {
        vg_err("post-copy: %s", err->msg);
    }
    pthread_mutex_lock(&d->lock);
    snprintf(d->stats.error, sizeof(d->stats.error), "%s", err->msg);
    d->failed = true;
    pthread_cond_broadcast(&d->arrived);
    pthread_mutex_unlock(&d->lock);
}

/* A broken channel, not a source that sent something wrong. */
static bool recoverable(const struct vg_error *err)
{
    return err->code != EPROTO && err->code != EBADMSG && err->code != ENOMEM &&
           err->code != ECANCELED && strncmp(err->msg, "UFFDIO", 6) != 0;
}

/* Pages [@first, +@count) were asked for on a channel that broke. */
static void unrequest(struct pc_dst *d, uint64_t first, uint32_t count)
{
    pthread_mutex_lock(&d->lock);
    for (uint32_t i = 0; i < count; i++) {
        if (bit(d->pending, first + i)) {
            bit_put(d->requested, first + i, false);
            push_urgent(d, first + i);
        }
    }
    pthread_mutex_unlock(&d->lock);
}

/* True if pc_dst_free() asks the threads to end, within @ms. */
static bool stop_within(struct pc_dst *d, int ms)
{
    struct pollfd pfd = {d->stop_fd, POLLIN, 0};

    return poll(&pfd, 1, ms) > 0;
}

/* The channel broke (@err says how): connect again with the same token
 * every PC_RETRY_MS until the source answers (a network cut that heals,
 * as QEMU's own post-copy recovery expects), for PC_RECONNECT_S at most;
 * the pages asked for meanwhile go first. */
static int reconnect(struct pc_dst *d, struct vg_error *err)
{
    double until = now_ms() + PC_RECONNECT_S * 1000.0;
    struct vg_error e = *err;

    vg_warn("post-copy: %s; reconnecting to %s", e.msg, d->cfg.address);
    pthread_mutex_lock(&d->lock);
    d->stats.reconnecting = true;
    snprintf(d->stats.channel_error, sizeof(d->stats.channel_error), "%s",
             e.msg);
    pthread_mutex_unlock(&d->lock);
    for (;;) {
        if (stop_within(d, PC_RETRY_MS)) {
            return vg_error_set(err, ECANCELED, "post-copy stopped");
        }
        if (d->sock >= 0) {
            close(d->sock);
            d->sock = -1;
        }
        vg_error_clear(&e);
        if (dst_connect(d, &e) == 0 && dst_welcome_again(d, &e) == 0) {
            break;
        }
        if (e.code == EPROTO || now_ms() > until) {
            *err = e;
            vg_error_prefix(err, "reconnecting for %d s", PC_RECONNECT_S);
            return -err->code;
        }
    }
    pthread_mutex_lock(&d->lock);
    d->stats.reconnecting = false;
    d->stats.reconnects++;
    pthread_mutex_unlock(&d->lock);
    vg_info("post-copy: reconnected to %s", d->cfg.address);
    return 0;
}

/* Fetch runs until none is left to ask for (0), another worker failed
 * (0), or this one fails. */
static int fetch_runs(struct pc_worker *w, struct vg_error *err)
{
    struct pc_dst *d = w->d;

    for (;;) {
        uint64_t first;
        uint32_t count;
        double asked;
        bool more;
        int ret;

        pthread_mutex_lock(&d->lock);
        more = !d->failed && next_run(d, &first, &count, &asked);
        for (uint32_t i = 0; more && i < count; i++) {
            bit_put(d->requested, first + i, true);
        }
        pthread_mutex_unlock(&d->lock);
        if (!more) {
            return 0;
        }
        ret = fetch_run(w, first, count, asked, err);
        if (ret < 0) {
            unrequest(d, first, count);
            if (d->cfg.file || !recoverable(err) || reconnect(d, err) < 0) {
                return ret;
            }
        }
    }
}

/* @n workers are done fetching (@failed: with an error); true if the
 * last of all is, and none failed: every page is here. */
static bool leave(struct pc_dst *d, unsigned n, bool failed)
{
    bool last;

    pthread_mutex_lock(&d->lock);
    d->fetching -= n;
    d->failed |= failed;
    last = d->fetching == 0 && !d->failed;
    pthread_mutex_unlock(&d->lock);
    return last;
}

/* The end of the load, by the last worker to leave. */
static int finish_load(struct pc_dst *d, struct vg_error *err)
{
    return d->cfg.file ? finish_file(d, err) : finish(d, err);
}

/* Fetch with worker @w; the last worker to be done ends the load.  1 if
 * this one did, 0 if it left first, < 0 on error. */
static int fetch_all(struct pc_worker *w, struct vg_error *err)
{
    int ret = fetch_runs(w, err);

    if (!leave(w->d, 1, ret < 0)) {
        return ret;
    }
    ret = finish_load(w->d, err);
    return ret < 0 ? ret : 1;
}

static void *fetch_thread(void *opaque)
{
    struct pc_worker *w = opaque;
    struct pc_dst *d = w->d;
    struct vg_error err = {0};
    int ret = fetch_all(w, &err);

    if (ret < 0) {
        fail(d, &err);
    } else if (ret > 0) {
        vg_info("post-copy: %" PRIu64 " pages received in %.1f ms (%" PRIu64
                " faults, longest wait %.2f ms, %u threads), digest verified",
                d->stats.fetched, d->stats.elapsed_ms, d->stats.faults,
                d->stats.max_fault_ms, d->nworkers);
    }
    return NULL;
}

/* Start every worker's thread.  A worker whose thread cannot start leaves
 * at once; only the first one must start. */
static int start_workers(struct pc_dst *d, struct vg_error *err)
{
    for (unsigned i = 0; i < d->nworkers; i++) {
        int ret = -pthread_create(&d->workers[i].thread, NULL, fetch_thread,
                                  &d->workers[i]);

        if (ret < 0 && i == 0) {
            return vg_error_set(err, -ret, "post-copy thread: %s",
                                strerror(-ret));
        }
        if (ret < 0) {
            vg_warn("post-copy: %u of %u fetch threads: %s", i, d->nworkers,
                    strerror(-ret));
            if (leave(d, d->nworkers - i, false) && finish_load(d, err) < 0) {
                fail(d, err);
            }
            break;
        }
        d->workers[i].started = true;
        pthread_setname_np(d->workers[i].thread, "vgs/pc-fetch");
    }
    return 0;
}

/* ----------------------------------------------------------------- faults */

static void on_fault(struct pc_dst *d, uint64_t addr)
{
    static const uint8_t zeros[65536];
    uint64_t hp = addr & ~(d->host_page - 1);
    bool pending = false;
    struct vg_error err = {0};

    for (unsigned i = 0; i < d->cfg.nareas; i++) {
        const struct pc_dst_area *a = &d->areas[i];

        if (hp >= a->vaddr && hp - a->vaddr < a->size) {
            uint64_t p = (a->vram_off + (hp - a->vaddr)) / d->cfg.page_size;

            pthread_mutex_lock(&d->lock);
            pending = bit(d->pending, p);
            if (pending) {
                d->stats.faults++;
                push_urgent(d, p);
            } else {
                d->stats.zero_faults++;
            }
            pthread_mutex_unlock(&d->lock);
            break;
        }
    }
    /* A page that is not pending is here, or is a page of zeros. */
    if (!pending && d->host_page <= sizeof(zeros) &&
        uffd_copy(d->cfg.uffd, hp, zeros, d->host_page, &err) < 0) {
        vg_warn("post-copy: fault at %#" PRIx64 ": %s", addr, err.msg);
    }
}

static void *fault_thread(void *opaque)
{
    struct pc_dst *d = opaque;
    struct pollfd pfd[2] = {{d->cfg.uffd, POLLIN, 0}, {d->stop_fd, POLLIN, 0}};

    while (poll(pfd, 2, -1) >= 0 || errno == EINTR) {
        uint64_t addr;
        struct vg_error err = {0};
        int r;

        if (pfd[1].revents) {
            break;
        }
        while ((r = uffd_next_fault(d->cfg.uffd, &addr, &err)) > 0) {
            on_fault(d, addr);
        }
        if (r < 0) {
            vg_err("post-copy: %s", err.msg);
            break;
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------ start */

/* Whether the client's mappings can be served page by page: each covers
 * whole pages inside VRAM. */
static bool areas_usable(const struct pc_dst *d)
{
    uint64_t vram = d->cfg.npages * d->cfg.page_size;

    for (unsigned i = 0; i < d->cfg.nareas; i++) {
        const struct pc_dst_area *a = &d->areas[i];

        if (a->vram_off % d->cfg.page_size || a->size % d->cfg.page_size ||
            a->vaddr % d->host_page || a->size == 0 || a->vram_off > vram ||
            a->size > vram - a->vram_off) {
            vg_warn("post-copy: mapping of VRAM %#" PRIx64 "+%#" PRIx64
                    " at %#" PRIx64 " is not whole pages of VRAM",
                    a->vram_off, a->size, a->vaddr);
            return false;
        }
    }
    return d->cfg.nareas > 0;
}

/* Drop pre-copy's stale copies of the pending pages: holes fault. */
static int punch_pending(struct pc_dst *d, struct vg_error *err)
{
    uint64_t ps = d->cfg.page_size;

    for (uint64_t p = 0; p < d->cfg.npages;) {
        uint64_t n = 0;

        while (p + n < d->cfg.npages && bit(d->pending, p + n)) {
            n++;
        }
        if (n && fallocate(d->cfg.vram_fd,
                           FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                           (off_t)(p * ps), (off_t)(n * ps)) < 0) {
            return vg_error_set(err, errno,
                                "dropping VRAM %#" PRIx64 "+%#" PRIx64 ": %s",
                                p * ps, n * ps, strerror(errno));
        }
        p += n ? n : 1;
    }
    return 0;
}

static int register_areas(struct pc_dst *d, struct vg_error *err)
{
    for (unsigned i = 0; i < d->cfg.nareas; i++) {
        int ret = uffd_register(d->cfg.uffd, d->areas[i].vaddr,
                                d->areas[i].size, err);

        if (ret < 0) {
            return ret;
        }
    }
    return 0;
}

static int dst_alloc(struct pc_dst *d, const struct pc_dst_config *cfg,
                     struct vg_error *err)
{
    uint64_t bytes = pc_bitmap_bytes(cfg->npages);

    d->cfg = *cfg;
    d->sock = d->stop_fd = -1;
    d->host_page = (uint64_t)sysconf(_SC_PAGESIZE);
    d->areas = calloc(cfg->nareas ? cfg->nareas : 1, sizeof(*d->areas));
    d->nworkers =
        cfg->file && cfg->vram && cfg->threads > 1
            ? (cfg->threads < PC_FETCH_THREADS_MAX ? cfg->threads
                                                   : PC_FETCH_THREADS_MAX)
            : 1;
    d->workers = calloc(d->nworkers, sizeof(*d->workers));
    d->pending = calloc(1, bytes);
    d->requested = calloc(1, bytes);
    d->queued = calloc(1, bytes);
    d->wanted = calloc(1, bytes);
    d->page_hash = calloc(cfg->npages, 8);
    pthread_mutex_init(&d->lock, NULL);
    pthread_cond_init(&d->arrived, NULL);
    if (!d->areas || !d->workers || !d->pending || !d->requested ||
        !d->queued || !d->wanted || !d->page_hash) {
        return vg_error_set(err, ENOMEM, "no memory for post-copy");
    }
    for (unsigned i = 0; i < d->nworkers; i++) {
        struct pc_worker *w = &d->workers[i];

        w->d = d;
        w->buf = malloc((uint64_t)run_max(d) * cfg->page_size);
        if (!w->buf) {
            return vg_error_set(err, ENOMEM, "no memory for post-copy");
        }
        if (cfg->file && sf_reader_new(cfg->file, &w->rd, err) < 0) {
            return -err->code;
        }
    }
    d->fetching = d->nworkers;
    if (cfg->nareas) {
        memcpy(d->areas, cfg->areas, cfg->nareas * sizeof(*d->areas));
    }
    d->cfg.areas = d->areas;
    d->stop_fd = eventfd(0, EFD_CLOEXEC);
    if (d->stop_fd < 0) {
        return vg_error_set(err, errno, "eventfd: %s", strerror(errno));
    }
    if ((!cfg->vram && !cfg->write) || cfg->page_size == 0 ||
        cfg->page_size % d->host_page) {
        return vg_error_set(err, ENOTSUP,
                            "post-copy needs VRAM mapped in this server, or a "
                            "way to write it, in pages of whole host pages");
    }
    return 0;
}

/* On demand: holes, registration, threads. */
static int start_on_demand(struct pc_dst *d, struct vg_error *err)
{
    int ret = punch_pending(d, err);

    if (ret == 0) {
        ret = register_areas(d, err);
    }
    if (ret == 0) {
        ret = -pthread_create(&d->fault_thread, NULL, fault_thread, d);
        d->fault_started = ret == 0;
        if (d->fault_started) {
            pthread_setname_np(d->fault_thread, "vgs/pc-fault");
        }
    }
    if (ret < 0 && !err->code) {
        vg_error_set(err, -ret, "post-copy threads: %s", strerror(-ret));
    }
    if (ret == 0) {
        ret = start_workers(d, err);
    }
    d->stats.on_demand = ret == 0;
    return ret;
}

/* VRAM not mapped here, every access trapped: only the fetch thread. */
static int start_trapped(struct pc_dst *d, struct vg_error *err)
{
    int ret = start_workers(d, err);

    d->stats.on_demand = ret == 0;
    return ret;
}

int pc_dst_start(const struct pc_dst_config *cfg, struct pc_dst **out,
                 struct vg_error *err)
{
    struct pc_dst *d = calloc(1, sizeof(*d));
    int ret;

    if (!d) {
        return vg_error_set(err, ENOMEM, "no memory for post-copy");
    }
    d->t0_ms = now_ms();
    ret = dst_alloc(d, cfg, err);
    if (ret == 0 && cfg->file) {
        file_welcome(d);
    } else if (ret == 0) {
        ret = dst_connect(d, err);
        if (ret == 0) {
            ret = dst_welcome(d, err);
        }
    }
    if (ret == 0 && !d->cfg.vram) {
        ret = start_trapped(d, err);
    } else if (ret == 0 && d->cfg.uffd >= 0 && d->cfg.vram_fd >= 0 &&
               areas_usable(d)) {
        ret = start_on_demand(d, err);
    } else if (ret == 0) {
        vg_warn("post-copy: no userfaultfd over the client's VRAM mappings: "
                "fetching the %" PRIu64 " pending pages before the VM runs",
                d->left);
        d->fetching = 1; /* worker 0, here */
        ret = fetch_all(&d->workers[0], err);
        ret = ret < 0 ? ret : 0;
    }
    if (ret < 0) {
        vg_error_prefix(err, "post-copy");
        pc_dst_free(d);
        return ret;
    }
    *out = d;
    return 0;
}

void pc_dst_free(struct pc_dst *d)
{
    uint64_t one = 1;

    if (!d) {
        return;
    }
    if (d->sock >= 0) {
        shutdown(d->sock, SHUT_RDWR);
    }
    if (d->stop_fd >= 0 && write(d->stop_fd, &one, sizeof(one)) < 0) {
        vg_warn("post-copy: cannot signal the fault thread");
    }
    for (unsigned i = 0; d->workers && i < d->nworkers; i++) {
        if (d->workers[i].started) {
            pthread_join(d->workers[i].thread, NULL);
        }
    }
    if (d->fault_started) {
        pthread_join(d->fault_thread, NULL);
    }
    if (d->cfg.uffd >= 0) {
        close(d->cfg.uffd); /* unregisters what is left, wakes waiters */
    }
    if (d->sock >= 0) {
        close(d->sock);
    }
    if (d->stop_fd >= 0) {
        close(d->stop_fd);
    }
    pthread_mutex_destroy(&d->lock);
    pthread_cond_destroy(&d->arrived);
    free(d->areas);
    for (unsigned i = 0; d->workers && i < d->nworkers; i++) {
        free(d->workers[i].buf);
        sf_reader_free(d->workers[i].rd);
    }
    free(d->workers);
    free(d->pending);
    free(d->requested);
    free(d->queued);
    free(d->wanted);
    free(d->page_hash);
    free(d);
}

/* ------------------------------------------------------------ the device */

int pc_dst_wait(struct pc_dst *d, uint64_t off, uint64_t len,
                struct vg_error *err)
{
    uint64_t ps = d->cfg.page_size;
    uint64_t first = off / ps, end = len ? (off + len - 1) / ps + 1 : first;
    bool waited = false;
    int ret = 0;

    if (end > d->cfg.npages) {
        end = d->cfg.npages;
    }
    pthread_mutex_lock(&d->lock);
    for (uint64_t p = first; p < end;) {
        if (d->stats.error[0]) {
            ret =
                vg_error_set(err, EIO, "post-copy failed: %s", d->stats.error);
            break;
        }
        if (!bit(d->pending, p)) {
            p++;
            continue;
        }
        if (!waited) {
            d->stats.waits++;
            waited = true;
        }
        push_urgent(d, p);
        pthread_cond_wait(&d->arrived, &d->lock);
    }
    pthread_mutex_unlock(&d->lock);
    return ret;
}

bool pc_dst_ready(struct pc_dst *d, uint64_t off, uint64_t len)
{
    uint64_t ps = d->cfg.page_size;
    uint64_t end = len ? (off + len - 1) / ps + 1 : off / ps;
    bool ready = true, asked = false;

    end = end < d->cfg.npages ? end : d->cfg.npages;
    pthread_mutex_lock(&d->lock);
    for (uint64_t p = off / ps; p < end; p++) {
        if (bit(d->pending, p)) {
            ready = false;
            asked |= push_urgent(d, p);
        }
    }
    /* A command held again for pages it asked for is one wait. */
    d->stats.waits += asked;
    pthread_mutex_unlock(&d->lock);
    return ready;
}

bool pc_dst_done(struct pc_dst *d)
{
    bool done;

    pthread_mutex_lock(&d->lock);
    done = d->stats.done;
    pthread_mutex_unlock(&d->lock);
    return done;
}

bool pc_dst_fetches(const struct pc_dst *d, uint64_t page)
{
    return page < d->cfg.npages && bit(d->wanted, page);
}

void pc_dst_page_hashes(struct pc_dst *d, uint64_t *hash, uint64_t *known)
{
    pthread_mutex_lock(&d->lock);
    for (uint64_t p = 0; d->stats.done && p < d->cfg.npages; p++) {
        if (bit(d->wanted, p)) {
            hash[p] = d->page_hash[p];
            bit_put(known, p, true);
        }
    }
    pthread_mutex_unlock(&d->lock);
}

void pc_dst_get_stats(struct pc_dst *d, struct pc_dst_stats *st)
{
    pthread_mutex_lock(&d->lock);
    *st = d->stats;
    pthread_mutex_unlock(&d->lock);
}
