/* The index cache: lookups and adds, a hit in the old generation moving forward, the
 * roll-over that forgets the old generation, and tables that grow with their entries
 * instead of taking their largest size up front. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "index.h"
#include "tap.h"

static pt_index_key key(int i)
{
    char s[32];
    int n = snprintf(s, sizeof(s), "series-%d", i);
    return pt_index_key_of((pt_slice){(const uint8_t *)s, (size_t)n}, 20000);
}

/* How many of keys [from, to) the cache finds (a lookup moves old ones forward). */
static int found(pt_index_cache *c, int from, int to)
{
    int n = 0;
    for (int i = from; i < to; i++) {
        pt_index_key k = key(i);
        uint8_t f = 0;
        pt_index_cache_lookup(c, &k, 1, &f);
        n += f;
    }
    return n;
}

static void add(pt_index_cache *c, int from, int to)
{
    for (int i = from; i < to; i++) {
        pt_index_key k = key(i);
        pt_index_cache_add(c, &k, 1);
    }
}

static void basics(void)
{
    pt_index_cache *c = pt_index_cache_new(1000000);
    size_t empty = pt_index_cache_bytes(c);
    ok(empty <= 2 * 1024 * sizeof(pt_index_key), "a new cache holds small tables (%zu bytes)",
       empty);
    is(found(c, 0, 100), 0, "nothing is known before it is added");
    add(c, 0, 100000);
    is(pt_index_cache_size(c), 100000, "every added key counted once");
    add(c, 0, 100);
    is(pt_index_cache_size(c), 100000, "adding a known key again counts nothing");
    is(found(c, 0, 100000), 100000, "every key found after its table grew many times");
    is(found(c, 100000, 101000), 0, "keys never added are not found");
    size_t bytes = pt_index_cache_bytes(c);
    ok(bytes >= 100000 * 4 / 3 * sizeof(pt_index_key) && bytes <= 2 * 262144 * sizeof(pt_index_key),
       "memory follows the entries: %zu bytes for 100,000 of a capacity of 1,000,000", bytes);
    /* Keys of the same series in another bucket are other keys. */
    pt_index_key a = pt_index_key_of((pt_slice){(const uint8_t *)"x", 1}, 1),
                 b = pt_index_key_of((pt_slice){(const uint8_t *)"x", 1}, 2);
    ok(a.lo != b.lo || a.hi != b.hi, "the bucket is part of the key");
    pt_index_cache_free(c);
}

static void rollover(void)
{
    /* Capacity 2000: generations of 1000 keys. */
    pt_index_cache *c = pt_index_cache_new(2000);
    add(c, 0, 1000);
    is(pt_index_cache_size(c), 1000, "the first generation full");
    add(c, 1000, 1500);
    is(pt_index_cache_size(c), 1500, "a roll-over keeps the full generation as the old one");
    is(found(c, 0, 200), 200, "old keys are still found, and move forward");
    is(pt_index_cache_size(c), 1700, "... into the current generation");
    add(c, 1500, 1800); /* the current generation reaches 1000: the next add rolls over */
    add(c, 1800, 1801);
    is(pt_index_cache_size(c), 1001, "the next roll-over drops the old generation");
    is(found(c, 0, 200), 200, "keys moved forward survived it");
    is(found(c, 200, 1000), 0, "keys left in the dropped generation are forgotten");
    is(found(c, 1000, 1801), 801, "the newer keys are kept");
    ok(pt_index_cache_capacity(c) == 2000, "capacity as configured");
    ok(pt_index_cache_size(c) <= pt_index_cache_capacity(c), "never more than the capacity");
    pt_index_cache_free(c);
}

static void bounded(void)
{
    /* Many more keys than the capacity: memory stays at the capacity's tables. */
    pt_index_cache *c = pt_index_cache_new(4096);
    add(c, 0, 50000);
    ok(pt_index_cache_size(c) <= 4096, "size bounded by the capacity (%zu)",
       pt_index_cache_size(c));
    ok(pt_index_cache_bytes(c) <= 2 * 4096 * sizeof(pt_index_key),
       "tables no larger than the capacity needs (%zu bytes)", pt_index_cache_bytes(c));
    is(found(c, 49000, 50000), 1000, "the latest keys are known");
    pt_index_cache_free(c);
}

/* The growing 128-bit set: every key added stays found through the doublings; keys not
 * added are not found; free empties it. */
static void keyset_grows(void)
{
    pt_keyset s = {0};
    enum { N = 5000 };
    int added = 1, again = 1, found = 1, absent = 1;
    ok(!pt_keyset_has(&s, (pt_index_key){1, 2}), "an empty set has nothing");
    for (uint64_t i = 1; i <= N; i++)
        added &= pt_keyset_put(&s, (pt_index_key){i * 0x9e3779b97f4a7c15u, i}) == 1;
    for (uint64_t i = 1; i <= N; i++) {
        again &= pt_keyset_put(&s, (pt_index_key){i * 0x9e3779b97f4a7c15u, i}) == 0;
        found &= pt_keyset_has(&s, (pt_index_key){i * 0x9e3779b97f4a7c15u, i});
        absent &= !pt_keyset_has(&s, (pt_index_key){i * 0x9e3779b97f4a7c15u, i + N});
    }
    ok(added && s.n == N, "%d keys added, each new", N);
    ok(again, "adding one again says it was there");
    ok(found && absent, "all found after growing, no other key (same low half) found");
    ok(s.mask + 1 >= 2 * N, "the slots stay at most half full (%zu for %d)", s.mask + 1, N);
    pt_keyset_free(&s);
    ok(s.slots == NULL && s.n == 0 && !pt_keyset_has(&s, (pt_index_key){1, 1}),
       "freed: empty again");
}

/* Removal from the open-addressed tables: the removed keys are gone, every other key
 * (some of them probed past the removed ones) is still found, in both generations. */
static void removal(void)
{
    pt_index_cache *c = pt_index_cache_new(3000); /* 1500 a generation, tables 3/4 full */
    add(c, 0, 1500);
    add(c, 1500, 2500); /* rolls over: 0..1499 in the old generation */
    int gone = 0, kept = 0;
    for (int i = 0; i < 2500; i += 3) {
        pt_index_key k = key(i);
        pt_index_cache_remove(c, &k, 1);
    }
    for (int i = 0; i < 2500; i++) {
        pt_index_key k = key(i);
        uint8_t f = 0;
        pt_index_cache_lookup(c, &k, 1, &f);
        if (i % 3 == 0)
            gone += !f;
        else
            kept += f;
    }
    is(gone, 834, "every removed key is forgotten");
    is(kept, 2500 - 834, "every other key is still found");
    pt_index_key k = key(5000);
    pt_index_cache_remove(c, &k, 1);
    is(found(c, 1, 3), 2, "removing an unknown key changes nothing");
    pt_index_cache_free(c);
}

int main(void)
{
    basics();
    removal();
    rollover();
    bounded();
    keyset_grows();
    return done_testing();
}
