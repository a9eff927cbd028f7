/* libFuzzer: the embedded store's chunk values (backends/embedded/chunk.c), as a scan or a
 * flush reads them from RocksDB. A chunk must be refused (PT_EINTERNAL) or decode to the
 * count of cells its header promises, qualifiers strictly increasing; what decodes must
 * encode and decode again to the same cells, bit for bit, and a chunk of 8-byte values
 * must give, as the stream a streamed read sends (pt_cellchunk_to_stream), those cells; a
 * window of it (pt_cellchunk_cells_in) must give the cells inside, and as the last
 * qualifier decoded the first one past the window (fmt 3 and 4 stop there) or the last. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "embedded_int.h"
#include "error.h"
#include "gorilla.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static pt_vcells cells, again, scratch, window;
static pt_buf enc = PT_BUF_INIT(0), stream = PT_BUF_INIT(0);

/* A chunk of fmt 1, 3 or 4 (8-byte values) as one Gorilla stream holds its cells. */
static void check_stream(const pt_cellchunk *c)
{
    pt_slice s;
    if (!pt_cellchunk_floats(c))
        return;
    if (pt_cellchunk_to_stream(c, &scratch, &stream, &s) != 0)
        __builtin_trap();
    pt_gorilla_dec d;
    pt_gorilla_dec_init(&d, s.p, s.n);
    for (size_t i = 0; i < cells.n; i++) {
        int64_t t;
        uint64_t bits;
        if (cells.c[i].vlen != 8 || pt_gorilla_dec_next(&d, &t, &bits) != 0 ||
            t != (int64_t)cells.c[i].q || bits != pt_get_be64(cells.c[i].v.in))
            __builtin_trap();
    }
    if (!pt_gorilla_dec_done(&d))
        __builtin_trap();
}

/* The window [lo, hi) chosen from the input's size among the chunk's own qualifiers. */
static void check_window(const pt_cellchunk *c, size_t size)
{
    size_t n = cells.n, a = size % n, b = (size / 7) % (n + 1);
    uint64_t lo = cells.c[a].q + (size & 1), hi = b < n ? cells.c[b].q : UINT64_MAX;
    uint32_t last = 0, want_last = cells.c[n - 1].q;
    size_t k = 0, past = n;
    for (size_t i = 0; i < n && past == n; i++)
        if (cells.c[i].q >= hi)
            past = i;
    if ((c->fmt == 3 || c->fmt == 4) && past < n)
        want_last = cells.c[past].q;
    pt_vcells_reset(&window);
    if (pt_cellchunk_cells_in(c, lo, hi, &window, &last) != 0 || last != want_last)
        __builtin_trap();
    for (size_t i = 0; i < n; i++) {
        const pt_vcell *x = &cells.c[i];
        if (x->q < lo || x->q >= hi)
            continue;
        const pt_vcell *y = k < window.n ? &window.c[k] : NULL;
        k++;
        if (!y || x->q != y->q || x->vlen != y->vlen ||
            (x->vlen && memcmp(pt_vcell_val(x), pt_vcell_val(y), x->vlen) != 0))
            __builtin_trap();
    }
    if (k != window.n)
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pt_cellchunk c;
    uint32_t last;
    pt_vcells_reset(&cells);
    pt_vcells_reset(&again);
    if (pt_cellchunk_parse(data, size, &c) != 0)
        return 0;
    int rv = pt_cellchunk_cells(&c, &cells);
    if (rv != 0) {
        if (rv != PT_EINTERNAL || cells.n != 0)
            __builtin_trap();
        return 0;
    }
    if (cells.n != c.count || pt_cellchunk_last(&c, &last) != 0 || last != cells.c[cells.n - 1].q)
        __builtin_trap();
    for (size_t i = 1; i < cells.n; i++)
        if (cells.c[i].q <= cells.c[i - 1].q)
            __builtin_trap();
    check_stream(&c);
    check_window(&c, size);
    if (pt_cellchunk_encode(&enc, cells.c, cells.n) != 0 ||
        pt_cellchunk_parse(enc.p, enc.len, &c) != 0 || pt_cellchunk_cells(&c, &again) != 0 ||
        again.n != cells.n)
        __builtin_trap();
    for (size_t i = 0; i < cells.n; i++) {
        const pt_vcell *a = &cells.c[i], *b = &again.c[i];
        if (a->q != b->q || a->vlen != b->vlen ||
            (a->vlen && memcmp(pt_vcell_val(a), pt_vcell_val(b), a->vlen) != 0))
            __builtin_trap();
    }
    return 0;
}
