/*
 * vgpu-server -- serve the vgmig vGPU to QEMU over vfio-user.
 *
 * Parses the command line, sets up logging and signals (SIGTERM, SIGINT and
 * SIGHUP end the server cleanly, removing the socket) and runs the server
 * of vfu-server.h until then.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "common/log.h"
#include "common/size.h"
#include "dirty-track/hash-pool.h"
#include "vfio-migration/mig-stream.h"
#include "vfio-user/vfu-server.h"

#define PAGE_MIN (4u << 10)
#define PAGE_MAX (2u << 20)

static void usage(FILE *out)
{
    fprintf(
        out,
        "Usage: vgpu-server --socket PATH --vram SIZE [OPTION]...\n"
        "\n"
        "Serve the vgmig vGPU, a PCI 3D controller with a command ring and\n"
        "VRAM, to one QEMU at a time over the vfio-user protocol.  QEMU\n"
        "attaches with\n"
        "  -device '{\"driver\":\"vfio-user-pci\",\n"
        "            \"socket\":{\"type\":\"unix\",\"path\":\"PATH\"}}'\n"
        "and must back guest RAM with shareable memory (for example\n"
        "-object memory-backend-memfd,id=mem,size=...,share=on\n"
        "-machine memory-backend=mem) so the device can DMA to it.\n"
        "\n"
        "Options:\n"
        "  -s, --socket PATH      UNIX socket to listen on; created with mode\n"
        "                         0600, a stale socket there is replaced\n"
        "  -v, --vram SIZE        VRAM size (BAR2), a power of two from the\n"
        "                         page size up, e.g. 256M or 4G\n"
        "  -p, --page-size SIZE   dirty-tracking page size, a power of two\n"
        "                         from 4K to 2M (default 64K)\n"
        "  -b, --backend NAME     VRAM backend: cpu (default: host memory,\n"
        "                         BAR2 mmap'd into the guest), cuda or\n"
        "                         cuda:N (VRAM on NVIDIA GPU N, default 0;\n"
        "                         engines and page hashing run on the GPU,\n"
        "                         BAR2 accesses are trapped; needs the\n"
        "                         NVIDIA driver and a build configured\n"
        "                         with CUDA)\n"
        "      --prealloc         back VRAM with memory from the start, as a\n"
        "                         GPU's is: a thread populates the whole\n"
        "                         VRAM memfd (cpu backend) while the server\n"
        "                         serves, so a migration's destination does\n"
        "                         not allocate and zero pages as the stream\n"
        "                         arrives; the log says when it is done.\n"
        "                         VRAM then takes its full size in memory\n"
        "                         (until pages are cleared).  The migration\n"
        "                         data area (--data-slots x 4 MiB) is then\n"
        "                         populated as soon as a client negotiates\n"
        "                         it, not when a migration begins, and the\n"
        "                         kept hashes of VRAM's pieces (VRAM / 128\n"
        "                         bytes, cpu backend) at start, so that\n"
        "                         neither side zeroes pages while the data\n"
        "                         flows\n"
        "  -l, --log-level LEVEL  error, warn, info (default), debug, trace\n"
        "      --stats-file PATH  write migration statistics to PATH as JSON,\n"
        "                         replaced atomically (temporary file and\n"
        "                         rename) after a migration state change,\n"
        "                         once no request has come for 2 ms (50 ms\n"
        "                         at the latest), so that the changes of a\n"
        "                         switchover do not wait on the file system;\n"
        "                         at once on an error, and at exit; see\n"
        "                         STATISTICS\n"
        "      --precopy=MODE     what the device sends while the VM still\n"
        "                         runs (PRE_COPY): iterative (default):\n"
        "                         round 0 sends every non-zero page, each\n"
        "                         later round the pages dirtied since they\n"
        "                         were last sent, until QEMU switches over;\n"
        "                         one-shot: round 0 only, stop-copy sends\n"
        "                         what was dirtied since; none: nothing,\n"
        "                         stop-copy sends every non-zero page\n"
        "      --dirty-track=MODE how dirty pages are found: hybrid\n"
        "                         (default): exact logs of the engines'\n"
        "                         writes, hashing of the buffers opaque\n"
        "                         kernels could write, and the client's log\n"
        "                         of guest writes through its BAR2 mapping\n"
        "                         (or, from a client without one, hashing\n"
        "                         of all of VRAM); hash: hash every page\n"
        "                         every round; none: every round resends\n"
        "                         every page\n"
        "      --gpu-hash=WHERE   with VRAM on a GPU (--backend cuda), the\n"
        "                         page data whose hashes the GPU computes\n"
        "                         as it copies them: auto (default: the\n"
        "                         pages a source reads and a destination\n"
        "                         loads, for each copy the faster of the\n"
        "                         GPU and the threads, as the copies before\n"
        "                         it measured: a GPU shared with other\n"
        "                         servers without CUDA MPS is slower),\n"
        "                         source (the pages a source reads, always;\n"
        "                         the threads hash a destination's), both\n"
        "                         (and the pages a destination loads,\n"
        "                         always), none (the server's threads hash\n"
        "                         every copy)\n"
        "      --migration-threads N\n"
        "                         threads that hash pages for dirty tracking\n"
        "                         and, on the destination, write and hash\n"
        "                         large records of the incoming stream and\n"
        "                         load a restore's pages from the save file\n"
        "                         while the VM runs (at most 16 of them), 1\n"
        "                         to 64 (default: a quarter of the CPUs the\n"
        "                         server may run on, at least 2 and at most\n"
        "                         4)\n"
        "      --stream-version N version of the migration stream this\n"
        "                         server writes as a source: 6 (default,\n"
        "                         the checksums of pieces of pages take\n"
        "                         the pieces' hashes; a GPU backend writes\n"
        "                         4); 5, for a destination whose\n"
        "                         vgpu-server reads versions 1 to 5 (page\n"
        "                         hashes are trees of the pieces' hashes,\n"
        "                         see MIGRATION); 4, for one that reads\n"
        "                         versions 1 to 4 (stop-copy sends only\n"
        "                         the pieces of a page the guest CPU\n"
        "                         wrote); 3, for one that reads versions 1\n"
        "                         to 3 (pre-copy pages may go from VRAM\n"
        "                         without a copy); 2, for one that reads\n"
        "                         versions 1 and 2 (page hashes stand for\n"
        "                         the pages in the checksums); or 1, for\n"
        "                         one that reads only version 1.  A\n"
        "                         destination reads all six\n"
        "      --small-records    as a source, put at most 2 MiB of pages\n"
        "                         in a record, for a destination whose\n"
        "                         vgpu-server predates records of 4 MiB (it\n"
        "                         refuses the HEADER: \"features mismatch\",\n"
        "                         \"reserved 0x1\"); by default a record\n"
        "                         holds up to 4 MiB\n"
        "      --no-region-log    refuse the client's offer to log guest\n"
        "                         writes through the BAR2 mapping, as a\n"
        "                         server predating REGION_DIRTY_LOG would:\n"
        "                         hybrid tracking then hashes all of VRAM\n"
        "      --no-data-shm      refuse the client's offer to move migration\n"
        "                         data through a shared memory area, as a\n"
        "                         server predating data_shm would: the data\n"
        "                         then crosses the socket\n"
        "      --no-data-vram     refuse the client's offer to take stop-copy\n"
        "                         page data from a read-only map of VRAM, as\n"
        "                         a server predating data_vram would: the\n"
        "                         server then copies them into the area\n"
        "      --no-data-plane    serve the data requests of that area on the\n"
        "                         control loop, not on the data plane's\n"
        "                         thread, as a server without it does: the\n"
        "                         guest's register accesses then wait for a\n"
        "                         data request being served\n"
        "      --no-device-thread run the device's command processor on the\n"
        "                         thread that served the last request, not\n"
        "                         on a thread of its own, as a server\n"
        "                         without it does: the guest's commands then\n"
        "                         wait while a pre-copy read is served\n"
        "      --no-postcopy      refuse the client's offer of post-copy, as "
        "a\n"
        "                         server predating it would: QEMU then\n"
        "                         refuses post-copy for this VM.  With it, a\n"
        "                         source serves the pages a post-copy leaves\n"
        "                         behind from a socket beside --socket, and a\n"
        "                         destination fetches them while the VM runs\n"
        "                         (docs/postcopy.md)\n"
        "      --postcopy-listen HOST  serve those pages on TCP at HOST (a\n"
        "                         name or address of this host that the\n"
        "                         destination's server can reach; port\n"
        "                         picked by the kernel) instead of a UNIX\n"
        "                         socket, for a destination on another host\n"
        "      --no-restore-on-demand  refuse the client's offer to hand a\n"
        "                         save file over (load-from-file), as a\n"
        "                         server predating it would: a restore then\n"
        "                         loads all of VRAM before the VM runs.\n"
        "                         Without it, a restore (migrate-incoming\n"
        "                         from a file, virsh restore) runs the VM\n"
        "                         once the state is in and loads VRAM from\n"
        "                         the file in the background and on first\n"
        "                         touch (docs/restore.md)\n"
        "      --data-slots N     slots of 4 MiB in that area, 2 to 64\n"
        "                         (default 32): QEMU reads into a free one\n"
        "                         and lends it to a migration channel until\n"
        "                         sent; with 2, as older servers offered,\n"
        "                         or none free, it copies the data out, so\n"
        "                         give at least QEMU's multifd channels + 4;\n"
        "                         a destination QEMU keeps one write in\n"
        "                         flight per 8 slots, up to 4 (patch 0071)\n"
        "      --no-migration     serve a device without migration support:\n"
        "                         the migration device features are refused,\n"
        "                         so QEMU blocks migration of this VM\n"
        "      --fault SPEC       TEST ONLY: inject a fault (repeatable);\n"
        "                         SPEC is corrupt-stream:OFFSET (flip, xor\n"
        "                         0xff, the byte at stream offset OFFSET of\n"
        "                         each outgoing migration stream),\n"
        "                         corrupt-stream:random[:SEED] (an offset\n"
        "                         drawn from SEED, random if omitted; the\n"
        "                         seed is printed at start-up), either with\n"
        "                         @N appended to corrupt only the N-th\n"
        "                         outgoing stream (1 for the first), or\n"
        "                         no-dma-log (DMA logging starts, stops and\n"
        "                         reports as usual but never marks the guest\n"
        "                         pages the device writes, so a migration\n"
        "                         can lose them), or postcopy-delay:MS (the\n"
        "                         post-copy page server waits MS ms, 1 to\n"
        "                         10000, before each reply, and so does a\n"
        "                         restore on demand before each read of\n"
        "                         its save file: a slow source), or\n"
        "                         read-delay:MS (each read of migration data\n"
        "                         waits MS ms, 1 to 10000, before it is\n"
        "                         served: a slow device), or\n"
        "                         write-delay:MS (each write of migration\n"
        "                         data waits MS ms, 1 to 10000, before it is\n"
        "                         applied: a slow destination), or\n"
        "                         late-dma:GPA (on its way out of RUNNING or\n"
        "                         PRE_COPY the device writes the 4 KiB page\n"
        "                         at guest address GPA, page-aligned, decimal\n"
        "                         or 0x hex, with 0x1a7ed3a0 by DMA, as a\n"
        "                         device finishing its DMA in flight would:\n"
        "                         only the downtime's RAM sync can see it),\n"
        "                         or bad-piece (a stop-copy read's reply\n"
        "                         that lists pieces of VRAM, data_vram, puts\n"
        "                         its first one past the end of VRAM: a\n"
        "                         hostile server), or shifted-piece (the\n"
        "                         same, but 4 KiB away inside VRAM: its\n"
        "                         client sends the wrong bytes, which the\n"
        "                         destination must refuse)\n"
        "  -h, --help             show this help and exit\n"
        "\n"
        "MIGRATION\n"
        "The device supports VFIO migration v2 (STOP_COPY, PRE_COPY and P2P:\n"
        "a VM with several vGPUs migrates) over vfio-user: QEMU drives the\n"
        "state machine with DEVICE_FEATURE\n"
        "and moves the stream (docs/migration-stream.md) with MIG_DATA_READ\n"
        "and MIG_DATA_WRITE.  The destination server must have the same\n"
        "--vram and --page-size; a mismatch fails the migration with both\n"
        "values named, and the source keeps running.  DMA logging reports\n"
        "the guest pages the device wrote.  A client that proposes the\n"
        "region_dirty_log extension (our QEMU patches) logs the guest's\n"
        "writes through the BAR2 mapping during pre-copy and sends them\n"
        "with REGION_DIRTY_LOG before each PRECOPY_INFO and before\n"
        "STOP_COPY, so hybrid tracking never hashes the mapping.\n"
        "\n"
        "Pre-copy pages go from VRAM without a copy (stream version 3,\n"
        "PAGES_LISTED records) where QEMU takes them from its read-only\n"
        "view of VRAM (data_vram) and every write to VRAM is seen (hybrid\n"
        "tracking, the guest's BAR2 writes logged): the destination checks\n"
        "each page against the hash listed with it, and a page written\n"
        "while it went is sent again.  With --stream-version 2 or 1 every\n"
        "page is copied.  In stop-copy, a page that only the guest CPU wrote\n"
        "since it went (QEMU's BAR2 log, in 4 KiB granules) goes as those\n"
        "pieces of it (stream version 4, PAGE_PIECES records; a page is cut\n"
        "into 64 pieces), with the page's hash where its last copy there\n"
        "may be torn.  From stream version 5 a page's hash is XXH3-64 of its\n"
        "pieces' XXH3-64 hashes (pieces of 1 KiB at least), so both sides\n"
        "hash only the pieces that changed; from version 6 a record of\n"
        "pieces is checksummed over its pieces' hashes, so each side reads\n"
        "a piece once.  Where the host lets shared\n"
        "memory have huge pages\n"
        "(/sys/kernel/mm/transparent_hugepage/shmem_enabled set to advise),\n"
        "the CPU backend's VRAM gets them: QEMU then maps VRAM 2 MiB at a\n"
        "time, which makes pages sent or received in place much cheaper.\n"
        "\n"
        "The dirty tracker's page hashes are XXH3-64 keyed with a seed drawn\n"
        "from getrandom() for\n"
        "each migration and never sent.  PRECOPY_INFO reports the bytes of\n"
        "round 0 (initial) and of the current later round (dirty) not yet\n"
        "read; once a round is drained, the next one starts when QEMU asks\n"
        "again (at most every 20 ms), so an idle device reports 0 and QEMU\n"
        "converges.  MIG_DATA_SIZE estimates what stop-copy would send now:\n"
        "pages left and pages the device wrote since the last round, the\n"
        "device state and the END record.  Auto-converge: after 3 rounds in\n"
        "a row in which the vGPU dirtied at least half as many bytes as the\n"
        "stream drained (the rounds do not shrink), the command processor is\n"
        "throttled 10%% more (up to 90%% of its time taken away), until the\n"
        "migration ends.\n"
        "\n"
        "STATISTICS\n"
        "The --stats-file JSON object has: state (RUNNING, STOP, PRE_COPY,\n"
        "STOP_COPY, RESUMING, RUNNING_P2P, PRE_COPY_P2P, ERROR); backend\n"
        "(\"cpu\", or the GPU model,\n"
        "number and CUDA driver version); migrations_started, bytes_sent,\n"
        "bytes_received (totals since start); precopy_bytes,\n"
        "stopcopy_bytes, rounds (passes that sent pages) and "
        "device_stopcopy_ms\n"
        "(STOP_COPY entry until the END record was read; null before) for\n"
        "the last migration; precopy_mode, dirty_track_mode;\n"
        "final_dirty_bytes (page bytes sent in stop-copy);\n"
        "stopcopy_estimate_bytes (the last MIG_DATA_SIZE answer before\n"
        "STOP_COPY, to compare with stopcopy_bytes) and stopcopy_hash_bytes\n"
        "(of it, the bytes QEMU's link would carry while stop-copy hashes\n"
        "the pages tracking could not see, e.g. all of VRAM with\n"
        "--dirty-track=hash, so that QEMU's downtime prediction includes\n"
        "that time); throttle_percent (the\n"
        "highest GPU throttle applied; the file is also rewritten when it\n"
        "rises), throttle_held_ms (the time it took from the command\n"
        "processor) and throttle_rounds (pre-copy rounds\n"
        "run throttled); stream_version (of the last stream written or\n"
        "read) and, as a source, stream_run_max (the most page data one\n"
        "of its records carries); pages_hashed and hash_ms (dirty\n"
        "tracking's hash\n"
        "passes); vram_checksum (XXH3-64, seed 0, of the array of every\n"
        "page's hash, that of its stream_version) and device_state_checksum "
        "(XXH3-64 of the\n"
        "state), 16 hex digits, null until taken: on the source after\n"
        "the reply to STOP_COPY -> STOP (outside the downtime; VRAM cannot\n"
        "change before the device runs again), on the destination once\n"
        "the server is idle after RESUMING -> STOP, usually after the VM\n"
        "has started (pages are hashed as they land, the state kept at\n"
        "the stop), or, after a post-copy or a restore on demand, once the\n"
        "last page is in; either way of VRAM and state as the load\n"
        "delivered them (the device may have run meanwhile), so equal\n"
        "values on both sides prove an exact copy; dma_logging\n"
        "(true while the client has DMA logging started; the file is\n"
        "also rewritten when it starts or stops); dma_log_reports (the\n"
        "DMA log reports answered since logging started) and\n"
        "dma_log_reports_idle (of those, reports of ranges with no\n"
        "writable mapped memory, where the device cannot have written: a\n"
        "client of qemu-patches/ asks for none); bar2_logged (the\n"
        "client logs guest writes to BAR2) and cpu_log_pages (4 KiB\n"
        "pages its logs reported in the last migration); stopcopy_reads\n"
        "and stopcopy_read_ms (the MIG_DATA_READs served in STOP_COPY and\n"
        "the time spent producing their data), precopy_reads and\n"
        "precopy_read_ms (the same in PRE_COPY); load_writes and\n"
        "load_write_ms (on the destination: the MIG_DATA_WRITEs served and\n"
        "the time spent decoding and applying them); data_hash_ms (of the\n"
        "time in those reads and writes, hashing page data, and on host\n"
        "VRAM copying it as it is hashed) and data_copy_ms (waiting for a\n"
        "GPU's copies that the hashing did not hide, and writing version 1\n"
        "records); shm_bytes (of the\n"
        "bytes read or written, those that moved through the client's\n"
        "shared memory area, negotiated as data_shm, not the socket);\n"
        "vram_piece_bytes (of those, stop-copy page bytes the client took\n"
        "from its read-only view of VRAM, negotiated as data_vram, or, on\n"
        "a destination, put in place through its writable one, not\n"
        "copied by the server); listed_bytes (pre-copy page bytes the\n"
        "client took from that view in PAGES_LISTED records, stream\n"
        "version 3); pieces_pages and pieces_bytes (stop-copy pages sent\n"
        "as the pieces the guest CPU wrote, stream version 4, and those\n"
        "pieces' bytes); stale_pages (on a destination, how many times such a\n"
        "page's data did not match its listed hash: the source's device\n"
        "wrote it while it went, and sends it again); gpu_direct_bytes (of "
        "those, the bytes a\n"
        "GPU copied to or from\n"
        "the area itself, without a staging copy); gpu_hashed_bytes (of\n"
        "the page data read or written, the bytes whose hashes the GPU\n"
        "computed as it copied them, so the CPU did not hash them);\n"
        "postcopy (true when the\n"
        "last migration switched over in post-copy), postcopy_pages (the\n"
        "pages it left to the page channel), postcopy_served (source:\n"
        "pages sent on it), postcopy_fetched, postcopy_faults,\n"
        "postcopy_zero_faults and postcopy_waits (destination: pages\n"
        "received, guest faults on missing pages and on pages of zeros,\n"
        "device accesses that waited), postcopy_ms and\n"
        "postcopy_max_fault_ms (from the load's end to the last page, and\n"
        "the longest a fault waited), postcopy_on_demand (the VM ran before\n"
        "the last page came), postcopy_done and postcopy_verified (every\n"
        "page is in; their digest matched the source's); restore_on_demand\n"
        "(the last load came from a save file read on demand: the\n"
        "postcopy_* destination counters describe its pages);\n"
        "last_error (\"\" if none).\n"
        "\n"
        "SIZE is a number with an optional K, M, G or T suffix (powers of\n"
        "1024).  The server keeps device state (VRAM, registers) across\n"
        "client connections; DMA mappings and interrupts are released when a\n"
        "client disconnects.  SIGTERM or SIGINT stops it and removes the\n"
        "socket.  Exit status: 0 after a clean stop, 1 on errors, 2 on\n"
        "usage errors.\n"
        "\n"
        "Environment: VGMIG_LOG_TIME (any value) puts the real-time clock\n"
        "in front of every log line as [SECONDS.MICROSECONDS], the form of\n"
        "QEMU's QMP event timestamps.\n");
}

struct options {
    const char *socket;
    uint64_t vram;
    uint64_t page;
    const char *backend;
    const char *stats_file;
    struct mig_fault fault;
    bool no_migration;
    bool no_region_log;
    bool no_data_shm;
    bool no_data_vram;
    bool no_data_plane;
    bool no_device_thread;
    bool no_postcopy;
    bool no_restore_on_demand;
    const char *postcopy_listen;
    unsigned data_slots; /* 0: the server's default */
    enum mig_precopy_mode precopy;
    enum mig_track_mode track;
    enum mig_gpu_hash gpu_hash;
    unsigned migration_threads; /* 0: default_migration_threads() */
    unsigned stream_version;    /* 0: mig's default (MIG_STREAM_VERSION) */
    bool small_records;
    bool prealloc;
};

