/*
 * Compaction on Google's Bigtable emulator (bt_emulator.h; bigtable_compact.c): a pass
 * rewrites rows of single cells and small chunks into fewer cells and every scan reads
 * the same; a second pass does nothing; exemplar and recent rows are left alone; two
 * backends compacting at once do each row once; a pass that stops halfway leaves every
 * row old or compacted, and the lease keeps another holder out until it lapses; with
 * storage.retention_rules a pass deletes the cells past a row's rule.
 * PT_COMPACT_BENCH=1 also measures 1000 series x 240 samples written one request per
 * sample (docs/benchmarks.md). Without the emulator binary the test is skipped.
 */
#include "bt_emulator.h"
#include "bytes.h"

#define NOW 1000000000LL /* the injected now: rows with base 0 are ~11 days old */

static char rows[64][64];

static const char *row_key(int i)
{
    snprintf(rows[i], sizeof(rows[i]), "cpu,job=a%02d,@0000000000000", i);
    return rows[i];
}

/* A single-sample cell as older versions wrote it (check_and_set sends it as it is). */
static int write_single(pt_backend *b, const char *row, uint32_t off, const char *val)
{
    uint8_t q[4];
    pt_put_be32(q, off);
    pt_mutation m = {.table = PT_TABLE_POINTS,
                     .row = pt_slice_str(row),
                     .qual = {q, 4},
                     .value = pt_slice_str(val),
                     .version_us = 1000 * ((int64_t)off + 1)};
    int applied = 0, rv = pt_bt_data_check_and_set(b->state, &m, (pt_slice){0}, &applied);
    return rv != 0 ? rv : applied ? 0 : -1;
}

/* nrows rows of 4 single cells and 5 one-sample chunks (one write call each, the row's
 * sample of every row in it), one chunk over a single cell, one offset written twice;
 * an exemplar row of single cells and a row whose samples are recent. */
static int fill(pt_backend *b, int nrows)
{
    static const char *vals[] = {"c3", "c5", "c6", "c7", "c5b"};
    static const uint32_t offs[] = {3, 5, 6, 7, 5};
    int rv = 0;
    for (int i = 0; i < nrows && rv == 0; i++)
        for (uint32_t o = 1; o <= 4 && rv == 0; o++)
            rv = write_single(b, row_key(i), o,
                              o == 1   ? "s1"
                              : o == 2 ? "s2"
                              : o == 3 ? "s3"
                                       : "s4");
    for (size_t k = 0; k < CT_N(offs) && rv == 0; k++) {
        ct_batch bt = {0};
        for (int i = 0; i < nrows; i++)
            ct_add(&bt, PT_TABLE_POINTS, row_key(i), offs[k], vals[k]);
        rv = ct_write(b, &bt);
    }
    for (uint32_t o = 1; o <= 3 && rv == 0; o++)
        rv = write_single(b, "cpu,job=ex,#0000000000000", o, "x");
    for (uint32_t k = 0; k < 3 && rv == 0; k++) {
        ct_batch bt = {0};
        ct_add(&bt, PT_TABLE_POINTS, "cpu,job=live,@0000000000000", (uint32_t)NOW - 1000 * (k + 1),
               "live");
        rv = ct_write(b, &bt);
    }
    return rv;
}

/* Every cell of the points table as a scan delivers it (malloc'd). */
static char *dump(pt_backend *b)
{
    ct_sink s;
    ct_sink_init(&s);
    pt_row_range r = {{0}, {0}};
    int rv = ct_scan(b, PT_TABLE_POINTS, &r, 1, CT_NONE, CT_NONE, 0, &s);
    char *t = strdup(rv == 0 && s.text ? s.text : "ERROR");
    ct_sink_free(&s);
    return t;
}

typedef struct raw_count {
    size_t cells, bytes;
    size_t ex_cells, live_cells;
} raw_count;

static int count_row(void *ud, pt_slice key, const pt_bt_cell *cells, size_t n)
{
    raw_count *c = ud;
    c->cells += n;
    for (size_t i = 0; i < n; i++) /* what a cell stores: key, family, qualifier, version, value */
        c->bytes += key.n + cells[i].family.n + cells[i].qualifier.n + 8 + cells[i].value.n;
    if (memmem(key.p, key.n, ",#", 2))
        c->ex_cells += n;
    if (memmem(key.p, key.n, "live", 4))
        c->live_cells += n;
    return 0;
}

