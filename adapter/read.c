/* The read path: matchers → series through the index → cells merged in time order. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "bytes.h"
#include "error.h"
#include "matcher.h"
#include "metrics.h"
#include "store.h"

typedef struct series {
    pt_slice sid;
    pt_label *labels;
    size_t nlabels;
    uint64_t hash;
} series;

/* Candidate series of one query, deduplicated by sid. */
typedef struct cands {
    pt_arena *a;
    series *v;
    size_t n, cap;
    uint32_t *slots; /* index + 1 into v; 0 = empty */
    size_t mask;
    size_t limit;    /* max series, 0 = none */
    int err;
} cands;

static int cands_grow(cands *c)
{
    size_t ncap = c->cap ? c->cap * 2 : 256;
    series *nv = pt_arena_alloc(c->a, ncap * sizeof(*nv));
    uint32_t *ns = pt_arena_calloc(c->a, ncap * 2 * sizeof(*ns));
    if (!nv || !ns)
        return PT_ENOMEM;
    if (c->n)
        memcpy(nv, c->v, c->n * sizeof(*nv));
    c->v = nv;
    c->cap = ncap;
    c->slots = ns;
    c->mask = ncap * 2 - 1;
    for (size_t i = 0; i < c->n; i++) {
        size_t j = c->v[i].hash & c->mask;
        while (c->slots[j])
            j = (j + 1) & c->mask;
        c->slots[j] = (uint32_t)(i + 1);
    }
    return 0;
}

/* Adds the series named by an index row (sid after the prefix, labels in value or sid). */
static int cands_add(cands *c, pt_slice sid, pt_slice value)
{
    pt_label *cell_labels = NULL;
    long cell_n = 0;
    if (value.n) {
        /* The row names the series by digest or hashed sid; its labels are in the cell and
         * the real sid follows from them. */
        uint8_t *vc = pt_arena_alloc(c->a, value.n);
        if (!vc)
            return PT_ENOMEM;
        memcpy(vc, value.p, value.n);
        cell_n = pt_labels_decode(c->a, (pt_slice){vc, value.n}, &cell_labels);
        if (cell_n < 0)
            return cell_n == PT_ENOMEM ? PT_ENOMEM : PT_EINTERNAL;
        int rv = pt_series_id(c->a, cell_labels, (size_t)cell_n, &sid);
        if (rv)
            return rv;
    }
    uint64_t h = XXH3_64bits(sid.p, sid.n);
    if (c->cap) {
        size_t j = h & c->mask;
        while (c->slots[j]) {
            series *s = &c->v[c->slots[j] - 1];
            if (s->hash == h && pt_slice_eq(s->sid, sid))
                return 0;
            j = (j + 1) & c->mask;
        }
    }
    if (c->limit && c->n >= c->limit * 4 + 1024) /* unfiltered candidates: generous bound */
        return PT_ELIMIT;
    if (c->n == c->cap) {
        int rv = cands_grow(c);
        if (rv)
            return rv;
    }
    series *s = &c->v[c->n];
    uint8_t *copy = pt_arena_alloc(c->a, sid.n);
    if (!copy)
        return PT_ENOMEM;
    memcpy(copy, sid.p, sid.n);
    s->sid = (pt_slice){copy, sid.n};
    s->hash = h;
    long nl;
    if (value.n) {
        s->labels = cell_labels;
        nl = cell_n;
    } else {
        nl = pt_series_id_parse(c->a, s->sid, &s->labels);
        if (nl > 0) {
            /* The sid keeps __name__ first; the stored order is by name. */
            pt_label name = s->labels[0];
            size_t i = 1;
            while (i < (size_t)nl && pt_slice_cmp(s->labels[i].name, name.name) < 0) {
                s->labels[i - 1] = s->labels[i];
                i++;
            }
            s->labels[i - 1] = name;
        }
    }
    if (nl < 0)
        return nl == PT_ENOMEM ? PT_ENOMEM : PT_EINTERNAL;
    s->nlabels = (size_t)nl;
    size_t j = h & c->mask;
    while (c->slots[j])
        j = (j + 1) & c->mask;
    c->slots[j] = (uint32_t)(c->n + 1);
    c->n++;
    return 0;
}

