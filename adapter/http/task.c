/*
 * A request and its response: the task that carries them from the parser through a worker
 * and back, the request fields handlers read, the body under its ceilings (max_body per
 * request, max_conn_body for one connection's bodies, max_body_total for all bodies in
 * memory at once), admission (max_inflight requests queued or running, else 503), the
 * cache that lets tasks be reused, and the two queues between the loop and the workers
 * (work, completions).
 */
#include <assert.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "clock.h"
#include "error.h"
#include "server_int.h"

#define ARENA_BLOCK (64 * 1024)
#define TASK_CACHE_MAX 64
#define BODY_KEEP (256 * 1024)        /* body buffers up to this size stay with cached tasks */

pt_task *pt_task_new(pt_conn *c, int proto)
{
    pt_server *s = c->srv;
    pt_task *t = s->cache;
    if (t) {
        s->cache = t->qnext;
        s->ncache--;
    } else {
        t = calloc(1, sizeof(*t));
        if (!t)
            return NULL;
        pt_arena_init(&t->arena, ARENA_BLOCK, 0);
    }
    t->arena.max = s->arena_max;
    t->srv = s;
    t->qnext = NULL;
    t->stream_id = 0;
    t->state = PT_TASK_RECV;
    atomic_store_explicit(&t->cancelled, 0, memory_order_relaxed);
    t->early_rv = 0;
    t->rejected = 0;
    t->admitted = 0;
    t->hdr_bytes = 0;
    t->declared_len = UINT64_MAX;
    t->start_ms = t->touched_ms = s->now_ms;
    t->headers_ms = 0;
    t->body_stream = 0;
    t->held = 0;
    pt_buf_reset(&t->body);
    t->body.max = s->opts.max_body;
    t->sent = 0;
    pt_buf_reset(&t->piece);
    t->piece.max = PT_PIECE_MAX;
    t->pulled = PT_PULL_MORE;
    t->prefetched = 0;
    t->producer_done = 0;
    memset(&t->req, 0, sizeof(t->req));
    t->req.method_name = "";
    t->req.path = "";
    t->req.query = "";
    t->req.content_type = "";
    t->req.content_encoding = "";
    t->req.authorization = "";
    t->req.user_agent = "";
    t->req.remote_write_version = "";
    t->req.tenant = "";
    t->req.body = (const uint8_t *)"";
    t->req.proto = proto;
    t->req.tls = c->ssl != NULL;
    t->req.arena = &t->arena;
    t->req.cancelled = &t->cancelled;
    memset(&t->resp, 0, sizeof(t->resp));
    t->resp.status = 200;

    t->conn = c;
    t->slot = c->slot;
    t->gen = c->gen;
    PT_LIST_PUSH(c->tasks, t);
    c->ntasks++;
    c->body_bytes += t->body.cap; /* a cached task keeps its buffer */
    return t;
}

int pt_task_in_worker(const pt_task *t)
{
    return t->state == PT_TASK_QUEUED || t->state == PT_TASK_PULL ||
           t->state == PT_TASK_CANCEL;
}

static void detach(pt_task *t)
{
    pt_conn *c = t->conn;
    if (!c)
        return;
    PT_LIST_UNLINK(c->tasks, t);
    t->conn = NULL;
    c->ntasks--;
    c->body_bytes -= t->body.cap;
    c->resp_held -= t->held;
    c->body_streams -= t->body_stream;
    t->body_stream = 0;
}

/* Takes t's answer off the answers held (server and connection). */
static void unhold(pt_task *t)
{
    t->srv->resp_held -= t->held;
    if (t->conn)
        t->conn->resp_held -= t->held;
    atomic_fetch_sub_explicit(&t->srv->stats->response_bytes, (int64_t)t->held, memory_order_relaxed);
    t->held = 0;
}

void pt_task_hold(pt_task *t)
{
    size_t now = t->arena.used_total;
    ptrdiff_t delta = (ptrdiff_t)now - (ptrdiff_t)t->held;
    t->srv->resp_held += (size_t)delta;
    if (t->conn)
        t->conn->resp_held += (size_t)delta;
    atomic_fetch_add_explicit(&t->srv->stats->response_bytes, delta, memory_order_relaxed);
    t->held = now;
}

