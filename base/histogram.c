#include "histogram.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "bytes.h"
#include "error.h"

/* ---- memory ---- */

int pt_histogram_reserve(pt_histogram *h, size_t n_neg_spans, size_t n_pos_spans, size_t n_neg,
                         size_t n_pos, size_t n_custom)
{
    size_t elems = n_neg_spans;
    size_t parts[] = {n_pos_spans, n_neg, n_pos, n_custom};
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
        if (parts[i] > PT_HIST_MAX_ELEMS || elems > PT_HIST_MAX_ELEMS)
            return PT_ETOOLARGE;
        elems += parts[i];
    }
    if (elems > PT_HIST_MAX_ELEMS)
        return PT_ETOOLARGE;
    /* Spans and the 8-byte elements are all 8 bytes: one aligned block. */
    size_t need = elems * 8;
    if (need > h->mem_cap) {
        void *m = malloc(need);
        if (!m)
            return PT_ENOMEM;
        free(h->mem);
        h->mem = m;
        h->mem_cap = need;
    }
    if (need)
        memset(h->mem, 0, need);
    uint8_t *p = h->mem; /* NULL when need is 0: every array is then NULL too */
    size_t at[4] = {8 * n_neg_spans, 8 * (n_neg_spans + n_pos_spans),
                    8 * (n_neg_spans + n_pos_spans + n_neg),
                    8 * (n_neg_spans + n_pos_spans + n_neg + n_pos)};
    h->n_neg_spans = n_neg_spans;
    h->n_pos_spans = n_pos_spans;
    h->n_neg = n_neg;
    h->n_pos = n_pos;
    h->n_custom = n_custom;
    h->neg_spans = n_neg_spans ? (pt_hist_span *)p : NULL;
    h->pos_spans = n_pos_spans ? (pt_hist_span *)(p + at[0]) : NULL;
    h->neg_deltas = h->pos_deltas = NULL;
    h->neg_counts = h->pos_counts = NULL;
    if (h->is_float) {
        h->neg_counts = n_neg ? (double *)(p + at[1]) : NULL;
        h->pos_counts = n_pos ? (double *)(p + at[2]) : NULL;
    } else {
        h->neg_deltas = n_neg ? (int64_t *)(p + at[1]) : NULL;
        h->pos_deltas = n_pos ? (int64_t *)(p + at[2]) : NULL;
    }
    h->custom_values = n_custom ? (double *)(p + at[3]) : NULL;
    return 0;
}

void pt_histogram_free(pt_histogram *h)
{
    free(h->mem);
    *h = PT_HISTOGRAM_INIT;
}

int pt_histogram_copy(pt_histogram *dst, const pt_histogram *src)
{
    void *mem = dst->mem;
    size_t cap = dst->mem_cap;
    pt_histogram tmp = *src;
    tmp.mem = mem;
    tmp.mem_cap = cap;
    int rv = pt_histogram_reserve(&tmp, src->n_neg_spans, src->n_pos_spans, src->n_neg, src->n_pos,
                                  src->n_custom);
    if (rv != 0)
        return rv;
    if (src->n_neg_spans)
        memcpy(tmp.neg_spans, src->neg_spans, src->n_neg_spans * sizeof(pt_hist_span));
    if (src->n_pos_spans)
        memcpy(tmp.pos_spans, src->pos_spans, src->n_pos_spans * sizeof(pt_hist_span));
    if (src->n_neg)
        memcpy(src->is_float ? (void *)tmp.neg_counts : (void *)tmp.neg_deltas,
               src->is_float ? (const void *)src->neg_counts : (const void *)src->neg_deltas,
               src->n_neg * 8);
    if (src->n_pos)
        memcpy(src->is_float ? (void *)tmp.pos_counts : (void *)tmp.pos_deltas,
               src->is_float ? (const void *)src->pos_counts : (const void *)src->pos_deltas,
               src->n_pos * 8);
    if (src->n_custom)
        memcpy(tmp.custom_values, src->custom_values, src->n_custom * 8);
    *dst = tmp;
    return 0;
}

