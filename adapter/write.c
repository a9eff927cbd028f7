/* The write path: WriteRequest → validated label sets → row keys, cells, index rows. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "bytes.h"
#include "error.h"
#include "exemplar.h"
#include "ha.h"
#include "histpb.h"
#include "log.h"
#include "meta.h"
#include "metrics.h"
#include "store.h"

/* Index cells: one qualifier, value = encoded labels for hashed series, else empty. */
static const uint8_t index_qual[] = {'l'};

int pt_utf8_valid(pt_slice s)
{
    size_t i = 0;
    while (i < s.n) {
        /* Label text is almost always ASCII: skip it eight bytes at a time. */
        while (s.n - i >= 8) {
            uint64_t w;
            memcpy(&w, s.p + i, 8);
            if (w & 0x8080808080808080ULL)
                break;
            i += 8;
        }
        if (i >= s.n)
            break;
        uint8_t c = s.p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        uint32_t cp, min;
        if ((c & 0xe0) == 0xc0) {
            len = 2, cp = c & 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            len = 3, cp = c & 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            len = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return 0;
        }
        if (s.n - i < len)
            return 0;
        for (size_t k = 1; k < len; k++) {
            if ((s.p[i + k] & 0xc0) != 0x80)
                return 0;
            cp = cp << 6 | (s.p[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += len;
    }
    return 1;
}

/* Appends `name{a="b",...}` for messages, cut at a readable length. */
static void describe(char *buf, size_t cap, const pt_label *ls, size_t n)
{
    size_t o = 0;
    const char *metric = NULL;
    int metric_len = 0;
    for (size_t i = 0; i < n; i++)
        if (ls[i].name.n == 8 && memcmp(ls[i].name.p, "__name__", 8) == 0) {
            metric = (const char *)ls[i].value.p;
            metric_len = (int)(ls[i].value.n > 100 ? 100 : ls[i].value.n);
        }
    o += (size_t)snprintf(buf + o, cap - o, "%.*s{", metric_len, metric ? metric : "");
    int first = 1;
    for (size_t i = 0; i < n && o < cap; i++) {
        if (ls[i].name.n == 8 && memcmp(ls[i].name.p, "__name__", 8) == 0)
            continue;
        int nl = (int)(ls[i].name.n > 60 ? 60 : ls[i].name.n);
        int vl = (int)(ls[i].value.n > 60 ? 60 : ls[i].value.n);
        o += (size_t)snprintf(buf + o, cap - o, "%s%.*s=\"%.*s%s\"", first ? "" : ", ", nl,
                              (const char *)ls[i].name.p, vl, (const char *)ls[i].value.p,
                              ls[i].value.n > 60 ? "..." : "");
        first = 0;
        if (o > 300) {
            snprintf(buf + (o < cap ? o : cap - 1), cap - (o < cap ? o : cap - 1), ", ...");
            o = cap;
        }
    }
    if (o < cap)
        snprintf(buf + o, cap - o, "}");
}

static long label_error(char *msg, size_t msglen, const pt_label *in, size_t n,
                        const char *fmt, ...)
{
    char what[256], series[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    describe(series, sizeof(series), in, n);
    snprintf(msg, msglen, "invalid label set %s: %s", series, what);
    return PT_ELABELS;
}

/* Sorts by name, stable; senders send labels sorted, so this is one pass for them. */
static void sort_labels(pt_label *ls, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        if (pt_slice_cmp(ls[i - 1].name, ls[i].name) <= 0)
            continue;
        pt_label x = ls[i];
        size_t j = i;
        while (j > 0 && pt_slice_cmp(ls[j - 1].name, x.name) > 0) {
            ls[j] = ls[j - 1];
            j--;
        }
        ls[j] = x;
    }
}

long pt_labels_validate(pt_label *ls, size_t n, const pt_label_limits *lim, int *plain,
                        char *msg, size_t msglen)
{
    static const pt_label_limits none = {0, 0, 0};
    if (!lim)
        lim = &none;
    /* Before sorting: an insertion sort of a huge unsorted set would be the cost. */
    if (lim->labels && n > lim->labels)
        return label_error(msg, msglen, ls, n, "%zu labels, more than "
                           "write.max_labels_per_series (%zu)", n, lim->labels);
    unsigned text = 0;
    sort_labels(ls, n);
    size_t k = 0;
    int has_name = 0;
    for (size_t i = 0; i < n; i++) {
        pt_slice name = ls[i].name, value = ls[i].value;
        if (name.n == 0)
            return label_error(msg, msglen, ls, n, "a label has an empty name");
        if (lim->name_len && name.n > lim->name_len)
            return label_error(msg, msglen, ls, n, "label name \"%.*s...\" is %zu bytes long, "
                               "more than write.max_label_name_length (%zu)", (int)(name.n > 60 ? 60 : name.n),
                               (const char *)name.p, name.n, lim->name_len);
        if (lim->value_len && value.n > lim->value_len)
            return label_error(msg, msglen, ls, n, "value of label \"%.*s\" is %zu bytes long, "
                               "more than write.max_label_value_length (%zu)",
                               (int)(name.n > 60 ? 60 : name.n), (const char *)name.p, value.n,
                               lim->value_len);
        unsigned f = pt_text_flags(name) | pt_text_flags(value);
        text |= f;
        if ((f & PT_TEXT_NONASCII) && !pt_utf8_valid(name))
            return label_error(msg, msglen, ls, n, "a label name is not valid UTF-8");
        if ((f & PT_TEXT_NONASCII) && !pt_utf8_valid(value))
            return label_error(msg, msglen, ls, n, "value of label \"%.*s\" is not valid UTF-8",
                               (int)(name.n > 60 ? 60 : name.n), (const char *)name.p);
        if (i > 0 && pt_slice_eq(ls[i - 1].name, name))
            return label_error(msg, msglen, ls, n, "duplicate label name \"%.*s\"",
                               (int)(name.n > 60 ? 60 : name.n), (const char *)name.p);
    }
    for (size_t i = 0; i < n; i++) {
        if (ls[i].value.n == 0)
            continue; /* an empty value is the same as no label */
        if (ls[i].name.n == 8 && memcmp(ls[i].name.p, "__name__", 8) == 0)
            has_name = 1;
        ls[k++] = ls[i];
    }
    if (!has_name)
        return label_error(msg, msglen, ls, k, "no metric name (label __name__)");
    if (plain)
        *plain = !(text & PT_TEXT_ESCAPE);
    return (long)k;
}

/* The mutations of one request, in arena memory; sized for the samples up front, so it
 * grows only for index rows. */
typedef struct batch {
    pt_buf buf;
    size_t n;
    pt_buf srows; /* (ref, bucket) of each series row, for the series-row cache */
    pt_buf lrows; /* (list key, bucket) of each list row, for the list cache */
} batch;

static int push(batch *b, uint8_t table, pt_slice row, pt_slice qual,
                pt_slice value, int64_t version_us)
{
    if (row.n > pt_row_key_limit)
        return PT_EINTERNAL; /* the key encodings guarantee this never happens */
    pt_mutation *m = (pt_mutation *)(void *)pt_buf_room(&b->buf, sizeof(*m));
    if (!m)
        return PT_ENOMEM;
    *m = (pt_mutation){table, row, qual, value, version_us};
    pt_buf_commit(&b->buf, sizeof(*m));
    b->n++;
    return 0;
}

/* Drops the cache entries of the (key, bucket) pairs in rows, after their rows were
 * written (also after a failed write: some of the rows may be stored). */
static void invalidate(pt_ref_cache *c, const pt_buf *rows)
{
    for (size_t i = 0; i + 16 <= rows->len; i += 16) {
        uint64_t pair[2];
        memcpy(pair, rows->p + i, sizeof(pair));
        pt_ref_cache_invalidate(c, pair[0], (int64_t)pair[1]);
    }
}

static int is_name_label(const pt_label *l)
{
    return l->name.n == 8 && memcmp(l->name.p, "__name__", 8) == 0;
}

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
static int add_series_rows(batch *b, pt_arena *a, const pt_store *st, const pt_label *ls,
                           size_t n, pt_slice sid, int64_t day, size_t *rows)
{
    int64_t ver = index_version(st, day);
    pt_slice qual = {index_qual, sizeof(index_qual)};
    uint64_t mask = 0;
    for (size_t i = 0; i < n; i++)
        mask = pt_label_mask_add(mask, ls[i].name, ls[i].value);
    uint8_t *mr = pt_arena_alloc(a, 8 + PT_REF_HEX);
    if (!mr)
        return PT_ENOMEM;
    pt_put_be64(mr, mask);
    const uint8_t *ref = mr + 8;
    uint64_t r = pt_series_ref(sid, st->ref_bits);
    pt_ref_hex(mr + 8, r);
    int rv;
    if (st->refs) {
        uint64_t pair[2] = {r ^ st->salt, (uint64_t)day};
        if ((rv = pt_buf_append(&b->srows, pair, sizeof(pair))) != 0)
            return rv;
    }
    for (size_t i = 0; i < n; i++) {
        const pt_label *l = &ls[i];
        uint8_t *k = pt_arena_alloc(a, PT_INDEX_PREFIX_MAX(l->name.n, l->value.n) + PT_REF_HEX);
        if (!k)
            return PT_ENOMEM;
        uint8_t *e = is_name_label(l) ? pt_index_metric_prefix(k, l->value, day)
                                      : pt_index_posting_prefix(k, l->name, l->value, day);
        if (st->lists) {
            uint64_t pair[2] = {pt_list_cache_key(k, (size_t)(e - k), st->salt), (uint64_t)day};
            if ((rv = pt_buf_append(&b->lrows, pair, sizeof(pair))) != 0)
                return rv;
        }
        memcpy(e, ref, PT_REF_HEX);
        e += PT_REF_HEX;
        /* The mask is the qualifier, not the value: series that share a reference share
         * this row, and each keeps its own mask in it. */
        if ((rv = push(b, PT_TABLE_INDEX, (pt_slice){k, (size_t)(e - k)}, (pt_slice){mr, 8},
                       (pt_slice){(const uint8_t *)"", 0}, ver)) != 0)
            return rv;
    }
    /* The series row: the sid, or its digest and then the label set in the cell. */
    uint8_t *k = pt_arena_alloc(a, PT_INDEX_SERIES_PREFIX_LEN + sid.n + PT_DIGEST_LEN);
    if (!k)
        return PT_ENOMEM;
    uint8_t *e = pt_index_series_prefix(k, ref, day);
    uint8_t *re = pt_index_ref(e, (size_t)(e - k), sid);
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
    *rows += n + 1;
    return 0;
}

/* A values row ("=name,@day,value") that a series of this request needs; written unless
 * the cache knows it (many series share a value). */
typedef struct valrow {
    pt_slice key, cell;
    int64_t ver;
} valrow;

static int values_row(pt_arena *a, const pt_store *st, const pt_label *l, int64_t day,
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

/* A (series, index bucket) pair whose index rows the request writes unless the cache
 * already has them. */
typedef struct pending {
    const pt_label *ls;
    size_t nl;
    pt_slice sid;
    int64_t day;
} pending;

typedef struct pendings {
    pt_index_key *keys;
    pending *p;
    size_t n;
} pendings;

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
        if ((rv = add_series_rows(b, a, st, p->ls, p->nl, p->sid, p->day, &res->index_rows)))
            return rv;
        for (size_t j = 0; j < p->nl; j++, nv++)
            if ((rv = values_row(a, st, &p->ls[j], p->day, &vr[nv], &vk[nv])) != 0)
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

static void pend(pendings *pd, pt_index_key key, const pt_label *ls, size_t nl, pt_slice sid,
                 int64_t day)
{
    pd->keys[pd->n] = key;
    pd->p[pd->n++] = (pending){ls, nl, sid, day};
}

static void note(pt_write_result *res, const char *fmt, ...)
{
    if (res->msg[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->msg, sizeof(res->msg), fmt, ap);
    va_end(ap);
}

/* Rejects a whole TimeSeries entry: its samples, histograms and exemplars. */
static void reject_entry(pt_write_result *res, const pt_wseries *ts, int why)
{
    size_t n = ts->nsamples + ts->nhistograms + ts->nexemplars;
    res->entries_rejected++;
    res->samples_rejected += n;
    pt_m.samples_rejected[why] += n;
}

/* Every metadata entry of a request passes here: 1.0 WriteRequest.metadata (family set)
 * and 2.0 per-series metadata (family = the series' metric name). Counted, and queued
 * for the metadata rows (meta.c) unless it says nothing (2.0 series without metadata
 * carry an empty one). 0 or PT_ENOMEM. */
static int metadata_entry(pt_meta_batch *mb, pt_slice family, const pt_wmeta *m)
{
    pt_m.metadata_received++;
    if (m->type == 0 && m->help.n == 0 && m->unit.n == 0)
        return 0;
    return pt_meta_put(mb, family, (int)m->type, m->help, m->unit) == PT_ENOMEM ? PT_ENOMEM : 0;
}

/* The newest exemplar time of each series this request stores exemplars for (open
 * addressing, h 0 = empty): checked together with st->xnewest, which gets them once the
 * backend has acknowledged the request. */
typedef struct xseen_slot {
    uint64_t h;
    int64_t ts;
} xseen_slot;

typedef struct xseen {
    xseen_slot *s;
    size_t mask;
} xseen;

static xseen_slot *xseen_find(xseen *x, uint64_t h)
{
    size_t i = h & x->mask;
    while (x->s[i].h && x->s[i].h != h)
        i = (i + 1) & x->mask;
    return &x->s[i];
}

/* The buckets this request writes exemplars into that the store's marks do not know yet
 * (exemplar.h): each gets its mark in the request's batch, and is known once stored. */
typedef struct xbuckets {
    int64_t *v;
    size_t n;
    int64_t known; /* the last bucket found marked already (-1: none) */
} xbuckets;

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
    pt_m.samples_rejected[PT_REJECT_TIMESTAMP]++;
    note(s->res, "%s timestamp %" PRId64 " for series %.*s",
         t < 0 ? "negative" : "out-of-range (after year 2286)", t,
         (int)(s->sid.n > 200 ? 200 : s->sid.n), (const char *)s->sid.p);
    return 0;
}

static void pend_day(sput *s, int64_t t);

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
            pt_m.exemplars_out_of_order++;
            return 0;
        }
    }
    if (why[0]) {
        s->res->samples_rejected++;
        pt_m.samples_rejected[PT_REJECT_EXEMPLAR]++;
        note(s->res, "invalid exemplar in timeseries %zu (series %.*s): %s", entry,
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
        *seen = (xseen_slot){s->xh, t};
    return 0;
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

/* 2.0 checks of one entry that 1.0 does not have; 0 or -1 with the entry rejected. */
static int check_v2_entry(const pt_wreq *wr, size_t i, pt_write_result *res)
{
    const pt_wseries *ts = &wr->series[i];
    if (ts->ref_problem == PT_WREF_ODD) {
        reject_entry(res, ts, PT_REJECT_LABELS);
        note(res, "timeseries %zu: labels_refs has an odd length", i);
        return -1;
    }
    if (ts->ref_problem == PT_WREF_RANGE) {
        reject_entry(res, ts, PT_REJECT_LABELS);
        note(res, "timeseries %zu: symbol reference %" PRIu32 " is out of range (the request has "
                  "%zu symbols)", i, ts->bad_ref, wr->nsymbols);
        return -1;
    }
    if (ts->nsamples == 0 && ts->nhistograms == 0) {
        reject_entry(res, ts, PT_REJECT_LABELS);
        note(res, "timeseries %zu has neither samples nor histograms", i);
        return -1;
    }
    if (ts->nsamples && ts->nhistograms) {
        reject_entry(res, ts, PT_REJECT_HISTOGRAM);
        note(res, "timeseries %zu has both samples and histograms", i);
        return -1;
    }
    return 0;
}

/* One series entry of a request as written into the batch: its hash, its cells
 * [m0, m1), its pendings [p0, p1), and what it stored. */
typedef struct espan {
    uint64_t h;
    size_t m0, m1, p0, p1;
    size_t samples, hists, exemplars;
} espan;

/* Asks the store's gate about the request's series and takes the cells and pendings of
 * the refused ones out of the batch (they are counted rejected; res->limited set). */
static int gate_series(batch *b, pt_arena *a, pt_store *st, pendings *pd, const espan *sp,
                       size_t n, pt_write_result *res)
{
    if (!st->gate || n == 0)
        return 0;
    uint64_t *hs = pt_arena_alloc(a, n * sizeof(*hs));
    uint8_t *ok = pt_arena_alloc(a, n), *gok = pt_arena_alloc(a, n);
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
        pt_m.samples_rejected[PT_REJECT_LIMIT] += gone;
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

/* ---- HA pairs (docs/operations.md, "HA pairs") ----
 *
 * Decided per series, from its own cluster and replica labels: a Prometheus sends the
 * same pair in every series of a request (external labels), so this costs one decision
 * per request (remembered across the request's series), and a request that mixes pairs
 * (a relay forwarding several Prometheus servers) never has an elected replica's samples
 * dropped or another's stored, as deciding once from the first series would. */
typedef struct ha_memo {
    pt_slice cluster, replica;
    pt_ha_entry *e;
    int verdict; /* -1: nothing decided yet */
} ha_memo;

/* 1: store the series (its replica label removed from ls, *nl one less), 0: not (a
 * replica not elected: counted deduplicated; or over a limit: rejected with a note), or
 * a store error. n: the series' samples and histograms. */
static int ha_series(pt_store *st, pt_slice tenant, ha_memo *m, pt_label *ls, long *nl,
                     const pt_wseries *ts, pt_write_result *res)
{
    size_t ci, ri, n = ts->nsamples + ts->nhistograms;
    if (!pt_ha_labels(st->ha, ls, (size_t)*nl, &ci, &ri))
        return 1; /* not of an HA pair: stored as it is */
    pt_slice cluster = ls[ci].value, replica = ls[ri].value;
    if (m->verdict < 0 || !pt_slice_eq(m->cluster, cluster) || !pt_slice_eq(m->replica, replica)) {
        pt_ha_entry *e;
        char msg[PT_MSG_MAX];
        int rv = pt_ha_decide(st->ha, tenant, cluster, replica, &e, msg, sizeof(msg));
        if (rv == PT_ELABELS) {
            reject_entry(res, ts, PT_REJECT_LABELS);
            note(res, "%s", msg);
            return 0;
        }
        if (rv == PT_ETENANTLIMIT) { /* a full table: 429, the request may be retried */
            reject_entry(res, ts, PT_REJECT_LIMIT);
            if (!res->limited)
                snprintf(res->msg, sizeof(res->msg), "%s", msg);
            res->limited = 1;
            return 0;
        }
        if (rv < 0)
            return rv;
        pt_ha_release(st->ha, m->e);
        *m = (ha_memo){cluster, replica, e, rv};
    }
    pt_ha_count(m->e, m->verdict, n);
    if (m->verdict == PT_HA_DROP) {
        res->samples_deduplicated += n;
        return 0;
    }
    /* Sorted stays sorted; the labels are the request's, so nothing is allocated. */
    memmove(&ls[ri], &ls[ri + 1], ((size_t)*nl - ri - 1) * sizeof(*ls));
    (*nl)--;
    return 1;
}

/* pt_store_write, with hs the one histogram every histogram of the request is converted
 * into in turn. */
static int store_write(pt_store *st, pt_slice tenant, pt_wreq *wr, pt_arena *a,
                       pt_write_result *res, pt_histogram *hs, ha_memo *ham)
{
    memset(res, 0, sizeof(*res));
    res->series = wr->nseries;
    size_t nsamples = wr->nsamples + wr->nhistograms + wr->nexemplars; /* cells */
    int v2 = wr->version == 2;

    batch b = {0};
    pt_buf_init_arena(&b.buf, a, 0);
    pt_buf_init_arena(&b.srows, a, 0);
    pt_buf_init_arena(&b.lrows, a, 0);
    int brv = pt_buf_reserve(&b.buf, (nsamples + 16) * sizeof(pt_mutation));
    /* (series, day) pairs to index, at most two per sample; the ones this request writes
     * end up in seen. */
    pendings pd = {0};
    pd.keys = pt_arena_alloc(a, (2 * nsamples + 1) * sizeof(*pd.keys));
    pd.p = pt_arena_alloc(a, (2 * nsamples + 1) * sizeof(*pd.p));
    pt_keyset seen = {0};
    if (brv != 0 || !pd.keys || !pd.p)
        return PT_ENOMEM;
    xseen xs = {0};
    if (st->xnewest && wr->nexemplars) {
        size_t cap = 16;
        while (cap < 2 * wr->nexemplars)
            cap *= 2;
        xs.s = pt_arena_calloc(a, cap * sizeof(*xs.s));
        xs.mask = cap - 1;
        if (!xs.s)
            return PT_ENOMEM;
    }

    xbuckets xb = {NULL, 0, -1};
    if (st->xmarks && wr->nexemplars &&
        !(xb.v = pt_arena_alloc(a, wr->nexemplars * sizeof(*xb.v))))
        return PT_ENOMEM;

    pt_meta_batch mb;
    pt_meta_begin(&mb, st, a);
    for (size_t i = 0; i < wr->nmetadata; i++)
        if (metadata_entry(&mb, wr->metadata[i].family, &wr->metadata[i]) != 0)
            return PT_ENOMEM;
    if (v2 && wr->nsymbols && wr->symbols[0].n) {
        for (size_t i = 0; i < wr->nseries; i++)
            reject_entry(res, &wr->series[i], PT_REJECT_LABELS);
        note(res, "symbols[0] must be the empty string, is \"%.*s\"",
             (int)(wr->symbols[0].n > 60 ? 60 : wr->symbols[0].n),
             (const char *)wr->symbols[0].p);
        return 0;
    }

    /* With a series gate (a tenant's limit), where each series' cells and pendings went. */
    espan *spans = NULL;
    size_t nspans = 0;
    if (st->gate && !(spans = pt_arena_alloc(a, (wr->nseries + 1) * sizeof(*spans))))
        return PT_ENOMEM;

    for (size_t i = 0; i < wr->nseries; i++) {
        pt_wseries *ts = &wr->series[i];
        if (v2 && check_v2_entry(wr, i, res))
            continue;
        size_t npoints = ts->nsamples + ts->nhistograms;
        if (npoints + ts->nexemplars == 0 && !ts->has_meta)
            continue;
        pt_label *ls = ts->labels;
        char lmsg[PT_MSG_MAX];
        int plain;
        long nl = pt_labels_validate(ls, ts->nlabels, &st->label_limits, &plain, lmsg,
                                     sizeof(lmsg));
        if (nl < 0) {
            res->entries_rejected++;
            res->samples_rejected += npoints + ts->nexemplars;
            pt_m.samples_rejected[PT_REJECT_LABELS] += npoints + ts->nexemplars;
            note(res, "%s", lmsg);
            continue;
        }
        if (st->ha) {
            int keep = ha_series(st, tenant, ham, ls, &nl, ts, res);
            if (keep < 0)
                return keep; /* nothing is stored: the whole request is retried */
            if (!keep)
                continue;
        }
        if (ts->has_meta) {
            pt_slice family = {0};
            for (long j = 0; j < nl; j++)
                if (is_name_label(&ls[j]))
                    family = ls[j].value;
            if (metadata_entry(&mb, family, &ts->meta) != 0)
                return PT_ENOMEM;
        }
        if (npoints + ts->nexemplars == 0)
            continue;
        pt_slice sid;
        int rv = pt_series_id_checked(a, ls, (size_t)nl, !plain, &sid);
        if (rv != 0)
            return rv;
        sput sp = {&b, a, st, &pd, res, ls, (size_t)nl, sid, NULL, -1, -1, v2,
                   xs.s ? &xs : NULL, 0, xb.v ? &xb : NULL};
        espan *sp_span = spans ? &spans[nspans++] : NULL;
        if (sp_span)
            *sp_span = (espan){pt_series_ref(sid, 0), b.n, 0, pd.n, 0, res->samples_written,
                               res->histograms_written, res->exemplars_written};
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
        for (size_t j = 0; j < ts->nhistograms; j++) {
            const pt_whist *w = &ts->histograms[j];
            if (!time_ok(&sp, w->timestamp))
                continue;
            char why[200];
            rv = pt_histpb_from_wire(w, hs, why, sizeof(why));
            if (rv == PT_ENOMEM)
                return rv;
            if (rv != 0) {
                res->samples_rejected++;
                pt_m.samples_rejected[PT_REJECT_HISTOGRAM]++;
                note(res, "invalid native histogram at %" PRId64 " for series %.*s: %s",
                     w->timestamp, (int)(sid.n > 200 ? 200 : sid.n), (const char *)sid.p, why);
                continue;
            }
            size_t vlen = pt_histogram_cell_size(hs);
            uint8_t *cell = pt_arena_alloc(a, PT_QUAL_LEN + vlen);
            if (!cell)
                return PT_ENOMEM;
            pt_histogram_cell_encode(hs, cell + PT_QUAL_LEN);
            if ((rv = put_point(&sp, w->timestamp, cell, vlen)) != 0)
                return rv;
            res->histograms_written++;
        }
        /* 1.0 senders send exemplars in entries of their own, without samples. */
        for (size_t j = 0; j < ts->nexemplars; j++)
            if ((rv = put_exemplar(&sp, &ts->exemplars[j], i)) != 0)
                return rv;
        if (sp_span) {
            sp_span->m1 = b.n;
            sp_span->p1 = pd.n;
            sp_span->samples = res->samples_written - sp_span->samples;
            sp_span->hists = res->histograms_written - sp_span->hists;
            sp_span->exemplars = res->exemplars_written - sp_span->exemplars;
        }
    }
    int rv = gate_series(&b, a, st, &pd, spans, nspans, res);
    if (rv == 0)
        rv = index_pending(&b, a, st, &pd, &seen, res);
    /* Marks of a refused series' buckets stay: a mark too many only costs reads time. */
    for (size_t i = 0; i < xb.n && rv == 0; i++)
        rv = push_exemplar_mark(&b, a, xb.v[i]);
    if (rv != 0)
        return rv;

    if (b.n > 0) {
        /* Unsorted: backends that want key order (Bigtable groups cells by row) sort. */
        uint64_t t0 = pt_now_ns();
        rv = pt_backend_write(st->be, (const pt_mutation *)(const void *)b.buf.p, b.n);
        pt_metrics_observe(&pt_m.backend_write_duration, pt_now_ns() - t0);
        /* Also after a failure (invalidate). */
        invalidate(st->refs, &b.srows);
        invalidate(st->lists, &b.lrows);
        if (rv != 0) {
            pt_m.backend_write_errors++;
            res->samples_written = res->histograms_written = res->exemplars_written = 0;
            return rv;
        }
    }
    /* Only now are the index rows durable: remember them. */
    if (seen.n) {
        pt_index_key *keys = pt_arena_alloc(a, seen.n * sizeof(*keys));
        if (!keys)
            return PT_ENOMEM;
        size_t k = 0;
        for (size_t i = 0; i <= seen.mask; i++)
            if (seen.slots[i].lo || seen.slots[i].hi)
                keys[k++] = seen.slots[i];
        pt_index_cache_add(st->cache, keys, k);
    }
    for (size_t i = 0; i < xb.n; i++)
        pt_exemplar_marks_add(st->xmarks, st->salt, xb.v[i]);
    /* The exemplars are stored: from now on older ones of their series are out of order. */
    for (size_t i = 0; xs.s && i <= xs.mask; i++)
        if (xs.s[i].h)
            pt_exemplar_newest_put(st->xnewest, xs.s[i].h, xs.s[i].ts);
    /* The metadata queued above, kept per metric family (meta.c). */
    if ((rv = pt_meta_commit(&mb)) != 0) {
        pt_m.backend_write_errors++;
        res->samples_written = res->histograms_written = res->exemplars_written = 0;
        return rv;
    }
    pt_m.samples_received += res->samples_written + res->histograms_written;
    pt_m.exemplars_received += res->exemplars_written;
    pt_m.series_received += res->series;
    pt_m.index_rows_written += res->index_rows;
    return 0;
}

int pt_store_write_tenant(pt_store *st, pt_slice tenant, pt_wreq *wr, pt_arena *a,
                          pt_write_result *res)
{
    pt_histogram hs = PT_HISTOGRAM_INIT;
    ha_memo ham = {.verdict = -1};
    int rv = store_write(st, tenant, wr, a, res, &hs, &ham);
    if (ham.e)
        pt_ha_release(st->ha, ham.e);
    pt_histogram_free(&hs);
    return rv;
}

int pt_store_write(pt_store *st, pt_wreq *wr, pt_arena *a, pt_write_result *res)
{
    return pt_store_write_tenant(st, (pt_slice){(const uint8_t *)"", 0}, wr, a, res);
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
    pt_row_range marker = {{fr, fl}, {fr, fl + 1}}; /* the row, then its 0x00 */
    pt_row_range all = {{(const uint8_t *)"", 0}, {0}};
    found_row f = {0};
    pt_scan s = {PT_TABLE_INDEX, &marker, 1, {0}, {0}, 1, NULL, NULL};
    int rv = pt_backend_scan(st->be, &s, note_row, &f);
    if (rv == 0 && f.n == 0) {
        s.ranges = &all; /* no marker: an empty table is a new store */
        rv = pt_backend_scan(st->be, &s, note_row, &f);
        if (rv == 0 && f.n == 0) {
            /* A new store: the exemplar marks start with it. */
            pt_mutation m[2] = {
                {PT_TABLE_INDEX, {fr, fl}, {index_qual, sizeof(index_qual)},
                 {(const uint8_t *)format_now, 1}, never},
                {PT_TABLE_INDEX, {mark_row, sizeof(mark_row) - 1},
                 {(const uint8_t *)PT_EXEMPLAR_MARK_SINCE, sizeof(PT_EXEMPLAR_MARK_SINCE) - 1},
                 {(const uint8_t *)"1", 1}, never}};
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
    } else if (rv == 0) {
        /* A store created before its format row got the timestamp that never expires:
         * stamped again, before a max-age GC rule takes it. Not needed to start (a
         * promtable with read-only credentials still does). */
        pt_mutation m = {PT_TABLE_INDEX, {fr, fl}, {index_qual, sizeof(index_qual)},
                         {(const uint8_t *)format_now, 1}, never};
        int wrv = pt_backend_write(st->be, &m, 1);
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

