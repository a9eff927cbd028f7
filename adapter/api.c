/* The browsing API: selectors, parameters and JSON around the index (select.c, meta.c). */
#include "api.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "error.h"
#include "meta.h"
#include "read_int.h"

/* ---- JSON ---- */

static int put(pt_buf *b, const char *s)
{
    return pt_buf_append(b, s, strlen(s));
}

int pt_json_str(pt_buf *b, pt_slice s)
{
    static const char hex[] = "0123456789abcdef";
    int rv = pt_buf_append(b, "\"", 1);
    int valid = pt_utf8_valid(s);
    size_t i = 0, run = 0; /* bytes [run, i) go out as they are */
    while (rv == 0 && i < s.n) {
        uint8_t c = s.p[i];
        char esc[8];
        size_t en = 0, skip = 1;
        if (c == '"' || c == '\\') {
            esc[0] = '\\', esc[1] = (char)c, en = 2;
        } else if (c < 0x20 || c == 0x7f) {
            const char *shortc = c == '\n'   ? "n"
                                 : c == '\r' ? "r"
                                 : c == '\t' ? "t"
                                 : c == '\b' ? "b"
                                 : c == '\f' ? "f"
                                             : NULL;
            if (shortc) {
                esc[0] = '\\', esc[1] = shortc[0], en = 2;
            } else {
                memcpy(esc, "\\u00", 4);
                esc[4] = hex[c >> 4], esc[5] = hex[c & 15], en = 6;
            }
        } else if (c >= 0x80 && !valid) {
            size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
            if (len > 1 && len <= s.n - i && pt_utf8_valid((pt_slice){s.p + i, len})) {
                i += len;
                continue;
            }
            memcpy(esc, "\xef\xbf\xbd", 3), en = 3; /* U+FFFD */
        } else {
            i++;
            continue;
        }
        rv = pt_buf_append(b, s.p + run, i - run);
        if (rv == 0)
            rv = pt_buf_append(b, esc, en);
        i += skip;
        run = i;
    }
    if (rv == 0)
        rv = pt_buf_append(b, s.p + run, s.n - run);
    return rv ? rv : pt_buf_append(b, "\"", 1);
}

/* ---- timestamps ---- */

static int digits(const char *s, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static int rfc3339(const char *s, int64_t *ms)
{
    int y, mo, d, h, mi, se, frac = 0;
    size_t n = strlen(s);
    if (n < 20 || s[4] != '-' || s[7] != '-' || (s[10] != 'T' && s[10] != 't') || s[13] != ':' ||
        s[16] != ':' || digits(s, 4, &y) || digits(s + 5, 2, &mo) || digits(s + 8, 2, &d) ||
        digits(s + 11, 2, &h) || digits(s + 14, 2, &mi) || digits(s + 17, 2, &se))
        return -1;
    static const int mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] || (mo == 2 && d == 29 && !leap) ||
        h > 23 || mi > 59 || se > 59)
        return -1;
    const char *p = s + 19;
    if (*p == '.') {
        int nd = 0;
        for (p++; *p >= '0' && *p <= '9'; p++, nd++)
            if (nd < 3)
                frac = frac * 10 + (*p - '0');
        if (nd == 0)
            return -1;
        for (; nd < 3; nd++)
            frac *= 10;
    }
    int64_t off = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int oh, om;
        if (strlen(p) != 6 || p[3] != ':' || digits(p + 1, 2, &oh) || digits(p + 4, 2, &om) ||
            oh > 23 || om > 59)
            return -1;
        off = (oh * 60 + om) * 60 * (*p == '-' ? -1 : 1);
        p += 6;
    } else {
        return -1;
    }
    if (*p)
        return -1;
    int64_t secs = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + se - off;
    *ms = secs * 1000 + frac;
    return 0;
}

/* Far enough past either end of what the store holds; times are clamped to it anyway. */
#define TIME_LIMIT_MS ((int64_t)1 << 52)

int pt_api_time(const char *s, int64_t *ms)
{
    /* What Prometheus' clients send for "no bound": Go's min and max time. */
    if (strcmp(s, "-292273086-05-16T16:47:06Z") == 0) {
        *ms = -TIME_LIMIT_MS;
        return 0;
    }
    if (strcmp(s, "292277025-08-18T07:12:54.999999999Z") == 0) {
        *ms = TIME_LIMIT_MS;
        return 0;
    }
    char *end;
    if (*s && !strchr(s, 'x') && !strchr(s, 'X') && !strpbrk(s, "nNiI ")) {
        double v = strtod(s, &end);
        if (*end == '\0' && isfinite(v)) {
            if (v > (double)TIME_LIMIT_MS / 1000)
                v = (double)TIME_LIMIT_MS / 1000;
            if (v < -(double)TIME_LIMIT_MS / 1000)
                v = -(double)TIME_LIMIT_MS / 1000;
            double whole, frac = modf(v, &whole);
            *ms = (int64_t)whole * 1000 + (int64_t)llround(frac * 1000);
            return 0;
        }
    }
    return rfc3339(s, ms);
}

