/* Candidate series of a query: the series references its index lists give, deduplicated,
 * then the series behind them, deduplicated by sid (read_int.h). */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "bytes.h"
#include "read_int.h"

static int sid_eq(const void *items, size_t i, const void *key)
{
    return pt_slice_eq(((const series *)items)[i].sid, *(const pt_slice *)key);
}

static int u64_eq(const void *items, size_t i, const void *key)
{
    return ((const uint64_t *)items)[i] == *(const uint64_t *)key;
}

/* Candidates before the matchers are checked may pass the series limit by a generous
 * margin: this many at most (0 = no limit); past it the query is refused (PT_ELIMIT). */
static size_t cands_max(const qctx *q)
{
    return q->c.limit ? q->c.limit * 4 + 1024 : 0;
}

void pt_series_widen(series *s, int64_t lo, int64_t hi, int64_t bucket_ms)
{
    const uint64_t all = ~(uint64_t)0, last = (uint64_t)1 << 63;
    int64_t was = pt_bucket_base(s->day_lo), now = pt_bucket_base(lo);
    if (now < was) {
        /* Bit 0 moves to an earlier bucket: the bits move up, the ones past 63 into 63. */
        int64_t by = (was - now) / PT_BUCKET_MS;
        uint64_t past = by >= 63 ? s->bases : s->bases >> (63 - by);
        s->bases = (by >= 63 ? 0 : s->bases << by) | (past ? last : 0);
        s->day_lo = lo;
    }
    if (hi > s->day_hi)
        s->day_hi = hi;
    int64_t j0 = (now - pt_bucket_base(s->day_lo)) / PT_BUCKET_MS;
    int64_t j1 = (pt_bucket_base(hi + bucket_ms - 1) - pt_bucket_base(s->day_lo)) / PT_BUCKET_MS;
    j0 = j0 < 63 ? j0 : 63;
    j1 = j1 < 63 ? j1 : 63;
    s->bases |= (all >> (63 - j1)) & (all << j0);
}

/* Adds the series named by an index row of bucket day (sid after the prefix, labels in
 * value or sid), or widens the days of the one already there. A day outside the query's
 * (not parsed, or a cache entry's rows of several days) stands for all of them. */
static int cands_add(qctx *q, pt_slice sid, pt_slice value, int64_t day)
{
    cands *c = &q->c;
    int64_t lo = day, hi = day;
    if (day < q->day_first || day > q->day_last)
        lo = q->day_first, hi = q->day_last;
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
        int rv = pt_series_id(c->a, cell_labels, (size_t)cell_n, pt_store_key_limit(q->st), &sid);
        if (rv)
            return rv;
    }
    uint64_t h = XXH3_64bits(sid.p, sid.n);
    void *items = c->v;
    size_t at;
    int rv = pt_hindex_claim(&c->x, c->a, &items, sizeof(*c->v), h, sid_eq, &sid, cands_max(q),
                             &at);
    c->v = items;
    if (rv == 0)
        pt_series_widen(&c->v[at], lo, hi, q->st->index_bucket_ms);
    if (rv <= 0)
        return rv;
    series *s = &c->v[c->x.n];
    uint8_t *copy = pt_arena_alloc(c->a, sid.n);
    if (!copy)
        return PT_ENOMEM;
    memcpy(copy, sid.p, sid.n);
    *s = (series){.day_lo = lo, .day_hi = lo};
    pt_series_widen(s, lo, hi, q->st->index_bucket_ms);
    s->sid = (pt_slice){copy, sid.n};
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
    pt_hindex_add(&c->x, h);
    return 0;
}

int pt_cands_add_sid(qctx *q, pt_slice sid, int64_t day)
{
    return cands_add(q, sid, (pt_slice){sid.p, 0}, day);
}

int pt_cands_add_ref(qctx *q, uint64_t ref)
{
    refset *s = &q->refs;
    uint64_t h = XXH3_64bits(&ref, sizeof(ref)); /* a test's short refs share low bits */
    void *items = s->v;
    int rv = pt_hindex_claim(&s->x, q->a, &items, sizeof(*s->v), h, u64_eq, &ref, cands_max(q),
                             NULL);
    s->v = items;
    if (rv <= 0)
        return rv;
    s->v[s->x.n] = ref;
    pt_hindex_add(&s->x, h);
    return 0;
}

/* The bucket of a series row ("==" ref ",@" day ","), -1 when not digits. */
static int64_t row_day(pt_slice row)
{
    return pt_key_digits(row.p + 2 + PT_REF_HEX + 2);
}

