/*
 * Deleting series (the admin API's delete_series, `promtable delete`): the samples of
 * given series in a window erased for good (pt_backend_ops.erase), and the index rows of
 * each (series, index bucket) left without samples, so the series is no longer listed for
 * that bucket. A group of series at a time:
 *
 *   1. the index buckets each series has rows in, from its series rows over the window's
 *      days (one scan of the group's references);
 *   2. erase the window from the series' data and exemplar rows of every bucket those
 *      days touch (exemplars by their window's slot: the slots wholly inside the window);
 *   3. a (series, day) whose day the window covers wholly and which ended before the call
 *      has no sample left; any other is looked at (one scan that stops at its first cell);
 *   4. for those without samples: their series row and list cells erased, exactly the
 *      cells the write path stores (pt_index_series_rows); then each of their label
 *      values' rows, unless another series of that day still lists the value;
 *   5. the caches forget them: the index cache (so the series' next write indexes the day
 *      again), the series-row and list caches.
 *
 * A sample written while the delete runs is a later write and stays; if its series had its
 * day's index rows erased meanwhile, the series' next write indexes the day again.
 */
#include <stdlib.h>
#include <string.h>

#include "bytes.h"
#include "clock.h"
#include "exemplar.h"
#include "read_int.h"
#include "rollup.h"
#include "write_int.h"

/* Series a group: each group's erases are three erase calls, each of which flushes the
 * embedded store's head first. */
enum { GROUP = 4096 };

typedef struct sday {
    size_t i;    /* the series, into the group */
    int64_t day; /* an index bucket it has rows in */
    int empty;   /* no sample left in it */
} sday;

typedef struct deleter {
    pt_store *st;
    pt_arena *a; /* the group's memory */
    qctx *q;     /* deadline, cancel */
    const series *v;
    size_t n;
    uint64_t *ref;      /* per series */
    pt_slice *tail;     /* per series: what follows the day in its series rows */
    size_t *by_ref;     /* the group's series by reference */
    sday *d;
    size_t nd, dcap;
    int64_t start, end, now;
    pt_erase *x;
    size_t nx, xcap;
} deleter;

typedef struct refidx {
    uint64_t ref;
    size_t i;
} refidx;

static int refidx_cmp(const void *x, const void *y)
{
    const refidx *a = x, *b = y;
    return a->ref != b->ref ? (a->ref < b->ref ? -1 : 1) : (a->i > b->i) - (a->i < b->i);
}

static int add_erase(deleter *z, uint8_t table, pt_slice row, pt_slice qs, pt_slice qe)
{
    pt_erase *g = pt_arena_grow(z->a, z->x, z->nx, &z->xcap, sizeof(*g), 64);
    if (!g)
        return PT_ENOMEM;
    z->x = g;
    z->x[z->nx++] = (pt_erase){table, row, qs, qe};
    return 0;
}

static int erase_cmp(const void *x, const void *y)
{
    const pt_erase *a = x, *b = y;
    if (a->table != b->table)
        return a->table < b->table ? -1 : 1;
    return pt_slice_cmp(a->row, b->row);
}

/* Sends the erases gathered, sorted, and empties the list. */
static int erase_all(deleter *z)
{
    if (!z->nx)
        return 0;
    qsort(z->x, z->nx, sizeof(*z->x), erase_cmp);
    int rv = deadline_passed(z->q);
    if (rv == 0)
        rv = pt_backend_erase(z->st->be, z->x, z->nx);
    z->nx = 0;
    return rv;
}

/* A 4-byte big-endian bound in the arena. */
static pt_slice be32(deleter *z, uint32_t v)
{
    uint8_t *p = pt_arena_alloc(z->a, 4);
    if (p)
        pt_put_be32(p, v);
    return (pt_slice){p, p ? 4 : 0};
}

/* ---- 1. the days ---- */

