/* fmt 5 chunks of the embedded store (backends/embedded/chunk.c): runs of native histogram
 * cells kept as Prometheus histogram chunks (base/hchunk.c) with a hints byte, what those
 * cannot hold as cells between them. Random series round-trip byte for byte (every reset
 * hint, layout changes, counter resets, integer and float, custom buckets, staleness
 * markers, floats and odd values between); corrupt chunks are refused; a store holding
 * fmt 2 chunks of histograms (written before fmt 5) reads, and its merges turn them into
 * fmt 5. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bytes.h"
#include "chunk_helpers.h"
#include "error.h"
#include "histogram.h"
#include "rnd.h"
#include "tap.h"

static uint64_t rnd(uint64_t n)
{
    return rnd64() % n;
}


/* ---- a generated series: a layout kept for a while, buckets growing ---- */

typedef struct gen {
    int is_float, schema;
    uint8_t hint;
    double zt, sum;
    size_t nps, nns, np, nn, nc;
    pt_hist_span ps[4], ns[4];
    double cv[40];
    uint64_t b[48], z;
} gen;
static gen g;

static void new_layout(void)
{
    int custom = rnd(6) == 0;
    g.schema = custom ? PT_HIST_SCHEMA_CUSTOM : (int)rnd(13) - 4;
    g.nps = 1 + rnd(3);
    g.nns = custom ? 0 : rnd(3);
    g.np = g.nn = 0;
    int64_t idx = -1;
    for (size_t i = 0; i < g.nps; i++) {
        uint32_t len = 1 + (uint32_t)rnd(6);
        int32_t off = custom ? (int32_t)rnd(2) + (i == 0) : i ? (int32_t)rnd(3) : (int32_t)rnd(9) - 4;
        g.ps[i] = (pt_hist_span){off, len};
        g.np += len;
        idx += off + len;
    }
    for (size_t i = 0; i < g.nns; i++) {
        uint32_t len = 1 + (uint32_t)rnd(6);
        g.ns[i] = (pt_hist_span){i ? (int32_t)rnd(3) : -(int32_t)rnd(5), len};
        g.nn += len;
    }
    g.nc = custom ? (size_t)idx + rnd(3) : 0;
    for (size_t i = 0; i < g.nc; i++)
        g.cv[i] = i == 0 && rnd(3) == 0 ? -INFINITY : (double)i * 0.25 - 1;
    static const uint64_t zts[] = {0, 0x3800000000000000ULL, 0x3f50624dd2f1a9fcULL,
                                   0x8000000000000000ULL};
    g.zt = custom ? 0 : pt_bits_f64(zts[rnd(4)]);
    for (size_t i = 0; i < g.np + g.nn; i++)
        g.b[i] = rnd(5);
    g.z = custom ? 0 : rnd(3);
}

/* The next histogram of the series at t into h. */
static void next_hist(pt_histogram *h, int64_t t)
{
    for (size_t i = 0; i < g.np + g.nn; i++)
        g.b[i] += rnd(4);
    if (g.schema != PT_HIST_SCHEMA_CUSTOM)
        g.z += rnd(2);
    g.sum += (double)rnd(100000) / 100;
    h->is_float = (uint8_t)g.is_float;
    if (pt_histogram_reserve(h, g.nns, g.nps, g.nn, g.np, g.nc) != 0)
        abort();
    h->t = t;
    h->schema = g.schema;
    h->reset_hint = rnd(20) ? g.hint : (uint8_t)rnd(4);
    h->zero_threshold = g.zt;
    static const uint64_t odd_sums[] = {0x7ff8000000000123ULL, 0xfff0000000000777ULL,
                                        0x8000000000000000ULL, 0x7ff0000000000000ULL, 1};
    h->sum = rnd(30) ? g.sum : pt_bits_f64(odd_sums[rnd(5)]);
    memcpy(h->pos_spans, g.ps, g.nps * sizeof(pt_hist_span)); /* nps >= 1 */
    if (g.nns)
        memcpy(h->neg_spans, g.ns, g.nns * sizeof(pt_hist_span));
    if (g.nc)
        memcpy(h->custom_values, g.cv, g.nc * sizeof(double));
    uint64_t total = g.z;
    for (size_t i = 0; i < g.np + g.nn; i++) {
        total += g.b[i];
        int neg = i >= g.np;
        size_t j = neg ? i - g.np : i;
        if (g.is_float) {
            (neg ? h->neg_counts : h->pos_counts)[j] = (double)g.b[i] * 0.5;
        } else {
            uint64_t prev = j == 0 ? 0 : g.b[i - 1];
            (neg ? h->neg_deltas : h->pos_deltas)[j] = (int64_t)(g.b[i] - prev);
        }
    }
    if (g.is_float) {
        h->count_float = (double)total * 0.5;
        h->zero_count_float = (double)g.z * 0.5;
    } else {
        h->count_int = total;
        h->zero_count_int = g.z;
    }
}

