/*
 * A socketless HTTP server for the protocol tests: a connection with no socket (fd -1), its
 * protocol fed through the pt_proto_ops table the way the connection layer feeds it, the
 * output taken from the connection's buffer, and the workers' queue run by hand, so every
 * step (a request waiting in a worker, a piece being pulled) can be observed in between.
 * HTTP/2 frames come from an nghttp2 client session in memory. A test includes this once;
 * not every test uses every helper.
 */
#ifndef PT_HTTP_HARNESS_H
#define PT_HTTP_HARNESS_H

#pragma GCC diagnostic ignored "-Wunused-function"
#include "server.c"

#include "metrics.h"

#include "tap.h"

/* ------------------------------------------------------------------------- the handler */

static struct {
    int calls;
    size_t last_body_len;
    uint64_t last_body_sum;
    int cancelled; /* *req->cancelled as the last handler call found it */
    char encoding[32], tenant[32]; /* its Content-Encoding and tenant header */
} seen;

static uint64_t sum_bytes(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a: a different order gives another sum */
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* /stream?n=N[&fail=K][&chunk=C]: N bytes of a pattern, produced piece by piece (at most
 * C bytes a piece with chunk); the K-th pull fails. */
static const char pattern[] = "promtable stream\n";

static struct {
    int pulls, dones, cancelled, busy, overlap;
} prod;

typedef struct gen {
    size_t left, pos, chunk;
    int fail_at, npull;
} gen;

static int gen_pull(void *ud, pt_buf *out, size_t want)
{
    gen *g = ud;
    if (prod.busy++)
        prod.overlap++;
    prod.pulls++;
    int rv = PT_PULL_MORE;
    if (g->chunk && want > g->chunk)
        want = g->chunk;
    if (++g->npull == g->fail_at) {
        rv = PT_EUNAVAIL;
    } else {
        size_t n = g->left < want ? g->left : want;
        for (size_t i = 0; i < n; i++, g->pos++)
            if (pt_buf_append(out, &pattern[g->pos % (sizeof(pattern) - 1)], 1) != 0)
                rv = PT_EINTERNAL;
        g->left -= n;
        if (!g->left && rv == PT_PULL_MORE)
            rv = PT_PULL_END;
    }
    prod.busy--;
    return rv;
}

static void gen_done(void *ud, int cancelled)
{
    (void)ud;
    prod.dones++;
    prod.cancelled += cancelled;
}

/* Whether p holds the pattern's bytes from offset off on. */
static int is_pattern(const uint8_t *p, size_t n, size_t off)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (uint8_t)pattern[(off + i) % (sizeof(pattern) - 1)])
            return 0;
    return 1;
}

static void handler(void *ud, pt_req *req, pt_resp *resp)
{
    (void)ud;
    seen.calls++;
    seen.last_body_len = req->body_len;
    seen.last_body_sum = sum_bytes(req->body, req->body_len);
    seen.cancelled = atomic_load(req->cancelled);
    snprintf(seen.encoding, sizeof(seen.encoding), "%s", req->content_encoding);
    snprintf(seen.tenant, sizeof(seen.tenant), "%s", req->tenant);
    resp->content_type = "text/plain";
    if (strcmp(req->path, "/stream") == 0) {
        gen *g = pt_arena_alloc(req->arena, sizeof(*g));
        memset(g, 0, sizeof(*g));
        const char *f = strstr(req->query, "fail="), *k = strstr(req->query, "chunk=");
        g->left = strtoul(req->query + 2, NULL, 10);
        g->fail_at = f ? atoi(f + 5) : 0;
        g->chunk = k ? strtoul(k + 6, NULL, 10) : 0;
        resp->producer = (pt_producer){gen_pull, gen_done, g};
        return;
    }
    if (strcmp(req->path, "/echo") == 0) {
        resp->body = req->body;
        resp->body_len = req->body_len;
        return;
    }
    /* Anything else answers its own path, so answers can be told apart. */
    resp->body = (const uint8_t *)req->path;
    resp->body_len = strlen(req->path);
}

