/*
 * The write and read paths over a backend: protobuf requests in, row keys and cells out
 * (write); matchers in, merged series out (read). No HTTP here.
 */
#ifndef PT_STORE_H
#define PT_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "backend.h"
#include "index.h"
#include "remote.pb-c.h"
#include "rowkey.h"

typedef struct pt_store {
    pt_backend *be;
    pt_index_cache *cache;
    int64_t index_bucket_ms; /* index bucket length, default one day */
    /* Read limits, per query: 0 = unlimited. */
    size_t max_series;
    size_t max_samples;
} pt_store;

#define PT_MSG_MAX 1024

typedef struct pt_write_result {
    size_t samples_written;
    size_t series;             /* TimeSeries entries seen */
    size_t samples_rejected;   /* samples, histograms and exemplars not stored */
    size_t entries_rejected;   /* TimeSeries entries with an invalid label set */
    size_t index_rows;
    char msg[PT_MSG_MAX];      /* first problem, for the 400 body */
} pt_write_result;

/* Validates, stores what is valid, and reports what was not. Returns 0 when the backend
 * acknowledged every valid sample (res->samples_rejected tells whether the answer is 400),
 * or a backend error (retryable → 503). */
int pt_store_write(pt_store *st, const Prometheus__WriteRequest *wr, pt_arena *a,
                   pt_write_result *res);

/* Validates one label set and copies it to out (arena), dropping empty values; *plain
 * (when not NULL) tells whether no name or value needs escaping in keys.
 * Returns the label count or PT_ELABELS with msg set. */
long pt_labels_validate(Prometheus__Label *const *in, size_t n, pt_arena *a, pt_label **out,
                        int *plain, char *msg, size_t msglen);

/* Returns 1 if s is valid UTF-8. */
int pt_utf8_valid(pt_slice s);

/* Runs every query of a read request; fills resp (arena-allocated). Returns 0 or an
 * error with msg set (bad matcher/limit → 4xx, backend → 503). */
int pt_store_read(pt_store *st, const Prometheus__ReadRequest *rr, pt_arena *a,
                  Prometheus__ReadResponse *resp, char *msg, size_t msglen);

/* Re-encodes a SAMPLES answer as the STREAMED_XOR_CHUNKS body: one frame per series
 * (split only past 1 MiB of chunks), XOR chunks of at most 120 samples, query_index set.
 * The body is arena-allocated. */
int pt_stream_frames(const Prometheus__ReadResponse *r, pt_arena *a, pt_slice *body);

#endif
