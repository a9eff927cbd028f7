/*
 * Deleting series through the store (pt_store_delete, adapter/store/delete.c) over any
 * backend that erases: the window's samples of the selected series go and no others; the
 * index rows of a (series, day) left without samples go, and the values rows no series of
 * that day lists any more; a day that keeps samples keeps its rows; the series' next write
 * indexes a day again (the index cache forgot it); deleting again changes nothing; a
 * compaction after a delete brings nothing back. The caller gives a backend with fresh
 * tables.
 */
#ifndef PT_TEST_DELETE_CONFORMANCE_H
#define PT_TEST_DELETE_CONFORMANCE_H

#include "matcher.h"
#include "read_int.h"
#include "store_helpers.h"
#include "tap.h"

#define DL_DAY INT64_C(86400000)
#define DL_D0 (INT64_C(1700000000000) / DL_DAY * DL_DAY)
#define DL_H INT64_C(3600000)

/* A query context over the days [d0, d1] in a. */
static void dl_qctx(qctx *q, pt_store *st, pt_arena *a, int64_t d0, int64_t d1)
{
    pt_arena_init(a, 0, 0);
    qctx_start(q, st, a, NULL);
    q->day_first = d0;
    q->day_last = d1;
    q->c.limit = 1000;
}

/* The series every matcher accepts over the days [d0, d1], through the index (with the
 * labels of the first in first, when there is one); -1 on error. */
static long dl_select(pt_store *st, const tmatch *tm, size_t n, int64_t d0, int64_t d1,
                      series *first)
{
    pt_arena a;
    qctx q;
    dl_qctx(&q, st, &a, d0, d1);
    q.nms = n;
    q.ms = pt_arena_calloc(&a, n * sizeof(*q.ms));
    char msg[256];
    long rv = 0;
    for (size_t i = 0; i < n && rv == 0; i++)
        rv = pt_matcher_init(&q.ms[i], tm[i].type, pt_slice_str(tm[i].name),
                             pt_slice_str(tm[i].value), NULL, msg, sizeof(msg));
    if (rv == 0)
        rv = pt_select(&q);
    if (rv == 0) {
        rv = (long)q.c.n;
        if (first && q.c.n) {
            /* Copied out of the arena for the caller (freed with dl_series_free). */
            series s = q.c.v[0];
            pt_label *ls = calloc(s.nlabels, sizeof(*ls));
            uint8_t *sid = malloc(s.sid.n);
            memcpy(sid, s.sid.p, s.sid.n);
            for (size_t i = 0; i < s.nlabels; i++) {
                uint8_t *nm = malloc(s.labels[i].name.n + 1), *v = malloc(s.labels[i].value.n + 1);
                memcpy(nm, s.labels[i].name.p, s.labels[i].name.n);
                memcpy(v, s.labels[i].value.p, s.labels[i].value.n);
                ls[i] = (pt_label){{nm, s.labels[i].name.n}, {v, s.labels[i].value.n}};
            }
            *first = (series){{sid, s.sid.n}, ls, s.nlabels, s.day_lo, s.day_hi, s.bases};
        }
    } else {
        diag("select: %ld", rv);
        rv = -1;
    }
    for (size_t i = 0; i < n; i++)
        pt_matcher_free(&q.ms[i]);
    pt_arena_free(&a);
    return rv;
}

static void dl_series_free(series *s)
{
    for (size_t i = 0; i < s->nlabels; i++) {
        free((void *)s->labels[i].name.p);
        free((void *)s->labels[i].value.p);
    }
    free(s->labels);
    free((void *)s->sid.p);
}

