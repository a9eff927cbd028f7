/* Builders shared by the store and handler tests: write/read requests from C literals,
 * and an embedded store in a temp dir. */
#ifndef PT_TEST_STORE_HELPERS_H
#define PT_TEST_STORE_HELPERS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "embedded.h"
#include "app.h"
#include "backend.h"
#include "decode.h"
#include "error.h"
#include "readpb_helpers.h"
#include "store.h"

typedef struct tseries {
    const char *labels[24]; /* name, value, ..., NULL */
    int64_t t[8];
    double v[8];
    int nsamples;
} tseries;

__attribute__((unused)) static Prometheus__Label *mk_label(pt_arena *a, const char *n, const char *v)
{
    Prometheus__Label *l = pt_arena_alloc(a, sizeof(*l));
    prometheus__label__init(l);
    l->name = (ProtobufCBinaryData){strlen(n), (uint8_t *)n};
    l->value = (ProtobufCBinaryData){strlen(v), (uint8_t *)v};
    return l;
}

/* A 1.0 write request as protobuf-c builds it, for request bodies (mk_body). */
__attribute__((unused)) static Prometheus__WriteRequest *mk_pb_write(pt_arena *a, const tseries *ts, size_t n)
{
    Prometheus__WriteRequest *wr = pt_arena_alloc(a, sizeof(*wr));
    prometheus__write_request__init(wr);
    wr->n_timeseries = n;
    wr->timeseries = pt_arena_alloc(a, (n ? n : 1) * sizeof(void *));
    for (size_t i = 0; i < n; i++) {
        Prometheus__TimeSeries *t = pt_arena_alloc(a, sizeof(*t));
        prometheus__time_series__init(t);
        size_t nl = 0;
        while (ts[i].labels[2 * nl])
            nl++;
        t->n_labels = nl;
        t->labels = pt_arena_alloc(a, (nl ? nl : 1) * sizeof(void *));
        for (size_t j = 0; j < nl; j++)
            t->labels[j] = mk_label(a, ts[i].labels[2 * j], ts[i].labels[2 * j + 1]);
        t->n_samples = (size_t)ts[i].nsamples;
        t->samples = pt_arena_alloc(a, (t->n_samples ? t->n_samples : 1) * sizeof(void *));
        for (size_t j = 0; j < t->n_samples; j++) {
            Prometheus__Sample *s = pt_arena_alloc(a, sizeof(*s));
            prometheus__sample__init(s);
            s->timestamp = ts[i].t[j];
            s->value = ts[i].v[j];
            t->samples[j] = s;
        }
        wr->timeseries[i] = t;
    }
    return wr;
}

/* The decoded form (wire.h) of a 1.0 write request, as the write path gets it. */
__attribute__((unused)) static pt_wreq *mk_write(pt_arena *a, const tseries *ts, size_t n)
{
    pt_wreq *wr = pt_arena_calloc(a, sizeof(*wr));
    wr->version = 1;
    wr->nseries = n;
    wr->series = pt_arena_calloc(a, (n ? n : 1) * sizeof(*wr->series));
    for (size_t i = 0; i < n; i++) {
        pt_wseries *t = &wr->series[i];
        size_t nl = 0;
        while (ts[i].labels[2 * nl])
            nl++;
        t->nlabels = (uint32_t)nl;
        t->labels = pt_arena_alloc(a, (nl ? nl : 1) * sizeof(*t->labels));
        for (size_t j = 0; j < nl; j++)
            t->labels[j] = (pt_label){pt_slice_str(ts[i].labels[2 * j]),
                                      pt_slice_str(ts[i].labels[2 * j + 1])};
        t->nsamples = (size_t)ts[i].nsamples;
        t->samples = pt_arena_alloc(a, (t->nsamples ? t->nsamples : 1) * sizeof(*t->samples));
        for (size_t j = 0; j < t->nsamples; j++)
            t->samples[j] = (pt_wsample){ts[i].v[j], ts[i].t[j], 0};
        wr->nsamples += t->nsamples;
    }
    return wr;
}

/* snappy(protobuf(msg)) */
__attribute__((unused)) static pt_slice mk_body(pt_arena *a, const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *raw = pt_arena_alloc(a, n ? n : 1);
    protobuf_c_message_pack(m, raw);
    pt_slice z = {0};
    pt_snappy_encode(raw, n, a, &z);
    return z;
}

typedef struct tmatch {
    int type;
    const char *name, *value;
} tmatch;

__attribute__((unused)) static Prometheus__ReadRequest *mk_read(pt_arena *a, int64_t start, int64_t end,
                                        const tmatch *ms, size_t n)
{
    Prometheus__ReadRequest *rr = pt_arena_alloc(a, sizeof(*rr));
    prometheus__read_request__init(rr);
    Prometheus__Query *q = pt_arena_alloc(a, sizeof(*q));
    prometheus__query__init(q);
    q->start_timestamp_ms = start;
    q->end_timestamp_ms = end;
    q->n_matchers = n;
    q->matchers = pt_arena_alloc(a, (n ? n : 1) * sizeof(void *));
    for (size_t i = 0; i < n; i++) {
        Prometheus__LabelMatcher *m = pt_arena_alloc(a, sizeof(*m));
        prometheus__label_matcher__init(m);
        m->type = (Prometheus__LabelMatcher__Type)ms[i].type;
        m->name = (ProtobufCBinaryData){strlen(ms[i].name), (uint8_t *)ms[i].name};
        m->value = (ProtobufCBinaryData){strlen(ms[i].value), (uint8_t *)ms[i].value};
        q->matchers[i] = m;
    }
    rr->n_queries = 1;
    rr->queries = pt_arena_alloc(a, sizeof(void *));
    rr->queries[0] = q;
    return rr;
}

typedef struct tstore {
    char dir[64];
    pt_backend emb, faulty;
    pt_store st;
    const atomic_int *cancel; /* handed to reads */
} tstore;

/* Opens with the settings of c, whose own (the embedded settings) is filled in here. */
__attribute__((unused)) static int tstore_open_with(tstore *s, pt_backend_config c)
{
    char err[256];
    s->cancel = NULL;
    strcpy(s->dir, "/tmp/pt-test-XXXXXX");
    if (!mkdtemp(s->dir))
        return -1;
    pt_embedded_conf ec = {.path = s->dir};
    c.own = &ec;
    if (pt_backend_open(&s->emb, pt_backend_find("embedded"), &c, err, sizeof(err)) != 0) {
        fprintf(stderr, "open: %s\n", err);
        return -1;
    }
    pt_backend_config fc = {.inner = &s->emb};
    if (pt_backend_open(&s->faulty, pt_backend_find("faulty"), &fc, err, sizeof(err)) != 0)
        return -1;
    s->st = (pt_store){.index_bucket_ms = 86400000, .max_series = 1000, .max_samples = 100000};
    return pt_store_open(&s->st, &s->faulty, &(pt_store_caches){0}) == 0 ? 0 : -1;
}

__attribute__((unused)) static int tstore_open(tstore *s)
{
    return tstore_open_with(s, (pt_backend_config){0});
}

__attribute__((unused)) static void tstore_close(tstore *s)
{
    pt_backend_close(&s->faulty);
    pt_backend_close(&s->emb);
    pt_store_close(&s->st);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", s->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", s->dir);
}

#endif