typedef struct qctx {
    pt_store *st;
    pt_arena *a;
    pt_matcher *ms;
    size_t nms;
    int64_t day_first, day_last;
    cands c;
    uint64_t deadline_ns; /* 0 = none */
    size_t ticks;         /* rows and cells seen, for the deadline checks */
    /* Equality matchers the index list being read does not imply, escaped as they stand
     * in a plain series id: the metric as its prefix, a label as ",name=value". */
    pt_slice metric;      /* n == 0: none */
    pt_slice *pairs;
    size_t npairs;
} qctx;

/* Every so many index rows or cells, a read checks its deadline. */
#define DEADLINE_EVERY 1024

static int deadline_passed(const qctx *q)
{
    return q->deadline_ns && pt_now_ns() > q->deadline_ns ? PT_ETIMEOUT : 0;
}

/* The same, looked at every DEADLINE_EVERY calls (from per-row and per-cell callbacks). */
static int past_deadline(qctx *q)
{
    return ++q->ticks % DEADLINE_EVERY == 0 ? deadline_passed(q) : 0;
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
    pt_scan s = {PT_TABLE_INDEX, &r, 1, {0}, {0}, 0, &visited};
    rv = pt_backend_scan(q->st->be, &s, fn, ud);
    pt_m.read_rows_scanned += visited;
    return rv;
}

/* A set of label values (unescaped), in insertion order, with a hash index: a label can
 * have hundreds of thousands of values over the days of a query. */
typedef struct valset {
    pt_arena *a;
    pt_slice *v;
    uint64_t *h;
    size_t n, cap;
    uint32_t *slots; /* index + 1 into v; 0 = empty; 2 * cap of them */
} valset;

/* Adds val unless present: 1 added, 0 present, PT_ENOMEM. */
static int valset_add(valset *s, pt_slice val)
{
    uint64_t h = XXH3_64bits(val.p, val.n);
    size_t mask = s->cap * 2 - 1;
    if (s->cap) {
        for (size_t j = h & mask; s->slots[j]; j = (j + 1) & mask) {
            size_t i = s->slots[j] - 1;
            if (s->h[i] == h && pt_slice_eq(s->v[i], val))
                return 0;
        }
    }
    if (s->n == s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 64;
        pt_slice *nv = pt_arena_alloc(s->a, ncap * sizeof(*nv));
        uint64_t *nh = pt_arena_alloc(s->a, ncap * sizeof(*nh));
        uint32_t *ns = pt_arena_calloc(s->a, ncap * 2 * sizeof(*ns));
        if (!nv || !nh || !ns)
            return PT_ENOMEM;
        if (s->n) {
            memcpy(nv, s->v, s->n * sizeof(*nv));
            memcpy(nh, s->h, s->n * sizeof(*nh));
        }
        s->v = nv;
        s->h = nh;
        s->slots = ns;
        s->cap = ncap;
        mask = ncap * 2 - 1;
        for (size_t i = 0; i < s->n; i++) {
            size_t j = s->h[i] & mask;
            while (s->slots[j])
                j = (j + 1) & mask;
            s->slots[j] = (uint32_t)(i + 1);
        }
    }
    size_t j = h & mask;
    while (s->slots[j])
        j = (j + 1) & mask;
    s->slots[j] = (uint32_t)(s->n + 1);
    s->v[s->n] = val;
    s->h[s->n++] = h;
    return 1;
}

typedef struct rowcb {
    qctx *q;
    size_t prefix_len;
    pt_matcher *filter; /* values rows: keep values this matcher accepts */
    valset vals;        /* collected values */
} rowcb;

/* Whether a plain series id can satisfy q's equality matchers: a cheap look at the
 * escaped text that spares parsing most candidates an index list brings. In a plain sid
 * every '=' inside a name or value is escaped, so ",name=value" followed by ',' or the
 * end can only be that label. */