/* Values of label name over [d0, d1] through the values rows, comma-joined and sorted. */
static const char *dl_values(pt_store *st, const char *name, int64_t d0, int64_t d1)
{
    static char out[256];
    pt_arena a;
    qctx q;
    dl_qctx(&q, st, &a, d0, d1);
    pt_slice *v;
    size_t n = 0;
    out[0] = '\0';
    if (pt_select_values(&q, pt_slice_str(name), 0, &v, &n) != 0) {
        pt_arena_free(&a);
        return "ERROR";
    }
    for (size_t i = 1; i < n; i++) /* a few: insertion sort */
        for (size_t j = i; j > 0 && pt_slice_cmp(v[j - 1], v[j]) > 0; j--) {
            pt_slice t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    size_t o = 0;
    for (size_t i = 0; i < n && o < sizeof(out); i++)
        o += (size_t)snprintf(out + o, sizeof(out) - o, "%s%.*s", i ? "," : "", (int)v[i].n,
                              (const char *)v[i].p);
    pt_arena_free(&a);
    return out;
}

/* Samples a remote read returns for metric m, job j over everything; -1 on error. */
static long dl_samples(pt_store *st, const char *m, const char *j)
{
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    tmatch ms[] = {{0, "__name__", m}, {0, "job", j}};
    Prometheus__ReadResponse resp;
    char msg[256];
    long n = -1;
    if (store_read(st, mk_read(&a, 0, DL_D0 + 10 * DL_DAY, ms, 2), &a, NULL, &resp, msg,
                   sizeof(msg)) == 0) {
        n = 0;
        for (size_t i = 0; i < resp.results[0]->n_timeseries; i++)
            n += (long)resp.results[0]->timeseries[i]->n_samples;
    } else {
        diag("read: %s", msg);
    }
    pt_arena_free(&a);
    return n;
}

/* compact (may be NULL) runs the backend's compaction right after the first delete: the
 * checks after it then also say that a compaction brings nothing back. */
static void pt_delete_conformance(pt_backend *be, void (*compact)(void *ud), void *ud,
                                  const char *label)
{
    pt_store st = {.index_bucket_ms = DL_DAY, .max_series = 1000, .max_samples = 100000,
                   .now_ms = DL_D0 + 3 * DL_DAY};
    const pt_store_caches caches = {.index_entries = 1 << 12, .series_bytes = 1 << 20,
                                    .list_bytes = 1 << 20, .hints = 1};
    if (pt_store_open(&st, be, &caches) != 0)
        BAIL_OUT("out of memory for the store's caches");
    /* a: samples on days 0, 1 (two) and 2; b: days 0 and 1; c: another metric, day 1. */
    tseries ts[] = {
        {{"__name__", "m", "job", "a", "k", "1", NULL},
         {DL_D0 + DL_H, DL_D0 + DL_DAY + DL_H, DL_D0 + DL_DAY + 20 * DL_H, DL_D0 + 2 * DL_DAY + DL_H},
         {1, 2, 3, 4},
         4},
        {{"__name__", "m", "job", "b", NULL}, {DL_D0 + DL_H, DL_D0 + DL_DAY + DL_H}, {5, 6}, 2},
        {{"__name__", "n", "job", "a", NULL}, {DL_D0 + DL_DAY + DL_H}, {7}, 1},
    };
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    pt_write_result res;
    ok(pt_store_write(&st, mk_write(&a, ts, 3), &a, &res) == 0, "%s: delete: 3 series written",
       label);
    static const tmatch ma[] = {{0, "__name__", "m"}, {0, "job", "a"}};
    static const tmatch m_all[] = {{0, "__name__", "m"}};
    series sa = {0};
    is(dl_select(&st, ma, 2, DL_D0, DL_D0 + 2 * DL_DAY, &sa), 1, "%s: delete: m{job=a} selected",
       label);
    ok(dl_select(&st, m_all, 1, DL_D0, DL_D0, NULL) == 2 &&
           strcmp(dl_values(&st, "job", DL_D0, DL_D0), "a,b") == 0 &&
           strcmp(dl_values(&st, "k", DL_D0, DL_D0), "1") == 0,
       "%s: delete: day 0 lists both series, job a and b, k 1", label);

    /* Day 0 whole and the first half of day 1. */
    pt_delete_result dr;
    int rv = pt_store_delete(&st, &sa, 1, DL_D0, DL_D0 + DL_DAY + 12 * DL_H, &a, NULL, &dr);
    ok(rv == 0 && dr.series == 1 && dr.series_days == 2 && dr.index_days_erased == 1,
       "%s: delete: one series, two days, one left without samples (%d: %zu %zu %zu)", label, rv,
       dr.series, dr.series_days, dr.index_days_erased);
    if (compact)
        compact(ud);
    is(dl_samples(&st, "m", "a"), 2, "%s: delete: m{job=a} keeps its 2 samples after the window",
       label);
    is(dl_samples(&st, "m", "b"), 2, "%s: delete: m{job=b} keeps both", label);
    is(dl_samples(&st, "n", "a"), 1, "%s: delete: n{job=a} keeps its sample", label);
    is(dl_select(&st, m_all, 1, DL_D0, DL_D0, NULL), 1,
       "%s: delete: day 0 no longer lists m{job=a}", label);
    is_str(dl_values(&st, "job", DL_D0, DL_D0), "b",
           "%s: delete: nor the value a of job, which no other series of day 0 has", label);
    is_str(dl_values(&st, "k", DL_D0, DL_D0), "", "%s: delete: nor the label k", label);
    is(dl_select(&st, m_all, 1, DL_D0 + DL_DAY, DL_D0 + DL_DAY, NULL), 2,
       "%s: delete: day 1, which keeps a sample of m{job=a}, lists it still", label);
    is_str(dl_values(&st, "job", DL_D0 + DL_DAY, DL_D0 + DL_DAY), "a,b",
           "%s: delete: and its values", label);

    rv = pt_store_delete(&st, &sa, 1, DL_D0, DL_D0 + DL_DAY + 12 * DL_H, &a, NULL, &dr);
    ok(rv == 0 && dr.series == 1 && dr.series_days == 1 && dr.index_days_erased == 0 &&
           dl_samples(&st, "m", "a") == 2,
       "%s: delete: again: day 1 alone found, nothing more goes", label);

    /* Written again on day 0: listed again (the index cache forgot the pair). */
    tseries again = {{"__name__", "m", "job", "a", "k", "1", NULL}, {DL_D0 + 2 * DL_H}, {8}, 1};
    ok(pt_store_write(&st, mk_write(&a, &again, 1), &a, &res) == 0 &&
           dl_select(&st, m_all, 1, DL_D0, DL_D0, NULL) == 2 &&
           strcmp(dl_values(&st, "job", DL_D0, DL_D0), "a,b") == 0,
       "%s: delete: a later write on day 0 lists the series there again", label);
    is(dl_samples(&st, "m", "a"), 3, "%s: delete: and reads its sample", label);

    /* Everything of m{job=a}, whatever the window: nothing left, nowhere listed. */
    rv = pt_store_delete(&st, &sa, 1, -PT_MAX_TIME_MS, PT_MAX_TIME_MS, &a, NULL, &dr);
    ok(rv == 0 && dr.series_days == 3 && dr.index_days_erased == 3 &&
           dl_samples(&st, "m", "a") == 0 &&
           dl_select(&st, ma, 2, DL_D0, DL_D0 + 2 * DL_DAY, NULL) == 0,
       "%s: delete: the whole series over an unbounded window (%zu days)", label,
       dr.series_days);
    ok(dl_samples(&st, "m", "b") == 2 && dl_samples(&st, "n", "a") == 1 &&
           strcmp(dl_values(&st, "job", DL_D0 + DL_DAY, DL_D0 + DL_DAY), "a,b") == 0,
       "%s: delete: the others untouched, job=a still listed on day 1 for n", label);
    dl_series_free(&sa);
    pt_arena_free(&a);
    pt_store_close(&st);
}

#endif
