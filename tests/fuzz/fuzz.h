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
 *   file descriptors (a memfd of FUZZ_VFU_RAM bytes of "guest RAM" for
 *   DMA_MAP, eventfds otherwise); it is zeroed before the server sees it.
 *   A message with command FUZZ_VFU_POKE is for the harness: its payload,
 *   a u32 offset and bytes, is written into guest RAM (ring entries).
 *   The device is a 256 KiB VRAM vGPU (FUZZ_VRAM, 4 KiB pages), new for
 *   every input.
 *
 * stream: byte 0 flags (FUZZ_STREAM_*), byte 1 chunking, then migration
 *   stream bytes, fed to a loading session of a FUZZ_VRAM vGPU.
 *
 * cmd: byte 0 VRAM size (4 KiB << (b % 5)), byte 1 slice budget, then
 *   64-byte ring entries, validated and, if valid, run by the engines.
 */
#ifndef VGMIG_TESTS_FUZZ_FUZZ_H
#define VGMIG_TESTS_FUZZ_FUZZ_H

#include <stddef.h>
#include <stdint.h>

#define FUZZ_VRAM      (256u << 10)
#define FUZZ_PAGE      4096u
#define FUZZ_VFU_RAM   (256u << 10)
#define FUZZ_VFU_POKE  0xff00u
#define FUZZ_VFU_NFDS  0xfu /* mask of the error field */
#define FUZZ_MAX_INPUT (1u << 20)

/* stream flags: recompute every record checksum; fill in END's digest,
 * byte and record counts. */
#define FUZZ_STREAM_RESEAL  0x1u
#define FUZZ_STREAM_FIX_END 0x2u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* guard.c: the log level from $FUZZ_LOG (error|warn|info|debug|trace),
 * else error: the targets' inputs are mostly malformed on purpose. */
void fuzz_log_level(void);

/* guard.c: the guard pages around shared fd mappings (VRAM, DMA). */
size_t fuzz_guarded_maps(void);

#endif
