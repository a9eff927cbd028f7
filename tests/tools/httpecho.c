/*
 * httpecho: pt_server with a toy dispatch, for tests/e2e/http_server.sh.
 *
 *   httpecho [--listen HOST:PORT] [--port N] [--max-body N] [--max-body-total N]
 *            [--max-header N]
 *            [--workers N] [--idle-timeout MS] [--max-connections N]
 *            [--tls-cert FILE --tls-key FILE]
 *
 * Prints the bound port on stdout, then serves until SIGTERM/SIGINT (exit 0).
 *   POST /echo  -> 200, the body back, application/octet-stream
 *   GET  /hello -> 200 "hello\n"
 *   GET  /info  -> 200, what the handler saw (method, path, query, headers, proto, tls)
 *   any  /slow  -> 200 "slow\n" after 200 ms in the worker
 *   any  /loop  -> 200 "loop\n", answered on the event loop (pt_server_opts.on_loop)
 *   any  /body-bytes -> 200, the request body bytes the server holds (pt_http_stats), on
 *                  the event loop too
 *   GET  /stream?bytes=N -> 200, N bytes of the line "promtable stream" repeated, produced
 *                  piece by piece (pt_producer); when it ends, a line on stderr:
 *                  "httpecho: stream done cancelled=C sent=BYTES"
 *   else        -> 404
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "http.h"

static pt_http_stats stats;

static void text(pt_resp *resp, int status, const char *s)
{
    resp->status = status;
    resp->content_type = "text/plain; charset=utf-8";
    resp->body = (const uint8_t *)s;
    resp->body_len = strlen(s);
}

static const char line[] = "promtable stream\n";

typedef struct stream {
    unsigned long long left, sent;
} stream;

static int stream_pull(void *ud, pt_buf *out, size_t want)
{
    stream *st = ud;
    size_t n = st->left < want ? (size_t)st->left : want;
    uint8_t *p = pt_buf_room(out, n);
    if (!p)
        return PT_ENOMEM;
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)line[(st->sent + i) % (sizeof(line) - 1)];
    pt_buf_commit(out, n);
    st->sent += n;
    st->left -= n;
    return st->left ? PT_PULL_MORE : PT_PULL_END;
}

static void stream_done(void *ud, int cancelled)
{
    stream *st = ud;
    fprintf(stderr, "httpecho: stream done cancelled=%d sent=%llu\n", cancelled, st->sent);
}

static void dispatch(void *ud, pt_req *req, pt_resp *resp)
{
    (void)ud;
    resp->headers[resp->nheaders++] =
        (pt_resp_header){"X-Proto", req->proto == PT_PROTO_HTTP2 ? "h2" : "http/1.1"};
    if (strcmp(req->path, "/echo") == 0 && req->method == PT_M_POST) {
        resp->content_type = "application/octet-stream";
        resp->body = req->body;
        resp->body_len = req->body_len;
    } else if (strcmp(req->path, "/hello") == 0 &&
               (req->method == PT_M_GET || req->method == PT_M_HEAD)) {
        text(resp, 200, "hello\n");
    } else if (strcmp(req->path, "/info") == 0) {
        char *buf = pt_arena_alloc(req->arena, 4096);
        if (!buf) {
            text(resp, 500, "arena\n");
            return;
        }
        snprintf(buf, 4096,
                 "method=%s\npath=%s\nquery=%s\ncontent_type=%s\ncontent_encoding=%s\n"
                 "authorization=%s\nuser_agent=%s\nrw_version=%s\nbody_len=%zu\nproto=%d\n"
                 "tls=%d\n",
                 req->method_name, req->path, req->query, req->content_type,
                 req->content_encoding, req->authorization, req->user_agent,
                 req->remote_write_version, req->body_len, req->proto, req->tls);
        text(resp, 200, buf);
    } else if (strcmp(req->path, "/stream") == 0 && strncmp(req->query, "bytes=", 6) == 0) {
        stream *st = pt_arena_alloc(req->arena, sizeof(*st));
        if (!st) {
            text(resp, 500, "arena\n");
            return;
        }
        st->left = strtoull(req->query + 6, NULL, 10);
        st->sent = 0;
        resp->content_type = "application/octet-stream";
        resp->producer = (pt_producer){stream_pull, stream_done, st};
    } else if (strcmp(req->path, "/loop") == 0) {
        text(resp, 200, "loop\n");
    } else if (strcmp(req->path, "/body-bytes") == 0) {
        char *buf = pt_arena_alloc(req->arena, 32);
        if (!buf) {
            text(resp, 500, "arena\n");
            return;
        }
        snprintf(buf, 32, "%lld\n", (long long)atomic_load(&stats.body_bytes));
        text(resp, 200, buf);
    } else if (strcmp(req->path, "/slow") == 0) {
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
        text(resp, 200, "slow\n");
    } else {
        text(resp, 404, "not found\n");
    }
}

static int on_loop(void *ud, const pt_req *req)
{
    (void)ud;
    return strcmp(req->path, "/loop") == 0 || strcmp(req->path, "/body-bytes") == 0;
}

static int usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--listen HOST:PORT] [--port N] [--max-body N] [--max-body-total N]\n"
            "       [--max-header N]\n"
            "       [--workers N] [--idle-timeout MS] [--max-connections N]\n"
            "       [--tls-cert FILE --tls-key FILE]\n",
            argv0);
    return 2;
}

int main(int argc, char **argv)
{
    char listen[300] = "127.0.0.1:0";
    pt_server_opts o = {.workers = 4, .max_body = 1 << 20, .max_header_bytes = 16384,
                        .on_loop = on_loop, .stats = &stats};
    for (int i = 1; i < argc; i += 2) { /* every option has a value */
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return usage(argv[0]);
        if (strcmp(a, "--listen") == 0)
            snprintf(listen, sizeof(listen), "%s", v);
        else if (strcmp(a, "--port") == 0)
            snprintf(listen, sizeof(listen), "127.0.0.1:%s", v);
        else if (strcmp(a, "--max-body") == 0)
            o.max_body = strtoull(v, NULL, 10);
        else if (strcmp(a, "--max-body-total") == 0)
            o.max_body_total = strtoull(v, NULL, 10);
        else if (strcmp(a, "--max-header") == 0)
            o.max_header_bytes = strtoull(v, NULL, 10);
        else if (strcmp(a, "--workers") == 0)
            o.workers = atoi(v);
        else if (strcmp(a, "--idle-timeout") == 0)
            o.idle_timeout_ms = atoi(v);
        else if (strcmp(a, "--max-connections") == 0)
            o.max_connections = atoi(v);
        else if (strcmp(a, "--tls-cert") == 0)
            o.tls_cert_file = v;
        else if (strcmp(a, "--tls-key") == 0)
            o.tls_key_file = v;
        else
            return usage(argv[0]);
    }
    o.listen_address = listen;

    char err[512];
    pt_server *s = pt_server_new(&o, dispatch, NULL, err, sizeof(err));
    if (!s) {
        fprintf(stderr, "httpecho: %s\n", err);
        return 1;
    }
    pt_server_signals(s);

    printf("%d\n", pt_server_port(s));
    fflush(stdout);
    int rv = pt_server_run(s);
    pt_server_signals(NULL);
    pt_server_free(s);
    return rv == 0 ? 0 : 1;
}
