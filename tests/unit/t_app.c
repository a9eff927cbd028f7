/* Routes and handlers: status codes and messages, with no socket in between. */
#include <math.h>

#include "faulty.h"
#include "log.h"
#include "metrics.h"
#include "store_helpers.h"
#include "tap.h"
#include "bytes.h"
#include "xor.h"

static const int64_t T0_APP = 1700000000000; /* 2023-11-14 */

/* What every case works on, made afresh by setup() for each: a new store, the default
 * configuration, the app ready with no credentials, and the golden write body. */
static pt_app app;
static pt_config cfg;
static tstore s;

typedef struct call {
    pt_arena arena;
    pt_req req;
    pt_resp resp;
    char body[PT_MSG_MAX + 8];
    pt_buf produced;   /* a produced body, pulled as the server would */
    int pulls, cut;    /* pull calls; 1 when a pull failed */
} call;

/* Plays the server's part for a produced body: pieces of at most 64 KiB until the end. */
static void drain(call *c)
{
    pt_producer *p = &c->resp.producer;
    pt_buf piece = PT_BUF_INIT(64 << 10);
    pt_buf_free(&c->produced);
    c->pulls = c->cut = 0;
    for (;;) {
        pt_buf_reset(&piece);
        int rv = p->pull(p->ud, &piece, 64 << 10);
        c->pulls++;
        if (rv < 0 || pt_buf_append(&c->produced, piece.p, piece.len) != 0) {
            c->cut = 1;
            break;
        }
        if (rv == PT_PULL_END)
            break;
    }
    if (p->done)
        p->done(p->ud, c->cut);
    pt_buf_free(&piece);
    c->resp.body = c->produced.p;
    c->resp.body_len = c->produced.len;
}

static int run(call *c, int method, const char *path, const char *ctype, const char *enc,
               const uint8_t *body, size_t len)
{
    memset(&c->resp, 0, sizeof(c->resp));
    pt_arena_init(&c->arena, 0, 0);
    c->req = (pt_req){.method = method, .method_name = method == PT_M_POST ? "POST" : "GET",
                      .path = path, .query = "", .content_type = ctype,
                      .content_encoding = enc, .authorization = "", .user_agent = "t",
                      .remote_write_version = "0.1.0", .body = body, .body_len = len,
                      .proto = PT_PROTO_HTTP1, .arena = &c->arena};
    pt_app_dispatch(&app, &c->req, &c->resp);
    if (c->resp.producer.pull)
        drain(c);
    size_t n = c->resp.body_len < PT_MSG_MAX ? c->resp.body_len : PT_MSG_MAX;
    memcpy(c->body, c->resp.body ? (const char *)c->resp.body : "", n);
    c->body[n] = '\0';
    return c->resp.status;
}

/* Gives ts one empty integer histogram at t=1000, in static storage: good until the next
 * call, so the request is encoded before another one is built. */
static void one_histogram(Prometheus__TimeSeries *ts)
{
    static Prometheus__Histogram hg = PROMETHEUS__HISTOGRAM__INIT;
    static Prometheus__Histogram *hgs[] = {&hg};
    hg.count_case = PROMETHEUS__HISTOGRAM__COUNT_COUNT_INT;
    hg.zero_count_case = PROMETHEUS__HISTOGRAM__ZERO_COUNT_ZERO_COUNT_INT;
    hg.timestamp = 1000;
    ts->histograms = hgs;
    ts->n_histograms = 1;
}

/* Dispatches c's request again (after the test changed it) on a fresh arena. */
static int again(call *c)
{
    memset(&c->resp, 0, sizeof(c->resp));
    pt_arena_init(&c->arena, 0, 0);
    c->req.arena = &c->arena;
    pt_app_dispatch(&app, &c->req, &c->resp);
    return c->resp.status;
}

static int post(call *c, const char *path, pt_slice body)
{
    return run(c, PT_M_POST, path, "application/x-protobuf", "snappy", body.p, body.n);
}

static pt_slice file(const char *name)
{
    static uint8_t buf[4][1 << 20];
    static int k;
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", PT_TESTDATA, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return (pt_slice){0};
    uint8_t *b = buf[k++ & 3];
    size_t n = fread(b, 1, 1 << 20, f);
    fclose(f);
    return (pt_slice){b, n};
}

/* Decodes a STREAMED_XOR_CHUNKS body and checks it says exactly what the SAMPLES answer
 * `want` says: the same series of each query in the same order, the same samples. */
