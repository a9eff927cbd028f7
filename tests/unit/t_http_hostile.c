/*
 * The HTTP server against hostile clients, through the socketless server of http_harness.h
 * with a clock the test moves: requests admitted on their headers before any body byte,
 * body memory that follows the bytes that came rather than a declared length, the header,
 * body and write deadlines, idle meaning no byte moved, the cap on HTTP/2 streams with
 * bodies, answers held per connection, trailers kept out of the request's headers,
 * CONNECT refused, and the connections reserved for health checks.
 */
#include "http_harness.h"

#define T0 1000000 /* the clock's start, ms */

static int admit_calls;

/* Admits a request with "Authorization: Bearer good"; refuses anything else with 401. */
static int test_admit(void *ud, pt_req *req, pt_resp *resp)
{
    (void)ud;
    admit_calls++;
    if (strcmp(req->authorization, "Bearer good") == 0)
        return 0;
    resp->status = 401;
    resp->content_type = "text/plain";
    resp->body = (const uint8_t *)"no credentials\n";
    resp->body_len = 15;
    resp->headers[resp->nheaders++] = (pt_resp_header){"WWW-Authenticate", "Bearer"};
    return PT_EUNAUTHORIZED;
}

static int test_on_loop(void *ud, const pt_req *req)
{
    (void)ud;
    return strcmp(req->path, "/-/healthy") == 0;
}

/* A socketless server with o's settings over the harness' defaults, its clock at T0. */
static pt_server *hostile(pt_server_opts *o)
{
    char err[256];
    o->listen_address = "unused";
    o->workers = 1;
    o->max_body = o->max_body ? o->max_body : 1 << 20;
    o->max_header_bytes = o->max_header_bytes ? o->max_header_bytes : 8192;
    o->max_connections = o->max_connections ? o->max_connections : 16;
    o->tenant_header = "X-Scope-OrgID";
    pt_server *s = server_alloc(o, handler, NULL, err, sizeof(err));
    if (!s)
        diag("server_alloc: %s", err);
    else
        s->now_ms = T0;
    return s;
}

/* The clock moves to T0 + ms and the deadlines are enforced; the test pumps what changed. */
static void at(pt_server *s, int64_t ms)
{
    s->now_ms = T0 + ms;
    enforce_deadlines(s);
    while (s->dirty_list) {
        pt_conn *c = s->dirty_list;
        s->dirty_list = c->dnext;
        c->dirty = 0;
    }
}

/* at() for an HTTP/2 connection: then the client and the server exchange what changed. */
static void at_h2(pt_server *s, h2client *cl, pt_conn *c, pt_buf *out, int64_t ms)
{
    at(s, ms);
    exchange(cl, c, out, 1);
}

