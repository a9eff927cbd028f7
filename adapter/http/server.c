/*
 * The HTTP server: listener, one epoll loop thread that owns every connection, a pool of
 * workers that run the dispatch callback, and a completion queue back to the loop.
 *
 * Connections are edge-triggered and registered once (in, out, rdhup); the loop remembers
 * "readable and not drained" per connection, so pausing a connection (HTTP/1 request in a
 * worker, output the peer is not reading) costs no epoll_ctl. A worker's completion names
 * its connection by slot and generation: a connection closed meanwhile has a new generation
 * (and has detached the task), so the completion is dropped instead of touching freed
 * memory.
 */
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "error.h"
#include "metrics.h"
#include "server_int.h"

#define RBUF_CAP (128 * 1024)         /* shared read buffer of the loop */
#define IN_APPEND_MAX (64 * 1024)     /* bytes kept while the protocol is undecided */
#define OUT_MAX (4 * 1024 * 1024)     /* output buffer ceiling (headers, HTTP/2 frames) */
#define ARENA_BLOCK (64 * 1024)
#define TASK_CACHE_MAX 64
#define BODY_KEEP (256 * 1024)        /* body buffers up to this size stay with cached tasks */
#define BODY_RESERVE_MAX (4u << 20)   /* a declared length pre-sizes the body up to this */
#define STOP_GRACE_MS 10000
#define LINGER_MS 3000
#define LINGER_MAX (64u << 20)
#define HANDSHAKE_MS 10000
#define SWEEP_MS 1000
#define ACCEPT_PAUSE_MS 100
#define NO_SLOT UINT32_MAX

#define DEFAULT_MAX_BODY (32u << 20)
#define DEFAULT_MAX_BODY_TOTAL ((size_t)1 << 30)
#define DEFAULT_MAX_HEADER (64u << 10)
#define DEFAULT_MAX_CONNS 65536

/*
 * An epoll event names a connection by slot and generation, never by pointer: close()
 * removes an fd from the epoll set only when the last reference to its open file goes
 * (another thread inside a syscall on that fd, a fork, a /proc reader can hold one for a
 * moment), so an event may still arrive for a connection already freed. Such an event
 * finds a slot with a newer generation and is dropped. The listener and the wakeup fd use
 * slots no connection can have.
 */
#define TAG_LISTEN UINT64_MAX
#define TAG_WAKE (UINT64_MAX - 1)

