/* Prometheus' text forms: series selectors, label names escaped for URL paths, timestamps. */
#include "promql.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "store.h" /* pt_utf8_valid */

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

int pt_api_time(const char *s, int64_t *ms)
{
    /* What Prometheus' clients send for "no bound": Go's min and max time. */
    if (strcmp(s, "-292273086-05-16T16:47:06Z") == 0) {
        *ms = -PT_API_TIME_LIMIT_MS;
        return 0;
    }
    if (strcmp(s, "292277025-08-18T07:12:54.999999999Z") == 0) {
        *ms = PT_API_TIME_LIMIT_MS;
        return 0;
    }
    char *end;
    if (*s && !strchr(s, 'x') && !strchr(s, 'X') && !strpbrk(s, "nNiI ")) {
        double v = strtod(s, &end);
        if (*end == '\0' && isfinite(v)) {
            if (v > (double)PT_API_TIME_LIMIT_MS / 1000)
                v = (double)PT_API_TIME_LIMIT_MS / 1000;
            if (v < -(double)PT_API_TIME_LIMIT_MS / 1000)
                v = -(double)PT_API_TIME_LIMIT_MS / 1000;
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
    lexer lx = {.s = s, .n = n, .a = a, .msg = msg, .msglen = msglen};
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

/* ---- label names in URL paths ---- */

pt_slice pt_promql_unescape_name(pt_arena *a, pt_slice s)
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
