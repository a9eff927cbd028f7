/*
 * The head of the points table: the cells written since the last flush, by row.
 *
 * Why: Prometheus sends one sample per series per request, 2000 random series at a time.
 * One RocksDB key per sample meant a skiplist insert of a ~150-byte key per sample plus its
 * WAL bytes, and that cost was most of the server's CPU. Here a sample costs a hash lookup
 * of its row, 21 bytes appended to the log (wal.c) and 16 bytes appended to the row's
 * cells; flush.c turns them into chunks now and then.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "embedded_int.h"
#include "error.h"

int pt_emb_head_init(head *h)
{
    h->mask = 1023;
    h->tab = calloc(h->mask + 1, sizeof(*h->tab));
    if (!h->tab)
        return PT_ENOMEM;
    h->bytes = (h->mask + 1) * sizeof(*h->tab);
    return 0;
}

hrow *pt_emb_head_find(head *h, const uint8_t *key, size_t n, uint64_t hash)
{
    for (hrow *r = h->tab[hash & h->mask]; r; r = r->next)
        if (r->hash == hash && r->keylen == n && memcmp(r->key, key, n) == 0)
            return r;
    return NULL;
}

static int tab_grow(head *h)
{
    size_t nb = (h->mask + 1) * 2;
    hrow **t = calloc(nb, sizeof(*t));
    if (!t)
        return PT_ENOMEM;
    for (size_t i = 0; i <= h->mask; i++) {
        hrow *r = h->tab[i];
        while (r) {
            hrow *next = r->next;
            r->next = t[r->hash & (nb - 1)];
            t[r->hash & (nb - 1)] = r;
            r = next;
        }
    }
    h->bytes += (nb - (h->mask + 1)) * sizeof(*t);
    free(h->tab);
    h->tab = t;
    h->mask = nb - 1;
    return 0;
}

hrow *pt_emb_head_get(head *h, const uint8_t *key, size_t n, uint64_t hash)
{
    hrow *r = pt_emb_head_find(h, key, n, hash);
    if (r)
        return r;
    if (h->nrows >= h->mask + 1 && tab_grow(h) != 0)
        return NULL;
    r = calloc(1, sizeof(*r) + n);
    if (!r)
        return NULL;
    r->hash = hash;
    r->keylen = (uint32_t)n;
    r->sorted = 1;
    memcpy(r->key, key, n);
    r->next = h->tab[hash & h->mask];
    h->tab[hash & h->mask] = r;
    h->nrows++;
    h->bytes += sizeof(*r) + n;
    return r;
}

static void free_value(head *h, cell *c)
{
    if (c->vlen > 8) {
        free(c->v.p);
        h->bytes -= c->vlen;
        h->cell_bytes -= c->vlen;
    }
}

/* The cell array stays for the next samples (no heap call per row and flush in steady
 * state); one that was far too big this time is halved. */
void pt_emb_head_clear(head *h, hrow *r)
{
    for (uint32_t i = 0; i < r->n; i++)
        free_value(h, &r->cells[i]);
    h->cells -= r->n;
    h->cell_bytes -= (size_t)r->n * sizeof(cell);
    if (r->cap > 16 && r->n < r->cap / 4) {
        cell *c = realloc(r->cells, (r->cap / 2) * sizeof(*c));
        if (c) {
            h->bytes -= (r->cap - r->cap / 2) * sizeof(cell);
            r->cells = c;
            r->cap /= 2;
        }
    }
    r->n = 0;
    r->sorted = 1;
}

/* Gives an idle row's cell array back. */
static void release_cells(head *h, hrow *r)
{
    h->bytes -= r->cap * sizeof(cell);
    free(r->cells);
    r->cells = NULL;
    r->cap = 0;
}

void pt_emb_head_free(head *h)
{
    if (h->tab) {
        for (size_t b = 0; b <= h->mask; b++) {
            hrow *r = h->tab[b];
            while (r) {
                hrow *next = r->next;
                pt_emb_head_clear(h, r);
                release_cells(h, r);
                free(r);
                r = next;
            }
        }
    }
    free(h->tab);
    memset(h, 0, sizeof(*h));
}

