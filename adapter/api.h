/*
 * The Prometheus HTTP API for browsing (Grafana's label and series pickers), answered
 * from the index: GET/POST /api/v1/labels, GET /api/v1/label/<name>/values, GET/POST
 * /api/v1/series, GET /api/v1/metadata, in Prometheus' JSON shapes. Also the pieces they
 * are made of, for tests: series selectors, timestamps, JSON strings.
 */
#ifndef PT_API_H
#define PT_API_H

#include <stddef.h>
#include <stdint.h>

#include "app.h"
#include "buf.h"
#include "matcher.h"

/* Parses a series selector (`up`, `{job="a",instance=~"b.*"}`, `m{a!="",b!~"x"}`; names
 * may be quoted as in Prometheus 3: `{"a.b"}`, `{"x y"="1"}`) into compiled matchers
 * (arena a; free them with pt_selector_free, also after an error) under env's limits
 * (NULL: none): when its matchers would take env past max_matchers, none is compiled. At
 * least one matcher must not match the empty string. 0, or PT_EBADREQ / PT_EREGEX /
 * PT_EREGEXLIMIT with msg set, PT_ENOMEM. */
int pt_selector_parse(pt_arena *a, const char *s, size_t n, pt_matcher_env *env, pt_matcher **ms,
                      size_t *nms, char *msg, size_t msglen);
void pt_selector_free(pt_matcher *ms, size_t n);

/* A timestamp as Prometheus' API takes it: Unix seconds with an optional fraction
 * ("1700000000.123"), or RFC 3339 ("YYYY-MM-DDThh:mm:ss.123Z", "...+01:00"). 0 with *ms
 * set, or -1. */
int pt_api_time(const char *s, int64_t *ms);

/* Appends s as a JSON string: quotes, backslashes and control characters escaped, bytes
 * that are not UTF-8 replaced by U+FFFD. 0 or the buffer's error. */
int pt_json_str(pt_buf *b, pt_slice s);

/* Route handlers (app.c's table). */
void pt_api_labels(pt_ctx *c, pt_req *req, pt_resp *resp);
void pt_api_label_values(pt_ctx *c, pt_req *req, pt_resp *resp); /* /api/v1/label/<n>/values */
void pt_api_series(pt_ctx *c, pt_req *req, pt_resp *resp);
void pt_api_metadata(pt_ctx *c, pt_req *req, pt_resp *resp);

#endif
