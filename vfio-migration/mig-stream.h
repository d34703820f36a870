/*
 * mig-stream.h -- the vGPU migration stream: its format (mig-stream.c),
 * encoder (mig-enc.c) and decoder (mig-dec.c).
 *
 * The stream is a sequence of records; docs/migration-stream.md gives the
 * byte layout.  Each record is a 16-byte record header (type, flags,
 * payload length, XXH3-64 checksum of header bytes 0..7 and the payload)
 * and its payload.  A stream is: one HEADER (magic, version, the device
 * configuration the destination must match), then PAGES and ZEROS runs
 * in any order (a page may appear more than once: the later record wins,
 * which is how pre-copy data is superseded by stop-copy data), then one
 * DEVICE_STATE, then one END with the XXH3-64 digest (seed 0) of every
 * stream byte before the END record, the byte count and record count.
 *
 * Version 2 (hashed pages) differs in PAGES records only: their checksum
 * and their share of the digest take each page's XXH3-64 (seed 0, the
 * "page hash") in place of the page's bytes, so each side hashes a page
 * once, and the destination gets the page hashes of what it loads for
 * free.  Version 3 adds PAGES_LISTED records: a PAGES record that lists
 * its page hashes before its page data, for pages sent from where they
 * live while the device may write them.  Its checksum covers the listed
 * hashes; a page whose data do not match its listed hash is *stale* (it
 * was written while it went out) until a later record brings it, and the
 * stream fails at END where a page is still stale.  Version 4 adds
 * PAGE_PIECES records: some of the 64 pieces of one page (the parts a
 * guest CPU wrote since the page last went), for a page an earlier record
 * of the stream brought.  Such a record may carry the page hash of the
 * page as its pieces leave it: a stale page then takes the pieces, and is
 * whole again if its hash is that one (the stream fails if not); a
 * record without it cannot mend a stale page.  Version 5 changes the
 * page hash only: the tree hash of the page's pieces (vg_hash_tree()),
 * which a side that keeps the pieces' hashes takes again from the pieces
 * that changed.  Version 6 changes PAGE_PIECES records only: their
 * checksum takes the pieces' hashes (XXH3-64, seed 0, of each piece) in
 * place of the pieces, and their share of the digest is their headers,
 * so each side reads a piece once to check it (mig_pieces_checksum()).
 * The decoder reads versions 1 to 6; the encoder writes any of them.
 *
 * The encoder writes one complete record at a time into a caller buffer
 * of at least MIG_REC_MAX bytes.  The decoder is an incremental pure
 * function: it takes byte chunks of any size, trusts nothing, buffers one
 * record at a time (bounded by MIG_REC_MAX), checks it completely and only
 * then hands its content to the sink.  Its first error is sticky and
 * names the record type, index, stream offset and the values involved.
 * One exception to the buffering: the page data of a version 2 PAGES
 * record that lies whole in the chunk being fed are hashed and handed to
 * the sink where they are, not copied first; so are the pieces of
 * PAGE_PIECES records, and in version 6 a run of such records whole in
 * the chunk is checked and applied as a batch on the sink's threads
 * (mig_dec_sink.run), their effects and errors then taken in order.  Every
 * field the decoder checks is copied before it is checked; page data that a
 * feeder changes under it can only make the pages differ from their hashes,
 * never make the decoder or the sink go outside their buffers.
 */
#ifndef MIG_STREAM_H
#define MIG_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define MIG_STREAM_MAGIC       "VGMIGSTR" /* 8 bytes, no NUL on the wire */
#define MIG_STREAM_VERSION     6u /* what the encoder writes by default */
#define MIG_STREAM_VERSION_MIN 1u /* the oldest the decoder reads */
#define MIG_STREAM_VERSION_MAX 6u /* the newest either side knows */
#define MIG_TREE_HASH_VERSION  5u /* the first whose page hash is a tree */
#define MIG_PIECE_HASH_VERSION                                                 \
    6u /* the first whose PAGE_PIECES checksum                                 \
          takes their pieces' hashes */

enum mig_rec_type {
    MIG_REC_HEADER = 1,
    MIG_REC_PAGES = 2,
    MIG_REC_ZEROS = 3,
    MIG_REC_DEVICE_STATE = 4,
    MIG_REC_END = 5,
    MIG_REC_POSTCOPY = 6,
    MIG_REC_PAGES_LISTED = 7, /* version 3 */
    MIG_REC_PAGE_PIECES = 8,  /* version 4 */
};

/* A PAGES_LISTED record's only flag: its pages may be stale (pre-copy:
 * the device ran while they went); without it a page whose data do not
 * match its listed hash fails the stream at once. */
