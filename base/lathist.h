/*
 * A latency histogram with fixed bucket bounds, counted with lock-free atomics: whoever
 * times something observes into one, and /metrics renders it as a Prometheus histogram.
 */
#ifndef PT_LATHIST_H
#define PT_LATHIST_H

#include <stdatomic.h>
#include <stdint.h>

#define PT_LATHIST_BUCKETS 14

/* Upper bounds of the buckets in seconds; the last bucket (not listed) is +Inf. */
extern const double pt_lathist_bounds[PT_LATHIST_BUCKETS - 1];

typedef struct pt_lathist {
    _Atomic uint64_t buckets[PT_LATHIST_BUCKETS]; /* per bucket; cumulative only when rendered */
    _Atomic uint64_t count;
    _Atomic uint64_t sum_ns;
} pt_lathist;

/* Counts one duration of ns nanoseconds. Safe from any thread. */
void pt_lathist_observe(pt_lathist *h, uint64_t ns);

#endif
