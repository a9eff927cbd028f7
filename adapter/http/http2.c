/*
 * HTTP/2 on a connection: an nghttp2 server session fed from memory (mem_recv/mem_send),
 * for h2c with prior knowledge and h2 chosen by ALPN.
 *
 * Every stream gets its own task at its first HEADERS; a stream with a body is admitted on
 * its headers (pt_task_admit: credentials, route, limits) before any DATA is accepted, and
 * at most max_conn_body_streams streams of a connection receive a body at once (others
 * are answered 503 before their body); the body accumulates in the task up to max_body, its
 * memory growing with the bytes that arrive, never from a declared length; END_STREAM
 * hands it to a worker, so many streams of one connection run in parallel. The stream's user data is the task. A request over a limit is answered early
 * (413/431) without dispatch; once that answer is out, the rest of a large upload is cut
 * with RST_STREAM(NO_ERROR). A produced body is read through a data provider that defers
 * until a worker has pulled the next piece, so it goes out under flow control.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "server_int.h"

#define MAX_CONCURRENT_STREAMS 100
#define STREAM_WINDOW (1 << 20)
#define CONN_WINDOW (16 << 20)
#define OUT_BATCH (64 * 1024) /* frames gathered before one write */
#define DISCARD_MAX (1u << 20) /* upload bytes read and dropped after an early answer */

static pt_task *stream_task(nghttp2_session *ss, int32_t sid)
{
    return nghttp2_session_get_stream_user_data(ss, sid);
}

static nghttp2_nv make_nv(const char *name, size_t nlen, const char *value, size_t vlen)
{
    /* nghttp2 copies names and values (no NO_COPY flags), so const can be cast away. */
    nghttp2_nv nv = {(uint8_t *)(uintptr_t)name, (uint8_t *)(uintptr_t)value, nlen, vlen,
                     NGHTTP2_NV_FLAG_NONE};
    return nv;
}

/* Hands nghttp2 the next bytes of t's body: from the handler's buffer, or from the piece a
 * worker pulled. When a produced body's piece runs dry, asks a worker for the next one and
 * defers the stream until it comes (h2_piece resumes it). */
static ssize_t read_body(nghttp2_session *ss, int32_t sid, uint8_t *buf, size_t len,
                         uint32_t *flags, nghttp2_data_source *src, void *ud)
{
    (void)ss;
    (void)sid;
    (void)ud;
    pt_task *t = src->ptr;
    int produced = t->resp.producer.pull != NULL;
    if (produced && t->state == PT_TASK_PULL)
        return NGHTTP2_ERR_DEFERRED;
    if (produced && t->pulled < 0)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* resets the stream */
    size_t left = produced ? pt_buf_used(&t->piece) : t->resp.body_len - t->sent;
    size_t n = left < len ? left : len;
    if (n) /* an empty piece may have no memory yet: no pointer into it */
        memcpy(buf, produced ? pt_buf_data(&t->piece) : t->resp.body + t->sent, n);
    if (produced)
        pt_buf_consume(&t->piece, n);
    else
        t->sent += n;
    if (n)
        t->touched_ms = t->srv->now_ms;
    if (n < left)
        return (ssize_t)n;
    if (!produced || t->pulled == PT_PULL_END) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        return (ssize_t)n;
    }
    pt_task_pull(t);
    return n ? (ssize_t)n : NGHTTP2_ERR_DEFERRED;
}

static int submit(pt_conn *c, pt_task *t)
{
    pt_server *s = c->srv;
    const pt_resp *r = &t->resp;
    nghttp2_nv nv[5 + PT_MAX_RESP_HEADERS];
    size_t n = 0;
    char status[8], clen[24];
    int no_body = !pt_status_has_body(r->status);

    snprintf(status, sizeof(status), "%03d", r->status);
    nv[n++] = make_nv(":status", 7, status, strlen(status));
    if (s->date_len > 8)
        nv[n++] = make_nv("date", 4, s->date_line + 6, s->date_len - 8);
    if (r->content_type && pt_task_header_ok("content-type", r->content_type))
        nv[n++] = make_nv("content-type", 12, r->content_type, strlen(r->content_type));
    if (r->content_encoding && pt_task_header_ok("content-encoding", r->content_encoding))
        nv[n++] = make_nv("content-encoding", 16, r->content_encoding,
                          strlen(r->content_encoding));
    for (int i = 0; i < r->nheaders; i++) {
        const pt_resp_header *h = &r->headers[i];
        if (!pt_task_header_ok(h->name, h->value))
            continue;
        /* HTTP/2 field names are lowercase (RFC 9113 8.2.1). */
        size_t len = strlen(h->name);
        char *lower = pt_arena_alloc(&t->arena, len);
        if (!lower)
            continue;
        for (size_t j = 0; j < len; j++)
            lower[j] = (char)tolower((unsigned char)h->name[j]);
        nv[n++] = make_nv(lower, len, h->value, strlen(h->value));
    }
    if (!no_body && !r->producer.pull) {
        snprintf(clen, sizeof(clen), "%zu", r->body_len);
        nv[n++] = make_nv("content-length", 14, clen, strlen(clen));
    }
    t->sent = 0;
    /* Without a body to send, a producer gets its done(cancelled) when the stream closes. */
    nghttp2_data_provider dp = {.source.ptr = t, .read_callback = read_body};
    int body = !no_body && t->req.method != PT_M_HEAD && (r->body_len > 0 || r->producer.pull);
    return nghttp2_submit_response(c->h2, t->stream_id, nv, n, body ? &dp : NULL);
}