enum {
    OPT_STATS_FILE = 256,
    OPT_FAULT,
    OPT_NO_MIGRATION,
    OPT_PRECOPY,
    OPT_DIRTY_TRACK,
    OPT_GPU_HASH,
    OPT_NO_REGION_LOG,
    OPT_NO_DATA_SHM,
    OPT_NO_DATA_VRAM,
    OPT_NO_DATA_PLANE,
    OPT_NO_DEVICE_THREAD,
    OPT_NO_POSTCOPY,
    OPT_NO_RESTORE_ON_DEMAND,
    OPT_POSTCOPY_LISTEN,
    OPT_DATA_SLOTS,
    OPT_MIGRATION_THREADS,
    OPT_STREAM_VERSION,
    OPT_SMALL_RECORDS,
    OPT_PREALLOC,
};

/* A decimal u64 that is all of @text. */
static int parse_u64(const char *text, uint64_t *out)
{
    char *end;

    errno = 0;
    *out = strtoull(text, &end, 10);
    return errno || end == text || *end || *text == '-' ? -1 : 0;
}

/* --fault corrupt-stream:OFFSET | corrupt-stream:random[:SEED] |
 * no-dma-log | postcopy-delay:MS | read-delay:MS | write-delay:MS |
 * late-dma:GPA | bad-piece */
