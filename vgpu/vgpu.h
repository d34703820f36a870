/*
 * vgpu.h -- the vGPU device model, independent of any transport.
 *
 * A struct vgpu owns VRAM (through a backend), the BAR0 registers and the
 * command processor.  The transport (vfio-user/vfu-device.c) forwards
 * BAR accesses here, runs the command processor from its event loop with
 * vgpu_step() (through mig_gpu_step()), and provides DMA and interrupts
 * through struct vgpu_host.
 * Not thread-safe: the transport calls it under one lock (regs_lock,
 * vfio-user/vfu-devthread.c), the step on the device's own thread; the
 * one exception is the migration's VRAM access (reads, hashes, the
 * prefetch and read-ahead) in pre-copy, which runs beside a step: its
 * bytes may be torn by an engine write, which the write observer then
 * reports (from the stepping thread), so the page goes again.
 * The guest-visible registers and commands are in vgpu-regs.h.
 */
#ifndef VGPU_H
#define VGPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "vgpu-regs.h"

struct vgpu;

/* What the device needs from the transport. */
struct vgpu_host {
    void *opaque;
    /* Host pointer for guest IOVA range [iova, iova + len) if it lies wholly
     * in one DMA mapping that allows the access, else NULL. */
    void *(*dma_ptr)(void *opaque, uint64_t iova, uint64_t len, bool write);
    /* Signal MSI-X vector @vector (VGPU_MSIX_VEC_*). */
    void (*raise_irq)(void *opaque, unsigned vector);
};

struct vgpu_config {
    uint64_t vram_size;  /* bytes, multiple of page_size, >= page_size */
    uint32_t page_size;  /* power of two, 4 KiB .. 2 MiB */
    const char *backend; /* "cpu", "cuda" or "cuda:N" */
    /* Back mapped VRAM with memory from the start, on a thread
     * (common/populate.h); nothing to do where VRAM is device memory. */
    bool prealloc;
};

/* Engine statistics a user can query. */
struct vgpu_stats {
    uint64_t cmds_done;
    uint64_t cmds_failed;
    uint64_t cmds_by_op[VGPU_OP_COUNT];
    uint64_t bytes_written; /* VRAM bytes written by engines */
    uint64_t fences;
    uint64_t irqs_raised;
    uint64_t bad_reg_access; /* ignored misaligned or odd-sized accesses */
};

int vgpu_new(const struct vgpu_config *cfg, const struct vgpu_host *host,
             struct vgpu **out, struct vg_error *err);
void vgpu_free(struct vgpu *gpu);

uint64_t vgpu_vram_size(const struct vgpu *gpu);
uint32_t vgpu_page_size(const struct vgpu *gpu);
/* VRAM base in this process (CPU backend), for hashing and migration;
 * NULL when VRAM is not mapped here (cuda): then use the calls below. */
uint8_t *vgpu_vram(struct vgpu *gpu);
/* Stop preallocating VRAM (vgpu_config.prealloc), joining the thread: a
 * post-copy destination is about to leave holes that must stay holes. */
void vgpu_prealloc_end(struct vgpu *gpu);
/* File descriptor backing VRAM for BAR2 mmap (memfd), or -1 if the backend
 * cannot be mapped (then BAR2 is trapped through vgpu_bar2_*). */
int vgpu_vram_fd(const struct vgpu *gpu);

/*
 * VRAM access for migration and tests, whatever the backend; the device's
 * write observer does not see these.  Each returns 0, or -ERANGE for a
 * range outside VRAM, or the backend's error (e.g. a GPU fault).
 * vgpu_vram_write may leave the copy in flight: every later call on the
 * device is ordered after it.  vgpu_vram_clear zeroes a 4-aligned range;
 * in host VRAM, whole host pages of a large range are freed instead (they
 * read as zero and take no memory until written again).
 * vgpu_vram_prefetch is a hint that [off, off + len) will be read soon.
 * vgpu_vram_write_nt is vgpu_vram_write for bytes nobody reads soon: in
 * host VRAM it goes around the CPU's caches (vg_nt_copy()), and the
 * calling thread calls vg_nt_fence() before it tells another thread
 * that the bytes are there (common/nt-copy.h).
 */
int vgpu_vram_read(struct vgpu *gpu, uint64_t off, void *dst, uint64_t len,
                   struct vg_error *err);
int vgpu_vram_write(struct vgpu *gpu, uint64_t off, const void *src,
                    uint64_t len, struct vg_error *err);
int vgpu_vram_write_nt(struct vgpu *gpu, uint64_t off, const void *src,
                       uint64_t len, struct vg_error *err);
