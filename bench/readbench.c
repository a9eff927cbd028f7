/*
 * readbench: remote_read latency. Sends the same snappy ReadRequest (one query: the given
 * matchers over [start, end]) N times over one keep-alive HTTP/1.1 connection, one request
 * at a time, and reports latency percentiles and what the answers held.
 *
 * Latency runs from the first byte sent to the last byte of the answer received; decoding
 * the answer (to count series and samples, and to check every answer is the same) happens
 * after the clock stops, so the figure is the server's, not this tool's.
 *
 * usage: readbench [options] MATCHER...
 *   MATCHER  name=value | name!=value | name=~regex | name!~regex
 *   --url URL          remote_read endpoint (default http://127.0.0.1:9201/api/v1/read)
 *   --start-ms T       query start, ms since the epoch (default: --end-ms minus 1 h)
 *   --end-ms T         query end (default: now)
 *   --requests N       timed requests (default 20)
 *   --warmup N         untimed requests first (default 2)
 *   --streamed         ask for STREAMED_XOR_CHUNKS instead of SAMPLES
 *   --server-pid PID   also report that process's CPU time per request
 *   --request-out F    write the request body (snappy protobuf) to F and exit
 *   --hints S,R,F      send ReadHints as Prometheus does for a range query of step S ms
 *                      over FUNC(x[R ms]) (R 0: a plain selector), from --start-ms + R on
 *
 * Output: progress and errors on stderr; one "result:" line of key=value pairs on stdout,
 * among them `digest`: a hash of every label, timestamp and value bit of the answer in
 * order, the same for SAMPLES and streamed answers of equal content (so two servers'
 * answers can be compared). Every answer must have the first one's counts and digest.
 * Exit status 0 when every answer was a 200, 1 otherwise, 2 on bad usage.
 */
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <http_parser.h>

#include "arena.h"
#include "decode.h"
#include "xor.h"
#include "remote.pb-c.h"

#define MAX_MATCHERS 32
#define MAX_ANSWER ((size_t)8 << 30) /* a larger answer is an error, not a crash */

/* ------------------------------------------------------------------------------------ */
/* Time                                                                                 */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* CPU seconds (all threads) another process has used; -1 when it cannot be read. The
 * kernel exposes any process's CPU clock through clock_getcpuclockid, in ns, where
 * /proc/PID/stat would round to clock ticks (10 ms): too coarse for a single request. */
