/* SAMPLES answers as protobuf wire bytes, without protobuf-c structs for the whole answer. */
#include "samples.h"

#include <assert.h>
#include <string.h>

#include "bytes.h"
#include "error.h"

/* Tags: field number << 3 | wire type (0 varint, 1 fixed64, 2 length-delimited). The
 * numbers are prompb/remote.proto's and prompb/types.proto's. */
enum {
    TAG_RESULT = 1 << 3 | 2, /* ReadResponse.results */
    TAG_SERIES = 1 << 3 | 2, /* QueryResult.timeseries */
    TAG_LABEL = 1 << 3 | 2,  /* TimeSeries.labels */
    TAG_SAMPLE = 2 << 3 | 2, /* TimeSeries.samples */
    TAG_NAME = 1 << 3 | 2,   /* Label.name */
    TAG_VALUE = 2 << 3 | 2,  /* Label.value */
    TAG_SVALUE = 1 << 3 | 1, /* Sample.value, a double */
    TAG_STIME = 2 << 3 | 0,  /* Sample.timestamp, an int64 */
    TAG_HIST = 4 << 3 | 2,   /* TimeSeries.histograms */
    TAG_EXEMPLAR = 3 << 3 | 2, /* TimeSeries.exemplars */
    TAG_X_LABEL = 1 << 3 | 2,  /* Exemplar.labels */
    TAG_X_VALUE = 2 << 3 | 1,  /* Exemplar.value, a double */
    TAG_X_TIME = 3 << 3 | 0,   /* Exemplar.timestamp, an int64 */
    /* Histogram (types.proto); custom_values, field 16, has a two-byte tag */
    TAG_H_COUNT_INT = 1 << 3 | 0,
    TAG_H_COUNT_FLOAT = 2 << 3 | 1,
    TAG_H_SUM = 3 << 3 | 1,
    TAG_H_SCHEMA = 4 << 3 | 0, /* sint32 */
    TAG_H_ZERO_THRESHOLD = 5 << 3 | 1,
    TAG_H_ZERO_COUNT_INT = 6 << 3 | 0,
    TAG_H_ZERO_COUNT_FLOAT = 7 << 3 | 1,
    TAG_H_NEG_SPANS = 8 << 3 | 2,
    TAG_H_NEG_DELTAS = 9 << 3 | 2,  /* packed sint64 */
    TAG_H_NEG_COUNTS = 10 << 3 | 2, /* packed double */
    TAG_H_POS_SPANS = 11 << 3 | 2,
    TAG_H_POS_DELTAS = 12 << 3 | 2,
    TAG_H_POS_COUNTS = 13 << 3 | 2,
    TAG_H_RESET_HINT = 14 << 3 | 0,
    TAG_H_TIMESTAMP = 15 << 3 | 0,
    TAG_SPAN_OFFSET = 1 << 3 | 0, /* BucketSpan.offset, sint32 */
    TAG_SPAN_LENGTH = 2 << 3 | 0, /* BucketSpan.length, uint32 */
};
#define TAG_H_CUSTOM_VALUES (16 << 3 | 2) /* packed double */

/* The room kept in front of a query's series: its tag and the longest varint. */
#define QUERY_ROOM 11

/* A length-delimited field whose content is n bytes: tag, length, content. */
static size_t field_size(size_t n)
{
    return 1 + pt_uvarint_size(n) + n;
}

/* proto3 leaves out a field holding its type's zero. protobuf-c tests a double with == 0,
 * so -0 is left out too (and reads back as +0); NaN is not zero and stays. */
static int value_present(double v)
{
    return v != 0;
}

static size_t bytes_size(pt_slice b)
{
    return b.n ? field_size(b.n) : 0;
}

static size_t label_size(const pt_label *l)
{
    return bytes_size(l->name) + bytes_size(l->value);
}

static size_t sample_size(const pt_sample *s)
{
    return (value_present(s->v) ? 9 : 0) + (s->t ? 1 + pt_uvarint_size((uint64_t)s->t) : 0);
}

static uint64_t zigzag32(int32_t v)
{
    return (uint32_t)(((uint32_t)v << 1) ^ (uint32_t)(v >> 31));
}

