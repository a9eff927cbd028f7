/*
 * Bigtable's flow control of MutateRows (rate_limit_info), without I/O: the limiter that
 * every writer thread of one open backend shares. Contract and behaviour in
 * bigtable_int.h; what an operator sees in docs/bigtable.md, "Flow control".
 *
 * Time is whatever monotonic nanoseconds the caller passes, so tests drive it.
 */
#include <math.h>

#include "bigtable_int.h"
#include "error.h"

#define NS 1000000000LL

enum {
    MIN_PERIOD_NS = 10 * 1000 * 1000, /* periods are kept within [10 ms, 10 min] */
    MIN_LIFT_NS = 1000 * 1000 * 1000, /* a limit stays at least this long after an info */
    MIN_SPAN_NS = 1000 * 1000,        /* the shortest span a rate is measured over */
};
#define MAX_PERIOD_NS (600 * NS)
#define DEFAULT_PERIOD_NS NS
/* The limit never goes below one row a second (writes keep going, so rate_limit_info
 * keeps coming) nor above what no backend reaches. */
#define MIN_RATE 1.0
#define MAX_RATE 1e9

static double clampd(double v, double lo, double hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

void pt_bt_flow_init(pt_bt_flow *f, int64_t now_ns)
{
    *f = (pt_bt_flow){
        .period_ns = DEFAULT_PERIOD_NS,
        .win_start_ns = now_ns,
        .prev_start_ns = now_ns,
    };
    pthread_mutex_init(&f->mu, NULL);
    f->ready = 1;
}

void pt_bt_flow_free(pt_bt_flow *f)
{
    if (f->ready)
        pthread_mutex_destroy(&f->mu);
    f->ready = 0;
}

/* Starts a new observation window when the current one is a period old; a window with
 * nothing granted in it for two periods leaves an empty one before it. */
static void rotate(pt_bt_flow *f, int64_t now)
{
    int64_t age = now - f->win_start_ns;
    if (age < f->period_ns)
        return;
    if (age < 2 * f->period_ns) {
        f->prev_rows = f->win_rows;
        f->prev_start_ns = f->win_start_ns;
    } else {
        f->prev_rows = 0;
        f->prev_start_ns = now - f->period_ns;
    }
    f->win_start_ns = now;
    f->win_rows = 0;
}

/* Rows per second granted over the last one to two periods. */
static double observed(const pt_bt_flow *f, int64_t now)
{
    int64_t span = now - f->prev_start_ns;
    if (span < MIN_SPAN_NS)
        span = MIN_SPAN_NS;
    return (f->prev_rows + f->win_rows) * (double)NS / (double)span;
}

/* Sets the limit (0 lifts it). Rows already granted keep their turn, but what they still
 * owe is repaid at the new rate. */
static void set_rate(pt_bt_flow *f, double rate, int64_t now)
{
    if (rate > 0 && f->rate > 0 && f->next_free_ns > now)
        f->next_free_ns = now + (int64_t)((double)(f->next_free_ns - now) * f->rate / rate);
    else if (rate == 0 || f->rate == 0)
        f->next_free_ns = now;
    f->rate = rate;
}

/* Bigtable stopped sending rate_limit_info: it no longer asks us to slow down. */
static void maybe_lift(pt_bt_flow *f, int64_t now)
{
    int64_t quiet = PT_BT_FLOW_LIFT_PERIODS * f->period_ns;
    if (quiet < MIN_LIFT_NS)
        quiet = MIN_LIFT_NS;
    if (f->rate > 0 && now - f->last_info_ns > quiet) {
        set_rate(f, 0, now);
        f->throttled = 0;
        f->next_update_ns = 0;
    }
}

int pt_bt_flow_acquire(pt_bt_flow *f, size_t rows, int64_t now_ns, int64_t max_wait_ns,
                       int64_t *wait_ns)
{
    int rv = 0;
    *wait_ns = 0;
    pthread_mutex_lock(&f->mu);
    rotate(f, now_ns);
    maybe_lift(f, now_ns);
    if (f->rate > 0) {
        int64_t start = f->next_free_ns > now_ns ? f->next_free_ns : now_ns;
        int64_t wait = start - now_ns;
        if (wait > max_wait_ns) {
            f->refused++;
            f->throttled = 1;
            rv = PT_EBUSY;
            goto out;
        }
        f->next_free_ns = start + (int64_t)((double)rows * (double)NS / f->rate);
        if (wait > 0) {
            f->throttled = 1;
            f->waited_ns += wait;
        }
        *wait_ns = wait;
    }
    f->win_rows += (double)rows;
out:
    pthread_mutex_unlock(&f->mu);
    return rv;
}

void pt_bt_flow_info(pt_bt_flow *f, int64_t period_ns, double factor, int64_t now_ns)
{
    pthread_mutex_lock(&f->mu);
    f->infos++;
    f->info_period_ns = period_ns;
    f->info_factor = factor;
    if (!isfinite(factor) || factor <= 0)
        goto out; /* a peer's nonsense: noted, not obeyed */
    if (period_ns < MIN_PERIOD_NS)
        period_ns = MIN_PERIOD_NS;
    if (period_ns > MAX_PERIOD_NS)
        period_ns = MAX_PERIOD_NS;
    f->last_info_ns = now_ns;
    rotate(f, now_ns);
    f->period_ns = period_ns;
    /* "After adjusting, ignore factor until another period has passed": the server has
     * not seen the effect of the last change yet. */
    if (now_ns < f->next_update_ns)
        goto out;
    double k = clampd(factor, PT_BT_FLOW_MIN_FACTOR, PT_BT_FLOW_MAX_FACTOR);
    double seen = observed(f, now_ns);
    double rate;
    if (k < 1) {
        rate = seen * k;
    } else if (f->rate > 0 && f->throttled) {
        /* Raise the ceiling only when writers reach it; otherwise a rate nobody uses
         * would grow without bound and protect nothing. */
        rate = (seen > f->rate ? seen : f->rate) * k;
    } else {
        /* Not limited, or not reaching the limit: a factor >= 1 changes nothing. The
         * next period is still one to wait before the next adjustment. */
        f->next_update_ns = now_ns + period_ns;
        goto out;
    }
    set_rate(f, clampd(rate, MIN_RATE, MAX_RATE), now_ns);
    f->throttled = 0;
    f->next_update_ns = now_ns + period_ns;
out:
    pthread_mutex_unlock(&f->mu);
}

int pt_bt_flow_response(pt_bt_flow *f, const Bigtable__MutateRowsResponse *r, int64_t now_ns)
{
    const Bigtable__RateLimitInfo *info = r->rate_limit_info;
    if (!info)
        return 0;
    int64_t period = 0;
    if (info->period) {
        /* Seconds beyond ten years are nonsense anyway; keep the product in range. */
        int64_t s = info->period->seconds;
        s = s < 0 ? 0 : s > 315360000 ? 315360000 : s;
        period = s * NS + info->period->nanos;
    }
    pt_bt_flow_info(f, period, info->factor, now_ns);
    return 1;
}

void pt_bt_flow_get(pt_bt_flow *f, int64_t now_ns, pt_bt_flow_figures *out)
{
    *out = (pt_bt_flow_figures){0};
    if (!f->ready)
        return; /* a backend closed after a failed open */
    pthread_mutex_lock(&f->mu);
    maybe_lift(f, now_ns);
    *out = (pt_bt_flow_figures){
        .rate = f->rate,
        .infos = f->infos,
        .refused = f->refused,
        .waited_s = (double)f->waited_ns / (double)NS,
    };
    pthread_mutex_unlock(&f->mu);
}
