/* Roll-ups: a window's aggregates, the stage a query's hints choose, building on the
 * embedded store (head and flushed), reads across the watermark, late samples, deletes,
 * retention and the configuration. */
#include <math.h>
#include <string.h>

#include "bytes.h"
#include "clock.h"
#include "embedded.h"
#include "read_int.h"
#include "retention.h"
#include "rollup.h"
#include "rollups.h"
#include "schema.h"
#include "store_helpers.h"
#include "tap.h"

#define MIN 60000LL
#define HOUR 3600000LL
#define DAY 86400000LL
static int64_t D = 19675 * DAY; /* a day's start, 2023-11-14 (compaction(): two days ago) */
#define STEP 15000LL
#define N ((size_t)(2 * DAY / STEP)) /* two days of samples */

static uint64_t bits_of(double v)
{
    uint64_t b;
    memcpy(&b, &v, sizeof(b));
    return b;
}

static double stale_nan(void)
{
    uint64_t b = 0x7ff0000000000002ULL;
    double v;
    memcpy(&v, &b, sizeof(v));
    return v;
}

/* ---- one series' windows ---- */

typedef struct got {
    int64_t t[64];
    double v[64];
    int agg[64];
    int n;
} got;

static int collect(void *ud, int agg, int64_t t, double v)
{
    got *g = ud;
    if (g->n < 64) {
        g->t[g->n] = t, g->v[g->n] = v, g->agg[g->n] = agg;
        g->n++;
    }
    return 0;
}

/* The cells of one aggregate, "t:v t:v ...", offsets from 0 in seconds. */
static const char *show(const got *g, int agg)
{
    static char buf[512];
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < g->n && o < sizeof(buf) - 40; i++)
        if (g->agg[i] == agg)
            o += (size_t)snprintf(buf + o, sizeof(buf) - o, "%s%lld:%g", o ? " " : "",
                                  (long long)(g->t[i] / 1000), g->v[i]);
    return buf;
}

static void windows(void)
{
    /* The window (0, 60 s]: 10, 12, 3 (a reset), NaN, stale, 5; then 7 alone in the
     * next; a sample at 0 alone in the window that ends there. */
    int64_t t[] = {0, 10000, 20000, 30000, 40000, 50000, 60000, 70000};
    double v[] = {4, 10, 12, 3, NAN, stale_nan(), 5, 7};
    got g = {0};
    ok(pt_rollup_series(t, v, 8, MIN, collect, &g) == 0, "three windows");
    is_str(show(&g, PT_AGG_COUNT), "0:1 59:5 119:1",
           "count: the samples but the staleness marker, stamped a millisecond before each "
           "window's end, a sample on an edge in the window it ends");
    ok(g.agg[7] == PT_AGG_SUM && isnan(g.v[7]), "sum with a NaN in it is NaN, as sum_over_time");
    is_str(show(&g, PT_AGG_MIN), "0:4 30:3 70:7", "min: the least sample, at its own time");
    is_str(show(&g, PT_AGG_MAX), "0:4 20:12 70:7", "max: the greatest (a NaN gives way)");
    is_str(show(&g, PT_AGG_LAST), "0:4 60:5 70:7", "last: the window's last sample");
    is_str(show(&g, PT_AGG_COUNTER), "0:4 10:10 20:12 30:3 60:5 70:7",
           "counter: first, both sides of the drop, last (a NaN is no drop, as in PromQL)");

    got z = {0};
    int64_t tz[] = {1000, 2000, 3000, 4000, 5000};
    double vz[] = {5, 4, 6, 3, 2};
    pt_rollup_series(tz, vz, 5, MIN, collect, &z);
    is_str(show(&z, PT_AGG_COUNTER), "1:5 5:2",
           "a window of three drops is a gauge's: its counter row keeps first and last");

    got s = {0};
    int64_t t2[] = {1};
    double v2[] = {stale_nan()};
    pt_rollup_series(t2, v2, 1, MIN, collect, &s);
    ok(s.n == 1 && s.agg[0] == PT_AGG_LAST && bits_of(s.v[0]) == 0x7ff0000000000002ULL,
       "a window of only a staleness marker: only last, the marker (a plain selector goes "
       "stale where the raw data does)");
}