static int streamed_equals(pt_slice body, const Prometheus__ReadResponse *want, char *why,
                           size_t whylen)
{
    size_t off = 0, q = 0, si = 0;
    /* Stored chunks go out as they are, with up to PT_STREAM_MAX_SAMPLES samples. */
    static int64_t t[PT_STREAM_MAX_SAMPLES];
    static double v[PT_STREAM_MAX_SAMPLES];
    while (off < body.n) {
        uint64_t len = 0;
        int shift = 0;
        while (off < body.n && (body.p[off] & 0x80)) {
            len |= (uint64_t)(body.p[off++] & 0x7f) << shift;
            shift += 7;
        }
        if (off >= body.n)
            return snprintf(why, whylen, "truncated length"), 0;
        len |= (uint64_t)body.p[off++] << shift;
        if (off + 4 + len > body.n)
            return snprintf(why, whylen, "truncated frame"), 0;
        uint32_t crc = pt_get_be32(body.p + off);
        const uint8_t *msg = body.p + off + 4;
        if (crc != pt_crc32c(msg, len))
            return snprintf(why, whylen, "bad CRC at %zu", off), 0;
        off += 4 + len;
        Prometheus__ChunkedReadResponse *m =
            prometheus__chunked_read_response__unpack(NULL, len, msg);
        if (!m || m->n_chunked_series != 1)
            return snprintf(why, whylen, "bad frame message"), 0;
        const Prometheus__ChunkedSeries *cs = m->chunked_series[0];
        while (q < want->n_results && si >= want->results[q]->n_timeseries) {
            q++;
            si = 0;
        }
        int good = q < want->n_results && (size_t)m->query_index == q;
        const Prometheus__TimeSeries *ts = good ? want->results[q]->timeseries[si++] : NULL;
        good = good && cs->n_labels == ts->n_labels;
        for (size_t i = 0; good && i < cs->n_labels; i++)
            good = cs->labels[i]->value.len == ts->labels[i]->value.len &&
                   memcmp(cs->labels[i]->value.data, ts->labels[i]->value.data,
                          ts->labels[i]->value.len) == 0;
        size_t k = 0;
        for (size_t ci = 0; good && ci < cs->n_chunks; ci++) {
            const Prometheus__Chunk *ch = cs->chunks[ci];
            long n = pt_xor_decode((pt_slice){ch->data.data, ch->data.len}, t, v,
                                   PT_STREAM_MAX_SAMPLES);
            /* The chunk says its first and last sample's times. */
            good = n > 0 && ch->min_time_ms == t[0] && ch->max_time_ms == t[n - 1];
            for (long i = 0; good && i < n; i++, k++)
                good = k < ts->n_samples && ts->samples[k]->timestamp == t[i] &&
                       memcmp(&ts->samples[k]->value, &v[i], 8) == 0;
        }
        good = good && k == ts->n_samples;
        prometheus__chunked_read_response__free_unpacked(m, NULL);
        if (!good)
            return snprintf(why, whylen, "series %zu of query %zu differs", si, q), 0;
    }
    while (q < want->n_results && si >= want->results[q]->n_timeseries) {
        q++;
        si = 0;
    }
    if (q != want->n_results)
        return snprintf(why, whylen, "frames end at series %zu of query %zu", si, q), 0;
    return 1;
}


static call c;
static uint8_t wbuf[1 << 20];
static pt_slice w; /* the golden remote write, in wbuf */

/* Stores the golden write, for cases that read what it holds. */
static void write_golden(void)
{
    if (post(&c, "/api/v1/write", w) != 204) {
        BAIL_OUT("the golden write is not stored: %s", c.body);
    }
    pt_arena_free(&c.arena);
}

static void setup(void)
{
    if (tstore_open(&s) != 0) {
        BAIL_OUT("cannot open store");
    }
    pt_config_defaults(&cfg);
    app = (pt_app){.cfg = &cfg, .store = s.st};
    app.store.stats = &pt_m.store; /* as the daemon wires it: /metrics renders pt_m.store */
    app.lim.max_decoded = cfg.max_decoded_bytes;
    atomic_store(&app.ready, 1);
    memset(&c, 0, sizeof(c));
    c.produced = (pt_buf)PT_BUF_INIT(0);
    pt_slice w0 = file("prom-2.42-write.bin");
    memcpy(wbuf, w0.p, w0.n);
    w = (pt_slice){wbuf, w0.n};
}

static void teardown(void)
{
    pt_buf_free(&c.produced);
    pt_config_free(&cfg);
    tstore_close(&s);
}

/* The golden requests of a real Prometheus: stored, and read back. */
static void golden_write_read(void)
{
    is(post(&c, "/api/v1/write", w), 204, "golden remote write is stored: 204");
    pt_arena_free(&c.arena);
    is(post(&c, "/api/v1/write", w), 204, "the same request again (a retry): 204");
    pt_arena_free(&c.arena);
    is(post(&c, "/api/v1/write", file("prom-2.42-metadata.bin")), 204,
       "metadata-only request: 204");
    pt_arena_free(&c.arena);
    static const uint8_t empty[] = {0};
    is(run(&c, PT_M_POST, "/api/v1/write", "", "", empty, 1), 204,
       "empty request without Content-Type/-Encoding (1.0 probe): 204");
    pt_arena_free(&c.arena);

    /* The golden read asks for up{replica="a"}: it must find what the write stored. */
    is(post(&c, "/api/v1/read", file("prom-2.42-read.bin")), 200, "golden remote read: 200");
    ok(c.resp.content_type && strcmp(c.resp.content_type, "application/x-protobuf") == 0 &&
           c.resp.content_encoding && strcmp(c.resp.content_encoding, "snappy") == 0,
       "SAMPLES response headers");
    pt_arena d;
    pt_arena_init(&d, 0, 0);
    pt_slice raw;
    char msg[256];
    int rv = pt_snappy_decode(c.resp.body, c.resp.body_len, 1 << 24, &d, &raw, msg, 256);
    Prometheus__ReadResponse *rr = rv ? NULL :
        prometheus__read_response__unpack(NULL, raw.n, raw.p);
    ok(rr && rr->n_results == 1 && rr->results[0]->n_timeseries == 1 &&
           rr->results[0]->timeseries[0]->n_samples == 1 &&
           rr->results[0]->timeseries[0]->samples[0]->value == 1,
       "the response holds up{...} = 1 written by the golden write");
    if (rr)
        prometheus__read_response__free_unpacked(rr, NULL);
    pt_arena_free(&d);
    pt_arena_free(&c.arena);
    is(post(&c, "/api/v1/read", file("prom-2.42-read-regex.bin")), 200, "regex read: 200");
    pt_arena_free(&c.arena);
}