static int sid_may_match(const qctx *q, pt_slice sid)
{
    if (q->metric.n && (sid.n < q->metric.n || memcmp(sid.p, q->metric.p, q->metric.n) != 0 ||
                        (sid.n > q->metric.n && sid.p[q->metric.n] != ',')))
        return 0;
    for (size_t i = 0; i < q->npairs; i++) {
        pt_slice nd = q->pairs[i];
        const uint8_t *p = sid.p, *end = sid.p + sid.n;
        int found = 0;
        while (!found && (p = memmem(p, (size_t)(end - p), nd.p, nd.n)) != NULL) {
            p += nd.n;
            found = p == end || *p == ',';
        }
        if (!found)
            return 0;
    }
    return 1;
}

static int on_series_row(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)qual;
    rowcb *r = ud;
    if (row.n < r->prefix_len)
        return PT_EINTERNAL;
    int rv = past_deadline(r->q);
    if (rv)
        return rv;
    pt_slice sid = {row.p + r->prefix_len, row.n - r->prefix_len};
    if (value.n == 0 && !sid_may_match(r->q, sid))
        return 0; /* a plain sid the other equality matchers rule out */
    return cands_add(&r->q->c, sid, value);
}

static int on_value_row(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)qual;
    rowcb *r = ud;
    int rv = past_deadline(r->q);
    if (rv)
        return rv;
    pt_slice esc = {row.p + r->prefix_len, row.n - r->prefix_len};
    pt_slice val;
    if (pt_index_is_digest(esc)) {
        /* A long value: the key holds its digest, the cell the value. */
        uint8_t *v = pt_arena_alloc(r->q->a, value.n ? value.n : 1);
        if (!v)
            return PT_ENOMEM;
        memcpy(v, value.p, value.n);
        val = (pt_slice){v, value.n};
    } else {
        uint8_t *v = pt_arena_alloc(r->q->a, esc.n ? esc.n : 1);
        if (!v)
            return PT_ENOMEM;
        long n = pt_unescape(v, esc);
        if (n < 0)
            return PT_EINTERNAL;
        val = (pt_slice){v, (size_t)n};
    }
    if (r->filter && !pt_matcher_match(r->filter, val))
        return 0;
    rv = valset_add(&r->vals, val); /* the same value comes once per day */
    return rv < 0 ? rv : 0;
}

/* Values of label `name` over the query's days, kept when `filter` accepts them. */
static int list_values(qctx *q, pt_slice name, pt_matcher *filter, rowcb *r)
{
    memset(r, 0, sizeof(*r));
    r->q = q;
    r->filter = filter;
    r->vals.a = q->a;
    size_t cap = PT_INDEX_PREFIX_MAX(name.n, 0);
    uint8_t *b0 = pt_arena_alloc(q->a, cap), *b1 = pt_arena_alloc(q->a, cap);
    if (!b0 || !b1)
        return PT_ENOMEM;
    uint8_t *e0 = pt_index_values_prefix(b0, name, q->day_first);
    uint8_t *e1 = pt_index_values_prefix(b1, name, q->day_last + q->st->index_bucket_ms);
    r->prefix_len = (size_t)(e0 - b0);
    return scan_days(q, (pt_slice){b0, r->prefix_len}, (pt_slice){b1, (size_t)(e1 - b1)},
                     on_value_row, r);
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
} irange;

static int index_range(qctx *q, const pt_slice *name, pt_slice value, irange *r)
{
    size_t cap = PT_INDEX_PREFIX_MAX(name ? name->n : 0, value.n);
    r->b0 = pt_arena_alloc(q->a, cap);
    r->b1 = pt_arena_alloc(q->a, cap);
    if (!r->b0 || !r->b1)
        return PT_ENOMEM;
    int64_t after = q->day_last + q->st->index_bucket_ms;
    uint8_t *e0 = name ? pt_index_posting_prefix(r->b0, *name, value, q->day_first)
                       : pt_index_metric_prefix(r->b0, value, q->day_first);
    uint8_t *e1 = name ? pt_index_posting_prefix(r->b1, *name, value, after)
                       : pt_index_metric_prefix(r->b1, value, after);
    r->n0 = (size_t)(e0 - r->b0);
    r->n1 = (size_t)(e1 - r->b1);
    return 0;
}

