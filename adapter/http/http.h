/*
 * The meeting point of HTTP/1.1 and HTTP/2: one request struct, one response struct, one
 * dispatch callback. Handlers never learn which protocol (or TLS) carried the request.
 *
 * Threading: the server's event loop parses requests; a complete request (headers + whole
 * body) is handed to a worker thread which calls the dispatch callback; the response goes
 * back to the loop through a queue and a wakeup fd. Handlers may block (storage calls).
 * A response body may also be produced piece by piece on workers (pt_producer).
 */
#ifndef PT_HTTP_H
#define PT_HTTP_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "buf.h"

enum pt_method { PT_M_OTHER = 0, PT_M_GET, PT_M_HEAD, PT_M_POST, PT_M_PUT, PT_M_DELETE };

enum pt_proto { PT_PROTO_HTTP1 = 1, PT_PROTO_HTTP2 = 2 };

#define PT_MAX_RESP_HEADERS 8

typedef struct pt_req {
    int method;           /* enum pt_method */
    const char *method_name; /* NUL-terminated, as received */
    const char *path;     /* NUL-terminated, without the query string */
    const char *query;    /* NUL-terminated text after '?', "" when none */
    /* Selected request headers (NUL-terminated, "" when absent). */
    const char *content_type;
    const char *content_encoding;
    const char *authorization;
    const char *user_agent;
    const char *remote_write_version; /* X-Prometheus-Remote-Write-Version */
    const char *tenant;   /* the pt_server_opts.tenant_header header ("" when absent) */
    unsigned tenant_headers; /* how many of them came (more than one is refused) */
    const uint8_t *body;  /* the whole body; valid until the response has been sent */
    size_t body_len;
    int proto;            /* enum pt_proto: for logs and metrics only */
    int tls;              /* 1 when carried over TLS */
    /* Arena for the handler's allocations; freed after the response is sent. */
    pt_arena *arena;
    uint64_t received_ns; /* pt_now_ns() when the request was complete */
    /*
     * Whether the client still waits for the answer: 0 while it does; the server's loop sets
     * it to 1 (never back) when the client is gone (HTTP/1.1: the connection was closed,
     * half-closed or reset while the request was in a worker; HTTP/2: RST_STREAM, or the
     * connection closed) or when the server stopped without waiting any longer (the stop's
     * grace period ran out). A handler or producer on a worker may poll it with
     * atomic_load(), e.g. between storage calls, and return early with any answer: the
     * answer is discarded. Never NULL; valid as long as arena.
     */
    const atomic_int *cancelled;
} pt_req;

typedef struct pt_resp_header {
    const char *name;
    const char *value;
} pt_resp_header;

/*
 * A response body produced piece by piece, for a body the handler has not finished
 * computing when it returns (the shape of nghttp2's data provider and h2o's generators).
 * The handler sets resp->producer.pull instead of resp->body; the server then asks for the
 * body one piece at a time, whenever the connection (HTTP/1.1) or the stream's flow-control
 * window (HTTP/2) has room, and sends it as HTTP/1.1 chunks (an HTTP/1.0 client: until the
 * connection closes) or HTTP/2 DATA frames, without a Content-Length.
 *
 * pull(ud, out, want): on a worker thread; it may block (storage calls). Appends at most
 *   want bytes to out, which is empty on entry, belongs to the server, is valid only during
 *   the call and refuses more than want. Returns PT_PULL_MORE, PT_PULL_END when this piece
 *   (possibly empty) is the last, or a negative error code: the status line is out by then,
 *   so the response is cut (HTTP/1.1: connection closed without the last chunk; HTTP/2:
 *   RST_STREAM(INTERNAL_ERROR)) and the client sees an incomplete body. An empty piece
 *   with PT_PULL_MORE is pulled again at once.
 * done(ud, cancelled): called exactly once, after which the server never uses ud again.
 *   cancelled = 0 right after pull returned PT_PULL_END; 1 when the body will not be
 *   completed: the client disconnected, reset the stream or sent GOAWAY past it, the server
 *   stopped, pull failed, or the response has no body (HEAD, 1xx, 204, 304). It runs on a
 *   worker thread too (only at the very end of pt_server_run, after the workers exited, on
 *   the thread that ran the loop). May be NULL.
 *
 * Never two calls at once for one producer, and at most one piece in flight per response,
 * so memory stays bounded whatever the body's size. The calls for one producer may come
 * from different workers; the server orders them (each happens after the previous one
 * returned). ud, and req->arena with everything in it, stay valid until done has returned.
 */
