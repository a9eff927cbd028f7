/*
 * exporter: a tiny Prometheus exporter for the end-to-end tests.
 *
 *   exporter PORT [VANISH_AFTER]
 *   exporter native PORT
 *   exporter exemplars PORT
 *
 * Listens on 127.0.0.1:PORT and answers GET /metrics in the Prometheus text exposition
 * format (0.0.4); GET /ready answers 200 so a test can wait for it without counting as a
 * scrape. Every /metrics request is one "scrape" n = 1, 2, ...; all values are pure
 * functions of n, so what the writer Prometheus stored can be recomputed if ever needed.
 *
 * The series are chosen to break a remote storage that is not exact:
 *   test_gauge              gauge, one series without the `kind` label (absent == ""),
 *                           one with an upper-case label name that sorts before __name__
 *   test_counter_total      counters; kind="reset" drops back at scrape 13 (counter reset)
 *   test_latency_seconds    classic histogram (_bucket with le, _sum, _count)
 *   test_vanishing          present for the first VANISH_AFTER scrapes (default 10), then
 *                           gone: the writer appends a staleness marker
 *   test_tricky             label values with , = @ \ " newline tab, unicode, an empty
 *                           value (Prometheus drops the label), 5000 bytes, and a pair of
 *                           series whose naive "name=value," keys would collide
 *   test_special            NaN (an ordinary NaN, not the stale marker), +-Inf, the
 *                           smallest subnormal, the largest double. Not -0: Prometheus'
 *                           own remote-write encoder (proto3, gogo) omits a value that
 *                           compares equal to 0, so -0 arrives as +0 at any receiver.
 *   test_ns:colon_gauge     a metric name with a colon
 *
 * In `native` mode it serves only test_native_seconds, integer NATIVE histograms in the
 * protobuf exposition format (varint-delimited io.prometheus.client.MetricFamily), and only
 * to a scraper whose Accept header asks for it (Prometheus 2.42 does with
 * --enable-feature=native-histograms); anyone else gets 406. One series per case label:
 * schemas -2, 0, 3 and 8 (zero threshold 2^-128, or 1/1024 for case="s0"), and case="reset"
 * (schema 1) that starts over at scrape NATIVE_RESET (a counter reset). Every scrape adds
 * 3 + n % 4 observations to every series: positive, negative and zero values, spread over
 * 2^-6 .. 2^7 so the buckets form several spans, with up to two empty buckets inside a span.
 * (Prometheus 2.42 drops those empty buckets before it stores and remote-writes the
 * histogram: they arrive as separate spans.)
 *
 * In `exemplars` mode it serves OpenMetrics text (application/openmetrics-text 1.0.0,
 * which Prometheus 2.42 asks for first) whose samples carry exemplars, a new one every
 * scrape n (trace_id = n as 32 hex digits): test_exemplar_requests_total{path="/a"} with
 * exemplar value n + 0.25 and no timestamp (the scraper uses the scrape's), path="/b" with
 * a span_id, a UTF-8 label value, value -(n + 0.5) and an explicit timestamp (the scrape's
 * wall clock minus 1.5 s, in ms), and test_exemplar_latency_seconds, a classic histogram
 * whose le="0.1" and le="1" buckets carry exemplars (the second with a timestamp).
 *
 * It prints nothing; errors go to stderr and exit non-zero. A test tool, so it is
 * single-threaded, serves one connection at a time and closes every connection.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define LONG_VALUE_LEN 5000
#define HIST_BUCKETS 5

/* The body is a few KiB; a fixed ceiling keeps the tool trivially bounded. */
typedef struct {
    char buf[64 * 1024];
    size_t len;
} body;

static void put(body *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(body *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->buf + b->len, sizeof b->buf - b->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof b->buf - b->len) {
        fprintf(stderr, "exporter: body buffer too small\n");
        abort();
    }
    b->len += (size_t)n;
}

/* State that accumulates across scrapes. */
static unsigned long scrapes;
static unsigned long vanish_after = 10;
static double counter_a;
static const double hist_le[HIST_BUCKETS - 1] = {0.05, 0.1, 0.25, 1.0};
static unsigned long hist_counts[HIST_BUCKETS]; /* non-cumulative; last is > 1.0 */
static double hist_sum;
static unsigned long hist_count;

