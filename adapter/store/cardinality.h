/*
 * Where the series of one index bucket come from (Prometheus' /api/v1/status/tsdb): how
 * many series each metric name and each label pair has, how many values and how many
 * bytes of values each label name has, the largest `limit` of each. Counted from the
 * index rows of that bucket, a batch of values at a time, so memory does not grow with
 * the number of series or values.
 */
#ifndef PT_CARDINALITY_H
#define PT_CARDINALITY_H

#include <stdatomic.h>

#include "store.h"

typedef struct pt_card_item {
    pt_buf name; /* "name" or "name=value" */
    uint64_t value;
} pt_card_item;

/* The `max` largest items seen (a min-heap until pt_card_sort). */
typedef struct pt_card_top {
    pt_card_item *v;
    size_t n, max;
} pt_card_top;

typedef struct pt_cardinality {
    uint64_t series; /* of the bucket: each has one metric name */
    uint64_t pairs;  /* distinct label pairs (name=value) of the bucket */
    pt_card_top by_metric, values_by_name, bytes_by_name, by_pair;
} pt_cardinality;

/* Counts the index bucket holding time at into c, the largest limit of each kind, each
 * sorted by count (largest first, then by name); the request's memory (names, keys) in a,
 * within st's read.timeout, stopped early when *cancel is set (may be NULL). 0, or
 * PT_ENOMEM, PT_ETIMEOUT, PT_ECANCELLED, a storage error. pt_cardinality_free frees c
 * either way. */
int pt_cardinality_count(pt_store *st, pt_arena *a, int64_t at, size_t limit,
                         const atomic_int *cancel, pt_cardinality *c);
void pt_cardinality_free(pt_cardinality *c);

#endif