/* ---- the stage a query chooses ---- */

static void choose(void)
{
    pt_rollup_stage st[] = {{5 * MIN, 0}, {HOUR, 0}};
    size_t i = 9;
    int agg = 0;
#define HINTS(step, range, start, f) (&(pt_read_hints){(step), (range), (start), PT_SLICE_LIT(f)})
    ok(pt_rollup_choose(st, 2, HINTS(HOUR, HOUR, D, "max_over_time"), &i, &agg) && i == 1 &&
           agg == PT_AGG_MAX,
       "max_over_time[1h] every hour, aligned: the 1h stage's max");
    ok(pt_rollup_choose(st, 2, HINTS(HOUR, HOUR, D + 7 * MIN, "rate"), &i, &agg) && i == 0 &&
           agg == PT_AGG_COUNTER,
       "rate[1h] unaligned: the 5m stage (four windows or more in the range)");
    ok(pt_rollup_choose(st, 2, HINTS(HOUR, 2 * HOUR, D, "increase"), &i, &agg) && i == 1,
       "increase[2h] aligned: the 1h stage");
    ok(!pt_rollup_choose(st, 2, HINTS(HOUR, 10 * MIN, D + MIN, "rate"), &i, &agg),
       "rate[10m] unaligned: raw (two 5m windows would miss its edges)");
    ok(pt_rollup_choose(st, 2, HINTS(HOUR, 0, D, "sum"), &i, &agg) && i == 0 &&
           agg == PT_AGG_LAST,
       "sum(x) every hour: the last sample of 5m windows (the lookback is 5m)");
    ok(!pt_rollup_choose(st, 2, HINTS(MIN, 0, D, ""), &i, &agg), "a plain selector every minute: raw");
    ok(!pt_rollup_choose(st, 2, HINTS(HOUR, HOUR, D, "irate"), &i, &agg) &&
           !pt_rollup_choose(st, 2, HINTS(HOUR, HOUR, D, "avg_over_time"), &i, &agg) &&
           !pt_rollup_choose(st, 2, HINTS(HOUR, HOUR, D, "quantile_over_time"), &i, &agg),
       "irate, avg_over_time, quantile_over_time: raw");
    ok(!pt_rollup_choose(st, 2, HINTS(0, HOUR, D, "rate"), &i, &agg), "no hints: raw");
    ok(pt_rollup_choose(st, 2, HINTS(DAY, DAY, D, "sum_over_time"), &i, &agg) && i == 1 &&
           agg == PT_AGG_SUM,
       "sum_over_time[1d]: the coarsest stage, sum");
    ok(!pt_rollup_choose(st, 2, HINTS(DAY, DAY, D, "count_over_time"), &i, &agg),
       "count_over_time: raw (PromQL counts cells)");
}

/* ---- building and reading ---- */

static double counter_at(size_t k)
{
    /* Grows by 3 a sample; resets to 0 at sample 500 (2 h 5 m in). */
    return k < 500 ? 3.0 * (double)k : 3.0 * (double)(k - 500);
}

static double gauge_at(size_t k)
{
    return (double)((k * 37) % 101) - 50.0;
}