enum { PT_PULL_MORE = 0, PT_PULL_END = 1 };

typedef struct pt_producer {
    int (*pull)(void *ud, pt_buf *out, size_t want);
    void (*done)(void *ud, int cancelled);
    void *ud;
} pt_producer;

typedef struct pt_resp {
    int status;                   /* defaults to 200 */
    const char *content_type;     /* NULL: none sent */
    const char *content_encoding; /* NULL: none sent */
    pt_resp_header headers[PT_MAX_RESP_HEADERS];
    int nheaders;
    /* Body: must stay valid until the response has been sent; allocate it from
     * req->arena (or point at static data). Ignored when producer.pull is set. */
    const uint8_t *body;
    size_t body_len;
    pt_producer producer; /* optional: a body produced piece by piece (see above) */
} pt_resp;

/* Called on a worker thread for every complete request (or on the event loop thread, when
 * pt_server_opts.on_loop says so). */
typedef void (*pt_dispatch_fn)(void *ud, pt_req *req, pt_resp *resp);

/* Why the HTTP server answered 503 for overload (pt_server_opts: max_inflight, max_conn_body,
 * max_body_total, max_conn_resp, max_resp_total, max_conn_body_streams, max_connections). */
enum pt_overload_reason {
    PT_OVERLOAD_INFLIGHT, PT_OVERLOAD_CONN_BODY, PT_OVERLOAD_BODY, PT_OVERLOAD_CONN_RESP,
    PT_OVERLOAD_RESP, PT_OVERLOAD_BODY_STREAMS, PT_OVERLOAD_CONNECTIONS, PT_OVERLOAD_COUNT
};

/* Which deadline of the HTTP server ended a request or a connection (pt_server_opts:
 * header_timeout_ms, body_timeout_ms, write_timeout_ms, idle_timeout_ms). */
enum pt_timeout_kind {
    PT_TIMEOUT_HEADER, PT_TIMEOUT_BODY, PT_TIMEOUT_WRITE, PT_TIMEOUT_IDLE, PT_TIMEOUT_COUNT
};

/* The server's own figures, for /metrics: requests refused for overload and deadlines hit
 * (counters), and three gauges: requests queued for or running on workers, request body
 * bytes held in memory, answers held while they are sent. */
typedef struct pt_http_stats {
    _Atomic uint64_t overload_rejected[PT_OVERLOAD_COUNT];
    _Atomic uint64_t timeouts[PT_TIMEOUT_COUNT];
    _Atomic int64_t inflight;
    _Atomic int64_t body_bytes;
    _Atomic int64_t response_bytes;
} pt_http_stats;

