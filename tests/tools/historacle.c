/*
 * historacle: Prometheus itself as the oracle for base/hchunk.c. The test
 * (tests/e2e/histogram_chunks.sh) sends a real Prometheus integer native histograms by
 * remote write, reads them back as STREAMED_XOR_CHUNKS, and this tool compares the
 * HISTOGRAM chunks Prometheus' TSDB built with the ones promtable's encoder builds from the
 * same samples, byte for byte, and decodes Prometheus' chunks with promtable's decoder.
 *
 *   historacle write OUT T0        snappy WriteRequest: the samples, starting at T0 ms
 *   historacle read OUT T0         snappy ReadRequest for them, STREAMED_XOR_CHUNKS only
 *   historacle check ANSWER T0     TAP lines comparing the streamed answer
 *
 * The samples (a pure function of T0): one series, schema 3 and a fixed bucket layout
 * (positive spans {-3,4} {2,3}, negative span {0,2}), counts growing by irregular steps
 * up to a million (every varbit size), a fractional sum, timestamps 15 s apart with jitter.
 */
#include <math.h>
#include <snappy-c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hchunk.h"
#include "remote.pb-c.h"

enum { N = 100, NP = 7, NN = 2 };

/* Sample i into h (layout fixed, counts from a running state). */
static void gen(int64_t t0, int i, pt_histogram *h)
{
    static const pt_hist_span pos[] = {{-3, 4}, {2, 3}}, neg[] = {{0, 2}};
    static const uint64_t steps[] = {0, 1, 3, 5, 40, 300, 2500, 100000, 1000000};
    if (pt_histogram_reserve(h, 1, 2, NN, NP, 0) != 0)
        abort();
    memcpy(h->pos_spans, pos, sizeof(pos));
    memcpy(h->neg_spans, neg, sizeof(neg));
    h->schema = 3;
    h->zero_threshold = ldexp(1, -128);
    h->t = t0 + 15000 * (int64_t)i + (i % 7) * 13;
    uint64_t c[NP + NN], total = 0;
    for (int k = 0; k < NP + NN; k++) {
        c[k] = 0;
        for (int j = 0; j <= i; j++)
            c[k] += steps[(unsigned)(j * 7 + k * 3) % 9];
    }
    for (int k = 0; k < NP; k++) {
        h->pos_deltas[k] = (int64_t)(c[k] - (k ? c[k - 1] : 0));
        total += c[k];
    }
    for (int k = 0; k < NN; k++) {
        h->neg_deltas[k] = (int64_t)(c[NP + k] - (k ? c[NP + k - 1] : 0));
        total += c[NP + k];
    }
    h->zero_count_int = (uint64_t)i * 2;
    h->count_int = total + h->zero_count_int;
    h->sum = 0.1 * i * i + 0.25;
}

/* Writes snappy(raw) to path and frees raw. */
static int write_snappy(const char *path, uint8_t *raw, size_t n)
{
    size_t cap = snappy_max_compressed_length(n);
    char *out = malloc(cap);
    FILE *f = fopen(path, "wb");
    int rv = out && f && snappy_compress((const char *)raw, n, out, &cap) == SNAPPY_OK &&
                     fwrite(out, 1, cap, f) == cap
                 ? 0
                 : 1;
    if (f && fclose(f) != 0)
        rv = 1;
    free(out);
    free(raw);
    return rv;
}

