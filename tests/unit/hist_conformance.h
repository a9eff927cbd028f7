/* Native histograms through a store on any backend (tests/unit/t_histwire.c: embedded,
 * t_bigtable_conformance.c: the emulator): remote write 1.0 and 2.0 bodies decoded by the
 * zero-copy decoder, stored as cells, read back as SAMPLES (structs and the wire bytes,
 * unpacked again with protobuf-c) and as STREAMED_XOR_CHUNKS (the histogram chunks decoded
 * with base/hchunk); every field compared bit for bit, before and after a flush when the
 * backend has one. */
#ifndef PT_TEST_HIST_CONFORMANCE_H
#define PT_TEST_HIST_CONFORMANCE_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bytes.h"
#include "hchunk.h"
#include "histpb.h"
#include "rnd.h"
#include "samples.h"
#include "wire_suite.h"
#include "store_helpers.h"
#include "tap.h"
#include "wire.h"
#include "xor.h"


/* Floats for sums, thresholds and float counts: every special value. */
static double hc_any_float(int nonneg)
{
    switch (rnd64() % 10) {
    case 0: return 0.0;
    case 1: return nonneg ? 0.0 : -0.0;
    case 2: return pt_bits_f64(0x7ff8000000000123ULL); /* a NaN with a payload */
    case 3: return INFINITY;
    case 4: return nonneg ? 1e300 : -INFINITY;
    case 5: return pt_bits_f64(1); /* the smallest subnormal */
    case 6: return pt_bits_f64(0xfff0000000000777ULL); /* a negative NaN with a payload */
    default: return (double)(rnd64() % 100000) / 7;
    }
}

/* hc_a valid histogram of one of four kinds: integer/float x exponential/custom buckets. */
static void hc_gen(pt_histogram *h, int kind, int64_t t)
{
    int is_float = kind & 1, custom = kind & 2;
    size_t nps = rnd64() % 4, nns = custom ? 0 : rnd64() % 3;
    size_t lens[8], np = 0, nn = 0;
    for (size_t i = 0; i < nps + nns; i++) {
        lens[i] = rnd64() % 4;
        if (i < nps)
            np += lens[i];
        else
            nn += lens[i];
    }
    size_t nc = custom ? np + nps * 3 + rnd64() % 3 : 0;
    h->is_float = (uint8_t)is_float;
    if (pt_histogram_reserve(h, nns, nps, nn, np, nc) != 0)
        abort();
    h->t = t;
    h->schema = custom ? PT_HIST_SCHEMA_CUSTOM : (int32_t)(rnd64() % 13) - 4;
    h->reset_hint = (uint8_t)(rnd64() % 4);
    h->zero_threshold = custom ? 0 : (rnd64() % 2 ? pt_bits_f64(0x3800000000000000ULL) : hc_any_float(0));
    h->sum = hc_any_float(0);
    /* proto3 leaves a -0 sum or threshold out (Prometheus' senders too): +0 on the wire. */
    if (h->sum == 0)
        h->sum = 0;
    if (h->zero_threshold == 0)
        h->zero_threshold = 0;
    for (size_t i = 0; i < nps; i++)
        h->pos_spans[i] = (pt_hist_span){i ? (int32_t)(rnd64() % 3) : (int32_t)(rnd64() % 5),
                                         (uint32_t)lens[i]};
    for (size_t i = 0; i < nns; i++)
        h->neg_spans[i] = (pt_hist_span){i ? (int32_t)(rnd64() % 3) : -(int32_t)(rnd64() % 5),
                                         (uint32_t)lens[nps + i]};
    for (size_t i = 0; i < nc; i++)
        h->custom_values[i] = i == 0 && rnd64() % 3 == 0 ? -INFINITY : (double)i * 0.25 - 1;
    if (is_float) {
        h->count_float = hc_any_float(0);
        h->zero_count_float = custom ? 0 : hc_any_float(1);
        for (size_t i = 0; i < np; i++)
            h->pos_counts[i] = hc_any_float(1);
        for (size_t i = 0; i < nn; i++)
            h->neg_counts[i] = hc_any_float(1);
        return;
    }
    uint64_t total = h->zero_count_int = custom ? 0 : rnd64() % 5;
    int64_t prev = 0;
    for (size_t i = 0; i < np + nn; i++) {
        if (i == np)
            prev = 0;
        int64_t c = (int64_t)(rnd64() % 1000);
        (i < np ? h->pos_deltas : h->neg_deltas)[i < np ? i : i - np] = c - prev;
        prev = c;
        total += (uint64_t)c;
    }
    h->count_int = total + (isnan(h->sum) ? rnd64() % 3 : 0);
}

