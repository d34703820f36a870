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
 * sock: byte 0 flags (FUZZ_SOCK_*), byte 1 chunking, bytes 2..3 a seed
 *   (little endian), then vfio-user messages framed and carrying fds as
 *   for vfu (no harness messages: every byte goes to the server), written
 *   by a client thread into one end of a socketpair that the server serves
 *   with vfu_server_serve_fd().  Chunking 0: as much per write as the
 *   socket takes (many messages per write); 1: one message per write, as
 *   QEMU does; else writes of 1 .. 2^(chunking % 21) bytes drawn from the
 *   seed.  A message with fds starts a write, which carries them.  Error
 *   field bit 8 (FUZZ_SOCK_FILL): the message's body is not in the input;
 *   the client sends size - 16 zero bytes instead (at most
 *   FUZZ_SOCK_FILL_MAX, else the message is the last), in writes as large
 *   as the socket takes: an oversized message whose body the server must
 *   drain.  Bytes after the last whole header are sent as a partial one.
 *   Flags: FUZZ_SOCK_CLOSE closes the socket right after the last byte
 *   (a client that hangs up mid-message, replies unread), else the client
 *   shuts down its sending side and reads every reply up to the server's
 *   EOF; FUZZ_SOCK_BIG: 64 KiB pages, FUZZ_VRAM_64K of VRAM.  An input
 *   must finish within FUZZ_SOCK_MAX_MS.
 *
 * cmd: byte 0 VRAM size (4 KiB << (b % 5)), byte 1 slice budget, then
 *   64-byte ring entries, validated and, if valid, run by the engines.
 */
#ifndef VGMIG_TESTS_FUZZ_FUZZ_H
#define VGMIG_TESTS_FUZZ_FUZZ_H

#include <stdbool.h>
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

/* sock: the prefix (flags, chunking, seed), the flags, the error field's
 * fill bit, the most zero bytes one message (and one input) is filled
 * with, the most one input may take. */
#define FUZZ_SOCK_PREFIX     4u
#define FUZZ_SOCK_CLOSE      0x1u
#define FUZZ_SOCK_BIG        0x2u
#define FUZZ_SOCK_FILL       0x100u
#define FUZZ_SOCK_FILL_MAX   (4u << 20)
#define FUZZ_SOCK_FILL_TOTAL (8u << 20)
#define FUZZ_SOCK_MAX_MS     3000

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

/* fds.c: a memfd of FUZZ_VFU_RAM bytes of guest RAM, sealed against
 * resizing (as QEMU's) if @sealed. */
int fuzz_ram_fd(bool sealed);
/* fds.c: a new fd of @kind (FUZZ_FD_*) for a message of command @cmd;
 * @ram and @loose are the sealed and unsealed guest RAM it may dup.
 * Aborts, saying why, if it cannot be made. */
int fuzz_new_fd(unsigned kind, uint16_t cmd, int ram, int loose);

#endif
