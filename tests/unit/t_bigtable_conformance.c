/*
 * The bigtable backend against Google's Bigtable emulator (cbtemulator, bt_emulator.h):
 *   - init (CreateTable, idempotent) and the GC rules it sets;
 *   - the backend conformance suite (conformance.h), and the index, API, histogram and
 *     exemplar conformance suites, each on tables of its own;
 *   - what only Bigtable shows: 4 KiB row keys, large batches split into requests,
 *     BIGTABLE_EMULATOR_HOST, tables missing before init.
 * Fanned-out scans, resumed streams and outages are in t_bigtable_streams.c.
 * Without the emulator binary the test is skipped.
 */
#include "bt_emulator.h"
#include "gorilla.h"
#include "embedded/embedded.h"
#include "index_conformance.h"
#include "api_conformance.h"
#include "exemplar_conformance.h"
#include "hist_conformance.h"
#include "delete_conformance.h"

static const char *describe(pt_backend *b, int table)
{
    static char out[256];
    int rv = pt_bt_describe_table(b->state, table, out, sizeof(out));
    if (rv != 0)
        snprintf(out + strlen(out), sizeof(out) - strlen(out), " (error %d)", rv);
    return out;
}

/* ---- cases ---- */

static void test_open_errors(void)
{
    pt_backend b;
    char err[256] = "";
    pt_bigtable_conf bc = {.endpoint = "127.0.0.1:1", .instance = "i"};
    pt_backend_config cfg = {.own = &bc};
    ok(pt_backend_open(&b, &pt_backend_bigtable, &cfg, err, sizeof(err)) < 0 && err[0],
       "open without a project fails with a message");
    diag("open: %s", err);
    ok(pt_backend_find("bigtable") == &pt_backend_bigtable, "registry: bigtable");
}

static void test_before_init(const char *endpoint)
{
    pt_backend b;
    char err[256] = "";
    if (open_bt(&b, endpoint, "noinit_", 0, err, sizeof(err)) != 0) {
        ok(0, "open: %s", err);
        return;
    }
    unsigned long r0 = stats(&b).write_retries;
    is(write1(&b, PT_TABLE_POINTS, "r", 1, "v"), PT_EIO,
       "a write before init (no table) fails as fatal, not retryable");
    is(stats(&b).write_retries - r0, 0, "...at once, without a retry");
    pt_row_range r[] = {CT_RANGE("a", "b")};
    is_str(ct_show(&b, PT_TABLE_POINTS, r, 1), "ERROR -202", "a scan before init fails too");
    pt_backend_close(&b);
}

static void test_init(pt_backend *b, const char *endpoint)
{
    char err[256] = "";
    is(init_bt(b, err, sizeof(err)), 0, "init creates the tables");
    if (err[0])
        diag("init: %s", err);
    is(init_bt(b, err, sizeof(err)), 0, "init again (ALREADY_EXISTS) succeeds");
    is_str(describe(b, PT_TABLE_POINTS), "p: versions>1", "points: family p, max versions 1");
    is_str(describe(b, PT_TABLE_INDEX), "p: versions>1", "index: family p, max versions 1");

    pt_backend r;
    if (open_bt(&r, endpoint, "ret_", 30 * 86400L, err, sizeof(err)) != 0) {
        ok(0, "open with retention: %s", err);
        return;
    }
    is(init_bt(&r, err, sizeof(err)), 0, "init with a retention");
    is_str(describe(&r, PT_TABLE_POINTS), "p: (versions>1 || age>2592000s)",
           "retention: max versions 1 OR older than 30 days");
    pt_backend_close(&r);
}

