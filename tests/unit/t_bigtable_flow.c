/*
 * Bigtable's flow control (bigtable_flow.c) with an injected clock: no limit without
 * rate_limit_info; a factor below 1 lowers the limit to the observed rate times the
 * factor, one above 1 raises it (clamped, and only when writers reach it), at most once
 * per period; the limit lifts when rate_limit_info stops; a wait past the bound is
 * PT_EBUSY; writer threads share the rows without overlap. Then the protocol side:
 * rate_limit_info in a MutateRowsResponse packed and unpacked by protobuf-c reaches the
 * limiter, and the bigtable-features value is FeatureFlags with the rate-limit flags.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "bigtable_int.h"
#include "error.h"

#define S 1000000000LL /* one second in ns */
#define MS 1000000LL
#define T0 (100 * S) /* the clock at init: any monotonic value */

static int near(double got, double want)
{
    return fabs(got - want) <= 1e-6 * (fabs(want) + 1);
}

static double rate(pt_bt_flow *f, int64_t now)
{
    pt_bt_flow_figures g;
    pt_bt_flow_get(f, now, &g);
    return g.rate;
}

/* Takes rows at now with no bound on the wait; returns the wait. */
static int64_t take(pt_bt_flow *f, size_t rows, int64_t now)
{
    int64_t w = -1;
    if (pt_bt_flow_acquire(f, rows, now, INT64_MAX, &w) != 0)
        return -1;
    return w;
}

static void test_unlimited(void)
{
    pt_bt_flow f;
    pt_bt_flow_init(&f, T0);
    int64_t worst = 0;
    int refused = 0;
    for (int i = 0; i < 1000; i++) {
        int64_t w;
        if (pt_bt_flow_acquire(&f, 100000, T0 + i, 0, &w) != 0)
            refused++;
        else if (w > worst)
            worst = w;
    }
    is(refused, 0, "without rate_limit_info no write is refused, even with no wait allowed");
    is(worst, 0, "... and none waits");
    ok(rate(&f, T0 + S) == 0, "the limit reads 0 (not limited)");
    pt_bt_flow_free(&f);
}

/* 1000 rows over the first second, then rate_limit_info(period 1 s, factor) at T0 + 1 s:
 * the observed rate is 1000 rows/s. */
static void limited(pt_bt_flow *f, double factor)
{
    pt_bt_flow_init(f, T0);
    for (int i = 0; i < 10; i++)
        take(f, 100, T0 + i * 100 * MS);
    pt_bt_flow_info(f, S, factor, T0 + S);
}

static void test_lower_raise(void)
{
    pt_bt_flow f;
    limited(&f, 0.5);
    ok(near(rate(&f, T0 + S), 500), "factor 0.5 on 1000 rows/s observed: 500 rows/s (%g)",
       rate(&f, T0 + S));
    is(take(&f, 500, T0 + S), 0, "the first 500 rows go at once");
    is(take(&f, 500, T0 + S), S, "the next 500 wait one second");
    is(take(&f, 1, T0 + S), 2 * S, "and the row after them two");

    /* Within the period every factor is ignored: the server has not seen the last
     * change take effect. */
    pt_bt_flow_info(&f, S, 0.1, T0 + S + 500 * MS);
    ok(near(rate(&f, T0 + S + 500 * MS), 500), "a factor within the period is ignored");

    /* A period later, writers waited: factor 5 raises the limit by the clamp, 1.3, from
     * the higher of the limit and the observed rate (1001 rows granted in the last
     * second). */
    pt_bt_flow_info(&f, S, 5.0, T0 + 2 * S);
    ok(near(rate(&f, T0 + 2 * S), 1001 * PT_BT_FLOW_MAX_FACTOR),
       "factor 5 is clamped to 1.3: %g rows/s", rate(&f, T0 + 2 * S));
    pt_bt_flow_free(&f);

    limited(&f, 0.01);
    ok(near(rate(&f, T0 + S), 1000 * PT_BT_FLOW_MIN_FACTOR),
       "factor 0.01 is clamped to 0.3: %g rows/s", rate(&f, T0 + S));
    pt_bt_flow_free(&f);

    /* Nobody waits: the limit is not what holds writers back, so a factor > 1 leaves it. */
    limited(&f, 0.5);
    take(&f, 100, T0 + 1500 * MS);
    pt_bt_flow_info(&f, S, 1.3, T0 + 2 * S + MS);
    ok(near(rate(&f, T0 + 2 * S + MS), 500), "factor 1.3 does not raise a limit nobody reaches");
    pt_bt_flow_free(&f);

    /* Not limited: a factor >= 1 sets no limit. */
    limited(&f, 1.2);
    ok(rate(&f, T0 + S) == 0, "factor 1.2 while not limited sets no limit");
    pt_bt_flow_free(&f);
}