/* The points table's cells as stored (chunks not merged). */
static raw_count raw(pt_backend *b)
{
    raw_count c = {0};
    pt_row_range r = {{0}, {0}};
    pt_scan s = {.table = PT_TABLE_POINTS, .ranges = &r, .nranges = 1};
    if (pt_bt_data_read_raw(b->state, &s, 0, count_row, &c) != 0)
        c.cells = (size_t)-1;
    return c;
}

static int open_init(pt_backend *b, const char *endpoint, const char *prefix)
{
    char err[256] = "";
    if (open_bt(b, endpoint, prefix, 0, err, sizeof(err)) != 0) {
        diag("open: %s", err);
        return -1;
    }
    if (init_bt(b, err, sizeof(err)) != 0) {
        diag("init: %s", err);
        pt_backend_close(b);
        return -1;
    }
    return 0;
}

static void test_pass(const char *endpoint)
{
    enum { R = 12 };
    pt_backend b;
    if (!ok(open_init(&b, endpoint, "cmp_") == 0, "tables for one pass"))
        return;
    is(fill(&b, R), 0, "%d rows of 4 single cells and 5 small chunks, an exemplar row, a live row",
       R);
    char *before = dump(&b);
    raw_count c0 = raw(&b);
    is(c0.cells, (size_t)R * 9 + 3 + 3, "...%zu cells stored", c0.cells);
    ok(strstr(before, "a00,@0000000000000:00000005=c5b;") != NULL &&
           strstr(before, ":00000003=c3;"),
       "the later write of offset 5 and the chunk over a single cell win: %.200s", before);
    is(pt_bt_compact_pass(b.state, NOW), 0, "one pass");
    char *after = dump(&b);
    is_str(after, before, "every scan cell is as before");
    raw_count c1 = raw(&b);
    is(c1.cells, (size_t)R + 3 + 3, "each row holds one chunk (%zu cells)", c1.cells);
    is(c1.ex_cells, 3, "the exemplar row keeps its single cells");
    is(c1.live_cells, 3, "the live row keeps its chunks");
    pt_bt_stats st = stats(&b);
    is(st.compacted_rows, R, "compacted_rows = %d", R);
    is(st.compacted_cells, (unsigned long)R * 9, "compacted_cells = %d", R * 9);
    is(st.compaction_chunks, R, "compaction_chunks = %d", R);
    is(st.compaction_passes, 1, "one pass counted");
    is(bt_metric(&b, "promtable_bigtable_compacted_rows_total"), R, "on /metrics too");
    unsigned long mutated = st.points.rows_mutated;
    is(pt_bt_compact_pass(b.state, NOW), 0, "a second pass");
    st = stats(&b);
    is(st.compacted_rows, R, "...compacts nothing");
    is(st.points.rows_mutated, mutated, "...and writes nothing");
    is(st.compaction_failures, 0, "no failed pass");
    free(before);
    free(after);
    pt_backend_close(&b);
}

typedef struct runner {
    pt_backend *b;
    int64_t now;
    int rv;
} runner;

static void *run_pass(void *arg)
{
    runner *r = arg;
    r->rv = pt_bt_compact_pass(r->b->state, r->now);
    return NULL;
}

static void test_two_at_once(const char *endpoint)
{
    enum { R = 40 };
    pt_backend a, b;
    if (!ok(open_init(&a, endpoint, "cmc_") == 0 && open_init(&b, endpoint, "cmc_") == 0,
            "two backends on one pair of tables"))
        return;
    is(fill(&a, R), 0, "%d rows to compact", R);
    char *before = dump(&a);
    runner ra = {&a, NOW, -1}, rb = {&b, NOW, -1};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, run_pass, &ra);
    pthread_create(&tb, NULL, run_pass, &rb);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    ok((ra.rv == 0 || ra.rv == 1) && (rb.rv == 0 || rb.rv == 1) && (ra.rv == 0 || rb.rv == 0),
       "both passes end well (%d, %d): one under the lease, the other after or refused", ra.rv,
       rb.rv);
    unsigned long ca = stats(&a).compacted_rows, cb = stats(&b).compacted_rows;
    is(ca + cb, R, "the rows were compacted once between them (%lu + %lu)", ca, cb);
    char *after = dump(&b);
    is_str(after, before, "every scan cell is as before");
    free(before);
    free(after);
    pt_backend_close(&a);
    pt_backend_close(&b);
}

