/* Selecting series: a query's matchers to the series they accept, through the index. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "bytes.h"
#include "read_int.h"

static int slice_eq(const void *items, size_t i, const void *key)
{
    return pt_slice_eq(((const pt_slice *)items)[i], *(const pt_slice *)key);
}

/* Scans the index rows in [first, last): one range covers every day of the query because
 * the day is fixed-width inside the key. */
static int scan_days(qctx *q, pt_slice first, pt_slice last, pt_cell_fn fn, void *ud)
{
    int rv = deadline_passed(q);
    if (rv)
        return rv;
    pt_row_range r = {first, last};
    size_t visited = 0;
    pt_scan s = {.table = PT_TABLE_INDEX,
                 .ranges = &r,
                 .nranges = 1,
                 .visited = &visited,
                 .cold = &q->cold};
    rv = pt_backend_scan(q->st->be, &s, fn, ud);
    q->st->stats->read_rows_scanned += visited;
    q->rows += visited;
    return rv;
}

/* A set of label values (unescaped), in insertion order, with a hash index: a label can
 * have hundreds of thousands of values over the days of a query. */
typedef struct valset {
    pt_arena *a;
    pt_slice *v;
    hindex x;
    size_t max; /* values at most (0 = no limit): a new one past it is PT_ELIMIT */
} valset;

/* Adds val unless present: 1 added, 0 present, PT_ELIMIT (past max), PT_ENOMEM. */
static int valset_add(valset *s, pt_slice val)
{
    uint64_t h = XXH3_64bits(val.p, val.n);
    void *items = s->v;
    int rv = pt_hindex_claim(&s->x, s->a, &items, sizeof(*s->v), h, slice_eq, &val, s->max, NULL);
    s->v = items;
    if (rv <= 0)
        return rv;
    s->v[s->x.n] = val;
    pt_hindex_add(&s->x, h);
    return 1;
}

typedef struct rowcb {
    qctx *q;
    size_t prefix_len;
    pt_matcher *filter; /* values rows: keep values this matcher accepts */
    valset vals;        /* collected values */
} rowcb;

/* Keeps a list cell's series unless its label mask proves the series lacks one of the
 * query's name=value pairs: by its sid when the cell holds it (the list's bucket is day),
 * else by its reference (its series rows tell its days). */
static int take_cell(qctx *q, uint64_t ref, uint64_t mask, pt_slice sid, int64_t day)
{
    if ((q->qmask & ~mask) != 0)
        return 0;
    return sid.n ? pt_cands_add_sid(q, sid, day) : pt_cands_add_ref(q, ref);
}

/* The bucket of a list row (its prefix ends ",@" day ",", the reference follows), -1 when
 * it has none there. */
static int64_t list_row_day(pt_slice row)
{
    size_t tail = PT_REF_HEX + 1 + PT_BASE_DIGITS + 2;
    if (row.n < tail || row.p[row.n - tail] != ',' || row.p[row.n - tail + 1] != '@')
        return -1;
    return pt_key_digits(row.p + row.n - tail + 2);
}

/* A list cell's reference, mask (all ones when the cell has none) and the sid that
 * follows the mask in a metric's list cell (empty when there is none). */
static int list_cell(const rowcb *r, pt_slice row, pt_slice qual, uint64_t *ref, uint64_t *mask,
                     pt_slice *sid)
{
    if (row.n < r->prefix_len + PT_REF_HEX || pt_ref_parse(row.p + row.n - PT_REF_HEX, ref))
        return PT_EINTERNAL;
    *mask = qual.n >= 8 ? pt_get_be64(qual.p) : ~(uint64_t)0;
    *sid = qual.n > 8 ? (pt_slice){qual.p + 8, qual.n - 8} : (pt_slice){qual.p, 0};
    return 0;
}

/* A cell of a metric's list or of a posting list (the qualifier is the label mask: one
 * cell per distinct mask of the series sharing the reference). */
static int on_list_row(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)value;
    rowcb *r = ud;
    uint64_t ref, mask;
    pt_slice sid;
    int rv = list_cell(r, row, qual, &ref, &mask, &sid);
    if (rv == 0)
        rv = past_deadline(r->q);
    return rv ? rv : take_cell(r->q, ref, mask, sid, list_row_day(row));
}

