/* STREAMED_XOR_CHUNKS answers: the series of a SAMPLES answer re-cut into XOR chunks and
 * framed, one series per frame as Prometheus' own server does. */
#include <string.h>

#include "buf.h"
#include "bytes.h"
#include "error.h"
#include "store.h"
#include "xor.h"

/* A frame's payload budget; a longer series continues in the next frame (full labels). */
#define FRAME_BUDGET (1u << 20)

/* Appends uvarint(len) ‖ CRC-32C(message) big-endian ‖ message. */
static int frame(pt_buf *o, Prometheus__ChunkedReadResponse *m)
{
    size_t len = protobuf_c_message_get_packed_size(&m->base);
    uint8_t *p = pt_buf_room(o, len + 14);
    if (!p)
        return PT_ENOMEM;
    uint8_t *start = p;
    p = pt_put_uvarint(p, len);
    protobuf_c_message_pack(&m->base, p + 4);
    pt_put_be32(p, pt_crc32c(p + 4, len));
    pt_buf_commit(o, (size_t)(p + 4 - start) + len);
    return 0;
}

int pt_stream_series(pt_buf *o, size_t query, const Prometheus__TimeSeries *ts, pt_arena *a)
{
    size_t nchunks = (ts->n_samples + PT_XOR_MAX_SAMPLES - 1) / PT_XOR_MAX_SAMPLES;
    Prometheus__Chunk *chunks = pt_arena_alloc(a, (nchunks ? nchunks : 1) * sizeof(*chunks));
    Prometheus__Chunk **cp = pt_arena_alloc(a, (nchunks ? nchunks : 1) * sizeof(*cp));
    int64_t *t = pt_arena_alloc(a, PT_XOR_MAX_SAMPLES * sizeof(*t));
    double *v = pt_arena_alloc(a, PT_XOR_MAX_SAMPLES * sizeof(*v));
    if (!chunks || !cp || !t || !v)
        return PT_ENOMEM;
    for (size_t c = 0; c < nchunks; c++) {
        size_t first = c * PT_XOR_MAX_SAMPLES, n = ts->n_samples - first;
        if (n > PT_XOR_MAX_SAMPLES)
            n = PT_XOR_MAX_SAMPLES;
        for (size_t i = 0; i < n; i++) {
            t[i] = ts->samples[first + i]->timestamp;
            v[i] = ts->samples[first + i]->value;
        }
        pt_slice data;
        if (pt_xor_encode(a, t, v, n, &data))
            return PT_ENOMEM;
        prometheus__chunk__init(&chunks[c]);
        chunks[c].min_time_ms = t[0];
        chunks[c].max_time_ms = t[n - 1];
        chunks[c].type = PROMETHEUS__CHUNK__ENCODING__XOR;
        chunks[c].data = (ProtobufCBinaryData){data.n, (uint8_t *)data.p};
        cp[c] = &chunks[c];
    }
    /* Consecutive frames of at most FRAME_BUDGET bytes of chunk data each. */
    size_t c = 0;
    while (c < nchunks) {
        size_t end = c, bytes = 0;
        while (end < nchunks && (end == c || bytes + cp[end]->data.len <= FRAME_BUDGET))
            bytes += cp[end++]->data.len;
        Prometheus__ChunkedSeries cs;
        Prometheus__ChunkedSeries *csp = &cs;
        prometheus__chunked_series__init(&cs);
        cs.n_labels = ts->n_labels;
        cs.labels = ts->labels;
        cs.n_chunks = end - c;
        cs.chunks = cp + c;
        Prometheus__ChunkedReadResponse m;
        prometheus__chunked_read_response__init(&m);
        m.n_chunked_series = 1;
        m.chunked_series = &csp;
        m.query_index = (int64_t)query;
        if (frame(o, &m))
            return PT_ENOMEM;
        c = end;
    }
    return 0;
}

int pt_stream_frames(const Prometheus__ReadResponse *r, pt_arena *a, pt_slice *body)
{
    pt_buf o;
    pt_buf_init_arena(&o, a, 0);
    if (pt_buf_reserve(&o, 4096))
        return PT_ENOMEM;
    for (size_t q = 0; q < r->n_results; q++)
        for (size_t s = 0; s < r->results[q]->n_timeseries; s++)
            if (pt_stream_series(&o, q, r->results[q]->timeseries[s], a))
                return PT_ENOMEM;
    *body = (pt_slice){o.p, o.len};
    return 0;
}
