/*
 * The write path: WriteRequest → validated label sets → row keys, cells, index rows, one
 * backend write. pt_store_write drives one request through its stages, in order:
 *
 *   validate  the request's 2.0 symbol table, each entry's 2.0 shape and label set
 *   filter    HA pairs: a replica not elected is deduplicated (its samples dropped)
 *   encode    cells of samples, histograms and exemplars into the batch (write_encode.c)
 *   gate      the tenant's series limit takes refused series out of the batch
 *   index     index rows of series the index cache does not know (write_index.c)
 *   commit    the backend write, then the caches learn what is stored
 *
 * Validate, filter and encode run per entry; gate, index and commit once per request.
 * Bad input is counted and noted in the result (a 4xx), never an error; an error return
 * (PT_ENOMEM, a store error) leaves the request unacknowledged, to be retried whole.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "exemplar.h"
#include "rollup.h"
#include "write_int.h"

void pt_write_note(pt_write_result *res, const char *fmt, ...)
{
    if (res->msg[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->msg, sizeof(res->msg), fmt, ap);
    va_end(ap);
}

/* Rejects a whole TimeSeries entry: its samples, histograms and exemplars. */
static void reject_entry(wctx *w, const pt_wseries *ts, int why)
{
    size_t n = ts->nsamples + ts->nhistograms + ts->nexemplars;
    w->res->entries_rejected++;
    w->res->samples_rejected += n;
    w->st->stats->samples_rejected[why] += n;
}

/* Sizes everything the stages fill for the request's cells, from the arena and once:
 * the batch (one mutation per cell, more only for index rows), the pendings (at most two
 * per cell), the exemplar order table and mark list when the store keeps them. Then
 * queues the request's 1.0 metadata. 0 or PT_ENOMEM. */
static int prepare(wctx *w)
{
    pt_store *st = w->st;
    pt_wreq *wr = w->wr;
    pt_arena *a = w->a;
    memset(w->res, 0, sizeof(*w->res));
    w->res->series = wr->nseries;
    size_t ncells = wr->nsamples + wr->nhistograms + wr->nexemplars;
    w->v2 = wr->version == 2;
    pt_buf_init_arena(&w->b.buf, a, 0);
    pt_buf_init_arena(&w->b.srows, a, 0);
    pt_buf_init_arena(&w->b.lrows, a, 0);
    int brv = pt_buf_reserve(&w->b.buf, (ncells + 16) * sizeof(pt_mutation));
    w->pd.keys = pt_arena_alloc(a, (2 * ncells + 1) * sizeof(*w->pd.keys));
    w->pd.p = pt_arena_alloc(a, (2 * ncells + 1) * sizeof(*w->pd.p));
    if (brv != 0 || !w->pd.keys || !w->pd.p)
        return PT_ENOMEM;
    if (st->xnewest && wr->nexemplars) {
        size_t cap = 16;
        while (cap < 2 * wr->nexemplars)
            cap *= 2;
        w->xs.s = pt_arena_calloc(a, cap * sizeof(*w->xs.s));
        w->xs.mask = cap - 1;
        if (!w->xs.s)
            return PT_ENOMEM;
    }
    if (st->xmarks && wr->nexemplars &&
        !(w->xb.v = pt_arena_alloc(a, wr->nexemplars * sizeof(*w->xb.v))))
        return PT_ENOMEM;
    pt_meta_begin(&w->mb, st, a);
    for (size_t i = 0; i < wr->nmetadata; i++)
        if (pt_write_metadata(&w->mb, wr->metadata[i].family, &wr->metadata[i]) != 0)
            return PT_ENOMEM;
    return 0;
}

/* ---- validate ---- */

/* Validate, the whole request: a 2.0 request's symbol table starts with the empty
 * string. 1 when the request goes on; 0 when it does not, every entry counted rejected
 * and the problem noted. */
static int validate_request(wctx *w)
{
    const pt_wreq *wr = w->wr;
    if (!(w->v2 && wr->nsymbols && wr->symbols[0].n))
        return 1;
    for (size_t i = 0; i < wr->nseries; i++)
        reject_entry(w, &wr->series[i], PT_REJECT_LABELS);
    pt_write_note(w->res, "symbols[0] must be the empty string, is \"%.*s\"",
                  (int)(wr->symbols[0].n > 60 ? 60 : wr->symbols[0].n),
                  (const char *)wr->symbols[0].p);
    return 0;
}

