#include "cellchunk.h"

#include <stdint.h>
#include <string.h>

#include "buf.h"
#include "bytes.h"
#include "error.h"
#include "gorilla.h"
#include "hchunk.h"
#include "histogram.h"

enum { HDR = 5, DEC_K_MAX = 9, DEC_DOD = 0x10, DEC_FIX = 0x20 };
enum { PART_CELLS = 0, PART_HDR = 6 }; /* fmt 5: a raw part's kind; a histogram part's header */
#define HCHUNK_MAX ((size_t)1 << 20)    /* bytes one histogram part may take */
#define DEC_FIX_MAX ((int64_t)1 << 20) /* the largest correction a flush writes */

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

/* The bytes of count values whose lengths are at lens, within room bytes, in *vbytes:
 * 0, or PT_EINTERNAL when they do not fit. */
static int cells_bytes(const uint8_t *lens, size_t count, size_t room, size_t *vbytes)
{
    size_t sum = 0;
    for (size_t i = 0; i < count; i++) {
        uint32_t len = pt_get_be32(lens + 4 * i);
        if (len > room - sum)
            return PT_EINTERNAL;
        sum += len;
    }
    *vbytes = sum;
    return 0;
}

/* The length of the fmt 5 part at p[0, n) and its samples: 0, or PT_EINTERNAL when it is
 * not a part (a histogram chunk's stream is checked as it decodes). */
static int part_size(const uint8_t *p, size_t n, size_t *len, uint32_t *cnt)
{
    if (p[0] == PART_CELLS) {
        if (n < 5)
            return PT_EINTERNAL;
        *cnt = pt_get_be32(p + 1);
        size_t vbytes, room = n - 5;
        if (*cnt == 0 || room / 8 < *cnt ||
            cells_bytes(p + 5 + 4 * (size_t)*cnt, *cnt, room - 8 * (size_t)*cnt, &vbytes) != 0)
            return PT_EINTERNAL;
        *len = 5 + 8 * (size_t)*cnt + vbytes;
        return 0;
    }
    if ((p[0] != PT_HCHUNK_HISTOGRAM && p[0] != PT_HCHUNK_FLOAT_HISTOGRAM) || n < PART_HDR + 3)
        return PT_EINTERNAL;
    uint32_t hn = pt_get_be32(p + 2);
    *cnt = (uint32_t)p[PART_HDR] << 8 | p[PART_HDR + 1];
    if (hn < 3 || hn > n - PART_HDR || *cnt == 0)
        return PT_EINTERNAL;
    *len = PART_HDR + hn;
    return 0;
}

static int parse_parts(const pt_cellchunk *c)
{
    uint64_t total = 0;
    for (size_t at = 0; at < c->stream.n;) {
        size_t len;
        uint32_t cnt;
        if (part_size(c->stream.p + at, c->stream.n - at, &len, &cnt) != 0)
            return PT_EINTERNAL;
        at += len;
        total += cnt;
    }
    return total == c->count ? 0 : PT_EINTERNAL;
}

int pt_cellchunk_parse(const uint8_t *p, size_t n, pt_cellchunk *c)
{
    if (n < HDR || p[0] < 1 || p[0] > 5)
        return PT_EINTERNAL;
    *c = (pt_cellchunk){.fmt = p[0], .count = pt_get_be32(p + 1)};
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
        if (body < 5 || (p[HDR] & 0xf) > DEC_K_MAX || p[HDR] > (DEC_DOD | DEC_FIX | 0xf))
            return PT_EINTERNAL;
        uint32_t tlen = pt_get_be32(p + HDR + 1);
        /* The timestamps take at least 72 bits, then 2 per sample; a value 1 byte. */
        if (tlen > body - 5 || (uint64_t)tlen * 8 < 72 + 2 * (uint64_t)(count - 1) ||
            body - 5 - tlen < count)
            return PT_EINTERNAL;
        c->k = p[HDR] & 0xf;
        c->mode = p[HDR] & (DEC_DOD | DEC_FIX);
        c->stream = (pt_slice){p + HDR + 5, tlen};
        c->vals = p + HDR + 5 + tlen;
        c->vlen_total = body - 5 - tlen;
        return 0;
    }
    if (c->fmt == 5) {
        c->stream = (pt_slice){p + HDR, body};
        return parse_parts(c);
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
    size_t used;
    return cells_bytes(c->lens, count, vbytes, &used) == 0 && used == vbytes ? 0 : PT_EINTERNAL;
}

