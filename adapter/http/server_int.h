/*
 * Internals of the HTTP front end. Nothing here is part of the public contract (http.h).
 *
 * Modules, in order: a module calls only modules above it (calls through a pt_proto_ops
 * table do not count; that is how the connection layer drives a protocol it never names).
 *
 *   tls.c     pt_tls_*     OpenSSL context, handshake, read, write on a socket
 *   task.c    pt_task_*    one request and its response: kept headers, target, body under
 *                          its ceilings, the task cache, handing tasks to the workers and
 *                          posting them back
 *   conn.c    pt_conn_*    one connection: input and output buffers, read, flush, the TLS
 *                          handshake step, protocol detection, lingering, its state machine
 *   http1.c   pt_http1_*   HTTP/1.1 (libhttp-parser), no I/O: bytes in, conn output out
 *   http2.c   pt_http2_*   HTTP/2 (nghttp2 session from memory), no I/O
 *   server.c  pt_server_*  the loop: epoll, listener, accept, sweep, stop, worker threads,
 *                          completions; the public API of http.h. It hands the protocol
 *                          tables to the connection layer (pt_server.h1_ops, h2_ops).
 *
 * Threads: one loop thread owns every socket, TLS object, nghttp2 session, connection and
 * the task lists. Workers see a task only while it is queued to them (pt_task_dispatch,
 * pt_task_pull, a producer's done) and until they post it back; during that time they
 * touch only task->req, resp, arena, body, piece and pulled, and the loop touches only the
 * task's list links and its atomic cancelled flag (which handlers read through
 * req->cancelled). The state does not change meanwhile.
 */
#ifndef PT_SERVER_INT_H
#define PT_SERVER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include <http_parser.h>
#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>

#include "arena.h"
#include "buf.h"
#include "http.h"

typedef struct pt_task pt_task;
typedef struct pt_conn pt_conn;
typedef struct pt_proto_ops pt_proto_ops;

/* Return codes of the internal I/O helpers (not the daemon's error space). */
enum { PT_IO_AGAIN = -1, PT_IO_ERR = -2 };

/* Which side holds a task: the loop (RECV, SEND) or a worker (QUEUED, PULL, CANCEL),
 * and for a worker what to do with it. */
enum pt_task_state {
    PT_TASK_RECV = 0, /* headers and body arriving */
    PT_TASK_QUEUED,   /* a worker runs the dispatch callback */
    PT_TASK_SEND,     /* response being written; no worker holds it */
    PT_TASK_PULL,     /* a worker runs the producer's pull for the next piece */
    PT_TASK_CANCEL,   /* a worker runs the producer's done(cancelled=1); then it is freed */
};

#define PT_PIECE_MAX (64 * 1024) /* a producer's piece, and the room that asks for one */

/* Whether an answer with this status has a body (none for 1xx, 204 and 304). */
static inline int pt_status_has_body(int status)
{
    return status >= 200 && status != 204 && status != 304;
}

/* One request and its response. */
struct pt_task {
    pt_server *srv;
    pt_task *qnext;         /* work queue / completion queue / cache link */
    pt_conn *conn;          /* NULL once detached from its connection (loop thread only) */
    pt_task *prev, *next;   /* the connection's task list (loop thread only) */
    uint32_t slot, gen;     /* which connection, checked when a worker posts the task back */
    int32_t stream_id;      /* HTTP/2 stream; 0 for HTTP/1 */
    int heavy;              /* pt_server_opts.heavy said so at dispatch */
    int admitted;           /* counted in pt_server.requests until posted back */
    int state;              /* enum pt_task_state; written by the loop only */
    atomic_int cancelled;   /* set by the loop when nobody waits for the answer any more */
    int early_rv;           /* HTTP/2: answer this error code without calling dispatch
                             * (PT_ETOOLARGE, PT_EHEADERS, ...); 0 when none */
    int rejected;           /* HTTP/2: the early answer has been submitted */
    size_t hdr_bytes;       /* request header bytes seen, against max_header_bytes */
    uint64_t declared_len;  /* HTTP/2: content-length of the request, UINT64_MAX if none */
    /* Deadlines (loop thread): when the request's first header byte came, when its headers
     * were complete (0 before), and the last progress of its body or of its answer. */
    int64_t start_ms, headers_ms, touched_ms;
    int body_stream;        /* HTTP/2: counted in its connection's body_streams */
    size_t held;            /* arena bytes counted in the answers held (conn and server) */
    pt_buf body;            /* kept with the cached task for reuse; cap counts in body_bytes */
    size_t sent;            /* HTTP/2: response body bytes handed to nghttp2 */
    /* A produced body: the piece the last pull made (ceiling PT_PIECE_MAX), what that pull
     * returned (PT_PULL_MORE, PT_PULL_END, < 0), and whether done has been called. */
    pt_buf piece;
    int pulled;
    int prefetched; /* the worker that ran the handler pulled the first piece too */
    int producer_done;
    pt_arena arena;
    pt_req req;
    pt_resp resp;
};

