/*
 * HTTP/1.1 on a connection, parsed by libhttp-parser.
 *
 * One request at a time: when a message completes the parser is paused, the request goes
 * to a worker, and nothing more is parsed (pipelined bytes wait in the connection's input)
 * until the response has been written. Limits are enforced while parsing: header bytes
 * (431), body bytes (413, from Content-Length before any body arrives, or as chunks add
 * up); after such an answer or a syntax error (400) the connection is closed.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "error.h"
#include "server_int.h"

static const char continue_line[] = "HTTP/1.1 100 Continue\r\n\r\n";

static pt_h1_state *state_of(http_parser *p)
{
    return &((pt_conn *)p->data)->h1;
}

static pt_conn *conn_of(http_parser *p)
{
    return p->data;
}

static int fail_in_callback(pt_h1_state *h, int status)
{
    if (!h->error_status)
        h->error_status = status;
    return -1;
}

/* Counts bytes against max_header_bytes (431 beyond). */
static int count_header(pt_conn *c, size_t n)
{
    pt_h1_state *h = &c->h1;
    h->hdr_bytes += n;
    if (h->hdr_bytes > c->srv->opts.max_header_bytes)
        return fail_in_callback(h, 431);
    return 0;
}

static int sb_append(pt_h1_state *h, const char *p, size_t n)
{
    /* Never past its ceiling: count_header() refuses the bytes first. */
    if (pt_buf_append(&h->sb, p, n) != 0)
        return fail_in_callback(h, 500);
    return 0;
}

static int on_message_begin(http_parser *p)
{
    pt_conn *c = conn_of(p);
    pt_h1_state *h = &c->h1;
    h->cur = pt_task_new(c, PT_PROTO_HTTP1);
    if (!h->cur)
        return fail_in_callback(h, 500);
    h->in_message = 1;
    pt_buf_reset(&h->sb);
    h->url_len = h->val_start = 0;
    h->name_len = 0;
    h->in_value = 0;
    h->hdr_bytes = 0;
    h->keep_alive = 0;
    h->expect_continue = 0;
    return 0;
}

static int on_url(http_parser *p, const char *at, size_t n)
{
    pt_conn *c = conn_of(p);
    pt_h1_state *h = &c->h1;
    if (count_header(c, n) < 0 || sb_append(h, at, n) < 0)
        return -1;
    h->url_len += n;
    return 0;
}