/* A series row: the sid after its prefix, the label set in the cell when needed. */
static int on_series_row(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)qual;
    qctx *q = ud;
    if (row.n < PT_INDEX_SERIES_PREFIX_LEN)
        return PT_EINTERNAL;
    int rv = past_deadline(q);
    if (rv)
        return rv;
    pt_slice sid = {row.p + PT_INDEX_SERIES_PREFIX_LEN, row.n - PT_INDEX_SERIES_PREFIX_LEN};
    return cands_add(q, sid, value, row_day(row));
}

static int u64_cmp(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

/* Filling the series-row cache from a scan of series rows: a reference's rows arrive
 * together, in day order; when the next reference starts, each of the query's days of the
 * previous one becomes an entry (maybe empty). */
typedef struct filler {
    qctx *q;
    const uint64_t *miss;   /* the references scanned, sorted */
    const uint32_t *epochs; /* epoch of (miss[i], day d) at [i * ndays + d] */
    size_t nmiss, at, ndays;
    uint64_t cur;
    int have_cur, odd; /* odd: a row outside the query's bucket grid; keep nothing */
    pt_buf rows;       /* cur's rows: u32 day index, then the entry's record */
    pt_buf entry;
} filler;

static int64_t fill_day(const filler *f, size_t d)
{
    return f->q->day_first + (int64_t)d * f->q->st->index_bucket_ms;
}

/* Stores the entries of every reference before `upto` (all when last): cur's rows, and
 * none for the references the scan found no row of. */
static void fill_flush(filler *f, uint64_t upto, int last)
{
    pt_ref_cache *c = f->q->st->refs;
    for (; f->at < f->nmiss && (last || f->miss[f->at] < upto); f->at++) {
        uint64_t ref = f->miss[f->at];
        int mine = f->have_cur && ref == f->cur;
        if (mine && f->odd)
            continue;
        for (size_t d = 0; d < f->ndays; d++) {
            pt_buf_reset(&f->entry);
            for (size_t i = 0; mine && i < f->rows.len;) {
                uint32_t day = pt_get_be32(f->rows.p + i);
                uint32_t kn = pt_get_be32(f->rows.p + i + 4);
                uint32_t vn = pt_get_be32(f->rows.p + i + 8 + kn);
                size_t rec = 8 + (size_t)kn + vn;
                if (day == d && pt_buf_append(&f->entry, f->rows.p + i + 4, rec) != 0) {
                    /* Out of memory: fill nothing more from this scan (an entry left out
                     * is a miss; one filled without its rows would hide a series). */
                    f->at = f->nmiss;
                    return;
                }
                i += 4 + rec;
            }
            pt_ref_cache_put(c, ref ^ f->q->st->salt, fill_day(f, d),
                             f->epochs[f->at * f->ndays + d], f->entry.p, f->entry.len);
        }
    }
}

static int on_series_row_fill(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    filler *f = ud;
    uint64_t ref;
    if (row.n < PT_INDEX_SERIES_PREFIX_LEN || pt_ref_parse(row.p + 2, &ref) != 0)
        return PT_EINTERNAL;
    if (!f->have_cur || ref != f->cur) {
        fill_flush(f, ref, 0);
        f->cur = ref;
        f->have_cur = 1;
        f->odd = 0;
        pt_buf_reset(&f->rows);
    }
    int64_t day = row_day(row), bucket = f->q->st->index_bucket_ms, into = day - f->q->day_first;
    size_t d = (size_t)(into / bucket);
    if (day < 0 || into < 0 || into % bucket != 0 || d >= f->ndays)
        f->odd = 1;
    pt_slice tail = {row.p + PT_INDEX_SERIES_PREFIX_LEN, row.n - PT_INDEX_SERIES_PREFIX_LEN};
    uint8_t h[8];
    pt_put_be32(h, (uint32_t)d);
    pt_put_be32(h + 4, (uint32_t)tail.n);
    uint8_t vl[4];
    pt_put_be32(vl, (uint32_t)value.n);
    if (!f->odd &&
        (pt_buf_append(&f->rows, h, 8) != 0 || pt_buf_append(&f->rows, tail.p, tail.n) != 0 ||
         pt_buf_append(&f->rows, vl, 4) != 0 || pt_buf_append(&f->rows, value.p, value.n) != 0))
        return PT_ENOMEM;
    return on_series_row(f->q, row, qual, value);
}

/* The candidates in the cache's rows of one reference (records as in index.h). */
static int cands_from_cache(qctx *q, const pt_buf *b)
{
    for (size_t i = 0; i < b->len;) {
        uint32_t kn = pt_get_be32(b->p + i);
        pt_slice sid = {b->p + i + 4, kn};
        uint32_t vn = pt_get_be32(b->p + i + 4 + kn);
        pt_slice value = {b->p + i + 8 + kn, vn};
        int rv = cands_add(q, sid, value, -1);
        if (rv)
            return rv;
        i += 8 + (size_t)kn + vn;
    }
    return 0;
}

/* Looks every reference up in the series-row cache: the ones found for all the query's
 * days become candidates now; the others are left in rs->v[0, *nmiss), their epochs
 * taken (before the scan that will fill them). */
static int resolve_cached(qctx *q, size_t ndays, size_t *nmiss, uint32_t **epochs)
{
    refset *rs = &q->refs;
    pt_ref_cache *c = q->st->refs;
    pt_buf hit; /* in the request's arena: no malloc per read */
    pt_buf_init_arena(&hit, q->a, 0);
    int rv = 0;
    size_t k = 0;
    *epochs = pt_arena_alloc(q->a, rs->x.n * ndays * sizeof(**epochs));
    if (!*epochs)
        return PT_ENOMEM;
    for (size_t i = 0; i < rs->x.n && rv == 0; i++) {
        uint64_t ref = rs->v[i], cref = ref ^ q->st->salt; /* the tenant's cache key */
        size_t d = 0;
        pt_buf_reset(&hit);
        while (d < ndays &&
               (rv = pt_ref_cache_get(c, cref, q->day_first + (int64_t)d * q->st->index_bucket_ms,
                                      &hit)) == 1)
            d++;
        if (rv < 0)
            break;
        if (d == ndays) {
            rv = cands_from_cache(q, &hit);
            continue;
        }
        rv = 0;
        for (d = 0; d < ndays; d++)
            (*epochs)[k * ndays + d] =
                pt_ref_cache_epoch(c, cref, q->day_first + (int64_t)d * q->st->index_bucket_ms);
        rs->v[k++] = ref;
    }
    pt_buf_free(&hit);
    *nmiss = k;
    return rv;
}

/* From the series-row cache when it has them, else their series rows over the query's
 * days, read in key order, many references per scan (one row set on Bigtable). */
int pt_cands_resolve(qctx *q)
{
    enum { PER_SCAN = 4096 };
    const size_t kl = PT_INDEX_SERIES_PREFIX_LEN;
    refset *rs = &q->refs;
    if (rs->x.n == 0)
        return 0;
    qsort(rs->v, rs->x.n, sizeof(*rs->v), u64_cmp); /* the set is complete: its index goes stale */
    size_t nref = rs->x.n, ndays = 0;
    uint32_t *epochs = NULL;
    int rv;
    /* Long queries skip the cache: an entry per reference and bucket would cost more to
     * look up and keep than the scan it saves. */
    enum { CACHED_BUCKETS_MAX = 8 };
    if (q->st->refs)
        ndays = (size_t)((q->day_last - q->day_first) / q->st->index_bucket_ms) + 1;
    int cached = q->st->refs && ndays <= CACHED_BUCKETS_MAX;
    if (cached) {
        if ((rv = resolve_cached(q, ndays, &nref, &epochs)) != 0)
            return rv;
        if (nref == 0)
            return 0;
    }
    size_t per = nref < PER_SCAN ? nref : PER_SCAN;
    pt_row_range *r = pt_arena_alloc(q->a, per * sizeof(*r));
    uint8_t *keys = pt_arena_alloc(q->a, per * 2 * kl);
    if (!r || !keys)
        return PT_ENOMEM;
    int64_t after = q->day_last + q->st->index_bucket_ms;
    filler f = {.q = q, .ndays = ndays};
    pt_buf_init(&f.rows, 0);
    pt_buf_init(&f.entry, 0);
    rv = 0;
    for (size_t i = 0; i < nref && rv == 0; i += per) {
        size_t m = nref - i < per ? nref - i : per;
        for (size_t j = 0; j < m; j++) {
            uint8_t ref16[PT_REF_HEX], *k0 = keys + 2 * j * kl, *k1 = k0 + kl;
            pt_ref_hex(ref16, rs->v[i + j]);
            pt_index_series_prefix(k0, ref16, q->day_first);
            pt_index_series_prefix(k1, ref16, after);
            r[j] = (pt_row_range){{k0, kl}, {k1, kl}};
        }
        if ((rv = deadline_passed(q)) != 0)
            break;
        size_t visited = 0;
        pt_scan s = {.table = PT_TABLE_INDEX,
                     .ranges = r,
                     .nranges = m,
                     .visited = &visited,
                     .cold = &q->cold};
        if (cached) {
            f.miss = rs->v + i;
            f.epochs = epochs + i * ndays;
            f.nmiss = m;
            f.at = 0;
            f.have_cur = 0;
            rv = pt_backend_scan(q->st->be, &s, on_series_row_fill, &f);
            if (rv == 0)
                fill_flush(&f, 0, 1);
        } else {
            rv = pt_backend_scan(q->st->be, &s, on_series_row, q);
        }
        q->st->stats->read_rows_scanned += visited;
        q->rows += visited;
    }
    pt_buf_free(&f.rows);
    pt_buf_free(&f.entry);
    return rv;
}
