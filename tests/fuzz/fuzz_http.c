/* libFuzzer: raw bytes on a connection to the real server (HTTP/1.1 parser, h2c through
 * nghttp2 when the input starts with the HTTP/2 preface). Each input is one connection:
 * send, wait up to ANSWER_WAIT_MS for an answer to start, half-close, read until the server
 * closes. GET /s... answers with a produced body
 * (pt_producer) of as many 1000-byte pieces as the path is long; a body sent to /x... is
 * refused on its headers. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "http.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ANSWER_WAIT_MS 2

static pt_server *srv;
static int port;

static int pieces_pull(void *ud, pt_buf *out, size_t want)
{
    size_t *left = ud;
    size_t n = want < 1000 ? want : 1000;
    uint8_t *p = pt_buf_room(out, n);
    if (!p)
        return -1;
    memset(p, 'p', n);
    pt_buf_commit(out, n);
    return --*left ? PT_PULL_MORE : PT_PULL_END;
}

static void echo(void *ud, pt_req *req, pt_resp *resp)
{
    (void)ud;
    size_t *left;
    if (req->method == PT_M_GET && req->path[0] == '/' && req->path[1] == 's' &&
        (left = pt_arena_alloc(req->arena, sizeof(*left)))) {
        *left = strlen(req->path);
        resp->producer = (pt_producer){pieces_pull, NULL, left};
        return;
    }
    resp->status = req->method == PT_M_POST ? 200 : 404;
    resp->content_type = "application/octet-stream";
    resp->body = req->body;
    resp->body_len = req->body_len;
}

/* Refuses a request with a body to /x... on its headers, as the daemon's admission would
 * without credentials. */
static int admit(void *ud, pt_req *req, pt_resp *resp)
{
    (void)ud;
    if (req->path[0] != '/' || req->path[1] != 'x')
        return 0;
    resp->status = 401;
    resp->body = (const uint8_t *)"no\n";
    resp->body_len = 3;
    return -12;
}

static void *run(void *arg)
{
    pt_server_run(arg);
    return NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    char err[256];
    pt_server_opts o = {.listen_address = "127.0.0.1:0", .workers = 2, .max_body = 1 << 16,
                        .max_header_bytes = 8192, .idle_timeout_ms = 2000, .max_connections = 64,
                        .header_timeout_ms = 1000, .body_timeout_ms = 1000, .body_min_rate = 1024,
                        .write_timeout_ms = 1000, .max_conn_body_streams = 4, .admit = admit};
    srv = pt_server_new(&o, echo, NULL, err, sizeof(err));
    if (!srv) {
        fprintf(stderr, "fuzz_http: %s\n", err);
        abort();
    }
    port = pt_server_port(srv);
    pthread_t th;
    pthread_create(&th, NULL, run, srv);
    pthread_detach(th);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {3, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
        size_t off = 0;
        while (off < size) {
            ssize_t n = send(fd, data + off, size - off, MSG_NOSIGNAL);
            if (n <= 0)
                break;
            off += (size_t)n;
        }
        /* The server takes a client that half-closes before its answer is ready for gone
         * and cancels the request in its worker: wait a moment for the answer to start, so
         * answers and produced bodies stay covered (an input without one pays the wait). */
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        poll(&pfd, 1, ANSWER_WAIT_MS);
        shutdown(fd, SHUT_WR);
        char buf[65536];
        while (recv(fd, buf, sizeof(buf), 0) > 0)
            ;
    }
    close(fd);
    return 0;
}
