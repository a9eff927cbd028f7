/* The write path's index stage: the index rows of the (series, index bucket) pairs the
 * encode stage pended that the index cache does not know, the values rows they need, and
 * the marks of new exemplar buckets (docs/storage-format.md, "Index rows"); and the index
 * table's format marker, checked at start. */
#include <stdio.h>
#include <string.h>

#include "bytes.h"
#include "exemplar.h"
#include "log.h"
#include "write_int.h"

/* Index cells: one qualifier, value = encoded labels for hashed series, else empty. */
static const uint8_t index_qual[] = {'l'};

static int sid_is_hashed(pt_slice sid)
{
    for (size_t i = 0; i + 1 < sid.n; i++) {
        if (sid.p[i] == '\\') {
            if (sid.p[i + 1] == '#')
                return 1;
            i++;
        }
    }
    return 0;
}

/* Index cells are versioned at their bucket's last millisecond: a max-age GC rule
 * (storage.retention) then keeps a bucket's index rows as long as its newest samples. */
static int64_t index_version(const pt_store *st, int64_t day)
{
    return (day + st->index_bucket_ms - 1) * 1000;
}

/* The rows of one series in one index bucket (docs/storage-format.md, "Index rows"): its
 * list entries under its metric and each of its other labels, and its series row. Values
 * rows apart. */
int pt_index_series_rows(batch *b, pt_arena *a, const pt_store *st, const pt_label *ls,
                         size_t n, pt_slice sid, int64_t day, size_t *rows)
{
    int64_t ver = index_version(st, day);
    pt_slice qual = {index_qual, sizeof(index_qual)};
    uint64_t mask = 0;
    for (size_t i = 0; i < n; i++)
        mask = pt_label_mask_add(mask, ls[i].name, ls[i].value);
    uint8_t ref[PT_REF_HEX];
    uint64_t r = pt_series_ref(sid, st->ref_bits);
    pt_ref_hex(ref, r);
    int rv;
    if (st->refs) {
        uint64_t pair[2] = {r ^ st->salt, (uint64_t)day};
        if ((rv = pt_buf_append(&b->srows, pair, sizeof(pair))) != 0)
            return rv;
    }
    /* The series row: the sid, or its digest and then the label set in the cell. */
    uint8_t *k = pt_arena_alloc(a, PT_INDEX_SERIES_PREFIX_LEN + sid.n + PT_DIGEST_LEN);
    if (!k)
        return PT_ENOMEM;
    uint8_t *e = pt_index_series_prefix(k, ref, day);
    uint8_t *re = pt_index_ref(e, (size_t)(e - k), sid, b->key_limit);
    pt_slice labels = {(const uint8_t *)"", 0};
    if (sid_is_hashed(sid) || pt_index_is_digest((pt_slice){e, (size_t)(re - e)})) {
        size_t len = pt_labels_encoded_len(ls, n);
        uint8_t *enc = pt_arena_alloc(a, len ? len : 1);
        if (!enc)
            return PT_ENOMEM;
        pt_labels_encode(enc, ls, n);
        labels = (pt_slice){enc, len};
    }
    if ((rv = push(b, PT_TABLE_INDEX, (pt_slice){k, (size_t)(re - k)}, qual, labels, ver)) != 0)
        return rv;
    /* The list cells' qualifier is the label mask, not the value: series that share a
     * reference share a list row, and each keeps its own cell in it. The metric's list
     * cell carries the sid after the mask when the series row holds it plainly, so that a
     * read by metric name needs no series row. */
    size_t sid_n = labels.n ? 0 : sid.n;
    uint8_t *mq = pt_arena_alloc(a, 8 + sid_n);
    if (!mq)
        return PT_ENOMEM;
    pt_put_be64(mq, mask);
    memcpy(mq + 8, sid.p, sid_n);
    for (size_t i = 0; i < n; i++) {
        const pt_label *l = &ls[i];
        int metric = is_name_label(l);
        k = pt_arena_alloc(a, PT_INDEX_PREFIX_MAX(l->name.n, l->value.n) + PT_REF_HEX);
        if (!k)
            return PT_ENOMEM;
        e = metric ? pt_index_metric_prefix(k, l->value, day)
                   : pt_index_posting_prefix(k, l->name, l->value, day);
        if (st->lists) {
            uint64_t pair[2] = {pt_list_cache_key(k, (size_t)(e - k), st->salt), (uint64_t)day};
            if ((rv = pt_buf_append(&b->lrows, pair, sizeof(pair))) != 0)
                return rv;
        }
        memcpy(e, ref, PT_REF_HEX);
        e += PT_REF_HEX;
        pt_slice lq = {mq, metric ? 8 + sid_n : 8};
        if ((rv = push(b, PT_TABLE_INDEX, (pt_slice){k, (size_t)(e - k)}, lq,
                       (pt_slice){(const uint8_t *)"", 0}, ver)) != 0)
            return rv;
    }
    *rows += n + 1;
    return 0;
}