/* Response types: the first one the client lists that promtable implements. */
static void response_types(void)
{
    write_golden(); /* up{...}, for a streamed answer with a body */
    pt_arena b;
    pt_arena_init(&b, 0, 0);
    const tmatch up[] = {{0, "__name__", "up"}};
    Prometheus__ReadRequest *rr = mk_read(&b, 0, INT64_MAX / 2, up, 1);
    Prometheus__ReadRequest__ResponseType types[2] = {
        PROMETHEUS__READ_REQUEST__RESPONSE_TYPE__STREAMED_XOR_CHUNKS,
        PROMETHEUS__READ_REQUEST__RESPONSE_TYPE__SAMPLES};
    rr->accepted_response_types = types;
    rr->n_accepted_response_types = 2;
    is(post(&c, "/api/v1/read", mk_body(&b, &rr->base)), 200, "[STREAMED, SAMPLES]: 200");
    ok(c.resp.content_type && strcmp(c.resp.content_type, "application/x-streamed-protobuf; "
                                                         "proto=prometheus.ChunkedReadResponse") == 0 &&
           c.resp.content_encoding == NULL && c.resp.body_len > 10,
       "answered with streamed XOR chunks, no Content-Encoding");
    pt_arena_free(&c.arena);
    rr->accepted_response_types = types + 1;
    rr->n_accepted_response_types = 1;
    is(post(&c, "/api/v1/read", mk_body(&b, &rr->base)), 200, "[SAMPLES]: 200");
    ok(strcmp(c.resp.content_type, "application/x-protobuf") == 0, "answered with SAMPLES");
    pt_arena_free(&c.arena);
    Prometheus__ReadRequest__ResponseType unknown = 7;
    rr->accepted_response_types = &unknown;
    is(post(&c, "/api/v1/read", mk_body(&b, &rr->base)), 400, "only unknown types: 400");
    pt_arena_free(&c.arena);
    pt_arena_free(&b);
}

/* Media types. */
static void media_types(void)
{
    is(run(&c, PT_M_POST, "/api/v1/write", "application/x-protobuf", "gzip", w.p, w.n), 415,
       "Content-Encoding gzip: 415");
    ok(strstr(c.body, "gzip") != NULL, "the 415 names the encoding");
    pt_arena_free(&c.arena);
    is(run(&c, PT_M_POST, "/api/v1/write", "application/json", "snappy", w.p, w.n), 415,
       "Content-Type application/json: 415");
    pt_arena_free(&c.arena);
    is(run(&c, PT_M_POST, "/api/v1/write",
           "application/x-protobuf; proto=io.prometheus.write.v2.Request", "snappy", w.p, w.n),
       204, "a 1.0 body sent as remote write 2.0 decodes as an empty 2.0 request (fields 1-3 "
            "are reserved there): 204");
    ok(c.resp.nheaders == 3 &&
           strcmp(c.resp.headers[0].name, "X-Prometheus-Remote-Write-Samples-Written") == 0 &&
           strcmp(c.resp.headers[0].value, "0") == 0,
       "with the written counts, 0");
    pt_arena_free(&c.arena);
    is(run(&c, PT_M_POST, "/api/v1/write", "application/x-protobuf;proto=io.prometheus.write.v3",
           "snappy", w.p, w.n),
       415, "an unknown proto: 415");
    ok(strstr(c.body, "io.prometheus.write.v2.Request") != NULL, "the 415 says what is accepted");
    pt_arena_free(&c.arena);
    is(run(&c, PT_M_POST, "/api/v1/write", "application/x-protobuf;proto=prometheus.WriteRequest",
           "snappy", w.p, w.n), 204, "explicit proto=prometheus.WriteRequest: 204");
    pt_arena_free(&c.arena);
}

/* Bad input: 4xx with the reason first. */
static void bad_input(void)
{
    is(run(&c, PT_M_POST, "/api/v1/write", "", "", (const uint8_t *)"nonsense", 8), 400,
       "garbage body: 400");
    pt_arena_free(&c.arena);
    static const uint8_t bomb[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x00};
    is(run(&c, PT_M_POST, "/api/v1/write", "", "", bomb, sizeof(bomb)), 413,
       "decompression bomb: 413");
    pt_arena_free(&c.arena);
    pt_arena b;
    pt_arena_init(&b, 0, 0);
    tseries bad[] = {{{"job", "x", "__name__", "m", NULL}, {1}, {1}, 1},
                     {{"__name__", "ok", NULL}, {1}, {1}, 1}};
    pt_slice body = mk_body(&b, &mk_pb_write(&b, bad, 2)->base);
    is(post(&c, "/api/v1/write", body), 204, "unsorted labels are sorted: 204");
    pt_arena_free(&c.arena);
    tseries dup[] = {{{"job", "x", "__name__", "m", "job", "y", NULL}, {1}, {1}, 1},
                     {{"__name__", "ok", NULL}, {1}, {1}, 1}};
    body = mk_body(&b, &mk_pb_write(&b, dup, 2)->base);
    is(post(&c, "/api/v1/write", body), 400, "duplicate label names (after sorting): 400");
    ok(strncmp(c.body, "invalid label set m{job=\"x\", job=\"y\"}: duplicate label name", 59) == 0 &&
           strstr(c.body, "stored 1 samples, rejected 1"),
       "message says what and how much: %s", c.body);
    pt_arena_free(&c.arena);
    /* One histogram stored, one sample refused: the message counts both kinds. */
    tseries hs[] = {{{"__name__", "h", NULL}, {0}, {0}, 0},
                    {{"__name__", "m", NULL}, {-1}, {1}, 1}};
    Prometheus__WriteRequest *hw = mk_pb_write(&b, hs, 2);
    one_histogram(hw->timeseries[0]);
    is(post(&c, "/api/v1/write", mk_body(&b, &hw->base)), 400, "a histogram and a bad sample: 400");
    ok(strstr(c.body, "(stored 0 samples and 1 histograms, rejected 1)") != NULL,
       "the message counts the histogram stored: %s", c.body);
    pt_arena_free(&c.arena);
    tseries neg[] = {{{"__name__", "m", NULL}, {-1}, {1}, 1}};
    is(post(&c, "/api/v1/write", mk_body(&b, &mk_pb_write(&b, neg, 1)->base)), 400,
       "negative timestamp: 400");
    pt_arena_free(&c.arena);
    pt_arena_free(&b);
}

