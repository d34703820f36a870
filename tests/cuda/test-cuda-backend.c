/*
 * test-cuda-backend -- the CUDA backend against the CPU reference, on a GPU.
 *
 * Page hashes computed by the GPU kernel equal libxxhash's
 * XXH3_64bits_withSeed of the same bytes (several page sizes, seeds and
 * selections; zero pages flagged).  Every engine run on the GPU leaves
 * VRAM, guest RAM and the job cursor exactly as the CPU engines do on the
 * same data, sliced with the same budgets: FILL, COPY, DMA both ways,
 * AXPY (subnormals, signed zeros, x == y), SCATTER_ADD with repeated
 * indices and with an index out of range.  Reads see every write, also
 * after a read-ahead, and hundreds of thousands of small writes (a guest's
 * through the trapped BAR2) land in order beside one.  Reads into and writes
 * from registered host memory (a shared memfd mapping, like the migration's
 * area) copy straight, are counted, and move the same bytes.  A hashed read
 * gives the hashes and zero bits of the very bytes it copied, also from a read
 * ahead that a later write did not reach; a hashed write gives the hashes of
 * the pages as they landed.  Skipped (TAP "1..0 # SKIP") without a GPU.
 */
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include "cuda-test.h"
#include "vgpu/cmd.h"
#include "vgpu/engines.h"

#define VRAM  (16u << 20)
#define GUEST (4u << 20)
#define IOVA  0x200000ull

struct twin {
    struct vgpu_backend *be; /* the GPU */
    uint8_t *ref;            /* CPU reference VRAM */
    uint8_t *guest_cpu, *guest_gpu;
    struct vgpu_host host_cpu, host_gpu;
};

static void *dma_ptr(void *opaque, uint64_t iova, uint64_t len, bool write)
{
    uint8_t *guest = opaque;

    if (iova < IOVA || iova - IOVA > GUEST || len > GUEST - (iova - IOVA)) {
        return NULL;
    }
    return guest + (iova - IOVA);
}

static void no_irq(void *opaque, unsigned vector)
{
}

/* Random float32 values, none NaN or infinite and none large enough to
 * overflow in the tests' arithmetic (exponents 0 to 199, subnormals
 * included): the CPU and a GPU agree on every finite result, not on NaN
 * payloads. */
static void fill_random(GRand *r, uint8_t *p, size_t n)
{
    for (size_t i = 0; i + 4 <= n; i += 4) {
        uint32_t v = g_rand_int(r), exp = (v >> 23) & 0xff;

        v = (v & 0x807fffffu) | (exp % 200) << 23;
        memcpy(p + i, &v, 4);
    }
}

static void twin_init(struct twin *t, uint32_t seed)
{
    GRand *r = g_rand_new_with_seed(seed);
    struct vg_error err = {0};

    g_assert_cmpint(vgpu_backend_open(ct_backend_name(), VRAM, &t->be, &err),
                    ==, 0);
    t->ref = g_malloc(VRAM);
    t->guest_cpu = g_malloc(GUEST);
    t->guest_gpu = g_malloc(GUEST);
    fill_random(r, t->ref, VRAM);
    memset(t->ref + (3u << 20), 0, 1u << 20); /* some zero pages */
    fill_random(r, t->guest_cpu, GUEST);
    memcpy(t->guest_gpu, t->guest_cpu, GUEST);
    g_assert_cmpint(t->be->ops->write(t->be, 0, t->ref, VRAM, &err), ==, 0);
    t->host_cpu = (struct vgpu_host){t->guest_cpu, dma_ptr, no_irq};
    t->host_gpu = (struct vgpu_host){t->guest_gpu, dma_ptr, no_irq};
    g_rand_free(r);
}

static void twin_fini(struct twin *t)
{
    vgpu_backend_close(t->be);
    g_free(t->ref);
    g_free(t->guest_cpu);
    g_free(t->guest_gpu);
}

/* A shared memfd mapping of @size bytes, like the migration's area. */
static uint8_t *shared_area(size_t size)
{
    int fd = memfd_create("test-area", MFD_CLOEXEC);
    uint8_t *area;

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, size), ==, 0);
    area = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    g_assert_true(area != MAP_FAILED);
    close(fd); /* the mapping stays */
    return area;
}