static void test_bigtable_only(pt_backend *b)
{
    /* Row keys up to Bigtable's 4 KiB limit. */
    static char key[4098];
    memset(key, 'k', sizeof(key) - 1);
    memcpy(key, "big/", 4);
    key[4096] = '\0';
    is(write1(b, PT_TABLE_POINTS, key, 1, "v"), 0, "a 4096-byte row key is stored");
    char end[4098];
    memcpy(end, key, 4096);
    end[4096] = '\0';
    pt_row_range one = {{(const uint8_t *)key, 4096}, {(const uint8_t *)end, 4097}};
    ct_sink sink;
    ct_sink_init(&sink);
    is(ct_scan(b, PT_TABLE_POINTS, &one, 1, CT_NONE, CT_NONE, 0, &sink), 0, "scan it");
    ok(sink.calls == 1 && sink.prev_row_n == 4096 && memcmp(sink.prev_row, key, 4096) == 0,
       "the 4096-byte row key reads back exactly");
    ct_sink_free(&sink);
    key[4096] = 'k';
    is(write1(b, PT_TABLE_POINTS, key, 1, "v"), PT_EBADREQ, "a 4097-byte row key is rejected");

    ct_batch bt = {0};
    ct_add(&bt, PT_TABLE_POINTS, "big/ms", 1, "v");
    bt.m[0].version_us = 1500;
    is(ct_write(b, &bt), PT_EBADREQ, "a version that is not whole milliseconds is rejected");

    /* More mutations than one MutateRows request may hold (100 cells in each of 1200
     * rows: the emulator is slow with very wide rows). */
    enum { N = 120000, PER_ROW = 100 };
    pt_mutation *m = calloc(N, sizeof(*m));
    uint8_t(*q)[4] = calloc(N, 4);
    char(*rows)[16] = calloc(N / PER_ROW, 16);
    for (size_t i = 0; i < N; i++) {
        size_t r = i / PER_ROW;
        snprintf(rows[r], 16, "many/%05zu", r);
        pt_put_be32(q[i], (uint32_t)i);
        m[i] = (pt_mutation){.table = PT_TABLE_POINTS,
                             .row = pt_slice_str(rows[r]),
                             .qual = {q[i], 4},
                             .value = PT_SLICE_LIT("12345678"),
                             .version_us = 1000 * (int64_t)(i + 1)};
    }
    is(pt_backend_write(b, m, N), 0, "a batch of 120000 mutations (split into 2 requests)");
    pt_row_range all[] = {CT_RANGE("many/", "many0")};
    ct_sink_init(&sink);
    sink.render_values = 0;
    is(ct_scan(b, PT_TABLE_POINTS, all, 1, CT_NONE, CT_NONE, 0, &sink), 0, "scan them");
    is(sink.calls, N, "every cell is there");
    ok(sink.ordered, "in order");
    ct_sink_free(&sink);
    free(m);
    free(q);
    free(rows);
}

/* The write and read counters, read through the stats op as /metrics shows them. */
enum {
    CNT_ROWS_MUTATED,
    CNT_CELLS_WRITTEN,
    CNT_WRITE_BYTES,
    CNT_ROWS_READ,
    CNT_CELLS_READ,
    CNT_SCANS,
    CNT_READ_CALLS,
    CNT_POINTS_ROWS_MUTATED,
    CNT_POINTS_CELLS_WRITTEN,
    CNT_POINTS_WRITE_BYTES,
    CNT_POINTS_ROWS_READ,
    CNT_POINTS_CELLS_READ,
    CNT_N
};
static const char *const cnt_names[CNT_N] = {
    "promtable_bigtable_rows_mutated_total", "promtable_bigtable_cells_written_total",
    "promtable_bigtable_write_bytes_total",  "promtable_bigtable_rows_read_total",
    "promtable_bigtable_cells_read_total",   "promtable_bigtable_scans_total",
    "promtable_bigtable_read_calls_total",
    "promtable_bigtable_points_rows_mutated_total",
    "promtable_bigtable_points_cells_written_total",
    "promtable_bigtable_points_write_bytes_total",
    "promtable_bigtable_points_rows_read_total",
    "promtable_bigtable_points_cells_read_total",
};

static void cnt_get(pt_backend *b, double *v)
{
    for (int i = 0; i < CNT_N; i++)
        v[i] = bt_metric(b, cnt_names[i]);
}