#define MIG_LISTED_MAY_BE_STALE 1u
/* A PAGE_PIECES record's only flag: its page hash field is the page's
 * hash as its pieces leave it (else 0, not checked). */
#define MIG_PIECES_HASHED 1u
/* The HEADER's only flag (its last u32): the stream's PAGES and
 * PAGES_LISTED records carry up to MIG_RUN_MAX_BYTES of pages each;
 * without it, up to MIG_RUN_SMALL_BYTES. */
#define MIG_HDR_LARGE_RUNS 1u

#define MIG_REC_HDR_SIZE    16u
#define MIG_HEADER_SIZE     32u  /* HEADER payload */
#define MIG_RUN_HDR_SIZE    16u  /* PAGES payload before the data; ZEROS */
#define MIG_END_SIZE        24u  /* END payload */
#define MIG_POSTCOPY_SIZE   144u /* POSTCOPY payload */
#define MIG_POSTCOPY_TOKEN  16u
#define MIG_POSTCOPY_ADDR   108u /* a UNIX socket path, NUL included */
#define MIG_PIECES_HDR_SIZE 24u  /* PAGE_PIECES payload before the pieces */
#define MIG_PAGE_PIECES     64u  /* a page's pieces: page size / 64 bytes */
#define MIG_RUN_MAX_BYTES   (4u * 1024 * 1024) /* PAGES data per record */
#define MIG_RUN_SMALL_BYTES (2u * 1024 * 1024) /* ...without LARGE_RUNS */
#define MIG_STATE_MAX       4096u              /* DEVICE_STATE payload */
#define MIG_PAGE_SIZE_MIN   4096u
#define MIG_PAGE_SIZE_MAX   (2u * 1024 * 1024)
#define MIG_RUN_MAX_PAGES   (MIG_RUN_MAX_BYTES / MIG_PAGE_SIZE_MIN)
#define MIG_LIST_MAX        (MIG_RUN_MAX_PAGES * 8u) /* PAGES_LISTED hashes */
#define MIG_REC_MAX_PAYLOAD                                                    \
    (MIG_RUN_HDR_SIZE + MIG_LIST_MAX + MIG_RUN_MAX_BYTES)
#define MIG_REC_MAX (MIG_REC_HDR_SIZE + MIG_REC_MAX_PAYLOAD)
/* A PAGES record's headers: the record header and the run header. */
#define MIG_RUN_HEADERS_SIZE (MIG_REC_HDR_SIZE + MIG_RUN_HDR_SIZE)
/* Pages one ZEROS record may cover: a bound on the work one 32-byte
 * record asks of the destination (and the longest run the source
 * encodes). */
#define MIG_ZEROS_MAX_PAGES 16384u

/* What both ends must agree on (HEADER).  @features: VGPU_FEAT_* bits. */
struct mig_stream_config {
    uint64_t vram_size;
    uint32_t page_size;
    uint32_t features;
};

/*
 * A post-copy switchover (POSTCOPY, version 2 streams, at most one,
 * after the page data and before DEVICE_STATE): @pending pages of the
 * device's @npages are not in the stream; the destination fetches them
 * from the source's page server at @addr (NUL-terminated), which admits
 * whoever shows @token (pc-wire.h).
 */
struct mig_postcopy_info {
    uint64_t npages;
    uint64_t pending;
    uint8_t token[MIG_POSTCOPY_TOKEN];
    char addr[MIG_POSTCOPY_ADDR];
};

/* "HEADER", "PAGES", ...; "unknown" otherwise. */
const char *mig_rec_name(uint32_t type);

/* The pieces of the decoder's checks, for readers of a stream held
 * elsewhere (stream-file.h).  mig_rec_bounds: payload bounds of a record
 * type in a stream whose runs carry up to @run_max bytes of pages, false
 * for an unknown type; mig_rec_flags: the header flags it may have.
 * mig_header_check: a HEADER payload against this device (*@version, and
 * *@run_max, the most page data its runs carry, on success).  mig_rec_checksum:
 * the checksum of a record whose header is @hdr; mig_pages_checksum: that of a
 * version 2 PAGES record from its run header and page hashes;
 * mig_pieces_checksum: that of a version 6 PAGE_PIECES record from its
 * pieces header @phdr and its @n pieces of @piece bytes at @pieces, whose
 * hashes it puts into @piece_hash (n entries, n <= MIG_PAGE_PIECES) unless
 * NULL; mig_pieces_hashes_checksum: the same from the @n pieces' hashes
 * @piece_hash; mig_rec_digest_size: the bytes at the start of a record, other
 * than a PAGES or PAGES_LISTED one, that the END digest takes. */