/* Decodes a fmt 3 stream, or the timestamps of a fmt 4 chunk and its values: its cells
 * in [lo, hi) appended to out unless out is NULL, then the last qualifier decoded in
 * *last. Decoding stops at the first qualifier at or past hi: the rest of the stream is
 * then neither decoded nor checked. */
static int walk_xor(const pt_cellchunk *c, pt_vcells *out, uint64_t lo, uint64_t hi,
                    uint32_t *last)
{
    pt_gorilla_dec d;
    pt_gorilla_dec_init(&d, c->stream.p, c->stream.n);
    int64_t prev = -1;
    uint64_t m = 0, d1 = 0; /* fmt 4: the value and its last difference */
    size_t vi = 0;
    for (uint32_t i = 0; i < c->count; i++) {
        int64_t t;
        uint64_t bits;
        uint8_t v[8];
        /* Qualifiers are 4 bytes and strictly increasing. */
        if (pt_gorilla_dec_next(&d, &t, &bits) != 0 || t <= prev || t > (int64_t)UINT32_MAX)
            return PT_EINTERNAL;
        prev = t;
        if ((uint64_t)t >= hi) {
            *last = (uint32_t)t;
            return 0;
        }
        if (c->fmt == 4) {
            uint64_t z, fix = 0;
            if (bits != 0 || pt_get_uvarint(c->vals, c->vlen_total, &vi, &z) != 0 ||
                ((c->mode & DEC_FIX) && pt_get_uvarint(c->vals, c->vlen_total, &vi, &fix) != 0))
                return PT_EINTERNAL;
            /* Wrapping arithmetic; only the result is checked. */
            if (i >= 2 && (c->mode & DEC_DOD))
                d1 += unzigzag(z);
            else
                d1 = unzigzag(z);
            m += d1;
            if ((int64_t)m > DEC_M_MAX || (int64_t)m < -DEC_M_MAX)
                return PT_EINTERNAL;
            bits = dec_bits((int64_t)m, c->k) + unzigzag(fix);
        }
        if (out && (uint64_t)t >= lo) {
            pt_put_be64(v, bits);
            if (pt_vcells_push(out, (uint32_t)t, 8, v) != 0)
                return PT_ENOMEM;
        }
    }
    if (!pt_gorilla_dec_done(&d) || (c->fmt == 4 && vi != c->vlen_total))
        return PT_EINTERNAL;
    *last = (uint32_t)prev;
    return 0;
}

/* Walks count cells of fmt 1 (lens NULL) or 2 form, their qualifiers past *prev: each
 * appended to out unless out is NULL; *prev becomes the last qualifier. */
static int walk_cells(const uint8_t *quals, const uint8_t *lens, const uint8_t *v,
                      uint32_t count, pt_vcells *out, int64_t *prev)
{
    for (uint32_t i = 0; i < count; i++) {
        uint32_t len = lens ? pt_get_be32(lens + 4 * (size_t)i) : 8;
        uint32_t q = pt_get_be32(quals + 4 * (size_t)i);
        if ((int64_t)q <= *prev)
            return PT_EINTERNAL;
        *prev = q;
        int rv = out ? pt_vcells_push(out, q, len, v) : 0;
        if (rv != 0)
            return rv;
        v += len;
    }
    return 0;
}

/* Appends h's cell to out, its value in out->own. */
static int push_hist(pt_vcells *out, const pt_histogram *h)
{
    if (!out->own.block_size)
        pt_arena_init(&out->own, 0, 0);
    size_t n = pt_histogram_cell_size(h);
    uint8_t *v = n <= UINT32_MAX ? pt_arena_alloc(&out->own, n) : NULL;
    if (!v)
        return PT_ENOMEM;
    pt_histogram_cell_encode(h, v);
    return pt_vcells_push(out, (uint32_t)h->t, (uint32_t)n, v);
}