/* Whether matcher m accepts v: 1 or 0, or an error: m's limits (q->costly = m), the
 * deadline, which every DEADLINE_EVERY_REGEX regex evaluations are followed by a look at. */
static int accepts(qctx *q, pt_matcher *m, pt_slice v)
{
    int rv = pt_matcher_match(m, v);
    if (rv < 0) {
        if (rv == PT_EREGEXLIMIT)
            q->costly = m;
        return rv;
    }
    if (m->re && ++q->evals % DEADLINE_EVERY_REGEX == 0) {
        int late = deadline_passed(q);
        if (late)
            return late;
    }
    return rv;
}

static int on_value_row(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)qual;
    rowcb *r = ud;
    int rv = past_deadline(r->q);
    if (rv)
        return rv;
    pt_slice val;
    rv = pt_index_part_text(r->q->a, (pt_slice){row.p + r->prefix_len, row.n - r->prefix_len},
                            value, &val);
    if (rv)
        return rv;
    if (r->filter && (rv = accepts(r->q, r->filter, val)) <= 0)
        return rv;
    rv = valset_add(&r->vals, val); /* the same value comes once per day */
    return rv < 0 ? rv : 0;
}

/* The values rows of label name over the query's days: keys [b0, b1). */
static int values_range(qctx *q, pt_slice name, uint8_t **b0, uint8_t **b1, size_t *n0, size_t *n1)
{
    size_t cap = PT_INDEX_PREFIX_MAX(name.n, 0);
    *b0 = pt_arena_alloc(q->a, cap);
    *b1 = pt_arena_alloc(q->a, cap);
    if (!*b0 || !*b1)
        return PT_ENOMEM;
    *n0 = (size_t)(pt_index_values_prefix(*b0, name, q->day_first) - *b0);
    *n1 = (size_t)(pt_index_values_prefix(*b1, name, q->day_last + q->st->index_bucket_ms) - *b1);
    return 0;
}

static void rowcb_init(rowcb *r, qctx *q, pt_matcher *filter, size_t prefix_len)
{
    memset(r, 0, sizeof(*r));
    r->q = q;
    r->filter = filter;
    r->prefix_len = prefix_len;
    r->vals.a = q->a;
}

static int list_values(qctx *q, pt_slice name, pt_matcher *filter, size_t max, rowcb *r)
{
    uint8_t *b0, *b1;
    size_t n0, n1;
    int rv = values_range(q, name, &b0, &b1, &n0, &n1);
    if (rv)
        return rv;
    rowcb_init(r, q, filter, n0);
    r->vals.max = max;
    return scan_days(q, (pt_slice){b0, n0}, (pt_slice){b1, n1}, on_value_row, r);
}

int pt_select_values(qctx *q, pt_slice name, size_t max, pt_slice **out, size_t *n)
{
    rowcb r = {0};
    int rv = list_values(q, name, NULL, max, &r);
    *out = r.vals.v;
    *n = r.vals.x.n;
    return rv;
}

int pt_index_part_text(pt_arena *a, pt_slice esc, pt_slice cell, pt_slice *out)
{
    /* A long part: the key holds its digest, the cell the text. */
    int digest = pt_index_is_digest(esc);
    pt_slice from = digest ? cell : esc;
    uint8_t *v = pt_arena_alloc(a, from.n ? from.n : 1);
    if (!v)
        return PT_ENOMEM;
    long n = (long)from.n;
    if (digest)
        memcpy(v, from.p, from.n);
    else if ((n = pt_unescape(v, esc)) < 0)
        return PT_EINTERNAL;
    *out = (pt_slice){v, (size_t)n};
    return 0;
}

/* ---- label names: the values rows "=" name ",@" day "," value ---- */

typedef struct firstrow {
    pt_buf key;
    int found;
} firstrow;

static int on_first(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)qual, (void)value;
    firstrow *f = ud;
    f->found = 1;
    pt_buf_reset(&f->key);
    int rv = pt_buf_append(&f->key, row.p, row.n);
    return rv ? rv : 1;
}

