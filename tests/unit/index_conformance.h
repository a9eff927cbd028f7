/*
 * The index over any backend (index format 2, docs/storage-format.md "Index rows"): the
 * same series written through two stores, one with full series references and one with
 * references cut to 2 bits (so that nearly every series shares its reference), must answer
 * every selector the same, and as a brute-force evaluation says. Covers every matcher type,
 * empty-value matchers, values holding the key separators and hex digits, a hashed (long)
 * series, and the format marker. The caller gives each store its own fresh tables.
 */
#ifndef PT_TEST_INDEX_CONFORMANCE_H
#define PT_TEST_INDEX_CONFORMANCE_H

#include "cardinality.h"
#include "metrics.h"
#include "rowkey.h"
#include "store_helpers.h"
#include "tap.h"

#define IX_T0 INT64_C(1700000000000)

/* Series of one query (or -1 on error), over two days around IX_T0. */
static long ix_count_once(pt_store *st, const tmatch *ms, size_t n)
{
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    char msg[512];
    Prometheus__ReadResponse resp;
    int rv = store_read(st, mk_read(&a, IX_T0 - 86400000, IX_T0 + 86400000, ms, n), &a, NULL,
                           &resp, msg, sizeof(msg));
    long c = rv ? -1 : (long)resp.results[0]->n_timeseries;
    if (rv)
        diag("read failed: %s", msg);
    pt_arena_free(&a);
    return c;
}

/* The same, asked twice: the second time the store has list hints from the first (when it
 * keeps them), and must answer the same (-2 when it does not). */
static long ix_count(pt_store *st, const tmatch *ms, size_t n)
{
    long first = ix_count_once(st, ms, n), second = ix_count_once(st, ms, n);
    return first == second ? first : -2;
}

typedef struct ix_refs {
    char last[PT_REF_HEX];
    int run, max_run, refs;
} ix_refs;

/* Series rows ("==" ref ",@"...; not the "==format" marker) counted per reference. */
static int ix_count_refs(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)qual, (void)value;
    ix_refs *c = ud;
    uint64_t ref;
    if (row.n < 2 + PT_REF_HEX || pt_ref_parse(row.p + 2, &ref) != 0)
        return 0;
    if (c->refs && memcmp(c->last, row.p + 2, PT_REF_HEX) == 0) {
        c->run++;
    } else {
        memcpy(c->last, row.p + 2, PT_REF_HEX);
        c->run = 1;
        c->refs++;
    }
    if (c->run > c->max_run)
        c->max_run = c->run;
    return 0;
}

typedef struct ix_lists {
    size_t rows, with_sid;
} ix_lists;

/* List rows, and those whose cell holds a sid after the mask: it must be the sid whose
 * hash the row's reference is. */
static int ix_count_lists(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)value;
    ix_lists *c = ud;
    uint64_t ref;
    if (row.n < PT_REF_HEX || pt_ref_parse(row.p + row.n - PT_REF_HEX, &ref) != 0)
        return PT_EINTERNAL;
    c->rows++;
    if (qual.n > 8 && pt_series_ref((pt_slice){qual.p + 8, qual.n - 8}, 0) == ref)
        c->with_sid++;
    return 0;
}

static int ix_match(const char *v, int type, const char *want)
{
    switch (type) {
    case 0: return strcmp(v, want) == 0;
    case 1: return strcmp(v, want) != 0;
    default: return -1; /* regexes: expected counts are given */
    }
}

/* A (name, count) the cardinality answer should hold; "a" or "a=b", malloc'd. */
typedef struct ix_item {
    char *name;
    uint64_t value;
} ix_item;

static void ix_add(ix_item *v, size_t *n, const char *a, const char *b, uint64_t add)
{
    size_t la = strlen(a), lb = b ? strlen(b) : 0;
    char *k = malloc(la + lb + 2);
    if (!k)
        BAIL_OUT("out of memory");
    memcpy(k, a, la);
    k[la] = '=';
    if (b)
        memcpy(k + la + 1, b, lb);
    k[b ? la + 1 + lb : la] = '\0';
    for (size_t i = 0; i < *n; i++)
        if (strcmp(v[i].name, k) == 0) {
            v[i].value += add;
            free(k);
            return;
        }
    v[(*n)++] = (ix_item){k, add};
}

