/*
 * vfu-proto.h -- the vfio-user wire format (docs/interop/vfio-user.rst of
 * the pinned QEMU), written for vgmig.
 *
 * Every message is a 16-byte header followed by a command payload; all
 * fields are in host byte order.  Structs here describe payloads only (the
 * header is separate) and are packed by construction: their sizes are
 * asserted below.  VFIO flag and index values come from <linux/vfio.h>.
 */
#ifndef VFU_PROTO_H
#define VFU_PROTO_H

#include <stdint.h>

enum vfu_command {
    VFU_CMD_VERSION = 1,
    VFU_CMD_DMA_MAP = 2,
    VFU_CMD_DMA_UNMAP = 3,
    VFU_CMD_DEVICE_GET_INFO = 4,
    VFU_CMD_DEVICE_GET_REGION_INFO = 5,
    VFU_CMD_DEVICE_GET_REGION_IO_FDS = 6,
    VFU_CMD_DEVICE_GET_IRQ_INFO = 7,
    VFU_CMD_DEVICE_SET_IRQS = 8,
    VFU_CMD_REGION_READ = 9,
    VFU_CMD_REGION_WRITE = 10,
    VFU_CMD_DMA_READ = 11,
    VFU_CMD_DMA_WRITE = 12,
    VFU_CMD_DEVICE_RESET = 13,
    VFU_CMD_DIRTY_PAGES = 14,
    VFU_CMD_REGION_WRITE_MULTI = 15,
    VFU_CMD_DEVICE_FEATURE = 16,
    VFU_CMD_MIG_DATA_READ = 17,
    VFU_CMD_MIG_DATA_WRITE = 18,
    /* vgmig extension, negotiated with "precopy_info" in the "migration"
     * capability: VFIO_MIG_GET_PRECOPY_INFO */
    VFU_CMD_MIG_GET_PRECOPY_INFO = 19,
    /* vgmig extension, negotiated with "region_dirty_log": the guest's
     * writes to an mmap'ed region area, logged by the client */
    VFU_CMD_REGION_DIRTY_LOG = 20,
    /* vgmig extension, negotiated with "data_shm": migration data through
     * a shared memory area instead of the socket (docs/data-path.md) */
    VFU_CMD_MIG_DATA_SHM = 21,
    VFU_CMD_MIG_DATA_READ_SHM = 22,
    VFU_CMD_MIG_DATA_WRITE_SHM = 23,
    /* vgmig extension, negotiated with "postcopy" (docs/postcopy.md): the
     * client's userfaultfd over its mmaps of regions, and the client's
     * word that the coming stop-copy is a post-copy switchover */
    VFU_CMD_REGION_UFFD = 24,
    VFU_CMD_MIG_POSTCOPY = 25,
    /* vgmig extension, negotiated with "load-from-file" (docs/restore.md):
     * migration data as extents of a save file the server reads itself */
    VFU_CMD_MIG_DATA_FILE = 26,
    /* vgmig extension, negotiated with "postcopy-dma" (docs/postcopy.md):
     * on a post-copy destination, the server's accesses to guest RAM
     * wait, through a userfaultfd of the server's that the client polls,
     * for the pages not received yet */
    VFU_CMD_DMA_UFFD = 27,
    /* vgmig extension, negotiated with "data_vram" (docs/data-path.md):
     * a read-only fd of VRAM, so that a stop-copy read's reply may leave
     * page data there (VFU_MIG_SHM_IO_PIECES) */
    VFU_CMD_MIG_DATA_VRAM = 28,
};

/* Header flags */
#define VFU_FLAG_TYPE_MASK 0xfu
#define VFU_FLAG_REQUEST   0x0u
#define VFU_FLAG_REPLY     0x1u
#define VFU_FLAG_NO_REPLY  0x10u
#define VFU_FLAG_ERROR     0x20u

#define VFU_VERSION_MAJOR 0
#define VFU_VERSION_MINOR 0

