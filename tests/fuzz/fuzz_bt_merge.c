/* libFuzzer: the Bigtable ReadRows chunk merger, fed what a server (or anything posing as
 * one) may stream: the input is a sequence of ReadRowsResponse messages, each prefixed
 * by its length in two bytes (big-endian). Rows it commits must have strictly increasing
 * keys, whatever the chunks said. */
#include <stdint.h>
#include <string.h>

#include "arena.h"
#include "bigtable.pb-c.h"
#include "bigtable_int.h"
#include "pb_alloc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct seen {
    uint8_t last[4096];
    size_t n;
    int any;
} seen;

static int on_row(void *ud, pt_slice key, const pt_bt_cell *cells, size_t ncells)
{
    seen *s = ud;
    (void)cells;
    (void)ncells;
    if (s->any) {
        pt_slice prev = {s->last, s->n};
        if (key.n <= sizeof(s->last) && pt_slice_cmp(prev, key) >= 0)
            __builtin_trap();
    }
    s->n = key.n < sizeof(s->last) ? key.n : sizeof(s->last);
    memcpy(s->last, key.p, s->n);
    s->any = 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    seen s = {0};
    pt_bt_merger m;
    pt_bt_merger_init(&m, on_row, &s, 1 << 20);
    pt_arena a;
    pt_arena_init(&a, 4096, 16u << 20);
    ProtobufCAllocator alloc;
    pt_pb_allocator(&a, &alloc);
    int rv = 0;
    while (size >= 2 && rv == 0) {
        size_t n = (size_t)data[0] << 8 | data[1];
        data += 2;
        size -= 2;
        if (n > size)
            n = size;
        Bigtable__ReadRowsResponse *r = bigtable__read_rows_response__unpack(&alloc, n, data);
        data += n;
        size -= n;
        if (!r)
            break;
        rv = pt_bt_merger_response(&m, r);
        pt_arena_reset(&a);
    }
    if (rv == 0)
        pt_bt_merger_end(&m);
    pt_bt_merger_free(&m);
    pt_arena_free(&a);
    return 0;
}