/* A header value is complete: keep it if it is one the handlers see. */
static int end_header(pt_h1_state *h)
{
    const char *v = (const char *)h->sb.p + h->val_start;
    size_t vlen = h->sb.len - h->val_start;
    if (h->name_len == 6 && strncasecmp(h->name, "expect", 6) == 0) {
        while (vlen && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
            vlen--;
        if (vlen == 12 && strncasecmp(v, "100-continue", 12) == 0)
            h->expect_continue = 1;
    } else if (pt_task_req_header(h->cur, h->name, h->name_len, v, vlen) < 0) {
        return fail_in_callback(h, 500);
    }
    h->sb.len = h->val_start;
    h->in_value = 0;
    h->name_len = 0;
    return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t n)
{
    pt_conn *c = conn_of(p);
    pt_h1_state *h = &c->h1;
    if (h->in_value && end_header(h) < 0)
        return -1;
    if (count_header(c, n) < 0)
        return -1;
    /* Names longer than the buffer are never among the kept ones: remember the length
     * only, so no comparison can match. */
    if (h->name_len + n < sizeof(h->name))
        memcpy(h->name + h->name_len, at, n);
    h->name_len = h->name_len + n < sizeof(h->name) ? h->name_len + n : sizeof(h->name);
    return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t n)
{
    pt_conn *c = conn_of(p);
    pt_h1_state *h = &c->h1;
    if (!h->in_value) {
        h->in_value = 1;
        h->val_start = h->sb.len;
        if (count_header(c, 4) < 0) /* ": " and CRLF */
            return -1;
    }
    if (count_header(c, n) < 0 || sb_append(h, at, n) < 0)
        return -1;
    return 0;
}

static int on_headers_complete(http_parser *p)
{
    pt_conn *c = conn_of(p);
    pt_h1_state *h = &c->h1;
    pt_task *t = h->cur;
    if (h->in_value && end_header(h) < 0)
        return -1;
    if (pt_task_req_target(t, (const char *)h->sb.p, h->url_len) < 0)
        return fail_in_callback(h, 500);
    t->req.method_name = http_method_str((enum http_method)p->method);
    t->req.method = pt_task_method(t->req.method_name, strlen(t->req.method_name));
    h->keep_alive = http_should_keep_alive(p);
    h->http11 = p->http_major > 1 || (p->http_major == 1 && p->http_minor >= 1);

    int chunked = (p->flags & F_CHUNKED) != 0;
    int has_length = (p->flags & F_CONTENTLENGTH) != 0;
    if (!chunked && has_length && p->content_length > c->srv->opts.max_body)
        return fail_in_callback(h, 413); /* refused before a byte of body is read */
    if (!chunked && has_length)
        pt_task_body_reserve(t, p->content_length);
    int has_body = chunked || (has_length && p->content_length > 0);
    if (h->expect_continue && has_body && p->http_major == 1 && p->http_minor >= 1 &&
        pt_conn_out_append(c, continue_line, sizeof(continue_line) - 1) < 0)
        return fail_in_callback(h, 500);
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t n)
{
    pt_h1_state *h = state_of(p);
    int rv = pt_task_body_append(h->cur, (const uint8_t *)at, n);
    if (rv < 0)
        return fail_in_callback(h, pt_error_http_status(rv));
    return 0;
}

static int on_message_complete(http_parser *p)
{
    pt_h1_state *h = state_of(p);
    h->in_message = 0;
    /* Stop right after this message: a pipelined next request waits for the answer. */
    http_parser_pause(p, 1);
    return 0;
}

static const http_parser_settings settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* ------------------------------------------------------------------------ responses */

static char *put(char *p, const char *s, size_t n)
{
    memcpy(p, s, n);
    return p + n;
}

static char *put_str(char *p, const char *s)
{
    return put(p, s, strlen(s));
}

static char *put_uint(char *p, unsigned long long v)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *p++ = tmp[--n];
    return p;
}

static const char *reason(int status)
{
    const char *r = http_status_str((enum http_status)status);
    return r[0] == '<' ? "" : r; /* "<unknown>" */
}

/* How a response's body is framed. */
enum { BODY_NONE, BODY_LENGTH, BODY_CHUNKED, BODY_UNTIL_CLOSE };

/* Queues status line, headers and body (by reference: it lives until the task is freed,
 * which happens only once the output has drained). A produced body only gets its framing
 * header here; its pieces follow as they come. */
static int write_response(pt_conn *c, const pt_resp *r, int head, int framing, int close)
{
    pt_server *s = c->srv;
    size_t need = 64 + s->date_len + 40 + 28 + 2;
    if (r->content_type)
        need += strlen(r->content_type) + 16;
    if (r->content_encoding)
        need += strlen(r->content_encoding) + 20;
    for (int i = 0; i < r->nheaders; i++)
        if (pt_task_header_ok(r->headers[i].name, r->headers[i].value))
            need += strlen(r->headers[i].name) + strlen(r->headers[i].value) + 4;
    char *p0 = (char *)pt_conn_out_reserve(c, need);
    if (!p0)
        return PT_ENOMEM;
    char *p = put(p0, "HTTP/1.1 ", 9);
    p = put_uint(p, (unsigned)r->status);
    *p++ = ' ';
    p = put_str(p, reason(r->status));
    p = put(p, "\r\n", 2);
    p = put(p, s->date_line, s->date_len);
    if (r->content_type && pt_task_header_ok("Content-Type", r->content_type)) {
        p = put(p, "Content-Type: ", 14);
        p = put(put_str(p, r->content_type), "\r\n", 2);
    }
    if (r->content_encoding && pt_task_header_ok("Content-Encoding", r->content_encoding)) {
        p = put(p, "Content-Encoding: ", 18);
        p = put(put_str(p, r->content_encoding), "\r\n", 2);
    }
    for (int i = 0; i < r->nheaders; i++) {
        const pt_resp_header *hd = &r->headers[i];
        if (!pt_task_header_ok(hd->name, hd->value))
            continue;
        p = put(put_str(p, hd->name), ": ", 2);
        p = put(put_str(p, hd->value), "\r\n", 2);
    }
    if (framing == BODY_LENGTH) {
        p = put(p, "Content-Length: ", 16);
        p = put(put_uint(p, r->body_len), "\r\n", 2);
    } else if (framing == BODY_CHUNKED) {
        p = put(p, "Transfer-Encoding: chunked\r\n", 28);
    }
    if (close)
        p = put(p, "Connection: close\r\n", 19);
    p = put(p, "\r\n", 2);
    pt_buf_commit(&c->out, (size_t)(p - p0));
    if (framing != BODY_LENGTH || head || !r->body_len)
        return 0;
    /* Over TLS a small body joins the headers in one record; otherwise it is sent from
     * where the handler left it (writev on plain sockets). */
    if (c->ssl && r->body_len <= 16384)
        return pt_conn_out_append(c, r->body, r->body_len);
    c->out_body = r->body;
    c->out_body_len = r->body_len;
    return 0;
}

