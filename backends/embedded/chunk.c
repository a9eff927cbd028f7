/*
 * The stored form of the points table ("points.v2"): the cells of a row in chunks.
 *
 *     key   = row || 0x00 || first qualifier of the chunk (4 bytes)
 *     value = fmt (1 byte) || count (4 bytes BE) || body
 *             fmt 3: the Gorilla / XOR stream of base/gorilla.h, count samples whose
 *                    timestamp is the qualifier and whose value is the 8 value bytes read
 *                    as a big-endian integer (a float64's bits); the stream fills the rest
 *                    of the value exactly, its padding bits zero
 *             fmt 2: count qualifiers (4 bytes BE each, strictly increasing), count value
 *                    lengths (4 bytes BE each), then the values back to back
 *             fmt 1: count qualifiers, then count values of exactly 8 bytes
 *
 * Flushes write fmt 3 when every value of the chunk has 8 bytes (a sample: about 1-2 bytes
 * where fmt 1 took 12) and fmt 2 otherwise; fmt 1 is read only, so stores written before
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

enum { HDR = 5 };

int pt_emb_chunk_parse(const uint8_t *p, size_t n, chunk *c)
{
    if (n < HDR || p[0] < 1 || p[0] > 3)
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

/* Decodes a fmt 3 stream: its cells appended to out unless out is NULL, then its last
 * qualifier in *last. */
static int walk_xor(const chunk *c, vcells *out, uint32_t *last)
{
    pt_gorilla_dec d;
    pt_gorilla_dec_init(&d, c->stream.p, c->stream.n);
    int64_t prev = -1;
    for (uint32_t i = 0; i < c->count; i++) {
        int64_t t;
        uint64_t bits;
        uint8_t v[8];
        /* Qualifiers are 4 bytes and strictly increasing. */
        if (pt_gorilla_dec_next(&d, &t, &bits) != 0 || t <= prev || t > (int64_t)UINT32_MAX)
            return PT_EINTERNAL;
        prev = t;
        pt_put_be64(v, bits);
        if (out && vcells_push(out, (uint32_t)t, 8, v) != 0)
            return PT_ENOMEM;
    }
    if (!pt_gorilla_dec_done(&d))
        return PT_EINTERNAL;
    *last = (uint32_t)prev;
    return 0;
}

int pt_emb_chunk_cells(const chunk *c, vcells *out)
{
    size_t had = out->n;
    uint32_t last;
    int rv = 0;
    if (c->fmt == 3) {
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
    if (c->fmt == 3)
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

int pt_emb_chunk_encode(pt_buf *out, const vcell *c, size_t n)
{
    int fixed = 1;
    size_t vbytes = 0;
    for (size_t i = 0; i < n; i++) {
        fixed &= c[i].vlen == 8;
        vbytes += c[i].vlen;
    }
    pt_buf_reset(out);
    if (fixed)
        return encode_xor(out, c, n);
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
