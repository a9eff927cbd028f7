/*
 * The stored form of the points table ("points.v2"): the cells of a row in chunks.
 *
 *     key   = row || 0x00 || first qualifier of the chunk (4 bytes)
 *     value = fmt (1 byte) || count (4 bytes BE) || count qualifiers (4 bytes BE each,
 *             strictly increasing) || values
 *             fmt 1: count values of exactly 8 bytes
 *             fmt 2: count value lengths (4 bytes BE each), then the values back to back
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

int pt_emb_chunk_parse(const uint8_t *p, size_t n, chunk *c)
{
    if (n < 5 || (p[0] != 1 && p[0] != 2))
        return PT_EINTERNAL;
    c->count = pt_get_be32(p + 1);
    c->fixed = p[0] == 1;
    if (c->count == 0)
        return PT_EINTERNAL;
    size_t need = 5 + (size_t)c->count * (c->fixed ? 12 : 8);
    if (need > n)
        return PT_EINTERNAL;
    c->quals = p + 5;
    c->lens = c->fixed ? NULL : c->quals + 4 * (size_t)c->count;
    c->vals = c->quals + (size_t)c->count * (c->fixed ? 4 : 8);
    if (!c->fixed) {
        size_t total = need;
        for (uint32_t i = 0; i < c->count; i++)
            total += chunk_vlen(c, i);
        if (total != n)
            return PT_EINTERNAL;
    } else if (need != n) {
        return PT_EINTERNAL;
    }
    return 0;
}

int pt_emb_chunk_cells(const chunk *c, vcells *out)
{
    const uint8_t *v = c->vals;
    for (uint32_t i = 0; i < c->count; i++) {
        uint32_t len = chunk_vlen(c, i);
        if (vcells_push(out, chunk_qual(c, i), len, v) != 0)
            return PT_ENOMEM;
        v += len;
    }
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
    size_t need = 5 + n * (fixed ? 4 : 8) + vbytes;
    pt_buf_reset(out);
    if (pt_buf_reserve(out, need) != 0)
        return PT_ENOMEM;
    uint8_t *p = out->p;
    *p++ = fixed ? 1 : 2;
    pt_put_be32(p, (uint32_t)n);
    p += 4;
    for (size_t i = 0; i < n; i++, p += 4)
        pt_put_be32(p, c[i].q);
    if (!fixed)
        for (size_t i = 0; i < n; i++, p += 4)
            pt_put_be32(p, c[i].vlen);
    for (size_t i = 0; i < n; i++) {
        if (c[i].vlen)
            memcpy(p, c[i].v, c[i].vlen);
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
