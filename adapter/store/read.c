/* The read path: the selected series' cells merged in time order, a group at a time. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bytes.h"
#include "clock.h"
#include "exemplar.h"
#include "gorilla.h"
#include "read_int.h"
#include "rollup.h"

typedef struct samples {
    qctx *q;
    pt_arena *a;
    int64_t base;
    pt_series *se; /* the answer: its arrays grow in a */
    size_t cap, hcap, ecap, ccap;
    size_t *total;
    size_t limit;
    pt_histogram *scratch; /* the read's one decoded histogram */
    int chunks;            /* stored chunks are passed on as they are */
    size_t raw_samples;    /* in them */
    int64_t start, end;
} samples;

/* arr (n items, cap of room) with room for one more, in s's arena: 0, or PT_ENOMEM with
 * arr NULL (the read fails then, and its batch with it). */
#define ROOM(s, arr, n, cap, first)                                                        \
    (((arr) = pt_arena_grow((s)->a, (arr), (n), &(cap), sizeof(*(arr)), (first))) ? 0      \
                                                                                  : PT_ENOMEM)

/* A cell of an exemplar row: the exemplar, when its exact time is in the window. */
static int on_exemplar_cell(samples *s, pt_slice value)
{
    int64_t t;
    double v;
    pt_label *ls;
    size_t nl;
    /* The labels are kept as slices of the value, which lives only through this call. */
    uint8_t *copy = pt_arena_alloc(s->a, value.n ? value.n : 1);
    if (!copy)
        return PT_ENOMEM;
    memcpy(copy, value.p, value.n);
    value.p = copy;
    if (pt_exemplar_cell_decode(s->a, s->base, value, &t, &v, &ls, &nl) != 0)
        return PT_EINTERNAL;
    if (t < s->start || t > s->end)
        return 0;
    pt_series *se = s->se;
    if (ROOM(s, se->exemplars, se->nexemplars, s->ecap, 8))
        return PT_ENOMEM;
    se->exemplars[se->nexemplars++] = (pt_exemplar){.labels = ls, .nlabels = nl, .t = t, .v = v};
    (*s->total)++;
    return 0;
}

/* A cell whose value is not 8 bytes: a histogram sample, copied into the arena. */
static int on_hist_cell(samples *s, pt_slice qual, pt_slice value)
{
    if (qual.n != PT_QUAL_LEN)
        return PT_EINTERNAL;
    pt_series *se = s->se;
    if (ROOM(s, se->hists, se->nhists, s->hcap, 16))
        return PT_ENOMEM;
    pt_histogram *h = s->scratch;
    int rv = pt_histogram_cell_decode(value.p, value.n, h);
    if (rv != 0)
        return rv;
    h->t = s->base + pt_get_be32(qual.p);
    if (h->t < s->start)
        return 0;
    if ((rv = pt_histogram_copy_in(s->a, &se->hists[se->nhists], h)) != 0)
        return rv;
    se->nhists++;
    (*s->total)++;
    return 0;
}

static int on_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    samples *s = ud;
    if (s->limit && *s->total >= s->limit)
        return PT_ELIMIT;
    int rv = past_deadline(s->q);
    if (rv)
        return rv;
    if (row.n > PT_BASE_DIGITS + 1 && row.p[row.n - PT_BASE_DIGITS - 1] == '#')
        return on_exemplar_cell(s, value);
    if (pt_histogram_cell_is(value.n))
        return on_hist_cell(s, qual, value);
    pt_series *se = s->se;
    if (ROOM(s, se->samples, se->nsamples, s->cap, 64))
        return PT_ENOMEM;
    pt_sample *out = &se->samples[se->nsamples];
    if (pt_cell_decode(s->base, qual, value, &out->t, &out->v) != 0)
        return PT_EINTERNAL;
    if (out->t < s->start)
        return 0; /* past the series' retention rule */
    se->nsamples++;
    (*s->total)++;
    return 0;
}

/* Series read with one scan: a backend turns them into one request (Bigtable: one
 * ReadRows with a row set of this many rows). */