/*
 * A protocol spoken on a connection. The connection layer calls these (the loop calls
 * complete and piece); none of them does socket I/O itself: they consume bytes handed in
 * and append to the connection's output.
 */
struct pt_proto_ops {
    const char *name;
    int (*start)(pt_conn *c);
    /* Consumes input; returns the bytes used (fewer than n when the protocol pauses, e.g.
     * HTTP/1 after a complete request) or < 0 to drop the connection at once. */
    ssize_t (*input)(pt_conn *c, const uint8_t *p, size_t n);
    /* Whether more input is wanted now (not while a request is in a worker for HTTP/1). */
    int (*want_read)(const pt_conn *c);
    /* Called whenever the output is empty: append more (HTTP/2 frames) or note that the
     * last response has been fully written. < 0 drops the connection. */
    int (*produce)(pt_conn *c);
    /* A worker ran the dispatch callback for t, which belongs to c. NULL for a protocol
     * that never makes a task. */
    void (*complete)(pt_conn *c, pt_task *t);
    /* A worker pulled the next piece of t's produced body into t->piece (t->pulled says
     * whether it was the last, or failed). NULL for a protocol that never asks. */
    void (*piece)(pt_conn *c, pt_task *t);
    /* The peer closed its side. */
    void (*eof)(pt_conn *c);
    /* The peer hung up (FIN, reset) while want_read says no, so no read will notice before
     * an answer is written: give up what nobody waits for (HTTP/1.1: a request in a
     * worker). Called at every drive until the state changes. NULL for a protocol that
     * reads all along. */
    void (*hangup)(pt_conn *c);
    /* Stop taking requests: finish those in progress, then close (server stop, idle). */
    void (*shutdown)(pt_conn *c);
    /* A deadline passed (enum pt_timeout_kind of http.h): for the request t, or for the
     * connection when t is NULL (no request yet, output stuck). The protocol answers or
     * resets what it can and ends what it must; the sweep comes back if nothing changed. */
    void (*timeout)(pt_conn *c, pt_task *t, int kind);
    void (*free)(pt_conn *c);
};

extern const pt_proto_ops pt_http1_ops;
extern const pt_proto_ops pt_http2_ops;

/*
 * A connection's life. It only moves down this list (pt_conn_advance), except that any
 * state may end in PT_CONN_CLOSED at once (I/O error, fatal protocol error, timeouts, the
 * end of a stop):
 *
 *   HANDSHAKE --handshake done--> OPEN            (plain connections start OPEN)
 *   OPEN --shutdown(): server stop, idle timeout--> STOPPING
 *   OPEN, STOPPING --protocol finished (no keep-alive, session over)--> CLOSE
 *   OPEN, STOPPING, CLOSE --an error answer the peer may still be sending into--> LINGER
 *   CLOSE --output flushed--> CLOSED             (TLS close_notify first)
 *   LINGER --output flushed, write side shut--> LINGERING
 *   LINGERING --EOF, error, LINGER_MAX bytes, LINGER_MS--> CLOSED
 *   HANDSHAKE --HANDSHAKE_MS, stop--> CLOSED
 *
 * CLOSED means "on the close list": the loop frees it at the end of its turn, never from
 * inside a callback chain that may still use it.
 */
enum pt_conn_state {
    PT_CONN_HANDSHAKE = 0, /* TLS handshake running; ops is NULL */
    PT_CONN_OPEN,          /* the protocol reads requests and writes answers */
    PT_CONN_STOPPING,      /* winding down: requests in progress finish, no new ones */
    PT_CONN_CLOSE,         /* flush the output, then close */
    PT_CONN_LINGER,        /* flush, half-close, then read and drop input for a while */
    PT_CONN_LINGERING,     /* write side shut; discarding input */
    PT_CONN_CLOSED,        /* on the close list */
};

/* One request at a time: READ -> WORK -> SEND (or STREAM -> SEND) -> READ; DEAD after an
 * error answer. */
