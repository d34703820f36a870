/*
 * cmd.h -- ring entries: decoding and validation.
 *
 * vgpu_cmd_validate() is a pure function of the entry and the VRAM size: it
 * touches no device state and no memory besides its arguments, so it can be
 * fuzzed on its own.  What it cannot know (guest RAM mappings for DMA, the
 * index data of SCATTER_ADD) is checked by the engines at execution.
 */
#ifndef VGPU_CMD_H
#define VGPU_CMD_H

#include <stdbool.h>
#include <stdint.h>

#include "vgpu-regs.h"

/* Size of one ring entry in guest RAM. */
#define VGPU_CMD_SIZE 64u

/* An entry with opcode @op and arguments arg0..arg5 (arg6, flags and
 * reserved zero): what drivers and tests submit. */
struct vgpu_cmd vgpu_cmd_make(uint16_t op, uint64_t a0, uint64_t a1,
                              uint64_t a2, uint64_t a3, uint64_t a4,
                              uint64_t a5);

/* Decode the little-endian ring entry at @raw (VGPU_CMD_SIZE bytes). */
void vgpu_cmd_decode(const void *raw, struct vgpu_cmd *cmd);
/* Encode @cmd as a little-endian ring entry at @raw (VGPU_CMD_SIZE bytes). */
void vgpu_cmd_encode(const struct vgpu_cmd *cmd, void *raw);

/*
 * Check @cmd (host byte order) against the rules of docs/vgpu-device.md for
 * a device with @vram_size bytes of VRAM.  Returns true if it may run, with
 * *@code = VGPU_ERR_NONE; else false with *@code the VGPU_ERR_* of the first
 * failing check, in this order: opcode, flags/reserved/unused arguments,
 * lengths, alignment, VRAM ranges, IOVA range overflow, overlap.
 */
bool vgpu_cmd_validate(const struct vgpu_cmd *cmd, uint64_t vram_size,
                       enum vgpu_error_code *code);

/* A range of VRAM a command reads or writes. */
struct vgpu_vram_range {
    uint64_t off;
    uint64_t len;
};

/* The VRAM ranges a valid command @cmd may read or write (SCATTER_ADD:
 * its whole table, whose rows depend on data, and its index array) into
 * @out; returns how many (0 to 2). */
unsigned vgpu_cmd_vram_ranges(const struct vgpu_cmd *cmd,
                              struct vgpu_vram_range out[2]);

/* "FILL", "COPY", ...; "?" for an unknown opcode. */
const char *vgpu_op_name(uint32_t opcode);
/* "VRAM_RANGE", ...; "?" for an unknown code. */
const char *vgpu_error_name(uint32_t code);

#endif
