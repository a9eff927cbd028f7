/*
 * SAMPLES answers (prometheus.ReadResponse) written straight to protobuf wire bytes, a
 * batch of series at a time, without building the message as protobuf-c structs first.
 *
 * The bytes are the ones protobuf_c_message_pack makes for the same message: fields in
 * number order, proto3 zero values left out (a sample's value 0 and -0 alike, a zero
 * timestamp, an empty label name or value), one QueryResult per query even when it has no
 * series. A QueryResult's length is known only when its query ends, so room for the
 * longest varint is kept in front of it and the gap closed then: the first query's header
 * is written right-aligned into its room, a later query's content moves down (a memmove of
 * that query's bytes once).
 */
#ifndef PT_SAMPLES_H
#define PT_SAMPLES_H

#include <stddef.h>

#include "buf.h"
#include "model.h"
#include "slice.h"

typedef struct pt_samples {
    pt_buf out;   /* heap memory, at most the ceiling given to pt_samples_init */
    size_t qhead; /* where the open query's kept room begins, from pt_buf_data */
    int open;     /* a query is open: its series are being added */
} pt_samples;

/* An empty answer whose bytes may take up to max bytes (0 = no ceiling). */
void pt_samples_init(pt_samples *e, size_t max);

/* Appends n series of the query being answered (every query in turn, in the order a read
 * makes them; last_of_query after its last series ends it, also when n is 0). 0,
 * PT_ETOOLARGE past the ceiling, or PT_ENOMEM. After an error the answer is unusable
 * (only pt_samples_free). */
int pt_samples_add(pt_samples *e, const pt_series *s, size_t n, int last_of_query);

/* The answer's bytes, once the last query has ended: valid until the next call on e. */
pt_slice pt_samples_bytes(const pt_samples *e);

/* The bytes held, for the request's memory budget (pages past them are never touched). */
static inline size_t pt_samples_size(const pt_samples *e)
{
    return e->out.len;
}

void pt_samples_free(pt_samples *e);

#endif