/* ---- selectors ---- */

typedef struct lexer {
    const char *s;
    size_t n, i;
    pt_arena *a;
    char *msg;
    size_t msglen;
} lexer;

static int fail(lexer *lx, const char *what)
{
    if (lx->i < lx->n) {
        size_t show = lx->n - lx->i < 20 ? lx->n - lx->i : 20;
        snprintf(lx->msg, lx->msglen, "parse error at char %zu: %s, found \"%.*s\"", lx->i + 1,
                 what, (int)show, lx->s + lx->i);
    } else {
        snprintf(lx->msg, lx->msglen, "parse error at char %zu: %s, found the end", lx->i + 1,
                 what);
    }
    return PT_EBADREQ;
}

static void skip_ws(lexer *lx)
{
    while (lx->i < lx->n && strchr(" \t\r\n", lx->s[lx->i]) && lx->s[lx->i])
        lx->i++;
}

static int is_alpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* An identifier; colons allowed for metric names. 0 when there is none. */
static size_t ident(lexer *lx, int colons)
{
    size_t j = lx->i;
    while (j < lx->n &&
           (is_alpha(lx->s[j]) || (j > lx->i && is_digit(lx->s[j])) || (colons && lx->s[j] == ':')))
        j++;
    return j - lx->i;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

static size_t put_utf8(uint8_t *o, uint32_t cp)
{
    if (cp < 0x80)
        return o[0] = (uint8_t)cp, 1;
    if (cp < 0x800)
        return o[0] = (uint8_t)(0xc0 | cp >> 6), o[1] = (uint8_t)(0x80 | (cp & 0x3f)), 2;
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xe0 | cp >> 12), o[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
        o[2] = (uint8_t)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (uint8_t)(0xf0 | cp >> 18), o[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3f));
    o[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3f)), o[3] = (uint8_t)(0x80 | (cp & 0x3f));
    return 4;
}

/* A quoted string: "..." or '...' with Go's escapes, or `...` raw. */
static int string_lit(lexer *lx, pt_slice *out)
{
    char q = lx->s[lx->i];
    size_t start = lx->i++;
    uint8_t *o = pt_arena_alloc(lx->a, lx->n - start + 1);
    size_t on = 0;
    if (!o)
        return PT_ENOMEM;
    for (;;) {
        if (lx->i >= lx->n || (q != '`' && lx->s[lx->i] == '\n')) {
            lx->i = start;
            return fail(lx, "unterminated quoted string");
        }
        char c = lx->s[lx->i++];
        if (c == q)
            break;
        if (c != '\\' || q == '`') {
            o[on++] = (uint8_t)c;
            continue;
        }
        if (lx->i >= lx->n)
            continue; /* reported as unterminated */
        char e = lx->s[lx->i++];
        const char *simple = strchr("abfnrtv\\'\"", e);
        if (simple && e) {
            static const char to[] = "\a\b\f\n\r\t\v\\'\"";
            o[on++] = (uint8_t)to[simple - "abfnrtv\\'\""];
            continue;
        }
        int width = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        uint32_t v = 0;
        if (width) {
            for (int k = 0; k < width; k++) {
                int h = lx->i < lx->n ? hexval(lx->s[lx->i]) : -1;
                if (h < 0) {
                    lx->i -= 2 + (size_t)k;
                    return fail(lx, "invalid escape sequence");
                }
                v = v << 4 | (uint32_t)h;
                lx->i++;
            }
            if (e == 'x') {
                o[on++] = (uint8_t)v;
            } else if (v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) {
                lx->i -= 2 + (size_t)width;
                return fail(lx, "invalid Unicode code point in escape sequence");
            } else {
                on += put_utf8(o + on, v);
            }
            continue;
        }
        if (e >= '0' && e <= '7') {
            v = (uint32_t)(e - '0');
            for (int k = 0; k < 2; k++) {
                if (lx->i >= lx->n || lx->s[lx->i] < '0' || lx->s[lx->i] > '7') {
                    lx->i -= 2 + (size_t)k;
                    return fail(lx, "invalid octal escape sequence");
                }
                v = v * 8 + (uint32_t)(lx->s[lx->i++] - '0');
            }
            if (v > 255) {
                lx->i -= 4;
                return fail(lx, "octal escape sequence out of range");
            }
            o[on++] = (uint8_t)v;
            continue;
        }
        lx->i -= 2;
        return fail(lx, "unknown escape sequence");
    }
    *out = (pt_slice){o, on};
    if (!pt_utf8_valid(*out)) {
        lx->i = start;
        return fail(lx, "string is not valid UTF-8");
    }
    return 0;
}

