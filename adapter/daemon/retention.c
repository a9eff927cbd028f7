/* Retention per selector: the rules, parsed once, asked per series and per row. */
#include "retention.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "config.h"
#include "error.h"
#include "matcher.h"
#include "promql.h"
#include "rowkey.h"
#include "tenant.h"

typedef struct rule {
    int64_t keep_ms;
    pt_matcher *ms;
    size_t nms;
} rule;

struct pt_retention_rules {
    char *text; /* the selectors' names and values point into it */
    rule *r;
    size_t n;
    int64_t global_ms;
    int64_t shortest_ms;
    pt_arena a; /* the matchers; their regexes and match memory are malloc'd (env), as a
                   daemon's lifetime of matches would grow an arena without end */
    pt_matcher_env env;
    int env_ready;
    pthread_mutex_t mu; /* matchers share their match data */
};

void pt_retention_rules_free(pt_retention_rules *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n; i++)
        pt_selector_free(r->r[i].ms, r->r[i].nms);
    if (r->env_ready)
        pt_matcher_env_free(&r->env);
    pt_arena_free(&r->a);
    pthread_mutex_destroy(&r->mu);
    free(r->r);
    free(r->text);
    free(r);
}

/* One line, "<retention> <selector>", into rule i. */
static int parse_rule(pt_retention_rules *r, char *line, size_t i, char *err, size_t errlen)
{
    char *sp = line + strcspn(line, " \t");
    if (!*sp) {
        snprintf(err, errlen, "storage.retention_rules, rule %zu: \"<retention> <selector>\" "
                 "expected, found \"%.40s\"", i + 1, line);
        return -1;
    }
    *sp++ = '\0';
    sp += strspn(sp, " \t");
    long ms;
    if (pt_parse_duration_ms(line, &ms) != 0 || ms <= 0) {
        snprintf(err, errlen, "storage.retention_rules, rule %zu: retention \"%s\" is not a "
                 "duration above 0 (\"7d\", \"12h\")", i + 1, line);
        return -1;
    }
    if (r->global_ms > 0 && ms > r->global_ms) {
        int64_t g = r->global_ms;
        const char *unit = g % 86400000 == 0 ? "d" : g % 3600000 == 0 ? "h" : "ms";
        long long n = g % 86400000 == 0 ? g / 86400000 : g % 3600000 == 0 ? g / 3600000 : g;
        snprintf(err, errlen, "storage.retention_rules, rule %zu: retention %s is longer than "
                 "storage.retention (%lld%s): samples go at storage.retention whatever the "
                 "rule; raise storage.retention or shorten the rule", i + 1, line, n, unit);
        return -1;
    }
    rule *ru = &r->r[i];
    char msg[256];
    int rv = pt_selector_parse(&r->a, sp, strlen(sp), &r->env, &ru->ms, &ru->nms, msg,
                               sizeof(msg));
    if (rv != 0) {
        snprintf(err, errlen, "storage.retention_rules, rule %zu: selector %s: %s", i + 1, sp,
                 rv == PT_ENOMEM ? "out of memory" : msg);
        return -1;
    }
    ru->keep_ms = ms;
    if (!r->shortest_ms || ms < r->shortest_ms)
        r->shortest_ms = ms;
    return 0;
}

int pt_retention_rules_parse(const char *text, int64_t global_ms, uint32_t match_limit,
                             size_t heap_limit, pt_retention_rules **out, char *err,
                             size_t errlen)
{
    *out = NULL;
    size_t lines = 1;
    for (const char *p = text; *p; p++)
        lines += *p == '\n';
    pt_retention_rules *r = calloc(1, sizeof(*r));
    if (!r || !(r->text = strdup(text)) || !(r->r = calloc(lines, sizeof(*r->r)))) {
        snprintf(err, errlen, "out of memory");
        pt_retention_rules_free(r);
        return -1;
    }
    pthread_mutex_init(&r->mu, NULL);
    pt_arena_init(&r->a, 4096, 0);
    r->global_ms = global_ms;
    if (pt_matcher_env_init(&r->env, NULL, match_limit, heap_limit, 0) != 0) {
        snprintf(err, errlen, "out of memory");
        pt_retention_rules_free(r);
        return -1;
    }
    r->env_ready = 1;
    for (char *line = r->text; line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        line += strspn(line, " \t\r");
        size_t len = strlen(line);
        while (len && (line[len - 1] == ' ' || line[len - 1] == '\t' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (len && parse_rule(r, line, r->n++, err, errlen) != 0) {
            pt_retention_rules_free(r);
            return -1;
        }
        line = nl ? nl + 1 : NULL;
    }
    if (r->n == 0) {
        pt_retention_rules_free(r);
        return 0;
    }
    *out = r;
    return 0;
}

int64_t pt_retention_rules_shortest(const pt_retention_rules *r)
{
    return r->shortest_ms;
}

static pt_slice label_value(const pt_label *ls, size_t n, pt_slice name)
{
    for (size_t i = 0; i < n; i++)
        if (pt_slice_eq(ls[i].name, name))
            return ls[i].value;
    return (pt_slice){(const uint8_t *)"", 0};
}

/* 1 when every matcher of ru accepts the labels; a regex past its limits does not. */
static int rule_matches(rule *ru, const pt_label *ls, size_t n)
{
    for (size_t i = 0; i < ru->nms; i++)
        if (pt_matcher_match(&ru->ms[i], label_value(ls, n, ru->ms[i].name)) != 1)
            return 0;
    return 1;
}

int64_t pt_retention_keep(void *ud, const pt_label *labels, size_t n)
{
    pt_retention_rules *r = ud;
    int64_t keep = r->global_ms;
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < r->n; i++)
        if (rule_matches(&r->r[i], labels, n)) {
            keep = r->r[i].keep_ms;
            break;
        }
    pthread_mutex_unlock(&r->mu);
    return keep;
}

int64_t pt_retention_keep_row(void *ud, pt_slice row)
{
    pt_retention_rules *r = ud;
    if (row.n && row.p[0] == PT_TENANT_MARK) {
        const uint8_t *m = row.n > 1 ? memchr(row.p + 1, PT_TENANT_MARK, row.n - 1) : NULL;
        if (!m)
            return r->global_ms;
        row.n -= (size_t)(m + 1 - row.p);
        row.p = m + 1;
    }
    /* sid ",@" base or sid ",#" base */
    size_t tail = 2 + PT_BASE_DIGITS;
    if (row.n <= tail || row.p[row.n - tail] != ',' ||
        (row.p[row.n - tail + 1] != '@' && row.p[row.n - tail + 1] != '#'))
        return r->global_ms;
    pt_arena a;
    pt_arena_init(&a, 1024, 0);
    pt_label *ls;
    long n = pt_series_id_parse(&a, (pt_slice){row.p, row.n - tail}, &ls);
    int64_t keep = n > 0 ? pt_retention_keep(r, ls, (size_t)n) : r->global_ms;
    pt_arena_free(&a);
    return keep;
}