/* A copy of n elements of isz bytes in a, NULL when n is 0; *err set when a is full. */
static void *elems_in(pt_arena *a, const void *src, size_t n, size_t isz, int *err)
{
    if (n == 0)
        return NULL;
    void *p = pt_arena_alloc(a, n * isz);
    if (!p) {
        *err = PT_ENOMEM;
        return NULL;
    }
    memcpy(p, src, n * isz);
    return p;
}

int pt_histogram_copy_in(pt_arena *a, pt_histogram *dst, const pt_histogram *src)
{
    int err = 0;
    size_t nneg = src->n_neg, npos = src->n_pos;
    pt_histogram h = *src;
    h.mem = NULL;
    h.mem_cap = 0;
    h.neg_spans = elems_in(a, src->neg_spans, src->n_neg_spans, sizeof(pt_hist_span), &err);
    h.pos_spans = elems_in(a, src->pos_spans, src->n_pos_spans, sizeof(pt_hist_span), &err);
    h.neg_deltas = elems_in(a, src->neg_deltas, src->is_float ? 0 : nneg, 8, &err);
    h.pos_deltas = elems_in(a, src->pos_deltas, src->is_float ? 0 : npos, 8, &err);
    h.neg_counts = elems_in(a, src->neg_counts, src->is_float ? nneg : 0, 8, &err);
    h.pos_counts = elems_in(a, src->pos_counts, src->is_float ? npos : 0, 8, &err);
    h.custom_values = elems_in(a, src->custom_values, src->n_custom, 8, &err);
    if (err)
        return err;
    *dst = h;
    return 0;
}


static int same_bytes(const void *a, const void *b, size_t n)
{
    return n == 0 || memcmp(a, b, n) == 0;
}

int pt_histogram_equal(const pt_histogram *a, const pt_histogram *b)
{
    if (a->t != b->t || a->schema != b->schema || a->is_float != b->is_float ||
        a->reset_hint != b->reset_hint || a->count_int != b->count_int ||
        a->zero_count_int != b->zero_count_int ||
        pt_f64_bits(a->count_float) != pt_f64_bits(b->count_float) ||
        pt_f64_bits(a->zero_count_float) != pt_f64_bits(b->zero_count_float) ||
        pt_f64_bits(a->sum) != pt_f64_bits(b->sum) ||
        pt_f64_bits(a->zero_threshold) != pt_f64_bits(b->zero_threshold) ||
        a->n_neg_spans != b->n_neg_spans || a->n_pos_spans != b->n_pos_spans ||
        a->n_neg != b->n_neg || a->n_pos != b->n_pos || a->n_custom != b->n_custom)
        return 0;
    for (size_t i = 0; i < a->n_neg_spans; i++)
        if (a->neg_spans[i].offset != b->neg_spans[i].offset ||
            a->neg_spans[i].length != b->neg_spans[i].length)
            return 0;
    for (size_t i = 0; i < a->n_pos_spans; i++)
        if (a->pos_spans[i].offset != b->pos_spans[i].offset ||
            a->pos_spans[i].length != b->pos_spans[i].length)
            return 0;
    const void *an = a->is_float ? (const void *)a->neg_counts : (const void *)a->neg_deltas;
    const void *bn = b->is_float ? (const void *)b->neg_counts : (const void *)b->neg_deltas;
    const void *ap = a->is_float ? (const void *)a->pos_counts : (const void *)a->pos_deltas;
    const void *bp = b->is_float ? (const void *)b->pos_counts : (const void *)b->pos_deltas;
    return same_bytes(an, bn, a->n_neg * 8) && same_bytes(ap, bp, a->n_pos * 8) &&
           same_bytes(a->custom_values, b->custom_values, a->n_custom * 8);
}

int pt_histogram_is_stale(const pt_histogram *h)
{
    return pt_f64_bits(h->sum) == PT_HIST_STALE_NAN;
}

/* ---- validation (the rules of Prometheus' model/histogram, messages after its own) ---- */

static int fail(char *why, size_t whylen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *why, size_t whylen, const char *fmt, ...)
{
    if (whylen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, whylen, fmt, ap);
        va_end(ap);
    }
    return PT_EBADREQ;
}

