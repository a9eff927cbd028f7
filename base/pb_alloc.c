#include "pb_alloc.h"

static void *arena_alloc_cb(void *ud, size_t n)
{
    return pt_arena_alloc(ud, n);
}

static void arena_free_cb(void *ud, void *p)
{
    (void)ud;
    (void)p;
}

void pt_pb_allocator(pt_arena *a, ProtobufCAllocator *alloc)
{
    alloc->alloc = arena_alloc_cb;
    alloc->free = arena_free_cb;
    alloc->allocator_data = a;
}
