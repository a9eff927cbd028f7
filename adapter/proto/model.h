/*
 * Prometheus's data model as plain C: what the protocol decoders hand to the store and
 * what the store's reads hand back to the protocol encoders. No protobuf-c here: the
 * store sees series, samples and queries, never a Prometheus message, and the protocol
 * code turns these into wire bytes and back.
 *
 * Everything is slices and arrays in some arena; nothing here owns memory.
 */
#ifndef PT_MODEL_H
#define PT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "histogram.h"
#include "slice.h"

typedef struct pt_label {
    pt_slice name;
    pt_slice value;
} pt_label;

/* One float sample. */
typedef struct pt_sample {
    int64_t t; /* ms */
    double v;
} pt_sample;

typedef struct pt_exemplar {
    const pt_label *labels;
    size_t nlabels;
    int64_t t; /* ms */
    double v;
} pt_exemplar;

/* A Prometheus XOR chunk as stored (the embedded store's flushed chunks), spanning
 * [tmin, tmax]: two bytes of sample count, then the Gorilla stream. */
typedef struct pt_chunk {
    int64_t tmin, tmax;
    pt_slice data;
    size_t at; /* the chunk comes before float sample `at` of its series */
} pt_chunk;

/* One series of a read's answer: its labels, then its float samples, native histogram
 * samples (each holding its own time; arrays not owned: mem is NULL) and exemplars, each
 * in time order, and the stored chunks passed on as they are (in time order with the
 * float samples, by `at`). */
typedef struct pt_series {
    const pt_label *labels;
    size_t nlabels;
    pt_sample *samples;
    size_t nsamples;
    pt_histogram *hists;
    size_t nhists;
    pt_exemplar *exemplars;
    size_t nexemplars;
    pt_chunk *chunks;
    size_t nchunks;
} pt_series;

/* A label matcher as a query states it; type is PT_MATCH_* (matcher.h), which are
 * LabelMatcher.Type's values. */
typedef struct pt_query_matcher {
    int type;
    pt_slice name, value;
} pt_query_matcher;

/* One query of a remote read: the series every matcher accepts, in [start_ms, end_ms];
 * its hints (ReadHints: zero when the client sent none) choose a roll-up. */
typedef struct pt_query {
    int64_t start_ms, end_ms;
    const pt_query_matcher *ms;
    size_t nms;
    int64_t step_ms, range_ms, hints_start_ms;
    pt_slice func;
} pt_query;

#endif
