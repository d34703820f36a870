/*
 * mig-relay.h -- a TCP relay between a migration's source and its
 * destination that withholds the last packets of each multifd channel.
 *
 * vg_relay_start() listens on a port of loopback; the source migrates to
 * the URI it returns and every connection it opens there is relayed to
 * the destination: both ways and byte for byte, except on QEMU's multifd
 * channels (told by their initial packet's magic), whose packets it
 * parses and holds some back, then drops at the end, as @drop says:
 *
 *   VG_RELAY_DROP_LAST_DEVICE: each device-state packet
 *   (MULTIFD_FLAG_DEVICE_STATE) is held until the channel's next one comes
 *   (RAM packets pass meanwhile): the destination never gets each
 *   channel's last device buffer;
 *   VG_RELAY_DROP_FROM_LAST_SYNC: each sync packet (MULTIFD_FLAG_SYNC) and
 *   every packet after it are held until the channel's next sync packet
 *   comes: the destination never gets each channel's last sync packet,
 *   nor what follows it.
 *
 * When the source closes a channel, the relay drops what it holds and
 * closes the destination's end: with a FIN, or with a TCP reset if
 * @reset.  So the destination gets the whole main stream, as from a
 * hostile source or after a network fault that follows the source's last
 * write, and never the data it waits for at the end.
 *
 * Multifd packets are parsed as QEMU 10.2 writes them without
 * compression: a 64-byte initial packet, then per packet a 12-byte header
 * (magic, version, flags; big-endian), then either the rest of a
 * device-state header (idstr[256], instance_id, next_packet_size) and
 * next_packet_size bytes, or the rest of a RAM packet (1344 bytes in all:
 * 320 and an offset of 8 bytes for each of the 128 pages of 4 KiB a packet
 * can hold, whatever its pages_alloc says) and normal_pages pages.  A channel
 * whose bytes do not parse so is relayed unparsed from there on, and counted
 * (so is one that ends within a packet).
 */
#ifndef VG_QCLIENT_MIG_RELAY_H
#define VG_QCLIENT_MIG_RELAY_H

#include <stdbool.h>

#include "common/error.h"

struct vg_relay;

enum vg_relay_drop {
    VG_RELAY_DROP_LAST_DEVICE,
    VG_RELAY_DROP_FROM_LAST_SYNC,
};

struct vg_relay_counts {
    unsigned connections;    /* accepted from the source */
    unsigned multifd;        /* of them, multifd channels */
    unsigned device_packets; /* device-state packets seen */
    unsigned sync_packets;   /* sync packets seen */
    unsigned ram_packets;    /* other RAM packets seen */
    unsigned dropped;        /* packets of any kind dropped */
    unsigned unparsed;       /* multifd channels that did not parse, or
                                ended within a packet */
};

/* Relay connections on a new loopback port to @dst_uri ("tcp:A.B.C.D:PORT"),
 * dropping what @drop says at the end (a FIN or, if @reset, a reset); the
 * URI to migrate to in *@src_uri (caller g_free()s). */
int vg_relay_start(const char *dst_uri, enum vg_relay_drop drop, bool reset,
                   struct vg_relay **out, char **src_uri, struct vg_error *err);
/* What the relay saw so far. */
void vg_relay_counts(struct vg_relay *r, struct vg_relay_counts *c);
/* Close every connection, join the threads and free @r (NULL is fine). */
void vg_relay_stop(struct vg_relay *r);

#endif
