/*
 * One native histogram sample, owned: every field of Prometheus' `Histogram` message
 * (remote write 1.0 types.proto and 2.0), integer or float, exponential schemas -4..8 and
 * custom buckets (schema -53).
 *
 * The arrays live in one heap block the histogram owns (mem); pt_histogram_reserve sizes
 * them, reusing the block when it is big enough, so a decoder filling the same histogram
 * sample after sample allocates only when a sample is bigger than every one before.
 * Float fields are kept as doubles and only ever moved, never computed with, by the codecs:
 * their bits (NaN payloads, the staleness marker 0x7ff0000000000002, -0) come back exactly.
 *
 * Also here: the checks Prometheus applies to a histogram (pt_histogram_validate) and the
 * value of the one cell that holds a histogram sample in the points table
 * (docs/storage-format.md, "Native histograms"). The chunk form is in hchunk.h.
 */
#ifndef PT_HISTOGRAM_H
#define PT_HISTOGRAM_H

#include <stddef.h>
#include <stdint.h>

#include "arena.h"

/* Histogram.reset_hint (ResetHint enum). */
enum {
    PT_HIST_RESET_UNKNOWN = 0,
    PT_HIST_RESET_YES = 1,
    PT_HIST_RESET_NO = 2,
    PT_HIST_RESET_GAUGE = 3,
};

enum {
    PT_HIST_SCHEMA_MIN = -4,
    PT_HIST_SCHEMA_MAX = 8,
    PT_HIST_SCHEMA_CUSTOM = -53, /* custom bucket bounds in custom_values */
};

/* The most spans, buckets and custom values one histogram may hold, all arrays together:
 * far above what any schema produces (schema 8 covers float64's range with ~550k buckets
 * a side), low enough that a corrupt length cannot ask for gigabytes. */
#define PT_HIST_MAX_ELEMS ((size_t)1 << 21)

/* The staleness marker's bits (model/value), also in a histogram's sum. */
#define PT_HIST_STALE_NAN 0x7ff0000000000002ULL

typedef struct pt_hist_span {
    int32_t offset;  /* the first: start index; then: gap after the previous span */
    uint32_t length; /* buckets in the span */
} pt_hist_span;

typedef struct pt_histogram {
    int64_t t; /* ms */
    int32_t schema;
    uint8_t is_float;                   /* the count oneof held count_float */
    uint8_t reset_hint;                 /* PT_HIST_RESET_*; another value is refused by validate */
    uint64_t count_int, zero_count_int; /* integer histograms (0 in float ones) */
    double count_float, zero_count_float; /* float histograms (0 in integer ones) */
    double sum, zero_threshold;
    size_t n_neg_spans, n_pos_spans, n_neg, n_pos, n_custom;
    pt_hist_span *neg_spans, *pos_spans;
    int64_t *neg_deltas, *pos_deltas; /* integer: each bucket minus the one before it */
    double *neg_counts, *pos_counts;  /* float: absolute counts */
    double *custom_values;            /* schema -53: upper bounds, +Inf implied */
    void *mem;
    size_t mem_cap;
} pt_histogram;

#define PT_HISTOGRAM_INIT ((pt_histogram){0})

/* Sizes the arrays for these counts (the bucket arrays of h->is_float's kind; the others
 * NULL) and zeroes their contents; the scalar fields are kept. 0, PT_ETOOLARGE past
 * PT_HIST_MAX_ELEMS, PT_ENOMEM (h unchanged then). */
int pt_histogram_reserve(pt_histogram *h, size_t n_neg_spans, size_t n_pos_spans, size_t n_neg,
                         size_t n_pos, size_t n_custom);
/* Releases the arrays; h is an empty histogram again. */
void pt_histogram_free(pt_histogram *h);
/* dst becomes a copy of src (dst's block reused): 0 or PT_ENOMEM. */
int pt_histogram_copy(pt_histogram *dst, const pt_histogram *src);
/* dst becomes a copy of src whose arrays are in a (dst->mem NULL: nothing to free; dst is
 * not to be given to pt_histogram_reserve). 0 or PT_ENOMEM (dst unchanged). */
int pt_histogram_copy_in(pt_arena *a, pt_histogram *dst, const pt_histogram *src);
/* 1 when a and b hold the same fields bit for bit (floats compared as bits), else 0. */
int pt_histogram_equal(const pt_histogram *a, const pt_histogram *b);
/* 1 when the sum is the staleness marker. */
int pt_histogram_is_stale(const pt_histogram *h);

/* Prometheus' rules (model/histogram Histogram.Validate, FloatHistogram.Validate) plus the
 * schema range and the reset hint's range: 0, or PT_EBADREQ with a sentence saying what is
 * wrong written to why (always terminated when whylen > 0). */
int pt_histogram_validate(const pt_histogram *h, char *why, size_t whylen);

/* ---- the cell (docs/storage-format.md, "Native histograms") ----
 * A float sample's cell value is 8 bytes; a histogram's is never 8 bytes long and starts
 * with a kind byte (1 integer, 2 float), so a reader tells them apart by the length. */
enum { PT_HIST_CELL_INT = 1, PT_HIST_CELL_FLOAT = 2 };

/* 1 when a points cell value of n bytes is a histogram (n != 8), 0 when it is a float. */
static inline int pt_histogram_cell_is(size_t n)
{
    return n != 8;
}

/* Bytes pt_histogram_cell_encode writes for h (at least 26, never 8). */
size_t pt_histogram_cell_size(const pt_histogram *h);
/* Writes h (but not h->t: the qualifier holds the time) at out, pt_histogram_cell_size(h)
 * bytes; returns that count. */
size_t pt_histogram_cell_encode(const pt_histogram *h, uint8_t *out);
/* Reads a cell value into h (its arrays reserved; h->t is left as it was): 0, PT_EINTERNAL
 * when the bytes are not a histogram cell (never reads past n), PT_ENOMEM. */
int pt_histogram_cell_decode(const uint8_t *p, size_t n, pt_histogram *h);

#endif