/* HEADERS without END_STREAM: a POST to path declaring a body of clen bytes, none sent. */
static int32_t upload_headers(h2client *cl, const char *path, const char *auth,
                              const char *clen)
{
    nghttp2_nv nv[] = {
        {(uint8_t *)":method", (uint8_t *)"POST", 7, 4, 0},
        {(uint8_t *)":path", (uint8_t *)(uintptr_t)path, 5, strlen(path), 0},
        {(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0},
        {(uint8_t *)":authority", (uint8_t *)"a", 10, 1, 0},
        {(uint8_t *)"content-length", (uint8_t *)(uintptr_t)clen, 14, strlen(clen), 0},
        {(uint8_t *)"authorization", (uint8_t *)(uintptr_t)auth, 13, strlen(auth), 0},
    };
    return nghttp2_submit_headers(cl->ss, NGHTTP2_FLAG_NONE, -1, NULL, nv, 6, NULL);
}

/* ------------------------------------------------------------------------- admission */

static void h1_admission(pt_server *s, pt_buf *out)
{
    pt_conn *c = conn(s);
    int calls = seen.calls;
    admit_calls = 0;
    put_str(c, "POST /api/v1/write HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n"
               "Content-Length: 1000000\r\n\r\n");
    pump(c, out, 1);
    const char *r = text(out);
    ok(strncmp(r, "HTTP/1.1 401 ", 13) == 0 && strstr(r, "\r\nWWW-Authenticate: Bearer\r\n") &&
           strstr(r, "\r\n\r\nno credentials\n"),
       "h1: a body without credentials is refused on its headers: 401 with its header and text");
    ok(!strstr(r, "100 Continue"), "... no 100 Continue asked the client for the body");
    ok(admit_calls == 1 && seen.calls == calls, "... admitted once, never dispatched");
    ok(c->state == PT_CONN_LINGER && s->body_bytes == 0,
       "... no body memory taken; the connection lingers, then closes");

    pt_buf_reset(out);
    c = conn(s);
    put_str(c, "POST /echo HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer good\r\n"
               "Content-Length: 1000000\r\n\r\n0123456789");
    pump(c, out, 1);
    ok(c->h1.cur && pt_buf_used(&c->h1.cur->body) == 10 && s->body_bytes <= 4096,
       "h1: admitted, the body's memory follows the 10 bytes that came (%zu bytes), not the "
       "1,000,000 declared", s->body_bytes);

    pt_buf_reset(out);
    c = conn(s);
    admit_calls = 0;
    put_str(c, "GET /plain HTTP/1.1\r\nHost: a\r\n\r\n");
    pump(c, out, 1);
    ok(strstr(text(out), "\r\n\r\n/plain") && admit_calls == 0,
       "h1: a request without a body goes to dispatch, which checks it itself");
}

static void h2_admission(pt_server *s, h2client *cl, pt_conn *c, pt_buf *out)
{
    int calls = seen.calls;
    int32_t bad = upload_headers(cl, "/api/v1/write", "Bearer bad", "1000000");
    exchange(cl, c, out, 1);
    is(cl->status[slot_of(bad)], 401, "h2: HEADERS without credentials: 401 before any DATA");
    ok(seen.calls == calls && s->body_bytes == 0, "... never dispatched, no body memory");

    int32_t good = upload_headers(cl, "/echo", "Bearer good", "1000000");
    exchange(cl, c, out, 1);
    ok(cl->status[slot_of(good)] == 0 && s->body_bytes == 0,
       "h2: admitted HEADERS declaring 1,000,000 bytes hold no body memory until DATA comes");
    at_h2(s, cl, c, out, 9999);
    ok(!cl->closed[slot_of(good)], "... a body silent for less than web.body_timeout stays");
    at_h2(s, cl, c, out, 10000);
    ok(cl->closed[slot_of(good)] && cl->close_error[slot_of(good)] == NGHTTP2_CANCEL,
       "... silent for web.body_timeout: the stream is reset (CANCEL)");
    ok(s->stats->timeouts[PT_TIMEOUT_BODY] >= 1, "... counted as a body timeout");
}

/* n streams on c that each start an upload (upload_headers), exchanged once. */
static void h2_uploads(h2client *cl, pt_conn *c, pt_buf *out, int32_t *sid, int n)
{
    for (int i = 0; i < n; i++)
        sid[i] = upload_headers(cl, "/echo", "", "100");
    exchange(cl, c, out, 1);
}

static void h2_body_streams(pt_server *s, h2client *cl, pt_conn *c, pt_buf *out)
{
    int32_t sid[3];
    h2_uploads(cl, c, out, sid, 3);
    ok(!cl->closed[slot_of(sid[0])] && !cl->closed[slot_of(sid[1])],
       "h2: two streams receive bodies (web.max_connection_body_streams = 2)");
    ok(cl->status[slot_of(sid[2])] == 503 && cl->retry_after[slot_of(sid[2])] > 0 &&
           s->stats->overload_rejected[PT_OVERLOAD_BODY_STREAMS] == 1,
       "... a third is answered 503 with Retry-After before its body");
    int32_t g = request(cl, "GET", "/light", NULL, 0);
    exchange(cl, c, out, 1);
    is(cl->status[slot_of(g)], 200, "... a request without a body still goes through");
}

/* By default a client that keeps to the concurrent streams the server offers (100) never
 * meets the cap on streams receiving a body. */
static void h2_body_streams_default(pt_server *s, h2client *cl, pt_conn *c, pt_buf *out)
{
    int32_t sid[100];
    h2_uploads(cl, c, out, sid, 100);
    int open = 0;
    for (int i = 0; i < 100; i++)
        open += sid[i] > 0 && !cl->closed[slot_of(sid[i])] && cl->status[slot_of(sid[i])] == 0;
    is(open, 100, "h2: 100 streams receive bodies at once with the defaults");
    is((int)s->stats->overload_rejected[PT_OVERLOAD_BODY_STREAMS], 0, "... none refused");
}

/* -------------------------------------------------------------------------- deadlines */

static void h1_header_deadline(pt_server *s, pt_buf *out)
{
    pt_conn *quiet = conn(s);
    pt_conn *c = conn(s);
    put_str(c, "POST /echo HTTP/1.1\r\nHo");
    pump(c, out, 1);
    at(s, 5000);
    put_str(c, "s");
    pump(c, out, 1);
    at(s, 9999);
    pump(c, out, 1);
    ok(pt_buf_used(out) == 0 && c->state == PT_CONN_OPEN,
       "h1: headers trickling in for less than web.header_timeout: nothing happens");
    at(s, 10000);
    pump(c, out, 1);
    ok(strncmp(text(out), "HTTP/1.1 408 ", 13) == 0 && c->state == PT_CONN_LINGER,
       "... web.header_timeout after their first byte, whatever came since: 408, then close");
    ok(quiet->state == PT_CONN_CLOSED,
       "... a connection that sent nothing is closed web.header_timeout after its accept");
}

static void h1_body_deadline(pt_server *s, pt_buf *out)
{
    pt_conn *c = conn(s);
    put_str(c, "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n");
    pump(c, out, 1);
    /* 100 bytes every 5 s: never silent for 10 s, but far below 1000 bytes a second. */
    char chunk[100];
    memset(chunk, 'x', sizeof(chunk));
    int64_t t;
    for (t = 5000; t <= 30000 && c->state == PT_CONN_OPEN; t += 5000) {
        put(c, chunk, sizeof(chunk));
        pump(c, out, 1);
        at(s, t);
        pump(c, out, 1);
    }
    ok(strncmp(text(out), "HTTP/1.1 408 ", 13) == 0 && t > 10000 && t <= 20000,
       "h1: a body averaging 20 bytes/s is ended (408) soon after web.body_timeout (at %lld s)",
       (long long)(t - 5000) / 1000);

    pt_buf_reset(out);
    c = conn(s);
    put_str(c, "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n");
    pump(c, out, 1);
    at(s, 29999);
    put(c, chunk, sizeof(chunk));
    pump(c, out, 1);
    at(s, 39999);
    pump(c, out, 1);
    ok(strncmp(text(out), "HTTP/1.1 408 ", 13) == 0,
       "h1: a body silent for web.body_timeout is ended (408)");
}

static void h2_idle_streams(pt_server *s, h2client *cl, pt_conn *c, pt_buf *out)
{
    upload_headers(cl, "/echo", "", "100");
    exchange(cl, c, out, 1);
    at_h2(s, cl, c, out, 4999);
    ok(cl->goaways == 0, "h2: a stream open, no byte moved for less than web.idle_timeout");
    at_h2(s, cl, c, out, 5000);
    ok(cl->goaways == 1 && c->state >= PT_CONN_STOPPING,
       "... for web.idle_timeout: idle whatever streams are open, so GOAWAY");
}

static void h2_write_deadline(pt_server *s, h2client *cl, pt_conn *c, pt_buf *out)
{
    int32_t big = request(cl, "GET", "/stream?n=100000", NULL, 0);
    exchange(cl, c, out, 1);
    ok(cl->status[slot_of(big)] == 200 && !cl->closed[slot_of(big)] && s->resp_held > 0,
       "h2: an answer the client's window keeps shut is held (%zu bytes)", s->resp_held);
    int32_t more = request(cl, "GET", "/more", NULL, 0);
    exchange(cl, c, out, 1);
    ok(cl->status[slot_of(more)] == 503 && cl->retry_after[slot_of(more)] > 0,
       "... past web.max_connection_response_memory the next request gets 503, Retry-After");
    int32_t health = request(cl, "GET", "/-/healthy", NULL, 0);
    exchange(cl, c, out, 1);
    ok(cl->status[slot_of(health)] == 503, "... (without on_loop, a health check is no exception)");
    at_h2(s, cl, c, out, 19999);
    ok(!cl->closed[slot_of(big)], "... no progress for less than web.write_timeout: it stays");
    at_h2(s, cl, c, out, 20000);
    ok(cl->closed[slot_of(big)] && cl->close_error[slot_of(big)] == NGHTTP2_CANCEL,
       "... for web.write_timeout: the stream is reset (CANCEL)");
    ok(s->resp_held == 0 && c->resp_held == 0, "... and what it held is given back");
}

static void h1_write_deadline(pt_server *s, pt_buf *out)
{
    pt_conn *c = conn(s);
    put_str(c, "GET /unread HTTP/1.1\r\nHost: a\r\n\r\n");
    /* Parsed and answered, but the output is never taken: a client that reads nothing. */
    pump(c, out, 0);
    work(s);
    at(s, 19999);
    ok(c->state == PT_CONN_OPEN && !pt_conn_out_empty(c),
       "h1: an answer nobody reads, for less than web.write_timeout: kept");
    at(s, 20000);
    ok(c->state == PT_CONN_CLOSED, "... for web.write_timeout: the connection is closed");
}

/* --------------------------------------------------------------- framing: trailers, CONNECT */

static void h1_trailers(pt_server *s, pt_buf *out)
{
    pt_conn *c = conn(s);
    put_str(c, "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
               "5\r\nhello\r\n0\r\nContent-Encoding: gzip\r\nX-Scope-OrgID: alice\r\n\r\n");
    pump(c, out, 1);
    const char *r = text(out);
    ok(strncmp(r, "HTTP/1.1 200 ", 13) == 0 && strstr(r, "\r\n\r\nhello"),
       "h1: a chunked body with trailer fields is answered");
    ok(seen.encoding[0] == '\0' && seen.tenant[0] == '\0',
       "... its trailers reach neither Content-Encoding nor the tenant header");
}

static void h1_connect(pt_server *s, pt_buf *out)
{
    pt_conn *c = conn(s);
    int calls = seen.calls;
    put_str(c, "CONNECT a:80 HTTP/1.1\r\nHost: a:80\r\nContent-Length: 35\r\n\r\n"
               "GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n");
    pump(c, out, 1);
    const char *r = text(out);
    ok(strncmp(r, "HTTP/1.1 405 ", 13) == 0 && count(r, "HTTP/1.1 ") == 1,
       "h1: CONNECT with a body: one answer, 405");
    ok(seen.calls == calls && !strstr(r, "/smuggled") && c->state == PT_CONN_LINGER,
       "... its body is never parsed as a request; the connection closes");
}

/* ------------------------------------------------------------ reserved connections */

static void reserved_connections(pt_server *s, pt_buf *out)
{
    pt_conn *busy = conn(s);
    put_str(busy, "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n");
    pump(busy, out, 1);
    pt_conn *r1 = conn(s);
    ok(r1 && r1->reserved && !busy->reserved,
       "past web.max_connections a connection is still accepted, as a reserved one");
    ok(pt_conn_new(s, -1) == NULL, "... past the reserved ones too, none");
    put_str(r1, "POST /api/v1/write HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n");
    pump(r1, out, 1);
    ok(strncmp(text(out), "HTTP/1.1 503 ", 13) == 0 && r1->state == PT_CONN_LINGER,
       "... it serves no write: 503, then close");
    process_close_list(s);
    pt_conn_close(r1);
    process_close_list(s);
    pt_buf_reset(out);
    pt_conn *r2 = conn(s);
    put_str(r2, "GET /-/healthy HTTP/1.1\r\nHost: a\r\n\r\n");
    pump(r2, out, 1);
    ok(r2 && strncmp(text(out), "HTTP/1.1 200 ", 13) == 0,
       "... a health check on a reserved connection is answered while the others are taken");
    pt_conn_close(r2);
    process_close_list(s);
    pt_conn *r3 = conn(s);
    at(s, RESERVED_HEADER_MS);
    ok(r3 && r3->state == PT_CONN_CLOSED,
       "... a reserved connection that asks nothing is closed after 2 s");
}

static void nghttp2_guards(void)
{
    ok(pt_http2_flood_guarded() == 1,
       "the linked libnghttp2 (%s) ends a session flooded with CONTINUATION frames",
       nghttp2_version(0)->version_str);
}

int main(void)
{
    nghttp2_guards();
    h1_run(hostile(&(pt_server_opts){.admit = test_admit}), h1_admission);
    h2_run(hostile(&(pt_server_opts){.admit = test_admit, .body_timeout_ms = 10000}), 0,
           h2_admission);
    h2_run(hostile(&(pt_server_opts){.max_conn_body_streams = 2}), 0, h2_body_streams);
    h2_run(hostile(&(pt_server_opts){0}), 0, h2_body_streams_default);
    h1_run(hostile(&(pt_server_opts){.header_timeout_ms = 10000}), h1_header_deadline);
    h1_run(hostile(&(pt_server_opts){.body_timeout_ms = 10000, .body_min_rate = 1000}),
           h1_body_deadline);
    h2_run(hostile(&(pt_server_opts){.idle_timeout_ms = 5000}), 0, h2_idle_streams);
    /* The client's window is one byte, never opened further. */
    h2_run(hostile(&(pt_server_opts){.write_timeout_ms = 20000, .max_conn_resp = 1}), 1,
           h2_write_deadline);
    h1_run(hostile(&(pt_server_opts){.write_timeout_ms = 20000}), h1_write_deadline);
    h1_run(hostile(&(pt_server_opts){0}), h1_trailers);
    h1_run(hostile(&(pt_server_opts){0}), h1_connect);
    h1_run(hostile(&(pt_server_opts){
               .max_connections = 1, .reserved_connections = 1, .on_loop = test_on_loop}),
           reserved_connections);
    return done_testing();
}