/* Spans hold as many buckets as there are; offsets after the first are >= 0 (custom
 * buckets: every offset). Returns the buckets the spans cover including gaps in *reach. */
static int check_spans(const pt_hist_span *s, size_t n, size_t buckets, int custom,
                       const char *side, uint64_t *reach, char *why, size_t whylen)
{
    uint64_t total = 0, covered = 0;
    for (size_t i = 0; i < n; i++) {
        if ((i > 0 || custom) && s[i].offset < 0)
            return fail(why, whylen,
                        "%s: span number %zu with offset %d: histogram has a span "
                        "whose offset is negative",
                        side, i + 1, (int)s[i].offset);
        total += s[i].length;
        covered += (uint64_t)s[i].length + (uint64_t)(int64_t)s[i].offset;
    }
    if (total != buckets)
        return fail(why, whylen,
                    "%s: spans need %llu buckets, have %zu buckets: histogram spans "
                    "specify different number of buckets than provided",
                    side, (unsigned long long)total, buckets);
    *reach = covered;
    return 0;
}

/* Integer buckets: the running sum of the deltas is each bucket's count, never negative. */
static int check_deltas(const int64_t *d, size_t n, uint64_t *sum, const char *side, char *why,
                        size_t whylen)
{
    int64_t c = 0;
    for (size_t i = 0; i < n; i++) {
        if (__builtin_add_overflow(c, d[i], &c))
            return fail(why, whylen, "%s: bucket number %zu overflows a 64-bit count", side, i + 1);
        if (c < 0)
            return fail(why, whylen,
                        "%s: bucket number %zu has observation count of %lld: "
                        "histogram has a bucket whose observation count is negative",
                        side, i + 1, (long long)c);
        if (__builtin_add_overflow(*sum, (uint64_t)c, sum))
            return fail(why, whylen, "%s: the bucket counts add up past 2^64", side);
    }
    return 0;
}

static int check_counts(const double *c, size_t n, const char *side, char *why, size_t whylen)
{
    for (size_t i = 0; i < n; i++)
        if (c[i] < 0)
            return fail(why, whylen,
                        "%s: bucket number %zu has observation count of %g: "
                        "histogram has a bucket whose observation count is negative",
                        side, i + 1, c[i]);
    return 0;
}

