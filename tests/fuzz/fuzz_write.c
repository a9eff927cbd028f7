/* libFuzzer: a remote write body (as 1.0 and as 2.0) through snappy, the decoder, label
 * validation and row keys; every decoded native histogram converted and validated as the
 * write path does, and a valid one through its cell and back unchanged. */
#include <stdint.h>
#include <string.h>

#include "decode.h"
#include "error.h"
#include "histpb.h"
#include "rowkey.h"
#include "store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Labels of every decoded series through validation, series ids and row keys. */
static void check(pt_wreq *wr, pt_arena *a)
{
    char msg[PT_MSG_MAX];
    for (size_t i = 0; i < wr->nseries; i++) {
        pt_label *ls = wr->series[i].labels;
        int plain;
        long n = pt_labels_validate(ls, wr->series[i].nlabels, NULL, &plain, msg, sizeof(msg));
        if (n < 0)
            continue;
        pt_slice sid, fast;
        if (pt_series_id(a, ls, (size_t)n, PT_MAX_ROW_KEY, &sid) != 0)
            break;
        /* Where validation found nothing to escape, the unchecked path builds the same. */
        if (plain) {
            if (pt_series_id_checked(a, ls, (size_t)n, 0, PT_MAX_ROW_KEY, &fast) != 0)
                break;
            if (!pt_slice_eq(fast, sid))
                __builtin_trap();
        }
        /* A plain id must parse back to the labels it came from. */
        pt_label *back;
        long nb = pt_series_id_parse(a, sid, &back);
        if (nb >= 0 && nb != n)
            __builtin_trap();
        uint8_t *row = pt_arena_alloc(a, PT_ROW_KEY_LEN(sid.n));
        if (row)
            pt_row_key(row, sid, 0);
    }
}

/* Each histogram as the write path takes it; a valid one must come back from its cell. */
static void check_histograms(const pt_wreq *wr)
{
    pt_histogram h = PT_HISTOGRAM_INIT, back = PT_HISTOGRAM_INIT;
    char why[256];
    static uint8_t cell[1 << 16];
    for (size_t i = 0; i < wr->nseries; i++)
        for (size_t j = 0; j < wr->series[i].nhistograms; j++) {
            int rv = pt_wire_histogram(&wr->series[i].histograms[j], &h, why, sizeof(why));
            if (rv == PT_EBADREQ && !why[0])
                __builtin_trap(); /* a refusal always says why */
            if (rv != 0 || pt_histogram_cell_size(&h) > sizeof(cell))
                continue;
            size_t n = pt_histogram_cell_encode(&h, cell);
            if (n == 8 || pt_histogram_cell_decode(cell, n, &back) != 0)
                __builtin_trap();
            back.t = h.t;
            if (!pt_histogram_equal(&h, &back))
                __builtin_trap();
        }
    pt_histogram_free(&h);
    pt_histogram_free(&back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pt_arena a;
    pt_arena_init(&a, 4096, 64u << 20);
    pt_decode_limits lim = {8u << 20};
    char msg[PT_MSG_MAX];
    /* Each input as remote write 1.0 and as 2.0. */
    for (int version = 1; version <= 2; version++) {
        pt_wreq wr;
        if (pt_decode_write(data, size, &lim, &a, version, &wr, msg, sizeof(msg)) == 0)
        {
            check(&wr, &a);
            check_histograms(&wr);
        }
    }
    pt_arena_free(&a);
    return 0;
}