/* Writes both series' N samples, 8 a request entry. */
static void write_data(tstore *s, int64_t from_k, int64_t to_k)
{
    pt_arena a;
    pt_arena_init(&a, 1 << 20, 0);
    enum { PER = 256 };
    tseries v[2 * PER];
    size_t n = 0;
    int failed = 0;
    for (int64_t k = from_k; k < to_k; k += 8) {
        for (int m = 0; m < 2; m++) {
            tseries *e = &v[n++];
            memset(e, 0, sizeof(*e));
            e->labels[0] = "__name__", e->labels[1] = m ? "ru_gauge" : "ru_counter";
            e->labels[2] = "job", e->labels[3] = "ru";
            for (int j = 0; j < 8 && k + j < to_k; j++) {
                e->t[j] = D + (k + j) * STEP;
                e->v[j] = m ? gauge_at((size_t)(k + j)) : counter_at((size_t)(k + j));
                e->nsamples++;
            }
        }
        if (n == 2 * PER || k + 8 >= to_k) {
            pt_write_result res;
            failed |= pt_store_write(&s->st, mk_write(&a, v, n), &a, &res) != 0 ||
                      res.samples_rejected != 0;
            n = 0;
            pt_arena_reset(&a);
        }
    }
    ok(!failed, "samples %lld to %lld of both series written", (long long)from_k,
       (long long)to_k);
    pt_arena_free(&a);
}

typedef struct answer {
    int64_t t[N + 512];
    double v[N + 512];
    size_t n;
    int failed;
} answer;

/* One query of metric over [start, end] with hints, from roll-ups when on. */
static void query(tstore *s, const char *metric, int64_t start, int64_t end, int64_t step,
                  int64_t range, const char *func, int rollups, answer *out)
{
    pt_arena a, b;
    pt_arena_init(&a, 0, 0);
    pt_arena_init(&b, 0, 0);
    pt_query_matcher m = {PT_MATCH_EQ, PT_SLICE_LIT("__name__"), pt_slice_str(metric)};
    pt_query q = {.start_ms = start, .end_ms = end, .ms = &m, .nms = 1, .step_ms = step,
                  .range_ms = range, .hints_start_ms = start, .func = pt_slice_str(func)};
    pt_read *r;
    pt_read_batch bt;
    char msg[256];
    out->n = 0;
    out->failed = pt_read_start(&s->st, &q, 1, &a, NULL, &r) != 0;
    if (!out->failed) {
        pt_read_rollups(r, rollups);
        int rv;
        while ((rv = pt_read_next(r, &b, 0, &bt, msg, sizeof(msg))) == 1)
            for (size_t i = 0; i < bt.n; i++)
                for (size_t k = 0; k < bt.s[i].nsamples && out->n < N + 512; k++) {
                    out->t[out->n] = bt.s[i].samples[k].t;
                    out->v[out->n++] = bt.s[i].samples[k].v;
                }
        out->failed = rv != 0;
        if (rv)
            diag("read: %s", msg);
        pt_read_free(r);
    }
    pt_arena_free(&b);
    pt_arena_free(&a);
}

/* The gauge's max per window (e - res, e] of its samples in [from, to), at the sample's
 * time, from the raw values: what the stage must answer. */
static int max_matches(const answer *a, int64_t from, int64_t to, int64_t res)
{
    size_t i = 0;
    for (size_t k = 0; k < N;) {
        int64_t tk = D + (int64_t)k * STEP, e = (tk + res - 1) / res * res;
        size_t best = k, m = k;
        for (; m < N && D + (int64_t)m * STEP <= e; m++)
            if (gauge_at(m) > gauge_at(best))
                best = m;
        k = m;
        int64_t tb = D + (int64_t)best * STEP;
        if (tb < from || tb >= to)
            continue;
        if (i >= a->n || a->t[i] != tb || a->v[i] != gauge_at(best)) {
            diag("window ending %lld: want %lld:%g, got %lld:%g", (long long)e, (long long)tb,
                 gauge_at(best), i < a->n ? (long long)a->t[i] : -1LL, i < a->n ? a->v[i] : 0.0);
            return 0;
        }
        i++;
    }
    return i == a->n;
}

/* PromQL's increase over the counter samples of (a, b] without extrapolation: the sum
 * of rises, a drop counting its new value. */
static double rises(const answer *x, int64_t a, int64_t b)
{
    double sum = 0;
    int have = 0;
    double prev = 0;
    for (size_t i = 0; i < x->n; i++) {
        if (x->t[i] <= a || x->t[i] > b)
            continue;
        if (have)
            sum += x->v[i] >= prev ? x->v[i] - prev : x->v[i];
        prev = x->v[i];
        have = 1;
    }
    return sum;
}

