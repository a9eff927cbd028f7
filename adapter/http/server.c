/*
 * The HTTP server's loop: listener, one epoll loop thread that owns every connection, a
 * pool of workers that run the dispatch callback, and a completion queue back to the loop.
 *
 * Connections are edge-triggered and registered once (in, out, rdhup); the loop remembers
 * "readable and not drained" per connection, so pausing a connection (HTTP/1 request in a
 * worker, output the peer is not reading) costs no epoll_ctl. A worker's completion names
 * its connection by slot and generation: a connection closed meanwhile has a new generation
 * (and has detached the task), so the completion is dropped instead of touching freed
 * memory.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "error.h"
#include "log.h"
#include "server_int.h"

#define STOP_GRACE_MS 10000
#define HANDSHAKE_MS 10000
#define SWEEP_MS 1000
#define ACCEPT_PAUSE_MS 100

#define DEFAULT_MAX_BODY (32u << 20)
#define DEFAULT_MAX_BODY_TOTAL ((size_t)1 << 30)
#define DEFAULT_MAX_HEADER (64u << 10)
#define DEFAULT_MAX_CONNS 65536
#define DEFAULT_MAX_INFLIGHT 1024
#define DEFAULT_RESERVED_CONNS 4
#define DEFAULT_BODY_STREAMS 100
#define DEFAULT_MAX_CONN_RESP ((size_t)256 << 20)
#define DEFAULT_MAX_RESP_TOTAL ((size_t)1 << 30)
#define RESERVED_HEADER_MS 2000 /* a health check's request on a reserved connection */

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
        if (c->state != PT_CONN_CLOSED)
            pt_conn_drive(c);
    }
}

/* ------------------------------------------------------------------ workers, completions */

/* The first queued task this worker may run: a light one, or a heavy one while fewer than
 * heavy_max run (heavy ones wait behind in order). Under wmu. */
static pt_task *take(pt_server *s)
{
    pt_task *prev = NULL;
    for (pt_task *t = s->whead; t; prev = t, t = t->qnext) {
        if (t->heavy && s->heavy_running >= s->heavy_max)
            continue;
        if (prev)
            prev->qnext = t->qnext;
        else
            s->whead = t->qnext;
        if (s->wtail == t)
            s->wtail = prev;
        s->heavy_running += t->heavy;
        return t;
    }
    return NULL;
}

static void *worker_main(void *arg)
{
    pt_server *s = arg;
    pthread_mutex_lock(&s->wmu);
    for (;;) {
        pt_task *t;
        while (!(t = take(s)) && !s->wstop)
            pthread_cond_wait(&s->wcv, &s->wmu);
        if (!t)
            break;
        int heavy = t->heavy; /* t belongs to the loop once posted back */
        pthread_mutex_unlock(&s->wmu);
        pt_task_work(t);
        pthread_mutex_lock(&s->wmu);
        if (heavy) {
            s->heavy_running--;
            /* A heavy task may be waiting for this slot. With nothing queued nobody is, and
             * a signal would only wake an idle worker to find nothing: two thread switches
             * per remote read. */
            if (s->whead)
                pthread_cond_signal(&s->wcv);
        }
    }
    pthread_mutex_unlock(&s->wmu);
    return NULL;
}

