/* SAMPLES answers written as wire bytes: the bytes protobuf-c packs for the same message. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bytes.h"
#include "error.h"
#include "readpb_helpers.h"
#include "samples.h"
#include "rnd.h"
#include "tap.h"


/* Values whose encodings differ: zeros of both signs, NaNs (the staleness marker among
 * them), infinities, subnormals, ordinary numbers, any bit pattern. */
static double any_value(void)
{
    switch (rnd64() % 12) {
    case 0: return 0.0;
    case 1: return -0.0;
    case 2: return pt_bits_f64(0x7ff0000000000002u); /* Prometheus' staleness marker */
    case 3: return NAN;
    case 4: return INFINITY;
    case 5: return -INFINITY;
    case 6: return pt_bits_f64(1); /* the smallest subnormal */
    case 7: return (double)(rnd64() % 1000);
    case 8: return -(double)(rnd64() % 1000) / 7;
    default: return pt_bits_f64(rnd64());
    }
}

/* Timestamps of every varint length, zero and negatives included. */
static int64_t any_time(void)
{
    switch (rnd64() % 6) {
    case 0: return 0;
    case 1: return -(int64_t)(rnd64() % 100000) - 1;
    case 2: return (int64_t)(rnd64() % 128);
    case 3: return INT64_MAX - (int64_t)(rnd64() % 10);
    case 4: return INT64_MIN + (int64_t)(rnd64() % 10);
    default: return 1700000000000 + (int64_t)(rnd64() % 100000000);
    }
}

/* Label bytes: empty, short, over 127 bytes (a two-byte length), any byte. */
static ProtobufCBinaryData any_bytes(pt_arena *a)
{
    size_t n;
    switch (rnd64() % 5) {
    case 0: n = 0; break;
    case 1: n = 130 + rnd64() % 200; break;
    default: n = 1 + rnd64() % 20; break;
    }
    uint8_t *p = pt_arena_alloc(a, n ? n : 1);
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)rnd64();
    return (ProtobufCBinaryData){n, n ? p : NULL};
}

/* n arbitrary spans: zero and negative offsets, zero and large lengths. */
static Prometheus__BucketSpan **any_spans(pt_arena *a, size_t n)
{
    Prometheus__BucketSpan **v = pt_arena_alloc(a, (n + 1) * sizeof(*v));
    for (size_t i = 0; i < n; i++) {
        v[i] = pt_arena_alloc(a, sizeof(*v[i]));
        prometheus__bucket_span__init(v[i]);
        v[i]->offset = (int32_t)(rnd64() % 3 ? (int64_t)(rnd64() % 7) - 3 : (int64_t)(int32_t)rnd64());
        v[i]->length = (uint32_t)(rnd64() % 3 ? rnd64() % 4 : rnd64());
    }
    return v;
}

static double *any_doubles(pt_arena *a, size_t n)
{
    double *v = pt_arena_alloc(a, (n + 1) * sizeof(*v));
    for (size_t i = 0; i < n; i++)
        v[i] = any_value();
    return v;
}

/* A Histogram message of either kind with any field values, valid or not, as a stored
 * histogram can hold them: the writer must pack it as protobuf-c does (both oneofs set to
 * the histogram's kind even when 0, every varint length, buckets of its kind only). */