/* ------------------------------------------------------------------ a socketless loop */

static pt_server *server(size_t max_body, size_t max_header)
{
    char err[256];
    pt_server_opts o = {.listen_address = "unused", .workers = 1, .max_body = max_body,
                        .max_header_bytes = max_header, .max_connections = 16};
    pt_server *s = server_alloc(&o, handler, NULL, err, sizeof(err));
    if (!s)
        diag("server_alloc: %s", err);
    return s;
}

static int queued(const pt_server *s)
{
    int n = 0;
    for (const pt_task *t = s->whead; t; t = t->qnext)
        n++;
    return n;
}

/* The loop's side of the completions posted so far (without driving the connections: pump()
 * does that). The number of completions. */
static int completions(pt_server *s)
{
    pt_task *t = s->chead;
    s->chead = s->ctail = NULL;
    s->csignaled = 0;
    int n = 0;
    for (; t; n++) {
        pt_task *next = t->qnext;
        complete_one(s, t);
        t = next;
    }
    while (s->dirty_list) {
        s->dirty_list->dirty = 0;
        s->dirty_list = s->dirty_list->dnext;
    }
    return n;
}

/* Plays the workers for what is queued now, then completions(). */
static int work(pt_server *s)
{
    run_queue(s);
    return completions(s);
}

/* Moves the connection's output to out, as a socket that takes everything would. */
static void take_output(pt_conn *c, pt_buf *out)
{
    if (pt_buf_used(&c->out))
        pt_buf_append(out, pt_buf_data(&c->out), pt_buf_used(&c->out));
    if (c->out_body_len)
        pt_buf_append(out, c->out_body, c->out_body_len);
    pt_buf_reset(&c->out);
    c->out_body = NULL;
    c->out_body_len = 0;
}

/*
 * What pt_conn_drive does, with byte arrays for a socket: output first (produce when it is
 * empty), then input while the protocol wants it. With run_workers the queue is played
 * too, until nothing moves. Stops when the connection is to close.
 */
static void pump(pt_conn *c, pt_buf *out, int run_workers)
{
    for (int round = 0; round < 100000 && c->state != PT_CONN_CLOSED; round++) {
        int moved = 0;
        if (c->ops->produce(c) < 0) {
            pt_conn_close(c);
            break;
        }
        if (!pt_conn_out_empty(c)) {
            take_output(c, out);
            moved = 1;
        }
        if (c->state == PT_CONN_CLOSE || c->state == PT_CONN_LINGER)
            break;
        if (pt_buf_used(&c->in) && c->ops->want_read(c)) {
            const pt_proto_ops *before = c->ops;
            ssize_t n = c->ops->input(c, pt_buf_data(&c->in), pt_buf_used(&c->in));
            if (n < 0) {
                pt_conn_close(c);
                break;
            }
            pt_buf_consume(&c->in, (size_t)n);
            moved |= n > 0 || c->ops != before;
        }
        if (run_workers)
            moved |= work(c->srv) > 0;
        if (!moved)
            break;
    }
}

static pt_conn *conn(pt_server *s)
{
    pt_conn *c = pt_conn_new(s, -1);
    if (!c)
        diag("pt_conn_new failed");
    return c;
}

static void put(pt_conn *c, const void *p, size_t n)
{
    if (pt_buf_append(&c->in, p, n) != 0)
        diag("input past the connection's ceiling: the test feeds too much at once");
}

static void put_str(pt_conn *c, const char *p)
{
    put(c, p, strlen(p));
}

