/* Exemplars written and read as SAMPLES on the embedded store (before and after its
 * flush): tests/unit/exemplar_conformance.h; and the answer a remote write with an
 * out-of-order exemplar gets through the app. */
#include "exemplar_conformance.h"
#include "log.h"

static int flush_embedded(void *be)
{
    return pt_embedded_flush(be);
}

/* A remote write of raw (protobuf, snappy-compressed here) through the app's routes. */
static int app_write(pt_app *app, pt_slice raw, int version, pt_arena *a, pt_resp *resp)
{
    pt_slice z;
    pt_arena_init(a, 0, 0);
    memset(resp, 0, sizeof(*resp));
    if (pt_snappy_encode(raw.p, raw.n, a, &z) != 0)
        return -1;
    pt_req req = {.method = PT_M_POST, .method_name = "POST", .path = "/api/v1/write",
                  .query = "", .content_encoding = "snappy", .authorization = "",
                  .user_agent = "t", .remote_write_version = "2.0.0", .body = z.p,
                  .body_len = z.n, .proto = PT_PROTO_HTTP1, .arena = a, .tenant = "",
                  .content_type = version == 2
                                      ? "application/x-protobuf;proto=io.prometheus.write.v2.Request"
                                      : "application/x-protobuf"};
    pt_app_dispatch(app, &req, resp);
    return resp->status;
}

static const char *header(const pt_resp *resp, const char *name)
{
    for (int i = 0; i < resp->nheaders; i++)
        if (strcmp(resp->headers[i].name, name) == 0)
            return resp->headers[i].value;
    return "(none)";
}

/* An exemplar older than its series' newest is dropped and counted; the request, whose
 * samples are stored, is answered 2xx (a 400 would make the sender count them failed and
 * drop them), and 2.0's -Exemplars-Written counts only the stored ones. */
static void out_of_order_answers(tstore *s)
{
    pt_config cfg;
    pt_config_defaults(&cfg);
    pt_app app = {.cfg = &cfg, .store = s->st};
    app.store.xnewest = pt_exemplar_newest_new(1 << 10);
    app.lim.max_decoded = cfg.max_decoded_bytes;
    atomic_store(&app.ready, 1);
    pt_arena_init(&xc_a, 0, 0);
    pt_arena a;
    pt_resp resp;
    const int64_t t = 1700000000000 / PT_EXEMPLAR_SLOT_MS * PT_EXEMPLAR_SLOT_MS + 5000;
    const xc_ex newer[] = {{{"trace_id", "n"}, 1, t}}, older[] = {{{"trace_id", "o"}, 2, t - 1}};

    is(app_write(&app, xc_body_v2("app_ooo2", t, newer, 1), 2, &a, &resp), 204,
       "2.0: a sample and an exemplar: 204");
    pt_arena_free(&a);
    uint64_t ooo0 = app.store.stats->exemplars_out_of_order;
    int st = app_write(&app, xc_body_v2("app_ooo2", t + 1000, older, 1), 2, &a, &resp);
    is(st, 204, "2.0: a sample and an exemplar older than the stored one: 204, not 400 (%.*s)",
       (int)resp.body_len, resp.body ? (const char *)resp.body : "");
    ok(strcmp(header(&resp, "X-Prometheus-Remote-Write-Samples-Written"), "1") == 0 &&
           strcmp(header(&resp, "X-Prometheus-Remote-Write-Exemplars-Written"), "0") == 0,
       "2.0: Samples-Written 1, Exemplars-Written 0 (got %s, %s)",
       header(&resp, "X-Prometheus-Remote-Write-Samples-Written"),
       header(&resp, "X-Prometheus-Remote-Write-Exemplars-Written"));
    is(app.store.stats->exemplars_out_of_order - ooo0, 1, "2.0: the dropped exemplar is counted");
    pt_arena_free(&a);

    is(app_write(&app, xc_body_v1("app_ooo1", 1, t, newer, 1), 1, &a, &resp), 204,
       "1.0: a sample and an exemplar: 204");
    pt_arena_free(&a);
    ooo0 = app.store.stats->exemplars_out_of_order;
    is(app_write(&app, xc_body_v1("app_ooo1", 1, t + 1000, older, 1), 1, &a, &resp), 204,
       "1.0: a sample and an exemplar older than the stored one: 204");
    is(app.store.stats->exemplars_out_of_order - ooo0, 1, "1.0: the dropped exemplar is counted");
    pt_arena_free(&a);
    pt_arena_free(&xc_a);
    pt_exemplar_newest_free(app.store.xnewest);
    pt_config_free(&cfg);
}

int main(void)
{
    tstore s;
    if (tstore_open(&s) != 0) {
        BAIL_OUT("cannot open an embedded store");
    }
    pt_exemplar_conformance(&s.faulty, flush_embedded, &s.emb, "embedded");
    pt_log_set_level("error");
    out_of_order_answers(&s);
    tstore_close(&s);
    return done_testing();
}