static uint64_t conn_tag(uint32_t slot, uint32_t gen)
{
    return (uint64_t)gen << 32 | slot;
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Recomputed once a second; every response carries it. */
static void update_date(pt_server *s)
{
    static const char days[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    if (ts.tv_sec == s->date_sec && s->date_len)
        return;
    s->date_sec = ts.tv_sec;
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(s->date_line, sizeof(s->date_line),
                     "Date: %s, %02d %s %04d %02d:%02d:%02d GMT\r\n", days[tm.tm_wday % 7],
                     tm.tm_mday, months[tm.tm_mon % 12], tm.tm_year + 1900, tm.tm_hour,
                     tm.tm_min, tm.tm_sec);
    s->date_len = n > 0 && (size_t)n < sizeof(s->date_line) ? (size_t)n : 0;
}

/* ------------------------------------------------------------------------------ tasks */

pt_task *pt_server_task_new(pt_conn *c, int proto)
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
    t->early_status = 0;
    t->rejected = 0;
    t->hdr_bytes = 0;
    t->declared_len = UINT64_MAX;
    t->body_len = 0;
    t->sent = 0;
    memset(&t->req, 0, sizeof(t->req));
    t->req.method_name = "";
    t->req.path = "";
    t->req.query = "";
    t->req.content_type = "";
    t->req.content_encoding = "";
    t->req.authorization = "";
    t->req.user_agent = "";
    t->req.remote_write_version = "";
    t->req.body = (const uint8_t *)"";
    t->req.proto = proto;
    t->req.tls = c->ssl != NULL;
    t->req.arena = &t->arena;
    memset(&t->resp, 0, sizeof(t->resp));
    t->resp.status = 200;

    t->conn = c;
    t->slot = c->slot;
    t->gen = c->gen;
    t->prev = NULL;
    t->next = c->tasks;
    if (c->tasks)
        c->tasks->prev = t;
    c->tasks = t;
    c->ntasks++;
    return t;
}

void pt_server_task_detach(pt_task *t)
{
    pt_conn *c = t->conn;
    if (!c)
        return;
    if (t->prev)
        t->prev->next = t->next;
    else
        c->tasks = t->next;
    if (t->next)
        t->next->prev = t->prev;
    t->prev = t->next = NULL;
    t->conn = NULL;
    c->ntasks--;
    /* A queued request whose client is gone is not worth running (a client that did not
     * get its answer retries). */
    if (t->state == PT_TASK_QUEUED)
        atomic_store_explicit(&t->cancelled, 1, memory_order_relaxed);
    if (c->h1.cur == t)
        c->h1.cur = NULL;
}

/* Frees a task's body buffer and takes it off the server's body memory. */
static void body_release(pt_task *t)
{
    t->srv->body_bytes -= t->body_cap;
    free(t->body);
    t->body = NULL;
    t->body_cap = 0;
}

void pt_server_task_free(pt_task *t)
{
    pt_server *s = t->srv;
    pt_server_task_detach(t);
    pt_arena_reset(&t->arena);
    if (t->body_cap > BODY_KEEP)
        body_release(t);
    if (s->ncache < TASK_CACHE_MAX) {
        t->qnext = s->cache;
        s->cache = t;
        s->ncache++;
        return;
    }
    pt_arena_free(&t->arena);
    body_release(t);
    free(t);
}

static void post_completion(pt_server *s, pt_task *t);
static void fix_resp(pt_resp *r);

void pt_server_dispatch(pt_task *t)
{
    pt_server *s = t->srv;
    t->state = PT_TASK_QUEUED;
    t->req.body = t->body ? t->body : (const uint8_t *)"";
    t->req.body_len = t->body_len;
    t->req.received_ns = pt_now_ns();
    t->qnext = NULL;
    s->inflight++;
    if (s->on_loop && s->on_loop(s->ud, &t->req)) {
        /* Answered here; the response goes out through the completion queue like a
         * worker's, never from inside the parser callback that got us here. */
        s->fn(s->ud, &t->req, &t->resp);
        fix_resp(&t->resp);
        post_completion(s, t);
        return;
    }
    pthread_mutex_lock(&s->wmu);
    if (s->wtail)
        s->wtail->qnext = t;
    else
        s->whead = t;
    s->wtail = t;
    pthread_cond_signal(&s->wcv);
    pthread_mutex_unlock(&s->wmu);
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

int pt_server_req_header(pt_task *t, const char *name, size_t nlen, const char *val,
                         size_t vlen)
{
    for (size_t i = 0; i < sizeof(kept_headers) / sizeof(kept_headers[0]); i++) {
        if (nlen != kept_headers[i].len || strncasecmp(name, kept_headers[i].name, nlen) != 0)
            continue;
        while (vlen && (val[0] == ' ' || val[0] == '\t')) {
            val++;
            vlen--;
        }
        while (vlen && (val[vlen - 1] == ' ' || val[vlen - 1] == '\t'))
            vlen--;
        char *v = pt_arena_strndup(&t->arena, val, vlen);
        if (!v)
            return PT_ENOMEM;
        const char **field = (const char **)(void *)((char *)&t->req + kept_headers[i].off);
        *field = v;
        return 1;
    }
    return 0;
}

int pt_server_req_target(pt_task *t, const char *u, size_t n)
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

int pt_server_method(const char *m, size_t n)
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

const char *pt_server_status_text(int status)
{
    switch (status) {
    case 413: return "request body too large\n";
    case 431: return "request header fields too large\n";
    case 503: return "server busy: request bodies in memory are at web.max_body_memory; "
                     "retry\n";
    case 500: return "out of memory\n";
    default: return "bad request\n";
    }
}

/* Resizes a task's body buffer to cap bytes within the ceiling on all bodies together
 * (many connections each sending up to max_body must not take the process' memory):
 * 0, PT_EBUSY over that ceiling (the client retries), or PT_ENOMEM. */
static int body_resize(pt_task *t, size_t cap)
{
    pt_server *s = t->srv;
    if (s->body_bytes - t->body_cap + cap > s->opts.max_body_total)
        return PT_EBUSY;
    uint8_t *b = realloc(t->body, cap);
    if (!b)
        return PT_ENOMEM;
    s->body_bytes += cap - t->body_cap;
    t->body = b;
    t->body_cap = cap;
    return 0;
}

int pt_server_body_append(pt_task *t, const uint8_t *p, size_t n)
{
    size_t max = t->srv->opts.max_body;
    if (n > max - t->body_len)
        return PT_ETOOLARGE;
    size_t need = t->body_len + n;
    if (need > t->body_cap) {
        size_t cap = t->body_cap ? t->body_cap : 16384;
        while (cap < need)
            cap = cap > SIZE_MAX / 2 ? need : cap * 2;
        if (cap > max)
            cap = max;
        int rv = body_resize(t, cap);
        if (rv != 0)
            return rv;
    }
    memcpy(t->body + t->body_len, p, n);
    t->body_len = need;
    return 0;
}

void pt_server_body_reserve(pt_task *t, uint64_t n)
{
    /* Capped: a declared length costs memory only as the bytes actually arrive. */
    if (n > BODY_RESERVE_MAX)
        n = BODY_RESERVE_MAX;
    if (n > t->body_cap)
        body_resize(t, (size_t)n); /* on failure the body grows as bytes arrive */
}

int pt_server_header_ok(const char *name, const char *value)
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

/* ----------------------------------------------------------------------------- output */

int pt_server_out_empty(const pt_conn *c)
{
    return c->out_len == c->out_off && c->out_body_len == 0;
}

uint8_t *pt_server_out_reserve(pt_conn *c, size_t n)
{
    if (c->out_cap - c->out_len >= n)
        return c->out + c->out_len;
    if (c->out_off) {
        memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
        c->out_len -= c->out_off;
        c->out_off = 0;
        if (c->out_cap - c->out_len >= n)
            return c->out + c->out_len;
    }
    if (n > OUT_MAX - c->out_len)
        return NULL;
    size_t cap = c->out_cap ? c->out_cap : 4096;
    while (cap - c->out_len < n)
        cap *= 2;
    if (cap > OUT_MAX)
        cap = OUT_MAX;
    uint8_t *b = realloc(c->out, cap);
    if (!b)
        return NULL;
    c->out = b;
    c->out_cap = cap;
    return c->out + c->out_len;
}

int pt_server_out_append(pt_conn *c, const void *p, size_t n)
{
    uint8_t *dst = pt_server_out_reserve(c, n);
    if (!dst)
        return PT_ENOMEM;
    memcpy(dst, p, n);
    c->out_len += n;
    return 0;
}

static void out_consume(pt_conn *c, size_t n)
{
    size_t a = c->out_len - c->out_off;
    if (n < a) {
        c->out_off += n;
        return;
    }
    c->out_off = c->out_len = 0;
    n -= a;
    if (n == 0)
        return; /* no body in flight: out_body may be NULL */
    c->out_body += n;
    c->out_body_len -= n;
    if (!c->out_body_len)
        c->out_body = NULL;
}

/* Writes what it can. 0: all written or the socket is full; < 0: the connection is dead. */
static int conn_flush(pt_conn *c)
{
    while (!pt_server_out_empty(c)) {
        ssize_t n;
        if (c->ssl) {
            /* Same bytes on a retry, as OpenSSL requires after WANT_WRITE. */
            if (c->out_len > c->out_off)
                n = pt_tls_write(c->ssl, c->out + c->out_off, c->out_len - c->out_off);
            else
                n = pt_tls_write(c->ssl, c->out_body, c->out_body_len);
            if (n == PT_IO_AGAIN)
                return 0;
            if (n < 0)
                return -1;
        } else {
            struct iovec iov[2];
            int k = 0;
            if (c->out_len > c->out_off)
                iov[k++] = (struct iovec){c->out + c->out_off, c->out_len - c->out_off};
            if (c->out_body_len)
                iov[k++] = (struct iovec){(void *)c->out_body, c->out_body_len};
            struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)k};
            n = sendmsg(c->fd, &m, MSG_NOSIGNAL);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK)
                    return 0;
                return -1;
            }
        }
        out_consume(c, (size_t)n);
        c->last_ms = c->srv->now_ms;
    }
    return 0;
}

