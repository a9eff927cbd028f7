/*
 * The server's overload limits over HTTP/1.1 and HTTP/2, driven from byte arrays through
 * the socketless server of http_harness.h: requests in flight, all bodies together and
 * one connection's bodies, each refused with 503 and Retry-After, counted once, and the
 * gauges kept within the limits.
 */
#include "http_harness.h"

static pt_server *overload_server(int max_inflight, size_t max_body, size_t max_conn_body,
                                  size_t max_body_total)
{
    char err[256];
    pt_server_opts o = {.listen_address = "unused", .workers = 1, .max_body = max_body,
                        .max_header_bytes = 8192, .max_connections = 16,
                        .max_body_total = max_body_total, .max_inflight = max_inflight,
                        .max_conn_body = max_conn_body, .retry_after_s = 7};
    pt_server *s = server_alloc(&o, handler, NULL, err, sizeof(err));
    if (!s)
        diag("server_alloc: %s", err);
    return s;
}

static uint64_t rejected(const pt_server *s, int limit)
{
    return atomic_load(&s->stats->overload_rejected[limit]);
}

/* What /metrics shows stays within the limits (the gauges are the server's own counts). */
static int gauges_bounded(const pt_server *s)
{
    return atomic_load(&s->stats->inflight) == s->requests &&
           s->requests <= s->opts.max_inflight &&
           atomic_load(&s->stats->body_bytes) == (int64_t)s->body_bytes &&
           s->body_bytes <= s->opts.max_body_total;
}

static void h1_overload(void)
{
    pt_server *s = overload_server(2, 1000, 0, 1000);
    pt_buf out[4] = {PT_BUF_INIT(0), PT_BUF_INIT(0), PT_BUF_INIT(0), PT_BUF_INIT(0)};
    if (!s)
        return;
    /* Three requests, no worker running: two are admitted, the third is answered 503. */
    pt_conn *c[3];
    uint64_t before = rejected(s, PT_OVERLOAD_INFLIGHT);
    int calls = seen.calls;
    for (int i = 0; i < 3; i++) {
        c[i] = conn(s);
        put_str(c[i], "GET /admitted HTTP/1.1\r\nHost: a\r\n\r\n");
        pump(c[i], &out[i], 0);
    }
    is(queued(s), 2, "max_inflight 2: two requests wait for a worker");
    ok(gauges_bounded(s) && s->requests == 2, "... the in-flight gauge says 2, no more");
    completions(s);
    pump(c[2], &out[2], 0);
    const char *r = text(&out[2]);
    ok(strncmp(r, "HTTP/1.1 503 ", 13) == 0, "the third gets 503");
    ok(strstr(r, "\r\nRetry-After: 7\r\n") != NULL, "... with Retry-After");
    ok(strstr(r, "web.max_inflight_requests") != NULL, "... naming the limit");
    ok(strstr(r, "Connection: close") == NULL && c[2]->state == PT_CONN_OPEN,
       "... and the connection stays open (keep-alive)");
    is(seen.calls, calls, "... without reaching the handler");
    is((int)(rejected(s, PT_OVERLOAD_INFLIGHT) - before), 1, "... counted once on /metrics");

    work(s);
    for (int i = 0; i < 2; i++)
        pump(c[i], &out[i], 0);
    ok(strncmp(text(&out[0]), "HTTP/1.1 200 ", 13) == 0 &&
       strncmp(text(&out[1]), "HTTP/1.1 200 ", 13) == 0, "the admitted requests complete");
    ok(gauges_bounded(s) && s->requests == 0, "... and leave the in-flight gauge at 0");
    pt_buf_reset(&out[2]);
    put_str(c[2], "GET /again HTTP/1.1\r\nHost: a\r\n\r\n");
    pump(c[2], &out[2], 1);
    ok(strncmp(text(&out[2]), "HTTP/1.1 200 ", 13) == 0,
       "the refused client's retry on the same connection is admitted");

    /* All bodies together at 1000 bytes: a second 800-byte body does not fit while the
     * first waits for a worker. */
    before = rejected(s, PT_OVERLOAD_BODY);
    pt_conn *b1 = conn(s), *b2 = conn(s);
    char body[800];
    memset(body, 'b', sizeof(body));
    put_str(b1, "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 800\r\n\r\n");
    put(b1, body, sizeof(body));
    pump(b1, &out[3], 0);
    pt_buf_reset(&out[3]);
    put_str(b2, "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 800\r\n\r\n");
    put(b2, body, sizeof(body));
    pump(b2, &out[3], 0);
    r = text(&out[3]);
    ok(strncmp(r, "HTTP/1.1 503 ", 13) == 0 && strstr(r, "\r\nRetry-After: 7\r\n"),
       "a body past max_body_total: 503 with Retry-After");
    is((int)(rejected(s, PT_OVERLOAD_BODY) - before), 1, "... counted as body_memory");
    ok(gauges_bounded(s), "... the body gauge stays within max_body_total");
    work(s);
    pt_buf_reset(&out[3]);
    pump(b1, &out[3], 0);
    r = text(&out[3]);
    ok(strncmp(r, "HTTP/1.1 200 ", 13) == 0 && seen.last_body_len == 800,
       "the admitted body is stored whole");
    for (int i = 0; i < 3; i++)
        pt_buf_free(&out[i]);
    teardown(s, &out[3]);
}

