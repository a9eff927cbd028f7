/* The browsing API's handlers: parameters, the window and the answers around the index
 * (select.c, meta.c); selectors and timestamps come from promql.c, JSON strings from
 * json.c. */
#include "api.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "cardinality.h"
#include "error.h"
#include "log.h"
#include "meta.h"
#include "read_int.h"

/* Appends the NUL-terminated s (JSON syntax the caller wrote) as it is. */
static int put(pt_buf *b, const char *s)
{
    return pt_buf_append(b, s, strlen(s));
}

/* ---- parameters ---- */

typedef struct param {
    const char *key, *val; /* decoded, NUL-terminated */
} param;

/* One API request: its parameters, window and limits, and the answer being made. */
typedef struct apictx {
    pt_app *app;
    pt_store *st; /* the request's store: its tenant's with tenancy on */
    pt_req *req;
    pt_resp *resp;
    param *p;
    size_t np;
    int64_t start, end; /* clamped to what the store can hold; end < start: nothing */
    int64_t asked_start; /* start as the client gave it (default: the far past) */
    size_t limit;       /* the client's limit; 0 = none */
    size_t max;         /* api.max_results */
    pt_buf out;
    char msg[PT_MSG_MAX];
} apictx;

/* Percent-decodes s[0, n) ('+' is a space) into the arena: NULL when malformed or out of
 * memory (*bad tells which). */
static char *form_decode(pt_arena *a, const char *s, size_t n, int *bad)
{
    char *o = pt_arena_alloc(a, n + 1);
    size_t k = 0;
    if (!o)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '+') {
            o[k++] = ' ';
        } else if (s[i] == '%') {
            if (i + 2 >= n || !isxdigit((unsigned char)s[i + 1]) ||
                !isxdigit((unsigned char)s[i + 2])) {
                *bad = 1;
                return NULL;
            }
            char hex[3] = {s[i + 1], s[i + 2], '\0'};
            o[k++] = (char)strtol(hex, NULL, 16);
            i += 2;
        } else {
            o[k++] = s[i];
        }
    }
    o[k] = '\0';
    if (strlen(o) != k) { /* a NUL byte: no parameter of ours holds one */
        *bad = 1;
        return NULL;
    }
    return o;
}

/* Adds the pairs of a form-encoded string. 0, PT_EBADREQ, PT_ENOMEM. */
static int form_parse(apictx *c, const char *s, size_t n)
{
    size_t pairs = 1;
    for (size_t i = 0; i < n; i++)
        pairs += s[i] == '&';
    param *np = pt_arena_alloc(c->req->arena, (c->np + pairs) * sizeof(*np));
    if (!np)
        return PT_ENOMEM;
    if (c->np)
        memcpy(np, c->p, c->np * sizeof(*np));
    c->p = np;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && s[j] != '&')
            j++;
        if (j > i) {
            const char *eq = memchr(s + i, '=', j - i);
            size_t kn = eq ? (size_t)(eq - (s + i)) : j - i;
            int bad = 0;
            char *k = form_decode(c->req->arena, s + i, kn, &bad);
            char *v = k ? form_decode(c->req->arena, eq ? eq + 1 : s + j,
                                      eq ? (size_t)(s + j - eq - 1) : 0, &bad)
                        : NULL;
            if (!k || !v) {
                if (!bad)
                    return PT_ENOMEM;
                snprintf(c->msg, sizeof(c->msg), "invalid form encoding in \"%.*s\"",
                         (int)(j - i > 100 ? 100 : j - i), s + i);
                return PT_EBADREQ;
            }
            c->p[c->np++] = (param){k, v};
        }
        i = j + 1;
    }
    return 0;
}

static const char *param_get(const apictx *c, const char *key)
{
    for (size_t i = 0; i < c->np; i++)
        if (strcmp(c->p[i].key, key) == 0)
            return c->p[i].val;
    return NULL;
}

static size_t param_count(const apictx *c, const char *key)
{
    size_t n = 0;
    for (size_t i = 0; i < c->np; i++)
        n += strcmp(c->p[i].key, key) == 0;
    return n;
}

/* ---- answers ---- */