/* VRAM on the GPU equals the reference, byte for byte. */
static void assert_same_vram(struct twin *t, const char *what)
{
    g_autofree uint8_t *got = g_malloc(VRAM);
    struct vg_error err = {0};

    g_assert_cmpint(t->be->ops->read(t->be, 0, got, VRAM, &err), ==, 0);
    for (uint64_t off = 0; off < VRAM; off += 4096) {
        if (memcmp(got + off, t->ref + off, 4096) != 0) {
            g_error("%s: VRAM differs from the CPU reference in [%#llx, +4096)",
                    what, (unsigned long long)off);
        }
    }
    g_assert_cmpmem(t->guest_gpu, GUEST, t->guest_cpu, GUEST);
}

struct wlog {
    uint64_t writes, opaque;
};

static void wrote(void *opaque, uint64_t off, uint64_t len,
                  enum vgpu_write_kind kind)
{
    struct wlog *w = opaque;

    w->writes++;
    w->opaque += kind == VGPU_WRITE_OPAQUE;
}

/* Run @c to its end on both sides with @budget per slice; the statuses,
 * error codes and cursors must agree at every slice. */
static void run_both(struct twin *t, const struct vgpu_cmd *c, uint64_t budget,
                     enum vgpu_error_code want)
{
    struct wlog lc = {0}, lg = {0};
    struct vgpu_engine_env cpu = {t->ref, VRAM, &t->host_cpu, wrote, &lc, NULL};
    struct vgpu_engine_env gpu = {NULL, VRAM, &t->host_gpu, wrote, &lg, t->be};
    enum vgpu_error_code code_c = VGPU_ERR_NONE, code_g = VGPU_ERR_NONE;
    enum vgpu_exec_status sc, sg;
    struct vgpu_job jc, jg;
    enum vgpu_error_code vcode;

    g_assert_true(vgpu_cmd_validate(c, VRAM, &vcode));
    vgpu_job_init(&jc, c, 7);
    vgpu_job_init(&jg, c, 7);
    do {
        uint64_t bc = budget, bg = budget;

        sc = vgpu_engine_run(&cpu, &jc, &bc, &code_c);
        sg = vgpu_engine_run(&gpu, &jg, &bg, &code_g);
        g_assert_cmpint(sg, ==, sc);
        g_assert_cmpuint(jg.done, ==, jc.done);
        g_assert_cmpuint(jg.row_done, ==, jc.row_done);
    } while (sc == VGPU_EXEC_MORE);
    g_assert_cmpint(code_g, ==, code_c);
    g_assert_cmpint(code_g, ==, want);
    if (c->opcode == VGPU_OP_DMA_FROM_VRAM) {
        g_assert_cmpuint(lg.writes, ==, 0);
    } else {
        g_assert_cmpuint(lg.writes, >, 0);
    }
    assert_same_vram(t, vgpu_op_name(c->opcode));
}

static uint32_t fbits(float f)
{
    uint32_t u;

    memcpy(&u, &f, 4);
    return u;
}

static void test_engines_simple(void)
{
    static const uint64_t budgets[] = {4096, 100000, 1u << 20, 64u << 20};
    struct twin t;

    twin_init(&t, 1);
    for (unsigned i = 0; i < G_N_ELEMENTS(budgets); i++) {
        uint64_t b = budgets[i];
        struct vgpu_cmd fill = vgpu_cmd_make(VGPU_OP_FILL, 0x10004, 0x2ffff8,
                                             0xdeadbe00 | i, 0, 0, 0);
        struct vgpu_cmd copy =
            vgpu_cmd_make(VGPU_OP_COPY, 0x800001, 0x10003, 0x1abcde, 0, 0, 0);
        struct vgpu_cmd to = vgpu_cmd_make(VGPU_OP_DMA_TO_VRAM, 0xa00000 + i,
                                           IOVA + 5, GUEST - 5, 0, 0, 0);
        struct vgpu_cmd from = vgpu_cmd_make(VGPU_OP_DMA_FROM_VRAM, IOVA + 3,
                                             0x123457, GUEST - 3, 0, 0, 0);

        run_both(&t, &fill, b, VGPU_ERR_NONE);
        run_both(&t, &copy, b, VGPU_ERR_NONE);
        run_both(&t, &to, b, VGPU_ERR_NONE);
        run_both(&t, &from, b, VGPU_ERR_NONE);
    }
    twin_fini(&t);
}