/* The first index row in [from, to): 1 with f->key set, 0 when none, or an error. */
static int first_row(qctx *q, pt_slice from, pt_slice to, firstrow *f)
{
    int rv = deadline_passed(q);
    if (rv)
        return rv;
    pt_row_range r = {from, to};
    size_t visited = 0;
    pt_scan s = {
        .table = PT_TABLE_INDEX, .ranges = &r, .nranges = 1, .row_limit = 1, .visited = &visited};
    f->found = 0;
    rv = pt_backend_scan(q->st->be, &s, on_first, f);
    q->st->stats->read_rows_scanned += visited;
    return rv ? rv : f->found;
}

int pt_select_names(qctx *q, size_t max, pt_slice **out, size_t *n, int *capped)
{
    pt_arena *a = q->a;
    firstrow f;
    pt_buf from;
    pt_buf_init_arena(&f.key, a, 0);
    pt_buf_init_arena(&from, a, 0);
    size_t cap = 64, k = 0;
    pt_slice *v = pt_arena_alloc(a, cap * sizeof(*v));
    int rv = v ? pt_buf_append(&from, "=", 1) : PT_ENOMEM;
    static const uint8_t end_all[] = {'>'}; /* after every "=" row */
    *capped = 0;
    while (rv == 0) {
        rv = first_row(q, (pt_slice){from.p, from.len}, (pt_slice){end_all, 1}, &f);
        if (rv <= 0)
            break;
        rv = 0;
        const uint8_t *p = f.key.p;
        size_t len = f.key.len, e = 1;
        if (len >= 2 && p[1] == '=') { /* series rows and markers: skip past them all */
            pt_buf_reset(&from);
            rv = pt_buf_append(&from, "=>", 2);
            continue;
        }
        while (e < len && p[e] != ',')
            e += p[e] == '\\' ? 2 : 1;
        if (e + 2 + PT_BASE_DIGITS > len || p[e + 1] != '@') {
            rv = PT_EINTERNAL;
            break;
        }
        pt_slice esc = {p + 1, e - 1};
        int64_t day = 0;
        for (size_t i = 0; i < PT_BASE_DIGITS; i++)
            day = day * 10 + (p[e + 2 + i] - '0');
        int in = day >= q->day_first && day <= q->day_last;
        if (!in && day < q->day_first) {
            /* "=" esc ",@" day13: the name's values rows in the window */
            size_t kl = 1 + PT_ROW_KEY_LEN(esc.n);
            uint8_t *b0 = pt_arena_alloc(a, 2 * kl);
            if (!b0) {
                rv = PT_ENOMEM;
                break;
            }
            uint8_t *b1 = b0 + kl;
            b0[0] = b1[0] = '=';
            pt_row_key(b0 + 1, esc, q->day_first);
            pt_row_key(b1 + 1, esc, q->day_last + q->st->index_bucket_ms);
            size_t n0 = kl, n1 = kl;
            firstrow g;
            pt_buf_init_arena(&g.key, a, 0);
            rv = first_row(q, (pt_slice){b0, n0}, (pt_slice){b1, n1}, &g);
            if (rv < 0)
                break;
            in = rv;
            rv = 0;
        }
        if (in && !pt_index_is_digest(esc)) { /* a digested name cannot be read back */
            uint8_t *name = pt_arena_alloc(a, esc.n ? esc.n : 1);
            long nl = name ? pt_unescape(name, esc) : PT_ENOMEM;
            if (nl < 0) {
                rv = nl == PT_ENOMEM ? PT_ENOMEM : PT_EINTERNAL;
                break;
            }
            if (k == max) {
                *capped = 1;
                break;
            }
            if (k == cap) {
                pt_slice *g = pt_arena_alloc(a, 2 * cap * sizeof(*g));
                if (!g) {
                    rv = PT_ENOMEM;
                    break;
                }
                memcpy(g, v, k * sizeof(*v));
                v = g, cap *= 2;
            }
            v[k++] = (pt_slice){name, (size_t)nl};
        }
        /* The next name: every key of this one starts "=" esc ",@" < "=" esc ",A". */
        pt_buf_reset(&from);
        rv = pt_buf_append(&from, p, e + 1);
        rv = rv ? rv : pt_buf_append(&from, "A", 1);
    }
    *out = v;
    *n = k;
    return rv;
}