int pt_index_values_row(pt_arena *a, const pt_store *st, const pt_label *l, int64_t day,
                        valrow *out, pt_index_key *key)
{
    uint8_t *k = pt_arena_alloc(a, PT_INDEX_PREFIX_MAX(l->name.n, l->value.n));
    if (!k)
        return PT_ENOMEM;
    uint8_t *vs = pt_index_values_prefix(k, l->name, day);
    uint8_t *e = pt_index_part(vs, l->value);
    int digest = pt_index_is_digest((pt_slice){vs, (size_t)(e - vs)});
    out->key = (pt_slice){k, (size_t)(e - k)};
    out->cell = digest ? l->value : (pt_slice){(const uint8_t *)"", 0};
    out->ver = index_version(st, day);
    /* Seed -1: no (series, day) key has it, so the two kinds share the cache. */
    *key = pt_store_key(st, out->key, -1);
    return 0;
}

/* Adds the index rows of every pending pair that neither the cache nor an earlier pair of
 * this request has, and the values rows they need that the cache does not know; seen
 * collects the keys written. */
static int index_pending(batch *b, pt_arena *a, pt_store *st, const pendings *pd,
                         pt_keyset *seen, pt_write_result *res)
{
    if (pd->n == 0)
        return 0;
    uint8_t *found = pt_arena_alloc(a, pd->n);
    if (!found)
        return PT_ENOMEM;
    pt_index_cache_lookup(st->cache, pd->keys, pd->n, found);
    size_t miss = 0, nvals = 0;
    for (size_t i = 0; i < pd->n; i++)
        if (!found[i])
            miss++, nvals += pd->p[i].nl;
    if (miss == 0)
        return 0;
    size_t slots = 16;
    while (slots < 2 * (miss + nvals))
        slots <<= 1;
    seen->slots = pt_arena_calloc(a, slots * sizeof(pt_index_key));
    seen->mask = slots - 1;
    valrow *vr = pt_arena_alloc(a, nvals * sizeof(*vr));
    pt_index_key *vk = pt_arena_alloc(a, nvals * sizeof(*vk));
    uint8_t *vfound = pt_arena_alloc(a, nvals);
    if (!seen->slots || !vr || !vk || !vfound)
        return PT_ENOMEM;
    size_t nv = 0;
    int rv;
    for (size_t i = 0; i < pd->n; i++) {
        if (found[i] || !pt_keyset_add(seen, pd->keys[i]))
            continue;
        const pending *p = &pd->p[i];
        if ((rv = pt_index_series_rows(b, a, st, p->ls, p->nl, p->sid, p->day, &res->index_rows)))
            return rv;
        for (size_t j = 0; j < p->nl; j++, nv++)
            if ((rv = pt_index_values_row(a, st, &p->ls[j], p->day, &vr[nv], &vk[nv])) != 0)
                return rv;
    }
    pt_index_cache_lookup(st->cache, vk, nv, vfound);
    pt_slice qual = {index_qual, sizeof(index_qual)};
    for (size_t i = 0; i < nv; i++) {
        if (vfound[i] || !pt_keyset_add(seen, vk[i]))
            continue;
        if ((rv = push(b, PT_TABLE_INDEX, vr[i].key, qual, vr[i].cell, vr[i].ver)) != 0)
            return rv;
        res->index_rows++;
    }
    return 0;
}