/* corrupt-stream:SPEC[@N]: SPEC is OFFSET or random[:SEED]. */
static int parse_corrupt(const char *arg, struct mig_fault *f)
{
    char spec[64];
    char *at;

    if (strlen(arg) >= sizeof(spec)) {
        return -1;
    }
    strcpy(spec, arg);
    at = strchr(spec, '@');
    if (at) {
        *at = '\0';
        if (parse_u64(at + 1, &f->session) < 0 || f->session == 0) {
            return -1;
        }
    }
    arg = spec;
    f->corrupt = true;
    if (strncmp(arg, "random", 6) != 0) {
        return parse_u64(arg, &f->offset);
    }
    f->random = true;
    if (arg[6] == ':') {
        return parse_u64(arg + 7, &f->seed);
    }
    if (arg[6] || getrandom(&f->seed, sizeof(f->seed), 0) != 8) {
        return -1;
    }
    return 0;
}

/* A fault's delay: 1 to 10000 ms. */
static int parse_delay_ms(const char *text, unsigned *ms)
{
    char *end;
    unsigned long v = strtoul(text, &end, 10);

    if (end == text || *end || *text == '-' || v < 1 || v > 10000) {
        return -1;
    }
    *ms = (unsigned)v;
    return 0;
}

static int parse_fault(const char *spec, struct mig_fault *f)
{
    static const char prefix[] = "corrupt-stream:";

    static const char delay[] = "postcopy-delay:";
    static const char read_delay[] = "read-delay:";
    static const char write_delay[] = "write-delay:";
    static const char late[] = "late-dma:";
    char *end;

    if (strcmp(spec, "no-dma-log") == 0) {
        f->no_dma_log = true;
        return 0;
    }
    if (strcmp(spec, "bad-piece") == 0) {
        f->bad_piece = true;
        return 0;
    }
    if (strcmp(spec, "shifted-piece") == 0) {
        f->shifted_piece = true;
        return 0;
    }
    if (strncmp(spec, delay, sizeof(delay) - 1) == 0) {
        return parse_delay_ms(spec + sizeof(delay) - 1, &f->postcopy_delay_ms);
    }
    if (strncmp(spec, read_delay, sizeof(read_delay) - 1) == 0) {
        return parse_delay_ms(spec + sizeof(read_delay) - 1, &f->read_delay_ms);
    }
    if (strncmp(spec, write_delay, sizeof(write_delay) - 1) == 0) {
        return parse_delay_ms(spec + sizeof(write_delay) - 1,
                              &f->write_delay_ms);
    }
    if (strncmp(spec, late, sizeof(late) - 1) == 0) {
        const char *gpa = spec + sizeof(late) - 1;

        errno = 0;
        f->late_dma_gpa = strtoull(gpa, &end, 0);
        f->late_dma = true;
        return errno || end == gpa || *end || *gpa == '-' ||
                       f->late_dma_gpa % 4096
                   ? -1
                   : 0;
    }
    if (strncmp(spec, prefix, sizeof(prefix) - 1) != 0) {
        return -1;
    }
    return parse_corrupt(spec + sizeof(prefix) - 1, f);
}