static void test_counters(pt_backend *b)
{
    /* 10 cells in 4 rows: 9 samples in 3 rows of the points table, which go as one chunk
     * cell a row (bigtable_chunk.c), and 1 cell of the index table. */
    static const ct_cellspec pts[] = {
        {"cnt/a", 1, "12345678"}, {"cnt/a", 2, "12345678"}, {"cnt/a", 3, "12345678"},
        {"cnt/a", 4, "12345678"}, {"cnt/b", 1, "12345678"}, {"cnt/b", 2, "12345678"},
        {"cnt/c", 1, "12345678"}, {"cnt/c", 2, "12345678"}, {"cnt/c", 3, "12345678"},
    };
    ct_batch bt = {0};
    ct_add_cells(&bt, PT_TABLE_POINTS, pts, CT_N(pts));
    ct_add(&bt, PT_TABLE_INDEX, "cnt/ix", 1, "");
    /* What the request must carry at least: every key, qualifier and value once. */
    double payload = 0;
    for (size_t i = 0; i < bt.n; i++)
        payload += (double)(bt.m[i].qual.n + bt.m[i].value.n);
    payload += 3 * strlen("cnt/a") + strlen("cnt/ix");

    double v0[CNT_N], v1[CNT_N], v2[CNT_N], v3[CNT_N];
    cnt_get(b, v0);
    for (int i = 0; i < CNT_N; i++)
        if (!ok(v0[i] >= 0, "/metrics has %s", cnt_names[i]))
            return;
    is(ct_write(b, &bt), 0, "write 10 cells in 4 rows of 2 tables");
    cnt_get(b, v1);
    is(v1[CNT_ROWS_MUTATED] - v0[CNT_ROWS_MUTATED], 4, "rows_mutated += 4 (one entry a row)");
    is(v1[CNT_CELLS_WRITTEN] - v0[CNT_CELLS_WRITTEN], 4, "cells_written += 4 (3 chunks, 1 cell)");
    is(v1[CNT_POINTS_ROWS_MUTATED] - v0[CNT_POINTS_ROWS_MUTATED], 3, "of them points: 3 rows");
    is(v1[CNT_POINTS_CELLS_WRITTEN] - v0[CNT_POINTS_CELLS_WRITTEN], 3, "...3 chunk cells");
    double bytes = v1[CNT_WRITE_BYTES] - v0[CNT_WRITE_BYTES];
    /* Beyond the payload (which the chunks compress): two table names (about 40 bytes
     * each here), the family, version and framing of each cell, the framing of each
     * entry, a chunk's 16-byte qualifier and header. */
    ok(bytes >= 3 * strlen("cnt/a") + 2 * 40 && bytes <= payload + 2 * 64 + 10 * 24 + 4 * 8,
       "write_bytes += %.0f: the requests' size (payload %.0f)", bytes, payload);
    double pbytes = v1[CNT_POINTS_WRITE_BYTES] - v0[CNT_POINTS_WRITE_BYTES];
    ok(pbytes > 0 && pbytes < bytes, "...%.0f bytes of them to the points table", pbytes);
    is(ct_write(b, &bt), 0, "the same batch again");
    cnt_get(b, v2);
    is(v2[CNT_ROWS_MUTATED] - v1[CNT_ROWS_MUTATED], 4, "rows_mutated counts every write");
    is(v2[CNT_CELLS_WRITTEN] - v1[CNT_CELLS_WRITTEN], 4, "...and cells_written");
    is(v2[CNT_WRITE_BYTES] - v1[CNT_WRITE_BYTES], bytes, "...and write_bytes the same size");
    is(v2[CNT_ROWS_READ], v0[CNT_ROWS_READ], "writes read nothing");

    pt_row_range all[] = {CT_RANGE("cnt/", "cnt0")};
    is_str(ct_show(b, PT_TABLE_POINTS, all, 1),
           "cnt/a:00000001=12345678;cnt/a:00000002=12345678;cnt/a:00000003=12345678;"
           "cnt/a:00000004=12345678;cnt/b:00000001=12345678;cnt/b:00000002=12345678;"
           "cnt/c:00000001=12345678;cnt/c:00000002=12345678;cnt/c:00000003=12345678;",
           "scan the 3 rows");
    cnt_get(b, v3);
    is(v3[CNT_ROWS_READ] - v2[CNT_ROWS_READ], 3, "rows_read += 3");
    /* Each write made a chunk cell of its own in every row (another writer id). */
    is(v3[CNT_CELLS_READ] - v2[CNT_CELLS_READ], 6, "cells_read += 6 (two chunks a row)");
    is(v3[CNT_POINTS_ROWS_READ] - v2[CNT_POINTS_ROWS_READ], 3, "points rows_read += 3");
    is(v3[CNT_POINTS_CELLS_READ] - v2[CNT_POINTS_CELLS_READ], 6, "points cells_read += 6");
    is(v3[CNT_SCANS] - v2[CNT_SCANS], 1, "scans += 1");
    is(v3[CNT_READ_CALLS] - v2[CNT_READ_CALLS], 1, "read_calls += 1");
    is(v3[CNT_WRITE_BYTES], v2[CNT_WRITE_BYTES], "reads write nothing");

    /* Qualifiers [2, 3): the server filters, so only what it sends is counted: the chunks
     * that start in [2 - span, 3), all of them here. */
    uint8_t qs[4], qe[4];
    pt_put_be32(qs, 2);
    pt_put_be32(qe, 3);
    is_str(ct_show_q(b, PT_TABLE_POINTS, all, 1, (pt_slice){qs, 4}, (pt_slice){qe, 4}, 0),
           "cnt/a:00000002=12345678;cnt/b:00000002=12345678;cnt/c:00000002=12345678;",
           "scan one qualifier of each row");
    cnt_get(b, v2);
    is(v2[CNT_ROWS_READ] - v3[CNT_ROWS_READ], 3, "rows_read += 3");
    is(v2[CNT_CELLS_READ] - v3[CNT_CELLS_READ], 6, "cells_read += 6");

    pt_row_range ix[] = {CT_RANGE("cnt/", "cnt0")};
    is_str(ct_show(b, PT_TABLE_INDEX, ix, 1), "cnt/ix:00000001=;", "scan the index row");
    cnt_get(b, v3);
    is(v3[CNT_CELLS_READ] - v2[CNT_CELLS_READ], 1, "cells_read += 1");
    is(v3[CNT_POINTS_CELLS_READ], v2[CNT_POINTS_CELLS_READ], "points cells_read unchanged");
}