bool mig_rec_bounds(uint32_t page_size, uint32_t run_max, uint32_t type,
                    uint32_t *min, uint32_t *max);
/* The flags a record of @type may have. */
uint32_t mig_rec_flags(uint32_t type);
int mig_header_check(const struct mig_stream_config *cfg, const uint8_t *p,
                     uint32_t *version, uint32_t *run_max,
                     struct vg_error *err);
uint64_t mig_rec_checksum(const uint8_t *hdr, const uint8_t *payload,
                          uint32_t len);
uint64_t mig_pages_checksum(const uint8_t *hdr, const uint8_t *run,
                            const uint64_t *hashes, uint32_t count);
uint64_t mig_pieces_checksum(const uint8_t *hdr, const uint8_t *phdr,
                             const uint8_t *pieces, uint32_t piece, unsigned n,
                             uint64_t *piece_hash);
uint64_t mig_pieces_hashes_checksum(const uint8_t *hdr, const uint8_t *phdr,
                                    const uint64_t *piece_hash, unsigned n);
size_t mig_rec_digest_size(uint32_t version, const uint8_t *hdr);
/* A stream that ended without its END record, after @bytes in @records
 * (@seen_header, @seen_state: whether its HEADER and DEVICE_STATE came):
 * sets @err and returns its -EINVAL. */
int mig_stream_truncated(struct vg_error *err, uint64_t bytes, uint64_t records,
                         bool seen_header, bool seen_state);

/* ---------------------------------------------------------------- encoder */

struct mig_enc;

/* An encoder of stream @version (MIG_STREAM_VERSION_MIN ..
 * MIG_STREAM_VERSION_MAX) for a device with pages of @page_size bytes,
 * whose runs carry up to @run_max bytes of pages: MIG_RUN_MAX_BYTES (the
 * HEADER says so, MIG_HDR_LARGE_RUNS) or MIG_RUN_SMALL_BYTES, for a
 * decoder that predates larger runs. */
int mig_enc_new(uint32_t version, uint32_t page_size, uint32_t run_max,
                struct mig_enc **out, struct vg_error *err);
void mig_enc_free(struct mig_enc *enc);
/* The most page data one of its runs may carry (mig_enc_new's @run_max). */
uint32_t mig_enc_run_max(const struct mig_enc *enc);

/*
 * Each writes one complete record into @buf (MIG_REC_MAX bytes or more)
 * and returns its size.  mig_enc_pages: @count pages of data at @data,
 * count * page_size <= mig_enc_run_max().  mig_enc_state: @len <=
 * MIG_STATE_MAX.  mig_enc_end closes the stream; nothing may follow.
 */
size_t mig_enc_header(struct mig_enc *enc, const struct mig_stream_config *cfg,
                      uint8_t *buf);
size_t mig_enc_pages(struct mig_enc *enc, uint64_t first, uint32_t count,
                     const uint8_t *data, uint8_t *buf);
/* mig_enc_pages for pages the caller put at mig_enc_pages_data(@buf)
 * already, with their page hashes (XXH3-64 of each page, seed 0) that
 * it computed, for example on several threads (a version 1 stream, which
 * has none, ignores them). */
size_t mig_enc_pages_hashed(struct mig_enc *enc, uint64_t first, uint32_t count,
                            const uint64_t *hashes, uint8_t *buf);
/* mig_enc_pages without copying the pages: writes the record's headers
 * into @buf and returns their size; the record's bytes are those headers
 * followed by the count * page_size bytes at @data, which must not change
 * until they have been sent.  @hashes: their page hashes as for
 * mig_enc_pages_hashed, or NULL to have them computed here. */
size_t mig_enc_pages_ref(struct mig_enc *enc, uint64_t first, uint32_t count,
                         const uint8_t *data, const uint64_t *hashes,
                         uint8_t *buf);
/* Version 3 encoders: mig_enc_pages_ref as a PAGES_LISTED record, whose
 * headers (written into @buf; their size is returned) end with the @count
 * page @hashes.  With @may_be_stale the record's page data, which follow,
 * may change before they are sent: a page that did is stale at the
 * destination until a later record brings it; without it such a page
 * fails the stream. */
size_t mig_enc_pages_listed_ref(struct mig_enc *enc, uint64_t first,
                                uint32_t count, const uint64_t *hashes,
                                bool may_be_stale, uint8_t *buf);
/* Where mig_enc_pages puts the page data in @buf: a caller may copy the
 * pages there first and pass this as @data (then nothing is copied). */
