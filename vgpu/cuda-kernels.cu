/*
 * cuda-kernels.cu -- the CUDA backend's kernels, compiled by nvcc into a
 * fatbin that is embedded in the binary (cuda-fatbin.S) and loaded with
 * cuModuleLoadData.  The host side is backend-cuda.c; keep the
 * parameter lists of both in step (plain C types only).
 *
 * Every result must match the CPU backend's bytes: no fused multiply-add
 * (__fmul_rn/__fadd_rn), subnormals kept (no -ftz), and the page hash is
 * XXH3-64 exactly (checked against libxxhash by test-cuda).
 */
#include <stdint.h>

typedef unsigned long long u64;
typedef unsigned int u32;

#define FULL_MASK 0xffffffffu

/* ---------------------------------------------------------------- engines */

/* AXPY: y[i] = a * x[i] + y[i], rounded like the CPU (two roundings). */
extern "C" __global__ void vg_axpy(float *y, const float *x, u64 n, float a)
{
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        y[i] = __fadd_rn(__fmul_rn(a, x[i]), y[i]);
    }
}

/* p[i] += v for i < n. */
extern "C" __global__ void vg_add(float *p, u64 n, float v)
{
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        p[i] = __fadd_rn(p[i], v);
    }
}

/* The smallest i < n with idx[i] >= rows goes to *first_bad (which the
 * host set to n beforehand). */
extern "C" __global__ void vg_scatter_check(const u32 *idx, u64 n, u64 rows,
                                            u64 *first_bad)
{
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        if (idx[i] >= rows) {
            atomicMin(first_bad, i);
        }
    }
}

/* Exact IEEE add of @v at @p, safe against other threads adding to the same
 * float (an index may repeat): the same v added k times gives the same bits
 * in any order, as the CPU's sequential loop does.  atomicAdd would flush
 * subnormals. */
__device__ static void add_exact(float *p, float v)
{
    u32 *w = (u32 *)p, seen = *w, want;

    do {
        want = seen;
        seen = atomicCAS(w, want, __float_as_uint(__fadd_rn(__uint_as_float(want), v)));
    } while (seen != want);
}

/* SCATTER_ADD over indices idx[0, n): table row idx[i] (row_floats floats)
 * gets v added to each float.  Indices were checked by vg_scatter_check. */
extern "C" __global__ void vg_scatter_add(float *table, u64 row_floats,
                                          const u32 *idx, u64 n, float v)
{
    for (u64 i = blockIdx.x; i < n; i += gridDim.x) {
        float *row = table + (u64)idx[i] * row_floats;

        for (u64 k = threadIdx.x; k < row_floats; k += blockDim.x) {
            add_exact(row + k, v);
        }
    }
}

/* ------------------------------------------------------------ page hash */

/*
 * XXH3-64 of whole pages.  The host derives the keys of a seed from the
 * 192-byte secret of XXH3_generateSecret_fromSeed(seed) (which is what
 * XXH3_64bits_withSeed uses for inputs over 240 bytes):
 *   stripe[k] = secret word k (8-byte aligned reads, k < 24);
 *   last[i]   = secret bytes 121 + 8i (the last stripe's key);
 *   merge[i]  = secret bytes 11 + 8i (mergeAccs).
 * Pages are 4 KiB to 2 MiB, multiples of the 1 KiB block: every block but
 * the last is 16 stripes then a scramble; the last has 15 stripes, then
 * the final 64 bytes are accumulated with the "last" keys.
 *
 * A warp takes a block: lane l reads 16 bytes (words 2l, 2l+1) of each
 * 512-byte half, so it holds stripes l / 4 and l / 4 + 8, words of
 * accumulator pair q = l % 4.  XXH3 adds a word's key product to its own
 * accumulator and its value to the other of its pair, so a lane's share
 * stays in its pair; lanes with the same q are summed by shuffles.
 *
 * Two kernels:
 *  - vg_hash_pages, one warp per page, one seed, optionally a selection:
 *    for all of VRAM, where the pages are enough to keep the GPU's memory
 *    busy (it reads as fast as a read-only kernel);
 *  - vg_hash_run, one thread block per page, one or two seeds: for the
 *    few pages of one read (a 2 MiB record is 32 pages of 64 KiB, which
 *    vg_hash_pages walks block after block, 0.12 ms a seed).  A block's
 *    stripes only add to the accumulators, so what a block adds (its
 *    "sum") does not depend on them: the warps compute the sums of up to
 *    CHUNK blocks at once, reading the data once for both seeds, and 8
 *    threads per seed (one per accumulator) fold them in order, with a
 *    scramble after each block but the last.
 */
