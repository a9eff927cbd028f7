/*
 * HTTP/1.1 and HTTP/2 driven from byte arrays through the socketless server of
 * http_harness.h: framing, limits, errors, cancellation and produced bodies (overload:
 * t_http_overload.c).
 */
#include "http_harness.h"

/* --------------------------------------------------------------------------- HTTP/1.1 */

static void h1_framing(void)
{
    pt_server *s = server(1 << 20, 8192);
    pt_conn *c = s ? conn(s) : NULL;
    pt_buf out = PT_BUF_INIT(0);
    if (!ok(c != NULL, "HTTP/1.1: a connection without a socket"))
        return;

    put_str(c, "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\nhello world");
    pump(c, &out, 1);
    const char *r = text(&out);
    ok(strncmp(r, "HTTP/1.1 200 OK\r\n", 17) == 0, "Content-Length body: 200");
    ok(strstr(r, "\r\nContent-Length: 11\r\n") != NULL, "... the answer has its length");
    ok(strstr(r, "\r\n\r\nhello world") != NULL, "... and the body back");
    is(c->state, PT_CONN_OPEN, "... and the connection stays open");

    pt_buf_reset(&out);
    put_str(c, "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
               "5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nTrailer: x\r\n\r\n");
    pump(c, &out, 1);
    r = text(&out);
    ok(strstr(r, "\r\nContent-Length: 11\r\n\r\nhello world") != NULL,
       "chunked body is reassembled");
    is(seen.last_body_len, 11, "... the handler saw 11 bytes");

    /* A body split at every byte arrives whole. */
    pt_buf_reset(&out);
    const char *req = "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc";
    for (const char *p = req; *p; p++) {
        put(c, p, 1);
        pump(c, &out, 1);
    }
    ok(strstr(text(&out), "\r\n\r\nabc") != NULL, "a request fed one byte at a time");

    pt_buf_reset(&out);
    put_str(c, "GET /a HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    pump(c, &out, 1);
    ok(strstr(text(&out), "\r\nConnection: close\r\n") != NULL, "Connection: close is answered so");
    is(c->state, PT_CONN_CLOSE, "... and the connection closes once flushed");
    teardown(s, &out);
}

static void h1_pipelining(void)
{
    pt_server *s = server(1 << 20, 8192);
    pt_conn *c = s ? conn(s) : NULL;
    pt_buf out = PT_BUF_INIT(0);
    if (!c)
        return;
    const char second[] = "GET /second HTTP/1.1\r\nHost: a\r\n\r\n";
    put_str(c, "GET /first HTTP/1.1\r\nHost: a\r\n\r\n");
    put_str(c, second);
    pump(c, &out, 0);
    is(queued(s), 1, "pipelining: only the first request goes to a worker");
    is(pt_buf_used(&c->in), sizeof(second) - 1, "... the second waits unparsed");
    is(out.len, 0, "... nothing is written yet");
    ok(!c->ops->want_read(c), "... and no more input is wanted");

    work(s);
    pump(c, &out, 0);
    const char *r = text(&out);
    is(count(r, "HTTP/1.1 200"), 1, "the first answer is written");
    ok(strstr(r, "/first") != NULL, "... it is the first request's");
    is(queued(s), 1, "then the second request goes to a worker");

    work(s);
    pump(c, &out, 0);
    r = text(&out);
    is(count(r, "HTTP/1.1 200"), 2, "both answered");
    ok(strstr(r, "/first") && strstr(r, "/second") && strstr(r, "/first") < strstr(r, "/second"),
       "... in request order");
    teardown(s, &out);
}

/* One request on a fresh connection, whole or one byte at a time (so that a check spans two
 * inputs); the answer's text in out. */
static pt_conn *h1_fed(pt_server *s, const char *req, int bytewise, pt_buf *out)
{
    pt_conn *c = conn(s);
    if (!c)
        return NULL;
    for (const char *p = req; *p; p += bytewise ? 1 : strlen(p)) {
        put(c, p, bytewise ? 1 : strlen(p));
        pump(c, out, 1);
    }
    text(out);
    return c;
}

static pt_conn *h1_one(pt_server *s, const char *req, pt_buf *out)
{
    return h1_fed(s, req, 0, out);
}

/* Closes and frees c the way the loop does (a server has few connection slots). */
static void drop(pt_server *s, pt_conn *c)
{
    if (c)
        pt_conn_close(c);
    process_close_list(s);
}

static void h1_limits(pt_server *s, pt_buf *out)
{
    int calls = seen.calls;
    pt_conn *c = h1_one(s, "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 1001\r\n\r\nxx", out);
    ok(strncmp(text(out), "HTTP/1.1 413 ", 13) == 0, "Content-Length over max_body: 413");
    ok(strstr(text(out), "Connection: close") != NULL, "... with Connection: close");
    ok(c && c->state == PT_CONN_LINGER, "... then lingers: the client may still be sending");

    pt_buf_reset(out);
    char big[1200];
    memset(big, 'x', sizeof(big));
    pt_conn *c2 = conn(s);
    put_str(c2, "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n400\r\n");
    put(c2, big, 0x400);
    put_str(c2, "\r\n");
    pump(c2, out, 1);
    ok(strncmp(text(out), "HTTP/1.1 413 ", 13) == 0, "chunked body over max_body: 413");

    pt_buf_reset(out);
    pt_conn *c3 = conn(s);
    put_str(c3, "GET /x HTTP/1.1\r\nHost: a\r\nX-Big: ");
    put(c3, big, 600);
    put_str(c3, "\r\n\r\n");
    pump(c3, out, 1);
    ok(strncmp(text(out), "HTTP/1.1 431 ", 13) == 0, "headers over max_header_bytes: 431");
    is(seen.calls, calls, "no refused request reached the handler");

    pt_buf_reset(out);
    pt_conn *c4 = conn(s);
    put_str(c4, "GET /");
    put(c4, big, 600); /* a request target longer than max_header_bytes */
    pump(c4, out, 1);
    ok(strncmp(text(out), "HTTP/1.1 431 ", 13) == 0, "an endless request line: 431");
}

static void h1_errors(pt_server *s, pt_buf *out)
{
    static const char *const bad[] = {
        "garbage\r\n\r\n",
        "GET / HTTP/1.1\r\nHost a\r\n\r\n",
        "POST /echo HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        pt_buf_reset(out);
        pt_conn *c = h1_one(s, bad[i], out);
        ok(strncmp(text(out), "HTTP/1.1 400 ", 13) == 0, "malformed request %zu: 400", i);
        ok(c && c->state == PT_CONN_LINGER && !c->ops->want_read(c),
           "... then no more parsing, and close");
    }
    /* Bytes after the error are never parsed as a request. */
    pt_buf_reset(out);
    int calls = seen.calls;
    h1_one(s, "garbage\r\n\r\nGET /x HTTP/1.1\r\nHost: a\r\n\r\n", out);
    is(count(text(out), "HTTP/1.1 "), 1, "a request after a malformed one gets no answer");
    is(seen.calls, calls, "... and never reaches the handler");
}

/* RFC 9112 framing that Debian's non-strict libhttp-parser lets through, and what it must
 * still accept. */
static void h1_strict(pt_server *s, pt_buf *out)
{
    static const char te_only[] = "Transfer-Encoding other than one chunked is not supported";
    static const struct {
        const char *what, *req, *why;
    } bad[] = {
        {"two Transfer-Encoding: chunked lines",
         "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
         "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
         te_only},
        {"Transfer-Encoding: gzip, chunked",
         "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
         "3\r\nabc\r\n0\r\n\r\n",
         te_only},
        {"Transfer-Encoding: gzip",
         "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
         te_only},
        {"Transfer-Encoding: chunked, chunked",
         "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n"
         "3\r\nabc\r\n0\r\n\r\n",
         te_only},
        {"Content-Length with chunked",
         "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n"
         "\r\n3\r\nabc\r\n0\r\n\r\n",
         "unexpected content-length header"},
        {"Host : a", "GET /x HTTP/1.1\r\nHost : a\r\n\r\n", "whitespace in a header field name"},
        {"Transfer-Encoding : chunked",
         "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n"
         "3\r\nabc\r\n0\r\n\r\n",
         "whitespace in a header field name"},
        {"a line starting with whitespace", "GET /x HTTP/1.1\r\n Host: a\r\n\r\n",
         "whitespace in a header field name"},
        {"HTTP/9.9", "GET /x HTTP/9.9\r\nHost: a\r\n\r\n", "HTTP version not supported"},
        {"HTTP/2.0", "GET /x HTTP/2.0\r\nHost: a\r\n\r\n", "HTTP version not supported"},
        {"HTTP/1.2", "GET /x HTTP/1.2\r\nHost: a\r\n\r\n", "HTTP version not supported"},
        {"HTTP/0.9 (no version)", "GET /x\r\n\r\n", "HTTP version not supported"},
        {"XX after chunk data",
         "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
         "3\r\nabcXX0\r\n\r\n",
         "chunk data not followed by CRLF"},
        {"CR X after chunk data",
         "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
         "3\r\nabc\rX0\r\n\r\n",
         "chunk data not followed by CRLF"},
        {"LF CR after the second chunk's data",
         "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
         "1\r\na\r\n3\r\nabc\n\r0\r\n\r\n",
         "chunk data not followed by CRLF"},
        {"HTTP/1.1 without Host", "GET /x HTTP/1.1\r\n\r\n",
         "an HTTP/1.1 request needs a Host header"},
        {"HTTP/1.1 with two Host lines", "GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
         "more than one Host header"},
        {"HTTP/1.0 with two Host lines", "GET /x HTTP/1.0\r\nHost: a\r\nhost: a\r\n\r\n",
         "more than one Host header"},
    };
    int calls = seen.calls;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        for (int bytewise = 0; bytewise < 2; bytewise++) {
            pt_buf_reset(out);
            pt_conn *c = h1_fed(s, bad[i].req, bytewise, out);
            const char *r = text(out), *body = strstr(r, "\r\n\r\n");
            ok(c && strncmp(r, "HTTP/1.1 400 ", 13) == 0 &&
                   strstr(r, "\r\nConnection: close\r\n") && c->state == PT_CONN_LINGER && body &&
                   strstr(body, bad[i].why),
               "%s%s: 400 '%s', then close", bad[i].what, bytewise ? " (bytewise)" : "",
               bad[i].why);
            drop(s, c);
        }
    }
    is(seen.calls, calls, "no refused request reached the handler");

    static const struct {
        const char *what, *req, *body;
    } good[] = {
        {"bare LF line ends", "GET /lf HTTP/1.1\nHost: a\n\n", "/lf"},
        {"HTTP/1.0 without Host", "GET /ten HTTP/1.0\r\n\r\n", "/ten"},
        {"an empty Host", "GET /empty-host HTTP/1.1\r\nHost:\r\n\r\n", "/empty-host"},
        {"Transfer-Encoding: Chunked, chunk extensions, a trailer",
         "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n"
         "3;ext=\"v\"\r\nabc\r\n2 ; e\r\nde\r\n0\r\nT: 1\r\n\r\n",
         "abcde"},
        {"Transfer-Encoding: CHUNKED between spaces",
         "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:   CHUNKED  \r\n\r\n"
         "1\r\nz\r\n0\r\n\r\n",
         "z"},
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        for (int bytewise = 0; bytewise < 2; bytewise++) {
            calls = seen.calls;
            pt_buf_reset(out);
            pt_conn *c = h1_fed(s, good[i].req, bytewise, out);
            const char *r = text(out), *body = strstr(r, "\r\n\r\n");
            ok(c && strncmp(r, "HTTP/1.1 200 ", 13) == 0 && seen.calls == calls + 1 && body &&
                   strcmp(body + 4, good[i].body) == 0,
               "%s%s: 200 '%s'", good[i].what, bytewise ? " (bytewise)" : "", good[i].body);
            drop(s, c);
        }
    }
}

