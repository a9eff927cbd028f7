/*
 * Native histogram samples between their owned form (base/histogram.h) and protobuf-c's
 * prometheus.Histogram, for the tools and tests that build or check messages with
 * protobuf-c: every field moved as it is, floats as their bits.
 */
#ifndef PT_HISTPB_H
#define PT_HISTPB_H

#include "arena.h"
#include "histogram.h"
#include "remote.pb-c.h"

/* h as a message whose arrays are in a (the count and zero count cases set to h's kind,
 * even when 0): NULL when a is exhausted. */
Prometheus__Histogram *pt_histpb_from(pt_arena *a, const pt_histogram *h);

/* m into h (its block reused): 0, PT_ETOOLARGE past PT_HIST_MAX_ELEMS, PT_ENOMEM. A
 * message without count_float is an integer histogram, as in Prometheus. */
int pt_histpb_to(const Prometheus__Histogram *m, pt_histogram *h);

#endif