/* 2.0 checks of one entry that 1.0 does not have; 0 or -1 with the entry rejected. */
static int check_v2_entry(wctx *w, size_t i)
{
    const pt_wreq *wr = w->wr;
    pt_write_result *res = w->res;
    const pt_wseries *ts = &wr->series[i];
    if (ts->ref_problem == PT_WREF_ODD) {
        reject_entry(w, ts, PT_REJECT_LABELS);
        pt_write_note(res, "timeseries %zu: labels_refs has an odd length", i);
        return -1;
    }
    if (ts->ref_problem == PT_WREF_RANGE) {
        reject_entry(w, ts, PT_REJECT_LABELS);
        pt_write_note(res, "timeseries %zu: symbol reference %" PRIu32 " is out of range (the "
                      "request has %zu symbols)", i, ts->bad_ref, wr->nsymbols);
        return -1;
    }
    if (ts->nsamples == 0 && ts->nhistograms == 0) {
        reject_entry(w, ts, PT_REJECT_LABELS);
        pt_write_note(res, "timeseries %zu has neither samples nor histograms", i);
        return -1;
    }
    if (ts->nsamples && ts->nhistograms) {
        reject_entry(w, ts, PT_REJECT_HISTOGRAM);
        pt_write_note(res, "timeseries %zu has both samples and histograms", i);
        return -1;
    }
    return 0;
}

/* Validate, one entry: the 2.0 checks (symbol references; samples or histograms, not
 * both), then its label set in place (pt_labels_validate: sorted, within the label
 * limits, valid UTF-8, a __name__, empty values dropped). Returns the entry's label count
 * with *plain set, or -1 when the entry goes no further: rejected (counted, the first
 * problem noted) or with nothing to store. Never an error: bad input is counted. */
static long validate_series(wctx *w, size_t i, int *plain)
{
    pt_wseries *ts = &w->wr->series[i];
    pt_write_result *res = w->res;
    if (w->v2 && check_v2_entry(w, i))
        return -1;
    size_t n = ts->nsamples + ts->nhistograms + ts->nexemplars;
    if (n == 0 && !ts->has_meta)
        return -1;
    char lmsg[PT_MSG_MAX];
    long nl = pt_labels_validate(ts->labels, ts->nlabels, &w->st->label_limits, plain, lmsg,
                                 sizeof(lmsg));
    if (nl < 0) {
        res->entries_rejected++;
        res->samples_rejected += n;
        w->st->stats->samples_rejected[PT_REJECT_LABELS] += n;
        pt_write_note(res, "%s", lmsg);
        return -1;
    }
    return nl;
}

/* ---- filter: HA pairs (docs/operations.md, "HA pairs") ----
 *
 * Decided per series, from its own cluster and replica labels: a Prometheus sends the
 * same pair in every series of a request (external labels), so this costs one decision
 * per request (remembered across the request's series in w->ham), and a request that
 * mixes pairs (a relay forwarding several Prometheus servers) never has an elected
 * replica's samples dropped or another's stored, as deciding once from the first series
 * would. */

/* Filter, one validated entry with nl labels. 1: store the series (of an elected
 * replica, its replica label removed from its labels, *nl one less; or not of an HA
 * pair, or HA off: unchanged), 0: not (a replica not elected: counted deduplicated; or
 * over a limit: rejected with a note, res->limited set), or a store error (the election
 * could not reach the store: nothing is stored, the request is retried). Allocates
 * nothing. */
static int filter_series(wctx *w, size_t i, long *nl)
{
    pt_store *st = w->st;
    const pt_store_ha *ha = &st->ha;
    if (!ha->decide)
        return 1;
    const pt_wseries *ts = &w->wr->series[i];
    pt_label *ls = ts->labels;
    pt_write_result *res = w->res;
    ha_memo *m = &w->ham;
    size_t ci, ri, n = ts->nsamples + ts->nhistograms;
    if (!ha->labels(ha->ud, ls, (size_t)*nl, &ci, &ri))
        return 1; /* not of an HA pair: stored as it is */
    pt_slice cluster = ls[ci].value, replica = ls[ri].value;
    if (m->verdict < 0 || !pt_slice_eq(m->cluster, cluster) || !pt_slice_eq(m->replica, replica)) {
        void *e;
        char msg[PT_MSG_MAX];
        int rv = ha->decide(ha->ud, w->tenant, cluster, replica, &e, msg, sizeof(msg));
        if (rv == PT_ELABELS) {
            reject_entry(w, ts, PT_REJECT_LABELS);
            pt_write_note(res, "%s", msg);
            return 0;
        }
        if (rv == PT_ETENANTLIMIT) { /* a full table: 429, the request may be retried */
            reject_entry(w, ts, PT_REJECT_LIMIT);
            if (!res->limited)
                snprintf(res->msg, sizeof(res->msg), "%s", msg);
            res->limited = 1;
            return 0;
        }
        if (rv < 0)
            return rv;
        ha->release(ha->ud, m->e);
        *m = (ha_memo){.cluster = cluster, .replica = replica, .e = e, .verdict = rv};
    }
    ha->count(ha->ud, m->e, m->verdict, n);
    if (m->verdict == PT_HA_DROP) {
        res->samples_deduplicated += n;
        return 0;
    }
    /* Sorted stays sorted; the labels are the request's, so nothing is allocated. */
    memmove(&ls[ri], &ls[ri + 1], ((size_t)*nl - ri - 1) * sizeof(*ls));
    (*nl)--;
    return 1;
}

