#include "index.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "error.h"

typedef struct gen {
    pt_index_key *slots;
    size_t n;
    size_t mask; /* slots - 1, a power of two minus one */
} gen;

struct pt_index_cache {
    pthread_mutex_t lock;
    gen g[2]; /* g[cur] takes inserts */
    int cur;
    size_t max_slots; /* per generation, a power of two */
    size_t gen_max;   /* entries per generation before it rolls over */
};

/* A generation starts with this many slots and doubles as it fills, so the memory a cache
 * holds follows its entries (16 bytes a slot, at most 3/4 full) rather than its capacity:
 * a table of the largest size touched at random has every page of it resident. */
enum { GEN_MIN_SLOTS = 1024 };

static int key_empty(pt_index_key k) { return k.lo == 0 && k.hi == 0; }

pt_index_key pt_index_key_of(pt_slice sid, int64_t bucket)
{
    XXH128_hash_t h = XXH3_128bits_withSeed(sid.p, sid.n, (XXH64_hash_t)bucket);
    pt_index_key k = {h.low64, h.high64};
    if (key_empty(k))
        k.lo = 1; /* zero marks an empty slot */
    return k;
}

/* g = an empty generation of n slots; 0, or -1 when out of memory (g unchanged). */
static int gen_make(gen *g, size_t n)
{
    pt_index_key *s = calloc(n, sizeof(*s));
    if (!s)
        return -1;
    free(g->slots);
    *g = (gen){.slots = s, .mask = n - 1};
    return 0;
}

pt_index_cache *pt_index_cache_new(size_t capacity)
{
    pt_index_cache *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    size_t gen_max = capacity / 2 ? capacity / 2 : 1;
    size_t slots = GEN_MIN_SLOTS;
    while (slots < gen_max + gen_max / 3 + 1)
        slots <<= 1;
    c->max_slots = slots;
    c->gen_max = gen_max;
    for (int i = 0; i < 2; i++)
        if (gen_make(&c->g[i], GEN_MIN_SLOTS) != 0) {
            free(c->g[0].slots);
            free(c);
            return NULL;
        }
    pthread_mutex_init(&c->lock, NULL);
    return c;
}

