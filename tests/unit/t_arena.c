/* The request arena: bump allocation, its ceiling, reset, and the process-wide pool of
 * blocks (standard and large, by class) that freed arenas give back and new ones take
 * from. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "arena.h"
#include "tap.h"

enum { BLOCK = 4096 };

static void basics(void)
{
    pt_arena a;
    pt_arena_init(&a, BLOCK, 3 * BLOCK);
    uint8_t *p = pt_arena_alloc(&a, 1), *q = pt_arena_alloc(&a, 17);
    ok(p && q && ((uintptr_t)p & 15) == 0 && ((uintptr_t)q & 15) == 0 && q - p == 16,
       "16-byte aligned bump allocation in one block");
    ok(pt_arena_alloc(&a, 2 * BLOCK) != NULL, "a large request gets a block of its own");
    ok(pt_arena_alloc(&a, BLOCK) == NULL && a.exhausted, "the ceiling refuses what passes it");
    pt_arena_reset(&a);
    ok(!a.exhausted && a.head && a.head->size == BLOCK && a.used_total == BLOCK,
       "reset keeps the first standard block");
    pt_arena_free(&a);
    ok(a.head == NULL && a.used_total == 0, "free drops every block");
}

static void pool(void)
{
    pt_arena_pool_init(BLOCK, 4 * BLOCK);
    is(pt_arena_pool_bytes(), 0, "a new pool is empty");
    pt_arena a;
    pt_arena_init(&a, BLOCK, 0);
    void *blocks[6];
    for (int i = 0; i < 6; i++) {
        memset(pt_arena_alloc(&a, BLOCK), 0xa5, BLOCK); /* one standard block each */
        blocks[i] = a.head;
    }
    pt_arena_free(&a);
    is(pt_arena_pool_bytes(), 4 * (sizeof(pt_arena_block) + BLOCK),
       "freed standard blocks are pooled up to the bound, the rest freed");

    pt_arena b;
    pt_arena_init(&b, BLOCK, 0);
    int reused = 0;
    for (int i = 0; i < 4; i++) {
        pt_arena_alloc(&b, BLOCK);
        for (int j = 0; j < 6; j++)
            reused += b.head == blocks[j];
        ok(b.head->off == BLOCK && b.head->size == BLOCK, "a taken block starts empty (%d)", i);
        is(pt_arena_pool_bytes(), (size_t)(3 - i) * (sizeof(pt_arena_block) + BLOCK),
           "one block fewer in the pool (%d)", i);
    }
    is(reused, 4, "the next arena takes the four pooled blocks before asking malloc");
    ok(pt_arena_alloc(&b, BLOCK) && b.head->size == BLOCK && pt_arena_pool_bytes() == 0,
       "then malloc, the pool empty");
    pt_arena_reset(&b);
    is(pt_arena_pool_bytes(), 4 * (sizeof(pt_arena_block) + BLOCK),
       "reset gives back all but the block it keeps");

    pt_arena c;
    pt_arena_init(&c, 2 * BLOCK, 2 * BLOCK + BLOCK / 2);
    pt_arena_alloc(&c, 2 * BLOCK);
    ok(pt_arena_alloc(&c, 64) && c.head->size == BLOCK / 2,
       "a block cut short by the ceiling is not taken from the pool");
    pt_arena_free(&c);
    is(pt_arena_pool_bytes(), 4 * (sizeof(pt_arena_block) + BLOCK), "nor given to it");
    pt_arena_free(&b);
    pt_arena_pool_drain();
    is(pt_arena_pool_bytes(), 0, "drain empties the pool");
}

