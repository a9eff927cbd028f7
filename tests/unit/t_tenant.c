/* Tenancy (adapter/daemon/tenant.c): tenant id validation, the key-prefix view (two tenants'
 * stores over one embedded store, with shared caches), the series gate and the rate. */
#include "log.h"
#include "metrics.h"
#include "embedded.h"
#include "store_helpers.h"
#include "tenant.h"
#include "tap.h"

static const int64_t T0 = 1700000000000; /* 2023-11-14 */

static void ids(void)
{
    static const struct {
        const char *id;
        int valid;
        const char *msg; /* a part of the message when invalid */
    } cases[] = {
        {"a", 1, NULL},
        {"team-1", 1, NULL},
        {"Az09!._*'()-", 1, NULL},
        {"...", 1, NULL},
        {".a", 1, NULL},
        {"", 0, "empty"},
        {".", 0, "\".\" is not allowed"},
        {"..", 0, "\"..\" is not allowed"},
        {"a/b", 0, "'/' at byte 1"},
        {"a,b", 0, "',' at byte 1"},
        {"a b", 0, "' ' at byte 1"},
        {"a\\b", 0, "'\\' at byte 1"},
        {"a\"", 0, "'\"' at byte 1"},
        {"\x01x", 0, "byte 0x01 at byte 0"},
        {"caf\xc3\xa9", 0, "byte 0xc3 at byte 3"},
        {"a~", 0, "'~' at byte 1"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char msg[256] = "";
        int v = pt_tenant_valid(cases[i].id, strlen(cases[i].id), msg, sizeof(msg));
        if (cases[i].valid)
            ok(v == 1, "tenant id \"%s\" is valid", cases[i].id);
        else
            ok(v == 0 && strstr(msg, cases[i].msg), "tenant id \"%s\" is refused: %s", cases[i].id,
               msg);
    }
    char id[152];
    memset(id, 'x', sizeof(id));
    char msg[256];
    ok(pt_tenant_valid(id, 150, msg, sizeof(msg)) == 1, "150 bytes: valid");
    ok(pt_tenant_valid(id, 151, msg, sizeof(msg)) == 0 && strstr(msg, "151 bytes"),
       "151 bytes: refused (%s)", msg);
    ok(pt_tenant_valid("a\0b", 3, msg, sizeof(msg)) == 0 && strstr(msg, "0x00"),
       "a NUL byte: refused (%s)", msg);
    uint8_t pa[PT_TENANT_PREFIX_MAX], pb[PT_TENANT_PREFIX_MAX];
    size_t na = pt_tenant_prefix(pa, "a", 1), nb = pt_tenant_prefix(pb, "ab", 2);
    ok(na == 3 && nb == 4 && memcmp(pa, pb, 2) == 0 && pa[2] != pb[2],
       "prefixes of \"a\" and \"ab\" differ before either ends: neither starts the other");
    ok(pt_tenant_salt("a", 1) != pt_tenant_salt("b", 1) && pt_tenant_salt("a", 1) != 0,
       "salts differ per tenant and are never 0");
}

typedef struct rows {
    size_t n, bad, longest;
    uint8_t first;
} rows;

static int on_row(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)qual, (void)value;
    rows *r = ud;
    if (r->n++ == 0)
        r->first = row.n ? row.p[0] : 0;
    if (memchr(row.p, 0, row.n))
        r->bad++;
    if (row.n > r->longest)
        r->longest = row.n;
    return 0;
}

/* A stored stream in place of cells: its row as on_row sees one, counted in streams. */
typedef struct srows {
    rows r;
    size_t streams;
} srows;

static int on_stream_row(void *ud, pt_slice row, uint32_t first, uint32_t last, uint32_t count,
                         pt_slice stream)
{
    (void)first, (void)last, (void)count, (void)stream;
    srows *s = ud;
    s->streams++;
    return on_row(&s->r, row, (pt_slice){0}, (pt_slice){0});
}

