/*
 * The series-row cache (index.h): what the series rows of (reference, bucket) hold, so a
 * read resolves the references its lists gave without a storage seek each.
 *
 * A chained hash table of entries, each the rows of one (reference, bucket) back to back;
 * memory bounded by evicting with a clock hand over the buckets (an entry read since the
 * hand last passed gets another turn). Stripes of counters order fills against writes:
 * a fill is kept only if no write of a series row in its stripe happened since the read
 * that produced it began, and every such write drops the entry it makes stale.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "bytes.h"
#include "error.h"
#include "index.h"
#include "rowkey.h"

enum { STRIPES = 1 << 16 };

typedef struct rentry rentry;
struct rentry {
    rentry *next;
    uint64_t ref;
    int64_t bucket;
    uint32_t len;
    uint8_t used;
    uint8_t data[];
};

struct pt_ref_cache {
    pthread_mutex_t lock;
    rentry **tab;
    size_t mask;
    size_t bytes, max_bytes; /* entries held, table included */
    size_t hand;             /* the clock's next bucket */
    size_t entries;
    _Atomic uint32_t stripe[STRIPES];
};

static uint64_t rhash(uint64_t ref, int64_t bucket)
{
    uint64_t k[2] = {ref, (uint64_t)bucket};
    return XXH3_64bits(k, sizeof(k));
}

pt_ref_cache *pt_ref_cache_new(size_t max_bytes)
{
    pt_ref_cache *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    size_t n = 1024;
    while (n < max_bytes / 256)
        n <<= 1;
    c->tab = calloc(n, sizeof(*c->tab));
    if (!c->tab) {
        free(c);
        return NULL;
    }
    c->mask = n - 1;
    c->bytes = n * sizeof(*c->tab);
    c->max_bytes = max_bytes > c->bytes * 2 ? max_bytes : c->bytes * 2;
    for (size_t i = 0; i < STRIPES; i++)
        atomic_init(&c->stripe[i], 0);
    pthread_mutex_init(&c->lock, NULL);
    return c;
}

void pt_ref_cache_free(pt_ref_cache *c)
{
    if (!c)
        return;
    for (size_t i = 0; i <= c->mask; i++)
        for (rentry *e = c->tab[i], *next; e; e = next) {
            next = e->next;
            free(e);
        }
    free(c->tab);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* The link pointing at the entry for (ref, bucket), or at the chain's end. */
static rentry **slot(pt_ref_cache *c, uint64_t h, uint64_t ref, int64_t bucket)
{
    rentry **pp = &c->tab[h & c->mask];
    while (*pp && ((*pp)->ref != ref || (*pp)->bucket != bucket))
        pp = &(*pp)->next;
    return pp;
}

static void unlink_entry(pt_ref_cache *c, rentry **pp)
{
    rentry *e = *pp;
    *pp = e->next;
    c->bytes -= sizeof(*e) + e->len;
    c->entries--;
    free(e);
}

/* Moves the hand until the cache is a little under its bound. */
static void evict(pt_ref_cache *c)
{
    size_t target = c->max_bytes - c->max_bytes / 8;
    while (c->bytes > target && c->entries) {
        rentry **pp = &c->tab[c->hand];
        while (*pp) {
            if ((*pp)->used) {
                (*pp)->used = 0;
                pp = &(*pp)->next;
            } else {
                unlink_entry(c, pp);
            }
        }
        c->hand = (c->hand + 1) & c->mask;
    }
}

int pt_ref_cache_get(pt_ref_cache *c, uint64_t ref, int64_t bucket, pt_buf *out)
{
    uint64_t h = rhash(ref, bucket);
    int rv = 0;
    pthread_mutex_lock(&c->lock);
    rentry *e = *slot(c, h, ref, bucket);
    if (e) {
        e->used = 1;
        rv = pt_buf_append(out, e->data, e->len) == 0 ? 1 : PT_ENOMEM;
    }
    pthread_mutex_unlock(&c->lock);
    return rv;
}

uint32_t pt_ref_cache_epoch(pt_ref_cache *c, uint64_t ref, int64_t bucket)
{
    return atomic_load_explicit(&c->stripe[rhash(ref, bucket) % STRIPES], memory_order_acquire);
}

size_t pt_ref_cache_max_entry(const pt_ref_cache *c)
{
    size_t m = c->max_bytes / 64; /* one entry may not push out a great many */
    return m < UINT32_MAX ? m : UINT32_MAX;
}

void pt_ref_cache_put(pt_ref_cache *c, uint64_t ref, int64_t bucket, uint32_t epoch,
                      const uint8_t *data, size_t len)
{
    if (len > pt_ref_cache_max_entry(c))
        return;
    uint64_t h = rhash(ref, bucket);
    rentry *e = malloc(sizeof(*e) + len);
    if (!e)
        return; /* a cache: no entry is fine */
    e->ref = ref;
    e->bucket = bucket;
    e->len = (uint32_t)len;
    e->used = 1;
    if (len)
        memcpy(e->data, data, len);
    pthread_mutex_lock(&c->lock);
    if (atomic_load_explicit(&c->stripe[h % STRIPES], memory_order_relaxed) != epoch) {
        /* A series row of this stripe was written after the fill's read began. */
        pthread_mutex_unlock(&c->lock);
        free(e);
        return;
    }
    rentry **pp = slot(c, h, ref, bucket);
    if (*pp)
        unlink_entry(c, pp);
    e->next = c->tab[h & c->mask];
    c->tab[h & c->mask] = e;
    c->bytes += sizeof(*e) + len;
    c->entries++;
    if (c->bytes > c->max_bytes)
        evict(c);
    pthread_mutex_unlock(&c->lock);
}

void pt_ref_cache_invalidate(pt_ref_cache *c, uint64_t ref, int64_t bucket)
{
    uint64_t h = rhash(ref, bucket);
    pthread_mutex_lock(&c->lock);
    atomic_fetch_add_explicit(&c->stripe[h % STRIPES], 1, memory_order_release);
    rentry **pp = slot(c, h, ref, bucket);
    if (*pp)
        unlink_entry(c, pp);
    pthread_mutex_unlock(&c->lock);
}

uint64_t pt_list_cache_key(const uint8_t *prefix, size_t n, uint64_t salt)
{
    size_t tail = 3 + PT_BASE_DIGITS; /* ",@" day13 "," */
    return XXH3_64bits(prefix, n > tail ? n - tail : 0) ^ salt;
}

size_t pt_ref_cache_bytes(pt_ref_cache *c)
{
    pthread_mutex_lock(&c->lock);
    size_t n = c->bytes;
    pthread_mutex_unlock(&c->lock);
    return n;
}
