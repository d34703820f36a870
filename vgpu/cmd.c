/*
 * cmd.c -- ring entry decoding and the pure command validator.
 */
#include "cmd.h"

#include <endian.h>
#include <string.h>

_Static_assert(sizeof(struct vgpu_cmd) == VGPU_CMD_SIZE, "ring entry layout");

struct vgpu_cmd vgpu_cmd_make(uint16_t op, uint64_t a0, uint64_t a1,
                              uint64_t a2, uint64_t a3, uint64_t a4,
                              uint64_t a5)
{
    return (struct vgpu_cmd){.opcode = op, .arg = {a0, a1, a2, a3, a4, a5}};
}

void vgpu_cmd_decode(const void *raw, struct vgpu_cmd *cmd)
{
    int i;

    memcpy(cmd, raw, sizeof(*cmd));
    cmd->opcode = le16toh(cmd->opcode);
    cmd->flags = le16toh(cmd->flags);
    cmd->reserved = le32toh(cmd->reserved);
    for (i = 0; i < 7; i++) {
        cmd->arg[i] = le64toh(cmd->arg[i]);
    }
}

void vgpu_cmd_encode(const struct vgpu_cmd *cmd, void *raw)
{
    struct vgpu_cmd le;
    int i;

    le.opcode = htole16(cmd->opcode);
    le.flags = htole16(cmd->flags);
    le.reserved = htole32(cmd->reserved);
    for (i = 0; i < 7; i++) {
        le.arg[i] = htole64(cmd->arg[i]);
    }
    memcpy(raw, &le, sizeof(le));
}

/* Per opcode: how many leading args are used, and which hold 32-bit values
 * (their high halves must be zero). */
struct op_shape {
    unsigned nargs;
    unsigned u32_args; /* bit i: arg i is a 32-bit value */
};

static const struct op_shape op_shapes[VGPU_OP_COUNT] = {
    [VGPU_OP_NOP] = {0, 0},
    [VGPU_OP_FILL] = {3, 1u << 2},
    [VGPU_OP_COPY] = {3, 0},
    [VGPU_OP_DMA_TO_VRAM] = {3, 0},
    [VGPU_OP_DMA_FROM_VRAM] = {3, 0},
    [VGPU_OP_AXPY] = {4, 1u << 3},
    [VGPU_OP_SCATTER_ADD] = {6, 1u << 5},
    [VGPU_OP_FENCE] = {1, 0},
};

static bool shape_ok(const struct vgpu_cmd *cmd)
{
    const struct op_shape *s = &op_shapes[cmd->opcode];
    unsigned i;

    if (cmd->flags || cmd->reserved) {
        return false;
    }
    for (i = 0; i < 7; i++) {
        if (i >= s->nargs && cmd->arg[i]) {
            return false;
        }
        if ((s->u32_args & (1u << i)) && cmd->arg[i] > UINT32_MAX) {
            return false;
        }
    }
    return true;
}

/* A length is acceptable if it is not zero and fits in VRAM. */
static bool len_ok(uint64_t len, uint64_t vram_size)
{
    return len != 0 && len <= vram_size;
}

/* [off, off + len) inside VRAM, for len <= vram_size; overflow-safe. */
static bool range_ok(uint64_t off, uint64_t len, uint64_t vram_size)
{
    return off <= vram_size - len;
}

static bool overlap(uint64_t a, uint64_t b, uint64_t len_a, uint64_t len_b)
{
    return a < b + len_b && b < a + len_a;
}

static bool aligned4(uint64_t v)
{
    return (v & 3) == 0;
}

static enum vgpu_error_code check_fill(const uint64_t *a, uint64_t vram_size)
{
    if (!len_ok(a[1], vram_size)) {
        return VGPU_ERR_BAD_LENGTH;
    }
    if (!aligned4(a[0]) || !aligned4(a[1])) {
        return VGPU_ERR_ALIGNMENT;
    }
    if (!range_ok(a[0], a[1], vram_size)) {
        return VGPU_ERR_VRAM_RANGE;
    }
    return VGPU_ERR_NONE;
}

static enum vgpu_error_code check_copy(const uint64_t *a, uint64_t vram_size)
{
    if (!len_ok(a[2], vram_size)) {
        return VGPU_ERR_BAD_LENGTH;
    }
    if (!range_ok(a[0], a[2], vram_size) || !range_ok(a[1], a[2], vram_size)) {
        return VGPU_ERR_VRAM_RANGE;
    }
    if (overlap(a[0], a[1], a[2], a[2])) {
        return VGPU_ERR_OVERLAP;
    }
    return VGPU_ERR_NONE;
}

/* DMA: @vram is the VRAM offset, @iova the guest address. */
static enum vgpu_error_code check_dma(uint64_t vram, uint64_t iova,
                                      uint64_t len, uint64_t vram_size)
{
    if (!len_ok(len, vram_size)) {
        return VGPU_ERR_BAD_LENGTH;
    }
    if (!range_ok(vram, len, vram_size)) {
        return VGPU_ERR_VRAM_RANGE;
    }
    if (iova > UINT64_MAX - len) {
        return VGPU_ERR_DMA_FAULT;
    }
    return VGPU_ERR_NONE;
}

static enum vgpu_error_code check_axpy(const uint64_t *a, uint64_t vram_size)
{
    uint64_t len;

    if (a[2] == 0 || a[2] > vram_size / 4) {
        return VGPU_ERR_BAD_LENGTH;
    }
    len = a[2] * 4;
    if (!aligned4(a[0]) || !aligned4(a[1])) {
        return VGPU_ERR_ALIGNMENT;
    }
    if (!range_ok(a[0], len, vram_size) || !range_ok(a[1], len, vram_size)) {
        return VGPU_ERR_VRAM_RANGE;
    }
    if (a[0] != a[1] && overlap(a[0], a[1], len, len)) {
        return VGPU_ERR_OVERLAP;
    }
    return VGPU_ERR_NONE;
}