static int is_quote(char c)
{
    return c == '"' || c == '\'' || c == '`';
}

typedef struct rawm {
    int type;
    pt_slice name, value;
} rawm;

/* A name: an identifier or a quoted string. */
static int name_tok(lexer *lx, pt_slice *out, const char *what)
{
    if (lx->i < lx->n && is_quote(lx->s[lx->i]))
        return string_lit(lx, out);
    size_t k = ident(lx, 0);
    if (k == 0)
        return fail(lx, what);
    *out = (pt_slice){(const uint8_t *)lx->s + lx->i, k};
    lx->i += k;
    return 0;
}

/* The matchers inside braces, after '{'. */
static int braces(lexer *lx, rawm *v, size_t *n, int *quoted_metric)
{
    for (;;) {
        skip_ws(lx);
        if (lx->i < lx->n && lx->s[lx->i] == '}') {
            lx->i++;
            return 0;
        }
        int quoted = lx->i < lx->n && is_quote(lx->s[lx->i]);
        pt_slice name;
        int rv = name_tok(lx, &name, "expected a label name or '}'");
        if (rv)
            return rv;
        skip_ws(lx);
        char c = lx->i < lx->n ? lx->s[lx->i] : 0;
        char c2 = lx->i + 1 < lx->n ? lx->s[lx->i + 1] : 0;
        if (quoted && (c == ',' || c == '}')) {
            /* {"metric.name"}: a quoted metric name alone */
            v[(*n)++] = (rawm){PT_MATCH_EQ, PT_SLICE_LIT("__name__"), name};
            (*quoted_metric)++;
        } else {
            int type = c == '=' && c2 == '~'   ? PT_MATCH_RE
                       : c == '=' && c2 != '=' ? PT_MATCH_EQ
                       : c == '!' && c2 == '=' ? PT_MATCH_NEQ
                       : c == '!' && c2 == '~' ? PT_MATCH_NRE
                                               : -1;
            if (type < 0)
                return fail(lx, "expected one of =, !=, =~, !~");
            lx->i += type == PT_MATCH_EQ ? 1 : 2;
            skip_ws(lx);
            if (lx->i >= lx->n || !is_quote(lx->s[lx->i]))
                return fail(lx, "expected a quoted label value");
            pt_slice value;
            if ((rv = string_lit(lx, &value)) != 0)
                return rv;
            v[(*n)++] = (rawm){type, name, value};
        }
        skip_ws(lx);
        if (lx->i < lx->n && lx->s[lx->i] == ',') {
            lx->i++;
            continue;
        }
        if (lx->i < lx->n && lx->s[lx->i] == '}') {
            lx->i++;
            return 0;
        }
        return fail(lx, "expected ',' or '}'");
    }
}