static Prometheus__Histogram *any_histogram(pt_arena *a)
{
    Prometheus__Histogram *h = pt_arena_alloc(a, sizeof(*h));
    prometheus__histogram__init(h);
    int is_float = rnd64() % 2;
    if (is_float) {
        h->count_case = PROMETHEUS__HISTOGRAM__COUNT_COUNT_FLOAT, h->count_float = any_value();
        h->zero_count_case = PROMETHEUS__HISTOGRAM__ZERO_COUNT_ZERO_COUNT_FLOAT;
        h->zero_count_float = any_value();
    } else {
        h->count_case = PROMETHEUS__HISTOGRAM__COUNT_COUNT_INT;
        h->count_int = rnd64() % 3 ? rnd64() >> (rnd64() % 64) : 0;
        h->zero_count_case = PROMETHEUS__HISTOGRAM__ZERO_COUNT_ZERO_COUNT_INT;
        h->zero_count_int = rnd64() % 5;
    }
    h->sum = any_value();
    h->schema = rnd64() % 4 ? (int32_t)(rnd64() % 13) - 4 : rnd64() % 2 ? -53 : (int32_t)rnd64();
    h->zero_threshold = any_value();
    h->n_negative_spans = rnd64() % 3;
    h->negative_spans = any_spans(a, h->n_negative_spans);
    h->n_positive_spans = rnd64() % 3;
    h->positive_spans = any_spans(a, h->n_positive_spans);
    size_t nd[2] = {rnd64() % 4, rnd64() % 4};
    int64_t *d[2];
    for (int k = 0; k < 2; k++) {
        d[k] = pt_arena_alloc(a, (nd[k] + 1) * sizeof(int64_t));
        for (size_t i = 0; i < nd[k]; i++)
            d[k][i] = rnd64() % 2 ? (int64_t)(rnd64() % 200) - 100 : (int64_t)rnd64();
    }
    if (is_float) {
        h->n_negative_counts = rnd64() % 3;
        h->negative_counts = any_doubles(a, h->n_negative_counts);
        h->n_positive_counts = rnd64() % 3;
        h->positive_counts = any_doubles(a, h->n_positive_counts);
    } else {
        h->n_negative_deltas = nd[0], h->negative_deltas = d[0];
        h->n_positive_deltas = nd[1], h->positive_deltas = d[1];
    }
    h->reset_hint = (Prometheus__Histogram__ResetHint)(rnd64() % 4);
    h->timestamp = any_time();
    h->n_custom_values = rnd64() % 3 ? 0 : rnd64() % 20;
    h->custom_values = any_doubles(a, h->n_custom_values);
    return h;
}

static Prometheus__TimeSeries *any_series(pt_arena *a, size_t max_samples)
{
    Prometheus__TimeSeries *ts = pt_arena_alloc(a, sizeof(*ts));
    prometheus__time_series__init(ts);
    ts->n_labels = rnd64() % 6;
    ts->labels = pt_arena_alloc(a, (ts->n_labels + 1) * sizeof(*ts->labels));
    for (size_t i = 0; i < ts->n_labels; i++) {
        Prometheus__Label *l = pt_arena_alloc(a, sizeof(*l));
        prometheus__label__init(l);
        l->name = any_bytes(a);
        l->value = any_bytes(a);
        ts->labels[i] = l;
    }
    ts->n_samples = max_samples ? rnd64() % (max_samples + 1) : 0;
    ts->samples = pt_arena_alloc(a, (ts->n_samples + 1) * sizeof(*ts->samples));
    for (size_t i = 0; i < ts->n_samples; i++) {
        Prometheus__Sample *s = pt_arena_alloc(a, sizeof(*s));
        prometheus__sample__init(s);
        s->value = any_value();
        s->timestamp = any_time();
        ts->samples[i] = s;
    }
    ts->n_histograms = max_samples && rnd64() % 2 ? rnd64() % 4 : 0;
    ts->histograms = pt_arena_alloc(a, (ts->n_histograms + 1) * sizeof(*ts->histograms));
    for (size_t i = 0; i < ts->n_histograms; i++)
        ts->histograms[i] = any_histogram(a);
    return ts;
}

/* An answer of nq queries, query i having nseries[i] series. */
static Prometheus__ReadResponse *any_answer(pt_arena *a, size_t nq, const size_t *nseries,
                                            size_t max_samples)
{
    Prometheus__ReadResponse *r = pt_arena_alloc(a, sizeof(*r));
    prometheus__read_response__init(r);
    r->n_results = nq;
    r->results = pt_arena_alloc(a, (nq + 1) * sizeof(*r->results));
    for (size_t q = 0; q < nq; q++) {
        Prometheus__QueryResult *qr = pt_arena_alloc(a, sizeof(*qr));
        prometheus__query_result__init(qr);
        qr->n_timeseries = nseries[q];
        qr->timeseries = pt_arena_alloc(a, (nseries[q] + 1) * sizeof(*qr->timeseries));
        for (size_t i = 0; i < nseries[q]; i++)
            qr->timeseries[i] = any_series(a, max_samples);
        r->results[q] = qr;
    }
    return r;
}