/* ------------------------------------------------------------------------ connections */

void pt_server_conn_close(pt_conn *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    c->cnext = c->srv->close_list;
    c->srv->close_list = c;
}

static void conn_free(pt_conn *c)
{
    pt_server *s = c->srv;
    if (c->ops && c->ops->free)
        c->ops->free(c);
    while (c->tasks) {
        pt_task *t = c->tasks;
        if (t->state == PT_TASK_QUEUED)
            pt_server_task_detach(t); /* a worker has it; its completion is dropped */
        else
            pt_server_task_free(t);
    }
    if (c->ssl)
        pt_tls_free(c->ssl, c->want_close && !c->linger);
    /* Explicitly: close() alone leaves the registration while the file has other users. */
    epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    pt_slot *e = &s->slots[c->slot];
    e->conn = NULL;
    e->gen++;
    e->next_free = s->free_slot;
    s->free_slot = c->slot;
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    atomic_fetch_sub(&s->nconns, 1);
    free(c->in);
    free(c->out);
    free(c);
}

static void process_close_list(pt_server *s)
{
    while (s->close_list) {
        pt_conn *c = s->close_list;
        s->close_list = c->cnext;
        conn_free(c);
    }
}

/* Decides between HTTP/1 and h2c (prior knowledge) from the first bytes. */
static const char h2_preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

static int detect_start(pt_conn *c)
{
    (void)c;
    return 0;
}

static ssize_t detect_input(pt_conn *c, const uint8_t *p, size_t n)
{
    size_t plen = sizeof(h2_preface) - 1;
    size_t k = n < plen ? n : plen;
    const pt_proto_ops *ops = NULL;
    if (memcmp(p, h2_preface, k) != 0)
        ops = &pt_http1_ops;
    else if (n >= plen)
        ops = &pt_http2_ops;
    if (!ops)
        return 0; /* a prefix of the preface so far */
    c->ops = ops;
    return ops->start(c) < 0 ? -1 : 0;
}

static int detect_want_read(const pt_conn *c)
{
    (void)c;
    return 1;
}

static int detect_produce(pt_conn *c)
{
    (void)c;
    return 0;
}

static void detect_complete(pt_conn *c, pt_task *t)
{
    (void)c;
    pt_server_task_free(t);
}

static void detect_eof(pt_conn *c)
{
    pt_server_conn_close(c);
}

static void detect_shutdown(pt_conn *c)
{
    c->stopping = 1;
    c->want_close = 1;
}

static int detect_idle(const pt_conn *c)
{
    (void)c;
    return 1;
}

