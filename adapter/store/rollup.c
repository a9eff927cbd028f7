/* Roll-ups: the aggregates of a series' windows, building them, and which stage a read
 * may use (rollup.h). */
#include "rollup.h"

#include <math.h>
#include <string.h>

#include "bytes.h"
#include "read_int.h"
#include "schema.h"

#define STALE_BITS 0x7ff0000000000002ULL
/* Drops a counter's window may hold (resets); past them the window is a gauge's. */
#define MAX_DROPS 2

uint8_t *pt_rollup_row_key(uint8_t *dst, pt_slice sid, int64_t base, int64_t code)
{
    uint8_t *e = pt_row_key(dst, sid, base + code);
    dst[sid.n + 1] = PT_ROLLUP_MARK;
    return e;
}

static int stale(double v)
{
    uint64_t b;
    memcpy(&b, &v, sizeof(b));
    return b == STALE_BITS;
}

/* ------------------------------------------------------------------ one series */

/* The window (e - res, e] of samples t[i, j): its aggregates, each in time order. */
static int window(const int64_t *t, const double *v, size_t i, size_t j, int64_t e,
                  pt_rollup_emit emit, void *ud)
{
    size_t count = 0, mn = j, mx = j, first = j, last = j;
    double sum = 0;
    int rv;
    for (size_t k = i; k < j; k++) {
        if (stale(v[k]))
            continue;
        count++;
        sum += v[k];
        if (first == j)
            first = k;
        last = k;
        /* min_over_time / max_over_time: a NaN gives way to any later number. */
        if (mn == j || v[k] < v[mn] || isnan(v[mn]))
            mn = k;
        if (mx == j || v[k] > v[mx] || isnan(v[mx]))
            mx = k;
    }
    /* A millisecond before the end: a range that ends at e takes the cell, one that
     * starts there (Prometheus 2's ranges are closed) does not. */
    int64_t stamp = e > 0 ? e - 1 : 0;
    if (count) {
        if ((rv = emit(ud, PT_AGG_COUNT, stamp, (double)count)) != 0 ||
            (rv = emit(ud, PT_AGG_SUM, stamp, sum)) != 0 ||
            (rv = emit(ud, PT_AGG_MIN, t[mn], v[mn])) != 0 ||
            (rv = emit(ud, PT_AGG_MAX, t[mx], v[mx])) != 0)
            return rv;
    }
    if ((rv = emit(ud, PT_AGG_LAST, t[j - 1], v[j - 1])) != 0 || !count)
        return rv;
    /* The counter's samples: the first, both sides of every drop, the last. A window of
     * more drops than a counter resets in one is a gauge's: its first and last only. */
    size_t drops = 0;
    for (size_t k = first + 1, before = first; k <= last && drops <= MAX_DROPS; k++)
        if (!stale(v[k])) {
            drops += v[k] < v[before];
            before = k;
        }
    size_t prev = j; /* the last one emitted */
    for (size_t k = first, before = j; k <= last; k++) {
        if (stale(v[k]))
            continue;
        int drop = drops <= MAX_DROPS && before != j && v[k] < v[before];
        if (k == first || drop || k == last) {
            if (drop && before != prev && (rv = emit(ud, PT_AGG_COUNTER, t[before], v[before])))
                return rv;
            if ((rv = emit(ud, PT_AGG_COUNTER, t[k], v[k])) != 0)
                return rv;
            prev = k;
        }
        before = k;
    }
    return 0;
}

int pt_rollup_series(const int64_t *t, const double *v, size_t n, int64_t res_ms,
                     pt_rollup_emit emit, void *ud)
{
    for (size_t i = 0; i < n;) {
        int64_t e = (t[i] + res_ms - 1) / res_ms * res_ms; /* t >= 0 */
        size_t j = i + 1;
        while (j < n && t[j] <= e)
            j++;
        int rv = window(t, v, i, j, e, emit, ud);
        if (rv)
            return rv;
        i = j;
    }
    return 0;
}

/* ------------------------------------------------------------------ building */