int vgpu_vram_clear(struct vgpu *gpu, uint64_t off, uint64_t len,
                    struct vg_error *err);
void vgpu_vram_prefetch(struct vgpu *gpu, uint64_t off, uint64_t len);
/*
 * vgpu_vram_read_ahead: [off, off + len) will be read into @dst next.
 * Where @dst is registered memory (vgpu_host_register) a GPU starts
 * copying the range there now, so the copy overlaps the caller's work:
 * until vgpu_vram_settle or the next vgpu_vram_read returns, the copy
 * may still write @dst, which the caller must leave alone.  That read of
 * the same range into the same @dst then only waits for the copy; any
 * other read waits for it first.  Elsewhere it does nothing.
 */
void vgpu_vram_read_ahead(struct vgpu *gpu, uint64_t off, void *dst,
                          uint64_t len);
/* Hashes of the pages a read or a write copies (below). */
struct vgpu_copy_hashes {
    uint32_t page_size;  /* the copy covers whole pages of this size */
    uint32_t nseeds;     /* 1 or 2 */
    uint64_t seeds[2];   /* XXH3-64 seeds */
    uint64_t *hashes[2]; /* out: hashes[k][i] for page i of the copy */
    uint64_t *zero;      /* out, may be NULL: bit i set iff page i is all
                            zero */
};

/*
 * vgpu_vram_read_hashed: vgpu_vram_read of whole pages of @h->page_size
 * that also hashes them where VRAM lives (the GPU), from the very bytes
 * the copy takes: @h->hashes[k][i] = XXH3_64bits_withSeed(page i of @dst,
 * @h->seeds[k]) for k < @h->nseeds, and bit i of @h->zero set iff page i
 * is all zero.  Only where vgpu_copies_hash() says so (-ENOTSUP elsewhere).
 * vgpu_vram_read_ahead_hashed: vgpu_vram_read_ahead for such a read with
 * the same seeds; its hashes are taken with the copy.
 * vgpu_vram_write_hashed: vgpu_vram_write of whole pages, then the hashes
 * of the pages as they landed in VRAM, the same way.
 */
bool vgpu_copies_hash(const struct vgpu *gpu);
int vgpu_vram_read_hashed(struct vgpu *gpu, uint64_t off, void *dst,
                          uint64_t len, const struct vgpu_copy_hashes *h,
                          struct vg_error *err);
void vgpu_vram_read_ahead_hashed(struct vgpu *gpu, uint64_t off, void *dst,
                                 uint64_t len,
                                 const struct vgpu_copy_hashes *h);
int vgpu_vram_write_hashed(struct vgpu *gpu, uint64_t off, const void *src,
                           uint64_t len, const struct vgpu_copy_hashes *h,
                           struct vg_error *err);
/* As vgpu_vram_write, but a copy straight from registered @src (see
 * vgpu_host_register) may still be reading it when this returns, so the
 * caller's work overlaps it: @src must not change until vgpu_vram_settle
 * returns. */
int vgpu_vram_write_async(struct vgpu *gpu, uint64_t off, const void *src,
                          uint64_t len, struct vg_error *err);
/* Wait for a read ahead not read, or a write_async (0, or the backend's
 * error). */
int vgpu_vram_settle(struct vgpu *gpu, struct vg_error *err);

/*
 * @len bytes at @ptr (the migration's shared area) will often be read into
 * and written from by the calls above: let a GPU reach them directly, so
 * those copies skip the staging buffer.  Returns 1 if registered, 0 where
 * there is nothing to gain (VRAM is mapped here), or the backend's error
 * (the copies then stage as before).  vgpu_host_unregister undoes it; no
 * call may be using the range.  vgpu_direct_bytes: bytes copied straight
 * between VRAM and registered memory since the device was created.
 */
int vgpu_host_register(struct vgpu *gpu, void *ptr, uint64_t len,
                       struct vg_error *err);
void vgpu_host_unregister(struct vgpu *gpu, void *ptr);
uint64_t vgpu_direct_bytes(const struct vgpu *gpu);

/*
 * XXH3-64 (keyed by @seed) of every page whose bit is set in @select (a
 * page bitmap; NULL: every page) into @hashes[page]; other entries are
 * left alone.  @zero (may be NULL) gets, for each selected page, its bit
 * set iff the page is all zero.  For a backend without a host mapping:
 * it hashes where VRAM lives (on the GPU for cuda), with the result of
 * XXH3_64bits_withSeed; -ENOTSUP where VRAM is mapped (vgpu_vram() is not
 * NULL), which libdirtytrack hashes itself.
 */