static void complete_one(pt_server *s, pt_task *t)
{
    s->inflight--;
    pt_task_returned(t);
    int job = t->state;
    t->state = PT_TASK_SEND; /* back on the loop, with an answer or a piece to send */
    pt_conn *c = t->conn;
    const pt_slot *e = &s->slots[t->slot];
    if (!c || e->conn != c || e->gen != t->gen || c->state == PT_CONN_CLOSED ||
        job == PT_TASK_CANCEL) {
        pt_task_free(t); /* connection or stream gone: nobody to answer */
        return;
    }
    t->touched_ms = s->now_ms;
    pt_task_hold(t);
    if (job == PT_TASK_PULL)
        c->ops->piece(c, t);
    else
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

/* Plays the workers on this thread for every task queued to them (none are running). */
static void run_queue(pt_server *s)
{
    pt_task *t = s->whead;
    s->whead = s->wtail = NULL;
    while (t) {
        pt_task *next = t->qnext;
        pt_task_work(t);
        t = next;
    }
}

/* Called once every connection is gone, so every queued task is cancelled: workers empty
 * the queue before they exit, skipping requests and calling producers' done. Without
 * worker threads (never started) this thread plays their part. */
static void stop_workers(pt_server *s)
{
    pthread_mutex_lock(&s->wmu);
    s->wstop = 1;
    pthread_cond_broadcast(&s->wcv);
    pthread_mutex_unlock(&s->wmu);
    for (int i = 0; i < s->nthreads; i++)
        pthread_join(s->threads[i], NULL);
    s->nthreads = 0;
    free(s->threads);
    s->threads = NULL;
    run_queue(s);
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

static void process_close_list(pt_server *s)
{
    while (s->close_list) {
        pt_conn *c = s->close_list;
        s->close_list = c->cnext;
        pt_conn_free(c);
    }
}

/* Every connection is registered once, edge-triggered, for everything it may wait on. */
static void conn_accept(pt_server *s, int fd)
{
    pt_conn *c = pt_conn_new(s, fd);
    if (!c) {
        close(fd);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
                             .data.u64 = conn_tag(c->slot, c->gen)};
    if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
        pt_conn_close(c);
}

static void accept_some(pt_server *s)
{
    /* Level-triggered: a bounded batch per wakeup keeps existing connections served. */
    for (int i = 0; i < 64; i++) {
        int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            conn_accept(s, fd);
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

/* A server with everything but its sockets (listener, epoll, wakeup): pt_server_new adds
 * them; the protocol unit tests drive connections without any. */
static pt_server *server_alloc(const pt_server_opts *opts, pt_dispatch_fn fn, void *ud,
                               char *err, size_t errlen)
{
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
    s->stats = opts->stats ? opts->stats : &s->own_stats;
    s->fn = fn;
    s->on_loop = opts->on_loop;
    s->ud = ud;
    if (s->opts.workers < 1)
        s->opts.workers = 1;
    s->heavy_max = s->opts.workers > 1 ? s->opts.workers - 1 : 1;
    if (!s->opts.max_body)
        s->opts.max_body = DEFAULT_MAX_BODY;
    if (!s->opts.max_body_total)
        s->opts.max_body_total = DEFAULT_MAX_BODY_TOTAL;
    if (s->opts.max_body_total < s->opts.max_body)
        s->opts.max_body_total = s->opts.max_body;
    /* Overload limits: a body that fits max_body always fits its connection's room. */
    if (s->opts.max_inflight <= 0)
        s->opts.max_inflight = DEFAULT_MAX_INFLIGHT;
    if (!s->opts.max_conn_body || s->opts.max_conn_body > s->opts.max_body_total)
        s->opts.max_conn_body = s->opts.max_body_total;
    if (s->opts.max_conn_body < s->opts.max_body)
        s->opts.max_conn_body = s->opts.max_body;
    snprintf(s->retry_after, sizeof(s->retry_after), "%d",
             s->opts.retry_after_s > 0 ? s->opts.retry_after_s : 1);
    if (!s->opts.max_header_bytes)
        s->opts.max_header_bytes = DEFAULT_MAX_HEADER;
    if (s->opts.max_connections <= 0)
        s->opts.max_connections = DEFAULT_MAX_CONNS;
    if (s->opts.idle_timeout_ms < 0)
        s->opts.idle_timeout_ms = 0;
    if (s->opts.reserved_connections <= 0)
        s->opts.reserved_connections = DEFAULT_RESERVED_CONNS;
    if (s->opts.max_conn_body_streams <= 0)
        s->opts.max_conn_body_streams = DEFAULT_BODY_STREAMS;
    if (!s->opts.max_conn_resp)
        s->opts.max_conn_resp = DEFAULT_MAX_CONN_RESP;
    if (!s->opts.max_resp_total)
        s->opts.max_resp_total = DEFAULT_MAX_RESP_TOTAL;
    /* Handlers decode into the arena (snappy, protobuf), which can take many times the
     * body; the application may lower this per request. */
    s->arena_max = (64u << 20) + (s->opts.max_body <= SIZE_MAX / 16 ? 16 * s->opts.max_body
                                                                     : SIZE_MAX / 2);
    pthread_mutex_init(&s->wmu, NULL);
    pthread_cond_init(&s->wcv, NULL);
    pthread_mutex_init(&s->cmu, NULL);
    atomic_init(&s->nconns, 0);
    atomic_init(&s->stop_req, 0);
    atomic_init(&s->reload_req, 0);

    s->listen_copy = strdup(opts->listen_address);
    if (opts->tls_cert_file) {
        s->cert_copy = strdup(opts->tls_cert_file);
        s->key_copy = strdup(opts->tls_key_file);
        if (opts->tls_client_ca_file)
            s->ca_copy = strdup(opts->tls_client_ca_file);
    }
    s->rbuf_cap = PT_RBUF_CAP;
    s->rbuf = malloc(s->rbuf_cap);
    s->nslots = (uint32_t)s->opts.max_connections + (uint32_t)s->opts.reserved_connections;
    s->slots = calloc(s->nslots, sizeof(pt_slot));
    if (!s->listen_copy || (opts->tls_cert_file && (!s->cert_copy || !s->key_copy)) ||
        (opts->tls_cert_file && opts->tls_client_ca_file && !s->ca_copy) || !s->rbuf || !s->slots) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    s->opts.listen_address = s->listen_copy;
    s->opts.tls_cert_file = s->cert_copy;
    s->opts.tls_key_file = s->key_copy;
    s->opts.tls_client_ca_file = s->ca_copy;
    for (uint32_t i = 0; i < s->nslots; i++)
        s->slots[i].next_free = i + 1 < s->nslots ? i + 1 : PT_NO_SLOT;
    s->free_slot = 0;

    if (s->cert_copy) {
        s->ssl_ctx = pt_tls_ctx_new(s->cert_copy, s->key_copy, s->ca_copy, err, errlen);
        if (!s->ssl_ctx)
            goto fail;
    }
    s->h1_ops = &pt_http1_ops;
    s->h2_ops = &pt_http2_ops;
    if (pt_http2_callbacks(&s->h2cb) != 0) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }

    return s;

fail:
    pt_server_free(s);
    return NULL;
}

pt_server *pt_server_new(const pt_server_opts *opts, pt_dispatch_fn fn, void *ud, char *err,
                         size_t errlen)
{
    char dummy[8];
    if (!err) {
        err = dummy;
        errlen = sizeof(dummy);
    }
    pt_server *s = server_alloc(opts, fn, ud, err, errlen);
    if (!s)
        return NULL;
    if (pt_http2_flood_guarded() == 0)
        pt_log(PT_LOG_ERROR, "libnghttp2 lacks the HTTP/2 flood fixes",
               "version=%s fix=\"nghttp2 1.61 or later, or Debian 12's 1.52.0-1+deb12u2 or "
               "later\" risk=\"CONTINUATION floods and rapid resets can exhaust the server\"",
               nghttp2_version(0)->version_str);
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
    s->now_ms = pt_mono_ms();
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

void pt_server_reload_tls(pt_server *s)
{
    /* Async-signal-safe, like pt_server_stop. */
    atomic_store(&s->reload_req, 1);
    uint64_t one = 1;
    ssize_t r = write(s->wake_fd, &one, sizeof(one));
    (void)r;
}

/* The server the signal handler acts on (pt_server_signals). */
static pt_server *volatile signalled;

static void on_signal(int sig)
{
    pt_server *s = signalled;
    if (!s)
        return;
    if (sig == SIGHUP)
        pt_server_reload_tls(s);
    else
        pt_server_stop(s);
}

void pt_server_signals(pt_server *s)
{
    signalled = s;
    if (!s)
        return;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* Loop thread: a new context for the connections accepted from now on. Each SSL object
 * holds a reference to the context it was made from, so open connections keep theirs. */
static void reload_tls(pt_server *s)
{
    if (!s->ssl_ctx) {
        pt_log_msg(PT_LOG_WARN, "reload asked but TLS is not configured: nothing to reload");
        return;
    }
    /* Small files read on the loop thread: a reload is rare and takes milliseconds. */
    char err[512], q[600];
    SSL_CTX *ctx = pt_tls_ctx_new(s->cert_copy, s->key_copy, s->ca_copy, err, sizeof(err));
    if (!ctx) {
        pt_log(PT_LOG_ERROR, "TLS reload failed, keeping the previous certificate", "err=%s",
               pt_log_quote(q, sizeof(q), err, strlen(err)));
        return;
    }
    pt_tls_ctx_free(s->ssl_ctx);
    s->ssl_ctx = ctx;
    pt_log(PT_LOG_INFO, "TLS certificate reloaded", "cert_file=%s client_ca=%s",
           pt_log_quote(q, sizeof(q), s->cert_copy, strlen(s->cert_copy)),
           s->ca_copy ? "true" : "false");
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
        if (c->state == PT_CONN_CLOSED)
            continue;
        if (c->state == PT_CONN_HANDSHAKE || c->state == PT_CONN_LINGERING) {
            pt_conn_close(c); /* in the TLS handshake, or only draining input */
            continue;
        }
        c->ops->shutdown(c);
        mark_dirty(s, c);
    }
    drive_dirty(s);
}

/* Whether a body has stalled: no byte for body_timeout, or, once body_timeout has passed
 * since its headers, fewer than body_min_rate bytes a second on average. */
static int body_late(const pt_server *s, const pt_task *t)
{
    int64_t limit = s->opts.body_timeout_ms, since = s->now_ms - t->headers_ms;
    if (limit <= 0)
        return 0;
    if (s->now_ms - t->touched_ms >= limit)
        return 1;
    return since > limit && s->opts.body_min_rate &&
           pt_buf_used(&t->body) < (uint64_t)(since - limit) * s->opts.body_min_rate / 1000;
}

/* The deadline request t of c has missed (enum pt_timeout_kind), or -1. */
static int task_late(const pt_server *s, const pt_conn *c, const pt_task *t, int64_t hdr)
{
    int64_t wr = s->opts.write_timeout_ms;
    if (t->state == PT_TASK_RECV && !t->headers_ms)
        return hdr > 0 && s->now_ms - t->start_ms >= hdr ? PT_TIMEOUT_HEADER : -1;
    if (t->state == PT_TASK_RECV && !t->early_rv)
        return body_late(s, t) ? PT_TIMEOUT_BODY : -1;
    if (t->state != PT_TASK_SEND || wr <= 0)
        return -1;
    /* HTTP/2 counts a stream's own progress (its window may be shut while others move);
     * HTTP/1.1 any byte written. */
    int64_t moved = t->stream_id || t->touched_ms > c->wrote_ms ? t->touched_ms : c->wrote_ms;
    return s->now_ms - moved >= wr ? PT_TIMEOUT_WRITE : -1;
}

static void time_out(pt_conn *c, pt_task *t, int kind)
{
    atomic_fetch_add_explicit(&c->srv->stats->timeouts[kind], 1, memory_order_relaxed);
    c->ops->timeout(c, t, kind);
}

/* Ends what of c missed a deadline: its first request's headers (counted from its accept),
 * each of its requests, its output. A connection on its way out (closing, lingering) only
 * has its output to flush in time. 1 when something was ended. */
static int enforce_conn(pt_server *s, pt_conn *c)
{
    int64_t hdr = c->reserved ? RESERVED_HEADER_MS : s->opts.header_timeout_ms;
    int hit = 0;
    if (c->state < PT_CONN_CLOSE && hdr > 0 && c->requests == 0 &&
        s->now_ms - c->created_ms >= hdr) {
        time_out(c, NULL, PT_TIMEOUT_HEADER);
        return 1;
    }
    pt_task *next;
    for (pt_task *t = c->tasks; t && c->state < PT_CONN_CLOSE; t = next) {
        next = t->next; /* t may be freed */
        int kind = task_late(s, c, t, hdr);
        if (kind >= 0) {
            time_out(c, t, kind);
            hit = 1;
        }
    }
    if (!hit && c->state != PT_CONN_CLOSED && !pt_conn_out_empty(c) &&
        s->opts.write_timeout_ms > 0 && s->now_ms - c->wrote_ms >= s->opts.write_timeout_ms) {
        time_out(c, NULL, PT_TIMEOUT_WRITE);
        hit = 1;
    }
    return hit;
}

/* Whether a worker holds one of c's tasks: the server, not the client, is busy. */
static int conn_busy(const pt_conn *c)
{
    for (const pt_task *t = c->tasks; t; t = t->next)
        if (pt_task_in_worker(t))
            return 1;
    return 0;
}

/* Ends what missed a deadline, shuts idle connections down, and marks what changed dirty
 * (the sweep drives them; the protocol tests pump them). */
static void enforce_deadlines(pt_server *s)
{
    int64_t idle = s->opts.idle_timeout_ms;
    for (pt_conn *c = s->conns; c; c = c->next) {
        if (c->state == PT_CONN_CLOSED)
            continue;
        if (c->state == PT_CONN_LINGERING) {
            if (s->now_ms >= c->linger_until_ms)
                pt_conn_close(c);
            continue;
        }
        if (c->state == PT_CONN_HANDSHAKE) {
            if (s->now_ms - c->created_ms >= HANDSHAKE_MS)
                pt_conn_close(c);
            continue;
        }
        if (enforce_conn(s, c)) {
            if (c->state != PT_CONN_CLOSED)
                mark_dirty(s, c);
            continue;
        }
        if (idle <= 0 || conn_busy(c) || s->now_ms - c->last_ms < idle)
            continue;
        if (c->state >= PT_CONN_STOPPING) {
            pt_conn_close(c); /* asked to wind down a period ago */
            continue;
        }
        atomic_fetch_add_explicit(&s->stats->timeouts[PT_TIMEOUT_IDLE], 1, memory_order_relaxed);
        c->ops->shutdown(c);
        c->last_ms = s->now_ms;
        mark_dirty(s, c);
    }
}

static void sweep(pt_server *s)
{
    /* Often enough that a short timeout is honoured within about a quarter of it. */
    int64_t every = SWEEP_MS;
    int shortest[] = {s->opts.idle_timeout_ms, s->opts.header_timeout_ms,
                      s->opts.body_timeout_ms, s->opts.write_timeout_ms, RESERVED_HEADER_MS};
    for (size_t i = 0; i < sizeof(shortest) / sizeof(shortest[0]); i++)
        if (shortest[i] > 0 && shortest[i] / 4 < every)
            every = shortest[i] / 4 > 10 ? shortest[i] / 4 : 10;
    s->next_sweep_ms = s->now_ms + every;
    if (!s->listening && !s->stopping && s->now_ms >= s->accept_resume_ms)
        listener_enable(s, 1);
    enforce_deadlines(s);
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
    if (!c || c->state == PT_CONN_CLOSED)
        return;
    if (e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
        c->rd_ready = 1;
    if (e & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
        c->peer_hup = 1;
    pt_conn_drive(c);
}

/* One turn of the loop: wait up to timeout_ms for events, handle them, free what closed.
 * 1: keep going, 0: the stop has finished, < 0: epoll failed. */
static int loop_once(pt_server *s, int timeout_ms)
{
    struct epoll_event evs[128];
    int n = epoll_wait(s->epfd, evs, (int)(sizeof(evs) / sizeof(evs[0])), timeout_ms);
    if (n < 0 && errno != EINTR)
        return PT_EINTERNAL;
    s->now_ms = pt_mono_ms();
    update_date(s);
    for (int i = 0; i < n; i++)
        handle_event(s, evs[i].data.u64, evs[i].events);
    process_close_list(s);
    if (atomic_exchange(&s->reload_req, 0) && !s->stopping)
        reload_tls(s);
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
    s->now_ms = pt_mono_ms();
    s->next_sweep_ms = s->now_ms + SWEEP_MS;
    do {
        int timeout = s->stopping ? 50 : (int)(s->next_sweep_ms - s->now_ms);
        rv = loop_once(s, timeout < 0 ? 0 : timeout);
    } while (rv > 0);
    /* Past the grace period: drop whatever is left. */
    for (pt_conn *c = s->conns; c; c = c->next)
        pt_conn_close(c);
    process_close_list(s);
    stop_workers(s);
    process_close_list(s);
    return rv;
}

void pt_server_free(pt_server *s)
{
    if (!s)
        return;
    for (pt_conn *c = s->conns; c; c = c->next)
        pt_conn_close(c);
    process_close_list(s);
    stop_workers(s);
    process_close_list(s);
    pt_task_cache_free(s);
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
    free(s->ca_copy);
    free(s);
}