int pt_histogram_validate(const pt_histogram *h, char *why, size_t whylen)
{
    if (whylen)
        why[0] = 0;
    if (h->reset_hint > PT_HIST_RESET_GAUGE)
        return fail(why, whylen, "reset_hint %u is not one of UNKNOWN, YES, NO, GAUGE",
                    h->reset_hint);
    if (h->n_neg_spans > PT_HIST_MAX_ELEMS || h->n_pos_spans > PT_HIST_MAX_ELEMS ||
        h->n_neg > PT_HIST_MAX_ELEMS || h->n_pos > PT_HIST_MAX_ELEMS ||
        h->n_custom > PT_HIST_MAX_ELEMS ||
        h->n_neg_spans + h->n_pos_spans + h->n_neg + h->n_pos + h->n_custom > PT_HIST_MAX_ELEMS)
        return fail(why, whylen, "histogram has more than %zu spans, buckets and custom bounds",
                    PT_HIST_MAX_ELEMS);
    int custom = h->schema == PT_HIST_SCHEMA_CUSTOM;
    if (!custom && (h->schema < PT_HIST_SCHEMA_MIN || h->schema > PT_HIST_SCHEMA_MAX))
        return fail(why, whylen,
                    "invalid histogram schema %d: schemas are -4 to 8 "
                    "(exponential) and -53 (custom buckets)",
                    (int)h->schema);
    uint64_t reach = 0, ints = 0;
    int rv;
    const char *pos = custom ? "custom buckets" : "positive side";
    if (custom) {
        for (size_t i = 0; i < h->n_custom; i++) {
            double b = h->custom_values[i];
            if (isnan(b))
                return fail(why, whylen, "custom buckets: bound number %zu is NaN", i + 1);
            if (i > 0 && !(b > h->custom_values[i - 1]))
                return fail(why, whylen,
                            "custom buckets: previous bound is %g and current is "
                            "%g: custom buckets must be in increasing order",
                            h->custom_values[i - 1], b);
        }
        if (h->n_custom && isinf(h->custom_values[h->n_custom - 1]) &&
            h->custom_values[h->n_custom - 1] > 0)
            return fail(why, whylen,
                        "custom buckets: last +Inf bound must not be explicitly "
                        "defined");
        if ((rv = check_spans(h->pos_spans, h->n_pos_spans, h->n_pos, 1, pos, &reach, why,
                              whylen)) != 0)
            return rv;
        if (h->n_custom + 1 < reach)
            return fail(why, whylen,
                        "custom buckets: only %zu custom bounds defined which is "
                        "insufficient to cover total span length of %llu",
                        h->n_custom, (unsigned long long)reach);
        if (h->is_float ? h->zero_count_float != 0 : h->zero_count_int != 0)
            return fail(why, whylen, "custom buckets: must have zero count of 0");
        if (h->zero_threshold != 0)
            return fail(why, whylen, "custom buckets: must have zero threshold of 0");
        if (h->n_neg_spans)
            return fail(why, whylen, "custom buckets: must not have negative spans");
        if (h->n_neg)
            return fail(why, whylen, "custom buckets: must not have negative buckets");
    } else {
        if ((rv = check_spans(h->pos_spans, h->n_pos_spans, h->n_pos, 0, pos, &reach, why,
                              whylen)) != 0 ||
            (rv = check_spans(h->neg_spans, h->n_neg_spans, h->n_neg, 0, "negative side", &reach,
                              why, whylen)) != 0)
            return rv;
        if (h->n_custom)
            return fail(why, whylen,
                        "histogram with exponential schema must not have custom "
                        "bounds");
    }
    if (h->is_float) {
        /* Prometheus does not compare count with the buckets' sum for floats (rounding). */
        if ((rv = check_counts(h->neg_counts, h->n_neg, "negative side", why, whylen)) != 0 ||
            (rv = check_counts(h->pos_counts, h->n_pos, pos, why, whylen)) != 0)
            return rv;
        return 0;
    }
    if ((rv = check_deltas(h->neg_deltas, h->n_neg, &ints, "negative side", why, whylen)) != 0 ||
        (rv = check_deltas(h->pos_deltas, h->n_pos, &ints, pos, why, whylen)) != 0)
        return rv;
    if (__builtin_add_overflow(ints, h->zero_count_int, &ints))
        return fail(why, whylen, "the bucket counts and the zero count add up past 2^64");
    if (isnan(h->sum) ? ints > h->count_int : ints != h->count_int)
        return fail(why, whylen,
                    "%llu observations found in buckets, but the Count field is "
                    "%llu: histogram's observation count should %s sum of all buckets",
                    (unsigned long long)ints, (unsigned long long)h->count_int,
                    isnan(h->sum) ? "be at least the"
                                  : "equal the number of observations "
                                    "found in the buckets (in absence of NaN), the");
    return 0;
}

/* ---- the cell ----
 *   kind (1: integer, 2: float) | reset hint (1) | schema (zig-zag varint) |
 *   sum (8, big-endian bits) | zero threshold (8) | count | zero count |
 *   negative spans | positive spans | negative buckets | positive buckets | custom values
 * count, zero count: integer a varint, float 8 bytes; spans: a varint count, then per span
 * the offset (zig-zag varint) and length (varint); buckets: a varint count, then integer
 * deltas as zig-zag varints or float counts as 8 bytes; custom values: a varint count, then
 * 8 bytes each. */

static uint64_t zz(int64_t v)
{
    return (uint64_t)v << 1 ^ (uint64_t)(v >> 63);
}

static int64_t unzz(uint64_t z)
{
    return (int64_t)(z >> 1 ^ (0 - (z & 1)));
}

static size_t spans_size(const pt_hist_span *s, size_t n)
{
    size_t b = pt_uvarint_size(n);
    for (size_t i = 0; i < n; i++)
        b += pt_uvarint_size(zz(s[i].offset)) + pt_uvarint_size(s[i].length);
    return b;
}