static double proc_cpu_s(long pid)
{
    clockid_t id;
    struct timespec ts;
    if (clock_getcpuclockid((pid_t)pid, &id) != 0 || clock_gettime(id, &ts) != 0)
        return -1;
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ------------------------------------------------------------------------------------ */
/* The request                                                                          */

/* "name=value", "name!=value", "name=~re", "name!~re" → a LabelMatcher (pointers into s). */
static int parse_matcher(char *s, Prometheus__LabelMatcher *m)
{
    size_t i = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
    if (i == 0)
        return -1;
    char *op = s + i, *val;
    prometheus__label_matcher__init(m);
    if (op[0] == '=' && op[1] == '~') {
        m->type = PROMETHEUS__LABEL_MATCHER__TYPE__RE;
        val = op + 2;
    } else if (op[0] == '!' && op[1] == '~') {
        m->type = PROMETHEUS__LABEL_MATCHER__TYPE__NRE;
        val = op + 2;
    } else if (op[0] == '!' && op[1] == '=') {
        m->type = PROMETHEUS__LABEL_MATCHER__TYPE__NEQ;
        val = op + 2;
    } else if (op[0] == '=') {
        m->type = PROMETHEUS__LABEL_MATCHER__TYPE__EQ;
        val = op + 1;
    } else {
        return -1;
    }
    /* Names and values are bytes in promtable's .proto (label bytes are checked, not
     * trusted, to be UTF-8). */
    m->name.data = (uint8_t *)s;
    m->name.len = (size_t)(op - s);
    m->value.data = (uint8_t *)val;
    m->value.len = strlen(val);
    return 0;
}

/* snappy(protobuf(ReadRequest)) into arena memory; hints NULL: none. */
static int build_body(Prometheus__LabelMatcher **ms, size_t nm, int64_t start, int64_t end,
                      int streamed, Prometheus__ReadHints *hints, pt_arena *a, pt_slice *out)
{
    Prometheus__Query q;
    prometheus__query__init(&q);
    q.start_timestamp_ms = start;
    q.end_timestamp_ms = end;
    q.n_matchers = nm;
    q.matchers = ms;
    q.hints = hints;
    Prometheus__Query *qs[1] = {&q};
    Prometheus__ReadRequest rr;
    prometheus__read_request__init(&rr);
    rr.n_queries = 1;
    rr.queries = qs;
    Prometheus__ReadRequest__ResponseType types[2] = {
        PROMETHEUS__READ_REQUEST__RESPONSE_TYPE__STREAMED_XOR_CHUNKS,
        PROMETHEUS__READ_REQUEST__RESPONSE_TYPE__SAMPLES};
    if (streamed) {
        rr.n_accepted_response_types = 2;
        rr.accepted_response_types = types;
    }
    size_t n = prometheus__read_request__get_packed_size(&rr);
    uint8_t *raw = pt_arena_alloc(a, n ? n : 1);
    if (!raw)
        return -1;
    prometheus__read_request__pack(&rr, raw);
    return pt_snappy_encode(raw, n, a, out);
}

/* ------------------------------------------------------------------------------------ */
/* HTTP/1.1 over one keep-alive connection                                              */

typedef struct conn {
    int fd;
    http_parser parser;
    http_parser_settings settings;
    uint8_t *body;
    size_t body_len, body_cap;
    int done;
    int too_big;
} conn;

static int on_body(http_parser *p, const char *at, size_t len)
{
    conn *c = p->data;
    if (c->body_len + len > MAX_ANSWER) {
        c->too_big = 1;
        return -1;
    }
    if (c->body_len + len > c->body_cap) {
        size_t cap = c->body_cap ? c->body_cap : 1 << 16;
        while (cap < c->body_len + len)
            cap *= 2;
        uint8_t *nb = realloc(c->body, cap);
        if (!nb)
            return -1;
        c->body = nb;
        c->body_cap = cap;
    }
    memcpy(c->body + c->body_len, at, len);
    c->body_len += len;
    return 0;
}

static int on_message_complete(http_parser *p)
{
    ((conn *)p->data)->done = 1;
    /* Stop here: with keep-alive nothing else is on the wire until the next request. */
    http_parser_pause(p, 1);
    return 0;
}

static int conn_open(conn *c, const char *host, const char *port)
{
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0) {
        fprintf(stderr, "readbench: %s:%s: %s\n", host, port, gai_strerror(rc));
        return -1;
    }
    c->fd = socket(res->ai_family, SOCK_STREAM, 0);
    if (c->fd < 0 || connect(c->fd, res->ai_addr, res->ai_addrlen) != 0) {
        fprintf(stderr, "readbench: connect %s:%s: %s\n", host, port, strerror(errno));
        freeaddrinfo(res);
        return -1;
    }
    freeaddrinfo(res);
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    memset(&c->settings, 0, sizeof c->settings);
    c->settings.on_body = on_body;
    c->settings.on_message_complete = on_message_complete;
    return 0;
}

