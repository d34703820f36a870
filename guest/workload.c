#include "workload.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

#define PAGE VGG_PAGE_SIZE
/* Model pages uploaded per DMA staging buffer. */
#define UPLOAD_BATCH 16u
/* Inference: input pages uploaded and act rows read back per step. */
#define INPUT_PER_STEP 4u
#define READBACK_ROWS  2u
/* Training: weights chunks (one AXPY each), scratch slices. */
#define TRAIN_CHUNKS   8u
#define SCRATCH_SLICES 8u
/* Sparse: SCATTER_ADD indices per step; index pages. */
#define SPARSE_PER_STEP 64u
#define IDX_TABLE_PAGES 4u
/* cpu-writes: stamps moved per step, a whole page every so many steps. */
#define CPU_STAMPS_PER_STEP 16u
#define CPU_FULL_EVERY      8u

static const char *const profile_names[VGG_P_COUNT] = {
    "idle", "inference", "training", "sparse", "cpu-writes"};

bool vgg_profiles_parse(const char *text, unsigned *mask)
{
    char *copy = strdup(text), *save = NULL, *tok;
    bool ok = copy != NULL;

    *mask = 0;
    for (tok = ok ? strtok_r(copy, ",", &save) : NULL; ok && tok;
         tok = strtok_r(NULL, ",", &save)) {
        unsigned p;

        if (!strcmp(tok, "all")) {
            *mask |= ((1u << VGG_P_COUNT) - 1) & ~(1u << VGG_P_IDLE);
            continue;
        }
        for (p = 0; p < VGG_P_COUNT && strcmp(tok, profile_names[p]); p++) {
        }
        ok = p < VGG_P_COUNT;
        *mask |= ok ? 1u << p : 0;
    }
    free(copy);
    return ok && *mask != 0;
}

void vgg_profiles_format(unsigned mask, char *buf, size_t len)
{
    size_t used = 0;

    buf[0] = '\0';
    for (unsigned p = 0; p < VGG_P_COUNT; p++) {
        if ((mask & (1u << p)) && used < len) {
            used += (size_t)snprintf(buf + used, len - used, "%s%s",
                                     used ? "," : "", profile_names[p]);
        }
    }
}

uint64_t vgg_work_rand(struct vgg_work *w)
{
    /* xorshift64* */
    w->rng ^= w->rng >> 12;
    w->rng ^= w->rng << 25;
    w->rng ^= w->rng >> 27;
    return w->rng * 0x2545f4914f6cdd1dull;
}

static uint64_t rand_below(struct vgg_work *w, uint64_t n)
{
    return vgg_work_rand(w) % n;
}

static uint64_t off_of(uint64_t page)
{
    return page * PAGE;
}

static void region(struct vgg_region *r, uint64_t *next, uint64_t count)
{
    r->first = *next;
    r->count = count;
    *next += count;
}

static void set_entry(struct vgg_work *w, uint64_t p, uint32_t kind,
                      uint32_t origin, uint32_t gen, uint32_t aux)
{
    w->model[p] = (struct vgg_page){
        .kind = kind, .origin = origin, .gen = gen, .aux = aux};
    w->pages_written++;
}

/* FILL page @p with the FILL pattern of (@p, @gen). */
static int fill_page(struct vgg_work *w, uint64_t p, uint32_t gen,
                     struct vg_error *err)
{
    struct vgpu_cmd c =
        vgpu_cmd_make(VGPU_OP_FILL, off_of(p), PAGE,
                      vgg_fill_pattern((uint32_t)p, gen), 0, 0, 0);

    set_entry(w, p, VGG_FILL, (uint32_t)p, gen, 0);
    return vgg_gpu_push(w->gpu, &c, err);
}

/* FILL page @p with the float aux + 0.5 * gen. */
static int float_page(struct vgg_work *w, uint64_t p, uint32_t aux,
                      uint32_t gen, struct vg_error *err)
{
    struct vgpu_cmd c = vgpu_cmd_make(VGPU_OP_FILL, off_of(p), PAGE,
                                      vgg_float_bits(aux, gen), 0, 0, 0);

    set_entry(w, p, VGG_FLOAT, (uint32_t)p, gen, aux);
    return vgg_gpu_push(w->gpu, &c, err);
}