static void test_stopped(const char *endpoint)
{
    enum { R = 10 };
    pt_backend a, b;
    if (!ok(open_init(&a, endpoint, "cmk_") == 0 && open_init(&b, endpoint, "cmk_") == 0,
            "tables for a stopped pass"))
        return;
    is(fill(&a, R), 0, "%d rows to compact", R);
    char *before = dump(&a);
    raw_count c0 = raw(&a);
    pt_bt_set_compact_fail_after(a.state, 3);
    is(pt_bt_compact_pass(a.state, NOW), PT_EUNAVAIL, "a pass fails after 3 rows");
    is(stats(&a).compacted_rows, 3, "...3 rows compacted");
    is(stats(&a).compaction_failures, 1, "...a failure counted");
    char *mid = dump(&a);
    is_str(mid, before, "every scan cell is as before");
    is(raw(&a).cells, c0.cells - 3 * 8, "3 rows hold one cell each, the others all theirs");
    is(pt_bt_compact_pass(b.state, NOW), 1, "another backend finds the lease held");
    is(stats(&b).compacted_rows, 0, "...and compacts nothing");
    is(pt_bt_compact_pass(b.state, NOW + PT_BT_COMPACT_LEASE_MS + 1), 0,
       "once the lease lapses it takes it");
    is(stats(&b).compacted_rows, R - 3, "...and compacts the other %d rows", R - 3);
    char *after = dump(&b);
    is_str(after, before, "every scan cell is as before");
    is(raw(&b).cells, c0.cells - R * 8, "every row holds one cell");
    free(before);
    free(mid);
    free(after);
    pt_backend_close(&a);
    pt_backend_close(&b);
}

static int open_conf(pt_backend *b, const char *endpoint, long interval_ms, int direct,
                     int no_background)
{
    char err[256] = "";
    pt_bigtable_conf bc = {.project = "proj",
                           .instance = "inst",
                           .endpoint = (char *)endpoint,
                           .table_prefix = "cmt_",
                           .compaction_interval_ms = interval_ms};
    pt_backend_config cfg = {.own = &bc, .direct = direct, .no_background = no_background};
    int rv = pt_backend_open(b, &pt_backend_bigtable, &cfg, err, sizeof(err));
    if (rv != 0)
        diag("open: %s", err);
    return rv;
}

/* The thread: started by the daemon's open, not by a direct one (init, copy); it runs
 * passes; close stops it while it waits. */
static void test_thread(const char *endpoint)
{
    pt_backend b;
    if (!ok(open_init(&b, endpoint, "cmt_") == 0, "tables for the thread"))
        return;
    is(fill(&b, 4), 0, "4 rows to compact");
    pt_backend_close(&b);
    if (open_conf(&b, endpoint, 20, 1, 0) == 0) {
        ok(!((pt_bt *)b.state)->compact.started, "a direct open (init, copy) starts no thread");
        pt_backend_close(&b);
    }
    if (open_conf(&b, endpoint, 20, 0, 1) == 0) {
        ok(!((pt_bt *)b.state)->compact.started, "an open for check starts no thread");
        pt_backend_close(&b);
    }
    if (open_conf(&b, endpoint, 20, 0, 0) != 0)
        return;
    ok(((pt_bt *)b.state)->compact.started, "the daemon's open starts the thread");
    double t0 = now_ms();
    /* By the wall clock the "live" row is old too: 5 rows. */
    while (stats(&b).compacted_rows < 5 && now_ms() - t0 < 30000)
        sleep_ms(10);
    is(stats(&b).compacted_rows, 5, "its passes compact the rows (by the wall clock, all 5)");
    pt_backend_close(&b);
    if (open_conf(&b, endpoint, 3600000, 0, 0) == 0) {
        pt_backend_close(&b);
        ok(1, "close stops the thread while it waits for the next pass");
    }
}