static void json_error(apictx *c, int rv, const char *text)
{
    pt_resp *resp = c->resp;
    const char *type = rv == PT_ELIMIT || rv == PT_EREGEXLIMIT ? "execution"
                       : PT_IS_BAD_INPUT(rv)                   ? "bad_data"
                       : rv == PT_ETIMEOUT                     ? "timeout"
                       : PT_IS_RETRYABLE(rv)                   ? "unavailable"
                                                               : "internal";
    resp->status = rv == PT_ELIMIT ? 422 : pt_error_http_status(rv);
    resp->content_type = "application/json";
    pt_buf_reset(&c->out);
    int e = put(&c->out, "{\"status\":\"error\",\"errorType\":\"");
    e = e ? e : put(&c->out, type);
    e = e ? e : put(&c->out, "\",\"error\":");
    e = e ? e : pt_json_str(&c->out, pt_slice_str(text && text[0] ? text : pt_strerror(rv)));
    e = e ? e : put(&c->out, "}");
    if (e) {
        static const char oom[] = "{\"status\":\"error\",\"errorType\":\"internal\","
                                  "\"error\":\"out of memory\"}";
        resp->body = (const uint8_t *)oom;
        resp->body_len = sizeof(oom) - 1;
        return;
    }
    resp->body = c->out.p;
    resp->body_len = c->out.len;
}

/* Answers an error of the store, of a limit or of memory. */
static void fail_store(apictx *c, int rv)
{
    size_t mem = c->app->cfg ? c->app->cfg->max_request_memory : 0;
    if (rv == PT_ENOMEM && c->req->arena->exhausted)
        rv = PT_ETOOLARGE, snprintf(c->msg, sizeof(c->msg),
                                    "the answer needs more than web.max_request_memory (%zu "
                                    "bytes); pass a limit or narrow the query",
                                    mem);
    else if (rv == PT_ELIMIT)
        snprintf(c->msg, sizeof(c->msg),
                 "the selectors match more than %zu series (api.max_results); narrow them or "
                 "the time range",
                 c->max);
    else if (rv == PT_ETIMEOUT)
        snprintf(c->msg, sizeof(c->msg), "the query took longer than read.timeout (%lld ms)",
                 (long long)c->st->read_timeout_ms);
    else if (PT_IS_RETRYABLE(rv))
        snprintf(c->msg, sizeof(c->msg), "storage read failed: %s", pt_strerror(rv));
    else if (!PT_IS_BAD_INPUT(rv))
        snprintf(c->msg, sizeof(c->msg), "%s", pt_strerror(rv));
    json_error(c, rv, c->msg);
}

/* `{"status":"success","data":` — the caller appends the data, then calls finish. */
static int begin_ok(apictx *c)
{
    return put(&c->out, "{\"status\":\"success\",\"data\":");
}

/* Closes the answer with its warnings (NULL: none). */
static void finish(apictx *c, int rv, const char *warning)
{
    if (rv == 0 && warning) {
        rv = put(&c->out, ",\"warnings\":[");
        rv = rv ? rv : pt_json_str(&c->out, pt_slice_str(warning));
        rv = rv ? rv : put(&c->out, "]");
    }
    rv = rv ? rv : put(&c->out, "}");
    if (rv) {
        fail_store(c, PT_ENOMEM);
        return;
    }
    c->resp->status = 200;
    c->resp->content_type = "application/json";
    c->resp->body = c->out.p;
    c->resp->body_len = c->out.len;
}

static const char truncated[] = "results truncated due to limit";

/* Parses the common parameters (limit too unless the endpoint reads its own). 0, or an
 * error already answered. */
