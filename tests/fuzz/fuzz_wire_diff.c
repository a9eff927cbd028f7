/* libFuzzer, differential: the zero-copy decoder (adapter/proto/wire.c) against protobuf-c on
 * the same bytes. The first input byte picks remote write 1.0 (even) or 2.0 (odd); the rest
 * is the protobuf message (no snappy). Both must accept or both refuse, and on accept
 * every field must be the same. Traps on any difference.
 * Also linked into tests/unit/t_wire.c, which runs it over its own cases. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "pb_alloc.h"
#include "remote.pb-c.h"
#include "wire.h"
#include "write_v2.pb-c.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#ifndef WIRE_DIFF_FAIL
#define WIRE_DIFF_FAIL(what) __builtin_trap()
#endif

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            WIRE_DIFF_FAIL(#c);                                                                    \
            return 0;                                                                              \
        }                                                                                          \
    } while (0)

static int bits_eq(double a, double b)
{
    return memcmp(&a, &b, sizeof(a)) == 0;
}

static int bytes_eq(pt_slice s, ProtobufCBinaryData b)
{
    return s.n == b.len && (s.n == 0 || memcmp(s.p, b.data, s.n) == 0);
}

/* The oneof cases: protobuf-c's are field numbers. */
static int case_eq(uint8_t mine, unsigned theirs, unsigned int_field)
{
    if (theirs == 0)
        return mine == PT_WCASE_NONE;
    return mine == (theirs == int_field ? PT_WCASE_INT : PT_WCASE_FLOAT);
}

/* A repeated scalar view against protobuf-c's array: sint64 deltas (zig = 1) or doubles,
 * compared as the raw bits on the wire. */
static int rep_eq(const pt_wrep *r, size_t n, const void *arr, int zig)
{
    if (r->n != n)
        return 0;
    pt_wrep_it it;
    pt_wrep_iter(r, &it);
    uint64_t raw, want;
    for (size_t i = 0; i < n; i++) {
        memcpy(&want, (const char *)arr + 8 * i, 8);
        if (zig)
            want = (want << 1) ^ (uint64_t)((int64_t)want >> 63);
        if (!pt_wrep_next(&it, &raw) || raw != want)
            return 0;
    }
    return !pt_wrep_next(&it, &raw);
}

/* Both Histogram types have the same members; one macro compares either. */
static int spans_eq_p(const pt_wrep *r, size_t n, void *const *arr, int v2)
{
    if (r->n != n)
        return 0;
    pt_wrep_it it;
    pt_wrep_iter(r, &it);
    for (size_t i = 0; i < n; i++) {
        int32_t o, wo;
        uint32_t l, wl;
        if (v2) {
            const Io__Prometheus__Write__V2__BucketSpan *s = arr[i];
            wo = s->offset, wl = s->length;
        } else {
            const Prometheus__BucketSpan *s = arr[i];
            wo = s->offset, wl = s->length;
        }
        if (!pt_wspan_next(&it, &o, &l) || o != wo || l != wl)
            return 0;
    }
    int32_t o;
    uint32_t l;
    return !pt_wspan_next(&it, &o, &l);
}

#define HIST_EQ(mh, h, v2)                                                                         \
    (case_eq((mh)->count_case, (h)->count_case, 1) &&                                              \
     case_eq((mh)->zero_count_case, (h)->zero_count_case, 6) &&                                    \
     ((h)->count_case != 1 || (mh)->count_int == (h)->count_int) &&                                \
     ((h)->count_case != 2 || bits_eq((mh)->count_float, (h)->count_float)) &&                     \
     ((h)->zero_count_case != 6 || (mh)->zero_count_int == (h)->zero_count_int) &&                 \
     ((h)->zero_count_case != 7 || bits_eq((mh)->zero_count_float, (h)->zero_count_float)) &&      \
     bits_eq((mh)->sum, (h)->sum) && (mh)->schema == (h)->schema &&                                \
     bits_eq((mh)->zero_threshold, (h)->zero_threshold) &&                                         \
     (mh)->reset_hint == (int32_t)(h)->reset_hint && (mh)->timestamp == (h)->timestamp &&          \
     spans_eq_p(&(mh)->negative_spans, (h)->n_negative_spans, (void *const *)(h)->negative_spans,  \
                v2) &&                                                                             \
     spans_eq_p(&(mh)->positive_spans, (h)->n_positive_spans, (void *const *)(h)->positive_spans,  \
                v2) &&                                                                             \
     rep_eq(&(mh)->negative_deltas, (h)->n_negative_deltas, (h)->negative_deltas, 1) &&            \
     rep_eq(&(mh)->positive_deltas, (h)->n_positive_deltas, (h)->positive_deltas, 1) &&            \
     rep_eq(&(mh)->negative_counts, (h)->n_negative_counts, (h)->negative_counts, 0) &&            \
     rep_eq(&(mh)->positive_counts, (h)->n_positive_counts, (h)->positive_counts, 0) &&            \
     rep_eq(&(mh)->custom_values, (h)->n_custom_values, (h)->custom_values, 0))