static int is_metric_name(pt_slice s)
{
    return pt_slice_eq(s, PT_SLICE_LIT("__name__"));
}

/* The index rows of the metric (name == NULL) or of the posting name=value over the
 * query's days: keys [b0, b1); a row's ref follows the first n0 bytes. */
typedef struct irange {
    uint8_t *b0, *b1;
    size_t n0, n1;
    const pt_slice *name; /* NULL: the metric's list */
    pt_slice value;
} irange;

/* The key prefix of the metric's list (name == NULL) or of the posting name=value in the
 * bucket day; returns its end. */
static uint8_t *list_prefix(uint8_t *dst, const pt_slice *name, pt_slice value, int64_t day)
{
    return name ? pt_index_posting_prefix(dst, *name, value, day)
                : pt_index_metric_prefix(dst, value, day);
}

static int index_range(qctx *q, const pt_slice *name, pt_slice value, irange *r)
{
    size_t cap = PT_INDEX_PREFIX_MAX(name ? name->n : 0, value.n);
    r->b0 = pt_arena_alloc(q->a, cap);
    r->b1 = pt_arena_alloc(q->a, cap);
    if (!r->b0 || !r->b1)
        return PT_ENOMEM;
    int64_t after = q->day_last + q->st->index_bucket_ms;
    uint8_t *e0 = list_prefix(r->b0, name, value, q->day_first);
    uint8_t *e1 = list_prefix(r->b1, name, value, after);
    r->n0 = (size_t)(e0 - r->b0);
    r->n1 = (size_t)(e1 - r->b1);
    r->name = name;
    r->value = value;
    return 0;
}

/* A list of one bucket read into a list-cache entry (index.h): u32 BE prefix length, the
 * prefix, then per cell its reference and mask (16 bytes, host order), the length of its
 * sid (u32 BE) and the sid. A metric's list keeps the sids its cells name, so a hit
 * resolves its series as the scan does, without a series row each; a posting list's
 * cells have none and resolve through the series rows (and their cache). */
typedef struct lfill {
    rowcb r;
    pt_buf entry;
    size_t max; /* past this many bytes the list is not kept (0: out of memory, not kept) */
} lfill;

enum { LREC_FIXED = 16 + 4 };

static int on_list_row_fill(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    lfill *f = ud;
    int rv = on_list_row(&f->r, row, qual, value);
    if (rv || f->entry.len > f->max)
        return rv;
    uint8_t rec[LREC_FIXED];
    uint64_t ref, mask;
    pt_slice sid;
    if ((rv = list_cell(&f->r, row, qual, &ref, &mask, &sid)) != 0)
        return rv;
    memcpy(rec, &ref, 8);
    memcpy(rec + 8, &mask, 8);
    pt_put_be32(rec + 16, (uint32_t)sid.n);
    if (pt_buf_append(&f->entry, rec, sizeof(rec)) != 0 ||
        pt_buf_append(&f->entry, sid.p, sid.n) != 0)
        f->max = 0; /* a cache: the read goes on without keeping the list */
    return 0;
}

/* The list's cells of bucket day from the cache: 1 when it held them, 0 when not. */
static int list_from_cache(qctx *q, pt_buf *entry, pt_slice prefix, int64_t day)
{
    if (entry->len < 4 || pt_get_be32(entry->p) != prefix.n || entry->len < 4 + prefix.n ||
        memcmp(entry->p + 4, prefix.p, prefix.n) != 0)
        return 0; /* another list's entry under the same key */
    const uint8_t *p = entry->p + 4 + prefix.n, *end = entry->p + entry->len;
    size_t n = 0;
    int rv = 0;
    while (p < end && rv == 0) {
        uint64_t ref, mask;
        if ((size_t)(end - p) < LREC_FIXED ||
            pt_get_be32(p + 16) > (size_t)(end - p) - LREC_FIXED)
            return 0; /* not an entry on_list_row_fill wrote: the scan that follows takes
                         the whole list (candidates are kept once) */
        memcpy(&ref, p, 8);
        memcpy(&mask, p + 8, 8);
        pt_slice sid = {p + LREC_FIXED, pt_get_be32(p + 16)};
        p += LREC_FIXED + sid.n;
        n++;
        if ((rv = past_deadline(q)) == 0)
            rv = take_cell(q, ref, mask, sid, day);
    }
    q->rows_cached += n;
    return rv ? rv : 1;
}

