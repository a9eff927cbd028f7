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
#include "schema.h"
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
    pt_rollup_stage stages[PT_ROLLUP_MAX_STAGES];
    size_t nstages;
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

/* Keeps ms as the shortest when it is (0 = forever: never). */
static void note_shortest(pt_retention_rules *r, int64_t ms)
{
    if (ms > 0 && (!r->shortest_ms || ms < r->shortest_ms))
        r->shortest_ms = ms;
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
    note_shortest(r, ms);
    return 0;
}

int pt_retention_rules_parse(const char *text, int64_t global_ms, const pt_rollup_stage *stages,
                             size_t nstages, uint32_t match_limit, size_t heap_limit,
                             pt_retention_rules **out, char *err, size_t errlen)
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
    if (r->n == 0 && nstages == 0) {
        pt_retention_rules_free(r);
        return 0;
    }
    r->nstages = nstages < PT_ROLLUP_MAX_STAGES ? nstages : PT_ROLLUP_MAX_STAGES;
    if (r->nstages)
        memcpy(r->stages, stages, r->nstages * sizeof(*stages));
    for (size_t i = 0; i < r->nstages; i++)
        note_shortest(r, stages[i].keep_ms);
    note_shortest(r, global_ms);
    *out = r;
    return 0;
}

int64_t pt_retention_longest(int64_t global_ms, const pt_rollup_stage *stages, size_t n)
{
    int64_t longest = global_ms;
    for (size_t i = 0; i < n && longest > 0; i++)
        if (stages[i].keep_ms <= 0 || stages[i].keep_ms > longest)
            longest = stages[i].keep_ms;
    return longest;
}

static int stage_cmp(const void *x, const void *y)
{
    int64_t a = ((const pt_rollup_stage *)x)->res_ms, b = ((const pt_rollup_stage *)y)->res_ms;
    return a < b ? -1 : a > b;
}

int pt_rollups_parse(const char *text, pt_rollup_stage *out, size_t *n, char *err,
                     size_t errlen)
{
    *n = 0;
    for (const char *line = text; *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        char buf[160], res[64], keep[64], extra[2];
        int k = 0;
        if (len >= sizeof(buf)) {
            snprintf(err, errlen, "storage.rollups, stage %zu: too long", *n + 1);
            return -1;
        }
        memcpy(buf, line, len);
        buf[len] = '\0';
        line = nl ? nl + 1 : line + len;
        k = sscanf(buf, "%63s %63s %1s", res, keep, extra);
        if (k <= 0)
            continue; /* a blank line */
        long r, kms;
        if (k != 2) {
            snprintf(err, errlen, "storage.rollups, stage %zu: \"<resolution> <retention>\" "
                     "expected, found \"%.40s\"", *n + 1, buf);
            return -1;
        }
        if (pt_parse_duration_ms(res, &r) != 0 || r < PT_ROLLUP_MIN_RES_MS || r % 1000 != 0 ||
            PT_ROLLUP_DAY_MS % r != 0) {
            snprintf(err, errlen, "storage.rollups, stage %zu: resolution \"%s\" is not a "
                     "duration of whole seconds, at least 1m, that divides a day (\"5m\", "
                     "\"1h\")", *n + 1, res);
            return -1;
        }
        if (pt_parse_duration_ms(keep, &kms) != 0 || kms < 0) {
            snprintf(err, errlen, "storage.rollups, stage %zu: retention \"%s\" is not a "
                     "duration (\"1y\"; 0 = forever)", *n + 1, keep);
            return -1;
        }
        for (size_t i = 0; i < *n; i++)
            if (out[i].res_ms == r) {
                snprintf(err, errlen, "storage.rollups: two stages of resolution %s", res);
                return -1;
            }
        if (*n == PT_ROLLUP_MAX_STAGES) {
            snprintf(err, errlen, "storage.rollups: more than %d stages",
                     PT_ROLLUP_MAX_STAGES);
            return -1;
        }
        out[(*n)++] = (pt_rollup_stage){.res_ms = r, .keep_ms = kms};
    }
    qsort(out, *n, sizeof(*out), stage_cmp);
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
    /* sid ",@" base, sid ",#" base or sid ",%" base + code */
    size_t tail = 2 + PT_BASE_DIGITS;
    if (row.n <= tail || row.p[row.n - tail] != ',')
        return r->global_ms;
    uint8_t mark = row.p[row.n - tail + 1];
    int64_t stage_keep = 0;
    if (mark == PT_ROLLUP_MARK) {
        int64_t v = pt_key_digits(row.p + row.n - PT_BASE_DIGITS);
        if (v < 0 || !pt_rollup_code_keep(r->stages, r->nstages, v % PT_BUCKET_MS, &stage_keep))
            return r->global_ms;
        if (!r->n)
            return stage_keep;
    } else if (mark != '@' && mark != '#') {
        return r->global_ms;
    }
    pt_arena a;
    pt_arena_init(&a, 1024, 0);
    pt_label *ls;
    long n = pt_series_id_parse(&a, (pt_slice){row.p, row.n - tail}, &ls);
    int64_t keep = n > 0 ? pt_retention_keep(r, ls, (size_t)n) : r->global_ms;
    pt_arena_free(&a);
    if (mark != PT_ROLLUP_MARK)
        return keep;
    /* A rule shorter than storage.retention holds the roll-ups of its series too. */
    int ruled = keep > 0 && (r->global_ms <= 0 || keep < r->global_ms);
    return ruled && (stage_keep <= 0 || keep < stage_keep) ? keep : stage_keep;
}