struct vfu_hdr {
    uint16_t id;
    uint16_t command;
    uint32_t size; /* whole message, header included */
    uint32_t flags;
    uint32_t error; /* errno in an error reply */
};

struct vfu_version {
    uint16_t major;
    uint16_t minor;
    /* followed by optional NUL-terminated JSON */
};

struct vfu_dma_map {
    uint32_t argsz;
    uint32_t flags;  /* VFIO_DMA_MAP_FLAG_READ | _WRITE */
    uint64_t offset; /* in the passed fd */
    uint64_t iova;
    uint64_t size;
};

struct vfu_dma_unmap {
    uint32_t argsz;
    uint32_t flags; /* 0 or VFIO_DMA_UNMAP_FLAG_ALL */
    uint64_t iova;
    uint64_t size;
};

struct vfu_device_info {
    uint32_t argsz;
    uint32_t flags;
    uint32_t num_regions;
    uint32_t num_irqs;
};

struct vfu_region_info {
    uint32_t argsz;
    uint32_t flags;
    uint32_t index;
    uint32_t cap_offset;
    uint64_t size;
    uint64_t offset;
};

struct vfu_cap_header {
    uint16_t id;
    uint16_t version;
    uint32_t next;
};

struct vfu_sparse_mmap {
    struct vfu_cap_header header;
    uint32_t nr_areas;
    uint32_t reserved;
    struct {
        uint64_t offset;
        uint64_t size;
    } areas[];
};

struct vfu_irq_info {
    uint32_t argsz;
    uint32_t flags;
    uint32_t index;
    uint32_t count;
};

struct vfu_irq_set {
    uint32_t argsz;
    uint32_t flags;
    uint32_t index;
    uint32_t start;
    uint32_t count;
    /* followed by count booleans for VFIO_IRQ_SET_DATA_BOOL */
};

struct vfu_region_rw {
    uint64_t offset;
    uint32_t region;
    uint32_t count;
    /* followed by count data bytes (write request, read reply) */
};

/*
 * VFIO_USER_DEVICE_FEATURE: struct vfio_device_feature (argsz = reply
 * payload size at most, flags = feature index | GET/SET/PROBE), then the
 * feature's data.  Feature indices and migration flags that Linux 6.1's
 * <linux/vfio.h> lacks are defined here.
 */
struct vfu_device_feature {
    uint32_t argsz;
    uint32_t flags;
    /* followed by the feature data */
};

#define VFU_FEATURE_MIGRATION          1
#define VFU_FEATURE_MIG_DEVICE_STATE   2
#define VFU_FEATURE_DMA_LOGGING_START  6
#define VFU_FEATURE_DMA_LOGGING_STOP   7
#define VFU_FEATURE_DMA_LOGGING_REPORT 8
#define VFU_FEATURE_MIG_DATA_SIZE      9
#define VFU_MIGRATION_STOP_COPY        (1u << 0)
#define VFU_MIGRATION_PRE_COPY         (1u << 2)

struct vfu_feature_migration {
    uint64_t flags; /* VFU_MIGRATION_* */
};

struct vfu_feature_mig_state {
    uint32_t device_state; /* enum mig_state */
    int32_t data_fd;       /* always -1 in vfio-user */
};

struct vfu_feature_mig_data_size {
    uint64_t stop_copy_length;
};

/* DMA_LOGGING_START data: the ranges are embedded. */
struct vfu_dma_logging_control {
    uint64_t page_size;
    uint32_t num_ranges;
    uint32_t reserved;
    /* followed by num_ranges struct vfu_dma_logging_range */
};

struct vfu_dma_logging_range {
    uint64_t iova;
    uint64_t length;
};

/* DMA_LOGGING_REPORT data; the reply appends the bitmap (u64s). */
struct vfu_dma_logging_report {
    uint64_t iova;
    uint64_t length;
    uint64_t page_size;
};

/* MIG_DATA_READ request (no data) and reply, MIG_DATA_WRITE request. */
struct vfu_mig_data {
    uint32_t argsz;
    uint32_t size;
    /* followed by size data bytes */
};

