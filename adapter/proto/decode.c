#include "decode.h"

#include <snappy-c.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "pb_alloc.h"
#include "readpb.h"

static const uint8_t framed_magic[] = {0xff, 0x06, 0x00, 0x00, 's', 'N', 'a', 'P', 'p', 'Y'};

int pt_snappy_decode(const uint8_t *in, size_t n, size_t max_decoded, pt_arena *a,
                     pt_slice *out, char *msg, size_t msglen)
{
    size_t declared;
    if (n >= sizeof(framed_magic) && memcmp(in, framed_magic, sizeof(framed_magic)) == 0) {
        snprintf(msg, msglen,
                 "body is framed snappy; remote write/read use the snappy block format");
        return PT_ESNAPPY;
    }
    if (snappy_uncompressed_length((const char *)in, n, &declared) != SNAPPY_OK) {
        snprintf(msg, msglen, "body is not a snappy block: bad length header");
        return PT_ESNAPPY;
    }
    if (declared > max_decoded) {
        snprintf(msg, msglen, "snappy block declares %zu decoded bytes, over the limit of %zu",
                 declared, max_decoded);
        return PT_ETOOLARGE;
    }
    char *buf = pt_arena_alloc(a, declared ? declared : 1);
    if (!buf) {
        snprintf(msg, msglen, "request needs more memory than the per-request limit");
        return PT_ETOOLARGE;
    }
    size_t got = declared;
    if (snappy_uncompress((const char *)in, n, buf, &got) != SNAPPY_OK || got != declared) {
        snprintf(msg, msglen, "body is not a valid snappy block");
        return PT_ESNAPPY;
    }
    *out = (pt_slice){(const uint8_t *)buf, got};
    return 0;
}

int pt_snappy_encode(const uint8_t *in, size_t n, pt_arena *a, pt_slice *out)
{
    size_t cap = snappy_max_compressed_length(n);
    char *buf = pt_arena_alloc(a, cap);
    if (!buf)
        return PT_ENOMEM;
    if (snappy_compress((const char *)in, n, buf, &cap) != SNAPPY_OK)
        return PT_EINTERNAL;
    *out = (pt_slice){(const uint8_t *)buf, cap};
    return 0;
}

/* Snappy, then unpack with the arena allocator. */
static int decode_body(const uint8_t *buf, size_t len, const pt_decode_limits *lim,
                       pt_arena *a, const ProtobufCMessageDescriptor *desc,
                       ProtobufCMessage **out, char *msg, size_t msglen)
{
    pt_slice raw;
    int rv = pt_snappy_decode(buf, len, lim->max_decoded, a, &raw, msg, msglen);
    if (rv != 0)
        return rv;
    ProtobufCAllocator alloc;
    pt_pb_allocator(a, &alloc);
    ProtobufCMessage *m = protobuf_c_message_unpack(desc, &alloc, raw.n, raw.p);
    if (!m) {
        /* protobuf-c reports an exhausted allocator and a malformed message alike. */
        if (a->exhausted) {
            snprintf(msg, msglen, "decoding the %s needs more memory than the per-request limit",
                     desc->short_name);
            return PT_ETOOLARGE;
        }
        snprintf(msg, msglen, "body is not a valid protobuf %s", desc->name);
        return PT_EPROTO;
    }
    *out = m;
    return 0;
}

int pt_decode_write(const uint8_t *buf, size_t len, const pt_decode_limits *lim, pt_arena *a,
                    int version, pt_wreq *out, char *msg, size_t msglen)
{
    pt_slice raw;
    int rv = pt_snappy_decode(buf, len, lim->max_decoded, a, &raw, msg, msglen);
    if (rv != 0)
        return rv;
    rv = pt_wire_decode(raw.p, raw.n, version, a, out, msg, msglen);
    if (rv == PT_WIRE_ENOMEM)
        return PT_ETOOLARGE;
    return rv ? PT_EPROTO : 0;
}

int pt_read_request_from_pb(const Prometheus__ReadRequest *rr, pt_arena *a,
                            pt_read_request *out)
{
    size_t nq = rr->n_queries;
    pt_query *qs = pt_arena_calloc(a, (nq ? nq : 1) * sizeof(*qs));
    if (!qs)
        return PT_ENOMEM;
    for (size_t i = 0; i < nq; i++) {
        const Prometheus__Query *q = rr->queries[i];
        pt_query_matcher *ms = pt_arena_alloc(a, (q->n_matchers ? q->n_matchers : 1) * sizeof(*ms));
        if (!ms)
            return PT_ENOMEM;
        for (size_t j = 0; j < q->n_matchers; j++) {
            const Prometheus__LabelMatcher *lm = q->matchers[j];
            ms[j] = (pt_query_matcher){.type = (int)lm->type,
                                       .name = {lm->name.data, lm->name.len},
                                       .value = {lm->value.data, lm->value.len}};
        }
        qs[i] = (pt_query){.start_ms = q->start_timestamp_ms, .end_ms = q->end_timestamp_ms,
                           .ms = ms, .nms = q->n_matchers};
        if (q->hints) {
            const Prometheus__ReadHints *h = q->hints;
            qs[i].step_ms = h->step_ms;
            qs[i].range_ms = h->range_ms;
            qs[i].hints_start_ms = h->start_ms;
            qs[i].func = (pt_slice){(const uint8_t *)h->func, h->func ? strlen(h->func) : 0};
        }
    }
    /* The first type in the client's list that promtable answers; none listed = SAMPLES. */
    int type = rr->n_accepted_response_types ? -1 : PT_READ_SAMPLES;
    for (size_t i = 0; i < rr->n_accepted_response_types && type < 0; i++) {
        int t = (int)rr->accepted_response_types[i];
        if (t == PT_READ_SAMPLES || t == PT_READ_STREAMED_XOR_CHUNKS)
            type = t;
    }
    *out = (pt_read_request){.queries = qs, .nqueries = nq, .response = type};
    return 0;
}

int pt_decode_read(const uint8_t *buf, size_t len, const pt_decode_limits *lim, pt_arena *a,
                   pt_read_request *out, char *msg, size_t msglen)
{
    Prometheus__ReadRequest *rr;
    int rv = decode_body(buf, len, lim, a, &prometheus__read_request__descriptor,
                         (ProtobufCMessage **)&rr, msg, msglen);
    if (rv == 0 && (rv = pt_read_request_from_pb(rr, a, out)) != 0)
        snprintf(msg, msglen, "decoding the ReadRequest needs more memory than the "
                              "per-request limit");
    return rv == PT_ENOMEM ? PT_ETOOLARGE : rv;
}
