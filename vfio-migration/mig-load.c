/*
 * mig-load.c -- the destination's loading session: the stream decoder
 * writes pages into VRAM; the device state is applied only when the
 * stream is complete and valid.
 *
 * A ZEROS record is 32 bytes and may cover up to MIG_ZEROS_MAX_PAGES
 * pages, so clearing what every record names would let a stream of
 * repeated records keep the destination busy for minutes.  The session
 * remembers which pages it cleared and has not written since (@zeroed):
 * those are not cleared again.  VRAM is thus cleared at most once plus
 * once per page a PAGES record wrote, work proportional to the stream.
 *
 * Where VRAM is mapped here, a PAGES record of at least MIG_SPLIT_BYTES
 * is written (and, from a version 1 stream, hashed) by the session's
 * thread pool, in pieces (mig_run_pieces()), and the record
 * returns when all pieces are in: the order of records, and so of writes
 * to one page, is kept.  A version 2 stream brings the page hashes
 * (computed by the decoder from the bytes written, on the pool too for
 * such records), so nothing is hashed twice.  Page data a client placed
 * in VRAM itself (mig_load_placed()) are hashed where they are, by the
 * pool too.
 *
 * The stream may also come as extents of a save file (mig_load_file(),
 * a restore).  A version 2 stream is then read on demand: the session
 * scans it (stream-file.h) and, once it is whole, hands the file to
 * pc-dst.c, which loads the pages while the VM runs.  Otherwise (a
 * version 1 stream, --no-restore-on-demand, or a first extent too short
 * to tell) its bytes are read here and decoded as if written.
 */
#include "mig-int.h"
#include "mig-hashway.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/le.h"
#include "common/log.h"
#include "common/nt-copy.h"
#include "stream-file.h"

/* One PAGES record being written by the pool. */
struct load_job {
    struct mig *m;
    uint64_t first; /* its first page */
    uint64_t count; /* pages */
    const uint8_t *data;
    const uint64_t *hashes; /* the decoder's page hashes, or NULL */
    int failed;             /* first -errno of a piece, 0 if none */
    struct vg_error err;    /* ... and its error */
    pthread_mutex_t lock;   /* for failed and err */
};

struct mig_load {
    struct dt_pool *pool; /* writes and hashes large records */
    struct mig_dec *dec;
    uint64_t *page_hash;     /* mig_page_hash() of pages loaded... */
    uint64_t *hashed;        /* ...where this bitmap says so */
    uint64_t *zeroed;        /* pages this stream cleared and did not write */
    uint64_t zero_hash;      /* of a zero page */
    uint64_t zero_hashes[2]; /* ...hashed whole, and as a tree */
    /* Version 5, VRAM mapped here: the hashes of the pages' pieces as
     * they landed (else NULL), so that pieces are hashed alone: the
     * device's (mig_session_tree()), not freed with the session. */
    struct mig_tree *tree;
    uint8_t state[MIG_STATE_MAX];
    uint32_t state_len;
    /* At the finish, for the checksums taken once idle: the device state
     * as loaded, and whether page_hash then had every page. */
    uint8_t loaded_state[VGPU_STATE_SIZE];
    bool hashes_whole;
    bool postcopy; /* a POSTCOPY record came: */
    struct mig_postcopy_info pc_info;
    /* A save file's extents: read on demand (@file), or here (@file_fd). */
    struct sf *file;
    int file_fd;
    bool failed; /* a write failed (reported once) */
    /* Pages PAGE_PIECES records wrote in mapped VRAM, whose page hashes
     * wait to be taken on the pool, a batch at a time (or at the finish). */
    struct {
        uint64_t page[MIG_HASH_BATCH];
        uint64_t mask[MIG_HASH_BATCH]; /* the pieces written */
        uint64_t hash[MIG_HASH_BATCH];
        unsigned n;
    } unhashed;
    /* With --gpu-hash=auto, whether the GPU or the pool hashes the next
     * write's pages (the faster way, learnt). */
    struct mig_hashway hashway;
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

/* The page hash of page @page of mapped VRAM as it is now, its pieces'
 * hashes kept where the stream's page hash is a tree. */
static uint64_t mapped_hash(struct mig *m, uint64_t page)
{
    struct mig_tree *tree = m->load->tree;

    return tree ? mig_tree_hash(tree, page,
                                vgpu_vram(m->gpu) + page * m->scfg.page_size)
                : mig_page_hash(m, page);
}

/* Write pages [first, first + count) of @data (host-to-device copies on a
 * GPU) and keep their page hashes: @hashes where the stream brought them,
 * else hashed as they landed (from VRAM where it is mapped here, else from
 * what was written). */
static int write_pages(struct mig *m, uint64_t first, uint64_t count,
                       const uint8_t *data, const uint64_t *hashes,
                       struct vg_error *err)
{
    uint32_t ps = m->scfg.page_size;
    uint64_t *page_hash = m->load->page_hash + first;
    int ret = vgpu_vram_write(m->gpu, first * ps, data, count * ps, err);