/* MIG_DATA_SHM request (argsz, flags) and reply, which passes the area's
 * fd: @slots slots of @slot_size bytes each, slot i at i * slot_size. */
struct vfu_mig_shm {
    uint32_t argsz;
    uint32_t flags;
    uint32_t slots;
    uint32_t slot_size;
};

/* MIG_DATA_READ_SHM and MIG_DATA_WRITE_SHM, request and reply: @size
 * bytes of migration data at the start of slot @slot.  @flags is 0 in
 * requests but for VFU_MIG_SHM_IO_PIECES, with "data_vram" negotiated: in
 * a read's, the reply may list pieces; in a write's, a struct
 * vfu_mig_pieces follows the request, its data being those pieces, in
 * order, of the slot and of VRAM (page data the client put in place
 * through MIG_DATA_VRAM's writable fd).  A read's reply sets
 * VFU_MIG_SHM_IO_END when, in STOP_COPY, its data end the device's (a
 * further read would get none), and VFU_MIG_SHM_IO_PIECES when a struct
 * vfu_mig_pieces follows it. */
#define VFU_MIG_SHM_IO_END    1u
#define VFU_MIG_SHM_IO_PIECES 2u
struct vfu_mig_shm_io {
    uint32_t argsz;
    uint32_t slot;
    uint32_t size;
    uint32_t flags;
};

/* MIG_DATA_VRAM request (argsz, flags) and reply, which passes an fd of
 * VRAM, @size bytes: read-only, or with VFU_MIG_VRAM_WRITE, asked for in
 * RESUMING only, writable (where a destination receives page data). */
#define VFU_MIG_VRAM_WRITE 1u
struct vfu_mig_vram {
    uint32_t argsz;
    uint32_t flags;
    uint64_t size;
};

/* After a read's reply with VFU_MIG_SHM_IO_PIECES: the read's @size
 * bytes are @count pieces, in order, each @len bytes at @offset of the
 * slot (@where VFU_MIG_PIECE_SLOT) or of VRAM (VFU_MIG_PIECE_VRAM, as
 * MIG_DATA_VRAM's fd maps it, unchanged until the device leaves
 * STOP_COPY). */
#define VFU_MIG_PIECE_SLOT 0u
#define VFU_MIG_PIECE_VRAM 1u
#define VFU_MIG_PIECES_MAX 64u
struct vfu_mig_piece {
    uint64_t offset;
    uint32_t len;
    uint32_t where;
};
struct vfu_mig_pieces {
    uint32_t count;
    uint32_t pass; /* a read's in PRE_COPY: mig_read_pass(); else 0 */
    struct vfu_mig_piece piece[VFU_MIG_PIECES_MAX]; /* @count sent */
};

/* MIG_GET_PRECOPY_INFO: the request is argsz and flags only. */
struct vfu_precopy_info {
    uint32_t argsz;
    uint32_t flags;
    uint64_t initial_bytes;
    uint64_t dirty_bytes;
};

/* REGION_DIRTY_LOG request: one bit per pgsize bytes of [offset, +size),
 * in 64-bit little-endian words following the header. */
struct vfu_region_dirty_log {
    uint32_t argsz;
    uint32_t region;
    uint32_t pgsize;
    uint32_t flags;
    uint64_t offset;
    uint64_t size;
};

/* REGION_UFFD request, with one fd (a userfaultfd of the client, API
 * done): the client's mmaps of regions, nr_areas entries following. */
struct vfu_region_uffd {
    uint32_t argsz;
    uint32_t flags;
    uint32_t nr_areas;
    uint32_t reserved;
};

struct vfu_uffd_area {
    uint32_t region;
    uint32_t reserved;
    uint64_t offset; /* in the region */
    uint64_t size;
    uint64_t vaddr; /* in the client's address space */
};

/* MIG_POSTCOPY request and reply. */
struct vfu_mig_postcopy {
    uint32_t argsz;
    uint32_t flags;
};

