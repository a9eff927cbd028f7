/*
 * The stored form of the points table ("points.v2"): the cells of a row in chunks.
 *
 *     key   = row || 0x00 || first qualifier of the chunk (4 bytes)
 *     value = fmt (1 byte) || count (4 bytes BE) || body
 *             fmt 3: the Gorilla / XOR stream of base/gorilla.h, count samples whose
 *                    timestamp is the qualifier and whose value is the 8 value bytes read
 *                    as a big-endian integer (a float64's bits); the stream fills the rest
 *                    of the value exactly, its padding bits zero
 *             fmt 4: decimal samples: k (1 byte) || tlen (4 bytes BE) || the timestamps as
 *                    a fmt 3 stream of tlen bytes whose values are all 0 || then per sample
 *                    a zig-zag varint: the first the integer m0, the others the difference
 *                    from the previous one (wrapping modulo 2^64), where each sample's value
 *                    is the float64 m / 10^k (|m| <= 2^53, k <= 9) and that division gives
 *                    back its exact bits
 *             fmt 2: count qualifiers (4 bytes BE each, strictly increasing), count value
 *                    lengths (4 bytes BE each), then the values back to back
 *             fmt 1: count qualifiers, then count values of exactly 8 bytes
 *
 * Flushes write fmt 3 when every value of the chunk has 8 bytes (a sample: about 1-2 bytes
 * where fmt 1 took 12), fmt 4 instead when every value is a decimal with at most 9
 * digits after the point and fmt 4 comes out shorter (integer counters, values with two
 * decimals: XOR of such floats leaves 5-7 bytes, a varint difference 1-3), and fmt 2
 * otherwise; fmt 1 is read only, so stores written before
 * fmt 3 open unchanged and their chunks turn into fmt 3 as merges rewrite them.
 *
 * The chunks of one row never overlap: every qualifier of a row is in at most one chunk,
 * so "last write wins" needs no versions (flush.c keeps that true). Logically the table
 * still holds the cells (row, qualifier, value) of DESIGN §3; scans return exactly those,
 * so data copies cell by cell between backends.
 */
#include <stdint.h>
#include <string.h>

#include "embedded_int.h"
#include "error.h"
#include "gorilla.h"

enum { HDR = 5, DEC_K_MAX = 9 };

static const double pow10[DEC_K_MAX + 1] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9};
#define DEC_M_MAX ((int64_t)1 << 53) /* integers a double holds exactly */

static uint64_t zigzag(uint64_t d)
{
    return d << 1 ^ (uint64_t)-(int64_t)(d >> 63);
}

static uint64_t unzigzag(uint64_t z)
{
    return z >> 1 ^ (uint64_t)-(int64_t)(z & 1);
}

/* The value of a fmt 4 sample: the same expression decodes as the encoder checked. */
static uint64_t dec_bits(int64_t m, unsigned k)
{
    double v = (double)m / pow10[k];
    uint64_t bits;
    memcpy(&bits, &v, sizeof(bits));
    return bits;
}

int pt_emb_chunk_parse(const uint8_t *p, size_t n, chunk *c)
{
    if (n < HDR || p[0] < 1 || p[0] > 4)
        return PT_EINTERNAL;
    *c = (chunk){.fmt = p[0], .count = pt_get_be32(p + 1)};
    if (c->count == 0)
        return PT_EINTERNAL;
    size_t count = c->count, body = n - HDR;
    if (c->fmt == 3) {
        /* The first sample takes at least 72 bits, every other one 2. */
        if (body > SIZE_MAX / 8 || body * 8 < 72 + 2 * (uint64_t)(count - 1))
            return PT_EINTERNAL;
        c->stream = (pt_slice){p + HDR, body};
        return 0;
    }
    if (c->fmt == 4) {
        if (body < 5 || p[HDR] > DEC_K_MAX)
            return PT_EINTERNAL;
        uint32_t tlen = pt_get_be32(p + HDR + 1);
        /* The timestamps take at least 72 bits, then 2 per sample; a value 1 byte. */
        if (tlen > body - 5 || (uint64_t)tlen * 8 < 72 + 2 * (uint64_t)(count - 1) ||
            body - 5 - tlen < count)
            return PT_EINTERNAL;
        c->k = p[HDR];
        c->stream = (pt_slice){p + HDR + 5, tlen};
        c->vals = p + HDR + 5 + tlen;
        c->vlen_total = body - 5 - tlen;
        return 0;
    }
    size_t fixed = c->fmt == 1 ? 12 : 8; /* bytes a cell takes before its value's */
    if (body / fixed < count)
        return PT_EINTERNAL;
    c->quals = p + HDR;
    c->lens = c->fmt == 2 ? c->quals + 4 * count : NULL;
    c->vals = c->quals + count * (c->fmt == 2 ? 8 : 4);
    size_t vbytes = body - count * (c->fmt == 2 ? 8 : 4);
    if (c->fmt == 1)
        return vbytes == 8 * count ? 0 : PT_EINTERNAL;
    for (size_t i = 0; i < count; i++) {
        uint32_t len = pt_get_be32(c->lens + 4 * i);
        if (len > vbytes)
            return PT_EINTERNAL;
        vbytes -= len;
    }
    return vbytes == 0 ? 0 : PT_EINTERNAL;
}

