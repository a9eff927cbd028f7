/*
 * The browsing API (/api/v1/labels, label values, series, metadata) over any backend,
 * through the route table as the server calls it: the same series and metadata written,
 * the same JSON answers expected byte for byte. The caller gives fresh tables.
 */
#ifndef PT_TEST_API_CONFORMANCE_H
#define PT_TEST_API_CONFORMANCE_H

#include "meta.h"
#include "store_helpers.h"
#include "tap.h"

#define API_T0 INT64_C(1700000000000) /* 2023-11-14T22:13:20Z */
#define API_DAY INT64_C(86400000)

typedef struct api_call {
    pt_arena arena;
    pt_req req;
    pt_resp resp;
    char *body;
} api_call;

/* Dispatches method path?query (body: a form for POST); returns the status, the body in
 * c->body (freed by api_done). */
static int api_run(pt_app *app, api_call *c, int method, const char *path, const char *query,
                   const char *form)
{
    memset(c, 0, sizeof(*c));
    pt_arena_init(&c->arena, 0, 0);
    c->req = (pt_req){.method = method,
                      .method_name = method == PT_M_POST ? "POST" : "GET",
                      .path = path,
                      .query = query ? query : "",
                      .content_type = form ? "application/x-www-form-urlencoded" : "",
                      .content_encoding = "",
                      .authorization = "",
                      .user_agent = "t",
                      .remote_write_version = "",
                      .body = (const uint8_t *)(form ? form : ""),
                      .body_len = form ? strlen(form) : 0,
                      .proto = PT_PROTO_HTTP1,
                      .arena = &c->arena};
    static atomic_int never;
    c->req.cancelled = &never;
    pt_app_dispatch(app, &c->req, &c->resp);
    c->body = pt_arena_strndup(&c->arena, c->resp.body ? (const char *)c->resp.body : "",
                               c->resp.body_len);
    return c->resp.status;
}

/* GET path?query must answer status with exactly want. */
static void api_is(pt_app *app, int status, const char *path, const char *query, const char *want,
                   const char *what)
{
    api_call c;
    int got = api_run(app, &c, PT_M_GET, path, query, NULL);
    int json = c.resp.content_type && strcmp(c.resp.content_type, "application/json") == 0;
    if (!ok(got == status && json && strcmp(c.body, want) == 0, "%s", what))
        diag("GET %s?%s: %d %s\n  want %d %s", path, query, got, c.body, status, want);
    pt_arena_free(&c.arena);
}

/* The same for a POST with a form body. */
static void api_post_is(pt_app *app, int status, const char *path, const char *form,
                        const char *want, const char *what)
{
    api_call c;
    int got = api_run(app, &c, PT_M_POST, path, "", form);
    if (!ok(got == status && strcmp(c.body, want) == 0, "%s", what))
        diag("POST %s %s: %d %s\n  want %s", path, form, got, c.body, want);
    pt_arena_free(&c.arena);
}

static const tseries api_series[] = {
    {{"__name__", "up", "instance", "a:9100", "job", "node", NULL}, {API_T0}, {1}, 1},
    {{"__name__", "up", "instance", "b:9100", "job", "node", NULL}, {API_T0}, {1}, 1},
    {{"__name__", "up", "instance", "c", "job", "old", NULL}, {API_T0 - 3 * API_DAY}, {0}, 1},
    {{"__name__", "http_requests_total", "code", "200", "handler", "/x", "job", "api", NULL},
     {API_T0},
     {5},
     1},
    {{"__name__", "weird", "label", "q\" b\\ n\n t\t c\x01 \xc3\xa9 \xe6\x97\xa5 ,=@", NULL},
     {API_T0},
     {2},
     1},
    {{"__name__", "later", "zz", "1", NULL}, {API_T0 + 2 * API_DAY}, {3}, 1},
};

static pt_wmeta api_md(int type, const char *fam, const char *help, const char *unit)
{
    return (pt_wmeta){.type = type, .family = pt_slice_str(fam), .help = pt_slice_str(help),
                      .unit = pt_slice_str(unit)};
}

/* The metadata of a remote write 1.0 request: two families, one with two helps (two
 * targets disagreeing), one entry refused (invalid UTF-8), one unknown type. */