/* Answers a protocol error without dispatching, then closes. */
static void h1_fail(pt_conn *c, int status)
{
    pt_h1_state *h = &c->h1;
    const char *msg = pt_task_status_text(status);
    pt_resp r = {.status = status,
                 .content_type = "text/plain; charset=utf-8",
                 .body = (const uint8_t *)msg,
                 .body_len = strlen(msg)};
    if (h->cur) {
        pt_task_free(h->cur);
        h->cur = NULL;
    }
    h->phase = PT_H1_DEAD;
    h->in_message = 0;
    pt_conn_advance(c, PT_CONN_LINGER);
    if (write_response(c, &r, 0, BODY_LENGTH, 1) < 0)
        pt_conn_close(c);
}

/* ------------------------------------------------------------------ a produced body */

/* Asks for the next piece while the output holds less than one: at most one piece is
 * being pulled and about two wait in the output, whatever the body's size. */
static void stream_want(pt_conn *c, pt_task *t)
{
    if (t->state == PT_TASK_SEND && pt_buf_used(&c->out) < PT_PIECE_MAX)
        pt_task_pull(t);
}

/* Appends the piece t holds, framed: a chunk (none for an empty piece, which would read as
 * the end), or the bytes as they are for an HTTP/1.0 client. */
static int stream_append(pt_conn *c, pt_task *t)
{
    size_t n = pt_buf_used(&t->piece);
    int chunked = c->h1.http11;
    if (n) {
        char *p0 = (char *)pt_conn_out_reserve(c, n + 24);
        if (!p0)
            return PT_ENOMEM;
        char *p = p0;
        if (chunked) {
            static const char hex[] = "0123456789abcdef";
            int shift = 0;
            while (shift < (int)(sizeof(size_t) * 8 - 4) && n >> (shift + 4))
                shift += 4;
            for (; shift >= 0; shift -= 4)
                *p++ = hex[(n >> shift) & 15];
            p = put(p, "\r\n", 2);
        }
        p = put(p, (const char *)pt_buf_data(&t->piece), n);
        if (chunked)
            p = put(p, "\r\n", 2);
        pt_buf_commit(&c->out, (size_t)(p - p0));
        pt_buf_reset(&t->piece);
    }
    if (t->pulled == PT_PULL_END && chunked)
        return pt_conn_out_append(c, "0\r\n\r\n", 5);
    return 0;
}

static void h1_piece(pt_conn *c, pt_task *t)
{
    pt_h1_state *h = &c->h1;
    if (t->pulled < 0) {
        /* The status is out: cutting the connection is how the client learns that the
         * body is incomplete. */
        h->phase = PT_H1_DEAD;
        pt_conn_advance(c, PT_CONN_CLOSE);
        return;
    }
    if (stream_append(c, t) < 0) {
        pt_conn_close(c);
        return;
    }
    if (t->pulled == PT_PULL_END)
        h->phase = PT_H1_SEND; /* released once the output has drained */
    else
        stream_want(c, t);
}

/* ---------------------------------------------------------------------- protocol ops */

