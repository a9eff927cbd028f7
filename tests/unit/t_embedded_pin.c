/* The embedded store's pinned table index blocks (storage.embedded.table_index_memory,
 * rocks.c): kept loaded when the store's table files fit the budget, read when needed
 * when they do not (at the open, or once a store that grew past it has been reopened by
 * the flush thread), and the answers the same either way. */
#include "embedded_helpers.h"

enum { ROWS = 300, CELLS = 40, STEP = 15000 };

static int open_pinned(pt_backend *b, const char *path, size_t budget)
{
    return open_conf(b, (pt_embedded_conf){.path = (char *)path, .table_index_memory = budget});
}

/* open_pinned for a test step: a failure is a failed test (and ends the program's tests). */
static int reopen(pt_backend *b, const char *path, size_t budget)
{
    if (open_pinned(b, path, budget) == 0)
        return 0;
    ok(0, "pin: open with a budget of %zu bytes", budget);
    return -1;
}

static void value_of(char out[9], int r, int c)
{
    snprintf(out, 9, "%04u%04u", (unsigned)r % 10000, (unsigned)c % 10000);
}

/* Rows "pin/NNNN" with cells [from, from + n) of value_of. */
static int fill(pt_backend *b, int from, int n)
{
    static char rows[ROWS][16], vals[ROWS][CELLS][9];
    int fails = 0;
    ct_batch bt = {0};
    for (int r = 0; r < ROWS; r++) {
        snprintf(rows[r], sizeof(rows[r]), "pin/%04d", r);
        for (int c = from; c < from + n; c++) {
            value_of(vals[r][c], r, c);
            if (bt.n == CT_BATCH_MAX) {
                fails += ct_write(b, &bt) != 0;
                bt.n = 0;
            }
            ct_add(&bt, PT_TABLE_POINTS, rows[r], (uint32_t)c * STEP, vals[r][c]);
        }
    }
    if (bt.n)
        fails += ct_write(b, &bt) != 0;
    return fails;
}

typedef struct tally {
    size_t cells, bad;
} tally;

static int check_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    tally *t = ud;
    int r;
    char rs[16], want[9];
    snprintf(rs, sizeof(rs), "%.*s", (int)(row.n < 15 ? row.n : 15), (const char *)row.p);
    uint32_t q = qual.n == 4 ? pt_get_be32(qual.p) : 1;
    if (sscanf(rs, "pin/%d", &r) != 1 || q % STEP != 0 || value.n != 8) {
        t->bad++;
        return 0;
    }
    value_of(want, r, (int)(q / STEP));
    t->bad += memcmp(value.p, want, 8) != 0;
    t->cells++;
    return 0;
}

/* Every row's cells with qualifiers in [lo, hi) cells, each checked. */
static tally scan_window(pt_backend *b, int lo, int hi)
{
    static pt_row_range ranges[ROWS];
    static char keys[ROWS][16];
    uint8_t qlo[4], qhi[4];
    pt_put_be32(qlo, (uint32_t)lo * STEP);
    pt_put_be32(qhi, (uint32_t)hi * STEP);
    for (int r = 0; r < ROWS; r++) {
        int n = snprintf(keys[r], sizeof(keys[r]), "pin/%04d", r);
        keys[r][n] = 0;
        ranges[r] = (pt_row_range){{(const uint8_t *)keys[r], (size_t)n},
                                   {(const uint8_t *)keys[r], (size_t)n + 1}};
    }
    pt_scan s = {.table = PT_TABLE_POINTS, .ranges = ranges, .nranges = ROWS,
                 .qual_start = {qlo, 4}, .qual_end = {qhi, 4}};
    tally y = {0};
    int rv = pt_backend_scan(b, &s, check_cell, &y);
    if (rv != 0) {
        diag("scan: %s", pt_strerror(rv));
        y.bad++;
    }
    return y;
}

static pt_embedded_stats stats(pt_backend *b)
{
    pt_embedded_stats st;
    pt_embedded_get_stats(b, &st);
    return st;
}

int main(void)
{
    char t[] = "/tmp/pt-emb-pin-XXXXXX";
    if (emb_tmpdir(t) != 0)
        return done_testing();
    char path[512];
    snprintf(path, sizeof(path), "%s/store", t);
    pt_backend b;

    /* A new store fits any budget; written and closed, its cells are in table files. */
    if (reopen(&b, path, 64u << 20) != 0)
        return done_testing();
    is(stats(&b).table_index_pinned, 1, "pin: an empty store keeps its index blocks loaded");
    is(fill(&b, 0, CELLS / 2), 0, "pin: %d rows written", ROWS);
    pt_backend_close(&b);

    if (reopen(&b, path, 64u << 20) != 0)
        return done_testing();
    pt_embedded_stats st = stats(&b);
    is(st.table_index_pinned, 1, "pin: a store within the budget keeps them loaded");
    ok(st.block_cache_pinned_bytes > 0, "pin: ... %llu bytes pinned at the open",
       (unsigned long long)st.block_cache_pinned_bytes);
    tally y = scan_window(&b, 5, 15);
    ok(y.cells == (size_t)ROWS * 10 && y.bad == 0, "pin: a scan answers every cell (%zu)",
       y.cells);
    pt_backend_close(&b);

    /* A budget the table files' estimate exceeds: read when needed, same answers. */
    if (reopen(&b, path, 1) != 0)
        return done_testing();
    is(stats(&b).table_index_pinned, 0, "pin: a store past the budget reads them when needed");
    y = scan_window(&b, 5, 15);
    ok(y.cells == (size_t)ROWS * 10 && y.bad == 0, "pin: ... and answers the same (%zu)",
       y.cells);
    pt_backend_close(&b);

    /* 0: never. */
    if (reopen(&b, path, 0) != 0)
        return done_testing();
    is(stats(&b).table_index_pinned, 0, "pin: a budget of 0 pins nothing");
    pt_backend_close(&b);

    /* A store that outgrows its budget while open: the flush thread reopens RocksDB with
     * the blocks read when needed; nothing written is lost, and writes go on. The
     * budget: what this store pins now plus a little, so that the next flush passes it. */
    if (reopen(&b, path, 64u << 20) != 0)
        return done_testing();
    size_t now = stats(&b).block_cache_pinned_bytes;
    pt_backend_close(&b);
    if (reopen(&b, path, now + 1024) != 0)
        return done_testing();
    is(stats(&b).table_index_pinned, 1, "pin: within a budget of %zu bytes", now + 1024);
    int fails = fill(&b, CELLS / 2, CELLS / 2);
    is(fails, 0, "pin: more cells written");
    is(pt_embedded_flush(&b), 0, "pin: ... and flushed into a new table file");
    int pinned = 1;
    for (int i = 0; i < 100 && pinned; i++) { /* checked once a second */
        pinned = stats(&b).table_index_pinned;
        if (pinned)
            usleep(50000);
    }
    is(pinned, 0, "pin: past its budget, the store reads them when needed from then on");
    is(fill(&b, 0, 1), 0, "pin: writes go on after the reopen");
    y = scan_window(&b, 0, CELLS);
    ok(y.cells == (size_t)ROWS * CELLS && y.bad == 0,
       "pin: every cell written reads back after the reopen (%zu)", y.cells);
    pt_backend_close(&b);

    rm_rf(t);
    return done_testing();
}