/* AXPY on floats that include subnormals, signed zeros, infinities and
 * values whose a*x+y differs between one rounding (FMA) and two. */
static void test_engines_axpy(void)
{
    static const float special[] = {
        1e-45f,  -1e-45f, 1.17e-38f, -0.0f, 0.0f, 1e30f, 1.0f + 1.0f / 8388608,
        1.0f / 3};
    struct twin t;

    twin_init(&t, 2);
    for (unsigned i = 0; i < 4096; i++) {
        float v = special[i % G_N_ELEMENTS(special)] * (float)(i % 7 + 1);
        memcpy(t.ref + 0x400000 + 4 * i, &v, 4);
    }
    {
        struct vg_error err = {0};
        g_assert_cmpint(
            t.be->ops->write(t.be, 0x400000, t.ref + 0x400000, 4 * 4096, &err),
            ==, 0);
    }
    for (unsigned i = 0; i < 3; i++) {
        float a = i == 0 ? 1.0f / 3 : i == 1 ? -2.5e-39f : 3.0f;
        struct vgpu_cmd disjoint = vgpu_cmd_make(
            VGPU_OP_AXPY, 0x400000, 0x600000 + 4 * i, 0x80000, fbits(a), 0, 0);
        struct vgpu_cmd same = vgpu_cmd_make(VGPU_OP_AXPY, 0x400000, 0x400000,
                                             0x40000, fbits(a), 0, 0);

        run_both(&t, &disjoint, i == 2 ? 64u << 20 : 65536, VGPU_ERR_NONE);
        run_both(&t, &same, 1u << 20, VGPU_ERR_NONE);
    }
    twin_fini(&t);
}

/* Indices (LE u32) at VRAM @idx: @n rows < @rows with repeats, and, if
 * @bad_at < n, one out-of-range index there. */
static void put_indices(struct twin *t, uint64_t idx, uint32_t n, uint32_t rows,
                        uint32_t bad_at)
{
    struct vg_error err = {0};

    for (uint32_t i = 0; i < n; i++) {
        uint32_t row = i == bad_at ? rows + i : (i * 7919u) % (rows / 3);
        memcpy(t->ref + idx + 4 * i, &row, 4);
    }
    g_assert_cmpint(t->be->ops->write(t->be, idx, t->ref + idx, 4 * n, &err),
                    ==, 0);
}

static void test_engines_scatter(void)
{
    struct twin t;

    twin_init(&t, 3);
    put_indices(&t, 0xe00000, 3000, 1024, 3000);
    put_indices(&t, 0xf00000, 500, 1024, 321);
    for (unsigned i = 0; i < 3; i++) {
        uint64_t budget = i == 0 ? 1000 : i == 1 ? 300000 : 64u << 20;
        struct vgpu_cmd ok =
            vgpu_cmd_make(VGPU_OP_SCATTER_ADD, 0x100000, 1024, 1024, 0xe00000,
                          3000, fbits(i == 1 ? 1e-44f : 0.37f));
        struct vgpu_cmd bad = vgpu_cmd_make(VGPU_OP_SCATTER_ADD, 0x100000, 1024,
                                            1024, 0xf00000, 500, fbits(-2.0f));

        run_both(&t, &ok, budget, VGPU_ERR_NONE);
        run_both(&t, &bad, budget, VGPU_ERR_INDEX_RANGE);
    }
    twin_fini(&t);
}

