/* libFuzzer: the index-cell label decoder and the key unescaper (data read back from a
 * store that may hold anything). */
#include <stdint.h>
#include <stdlib.h>

#include "rowkey.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pt_arena a;
    pt_arena_init(&a, 4096, 0);
    pt_label *ls;
    long n = pt_labels_decode(&a, (pt_slice){data, size}, &ls);
    if (n >= 0) {
        /* Whatever decodes must survive an encode/decode round trip. */
        size_t len = pt_labels_encoded_len(ls, (size_t)n);
        uint8_t *buf = pt_arena_alloc(&a, len ? len : 1);
        pt_labels_encode(buf, ls, (size_t)n);
        pt_label *again;
        long n2 = pt_labels_decode(&a, (pt_slice){buf, len}, &again);
        if (n2 != n || pt_labels_cmp(ls, (size_t)n, again, (size_t)n2) != 0)
            __builtin_trap();
    }
    uint8_t *u = pt_arena_alloc(&a, size ? size : 1);
    pt_unescape(u, (pt_slice){data, size});
    pt_series_id_parse(&a, (pt_slice){data, size}, &ls);
    pt_arena_free(&a);
    return 0;
}
