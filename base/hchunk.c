#include "hchunk.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bytes.h"
#include "error.h"

enum { HDR = 3 };

static const int varbit_sizes[] = {3, 6, 9, 12, 18, 25, 56};



/* ---- varbit integers (tsdb/chunkenc varbit.go) ---- */

static void put_varbit(pt_gorilla_enc *w, uint64_t v, int is_signed)
{
    if (v == 0) {
        pt_gorilla_put_bits(w, 0, 1);
        return;
    }
    int64_t s = (int64_t)v;
    for (int k = 0; k < 7; k++) {
        int n = varbit_sizes[k];
        uint64_t half = 1ULL << (n - 1);
        int fits = is_signed ? s >= -(int64_t)(half - 1) && s <= (int64_t)half : v < 2 * half;
        if (fits) {
            pt_gorilla_put_bits(w, (1ULL << (k + 2)) - 2, k + 2); /* k+1 ones, a zero */
            pt_gorilla_put_bits(w, v, n);
            return;
        }
    }
    pt_gorilla_put_bits(w, 0xff, 8);
    pt_gorilla_put_bits(w, v, 64);
}

static int get_varbit(pt_gorilla_dec *r, uint64_t *v, int is_signed)
{
    int ones = 0;
    uint64_t b = 1;
    while (ones < 8) {
        if (pt_gorilla_get_bits(r, 1, &b))
            return -1;
        if (!b)
            break;
        ones++;
    }
    if (ones == 0) {
        *v = 0;
        return 0;
    }
    int n = ones == 8 ? 64 : varbit_sizes[ones - 1];
    if (pt_gorilla_get_bits(r, n, v))
        return -1;
    if (is_signed && n < 64 && *v > 1ULL << (n - 1))
        *v -= 1ULL << n; /* negative: modulo 2^64 */
    return 0;
}

/* ---- layout ---- */

static void put_threshold(pt_gorilla_enc *w, double th)
{
    int exp;
    double frac = frexp(th, &exp);
    if (pt_f64_bits(th) == 0) {
        pt_gorilla_put_bits(w, 0, 8);
    } else if (frac == 0.5 && exp >= -242 && exp <= 11) {
        pt_gorilla_put_bits(w, (uint64_t)(exp + 243), 8);
    } else {
        pt_gorilla_put_bits(w, 255, 8);
        pt_gorilla_put_bits(w, pt_f64_bits(th), 64);
    }
}

static int get_threshold(pt_gorilla_dec *r, double *th)
{
    uint64_t b, x;
    if (pt_gorilla_get_bits(r, 8, &b))
        return -1;
    if (b == 255) {
        if (pt_gorilla_get_bits(r, 64, &x))
            return -1;
        *th = pt_bits_f64(x);
    } else {
        *th = b == 0 ? 0.0 : ldexp(0.5, (int)b - 243);
    }
    return 0;
}

/* A custom bound in thousandths when Prometheus' test takes it and it reads back as the
 * same bits (Prometheus would also take -0, which reads back as +0). */
static void put_bound(pt_gorilla_enc *w, double f)
{
    double tf = f * 1000;
    if (tf >= 0 && tf <= 33554430) {
        uint64_t m = (uint64_t)round(tf);
        if ((double)m / 1000 == f && pt_f64_bits((double)m / 1000) == pt_f64_bits(f)) {
            put_varbit(w, m + 1, 0);
            return;
        }
    }
    pt_gorilla_put_bits(w, 0, 1);
    pt_gorilla_put_bits(w, pt_f64_bits(f), 64);
}

static int get_bound(pt_gorilla_dec *r, double *f)
{
    uint64_t m, x;
    if (get_varbit(r, &m, 0))
        return -1;
    if (m == 0) {
        if (pt_gorilla_get_bits(r, 64, &x))
            return -1;
        *f = pt_bits_f64(x);
    } else {
        *f = (double)(m - 1) / 1000;
    }
    return 0;
}

static void put_spans(pt_gorilla_enc *w, const pt_hist_span *s, size_t n)
{
    put_varbit(w, n, 0);
    for (size_t i = 0; i < n; i++) {
        put_varbit(w, s[i].length, 0);
        put_varbit(w, (uint64_t)(int64_t)s[i].offset, 1);
    }
}

