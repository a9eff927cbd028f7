/*
 * HTTP/1.1 on a connection, parsed by libhttp-parser.
 *
 * One request at a time: when a message completes the parser is paused, the request goes
 * to a worker, and nothing more is parsed (pipelined bytes wait in the connection's input)
 * until the response has been written. Limits are enforced while parsing: header bytes
 * (431), body bytes (413, from Content-Length before any body arrives, or as chunks add
 * up); after such an answer or a syntax error (400) the connection is closed. A request
 * with a body is admitted on its headers (pt_task_admit: credentials, route, limits)
 * before any byte of the body is read; a refusal is answered at once and the connection
 * closed. Trailer fields after a chunked body are counted against the header limit and
 * dropped: they never reach the request's headers. CONNECT is refused (405, then close),
 * since the parser would stop at its headers and take what follows for a new request.
 *
 * Debian builds the parser without HTTP_PARSER_STRICT, so the framing rules of RFC 9112 it
 * then skips are checked here (a request a proxy in front frames differently is how
 * requests are smuggled): only HTTP/1.0 and 1.1, field names of token characters, one
 * Transfer-Encoding line saying exactly "chunked", CRLF after every chunk's data, and one
 * Host line (required in HTTP/1.1). Each failure is a 400 that says what was wrong.
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

/* Records the request's first error; the -1 returned stops the parser. msg says exactly
 * what was wrong, or is NULL for the code's own text. */
static int fail_in_callback(pt_h1_state *h, int rv, const char *msg)
{
    if (!h->error_rv) {
        h->error_rv = rv;
        h->error_msg = msg;
    }
    return -1;
}

/* Counts bytes against max_header_bytes (431 beyond). */
static int count_header(pt_conn *c, size_t n)
{
    pt_h1_state *h = &c->h1;
    h->hdr_bytes += n;
    if (h->hdr_bytes > c->srv->opts.max_header_bytes)
        return fail_in_callback(h, PT_EHEADERS, NULL);
    return 0;
}

static int sb_append(pt_h1_state *h, const char *p, size_t n)
{
    /* Never past its ceiling: count_header() refuses the bytes first. */
    if (pt_buf_append(&h->sb, p, n) != 0)
        return fail_in_callback(h, PT_ENOMEM, NULL);
    return 0;
}