static int send_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* One request/response exchange; returns the HTTP status or -1 on a transport error. */
static int exchange(conn *c, const char *head, size_t head_len, pt_slice body)
{
    http_parser_init(&c->parser, HTTP_RESPONSE);
    c->parser.data = c;
    c->body_len = 0;
    c->done = 0;
    c->too_big = 0;
    if (send_all(c->fd, head, head_len) != 0 || send_all(c->fd, body.p, body.n) != 0) {
        fprintf(stderr, "readbench: send: %s\n", strerror(errno));
        return -1;
    }
    char buf[1 << 16];
    while (!c->done) {
        ssize_t r = recv(c->fd, buf, sizeof buf, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            /* EOF ends a response without a length; http_parser wants to hear it. */
            http_parser_execute(&c->parser, &c->settings, buf, 0);
            if (c->done)
                break;
            fprintf(stderr, "readbench: connection closed mid-answer\n");
            return -1;
        }
        size_t used = http_parser_execute(&c->parser, &c->settings, buf, (size_t)r);
        if (c->done)
            break;
        if (used != (size_t)r || HTTP_PARSER_ERRNO(&c->parser) != HPE_OK) {
            fprintf(stderr, "readbench: bad HTTP answer: %s%s\n",
                    http_errno_description(HTTP_PARSER_ERRNO(&c->parser)),
                    c->too_big ? " (answer over the limit, MAX_ANSWER)" : "");
            return -1;
        }
    }
    if (!http_should_keep_alive(&c->parser)) {
        fprintf(stderr, "readbench: the server closes the connection; one request only\n");
        return -1;
    }
    return (int)c->parser.status_code;
}

/* ------------------------------------------------------------------------------------ */
/* Counting what an answer holds                                                        */

/* Series and samples counted, and a digest of the answer's content: each series' labels
 * then its samples (time, value bits) in order, whatever the framing, so two servers'
 * answers to one query, SAMPLES or streamed, have equal digests when they are equal. */
typedef struct tally {
    uint64_t series, samples, digest;
} tally;

static void digest(tally *t, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        t->digest = (t->digest ^ b[i]) * 0x100000001b3ull;
}

static void digest_labels(tally *t, Prometheus__Label *const *l, size_t n)
{
    digest(t, "\xff", 1);
    for (size_t i = 0; i < n; i++) {
        digest(t, l[i]->name.data, l[i]->name.len);
        digest(t, "", 1);
        digest(t, l[i]->value.data, l[i]->value.len);
        digest(t, "", 1);
    }
}

static void digest_sample(tally *t, int64_t ts, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof(bits));
    digest(t, &ts, sizeof(ts));
    digest(t, &bits, sizeof(bits));
}

static int count_samples(const uint8_t *p, size_t n, pt_arena *a, tally *t)
{
    pt_slice raw;
    char msg[256];
    if (pt_snappy_decode(p, n, MAX_ANSWER, a, &raw, msg, sizeof msg) != 0) {
        fprintf(stderr, "readbench: answer is not snappy: %s\n", msg);
        return -1;
    }
    Prometheus__ReadResponse *r = prometheus__read_response__unpack(NULL, raw.n, raw.p);
    if (!r) {
        fprintf(stderr, "readbench: answer is not a ReadResponse\n");
        return -1;
    }
    for (size_t i = 0; i < r->n_results; i++) {
        t->series += r->results[i]->n_timeseries;
        for (size_t j = 0; j < r->results[i]->n_timeseries; j++) {
            const Prometheus__TimeSeries *ts = r->results[i]->timeseries[j];
            t->samples += ts->n_samples;
            digest_labels(t, ts->labels, ts->n_labels);
            for (size_t k = 0; k < ts->n_samples; k++)
                digest_sample(t, ts->samples[k]->timestamp, ts->samples[k]->value);
        }
    }
    prometheus__read_response__free_unpacked(r, NULL);
    return 0;
}

static uint64_t uvarint(const uint8_t **p, const uint8_t *end, int *bad)
{
    uint64_t v = 0;
    for (int shift = 0; *p < end && shift < 64; shift += 7) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return v;
    }
    *bad = 1;
    return 0;
}

/* Frames of uvarint length, CRC-32C (not checked here: the unit tests do), message. A
 * series split across frames repeats its labels; count it once per label set change. An
 * XOR chunk starts with its sample count, 2 bytes big-endian. */