static uint64_t zigzag64(int64_t v)
{
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

/* A varint field's size when present (tag of one byte). */
static size_t varint_field(uint64_t v)
{
    return 1 + pt_uvarint_size(v);
}

static size_t span_size(const pt_hist_span *sp)
{
    return (sp->offset ? varint_field(zigzag32(sp->offset)) : 0) +
           (sp->length ? varint_field(sp->length) : 0);
}

static size_t spans_size(const pt_hist_span *sp, size_t n)
{
    size_t s = 0;
    for (size_t i = 0; i < n; i++)
        s += field_size(span_size(&sp[i]));
    return s;
}

static size_t deltas_len(const int64_t *d, size_t n)
{
    size_t s = 0;
    for (size_t i = 0; i < n; i++)
        s += pt_uvarint_size(zigzag64(d[i]));
    return s;
}

/* A packed field of n elements whose content is len bytes; nothing when n is 0. */
static size_t packed_size(size_t tagbytes, size_t n, size_t len)
{
    return n ? tagbytes + pt_uvarint_size(len) + len : 0;
}

/* A histogram's bytes as protobuf-c packs the Histogram message: the count and zero count
 * of the histogram's kind (the oneof member set) are written even when 0; the other
 * scalars only when not zero (doubles: != 0, so -0 is left out); packed repeated fields
 * only when not empty. */
static size_t histogram_size(const pt_histogram *h)
{
    size_t n = 0;
    if (h->is_float)
        n += 9 + 9;
    else
        n += varint_field(h->count_int) + varint_field(h->zero_count_int);
    n += value_present(h->sum) ? 9 : 0;
    n += h->schema ? varint_field(zigzag32(h->schema)) : 0;
    n += value_present(h->zero_threshold) ? 9 : 0;
    n += spans_size(h->neg_spans, h->n_neg_spans);
    n += spans_size(h->pos_spans, h->n_pos_spans);
    if (h->is_float)
        n += packed_size(1, h->n_neg, 8 * h->n_neg) + packed_size(1, h->n_pos, 8 * h->n_pos);
    else
        n += packed_size(1, h->n_neg, deltas_len(h->neg_deltas, h->n_neg)) +
             packed_size(1, h->n_pos, deltas_len(h->pos_deltas, h->n_pos));
    n += h->reset_hint ? varint_field(h->reset_hint) : 0;
    n += h->t ? varint_field((uint64_t)h->t) : 0;
    n += packed_size(2, h->n_custom, 8 * h->n_custom);
    return n;
}

static size_t exemplar_size(const pt_exemplar *x)
{
    size_t n = 0;
    for (size_t i = 0; i < x->nlabels; i++)
        n += field_size(label_size(&x->labels[i]));
    return n + (value_present(x->v) ? 9 : 0) + (x->t ? varint_field((uint64_t)x->t) : 0);
}

static size_t series_size(const pt_series *se)
{
    size_t n = 0;
    for (size_t i = 0; i < se->nlabels; i++)
        n += field_size(label_size(&se->labels[i]));
    for (size_t i = 0; i < se->nsamples; i++)
        n += field_size(sample_size(&se->samples[i]));
    for (size_t i = 0; i < se->nexemplars; i++)
        n += field_size(exemplar_size(&se->exemplars[i]));
    for (size_t i = 0; i < se->nhists; i++)
        n += field_size(histogram_size(&se->hists[i]));
    return n;
}

static uint8_t *put_bytes(uint8_t *p, uint8_t tag, pt_slice b)
{
    if (!b.n)
        return p;
    *p++ = tag;
    p = pt_put_uvarint(p, b.n);
    memcpy(p, b.p, b.n);
    return p + b.n;
}

static uint8_t *put_sample(uint8_t *p, const pt_sample *s)
{
    *p++ = TAG_SAMPLE;
    uint8_t *len = p++; /* a sample is at most 20 bytes: its length is one byte */
    if (value_present(s->v)) {
        uint64_t bits;
        memcpy(&bits, &s->v, sizeof(bits));
        *p++ = TAG_SVALUE;
        for (int i = 0; i < 8; i++)
            *p++ = (uint8_t)(bits >> 8 * i);
    }
    if (s->t) {
        *p++ = TAG_STIME;
        p = pt_put_uvarint(p, (uint64_t)s->t);
    }
    *len = (uint8_t)(p - len - 1);
    return p;
}

static uint8_t *put_double(uint8_t *p, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof(bits));
    for (int i = 0; i < 8; i++)
        *p++ = (uint8_t)(bits >> 8 * i);
    return p;
}

