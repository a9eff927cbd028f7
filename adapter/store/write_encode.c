/* The write path's encode stage: one validated, HA-filtered series entry → the cells of
 * its samples, native histograms and exemplars in the request's batch, and the (series,
 * index bucket) pairs its index rows are pended for (write_int.h). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "bytes.h"
#include "exemplar.h"
#include "write_int.h"

static void pend(pendings *pd, pt_index_key key, const pt_label *ls, size_t nl, pt_slice sid,
                 int64_t day)
{
    pd->keys[pd->n] = key;
    pd->p[pd->n++] = (pending){.ls = ls, .nl = nl, .sid = sid, .day = day};
}

/* The samples of one series being added to the batch: its row in the current bucket and
 * the last index bucket it was pended for. */
typedef struct sput {
    batch *b;
    pt_arena *a;
    pt_store *st;
    pendings *pd;
    pt_write_result *res;
    const pt_label *ls;
    size_t nl;
    pt_slice sid;
    uint8_t *row;
    int64_t row_base, day_done;
    int v2;
    xseen *xs;     /* NULL: exemplars are not checked for order */
    uint64_t xh;   /* the series' hash for xs (0 until an exemplar needs it) */
    xbuckets *xb;  /* NULL: no exemplar marks are written */
} sput;

/* 1 when a sample at t can be stored; else 0, the sample counted as rejected. */
static int time_ok(sput *s, int64_t t)
{
    if (t >= 0 && t <= PT_MAX_TIME_MS)
        return 1;
    s->res->samples_rejected++;
    s->st->stats->samples_rejected[PT_REJECT_TIMESTAMP]++;
    pt_write_note(s->res, "%s timestamp %" PRId64 " for series %.*s",
                  t < 0 ? "negative" : "out-of-range (after year 2286)", t,
                  (int)(s->sid.n > 200 ? 200 : s->sid.n), (const char *)s->sid.p);
    return 0;
}

/* Pends the series' index rows for t's index bucket (and the next one near its end). */
static void pend_day(sput *s, int64_t t)
{
    int64_t bucket = s->st->index_bucket_ms, day = t - t % bucket;
    if (day == s->day_done)
        return;
    s->day_done = day;
    pt_index_key key = pt_store_key(s->st, s->sid, day);
    pend(s->pd, key, s->ls, s->nl, s->sid, day);
    /* In the last 24th of a bucket, index the next one too, from a moment that depends on
     * the series: the rows a new bucket needs are then written over that stretch instead
     * of all at the first scrape after it starts. */
    int64_t spread = bucket / 24, into = t - day;
    if (spread > 0 && into >= bucket - spread + (int64_t)(key.hi % (uint64_t)spread))
        pend(s->pd, pt_store_key(s->st, s->sid, day + bucket), s->ls, s->nl, s->sid, day + bucket);
}

/* The slot of series h in x: its own, or the empty one it gets. */
static xseen_slot *xseen_find(xseen *x, uint64_t h)
{
    size_t i = h & x->mask;
    while (x->s[i].h && x->s[i].h != h)
        i = (i + 1) & x->mask;
    return &x->s[i];
}

/* Notes that the request writes an exemplar into the bucket at base. */
static void xbuckets_note(xbuckets *x, const pt_store *st, int64_t base)
{
    if (base == x->known)
        return;
    for (size_t i = x->n; i-- > 0;)
        if (x->v[i] == base)
            return;
    if (pt_exemplar_marks_known(st->xmarks, st->salt, base))
        x->known = base;
    else
        x->v[x->n++] = base; /* room for one per exemplar of the request */
}

/* Adds the cell at t (qualifier written here; the value of vlen bytes follows it in cell,
 * arena memory) and pends the series' index rows for t's bucket. */
static int put_point(sput *s, int64_t t, uint8_t *cell, size_t vlen)
{
    int64_t base = pt_bucket_base(t);
    if (base != s->row_base) {
        s->row = pt_arena_alloc(s->a, PT_ROW_KEY_LEN(s->sid.n));
        if (!s->row)
            return PT_ENOMEM;
        pt_row_key(s->row, s->sid, base);
        s->row_base = base;
    }
    pt_put_be32(cell, (uint32_t)(t - base));
    int rv = push(s->b, PT_TABLE_POINTS, (pt_slice){s->row, PT_ROW_KEY_LEN(s->sid.n)},
                  (pt_slice){cell, PT_QUAL_LEN}, (pt_slice){cell + PT_QUAL_LEN, vlen}, t * 1000);
    if (rv != 0)
        return rv;
    pend_day(s, t);
    return 0;
}

