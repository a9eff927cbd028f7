/* Exemplars through a store on any backend (tests/unit/t_exemplar.c: embedded,
 * t_bigtable_conformance.c: the emulator): remote write 1.0 and 2.0 bodies decoded by the
 * zero-copy decoder, stored as cells of the exemplar rows, read back as SAMPLES (structs
 * and the wire bytes, unpacked again with protobuf-c), every field compared bit for bit;
 * the per-window cap, the query window, invalid exemplars. */
#ifndef PT_TEST_EXEMPLAR_CONFORMANCE_H
#define PT_TEST_EXEMPLAR_CONFORMANCE_H

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bytes.h"
#include "exemplar.h"
#include "metrics.h"
#include "samples.h"
#include "wire_suite.h"
#include "store_helpers.h"
#include "tap.h"
#include "wire.h"

static pt_arena xc_a;
static pt_store *xc_st;

/* One exemplar as written: labels as name, value pairs. */
typedef struct xc_ex {
    const char *l[6]; /* name, value, ..., NULL */
    double v;
    int64_t t;
} xc_ex;



/* A 1.0 request: series name{job="x"} with ns floats (t0 + i s) in one entry, and the
 * exemplars in an entry of their own (as Prometheus sends them). */
static pt_slice xc_body_v1(const char *name, size_t ns, int64_t t0, const xc_ex *xs, size_t nx)
{
    Prometheus__WriteRequest *wr = pt_arena_alloc(&xc_a, sizeof(*wr));
    prometheus__write_request__init(wr);
    wr->timeseries = pt_arena_alloc(&xc_a, 2 * sizeof(void *));
    for (int k = 0; k < 2; k++) {
        Prometheus__TimeSeries *ts = ws_series_v1(&xc_a, name, "x");
        if (k == 0) {
            ts->n_samples = ns;
            ts->samples = pt_arena_alloc(&xc_a, (ns + 1) * sizeof(void *));
            for (size_t i = 0; i < ns; i++) {
                Prometheus__Sample *s = pt_arena_alloc(&xc_a, sizeof(*s));
                prometheus__sample__init(s);
                s->timestamp = t0 + (int64_t)i * 1000;
                s->value = (double)i;
                ts->samples[i] = s;
            }
        } else {
            ts->n_exemplars = nx;
            ts->exemplars = pt_arena_alloc(&xc_a, (nx + 1) * sizeof(void *));
            for (size_t i = 0; i < nx; i++) {
                Prometheus__Exemplar *x = pt_arena_alloc(&xc_a, sizeof(*x));
                prometheus__exemplar__init(x);
                size_t nl = 0;
                while (xs[i].l[2 * nl])
                    nl++;
                x->labels = pt_arena_alloc(&xc_a, (nl + 1) * sizeof(void *));
                for (size_t j = 0; j < nl; j++)
                    x->labels[j] = mk_label(&xc_a, xs[i].l[2 * j], xs[i].l[2 * j + 1]);
                x->n_labels = nl;
                x->value = xs[i].v;
                x->timestamp = xs[i].t;
                ts->exemplars[i] = x;
            }
        }
        wr->timeseries[wr->n_timeseries++] = ts;
    }
    size_t n = protobuf_c_message_get_packed_size(&wr->base);
    uint8_t *p = pt_arena_alloc(&xc_a, n + 1);
    protobuf_c_message_pack(&wr->base, p);
    return (pt_slice){p, n};
}

static void xc_put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> 8 * i);
}

/* A 2.0 request: symbols "", "__name__", name, "trace_id", then each exemplar's trace id
 * (its l[1]); one series with one sample at t0 and the exemplars (labels trace_id only). */