static size_t deltas_size(const int64_t *d, size_t n)
{
    size_t b = pt_uvarint_size(n);
    for (size_t i = 0; i < n; i++)
        b += pt_uvarint_size(zz(d[i]));
    return b;
}

size_t pt_histogram_cell_size(const pt_histogram *h)
{
    size_t b = 2 + pt_uvarint_size(zz(h->schema)) + 16;
    b += spans_size(h->neg_spans, h->n_neg_spans) + spans_size(h->pos_spans, h->n_pos_spans);
    if (h->is_float)
        b += 16 + pt_uvarint_size(h->n_neg) + 8 * h->n_neg + pt_uvarint_size(h->n_pos) +
             8 * h->n_pos;
    else
        b += pt_uvarint_size(h->count_int) + pt_uvarint_size(h->zero_count_int) +
             deltas_size(h->neg_deltas, h->n_neg) + deltas_size(h->pos_deltas, h->n_pos);
    return b + pt_uvarint_size(h->n_custom) + 8 * h->n_custom;
}

static uint8_t *put_f64(uint8_t *p, double v)
{
    pt_put_be64(p, pt_f64_bits(v));
    return p + 8;
}

static uint8_t *put_spans(uint8_t *p, const pt_hist_span *s, size_t n)
{
    p = pt_put_uvarint(p, n);
    for (size_t i = 0; i < n; i++) {
        p = pt_put_uvarint(p, zz(s[i].offset));
        p = pt_put_uvarint(p, s[i].length);
    }
    return p;
}

static uint8_t *put_buckets(uint8_t *p, const pt_histogram *h, const int64_t *d, const double *c,
                            size_t n)
{
    p = pt_put_uvarint(p, n);
    for (size_t i = 0; i < n; i++)
        p = h->is_float ? put_f64(p, c[i]) : pt_put_uvarint(p, zz(d[i]));
    return p;
}

size_t pt_histogram_cell_encode(const pt_histogram *h, uint8_t *out)
{
    uint8_t *p = out;
    *p++ = h->is_float ? PT_HIST_CELL_FLOAT : PT_HIST_CELL_INT;
    *p++ = h->reset_hint;
    p = pt_put_uvarint(p, zz(h->schema));
    p = put_f64(p, h->sum);
    p = put_f64(p, h->zero_threshold);
    if (h->is_float) {
        p = put_f64(p, h->count_float);
        p = put_f64(p, h->zero_count_float);
    } else {
        p = pt_put_uvarint(p, h->count_int);
        p = pt_put_uvarint(p, h->zero_count_int);
    }
    p = put_spans(p, h->neg_spans, h->n_neg_spans);
    p = put_spans(p, h->pos_spans, h->n_pos_spans);
    p = put_buckets(p, h, h->neg_deltas, h->neg_counts, h->n_neg);
    p = put_buckets(p, h, h->pos_deltas, h->pos_counts, h->n_pos);
    p = pt_put_uvarint(p, h->n_custom);
    for (size_t i = 0; i < h->n_custom; i++)
        p = put_f64(p, h->custom_values[i]);
    return (size_t)(p - out);
}

typedef struct rd {
    const uint8_t *p;
    size_t n, i;
} rd;

static int rd_f64(rd *r, double *v)
{
    if (r->n - r->i < 8)
        return -1;
    uint64_t b = pt_get_be64(r->p + r->i);
    memcpy(v, &b, 8);
    r->i += 8;
    return 0;
}

static int rd_var(rd *r, uint64_t *v)
{
    return pt_get_uvarint(r->p, r->n, &r->i, v);
}

/* A count of elements that take at least min bytes each: it cannot pass what is left. */
static int rd_count(rd *r, size_t min, uint64_t *v)
{
    return rd_var(r, v) != 0 || *v > (r->n - r->i) / min ? -1 : 0;
}

