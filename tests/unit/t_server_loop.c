/*
 * The event loop's connection lifetime, stepped one loop turn at a time (no threads).
 *
 * A connection whose open file still has another reference (a thread inside a syscall on
 * the fd, a fork, a /proc reader) keeps its epoll registration after close(), so a later
 * event would carry a pointer to freed memory (a use-after-free fuzz_http finds when the
 * loop gets this wrong). Here dup() stands in for that reference.
 */
#include "server.c"

#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>

#include "tap.h"

/* What the handler saw; workers write it, hence atomics. */
static struct {
    atomic_int calls;
    atomic_int cancelled;  /* *req->cancelled on entry */
    atomic_int waiting;    /* /wait: polling the flag now */
    atomic_int saw_cancel; /* /wait: the flag became 1 while it polled */
    atomic_int done;       /* /wait: returned */
    atomic_int give_up;    /* /wait: the test stops waiting for the cancel */
} handled;

static void answer(void *ud, pt_req *req, pt_resp *resp)
{
    (void)ud;
    atomic_fetch_add(&handled.calls, 1);
    atomic_store(&handled.cancelled, atomic_load(req->cancelled));
    resp->status = 204;
    if (strcmp(req->path, "/wait") != 0)
        return;
    /* A long storage read that stops once its client is gone, or when the test gives up
     * waiting for that (so a failing run still ends). */
    atomic_store(&handled.waiting, 1);
    while (!atomic_load(req->cancelled) && !atomic_load(&handled.give_up))
        usleep(1000);
    atomic_store(&handled.saw_cancel, atomic_load(req->cancelled));
    atomic_store(&handled.done, 1);
}