enum { WRITE, SCAN };

/* The backend fails its next write or scan (op) with code (0: PT_EUNAVAIL). */
static void fail_next(int op, int code)
{
    pt_faulty_plan plan = {0};
    if (op == SCAN) {
        plan.scan.fail_next = 1;
        plan.scan.code = code;
    } else {
        plan.write.fail_next = 1;
        plan.write.code = code;
    }
    pt_faulty_set(&s.faulty, &plan);
}

/* Outage: 503, and nothing acknowledged. */
static void outage(void)
{
    fail_next(WRITE, 0);
    is(post(&c, "/api/v1/write", w), 503, "backend unavailable: 503 (Prometheus retries)");
    ok(c.resp.nheaders == 1 && strcmp(c.resp.headers[0].name, "Retry-After") == 0 &&
           strcmp(c.resp.headers[0].value, "1") == 0,
       "with Retry-After: 1");
    pt_arena_free(&c.arena);
    /* A full disk (the store's write failed with ENOSPC): retryable, never a 500. */
    fail_next(WRITE, PT_ENOSPACE);
    is(post(&c, "/api/v1/write", w), 503, "disk full: 503 (Prometheus retries)");
    ok(strstr(c.body, "storage disk full") && strstr(c.body, "nothing was acknowledged"),
       "the message says the disk is full: %s", c.body);
    ok(c.resp.nheaders == 1 && strcmp(c.resp.headers[0].name, "Retry-After") == 0,
       "with Retry-After");
    pt_arena_free(&c.arena);
    fail_next(SCAN, PT_ENOSPACE);
    is(post(&c, "/api/v1/read", file("prom-2.42-read.bin")), 503, "a read on a full disk: 503");
    pt_arena_free(&c.arena);
    fail_next(SCAN, 0);
    is(post(&c, "/api/v1/read", file("prom-2.42-read.bin")), 503, "read during outage: 503");
    pt_arena_free(&c.arena);
    /* A 2.0 request, by hand: symbols "", "__name__", "m"; one series m, one sample. */
    static const uint8_t v2[] = {0x22, 0x00, 0x22, 0x08, '_', '_', 'n', 'a', 'm', 'e', '_',
                                 '_', 0x22, 0x01, 'm', 0x2a, 0x11, 0x0a, 0x02, 0x01, 0x02,
                                 0x12, 0x0b, 0x09, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0x10, 0x01};
    pt_arena z;
    pt_arena_init(&z, 0, 0);
    pt_slice body;
    pt_snappy_encode(v2, sizeof(v2), &z, &body);
    const char *ct2 = "application/x-protobuf;proto=io.prometheus.write.v2.Request";
    fail_next(WRITE, 0);
    is(run(&c, PT_M_POST, "/api/v1/write", ct2, "snappy", body.p, body.n), 503,
       "2.0 during an outage: 503");
    ok(c.resp.nheaders == 4 && strcmp(c.resp.headers[0].value, "0") == 0 &&
           strcmp(c.resp.headers[3].name, "Retry-After") == 0,
       "with Samples-Written 0, and Retry-After");
    pt_arena_free(&c.arena);
    pt_faulty_set(&s.faulty, NULL);
    is(run(&c, PT_M_POST, "/api/v1/write", ct2, "snappy", body.p, body.n), 204,
       "2.0 after it: 204");
    ok(c.resp.nheaders == 3 && strcmp(c.resp.headers[0].value, "1") == 0,
       "with Samples-Written 1");
    pt_arena_free(&c.arena);
    pt_arena_free(&z);
}

/* Per-request memory ceiling. */
static void request_memory(void)
{
    cfg.max_request_memory = 64 * 1024;
    is(post(&c, "/api/v1/write", w), 413, "request over web.max_request_memory: 413");
    pt_arena_free(&c.arena);
    cfg.max_request_memory = 512u << 20;
}

/* Dispatches c's request again with another Authorization header; it must answer status. */
static void again_with(const char *authorization, int status, const char *what)
{
    c.req.authorization = authorization;
    is(again(&c), status, "%s", what);
    pt_arena_free(&c.arena);
}

