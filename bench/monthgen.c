/*
 * monthgen: the data of the months benchmark (bench/months.sh). SERIES series under
 * METRICS metric names, the first half of the names counters of whole numbers, the
 * other half random-walk gauges whose values use the whole 53-bit mantissa; one sample
 * every STEP ms for DAYS days, the last at END. Every run gives the same values.
 *
 * usage: monthgen [options] openmetrics          OpenMetrics text on stdout (for promtool)
 *        monthgen [options] write URL            remote write 1.0 to URL (a backfill)
 *   --series N        series (default 2000), a multiple of --metrics
 *   --metrics M       metric names (default 20), even
 *   --days D          days of samples (default 60)
 *   --step-ms S       ms between samples (default 60000)
 *   --end-ms T        the last sample's time (default: now, rounded down to the step)
 *   --offset-ms O     every time O ms later (samples off the step's multiples, as scrapes)
 *   --connections C   write: connections, each sending its share of the series (default 2)
 *   --window W        write: samples of a series per request entry (default 240)
 *   --batch B         write: series per request (default 50)
 *   --gauge-decimals D  gauges rounded to D decimals (default: every mantissa bit)
 *
 * Series i has labels {__name__, env="prod", instance="host-<i mod per-metric>:9100",
 * job="job-<i / 200>", region}: a metric's series are one instance each, a job holds 200
 * series of two metric names. The write mode sends, per connection, every window of
 * time for its series in turn (oldest first), and reports samples, seconds and samples/s
 * on stdout as one "result:" line. Exit status 0 when every request got a 2xx.
 */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <snappy-c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loadgen.h"
#include "remote.pb-c.h"

enum { JOB_SIZE = 200, NLABELS = 5 };

typedef struct gen {
    uint64_t series, metrics, days, step_ms, window, batch, connections;
    int64_t end_ms, first_ms, offset_ms;
    uint64_t samples; /* per series */
    int decimals;     /* gauges rounded to this many decimals; -1: not rounded */
} gen;

static uint64_t per_metric(const gen *g)
{
    return g->series / g->metrics;
}

static int is_counter(const gen *g, uint64_t i)
{
    return i / per_metric(g) < g->metrics / 2;
}

/* Label values of series i, in name order: __name__, env, instance, job, region. */
static void series_labels(const gen *g, uint64_t i, char v[NLABELS][48])
{
    uint64_t m = i / per_metric(g), k = i % per_metric(g);
    if (is_counter(g, i))
        snprintf(v[0], 48, "bench_counter_%02" PRIu64 "_total", m);
    else
        snprintf(v[0], 48, "bench_gauge_%02" PRIu64, m);
    snprintf(v[1], 48, "prod");
    snprintf(v[2], 48, "host-%04" PRIu64 ":9100", k);
    snprintf(v[3], 48, "job-%02" PRIu64, i / JOB_SIZE);
    snprintf(v[4], 48, "%s", k % 2 ? "us-east1" : "europe-west1");
}

static const char *const label_names[NLABELS] = {"__name__", "env", "instance", "job", "region"};

/* A series' values, sample by sample from the first: counters are closed-form
 * (increments of 1 to 13), gauges walk, so each series is generated in time order. */
typedef struct walk {
    uint64_t seed;
    int counter;
    double v, scale; /* scale: 10^decimals, 0 when not rounded */
} walk;

static void walk_init(walk *w, const gen *g, uint64_t i)
{
    w->seed = lg_mix(i * 0x9e3779b97f4a7c15ull + 12345);
    w->counter = is_counter(g, i);
    w->v = (double)(w->seed % 1000000) / 7.0; /* 1/7: a fraction with every mantissa bit */
    w->scale = g->decimals < 0 ? 0 : pow(10, g->decimals);
}

