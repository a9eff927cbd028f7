/* Routes and handlers: status codes and messages, with no socket in between. */
#include "faulty.h"
#include "log.h"
#include "metrics.h"
#include "store_helpers.h"
#include "tap.h"

static pt_app app;
static pt_config cfg;

typedef struct call {
    pt_arena arena;
    pt_req req;
    pt_resp resp;
    char body[PT_MSG_MAX + 8];
} call;

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
    size_t n = c->resp.body_len < PT_MSG_MAX ? c->resp.body_len : PT_MSG_MAX;
    memcpy(c->body, c->resp.body ? (const char *)c->resp.body : "", n);
    c->body[n] = '\0';
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

int main(void)
{
    tstore s;
    if (tstore_open(&s) != 0) {
        printf("Bail out! cannot open store\n");
        return 1;
    }
    pt_log_set_level("error"); /* the 4xx lines would only clutter prove's output */
    pt_config_defaults(&cfg);
    app.cfg = &cfg;
    app.store = s.st;
    app.lim.max_decoded = cfg.max_decoded_bytes;
    atomic_store(&app.ready, 1);
    call c;

    static uint8_t wbuf[1 << 20];
    pt_slice w0 = file("prom-2.42-write.bin");
    memcpy(wbuf, w0.p, w0.n);
    pt_slice w = {wbuf, w0.n};
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
    {
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
    }
    pt_arena_free(&c.arena);
    is(post(&c, "/api/v1/read", file("prom-2.42-read-regex.bin")), 200, "regex read: 200");
    pt_arena_free(&c.arena);

    /* Response types: the first one the client lists that promtable implements. */
    {
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
    is(run(&c, PT_M_POST, "/api/v1/write", "application/x-protobuf", "gzip", w.p, w.n), 415,
       "Content-Encoding gzip: 415");
    ok(strstr(c.body, "gzip") != NULL, "the 415 names the encoding");
    pt_arena_free(&c.arena);
    is(run(&c, PT_M_POST, "/api/v1/write", "application/json", "snappy", w.p, w.n), 415,
       "Content-Type application/json: 415");
    pt_arena_free(&c.arena);
    is(run(&c, PT_M_POST, "/api/v1/write",
           "application/x-protobuf; proto=io.prometheus.write.v2.Request", "snappy", w.p, w.n),
       415, "remote write 2.0: 415 until supported");
    pt_arena_free(&c.arena);
    is(run(&c, PT_M_POST, "/api/v1/write", "application/x-protobuf;proto=prometheus.WriteRequest",
           "snappy", w.p, w.n), 204, "explicit proto=prometheus.WriteRequest: 204");
    pt_arena_free(&c.arena);

    /* Bad input: 4xx with the reason first. */
    is(run(&c, PT_M_POST, "/api/v1/write", "", "", (const uint8_t *)"nonsense", 8), 400,
       "garbage body: 400");
    pt_arena_free(&c.arena);
    static const uint8_t bomb[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x00};
    is(run(&c, PT_M_POST, "/api/v1/write", "", "", bomb, sizeof(bomb)), 413,
       "decompression bomb: 413");
    pt_arena_free(&c.arena);
    {
        pt_arena b;
        pt_arena_init(&b, 0, 0);
        tseries bad[] = {{{"job", "x", "__name__", "m", NULL}, {1}, {1}, 1},
                         {{"__name__", "ok", NULL}, {1}, {1}, 1}};
        pt_slice body = mk_body(&b, &mk_write(&b, bad, 2)->base);
        is(post(&c, "/api/v1/write", body), 400, "unsorted labels: 400");
        ok(strncmp(c.body, "invalid label set m{job=\"x\"}: label names not sorted", 52) == 0 &&
               strstr(c.body, "stored 1 samples, rejected 1"),
           "message says what and how much: %s", c.body);
        pt_arena_free(&c.arena);
        tseries neg[] = {{{"__name__", "m", NULL}, {-1}, {1}, 1}};
        is(post(&c, "/api/v1/write", mk_body(&b, &mk_write(&b, neg, 1)->base)), 400,
           "negative timestamp: 400");
        pt_arena_free(&c.arena);
        pt_arena_free(&b);
    }

    /* Outage: 503, and nothing acknowledged. */
    {
        pt_faulty_plan plan = {0};
        plan.write.fail_next = 1;
        pt_faulty_set(&s.faulty, &plan);
        is(post(&c, "/api/v1/write", w), 503, "backend unavailable: 503 (Prometheus retries)");
        pt_arena_free(&c.arena);
        plan = (pt_faulty_plan){0};
        plan.scan.fail_next = 1;
        pt_faulty_set(&s.faulty, &plan);
        is(post(&c, "/api/v1/read", file("prom-2.42-read.bin")), 503, "read during outage: 503");
        pt_arena_free(&c.arena);
        pt_faulty_set(&s.faulty, NULL);
    }

    /* Per-request memory ceiling. */
    cfg.max_request_memory = 64 * 1024;
    is(post(&c, "/api/v1/write", w), 413, "request over web.max_request_memory: 413");
    pt_arena_free(&c.arena);
    cfg.max_request_memory = 512u << 20;

    /* Authentication on write and read, not on health and metrics. */
    {
        app.bearer_token = "s3cret";
        is(post(&c, "/api/v1/write", w), 401, "bearer token configured, none sent: 401");
        ok(c.resp.nheaders == 1 && strcmp(c.resp.headers[0].name, "WWW-Authenticate") == 0,
           "with WWW-Authenticate");
        pt_arena_free(&c.arena);
        c.req.authorization = "Bearer s3cret";
        memset(&c.resp, 0, sizeof(c.resp));
        pt_arena_init(&c.arena, 0, 0);
        c.req.arena = &c.arena;
        pt_app_dispatch(&app, &c.req, &c.resp);
        is(c.resp.status, 204, "the right bearer token: 204");
        pt_arena_free(&c.arena);
        c.req.authorization = "Bearer s3cre";
        memset(&c.resp, 0, sizeof(c.resp));
        pt_arena_init(&c.arena, 0, 0);
        pt_app_dispatch(&app, &c.req, &c.resp);
        is(c.resp.status, 401, "a wrong token: 401");
        pt_arena_free(&c.arena);
        app.bearer_token = NULL;
        app.basic_credentials = "user:pw";
        c.req.authorization = "Basic dXNlcjpwdw==";
        memset(&c.resp, 0, sizeof(c.resp));
        pt_arena_init(&c.arena, 0, 0);
        pt_app_dispatch(&app, &c.req, &c.resp);
        is(c.resp.status, 204, "basic auth user:pw: 204");
        pt_arena_free(&c.arena);
        c.req.authorization = "Basic dXNlcjpwdg==";
        memset(&c.resp, 0, sizeof(c.resp));
        pt_arena_init(&c.arena, 0, 0);
        pt_app_dispatch(&app, &c.req, &c.resp);
        is(c.resp.status, 401, "basic auth with a wrong password: 401");
        pt_arena_free(&c.arena);
        is(run(&c, PT_M_GET, "/-/healthy", "", "", NULL, 0), 200, "health needs no credentials");
        pt_arena_free(&c.arena);
        app.basic_credentials = NULL;
    }

    /* Routes and methods. */
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

    is(run(&c, PT_M_GET, "/metrics", "", "", NULL, 0), 200, "metrics: 200");
    {
        char *text = pt_arena_strndup(&c.arena, (const char *)c.resp.body, c.resp.body_len);
        ok(strstr(text, "promtable_samples_received_total 1886"), "samples received counted");
        ok(strstr(text, "promtable_http_requests_total{route=\"/api/v1/write\",code=\"204\",proto=\"1\"}"),
           "requests by route, code and protocol");
        ok(strstr(text, "promtable_samples_rejected_total{reason=\"labels\"} 1"),
           "rejections by reason");
        ok(strstr(text, "promtable_http_request_duration_seconds_bucket{route=\"/api/v1/write\",le=\"+Inf\"}"),
           "request duration histogram");
        ok(strstr(text, "promtable_backend_write_duration_seconds_count") &&
               strstr(text, "promtable_backend_errors_total{op=\"write\"} 1"),
           "backend duration and errors");
        ok(strstr(text, "promtable_index_cache_entries "), "index cache size");
    }
    pt_arena_free(&c.arena);

    pt_config_free(&cfg);
    tstore_close(&s);
    return done_testing();
}