static void h2_overload(void)
{
    /* One connection may hold 1500 bytes of bodies; each body at most 1000. */
    pt_server *s = overload_server(2, 1000, 1500, 1 << 20);
    pt_buf out = PT_BUF_INIT(0);
    h2client cl;
    pt_conn *c = h2_open(s, &cl, 0);
    if (!c)
        return;
    char body[800];
    memset(body, 'h', sizeof(body));
    uint64_t before = rejected(s, PT_OVERLOAD_CONN_BODY);
    int32_t a = request(&cl, "POST", "/echo", body, sizeof(body));
    exchange(&cl, c, &out, 0);
    int32_t b = request(&cl, "POST", "/echo", body, sizeof(body));
    exchange(&cl, c, &out, 0);
    is(cl.status[slot_of(b)], 503, "h2: a stream past the connection's body memory gets 503");
    is(cl.retry_after[slot_of(b)], 7, "... with retry-after");
    is((int)(rejected(s, PT_OVERLOAD_CONN_BODY) - before), 1, "... counted as connection_body_memory");
    ok(c->body_bytes <= s->opts.max_conn_body && gauges_bounded(s),
       "... the connection's bodies stay within max_conn_body");
    is(cl.status[slot_of(a)], 0, "the first stream still waits for its worker");

    /* In flight: the first stream and one GET are admitted, a third stream is refused. */
    before = rejected(s, PT_OVERLOAD_INFLIGHT);
    int32_t g1 = request(&cl, "GET", "/g1", NULL, 0);
    int32_t g2 = request(&cl, "GET", "/g2", NULL, 0);
    exchange(&cl, c, &out, 0);
    completions(s);
    exchange(&cl, c, &out, 0);
    is(cl.status[slot_of(g2)], 503, "h2: a stream past max_inflight gets 503");
    is(cl.retry_after[slot_of(g2)], 7, "... with retry-after");
    ok(cl.closed[slot_of(g2)] && cl.close_error[slot_of(g2)] == 0,
       "... as a complete response, not a reset");
    is((int)(rejected(s, PT_OVERLOAD_INFLIGHT) - before), 1, "... counted as inflight");
    ok(gauges_bounded(s) && s->requests == 2, "... two requests in flight, no more");

    exchange(&cl, c, &out, 1);
    ok(cl.status[slot_of(a)] == 200 && cl.data[slot_of(a)].len == sizeof(body),
       "the admitted upload completes with its body");
    is(cl.status[slot_of(g1)], 200, "the admitted GET completes");
    ok(gauges_bounded(s) && s->requests == 0, "... and nothing stays in flight");
    client_free(&cl);
    teardown(s, &out);
}

int main(void)
{
    h1_overload();
    h2_overload();
    return done_testing();
}
