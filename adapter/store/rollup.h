/*
 * Roll-ups (docs/storage-format.md "Roll-ups", docs/http-api.md "Downsampled reads"):
 * per series, stage and window of the stage's resolution, the aggregates long-range
 * dashboards ask for, in rows of their own beside the data rows, so that a month of a
 * series reads a few thousand cells instead of a few hundred thousand.
 *
 * A window of resolution res ends at a multiple of it and holds the samples after its
 * start up to and including its end, (e - res, e], as a PromQL range (T - range, T] of
 * Prometheus 3 does; Prometheus 2's ranges [T - range, T] also take a sample exactly at
 * their start, which here is its window's end in the window before.
 *
 * A stage keeps six rows per series and data bucket, one per aggregate: row key = the
 * series id, ",%", then 13 digits of the data bucket's base plus the row's code
 * (PT_ROLLUP_CODE: the resolution in seconds and the aggregate), so the rows of a series
 * stay together and a row's code and base come back from its key alone. Their cells are
 * samples like a data row's (4-byte offset from the base, 8-byte float), so every reader
 * of data rows reads them:
 *
 *   count, sum  one cell a window, a millisecond before its end (so that a range ending
 *               at the end takes it and one starting there does not, in either
 *               Prometheus' ranges); count is kept for averages, not served yet;
 *   min, max    the window's sample with the least / greatest value (Prometheus'
 *               min_over_time / max_over_time rule: a NaN gives way to any number);
 *   last        the window's last sample, a staleness marker too;
 *   counter     the window's first and last samples and both samples of every drop
 *               (a counter reset), so increase() and rate() over whole windows see
 *               exactly what they would see in the raw data; a window of more than two
 *               drops is no counter's (a gauge's), and keeps its first and last only.
 *
 * min, max, last and counter are samples of the series itself, at their own times: a
 * rebuilt window (late samples) that chooses another sample leaves the one chosen before,
 * which is a real sample too. Staleness markers count nowhere but in last. Native
 * histograms are not rolled up.
 *
 * Stages are built by pt_rollup_build from the raw data of windows that have ended, a
 * span at a time, after their watermark (the index table's row "==rollup", one cell per
 * resolution); reads use them only when the client asks (pt_read_rollups) and the query's
 * hints fit a stage (pt_rollup_choose).
 */
#ifndef PT_ROLLUP_H
#define PT_ROLLUP_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "slice.h"

typedef struct pt_store pt_store;

#define PT_ROLLUP_MAX_STAGES 8
#define PT_ROLLUP_MIN_RES_MS 60000 /* a minute */
#define PT_ROLLUP_DAY_MS 86400000
#define PT_ROLLUP_MARK '%'
/* The index table's row of the watermarks: "==" then a letter no hex digit is. */
#define PT_ROLLUP_ROW "==rollup"
/* The lookback a plain selector gets by default (Prometheus' --query.lookback-delta): a
 * stage coarser than it would leave instants without a sample. */
#define PT_ROLLUP_LOOKBACK_MS 300000

typedef struct pt_rollup_stage {
    int64_t res_ms;  /* divides a day, at least a minute */
    int64_t keep_ms; /* retention, 0 = forever */
} pt_rollup_stage;

enum {
    PT_AGG_COUNT = 1,
    PT_AGG_SUM,
    PT_AGG_MIN,
    PT_AGG_MAX,
    PT_AGG_LAST,
    PT_AGG_COUNTER,
    PT_AGG_END
};

/* The code a stage's aggregate row adds to its base in the key (below 2^32). */
#define PT_ROLLUP_CODE(res_ms, agg) ((int64_t)(res_ms) / 1000 * 8 + (agg))

/* Writes sid ",%" (base + code) into dst (PT_ROW_KEY_LEN(sid.n) bytes); returns the end. */
uint8_t *pt_rollup_row_key(uint8_t *dst, pt_slice sid, int64_t base, int64_t code);

/* One aggregate's sample of a window (emitted in time order per aggregate). */
typedef int (*pt_rollup_emit)(void *ud, int agg, int64_t t, double v);

/* The aggregates of the windows of res_ms that the n samples (t >= 0, ascending) of one
 * series fall in, each window complete in t[0, n). Returns 0 or the first error emit
 * returned. */
int pt_rollup_series(const int64_t *t, const double *v, size_t n, int64_t res_ms,
                     pt_rollup_emit emit, void *ud);

/* What a build did. */
typedef struct pt_rollup_built {
    size_t series, samples, cells;
} pt_rollup_built;

/* Builds stage s's windows ending in (from, to] (multiples of its resolution) from the raw
 * data of every series of st, metric by metric, and writes their cells. Idempotent. 0, or
 * PT_ECANCELLED (*cancel set), PT_ENOMEM, a storage error: then part may be written, and
 * building again finishes it. */
int pt_rollup_build(pt_store *st, const pt_rollup_stage *s, int64_t from, int64_t to,
                    const atomic_int *cancel, pt_rollup_built *res);

/* The first index bucket of st that lists a series (INT64_MAX: none): where a new stage's
 * building starts. 0 or a storage error. */
int pt_rollup_first_day(pt_store *st, int64_t *day);

/* Scans the cells of the index row PT_ROLLUP_ROW whose qualifiers are in [qual_start,
 * qual_end) (the watermarks, the builders' lease) of backend be. */
int pt_rollup_row_scan(pt_backend *be, pt_slice qual_start, pt_slice qual_end, pt_cell_fn fn,
                       void *ud);

/* The end of what stage s has built in st, every sample up to it (0: nothing yet): *wm.
 * 0 or a storage error. */
int pt_rollup_watermark(pt_store *st, const pt_rollup_stage *s, int64_t *wm);
/* Records it. 0 or a storage error. */
int pt_rollup_set_watermark(pt_store *st, const pt_rollup_stage *s, int64_t wm);

/* A query's hints (remote read's ReadHints): its step, the range of its range selector,
 * the function or aggregation around the selector, and where the selector's data starts
 * (the first evaluation's time minus the range, or minus the lookback for a plain one). */
typedef struct pt_read_hints {
    int64_t step_ms, range_ms, start_ms;
    pt_slice func;
} pt_read_hints;

/* The stage of stages[0, n) and the aggregate that answer a query with hints h as the
 * function would on raw data, up to the windows at the range's edges: 1 with *stage and
 * *agg set, 0 when the query should read raw data. A stage fits when its resolution is at
 * most the step, and for a range function at most the range, and either every
 * evaluation falls on a window's edge (step and first evaluation multiples of the
 * resolution) or the range holds at least four windows; for a plain selector at most the
 * lookback (5m). Of those, the coarsest. */
int pt_rollup_choose(const pt_rollup_stage *stages, size_t n, const pt_read_hints *h,
                     size_t *stage, int *agg);

/* Late samples: writes below floor (what every stage has built, the builder's to set) are
 * noted by their index bucket in late, which the builder takes to build those windows
 * again. INT64_MAX in late: none. */
typedef struct pt_rollup_late {
    _Atomic int64_t floor, late;
} pt_rollup_late;

/* Notes a write's earliest index bucket day (once a request, after it is stored). */
void pt_rollup_late_note(pt_rollup_late *l, int64_t day);
/* The earliest late day noted since the last take, INT64_MAX when none. */
int64_t pt_rollup_late_take(pt_rollup_late *l);

/* The keep of a roll-up row of code (its stage's retention) among stages[0, n): 1 with
 * *keep_ms set, 0 for a code no stage has. */
int pt_rollup_code_keep(const pt_rollup_stage *stages, size_t n, int64_t code, int64_t *keep_ms);

#endif
