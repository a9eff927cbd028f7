/*
 * Internals of the read path, shared by its modules, each calling only those before it:
 * hindex.c (a hash index over an array), cands.c (series references to candidate series),
 * select.c (matchers to series, through the index) and read.c (the series' samples, a
 * group at a time).
 */
#ifndef PT_READ_INT_H
#define PT_READ_INT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "clock.h"
#include "error.h"
#include "matcher.h"
#include "store.h"

typedef struct series {
    pt_slice sid;
    pt_label *labels;
    size_t nlabels;
    /* The first and last of the query's index buckets the index lists it in, and the
     * data buckets those index buckets reach (bit j: the j-th after day_lo's; bit 63 that
     * one and every later one): every sample has its series' index rows in its index
     * bucket, so a read scans only those data rows. */
    int64_t day_lo, day_hi;
    uint64_t bases;
} series;

/* The bit of data bucket base in a series' bases, whose bit 0 is bucket base0. */
static inline uint64_t pt_series_base_bit(int64_t base0, int64_t base)
{
    int64_t j = (base - base0) / PT_BUCKET_MS;
    return (uint64_t)1 << (j < 63 ? j : 63);
}

/* Widens s's days to the index buckets lo..hi (of bucket_ms each) and its bases to the
 * data buckets they reach (one index bucket may straddle two). A new series starts as
 * (series){.day_lo = lo, .day_hi = lo}. */
void pt_series_widen(series *s, int64_t lo, int64_t hi, int64_t bucket_ms);

/* Whether series s may have data rows in data bucket base: its days and bases say so. */
static inline int pt_series_in(const series *s, int64_t base, int64_t bucket_ms)
{
    int64_t lo = pt_bucket_base(s->day_lo);
    return base >= lo && base <= s->day_hi + bucket_ms - 1 &&
           (s->bases & pt_series_base_bit(lo, base));
}

/* A hash index over an array its owner keeps, in insertion order (hindex.c): item i has
 * hash h[i]; slots hold i + 1 (0 = empty), 2 × cap of them; arena memory. A zeroed one
 * is empty. */
typedef struct hindex {
    uint64_t *h;
    uint32_t *slots;
    size_t n, cap;
} hindex;

/* The first half of adding key, whose hash is h, to the array *items (isz bytes an item)
 * that x indexes: 0 when an item i with eq(*items, i, key) is there already (*found = i
 * when found is not NULL); PT_ELIMIT when x holds max items (0: no limit); else 1 with
 * room made for item x->n, which the caller then stores and indexes with pt_hindex_add.
 * Making room may move *items to a new array in a (the old one is left as it was):
 * PT_ENOMEM when a has no room. */
int pt_hindex_claim(hindex *x, pt_arena *a, void **items, size_t isz, uint64_t h,
                    int (*eq)(const void *, size_t, const void *), const void *key, size_t max,
                    size_t *found);
/* Indexes item x->n, which the caller has stored after pt_hindex_claim, under hash h. */
void pt_hindex_add(hindex *x, uint64_t h);

/* Candidate series of one query, deduplicated by sid. */
typedef struct cands {
    pt_arena *a;
    series *v;
    size_t n;     /* the selected ones, v[0, n), set by pt_select; x.n while collecting */
    hindex x;
    size_t limit; /* max series, 0 = none */
    int err;
} cands;

/* Series references collected from index lists, deduplicated. */
typedef struct refset {
    uint64_t *v;
    hindex x;
} refset;

/* One query being answered: its matchers, days, candidates and deadline. */
typedef struct qctx {
    pt_store *st;
    pt_arena *a;
    pt_matcher *ms;
    size_t nms;
    int64_t day_first, day_last;
    cands c;
    uint64_t deadline_ns; /* 0 = none */
    const atomic_int *cancel; /* set when the client went away; NULL = never */
    size_t ticks;         /* rows and cells seen, for the deadline checks */
    uint64_t qmask; /* label mask of the equality matchers (pt_label_mask_add) */
    refset refs;    /* series references the index lists gave */
    size_t rows;    /* index rows scanned so far */
    size_t rows_cached; /* list cells read from the list cache instead */
    size_t evals;       /* regex evaluations, for the deadline checks */
    const pt_matcher *costly; /* the matcher that ran into its limits (PT_EREGEXLIMIT) */
    int cold; /* a scan of this read waited for the disk (pt_scan.cold) */
} qctx;

/* Adds ref to q->refs unless present (cands.c): 0, or PT_ELIMIT (far past the series
 * limit) / PT_ENOMEM. */