static int api_write_metadata(pt_store *st)
{
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    pt_wreq *wr = mk_write(&a, NULL, 0);
    pt_wmeta md[5] = {
        api_md(1, "http_requests_total", "Requests \"served\".\n", ""),
        api_md(2, "up", "Target up.", ""),
        api_md(2, "up", "Target is up.", "ratio"),
        api_md(1, "bad", "\xff", ""),
        api_md(42, "odd", "", ""),
    };
    wr->metadata = md;
    wr->nmetadata = 5;
    pt_write_result res;
    int rv = pt_store_write(st, wr, &a, &res);
    pt_arena_free(&a);
    return rv;
}

/* The window of API_T0's day only, in both forms the API takes. */
#define API_ONE_DAY "start=1699920000&end=2023-11-14T23:59:59.999Z"

/* A request (GET path?query, or POST path with query as its form body) and the exact
 * answer. */
typedef struct api_case {
    int post;
    int status;
    const char *path, *query, *want, *what;
} api_case;

static const api_case api_cases[] = {
    {0, 200, "/api/v1/labels", "",
     "{\"status\":\"success\",\"data\":[\"__name__\",\"code\",\"handler\",\"instance\","
     "\"job\",\"label\",\"zz\"]}",
     "labels, all time"},
    {0, 200, "/api/v1/labels", API_ONE_DAY,
     "{\"status\":\"success\",\"data\":[\"__name__\",\"code\",\"handler\",\"instance\","
     "\"job\",\"label\"]}",
     "labels in one day: not the later one's"},
    {0, 200, "/api/v1/labels", "start=1700172800.5",
     "{\"status\":\"success\",\"data\":[\"__name__\",\"zz\"]}",
     "labels from a later day (a name whose first row is before the window)"},
    {0, 200, "/api/v1/labels", "match[]=up",
     "{\"status\":\"success\",\"data\":[\"__name__\",\"instance\",\"job\"]}",
     "labels of match[]=up"},
    {0, 200, "/api/v1/labels", "limit=2",
     "{\"status\":\"success\",\"data\":[\"__name__\",\"code\"],"
     "\"warnings\":[\"results truncated due to limit\"]}",
     "labels limit=2: truncated with the warning"},
    {1, 200, "/api/v1/labels", "match%5B%5D=%7Bjob%3D%22api%22%7D",
     "{\"status\":\"success\",\"data\":[\"__name__\",\"code\",\"handler\",\"job\"]}",
     "POST labels with a form body"},
    {0, 200, "/api/v1/label/job/values", "",
     "{\"status\":\"success\",\"data\":[\"api\",\"node\",\"old\"]}", "job values"},
    {0, 200, "/api/v1/label/job/values", API_ONE_DAY,
     "{\"status\":\"success\",\"data\":[\"api\",\"node\"]}", "job values in one day"},
    {0, 200, "/api/v1/label/job/values", "match[]=up",
     "{\"status\":\"success\",\"data\":[\"node\",\"old\"]}", "job values of up"},
    {0, 200, "/api/v1/label/job/values", "match[]=up&match[]=http_requests_total&limit=2",
     "{\"status\":\"success\",\"data\":[\"api\",\"node\"],"
     "\"warnings\":[\"results truncated due to limit\"]}",
     "job values of two selectors, limit 2"},
    {0, 200, "/api/v1/label/__name__/values", "",
     "{\"status\":\"success\",\"data\":[\"http_requests_total\",\"later\",\"up\","
     "\"weird\"]}",
     "metric names"},
    {0, 200, "/api/v1/label/%6aob/values", "",
     "{\"status\":\"success\",\"data\":[\"api\",\"node\",\"old\"]}",
     "a percent-encoded label name"},
    {0, 200, "/api/v1/label/U__job/values", "",
     "{\"status\":\"success\",\"data\":[\"api\",\"node\",\"old\"]}",
     "a label name in Prometheus 3's U__ escaping"},
    {0, 200, "/api/v1/label/U______name____/values", "",
     "{\"status\":\"success\",\"data\":[\"http_requests_total\",\"later\",\"up\","
     "\"weird\"]}",
     "U__ with escaped underscores"},
    {0, 200, "/api/v1/label/U__j_6f_b/values", "",
     "{\"status\":\"success\",\"data\":[\"api\",\"node\",\"old\"]}", "U__ with a code point"},
    {0, 200, "/api/v1/label/nope/values", "", "{\"status\":\"success\",\"data\":[]}",
     "values of an unknown label: []"},
    {0, 200, "/api/v1/label/label/values", "",
     "{\"status\":\"success\",\"data\":[\"q\\\" b\\\\ n\\n t\\t c\\u0001 \xc3\xa9 "
     "\xe6\x97\xa5 ,=@\"]}",
     "a value with quotes, backslashes, control bytes and UTF-8, escaped"},
    {0, 200, "/api/v1/series", "match[]=up&start=1699920000&end=1700006399",
     "{\"status\":\"success\",\"data\":[{\"__name__\":\"up\",\"instance\":\"a:9100\","
     "\"job\":\"node\"},{\"__name__\":\"up\",\"instance\":\"b:9100\",\"job\":\"node\"}]}",
     "series of up in one day"},
    {0, 200, "/api/v1/series", "match[]=%7Bjob%3D~%22n.*%7Cold%22%2Cinstance!~%22b.*%22%7D",
     "{\"status\":\"success\",\"data\":[{\"__name__\":\"up\",\"instance\":\"a:9100\","
     "\"job\":\"node\"},{\"__name__\":\"up\",\"instance\":\"c\",\"job\":\"old\"}]}",
     "series of {job=~\"n.*|old\",instance!~\"b.*\"}"},
    {0, 200, "/api/v1/series",
     "match[]=http_requests_total&match[]=up{job=\"old\"}&match[]=up{job!=\"node\"}",
     "{\"status\":\"success\",\"data\":[{\"__name__\":\"http_requests_total\","
     "\"code\":\"200\",\"handler\":\"/x\",\"job\":\"api\"},{\"__name__\":\"up\","
     "\"instance\":\"c\",\"job\":\"old\"}]}",
     "three match[]: their union, once each"},
    {0, 200, "/api/v1/series", "match[]={__name__=~\"up|later\",job!=\"\"}&limit=1",
     "{\"status\":\"success\",\"data\":[{\"__name__\":\"up\",\"instance\":\"a:9100\","
     "\"job\":\"node\"}],\"warnings\":[\"results truncated due to limit\"]}",
     "series limit=1"},
    {1, 200, "/api/v1/series", "match[]=later&end=1800000000",
     "{\"status\":\"success\",\"data\":[{\"__name__\":\"later\",\"zz\":\"1\"}]}", "POST series"},
    {0, 200, "/api/v1/series", "match[]=up&start=1800000000",
     "{\"status\":\"success\",\"data\":[]}", "series after the data: []"},
    {0, 200, "/api/v1/series", "match[]=up&start=1700000000&end=1600000000",
     "{\"status\":\"success\",\"data\":[]}", "end before start: []"},
    /* Bad input: 400 with Prometheus' error shape. */
    {0, 400, "/api/v1/series", "",
     "{\"status\":\"error\",\"errorType\":\"bad_data\",\"error\":\"no match[] parameter "
     "provided\"}",
     "series without match[]"},
    {0, 400, "/api/v1/series", "match[]={job=\"\"}",
     "{\"status\":\"error\",\"errorType\":\"bad_data\",\"error\":\"invalid parameter "
     "\\\"match[]\\\": vector selector must contain at least one non-empty matcher\"}",
     "a selector of empty matchers only"},
    {0, 400, "/api/v1/labels", "match[]=up{",
     "{\"status\":\"error\",\"errorType\":\"bad_data\",\"error\":\"invalid parameter "
     "\\\"match[]\\\": parse error at char 4: expected a label name or '}', found the "
     "end\"}",
     "an unterminated selector"},
    {0, 400, "/api/v1/series", "start=yesterday&match[]=up",
     "{\"status\":\"error\",\"errorType\":\"bad_data\",\"error\":\"invalid parameter "
     "\\\"start\\\": cannot parse \\\"yesterday\\\" to a valid timestamp\"}",
     "a bad start"},
    {0, 400, "/api/v1/labels", "limit=-1",
     "{\"status\":\"error\",\"errorType\":\"bad_data\",\"error\":\"invalid parameter "
     "\\\"limit\\\": limit must be non-negative\"}",
     "a negative limit"},
    {0, 400, "/api/v1/labels", "match[]=%zz",
     "{\"status\":\"error\",\"errorType\":\"bad_data\",\"error\":\"invalid form encoding "
     "in \\\"match[]=%zz\\\"\"}",
     "a bad percent escape"},
    {0, 400, "/api/v1/label//values", "",
     "{\"status\":\"error\",\"errorType\":\"bad_data\",\"error\":\"invalid label name: "
     "\\\"/api/v1/label//values\\\"\"}",
     "an empty label name"},
};

