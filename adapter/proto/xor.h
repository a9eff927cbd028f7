/*
 * Prometheus XOR chunks (tsdb/chunkenc "XOR" encoding: a 2-byte big-endian sample count,
 * then base/gorilla.h's sample stream) and the framing of streamed remote
 * read responses: uvarint(len) ‖ CRC-32C(payload) big-endian ‖ payload.
 */
#ifndef PT_XOR_H
#define PT_XOR_H

#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "slice.h"

/* Most samples in one chunk, as Prometheus' TSDB does. */
#define PT_XOR_MAX_SAMPLES 120

/* Encodes n (1..65535) samples with strictly increasing timestamps into an arena-allocated
 * chunk. Returns 0 or PT_ENOMEM. */
int pt_xor_encode(pt_arena *a, const int64_t *t, const double *v, size_t n, pt_slice *out);

/* Decodes a chunk into caller arrays of capacity cap; returns the sample count or a
 * negative error (PT_EBADREQ) for a malformed chunk. */
long pt_xor_decode(pt_slice chunk, int64_t *t, double *v, size_t cap);

/* CRC-32C (Castagnoli), as the streamed remote read frames use. */
uint32_t pt_crc32c(const uint8_t *p, size_t n);

#endif