static int on_series_row(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)qual, (void)value;
    deleter *z = ud;
    uint64_t ref;
    if (row.n < PT_INDEX_SERIES_PREFIX_LEN || pt_ref_parse(row.p + 2, &ref) != 0)
        return 0;
    int64_t day = pt_key_digits(row.p + 2 + PT_REF_HEX + 2);
    pt_slice tail = {row.p + PT_INDEX_SERIES_PREFIX_LEN, row.n - PT_INDEX_SERIES_PREFIX_LEN};
    size_t lo = 0, hi = z->n; /* the first series of the reference, by_ref being sorted */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (z->ref[z->by_ref[mid]] < ref)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t k = lo; k < z->n && z->ref[z->by_ref[k]] == ref; k++) {
        size_t i = z->by_ref[k];
        if (!pt_slice_eq(z->tail[i], tail))
            continue;
        if (z->nd && z->d[z->nd - 1].i == i && z->d[z->nd - 1].day == day)
            return 0; /* another cell of the row */
        sday *g = pt_arena_grow(z->a, z->d, z->nd, &z->dcap, sizeof(*g), 64);
        if (!g)
            return PT_ENOMEM;
        z->d = g;
        z->d[z->nd++] = (sday){i, day, 0};
    }
    return past_deadline(z->q);
}

static int find_days(deleter *z)
{
    pt_store *st = z->st;
    size_t limit = pt_store_key_limit(st);
    pt_row_range *r = pt_arena_alloc(z->a, z->n * sizeof(*r));
    z->ref = pt_arena_alloc(z->a, z->n * sizeof(*z->ref));
    z->tail = pt_arena_alloc(z->a, z->n * sizeof(*z->tail));
    z->by_ref = pt_arena_alloc(z->a, z->n * sizeof(*z->by_ref));
    if (!r || !z->ref || !z->tail || !z->by_ref)
        return PT_ENOMEM;
    int64_t first = z->start - z->start % st->index_bucket_ms;
    int64_t past = z->end - z->end % st->index_bucket_ms + st->index_bucket_ms;
    for (size_t i = 0; i < z->n; i++) {
        const series *s = &z->v[i];
        uint8_t *k = pt_arena_alloc(z->a, PT_INDEX_SERIES_PREFIX_LEN + s->sid.n + PT_DIGEST_LEN);
        if (!k)
            return PT_ENOMEM;
        uint8_t hex[PT_REF_HEX];
        z->ref[i] = pt_series_ref(s->sid, st->ref_bits);
        pt_ref_hex(hex, z->ref[i]);
        uint8_t *e = pt_index_series_prefix(k, hex, first);
        uint8_t *t = pt_index_ref(e, (size_t)(e - k), s->sid, limit);
        z->tail[i] = (pt_slice){e, (size_t)(t - e)};
    }
    refidx *ri = pt_arena_alloc(z->a, z->n * sizeof(*ri));
    if (!ri)
        return PT_ENOMEM;
    for (size_t i = 0; i < z->n; i++)
        ri[i] = (refidx){z->ref[i], i};
    qsort(ri, z->n, sizeof(*ri), refidx_cmp);
    for (size_t k = 0; k < z->n; k++)
        z->by_ref[k] = ri[k].i;
    size_t nr = 0;
    for (size_t k = 0; k < z->n; k++) {
        size_t i = z->by_ref[k];
        if (k && z->ref[z->by_ref[k - 1]] == z->ref[i])
            continue; /* one range per reference */
        uint8_t hex[PT_REF_HEX];
        pt_ref_hex(hex, z->ref[i]);
        uint8_t *s = pt_arena_alloc(z->a, 2 * PT_INDEX_SERIES_PREFIX_LEN);
        if (!s)
            return PT_ENOMEM;
        pt_index_series_prefix(s, hex, first);
        pt_index_series_prefix(s + PT_INDEX_SERIES_PREFIX_LEN, hex, past);
        r[nr++] = (pt_row_range){{s, PT_INDEX_SERIES_PREFIX_LEN},
                                 {s + PT_INDEX_SERIES_PREFIX_LEN, PT_INDEX_SERIES_PREFIX_LEN}};
    }
    pt_scan sc = {.table = PT_TABLE_INDEX, .ranges = r, .nranges = nr};
    z->nd = 0;
    int rv = deadline_passed(z->q);
    return rv ? rv : pt_backend_scan(st->be, &sc, on_series_row, z);
}