/* 5000 bytes with commas and equals signs sprinkled in, so escaping matters in long keys. */
static const char *long_value(void)
{
    static char v[LONG_VALUE_LEN + 1];
    if (!v[0]) {
        for (size_t i = 0; i < LONG_VALUE_LEN; i++) {
            if (i % 97 == 50)
                v[i] = ',';
            else if (i % 89 == 3)
                v[i] = '=';
            else
                v[i] = (char)('a' + i % 26);
        }
        v[LONG_VALUE_LEN] = '\0';
    }
    return v;
}

static void observe(unsigned long n)
{
    for (unsigned long i = 0; i < 5; i++) {
        /* Deterministic spread over 0 .. 1.2 s. */
        double x = (double)((n * 7 + i * 13) % 100) / 100.0 * 1.2;
        size_t k = 0;
        while (k < HIST_BUCKETS - 1 && x > hist_le[k])
            k++;
        hist_counts[k]++;
        hist_sum += x;
        hist_count++;
    }
}

static void render(body *b, unsigned long n)
{
    b->len = 0;

    put(b, "# HELP test_gauge A gauge that moves every scrape. Unicode in help: \xc3\xbc.\n");
    put(b, "# TYPE test_gauge gauge\n");
    put(b, "test_gauge{kind=\"a\"} %.17g\n", (double)n * 1.5);
    put(b, "test_gauge{kind=\"b\"} %.17g\n", (double)(n % 7) - 3.0);
    /* 0.1 * n is rarely exact: %.17g writes the exact double back. */
    put(b, "test_gauge{kind=\"c\",Zone=\"z1\"} %.17g\n", (double)n * 0.1);
    put(b, "test_gauge 42\n");

    counter_a += (double)(n % 3 + 1);
    put(b, "# HELP test_counter_total A counter that grows every scrape.\n");
    put(b, "# TYPE test_counter_total counter\n");
    put(b, "test_counter_total{kind=\"a\"} %.17g\n", counter_a);
    put(b, "test_counter_total{kind=\"b\"} %.17g\n", (double)n * (double)n * 0.5);
    put(b, "test_counter_total{kind=\"reset\"} %.17g\n",
        n <= 12 ? (double)n * 10.0 : (double)(n - 12) * 3.0);

    observe(n);
    put(b, "# HELP test_latency_seconds A classic histogram.\n");
    put(b, "# TYPE test_latency_seconds histogram\n");
    unsigned long cum = 0;
    for (size_t k = 0; k < HIST_BUCKETS - 1; k++) {
        cum += hist_counts[k];
        put(b, "test_latency_seconds_bucket{le=\"%g\"} %lu\n", hist_le[k], cum);
    }
    cum += hist_counts[HIST_BUCKETS - 1];
    put(b, "test_latency_seconds_bucket{le=\"+Inf\"} %lu\n", cum);
    put(b, "test_latency_seconds_sum %.17g\n", hist_sum);
    put(b, "test_latency_seconds_count %lu\n", hist_count);

    if (n <= vanish_after) {
        put(b, "# HELP test_vanishing Disappears after a few scrapes (staleness marker).\n");
        put(b, "# TYPE test_vanishing gauge\n");
        put(b, "test_vanishing{kind=\"v\"} %lu\n", n);
    }

    /* Exposition escapes: \\ is a backslash, \" a quote, \n a newline; the tab is raw. */
    put(b, "# HELP test_tricky Label values that need escaping in keys: \\\\ and \\n.\n");
    put(b, "# TYPE test_tricky gauge\n");
    put(b, "test_tricky{case=\"comma\",v=\"a,b\"} 1\n");
    put(b, "test_tricky{case=\"equals\",v=\"a=b\"} 2\n");
    put(b, "test_tricky{case=\"at\",v=\"a@b,@1297080123392\"} 3\n");
    put(b, "test_tricky{case=\"backslash\",v=\"C:\\\\dir\\\\\"} 4\n");
    put(b, "test_tricky{case=\"quote\",v=\"say \\\"hi\\\"\"} 5\n");
    put(b, "test_tricky{case=\"newline\",v=\"line1\\nline2\"} 6\n");
    put(b, "test_tricky{case=\"tab\",v=\"a\tb\"} 7\n");
    put(b, "test_tricky{case=\"unicode\",v=\"\xc3\xbc\xf0\x9f\x98\x80\"} 8\n");
    put(b, "test_tricky{case=\"empty\",v=\"\"} 9\n");
    put(b, "test_tricky{case=\"long\",v=\"%s\"} 10\n", long_value());
    /* Written naively as name=value pairs these two would be the same key. */
    put(b, "test_tricky{case=\"inject\",v=\"a,w=c\"} 11\n");
    put(b, "test_tricky{case=\"inject\",v=\"a\",w=\"c\"} 12\n");

    put(b, "# TYPE test_special gauge\n");
    put(b, "test_special{v=\"nan\"} NaN\n");
    put(b, "test_special{v=\"inf\"} +Inf\n");
    put(b, "test_special{v=\"neginf\"} -Inf\n");
    put(b, "test_special{v=\"subnormal\"} 5e-324\n");
    put(b, "test_special{v=\"max\"} 1.7976931348623157e+308\n");

    put(b, "# TYPE test_ns:colon_gauge gauge\n");
    put(b, "test_ns:colon_gauge %lu\n", n % 5);
}