uint8_t *mig_enc_pages_data(uint8_t *buf);
size_t mig_enc_zeros(struct mig_enc *enc, uint64_t first, uint64_t count,
                     uint8_t *buf);
/* Version 4 encoders: a PAGE_PIECES record of page @page, the pieces whose
 * bits are set in @mask (non-zero; bit i: bytes [i * piece, +piece) of the
 * page, piece = page size / MIG_PAGE_PIECES), copied from @page_data, the
 * page's content; with @hashed, the record carries @hash, the page hash
 * of @page_data (which a destination checks where the page was stale). */
size_t mig_enc_page_pieces(struct mig_enc *enc, uint64_t page, uint64_t mask,
                           const uint8_t *page_data, bool hashed, uint64_t hash,
                           uint8_t *buf);
/* The same in steps, for records encoded on several threads (any thread
 * for the first two, which only read @enc): mig_enc_pieces_fill() copies
 * the pieces into the record at @buf and returns its size; from version
 * 6 on it puts their hashes, in bit order, into @piece_hash
 * (MIG_PAGE_PIECES entries of room), which the caller may use for the
 * page hash.  mig_enc_pieces_seal() writes the record's headers, with
 * @hash where @hashed.  Then, in stream order, @n such records lying at
 * @recs, @len bytes in all, join @enc's stream (its digest and counts). */
size_t mig_enc_pieces_fill(const struct mig_enc *enc, uint64_t page,
                           uint64_t mask, const uint8_t *page_data,
                           uint64_t *piece_hash, uint8_t *buf);
void mig_enc_pieces_seal(const struct mig_enc *enc, uint8_t *buf, bool hashed,
                         uint64_t hash, const uint64_t *piece_hash);
void mig_enc_add_records(struct mig_enc *enc, const uint8_t *recs, size_t len,
                         uint64_t n);
size_t mig_enc_state(struct mig_enc *enc, const void *blob, uint32_t len,
                     uint8_t *buf);
size_t mig_enc_postcopy(struct mig_enc *enc,
                        const struct mig_postcopy_info *info, uint8_t *buf);
size_t mig_enc_end(struct mig_enc *enc, uint8_t *buf);

/* Stream bytes encoded so far. */
uint64_t mig_enc_bytes(const struct mig_enc *enc);

/* ---------------------------------------------------------------- decoder */

/* Where decoded content goes; each returns 0 or -errno with @err set
 * (which fails the stream).  Ranges are already checked against VRAM.
 * @hashes: the page hash of each of the @count pages at @data (computed
 * by the decoder from those bytes) in a version 2 stream, NULL in a
 * version 1 stream; @data NULL: write_hashed() wrote them already. */
struct mig_dec_sink {
    void *opaque;
    int (*pages)(void *opaque, uint64_t first, uint64_t count,
                 const uint8_t *data, const uint64_t *hashes,
                 struct vg_error *err);
    int (*zeros)(void *opaque, uint64_t first, uint64_t count,
                 struct vg_error *err);
    /* Version 4: write the pieces of page @page set in @mask, each
     * @piece_size bytes, from @data (one after the other); from version
     * 6 on @piece_hash holds their hashes (XXH3-64, seed 0; else NULL);
     * if @hash is not NULL, put the page hash of the page as written into
     * it.  NULL: a PAGE_PIECES record fails the stream. */
    int (*pieces)(void *opaque, uint64_t page, uint64_t mask,
                  uint32_t piece_size, const uint8_t *data,
                  const uint64_t *piece_hash, uint64_t *hash,
                  struct vg_error *err);
    int (*state)(void *opaque, const uint8_t *blob, uint32_t len,
                 struct vg_error *err);
    /* Optional: the HEADER of a stream of @version was accepted; before
     * any other call. */
    void (*header)(void *opaque, uint32_t version);
    /* Optional: the page hashes (mig_stream_page_hash()) of the @count
     * pages at @data into @hashes, for example on several threads; NULL: the
     * decoder hashes them itself. */
    void (*hash_pages)(void *opaque, const uint8_t *data, uint64_t count,
                       uint64_t *hashes);
    /* Optional: a POSTCOPY record, checked (NULL: the record fails the
     * stream, this destination cannot fetch pages). */
    int (*postcopy)(void *opaque, const struct mig_postcopy_info *info,
                    struct vg_error *err);
    /* Optional, version 2: write the @count pages at @data to [@first,
     * +@count) before the record's checksum is checked (the range is),
     * putting the page hash of each page as written into @hashes, so that
     * the copy and the hashing can overlap.  The decoder then checks the
     * record with those hashes and calls pages() with @data NULL: the
     * pages are in.  If the check fails the stream fails, so a sink may
     * use this only where nothing reads the pages before the stream has
     * ended well.  NULL: hash_pages(), then pages() with the data. */
    int (*write_hashed)(void *opaque, uint64_t first, uint64_t count,
                        const uint8_t *data, uint64_t *hashes,
                        struct vg_error *err);
    /* Optional, version 6, both or neither: the PAGE_PIECES records that
     * lie whole in one fed chunk, one after the other, are applied a batch
     * at a time on several threads (the pages of a batch all differ).
     * run() calls @fn(@arg, i) for each i < @n, several at once, and
     * returns when all have returned.  pieces_mt() is pieces() for one
     * record of a batch: on any thread, at once with those of the batch's
     * other pages, and before the record's checksum is checked (a failed
     * check fails the stream, so a sink may use this only where nothing
     * reads VRAM before the stream has ended well).  NULL: pieces(), a
     * record at a time. */
    void (*run)(void *opaque, uint64_t n, void (*fn)(void *arg, uint64_t i),
                void *arg);
    int (*pieces_mt)(void *opaque, uint64_t page, uint64_t mask,
                     uint32_t piece_size, const uint8_t *data,
                     const uint64_t *piece_hash, uint64_t *hash,
                     struct vg_error *err);
};