    for (uint64_t i = 0; ret == 0 && i < count; i++) {
        if (hashes && m->load->tree) { /* hashed elsewhere */
            mig_tree_forget(m->load->tree, first + i);
        }
        page_hash[i] = hashes ? hashes[i]
                       : vgpu_vram(m->gpu)
                           ? mapped_hash(m, first + i)
                           : mig_stream_page_hash(m->hash_version,
                                                  data + i * ps, ps, NULL);
    }
    return ret;
}

/* Pool job: piece @piece of the record. */
static void write_piece(void *arg, uint64_t piece)
{
    struct load_job *job = arg;
    uint64_t skip;
    uint64_t n =
        mig_piece(piece, job->m->scfg.page_size, job->count, &skip) - skip;
    struct vg_error err;
    int ret = write_pages(job->m, job->first + skip, n,
                          job->data + skip * job->m->scfg.page_size,
                          job->hashes ? job->hashes + skip : NULL, &err);

    if (ret < 0) {
        pthread_mutex_lock(&job->lock);
        if (!job->failed) {
            job->failed = ret;
            job->err = err;
        }
        pthread_mutex_unlock(&job->lock);
    }
}

/* The record's pages by the pool, where it pays off. */
static int write_record(struct mig *m, uint64_t first, uint64_t count,
                        const uint8_t *data, const uint64_t *hashes,
                        struct vg_error *err)
{
    struct load_job job = {
        .m = m, .first = first, .count = count, .data = data, .hashes = hashes};

    /* A GPU's VRAM takes one host-to-device copy per record */
    if (!vgpu_vram(m->gpu)) {
        return write_pages(m, first, count, data, hashes, err);
    }
    pthread_mutex_init(&job.lock, NULL);
    mig_run_pieces(m->load->pool, m->scfg.page_size, count, write_piece, &job);
    pthread_mutex_destroy(&job.lock);
    if (job.failed && err) {
        *err = job.err;
    }
    return job.failed;
}

/* One record's pages being hashed by the pool for the decoder (and, for
 * copy_hash_piece, written to VRAM from @first on). */
struct hash_job {
    struct mig *m;
    uint64_t first;
    const uint8_t *data;
    uint32_t page_size;
    uint64_t count;
    uint64_t *hashes;
};

/* The page hash of the page at @data: through the tree where @data is a
 * page of mapped VRAM (placed there by the client). */
static uint64_t data_hash(struct mig *m, const uint8_t *data)
{
    uintptr_t vram = (uintptr_t)vgpu_vram(m->gpu), at = (uintptr_t)data;
    uint32_t ps = m->scfg.page_size;

    if (m->load->tree && vram && at >= vram && at < vram + m->npages * ps &&
        (at - vram) % ps == 0) {
        return mig_tree_hash(m->load->tree, (at - vram) / ps, data);
    }
    return mig_stream_page_hash(m->hash_version, data, ps, NULL);
}

static void hash_piece(void *arg, uint64_t piece)
{
    struct hash_job *job = arg;
    uint64_t i, end = mig_piece(piece, job->page_size, job->count, &i);

    for (; i < end; i++) {
        job->hashes[i] = data_hash(job->m, job->data + i * job->page_size);
    }
}

/* The decoder's hash_pages, for the pages a client placed in VRAM itself
 * (mig_load_placed()): hashed where they are, on the pool as the pages
 * the server writes are. */
static void sink_hash_pages(void *opaque, const uint8_t *data, uint64_t count,
                            uint64_t *hashes)
{
    struct mig *m = opaque;
    struct hash_job job = {m, 0, data, m->scfg.page_size, count, hashes};

    mig_run_pieces(m->load->pool, job.page_size, count, hash_piece, &job);
}

/* Pool job: copy piece @piece of a record into host VRAM and hash each
 * page there (still in the cache). */
static void copy_hash_piece(void *arg, uint64_t piece)
{
    struct hash_job *job = arg;
    struct mig *m = job->m;
    uint32_t ps = job->page_size;
    uint64_t i, end = mig_piece(piece, ps, job->count, &i);

    vgpu_vram_write(m->gpu, (job->first + i) * ps, job->data + i * ps,
                    (end - i) * ps, NULL); /* in range: cannot fail */
    for (; i < end; i++) {
        job->hashes[i] = mapped_hash(m, job->first + i);
    }
}

/* A GPU writes the pages and hashes them where they landed. */
static int gpu_write_hashed(struct mig *m, uint64_t first, uint64_t count,
                            const uint8_t *data, uint64_t *hashes,
                            struct vg_error *err)
{
    uint32_t ps = m->scfg.page_size;
    struct vgpu_copy_hashes h = {
        .page_size = ps, .nseeds = 1, .seeds = {0}, .hashes = {hashes}};
    double t0 = mig_now_ms();
    int ret =
        vgpu_vram_write_hashed(m->gpu, first * ps, data, count * ps, &h, err);

