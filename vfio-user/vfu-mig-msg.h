/*
 * vfu-mig-msg.h -- pure parsing and validation of the vfio-user migration
 * messages: DEVICE_FEATURE (and the data of its migration and DMA logging
 * features), MIG_DATA_READ, MIG_DATA_WRITE and the vgmig extension
 * MIG_GET_PRECOPY_INFO.  Like vfu-msg.h: payload in, host values out,
 * -errno with a message on anything malformed; no I/O, no device state.
 */
#ifndef VFU_MIG_MSG_H
#define VFU_MIG_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "vfu-dma.h"
#include "vfu-proto.h"

struct vfu_feature_req {
    uint32_t argsz; /* reply payload size the client accepts */
    uint32_t index; /* VFU_FEATURE_* */
    bool get, set, probe;
    const uint8_t *data; /* the feature data after the 8-byte header */
    size_t data_len;
};

/* DEVICE_FEATURE: argsz >= 8, known flag bits only, at least one of
 * GET/SET/PROBE, GET and SET together only with PROBE. */
int vfu_parse_feature(const void *p, size_t len, struct vfu_feature_req *out,
                      struct vg_error *err);
/* The client's argsz leaves room for @data_out bytes of reply data. */
int vfu_feature_check_argsz(const struct vfu_feature_req *f, size_t data_out,
                            struct vg_error *err);
/* MIG_DEVICE_STATE SET: exactly a struct vfu_feature_mig_state. */
int vfu_parse_mig_state(const struct vfu_feature_req *f, uint32_t *state,
                        struct vg_error *err);
/* DMA_LOGGING_START SET: the control header and exactly num_ranges
 * (1..VFU_DMA_LOG_MAX_RANGES) ranges, copied into @ranges. */
int vfu_parse_logging_start(const struct vfu_feature_req *f,
                            uint64_t *page_size,
                            struct vfu_dma_log_range *ranges, uint32_t *n,
                            struct vg_error *err);
/* DMA_LOGGING_REPORT GET: exactly a report request, page size a power of
 * two, length > 0; the bitmap (*@bitmap_bytes) at most @max_bitmap bytes
 * and within the client's argsz. */
int vfu_parse_logging_report(const struct vfu_feature_req *f, size_t max_bitmap,
                             struct vfu_dma_logging_report *out,
                             size_t *bitmap_bytes, struct vg_error *err);

/* MIG_DATA_READ: exactly a struct vfu_mig_data, size <= @max_xfer and
 * argsz >= 8 + size. */
int vfu_parse_mig_data_read(const void *p, size_t len, uint32_t max_xfer,
                            uint32_t *size, struct vg_error *err);
/* MIG_DATA_WRITE: header then exactly size bytes, size <= @max_xfer. */
int vfu_parse_mig_data_write(const void *p, size_t len, uint32_t max_xfer,
                             const uint8_t **data, uint32_t *size,
                             struct vg_error *err);
/* MIG_DATA_SHM: exactly argsz and flags, argsz >= 16, flags 0. */
int vfu_parse_mig_shm(const void *p, size_t len, struct vg_error *err);
/* MIG_DATA_READ_SHM, MIG_DATA_WRITE_SHM: exactly a struct vfu_mig_shm_io,
 * argsz >= 16, no flags but those of @flags_ok, slot < @slots, size <=
 * @slot_size. */
int vfu_parse_mig_shm_io(const void *p, size_t len, uint32_t slots,
                         uint32_t slot_size, uint32_t flags_ok,
                         struct vfu_mig_shm_io *out, struct vg_error *err);
/* MIG_DATA_WRITE_SHM: as vfu_parse_mig_shm_io, with VFU_MIG_SHM_IO_PIECES
 * allowed if @pieces_ok; with that flag a struct vfu_mig_pieces follows,
 * exactly its @count pieces, 1..VFU_MIG_PIECES_MAX, pass 0, each of
 * 1 byte or more in the slot (inside @slot_size) or in VRAM (which the
 * migration module checks), adding up to the write's size; without it
 * *@pieces holds 0 pieces. */
int vfu_parse_mig_shm_write(const void *p, size_t len, uint32_t slots,
                            uint32_t slot_size, bool pieces_ok,
                            struct vfu_mig_shm_io *io,
                            struct vfu_mig_pieces *pieces,
                            struct vg_error *err);
/* MIG_DATA_VRAM: exactly argsz and flags, argsz >= 16, flags 0 or
 * VFU_MIG_VRAM_WRITE (*@flags). */
int vfu_parse_mig_vram(const void *p, size_t len, uint32_t *flags,
                       struct vg_error *err);
/* MIG_GET_PRECOPY_INFO: exactly argsz and flags, argsz >= 24, flags 0. */
int vfu_parse_precopy_info(const void *p, size_t len, struct vg_error *err);
/* MIG_POSTCOPY: exactly a struct vfu_mig_postcopy, argsz 8, flags 0. */
int vfu_parse_mig_postcopy(const void *p, size_t len, struct vg_error *err);
/* MIG_DATA_FILE: argsz == @len, flags VFU_MIG_DATA_FILE_FD or 0,
 * reserved 0, 1..VFU_MIG_DATA_FILE_MAX extents, exactly those after the
 * header, each of size >= 1 not wrapping (copied into @ext, *@n). */
int vfu_parse_mig_data_file(const void *p, size_t len, uint32_t *flags,
                            struct vfu_file_extent *ext, uint32_t *n,
                            struct vg_error *err);
/* REGION_UFFD: the header, flags and reserved 0, argsz the payload size,
 * 1..VFU_UFFD_MAX_AREAS areas (copied into @areas, *@n of them), each of
 * non-zero size, reserved 0, inside its region (@region_size, by index,
 * of @nregions) and not wrapping the client's address space. */
/* DMA_UFFD: argsz 16, op ADVISE, LISTEN or END, count and reserved 0. */
int vfu_parse_dma_uffd(const void *p, size_t len, struct vfu_dma_uffd *out,
                       struct vg_error *err);
int vfu_parse_region_uffd(const void *p, size_t len,
                          const uint64_t *region_size, uint32_t nregions,
                          struct vfu_uffd_area *areas, uint32_t *n,
                          struct vg_error *err);
/* REGION_DIRTY_LOG: argsz == @len, flags 0, pgsize a power of two from 512
 * to 1 GiB, offset and size (> 0) multiples of it, [offset, +size) within
 * [0, @region_size), and exactly the bitmap that covers it after the
 * header; *@bitmap points at it (8-byte aligned if @p is). */
int vfu_parse_region_dirty_log(const void *p, size_t len, uint64_t region_size,
                               struct vfu_region_dirty_log *out,
                               const uint64_t **bitmap, struct vg_error *err);

#endif
