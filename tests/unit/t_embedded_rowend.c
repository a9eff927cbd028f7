/* How the embedded store's one-row scans find a row's chunks (scan.c, rocks.c): the
 * scan's iterator is bounded by the row it reads, the bound moving from row to row, and a
 * row's chunks are sought forward from a chunk's span before the window, the span learnt
 * from the rows before. Every row of a scan of many one-row ranges reads back whole
 * whichever window it asks for, however its chunks share data blocks with its
 * neighbours, and whether the span learnt fits it or not; a row read from near its end
 * reads one data block (RocksDB's block-read count, cache emptied by a reopen): no block
 * after the row, none before the chunk. */
#include "embedded_helpers.h"

enum {
    ROWS = 120,        /* rows sharing data blocks: a few chunks each */
    CELLS = 3000,      /* three chunks a row, 1,024 samples at most */
    WIDE = 48,         /* rows whose one chunk fills a data block of its own */
    WIDE_CELLS = 1024, /* one chunk of random values: over the 8 KiB block */
    STEP = 15000,
};

static uint8_t vals[ROWS][CELLS][8];
static uint8_t wide[WIDE][WIDE_CELLS][8];
static char keys[ROWS + WIDE][16];

/* Values a gauge would take: a few distinct ones, so that a chunk compresses to about a
 * kilobyte and a data block holds the ends of neighbouring rows. */
static void gauge_value(uint8_t out[8])
{
    double d = (double)rnd(4) * 0.5;
    uint64_t bits;
    memcpy(&bits, &d, 8);
    pt_put_be64(out, bits);
}

static int write_rows(pt_backend *b)
{
    int fails = 0;
    ct_batch bt = {0};
    for (int r = 0; r < ROWS + WIDE; r++) {
        int shared = r < ROWS;
        snprintf(keys[r], sizeof(keys[r]), shared ? "rb/%04d" : "rw/%04d", r);
        for (int c = 0; c < (shared ? CELLS : WIDE_CELLS); c++) {
            uint8_t *v = shared ? vals[r][c] : wide[r - ROWS][c];
            if (shared) {
                gauge_value(v);
            } else {
                for (int i = 0; i < 8; i++)
                    v[i] = (uint8_t)rnd(256);
            }
            if (bt.n == CT_BATCH_MAX) {
                fails += ct_write(b, &bt) != 0;
                bt.n = 0;
            }
            ct_add_raw(&bt, PT_TABLE_POINTS, pt_slice_str(keys[r]), (uint32_t)c * STEP,
                       (pt_slice){v, 8});
        }
    }
    if (bt.n)
        fails += ct_write(b, &bt) != 0;
    return fails;
}

typedef struct tally {
    size_t cells, bad;
    int lo, hi; /* the window, in cells: [lo, hi) */
} tally;

/* A cell of a row "xx/NNNN": the row's number (-1: not such a row, or a qualifier that is
 * not 4 bytes) and its qualifier. */
static int cell_of(pt_slice row, pt_slice qual, uint32_t *q)
{
    char rs[16];
    int r;
    snprintf(rs, sizeof(rs), "%.*s", (int)(row.n < 15 ? row.n : 15), (const char *)row.p);
    *q = qual.n == 4 ? pt_get_be32(qual.p) : 0;
    return qual.n == 4 && rs[0] && rs[1] && rs[2] == '/' && sscanf(rs + 3, "%d", &r) == 1 ? r
                                                                                           : -1;
}

static int check_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    tally *t = ud;
    uint32_t q;
    int r = cell_of(row, qual, &q);
    int c = (int)(q / STEP), shared = r >= 0 && row.p[1] == 'b';
    if (r < 0 || r >= ROWS + WIDE || shared != (r < ROWS) || q % STEP != 0 || c < t->lo ||
        c >= t->hi || c >= (shared ? CELLS : WIDE_CELLS) || value.n != 8) {
        t->bad++;
        return 0;
    }
    t->bad += memcmp(value.p, shared ? vals[r][c] : wide[r - ROWS][c], 8) != 0;
    t->cells++;
    return 0;
}

