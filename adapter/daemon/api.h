/*
 * The Prometheus HTTP API for browsing (Grafana's label and series pickers), answered
 * from the index: GET/POST /api/v1/labels, GET /api/v1/label/<name>/values, GET/POST
 * /api/v1/series, GET /api/v1/metadata, GET /api/v1/status/tsdb (cardinality.h), in
 * Prometheus' JSON shapes. The pieces they are
 * made of have their own headers, included here: promql.h (series selectors, timestamps,
 * label names in paths) and json.h (JSON strings).
 */
#ifndef PT_API_H
#define PT_API_H

#include "app.h"
#include "json.h"
#include "promql.h"

/* Route handlers (app.c's table). */
void pt_api_labels(pt_ctx *c, pt_req *req, pt_resp *resp);
void pt_api_label_values(pt_ctx *c, pt_req *req, pt_resp *resp); /* /api/v1/label/<n>/values */
void pt_api_series(pt_ctx *c, pt_req *req, pt_resp *resp);
void pt_api_metadata(pt_ctx *c, pt_req *req, pt_resp *resp);
void pt_api_tsdb_status(pt_ctx *c, pt_req *req, pt_resp *resp);
void pt_api_snapshot(pt_ctx *c, pt_req *req, pt_resp *resp); /* web.enable_admin_api */
void pt_api_delete_series(pt_ctx *c, pt_req *req, pt_resp *resp); /* the same */

#endif