/* Encodes r as pt_read_next would hand it over: each query in batches of 0..max_batch
 * series (empty batches too), the last one marked. 0 or the encoder's error. */
static int encode(const Prometheus__ReadResponse *r, size_t max_batch, pt_arena *a, pt_samples *e)
{
    for (size_t q = 0; q < r->n_results; q++) {
        const Prometheus__QueryResult *qr = r->results[q];
        size_t next = 0;
        for (;;) {
            size_t n = rnd64() % (max_batch + 1);
            if (n > qr->n_timeseries - next)
                n = qr->n_timeseries - next;
            pt_series *batch = pt_arena_alloc(a, (n ? n : 1) * sizeof(*batch));
            for (size_t i = 0; i < n; i++)
                if (!batch || series_from_pb(a, qr->timeseries[next + i], &batch[i]) != 0)
                    return PT_ENOMEM;
            next += n;
            int last = next == qr->n_timeseries && rnd64() % 2;
            int rv = pt_samples_add(e, batch, n, last);
            if (rv != 0)
                return rv;
            if (last)
                break;
        }
    }
    return 0;
}

/* The unpacked answer says what r says: the same series, labels and sample bits, but for
 * -0, which protobuf leaves out and so reads back as +0. */
static int same_answer(const Prometheus__ReadResponse *got, const Prometheus__ReadResponse *r)
{
    if (got->n_results != r->n_results)
        return 0;
    for (size_t q = 0; q < r->n_results; q++) {
        const Prometheus__QueryResult *gq = got->results[q], *wq = r->results[q];
        if (gq->n_timeseries != wq->n_timeseries)
            return 0;
        for (size_t i = 0; i < wq->n_timeseries; i++) {
            const Prometheus__TimeSeries *g = gq->timeseries[i], *w = wq->timeseries[i];
            if (g->n_labels != w->n_labels || g->n_samples != w->n_samples ||
                g->n_histograms != w->n_histograms)
                return 0;
            for (size_t j = 0; j < w->n_labels; j++) {
                const Prometheus__Label *gl = g->labels[j], *wl = w->labels[j];
                if (gl->name.len != wl->name.len || gl->value.len != wl->value.len ||
                    (wl->name.len && memcmp(gl->name.data, wl->name.data, wl->name.len)) ||
                    (wl->value.len && memcmp(gl->value.data, wl->value.data, wl->value.len)))
                    return 0;
            }
            for (size_t j = 0; j < w->n_samples; j++) {
                double wv = w->samples[j]->value == 0 ? 0.0 : w->samples[j]->value;
                if (g->samples[j]->timestamp != w->samples[j]->timestamp ||
                    memcmp(&g->samples[j]->value, &wv, sizeof(wv)) != 0)
                    return 0;
            }
        }
    }
    return 1;
}

/* Encodes r, compares with protobuf-c's packing and unpacks the result. */
static int check(const char *what, const Prometheus__ReadResponse *r, size_t max_batch)
{
    size_t n = protobuf_c_message_get_packed_size(&r->base);
    uint8_t *want = malloc(n ? n : 1);
    protobuf_c_message_pack(&r->base, want);
    pt_samples e;
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    pt_samples_init(&e, 0);
    int rv = encode(r, max_batch, &a, &e);
    pt_slice got = rv ? (pt_slice){NULL, 0} : pt_samples_bytes(&e);
    size_t at = 0;
    while (at < n && at < got.n && want[at] == got.p[at])
        at++;
    int same = rv == 0 && got.n == n && at == n;
    ok(same, "%s: the bytes protobuf-c packs (%zu bytes)", what, n);
    if (!same)
        diag("rv %d, %zu bytes, first difference at %zu", rv, got.n, at);
    Prometheus__ReadResponse *back =
        rv ? NULL : prometheus__read_response__unpack(NULL, got.n, got.p);
    ok(back && same_answer(back, r), "%s: unpacks to the same answer", what);
    if (back)
        prometheus__read_response__free_unpacked(back, NULL);
    pt_samples_free(&e);
    pt_arena_free(&a);
    free(want);
    return same;
}

