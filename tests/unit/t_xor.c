/* XOR chunks and streamed read frames, against the vectors in the protocol reference. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "readpb_helpers.h"
#include "store.h"
#include "tap.h"
#include "xor.h"

static int same_bytes(pt_slice s, const uint8_t *want, size_t n)
{
    if (s.n != n || memcmp(s.p, want, n) != 0) {
        for (size_t i = 0; i < s.n; i++)
            printf("%s%02x", i ? " " : "#   got: ", s.p[i]);
        printf("\n");
        return 0;
    }
    return 1;
}

int main(void)
{
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    pt_slice c;

    is(pt_crc32c((const uint8_t *)"123456789", 9), 0xE3069283u, "CRC-32C check value");
    /* Every length and alignment against the polynomial bit by bit (the CPU's instruction
     * path and its byte-wise head and tail, or the table). */
    {
        static uint8_t buf[300];
        uint32_t seed = 12345;
        for (size_t i = 0; i < sizeof(buf); i++)
            buf[i] = (uint8_t)((seed = seed * 1103515245u + 12345u) >> 16);
        int bad = 0;
        for (size_t off = 0; off < 8; off++)
            for (size_t n = 0; n + off <= 200; n++) {
                uint32_t r = 0xffffffffu;
                for (size_t i = 0; i < n; i++) {
                    r ^= buf[off + i];
                    for (int k = 0; k < 8; k++)
                        r = r & 1 ? (r >> 1) ^ 0x82f63b78u : r >> 1;
                }
                bad += pt_crc32c(buf + off, n) != (r ^ 0xffffffffu);
            }
        is(bad, 0, "CRC-32C of 0..200 bytes at 8 alignments = the polynomial's, bit by bit");
    }

    int64_t t1[] = {1000};
    double v1[] = {1.0};
    static const uint8_t want1[] = {0x00, 0x01, 0xd0, 0x0f, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0};
    ok(pt_xor_encode(&a, t1, v1, 1, &c) == 0 && same_bytes(c, want1, sizeof(want1)),
       "one sample: reference vector");

    int64_t t5[] = {1000, 2000, 3000, 4005, 5005};
    double v5[] = {1.0, 1.0, 2.0, 2.0, -0.5};
    static const uint8_t want5[] = {0x00, 0x05, 0xd0, 0x0f, 0x3f, 0xf0, 0x00, 0x00, 0x00,
                                    0x00, 0x00, 0x00, 0xe8, 0x07, 0x30, 0x97, 0xff, 0xe0,
                                    0x01, 0x57, 0xff, 0x78, 0x0b, 0xff, 0xe0};
    ok(pt_xor_encode(&a, t5, v5, 5, &c) == 0 && same_bytes(c, want5, sizeof(want5)),
       "five samples: reference vector");

    /* Round trips over awkward values and timestamp jumps of every size class. */
    enum { N = 120 };
    int64_t t[N], tb[N];
    double v[N], vb[N];
    uint64_t stale = 0x7ff0000000000002ULL;
    unsigned seed = 7;
    int exact = 1;
    for (int round = 0; round < 200; round++) {
        int64_t now = (int64_t)(rand_r(&seed) % 1000000) * 1000;
        for (int i = 0; i < N; i++) {
            static const int64_t steps[] = {1, 15000, 15001, 14000, 70000, 600000, 86400000LL * 400};
            now += steps[rand_r(&seed) % 7];
            t[i] = now;
            switch (rand_r(&seed) % 6) {
            case 0: v[i] = i ? v[i - 1] : 0; break;
            case 1: memcpy(&v[i], &stale, 8); break;
            case 2: v[i] = -0.0; break;
            case 3: v[i] = (double)rand_r(&seed) / 7.0; break;
            case 4: v[i] = INFINITY; break;
            default: v[i] = (double)(rand_r(&seed) % 100); break;
            }
        }
        size_t n = 1 + (size_t)(rand_r(&seed) % N);
        if (pt_xor_encode(&a, t, v, n, &c) != 0 || pt_xor_decode(c, tb, vb, N) != (long)n) {
            exact = 0;
            break;
        }
        for (size_t i = 0; i < n; i++)
            exact &= tb[i] == t[i] && memcmp(&vb[i], &v[i], 8) == 0;
    }
    ok(exact, "random chunks round-trip bit-exactly (StaleNaN, -0, inf, big gaps)");
    ok(pt_xor_decode((pt_slice){want5, 10}, tb, vb, N) < 0, "a truncated chunk is refused");

    /* The worked frame of the reference: {__name__="up"} with (1000, 1.0). */
    Prometheus__Label l = PROMETHEUS__LABEL__INIT, *lp = &l;
    l.name = (ProtobufCBinaryData){8, (uint8_t *)"__name__"};
    l.value = (ProtobufCBinaryData){2, (uint8_t *)"up"};
    Prometheus__Sample s = PROMETHEUS__SAMPLE__INIT, *sp = &s;
    s.timestamp = 1000;
    s.value = 1.0;
    Prometheus__TimeSeries ts = PROMETHEUS__TIME_SERIES__INIT, *tsp = &ts;
    ts.n_labels = 1;
    ts.labels = &lp;
    ts.n_samples = 1;
    ts.samples = &sp;
    Prometheus__QueryResult qr = PROMETHEUS__QUERY_RESULT__INIT, *qrp = &qr;
    qr.n_timeseries = 1;
    qr.timeseries = &tsp;
    Prometheus__ReadResponse rr = PROMETHEUS__READ_RESPONSE__INIT;
    rr.n_results = 1;
    rr.results = &qrp;
    pt_slice body;
    static const uint8_t want_frame[] = {
        0x2a, 0x85, 0xdd, 0x2a, 0x1e, 0x0a, 0x28, 0x0a, 0x0e, 0x0a, 0x08, '_', '_', 'n', 'a',
        'm', 'e', '_', '_', 0x12, 0x02, 'u', 'p', 0x12, 0x16, 0x08, 0xe8, 0x07, 0x10, 0xe8,
        0x07, 0x18, 0x01, 0x22, 0x0c, 0x00, 0x01, 0xd0, 0x0f, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0};
    ok(stream_frames(&rr, &a, &body) == 0 && same_bytes(body, want_frame, sizeof(want_frame)),
       "frame = uvarint length, CRC-32C big-endian, ChunkedReadResponse (reference bytes)");

    /* 250 samples: one frame holding chunks of 120, 120 and 10 samples. */
    Prometheus__Sample many[250], *mp[250];
    for (int i = 0; i < 250; i++) {
        prometheus__sample__init(&many[i]);
        many[i].timestamp = 1000 + i * 15000;
        many[i].value = i;
        mp[i] = &many[i];
    }
    ts.n_samples = 250;
    ts.samples = mp;
    ok(stream_frames(&rr, &a, &body) == 0, "long series frames");
    size_t len = 0, i = 0;
    for (int shift = 0;; shift += 7) {
        uint8_t b = body.p[i++];
        len |= (size_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            break;
    }
    Prometheus__ChunkedReadResponse *m =
        prometheus__chunked_read_response__unpack(NULL, len, body.p + i + 4);
    ok(m && i + 4 + len == body.n && m->n_chunked_series == 1 &&
           m->chunked_series[0]->n_chunks == 3 &&
           m->chunked_series[0]->chunks[2]->min_time_ms == 1000 + 240 * 15000 &&
           m->chunked_series[0]->chunks[0]->max_time_ms == 1000 + 119 * 15000,
       "one frame, three chunks of <= 120 samples with their time ranges");
    if (m)
        prometheus__chunked_read_response__free_unpacked(m, NULL);

    pt_arena_free(&a);
    return done_testing();
}
