/*
 * mig-hashway.h -- which way a source hashes the pages of its next read
 * from a GPU: the GPU's kernel as it copies them, or the server's threads
 * on the copy (vgpu_vram_read_hashed).
 *
 * The GPU is the faster way while its server has it to itself; while other
 * processes' contexts share it (other vGPUs' servers, without MPS) every
 * kernel waits for a context switch, and the threads can be faster.  So
 * each way's cost per MiB of page data is learnt from the reads that took
 * it (a moving average), each read takes the cheaper way, and every
 * MIG_HASHWAY_PROBE-th read the other, to keep its cost fresh.  A way not
 * measured yet is tried first (the GPU before the threads).
 */
#ifndef MIG_HASHWAY_H
#define MIG_HASHWAY_H

#include <stdbool.h>
#include <stdint.h>

#define MIG_HASHWAY_PROBE     16u
#define MIG_HASHWAY_MIN_BYTES (1u << 20) /* smaller reads teach nothing */

enum mig_way { MIG_WAY_THREADS, MIG_WAY_GPU };

struct mig_hashway {
    double ms_per_mib[2]; /* by way; 0: not measured */
    uint64_t reads;       /* reads chosen for so far */
};

/* The way for the next read. */
enum mig_way mig_hashway_choose(struct mig_hashway *h);
/* A read that took way @way spent @ms on @bytes of page data. */
void mig_hashway_learn(struct mig_hashway *h, enum mig_way way, double ms,
                       uint64_t bytes);

#endif