/* What the server answers itself: the status from the error space, the text from one
 * place, the parser's complaint where it says more. */
static void h1_error_texts(void)
{
    pt_server *s = server(1000, 512);
    pt_buf out = PT_BUF_INIT(0);
    char big[1024];
    if (!s)
        return;
    snprintf(big, sizeof(big), "GET /x HTTP/1.1\r\nHost: a\r\nX: %0600d\r\n\r\n", 0);
    static const struct {
        const char *req, *status, *body;
    } cases[] = {
        {"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 1001\r\n\r\n",
         "HTTP/1.1 413 Payload Too Large\r\n", "request body too large\n"},
        {NULL /* big */, "HTTP/1.1 431 Request Header Fields Too Large\r\n",
         "request header fields too large\n"},
        {"GET /x HTTP/3.0\r\nHost: a\r\n\r\n", "HTTP/1.1 400 Bad Request\r\n",
         "HTTP version not supported\n"},
        {"garbage\r\n\r\n", "HTTP/1.1 400 Bad Request\r\n", "invalid HTTP method\n"},
        {"GET /x HTTP/1.1\r\nHost: a\r\nX: 1\rY\r\n\r\n", "HTTP/1.1 400 Bad Request\r\n",
         "LF character expected\n"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        pt_buf_reset(&out);
        pt_conn *c = h1_one(s, cases[i].req ? cases[i].req : big, &out);
        const char *r = text(&out), *body = strstr(r, "\r\n\r\n");
        ok(c && strncmp(r, cases[i].status, strlen(cases[i].status)) == 0 && body &&
               strcmp(body + 4, cases[i].body) == 0,
           "%.*s: '%.*s'", (int)strlen(cases[i].status) - 2, cases[i].status,
           (int)strlen(cases[i].body) - 1, cases[i].body);
    }
    is(pt_error_http_status(PT_EVERSION), 400, "PT_EVERSION is bad input: 400, never 505");
    ok(strcmp(pt_task_status_text(PT_EINTERNAL), "internal error\n") == 0 &&
           strcmp(pt_task_status_text(PT_EUNAVAIL), "temporarily unavailable; retry\n") == 0,
       "a text by class never contradicts its status");
    teardown(s, &out);
}

/* The flag a handler polls: 0 for a request whose client waits, 1 once the client hung up
 * while the request was in a worker; an answer already out is still finished. */
static void h1_cancel(pt_server *s, pt_buf *out)
{
    pt_conn *c = h1_one(s, "GET /normal HTTP/1.1\r\nHost: a\r\n\r\n", out);
    ok(strstr(text(out), "\r\n\r\n/normal") && seen.cancelled == 0,
       "a normal request: the handler finds cancelled == 0");

    pt_buf_reset(out);
    put_str(c, "GET /gone HTTP/1.1\r\nHost: a\r\n\r\n");
    pump(c, out, 0);
    pt_task *t = s->whead;
    ok(t && queued(s) == 1 && atomic_load(t->req.cancelled) == 0,
       "a request waiting in a worker: not cancelled");
    c->peer_hup = 1; /* what epoll's RDHUP, HUP or ERR leave behind */
    pt_conn_drive(c);
    ok(t && atomic_load(t->req.cancelled) == 1, "the client hangs up: cancelled == 1");
    is(c->state, PT_CONN_CLOSED, "... and the connection closes");
    int calls = seen.calls;
    process_close_list(s);
    work(s);
    is(seen.calls, calls, "... the handler never runs for it");

    /* The answer is queued (SEND): a hang-up now changes nothing. */
    pt_buf_reset(out);
    c = conn(s);
    put_str(c, "GET /answered HTTP/1.1\r\nHost: a\r\n\r\n");
    pump(c, out, 0);
    t = s->whead;
    work(s);
    c->peer_hup = 1;
    c->ops->hangup(c);
    ok(t && c->state == PT_CONN_OPEN && atomic_load(t->req.cancelled) == 0,
       "a hang-up once the answer is queued: not cancelled");
    pump(c, out, 0);
    ok(strstr(text(out), "\r\n\r\n/answered") != NULL, "... and the answer is written");
}

static void h2_basics(pt_server *s, h2client *cl, pt_conn *c, pt_buf *out)
{
    (void)s;
    int32_t sid = request(cl, "POST", "/echo", "hello", 5);
    exchange(cl, c, out, 1);
    ok(c->ops == &pt_http2_ops, "h2: the preface selects HTTP/2");
    is(nghttp2_session_get_remote_settings(cl->ss, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS), 100,
       "the server's SETTINGS: 100 concurrent streams");
    is(nghttp2_session_get_remote_settings(cl->ss, NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE), 1 << 20,
       "... a 1 MiB stream window");
    is(cl->status[slot_of(sid)], 200, "HEADERS + DATA: 200");
    ok(cl->data[slot_of(sid)].len == 5 && memcmp(cl->data[slot_of(sid)].p, "hello", 5) == 0,
       "... with the body back");
    ok(cl->closed[slot_of(sid)] && cl->close_error[slot_of(sid)] == 0, "... stream closed cleanly");

    /* Several streams at once, answered in any order, each its own. */
    int32_t a = request(cl, "GET", "/a", NULL, 0);
    int32_t b = request(cl, "GET", "/bb", NULL, 0);
    exchange(cl, c, out, 1);
    ok(cl->data[slot_of(a)].len == 2 && cl->data[slot_of(b)].len == 3,
       "two concurrent streams get their own answers");
}

static void h2_flow_control(pt_server *s, h2client *cl, pt_conn *c, pt_buf *out)
{
    (void)s;
    size_t big = 3u << 20; /* three stream windows */
    uint8_t *body = malloc(big);
    if (!body)
        return;
    for (size_t i = 0; i < big; i++)
        body[i] = (uint8_t)(i * 7 + (i >> 13));
    int calls = seen.calls;
    request(cl, "POST", "/sum", body, big);

    /* The server's frames (SETTINGS, WINDOW_UPDATE) do not reach the client yet. */
    for (int i = 0; i < 50; i++) {
        client_send(cl, c, out, 1);
    }
    size_t got = c->tasks ? pt_buf_used(&c->tasks->body) : 0;
    ok(got > 0 && got <= 65535, "without WINDOW_UPDATE only the initial window arrives (%zu)",
       got);
    is(seen.calls, calls, "... and the request is not complete");

    exchange(cl, c, out, 1);
    ok(cl->window_updates >= 2, "the server grants window as it reads (%d WINDOW_UPDATEs)",
       cl->window_updates);
    is(seen.calls, calls + 1, "then the whole body arrives");
    ok(seen.last_body_len == big && seen.last_body_sum == sum_bytes(body, big),
       "... every byte in order");
    free(body);
}

static void h2_reset(pt_server *s, h2client *cl, pt_conn *c, pt_buf *out)
{
    int calls = seen.calls;
    int32_t sid = request(cl, "GET", "/x", NULL, 0);
    exchange(cl, c, out, 0);
    is(queued(s), 1, "RST_STREAM: the request waits in the queue");
    const atomic_int *flag = s->whead ? s->whead->req.cancelled : NULL;
    ok(flag && atomic_load(flag) == 0, "... not cancelled yet");
    nghttp2_submit_rst_stream(cl->ss, NGHTTP2_FLAG_NONE, sid, NGHTTP2_CANCEL);
    exchange(cl, c, out, 0);
    ok(c->tasks == NULL, "... the reset stream's task leaves the connection");
    ok(flag && atomic_load(flag) == 1, "... and its handler would find cancelled == 1");
    work(s);
    is(seen.calls, calls, "... and the handler never runs for it");
    exchange(cl, c, out, 1);
    is(cl->status[slot_of(sid)], 0, "... nor is it answered");
    int32_t next = request(cl, "GET", "/y", NULL, 0);
    exchange(cl, c, out, 1);
    is(cl->status[slot_of(next)], 200, "the connection goes on serving");
    is(seen.cancelled, 0, "... a stream nobody reset: the handler finds cancelled == 0");
}

/* The error code of the first GOAWAY frame in p, or -1. */
static long goaway_in(const uint8_t *p, size_t n)
{
    for (size_t off = 0; off + 9 <= n;) {
        size_t len = (size_t)p[off] << 16 | (size_t)p[off + 1] << 8 | p[off + 2];
        if (p[off + 3] == NGHTTP2_GOAWAY && off + 9 + 8 <= n)
            return (long)((uint32_t)p[off + 13] << 24 | (uint32_t)p[off + 14] << 16 |
                          (uint32_t)p[off + 15] << 8 | p[off + 16]);
        off += 9 + len;
    }
    return -1;
}

static void h2_goaway(pt_server *s, h2client *cl, pt_conn *c, pt_buf *out)
{
    (void)s;
    int32_t sid = request(cl, "GET", "/inflight", NULL, 0);
    exchange(cl, c, out, 0);
    c->ops->shutdown(c); /* the server stops */
    exchange(cl, c, out, 1);
    is(cl->goaways, 1, "server stop: GOAWAY");
    is(cl->goaway_error, NGHTTP2_NO_ERROR, "... NO_ERROR");
    is(cl->status[slot_of(sid)], 200, "... the stream in flight is still answered");
    is(c->state, PT_CONN_CLOSE, "... then the connection closes");
}

/* The client's GOAWAY ends the session too. */
static void h2_client_goaway(pt_server *s, h2client *cl, pt_conn *c, pt_buf *out)
{
    request(cl, "GET", "/a", NULL, 0);
    exchange(cl, c, out, 1);
    nghttp2_submit_goaway(cl->ss, NGHTTP2_FLAG_NONE, 0, NGHTTP2_NO_ERROR, NULL, 0);
    exchange(cl, c, out, 1);
    is(c->state, PT_CONN_CLOSE, "the client's GOAWAY: the connection closes");

    /* A connection error: DATA on stream 0 as the first frame. */
    pt_conn *c3 = conn(s);
    static const uint8_t bad[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\0\0\0\0\0\0";
    put(c3, bad, sizeof(bad) - 1);
    pump(c3, out, 1);
    is(goaway_in(pt_buf_data(out), pt_buf_used(out)), NGHTTP2_PROTOCOL_ERROR,
       "a protocol error: GOAWAY(PROTOCOL_ERROR)");
    is(c3->state, PT_CONN_CLOSE, "... and close");
}

/* ----------------------------------------------------------------- produced bodies */

static void prod_reset(void)
{
    memset(&prod, 0, sizeof(prod));
}

/* Decodes a chunked body from p; the bytes in out, the end of the last chunk (just past
 * "0\r\n\r\n") or NULL if the body is not complete and well formed. */
static const char *dechunk(const char *p, pt_buf *out)
{
    for (;;) {
        char *end;
        unsigned long n = strtoul(p, &end, 16);
        if (end == p || strncmp(end, "\r\n", 2) != 0)
            return NULL;
        p = end + 2;
        if (n == 0)
            return strncmp(p, "\r\n", 2) == 0 ? p + 2 : NULL;
        if (strlen(p) < n + 2 || strncmp(p + n, "\r\n", 2) != 0)
            return NULL;
        pt_buf_append(out, p, n);
        p += n + 2;
    }
}

static void h1_produced(void)
{
    pt_server *s = server(1 << 20, 8192);
    pt_conn *c = s ? conn(s) : NULL;
    pt_buf out = PT_BUF_INIT(0), body = PT_BUF_INIT(0);
    if (!c)
        return;
    prod_reset();
    put_str(c, "GET /stream?n=150000 HTTP/1.1\r\nHost: a\r\n\r\n");
    pump(c, &out, 0);
    work(s); /* the handler */
    pump(c, &out, 0);
    const char *r = text(&out);
    ok(strstr(r, "\r\nTransfer-Encoding: chunked\r\n") && !strstr(r, "Content-Length"),
       "produced body over HTTP/1.1: chunked, no Content-Length");
    is(queued(s), 1, "... one pull asked for");
    is(c->state, PT_CONN_OPEN, "... nothing more until it comes");
    int max_queued = 0;
    for (int i = 0; i < 10 && queued(s); i++) {
        max_queued = queued(s) > max_queued ? queued(s) : max_queued;
        work(s);
        pump(c, &out, 0);
    }
    is(max_queued, 1, "at most one piece in flight");
    r = text(&out);
    const char *b = strstr(r, "\r\n\r\n");
    const char *end = b ? dechunk(b + 4, &body) : NULL;
    ok(end && *end == '\0', "the chunks and the terminating 0 chunk are well formed");
    ok(body.len == 150000 && is_pattern(body.p, body.len, 0), "... and carry every byte");
    is(prod.pulls, 3, "three pulls of at most 64 KiB");
    ok(prod.dones == 1 && prod.cancelled == 0, "done called once, not cancelled");
    is(prod.overlap, 0, "never two pulls at once");

    pt_buf_reset(&out);
    put_str(c, "GET /a HTTP/1.1\r\nHost: a\r\n\r\n");
    pump(c, &out, 1);
    ok(strstr(text(&out), "\r\n\r\n/a") != NULL, "keep-alive: the next request is answered");

    /* A small produced body: its one piece is pulled with the answer, so the whole
     * response is out after one trip to a worker. */
    prod_reset();
    pt_buf_reset(&out);
    put_str(c, "GET /stream?n=40 HTTP/1.1\r\nHost: a\r\n\r\n");
    pump(c, &out, 0);
    work(s);
    pump(c, &out, 0);
    r = text(&out);
    ok(strstr(r, "\r\n28\r\n") && strstr(r, "\r\n0\r\n\r\n") && queued(s) == 0 &&
           prod.pulls == 1 && prod.dones == 1 && !prod.cancelled,
       "a small produced body: answered whole after one worker turn (the piece pulled with it)");

    /* An HTTP/1.0 client cannot read chunks: the body ends with the connection. */
    prod_reset();
    pt_buf_reset(&out);
    pt_conn *c10 = h1_one(s, "GET /stream?n=40 HTTP/1.0\r\n\r\n", &out);
    r = text(&out);
    b = strstr(r, "\r\n\r\n");
    ok(!strstr(r, "chunked") && strstr(r, "Connection: close") && b && strlen(b + 4) == 40 &&
           is_pattern((const uint8_t *)b + 4, 40, 0),
       "HTTP/1.0: the bytes as they are, then close");
    ok(c10 && c10->state == PT_CONN_CLOSE && prod.dones == 1 && !prod.cancelled,
       "... closing once done");

    prod_reset();
    pt_buf_reset(&out);
    h1_one(s, "HEAD /stream?n=40 HTTP/1.1\r\nHost: a\r\n\r\n", &out);
    r = text(&out);
    ok(strstr(r, "chunked") && strstr(r, "\r\n\r\n")[4] == '\0', "HEAD: headers only");
    teardown(s, &out);
    ok(prod.pulls == 0 && prod.dones == 1 && prod.cancelled == 1,
       "... the producer is never pulled, and done(cancelled) once");
    pt_buf_free(&body);
}

static void h1_produced_cancel(void)
{
    pt_server *s = server(1 << 20, 8192);
    pt_buf out = PT_BUF_INIT(0);
    if (!s)
        return;
    prod_reset();
    pt_conn *c = conn(s);
    put_str(c, "GET /stream?n=1000000 HTTP/1.1\r\nHost: a\r\n\r\n");
    pump(c, &out, 0);
    work(s);
    pump(c, &out, 0);
    work(s);
    pump(c, &out, 0);
    is(queued(s), 1, "close mid-stream: a pull is in flight");
    pt_conn_close(c); /* the client went away */
    process_close_list(s);
    work(s);
    ok(prod.dones == 1 && prod.cancelled == 1, "... done(cancelled=1), once");
    /* The first piece came with the answer, the second was pulled: the third, in flight
     * when the client left, must not run. */
    is(prod.pulls, 2, "... and the cancelled pull was not run");

    prod_reset();
    pt_buf_reset(&out);
    c = h1_one(s, "GET /stream?n=1000000&fail=2 HTTP/1.1\r\nHost: a\r\n\r\n", &out);
    const char *r = text(&out);
    ok(strncmp(r, "HTTP/1.1 200", 12) == 0 && !strstr(r, "\r\n0\r\n\r\n"),
       "a failing pull: the body is cut, without the last chunk");
    is(c ? c->state : -1, PT_CONN_CLOSE, "... and the connection closes");
    ok(prod.dones == 1 && prod.cancelled == 1, "... done(cancelled=1), once");
    teardown(s, &out);
    is(prod.dones, 1, "no second done at teardown");
}

static void h2_produced(pt_server *s, h2client *cl, pt_conn *c, pt_buf *out)
{
    (void)s;
    prod_reset();
    int32_t sid = request(cl, "GET", "/stream?n=300000", NULL, 0);
    exchange(cl, c, out, 1);
    pt_buf *d = &cl->data[slot_of(sid)];
    is(cl->status[slot_of(sid)], 200, "h2 produced body: 200");
    ok(d->len == 300000 && is_pattern(d->p, d->len, 0), "... every byte, in DATA frames");
    ok(cl->closed[slot_of(sid)] && !cl->close_error[slot_of(sid)], "... then END_STREAM");
    ok(prod.pulls == 5 && prod.dones == 1 && !prod.cancelled && !prod.overlap,
       "... five pulls, one at a time, one done");
}

/* A 1000-byte window: the server sends what it allows, and waits. */
static void h2_produced_window(pt_server *s, h2client *cl, pt_conn *c, pt_buf *out)
{
    (void)s;
    prod_reset();
    int32_t sid = request(cl, "GET", "/stream?n=5000", NULL, 0);
    exchange(cl, c, out, 1);
    pt_buf *d = &cl->data[slot_of(sid)];
    is(d->len, 1000, "a small window: only the window's worth is sent");
    ok(!cl->closed[slot_of(sid)] && prod.pulls == 1, "... the rest waits, no more pulled");
    int grants = 0;
    while (!cl->closed[slot_of(sid)] && grants < 10) {
        nghttp2_submit_window_update(cl->ss, NGHTTP2_FLAG_NONE, sid, 1000);
        exchange(cl, c, out, 1);
        grants++;
        if (grants == 1)
            is(d->len, 2000, "... each WINDOW_UPDATE lets as much through");
    }
    ok(d->len == 5000 && is_pattern(d->p, d->len, 0) && grants == 4,
       "... the whole body after four updates");
    ok(prod.dones == 1 && !prod.cancelled, "... and one done");
}

static void h2_produced_cancel(pt_server *s, h2client *cl, pt_conn *c, pt_buf *out)
{
    prod_reset();
    int32_t sid = request(cl, "GET", "/stream?n=1000000", NULL, 0);
    exchange(cl, c, out, 1);
    ok(cl->data[slot_of(sid)].len == 1000 && prod.dones == 0,
       "RST_STREAM mid-stream: the stream waits on its window");
    nghttp2_submit_rst_stream(cl->ss, NGHTTP2_FLAG_NONE, sid, NGHTTP2_CANCEL);
    exchange(cl, c, out, 1);
    ok(prod.dones == 1 && prod.cancelled == 1, "... done(cancelled=1), once");
    is(pt_buf_used(out), 0, "... and nothing more is sent for it");

    /* GOAWAY, then the connection closes, with a pull in flight (small pieces: the first,
     * pulled with the answer, fits the window, so the second is asked for). */
    prod_reset();
    sid = request(cl, "GET", "/stream?n=1000000&chunk=100", NULL, 0);
    exchange(cl, c, out, 0);
    work(s);
    exchange(cl, c, out, 0);
    is(queued(s), 1, "GOAWAY and close mid-stream: a pull in flight");
    nghttp2_submit_goaway(cl->ss, NGHTTP2_FLAG_NONE, 0, NGHTTP2_NO_ERROR, NULL, 0);
    exchange(cl, c, out, 0);
    pt_conn_close(c);
    process_close_list(s);
    work(s);
    ok(prod.dones == 1 && prod.cancelled == 1, "... done(cancelled=1), once");
}

/* A failing pull resets the stream. */
static void h2_produced_fail(pt_server *s, h2client *cl, pt_conn *c, pt_buf *out)
{
    (void)s;
    prod_reset();
    int32_t sid = request(cl, "GET", "/stream?n=1000000&fail=2", NULL, 0);
    int32_t other = request(cl, "GET", "/b", NULL, 0);
    exchange(cl, c, out, 1);
    ok(cl->closed[slot_of(sid)] && cl->close_error[slot_of(sid)] == NGHTTP2_INTERNAL_ERROR,
       "a failing pull: RST_STREAM(INTERNAL_ERROR)");
    is(cl->status[slot_of(other)], 200, "... the other stream is answered");
    ok(prod.dones == 1 && prod.cancelled == 1, "... done(cancelled=1), once");
}

int main(void)
{
    h1_framing();
    h1_pipelining();
    h1_run(server(1000, 512), h1_limits);
    h1_run(server(1000, 8192), h1_errors);
    h1_run(server(1000, 8192), h1_strict);
    h1_error_texts();
    h1_run(server(1 << 20, 8192), h1_cancel);
    h2_run(server(1 << 20, 8192), 0, h2_basics);
    h2_run(server(8u << 20, 8192), 0, h2_flow_control);
    h2_run(server(1 << 20, 8192), 0, h2_reset);
    h2_run(server(1 << 20, 8192), 0, h2_goaway);
    h2_run(server(1 << 20, 8192), 0, h2_client_goaway);
    h1_produced();
    h1_produced_cancel();
    h2_run(server(1 << 20, 8192), 0, h2_produced);
    h2_run(server(1 << 20, 8192), 1000, h2_produced_window);
    h2_run(server(1 << 20, 8192), 1000, h2_produced_cancel);
    h2_run(server(1 << 20, 8192), 0, h2_produced_fail);
    /* The teardown in h2_run ends no producer a second time. */
    is(prod.dones, 1, "no second done at teardown");
    return done_testing();
}