static int api_begin(apictx *c, pt_ctx *x, pt_req *req, pt_resp *resp, int own_limit)
{
    pt_app *app = x->app;
    memset(c, 0, sizeof(*c));
    c->app = app;
    c->st = x->store;
    c->req = req;
    c->resp = resp;
    pt_buf_init_arena(&c->out, req->arena, 0);
    c->max = app->cfg ? (size_t)app->cfg->api_max_results : 10000;
    int rv = form_parse(c, req->query, strlen(req->query));
    if (rv == 0 && (req->method == PT_M_POST || req->method == PT_M_PUT) &&
        strncasecmp(req->content_type, "application/x-www-form-urlencoded", 33) == 0)
        rv = form_parse(c, (const char *)req->body, req->body_len);
    if (rv) {
        json_error(c, rv, c->msg);
        return rv;
    }
    static const char *const names[2] = {"start", "end"};
    int64_t t[2] = {-PT_API_TIME_LIMIT_MS, PT_API_TIME_LIMIT_MS};
    for (int i = 0; i < 2; i++) {
        const char *v = param_get(c, names[i]);
        if (v && *v && pt_api_time(v, &t[i]) != 0) {
            snprintf(c->msg, sizeof(c->msg),
                     "invalid parameter \"%s\": cannot parse \"%.100s\" to a valid timestamp",
                     names[i], v);
            json_error(c, PT_EBADREQ, c->msg);
            return PT_EBADREQ;
        }
    }
    int64_t oldest = pt_oldest_kept(c->st);
    c->asked_start = t[0];
    c->start = t[0] < oldest ? oldest : t[0];
    c->end = t[1] > PT_MAX_TIME_MS ? PT_MAX_TIME_MS : t[1];
    const char *l = own_limit ? NULL : param_get(c, "limit");
    if (l && *l) {
        char *e;
        long long v = strtoll(l, &e, 10);
        if (*e || v < 0) {
            snprintf(c->msg, sizeof(c->msg), "invalid parameter \"limit\": %s",
                     *e ? "not a number" : "limit must be non-negative");
            json_error(c, PT_EBADREQ, c->msg);
            return PT_EBADREQ;
        }
        c->limit = (size_t)v;
    }
    return 0;
}

/* A query context over the request's window. */
static void qctx_init(apictx *c, qctx *q)
{
    pt_store *st = c->st;
    qctx_start(q, st, c->req->arena, c->req->cancelled);
    q->c.limit = c->max;
    q->day_first = c->start - c->start % st->index_bucket_ms;
    q->day_last = c->end - c->end % st->index_bucket_ms;
}

static int series_cmp(const void *x, const void *y)
{
    const series *a = x, *b = y;
    return pt_labels_cmp(a->labels, a->nlabels, b->labels, b->nlabels);
}

/* select_union's work, with its matchers' environment. */
static int union_of(apictx *c, pt_matcher_env *env, series **out, size_t *n)
{
    series *all = NULL;
    size_t k = 0;
    *out = NULL;
    *n = 0;
    if (c->end < c->start)
        return 0;
    for (size_t i = 0; i < c->np; i++) {
        if (strcmp(c->p[i].key, "match[]") != 0)
            continue;
        qctx q;
        qctx_init(c, &q);
        int rv = pt_selector_parse(c->req->arena, c->p[i].val, strlen(c->p[i].val), env, &q.ms,
                                   &q.nms, c->msg, sizeof(c->msg));
        if (rv == 0 && (rv = pt_select(&q)) == PT_EREGEXLIMIT)
            pt_matcher_limit_msg(q.costly, c->msg, sizeof(c->msg));
        pt_selector_free(q.ms, q.nms);
        if (rv == 0 && k + q.c.n > c->max)
            rv = PT_ELIMIT;
        if (rv == PT_EREGEXLIMIT) {
            json_error(c, rv, c->msg);
            return rv;
        }
        if (rv) {
            if (PT_IS_BAD_INPUT(rv) && rv != PT_ELIMIT) {
                char m[PT_MSG_MAX + 32];
                snprintf(m, sizeof(m), "invalid parameter \"match[]\": %s", c->msg);
                json_error(c, rv, m);
            } else {
                fail_store(c, rv);
            }
            return rv;
        }
        if (q.c.n == 0)
            continue;
        series *grown = pt_arena_alloc(c->req->arena, (k + q.c.n) * sizeof(*grown));
        if (!grown) {
            fail_store(c, PT_ENOMEM);
            return PT_ENOMEM;
        }
        if (k)
            memcpy(grown, all, k * sizeof(*all));
        memcpy(grown + k, q.c.v, q.c.n * sizeof(*all));
        all = grown;
        k += q.c.n;
    }
    if (k > 1)
        qsort(all, k, sizeof(*all), series_cmp);
    size_t u = 0;
    for (size_t i = 0; i < k; i++)
        if (u == 0 || series_cmp(&all[u - 1], &all[i]) != 0)
            all[u++] = all[i];
    *out = all;
    *n = u;
    return 0;
}

/* The series of every match[] (a union), sorted by labels, without duplicates. 0 or an
 * error already answered. */
