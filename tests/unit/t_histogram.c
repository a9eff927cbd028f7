/* Native histograms (base/histogram.h, base/hchunk.h): validation, the cell value, and
 * Prometheus' histogram chunk encodings, over every schema, integer and float, reset hints,
 * adversarial floats, irregular timestamps, layout changes, corrupt and cut-short input. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bytes.h"
#include "error.h"
#include "hchunk.h"
#include "histogram.h"
#include "rnd.h"
#include "tap.h"


/* Floats a codec must keep bit for bit. */
static double odd_float(void)
{
    static const uint64_t odd[] = {
        0x7ff0000000000002ULL, /* staleness marker */
        0x7ff8000000000001ULL, /* quiet NaN with a payload */
        0xfff0000000000001ULL, /* negative signalling NaN */
        0x8000000000000000ULL, /* -0 */
        0x7ff0000000000000ULL, /* +Inf */
        0xfff0000000000000ULL, /* -Inf */
        0x0000000000000001ULL, /* smallest denormal */
        0x000fffffffffffffULL, /* largest denormal */
        0x3ff0000000000000ULL, /* 1 */
    };
    if (rnd64() % 3 == 0)
        return pt_bits_f64(odd[rnd64() % (sizeof(odd) / sizeof(odd[0]))]);
    if (rnd64() % 2)
        return pt_bits_f64(rnd64());
    return (double)(rnd64() % 100000) / 8;
}

static double count_float(void)
{
    return rnd64() % 4 == 0 ? odd_float() : (double)(rnd64() % 1000) / 4;
}

/* A random layout: schema, threshold, spans, custom bounds (bucket values zero). */
static void gen_layout(pt_histogram *h, int is_float)
{
    *h = (pt_histogram){.mem = h->mem, .mem_cap = h->mem_cap, .is_float = (uint8_t)is_float};
    int custom = rnd64() % 5 == 0;
    h->schema = custom ? PT_HIST_SCHEMA_CUSTOM : (int32_t)(rnd64() % 13) - 4;
    size_t np = rnd64() % 4, nn = custom ? 0 : rnd64() % 4;
    pt_hist_span ps[4], ns[4];
    size_t pb = 0, nb = 0;
    uint64_t reach = 0;
    for (size_t i = 0; i < np; i++) {
        int32_t off = custom || i ? (int32_t)(rnd64() % 4) : (int32_t)(rnd64() % 41) - 20;
        if (rnd64() % 50 == 0)
            off = i || custom ? INT32_MAX / 2 : INT32_MIN;
        ps[i] = (pt_hist_span){off, (uint32_t)(rnd64() % 5)};
        pb += ps[i].length;
        reach += ps[i].length + (uint64_t)(off < 0 ? 0 : off);
    }
    for (size_t i = 0; i < nn; i++) {
        ns[i] = (pt_hist_span){i ? (int32_t)(rnd64() % 4) : (int32_t)(rnd64() % 41) - 20,
                               (uint32_t)(rnd64() % 5)};
        nb += ns[i].length;
    }
    size_t nc = 0;
    if (custom) {
        if (reach > 1000) { /* keep custom bounds few */
            np = pb = 0;
            reach = 0;
        }
        nc = reach + rnd64() % 3;
    }
    if (pt_histogram_reserve(h, nn, np, nb, pb, nc) != 0)
        abort();
    if (np)
        memcpy(h->pos_spans, ps, np * sizeof(ps[0]));
    if (nn)
        memcpy(h->neg_spans, ns, nn * sizeof(ns[0]));
    double b = rnd64() % 2 ? -1.5 : 0;
    for (size_t i = 0; i < nc; i++) {
        b += rnd64() % 3 == 0 ? (double)(rnd64() % 1000) / 1000 + 0.001
                              : pt_bits_f64(rnd64() >> 12) + 0.25;
        h->custom_values[i] = b;
    }
    if (!custom) {
        switch (rnd64() % 4) {
        case 0: h->zero_threshold = 0; break;
        case 1: h->zero_threshold = ldexp(1, -128); break;
        case 2: h->zero_threshold = odd_float(); break;
        default: h->zero_threshold = ldexp(1, (int)(rnd64() % 300) - 260); break;
        }
    }
}