/* Cells written at once: a batch's cells go in writes of this many, so the builder's
 * memory is one group's samples and this many cells. */
enum { CELLS_MAX = 32768 };

/* The cells of one stage being made for a batch of series: mutations in a's memory,
 * written and dropped every CELLS_MAX. */
typedef struct cells {
    pt_store *st;
    pt_arena a;
    const pt_rollup_stage *s;
    pt_slice sid;
    pt_mutation *m;
    size_t n, cap;
    int64_t from, to; /* the span (from, to]: cells outside it are kept out */
    size_t written;
} cells;

static int write_cells(cells *c)
{
    int rv = c->n ? pt_backend_write(c->st->be, c->m, c->n) : 0;
    c->written += rv == 0 ? c->n : 0;
    c->n = c->cap = 0;
    c->m = NULL;
    pt_arena_reset(&c->a);
    return rv;
}

static int add_cell(void *ud, int agg, int64_t t, double v)
{
    cells *c = ud;
    if (t <= c->from || t > c->to)
        return 0;
    if (c->n == CELLS_MAX) {
        int rv = write_cells(c);
        if (rv)
            return rv;
    }
    if (c->n == c->cap) {
        size_t nc = c->cap ? 2 * c->cap : 4096;
        pt_mutation *m = pt_arena_alloc(&c->a, nc * sizeof(*m));
        if (!m)
            return PT_ENOMEM;
        if (c->n)
            memcpy(m, c->m, c->n * sizeof(*m));
        c->m = m;
        c->cap = nc;
    }
    size_t kn = PT_ROW_KEY_LEN(c->sid.n);
    uint8_t *k = pt_arena_alloc(&c->a, kn + PT_QUAL_LEN + PT_VALUE_LEN);
    if (!k)
        return PT_ENOMEM;
    int64_t base = pt_bucket_base(t);
    pt_rollup_row_key(k, c->sid, base, PT_ROLLUP_CODE(c->s->res_ms, agg));
    pt_cell_encode(t, v, k + kn, k + kn + PT_QUAL_LEN);
    c->m[c->n++] = (pt_mutation){.table = PT_TABLE_POINTS,
                                 .row = {k, kn},
                                 .qual = {k + kn, PT_QUAL_LEN},
                                 .value = {k + kn + PT_QUAL_LEN, PT_VALUE_LEN},
                                 .version_us = t * 1000};
    return 0;
}

/* The stage's cells of one batch of series (their floats; histograms are not rolled up). */
static int batch_cells(cells *c, const pt_read_batch *bt, pt_arena *a, pt_rollup_built *res)
{
    for (size_t i = 0; i < bt->n; i++) {
        const pt_series *se = &bt->s[i];
        if (!se->nsamples)
            continue;
        int64_t *t = pt_arena_alloc(a, se->nsamples * sizeof(*t));
        double *v = pt_arena_alloc(a, se->nsamples * sizeof(*v));
        if (!t || !v)
            return PT_ENOMEM;
        for (size_t k = 0; k < se->nsamples; k++)
            t[k] = se->samples[k].t, v[k] = se->samples[k].v;
        int rv = pt_series_id(a, se->labels, se->nlabels, pt_store_key_limit(c->st), &c->sid);
        if (rv == 0)
            rv = pt_rollup_series(t, v, se->nsamples, c->s->res_ms, add_cell, c);
        if (rv)
            return rv;
        res->series++;
        res->samples += se->nsamples;
    }
    return 0;
}

