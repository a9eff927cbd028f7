/*
 * The head of the points table: the cells written since the last flush, by row.
 *
 * Why: Prometheus sends one sample per series per request, 2000 random series at a time.
 * One RocksDB key per sample would mean a skiplist insert of a ~150-byte key per sample
 * plus its WAL bytes, most of the server's CPU. Here a sample costs a hash lookup
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

/* A run's next capacity: doubled up to 512 bytes, then a quarter more (in 16-byte steps).
 * A run grows with its samples rather than starting at what its row used last time: a
 * generation's runs would otherwise hold their whole room from their first sample on, and
 * the shards not being flushed would hold a full generation each. */
static uint32_t zrun_next_cap(uint32_t cap)
{
    if (cap == 0)
        return 32;
    return cap < 512 ? 2 * cap : cap + (cap / 4 + 15) / 16 * 16;
}

static hshard *shard(head *h, const hrow *r)
{
    return &h->sh[pt_emb_shard_of(r->hash)];
}

/* Samples held by generation g of shard sh grew or shrank by n bytes. */
static void held_add(head *h, hshard *sh, unsigned g, size_t n)
{
    sh->cell_bytes[g] += n;
    if (g == sh->cur)
        h->cur_bytes += n;
}

static void held_sub(head *h, hshard *sh, unsigned g, size_t n)
{
    sh->cell_bytes[g] -= n;
    if (g == sh->cur)
        h->cur_bytes -= n;
}

/* 1 when the cell can go into the run: nothing in the array yet, 8 bytes, in order, room. */
static int zrun_takes(const hcells *s, uint32_t q, size_t vlen)
{
    if (s->n != 0 || vlen != 8)
        return 0;
    const zrun *z = s->z;
    return !z || ((z->n == 0 || q > z->t) && z->cap < ZRUN_CAP_MAX);
}