static int select_union(apictx *c, series **out, size_t *n)
{
    pt_store *st = c->st;
    pt_matcher_env env;
    int rv = pt_matcher_env_init(&env, c->req->arena, st->regex_match_limit, st->regex_heap_limit,
                                 st->max_matchers);
    if (rv)
        fail_store(c, rv);
    else
        rv = union_of(c, &env, out, n);
    pt_matcher_env_free(&env);
    return rv;
}

static int slice_cmp(const void *x, const void *y)
{
    return pt_slice_cmp(*(const pt_slice *)x, *(const pt_slice *)y);
}

/* Sorts v, drops duplicates and answers it as a JSON array of strings, cut at the
 * client's limit. capped: the list stopped at api.max_results. */
static void answer_strings(apictx *c, pt_slice *v, size_t n, int capped)
{
    if (n > 1)
        qsort(v, n, sizeof(*v), slice_cmp);
    size_t u = 0;
    for (size_t i = 0; i < n; i++)
        if (u == 0 || !pt_slice_eq(v[u - 1], v[i]))
            v[u++] = v[i];
    const char *warn = NULL;
    if (c->limit && u > c->limit) {
        u = c->limit;
        warn = truncated;
    } else if (capped) {
        snprintf(c->msg, sizeof(c->msg), "results truncated at api.max_results (%zu)", c->max);
        warn = c->msg;
    }
    int rv = begin_ok(c);
    rv = rv ? rv : put(&c->out, "[");
    for (size_t i = 0; i < u && rv == 0; i++) {
        if (i)
            rv = put(&c->out, ",");
        rv = rv ? rv : pt_json_str(&c->out, v[i]);
    }
    rv = rv ? rv : put(&c->out, "]");
    finish(c, rv, warn);
}

/* From the series of every match[]: their label names (name NULL) or their values of
 * label *name. 0, or an error already answered. */
static int strings_of_union(apictx *c, const pt_slice *name, pt_slice **out, size_t *n)
{
    series *s;
    size_t ns, total = 0, k = 0;
    int rv = select_union(c, &s, &ns);
    if (rv)
        return rv;
    for (size_t i = 0; i < ns; i++)
        total += s[i].nlabels;
    pt_slice *v = pt_arena_alloc(c->req->arena, (total + 1) * sizeof(*v));
    if (!v) {
        fail_store(c, PT_ENOMEM);
        return PT_ENOMEM;
    }
    for (size_t i = 0; i < ns; i++)
        for (size_t j = 0; j < s[i].nlabels; j++)
            if (!name)
                v[k++] = s[i].labels[j].name;
            else if (pt_slice_eq(s[i].labels[j].name, *name))
                v[k++] = s[i].labels[j].value;
    *out = v;
    *n = k;
    return 0;
}

/* Label names (name NULL) or the values of label *name: from match[] when given, else
 * from the index over the window. */
static void answer_labels(apictx *c, const pt_slice *name)
{
    pt_slice *v = NULL;
    size_t n = 0;
    int capped = 0, rv = 0;
    if (param_count(c, "match[]")) {
        if (strings_of_union(c, name, &v, &n) != 0)
            return;
    } else if (c->end >= c->start) {
        qctx q;
        qctx_init(c, &q);
        if (name) {
            rv = pt_select_values(&q, *name, c->max, &v, &n);
            if (rv == PT_ELIMIT)
                capped = 1, rv = 0;
        } else {
            rv = pt_select_names(&q, c->max, &v, &n, &capped);
        }
    }
    if (rv)
        fail_store(c, rv);
    else
        answer_strings(c, v, n, capped);
}

void pt_api_labels(pt_ctx *ctx, pt_req *req, pt_resp *resp)
{
    apictx c;
    if (api_begin(&c, ctx, req, resp, 0) == 0)
        answer_labels(&c, NULL);
}

void pt_api_label_values(pt_ctx *ctx, pt_req *req, pt_resp *resp)
{
    apictx c;
    if (api_begin(&c, ctx, req, resp, 0) != 0)
        return;
    static const char pre[] = "/api/v1/label/", post[] = "/values";
    const size_t fixed = sizeof(pre) - 1 + sizeof(post) - 1;
    size_t pl = strlen(req->path);
    int bad = 0;
    char *name = NULL;
    if (pl > fixed && strcmp(req->path + pl - (sizeof(post) - 1), post) == 0) {
        name = form_decode(req->arena, req->path + sizeof(pre) - 1, pl - fixed, &bad);
        if (!name && !bad) {
            fail_store(&c, PT_ENOMEM);
            return;
        }
    }
    if (!name || strchr(name, '/') || !pt_utf8_valid(pt_slice_str(name))) {
        snprintf(c.msg, sizeof(c.msg), "invalid label name: \"%.200s\"", req->path);
        json_error(&c, PT_EBADREQ, c.msg);
        return;
    }
    pt_slice ln = pt_promql_unescape_name(req->arena, pt_slice_str(name));
    answer_labels(&c, &ln);
}