/* Size option --@name: also a power of two. */
static int parse_size_opt(const char *name, const char *text, uint64_t min,
                          uint64_t max, uint64_t *out)
{
    if (vg_parse_size_opt("vgpu-server", name, text, min, max, out) < 0) {
        return -1;
    }
    if (*out & (*out - 1)) {
        fprintf(stderr, "vgpu-server: --%s: '%s' is not a power of two\n", name,
                text);
        return -1;
    }
    return 0;
}

/* --@opt: a decimal @what from @min to @max, all of @text. */
static int parse_uint_opt(const char *opt, const char *what, const char *text,
                          unsigned min, unsigned max, unsigned *out)
{
    uint64_t v;

    if (parse_u64(text, &v) < 0 || v < min || v > max) {
        fprintf(stderr, "vgpu-server: --%s: '%s' is not a %s from %u to %u\n",
                opt, text, what, min, max);
        return -1;
    }
    *out = (unsigned)v;
    return 0;
}

static int parse_opt(int c, struct options *o)
{
    enum vg_log_level level;

    switch (c) {
    case 's':
        o->socket = optarg;
        return 0;
    case 'v':
        return parse_size_opt("vram", optarg, PAGE_MIN, UINT64_MAX >> 1,
                              &o->vram);
    case 'p':
        return parse_size_opt("page-size", optarg, PAGE_MIN, PAGE_MAX,
                              &o->page);
    case 'b':
        o->backend = optarg; /* checked when the device is created */
        return 0;
    case 'l':
        if (!vg_log_parse_level(optarg, &level)) {
            return -1;
        }
        vg_log_set_level(level);
        return 0;
    case OPT_STATS_FILE:
        o->stats_file = optarg;
        return 0;
    case OPT_FAULT:
        return parse_fault(optarg, &o->fault);
    case OPT_NO_MIGRATION:
        o->no_migration = true;
        return 0;
    case OPT_PRECOPY:
        return mig_precopy_mode_parse(optarg, &o->precopy);
    case OPT_DIRTY_TRACK:
        return mig_track_mode_parse(optarg, &o->track);
    case OPT_GPU_HASH:
        return mig_gpu_hash_parse(optarg, &o->gpu_hash);
    case OPT_NO_REGION_LOG:
        o->no_region_log = true;
        return 0;
    case OPT_NO_DATA_SHM:
        o->no_data_shm = true;
        return 0;
    case OPT_NO_DATA_VRAM:
        o->no_data_vram = true;
        return 0;
    case OPT_NO_DATA_PLANE:
        o->no_data_plane = true;
        return 0;
    case OPT_NO_DEVICE_THREAD:
        o->no_device_thread = true;
        return 0;
    case OPT_NO_POSTCOPY:
        o->no_postcopy = true;
        return 0;
    case OPT_NO_RESTORE_ON_DEMAND:
        o->no_restore_on_demand = true;
        return 0;
    case OPT_POSTCOPY_LISTEN:
        o->postcopy_listen = optarg;
        return optarg[0] ? 0 : -1;
    case OPT_DATA_SLOTS:
        return parse_uint_opt("data-slots", "number", optarg,
                              VFU_DATA_SLOTS_MIN, VFU_DATA_SLOTS_MAX,
                              &o->data_slots);
    case OPT_MIGRATION_THREADS:
        return parse_uint_opt("migration-threads", "number", optarg, 1,
                              DT_POOL_MAX_THREADS, &o->migration_threads);
    case OPT_STREAM_VERSION:
        return parse_uint_opt("stream-version", "version", optarg,
                              MIG_STREAM_VERSION_MIN, MIG_STREAM_VERSION_MAX,
                              &o->stream_version);
    case OPT_SMALL_RECORDS:
        o->small_records = true;
        return 0;
    case OPT_PREALLOC:
        o->prealloc = true;
        return 0;
    case 'h':
        usage(stdout);
        exit(0);
    default:
        return -1;
    }
}