/* The samples of a fmt 5 histogram part p[0, n) (framing checked), past *prev. */
static int walk_hchunk(const uint8_t *p, size_t n, pt_vcells *out, int64_t *prev,
                       pt_histogram *h)
{
    pt_hchunk_dec d;
    int rv = pt_hchunk_dec_init(&d, p[0], p + PART_HDR, n - PART_HDR, p[1]);
    while (rv == 0 && (rv = pt_hchunk_dec_next(&d, h)) == 1) {
        if (h->t <= *prev || h->t > (int64_t)UINT32_MAX)
            rv = PT_EINTERNAL;
        else
            rv = out ? push_hist(out, h) : 0;
        *prev = h->t;
    }
    pt_hchunk_dec_free(&d);
    return rv;
}

/* Decodes a fmt 5 chunk: its cells appended to out unless out is NULL. */
static int walk_parts(const pt_cellchunk *c, pt_vcells *out, int64_t *prev)
{
    pt_histogram h = PT_HISTOGRAM_INIT;
    int rv = 0;
    for (size_t at = 0; at < c->stream.n && rv == 0;) {
        const uint8_t *p = c->stream.p + at;
        size_t len;
        uint32_t cnt;
        part_size(p, c->stream.n - at, &len, &cnt); /* checked by parse */
        if (p[0] == PART_CELLS)
            rv = walk_cells(p + 5, p + 5 + 4 * (size_t)cnt, p + 5 + 8 * (size_t)cnt, cnt, out,
                            prev);
        else
            rv = walk_hchunk(p, len, out, prev, &h);
        at += len;
    }
    pt_histogram_free(&h);
    return rv;
}

int pt_cellchunk_cells(const pt_cellchunk *c, pt_vcells *out)
{
    uint32_t last;
    return pt_cellchunk_cells_in(c, 0, UINT64_MAX, out, &last);
}

int pt_cellchunk_cells_in(const pt_cellchunk *c, uint64_t lo, uint64_t hi, pt_vcells *out,
                          uint32_t *last)
{
    size_t had = out->n;
    int64_t prev = -1;
    int rv;
    if (c->fmt >= 3 && c->fmt <= 4)
        rv = walk_xor(c, out, lo, hi, last);
    else if (c->fmt == 5)
        rv = walk_parts(c, out, &prev);
    else
        rv = walk_cells(c->quals, c->lens, c->vals, c->count, out, &prev);
    if (rv != 0) {
        out->n = had;
        return rv;
    }
    if (c->fmt == 5 || c->fmt <= 2) {
        /* Every cell decoded: keep those in [lo, hi). */
        size_t k = had;
        for (size_t i = had; i < out->n; i++)
            if (out->c[i].q >= lo && out->c[i].q < hi)
                out->c[k++] = out->c[i];
        out->n = k;
        *last = (uint32_t)prev;
    }
    return 0;
}

int pt_cellchunk_last(const pt_cellchunk *c, uint32_t *q)
{
    if (c->fmt == 5) {
        int64_t prev = -1;
        int rv = walk_parts(c, NULL, &prev);
        *q = (uint32_t)prev;
        return rv;
    }
    if (c->fmt >= 3)
        return walk_xor(c, NULL, 0, UINT64_MAX, q);
    *q = pt_get_be32(c->quals + 4 * ((size_t)c->count - 1));
    return 0;
}

static int encode_xor(pt_buf *out, const pt_vcell *c, size_t n)
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

int pt_cellchunk_to_stream(const pt_cellchunk *c, pt_vcells *scratch, pt_buf *buf,
                           pt_slice *out)
{
    if (!pt_cellchunk_floats(c))
        return PT_EINTERNAL;
    pt_vcells_reset(scratch);
    if (c->fmt == 3) {
        *out = c->stream;
        return 0;
    }
    int rv = pt_cellchunk_cells(c, scratch);
    if (rv != 0)
        return rv;
    size_t n = scratch->n, cap = pt_gorilla_max_bytes(n);
    pt_buf_reset(buf);
    if (pt_buf_reserve(buf, cap) != 0)
        return PT_ENOMEM;
    memset(buf->p, 0, cap);
    pt_gorilla_enc e;
    pt_gorilla_enc_init(&e, buf->p);
    for (size_t i = 0; i < n; i++) {
        if (scratch->c[i].vlen != 8)
            return PT_EINTERNAL;
        pt_gorilla_enc_add(&e, scratch->c[i].q, pt_get_be64(scratch->c[i].v.in));
    }
    pt_buf_commit(buf, pt_gorilla_enc_len(&e));
    *out = (pt_slice){buf->p, buf->len};
    return 0;
}

