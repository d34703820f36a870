/*
 * mig-hashway.h -- which way a server hashes the pages of its next copy
 * to or from a GPU: the GPU's kernel beside the copy, or the server's
 * threads on the host's side of it (vgpu_vram_read_hashed() for a
 * source's reads, vgpu_vram_write_hashed() for a destination's writes).
 *
 * The GPU is the faster way while its server has it to itself, or shares
 * it through CUDA MPS; while other processes' contexts share it without
 * MPS (the other side's server, other vGPUs' servers) every kernel waits
 * for a context switch, and the threads can be faster.  So each way's
 * cost per MiB of page data is learnt from the copies that took it (a
 * moving average), each copy takes the cheaper way, and now and then one
 * takes the other, to keep its cost fresh: after MIG_HASHWAY_PROBE
 * copies, then twice as many after each probe that left the choice as it
 * was, up to MIG_HASHWAY_PROBE_MAX (a way that stays slower costs less
 * and less); when the choice changes, the interval starts again.  A way
 * not measured yet is tried first (the GPU before the threads).
 */
#ifndef MIG_HASHWAY_H
#define MIG_HASHWAY_H

#include <stdbool.h>
#include <stdint.h>

#define MIG_HASHWAY_PROBE     16u
#define MIG_HASHWAY_PROBE_MAX 256u
#define MIG_HASHWAY_MIN_BYTES (1u << 20) /* smaller copies teach nothing */

enum mig_way { MIG_WAY_THREADS, MIG_WAY_GPU };

struct mig_hashway {
    double ms_per_mib[2]; /* by way; 0: not measured */
    uint64_t copies;      /* copies chosen for so far */
    uint64_t next_probe;  /* the copy that takes the other way next */
    uint32_t interval;    /* copies between probes; 0: not started */
    enum mig_way best;    /* the choice when the interval was set */
    uint64_t probes;      /* copies that took the slower way */
};

/* The way for the next copy. */
enum mig_way mig_hashway_choose(struct mig_hashway *h);
/* A copy that took way @way spent @ms on @bytes of page data. */
void mig_hashway_learn(struct mig_hashway *h, enum mig_way way, double ms,
                       uint64_t bytes);

#endif