    m->stats.data_copy_ms += mig_now_ms() - t0;
    if (ret == 0) {
        m->stats.gpu_hashed_bytes += count * ps;
    }
    return ret;
}

/* Whether the GPU hashes the pages of the write about to be made. */
static bool gpu_hashes_write(struct mig *m)
{
    /* The GPU hashes pages whole: not a version 5 stream's trees. */
    if (!vgpu_copies_hash(m->gpu) || m->hash_version >= MIG_TREE_HASH_VERSION) {
        return false;
    }
    return m->gpu_hash == MIG_GPU_HASH_BOTH ||
           (m->gpu_hash == MIG_GPU_HASH_AUTO &&
            mig_hashway_choose(&m->load->hashway) == MIG_WAY_GPU);
}

/* What a write of @bytes of pages, begun at @t0 (ms), taught about @way. */
static void learn_hashway(struct mig *m, enum mig_way way, double t0,
                          uint64_t bytes)
{
    if (m->gpu_hash == MIG_GPU_HASH_AUTO && vgpu_copies_hash(m->gpu)) {
        mig_hashway_learn(&m->load->hashway, way, mig_now_ms() - t0, bytes);
    }
}

/*
 * The decoder's write_hashed: the record's pages go to VRAM before it
 * checks them, and their hashes are taken from what was written (host
 * VRAM: copied and hashed piece by piece on the pool; a GPU: hashed by
 * the GPU after its copy, or by the pool while the GPU copies them).  A
 * record that then fails its check fails the load, and nothing runs on
 * this VRAM before the load has succeeded.
 */
static int sink_write_hashed(void *opaque, uint64_t first, uint64_t count,
                             const uint8_t *data, uint64_t *hashes,
                             struct vg_error *err)
{
    struct mig *m = opaque;
    uint32_t ps = m->scfg.page_size;
    struct hash_job job = {m, first, data, ps, count, hashes};
    int ret = pages_ok(m, first, count, err), settled;
    double t0 = mig_now_ms(), t1;

    if (ret < 0) {
        return ret;
    }
    if (vgpu_vram(m->gpu)) {
        mig_run_pieces(m->load->pool, ps, count, copy_hash_piece, &job);
        m->stats.data_hash_ms += mig_now_ms() - t0;
        return 0;
    }
    if (gpu_hashes_write(m)) {
        ret = gpu_write_hashed(m, first, count, data, hashes, err);
        learn_hashway(m, MIG_WAY_GPU, t0, count * ps);
        return ret;
    }
    ret = vgpu_vram_write_async(m->gpu, first * ps, data, count * ps, err);
    if (ret == 0) {
        mig_run_pieces(m->load->pool, ps, count, hash_piece, &job);
    }
    t1 = mig_now_ms();
    settled = vgpu_vram_settle(m->gpu, ret ? NULL : err);
    m->stats.data_hash_ms += t1 - t0;
    m->stats.data_copy_ms += mig_now_ms() - t1;
    learn_hashway(m, MIG_WAY_THREADS, t0, count * ps);
    return ret ? ret : settled;
}

static int sink_pages(void *opaque, uint64_t first, uint64_t count,
                      const uint8_t *data, const uint64_t *hashes,
                      struct vg_error *err)
{
    struct mig *m = opaque;
    int ret = pages_ok(m, first, count, err);