/* Answers a stream with the answer in t->resp, without dispatching it. */
static void reject(pt_conn *c, pt_task *t)
{
    t->rejected = 1;
    t->state = PT_TASK_SEND;
    if (submit(c, t) != 0)
        nghttp2_submit_rst_stream(c->h2, NGHTTP2_FLAG_NONE, t->stream_id,
                                  NGHTTP2_INTERNAL_ERROR);
}

/* -------------------------------------------------------------------- nghttp2 callbacks */

static int on_begin_headers(nghttp2_session *ss, const nghttp2_frame *f, void *ud)
{
    pt_conn *c = ud;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    pt_task *t = pt_task_new(c, PT_PROTO_HTTP2);
    if (!t)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* resets just this stream */
    t->stream_id = f->hd.stream_id;
    if (nghttp2_session_set_stream_user_data(ss, t->stream_id, t) != 0) {
        pt_task_free(t);
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    return 0;
}

static int parse_length(const uint8_t *v, size_t n, uint64_t *out)
{
    uint64_t x = 0;
    if (n == 0 || n > 19)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return -1;
        x = x * 10 + (uint64_t)(v[i] - '0');
    }
    *out = x;
    return 0;
}

static int on_header(nghttp2_session *ss, const nghttp2_frame *f, const uint8_t *name,
                     size_t nlen, const uint8_t *value, size_t vlen, uint8_t flags, void *ud)
{
    pt_conn *c = ud;
    (void)flags;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0; /* trailers carry nothing the handlers read */
    pt_task *t = stream_task(ss, f->hd.stream_id);
    if (!t || t->early_rv)
        return 0;
    /* RFC 9113 counts 32 bytes of overhead per field toward the header list size. */
    t->hdr_bytes += nlen + vlen + 32;
    if (t->hdr_bytes > c->srv->opts.max_header_bytes) {
        t->early_rv = PT_EHEADERS;
        return 0;
    }
    const char *n = (const char *)name, *v = (const char *)value;
    if (nlen && n[0] == ':') {
        if (nlen == 7 && memcmp(n, ":method", 7) == 0) {
            t->req.method = pt_task_method(v, vlen);
            char *m = pt_arena_strndup(&t->arena, v, vlen);
            if (!m)
                t->early_rv = PT_ENOMEM;
            else
                t->req.method_name = m;
        } else if (nlen == 5 && memcmp(n, ":path", 5) == 0) {
            int rv = pt_task_req_target(t, v, vlen);
            if (rv < 0)
                t->early_rv = rv;
        }
        return 0;
    }
    if (nlen == 14 && memcmp(n, "content-length", 14) == 0) {
        uint64_t len;
        if (parse_length(value, vlen, &len) == 0) {
            t->declared_len = len;
            if (len > c->srv->opts.max_body)
                t->early_rv = PT_ETOOLARGE; /* refused before a byte of body is read */
        }
        return 0;
    }
    int rv = pt_task_req_header(t, n, nlen, v, vlen);
    if (rv < 0)
        t->early_rv = rv;
    return 0;
}

static int on_data_chunk(nghttp2_session *ss, uint8_t flags, int32_t sid, const uint8_t *data,
                         size_t len, void *ud)
{
    (void)flags;
    (void)ud;
    pt_task *t = stream_task(ss, sid);
    if (!t || t->early_rv || t->state != PT_TASK_RECV)
        return 0; /* discarded; nghttp2 still credits the flow-control window */
    int rv = pt_task_body_append(t, data, len);
    if (rv < 0)
        t->early_rv = rv;
    return 0;
}