/* Fills counts; with prev (same layout) they mostly grow from it. */
static void gen_values(pt_histogram *h, const pt_histogram *prev)
{
    int grow = prev && rnd64() % 10;
    h->sum = odd_float();
    if (pt_histogram_is_stale(h)) /* a stale sum comes with nothing else (make_stale) */
        h->sum = pt_bits_f64(0x7ff0000000000003ULL);
    h->reset_hint = (uint8_t)(rnd64() % 8 == 0 ? rnd64() % 4 : PT_HIST_RESET_UNKNOWN);
    if (h->is_float) {
        h->count_float = grow ? prev->count_float + (double)(rnd64() % 5) : count_float();
        h->zero_count_float = h->schema == PT_HIST_SCHEMA_CUSTOM ? 0 : count_float();
        for (size_t i = 0; i < h->n_pos; i++)
            h->pos_counts[i] = grow ? prev->pos_counts[i] + (double)(rnd64() % 3) : count_float();
        for (size_t i = 0; i < h->n_neg; i++)
            h->neg_counts[i] = grow ? prev->neg_counts[i] : count_float();
        return;
    }
    uint64_t total = 0;
    int64_t last = 0, plast = 0;
    for (size_t i = 0; i < h->n_pos; i++) {
        int64_t c = grow ? plast + prev->pos_deltas[i] + (int64_t)(rnd64() % 3)
                         : (int64_t)(rnd64() % (rnd64() % 2 ? 10 : 1000000));
        if (grow)
            plast += prev->pos_deltas[i];
        h->pos_deltas[i] = c - last;
        last = c;
        total += (uint64_t)c;
    }
    last = plast = 0;
    for (size_t i = 0; i < h->n_neg; i++) {
        int64_t c = grow ? plast + prev->neg_deltas[i] : (int64_t)(rnd64() % 50);
        if (grow)
            plast += prev->neg_deltas[i];
        h->neg_deltas[i] = c - last;
        last = c;
        total += (uint64_t)c;
    }
    h->zero_count_int = h->schema == PT_HIST_SCHEMA_CUSTOM ? 0
                        : grow                             ? prev->zero_count_int + rnd64() % 2
                                                           : rnd64() % 100;
    h->count_int = total + h->zero_count_int;
    if (rnd64() % 40 == 0)
        h->count_int = rnd64(); /* any 64-bit count survives */
}

static void make_stale(pt_histogram *h)
{
    int f = h->is_float;
    pt_histogram_reserve(h, 0, 0, 0, 0, 0);
    void *mem = h->mem;
    size_t cap = h->mem_cap;
    int64_t t = h->t;
    uint8_t hint = h->reset_hint;
    *h = (pt_histogram){.mem = mem,
                        .mem_cap = cap,
                        .is_float = (uint8_t)f,
                        .t = t,
                        .reset_hint = hint,
                        .sum = pt_bits_f64(PT_HIST_STALE_NAN)};
}

/* ---- validation ---- */

static void sample_int(pt_histogram *h)
{
    pt_histogram_free(h);
    h->schema = 0;
    h->zero_threshold = ldexp(1, -128);
    pt_histogram_reserve(h, 1, 2, 1, 4, 0);
    h->pos_spans[0] = (pt_hist_span){0, 2};
    h->pos_spans[1] = (pt_hist_span){1, 2};
    h->neg_spans[0] = (pt_hist_span){-3, 1};
    int64_t d[] = {1, 1, -1, 0};
    memcpy(h->pos_deltas, d, sizeof(d));
    h->neg_deltas[0] = 2;
    h->zero_count_int = 1;
    h->count_int = 5 + 2 + 1;
    h->sum = 18.4;
}

static int why_has(pt_histogram *h, const char *want)
{
    char why[256];
    int rv = pt_histogram_validate(h, why, sizeof(why));
    if (rv != PT_EBADREQ || !strstr(why, want)) {
        printf("#   rv %d why '%s' (want '%s')\n", rv, why, want);
        return 0;
    }
    return 1;
}