/* With api.max_results = 2. */
static const api_case api_capped[] = {
    {0, 200, "/api/v1/label/__name__/values", "",
     "{\"status\":\"success\",\"data\":[\"http_requests_total\",\"up\"],"
     "\"warnings\":[\"results truncated at api.max_results (2)\"]}",
     "values past api.max_results: cut, with a warning"},
    {0, 200, "/api/v1/labels", "",
     "{\"status\":\"success\",\"data\":[\"__name__\",\"code\"],"
     "\"warnings\":[\"results truncated at api.max_results (2)\"]}",
     "names past api.max_results: cut, with a warning"},
    {0, 422, "/api/v1/series", "match[]=up",
     "{\"status\":\"error\",\"errorType\":\"execution\",\"error\":\"the selectors match "
     "more than 2 series (api.max_results); narrow them or the time range\"}",
     "series past api.max_results: 422"},
};

static void api_case_run(pt_app *app, const api_case *k)
{
    if (k->post)
        api_post_is(app, k->status, k->path, k->query, k->want, k->what);
    else
        api_is(app, k->status, k->path, k->query, k->want, k->what);
}

static void pt_api_conformance(pt_backend *be, const char *name)
{
    diag("api conformance on %s", name);
    pt_store st = {.index_bucket_ms = API_DAY, .max_series = 1000, .max_samples = 100000};
    if (pt_store_open(&st, be, &(pt_store_caches){0}) != 0)
        BAIL_OUT("out of memory for the store's caches");
    static pt_config cfg;
    pt_config_defaults(&cfg);
    pt_app app = {.cfg = &cfg, .store = st};
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    pt_write_result res;
    size_t ns = sizeof(api_series) / sizeof(api_series[0]);
    is(pt_store_write(&st, mk_write(&a, api_series, ns), &a, &res), 0, "%s: series written", name);
    pt_arena_free(&a);
    is(api_write_metadata(&st), 0, "%s: metadata written", name);

    for (size_t i = 0; i < sizeof(api_cases) / sizeof(api_cases[0]); i++)
        api_case_run(&app, &api_cases[i]);
    {
        api_call c;
        int s = api_run(&app, &c, PT_M_GET, "/api/v1/series", "match[]={a=~\"(\"}", NULL);
        ok(s == 400 && strstr(c.body, "\"errorType\":\"bad_data\"") &&
               strstr(c.body, "invalid regular expression"),
           "an invalid regex: 400 naming it (%s)", c.body);
        pt_arena_free(&c.arena);
    }

    /* api.max_results bounds every list. */
    cfg.api_max_results = 2;
    for (size_t i = 0; i < sizeof(api_capped) / sizeof(api_capped[0]); i++)
        api_case_run(&app, &api_capped[i]);
    cfg.api_max_results = 100000;
    {
        /* An answer past web.max_request_memory: 413, said in JSON. */
        cfg.max_request_memory = 6000;
        api_call c;
        int s = api_run(&app, &c, PT_M_GET, "/api/v1/series", "match[]={__name__=~\".%2B\"}", NULL);
        ok(s == 413 && strstr(c.body, "\"status\":\"error\"") &&
               strstr(c.body, "web.max_request_memory (6000 bytes)"),
           "an answer past web.max_request_memory: 413 (%s)", c.body);
        pt_arena_free(&c.arena);
        cfg.max_request_memory = 512 << 20;
    }

    /* Metadata. */
    const char *all_md =
        "{\"status\":\"success\",\"data\":{\"http_requests_total\":[{\"type\":\"counter\","
        "\"help\":\"Requests \\\"served\\\".\\n\",\"unit\":\"\"}],\"odd\":[{\"type\":"
        "\"unknown\",\"help\":\"\",\"unit\":\"\"}],\"up\":[%s,%s]}}";
    const char *up1 = "{\"type\":\"gauge\",\"help\":\"Target up.\",\"unit\":\"\"}";
    const char *up2 = "{\"type\":\"gauge\",\"help\":\"Target is up.\",\"unit\":\"ratio\"}";
    api_call c;
    api_run(&app, &c, PT_M_GET, "/api/v1/metadata", "", NULL);
    char w1[1024], w2[1024];
    snprintf(w1, sizeof(w1), all_md, up1, up2);
    snprintf(w2, sizeof(w2), all_md, up2, up1); /* the two of up come in hash order */
    if (!ok(c.resp.status == 200 && (strcmp(c.body, w1) == 0 || strcmp(c.body, w2) == 0),
            "metadata: every family, two entries for up, the invalid one skipped"))
        diag("got %s", c.body);
    pt_arena_free(&c.arena);
    api_run(&app, &c, PT_M_GET, "/api/v1/metadata", "metric=up&limit_per_metric=1", NULL);
    static const char up_only[] = "{\"status\":\"success\",\"data\":{\"up\":[{";
    ok(c.resp.status == 200 && strncmp(c.body, up_only, sizeof(up_only) - 1) == 0 &&
           strstr(c.body, "}]}}") && !strstr(c.body, "},{"),
       "metadata metric=up limit_per_metric=1: one entry (%s)", c.body);
    pt_arena_free(&c.arena);
    api_is(&app, 200, "/api/v1/metadata", "limit=1",
           "{\"status\":\"success\",\"data\":{\"http_requests_total\":[{\"type\":\"counter\","
           "\"help\":\"Requests \\\"served\\\".\\n\",\"unit\":\"\"}]}}",
           "metadata limit=1: one family");
    api_is(&app, 200, "/api/v1/metadata", "metric=nope", "{\"status\":\"success\",\"data\":{}}",
           "metadata of an unknown metric: {}");
    {
        /* Unchanged metadata again: nothing to write. */
        pt_arena b;
        pt_arena_init(&b, 0, 0);
        pt_meta_batch mb;
        pt_meta_begin(&mb, &st, &b);
        pt_meta_put(&mb, PT_SLICE_LIT("up"), 2, PT_SLICE_LIT("Target up."), PT_SLICE_LIT(""));
        pt_meta_put(&mb, PT_SLICE_LIT("http_requests_total"), 1,
                    PT_SLICE_LIT("Requests \"served\".\n"), PT_SLICE_LIT(""));
        is(mb.muts.len, 0, "metadata written before is not written again (cache)");
        pt_meta_put(&mb, PT_SLICE_LIT("up"), 2, PT_SLICE_LIT("changed"), PT_SLICE_LIT(""));
        is(mb.muts.len, sizeof(pt_mutation), "changed metadata is written");
        pt_arena_free(&b);
    }
    {
        /* A regex that backtracks exponentially on a value: 422 naming the matcher and the
         * limit, for =~ and !~ (a non-match would have !~ select the series). */
        const tseries patho[] = {
            {{"__name__", "patho", "v", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa1c", NULL},
             {API_T0},
             {1},
             1}};
        pt_arena_init(&a, 0, 0);
        is(pt_store_write(&st, mk_write(&a, patho, 1), &a, &res), 0, "%s: a pathological value",
           name);
        pt_arena_free(&a);
        app.store.regex_match_limit = 100000;
        static const char *const sel[] = {"match[]={v=~\"(a|a)*c\"}",
                                          "match[]={__name__=\"patho\",v!~\"(a|a)*c\"}"};
        for (int i = 0; i < 2; i++) {
            api_call r;
            int s = api_run(&app, &r, PT_M_GET, "/api/v1/series", sel[i], NULL);
            ok(s == 422 && strstr(r.body, "\"errorType\":\"execution\"") &&
                   strstr(r.body, "(a|a)*c") && strstr(r.body, "read.regex_match_limit = 100000"),
               "%s: a regex past its match limit: 422 naming it (%s)", sel[i], r.body);
            pt_arena_free(&r.arena);
        }
        app.store.regex_match_limit = 0;
        app.store.max_matchers = 3;
        api_call r;
        int s = api_run(&app, &r, PT_M_GET, "/api/v1/series",
                        "match[]={a=\"1\",b=\"2\"}&match[]={c=\"3\",d=~\"4\"}", NULL);
        ok(s == 400 && strstr(r.body, "\"errorType\":\"bad_data\"") &&
               strstr(r.body, "more than 3 label matchers (limit read.max_matchers)"),
           "match[] selectors past read.max_matchers: 400 naming it (%s)", r.body);
        pt_arena_free(&r.arena);
        app.store.max_matchers = 0;
    }
    pt_store_close(&st);
}

#endif