static int h1_start(pt_conn *c)
{
    pt_buf_init(&c->h1.sb, c->srv->opts.max_header_bytes);
    c->h1.fresh = 1;
    return 0;
}

static ssize_t h1_input(pt_conn *c, const uint8_t *data, size_t n)
{
    pt_h1_state *h = &c->h1;
    if (h->phase != PT_H1_READ)
        return 0;
    if (h->fresh) {
        http_parser_init(&h->parser, HTTP_REQUEST);
        h->parser.data = c;
        h->fresh = 0;
    }
    size_t used = http_parser_execute(&h->parser, &settings, (const char *)data, n);
    enum http_errno e = HTTP_PARSER_ERRNO(&h->parser);
    if (e == HPE_PAUSED && !h->error_status) {
        h->fresh = 1;
        h->phase = PT_H1_WORK;
        pt_task_dispatch(h->cur);
        return (ssize_t)used;
    }
    if (e == HPE_OK && used == n)
        return (ssize_t)used;
    h1_fail(c, h->error_status ? h->error_status : e == HPE_HEADER_OVERFLOW ? 431 : 400);
    return (ssize_t)n; /* the rest is never parsed */
}

static int h1_want_read(const pt_conn *c)
{
    return c->h1.phase == PT_H1_READ;
}

static int h1_produce(pt_conn *c)
{
    pt_h1_state *h = &c->h1;
    if (h->phase == PT_H1_STREAM) {
        stream_want(c, h->cur);
        return 0;
    }
    if (h->phase != PT_H1_SEND)
        return 0;
    /* The response has been written: release the request and parse the next one. */
    h->phase = PT_H1_READ;
    if (h->cur) {
        pt_task_free(h->cur);
        h->cur = NULL;
    }
    if (!h->keep_alive || c->state >= PT_CONN_STOPPING || c->peer_eof)
        pt_conn_advance(c, PT_CONN_CLOSE);
    return 0;
}

static void h1_complete(pt_conn *c, pt_task *t)
{
    pt_h1_state *h = &c->h1;
    const pt_resp *r = &t->resp;
    int head = t->req.method == PT_M_HEAD;
    int framing = r->status < 200 || r->status == 204 || r->status == 304 ? BODY_NONE
                  : !r->producer.pull                                  ? BODY_LENGTH
                  : h->http11                                          ? BODY_CHUNKED
                                                                       : BODY_UNTIL_CLOSE;
    if (framing == BODY_UNTIL_CLOSE)
        h->keep_alive = 0;
    int close = !h->keep_alive || c->state >= PT_CONN_STOPPING || c->peer_eof;
    if (write_response(c, r, head, framing, close) < 0) {
        pt_conn_close(c);
        return;
    }
    /* Without a body to send, a producer gets its done(cancelled) when the task is freed. */
    if ((framing == BODY_CHUNKED || framing == BODY_UNTIL_CLOSE) && !head) {
        h->phase = PT_H1_STREAM;
        stream_want(c, t);
    } else {
        h->phase = PT_H1_SEND;
    }
}

static void h1_eof(pt_conn *c)
{
    /* A request in a worker is still answered (the peer may only have half-closed). */
    if (c->h1.phase == PT_H1_READ || c->h1.phase == PT_H1_DEAD)
        pt_conn_close(c);
}

static void h1_shutdown(pt_conn *c)
{
    pt_conn_advance(c, PT_CONN_STOPPING);
    if (c->h1.phase == PT_H1_READ && !c->h1.in_message)
        pt_conn_advance(c, PT_CONN_CLOSE);
}

static int h1_idle(const pt_conn *c)
{
    return c->h1.phase == PT_H1_READ || c->h1.phase == PT_H1_DEAD;
}

static void h1_free(pt_conn *c)
{
    pt_buf_free(&c->h1.sb);
}

const pt_proto_ops pt_http1_ops = {
    .name = "http/1.1",
    .start = h1_start,
    .input = h1_input,
    .want_read = h1_want_read,
    .produce = h1_produce,
    .complete = h1_complete,
    .piece = h1_piece,
    .eof = h1_eof,
    .shutdown = h1_shutdown,
    .idle = h1_idle,
    .free = h1_free,
};