int vgpu_vram_hash(struct vgpu *gpu, const uint64_t *select, uint64_t seed,
                   uint64_t *hashes, uint64_t *zero, struct vg_error *err);
/* One line naming the backend's device (GPU model, driver) or "cpu"; the
 * statistics file shows it as "backend". */
const char *vgpu_backend_describe(const struct vgpu *gpu);

/* BAR0 accesses; -EINVAL (access ignored, counted) if @len != 4, @off is
 * misaligned or outside BAR0 registers.  Reads of ignored accesses fill
 * @data with 0xff. */
int vgpu_bar0_read(struct vgpu *gpu, uint64_t off, void *data, uint32_t len);
int vgpu_bar0_write(struct vgpu *gpu, uint64_t off, const void *data,
                    uint32_t len);
/* BAR2 (VRAM) trapped accesses; -EINVAL outside VRAM, or the backend's
 * error (logged; a failed read returns all-ones). */
int vgpu_bar2_read(struct vgpu *gpu, uint64_t off, void *data, uint32_t len);
int vgpu_bar2_write(struct vgpu *gpu, uint64_t off, const void *data,
                    uint32_t len);

/* Run the command processor for at most @budget bytes of engine work (long
 * commands continue across calls).  Returns true while work is pending;
 * while stopped it does nothing and returns false. */
bool vgpu_step(struct vgpu *gpu, uint64_t budget);
bool vgpu_busy(const struct vgpu *gpu);

/*
 * Migration quiesce.  While stopped, vgpu_step() does nothing and returns
 * false, so the command processor rests at a slice boundary: a command in
 * flight stays in flight (its cursor is part of the saved state) and no
 * VRAM, guest RAM or interrupt changes.  Register accesses still work.
 * vgpu_runnable() is what a transport's loop asks before vgpu_step().
 */
void vgpu_set_stopped(struct vgpu *gpu, bool stopped);
bool vgpu_stopped(const struct vgpu *gpu);
/* Not stopped and work is pending. */
bool vgpu_runnable(const struct vgpu *gpu);

/*
 * Device state for migration (vgpu-state.c): registers, ring state and the
 * in-flight command with its cursor, as a fixed-size, versioned,
 * little-endian blob of VGPU_STATE_SIZE bytes; docs/migration-stream.md
 * gives the layout.  VRAM is not part of it.
 */
#define VGPU_STATE_MAGIC   0x54534756u /* "VGST" */
#define VGPU_STATE_VERSION 1u
#define VGPU_STATE_SIZE    168u

/* Serialize @gpu's state into @buf (@size >= VGPU_STATE_SIZE); returns
 * VGPU_STATE_SIZE, or -ENOSPC. */
int vgpu_state_save(const struct vgpu *gpu, void *buf, size_t size,
                    struct vg_error *err);
/*
 * Validate the blob (@len bytes) completely -- magic, version, size, this
 * device's VRAM and page size, every register value, the in-flight command
 * (vgpu_cmd_validate) and its cursor -- then install it.  On failure @gpu
 * is unchanged and @err names the first bad field and its value.  The
 * stopped flag and statistics are not part of the state.
 */
int vgpu_state_load(struct vgpu *gpu, const void *buf, size_t len,
                    struct vg_error *err);

/*
 * Observer of every VRAM write the device itself makes (the engines and
 * trapped BAR2 writes), called after each written range: @exact when the
 * range is exactly what was written, else (opaque kernels) the range
 * bounds what may have been written.  Writes through an mmap of
 * vgpu_vram_fd() are not seen.  @fn NULL removes the observer.
 */
typedef void (*vgpu_write_fn)(void *opaque, uint64_t off, uint64_t len,
                              bool exact);
void vgpu_set_write_observer(struct vgpu *gpu, vgpu_write_fn fn, void *opaque);

/*
 * A gate on the command processor's VRAM (a post-copy destination whose
 * pages are still arriving): before each slice of a command, @ready is
 * asked for every VRAM range the command reads or writes
 * (vgpu_cmd_vram_ranges); false holds the command, and vgpu_step() stops
 * for now (work stays pending).  @ready NULL removes the gate.
 */
typedef bool (*vgpu_vram_ready_fn)(void *opaque, uint64_t off, uint64_t len);
void vgpu_set_vram_gate(struct vgpu *gpu, vgpu_vram_ready_fn ready,
                        void *opaque);

/* Device reset: registers to defaults, ring off, error cleared; VRAM and
 * the stopped flag kept. */
void vgpu_reset(struct vgpu *gpu);
void vgpu_get_stats(const struct vgpu *gpu, struct vgpu_stats *stats);

#endif