static const pt_proto_ops detect_ops = {
    .name = "detect",
    .start = detect_start,
    .input = detect_input,
    .want_read = detect_want_read,
    .produce = detect_produce,
    .complete = detect_complete,
    .eof = detect_eof,
    .shutdown = detect_shutdown,
    .idle = detect_idle,
    .free = NULL,
};

static void conn_new(pt_server *s, int fd)
{
    if (s->free_slot == NO_SLOT)
        goto fail; /* over max_connections */
    pt_conn *c = calloc(1, sizeof(*c));
    if (!c)
        goto fail;
    c->srv = s;
    c->fd = fd;
    c->created_ms = c->last_ms = s->now_ms;
    c->slot = s->free_slot;
    c->gen = s->slots[c->slot].gen;
    if (s->ssl_ctx) {
        c->ssl = pt_tls_new(s->ssl_ctx, fd);
        if (!c->ssl)
            goto fail_conn;
        c->handshaking = 1;
    } else {
        c->ops = &detect_ops;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
                             .data.u64 = conn_tag(c->slot, c->gen)};
    if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
        goto fail_ssl;

    s->free_slot = s->slots[c->slot].next_free;
    s->slots[c->slot].conn = c;
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    atomic_fetch_add(&s->nconns, 1);
    return;

fail_ssl:
    pt_tls_free(c->ssl, 0);
fail_conn:
    free(c);
fail:
    close(fd);
}

static int handshake_step(pt_conn *c)
{
    int r = pt_tls_handshake(c->ssl);
    if (r == PT_IO_AGAIN)
        return 1;
    if (r < 0) {
        pt_server_conn_close(c);
        return 1;
    }
    c->handshaking = 0;
    c->last_ms = c->srv->now_ms;
    /* No ALPN: the client may still speak h2 with prior knowledge, so look at the bytes. */
    int alpn = pt_tls_alpn(c->ssl);
    c->ops = alpn == 1 ? &pt_http2_ops : alpn == 0 ? &pt_http1_ops : &detect_ops;
    if (c->ops->start(c) < 0) {
        pt_server_conn_close(c);
        return 1;
    }
    c->rd_ready = 1; /* records may already sit decrypted inside OpenSSL */
    return 0;
}

static int keep_input(pt_conn *c, const uint8_t *p, size_t n, size_t max)
{
    size_t have = c->in_len - c->in_off;
    if (c->in_off) {
        memmove(c->in, c->in + c->in_off, have);
        c->in_off = 0;
        c->in_len = have;
    }
    if (n > max - have)
        return -1;
    if (have + n > c->in_cap) {
        size_t cap = c->in_cap ? c->in_cap : 1024;
        while (cap < have + n)
            cap *= 2;
        uint8_t *b = realloc(c->in, cap);
        if (!b)
            return -1;
        c->in = b;
        c->in_cap = cap;
    }
    if (p)
        memcpy(c->in + c->in_len, p, n);
    return 0;
}

/* Hands bytes to the protocol, again after it switched (detect -> HTTP/1 or h2), and keeps
 * what it did not take. */
static int feed(pt_conn *c, const uint8_t *p, size_t n)
{
    size_t off = 0;
    while (off < n) {
        const pt_proto_ops *before = c->ops;
        ssize_t used = c->ops->input(c, p + off, n - off);
        if (used < 0 || c->closing)
            return -1;
        off += (size_t)used;
        if (c->ops == before)
            break;
    }
    if (off < n) {
        if (keep_input(c, p + off, n - off, RBUF_CAP) < 0)
            return -1;
        c->in_len += n - off;
    }
    return 0;
}

/* One read. 1: progress (data or EOF handled), 0: nothing to read, -1: closed. */
static int conn_read(pt_conn *c)
{
    pt_server *s = c->srv;
    int append = c->in_len > c->in_off;
    uint8_t *buf = s->rbuf;
    size_t cap = s->rbuf_cap;
    if (append) {
        /* The protocol wants more bytes before it can use what is buffered. */
        if (keep_input(c, NULL, 4096, IN_APPEND_MAX) < 0)
            goto fail;
        buf = c->in + c->in_len;
        cap = c->in_cap - c->in_len;
    }
    ssize_t n;
    if (c->ssl) {
        n = pt_tls_read(c->ssl, buf, cap);
    } else {
        n = recv(c->fd, buf, cap, 0);
        if (n < 0) {
            if (errno == EINTR)
                return 1;
            n = errno == EAGAIN || errno == EWOULDBLOCK ? PT_IO_AGAIN : PT_IO_ERR;
        }
    }
    if (n == PT_IO_AGAIN) {
        c->rd_ready = 0;
        return 0;
    }
    if (n < 0)
        goto fail;
    if (n == 0) {
        c->rd_ready = 0;
        c->peer_eof = 1;
        c->ops->eof(c);
        return c->closing ? -1 : 1;
    }
    c->last_ms = s->now_ms;
    /* A short read drained the socket: the next bytes bring a new edge. Not so for TLS
     * (OpenSSL may hold a decrypted record) or after a hang-up (EOF brings no new edge). */
    if (!c->ssl && (size_t)n < cap && !c->peer_hup)
        c->rd_ready = 0;
    if (append) {
        c->in_len += (size_t)n;
        return 1;
    }
    if (feed(c, buf, (size_t)n) < 0)
        goto fail;
    return 1;

fail:
    pt_server_conn_close(c);
    return -1;
}