static double read_one(pt_store *st, const char *name, int *n)
{
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    tmatch m = {PROMETHEUS__LABEL_MATCHER__TYPE__EQ, "__name__", name};
    Prometheus__ReadResponse resp;
    char msg[512];
    int rv = store_read(st, mk_read(&a, T0 - 60000, T0 + 60000, &m, 1), &a, NULL, &resp, msg,
                           sizeof(msg));
    double v = -1;
    *n = rv ? -1 : (int)resp.results[0]->n_timeseries;
    if (*n == 1 && resp.results[0]->timeseries[0]->n_samples == 1)
        v = resp.results[0]->timeseries[0]->samples[0]->value;
    pt_arena_free(&a);
    return v;
}

static int write_one(pt_store *st, const char *name, const char *job, double v,
                     pt_write_result *res)
{
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    tseries s = {{"__name__", name, "job", job, NULL}, {T0}, {v}, 1};
    int rv = pt_store_write(st, mk_write(&a, &s, 1), &a, res);
    pt_arena_free(&a);
    return rv;
}

/* Two tenants over one store and one index cache. */
static void views(void)
{
    tstore s;
    if (tstore_open(&s) != 0) {
        ok(0, "a store to write to");
        return;
    }
    pt_tenant_view va, vb;
    pt_tenant_view_init(&va, s.st.be, "a", 1);
    pt_tenant_view_init(&vb, s.st.be, "ab", 2);
    pt_store sa = s.st, sb = s.st;
    sa.be = &va.be, sa.salt = pt_tenant_salt("a", 1);
    sb.be = &vb.be, sb.salt = pt_tenant_salt("ab", 2);
    pt_write_result res;
    ok(write_one(&sa, "up", "x", 1, &res) == 0 && res.index_rows > 0,
       "tenant a writes up, indexed");
    ok(write_one(&sb, "up", "x", 2, &res) == 0 && res.index_rows > 0,
       "tenant ab writes the same series: indexed again (the shared cache keeps tenants apart)");
    ok(write_one(&s.st, "up", "x", 5, &res) == 0 && res.index_rows > 0,
       "the store without tenancy writes it too: indexed again");
    int n;
    ok(read_one(&sa, "up", &n) == 1 && n == 1, "tenant a reads 1");
    ok(read_one(&sb, "up", &n) == 2 && n == 1, "tenant ab reads 2");
    ok(read_one(&s.st, "up", &n) == 5 && n == 1, "without tenancy: 5");
    ok(write_one(&sa, "only_a", "x", 1, &res) == 0, "tenant a writes only_a");
    read_one(&sb, "only_a", &n);
    ok(n == 0, "tenant ab does not see only_a");
    read_one(&s.st, "only_a", &n);
    ok(n == 0, "nor does the store without tenancy");

    pt_row_range all = {{(const uint8_t *)"", 0}, {0}};
    for (int t = 0; t < PT_TABLE_COUNT; t++) {
        rows ra = {0}, rall = {0};
        pt_scan sc = {.table = (pt_table)t, .ranges = &all, .nranges = 1};
        pt_backend_scan(&va.be, &sc, on_row, &ra);
        pt_backend_scan(s.st.be, &sc, on_row, &rall);
        ok(ra.n > 0 && ra.first != PT_TENANT_MARK, "table %d: a's view hands back its keys without "
           "the prefix", t);
        ok(rall.bad == 0, "table %d: no stored key holds a NUL byte", t);
    }
    /* Stored streams (streamed reads) come through the view without the prefix too. */
    {
        srows ss = {{0}, 0};
        pt_stream_to to = {on_stream_row, &ss};
        pt_scan sc = {.table = PT_TABLE_POINTS, .ranges = &all, .nranges = 1, .stream = &to};
        int rv = pt_embedded_flush(&s.emb);
        if (rv == 0)
            rv = pt_backend_scan(&va.be, &sc, on_row, &ss.r);
        ok(rv == 0 && ss.streams == 2 && ss.r.n == 2 && ss.r.first != PT_TENANT_MARK,
           "a's view hands back its 2 stored streams without the prefix (%zu streams, %zu rows)",
           ss.streams, ss.r.n);
    }
    /* The longest id and a series whose key alone would be just under 4 KiB: with the
     * room tenancy keeps, it is hashed and the prefixed key stays within Bigtable's cap. */
    char longid[PT_TENANT_MAX + 1];
    memset(longid, 'z', PT_TENANT_MAX);
    longid[PT_TENANT_MAX] = '\0';
    pt_tenant_view vl;
    pt_tenant_view_init(&vl, s.st.be, longid, PT_TENANT_MAX);
    pt_store sl = s.st;
    sl.be = &vl.be, sl.salt = pt_tenant_salt(longid, PT_TENANT_MAX);
    sl.key_limit = PT_TENANT_KEY_LIMIT;
    static char big[4000];
    memset(big, 'v', sizeof(big) - 1);
    ok(write_one(&sl, "long_series", big, 7, &res) == 0 && res.samples_written == 1,
       "a 150-byte tenant writes a series of a 3999-byte label value");
    pt_arena ar;
    pt_arena_init(&ar, 0, 0);
    tmatch m = {PROMETHEUS__LABEL_MATCHER__TYPE__EQ, "job", big};
    Prometheus__ReadResponse resp;
    char msg[512];
    int rv = store_read(&sl, mk_read(&ar, T0 - 60000, T0 + 60000, &m, 1), &ar, NULL, &resp, msg,
                           sizeof(msg));
    ok(rv == 0 && resp.results[0]->n_timeseries == 1 &&
           resp.results[0]->timeseries[0]->samples[0]->value == 7,
       "it reads back by its long value");
    pt_arena_free(&ar);
    for (int t = 0; t < PT_TABLE_COUNT; t++) {
        rows r = {0};
        pt_scan sc = {.table = (pt_table)t, .ranges = &all, .nranges = 1};
        pt_backend_scan(s.st.be, &sc, on_row, &r);
        ok(r.longest <= PT_MAX_ROW_KEY && r.bad == 0,
           "table %d: the longest stored key is %zu bytes (cap %d), none holds NUL", t, r.longest,
           PT_MAX_ROW_KEY);
    }
    pt_label ls[2] = {{pt_slice_str("__name__"), pt_slice_str("long_series")},
                      {pt_slice_str("job"), pt_slice_str(big)}};
    pt_slice sid = {0};
    pt_arena_init(&ar, 0, 0);
    rv = pt_series_id(&ar, ls, 2, PT_MAX_ROW_KEY, &sid);
    ok(rv == 0 && PT_ROW_KEY_LEN(sid.n) <= PT_MAX_ROW_KEY &&
           PT_ROW_KEY_LEN(sid.n) + 2 + PT_TENANT_MAX > PT_MAX_ROW_KEY,
       "(without the room kept, that series' key is plain, %zu bytes, and would pass the cap "
       "with the prefix)", PT_ROW_KEY_LEN(sid.n));
    pt_arena_free(&ar);
    tstore_close(&s);
}