static size_t buckets_of(const pt_histogram *h)
{
    return h->n_pos + h->n_neg;
}

/* ---- encoder ---- */

void pt_hchunk_enc_init(pt_hchunk_enc *e, size_t max_bytes)
{
    /* The buffer grows past max by at most one sample's worst case, then gives it back. */
    *e = (pt_hchunk_enc){.out = PT_BUF_INIT(0), .max = max_bytes < HDR ? HDR : max_bytes};
}

void pt_hchunk_enc_free(pt_hchunk_enc *e)
{
    pt_buf_free(&e->out);
    pt_histogram_free(&e->last);
    free(e->bv);
    free(e->bdelta);
    free(e->bx);
    free(e->bsaved);
    *e = (pt_hchunk_enc){0};
}

void pt_hchunk_enc_next(pt_hchunk_enc *e)
{
    e->n = 0;
    e->bits = 0;
    e->out.len = 0;
}

static int same_spans(const pt_hist_span *a, size_t na, const pt_hist_span *b, size_t nb)
{
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof(*a)) == 0);
}

static int same_layout(const pt_histogram *a, const pt_histogram *b)
{
    return a->schema == b->schema && pt_f64_bits(a->zero_threshold) == pt_f64_bits(b->zero_threshold) &&
           a->n_custom == b->n_custom &&
           (a->n_custom == 0 || memcmp(a->custom_values, b->custom_values, 8 * a->n_custom) == 0) &&
           same_spans(a->pos_spans, a->n_pos_spans, b->pos_spans, b->n_pos_spans) &&
           same_spans(a->neg_spans, a->n_neg_spans, b->neg_spans, b->n_neg_spans);
}

/* 1 when some bucket of b (same spans as a) holds less than in a. */
static int bucket_fell(const pt_histogram *a, const pt_histogram *b)
{
    for (int side = 0; side < 2; side++) {
        size_t n = side ? a->n_neg : a->n_pos;
        int64_t ca = 0, cb = 0;
        for (size_t i = 0; i < n; i++) {
            if (a->is_float) {
                const double *fa = side ? a->neg_counts : a->pos_counts;
                const double *fb = side ? b->neg_counts : b->pos_counts;
                if (fb[i] < fa[i])
                    return 1;
            } else {
                ca = (int64_t)((uint64_t)ca + (uint64_t)(side ? a->neg_deltas : a->pos_deltas)[i]);
                cb = (int64_t)((uint64_t)cb + (uint64_t)(side ? b->neg_deltas : b->pos_deltas)[i]);
                if (cb < ca)
                    return 1;
            }
        }
    }
    return 0;
}

static uint8_t header_of_hint(uint8_t hint)
{
    return hint == PT_HIST_RESET_YES     ? PT_HCHUNK_HDR_RESET
           : hint == PT_HIST_RESET_GAUGE ? PT_HCHUNK_HDR_GAUGE
                                         : PT_HCHUNK_HDR_UNKNOWN;
}

/* How h follows the last sample (the order of Prometheus' appendable()): 1 when it may
 * go on in the same chunk, else 0; *hdr is the header a chunk h starts would get. */
static int follows(const pt_hchunk_enc *e, const pt_histogram *h, uint8_t *hdr)
{
    const pt_histogram *l = &e->last;
    int gauge = h->reset_hint == PT_HIST_RESET_GAUGE;
    *hdr = header_of_hint(h->reset_hint);
    if (!e->has_last || l->is_float != h->is_float)
        return 0;
    int lgauge = l->reset_hint == PT_HIST_RESET_GAUGE;
    if (gauge || lgauge)
        return gauge && lgauge &&
               (pt_histogram_is_stale(h) || (!pt_histogram_is_stale(l) && same_layout(l, h)));
    if (h->reset_hint == PT_HIST_RESET_YES)
        return 0;
    if (pt_histogram_is_stale(h)) {
        *hdr = PT_HCHUNK_HDR_NOT_RESET;
        return 1;
    }
    if (pt_histogram_is_stale(l))
        return 0;
    *hdr = PT_HCHUNK_HDR_RESET;
    if (h->is_float ? h->count_float < l->count_float : h->count_int < l->count_int)
        return 0;
    *hdr = PT_HCHUNK_HDR_UNKNOWN;
    if (h->schema != l->schema || pt_f64_bits(h->zero_threshold) != pt_f64_bits(l->zero_threshold))
        return 0;
    *hdr = PT_HCHUNK_HDR_RESET;
    if (h->n_custom != l->n_custom ||
        (h->n_custom && memcmp(h->custom_values, l->custom_values, 8 * h->n_custom) != 0))
        return 0;
    if (h->is_float ? h->zero_count_float < l->zero_count_float
                    : h->zero_count_int < l->zero_count_int)
        return 0;
    *hdr = PT_HCHUNK_HDR_UNKNOWN;
    if (!same_layout(l, h))
        return 0;
    *hdr = PT_HCHUNK_HDR_RESET;
    if (bucket_fell(l, h))
        return 0;
    *hdr = PT_HCHUNK_HDR_NOT_RESET;
    return 1;
}