static int ix_rank(const void *x, const void *y)
{
    const ix_item *a = x, *b = y;
    if (a->value != b->value)
        return a->value < b->value ? 1 : -1;
    return strcmp(a->name, b->name);
}

/* Whether t holds exactly want[0..n) in rank order (largest count first, then by name). */
static int ix_same(const pt_card_top *t, ix_item *want, size_t n)
{
    qsort(want, n, sizeof(*want), ix_rank);
    int same = t->n == n;
    for (size_t i = 0; i < n && same; i++)
        same = t->v[i].value == want[i].value && t->v[i].name.len == strlen(want[i].name) &&
               memcmp(t->v[i].name.p, want[i].name, t->v[i].name.len) == 0;
    for (size_t i = 0; i < n; i++)
        free(want[i].name);
    return same;
}

/* /api/v1/status/tsdb's figures for IX_T0's day against a count over the series written
 * (all on that day). exact_pairs 0: the pairs' series may be fewer (a store whose series
 * share references and masks counts them once). */
static void ix_cardinality(pt_store *st, const tseries *ts, int n, int exact_pairs,
                           const char *label)
{
    enum { MAX = 512 };
    static ix_item metrics[MAX], values[MAX], bytes[MAX], pairs[MAX];
    size_t nm = 0, nv = 0, nb = 0, np = 0;
    uint64_t npairs = 0;
    for (int s = 0; s < n; s++) {
        for (int l = 0; ts[s].labels[l]; l += 2) {
            const char *name = ts[s].labels[l], *value = ts[s].labels[l + 1];
            if (strcmp(name, "__name__") == 0)
                ix_add(metrics, &nm, value, NULL, 1);
            size_t before = np;
            ix_add(pairs, &np, name, value, 1);
            if (np > before) { /* a new value of the name */
                npairs++;
                ix_add(values, &nv, name, NULL, 1);
                ix_add(bytes, &nb, name, NULL, strlen(value));
            }
        }
    }
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    pt_cardinality c;
    int rv = pt_cardinality_count(st, &a, IX_T0, MAX, NULL, &c);
    ok(rv == 0 && c.series == (uint64_t)n && c.pairs == npairs,
       "%s: cardinality: %llu series, %llu label pairs (want %d, %llu)", label,
       (unsigned long long)c.series, (unsigned long long)c.pairs, n, (unsigned long long)npairs);
    ok(ix_same(&c.by_metric, metrics, nm), "%s: cardinality: series by metric name", label);
    ok(ix_same(&c.values_by_name, values, nv), "%s: cardinality: values by label name", label);
    ok(ix_same(&c.bytes_by_name, bytes, nb), "%s: cardinality: value bytes by label name", label);
    uint64_t got = 0, want = 0;
    for (size_t i = 0; i < c.by_pair.n; i++)
        got += c.by_pair.v[i].value;
    for (size_t i = 0; i < np; i++)
        want += pairs[i].value;
    if (exact_pairs)
        ok(ix_same(&c.by_pair, pairs, np), "%s: cardinality: series by label pair", label);
    else
        ok(c.by_pair.n == np && got <= want && got > 0,
           "%s: cardinality: every label pair, %llu of %llu pair series counted", label,
           (unsigned long long)got, (unsigned long long)want);
    if (!exact_pairs)
        for (size_t i = 0; i < np; i++)
            free(pairs[i].name);
    pt_cardinality_free(&c);
    pt_arena_free(&a);
}