/* 1000 series x 240 samples (15 s apart), each sample its own write of the series. */
static void bench(const char *endpoint)
{
    enum { S = 1000, N = 240 };
    pt_backend b;
    if (!ok(open_init(&b, endpoint, "cmb_") == 0, "bench: tables"))
        return;
    static char keys[S][64];
    static uint8_t val[S][8];
    for (int i = 0; i < S; i++)
        snprintf(keys[i], sizeof(keys[i]), "node_cpu,cpu=%d,instance=host:9100,@0000000000000", i);
    int rv = 0;
    static pt_mutation m[S];
    static uint8_t q[S][4];
    for (int k = 0; k < N && rv == 0; k++) {
        /* Each series' sample in a request of its own would take 240,000 round trips:
         * one request holds one sample of every series, which makes the same cells. */
        for (int i = 0; i < S; i++) {
            /* A counter that grows by an irregular amount, as CPU seconds do. */
            double v =
                i * 1000.0 + k * 14.2 + (double)((unsigned)(i * 7919 + k * 104729) % 997) / 100;
            uint64_t bits;
            memcpy(&bits, &v, 8);
            pt_put_be32(q[i], (uint32_t)k * 15000);
            pt_put_be64(val[i], bits);
            m[i] = (pt_mutation){.table = PT_TABLE_POINTS,
                                 .row = pt_slice_str(keys[i]),
                                 .qual = {q[i], 4},
                                 .value = {val[i], 8},
                                 .version_us = (int64_t)k * 15000 * 1000};
        }
        rv = pt_backend_write(&b, m, S);
    }
    is(rv, 0, "bench: %d series x %d samples written a sample per series per request", S, N);
    pt_bt_stats st = stats(&b);
    raw_count c0 = raw(&b);
    double t0 = now_ms();
    is(pt_bt_compact_pass(b.state, NOW), 0, "bench: one pass");
    double ms = now_ms() - t0;
    raw_count c1 = raw(&b);
    double samples = (double)S * N;
    diag("before: %zu cells, %.3f cells/sample, %.1f bytes/sample stored, %.1f bytes/sample "
         "written (MutateRows)",
         c0.cells, c0.cells / samples, c0.bytes / samples, st.points.write_bytes / samples);
    diag("after:  %zu cells, %.3f cells/sample, %.1f bytes/sample stored; pass %.0f ms, "
         "%lu rows, %lu cells replaced, %lu chunks written",
         c1.cells, c1.cells / samples, c1.bytes / samples, ms, stats(&b).compacted_rows,
         stats(&b).compacted_cells, stats(&b).compaction_chunks);
    pt_backend_close(&b);
}

/* storage.retention_rules (backend.h keep_row_ms): rows of "dbg" keep a day. */
static int64_t keep_dbg(void *ud, pt_slice row)
{
    (void)ud;
    return row.n > 3 && memcmp(row.p, "dbg", 3) == 0 ? 86400000 : 0;
}

/* A pass deletes what is past a row's rule: single cells and chunks whose newest sample
 * is older than its cutoff; a chunk across it stays (reads clip it); rows of no rule and
 * recent cells are left alone. */