int main(void)
{
    pt_arena a;
    pt_arena_init(&a, 0, 0);

    check("no queries", any_answer(&a, 0, NULL, 0), 1);
    size_t one_empty[] = {0};
    check("one query without series", any_answer(&a, 1, one_empty, 0), 1);
    size_t empties[] = {0, 3, 0, 0, 5, 0};
    check("queries without series between others", any_answer(&a, 6, empties, 4), 2);
    size_t bare[] = {4};
    check("series without samples", any_answer(&a, 1, bare, 0), 2);

    /* The edge values one by one, each in a series of its own. */
    {
        static const uint64_t vbits[] = {0,
                                         0x8000000000000000u,
                                         0x7ff0000000000002u,
                                         0x7ff8000000000001u,
                                         0x7ff0000000000000u,
                                         0xfff0000000000000u,
                                         1,
                                         0x3ff0000000000000u};
        static const int64_t times[] = {0, -1, 1, 127, 128, INT64_MAX, INT64_MIN, 1700000000000};
        enum { NV = sizeof(vbits) / sizeof(vbits[0]) };
        size_t ns[] = {NV};
        Prometheus__ReadResponse *r = any_answer(&a, 1, ns, 0);
        for (size_t i = 0; i < NV; i++) {
            Prometheus__TimeSeries *ts = r->results[0]->timeseries[i];
            ts->n_samples = 1;
            ts->samples[0] = pt_arena_alloc(&a, sizeof(Prometheus__Sample));
            prometheus__sample__init(ts->samples[0]);
            ts->samples[0]->value = pt_bits_f64(vbits[i]);
            ts->samples[0]->timestamp = times[i];
        }
        check("0, -0, staleness NaN, NaN, +Inf, -Inf, subnormal, 1", r, 3);
    }

    /* Random answers: many queries, batches of every size. */
    for (int round = 0; round < 40; round++) {
        size_t nq = 1 + rnd64() % 12, ns[12];
        for (size_t q = 0; q < nq; q++)
            ns[q] = rnd64() % 3 == 0 ? 0 : rnd64() % 40;
        char what[64];
        snprintf(what, sizeof(what), "random answer %d (%zu queries)", round, nq);
        check(what, any_answer(&a, nq, ns, 30), 1 + rnd64() % 10);
        pt_arena_reset(&a);
    }

    /* Queries past 16 KiB and 2 MiB: lengths of three and four varint bytes, after a small
     * first query and before a later one (the content moves down by different amounts). */
    {
        size_t ns[] = {1, 300, 4000, 2};
        check("queries of 3- and 4-byte lengths", any_answer(&a, 4, ns, 60), 500);
        pt_arena_reset(&a);
        size_t big_first[] = {4000, 1};
        check("a 4-byte length first", any_answer(&a, 2, big_first, 60), 700);
        pt_arena_reset(&a);
    }

    /* The ceiling: past it, PT_ETOOLARGE, not growth. */
    {
        size_t ns[] = {200};
        Prometheus__ReadResponse *r = any_answer(&a, 1, ns, 30);
        size_t n = protobuf_c_message_get_packed_size(&r->base);
        pt_samples e;
        pt_samples_init(&e, n / 2);
        is(encode(r, 50, &a, &e), PT_ETOOLARGE, "an answer over its ceiling: PT_ETOOLARGE");
        pt_samples_free(&e);
        pt_samples_init(&e, n + 11);
        is(encode(r, 50, &a, &e), 0, "the same answer within ceiling = its size + the kept room");
        ok(pt_samples_bytes(&e).n == n, "and it is whole");
        pt_samples_free(&e);
    }

    pt_arena_free(&a);
    return done_testing();
}