/* m and the correction fix such that the bits of m / 10^k, plus fix, are those of v, when
 * |fix| <= DEC_FIX_MAX: 1, else 0 (NaNs, infinities, values past 2^53 / 10^k, values far
 * from every decimal at k digits). */
static int dec_of(uint64_t bits, unsigned k, int64_t *m, int64_t *fix)
{
    double v;
    memcpy(&v, &bits, sizeof(v));
    double x = v * pow10[k];
    if (!(x > -(double)DEC_M_MAX && x < (double)DEC_M_MAX))
        return 0;
    *m = (int64_t)(x < 0 ? x - 0.5 : x + 0.5);
    *fix = (int64_t)(bits - dec_bits(*m, k));
    return *fix >= -DEC_FIX_MAX && *fix <= DEC_FIX_MAX;
}

/* The smallest k, from k up, at which every value is near a decimal (exact: with no
 * correction), or -1. A value exact at k is exact at every larger k its m fits in (m / 10^k
 * is the same real number as 10m / 10^(k+1), and the division rounds it correctly). */
static int dec_k(const pt_vcell *c, size_t n, unsigned k, int exact)
{
    int64_t m, fix;
    if (k > DEC_K_MAX)
        return -1;
    for (size_t i = 0; i < n; i++) {
        uint64_t bits = pt_get_be64(c[i].v.in);
        while (!dec_of(bits, k, &m, &fix) || (exact && fix != 0))
            if (++k > DEC_K_MAX)
                return -1;
    }
    /* A value that was near a decimal at a smaller k need not be at the final one. */
    for (size_t i = 0; i < n; i++)
        if (!dec_of(pt_get_be64(c[i].v.in), k, &m, &fix) || (exact && fix != 0))
            return -1;
    return (int)k;
}

/* The bytes of fmt 4's values at k (every value near a decimal there: dec_k) and the mode
 * that gives them: corrections only when needed; differences or their differences,
 * whichever take fewer bytes. */
static size_t dec_cost(const pt_vcell *c, size_t n, unsigned k, uint8_t *mode)
{
    size_t dbytes = 0, ddbytes = 0, fbytes = 0;
    int fixes = 0;
    int64_t m = 0, fix = 0, prev = 0, prevd = 0;
    for (size_t i = 0; i < n; i++) {
        dec_of(pt_get_be64(c[i].v.in), k, &m, &fix);
        uint64_t d = (uint64_t)m - (uint64_t)prev;
        dbytes += pt_uvarint_size(zigzag(d));
        ddbytes += pt_uvarint_size(zigzag(i < 2 ? d : d - (uint64_t)prevd));
        fbytes += pt_uvarint_size(zigzag((uint64_t)fix));
        fixes |= fix != 0;
        prev = m;
        prevd = (int64_t)d;
    }
    *mode = (uint8_t)k | (ddbytes < dbytes ? DEC_DOD : 0) | (fixes ? DEC_FIX : 0);
    return (ddbytes < dbytes ? ddbytes : dbytes) + (fixes ? fbytes : 0);
}

/* Appends fmt 4 to out (after what it holds) when the values allow it. 0 with *made set.
 * k is the fewest digits after the point at which every value is near a decimal, or, when
 * that needs corrections, the fewest at which every value is exact if those come out
 * shorter: values of 8 decimals around 10^5 are within 2^20 units in the last place of a
 * 5-decimal, and the corrections would cost more than the 3 digits they save. */