struct vg_xxh3_keys {
    u64 stripe[24];
    u64 last[8];
    u64 merge[8];
};

/* The keys of up to two seeds (a kernel parameter). */
struct vg_hash_keys {
    struct vg_xxh3_keys k[2];
};

#define HASH_WARPS 8
#define CHUNK      64 /* blocks summed before the fold */
#define PER_WARP   (CHUNK / HASH_WARPS)

#define P32_1 0x9E3779B1ull
#define P32_2 0x85EBCA77ull
#define P32_3 0xC2B2AE3Dull
#define P64_1 0x9E3779B185EBCA87ull
#define P64_2 0xC2B2AE3D27D4EB4Full
#define P64_3 0x165667B19E3779F9ull
#define P64_4 0x85EBCA77C2B2AE63ull
#define P64_5 0x27D4EB2F165667C5ull

__device__ static inline u64 mul32to64(u64 x)
{
    return (u64)(u32)x * (x >> 32);
}

__device__ static inline u64 fold128(u64 a, u64 b)
{
    return (a * b) ^ __umul64hi(a, b);
}

/* Sum @v over the 8 lanes with the same lane % 4. */
__device__ static inline u64 sum_q(u64 v)
{
    v += __shfl_xor_sync(FULL_MASK, v, 4);
    v += __shfl_xor_sync(FULL_MASK, v, 8);
    v += __shfl_xor_sync(FULL_MASK, v, 16);
    return v;
}

/* A lane's share of a block's sum for one seed: accumulators 2q, 2q+1. */
struct pair {
    u64 a0, a1;
};

/* One lane's 16 bytes @d of a stripe, keyed by (k0, k1). */
__device__ static inline void take(ulonglong2 d, u64 k0, u64 k1, struct pair *c)
{
    c->a0 += mul32to64(d.x ^ k0) + d.y;
    c->a1 += mul32to64(d.y ^ k1) + d.x;
}

__device__ static inline u64 scramble(u64 a, u64 key)
{
    return ((a ^ (a >> 47)) ^ key) * P32_1;
}

/* vg_hash_pages: one warp per page, with @keys, of the pages set in
 * @select (NULL: all). */
