/*
 * Native histogram samples between their owned form (base/histogram.h, what the cells
 * hold), the write decoder's view (wire.h) and protobuf-c's prometheus.Histogram (what the
 * read path answers with): every field moved as it is, floats as their bits.
 */
#ifndef PT_HISTPB_H
#define PT_HISTPB_H

#include "arena.h"
#include "histogram.h"
#include "remote.pb-c.h"
#include "wire.h"

/* h as a message whose arrays are in a (the count and zero count cases set to h's kind,
 * even when 0): NULL when a is exhausted. */
Prometheus__Histogram *pt_histpb_from(pt_arena *a, const pt_histogram *h);

/* m into h (its block reused): 0, PT_ETOOLARGE past PT_HIST_MAX_ELEMS, PT_ENOMEM. A
 * message without count_float is an integer histogram, as in Prometheus. */
int pt_histpb_to(const Prometheus__Histogram *m, pt_histogram *h);

/* The decoded histogram w as an owned, validated histogram in h (its block reused): 0;
 * PT_EBADREQ with why saying what is wrong; PT_ENOMEM. A histogram is integer unless
 * count_float was sent (as in Prometheus); what Prometheus would silently drop from it (a
 * zero count or bucket counts of the other kind) is refused, so what is stored is what was
 * sent. */
int pt_histpb_from_wire(const pt_whist *w, pt_histogram *h, char *why, size_t whylen);

#endif