enum pt_h1_phase {
    PT_H1_READ = 0, /* parsing a request, or waiting for one */
    PT_H1_WORK,     /* the complete request is in a worker */
    PT_H1_SEND,     /* the whole answer is queued; once written the next request is parsed */
    PT_H1_STREAM,   /* the answer's body is being produced, chunk by chunk */
    PT_H1_DEAD,     /* a protocol error was answered; nothing more is read */
};

typedef struct pt_h1_state {
    http_parser parser;
    pt_task *cur;           /* request being received, processed or answered */
    int phase;              /* enum pt_h1_phase */
    int fresh;              /* parser must be (re)initialised before the next byte */
    int in_message;         /* between message begin and message complete */
    int keep_alive;
    int http11;             /* the request is HTTP/1.1 (else 1.0): chunked answers allowed */
    int expect_continue;    /* "Expect: 100-continue" in the current request */
    /* The request's error (a pt error code, and what exactly was wrong or NULL): set by a
     * callback or a check, answered, then the connection closes. */
    int error_rv;
    const char *error_msg;
    int hosts, te_lines;    /* Host and Transfer-Encoding field lines of the request */
    int headers_done;       /* past the header section: fields now are trailers */
    int refused;            /* pt_task_admit refused the request; its answer is in cur */
    /* Chunk framing, which the non-strict parser does not check after a chunk's data: the
     * bytes of the chunk not delivered yet, and how many bytes of the CRLF that must follow
     * it are still to be seen (2, 1, 0), maybe at the start of the next input. */
    uint64_t chunk_left;
    int crlf_due;
    const uint8_t *in_end;  /* end of the input being parsed, during http_parser_execute */
    /* Scratch for the URL and the current header value, which may arrive in pieces. */
    pt_buf sb;              /* ceiling max_header_bytes, which counts these bytes too */
    size_t url_len, val_start;
    char name[40];          /* current header name; longer names are never ones we keep */
    size_t name_len;
    int in_value;
    size_t hdr_bytes;
} pt_h1_state;

struct pt_conn {
    pt_server *srv;
    const pt_proto_ops *ops; /* NULL while the TLS handshake runs */
    int fd;
    uint32_t slot, gen;
    SSL *ssl;
    int state;               /* enum pt_conn_state */
    /* Independent of the state: what the read side has seen, and list membership. */
    int rd_ready;            /* readable edge seen and not yet drained (edge-triggered) */
    int peer_hup;            /* the peer half-closed or reset (epoll's RDHUP, HUP, ERR):
                              * read until EOF, no short-read shortcut */
    int peer_eof;            /* read returned EOF */
    int dirty;               /* on the list of connections to drive after completions */
    int64_t created_ms, last_ms, linger_until_ms;
    int64_t wrote_ms;        /* the last time output bytes left */
    int reserved;            /* accepted past max_connections: health checks only */
    unsigned requests;       /* requests whose headers were complete */
    int body_streams;        /* HTTP/2 streams receiving a body */
    size_t resp_held;        /* answers held by its tasks (max_conn_resp) */
    size_t linger_bytes;
    /* Input the protocol did not consume yet (a paused HTTP/1 parser, an undecided
     * preface), at most PT_RBUF_CAP. Fresh reads go to the server's shared buffer when
     * this is empty. */
    pt_buf in;
    /* Output: out (headers, frames; ceiling OUT_MAX), then out_body (a response body,
     * sent without a copy). */
    pt_buf out;
    const uint8_t *out_body;
    size_t out_body_len;
    pt_task *tasks;          /* requests of this connection not yet finished */
    size_t body_bytes;       /* capacity of its tasks' body buffers, against max_conn_body */
    int ntasks;
    pt_conn *prev, *next;    /* all connections */
    pt_conn *cnext;          /* close list */
    pt_conn *dnext;          /* list of connections to drive after completions */
    pt_h1_state h1;
    nghttp2_session *h2;
};

typedef struct pt_slot {
    pt_conn *conn;
    uint32_t gen;
    uint32_t next_free;
} pt_slot;