static int count_streamed(const uint8_t *p, size_t n, tally *t)
{
    const uint8_t *end = p + n;
    ProtobufCBinaryData last = {0, NULL};
    uint8_t *last_copy = NULL;
    while (p < end) {
        int bad = 0;
        uint64_t len = uvarint(&p, end, &bad);
        if (bad || (uint64_t)(end - p) < 4 || len > (uint64_t)(end - p) - 4) {
            fprintf(stderr, "readbench: bad stream frame\n");
            free(last_copy);
            return -1;
        }
        p += 4;
        Prometheus__ChunkedReadResponse *r =
            prometheus__chunked_read_response__unpack(NULL, (size_t)len, p);
        p += len;
        if (!r) {
            fprintf(stderr, "readbench: frame is not a ChunkedReadResponse\n");
            free(last_copy);
            return -1;
        }
        for (size_t i = 0; i < r->n_chunked_series; i++) {
            Prometheus__ChunkedSeries *s = r->chunked_series[i];
            /* Identify the series by its packed labels. */
            size_t ln = 0;
            for (size_t k = 0; k < s->n_labels; k++)
                ln += prometheus__label__get_packed_size(s->labels[k]);
            uint8_t *key = malloc(ln ? ln : 1), *q = key;
            if (!key)
                abort();
            for (size_t k = 0; k < s->n_labels; k++)
                q += prometheus__label__pack(s->labels[k], q);
            if (!last_copy || last.len != ln || memcmp(last.data, key, ln) != 0) {
                t->series++;
                digest_labels(t, s->labels, s->n_labels);
                free(last_copy);
                last_copy = key;
                last.data = key;
                last.len = ln;
            } else {
                free(key);
            }
            for (size_t k = 0; k < s->n_chunks; k++) {
                const ProtobufCBinaryData *d = &s->chunks[k]->data;
                size_t cnt = d->len >= 2 ? (size_t)d->data[0] << 8 | d->data[1] : 0;
                static int64_t ts[UINT16_MAX + 1]; /* the count is 2 bytes */
                static double vs[UINT16_MAX + 1];
                if (pt_xor_decode((pt_slice){d->data, d->len}, ts, vs, cnt) != (long)cnt) {
                    fprintf(stderr, "readbench: an XOR chunk does not decode\n");
                    free(last_copy);
                    prometheus__chunked_read_response__free_unpacked(r, NULL);
                    return -1;
                }
                t->samples += cnt;
                for (size_t x = 0; x < cnt; x++)
                    digest_sample(t, ts[x], vs[x]);
            }
        }
        prometheus__chunked_read_response__free_unpacked(r, NULL);
    }
    free(last_copy);
    return 0;
}

