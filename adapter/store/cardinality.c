/* Cardinality of one index bucket from its rows: the values rows of each label name, a
 * batch at a time, then the lists of that batch's values (cells counted, not read). */
#include "cardinality.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "read_int.h"
#include "rowkey.h"

enum { BATCH = 512 }; /* values whose lists one scan counts */

/* ---- the largest max items: a min-heap, the smallest count (then the largest name) on
 * top ---- */

/* 1 when (va, na) ranks below (vb, nb): a smaller count, or the same and a later name. */
static int below(uint64_t va, pt_slice na, uint64_t vb, pt_slice nb)
{
    return va < vb || (va == vb && pt_slice_cmp(na, nb) > 0);
}

static int item_below(const pt_card_item *a, const pt_card_item *b)
{
    return below(a->value, (pt_slice){a->name.p, a->name.len}, b->value,
                 (pt_slice){b->name.p, b->name.len});
}

static void swap(pt_card_item *a, pt_card_item *b)
{
    pt_card_item t = *a;
    *a = *b;
    *b = t;
}

static void sift_down(pt_card_top *t, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        if (l < t->n && item_below(&t->v[l], &t->v[m]))
            m = l;
        if (l + 1 < t->n && item_below(&t->v[l + 1], &t->v[m]))
            m = l + 1;
        if (m == i)
            return;
        swap(&t->v[i], &t->v[m]);
        i = m;
    }
}

/* Offers name (a, or a "=" b when b is given) with count value. 0 or PT_ENOMEM. */
static int top_offer(pt_card_top *t, pt_slice a, const pt_slice *b, uint64_t value,
                     pt_buf *scratch)
{
    if (t->max == 0 || (t->n == t->max && value < t->v[0].value))
        return 0;
    pt_buf_reset(scratch);
    int rv = pt_buf_append(scratch, a.p, a.n);
    if (rv == 0 && b) {
        rv = pt_buf_append(scratch, "=", 1);
        rv = rv ? rv : pt_buf_append(scratch, b->p, b->n);
    }
    if (rv)
        return rv;
    pt_slice name = {scratch->p, scratch->len};
    size_t i;
    if (t->n < t->max) {
        if (!t->v && !(t->v = calloc(t->max, sizeof(*t->v))))
            return PT_ENOMEM;
        i = t->n++;
        pt_buf_init(&t->v[i].name, 0);
    } else {
        if (!below(t->v[0].value, (pt_slice){t->v[0].name.p, t->v[0].name.len}, value, name))
            return 0;
        i = 0;
    }
    pt_buf_reset(&t->v[i].name);
    if (pt_buf_append(&t->v[i].name, name.p, name.n) != 0)
        return PT_ENOMEM;
    t->v[i].value = value;
    if (i == 0 && t->n == t->max) {
        sift_down(t, 0);
        return 0;
    }
    for (; i > 0 && item_below(&t->v[i], &t->v[(i - 1) / 2]); i = (i - 1) / 2)
        swap(&t->v[i], &t->v[(i - 1) / 2]);
    return 0;
}

static int rank_cmp(const void *x, const void *y)
{
    const pt_card_item *a = x, *b = y;
    return item_below(a, b) - item_below(b, a); /* largest first */
}

static void top_free(pt_card_top *t)
{
    for (size_t i = 0; i < t->n; i++)
        pt_buf_free(&t->v[i].name);
    free(t->v);
    memset(t, 0, sizeof(*t));
}

void pt_cardinality_free(pt_cardinality *c)
{
    top_free(&c->by_metric);
    top_free(&c->values_by_name);
    top_free(&c->bytes_by_name);
    top_free(&c->by_pair);
}

/* ---- one label name ---- */

typedef struct batch {
    qctx *q;
    pt_arena a;   /* the batch's values and keys */
    size_t skip;  /* bytes of a values row before its value */
    pt_slice v[BATCH];
    pt_slice end[BATCH];
    struct keyed {
        pt_slice start;
        size_t i;
    } order[BATCH]; /* the values' lists by start */
    uint64_t cells[BATCH];
    size_t n, cur; /* values; the list being counted */
    uint64_t bytes;
    pt_buf last; /* the last values row read */
} batch;

static int on_value(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)qual;
    batch *b = ud;
    int rv = past_deadline(b->q);
    if (rv)
        return rv;
    if (b->n == BATCH) /* another cell of the row (none is written); the batch is full */
        return 1;
    pt_slice text;
    rv = pt_index_part_text(&b->a, (pt_slice){row.p + b->skip, row.n - b->skip}, value, &text);
    if (rv)
        return rv;
    b->v[b->n++] = text;
    b->bytes += text.n;
    pt_buf_reset(&b->last);
    return pt_buf_append(&b->last, row.p, row.n);
}

static int start_cmp(const void *x, const void *y)
{
    return pt_slice_cmp(((const struct keyed *)x)->start, ((const struct keyed *)y)->start);
}

static int on_list_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)qual, (void)value;
    batch *b = ud;
    int rv = past_deadline(b->q);
    if (rv)
        return rv;
    while (b->cur < b->n && pt_slice_cmp(row, b->end[b->order[b->cur].i]) >= 0)
        b->cur++;
    if (b->cur < b->n && pt_slice_cmp(row, b->order[b->cur].start) >= 0)
        b->cells[b->order[b->cur].i]++; /* a cell per series; rows shared by references */
    return 0;
}

static int scan(qctx *q, const pt_row_range *r, size_t n, size_t row_limit, pt_cell_fn fn,
                void *ud)
{
    size_t visited = 0;
    pt_scan s = {.table = PT_TABLE_INDEX,
                 .ranges = r,
                 .nranges = n,
                 .row_limit = row_limit,
                 .visited = &visited,
                 .cold = &q->cold};
    int rv = deadline_passed(q);
    rv = rv ? rv : pt_backend_scan(q->st->be, &s, fn, ud);
    q->st->stats->read_rows_scanned += visited;
    return rv;
}