enum { READ_GROUP = 1000 };

/* A series' row in the bucket being read. */
typedef struct rowref {
    pt_slice row;
    size_t idx; /* into the query's series and their samples */
} rowref;

static int rowref_cmp(const void *x, const void *y)
{
    return pt_slice_cmp(((const rowref *)x)->row, ((const rowref *)y)->row);
}

/* Routes the cells of one grouped scan to their series. Rows come in key order, the refs
 * are sorted by key, so a cursor finds each row's series. */
typedef struct routed {
    const rowref *refs;
    size_t n, cur;
    samples *ss;
} routed;

/* Whether row is ref. A backend may hand back a one-row range's own bytes (the embedded
 * store does): the same memory is the same row, without comparing ~170 bytes per cell. */
static int same_row(pt_slice ref, pt_slice row)
{
    return (ref.p == row.p && ref.n == row.n) || pt_slice_eq(ref, row);
}

/* The series of row, or NULL when the backend returned a row outside the scan. */
static samples *route(routed *r, pt_slice row)
{
    while (r->cur < r->n && !same_row(r->refs[r->cur].row, row))
        r->cur++;
    return r->cur < r->n ? &r->ss[r->refs[r->cur].idx] : NULL;
}

static int on_routed_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    samples *s = route(ud, row);
    return s ? on_cell(s, row, qual, value) : PT_EINTERNAL;
}

/* The samples of a stored stream from the series' start on, one by one: a stream that
 * begins before a retention rule's cutoff. */
static int clip_stream(samples *s, uint32_t count, pt_slice stream)
{
    pt_gorilla_dec d;
    pt_gorilla_dec_init(&d, stream.p, stream.n);
    pt_series *se = s->se;
    for (uint32_t i = 0; i < count; i++) {
        int64_t off;
        uint64_t bits;
        if (pt_gorilla_dec_next(&d, &off, &bits) != 0)
            return PT_EINTERNAL;
        if (s->base + off < s->start)
            continue;
        if (ROOM(s, se->samples, se->nsamples, s->cap, 64))
            return PT_ENOMEM;
        pt_sample *out = &se->samples[se->nsamples++];
        out->t = s->base + off;
        memcpy(&out->v, &bits, sizeof(out->v));
        (*s->total)++;
    }
    return 0;
}

/* A stored stream of count samples (pt_stream_fn) as a Prometheus XOR chunk: the same bits
 * once its first timestamp, a zig-zag varint of the qualifier, becomes base + first. The
 * timestamps after it are deltas, which the base does not change. */
static int on_stream(samples *s, uint32_t first, uint32_t last, uint32_t count, pt_slice stream)
{
    if (s->limit && *s->total + count > s->limit)
        return PT_ELIMIT;
    int rv = deadline_passed(s->q);
    if (rv)
        return rv;
    if (s->base + first < s->start)
        return clip_stream(s, count, stream);
    size_t off = 0;
    uint64_t z;
    if (count == 0 || count > PT_STREAM_MAX_SAMPLES || first > last ||
        pt_get_uvarint(stream.p, stream.n, &off, &z) != 0 || z != (uint64_t)first << 1)
        return PT_EINTERNAL;
    int64_t t0 = s->base + first;
    uint64_t zt = (uint64_t)t0 << 1 ^ (uint64_t)(t0 >> 63);
    size_t n = 2 + pt_uvarint_size(zt) + (stream.n - off);
    uint8_t *p = pt_arena_alloc(s->a, n);
    pt_series *se = s->se;
    if (!p || ROOM(s, se->chunks, se->nchunks, s->ccap, 4))
        return PT_ENOMEM;
    p[0] = (uint8_t)(count >> 8);
    p[1] = (uint8_t)count;
    uint8_t *q = pt_put_uvarint(p + 2, zt);
    memcpy(q, stream.p + off, stream.n - off);
    se->chunks[se->nchunks++] = (pt_chunk){
        .tmin = t0, .tmax = s->base + last, .data = {p, n}, .at = se->nsamples};
    *s->total += count;
    s->raw_samples += count;
    s->q->st->stats->read_chunks_passed++;
    return 0;
}