/* Writes one single-sample cell (4-byte qualifier) as older versions did, or any cell the
 * write path would not make: check_and_set sends its mutation as it is. */
static int write_raw(pt_backend *b, const char *row, pt_slice qual, pt_slice value)
{
    pt_mutation m = {.table = PT_TABLE_POINTS, .row = pt_slice_str(row), .qual = qual,
                     .value = value, .version_us = 1000};
    int applied = 0, rv = pt_bt_data_check_and_set(b->state, &m, (pt_slice){0}, &applied);
    return rv != 0 ? rv : applied ? 0 : -1;
}

static const char *window(pt_backend *b, const char *s, const char *e, uint32_t qs,
                          uint32_t qe, size_t row_limit)
{
    uint8_t bs[4], be[4];
    pt_put_be32(bs, qs);
    pt_put_be32(be, qe);
    pt_row_range r = {pt_slice_str(s), pt_slice_str(e)};
    return ct_show_q(b, PT_TABLE_POINTS, &r, 1, (pt_slice){bs, 4}, (pt_slice){be, 4},
                     row_limit);
}

/* What only the storage format shows: a write's cells of a row become one chunk cell (two
 * when they span more than PT_BT_CHUNK_SPAN_MS), single cells of older versions read
 * with them, the row limit with chunks that start before the window, corrupt chunks. */
/* A sample's value bits in test_streams: a hash of its offset, so that no decimal form is
 * shorter and the chunk is an XOR stream (fmt 3), the form streams carry. */
static uint64_t stream_value(uint32_t q)
{
    uint64_t z = q + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (z ^ (z >> 31)) & 0x3fffffffffffffffull; /* a finite double */
}

/* A sample's value bits in the decimal case of test_streams: two decimals, which a chunk
 * holds in the decimal layout (fmt 4) rather than as an XOR stream. */
static uint64_t decimal_value(uint32_t q)
{
    double v = (double)(q % 977) / 100.0 + 3.0;
    uint64_t bits;
    memcpy(&bits, &v, 8);
    return bits;
}

/* What a streamed scan received: samples decoded from streams, and cells. */
typedef struct streamed {
    size_t streams, stream_samples, cells, bad;
    uint32_t next;                /* the least offset the next sample may have */
    uint64_t (*value)(uint32_t q); /* the value bits a sample must have */
} streamed;

static int on_stream_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)row;
    streamed *st = ud;
    st->cells++;
    if (qual.n != 4 || value.n != 8 || pt_get_be32(qual.p) < st->next ||
        pt_get_be64(value.p) != st->value(pt_get_be32(qual.p)))
        st->bad++;
    st->next = pt_get_be32(qual.p) + 1;
    return 0;
}

static int on_stream(void *ud, pt_slice row, uint32_t first, uint32_t last, uint32_t count,
                     pt_slice stream)
{
    streamed *st = ud;
    pt_gorilla_dec d;
    pt_gorilla_dec_init(&d, stream.p, stream.n);
    int64_t t = -1;
    uint64_t bits;
    st->streams++;
    for (uint32_t i = 0; i < count; i++) {
        if (pt_gorilla_dec_next(&d, &t, &bits) != 0 || t < st->next ||
            bits != st->value((uint32_t)t))
            st->bad++;
        st->next = (uint32_t)t + 1;
        st->stream_samples++;
    }
    st->bad += t != last || !pt_gorilla_dec_done(&d) || (count && first > last);
    (void)row;
    return 0;
}