/* ------------------------------------------------------------------ native histograms */

enum { NATIVE_CASES = 5, NATIVE_KEYS = 8192, NATIVE_OFF = 4096, NATIVE_RESET = 6 };

typedef struct {
    const char *name;
    int schema;
    double zero_threshold;
    uint64_t count, zero_count;
    double sum;
    uint64_t pos[NATIVE_KEYS], neg[NATIVE_KEYS]; /* bucket index + NATIVE_OFF */
} native_hist;

static native_hist native[NATIVE_CASES] = {
    {.name = "sm2", .schema = -2, .zero_threshold = 0x1p-128},
    {.name = "s0", .schema = 0, .zero_threshold = 0x1p-10},
    {.name = "s3", .schema = 3, .zero_threshold = 0x1p-128},
    {.name = "s8", .schema = 8, .zero_threshold = 0x1p-128},
    {.name = "reset", .schema = 1, .zero_threshold = 0x1p-128},
};

/* The j-th observation of scrape n: 0 now and then, otherwise +-m * 2^e. */
static double native_value(unsigned long n, unsigned long j)
{
    unsigned long r = n * 7919 + j * 104729;
    if (r % 7 == 0)
        return 0.0;
    double m = 1.0 + (double)(r % 1000) / 1000.0;
    double x = ldexp(m, (int)(r % 14) - 7);
    return r % 5 == 0 ? -x : x;
}

static void native_observe(native_hist *h, double x)
{
    h->count++;
    h->sum += x;
    double a = fabs(x);
    if (a <= h->zero_threshold) {
        h->zero_count++;
        return;
    }
    /* Bucket k holds (2^((k-1)/2^schema), 2^(k/2^schema)]. */
    long k = (long)ceil(log2(a) * ldexp(1.0, h->schema));
    if (k + NATIVE_OFF < 0 || k + NATIVE_OFF >= NATIVE_KEYS)
        abort();
    (x > 0 ? h->pos : h->neg)[k + NATIVE_OFF]++;
}

/* A protobuf writer into a fixed buffer. */
typedef struct {
    uint8_t buf[16 * 1024];
    size_t len;
} pb;

static void pb_byte(pb *p, uint8_t b)
{
    if (p->len == sizeof p->buf) {
        fprintf(stderr, "exporter: protobuf buffer too small\n");
        abort();
    }
    p->buf[p->len++] = b;
}

static void pb_varint(pb *p, uint64_t v)
{
    while (v >= 0x80) {
        pb_byte(p, (uint8_t)(v | 0x80));
        v >>= 7;
    }
    pb_byte(p, (uint8_t)v);
}

static void pb_tag(pb *p, unsigned field, unsigned wire)
{
    pb_varint(p, (uint64_t)field << 3 | wire);
}

static void pb_uint(pb *p, unsigned field, uint64_t v)
{
    pb_tag(p, field, 0);
    pb_varint(p, v);
}

