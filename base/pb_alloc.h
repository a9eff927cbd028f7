/* protobuf-c's allocator interface backed by an arena: unpacked messages live and die with
 * the arena (free is a no-op). */
#ifndef PT_PB_ALLOC_H
#define PT_PB_ALLOC_H

#include <protobuf-c/protobuf-c.h>

#include "arena.h"

void pt_pb_allocator(pt_arena *a, ProtobufCAllocator *alloc);

#endif