static void test_validate(void)
{
    pt_histogram h = PT_HISTOGRAM_INIT;
    char why[256];
    sample_int(&h);
    ok(pt_histogram_validate(&h, why, sizeof(why)) == 0, "valid integer histogram");
    h.count_int = 9;
    ok(why_has(&h, "8 observations found in buckets, but the Count field is 9"),
       "count must equal the buckets' sum");
    h.sum = NAN;
    ok(pt_histogram_validate(&h, why, sizeof(why)) == 0, "NaN sum: count may exceed buckets");
    h.count_int = 7;
    ok(why_has(&h, "should be at least"), "NaN sum: count below buckets refused");
    sample_int(&h);
    h.pos_deltas[2] = -3;
    ok(why_has(&h, "positive side: bucket number 3 has observation count of -1"),
       "negative bucket count refused");
    sample_int(&h);
    h.pos_spans[1].length = 3;
    ok(why_has(&h, "positive side: spans need 5 buckets, have 4 buckets"),
       "spans and buckets must agree");
    sample_int(&h);
    h.pos_spans[1].offset = -1;
    ok(why_has(&h, "span number 2 with offset -1"), "a later span's offset must not be < 0");
    sample_int(&h);
    h.schema = 9;
    ok(why_has(&h, "invalid histogram schema 9"), "schema 9 refused");
    h.schema = -5;
    ok(why_has(&h, "invalid histogram schema -5"), "schema -5 refused");
    h.schema = 8;
    ok(pt_histogram_validate(&h, why, sizeof(why)) == 0, "schema 8 valid");
    h.schema = -4;
    ok(pt_histogram_validate(&h, why, sizeof(why)) == 0, "schema -4 valid");
    h.reset_hint = 4;
    ok(why_has(&h, "reset_hint 4"), "unknown reset hint refused");
    sample_int(&h);
    h.n_pos = PT_HIST_MAX_ELEMS; /* only the counts are looked at first */
    ok(why_has(&h, "more than 2097152 spans, buckets and custom bounds"),
       "more elements than a cell decoder takes refused");
    sample_int(&h);
    h.pos_deltas[0] = INT64_MAX;
    h.pos_deltas[1] = 1;
    ok(why_has(&h, "overflows"), "a bucket past 2^63 refused");

    /* Custom buckets. */
    pt_histogram_free(&h);
    h.schema = PT_HIST_SCHEMA_CUSTOM;
    pt_histogram_reserve(&h, 0, 1, 0, 3, 2);
    h.pos_spans[0] = (pt_hist_span){0, 3};
    h.pos_deltas[0] = 1;
    h.custom_values[0] = 0.5;
    h.custom_values[1] = 1;
    h.count_int = 3;
    ok(pt_histogram_validate(&h, why, sizeof(why)) == 0, "valid custom-bucket histogram");
    h.custom_values[1] = 0.5;
    ok(why_has(&h, "custom buckets must be in increasing order"), "bounds must increase");
    h.custom_values[1] = INFINITY;
    ok(why_has(&h, "+Inf bound must not be explicitly defined"), "explicit +Inf bound refused");
    h.custom_values[1] = NAN;
    ok(why_has(&h, "is NaN"), "NaN bound refused");
    h.custom_values[1] = 1;
    h.pos_spans[0].offset = 1;
    ok(why_has(&h, "insufficient to cover total span length of 4"), "too few bounds refused");
    h.pos_spans[0].offset = 0;
    h.zero_count_int = 1;
    h.count_int = 4;
    ok(why_has(&h, "must have zero count of 0"), "custom: zero count refused");
    h.zero_count_int = 0;
    h.count_int = 3;
    h.zero_threshold = 0.1;
    ok(why_has(&h, "must have zero threshold of 0"), "custom: zero threshold refused");
    h.zero_threshold = 0;
    pt_histogram_reserve(&h, 1, 1, 0, 3, 2);
    h.pos_spans[0] = (pt_hist_span){0, 3};
    h.pos_deltas[0] = 1;
    h.custom_values[0] = 0.5;
    h.custom_values[1] = 1;
    ok(why_has(&h, "must not have negative spans"), "custom: negative spans refused");

    /* Float histograms: counts >= 0, count not compared with the buckets. */
    pt_histogram_free(&h);
    h.is_float = 1;
    pt_histogram_reserve(&h, 0, 1, 0, 2, 0);
    h.pos_spans[0] = (pt_hist_span){5, 2};
    h.pos_counts[0] = 1.5;
    h.pos_counts[1] = 2.5;
    h.count_float = 1;
    ok(pt_histogram_validate(&h, why, sizeof(why)) == 0, "valid float histogram");
    h.pos_counts[1] = -0.5;
    ok(why_has(&h, "bucket number 2 has observation count of -0.5"), "negative float count");
    h.pos_counts[1] = 1;
    pt_histogram_reserve(&h, 0, 1, 0, 2, 1);
    h.pos_spans[0] = (pt_hist_span){5, 2};
    ok(why_has(&h, "exponential schema must not have custom bounds"),
       "custom bounds with an exponential schema refused");
    pt_histogram_free(&h);
}

/* ---- the cell ---- */

/* The worked example of docs/storage-format.md, "Native histograms": schema 0, zero
 * threshold 2^-128, positive spans {0,2} {1,2}, deltas 1 1 -1 0, zero count 1, count 6,
 * sum 4. */
static void example_int(pt_histogram *h)
{
    pt_histogram_free(h);
    h->zero_threshold = ldexp(1, -128);
    pt_histogram_reserve(h, 0, 2, 0, 4, 0);
    h->pos_spans[0] = (pt_hist_span){0, 2};
    h->pos_spans[1] = (pt_hist_span){1, 2};
    int64_t d[] = {1, 1, -1, 0};
    memcpy(h->pos_deltas, d, sizeof(d));
    h->zero_count_int = 1;
    h->count_int = 6;
    h->sum = 4;
}