static pt_rollup_job *job_of(tstore *s, const pt_rollup_stage *st, size_t n)
{
    static pt_rollup_late late;
    late = (pt_rollup_late){.floor = 0, .late = INT64_MAX};
    s->st.rollups = st;
    s->st.nrollups = n;
    s->st.late = &late;
    pt_rollup_job_opts o = {.store = &s->st, .stages = st, .nstages = n, .delay_ms = 10 * MIN};
    return pt_rollup_job_new(&o);
}

static void build_and_read(void)
{
    tstore s;
    if (!ok(tstore_open(&s) == 0, "store opened"))
        return;
    s.st.max_samples = 0;
    pt_rollup_stage st[] = {{5 * MIN, 0}, {HOUR, 0}};
    pt_rollup_job *j = job_of(&s, st, 2);
    write_data(&s, 0, (int64_t)N);
    int64_t now = D + 2 * DAY + HOUR;
    s.st.now_ms = now;
    ok(pt_rollup_job_pass(j, now, 0) == 0, "a pass builds both stages");
    int64_t wm5 = 0, wm60 = 0;
    pt_rollup_watermark(&s.st, &st[0], &wm5);
    pt_rollup_watermark(&s.st, &st[1], &wm60);
    is(wm5, D + 2 * DAY + 50 * MIN, "the 5m stage is built to now - 10m");
    is(wm60, D + 2 * DAY, "the 1h stage to the last whole hour before it");

    for (int flushed = 0; flushed < 2; flushed++) {
        const char *when = flushed ? "flushed" : "in the head";
        static answer x;
        query(&s, "ru_gauge", D, D + 2 * DAY - 1, HOUR, HOUR, "max_over_time", 1, &x);
        ok(!x.failed && x.n == 49 && max_matches(&x, D, D + 2 * DAY, HOUR),
           "%s: max_over_time[1h] hourly reads the 1h stage's 49 maxima (the first sample "
           "ends a window), each the raw window's greatest sample at its time (%zu)", when,
           x.n);
        query(&s, "ru_gauge", D, D + 2 * DAY - 1, HOUR, HOUR, "max_over_time", 0, &x);
        ok(!x.failed && x.n == N, "%s: without ?resolution=auto: the %zu raw samples", when, x.n);
        query(&s, "ru_gauge", D, D + 2 * DAY - 1, HOUR, 20 * MIN, "max_over_time", 1, &x);
        ok(!x.failed && x.n == 577 && max_matches(&x, D, D + 2 * DAY, 5 * MIN),
           "%s: max_over_time[20m] hourly: the 5m stage (%zu)", when, x.n);

        static answer raw, ru;
        query(&s, "ru_counter", D, D + 2 * DAY - 1, HOUR, 2 * HOUR, "increase", 0, &raw);
        query(&s, "ru_counter", D, D + 2 * DAY - 1, HOUR, 2 * HOUR, "increase", 1, &ru);
        int same = !raw.failed && !ru.failed;
        for (int64_t e = D + 2 * HOUR; same && e < D + 2 * DAY; e += HOUR)
            same = rises(&raw, e - 2 * HOUR, e) == rises(&ru, e - 2 * HOUR, e);
        ok(same && ru.n < raw.n / 50,
           "%s: increase[2h] hourly from the 1h stage's counter samples (%zu of %zu) rises "
           "exactly as the raw data in every aligned range, the reset included", when, ru.n,
           raw.n);
        query(&s, "ru_counter", D, D + 2 * DAY + 59 * MIN, 5 * MIN, 0, "", 1, &x);
        ok(!x.failed && x.n == 577 && x.t[576] == D + 2 * DAY - STEP && x.t[0] == D &&
               x.v[1] == counter_at(20) && x.t[1] == D + 5 * MIN,
           "%s: a plain selector every 5m: each window's last sample, the one on its end "
           "(%zu)", when, x.n);
        if (!flushed)
            ok(pt_embedded_flush(&s.emb) == 0, "flushed");
    }

    /* Past the watermark the raw data answers: 20 minutes after it, not built yet. */
    int64_t after = (int64_t)((wm5 - D) / STEP) + 1;
    write_data(&s, after, after + 80);
    static answer x;
    query(&s, "ru_gauge", D + 2 * DAY - HOUR + 1, wm5 + 20 * MIN, 5 * MIN, 20 * MIN,
          "max_over_time", 1, &x);
    int ordered = 1;
    for (size_t i = 1; i < x.n; i++)
        ordered &= x.t[i] > x.t[i - 1];
    ok(!x.failed && ordered && x.n == 12 + 80 && x.t[12] == wm5 + STEP,
       "a window past the watermark: the stage's 12 maxima before it, then the 80 raw "
       "samples from it on, in time order (%zu)", x.n);

    /* A late sample in a built window: the next pass builds that window again. */
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    tseries late[] = {{{"__name__", "ru_gauge", "job", "ru", NULL}, {D + 3 * HOUR + 7}, {1000}, 1}};
    pt_write_result res;
    ok(pt_store_write(&s.st, mk_write(&a, late, 1), &a, &res) == 0, "a late sample written");
    ok(pt_rollup_job_pass(j, now, 0) == 0, "the next pass");
    query(&s, "ru_gauge", D + 3 * HOUR + 1, D + 4 * HOUR, HOUR, HOUR, "max_over_time", 1, &x);
    int seen = 0;
    for (size_t i = 0; i < x.n; i++)
        seen |= x.v[i] == 1000 && x.t[i] == D + 3 * HOUR + 7;
    ok(!x.failed && seen, "its window's max is the late sample now (%zu cells: the 5m "
       "stage's, as the range starts off an edge)", x.n);
    pt_arena_free(&a);

    /* A series the stage holds nothing of (written behind the watermark, not built yet;
     * or a native histogram's) reads its raw data in the stage's part. */
    pt_arena_init(&a, 0, 0);
    tseries fresh[] = {{{"__name__", "ru_new", "job", "ru", NULL},
                        {D + HOUR + 1000, D + HOUR + 16000, D + HOUR + 31000},
                        {1, 5, 2},
                        3}};
    ok(pt_store_write(&s.st, mk_write(&a, fresh, 1), &a, &res) == 0, "a new series' samples "
       "behind the watermark");
    query(&s, "ru_new", D, D + 2 * DAY - 1, HOUR, HOUR, "max_over_time", 1, &x);
    ok(!x.failed && x.n == 3, "before the next pass: its 3 raw samples (%zu)", x.n);
    ok(pt_rollup_job_pass(j, now, 0) == 0, "a pass");
    query(&s, "ru_new", D, D + 2 * DAY - 1, HOUR, HOUR, "max_over_time", 1, &x);
    ok(!x.failed && x.n == 1 && x.v[0] == 5, "after it: the window's max (%zu)", x.n);
    pt_arena_free(&a);

    /* Delete: the series' roll-ups go with its samples. */
    pt_arena_init(&a, 0, 0);
    qctx q;
    qctx_start(&q, &s.st, &a, NULL);
    q.day_first = D;
    q.day_last = D + 2 * DAY;
    pt_matcher mm;
    char msg[128];
    pt_matcher_init(&mm, PT_MATCH_EQ, PT_SLICE_LIT("__name__"), PT_SLICE_LIT("ru_gauge"), NULL,
                    msg, sizeof(msg));
    q.ms = &mm;
    q.nms = 1;
    pt_delete_result dr;
    ok(pt_select(&q) == 0 && q.c.n == 1 &&
           pt_store_delete(&s.st, q.c.v, q.c.n, D, D + DAY - 1, &a, NULL, &dr) == 0,
       "the gauge's first day deleted");
    pt_matcher_free(&mm);
    query(&s, "ru_gauge", D, D + 2 * DAY - 1, HOUR, HOUR, "max_over_time", 1, &x);
    ok(!x.failed && x.n >= 24 && x.n <= 25 && x.t[0] >= D + DAY,
       "its roll-ups of that day are gone too (%zu left)", x.n);
    pt_arena_free(&a);
    pt_rollup_job_free(j);
    tstore_close(&s);
}