/* The float base of page @p (different for neighbours). */
static uint32_t float_aux(uint64_t p)
{
    return 1 + (uint32_t)(p % (VGG_FLOAT_AUX_MAX - 96));
}

/* Upload pages [@first, @first + @n) by DMA with new content of @kind
 * (DATA or IDX with @aux), generation one up. */
static int upload(struct vgg_work *w, uint64_t first, uint64_t n, uint32_t kind,
                  uint32_t aux, struct vg_error *err)
{
    int rc = 0;

    while (rc == 0 && n > 0) {
        uint64_t k = n < UPLOAD_BATCH ? n : UPLOAD_BATCH;
        size_t off = 0;

        rc = vgg_gpu_stage(w->gpu, k * PAGE, &off, err);
        for (uint64_t i = 0; rc == 0 && i < k; i++) {
            uint64_t p = first + i;

            set_entry(w, p, kind, (uint32_t)p, w->model[p].gen + 1, aux);
            vgg_page_render(&w->model[p],
                            (uint32_t *)(w->gpu->dma.buf + off + i * PAGE));
        }
        if (rc == 0) {
            rc = vgg_gpu_dma_to_vram(w->gpu, off_of(first), off, k * PAGE, err);
        }
        first += k;
        n -= k;
    }
    return rc;
}

/* Index @i of the SCATTER_ADD index array that starts at page @first. */
static uint32_t idx_at(const struct vgg_work *w, uint64_t first, uint64_t i)
{
    return vgg_page_word(&w->model[first + i / VGG_PAGE_WORDS],
                         (uint32_t)(i % VGG_PAGE_WORDS));
}

/* SCATTER_ADD of @halves * 0.5 to the rows of @rows named by indices
 * [@start, @start + @count) of the index array @idx; FLOAT rows that get
 * too large for exact float sums start again from generation 0. */
static int scatter(struct vgg_work *w, const struct vgg_region *rows,
                   const struct vgg_region *idx, uint64_t start, uint64_t count,
                   uint32_t halves, struct vg_error *err)
{
    struct vgpu_cmd c = vgpu_cmd_make(
        VGPU_OP_SCATTER_ADD, off_of(rows->first), rows->count, PAGE,
        off_of(idx->first) + 4 * start, count, vgg_float_bits(0, halves));
    int rc = vgg_gpu_push(w->gpu, &c, err);

    for (uint64_t i = 0; i < count; i++) {
        uint64_t p = rows->first + idx_at(w, idx->first, start + i);

        w->model[p].gen += halves;
        w->pages_written++;
    }
    for (uint64_t i = 0; rc == 0 && i < count; i++) {
        uint64_t p = rows->first + idx_at(w, idx->first, start + i);

        if (w->model[p].gen >= VGG_FLOAT_GEN_MAX) {
            rc = float_page(w, p, w->model[p].aux, 0, err);
        }
    }
    return rc;
}

/* ------------------------------------------------------------- layout */

static void layout(struct vgg_work *w)
{
    uint64_t n = w->npages, next = 0;
    uint64_t g = n / 64 ? n / 64 : 1;

    region(&w->statics, &next, n / 16);
    region(&w->input, &next, n / 32);
    region(&w->act, &next, n / 16);
    region(&w->idx_act, &next,
           (w->act.count + VGG_PAGE_WORDS - 1) / VGG_PAGE_WORDS);
    region(&w->weights, &next, g * TRAIN_CHUNKS);
    region(&w->grad, &next, g);
    region(&w->ckpt, &next, g);
    region(&w->scratch, &next, n / 8);
    region(&w->table, &next, n / 8);
    region(&w->idx_table, &next, IDX_TABLE_PAGES);
    region(&w->cpu, &next, n / 16);
}