static int on_message_begin(http_parser *p)
{
    pt_conn *c = conn_of(p);
    pt_h1_state *h = &c->h1;
    h->cur = pt_task_new(c, PT_PROTO_HTTP1);
    if (!h->cur)
        return fail_in_callback(h, PT_ENOMEM, NULL);
    h->in_message = 1;
    pt_buf_reset(&h->sb);
    h->url_len = h->val_start = 0;
    h->name_len = 0;
    h->in_value = 0;
    h->hdr_bytes = 0;
    h->keep_alive = 0;
    h->expect_continue = 0;
    h->hosts = h->te_lines = 0;
    h->chunk_left = 0;
    h->crlf_due = 0;
    h->headers_done = 0;
    h->refused = 0;
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

static void trim_ows(const char **v, size_t *n)
{
    while (*n && ((*v)[0] == ' ' || (*v)[0] == '\t')) {
        (*v)++;
        (*n)--;
    }
    while (*n && ((*v)[*n - 1] == ' ' || (*v)[*n - 1] == '\t'))
        (*n)--;
}

static int name_is(const pt_h1_state *h, const char *lower, size_t n)
{
    return h->name_len == n && strncasecmp(h->name, lower, n) == 0;
}

/* A header value is complete: check the framing ones, keep it if the handlers see it. */
static int end_header(pt_h1_state *h)
{
    const char *v = (const char *)h->sb.p + h->val_start;
    size_t vlen = h->sb.len - h->val_start;
    trim_ows(&v, &vlen);
    if (name_is(h, "expect", 6)) {
        if (vlen == 12 && strncasecmp(v, "100-continue", 12) == 0)
            h->expect_continue = 1;
    } else if (name_is(h, "host", 4)) {
        h->hosts++;
    } else if (name_is(h, "transfer-encoding", 17)) {
        /* Exactly one line saying "chunked": a coding list, a repeated line or any other
         * coding may be framed differently by a proxy in front of us (request smuggling,
         * RFC 9112 6.1 and 6.3), and the parser alone lets "gzip, chunked" and two
         * "chunked" lines through. */
        if (h->te_lines++ || vlen != 7 || strncasecmp(v, "chunked", 7) != 0)
            return fail_in_callback(h, PT_EBADREQ,
                                    "Transfer-Encoding other than one chunked is not supported");
    } else {
        int rv = pt_task_req_header(h->cur, h->name, h->name_len, v, vlen);
        if (rv < 0)
            return fail_in_callback(h, rv, NULL);
    }
    h->sb.len = h->val_start;
    h->in_value = 0;
    h->name_len = 0;
    return 0;
}

/* RFC 9110 5.6.2 tchar: what a field name is made of. */
static int is_tchar(unsigned char ch)
{
    return (ch >= '0' && ch <= '9') || ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z') ||
           (ch && strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}

static int on_header_field(http_parser *p, const char *at, size_t n)
{
    pt_conn *c = conn_of(p);
    pt_h1_state *h = &c->h1;
    if (h->headers_done)
        return count_header(c, n); /* a trailer field: counted, dropped */
    if (h->in_value && end_header(h) < 0)
        return -1;
    if (count_header(c, n) < 0)
        return -1;
    /* The non-strict parser takes spaces into a name: "Transfer-Encoding : chunked" would
     * frame the body here while a proxy that ignores the line does not (RFC 9112 5.1). */
    for (size_t i = 0; i < n; i++)
        if (!is_tchar((unsigned char)at[i]))
            return fail_in_callback(h, PT_EBADREQ,
                                    "whitespace in a header field name or before its colon");
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
    if (h->headers_done)
        return count_header(c, n + 4);
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
    h->headers_done = 1;
    /* Never 505: Prometheus must not retry what will never be accepted. HTTP/0.9 (no
     * version) is refused here too. */
    if (p->http_major != 1 || p->http_minor > 1)
        return fail_in_callback(h, PT_EVERSION, NULL);
    h->http11 = p->http_minor == 1;
    /* RFC 9112 3.2: any request with two Host lines, an HTTP/1.1 one with none. */
    if (h->hosts > 1)
        return fail_in_callback(h, PT_EBADREQ, "more than one Host header");
    if (h->http11 && !h->hosts)
        return fail_in_callback(h, PT_EBADREQ, "an HTTP/1.1 request needs a Host header");
    int rv = pt_task_req_target(t, (const char *)h->sb.p, h->url_len);
    if (rv < 0)
        return fail_in_callback(h, rv, NULL);
    t->req.method_name = http_method_str((enum http_method)p->method);
    t->req.method = pt_task_method(t->req.method_name, strlen(t->req.method_name));
    h->keep_alive = http_should_keep_alive(p);
    if (p->method == HTTP_CONNECT)
        return fail_in_callback(h, PT_EMETHOD, "method CONNECT not allowed");

    int chunked = (p->flags & F_CHUNKED) != 0;
    int has_length = (p->flags & F_CONTENTLENGTH) != 0;
    if (!chunked && has_length && p->content_length > c->srv->opts.max_body)
        return fail_in_callback(h, PT_ETOOLARGE, NULL); /* before a byte of body is read */
    int has_body = chunked || (has_length && p->content_length > 0);
    if (pt_task_admit(t, has_body) != 0) {
        h->refused = 1; /* the answer is in t->resp */
        return fail_in_callback(h, PT_EBADREQ, NULL);
    }
    if (h->expect_continue && has_body && h->http11 &&
        pt_conn_out_append(c, continue_line, sizeof(continue_line) - 1) < 0)
        return fail_in_callback(h, PT_ENOMEM, NULL);
    return 0;
}

/* Checks the CRLF bytes still due after a chunk's data against the n bytes at p (all or the
 * first of them). */
static int crlf_check(pt_h1_state *h, const uint8_t *p, size_t n)
{
    for (size_t i = 0; h->crlf_due && i < n; i++, h->crlf_due--)
        if (p[i] != (h->crlf_due == 2 ? '\r' : '\n'))
            return fail_in_callback(h, PT_EBADREQ, "chunk data not followed by CRLF");
    return 0;
}

static int on_chunk_header(http_parser *p)
{
    state_of(p)->chunk_left = p->content_length; /* the size; 0 for the last chunk */
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t n)
{
    pt_h1_state *h = state_of(p);
    int rv = pt_task_body_append(h->cur, (const uint8_t *)at, n);
    if (rv < 0)
        return fail_in_callback(h, rv, NULL);
    if (!(p->flags & F_CHUNKED))
        return 0;
    h->chunk_left -= n < h->chunk_left ? n : h->chunk_left;
    if (h->chunk_left)
        return 0;
    /* The chunk's last byte. Built without strict checks, the parser would take any two
     * bytes after it for the CRLF ("3\r\nabcXX0\r\n\r\n" reads as "abc"). They follow
     * right here in this input, or open the next one. */
    const uint8_t *next = (const uint8_t *)at + n;
    h->crlf_due = 2;
    return crlf_check(h, next, (size_t)(h->in_end - next));
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
    .on_chunk_header = on_chunk_header,
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
 * header here; its pieces follow as they come. With head, the body is not sent (a HEAD
 * request, or the caller appends it). */
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

/* Answers r without dispatching, its body copied behind the headers (with a line end when
 * eol), then closes: what the client may still be sending is read and dropped a while. */
static void h1_refuse(pt_conn *c, const pt_resp *r, int eol)
{
    pt_h1_state *h = &c->h1;
    pt_resp head = *r;
    head.body_len = r->body_len + (eol ? 1 : 0);
    h->phase = PT_H1_DEAD;
    h->in_message = 0;
    pt_conn_advance(c, PT_CONN_LINGER);
    /* Headers only (as for HEAD), then the text; the task (whose arena may hold it) is
     * freed after the copy. */
    if (write_response(c, &head, 1, BODY_LENGTH, 1) < 0 ||
        pt_conn_out_append(c, r->body, r->body_len) < 0 || pt_conn_out_append(c, "\n", eol) < 0)
        pt_conn_close(c);
    if (h->cur) {
        pt_task_free(h->cur);
        h->cur = NULL;
    }
}

/* Answers the request's error (h->error_rv, h->error_msg), or the refusal its admission
 * left in the task, without dispatching, then closes. The status comes from the error
 * space, the text from pt_task_status_text() unless the error says more precisely what was
 * wrong. */
static void h1_fail(pt_conn *c)
{
    pt_h1_state *h = &c->h1;
    if (h->refused && h->cur) {
        h1_refuse(c, &h->cur->resp, 0);
        return;
    }
    const char *text = h->error_msg ? h->error_msg : pt_task_status_text(h->error_rv);
    pt_resp r = {.status = pt_error_http_status(h->error_rv),
                 .content_type = "text/plain; charset=utf-8",
                 .body = (const uint8_t *)text,
                 .body_len = strlen(text)};
    pt_task_retry_after(c->srv, &r); /* 503: a body past a memory limit */
    if (h->error_rv == PT_EMETHOD && r.nheaders < PT_MAX_RESP_HEADERS)
        r.headers[r.nheaders++] = (pt_resp_header){"Allow", "GET, HEAD, POST"};
    h1_refuse(c, &r, h->error_msg != NULL);
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
    /* The end of a chunk's CRLF that the last input did not reach. */
    if (h->crlf_due && crlf_check(h, data, n) < 0)
        goto fail;
    h->in_end = data + n;
    size_t used = http_parser_execute(&h->parser, &settings, (const char *)data, n);
    h->in_end = NULL;
    enum http_errno e = HTTP_PARSER_ERRNO(&h->parser);
    if (e == HPE_PAUSED && !h->error_rv) {
        h->fresh = 1;
        h->phase = PT_H1_WORK;
        pt_task_dispatch(h->cur);
        return (ssize_t)used;
    }
    if (e == HPE_OK && used == n)
        return (ssize_t)used;
    if (!h->error_rv && e == HPE_HEADER_OVERFLOW) {
        h->error_rv = PT_EHEADERS;
    } else if (!h->error_rv) {
        h->error_rv = PT_EBADREQ;
        h->error_msg = http_errno_description(e); /* e.g. "invalid character in header" */
    }
fail:
    h1_fail(c);
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
    int framing = !pt_status_has_body(r->status)                      ? BODY_NONE
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
        if (t->prefetched)
            h1_piece(c, t); /* the first piece came with the answer */
        else
            stream_want(c, t);
    } else {
        h->phase = PT_H1_SEND;
    }
}

static void h1_eof(pt_conn *c)
{
    /* Only read while no request is in progress; otherwise h1_hangup() decides. */
    if (c->h1.phase == PT_H1_READ || c->h1.phase == PT_H1_DEAD)
        pt_conn_close(c);
}

static void h1_hangup(pt_conn *c)
{
    /* A client that closed, reset or half-closed before its answer was ready is gone (as
     * net/http and nginx see it): closing cancels the request in the worker, whose answer
     * is dropped. An answer already being sent is finished; the peer may still read it. */
    pt_h1_state *h = &c->h1;
    if (h->phase != PT_H1_WORK)
        return;
    pt_task_free(h->cur); /* detached and cancelled now, freed when the worker is done */
    h->cur = NULL;
    h->phase = PT_H1_DEAD;
    pt_conn_close(c);
}

static void h1_shutdown(pt_conn *c)
{
    pt_conn_advance(c, PT_CONN_STOPPING);
    if (c->h1.phase == PT_H1_READ && !c->h1.in_message)
        pt_conn_advance(c, PT_CONN_CLOSE);
}

static void h1_timeout(pt_conn *c, pt_task *t, int kind)
{
    (void)t;
    pt_h1_state *h = &c->h1;
    /* A request arriving too slowly is told why; anything else (no request yet, an answer
     * the client does not read) just ends. */
    if (kind != PT_TIMEOUT_WRITE && h->phase == PT_H1_READ && h->in_message) {
        h->error_rv = PT_EREQTIMEOUT;
        h->error_msg = NULL;
        h1_fail(c);
        return;
    }
    pt_conn_close(c);
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
    .hangup = h1_hangup,
    .shutdown = h1_shutdown,
    .timeout = h1_timeout,
    .free = h1_free,
};