static void gate_and_rate(void)
{
    pt_tenant_limits lim = {.max_series = 2, .max_samples_per_s = 10, .max_tenants = 2,
                            .metrics_tenants = 1, .track_max = 100, .bucket_ms = 86400000};
    pt_tenants *ts = pt_tenants_new(&lim);
    char msg[512];
    pt_tenant *a = pt_tenant_get(ts, "a", T0, msg, sizeof(msg));
    pt_tenant *b = pt_tenant_get(ts, "b", T0, msg, sizeof(msg));
    ok(a && b && a != b, "two tenants");
    ok(!pt_tenant_get(ts, "c", T0, msg, sizeof(msg)) && strstr(msg, "tenancy.max_tenants (2)"),
       "a third one past max_tenants while both are active: refused (%s)", msg);
    uint64_t h[3] = {11, 12, 13};
    uint8_t okv[3];
    ok(pt_tenant_gate(a, h, 3, okv, msg, sizeof(msg)) == 1 && okv[0] && okv[1] && !okv[2] &&
       strstr(msg, "tenant \"a\": limit tenancy.max_series (2 active series)"),
       "the third series of a is refused: %s", msg);
    ok(pt_tenant_gate(a, h, 2, okv, msg, sizeof(msg)) == 0, "its two active series still pass");
    ok(pt_tenant_gate(b, h, 2, okv, msg, sizeof(msg)) == 0, "b has its own count");
    ok(pt_tenant_take(a, 10, T0, msg, sizeof(msg)) == 1, "10 samples: one second's worth passes");
    ok(pt_tenant_take(a, 1, T0, msg, sizeof(msg)) == 0 &&
       strstr(msg, "tenant \"a\": limit tenancy.max_samples_per_second (10) exceeded"),
       "the next one at once: refused (%s)", msg);
    ok(pt_tenant_take(a, 1, T0 + 100, msg, sizeof(msg)) == 1, "100 ms later one more passes");
    ok(pt_tenant_take(b, 1000, T0, msg, sizeof(msg)) == 1,
       "a request over a second's worth passes on a full bucket");
    ok(pt_tenant_take(b, 1, T0 + 50000, msg, sizeof(msg)) == 0,
       "... and leaves a debt: 50 s later still refused");
    ok(pt_tenant_take(b, 1, T0 + 99100, msg, sizeof(msg)) == 1, "... paid after 99 s");
    pt_tenant_count(a, 5, 1);
    pt_tenant_count(b, 7, 0);
    pt_arena ar;
    pt_arena_init(&ar, 0, 0);
    const char *text;
    long n = pt_tenants_render(ts, &ar, &text);
    ok(n > 0 && strstr(text, "promtable_tenant_samples_accepted_total{tenant=\"a\"} 5\n") &&
       strstr(text, "promtable_tenant_samples_accepted_total{tenant=\"~other\"} 7\n") &&
       !strstr(text, "tenant=\"b\""),
       "metrics: a has its label value, b (past tenancy.metrics_tenants) is summed as ~other");
    ok(strstr(text, "promtable_tenant_active_series{tenant=\"a\"} 2\n") != NULL,
       "metrics: a has 2 active series");
    pt_arena_free(&ar);
    pt_tenant_put(ts, a);
    pt_tenant_put(ts, b);
    pt_tenant *c = pt_tenant_get(ts, "c", T0 + 86400000 + 1, msg, sizeof(msg));
    ok(c != NULL, "a tenant idle for a whole bucket makes room for a new one");
    pt_tenant_put(ts, c);
    pt_tenants_free(ts);
}