void pt_api_series(pt_ctx *ctx, pt_req *req, pt_resp *resp)
{
    apictx c;
    if (api_begin(&c, ctx, req, resp, 0) != 0)
        return;
    if (!param_count(&c, "match[]")) {
        json_error(&c, PT_EBADREQ, "no match[] parameter provided");
        return;
    }
    series *s;
    size_t n;
    if (select_union(&c, &s, &n) != 0)
        return;
    const char *warn = NULL;
    if (c.limit && n > c.limit) {
        n = c.limit;
        warn = truncated;
    }
    int rv = begin_ok(&c);
    rv = rv ? rv : put(&c.out, "[");
    for (size_t i = 0; i < n && rv == 0; i++) {
        rv = put(&c.out, i ? ",{" : "{");
        for (size_t j = 0; j < s[i].nlabels && rv == 0; j++) {
            if (j)
                rv = put(&c.out, ",");
            rv = rv ? rv : pt_json_str(&c.out, s[i].labels[j].name);
            rv = rv ? rv : put(&c.out, ":");
            rv = rv ? rv : pt_json_str(&c.out, s[i].labels[j].value);
        }
        rv = rv ? rv : put(&c.out, "}");
    }
    rv = rv ? rv : put(&c.out, "]");
    finish(&c, rv, warn);
}

/* ---- metadata ---- */

typedef struct metaout {
    apictx *c;
    long limit, per_metric; /* < 0: none */
    size_t families, in_family;
    pt_buf last; /* the family being written */
    int err;
    int capped; /* stopped at api.max_results */
} metaout;

static int on_meta_entry(void *ud, const pt_meta_entry *e)
{
    metaout *m = ud;
    pt_buf *o = &m->c->out;
    int same = m->families && pt_slice_eq(e->family, (pt_slice){m->last.p, m->last.len});
    int rv = 0;
    if (!same) {
        if (m->limit >= 0 && m->families >= (size_t)m->limit)
            return 1;
        if (m->families >= m->c->max) {
            m->capped = 1;
            return 1;
        }
        rv = put(o, m->families ? "]," : "");
        rv = rv ? rv : pt_json_str(o, e->family);
        rv = rv ? rv : put(o, ":[");
        pt_buf_reset(&m->last);
        rv = rv ? rv : pt_buf_append(&m->last, e->family.p, e->family.n);
        m->families++;
        m->in_family = 0;
    }
    if (rv == 0 && m->per_metric >= 0 && m->in_family >= (size_t)m->per_metric)
        return 0;
    rv = rv ? rv : put(o, m->in_family ? ",{\"type\":" : "{\"type\":");
    rv = rv ? rv : pt_json_str(o, e->type);
    rv = rv ? rv : put(o, ",\"help\":");
    rv = rv ? rv : pt_json_str(o, e->help);
    rv = rv ? rv : put(o, ",\"unit\":");
    rv = rv ? rv : pt_json_str(o, e->unit);
    rv = rv ? rv : put(o, "}");
    m->in_family++;
    if (rv)
        m->err = rv;
    return rv;
}

