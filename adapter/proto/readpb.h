/*
 * The protobuf-c side of remote read, for the protocol's own code and for tools and tests
 * that build requests with protobuf-c: a decoded ReadRequest message as the plain request
 * the store reads (decode.h).
 */
#ifndef PT_READPB_H
#define PT_READPB_H

#include "arena.h"
#include "decode.h"
#include "remote.pb-c.h"

/* rr's queries and response type as *out; the matchers' slices point into rr, the arrays
 * are in a. 0 or PT_ENOMEM. */
int pt_read_request_from_pb(const Prometheus__ReadRequest *rr, pt_arena *a,
                            pt_read_request *out);

#endif