static pt_slice xc_body_v2(const char *name, int64_t t0, const xc_ex *xs, size_t nx)
{
    size_t cap = 256 + 64 * nx;
    for (size_t i = 0; i < nx; i++)
        cap += strlen(xs[i].l[1]);
    uint8_t *series = pt_arena_alloc(&xc_a, cap), *q = series, *body = pt_arena_alloc(&xc_a, 2 * cap);
    static const uint8_t refs[] = {1, 2};
    q = ws_put_len(q, 1 << 3 | 2, refs, 2);
    uint8_t sm[32], *s = sm;
    *s++ = 1 << 3 | 1;
    xc_put_le64(s, pt_f64_bits(1.5)), s += 8;
    *s++ = 2 << 3 | 0;
    s = pt_put_uvarint(s, (uint64_t)t0);
    q = ws_put_len(q, 2 << 3 | 2, sm, (size_t)(s - sm));
    for (size_t i = 0; i < nx; i++) {
        uint8_t xm[40], *x = xm, lr[2] = {3, (uint8_t)(4 + i)};
        x = ws_put_len(x, 1 << 3 | 2, lr, 2);
        *x++ = 2 << 3 | 1;
        xc_put_le64(x, pt_f64_bits(xs[i].v)), x += 8;
        *x++ = 3 << 3 | 0;
        x = pt_put_uvarint(x, (uint64_t)xs[i].t);
        q = ws_put_len(q, 4 << 3 | 2, xm, (size_t)(x - xm));
    }
    uint8_t *p = body;
    p = ws_put_len(p, 4 << 3 | 2, (const uint8_t *)"", 0);
    p = ws_put_len(p, 4 << 3 | 2, (const uint8_t *)"__name__", 8);
    p = ws_put_len(p, 4 << 3 | 2, (const uint8_t *)name, strlen(name));
    p = ws_put_len(p, 4 << 3 | 2, (const uint8_t *)"trace_id", 8);
    for (size_t i = 0; i < nx; i++)
        p = ws_put_len(p, 4 << 3 | 2, (const uint8_t *)xs[i].l[1], strlen(xs[i].l[1]));
    p = ws_put_len(p, 5 << 3 | 2, series, (size_t)(q - series));
    return (pt_slice){body, (size_t)(p - body)};
}

static int xc_write(pt_slice body, int version, pt_write_result *res)
{
    return ws_write(xc_st, &xc_a, body, version, res);
}

/* Whether exemplars got[0, n) are want[0, n), every field bit for bit; diag on the first
 * difference. */
static int xc_same(Prometheus__Exemplar *const *got, size_t n, const xc_ex *want, size_t nw)
{
    if (n != nw) {
        diag("%zu exemplars read, %zu expected", n, nw);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        const Prometheus__Exemplar *x = got[i];
        size_t nl = 0;
        while (want[i].l[2 * nl])
            nl++;
        int good = x->timestamp == want[i].t && pt_f64_bits(x->value) == pt_f64_bits(want[i].v) &&
                   x->n_labels == nl;
        for (size_t j = 0; good && j < nl; j++) {
            const char *wn = want[i].l[2 * j], *wv = want[i].l[2 * j + 1];
            good = x->labels[j]->name.len == strlen(wn) &&
                   memcmp(x->labels[j]->name.data, wn, strlen(wn)) == 0 &&
                   x->labels[j]->value.len == strlen(wv) &&
                   memcmp(x->labels[j]->value.data, wv, strlen(wv)) == 0;
        }
        if (!good) {
            diag("exemplar %zu differs: got t %" PRId64 " value bits %016" PRIx64
                 " %zu labels, want t %" PRId64 " bits %016" PRIx64 " %zu labels",
                 i, x->timestamp, pt_f64_bits(x->value), x->n_labels, want[i].t, pt_f64_bits(want[i].v), nl);
            return 0;
        }
    }
    return 1;
}

/* Reads series name over [start, end] as structs and as SAMPLES bytes; checks the bytes are
 * protobuf-c's, unpacks them and checks both against want[0, nw) and ns floats. */