/* The series of one metric in (from, to]: read a group at a time, their cells written. */
static int build_metric(pt_store *st, const pt_rollup_stage *s, pt_slice name, int64_t from,
                        int64_t to, const atomic_int *cancel, pt_rollup_built *res)
{
    enum { GROUP = 100 };
    pt_arena ra, ba;
    pt_arena_init(&ra, 4096, 0);
    pt_arena_init(&ba, 64 << 10, 0);
    pt_query_matcher m = {.type = PT_MATCH_EQ, .name = PT_SLICE_LIT("__name__"), .value = name};
    pt_query q = {.start_ms = from + 1, .end_ms = to, .ms = &m, .nms = 1};
    pt_read *r = NULL;
    char msg[256];
    int rv = pt_read_start(st, &q, 1, &ra, cancel, &r);
    if (rv == 0)
        pt_read_exemplars(r, 0);
    pt_read_batch bt;
    cells c = {.st = st, .s = s, .from = from, .to = to};
    pt_arena_init(&c.a, 64 << 10, 0);
    while (rv == 0 && (rv = pt_read_next(r, &ba, GROUP, &bt, msg, sizeof(msg))) == 1) {
        rv = batch_cells(&c, &bt, &ba, res);
        if (rv == 0)
            rv = write_cells(&c);
        pt_arena_reset(&ba);
    }
    res->cells += c.written;
    pt_arena_free(&c.a);
    pt_read_free(r);
    pt_arena_free(&ba);
    pt_arena_free(&ra);
    return rv;
}

int pt_rollup_build(pt_store *st, const pt_rollup_stage *s, int64_t from, int64_t to,
                    const atomic_int *cancel, pt_rollup_built *res)
{
    if (to <= from)
        return 0;
    /* The builder's own read limits: every series and sample of the span; its reads are
     * not the clients' (the caller's stats, when it gives a store of its own). */
    pt_store b = *st;
    b.max_series = 0;
    b.max_samples = 0;
    b.read_timeout_ms = 0;
    b.keep_ms = NULL; /* a stage keeps its own retention */
    pt_arena a;
    pt_arena_init(&a, 4096, 0);
    qctx q;
    qctx_start(&q, &b, &a, cancel);
    q.day_first = (from + 1) - (from + 1) % b.index_bucket_ms;
    q.day_last = to - to % b.index_bucket_ms;
    pt_slice *names = NULL;
    size_t n = 0;
    int rv = pt_select_values(&q, PT_SLICE_LIT("__name__"), 0, &names, &n);
    for (size_t i = 0; i < n && rv == 0; i++)
        rv = build_metric(&b, s, names[i], from, to, cancel, res);
    pt_arena_free(&a);
    return rv;
}

static int on_first(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)qual, (void)value;
    size_t end;
    *(int64_t *)ud = pt_key_time(row.p, row.n, "@", &end);
    return 0;
}

int pt_rollup_first_day(pt_store *st, int64_t *day)
{
    uint8_t b0[16 + PT_BASE_DIGITS], b1[16 + PT_BASE_DIGITS];
    pt_slice name = PT_SLICE_LIT("__name__");
    size_t n0 = (size_t)(pt_index_values_prefix(b0, name, 0) - b0);
    size_t n1 = (size_t)(pt_index_values_prefix(b1, name, PT_MAX_TIME_MS) - b1);
    pt_row_range r = {{b0, n0}, {b1, n1}};
    pt_scan sc = {.table = PT_TABLE_INDEX, .ranges = &r, .nranges = 1, .row_limit = 1};
    *day = -1;
    int rv = pt_backend_scan(st->be, &sc, on_first, day);
    if (*day < 0)
        *day = INT64_MAX;
    return rv;
}

/* ------------------------------------------------------------------ watermarks */

typedef struct wmread {
    int64_t wm;
} wmread;

static int on_wm(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)row, (void)qual;
    wmread *w = ud;
    if (value.n == 8)
        w->wm = (int64_t)pt_get_be64(value.p);
    return 0;
}

int pt_rollup_row_scan(pt_backend *be, pt_slice qual_start, pt_slice qual_end, pt_cell_fn fn,
                       void *ud)
{
    uint8_t row[sizeof(PT_ROLLUP_ROW)];
    memcpy(row, PT_ROLLUP_ROW, sizeof(row)); /* the NUL ends the one-row range */
    pt_row_range r = {{row, sizeof(row) - 1}, {row, sizeof(row)}};
    pt_scan sc = {.table = PT_TABLE_INDEX,
                  .ranges = &r,
                  .nranges = 1,
                  .qual_start = qual_start,
                  .qual_end = qual_end};
    return pt_backend_scan(be, &sc, fn, ud);
}