static void test_cells(void)
{
    pt_histogram h = PT_HISTOGRAM_INIT, back = PT_HISTOGRAM_INIT;
    uint8_t buf[1 << 16];
    int good = 1, notfloat = 1, refused = 1, sized = 1;
    int schemas[14] = {0};
    for (int round = 0; round < 3000; round++) {
        gen_layout(&h, round & 1);
        gen_values(&h, NULL);
        h.reset_hint = (uint8_t)(round % 4);
        if (round % 17 == 0)
            make_stale(&h);
        schemas[h.schema == PT_HIST_SCHEMA_CUSTOM ? 13 : h.schema + 4]++;
        size_t n = pt_histogram_cell_size(&h);
        if (n > sizeof(buf))
            continue;
        size_t w = pt_histogram_cell_encode(&h, buf);
        sized &= w == n;
        notfloat &= pt_histogram_cell_is(n);
        back.t = h.t;
        if (pt_histogram_cell_decode(buf, n, &back) != 0 || !pt_histogram_equal(&h, &back)) {
            good = 0;
            diag("round %d: cell does not round-trip", round);
        }
        /* Every cut-short cell and one with a byte more is refused, never read past. */
        for (size_t k = 0; k < n && refused; k += 1 + k / 8) {
            uint8_t *cut = malloc(k ? k : 1);
            memcpy(cut, buf, k);
            refused &= pt_histogram_cell_decode(cut, k, &back) == PT_EINTERNAL;
            free(cut);
        }
        buf[n] = 0;
        refused &= pt_histogram_cell_decode(buf, n + 1, &back) == PT_EINTERNAL;
        /* A flipped byte decodes to something or is refused, within bounds. */
        uint8_t *flip = malloc(n);
        memcpy(flip, buf, n);
        flip[rnd64() % n] ^= (uint8_t)(1 + rnd64() % 255);
        int rv = pt_histogram_cell_decode(flip, n, &back);
        refused &= rv == 0 || rv == PT_EINTERNAL;
        free(flip);
    }
    ok(good, "cells round-trip every field bit for bit (3000 random, int and float)");
    ok(sized, "cell_size is what cell_encode writes");
    ok(notfloat, "no histogram cell is 8 bytes long (told apart from a float by its length)");
    ok(refused, "cut-short, over-long and corrupted cells are refused, not over-read");
    int all = 1;
    for (int i = 0; i < 14; i++)
        all &= schemas[i] > 0;
    ok(all, "every schema -4..8 and -53 was covered");
    /* The worked example of docs/storage-format.md, "Native histograms". */
    static const uint8_t example[] = {0x01, 0x00, 0x00, 0x40, 0x10, 0,    0,    0,    0,
                                      0,    0,    0x37, 0xf0, 0,    0,    0,    0,    0,
                                      0,    0x06, 0x01, 0x00, 0x02, 0x00, 0x02, 0x02, 0x02,
                                      0x00, 0x04, 0x02, 0x02, 0x01, 0x00, 0x00};
    example_int(&h);
    ok(pt_histogram_cell_size(&h) == sizeof(example) &&
           pt_histogram_cell_encode(&h, buf) == sizeof(example) &&
           memcmp(buf, example, sizeof(example)) == 0,
       "the storage format's worked example cell, byte for byte");
    static const uint8_t bad[][3] = {{0, 0, 0}, {3, 0, 0}, {1, 4, 0}};
    for (size_t i = 0; i < 3; i++)
        ok(pt_histogram_cell_decode(bad[i], 3, &back) == PT_EINTERNAL, "bad kind/hint %zu", i);
    pt_histogram_free(&h);
    pt_histogram_free(&back);
}

/* ---- chunks ---- */

/* Hand-derived from Prometheus' layout (tsdb/chunkenc histogram.go appendHistogram,
 * histogram_meta.go writeHistogramChunkLayout and putZeroThreshold, varbit.go): t = 1000,
 * schema 0, zero threshold 2^-128 (byte 116), positive spans {0,2} {1,2}, deltas
 * 1 1 -1 0, zero count 1, count 6, sum 4. */
static void test_known_answer(void)
{
    static const uint8_t want[] = {0x00, 0x01, 0x00, 0x74, 0x4a, 0x49, 0x45, 0xe3, 0xe8, 0xb4, 0x50,
                                   0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x23, 0x1b, 0x80};
    pt_histogram h = PT_HISTOGRAM_INIT, back = PT_HISTOGRAM_INIT;
    example_int(&h);
    h.t = 1000;
    pt_hchunk_enc e;
    pt_hchunk_enc_init(&e, 1 << 20);
    ok(pt_hchunk_enc_add(&e, &h) == 0, "known answer: added");
    pt_slice c = pt_hchunk_enc_bytes(&e);
    int same = c.n == sizeof(want) && memcmp(c.p, want, c.n) == 0;
    if (!same)
        for (size_t i = 0; i < c.n; i++)
            printf("%s%02x", i ? " " : "#   got: ", c.p[i]);
    if (!same)
        printf("\n");
    ok(same, "known answer: one integer sample, bytes as Prometheus lays them out");
    pt_hchunk_dec dd;
    pt_hchunk_dec_init(&dd, PT_HCHUNK_HISTOGRAM, want, sizeof(want), -1);
    ok(pt_hchunk_dec_next(&dd, &back) == 1 && pt_histogram_equal(&h, &back) &&
           pt_hchunk_dec_next(&dd, &back) == 0,
       "known answer: decodes to the sample, then ends");
    pt_hchunk_dec_free(&dd);
    pt_hchunk_enc_free(&e);
    pt_histogram_free(&h);
    pt_histogram_free(&back);
}

/* A chunk a real Prometheus 2.42 built (tests/data/README.md): read with Prometheus'
 * hints it gives 100 samples; encoding them again gives back its bytes exactly. */
