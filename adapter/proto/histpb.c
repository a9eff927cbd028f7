/* Native histogram samples: owned form <-> protobuf-c message. */
#include "histpb.h"

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