extern "C" __global__ void vg_hash_pages(const ulonglong2 *vram, u64 npages,
                                         u32 page_size, const u64 *select,
                                         struct vg_xxh3_keys keys, u64 *hashes,
                                         u64 *zero)
{
    u64 page = (blockIdx.x * (u64)blockDim.x + threadIdx.x) / 32;
    u32 lane = threadIdx.x % 32, q = lane % 4, s0 = lane / 4;
    u32 blocks = page_size / 1024 - 1; /* full blocks before the last */
    const ulonglong2 *pg = vram + page * (page_size / 16);
    /* This lane's keys: stripes s0 and s0 + 8 of a block, and the
     * scramble; fixed for the whole page. */
    u64 ka0 = keys.stripe[s0 + 2 * q], ka1 = keys.stripe[s0 + 2 * q + 1];
    u64 kb0 = keys.stripe[s0 + 8 + 2 * q], kb1 = keys.stripe[s0 + 9 + 2 * q];
    u64 sc0 = keys.stripe[16 + 2 * q], sc1 = keys.stripe[17 + 2 * q];
    struct pair acc, c;
    ulonglong2 d0, d1;
    u64 nz = 0, m;

    if (page >= npages || (select && !((select[page / 64] >> (page % 64)) & 1))) {
        return;
    }
    acc.a0 = q == 0 ? P32_3 : q == 1 ? P64_2 : q == 2 ? P64_4 : P64_5;
    acc.a1 = q == 0 ? P64_1 : q == 1 ? P64_3 : q == 2 ? P32_2 : P32_1;
    d0 = pg[lane];
    d1 = pg[lane + 32];
    for (u32 b = 0; b < blocks; b++) {
        ulonglong2 e0 = pg[(b + 1) * 64 + lane]; /* next block, in flight */
        ulonglong2 e1 = pg[(b + 1) * 64 + lane + 32];

        c.a0 = c.a1 = 0;
        take(d0, ka0, ka1, &c);
        take(d1, kb0, kb1, &c);
        nz |= d0.x | d0.y | d1.x | d1.y;
        acc.a0 = scramble(acc.a0 + sum_q(c.a0), sc0);
        acc.a1 = scramble(acc.a1 + sum_q(c.a1), sc1);
        d0 = e0;
        d1 = e1;
    }
    /* The last block: 15 stripes (lanes 28-31 of the second half hold the
     * last 64 bytes), no scramble, then the last 64 bytes again with the
     * "last" keys. */
    c.a0 = c.a1 = 0;
    take(d0, ka0, ka1, &c);
    if (lane < 28) {
        take(d1, kb0, kb1, &c);
    }
    nz |= d0.x | d0.y | d1.x | d1.y;
    acc.a0 += sum_q(c.a0);
    acc.a1 += sum_q(c.a1);
    if (lane < 4) {
        ulonglong2 t = pg[page_size / 16 - 4 + lane];

        take(t, keys.last[2 * q], keys.last[2 * q + 1], &acc);
    }
    /* Lanes 0-3 hold the 8 accumulators: mergeAccs, then the avalanche. */
    m = fold128(acc.a0 ^ keys.merge[2 * q], acc.a1 ^ keys.merge[2 * q + 1]);
    m += __shfl_xor_sync(FULL_MASK, m, 1);
    m += __shfl_xor_sync(FULL_MASK, m, 2);
    for (u32 off = 16; off > 0; off /= 2) {
        nz |= __shfl_xor_sync(FULL_MASK, nz, off);
    }
    if (lane == 0) {
        u64 h = (u64)page_size * P64_1 + m;

        h ^= h >> 37;
        h *= 0x165667919E3779F9ull;
        h ^= h >> 32;
        hashes[page] = h;
        if (!nz && zero) {
            atomicOr(&zero[page / 64], 1ull << (page % 64));
        }
    }
}

/* XXH3's initial accumulators. */
__device__ static inline u64 acc_init(u32 j)
{
    const u64 init[8] = {P32_3, P64_1, P64_2, P64_3,
                         P64_4, P32_2, P64_5, P32_1};

    return init[j];
}

/* Sums of this warp's blocks of the chunk at block @first into @sums. */
__device__ static void chunk_sums(const ulonglong2 *pg, u32 first, u32 blocks,
                                  const struct vg_hash_keys *keys, u32 nseeds,
                                  u64 (*sums)[CHUNK][8], u64 *nz)
{
    u32 warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    u32 q = lane % 4, s0 = lane / 4;
    ulonglong2 d[PER_WARP][2];

#pragma unroll
    for (u32 i = 0; i < PER_WARP; i++) {
        u32 b = first + warp + i * HASH_WARPS;

        if (b < blocks) {
            d[i][0] = pg[b * 64 + lane];
            d[i][1] = pg[b * 64 + lane + 32];
        }
    }
#pragma unroll
    for (u32 i = 0; i < PER_WARP; i++) {
        u32 local = warp + i * HASH_WARPS, b = first + local;
        /* The last block's stripe 15 is the second half's lanes 28-31. */
        bool second = b + 1 < blocks || lane < 28;

        if (b >= blocks) {
            break; /* the same for the whole warp */
        }
        *nz |= d[i][0].x | d[i][0].y | d[i][1].x | d[i][1].y;
        for (u32 s = 0; s < nseeds; s++) {
            const u64 *k = keys->k[s].stripe;
            struct pair c = {0, 0};

            take(d[i][0], k[s0 + 2 * q], k[s0 + 2 * q + 1], &c);
            if (second) {
                take(d[i][1], k[s0 + 8 + 2 * q], k[s0 + 9 + 2 * q], &c);
            }
            c.a0 = sum_q(c.a0);
            c.a1 = sum_q(c.a1);
            if (lane < 4) {
                sums[s][local][2 * q] = c.a0;
                sums[s][local][2 * q + 1] = c.a1;
            }
        }
    }
}