/* The staleness marker Prometheus sends for a histogram series that went away. */
static void hc_gen_stale(pt_histogram *h, int is_float, int64_t t)
{
    h->is_float = (uint8_t)is_float;
    if (pt_histogram_reserve(h, 0, 0, 0, 0, 0) != 0)
        abort();
    *h = (pt_histogram){.t = t, .is_float = (uint8_t)is_float, .mem = h->mem,
                        .mem_cap = h->mem_cap, .sum = pt_bits_f64(PT_HIST_STALE_NAN)};
}

static pt_arena hc_a;
static pt_store *hc_st;

enum { HC_N = 400 };
static pt_histogram hc_want[HC_N];
static int64_t hc_t0 = 1700000000000;

/* One 1.0 series "hist" holding hc_want[lo, hi) as histograms and nf float samples. */
static pt_slice hc_body_v1(size_t lo, size_t hi, const char *name, size_t nf, int64_t ft0)
{
    Prometheus__WriteRequest *wr = pt_arena_alloc(&hc_a, sizeof(*wr));
    prometheus__write_request__init(wr);
    Prometheus__TimeSeries *ts = ws_series_v1(&hc_a, name, "t");
    ts->n_histograms = hi - lo;
    ts->histograms = pt_arena_alloc(&hc_a, (hi - lo + 1) * sizeof(void *));
    for (size_t i = lo; i < hi; i++)
        ts->histograms[i - lo] = pt_histpb_from(&hc_a, &hc_want[i]);
    ts->n_samples = nf;
    ts->samples = pt_arena_alloc(&hc_a, (nf + 1) * sizeof(void *));
    for (size_t i = 0; i < nf; i++) {
        Prometheus__Sample *s = pt_arena_alloc(&hc_a, sizeof(*s));
        prometheus__sample__init(s);
        s->timestamp = ft0 + (int64_t)i * 1000;
        s->value = (double)i + 0.5;
        ts->samples[i] = s;
    }
    Prometheus__TimeSeries **tsp = pt_arena_alloc(&hc_a, sizeof(*tsp));
    tsp[0] = ts;
    wr->timeseries = tsp;
    wr->n_timeseries = 1;
    size_t n = protobuf_c_message_get_packed_size(&wr->base);
    uint8_t *p = pt_arena_alloc(&hc_a, n + 1);
    protobuf_c_message_pack(&wr->base, p);
    return (pt_slice){p, n};
}

/* hc_a 2.0 request: symbols "", "__name__", name; one series of hc_want[lo, hi) (each Histogram
 * message has the same fields 1-16 in 1.0 and 2.0). */
static pt_slice hc_body_v2(size_t lo, size_t hi, const char *name)
{
    size_t cap = 256;
    for (size_t i = lo; i < hi; i++)
        cap += 16 + prometheus__histogram__get_packed_size(pt_histpb_from(&hc_a, &hc_want[i]));
    uint8_t *series = pt_arena_alloc(&hc_a, cap), *q = series;
    static const uint8_t refs[] = {1, 2};
    q = ws_put_len(q, 1 << 3 | 2, refs, 2);
    for (size_t i = lo; i < hi; i++) {
        Prometheus__Histogram *m = pt_histpb_from(&hc_a, &hc_want[i]);
        size_t n = prometheus__histogram__get_packed_size(m);
        uint8_t *hb = pt_arena_alloc(&hc_a, n + 1);
        prometheus__histogram__pack(m, hb);
        q = ws_put_len(q, 3 << 3 | 2, hb, n);
    }
    uint8_t *body = pt_arena_alloc(&hc_a, cap + 64), *p = body;
    p = ws_put_len(p, 4 << 3 | 2, (const uint8_t *)"", 0);
    p = ws_put_len(p, 4 << 3 | 2, (const uint8_t *)"__name__", 8);
    p = ws_put_len(p, 4 << 3 | 2, (const uint8_t *)name, strlen(name));
    p = ws_put_len(p, 5 << 3 | 2, series, (size_t)(q - series));
    return (pt_slice){body, (size_t)(p - body)};
}

static int hc_write(pt_slice body, int version, pt_write_result *res)
{
    return ws_write(hc_st, &hc_a, body, version, res);
}

static Prometheus__ReadRequest *hc_read_req(const char *name)
{
    tmatch m[] = {{0, "__name__", name}};
    return mk_read(&hc_a, 0, hc_t0 + 300000000, m, 1);
}

/* Compares the histograms of a series read back with hc_want[lo, hi); diag on the first
 * difference. */
