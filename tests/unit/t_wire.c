/* The zero-copy remote write decoder (adapter/proto/wire.c): every field of 1.0 and 2.0, unknown
 * fields, wire types, truncation, varint lengths, packed and unpacked repeated scalars,
 * 2.0 refs, memory limits. Every case also runs through the differential check against
 * protobuf-c (tests/fuzz/fuzz_wire_diff.c), which must find no difference. */
#include <stdio.h>
#include <string.h>

#include "bytes.h"
#include "error.h"
#include "tap.h"

static int diff_failures;
static const char *diff_what;
#define WIRE_DIFF_FAIL(what) (diff_failures++, diff_what = (what))
#include "../fuzz/fuzz_wire_diff.c"

/* ---- a protobuf writer ---- */
typedef struct pb {
    uint8_t b[4096];
    size_t n;
} pb;

static void put(pb *p, const void *x, size_t n)
{
    memcpy(p->b + p->n, x, n);
    p->n += n;
}
static void vi(pb *p, uint64_t v)
{
    while (v >= 0x80) {
        p->b[p->n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p->b[p->n++] = (uint8_t)v;
}
static void tag(pb *p, unsigned f, unsigned wt)
{
    vi(p, (uint64_t)f << 3 | wt);
}
static void fv(pb *p, unsigned f, uint64_t v)
{
    tag(p, f, 0), vi(p, v);
}
static void fd(pb *p, unsigned f, double d)
{
    tag(p, f, 1), put(p, &d, 8);
}
static void fl(pb *p, unsigned f, const pb *m)
{
    tag(p, f, 2), vi(p, m->n), put(p, m->b, m->n);
}
static void fs(pb *p, unsigned f, const char *s)
{
    tag(p, f, 2), vi(p, strlen(s)), put(p, s, strlen(s));
}
static uint64_t zz(int64_t v)
{
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}
static void label(pb *p, unsigned f, const char *n, const char *v)
{
    pb l = {.n = 0};
    fs(&l, 1, n), fs(&l, 2, v);
    fl(p, f, &l);
}

static pt_arena A;
static char msg[512];

/* Decodes (version 1 or 2) and runs the differential check; returns the decoder's code. */
static int dec(int version, const pb *p, pt_wreq *w)
{
    uint8_t in[4097];
    in[0] = (uint8_t)(version == 2);
    memcpy(in + 1, p->b, p->n);
    int before = diff_failures;
    LLVMFuzzerTestOneInput(in, p->n + 1);
    if (diff_failures != before)
        diag("differential check failed: %s", diff_what);
    msg[0] = 0;
    return pt_wire_decode(p->b, p->n, version, &A, w, msg, sizeof(msg));
}

static void histogram(pb *h, int flt, int v2)
{
    pb s = {.n = 0}, k = {.n = 0};
    h->n = 0;
    if (flt)
        fd(h, 2, 5.0), fd(h, 7, 1.0);
    else
        fv(h, 1, 5), fv(h, 6, 1);
    fd(h, 3, 12.5), fv(h, 4, zz(-2) & 0xffffffff), fd(h, 5, 0.001);
    fv(&s, 1, zz(-1)), fv(&s, 2, 2);
    fl(h, 8, &s);
    vi(&k, zz(1)), vi(&k, zz(-1));
    fl(h, 9, &k);                        /* negative deltas: packed */
    fv(h, 12, zz(2)), fv(h, 12, zz(-3)); /* positive deltas: unpacked */
    s.n = 0, fv(&s, 1, zz(3)), fv(&s, 2, 2);
    fl(h, 11, &s);
    k.n = 0;
    double c[2] = {1.0, 2.0};
    put(&k, c, sizeof(c));
    fl(h, 10, &k);
    fd(h, 13, 3.0);
    fv(h, 14, 2), fv(h, 15, 1700000000000);
    k.n = 0;
    double cv = 0.5;
    put(&k, &cv, 8);
    fl(h, 16, &k);
    fd(h, 16, 1.5); /* one more custom value, unpacked */
    if (v2)
        fv(h, 17, 1699999999000);
}

static int64_t next_delta(pt_wrep_it *it)
{
    uint64_t raw = 0;
    pt_wrep_next(it, &raw);
    return pt_wire_unzigzag64(raw);
}

static double next_double(pt_wrep_it *it)
{
    uint64_t raw = 0;
    pt_wrep_next(it, &raw);
    return pt_bits_f64(raw);
}

static void check_histogram(const pt_whist *h, int flt, int v2)
{
    ok(h->count_case == (flt ? PT_WCASE_FLOAT : PT_WCASE_INT) &&
           (flt ? h->count_float == 5.0 : h->count_int == 5) &&
           h->zero_count_case == (flt ? PT_WCASE_FLOAT : PT_WCASE_INT) &&
           (flt ? h->zero_count_float == 1.0 : h->zero_count_int == 1),
       "histogram %s count and zero count (oneof cases)", flt ? "float" : "integer");
    ok(h->sum == 12.5 && h->schema == -2 && h->zero_threshold == 0.001 && h->reset_hint == 2 &&
           h->timestamp == 1700000000000 && h->start_timestamp == (v2 ? 1699999999000 : 0),
       "histogram sum, schema, zero threshold, reset hint, timestamp, start timestamp");
    pt_wrep_it it;
    int32_t o;
    uint32_t l;
    pt_wrep_iter(&h->negative_spans, &it);
    int spans = h->negative_spans.n == 1 && pt_wspan_next(&it, &o, &l) && o == -1 && l == 2 &&
                !pt_wspan_next(&it, &o, &l);
    pt_wrep_iter(&h->positive_spans, &it);
    spans &= h->positive_spans.n == 1 && pt_wspan_next(&it, &o, &l) && o == 3 && l == 2;
    ok(spans, "histogram spans");
    pt_wrep_iter(&h->negative_deltas, &it);
    int deltas = h->negative_deltas.n == 2 && next_delta(&it) == 1 && next_delta(&it) == -1;
    pt_wrep_iter(&h->positive_deltas, &it);
    deltas &= h->positive_deltas.n == 2 && next_delta(&it) == 2 && next_delta(&it) == -3;
    uint64_t raw;
    deltas &= !pt_wrep_next(&it, &raw);
    ok(deltas, "histogram deltas, packed and unpacked");
    pt_wrep_iter(&h->negative_counts, &it);
    int counts = h->negative_counts.n == 2 && next_double(&it) == 1.0 && next_double(&it) == 2.0;
    pt_wrep_iter(&h->positive_counts, &it);
    counts &= h->positive_counts.n == 1 && next_double(&it) == 3.0;
    pt_wrep_iter(&h->custom_values, &it);
    counts &= h->custom_values.n == 2 && next_double(&it) == 0.5 && next_double(&it) == 1.5 &&
              !pt_wrep_next(&it, &raw);
    ok(counts, "histogram counts and custom values (packed run, then one unpacked)");
}

static void v1_fields(void)
{
    pb w = {.n = 0}, ts = {.n = 0}, s = {.n = 0}, x = {.n = 0}, h = {.n = 0}, m = {.n = 0};
    label(&ts, 1, "job", "x");
    label(&ts, 1, "__name__", "up");
    fd(&s, 1, 1.5), fv(&s, 2, 1700000000000);
    fl(&ts, 2, &s);
    label(&x, 1, "trace_id", "abc");
    fd(&x, 2, 2.0), fv(&x, 3, 1700000000001);
    fl(&ts, 3, &x);
    histogram(&h, 0, 0);
    fl(&ts, 4, &h);
    fl(&w, 1, &ts);
    fv(&m, 1, 1), fs(&m, 2, "up"), fs(&m, 4, "help text"), fs(&m, 5, "seconds");
    fl(&w, 3, &m);
    ts.n = 0;
    histogram(&h, 1, 0);
    fl(&ts, 4, &h);
    fl(&w, 1, &ts);
    pt_wreq r;
    int rv = dec(1, &w, &r);
    ok(rv == 0 && r.version == 1 && r.nseries == 2 && r.nmetadata == 1 && r.nsamples == 1 &&
           r.nexemplars == 1 && r.nhistograms == 2,
       "1.0: every message decodes (%s)", msg);
    if (rv)
        return;
    const pt_wseries *t = &r.series[0];
    ok(t->nlabels == 2 && pt_slice_eq(t->labels[0].name, PT_SLICE_LIT("job")) &&
           pt_slice_eq(t->labels[1].value, PT_SLICE_LIT("up")),
       "labels in wire order");
    ok(t->labels[0].name.p >= w.b && t->labels[0].name.p < w.b + w.n,
       "label bytes are not copied: they point into the body");
    ok(t->nsamples == 1 && t->samples[0].value == 1.5 && t->samples[0].timestamp == 1700000000000,
       "sample");
    ok(t->nexemplars == 1 && t->exemplars[0].nlabels == 1 &&
           pt_slice_eq(t->exemplars[0].labels[0].value, PT_SLICE_LIT("abc")) &&
           t->exemplars[0].value == 2.0 && t->exemplars[0].timestamp == 1700000000001,
       "exemplar with its labels");
    check_histogram(&t->histograms[0], 0, 0);
    check_histogram(&r.series[1].histograms[0], 1, 0);
    ok(r.metadata[0].type == 1 && pt_slice_eq(r.metadata[0].family, PT_SLICE_LIT("up")) &&
           pt_slice_eq(r.metadata[0].help, PT_SLICE_LIT("help text")) &&
           pt_slice_eq(r.metadata[0].unit, PT_SLICE_LIT("seconds")),
       "metadata: type, family, help, unit");
}

static void v2_fields(void)
{
    static const char *syms[] = {"",         "__name__", "up",   "job", "x",
                                 "trace_id", "abc",      "help", "unit"};
    pb w = {.n = 0}, ts = {.n = 0}, k = {.n = 0}, s = {.n = 0}, x = {.n = 0}, m = {.n = 0},
       h = {.n = 0};
    for (size_t i = 0; i < 9; i++)
        fs(&w, 4, syms[i]);
    vi(&k, 3), vi(&k, 4), vi(&k, 1), vi(&k, 2); /* unsorted: job first */
    fl(&ts, 1, &k);
    fd(&s, 1, 1.5), fv(&s, 2, 1700000000000), fv(&s, 3, 1699999999000);
    fl(&ts, 2, &s);
    fv(&x, 1, 5), fv(&x, 1, 6), fd(&x, 2, 1.0), fv(&x, 3, 1700000000000);
    fl(&ts, 4, &x);
    fv(&m, 1, 2), fv(&m, 3, 7), fv(&m, 4, 8);
    fl(&ts, 5, &m);
    fv(&ts, 6, 1699999990000);
    fl(&w, 5, &ts);
    ts.n = 0;
    fv(&ts, 1, 1), fv(&ts, 1, 2); /* unpacked refs */
    histogram(&h, 0, 1);
    fl(&ts, 3, &h);
    fl(&w, 5, &ts);
    pt_wreq r;
    int rv = dec(2, &w, &r);
    ok(rv == 0 && r.version == 2 && r.nsymbols == 9 && r.nseries == 2 && r.nsamples == 1 &&
           r.nexemplars == 1 && r.nhistograms == 1,
       "2.0: every message decodes (%s)", msg);
    if (rv)
        return;
    const pt_wseries *t = &r.series[0];
    ok(!t->ref_problem && t->nlabels == 2 && pt_slice_eq(t->labels[0].name, PT_SLICE_LIT("job")) &&
           pt_slice_eq(t->labels[1].value, PT_SLICE_LIT("up")),
       "labels_refs resolved through the symbols, packed");
    ok(r.series[1].nlabels == 1 && pt_slice_eq(r.series[1].labels[0].value, PT_SLICE_LIT("up")),
       "labels_refs unpacked");
    ok(t->samples[0].value == 1.5 && t->samples[0].timestamp == 1700000000000 &&
           t->samples[0].start_timestamp == 1699999999000,
       "sample with start timestamp (field 3)");
    ok(t->created_timestamp == 1699999990000, "TimeSeries created_timestamp (field 6)");
    ok(t->has_meta && t->meta.type == 2 && pt_slice_eq(t->meta.help, PT_SLICE_LIT("help")) &&
           pt_slice_eq(t->meta.unit, PT_SLICE_LIT("unit")),
       "metadata refs resolved");
    ok(t->exemplars[0].nlabels == 1 &&
           pt_slice_eq(t->exemplars[0].labels[0].name, PT_SLICE_LIT("trace_id")) &&
           t->exemplars[0].value == 1.0,
       "exemplar labels_refs resolved");
    check_histogram(&r.series[1].histograms[0], 0, 1);

    /* Refs out of range, odd: flagged per series, the request still decodes. */
    pb w2 = {.n = 0};
    fs(&w2, 4, ""), fs(&w2, 4, "a");
    ts.n = 0, k.n = 0;
    vi(&k, 1), vi(&k, 9);
    fl(&ts, 1, &k);
    fl(&w2, 5, &ts);
    ts.n = 0;
    fv(&ts, 1, 1);
    fl(&w2, 5, &ts);
    ts.n = 0, m.n = 0;
    fv(&m, 3, 5);
    fl(&ts, 5, &m);
    fl(&w2, 5, &ts);
    rv = dec(2, &w2, &r);
    ok(rv == 0 && r.series[0].ref_problem == PT_WREF_RANGE && r.series[0].bad_ref == 9,
       "a ref past the symbols is flagged with the ref");
    ok(rv == 0 && r.series[1].ref_problem == PT_WREF_ODD, "an odd labels_refs is flagged");
    ok(rv == 0 && r.series[2].ref_problem == PT_WREF_RANGE && r.series[2].bad_ref == 5,
       "a metadata help_ref past the symbols is flagged");
    /* A second metadata replaces the first whole (protobuf-c's merge of proto3 scalars). */
    pb w3 = {.n = 0};
    fs(&w3, 4, ""), fs(&w3, 4, "h");
    ts.n = 0, m.n = 0;
    fv(&m, 1, 1), fv(&m, 3, 1);
    fl(&ts, 5, &m);
    m.n = 0;
    fv(&m, 4, 1);
    fl(&ts, 5, &m);
    fl(&w3, 5, &ts);
    rv = dec(2, &w3, &r);
    ok(rv == 0 && r.series[0].meta.type == 0 && r.series[0].meta.help.n == 0 &&
           pt_slice_eq(r.series[0].meta.unit, PT_SLICE_LIT("h")),
       "a repeated metadata: the last one, whole");
}

static void malformed(void)
{
    pt_wreq r;
    pb w = {.n = 0}, ts = {.n = 0}, s = {.n = 0};
    /* Unknown fields of every wire type are skipped, at every level. */
    fv(&w, 2, 7), fd(&w, 9, 1.0), fs(&w, 10, "x");
    uint32_t f32 = 1;
    tag(&w, 11, 5), put(&w, &f32, 4);
    fv(&s, 9, 1), fd(&s, 1, 3.0);
    fl(&ts, 2, &s);
    fs(&ts, 15, "skip me");
    label(&ts, 1, "__name__", "m");
    fl(&w, 1, &ts);
    tag(&w, 536870911, 0), vi(&w, 1); /* the highest field number */
    int rv = dec(1, &w, &r);
    ok(rv == 0 && r.nseries == 1 && r.series[0].samples[0].value == 3.0,
       "unknown fields of wire types 0, 1, 2, 5 are skipped");
    ok(diff_failures == 0, "protobuf-c agrees so far");

    /* Every truncation of a valid request: same verdict as protobuf-c, never a crash. */
    pb full = w, cut;
    int refused = 0;
    for (size_t n = 0; n < full.n; n++) {
        cut = full;
        cut.n = n;
        refused += dec(1, &cut, &r) != 0;
    }
    ok(refused > 0 && diff_failures == 0, "every truncation agrees with protobuf-c (%d refused)",
       refused);

    /* Wire-type mismatches on known fields. */
    pb bad = {.n = 0};
    s.n = 0, fv(&s, 1, 3); /* Sample.value as a varint */
    ts.n = 0, fl(&ts, 2, &s);
    fl(&bad, 1, &ts);
    ok(dec(1, &bad, &r) == PT_WIRE_EPROTO && strstr(msg, "wire type 0, expected 1"),
       "a double sent as a varint is refused: %s", msg);
    bad.n = 0;
    fv(&bad, 1, 1);
    ok(dec(1, &bad, &r) == PT_WIRE_EPROTO, "a TimeSeries sent as a varint is refused");
    bad.n = 0;
    tag(&bad, 1, 3);
    ok(dec(1, &bad, &r) == PT_WIRE_EPROTO, "group wire types are refused");
    bad.n = 0;
    bad.b[bad.n++] = 0x02;
    ok(dec(1, &bad, &r) == PT_WIRE_EPROTO && strstr(msg, "field number 0"),
       "field number 0 is refused");

    /* Varint lengths: 10 bytes is the most. */
    pb vw = {.n = 0};
    s.n = 0;
    tag(&s, 2, 0);
    for (int i = 0; i < 9; i++)
        s.b[s.n++] = 0xff;
    s.b[s.n++] = 0x01;
    ts.n = 0, fl(&ts, 2, &s);
    fl(&vw, 1, &ts);
    ok(dec(1, &vw, &r) == 0 && r.series[0].samples[0].timestamp == -1,
       "a 10-byte varint decodes (-1)");
    vw.n = 0;
    s.n--;
    s.b[s.n++] = 0x81;
    s.b[s.n++] = 0x00;
    ts.n = 0, fl(&ts, 2, &s);
    fl(&vw, 1, &ts);
    ok(dec(1, &vw, &r) == PT_WIRE_EPROTO && strstr(msg, "varint"), "an 11-byte varint is refused");
    /* Packed doubles must be whole. */
    pb h = {.n = 0}, k = {.n = 0};
    put(&k, "1234567", 7);
    fl(&h, 10, &k);
    ts.n = 0, fl(&ts, 4, &h);
    vw.n = 0, fl(&vw, 1, &ts);
    ok(dec(1, &vw, &r) == PT_WIRE_EPROTO && strstr(msg, "packed doubles"),
       "packed doubles of 7 bytes are refused");
    /* A length past the end, and one protobuf-c would misread. */
    uint8_t huge[] = {0x0a, 0xfe, 0xff, 0xff, 0xff, 0x0f};
    pb hw = {.n = 0};
    put(&hw, huge, sizeof(huge));
    ok(dec(1, &hw, &r) == PT_WIRE_EHUGELEN, "a length of 2^32-2 is refused");
    huge[1] = 0x05, hw.n = 0;
    put(&hw, huge, 2);
    ok(dec(1, &hw, &r) == PT_WIRE_EPROTO && strstr(msg, "past the end"),
       "a length past the end is refused: %s", msg);

    /* Memory: the arena's ceiling ends decoding cleanly. */
    pb many = {.n = 0};
    ts.n = 0;
    for (int i = 0; i < 1000; i++)
        tag(&ts, 2, 2), vi(&ts, 0);
    fl(&many, 1, &ts);
    pt_arena small;
    pt_arena_init(&small, 1024, 8192);
    ok(pt_wire_decode(many.b, many.n, 1, &small, &r, msg, sizeof(msg)) == PT_WIRE_ENOMEM &&
           strstr(msg, "1000 samples"),
       "1000 samples over an 8 KiB arena: out of memory, said so: %s", msg);
    pt_arena_free(&small);
    ok(dec(1, &many, &r) == 0 && r.nsamples == 1000, "and with room, 1000 empty samples");

    ok(diff_failures == 0, "the differential check found no difference in any case");

    /* The check itself sees a difference: tamper with a decoded sample. */
    pb one = {.n = 0};
    s.n = 0, fd(&s, 1, 2.0);
    ts.n = 0, fl(&ts, 2, &s);
    fl(&one, 1, &ts);
    ProtobufCAllocator alloc;
    pt_pb_allocator(&A, &alloc);
    Prometheus__WriteRequest *pw = (Prometheus__WriteRequest *)protobuf_c_message_unpack(
        &prometheus__write_request__descriptor, &alloc, one.n, one.b);
    ok(pw && dec(1, &one, &r) == 0 && compare_v1(&r, pw) == 1, "the same decode compares equal");
    r.series[0].samples[0].value = -0.0;
    int before = diff_failures;
    compare_v1(&r, pw);
    ok(diff_failures == before + 1, "a sample whose bits differ is caught");
    diff_failures = before;
}

int main(void)
{
    pt_arena_init(&A, 1 << 16, 0);
    v1_fields();
    v2_fields();
    malformed();
    pt_arena_free(&A);
    return done_testing();
}
