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
#include "gorilla.h"

/* ---- the compressed run of a generation (embedded_int.h zrun) ---- */

/* Bytes one sample can add to a run: 145 bits after the second, 20 bytes for the second
 * (pt_gorilla_max_bytes), and a byte the padding may take. */
enum { ZRUN_SAMPLE_MAX = 21 };
/* A run stops growing here (its bit count must fit 32 bits); more cells go to the array. */
#define ZRUN_CAP_MAX ((uint32_t)1 << 28)

static void zrun_load(const zrun *z, pt_gorilla_enc *e)
{
    *e = (pt_gorilla_enc){.p = (uint8_t *)z->data, .bits = z->bits, .n = z->n, .t = z->t,
                          .tdelta = z->tdelta, .v = z->v, .leading = z->leading,
                          .trailing = z->trailing};
}

static size_t zrun_used(const zrun *z)
{
    return ((size_t)z->bits + 7) / 8;
}

static void zrun_reset(zrun *z)
{
    memset(z->data, 0, zrun_used(z));
    uint32_t cap = z->cap;
    *z = (zrun){.cap = cap, .leading = 0xff};
}

/* 1 when the cell can go into the run: nothing in the array yet, 8 bytes, in order, room. */
static int zrun_takes(const hcells *s, uint32_t q, size_t vlen)
{
    if (s->n != 0 || vlen != 8)
        return 0;
    const zrun *z = s->z;
    return !z || ((z->n == 0 || q > z->t) && z->cap < ZRUN_CAP_MAX);
}

static int zrun_append(head *h, unsigned g, hcells *s, uint32_t q, const uint8_t *v)
{
    zrun *z = s->z;
    size_t used = z ? zrun_used(z) : 0;
    if (!z || z->cap - used < ZRUN_SAMPLE_MAX) {
        /* Grown by a quarter: the run's unused tail is memory no sample uses, and a
         * series gets about as many samples in the next flush interval as in this one. */
        uint32_t old = z ? z->cap : 0, cap = z ? z->cap + (z->cap / 4 + 15) / 16 * 16 : 32;
        zrun *nz = realloc(z, sizeof(*nz) + cap);
        if (!nz)
            return PT_ENOMEM;
        if (!z) {
            *nz = (zrun){.leading = 0xff};
            h->bytes += sizeof(*nz);
        }
        memset(nz->data + old, 0, cap - old);
        nz->cap = cap;
        h->bytes += cap - old;
        s->z = z = nz;
    }
    pt_gorilla_enc e;
    zrun_load(z, &e);
    pt_gorilla_enc_add(&e, q, pt_get_be64(v));
    z->bits = (uint32_t)e.bits;
    z->n++;
    z->t = q;
    z->tdelta = (uint32_t)e.tdelta;
    z->v = e.v;
    z->leading = (uint8_t)e.leading;
    z->trailing = (uint8_t)e.trailing;
    h->cell_bytes[g] += zrun_used(z) - used;
    return 0;
}

/* The run's cells into out[0..z->n). */
static int zrun_decode(const zrun *z, cell *out)
{
    pt_gorilla_dec d;
    pt_gorilla_dec_init(&d, z->data, zrun_used(z));
    for (uint32_t i = 0; i < z->n; i++) {
        int64_t t;
        uint64_t v;
        if (pt_gorilla_dec_next(&d, &t, &v) != 0)
            return PT_EINTERNAL;
        out[i].q = (uint32_t)t;
        out[i].vlen = 8;
        pt_put_be64(out[i].v.in, v);
    }
    return 0;
}

int pt_emb_hcells_get(const hcells *s, cell **buf, size_t *cap, const cell **out, uint32_t *n)
{
    uint32_t zn = s->z ? s->z->n : 0;
    *n = zn + s->n;
    if (zn == 0) {
        *out = s->c;
        return 0;
    }
    int rv = pt_array_reserve(buf, cap, *n, sizeof(cell), 0);
    if (rv != 0)
        return rv;
    if ((rv = zrun_decode(s->z, *buf)) != 0)
        return rv;
    if (s->n)
        memcpy(*buf + zn, s->c, (size_t)s->n * sizeof(cell));
    *out = *buf;
    return 0;
}

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
    r->s[0].sorted = r->s[1].sorted = 1;
    memcpy(r->key, key, n);
    r->next = h->tab[hash & h->mask];
    h->tab[hash & h->mask] = r;
    h->nrows++;
    h->bytes += sizeof(*r) + n;
    return r;
}

static void free_value(head *h, unsigned g, cell *c)
{
    if (c->vlen > 8) {
        free(c->v.p);
        h->bytes -= c->vlen;
        h->cell_bytes[g] -= c->vlen;
    }
}