/* A stage outlives the raw data: with the raw samples past storage.retention, the stage
 * still answers; reads never return a stage's cells past its own retention. */
static void retention(void)
{
    tstore s;
    if (!ok(tstore_open(&s) == 0, "store opened"))
        return;
    s.st.max_samples = 0;
    pt_rollup_stage st[] = {{HOUR, 20 * DAY}};
    pt_rollup_job *j = job_of(&s, st, 1);
    write_data(&s, 0, (int64_t)N);
    s.st.now_ms = D + 2 * DAY + HOUR;
    pt_rollup_job_pass(j, s.st.now_ms, 0);
    s.st.retention_ms = 3 * DAY;
    s.st.now_ms = D + 4 * DAY + 12 * HOUR; /* the raw data's first day and a half are gone */
    static answer x;
    query(&s, "ru_gauge", D, D + 2 * DAY - 1, HOUR, HOUR, "max_over_time", 1, &x);
    ok(!x.failed && x.n == 49 && max_matches(&x, D, D + 2 * DAY, HOUR),
       "the raw data's first 36 h past storage.retention: the stage answers all 48 h (%zu)",
       x.n);
    query(&s, "ru_gauge", D, D + 2 * DAY - 1, HOUR, HOUR, "max_over_time", 0, &x);
    ok(!x.failed && x.n == (size_t)(12 * HOUR / STEP), "raw: only its last 12 h (%zu)", x.n);
    s.st.now_ms = D + 21 * DAY + 12 * HOUR;
    query(&s, "ru_gauge", D, D + 2 * DAY - 1, HOUR, HOUR, "max_over_time", 1, &x);
    ok(!x.failed && (x.n == 12 || x.n == 13) && x.t[0] >= D + DAY + 12 * HOUR,
       "past the stage's 20 days, neither (%zu left)", x.n);
    pt_rollup_job_free(j);
    tstore_close(&s);

    /* The compaction filter keeps a roll-up row by its stage (the rules' keep_row). */
    pt_retention_rules *r = NULL;
    char err[256];
    ok(pt_retention_rules_parse("1d {__name__=\"debug\"}", 7 * DAY, st, 1, 0, 0, &r, err,
                                sizeof(err)) == 0 && r,
       "a rule and a stage");
    uint8_t key[64];
    pt_slice sid = PT_SLICE_LIT("up,job=a");
    uint8_t *e = pt_rollup_row_key(key, sid, PT_BUCKET_MS, PT_ROLLUP_CODE(HOUR, PT_AGG_MAX));
    is(pt_retention_keep_row(r, (pt_slice){key, (size_t)(e - key)}), 20 * DAY,
       "a roll-up row keeps its stage's 20 days, longer than storage.retention");
    is(pt_points_row_base(key, (size_t)(e - key)), PT_BUCKET_MS, "its base comes back");
    pt_slice dsid = PT_SLICE_LIT("debug,job=a");
    e = pt_rollup_row_key(key, dsid, 0, PT_ROLLUP_CODE(HOUR, PT_AGG_MAX));
    is(pt_retention_keep_row(r, (pt_slice){key, (size_t)(e - key)}), DAY,
       "a rule shorter than storage.retention holds its series' roll-ups too");
    e = pt_rollup_row_key(key, sid, 0, PT_ROLLUP_CODE(5 * MIN, PT_AGG_MAX));
    is(pt_retention_keep_row(r, (pt_slice){key, (size_t)(e - key)}), 7 * DAY,
       "a stage no longer configured: storage.retention");
    is(pt_retention_keep_row(r, PT_SLICE_LIT("up,job=a,@0000000000000")), 7 * DAY,
       "a data row: storage.retention");
    pt_retention_rules_free(r);
    is(pt_retention_longest(7 * DAY, st, 1), 20 * DAY, "the backend keeps the longest");
}

