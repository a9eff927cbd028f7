/*
 * One connection: its input and output buffers, reads and writes on its socket (plain or
 * TLS), the TLS handshake step, the choice between HTTP/1.1 and h2c from the first bytes,
 * lingering after an error answer, and its state (enum pt_conn_state in server_int.h).
 *
 * The protocol spoken is a pt_proto_ops table the loop handed over (pt_server.h1_ops,
 * h2_ops); the protocol modules consume bytes and append to the output, this module does
 * the socket I/O for them.
 */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "error.h"
#include "server_int.h"

#define IN_APPEND_MAX (64 * 1024)     /* bytes kept while the protocol is undecided */
#define IN_APPEND_STEP 4096           /* room read into at the end of kept input */
#define OUT_MAX (4 * 1024 * 1024)     /* output buffer ceiling (headers, HTTP/2 frames) */
#define LINGER_MS 3000
#define LINGER_MAX (64u << 20)

/* ----------------------------------------------------------------------------- output */

int pt_conn_out_empty(const pt_conn *c)
{
    return pt_buf_used(&c->out) == 0 && c->out_body_len == 0;
}

uint8_t *pt_conn_out_reserve(pt_conn *c, size_t n)
{
    return pt_buf_room(&c->out, n);
}

int pt_conn_out_append(pt_conn *c, const void *p, size_t n)
{
    return pt_buf_append(&c->out, p, n);
}

static void out_consume(pt_conn *c, size_t n)
{
    size_t a = pt_buf_used(&c->out);
    pt_buf_consume(&c->out, n);
    if (n <= a)
        return; /* no body in flight: out_body may be NULL */
    n -= a;
    c->out_body += n;
    c->out_body_len -= n;
    if (!c->out_body_len)
        c->out_body = NULL;
}

