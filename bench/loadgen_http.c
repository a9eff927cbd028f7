/* loadgen: the HTTP/1.1 client (loadgen.h). */
#include "loadgen.h"

/* ------------------------------------------------------------------------------------ */
/* HTTP/1.1 client                                                                      */

int lg_parse_url(const char *url, endpoint *ep)
{
    memset(ep, 0, sizeof *ep);
    if (strncmp(url, "http://", 7)) {
        fprintf(stderr, "loadgen: only http:// URLs are supported: %s\n", url);
        return -1;
    }
    const char *hp = url + 7, *slash = strchr(hp, '/');
    size_t hplen = slash ? (size_t)(slash - hp) : strlen(hp);
    if (hplen == 0 || hplen >= sizeof ep->hostport) {
        fprintf(stderr, "loadgen: bad host in URL %s\n", url);
        return -1;
    }
    memcpy(ep->hostport, hp, hplen);
    snprintf(ep->path, sizeof ep->path, "%s", slash ? slash : "/");

    char host[256], port[16] = "80";
    const char *colon;
    if (ep->hostport[0] == '[') {
        const char *close = strchr(ep->hostport, ']');
        if (!close)
            goto bad;
        snprintf(host, sizeof host, "%.*s", (int)(close - ep->hostport - 1), ep->hostport + 1);
        colon = close[1] == ':' ? close + 1 : NULL;
    } else {
        colon = strrchr(ep->hostport, ':');
        snprintf(host, sizeof host, "%.*s",
                 (int)(colon ? (size_t)(colon - ep->hostport) : hplen), ep->hostport);
    }
    if (colon) {
        if (!colon[1] || strlen(colon + 1) >= sizeof port)
            goto bad;
        snprintf(port, sizeof port, "%s", colon + 1);
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc) {
        fprintf(stderr, "loadgen: cannot resolve %s:%s: %s\n", host, port, gai_strerror(rc));
        return -1;
    }
    memcpy(&ep->addr, res->ai_addr, res->ai_addrlen);
    ep->addrlen = res->ai_addrlen;
    ep->family = res->ai_family;
    freeaddrinfo(res);
    return 0;
bad:
    fprintf(stderr, "loadgen: bad host:port in URL %s\n", url);
    return -1;
}

static int on_body(http_parser *p, const char *at, size_t len)
{
    conn *c = p->data;
    /* Keep the start of an error body: that is where a receiver puts the reason. */
    if (p->status_code >= 300 && c->errlen < ERRBODY_MAX) {
        size_t n = len < ERRBODY_MAX - c->errlen ? len : ERRBODY_MAX - c->errlen;
        memcpy(c->errbody + c->errlen, at, n);
        c->errlen += n;
        c->errbody[c->errlen] = 0;
    }
    return 0;
}

static int on_message_complete(http_parser *p)
{
    conn *c = p->data;
    if (p->status_code < 200) /* 1xx: an interim response; the real one follows */
        return 0;
    c->done = 1;
    c->keep = http_should_keep_alive(p);
    return 0;
}

static const http_parser_settings parser_settings = {
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

void lg_conn_close(conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->used = 0;
}

int lg_conn_open(conn *c, const endpoint *ep, double timeout_s)
{
    c->fd = socket(ep->family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        goto fail;
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (timeout_s > 0) {
        time_t whole = (time_t)timeout_s;
        struct timeval tv = {whole, (suseconds_t)((timeout_s - (double)whole) * 1e6)};
        setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
    if (connect(c->fd, (const struct sockaddr *)&ep->addr, ep->addrlen) < 0)
        goto fail;
    return 0;
fail:
    snprintf(c->err, sizeof c->err, "connect: %s", strerror(errno));
    lg_conn_close(c);
    return -1;
}

static int send_all(int fd, struct iovec *iov, int iovcnt)
{
    while (iovcnt > 0) {
        ssize_t w = writev(fd, iov, iovcnt);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        size_t left = (size_t)w;
        while (iovcnt > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            iovcnt--;
        }
        if (iovcnt > 0) {
            iov->iov_base = (char *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return 0;
}

/* One request/response exchange on an open connection. Returns the HTTP status, or -1
 * with c->err set; *got tells whether any response byte arrived. */
int lg_exchange(conn *c, const char *hdr, size_t hdrlen, const body *b, int *got)
{
    struct iovec iov[2] = {{(void *)hdr, hdrlen}, {b->p, b->n}};
    *got = 0;
    c->used = 1;
    if (send_all(c->fd, iov, 2) < 0) {
        snprintf(c->err, sizeof c->err, "send: %s", strerror(errno));
        return -1;
    }
    http_parser_init(&c->hp, HTTP_RESPONSE);
    c->hp.data = c;
    c->done = 0;
    c->keep = 0;
    c->errlen = 0;
    c->errbody[0] = 0;
    while (!c->done) {
        ssize_t n = recv(c->fd, c->buf, sizeof c->buf, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            snprintf(c->err, sizeof c->err, "recv: %s",
                     errno == EAGAIN || errno == EWOULDBLOCK ? "timed out" : strerror(errno));
            return -1;
        }
        if (n == 0) {
            /* EOF ends a close-delimited body; anywhere else it is a failure. */
            http_parser_execute(&c->hp, &parser_settings, NULL, 0);
            if (c->done)
                break;
            snprintf(c->err, sizeof c->err, "connection closed by peer%s",
                     *got ? " mid-response" : " before a response");
            return -1;
        }
        *got = 1;
        size_t used = http_parser_execute(&c->hp, &parser_settings, c->buf, (size_t)n);
        if (HTTP_PARSER_ERRNO(&c->hp) != HPE_OK) {
            snprintf(c->err, sizeof c->err, "bad HTTP response: %s",
                     http_errno_description(HTTP_PARSER_ERRNO(&c->hp)));
            return -1;
        }
        if (c->done && used != (size_t)n) /* we never pipeline: nothing may follow */
            c->keep = 0;
    }
    return (int)c->hp.status_code;
}