/* The cell array stays for the next samples (no heap call per row and flush in steady
 * state); one that was far too big this time is halved. */
static void clear(head *h, hrow *r, unsigned g)
{
    hcells *s = &r->s[g];
    for (uint32_t i = 0; i < s->n; i++)
        free_value(h, g, &s->c[i]);
    if (s->z) {
        zrun *z = s->z;
        size_t used = zrun_used(z);
        h->cells[g] -= z->n;
        h->cell_bytes[g] -= used;
        zrun_reset(z);
        if (z->cap > 256 && used < z->cap / 4) {
            zrun *nz = realloc(z, sizeof(*z) + z->cap / 2);
            if (nz) {
                h->bytes -= nz->cap - nz->cap / 2;
                nz->cap /= 2;
                s->z = nz;
            }
        }
    }
    h->cells[g] -= s->n;
    h->cell_bytes[g] -= (size_t)s->n * sizeof(cell);
    if (s->cap > 16 && s->n < s->cap / 4) {
        cell *c = realloc(s->c, (s->cap / 2) * sizeof(*c));
        if (c) {
            h->bytes -= (s->cap - s->cap / 2) * sizeof(cell);
            s->c = c;
            s->cap /= 2;
        }
    }
    s->n = 0;
    s->sorted = 1;
}

/* Gives an idle row's cell arrays back. */
static void release_cells(head *h, hrow *r)
{
    for (unsigned g = 0; g < 2; g++) {
        h->bytes -= r->s[g].cap * sizeof(cell);
        free(r->s[g].c);
        r->s[g].c = NULL;
        r->s[g].cap = 0;
        if (r->s[g].z) {
            h->bytes -= sizeof(zrun) + r->s[g].z->cap;
            free(r->s[g].z);
            r->s[g].z = NULL;
        }
    }
}

void pt_emb_head_free(head *h)
{
    if (h->tab) {
        for (size_t b = 0; b <= h->mask; b++) {
            hrow *r = h->tab[b];
            while (r) {
                hrow *next = r->next;
                clear(h, r, 0);
                clear(h, r, 1);
                release_cells(h, r);
                free(r);
                r = next;
            }
        }
    }
    free(h->tab);
    free(h->dirty[0]);
    free(h->dirty[1]);
    memset(h, 0, sizeof(*h));
}

int pt_emb_head_append(head *h, hrow *r, uint32_t q, pt_slice v)
{
    unsigned g = h->cur;
    hcells *s = &r->s[g];
    int rv, first = hcells_count(s) == 0;
    if (first) {
        size_t cap = h->dirty_cap[g];
        if ((rv = pt_array_reserve(&h->dirty[g], &h->dirty_cap[g], h->ndirty[g] + 1,
                                   sizeof(*h->dirty[g]), 0)) != 0)
            return rv;
        h->bytes += (h->dirty_cap[g] - cap) * sizeof(*h->dirty[g]);
    }
    if (zrun_takes(s, q, v.n)) {
        if ((rv = zrun_append(h, g, s, q, v.p)) != 0)
            return rv;
        if (first)
            h->dirty[g][h->ndirty[g]++] = r;
        h->cells[g]++;
        return 0;
    }
    if (s->n == s->cap) {
        size_t cap = s->cap;
        if ((rv = pt_array_reserve(&s->c, &s->cap, (size_t)s->n + 1, sizeof(cell), UINT32_MAX)))
            return rv;
        h->bytes += (s->cap - cap) * sizeof(cell);
    }
    cell *c = &s->c[s->n];
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
        h->cell_bytes[g] += v.n;
    }
    if (first)
        h->dirty[g][h->ndirty[g]++] = r;
    h->cell_bytes[g] += sizeof(cell);
    if (s->n ? s->c[s->n - 1].q >= q : s->z && s->z->n && s->z->t >= q)
        s->sorted = 0;
    s->n++;
    h->cells[g]++;
    return 0;
}