/* Series of the metric (name == NULL) or of the posting name=value, over all days. */
static int collect(qctx *q, const pt_slice *name, pt_slice value)
{
    irange ir;
    int rv = index_range(q, name, value, &ir);
    if (rv)
        return rv;
    rowcb r = {.q = q, .prefix_len = ir.n0};
    return scan_days(q, (pt_slice){ir.b0, ir.n0}, (pt_slice){ir.b1, ir.n1}, on_series_row, &r);
}

/* One index range counted a slice at a time. */
typedef struct counter {
    irange ir;
    pt_buf next;  /* where the next slice starts: just after the last row seen */
    size_t rows;  /* rows seen so far */
    int complete; /* no rows are left */
} counter;

static int count_row(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)qual, (void)value;
    counter *c = ud;
    c->rows++;
    /* The smallest key after row is row ‖ 0x00 (row keys hold no 0x00). */
    pt_buf_reset(&c->next);
    if (pt_buf_append(&c->next, row.p, row.n) != 0 || pt_buf_append(&c->next, "", 1) != 0)
        return PT_ENOMEM;
    return 0;
}

/* Reads up to budget more rows of c's range. */
static int count_more(qctx *q, counter *c, size_t budget)
{
    int rv = deadline_passed(q);
    if (rv)
        return rv;
    pt_row_range r = {{c->next.p, c->next.len}, {c->ir.b1, c->ir.n1}};
    size_t before = c->rows, visited = 0;
    pt_scan s = {PT_TABLE_INDEX, &r, 1, {0}, {0}, budget, &visited};
    rv = pt_backend_scan(q->st->be, &s, count_row, c);
    pt_m.read_rows_scanned += visited;
    if (rv == 0 && c->rows - before < budget)
        c->complete = 1;
    return rv;
}

/*
 * Which equality matcher lists the fewest index rows: every list is read in lock-step
 * slices that double in size until one ends, so this costs about (lists × the shortest
 * list) rows, never the longest list (a metric name can have a hundred thousand series
 * where an instance label has a hundred). Sets *best to its index in eq.
 */
static int shortest(qctx *q, pt_matcher **eq, size_t neq, size_t *best)
{
    counter *c = pt_arena_calloc(q->a, neq * sizeof(*c));
    int rv = 0;
    if (!c)
        return PT_ENOMEM;
    for (size_t i = 0; i < neq && rv == 0; i++) {
        int name = is_metric_name(eq[i]->name);
        rv = index_range(q, name ? NULL : &eq[i]->name, eq[i]->value, &c[i].ir);
        pt_buf_init_arena(&c[i].next, q->a, 0);
        if (rv == 0)
            rv = pt_buf_append(&c[i].next, c[i].ir.b0, c[i].ir.n0);
    }
    for (size_t budget = 64; rv == 0; budget *= 2) {
        size_t found = neq;
        for (size_t i = 0; i < neq && rv == 0; i++) {
            rv = count_more(q, &c[i], budget);
            if (rv == 0 && c[i].complete && (found == neq || c[i].rows < c[found].rows))
                found = i;
        }
        if (rv == 0 && found < neq) {
            *best = found;
            break;
        }
    }
    return rv;
}

/* The escaped forms sid_may_match looks for: every equality matcher but eq[skip]. A part
 * too long to stand in a plain sid as it is (a digest there) is not looked for. */
static int sid_filters(qctx *q, pt_matcher **eq, size_t neq, size_t skip)
{
    q->pairs = pt_arena_alloc(q->a, neq * sizeof(*q->pairs));
    if (!q->pairs)
        return PT_ENOMEM;
    for (size_t i = 0; i < neq; i++) {
        pt_slice n = eq[i]->name, v = eq[i]->value;
        size_t en = pt_escaped_len(n), ev = pt_escaped_len(v);
        if (i == skip || en > PT_INDEX_PART_MAX || ev > PT_INDEX_PART_MAX)
            continue;
        uint8_t *b = pt_arena_alloc(q->a, en + ev + 2);
        if (!b)
            return PT_ENOMEM;
        if (is_metric_name(n)) {
            q->metric = (pt_slice){b, (size_t)(pt_escape(b, v) - b)};
            continue;
        }
        uint8_t *e = b;
        *e++ = ',';
        e = pt_escape(e, n);
        *e++ = '=';
        e = pt_escape(e, v);
        q->pairs[q->npairs++] = (pt_slice){b, (size_t)(e - b)};
    }
    return 0;
}