/* Initial content of every region; the rest of VRAM zero. */
static int init_content(struct vgg_work *w, struct vg_error *err)
{
    const struct vgg_region *floats[] = {&w->act, &w->weights, &w->ckpt,
                                         &w->table};
    uint64_t used = w->cpu.first + w->cpu.count;
    int rc = upload(w, w->statics.first, w->statics.count, VGG_DATA, 0, err);

    if (rc == 0) {
        rc = upload(w, w->input.first, w->input.count, VGG_DATA, 0, err);
    }
    if (rc == 0) {
        rc = upload(w, w->idx_act.first, w->idx_act.count, VGG_IDX,
                    (uint32_t)w->act.count, err);
    }
    if (rc == 0) {
        rc = upload(w, w->idx_table.first, w->idx_table.count, VGG_IDX,
                    (uint32_t)w->table.count, err);
    }
    for (unsigned r = 0; rc == 0 && r < sizeof(floats) / sizeof(*floats); r++) {
        for (uint64_t p = floats[r]->first;
             rc == 0 && p < floats[r]->first + floats[r]->count; p++) {
            rc = float_page(w, p, float_aux(p), 0, err);
        }
    }
    for (uint64_t p = w->grad.first;
         rc == 0 && p < w->grad.first + w->grad.count; p++) {
        rc = float_page(w, p, 0, 1, err);
    }
    for (uint64_t p = w->scratch.first;
         rc == 0 && p < w->scratch.first + w->scratch.count; p++) {
        rc = fill_page(w, p, 1, err);
    }
    for (uint64_t p = w->cpu.first; rc == 0 && p < w->cpu.first + w->cpu.count;
         p++) {
        rc = fill_page(w, p, 1, err);
    }
    if (rc == 0 && used < w->npages) {
        struct vgpu_cmd c = vgpu_cmd_make(VGPU_OP_FILL, off_of(used),
                                          off_of(w->npages - used), 0, 0, 0, 0);

        rc = vgg_gpu_push(w->gpu, &c, err);
    }
    if (rc == 0) {
        rc = vgg_gpu_flush(w->gpu, err);
    }
    return rc;
}

int vgg_work_init(struct vgg_work *w, struct vgg_gpu *g, unsigned profiles,
                  uint64_t seed, struct vg_error *err)
{
    int rc;

    memset(w, 0, sizeof(*w));
    w->gpu = g;
    w->profiles = profiles;
    w->rng = seed ? seed : 0x9e3779b97f4a7c15ull;
    w->npages = g->dev.vram_size / PAGE;
    if (w->npages < 256) {
        return vg_error_set(err, EINVAL,
                            "VRAM of %" PRIu64 " bytes is too small (1 MiB "
                            "at least)",
                            g->dev.vram_size);
    }
    w->model = calloc(w->npages, sizeof(*w->model));
    if (!w->model) {
        return vg_error_set(err, ENOMEM, "model of %" PRIu64 " pages",
                            w->npages);
    }
    layout(w);
    rc = init_content(w, err);
    if (rc < 0) {
        vg_error_prefix(err, "initial VRAM content");
        vgg_work_free(w);
    }
    return rc;
}

void vgg_work_free(struct vgg_work *w)
{
    free(w->model);
    w->model = NULL;
}

/* ----------------------------------------------------------- profiles */

/* Compare the rows step_infer() read back with the model. */
static void check_readback(struct vgg_work *w, size_t off, const uint64_t *rows)
{
    for (unsigned i = 0; i < READBACK_ROWS; i++) {
        struct vgg_mismatch m;

        w->dma_checks++;
        if (!vgg_page_check(&w->model[rows[i]], rows[i],
                            w->gpu->dma.buf + off + i * PAGE, &m)) {
            if (w->dma_corrupt++ == 0) {
                w->dma_first = m;
            }
        }
    }
}

/* inference: new inputs by DMA, SCATTER_ADD over every activation row,
 * two rows read back by DMA and compared once the batch ran. */
static int step_infer(struct vgg_work *w, struct vg_error *err)
{
    uint64_t rb_rows[READBACK_ROWS];
    size_t rb_off = 0;
    uint64_t first = w->input.first + w->input_next;
    uint64_t n = w->input.count - w->input_next < INPUT_PER_STEP
                     ? w->input.count - w->input_next
                     : INPUT_PER_STEP;
    int rc = upload(w, first, n, VGG_DATA, 0, err);

    w->input_next = (w->input_next + n) % w->input.count;
    if (rc == 0 && w->steps[VGG_P_INFER] % 16 == 15) {
        rc = upload(w, w->idx_act.first, w->idx_act.count, VGG_IDX,
                    (uint32_t)w->act.count, err);
    }
    if (rc == 0) {
        rc = scatter(w, &w->act, &w->idx_act, 0, w->act.count, 1, err);
    }
    if (rc == 0) {
        rc = vgg_gpu_stage(w->gpu, READBACK_ROWS * PAGE, &rb_off, err);
    }
    for (unsigned i = 0; rc == 0 && i < READBACK_ROWS; i++) {
        rb_rows[i] = w->act.first + rand_below(w, w->act.count);
        rc = vgg_gpu_dma_from_vram(w->gpu, rb_off + i * PAGE,
                                   off_of(rb_rows[i]), PAGE, err);
    }
    if (rc == 0) {
        rc = vgg_gpu_flush(w->gpu, err);
    }
    if (rc == 0) {
        check_readback(w, rb_off, rb_rows);
    }
    return rc;
}

