/* ptdump: prints a snappy-compressed remote write or read body in text form.
 * usage: ptdump write|read|answer FILE
 *   answer: a remote read answer of type SAMPLES, one line per sample:
 *           {labels as sent} TIMESTAMP_MS VALUE (%.17g) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode.h"

static void label_set(Prometheus__Label **ls, size_t n)
{
    printf("{");
    for (size_t i = 0; i < n; i++)
        printf("%s%.*s=\"%.*s\"", i ? ", " : "", (int)ls[i]->name.len,
               (const char *)ls[i]->name.data, (int)ls[i]->value.len,
               (const char *)ls[i]->value.data);
    printf("}");
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: ptdump write|read|answer FILE\n");
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
    if (strcmp(argv[1], "write") == 0) {
        Prometheus__WriteRequest *wr;
        if (pt_decode_write(buf, n, &lim, &a, &wr, msg, sizeof(msg)) != 0) {
            fprintf(stderr, "%s\n", msg);
            return 1;
        }
        printf("timeseries=%zu metadata=%zu\n", wr->n_timeseries, wr->n_metadata);
        for (size_t i = 0; i < wr->n_timeseries; i++) {
            Prometheus__TimeSeries *ts = wr->timeseries[i];
            label_set(ts->labels, ts->n_labels);
            for (size_t j = 0; j < ts->n_samples; j++)
                printf(" %lld:%.17g", (long long)ts->samples[j]->timestamp, ts->samples[j]->value);
            printf("\n");
        }
        for (size_t i = 0; i < wr->n_metadata; i++)
            printf("metadata %s type=%d\n", wr->metadata[i]->metric_family_name,
                   (int)wr->metadata[i]->type);
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
                    label_set(ts->labels, ts->n_labels);
                    printf(" %lld %.17g\n", (long long)ts->samples[j]->timestamp,
                           ts->samples[j]->value);
                }
            }
        }
        prometheus__read_response__free_unpacked(rr, NULL);
    } else {
        Prometheus__ReadRequest *rr;
        if (pt_decode_read(buf, n, &lim, &a, &rr, msg, sizeof(msg)) != 0) {
            fprintf(stderr, "%s\n", msg);
            return 1;
        }
        printf("queries=%zu accepted_response_types=%zu\n", rr->n_queries,
               rr->n_accepted_response_types);
        for (size_t i = 0; i < rr->n_queries; i++) {
            Prometheus__Query *q = rr->queries[i];
            printf("query start=%lld end=%lld", (long long)q->start_timestamp_ms,
                   (long long)q->end_timestamp_ms);
            for (size_t j = 0; j < q->n_matchers; j++)
                printf(" %.*s(%d)\"%.*s\"", (int)q->matchers[j]->name.len,
                       (const char *)q->matchers[j]->name.data, (int)q->matchers[j]->type,
                       (int)q->matchers[j]->value.len, (const char *)q->matchers[j]->value.data);
            printf("\n");
        }
    }
    pt_arena_free(&a);
    return 0;
}
