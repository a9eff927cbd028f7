#define PCRE2_CODE_UNIT_WIDTH 8
#include "matcher.h"

#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

/* PCRE2's memory from the request's arena: it is all freed at once with the arena. */
static void *arena_malloc(PCRE2_SIZE n, void *ud)
{
    return pt_arena_alloc(ud, n);
}

static void arena_free(void *p, void *ud)
{
    (void)p, (void)ud;
}

int pt_matcher_env_init(pt_matcher_env *e, pt_arena *a, uint32_t match_limit, size_t heap_limit,
                        size_t max_matchers)
{
    memset(e, 0, sizeof(*e));
    e->a = a;
    e->match_limit = match_limit;
    e->heap_limit = heap_limit;
    e->max_matchers = max_matchers;
    pcre2_general_context *g = NULL;
    if (a && !(g = pcre2_general_context_create(arena_malloc, arena_free, a)))
        return PT_ENOMEM;
    e->gctx = g;
    pcre2_compile_context *cc = pcre2_compile_context_create(g);
    pcre2_match_context *mc = pcre2_match_context_create(g);
    e->cctx = cc;
    e->mctx = mc;
    if (!cc || !mc) {
        pt_matcher_env_free(e);
        return PT_ENOMEM;
    }
    /* The interpreter's depth is bounded by its heap: every level is a frame there. The
     * JIT honours match_limit only; its stack is bounded (pt_matcher_match). */
    if (match_limit)
        pcre2_set_match_limit(mc, match_limit);
    if (heap_limit)
        pcre2_set_heap_limit(mc, heap_limit < 1024 ? 1 : (uint32_t)(heap_limit / 1024));
    return 0;
}

void pt_matcher_env_free(pt_matcher_env *e)
{
    pcre2_match_context_free(e->mctx);
    pcre2_compile_context_free(e->cctx);
    pcre2_general_context_free(e->gctx);
    e->mctx = e->cctx = e->gctx = NULL;
}

int pt_matcher_env_check(const pt_matcher_env *env, size_t n, char *msg, size_t msglen)
{
    if (!env || !env->max_matchers || n <= env->max_matchers - env->matchers)
        return 0;
    snprintf(msg, msglen,
             "the request carries more than %zu label matchers (limit read.max_matchers)",
             env->max_matchers);
    return PT_EBADREQ;
}

static int compile(pt_slice pattern, pt_matcher_env *env, pcre2_code **out, char *msg,
                   size_t msglen, pt_slice orig)
{
    int ec;
    PCRE2_SIZE off;
    /* An empty pattern may come as a NULL pointer; PCRE2 refuses NULL even with length 0. */
    const uint8_t *p = pattern.n ? pattern.p : (const uint8_t *)"";
    pcre2_code *re = pcre2_compile(p, pattern.n, PCRE2_UTF | PCRE2_DOLLAR_ENDONLY, &ec, &off,
                                   env ? env->cctx : NULL);
    if (!re) {
        if (ec == PCRE2_ERROR_HEAP_FAILED)
            return PT_ENOMEM;
        PCRE2_UCHAR why[128];
        pcre2_get_error_message(ec, why, sizeof(why));
        snprintf(msg, msglen, "invalid regular expression \"%.*s\": %s",
                 (int)(orig.n > 200 ? 200 : orig.n), (const char *)orig.p, (const char *)why);
        return PT_EREGEX;
    }
    *out = re;
    return 0;
}

/* Compiles m's anchored regex with its match data (freed by pt_matcher_free). */
static int compile_anchored(pt_matcher *m, char *msg, size_t msglen)
{
    pt_matcher_env *env = m->env;
    pt_slice value = m->value;
    /* Compile alone first, so "a)|(b" cannot escape the anchoring group. */
    pcre2_code *re;
    int rv = compile(value, env, &re, msg, msglen, value);
    if (rv != 0)
        return rv;
    pcre2_code_free(re);
    size_t n = value.n + 6;
    uint8_t *w = env && env->a ? pt_arena_alloc(env->a, n) : malloc(n);
    if (!w)
        return PT_ENOMEM;
    memcpy(w, "^(?:", 4);
    if (value.n)
        memcpy(w + 4, value.p, value.n);
    memcpy(w + 4 + value.n, ")$", 2);
    rv = compile((pt_slice){w, n}, env, &re, msg, msglen, value);
    if (!(env && env->a))
        free(w);
    if (rv != 0)
        return rv;
    m->re = re;
    /* Best effort: without the JIT the interpreter matches, under the same limits. Its
     * executable code lives outside any arena, so it is charged to the request's. */
    size_t jit = 0;
    if (pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0 && env && env->a &&
        pcre2_pattern_info(re, PCRE2_INFO_JITSIZE, &jit) == 0 && pt_arena_charge(env->a, jit))
        return PT_ENOMEM;
    m->md = pcre2_match_data_create_from_pattern(re, env ? env->gctx : NULL);
    return m->md ? 0 : PT_ENOMEM;
}