void pt_api_metadata(pt_ctx *ctx, pt_req *req, pt_resp *resp)
{
    apictx c;
    if (api_begin(&c, ctx, req, resp, 1) != 0)
        return;
    /* As Prometheus: limit < 0 is none (0 answers nothing), limit_per_metric <= 0 none. */
    metaout m = {.c = &c, .limit = -1, .per_metric = -1};
    static const char *const names[2] = {"limit", "limit_per_metric"};
    long *dst[2] = {&m.limit, &m.per_metric};
    for (int i = 0; i < 2; i++) {
        const char *v = param_get(&c, names[i]);
        char *e;
        if (!v || !*v)
            continue;
        long long x = strtoll(v, &e, 10);
        if (*e) {
            snprintf(c.msg, sizeof(c.msg), "%s must be a number", names[i]);
            json_error(&c, PT_EBADREQ, c.msg);
            return;
        }
        *dst[i] = x < 0 || (i == 1 && x == 0) ? -1 : (long)x;
    }
    pt_buf_init_arena(&m.last, req->arena, 0);
    const char *metric = param_get(&c, "metric");
    int rv = begin_ok(&c);
    rv = rv ? rv : put(&c.out, "{");
    if (rv == 0)
        rv = pt_meta_scan(c.st, pt_slice_str(metric ? metric : ""), on_meta_entry, &m);
    if (rv && !m.err) {
        fail_store(&c, rv);
        return;
    }
    rv = rv ? rv : put(&c.out, m.families ? "]}" : "}");
    if (m.capped)
        snprintf(c.msg, sizeof(c.msg), "results truncated at api.max_results (%zu)", c.max);
    finish(&c, rv, m.capped ? c.msg : NULL);
}

/* ---- /api/v1/status/tsdb: the index bucket holding `time` (default now) ---- */

static int put_u64(pt_buf *o, uint64_t v)
{
    char n[32];
    snprintf(n, sizeof(n), "%llu", (unsigned long long)v);
    return put(o, n);
}

static int put_top(pt_buf *o, const char *key, const pt_card_top *t)
{
    int rv = put(o, ",\"");
    rv = rv ? rv : put(o, key);
    rv = rv ? rv : put(o, "\":[");
    for (size_t i = 0; i < t->n && rv == 0; i++) {
        rv = put(o, i ? ",{\"name\":" : "{\"name\":");
        rv = rv ? rv : pt_json_str(o, (pt_slice){t->v[i].name.p, t->v[i].name.len});
        rv = rv ? rv : put(o, ",\"value\":");
        rv = rv ? rv : put_u64(o, t->v[i].value);
        rv = rv ? rv : put(o, "}");
    }
    return rv ? rv : put(o, "]");
}

void pt_api_tsdb_status(pt_ctx *ctx, pt_req *req, pt_resp *resp)
{
    apictx c;
    if (api_begin(&c, ctx, req, resp, 0) != 0)
        return;
    int64_t at = pt_wall_ms();
    const char *t = param_get(&c, "time");
    if (t && *t && (pt_api_time(t, &at) != 0 || at < 0 || at > PT_MAX_TIME_MS)) {
        snprintf(c.msg, sizeof(c.msg),
                 "invalid parameter \"time\": cannot parse \"%.100s\" to a valid timestamp", t);
        json_error(&c, PT_EBADREQ, c.msg);
        return;
    }
    size_t limit = c.limit ? c.limit : 10; /* Prometheus' default */
    if (limit > c.max)
        limit = c.max;
    int64_t bucket = c.st->index_bucket_ms, first = at - at % bucket;
    pt_cardinality card;
    int rv = pt_cardinality_count(c.st, req->arena, at, limit, req->cancelled, &card);
    if (rv) {
        pt_cardinality_free(&card);
        fail_store(&c, rv);
        return;
    }
    pt_buf *o = &c.out;
    int64_t last = first + bucket - 1, now = pt_wall_ms();
    rv = begin_ok(&c);
    rv = rv ? rv : put(o, "{\"headStats\":{\"numSeries\":");
    rv = rv ? rv : put_u64(o, card.series);
    rv = rv ? rv : put(o, ",\"numLabelPairs\":");
    rv = rv ? rv : put_u64(o, card.pairs);
    rv = rv ? rv : put(o, ",\"chunkCount\":0,\"minTime\":");
    rv = rv ? rv : put_u64(o, (uint64_t)first);
    rv = rv ? rv : put(o, ",\"maxTime\":");
    rv = rv ? rv : put_u64(o, (uint64_t)(now < last && now >= first ? now : last));
    rv = rv ? rv : put(o, "}");
    rv = rv ? rv : put_top(o, "seriesCountByMetricName", &card.by_metric);
    rv = rv ? rv : put_top(o, "labelValueCountByLabelName", &card.values_by_name);
    rv = rv ? rv : put_top(o, "memoryInBytesByLabelName", &card.bytes_by_name);
    rv = rv ? rv : put_top(o, "seriesCountByLabelValuePair", &card.by_pair);
    rv = rv ? rv : put(o, "}");
    pt_cardinality_free(&card);
    finish(&c, rv, NULL);
}