static int hc_same(Prometheus__Histogram *const *got, size_t n, size_t lo, size_t hi)
{
    if (n != hi - lo) {
        diag("%zu histograms read, %zu written", n, hi - lo);
        return 0;
    }
    pt_histogram h = PT_HISTOGRAM_INIT;
    int good = 1;
    for (size_t i = 0; i < n && good; i++) {
        if (pt_histpb_to(got[i], &h) != 0 || !pt_histogram_equal(&h, &hc_want[lo + i]) ||
            h.t != hc_want[lo + i].t) {
            diag("histogram %zu differs (kind %d schema %d; got t %lld count %llu sum %g, "
                 "hc_want t %lld count %llu sum %g)", lo + i, hc_want[lo + i].is_float,
                 hc_want[lo + i].schema, (long long)h.t, (unsigned long long)h.count_int, h.sum,
                 (long long)hc_want[lo + i].t, (unsigned long long)hc_want[lo + i].count_int,
                 hc_want[lo + i].sum);
            good = 0;
        }
    }
    pt_histogram_free(&h);
    return good;
}

/* Reads series name as structs and as SAMPLES bytes; checks the bytes are protobuf-c's,
 * unpacks them and checks both against hc_want[lo, hi) and nf floats. */
static void hc_check_read(const char *name, size_t lo, size_t hi, size_t nf, const char *what)
{
    Prometheus__ReadResponse resp;
    char msg[256];
    int rv = store_read(hc_st, hc_read_req(name), &hc_a, NULL, &resp, msg, sizeof(msg));
    ok(rv == 0 && resp.n_results == 1 && resp.results[0]->n_timeseries == 1, "%s: read", what);
    if (rv != 0 || resp.results[0]->n_timeseries != 1)
        return;
    Prometheus__TimeSeries *ts = resp.results[0]->timeseries[0];
    ok(hc_same(ts->histograms, ts->n_histograms, lo, hi) && ts->n_samples == nf,
       "%s: every histogram field bit-exact, %zu floats beside them", what, nf);

    Prometheus__ReadResponse *u = ws_samples_check(hc_st, hc_read_req(name), &hc_a, &resp, what);
    ok(u && u->n_results == 1 && u->results[0]->n_timeseries == 1 &&
           hc_same(u->results[0]->timeseries[0]->histograms,
                      u->results[0]->timeseries[0]->n_histograms, lo, hi),
       "%s: SAMPLES bytes unpacked by protobuf-c: every field bit-exact", what);
    if (u)
        prometheus__read_response__free_unpacked(u, NULL);
}

/* Reads series name as STREAMED_XOR_CHUNKS frames, decodes every chunk (XOR with
 * pt_xor_decode, histogram chunks with base/hchunk as Prometheus' iterator reads them) and
 * compares with hc_want[lo, hi) and the nf floats of hc_body_v1 (ft0 + i s, value i + 0.5). */