static void pb_sint(pb *p, unsigned field, int64_t v)
{
    pb_uint(p, field, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
}

static void pb_double(pb *p, unsigned field, double d)
{
    uint64_t b;
    memcpy(&b, &d, 8);
    pb_tag(p, field, 1);
    for (int i = 0; i < 8; i++)
        pb_byte(p, (uint8_t)(b >> (8 * i)));
}

static void pb_bytes(pb *p, unsigned field, const void *data, size_t n)
{
    pb_tag(p, field, 2);
    pb_varint(p, n);
    for (size_t i = 0; i < n; i++)
        pb_byte(p, ((const uint8_t *)data)[i]);
}

/* io.prometheus.client.Histogram: spans (field SPAN) and deltas (field DELTA) of one side.
 * Populated buckets less than three apart share a span; the gap's buckets are sent as 0. */
static void native_side(pb *h, const uint64_t *c, unsigned span_field, unsigned delta_field)
{
    static pb span;
    long prev = 0, end = 0; /* end: one past the last bucket in the current span */
    int have = 0;
    uint64_t last = 0;
    long start = 0, len = 0;
    int64_t deltas[NATIVE_KEYS];
    size_t nd = 0;
    for (long k = 0; k <= NATIVE_KEYS; k++) {
        int flush = k == NATIVE_KEYS || (c[k] && have && k - end > 2);
        if (flush && have && len) {
            span.len = 0;
            pb_sint(&span, 1, start - prev);
            pb_uint(&span, 2, (uint64_t)len);
            pb_bytes(h, span_field, span.buf, span.len);
            prev = end;
            len = 0;
        }
        if (k == NATIVE_KEYS)
            break;
        if (!c[k])
            continue;
        if (!len) {
            start = k;
        } else {
            for (long g = end; g < k; g++) { /* empty buckets inside the span */
                deltas[nd++] = -(int64_t)last;
                last = 0;
                len++;
            }
        }
        if (!have)
            prev = NATIVE_OFF, have = 1;
        deltas[nd++] = (int64_t)(c[k] - last);
        last = c[k];
        len++;
        end = k + 1;
    }
    for (size_t i = 0; i < nd; i++)
        pb_sint(h, delta_field, deltas[i]);
}

static void native_render(body *b, unsigned long n)
{
    static pb fam, met, hist, label;
    fam.len = 0;
    pb_bytes(&fam, 1, "test_native_seconds", 19);
    pb_bytes(&fam, 2, "Integer native histograms.", 26);
    pb_uint(&fam, 3, 4); /* HISTOGRAM */
    for (int i = 0; i < NATIVE_CASES; i++) {
        native_hist *h = &native[i];
        if (i == NATIVE_CASES - 1 && n == NATIVE_RESET) {
            h->count = h->zero_count = 0;
            h->sum = 0;
            memset(h->pos, 0, sizeof h->pos);
            memset(h->neg, 0, sizeof h->neg);
        }
        for (unsigned long j = 0; j < 3 + n % 4; j++)
            native_observe(h, native_value(n + (unsigned long)i * 1000, j));
        hist.len = 0;
        pb_uint(&hist, 1, h->count);
        pb_double(&hist, 2, h->sum);
        pb_sint(&hist, 5, h->schema);
        pb_double(&hist, 6, h->zero_threshold);
        pb_uint(&hist, 7, h->zero_count);
        /* Negative buckets are indexed by the absolute value, like the positive ones. */
        native_side(&hist, h->neg, 9, 10);
        native_side(&hist, h->pos, 12, 13);
        label.len = 0;
        pb_bytes(&label, 1, "case", 4);
        pb_bytes(&label, 2, h->name, strlen(h->name));
        met.len = 0;
        pb_bytes(&met, 1, label.buf, label.len);
        pb_bytes(&met, 7, hist.buf, hist.len);
        pb_bytes(&fam, 4, met.buf, met.len);
    }
    static pb out;
    out.len = 0;
    pb_varint(&out, fam.len);
    if (out.len + fam.len > sizeof b->buf)
        abort();
    memcpy(b->buf, out.buf, out.len);
    memcpy(b->buf + out.len, fam.buf, fam.len);
    b->len = out.len + fam.len;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void respond(int fd, const char *status, const char *ctype, const char *data, size_t len)
{
    char head[256];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     status, ctype, len);
    if (write_all(fd, head, (size_t)n) == 0)
        (void)write_all(fd, data, len);
}

/* `exemplars` mode: see the top of the file. */
static void exemplar_render(body *b, unsigned long n)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    long long ts = (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000 - 1500;
    put(b, "# TYPE test_exemplar_requests counter\n"
           "# HELP test_exemplar_requests Requests, with a trace of one of them.\n");
    put(b, "test_exemplar_requests_total{path=\"/a\"} %lu # {trace_id=\"%032lx\"} %lu.25\n",
        3 * n, n, n);
    put(b,
        "test_exemplar_requests_total{path=\"/b\"} %lu # {span_id=\"%016lx\",trace_id=\"%032lx\","
        "user=\"\xc3\xa9\xe2\x9c\x93\"} -%lu.5 %lld.%03lld\n",
        5 * n, n * 7, n, n, ts / 1000, ts % 1000);
    put(b, "# TYPE test_exemplar_latency_seconds histogram\n");
    put(b, "test_exemplar_latency_seconds_bucket{le=\"0.1\"} %lu # {trace_id=\"%032lx\"} 0.05\n",
        n, n + 1000);
    put(b,
        "test_exemplar_latency_seconds_bucket{le=\"1.0\"} %lu # {trace_id=\"%032lx\"} 0.%03lu "
        "%lld.%03lld\n",
        2 * n, n + 2000, 100 + n % 900, ts / 1000, ts % 1000);
    put(b, "test_exemplar_latency_seconds_bucket{le=\"+Inf\"} %lu\n", 3 * n);
    put(b, "test_exemplar_latency_seconds_sum %lu.5\n", n);
    put(b, "test_exemplar_latency_seconds_count %lu\n", 3 * n);
    put(b, "# EOF\n");
}

static int native_mode, exemplar_mode;

static void serve(int fd)
{
    static body b;
    char req[8192];
    size_t len = 0;

    /* Read the request head; a request body, if any, is ignored. */
    while (len < sizeof req - 1) {
        ssize_t r = read(fd, req + len, sizeof req - 1 - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return;
        len += (size_t)r;
        req[len] = '\0';
        if (strstr(req, "\r\n\r\n"))
            break;
    }
    req[len] = '\0';

    if (strncmp(req, "GET /metrics ", 13) == 0 || strncmp(req, "GET /metrics?", 13) == 0) {
        if (exemplar_mode) {
            b.len = 0;
            exemplar_render(&b, ++scrapes);
            respond(fd, "200 OK", "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    b.buf, b.len);
        } else if (!native_mode) {
            render(&b, ++scrapes);
            respond(fd, "200 OK", "text/plain; version=0.0.4; charset=utf-8", b.buf, b.len);
        } else if (strstr(req, "application/vnd.google.protobuf")) {
            native_render(&b, ++scrapes);
            respond(fd, "200 OK",
                    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; "
                    "encoding=delimited",
                    b.buf, b.len);
        } else {
            respond(fd, "406 Not Acceptable", "text/plain", "protobuf only\n", 14);
        }
    } else if (strncmp(req, "GET /ready ", 11) == 0) {
        respond(fd, "200 OK", "text/plain", "ok\n", 3);
    } else {
        respond(fd, "404 Not Found", "text/plain", "not found\n", 10);
    }
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "native") == 0) {
        native_mode = 1;
        argv++, argc--;
    } else if (argc == 3 && strcmp(argv[1], "exemplars") == 0) {
        exemplar_mode = 1;
        argv++, argc--;
    }
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: exporter PORT [VANISH_AFTER] | exporter native PORT | "
                        "exporter exemplars PORT\n");
        return 2;
    }
    char *end;
    unsigned long port = strtoul(argv[1], &end, 10);
    if (*end || port == 0 || port > 65535) {
        fprintf(stderr, "exporter: bad port '%s'\n", argv[1]);
        return 2;
    }
    if (argc == 3) {
        vanish_after = strtoul(argv[2], &end, 10);
        if (*end) {
            fprintf(stderr, "exporter: bad VANISH_AFTER '%s'\n", argv[2]);
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);

    int ls = socket(AF_INET, SOCK_STREAM, 0);
    if (ls < 0) {
        perror("exporter: socket");
        return 1;
    }
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((unsigned short)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(ls, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(ls, 16) < 0) {
        perror("exporter: bind/listen");
        close(ls);
        return 1;
    }

    for (;;) {
        int fd = accept(ls, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            perror("exporter: accept");
            close(ls);
            return 1;
        }
        /* A stuck client must not block the next scrape for long. */
        struct timeval tv = {.tv_sec = 2, .tv_usec = 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        serve(fd);
        close(fd);
    }
}