    if (ret == 0 && !data) { /* sink_write_hashed wrote them */
        memcpy(m->load->page_hash + first, hashes, count * 8);
    } else if (ret == 0) {
        double t0 = mig_now_ms();

        ret = write_record(m, first, count, data, hashes, err);
        m->stats.data_copy_ms += mig_now_ms() - t0;
    }
    for (uint64_t i = 0; ret == 0 && i < count; i++) {
        mig_bit_put(m->load->hashed, first + i, true);
        mig_bit_put(m->load->zeroed, first + i, false);
    }
    return ret;
}

/* *@hash = the page hash of page @page as VRAM holds it: where it is
 * mapped here, or read from the device. */
static int page_hash_of(struct mig *m, uint64_t page, uint64_t *hash,
                        struct vg_error *err)
{
    uint32_t ps = m->scfg.page_size;
    uint8_t *copy;
    int ret;

    if (vgpu_vram(m->gpu)) {
        *hash = mig_page_hash(m, page);
        return 0;
    }
    copy = malloc(ps);
    if (!copy) {
        return vg_error_set(err, ENOMEM, "no memory to hash page %" PRIu64,
                            page);
    }
    ret = vgpu_vram_read(m->gpu, (uint64_t)page * ps, copy, ps, err);
    *hash = mig_stream_page_hash(m->hash_version, copy, ps, NULL);
    free(copy);
    return ret;
}

/* The page hashes of the pages pieces wrote since the last batch, taken
 * on the pool. */
static void hash_unhashed(struct mig *m)
{
    struct mig_load *l = m->load;

    mig_hash_listed(m, l->pool, l->tree, l->unhashed.page, l->unhashed.mask,
                    l->unhashed.n, l->unhashed.hash);
    for (unsigned i = 0; i < l->unhashed.n; i++) {
        l->page_hash[l->unhashed.page[i]] = l->unhashed.hash[i];
        mig_bit_put(l->hashed, l->unhashed.page[i], true);
    }
    l->unhashed.n = 0;
}

/* Page @page, its pieces @mask written in mapped VRAM, gets its hash with
 * the next batch: whatever writes it meanwhile, the batch hashes it as it
 * then is.  A page already in the batch adds @mask to its entry (the
 * batch's threads never share a page). */
static void hash_later(struct mig *m, uint64_t page, uint64_t mask)
{
    struct mig_load *l = m->load;

    for (unsigned i = 0; i < l->unhashed.n; i++) {
        if (l->unhashed.page[i] == page) {
            l->unhashed.mask[i] |= mask;
            return;
        }
    }
    mig_bit_put(l->hashed, page, false);
    l->unhashed.mask[l->unhashed.n] = mask;
    l->unhashed.page[l->unhashed.n++] = page;
    if (l->unhashed.n == MIG_HASH_BATCH) {
        hash_unhashed(m);
    }
}

/* The pieces @mask of page @page, @piece_size bytes each at @data, into
 * VRAM: a write per run of adjacent pieces, around the CPU's caches if
 * @nt (nobody reads them soon; the thread fences before it hands over). */
static int write_pieces(struct mig *m, uint64_t page, uint64_t mask,
                        uint32_t piece_size, const uint8_t *data, bool nt,
                        struct vg_error *err)
{
    uint64_t base = page * m->scfg.page_size;
    int ret = pages_ok(m, page, 1, err);

    while (ret == 0 && mask) {
        unsigned first = (unsigned)__builtin_ctzll(mask);
        uint64_t from = mask >> first;
        unsigned n = ~from ? (unsigned)__builtin_ctzll(~from) : 64;

        uint64_t off = base + (uint64_t)first * piece_size;

        ret = nt ? vgpu_vram_write_nt(m->gpu, off, data,
                                      (uint64_t)n * piece_size, err)
                 : vgpu_vram_write(m->gpu, off, data, (uint64_t)n * piece_size,
                                   err);
        data += (size_t)n * piece_size;
        mask = first + n >= 64 ? 0 : mask & (~0ull << (first + n));
    }
    return ret;
}

/* The page hash of page @page after pieces @mask of it were written
 * (their hashes @piece_hash, or NULL): from the kept pieces' hashes where
 * the stream's page hash is a tree, else the page whole. */
static int rehash_pieces(struct mig *m, uint64_t page, uint64_t mask,
                         const uint64_t *piece_hash, struct vg_error *err)
{
    struct mig_load *l = m->load;

    if (!l->tree) {
        return page_hash_of(m, page, &l->page_hash[page], err);
    }
    l->page_hash[page] = mig_tree_rehash(
        l->tree, page, vgpu_vram(m->gpu) + page * m->scfg.page_size, mask,
        piece_hash);
    return 0;
}

/* Pieces of page @page written over what an earlier record brought.  The
 * checksums need the page hashed again before the device runs, and it is
 * cheaper while the stream still comes than at the finish: at once where
 * the decoder checks it (@hash, a stale page), VRAM is not mapped here or
 * the decoder hashed the pieces (@piece_hash, version 6: the page hash is
 * then a join of hashes), else on the pool with a batch of such pages. */
static int sink_pieces(void *opaque, uint64_t page, uint64_t mask,
                       uint32_t piece_size, const uint8_t *data,
                       const uint64_t *piece_hash, uint64_t *hash,
                       struct vg_error *err)
{
    struct mig *m = opaque;
    struct mig_load *l = m->load;
    int ret = write_pieces(m, page, mask, piece_size, data, false, err);