/* Authentication on write and read, not on health and metrics. */
static void authentication(void)
{
    app.bearer_token = "s3cret";
    is(post(&c, "/api/v1/write", w), 401, "bearer token configured, none sent: 401");
    ok(c.resp.nheaders == 1 && strcmp(c.resp.headers[0].name, "WWW-Authenticate") == 0,
       "with WWW-Authenticate");
    pt_arena_free(&c.arena);
    again_with("Bearer s3cret", 204, "the right bearer token: 204");
    again_with("Bearer s3cre", 401, "a wrong token: 401");
    app.bearer_token = NULL;
    app.basic_credentials = "user:pw";
    again_with("Basic dXNlcjpwdw==", 204, "basic auth user:pw: 204");
    again_with("Basic dXNlcjpwdg==", 401, "basic auth with a wrong password: 401");
    is(run(&c, PT_M_GET, "/-/healthy", "", "", NULL, 0), 200, "health needs no credentials");
    pt_arena_free(&c.arena);
    app.basic_credentials = NULL;
}

/* Admission on headers: what the server asks before it reads a body. */
static void admission(void)
{
    app.bearer_token = "s3cret";
    call a;
    memset(&a, 0, sizeof(a));
    pt_arena_init(&a.arena, 0, 0);
    a.req = (pt_req){.method = PT_M_POST, .method_name = "POST", .path = "/api/v1/write",
                     .query = "", .content_type = "", .content_encoding = "",
                     .authorization = "", .user_agent = "", .remote_write_version = "",
                     .tenant = "", .arena = &a.arena};
    ok(pt_app_admit(&app, &a.req, &a.resp) != 0 && a.resp.status == 401,
       "admission: a write without the token is refused on its headers (401)");
    memset(&a.resp, 0, sizeof(a.resp));
    a.req.authorization = "Bearer s3cret";
    ok(pt_app_admit(&app, &a.req, &a.resp) == 0, "... with it, admitted");
    a.req.path = "/api/v1/nope";
    ok(pt_app_admit(&app, &a.req, &a.resp) != 0 && a.resp.status == 404,
       "... a body to an unknown path: 404 before it is read");
    memset(&a.resp, 0, sizeof(a.resp));
    a.req.path = "/api/v1/write";
    a.req.method = PT_M_PUT;
    a.req.method_name = "PUT";
    ok(pt_app_admit(&app, &a.req, &a.resp) != 0 && a.resp.status == 405,
       "... a body with a method the route does not take: 405");
    pt_arena_free(&a.arena);

    is(run(&c, PT_M_GET, "/metrics", "", "", NULL, 0), 200,
       "/metrics without web.metrics_auth needs no credentials");
    pt_arena_free(&c.arena);
    cfg.metrics_auth = 1;
    is(run(&c, PT_M_GET, "/metrics", "", "", NULL, 0), 401,
       "web.metrics_auth: /metrics without credentials: 401");
    pt_arena_free(&c.arena);
    again_with("Bearer s3cret", 200, "... with the read credentials: 200");
    cfg.metrics_auth = 0;
    app.bearer_token = NULL;
}

/* Routes and methods. */
static void routes(void)
{
    is(run(&c, PT_M_GET, "/nope", "", "", NULL, 0), 404, "unknown path: 404");
    pt_arena_free(&c.arena);
    is(run(&c, PT_M_GET, "/api/v1/write", "", "", NULL, 0), 405, "GET on write: 405");
    ok(c.resp.nheaders == 1 && strcmp(c.resp.headers[0].name, "Allow") == 0, "with Allow");
    pt_arena_free(&c.arena);
    is(run(&c, PT_M_POST, "/metrics", "", "", NULL, 0), 405, "POST on /metrics: 405");
    pt_arena_free(&c.arena);
    is(run(&c, PT_M_GET, "/-/healthy", "", "", NULL, 0), 200, "healthy");
    pt_arena_free(&c.arena);
    is(run(&c, PT_M_GET, "/-/ready", "", "", NULL, 0), 200, "ready");
    pt_arena_free(&c.arena);
    atomic_store(&app.ready, 0);
    is(run(&c, PT_M_GET, "/-/ready", "", "", NULL, 0), 503, "not ready while stopping");
    pt_arena_free(&c.arena);
}

/* /metrics counts what this case sends: the counters it checks exactly start at 0 (they
 * are process-wide, and other cases send requests too). */