static void hc_check_stream(const char *name, size_t lo, size_t hi, size_t nf, int64_t ft0,
                         const char *what)
{
    Prometheus__ReadResponse resp;
    char msg[256];
    pt_slice body;
    if (store_read(hc_st, hc_read_req(name), &hc_a, NULL, &resp, msg, sizeof(msg)) != 0 ||
        stream_frames(&resp, &hc_a, &body) != 0) {
        ok(0, "%s: streamed read", what);
        return;
    }
    size_t nh = lo, fi = 0, nchunks = 0, nhchunks = 0, frames = 0;
    int good = 1, order = 1, bounds = 1;
    int64_t last_max = INT64_MIN;
    pt_histogram got = PT_HISTOGRAM_INIT;
    int64_t *t = malloc(65536 * sizeof(*t));
    double *v = malloc(65536 * sizeof(*v));
    for (size_t off = 0; off < body.n && good;) {
        uint64_t len = 0;
        size_t k = 0;
        for (int sh = 0; off + k < body.n && sh < 64; sh += 7) {
            len |= (uint64_t)(body.p[off + k] & 0x7f) << sh;
            if (!(body.p[off + k++] & 0x80))
                break;
        }
        const uint8_t *m = body.p + off + k + 4;
        if (off + k + 4 + len > body.n || pt_get_be32(m - 4) != pt_crc32c(m, len)) {
            good = 0;
            break;
        }
        off += k + 4 + len;
        frames++;
        Prometheus__ChunkedReadResponse *cr = prometheus__chunked_read_response__unpack(NULL, len, m);
        if (!cr || cr->n_chunked_series != 1) {
            good = 0;
            break;
        }
        Prometheus__ChunkedSeries *cs = cr->chunked_series[0];
        for (size_t c = 0; c < cs->n_chunks && good; c++) {
            Prometheus__Chunk *ch = cs->chunks[c];
            nchunks++;
            order &= ch->min_time_ms > last_max;
            last_max = ch->max_time_ms;
            if (ch->type == PROMETHEUS__CHUNK__ENCODING__XOR) {
                long n = pt_xor_decode((pt_slice){ch->data.data, ch->data.len}, t, v, 65536);
                bounds &= n > 0 && n <= 120 && t[0] == ch->min_time_ms && t[n - 1] == ch->max_time_ms;
                for (long i = 0; i < n && good; i++, fi++)
                    good = fi < nf && t[i] == ft0 + (int64_t)fi * 1000 && v[i] == (double)fi + 0.5;
                continue;
            }
            nhchunks++;
            pt_hchunk_dec d;
            if (pt_hchunk_dec_init(&d, (int)ch->type, ch->data.data, ch->data.len, -1) != 0) {
                good = 0;
                break;
            }
            int64_t first = INT64_MIN, tl = 0;
            size_t n = 0;
            int r;
            while ((r = pt_hchunk_dec_next(&d, &got)) == 1 && good) {
                if (first == INT64_MIN)
                    first = got.t;
                tl = got.t;
                n++;
                /* hc_a chunk keeps reset hints only as its header (Prometheus' reading). */
                got.reset_hint = nh < hi ? hc_want[nh].reset_hint : 0;
                good = nh < hi && pt_histogram_equal(&got, &hc_want[nh]) && got.t == hc_want[nh].t &&
                       (int)ch->type == (hc_want[nh].is_float ? PT_HCHUNK_FLOAT_HISTOGRAM
                                                           : PT_HCHUNK_HISTOGRAM);
                if (!good)
                    diag("histogram %zu differs in a chunk", nh);
                nh++;
            }
            good &= r == 0;
            bounds &= n > 0 && n <= 120 && first == ch->min_time_ms && tl == ch->max_time_ms;
            pt_hchunk_dec_free(&d);
        }
        prometheus__chunked_read_response__free_unpacked(cr, NULL);
    }
    ok(good && nh == hi && fi == nf,
       "%s: %zu frames, %zu chunks (%zu histogram chunks) decode to every sample written",
       what, frames, nchunks, nhchunks);
    ok(order && bounds, "%s: chunks in time order, at most 120 samples, min/max times exact", what);
    free(t);
    free(v);
    pt_histogram_free(&got);
}

/* Runs every case on be (its tables empty of these series); flush, when not NULL, moves
 * what was written into the backend's long-term form. */
