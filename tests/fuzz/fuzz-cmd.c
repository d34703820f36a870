/*
 * fuzz-cmd.c -- fuzz target: ring entries into the command validator
 * (vgpu_cmd_validate) and every accepted one into the engines
 * (vgpu_engine_run), in slices, on a VRAM that is a heap block of exactly
 * its size (ASan sees a byte outside it) and a small guest RAM behind a
 * bounds-checked DMA lookup.  Input format: fuzz.h.
 *
 * Checked: the validator's verdict and code agree and the code is a
 * known one; an entry decodes and encodes back to the same bytes;
 * validating is a pure function (twice the same verdict); every range an
 * engine reports written lies inside VRAM; an accepted command fails at
 * run time only with the codes that need run-time data (DMA_FAULT,
 * INDEX_RANGE).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "vgpu/cmd.h"
#include "vgpu/engines.h"

#define RAM_IOVA 0x100000u
#define RAM_SIZE (64u << 10)
#define MAX_WORK (4u << 20) /* engine bytes per command */
#define MAX_CODE VGPU_ERR_RING_CONFIG

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz-cmd: check failed: %s (%s:%d)\n", #cond,     \
                    __FILE__, __LINE__);                                       \
            abort();                                                           \
        }                                                                      \
    } while (0)

struct ctx {
    uint8_t *ram;
    uint64_t vram_size;
};

/* Exactly what vfu_dma_ptr promises: the range wholly inside RAM. */
static void *dma_ptr(void *opaque, uint64_t iova, uint64_t len, bool write)
{
    struct ctx *c = opaque;

    if (iova < RAM_IOVA || iova - RAM_IOVA >= RAM_SIZE ||
        len > RAM_SIZE - (iova - RAM_IOVA)) {
        return NULL;
    }
    return c->ram + (iova - RAM_IOVA);
}

static void no_irq(void *opaque, unsigned vector)
{
}

static void wrote(void *opaque, uint64_t off, uint64_t len,
                  enum vgpu_write_kind kind)
{
    struct ctx *c = opaque;

    CHECK(len > 0 && off <= c->vram_size && len <= c->vram_size - off);
    CHECK(kind == VGPU_WRITE_EXACT || kind == VGPU_WRITE_OPAQUE);
}

static void run(const struct vgpu_engine_env *env, const struct vgpu_cmd *cmd,
                uint64_t slice)
{
    enum vgpu_error_code code;
    struct vgpu_job job;
    uint64_t work = 0;

    vgpu_job_init(&job, cmd, 0);
    while (work < MAX_WORK) {
        uint64_t budget = slice;
        enum vgpu_exec_status st = vgpu_engine_run(env, &job, &budget, &code);

        CHECK(budget <= slice);
        if (st == VGPU_EXEC_DONE) {
            return;
        }
        if (st == VGPU_EXEC_ERROR) {
            CHECK(code == VGPU_ERR_DMA_FAULT || code == VGPU_ERR_INDEX_RANGE);
            return;
        }
        CHECK(st == VGPU_EXEC_MORE);
        work += slice - budget > 0 ? slice - budget : 1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t ram[RAM_SIZE];
    struct ctx c = {ram, 0};
    struct vgpu_host host = {&c, dma_ptr, no_irq};
    struct vgpu_engine_env env;
    uint64_t slice;
    uint8_t *vram;

    if (size < 2) {
        return 0;
    }
    c.vram_size = 4096ull << (data[0] % 5);
    slice = 1ull << (data[1] % 21);
    vram = calloc(1, c.vram_size);
    CHECK(vram);
    env = (struct vgpu_engine_env){vram, c.vram_size, &host, wrote, &c, NULL};
    for (size_t pos = 2; size - pos >= VGPU_CMD_SIZE; pos += VGPU_CMD_SIZE) {
        enum vgpu_error_code code, code2;
        uint8_t back[VGPU_CMD_SIZE];
        struct vgpu_cmd cmd;
        bool ok;

        vgpu_cmd_decode(data + pos, &cmd);
        vgpu_cmd_encode(&cmd, back);
        CHECK(memcmp(back, data + pos, VGPU_CMD_SIZE) == 0);
        ok = vgpu_cmd_validate(&cmd, c.vram_size, &code);
        CHECK(ok == (code == VGPU_ERR_NONE));
        CHECK(code <= MAX_CODE);
        CHECK(vgpu_cmd_validate(&cmd, c.vram_size, &code2) == ok);
        CHECK(code2 == code);
        if (ok) {
            run(&env, &cmd, slice);
        }
    }
    free(vram);
    return 0;
}