/* Whether the query's lists go through the list cache: a store it is kept for, and a
 * query of few buckets (for longer ones an entry per list and bucket would cost more to
 * look up and keep than the scan it saves). */
static int lists_cached(const qctx *q)
{
    enum { CACHED_BUCKETS_MAX = 8 };
    return q->st->lists &&
           (q->day_last - q->day_first) / q->st->index_bucket_ms < CACHED_BUCKETS_MAX;
}

/* Collects the references of one list over the query's days: with the list cache (short
 * queries, a store it is kept for), one bucket at a time, else in one scan. */
static int scan_list(qctx *q, const irange *ir)
{
    pt_ref_cache *c = q->st->lists;
    int64_t step = q->st->index_bucket_ms;
    if (!lists_cached(q)) {
        rowcb r = {.q = q, .prefix_len = ir->n0};
        return scan_days(q, (pt_slice){ir->b0, ir->n0}, (pt_slice){ir->b1, ir->n1}, on_list_row,
                         &r);
    }
    size_t cap = PT_INDEX_PREFIX_MAX(ir->name ? ir->name->n : 0, ir->value.n);
    uint8_t *p0 = pt_arena_alloc(q->a, cap), *p1 = pt_arena_alloc(q->a, cap);
    if (!p0 || !p1)
        return PT_ENOMEM;
    lfill f = {.r = {.q = q, .prefix_len = ir->n0}};
    pt_buf_init(&f.entry, 0);
    int rv = 0;
    for (int64_t d = q->day_first; d <= q->day_last && rv == 0; d += step) {
        uint8_t *e0 = list_prefix(p0, ir->name, ir->value, d);
        uint8_t *e1 = list_prefix(p1, ir->name, ir->value, d + step);
        pt_slice prefix = {p0, (size_t)(e0 - p0)};
        uint64_t key = pt_list_cache_key(p0, prefix.n, q->st->salt);
        pt_buf_reset(&f.entry);
        if ((rv = pt_ref_cache_get(c, key, d, &f.entry)) < 0)
            break;
        if (rv == 1 && (rv = list_from_cache(q, &f.entry, prefix, d)) != 0) {
            rv = rv < 0 ? rv : 0;
            continue;
        }
        uint32_t epoch = pt_ref_cache_epoch(c, key, d);
        uint8_t len[4];
        pt_put_be32(len, (uint32_t)prefix.n);
        pt_buf_reset(&f.entry);
        int room = pt_buf_append(&f.entry, len, 4) == 0 &&
                   pt_buf_append(&f.entry, prefix.p, prefix.n) == 0;
        f.max = room ? pt_ref_cache_max_entry(c) : 0;
        rv = scan_days(q, prefix, (pt_slice){p1, (size_t)(e1 - p1)}, on_list_row_fill, &f);
        if (rv == 0 && f.max && f.entry.len <= f.max)
            pt_ref_cache_put(c, key, d, epoch, f.entry.p, f.entry.len);
    }
    pt_buf_free(&f.entry);
    return rv;
}

static int irange_cmp(const void *x, const void *y)
{
    const irange *a = x, *b = y;
    return pt_slice_cmp((pt_slice){a->b0, a->n0}, (pt_slice){b->b0, b->n0});
}

/* Collects the references of lists[0..n) (sorted here). Without the list cache, a batch
 * of lists is one scan of many ranges, not one scan each: on a remote store every scan
 * is a call. */