int pt_store_index_series(pt_store *st, pt_arena *a, const pt_label *ls, size_t n, int64_t day)
{
    batch b = {.key_limit = pt_store_key_limit(st)};
    pt_buf_init_arena(&b.buf, a, 0);
    pt_buf_init_arena(&b.srows, a, 0);
    pt_buf_init_arena(&b.lrows, a, 0);
    pt_slice sid, qual = {index_qual, sizeof(index_qual)};
    size_t rows = 0;
    int rv = pt_series_id(a, ls, n, b.key_limit, &sid);
    if (rv == 0)
        rv = pt_index_series_rows(&b, a, st, ls, n, sid, day, &rows);
    for (size_t i = 0; i < n && rv == 0; i++) {
        valrow vr;
        pt_index_key k;
        if ((rv = pt_index_values_row(a, st, &ls[i], day, &vr, &k)) == 0)
            rv = push(&b, PT_TABLE_INDEX, vr.key, qual, vr.cell, vr.ver);
    }
    if (rv == 0)
        rv = pt_backend_write(st->be, (const pt_mutation *)(const void *)pt_buf_data(&b.buf), b.n);
    return rv;
}

static const uint8_t mark_row[] = PT_EXEMPLAR_MARK_ROW;

/* The mark of the bucket at base (exemplar.h). */
static int push_exemplar_mark(batch *b, pt_arena *a, int64_t base)
{
    uint8_t *q = pt_arena_alloc(a, PT_EXEMPLAR_MARK_QUAL_LEN);
    if (!q)
        return PT_ENOMEM;
    pt_exemplar_mark_qual(q, base);
    /* Stamped like index cells, with the bucket's last millisecond: a retention GC rule
     * keeps the mark as long as the bucket's newest exemplars. */
    return push(b, PT_TABLE_INDEX, (pt_slice){mark_row, sizeof(mark_row) - 1},
                (pt_slice){q, PT_EXEMPLAR_MARK_QUAL_LEN}, (pt_slice){(const uint8_t *)"1", 1},
                (base + PT_BUCKET_MS - 1) * 1000);
}

/* Index: adds to w->b the index rows of every pended (series, bucket) pair that neither
 * the index cache nor an earlier pair of the request has, the values rows they need that
 * the cache does not know, and the mark of every exemplar bucket the store's marks do not
 * know yet; w->seen gets the index keys written, for the cache once the batch is stored.
 * Writes nothing to the cache itself: a pair is known only after its rows are durable
 * (the commit stage). 0, or PT_ENOMEM. */
int pt_write_index(wctx *w)
{
    int rv = index_pending(&w->b, w->a, w->st, &w->pd, &w->seen, w->res);
    /* Marks of a refused series' buckets stay: a mark too many only costs reads time. */
    for (size_t i = 0; i < w->xb.n && rv == 0; i++)
        rv = push_exemplar_mark(&w->b, w->a, w->xb.v[i]);
    return rv;
}

/* ---- the index format marker ---- */

/* One row of the index table names its key layout; "==" + a non-hex letter is no series
 * row. Format 1 (the sid repeated in every list row, before series references) had no
 * marker. */
static const char format_row[] = "==format";
static const char format_now[] = "2";

typedef struct found_row {
    int n;
    char value[8];
} found_row;