__attribute__((unused)) static void pt_hist_conformance(pt_backend *be, int (*flush)(void *),
                                                        void *flush_ud, const char *name)
{
    diag("histogram conformance on %s", name);
    pt_store st = {.index_bucket_ms = 86400000, .max_series = 1000, .max_samples = 100000};
    if (pt_store_open(&st, be, &(pt_store_caches){0}) != 0)
        BAIL_OUT("out of memory for the store's caches");
    hc_st = &st;
    pt_arena_init(&hc_a, 0, 0);
    /* Four kinds in turn, every schema, stale markers of both kinds among them. */
    for (size_t i = 0; i < HC_N; i++) {
        int64_t t = hc_t0 + (int64_t)i * 15000;
        if (i % 37 == 36)
            hc_gen_stale(&hc_want[i], (int)(i / 37) & 1, t);
        else
            hc_gen(&hc_want[i], (int)(i % 4), t);
    }
    size_t kinds[4] = {0};
    for (size_t i = 0; i < HC_N; i++) {
        char why[256];
        if (pt_histogram_validate(&hc_want[i], why, sizeof(why)) != 0)
            BAIL_OUT("generated an invalid histogram %zu: %s", i, why);
        kinds[(hc_want[i].is_float ? 1 : 0) | (hc_want[i].schema == PT_HIST_SCHEMA_CUSTOM ? 2 : 0)]++;
    }
    diag("integer %zu, float %zu, integer custom %zu, float custom %zu", kinds[0], kinds[1],
         kinds[2], kinds[3]);

    /* 1.0: histograms and floats in one series (floats 0.5 s after each histogram). */
    pt_write_result res;
    int wrv = hc_write(hc_body_v1(0, 200, "hist_v1", 20, hc_t0 + 500), 1, &res);
    ok(wrv == 0 &&
           res.histograms_written == 200 && res.samples_written == 20 &&
           res.samples_rejected == 0,
       "1.0: 200 histograms and 20 floats of one series stored (%zu, %zu)",
       res.histograms_written, res.samples_written);
    hc_check_read("hist_v1", 0, 200, 20, "1.0, first read");
    hc_check_stream("hist_v1", 0, 200, 20, hc_t0 + 500, "1.0, first read, streamed");

    /* 2.0 */
    wrv = hc_write(hc_body_v2(200, HC_N, "hist_v2"), 2, &res);
    ok(wrv == 0 && res.histograms_written == HC_N - 200 &&
           res.samples_written == 0 && res.samples_rejected == 0,
       "2.0: %d histograms stored (%zu)", HC_N - 200, res.histograms_written);
    hc_check_read("hist_v2", 200, HC_N, 0, "2.0, first read");

    if (flush)
        ok(flush(flush_ud) == 0, "flushed");
    hc_check_read("hist_v1", 0, 200, 20, "1.0, read again (after a flush if any)");
    hc_check_read("hist_v2", 200, HC_N, 0, "2.0, read again (after a flush if any)");
    hc_check_stream("hist_v1", 0, 200, 20, hc_t0 + 500, "1.0, read again, streamed");
    hc_check_stream("hist_v2", 200, HC_N, 0, 0, "2.0, read again, streamed");

    /* An invalid histogram: a 400 naming the problem, the valid rest stored. */
    hc_gen(&hc_want[1], 0, hc_t0);
    hc_want[1].count_int += 1; /* the buckets no longer add up */
    ok(hc_write(hc_body_v1(0, 2, "hist_bad", 0, 0), 1, &res) == 0 && res.histograms_written == 1 &&
           res.samples_rejected == 1 && strstr(res.msg, "invalid native histogram") &&
           strstr(res.msg, "observations found in buckets"),
       "an invalid histogram is refused, naming the problem: %s", res.msg);
    hc_check_read("hist_bad", 0, 1, 0, "the valid one of a partly invalid request");

    /* Last write wins per cell: a float over a histogram, then a histogram over it. */
    if (pt_histogram_copy(&hc_want[0], &hc_want[5]) != 0)
        BAIL_OUT("copy");
    const pt_histogram one = hc_want[0];
    ok(hc_write(hc_body_v1(0, 1, "hist_lww", 0, 0), 1, &res) == 0 && res.histograms_written == 1,
       "a histogram at t");
    ok(hc_write(hc_body_v1(0, 0, "hist_lww", 1, one.t), 1, &res) == 0 && res.samples_written == 1,
       "a float at the same t");
    hc_check_read("hist_lww", 0, 0, 1, "the float replaced the histogram");
    ok(hc_write(hc_body_v1(0, 1, "hist_lww", 0, 0), 1, &res) == 0, "the histogram again");
    hc_check_read("hist_lww", 0, 1, 0, "the histogram replaced the float");

    /* hc_a steady series (one layout, counts growing): chunks of many samples, cut at 120. */
    for (size_t i = 0; i < 300; i++) {
        pt_histogram *h = &hc_want[i];
        *h = (pt_histogram){.mem = h->mem, .mem_cap = h->mem_cap, .is_float = i >= 150};
        if (pt_histogram_reserve(h, 0, 1, 0, 3, 0) != 0)
            BAIL_OUT("reserve");
        h->t = hc_t0 + 200000000 + (int64_t)i * 15000;
        h->schema = 2;
        h->reset_hint = i == 0 || i == 150 ? PT_HIST_RESET_UNKNOWN : PT_HIST_RESET_NO;
        h->zero_threshold = pt_bits_f64(0x3800000000000000ULL);
        h->sum = (double)i * 1.25;
        h->pos_spans[0] = (pt_hist_span){-1, 3};
        if (h->is_float) {
            for (int b = 0; b < 3; b++)
                h->pos_counts[b] = (double)(i + (size_t)b);
            h->count_float = (double)(3 * i + 3);
            h->zero_count_float = 0;
        } else {
            h->pos_deltas[0] = (int64_t)i, h->pos_deltas[1] = 1, h->pos_deltas[2] = 1;
            h->count_int = 3 * i + 3;
            h->zero_count_int = 0;
        }
    }
    wrv = hc_write(hc_body_v1(0, 300, "hist_steady", 0, 0), 1, &res);
    ok(wrv == 0 && res.histograms_written == 300, "a steady series of 300 histograms");
    hc_check_read("hist_steady", 0, 300, 0, "steady");
    hc_check_stream("hist_steady", 0, 300, 0, 0, "steady, streamed");

    for (size_t i = 0; i < HC_N; i++)
        pt_histogram_free(&hc_want[i]);
    pt_store_close(&st);
    pt_arena_free(&hc_a);
}

#endif