static void xc_check_read(const char *name, int64_t start, int64_t end, const xc_ex *want,
                          size_t nw, size_t ns, const char *what)
{
    tmatch m[] = {{0, "__name__", name}};
    Prometheus__ReadResponse resp;
    char msg[256];
    int rv = store_read(xc_st, mk_read(&xc_a, start, end, m, 1), &xc_a, NULL, &resp, msg,
                           sizeof(msg));
    ok(rv == 0 && resp.n_results == 1 && resp.results[0]->n_timeseries == 1, "%s: read", what);
    if (rv != 0 || resp.results[0]->n_timeseries != 1)
        return;
    Prometheus__TimeSeries *ts = resp.results[0]->timeseries[0];
    ok(xc_same(ts->exemplars, ts->n_exemplars, want, nw) && ts->n_samples == ns,
       "%s: %zu exemplars, every field bit-exact, %zu floats beside them", what, nw, ns);

    Prometheus__ReadResponse *u =
        ws_samples_check(xc_st, mk_read(&xc_a, start, end, m, 1), &xc_a, &resp, what);
    ok(u && u->n_results == 1 && u->results[0]->n_timeseries == 1 &&
           xc_same(u->results[0]->timeseries[0]->exemplars,
                   u->results[0]->timeseries[0]->n_exemplars, want, nw),
       "%s: SAMPLES bytes unpacked by protobuf-c: every field bit-exact", what);
    if (u)
        prometheus__read_response__free_unpacked(u, NULL);

    /* A streamed read leaves them out (ChunkedSeries has no field for them). */
    pt_read *r;
    pt_read_batch bt;
    pt_read_request req;
    pt_read_request_from_pb(mk_read(&xc_a, start, end, m, 1), &xc_a, &req);
    pt_read_start(xc_st, req.queries, req.nqueries, &xc_a, NULL, &r);
    pt_read_exemplars(r, 0);
    size_t nx = 0;
    while ((rv = pt_read_next(r, &xc_a, 0, &bt, msg, sizeof(msg))) == 1)
        for (size_t i = 0; i < bt.n; i++)
            nx += bt.s[i].nexemplars;
    pt_read_free(r);
    ok(rv == 0 && nx == 0, "%s: none read when turned off (streamed reads)", what);
}

/* A pass-through backend that counts scans per table. */
typedef struct xc_counted {
    pt_backend *inner;
    size_t scans[PT_TABLE_COUNT];
} xc_counted;

static int xc_counted_write(void *state, const pt_mutation *m, size_t n)
{
    return pt_backend_write(((xc_counted *)state)->inner, m, n);
}

static int xc_counted_scan(void *state, const pt_scan *s, pt_cell_fn fn, void *ud)
{
    xc_counted *c = state;
    c->scans[s->table]++;
    return pt_backend_scan(c->inner, s, fn, ud);
}

static pt_backend_ops xc_counted_ops = {.name = "counted", .write = xc_counted_write,
                                        .scan = xc_counted_scan};

/* Points-table scans of one read of series name over [start, end] (its samples checked). */
static size_t xc_points_scans(xc_counted *c, const char *name, int64_t start, int64_t end,
                              size_t ns)
{
    tmatch m[] = {{0, "__name__", name}};
    Prometheus__ReadResponse resp;
    char msg[256];
    size_t before = c->scans[PT_TABLE_POINTS];
    int rv = store_read(xc_st, mk_read(&xc_a, start, end, m, 1), &xc_a, NULL, &resp, msg,
                           sizeof(msg));
    ok(rv == 0 && resp.n_results == 1 && resp.results[0]->n_timeseries == 1 &&
           resp.results[0]->timeseries[0]->n_samples == ns,
       "%s: read, %zu samples", name, ns);
    return c->scans[PT_TABLE_POINTS] - before;
}

/* Runs every case on be (its tables empty of these series); flush, when not NULL, moves
 * what was written into the backend's long-term form. */