/* training: a new gradient (FILL), weights chunk += gradient (AXPY),
 * every fourth step a checkpoint COPY of the chunk, a slice of the
 * scratch buffer FILLed again. */
static int step_train(struct vgg_work *w, struct vg_error *err)
{
    uint64_t step = w->steps[VGG_P_TRAIN];
    uint32_t k = 1 + (uint32_t)(step % 3);
    uint64_t chunk = w->weights.first + (step % TRAIN_CHUNKS) * w->grad.count;
    uint64_t bytes = off_of(w->grad.count);
    uint64_t slice = w->scratch.count / SCRATCH_SLICES;
    struct vgpu_cmd c = vgpu_cmd_make(VGPU_OP_FILL, off_of(w->grad.first),
                                      bytes, vgg_float_bits(0, k), 0, 0, 0);
    int rc = vgg_gpu_push(w->gpu, &c, err);

    for (uint64_t i = 0; i < w->grad.count; i++) {
        set_entry(w, w->grad.first + i, VGG_FLOAT,
                  (uint32_t)(w->grad.first + i), k, 0);
    }
    if (rc == 0) {
        c = vgpu_cmd_make(VGPU_OP_AXPY, off_of(chunk), off_of(w->grad.first),
                          bytes / 4, vgg_float_bits(1, 0), 0, 0);
        rc = vgg_gpu_push(w->gpu, &c, err);
    }
    for (uint64_t i = 0; rc == 0 && i < w->grad.count; i++) {
        w->model[chunk + i].gen += k;
        w->pages_written++;
        if (w->model[chunk + i].gen >= VGG_FLOAT_GEN_MAX) {
            rc = float_page(w, chunk + i, w->model[chunk + i].aux, 0, err);
        }
    }
    if (rc == 0 && step % 4 == 3) {
        c = vgpu_cmd_make(VGPU_OP_COPY, off_of(w->ckpt.first), off_of(chunk),
                          bytes, 0, 0, 0);
        rc = vgg_gpu_push(w->gpu, &c, err);
        for (uint64_t i = 0; i < w->ckpt.count; i++) {
            w->model[w->ckpt.first + i] = w->model[chunk + i];
            w->pages_written++;
        }
    }
    for (uint64_t i = 0; rc == 0 && i < slice; i++) {
        uint64_t p = w->scratch.first + w->scratch_next;

        rc = fill_page(w, p, w->model[p].gen + 1, err);
        w->scratch_next = (w->scratch_next + 1) % w->scratch.count;
    }
    return rc;
}

/* sparse: SCATTER_ADD of 1.0 to the rows of a window of the index array;
 * now and then a new index page. */
static int step_sparse(struct vgg_work *w, struct vg_error *err)
{
    uint64_t total = w->idx_table.count * VGG_PAGE_WORDS;
    uint64_t start = rand_below(w, total - SPARSE_PER_STEP);
    int rc =
        scatter(w, &w->table, &w->idx_table, start, SPARSE_PER_STEP, 2, err);

    if (rc == 0 && w->steps[VGG_P_SPARSE] % 32 == 31) {
        rc = upload(w, w->idx_table.first + w->idx_table_next, 1, VGG_IDX,
                    (uint32_t)w->table.count, err);
        w->idx_table_next = (w->idx_table_next + 1) % w->idx_table.count;
    }
    return rc;
}

/* The stamp of CPU page @p moves on: the old stamp word gets its FILL
 * value back, the new one its stamp; two plain 4-byte stores. */