/* Rows from, from + every, ... below to, one scan of one-row ranges; the window [lo, hi)
 * in cells, hi < 0 meaning no end (past every row's last cell). */
static tally scan_rows(pt_backend *b, int from, int to, int every, int lo, int hi)
{
    static pt_row_range ranges[ROWS + WIDE];
    static char ends[ROWS + WIDE][17];
    size_t n = 0;
    for (int r = from; r < to; r += every) {
        size_t len = strlen(keys[r]);
        memcpy(ends[r], keys[r], len + 1); /* the range's end: the row and a 0x00 */
        ranges[n++] = (pt_row_range){{(const uint8_t *)keys[r], len},
                                     {(const uint8_t *)ends[r], len + 1}};
    }
    uint8_t qlo[4], qhi[4];
    pt_put_be32(qlo, (uint32_t)lo * STEP);
    pt_put_be32(qhi, (uint32_t)(hi < 0 ? 0 : hi) * STEP);
    pt_scan s = {.table = PT_TABLE_POINTS, .ranges = ranges, .nranges = n,
                 .qual_start = {qlo, lo ? 4 : 0}, .qual_end = {qhi, hi < 0 ? 0 : 4}};
    tally t = {.lo = lo, .hi = hi < 0 ? INT32_MAX : hi};
    int rv = pt_backend_scan(b, &s, check_cell, &t);
    if (rv != 0) {
        diag("scan: %s", pt_strerror(rv));
        t.bad++;
    }
    return t;
}

/* No read-ahead threads (the block reads counted are the scan's own), the table files'
 * index blocks kept loaded (what is counted is data blocks). A failure is a failed test. */
static int open_cold(pt_backend *b, const char *path)
{
    int rv = open_conf(b, (pt_embedded_conf){.path = (char *)path, .read_threads = 0,
                                             .table_index_memory = 64 << 20});
    if (rv != 0)
        ok(0, "rowend: open %s", path);
    return rv;
}

static size_t cells_in(int lo, int hi, int cells)
{
    if (hi < 0 || hi > cells)
        hi = cells;
    return hi > lo ? (size_t)(hi - lo) : 0;
}

/* Makes the store dir/name (path: its path) with write's rows, and opens it again: the
 * head becomes chunks. 0, or -1 after a failed test. */
static int written_store(pt_backend *b, const char *dir, const char *name,
                         int (*write)(pt_backend *), int rows, char *path, size_t pathlen)
{
    snprintf(path, pathlen, "%s/%s", dir, name);
    if (open_cold(b, path) != 0)
        return -1;
    is(write(b), 0, "%s: %d rows written", name, rows);
    pt_backend_close(b);
    return open_cold(b, path);
}

