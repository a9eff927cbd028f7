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
        v[i] = (series){PT_SLICE_LIT("x"), &l[i], 1};
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

int main(void)
{
    filter_deadline();
    return done_testing();
}