/* The embedded store's compaction filter: with a stage of 20 days over 3 days of raw
 * retention, the raw rows go at 3 days, the stage's rows at 20. */
static void compaction(void)
{
    pt_rollup_stage st[] = {{HOUR, 20 * DAY}};
    pt_retention_rules *r = NULL;
    char err[256];
    ok(pt_retention_rules_parse("", 3 * DAY, st, 1, 0, 0, &r, err, sizeof(err)) == 0 && r,
       "no rule, a stage: the rows' keeps");
    pt_backend_config c = {.retention_seconds = pt_retention_longest(3 * DAY, st, 1) / 1000,
                           .keep_row_ms = pt_retention_keep_row,
                           .keep_ud = r,
                           .shortest_keep_ms = pt_retention_rules_shortest(r)};
    /* The store's retention thread compacts by the wall clock: data of the last two days,
     * which it keeps; the test's compactions then look from later. */
    D = pt_wall_ms() / DAY * DAY - 2 * DAY;
    tstore s;
    if (!ok(tstore_open_with(&s, c) == 0, "store opened with them")) {
        pt_retention_rules_free(r);
        return;
    }
    s.st.max_samples = 0;
    pt_rollup_job *j = job_of(&s, st, 1);
    write_data(&s, 0, (int64_t)N);
    s.st.now_ms = D + 2 * DAY + HOUR;
    pt_rollup_job_pass(j, s.st.now_ms, 0);
    ok(pt_embedded_flush(&s.emb) == 0, "flushed");
    static answer x;
    pt_embedded_compact(&s.emb, D + 4 * DAY + 12 * HOUR);
    query(&s, "ru_gauge", D, D + 2 * DAY - 1, HOUR, HOUR, "max_over_time", 0, &x);
    ok(!x.failed && x.n >= 12 * HOUR / STEP && x.n < N,
       "compacted 4.5 days on: the raw rows' first 36 h gone (reads not clipped: %zu left)",
       x.n);
    query(&s, "ru_gauge", D, D + 2 * DAY - 1, HOUR, HOUR, "max_over_time", 1, &x);
    ok(!x.failed && x.n == 49, "the stage's rows all there (%zu)", x.n);
    pt_embedded_compact(&s.emb, D + 22 * DAY + 12 * HOUR);
    query(&s, "ru_gauge", D, D + 2 * DAY - 1, HOUR, HOUR, "max_over_time", 1, &x);
    ok(!x.failed && x.n == 0, "compacted 22.5 days on, past the stage's 20: its rows gone "
       "too (reads not clipped: %zu left)", x.n);
    pt_rollup_job_free(j);
    tstore_close(&s);
    pt_retention_rules_free(r);
}