/* Puts t on the workers' queue (loop thread). */
static void enqueue(pt_server *s, pt_task *t)
{
    t->qnext = NULL;
    s->inflight++;
    pthread_mutex_lock(&s->wmu);
    if (s->wtail)
        s->wtail->qnext = t;
    else
        s->whead = t;
    s->wtail = t;
    pthread_mutex_unlock(&s->wmu);
    /* Signalled after the unlock: a worker woken on this core would otherwise find wmu
     * still held and sleep again until the loop lets go of it. */
    pthread_cond_signal(&s->wcv);
}

static void producer_finish(pt_task *t, int cancelled)
{
    pt_producer *p = &t->resp.producer;
    if (p->done)
        p->done(p->ud, cancelled);
    t->producer_done = 1;
}

/* The server's body memory changed by delta (a gauge on /metrics too). */
static void body_account(pt_server *s, pt_task *t, ptrdiff_t delta)
{
    s->body_bytes += (size_t)delta;
    if (t->conn)
        t->conn->body_bytes += (size_t)delta;
    atomic_fetch_add_explicit(&s->stats->body_bytes, delta, memory_order_relaxed);
}

/* Frees a task's body buffer and takes it off the server's body memory. */
static void body_release(pt_task *t)
{
    body_account(t->srv, t, -(ptrdiff_t)t->body.cap);
    pt_buf_free(&t->body);
}

/* Cached tasks keep their body buffers for reuse, and those count against max_body_total
 * like any other: a live body that needs the room takes it back from them. Otherwise a
 * refused upload's buffer, cached, could starve a body already half received. */
static void cache_drop_bodies(pt_server *s)
{
    for (pt_task *t = s->cache; t; t = t->qnext)
        if (t->body.cap)
            body_release(t);
}

void pt_task_cache_free(pt_server *s)
{
    while (s->cache) {
        pt_task *t = s->cache;
        s->cache = t->qnext;
        pt_arena_free(&t->arena);
        body_release(t);
        pt_buf_free(&t->piece);
        free(t);
    }
}

void pt_task_free(pt_task *t)
{
    pt_server *s = t->srv;
    detach(t);
    unhold(t);
    if (pt_task_in_worker(t)) {
        /* A request whose client is gone is not worth running (a client that did not get
         * its answer retries); the worker posts it back and it is freed then. */
        atomic_store_explicit(&t->cancelled, 1, memory_order_relaxed);
        return;
    }
    if (t->resp.producer.pull && !t->producer_done) {
        if (!s->wstop) {
            /* done() may block like pull: a worker calls it, then the task comes back. */
            t->state = PT_TASK_CANCEL;
            enqueue(s, t);
            return;
        }
        producer_finish(t, 1); /* the workers have exited: teardown */
    }
    pt_arena_reset(&t->arena);
    if (t->body.cap > BODY_KEEP)
        body_release(t);
    if (s->ncache < TASK_CACHE_MAX) {
        t->qnext = s->cache;
        s->cache = t;
        s->ncache++;
        return;
    }
    pt_arena_free(&t->arena);
    body_release(t);
    pt_buf_free(&t->piece);
    free(t);
}

/* Hands t back to the loop (any thread). */
static void post(pt_server *s, pt_task *t)
{
    int wake;
    pthread_mutex_lock(&s->cmu);
    t->qnext = NULL;
    if (s->ctail)
        s->ctail->qnext = t;
    else
        s->chead = t;
    s->ctail = t;
    /* One eventfd write per batch: the loop clears the flag when it takes the list. */
    wake = !s->csignaled;
    s->csignaled = 1;
    pthread_mutex_unlock(&s->cmu);
    if (wake) {
        uint64_t one = 1;
        ssize_t r = write(s->wake_fd, &one, sizeof(one));
        (void)r; /* EAGAIN only when the counter is already huge: the loop will wake */
    }
}

static void fix_resp(pt_resp *r)
{
    if (r->status < 100 || r->status > 999)
        r->status = pt_error_http_status(PT_EINTERNAL); /* a handler's bug */
    if (r->nheaders < 0)
        r->nheaders = 0;
    if (r->nheaders > PT_MAX_RESP_HEADERS)
        r->nheaders = PT_MAX_RESP_HEADERS;
    if (!r->body || r->producer.pull)
        r->body_len = 0;
}

