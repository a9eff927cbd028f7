/*
 * Label matchers with Prometheus semantics: =, !=, =~, !~; regexes fully anchored
 * (^(?:re)$, '.' not matching newline, as Prometheus 2.x); a missing label is "".
 * Regexes use PCRE2 restricted to what the pattern itself asks for.
 */
#ifndef PT_MATCHER_H
#define PT_MATCHER_H

#include <stddef.h>

#include "slice.h"

enum { PT_MATCH_EQ = 0, PT_MATCH_NEQ = 1, PT_MATCH_RE = 2, PT_MATCH_NRE = 3 };

typedef struct pt_matcher {
    int type;
    pt_slice name;
    pt_slice value;
    void *re;       /* pcre2_code * for RE/NRE */
    void *md;       /* pcre2_match_data * */
    int matches_empty;
} pt_matcher;

/* Returns 0, or PT_EREGEX / PT_EBADREQ with msg set. Slices must outlive the matcher. */
int pt_matcher_init(pt_matcher *m, int type, pt_slice name, pt_slice value, char *msg,
                    size_t msglen);
/* 1 if the label value v (use "" for a missing label) satisfies the matcher. Not
 * thread-safe per matcher (shared match data). */
int pt_matcher_match(pt_matcher *m, pt_slice v);
void pt_matcher_free(pt_matcher *m);

#endif