/* 1: progress, 0: nothing to do, -1: closed. */
static int conn_input(pt_conn *c)
{
    if (c->in_len > c->in_off) {
        const pt_proto_ops *before = c->ops;
        ssize_t n = c->ops->input(c, c->in + c->in_off, c->in_len - c->in_off);
        if (n < 0) {
            pt_server_conn_close(c);
            return -1;
        }
        if (c->closing)
            return -1;
        c->in_off += (size_t)n;
        if (c->in_off == c->in_len)
            c->in_off = c->in_len = 0;
        if (n > 0 || c->ops != before)
            return 1;
    }
    if (!c->rd_ready)
        return 0;
    return conn_read(c);
}

static void linger_read(pt_conn *c)
{
    pt_server *s = c->srv;
    for (;;) {
        ssize_t n = recv(c->fd, s->rbuf, s->rbuf_cap, 0);
        if (n > 0) {
            c->linger_bytes += (size_t)n;
            if (c->linger_bytes > LINGER_MAX)
                break;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            c->rd_ready = 0;
            return;
        }
        break; /* EOF or error */
    }
    pt_server_conn_close(c);
}

/* The output is flushed and the connection is to be closed. */
static void conn_finish(pt_conn *c)
{
    if (!c->linger) {
        pt_server_conn_close(c);
        return;
    }
    /* After an error answer the client may still be sending (a body we refused). Closing
     * with unread input would reset the connection and could destroy the answer before
     * the client reads it, so half-close and discard input for a while. */
    shutdown(c->fd, SHUT_WR);
    c->lingering = 1;
    c->linger_until_ms = c->srv->now_ms + LINGER_MS;
    linger_read(c);
}

/*
 * Makes every bit of progress possible on a connection without blocking: handshake,
 * output (which takes priority: nothing is read while a peer is not reading what we send),
 * then input. Called on socket events, after completions and at stop.
 */
static void conn_drive(pt_conn *c)
{
    while (!c->closing) {
        if (c->handshaking && handshake_step(c) != 0)
            return;
        if (c->lingering) {
            linger_read(c);
            return;
        }
        int active = 0;
        if (pt_server_out_empty(c) && c->ops->produce(c) < 0) {
            pt_server_conn_close(c);
            return;
        }
        if (c->closing)
            return;
        if (!pt_server_out_empty(c)) {
            active = 1;
            if (conn_flush(c) < 0) {
                pt_server_conn_close(c);
                return;
            }
            if (!pt_server_out_empty(c))
                return; /* the EPOLLOUT edge resumes us */
        }
        if (c->want_close) {
            conn_finish(c);
            return;
        }
        if (c->ops->want_read(c)) {
            int r = conn_input(c);
            if (r < 0)
                return;
            active |= r;
        }
        if (!active)
            return;
    }
}

static void mark_dirty(pt_server *s, pt_conn *c)
{
    if (c->dirty)
        return;
    c->dirty = 1;
    c->dnext = s->dirty_list;
    s->dirty_list = c;
}

static void drive_dirty(pt_server *s)
{
    while (s->dirty_list) {
        pt_conn *c = s->dirty_list;
        s->dirty_list = c->dnext;
        c->dirty = 0;
        if (!c->closing)
            conn_drive(c);
    }
}

/* ------------------------------------------------------------------ workers, completions */

static void post_completion(pt_server *s, pt_task *t)
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
        r->status = 500;
    if (r->nheaders < 0)
        r->nheaders = 0;
    if (r->nheaders > PT_MAX_RESP_HEADERS)
        r->nheaders = PT_MAX_RESP_HEADERS;
    if (!r->body)
        r->body_len = 0;
}

static void *worker_main(void *arg)
{
    pt_server *s = arg;
    pthread_mutex_lock(&s->wmu);
    for (;;) {
        while (!s->whead && !s->wstop)
            pthread_cond_wait(&s->wcv, &s->wmu);
        pt_task *t = s->whead;
        if (!t)
            break;
        s->whead = t->qnext;
        if (!s->whead)
            s->wtail = NULL;
        pthread_mutex_unlock(&s->wmu);
        if (!atomic_load_explicit(&t->cancelled, memory_order_relaxed)) {
            s->fn(s->ud, &t->req, &t->resp);
            fix_resp(&t->resp);
        }
        post_completion(s, t);
        pthread_mutex_lock(&s->wmu);
    }
    pthread_mutex_unlock(&s->wmu);
    return NULL;
}

static void complete_one(pt_server *s, pt_task *t)
{
    s->inflight--;
    pt_conn *c = t->conn;
    const pt_slot *e = &s->slots[t->slot];
    if (!c || e->conn != c || e->gen != t->gen || c->closing) {
        pt_server_task_free(t); /* connection or stream gone: nobody to answer */
        return;
    }
    c->ops->complete(c, t);
    mark_dirty(s, c);
}