/* NUL-terminated copy of what was written, for string checks. */
static const char *text(pt_buf *out)
{
    if (pt_buf_reserve(out, 1) != 0)
        return "";
    out->p[out->len] = '\0';
    return (const char *)pt_buf_data(out);
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

/* Closes and frees the connection the way the loop does, then the server. */
static void teardown(pt_server *s, pt_buf *out)
{
    for (pt_conn *c = s->conns; c; c = c->next)
        pt_conn_close(c);
    process_close_list(s);
    work(s);
    pt_server_free(s);
    pt_buf_free(out);
}

typedef void h1_test_fn(pt_server *s, pt_buf *out);

/* Runs test on s with a buffer for the output it takes, then frees both. A server that does
 * not open fails a test instead. */
static void h1_run(pt_server *s, h1_test_fn *test)
{
    pt_buf out = PT_BUF_INIT(0);
    if (!s) {
        ok(0, "the server for a test opens");
        return;
    }
    test(s, &out);
    teardown(s, &out);
}

/* ----------------------------------------------------------------------------- HTTP/2 */

#define MAX_STREAMS 128

typedef struct h2client {
    nghttp2_session *ss;
    int status[MAX_STREAMS];      /* by stream id / 2 */
    int retry_after[MAX_STREAMS]; /* its value, 0 when none */
    int closed[MAX_STREAMS];
    uint32_t close_error[MAX_STREAMS];
    pt_buf data[MAX_STREAMS];
    int window_updates, goaways, rsts;
    uint32_t goaway_error;
    const uint8_t *upload;        /* the request body the data provider reads */
    size_t upload_len, upload_off;
} h2client;

static int slot_of(int32_t sid)
{
    return sid > 0 && sid / 2 < MAX_STREAMS ? sid / 2 : 0;
}

static int cl_header(nghttp2_session *ss, const nghttp2_frame *f, const uint8_t *name,
                     size_t nlen, const uint8_t *value, size_t vlen, uint8_t flags, void *ud)
{
    (void)ss, (void)flags;
    h2client *cl = ud;
    if (nlen == 7 && memcmp(name, ":status", 7) == 0)
        cl->status[slot_of(f->hd.stream_id)] = atoi((const char *)value) + 0 * (int)vlen;
    if (nlen == 11 && memcmp(name, "retry-after", 11) == 0)
        cl->retry_after[slot_of(f->hd.stream_id)] = atoi((const char *)value);
    return 0;
}

static int cl_data(nghttp2_session *ss, uint8_t flags, int32_t sid, const uint8_t *d, size_t n,
                   void *ud)
{
    (void)ss, (void)flags;
    h2client *cl = ud;
    pt_buf_append(&cl->data[slot_of(sid)], d, n);
    return 0;
}

static int cl_frame(nghttp2_session *ss, const nghttp2_frame *f, void *ud)
{
    (void)ss;
    h2client *cl = ud;
    if (f->hd.type == NGHTTP2_WINDOW_UPDATE)
        cl->window_updates++;
    if (f->hd.type == NGHTTP2_RST_STREAM)
        cl->rsts++;
    if (f->hd.type == NGHTTP2_GOAWAY) {
        cl->goaways++;
        cl->goaway_error = f->goaway.error_code;
    }
    return 0;
}

static int cl_close(nghttp2_session *ss, int32_t sid, uint32_t error, void *ud)
{
    (void)ss;
    h2client *cl = ud;
    cl->closed[slot_of(sid)] = 1;
    cl->close_error[slot_of(sid)] = error;
    return 0;
}

static ssize_t cl_upload(nghttp2_session *ss, int32_t sid, uint8_t *buf, size_t len,
                         uint32_t *flags, nghttp2_data_source *src, void *ud)
{
    (void)ss, (void)sid, (void)src;
    h2client *cl = ud;
    size_t n = cl->upload_len - cl->upload_off;
    n = n < len ? n : len;
    memcpy(buf, cl->upload + cl->upload_off, n);
    cl->upload_off += n;
    if (cl->upload_off == cl->upload_len)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

/* A client session; window > 0 sets its initial stream window and turns off its automatic
 * WINDOW_UPDATEs (the test then grants window itself). */
static int client_new(h2client *cl, int32_t window)
{
    memset(cl, 0, sizeof(*cl));
    nghttp2_session_callbacks *cb;
    nghttp2_option *opt;
    if (nghttp2_session_callbacks_new(&cb) != 0 || nghttp2_option_new(&opt) != 0)
        return -1;
    nghttp2_session_callbacks_set_on_header_callback(cb, cl_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, cl_data);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, cl_frame);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, cl_close);
    if (window > 0)
        nghttp2_option_set_no_auto_window_update(opt, 1);
    int rv = nghttp2_session_client_new2(&cl->ss, cb, cl, opt);
    nghttp2_session_callbacks_del(cb);
    nghttp2_option_del(opt);
    if (rv != 0)
        return -1;
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, (uint32_t)window}};
    return nghttp2_submit_settings(cl->ss, NGHTTP2_FLAG_NONE, iv, window > 0 ? 1 : 0);
}