/* ---- cells ---- */

enum { MAXN = 1500 };
static pt_vcell cells[MAXN];
static size_t offs[MAXN];
static pt_buf vals = PT_BUF_INIT(0);
static pt_histogram h;
static pt_vcells dec;
static pt_buf enc = PT_BUF_INIT(0);

static void add_bytes(size_t i, uint32_t q, const uint8_t *v, size_t n)
{
    cells[i].q = q;
    cells[i].vlen = (uint32_t)n;
    offs[i] = vals.len;
    if (pt_buf_append(&vals, v, n) != 0)
        abort();
}

static void add_hist(size_t i, uint32_t q)
{
    uint8_t *p = pt_buf_room(&vals, pt_histogram_cell_size(&h));
    if (!p)
        abort();
    size_t n = pt_histogram_cell_encode(&h, p);
    cells[i].q = q;
    cells[i].vlen = (uint32_t)n;
    offs[i] = vals.len;
    pt_buf_commit(&vals, n);
}

/* Points the cells at their values once vals stops moving. */
static void fix_cells(size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const uint8_t *v = vals.p + offs[i];
        if (cells[i].vlen <= 8)
            memcpy(cells[i].v.in, v, cells[i].vlen);
        else
            cells[i].v.p = v;
    }
}

/* n cells of a series; odd != 0 mixes in what a histogram chunk cannot hold (floats,
 * staleness markers with other fields, bytes that are no histogram cell, a cell not in
 * its canonical form) and layout, kind and counter changes. */
static void make_series(size_t n, int odd)
{
    pt_buf_reset(&vals);
    g.is_float = (int)rnd(2);
    g.hint = (uint8_t)(rnd(3) ? PT_HIST_RESET_NO : rnd(4));
    g.sum = 0;
    new_layout();
    uint32_t q = (uint32_t)rnd(100000);
    for (size_t i = 0; i < n; i++) {
        q += 1 + (uint32_t)(rnd(50) ? 15000 + rnd(3) : rnd(1u << 24));
        unsigned r = odd ? (unsigned)rnd(100) : 100;
        if (r < 3) {
            uint8_t f[8];
            pt_put_be64(f, rnd64());
            add_bytes(i, q, f, 8);
            continue;
        }
        if (r < 7) {
            h.is_float = (uint8_t)g.is_float;
            if (pt_histogram_reserve(&h, 0, 0, 0, 0, 0) != 0)
                abort();
            h.schema = 0;
            h.zero_threshold = h.count_float = h.zero_count_float = 0;
            h.count_int = h.zero_count_int = 0;
            h.reset_hint = (uint8_t)rnd(4);
            h.sum = pt_bits_f64(PT_HIST_STALE_NAN);
            if (r >= 5) /* what Prometheus drops, and a chunk cannot hold */
                h.count_int = 1, h.count_float = 1, h.schema = 2;
            add_hist(i, q);
            continue;
        }
        if (r < 8) {
            uint8_t junk[40];
            size_t len = rnd(40);
            if (len == 8)
                len = 9;
            for (size_t j = 0; j < len; j++)
                junk[j] = (uint8_t)rnd64();
            add_bytes(i, q, junk, len);
            continue;
        }
        if (r < 10)
            new_layout();
        else if (r < 12)
            g.is_float = !g.is_float;
        else if (r < 14)
            for (size_t j = 0; j < g.np + g.nn; j++)
                g.b[j] = rnd(2);
        else if (!odd && rnd(200) == 0)
            new_layout();
        next_hist(&h, q);
        if (r == 14) {
            /* The schema's varint one byte longer than needed: decodes, is not canonical. */
            uint8_t *p = pt_buf_room(&vals, pt_histogram_cell_size(&h) + 1);
            if (!p)
                abort();
            size_t len = pt_histogram_cell_encode(&h, p + 1);
            p[0] = p[1];
            p[1] = p[2];
            p[2] = (uint8_t)(p[3] | 0x80);
            p[3] = 0;
            cells[i] = (pt_vcell){.q = q, .vlen = (uint32_t)len + 1};
            offs[i] = vals.len;
            pt_buf_commit(&vals, len + 1);
            continue;
        }
        add_hist(i, q);
    }
    fix_cells(n);
}

