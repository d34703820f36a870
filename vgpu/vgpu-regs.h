/*
 * vgpu-regs.h -- the guest-visible interface of the vgmig vGPU.
 *
 * This header is the contract between the device model (vgpu/), the
 * vfio-user server (vfio-user/) and everything that drives the device
 * (tests, the in-guest tool).  docs/vgpu-device.md explains it in prose.
 * All registers are 32 bits, little endian, accessed with aligned 4-byte
 * reads and writes; other accesses are ignored (reads return all ones).
 */
#ifndef VGPU_REGS_H
#define VGPU_REGS_H

#include <stdint.h>

/* PCI identity: IDs of our own (not assigned by the PCI-SIG). */
#define VGPU_PCI_VENDOR_ID     0x7667 /* "vg" */
#define VGPU_PCI_DEVICE_ID     0x6d01
#define VGPU_PCI_SUBSYS_VENDOR VGPU_PCI_VENDOR_ID
#define VGPU_PCI_SUBSYS_ID     0x0001
#define VGPU_PCI_REVISION      0x01
#define VGPU_PCI_CLASS         0x030200 /* display controller: 3D */

/* BARs */
#define VGPU_BAR_REGS  0 /* 32-bit memory BAR, trapped */
#define VGPU_BAR_VRAM  2 /* 64-bit prefetchable memory BAR (BAR2+BAR3) */
#define VGPU_BAR0_SIZE 0x4000
/* MSI-X table and PBA live in BAR0 (emulated by the VMM). */
#define VGPU_MSIX_VECTORS      2
#define VGPU_MSIX_TABLE_OFFSET 0x2000
#define VGPU_MSIX_PBA_OFFSET   0x3000
#define VGPU_MSIX_VEC_FENCE    0
#define VGPU_MSIX_VEC_ERROR    1

/* BAR0 register offsets */
#define VGPU_REG_ID           0x000 /* RO: VGPU_ID_MAGIC */
#define VGPU_REG_VERSION      0x004 /* RO: VGPU_VERSION */
#define VGPU_REG_VRAM_SIZE_LO 0x008 /* RO: VRAM size in bytes, low half */
#define VGPU_REG_VRAM_SIZE_HI 0x00c /* RO: high half */
#define VGPU_REG_PAGE_SIZE    0x010 /* RO: tracking page size in bytes */
#define VGPU_REG_FEATURES     0x014 /* RO: VGPU_FEAT_* */
#define VGPU_REG_RING_BASE_LO 0x020 /* RW: ring IOVA, 64-aligned */
#define VGPU_REG_RING_BASE_HI 0x024 /* RW */
#define VGPU_REG_RING_SIZE    0x028 /* RW: entries, power of two, 0 = off */
#define VGPU_REG_RING_HEAD    0x02c /* RO: next entry the device reads */
#define VGPU_REG_RING_TAIL    0x030 /* RW: next entry the guest writes */
#define VGPU_REG_DOORBELL     0x034 /* WO: any value: tail moved, run */
#define VGPU_REG_FENCE_LO     0x038 /* RO: last completed fence value */
#define VGPU_REG_FENCE_HI     0x03c /* RO */
#define VGPU_REG_IRQ_STATUS   0x040 /* RW1C: VGPU_IRQ_* */
#define VGPU_REG_IRQ_MASK     0x044 /* RW: 1 = interrupt source enabled */
#define VGPU_REG_ERROR_CODE   0x048 /* RO: VGPU_ERR_* of the first error */
#define VGPU_REG_ERROR_INDEX  0x04c /* RO: ring index of the bad command */
#define VGPU_REG_STATUS       0x050 /* RO: VGPU_STATUS_* */
#define VGPU_REG_CMDS_DONE    0x054 /* RO: completed commands (wraps) */
#define VGPU_REG_SCRATCH      0x058 /* RW: no effect, for tests */

#define VGPU_ID_MAGIC 0x56475055u /* "VGPU" */
#define VGPU_VERSION  0x00010000u /* major 1, minor 0 */

#define VGPU_FEAT_DMA     (1u << 0)
#define VGPU_FEAT_AXPY    (1u << 1)
#define VGPU_FEAT_SCATTER (1u << 2)