static void test_rules(const char *endpoint)
{
    pt_backend b;
    if (!ok(open_init(&b, endpoint, "ret_") == 0, "tables for the retention rules"))
        return;
    pt_backend_close(&b);
    _Atomic uint64_t dropped = 0;
    char err[256] = "";
    pt_bigtable_conf bc = {.project = "proj", .instance = "inst", .endpoint = (char *)endpoint,
                           .table_prefix = "ret_"};
    pt_backend_config cfg = {.own = &bc, .keep_row_ms = keep_dbg, .shortest_keep_ms = 86400000,
                             .retention_dropped = &dropped};
    if (!ok(pt_backend_open(&b, &pt_backend_bigtable, &cfg, err, sizeof(err)) == 0,
            "opened with a rule (%s)", err))
        return;
    static const char *const rk[] = {"dbg,job=a,@0000000000000", "cpu,job=k,@0000000000000"};
    int rv = 0;
    for (int i = 0; i < 2 && rv == 0; i++) {
        rv = write_single(&b, rk[i], 1, "s1");
        if (rv == 0)
            rv = write_single(&b, rk[i], 2, "s2");
        ct_batch old = {0}, across = {0}, recent = {0};
        ct_add(&old, PT_TABLE_POINTS, rk[i], 1000, "o1");
        ct_add(&old, PT_TABLE_POINTS, rk[i], 2000, "o2");
        ct_add(&across, PT_TABLE_POINTS, rk[i], (uint32_t)(NOW - 86400000) - 1000, "a1");
        ct_add(&across, PT_TABLE_POINTS, rk[i], (uint32_t)(NOW - 86400000) + 1000, "a2");
        ct_add(&recent, PT_TABLE_POINTS, rk[i], (uint32_t)NOW - 1000, "r1");
        if (rv == 0)
            rv = ct_write(&b, &old);
        if (rv == 0)
            rv = ct_write(&b, &across);
        if (rv == 0)
            rv = ct_write(&b, &recent);
    }
    is(rv, 0, "two rows: old single cells, an old chunk, one across the cutoff, a recent one");
    is(pt_bt_compact_pass(b.state, NOW), 0, "one pass");
    char *after = dump(&b);
    char across[64];
    snprintf(across, sizeof(across), "dbg,job\\x3da,@0000000000000:%08x=a1;",
             (unsigned)(NOW - 86400000) - 1000);
    ok(strstr(after, across) &&
           !strstr(after, "dbg,job\\x3da,@0000000000000:00000001=") &&
           !strstr(after, "dbg,job\\x3da,@0000000000000:000003e8="),
       "the ruled row: old cells and the old chunk gone, the chunk across kept: %s", strstr(after, "dbg"));
    ok(strstr(after, "cpu,job\\x3dk,@0000000000000:00000001=s1;") &&
           strstr(after, "cpu,job\\x3dk,@0000000000000:000003e8=o1;"),
       "a row without a rule: everything kept");
    is((long)atomic_load(&dropped), 3, "3 cells counted dropped (2 single cells, 1 chunk)");
    free(after);
    pt_backend_close(&b);
}

/* An erase, then a pass: the pass folds what the erase left and brings nothing back. */
static void test_erase_then_pass(const char *endpoint)
{
    enum { R = 4 };
    pt_backend b;
    if (!ok(open_init(&b, endpoint, "ecp_") == 0, "tables for an erase before a pass"))
        return;
    is(fill(&b, R), 0, "%d rows of single cells and small chunks", R);
    uint8_t lo[4], hi[4];
    pt_put_be32(lo, 2);
    pt_put_be32(hi, 6);
    pt_erase x[R];
    for (int i = 0; i < R; i++)
        x[i] = (pt_erase){PT_TABLE_POINTS, pt_slice_str(row_key(i)), {lo, 4}, {hi, 4}};
    is(pt_backend_erase(&b, x, R), 0, "offsets 2 to 5 erased in every row");
    char *erased = dump(&b);
    ok(!strstr(erased, "a00,@0000000000000:00000002=") &&
           !strstr(erased, "a03,@0000000000000:00000005=") &&
           strstr(erased, "a00,@0000000000000:00000001=s1;") &&
           strstr(erased, "a00,@0000000000000:00000006=c6;"),
       "single cells and chunks in the range gone, the ones around kept: %.160s", erased);
    is(pt_bt_compact_pass(b.state, NOW), 0, "a pass");
    char *after = dump(&b);
    is_str(after, erased, "the pass reads as the erase left it");
    ok(stats(&b).compacted_rows == R, "and compacted the %d rows", R);
    free(erased);
    free(after);
    pt_backend_close(&b);
}

int main(void)
{
    char endpoint[64];
    int setup = bt_emulator_setup(endpoint, sizeof(endpoint));
    if (setup > 0)
        return 0;
    if (setup < 0)
        return done_testing();
    test_pass(endpoint);
    test_two_at_once(endpoint);
    test_stopped(endpoint);
    test_thread(endpoint);
    test_rules(endpoint);
    test_erase_then_pass(endpoint);
    if (getenv("PT_COMPACT_BENCH"))
        bench(endpoint);
    return done_testing();
}
