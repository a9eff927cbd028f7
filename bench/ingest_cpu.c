/* ingest_cpu: CPU cost of promtable's own ingest work per sample — snappy, protobuf,
 * label validation, row keys, cells, index-cache lookups, batch sort — with a backend that
 * accepts every batch and stores nothing. Storage and HTTP are measured by bench/run.sh.
 *
 * Native histogram samples count as samples.
 *
 * usage: ingest_cpu [FILE [SECONDS [VERSION [ha]]]]   (FILE: a snappy remote write body;
 * default: the golden payload from tests/data; VERSION: 1 (default) or 2 for a remote write
 * 2.0 body; ha: HA pairs on, labels cluster and __replica__, the election in memory) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "decode.h"
#include "ha.h"
#include "store.h"

static int null_open(void *s, const pt_backend_config *c, char *e, size_t el)
{
    (void)s, (void)c, (void)e, (void)el;
    return 0;
}
static void null_close(void *s) { (void)s; }
static int null_write(void *s, const pt_mutation *m, size_t n)
{
    (void)s, (void)m, (void)n;
    return 0;
}
static int null_scan(void *s, const pt_scan *sc, pt_cell_fn fn, void *ud)
{
    (void)s, (void)sc, (void)fn, (void)ud;
    return 0;
}
static const pt_backend_ops null_ops = {.name = "null",
                                        .state_size = 1,
                                        .open = null_open,
                                        .close = null_close,
                                        .write = null_write,
                                        .scan = null_scan};

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : PT_BENCH_DATA "/prom-2.42-write.bin";
    double seconds = argc > 2 ? atof(argv[2]) : 3;
    int version = argc > 3 ? atoi(argv[3]) : 1;
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
    static uint8_t body[64 << 20];
    size_t n = fread(body, 1, sizeof(body), f);
    fclose(f);

    pt_backend be = {&null_ops, NULL};
    pt_store_stats stats = {0};
    pt_ha *ha = NULL;
    /* The daemon's default label limits (write.max_label_*), checked as it checks them. */
    pt_store st = {.be = &be, .stats = &stats, .cache = pt_index_cache_new(1 << 20),
                   .index_bucket_ms = 86400000, .label_limits = {1024, 16384, 128}};
    if (argc > 4 && strcmp(argv[4], "ha") == 0) {
        pt_ha_opts ho = {"cluster", "__replica__", 30000, 15000, 1000, NULL, NULL, NULL, 0};
        ha = pt_ha_new(&ho);
        st.ha = pt_ha_store_hooks(ha);
    }
    pt_decode_limits lim = {256u << 20};
    pt_arena a;
    pt_arena_init(&a, 1 << 20, 0);
    char msg[512];
    size_t samples = 0, requests = 0;
    double t0 = cpu_seconds(), t;
    do {
        pt_wreq wr;
        pt_write_result res;
        if (pt_decode_write(body, n, &lim, &a, version, &wr, msg, sizeof(msg)) != 0 ||
            pt_store_write(&st, &wr, &a, &res) != 0) {
            fprintf(stderr, "ingest failed: %s\n", msg);
            return 1;
        }
        samples += res.samples_written + res.histograms_written;
        requests++;
        pt_arena_reset(&a);
        t = cpu_seconds() - t0;
    } while (t < seconds);
    printf("ingest_cpu: %zu requests, %zu samples in %.2f CPU s: %.0f ns/sample, %.0f samples/CPU-s\n",
           requests, samples, t, t * 1e9 / (double)samples, (double)samples / t);
    pt_ha_free(ha);
    pt_arena_free(&a);
    pt_index_cache_free(st.cache);
    return 0;
}
