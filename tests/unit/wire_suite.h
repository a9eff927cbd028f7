/*
 * What the exemplar and histogram conformance suites share: building protobuf bodies by
 * hand, writing them through the wire decoder into a store, and checking that a remote read's SAMPLES
 * answer as the server streams it (pt_read batches through pt_samples) is the bytes
 * protobuf-c packs from the same answer read as structs.
 */
#ifndef PT_TEST_WIRE_SUITE_H
#define PT_TEST_WIRE_SUITE_H

#include <string.h>

#include "bytes.h"
#include "samples.h"
#include "store.h"
#include "store_helpers.h"
#include "tap.h"
#include "wire.h"

/* A length-delimited field (tag, then n as a varint, then b) at p; returns its end. */
static uint8_t *ws_put_len(uint8_t *p, uint8_t tag, const uint8_t *b, size_t n)
{
    *p++ = tag;
    p = pt_put_uvarint(p, n);
    memcpy(p, b, n);
    return p + n;
}

/* A 1.0 series in a, labelled __name__=name and job=job, nothing else set. */
static Prometheus__TimeSeries *ws_series_v1(pt_arena *a, const char *name, const char *job)
{
    Prometheus__TimeSeries *ts = pt_arena_alloc(a, sizeof(*ts));
    prometheus__time_series__init(ts);
    ts->labels = pt_arena_alloc(a, 2 * sizeof(void *));
    ts->labels[0] = mk_label(a, "__name__", name);
    ts->labels[1] = mk_label(a, "job", job);
    ts->n_labels = 2;
    return ts;
}

/* Decodes body as a remote write request of version (1 or 2) into a and writes it to st;
 * -1 (with a diag) when it does not decode, else pt_store_write's result. */
static int ws_write(pt_store *st, pt_arena *a, pt_slice body, int version,
                    pt_write_result *res)
{
    pt_wreq wr;
    char msg[256];
    if (pt_wire_decode(body.p, body.n, version, a, &wr, msg, sizeof(msg)) != 0) {
        diag("decode: %s", msg);
        return -1;
    }
    return pt_store_write(st, &wr, a, res);
}

/* Reads rr from st as SAMPLES bytes and checks they are protobuf-c's packing of resp (what
 * pt_store_read answered for rr). Returns the bytes unpacked by protobuf-c for the caller's
 * field checks: NULL when they do not unpack, else free with
 * prometheus__read_response__free_unpacked. */
static Prometheus__ReadResponse *ws_samples_check(pt_store *st, const Prometheus__ReadRequest *rr,
                                                  pt_arena *a, const Prometheus__ReadResponse *resp,
                                                  const char *what)
{
    pt_read *r;
    pt_read_batch bt;
    pt_samples e;
    char msg[256];
    int rv;
    pt_read_request req;
    pt_samples_init(&e, 0);
    pt_read_request_from_pb(rr, a, &req);
    pt_read_start(st, req.queries, req.nqueries, a, NULL, &r);
    while ((rv = pt_read_next(r, a, 0, &bt, msg, sizeof(msg))) == 1)
        pt_samples_add(&e, bt.s, bt.n, bt.last_of_query);
    pt_read_free(r);
    pt_slice got = pt_samples_bytes(&e);
    size_t n = prometheus__read_response__get_packed_size(resp);
    uint8_t *p = pt_arena_alloc(a, n + 1);
    prometheus__read_response__pack(resp, p);
    ok(rv == 0 && got.n == n && memcmp(got.p, p, n) == 0,
       "%s: SAMPLES wire bytes are protobuf-c's (%zu bytes)", what, n);
    Prometheus__ReadResponse *u = prometheus__read_response__unpack(NULL, got.n, got.p);
    pt_samples_free(&e);
    return u;
}

#endif