static void config(void)
{
    pt_rollup_stage st[PT_ROLLUP_MAX_STAGES];
    size_t n = 0;
    char err[256];
    ok(pt_rollups_parse("1h 5y\n5m 1y\n", st, &n, err, sizeof(err)) == 0 && n == 2 &&
           st[0].res_ms == 5 * MIN && st[1].res_ms == HOUR && st[1].keep_ms == 5 * 365 * DAY,
       "two stages, sorted by resolution");
    ok(pt_rollups_parse("7m 1y", st, &n, err, sizeof(err)) != 0 && strstr(err, "divides a day"),
       "7m does not divide a day: %s", err);
    ok(pt_rollups_parse("30s 1y", st, &n, err, sizeof(err)) != 0, "under a minute: refused");
    ok(pt_rollups_parse("5m 1y\n5m 2y", st, &n, err, sizeof(err)) != 0 &&
           strstr(err, "two stages"),
       "two stages of one resolution: %s", err);
    ok(pt_rollups_parse("5m", st, &n, err, sizeof(err)) != 0, "no retention: refused");
    ok(pt_rollups_parse("", st, &n, err, sizeof(err)) == 0 && n == 0, "none");
}

int main(void)
{
    windows();
    choose();
    build_and_read();
    retention();
    compaction();
    config();
    return done_testing();
}