static void test_nonsense(void)
{
    pt_bt_flow f;
    limited(&f, 0.5);
    pt_bt_flow_info(&f, S, NAN, T0 + 3 * S);
    pt_bt_flow_info(&f, S, -1, T0 + 3 * S);
    pt_bt_flow_info(&f, S, 0, T0 + 3 * S);
    pt_bt_flow_figures g;
    pt_bt_flow_get(&f, T0 + 3 * S, &g);
    is(g.infos, 4, "every rate_limit_info is counted");
    ok(near(g.rate, 500), "a factor that is not a positive number changes nothing (%g)", g.rate);
    pt_bt_flow_free(&f);
}

static void test_lift(void)
{
    pt_bt_flow f;
    limited(&f, 0.5);
    /* The period is 1 s: lifted after 3 s without rate_limit_info. */
    ok(near(rate(&f, T0 + 4 * S), 500), "the limit holds for 3 periods after the last info");
    ok(rate(&f, T0 + 4 * S + 1) == 0, "and lifts right after");
    is(take(&f, 1000000, T0 + 4 * S + 2), 0, "then a million rows go at once");
    is(take(&f, 1000000, T0 + 4 * S + 3), 0, "and a million more");

    /* Info keeps it: one every period, factor 1, and the limit stays. */
    pt_bt_flow_free(&f);
    limited(&f, 0.5);
    for (int i = 2; i < 10; i++)
        pt_bt_flow_info(&f, S, 1.0, T0 + i * S);
    ok(rate(&f, T0 + 12 * S) > 0, "steady rate_limit_info keeps the limit");
    ok(rate(&f, T0 + 12 * S + 1) == 0, "3 periods after the last one it lifts");
    pt_bt_flow_free(&f);

    /* A short period still keeps a limit for at least a second. */
    pt_bt_flow_init(&f, T0);
    take(&f, 100, T0);
    pt_bt_flow_info(&f, 10 * MS, 0.5, T0 + 10 * MS);
    ok(rate(&f, T0 + 500 * MS) > 0, "a 10 ms period keeps the limit half a second later");
    ok(rate(&f, T0 + 1010 * MS + 1) == 0, "and lifts it after a second");
    pt_bt_flow_free(&f);
}

static void test_bound(void)
{
    pt_bt_flow f;
    limited(&f, 0.5); /* 500 rows/s */
    int64_t w;
    is(pt_bt_flow_acquire(&f, 1000, T0 + S, S, &w), 0, "1000 rows go (the limit was idle)");
    is(w, 0, "... at once");
    is(pt_bt_flow_acquire(&f, 10, T0 + S, S, &w), PT_EBUSY,
       "the next write would wait 2 s: PT_EBUSY with a bound of 1 s");
    is(pt_bt_flow_acquire(&f, 10, T0 + S + 999 * MS, S, &w), PT_EBUSY,
       "still PT_EBUSY 999 ms later");
    is(pt_bt_flow_acquire(&f, 10, T0 + 2 * S, S, &w), 0, "a second later it waits the bound");
    is(w, S, "... exactly 1 s: the refusals took nothing");
    pt_bt_flow_figures g;
    pt_bt_flow_get(&f, T0 + 2 * S, &g);
    is(g.refused, 2, "two writes refused");
    ok(near(g.waited_s, 1.0), "one second waited (%g)", g.waited_s);
    is(PT_IS_RETRYABLE(PT_EBUSY), 1, "PT_EBUSY is retryable (503 with Retry-After)");
    pt_bt_flow_free(&f);
}

/* ---- writer threads: each reservation gets its own slot, none is lost ---- */

enum { THREADS = 4, EACH = 1000, ROWS = 10 };

typedef struct {
    pt_bt_flow *f;
    pthread_barrier_t *go; /* the writers start together */
    int64_t now;
    int64_t waits[EACH];
    int got;
} writer;

static void *writer_main(void *arg)
{
    writer *w = arg;
    pthread_barrier_wait(w->go);
    for (int i = 0; i < EACH; i++)
        if (pt_bt_flow_acquire(w->f, ROWS, w->now, INT64_MAX, &w->waits[i]) == 0)
            w->got++;
    return NULL;
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static void test_threads(void)
{
    pt_bt_flow f;
    pt_bt_flow_init(&f, T0);
    take(&f, 2000, T0);
    pt_bt_flow_info(&f, S, 0.5, T0 + S); /* 1000 rows/s: 10 rows every 10 ms */
    ok(near(rate(&f, T0 + S), 1000), "limit 1000 rows/s");
    writer w[THREADS];
    pthread_t th[THREADS];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, THREADS);
    for (int i = 0; i < THREADS; i++) {
        w[i] = (writer){.f = &f, .go = &go, .now = T0 + S};
        pthread_create(&th[i], NULL, writer_main, &w[i]);
    }
    int64_t all[THREADS * EACH];
    size_t n = 0;
    int everyone = 1;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        everyone &= w[i].got == EACH;
        for (int j = 0; j < EACH; j++)
            all[n++] = w[i].waits[j];
    }
    pthread_barrier_destroy(&go);
    ok(everyone, "every writer got all its %d turns", EACH);
    qsort(all, n, sizeof(all[0]), cmp64);
    size_t off = 0;
    for (size_t i = 0; i < n; i++)
        if (all[i] != (int64_t)i * 10 * MS)
            off++;
    is(off, 0, "the %zu turns are 10 ms apart, back to back: none shared, none skipped", n);
    pt_bt_flow_free(&f);
}

