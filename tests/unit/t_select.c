/* Selecting series (select.c) apart from the index: the last filter's deadline and
 * cancellation checks. */
#include <stdatomic.h>

#include "error.h"
#include "read_int.h"
#include "tap.h"

/* The last filter of a selection looks at the deadline and the cancellation while it
 * evaluates regexes: a deadline already past, a client already gone, end it. */
static void filter_deadline(void)
{
    enum { N = 64 };
    series v[N];
    pt_label l[N];
    for (size_t i = 0; i < N; i++) {
        l[i] = (pt_label){PT_SLICE_LIT("v"), PT_SLICE_LIT("abc")};
        v[i] = (series){PT_SLICE_LIT("x"), &l[i], 1, 0, 0, 0};
    }
    pt_matcher m;
    char msg[256];
    pt_matcher_init(&m, PT_MATCH_RE, PT_SLICE_LIT("v"), PT_SLICE_LIT("a.c"), NULL, msg,
                    sizeof(msg));
    atomic_int gone = 0;
    qctx q = {.ms = &m, .nms = 1, .cancel = &gone};
    q.c.v = v, q.c.x.n = N;
    ok(pt_select_filter(&q) == 0 && q.c.n == N, "the filter keeps every match");
    q = (qctx){.ms = &m, .nms = 1, .cancel = &gone, .deadline_ns = 1};
    q.c.v = v, q.c.x.n = N;
    is(pt_select_filter(&q), PT_ETIMEOUT, "a deadline past: the filter ends with PT_ETIMEOUT");
    atomic_store(&gone, 1);
    q = (qctx){.ms = &m, .nms = 1, .cancel = &gone};
    q.c.v = v, q.c.x.n = N;
    is(pt_select_filter(&q), PT_ECANCELLED, "the client gone: the filter ends with PT_ECANCELLED");
    pt_matcher_free(&m);
}

/* A series' data buckets from its index buckets: only those are read, bucket 63 after
 * its first standing for every later one, and an earlier day moving the bits up. */
static void series_bases(void)
{
    const int64_t day = 86400000, B = PT_BUCKET_MS, b0 = 300 * B;
    series s = {.day_lo = b0 + day, .day_hi = b0 + day};
    pt_series_widen(&s, b0 + day, b0 + day, day);
    ok(s.bases == 1 && pt_series_in(&s, b0, day) && !pt_series_in(&s, b0 + B, day) &&
           !pt_series_in(&s, b0 - B, day),
       "one day: its one data bucket");
    pt_series_widen(&s, b0 + 5 * B - day / 2, b0 + 5 * B - day / 2, day);
    ok(s.bases == (1 | 1 << 4 | 1 << 5) && pt_series_in(&s, b0 + 5 * B, day) &&
           !pt_series_in(&s, b0 + 2 * B, day),
       "a day that straddles a bucket boundary reaches both buckets, the gap none");
    pt_series_widen(&s, b0 - 2 * B, b0 - 2 * B, day);
    ok(s.day_lo == b0 - 2 * B && s.bases == (1 | 1 << 2 | 1 << 6 | 1 << 7) &&
           pt_series_in(&s, b0 + 4 * B, day) && !pt_series_in(&s, b0 - B, day),
       "an earlier day moves the bits up (%#llx)", (unsigned long long)s.bases);
    pt_series_widen(&s, b0 - 62 * B, b0 - 62 * B, day);
    ok(s.bases == (1 | (uint64_t)1 << 60 | (uint64_t)1 << 62 | (uint64_t)1 << 63) &&
           pt_series_in(&s, b0 + 4 * B, day) && pt_series_in(&s, b0 + 5 * B, day) &&
           pt_series_in(&s, b0 + 2 * B, day) && !pt_series_in(&s, b0 - 30 * B, day) &&
           !pt_series_in(&s, b0 + 6 * B, day),
       "buckets 63 and later after the first are one bit: all of them are read (%#llx)",
       (unsigned long long)s.bases);
    series w = {.day_lo = 0, .day_hi = 0};
    pt_series_widen(&w, 0, PT_MAX_TIME_MS - PT_MAX_TIME_MS % day, day);
    ok(w.bases == ~(uint64_t)0 && pt_series_in(&w, 2000 * B, day) &&
           pt_series_in(&w, pt_bucket_base(PT_MAX_TIME_MS), day),
       "a window of all days: every bucket");
    pt_series_widen(&s, b0 - 200 * B, b0 - 200 * B, day);
    ok(s.bases == (1 | (uint64_t)1 << 63) && pt_series_in(&s, b0 - 199 * B + 62 * B, day) &&
           !pt_series_in(&s, b0 - 199 * B, day),
       "moved up past 63: the later bits become bit 63");
}

int main(void)
{
    filter_deadline();
    series_bases();
    return done_testing();
}