static void drain_completions(pt_server *s)
{
    uint64_t v;
    ssize_t r = read(s->wake_fd, &v, sizeof(v));
    (void)r;
    pthread_mutex_lock(&s->cmu);
    pt_task *t = s->chead;
    s->chead = s->ctail = NULL;
    s->csignaled = 0;
    pthread_mutex_unlock(&s->cmu);
    while (t) {
        pt_task *next = t->qnext;
        complete_one(s, t);
        t = next;
    }
    drive_dirty(s);
}

static int start_workers(pt_server *s)
{
    sigset_t all, old;
    s->threads = calloc((size_t)s->opts.workers, sizeof(pthread_t));
    if (!s->threads)
        return -1;
    /* Signals go to the loop thread, not to a worker blocked in a storage call. */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    for (int i = 0; i < s->opts.workers; i++) {
        if (pthread_create(&s->threads[i], NULL, worker_main, s) != 0)
            break;
        s->nthreads++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return s->nthreads > 0 ? 0 : -1;
}

static void stop_workers(pt_server *s)
{
    pthread_mutex_lock(&s->wmu);
    /* Requests nobody started are dropped: their connections are gone by now. */
    pt_task *t = s->whead;
    s->whead = s->wtail = NULL;
    s->wstop = 1;
    pthread_cond_broadcast(&s->wcv);
    pthread_mutex_unlock(&s->wmu);
    while (t) {
        pt_task *next = t->qnext;
        s->inflight--;
        pt_server_task_free(t);
        t = next;
    }
    for (int i = 0; i < s->nthreads; i++)
        pthread_join(s->threads[i], NULL);
    s->nthreads = 0;
    free(s->threads);
    s->threads = NULL;
    drain_completions(s);
}

/* -------------------------------------------------------------------------- listening */

static int try_listen(const struct addrinfo *ai, int dual_stack)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                    ai->ai_protocol);
    if (fd < 0)
        return -1;
    int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ai->ai_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, dual_stack ? &zero : &one, sizeof(int));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

static int listen_on(const char *addr, char *err, size_t errlen)
{
    char host[256];
    const char *port;
    if (addr[0] == '[') {
        const char *rb = strchr(addr, ']');
        if (!rb || rb[1] != ':' || (size_t)(rb - addr - 1) >= sizeof(host))
            goto bad;
        memcpy(host, addr + 1, (size_t)(rb - addr - 1));
        host[rb - addr - 1] = '\0';
        port = rb + 2;
    } else {
        const char *colon = strrchr(addr, ':');
        if (!colon || (size_t)(colon - addr) >= sizeof(host))
            goto bad;
        memcpy(host, addr, (size_t)(colon - addr));
        host[colon - addr] = '\0';
        port = colon + 1;
    }
    if (!port[0])
        goto bad;

    struct addrinfo hints = {.ai_flags = AI_PASSIVE | AI_NUMERICSERV,
                             .ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int rv = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
    if (rv != 0) {
        snprintf(err, errlen, "cannot resolve %s: %s", addr, gai_strerror(rv));
        return -1;
    }
    int fd = -1, e = 0;
    /* With no host, prefer one dual-stack IPv6 socket; fall back to IPv4 without IPv6. */
    for (int pass = 0; pass < 2 && fd < 0; pass++) {
        for (const struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
            if (!host[0] && (pass == 0) != (ai->ai_family == AF_INET6))
                continue;
            if (host[0] && pass == 1)
                break;
            fd = try_listen(ai, !host[0]);
            if (fd < 0)
                e = errno;
        }
    }
    freeaddrinfo(res);
    if (fd < 0)
        snprintf(err, errlen, "cannot listen on %s: %s", addr, strerror(e ? e : EINVAL));
    return fd;

bad:
    snprintf(err, errlen, "bad listen address \"%s\" (want host:port, :port or [v6]:port)",
             addr);
    return -1;
}

static void listener_enable(pt_server *s, int on)
{
    if (s->lfd < 0 || s->listening == on)
        return;
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = TAG_LISTEN};
    if (epoll_ctl(s->epfd, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, s->lfd, &ev) == 0)
        s->listening = on;
}

static void accept_some(pt_server *s)
{
    /* Level-triggered: a bounded batch per wakeup keeps existing connections served. */
    for (int i = 0; i < 64; i++) {
        int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            conn_new(s, fd);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            /* Out of descriptors: the pending connection would wake us in a loop. */
            listener_enable(s, 0);
            s->accept_resume_ms = s->now_ms + ACCEPT_PAUSE_MS;
        }
        return;
    }
}

/* -------------------------------------------------------------------------- public API */

