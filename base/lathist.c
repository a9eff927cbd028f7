#include "lathist.h"

const double pt_lathist_bounds[PT_LATHIST_BUCKETS - 1] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10};

void pt_lathist_observe(pt_lathist *h, uint64_t ns)
{
    double s = (double)ns / 1e9;
    int i = 0;
    while (i < PT_LATHIST_BUCKETS - 1 && s > pt_lathist_bounds[i])
        i++;
    atomic_fetch_add_explicit(&h->buckets[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_ns, ns, memory_order_relaxed);
}