/* Runs the producer's pull for the next piece into t->piece (a worker). */
static void pull_piece(pt_task *t, int cancelled)
{
    pt_producer *p = &t->resp.producer;
    t->pulled = cancelled ? PT_EINTERNAL : p->pull(p->ud, &t->piece, PT_PIECE_MAX);
    if (t->pulled > PT_PULL_END)
        t->pulled = PT_EINTERNAL;
    if (t->pulled != PT_PULL_MORE)
        producer_finish(t, t->pulled != PT_PULL_END);
}

void pt_task_work(pt_task *t)
{
    pt_server *s = t->srv;
    int cancelled = atomic_load_explicit(&t->cancelled, memory_order_relaxed);
    switch (t->state) {
    case PT_TASK_QUEUED:
        if (!cancelled) {
            s->fn(s->ud, &t->req, &t->resp);
            fix_resp(&t->resp);
            /* A produced body's first piece, on this worker at once: a small answer then
             * costs one trip to a worker and back, not two. The loop finds it as if
             * pulled (t->prefetched). */
            if (t->resp.producer.pull && t->req.method != PT_M_HEAD &&
                pt_status_has_body(t->resp.status)) {
                pull_piece(t, 0);
                t->prefetched = 1;
            }
        }
        break;
    case PT_TASK_PULL:
        pull_piece(t, cancelled);
        break;
    case PT_TASK_CANCEL:
        producer_finish(t, 1);
        break;
    }
    post(s, t);
}

void pt_task_pull(pt_task *t)
{
    assert(t->state == PT_TASK_SEND && !t->producer_done && !pt_buf_used(&t->piece));
    pt_buf_reset(&t->piece);
    t->state = PT_TASK_PULL;
    enqueue(t->srv, t);
}

void pt_task_retry_after(const pt_server *s, pt_resp *r)
{
    if (r->status == 503 && r->nheaders < PT_MAX_RESP_HEADERS)
        r->headers[r->nheaders++] = (pt_resp_header){"Retry-After", s->retry_after};
}

void pt_task_returned(pt_task *t)
{
    if (!t->admitted)
        return;
    t->admitted = 0;
    t->srv->requests--;
    atomic_fetch_sub_explicit(&t->srv->stats->inflight, 1, memory_order_relaxed);
}

void pt_task_error_resp(pt_task *t, int rv, const char *text)
{
    pt_resp *r = &t->resp;
    r->status = pt_error_http_status(rv);
    r->content_type = "text/plain; charset=utf-8";
    r->content_encoding = NULL;
    r->nheaders = 0;
    r->body = (const uint8_t *)(text ? text : pt_task_status_text(rv));
    r->body_len = strlen((const char *)r->body);
    r->producer = (pt_producer){0};
    pt_task_retry_after(t->srv, r);
}

int pt_task_refuse(pt_task *t, int reason, const char *text)
{
    atomic_fetch_add_explicit(&t->srv->stats->overload_rejected[reason], 1, memory_order_relaxed);
    pt_task_error_resp(t, PT_EBUSY, text);
    return PT_EBUSY;
}

/* Refuses a complete request for overload without running it: a 503 with Retry-After
 * that goes out through the completion queue like an answer, so the connection (HTTP/1.1
 * keep-alive, the other HTTP/2 streams) carries on. Nothing of it was acknowledged. */
static void refuse(pt_server *s, pt_task *t)
{
    pt_task_refuse(t, PT_OVERLOAD_INFLIGHT,
                   "server busy: web.max_inflight_requests requests are queued or running; "
                   "retry\n");
    s->inflight++;
    post(s, t);
}

void pt_task_dispatch(pt_task *t)
{
    pt_server *s = t->srv;
    t->state = PT_TASK_QUEUED;
    t->req.body = t->body.p ? pt_buf_data(&t->body) : (const uint8_t *)"";
    t->req.body_len = pt_buf_used(&t->body);
    t->req.received_ns = pt_now_ns();
    t->heavy = s->opts.heavy && s->opts.heavy(s->ud, &t->req);
    if (s->on_loop && s->on_loop(s->ud, &t->req)) {
        /* Answered here; the response goes out through the completion queue like a
         * worker's, never from inside the parser callback that got us here. */
        s->inflight++;
        pt_task_work(t);
        return;
    }
    if (s->requests >= s->opts.max_inflight) {
        refuse(s, t);
        return;
    }
    t->admitted = 1;
    s->requests++;
    atomic_fetch_add_explicit(&t->srv->stats->inflight, 1, memory_order_relaxed);
    enqueue(s, t);
}