int pt_selector_parse(pt_arena *a, const char *s, size_t n, pt_matcher_env *env, pt_matcher **ms,
                      size_t *nms, char *msg, size_t msglen)
{
    lexer lx = {s, n, 0, a, msg, msglen};
    *ms = NULL;
    *nms = 0;
    /* At most one matcher per 2 bytes, plus the metric name. */
    rawm *v = pt_arena_alloc(a, (n / 2 + 2) * sizeof(*v));
    if (!v)
        return PT_ENOMEM;
    size_t k = 0;
    int metrics = 0, rv;
    skip_ws(&lx);
    size_t idl = ident(&lx, 1);
    if (idl) {
        v[k++] = (rawm){PT_MATCH_EQ, PT_SLICE_LIT("__name__"), {(const uint8_t *)s + lx.i, idl}};
        metrics++;
        lx.i += idl;
        skip_ws(&lx);
    }
    if (lx.i < n && s[lx.i] == '{') {
        lx.i++;
        if ((rv = braces(&lx, v, &k, &metrics)) != 0)
            return rv;
        skip_ws(&lx);
    } else if (!idl) {
        return fail(&lx, "expected a metric name or '{'");
    }
    if (lx.i < n)
        return fail(&lx, "unexpected text after the selector");
    /* `m{__name__="x"}` and `{"m", "x"}` name the metric twice. */
    for (size_t i = 1; idl && i < k; i++)
        if (pt_slice_eq(v[i].name, PT_SLICE_LIT("__name__")))
            metrics++;
    if (metrics > 1) {
        snprintf(msg, msglen, "metric name must not be set twice");
        return PT_EBADREQ;
    }
    if ((rv = pt_matcher_env_check(env, k, msg, msglen)) != 0)
        return rv;
    pt_matcher *m = pt_arena_calloc(a, (k ? k : 1) * sizeof(*m));
    if (!m)
        return PT_ENOMEM;
    *ms = m;
    int selective = 0;
    for (size_t i = 0; i < k; i++) {
        if ((rv = pt_matcher_init(&m[i], v[i].type, v[i].name, v[i].value, env, msg, msglen)) != 0)
            return rv;
        *nms = i + 1;
        selective |= !m[i].matches_empty;
    }
    if (!selective) {
        snprintf(msg, msglen, "vector selector must contain at least one non-empty matcher");
        return PT_EBADREQ;
    }
    return 0;
}

void pt_selector_free(pt_matcher *ms, size_t n)
{
    for (size_t i = 0; i < n; i++)
        pt_matcher_free(&ms[i]);
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
            int hi = i + 1 < n ? hexval(s[i + 1]) : -1, lo = i + 2 < n ? hexval(s[i + 2]) : -1;
            if (hi < 0 || lo < 0) {
                *bad = 1;
                return NULL;
            }
            o[k++] = (char)(hi << 4 | lo);
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
    if (rv == 0 && req->method == PT_M_POST &&
        strncasecmp(req->content_type, "application/x-www-form-urlencoded", 33) == 0)
        rv = form_parse(c, (const char *)req->body, req->body_len);
    if (rv) {
        json_error(c, rv, c->msg);
        return rv;
    }
    static const char *const names[2] = {"start", "end"};
    int64_t t[2] = {-TIME_LIMIT_MS, TIME_LIMIT_MS};
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
    memset(q, 0, sizeof(*q));
    q->st = st;
    q->a = c->req->arena;
    q->c.a = c->req->arena;
    q->c.limit = c->max;
    q->cancel = c->req->cancelled;
    if (st->read_timeout_ms > 0)
        q->deadline_ns = pt_now_ns() + (uint64_t)st->read_timeout_ms * 1000000u;
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

/* ---- label names from the values rows: "=" name ",@" day "," value ---- */

typedef struct firstrow {
    pt_buf key;
    int found;
} firstrow;

static int on_first(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)qual, (void)value;
    firstrow *f = ud;
    f->found = 1;
    pt_buf_reset(&f->key);
    int rv = pt_buf_append(&f->key, row.p, row.n);
    return rv ? rv : 1;
}

/* The first index row in [from, to): 1 with f->key set, 0 when none, or an error. */
static int first_row(qctx *q, pt_slice from, pt_slice to, firstrow *f)
{
    int rv = deadline_passed(q);
    if (rv)
        return rv;
    pt_row_range r = {from, to};
    size_t visited = 0;
    pt_scan s = {PT_TABLE_INDEX, &r, 1, {0}, {0}, 1, &visited, NULL};
    f->found = 0;
    rv = pt_backend_scan(q->st->be, &s, on_first, f);
    pt_m.read_rows_scanned += visited;
    return rv ? rv : f->found;
}

/* The label names with a values row in q's days: one seek to the next name, and one to
 * the window when the name's first row is before it. At most max (then *capped). */
