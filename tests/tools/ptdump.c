/* ptdump: prints a snappy-compressed remote write or read body in text form.
 * usage: ptdump write|write2|read|answer FILE
 *   answer: a remote read answer of type SAMPLES, one line per sample:
 *           {labels as sent} TIMESTAMP_MS VALUE (%.17g) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode.h"
#include "remote.pb-c.h"

static void label(size_t i, const uint8_t *name, size_t nn, const uint8_t *value, size_t vn)
{
    printf("%s%.*s=\"%.*s\"", i ? ", " : "", (int)nn, (const char *)name, (int)vn,
           (const char *)value);
}

static void label_set(const pt_label *ls, size_t n)
{
    printf("{");
    for (size_t i = 0; i < n; i++)
        label(i, ls[i].name.p, ls[i].name.n, ls[i].value.p, ls[i].value.n);
    printf("}");
}

static void pb_label_set(Prometheus__Label **ls, size_t n)
{
    printf("{");
    for (size_t i = 0; i < n; i++)
        label(i, ls[i]->name.data, ls[i]->name.len, ls[i]->value.data, ls[i]->value.len);
    printf("}");
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: ptdump write|write2|read|answer FILE\n");
        return 2;
    }
    FILE *f = fopen(argv[2], "rb");
    if (!f) {
        perror(argv[2]);
        return 1;
    }
    static uint8_t buf[64 << 20];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    pt_decode_limits lim = {sizeof(buf)};
    char msg[512];
    if (strcmp(argv[1], "write") == 0 || strcmp(argv[1], "write2") == 0) {
        pt_wreq wr;
        if (pt_decode_write(buf, n, &lim, &a, argv[1][5] ? 2 : 1, &wr, msg, sizeof(msg)) != 0) {
            fprintf(stderr, "%s\n", msg);
            return 1;
        }
        printf("timeseries=%zu metadata=%zu\n", wr.nseries, wr.nmetadata);
        for (size_t i = 0; i < wr.nseries; i++) {
            const pt_wseries *ts = &wr.series[i];
            label_set(ts->labels, ts->nlabels);
            for (size_t j = 0; j < ts->nsamples; j++)
                printf(" %lld:%.17g", (long long)ts->samples[j].timestamp, ts->samples[j].value);
            printf("\n");
        }
        for (size_t i = 0; i < wr.nmetadata; i++)
            printf("metadata %.*s type=%d\n", (int)wr.metadata[i].family.n,
                   (const char *)wr.metadata[i].family.p, (int)wr.metadata[i].type);
    } else if (strcmp(argv[1], "answer") == 0) {
        pt_slice raw;
        if (pt_snappy_decode(buf, n, SIZE_MAX / 2, &a, &raw, msg, sizeof(msg)) != 0) {
            fprintf(stderr, "%s\n", msg);
            return 1;
        }
        Prometheus__ReadResponse *rr = prometheus__read_response__unpack(NULL, raw.n, raw.p);
        if (!rr) {
            fprintf(stderr, "not a ReadResponse\n");
            return 1;
        }
        for (size_t q = 0; q < rr->n_results; q++) {
            for (size_t i = 0; i < rr->results[q]->n_timeseries; i++) {
                Prometheus__TimeSeries *ts = rr->results[q]->timeseries[i];
                for (size_t j = 0; j < ts->n_samples; j++) {
                    pb_label_set(ts->labels, ts->n_labels);
                    printf(" %lld %.17g\n", (long long)ts->samples[j]->timestamp,
                           ts->samples[j]->value);
                }
            }
        }
        prometheus__read_response__free_unpacked(rr, NULL);
    } else {
        pt_read_request rr;
        if (pt_decode_read(buf, n, &lim, &a, &rr, msg, sizeof(msg)) != 0) {
            fprintf(stderr, "%s\n", msg);
            return 1;
        }
        printf("queries=%zu response_type=%d\n", rr.nqueries, rr.response);
        for (size_t i = 0; i < rr.nqueries; i++) {
            const pt_query *q = &rr.queries[i];
            printf("query start=%lld end=%lld", (long long)q->start_ms, (long long)q->end_ms);
            for (size_t j = 0; j < q->nms; j++)
                printf(" %.*s(%d)\"%.*s\"", (int)q->ms[j].name.n, (const char *)q->ms[j].name.p,
                       q->ms[j].type, (int)q->ms[j].value.n, (const char *)q->ms[j].value.p);
            printf("\n");
        }
    }
    pt_arena_free(&a);
    return 0;
}