/* ---- 2. the samples ---- */

/* The data and exemplar rows of series s in the bucket at base, the window's part of it. */
static int erase_bucket(deleter *z, const series *s, int64_t base)
{
    int64_t lo = z->start > base ? z->start - base : 0;
    int64_t hi = z->end - base + 1; /* exclusive */
    if (hi > PT_BUCKET_MS)
        hi = PT_BUCKET_MS;
    size_t kn = PT_ROW_KEY_LEN(s->sid.n);
    uint8_t *data = pt_arena_alloc(z->a, kn), *ex = pt_arena_alloc(z->a, kn);
    if (!data || !ex)
        return PT_ENOMEM;
    pt_row_key(data, s->sid, base);
    pt_exemplar_row_key(ex, s->sid, base);
    pt_slice qs = lo ? be32(z, (uint32_t)lo) : (pt_slice){0};
    pt_slice qe = hi < PT_BUCKET_MS ? be32(z, (uint32_t)hi) : (pt_slice){0};
    /* Exemplar cells are keyed by the start of their slot: the slots wholly inside. */
    int64_t xlo = (lo + PT_EXEMPLAR_SLOT_MS - 1) / PT_EXEMPLAR_SLOT_MS * PT_EXEMPLAR_SLOT_MS;
    int64_t xhi = hi < PT_BUCKET_MS ? hi / PT_EXEMPLAR_SLOT_MS * PT_EXEMPLAR_SLOT_MS : hi;
    int rv = add_erase(z, PT_TABLE_POINTS, (pt_slice){data, kn}, qs, qe);
    if (rv == 0 && xlo < xhi)
        rv = add_erase(z, PT_TABLE_POINTS, (pt_slice){ex, kn},
                       xlo ? be32(z, (uint32_t)xlo) : (pt_slice){0},
                       xhi < PT_BUCKET_MS ? be32(z, (uint32_t)xhi) : (pt_slice){0});
    /* The roll-ups' cells of the window's times. */
    for (size_t i = 0; i < z->st->nrollups && rv == 0; i++)
        for (int agg = PT_AGG_COUNT; agg < PT_AGG_END && rv == 0; agg++) {
            uint8_t *r = pt_arena_alloc(z->a, kn);
            if (!r)
                return PT_ENOMEM;
            pt_rollup_row_key(r, s->sid, base, PT_ROLLUP_CODE(z->st->rollups[i].res_ms, agg));
            rv = add_erase(z, PT_TABLE_POINTS, (pt_slice){r, kn}, qs, qe);
        }
    return rv;
}

static int erase_samples(deleter *z)
{
    int64_t span = z->st->index_bucket_ms;
    int64_t last_base = -1;
    size_t last_i = (size_t)-1;
    for (size_t k = 0; k < z->nd; k++) {
        const sday *d = &z->d[k];
        int64_t lo = d->day > z->start ? d->day : z->start;
        int64_t hi = d->day + span - 1 < z->end ? d->day + span - 1 : z->end;
        for (int64_t base = pt_bucket_base(lo); base <= hi; base += PT_BUCKET_MS) {
            if (d->i == last_i && base <= last_base)
                continue; /* the series' bucket is erased already (days come in order) */
            int rv = erase_bucket(z, &z->v[d->i], base);
            if (rv != 0)
                return rv;
            last_i = d->i;
            last_base = base;
        }
    }
    return erase_all(z);
}

/* ---- 3. what is left ---- */

static int stop_at_first(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)row, (void)qual, (void)value;
    *(int *)ud = 1;
    return 1;
}

/* Whether series s has a cell in [day, day + span) in its rows of code (0: its data rows,
 * else roll-up rows). */