    if (ret < 0) {
        return ret;
    }
    mig_bit_put(l->zeroed, page, false);
    if (!hash && !(piece_hash && l->tree) && vgpu_vram(m->gpu)) {
        hash_later(m, page, mask);
        return 0;
    }
    if (l->tree && !mig_bit(l->hashed, page)) {
        hash_unhashed(m); /* its earlier pieces' hashes first */
    }
    ret = rehash_pieces(m, page, mask, piece_hash, err);
    if (ret == 0) {
        mig_bit_put(l->hashed, page, true);
        if (hash) {
            *hash = l->page_hash[page];
        }
    }
    return ret;
}

/* sink_pieces() for a page of a batch (VRAM mapped here, version 6), on
 * the pool, at once with the batch's other pages: the pieces written
 * around the caches (the stream's pieces land all over VRAM and are not
 * read again here: their hashes came with them; batch_piece() fences),
 * the page hash joined from the pieces' hashes (or taken whole without a
 * tree), the page's bits set atomically (its neighbours' share their
 * words). */
static int sink_pieces_mt(void *opaque, uint64_t page, uint64_t mask,
                          uint32_t piece_size, const uint8_t *data,
                          const uint64_t *piece_hash, uint64_t *hash,
                          struct vg_error *err)
{
    struct mig *m = opaque;
    struct mig_load *l = m->load;
    int ret = write_pieces(m, page, mask, piece_size, data, true, err);

    ret = ret ? ret : rehash_pieces(m, page, mask, piece_hash, err);
    if (ret < 0) {
        return ret;
    }
    __atomic_fetch_and(&l->zeroed[page / 64], ~(1ull << (page % 64)),
                       __ATOMIC_RELAXED);
    __atomic_fetch_or(&l->hashed[page / 64], 1ull << (page % 64),
                      __ATOMIC_RELAXED);
    if (hash) {
        *hash = l->page_hash[page];
    }
    return 0;
}

/* A batch of pieces' records on the pool, MIG_PIECE_BYTES of pages' worth
 * of records a job; the pages hashed later first (a batch may change
 * them). */
struct batch_run {
    void (*fn)(void *arg, uint64_t i);
    void *arg;
    uint32_t page_size;
    uint64_t n;
};

static void batch_piece(void *arg, uint64_t piece)
{
    struct batch_run *r = arg;
    uint64_t i, end = mig_piece(piece, r->page_size, r->n, &i);

    for (; i < end; i++) {
        r->fn(r->arg, i);
    }
    vg_nt_fence(); /* sink_pieces_mt()'s writes, before the pool's end */
}

static void sink_run(void *opaque, uint64_t n,
                     void (*fn)(void *arg, uint64_t i), void *arg)
{
    struct mig *m = opaque;
    struct batch_run r = {fn, arg, m->scfg.page_size, n};

    if (m->load->unhashed.n) {
        hash_unhashed(m);
    }
    mig_run_pieces(m->load->pool, m->scfg.page_size, n, batch_piece, &r);
}

/* The first page in [@p, @end) whose bit in @bm is @v, else @end. */
static uint64_t bit_find(const uint64_t *bm, uint64_t p, uint64_t end, bool v)
{
    while (p < end) {
        uint64_t w = (v ? bm[p / 64] : ~bm[p / 64]) & (~0ull << (p % 64));

        if (w) {
            uint64_t q = (p & ~63ull) + (uint64_t)__builtin_ctzll(w);
            return q < end ? q : end;
        }
        p = (p | 63) + 1;
    }
    return end;
}

/* Clear pages [first, first + count), none of them cleared before. */
static int clear_run(struct mig *m, uint64_t first, uint64_t count,
                     struct vg_error *err)
{
    struct mig_load *l = m->load;
    uint32_t ps = m->scfg.page_size;
    int ret = vgpu_vram_clear(m->gpu, first * ps, count * ps, err);

