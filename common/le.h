/*
 * le.h -- little-endian loads and stores at any alignment, for wire and
 * stream formats (vfio-user messages, the migration stream, state blobs).
 */
#ifndef VG_LE_H
#define VG_LE_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

static inline void vg_put_le16(uint8_t *p, uint16_t v)
{
    v = htole16(v);
    memcpy(p, &v, sizeof(v));
}

static inline void vg_put_le32(uint8_t *p, uint32_t v)
{
    v = htole32(v);
    memcpy(p, &v, sizeof(v));
}

static inline void vg_put_le64(uint8_t *p, uint64_t v)
{
    v = htole64(v);
    memcpy(p, &v, sizeof(v));
}

static inline uint16_t vg_get_le16(const uint8_t *p)
{
    uint16_t v;

    memcpy(&v, p, sizeof(v));
    return le16toh(v);
}

static inline uint32_t vg_get_le32(const uint8_t *p)
{
    uint32_t v;

    memcpy(&v, p, sizeof(v));
    return le32toh(v);
}

static inline uint64_t vg_get_le64(const uint8_t *p)
{
    uint64_t v;

    memcpy(&v, p, sizeof(v));
    return le64toh(v);
}

#endif
