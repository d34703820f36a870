/*
 * fuzz.h -- what the fuzz targets, their replay driver and the seed
 * generator share (docs/fuzzing.md).
 *
 * Each target tests/fuzz/fuzz-<name>.c defines LLVMFuzzerTestOneInput();
 * `make fuzz` links it with libFuzzer, `make check` with replay.c, which
 * runs every file of tests/fuzz/corpus/<name>/ through it.  The input
 * formats below are what gen-seeds.c writes.
 *
 * vfu: a sequence of vfio-user messages, each framed by the size field of
 *   its 16-byte header (a header whose size is below 16 or beyond the
 *   input ends it).  The request header's error field, which the server
 *   ignores, tells the harness what to send along: bits 0..3 a number of
 *   file descriptors, bits 4..7 their kind (FUZZ_FD_*; the default, 0,
 *   is a sealed memfd of FUZZ_VFU_RAM bytes of "guest RAM" for DMA_MAP
 *   and an eventfd otherwise); it is zeroed before the server sees it.
 *   Messages with these commands are for the harness:
 *   - FUZZ_VFU_POKE: its payload, a u32 offset and bytes, is written into
 *     guest RAM (ring entries);
 *   - FUZZ_VFU_CONFIG, first message only: bytes page size (bit 0: 64 KiB
 *     pages and FUZZ_VRAM_64K of VRAM, else 4 KiB and FUZZ_VRAM),
 *     --dirty-track (% 3: hybrid, hash, none), --precopy (% 3:
 *     iterative, one-shot, none);
 *   - FUZZ_VFU_TRUNCATE: its u32 payload (modulo FUZZ_VFU_RAM + 1) is the
 *     new size of the unsealed guest RAM memfd (FUZZ_FD_LOOSE), which a
 *     hostile client could shrink after mapping it.
 *   The device is a 256 KiB VRAM vGPU (FUZZ_VRAM, 4 KiB pages) unless
 *   configured, new for every input.
 *
 * stream: byte 0 flags (FUZZ_STREAM_*), byte 1 chunking, then migration
 *   stream bytes, fed to a loading session of a FUZZ_VRAM vGPU; a stream
 *   that loads is then run: the device state it carried drives the
 *   device, whose ring and DMA reach the first FUZZ_STREAM_RAM bytes of
 *   the input (at IOVA FUZZ_STREAM_IOVA).  An input must finish within
 *   FUZZ_STREAM_MAX_MS.
 *
 * cmd: byte 0 VRAM size (4 KiB << (b % 5)), byte 1 slice budget, then
 *   64-byte ring entries, validated and, if valid, run by the engines.
 */
#ifndef VGMIG_TESTS_FUZZ_FUZZ_H
#define VGMIG_TESTS_FUZZ_FUZZ_H

#include <stddef.h>
#include <stdint.h>

#define FUZZ_VRAM         (256u << 10)
#define FUZZ_PAGE         4096u
#define FUZZ_VFU_RAM      (256u << 10)
#define FUZZ_VFU_POKE     0xff00u
#define FUZZ_VFU_CONFIG   0xff01u
#define FUZZ_VFU_TRUNCATE 0xff02u
#define FUZZ_VFU_NFDS     0xfu /* mask of the error field */
#define FUZZ_VFU_FD_SHIFT 4    /* the fd kind, in bits 4..7 */
#define FUZZ_VRAM_64K     (1u << 20)
#define FUZZ_PAGE_64K     (64u << 10)
/* stream: the most one input may take (a per-input time limit that also
 * holds in the replay, sanitizers included). */
#define FUZZ_STREAM_MAX_MS 3000

/* Kinds of fds the vfu harness passes (error field bits 4..7). */
enum fuzz_fd_kind {
    FUZZ_FD_DEFAULT, /* DMA_MAP: sealed guest RAM; else an eventfd */
    FUZZ_FD_LOOSE,   /* guest RAM in a memfd without seals */
    FUZZ_FD_PIPE,    /* the write end of a pipe */
    FUZZ_FD_SOCKET,  /* one end of a socketpair */
    FUZZ_FD_FILE,    /* a regular (unlinked) file of FUZZ_VFU_RAM bytes */
    FUZZ_FD_EVENTFD, /* an eventfd, also for DMA_MAP */
    FUZZ_FD_DEVNULL, /* /dev/null */
    FUZZ_FD_SEALED,  /* sealed guest RAM, also for SET_IRQS */
    FUZZ_FD_KINDS
};
#define FUZZ_MAX_INPUT (1u << 20)

/* stream flags: recompute every record checksum; fill in END's digest,
 * byte and record counts. */
#define FUZZ_STREAM_RAM     (64u << 10)
#define FUZZ_STREAM_IOVA    0x100000ull
#define FUZZ_STREAM_RESEAL  0x1u
#define FUZZ_STREAM_FIX_END 0x2u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* guard.c: the log level from $FUZZ_LOG (error|warn|info|debug|trace),
 * else error: the targets' inputs are mostly malformed on purpose. */
void fuzz_log_level(void);

/* guard.c: the guard pages around shared fd mappings (VRAM, DMA). */
size_t fuzz_guarded_maps(void);

#endif