/* GPU page hashes equal XXH3_64bits_withSeed on the same bytes. */
static void test_hash(void)
{
    static const uint32_t sizes[] = {4096, 65536, 2u << 20};
    struct twin t;

    twin_init(&t, 4);
    for (unsigned s = 0; s < G_N_ELEMENTS(sizes); s++) {
        uint32_t ps = sizes[s];
        uint64_t pages = VRAM / ps, words = (pages + 63) / 64;
        g_autofree uint64_t *hashes = g_malloc(pages * 8);
        g_autofree uint64_t *zero = g_malloc0(words * 8);
        g_autofree uint64_t *select = g_malloc0(words * 8);
        uint64_t seeds[] = {0, 0x9e3779b97f4a7c15ull, g_test_rand_int()};

        for (uint64_t p = 0; p < pages; p += 3) {
            select[p / 64] |= 1ull << (p % 64);
        }
        for (unsigned k = 0; k < G_N_ELEMENTS(seeds); k++) {
            for (unsigned sel = 0; sel < 2; sel++) {
                struct vgpu_hash_req req = {
                    ps, pages, sel ? select : NULL, seeds[k], hashes, zero};
                struct vg_error err = {0};

                memset(hashes, 0xa5, pages * 8);
                g_assert_cmpint(t.be->ops->hash(t.be, &req, &err), ==, 0);
                for (uint64_t p = 0; p < pages; p++) {
                    const uint8_t *d = t.ref + p * ps;
                    bool picked = !sel || (select[p / 64] >> (p % 64)) & 1;
                    bool z = d[0] == 0 && memcmp(d, d + 1, ps - 1) == 0;

                    if (!picked) {
                        g_assert_cmphex(hashes[p], ==, 0xa5a5a5a5a5a5a5a5ull);
                        continue;
                    }
                    g_assert_cmphex(hashes[p], ==,
                                    XXH3_64bits_withSeed(d, ps, seeds[k]));
                    g_assert_cmpint(!!(zero[p / 64] & (1ull << (p % 64))), ==,
                                    z);
                }
            }
        }
    }
    twin_fini(&t);
}

/* A read-ahead copy never hides a later write. */
static void test_prefetch(void)
{
    struct vg_error err = {0};
    uint8_t got[8192];
    struct twin t;

    twin_init(&t, 5);
    t.be->ops->prefetch(t.be, 0x100000, 1u << 20);
    g_assert_cmpint(
        t.be->ops->fill(t.be, 0x100000 + 4096, 4096, 0x01020304, &err), ==, 0);
    g_assert_cmpint(t.be->ops->read(t.be, 0x100000, got, sizeof(got), &err), ==,
                    0);
    g_assert_cmpmem(got, 4096, t.ref + 0x100000, 4096);
    for (unsigned i = 4096; i < 8192; i += 4) {
        g_assert_cmphex(got[i], ==, 0x04);
    }
    t.be->ops->prefetch(t.be, 0x300000, 65536);
    g_assert_cmpint(t.be->ops->read(t.be, 0x300000, got, 4096, &err), ==, 0);
    g_assert_cmpmem(got, 4096, t.ref + 0x300000, 4096);
    twin_fini(&t);
}

/* Copies to and from registered host memory go straight (and are
 * counted), others are staged, every one moves the right bytes, and a
 * read-ahead is not started for a reader into registered memory. */
static void test_host_register(void)
{
    const size_t size = 8u << 20, half = size / 2;
    struct vg_error err = {0};
    struct twin t;
    uint8_t *area, *plain = g_malloc(half);
    GRand *r = g_rand_new_with_seed(3);

    area = shared_area(size);
    twin_init(&t, 11);
    g_assert_cmpint(t.be->ops->host_register(t.be, area, size, &err), ==, 0);

    /* VRAM -> area */
    g_assert_cmpint(t.be->ops->read(t.be, 1u << 20, area, 2u << 20, &err), ==,
                    0);
    g_assert_cmpmem(area, 2u << 20, t.ref + (1u << 20), 2u << 20);
    g_assert_cmpuint(t.be->direct_bytes, ==, 2u << 20);
    /* area -> VRAM; the read-ahead asked for meanwhile is not started */
    t.be->ops->prefetch(t.be, 5u << 20, 2u << 20);
    fill_random(r, area + half, half);
    memcpy(t.ref + (5u << 20), area + half, half);
    g_assert_cmpint(t.be->ops->write(t.be, 5u << 20, area + half, half, &err),
                    ==, 0);
    g_assert_cmpuint(t.be->direct_bytes, ==, (2u << 20) + half);
    /* Not registered: staged, and it sees the write. */
    g_assert_cmpint(t.be->ops->read(t.be, 5u << 20, plain, half, &err), ==, 0);
    g_assert_cmpmem(plain, half, t.ref + (5u << 20), half);
    g_assert_cmpuint(t.be->direct_bytes, ==, (2u << 20) + half);

    t.be->ops->host_unregister(t.be, area);
    g_assert_cmpint(t.be->ops->read(t.be, 3u << 20, area, half, &err), ==, 0);
    g_assert_cmpmem(area, half, t.ref + (3u << 20), half);
    g_assert_cmpuint(t.be->direct_bytes, ==, (2u << 20) + half);
    twin_fini(&t);
    g_rand_free(r);
    munmap(area, size);
    g_free(plain);
}