static int labels_eq(const pt_label *ls, size_t n, Prometheus__Label *const *pl, size_t pn)
{
    if (n != pn)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!bytes_eq(ls[i].name, pl[i]->name) || !bytes_eq(ls[i].value, pl[i]->value))
            return 0;
    return 1;
}

static int compare_v1(const pt_wreq *w, const Prometheus__WriteRequest *r)
{
    CHECK(w->version == 1 && w->nseries == r->n_timeseries && w->nmetadata == r->n_metadata);
    size_t ns = 0, nx = 0, nh = 0;
    for (size_t i = 0; i < w->nseries; i++) {
        const pt_wseries *s = &w->series[i];
        const Prometheus__TimeSeries *t = r->timeseries[i];
        CHECK(labels_eq(s->labels, s->nlabels, t->labels, t->n_labels));
        CHECK(s->nsamples == t->n_samples && s->nexemplars == t->n_exemplars &&
              s->nhistograms == t->n_histograms && !s->has_meta && !s->ref_problem);
        for (size_t j = 0; j < s->nsamples; j++)
            CHECK(bits_eq(s->samples[j].value, t->samples[j]->value) &&
                  s->samples[j].timestamp == t->samples[j]->timestamp &&
                  s->samples[j].start_timestamp == 0);
        for (size_t j = 0; j < s->nexemplars; j++) {
            const pt_wexemplar *x = &s->exemplars[j];
            const Prometheus__Exemplar *e = t->exemplars[j];
            CHECK(labels_eq(x->labels, x->nlabels, e->labels, e->n_labels));
            CHECK(bits_eq(x->value, e->value) && x->timestamp == e->timestamp && !x->ref_problem);
        }
        for (size_t j = 0; j < s->nhistograms; j++) {
            const pt_whist *mh = &s->histograms[j];
            const Prometheus__Histogram *h = t->histograms[j];
            CHECK(HIST_EQ(mh, h, 0) && mh->start_timestamp == 0);
        }
        ns += s->nsamples, nx += s->nexemplars, nh += s->nhistograms;
    }
    CHECK(ns == w->nsamples && nx == w->nexemplars && nh == w->nhistograms);
    for (size_t i = 0; i < w->nmetadata; i++) {
        const pt_wmeta *m = &w->metadata[i];
        const Prometheus__MetricMetadata *p = r->metadata[i];
        CHECK(m->type == (int32_t)p->type && bytes_eq(m->family, p->metric_family_name) &&
              bytes_eq(m->help, p->help) && bytes_eq(m->unit, p->unit));
    }
    return 1;
}

/* What the decoder should make of 2.0 refs: the PT_WREF_* problem and the bad ref. */
static uint8_t refs_problem(const uint32_t *refs, size_t n, size_t nsym, uint32_t *bad)
{
    if (n % 2)
        return PT_WREF_ODD;
    for (size_t i = 0; i < n; i++)
        if (refs[i] >= nsym) {
            *bad = refs[i];
            return PT_WREF_RANGE;
        }
    return PT_WREF_OK;
}

static int refs_eq(const pt_label *ls, size_t nl, const uint32_t *refs, size_t n, const pt_wreq *w,
                   const Io__Prometheus__Write__V2__Request *r)
{
    if (nl != n / 2)
        return 0;
    for (size_t k = 0; k < nl; k++)
        if (!bytes_eq(ls[k].name, r->symbols[refs[2 * k]]) ||
            !bytes_eq(ls[k].value, r->symbols[refs[2 * k + 1]]))
            return 0;
    (void)w;
    return 1;
}