static enum vgpu_error_code check_scatter(const uint64_t *a, uint64_t vram_size)
{
    uint64_t table = a[0], rows = a[1], row_bytes = a[2];
    uint64_t idx = a[3], count = a[4];

    if (rows == 0 || row_bytes == 0 || row_bytes > vram_size ||
        rows > vram_size / row_bytes || count == 0 || count > vram_size / 4) {
        return VGPU_ERR_BAD_LENGTH;
    }
    if (!aligned4(table) || !aligned4(row_bytes) || !aligned4(idx)) {
        return VGPU_ERR_ALIGNMENT;
    }
    if (!range_ok(table, rows * row_bytes, vram_size) ||
        !range_ok(idx, count * 4, vram_size)) {
        return VGPU_ERR_VRAM_RANGE;
    }
    if (overlap(table, idx, rows * row_bytes, count * 4)) {
        return VGPU_ERR_OVERLAP;
    }
    return VGPU_ERR_NONE;
}

static enum vgpu_error_code check_args(const struct vgpu_cmd *cmd,
                                       uint64_t vram_size)
{
    const uint64_t *a = cmd->arg;

    switch (cmd->opcode) {
    case VGPU_OP_FILL:
        return check_fill(a, vram_size);
    case VGPU_OP_COPY:
        return check_copy(a, vram_size);
    case VGPU_OP_DMA_TO_VRAM:
        return check_dma(a[0], a[1], a[2], vram_size);
    case VGPU_OP_DMA_FROM_VRAM:
        return check_dma(a[1], a[0], a[2], vram_size);
    case VGPU_OP_AXPY:
        return check_axpy(a, vram_size);
    case VGPU_OP_SCATTER_ADD:
        return check_scatter(a, vram_size);
    default: /* NOP, FENCE: nothing beyond the shape */
        return VGPU_ERR_NONE;
    }
}

bool vgpu_cmd_validate(const struct vgpu_cmd *cmd, uint64_t vram_size,
                       enum vgpu_error_code *code)
{
    if (cmd->opcode >= VGPU_OP_COUNT) {
        *code = VGPU_ERR_BAD_OPCODE;
    } else if (!shape_ok(cmd)) {
        *code = VGPU_ERR_BAD_FLAGS;
    } else {
        *code = check_args(cmd, vram_size);
    }
    return *code == VGPU_ERR_NONE;
}

const char *vgpu_op_name(uint32_t opcode)
{
    static const char *const names[VGPU_OP_COUNT] = {
        [VGPU_OP_NOP] = "NOP",
        [VGPU_OP_FILL] = "FILL",
        [VGPU_OP_COPY] = "COPY",
        [VGPU_OP_DMA_TO_VRAM] = "DMA_TO_VRAM",
        [VGPU_OP_DMA_FROM_VRAM] = "DMA_FROM_VRAM",
        [VGPU_OP_AXPY] = "AXPY",
        [VGPU_OP_SCATTER_ADD] = "SCATTER_ADD",
        [VGPU_OP_FENCE] = "FENCE",
    };

    return opcode < VGPU_OP_COUNT ? names[opcode] : "?";
}

const char *vgpu_error_name(uint32_t code)
{
    static const char *const names[] = {
        [VGPU_ERR_NONE] = "NONE",
        [VGPU_ERR_BAD_OPCODE] = "BAD_OPCODE",
        [VGPU_ERR_BAD_FLAGS] = "BAD_FLAGS",
        [VGPU_ERR_VRAM_RANGE] = "VRAM_RANGE",
        [VGPU_ERR_ALIGNMENT] = "ALIGNMENT",
        [VGPU_ERR_DMA_FAULT] = "DMA_FAULT",
        [VGPU_ERR_BAD_LENGTH] = "BAD_LENGTH",
        [VGPU_ERR_OVERLAP] = "OVERLAP",
        [VGPU_ERR_INDEX_RANGE] = "INDEX_RANGE",
        [VGPU_ERR_RING_FETCH] = "RING_FETCH",
        [VGPU_ERR_RING_CONFIG] = "RING_CONFIG",
        [VGPU_ERR_DEVICE] = "DEVICE",
    };

    return code < sizeof(names) / sizeof(names[0]) ? names[code] : "?";
}

unsigned vgpu_cmd_vram_ranges(const struct vgpu_cmd *cmd,
                              struct vgpu_vram_range out[2])
{
    const uint64_t *a = cmd->arg;

    switch (cmd->opcode) {
    case VGPU_OP_FILL:
        out[0] = (struct vgpu_vram_range){a[0], a[1]};
        return 1;
    case VGPU_OP_COPY:
        out[0] = (struct vgpu_vram_range){a[0], a[2]};
        out[1] = (struct vgpu_vram_range){a[1], a[2]};
        return 2;
    case VGPU_OP_DMA_TO_VRAM:
        out[0] = (struct vgpu_vram_range){a[0], a[2]};
        return 1;
    case VGPU_OP_DMA_FROM_VRAM:
        out[0] = (struct vgpu_vram_range){a[1], a[2]};
        return 1;
    case VGPU_OP_AXPY:
        out[0] = (struct vgpu_vram_range){a[0], a[2] * 4};
        out[1] = (struct vgpu_vram_range){a[1], a[2] * 4};
        return 2;
    case VGPU_OP_SCATTER_ADD:
        out[0] = (struct vgpu_vram_range){a[0], a[1] * a[2]};
        out[1] = (struct vgpu_vram_range){a[3], a[4] * 4};
        return 2;
    default: /* NOP, FENCE */
        return 0;
    }
}
