/*
 * Fixed-width integers in byte order, for the formats promtable writes itself: qualifiers
 * and values (big-endian, docs/storage-format.md) and the embedded store's log (little-endian). And
 * unsigned varints (LEB128, protobuf's): index cells, frames, protobuf written by hand.
 */
#ifndef PT_BYTES_H
#define PT_BYTES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A double's bits and back: NaN payloads and -0 kept. */
static inline uint64_t pt_f64_bits(double v)
{
    uint64_t b;
    memcpy(&b, &v, sizeof(b));
    return b;
}

static inline double pt_bits_f64(uint64_t b)
{
    double v;
    memcpy(&v, &b, sizeof(v));
    return v;
}

static inline void pt_put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline uint32_t pt_get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static inline void pt_put_be64(uint8_t *p, uint64_t v)
{
    pt_put_be32(p, (uint32_t)(v >> 32));
    pt_put_be32(p + 4, (uint32_t)v);
}

static inline uint64_t pt_get_be64(const uint8_t *p)
{
    return (uint64_t)pt_get_be32(p) << 32 | pt_get_be32(p + 4);
}

static inline void pt_put_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static inline uint32_t pt_get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The bytes v takes as a varint: 1 to 10. */
static inline size_t pt_uvarint_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* Writes v as a varint at p (pt_uvarint_size(v) bytes); returns the byte after it. */
static inline uint8_t *pt_put_uvarint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* Reads a varint from p[*i, n), advancing *i: 0, or -1 when it runs past n or past 64
 * bits (a tenth byte may hold only bit 63). */
static inline int pt_get_uvarint(const uint8_t *p, size_t n, size_t *i, uint64_t *v)
{
    uint64_t r = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (*i >= n)
            return -1;
        uint8_t c = p[(*i)++];
        if (shift == 63 && c > 1)
            return -1;
        r |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            *v = r;
            return 0;
        }
    }
    return -1;
}

#endif