static int same_cells(const pt_vcell *a, const pt_vcell *b, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (a[i].q != b[i].q || a[i].vlen != b[i].vlen ||
            memcmp(pt_vcell_val(&a[i]), pt_vcell_val(&b[i]), a[i].vlen) != 0) {
            diag("%s: cell %zu of %zu differs (q %u/%u, len %u/%u)", what, i, n, a[i].q, b[i].q,
                 a[i].vlen, b[i].vlen);
            return 0;
        }
    return 1;
}

/* Encodes cells[0..n) and decodes an exact-size copy: 1 when every cell comes back, the
 * chunk's fmt in *fmt. With owned set (a chunk of histogram parts only), the values must
 * outlive the chunk's bytes. */
static int round_trip(size_t n, int *fmt, int owned, const char *what)
{
    pt_buf_reset(&enc);
    if (pt_cellchunk_encode(&enc, cells, n) != 0 || enc.len < 5) {
        diag("%s: encode failed", what);
        return 0;
    }
    *fmt = enc.p[0];
    uint8_t *copy = malloc(enc.len);
    memcpy(copy, enc.p, enc.len);
    pt_cellchunk c;
    uint32_t last = 0;
    pt_vcells_reset(&dec);
    int good = pt_cellchunk_parse(copy, enc.len, &c) == 0 && c.count == n &&
               pt_cellchunk_cells(&c, &dec) == 0 && dec.n == n &&
               pt_cellchunk_last(&c, &last) == 0 && last == cells[n - 1].q;
    if (!good)
        diag("%s: does not decode (fmt %d, %zu of %zu cells)", what, *fmt, dec.n, n);
    good = good && same_cells(cells, dec.c, n, what);
    /* Decoded histograms are the pt_vcells' own: still good once the chunk's bytes are gone
     * (the cells of a raw part point into them, as fmt 2's do). */
    memset(copy, 0xa5, enc.len);
    if (owned && *fmt == 5)
        good = good && same_cells(cells, dec.c, n, what);
    free(copy);
    return good;
}

static void test_round_trips(void)
{
    int bad = 0, not5 = 0, odd5 = 0;
    size_t total = 0;
    for (int iter = 0; iter < 600 && bad < 5; iter++) {
        int odd = iter % 2;
        size_t n = iter % 10 == 0 ? 1 + rnd(3) : 1 + rnd(iter % 3 ? 300 : 1100);
        make_series(n, odd);
        char what[64];
        snprintf(what, sizeof(what), "series %d (%zu cells%s)", iter, n, odd ? ", mixed" : "");
        int fmt = 0;
        if (!round_trip(n, &fmt, !odd, what))
            bad++;
        if (!odd && n >= 10 && fmt != 5) {
            diag("%s: fmt %d", what, fmt);
            not5++;
        }
        odd5 += odd && fmt == 5;
        total += n;
    }
    ok(!bad, "300 random histogram series and 300 mixed with what no histogram chunk holds "
             "(%zu cells) round-trip byte for byte, every reset hint kept", total);
    ok(!not5, "a series of 10 or more histogram cells alone is written as fmt 5");
    ok(odd5 > 200, "mixed series are fmt 5 too (%d of 300), the odd cells as cells", odd5);

    /* Two chunks into one pt_vcells: the second appends, both keep their values. */
    make_series(200, 0);
    pt_buf e1 = PT_BUF_INIT(0), e2 = PT_BUF_INIT(0);
    pt_cellchunk c1, c2;
    pt_vcells_reset(&dec);
    int two = pt_cellchunk_encode(&e1, cells, 100) == 0 &&
              pt_cellchunk_encode(&e2, cells + 100, 100) == 0 &&
              pt_cellchunk_parse(e1.p, e1.len, &c1) == 0 &&
              pt_cellchunk_parse(e2.p, e2.len, &c2) == 0 && pt_cellchunk_cells(&c1, &dec) == 0 &&
              pt_cellchunk_cells(&c2, &dec) == 0 && dec.n == 200 &&
              same_cells(cells, dec.c, 200, "two chunks");
    ok(two, "two fmt 5 chunks decoded into one pt_vcells: every value kept");
    pt_buf_free(&e1);
    pt_buf_free(&e2);

    /* Compactness: 1,000 steady samples of 20 integer buckets, schema 3. */
    pt_buf_reset(&vals);
    g = (gen){.schema = 3, .hint = PT_HIST_RESET_NO, .nps = 1, .np = 20,
                        .ps = {{-10, 20}}, .zt = pt_bits_f64(0x3800000000000000ULL)};
    for (size_t i = 0; i < 1000; i++) {
        next_hist(&h, 0);
        h.reset_hint = PT_HIST_RESET_NO;
        h.sum = g.sum;
        add_hist(i, (uint32_t)(15000 * i));
    }
    fix_cells(1000);
    int fmt = 0;
    int rt = round_trip(1000, &fmt, 1, "steady");
    size_t fmt2 = 5 + 8 * 1000;
    for (size_t i = 0; i < 1000; i++)
        fmt2 += cells[i].vlen;
    ok(rt && fmt == 5 && enc.len * 2 < fmt2,
       "1,000 steady 20-bucket samples: fmt 5, %.1f bytes a sample (fmt 2: %.1f)",
       (double)enc.len / 1000, (double)fmt2 / 1000);
}