/* A streamed scan of row "str/a" (or row, when given) over [qs, qe) (0: unbounded). */
static streamed scan_row_streamed(pt_backend *b, const char *row, uint32_t qs, uint32_t qe,
                                  uint64_t (*value)(uint32_t q))
{
    streamed st = {.value = value};
    uint8_t a[4], z[4];
    pt_put_be32(a, qs);
    pt_put_be32(z, qe);
    char end[64];
    size_t rn = strlen(row);
    memcpy(end, row, rn + 1);
    pt_row_range r = {{(const uint8_t *)row, rn}, {(const uint8_t *)end, rn + 1}};
    pt_stream_to to = {on_stream, &st};
    pt_scan s = {.table = PT_TABLE_POINTS, .ranges = &r, .nranges = 1,
                 .qual_start = qs ? (pt_slice){a, 4} : (pt_slice){0},
                 .qual_end = qe ? (pt_slice){z, 4} : (pt_slice){0}, .stream = &to};
    if (pt_backend_scan(b, &s, on_stream_cell, &st) != 0)
        st.bad++;
    return st;
}

static streamed scan_streamed(pt_backend *b, uint32_t qs, uint32_t qe)
{
    return scan_row_streamed(b, "str/a", qs, qe, stream_value);
}

/* Streamed reads take chunks of 8-byte values as they are stored when nothing else of the
 * row is in the way: chunks inside the window and apart from each other. A chunk the window
 * cuts, or chunks that overlap, come as cells (merged). */
/* Two writes of 60 samples of row, offsets 0..590 step 10, then 1000..1590, with the value
 * bits value(offset): a chunk cell each. */
static void write_two_chunks(pt_backend *b, const char *row, uint64_t (*value)(uint32_t q))
{
    static ct_batch bt;
    static uint8_t v[2 * 60][8];
    for (int w = 0; w < 2; w++) {
        bt.n = 0;
        for (uint32_t i = 0; i < 60; i++) {
            uint32_t q = (uint32_t)w * 1000 + i * 10;
            pt_put_be64(v[w * 60 + i], value(q));
            ct_add_raw(&bt, PT_TABLE_POINTS, pt_slice_str(row), q, (pt_slice){v[w * 60 + i], 8});
        }
        is(ct_write(b, &bt), 0, "streams: a write of 60 samples of %s (write %d)", row, w);
    }
}

static void test_streams(pt_backend *b)
{
    static ct_batch bt;
    write_two_chunks(b, "str/a", stream_value);
    streamed st = scan_streamed(b, 0, 0);
    ok(st.streams == 2 && st.stream_samples == 120 && st.cells == 0 && !st.bad,
       "streams: two chunks apart go as two streams (%zu streams, %zu samples, %zu cells)",
       st.streams, st.stream_samples, st.cells);
    st = scan_streamed(b, 500, 0);
    ok(st.streams == 0 && st.cells == 70 && !st.bad,
       "streams: a window cutting a chunk gives the row as cells (%zu cells)", st.cells);
    bt.n = 0;
    static uint8_t few[2][8];
    for (uint32_t i = 0; i < 2; i++) {
        pt_put_be64(few[i], stream_value(2000 + i));
        ct_add_raw(&bt, PT_TABLE_POINTS, PT_SLICE_LIT("str/a"), 2000 + i, (pt_slice){few[i], 8});
    }
    is(ct_write(b, &bt), 0, "streams: a write of 2 samples after them");
    st = scan_streamed(b, 0, 0);
    ok(st.streams == 0 && st.cells == 122 && !st.bad,
       "streams: a row with a chunk of a few samples comes as cells (%zu cells)", st.cells);
    bt.n = 0;
    static uint8_t over[2][8];
    pt_put_be64(over[0], stream_value(5));
    pt_put_be64(over[1], stream_value(1005));
    ct_add_raw(&bt, PT_TABLE_POINTS, PT_SLICE_LIT("str/a"), 5, (pt_slice){over[0], 8});
    ct_add_raw(&bt, PT_TABLE_POINTS, PT_SLICE_LIT("str/a"), 1005, (pt_slice){over[1], 8});
    is(ct_write(b, &bt), 0, "streams: a write whose chunk overlaps both");
    st = scan_streamed(b, 0, 0);
    ok(st.streams == 0 && st.cells == 124 && !st.bad,
       "streams: overlapping chunks are merged into cells (%zu cells)", st.cells);

    /* Decimal values: chunks in the decimal layout go as streams encoded from it. */
    write_two_chunks(b, "str/d", decimal_value);
    st = scan_row_streamed(b, "str/d", 0, 0, decimal_value);
    ok(st.streams == 2 && st.stream_samples == 120 && st.cells == 0 && !st.bad,
       "streams: decimal chunks go as two streams, every value exact (%zu streams, %zu "
       "samples, %zu cells, %zu bad)", st.streams, st.stream_samples, st.cells, st.bad);
    st = scan_row_streamed(b, "str/d", 500, 0, decimal_value);
    ok(st.streams == 0 && st.cells == 70 && !st.bad,
       "streams: ...a window cutting one gives the row as cells (%zu streams, %zu cells)",
       st.streams, st.cells);
}