static void test_rows_whole(const char *dir)
{
    char path[512];
    pt_backend b;
    if (written_store(&b, dir, "rowend", write_rows, ROWS + WIDE, path, sizeof(path)) != 0)
        return;

    /* Windows inside the rows, to their ends and past them, every row and every third. */
    static const int win[][2] = {{0, -1}, {1000, -1}, {2999, -1}, {0, 1500}, {1023, 2049},
                                 {2500, 5000}};
    for (size_t w = 0; w < sizeof(win) / sizeof(win[0]); w++) {
        int lo = win[w][0], hi = win[w][1];
        for (int every = 1; every <= 3; every += 2) {
            size_t rows = (size_t)((ROWS + every - 1) / every);
            tally t = scan_rows(&b, 0, ROWS, every, lo, hi);
            ok(t.bad == 0 && t.cells == rows * cells_in(lo, hi, CELLS),
               "rowend: every %d%s row, cells [%d, %d): %zu cells (want %zu), %zu wrong",
               every, every == 1 ? "" : "rd", lo, hi, t.cells, rows * cells_in(lo, hi, CELLS),
               t.bad);
        }
    }
    /* Rows of both kinds in one scan: the bound moves from a row that shares its blocks to
     * rows that fill blocks of their own. */
    tally t = scan_rows(&b, 0, ROWS + WIDE, 1, 500, -1);
    size_t want = ROWS * cells_in(500, -1, CELLS) + WIDE * cells_in(500, -1, WIDE_CELLS);
    ok(t.bad == 0 && t.cells == want, "rowend: both kinds of rows: %zu cells (want %zu)",
       t.cells, want);
    /* The flushes left each row's chunks in a few files; one sorted run below, so that a
     * row of those filling a block each is one data block. */
    embedded *e = b.state;
    rocksdb_compact_range_cf(e->r.db, e->r.cf[CF_POINTS], NULL, 0, NULL, 0);
    pt_backend_close(&b);

    /* Every fourth of those rows, read from near its end with no end to the window, the
     * block cache empty: one data block a row once the scan has learnt the chunks' span
     * (the first row is sought backward, and SeekForPrev reads the block before too).
     * Seeking each row backward would read two blocks a row; without the bound, finding
     * the row's end reads the block after it too. */
    if (open_cold(&b, path) != 0)
        return;
    rocksdb_perfcontext_t *pc = rocksdb_perfcontext_create();
    rocksdb_set_perf_level(rocksdb_enable_count);
    rocksdb_perfcontext_reset(pc);
    t = scan_rows(&b, ROWS, ROWS + WIDE, 4, 1000, -1);
    uint64_t blocks = rocksdb_perfcontext_metric(pc, rocksdb_block_read_count);
    rocksdb_set_perf_level(rocksdb_disable);
    rocksdb_perfcontext_destroy(pc);
    ok(t.bad == 0 && t.cells == (WIDE / 4) * cells_in(1000, -1, WIDE_CELLS) &&
           blocks <= WIDE / 4 + 1,
       "rowend: %d rows read at their end, %zu cells: %llu data blocks read (at most %d)",
       WIDE / 4, t.cells, (unsigned long long)blocks, WIDE / 4 + 1);
    pt_backend_close(&b);
}

/* ---- rows sought from a chunk's span before the window ----
 * Rows "sp/NNN" of four kinds, alternating in key order so that the span a scan learnt
 * from one row is wrong for the next: samples every 15 s (chunks of ~4 h), every 600 s
 * (chunks of ~7 days), every 15 s from 8 h 20 min on (the row begins inside most
 * windows), and every 15 s with no samples between 4 h 10 min and 8 h 20 min. */
enum { SPAN_ROWS = 40, SPAN_CELLS = 3000 };

static char span_keys[SPAN_ROWS][16];

static uint32_t span_step(int r)
{
    return r % 4 == 1 ? 600000 : 15000;
}

/* Does row r hold cell c? */
static int span_has(int r, int c)
{
    return r % 4 == 2 ? c >= 2000 : r % 4 == 3 ? c < 1000 || c >= 2000 : 1;
}

static void span_value(uint8_t out[8], int r, int c)
{
    double d = r * 10000.0 + c;
    uint64_t bits;
    memcpy(&bits, &d, 8);
    pt_put_be64(out, bits);
}

static int span_write(pt_backend *b)
{
    static uint8_t v[SPAN_ROWS][SPAN_CELLS][8];
    int fails = 0;
    ct_batch bt = {0};
    for (int r = 0; r < SPAN_ROWS; r++) {
        snprintf(span_keys[r], sizeof(span_keys[r]), "sp/%03d", r);
        for (int c = 0; c < SPAN_CELLS; c++) {
            if (!span_has(r, c))
                continue;
            span_value(v[r][c], r, c);
            if (bt.n == CT_BATCH_MAX) {
                fails += ct_write(b, &bt) != 0;
                bt.n = 0;
            }
            ct_add_raw(&bt, PT_TABLE_POINTS, pt_slice_str(span_keys[r]), (uint32_t)c * span_step(r),
                       (pt_slice){v[r][c], 8});
        }
    }
    if (bt.n)
        fails += ct_write(b, &bt) != 0;
    return fails;
}

typedef struct span_tally {
    uint64_t lo, hi; /* the window in qualifiers */
    size_t cells, bad;
    size_t per_row[SPAN_ROWS];
} span_tally;