/* A read ahead into registered memory: the read of the same range into
 * the same place only waits for it (counted as direct), a read of
 * another range over it lands after it, settle waits for one not read;
 * a write_async lands once settled, and a read after it sees it. */
static void test_read_ahead_write_async(void)
{
    const size_t size = 8u << 20, mib = 1u << 20;
    struct vg_error err = {0};
    struct twin t;
    uint8_t *area;
    GRand *r = g_rand_new_with_seed(5);

    area = shared_area(size);
    twin_init(&t, 13);
    g_assert_cmpint(t.be->ops->host_register(t.be, area, size, &err), ==, 0);

    t.be->ops->read_ahead(t.be, 2 * mib, area, 2 * mib, NULL);
    g_assert_cmpint(t.be->ops->read(t.be, 2 * mib, area, 2 * mib, &err), ==, 0);
    g_assert_cmpmem(area, 2 * mib, t.ref + 2 * mib, 2 * mib);
    g_assert_cmpuint(t.be->direct_bytes, ==, 2 * mib);

    /* Another range, overlapping in the area: the read's bytes win. */
    t.be->ops->read_ahead(t.be, 4 * mib, area + mib, 2 * mib, NULL);
    g_assert_cmpint(t.be->ops->read(t.be, 6 * mib, area, 2 * mib, &err), ==, 0);
    g_assert_cmpmem(area, 2 * mib, t.ref + 6 * mib, 2 * mib);
    g_assert_cmpmem(area + 2 * mib, mib, t.ref + 5 * mib, mib);

    t.be->ops->read_ahead(t.be, 0, area + 4 * mib, mib, NULL);
    g_assert_cmpint(t.be->ops->settle(t.be, &err), ==, 0);
    g_assert_cmpmem(area + 4 * mib, mib, t.ref, mib);
    g_assert_cmpint(t.be->ops->settle(t.be, &err), ==, 0); /* none now */

    fill_random(r, area + 4 * mib, 3 * mib);
    memcpy(t.ref + mib, area + 4 * mib, 3 * mib);
    g_assert_cmpint(
        t.be->ops->write_async(t.be, mib, area + 4 * mib, 3 * mib, &err), ==,
        0);
    g_assert_cmpint(t.be->ops->settle(t.be, &err), ==, 0);
    memset(area + 4 * mib, 0xa5, 3 * mib); /* free again: VRAM keeps it */
    g_assert_cmpint(t.be->ops->write_async(t.be, 7 * mib, area, mib, &err), ==,
                    0);
    memcpy(t.ref + 7 * mib, area, mib);
    g_assert_cmpint(t.be->ops->read(t.be, 0, area, 8 * mib, &err), ==, 0);
    g_assert_cmpmem(area, 8 * mib, t.ref, 8 * mib);

    t.be->ops->host_unregister(t.be, area);
    twin_fini(&t);
    g_rand_free(r);
    munmap(area, size);
}

/* @n small writes (8 to 64 bytes, many over each other) at random places
 * of VRAM outside [@skip, +@skip_len), made on the GPU and in the
 * reference alike. */
static void small_writes(struct twin *t, GRand *r, unsigned n, uint64_t skip,
                         uint64_t skip_len)
{
    struct vg_error err = {0};
    uint8_t buf[64];

    for (unsigned i = 0; i < n; i++) {
        uint32_t len = (uint32_t)g_rand_int_range(r, 8, 65);
        uint64_t off = (uint64_t)g_rand_int_range(r, 0, VRAM - len);

        if (off < skip + skip_len && skip < off + len) {
            continue;
        }
        for (uint32_t b = 0; b < len; b++) {
            buf[b] = (uint8_t)g_rand_int(r);
        }
        memcpy(t->ref + off, buf, len);
        g_assert_cmpint(t->be->ops->write(t->be, off, buf, len, &err), ==, 0);
    }
}

/*
 * A guest's small writes through the trapped BAR2, as a pre-copy reads
 * ahead: 300000 writes fill the stage's halves several times over (each
 * reused once its copies are done) and land in order; a read ahead of a
 * range they do not touch stays in flight and reads its bytes; one they
 * touch gives way, so the read sees the write.
 */