static int scan_lists(qctx *q, irange *lists, size_t n)
{
    enum { PER_SCAN = 4096 };
    int rv = 0;
    if (lists_cached(q)) {
        for (size_t i = 0; i < n && rv == 0; i++)
            rv = scan_list(q, &lists[i]);
        return rv;
    }
    if (n == 0)
        return 0;
    qsort(lists, n, sizeof(*lists), irange_cmp);
    size_t per = n < PER_SCAN ? n : PER_SCAN;
    pt_row_range *r = pt_arena_alloc(q->a, per * sizeof(*r));
    if (!r)
        return PT_ENOMEM;
    for (size_t i = 0; i < n && rv == 0; i += per) {
        size_t m = n - i < per ? n - i : per, shortest = SIZE_MAX;
        for (size_t j = 0; j < m; j++) {
            const irange *ir = &lists[i + j];
            r[j] = (pt_row_range){{ir->b0, ir->n0}, {ir->b1, ir->n1}};
            if (ir->n0 < shortest)
                shortest = ir->n0;
        }
        if ((rv = deadline_passed(q)) != 0)
            break;
        rowcb cb = {.q = q, .prefix_len = shortest};
        size_t visited = 0;
        pt_scan s = {.table = PT_TABLE_INDEX,
                     .ranges = r,
                     .nranges = m,
                     .visited = &visited,
                     .cold = &q->cold};
        rv = pt_backend_scan(q->st->be, &s, on_list_row, &cb);
        q->st->stats->read_rows_scanned += visited;
        q->rows += visited;
    }
    return rv;
}

/* A way to list candidates: the index lists of one selective matcher (one list for an
 * `=`; for a regex or `!=`, first its label's values rows, then the lists of the values it
 * accepts), counted a slice at a time. */
typedef struct source {
    pt_matcher *m;
    int listing; /* still reading the label's values rows */
    rowcb vals;  /* while listing: the values accepted so far */
    irange vr;   /* the values rows */
    irange *lists;
    size_t nlists, cur; /* the list being counted */
    pt_buf next;        /* where the next slice starts: just after the last row seen */
    size_t rows;        /* rows seen so far, values rows included */
    size_t vrows;       /* of which values rows */
    int complete;       /* no rows are left */
    uint64_t hkey;      /* its key in the list hints */
    size_t hint;        /* the hint's rows, a lower bound unless hint_complete */
    int hint_complete;
} source;

/* Notes row as the last one seen. */
static int count_row(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)qual, (void)value;
    source *c = ud;
    c->rows++;
    /* The smallest key after row is row ‖ 0x00 (row keys hold no 0x00). */
    pt_buf_reset(&c->next);
    if (pt_buf_append(&c->next, row.p, row.n) != 0 || pt_buf_append(&c->next, "", 1) != 0)
        return PT_ENOMEM;
    return 0;
}

static int count_value_row(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    source *c = ud;
    int rv = count_row(c, row, qual, value);
    c->vrows++;
    return rv ? rv : on_value_row(&c->vals, row, qual, value);
}

static int source_seek(source *c)
{
    pt_buf_reset(&c->next);
    if (c->cur == c->nlists) {
        c->complete = 1;
        return 0;
    }
    return pt_buf_append(&c->next, c->lists[c->cur].b0, c->lists[c->cur].n0);
}

/* The values are all known: their lists follow. */
static int source_lists(qctx *q, source *c)
{
    const pt_slice *label = is_metric_name(c->m->name) ? NULL : &c->m->name;
    c->listing = 0;
    c->nlists = c->vals.vals.x.n;
    c->lists = pt_arena_alloc(q->a, (c->nlists ? c->nlists : 1) * sizeof(*c->lists));
    if (!c->lists)
        return PT_ENOMEM;
    for (size_t i = 0; i < c->nlists; i++) {
        int rv = index_range(q, label, c->vals.vals.v[i], &c->lists[i]);
        if (rv)
            return rv;
    }
    c->cur = 0;
    return source_seek(c);
}

/* Reads up to budget more rows of c; with listing_only, no further than its values rows. */
static int count_more(qctx *q, source *c, size_t budget, int listing_only)
{
    while (!c->complete && budget) {
        int rv = deadline_passed(q);
        if (rv)
            return rv;
        const irange *ir = c->listing ? &c->vr : &c->lists[c->cur];
        pt_row_range r = {{c->next.p, c->next.len}, {ir->b1, ir->n1}};
        size_t before = c->rows, visited = 0;
        pt_scan s = {.table = PT_TABLE_INDEX,
                     .ranges = &r,
                     .nranges = 1,
                     .row_limit = budget,
                     .visited = &visited};
        rv = pt_backend_scan(q->st->be, &s, c->listing ? count_value_row : count_row, c);
        q->st->stats->read_rows_scanned += visited;
        q->rows += visited;
        if (rv)
            return rv;
        size_t got = c->rows - before;
        if (got == budget)
            break;
        budget -= got;
        if (c->listing) {
            if ((rv = source_lists(q, c)) == 0 && listing_only)
                break;
        } else
            c->cur++, rv = source_seek(c);
        if (rv)
            return rv;
    }
    return 0;
}