static int on_routed_stream(void *ud, pt_slice row, uint32_t first, uint32_t last,
                            uint32_t count, pt_slice stream)
{
    samples *s = route(ud, row);
    return s ? on_stream(s, first, last, count, stream) : PT_EINTERNAL;
}

/* Whether the bucket at base may hold exemplar rows (exemplar.h, the marks): *marked. */
static int exemplars_marked(qctx *q, int64_t base, int *marked)
{
    pt_store *st = q->st;
    uint64_t when;
    int known = st->xmarks ? pt_exemplar_marks_lookup(st->xmarks, st->salt, base, &when) : 1;
    *marked = known != 0;
    if (known >= 0)
        return 0;
    uint8_t qual[PT_EXEMPLAR_MARK_QUAL_LEN];
    pt_exemplar_mark_qual(qual, base);
    int rv = deadline_passed(q);
    if (!rv)
        rv = pt_exemplar_marks_read(st->be, (pt_slice){qual, sizeof(qual)}, marked);
    if (rv)
        return rv;
    if (*marked)
        pt_exemplar_marks_add(st->xmarks, st->salt, base);
    else if (st->be->ops->caps & PT_BACKEND_CAP_EXCLUSIVE)
        pt_exemplar_marks_add_unmarked(st->xmarks, st->salt, base, when);
    return 0;
}

/* Reads the cells of the k series in [start, end] into ss[0..k): bucket by bucket (so
 * each series' samples come in time order), every bucket's rows in groups of READ_GROUP
 * series per scan. A series is read only in the buckets its index days reach: an
 * "all time" window costs the buckets the data spans, not the ones the window does. code:
 * 0 for the data rows (and with exemplars their exemplar rows), else the roll-up rows of
 * that code (rollup.h). */