static void test_prometheus_chunk(void)
{
    static uint8_t want[8192];
    FILE *f = fopen(PT_TESTDATA "/prom-2.42-histogram-chunk.bin", "rb");
    size_t n = f ? fread(want, 1, sizeof(want), f) : 0;
    if (f)
        fclose(f);
    ok(n == 4038, "golden Prometheus histogram chunk read (%zu bytes)", n);
    pt_hchunk_dec d;
    pt_hchunk_enc e;
    pt_histogram h = PT_HISTOGRAM_INIT;
    char why[200];
    int count = 0, added = 1, valid = 1, hints = 1;
    int64_t first = 0, last = 0;
    pt_hchunk_enc_init(&e, 1 << 20);
    pt_hchunk_dec_init(&d, PT_HCHUNK_HISTOGRAM, want, n, -1);
    while (pt_hchunk_dec_next(&d, &h) == 1) {
        if (count == 0)
            first = h.t;
        last = h.t;
        hints &= h.reset_hint == (count ? PT_HIST_RESET_NO : PT_HIST_RESET_UNKNOWN);
        valid &= pt_histogram_validate(&h, why, sizeof(why)) == 0 && h.schema == 3 &&
                 h.n_pos == 7 && h.n_neg == 2;
        added &= pt_hchunk_enc_add(&e, &h) == 0;
        count++;
    }
    ok(count == 100 && first == 1795492860000LL && last == first + 99 * 15000 + 13,
       "golden chunk: 100 samples from T0 (got %d)", count);
    ok(valid && hints, "golden chunk: valid schema-3 histograms; unknown, then not-a-reset");
    pt_slice c = pt_hchunk_enc_bytes(&e);
    ok(added && c.n == n && memcmp(c.p, want, n) == 0,
       "golden chunk: promtable's encoder writes Prometheus' bytes");
    pt_hchunk_dec_free(&d);
    pt_hchunk_enc_free(&e);
    pt_histogram_free(&h);
}

/* Decodes chunk c (hints exact) and compares with want[0, n). */
static int chunk_matches(pt_slice c, int enc, int hints, const pt_histogram *want, size_t n)
{
    pt_hchunk_dec d;
    pt_histogram h = PT_HISTOGRAM_INIT;
    int good = pt_hchunk_dec_init(&d, enc, c.p, c.n, hints) == 0;
    for (size_t i = 0; good && i < n; i++) {
        good = pt_hchunk_dec_next(&d, &h) == 1 && pt_histogram_equal(&h, &want[i]);
        if (!good)
            diag("sample %zu of %zu differs", i, n);
    }
    good = good && pt_hchunk_dec_next(&d, &h) == 0;
    pt_hchunk_dec_free(&d);
    pt_histogram_free(&h);
    return good;
}

/* Every prefix of a chunk and some flipped bytes: errors, never over-reads. */
static int chunk_refuses_damage(pt_slice c, int enc)
{
    int good = 1;
    pt_histogram h = PT_HISTOGRAM_INIT;
    for (size_t k = 0; k < c.n; k += 1 + k / 16) {
        uint8_t *cut = malloc(k ? k : 1);
        memcpy(cut, c.p, k);
        pt_hchunk_dec d;
        int rv = pt_hchunk_dec_init(&d, enc, cut, k, -1);
        if (rv == 0) {
            while ((rv = pt_hchunk_dec_next(&d, &h)) == 1)
                ;
        }
        if (!(rv == PT_EINTERNAL || (k >= 3 && c.p[0] == 0 && c.p[1] == 0))) {
            diag("prefix %zu of %zu: %d", k, c.n, rv);
            good = 0;
        }
        pt_hchunk_dec_free(&d);
        free(cut);
    }
    for (int i = 0; i < 8 && c.n; i++) {
        uint8_t *flip = malloc(c.n);
        memcpy(flip, c.p, c.n);
        flip[rnd64() % c.n] ^= (uint8_t)(1 + rnd64() % 255);
        pt_hchunk_dec d;
        int rv = pt_hchunk_dec_init(&d, enc, flip, c.n, -1);
        if (rv == 0) {
            while ((rv = pt_hchunk_dec_next(&d, &h)) == 1)
                ;
        }
        if (!(rv == 0 || rv == PT_EINTERNAL)) {
            diag("flip: %d", rv);
            good = 0;
        }
        pt_hchunk_dec_free(&d);
        free(flip);
    }
    pt_histogram_free(&h);
    return good;
}