static void cpu_stamp(struct vgg_work *w, uint64_t p)
{
    volatile uint32_t *pg = (volatile uint32_t *)(w->gpu->dev.vram + off_of(p));
    struct vgg_page *e = &w->model[p];

    if (e->kind == VGG_FILL) {
        /* First stamp: the FILL generation becomes the base pattern. */
        *e = (struct vgg_page){
            .kind = VGG_CPU, .origin = e->origin, .gen = 0, .aux = e->gen};
    } else {
        pg[vgg_cpu_word(e->origin, e->gen)] =
            vgg_fill_pattern(e->origin, e->aux);
        w->cpu_stores++;
    }
    e->gen++;
    pg[vgg_cpu_word(e->origin, e->gen)] = vgg_cpu_stamp(e->origin, e->gen);
    w->cpu_stores++;
    w->pages_written++;
}

/* Rewrite CPU page @p entirely (a new base pattern and stamp) with
 * 8-byte stores. */
static void cpu_page(struct vgg_work *w, uint64_t p)
{
    volatile uint64_t *pg = (volatile uint64_t *)(w->gpu->dev.vram + off_of(p));
    struct vgg_page *e = &w->model[p];
    uint32_t gen = e->kind == VGG_CPU ? e->gen + 1 : 1;
    uint32_t aux = e->aux + e->gen + 1; /* a base pattern not seen before */
    uint32_t buf[VGG_PAGE_WORDS];

    *e = (struct vgg_page){
        .kind = VGG_CPU, .origin = e->origin, .gen = gen, .aux = aux};
    vgg_page_render(e, buf);
    for (uint32_t i = 0; i < VGG_PAGE_WORDS / 2; i++) {
        uint64_t v;

        memcpy(&v, buf + 2 * i, sizeof(v));
        pg[i] = v;
    }
    w->cpu_stores += VGG_PAGE_WORDS / 2;
    w->pages_written++;
}

/* cpu-writes: guest CPU stores through the BAR2 mapping. */
static void step_cpu(struct vgg_work *w)
{
    for (unsigned i = 0; i < CPU_STAMPS_PER_STEP; i++) {
        cpu_stamp(w, w->cpu.first + rand_below(w, w->cpu.count));
    }
    if (w->steps[VGG_P_CPU] % CPU_FULL_EVERY == 0) {
        cpu_page(w, w->cpu.first + rand_below(w, w->cpu.count));
    }
    __sync_synchronize();
}

int vgg_work_step(struct vgg_work *w, struct vg_error *err)
{
    int rc = 0;

    if (w->profiles & (1u << VGG_P_INFER)) {
        rc = step_infer(w, err);
        w->steps[VGG_P_INFER]++;
    }
    if (rc == 0 && (w->profiles & (1u << VGG_P_TRAIN))) {
        rc = step_train(w, err);
        w->steps[VGG_P_TRAIN]++;
    }
    if (rc == 0 && (w->profiles & (1u << VGG_P_SPARSE))) {
        rc = step_sparse(w, err);
        w->steps[VGG_P_SPARSE]++;
    }
    if (rc == 0 && (w->profiles & (1u << VGG_P_CPU))) {
        step_cpu(w);
        w->steps[VGG_P_CPU]++;
    }
    if (rc == 0) {
        rc = vgg_gpu_flush(w->gpu, err);
    }
    if (w->profiles & (1u << VGG_P_IDLE)) {
        w->steps[VGG_P_IDLE]++;
    }
    return rc;
}

bool vgg_work_check(const struct vgg_work *w, uint64_t page,
                    struct vgg_mismatch *m)
{
    return vgg_page_check(&w->model[page], page,
                          w->gpu->dev.vram + off_of(page), m);
}

void vgg_work_inject(struct vgg_work *w, struct vgg_mismatch *m)
{
    uint64_t p = w->statics.first + rand_below(w, w->statics.count);
    uint32_t word = (uint32_t)rand_below(w, VGG_PAGE_WORDS);
    volatile uint32_t *pg = (volatile uint32_t *)(w->gpu->dev.vram + off_of(p));

    *m = (struct vgg_mismatch){.page = p,
                               .word = word,
                               .expected = vgg_page_word(&w->model[p], word),
                               .nwords = 1};
    m->actual = m->expected ^ 0x5a5a5a5au;
    pg[word] = m->actual;
    __sync_synchronize();
}
