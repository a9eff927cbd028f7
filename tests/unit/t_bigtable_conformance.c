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
#include "index_conformance.h"
#include "api_conformance.h"
#include "exemplar_conformance.h"
#include "hist_conformance.h"

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
    test_env_endpoint(endpoint);
    pt_backend_close(&b);
    emu_stop();
    return done_testing();
}