static int refused(const uint8_t *p, size_t n)
{
    return chunk_refused(p, n, &dec);
}

/* Either refused or count cells with increasing qualifiers: never a crash or a lie. */
static int sane(const uint8_t *p, size_t n)
{
    uint8_t *copy = malloc(n);
    memcpy(copy, p, n);
    pt_cellchunk c;
    uint32_t last;
    pt_vcells_reset(&dec);
    int good = 1;
    if (pt_cellchunk_parse(copy, n, &c) == 0) {
        int rv = pt_cellchunk_cells(&c, &dec);
        if (rv == 0) {
            good = dec.n == c.count && pt_cellchunk_last(&c, &last) == 0 &&
                   last == dec.c[dec.n - 1].q;
            for (size_t i = 1; good && i < dec.n; i++)
                good = dec.c[i].q > dec.c[i - 1].q;
        } else {
            good = rv == PT_EINTERNAL && dec.n == 0;
        }
    }
    free(copy);
    return good;
}

static void test_corrupt(void)
{
    int fmt = 0;
    do
        make_series(400, 1);
    while (!round_trip(400, &fmt, 0, "corrupt base") || fmt != 5);
    size_t len = enc.len;
    uint8_t *good = malloc(len + 1);
    memcpy(good, enc.p, len);
    chunk_cuts_refused(good, len, &dec, "fmt 5");

    int flips = 1;
    for (int i = 0; i < 3000; i++) {
        size_t at = 5 + rnd(len - 5);
        uint8_t bit = (uint8_t)(1u << rnd(8));
        good[at] ^= bit;
        flips &= sane(good, len);
        good[at] ^= bit;
    }
    ok(flips, "3,000 single bit flips: each refused or decoding to increasing cells");

    /* The header's count against the parts', a part of an unknown kind. */
    uint8_t *bad = malloc(len);
    memcpy(bad, good, len);
    pt_put_be32(bad + 1, pt_get_be32(good + 1) + 1);
    ok(refused(bad, len), "a count the parts do not add up to is refused");
    memcpy(bad, good, len);
    bad[5] = 7;
    ok(refused(bad, len), "a part of kind 7 is refused");
    free(bad);
    free(good);
}

/* ---- a store written before fmt 5: fmt 2 chunks of histogram cells ---- */

enum { OLD_N = 400 };
static pt_buf model[OLD_N]; /* the value at qualifier 1000 * i */

static const char old_row[] = "old_hist,job=x,@0000000000000";