static void client_free(h2client *cl)
{
    nghttp2_session_del(cl->ss);
    for (int i = 0; i < MAX_STREAMS; i++)
        pt_buf_free(&cl->data[i]);
}

/* A new client and a connection for it to talk to; NULL on failure. */
static pt_conn *h2_open(pt_server *s, h2client *cl, int32_t window)
{
    if (!s || client_new(cl, window) != 0)
        return NULL;
    return conn(s);
}

/* A test over one HTTP/2 connection: s the server, cl the client, c its connection, out the
 * buffer the server's output lands in. */
typedef void h2_test_fn(pt_server *s, h2client *cl, pt_conn *c, pt_buf *out);

/* Runs test over a new connection to s from a client with the given window (as client_new),
 * then frees the client and the server. A server or connection that does not open fails a
 * test instead. */
static void h2_run(pt_server *s, int32_t window, h2_test_fn *test)
{
    pt_buf out = PT_BUF_INIT(0);
    h2client cl;
    if (!s) {
        ok(0, "the server for an HTTP/2 test opens");
        return;
    }
    pt_conn *c = h2_open(s, &cl, window);
    if (c)
        test(s, &cl, c, &out);
    else
        ok(0, "an HTTP/2 client and its connection open");
    client_free(&cl);
    teardown(s, &out);
}

static int32_t request(h2client *cl, const char *method, const char *path, const void *body,
                       size_t len)
{
    nghttp2_nv nv[] = {
        {(uint8_t *)":method", (uint8_t *)(uintptr_t)method, 7, strlen(method), 0},
        {(uint8_t *)":path", (uint8_t *)(uintptr_t)path, 5, strlen(path), 0},
        {(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0},
        {(uint8_t *)":authority", (uint8_t *)"a", 10, 1, 0},
    };
    cl->upload = body;
    cl->upload_len = len;
    cl->upload_off = 0;
    nghttp2_data_provider dp = {.read_callback = cl_upload};
    return nghttp2_submit_request(cl->ss, NULL, nv, 4, body ? &dp : NULL, NULL);
}

/* Client frames to the server, a piece at a time as reads would hand them over; the
 * bytes sent. */
static size_t client_send(h2client *cl, pt_conn *c, pt_buf *out, int run_workers)
{
    const uint8_t *d;
    ssize_t n;
    size_t sent = 0;
    while ((n = nghttp2_session_mem_send(cl->ss, &d)) > 0) {
        put(c, d, (size_t)n);
        pump(c, out, run_workers);
        sent += (size_t)n;
    }
    return sent;
}

/* Client and server talk until neither has anything to say. */
static void exchange(h2client *cl, pt_conn *c, pt_buf *out, int run_workers)
{
    for (int i = 0; i < 10000; i++) {
        size_t sent = client_send(cl, c, out, run_workers);
        pump(c, out, run_workers);
        size_t got = pt_buf_used(out);
        if (got && nghttp2_session_mem_recv(cl->ss, pt_buf_data(out), got) < 0)
            diag("client: server sent a bad frame");
        pt_buf_reset(out);
        if (!sent && !got)
            break;
    }
}

#endif