static int parse_args(int argc, char **argv, struct options *o)
{
    static const struct option longopts[] = {
        {"socket", required_argument, NULL, 's'},
        {"vram", required_argument, NULL, 'v'},
        {"page-size", required_argument, NULL, 'p'},
        {"backend", required_argument, NULL, 'b'},
        {"log-level", required_argument, NULL, 'l'},
        {"stats-file", required_argument, NULL, OPT_STATS_FILE},
        {"fault", required_argument, NULL, OPT_FAULT},
        {"no-migration", no_argument, NULL, OPT_NO_MIGRATION},
        {"precopy", required_argument, NULL, OPT_PRECOPY},
        {"dirty-track", required_argument, NULL, OPT_DIRTY_TRACK},
        {"gpu-hash", required_argument, NULL, OPT_GPU_HASH},
        {"no-region-log", no_argument, NULL, OPT_NO_REGION_LOG},
        {"no-data-shm", no_argument, NULL, OPT_NO_DATA_SHM},
        {"no-data-vram", no_argument, NULL, OPT_NO_DATA_VRAM},
        {"no-data-plane", no_argument, NULL, OPT_NO_DATA_PLANE},
        {"no-device-thread", no_argument, NULL, OPT_NO_DEVICE_THREAD},
        {"no-postcopy", no_argument, NULL, OPT_NO_POSTCOPY},
        {"no-restore-on-demand", no_argument, NULL, OPT_NO_RESTORE_ON_DEMAND},
        {"postcopy-listen", required_argument, NULL, OPT_POSTCOPY_LISTEN},
        {"data-slots", required_argument, NULL, OPT_DATA_SLOTS},
        {"migration-threads", required_argument, NULL, OPT_MIGRATION_THREADS},
        {"stream-version", required_argument, NULL, OPT_STREAM_VERSION},
        {"small-records", no_argument, NULL, OPT_SMALL_RECORDS},
        {"prealloc", no_argument, NULL, OPT_PREALLOC},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;

    while ((c = getopt_long(argc, argv, "s:v:p:b:l:h", longopts, NULL)) != -1) {
        if (parse_opt(c, o) < 0) {
            if (optarg) {
                fprintf(stderr, "vgpu-server: bad option value '%s'\n", optarg);
            } else {
                fprintf(stderr, "vgpu-server: bad option '%s'\n",
                        argv[optind - 1]);
            }
            return -1;
        }
    }
    if (optind < argc || !o->socket || !o->vram) {
        fprintf(stderr, "vgpu-server: %s\n",
                optind < argc ? "unexpected argument"
                              : "--socket and --vram are required");
        return -1;
    }
    if (o->vram < o->page) {
        fprintf(stderr, "vgpu-server: --vram is smaller than --page-size\n");
        return -1;
    }
    return 0;
}

/* Block the stop signals and return a signalfd for them. */
static int stop_signals_fd(void)
{
    sigset_t set;

    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    signal(SIGPIPE, SIG_IGN);
    if (sigprocmask(SIG_BLOCK, &set, NULL) < 0) {
        return -1;
    }
    return signalfd(-1, &set, SFD_CLOEXEC);
}

/* Say loudly which test-only faults are armed. */
static void warn_faults(const struct mig_fault *f)
{
    if (f->random) {
        vg_warn(
            "TEST ONLY fault injection: corrupt-stream:random seed %" PRIu64,
            f->seed);
    } else if (f->corrupt) {
        vg_warn("TEST ONLY fault injection: corrupt-stream offset %" PRIu64,
                f->offset);
    }
    if (f->corrupt && f->session) {
        vg_warn("TEST ONLY fault injection: only outgoing stream %" PRIu64
                " is corrupted",
                f->session);
    }
    if (f->no_dma_log) {
        vg_warn("TEST ONLY fault injection: no-dma-log (device writes to "
                "guest RAM are not DMA-logged)");
    }
    if (f->bad_piece) {
        vg_warn("TEST ONLY fault injection: bad-piece (stop-copy replies "
                "point past VRAM)");
    }
    if (f->shifted_piece) {
        vg_warn("TEST ONLY fault injection: shifted-piece (stop-copy replies "
                "point 4 KiB away from their pages)");
    }
    if (f->late_dma) {
        vg_warn("TEST ONLY fault injection: late-dma (the device writes guest "
                "page 0x%" PRIx64 " as it leaves a running state)",
                f->late_dma_gpa);
    }
    if (f->postcopy_delay_ms) {
        vg_warn("TEST ONLY fault injection: the post-copy page server waits "
                "%u ms before each reply",
                f->postcopy_delay_ms);
    }
    if (f->read_delay_ms) {
        vg_warn("TEST ONLY fault injection: each read of migration data waits "
                "%u ms",
                f->read_delay_ms);
    }
    if (f->write_delay_ms) {
        vg_warn("TEST ONLY fault injection: each write of migration data "
                "waits %u ms",
                f->write_delay_ms);
    }
}

/*
 * --migration-threads' default: a quarter of the CPUs this process may run
 * on, 2 to 4.  On a 16-CPU machine running both ends of a migration, 4
 * threads moved VRAM faster than 2 and than 8 (docs/data-path.md); two
 * CPUs keep the 2 that was the default everywhere.
 */
static unsigned default_migration_threads(void)
{
    cpu_set_t cpus;
    int n = 2;

    if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0) {
        n = CPU_COUNT(&cpus);
    }
    return n / 4 < 2 ? 2 : n / 4 > 4 ? 4 : (unsigned)(n / 4);
}