static void test_chunks(pt_backend *b)
{
    enum { N = 200 };
    static ct_batch bt;
    static char vals[N][9];
    bt.n = 0;
    for (uint32_t i = 0; i < N; i++) {
        snprintf(vals[i], sizeof(vals[i]), "%08u", (unsigned)i);
        ct_add(&bt, PT_TABLE_POINTS, "chk/a", i * 1000, vals[i]);
    }
    pt_bt_stats s0 = stats(b);
    is(ct_write(b, &bt), 0, "chunks: %d cells of one row in one write", N);
    pt_bt_stats s1 = stats(b);
    is(s1.points.rows_mutated - s0.points.rows_mutated, 1, "...one row entry");
    is(s1.points.cells_written - s0.points.cells_written, 1, "...holding one (chunk) cell");
    pt_row_range r = CT_RANGE("chk/a", "chk/b");
    ct_sink sink;
    ct_sink_init(&sink);
    is(ct_scan(b, PT_TABLE_POINTS, &r, 1, CT_NONE, CT_NONE, 0, &sink), 0, "...scan the row");
    pt_bt_stats s2 = stats(b);
    is(sink.calls, N, "...%d cells come back", N);
    is(s2.points.cells_read - s1.points.cells_read, 1, "...from one Bigtable cell");
    ct_sink_free(&sink);
    bt.n = 0;
    ct_add(&bt, PT_TABLE_POINTS, "chk/a", 0, "x");
    ct_add(&bt, PT_TABLE_POINTS, "chk/a", PT_BT_CHUNK_SPAN_MS + 1, "y");
    is(ct_write(b, &bt), 0, "two cells further apart than a chunk spans");
    is(stats(b).points.cells_written - s2.points.cells_written, 2, "...go as two chunk cells");

    /* Single cells as older versions wrote them, under and beside a chunk. */
    uint8_t q[4][4];
    for (uint32_t i = 1; i <= 3; i++)
        pt_put_be32(q[i], i);
    int raw = write_raw(b, "chk/old", (pt_slice){q[1], 4}, PT_SLICE_LIT("old1")) |
              write_raw(b, "chk/old", (pt_slice){q[2], 4}, PT_SLICE_LIT("old2")) |
              write_raw(b, "chk/old", (pt_slice){q[3], 4}, PT_SLICE_LIT("old3"));
    is(raw, 0, "three single-sample cells written as older versions did");
    is_str(CT_POINTS(b, "chk/old", "chk/olf"),
           "chk/old:00000001=old1;chk/old:00000002=old2;chk/old:00000003=old3;",
           "...read back as they are");
    bt.n = 0;
    ct_add(&bt, PT_TABLE_POINTS, "chk/old", 2, "new2");
    ct_add(&bt, PT_TABLE_POINTS, "chk/old", 4, "new4");
    is(ct_write(b, &bt), 0, "a chunk over offsets 2 and 4");
    is_str(CT_POINTS(b, "chk/old", "chk/olf"),
           "chk/old:00000001=old1;chk/old:00000002=new2;chk/old:00000003=old3;"
           "chk/old:00000004=new4;",
           "the chunk's cell wins over the single cell at 2");
    is_str(window(b, "chk/old", "chk/olf", 3, 5, 0), "chk/old:00000003=old3;chk/old:00000004=new4;",
           "a window inside the chunk, which starts before it");
    is_str(window(b, "chk/old", "chk/olf", 3, 4, 0), "chk/old:00000003=old3;",
           "a window that holds only a single cell between chunk cells");

    /* A row whose chunk starts before the window and ends before it too: the server sends
     * it, the row delivers nothing and must not count toward the row limit. */
    bt.n = 0;
    ct_add(&bt, PT_TABLE_POINTS, "chk/l1", 0, "a");
    ct_add(&bt, PT_TABLE_POINTS, "chk/l1", 1000, "b");
    ct_add(&bt, PT_TABLE_POINTS, "chk/l2", 5500, "c");
    ct_add(&bt, PT_TABLE_POINTS, "chk/l3", 5600, "d");
    is(ct_write(b, &bt), 0, "rows for the row limit");
    is_str(window(b, "chk/l", "chk/m", 5000, 6000, 1), "chk/l2:0000157c=c;",
           "row limit 1: the first row with a cell in the window");
    is_str(window(b, "chk/l", "chk/m", 5000, 6000, 0), "chk/l2:0000157c=c;chk/l3:000015e0=d;",
           "...and without a limit both");

    /* A chunk cell that does not decode. */
    uint8_t bad[16];
    pt_bt_chunkqual cq = {10, 20, 1};
    pt_bt_chunk_qual_put(bad, &cq);
    is(write_raw(b, "chk/bad", (pt_slice){bad, 16}, PT_SLICE_LIT("\x03garbage")), 0,
       "a corrupt chunk cell");
    is_str(CT_POINTS(b, "chk/bad", "chk/bae"), "ERROR -200",
           "a scan of its row fails as corruption (PT_EINTERNAL), not a crash");
}