struct pt_server {
    pt_server_opts opts;     /* strings point into the copies below */
    pt_http_stats *stats;    /* opts.stats, or own_stats */
    pt_http_stats own_stats;
    char *listen_copy, *cert_copy, *key_copy, *ca_copy;
    pt_dispatch_fn fn;
    int (*on_loop)(void *ud, const pt_req *req);
    size_t body_bytes; /* capacity of every task's body buffer (loop thread only) */
    size_t resp_held;  /* answers held by every task (loop thread only; max_resp_total) */
    void *ud;
    size_t arena_max;
    int lfd, epfd, wake_fd;
    int port;
    int listening;           /* lfd registered with epoll */
    int64_t accept_resume_ms;
    SSL_CTX *ssl_ctx;
    const pt_proto_ops *h1_ops, *h2_ops; /* handed to the connection layer by server.c */
    nghttp2_session_callbacks *h2cb;
    nghttp2_option *h2opt;

    pt_slot *slots;
    uint32_t nslots, free_slot;
    pt_conn *conns;
    pt_conn *close_list, *dirty_list;
    atomic_long nconns;

    /* workers */
    pthread_t *threads;
    int nthreads;
    pthread_mutex_t wmu;
    pthread_cond_t wcv;
    pt_task *whead, *wtail;
    int heavy_running, heavy_max; /* heavy tasks in workers now; the most at once */
    int wstop;

    /* completions, posted by workers */
    pthread_mutex_t cmu;
    pt_task *chead, *ctail;
    int csignaled;

    atomic_int stop_req;
    atomic_int reload_req; /* pt_server_reload_tls asked; the loop reloads */

    /* loop thread only */
    uint8_t *rbuf;
    size_t rbuf_cap;
    int64_t now_ms;
    time_t date_sec;
    char date_line[48];      /* "Date: ...\r\n" */
    size_t date_len;
    pt_task *cache;
    int ncache;
    long inflight;           /* tasks handed to workers and not yet posted back */
    long requests;           /* of them, requests admitted (against max_inflight) */
    char retry_after[16];    /* the Retry-After value of a 503 for overload */
    int stopping;
    int64_t stop_deadline_ms, next_sweep_ms;
};

/* Intrusive doubly linked lists (the server's connections, a connection's tasks): an element
 * x has prev and next, head points at the first. */
#define PT_LIST_PUSH(head, x)                                                                  \
    do {                                                                                       \
        (x)->prev = NULL;                                                                      \
        (x)->next = (head);                                                                    \
        if (head)                                                                              \
            (head)->prev = (x);                                                                \
        (head) = (x);                                                                          \
    } while (0)
#define PT_LIST_UNLINK(head, x)                                                                \
    do {                                                                                       \
        if ((x)->prev)                                                                         \
            (x)->prev->next = (x)->next;                                                       \
        else                                                                                   \
            (head) = (x)->next;                                                                \
        if ((x)->next)                                                                         \
            (x)->next->prev = (x)->prev;                                                       \
        (x)->prev = (x)->next = NULL;                                                          \
    } while (0)

#define PT_RBUF_CAP (128 * 1024) /* the loop's shared read buffer */
#define PT_NO_SLOT UINT32_MAX     /* end of the free slot list */

/* task.c (loop thread, except pt_task_work). */
pt_task *pt_task_new(pt_conn *c, int proto);
/* The connection is done with t. A task a worker holds is detached and cancelled, and
 * freed when it comes back; a producer that has not had its done is sent to a worker for
 * it first; otherwise the task goes to the cache. */
void pt_task_free(pt_task *t);
/* Whether a worker holds t (QUEUED, PULL, CANCEL). */
int pt_task_in_worker(const pt_task *t);
/* The request is complete: hands it to a worker (or answers it on the loop, on_loop), or
 * answers 503 when max_inflight requests are queued or running already. */
void pt_task_dispatch(pt_task *t);
/* Asks a worker for the next piece of t's produced body (t is SEND, its piece consumed). */
void pt_task_pull(pt_task *t);
/* What a worker does with a task it took from the queue (dispatch unless cancelled, pull,
 * done), then posts it back to the loop. */
void pt_task_work(pt_task *t);
/* Frees the cached tasks (server teardown). */
void pt_task_cache_free(pt_server *s);
/* Copies a request header the handlers care about into the arena; 0 when it is not one of
 * them, 1 when kept, < 0 on arena exhaustion. */
int pt_task_req_header(pt_task *t, const char *name, size_t nlen, const char *val,
                       size_t vlen);
/* Splits a request target into path and query, copied into the arena. */
int pt_task_req_target(pt_task *t, const char *u, size_t n);
int pt_task_method(const char *name, size_t n);
/* PT_ETOOLARGE over max_body, PT_EBUSY over max_conn_body (the connection's bodies) or
 * max_body_total (all bodies), PT_ENOMEM. */
