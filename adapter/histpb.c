/* Native histogram samples: owned form <-> protobuf-c message. */
#include "histpb.h"

#include <stdio.h>
#include <string.h>

#include "error.h"

/* n spans as messages in a; *out NULL when n is 0. 0 or PT_ENOMEM. */
static int spans_from(pt_arena *a, const pt_hist_span *s, size_t n, Prometheus__BucketSpan ***out)
{
    *out = NULL;
    if (n == 0)
        return 0;
    Prometheus__BucketSpan **pp = pt_arena_alloc(a, n * sizeof(*pp));
    Prometheus__BucketSpan *v = pt_arena_alloc(a, n * sizeof(*v));
    if (!pp || !v)
        return PT_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        prometheus__bucket_span__init(&v[i]);
        v[i].offset = s[i].offset;
        v[i].length = s[i].length;
        pp[i] = &v[i];
    }
    *out = pp;
    return 0;
}

/* A copy of n 8-byte elements in a; NULL when n is 0. */
static void *elems_from(pt_arena *a, const void *src, size_t n, int *err)
{
    if (n == 0)
        return NULL;
    void *p = pt_arena_alloc(a, n * 8);
    if (!p) {
        *err = PT_ENOMEM;
        return NULL;
    }
    memcpy(p, src, n * 8);
    return p;
}

Prometheus__Histogram *pt_histpb_from(pt_arena *a, const pt_histogram *h)
{
    Prometheus__Histogram *m = pt_arena_alloc(a, sizeof(*m));
    if (!m)
        return NULL;
    prometheus__histogram__init(m);
    if (h->is_float) {
        m->count_case = PROMETHEUS__HISTOGRAM__COUNT_COUNT_FLOAT;
        m->count_float = h->count_float;
        m->zero_count_case = PROMETHEUS__HISTOGRAM__ZERO_COUNT_ZERO_COUNT_FLOAT;
        m->zero_count_float = h->zero_count_float;
    } else {
        m->count_case = PROMETHEUS__HISTOGRAM__COUNT_COUNT_INT;
        m->count_int = h->count_int;
        m->zero_count_case = PROMETHEUS__HISTOGRAM__ZERO_COUNT_ZERO_COUNT_INT;
        m->zero_count_int = h->zero_count_int;
    }
    m->sum = h->sum;
    m->schema = h->schema;
    m->zero_threshold = h->zero_threshold;
    m->reset_hint = (Prometheus__Histogram__ResetHint)h->reset_hint;
    m->timestamp = h->t;
    int err = 0;
    if (spans_from(a, h->neg_spans, h->n_neg_spans, &m->negative_spans) ||
        spans_from(a, h->pos_spans, h->n_pos_spans, &m->positive_spans))
        return NULL;
    m->n_negative_spans = h->n_neg_spans;
    m->n_positive_spans = h->n_pos_spans;
    if (h->is_float) {
        m->negative_counts = elems_from(a, h->neg_counts, h->n_neg, &err);
        m->positive_counts = elems_from(a, h->pos_counts, h->n_pos, &err);
        m->n_negative_counts = h->n_neg;
        m->n_positive_counts = h->n_pos;
    } else {
        m->negative_deltas = elems_from(a, h->neg_deltas, h->n_neg, &err);
        m->positive_deltas = elems_from(a, h->pos_deltas, h->n_pos, &err);
        m->n_negative_deltas = h->n_neg;
        m->n_positive_deltas = h->n_pos;
    }
    m->custom_values = elems_from(a, h->custom_values, h->n_custom, &err);
    m->n_custom_values = h->n_custom;
    return err ? NULL : m;
}