static int compare_v2(const pt_wreq *w, const Io__Prometheus__Write__V2__Request *r)
{
    CHECK(w->version == 2 && w->nseries == r->n_timeseries && w->nsymbols == r->n_symbols &&
          w->nmetadata == 0);
    for (size_t i = 0; i < w->nsymbols; i++)
        CHECK(bytes_eq(w->symbols[i], r->symbols[i]));
    size_t ns = 0, nx = 0, nh = 0;
    for (size_t i = 0; i < w->nseries; i++) {
        const pt_wseries *s = &w->series[i];
        const Io__Prometheus__Write__V2__TimeSeries *t = r->timeseries[i];
        uint32_t bad = 0;
        uint8_t pr = refs_problem(t->labels_refs, t->n_labels_refs, r->n_symbols, &bad);
        const Io__Prometheus__Write__V2__Metadata *md = t->metadata;
        if (!pr && md && md->help_ref >= r->n_symbols)
            pr = PT_WREF_RANGE, bad = md->help_ref;
        else if (!pr && md && md->unit_ref >= r->n_symbols)
            pr = PT_WREF_RANGE, bad = md->unit_ref;
        CHECK(s->ref_problem == pr && (pr != PT_WREF_RANGE || s->bad_ref == bad));
        if (!pr) {
            CHECK(refs_eq(s->labels, s->nlabels, t->labels_refs, t->n_labels_refs, w, r));
            CHECK(s->has_meta == (md != NULL));
            if (md)
                CHECK(s->meta.type == (int32_t)md->type &&
                      bytes_eq(s->meta.help, r->symbols[md->help_ref]) &&
                      bytes_eq(s->meta.unit, r->symbols[md->unit_ref]));
        }
        CHECK(s->created_timestamp == t->created_timestamp);
        CHECK(s->nsamples == t->n_samples && s->nexemplars == t->n_exemplars &&
              s->nhistograms == t->n_histograms);
        for (size_t j = 0; j < s->nsamples; j++)
            CHECK(bits_eq(s->samples[j].value, t->samples[j]->value) &&
                  s->samples[j].timestamp == t->samples[j]->timestamp &&
                  s->samples[j].start_timestamp == t->samples[j]->start_timestamp);
        for (size_t j = 0; j < s->nexemplars; j++) {
            const pt_wexemplar *x = &s->exemplars[j];
            const Io__Prometheus__Write__V2__Exemplar *e = t->exemplars[j];
            uint32_t xb;
            uint8_t xp = refs_problem(e->labels_refs, e->n_labels_refs, r->n_symbols, &xb);
            CHECK(x->ref_problem == xp);
            if (!xp)
                CHECK(refs_eq(x->labels, x->nlabels, e->labels_refs, e->n_labels_refs, w, r));
            CHECK(bits_eq(x->value, e->value) && x->timestamp == e->timestamp);
        }
        for (size_t j = 0; j < s->nhistograms; j++) {
            const pt_whist *mh = &s->histograms[j];
            const Io__Prometheus__Write__V2__Histogram *h = t->histograms[j];
            CHECK(HIST_EQ(mh, h, 1) && mh->start_timestamp == h->start_timestamp);
        }
        ns += s->nsamples, nx += s->nexemplars, nh += s->nhistograms;
    }
    CHECK(ns == w->nsamples && nx == w->nexemplars && nh == w->nhistograms);
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    int v2 = data[0] & 1;
    data++, size--;
    /* The block pool on, as in the server: inputs take the blocks, standard and large (by
     * class), the inputs before them gave back. */
    static int pooled;
    if (!pooled) {
        pt_arena_pool_init(4096, 1u << 20);
        pooled = 1;
    }
    pt_arena a, b;
    pt_arena_init(&a, 4096, 256u << 20);
    pt_arena_init(&b, 4096, 256u << 20);
    char msg[512];
    pt_wreq w;
    int mine = pt_wire_decode(data, size, v2 ? 2 : 1, &a, &w, msg, sizeof(msg));
    if (mine == PT_WIRE_EHUGELEN || mine == PT_WIRE_ENOMEM)
        goto out; /* protobuf-c misreads such lengths; out of memory is no verdict */
    ProtobufCAllocator alloc;
    pt_pb_allocator(&b, &alloc);
    ProtobufCMessage *m =
        protobuf_c_message_unpack(v2 ? &io__prometheus__write__v2__request__descriptor
                                     : &prometheus__write_request__descriptor,
                                  &alloc, size, data);
    if (!m && b.exhausted)
        goto out;
    if ((mine == 0) != (m != NULL))
        WIRE_DIFF_FAIL(mine ? msg : "protobuf-c refused what the decoder accepted");
    if (m && v2)
        compare_v2(&w, (const Io__Prometheus__Write__V2__Request *)m);
    else if (m)
        compare_v1(&w, (const Prometheus__WriteRequest *)m);
out:
    pt_arena_free(&a);
    pt_arena_free(&b);
    return 0;
}