    for (uint64_t i = first; ret == 0 && i < first + count; i++) {
        if (l->tree) {
            mig_tree_forget(l->tree, i);
        }
        l->page_hash[i] = l->zero_hash;
        mig_bit_put(l->hashed, i, true);
        mig_bit_put(l->zeroed, i, true);
    }
    return ret;
}

/* Zero the pages of the run that this stream has not cleared already. */
static int sink_zeros(void *opaque, uint64_t first, uint64_t count,
                      struct vg_error *err)
{
    struct mig *m = opaque;
    uint64_t end = first + count, p = first;
    int ret = pages_ok(m, first, count, err);

    while (ret == 0 && p < end) {
        uint64_t q;

        p = bit_find(m->load->zeroed, p, end, false);
        q = bit_find(m->load->zeroed, p, end, true);
        if (q > p) {
            ret = clear_run(m, p, q - p, err);
        }
        p = q;
    }
    return ret;
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

/* A post-copy switchover: the pages it names come later (the record was
 * checked against this VRAM by the decoder). */
static int sink_postcopy(void *opaque, const struct mig_postcopy_info *info,
                         struct vg_error *err)
{
    struct mig *m = opaque;

    if (!mig_postcopy_capable(m)) {
        return vg_error_set(err, ENOTSUP,
                            "this server does not do post-copy (--no-postcopy, "
                            "or no socket)");
    }
    m->load->postcopy = true;
    m->load->pc_info = *info;
    return 0;
}

/* The stream's page hash is its version's; a zero page's with it. */
static void sink_header(void *opaque, uint32_t version)
{
    struct mig *m = opaque;

    m->hash_version = version;
    m->load->zero_hash = m->load->zero_hashes[version >= MIG_TREE_HASH_VERSION];
    if (version >= MIG_TREE_HASH_VERSION && vgpu_vram(m->gpu) &&
        !m->load->tree) {
        /* without it, pages written by pieces are hashed whole */
        m->load->tree = mig_session_tree(m);
    }
}

int mig_load_open(struct mig *m, struct vg_error *err)
{
    struct mig_dec_sink sink = {.opaque = m,
                                .header = sink_header,
                                .pages = sink_pages,
                                .zeros = sink_zeros,
                                .pieces = sink_pieces,
                                .state = sink_state,
                                .write_hashed = sink_write_hashed,
                                .hash_pages = sink_hash_pages,
                                .postcopy = sink_postcopy};
    uint8_t *zero;
    int ret;

    if (vgpu_vram(m->gpu)) {
        sink.run = sink_run;
        sink.pieces_mt = sink_pieces_mt;
    }
    m->load = calloc(1, sizeof(*m->load));
    if (!m->load) {
        return vg_error_set(err, ENOMEM, "loading session");
    }
    m->load->page_hash = calloc(m->npages, 8);
    m->load->hashed = calloc((m->npages + 63) / 64, 8);
    m->load->zeroed = calloc((m->npages + 63) / 64, 8);
    zero = calloc(1, m->scfg.page_size);
    if (!m->load->page_hash || !m->load->hashed || !m->load->zeroed || !zero) {
        free(zero);
        mig_load_close(m);
        return vg_error_set(err, ENOMEM, "loading session page hashes");
    }
    for (unsigned tree = 0; tree < 2; tree++) {
        m->load->zero_hashes[tree] = mig_stream_page_hash(
            tree ? MIG_TREE_HASH_VERSION : 1, zero, m->scfg.page_size, NULL);
    }
    m->load->zero_hash = m->load->zero_hashes[0];
    free(zero);
    ret = dt_pool_new(m->hash_threads, &m->load->pool, err);
    if (ret == 0) {
        ret = mig_dec_new(&m->scfg, &sink, &m->load->dec, err);
    }
    if (ret < 0) {
        mig_load_close(m);
        return ret;
    }
    m->load->file_fd = -1;
    vgpu_reset(m->gpu);
    return 0;
}

/* The first extent: on demand if it starts with a version 2 or later
 * HEADER. */
static int file_open(struct mig *m, int fd, uint64_t off, uint64_t len,
                     struct vg_error *err)
{
    struct mig_dec_sink sink = {.opaque = m,
                                .header = sink_header,
                                .zeros = sink_zeros,
                                .state = sink_state};
    struct sf_config cfg = {m->scfg, fd, m->fault.postcopy_delay_ms, sink};
    uint8_t head[MIG_REC_HDR_SIZE + MIG_HEADER_SIZE];
    bool lazy = mig_restore_capable(m) && len >= sizeof(head) &&
                pread(fd, head, sizeof(head), (off_t)off) == sizeof(head) &&
                vg_get_le16(head) == MIG_REC_HEADER &&
                vg_get_le32(head + MIG_REC_HDR_SIZE + 8) >= 2;