/* ---- the admin API (web.enable_admin_api) ---- */

/* 0 when the admin API is on; else answers 403. */
static int admin_enabled(apictx *c)
{
    if (c->app->cfg && c->app->cfg->enable_admin_api)
        return 0;
    json_error(c, PT_EUNSUPPORTED,
               "admin APIs disabled: start promtable with web.enable_admin_api "
               "(--web.enable-admin-api)");
    c->resp->status = 403;
    return PT_EUNSUPPORTED;
}

/* POST or PUT /api/v1/admin/tsdb/delete_series: match[] (one at least), start, end
 * (default: all time). 204 once every matching series' samples in the window are gone. */
void pt_api_delete_series(pt_ctx *ctx, pt_req *req, pt_resp *resp)
{
    apictx c;
    if (api_begin(&c, ctx, req, resp, 1) != 0 || admin_enabled(&c) != 0)
        return;
    if (param_count(&c, "match[]") == 0) {
        json_error(&c, PT_EBADREQ, "no match[] parameter provided");
        return;
    }
    /* The window as asked, not cut at storage.retention as reads are: what is older is
     * still stored until compactions drop it. No sample is before 0. */
    c.start = c.asked_start < 0 ? 0 : c.asked_start;
    if (c.end < c.start) {
        json_error(&c, PT_EBADREQ, "end timestamp must not be before start time");
        return;
    }
    series *all;
    size_t n;
    if (select_union(&c, &all, &n) != 0)
        return;
    pt_delete_result dr;
    int rv = pt_store_delete(c.st, all, n, c.start, c.end, req->arena, req->cancelled, &dr);
    if (rv != 0) {
        if (rv == PT_EBADREQ)
            snprintf(c.msg, sizeof(c.msg), "the %s backend cannot delete",
                     c.st->be->ops->name);
        else
            snprintf(c.msg, sizeof(c.msg), "deleting failed part way (%s); send the request "
                     "again to finish", pt_strerror(rv));
        json_error(&c, rv, c.msg);
        return;
    }
    pt_log(PT_LOG_INFO, "series deleted", "series=%zu series_days=%zu index_days=%zu "
           "start=%lld end=%lld", dr.series, dr.series_days, dr.index_days_erased,
           (long long)c.start, (long long)c.end);
    resp->status = 204;
    resp->body_len = 0;
}

/* ---- POST /api/v1/admin/tsdb/snapshot (web.enable_admin_api) ---- */

void pt_api_snapshot(pt_ctx *ctx, pt_req *req, pt_resp *resp)
{
    apictx c;
    if (api_begin(&c, ctx, req, resp, 1) != 0 || admin_enabled(&c) != 0)
        return;
    pt_app *app = ctx->app;
    const char *skip = param_get(&c, "skip_head");
    int with_head = !(skip && (strcmp(skip, "true") == 0 || strcmp(skip, "1") == 0));
    pt_backend *be = app->store.be; /* the whole store, whichever tenant asks */
    if (!be->ops->snapshot) {
        snprintf(c.msg, sizeof(c.msg),
                 "the %s backend makes no snapshots: use its own backups (Cloud Bigtable: "
                 "managed backups)",
                 be->ops->name);
        json_error(&c, PT_EUNSUPPORTED, c.msg);
        return;
    }
    /* As Prometheus names them: the UTC time, then 16 random hex digits. */
    char name[64];
    uint8_t rnd[8] = {0};
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    size_t n = strftime(name, sizeof(name), "%Y%m%dT%H%M%SZ-", &tm);
    if (getentropy(rnd, sizeof(rnd)) != 0)
        memcpy(rnd, &(uint64_t){pt_now_ns()}, sizeof(rnd));
    for (size_t i = 0; i < sizeof(rnd); i++)
        snprintf(name + n + 2 * i, sizeof(name) - n - 2 * i, "%02x", rnd[i]);
    int rv = be->ops->snapshot(be->state, name, with_head, c.msg, sizeof(c.msg));
    if (rv) {
        json_error(&c, rv, c.msg);
        return;
    }
    rv = begin_ok(&c);
    rv = rv ? rv : put(&c.out, "{\"name\":");
    rv = rv ? rv : pt_json_str(&c.out, pt_slice_str(name));
    rv = rv ? rv : put(&c.out, "}");
    finish(&c, rv, NULL);
}
