/* Snappy and protobuf decoding, on golden payloads captured from Prometheus 2.42. */
#include <snappy-c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode.h"
#include "error.h"
#include "matcher.h"
#include "readpb.h"
#include "tap.h"

static uint8_t *slurp(const char *name, size_t *n)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", PT_TESTDATA, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    uint8_t *buf = malloc(1 << 20);
    *n = fread(buf, 1, 1 << 20, f);
    fclose(f);
    return buf;
}

int main(void)
{
    pt_decode_limits lim = {32 << 20};
    char msg[512];
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    size_t n;

    uint8_t *w = slurp("prom-2.42-write.bin", &n);
    ok(w != NULL, "golden write payload present");
    pt_wreq wr;
    int rv = pt_decode_write(w, n, &lim, &a, 1, &wr, msg, sizeof(msg));
    ok(rv == 0 && wr.nseries == 377, "Prometheus 2.42 write request decodes (377 series)");
    int sorted = 1, one = 1, replica = 1;
    for (size_t i = 0; rv == 0 && i < wr.nseries; i++) {
        const pt_wseries *ts = &wr.series[i];
        one &= ts->nsamples == 1 && ts->nhistograms == 0 && ts->nexemplars == 0;
        for (size_t j = 1; j < ts->nlabels; j++)
            sorted &= pt_slice_cmp(ts->labels[j - 1].name, ts->labels[j].name) < 0;
        int has = 0;
        for (size_t j = 0; j < ts->nlabels; j++)
            has |= pt_slice_eq(ts->labels[j].name, PT_SLICE_LIT("replica"));
        replica &= has;
    }
    ok(one, "one sample per TimeSeries entry, as Prometheus sends");
    ok(sorted, "labels arrive sorted by name");
    ok(replica, "external label replica is on every series");

    uint8_t *md = slurp("prom-2.42-metadata.bin", &n);
    rv = pt_decode_write(md, n, &lim, &a, 1, &wr, msg, sizeof(msg));
    ok(rv == 0 && wr.nseries == 0 && wr.nmetadata == 205,
       "metadata-only request decodes (205 entries, no series)");

    size_t rn;
    uint8_t *r = slurp("prom-2.42-read-regex.bin", &rn);
    pt_read_request rr;
    rv = pt_decode_read(r, rn, &lim, &a, &rr, msg, sizeof(msg));
    ok(rv == 0 && rr.nqueries == 1 && rr.response == PT_READ_SAMPLES && rr.queries[0].nms == 4,
       "read request decodes: one query, no response types (SAMPLES), 4 matchers");
    ok(rv == 0 && rr.queries[0].ms[0].type == PT_MATCH_RE &&
           rr.queries[0].ms[1].type == PT_MATCH_NEQ,
       "matcher types as sent");

    /* The answer's type: the first the client lists that promtable answers. */
    {
        static const struct {
            Prometheus__ReadRequest__ResponseType types[3];
            size_t n;
            int want;
        } cases[] = {
            {{PROMETHEUS__READ_REQUEST__RESPONSE_TYPE__STREAMED_XOR_CHUNKS}, 1,
             PT_READ_STREAMED_XOR_CHUNKS},
            {{(Prometheus__ReadRequest__ResponseType)7,
              PROMETHEUS__READ_REQUEST__RESPONSE_TYPE__SAMPLES,
              PROMETHEUS__READ_REQUEST__RESPONSE_TYPE__STREAMED_XOR_CHUNKS}, 3, PT_READ_SAMPLES},
            {{(Prometheus__ReadRequest__ResponseType)7}, 1, -1},
        };
        int right = 1;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
            Prometheus__ReadRequest m = PROMETHEUS__READ_REQUEST__INIT;
            m.accepted_response_types = (Prometheus__ReadRequest__ResponseType *)cases[i].types;
            m.n_accepted_response_types = cases[i].n;
            pt_read_request got;
            right &= pt_read_request_from_pb(&m, &a, &got) == 0 && got.response == cases[i].want &&
                     got.nqueries == 0;
        }
        ok(right, "response type: the first listed that is answered; none answered = -1");
    }

    /* Snappy errors. */
    static const uint8_t framed[] = {0xff, 0x06, 0x00, 0x00, 's', 'N', 'a', 'P', 'p', 'Y', 0, 0};
    rv = pt_decode_write(framed, sizeof(framed), &lim, &a, 1, &wr, msg, sizeof(msg));
    ok(rv == PT_ESNAPPY && strstr(msg, "framed"), "framed snappy is refused by name");
    static const uint8_t bomb[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x00};
    rv = pt_decode_write(bomb, sizeof(bomb), &lim, &a, 1, &wr, msg, sizeof(msg));
    ok(rv == PT_ETOOLARGE && strstr(msg, "limit"),
       "a declared length over the limit is refused before allocating (413)");
    rv = pt_decode_write(w, n / 2, &lim, &a, 1, &wr, msg, sizeof(msg));
    ok(rv == PT_ESNAPPY, "a truncated snappy block is refused");
    rv = pt_decode_write((const uint8_t *)"", 0, &lim, &a, 1, &wr, msg, sizeof(msg));
    ok(rv == PT_ESNAPPY, "an empty body is not a snappy block");
    static const uint8_t empty_msg[] = {0x00};
    rv = pt_decode_write(empty_msg, 1, &lim, &a, 1, &wr, msg, sizeof(msg));
    ok(rv == 0 && wr.nseries == 0, "an empty WriteRequest (0x00) decodes");

    /* Valid snappy, invalid protobuf. */
    const char junk[] = "\x0a\xff\xff\xff\xff\x0f garbage";
    char z[64];
    size_t zl = sizeof(z);
    snappy_compress(junk, sizeof(junk) - 1, z, &zl);
    rv = pt_decode_write((const uint8_t *)z, zl, &lim, &a, 1, &wr, msg, sizeof(msg));
    ok(rv == PT_EPROTO && strstr(msg, "prometheus.WriteRequest"), "bad protobuf is named");

    /* failmalloc: every arena ceiling either decodes or fails cleanly with 413. */
    int clean = 1, succeeded = 0;
    size_t wn;
    free(w);
    w = slurp("prom-2.42-write.bin", &wn);
    for (size_t cap = 1024; cap < (1 << 20); cap += cap / 8) {
        pt_arena b;
        pt_arena_init(&b, 4096, cap);
        rv = pt_decode_write(w, wn, &lim, &b, 1, &wr, msg, sizeof(msg));
        if (rv == 0)
            succeeded = 1;
        else if (rv != PT_ETOOLARGE)
            clean = 0;
        pt_arena_free(&b);
    }
    ok(clean, "with a constrained arena, decoding fails only with PT_ETOOLARGE");
    ok(succeeded, "and succeeds once the ceiling is large enough");
    free(w);
    free(md);
    free(r);

    /* Encoder round trip. */
    pt_slice zz, back;
    rv = pt_snappy_encode((const uint8_t *)"hello hello hello", 17, &a, &zz);
    ok(rv == 0 && pt_snappy_decode(zz.p, zz.n, 100, &a, &back, msg, sizeof(msg)) == 0 &&
           back.n == 17 && memcmp(back.p, "hello hello hello", 17) == 0,
       "snappy encode/decode round trip");

    pt_arena_free(&a);
    return done_testing();
}
