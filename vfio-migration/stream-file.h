/*
 * stream-file.h -- a version 2 migration stream (docs/migration-stream.md)
 * that lies in a file, read lazily: restore on demand.
 *
 * The client hands the stream over as extents of a save file
 * (VFIO_USER_MIG_DATA_FILE): sf_add() appends them and scans every record
 * that is whole, reading only record headers and the small records.
 * HEADER, ZEROS, DEVICE_STATE and END are checked as the decoder checks
 * them, ZEROS and DEVICE_STATE go to the sink; a PAGES record is only
 * located (its shape and range checked): the index keeps, for each page,
 * the last record that wrote it whole, and the PAGE_PIECES records
 * (version 4, read whole and checked as they are scanned) that changed it
 * since, in order.  sf_end() says whether the stream is
 * whole (an END, nothing after it).
 *
 * Then, while the VM runs, sf_pending() names the pages still to load and
 * sf_read() reads them: a record is read whole and its checksum verified
 * before any page of it is handed out.  sf_verify() reads what was left
 * (records whose pages were all written again later) and checks the
 * stream digest of END.  Several threads may read pages at once, each
 * with a reader of its own (sf_reader_new(), sf_read_with()); everything
 * else one thread at a time.  The file is never written.
 */
#ifndef STREAM_FILE_H
#define STREAM_FILE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "mig-stream.h"

struct sf_config {
    struct mig_stream_config stream;
    int fd;            /* the file; taken over (closed by sf_free) */
    uint32_t delay_ms; /* test only: each sf_read() waits this long */
    /* HEADER, ZEROS and DEVICE_STATE, as the decoder delivers them;
     * pages and hash_pages are not used. */
    struct mig_dec_sink sink;
};

struct sf;

int sf_new(const struct sf_config *cfg, struct sf **out, struct vg_error *err);
void sf_free(struct sf *s);

/* Bytes [@off, +@len) of the file are the stream's next bytes; the
 * records now whole are scanned.  Fails on an extent outside the file and
 * on any record the decoder would refuse (sticky). */
int sf_add(struct sf *s, uint64_t off, uint64_t len, struct vg_error *err);
/* The stream is over: fails unless it ended with a valid END. */
int sf_end(struct sf *s, struct vg_error *err);

/* Stream bytes handed over so far. */
uint64_t sf_bytes(const struct sf *s);

/* The pages whose content is in the stream (bits of @bm, npages of them,
 * cleared first), and how many. */
uint64_t sf_pending(const struct sf *s, uint64_t *bm);
/* Pages [@first, +@count) into @buf, and their page hashes (the stream
 * version's, mig_stream_page_hash(), computed to verify their records, or of
 * the page as its pieces left it) into @hashes unless NULL: each must be a
 * pending page. */
int sf_read(struct sf *s, uint64_t first, uint32_t count, uint8_t *buf,
            uint64_t *hashes, struct vg_error *err);

/* A reader's own buffers of the last two records it read whole. */
struct sf_reader;

int sf_reader_new(struct sf *s, struct sf_reader **out, struct vg_error *err);
void sf_reader_free(struct sf_reader *rd);
/* sf_read() through @rd, which no other thread uses meanwhile. */
int sf_read_with(struct sf_reader *rd, uint64_t first, uint32_t count,
                 uint8_t *buf, uint64_t *hashes, struct vg_error *err);
/* Every page is read: read the records not read yet and check END's
 * digest. */
int sf_verify(struct sf *s, struct vg_error *err);

#endif