/* Encodes a series of n samples into chunks of at most max_samples; checks each chunk. */
static void run_series(const pt_histogram *s, size_t n, size_t max_bytes, int *good, int *damage,
                       size_t *chunks, uint8_t *headers)
{
    pt_hchunk_enc e;
    pt_hchunk_enc_init(&e, max_bytes);
    size_t first = 0;
    for (size_t i = 0; i <= n; i++) {
        int rv = i < n ? pt_hchunk_enc_add(&e, &s[i]) : PT_HCHUNK_CUT;
        if (rv == 0)
            continue;
        if (rv != PT_HCHUNK_CUT) {
            diag("add %zu: %d", i, rv);
            *good = 0;
            break;
        }
        pt_slice c = pt_hchunk_enc_bytes(&e);
        if (c.n) {
            *headers |= (uint8_t)(1 << (c.p[2] >> 6));
            if (!chunk_matches(c, pt_hchunk_enc_encoding(&e), pt_hchunk_enc_hints(&e), s + first,
                               i - first)) {
                diag("chunk %zu (samples %zu..%zu) does not round-trip", *chunks, first, i);
                *good = 0;
            }
            if (*chunks % 7 == 0)
                *damage &= chunk_refuses_damage(c, pt_hchunk_enc_encoding(&e));
            (*chunks)++;
        }
        pt_hchunk_enc_next(&e);
        first = i;
        if (i < n && pt_hchunk_enc_add(&e, &s[i]) != 0) {
            diag("sample %zu does not fit an empty chunk", i);
            *good = 0;
            break;
        }
    }
    pt_hchunk_enc_free(&e);
}

/* A random series: mostly growing counters on one layout, with resets, layout changes,
 * stale markers, hint changes and timestamps at every delta-of-delta size. */
static void gen_series(pt_histogram *s, size_t n, int is_float)
{
    int64_t t = (int64_t)(rnd64() % 2000000000000ULL), step = 15000;
    for (size_t i = 0; i < n; i++) {
        int fresh = i == 0 || rnd64() % 60 == 0 || pt_histogram_is_stale(&s[i - 1]);
        if (fresh) {
            gen_layout(&s[i], is_float);
            gen_values(&s[i], NULL);
        } else {
            pt_histogram_copy(&s[i], &s[i - 1]);
            gen_values(&s[i], &s[i - 1]);
        }
        if (!fresh && rnd64() % 4)
            s[i].reset_hint = s[i - 1].reset_hint == PT_HIST_RESET_GAUGE ? PT_HIST_RESET_GAUGE
                                                                         : PT_HIST_RESET_UNKNOWN;
        switch (rnd64() % 8) {
        case 0: step += (int64_t)(rnd64() % 20000) - 10000; break;
        case 1: step = (int64_t)(rnd64() % 100000000); break;
        case 2: step = -(int64_t)(rnd64() % 1000); break; /* out of order: still encodes */
        default: break;
        }
        t += step;
        s[i].t = rnd64() % 200 == 0 ? (int64_t)rnd64() : t;
        if (rnd64() % 50 == 0)
            make_stale(&s[i]);
    }
}

static void test_chunks(void)
{
    enum { N = 1000 };
    pt_histogram *s = calloc(N, sizeof(*s));
    int good = 1, damage = 1;
    size_t chunks = 0, samples = 0;
    uint8_t headers = 0;
    for (int round = 0; round < 60; round++) {
        size_t n = round % 3 == 0 ? 1 : round % 3 == 1 ? N : 1 + rnd64() % 120;
        gen_series(s, n, round & 1);
        run_series(s, n, round % 5 == 0 ? 600 : 1 << 20, &good, &damage, &chunks, &headers);
        samples += n;
    }
    ok(good, "chunks round-trip every field and hint (%zu samples in %zu chunks)", samples, chunks);
    ok(damage, "cut-short and corrupted chunks are refused, never over-read");
    ok(headers == 0xf, "all four counter-reset headers were written (seen %#x)", headers);

    /* One layout, growing counts, one hint: 1000 samples in one chunk, integer and float. */
    for (int f = 0; f < 2; f++) {
        size_t before = chunks;
        gen_layout(&s[0], f);
        gen_values(&s[0], NULL);
        s[0].t = 1700000000000LL;
        s[0].reset_hint = PT_HIST_RESET_UNKNOWN;
        if (pt_histogram_is_stale(&s[0]))
            s[0].sum = 1;
        for (size_t i = 1; i < N; i++) {
            pt_histogram *h = &s[i];
            pt_histogram_copy(h, &s[i - 1]);
            h->t += 15000 + (int64_t)(rnd64() % 3) - 1;
            h->sum = odd_float();
            if (pt_histogram_is_stale(h))
                h->sum = 1;
            if (f) {
                h->count_float += (double)(rnd64() % 3);
                for (size_t k = 0; k < h->n_pos; k++)
                    h->pos_counts[k] += (double)(rnd64() % 3);
            } else {
                h->count_int += rnd64() % 3;
                if (h->n_pos)
                    h->pos_deltas[0] += (int64_t)(rnd64() % 3); /* every bucket grows */
            }
        }
        run_series(s, N, 1 << 24, &good, &damage, &chunks, &headers);
        ok(good && chunks == before + 1, "%s: 1000 samples in one chunk round-trip",
           f ? "float" : "integer");
    }
    for (size_t i = 0; i < N; i++)
        pt_histogram_free(&s[i]);
    free(s);
}