/* ------------------------------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double percentile(const double *sorted, size_t n, double q)
{
    if (n == 0)
        return 0;
    size_t i = (size_t)(q * (double)(n - 1) + 0.5);
    return sorted[i < n ? i : n - 1];
}

static void usage(FILE *f)
{
    fputs("usage: readbench [--url URL] [--start-ms T] [--end-ms T] [--requests N]\n"
          "                 [--warmup N] [--streamed] [--server-pid PID] [--request-out F]\n"
          "                 [--hints STEP_MS,RANGE_MS,FUNC] MATCHER...\n"
          "  MATCHER: name=value | name!=value | name=~regex | name!~regex\n",
          f);
}

int main(int argc, char **argv)
{
    const char *url = "http://127.0.0.1:9201/api/v1/read";
    int64_t start = -1, end = -1;
    long requests = 20, warmup = 2, server_pid = 0;
    int streamed = 0;
    const char *request_out = NULL, *hints_arg = NULL;
    static const struct option lo[] = {{"request-out", required_argument, 0, 'o'},{"url", required_argument, 0, 'u'},
                                       {"start-ms", required_argument, 0, 's'},
                                       {"end-ms", required_argument, 0, 'e'},
                                       {"requests", required_argument, 0, 'n'},
                                       {"warmup", required_argument, 0, 'w'},
                                       {"streamed", no_argument, 0, 'x'},
                                       {"server-pid", required_argument, 0, 'p'},
                                       {"hints", required_argument, 0, 'H'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (o) {
        case 'u': url = optarg; break;
        case 's': start = strtoll(optarg, NULL, 10); break;
        case 'e': end = strtoll(optarg, NULL, 10); break;
        case 'n': requests = strtol(optarg, NULL, 10); break;
        case 'w': warmup = strtol(optarg, NULL, 10); break;
        case 'x': streamed = 1; break;
        case 'p': server_pid = strtol(optarg, NULL, 10); break;
        case 'o': request_out = optarg; break;
        case 'H': hints_arg = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    size_t nm = (size_t)(argc - optind);
    if (nm == 0 || nm > MAX_MATCHERS || requests < 1 || warmup < 0) {
        usage(stderr);
        return 2;
    }
    Prometheus__LabelMatcher mstore[MAX_MATCHERS], *ms[MAX_MATCHERS];
    for (size_t i = 0; i < nm; i++) {
        ms[i] = &mstore[i];
        if (parse_matcher(argv[optind + (int)i], ms[i]) != 0) {
            fprintf(stderr, "readbench: bad matcher '%s'\n", argv[optind + (int)i]);
            return 2;
        }
    }
    if (end < 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        end = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    }
    if (start < 0)
        start = end - 3600 * 1000;
    Prometheus__ReadHints hints, *hp = NULL;
    char func[64] = "";
    if (hints_arg) {
        long long step, range;
        prometheus__read_hints__init(&hints);
        if (sscanf(hints_arg, "%lld,%lld,%63s", &step, &range, func) < 2 || step <= 0 ||
            range < 0) {
            fprintf(stderr, "readbench: --hints STEP_MS,RANGE_MS,FUNC\n");
            return 2;
        }
        /* As Prometheus' engine: the selector's data starts at the first evaluation
         * minus the range (the lookback for a plain selector): the query's start. */
        hints.step_ms = step;
        hints.range_ms = range;
        hints.func = func;
        hints.start_ms = start;
        hints.end_ms = end;
        hp = &hints;
    }

    /* http://host:port/path */
    char host[256], port[16] = "80";
    const char *path;
    if (strncmp(url, "http://", 7) != 0) {
        fprintf(stderr, "readbench: only http:// URLs\n");
        return 2;
    }
    const char *h = url + 7, *slash = strchr(h, '/'), *colon = strchr(h, ':');
    path = slash ? slash : "/";
    size_t hl = (size_t)((colon && (!slash || colon < slash) ? colon
                          : slash                            ? slash
                                                             : h + strlen(h)) -
                         h);
    if (hl == 0 || hl >= sizeof host) {
        fprintf(stderr, "readbench: bad URL %s\n", url);
        return 2;
    }
    memcpy(host, h, hl);
    host[hl] = 0;
    if (colon && (!slash || colon < slash)) {
        size_t pl = (size_t)((slash ? slash : h + strlen(h)) - colon - 1);
        if (pl == 0 || pl >= sizeof port) {
            fprintf(stderr, "readbench: bad URL %s\n", url);
            return 2;
        }
        memcpy(port, colon + 1, pl);
        port[pl] = 0;
    }

    int rc = 1;
    pt_arena a;
    pt_arena_init(&a, 1 << 20, 0);
    conn c = {.fd = -1};
    double *lat = calloc((size_t)requests, sizeof *lat);
    pt_slice body;
    char head[1024];
    if (!lat)
        goto out;
    if (build_body(ms, nm, start, end, streamed, hp, &a, &body) != 0) {
        fprintf(stderr, "readbench: could not build the request\n");
        goto out;
    }
    if (request_out) {
        FILE *f = fopen(request_out, "wb");
        rc = !f || fwrite(body.p, 1, body.n, f) != body.n;
        if (f && fclose(f) != 0)
            rc = 1;
        if (rc)
            fprintf(stderr, "readbench: cannot write %s\n", request_out);
        goto out;
    }
    int head_len = snprintf(head, sizeof head,
                            "POST %s HTTP/1.1\r\nHost: %s:%s\r\n"
                            "Content-Type: application/x-protobuf\r\n"
                            "Content-Encoding: snappy\r\n"
                            "X-Prometheus-Remote-Read-Version: 0.1.0\r\n"
                            "User-Agent: promtable-readbench\r\n"
                            "Content-Length: %zu\r\n\r\n",
                            path, host, port, body.n);
    if (head_len < 0 || (size_t)head_len >= sizeof head)
        goto out;
    if (conn_open(&c, host, port) != 0)
        goto out;

    tally first = {0, 0, 0};
    size_t answer_bytes = 0;
    double cpu0 = 0, t_all = 0;
    for (long i = -warmup; i < requests; i++) {
        if (i == 0 && server_pid)
            cpu0 = proc_cpu_s(server_pid);
        double t0 = now_s();
        int status = exchange(&c, head, (size_t)head_len, body);
        double dt = now_s() - t0;
        if (status != 200) {
            if (status > 0)
                fprintf(stderr, "readbench: HTTP %d: %.*s\n", status,
                        (int)(c.body_len < 500 ? c.body_len : 500), (const char *)c.body);
            goto out;
        }
        if (i >= 0) {
            lat[i] = dt;
            t_all += dt;
        }
        /* Count every answer: a server that returns less under load must show up. */
        tally t = {0, 0, 0xcbf29ce484222325ull};
        pt_arena_reset(&a);
        /* body lives in the arena: rebuild after the reset (cheap, and outside the clock). */
        if ((streamed ? count_streamed(c.body, c.body_len, &t)
                      : count_samples(c.body, c.body_len, &a, &t)) != 0)
            goto out;
        if (build_body(ms, nm, start, end, streamed, hp, &a, &body) != 0)
            goto out;
        if (i == -warmup) {
            first = t;
            answer_bytes = c.body_len;
            fprintf(stderr, "readbench: %llu series, %llu samples, %zu bytes per answer\n",
                    (unsigned long long)t.series, (unsigned long long)t.samples, c.body_len);
        } else if (t.series != first.series || t.samples != first.samples ||
                   t.digest != first.digest) {
            fprintf(stderr, "readbench: answer %ld differs: %llu series, %llu samples, digest "
                            "%016llx\n", i,
                    (unsigned long long)t.series, (unsigned long long)t.samples,
                    (unsigned long long)t.digest);
            goto out;
        }
    }
    double cpu = server_pid ? proc_cpu_s(server_pid) - cpu0 : -1;
    qsort(lat, (size_t)requests, sizeof *lat, cmp_double);
    printf(
        "result: type=%s requests=%ld p50_ms=%.3f p90_ms=%.3f p99_ms=%.3f max_ms=%.3f "
        "mean_ms=%.3f series=%llu samples=%llu answer_bytes=%zu samples_per_sec=%.0f "
        "digest=%016llx",
        streamed ? "streamed" : "samples", requests, percentile(lat, (size_t)requests, 0.5) * 1e3,
        percentile(lat, (size_t)requests, 0.9) * 1e3, percentile(lat, (size_t)requests, 0.99) * 1e3,
        lat[requests - 1] * 1e3, t_all / (double)requests * 1e3, (unsigned long long)first.series,
        (unsigned long long)first.samples, answer_bytes,
        t_all > 0 ? (double)first.samples * (double)requests / t_all : 0,
        (unsigned long long)first.digest);
    if (server_pid)
        printf(" server_cpu_ms_per_request=%.3f", cpu * 1e3 / (double)requests);
    printf("\n");
    rc = 0;
out:
    if (c.fd >= 0)
        close(c.fd);
    free(c.body);
    free(lat);
    pt_arena_free(&a);
    return rc;
}