/* A source's key in the list hints: the matcher and the query's days. */
static uint64_t source_key(const qctx *q, const pt_matcher *m)
{
    uint64_t seed = XXH3_64bits_withSeed(&q->day_first, sizeof(q->day_first),
                                         (uint64_t)q->day_last * 8 + (uint64_t)m->type);
    seed = XXH3_64bits_withSeed(m->name.p, m->name.n, seed);
    return XXH3_64bits_withSeed(m->value.p, m->value.n, seed) ^ q->st->salt;
}

static int source_init(qctx *q, pt_matcher *m, source *c)
{
    c->m = m;
    c->hkey = source_key(q, m);
    pt_buf_init_arena(&c->next, q->a, 0);
    if (m->type == PT_MATCH_EQ) {
        const pt_slice *label = is_metric_name(m->name) ? NULL : &m->name;
        c->nlists = 1;
        c->lists = pt_arena_alloc(q->a, sizeof(*c->lists));
        if (!c->lists)
            return PT_ENOMEM;
        int rv = index_range(q, label, m->value, c->lists);
        return rv ? rv : source_seek(c);
    }
    c->listing = 1;
    int rv = values_range(q, m->name, &c->vr.b0, &c->vr.b1, &c->vr.n0, &c->vr.n1);
    if (rv)
        return rv;
    rowcb_init(&c->vals, q, m, c->vr.n0);
    return pt_buf_append(&c->next, c->vr.b0, c->vr.n0);
}

/* Reads what remains of c's values, so that its lists are known. */
static int source_finish_listing(qctx *q, source *c)
{
    while (c->listing) {
        int rv = count_more(q, c, 4096, 1);
        if (rv)
            return rv;
    }
    return 0;
}

/*
 * Which source lists the fewest index rows: every source is read in lock-step slices
 * that double in size until one ends, so this costs about (sources × the shortest) rows,
 * never the longest (a metric name can have a hundred thousand series where an instance
 * label has a hundred). Sets *best to its index.
 */
static int shortest(qctx *q, source *c, size_t n, size_t *best)
{
    int rv = 0;
    for (size_t budget = 64; rv == 0; budget *= 2) {
        size_t found = n;
        for (size_t i = 0; i < n && rv == 0; i++) {
            rv = count_more(q, &c[i], budget, 0);
            if (rv == 0 && c[i].complete && (found == n || c[i].rows < c[found].rows))
                found = i;
        }
        if (rv == 0 && found < n) {
            *best = found;
            break;
        }
    }
    return rv;
}

/* The shortest source by the hints alone: every source has a hint, the shortest of them
 * is exact, and no lower bound is below it. 1 with *best set, else 0 (count them). */
static int hinted_shortest(qctx *q, source *c, size_t n, size_t *best)
{
    pt_list_hints *h = q->st->hints;
    size_t found = n;
    if (!h)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (!pt_list_hints_get(h, c[i].hkey, &c[i].hint, &c[i].hint_complete))
            return 0;
        if (c[i].hint_complete && (found == n || c[i].hint < c[found].hint))
            found = i;
    }
    if (found == n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (c[i].hint < c[found].hint)
            return 0;
    *best = found;
    return 1;
}

/* What counting learnt about every source. */
static void note_counts(qctx *q, const source *c, size_t n)
{
    if (q->st->hints)
        for (size_t i = 0; i < n; i++)
            pt_list_hints_put(q->st->hints, c[i].hkey, c[i].rows, c[i].complete);
}

/* The label mask of the query's equality matchers that need a label (pt_label_mask_add):
 * a list row whose mask lacks a bit of it is not a candidate. */