static void pool_large(void)
{
    pt_arena_pool_init(BLOCK, 32 * BLOCK); /* large blocks: 8 * BLOCK at most */
    pt_arena a;
    pt_arena_init(&a, BLOCK, 0);
    memset(pt_arena_alloc(&a, 3 * BLOCK), 0x5a, 3 * BLOCK);
    void *big = a.head;
    ok(a.head->size == 4 * BLOCK, "a large request's block is rounded up to the next class");
    pt_arena_reset(&a);
    is(pt_arena_pool_bytes(), sizeof(pt_arena_block) + 4 * BLOCK, "and pooled when freed");
    ok(pt_arena_alloc(&a, 4 * BLOCK - 100) && a.head == big && pt_arena_pool_bytes() == 0,
       "the next request of that class takes it");
    pt_arena_alloc(&a, 2 * BLOCK);
    ok(a.head != big && a.head->size == 2 * BLOCK,
       "a request of another class does not take a pooled block of a larger one");
    pt_arena_alloc(&a, 9 * BLOCK);
    ok(a.head->size == 16 * BLOCK, "each class is twice the one before");
    pt_arena_free(&a);
    is(pt_arena_pool_bytes(), 2 * sizeof(pt_arena_block) + 6 * BLOCK,
       "freed: the block past the large blocks' quarter of the bound goes back to malloc, "
       "the others stay");

    pt_arena c;
    pt_arena_init(&c, BLOCK, 3 * BLOCK);
    ok(pt_arena_alloc(&c, 2 * BLOCK + 1) && c.head->size == 3 * BLOCK,
       "a large block the ceiling cuts short keeps the size it got");
    pt_arena_free(&c);
    is(pt_arena_pool_bytes(), 2 * sizeof(pt_arena_block) + 6 * BLOCK, "and is not pooled");

    pt_arena d;
    pt_arena_init(&d, 2 * BLOCK, 0);
    pt_arena_alloc(&d, 3 * BLOCK);
    ok(d.head->size == 3 * BLOCK, "an arena of another block size gets its exact large block");
    pt_arena_free(&d);
    pt_arena_pool_drain();
    is(pt_arena_pool_bytes(), 0, "drain empties every class");
}

enum { THREADS = 4, ROUNDS = 2000 };

static void *churn(void *ud)
{
    uintptr_t tag = (uintptr_t)ud;
    for (int r = 0; r < ROUNDS; r++) {
        pt_arena a;
        pt_arena_init(&a, BLOCK, 0);
        uint8_t *p[3];
        for (int i = 0; i < 3; i++) {
            p[i] = pt_arena_alloc(&a, BLOCK);
            memset(p[i], (int)(tag + (uintptr_t)i), BLOCK);
        }
        for (int i = 0; i < 3; i++)
            for (int k = 0; k < BLOCK; k += 512)
                if (p[i][k] != (uint8_t)(tag + (uintptr_t)i))
                    return (void *)1; /* another thread holds this block too */
        pt_arena_free(&a);
    }
    return NULL;
}

static void pool_threads(void)
{
    pt_arena_pool_init(BLOCK, 8 * BLOCK);
    pthread_t t[THREADS];
    for (uintptr_t i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, churn, (void *)(16 * i));
    int bad = 0;
    for (int i = 0; i < THREADS; i++) {
        void *rv;
        pthread_join(t[i], &rv);
        bad += rv != NULL;
    }
    ok(bad == 0, "%d threads taking and giving back blocks never share one", THREADS);
    ok(pt_arena_pool_bytes() <= 8 * (sizeof(pt_arena_block) + BLOCK), "the pool stays bounded");
    pt_arena_pool_init(0, 0);
    is(pt_arena_pool_bytes(), 0, "a pool turned off holds nothing");
}

/* pt_arena_grow: room for one more, the items kept, the same array while it has room, and
 * the old array untouched when the arena is full. */
static void grow(void)
{
    pt_arena a;
    pt_arena_init(&a, 4096, 64 << 10);
    int *v = NULL;
    size_t n = 0, cap = 0, moves = 0;
    int kept = 1;
    for (int i = 0; i < 1000; i++) {
        int *w = pt_arena_grow(&a, v, n, &cap, sizeof(*v), 4);
        if (!w)
            break;
        moves += w != v;
        v = w;
        v[n++] = i;
        for (size_t j = 0; j < n; j++)
            kept &= v[j] == (int)j;
    }
    ok(n == 1000 && kept, "1000 items added one at a time, every one kept");
    ok(moves == 9 && cap == 1024, "the array moved 9 times (4 .. 1024), cap %zu", cap);
    size_t before = cap;
    int *same = v;
    while ((v = pt_arena_grow(&a, same, n, &cap, sizeof(*v), 4)) != NULL) {
        same = v;
        n = cap; /* full: the next call must grow */
    }
    ok(a.exhausted && cap >= before && same[0] == 0,
       "past the ceiling: NULL, the old array and its room as they were");
    pt_arena_free(&a);
}

int main(void)
{
    grow();
    basics();
    pool();
    pool_large();
    pool_threads();
    return done_testing();
}