static void test_env_endpoint(const char *endpoint)
{
    pt_backend b;
    char err[256] = "";
    setenv("BIGTABLE_EMULATOR_HOST", endpoint, 1);
    int rv = open_bt(&b, NULL, "", 0, err, sizeof(err));
    unsetenv("BIGTABLE_EMULATOR_HOST");
    is(rv, 0, "open with BIGTABLE_EMULATOR_HOST and no endpoint");
    if (rv != 0)
        return;
    pt_row_range r[] = {CT_RANGE("c01/", "c01/\xff")};
    is_str(ct_show(&b, PT_TABLE_POINTS, r, 1), "c01/r:00000001=P;",
           "it reaches the same emulator and tables");
    pt_backend_close(&b);
}

static void api_suite(pt_backend *b)
{
    pt_api_conformance(b, "bigtable(emulator)");
}

static void hist_suite(pt_backend *b)
{
    pt_hist_conformance(b, NULL, NULL, "bigtable(emulator)");
}

static void exemplar_suite(pt_backend *b)
{
    pt_exemplar_conformance(b, NULL, NULL, "bigtable(emulator)");
}

/* A compaction pass, with "now" far ahead so every row is past the guard. */
static void compact_bt(void *ud)
{
    pt_backend *b = ud;
    if (pt_bt_compact_pass(b->state, INT64_C(9000000000000)) != 0)
        diag("compaction pass failed");
}

static void delete_suite(pt_backend *b)
{
    pt_delete_conformance(b, compact_bt, b, "bigtable(emulator)");
}

/* Deletes through the write-back buffer, on tables of their own. */
static void test_buffered_delete(const char *endpoint)
{
    char dir[] = "/tmp/pt-btdel-XXXXXX", err[256] = "";
    if (!ok(mkdtemp(dir) != NULL, "a directory for the buffer of the deletes"))
        return;
    pt_bigtable_conf bc = {.project = "proj", .instance = "inst",
                           .endpoint = (char *)endpoint, .table_prefix = "delb_",
                           .buffer_path = dir};
    pt_backend_config cfg = {.own = &bc};
    pt_backend b;
    if (ok(pt_backend_open(&b, &pt_backend_bigtable, &cfg, err, sizeof(err)) == 0 &&
               init_bt(&b, err, sizeof(err)) == 0,
           "buffered deletes: open and tables %s", err)) {
        pt_delete_conformance(&b, compact_bt, &b, "bigtable(emulator, write-back)");
        pt_backend_close(&b);
    }
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ok(system(cmd) == 0, "buffered deletes: buffer directory removed");
}

/* Runs suite on a store of its own tables (named with prefix) on the emulator, made first:
 * the test "tables for <what>". */