/* One request through the app's routes as the server would hand it over. */
static int dispatch(pt_app *app, int method, const char *path, const char *tenant, pt_slice body,
                    pt_arena *a, pt_resp *resp)
{
    memset(resp, 0, sizeof(*resp));
    pt_arena_init(a, 0, 0);
    pt_req req = {.method = method, .method_name = method == PT_M_POST ? "POST" : "GET",
                  .path = path, .query = "", .content_type = body.n ? "application/x-protobuf" : "",
                  .content_encoding = body.n ? "snappy" : "", .authorization = "",
                  .user_agent = "t", .remote_write_version = "0.1.0", .body = body.p,
                  .body_len = body.n, .proto = PT_PROTO_HTTP1, .arena = a, .tenant = tenant,
                  .tenant_headers = 1};
    pt_app_dispatch(app, &req, resp);
    return resp->status;
}

/* The series a SAMPLES answer holds in its one result, or -1 when it is no such answer. */
static long answer_series(const pt_resp *resp)
{
    pt_arena d;
    pt_arena_init(&d, 0, 0);
    pt_slice raw;
    char msg[256];
    long n = -1;
    if (resp->status == 200 &&
        pt_snappy_decode(resp->body, resp->body_len, 1 << 24, &d, &raw, msg, sizeof(msg)) == 0) {
        Prometheus__ReadResponse *rr = prometheus__read_response__unpack(NULL, raw.n, raw.p);
        if (rr && rr->n_results == 1)
            n = (long)rr->results[0]->n_timeseries;
        if (rr)
            prometheus__read_response__free_unpacked(rr, NULL);
    }
    pt_arena_free(&d);
    return n;
}

