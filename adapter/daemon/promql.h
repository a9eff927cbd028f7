/*
 * Prometheus' text forms that the HTTP API takes: series selectors (into compiled
 * matchers), label names escaped for URL paths, and timestamps. Parsers only: no I/O, no
 * store.
 */
#ifndef PT_PROMQL_H
#define PT_PROMQL_H

#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "matcher.h"
#include "slice.h"

/* The bound pt_api_time clamps to, in ms either side of the epoch: far past either end
 * of what the store holds. */
#define PT_API_TIME_LIMIT_MS ((int64_t)1 << 52)

/* Parses a series selector (`up`, `{job="a",instance=~"b.*"}`, `m{a!="",b!~"x"}`; names
 * may be quoted as in Prometheus 3: `{"a.b"}`, `{"x y"="1"}`; values are quoted with "",
 * '' (Go's escapes) or `` (raw)) from s[0, n), which needs no NUL, into compiled matchers
 * (arena a; free them with pt_selector_free, also after an error; an unquoted name or
 * metric name points into s, so s must outlive them) under env's limits
 * (NULL: none): when its matchers would take env past max_matchers, none is compiled. At
 * least one matcher must not match the empty string. 0, or PT_EBADREQ / PT_EREGEX /
 * PT_EREGEXLIMIT with msg set ("parse error at char N: <what was expected>, found
 * \"<up to 20 bytes>\"" or "..., found the end" for syntax), PT_ENOMEM. */
int pt_selector_parse(pt_arena *a, const char *s, size_t n, pt_matcher_env *env, pt_matcher **ms,
                      size_t *nms, char *msg, size_t msglen);
void pt_selector_free(pt_matcher *ms, size_t n);

/* A timestamp as Prometheus' API takes it: Unix seconds with an optional fraction
 * ("1700000000.123", "1.5e9"; rounded to the ms, clamped to ±PT_API_TIME_LIMIT_MS), or
 * RFC 3339 ("YYYY-MM-DDThh:mm:ss.123Z", "...+01:00"; fractions past the ms cut), or Go's
 * min and max time (±PT_API_TIME_LIMIT_MS). s is NUL-terminated. 0 with *ms set, or -1. */
int pt_api_time(const char *s, int64_t *ms);

/* Prometheus 3's escaping of a label name in a URL path: "U__" then the name with '_'
 * written "__" and any other character outside [a-zA-Z0-9] as "_<hex code point>_".
 * Returns the name decoded into arena a, or s itself when it is not in that form, does
 * not decode (as Prometheus takes it) or a has no room. */
pt_slice pt_promql_unescape_name(pt_arena *a, pt_slice s);

#endif