void pt_index_cache_free(pt_index_cache *c)
{
    if (!c)
        return;
    free(c->g[0].slots);
    free(c->g[1].slots);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* Returns the slot holding k, or the empty slot where it would go. */
static pt_index_key *probe(pt_index_key *slots, size_t mask, pt_index_key k)
{
    size_t i = (size_t)k.lo & mask;
    for (;;) {
        pt_index_key *s = &slots[i];
        if (key_empty(*s) || (s->lo == k.lo && s->hi == k.hi))
            return s;
        i = (i + 1) & mask;
    }
}

/* Room in g for one more key: doubles its slots once it would pass 3/4 full, up to the
 * largest size. Without memory for that the table stays (it is never more than 3/4 full
 * at the largest size, which the caller's gen_max ensures, and fuller below it only makes
 * probes longer: a table of n slots holds n - 1 keys before a probe could loop). 0, or -1
 * when g is full and cannot grow. */
static int gen_room(gen *g, size_t max_slots)
{
    size_t slots = g->mask + 1;
    if ((g->n + 1) * 4 <= slots * 3 || slots >= max_slots)
        return 0;
    gen bigger = {0};
    if (gen_make(&bigger, slots * 2) != 0)
        return g->n + 1 < slots ? 0 : -1;
    for (size_t i = 0; i < slots; i++)
        if (!key_empty(g->slots[i]))
            *probe(bigger.slots, bigger.mask, g->slots[i]) = g->slots[i];
    bigger.n = g->n;
    free(g->slots);
    *g = bigger;
    return 0;
}

/* Inserts k, not yet in the current generation, unless that is full or out of memory (the
 * key is then only not cached: a later write indexes again). */
static void insert_locked(pt_index_cache *c, pt_index_key k)
{
    gen *g = &c->g[c->cur];
    if (g->n >= c->gen_max || gen_room(g, c->max_slots) != 0)
        return;
    *probe(g->slots, g->mask, k) = k;
    g->n++;
}

/* Looks k up in both generations; a hit in the old one moves it into the current one.
 * Called with the lock held. */
static int has_locked(pt_index_cache *c, pt_index_key k)
{
    /* The current generation first: series that keep writing are found there with one
     * probe, since a hit in the old generation moves the key forward. */
    const gen *cur = &c->g[c->cur], *old = &c->g[c->cur ^ 1];
    if (!key_empty(*probe(cur->slots, cur->mask, k)))
        return 1;
    if (key_empty(*probe(old->slots, old->mask, k)))
        return 0;
    insert_locked(c, k);
    return 1;
}

void pt_index_cache_lookup(pt_index_cache *c, const pt_index_key *keys, size_t n,
                           uint8_t *found)
{
    /* Every probe of a large table is a cache miss: start the loads a few keys ahead so
     * they overlap instead of queueing, and take the lock once for the batch (cur is
     * the generation, so a table grown by a move from the old one is the one read). */
    enum { AHEAD = 8 };
    pthread_mutex_lock(&c->lock);
    const gen *cur = &c->g[c->cur];
    for (size_t i = 0; i < n && i < AHEAD; i++)
        __builtin_prefetch(&cur->slots[(size_t)keys[i].lo & cur->mask]);
    for (size_t i = 0; i < n; i++) {
        if (i + AHEAD < n)
            __builtin_prefetch(&cur->slots[(size_t)keys[i + AHEAD].lo & cur->mask]);
        found[i] = (uint8_t)has_locked(c, keys[i]);
    }
    pthread_mutex_unlock(&c->lock);
}

void pt_index_cache_add(pt_index_cache *c, const pt_index_key *keys, size_t n)
{
    pthread_mutex_lock(&c->lock);
    for (size_t j = 0; j < n; j++) {
        gen *g = &c->g[c->cur];
        if (g->n >= c->gen_max) {
            /* Roll over: forget the old generation, start a fresh current one, small
             * again (its old slots go back to the allocator). */
            int next = c->cur ^ 1;
            if (gen_make(&c->g[next], GEN_MIN_SLOTS) != 0) {
                memset(c->g[next].slots, 0, (c->g[next].mask + 1) * sizeof(pt_index_key));
                c->g[next].n = 0;
            }
            c->cur = next;
            g = &c->g[next];
        }
        if (key_empty(*probe(g->slots, g->mask, keys[j])))
            insert_locked(c, keys[j]);
    }
    pthread_mutex_unlock(&c->lock);
}

/* Takes k out of g, moving back the keys after it that their probe would no longer reach
 * (linear probing's deletion: no tombstones). */
static void gen_remove(gen *g, pt_index_key k)
{
    pt_index_key *s = probe(g->slots, g->mask, k);
    if (key_empty(*s))
        return;
    size_t i = (size_t)(s - g->slots), j = i;
    for (;;) {
        j = (j + 1) & g->mask;
        if (key_empty(g->slots[j]))
            break;
        size_t home = (size_t)g->slots[j].lo & g->mask;
        /* The key at j stays unless its home is cyclically outside (i, j]. */
        int reachable = i < j ? (home > i && home <= j) : (home > i || home <= j);
        if (!reachable) {
            g->slots[i] = g->slots[j];
            i = j;
        }
    }
    g->slots[i] = (pt_index_key){0, 0};
    g->n--;
}

void pt_index_cache_remove(pt_index_cache *c, const pt_index_key *keys, size_t n)
{
    pthread_mutex_lock(&c->lock);
    for (size_t j = 0; j < n; j++) {
        gen_remove(&c->g[0], keys[j]);
        gen_remove(&c->g[1], keys[j]);
    }
    pthread_mutex_unlock(&c->lock);
}

size_t pt_index_cache_size(pt_index_cache *c)
{
    pthread_mutex_lock(&c->lock);
    size_t n = c->g[0].n + c->g[1].n;
    pthread_mutex_unlock(&c->lock);
    return n;
}

size_t pt_index_cache_bytes(pt_index_cache *c)
{
    pthread_mutex_lock(&c->lock);
    size_t n = (c->g[0].mask + c->g[1].mask + 2) * sizeof(pt_index_key);
    pthread_mutex_unlock(&c->lock);
    return n;
}

size_t pt_index_cache_capacity(pt_index_cache *c) { return c->gen_max * 2; }

int pt_keyset_add(pt_keyset *s, pt_index_key k)
{
    pt_index_key *slot = probe(s->slots, s->mask, k);
    if (!key_empty(*slot))
        return 0;
    *slot = k;
    s->n++;
    return 1;
}

int pt_keyset_put(pt_keyset *s, pt_index_key k)
{
    if ((s->n + 1) * 2 > s->mask + 1) {
        size_t slots = s->mask ? 2 * (s->mask + 1) : 1024;
        pt_keyset bigger = {calloc(slots, sizeof(pt_index_key)), slots - 1, 0};
        if (!bigger.slots)
            return PT_ENOMEM;
        for (size_t i = 0; s->slots && i <= s->mask; i++)
            if (!key_empty(s->slots[i]))
                pt_keyset_add(&bigger, s->slots[i]);
        free(s->slots);
        *s = bigger;
    }
    return pt_keyset_add(s, k);
}

int pt_keyset_has(const pt_keyset *s, pt_index_key k)
{
    return s->slots && !key_empty(*probe(s->slots, s->mask, k));
}

void pt_keyset_free(pt_keyset *s)
{
    free(s->slots);
    *s = (pt_keyset){0};
}

/* ---- list hints ---- */

enum { HINT_SLOTS = 4096, HINT_ROW_BITS = 24 };
#define HINT_ROWS_MAX (((uint64_t)1 << HINT_ROW_BITS) - 1)
#define HINT_COMPLETE ((uint64_t)1 << HINT_ROW_BITS)
/* The key's top 39 bits with bit 38 set, so a used slot is never 0. */
#define HINT_TAG(key) ((key) >> (HINT_ROW_BITS + 1) | (uint64_t)1 << (62 - HINT_ROW_BITS))

struct pt_list_hints {
    _Atomic uint64_t slot[HINT_SLOTS];
};

pt_list_hints *pt_list_hints_new(void)
{
    pt_list_hints *h = malloc(sizeof(*h));
    if (!h)
        return NULL;
    for (size_t i = 0; i < HINT_SLOTS; i++)
        atomic_init(&h->slot[i], 0);
    return h;
}

void pt_list_hints_free(pt_list_hints *h)
{
    free(h);
}

int pt_list_hints_get(pt_list_hints *h, uint64_t key, size_t *rows, int *complete)
{
    uint64_t w = atomic_load_explicit(&h->slot[key % HINT_SLOTS], memory_order_relaxed);
    if (w >> (HINT_ROW_BITS + 1) != HINT_TAG(key))
        return 0;
    *rows = (size_t)(w & HINT_ROWS_MAX);
    *complete = (w & HINT_COMPLETE) != 0;
    return 1;
}

void pt_list_hints_put(pt_list_hints *h, uint64_t key, size_t rows, int complete)
{
    uint64_t r = rows < HINT_ROWS_MAX ? rows : HINT_ROWS_MAX;
    uint64_t w = HINT_TAG(key) << (HINT_ROW_BITS + 1) | (complete ? HINT_COMPLETE : 0) | r;
    atomic_store_explicit(&h->slot[key % HINT_SLOTS], w, memory_order_relaxed);
}