#define VGPU_IRQ_FENCE (1u << 0)
#define VGPU_IRQ_ERROR (1u << 1)

#define VGPU_STATUS_BUSY   (1u << 0) /* commands pending or running */
#define VGPU_STATUS_HALTED (1u << 1) /* an error stopped the ring */

/* ERROR_INDEX of an error that no ring entry caused (RING_CONFIG). */
#define VGPU_ERROR_INDEX_NONE 0xffffffffu

#define VGPU_RING_MAX_ENTRIES 65536u
#define VGPU_RING_ALIGN       64u

/*
 * Ring entries: 64 bytes in guest RAM at RING_BASE + index * 64.  The device
 * consumes entries from HEAD to TAIL (indices modulo RING_SIZE).  A bad
 * entry sets ERROR_CODE/ERROR_INDEX, raises VGPU_IRQ_ERROR and halts the
 * ring with HEAD past the bad entry; writing VGPU_IRQ_ERROR to IRQ_STATUS
 * clears the error and the device resumes with the next entry.
 */
struct vgpu_cmd {
    uint16_t opcode;   /* VGPU_OP_* */
    uint16_t flags;    /* must be 0 */
    uint32_t reserved; /* must be 0 */
    uint64_t arg[7];
};

enum vgpu_opcode {
    VGPU_OP_NOP = 0,
    /* arg0 VRAM dst, arg1 length, arg2 32-bit pattern; dst, length 4-aligned */
    VGPU_OP_FILL = 1,
    /* arg0 VRAM dst, arg1 VRAM src, arg2 length; ranges must not overlap */
    VGPU_OP_COPY = 2,
    /* guest RAM -> VRAM: arg0 VRAM dst, arg1 src IOVA, arg2 length */
    VGPU_OP_DMA_TO_VRAM = 3,
    /* VRAM -> guest RAM: arg0 dst IOVA, arg1 VRAM src, arg2 length */
    VGPU_OP_DMA_FROM_VRAM = 4,
    /* y[i] = a * x[i] + y[i] (float32): arg0 y, arg1 x, arg2 count,
     * arg3 a (IEEE-754 bits, low 32); y, x 4-aligned; x and y must be the
     * same range or not overlap.  Declared write range: [y, y + 4*count). */
    VGPU_OP_AXPY = 5,
    /* table[idx[i]][j] += value for every i < count, j < row_bytes/4
     * (float32): arg0 table, arg1 rows, arg2 row_bytes (4-aligned),
     * arg3 idx (u32 array in VRAM), arg4 count, arg5 value bits.  The pages
     * written depend on the data: an opaque writer.  An index >= rows stops
     * the command with VGPU_ERR_INDEX_RANGE (earlier rows stay updated). */
    VGPU_OP_SCATTER_ADD = 6,
    /* arg0 value: FENCE register := value, then VGPU_IRQ_FENCE */
    VGPU_OP_FENCE = 7,
};
#define VGPU_OP_COUNT 8

enum vgpu_error_code {
    VGPU_ERR_NONE = 0,
    VGPU_ERR_BAD_OPCODE = 1,   /* opcode unknown */
    VGPU_ERR_BAD_FLAGS = 2,    /* flags, reserved or unused args not 0 */
    VGPU_ERR_VRAM_RANGE = 3,   /* a VRAM range outside VRAM or overflowing */
    VGPU_ERR_ALIGNMENT = 4,    /* offset or length misaligned */
    VGPU_ERR_DMA_FAULT = 5,    /* IOVA range not inside one DMA mapping */
    VGPU_ERR_BAD_LENGTH = 6,   /* zero length or count, or too large */
    VGPU_ERR_OVERLAP = 7,      /* source and destination overlap */
    VGPU_ERR_INDEX_RANGE = 8,  /* SCATTER_ADD index >= rows */
    VGPU_ERR_RING_FETCH = 9,   /* ring entry not readable by DMA */
    VGPU_ERR_RING_CONFIG = 10, /* bad RING_BASE/SIZE/TAIL value */
    VGPU_ERR_DEVICE = 11,      /* the backend failed (GPU error): see log */
};

#endif