/* Adds one exemplar's cell (docs/storage-format.md, "Exemplars"), or counts it rejected
 * with a note. */
static int put_exemplar(sput *s, const pt_wexemplar *x, size_t entry)
{
    char why[200];
    if (x->ref_problem == PT_WREF_ODD)
        snprintf(why, sizeof(why), "labels_refs has an odd length");
    else if (x->ref_problem != PT_WREF_OK)
        snprintf(why, sizeof(why), "a labels_refs symbol reference is out of range");
    else if (x->timestamp < 0 || x->timestamp > PT_MAX_TIME_MS)
        snprintf(why, sizeof(why), "timestamp %" PRId64 " is %s", x->timestamp,
                 x->timestamp < 0 ? "negative" : "out of range (after year 2286)");
    else if (s->v2 && x->timestamp == 0)
        snprintf(why, sizeof(why), "timestamp is 0 (not set; remote write 2.0 requires it)");
    else if (pt_exemplar_labels_check(x->labels, x->nlabels, why, sizeof(why)) == 0)
        why[0] = '\0';
    xseen_slot *seen = NULL;
    if (!why[0] && s->xs) {
        if (!s->xh)
            s->xh = pt_exemplar_series_hash(s->sid, s->st->salt);
        seen = xseen_find(s->xs, s->xh);
        int64_t newest = seen->h ? seen->ts : pt_exemplar_newest_get(s->st->xnewest, s->xh);
        if (x->timestamp < newest) {
            /* Dropped and counted, the request answered 2xx, as Prometheus' receivers do
             * (1.0 and 2.0): a refusal would make the sender count the request's stored
             * samples as failed and drop them without a retry. */
            s->st->stats->exemplars_out_of_order++;
            return 0;
        }
    }
    if (why[0]) {
        s->res->samples_rejected++;
        s->st->stats->samples_rejected[PT_REJECT_EXEMPLAR]++;
        pt_write_note(s->res, "invalid exemplar in timeseries %zu (series %.*s): %s", entry,
                      (int)(s->sid.n > 200 ? 200 : s->sid.n), (const char *)s->sid.p, why);
        return 0;
    }
    int64_t t = x->timestamp, base = pt_bucket_base(t);
    size_t klen = PT_ROW_KEY_LEN(s->sid.n), vlen = pt_exemplar_cell_size(x->labels, x->nlabels);
    uint8_t *row = pt_arena_alloc(s->a, klen + PT_QUAL_LEN + vlen);
    if (!row)
        return PT_ENOMEM;
    uint8_t *qual = row + klen, *val = qual + PT_QUAL_LEN;
    pt_exemplar_row_key(row, s->sid, base);
    uint32_t off = (uint32_t)(t - base);
    pt_put_be32(qual, pt_exemplar_slot(off));
    pt_exemplar_cell_encode(val, off, x->value, x->labels, x->nlabels);
    int rv = push(s->b, PT_TABLE_POINTS, (pt_slice){row, klen}, (pt_slice){qual, PT_QUAL_LEN},
                  (pt_slice){val, vlen}, t * 1000);
    if (rv != 0)
        return rv;
    pend_day(s, t);
    if (s->xb)
        xbuckets_note(s->xb, s->st, base);
    s->res->exemplars_written++;
    if (seen && (!seen->h || t > seen->ts))
        *seen = (xseen_slot){.h = s->xh, .ts = t};
    return 0;
}


/* Every metadata entry of a request passes here: 1.0 WriteRequest.metadata (family set)
 * and 2.0 per-series metadata (family = the series' metric name). */
int pt_write_metadata(pt_meta_batch *mb, pt_slice family, const pt_wmeta *m)
{
    mb->st->stats->metadata_received++;
    if (m->type == 0 && m->help.n == 0 && m->unit.n == 0)
        return 0;
    return pt_meta_put(mb, family, (int)m->type, m->help, m->unit) == PT_ENOMEM ? PT_ENOMEM : 0;
}