/* Reads never make a tenant: ids never written read as empty and leave
 * tenancy.max_tenants to the tenants that write. */
static void reads_make_no_tenant(void)
{
    tstore s;
    if (tstore_open(&s) != 0) {
        BAIL_OUT("cannot open store");
    }
    pt_log_set_level("error"); /* the 429 below would only clutter prove's output */
    pt_config cfg;
    pt_config_defaults(&cfg);
    pt_tenant_limits lim = {.max_tenants = 2, .metrics_tenants = 10, .track_max = 100,
                            .bucket_ms = 86400000};
    pt_app app = {.cfg = &cfg, .store = s.st, .tenants = pt_tenants_new(&lim)};
    app.lim.max_decoded = cfg.max_decoded_bytes;
    atomic_store(&app.ready, 1);
    pt_arena b, a;
    pt_arena_init(&b, 0, 0);
    pt_resp resp;
    const tmatch up[] = {{0, "__name__", "up"}};
    pt_slice read = mk_body(&b, &mk_read(&b, T0 - 60000, T0 + 60000, up, 1)->base);
    const tseries one[] = {{{"__name__", "up", "job", "a", NULL}, {T0}, {1}, 1}};
    pt_slice write = mk_body(&b, &mk_pb_write(&b, one, 1)->base);

    static const struct {
        const char *path, *empty;
    } gets[] = {{"/api/v1/labels", "\"data\":[]"},
                {"/api/v1/label/job/values", "\"data\":[]"},
                {"/api/v1/metadata", "\"data\":{}"}};
    int all = 1;
    char id[32];
    for (int i = 0; i < 20; i++) {
        snprintf(id, sizeof(id), "made-up-%d", i);
        size_t g = (size_t)i % 3;
        int st = dispatch(&app, PT_M_GET, gets[g].path, id, (pt_slice){0}, &a, &resp);
        int empty = st == 200 && resp.body_len < 200 &&
                    memmem(resp.body, resp.body_len, gets[g].empty, strlen(gets[g].empty));
        if (!empty)
            diag("%s for %s: %d %.*s", gets[g].path, id, st, (int)resp.body_len,
                 (const char *)resp.body);
        all &= empty;
        pt_arena_free(&a);
        dispatch(&app, PT_M_POST, "/api/v1/read", id, read, &a, &resp);
        all &= answer_series(&resp) == 0;
        pt_arena_free(&a);
    }
    ok(all, "20 made-up tenant ids: the browsing API and remote read answer 200, empty");
    const char *text;
    pt_arena_init(&a, 0, 0);
    ok(pt_tenants_render(app.tenants, &a, &text) > 0 && strstr(text, "promtable_tenants 0\n"),
       "... and none of them became a tenant");
    pt_arena_free(&a);
    is(dispatch(&app, PT_M_POST, "/api/v1/write", "real", write, &a, &resp), 204,
       "then a real tenant's first write (tenancy.max_tenants 2): 204");
    pt_arena_free(&a);
    is(dispatch(&app, PT_M_POST, "/api/v1/write", "real2", write, &a, &resp), 204,
       "a second tenant's write: 204");
    pt_arena_free(&a);
    dispatch(&app, PT_M_POST, "/api/v1/read", "real", read, &a, &resp);
    is(answer_series(&resp), 1, "the tenant reads its series back");
    pt_arena_free(&a);
    dispatch(&app, PT_M_POST, "/api/v1/read", "made-up-0", read, &a, &resp);
    is(answer_series(&resp), 0, "an id never written still reads as empty with the table full");
    pt_arena_free(&a);
    is(dispatch(&app, PT_M_POST, "/api/v1/write", "real3", write, &a, &resp), 429,
       "a third writer past tenancy.max_tenants 2: 429 (the limit holds for writes)");
    pt_arena_free(&a);
    pt_arena_free(&b);
    pt_tenants_free(app.tenants);
    pt_config_free(&cfg);
    tstore_close(&s);
}

int main(void)
{
    ids();
    views();
    gate_and_rate();
    reads_make_no_tenant();
    return done_testing();
}