static int encode_dec(pt_buf *out, const pt_vcell *c, size_t n, int *made)
{
    *made = 0;
    int k = dec_k(c, n, 0, 0);
    if (k < 0)
        return 0;
    uint8_t mode, xmode;
    size_t cost = dec_cost(c, n, (unsigned)k, &mode);
    int x = mode & DEC_FIX ? dec_k(c, n, (unsigned)k + 1, 1) : -1;
    if (x > 0 && dec_cost(c, n, (unsigned)x, &xmode) < cost)
        k = x, mode = xmode;
    int64_t m = 0, fix = 0, prev = 0, prevd = 0;
    size_t at = out->len, tcap = pt_gorilla_max_bytes(n);
    if (pt_buf_reserve(out, HDR + 5 + tcap + 20 * n) != 0)
        return PT_ENOMEM;
    uint8_t *p = out->p + at;
    memset(p, 0, HDR + 5 + tcap);
    p[0] = 4;
    pt_put_be32(p + 1, (uint32_t)n);
    p[HDR] = mode;
    pt_gorilla_enc e;
    pt_gorilla_enc_init(&e, p + HDR + 5);
    for (size_t i = 0; i < n; i++)
        pt_gorilla_enc_add(&e, c[i].q, 0);
    size_t tlen = pt_gorilla_enc_len(&e);
    pt_put_be32(p + HDR + 1, (uint32_t)tlen);
    uint8_t *v = p + HDR + 5 + tlen;
    prev = prevd = 0;
    for (size_t i = 0; i < n; i++) {
        dec_of(pt_get_be64(c[i].v.in), (unsigned)k, &m, &fix);
        uint64_t d = (uint64_t)m - (uint64_t)prev;
        v = pt_put_uvarint(v, zigzag((mode & DEC_DOD) && i >= 2 ? d - (uint64_t)prevd : d));
        if (mode & DEC_FIX)
            v = pt_put_uvarint(v, zigzag((uint64_t)fix));
        prev = m;
        prevd = (int64_t)d;
    }
    pt_buf_commit(out, (size_t)(v - p));
    *made = 1;
    return 0;
}

/* Appends kind || n (4 bytes BE) || the cells c[0..n) as fmt 2 lays them out: a fmt 2
 * chunk's header and body (kind 2), or a fmt 5 part (kind 0). */
static int put_cells(pt_buf *out, uint8_t kind, const pt_vcell *c, size_t n)
{
    size_t need = HDR + n * 8;
    for (size_t i = 0; i < n; i++)
        need += c[i].vlen;
    uint8_t *p = pt_buf_room(out, need);
    if (!p)
        return PT_ENOMEM;
    *p++ = kind;
    pt_put_be32(p, (uint32_t)n);
    p += 4;
    for (size_t i = 0; i < n; i++, p += 4)
        pt_put_be32(p, c[i].q);
    for (size_t i = 0; i < n; i++, p += 4)
        pt_put_be32(p, c[i].vlen);
    for (size_t i = 0; i < n; i++) {
        if (c[i].vlen)
            memcpy(p, pt_vcell_val(&c[i]), c[i].vlen);
        p += c[i].vlen;
    }
    pt_buf_commit(out, need);
    return 0;
}

/* Appends the histogram chunk e holds as a fmt 5 part and starts e's next chunk. */
static int put_hchunk(pt_buf *out, pt_hchunk_enc *e)
{
    pt_slice b = pt_hchunk_enc_bytes(e);
    uint8_t *p = pt_buf_room(out, PART_HDR + b.n);
    if (!p)
        return PT_ENOMEM;
    p[0] = (uint8_t)pt_hchunk_enc_encoding(e);
    p[1] = pt_hchunk_enc_hints(e);
    pt_put_be32(p + 2, (uint32_t)b.n);
    memcpy(p + PART_HDR, b.p, b.n);
    pt_buf_commit(out, PART_HDR + b.n);
    pt_hchunk_enc_next(e);
    return 0;
}

/* 1 when c is a histogram cell in the form pt_histogram_cell_encode writes (read into h),
 * 0 when not, PT_ENOMEM. */