int pt_emb_head_append(head *h, hrow *r, uint32_t q, pt_slice v)
{
    if (r->n == r->cap) {
        size_t cap = r->cap;
        int rv = pt_array_reserve(&r->cells, &r->cap, (size_t)r->n + 1, sizeof(cell), UINT32_MAX);
        if (rv != 0)
            return rv;
        h->bytes += (r->cap - cap) * sizeof(cell);
    }
    cell *c = &r->cells[r->n];
    c->q = q;
    c->vlen = (uint32_t)v.n;
    if (v.n <= 8) {
        if (v.n)
            memcpy(c->v.in, v.p, v.n);
    } else {
        c->v.p = malloc(v.n);
        if (!c->v.p)
            return PT_ENOMEM;
        memcpy(c->v.p, v.p, v.n);
        h->bytes += v.n;
        h->cell_bytes += v.n;
    }
    h->cell_bytes += sizeof(cell);
    if (r->n && r->cells[r->n - 1].q >= q)
        r->sorted = 0;
    r->n++;
    h->cells++;
    return 0;
}

int pt_emb_head_apply(head *h, hrow *const *rows, const pt_mutation *m, size_t n, size_t k)
{
    enum { AHEAD = 8 };
    int rv = 0;
    for (size_t i = 0, j = 0; i < n && rv == 0; i++) {
        if (m[i].table != PT_TABLE_POINTS)
            continue;
        /* The rows are scattered over memory and the end of each one's cell array is
         * another cold line: load it early so the misses overlap instead of queueing. */
        if (j + AHEAD < k && rows[j + AHEAD]->cells) {
            const hrow *ahead = rows[j + AHEAD];
            __builtin_prefetch(&ahead->cells[ahead->n], 1);
        }
        rv = pt_emb_head_append(h, rows[j++], pt_get_be32(m[i].qual.p), m[i].value);
    }
    return rv;
}

/* Stable merge sort by qualifier: equal qualifiers keep their write order. */
static void msort(cell *a, cell *tmp, size_t n)
{
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                tmp[k++] = a[j].q < a[i].q ? a[j++] : a[i++];
            while (i < mid)
                tmp[k++] = a[i++];
            while (j < hi)
                tmp[k++] = a[j++];
        }
        memcpy(a, tmp, n * sizeof(*a));
    }
}

int pt_emb_head_normalize(head *h, hrow *r)
{
    if (r->sorted)
        return 0;
    cell *tmp = malloc((size_t)r->n * sizeof(*tmp));
    if (!tmp)
        return PT_ENOMEM;
    msort(r->cells, tmp, r->n);
    free(tmp);
    uint32_t k = 0;
    for (uint32_t i = 0; i < r->n; i++) {
        if (i + 1 < r->n && r->cells[i + 1].q == r->cells[i].q) {
            free_value(h, &r->cells[i]);
            continue;
        }
        r->cells[k++] = r->cells[i];
    }
    h->cells -= r->n - k;
    h->cell_bytes -= (size_t)(r->n - k) * sizeof(cell);
    r->n = k;
    r->sorted = 1;
    return 0;
}

static int in_range(pt_slice row, const pt_row_range *r)
{
    return pt_slice_cmp(row, r->start) >= 0 && (r->end.n == 0 || pt_slice_cmp(row, r->end) < 0);
}

int pt_emb_head_collect(head *h, const pt_row_range *r, hrow ***rows, size_t *cap, size_t *n)
{
    *n = 0;
    for (size_t b = 0; b <= h->mask; b++)
        for (hrow *x = h->tab[b]; x; x = x->next) {
            if (x->n == 0 || (r && !in_range((pt_slice){x->key, x->keylen}, r)))
                continue;
            int rv = pt_array_reserve(rows, cap, *n + 1, sizeof(**rows), 0);
            if (rv != 0)
                return rv;
            (*rows)[(*n)++] = x;
        }
    return 0;
}

/* Series churn must not grow the head forever. */
void pt_emb_head_evict_idle(head *h)
{
    for (size_t b = 0; b <= h->mask; b++) {
        hrow **pp = &h->tab[b];
        while (*pp) {
            hrow *r = *pp;
            if (r->n == 0 && r->idle) {
                *pp = r->next;
                release_cells(h, r);
                h->bytes -= sizeof(*r) + r->keylen;
                h->nrows--;
                free(r);
                continue;
            }
            r->idle = r->n == 0;
            if (r->idle)
                release_cells(h, r);
            pp = &r->next;
        }
    }
}