/* A stale marker is written as Prometheus writes it: the sum and nothing else. */
static int stale_is_bare(const pt_histogram *h)
{
    return h->schema == 0 && pt_f64_bits(h->zero_threshold) == 0 && h->count_int == 0 &&
           h->zero_count_int == 0 && pt_f64_bits(h->count_float) == 0 &&
           pt_f64_bits(h->zero_count_float) == 0 && h->n_pos_spans == 0 && h->n_neg_spans == 0 &&
           h->n_pos == 0 && h->n_neg == 0 && h->n_custom == 0;
}

/* Bits one sample can take at most (with the layout, for a chunk's first). */
static size_t worst_bytes(const pt_histogram *h)
{
    size_t items = 6 + 2 * (h->n_pos_spans + h->n_neg_spans) + h->n_custom;
    return (72 * items + 77 * (3 + buckets_of(h))) / 8 + 2;
}

static int reserve_state(pt_hchunk_enc *e, size_t nb)
{
    if (nb > e->st_cap) {
        uint64_t *bv = malloc(nb * sizeof(*bv)), *bd = malloc(nb * sizeof(*bd));
        pt_gorilla_xor *bx = malloc(nb * sizeof(*bx));
        void *bs = malloc(nb * (16 + sizeof(*bx)));
        if (!bv || !bd || !bx || !bs) {
            free(bv);
            free(bd);
            free(bx);
            free(bs);
            return PT_ENOMEM;
        }
        free(e->bv);
        free(e->bdelta);
        free(e->bx);
        free(e->bsaved);
        e->bv = bv;
        e->bdelta = bd;
        e->bx = bx;
        e->bsaved = bs;
        e->st_cap = nb;
    }
    e->nb = nb;
    return 0;
}

static const void *bucket_ptr(const pt_histogram *h, int neg)
{
    if (h->is_float)
        return neg ? (const void *)h->neg_counts : (const void *)h->pos_counts;
    return neg ? (const void *)h->neg_deltas : (const void *)h->pos_deltas;
}

/* The value of bucket i of h, positive buckets first, as 64 bits. */
static uint64_t bucket_at(const pt_histogram *h, size_t i)
{
    int neg = i >= h->n_pos;
    const uint64_t *p = bucket_ptr(h, neg);
    uint64_t v;
    memcpy(&v, (const uint8_t *)p + 8 * (neg ? i - h->n_pos : i), 8);
    return v;
}

static void write_first(pt_hchunk_enc *e, pt_gorilla_enc *w, const pt_histogram *h)
{
    put_threshold(w, h->zero_threshold);
    put_varbit(w, (uint64_t)(int64_t)h->schema, 1);
    put_spans(w, h->pos_spans, h->n_pos_spans);
    put_spans(w, h->neg_spans, h->n_neg_spans);
    if (h->schema == PT_HIST_SCHEMA_CUSTOM) {
        put_varbit(w, h->n_custom, 0);
        for (size_t i = 0; i < h->n_custom; i++)
            put_bound(w, h->custom_values[i]);
    }
    e->st.t = (uint64_t)h->t;
    e->st.tdelta = 0;
    put_varbit(w, e->st.t, 1);
    e->st.sum = (pt_gorilla_xor){pt_f64_bits(h->sum), 0xff, 0};
    if (h->is_float) {
        e->st.fcnt = (pt_gorilla_xor){pt_f64_bits(h->count_float), 0xff, 0};
        e->st.fzcnt = (pt_gorilla_xor){pt_f64_bits(h->zero_count_float), 0xff, 0};
        pt_gorilla_put_bits(w, e->st.fcnt.v, 64);
        pt_gorilla_put_bits(w, e->st.fzcnt.v, 64);
        pt_gorilla_put_bits(w, e->st.sum.v, 64);
    } else {
        e->st.cnt = h->count_int;
        e->st.zcnt = h->zero_count_int;
        e->st.cntdelta = e->st.zcntdelta = 0;
        put_varbit(w, e->st.cnt, 0);
        put_varbit(w, e->st.zcnt, 0);
        pt_gorilla_put_bits(w, e->st.sum.v, 64);
    }
    for (size_t i = 0; i < e->nb; i++) {
        uint64_t v = bucket_at(h, i);
        if (h->is_float) {
            e->bx[i] = (pt_gorilla_xor){v, 0xff, 0};
            pt_gorilla_put_bits(w, v, 64);
        } else {
            e->bv[i] = v;
            e->bdelta[i] = 0;
            put_varbit(w, v, 1);
        }
    }
}

