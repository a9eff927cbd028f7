/* Remote read answers as protobuf-c structs, for tests that build or compare them: plain
 * series from and to TimeSeries messages, the streamed frames of a whole ReadResponse, and
 * what a store reads for a ReadRequest message. */
#ifndef PT_TEST_READPB_HELPERS_H
#define PT_TEST_READPB_HELPERS_H

#include <stdatomic.h>

#include "buf.h"
#include "error.h"
#include "histpb.h"
#include "readpb.h"
#include "samples.h"
#include "store.h"
#include "stream.h"

/* n labels as plain labels in a (slices of the messages). */
__attribute__((unused)) static pt_label *labels_from_pb(pt_arena *a, Prometheus__Label *const *l,
                                                        size_t n)
{
    pt_label *v = pt_arena_alloc(a, (n ? n : 1) * sizeof(*v));
    for (size_t i = 0; v && i < n; i++)
        v[i] = (pt_label){{l[i]->name.data, l[i]->name.len}, {l[i]->value.data, l[i]->value.len}};
    return v;
}

/* ts as the plain series the protocol encoders take, its arrays in a (no stored chunks).
 * 0 or PT_ENOMEM. */
__attribute__((unused)) static int series_from_pb(pt_arena *a, const Prometheus__TimeSeries *ts,
                                                  pt_series *out)
{
    size_t ns = ts->n_samples, nh = ts->n_histograms, nx = ts->n_exemplars;
    pt_series se = {.labels = labels_from_pb(a, ts->labels, ts->n_labels),
                    .nlabels = ts->n_labels,
                    .samples = pt_arena_alloc(a, (ns ? ns : 1) * sizeof(pt_sample)),
                    .nsamples = ns,
                    .hists = pt_arena_alloc(a, (nh ? nh : 1) * sizeof(pt_histogram)),
                    .nhists = nh,
                    .exemplars = pt_arena_alloc(a, (nx ? nx : 1) * sizeof(pt_exemplar)),
                    .nexemplars = nx};
    if (!se.labels || !se.samples || !se.hists || !se.exemplars)
        return PT_ENOMEM;
    for (size_t i = 0; i < ns; i++)
        se.samples[i] = (pt_sample){ts->samples[i]->timestamp, ts->samples[i]->value};
    for (size_t i = 0; i < nh; i++) {
        pt_histogram h = PT_HISTOGRAM_INIT;
        int rv = pt_histpb_to(ts->histograms[i], &h);
        if (rv == 0)
            rv = pt_histogram_copy_in(a, &se.hists[i], &h);
        pt_histogram_free(&h);
        if (rv != 0)
            return rv;
    }
    for (size_t i = 0; i < nx; i++) {
        const Prometheus__Exemplar *x = ts->exemplars[i];
        se.exemplars[i] = (pt_exemplar){.labels = labels_from_pb(a, x->labels, x->n_labels),
                                        .nlabels = x->n_labels,
                                        .t = x->timestamp,
                                        .v = x->value};
        if (!se.exemplars[i].labels)
            return PT_ENOMEM;
    }
    *out = se;
    return 0;
}

/* The STREAMED_XOR_CHUNKS body of every series of r, in a. 0 or PT_ENOMEM. */
__attribute__((unused)) static int stream_frames(const Prometheus__ReadResponse *r, pt_arena *a,
                                                 pt_slice *body)
{
    pt_buf o;
    pt_buf_init_arena(&o, a, 0);
    for (size_t q = 0; q < r->n_results; q++)
        for (size_t s = 0; s < r->results[q]->n_timeseries; s++) {
            pt_series se;
            if (series_from_pb(a, r->results[q]->timeseries[s], &se) != 0 ||
                pt_stream_series(&o, q, &se, a) != 0)
                return PT_ENOMEM;
        }
    *body = (pt_slice){o.p, o.len};
    return 0;
}

/* n plain labels as messages in a. */
__attribute__((unused)) static Prometheus__Label **labels_to_pb(pt_arena *a, const pt_label *l,
                                                                size_t n)
{
    Prometheus__Label **lp = pt_arena_alloc(a, (n ? n : 1) * sizeof(*lp));
    Prometheus__Label *lv = pt_arena_alloc(a, (n ? n : 1) * sizeof(*lv));
    if (!lp || !lv)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        prometheus__label__init(&lv[i]);
        lv[i].name = (ProtobufCBinaryData){l[i].name.n, (uint8_t *)l[i].name.p};
        lv[i].value = (ProtobufCBinaryData){l[i].value.n, (uint8_t *)l[i].value.p};
        lp[i] = &lv[i];
    }
    return lp;
}