static void metrics(void)
{
    atomic_store(&pt_m.store.samples_received, 0);
    atomic_store(&pt_m.store.samples_rejected[PT_REJECT_LABELS], 0);
    atomic_store(&pt_m.store.backend_write_errors, 0);
    pt_arena b;
    pt_arena_init(&b, 0, 0);
    int sent = post(&c, "/api/v1/write", w) == 204;
    pt_arena_free(&c.arena);
    /* One sample stored, one with a duplicate label name rejected. */
    tseries dup[] = {{{"job", "x", "__name__", "m", "job", "y", NULL}, {1}, {1}, 1},
                     {{"__name__", "ok", NULL}, {1}, {1}, 1}};
    sent &= post(&c, "/api/v1/write", mk_body(&b, &mk_pb_write(&b, dup, 2)->base)) == 400;
    pt_arena_free(&c.arena);
    /* A histogram, which counts as a sample received. */
    tseries hs[] = {{{"__name__", "h", NULL}, {0}, {0}, 0}};
    Prometheus__WriteRequest *hw = mk_pb_write(&b, hs, 1);
    one_histogram(hw->timeseries[0]);
    sent &= post(&c, "/api/v1/write", mk_body(&b, &hw->base)) == 204;
    pt_arena_free(&c.arena);
    /* Three writes the backend fails. */
    for (int i = 0; i < 3; i++) {
        fail_next(WRITE, 0);
        sent &= post(&c, "/api/v1/write", w) == 503;
        pt_arena_free(&c.arena);
    }
    pt_faulty_set(&s.faulty, NULL);
    pt_arena_free(&b);
    if (!sent)
        diag("a request of the metrics case was not answered as planned");

    is(run(&c, PT_M_GET, "/metrics", "", "", NULL, 0), 200, "metrics: 200");
    char *text = pt_arena_strndup(&c.arena, (const char *)c.resp.body, c.resp.body_len);
    /* 4 golden writes of 94 samples (those the backend failed were received too), 2 in
     * the duplicate-label write, 1 histogram. */
    ok(strstr(text, "promtable_samples_received_total 379"), "samples received counted (a histogram included)");
    ok(strstr(text, "promtable_http_requests_total{route=\"/api/v1/write\",code=\"204\",proto=\"1\"}"),
       "requests by route, code and protocol");
    ok(strstr(text, "promtable_samples_rejected_total{reason=\"labels\"} 1"),
       "rejections by reason");
    ok(strstr(text, "promtable_http_request_duration_seconds_bucket{route=\"/api/v1/write\",le=\"+Inf\"}"),
       "request duration histogram");
    ok(strstr(text, "promtable_backend_write_duration_seconds_count") &&
           strstr(text, "promtable_backend_errors_total{op=\"write\"} 3"),
       "backend duration and errors");
    ok(strstr(text, "promtable_index_cache_entries "), "index cache size");
    ok(strstr(text, "# TYPE promtable_embedded_flushes_total counter\npromtable_embedded_flushes_total ") &&
           strstr(text, "promtable_embedded_frozen_bytes "),
       "the embedded store's flush figures");
    pt_arena_free(&c.arena);
}

/* A streamed answer over several groups of series says what the SAMPLES answer says. */
static void streamed_groups(void)
{
    pt_arena b;
    pt_arena_init(&b, 0, 0);
    enum { NS = 700 };
    tseries *many = pt_arena_calloc(&b, NS * sizeof(*many));
    for (int i = 0; i < NS; i++) {
        char *inst = pt_arena_alloc(&b, 16);
        snprintf(inst, 16, "i%04d", i);
        many[i] = (tseries){{"__name__", i % 3 ? "many_a" : "many_b", "instance", inst, NULL},
                            {1000 + i, 16000 + i, 31000 + 2 * i},
                            {i, -0.0, i * 1e-300},
                            i % 5 ? 3 : 1};
    }
    pt_write_result res;
    ok(pt_store_write(&app.store, mk_write(&b, many, NS), &b, &res) == 0 &&
           res.samples_rejected == 0,
       "700 series written for the streamed read");
    const tmatch ma[] = {{2, "__name__", "many_.*"}};
    const tmatch mb[] = {{0, "__name__", "many_b"}};
    Prometheus__ReadRequest *r1 = mk_read(&b, 0, 100000, ma, 1);
    Prometheus__ReadRequest *r2 = mk_read(&b, 0, 20000, mb, 1);
    Prometheus__ReadRequest rr = PROMETHEUS__READ_REQUEST__INIT;
    Prometheus__Query *qs[2] = {r1->queries[0], r2->queries[0]};
    rr.queries = qs;
    rr.n_queries = 2;
    Prometheus__ReadResponse want;
    char msg[512];
    ok(store_read(&app.store, &rr, &b, NULL, &want, msg, sizeof(msg)) == 0 &&
           want.results[0]->n_timeseries == NS && want.results[1]->n_timeseries > 200,
       "SAMPLES answer for two queries");
    Prometheus__ReadRequest__ResponseType st =
        PROMETHEUS__READ_REQUEST__RESPONSE_TYPE__STREAMED_XOR_CHUNKS;
    rr.accepted_response_types = &st;
    rr.n_accepted_response_types = 1;
    is(post(&c, "/api/v1/read", mk_body(&b, &rr.base)), 200, "streamed read of 2 queries: 200");
    char why[256] = "";
    ok(streamed_equals((pt_slice){c.resp.body, c.resp.body_len}, &want, why, sizeof(why)),
       "the streamed frames, decoded, are the SAMPLES answer (%s)", why[0] ? why : "same");
    ok(c.resp.producer.pull && c.pulls >= 3 && !c.cut,
       "produced piece by piece, a group of series at a time (%d pulls)", c.pulls);
    pt_arena_free(&c.arena);

    /* A client that goes away after the first piece: done(cancelled) releases the read. */
    uint64_t cancelled = pt_m.read_cancelled;
    c.req.body = mk_body(&b, &rr.base).p;
    c.req.body_len = mk_body(&b, &rr.base).n;
    again(&c);
    pt_buf piece = PT_BUF_INIT(64 << 10);
    int prv = c.resp.producer.pull ? c.resp.producer.pull(c.resp.producer.ud, &piece, 1000) : -1;
    if (c.resp.producer.done)
        c.resp.producer.done(c.resp.producer.ud, 1);
    ok(c.resp.status == 200 && prv == PT_PULL_MORE && piece.len > 0 && piece.len <= 1000 &&
           pt_m.read_cancelled == cancelled + 1,
       "a piece is at most what the server asks for; a cancelled stream is released and counted");
    pt_buf_free(&piece);
    pt_arena_free(&c.arena);
    pt_arena_free(&b);
}