/* The value of sample k (k counts up from 0, each k once, in order). */
static double walk_value(walk *w, uint64_t k)
{
    uint64_t r = lg_mix(w->seed ^ (k * 0xd1b54a32d192ed03ull));
    if (w->counter)
        return (double)((w->seed % 1000000) + 7 * k + r % 7);
    if (k > 0)
        w->v += ((double)(r >> 11) * 0x1p-53 - 0.5) * 3.0;
    return w->scale ? round(w->v * w->scale) / w->scale : w->v;
}

/* ------------------------------------------------------------------------------------ */
/* OpenMetrics                                                                          */

/* Metric by metric (a family's samples must be together), series by series, time order.
 * OpenMetrics timestamps are seconds. */
static int write_openmetrics(const gen *g)
{
    static char buf[1 << 20];
    setvbuf(stdout, buf, _IOFBF, sizeof(buf));
    char v[NLABELS][48];
    for (uint64_t i = 0; i < g->series; i++) {
        series_labels(g, i, v);
        char head[256];
        int hn = snprintf(head, sizeof(head), "%s{env=\"%s\",instance=\"%s\",job=\"%s\",region=\"%s\"} ",
                          v[0], v[1], v[2], v[3], v[4]);
        walk w;
        walk_init(&w, g, i);
        for (uint64_t k = 0; k < g->samples; k++) {
            int64_t t = g->first_ms + (int64_t)(k * g->step_ms);
            double x = walk_value(&w, k);
            fwrite(head, 1, (size_t)hn, stdout);
            if (w.counter)
                printf("%.0f %" PRId64 ".%03d\n", x, t / 1000, (int)(t % 1000));
            else
                printf("%.17g %" PRId64 ".%03d\n", x, t / 1000, (int)(t % 1000));
        }
    }
    printf("# EOF\n");
    return fflush(stdout) == 0 ? 0 : 1;
}

/* ------------------------------------------------------------------------------------ */
/* Remote write                                                                         */

typedef struct sender {
    const gen *g;
    const endpoint *ep;
    uint64_t id;
    uint64_t samples, requests;
    int failed;
    pthread_t th;
} sender;

/* Sends one WriteRequest; 0 on a 2xx. */
static int post(sender *s, conn *c, const Prometheus__WriteRequest *wr, uint8_t **raw,
                size_t *raw_cap, char **comp, size_t *comp_cap)
{
    size_t n = prometheus__write_request__get_packed_size(wr);
    if (n > *raw_cap) {
        free(*raw);
        *raw = lg_xmalloc(*raw_cap = n);
    }
    prometheus__write_request__pack(wr, *raw);
    size_t cn = snappy_max_compressed_length(n);
    if (cn > *comp_cap) {
        free(*comp);
        *comp = lg_xmalloc(*comp_cap = cn);
    }
    if (snappy_compress((const char *)*raw, n, *comp, &cn) != SNAPPY_OK)
        return -1;
    char hdr[1024];
    int hl = snprintf(hdr, sizeof(hdr),
                      "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-protobuf\r\n"
                      "Content-Encoding: snappy\r\nX-Prometheus-Remote-Write-Version: 0.1.0\r\n"
                      "Content-Length: %zu\r\n\r\n",
                      s->ep->path, s->ep->hostport, cn);
    body b = {(uint8_t *)*comp, cn};
    int status = -1, got = 0;
    for (int attempt = 0; attempt < 2 && status < 0; attempt++) {
        if (c->fd < 0 && lg_conn_open(c, s->ep, 120) < 0)
            break;
        int reused = c->used;
        status = lg_exchange(c, hdr, (size_t)hl, &b, &got);
        if (status < 0 || !c->keep)
            lg_conn_close(c);
        if (status >= 0 || got || !reused)
            break;
    }
    if (status < 200 || status > 299) {
        fprintf(stderr, "monthgen: write: %s %s\n", status < 0 ? c->err : "HTTP status",
                status < 0 ? "" : c->errbody);
        return -1;
    }
    return 0;
}

/* Connection s->id sends the series i with i mod connections == id: for each window of
 * time, oldest first, requests of --batch series with --window samples each. */