/* Writes what it can. 0: all written or the socket is full; < 0: the connection is dead. */
static int conn_flush(pt_conn *c)
{
    while (!pt_conn_out_empty(c)) {
        ssize_t n;
        if (c->ssl) {
            /* Same bytes on a retry, as OpenSSL requires after WANT_WRITE. */
            if (pt_buf_used(&c->out))
                n = pt_tls_write(c->ssl, pt_buf_data(&c->out), pt_buf_used(&c->out));
            else
                n = pt_tls_write(c->ssl, c->out_body, c->out_body_len);
            if (n == PT_IO_AGAIN)
                return 0;
            if (n < 0)
                return -1;
        } else {
            struct iovec iov[2];
            int k = 0;
            if (pt_buf_used(&c->out))
                iov[k++] = (struct iovec){c->out.p + c->out.off, pt_buf_used(&c->out)};
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
        c->last_ms = c->wrote_ms = c->srv->now_ms;
    }
    return 0;
}

/* ------------------------------------------------------------------------ connections */

void pt_conn_advance(pt_conn *c, int state)
{
    /* CLOSED only through pt_conn_close, which puts the connection on the close list. */
    assert(state < PT_CONN_CLOSED);
    if (state > c->state)
        c->state = state;
}

void pt_conn_close(pt_conn *c)
{
    if (c->state == PT_CONN_CLOSED)
        return;
    c->state = PT_CONN_CLOSED;
    c->cnext = c->srv->close_list;
    c->srv->close_list = c;
}

void pt_conn_free(pt_conn *c)
{
    pt_server *s = c->srv;
    if (c->ops && c->ops->free)
        c->ops->free(c);
    while (c->tasks)
        pt_task_free(c->tasks); /* one a worker holds is only detached, and cancelled */
    pt_tls_free(c->ssl, 0);
    if (c->fd >= 0) {
        /* Explicitly: close() alone leaves the registration while the file has other users. */
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
    }
    pt_slot *e = &s->slots[c->slot];
    e->conn = NULL;
    e->gen++;
    e->next_free = s->free_slot;
    s->free_slot = c->slot;
    PT_LIST_UNLINK(s->conns, c);
    atomic_fetch_sub(&s->nconns, 1);
    pt_buf_free(&c->in);
    pt_buf_free(&c->out);
    free(c);
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
        ops = c->srv->h1_ops;
    else if (n >= plen)
        ops = c->srv->h2_ops;
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

static void detect_eof(pt_conn *c)
{
    pt_conn_close(c);
}

static void detect_shutdown(pt_conn *c)
{
    pt_conn_advance(c, PT_CONN_CLOSE);
}

static void detect_timeout(pt_conn *c, pt_task *t, int kind)
{
    (void)t;
    (void)kind;
    pt_conn_close(c); /* not even a preface: nothing to answer */
}

static const pt_proto_ops detect_ops = {
    .name = "detect",
    .start = detect_start,
    .input = detect_input,
    .want_read = detect_want_read,
    .produce = detect_produce,
    .complete = NULL, /* never has a task */
    .piece = NULL,
    .eof = detect_eof,
    .hangup = NULL, /* always reads */
    .shutdown = detect_shutdown,
    .timeout = detect_timeout,
    .free = NULL,
};

pt_conn *pt_conn_new(pt_server *s, int fd)
{
    if (s->free_slot == PT_NO_SLOT)
        goto fail; /* over max_connections */
    pt_conn *c = calloc(1, sizeof(*c));
    if (!c)
        goto fail;
    c->srv = s;
    c->fd = fd;
    pt_buf_init(&c->in, PT_RBUF_CAP);
    pt_buf_init(&c->out, OUT_MAX);
    c->created_ms = c->last_ms = c->wrote_ms = s->now_ms;
    c->reserved = atomic_load(&s->nconns) >= s->opts.max_connections;
    c->slot = s->free_slot;
    c->gen = s->slots[c->slot].gen;
    if (s->ssl_ctx) {
        c->ssl = pt_tls_new(s->ssl_ctx, fd);
        if (!c->ssl)
            goto fail_conn;
        c->state = PT_CONN_HANDSHAKE;
    } else {
        c->ops = &detect_ops;
        c->state = PT_CONN_OPEN;
    }
    s->free_slot = s->slots[c->slot].next_free;
    s->slots[c->slot].conn = c;
    PT_LIST_PUSH(s->conns, c);
    atomic_fetch_add(&s->nconns, 1);
    return c;

fail_conn:
    free(c);
fail:
    return NULL;
}

static int handshake_step(pt_conn *c)
{
    int r = pt_tls_handshake(c->ssl);
    if (r == PT_IO_AGAIN)
        return 1;
    if (r < 0) {
        pt_conn_close(c);
        return 1;
    }
    c->state = PT_CONN_OPEN;
    c->last_ms = c->srv->now_ms;
    /* No ALPN: the client may still speak h2 with prior knowledge, so look at the bytes. */
    int alpn = pt_tls_alpn(c->ssl);
    c->ops = alpn == 1 ? c->srv->h2_ops : alpn == 0 ? c->srv->h1_ops : &detect_ops;
    if (c->ops->start(c) < 0) {
        pt_conn_close(c);
        return 1;
    }
    c->rd_ready = 1; /* records may already sit decrypted inside OpenSSL */
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
        if (used < 0 || c->state == PT_CONN_CLOSED)
            return -1;
        off += (size_t)used;
        if (c->ops == before)
            break;
    }
    if (off < n && pt_buf_append(&c->in, p + off, n - off) != 0)
        return -1;
    return 0;
}

/* One read. 1: progress (data or EOF handled), 0: nothing to read, -1: closed. */
static int conn_read(pt_conn *c)
{
    pt_server *s = c->srv;
    int append = pt_buf_used(&c->in) > 0;
    uint8_t *buf = s->rbuf;
    size_t cap = s->rbuf_cap;
    if (append) {
        /* The protocol wants more bytes before it can use what is buffered. */
        if (pt_buf_used(&c->in) > IN_APPEND_MAX - IN_APPEND_STEP ||
            !(buf = pt_buf_room(&c->in, IN_APPEND_STEP)))
            goto fail;
        cap = c->in.cap - c->in.len;
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
        return c->state == PT_CONN_CLOSED ? -1 : 1;
    }
    c->last_ms = s->now_ms;
    /* A short read drained the socket: the next bytes bring a new edge. Not so for TLS
     * (OpenSSL may hold a decrypted record) or after a hang-up (EOF brings no new edge). */
    if (!c->ssl && (size_t)n < cap && !c->peer_hup)
        c->rd_ready = 0;
    if (append) {
        pt_buf_commit(&c->in, (size_t)n);
        return 1;
    }
    if (feed(c, buf, (size_t)n) < 0)
        goto fail;
    return 1;

fail:
    pt_conn_close(c);
    return -1;
}

/* 1: progress, 0: nothing to do, -1: closed. */
static int conn_input(pt_conn *c)
{
    if (pt_buf_used(&c->in)) {
        const pt_proto_ops *before = c->ops;
        ssize_t n = c->ops->input(c, pt_buf_data(&c->in), pt_buf_used(&c->in));
        if (n < 0) {
            pt_conn_close(c);
            return -1;
        }
        if (c->state == PT_CONN_CLOSED)
            return -1;
        pt_buf_consume(&c->in, (size_t)n);
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
    pt_conn_close(c);
}

/* The output is flushed and the connection is to be closed. */
static void conn_finish(pt_conn *c)
{
    if (c->state == PT_CONN_CLOSE) {
        pt_tls_free(c->ssl, 1); /* close_notify: the peer knows the answer is complete */
        c->ssl = NULL;
        pt_conn_close(c);
        return;
    }
    /* After an error answer the client may still be sending (a body we refused). Closing
     * with unread input would reset the connection and could destroy the answer before
     * the client reads it, so half-close and discard input for a while. */
    shutdown(c->fd, SHUT_WR);
    c->state = PT_CONN_LINGERING;
    c->linger_until_ms = c->srv->now_ms + LINGER_MS;
    linger_read(c);
}

/* Output takes priority over input: nothing is read while a peer is not reading what we
 * send. */
void pt_conn_drive(pt_conn *c)
{
    while (c->state != PT_CONN_CLOSED) {
        if (c->state == PT_CONN_HANDSHAKE && handshake_step(c) != 0)
            return;
        if (c->state == PT_CONN_LINGERING) {
            linger_read(c);
            return;
        }
        int active = 0;
        if (pt_conn_out_empty(c) && c->ops->produce(c) < 0) {
            pt_conn_close(c);
            return;
        }
        if (c->state == PT_CONN_CLOSED)
            return;
        if (!pt_conn_out_empty(c)) {
            active = 1;
            if (conn_flush(c) < 0) {
                pt_conn_close(c);
                return;
            }
            if (!pt_conn_out_empty(c))
                return; /* the EPOLLOUT edge resumes us */
        }
        if (c->state == PT_CONN_CLOSE || c->state == PT_CONN_LINGER) {
            conn_finish(c);
            return;
        }
        if (c->ops->want_read(c)) {
            int r = conn_input(c);
            if (r < 0)
                return;
            active |= r;
        } else if (c->peer_hup && c->ops->hangup) {
            /* Whether the hang-up came with the request's last bytes or later: nothing
             * reads until the answer is out, so the protocol hears of it now. */
            c->ops->hangup(c);
            if (c->state == PT_CONN_CLOSED)
                return;
        }
        if (!active)
            return;
    }
}
