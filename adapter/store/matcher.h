/*
 * Label matchers with Prometheus semantics: =, !=, =~, !~; regexes fully anchored
 * (^(?:re)$, '.' not matching newline, as Prometheus 2.x); a missing label is "".
 * Regexes use PCRE2 restricted to what the pattern itself asks for.
 *
 * PCRE2 backtracks, where Prometheus' RE2 runs in linear time: a pattern such as
 * (a|a)*c takes exponential time on some values. So every regex of a request runs under
 * its request's limits (pt_matcher_env): at most match_limit steps and heap_limit bytes
 * of backtracking per value, and a value that needs more is an error (PT_EREGEXLIMIT),
 * never taken as a non-match (a non-match would turn into a match for !~).
 */
#ifndef PT_MATCHER_H
#define PT_MATCHER_H

#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "slice.h"

enum { PT_MATCH_EQ = 0, PT_MATCH_NEQ = 1, PT_MATCH_RE = 2, PT_MATCH_NRE = 3 };

/* What the matchers of one request may use. Their compiled regexes, match data and
 * backtracking memory come from arena a (its ceiling is the request's memory limit; the
 * JIT's executable code is charged to it too) and go with it; a = NULL is malloc. */
typedef struct pt_matcher_env {
    pt_arena *a;
    void *gctx, *cctx, *mctx; /* pcre2 general, compile and match contexts */
    uint32_t match_limit;     /* steps per value; 0 = PCRE2's default (10 million) */
    size_t heap_limit;        /* bytes of backtracking per value; 0 = PCRE2's default */
    size_t max_matchers;      /* matchers of the request at most; 0 = no limit */
    size_t matchers;          /* compiled so far */
} pt_matcher_env;

typedef struct pt_matcher {
    int type;
    pt_slice name;
    pt_slice value;
    void *re;       /* pcre2_code * for RE/NRE */
    void *md;       /* pcre2_match_data * */
    pt_matcher_env *env; /* NULL: PCRE2's defaults */
    int err;             /* the PCRE2 error of the last failed match (pt_matcher_limit_msg) */
    int matches_empty;
} pt_matcher;

/* 0 or PT_ENOMEM. With a = NULL, pt_matcher_env_free must free the contexts. */
int pt_matcher_env_init(pt_matcher_env *e, pt_arena *a, uint32_t match_limit, size_t heap_limit,
                        size_t max_matchers);
void pt_matcher_env_free(pt_matcher_env *e);

/* Is n more matchers over env's max_matchers? Then PT_EBADREQ with msg set, else 0.
 * env may be NULL (no limit). */
int pt_matcher_env_check(const pt_matcher_env *env, size_t n, char *msg, size_t msglen);

/* Returns 0, or PT_EREGEX / PT_EBADREQ (also past env's max_matchers) / PT_EREGEXLIMIT
 * with msg set, PT_ENOMEM. Slices must outlive the matcher; env (may be NULL) too. */
int pt_matcher_init(pt_matcher *m, int type, pt_slice name, pt_slice value, pt_matcher_env *env,
                    char *msg, size_t msglen);
/* 1 if the label value v (use "" for a missing label) satisfies the matcher, 0 if not,
 * PT_EREGEXLIMIT when the regex ran into a limit on v (m->err says which). Not
 * thread-safe per matcher (shared match data). */
int pt_matcher_match(pt_matcher *m, pt_slice v);
/* Describes the limit m ran into (after pt_matcher_match returned PT_EREGEXLIMIT). */
void pt_matcher_limit_msg(const pt_matcher *m, char *msg, size_t msglen);
void pt_matcher_free(pt_matcher *m);

#endif