/* ---- gate ---- */

/* Gate: asks the store's gate (a tenant's series limit) about the request's encoded
 * series with a cell to store, and takes the cells and pendings of the refused ones out
 * of the batch, keeping the order of the rest; their cells are counted rejected (moved
 * from written), res->limited set and res->msg the gate's message (a 429). Without a gate
 * or when every series is admitted the batch is left as it is. 0 or PT_ENOMEM. */
static int gate_series(wctx *w)
{
    pt_store *st = w->st;
    const espan *sp = w->spans;
    size_t n = w->nspans;
    if (!st->gate || n == 0)
        return 0;
    batch *b = &w->b;
    pendings *pd = &w->pd;
    pt_write_result *res = w->res;
    uint64_t *hs = pt_arena_alloc(w->a, n * sizeof(*hs));
    uint8_t *ok = pt_arena_alloc(w->a, n), *gok = pt_arena_alloc(w->a, n);
    if (!hs || !ok || !gok)
        return PT_ENOMEM;
    /* Only series with a cell to store are asked about (and become active). */
    size_t ng = 0;
    for (size_t i = 0; i < n; i++)
        if (sp[i].m1 > sp[i].m0)
            hs[ng++] = sp[i].h;
    char msg[PT_MSG_MAX];
    if (st->gate(st->gate_ud, hs, ng, gok, msg, sizeof(msg)) == 0)
        return 0;
    for (size_t i = 0, g = 0; i < n; i++)
        ok[i] = sp[i].m1 > sp[i].m0 ? gok[g++] : 1;
    pt_mutation *m = (pt_mutation *)(void *)b->buf.p;
    size_t mw = 0, mr = 0, pw = 0, pr = 0;
    for (size_t i = 0; i < n; i++) {
        if (ok[i])
            continue;
        memmove(&m[mw], &m[mr], (sp[i].m0 - mr) * sizeof(*m));
        mw += sp[i].m0 - mr;
        mr = sp[i].m1;
        memmove(&pd->keys[pw], &pd->keys[pr], (sp[i].p0 - pr) * sizeof(*pd->keys));
        memmove(&pd->p[pw], &pd->p[pr], (sp[i].p0 - pr) * sizeof(*pd->p));
        pw += sp[i].p0 - pr;
        pr = sp[i].p1;
        size_t gone = sp[i].samples + sp[i].hists + sp[i].exemplars;
        res->samples_written -= sp[i].samples;
        res->histograms_written -= sp[i].hists;
        res->exemplars_written -= sp[i].exemplars;
        res->samples_rejected += gone;
        st->stats->samples_rejected[PT_REJECT_LIMIT] += gone;
    }
    memmove(&m[mw], &m[mr], (b->n - mr) * sizeof(*m));
    b->n = mw + (b->n - mr);
    b->buf.len = b->n * sizeof(*m);
    memmove(&pd->keys[pw], &pd->keys[pr], (pd->n - pr) * sizeof(*pd->keys));
    memmove(&pd->p[pw], &pd->p[pr], (pd->n - pr) * sizeof(*pd->p));
    pd->n = pw + (pd->n - pr);
    res->limited = 1;
    snprintf(res->msg, sizeof(res->msg), "%s", msg);
    return 0;
}

/* ---- commit ---- */

void pt_write_invalidate(pt_ref_cache *c, const pt_buf *rows)
{
    for (size_t i = 0; i + 16 <= rows->len; i += 16) {
        uint64_t pair[2];
        memcpy(pair, rows->p + i, sizeof(pair));
        pt_ref_cache_invalidate(c, pair[0], (int64_t)pair[1]);
    }
}

/* Commit: hands the batch to the backend in one write (unsorted: backends that want key
 * order sort) and drops the series-row and list cache entries of the rows it wrote, also
 * when the write failed. Only after the backend acknowledged it do the index cache, the
 * exemplar marks and the newest-exemplar times learn what the batch stored, and the
 * metadata rows are written; so a failed request leaves no cache claiming rows that are
 * not stored. On an error nothing counts as written (res->*_written 0) and the request
 * may be retried; else the write counters are added to. */