pt_server *pt_server_new(const pt_server_opts *opts, pt_dispatch_fn fn, void *ud, char *err,
                         size_t errlen)
{
    char dummy[8];
    if (!err) {
        err = dummy;
        errlen = sizeof(dummy);
    }
    if (!opts || !fn || !opts->listen_address) {
        snprintf(err, errlen, "listen address and dispatch function are required");
        return NULL;
    }
    if (!opts->tls_cert_file != !opts->tls_key_file) {
        snprintf(err, errlen, "TLS needs both a certificate and a key file");
        return NULL;
    }
    pt_server *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->lfd = s->epfd = s->wake_fd = -1;
    s->opts = *opts;
    s->fn = fn;
    s->on_loop = opts->on_loop;
    s->ud = ud;
    if (s->opts.workers < 1)
        s->opts.workers = 1;
    if (!s->opts.max_body)
        s->opts.max_body = DEFAULT_MAX_BODY;
    if (!s->opts.max_body_total)
        s->opts.max_body_total = DEFAULT_MAX_BODY_TOTAL;
    if (s->opts.max_body_total < s->opts.max_body)
        s->opts.max_body_total = s->opts.max_body;
    if (!s->opts.max_header_bytes)
        s->opts.max_header_bytes = DEFAULT_MAX_HEADER;
    if (s->opts.max_connections <= 0)
        s->opts.max_connections = DEFAULT_MAX_CONNS;
    if (s->opts.idle_timeout_ms < 0)
        s->opts.idle_timeout_ms = 0;
    /* Handlers decode into the arena (snappy, protobuf), which can take many times the
     * body; the application may lower this per request. */
    s->arena_max = (64u << 20) + (s->opts.max_body <= SIZE_MAX / 16 ? 16 * s->opts.max_body
                                                                     : SIZE_MAX / 2);
    pthread_mutex_init(&s->wmu, NULL);
    pthread_cond_init(&s->wcv, NULL);
    pthread_mutex_init(&s->cmu, NULL);
    atomic_init(&s->nconns, 0);
    atomic_init(&s->stop_req, 0);

    s->listen_copy = strdup(opts->listen_address);
    if (opts->tls_cert_file) {
        s->cert_copy = strdup(opts->tls_cert_file);
        s->key_copy = strdup(opts->tls_key_file);
    }
    s->rbuf_cap = RBUF_CAP;
    s->rbuf = malloc(s->rbuf_cap);
    s->nslots = (uint32_t)s->opts.max_connections;
    s->slots = calloc(s->nslots, sizeof(pt_slot));
    if (!s->listen_copy || (opts->tls_cert_file && (!s->cert_copy || !s->key_copy)) ||
        !s->rbuf || !s->slots) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    s->opts.listen_address = s->listen_copy;
    s->opts.tls_cert_file = s->cert_copy;
    s->opts.tls_key_file = s->key_copy;
    for (uint32_t i = 0; i < s->nslots; i++)
        s->slots[i].next_free = i + 1 < s->nslots ? i + 1 : NO_SLOT;
    s->free_slot = 0;

    if (s->cert_copy) {
        s->ssl_ctx = pt_tls_ctx_new(s->cert_copy, s->key_copy, err, errlen);
        if (!s->ssl_ctx)
            goto fail;
    }
    if (pt_http2_callbacks(&s->h2cb) != 0) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }

    /* A peer that resets a connection must not kill the process through a TLS write
     * (OpenSSL uses write(), not send() with MSG_NOSIGNAL). Leave a custom handler alone. */
    struct sigaction sa;
    if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL)
        signal(SIGPIPE, SIG_IGN);

    s->lfd = listen_on(s->listen_copy, err, errlen);
    if (s->lfd < 0)
        goto fail;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(s->lfd, (struct sockaddr *)&ss, &sl) == 0)
        s->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->epfd < 0 || s->wake_fd < 0) {
        snprintf(err, errlen, "epoll/eventfd: %s", strerror(errno));
        goto fail;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = TAG_WAKE};
    if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->wake_fd, &ev) != 0) {
        snprintf(err, errlen, "epoll_ctl: %s", strerror(errno));
        goto fail;
    }
    listener_enable(s, 1);
    if (!s->listening) {
        snprintf(err, errlen, "epoll_ctl: %s", strerror(errno));
        goto fail;
    }
    s->now_ms = mono_ms();
    update_date(s);
    return s;

fail:
    pt_server_free(s);
    return NULL;
}

int pt_server_port(const pt_server *s)
{
    return s->port;
}

long pt_server_connections(const pt_server *s)
{
    return atomic_load(&((pt_server *)s)->nconns);
}

void pt_server_stop(pt_server *s)
{
    /* Async-signal-safe: a lock-free atomic store and a write(2). */
    atomic_store(&s->stop_req, 1);
    uint64_t one = 1;
    ssize_t r = write(s->wake_fd, &one, sizeof(one));
    (void)r;
}

static void begin_stop(pt_server *s)
{
    s->stopping = 1;
    s->stop_deadline_ms = s->now_ms + STOP_GRACE_MS;
    listener_enable(s, 0);
    if (s->lfd >= 0) {
        close(s->lfd);
        s->lfd = -1;
    }
    for (pt_conn *c = s->conns; c; c = c->next) {
        if (c->closing)
            continue;
        if (!c->ops || c->lingering) {
            pt_server_conn_close(c); /* in the TLS handshake, or only draining input */
            continue;
        }
        c->ops->shutdown(c);
        mark_dirty(s, c);
    }
    drive_dirty(s);
}

