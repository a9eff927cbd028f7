/* libFuzzer: native histogram cells and Prometheus histogram chunks (base/histogram.h,
 * base/hchunk.h) as a read finds them in a store or a peer sends them. The first byte picks
 * what the rest is: a cell value, or an integer or float histogram chunk read with
 * Prometheus' hints or with an exact hints byte. Anything must be refused (PT_EINTERNAL)
 * or decode; what decodes must encode again and decode to the same samples, bit for bit. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "hchunk.h"
#include "histogram.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { MAXS = 256 };
static pt_histogram got[MAXS], again;
static uint8_t cell[1 << 20];

static void check_cell(const uint8_t *p, size_t n)
{
    int rv = pt_histogram_cell_decode(p, n, &got[0]);
    if (rv != 0) {
        if (rv != PT_EINTERNAL)
            __builtin_trap();
        return;
    }
    size_t len = pt_histogram_cell_size(&got[0]);
    if (len == 8 || len > sizeof(cell) || pt_histogram_cell_encode(&got[0], cell) != len)
        __builtin_trap();
    again.t = got[0].t;
    if (pt_histogram_cell_decode(cell, len, &again) != 0 || !pt_histogram_equal(&got[0], &again))
        __builtin_trap();
}

/* Re-encodes samples [0, n) into as many chunks as the encoder cuts, decoding each. */
static void reencode(size_t n)
{
    pt_hchunk_enc e;
    pt_hchunk_enc_init(&e, 1 << 24);
    size_t first = 0;
    for (size_t i = 0; i <= n; i++) {
        int rv = i < n ? pt_hchunk_enc_add(&e, &got[i]) : PT_HCHUNK_CUT;
        if (rv == 0)
            continue;
        if (rv != PT_HCHUNK_CUT)
            __builtin_trap(); /* a decoded sample is always representable */
        pt_slice c = pt_hchunk_enc_bytes(&e);
        pt_hchunk_dec d;
        if (c.n && pt_hchunk_dec_init(&d, pt_hchunk_enc_encoding(&e), c.p, c.n,
                                      pt_hchunk_enc_hints(&e)) != 0)
            __builtin_trap();
        for (size_t k = first; c.n && k < i; k++)
            if (pt_hchunk_dec_next(&d, &again) != 1 || !pt_histogram_equal(&again, &got[k]))
                __builtin_trap();
        if (c.n && pt_hchunk_dec_next(&d, &again) != 0)
            __builtin_trap();
        if (c.n)
            pt_hchunk_dec_free(&d);
        pt_hchunk_enc_next(&e);
        first = i;
        if (i < n && pt_hchunk_enc_add(&e, &got[i]) != 0)
            __builtin_trap();
    }
    pt_hchunk_enc_free(&e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    if (data[0] % 3 == 0) {
        check_cell(data + 1, size - 1);
        return 0;
    }
    int enc = data[0] % 3 == 1 ? PT_HCHUNK_HISTOGRAM : PT_HCHUNK_FLOAT_HISTOGRAM;
    int hints = data[0] & 0x80 ? data[1] : -1;
    pt_hchunk_dec d;
    if (pt_hchunk_dec_init(&d, enc, data + 2, size - 2, hints) != 0)
        return 0;
    size_t n = 0;
    int rv;
    while (n < MAXS && (rv = pt_hchunk_dec_next(&d, &got[n])) == 1)
        n++;
    pt_hchunk_dec_free(&d);
    if (n == MAXS)
        return 0;
    if (rv != 0 && rv != PT_EINTERNAL)
        __builtin_trap();
    /* Prometheus' own hints and a gauge header make a gauge that a counter chunk's
     * second sample would not be; all that matters is that every sample round-trips. */
    reencode(n);
    return 0;
}
