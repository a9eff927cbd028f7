/*
 * Roll-ups on Google's Bigtable emulator (bt_emulator.h; rollups.c): two promtables'
 * builders on one pair of tables, one lease between them: the holder builds, the other's
 * passes build nothing until the lease lapses, then it takes over from the watermark; the
 * stage reads back from either. Without the emulator binary the test is skipped.
 */
#include "bt_emulator.h"
#include "matcher.h"
#include "rollups.h"
#include "store_helpers.h"

#define HOUR 3600000LL
#define DAY 86400000LL
static const int64_t D = 19675 * DAY;

static int open_store(pt_backend *b, pt_store *st, const char *endpoint)
{
    char err[256] = "";
    if (open_bt(b, endpoint, "ru_", 0, err, sizeof(err)) != 0 || init_bt(b, err, sizeof(err))) {
        diag("open: %s", err);
        return -1;
    }
    *st = (pt_store){.index_bucket_ms = DAY, .max_series = 1000, .max_samples = 0};
    return pt_store_open(st, b, &(pt_store_caches){0});
}

/* A gauge of one sample a minute over [from, to), 8 a request entry. */
static int write_gauge(pt_store *st, int64_t from, int64_t to)
{
    pt_arena a;
    pt_arena_init(&a, 1 << 16, 0);
    int rv = 0;
    for (int64_t t = from; t < to && rv == 0; t += 8 * 60000) {
        tseries e = {{"__name__", "bt_gauge", "job", "ru", NULL}, {0}, {0}, 0};
        for (int k = 0; k < 8 && t + k * 60000 < to; k++) {
            e.t[k] = t + k * 60000;
            e.v[k] = (double)((e.t[k] / 60000) % 97);
            e.nsamples++;
        }
        pt_write_result res;
        rv = pt_store_write(st, mk_write(&a, &e, 1), &a, &res);
        pt_arena_reset(&a);
    }
    pt_arena_free(&a);
    return rv;
}

/* The 1h stage's max cells of [start, end] (hints of max_over_time[1h] every hour). */
static long max_cells(pt_store *st, int64_t start, int64_t end)
{
    pt_arena a, b;
    pt_arena_init(&a, 0, 0);
    pt_arena_init(&b, 0, 0);
    pt_query_matcher m = {PT_MATCH_EQ, PT_SLICE_LIT("__name__"), PT_SLICE_LIT("bt_gauge")};
    pt_query q = {.start_ms = start, .end_ms = end, .ms = &m, .nms = 1, .step_ms = HOUR,
                  .range_ms = HOUR, .hints_start_ms = start, .func = PT_SLICE_LIT("max_over_time")};
    pt_read *r;
    pt_read_batch bt;
    char msg[256];
    long n = -1;
    if (pt_read_start(st, &q, 1, &a, NULL, &r) == 0) {
        pt_read_rollups(r, 1);
        int rv;
        n = 0;
        while ((rv = pt_read_next(r, &b, 0, &bt, msg, sizeof(msg))) == 1)
            for (size_t i = 0; i < bt.n; i++)
                n += (long)bt.s[i].nsamples;
        if (rv)
            n = -1;
        pt_read_free(r);
    }
    pt_arena_free(&b);
    pt_arena_free(&a);
    return n;
}

int main(void)
{
    char endpoint[64];
    int setup = bt_emulator_setup(endpoint, sizeof(endpoint));
    if (setup > 0)
        return 0;
    if (setup < 0)
        return done_testing();
    pt_backend ba, bb;
    pt_store sa, sb;
    if (!ok(open_store(&ba, &sa, endpoint) == 0 && open_store(&bb, &sb, endpoint) == 0,
            "two promtables' stores on one pair of tables"))
        return done_testing();
    pt_rollup_stage st[] = {{HOUR, 0}};
    pt_rollup_late la = {.floor = 0, .late = INT64_MAX}, lb = la;
    sa.rollups = sb.rollups = st;
    sa.nrollups = sb.nrollups = 1;
    sa.late = &la;
    sb.late = &lb;
    pt_rollup_job_opts oa = {.store = &sa, .stages = st, .nstages = 1, .delay_ms = 60000};
    pt_rollup_job_opts ob = oa;
    ob.store = &sb;
    pt_rollup_job *ja = pt_rollup_job_new(&oa), *jb = pt_rollup_job_new(&ob);
    /* Samples a minute apart from D + 1m: none on an hour's edge. */
    is(write_gauge(&sa, D + 60000, D + 6 * HOUR), 0, "6 hours of a gauge written");

    int64_t now = D + 7 * HOUR;
    is(pt_rollup_job_pass(ja, now, 0), 0, "the first builder's pass takes the lease");
    is(max_cells(&sb, D, D + 6 * HOUR), 6, "its 6 windows read back through the other");
    int64_t wm = 0;
    pt_rollup_watermark(&sb, &st[0], &wm);
    is(wm, D + 6 * HOUR, "the watermark: the last whole hour before now - 1m");

    is(write_gauge(&sb, D + 6 * HOUR, D + 8 * HOUR), 0, "2 more hours written");
    is(pt_rollup_job_pass(jb, now + 5 * 60000, 0), 0,
       "the second builder's pass 5 minutes later, the lease held");
    pt_rollup_watermark(&sb, &st[0], &wm);
    is(wm, D + 6 * HOUR, "builds nothing");
    now = D + 9 * HOUR;
    is(pt_rollup_job_pass(ja, now, 0), 0, "the first builder's next pass");
    pt_rollup_watermark(&sb, &st[0], &wm);
    is(wm, D + 8 * HOUR, "builds the 2 hours");

    is(write_gauge(&sa, D + 8 * HOUR, D + 10 * HOUR + 30 * 60000), 0, "2.5 hours more");
    now = D + 10 * HOUR + 59 * 60000; /* the first's lease lapsed long ago */
    is(pt_rollup_job_pass(jb, now, 0), 0, "the second builder's pass after the lease lapsed");
    pt_rollup_watermark(&sa, &st[0], &wm);
    is(wm, D + 10 * HOUR, "takes over from the watermark");
    now = D + 11 * HOUR + 2 * 60000;
    is(pt_rollup_job_pass(ja, now, 0), 0, "the first builder's pass while the second holds it");
    pt_rollup_watermark(&sa, &st[0], &wm);
    is(wm, D + 10 * HOUR, "builds nothing");
    is(pt_rollup_job_pass(jb, now, 0), 0, "the holder's pass");
    pt_rollup_watermark(&sa, &st[0], &wm);
    is(wm, D + 11 * HOUR, "builds the last hour");
    is(max_cells(&sa, D, D + 11 * HOUR), 11, "every window once, read from either");

    pt_rollup_job_free(ja);
    pt_rollup_job_free(jb);
    pt_store_close(&sa);
    pt_store_close(&sb);
    pt_backend_close(&ba);
    pt_backend_close(&bb);
    return done_testing();
}