static void test_small_writes(void)
{
    const size_t size = 4u << 20, mib = 1u << 20;
    struct vg_error err = {0};
    struct twin t;
    uint8_t *area, one[16];
    GRand *r = g_rand_new_with_seed(17);
    gint64 t0;

    area = shared_area(size);
    twin_init(&t, 19);
    g_assert_cmpint(t.be->ops->host_register(t.be, area, size, &err), ==, 0);

    t.be->ops->read_ahead(t.be, 2 * mib, area, 2 * mib, NULL);
    t0 = g_get_monotonic_time();
    small_writes(&t, r, 300000, 2 * mib, 2 * mib);
    g_test_message("300000 small writes in %.0f ms",
                   (double)(g_get_monotonic_time() - t0) / 1000.0);
    g_assert_cmpint(t.be->ops->read(t.be, 2 * mib, area, 2 * mib, &err), ==, 0);
    g_assert_cmpmem(area, 2 * mib, t.ref + 2 * mib, 2 * mib);

    t.be->ops->read_ahead(t.be, 2 * mib, area, 2 * mib, NULL);
    memset(one, 0x5a, sizeof(one));
    memcpy(t.ref + 3 * mib, one, sizeof(one));
    g_assert_cmpint(t.be->ops->write(t.be, 3 * mib, one, sizeof(one), &err), ==,
                    0);
    g_assert_cmpint(t.be->ops->read(t.be, 2 * mib, area, 2 * mib, &err), ==, 0);
    g_assert_cmpmem(area, 2 * mib, t.ref + 2 * mib, 2 * mib);

    t.be->ops->host_unregister(t.be, area);
    assert_same_vram(&t, "after the small writes");
    twin_fini(&t);
    g_rand_free(r);
    munmap(area, size);
}

/* Hashes and zero bits of the @len bytes at @got, read from @ref. */
static void check_read_hashes(const uint8_t *got, const uint8_t *ref,
                              uint64_t len, const struct vgpu_copy_hashes *h)
{
    uint32_t ps = h->page_size;

    g_assert_cmpmem(got, len, ref, len);
    for (uint64_t i = 0; i < len / ps; i++) {
        const uint8_t *d = got + i * ps;
        bool z = d[0] == 0 && memcmp(d, d + 1, ps - 1) == 0;

        for (uint32_t k = 0; k < h->nseeds; k++) {
            g_assert_cmphex(h->hashes[k][i], ==,
                            XXH3_64bits_withSeed(d, ps, h->seeds[k]));
        }
        g_assert_cmpint(!!(h->zero[i / 64] & (1ull << (i % 64))), ==, z);
    }
}

/* Hashed reads into registered and plain memory, at three page sizes,
 * one and two seeds; from a read ahead (counted as direct) and from a
 * read ahead with other seeds; a write after a hashed read ahead does
 * not reach the bytes or hashes it took. */