/* Thread j of seed s: fold the sums of the chunk at block @first into
 * accumulator j, a scramble after every block but the page's last. */
__device__ static u64 chunk_fold(u64 acc, u32 j, u64 sc,
                                 const u64 (*sums)[8], u32 first,
                                 u32 blocks)
{
    for (u32 local = 0; local < CHUNK && first + local < blocks; local++) {
        acc += sums[local][j];
        if (first + local + 1 < blocks) {
            acc = scramble(acc, sc);
        }
    }
    return acc;
}

/* Thread j (< 8) of seed s, holding accumulator @acc after the last
 * block: the last 64 bytes with the "last" keys, mergeAccs and the
 * avalanche; lanes 8s hold the result.  Every lane of warp 0 calls. */
__device__ static u64 finish(u64 acc, u32 j, const struct vg_xxh3_keys *k,
                             const u64 *tail, u32 page_size)
{
    u64 next, m = 0, h;

    if (k) {
        acc += mul32to64(tail[j] ^ k->last[j]) + tail[j ^ 1];
    }
    next = __shfl_down_sync(FULL_MASK, acc, 1); /* accumulator j + 1 */
    if (k && j % 2 == 0) {
        m = fold128(acc ^ k->merge[j], next ^ k->merge[j + 1]);
    }
    m += __shfl_down_sync(FULL_MASK, m, 2);
    m += __shfl_down_sync(FULL_MASK, m, 4);
    h = (u64)page_size * P64_1 + m;
    h ^= h >> 37;
    h *= 0x165667919E3779F9ull;
    h ^= h >> 32;
    return h;
}

/* vg_hash_run: one block of HASH_WARPS warps per page, with the first
 * @nseeds of @keys: seed 0's hashes go to @hashes0, seed 1's to @hashes1. */
extern "C" __global__ void vg_hash_run(const ulonglong2 *base, u64 npages,
                                       u32 page_size, struct vg_hash_keys keys,
                                       u32 nseeds, u64 *hashes0, u64 *hashes1,
                                       u64 *zero)
{
    __shared__ u64 sums[2][CHUNK][8];
    __shared__ u64 page_nz;
    u64 page = blockIdx.x, nz = 0, acc = 0;
    u32 t = threadIdx.x, blocks = page_size / 1024;
    u32 s = t / 8, j = t % 8;
    bool folds = t < 8 * nseeds;
    const ulonglong2 *pg = base + page * (page_size / 16);
    const u64 *tail = (const u64 *)pg + page_size / 8 - 8;
    u64 h;

    if (page >= npages) {
        return; /* the whole block */
    }
    if (t == 0) {
        page_nz = 0;
    }
    if (folds) {
        acc = acc_init(j);
    }
    for (u32 first = 0; first < blocks; first += CHUNK) {
        __syncthreads(); /* the previous chunk's sums are folded */
        chunk_sums(pg, first, blocks, &keys, nseeds, sums, &nz);
        __syncthreads();
        if (folds) {
            acc = chunk_fold(acc, j, keys.k[s].stripe[16 + j], sums[s], first,
                             blocks);
        }
    }
    for (u32 off = 16; off > 0; off /= 2) {
        nz |= __shfl_xor_sync(FULL_MASK, nz, off);
    }
    if (t % 32 == 0 && nz) {
        atomicOr(&page_nz, 1ull);
    }
    if (t < 32) {
        h = finish(acc, j, folds ? &keys.k[s] : NULL, tail, page_size);
        if (folds && j == 0) {
            (s ? hashes1 : hashes0)[page] = h;
        }
    }
    __syncthreads();
    if (t == 0 && !page_nz && zero) {
        atomicOr(&zero[page / 64], 1ull << (page % 64));
    }
}

/* Read-bandwidth reference for the benchmark: reads n 16-byte words and
 * writes nothing unless their OR is a value no test data has. */
extern "C" __global__ void vg_read_only(const ulonglong2 *p, u64 n, u64 *sink)
{
    u64 acc = 0;

    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        ulonglong2 v = p[i];

        acc |= v.x ^ v.y;
    }
    if (acc == 0x5a5a5a5a5a5a5a5aull) {
        *sink = acc;
    }
}