static void write_next(pt_hchunk_enc *e, pt_gorilla_enc *w, const pt_histogram *h)
{
    int stale = pt_histogram_is_stale(h);
    uint64_t d = (uint64_t)h->t - e->st.t;
    put_varbit(w, d - e->st.tdelta, 1);
    e->st.t = (uint64_t)h->t;
    e->st.tdelta = d;
    if (h->is_float) {
        pt_gorilla_put_xor(w, &e->st.fcnt, pt_f64_bits(h->count_float));
        pt_gorilla_put_xor(w, &e->st.fzcnt, pt_f64_bits(h->zero_count_float));
        pt_gorilla_put_xor(w, &e->st.sum, pt_f64_bits(h->sum));
    } else {
        uint64_t cd = h->count_int - e->st.cnt, zd = h->zero_count_int - e->st.zcnt;
        put_varbit(w, stale ? 0 : cd - e->st.cntdelta, 1);
        put_varbit(w, stale ? 0 : zd - e->st.zcntdelta, 1);
        pt_gorilla_put_xor(w, &e->st.sum, pt_f64_bits(h->sum));
        if (!stale) { /* a stale sample's counts are not written; only stale ones follow */
            e->st.cnt = h->count_int;
            e->st.zcnt = h->zero_count_int;
            e->st.cntdelta = cd;
            e->st.zcntdelta = zd;
        }
    }
    if (stale)
        return;
    for (size_t i = 0; i < e->nb; i++) {
        uint64_t v = bucket_at(h, i);
        if (h->is_float) {
            pt_gorilla_put_xor(w, &e->bx[i], v);
        } else {
            uint64_t delta = v - e->bv[i];
            put_varbit(w, delta - e->bdelta[i], 1);
            e->bv[i] = v;
            e->bdelta[i] = delta;
        }
    }
}

/* Saves (dir 0) or restores (dir 1) the state the next sample is written against. */
static void keep_state(pt_hchunk_enc *e, int restore)
{
    uint8_t *s = e->bsaved;
    size_t n = e->nb;
    void *arr[3] = {e->bv, e->bdelta, e->bx};
    size_t len[3] = {8 * n, 8 * n, n * sizeof(*e->bx)};
    if (restore)
        e->st = e->saved;
    else
        e->saved = e->st;
    for (int i = 0; i < 3 && n; i++) {
        memcpy(restore ? arr[i] : s, restore ? s : arr[i], len[i]);
        s += len[i];
    }
}

static uint64_t span_buckets(const pt_hist_span *s, size_t n)
{
    uint64_t b = 0;
    for (size_t i = 0; i < n; i++)
        b += s[i].length;
    return b;
}

/* What a chunk cannot hold as it is: a stale marker with more than its sum, custom bounds
 * on an exponential schema (the layout has no room for them), spans that do not count the
 * buckets (validation refuses the last two). */
static int chunkable(const pt_histogram *h)
{
    return (!pt_histogram_is_stale(h) || stale_is_bare(h)) &&
           (h->schema == PT_HIST_SCHEMA_CUSTOM || h->n_custom == 0) &&
           span_buckets(h->pos_spans, h->n_pos_spans) == h->n_pos &&
           span_buckets(h->neg_spans, h->n_neg_spans) == h->n_neg;
}

