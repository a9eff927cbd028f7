/*
 * loadgen: a Prometheus remote_write 1.0 load generator for the ingest benchmark.
 *
 * It models what a Prometheus server scraping node_exporter and kubelet/cAdvisor targets
 * puts on the wire (reference §1.7): realistic, sorted label sets from ~60 metric names,
 * one sample per TimeSeries entry by default, every series scraped every 15 s with a
 * per-target phase, batches of 2000 samples.
 *
 * Every request body is built (protobuf, snappy block compression) before the timed
 * phase, so the generator's own CPU never limits the figure; runs are reproducible: the
 * same options give the same bodies, except that timestamps start from the current day. During a phase each
 * of C threads owns one keep-alive HTTP/1.1 connection, takes the next body of one shared
 * sequence (so warm-up and timed phase continue the same stream of timestamps) and
 * measures latency from the first byte sent to the last byte of the response.
 *
 * Series churn (--churn-percent P --churn-every-ms M) models pods being replaced, as a
 * Kubernetes rollout or autoscaling does: the active set stays --series series, but at
 * every M ms of sample time (the generator's own timestamps, which advance one scrape
 * interval per pass over the series, much faster than wall time) the next P % of the
 * series in model order, round robin, are replaced by new ones: their `pod` label (or
 * `instance`, when a series has no `pod`) gets a generation suffix "-g<n>". Consecutive
 * series belong to one target, so pods are mostly replaced whole. The distinct series
 * a receiver must store grow with every step while the active count stays constant.
 * Churn changes no body's size much and adds no memory beyond one counter per body, but
 * a churn run must not outrun the pool: a run that sends the pool again re-sends old
 * series and old timestamps, so size --pool-mb for warm-up + timed phase at the
 * expected rate (the startup line says how much sample time and how many churn steps
 * the pool holds). Without the churn options the bodies are byte for byte those of a
 * build without churn support.
 *
 * Output: progress on stderr; one "result:" line of key=value pairs on stdout, which
 * bench/run.sh parses. Exit status 0 when every request got a 2xx, 1 when some failed,
 * 2 on bad usage or setup failure.
 */
#include "loadgen.h"

/* ------------------------------------------------------------------------------------ */
/* Options                                                                              */

static void usage(FILE *f)
{
    static const char text[] =
        "usage: loadgen [options]\n"
        "  --url URL                remote_write endpoint\n"
        "                           (default http://127.0.0.1:9201/api/v1/write)\n"
        "  --series N               distinct series (default 100000)\n"
        "  --samples-per-request N  samples per request (default 2000)\n"
        "  --samples-per-series N   samples per TimeSeries entry: consecutive scrapes of\n"
        "                           one series (default 1, as Prometheus sends)\n"
        "  --connections N          concurrent keep-alive connections (default 8)\n"
        "  --duration S             timed phase length in seconds (default 30)\n"
        "  --requests N             timed phase length in requests instead\n"
        "  --warmup S               untimed warm-up before the timed phase; when > 0 it\n"
        "                           also covers every series once (default 0)\n"
        "  --labels N               labels per series incl. __name__ (default 10); a floor:\n"
        "                           a series keeps the labels that make it unique\n"
        "  --interval-ms N          scrape interval (default 15000)\n"
        "  --start-ms T             first scrape, ms since the epoch\n"
        "                           (default: now - 24h, rounded down to the hour)\n"
        "  --pool-mb N              memory for pre-built bodies (default 1024); a run that\n"
        "                           needs more sends the pool again from the start\n"
        "  --timeout S              per-request socket timeout (default 60)\n"
        "  --server-pid PID         also report the CPU time that process used per phase\n"
        "  --churn-percent P        series churn: replace P %% of the series (their pod\n"
        "                           label gets a new generation) at every churn step\n"
        "  --churn-every-ms M       sample time between churn steps (needed with\n"
        "                           --churn-percent)\n"
        "  --rate R                 open loop in the timed phase: start request i at\n"
        "                           i / R s (over all connections); default 0 = closed loop\n"
        "  --integers               every value a whole number (counters of events,\n"
        "                           bytes), instead of two decimals\n"
        "  --retry-503              a body answered 503 is sent again, on the same\n"
        "                           connection, at its next turn (Prometheus retries 5xx)\n"
        "  --protocol 1|2           remote write 1.0 (default) or 2.0 (symbol table, labels\n"
        "                           as refs; Content-Type ...;proto=io.prometheus.write.v2.Request)\n"
        "  --tenants N              send each body as one of N tenants (X-Scope-OrgID: t0 ..;\n"
        "                           a body keeps its tenant; default 0 = no header)\n"
        "  --check                  build the bodies, decode and verify some, send nothing\n";
    fputs(text, f);
}