/* The cut rules and headers, one case each. */
/* h does not fit e's chunk (the add says cut, a check saying cut); in the next chunk it
 * goes in, and that chunk's header is hdr (a check saying header). */
static void cut_then(pt_hchunk_enc *e, const pt_histogram *h, int hdr, const char *cut,
                     const char *header)
{
    ok(pt_hchunk_enc_add(e, h) == PT_HCHUNK_CUT, "%s", cut);
    pt_hchunk_enc_next(e);
    ok(pt_hchunk_enc_add(e, h) == 0 && pt_hchunk_enc_bytes(e).p[2] == hdr, "%s", header);
}

static void test_cut_rules(void)
{
    pt_histogram a = PT_HISTOGRAM_INIT, b = PT_HISTOGRAM_INIT, got = PT_HISTOGRAM_INIT;
    pt_hchunk_enc e;
    pt_hchunk_enc_init(&e, 1 << 20);
    sample_int(&a);
    a.t = 1000;
    ok(pt_hchunk_enc_add(&e, &a) == 0, "cut rules: first sample");
    ok(pt_hchunk_enc_bytes(&e).p[2] == PT_HCHUNK_HDR_UNKNOWN, "first chunk: header unknown");
    pt_histogram_copy(&b, &a);
    b.t = 2000;
    b.count_int++;
    b.pos_deltas[0]++;
    b.pos_deltas[1]--; /* bucket 0 + 1, bucket 1 unchanged */
    ok(pt_hchunk_enc_add(&e, &b) == 0, "growing counter: same chunk");
    pt_histogram_copy(&a, &b);
    a.t = 3000;
    a.pos_deltas[0]--;
    a.pos_deltas[1]++;
    a.count_int--;
    cut_then(&e, &a, PT_HCHUNK_HDR_RESET, "a bucket went down: cut",
             "the new chunk says counter reset");
    pt_histogram_copy(&b, &a);
    b.t = 4000;
    b.schema = 3;
    cut_then(&e, &b, PT_HCHUNK_HDR_UNKNOWN, "schema change: cut",
             "after a layout change the header says unknown");
    b.t = 5000;
    b.reset_hint = PT_HIST_RESET_NO;
    ok(pt_hchunk_enc_add(&e, &b) == 0, "hint NO after UNKNOWN: same chunk (2nd sample)");
    b.t = 6000;
    b.reset_hint = PT_HIST_RESET_UNKNOWN;
    cut_then(&e, &b, PT_HCHUNK_HDR_NOT_RESET, "another later hint: cut",
             "a cut without reset or layout change says not a reset");
    b.t = 7000;
    b.reset_hint = PT_HIST_RESET_GAUGE;
    cut_then(&e, &b, PT_HCHUNK_HDR_GAUGE, "a gauge sample after counters: cut",
             "gauge chunk header");
    pt_histogram_copy(&a, &b);
    a.t = 8000;
    a.count_int = 0; /* a gauge may go down */
    a.zero_count_int = 0;
    memset(a.pos_deltas, 0, 8 * a.n_pos);
    memset(a.neg_deltas, 0, 8 * a.n_neg);
    ok(pt_hchunk_enc_add(&e, &a) == 0, "a gauge going down stays in its chunk");
    a.is_float = 1;
    ok(pt_hchunk_enc_add(&e, &a) == PT_HCHUNK_CUT, "a float sample: cut");
    pt_histogram_copy(&a, &b);
    a.t = 9000;
    a.sum = pt_bits_f64(PT_HIST_STALE_NAN);
    ok(pt_hchunk_enc_add(&e, &a) == PT_EUNSUPPORTED, "a stale marker with buckets: refused");
    make_stale(&a);
    ok(pt_hchunk_enc_add(&e, &a) == 0, "a bare stale marker appends");
    pt_histogram_copy(&got, &b);
    got.n_custom = 1;
    got.custom_values = &got.sum;
    ok(pt_hchunk_enc_add(&e, &got) == PT_EUNSUPPORTED, "custom bounds, exponential: refused");
    got.n_custom = 0;
    got.custom_values = NULL;
    got.pos_spans[0].length++;
    ok(pt_hchunk_enc_add(&e, &got) == PT_EUNSUPPORTED, "spans not counting buckets: refused");
    b.t = 10000;
    ok(pt_hchunk_enc_add(&e, &b) == PT_HCHUNK_CUT, "a sample after a stale marker: cut");
    pt_slice c = pt_hchunk_enc_bytes(&e);
    pt_hchunk_dec d;
    pt_hchunk_dec_init(&d, PT_HCHUNK_HISTOGRAM, c.p, c.n, -1);
    int n = 0, hints = 1;
    while (pt_hchunk_dec_next(&d, &got) == 1) {
        hints &= got.reset_hint == PT_HIST_RESET_GAUGE || pt_histogram_is_stale(&got);
        n++;
    }
    ok(n == 3 && hints, "Prometheus' reading: a gauge chunk's samples are gauges");
    pt_hchunk_dec_free(&d);

    /* Prometheus' reading of a counter chunk: unknown first, then not a reset. */
    pt_hchunk_enc_next(&e);
    b.reset_hint = PT_HIST_RESET_UNKNOWN;
    sample_int(&b);
    for (int i = 0; i < 3; i++) {
        b.t = 20000 + i;
        pt_hchunk_enc_add(&e, &b);
    }
    c = pt_hchunk_enc_bytes(&e);
    pt_hchunk_dec_init(&d, PT_HCHUNK_HISTOGRAM, c.p, c.n, -1);
    int seq[3] = {-1, -1, -1};
    for (int i = 0; i < 3 && pt_hchunk_dec_next(&d, &got) == 1; i++)
        seq[i] = got.reset_hint;
    ok(seq[0] == PT_HIST_RESET_UNKNOWN && seq[1] == PT_HIST_RESET_NO && seq[2] == PT_HIST_RESET_NO,
       "Prometheus' reading: unknown, then not-a-reset");
    pt_hchunk_dec_free(&d);

    /* The byte ceiling: a small chunk cuts, a sample bigger than it is refused. */
    pt_hchunk_enc_free(&e);
    pt_hchunk_enc_init(&e, 64);
    ok(pt_hchunk_enc_add(&e, &b) == 0, "64-byte chunk: first sample fits");
    int cut = 0;
    for (int i = 0; i < 100 && !cut; i++) {
        b.t += 1 + i * 77;
        b.sum = pt_bits_f64(rnd64());
        cut = pt_hchunk_enc_add(&e, &b) == PT_HCHUNK_CUT;
    }
    ok(cut && pt_hchunk_enc_bytes(&e).n <= 64, "64-byte chunk: cut before passing its ceiling");
    pt_hchunk_enc_free(&e);
    pt_hchunk_enc_init(&e, 16);
    ok(pt_hchunk_enc_add(&e, &b) == PT_ETOOLARGE, "a sample bigger than the ceiling: refused");
    pt_hchunk_enc_free(&e);

    /* 65535 samples at most. */
    pt_hchunk_enc_init(&e, 1 << 24);
    make_stale(&b);
    int rv = 0;
    size_t i;
    for (i = 0; i < 70000 && (rv = pt_hchunk_enc_add(&e, &b)) == 0; i++)
        b.t += 15000;
    ok(rv == PT_HCHUNK_CUT && i == PT_HCHUNK_MAX_SAMPLES, "a chunk holds 65535 samples");
    pt_hchunk_enc_free(&e);
    static const uint8_t tiny[] = {0, 1};
    ok(pt_hchunk_dec_init(&d, PT_HCHUNK_HISTOGRAM, tiny, 2, -1) == PT_EINTERNAL &&
           pt_hchunk_dec_init(&d, 1, tiny, 2, -1) == PT_EINTERNAL,
       "a 2-byte chunk and the XOR encoding are refused");
    pt_histogram_free(&a);
    pt_histogram_free(&b);
    pt_histogram_free(&got);
}