static int span_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    span_tally *t = ud;
    uint32_t q;
    int r = cell_of(row, qual, &q);
    uint8_t want[8];
    if (r < 0 || r >= SPAN_ROWS || row.p[0] != 's' || q % span_step(r) != 0 ||
        q < t->lo || q >= t->hi || q / span_step(r) >= SPAN_CELLS ||
        !span_has(r, (int)(q / span_step(r))) || value.n != 8) {
        t->bad++;
        return 0;
    }
    span_value(want, r, (int)(q / span_step(r)));
    t->bad += memcmp(value.p, want, 8) != 0;
    t->per_row[r]++;
    t->cells++;
    return 0;
}

/* Cells of row r in [lo, hi). */
static size_t span_want(int r, uint64_t lo, uint64_t hi)
{
    size_t n = 0;
    for (int c = 0; c < SPAN_CELLS; c++) {
        uint64_t q = (uint64_t)c * span_step(r);
        n += span_has(r, c) && q >= lo && q < hi;
    }
    return n;
}

static void test_spans(const char *dir)
{
    char path[512];
    pt_backend b;
    if (written_store(&b, dir, "spans", span_write, SPAN_ROWS, path, sizeof(path)) != 0)
        return;
    static pt_row_range ranges[SPAN_ROWS];
    static char ends[SPAN_ROWS][17];
    for (int r = 0; r < SPAN_ROWS; r++) {
        size_t len = strlen(span_keys[r]);
        memcpy(ends[r], span_keys[r], len + 1);
        ranges[r] = (pt_row_range){{(const uint8_t *)span_keys[r], len},
                                   {(const uint8_t *)ends[r], len + 1}};
    }
    /* Window starts inside a dense chunk, in the gap, before the young rows' start, deep
     * in the sparse rows; ends inside, at and past the rows' ends. Each window twice: the
     * second scan starts with the span the first left. */
    static const uint64_t win[][2] = {
        {1000000, 2000000},  {14000000, 16000000},  {20000000, 31000000},
        {29990000, 1ull << 32}, {44000000, 1ull << 32}, {500000000, 900000000},
        {1700000000, 1ull << 32}, {61000000, 62000000}, {15000, 1ull << 32},
    };
    int fails = 0;
    size_t total = 0;
    for (size_t w = 0; w < sizeof(win) / sizeof(win[0]); w++) {
        for (int k = 0; k < 2; k++) {
            uint8_t qlo[4], qhi[4];
            pt_put_be32(qlo, (uint32_t)win[w][0]);
            pt_put_be32(qhi, (uint32_t)(win[w][1] >> 32 ? 0 : win[w][1]));
            pt_scan s = {.table = PT_TABLE_POINTS, .ranges = ranges, .nranges = SPAN_ROWS,
                         .qual_start = {qlo, 4}, .qual_end = {qhi, win[w][1] >> 32 ? 0 : 4}};
            span_tally t = {.lo = win[w][0], .hi = win[w][1]};
            int rv = pt_backend_scan(&b, &s, span_cell, &t);
            int bad = rv != 0 || t.bad != 0;
            for (int r = 0; r < SPAN_ROWS; r++) {
                size_t want = span_want(r, win[w][0], win[w][1]);
                if (t.per_row[r] != want) {
                    if (!bad)
                        diag("spans: window [%llu, %llu) row %d: %zu cells, want %zu",
                             (unsigned long long)win[w][0], (unsigned long long)win[w][1], r,
                             t.per_row[r], want);
                    bad = 1;
                }
            }
            fails += bad;
            total += t.cells;
        }
    }
    ok(fails == 0 && total > 0,
       "spans: 9 windows twice over rows of four kinds, every row's cells in each (%zu "
       "cells), %d scans wrong",
       total, fails);
    pt_backend_close(&b);
}

int main(void)
{
    static emb_test_fn *const tests[] = {test_rows_whole, test_spans};
    return emb_main("rowend", tests, sizeof(tests) / sizeof(tests[0]));
}