/* Decodes a fmt 3 stream, or the timestamps of a fmt 4 chunk and its values: its cells
 * appended to out unless out is NULL, then its last qualifier in *last. */
static int walk_xor(const chunk *c, vcells *out, uint32_t *last)
{
    pt_gorilla_dec d;
    pt_gorilla_dec_init(&d, c->stream.p, c->stream.n);
    int64_t prev = -1;
    uint64_t m = 0;
    size_t vi = 0;
    for (uint32_t i = 0; i < c->count; i++) {
        int64_t t;
        uint64_t bits;
        uint8_t v[8];
        /* Qualifiers are 4 bytes and strictly increasing. */
        if (pt_gorilla_dec_next(&d, &t, &bits) != 0 || t <= prev || t > (int64_t)UINT32_MAX)
            return PT_EINTERNAL;
        prev = t;
        if (c->fmt == 4) {
            uint64_t z;
            if (bits != 0 || pt_get_uvarint(c->vals, c->vlen_total, &vi, &z) != 0)
                return PT_EINTERNAL;
            m += unzigzag(z); /* wraps; only the result is checked */
            if ((int64_t)m > DEC_M_MAX || (int64_t)m < -DEC_M_MAX)
                return PT_EINTERNAL;
            bits = dec_bits((int64_t)m, c->k);
        }
        pt_put_be64(v, bits);
        if (out && vcells_push(out, (uint32_t)t, 8, v) != 0)
            return PT_ENOMEM;
    }
    if (!pt_gorilla_dec_done(&d) || (c->fmt == 4 && vi != c->vlen_total))
        return PT_EINTERNAL;
    *last = (uint32_t)prev;
    return 0;
}

int pt_emb_chunk_cells(const chunk *c, vcells *out)
{
    size_t had = out->n;
    uint32_t last;
    int rv = 0;
    if (c->fmt >= 3) {
        rv = walk_xor(c, out, &last);
    } else {
        const uint8_t *v = c->vals;
        for (uint32_t i = 0; i < c->count && rv == 0; i++) {
            uint32_t len = c->lens ? pt_get_be32(c->lens + 4 * (size_t)i) : 8;
            uint32_t q = pt_get_be32(c->quals + 4 * (size_t)i);
            if (i > 0 && q <= out->c[out->n - 1].q)
                rv = PT_EINTERNAL;
            else
                rv = vcells_push(out, q, len, v);
            v += len;
        }
    }
    if (rv != 0)
        out->n = had;
    return rv;
}

int pt_emb_chunk_last(const chunk *c, uint32_t *q)
{
    if (c->fmt >= 3)
        return walk_xor(c, NULL, q);
    *q = pt_get_be32(c->quals + 4 * ((size_t)c->count - 1));
    return 0;
}

static int encode_xor(pt_buf *out, const vcell *c, size_t n)
{
    size_t cap = HDR + pt_gorilla_max_bytes(n);
    if (pt_buf_reserve(out, cap) != 0)
        return PT_ENOMEM;
    uint8_t *p = out->p;
    memset(p, 0, cap);
    p[0] = 3;
    pt_put_be32(p + 1, (uint32_t)n);
    pt_gorilla_enc e;
    pt_gorilla_enc_init(&e, p + HDR);
    for (size_t i = 0; i < n; i++)
        pt_gorilla_enc_add(&e, c[i].q, pt_get_be64(c[i].v.in));
    pt_buf_commit(out, HDR + pt_gorilla_enc_len(&e));
    return 0;
}

