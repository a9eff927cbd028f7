#define PCRE2_CODE_UNIT_WIDTH 8
#include "matcher.h"

#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

static int compile(pt_slice pattern, pcre2_code **out, char *msg, size_t msglen, pt_slice orig)
{
    int ec;
    PCRE2_SIZE off;
    /* An empty pattern may come as a NULL pointer; PCRE2 refuses NULL even with length 0. */
    const uint8_t *p = pattern.n ? pattern.p : (const uint8_t *)"";
    pcre2_code *re = pcre2_compile(p, pattern.n, PCRE2_UTF | PCRE2_DOLLAR_ENDONLY, &ec, &off,
                                   NULL);
    if (!re) {
        PCRE2_UCHAR why[128];
        pcre2_get_error_message(ec, why, sizeof(why));
        snprintf(msg, msglen, "invalid regular expression \"%.*s\": %s",
                 (int)(orig.n > 200 ? 200 : orig.n), (const char *)orig.p, (const char *)why);
        return PT_EREGEX;
    }
    *out = re;
    return 0;
}

int pt_matcher_init(pt_matcher *m, int type, pt_slice name, pt_slice value, char *msg,
                    size_t msglen)
{
    memset(m, 0, sizeof(*m));
    m->type = type;
    m->name = name;
    m->value = value;
    if (type < PT_MATCH_EQ || type > PT_MATCH_NRE) {
        snprintf(msg, msglen, "unknown matcher type %d", type);
        return PT_EBADREQ;
    }
    if (type == PT_MATCH_RE || type == PT_MATCH_NRE) {
        /* Compile alone first, so "a)|(b" cannot escape the anchoring group. */
        pcre2_code *re;
        int rv = compile(value, &re, msg, msglen, value);
        if (rv != 0)
            return rv;
        pcre2_code_free(re);
        size_t n = value.n + 6;
        uint8_t *w = malloc(n);
        if (!w)
            return PT_ENOMEM;
        memcpy(w, "^(?:", 4);
        if (value.n)
            memcpy(w + 4, value.p, value.n);
        memcpy(w + 4 + value.n, ")$", 2);
        rv = compile((pt_slice){w, n}, &re, msg, msglen, value);
        free(w);
        if (rv != 0)
            return rv;
        pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* best effort */
        m->re = re;
        m->md = pcre2_match_data_create_from_pattern(re, NULL);
        if (!m->md) {
            pcre2_code_free(re);
            m->re = NULL;
            return PT_ENOMEM;
        }
    }
    m->matches_empty = pt_matcher_match(m, (pt_slice){(const uint8_t *)"", 0});
    return 0;
}

int pt_matcher_match(pt_matcher *m, pt_slice v)
{
    switch (m->type) {
    case PT_MATCH_EQ: return pt_slice_eq(m->value, v);
    case PT_MATCH_NEQ: return !pt_slice_eq(m->value, v);
    default: break;
    }
    int rc = pcre2_match(m->re, v.n ? v.p : (const uint8_t *)"", v.n, 0, 0, m->md, NULL);
    int hit = rc >= 0;
    return m->type == PT_MATCH_RE ? hit : !hit;
}

void pt_matcher_free(pt_matcher *m)
{
    if (m->md)
        pcre2_match_data_free(m->md);
    if (m->re)
        pcre2_code_free(m->re);
    m->md = m->re = NULL;
}