/* se as a TimeSeries message in a, every value as it is (-0 and NaN payloads too); its
 * stored chunks, which a TimeSeries has no field for, are left out. NULL when a is full. */
__attribute__((unused)) static Prometheus__TimeSeries *series_to_pb(pt_arena *a,
                                                                    const pt_series *se)
{
    Prometheus__TimeSeries *ts = pt_arena_alloc(a, sizeof(*ts));
    Prometheus__Sample *sv = pt_arena_alloc(a, (se->nsamples + 1) * sizeof(*sv));
    if (!ts || !sv)
        return NULL;
    prometheus__time_series__init(ts);
    ts->labels = labels_to_pb(a, se->labels, se->nlabels);
    ts->n_labels = se->nlabels;
    ts->samples = pt_arena_alloc(a, (se->nsamples + 1) * sizeof(*ts->samples));
    ts->n_samples = se->nsamples;
    ts->histograms = pt_arena_alloc(a, (se->nhists + 1) * sizeof(*ts->histograms));
    ts->n_histograms = se->nhists;
    ts->exemplars = pt_arena_alloc(a, (se->nexemplars + 1) * sizeof(*ts->exemplars));
    ts->n_exemplars = se->nexemplars;
    if (!ts->labels || !ts->samples || !ts->histograms || !ts->exemplars)
        return NULL;
    for (size_t i = 0; i < se->nsamples; i++) {
        prometheus__sample__init(&sv[i]);
        sv[i].timestamp = se->samples[i].t;
        sv[i].value = se->samples[i].v;
        ts->samples[i] = &sv[i];
    }
    for (size_t i = 0; i < se->nhists; i++)
        if (!(ts->histograms[i] = pt_histpb_from(a, &se->hists[i])))
            return NULL;
    for (size_t i = 0; i < se->nexemplars; i++) {
        const pt_exemplar *x = &se->exemplars[i];
        Prometheus__Exemplar *m = pt_arena_alloc(a, sizeof(*m));
        if (!m)
            return NULL;
        prometheus__exemplar__init(m);
        m->labels = labels_to_pb(a, x->labels, x->nlabels);
        m->n_labels = x->nlabels;
        m->value = x->v;
        m->timestamp = x->t;
        if (!m->labels)
            return NULL;
        ts->exemplars[i] = m;
    }
    return ts;
}

/* What a store reads for rr (a read run to the end, a group of series at a time) as a
 * ReadResponse message in a, every value as read. 0 or the read's error with msg set. */
__attribute__((unused)) static int store_read(pt_store *st, const Prometheus__ReadRequest *rr,
                                              pt_arena *a, const atomic_int *cancel,
                                              Prometheus__ReadResponse *resp, char *msg,
                                              size_t msglen)
{
    pt_read_request req;
    pt_read *r = NULL;
    pt_read_batch bt;
    prometheus__read_response__init(resp);
    resp->n_results = rr->n_queries;
    resp->results = pt_arena_calloc(a, (rr->n_queries + 1) * sizeof(*resp->results));
    if (!resp->results || pt_read_request_from_pb(rr, a, &req) != 0 ||
        pt_read_start(st, req.queries, req.nqueries, a, cancel, &r) != 0)
        return PT_ENOMEM;
    for (size_t q = 0; q < rr->n_queries; q++) {
        Prometheus__QueryResult *qr = pt_arena_alloc(a, sizeof(*qr));
        if (!qr)
            return PT_ENOMEM;
        prometheus__query_result__init(qr);
        qr->timeseries = pt_arena_alloc(a, sizeof(*qr->timeseries));
        resp->results[q] = qr;
    }
    int rv;
    while ((rv = pt_read_next(r, a, 7, &bt, msg, msglen)) == 1) {
        Prometheus__QueryResult *qr = resp->results[bt.query];
        Prometheus__TimeSeries **grown =
            pt_arena_alloc(a, (qr->n_timeseries + bt.n + 1) * sizeof(*grown));
        int full = !grown;
        if (grown)
            memcpy(grown, qr->timeseries, qr->n_timeseries * sizeof(*grown));
        for (size_t i = 0; !full && i < bt.n; i++)
            full = !(grown[qr->n_timeseries + i] = series_to_pb(a, &bt.s[i]));
        if (full) {
            rv = PT_ENOMEM;
            break;
        }
        qr->timeseries = grown;
        qr->n_timeseries += bt.n;
    }
    pt_read_free(r);
    return rv;
}

#endif