static int zrun_append(head *h, hshard *sh, unsigned g, hcells *s, uint32_t q, const uint8_t *v)
{
    zrun *z = s->z;
    size_t used = z ? zrun_used(z) : 0;
    if (!z || z->cap - used < ZRUN_SAMPLE_MAX) {
        uint32_t old = z ? z->cap : 0, cap = zrun_next_cap(old);
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
    held_add(h, sh, g, zrun_used(z) - used);
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
    memset(h, 0, sizeof(*h));
    for (unsigned k = 0; k < HEAD_SHARDS; k++) {
        hshard *sh = &h->sh[k];
        sh->mask = 127;
        sh->tab = calloc(sh->mask + 1, sizeof(*sh->tab));
        if (!sh->tab)
            return PT_ENOMEM; /* pt_emb_head_free releases the others */
        h->bytes += (sh->mask + 1) * sizeof(*sh->tab);
    }
    return 0;
}

hrow *pt_emb_head_find(head *h, const uint8_t *key, size_t n, uint64_t hash)
{
    const hshard *sh = &h->sh[pt_emb_shard_of(hash)];
    for (hrow *r = sh->tab[hash & sh->mask]; r; r = r->next)
        if (r->hash == hash && r->keylen == n && memcmp(r->key, key, n) == 0)
            return r;
    return NULL;
}

static int tab_grow(head *h, hshard *sh)
{
    size_t nb = (sh->mask + 1) * 2;
    hrow **t = calloc(nb, sizeof(*t));
    if (!t)
        return PT_ENOMEM;
    for (size_t i = 0; i <= sh->mask; i++) {
        hrow *r = sh->tab[i];
        while (r) {
            hrow *next = r->next;
            r->next = t[r->hash & (nb - 1)];
            t[r->hash & (nb - 1)] = r;
            r = next;
        }
    }
    h->bytes += (nb - (sh->mask + 1)) * sizeof(*t);
    free(sh->tab);
    sh->tab = t;
    sh->mask = nb - 1;
    return 0;
}

hrow *pt_emb_head_get(head *h, const uint8_t *key, size_t n, uint64_t hash)
{
    hrow *r = pt_emb_head_find(h, key, n, hash);
    if (r)
        return r;
    hshard *sh = &h->sh[pt_emb_shard_of(hash)];
    if (sh->nrows >= sh->mask + 1 && tab_grow(h, sh) != 0)
        return NULL;
    r = calloc(1, sizeof(*r) + n);
    if (!r)
        return NULL;
    r->hash = hash;
    r->keylen = (uint32_t)n;
    r->s[0].sorted = r->s[1].sorted = 1;
    memcpy(r->key, key, n);
    r->next = sh->tab[hash & sh->mask];
    sh->tab[hash & sh->mask] = r;
    sh->nrows++;
    h->nrows++;
    h->bytes += sizeof(*r) + n;
    return r;
}

static void free_value(head *h, hshard *sh, unsigned g, cell *c)
{
    if (c->vlen > 8) {
        free(c->v.p);
        h->bytes -= c->vlen;
        held_sub(h, sh, g, c->vlen);
    }
}

/* Empties generation g of r. Its run goes back to the allocator, for the other shards'
 * runs to grow into; the cell array stays for the next cells (rewrites and backfill come
 * in streams), halved when far too big this time. */
static void clear(head *h, hrow *r, unsigned g)
{
    hshard *sh = shard(h, r);
    hcells *s = &r->s[g];
    for (uint32_t i = 0; i < s->n; i++)
        free_value(h, sh, g, &s->c[i]);
    if (s->z) {
        zrun *z = s->z;
        size_t used = zrun_used(z);
        sh->cells[g] -= z->n;
        held_sub(h, sh, g, used);
        h->bytes -= sizeof(*z) + z->cap;
        free(z);
        s->z = NULL;
    }
    sh->cells[g] -= s->n;
    held_sub(h, sh, g, (size_t)s->n * sizeof(cell));
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

/* Frees an empty row (unlinked by the caller) and its cell arrays. */
static void free_row(head *h, hrow *r)
{
    for (unsigned g = 0; g < 2; g++) {
        h->bytes -= r->s[g].cap * sizeof(cell);
        free(r->s[g].c);
    }
    h->bytes -= sizeof(*r) + r->keylen;
    shard(h, r)->nrows--;
    h->nrows--;
    free(r);
}

void pt_emb_head_free(head *h)
{
    for (unsigned k = 0; k < HEAD_SHARDS; k++) {
        hshard *sh = &h->sh[k];
        for (size_t b = 0; sh->tab && b <= sh->mask; b++) {
            hrow *r = sh->tab[b];
            while (r) {
                hrow *next = r->next;
                clear(h, r, 0);
                clear(h, r, 1);
                free_row(h, r);
                r = next;
            }
        }
        free(sh->tab);
        free(sh->dirty[0]);
        free(sh->dirty[1]);
    }
    memset(h, 0, sizeof(*h));
}

int pt_emb_head_append(head *h, hrow *r, uint32_t q, pt_slice v)
{
    hshard *sh = shard(h, r);
    unsigned g = sh->cur;
    hcells *s = &r->s[g];
    int rv, first = hcells_count(s) == 0;
    r->mark = h->tick;
    if (q > h->newest)
        h->newest = q;
    if (first) {
        size_t cap = sh->dirty_cap[g];
        if ((rv = pt_array_reserve(&sh->dirty[g], &sh->dirty_cap[g], sh->ndirty[g] + 1,
                                   sizeof(*sh->dirty[g]), 0)) != 0)
            return rv;
        h->bytes += (sh->dirty_cap[g] - cap) * sizeof(*sh->dirty[g]);
    }
    if (zrun_takes(s, q, v.n)) {
        if ((rv = zrun_append(h, sh, g, s, q, v.p)) != 0)
            return rv;
        if (first)
            sh->dirty[g][sh->ndirty[g]++] = r;
        sh->cells[g]++;
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
        held_add(h, sh, g, v.n);
    }
    if (first)
        sh->dirty[g][sh->ndirty[g]++] = r;
    held_add(h, sh, g, sizeof(cell));
    if (s->n ? s->c[s->n - 1].q >= q : s->z && s->z->n && s->z->t >= q)
        s->sorted = 0;
    s->n++;
    sh->cells[g]++;
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
            const hrow *r = rows[j + AHEAD];
            const hcells *ahead = &r->s[pt_emb_row_cur(h, r)];
            if (ahead->z)
                __builtin_prefetch(ahead->z, 1);
            else if (ahead->c)
                __builtin_prefetch(&ahead->c[ahead->n], 1);
        }
        if (j + AHEAD / 2 < k) {
            const hrow *r = rows[j + AHEAD / 2];
            const zrun *z = r->s[pt_emb_row_cur(h, r)].z;
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

/* Sorts and keeps the last write of each qualifier; sh non-NULL: frees the values of the
 * cells dropped, which generation g of sh owns. */
static uint32_t sort_dedup(head *h, hshard *sh, unsigned g, cell *c, cell *tmp, uint32_t n)
{
    msort(c, tmp, n);
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (i + 1 < n && c[i + 1].q == c[i].q) {
            if (sh)
                free_value(h, sh, g, &c[i]);
            continue;
        }
        c[k++] = c[i];
    }
    return k;
}

uint32_t pt_emb_cells_sort(cell *c, cell *tmp, uint32_t n)
{
    return sort_dedup(NULL, NULL, 0, c, tmp, n);
}

int pt_emb_head_normalize(head *h, hrow *r)
{
    hshard *sh = shard(h, r);
    unsigned g = sh->cur;
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
        held_add(h, sh, g, (size_t)z->n * sizeof(cell));
        held_sub(h, sh, g, zrun_used(z));
        s->n = (uint32_t)total;
        h->bytes -= sizeof(*z) + z->cap;
        free(z);
        s->z = NULL;
    }
    cell *tmp = malloc((size_t)s->n * sizeof(*tmp));
    if (!tmp)
        return PT_ENOMEM;
    uint32_t k = sort_dedup(h, sh, g, s->c, tmp, s->n);
    free(tmp);
    sh->cells[g] -= s->n - k;
    held_sub(h, sh, g, (size_t)(s->n - k) * sizeof(cell));
    s->n = k;
    s->sorted = 1;
    return 0;
}

static int in_range(pt_slice row, const pt_row_range *r)
{
    return pt_slice_cmp(row, r->start) >= 0 && (r->end.n == 0 || pt_slice_cmp(row, r->end) < 0);
}

static int row_empty(const hrow *r)
{
    return hcells_count(&r->s[0]) == 0 && hcells_count(&r->s[1]) == 0;
}

int pt_emb_head_collect(head *h, const pt_row_range *r, hrow ***rows, size_t *cap, size_t *n)
{
    *n = 0;
    for (unsigned k = 0; k < HEAD_SHARDS; k++) {
        const hshard *sh = &h->sh[k];
        for (size_t b = 0; b <= sh->mask; b++)
            for (hrow *x = sh->tab[b]; x; x = x->next) {
                if (row_empty(x) || (r && !in_range((pt_slice){x->key, x->keylen}, r)))
                    continue;
                int rv = pt_array_reserve(rows, cap, *n + 1, sizeof(**rows), 0);
                if (rv != 0)
                    return rv;
                (*rows)[(*n)++] = x;
            }
    }
    return 0;
}

size_t pt_emb_head_cur_cells(const head *h)
{
    size_t n = 0;
    for (unsigned k = 0; k < HEAD_SHARDS; k++)
        n += h->sh[k].cells[h->sh[k].cur];
    return n;
}

void pt_emb_head_freeze(head *h, unsigned k)
{
    hshard *sh = &h->sh[k];
    h->cur_bytes -= sh->cell_bytes[sh->cur];
    sh->cur ^= 1;
    h->cur_bytes += sh->cell_bytes[sh->cur]; /* 0: the generation was emptied */
    h->swept_bytes = 0;
}

/* Series churn must not grow the head forever. A row is dropped when it holds no cell at
 * the end of its shard's flush: it got none for a whole round of the shards, and none
 * since. Dropping a row that is still in use costs little (it is made again, and the next
 * flush looks up its last pt_cellchunk once); a walk in steps may miss or revisit rows a table
 * growth moved, which is harmless either way. */
int pt_emb_head_evict_step(head *h, unsigned k, size_t *b, size_t n)
{
    hshard *sh = &h->sh[k];
    for (size_t end = *b + n; *b <= sh->mask && *b < end; (*b)++) {
        hrow **pp = &sh->tab[*b];
        while (*pp) {
            hrow *r = *pp;
            if (row_empty(r)) {
                *pp = r->next;
                free_row(h, r);
                h->evicted++;
                continue;
            }
            pp = &r->next;
        }
    }
    return *b > sh->mask;
}

/* 1 when s, r's latest cells, is one run whose last sample is stale against newest
 * (pt_emb_head_sweep_step). The row's interval: the run's last, or for a run of one
 * sample the time since the row's last flushed one; a row with one sample known (new,
 * or back after an eviction) is not taken, its interval unknown. Reads the flush
 * fields: on the flush thread. */
static int run_stale(const hrow *r, const hcells *s, uint32_t newest)
{
    const zrun *z = s->z;
    if (s->n != 0 || !z || z->n == 0 || newest == 0 || z->t >= newest)
        return 0;
    uint64_t ival = z->tdelta;
    if (z->n == 1) {
        if (!r->known || !r->has_last || r->last_max >= z->t)
            return 0; /* one sample ever seen: no interval yet */
        ival = z->t - r->last_max;
    }
    uint64_t quiet = 4 * ival > PT_EMB_STALE_MS ? 4 * ival : PT_EMB_STALE_MS;
    return newest - z->t > quiet;
}

/* 1 when r, whose latest cells are s, looks stopped: no append for the sweep's guard of
 * wall time, and stale in sample time (run_stale). */
static int row_stopped(const head *h, const hrow *r, const hcells *s)
{
    enum { GUARD = PT_EMB_SWEEP_GUARD_MS / HEAD_TICK_MS };
    int recent = !(r->mark & ROW_SWEPT) && ((h->tick - r->mark) & HEAD_TICK_MASK) < GUARD;
    return !recent && run_stale(r, s, h->newest);
}

/* A row the flush just wrote out (its frozen cells still there) goes with them when it
 * took none since and went unlogged for more than twice its gap of log generations (the
 * freezes of any shard) before gen, three at least: a series that stopped leaves at the
 * first flush of its shard after it stopped rather than the next one. A series written
 * once a pass over many series, slower than the freezes, has a gap as long, and stays.
 * A row that stopped by both clocks (row_stopped) goes too, whatever its gap, rather than
 * stay empty until its shard's next flush. */
static int row_quiet(const head *h, const hshard *sh, const hrow *r, uint32_t gen)
{
    if (r->mark & ROW_SWEPT) /* no append since the sweep took it */
        return 1;
    if (gen == 0 || hcells_count(&r->s[sh->cur]) != 0)
        return 0;
    return gen - r->wal_gen > 2u * r->gap || row_stopped(h, r, &r->s[sh->cur ^ 1]);
}

int pt_emb_head_clear_step(head *h, unsigned k, size_t *i, size_t n, uint32_t gen)
{
    hshard *sh = &h->sh[k];
    unsigned fz = sh->cur ^ 1;
    for (size_t end = *i + n; *i < sh->ndirty[fz] && *i < end; (*i)++) {
        hrow *r = sh->dirty[fz][*i];
        int gone = row_quiet(h, sh, r, gen); /* before its frozen cells go */
        clear(h, r, fz);
        if (!gone)
            continue;
        hrow **pp = &sh->tab[r->hash & sh->mask];
        while (*pp != r)
            pp = &(*pp)->next;
        *pp = r->next;
        free_row(h, r);
        h->evicted++;
    }
    if (*i < sh->ndirty[fz])
        return 0;
    sh->ndirty[fz] = 0;
    return 1;
}

void pt_emb_head_drop_frozen(head *h, unsigned k)
{
    size_t b = 0, i = 0;
    /* Before the frozen cells go: a row flushed now holds cells. */
    pt_emb_head_evict_step(h, k, &b, SIZE_MAX / 2);
    pt_emb_head_clear_step(h, k, &i, SIZE_MAX / 2, 0);
}

/* Moves r's current cells, one run, into the empty other generation of its shard and
 * lists it there; 0 or PT_ENOMEM (r unchanged). */
static int sweep_move(head *h, hshard *sh, hrow *r)
{
    unsigned g = sh->cur, fz = g ^ 1;
    size_t cap = sh->dirty_cap[fz];
    int rv = pt_array_reserve(&sh->dirty[fz], &sh->dirty_cap[fz], sh->ndirty[fz] + 1,
                              sizeof(*sh->dirty[fz]), 0);
    if (rv != 0)
        return rv;
    h->bytes += (sh->dirty_cap[fz] - cap) * sizeof(*sh->dirty[fz]);
    sh->dirty[fz][sh->ndirty[fz]++] = r;
    /* The other generation is empty; its cell array, if any, stays for new writes. */
    hcells t = r->s[fz];
    r->s[fz] = r->s[g];
    r->s[g] = t;
    uint32_t n = r->s[fz].z->n;
    size_t used = zrun_used(r->s[fz].z);
    sh->cells[g] -= n;
    sh->cells[fz] += n;
    held_sub(h, sh, g, used);
    held_add(h, sh, fz, used);
    h->swept_bytes += used;
    sh->flushing = 1;
    h->swept++;
    return 0;
}

int pt_emb_head_sweep_step(head *h, unsigned k, int frozen, size_t *i, size_t *j, size_t n)
{
    hshard *sh = &h->sh[k];
    unsigned g = frozen ? sh->cur ^ 1 : sh->cur;
    hrow **list = sh->dirty[g];
    for (size_t end = *i + n; *i < sh->ndirty[g] && *i < end; (*i)++) {
        hrow *r = list[*i];
        int take = 0;
        if (row_stopped(h, r, &r->s[g])) {
            r->mark = ROW_SWEPT;
            take = !frozen && sweep_move(h, sh, r) == 0;
        }
        /* The list is compacted as it is walked: [*j, *i) holds rows gone to the other
         * generation, and writers append past the end meanwhile. */
        if (!take)
            list[(*j)++] = r;
    }
    if (*i < sh->ndirty[g])
        return 0;
    sh->ndirty[g] = *j;
    return 1;
}