static int commit(wctx *w)
{
    pt_store *st = w->st;
    pt_write_result *res = w->res;
    int rv;
    if (w->b.n > 0) {
        uint64_t t0 = pt_now_ns();
        rv = pt_backend_write(st->be, (const pt_mutation *)(const void *)w->b.buf.p, w->b.n);
        pt_lathist_observe(&st->stats->backend_write_duration, pt_now_ns() - t0);
        /* also after a failed write: some of the rows may be stored */
        pt_write_invalidate(st->refs, &w->b.srows);
        pt_write_invalidate(st->lists, &w->b.lrows);
        if (rv != 0) {
            st->stats->backend_write_errors++;
            res->samples_written = res->histograms_written = res->exemplars_written = 0;
            return rv;
        }
    }
    /* Samples older than what the roll-ups have built: their windows are built again. */
    if (st->late) {
        int64_t first = INT64_MAX;
        for (size_t i = 0; i < w->pd.n; i++)
            first = w->pd.p[i].day < first ? w->pd.p[i].day : first;
        if (first != INT64_MAX)
            pt_rollup_late_note(st->late, first);
    }
    /* Only now are the index rows durable: remember them. */
    const pt_keyset *seen = &w->seen;
    if (seen->n) {
        pt_index_key *keys = pt_arena_alloc(w->a, seen->n * sizeof(*keys));
        if (!keys)
            return PT_ENOMEM;
        size_t k = 0;
        for (size_t i = 0; i <= seen->mask; i++)
            if (seen->slots[i].lo || seen->slots[i].hi)
                keys[k++] = seen->slots[i];
        pt_index_cache_add(st->cache, keys, k);
    }
    for (size_t i = 0; i < w->xb.n; i++)
        pt_exemplar_marks_add(st->xmarks, st->salt, w->xb.v[i]);
    /* The exemplars are stored: from now on older ones of their series are out of order. */
    const xseen *xs = &w->xs;
    for (size_t i = 0; xs->s && i <= xs->mask; i++)
        if (xs->s[i].h)
            pt_exemplar_newest_put(st->xnewest, xs->s[i].h, xs->s[i].ts);
    /* The metadata queued by prepare and encode, kept per metric family (meta.c). */
    if ((rv = pt_meta_commit(&w->mb)) != 0) {
        st->stats->backend_write_errors++;
        res->samples_written = res->histograms_written = res->exemplars_written = 0;
        return rv;
    }
    pt_store_stats *stats = st->stats;
    stats->samples_received += res->samples_written + res->histograms_written;
    stats->exemplars_received += res->exemplars_written;
    stats->series_received += res->series;
    stats->index_rows_written += res->index_rows;
    return 0;
}

/* ---- the driver ---- */

/* One request through the stages, in order; the first error ends it (nothing after it
 * runs, so an error before commit writes nothing). */
static int store_write(wctx *w)
{
    pt_wreq *wr = w->wr;
    int rv = prepare(w);
    if (rv != 0 || !validate_request(w))
        return rv;
    /* With a series gate, where each series' cells and pendings went. */
    if (w->st->gate && !(w->spans = pt_arena_alloc(w->a, (wr->nseries + 1) * sizeof(*w->spans))))
        return PT_ENOMEM;
    for (size_t i = 0; i < wr->nseries; i++) {
        int plain;
        long nl = validate_series(w, i, &plain);
        if (nl < 0)
            continue;
        int keep = filter_series(w, i, &nl);
        if (keep < 0)
            return keep; /* nothing is stored: the whole request is retried */
        if (keep && (rv = pt_write_encode(w, i, wr->series[i].labels, (size_t)nl, plain)) != 0)
            return rv;
    }
    if ((rv = gate_series(w)) != 0 || (rv = pt_write_index(w)) != 0)
        return rv;
    return commit(w);
}

int pt_store_write_tenant(pt_store *st, pt_slice tenant, pt_wreq *wr, pt_arena *a,
                          pt_write_result *res)
{
    wctx w = {.st = st,
              .b = {.key_limit = pt_store_key_limit(st)},
              .tenant = tenant,
              .wr = wr,
              .a = a,
              .res = res,
              .xb = {.known = -1},
              .hs = PT_HISTOGRAM_INIT,
              .ham = {.verdict = -1}};
    int rv = store_write(&w);
    if (w.ham.e)
        st->ha.release(st->ha.ud, w.ham.e);
    pt_histogram_free(&w.hs);
    return rv;
}

int pt_store_write(pt_store *st, pt_wreq *wr, pt_arena *a, pt_write_result *res)
{
    return pt_store_write_tenant(st, (pt_slice){(const uint8_t *)"", 0}, wr, a, res);
}
