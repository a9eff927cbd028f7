/*
 * The ingest path's protobuf decoder: remote write 1.0 (prometheus.WriteRequest) and 2.0
 * (io.prometheus.write.v2.Request), read in place from the decompressed body. Label names
 * and values, symbols, metadata text are slices into that buffer (never copied); repeated
 * scalars of a histogram (spans, deltas, counts, custom values) are views of the
 * histogram's own bytes, walked with pt_wrep_next. Samples, exemplars and histograms go
 * to a handful of arrays, one per kind and request, sized by a first pass over the body,
 * from the request arena: nothing is allocated per sample.
 *
 * Accepts and rejects exactly what protobuf-c does with prompb/ (tests/fuzz/fuzz_wire_diff.c
 * checks this on every input), including its quirks: varints of at most 10 bytes, lengths
 * and tags of at most 5, integer fields truncated to their width, the last of a repeated
 * singular field winning (for v2 TimeSeries.metadata: the last one whole).
 */
#ifndef PT_WIRE_H
#define PT_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "model.h"
#include "slice.h"

/* A repeated scalar or span field of one histogram, in place: the histogram's bytes and
 * the field number; elements may come packed, unpacked, or both, in several runs. */
typedef struct pt_wrep {
    const uint8_t *msg;
    uint32_t len;
    uint32_t n; /* elements */
    uint32_t field;
} pt_wrep;

typedef struct pt_wrep_it {
    const uint8_t *p, *e;   /* the rest of the message */
    const uint8_t *rp, *re; /* the rest of the packed run being read */
    uint32_t field;
} pt_wrep_it;

void pt_wrep_iter(const pt_wrep *r, pt_wrep_it *it);
/* The next element's raw bits: a varint's value or a fixed64's bits. 0 at the end. */
int pt_wrep_next(pt_wrep_it *it, uint64_t *raw);
/* The next span of a span field (8 or 11). 0 at the end. */
int pt_wspan_next(pt_wrep_it *it, int32_t *offset, uint32_t *length);

static inline int64_t pt_wire_unzigzag64(uint64_t v)
{
    return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

enum {
    PT_WCASE_NONE = 0, /* neither member of the oneof was sent */
    PT_WCASE_INT = 1,
    PT_WCASE_FLOAT = 2,
};

typedef struct pt_whist {
    uint8_t count_case, zero_count_case; /* PT_WCASE_* */
    int32_t schema;
    int32_t reset_hint;
    uint64_t count_int, zero_count_int;
    double count_float, zero_count_float;
    double sum, zero_threshold;
    int64_t timestamp;
    int64_t start_timestamp; /* 2.0 field 17; 1.0 has no such field */
    pt_wrep negative_spans, negative_deltas, negative_counts;
    pt_wrep positive_spans, positive_deltas, positive_counts;
    pt_wrep custom_values;
} pt_whist;

typedef struct pt_wsample {
    double value;
    int64_t timestamp;
    int64_t start_timestamp; /* 2.0 Sample field 3; 0 = unset */
} pt_wsample;

typedef struct pt_wexemplar {
    pt_label *labels;
    uint32_t nlabels;
    uint32_t ref_problem; /* 2.0: PT_WREF_* problem with its labels_refs */
    double value;
    int64_t timestamp;
} pt_wexemplar;

/* Metadata: 1.0 WriteRequest.metadata, or 2.0 TimeSeries.metadata with its refs resolved
 * (family is then empty: the series' __name__ names it). */
typedef struct pt_wmeta {
    int32_t type;
    pt_slice family, help, unit;
} pt_wmeta;

/* What is wrong with a 2.0 series' or exemplar's references, if anything. */
enum {
    PT_WREF_OK = 0,
    PT_WREF_ODD = 1,   /* labels_refs has an odd length */
    PT_WREF_RANGE = 2, /* a ref is not an index into symbols (bad_value) */
};

typedef struct pt_wseries {
    pt_label *labels; /* in wire order; the write path sorts them in place */
    uint32_t nlabels;
    uint8_t has_meta;    /* 2.0: metadata was sent */
    uint8_t ref_problem; /* 2.0: PT_WREF_* for labels_refs or metadata refs */
    uint32_t bad_ref;    /* the offending ref for PT_WREF_RANGE */
    pt_wsample *samples;
    size_t nsamples;
    pt_wexemplar *exemplars;
    size_t nexemplars;
    pt_whist *histograms;
    size_t nhistograms;
    pt_wmeta meta;             /* 2.0 */
    int64_t created_timestamp; /* 2.0 TimeSeries field 6 (Prometheus 3.0–3.8); 0 = unset */
} pt_wseries;

typedef struct pt_wreq {
    int version; /* 1 or 2 */
    pt_wseries *series;
    size_t nseries;
    pt_wmeta *metadata; /* 1.0 */
    size_t nmetadata;
    pt_slice *symbols; /* 2.0 */
    size_t nsymbols;
    size_t nsamples, nexemplars, nhistograms; /* over every series */
} pt_wreq;

/* Decode outcomes beyond 0. */
enum {
    PT_WIRE_EPROTO = 1,   /* malformed protobuf; msg says what and where */
    PT_WIRE_ENOMEM = 2,   /* the arena's ceiling */
    PT_WIRE_EHUGELEN = 3, /* a length of 2^32-6 or more (malformed; protobuf-c misreads it) */
};

/* Decodes a 1.0 (version 1) or 2.0 (version 2) request held in buf, which must outlive
 * out. Returns 0 or a PT_WIRE_* code with msg set. */
int pt_wire_decode(const uint8_t *buf, size_t len, int version, pt_arena *a, pt_wreq *out,
                   char *msg, size_t msglen);

/* The decoded histogram w as an owned, validated histogram in h (its block reused): 0;
 * PT_EBADREQ with why saying what is wrong; PT_ENOMEM. A histogram is integer unless
 * count_float was sent (as in Prometheus); what Prometheus would silently drop from it (a
 * zero count or bucket counts of the other kind) is refused, so what is stored is what was
 * sent. */
int pt_wire_histogram(const pt_whist *w, pt_histogram *h, char *why, size_t whylen);

#endif