/* Picks the cheapest way to list candidates, then collects them; every candidate is then
 * checked against all matchers. */
static int resolve(qctx *q)
{
    pt_matcher *name_re = NULL, *label_any = NULL;
    pt_matcher **eq = pt_arena_alloc(q->a, (q->nms ? q->nms : 1) * sizeof(*eq));
    size_t neq = 0;
    if (!eq)
        return PT_ENOMEM;
    for (size_t i = 0; i < q->nms; i++) {
        pt_matcher *m = &q->ms[i];
        if (m->matches_empty)
            continue;
        if (m->type == PT_MATCH_EQ)
            eq[neq++] = m;
        else if (is_metric_name(m->name) && !name_re)
            name_re = m;
        else if (!label_any)
            label_any = m;
    }
    int rv;
    if (neq) {
        /* The series of the shortest equality list; the other matchers filter them. */
        size_t best = 0;
        if (neq > 1 && (rv = shortest(q, eq, neq, &best)) != 0)
            return rv;
        if ((rv = sid_filters(q, eq, neq, best)) != 0)
            return rv;
        return collect(q, is_metric_name(eq[best]->name) ? NULL : &eq[best]->name,
                       eq[best]->value);
    }
    rowcb r;
    if (name_re || !label_any) {
        /* A name regex, or nothing selective at all: list metric names. */
        if ((rv = list_values(q, PT_SLICE_LIT("__name__"), name_re, &r)) != 0)
            return rv;
        for (size_t i = 0; i < r.vals.n; i++)
            if ((rv = collect(q, NULL, r.vals.v[i])) != 0)
                return rv;
        return 0;
    }
    if ((rv = list_values(q, label_any->name, label_any, &r)) != 0)
        return rv;
    for (size_t i = 0; i < r.vals.n; i++)
        if ((rv = collect(q, &label_any->name, r.vals.v[i])) != 0)
            return rv;
    return 0;
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

typedef struct samples {
    qctx *q;
    pt_arena *a;
    int64_t base;
    Prometheus__Sample **v;
    Prometheus__Sample *pool;
    size_t n, cap;
    size_t *total;
    size_t limit;
} samples;

static int on_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)row;
    samples *s = ud;
    if (s->limit && *s->total >= s->limit)
        return PT_ELIMIT;
    int rv = past_deadline(s->q);
    if (rv)
        return rv;
    if (s->n == s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 64;
        Prometheus__Sample **nv = pt_arena_alloc(s->a, ncap * sizeof(*nv));
        Prometheus__Sample *np = pt_arena_alloc(s->a, (ncap - s->cap) * sizeof(*np));
        if (!nv || !np)
            return PT_ENOMEM;
        if (s->n)
            memcpy(nv, s->v, s->n * sizeof(*nv));
        for (size_t i = s->cap; i < ncap; i++)
            nv[i] = &np[i - s->cap];
        s->v = nv;
        s->cap = ncap;
    }
    Prometheus__Sample *out = s->v[s->n];
    prometheus__sample__init(out);
    if (pt_cell_decode(s->base, qual, value, &out->timestamp, &out->value) != 0)
        return PT_EINTERNAL;
    s->n++;
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

static int on_routed_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    routed *r = ud;
    while (r->cur < r->n && !pt_slice_eq(r->refs[r->cur].row, row))
        r->cur++;
    if (r->cur == r->n)
        return PT_EINTERNAL; /* the backend returned a row outside the scan */
    return on_cell(&r->ss[r->refs[r->cur].idx], row, qual, value);
}

