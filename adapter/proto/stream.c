/* STREAMED_XOR_CHUNKS answers: a read's series cut into chunks and framed. */
#include "stream.h"

#include <string.h>

#include "buf.h"
#include "bytes.h"
#include "error.h"
#include "hchunk.h"
#include "remote.pb-c.h"
#include "xor.h"

/* A frame's payload budget; a longer series continues in the next frame (full labels). */
#define FRAME_BUDGET (1u << 20)
/* A histogram chunk's byte ceiling: any sample fits (they are cut at 120 samples). */
#define HCHUNK_MAX ((size_t)1 << 30)

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

/* The chunks of one series, in time order, in arena memory. */
typedef struct chunks {
    pt_arena *a;
    Prometheus__Chunk **v;
    size_t n, cap;
} chunks;

/* Appends a chunk of data (copied when copy is set) spanning [tmin, tmax]. */
static int chunk_add(chunks *c, int type, pt_slice data, int copy, int64_t tmin, int64_t tmax)
{
    Prometheus__Chunk **v = pt_arena_grow(c->a, c->v, c->n, &c->cap, sizeof(*v), 8);
    if (!v)
        return PT_ENOMEM;
    c->v = v;
    Prometheus__Chunk *ch = pt_arena_alloc(c->a, sizeof(*ch));
    uint8_t *p = copy ? pt_arena_alloc(c->a, data.n ? data.n : 1) : (uint8_t *)data.p;
    if (!ch || !p)
        return PT_ENOMEM;
    if (copy && data.n)
        memcpy(p, data.p, data.n);
    prometheus__chunk__init(ch);
    ch->min_time_ms = tmin;
    ch->max_time_ms = tmax;
    ch->type = (Prometheus__Chunk__Encoding)type;
    ch->data = (ProtobufCBinaryData){data.n, p};
    c->v[c->n++] = ch;
    return 0;
}

/* The histogram chunk being built, when it holds samples: a chunk of c. */
static int hchunk_take(chunks *c, pt_hchunk_enc *e, int64_t tmin, int64_t tmax)
{
    if (e->n == 0)
        return 0;
    int rv = chunk_add(c, pt_hchunk_enc_encoding(e), pt_hchunk_enc_bytes(e), 1, tmin, tmax);
    pt_hchunk_enc_next(e);
    return rv;
}

/* Adds h to the histogram chunk, cutting it where the encoder says or at
 * PT_XOR_MAX_SAMPLES samples as Prometheus does. A staleness marker with other fields set
 * goes in as Prometheus keeps it (the other fields dropped). */
static int hchunk_add(chunks *c, pt_hchunk_enc *e, pt_histogram *h, int64_t *tmin)
{
    int rv;
    if (e->n >= PT_XOR_MAX_SAMPLES && (rv = hchunk_take(c, e, *tmin, e->last.t)) != 0)
        return rv;
    int cut = 0, cleared = 0;
    for (;;) {
        rv = pt_hchunk_enc_add(e, h);
        if (rv == PT_HCHUNK_CUT && !cut) {
            cut = 1;
            if ((rv = hchunk_take(c, e, *tmin, e->last.t)) != 0)
                return rv;
            continue;
        }
        if (rv == PT_EUNSUPPORTED && pt_histogram_is_stale(h) && !cleared) {
            cleared = 1;
            *h = (pt_histogram){.t = h->t, .is_float = h->is_float, .reset_hint = h->reset_hint,
                                .sum = h->sum, .mem = h->mem, .mem_cap = h->mem_cap};
            continue;
        }
        break;
    }
    if (rv == 0 && e->n == 1)
        *tmin = h->t;
    return rv;
}

/* Whether stored chunk r of se comes before float sample i. */
static int raw_at(const pt_series *se, size_t r, size_t i)
{
    return r < se->nchunks && se->chunks[r].at == i;
}

/* The series' samples as chunks in time order: its stored XOR chunks as they are, runs of
 * other floats as XOR chunks, runs of histograms as HISTOGRAM / FLOAT_HISTOGRAM chunks
 * (one encoding per chunk). */