static int list_names(qctx *q, size_t max, pt_slice **out, size_t *n, int *capped)
{
    pt_arena *a = q->a;
    firstrow f;
    pt_buf from;
    pt_buf_init_arena(&f.key, a, 0);
    pt_buf_init_arena(&from, a, 0);
    size_t cap = 64, k = 0;
    pt_slice *v = pt_arena_alloc(a, cap * sizeof(*v));
    int rv = v ? pt_buf_append(&from, "=", 1) : PT_ENOMEM;
    static const uint8_t end_all[] = {'>'}; /* after every "=" row */
    *capped = 0;
    while (rv == 0) {
        rv = first_row(q, (pt_slice){from.p, from.len}, (pt_slice){end_all, 1}, &f);
        if (rv <= 0)
            break;
        rv = 0;
        const uint8_t *p = f.key.p;
        size_t len = f.key.len, e = 1;
        if (len >= 2 && p[1] == '=') { /* series rows and markers: skip past them all */
            pt_buf_reset(&from);
            rv = pt_buf_append(&from, "=>", 2);
            continue;
        }
        while (e < len && p[e] != ',')
            e += p[e] == '\\' ? 2 : 1;
        if (e + 2 + PT_BASE_DIGITS > len || p[e + 1] != '@') {
            rv = PT_EINTERNAL;
            break;
        }
        pt_slice esc = {p + 1, e - 1};
        int64_t day = 0;
        for (size_t i = 0; i < PT_BASE_DIGITS; i++)
            day = day * 10 + (p[e + 2 + i] - '0');
        int in = day >= q->day_first && day <= q->day_last;
        if (!in && day < q->day_first) {
            /* "=" esc ",@" day13: the name's values rows in the window */
            size_t kl = 1 + PT_ROW_KEY_LEN(esc.n);
            uint8_t *b0 = pt_arena_alloc(a, 2 * kl);
            if (!b0) {
                rv = PT_ENOMEM;
                break;
            }
            uint8_t *b1 = b0 + kl;
            b0[0] = b1[0] = '=';
            pt_row_key(b0 + 1, esc, q->day_first);
            pt_row_key(b1 + 1, esc, q->day_last + q->st->index_bucket_ms);
            size_t n0 = kl, n1 = kl;
            firstrow g;
            pt_buf_init_arena(&g.key, a, 0);
            rv = first_row(q, (pt_slice){b0, n0}, (pt_slice){b1, n1}, &g);
            if (rv < 0)
                break;
            in = rv;
            rv = 0;
        }
        if (in && !pt_index_is_digest(esc)) { /* a digested name cannot be read back */
            uint8_t *name = pt_arena_alloc(a, esc.n ? esc.n : 1);
            long nl = name ? pt_unescape(name, esc) : PT_ENOMEM;
            if (nl < 0) {
                rv = nl == PT_ENOMEM ? PT_ENOMEM : PT_EINTERNAL;
                break;
            }
            if (k == max) {
                *capped = 1;
                break;
            }
            if (k == cap) {
                pt_slice *g = pt_arena_alloc(a, 2 * cap * sizeof(*g));
                if (!g) {
                    rv = PT_ENOMEM;
                    break;
                }
                memcpy(g, v, k * sizeof(*v));
                v = g, cap *= 2;
            }
            v[k++] = (pt_slice){name, (size_t)nl};
        }
        /* The next name: every key of this one starts "=" esc ",@" < "=" esc ",A". */
        pt_buf_reset(&from);
        rv = pt_buf_append(&from, p, e + 1);
        rv = rv ? rv : pt_buf_append(&from, "A", 1);
    }
    *out = v;
    *n = k;
    return rv;
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
            rv = list_names(&q, c->max, &v, &n, &capped);
        }
    }
    if (rv)
        fail_store(c, rv);
    else
        answer_strings(c, v, n, capped);
}

/* Prometheus 3's escaping of a label name in a URL path: "U__" then the name with '_'
 * written "__" and any other character outside [a-zA-Z0-9] as "_<hex code point>_". A
 * name that does not decode is taken as it is (as Prometheus does). */
static pt_slice u_unescape(pt_arena *a, pt_slice s)
{
    if (s.n < 3 || memcmp(s.p, "U__", 3) != 0)
        return s;
    uint8_t *o = pt_arena_alloc(a, s.n);
    size_t k = 0;
    if (!o)
        return s;
    for (size_t i = 3; i < s.n;) {
        if (s.p[i] != '_') {
            o[k++] = s.p[i++];
            continue;
        }
        if (i + 1 < s.n && s.p[i + 1] == '_') {
            o[k++] = '_';
            i += 2;
            continue;
        }
        uint32_t cp = 0;
        size_t j = i + 1;
        while (j < s.n && j - i <= 8 && hexval((char)s.p[j]) >= 0)
            cp = cp << 4 | (uint32_t)hexval((char)s.p[j++]);
        if (j == i + 1 || j >= s.n || s.p[j] != '_' || cp > 0x10ffff ||
            (cp >= 0xd800 && cp <= 0xdfff) || cp == 0)
            return s;
        k += put_utf8(o + k, cp);
        i = j + 1;
    }
    return (pt_slice){o, k};
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
    pt_slice ln = u_unescape(req->arena, pt_slice_str(name));
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
