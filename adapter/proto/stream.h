/*
 * STREAMED_XOR_CHUNKS answers (prometheus.ChunkedReadResponse frames): each series of a
 * read cut into chunks (XOR for floats, HISTOGRAM / FLOAT_HISTOGRAM for native
 * histograms) and framed, one series per frame as Prometheus' own server does.
 */
#ifndef PT_STREAM_H
#define PT_STREAM_H

#include <stddef.h>

#include "arena.h"
#include "buf.h"
#include "model.h"

/* Appends the frames of series se of query `query` to o: its stored chunks as they are,
 * its other samples as chunks of at most 120 samples; one frame per series unless its
 * chunks pass 1 MiB. A frame is uvarint(length) ‖ CRC-32C(message) big-endian ‖ message.
 * Scratch from a. 0 or PT_ENOMEM. */
int pt_stream_series(pt_buf *o, size_t query, const pt_series *se, pt_arena *a);

#endif