int pt_hchunk_enc_add(pt_hchunk_enc *e, const pt_histogram *h)
{
    if (!chunkable(h))
        return PT_EUNSUPPORTED;
    uint8_t hdr;
    int go_on = follows(e, h, &hdr);
    if (e->n > 0) {
        if (!go_on || e->n >= PT_HCHUNK_MAX_SAMPLES ||
            (e->n >= 2 && h->reset_hint != e->hint_later))
            return PT_HCHUNK_CUT;
    }
    /* Room for the worst case, zeroed; what the sample really takes is checked after. */
    size_t worst = worst_bytes(h), have = e->n ? e->out.len : 0;
    int rv = pt_buf_reserve(&e->out, HDR + worst + 1);
    if (rv != 0)
        return rv;
    if (e->n == 0 && (rv = reserve_state(e, buckets_of(h))) != 0)
        return rv;
    size_t room = HDR + worst + 1;
    memset(e->out.p + have, 0, room);
    pt_gorilla_enc w = {.p = e->out.p + HDR, .bits = e->bits};
    if (e->n == 0) {
        e->out.p[2] = hdr;
        write_first(e, &w, h);
    } else {
        keep_state(e, 0);
        write_next(e, &w, h);
    }
    if (HDR + (w.bits + 7) / 8 > e->max) {
        /* Over the ceiling: the chunk goes back to what it was. */
        if (e->n == 0)
            return PT_ETOOLARGE;
        keep_state(e, 1);
        size_t keep = HDR + (e->bits + 7) / 8;
        memset(e->out.p + keep, 0, have + room - keep);
        if (e->bits & 7)
            e->out.p[keep - 1] &= (uint8_t)(0xff00 >> (e->bits & 7));
        return PT_HCHUNK_CUT;
    }
    if (e->n == 0)
        e->hint_first = h->reset_hint;
    else if (e->n == 1)
        e->hint_later = h->reset_hint;
    /* Kept for the next sample's checks (the same sizes as before: no malloc). Without it
     * the next sample starts a new chunk, whose header then says unknown. */
    e->has_last = pt_histogram_copy(&e->last, h) == 0;
    e->bits = w.bits;
    e->n++;
    e->out.len = HDR + (e->bits + 7) / 8;
    e->out.p[0] = (uint8_t)(e->n >> 8);
    e->out.p[1] = (uint8_t)e->n;
    return 0;
}

/* ---- decoder ---- */

int pt_hchunk_dec_init(pt_hchunk_dec *d, int encoding, const uint8_t *p, size_t n, int hints)
{
    *d = (pt_hchunk_dec){.hints = hints};
    if ((encoding != PT_HCHUNK_HISTOGRAM && encoding != PT_HCHUNK_FLOAT_HISTOGRAM) || n < HDR)
        return PT_EINTERNAL;
    d->is_float = encoding == PT_HCHUNK_FLOAT_HISTOGRAM;
    d->total = (uint32_t)p[0] << 8 | p[1];
    d->header = p[2] & 0xc0;
    pt_gorilla_dec_init(&d->br, p + HDR, n - HDR);
    return 0;
}

void pt_hchunk_dec_free(pt_hchunk_dec *d)
{
    pt_histogram_free(&d->lay);
    free(d->bv);
    free(d->bdelta);
    free(d->bx);
    *d = (pt_hchunk_dec){0};
}

static size_t bits_left(const pt_hchunk_dec *d)
{
    return d->br.nbits - d->br.pos;
}

/* Spans into a scratch pass: counted first (bounded by the bits left), then read again. */
static int read_spans(pt_hchunk_dec *d, uint64_t *n, pt_gorilla_dec *at)
{
    if (get_varbit(&d->br, n, 0) || *n > bits_left(d) / 2)
        return -1;
    *at = d->br;
    for (uint64_t i = 0; i < *n; i++) {
        uint64_t len, off;
        if (get_varbit(&d->br, &len, 0) || get_varbit(&d->br, &off, 1) || len > UINT32_MAX ||
            (int64_t)off < INT32_MIN || (int64_t)off > INT32_MAX)
            return -1;
    }
    return 0;
}