static int hist_cell(const pt_vcell *c, pt_histogram *h, pt_buf *tmp)
{
    if (!pt_histogram_cell_is(c->vlen))
        return 0;
    int rv = pt_histogram_cell_decode(pt_vcell_val(c), c->vlen, h);
    if (rv != 0)
        return rv == PT_ENOMEM ? rv : 0;
    if (pt_histogram_cell_size(h) != c->vlen)
        return 0;
    pt_buf_reset(tmp);
    uint8_t *p = pt_buf_room(tmp, c->vlen);
    if (!p)
        return PT_ENOMEM;
    pt_histogram_cell_encode(h, p);
    h->t = c->q;
    return memcmp(p, pt_vcell_val(c), c->vlen) == 0;
}

/* 1 when chunk bytes p[0, n) decode to exactly the cells c[0..n). */
static int decodes_to(const uint8_t *p, size_t len, const pt_vcell *c, size_t n)
{
    pt_cellchunk ch;
    pt_vcells got = {0};
    int same = pt_cellchunk_parse(p, len, &ch) == 0 && pt_cellchunk_cells(&ch, &got) == 0 &&
               got.n == n;
    for (size_t i = 0; same && i < n; i++)
        same = got.c[i].q == c[i].q && got.c[i].vlen == c[i].vlen &&
               memcmp(pt_vcell_val(&got.c[i]), pt_vcell_val(&c[i]), c[i].vlen) == 0;
    pt_vcells_free(&got);
    return same;
}

/* out = fmt 5 of c[0..n), *made = 1, when some cells go into histogram chunks, the chunk
 * is shorter than fmt 2 and decodes back to exactly c; else *made = 0. */
static int encode_hist(pt_buf *out, const pt_vcell *c, size_t n, int *made)
{
    pt_hchunk_enc e;
    pt_hchunk_enc_init(&e, HCHUNK_MAX);
    pt_histogram h = PT_HISTOGRAM_INIT;
    pt_buf tmp = PT_BUF_INIT(0);
    size_t raw = SIZE_MAX; /* the first cell of the run not in a histogram chunk, if any */
    int rv = 0, hists = 0;
    *made = 0;
    pt_buf_reset(out);
    uint8_t *p = pt_buf_room(out, HDR);
    if (!p)
        return PT_ENOMEM;
    p[0] = 5;
    pt_put_be32(p + 1, (uint32_t)n);
    pt_buf_commit(out, HDR);
    for (size_t i = 0; i < n && rv == 0; i++) {
        int in = 0, is = hist_cell(&c[i], &h, &tmp);
        if (is == 1) {
            int a = pt_hchunk_enc_add(&e, &h);
            if (a == PT_HCHUNK_CUT && (rv = put_hchunk(out, &e)) == 0)
                a = pt_hchunk_enc_add(&e, &h);
            if (a == PT_ENOMEM)
                rv = a;
            in = a == 0;
        } else if (is < 0) {
            rv = is;
        }
        if (rv != 0)
            break;
        if (in) {
            hists = 1;
            if (raw != SIZE_MAX)
                rv = put_cells(out, PART_CELLS, c + raw, i - raw);
            raw = SIZE_MAX;
        } else {
            if (e.n)
                rv = put_hchunk(out, &e);
            if (raw == SIZE_MAX)
                raw = i;
        }
    }
    if (rv == 0 && e.n)
        rv = put_hchunk(out, &e);
    if (rv == 0 && raw != SIZE_MAX)
        rv = put_cells(out, PART_CELLS, c + raw, n - raw);
    size_t fmt2 = HDR + 8 * n;
    for (size_t i = 0; i < n; i++)
        fmt2 += c[i].vlen;
    *made = rv == 0 && hists && out->len < fmt2 && decodes_to(out->p, out->len, c, n);
    pt_hchunk_enc_free(&e);
    pt_histogram_free(&h);
    pt_buf_free(&tmp);
    return rv;
}

int pt_cellchunk_encode(pt_buf *out, const pt_vcell *c, size_t n)
{
    int fixed = 1;
    for (size_t i = 0; i < n; i++)
        fixed &= c[i].vlen == 8;
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
    int made, rv = encode_hist(out, c, n, &made);
    if (rv != 0 || made)
        return rv;
    pt_buf_reset(out);
    return put_cells(out, 2, c, n);
}