/* m with m / 10^k giving back exactly the bits of v, if there is one. */
static int dec_of(uint64_t bits, unsigned k, int64_t *m)
{
    double v;
    memcpy(&v, &bits, sizeof(v));
    double x = v * pow10[k];
    /* Also false for NaN; -0 and the infinities fail the check below or this one. */
    if (!(x > -(double)DEC_M_MAX && x < (double)DEC_M_MAX))
        return 0;
    *m = (int64_t)(x < 0 ? x - 0.5 : x + 0.5);
    return dec_bits(*m, k) == bits;
}

/* The smallest k at which every value is a decimal, or -1. */
static int dec_k(const vcell *c, size_t n)
{
    unsigned k = 0;
    int64_t m;
    for (size_t i = 0; i < n; i++) {
        uint64_t bits = pt_get_be64(c[i].v.in);
        while (!dec_of(bits, k, &m))
            if (++k > DEC_K_MAX)
                return -1;
    }
    /* A value that fit at a smaller k need not fit at the final one: check again. */
    for (size_t i = 0; i < n; i++)
        if (!dec_of(pt_get_be64(c[i].v.in), k, &m))
            return -1;
    return (int)k;
}

/* Appends fmt 4 to out (after what it holds) when the values allow it. 0 with *made set. */
static int encode_dec(pt_buf *out, const vcell *c, size_t n, int *made)
{
    *made = 0;
    int k = dec_k(c, n);
    if (k < 0)
        return 0;
    size_t at = out->len, cap = HDR + 5 + pt_gorilla_max_bytes(n) + 10 * n;
    if (pt_buf_reserve(out, cap) != 0)
        return PT_ENOMEM;
    uint8_t *p = out->p + at;
    memset(p, 0, HDR + 5 + pt_gorilla_max_bytes(n));
    p[0] = 4;
    pt_put_be32(p + 1, (uint32_t)n);
    p[HDR] = (uint8_t)k;
    pt_gorilla_enc e;
    pt_gorilla_enc_init(&e, p + HDR + 5);
    for (size_t i = 0; i < n; i++)
        pt_gorilla_enc_add(&e, c[i].q, 0);
    size_t tlen = pt_gorilla_enc_len(&e);
    pt_put_be32(p + HDR + 1, (uint32_t)tlen);
    uint8_t *v = p + HDR + 5 + tlen;
    int64_t prev = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        dec_of(pt_get_be64(c[i].v.in), (unsigned)k, &m);
        v = pt_put_uvarint(v, zigzag((uint64_t)m - (uint64_t)prev));
        prev = m;
    }
    pt_buf_commit(out, (size_t)(v - p));
    *made = 1;
    return 0;
}

int pt_emb_chunk_encode(pt_buf *out, const vcell *c, size_t n)
{
    int fixed = 1;
    size_t vbytes = 0;
    for (size_t i = 0; i < n; i++) {
        fixed &= c[i].vlen == 8;
        vbytes += c[i].vlen;
    }
    pt_buf_reset(out);
    if (fixed) {
        /* Both 8-byte forms, the shorter kept (fmt 4 after fmt 3 in out, moved down). */
        int rv = encode_xor(out, c, n), made;
        size_t xlen = out->len;
        if (rv != 0 || (rv = encode_dec(out, c, n, &made)) != 0 || !made)
            return rv;
        size_t dlen = out->len - xlen;
        if (dlen < xlen)
            memmove(out->p, out->p + xlen, dlen);
        out->len = dlen < xlen ? dlen : xlen;
        return 0;
    }
    size_t need = HDR + n * 8 + vbytes;
    if (pt_buf_reserve(out, need) != 0)
        return PT_ENOMEM;
    uint8_t *p = out->p;
    *p++ = 2;
    pt_put_be32(p, (uint32_t)n);
    p += 4;
    for (size_t i = 0; i < n; i++, p += 4)
        pt_put_be32(p, c[i].q);
    for (size_t i = 0; i < n; i++, p += 4)
        pt_put_be32(p, c[i].vlen);
    for (size_t i = 0; i < n; i++) {
        if (c[i].vlen)
            memcpy(p, vcell_val(&c[i]), c[i].vlen);
        p += c[i].vlen;
    }
    pt_buf_commit(out, need);
    return 0;
}

int pt_emb_chunk_key_split(const char *k, size_t kn, pt_slice *row, uint32_t *first)
{
    const char *z = memchr(k, 0, kn);
    if (!z || kn - (size_t)(z - k) != 5)
        return PT_EINTERNAL;
    *row = (pt_slice){(const uint8_t *)k, (size_t)(z - k)};
    *first = pt_get_be32((const uint8_t *)z + 1);
    return 0;
}