int pt_task_body_append(pt_task *t, const uint8_t *p, size_t n);
/* A worker or the loop posted t back: it no longer counts against max_inflight. */
void pt_task_returned(pt_task *t);
/* Adds Retry-After to a 503 the server makes itself (r->headers has room). */
void pt_task_retry_after(const pt_server *s, pt_resp *r);
/* The request's headers are complete: 0 to go on with its body; otherwise t->resp holds
 * the answer to send at once without reading the body (a reserved connection asking for
 * anything but a health check, the application's admit refusing it, the connection's or
 * the server's answers past max_conn_resp / max_resp_total). has_body: the request says a
 * body follows. */
int pt_task_admit(pt_task *t, int has_body);
/* Fills t->resp with the server's own plain answer for error code rv. */
void pt_task_error_resp(pt_task *t, int rv, const char *text);
/* Fills t->resp with a 503 + Retry-After saying text, for the server limit reason (enum
 * pt_overload_reason of http.h, counted in the server's stats); returns PT_EBUSY. */
int pt_task_refuse(pt_task *t, int reason, const char *text);
/* A worker posted t back with its answer or a piece: counts the memory its arena holds
 * now in the answers held. */
void pt_task_hold(pt_task *t);
/* The plain-text body of an answer the server makes itself for error code rv (its status is
 * pt_error_http_status(rv)): the one place these texts come from. A protocol that knows
 * more precisely what was wrong says that instead (HTTP/1.1: the parser's complaint). */
const char *pt_task_status_text(int rv);
/* Whether a handler-supplied header name or value may be sent (no CR, LF, NUL; names
 * non-empty without ':' or spaces; no framing header). */
int pt_task_header_ok(const char *name, const char *value);

/* conn.c (loop thread). */
/* A connection on fd in the first free slot (OPEN, or HANDSHAKE with TLS); NULL when no
 * slot or memory is left (fd is then the caller's to close). */
pt_conn *pt_conn_new(pt_server *s, int fd);
/* Makes every bit of progress possible without blocking; called on socket events, after
 * completions and at stop. */
void pt_conn_drive(pt_conn *c);
/* Moves the connection on to state (never back; see enum pt_conn_state). */
void pt_conn_advance(pt_conn *c, int state);
/* Schedules the connection to be freed at a safe point (PT_CONN_CLOSED). */
void pt_conn_close(pt_conn *c);
/* Frees a closed connection: only the loop, at the end of a turn. */
void pt_conn_free(pt_conn *c);
/* Room for n more output bytes; NULL past OUT_MAX or without memory. Commit with
 * pt_buf_commit(&c->out, n). */
uint8_t *pt_conn_out_reserve(pt_conn *c, size_t n);
int pt_conn_out_append(pt_conn *c, const void *p, size_t n);
int pt_conn_out_empty(const pt_conn *c);

/* http2.c: the callbacks every server session shares. */
int pt_http2_callbacks(nghttp2_session_callbacks **out);
/* 1 when the linked libnghttp2 ends a session flooded with CONTINUATION frames (it has the
 * flood fixes the HTTP/2 limits rely on), 0 when it does not, -1 out of memory. */
int pt_http2_flood_guarded(void);

/* tls.c */
/* client_ca_file may be NULL; when set, clients must present a certificate it signs. */
SSL_CTX *pt_tls_ctx_new(const char *cert_file, const char *key_file, const char *client_ca_file,
                        char *err, size_t errlen);
void pt_tls_ctx_free(SSL_CTX *ctx);
SSL *pt_tls_new(SSL_CTX *ctx, int fd);
/* 0 when done, PT_IO_AGAIN, PT_IO_ERR. */
int pt_tls_handshake(SSL *ssl);
/* > 0 bytes, 0 at EOF, PT_IO_AGAIN, PT_IO_ERR. */
ssize_t pt_tls_read(SSL *ssl, void *buf, size_t n);
/* > 0 bytes, PT_IO_AGAIN, PT_IO_ERR. Retry after PT_IO_AGAIN with the same bytes. */
ssize_t pt_tls_write(SSL *ssl, const void *buf, size_t n);
/* 1 for h2, 0 for http/1.1, -1 when the client offered no ALPN we know. */
int pt_tls_alpn(SSL *ssl);
/* Best-effort close_notify, then frees. */
void pt_tls_free(SSL *ssl, int notify);

#endif