static const struct {
    const char *name;
    size_t len;
    size_t off;
} kept_headers[] = {
    {"content-type", 12, offsetof(pt_req, content_type)},
    {"content-encoding", 16, offsetof(pt_req, content_encoding)},
    {"authorization", 13, offsetof(pt_req, authorization)},
    {"user-agent", 10, offsetof(pt_req, user_agent)},
    {"x-prometheus-remote-write-version", 33, offsetof(pt_req, remote_write_version)},
};

/* A header value without its leading and trailing blanks, into the task's arena. */
static char *header_value(pt_task *t, const char *val, size_t vlen)
{
    while (vlen && (val[0] == ' ' || val[0] == '\t')) {
        val++;
        vlen--;
    }
    while (vlen && (val[vlen - 1] == ' ' || val[vlen - 1] == '\t'))
        vlen--;
    return pt_arena_strndup(&t->arena, val, vlen);
}

int pt_task_req_header(pt_task *t, const char *name, size_t nlen, const char *val,
                         size_t vlen)
{
    const char *th = t->srv->opts.tenant_header;
    if (th && strlen(th) == nlen && strncasecmp(name, th, nlen) == 0) {
        char *v = header_value(t, val, vlen);
        if (!v)
            return PT_ENOMEM;
        t->req.tenant = v;
        t->req.tenant_headers++;
        return 1;
    }
    for (size_t i = 0; i < sizeof(kept_headers) / sizeof(kept_headers[0]); i++) {
        if (nlen != kept_headers[i].len || strncasecmp(name, kept_headers[i].name, nlen) != 0)
            continue;
        char *v = header_value(t, val, vlen);
        if (!v)
            return PT_ENOMEM;
        const char **field = (const char **)(void *)((char *)&t->req + kept_headers[i].off);
        *field = v;
        return 1;
    }
    return 0;
}

int pt_task_req_target(pt_task *t, const char *u, size_t n)
{
    const char *end = u + n;
    /* absolute-form (a proxy-style request line): keep what follows the authority */
    if (n && u[0] != '/' && u[0] != '*') {
        const char *sch = memmem(u, n, "://", 3);
        if (sch) {
            const char *p = sch + 3;
            while (p < end && *p != '/' && *p != '?')
                p++;
            u = p;
            n = (size_t)(end - p);
        }
    }
    const char *q = memchr(u, '?', n);
    size_t plen = q ? (size_t)(q - u) : n;
    char *path = plen ? pt_arena_strndup(&t->arena, u, plen) : pt_arena_strndup(&t->arena, "/", 1);
    if (!path)
        return PT_ENOMEM;
    t->req.path = path;
    if (q) {
        char *query = pt_arena_strndup(&t->arena, q + 1, (size_t)(end - q - 1));
        if (!query)
            return PT_ENOMEM;
        t->req.query = query;
    }
    return 0;
}

int pt_task_method(const char *m, size_t n)
{
    static const struct {
        const char *name;
        size_t len;
        int method;
    } methods[] = {{"GET", 3, PT_M_GET},   {"POST", 4, PT_M_POST}, {"HEAD", 4, PT_M_HEAD},
                   {"PUT", 3, PT_M_PUT},   {"DELETE", 6, PT_M_DELETE}};
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
        if (n == methods[i].len && memcmp(m, methods[i].name, n) == 0)
            return methods[i].method;
    return PT_M_OTHER; /* method names are case-sensitive */
}

const char *pt_task_status_text(int rv)
{
    switch (rv) {
    case PT_ETOOLARGE: return "request body too large\n";
    case PT_EHEADERS: return "request header fields too large\n";
    case PT_EVERSION: return "HTTP version not supported\n";
    case PT_EREQTIMEOUT: return "request timeout: its headers or body did not arrive in time "
                                "(web.header_timeout, web.body_timeout)\n";
    case PT_EBUSY: return "server busy: request bodies in memory are at web.max_body_memory "
                          "or web.max_connection_body_memory; retry\n";
    case PT_ENOMEM: return "out of memory\n";
    }
    /* By class, so the text never contradicts the status pt_error_http_status() gives. */
    if (PT_IS_BAD_INPUT(rv))
        return "bad request\n";
    if (PT_IS_RETRYABLE(rv))
        return "temporarily unavailable; retry\n";
    return "internal error\n";
}