static void spans_free(Prometheus__BucketSpan **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static Prometheus__BucketSpan **spans_pb(const pt_hist_span *s, size_t n)
{
    Prometheus__BucketSpan **v = calloc(n, sizeof(*v));
    for (size_t i = 0; i < n; i++) {
        v[i] = malloc(sizeof(**v));
        prometheus__bucket_span__init(v[i]);
        v[i]->offset = s[i].offset;
        v[i]->length = s[i].length;
    }
    return v;
}

static int cmd_write(const char *out, int64_t t0)
{
    Prometheus__Histogram *hs[N];
    pt_histogram h[N];
    for (int i = 0; i < N; i++) {
        h[i] = PT_HISTOGRAM_INIT;
        gen(t0, i, &h[i]);
        Prometheus__Histogram *p = hs[i] = malloc(sizeof(*p));
        prometheus__histogram__init(p);
        p->count_case = PROMETHEUS__HISTOGRAM__COUNT_COUNT_INT;
        p->count_int = h[i].count_int;
        p->zero_count_case = PROMETHEUS__HISTOGRAM__ZERO_COUNT_ZERO_COUNT_INT;
        p->zero_count_int = h[i].zero_count_int;
        p->sum = h[i].sum;
        p->schema = h[i].schema;
        p->zero_threshold = h[i].zero_threshold;
        p->n_positive_spans = h[i].n_pos_spans;
        p->positive_spans = spans_pb(h[i].pos_spans, h[i].n_pos_spans);
        p->n_negative_spans = h[i].n_neg_spans;
        p->negative_spans = spans_pb(h[i].neg_spans, h[i].n_neg_spans);
        p->n_positive_deltas = h[i].n_pos;
        p->positive_deltas = h[i].pos_deltas;
        p->n_negative_deltas = h[i].n_neg;
        p->negative_deltas = h[i].neg_deltas;
        p->timestamp = h[i].t;
    }
    Prometheus__Label name = PROMETHEUS__LABEL__INIT, *lp = &name;
    name.name = (ProtobufCBinaryData){8, (uint8_t *)"__name__"};
    name.value = (ProtobufCBinaryData){11, (uint8_t *)"pt_hist_int"};
    Prometheus__TimeSeries ts = PROMETHEUS__TIME_SERIES__INIT, *tsp = &ts;
    ts.n_labels = 1;
    ts.labels = &lp;
    ts.n_histograms = N;
    ts.histograms = hs;
    Prometheus__WriteRequest wr = PROMETHEUS__WRITE_REQUEST__INIT;
    wr.n_timeseries = 1;
    wr.timeseries = &tsp;
    size_t n = prometheus__write_request__get_packed_size(&wr);
    uint8_t *raw = malloc(n);
    prometheus__write_request__pack(&wr, raw);
    int rv = write_snappy(out, raw, n);
    for (int i = 0; i < N; i++) {
        spans_free(hs[i]->positive_spans, hs[i]->n_positive_spans);
        spans_free(hs[i]->negative_spans, hs[i]->n_negative_spans);
        free(hs[i]);
        pt_histogram_free(&h[i]);
    }
    return rv;
}

static int cmd_read(const char *out, int64_t t0)
{
    Prometheus__LabelMatcher m = PROMETHEUS__LABEL_MATCHER__INIT, *mp = &m;
    m.type = PROMETHEUS__LABEL_MATCHER__TYPE__EQ;
    m.name = (ProtobufCBinaryData){8, (uint8_t *)"__name__"};
    m.value = (ProtobufCBinaryData){11, (uint8_t *)"pt_hist_int"};
    Prometheus__Query q = PROMETHEUS__QUERY__INIT, *qp = &q;
    q.start_timestamp_ms = t0 - 1;
    q.end_timestamp_ms = t0 + 15000 * N;
    q.n_matchers = 1;
    q.matchers = &mp;
    Prometheus__ReadRequest rr = PROMETHEUS__READ_REQUEST__INIT;
    Prometheus__ReadRequest__ResponseType types[] = {
        PROMETHEUS__READ_REQUEST__RESPONSE_TYPE__STREAMED_XOR_CHUNKS};
    rr.n_queries = 1;
    rr.queries = &qp;
    rr.n_accepted_response_types = 1;
    rr.accepted_response_types = types;
    size_t n = prometheus__read_request__get_packed_size(&rr);
    uint8_t *raw = malloc(n);
    prometheus__read_request__pack(&rr, raw);
    return write_snappy(out, raw, n);
}

static int tap_n, tap_bad;

static void tap(int cond, const char *what)
{
    printf("%sok %d - %s\n", cond ? "" : "not ", ++tap_n, what);
    tap_bad += !cond;
}

static void hex(const char *tag, const uint8_t *p, size_t n)
{
    printf("# %s:", tag);
    for (size_t i = 0; i < n; i++)
        printf(" %02x", p[i]);
    printf("\n");
}

/* Compares Prometheus' chunk with the samples [first, first+count) of ours. */
static void compare(const uint8_t *p, size_t n, int type, int idx, int first, int64_t t0)
{
    char what[160];
    int count = n >= 2 ? p[0] << 8 | p[1] : 0;
    snprintf(what, sizeof(what), "chunk %d: encoding HISTOGRAM, %d samples", idx, count);
    tap(type == PROMETHEUS__CHUNK__ENCODING__HISTOGRAM && count > 0 && first + count <= N, what);
    if (type != PROMETHEUS__CHUNK__ENCODING__HISTOGRAM || count == 0 || first + count > N)
        return;
    pt_histogram h = PT_HISTOGRAM_INIT, got = PT_HISTOGRAM_INIT;
    pt_hchunk_enc e;
    pt_hchunk_enc_init(&e, 1 << 20);
    int added = 1;
    for (int i = first; i < first + count; i++) {
        gen(t0, i, &h);
        added &= pt_hchunk_enc_add(&e, &h) == 0;
    }
    pt_slice mine = pt_hchunk_enc_bytes(&e);
    /* Byte 2 is the counter-reset header: only the first chunk's is compared (a cut for
     * size says "unknown" in Prometheus 2.42, "not a reset" in later ones and here). */
    int same = added && mine.n == n && memcmp(mine.p, p, 2) == 0 &&
               (idx > 0 || mine.p[2] == p[2]) && memcmp(mine.p + 3, p + 3, n - 3) == 0;
    snprintf(what, sizeof(what), "chunk %d: promtable's encoder writes Prometheus' %zu bytes", idx,
             n);
    tap(same, what);
    if (!same) {
        hex("prometheus", p, n);
        hex("promtable ", mine.p, mine.n);
    }
    pt_hchunk_dec d;
    int good = pt_hchunk_dec_init(&d, PT_HCHUNK_HISTOGRAM, p, n, -1) == 0;
    for (int i = first; good && i < first + count; i++) {
        gen(t0, i, &h);
        h.reset_hint = i == first ? PT_HIST_RESET_UNKNOWN : PT_HIST_RESET_NO;
        good = pt_hchunk_dec_next(&d, &got) == 1 && pt_histogram_equal(&got, &h);
    }
    good = good && pt_hchunk_dec_next(&d, &got) == 0;
    snprintf(what, sizeof(what), "chunk %d: promtable's decoder reads Prometheus' samples", idx);
    tap(good, what);
    pt_hchunk_dec_free(&d);
    pt_hchunk_enc_free(&e);
    pt_histogram_free(&h);
    pt_histogram_free(&got);
}

static int cmd_check(const char *path, int64_t t0)
{
    FILE *f = fopen(path, "rb");
    static uint8_t buf[1 << 22];
    size_t n = f ? fread(buf, 1, sizeof(buf), f) : 0;
    if (f)
        fclose(f);
    const uint8_t *p = buf, *end = buf + n;
    int chunks = 0, samples = 0;
    while (p < end) {
        uint64_t len = 0;
        int shift = 0;
        while (p < end && shift < 64) {
            len |= (uint64_t)(*p & 0x7f) << shift;
            shift += 7;
            if (!(*p++ & 0x80))
                break;
        }
        if ((uint64_t)(end - p) < 4 || len > (uint64_t)(end - p) - 4) {
            tap(0, "streamed answer frames parse");
            return 1;
        }
        p += 4;
        Prometheus__ChunkedReadResponse *r =
            prometheus__chunked_read_response__unpack(NULL, (size_t)len, p);
        p += len;
        if (!r) {
            tap(0, "frame is a ChunkedReadResponse");
            return 1;
        }
        for (size_t i = 0; i < r->n_chunked_series; i++)
            for (size_t k = 0; k < r->chunked_series[i]->n_chunks; k++) {
                Prometheus__Chunk *c = r->chunked_series[i]->chunks[k];
                compare(c->data.data, c->data.len, c->type, chunks, samples, t0);
                samples += c->data.len >= 2 ? c->data.data[0] << 8 | c->data.data[1] : 0;
                chunks++;
            }
        prometheus__chunked_read_response__free_unpacked(r, NULL);
    }
    tap(samples == N, "the chunks hold every sample written");
    printf("1..%d\n", tap_n);
    return tap_bad != 0;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: historacle write|read|check FILE T0\n");
        return 2;
    }
    int64_t t0 = strtoll(argv[3], NULL, 10);
    if (strcmp(argv[1], "write") == 0)
        return cmd_write(argv[2], t0);
    if (strcmp(argv[1], "read") == 0)
        return cmd_read(argv[2], t0);
    if (strcmp(argv[1], "check") == 0)
        return cmd_check(argv[2], t0);
    fprintf(stderr, "historacle: unknown command %s\n", argv[1]);
    return 2;
}