/* Counts the lists of the batch's values and offers them. */
static int count_lists(batch *b, pt_slice name, pt_cardinality *c, pt_buf *scratch)
{
    qctx *q = b->q;
    int metric = pt_slice_eq(name, PT_SLICE_LIT("__name__"));
    int64_t day = q->day_first, after = day + q->st->index_bucket_ms;
    pt_row_range *r = pt_arena_alloc(&b->a, b->n * sizeof(*r));
    if (!r)
        return PT_ENOMEM;
    for (size_t i = 0; i < b->n; i++) {
        size_t cap = PT_INDEX_PREFIX_MAX(name.n, b->v[i].n);
        uint8_t *k0 = pt_arena_alloc(&b->a, 2 * cap);
        if (!k0)
            return PT_ENOMEM;
        uint8_t *k1 = k0 + cap;
        uint8_t *e0 = metric ? pt_index_metric_prefix(k0, b->v[i], day)
                             : pt_index_posting_prefix(k0, name, b->v[i], day);
        uint8_t *e1 = metric ? pt_index_metric_prefix(k1, b->v[i], after)
                             : pt_index_posting_prefix(k1, name, b->v[i], after);
        b->order[i] = (struct keyed){{k0, (size_t)(e0 - k0)}, i};
        b->end[i] = (pt_slice){k1, (size_t)(e1 - k1)};
        b->cells[i] = 0;
    }
    qsort(b->order, b->n, sizeof(*b->order), start_cmp);
    for (size_t i = 0; i < b->n; i++)
        r[i] = (pt_row_range){b->order[i].start, b->end[b->order[i].i]};
    b->cur = 0;
    int rv = scan(q, r, b->n, 0, on_list_cell, b);
    for (size_t i = 0; i < b->n && rv == 0; i++) {
        rv = top_offer(&c->by_pair, name, &b->v[i], b->cells[i], scratch);
        if (rv == 0 && metric) {
            c->series += b->cells[i];
            rv = top_offer(&c->by_metric, b->v[i], NULL, b->cells[i], scratch);
        }
    }
    return rv;
}

static int count_name(qctx *q, pt_slice name, batch *b, pt_cardinality *c, pt_buf *scratch)
{
    size_t cap = PT_INDEX_PREFIX_MAX(name.n, 0);
    uint8_t *k0 = pt_arena_alloc(q->a, 2 * cap);
    if (!k0)
        return PT_ENOMEM;
    uint8_t *k1 = k0 + cap;
    uint8_t *e0 = pt_index_values_prefix(k0, name, q->day_first);
    uint8_t *e1 = pt_index_values_prefix(k1, name, q->day_first + q->st->index_bucket_ms);
    b->skip = (size_t)(e0 - k0);
    pt_buf from;
    pt_buf_init(&from, 0);
    int rv = pt_buf_append(&from, k0, b->skip);
    uint64_t values = 0;
    b->bytes = 0;
    for (int more = 1; more && rv == 0;) {
        pt_arena_reset(&b->a);
        b->n = 0;
        pt_row_range r = {{from.p, from.len}, {k1, (size_t)(e1 - k1)}};
        rv = scan(q, &r, 1, BATCH, on_value, b);
        if (rv || b->n == 0)
            break;
        values += b->n;
        more = b->n == BATCH;
        /* The next batch starts after the last row: its key || 0x00. */
        pt_buf_reset(&from);
        rv = pt_buf_append(&from, b->last.p, b->last.len);
        rv = rv ? rv : pt_buf_append(&from, "", 1);
        rv = rv ? rv : count_lists(b, name, c, scratch);
    }
    pt_buf_free(&from);
    c->pairs += values;
    rv = rv ? rv : top_offer(&c->values_by_name, name, NULL, values, scratch);
    return rv ? rv : top_offer(&c->bytes_by_name, name, NULL, b->bytes, scratch);
}

int pt_cardinality_count(pt_store *st, pt_arena *a, int64_t at, size_t limit,
                         const atomic_int *cancel, pt_cardinality *c)
{
    memset(c, 0, sizeof(*c));
    c->by_metric.max = c->values_by_name.max = c->bytes_by_name.max = c->by_pair.max = limit;
    qctx qc;
    qctx *q = &qc;
    qctx_start(q, st, a, cancel);
    qc.day_first = qc.day_last = at - at % st->index_bucket_ms;
    pt_slice *names;
    size_t nn;
    int capped;
    int rv = pt_select_names(q, SIZE_MAX, &names, &nn, &capped);
    if (rv)
        return rv;
    batch *b = calloc(1, sizeof(*b));
    if (!b)
        return PT_ENOMEM;
    b->q = q;
    pt_arena_init(&b->a, 0, 0);
    pt_buf_init(&b->last, 0);
    pt_buf scratch;
    pt_buf_init(&scratch, 0);
    for (size_t i = 0; i < nn && rv == 0; i++)
        rv = count_name(q, names[i], b, c, &scratch);
    pt_buf_free(&scratch);
    pt_buf_free(&b->last);
    pt_arena_free(&b->a);
    free(b);
    pt_card_top *tops[] = {&c->by_metric, &c->values_by_name, &c->bytes_by_name, &c->by_pair};
    for (size_t i = 0; i < sizeof(tops) / sizeof(tops[0]); i++)
        if (tops[i]->n > 1)
            qsort(tops[i]->v, tops[i]->n, sizeof(*tops[i]->v), rank_cmp);
    return rv;
}