static int has_cells(deleter *z, const series *s, int64_t day, int64_t code, int *found)
{
    int64_t span = z->st->index_bucket_ms;
    for (int64_t base = pt_bucket_base(day); base < day + span && !*found;
         base += PT_BUCKET_MS) {
        size_t kn = PT_ROW_KEY_LEN(s->sid.n);
        uint8_t *key = pt_arena_alloc(z->a, kn + 1);
        if (!key)
            return PT_ENOMEM;
        if (code)
            pt_rollup_row_key(key, s->sid, base, code);
        else
            pt_row_key(key, s->sid, base);
        key[kn] = 0;
        pt_row_range r = {{key, kn}, {key, kn + 1}};
        int64_t lo = day > base ? day - base : 0, hi = day + span - base;
        pt_scan sc = {.table = PT_TABLE_POINTS, .ranges = &r, .nranges = 1};
        if (lo)
            sc.qual_start = be32(z, (uint32_t)lo);
        if (hi < PT_BUCKET_MS)
            sc.qual_end = be32(z, (uint32_t)hi);
        int rv = pt_backend_scan(z->st->be, &sc, stop_at_first, found);
        if (rv != 0)
            return rv;
    }
    return 0;
}

/* Whether series s has a sample in [day, day + span): in its data rows, or in a roll-up
 * stage's (whose "last" row has a cell for every window with samples). */
static int has_samples(deleter *z, const series *s, int64_t day, int *found)
{
    *found = 0;
    int rv = has_cells(z, s, day, 0, found);
    for (size_t i = 0; i < z->st->nrollups && rv == 0 && !*found; i++)
        rv = has_cells(z, s, day, PT_ROLLUP_CODE(z->st->rollups[i].res_ms, PT_AGG_LAST), found);
    return rv;
}

static int find_empty(deleter *z, size_t *empty)
{
    int64_t span = z->st->index_bucket_ms;
    *empty = 0;
    for (size_t k = 0; k < z->nd; k++) {
        sday *d = &z->d[k];
        int found = 0;
        int whole = z->start <= d->day && d->day + span - 1 <= z->end && d->day + span <= z->now;
        if (!whole) {
            int rv = deadline_passed(z->q);
            if (rv == 0)
                rv = has_samples(z, &z->v[d->i], d->day, &found);
            if (rv != 0)
                return rv;
        }
        d->empty = !found;
        *empty += d->empty;
    }
    return 0;
}

/* ---- 4. and 5. the index ---- */

/* Erases the cells batch b holds (each exactly: [qual, qual || 0x00)). */
static int erase_cells(deleter *z, const batch *b)
{
    const pt_mutation *m = (const pt_mutation *)(const void *)pt_buf_data(&b->buf);
    for (size_t i = 0; i < b->n; i++) {
        uint8_t *q = pt_arena_alloc(z->a, m[i].qual.n + 1);
        if (!q)
            return PT_ENOMEM;
        memcpy(q, m[i].qual.p, m[i].qual.n);
        q[m[i].qual.n] = 0;
        int rv = add_erase(z, m[i].table, m[i].row, (pt_slice){q, m[i].qual.n},
                           (pt_slice){q, m[i].qual.n + 1});
        if (rv != 0)
            return rv;
    }
    return 0;
}

/* Whether the list of label l in day still names a series. */
static int list_left(deleter *z, const pt_label *l, int64_t day, int *left)
{
    uint8_t *k = pt_arena_alloc(z->a, 2 * PT_INDEX_PREFIX_MAX(l->name.n, l->value.n));
    if (!k)
        return PT_ENOMEM;
    uint8_t *e = is_name_label(l) ? pt_index_metric_prefix(k, l->value, day)
                                  : pt_index_posting_prefix(k, l->name, l->value, day);
    pt_slice prefix = {k, (size_t)(e - k)}, end;
    pt_prefix_end(e, prefix, &end);
    pt_row_range r = {prefix, end};
    pt_scan sc = {.table = PT_TABLE_INDEX, .ranges = &r, .nranges = 1, .row_limit = 1};
    *left = 0;
    return pt_backend_scan(z->st->be, &sc, stop_at_first, left);
}