static uint8_t *put_varint_field(uint8_t *p, uint8_t tag, uint64_t v)
{
    *p++ = tag;
    return pt_put_uvarint(p, v);
}

static uint8_t *put_double_field(uint8_t *p, uint8_t tag, double v)
{
    *p++ = tag;
    return put_double(p, v);
}

static uint8_t *put_spans(uint8_t *p, uint8_t tag, const pt_hist_span *sp, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        *p++ = tag;
        p = pt_put_uvarint(p, span_size(&sp[i]));
        if (sp[i].offset)
            p = put_varint_field(p, TAG_SPAN_OFFSET, zigzag32(sp[i].offset));
        if (sp[i].length)
            p = put_varint_field(p, TAG_SPAN_LENGTH, sp[i].length);
    }
    return p;
}

static uint8_t *put_deltas(uint8_t *p, uint8_t tag, const int64_t *d, size_t n)
{
    if (!n)
        return p;
    *p++ = tag;
    p = pt_put_uvarint(p, deltas_len(d, n));
    for (size_t i = 0; i < n; i++)
        p = pt_put_uvarint(p, zigzag64(d[i]));
    return p;
}

/* A packed double field; tag holds tagbytes bytes. */
static uint8_t *put_doubles(uint8_t *p, const uint8_t *tag, size_t tagbytes, const double *d,
                            size_t n)
{
    if (!n)
        return p;
    memcpy(p, tag, tagbytes);
    p = pt_put_uvarint(p + tagbytes, 8 * n);
    for (size_t i = 0; i < n; i++)
        p = put_double(p, d[i]);
    return p;
}

static uint8_t *put_histogram(uint8_t *p, const pt_histogram *h)
{
    static const uint8_t neg_counts[] = {TAG_H_NEG_COUNTS}, pos_counts[] = {TAG_H_POS_COUNTS};
    static const uint8_t custom[] = {(TAG_H_CUSTOM_VALUES & 0x7f) | 0x80, TAG_H_CUSTOM_VALUES >> 7};
    *p++ = TAG_HIST;
    p = pt_put_uvarint(p, histogram_size(h));
    if (h->is_float)
        p = put_double_field(p, TAG_H_COUNT_FLOAT, h->count_float);
    else
        p = put_varint_field(p, TAG_H_COUNT_INT, h->count_int);
    if (value_present(h->sum))
        p = put_double_field(p, TAG_H_SUM, h->sum);
    if (h->schema)
        p = put_varint_field(p, TAG_H_SCHEMA, zigzag32(h->schema));
    if (value_present(h->zero_threshold))
        p = put_double_field(p, TAG_H_ZERO_THRESHOLD, h->zero_threshold);
    if (h->is_float)
        p = put_double_field(p, TAG_H_ZERO_COUNT_FLOAT, h->zero_count_float);
    else
        p = put_varint_field(p, TAG_H_ZERO_COUNT_INT, h->zero_count_int);
    p = put_spans(p, TAG_H_NEG_SPANS, h->neg_spans, h->n_neg_spans);
    if (h->is_float)
        p = put_doubles(p, neg_counts, 1, h->neg_counts, h->n_neg);
    else
        p = put_deltas(p, TAG_H_NEG_DELTAS, h->neg_deltas, h->n_neg);
    p = put_spans(p, TAG_H_POS_SPANS, h->pos_spans, h->n_pos_spans);
    if (h->is_float)
        p = put_doubles(p, pos_counts, 1, h->pos_counts, h->n_pos);
    else
        p = put_deltas(p, TAG_H_POS_DELTAS, h->pos_deltas, h->n_pos);
    if (h->reset_hint)
        p = put_varint_field(p, TAG_H_RESET_HINT, h->reset_hint);
    if (h->t)
        p = put_varint_field(p, TAG_H_TIMESTAMP, (uint64_t)h->t);
    return put_doubles(p, custom, 2, h->custom_values, h->n_custom);
}

