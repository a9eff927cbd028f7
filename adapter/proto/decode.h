/*
 * Decoders for request bodies: snappy block format, then protobuf-c into the request
 * arena. No I/O; every size the peer controls is checked against a limit before memory
 * is committed to it.
 */
#ifndef PT_DECODE_H
#define PT_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "model.h"
#include "slice.h"
#include "wire.h"

typedef struct pt_decode_limits {
    size_t max_decoded; /* declared uncompressed length ceiling (413 above) */
} pt_decode_limits;

/* Decompresses a snappy block into arena memory. Returns 0, PT_ETOOLARGE when the
 * declared length is over the limit, PT_ESNAPPY for anything malformed (including the
 * framed snappy format), PT_ENOMEM when the arena ceiling is hit. msg gets a reason. */
int pt_snappy_decode(const uint8_t *in, size_t n, size_t max_decoded, pt_arena *a,
                     pt_slice *out, char *msg, size_t msglen);

/* Compresses into arena memory. */
int pt_snappy_encode(const uint8_t *in, size_t n, pt_arena *a, pt_slice *out);

/* snappy(protobuf(WriteRequest)) of remote write 1.0 (version 1) or 2.0 (version 2) →
 * *out, by the zero-copy decoder (wire.h): the decompressed body and the arrays out points
 * into are arena memory. */
int pt_decode_write(const uint8_t *buf, size_t len, const pt_decode_limits *lim, pt_arena *a,
                    int version, pt_wreq *out, char *msg, size_t msglen);

/* ReadRequest.ResponseType's values. */
enum { PT_READ_SAMPLES = 0, PT_READ_STREAMED_XOR_CHUNKS = 1 };

/* A remote read request: its queries, and how to answer them. */
typedef struct pt_read_request {
    pt_query *queries;
    int rollups; /* answer from roll-ups where the hints allow (the caller's to set) */
    size_t nqueries;
    int response; /* the first type in the client's list that promtable answers (PT_READ_*;
                     SAMPLES when the list is empty), or -1 when it answers none of them */
} pt_read_request;

/* snappy(protobuf(ReadRequest)) → *out, its queries and their matchers in the arena
 * (slices of the decompressed body). */
int pt_decode_read(const uint8_t *buf, size_t len, const pt_decode_limits *lim, pt_arena *a,
                   pt_read_request *out, char *msg, size_t msglen);

#endif