int pt_cands_add_ref(qctx *q, uint64_t ref);
/* Adds the series sid (a metric's list cell in the index bucket day names it) to the
 * candidates unless present (then widens its days to day): 0, or PT_ELIMIT / PT_ENOMEM. */
int pt_cands_add_sid(qctx *q, pt_slice sid, int64_t day);
/* Adds the series behind q->refs to the candidates q->c.v[0, q->c.x.n), deduplicated by
 * sid, their labels in q->a; sorts q->refs->v, whose index then goes stale. 0, or
 * PT_ELIMIT (far past the series limit), PT_ETIMEOUT, PT_ECANCELLED, PT_ENOMEM, a
 * storage error. */
int pt_cands_resolve(qctx *q);

/* A query context over st for a request: its memory in a, read.timeout from now, stopped
 * early when *cancel is set (may be NULL); days and limits are the caller's. */
static inline void qctx_start(qctx *q, pt_store *st, pt_arena *a, const atomic_int *cancel)
{
    memset(q, 0, sizeof(*q));
    q->st = st;
    q->a = a;
    q->c.a = a;
    q->cancel = cancel;
    if (st->read_timeout_ms > 0)
        q->deadline_ns = pt_now_ns() + (uint64_t)st->read_timeout_ms * 1000000u;
}

/* Every so many index rows or cells, a read checks its deadline. */
#define DEADLINE_EVERY 1024
/* And every so many regex evaluations: one may take up to its match limit (some ms at
 * read.regex_match_limit's default). */
#define DEADLINE_EVERY_REGEX 16

static inline int deadline_passed(const qctx *q)
{
    if (q->cancel && atomic_load_explicit(q->cancel, memory_order_relaxed))
        return PT_ECANCELLED;
    return q->deadline_ns && pt_now_ns() > q->deadline_ns ? PT_ETIMEOUT : 0;
}

/* The same, looked at every DEADLINE_EVERY calls (from per-row and per-cell callbacks). */
static inline int past_deadline(qctx *q)
{
    return ++q->ticks % DEADLINE_EVERY == 0 ? deadline_passed(q) : 0;
}

/* Lists the series every matcher of q accepts, sorted by labels, into q->c.v[0, q->c.n),
 * allocated from q->a. 0, or PT_ELIMIT (over max_series candidates), PT_ETIMEOUT (past
 * the deadline), PT_ECANCELLED, PT_EREGEXLIMIT (q->costly set), a storage error. */
int pt_select(qctx *q);

/* pt_select's last step: keeps the candidates q->c.v[0, q->c.x.n) that every matcher
 * accepts, sorted by labels, in q->c.v[0, q->c.n). Its errors: PT_EREGEXLIMIT (q->costly
 * set), PT_ETIMEOUT, PT_ECANCELLED. */
int pt_select_filter(qctx *q);

/* What pt_store_delete did: series with index rows in the window, their (series, index
 * bucket) pairs, and the pairs left without samples whose index rows it erased. */
typedef struct pt_delete_result {
    size_t series, series_days, index_days_erased;
} pt_delete_result;

/* Deletes the samples and exemplars of the series v[0, n) in [start, end] (delete.c), for
 * good, and the index rows of every (series, index bucket) left without samples. 0, or
 * PT_ECANCELLED, PT_ENOMEM, PT_EBADREQ (a backend that cannot erase), a storage error:
 * then part may be done, and deleting again finishes it. */
int pt_store_delete(pt_store *st, const series *v, size_t n, int64_t start, int64_t end,
                    pt_arena *a, const atomic_int *cancel, pt_delete_result *res);


/* The distinct values of label name over q's days (its values rows), unescaped, in no
 * particular order, into *out (arena q->a). At most max of them (0 = no limit): past it
 * PT_ELIMIT, with the first max in *out. Else 0 or a storage error. */
int pt_select_values(qctx *q, pt_slice name, size_t max, pt_slice **out, size_t *n);
/* The text an index key part stands for (a name, value or metric): esc unescaped, or when
 * esc is a digest the index cell's copy; in arena a. 0, PT_ENOMEM or PT_EINTERNAL. */
int pt_index_part_text(pt_arena *a, pt_slice esc, pt_slice cell, pt_slice *out);
/* The label names with a values row in q's days (unescaped, in a): one seek to the next
 * name, and one to the window when the name's first row is before it. At most max (then
 * *capped). 0 or an error. */
int pt_select_names(qctx *q, size_t max, pt_slice **out, size_t *n, int *capped);

#endif