static int check_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    check *c = ud;
    (void)row;
    uint32_t q = qual.n == 4 ? pt_get_be32(qual.p) : 1;
    size_t i = q / 1000;
    if (q % 1000 || i >= OLD_N || value.n != model[i].len ||
        memcmp(value.p, model[i].p, value.n) != 0)
        c->bad++;
    c->cells++;
    return 0;
}

static int store_agrees(pt_backend *b, size_t want)
{
    return row_agrees(b, old_row, sizeof(old_row) - 1, check_cell, want);
}

/* Writes cells[from..to) (qualifiers 1000 * i) as one fmt 2 chunk, as flushes did. */
static void put_fmt2(pt_backend *b, size_t from, size_t to)
{
    pt_buf v = PT_BUF_INIT(0);
    uint8_t hdr[5] = {2};
    pt_put_be32(hdr + 1, (uint32_t)(to - from));
    pt_buf_append(&v, hdr, 5);
    for (size_t i = from; i < to; i++) {
        uint8_t q[4];
        pt_put_be32(q, (uint32_t)i * 1000);
        pt_buf_append(&v, q, 4);
    }
    for (size_t i = from; i < to; i++) {
        uint8_t l[4];
        pt_put_be32(l, cells[i].vlen);
        pt_buf_append(&v, l, 4);
    }
    for (size_t i = from; i < to; i++)
        pt_buf_append(&v, pt_vcell_val(&cells[i]), cells[i].vlen);
    put_chunk(b, old_row, sizeof(old_row) - 1, (uint32_t)from * 1000, v.p, v.len);
    pt_buf_free(&v);
}

static void test_old_store(void)
{
    char dir[] = "/tmp/t_histchunk.XXXXXX", path[64];
    pt_backend b;
    if (open_temp(&b, dir, path, sizeof(path)) != 0)
        return;
    make_series(OLD_N, 0);
    for (size_t i = 0; i < OLD_N; i++) {
        cells[i].q = (uint32_t)i * 1000;
        pt_buf_reset(&model[i]);
        pt_buf_append(&model[i], pt_vcell_val(&cells[i]), cells[i].vlen);
    }
    put_fmt2(&b, 0, 250);
    put_fmt2(&b, 250, 300);
    pt_backend_close(&b);
    ok(open_at(&b, path) == 0, "a store with fmt 2 chunks of histograms opens");
    ok(chunk_census_of(&b).fmts == 1u << 2, "it holds fmt 2 chunks only");
    ok(store_agrees(&b, 300), "its 300 histogram cells read back byte for byte");

    /* Rewrite two cells inside the old chunks and append the rest: the flush merges them
     * with the head's cells and writes fmt 5. */
    pt_mutation m[OLD_N];
    uint8_t quals[OLD_N][4];
    size_t k = 0;
    for (size_t i = 0; i < OLD_N; i++) {
        if (i != 10 && i != 260 && i < 300)
            continue;
        if (i < 300) { /* a new value there: the next cell's */
            pt_buf_reset(&model[i]);
            pt_buf_append(&model[i], pt_vcell_val(&cells[i + 1]), cells[i + 1].vlen);
        }
        pt_put_be32(quals[k], (uint32_t)i * 1000);
        m[k] = (pt_mutation){PT_TABLE_POINTS, {(const uint8_t *)old_row, sizeof(old_row) - 1},
                             {quals[k], 4}, {model[i].p, model[i].len}, (int64_t)i * 1000000};
        k++;
    }
    ok(pt_backend_write(&b, m, k) == 0, "write over and after the old chunks");
    ok(store_agrees(&b, OLD_N), "the head's cells win over the old chunks");
    ok(pt_embedded_flush(&b) == 0, "flush");
    ok(store_agrees(&b, OLD_N), "after the flush every cell reads back byte for byte");
    ok(chunk_census_of(&b).fmts == 1u << 5, "the merged chunks are fmt 5");
    pt_backend_close(&b);
    ok(open_at(&b, path) == 0 && store_agrees(&b, OLD_N), "and again after a reopen");
    pt_backend_close(&b);
    remove_temp(dir);
    for (size_t i = 0; i < OLD_N; i++)
        pt_buf_free(&model[i]);
}

int main(void)
{
    test_round_trips();
    test_corrupt();
    test_old_store();
    pt_vcells_free(&dec);
    pt_buf_free(&enc);
    pt_buf_free(&vals);
    pt_histogram_free(&h);
    return done_testing();
}