/* MIG_DATA_FILE: this header, then @count extents; the first of a load
 * brings the file (VFU_MIG_DATA_FILE_FD, one fd). */
struct vfu_mig_data_file {
    uint32_t argsz; /* 16 + 16 * count */
    uint32_t flags;
    uint32_t count; /* 1 .. VFU_MIG_DATA_FILE_MAX */
    uint32_t reserved;
};

struct vfu_file_extent {
    uint64_t offset;
    uint64_t size; /* >= 1 */
};

#define VFU_MIG_DATA_FILE_FD  (1u << 0)
#define VFU_MIG_DATA_FILE_MAX 1024u

#define VFU_UFFD_MAX_AREAS 16u

/* DMA_UFFD request (and reply header): @op, count and reserved 0.  The
 * reply to ADVISE carries the server's userfaultfd; the reply to LISTEN
 * @count areas following: where the server mapped each DMA region it
 * registered with it. */
struct vfu_dma_uffd {
    uint32_t argsz;
    uint32_t op;
    uint32_t count;
    uint32_t reserved;
};

struct vfu_dma_uffd_area {
    uint64_t iova;
    uint64_t size;
    uint64_t vaddr;
};

enum {
    VFU_DMA_UFFD_ADVISE = 1, /* create the userfaultfd, register nothing */
    VFU_DMA_UFFD_LISTEN = 2, /* register the mappings of guest RAM */
    VFU_DMA_UFFD_END = 3,    /* unregister them, close it */
};

#define VFU_DMA_UFFD_MAX_AREAS 1024u

_Static_assert(sizeof(struct vfu_region_uffd) == 16, "region uffd");
_Static_assert(sizeof(struct vfu_uffd_area) == 32, "uffd area");
_Static_assert(sizeof(struct vfu_mig_postcopy) == 8, "mig postcopy");
_Static_assert(sizeof(struct vfu_dma_uffd) == 16, "dma uffd");
_Static_assert(sizeof(struct vfu_dma_uffd_area) == 24, "dma uffd area");
_Static_assert(sizeof(struct vfu_mig_data_file) == 16, "mig data file");
_Static_assert(sizeof(struct vfu_file_extent) == 16, "file extent");
_Static_assert(sizeof(struct vfu_hdr) == 16, "vfio-user header");
_Static_assert(sizeof(struct vfu_region_dirty_log) == 32, "region dirty log");
_Static_assert(sizeof(struct vfu_device_feature) == 8, "feature header");
_Static_assert(sizeof(struct vfu_feature_mig_state) == 8, "mig state");
_Static_assert(sizeof(struct vfu_dma_logging_control) == 16, "logging");
_Static_assert(sizeof(struct vfu_dma_logging_report) == 24, "report");
_Static_assert(sizeof(struct vfu_mig_data) == 8, "mig data");
_Static_assert(sizeof(struct vfu_mig_shm) == 16, "mig shm");
_Static_assert(sizeof(struct vfu_mig_shm_io) == 16, "mig shm io");
_Static_assert(sizeof(struct vfu_precopy_info) == 24, "precopy info");
_Static_assert(sizeof(struct vfu_version) == 4, "version payload");
_Static_assert(sizeof(struct vfu_dma_map) == 32, "dma map payload");
_Static_assert(sizeof(struct vfu_dma_unmap) == 24, "dma unmap payload");
_Static_assert(sizeof(struct vfu_device_info) == 16, "device info payload");
_Static_assert(sizeof(struct vfu_region_info) == 32, "region info payload");
_Static_assert(sizeof(struct vfu_sparse_mmap) == 16, "sparse mmap cap");
_Static_assert(sizeof(struct vfu_irq_info) == 16, "irq info payload");
_Static_assert(sizeof(struct vfu_irq_set) == 20, "irq set payload");
_Static_assert(sizeof(struct vfu_region_rw) == 16, "region rw payload");

#endif