static int series_chunks(const pt_series *se, chunks *c, pt_hchunk_enc *e)
{
    int64_t *t = pt_arena_alloc(c->a, PT_XOR_MAX_SAMPLES * sizeof(*t));
    double *v = pt_arena_alloc(c->a, PT_XOR_MAX_SAMPLES * sizeof(*v));
    if (!t || !v)
        return PT_ENOMEM;
    size_t i = 0, j = 0, r = 0;
    int rv;
    while (i < se->nsamples || j < se->nhists || r < se->nchunks) {
        int64_t ht = j < se->nhists ? se->hists[j].t : INT64_MAX;
        if (raw_at(se, r, i) && se->chunks[r].tmin <= ht) {
            const pt_chunk *ch = &se->chunks[r++];
            if (chunk_add(c, PROMETHEUS__CHUNK__ENCODING__XOR, ch->data, 0, ch->tmin, ch->tmax))
                return PT_ENOMEM;
            continue;
        }
        if (i < se->nsamples && se->samples[i].t <= ht) {
            size_t n = 0;
            while (i < se->nsamples && n < PT_XOR_MAX_SAMPLES && se->samples[i].t <= ht &&
                   !raw_at(se, r, i)) {
                t[n] = se->samples[i].t;
                v[n++] = se->samples[i++].v;
            }
            pt_slice data;
            if (pt_xor_encode(c->a, t, v, n, &data) ||
                chunk_add(c, PROMETHEUS__CHUNK__ENCODING__XOR, data, 0, t[0], t[n - 1]))
                return PT_ENOMEM;
            continue;
        }
        int64_t ft = raw_at(se, r, i)     ? se->chunks[r].tmin
                     : i < se->nsamples ? se->samples[i].t
                                        : INT64_MAX;
        int64_t tmin = 0;
        while (j < se->nhists && se->hists[j].t < ft) {
            pt_histogram h = se->hists[j++]; /* hchunk_add may clear a stale one's fields */
            if ((rv = hchunk_add(c, e, &h, &tmin)) != 0)
                return rv;
        }
        if ((rv = hchunk_take(c, e, tmin, e->last.t)) != 0)
            return rv;
    }
    return 0;
}

int pt_stream_series(pt_buf *o, size_t query, const pt_series *se, pt_arena *a)
{
    chunks ch = {.a = a};
    pt_hchunk_enc e;
    pt_hchunk_enc_init(&e, HCHUNK_MAX);
    int rv = series_chunks(se, &ch, &e);
    pt_hchunk_enc_free(&e);
    if (rv != 0)
        return rv;
    Prometheus__Label **lp = pt_arena_alloc(a, (se->nlabels ? se->nlabels : 1) * sizeof(*lp));
    Prometheus__Label *lv = pt_arena_alloc(a, (se->nlabels ? se->nlabels : 1) * sizeof(*lv));
    if (!lp || !lv)
        return PT_ENOMEM;
    for (size_t j = 0; j < se->nlabels; j++) {
        prometheus__label__init(&lv[j]);
        lv[j].name = (ProtobufCBinaryData){se->labels[j].name.n, (uint8_t *)se->labels[j].name.p};
        lv[j].value =
            (ProtobufCBinaryData){se->labels[j].value.n, (uint8_t *)se->labels[j].value.p};
        lp[j] = &lv[j];
    }
    size_t nchunks = ch.n;
    Prometheus__Chunk **cp = ch.v;
    /* Consecutive frames of at most FRAME_BUDGET bytes of chunk data each. */
    size_t c = 0;
    while (c < nchunks) {
        size_t end = c, bytes = 0;
        while (end < nchunks && (end == c || bytes + cp[end]->data.len <= FRAME_BUDGET))
            bytes += cp[end++]->data.len;
        Prometheus__ChunkedSeries cs;
        Prometheus__ChunkedSeries *csp = &cs;
        prometheus__chunked_series__init(&cs);
        cs.n_labels = se->nlabels;
        cs.labels = lp;
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