int pt_rollup_watermark(pt_store *st, const pt_rollup_stage *s, int64_t *wm)
{
    uint8_t qual[8], qend[8];
    pt_put_be64(qual, (uint64_t)s->res_ms);
    pt_put_be64(qend, (uint64_t)s->res_ms + 1);
    wmread w = {0};
    int rv = pt_rollup_row_scan(st->be, (pt_slice){qual, 8}, (pt_slice){qend, 8}, on_wm, &w);
    *wm = w.wm;
    return rv;
}

int pt_rollup_set_watermark(pt_store *st, const pt_rollup_stage *s, int64_t wm)
{
    uint8_t qual[8], val[8];
    pt_put_be64(qual, (uint64_t)s->res_ms);
    pt_put_be64(val, (uint64_t)wm);
    pt_mutation m = {.table = PT_TABLE_INDEX,
                     .row = PT_SLICE_LIT(PT_ROLLUP_ROW),
                     .qual = {qual, 8},
                     .value = {val, 8},
                     .version_us = pt_store_now(st) * 1000};
    return pt_backend_write(st->be, &m, 1);
}

void pt_rollup_late_note(pt_rollup_late *l, int64_t day)
{
    if (day >= atomic_load_explicit(&l->floor, memory_order_relaxed))
        return;
    int64_t cur = atomic_load_explicit(&l->late, memory_order_relaxed);
    while (day < cur && !atomic_compare_exchange_weak(&l->late, &cur, day))
        ;
}

int64_t pt_rollup_late_take(pt_rollup_late *l)
{
    return atomic_exchange(&l->late, INT64_MAX);
}

/* ------------------------------------------------------------------ reads */

static int func_is(pt_slice f, const char *name)
{
    return pt_slice_eq(f, (pt_slice){(const uint8_t *)name, strlen(name)});
}

int pt_rollup_choose(const pt_rollup_stage *stages, size_t n, const pt_read_hints *h,
                     size_t *stage, int *agg)
{
    static const struct {
        const char *func;
        int agg;
    } range_funcs[] = {
        {"rate", PT_AGG_COUNTER},        {"increase", PT_AGG_COUNTER},
        {"max_over_time", PT_AGG_MAX},   {"min_over_time", PT_AGG_MIN},
        {"sum_over_time", PT_AGG_SUM},   {"last_over_time", PT_AGG_LAST},
    };
    if (h->step_ms <= 0)
        return 0;
    int a = 0;
    int64_t most; /* the coarsest resolution the query stays exact with, but at its edges */
    if (h->range_ms > 0) {
        for (size_t i = 0; i < sizeof(range_funcs) / sizeof(range_funcs[0]) && !a; i++)
            if (func_is(h->func, range_funcs[i].func))
                a = range_funcs[i].agg;
        most = h->range_ms;
    } else {
        /* A plain selector (maybe inside an aggregation): each step's value is the last
         * sample before it, as long as one is within the lookback. */
        a = PT_AGG_LAST;
        most = PT_ROLLUP_LOOKBACK_MS;
    }
    if (!a)
        return 0;
    if (h->step_ms < most)
        most = h->step_ms;
    int found = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t res = stages[i].res_ms, first = h->start_ms + h->range_ms;
        int aligned = h->step_ms % res == 0 && first >= 0 && first % res == 0;
        if (res > most || (h->range_ms > 0 && !aligned && 4 * res > h->range_ms))
            continue;
        if (!found || res > stages[*stage].res_ms) {
            *stage = i;
            found = 1;
        }
    }
    if (found)
        *agg = a;
    return found;
}

int pt_rollup_code_keep(const pt_rollup_stage *stages, size_t n, int64_t code, int64_t *keep_ms)
{
    int64_t agg = code % 8, res = code / 8 * 1000;
    if (agg < PT_AGG_COUNT || agg >= PT_AGG_END)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (stages[i].res_ms == res) {
            *keep_ms = stages[i].keep_ms;
            return 1;
        }
    return 0;
}
