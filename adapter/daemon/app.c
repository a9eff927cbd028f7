#include "app.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "api.h"
#include "clock.h"
#include "error.h"
#include "ha.h"
#include "log.h"
#include "metrics.h"
#include "samples.h"
#include "stream.h"

/* NEEDS_AUTH: a store route (write, read, browsing API): credentials and, with tenancy
 * on, a tenant. */
enum { ALLOW_GET = 1, ALLOW_POST = 2, NEEDS_AUTH = 4, ALLOW_PUT = 8 };

typedef void (*handler_fn)(pt_ctx *c, pt_req *req, pt_resp *resp);

/* A text body allocated from the request arena. */
static void vreply(pt_req *req, pt_resp *resp, int status, const char *fmt, va_list ap)
{
    static const char oom[] = "out of memory\n";
    char *buf = pt_arena_alloc(req->arena, PT_MSG_MAX + 2);
    resp->status = status;
    resp->content_type = "text/plain; charset=utf-8";
    if (!buf) {
        resp->body = (const uint8_t *)oom;
        resp->body_len = sizeof(oom) - 1;
        return;
    }
    int n = vsnprintf(buf, PT_MSG_MAX, fmt, ap);
    if (n < 0)
        n = 0;
    if (n >= PT_MSG_MAX)
        n = PT_MSG_MAX - 1;
    buf[n++] = '\n';
    resp->body = (const uint8_t *)buf;
    resp->body_len = (size_t)n;
}