int pt_histpb_to(const Prometheus__Histogram *m, pt_histogram *h)
{
    int is_float = m->count_case == PROMETHEUS__HISTOGRAM__COUNT_COUNT_FLOAT;
    size_t nn = is_float ? m->n_negative_counts : m->n_negative_deltas;
    size_t np = is_float ? m->n_positive_counts : m->n_positive_deltas;
    h->is_float = (uint8_t)is_float;
    int rv = pt_histogram_reserve(h, m->n_negative_spans, m->n_positive_spans, nn, np,
                                  m->n_custom_values);
    if (rv != 0)
        return rv;
    h->t = m->timestamp;
    h->schema = m->schema;
    h->reset_hint = (uint8_t)m->reset_hint;
    h->sum = m->sum;
    h->zero_threshold = m->zero_threshold;
    int zf = m->zero_count_case == PROMETHEUS__HISTOGRAM__ZERO_COUNT_ZERO_COUNT_FLOAT;
    int zi = m->zero_count_case == PROMETHEUS__HISTOGRAM__ZERO_COUNT_ZERO_COUNT_INT;
    h->count_int = is_float || m->count_case != PROMETHEUS__HISTOGRAM__COUNT_COUNT_INT
                       ? 0 : m->count_int;
    h->count_float = is_float ? m->count_float : 0;
    h->zero_count_int = !is_float && zi ? m->zero_count_int : 0;
    h->zero_count_float = is_float && zf ? m->zero_count_float : 0;
    for (size_t i = 0; i < h->n_neg_spans; i++)
        h->neg_spans[i] = (pt_hist_span){m->negative_spans[i]->offset,
                                         m->negative_spans[i]->length};
    for (size_t i = 0; i < h->n_pos_spans; i++)
        h->pos_spans[i] = (pt_hist_span){m->positive_spans[i]->offset,
                                         m->positive_spans[i]->length};
    if (nn)
        memcpy(is_float ? (void *)h->neg_counts : (void *)h->neg_deltas,
               is_float ? (const void *)m->negative_counts : (const void *)m->negative_deltas,
               nn * 8);
    if (np)
        memcpy(is_float ? (void *)h->pos_counts : (void *)h->pos_deltas,
               is_float ? (const void *)m->positive_counts : (const void *)m->positive_deltas,
               np * 8);
    if (m->n_custom_values)
        memcpy(h->custom_values, m->custom_values, m->n_custom_values * 8);
    return 0;
}

/* Reads the spans of one span field into sp. */
static void read_spans(const pt_wrep *r, pt_hist_span *sp)
{
    pt_wrep_it it;
    pt_wrep_iter(r, &it);
    int32_t off;
    uint32_t len;
    for (size_t i = 0; pt_wspan_next(&it, &off, &len); i++)
        sp[i] = (pt_hist_span){off, len};
}

/* Reads a repeated sint64 (zig-zag) or double field as 8-byte elements into out. */
static void read_elems(const pt_wrep *r, int zigzag, void *out)
{
    pt_wrep_it it;
    pt_wrep_iter(r, &it);
    uint64_t raw;
    for (uint8_t *p = out; pt_wrep_next(&it, &raw); p += 8) {
        if (zigzag) {
            int64_t d = pt_wire_unzigzag64(raw);
            memcpy(p, &d, 8);
        } else {
            memcpy(p, &raw, 8);
        }
    }
}

int pt_histpb_from_wire(const pt_whist *w, pt_histogram *h, char *why, size_t whylen)
{
    int is_float = w->count_case == PT_WCASE_FLOAT;
    if (w->zero_count_case != PT_WCASE_NONE &&
        (w->zero_count_case == PT_WCASE_FLOAT) != is_float) {
        snprintf(why, whylen, "%s count with a %s zero count", is_float ? "float" : "integer",
                 is_float ? "integer" : "float");
        return PT_EBADREQ;
    }
    const pt_wrep *neg = is_float ? &w->negative_counts : &w->negative_deltas;
    const pt_wrep *pos = is_float ? &w->positive_counts : &w->positive_deltas;
    const pt_wrep *neg_other = is_float ? &w->negative_deltas : &w->negative_counts;
    const pt_wrep *pos_other = is_float ? &w->positive_deltas : &w->positive_counts;
    if (neg_other->n || pos_other->n) {
        snprintf(why, whylen, "%s histogram with bucket %s", is_float ? "float" : "integer",
                 is_float ? "deltas" : "counts");
        return PT_EBADREQ;
    }
    h->is_float = (uint8_t)is_float;
    int rv = pt_histogram_reserve(h, w->negative_spans.n, w->positive_spans.n, neg->n, pos->n,
                                  w->custom_values.n);
    if (rv == PT_ETOOLARGE) {
        snprintf(why, whylen, "more than %zu spans, buckets and custom values",
                 (size_t)PT_HIST_MAX_ELEMS);
        return PT_EBADREQ;
    }
    if (rv != 0)
        return rv;
    h->t = w->timestamp;
    h->schema = w->schema;
    h->reset_hint = (uint8_t)(w->reset_hint >= 0 && w->reset_hint <= 255 ? w->reset_hint : 255);
    h->count_int = is_float ? 0 : w->count_int;
    h->zero_count_int = is_float ? 0 : w->zero_count_int;
    h->count_float = is_float ? w->count_float : 0;
    h->zero_count_float = is_float ? w->zero_count_float : 0;
    h->sum = w->sum;
    h->zero_threshold = w->zero_threshold;
    read_spans(&w->negative_spans, h->neg_spans);
    read_spans(&w->positive_spans, h->pos_spans);
    read_elems(neg, !is_float, is_float ? (void *)h->neg_counts : (void *)h->neg_deltas);
    read_elems(pos, !is_float, is_float ? (void *)h->pos_counts : (void *)h->pos_deltas);
    read_elems(&w->custom_values, 0, h->custom_values);
    return pt_histogram_validate(h, why, whylen);
}