/* Bytes per sample of a typical scraped histogram (schema 3, 20 buckets in one span, each
 * growing by 0-3 a scrape, 15 s apart): 120-sample chunks against one cell per sample. */
static void test_compactness(void)
{
    pt_histogram h = PT_HISTOGRAM_INIT;
    pt_hchunk_enc e;
    uint8_t cell[1024];
    size_t cells = 0;
    int64_t c[20] = {0};
    pt_histogram_reserve(&h, 0, 1, 0, 20, 0);
    h.schema = 3;
    h.zero_threshold = ldexp(1, -128);
    h.pos_spans[0] = (pt_hist_span){-10, 20};
    pt_hchunk_enc_init(&e, 1 << 20);
    int added = 1;
    double sum = 0;
    for (int i = 0; i < 120; i++) {
        h.t = 1700000000000LL + 15000 * i;
        int64_t last = 0;
        h.count_int = h.zero_count_int += rnd64() % 2;
        for (int k = 0; k < 20; k++) {
            c[k] += (int64_t)(rnd64() % 4);
            h.pos_deltas[k] = c[k] - last;
            last = c[k];
            h.count_int += (uint64_t)c[k];
        }
        sum += (double)(rnd64() % 10000) / 100;
        h.sum = sum;
        added &= pt_hchunk_enc_add(&e, &h) == 0;
        cells += pt_histogram_cell_encode(&h, cell);
    }
    size_t chunk = pt_hchunk_enc_bytes(&e).n;
    diag("a 20-bucket histogram scraped every 15 s: %.1f bytes/sample in a chunk, %.1f as cells",
         chunk / 120.0, cells / 120.0);
    ok(added && chunk * 2 < cells, "a chunk takes under half the cells' bytes");
    pt_hchunk_enc_free(&e);
    pt_histogram_free(&h);
}

int main(void)
{
    test_compactness();
    test_validate();
    test_cells();
    test_known_answer();
    test_prometheus_chunk();
    test_cut_rules();
    test_chunks();
    done_testing();
}