static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parse_secs(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= 0) || v > 1e7)
        return -1;
    *out = v;
    return 0;
}

static int parse_opts(int argc, char **argv, opts *o)
{
    enum {
        O_URL = 1,
        O_SERIES,
        O_SPR,
        O_SPS,
        O_CONN,
        O_DUR,
        O_REQ,
        O_WARM,
        O_LABELS,
        O_INTERVAL,
        O_START,
        O_POOL,
        O_TIMEOUT,
        O_SERVER_PID,
        O_CHURN_PCT,
        O_CHURN_EVERY,
        O_RATE,
        O_RETRY_503,
        O_CHECK,
        O_PROTOCOL,
        O_TENANTS,
        O_INTEGERS,
        O_HELP
    };
    static const struct option lo[] = {
        {"url", required_argument, 0, O_URL},
        {"series", required_argument, 0, O_SERIES},
        {"samples-per-request", required_argument, 0, O_SPR},
        {"samples-per-series", required_argument, 0, O_SPS},
        {"connections", required_argument, 0, O_CONN},
        {"duration", required_argument, 0, O_DUR},
        {"requests", required_argument, 0, O_REQ},
        {"warmup", required_argument, 0, O_WARM},
        {"labels", required_argument, 0, O_LABELS},
        {"interval-ms", required_argument, 0, O_INTERVAL},
        {"start-ms", required_argument, 0, O_START},
        {"pool-mb", required_argument, 0, O_POOL},
        {"timeout", required_argument, 0, O_TIMEOUT},
        {"server-pid", required_argument, 0, O_SERVER_PID},
        {"churn-percent", required_argument, 0, O_CHURN_PCT},
        {"churn-every-ms", required_argument, 0, O_CHURN_EVERY},
        {"rate", required_argument, 0, O_RATE},
        {"retry-503", no_argument, 0, O_RETRY_503},
        {"check", no_argument, 0, O_CHECK},
        {"protocol", required_argument, 0, O_PROTOCOL},
        {"tenants", required_argument, 0, O_TENANTS},
        {"integers", no_argument, 0, O_INTEGERS},
        {"help", no_argument, 0, O_HELP},
        {0, 0, 0, 0},
    };
    *o = (opts){
        .url = "http://127.0.0.1:9201/api/v1/write",
        .series = 100000,
        .samples_per_request = 2000,
        .samples_per_entry = 1,
        .connections = 8,
        .labels = 10,
        .interval_ms = 15000,
        .start_ms = -1,
        .pool_mb = 1024,
        .timeout_s = 60,
        .protocol = 1,
    };
    int c, bad = 0;
    uint64_t v;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case O_URL: o->url = optarg; break;
        case O_SERIES: bad |= parse_u64(optarg, 1, 100000000, &o->series); break;
        case O_SPR: bad |= parse_u64(optarg, 1, 1000000, &o->samples_per_request); break;
        case O_SPS: bad |= parse_u64(optarg, 1, 100000, &o->samples_per_entry); break;
        case O_CONN: bad |= parse_u64(optarg, 1, 4096, &o->connections); break;
        case O_DUR: bad |= parse_secs(optarg, &o->duration_s); break;
        case O_REQ: bad |= parse_u64(optarg, 1, UINT64_MAX / 2, &o->requests); break;
        case O_WARM: bad |= parse_secs(optarg, &o->warmup_s); break;
        case O_LABELS: bad |= parse_u64(optarg, 1, MAX_LABELS, &o->labels); break;
        case O_INTERVAL: bad |= parse_u64(optarg, 1, 86400000, &o->interval_ms); break;
        case O_START:
            bad |= parse_u64(optarg, 0, INT64_MAX / 2, &v);
            o->start_ms = (int64_t)v;
            break;
        case O_POOL: bad |= parse_u64(optarg, 1, 1 << 20, &o->pool_mb); break;
        case O_TIMEOUT: bad |= parse_secs(optarg, &o->timeout_s); break;
        case O_SERVER_PID:
            bad |= parse_u64(optarg, 1, INT32_MAX, &v);
            o->server_pid = (long)v;
            break;
        case O_CHURN_PCT:
            bad |= parse_secs(optarg, &o->churn_percent) || o->churn_percent > 100;
            break;
        case O_CHURN_EVERY: bad |= parse_u64(optarg, 1, 86400000, &o->churn_every_ms); break;
        case O_RATE: bad |= parse_secs(optarg, &o->rate); break;
        case O_RETRY_503: o->retry_503 = 1; break;
        case O_INTEGERS: lg_integer_values = 1; break;
        case O_CHECK: o->check = 1; break;
        case O_PROTOCOL:
            bad |= parse_u64(optarg, 1, 2, &v);
            o->protocol = (int)v;
            break;
        case O_TENANTS: bad |= parse_u64(optarg, 0, 1000000, &o->tenants); break;
        case O_HELP: usage(stdout); exit(0);
        default: bad = 1;
        }
        if (bad) {
            if (c != '?')
                fprintf(stderr, "loadgen: bad value for --%s: %s\n", lo[c - 1].name, optarg);
            return -1;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "loadgen: unexpected argument %s\n", argv[optind]);
        return -1;
    }
    if (o->duration_s > 0 && o->requests) {
        fprintf(stderr, "loadgen: give --duration or --requests, not both\n");
        return -1;
    }
    if (o->duration_s == 0 && o->requests == 0)
        o->duration_s = 30;
    if ((o->churn_percent > 0) != (o->churn_every_ms > 0)) {
        fprintf(stderr, "loadgen: give --churn-percent and --churn-every-ms together\n");
        return -1;
    }
    if (o->samples_per_request % o->samples_per_entry) {
        fprintf(stderr, "loadgen: --samples-per-request must be a multiple of "
                        "--samples-per-series\n");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    opts o;
    endpoint ep;
    model m;
    pool pl;
    int rv;
    signal(SIGPIPE, SIG_IGN);
    if (parse_opts(argc, argv, &o) < 0) {
        fprintf(stderr, "loadgen: try --help\n");
        return 2;
    }
    if (!o.check && lg_parse_url(o.url, &ep) < 0)
        return 2;

    uint64_t t0 = lg_now_ns();
    lg_build_model(&o, &m);
    uint64_t t1 = lg_now_ns();
    lg_build_pool(&o, &m, &pl);
    uint64_t t2 = lg_now_ns();
    fprintf(stderr,
            "loadgen: %llu series from %llu targets, %.1f labels/series avg, "
            "%llu samples/request in %llu entries; model %.2fs\n",
            (unsigned long long)m.n, (unsigned long long)m.targets,
            (double)m.total_labels / (double)m.n, (unsigned long long)pl.samples_per_body,
            (unsigned long long)pl.entries_per_body, (double)(t1 - t0) / 1e9);
    fprintf(stderr,
            "loadgen: pool %llu bodies, %.1f MiB (avg %.1f KiB snappy, %.1f KiB raw), "
            "%llu samples/series, first scrape %lld; built in %.2fs\n",
            (unsigned long long)pl.n, (double)pl.bytes / 1048576.0,
            (double)pl.bytes / (double)pl.n / 1024.0,
            (double)pl.raw_bytes / (double)pl.n / 1024.0,
            (unsigned long long)(pl.n * pl.samples_per_body / m.n),
            (long long)pl.start_ms, (double)(t2 - t1) / 1e9);
    uint64_t passes = pl.n * pl.entries_per_body / m.n;
    if (m.churn_step) {
        uint64_t span_ms = passes * o.samples_per_entry * o.interval_ms;
        fprintf(stderr,
                "loadgen: churn: %llu series replaced every %llu ms of sample time; the pool "
                "spans %llu passes, %.0f s of sample time, %llu churn steps, %llu distinct "
                "series\n",
                (unsigned long long)m.churn_step, (unsigned long long)o.churn_every_ms,
                (unsigned long long)passes, (double)span_ms / 1e3,
                (unsigned long long)(span_ms / o.churn_every_ms),
                (unsigned long long)lg_series_sent(&pl, pl.n));
    }

    if (o.check) {
        int bad = lg_check_body(&o, &m, &pl, 0, 1) || lg_check_body(&o, &m, &pl, pl.n - 1, 1);
        for (uint64_t i = 1; !bad && i + 1 < pl.n; i += 1 + pl.n / 64)
            bad = lg_check_body(&o, &m, &pl, i, 0);
        /* Same options, same day: same digest. */
        uint64_t digest = 0;
        for (uint64_t i = 0; i < pl.n; i++)
            digest = XXH64(pl.b[i].p, pl.b[i].n, digest);
        fprintf(stderr, "loadgen: check %s; pool digest %016llx\n", bad ? "FAILED" : "ok",
                (unsigned long long)digest);
        rv = bad ? 1 : 0;
    } else {
        rv = lg_send_load(&o, &ep, &m, &pl);
    }
    lg_free_pool(&pl);
    free(m.s);
    lg_bump_free(&m.mem);
    return rv;
}