__attribute__((unused)) static void pt_exemplar_conformance(pt_backend *be, int (*flush)(void *),
                                                            void *flush_ud, const char *name)
{
    diag("exemplar conformance on %s", name);
    xc_counted counted = {be, {0}};
    pt_backend cbe = {&xc_counted_ops, &counted};
    pt_store_stats stats = {0};
    pt_store st = {.be = &cbe, .stats = &stats, .cache = pt_index_cache_new(1 << 16), .index_bucket_ms = 86400000,
                   .max_series = 1000, .max_samples = 100000,
                   .xnewest = pt_exemplar_newest_new(1 << 10),
                   .xmarks = pt_exemplar_marks_new()};
    xc_st = &st;
    pt_arena_init(&xc_a, 0, 0);
    const int64_t w = PT_EXEMPLAR_SLOT_MS;
    /* Window-aligned times: t0 is the first millisecond of a window. */
    const int64_t t0 = (1700000000000 / w + 1) * w;

    /* 1.0: special values, no labels, UTF-8 labels, a label set of exactly 128 runes
     * (8 + 120 two-byte runes), one exemplar per window. */
    static char long_ok[241];
    for (int i = 0; i < 120; i++)
        memcpy(long_ok + 2 * i, "\xc3\xa9", 2);
    const xc_ex v1[] = {
        {{"trace_id", "4bf92f3577b34da6a3ce929d0e0e4736", "span_id", "00f067aa0ba902b7"}, 0.25, t0},
        {{NULL}, pt_bits_f64(0x7ff8000000000123ULL), t0 + w + 5},
        {{"trace_id", "b"}, INFINITY, t0 + 2 * w + 16383},
        {{"trace_id", "c"}, -INFINITY, t0 + 3 * w},
        {{"trace_id", "d"}, pt_bits_f64(1), t0 + 4 * w + 1},
        {{"trace_id", "e"}, pt_bits_f64(0x7ff0000000000002ULL), t0 + 5 * w + 2},
        {{"\xe2\x9c\x93 name", "\xe6\x97\xa5\xe6\x9c\xac"}, -1e300, t0 + 6 * w + 3},
        {{"trace_id", long_ok}, 7, t0 + 7 * w + 4},
        {{"trace_id", "z"}, 0, t0 + 8 * w + 5},
    };
    const size_t n1 = sizeof(v1) / sizeof(v1[0]);
    pt_write_result res;
    int wrv = xc_write(xc_body_v1("ex_v1", 10, t0, v1, n1), 1, &res);
    ok(wrv == 0 && res.exemplars_written == n1 && res.samples_written == 10 &&
           res.samples_rejected == 0,
       "1.0: %zu exemplars in an entry of their own and 10 samples stored (%zu, %zu) %s", n1,
       res.exemplars_written, res.samples_written, res.msg);
    xc_check_read("ex_v1", t0, t0 + 10 * w, v1, n1, 10, "1.0");
    xc_check_read("ex_v1", t0 + w + 6, t0 + 4 * w + 1, v1 + 2, 3, 0, "1.0, a window of the query");

    /* 2.0 */
    const xc_ex v2[] = {
        {{"trace_id", "aa"}, 1.5, t0 + 100 * w},
        {{"trace_id", "bb"}, -2.5, t0 + 101 * w + 77},
        {{"trace_id", "cc"}, pt_bits_f64(0xfff0000000000777ULL), t0 + 102 * w + 9},
    };
    wrv = xc_write(xc_body_v2("ex_v2", t0 + 100 * w, v2, 3), 2, &res);
    ok(wrv == 0 && res.exemplars_written == 3 && res.samples_written == 1 &&
           res.samples_rejected == 0,
       "2.0: 3 exemplars stored (Exemplars-Written %zu) %s", res.exemplars_written, res.msg);
    xc_check_read("ex_v2", t0 + 100 * w, t0 + 103 * w, v2, 3, 1, "2.0");

    if (flush) {
        ok(flush(flush_ud) == 0, "flushed");
        xc_check_read("ex_v1", t0, t0 + 10 * w, v1, n1, 10, "1.0, after the flush");
        xc_check_read("ex_v2", t0 + 100 * w, t0 + 103 * w, v2, 3, 1, "2.0, after the flush");
    }

    /* The cap: 40 exemplars 4.096 s apart, in time order, over 10 windows: one kept per
     * window, the last of each. */
    xc_ex cap[40], kept[10];
    static char ids[40][8];
    for (int i = 0; i < 40; i++) {
        snprintf(ids[i], sizeof(ids[i]), "t%d", i);
        cap[i] = (xc_ex){{"trace_id", ids[i]}, (double)i, t0 + 200 * w + (int64_t)i * (w / 4)};
        if (i % 4 == 3)
            kept[i / 4] = cap[i];
    }
    wrv = xc_write(xc_body_v1("ex_cap", 0, 0, cap, 40), 1, &res);
    ok(wrv == 0 && res.exemplars_written == 40 && res.samples_rejected == 0,
       "the cap: 40 exemplars in 10 windows accepted");
    xc_check_read("ex_cap", t0, t0 + 300 * w, kept, 10, 0, "the cap, one exemplar a window");

    /* Invalid ones: each named, the valid rest stored. */
    static char long_bad[243];
    memcpy(long_bad, long_ok, 240);
    long_bad[240] = 'x';
    const xc_ex bad[] = {
        {{"trace_id", "ok1"}, 1, t0 + 400 * w},
        {{"trace_id", long_bad}, 2, t0 + 401 * w},
        {{"trace_id", "\xff\xfe"}, 3, t0 + 402 * w},
        {{"trace_id", "a", "trace_id", "b"}, 4, t0 + 403 * w},
        {{"", "a"}, 5, t0 + 404 * w},
        {{"trace_id", "neg"}, 6, -5},
        {{"trace_id", "ok2"}, 7, t0 + 405 * w},
    };
    const char *why[] = {NULL, "128 UTF-8 runes", "not valid UTF-8", "duplicate exemplar label",
                         "empty name", "negative"};
    for (size_t i = 1; i < 6; i++) {
        const xc_ex one[] = {bad[0], bad[i]};
        wrv = xc_write(xc_body_v1("ex_bad_one", 0, 0, one, 2), 1, &res);
        ok(wrv == 0 && res.exemplars_written == 1 && res.samples_rejected == 1 &&
               strstr(res.msg, "invalid exemplar") && strstr(res.msg, why[i]),
           "refused, named: %s", res.msg);
    }
    wrv = xc_write(xc_body_v1("ex_bad", 0, 0, bad, 7), 1, &res);
    ok(wrv == 0 && res.exemplars_written == 2 && res.samples_rejected == 5,
       "5 invalid exemplars refused, 2 valid stored (%zu)", res.exemplars_written);
    const xc_ex good[] = {bad[0], bad[6]};
    xc_check_read("ex_bad", t0, t0 + 500 * w, good, 2, 0, "the valid ones of a partly invalid request");

    /* Out of order: older than the series' newest stored exemplar. 1.0 and 2.0 drop it
     * and count it, the request's rest stored without an error (as Prometheus' receivers
     * do); the same time again is not out of order (a retried request). */
    const xc_ex o1[] = {{{"trace_id", "o1"}, 1, t0 + 600 * w + 10}};
    wrv = xc_write(xc_body_v2("ex_ooo", t0 + 600 * w, o1, 1), 2, &res);
    ok(wrv == 0 && res.exemplars_written == 1, "2.0: an exemplar stored");
    const xc_ex o2[] = {{{"trace_id", "o2"}, 2, t0 + 600 * w + 9},
                        {{"trace_id", "o3"}, 3, t0 + 602 * w},
                        {{"trace_id", "o4"}, 4, t0 + 601 * w}};
    uint64_t ooo0 = st.stats->exemplars_out_of_order;
    wrv = xc_write(xc_body_v2("ex_ooo", t0 + 601 * w, o2, 3), 2, &res);
    ok(wrv == 0 && res.exemplars_written == 1 && res.samples_written == 1 &&
           res.samples_rejected == 0 && !res.msg[0] && st.stats->exemplars_out_of_order - ooo0 == 2,
       "2.0: one older than the stored newest and one older than the request's own dropped "
       "and counted without an error, the newer stored (%zu written) %s", res.exemplars_written,
       res.msg);
    const xc_ex o5[] = {{{"trace_id", "o5"}, 5, t0 + 602 * w}};
    wrv = xc_write(xc_body_v2("ex_ooo", t0 + 602 * w, o5, 1), 2, &res);
    ok(wrv == 0 && res.exemplars_written == 1 && res.samples_rejected == 0,
       "2.0: an exemplar at the newest time again is stored (%s)", res.msg);
    const xc_ex okk[] = {o1[0], o5[0]};
    xc_check_read("ex_ooo", t0, t0 + 700 * w, okk, 2, 3, "2.0, out of order");

    const xc_ex p1[] = {{{"trace_id", "p1"}, 1, t0 + 700 * w + 10}};
    wrv = xc_write(xc_body_v1("ex_ooo1", 0, 0, p1, 1), 1, &res);
    const xc_ex p2[] = {{{"trace_id", "p2"}, 2, t0 + 700 * w + 9},
                        {{"trace_id", "p3"}, 3, t0 + 701 * w}};
    ooo0 = st.stats->exemplars_out_of_order;
    wrv = xc_write(xc_body_v1("ex_ooo1", 0, 0, p2, 2), 1, &res);
    ok(wrv == 0 && res.exemplars_written == 1 && res.samples_rejected == 0 &&
           st.stats->exemplars_out_of_order - ooo0 == 1,
       "1.0: an out-of-order exemplar dropped without an error, the newer stored");
    const xc_ex pk[] = {p1[0], p2[1]};
    xc_check_read("ex_ooo1", t0, t0 + 800 * w, pk, 2, 0, "1.0, out of order");

    /* Timestamp 0: remote write 2.0 requires an exemplar's timestamp (0 = not set); in 1.0
     * it is the epoch. */
    const xc_ex z[] = {{{"trace_id", "z0"}, 1, 0}, {{"trace_id", "z1"}, 2, t0}};
    wrv = xc_write(xc_body_v2("ex_zero", t0, z, 2), 2, &res);
    ok(wrv == 0 && res.exemplars_written == 1 && res.samples_rejected == 1 &&
           strstr(res.msg, "timestamp is 0"),
       "2.0: an exemplar with timestamp 0 refused, named (%s)", res.msg);
    xc_check_read("ex_zero", t0, t0 + w, z + 1, 1, 1, "2.0, timestamp 0");
    wrv = xc_write(xc_body_v1("ex_zero1", 0, 0, z, 1), 1, &res);
    ok(wrv == 0 && res.exemplars_written == 1 && res.samples_rejected == 0,
       "1.0: an exemplar at time 0 stored");
    xc_check_read("ex_zero1", 0, w, z, 1, 0, "1.0, timestamp 0");

    /* The marks (exemplar.h): a process that starts again knows none, and reads them. */
    pt_exemplar_marks_free(st.xmarks);
    st.xmarks = pt_exemplar_marks_new();
    xc_check_read("ex_v1", t0, t0 + 10 * w, v1, n1, 10, "1.0, marks read from the store");
    xc_check_read("ex_v2", t0 + 100 * w, t0 + 103 * w, v2, 3, 1, "2.0, marks read from the store");
    /* A bucket without exemplars: one points-table scan per read (the data rows), none for
     * exemplar rows; a store from before the marks looks for them (two). */
    const int64_t tp = t0 + 20 * PT_BUCKET_MS;
    wrv = xc_write(xc_body_v1("ex_plain", 3, tp, NULL, 0), 1, &res);
    ok(wrv == 0 && res.samples_written == 3, "a series without exemplars in a new bucket");
    size_t unmarked = xc_points_scans(&counted, "ex_plain", tp, tp + w, 3);
    ok(unmarked == 1, "an unmarked bucket: its exemplar rows are not looked for (%zu scans)",
       unmarked);
    pt_exemplar_marks *marks = st.xmarks, *legacy = pt_exemplar_marks_new();
    pt_exemplar_marks_set_legacy(legacy);
    st.xmarks = legacy;
    size_t old = xc_points_scans(&counted, "ex_plain", tp, tp + w, 3);
    ok(old == 2, "a store from before the marks: they are (%zu scans)", old);
    st.xmarks = marks;
    pt_exemplar_marks_free(legacy);
    /* Another series' exemplar marks the bucket; a process that did not write it reads
     * the mark and then looks. */
    const xc_ex late[] = {{{"trace_id", "late"}, 9, tp + 5}};
    wrv = xc_write(xc_body_v1("ex_late", 0, 0, late, 1), 1, &res);
    ok(wrv == 0 && res.exemplars_written == 1, "an exemplar in that bucket");
    pt_exemplar_marks_free(st.xmarks);
    st.xmarks = pt_exemplar_marks_new();
    size_t marked = xc_points_scans(&counted, "ex_plain", tp, tp + w, 3);
    ok(marked == 2, "the bucket now marked: its exemplar rows are looked for (%zu scans)", marked);
    xc_check_read("ex_late", tp, tp + w, late, 1, 0, "an exemplar in a bucket marked late");
    if (flush) {
        ok(flush(flush_ud) == 0, "flushed again");
        pt_exemplar_marks_free(st.xmarks);
        st.xmarks = pt_exemplar_marks_new();
        xc_check_read("ex_late", tp, tp + w, late, 1, 0, "the mark after the flush");
    }

    /* A store only this process writes (the test is the only writer) also remembers that a
     * bucket is unmarked: the marker row is read once, until a write marks the bucket. */
    xc_counted_ops.caps = PT_BACKEND_CAP_EXCLUSIVE;
    pt_exemplar_marks_free(st.xmarks);
    st.xmarks = pt_exemplar_marks_new();
    const int64_t tq = tp + PT_BUCKET_MS;
    wrv = xc_write(xc_body_v1("ex_plain2", 3, tq, NULL, 0), 1, &res);
    size_t i0 = counted.scans[PT_TABLE_INDEX];
    size_t s1 = xc_points_scans(&counted, "ex_plain2", tq, tq + w, 3);
    size_t i1 = counted.scans[PT_TABLE_INDEX];
    size_t s2 = xc_points_scans(&counted, "ex_plain2", tq, tq + w, 3);
    size_t i2 = counted.scans[PT_TABLE_INDEX];
    ok(wrv == 0 && s1 == 1 && s2 == 1 && i2 - i1 == i1 - i0 - 1,
       "exclusive store: the second read of an unmarked bucket does not read the marker row "
       "(index scans %zu then %zu)", i1 - i0, i2 - i1);
    const xc_ex late2[] = {{{"trace_id", "late2"}, 10, tq + 7}};
    wrv = xc_write(xc_body_v1("ex_late2", 0, 0, late2, 1), 1, &res);
    size_t s3 = xc_points_scans(&counted, "ex_plain2", tq, tq + w, 3);
    ok(wrv == 0 && s3 == 2, "a write that marks it: its exemplar rows are looked for again (%zu)",
       s3);
    xc_check_read("ex_late2", tq, tq + w, late2, 1, 0, "an exemplar in a bucket known unmarked");
    xc_counted_ops.caps = 0;

    pt_exemplar_marks_free(st.xmarks);
    pt_exemplar_newest_free(st.xnewest);
    pt_index_cache_free(st.cache);
    pt_arena_free(&xc_a);
}

#endif