    if (!lazy) {
        vg_info("migration: loading from a save file before the VM runs");
        m->load->file_fd = fd;
        return 0;
    }
    vg_info("migration: loading from a save file on demand");
    m->stats.restore_on_demand = true;
    return sf_new(&cfg, &m->load->file, err);
}

/* Read file bytes [@off, +@len) and decode them. */
static int file_read(struct mig *m, uint64_t off, uint64_t len,
                     struct vg_error *err)
{
    uint8_t *buf = malloc(MIG_REC_MAX);
    int ret = buf ? 0 : vg_error_set(err, ENOMEM, "save file buffer");

    while (ret == 0 && len) {
        size_t n = len < MIG_REC_MAX ? (size_t)len : MIG_REC_MAX;
        ssize_t got = pread(m->load->file_fd, buf, n, (off_t)off);

        if (got <= 0) {
            ret = vg_error_set(err, got < 0 ? errno : EIO,
                               "save file: reading offset %" PRIu64 ": %s", off,
                               got < 0 ? strerror(errno) : "end of file");
            break;
        }
        ret = mig_load_write(m, buf, (uint32_t)got, err);
        off += (uint64_t)got;
        len -= (uint64_t)got;
    }
    free(buf);
    return ret;
}

int mig_load_file(struct mig *m, int fd, uint64_t off, uint64_t len,
                  struct vg_error *err)
{
    struct mig_load *l = m->load;
    bool opened = l->file || l->file_fd >= 0;
    struct stat st;
    int ret = 0;

    if (opened == (fd >= 0)) {
        if (fd >= 0) {
            close(fd);
        }
        return vg_error_set(err, EINVAL,
                            opened ? "a second save file in one load"
                                   : "file extents before the save file");
    }
    if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))) {
        close(fd);
        return vg_error_set(err, EINVAL,
                            "the save file is not a regular "
                            "file");
    }
    if (fd >= 0) {
        ret = file_open(m, fd, off, len, err);
    }
    if (ret == 0 && l->file) {
        ret = sf_add(l->file, off, len, err);
        m->stats.bytes_received = sf_bytes(l->file);
        m->stats.stream_version = 2;
    } else if (ret == 0) {
        ret = file_read(m, off, len, err);
    }
    if (ret < 0 && !l->failed) {
        l->failed = true;
        mig_note_error(m, err->msg);
    }
    return ret;
}

int mig_load_write(struct mig *m, const uint8_t *data, uint32_t size,
                   struct vg_error *err)
{
    struct mig_load *l = m->load;
    int ret = mig_dec_feed(l->dec, data, size, err);

    m->stats.stale_pages = mig_dec_stale_marked(l->dec); /* failed too */
    if (ret == 0) {
        m->stats.bytes_received += size;
        m->stats.stream_version = mig_dec_version(l->dec);
        m->stats.in_place_bytes = mig_dec_bytes_in_place(l->dec);
    } else if (!l->failed) {
        l->failed = true;
        mig_note_error(m, err ? err->msg : "migration data refused");
    }
    return ret;
}

int mig_load_placed(struct mig *m, uint64_t off, uint32_t len,
                    struct vg_error *err)
{
    struct mig_load *l = m->load;
    uint8_t *vram = vgpu_vram(m->gpu);
    double t0 = mig_now_ms();
    int ret;