/* Reads the cells of the k series in [start, end] into ss[0..k): bucket by bucket (so
 * each series' samples come in time order), every bucket's rows in groups of READ_GROUP
 * series per scan. */
static int read_all(qctx *q, const series *v, size_t k, int64_t start, int64_t end,
                    samples *ss)
{
    rowref *refs = pt_arena_alloc(q->a, (k ? k : 1) * sizeof(*refs));
    pt_row_range *ranges = pt_arena_alloc(q->a, READ_GROUP * sizeof(*ranges));
    uint8_t *qb = pt_arena_alloc(q->a, 8);
    if (!refs || !ranges || !qb)
        return PT_ENOMEM;
    for (int64_t base = pt_bucket_base(start); base <= end; base += PT_BUCKET_MS) {
        for (size_t i = 0; i < k; i++) {
            size_t keylen = PT_ROW_KEY_LEN(v[i].sid.n);
            uint8_t *key = pt_arena_alloc(q->a, keylen + 1);
            if (!key)
                return PT_ENOMEM;
            pt_row_key(key, v[i].sid, base);
            key[keylen] = 0; /* the end of the single-row range */
            refs[i] = (rowref){{key, keylen}, i};
            ss[i].base = base;
        }
        qsort(refs, k, sizeof(*refs), rowref_cmp);
        size_t visited = 0;
        pt_scan sc = {PT_TABLE_POINTS, ranges, 0, {0}, {0}, 0, &visited};
        if (start > base) {
            pt_put_be32(qb, (uint32_t)(start - base));
            sc.qual_start = (pt_slice){qb, 4};
        }
        if (end - base + 1 < PT_BUCKET_MS) {
            pt_put_be32(qb + 4, (uint32_t)(end - base + 1));
            sc.qual_end = (pt_slice){qb + 4, 4};
        }
        for (size_t g = 0; g < k; g += READ_GROUP) {
            size_t n = k - g < READ_GROUP ? k - g : READ_GROUP;
            for (size_t i = 0; i < n; i++)
                ranges[i] = (pt_row_range){refs[g + i].row,
                                           {refs[g + i].row.p, refs[g + i].row.n + 1}};
            sc.nranges = n;
            routed r = {refs + g, n, 0, ss};
            int rv = deadline_passed(q);
            if (!rv)
                rv = pt_backend_scan(q->st->be, &sc, on_routed_cell, &r);
            pt_m.read_rows_scanned += visited;
            visited = 0;
            if (rv)
                return rv;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ the read iterator */

struct pt_read {
    pt_store *st;
    const Prometheus__ReadRequest *rr;
    pt_arena *a;           /* the request's: matchers' slices, series list */
    size_t qi;             /* query being answered */
    int started;           /* q holds query qi's resolved series */
    size_t inited;         /* matchers of q that need pt_matcher_free */
    qctx q;
    size_t k, next;        /* matching series of query qi; the next to read */
    int64_t start, end;
    size_t total;          /* samples read so far, against max_samples */
    uint64_t t0;
    uint64_t deadline_ns;  /* read.timeout after the start; 0 = none */
};

/* The message for a failed read: the read's own deadline, or the storage's error. */
static void read_failed(const pt_read *r, int rv, char *msg, size_t msglen)
{
    if (rv == PT_ETIMEOUT && r->deadline_ns && pt_now_ns() > r->deadline_ns) {
        snprintf(msg, msglen, "the read took longer than read.timeout (%lld ms); narrow the "
                 "query or raise read.timeout", (long long)r->st->read_timeout_ms);
        pt_m.read_timeouts++;
        return;
    }
    pt_m.backend_read_errors++;
    snprintf(msg, msglen, "storage read failed: %s", pt_strerror(rv));
}

static void query_end(pt_read *r)
{
    for (size_t i = 0; i < r->inited; i++)
        pt_matcher_free(&r->q.ms[i]);
    r->inited = 0;
    r->started = 0;
}

/* Compiles the matchers of query qi, resolves them to the sorted list of matching series. */
static int query_begin(pt_read *r, char *msg, size_t msglen)
{
    const Prometheus__Query *pq = r->rr->queries[r->qi];
    pt_store *st = r->st;
    pt_arena *a = r->a;
    int rv;
    memset(&r->q, 0, sizeof(r->q));
    r->q.st = st;
    r->q.a = a;
    r->q.c.a = a;
    r->q.c.limit = st->max_series;
    r->q.deadline_ns = r->deadline_ns;
    r->q.nms = pq->n_matchers;
    r->q.ms = pt_arena_calloc(a, (r->q.nms ? r->q.nms : 1) * sizeof(*r->q.ms));
    if (!r->q.ms)
        return PT_ENOMEM;
    r->started = 1;
    r->k = r->next = 0;
    for (; r->inited < r->q.nms; r->inited++) {
        const Prometheus__LabelMatcher *lm = pq->matchers[r->inited];
        rv = pt_matcher_init(&r->q.ms[r->inited], (int)lm->type,
                             (pt_slice){lm->name.data, lm->name.len},
                             (pt_slice){lm->value.data, lm->value.len}, msg, msglen);
        if (rv)
            return rv;
    }
    r->start = pq->start_timestamp_ms < 0 ? 0 : pq->start_timestamp_ms;
    r->end = pq->end_timestamp_ms;
    if (r->end > PT_MAX_TIME_MS)
        r->end = PT_MAX_TIME_MS; /* 13 decimal digits of base; keeps the bucket loop finite */
    if (r->end < r->start)
        return 0;
    r->q.day_first = r->start - r->start % st->index_bucket_ms;
    r->q.day_last = r->end - r->end % st->index_bucket_ms;

    rv = resolve(&r->q);
    if (rv == PT_ELIMIT) {
        snprintf(msg, msglen, "query touches too many series (limit read.max_series = %zu)",
                 st->max_series);
        return rv;
    }
    if (rv) {
        read_failed(r, rv, msg, msglen);
        return rv;
    }
    /* Keep the candidates every matcher accepts. */
    size_t k = 0;
    for (size_t i = 0; i < r->q.c.n; i++) {
        series *se = &r->q.c.v[i];
        size_t j = 0;
        while (j < r->q.nms && pt_matcher_match(&r->q.ms[j], label_value(se, r->q.ms[j].name)))
            j++;
        if (j == r->q.nms)
            r->q.c.v[k++] = *se;
    }
    if (st->max_series && k > st->max_series) {
        snprintf(msg, msglen, "query selects %zu series, over the limit of %zu (read.max_series)",
                 k, st->max_series);
        return PT_ELIMIT;
    }
    if (k > 1)
        qsort(r->q.c.v, k, sizeof(series), series_cmp);
    r->k = k;
    return 0;
}

int pt_read_start(pt_store *st, const Prometheus__ReadRequest *rr, pt_arena *a, pt_read **out)
{
    pt_read *r = pt_arena_calloc(a, sizeof(*r));
    if (!r)
        return PT_ENOMEM;
    r->st = st;
    r->rr = rr;
    r->a = a;
    r->t0 = pt_now_ns();
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
    pt_metrics_observe(&pt_m.backend_read_duration, pt_now_ns() - r->t0);
}

/* The labels of series se as protobuf, in arena b. */
static Prometheus__TimeSeries *series_message(const series *se, pt_arena *b)
{
    Prometheus__TimeSeries *ts = pt_arena_alloc(b, sizeof(*ts));
    Prometheus__Label **lp = pt_arena_alloc(b, (se->nlabels ? se->nlabels : 1) * sizeof(*lp));
    Prometheus__Label *lv = pt_arena_alloc(b, (se->nlabels ? se->nlabels : 1) * sizeof(*lv));
    if (!ts || !lp || !lv)
        return NULL;
    prometheus__time_series__init(ts);
    for (size_t j = 0; j < se->nlabels; j++) {
        prometheus__label__init(&lv[j]);
        lv[j].name = (ProtobufCBinaryData){se->labels[j].name.n, (uint8_t *)se->labels[j].name.p};
        lv[j].value = (ProtobufCBinaryData){se->labels[j].value.n,
                                            (uint8_t *)se->labels[j].value.p};
        lp[j] = &lv[j];
    }
    ts->labels = lp;
    ts->n_labels = se->nlabels;
    return ts;
}

int pt_read_next(pt_read *r, pt_arena *b, size_t max_series, pt_read_batch *out, char *msg,
                 size_t msglen)
{
    int rv;
    memset(out, 0, sizeof(*out));
    for (;;) {
        if (r->qi >= r->rr->n_queries)
            return 0;
        if (!r->started) {
            if ((rv = query_begin(r, msg, msglen)) != 0)
                return rv;
            pt_m.read_queries++;
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
    out->ts = pt_arena_alloc(b, n * sizeof(*out->ts));
    if (!ss || !out->ts)
        return PT_ENOMEM;
    for (size_t i = 0; i < n; i++)
        ss[i] = (samples){.q = &r->q, .a = b, .total = &r->total, .limit = r->st->max_samples};
    qctx q = r->q;
    q.a = b; /* keys of this group only */
    rv = read_all(&q, v, n, r->start, r->end, ss);
    if (rv == PT_ELIMIT) {
        snprintf(msg, msglen, "query returns more than %zu samples, over the limit "
                              "(read.max_samples)", r->st->max_samples);
        return rv;
    }
    if (rv) {
        read_failed(r, rv, msg, msglen);
        return rv;
    }
    size_t nts = 0, nsamples = 0;
    for (size_t i = 0; i < n; i++) {
        if (ss[i].n == 0)
            continue;
        Prometheus__TimeSeries *ts = series_message(&v[i], b);
        if (!ts)
            return PT_ENOMEM;
        ts->samples = ss[i].v;
        ts->n_samples = ss[i].n;
        nsamples += ss[i].n;
        out->ts[nts++] = ts;
    }
    r->next += n;
    out->query = r->qi;
    out->n = nts;
    out->last_of_query = r->next == r->k;
    pt_m.read_series += nts;
    pt_m.read_samples += nsamples;
    if (out->last_of_query) {
        query_end(r);
        r->qi++;
    }
    return 1;
}

int pt_store_read(pt_store *st, const Prometheus__ReadRequest *rr, pt_arena *a,
                  Prometheus__ReadResponse *resp, char *msg, size_t msglen)
{
    pt_read *r;
    pt_read_batch bt;
    int rv;
    prometheus__read_response__init(resp);
    resp->n_results = rr->n_queries;
    resp->results = pt_arena_alloc(a, (rr->n_queries ? rr->n_queries : 1) * sizeof(*resp->results));
    if (!resp->results || (rv = pt_read_start(st, rr, a, &r)) != 0)
        return PT_ENOMEM;
    for (size_t i = 0; i < rr->n_queries; i++) {
        Prometheus__QueryResult *qr = pt_arena_alloc(a, sizeof(*qr));
        if (!qr) {
            rv = PT_ENOMEM;
            goto out;
        }
        prometheus__query_result__init(qr);
        resp->results[i] = qr;
    }
    /* Batches arrive in query order; a query's series list grows by doubling. */
    size_t cap = 0;
    while ((rv = pt_read_next(r, a, 0, &bt, msg, msglen)) == 1) {
        Prometheus__QueryResult *qr = resp->results[bt.query];
        if (qr->n_timeseries + bt.n > cap) {
            size_t ncap = cap ? cap : 64;
            while (ncap < qr->n_timeseries + bt.n)
                ncap *= 2;
            Prometheus__TimeSeries **nt = pt_arena_alloc(a, ncap * sizeof(*nt));
            if (!nt) {
                rv = PT_ENOMEM;
                goto out;
            }
            if (qr->n_timeseries)
                memcpy(nt, qr->timeseries, qr->n_timeseries * sizeof(*nt));
            qr->timeseries = nt;
            cap = ncap;
        }
        if (bt.n)
            memcpy(qr->timeseries + qr->n_timeseries, bt.ts, bt.n * sizeof(*bt.ts));
        qr->n_timeseries += bt.n;
        if (bt.last_of_query)
            cap = 0;
    }
out:
    pt_read_free(r);
    return rv;
}