static void on_own_tables(const char *endpoint, const char *prefix, const char *what,
                          void (*suite)(pt_backend *b))
{
    char err[256] = "";
    pt_backend b;
    int opened = open_bt(&b, endpoint, prefix, 0, err, sizeof(err));
    if (ok(opened == 0 && init_bt(&b, err, sizeof(err)) == 0, "tables for %s %s", what, err))
        suite(&b);
    if (opened == 0)
        pt_backend_close(&b);
}

/* The write-back buffer (storage.bigtable.buffer_path) on tables of its own: the suite
 * with a head so small that every write flushes first (cells read from the head, from
 * Bigtable, or both); then a close flushes the rest, and a store without a buffer on the
 * same tables reads every cell. */
static void test_buffered(const char *endpoint)
{
    char dir[] = "/tmp/pt-btbuf-XXXXXX", err[256] = "";
    if (!ok(mkdtemp(dir) != NULL, "a directory for the buffer"))
        return;
    pt_bigtable_conf bc = {.project = "proj", .instance = "inst",
                           .endpoint = (char *)endpoint, .table_prefix = "buf_",
                           .buffer_path = dir};
    pt_backend_config cfg = {.own = &bc};
    pt_backend b, direct;
    if (!ok(pt_backend_open(&b, &pt_backend_bigtable, &cfg, err, sizeof(err)) == 0 &&
                init_bt(&b, err, sizeof(err)) == 0,
            "buffered: open and tables %s", err))
        return;
    pt_bt *bt = b.state;
    pt_embedded_set_budget(&bt->wb, 1);
    pt_conformance_run(&b, "bigtable(emulator, write-back)");
    digest pts = table_digest(&b, PT_TABLE_POINTS), idx = table_digest(&b, PT_TABLE_INDEX);
    pt_backend_close(&b);
    if (!ok(open_bt(&direct, endpoint, "buf_", 0, err, sizeof(err)) == 0, "direct open %s", err))
        return;
    digest pts2 = table_digest(&direct, PT_TABLE_POINTS);
    digest idx2 = table_digest(&direct, PT_TABLE_INDEX);
    ok(pts.cells > 4000 && pts2.cells == pts.cells && pts2.h == pts.h,
       "buffered: after a close Bigtable alone holds the %zu points cells", pts.cells);
    ok(idx2.cells == idx.cells && idx2.h == idx.h, "buffered: and the %zu index cells",
       idx.cells);
    pt_backend_close(&direct);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ok(system(cmd) == 0, "buffer directory removed");
}

int main(void)
{
    char endpoint[64], err[256] = "";
    int setup = bt_emulator_setup(endpoint, sizeof(endpoint));
    if (setup > 0)
        return 0;
    test_open_errors();
    if (setup < 0)
        return done_testing();

    test_before_init(endpoint);
    pt_backend b;
    is(open_bt(&b, endpoint, "", 0, err, sizeof(err)), 0, "open on the emulator");
    if (!b.state) {
        diag("open: %s", err);
        return done_testing();
    }
    test_init(&b, endpoint);
    pt_conformance_run(&b, "bigtable(emulator)");
    test_bigtable_only(&b);
    test_counters(&b);
    test_chunks(&b);
    test_streams(&b);
    {
        /* The index on Bigtable: two stores on their own tables. */
        pt_backend full, tiny;
        int fo = open_bt(&full, endpoint, "ixfull_", 0, err, sizeof(err));
        int to = open_bt(&tiny, endpoint, "ixtiny_", 0, err, sizeof(err));
        if (ok(fo == 0 && to == 0 && init_bt(&full, err, sizeof(err)) == 0 &&
                   init_bt(&tiny, err, sizeof(err)) == 0,
               "tables for the index conformance %s", err))
            pt_index_conformance(&full, &tiny, "bigtable(emulator)");
        if (fo == 0)
            pt_backend_close(&full);
        if (to == 0)
            pt_backend_close(&tiny);
    }
    /* The browsing API, native histograms and exemplars, each on tables of its own. */
    on_own_tables(endpoint, "api_", "the API", api_suite);
    on_own_tables(endpoint, "hist_", "histograms", hist_suite);
    on_own_tables(endpoint, "ex_", "exemplars", exemplar_suite);
    on_own_tables(endpoint, "del_", "deletes", delete_suite);
    test_buffered_delete(endpoint);
    test_env_endpoint(endpoint);
    test_buffered(endpoint);
    pt_backend_close(&b);
    emu_stop();
    return done_testing();
}