static int erase_index(deleter *z)
{
    pt_store *st = z->st;
    batch b = {.key_limit = pt_store_key_limit(st)};
    pt_buf_init_arena(&b.buf, z->a, 0);
    pt_buf_init_arena(&b.srows, z->a, 0);
    pt_buf_init_arena(&b.lrows, z->a, 0);
    int rv = 0;
    for (size_t k = 0; k < z->nd && rv == 0; k++) {
        const sday *d = &z->d[k];
        const series *s = &z->v[d->i];
        size_t rows = 0;
        if (d->empty)
            rv = pt_index_series_rows(&b, z->a, st, s->labels, s->nlabels, s->sid, d->day, &rows);
    }
    if (rv == 0)
        rv = erase_cells(z, &b);
    if (rv == 0)
        rv = erase_all(z);
    /* The caches, also after a failed erase (some cells may be gone). */
    if (st->refs)
        pt_write_invalidate(st->refs, &b.srows);
    if (st->lists)
        pt_write_invalidate(st->lists, &b.lrows);
    for (size_t k = 0; k < z->nd; k++)
        if (z->d[k].empty) {
            pt_index_key key = pt_store_key(st, z->v[z->d[k].i].sid, z->d[k].day);
            if (st->cache)
                pt_index_cache_remove(st->cache, &key, 1);
        }
    if (rv != 0)
        return rv;
    /* The values rows no series of the day lists any more: each (label, day) looked at
     * once (the group's series share most of their values). */
    batch vb = {.key_limit = b.key_limit};
    pt_buf_init_arena(&vb.buf, z->a, 0);
    pt_keyset seen = {0};
    for (size_t k = 0; k < z->nd && rv == 0; k++) {
        const sday *d = &z->d[k];
        const series *s = &z->v[d->i];
        for (size_t j = 0; d->empty && j < s->nlabels && rv == 0; j++) {
            int left = 0;
            valrow vr;
            pt_index_key key;
            if ((rv = pt_index_values_row(z->a, st, &s->labels[j], d->day, &vr, &key)) != 0)
                break;
            if ((rv = pt_keyset_put(&seen, key)) <= 0) /* 0: looked at already */
                continue;
            if ((rv = list_left(z, &s->labels[j], d->day, &left)) != 0 || left)
                continue;
            if (st->cache)
                pt_index_cache_remove(st->cache, &key, 1);
            rv = push(&vb, PT_TABLE_INDEX, vr.key, (pt_slice){(const uint8_t *)"l", 1}, vr.cell,
                      vr.ver);
        }
    }
    pt_keyset_free(&seen);
    if (rv == 0)
        rv = erase_cells(z, &vb);
    return rv == 0 ? erase_all(z) : rv;
}

int pt_store_delete(pt_store *st, const series *v, size_t n, int64_t start, int64_t end,
                    pt_arena *a, const atomic_int *cancel, pt_delete_result *res)
{
    memset(res, 0, sizeof(*res));
    if (start < 0)
        start = 0;
    if (end > PT_MAX_TIME_MS)
        end = PT_MAX_TIME_MS;
    if (end < start || n == 0)
        return 0;
    qctx q;
    qctx_start(&q, st, a, cancel);
    q.deadline_ns = 0; /* an admin's delete runs to its end */
    int64_t now = pt_store_now(st);
    int rv = 0;
    for (size_t g = 0; g < n && rv == 0; g += GROUP) {
        pt_arena ga;
        pt_arena_init(&ga, 1 << 16, 0);
        deleter z = {.st = st, .a = &ga, .q = &q, .v = v + g, .n = n - g < GROUP ? n - g : GROUP,
                     .start = start, .end = end, .now = now};
        size_t empty = 0;
        if ((rv = find_days(&z)) == 0 && (rv = erase_samples(&z)) == 0 &&
            (rv = find_empty(&z, &empty)) == 0 && (rv = erase_index(&z)) == 0) {
            size_t with_days = 0;
            for (size_t k = 0; k < z.nd; k++)
                with_days += k == 0 || z.d[k].i != z.d[k - 1].i;
            res->series += with_days;
            res->series_days += z.nd;
            res->index_days_erased += empty;
        }
        pt_arena_free(&ga);
    }
    return rv;
}
