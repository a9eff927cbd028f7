/*
 * Internals of the write path (pt_store_write), shared by its stages: write.c (the driver:
 * validate, HA filter, gate, commit), write_encode.c (cells into the batch) and
 * write_index.c (index rows of new series, exemplar marks, the index format marker).
 *
 * Everything a stage makes lives in the request's arena and is freed with it; the batch
 * and the pendings are sized for the request's cells up front, so no stage allocates per
 * sample beyond the cell bytes themselves.
 */
#ifndef PT_WRITE_INT_H
#define PT_WRITE_INT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "buf.h"
#include "error.h"
#include "histogram.h"
#include "meta.h"
#include "store.h"

/* The mutations of one request, in arena memory; sized for the samples up front, so it
 * grows only for index rows. */
typedef struct batch {
    pt_buf buf;
    size_t n;
    pt_buf srows; /* (ref, bucket) of each series row, for the series-row cache */
    pt_buf lrows; /* (list key, bucket) of each list row, for the list cache */
    size_t key_limit; /* the store's (pt_store_key_limit) */
} batch;

static inline int push(batch *b, uint8_t table, pt_slice row, pt_slice qual, pt_slice value,
                       int64_t version_us)
{
    if (row.n > b->key_limit)
        return PT_EINTERNAL; /* the key encodings guarantee this never happens */
    pt_mutation *m = (pt_mutation *)(void *)pt_buf_room(&b->buf, sizeof(*m));
    if (!m)
        return PT_ENOMEM;
    *m = (pt_mutation){
        .table = table, .row = row, .qual = qual, .value = value, .version_us = version_us};
    pt_buf_commit(&b->buf, sizeof(*m));
    b->n++;
    return 0;
}

static inline int is_name_label(const pt_label *l)
{
    return l->name.n == 8 && memcmp(l->name.p, "__name__", 8) == 0;
}

/* A (series, index bucket) pair whose index rows the request writes unless the cache
 * already has them. */
typedef struct pending {
    const pt_label *ls;
    size_t nl;
    pt_slice sid;
    int64_t day;
} pending;

/* The request's pendings, at most two per cell, with their index-cache keys. */
typedef struct pendings {
    pt_index_key *keys;
    pending *p;
    size_t n;
} pendings;

/* The newest exemplar time of each series this request stores exemplars for (open
 * addressing, h 0 = empty): checked together with st->xnewest, which gets them once the
 * backend has acknowledged the request. */
typedef struct xseen_slot {
    uint64_t h;
    int64_t ts;
} xseen_slot;

typedef struct xseen {
    xseen_slot *s; /* NULL: exemplars are not checked for order */
    size_t mask;
} xseen;

/* The buckets this request writes exemplars into that the store's marks do not know yet
 * (exemplar.h): each gets its mark in the request's batch, and is known once stored. */
typedef struct xbuckets {
    int64_t *v; /* NULL: no exemplar marks are written */
    size_t n;
    int64_t known; /* the last bucket found marked already (-1: none) */
} xbuckets;

/* One series entry of a request as written into the batch: its hash, its cells
 * [m0, m1), its pendings [p0, p1), and what it stored. */
typedef struct espan {
    uint64_t h;
    size_t m0, m1, p0, p1;
    size_t samples, hists, exemplars;
} espan;

/* The HA decision last taken in this request (write.c, "HA pairs"). */
typedef struct ha_memo {
    pt_slice cluster, replica;
    void *e;    /* the reference pt_store.ha's decide handed out; NULL: none */
    int verdict; /* -1: nothing decided yet */
} ha_memo;

/* One request on its way through the stages. */
typedef struct wctx {
    pt_store *st;
    pt_slice tenant;
    pt_wreq *wr;
    pt_arena *a;
    pt_write_result *res;
    int v2;             /* a remote write 2.0 request */
    batch b;            /* the mutations, in the order the stages add them */
    pendings pd;        /* (series, bucket) pairs the index stage looks at */
    pt_keyset seen;     /* the index keys the batch writes, for the cache after commit */
    xseen xs;
    xbuckets xb;
    pt_meta_batch mb;   /* metadata rows, committed after the batch */
    espan *spans;       /* with a series gate: where each encoded series went; else NULL */
    size_t nspans;
    pt_histogram hs;    /* the one histogram every histogram of the request is read into */
    ha_memo ham;
} wctx;

/* Sets res->msg unless a problem is noted already (the first one is answered). */
void pt_write_note(pt_write_result *res, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Counts a metadata entry and queues it for the metadata rows (meta.c) unless it says
 * nothing (2.0 series without metadata carry an empty one). 0 or PT_ENOMEM. */
int pt_write_metadata(pt_meta_batch *mb, pt_slice family, const pt_wmeta *m);

/* The encode stage for entry i of the request, whose label set ls (nl labels, plain as
 * pt_labels_validate says) passed validation and the HA filter (write_encode.c). */
int pt_write_encode(wctx *w, size_t i, const pt_label *ls, size_t nl, int plain);

/* The index stage (write_index.c). */
int pt_write_index(wctx *w);

/* The rows of one series in one index bucket (docs/storage-format.md, "Index rows"): its
 * list entries under its metric and each of its other labels, and its series row, added
 * to b (with their cache pairs in b->srows and b->lrows); *rows counts them. Values rows
 * apart. 0 or PT_ENOMEM (PT_EINTERNAL: a key past the limit, which the encodings rule
 * out). */
int pt_index_series_rows(batch *b, pt_arena *a, const pt_store *st, const pt_label *ls,
                         size_t n, pt_slice sid, int64_t day, size_t *rows);

/* A values row ("=name,@day,value") that a series needs; written unless the index cache
 * knows key (many series share a value). */
typedef struct valrow {
    pt_slice key, cell;
    int64_t ver;
} valrow;
int pt_index_values_row(pt_arena *a, const pt_store *st, const pt_label *l, int64_t day,
                        valrow *out, pt_index_key *key);

/* Drops the cache entries of the (key, bucket) pairs in rows (a batch's srows or lrows),
 * after their rows were written or erased. */
void pt_write_invalidate(pt_ref_cache *c, const pt_buf *rows);

#endif