static void vreply_status(pt_req *req, pt_resp *resp, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void vreply_status(pt_req *req, pt_resp *resp, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreply(req, resp, status, fmt, ap);
    va_end(ap);
}

/* A success answer with a text body. */
static void reply_ok(pt_req *req, pt_resp *resp, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void reply_ok(pt_req *req, pt_resp *resp, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreply(req, resp, 200, fmt, ap);
    va_end(ap);
}

/* An error answer: the status comes from the error code (pt_error_http_status), the body
 * says what was wrong. */
static void reply_fail(pt_req *req, pt_resp *resp, int rv, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void reply_fail(pt_req *req, pt_resp *resp, int rv, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreply(req, resp, pt_error_http_status(rv), fmt, ap);
    va_end(ap);
}

static void reply_error(pt_req *req, pt_resp *resp, int rv, const char *msg)
{
    reply_fail(req, resp, rv, "%s", msg && msg[0] ? msg : pt_strerror(rv));
}

/* A request whose decoding or answer hit the per-request memory ceiling. */
static void reply_memory(pt_app *app, pt_req *req, pt_resp *resp, int answer)
{
    reply_fail(req, resp, PT_ETOOLARGE, "%s needs more than web.max_request_memory (%zu bytes); %s",
               answer ? "the answer" : "the request", app->cfg->max_request_memory,
               answer ? "narrow the query" : "send smaller batches");
}

static const char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
        *--e = '\0';
    return s;
}

/* Remote write 1.0 unless the Content-Type names another message: 1, 2, or 0 (415). */
static int write_version(pt_arena *a, const char *ct, char *msg, size_t msglen)
{
    char *copy = pt_arena_strndup(a, ct, strlen(ct));
    if (!copy)
        return 0;
    char *save = NULL;
    char *part = strtok_r(copy, ";", &save);
    if (!part || !*trim(part))
        return 1; /* no Content-Type: remote write 1.0 */
    if (strcasecmp(trim(part), "application/x-protobuf") != 0) {
        snprintf(msg, msglen, "unsupported Content-Type \"%.100s\"; remote write sends "
                              "application/x-protobuf", ct);
        return 0;
    }
    int version = 1;
    while ((part = strtok_r(NULL, ";", &save)) != NULL) {
        const char *p = trim(part);
        if (strncasecmp(p, "proto=", 6) != 0)
            continue;
        const char *v = trim((char *)p + 6);
        if (strcmp(v, "prometheus.WriteRequest") == 0) {
            version = 1;
        } else if (strcmp(v, "io.prometheus.write.v2.Request") == 0) {
            version = 2;
        } else {
            snprintf(msg, msglen, "unsupported remote write message \"%.100s\"; accepted: "
                                  "proto=prometheus.WriteRequest (1.0), "
                                  "proto=io.prometheus.write.v2.Request (2.0)", v);
            return 0;
        }
    }
    return version;
}

/* Remote write 2.0's X-Prometheus-Remote-Write-*-Written: what is durably stored
 * the cells acknowledged by the backend. */
static void written_headers(pt_req *req, pt_resp *resp, const pt_write_result *res)
{
    static const char *const names[] = {"X-Prometheus-Remote-Write-Samples-Written",
                                        "X-Prometheus-Remote-Write-Histograms-Written",
                                        "X-Prometheus-Remote-Write-Exemplars-Written"};
    size_t counts[] = {res->samples_written, res->histograms_written, res->exemplars_written};
    for (size_t i = 0; i < 3 && resp->nheaders < PT_MAX_RESP_HEADERS; i++) {
        char *v = pt_arena_alloc(req->arena, 24);
        if (!v)
            return;
        snprintf(v, 24, "%zu", counts[i]);
        resp->headers[resp->nheaders++] = (pt_resp_header){names[i], v};
    }
}

/* The store's own word on whether writes can be stored (pt_backend_ops.health): 0, or
 * its code with why set. */
static int store_health(pt_app *app, char *why, size_t len)
{
    const pt_backend *be = app->store.be;
    why[0] = '\0';
    if (!be || !be->ops->health)
        return 0;
    int rv = be->ops->health(be->state, why, len);
    if (rv != 0 && !why[0])
        snprintf(why, len, "%s", pt_strerror(rv));
    return rv;
}

static void handle_write(pt_ctx *c, pt_req *req, pt_resp *resp)
{
    pt_app *app = c->app;
    char msg[PT_MSG_MAX];
    msg[0] = '\0';
    const char *enc = req->content_encoding;
    if (enc[0] && strcasecmp(enc, "snappy") != 0) {
        reply_fail(req, resp, PT_EMEDIATYPE,
                   "unsupported Content-Encoding \"%.100s\"; remote write "
                   "bodies are snappy block compressed",
                   enc);
        return;
    }
    int version = write_version(req->arena, req->content_type, msg, sizeof(msg));
    if (version == 0) {
        reply_fail(req, resp, PT_EMEDIATYPE, "%s", msg);
        return;
    }
    pt_wreq wr;
    int rv = pt_decode_write(req->body, req->body_len, &app->lim, req->arena, version, &wr, msg,
                             sizeof(msg));
    pt_write_result res;
    memset(&res, 0, sizeof(res));
    if (rv == 0 && c->tn &&
        !pt_tenant_take(c->tn, wr.nsamples + wr.nhistograms + wr.nexemplars, pt_wall_ms(), msg,
                        sizeof(msg))) {
        reply_fail(req, resp, PT_ETENANTLIMIT, "%s", msg);
        return;
    }
    /* HA elections are per (tenant, cluster). */
    pt_slice tenant = {(const uint8_t *)c->tenant, c->tenant ? strlen(c->tenant) : 0};
    if (rv == 0)
        rv = pt_store_write_tenant(c->store, tenant, &wr, req->arena, &res);
    if (c->tn && rv == 0)
        pt_tenant_count(c->tn, res.samples_written + res.histograms_written +
                        res.exemplars_written, res.samples_rejected);
    if (version == 2)
        written_headers(req, resp, &res); /* also on errors: what was stored, maybe 0 */
    if (rv != 0) {
        if (msg[0]) { /* the body did not decode */
            reply_error(req, resp, rv, msg);
            return;
        }
        if (rv == PT_ENOMEM && req->arena->exhausted) {
            reply_memory(app, req, resp, 0);
            return;
        }
        char q[256];
        pt_log(PT_LOG_WARN, "write failed", "err=%s samples=%zu",
               pt_log_quote(q, sizeof(q), pt_strerror(rv), strlen(pt_strerror(rv))),
               res.samples_written);
        char why[PT_MSG_MAX / 2];
        if (store_health(app, why, sizeof(why)) != 0)
            reply_fail(req, resp, rv, "%s: %s; nothing was acknowledged, retry",
                       pt_strerror(rv), why);
        else
            reply_fail(req, resp, rv, "%s; nothing was acknowledged, retry", pt_strerror(rv));
        return;
    }
    if (res.limited) {
        reply_fail(req, resp, PT_ETENANTLIMIT, "%s (stored %zu samples, rejected %zu)", res.msg,
                   res.samples_written + res.histograms_written, res.samples_rejected);
        return;
    }
    if (res.samples_rejected || res.entries_rejected) {
        if (res.histograms_written)
            reply_fail(req, resp, PT_EBADREQ,
                       "%s (stored %zu samples and %zu histograms, rejected %zu)", res.msg,
                       res.samples_written, res.histograms_written, res.samples_rejected);
        else
            reply_fail(req, resp, PT_EBADREQ, "%s (stored %zu samples, rejected %zu)", res.msg,
                       res.samples_written, res.samples_rejected);
        return;
    }
    if (res.samples_deduplicated) { /* HA: as Cortex, 202 for a replica not elected */
        vreply_status(req, resp, 202, "%zu samples of HA replicas not elected were acknowledged "
                      "and dropped; stored %zu", res.samples_deduplicated, res.samples_written);
        return;
    }
    resp->status = 204;
}

/* A read taken a group of series at a time: one group's series and samples (and what is
 * made of them) are the only per-series memory it holds. The group is sized by samples
 * (about GROUP_SAMPLES), from what the previous group held. */
enum { GROUP_FIRST = 64, GROUP_MAX = 1024, GROUP_SAMPLES = 65536 };

typedef struct grouped {
    pt_read *r;
    size_t size;    /* series in the next group */
    pt_arena arena; /* the current group's series and samples */
} grouped;

/* 0 or PT_ENOMEM; g is to be released with grouped_free either way. */
static int grouped_start(pt_store *st, pt_req *req, const pt_read_request *rr, grouped *g)
{
    g->r = NULL;
    g->size = GROUP_FIRST;
    pt_arena_init(&g->arena, 64 << 10, req->arena->max);
    int rv = pt_read_start(st, rr->queries, rr->nqueries, req->arena, req->cancelled, &g->r);
    if (rv == 0)
        pt_read_rollups(g->r, rr->rollups);
    return rv;
}

/* The next group into g->arena, where it stays until the next call: 1 with *bt set, 0 when
 * every query is answered, or an error with msg set (pt_read_next's). */
static int grouped_next(grouped *g, pt_read_batch *bt, char *msg, size_t msglen)
{
    pt_arena_reset(&g->arena);
    int rv = pt_read_next(g->r, &g->arena, g->size, bt, msg, msglen);
    if (rv != 1)
        return rv;
    /* A native histogram holds several times a float sample's memory (its buckets):
     * weighed as eight, so groups of histogram series stay about as large in bytes. */
    size_t samples = 0;
    for (size_t i = 0; i < bt->n; i++)
        samples += bt->s[i].nsamples + 8 * bt->s[i].nhists;
    if (samples > GROUP_SAMPLES && bt->n)
        g->size = bt->n * GROUP_SAMPLES / samples + 1;
    else if (samples < GROUP_SAMPLES / 4 && g->size < GROUP_MAX)
        g->size *= 2;
    return 1;
}

/* Whether a failed read ran out of web.max_request_memory. */
static int grouped_out_of_memory(const grouped *g, const pt_req *req, int rv)
{
    return rv == PT_ENOMEM && (req->arena->exhausted || g->arena.exhausted);
}

/* Releases the matchers and the group; safe twice. */
static void grouped_free(grouped *g)
{
    pt_read_free(g->r);
    g->r = NULL;
    pt_arena_free(&g->arena);
}

/* A STREAMED_XOR_CHUNKS answer in progress. Made by the handler, then owned by the
 * server's producer calls until stream_done. */
typedef struct stream_read {
    grouped g;
    pt_buf pending; /* frames made and not yet handed to the server */
    int end;        /* every query answered */
    char msg[PT_MSG_MAX];
} stream_read;

/* Makes frames until some are pending or the read is over: 0, or an error (msg set). */
static int stream_fill(stream_read *sr)
{
    while (pt_buf_used(&sr->pending) == 0 && !sr->end) {
        pt_read_batch bt;
        int rv = grouped_next(&sr->g, &bt, sr->msg, sizeof(sr->msg));
        if (rv < 0)
            return rv;
        if (rv == 0) {
            sr->end = 1;
            break;
        }
        for (size_t i = 0; i < bt.n; i++)
            if ((rv = pt_stream_series(&sr->pending, bt.query, &bt.s[i], &sr->g.arena)) != 0)
                return rv;
    }
    return 0;
}

static int stream_pull(void *ud, pt_buf *out, size_t want)
{
    stream_read *sr = ud;
    int rv = stream_fill(sr);
    if (rv != 0) {
        char q[PT_MSG_MAX + 64];
        const char *why = sr->msg[0] ? sr->msg : pt_strerror(rv);
        /* The 200 is out: the client sees a cut stream and retries; say why here. */
        pt_log(PT_LOG_WARN, "streamed read cut", "err=%s",
               pt_log_quote(q, sizeof(q), why, strlen(why)));
        return rv;
    }
    size_t n = pt_buf_used(&sr->pending) < want ? pt_buf_used(&sr->pending) : want;
    if ((rv = pt_buf_append(out, pt_buf_data(&sr->pending), n)) != 0)
        return rv;
    pt_buf_consume(&sr->pending, n);
    return sr->end && pt_buf_used(&sr->pending) == 0 ? PT_PULL_END : PT_PULL_MORE;
}

static void stream_done(void *ud, int cancelled)
{
    stream_read *sr = ud;
    if (cancelled)
        pt_m.read_cancelled++;
    grouped_free(&sr->g);
    pt_buf_free(&sr->pending);
}

/* A STREAMED_XOR_CHUNKS answer: the first group is read here, so that a bad matcher, a
 * limit or an outage still gets its status; the rest streams as the client takes it. */
static void handle_read_streamed(pt_ctx *c, pt_req *req, pt_resp *resp,
                                 const pt_read_request *rr)
{
    stream_read *sr = pt_arena_calloc(req->arena, sizeof(*sr));
    if (!sr) {
        reply_memory(c->app, req, resp, 1);
        return;
    }
    pt_buf_init(&sr->pending, req->arena->max);
    int rv = grouped_start(c->store, req, rr, &sr->g);
    if (rv == 0) {
        pt_read_exemplars(sr->g.r, 0); /* no exemplar field in ChunkedSeries */
        pt_read_chunks(sr->g.r, 1);    /* stored XOR chunks go as they are */
    }
    if (rv == 0)
        rv = stream_fill(sr);
    if (rv != 0) {
        if (grouped_out_of_memory(&sr->g, req, rv))
            reply_memory(c->app, req, resp, 1);
        else
            reply_error(req, resp, rv, sr->msg);
        stream_done(sr, 0);
        return;
    }
    resp->status = 200;
    resp->content_type = "application/x-streamed-protobuf; proto=prometheus.ChunkedReadResponse";
    resp->producer = (pt_producer){stream_pull, stream_done, sr};
}

/* Snappy of the answer's wire bytes into the request arena. The wire bytes live on the heap
 * while it is made, so they take their part of web.max_request_memory: the arena may grow
 * only into what they leave. 0, PT_ENOMEM (over the limit) or PT_EINTERNAL. */
static int compress_answer(pt_req *req, const pt_samples *enc, pt_slice *z)
{
    size_t max = req->arena->max, held = pt_samples_size(enc);
    if (max && held >= max)
        return PT_ENOMEM;
    if (max)
        req->arena->max = max - held;
    pt_slice wire = pt_samples_bytes(enc);
    int rv = pt_snappy_encode(wire.p, wire.n, req->arena, z);
    req->arena->max = max;
    return rv;
}

/* A SAMPLES answer, built lean: a group of series at a time, written straight to protobuf
 * wire bytes, then compressed whole (a snappy block needs its length first). Its memory is
 * the wire bytes, the compressed bytes and one group. */
static void handle_read_samples(pt_ctx *c, pt_req *req, pt_resp *resp,
                                const pt_read_request *rr)
{
    char msg[PT_MSG_MAX];
    msg[0] = '\0';
    grouped g;
    pt_samples enc;
    pt_read_batch bt;
    pt_slice z;
    size_t max = req->arena->max, used = req->arena->used_total;
    /* The wire bytes may have what the request has not used yet (1: nothing, not "no
     * ceiling"). */
    pt_samples_init(&enc, !max ? 0 : max > used ? max - used : 1);
    int rv = grouped_start(c->store, req, rr, &g);
    while (rv == 0 && (rv = grouped_next(&g, &bt, msg, sizeof(msg))) == 1)
        rv = pt_samples_add(&enc, bt.s, bt.n, bt.last_of_query);
    if (rv == PT_ECANCELLED)
        pt_m.read_cancelled++; /* the answer below goes nowhere */
    if (rv != 0) {
        if (rv == PT_ETOOLARGE || grouped_out_of_memory(&g, req, rv))
            reply_memory(c->app, req, resp, 1);
        else
            reply_error(req, resp, rv, msg);
        goto out;
    }
    grouped_free(&g); /* before the compressed copy is made */
    if ((rv = compress_answer(req, &enc, &z)) != 0) {
        if (rv == PT_ENOMEM)
            reply_memory(c->app, req, resp, 1);
        else
            reply_error(req, resp, rv, "compressing the answer failed");
        goto out;
    }
    resp->status = 200;
    resp->content_type = "application/x-protobuf";
    resp->content_encoding = "snappy";
    resp->body = z.p;
    resp->body_len = z.n;
out:
    pt_samples_free(&enc);
    grouped_free(&g);
}

/* The read URL's ?resolution=: 1 for "auto" (roll-ups where the hints allow, when
 * read.rollups is on), 0 for "raw" or none, -1 for anything else. */
static int read_resolution(const char *query)
{
    int auto_ = 0;
    for (const char *p = query; *p;) {
        size_t n = strcspn(p, "&");
        if (n > 11 && strncmp(p, "resolution=", 11) == 0) {
            if (n == 15 && strncmp(p + 11, "auto", 4) == 0)
                auto_ = 1;
            else if (n == 14 && strncmp(p + 11, "raw", 3) == 0)
                auto_ = 0;
            else
                return -1;
        } else if (n >= 10 && strncmp(p, "resolution", 10) == 0 && (n == 10 || p[10] == '=')) {
            return -1;
        }
        p += n + (p[n] == '&');
    }
    return auto_;
}

static void handle_read(pt_ctx *c, pt_req *req, pt_resp *resp)
{
    pt_app *app = c->app;
    char msg[PT_MSG_MAX];
    msg[0] = '\0';
    int resolution = read_resolution(req->query);
    if (resolution < 0) {
        reply_fail(req, resp, PT_EBADREQ, "resolution must be auto (roll-ups where the "
                   "query allows, with read.rollups on) or raw");
        return;
    }
    pt_read_request rr;
    int rv = pt_decode_read(req->body, req->body_len, &app->lim, req->arena, &rr, msg,
                            sizeof(msg));
    if (rv != 0) {
        reply_error(req, resp, rv, msg);
        return;
    }
    rr.rollups = resolution == 1 && app->cfg && app->cfg->read_rollups;
    if (rr.response < 0) {
        reply_fail(req, resp, PT_EUNSUPPORTED, "none of the requested response types is supported "
                                   "(promtable answers SAMPLES and STREAMED_XOR_CHUNKS)");
        return;
    }
    if (rr.response == PT_READ_STREAMED_XOR_CHUNKS) {
        handle_read_streamed(c, req, resp, &rr);
        return;
    }
    handle_read_samples(c, req, resp, &rr);
}

static void handle_metrics(pt_ctx *c, pt_req *req, pt_resp *resp)
{
    pt_app *app = c->app;
    pt_metrics_gauges g = {0};
    g.connections = app->srv ? pt_server_connections(app->srv) : 0;
    g.index_cache_entries = (long)pt_index_cache_size(app->store.cache);
    g.index_cache_capacity = (long)pt_index_cache_capacity(app->store.cache);
    g.index_cache_bytes = (long)pt_index_cache_bytes(app->store.cache);
    g.series_cache_bytes = app->store.refs ? (long)pt_ref_cache_bytes(app->store.refs) : 0;
    g.list_cache_bytes = app->store.lists ? (long)pt_ref_cache_bytes(app->store.lists) : 0;
    g.arena_pool_bytes = (long)pt_arena_pool_bytes();
    pt_backend_stat bs[64];
    const pt_backend *be = app->store.be;
    if (be && be->ops->stats) {
        g.backend = bs;
        g.nbackend = be->ops->stats(be->state, bs, sizeof(bs) / sizeof(bs[0]));
    }
    if (app->tenants) {
        long tn = pt_tenants_render(app->tenants, req->arena, &g.extra);
        if (tn < 0) {
            reply_error(req, resp, PT_ENOMEM, NULL);
            return;
        }
        g.extra_len = (size_t)tn;
    }
    if (app->ha) {
        size_t nha = (size_t)app->cfg->ha_max_clusters;
        pt_ha_stat *hs = pt_arena_alloc(req->arena, nha * sizeof(*hs));
        if (hs) {
            g.ha = hs;
            g.nha = pt_ha_stats(app->ha, req->arena, hs, nha);
        }
    }
    char *text;
    long n = pt_metrics_render(req->arena, &g, &text);
    if (n < 0) {
        reply_error(req, resp, (int)n, NULL);
        return;
    }
    resp->status = 200;
    resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
    resp->body = (const uint8_t *)text;
    resp->body_len = (size_t)n;
}

static void handle_healthy(pt_ctx *c, pt_req *req, pt_resp *resp)
{
    pt_app *app = c->app;
    (void)app;
    reply_ok(req, resp, "promtable is healthy.");
}

static void handle_ready(pt_ctx *c, pt_req *req, pt_resp *resp)
{
    pt_app *app = c->app;
    char why[PT_MSG_MAX / 2];
    int rv;
    if (!atomic_load(&app->ready))
        reply_fail(req, resp, PT_EUNAVAIL, "promtable is not ready.");
    else if ((rv = store_health(app, why, sizeof(why))) != 0)
        reply_fail(req, resp, rv, "promtable is not ready: %s", why);
    else
        reply_ok(req, resp, "promtable is ready.");
}

/* A secret from a file, without the trailing newline editors add. */
static char *read_secret(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = calloc(1, 4097);
    size_t n = buf ? fread(buf, 1, 4096, f) : 0;
    fclose(f);
    if (!buf)
        return NULL;
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    if (n == 0 || strlen(buf) != n) {
        snprintf(err, errlen, "%s: empty, too long (4 KiB at most) or holds a NUL byte", path);
        free(buf);
        return NULL;
    }
    return buf;
}

/* One credential set from a token file and a basic auth pair (either may be unset). */
static int load_creds(struct pt_app_creds *cr, const char *token_file, const char *user,
                      const char *pw_file, char *err, size_t errlen)
{
    if (token_file[0]) {
        char *t = read_secret(token_file, err, errlen);
        if (!t)
            return -1;
        cr->bearer_token = t;
    }
    if (user[0] || pw_file[0]) {
        if (!user[0] || !pw_file[0]) {
            snprintf(err, errlen, "basic auth needs both a username and a password file");
            return -1;
        }
        char *pw = read_secret(pw_file, err, errlen);
        if (!pw)
            return -1;
        size_t n = strlen(user) + 1 + strlen(pw) + 1;
        char *cred = malloc(n);
        if (cred)
            snprintf(cred, n, "%s:%s", user, pw);
        OPENSSL_cleanse(pw, strlen(pw));
        free(pw);
        if (!cred)
            return -1;
        cr->basic_credentials = cred;
    }
    return 0;
}

int pt_app_load_auth(pt_app *app, const pt_config *cfg, char *err, size_t errlen)
{
    struct pt_app_creds shared = {0};
    int rv = load_creds(&shared, cfg->bearer_token_file, cfg->basic_auth_username,
                        cfg->basic_auth_password_file, err, errlen);
    app->bearer_token = shared.bearer_token;
    app->basic_credentials = shared.basic_credentials;
    if (rv == 0)
        rv = load_creds(&app->route_creds[0], cfg->write_bearer_token_file,
                        cfg->write_basic_auth_username, cfg->write_basic_auth_password_file, err,
                        errlen);
    if (rv == 0)
        rv = load_creds(&app->route_creds[1], cfg->read_bearer_token_file,
                        cfg->read_basic_auth_username, cfg->read_basic_auth_password_file, err,
                        errlen);
    return rv;
}

void pt_app_free_auth(pt_app *app)
{
    free((char *)app->bearer_token);
    free((char *)app->basic_credentials);
    app->bearer_token = app->basic_credentials = NULL;
    for (int i = 0; i < 2; i++) {
        free((char *)app->route_creds[i].bearer_token);
        free((char *)app->route_creds[i].basic_credentials);
        app->route_creds[i] = (struct pt_app_creds){0};
    }
}

/* Constant-time comparison of what the client sent with what we expect. */
static int secret_eq(const uint8_t *got, size_t n, const char *want)
{
    size_t wn = strlen(want);
    return n == wn && CRYPTO_memcmp(got, want, n) == 0;
}

/* The credentials route id demands: its own when it has any, else the shared ones. The
 * browsing API reads, so it takes the read credentials. */
static struct pt_app_creds route_creds(const pt_app *app, int id)
{
    int reads = id == PT_ROUTE_READ || id == PT_ROUTE_LABELS || id == PT_ROUTE_LABEL_VALUES ||
                id == PT_ROUTE_SERIES || id == PT_ROUTE_METADATA || id == PT_ROUTE_TSDB_STATUS ||
                id == PT_ROUTE_METRICS;
    int admin = id == PT_ROUTE_SNAPSHOT || id == PT_ROUTE_DELETE_SERIES;
    int i = id == PT_ROUTE_WRITE || admin ? 0 : reads ? 1 : -1;
    if (i >= 0 && (app->route_creds[i].bearer_token || app->route_creds[i].basic_credentials))
        return app->route_creds[i];
    return (struct pt_app_creds){app->bearer_token, app->basic_credentials};
}

static int authorized(struct pt_app_creds cr, const pt_req *req)
{
    const char *h = req->authorization;
    if (cr.bearer_token && strncasecmp(h, "Bearer ", 7) == 0 &&
        secret_eq((const uint8_t *)h + 7, strlen(h + 7), cr.bearer_token))
        return 1;
    if (cr.basic_credentials && strncasecmp(h, "Basic ", 6) == 0) {
        const char *b64 = h + 6;
        size_t n = strlen(b64);
        if (n == 0 || n % 4 || n > 8192)
            return 0;
        uint8_t dec[6145];
        int dn = EVP_DecodeBlock(dec, (const uint8_t *)b64, (int)n);
        if (dn < 0)
            return 0;
        /* EVP_DecodeBlock counts the padding as zero bytes. */
        if (b64[n - 1] == '=')
            dn--;
        if (b64[n - 2] == '=')
            dn--;
        int eq = secret_eq(dec, (size_t)dn, cr.basic_credentials);
        OPENSSL_cleanse(dec, sizeof(dec));
        return eq;
    }
    return 0;
}

static const struct route {
    const char *path; /* ending in '/': a prefix */
    int id;
    int allow;
    handler_fn fn;
} routes[] = {
    {"/api/v1/write", PT_ROUTE_WRITE, ALLOW_POST | NEEDS_AUTH, handle_write},
    {"/api/v1/read", PT_ROUTE_READ, ALLOW_POST | NEEDS_AUTH, handle_read},
    {"/metrics", PT_ROUTE_METRICS, ALLOW_GET, handle_metrics},
    {"/-/healthy", PT_ROUTE_HEALTHY, ALLOW_GET, handle_healthy},
    {"/-/ready", PT_ROUTE_READY, ALLOW_GET, handle_ready},
    {"/api/v1/labels", PT_ROUTE_LABELS, ALLOW_GET | ALLOW_POST | NEEDS_AUTH, pt_api_labels},
    {"/api/v1/label/", PT_ROUTE_LABEL_VALUES, ALLOW_GET | NEEDS_AUTH, pt_api_label_values},
    {"/api/v1/series", PT_ROUTE_SERIES, ALLOW_GET | ALLOW_POST | NEEDS_AUTH, pt_api_series},
    {"/api/v1/metadata", PT_ROUTE_METADATA, ALLOW_GET | NEEDS_AUTH, pt_api_metadata},
    {"/api/v1/status/tsdb", PT_ROUTE_TSDB_STATUS, ALLOW_GET | NEEDS_AUTH, pt_api_tsdb_status},
    {"/api/v1/admin/tsdb/snapshot", PT_ROUTE_SNAPSHOT, ALLOW_POST | NEEDS_AUTH, pt_api_snapshot},
    {"/api/v1/admin/tsdb/delete_series", PT_ROUTE_DELETE_SERIES,
     ALLOW_POST | ALLOW_PUT | NEEDS_AUTH, pt_api_delete_series},
};

/* Whether a request for path goes to route r. */
static int route_matches(const struct route *r, const char *path)
{
    size_t n = strlen(r->path);
    return r->path[n - 1] == '/' ? strncmp(path, r->path, n) == 0 : strcmp(path, r->path) == 0;
}

int pt_app_heavy(void *ud, const pt_req *req)
{
    (void)ud;
    /* A read (also of the browsing API) can hold a worker for seconds; writes must still
     * find one. */
    return strncmp(req->path, "/api/v1/", 8) == 0 && strcmp(req->path, "/api/v1/write") != 0;
}

int pt_app_on_loop(void *ud, const pt_req *req)
{
    (void)ud;
    /* Only the /api/ routes touch the store. */
    return strncmp(req->path, "/api/", 5) != 0;
}

/* With tenancy on, whether the request names one valid tenant: 0, or the request answered
 * (401 without the header, 400 for a bad id or two headers). */
static int tenant_header_ok(const pt_app *app, pt_req *req, pt_resp *resp)
{
    const char *hdr = app->cfg ? app->cfg->tenancy_header : "X-Scope-OrgID";
    const char *id = req->tenant;
    char msg[300];
    if (req->tenant_headers > 1) {
        reply_fail(req, resp, PT_EBADREQ, "%u %s headers; send exactly one tenant id",
                   req->tenant_headers, hdr);
        return -1;
    }
    if (!id[0]) {
        reply_fail(req, resp, PT_EUNAUTHORIZED, "no tenant: tenancy is on and the request has "
                   "%s %s header", req->tenant_headers ? "an empty" : "no", hdr);
        return -1;
    }
    if (!pt_tenant_valid(id, strlen(id), msg, sizeof(msg))) {
        reply_fail(req, resp, PT_EBADREQ, "%s header: %s", hdr, msg);
        return -1;
    }
    return 0;
}

/* With tenancy on: the request's tenant (its header already checked by tenant_header_ok),
 * its store (a view of the shared one, in the request arena, as a streamed read outlives
 * the handler) and, for a write, its reference into ctx. Only a write makes a tenant (takes
 * a place in tenancy.max_tenants): any other route reads the id's row space without one,
 * so an id never written reads as empty and made-up ids cannot crowd out real tenants.
 * 0, or the request answered: 429 for a write when tenancy.max_tenants are active. */
static int tenant_begin(pt_app *app, pt_req *req, pt_resp *resp, pt_ctx *ctx)
{
    const char *id = req->tenant;
    size_t n = strlen(id);
    char msg[300];
    pt_tenant *t = NULL;
    if (strcmp(req->path, "/api/v1/write") == 0 &&
        !(t = pt_tenant_get(app->tenants, id, pt_wall_ms(), msg, sizeof(msg)))) {
        reply_fail(req, resp, PT_ETENANTLIMIT, "%s", msg);
        return -1;
    }
    struct tenant_req {
        pt_tenant_view view;
        pt_store store;
    } *tr = pt_arena_alloc(req->arena, sizeof(*tr));
    const char *tid = t ? pt_tenant_id(t) : pt_arena_strndup(req->arena, id, n);
    if (!tr || !tid) {
        pt_tenant_put(app->tenants, t);
        reply_memory(app, req, resp, 0);
        return -1;
    }
    pt_tenant_view_init(&tr->view, app->store.be, id, n);
    tr->store = app->store;
    tr->store.be = &tr->view.be;
    tr->store.salt = pt_tenant_salt(id, n);
    tr->store.gate = t ? pt_tenant_gate : NULL;
    tr->store.gate_ud = t;
    *ctx = (pt_ctx){app, &tr->store, tid, t};
    return 0;
}

/* What a request must pass before its body is read or its handler runs: a route, a method
 * it allows, the credentials it demands (/metrics too with web.metrics_auth) and, with
 * tenancy on, one valid tenant header. 0 with *out set, or the request answered (*out is
 * the route, NULL when there is none). Cheap and non-blocking: the server calls it on its
 * loop when the headers are complete (pt_app_admit), and dispatch calls it again. */
static int admit(pt_app *app, pt_req *req, pt_resp *resp, const struct route **out)
{
    const struct route *r = NULL;
    struct pt_app_creds cr;
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
        if (route_matches(&routes[i], req->path))
            r = &routes[i];
    *out = r;
    if (!r) {
        reply_fail(req, resp, PT_ENOTFOUND, "not found: %.200s", req->path);
        return -1;
    }
    int m = req->method == PT_M_GET || req->method == PT_M_HEAD ? ALLOW_GET
            : req->method == PT_M_POST                           ? ALLOW_POST
            : req->method == PT_M_PUT                            ? ALLOW_PUT
                                                                 : 0;
    int post = (r->allow & ALLOW_POST) != 0;
    int auth = (r->allow & NEEDS_AUTH) ||
               (r->id == PT_ROUTE_METRICS && app->cfg && app->cfg->metrics_auth);
    if (!(m & r->allow)) {
        reply_fail(req, resp, PT_EMETHOD, "method %s not allowed on %s; use %s", req->method_name,
                   r->path, !post ? "GET" : r->allow & ALLOW_GET ? "GET or POST"
                                : r->allow & ALLOW_PUT ? "POST or PUT" : "POST");
        resp->headers[resp->nheaders++] = (pt_resp_header){
            "Allow", !post ? "GET, HEAD" : r->allow & ALLOW_GET ? "GET, HEAD, POST"
                     : r->allow & ALLOW_PUT ? "POST, PUT" : "POST"};
        return -1;
    }
    if (auth && (cr = route_creds(app, r->id), cr.bearer_token || cr.basic_credentials) &&
        !authorized(cr, req)) {
        reply_fail(req, resp, PT_EUNAUTHORIZED, "missing or wrong credentials (%s)",
                   cr.bearer_token ? "bearer token" : "basic auth");
        resp->headers[resp->nheaders++] = (pt_resp_header){
            "WWW-Authenticate", cr.bearer_token ? "Bearer" : "Basic realm=\"promtable\""};
        return -1;
    }
    if ((r->allow & NEEDS_AUTH) && app->tenants && tenant_header_ok(app, req, resp) != 0)
        return -1;
    return 0;
}

int pt_app_admit(void *ud, pt_req *req, pt_resp *resp)
{
    const struct route *r;
    int rv = admit(ud, req, resp, &r);
    if (rv != 0)
        pt_metrics_request(r ? r->id : PT_ROUTE_OTHER, resp->status, req->proto);
    return rv;
}

/* Every 503 says when to come back (an outage, a full disk, a timeout): the Retry-After
 * of overload answers, web.overload_retry_after. */
static void add_retry_after(const pt_app *app, pt_req *req, pt_resp *resp)
{
    if (resp->status != 503 || resp->nheaders >= PT_MAX_RESP_HEADERS)
        return;
    for (int i = 0; i < resp->nheaders; i++)
        if (strcasecmp(resp->headers[i].name, "Retry-After") == 0)
            return;
    long ms = app->cfg ? app->cfg->overload_retry_after_ms : 1000;
    char *v = pt_arena_alloc(req->arena, 24);
    if (!v)
        return;
    snprintf(v, 24, "%ld", ms > 0 ? (ms + 999) / 1000 : 1);
    resp->headers[resp->nheaders++] = (pt_resp_header){"Retry-After", v};
}

void pt_app_dispatch(void *ud, pt_req *req, pt_resp *resp)
{
    pt_app *app = ud;
    /* From the complete request, so time waiting for a worker counts. */
    uint64_t t0 = req->received_ns ? req->received_ns : pt_now_ns();
    if (app->cfg)
        req->arena->max = app->cfg->max_request_memory; /* the server's default is a guess */
    resp->status = 200;
    pt_ctx ctx = {app, &app->store, "", NULL};
    const struct route *r;
    if (admit(app, req, resp, &r) == 0 &&
        (!(r->allow & NEEDS_AUTH) || !app->tenants || tenant_begin(app, req, resp, &ctx) == 0))
        r->fn(&ctx, req, resp);
    int id = r ? r->id : PT_ROUTE_OTHER;
    if (ctx.tn)
        pt_tenant_put(app->tenants, ctx.tn);
    add_retry_after(app, req, resp);
    if (resp->status >= 400 && resp->status != 404 && pt_log_enabled(PT_LOG_INFO) &&
        id != PT_ROUTE_READY) {
        char q[600];
        size_t bl = resp->body_len && resp->body[resp->body_len - 1] == '\n' ? resp->body_len - 1
                                                                            : resp->body_len;
        pt_log(resp->status >= 500 ? PT_LOG_WARN : PT_LOG_INFO, "request failed",
               "route=%s code=%d proto=%d err=%s", pt_route_name(id), resp->status, req->proto,
               pt_log_quote(q, sizeof(q), (const char *)resp->body, bl > 400 ? 400 : bl));
    }
    pt_metrics_request(id, resp->status, req->proto);
    pt_lathist_observe(&pt_m.request_duration[id], pt_now_ns() - t0);
}