static int rd_spans(rd *r, uint64_t *n, const uint8_t **at)
{
    if (rd_count(r, 2, n) != 0)
        return -1;
    *at = r->p + r->i;
    for (uint64_t i = 0; i < *n; i++) {
        uint64_t o = 0, l = 0;
        if (rd_var(r, &o) != 0 || rd_var(r, &l) != 0 || unzz(o) < INT32_MIN ||
            unzz(o) > INT32_MAX || l > UINT32_MAX)
            return -1;
    }
    return 0;
}

static void fill_spans(const uint8_t *at, pt_hist_span *s, size_t n)
{
    rd r = {at, SIZE_MAX, 0};
    for (size_t i = 0; i < n; i++) {
        uint64_t o = 0, l = 0;
        rd_var(&r, &o);
        rd_var(&r, &l);
        s[i] = (pt_hist_span){(int32_t)unzz(o), (uint32_t)l};
    }
}

static int rd_buckets(rd *r, int is_float, int64_t *d, double *c, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t z;
        if (is_float ? rd_f64(r, &c[i]) != 0 : rd_var(r, &z) != 0)
            return -1;
        if (!is_float)
            d[i] = unzz(z);
    }
    return 0;
}

int pt_histogram_cell_decode(const uint8_t *p, size_t n, pt_histogram *h)
{
    rd r = {p, n, 0};
    uint64_t schema = 0, nns = 0, nps = 0, nn = 0, np = 0, nc = 0;
    const uint8_t *ns_at, *ps_at;
    if (n < 3 || (p[0] != PT_HIST_CELL_INT && p[0] != PT_HIST_CELL_FLOAT) ||
        p[1] > PT_HIST_RESET_GAUGE)
        return PT_EINTERNAL;
    pt_histogram v = *h;
    v.is_float = p[0] == PT_HIST_CELL_FLOAT;
    v.reset_hint = p[1];
    r.i = 2;
    v.count_int = v.zero_count_int = 0;
    v.count_float = v.zero_count_float = 0;
    if (rd_var(&r, &schema) != 0 || unzz(schema) < INT32_MIN || unzz(schema) > INT32_MAX ||
        rd_f64(&r, &v.sum) != 0 || rd_f64(&r, &v.zero_threshold) != 0)
        return PT_EINTERNAL;
    v.schema = (int32_t)unzz(schema);
    if (v.is_float ? rd_f64(&r, &v.count_float) != 0 || rd_f64(&r, &v.zero_count_float) != 0
                   : rd_var(&r, &v.count_int) != 0 || rd_var(&r, &v.zero_count_int) != 0)
        return PT_EINTERNAL;
    if (rd_spans(&r, &nns, &ns_at) != 0 || rd_spans(&r, &nps, &ps_at) != 0 ||
        rd_count(&r, 1, &nn) != 0)
        return PT_EINTERNAL;
    size_t b_at = r.i;
    /* Skip the buckets to size everything before filling. */
    for (int side = 0; side < 2; side++) {
        if (side == 1 && rd_count(&r, 1, &np) != 0)
            return PT_EINTERNAL;
        uint64_t cnt = side ? np : nn, z;
        if (v.is_float && r.n - r.i < 8 * cnt)
            return PT_EINTERNAL;
        for (uint64_t i = 0; i < cnt && !v.is_float; i++)
            if (rd_var(&r, &z) != 0)
                return PT_EINTERNAL;
        if (v.is_float)
            r.i += 8 * cnt;
    }
    if (rd_count(&r, 8, &nc) != 0 || r.n - r.i != 8 * nc)
        return PT_EINTERNAL;
    int rv = pt_histogram_reserve(&v, nns, nps, nn, np, nc);
    if (rv != 0)
        return rv == PT_ETOOLARGE ? PT_EINTERNAL : rv;
    fill_spans(ns_at, v.neg_spans, nns);
    fill_spans(ps_at, v.pos_spans, nps);
    r.i = b_at;
    uint64_t skip;
    rd_buckets(&r, v.is_float, v.neg_deltas, v.neg_counts, nn);
    rd_var(&r, &skip);
    rd_buckets(&r, v.is_float, v.pos_deltas, v.pos_counts, np);
    rd_var(&r, &skip);
    for (size_t i = 0; i < nc; i++)
        rd_f64(&r, &v.custom_values[i]);
    *h = v;
    return 0;
}