static int on_frame_recv(nghttp2_session *ss, const nghttp2_frame *f, void *ud)
{
    pt_conn *c = ud;
    if (f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA)
        return 0;
    pt_task *t = stream_task(ss, f->hd.stream_id);
    if (!t || t->state != PT_TASK_RECV)
        return 0;
    int end = (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
    if (t->early_rv) {
        pt_task_error_resp(t, t->early_rv, NULL);
        reject(c, t);
        return 0;
    }
    if (f->hd.type == NGHTTP2_HEADERS && !t->headers_ms) {
        /* The request's headers (a later HEADERS frame holds trailers). */
        if (!end && c->body_streams >= c->srv->opts.max_conn_body_streams) {
            /* A 503 on the stream, not REFUSED_STREAM: Prometheus' own retry loop backs
             * off and counts it (docs/operations.md, "Overload"). */
            t->headers_ms = c->srv->now_ms;
            t->early_rv = pt_task_refuse(t, PT_OVERLOAD_BODY_STREAMS,
                                         "server busy: web.max_connection_body_streams streams "
                                         "of this connection are receiving bodies; retry\n");
            reject(c, t);
            return 0;
        }
        if (pt_task_admit(t, !end) != 0) {
            t->early_rv = PT_EBADREQ; /* whatever comes of the stream is dropped */
            reject(c, t);
            return 0;
        }
        if (!end) {
            t->body_stream = 1;
            c->body_streams++;
        }
    }
    if (end) {
        if (t->body_stream) {
            t->body_stream = 0;
            c->body_streams--;
        }
        pt_task_dispatch(t);
    }
    return 0;
}

static int on_frame_send(nghttp2_session *ss, const nghttp2_frame *f, void *ud)
{
    (void)ud;
    if ((f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) ||
        !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    pt_task *t = stream_task(ss, f->hd.stream_id);
    if (!t || !t->rejected || nghttp2_session_get_stream_remote_close(ss, f->hd.stream_id))
        return 0;
    /* The early answer is out. A modest rest of the upload is read and dropped, because
     * some clients (curl 7.x) report RST_STREAM(NO_ERROR) as a failure; anything bigger or
     * of unknown size is cut, as RFC 9113 8.1 allows. */
    uint64_t tolerated = (uint64_t)t->srv->opts.max_body + DISCARD_MAX;
    if (t->declared_len == UINT64_MAX || t->declared_len > tolerated)
        nghttp2_submit_rst_stream(ss, NGHTTP2_FLAG_NONE, f->hd.stream_id, NGHTTP2_NO_ERROR);
    return 0;
}

static int on_stream_close(nghttp2_session *ss, int32_t sid, uint32_t error_code, void *ud)
{
    (void)error_code;
    (void)ud;
    pt_task *t = stream_task(ss, sid);
    if (!t)
        return 0;
    nghttp2_session_set_stream_user_data(ss, sid, NULL);
    pt_task_free(t); /* a worker's answer or piece for it will be dropped */
    return 0;
}

int pt_http2_callbacks(nghttp2_session_callbacks **out)
{
    nghttp2_session_callbacks *cb;
    if (nghttp2_session_callbacks_new(&cb) != 0)
        return -1;
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_frame_send_callback(cb, on_frame_send);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    *out = cb;
    return 0;
}

/*
 * Whether the linked libnghttp2 ends a session that gets a flood of CONTINUATION frames
 * (CVE-2024-28182; nghttp2 1.61, and Debian 12's 1.52.0-1+deb12u2 and later, which also
 * carry the rapid-reset limits of CVE-2023-44487). The version number cannot tell a
 * patched distribution build from an old one, so a session in memory is asked: a preface,
 * an empty SETTINGS, a HEADERS frame without END_HEADERS and 64 empty CONTINUATION frames.
 */
int pt_http2_flood_guarded(void)
{
    static const uint8_t start[] = {
        'P', 'R', 'I', ' ', '*', ' ', 'H', 'T', 'T', 'P', '/', '2', '.', '0', '\r', '\n',
        '\r', '\n', 'S', 'M', '\r', '\n', '\r', '\n',
        0, 0, 0, NGHTTP2_SETTINGS, 0, 0, 0, 0, 0,            /* SETTINGS, empty */
        0, 0, 3, NGHTTP2_HEADERS, 0, 0, 0, 0, 1, 0x82, 0x86, 0x84, /* GET http / */
    };
    static const uint8_t cont[9] = {0, 0, 0, NGHTTP2_CONTINUATION, 0, 0, 0, 0, 1};
    uint8_t in[sizeof(start) + 64 * sizeof(cont)];
    memcpy(in, start, sizeof(start));
    for (size_t i = 0; i < 64; i++)
        memcpy(in + sizeof(start) + i * sizeof(cont), cont, sizeof(cont));
    nghttp2_session_callbacks *cb;
    nghttp2_session *ss;
    if (nghttp2_session_callbacks_new(&cb) != 0)
        return -1;
    int rv = nghttp2_session_server_new(&ss, cb, NULL);
    nghttp2_session_callbacks_del(cb);
    if (rv != 0)
        return -1;
    ssize_t n = nghttp2_session_mem_recv(ss, in, sizeof(in));
    nghttp2_session_del(ss);
    return n < 0;
}

/* ---------------------------------------------------------------------- protocol ops */

static int h2_start(pt_conn *c)
{
    pt_server *s = c->srv;
    if (nghttp2_session_server_new(&c->h2, s->h2cb, c) != 0) {
        c->h2 = NULL;
        return -1;
    }
    uint32_t hdr_max = s->opts.max_header_bytes > UINT32_MAX ? UINT32_MAX
                                                             : (uint32_t)s->opts.max_header_bytes;
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, MAX_CONCURRENT_STREAMS},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WINDOW},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, hdr_max},
    };
    if (nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, iv, sizeof(iv) / sizeof(iv[0])) != 0)
        return -1;
    /* A large connection window so uploads on many streams are not throttled by it. */
    if (nghttp2_session_set_local_window_size(c->h2, NGHTTP2_FLAG_NONE, 0, CONN_WINDOW) != 0)
        return -1;
    return 0;
}