typedef struct pt_server_opts {
    const char *listen_address; /* "host:port", ":port", "[::1]:port" */
    int workers;                /* worker threads running dispatch; >= 1 */
    size_t max_body;            /* larger bodies get 413 without reaching dispatch */
    size_t max_body_total;      /* all bodies in memory at once; past it 503 (0 = 1 GiB) */
    size_t max_header_bytes;    /* total request header bytes; over it: 431 / stream reset */
    /* Overload: past these a request is answered 503 with Retry-After, never dispatched.
     * max_inflight: requests queued for or running on the workers (0 = 1024; requests
     * answered on the loop do not count). max_conn_body: request bodies one connection
     * holds at once, all its HTTP/2 streams together (0 = max_body_total; raised to
     * max_body). retry_after_s: the Retry-After of those answers (0 = 1). */
    int max_inflight;
    size_t max_conn_body;
    int retry_after_s;
    /* A connection is idle when no task of it is in a worker and no byte moved either way
     * for idle_timeout_ms, whatever streams it has open; idle connections are closed.
     * 0 = never. */
    int idle_timeout_ms;
    /* Deadlines, each 0 = none. header_timeout_ms: a request's headers must be complete
     * this long after their first byte, and a new connection's first request's headers
     * this long after it was accepted; past it 408 and the connection closes.
     * body_timeout_ms: a body that moves no byte for this long, or that arrives slower
     * than body_min_rate bytes a second on average once body_timeout_ms have passed since
     * its headers, is answered 408 (HTTP/1.1, then the connection closes) or reset
     * (HTTP/2). write_timeout_ms: an answer that makes no progress this long (the client
     * reads nothing, or keeps its HTTP/2 window shut) ends its connection (HTTP/1.1, or
     * output stuck in the socket) or its stream (HTTP/2). */
    int header_timeout_ms;
    int body_timeout_ms;
    size_t body_min_rate;
    int write_timeout_ms;
    int max_connections;        /* over it new connections are closed at once, except: */
    /* Connections accepted past max_connections for health checks and metrics: such a
     * connection gets one request, which must be one on_loop answers, within
     * RESERVED_HEADER_MS; anything else is answered 503 and closed. 0 = 4. */
    int reserved_connections;
    /* HTTP/2: streams of one connection that may be receiving a body at once; a stream
     * past it is answered 503 with Retry-After before any of its body is read. 0 = 100. */
    int max_conn_body_streams;
    /* Answers held in memory while they are sent (the arena of every request between its
     * handler and its last byte), per connection and for all of them. Past either, a new
     * request on that connection is answered 503 with Retry-After without running.
     * 0 = 256 MiB and 1 GiB. */
    size_t max_conn_resp;
    size_t max_resp_total;
    /* Optional: called on the loop when a request that has a body has its headers, before
     * any byte of the body is accepted (authentication, the route, the method, the tenant
     * header). 0 accepts; otherwise resp holds the answer (allocated from req->arena or
     * static), which is sent at once, and the body is never read (HTTP/1.1: the connection
     * closes after the answer). Must not block. */
    int (*admit)(void *ud, pt_req *req, pt_resp *resp);
    const char *tls_cert_file;  /* both set: TLS with ALPN h2, http/1.1 */
    const char *tls_key_file;
    const char *tls_client_ca_file; /* optional, with TLS: require client certificates that
                                     * these CA certificates (PEM) sign */
    /* Optional: the header kept as pt_req.tenant (any case); not copied: it must outlive
     * the server. */
    const char *tenant_header;
    /* Optional: 1 when dispatch answers req at once without blocking, so it runs on the
     * event loop: health checks and metrics stay answered while every worker waits on a
     * slow store. */
    int (*on_loop)(void *ud, const pt_req *req);
    /* Optional: 1 for a heavy request (a remote read). Heavy requests, and the pulls of
     * their produced bodies, run on at most workers - 1 workers at once, so a light one
     * (a remote write) always finds a worker however many reads are running. */
    int (*heavy)(void *ud, const pt_req *req);
    /* Optional: where the server counts (the daemon's metrics); NULL = a pt_http_stats of
     * the server's own. Must outlive the server. */
    pt_http_stats *stats;
} pt_server_opts;

typedef struct pt_server pt_server;

/* Binds and listens. NULL on failure with a message in err. */
pt_server *pt_server_new(const pt_server_opts *opts, pt_dispatch_fn fn, void *ud,
                         char *err, size_t errlen);
/* The bound port (useful with port 0). */
int pt_server_port(const pt_server *s);
/* Runs the event loop until pt_server_stop(); then stops accepting, finishes in-flight
 * requests (bounded wait), and returns 0. */
int pt_server_run(pt_server *s);
/* Async-signal-safe. */
void pt_server_stop(pt_server *s);
/* Async-signal-safe (SIGHUP): the loop reads the TLS certificate, key and client CA files
 * again. New connections get the new context, open ones keep theirs; when the files do not
 * load, the old context stays and an error is logged. Nothing happens without TLS. */
void pt_server_reload_tls(pt_server *s);
/* For a process that runs one server: SIGTERM and SIGINT stop s (pt_server_stop), SIGHUP
 * reloads its TLS files (pt_server_reload_tls), SIGPIPE is ignored. pt_server_signals(NULL)
 * before pt_server_free leaves the handlers nothing to act on. */
void pt_server_signals(pt_server *s);
void pt_server_free(pt_server *s);

/* Gauge of open connections, for /metrics. */
long pt_server_connections(const pt_server *s);

#endif