static uint8_t *put_label(uint8_t *p, uint8_t tag, const pt_label *l)
{
    *p++ = tag;
    p = pt_put_uvarint(p, label_size(l));
    p = put_bytes(p, TAG_NAME, l->name);
    return put_bytes(p, TAG_VALUE, l->value);
}

static uint8_t *put_exemplar(uint8_t *p, const pt_exemplar *x)
{
    *p++ = TAG_EXEMPLAR;
    p = pt_put_uvarint(p, exemplar_size(x));
    for (size_t i = 0; i < x->nlabels; i++)
        p = put_label(p, TAG_X_LABEL, &x->labels[i]);
    if (value_present(x->v))
        p = put_double_field(p, TAG_X_VALUE, x->v);
    if (x->t)
        p = put_varint_field(p, TAG_X_TIME, (uint64_t)x->t);
    return p;
}

static int put_series(pt_samples *e, const pt_series *se)
{
    size_t n = series_size(se);
    int rv = pt_buf_reserve(&e->out, field_size(n));
    if (rv != 0)
        return rv;
    uint8_t *start = e->out.p + e->out.len, *p = start;
    *p++ = TAG_SERIES;
    p = pt_put_uvarint(p, n);
    for (size_t i = 0; i < se->nlabels; i++)
        p = put_label(p, TAG_LABEL, &se->labels[i]);
    for (size_t i = 0; i < se->nsamples; i++)
        p = put_sample(p, &se->samples[i]);
    for (size_t i = 0; i < se->nexemplars; i++)
        p = put_exemplar(p, &se->exemplars[i]);
    for (size_t i = 0; i < se->nhists; i++)
        p = put_histogram(p, &se->hists[i]);
    assert((size_t)(p - start) == field_size(n));
    pt_buf_commit(&e->out, (size_t)(p - start));
    return 0;
}

static int query_begin(pt_samples *e)
{
    int rv = pt_buf_reserve(&e->out, QUERY_ROOM);
    if (rv != 0)
        return rv;
    e->qhead = pt_buf_used(&e->out);
    pt_buf_commit(&e->out, QUERY_ROOM); /* written when the query ends */
    e->open = 1;
    return 0;
}

static void query_end(pt_samples *e)
{
    uint8_t *room = e->out.p + e->out.off + e->qhead;
    size_t n = pt_buf_used(&e->out) - e->qhead - QUERY_ROOM;
    size_t h = 1 + pt_uvarint_size(n);
    if (e->qhead == 0) {
        /* Nothing before it: the header ends where the room does, the rest of the room is
         * dropped from the front. */
        room += QUERY_ROOM - h;
        room[0] = TAG_RESULT;
        pt_put_uvarint(room + 1, n);
        pt_buf_consume(&e->out, QUERY_ROOM - h);
    } else {
        room[0] = TAG_RESULT;
        pt_put_uvarint(room + 1, n);
        memmove(room + h, room + QUERY_ROOM, n);
        e->out.len -= QUERY_ROOM - h;
    }
    e->open = 0;
}

void pt_samples_init(pt_samples *e, size_t max)
{
    pt_buf_init(&e->out, max);
    e->qhead = 0;
    e->open = 0;
}

int pt_samples_add(pt_samples *e, const pt_series *s, size_t n, int last_of_query)
{
    int rv;
    if (!e->open && (rv = query_begin(e)) != 0)
        return rv;
    for (size_t i = 0; i < n; i++)
        if ((rv = put_series(e, &s[i])) != 0)
            return rv;
    if (last_of_query)
        query_end(e);
    return 0;
}

pt_slice pt_samples_bytes(const pt_samples *e)
{
    assert(!e->open);
    if (pt_buf_used(&e->out) == 0)
        return (pt_slice){(const uint8_t *)"", 0}; /* no queries: no buffer either */
    return (pt_slice){pt_buf_data(&e->out), pt_buf_used(&e->out)};
}

void pt_samples_free(pt_samples *e)
{
    pt_buf_free(&e->out);
    e->open = 0;
}