static uint64_t fill_spans(pt_gorilla_dec *at, pt_hist_span *s, size_t n)
{
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t len, off;
        get_varbit(at, &len, 0);
        get_varbit(at, &off, 1);
        s[i] = (pt_hist_span){(int32_t)(int64_t)off, (uint32_t)len};
        total += len;
    }
    return total;
}

static int read_layout(pt_hchunk_dec *d)
{
    pt_histogram *l = &d->lay;
    uint64_t schema, np, nn, nc = 0;
    pt_gorilla_dec pat, nat;
    l->is_float = d->is_float;
    if (get_threshold(&d->br, &l->zero_threshold) || get_varbit(&d->br, &schema, 1))
        return PT_EINTERNAL;
    int64_t s = (int64_t)schema;
    if (s != PT_HIST_SCHEMA_CUSTOM && (s < PT_HIST_SCHEMA_MIN || s > PT_HIST_SCHEMA_MAX))
        return PT_EINTERNAL;
    l->schema = (int32_t)s;
    if (read_spans(d, &np, &pat) || read_spans(d, &nn, &nat))
        return PT_EINTERNAL;
    pt_gorilla_dec cat = d->br;
    if (s == PT_HIST_SCHEMA_CUSTOM) {
        double f;
        if (get_varbit(&d->br, &nc, 0) || nc > bits_left(d))
            return PT_EINTERNAL;
        cat = d->br;
        for (uint64_t i = 0; i < nc; i++)
            if (get_bound(&d->br, &f))
                return PT_EINTERNAL;
    }
    /* Bucket counts come from the spans; each bucket takes a bit at least. */
    uint64_t npb = 0, nnb = 0;
    pt_gorilla_dec t1 = pat, t2 = nat;
    pt_hist_span sp;
    for (uint64_t i = 0; i < np; i++) {
        npb += fill_spans(&t1, &sp, 1);
        if (npb > bits_left(d))
            return PT_EINTERNAL;
    }
    for (uint64_t i = 0; i < nn; i++) {
        nnb += fill_spans(&t2, &sp, 1);
        if (nnb > bits_left(d))
            return PT_EINTERNAL;
    }
    int rv = pt_histogram_reserve(l, nn, np, nnb, npb, nc);
    if (rv != 0)
        return rv == PT_ETOOLARGE ? PT_EINTERNAL : rv;
    fill_spans(&pat, l->pos_spans, np);
    fill_spans(&nat, l->neg_spans, nn);
    for (uint64_t i = 0; i < nc; i++)
        get_bound(&cat, &l->custom_values[i]);
    d->nb = npb + nnb;
    if (d->nb) {
        d->bv = calloc(d->nb, sizeof(*d->bv));
        d->bdelta = calloc(d->nb, sizeof(*d->bdelta));
        d->bx = calloc(d->nb, sizeof(*d->bx));
        if (!d->bv || !d->bdelta || !d->bx)
            return PT_ENOMEM;
    }
    return 0;
}

static uint8_t hint_of(const pt_hchunk_dec *d)
{
    if (d->hints >= 0)
        return (uint8_t)(d->read == 0 ? d->hints & 3 : (d->hints >> 2) & 3);
    if (d->sum.v == PT_HIST_STALE_NAN)
        return PT_HIST_RESET_UNKNOWN; /* Prometheus' iterator returns the sum alone */
    if (d->header == PT_HCHUNK_HDR_GAUGE)
        return PT_HIST_RESET_GAUGE;
    if (d->read > 0)
        return PT_HIST_RESET_NO;
    return d->header == PT_HCHUNK_HDR_RESET ? PT_HIST_RESET_YES : PT_HIST_RESET_UNKNOWN;
}