int main(int argc, char **argv)
{
    struct options o = {.page = 64u << 10, .backend = "cpu"};
    struct vfu_server_config cfg;
    struct vfu_server *srv;
    struct vg_error err;
    int sfd, ret;

    vg_log_set_prog("vgpu-server");
    if (parse_args(argc, argv, &o) < 0) {
        fprintf(stderr, "Try 'vgpu-server --help'.\n");
        return 2;
    }
    sfd = stop_signals_fd();
    if (sfd < 0) {
        vg_err("signalfd: %m");
        return 1;
    }
    cfg = (struct vfu_server_config){
        .socket_path = o.socket,
        .gpu = {.vram_size = o.vram,
                .page_size = (uint32_t)o.page,
                .backend = o.backend,
                .prealloc = o.prealloc},
        .stats_path = o.stats_file,
        .fault = o.fault,
        .no_migration = o.no_migration,
        .no_region_log = o.no_region_log,
        .no_data_shm = o.no_data_shm,
        .no_data_vram = o.no_data_vram,
        .no_data_plane = o.no_data_plane,
        .device_thread = !o.no_device_thread,
        .no_postcopy = o.no_postcopy,
        .no_restore_on_demand = o.no_restore_on_demand,
        .postcopy_listen = o.postcopy_listen,
        .data_slots = o.data_slots,
        .precopy = o.precopy,
        .track = o.track,
        .gpu_hash = o.gpu_hash,
        .migration_threads = o.migration_threads ? o.migration_threads
                                                 : default_migration_threads(),
        .stream_version = o.stream_version,
        .small_records = o.small_records,
    };
    warn_faults(&o.fault);
    if (vfu_server_new(&cfg, &srv, &err) < 0) {
        vg_err("%s", err.msg);
        return 1;
    }
    ret = vfu_server_run(srv, sfd, &err);
    if (ret < 0) {
        vg_err("%s", err.msg);
    }
    vfu_server_free(srv);
    close(sfd);
    return ret < 0 ? 1 : 0;
}