static int note_row(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)row, (void)qual;
    found_row *f = ud;
    f->n++;
    size_t n = value.n < sizeof(f->value) - 1 ? value.n : sizeof(f->value) - 1;
    memcpy(f->value, value.p, n);
    f->value[n] = '\0';
    return 1;
}

int pt_store_check_index(pt_store *st, char *err, size_t errlen)
{
    /* The cell timestamp of the store-wide cells: the last time a key can have, so that
     * no retention GC rule (Bigtable: "older than storage.retention") ever takes them. */
    const int64_t never = (PT_MAX_TIME_MS + PT_BUCKET_MS) * 1000;
    const size_t fl = sizeof(format_row) - 1;
    const uint8_t *fr = (const uint8_t *)format_row;
    pt_row_range all = {{(const uint8_t *)"", 0}, {0}};
    found_row f = {0};
    pt_scan s = {.table = PT_TABLE_INDEX, .ranges = &all, .nranges = 1, .row_limit = 1};
    const pt_mutation format = {.table = PT_TABLE_INDEX,
                                .row = {fr, fl},
                                .qual = {index_qual, sizeof(index_qual)},
                                .value = {(const uint8_t *)format_now, 1},
                                .version_us = never};
    int rv = pt_backend_scan_row(st->be, PT_TABLE_INDEX, (pt_slice){fr, fl}, (pt_slice){0},
                                 (pt_slice){0}, note_row, &f);
    if (rv == 0 && f.n == 0) {
        rv = pt_backend_scan(st->be, &s, note_row, &f); /* no marker: empty = a new store */
        if (rv == 0 && f.n == 0) {
            /* A new store: the exemplar marks start with it. */
            pt_mutation m[2] = {
                format,
                {.table = PT_TABLE_INDEX,
                 .row = {mark_row, sizeof(mark_row) - 1},
                 .qual = {(const uint8_t *)PT_EXEMPLAR_MARK_SINCE,
                          sizeof(PT_EXEMPLAR_MARK_SINCE) - 1},
                 .value = {(const uint8_t *)"1", 1},
                 .version_us = never}};
            rv = pt_backend_write(st->be, m, 2);
            if (rv == 0)
                return 0;
        } else if (rv == 0) {
            snprintf(err, errlen,
                     "the index table holds index format 1 (written by a promtable before "
                     "series references); this version reads format %s only: read the data "
                     "out with the promtable that wrote it, or start on an empty store",
                     format_now);
            return PT_EINTERNAL;
        }
    } else if (rv == 0 && strcmp(f.value, format_now) != 0) {
        snprintf(err, errlen, "the index table holds index format \"%s\"; this version "
                 "knows format %s", f.value, format_now);
        return PT_EINTERNAL;
    } else if (rv == 0 && (st->be->ops->caps & PT_BACKEND_CAP_VERSIONS)) {
        /* A store created before its format row got the timestamp that never expires:
         * stamped again, before a max-age GC rule takes it. Not needed to start (a
         * promtable with read-only credentials still does). A store without versions
         * gets no write: on the embedded store it would be a table file per start. */
        int wrv = pt_backend_write(st->be, &format, 1);
        if (wrv != 0)
            pt_log(PT_LOG_WARN, "format row not stamped again", "err=\"%s\"", pt_strerror(wrv));
    }
    if (rv == 0 && f.n > 0 && st->xmarks) {
        /* A store created before the exemplar marks: every bucket may hold exemplars. */
        int has_since = 0;
        rv = pt_exemplar_marks_read(st->be, PT_SLICE_LIT(PT_EXEMPLAR_MARK_SINCE), &has_since);
        if (rv == 0 && !has_since) {
            pt_exemplar_marks_set_legacy(st->xmarks);
            pt_log(PT_LOG_INFO, "exemplar marks absent",
                   "detail=\"a store from before the exemplar marks: reads look for exemplar "
                   "rows in every bucket\"");
        }
    }
    if (rv != 0)
        snprintf(err, errlen, "the index format could not be checked: %s", pt_strerror(rv));
    return rv;
}