/* ---- the protocol: rate_limit_info through protobuf-c, the feature header ---- */

static void test_response(void)
{
    Bigtable__Duration period = BIGTABLE__DURATION__INIT;
    period.seconds = 2;
    period.nanos = 500000000;
    Bigtable__RateLimitInfo info = BIGTABLE__RATE_LIMIT_INFO__INIT;
    info.period = &period;
    info.factor = 0.7;
    Bigtable__MutateRowsResponse__Entry e = BIGTABLE__MUTATE_ROWS_RESPONSE__ENTRY__INIT;
    Bigtable__MutateRowsResponse__Entry *ep = &e;
    Bigtable__MutateRowsResponse resp = BIGTABLE__MUTATE_ROWS_RESPONSE__INIT;
    resp.n_entries = 1;
    resp.entries = &ep;
    resp.rate_limit_info = &info;
    uint8_t buf[128];
    size_t n = bigtable__mutate_rows_response__pack(&resp, buf);
    /* The empty entry (0a 00), then field 3, length-delimited: tag 0x1a, as Google's
     * bigtable.proto numbers it. */
    ok(n > 2 && buf[0] == 0x0a && buf[2] == 0x1a, "rate_limit_info is field 3 on the wire");
    Bigtable__MutateRowsResponse *got = bigtable__mutate_rows_response__unpack(NULL, n, buf);
    ok(got && got->rate_limit_info, "unpacked with its rate_limit_info");
    if (!got)
        return;
    pt_bt_flow f;
    pt_bt_flow_init(&f, T0);
    take(&f, 100, T0);
    is(pt_bt_flow_response(&f, got, T0 + S), 1, "the handler sees the rate_limit_info");
    is(f.info_period_ns, 2500 * MS, "period 2.5 s picked up");
    ok(f.info_factor == 0.7, "factor 0.7 picked up");
    ok(near(f.rate, 100 * 0.7), "and applied: 70 rows/s (%g)", f.rate);
    is(f.period_ns, 2500 * MS, "the period paces the next adjustment");
    bigtable__mutate_rows_response__free_unpacked(got, NULL);

    got = bigtable__mutate_rows_response__unpack(NULL, 0, buf); /* an empty response */
    is(pt_bt_flow_response(&f, got, T0 + 2 * S), 0, "a response without it changes nothing");
    pt_bt_flow_figures g;
    pt_bt_flow_get(&f, T0 + 2 * S, &g);
    is(g.infos, 1, "one rate_limit_info counted");
    bigtable__mutate_rows_response__free_unpacked(got, NULL);
    pt_bt_flow_free(&f);
}

static void b64url(const uint8_t *p, size_t n, char *out)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n)
            v |= p[i + 2];
        out[o++] = a[v >> 18 & 63];
        out[o++] = a[v >> 12 & 63];
        out[o++] = i + 1 < n ? a[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? a[v & 63] : '=';
    }
    out[o] = '\0';
}

static void test_features(void)
{
    Bigtable__FeatureFlags ff = BIGTABLE__FEATURE_FLAGS__INIT;
    ff.mutate_rows_rate_limit = 1;
    ff.mutate_rows_rate_limit2 = 1;
    uint8_t buf[32];
    size_t n = bigtable__feature_flags__pack(&ff, buf);
    char enc[64];
    b64url(buf, n, enc);
    is_str(PT_BT_FEATURES_RATE_LIMIT, enc,
           "bigtable-features is base64url of FeatureFlags{mutate_rows_rate_limit(2)}");
    ff.reverse_scans = 1;
    ff.mutate_rows_rate_limit = ff.mutate_rows_rate_limit2 = 0;
    n = bigtable__feature_flags__pack(&ff, buf);
    b64url(buf, n, enc);
    is_str(enc, "CAE=", "the encoder agrees with Google's reverse_scans example");
}

int main(void)
{
    test_unlimited();
    test_lower_raise();
    test_nonsense();
    test_lift();
    test_bound();
    test_threads();
    test_response();
    test_features();
    return done_testing();
}