/* Encode: queues the entry's metadata (2.0), builds its series id, and adds a cell for
 * each of its samples, native histograms and exemplars to w->b, pending its index rows
 * for the buckets they fall in (w->pd). A sample with a timestamp out of range, a
 * histogram that does not convert and an invalid exemplar are counted rejected with a
 * note, an exemplar older than its series' newest is dropped and counted; the rest of the
 * entry is still stored. With a series gate the entry's span (w->spans) records where its
 * cells and pendings went, for the gate stage. Cells come from the arena, nothing else per
 * sample. 0, or PT_ENOMEM (the request fails as a whole). */
int pt_write_encode(wctx *w, size_t i, const pt_label *ls, size_t nl, int plain)
{
    const pt_wseries *ts = &w->wr->series[i];
    pt_arena *a = w->a;
    pt_write_result *res = w->res;
    if (ts->has_meta) {
        pt_slice family = {0};
        for (size_t j = 0; j < nl; j++)
            if (is_name_label(&ls[j]))
                family = ls[j].value;
        if (pt_write_metadata(&w->mb, family, &ts->meta) != 0)
            return PT_ENOMEM;
    }
    if (ts->nsamples + ts->nhistograms + ts->nexemplars == 0)
        return 0;
    pt_slice sid;
    int rv = pt_series_id_checked(a, ls, nl, !plain, w->b.key_limit, &sid);
    if (rv != 0)
        return rv;
    sput sp = {.b = &w->b,
               .a = a,
               .st = w->st,
               .pd = &w->pd,
               .res = res,
               .ls = ls,
               .nl = nl,
               .sid = sid,
               .row = NULL,
               .row_base = -1,
               .day_done = -1,
               .v2 = w->v2,
               .xs = w->xs.s ? &w->xs : NULL,
               .xh = 0,
               .xb = w->xb.v ? &w->xb : NULL};
    espan *span = w->spans ? &w->spans[w->nspans++] : NULL;
    if (span)
        *span = (espan){.h = pt_series_ref(sid, 0),
                        .m0 = w->b.n,
                        .p0 = w->pd.n,
                        .samples = res->samples_written,
                        .hists = res->histograms_written,
                        .exemplars = res->exemplars_written};
    for (size_t j = 0; j < ts->nsamples; j++) {
        const pt_wsample *s = &ts->samples[j];
        if (!time_ok(&sp, s->timestamp))
            continue;
        uint8_t *cell = pt_arena_alloc(a, PT_QUAL_LEN + PT_VALUE_LEN);
        if (!cell)
            return PT_ENOMEM;
        pt_cell_encode(s->timestamp, s->value, cell, cell + PT_QUAL_LEN);
        if ((rv = put_point(&sp, s->timestamp, cell, PT_VALUE_LEN)) != 0)
            return rv;
        res->samples_written++;
    }
    pt_histogram *hs = &w->hs;
    for (size_t j = 0; j < ts->nhistograms; j++) {
        const pt_whist *h = &ts->histograms[j];
        if (!time_ok(&sp, h->timestamp))
            continue;
        char why[200];
        rv = pt_wire_histogram(h, hs, why, sizeof(why));
        if (rv == PT_ENOMEM)
            return rv;
        if (rv != 0) {
            res->samples_rejected++;
            w->st->stats->samples_rejected[PT_REJECT_HISTOGRAM]++;
            pt_write_note(res, "invalid native histogram at %" PRId64 " for series %.*s: %s",
                          h->timestamp, (int)(sid.n > 200 ? 200 : sid.n), (const char *)sid.p,
                          why);
            continue;
        }
        size_t vlen = pt_histogram_cell_size(hs);
        uint8_t *cell = pt_arena_alloc(a, PT_QUAL_LEN + vlen);
        if (!cell)
            return PT_ENOMEM;
        pt_histogram_cell_encode(hs, cell + PT_QUAL_LEN);
        if ((rv = put_point(&sp, h->timestamp, cell, vlen)) != 0)
            return rv;
        res->histograms_written++;
    }
    /* 1.0 senders send exemplars in entries of their own, without samples. */
    for (size_t j = 0; j < ts->nexemplars; j++)
        if ((rv = put_exemplar(&sp, &ts->exemplars[j], i)) != 0)
            return rv;
    if (span) {
        span->m1 = w->b.n;
        span->p1 = w->pd.n;
        span->samples = res->samples_written - span->samples;
        span->hists = res->histograms_written - span->hists;
        span->exemplars = res->exemplars_written - span->exemplars;
    }
    return 0;
}