static ssize_t h2_input(pt_conn *c, const uint8_t *p, size_t n)
{
    ssize_t rv = nghttp2_session_mem_recv(c->h2, p, n);
    if (rv < 0) {
        /* Fatal for the session (bad preface, flood, protocol error): nghttp2 has queued
         * a GOAWAY where it can; send it, then close. */
        pt_conn_advance(c, PT_CONN_CLOSE);
        return (ssize_t)n;
    }
    return rv;
}

static int h2_want_read(const pt_conn *c)
{
    return nghttp2_session_want_read(c->h2);
}

static int h2_produce(pt_conn *c)
{
    while (pt_buf_used(&c->out) < OUT_BATCH) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(c->h2, &data);
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        if (pt_conn_out_append(c, data, (size_t)n) < 0)
            return -1;
    }
    if (!nghttp2_session_want_read(c->h2) && !nghttp2_session_want_write(c->h2))
        pt_conn_advance(c, PT_CONN_CLOSE);
    return 0;
}

static void h2_complete(pt_conn *c, pt_task *t)
{
    if (submit(c, t) != 0)
        nghttp2_submit_rst_stream(c->h2, NGHTTP2_FLAG_NONE, t->stream_id,
                                  NGHTTP2_INTERNAL_ERROR);
    /* freed in on_stream_close once the response is out (or the stream is reset) */
}

static void h2_piece(pt_conn *c, pt_task *t)
{
    /* The status is out: a reset is how the client learns the body is incomplete. */
    if (t->pulled < 0)
        nghttp2_submit_rst_stream(c->h2, NGHTTP2_FLAG_NONE, t->stream_id,
                                  NGHTTP2_INTERNAL_ERROR);
    else
        nghttp2_session_resume_data(c->h2, t->stream_id);
}

static void h2_eof(pt_conn *c)
{
    pt_conn_close(c);
}

static void h2_shutdown(pt_conn *c)
{
    if (c->state >= PT_CONN_STOPPING)
        return;
    pt_conn_advance(c, PT_CONN_STOPPING);
    /* Streams already started are finished; the session ends when they are done. */
    nghttp2_submit_goaway(c->h2, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(c->h2),
                          NGHTTP2_NO_ERROR, NULL, 0);
}

static void h2_timeout(pt_conn *c, pt_task *t, int kind)
{
    if (!t || kind == PT_TIMEOUT_HEADER) {
        /* No request in time, a header block that never ends (a stream cannot be reset in
         * the middle of one), or output the client does not read: GOAWAY, then close. */
        if (t || c->state >= PT_CONN_CLOSE ||
            nghttp2_session_terminate_session(c->h2, NGHTTP2_NO_ERROR) != 0)
            pt_conn_close(c);
        return;
    }
    /* A body too slow, or an answer its client's window keeps shut: the stream ends and
     * what it held goes when nghttp2 closes it. */
    t->early_rv = PT_EREQTIMEOUT;
    t->touched_ms = c->srv->now_ms;
    if (nghttp2_submit_rst_stream(c->h2, NGHTTP2_FLAG_NONE, t->stream_id, NGHTTP2_CANCEL) != 0)
        pt_conn_close(c);
}

static void h2_free(pt_conn *c)
{
    /* Does not call on_stream_close; the server frees or detaches the tasks after this. */
    nghttp2_session_del(c->h2);
    c->h2 = NULL;
}

const pt_proto_ops pt_http2_ops = {
    .name = "h2",
    .start = h2_start,
    .input = h2_input,
    .want_read = h2_want_read,
    .produce = h2_produce,
    .complete = h2_complete,
    .piece = h2_piece,
    .eof = h2_eof,
    .hangup = NULL, /* the session reads until EOF, which closes the connection */
    .shutdown = h2_shutdown,
    .timeout = h2_timeout,
    .free = h2_free,
};