static int client(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Turns the loop until a connection other than `not` exists. */
static pt_conn *await_conn(pt_server *s, const pt_conn *not)
{
    for (int i = 0; i < 200; i++) {
        for (pt_conn *c = s->conns; c; c = c->next)
            if (c != not)
                return c;
        loop_once(s, 10);
    }
    return NULL;
}

static pt_server *server(void)
{
    char err[256];
    pt_server_opts o = {.listen_address = "127.0.0.1:0", .workers = 1, .max_connections = 4};
    pt_server *s = pt_server_new(&o, answer, NULL, err, sizeof(err));
    if (!s)
        diag("pt_server_new: %s", err);
    return s;
}

static void stale_events(void)
{
    pt_server *s = server();
    if (!ok(s != NULL, "server starts"))
        return;
    s->next_sweep_ms = s->now_ms + 3600 * 1000; /* no idle sweep during the test */

    int cfd = client(s->port);
    pt_conn *c = await_conn(s, NULL);
    if (!ok(c != NULL, "a connection is accepted"))
        goto out;
    uint32_t slot = c->slot, gen = c->gen;
    uint64_t tag = conn_tag(slot, gen);
    ok(event_conn(s, tag) == c, "its event tag names it");

    int held = dup(c->fd); /* the open file outlives the connection's own fd */
    pt_conn_close(c);
    process_close_list(s);
    ok(event_conn(s, tag) == NULL, "once freed, its tag names no connection");

    /* The peer writes: the still-open file becomes readable. Once poll() on the file says
     * so, a registration left in place would have its event ready, so epoll is asked
     * without waiting. */
    ssize_t w = send(cfd, "GET / HTTP/1.1\r\n\r\n", 18, MSG_NOSIGNAL);
    struct pollfd pf = {held, POLLIN, 0};
    is(w == 18 && poll(&pf, 1, 5000) == 1 ? 18 : -1, 18,
       "the peer can still write, and the open file is readable");
    struct epoll_event ev;
    int n = epoll_wait(s->epfd, &ev, 1, 0);
    is(n, 0, "epoll reports nothing for a freed connection whose file is still open");

    /* Even a stale event that did arrive is dropped without touching memory (under
     * AddressSanitizer a pointer tag would be a use-after-free here). */
    handle_event(s, tag, EPOLLIN | EPOLLRDHUP);
    ok(s->conns == NULL && s->close_list == NULL, "a stale event is dropped");

    /* The slot is reused with a new generation; the old tag still names nothing. */
    int cfd2 = client(s->port);
    pt_conn *c2 = await_conn(s, NULL);
    ok(c2 && c2->slot == slot && c2->gen != gen, "the slot is reused with a new generation");
    ok(event_conn(s, tag) == NULL, "the old tag does not name the new connection");
    ok(c2 && event_conn(s, conn_tag(c2->slot, c2->gen)) == c2, "the new tag does");

    close(held);
    close(cfd2);
out:
    close(cfd);
    pt_server_free(s);
}

static void *run(void *arg)
{
    pt_server_run(arg);
    return NULL;
}

/* The input fuzz_http crashed on (an h2c preface broken in its SM line) through a real
 * connection: answered 400, then closed, and the server keeps serving. */
static void broken_preface(void)
{
    static const uint8_t in[] = "PRI * HTTP/2.0\r\n\r\nSM\x0b\n\r\n\0\0\0\x04\0\0\0\0";
    pt_server *s = server();
    if (!ok(s != NULL, "server starts"))
        return;
    pthread_t th;
    pthread_create(&th, NULL, run, s);
    for (int round = 0; round < 50; round++) {
        int fd = client(s->port);
        send(fd, in, sizeof(in) - 1, MSG_NOSIGNAL);
        if (round % 2)
            shutdown(fd, SHUT_WR);
        char buf[4096];
        size_t got = 0;
        ssize_t r;
        while (got < sizeof(buf) - 1 && (r = recv(fd, buf + got, sizeof(buf) - 1 - got, 0)) > 0)
            got += (size_t)r;
        buf[got] = '\0';
        close(fd);
        if (strncmp(buf, "HTTP/1.1 400 ", 13) != 0) {
            ok(0, "round %d: broken preface answered 400, got '%.40s'", round, buf);
            break;
        }
        if (round == 49)
            ok(1, "broken preface answered 400 and closed, 50 times");
    }
    int fd = client(s->port);
    const char get[] = "GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
    send(fd, get, sizeof(get) - 1, MSG_NOSIGNAL);
    char buf[256] = {0};
    recv(fd, buf, sizeof(buf) - 1, MSG_WAITALL);
    close(fd);
    ok(strncmp(buf, "HTTP/1.1 204 ", 13) == 0, "the server still answers");
    pt_server_stop(s);
    pthread_join(th, NULL);
    pt_server_free(s);
}

static const char request[] = "GET /x HTTP/1.1\r\nHost: a\r\n\r\n";

/* Turns the loop (no workers: tasks stay queued) until the client's request is queued; the
 * queued task or NULL. */
static pt_task *await_queued(pt_server *s)
{
    for (int i = 0; i < 200 && !s->whead; i++)
        loop_once(s, 10);
    return s->whead;
}

/* A client that closes, half-closes or resets while its request waits in a worker: the flag
 * becomes 1, the connection goes, the handler never runs; a client that waits: 0 and its
 * answer. */
static void hangup_cancels(void)
{
    pt_server *s = server();
    if (!ok(s != NULL, "server starts"))
        return;
    s->next_sweep_ms = s->now_ms + 3600 * 1000;
    static const char *const how[] = {"closes", "half-closes", "resets",
                                      "half-closes right after the request"};
    for (int k = 0; k < 4; k++) {
        int calls = atomic_load(&handled.calls);
        int fd = client(s->port);
        send(fd, request, sizeof(request) - 1, MSG_NOSIGNAL);
        if (k == 3)
            shutdown(fd, SHUT_WR); /* the FIN may come in the same read as the request */
        pt_task *t = await_queued(s);
        const atomic_int *flag = t ? t->req.cancelled : NULL;
        if (!ok(flag != NULL, "a client that %s: its request is queued", how[k]))
            break;
        if (k < 3)
            ok(atomic_load(flag) == 0, "... not cancelled while the client waits");
        if (k == 0) {
            close(fd);
        } else if (k == 1) {
            shutdown(fd, SHUT_WR);
        } else if (k == 2) {
            struct linger lg = {1, 0}; /* close() sends RST */
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
            close(fd);
        }
        for (int i = 0; i < 200 && !atomic_load(flag); i++)
            loop_once(s, 10);
        ok(atomic_load(flag) == 1, "... cancelled == 1 once the client %s", how[k]);
        ok(s->conns == NULL, "... and its connection is gone");
        if (k == 1 || k == 3) {
            char b;
            is(recv(fd, &b, 1, 0), 0, "... the half-closed client gets no answer, a close");
        }
        run_queue(s); /* the worker's turn: a cancelled request is skipped */
        loop_once(s, 10);
        is(atomic_load(&handled.calls), calls, "... and the handler never runs");
        if (k != 0 && k != 2)
            close(fd);
    }

    int fd = client(s->port);
    send(fd, request, sizeof(request) - 1, MSG_NOSIGNAL);
    pt_task *t = await_queued(s);
    ok(t && atomic_load(t->req.cancelled) == 0, "a client that waits: not cancelled");
    run_queue(s);
    char buf[256] = {0};
    for (int i = 0; i < 200 && !buf[0]; i++) {
        loop_once(s, 10);
        recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
    }
    ok(strncmp(buf, "HTTP/1.1 204 ", 13) == 0 && atomic_load(&handled.cancelled) == 0,
       "... its handler found cancelled == 0, and it is answered");
    close(fd);
    pt_server_free(s);
}

/* A handler on a worker thread that polls the flag returns early when its client leaves. */
static void handler_stops(void)
{
    pt_server *s = server();
    if (!ok(s != NULL, "server starts"))
        return;
    pthread_t th;
    pthread_create(&th, NULL, run, s);
    int fd = client(s->port);
    const char wait[] = "GET /wait HTTP/1.1\r\nHost: a\r\n\r\n";
    send(fd, wait, sizeof(wait) - 1, MSG_NOSIGNAL);
    for (int i = 0; i < 2000 && !atomic_load(&handled.waiting); i++)
        usleep(1000);
    ok(atomic_load(&handled.waiting), "a handler polls the flag while its client waits");
    close(fd);
    /* A handler that never sees the flag is ended by give_up, with saw_cancel == 0. */
    for (int i = 0; i < 30000 && !atomic_load(&handled.done); i++)
        usleep(1000);
    atomic_store(&handled.give_up, 1);
    for (int i = 0; i < 5000 && !atomic_load(&handled.done); i++)
        usleep(1000);
    ok(atomic_load(&handled.done) && atomic_load(&handled.saw_cancel) == 1,
       "the client closes: the handler sees cancelled == 1 and returns");
    pt_server_stop(s);
    pthread_join(th, NULL);
    pt_server_free(s);
}

/* Heavy requests (/heavy...) block until released; at most workers - 1 run at once, so a
 * light one is answered meanwhile. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int release, running, most;
} heavy_gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0};

static int is_heavy(void *ud, const pt_req *req)
{
    (void)ud;
    return strncmp(req->path, "/heavy", 6) == 0;
}

static void gated(void *ud, pt_req *req, pt_resp *resp)
{
    (void)ud;
    resp->status = 204;
    if (!is_heavy(NULL, req))
        return;
    pthread_mutex_lock(&heavy_gate.mu);
    if (++heavy_gate.running > heavy_gate.most)
        heavy_gate.most = heavy_gate.running;
    pthread_cond_broadcast(&heavy_gate.cv);
    while (!heavy_gate.release)
        pthread_cond_wait(&heavy_gate.cv, &heavy_gate.mu);
    heavy_gate.running--;
    pthread_mutex_unlock(&heavy_gate.mu);
}

static int status_of(int fd)
{
    char buf[256] = {0};
    ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
    return n > 12 && strncmp(buf, "HTTP/1.1 ", 9) == 0 ? atoi(buf + 9) : -1;
}

/* Heavy tasks waiting in the workers' queue (the loop thread adds them under wmu). */
static int queued_heavy(pt_server *s)
{
    int n = 0;
    pthread_mutex_lock(&s->wmu);
    for (const pt_task *t = s->whead; t; t = t->qnext)
        n += t->heavy;
    pthread_mutex_unlock(&s->wmu);
    return n;
}

static void heavy_requests(void)
{
    char err[256];
    pt_server_opts o = {.listen_address = "127.0.0.1:0", .workers = 3, .max_connections = 16,
                        .heavy = is_heavy};
    pt_server *s = pt_server_new(&o, gated, NULL, err, sizeof(err));
    if (!ok(s != NULL, "server with 3 workers starts"))
        return;
    pthread_t th;
    pthread_create(&th, NULL, run, s);
    static const char heavy_req[] = "GET /heavy HTTP/1.1\r\nHost: a\r\n\r\n";
    static const char light_req[] = "GET /light HTTP/1.1\r\nHost: a\r\n\r\n";
    int hv[4];
    for (int i = 0; i < 4; i++) {
        hv[i] = client(s->port);
        send(hv[i], heavy_req, sizeof(heavy_req) - 1, MSG_NOSIGNAL);
    }
    /* Two heavy requests start (3 workers - 1); the other two wait for a slot. */
    pthread_mutex_lock(&heavy_gate.mu);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5;
    while (heavy_gate.running < 2 &&
           pthread_cond_timedwait(&heavy_gate.cv, &heavy_gate.mu, &until) == 0)
        ;
    pthread_mutex_unlock(&heavy_gate.mu);
    /* The light request queues behind the two waiting heavy ones, so the idle worker
     * answers it only after passing over them: a heavy one it wrongly took first would
     * hold it, and show in `most`. */
    for (int i = 0; i < 5000 && queued_heavy(s) < 2; i++)
        usleep(1000);
    int lf = client(s->port);
    send(lf, light_req, sizeof(light_req) - 1, MSG_NOSIGNAL);
    is(status_of(lf), 204, "a light request is answered while heavy ones hold every slot");
    pthread_mutex_lock(&heavy_gate.mu);
    int most = heavy_gate.most;
    heavy_gate.release = 1;
    pthread_cond_broadcast(&heavy_gate.cv);
    pthread_mutex_unlock(&heavy_gate.mu);
    is(most, 2, "at most workers - 1 heavy requests ran at once");
    int answered = 0;
    for (int i = 0; i < 4; i++) {
        answered += status_of(hv[i]) == 204;
        close(hv[i]);
    }
    is(answered, 4, "every heavy request is answered once released");
    close(lf);
    pt_server_stop(s);
    pthread_join(th, NULL);
    pt_server_free(s);
}

int main(void)
{
    stale_events();
    broken_preface();
    hangup_cancels();
    handler_stops();
    heavy_requests();
    return done_testing();
}