static uint64_t query_mask(const qctx *q)
{
    uint64_t m = 0;
    for (size_t i = 0; i < q->nms; i++)
        if (q->ms[i].type == PT_MATCH_EQ && !q->ms[i].matches_empty)
            m = pt_label_mask_add(m, q->ms[i].name, q->ms[i].value);
    return m;
}

/* Picks the cheapest way to list candidates (from the list hints when use_hints and they
 * suffice: *hinted then set), collects their references, then resolves them to series;
 * every candidate is then checked against all matchers. */
static int resolve(qctx *q, int use_hints, int *hinted)
{
    source *src = pt_arena_calloc(q->a, (q->nms ? q->nms : 1) * sizeof(*src));
    size_t n = 0;
    int rv;
    *hinted = 0;
    if (!src)
        return PT_ENOMEM;
    q->qmask = query_mask(q);
    for (size_t i = 0; i < q->nms; i++)
        if (!q->ms[i].matches_empty && (rv = source_init(q, &q->ms[i], &src[n++])) != 0)
            return rv;
    if (n == 0) {
        /* Nothing selective at all: every metric. */
        rowcb r;
        if ((rv = list_values(q, PT_SLICE_LIT("__name__"), NULL, 0, &r)) != 0)
            return rv;
        size_t nl = r.vals.x.n;
        irange *lists = pt_arena_alloc(q->a, (nl ? nl : 1) * sizeof(*lists));
        if (!lists)
            return PT_ENOMEM;
        for (size_t i = 0; i < nl; i++)
            if ((rv = index_range(q, NULL, r.vals.v[i], &lists[i])) != 0)
                return rv;
        rv = scan_lists(q, lists, nl);
        return rv ? rv : pt_cands_resolve(q);
    }
    size_t best = 0;
    if (n > 1 && !(use_hints && (*hinted = hinted_shortest(q, src, n, &best)))) {
        if ((rv = shortest(q, src, n, &best)) != 0)
            return rv;
        note_counts(q, src, n);
    }
    source *c = &src[best];
    rv = source_finish_listing(q, c);
    size_t before = q->rows + q->rows_cached;
    if (rv == 0)
        rv = scan_lists(q, c->lists, c->nlists);
    /* Its size, or at least what was read of it before an error (limit, deadline): a
     * stale hint that led here is then no longer trusted. */
    if (q->st->hints)
        pt_list_hints_put(q->st->hints, c->hkey, c->vrows + (q->rows + q->rows_cached - before),
                          rv == 0);
    return rv ? rv : pt_cands_resolve(q);
}

static pt_slice label_value(const series *s, pt_slice name)
{
    for (size_t i = 0; i < s->nlabels; i++)
        if (pt_slice_eq(s->labels[i].name, name))
            return s->labels[i].value;
    return (pt_slice){(const uint8_t *)"", 0};
}

static int series_cmp(const void *x, const void *y)
{
    const series *a = x, *b = y;
    return pt_labels_cmp(a->labels, a->nlabels, b->labels, b->nlabels);
}

int pt_select(qctx *q)
{
    int hinted;
    int rv = resolve(q, 1, &hinted);
    if (rv == PT_ELIMIT && hinted) {
        /* The list a hint picked grew past the limit; counting may pick a shorter one, and
         * a hint must never change an answer. Start over without them. */
        q->refs = (refset){0};
        q->c.v = NULL;
        q->c.x = (hindex){0};
        rv = resolve(q, 0, &hinted);
    }
    return rv ? rv : pt_select_filter(q);
}

int pt_select_filter(qctx *q)
{
    size_t k = 0;
    for (size_t i = 0; i < q->c.x.n; i++) {
        series *se = &q->c.v[i];
        int rv = past_deadline(q);
        size_t j = 0;
        while (rv == 0 && j < q->nms &&
               (rv = accepts(q, &q->ms[j], label_value(se, q->ms[j].name))) > 0)
            rv = 0, j++;
        if (rv < 0)
            return rv;
        if (j == q->nms)
            q->c.v[k++] = *se;
    }
    if (k > 1)
        qsort(q->c.v, k, sizeof(series), series_cmp);
    q->c.n = k;
    return 0;
}