struct mig_dec;

/* The page hash of a stream of @version (seed 0): vg_hash_tree() of the
 * @page_size bytes at @page from MIG_TREE_HASH_VERSION on, with the
 * pieces' hashes into @piece_hash unless NULL; else XXH3-64 of them
 * whole (@piece_hash untouched). */
uint64_t mig_stream_page_hash(uint32_t version, const void *page,
                              uint32_t page_size, uint64_t *piece_hash);

/* The page hashes of @count pages of @ps bytes at @data, into @le (little
 * endian, what the checksum and digest take) and, if not NULL, @hashes
 * (host order). */
void mig_stream_page_hashes(uint32_t version, const uint8_t *data,
                            uint32_t count, uint32_t ps, uint8_t *le,
                            uint64_t *hashes);

/* A decoder for a destination device configured as @cfg. */
int mig_dec_new(const struct mig_stream_config *cfg,
                const struct mig_dec_sink *sink, struct mig_dec **out,
                struct vg_error *err);
void mig_dec_free(struct mig_dec *dec);

/* Consume @len bytes.  Every byte the decoder checks is copied into the
 * record buffer first, so @data may change under it; page data read in
 * place (version 2, a record whole in @data) are read twice, to hash
 * them and by the sink, before this returns.  After the first error
 * every call fails with it. */
int mig_dec_feed(struct mig_dec *dec, const void *data, size_t len,
                 struct vg_error *err);
/* Consume the page data of the version 2 PAGES record whose headers were
 * fed last (and nothing else), which a feeder put at their place in VRAM
 * already: @len bytes at VRAM offset @vram_off, mapped here at @at, which
 * the caller checked lies inside VRAM.  They must be the record's page
 * data, whole, at the record's pages; they are hashed there (hash_pages),
 * the record is checked with those hashes, and pages() gets @data NULL.
 * As for write_hashed, a record that fails its check fails the stream. */
int mig_dec_feed_placed(struct mig_dec *dec, uint64_t vram_off,
                        const uint8_t *at, size_t len, struct vg_error *err);
/* The stream is over: fails unless a valid END was decoded (which also
 * implies exactly one HEADER and one DEVICE_STATE) and no bytes are
 * pending. */
int mig_dec_finish(struct mig_dec *dec, struct vg_error *err);

/* Stream bytes consumed so far. */
uint64_t mig_dec_bytes(const struct mig_dec *dec);
/* The stream's version, once its HEADER was accepted; 0 before. */
uint32_t mig_dec_version(const struct mig_dec *dec);
/* Page data bytes read in place, without a copy (see mig_dec_feed and
 * mig_dec_feed_placed). */
uint64_t mig_dec_bytes_in_place(const struct mig_dec *dec);
/* Version 3: pages whose last PAGES_LISTED data did not match their listed
 * hash and that no record brought since; all of them, and the first (of
 * the lowest number).  END fails while any is left. */
uint64_t mig_dec_stale_pages(const struct mig_dec *dec, uint64_t *first);
bool mig_dec_page_stale(const struct mig_dec *dec, uint64_t page);
/* How many times a page became stale in this stream. */
uint64_t mig_dec_stale_marked(const struct mig_dec *dec);

#endif