static int read_sample(pt_hchunk_dec *d)
{
    pt_gorilla_dec *r = &d->br;
    uint64_t x;
    if (d->read == 0) {
        int rv = read_layout(d);
        if (rv != 0)
            return rv;
        if (get_varbit(r, &d->t, 1))
            return PT_EINTERNAL;
        if (d->is_float) {
            if (pt_gorilla_get_bits(r, 64, &d->fcnt.v) || pt_gorilla_get_bits(r, 64, &d->fzcnt.v))
                return PT_EINTERNAL;
        } else if (get_varbit(r, &d->cnt, 0) || get_varbit(r, &d->zcnt, 0)) {
            return PT_EINTERNAL;
        }
        if (pt_gorilla_get_bits(r, 64, &d->sum.v))
            return PT_EINTERNAL;
        for (size_t i = 0; i < d->nb; i++) {
            if (d->is_float ? pt_gorilla_get_bits(r, 64, &d->bx[i].v) : get_varbit(r, &d->bv[i], 1))
                return PT_EINTERNAL;
        }
        return 0;
    }
    if (get_varbit(r, &x, 1))
        return PT_EINTERNAL;
    d->tdelta += x;
    d->t += d->tdelta;
    if (d->is_float) {
        if (pt_gorilla_get_xor(r, &d->fcnt) || pt_gorilla_get_xor(r, &d->fzcnt))
            return PT_EINTERNAL;
    } else {
        if (get_varbit(r, &x, 1))
            return PT_EINTERNAL;
        d->cntdelta += x;
        d->cnt += d->cntdelta;
        if (get_varbit(r, &x, 1))
            return PT_EINTERNAL;
        d->zcntdelta += x;
        d->zcnt += d->zcntdelta;
    }
    if (pt_gorilla_get_xor(r, &d->sum))
        return PT_EINTERNAL;
    if (d->sum.v == PT_HIST_STALE_NAN)
        return 0;
    for (size_t i = 0; i < d->nb; i++) {
        if (d->is_float) {
            if (pt_gorilla_get_xor(r, &d->bx[i]))
                return PT_EINTERNAL;
        } else {
            if (get_varbit(r, &x, 1))
                return PT_EINTERNAL;
            d->bdelta[i] += x;
            d->bv[i] += d->bdelta[i];
        }
    }
    return 0;
}

int pt_hchunk_dec_next(pt_hchunk_dec *d, pt_histogram *h)
{
    if (d->read == d->total) {
        if (!pt_gorilla_dec_done(&d->br))
            return PT_EINTERNAL;
        return 0;
    }
    int rv = read_sample(d);
    if (rv != 0)
        return rv;
    const pt_histogram *l = &d->lay;
    pt_histogram v = *h;
    v.is_float = d->is_float;
    v.t = (int64_t)d->t;
    v.sum = pt_bits_f64(d->sum.v);
    v.reset_hint = hint_of(d);
    d->read++;
    if (d->sum.v == PT_HIST_STALE_NAN) { /* a stale marker: its sum alone */
        v.schema = 0;
        v.zero_threshold = v.count_float = v.zero_count_float = 0;
        v.count_int = v.zero_count_int = 0;
        if ((rv = pt_histogram_reserve(&v, 0, 0, 0, 0, 0)) != 0)
            return rv;
        *h = v;
        return 1;
    }
    v.schema = l->schema;
    v.zero_threshold = l->zero_threshold;
    v.count_int = d->is_float ? 0 : d->cnt;
    v.zero_count_int = d->is_float ? 0 : d->zcnt;
    v.count_float = d->is_float ? pt_bits_f64(d->fcnt.v) : 0;
    v.zero_count_float = d->is_float ? pt_bits_f64(d->fzcnt.v) : 0;
    rv = pt_histogram_reserve(&v, l->n_neg_spans, l->n_pos_spans, l->n_neg, l->n_pos, l->n_custom);
    if (rv != 0)
        return rv == PT_ETOOLARGE ? PT_EINTERNAL : rv;
    if (l->n_neg_spans)
        memcpy(v.neg_spans, l->neg_spans, l->n_neg_spans * sizeof(pt_hist_span));
    if (l->n_pos_spans)
        memcpy(v.pos_spans, l->pos_spans, l->n_pos_spans * sizeof(pt_hist_span));
    if (l->n_custom)
        memcpy(v.custom_values, l->custom_values, 8 * l->n_custom);
    uint8_t *pos = (uint8_t *)(void *)(d->is_float ? (void *)v.pos_counts : (void *)v.pos_deltas);
    uint8_t *neg = (uint8_t *)(void *)(d->is_float ? (void *)v.neg_counts : (void *)v.neg_deltas);
    for (size_t i = 0; i < d->nb; i++) {
        uint64_t b = d->is_float ? d->bx[i].v : d->bv[i];
        memcpy(i < l->n_pos ? pos + 8 * i : neg + 8 * (i - l->n_pos), &b, 8);
    }
    *h = v;
    return 1;
}