static void test_read_hashed(void)
{
    static const uint32_t sizes[] = {4096, 65536, 2u << 20};
    const size_t size = 8u << 20, mib = 1u << 20;
    struct vg_error err = {0};
    struct twin t;
    uint8_t *area, *plain = g_malloc(4 * mib);
    g_autofree uint64_t *h0 = g_malloc(1024 * 8), *h1 = g_malloc(1024 * 8);
    uint64_t zero[16];

    area = shared_area(size);
    twin_init(&t, 17);
    g_assert_cmpint(t.be->ops->host_register(t.be, area, size, &err), ==, 0);
    for (unsigned s = 0; s < G_N_ELEMENTS(sizes); s++) {
        struct vgpu_copy_hashes h = {
            sizes[s], 2, {0, g_test_rand_int()}, {h0, h1}, zero};
        struct vgpu_copy_hashes other = h;
        uint64_t direct = t.be->direct_bytes;

        g_assert_cmpint(
            t.be->ops->read_hashed(t.be, 2 * mib, area, 4 * mib, &h, &err), ==,
            0);
        check_read_hashes(area, t.ref + 2 * mib, 4 * mib, &h);
        g_assert_cmpint(
            t.be->ops->read_hashed(t.be, 2 * mib, plain, 4 * mib, &h, &err), ==,
            0);
        check_read_hashes(plain, t.ref + 2 * mib, 4 * mib, &h);

        h.nseeds = 1;
        t.be->ops->read_ahead(t.be, 0, area + 4 * mib, 4 * mib, &h);
        g_assert_cmpint(
            t.be->ops->read_hashed(t.be, 0, area + 4 * mib, 4 * mib, &h, &err),
            ==, 0);
        check_read_hashes(area + 4 * mib, t.ref, 4 * mib, &h);
        g_assert_cmpuint(t.be->direct_bytes, ==, direct + 8 * mib);

        other.seeds[1] ^= 1;
        t.be->ops->read_ahead(t.be, 0, area, 4 * mib, &h);
        g_assert_cmpint(
            t.be->ops->read_hashed(t.be, 0, area, 4 * mib, &other, &err), ==,
            0);
        check_read_hashes(area, t.ref, 4 * mib, &other);
    }
    /* The write lands after the read ahead took its bytes and hashes. */
    {
        struct vgpu_copy_hashes h = {65536, 2, {0, 7}, {h0, h1}, zero};

        t.be->ops->read_ahead(t.be, 4 * mib, area, 2 * mib, &h);
        g_assert_cmpint(
            t.be->ops->fill(t.be, 4 * mib + 65536, 65536, 0x01020304, &err), ==,
            0);
        g_assert_cmpint(
            t.be->ops->read_hashed(t.be, 4 * mib, area, 2 * mib, &h, &err), ==,
            0);
        check_read_hashes(area, t.ref + 4 * mib, 2 * mib, &h);
    }
    t.be->ops->host_unregister(t.be, area);
    twin_fini(&t);
    munmap(area, size);
    g_free(plain);
}

/* Hashed writes from registered and plain memory: VRAM holds the bytes,
 * and the hashes are theirs. */
static void test_write_hashed(void)
{
    const size_t size = 4u << 20, mib = 1u << 20;
    struct vg_error err = {0};
    struct twin t;
    uint8_t *area, *plain = g_malloc(size), *back = g_malloc(size);
    g_autofree uint64_t *h0 = g_malloc(64 * 8);
    struct vgpu_copy_hashes h = {65536, 1, {0, 0}, {h0, NULL}, NULL};
    GRand *r = g_rand_new_with_seed(19);

    area = shared_area(size);
    twin_init(&t, 23);
    g_assert_cmpint(t.be->ops->host_register(t.be, area, size, &err), ==, 0);
    fill_random(r, area, size);
    memset(area + mib, 0, 65536); /* a zero page */
    fill_random(r, plain, size);
    for (unsigned k = 0; k < 2; k++) {
        uint8_t *src = k ? plain : area;
        uint64_t off = k ? 8 * mib : 2 * mib;

        memset(h0, 0xa5, 64 * 8);
        g_assert_cmpint(t.be->ops->write_hashed(t.be, off, src, size, &h, &err),
                        ==, 0);
        g_assert_cmpint(t.be->ops->read(t.be, off, back, size, &err), ==, 0);
        g_assert_cmpmem(back, size, src, size);
        for (unsigned i = 0; i < size / 65536; i++) {
            g_assert_cmphex(h0[i], ==,
                            XXH3_64bits_withSeed(src + i * 65536, 65536, 0));
        }
    }
    t.be->ops->host_unregister(t.be, area);
    twin_fini(&t);
    g_rand_free(r);
    munmap(area, size);
    g_free(plain);
    g_free(back);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    ct_require_gpu();
    g_test_add_func("/cuda/hash/xxh3", test_hash);
    g_test_add_func("/cuda/engines/fill-copy-dma", test_engines_simple);
    g_test_add_func("/cuda/engines/axpy", test_engines_axpy);
    g_test_add_func("/cuda/engines/scatter-add", test_engines_scatter);
    g_test_add_func("/cuda/prefetch", test_prefetch);
    g_test_add_func("/cuda/host-register", test_host_register);
    g_test_add_func("/cuda/read-ahead-write-async",
                    test_read_ahead_write_async);
    g_test_add_func("/cuda/small-writes", test_small_writes);
    g_test_add_func("/cuda/read-hashed", test_read_hashed);
    g_test_add_func("/cuda/write-hashed", test_write_hashed);
    return g_test_run();
}