static void sweep(pt_server *s)
{
    /* Often enough that a short idle timeout is honoured within about a quarter of it. */
    int64_t every = SWEEP_MS;
    if (s->opts.idle_timeout_ms > 0 && s->opts.idle_timeout_ms / 4 < every)
        every = s->opts.idle_timeout_ms / 4 > 10 ? s->opts.idle_timeout_ms / 4 : 10;
    s->next_sweep_ms = s->now_ms + every;
    if (!s->listening && !s->stopping && s->now_ms >= s->accept_resume_ms)
        listener_enable(s, 1);
    int64_t idle = s->opts.idle_timeout_ms;
    for (pt_conn *c = s->conns; c; c = c->next) {
        if (c->closing)
            continue;
        if (c->lingering) {
            if (s->now_ms >= c->linger_until_ms)
                pt_server_conn_close(c);
            continue;
        }
        if (c->handshaking) {
            if (s->now_ms - c->created_ms >= HANDSHAKE_MS)
                pt_server_conn_close(c);
            continue;
        }
        if (idle <= 0 || !c->ops->idle(c) || s->now_ms - c->last_ms < idle)
            continue;
        if (c->stopping) {
            pt_server_conn_close(c); /* asked to wind down a period ago */
            continue;
        }
        c->ops->shutdown(c);
        c->last_ms = s->now_ms;
        mark_dirty(s, c);
    }
    drive_dirty(s);
}

/* The connection an event names, or NULL when that connection is gone. */
static pt_conn *event_conn(pt_server *s, uint64_t tag)
{
    uint32_t slot = (uint32_t)tag, gen = (uint32_t)(tag >> 32);
    if (slot >= s->nslots || s->slots[slot].gen != gen)
        return NULL;
    return s->slots[slot].conn;
}

static void handle_event(pt_server *s, uint64_t tag, uint32_t e)
{
    if (tag == TAG_LISTEN) {
        accept_some(s);
        return;
    }
    if (tag == TAG_WAKE) {
        drain_completions(s);
        return;
    }
    pt_conn *c = event_conn(s, tag);
    if (!c || c->closing)
        return;
    if (e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
        c->rd_ready = 1;
    if (e & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
        c->peer_hup = 1;
    conn_drive(c);
}

/* One turn of the loop: wait up to timeout_ms for events, handle them, free what closed.
 * 1: keep going, 0: the stop has finished, < 0: epoll failed. */
static int loop_once(pt_server *s, int timeout_ms)
{
    struct epoll_event evs[128];
    int n = epoll_wait(s->epfd, evs, (int)(sizeof(evs) / sizeof(evs[0])), timeout_ms);
    if (n < 0 && errno != EINTR)
        return PT_EINTERNAL;
    s->now_ms = mono_ms();
    update_date(s);
    for (int i = 0; i < n; i++)
        handle_event(s, evs[i].data.u64, evs[i].events);
    process_close_list(s);
    if (atomic_load(&s->stop_req) && !s->stopping)
        begin_stop(s);
    if (s->now_ms >= s->next_sweep_ms)
        sweep(s);
    process_close_list(s);
    if (s->stopping && ((!s->conns && s->inflight == 0) || s->now_ms >= s->stop_deadline_ms))
        return 0;
    return 1;
}

int pt_server_run(pt_server *s)
{
    int rv;
    if (start_workers(s) != 0)
        return PT_EINTERNAL;
    s->now_ms = mono_ms();
    s->next_sweep_ms = s->now_ms + SWEEP_MS;
    do {
        int timeout = s->stopping ? 50 : (int)(s->next_sweep_ms - s->now_ms);
        rv = loop_once(s, timeout < 0 ? 0 : timeout);
    } while (rv > 0);
    /* Past the grace period: drop whatever is left. */
    for (pt_conn *c = s->conns; c; c = c->next)
        pt_server_conn_close(c);
    process_close_list(s);
    stop_workers(s);
    process_close_list(s);
    return rv;
}

void pt_server_free(pt_server *s)
{
    if (!s)
        return;
    if (s->nthreads)
        stop_workers(s);
    for (pt_conn *c = s->conns; c; c = c->next)
        pt_server_conn_close(c);
    process_close_list(s);
    while (s->cache) {
        pt_task *t = s->cache;
        s->cache = t->qnext;
        pt_arena_free(&t->arena);
        body_release(t);
        free(t);
    }
    if (s->lfd >= 0)
        close(s->lfd);
    if (s->epfd >= 0)
        close(s->epfd);
    if (s->wake_fd >= 0)
        close(s->wake_fd);
    if (s->ssl_ctx)
        pt_tls_ctx_free(s->ssl_ctx);
    if (s->h2cb)
        nghttp2_session_callbacks_del(s->h2cb);
    pthread_mutex_destroy(&s->wmu);
    pthread_cond_destroy(&s->wcv);
    pthread_mutex_destroy(&s->cmu);
    free(s->slots);
    free(s->rbuf);
    free(s->listen_copy);
    free(s->cert_copy);
    free(s->key_copy);
    free(s);
}