int pt_emb_head_apply(head *h, hrow *const *rows, const pt_mutation *m, size_t n, size_t k)
{
    enum { AHEAD = 8 };
    int rv = 0;
    for (size_t i = 0, j = 0; i < n && rv == 0; i++) {
        if (m[i].table != PT_TABLE_POINTS)
            continue;
        /* The rows are scattered over memory and the end of each one's run is another
         * cold line (two: the run's header, then where its bits end): load them early so
         * the misses overlap instead of queueing. */
        if (j + AHEAD < k) {
            const hcells *ahead = &rows[j + AHEAD]->s[h->cur];
            if (ahead->z)
                __builtin_prefetch(ahead->z, 1);
            else if (ahead->c)
                __builtin_prefetch(&ahead->c[ahead->n], 1);
        }
        if (j + AHEAD / 2 < k) {
            const zrun *z = rows[j + AHEAD / 2]->s[h->cur].z;
            if (z)
                __builtin_prefetch(&z->data[z->bits >> 3], 1);
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

/* Sorts and keeps the last write of each qualifier; h non-NULL: frees the values of the
 * cells dropped, which generation g of h owns. */
static uint32_t sort_dedup(head *h, unsigned g, cell *c, cell *tmp, uint32_t n)
{
    msort(c, tmp, n);
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (i + 1 < n && c[i + 1].q == c[i].q) {
            if (h)
                free_value(h, g, &c[i]);
            continue;
        }
        c[k++] = c[i];
    }
    return k;
}

uint32_t pt_emb_cells_sort(cell *c, cell *tmp, uint32_t n)
{
    return sort_dedup(NULL, 0, c, tmp, n);
}

int pt_emb_head_normalize(head *h, hrow *r)
{
    unsigned g = h->cur;
    hcells *s = &r->s[g];
    if (s->sorted)
        return 0;
    int rv;
    if (s->z && s->z->n) {
        /* Out of order after a run: the run's cells move into the array, rarely. */
        zrun *z = s->z;
        size_t cap = s->cap, total = (size_t)z->n + s->n;
        if ((rv = pt_array_reserve(&s->c, &s->cap, total, sizeof(cell), UINT32_MAX)) != 0)
            return rv;
        h->bytes += (s->cap - cap) * sizeof(cell);
        memmove(s->c + z->n, s->c, (size_t)s->n * sizeof(cell));
        if ((rv = zrun_decode(z, s->c)) != 0) {
            memmove(s->c, s->c + z->n, (size_t)s->n * sizeof(cell));
            return rv;
        }
        h->cell_bytes[g] += (size_t)z->n * sizeof(cell) - zrun_used(z);
        s->n = (uint32_t)total;
        h->bytes -= sizeof(*z) + z->cap;
        free(z);
        s->z = NULL;
    }
    cell *tmp = malloc((size_t)s->n * sizeof(*tmp));
    if (!tmp)
        return PT_ENOMEM;
    uint32_t k = sort_dedup(h, g, s->c, tmp, s->n);
    free(tmp);
    h->cells[g] -= s->n - k;
    h->cell_bytes[g] -= (size_t)(s->n - k) * sizeof(cell);
    s->n = k;
    s->sorted = 1;
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
            if ((hcells_count(&x->s[0]) == 0 && hcells_count(&x->s[1]) == 0) ||
                (r && !in_range((pt_slice){x->key, x->keylen}, r)))
                continue;
            int rv = pt_array_reserve(rows, cap, *n + 1, sizeof(**rows), 0);
            if (rv != 0)
                return rv;
            (*rows)[(*n)++] = x;
        }
    return 0;
}

void pt_emb_head_freeze(head *h)
{
    h->cur ^= 1;
}

/* Series churn must not grow the head forever. A row is dropped when it stayed empty
 * since the previous walk; evicting an empty row early is harmless (it holds no cells,
 * only caches), so a walk in steps may miss or revisit rows a table growth moved. */
int pt_emb_head_evict_step(head *h, size_t *b, size_t n)
{
    for (size_t end = *b + n; *b <= h->mask && *b < end; (*b)++) {
        hrow **pp = &h->tab[*b];
        while (*pp) {
            hrow *r = *pp;
            int empty = hcells_count(&r->s[0]) == 0 && hcells_count(&r->s[1]) == 0;
            if (empty && r->idle) {
                *pp = r->next;
                release_cells(h, r);
                h->bytes -= sizeof(*r) + r->keylen;
                h->nrows--;
                free(r);
                continue;
            }
            r->idle = (uint8_t)empty;
            if (r->idle)
                release_cells(h, r);
            pp = &r->next;
        }
    }
    return *b > h->mask;
}

int pt_emb_head_clear_step(head *h, size_t *i, size_t n)
{
    unsigned fz = h->cur ^ 1;
    for (size_t end = *i + n; *i < h->ndirty[fz] && *i < end; (*i)++)
        clear(h, h->dirty[fz][*i], fz);
    if (*i < h->ndirty[fz])
        return 0;
    h->ndirty[fz] = 0;
    return 1;
}

void pt_emb_head_drop_frozen(head *h)
{
    size_t b = 0, i = 0;
    /* Before the frozen cells go: a row flushed now is not idle. */
    pt_emb_head_evict_step(h, &b, SIZE_MAX / 2);
    pt_emb_head_clear_step(h, &i, SIZE_MAX / 2);
}