static void pt_index_conformance(pt_backend *full_be, pt_backend *tiny_be, const char *label)
{
    pt_store full = {.index_bucket_ms = 86400000, .max_series = 1000, .max_samples = 100000};
    pt_store tiny = full;
    tiny.ref_bits = 2;
    const pt_store_caches caches = {.index_entries = 1 << 12, .series_bytes = 1 << 20,
                                    .list_bytes = 1 << 20, .hints = 1};
    if (pt_store_open(&full, full_be, &caches) != 0 || pt_store_open(&tiny, tiny_be, &caches) != 0)
        BAIL_OUT("out of memory for the stores' caches");
    char err[512] = "";
    ok(pt_store_check_index(&full, err, sizeof(err)) == 0 &&
           pt_store_check_index(&tiny, err, sizeof(err)) == 0,
       "%s: new stores get the format marker %s", label, err);

    static char big[4001];
    memset(big, 'q', 4000); /* a hashed sid: its labels live in the series row's cell */
    /* Values with the key separators, escapes, and text that looks like a reference. */
    static const char *const odd[] = {",", "=", "@", "\\", ",@1700000000000,", "0123456789abcdef",
                                      "==", "~a=b"};
    static const char *const modes[] = {"idle", "user", "sys"};
    enum { N = 48, ALL = N + 1 };
    tseries ts[ALL];
    char inst[N][8];
    for (int i = 0; i < N; i++) {
        snprintf(inst[i], sizeof(inst[i]), "i%d", i % 16);
        ts[i] = (tseries){{"__name__", i % 3 ? "cpu" : "mem", "instance", inst[i], "mode",
                           modes[(i / 16) % 3], "odd", odd[i % 8], NULL},
                          {IX_T0}, {i}, 1};
    }
    ts[N] = (tseries){{"__name__", "cpu", "huge", big, "instance", "i1", "mode", "idle", NULL},
                      {IX_T0}, {99}, 1};
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    pt_write_result r1, r2;
    int w1 = pt_store_write(&full, mk_write(&a, ts, ALL), &a, &r1);
    int w2 = pt_store_write(&tiny, mk_write(&a, ts, ALL), &a, &r2);
    ok(w1 == 0 && w2 == 0 && r1.samples_written == ALL && r2.samples_written == ALL,
       "%s: %d series written with full and with 2-bit references", label, ALL);

    ix_refs rc;
    memset(&rc, 0, sizeof(rc));
    pt_row_range series_rows = {{(const uint8_t *)"==", 2}, {(const uint8_t *)"==g", 3}};
    pt_scan sc = {.table = PT_TABLE_INDEX, .ranges = &series_rows, .nranges = 1};
    int scan_rv = pt_backend_scan(tiny_be, &sc, ix_count_refs, &rc);
    ok(scan_rv == 0 && rc.refs <= 4 && rc.max_run > 10,
       "%s: 2-bit references collide: %d references, up to %d series rows under one", label,
       rc.refs, rc.max_run);
    ix_cardinality(&full, ts, ALL, 1, label);
    ix_cardinality(&tiny, ts, ALL, 0, label);

    /* A metric's list cells name their series after the label mask, so a read by metric
     * name reads no series row. A store without caches scans every row it uses: 33 list
     * rows and 33 data rows (the embedded store also counts the key that ends a range),
     * where resolving references would add 33 series rows. */
    pt_store bare = {.index_bucket_ms = 86400000, .max_series = 1000, .max_samples = 100000};
    const pt_store_caches no_caches = {0};
    if (pt_store_open(&bare, full_be, &no_caches) != 0)
        BAIL_OUT("out of memory for a store");
    ix_lists lc = {0};
    pt_row_range cpu_rows = {{(const uint8_t *)"cpu,@", 5}, {(const uint8_t *)"cpu,A", 5}};
    pt_scan lsc = {.table = PT_TABLE_INDEX, .ranges = &cpu_rows, .nranges = 1};
    int lrv = pt_backend_scan(full_be, &lsc, ix_count_lists, &lc);
    static const tmatch cpu[] = {{0, "__name__", "cpu"}};
    size_t b0 = bare.stats->read_rows_scanned;
    long bn = ix_count_once(&bare, cpu, 1);
    size_t brows = bare.stats->read_rows_scanned - b0;
    ok(lrv == 0 && lc.rows == 33 && lc.with_sid == 33 && bn == 33 && brows >= 66 && brows <= 67,
       "%s: a read by metric name takes the sids from its list (%zu list rows, %zu naming "
       "their series; %ld series from %zu rows)",
       label, lc.rows, lc.with_sid, bn, brows);
    pt_store_close(&bare);

    /* A metric's list served from the list cache names its series as the scan does: the
     * second read scans its data rows alone, with no series-row cache to resolve
     * references through (otherwise it would read a series row per series). */
    pt_store lonly = {.index_bucket_ms = 86400000, .max_series = 1000, .max_samples = 100000};
    const pt_store_caches lists_only = {.list_bytes = 1 << 20};
    if (pt_store_open(&lonly, full_be, &lists_only) != 0)
        BAIL_OUT("out of memory for a store");
    size_t l0 = lonly.stats->read_rows_scanned;
    long ln1 = ix_count_once(&lonly, cpu, 1);
    size_t l1 = lonly.stats->read_rows_scanned;
    long ln2 = ix_count_once(&lonly, cpu, 1);
    size_t l2 = lonly.stats->read_rows_scanned;
    ok(ln1 == 33 && ln2 == 33 && l2 - l1 >= 33 && l2 - l1 <= 34 && l2 - l1 < l1 - l0,
       "%s: a metric's cached list names its series (%ld series from %zu rows, then %ld from "
       "%zu)",
       label, ln1, l1 - l0, ln2, l2 - l1);
    pt_store_close(&lonly);

    /* Equality and inequality selectors, with expectations computed here. */
    static const tmatch eqs[][2] = {
        {{0, "__name__", "cpu"}},
        {{0, "__name__", "cpu"}, {0, "instance", "i3"}},
        {{0, "instance", "i1"}, {0, "mode", "idle"}},
        {{0, "odd", ","}},
        {{0, "odd", ",@1700000000000,"}},
        {{0, "odd", "0123456789abcdef"}},
        {{0, "__name__", "mem"}, {0, "odd", "=="}},
        {{0, "odd", "\\"}, {1, "mode", "idle"}},
        {{0, "__name__", "cpu"}, {0, "huge", ""}},
        {{0, "huge", big}},
        {{1, "odd", "@"}, {0, "__name__", "mem"}},
        {{0, "instance", "i99"}},
    };
    for (size_t i = 0; i < sizeof(eqs) / sizeof(eqs[0]); i++) {
        size_t n = eqs[i][1].name ? 2 : 1;
        long want = 0;
        for (int s = 0; s < ALL; s++) {
            int all = 1;
            for (size_t k = 0; k < n && all; k++) {
                const char *v = "";
                for (int l = 0; ts[s].labels[l]; l += 2)
                    if (strcmp(ts[s].labels[l], eqs[i][k].name) == 0)
                        v = ts[s].labels[l + 1];
                all = ix_match(v, eqs[i][k].type, eqs[i][k].value);
            }
            want += all;
        }
        long f = ix_count(&full, eqs[i], n), t = ix_count(&tiny, eqs[i], n);
        ok(f == want && t == want, "%s: selector %zu: %ld series expected, %ld and %ld", label, i,
           want, f, t);
    }
    /* Regexes, counted by hand from the series above. */
    static const tmatch res[][2] = {
        {{2, "instance", "i[1-3]"}, {1, "mode", "idle"}},
        {{0, "__name__", "mem"}, {3, "mode", "idle|user"}},
        {{2, "__name__", ".+"}, {2, "odd", "[,=@]"}},
        {{2, "odd", ""}},
        {{3, "odd", ".*@.*"}},
        {{2, "instance", "i1"}, {2, "huge", ".+"}},
    };
    static const long res_want[] = {6, 5, 18, 1, 37, 1};
    for (size_t i = 0; i < sizeof(res) / sizeof(res[0]); i++) {
        size_t n = res[i][1].name ? 2 : 1;
        long f = ix_count(&full, res[i], n), t = ix_count(&tiny, res[i], n);
        ok(f == res_want[i] && t == f, "%s: regex selector %zu: %ld series expected, %ld and %ld",
           label, i, res_want[i], f, t);
    }

    /* The series-row caches are filled now (the queries above ran twice). A new series
     * shares a cached reference in the 2-bit store: its write must drop the entry. */
    static const tmatch i3[] = {{0, "instance", "i3"}};
    long before = ix_count(&tiny, i3, 1);
    tseries late = {{"__name__", "cpu", "instance", "i3", "mode", "late", NULL}, {IX_T0}, {7}, 1};
    int w4 = pt_store_write(&full, mk_write(&a, &late, 1), &a, &r1);
    int w5 = pt_store_write(&tiny, mk_write(&a, &late, 1), &a, &r2);
    long f3 = ix_count(&full, i3, 1), t3 = ix_count(&tiny, i3, 1);
    ok(w4 == 0 && w5 == 0 && before == 3 && f3 == 4 && t3 == 4,
       "%s: a series written after its reference was cached is found (%ld, then %ld and %ld)",
       label, before, f3, t3);

    /* The list cache: the reads above cached i3's list and series rows, so the same query
     * scans no index row (only one data row per series); a series written into the list
     * makes the next read scan it. */
    size_t z0 = full.stats->read_rows_scanned;
    long z1 = ix_count_once(&full, i3, 1);
    size_t z1r = full.stats->read_rows_scanned;
    late.labels[5] = "later";
    int w6 = pt_store_write(&full, mk_write(&a, &late, 1), &a, &r1);
    long z2 = ix_count_once(&full, i3, 1);
    size_t z2r = full.stats->read_rows_scanned;
    long z3 = ix_count_once(&full, i3, 1);
    size_t z3r = full.stats->read_rows_scanned;
    ok(z1 == 4 && z1r - z0 == 4 && w6 == 0 && z2 == 5 && z2r - z1r > 5 && z3 == 5 &&
           z3r - z2r == 5,
       "%s: a cached list is read without a scan until a write adds to it (%ld series, %zu "
       "rows; %ld, %zu; %ld, %zu)",
       label, z1, z1r - z0, z2, z2r - z1r, z3, z3r - z2r);

    /* List hints: a repeated query goes straight to its shortest list and reads fewer
     * rows; once that list has grown past another, a read still answers right. */
    static const tmatch two[] = {{0, "__name__", "cpu"}, {0, "instance", "i5"}};
    size_t rows0 = full.stats->read_rows_scanned;
    long c1 = ix_count_once(&full, two, 2);
    size_t rows1 = full.stats->read_rows_scanned;
    long c2 = ix_count_once(&full, two, 2);
    size_t rows2 = full.stats->read_rows_scanned;
    ok(c1 == 2 && c2 == 2 && rows2 - rows1 < rows1 - rows0,
       "%s: the repeated query reads fewer index rows (%zu, then %zu)", label, rows1 - rows0,
       rows2 - rows1);
    enum { MORE = 40 };
    tseries more[MORE];
    char inst5[MORE][8];
    for (int i = 0; i < MORE; i++) {
        snprintf(inst5[i], sizeof(inst5[i]), "x%d", i);
        more[i] = (tseries){{"__name__", "other", "instance", "i5", "k", inst5[i], NULL},
                            {IX_T0}, {i}, 1};
    }
    more[0].labels[1] = "cpu"; /* one more answer */
    int w3 = pt_store_write(&full, mk_write(&a, more, MORE), &a, &r1);
    long c3 = ix_count_once(&full, two, 2), c4 = ix_count_once(&full, two, 2);
    ok(w3 == 0 && c3 == 3 && c4 == 3,
       "%s: a stale hint costs rows, not answers (%ld, then %ld series)", label, c3, c4);

    pt_arena_free(&a);
    pt_store_close(&full);
    pt_store_close(&tiny);
}

#endif