int pt_matcher_init(pt_matcher *m, int type, pt_slice name, pt_slice value, pt_matcher_env *env,
                    char *msg, size_t msglen)
{
    memset(m, 0, sizeof(*m));
    m->type = type;
    m->name = name;
    m->value = value;
    m->env = env;
    if (type < PT_MATCH_EQ || type > PT_MATCH_NRE) {
        snprintf(msg, msglen, "unknown matcher type %d", type);
        return PT_EBADREQ;
    }
    int rv = pt_matcher_env_check(env, 1, msg, msglen);
    if (rv)
        return rv;
    if (env)
        env->matchers++;
    if ((type == PT_MATCH_RE || type == PT_MATCH_NRE) &&
        (rv = compile_anchored(m, msg, msglen)) != 0) {
        pt_matcher_free(m);
        return rv;
    }
    rv = pt_matcher_match(m, (pt_slice){(const uint8_t *)"", 0});
    if (rv < 0) {
        if (rv == PT_EREGEXLIMIT)
            pt_matcher_limit_msg(m, msg, msglen);
        pt_matcher_free(m);
        return rv;
    }
    m->matches_empty = rv;
    return 0;
}

int pt_matcher_match(pt_matcher *m, pt_slice v)
{
    switch (m->type) {
    case PT_MATCH_EQ: return pt_slice_eq(m->value, v);
    case PT_MATCH_NEQ: return !pt_slice_eq(m->value, v);
    default: break;
    }
    const uint8_t *s = v.n ? v.p : (const uint8_t *)"";
    pcre2_match_context *mc = m->env ? m->env->mctx : NULL;
    int rc = pcre2_match(m->re, s, v.n, 0, 0, m->md, mc);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
        /* The JIT's stack (32 KiB) is too small for v: the interpreter keeps its
         * backtracking on the heap, under heap_limit. */
        rc = pcre2_match(m->re, s, v.n, 0, PCRE2_NO_JIT, m->md, mc);
    int hit;
    switch (rc) {
    case PCRE2_ERROR_NOMATCH: hit = 0; break;
    case PCRE2_ERROR_MATCHLIMIT:
    case PCRE2_ERROR_DEPTHLIMIT:
    case PCRE2_ERROR_HEAPLIMIT:
    case PCRE2_ERROR_JIT_STACKLIMIT: m->err = rc; return PT_EREGEXLIMIT;
    case PCRE2_ERROR_NOMEMORY: return PT_ENOMEM;
    default:
        /* Not valid UTF-8 (labels are checked when written): no character matches it. */
        if (rc < 0 && !(rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21))
            return PT_EINTERNAL;
        hit = rc >= 0;
    }
    return m->type == PT_MATCH_RE ? hit : !hit;
}

void pt_matcher_limit_msg(const pt_matcher *m, char *msg, size_t msglen)
{
    char what[96];
    if (m->err == PCRE2_ERROR_MATCHLIMIT)
        snprintf(what, sizeof(what), "match limit (read.regex_match_limit = %lu steps)",
                 m->env && m->env->match_limit ? (unsigned long)m->env->match_limit
                                               : (unsigned long)10000000);
    else if (m->err == PCRE2_ERROR_JIT_STACKLIMIT)
        snprintf(what, sizeof(what), "JIT stack limit");
    else
        snprintf(what, sizeof(what),
                 "backtracking memory limit (read.regex_heap_limit = %zu bytes)",
                 m->env ? m->env->heap_limit : 0);
    snprintf(msg, msglen,
             "the regular expression of matcher %.*s%s\"%.*s\" ran into its %s on a label "
             "value; PCRE2 backtracks where Prometheus' RE2 does not: simplify the expression",
             (int)(m->name.n > 100 ? 100 : m->name.n), (const char *)m->name.p,
             m->type == PT_MATCH_RE ? "=~" : "!~", (int)(m->value.n > 200 ? 200 : m->value.n),
             (const char *)m->value.p, what);
}

void pt_matcher_free(pt_matcher *m)
{
    if (m->md)
        pcre2_match_data_free(m->md);
    if (m->re)
        pcre2_code_free(m->re);
    m->md = m->re = NULL;
}