static int read_all(qctx *q, const series *v, size_t k, int64_t start, int64_t end, samples *ss,
                    int exemplars, int64_t code)
{
    if (start > end)
        return 0;
    rowref *refs = pt_arena_alloc(q->a, (k ? k : 1) * sizeof(*refs));
    uint8_t **keys = pt_arena_alloc(q->a, (k ? k : 1) * sizeof(*keys));
    pt_row_range *ranges = pt_arena_alloc(q->a, READ_GROUP * sizeof(*ranges));
    uint8_t *qb = pt_arena_alloc(q->a, 8);
    if (!refs || !keys || !ranges || !qb)
        return PT_ENOMEM;
    const int64_t span = q->st->index_bucket_ms - 1; /* an index bucket's last ms */
    int64_t first = INT64_MAX, last = INT64_MIN;
    for (size_t i = 0; i < k; i++) {
        /* A series' one key, rewritten for each bucket and row kind (+1: the range end). */
        if (!(keys[i] = pt_arena_alloc(q->a, PT_ROW_KEY_LEN(v[i].sid.n) + 1)))
            return PT_ENOMEM;
        first = v[i].day_lo < first ? v[i].day_lo : first;
        last = v[i].day_hi + span > last ? v[i].day_hi + span : last;
    }
    if (first < start)
        first = start;
    if (last > end)
        last = end;
    for (int64_t pass = 0, base = pt_bucket_base(first); base <= last;) {
        size_t m = 0; /* the series with index days in this bucket */
        for (size_t i = 0; i < k; i++) {
            if (!pt_series_in(&v[i], base, q->st->index_bucket_ms))
                continue;
            size_t keylen = PT_ROW_KEY_LEN(v[i].sid.n);
            uint8_t *key = keys[i];
            if (pass)
                pt_exemplar_row_key(key, v[i].sid, base);
            else if (code)
                pt_rollup_row_key(key, v[i].sid, base, code);
            else
                pt_row_key(key, v[i].sid, base);
            key[keylen] = 0; /* the end of the single-row range */
            refs[m++] = (rowref){{key, keylen}, i};
            ss[i].base = base;
        }
        qsort(refs, m, sizeof(*refs), rowref_cmp);
        size_t visited = 0;
        pt_stream_to to = {on_routed_stream, NULL};
        pt_scan sc = {.table = PT_TABLE_POINTS,
                      .ranges = ranges,
                      .nranges = 0,
                      .visited = &visited,
                      .cold = &q->cold};
        if (k && ss[0].chunks && !pass)
            sc.stream = &to; /* exemplar rows hold no samples */
        if (start > base) {
            uint32_t off = (uint32_t)(start - base);
            /* an exemplar's cell is keyed by its window's start */
            pt_put_be32(qb, pass ? pt_exemplar_slot(off) : off);
            sc.qual_start = (pt_slice){qb, 4};
        }
        if (end - base + 1 < PT_BUCKET_MS) {
            pt_put_be32(qb + 4, (uint32_t)(end - base + 1));
            sc.qual_end = (pt_slice){qb + 4, 4};
        }
        for (size_t g = 0; g < m; g += READ_GROUP) {
            size_t n = m - g < READ_GROUP ? m - g : READ_GROUP;
            for (size_t i = 0; i < n; i++)
                ranges[i] =
                    (pt_row_range){refs[g + i].row, {refs[g + i].row.p, refs[g + i].row.n + 1}};
            sc.nranges = n;
            routed r = {.refs = refs + g, .n = n, .ss = ss};
            to.ud = &r;
            int rv = deadline_passed(q);
            if (!rv)
                rv = pt_backend_scan(q->st->be, &sc, on_routed_cell, &r);
            q->st->stats->read_rows_scanned += visited;
            visited = 0;
            if (rv)
                return rv;
        }
        /* Each bucket's data rows, then (SAMPLES answers) its exemplar rows if it has any. */
        int marked = 0;
        if (exemplars && !code && !pass && m) {
            int rv = exemplars_marked(q, base, &marked);
            if (rv)
                return rv;
        }
        if (marked) {
            pass = 1;
        } else {
            pass = 0;
            base += PT_BUCKET_MS;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ the read iterator */

struct pt_read {
    pt_store *st;
    const pt_query *qs;
    size_t nq;
    pt_arena *a;   /* the request's: matchers' slices, series list */
    size_t qi;     /* query being answered */
    int started;   /* q holds query qi's resolved series */
    size_t inited; /* matchers of q that need pt_matcher_free */
    qctx q;
    size_t k, next; /* matching series of query qi; the next to read */
    int64_t start, end;
    int64_t now;  /* the store's clock when query qi began (retention rules' cutoffs) */
    size_t total; /* samples read so far, against max_samples */
    uint64_t t0;
    uint64_t deadline_ns; /* read.timeout after the start; 0 = none */
    const atomic_int *cancel;
    pt_matcher_env env;   /* the request's matchers: their limits and memory (arena a) */
    pt_histogram scratch; /* each histogram cell is decoded here first */
    int exemplars;        /* read exemplar rows too (SAMPLES answers) */
    int chunks;           /* pass stored chunks on (streamed answers) */
    int rollups;          /* the client takes roll-ups where the hints allow */
    /* Query qi from a roll-up: the code of its rows (0: raw data only), the first
     * millisecond they answer for and the first the raw data answers for. */
    int64_t code, rstart, split;
};

void pt_read_rollups(pt_read *r, int on)
{
    r->rollups = on;
}

void pt_read_exemplars(pt_read *r, int on)
{
    r->exemplars = on;
}

void pt_read_chunks(pt_read *r, int on)
{
    r->chunks = on;
}

/* The message for a failed read: the read's own deadline, or the storage's error. */
static void read_failed(const pt_read *r, int rv, char *msg, size_t msglen)
{
    if (rv == PT_ECANCELLED) {
        snprintf(msg, msglen, "%s", pt_strerror(rv));
        return;
    }
    if (rv == PT_ETIMEOUT && r->deadline_ns && pt_now_ns() > r->deadline_ns) {
        snprintf(msg, msglen,
                 "the read took longer than read.timeout (%lld ms); narrow the "
                 "query or raise read.timeout",
                 (long long)r->st->read_timeout_ms);
        r->st->stats->read_timeouts++;
        return;
    }
    r->st->stats->backend_read_errors++;
    snprintf(msg, msglen, "storage read failed: %s", pt_strerror(rv));
}

/* The first millisecond a read may return: retention ends the past, for every backend
 * (Bigtable's garbage collection of old cells runs lazily, up to days late). */
int64_t pt_oldest_kept(const pt_store *st)
{
    return st->retention_ms > 0 ? pt_kept_since(pt_store_now(st), st->retention_ms) : 0;
}

/* How long series v keeps its samples: its retention rule's or storage.retention, in ms
 * (0 = forever). */
static int64_t series_keep(const pt_read *r, const series *v)
{
    const pt_store *st = r->st;
    return st->keep_ms ? st->keep_ms(st->keep_ud, v->labels, v->nlabels) : 0;
}

/* Where series v's samples start from `from` on: its retention's cutoff, if later. */
static int64_t cut_at(const pt_read *r, int64_t keep, int64_t from)
{
    return keep > 0 && r->now - keep > from ? r->now - keep : from;
}

/* Where series v's samples start in this read. */
static int64_t series_start(const pt_read *r, const series *v)
{
    return cut_at(r, series_keep(r, v), r->start);
}

/* Where series v's roll-up samples start: the roll-up's start, or the cutoff of a retention
 * rule of the series that is shorter than storage.retention (a stage outlives the raw data,
 * not a rule). */
static int64_t rollup_series_start(const pt_read *r, const series *v)
{
    int64_t keep = series_keep(r, v), global = r->st->retention_ms;
    return global > 0 && keep >= global ? r->rstart : cut_at(r, keep, r->rstart);
}

static int empty(const pt_series *se)
{
    return se->nsamples == 0 && se->nhists == 0 && se->nchunks == 0;
}

/* The roll-up's part of the series v[0, n) into ss (it ends where the raw part starts),
 * their retention rules cutting it like the raw data. A series the stage holds nothing of
 * there (a native histogram's, which no stage rolls up) reads its raw data in its place,
 * as far as that is kept. */
static int read_rollup(pt_read *r, qctx *q, const series *v, size_t n, samples *ss, pt_arena *b)
{
    for (size_t i = 0; i < n; i++)
        ss[i].start = rollup_series_start(r, &v[i]);
    int rv = read_all(q, v, n, r->rstart, r->split - 1, ss, 0, r->code);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        m += empty(ss[i].se);
    if (rv == 0 && m) {
        series *mv = pt_arena_alloc(b, m * sizeof(*mv));
        samples *ms = pt_arena_alloc(b, m * sizeof(*ms));
        size_t *at = pt_arena_alloc(b, m * sizeof(*at));
        if (!mv || !ms || !at)
            return PT_ENOMEM;
        int64_t oldest = pt_oldest_kept(r->st), from = r->rstart > oldest ? r->rstart : oldest;
        m = 0;
        for (size_t i = 0; i < n; i++)
            if (empty(ss[i].se)) {
                mv[m] = v[i];
                ms[m] = ss[i];
                ms[m].start = cut_at(r, series_keep(r, &v[i]), from);
                at[m++] = i;
            }
        if (from < r->split)
            rv = read_all(q, mv, m, from, r->split - 1, ms, 0, 0);
        for (size_t k = 0; k < m; k++)
            ss[at[k]] = ms[k];
    }
    for (size_t i = 0; i < n; i++)
        ss[i].start = series_start(r, &v[i]);
    return rv;
}

static void query_end(pt_read *r)
{
    for (size_t i = 0; i < r->inited; i++)
        pt_matcher_free(&r->q.ms[i]);
    r->inited = 0;
    r->started = 0;
}

/* Whether query pq reads a roll-up: its stage's rows answer for [rstart, split), the raw
 * data from split on (after what the stage has built); the stage keeps its own
 * retention. 0 (r->code set or left 0), or a storage error. */
static int rollup_begin(pt_read *r, const pt_query *pq)
{
    pt_store *st = r->st;
    size_t i;
    int agg;
    pt_read_hints h = {.step_ms = pq->step_ms,
                       .range_ms = pq->range_ms,
                       .start_ms = pq->hints_start_ms,
                       .func = pq->func};
    if (!st->nrollups || !pt_rollup_choose(st->rollups, st->nrollups, &h, &i, &agg))
        return 0;
    const pt_rollup_stage *s = &st->rollups[i];
    int64_t wm;
    int rv = pt_rollup_watermark(st, s, &wm);
    if (rv)
        return rv;
    int64_t oldest = pt_kept_since(r->now, s->keep_ms);
    r->rstart = pq->start_ms < oldest ? oldest : pq->start_ms;
    if (wm < r->rstart || r->rstart > r->end)
        return 0; /* nothing of the window built, or kept */
    r->code = PT_ROLLUP_CODE(s->res_ms, agg);
    r->split = wm < r->end ? wm + 1 : r->end + 1;
    if (r->start < r->split)
        r->start = r->split;
    st->stats->read_rollup_queries++;
    return 0;
}

/* Compiles the matchers of query qi, resolves them to the sorted list of matching series. */
static int query_begin(pt_read *r, char *msg, size_t msglen)
{
    const pt_query *pq = &r->qs[r->qi];
    pt_store *st = r->st;
    pt_arena *a = r->a;
    int rv;
    if (r->qi == 0) {
        /* Every query's matchers are counted before any is compiled. */
        size_t total = 0;
        for (size_t i = 0; i < r->nq; i++)
            total += r->qs[i].nms;
        if ((rv = pt_matcher_env_check(&r->env, total, msg, msglen)) != 0)
            return rv;
    }
    memset(&r->q, 0, sizeof(r->q));
    r->q.st = st;
    r->q.a = a;
    r->q.c.a = a;
    r->q.c.limit = st->max_series;
    r->q.deadline_ns = r->deadline_ns;
    r->q.cancel = r->cancel;
    r->q.nms = pq->nms;
    r->q.ms = pt_arena_calloc(a, (r->q.nms ? r->q.nms : 1) * sizeof(*r->q.ms));
    if (!r->q.ms)
        return PT_ENOMEM;
    r->started = 1;
    r->k = r->next = 0;
    for (; r->inited < r->q.nms; r->inited++) {
        const pt_query_matcher *lm = &pq->ms[r->inited];
        rv = pt_matcher_init(&r->q.ms[r->inited], lm->type, lm->name, lm->value, &r->env, msg,
                             msglen);
        if (rv)
            return rv;
    }
    int64_t oldest = pt_oldest_kept(st);
    r->now = pt_store_now(st);
    r->start = pq->start_ms < oldest ? oldest : pq->start_ms;
    r->end = pq->end_ms;
    if (r->end > PT_MAX_TIME_MS)
        r->end = PT_MAX_TIME_MS; /* 13 decimal digits of base; keeps the bucket loop finite */
    r->code = 0;
    r->split = r->start;
    if (r->rollups && (rv = rollup_begin(r, pq)) != 0) {
        read_failed(r, rv, msg, msglen);
        return rv;
    }
    int64_t first = r->code && r->rstart < r->start ? r->rstart : r->start;
    if (r->end < first)
        return 0;
    r->q.day_first = first - first % st->index_bucket_ms;
    r->q.day_last = r->end - r->end % st->index_bucket_ms;

    rv = pt_select(&r->q);
    if (rv == PT_ELIMIT) {
        snprintf(msg, msglen, "query touches too many series (limit read.max_series = %zu)",
                 st->max_series);
        return rv;
    }
    if (rv == PT_EREGEXLIMIT) {
        pt_matcher_limit_msg(r->q.costly, msg, msglen);
        return rv;
    }
    if (rv) {
        read_failed(r, rv, msg, msglen);
        return rv;
    }
    size_t k = r->q.c.n;
    if (st->max_series && k > st->max_series) {
        snprintf(msg, msglen, "query selects %zu series, over the limit of %zu (read.max_series)",
                 k, st->max_series);
        return PT_ELIMIT;
    }
    r->k = k;
    return 0;
}

int pt_read_start(pt_store *st, const pt_query *qs, size_t nq, pt_arena *a,
                  const atomic_int *cancel, pt_read **out)
{
    pt_read *r = pt_arena_calloc(a, sizeof(*r));
    if (!r)
        return PT_ENOMEM;
    r->st = st;
    r->qs = qs;
    r->nq = nq;
    r->a = a;
    r->cancel = cancel;
    r->exemplars = 1;
    r->t0 = pt_now_ns();
    int rv = pt_matcher_env_init(&r->env, a, st->regex_match_limit, st->regex_heap_limit,
                                 st->max_matchers);
    if (rv)
        return rv;
    if (st->read_timeout_ms > 0)
        r->deadline_ns = r->t0 + (uint64_t)st->read_timeout_ms * 1000000u;
    *out = r;
    return 0;
}

void pt_read_free(pt_read *r)
{
    if (!r)
        return;
    query_end(r);
    pt_matcher_env_free(&r->env);
    pt_histogram_free(&r->scratch);
    pt_lathist_observe(&r->st->stats->backend_read_duration, pt_now_ns() - r->t0);
}

int pt_read_next(pt_read *r, pt_arena *b, size_t max_series, pt_read_batch *out, char *msg,
                 size_t msglen)
{
    int rv;
    memset(out, 0, sizeof(*out));
    for (;;) {
        if (r->qi >= r->nq)
            return 0;
        if (!r->started) {
            if ((rv = query_begin(r, msg, msglen)) != 0)
                return rv;
            r->st->stats->read_queries++;
        }
        if (r->next < r->k)
            break;
        /* This query is answered (an empty batch says so when it had no series). */
        out->query = r->qi;
        out->last_of_query = 1;
        query_end(r);
        r->qi++;
        return 1;
    }
    size_t n = r->k - r->next;
    if (max_series && n > max_series)
        n = max_series;
    const series *v = r->q.c.v + r->next;
    samples *ss = pt_arena_calloc(b, n * sizeof(*ss));
    out->s = pt_arena_calloc(b, n * sizeof(*out->s));
    if (!ss || !out->s)
        return PT_ENOMEM;
    for (size_t i = 0; i < n; i++)
        ss[i] = (samples){.q = &r->q, .a = b, .se = &out->s[i], .total = &r->total,
                          .limit = r->st->max_samples, .scratch = &r->scratch,
                          .chunks = r->chunks, .start = series_start(r, &v[i]), .end = r->end};
    qctx q = r->q;
    q.a = b; /* keys of this group only */
    rv = 0;
    if (r->code)
        rv = read_rollup(r, &q, v, n, ss, b);
    if (rv == 0 && r->start <= r->end)
        rv = read_all(&q, v, n, r->start, r->end, ss, r->exemplars, 0);
    r->q.cold = q.cold; /* the next group's scans read ahead at once */
    if (rv == PT_ELIMIT) {
        snprintf(msg, msglen,
                 "query returns more than %zu samples, over the limit "
                 "(read.max_samples)",
                 r->st->max_samples);
        return rv;
    }
    if (rv) {
        read_failed(r, rv, msg, msglen);
        return rv;
    }
    size_t nts = 0, nsamples = 0;
    for (size_t i = 0; i < n; i++) {
        pt_series *se = &out->s[i];
        if (se->nsamples == 0 && se->nhists == 0 && se->nexemplars == 0 && se->nchunks == 0)
            continue;
        se->labels = v[i].labels;
        se->nlabels = v[i].nlabels;
        nsamples += se->nsamples + se->nhists + ss[i].raw_samples;
        out->s[nts++] = *se; /* compacted: nts <= i */
    }
    r->next += n;
    out->query = r->qi;
    out->n = nts;
    out->last_of_query = r->next == r->k;
    r->st->stats->read_series += nts;
    r->st->stats->read_samples += nsamples;
    if (out->last_of_query) {
        query_end(r);
        r->qi++;
    }
    return 1;
}