/* Stored chunks inside the window go out as they are: a streamed read of flushed data
 * says what the SAMPLES answer says, also where the head shadows a chunk's cell and where
 * the window cuts chunks (those are decoded and cut). */
static void passed_chunks(void)
{
    pt_arena b;
    pt_arena_init(&b, 0, 0);
    enum { NP = 4, PER = 8, ROUNDS = 125 }; /* 1000 samples a series */
    static const uint64_t odd[] = {0x7ff0000000000002ull, 0x8000000000000000ull, 1,
                                   0x7ff0000000000000ull, 0xfff8000000000001ull};
    int written = 1;
    for (int r = 0; r < ROUNDS; r++) {
        tseries ps[NP];
        for (int i = 0; i < NP; i++) {
            ps[i] = (tseries){{"__name__", "passed", "instance", i ? (i == 1 ? "b" : i == 2 ? "c" : "d") : "a", NULL},
                              {0}, {0}, PER};
            for (int j = 0; j < PER; j++) {
                int k = r * PER + j;
                ps[i].t[j] = T0_APP + 15000 * (int64_t)k + (i == 3 ? k % 7 : 0);
                if (i == 2 && k % 97 == 0)
                    memcpy(&ps[i].v[j], &odd[k / 97 % 5], 8);
                else
                    /* no decimals, so that every chunk is fmt 3 */
                    ps[i].v[j] = i == 0 ? k / 3.0 : i == 1 ? 0.5 * k + 1e-300 : k % 3 + 1 / 7.0;
            }
        }
        pt_write_result res;
        written &= pt_store_write(&app.store, mk_write(&b, ps, NP), &b, &res) == 0 &&
                   res.samples_rejected == 0;
    }
    ok(written && pt_embedded_flush(&s.emb) == 0, "4 series of 1000 samples written, flushed");
    const tmatch m[] = {{0, "__name__", "passed"}};
    Prometheus__ReadRequest__ResponseType st =
        PROMETHEUS__READ_REQUEST__RESPONSE_TYPE__STREAMED_XOR_CHUNKS;
    struct {
        int64_t start, end;
        int shadow; /* rewrite a sample inside a chunk first */
        int passed; /* chunks expected to go as they are */
        const char *what;
    } cases[] = {
        {0, T0_APP + 100000000, 0, 1, "a window holding every chunk"},
        {T0_APP + 15000 * 100, T0_APP + 15000 * 900, 0, 0, "a window cutting the chunks"},
        {0, T0_APP + 100000000, 1, 1, "after a rewrite in the head"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (cases[i].shadow) {
            tseries rw = {{"__name__", "passed", "instance", "a", NULL},
                          {T0_APP + 15000 * 500}, {-1.5}, 1};
            pt_write_result res;
            ok(pt_store_write(&app.store, mk_write(&b, &rw, 1), &b, &res) == 0,
               "sample 500 of instance a rewritten in the head");
        }
        Prometheus__ReadRequest *rr = mk_read(&b, cases[i].start, cases[i].end, m, 1);
        Prometheus__ReadResponse want;
        char msg[512];
        int rv = store_read(&app.store, rr, &b, NULL, &want, msg, sizeof(msg));
        rr->accepted_response_types = &st;
        rr->n_accepted_response_types = 1;
        uint64_t before = pt_m.store.read_chunks_passed;
        int status = post(&c, "/api/v1/read", mk_body(&b, &rr->base));
        uint64_t passed = pt_m.store.read_chunks_passed - before;
        char why[256] = "";
        ok(rv == 0 && status == 200 && want.results[0]->n_timeseries == NP &&
               streamed_equals((pt_slice){c.resp.body, c.resp.body_len}, &want, why,
                               sizeof(why)),
           "%s: the streamed answer is the SAMPLES answer (%s)", cases[i].what,
           why[0] ? why : "same");
        if (cases[i].passed)
            ok(passed == (cases[i].shadow ? NP - 1 : NP),
               "%s: %llu stored chunks went as they are", cases[i].what,
               (unsigned long long)passed);
        else
            ok(passed == 0, "%s: no chunk went as it is (%llu)", cases[i].what,
               (unsigned long long)passed);
        pt_arena_free(&c.arena);
    }
    pt_arena_free(&b);
}

/* A SAMPLES answer is built a group at a time as wire bytes: one that protobuf-c structs
 * alone would take past web.max_request_memory is answered, byte for byte. */
static void samples_as_wire_bytes(void)
{
    pt_arena b;
    pt_arena_init(&b, 0, 0);
    enum { NS = 300, ROUNDS = 8 };
    tseries *lean = pt_arena_calloc(&b, NS * sizeof(*lean));
    int written = 1;
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < NS; i++) {
            char *inst = pt_arena_alloc(&b, 16);
            snprintf(inst, 16, "i%04d", i);
            lean[i] = (tseries){{"__name__", "lean_m", "instance", inst, NULL}, {0}, {0}, 8};
            for (int j = 0; j < 8; j++) {
                lean[i].t[j] = 1000 + 15000 * (r * 8 + j);
                lean[i].v[j] = j == 3 ? -0.0 : j == 5 ? NAN : i * 0.25 + r - j;
            }
        }
        pt_write_result res;
        written &= pt_store_write(&app.store, mk_write(&b, lean, NS), &b, &res) == 0 &&
                   res.samples_rejected == 0;
    }
    ok(written, "%d series of %d samples written", NS, ROUNDS * 8);
    const tmatch lm[] = {{0, "__name__", "lean_m"}};
    Prometheus__ReadRequest *rr = mk_read(&b, 0, 10000000, lm, 1);
    pt_slice body = mk_body(&b, &rr->base);

    /* What the answer takes as protobuf-c structs: the least an answer built as structs and
     * then packed needs. */
    pt_arena st;
    pt_arena_init(&st, 0, 0);
    Prometheus__ReadResponse want;
    char msg[512];
    int rv = store_read(&app.store, rr, &st, NULL, &want, msg, sizeof(msg));
    size_t structs = st.used_total, wn = protobuf_c_message_get_packed_size(&want.base);
    uint8_t *wire = pt_arena_alloc(&b, wn);
    protobuf_c_message_pack(&want.base, wire);
    ok(rv == 0 && want.results[0]->n_timeseries == NS &&
           want.results[0]->timeseries[0]->n_samples == ROUNDS * 8,
       "the answer as structs: %zu bytes, %zu on the wire", structs, wn);

    cfg.max_request_memory = structs;
    is(post(&c, "/api/v1/read", body), 200,
       "SAMPLES read within web.max_request_memory = its structs' size: 200");
    pt_arena d;
    pt_arena_init(&d, 0, 0);
    pt_slice raw = {0};
    rv = c.resp.status == 200 ? pt_snappy_decode(c.resp.body, c.resp.body_len, 1 << 26, &d,
                                                 &raw, msg, sizeof(msg))
                              : -1;
    ok(rv == 0 && raw.n == wn && memcmp(raw.p, wire, wn) == 0,
       "the answer is the bytes protobuf-c packs for the same series and samples");
    ok(c.arena.used_total + raw.n <= structs,
       "request arena (%zu) and wire bytes (%zu) stayed within the limit", c.arena.used_total,
       raw.n);
    pt_arena_free(&c.arena);
    pt_arena_free(&d);

    cfg.max_request_memory = wn / 2;
    is(post(&c, "/api/v1/read", body), 413, "the same read with half its wire size: 413");
    ok(strstr(c.body, "web.max_request_memory"), "naming the limit: %s", c.body);
    pt_arena_free(&c.arena);
    cfg.max_request_memory = 512u << 20;
    pt_arena_free(&st);
    pt_arena_free(&b);
}

