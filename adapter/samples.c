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
};

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

static size_t bytes_size(const ProtobufCBinaryData *b)
{
    return b->len ? field_size(b->len) : 0;
}

static size_t label_size(const Prometheus__Label *l)
{
    return bytes_size(&l->name) + bytes_size(&l->value);
}

static size_t sample_size(const Prometheus__Sample *s)
{
    return (value_present(s->value) ? 9 : 0) +
           (s->timestamp ? 1 + pt_uvarint_size((uint64_t)s->timestamp) : 0);
}

static size_t series_size(const Prometheus__TimeSeries *ts)
{
    size_t n = 0;
    for (size_t i = 0; i < ts->n_labels; i++)
        n += field_size(label_size(ts->labels[i]));
    for (size_t i = 0; i < ts->n_samples; i++)
        n += field_size(sample_size(ts->samples[i]));
    return n;
}

static uint8_t *put_bytes(uint8_t *p, uint8_t tag, const ProtobufCBinaryData *b)
{
    if (!b->len)
        return p;
    *p++ = tag;
    p = pt_put_uvarint(p, b->len);
    memcpy(p, b->data, b->len);
    return p + b->len;
}

static uint8_t *put_sample(uint8_t *p, const Prometheus__Sample *s)
{
    *p++ = TAG_SAMPLE;
    uint8_t *len = p++; /* a sample is at most 20 bytes: its length is one byte */
    if (value_present(s->value)) {
        uint64_t bits;
        memcpy(&bits, &s->value, sizeof(bits));
        *p++ = TAG_SVALUE;
        for (int i = 0; i < 8; i++)
            *p++ = (uint8_t)(bits >> 8 * i);
    }
    if (s->timestamp) {
        *p++ = TAG_STIME;
        p = pt_put_uvarint(p, (uint64_t)s->timestamp);
    }
    *len = (uint8_t)(p - len - 1);
    return p;
}

static int put_series(pt_samples *e, const Prometheus__TimeSeries *ts)
{
    /* The read path makes neither; an answer with them would need their encoding here. */
    assert(ts->n_exemplars == 0 && ts->n_histograms == 0);
    size_t n = series_size(ts);
    int rv = pt_buf_reserve(&e->out, field_size(n));
    if (rv != 0)
        return rv;
    uint8_t *start = e->out.p + e->out.len, *p = start;
    *p++ = TAG_SERIES;
    p = pt_put_uvarint(p, n);
    for (size_t i = 0; i < ts->n_labels; i++) {
        const Prometheus__Label *l = ts->labels[i];
        *p++ = TAG_LABEL;
        p = pt_put_uvarint(p, label_size(l));
        p = put_bytes(p, TAG_NAME, &l->name);
        p = put_bytes(p, TAG_VALUE, &l->value);
    }
    for (size_t i = 0; i < ts->n_samples; i++)
        p = put_sample(p, ts->samples[i]);
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

int pt_samples_add(pt_samples *e, const pt_read_batch *bt)
{
    int rv;
    if (!e->open && (rv = query_begin(e)) != 0)
        return rv;
    for (size_t i = 0; i < bt->n; i++)
        if ((rv = put_series(e, bt->ts[i])) != 0)
            return rv;
    if (bt->last_of_query)
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