static void *send_share(void *arg)
{
    sender *s = arg;
    const gen *g = s->g;
    uint64_t mine = 0;
    for (uint64_t i = s->id; i < g->series; i += g->connections)
        mine++;
    walk *w = lg_xmalloc(mine * sizeof(*w));
    char(*lv)[NLABELS][48] = lg_xmalloc(mine * sizeof(*lv));
    for (uint64_t j = 0; j < mine; j++) {
        walk_init(&w[j], g, s->id + j * g->connections);
        series_labels(g, s->id + j * g->connections, lv[j]);
    }
    uint64_t bmax = g->batch;
    Prometheus__TimeSeries *ts = lg_xmalloc(bmax * sizeof(*ts));
    Prometheus__TimeSeries **tsp = lg_xmalloc(bmax * sizeof(*tsp));
    Prometheus__Label *lb = lg_xmalloc(bmax * NLABELS * sizeof(*lb));
    Prometheus__Label **lbp = lg_xmalloc(bmax * NLABELS * sizeof(*lbp));
    Prometheus__Sample *sm = lg_xmalloc(bmax * g->window * sizeof(*sm));
    Prometheus__Sample **smp = lg_xmalloc(bmax * g->window * sizeof(*smp));
    uint8_t *raw = NULL;
    char *comp = NULL;
    size_t raw_cap = 0, comp_cap = 0;
    conn c = {.fd = -1};
    for (uint64_t k0 = 0; k0 < g->samples && !s->failed; k0 += g->window) {
        uint64_t kn = g->samples - k0 < g->window ? g->samples - k0 : g->window;
        for (uint64_t j0 = 0; j0 < mine && !s->failed; j0 += bmax) {
            uint64_t jn = mine - j0 < bmax ? mine - j0 : bmax;
            for (uint64_t b = 0; b < jn; b++) {
                uint64_t j = j0 + b;
                prometheus__time_series__init(&ts[b]);
                for (int l = 0; l < NLABELS; l++) {
                    Prometheus__Label *x = &lb[b * NLABELS + (uint64_t)l];
                    prometheus__label__init(x);
                    x->name = (ProtobufCBinaryData){strlen(label_names[l]),
                                                    (uint8_t *)label_names[l]};
                    x->value = (ProtobufCBinaryData){strlen(lv[j][l]), (uint8_t *)lv[j][l]};
                    lbp[b * NLABELS + (uint64_t)l] = x;
                }
                ts[b].labels = &lbp[b * NLABELS];
                ts[b].n_labels = NLABELS;
                for (uint64_t k = 0; k < kn; k++) {
                    Prometheus__Sample *x = &sm[b * g->window + k];
                    prometheus__sample__init(x);
                    x->timestamp = g->first_ms + (int64_t)((k0 + k) * g->step_ms);
                    x->value = walk_value(&w[j], k0 + k);
                    smp[b * g->window + k] = x;
                }
                ts[b].samples = &smp[b * g->window];
                ts[b].n_samples = kn;
                tsp[b] = &ts[b];
            }
            Prometheus__WriteRequest wr;
            prometheus__write_request__init(&wr);
            wr.timeseries = tsp;
            wr.n_timeseries = jn;
            if (post(s, &c, &wr, &raw, &raw_cap, &comp, &comp_cap) != 0)
                s->failed = 1;
            s->samples += jn * kn;
            s->requests++;
        }
    }
    lg_conn_close(&c);
    free(raw), free(comp), free(w), free(lv), free(ts), free(tsp), free(lb), free(lbp),
        free(sm), free(smp);
    return NULL;
}