/* Room for n more body bytes within max_body, within the ceiling on the connection's bodies
 * (HTTP/2 streams each sending up to max_body) and within the ceiling on all bodies
 * together (many connections must not take the process' memory): 0, PT_ETOOLARGE past
 * max_body, PT_EBUSY past max_conn_body or max_body_total (the client retries; *limit
 * says which), PT_ENOMEM. */
static int body_reserve(pt_task *t, size_t n, int *limit)
{
    pt_server *s = t->srv;
    pt_buf *b = &t->body;
    if (n > s->opts.max_body - pt_buf_used(b))
        return PT_ETOOLARGE;
    size_t cap = b->cap;
    if (b->len + n > s->opts.max_body_total - (s->body_bytes - cap))
        cache_drop_bodies(s);
    /* body_bytes never passes max_body_total and includes this buffer: room >= cap. A
     * connection's may (buffers cached tasks bring along), hence the check. */
    size_t room = s->opts.max_body_total - (s->body_bytes - cap);
    *limit = PT_OVERLOAD_BODY;
    if (t->conn) {
        size_t others = t->conn->body_bytes - cap;
        size_t conn_room = others < s->opts.max_conn_body ? s->opts.max_conn_body - others : 0;
        if (conn_room < room) {
            room = conn_room;
            *limit = PT_OVERLOAD_CONN_BODY;
        }
    }
    if (room == 0)
        return n ? PT_EBUSY : 0; /* a ceiling of 0 would mean none */
    /* The buffer's own ceiling, lowered for this growth to what other bodies leave. */
    b->max = room < s->opts.max_body ? room : s->opts.max_body;
    int rv = pt_buf_reserve(b, n);
    b->max = s->opts.max_body;
    body_account(s, t, (ptrdiff_t)(b->cap - cap));
    return rv == PT_ETOOLARGE ? PT_EBUSY : rv;
}

int pt_task_body_append(pt_task *t, const uint8_t *p, size_t n)
{
    int limit;
    int rv = body_reserve(t, n, &limit);
    t->touched_ms = t->srv->now_ms;
    if (rv == PT_EBUSY)
        atomic_fetch_add_explicit(&t->srv->stats->overload_rejected[limit], 1, memory_order_relaxed);
    if (rv != 0)
        return rv;
    memcpy(t->body.p + t->body.len, p, n);
    pt_buf_commit(&t->body, n);
    return 0;
}

int pt_task_admit(pt_task *t, int has_body)
{
    pt_server *s = t->srv;
    pt_conn *c = t->conn;
    t->headers_ms = t->touched_ms = s->now_ms;
    c->requests++;
    int light = s->on_loop && s->on_loop(s->ud, &t->req);
    if (c->reserved && !light)
        return pt_task_refuse(t, PT_OVERLOAD_CONNECTIONS,
                            "server busy: web.max_connections connections are open; this "
                            "connection serves health checks and metrics only; retry\n");
    if (!light && c->resp_held > s->opts.max_conn_resp)
        return pt_task_refuse(t, PT_OVERLOAD_CONN_RESP,
                            "server busy: this connection's answers not yet read are past "
                            "web.max_connection_response_memory; retry\n");
    if (!light && s->resp_held > s->opts.max_resp_total)
        return pt_task_refuse(t, PT_OVERLOAD_RESP,
                            "server busy: answers not yet read are past "
                            "web.max_response_memory; retry\n");
    if (!has_body || !s->opts.admit)
        return 0;
    pt_resp *r = &t->resp;
    int rv = s->opts.admit(s->ud, &t->req, r);
    if (rv == 0)
        return 0;
    fix_resp(r);
    if (r->status < 300) /* a refusal that forgot its status */
        r->status = pt_error_http_status(PT_EBADREQ);
    r->producer = (pt_producer){0};
    return rv < 0 ? rv : PT_EBADREQ;
}

int pt_task_header_ok(const char *name, const char *value)
{
    static const char *const framing[] = {"content-length", "connection", "transfer-encoding",
                                          "keep-alive", "upgrade", "proxy-connection", "te"};
    if (!name || !value || !name[0])
        return 0;
    for (const char *p = name; *p; p++)
        if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f || *p == ':')
            return 0;
    for (const char *p = value; *p; p++)
        if (*p == '\r' || *p == '\n')
            return 0;
    /* The server frames responses itself; a handler cannot override it. */
    for (size_t i = 0; i < sizeof(framing) / sizeof(framing[0]); i++)
        if (strcasecmp(name, framing[i]) == 0)
            return 0;
    return 1;
}