    if (!vram) {
        ret = vg_error_set(err, ENOTSUP,
                           "page data in place: VRAM is not mapped here");
    } else if (off > m->scfg.vram_size || len > m->scfg.vram_size - off) {
        ret = vg_error_set(err, ERANGE,
                           "page data in place: %u bytes at %#" PRIx64
                           " outside VRAM (%" PRIu64 " bytes)",
                           len, off, m->scfg.vram_size);
    } else {
        /* the pages are hashed where they are, nothing is copied */
        ret = mig_dec_feed_placed(l->dec, off, vram + off, len, err);
        m->stats.data_hash_ms += mig_now_ms() - t0;
        m->stats.stale_pages = mig_dec_stale_marked(l->dec);
    }
    if (ret == 0) {
        m->stats.bytes_received += len;
        m->stats.vram_piece_bytes += len;
        m->stats.in_place_bytes = mig_dec_bytes_in_place(l->dec);
    } else if (!l->failed) {
        l->failed = true;
        mig_note_error(m, err ? err->msg : "migration data refused");
    }
    return ret;
}

/* A post-copy: every page the stream left stale is one it fetches (the
 * source's pending pages are those written since they were sent). */
static int stale_fetched(struct mig *m, struct vg_error *err)
{
    const struct mig_dec *dec = m->load->dec;
    uint64_t p, left = mig_dec_stale_pages(dec, &p);

    for (; left && p < m->npages; p++) {
        if (!mig_dec_page_stale(dec, p)) {
            continue;
        }
        if (!mig_postcopy_fetches(m, p)) {
            return vg_error_set(err, EBADMSG,
                                "migration stream: page %" PRIu64
                                " stale at the post-copy switchover, and "
                                "the source's page server does not have it",
                                p);
        }
        left--;
    }
    return 0;
}

int mig_load_finish(struct mig *m, struct vg_error *err)
{
    struct mig_load *l = m->load;
    int ret = l->file ? sf_end(l->file, err) : mig_dec_finish(l->dec, err);

    if (ret == 0) {
        hash_unhashed(m);
        ret = vgpu_state_load(m->gpu, l->state, l->state_len, err);
    }
    if (ret == 0 && l->file) {
        vg_info("migration: save file scanned, %" PRIu64
                " stream bytes; its pages load while the VM runs",
                m->stats.bytes_received);
        /* The file is the restore's now; the checksums follow its pages. */
        ret = mig_restore_fetch(m, l->file, err);
        l->file = NULL;
    } else if (ret == 0 && l->postcopy) {
        /* The checksums follow the last page (mig_postcopy_poll). */
        ret = mig_postcopy_fetch(m, &l->pc_info, err);
        ret = ret ? ret : stale_fetched(m, err);
    } else if (ret == 0 && (m->restore || m->pc_dst)) {
        mig_take_checksums(m, l->page_hash, l->hashed, NULL);
    } else if (ret == 0) {
        /* What the checksums need of VRAM and the device is taken now,
         * before the device runs; the rest waits until the server is
         * idle (mig_idle()), after the VM has started: QEMU moves the
         * next device, and then the VM, meanwhile. */
        l->hashes_whole = mig_fill_hashes(m, l->page_hash, l->hashed);
        vgpu_state_save(m->gpu, l->loaded_state, sizeof(l->loaded_state), NULL);
        m->load_retire_due = true;
    }
    if (ret == 0 && (m->restore || m->pc_dst)) {
        /* Its checksums follow the last page: of what it delivered. */
        vgpu_state_save(m->gpu, m->pc_state, sizeof(m->pc_state), NULL);
        m->pc_hash = l->page_hash;
        m->pc_known = l->hashed;
        l->page_hash = NULL;
        l->hashed = NULL;
    }
    if (ret == 0 && !m->stats.restore_on_demand) {
        vg_info("migration: stream of %" PRIu64 " bytes loaded",
                mig_dec_bytes(l->dec));
    }
    if (!m->load_retire_due) {
        mig_load_close(m);
    }
    return ret;
}

void mig_load_retire(struct mig *m)
{
    double t0;

    if (!m->load_retire_due) {
        return; /* on every state change: nothing more */
    }
    t0 = mig_now_ms();
    if (m->load->hashes_whole) {
        mig_publish_checksums(m, m->load->page_hash, m->load->loaded_state);
    }
    mig_load_close(m);
    vg_dbg("migration: loading session retired in %.3f ms", mig_now_ms() - t0);
}

void mig_load_close(struct mig *m)
{
    m->load_retire_due = false;
    if (m->load) {
        sf_free(m->load->file);
        if (m->load->file_fd >= 0) {
            close(m->load->file_fd);
        }
        mig_dec_free(m->load->dec);
        dt_pool_free(m->load->pool);
        free(m->load->page_hash);
        free(m->load->hashed);
        free(m->load->zeroed);
        free(m->load);
        m->load = NULL;
    }
}