static int write_remote(const gen *g, const char *url)
{
    endpoint ep;
    if (lg_parse_url(url, &ep) < 0)
        return 2;
    sender *s = calloc(g->connections, sizeof(*s));
    if (!s)
        return 2;
    uint64_t t0 = lg_now_ns();
    for (uint64_t i = 0; i < g->connections; i++) {
        s[i] = (sender){.g = g, .ep = &ep, .id = i};
        if (pthread_create(&s[i].th, NULL, send_share, &s[i]) != 0)
            return 2;
    }
    uint64_t samples = 0, requests = 0;
    int failed = 0;
    for (uint64_t i = 0; i < g->connections; i++) {
        pthread_join(s[i].th, NULL);
        samples += s[i].samples;
        requests += s[i].requests;
        failed |= s[i].failed;
    }
    double secs = (double)(lg_now_ns() - t0) / 1e9;
    printf("result: samples=%" PRIu64 " requests=%" PRIu64 " seconds=%.2f samples_per_s=%.0f "
           "failed=%d\n",
           samples, requests, secs, (double)samples / secs, failed);
    free(s);
    return failed ? 1 : 0;
}

static void usage(FILE *f)
{
    fputs("usage: monthgen [--series N] [--metrics M] [--days D] [--step-ms S] [--end-ms T]\n"
          "                [--connections C] [--window W] [--batch B] [--gauge-decimals D]\n"
          "                [--offset-ms O] openmetrics | write URL\n",
          f);
}

static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    gen g = {.series = 2000, .metrics = 20, .days = 60, .step_ms = 60000, .window = 240,
             .batch = 50, .connections = 2, .end_ms = -1, .decimals = -1};
    static const struct option lo[] = {
        {"series", required_argument, 0, 's'},   {"metrics", required_argument, 0, 'm'},
        {"days", required_argument, 0, 'd'},     {"step-ms", required_argument, 0, 't'},
        {"end-ms", required_argument, 0, 'e'},   {"connections", required_argument, 0, 'c'},
        {"window", required_argument, 0, 'w'},   {"batch", required_argument, 0, 'b'},
        {"gauge-decimals", required_argument, 0, 'g'}, {"offset-ms", required_argument, 0, 'o'},
        {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
    int c, bad = 0;
    uint64_t end = 0, dec = 0, off = 0;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 's': bad |= parse_u64(optarg, 1, 100000000, &g.series); break;
        case 'm': bad |= parse_u64(optarg, 2, 1000000, &g.metrics); break;
        case 'd': bad |= parse_u64(optarg, 1, 3650, &g.days); break;
        case 't': bad |= parse_u64(optarg, 1, 86400000, &g.step_ms); break;
        case 'e': bad |= parse_u64(optarg, 0, INT64_MAX / 2, &end), g.end_ms = (int64_t)end; break;
        case 'c': bad |= parse_u64(optarg, 1, 64, &g.connections); break;
        case 'w': bad |= parse_u64(optarg, 1, 100000, &g.window); break;
        case 'b': bad |= parse_u64(optarg, 1, 100000, &g.batch); break;
        case 'g': bad |= parse_u64(optarg, 0, 15, &dec), g.decimals = (int)dec; break;
        case 'o': bad |= parse_u64(optarg, 0, 86400000, &off), g.offset_ms = (int64_t)off; break;
        case 'h': usage(stdout); return 0;
        default: bad = 1;
        }
    }
    if (bad || g.series % g.metrics || g.metrics % 2 || optind >= argc) {
        usage(stderr);
        return 2;
    }
    if (g.end_ms < 0) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        g.end_ms = (int64_t)now.tv_sec * 1000;
    }
    g.end_ms -= g.end_ms % (int64_t)g.step_ms;
    g.samples = g.days * 86400000 / g.step_ms;
    g.first_ms = g.end_ms - (int64_t)((g.samples - 1) * g.step_ms) + g.offset_ms;
    if (g.first_ms < 0) {
        fprintf(stderr, "monthgen: the first sample would be before 1970\n");
        return 2;
    }
    if (strcmp(argv[optind], "openmetrics") == 0 && optind + 1 == argc)
        return write_openmetrics(&g);
    if (strcmp(argv[optind], "write") == 0 && optind + 2 == argc)
        return write_remote(&g, argv[optind + 1]);
    usage(stderr);
    return 2;
}