/* Credentials per route: a route's own replace the shared ones for it only. */
static void route_credentials(void)
{
    pt_slice r = file("prom-2.42-read.bin");
    app.bearer_token = "shared";
    app.route_creds[0].bearer_token = "writer";
    app.route_creds[1].basic_credentials = "grafana:pw";
    static const struct {
        const char *path, *auth;
        int want;
        const char *desc;
    } cases[] = {
        {"/api/v1/write", "Bearer writer", 204, "write with write's own token: 204"},
        {"/api/v1/write", "Bearer shared", 401, "write's own token replaces the shared one"},
        {"/api/v1/write", "Basic Z3JhZmFuYTpwdw==", 401, "write refuses read's basic auth"},
        {"/api/v1/read", "Basic Z3JhZmFuYTpwdw==", 200, "read with read's own basic auth"},
        {"/api/v1/read", "Bearer writer", 401, "read refuses write's token"},
        {"/api/v1/read", "Bearer shared", 401, "read's own credentials replace the shared"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int rd = strcmp(cases[i].path, "/api/v1/read") == 0;
        run(&c, PT_M_POST, cases[i].path, "application/x-protobuf", "snappy", rd ? r.p : w.p,
            rd ? r.n : w.n);
        pt_arena_free(&c.arena);
        c.req.authorization = cases[i].auth;
        is(again(&c), cases[i].want, "%s", cases[i].desc);
        if (cases[i].want == 401)
            ok(c.resp.nheaders == 1 && strcmp(c.resp.headers[0].value,
                                              rd ? "Basic realm=\"promtable\"" : "Bearer") == 0,
               "  with the route's own WWW-Authenticate");
        pt_arena_free(&c.arena);
    }
    /* The browsing API reads: the read credentials. */
    run(&c, PT_M_GET, "/api/v1/labels", NULL, NULL, NULL, 0);
    pt_arena_free(&c.arena);
    again_with("Basic Z3JhZmFuYTpwdw==", 200, "the labels API takes read's own basic auth");
    again_with("Bearer shared", 401,
               "the labels API refuses the shared token when read has its own");
    run(&c, PT_M_POST, "/api/v1/read", "application/x-protobuf", "snappy", r.p, r.n);
    pt_arena_free(&c.arena);
    app.route_creds[1].basic_credentials = NULL;
    again_with("Bearer shared", 200, "a route without its own credentials takes the shared token");
    app.bearer_token = NULL;
    app.route_creds[0].bearer_token = NULL;
}

int main(void)
{
    pt_log_set_level("error"); /* the 4xx lines would only clutter prove's output */
    static void (*const cases[])(void) = {
        golden_write_read, response_types, media_types, bad_input, outage, request_memory,
        authentication, admission, routes, metrics, streamed_groups, passed_chunks,
        samples_as_wire_bytes, route_credentials,
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        setup();
        cases[i]();
        teardown();
    }
    return done_testing();
}
