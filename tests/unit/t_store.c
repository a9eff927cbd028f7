/* The write and read paths over the embedded store (through the faulty wrapper). */
#include <math.h>

#include "bytes.h"
#include "faulty.h"
#include "metrics.h"
#include "embedded.h"
#include "store_helpers.h"
#include "tap.h"

static const int64_t T0 = 1700000000000; /* 2023-11-14 */

static Prometheus__ReadResponse *query(tstore *s, pt_arena *a, int64_t start, int64_t end,
                                       const tmatch *ms, size_t n, int *rv, char *msg)
{
    Prometheus__ReadResponse *resp = pt_arena_alloc(a, sizeof(*resp));
    *rv = store_read(&s->st, mk_read(a, start, end, ms, n), a, s->cancel, resp, msg, 512);
    return resp;
}

/* Number of series a selector returns (or -1 on error). */
static long count(tstore *s, const tmatch *ms, size_t n)
{
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    int rv;
    char msg[512];
    Prometheus__ReadResponse *r = query(s, &a, T0 - 3600000, T0 + 3600000, ms, n, &rv, msg);
    long c = rv ? -1 : (long)r->results[0]->n_timeseries;
    if (rv)
        diag("read failed: %s", msg);
    pt_arena_free(&a);
    return c;
}

static const char *label(const Prometheus__TimeSeries *ts, const char *name)
{
    static char buf[8192];
    for (size_t i = 0; i < ts->n_labels; i++)
        if (ts->labels[i]->name.len == strlen(name) &&
            memcmp(ts->labels[i]->name.data, name, strlen(name)) == 0) {
            memcpy(buf, ts->labels[i]->value.data, ts->labels[i]->value.len);
            buf[ts->labels[i]->value.len] = '\0';
            return buf;
        }
    return NULL;
}

static int longest_row(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)qual, (void)value;
    size_t *l = ud;
    if (row.n > *l)
        *l = row.n;
    return 0;
}

/* A 2.0 body (snappy): symbols "", "__name__", then the label names and values of one
 * series (name, value, ..., NULL) and one sample at T0. */
static pt_slice body_v2(pt_arena *a, const char *const *ls)
{
    size_t cap = 64, nl = 0;
    while (ls[2 * nl])
        cap += strlen(ls[2 * nl]) + strlen(ls[2 * nl + 1]) + 40, nl++;
    uint8_t *w = pt_arena_alloc(a, cap), *p = w, refs[64], *r = refs, series[96], *q = series;
    const char *syms[130] = {""};
    for (size_t i = 0; i < 2 * nl; i++)
        syms[i + 1] = ls[i];
    for (size_t i = 0; i < 2 * nl + 1; i++) {
        size_t n = strlen(syms[i]);
        *p++ = 4 << 3 | 2;
        p = pt_put_uvarint(p, n);
        memcpy(p, syms[i], n), p += n;
        if (i > 0)
            r = pt_put_uvarint(r, i);
    }
    *q++ = 1 << 3 | 2;
    q = pt_put_uvarint(q, (size_t)(r - refs));
    memcpy(q, refs, (size_t)(r - refs)), q += r - refs;
    uint8_t sample[] = {1 << 3 | 1, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 2 << 3 | 0};
    *q++ = 2 << 3 | 2;
    uint8_t *sl = q++;
    memcpy(q, sample, sizeof(sample)), q += sizeof(sample);
    q = pt_put_uvarint(q, (uint64_t)T0);
    *sl = (uint8_t)(q - sl - 1);
    *p++ = 5 << 3 | 2;
    p = pt_put_uvarint(p, (size_t)(q - series));
    memcpy(p, series, (size_t)(q - series)), p += q - series;
    pt_slice z = {0};
    pt_snappy_encode(w, (size_t)(p - w), a, &z);
    return z;
}

/* write.max_label_*: a series past a limit is refused naming the limit, the series and
 * the length, the request's other series stored; 1.0 and 2.0 bodies alike, through the
 * decoder. */
static void label_limits(void)
{
    tstore s;
    if (tstore_open(&s) != 0) {
        printf("Bail out! cannot open the embedded store\n");
        exit(1);
    }
    s.st.label_limits = (pt_label_limits){1024, 16384, 128};
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    pt_decode_limits dl = {256u << 20};
    char *huge = malloc((3 << 20) + 1), *name = malloc(1026), *val = malloc(16385);
    memset(huge, 'x', 3 << 20), huge[3 << 20] = '\0';
    memset(name, 'n', 1025), name[1025] = '\0';
    memset(val, 'v', 16384), val[16384] = '\0';
    static char names[129][8];
    tseries many = {{"__name__", "many"}, {T0}, {1}, 1};
    for (int i = 0; i < 10; i++) {
        snprintf(names[i], sizeof(names[i]), "l%03d", i);
        many.labels[2 + 2 * i] = names[i], many.labels[3 + 2 * i] = "1";
    }
    const struct {
        tseries ts;
        const char *want;
    } cases[] = {
        {{{"__name__", "big", "job", "a", "v", huge, NULL}, {T0}, {1}, 1},
         "invalid label set big{job=\"a\", v=\"xxxx"},
        {{{"__name__", "big", "job", "a", "v", huge, NULL}, {T0}, {1}, 1},
         "value of label \"v\" is 3145728 bytes long, more than "
         "write.max_label_value_length (16384)"},
        {{{"__name__", "long_name", name, "1", NULL}, {T0}, {1}, 1},
         "is 1025 bytes long, more than write.max_label_name_length (1024)"},
    };
    int version_ok[2] = {1, 1};
    for (int v = 1; v <= 2; v++)
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
            tseries two[2] = {cases[i].ts, {{"__name__", "fine", NULL}, {T0}, {2}, 1}};
            pt_slice body = v == 1 ? mk_body(&a, &mk_pb_write(&a, two, 2)->base)
                                   : body_v2(&a, cases[i].ts.labels);
            pt_wreq wr;
            char msg[256];
            pt_write_result res;
            int rv = pt_decode_write(body.p, body.n, &dl, &a, v, &wr, msg, sizeof(msg));
            if (rv == 0)
                rv = pt_store_write(&s.st, &wr, &a, &res);
            int good = rv == 0 && res.samples_rejected == 1 && res.entries_rejected == 1 &&
                       res.samples_written == (v == 1 ? 1u : 0u) && strstr(res.msg, cases[i].want);
            if (!good)
                diag("%d.0 case %zu: rv %d, written %zu, rejected %zu: %.300s", v, i, rv,
                     res.samples_written, res.samples_rejected, rv ? msg : res.msg);
            version_ok[v - 1] &= good;
        }
    ok(version_ok[0], "1.0: a 3 MiB label value and a 1025-byte name are refused naming the "
       "limit, the series and the length; the other series stored");
    ok(version_ok[1], "2.0: the same through the symbol table");

    pt_write_result res;
    tseries at[] = {{{"__name__", "at_limit", name + 1, val, NULL}, {T0}, {1}, 1}};
    int rv = pt_store_write(&s.st, mk_write(&a, at, 1), &a, &res);
    ok(rv == 0 && res.samples_written == 1 && res.samples_rejected == 0,
       "a 1024-byte name with a 16384-byte value is stored");
    s.st.label_limits.labels = 11;
    rv = pt_store_write(&s.st, mk_write(&a, &many, 1), &a, &res);
    ok(rv == 0 && res.samples_written == 1, "11 labels with write.max_labels_per_series 11: stored");
    s.st.label_limits.labels = 10;
    rv = pt_store_write(&s.st, mk_write(&a, &many, 1), &a, &res);
    ok(rv == 0 && res.samples_rejected == 1 &&
           strstr(res.msg, "11 labels, more than write.max_labels_per_series (10)"),
       "one more than write.max_labels_per_series: refused (%s)", res.msg);
    s.st.label_limits = (pt_label_limits){0, 0, 0};
    tseries big[] = {{{"__name__", "unlimited", "v", huge, NULL}, {T0}, {1}, 1}};
    rv = pt_store_write(&s.st, mk_write(&a, big, 1), &a, &res);
    ok(rv == 0 && res.samples_written == 1, "limits 0: no limit");
    free(huge), free(name), free(val);
    pt_arena_free(&a);
    tstore_close(&s);
}

/* Writes n series no read below selects: metric noise_<tag>, 4 labels each. */
static void write_noise(tstore *s, const char *tag, int n)
{
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    tseries *v = pt_arena_calloc(&a, (size_t)n * sizeof(*v));
    char *name = pt_arena_alloc(&a, 32);
    snprintf(name, 32, "noise_%s", tag);
    for (int i = 0; i < n; i++) {
        char *inst = pt_arena_alloc(&a, 16);
        snprintf(inst, 16, "n%d", i);
        v[i] = (tseries){{"__name__", name, "instance", inst, "job", "noise", "zone", "x", NULL},
                         {T0, T0 + 15000},
                         {1, 2},
                         2};
    }
    pt_write_result res;
    int rv = pt_store_write(&s->st, mk_write(&a, v, (size_t)n), &a, &res);
    ok(rv == 0 && res.samples_written == 2 * (size_t)n, "%d unrelated series written", n);
    pt_arena_free(&a);
}

/* Rows the storage visited to answer one read of ms. */
static uint64_t rows_visited(tstore *s, const tmatch *ms, size_t n, long *series)
{
    uint64_t before = s->st.stats->read_rows_scanned;
    *series = count(s, ms, n);
    return s->st.stats->read_rows_scanned - before;
}

/* A read costs what it returns: the rows it visits do not grow with unrelated series, with
 * the data in the head and after a flush. */
static void read_cost(tstore *s)
{
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    s->st.max_series = 1000;
    s->st.max_samples = 100000;
    tseries probe[] = {
        {{"__name__", "probe", "instance", "p1", "job", "probe-job", NULL}, {T0, T0 + 15000}, {1, 2}, 2},
        {{"__name__", "probe", "instance", "p2", "job", "probe-job", NULL}, {T0}, {3}, 1},
    };
    pt_write_result res;
    ok(pt_store_write(&s->st, mk_write(&a, probe, 2), &a, &res) == 0 && res.samples_written == 3,
       "probe series written");
    const tmatch by_name[] = {{0, "__name__", "probe"}};
    const tmatch by_label[] = {{0, "job", "probe-job"}, {2, "instance", "p.*"}};
    long n1, n2;
    uint64_t small_name = rows_visited(s, by_name, 1, &n1);
    uint64_t small_label = rows_visited(s, by_label, 2, &n2);
    /* Per series: its list row, its series row (a few steps to it), its data rows. */
    ok(n1 == 2 && n2 == 2 && small_name > 0 && small_name <= 16 && small_label <= 40,
       "a read of 2 series visits %llu and %llu rows (%ld, %ld series)", (unsigned long long)small_name,
       (unsigned long long)small_label, n1, n2);
    write_noise(s, "a", 3000);
    uint64_t big_name = rows_visited(s, by_name, 1, &n1);
    uint64_t big_label = rows_visited(s, by_label, 2, &n2);
    /* The regex's label now has 3000 more values: choosing the shortest source reads at
     * most a first slice (64 rows) of them, whatever their number. */
    ok(n1 == 2 && n2 == 2 && big_name == small_name && big_label <= small_label + 64,
       "with 3000 more series in the head, the same reads visit the same rows, or one slice "
       "more for a regex (%llu, %llu)",
       (unsigned long long)big_name, (unsigned long long)big_label);
    ok(pt_embedded_flush(&s->emb) == 0, "flushed");
    write_noise(s, "b", 3000);
    uint64_t f_name = rows_visited(s, by_name, 1, &n1);
    uint64_t f_label = rows_visited(s, by_label, 2, &n2);
    ok(n1 == 2 && n2 == 2 && f_name == small_name && f_label == big_label,
       "flushed, with 6000 more series, still the same rows (%llu, %llu)",
       (unsigned long long)f_name, (unsigned long long)f_label);

    /* A name with 3000 series, narrowed by an instance: the instance's short list is the
     * one read, found without reading the name's whole list. */
    tseries *wide = pt_arena_calloc(&a, 3000 * sizeof(*wide));
    for (int i = 0; i < 3000; i++) {
        char *inst = pt_arena_alloc(&a, 16);
        snprintf(inst, 16, "w%d", i);
        wide[i] = (tseries){{"__name__", "probe", "instance", inst, "job", "wide", NULL}, {T0}, {1}, 1};
    }
    ok(pt_store_write(&s->st, mk_write(&a, wide, 3000), &a, &res) == 0 &&
           res.samples_written == 3000,
       "3000 more series of the probe metric");
    const tmatch narrow[] = {{0, "__name__", "probe"}, {0, "instance", "p1"}};
    uint64_t v_narrow = rows_visited(s, narrow, 2, &n1);
    ok(n1 == 1 && v_narrow < 300, "name and instance: 1 series for %llu rows visited, not 3000",
       (unsigned long long)v_narrow);
    s->st.max_series = 10000;
    uint64_t v_name = rows_visited(s, by_name, 1, &n1);
    ok(n1 == 3002 && v_name > 3000, "the name alone reads its whole list (%llu rows)",
       (unsigned long long)v_name);
    pt_arena_free(&a);
}

/* A regex a value makes backtrack exponentially: an error for =~ and !~ (a non-match
 * would make !~ select the series), on the values rows and in the last filter alike; a
 * request past read.max_matchers is refused before anything is compiled. */
static void regex_limits(tstore *s)
{
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    pt_write_result res;
    const tseries ps[] = {
        {{"__name__", "patho", "v", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa1c", NULL}, {T0}, {1}, 1},
        {{"__name__", "patho", "v", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa2c", NULL}, {T0}, {1}, 1},
        {{"__name__", "patho", "v", "ac", NULL}, {T0}, {1}, 1},
    };
    ok(pt_store_write(&s->st, mk_write(&a, ps, 3), &a, &res) == 0, "pathological values written");
    pt_arena_free(&a);
    s->st.regex_match_limit = 100000;
    static const struct {
        tmatch m[2];
        size_t n;
        const char *say, *what;
    } cases[] = {
        {{{2, "v", "(a|a)*c"}}, 1, "v=~\"(a|a)*c\"", "=~ alone (the values rows)"},
        {{{0, "__name__", "patho"}, {2, "v", "(a|a)*c"}},
         2,
         "v=~\"(a|a)*c\"",
         "=~ after a name (the last filter)"},
        {{{0, "__name__", "patho"}, {3, "v", "(a|a)*c"}}, 2, "v!~\"(a|a)*c\"", "!~"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        pt_arena_init(&a, 0, 0);
        int rv;
        char msg[512] = "";
        query(s, &a, T0 - 3600000, T0 + 3600000, cases[i].m, cases[i].n, &rv, msg);
        ok(rv == PT_EREGEXLIMIT && pt_error_http_status(rv) == 422 && strstr(msg, cases[i].say) &&
               strstr(msg, "read.regex_match_limit = 100000"),
           "%s: the match limit is a 422 naming it (%d: %s)", cases[i].what, rv, msg);
        pt_arena_free(&a);
    }
    const tmatch fine[] = {{0, "__name__", "patho"}, {2, "v", "a+1c"}};
    is(count(s, fine, 2), 1, "a regex within the limits selects as before");
    s->st.regex_match_limit = 0;

    s->st.max_matchers = 2;
    const tmatch three[] = {{0, "__name__", "patho"}, {2, "v", "a.*"}, {1, "v", "x"}};
    pt_arena_init(&a, 0, 0);
    int rv;
    char msg[512] = "";
    query(s, &a, T0 - 3600000, T0 + 3600000, three, 3, &rv, msg);
    ok(rv == PT_EBADREQ && strstr(msg, "read.max_matchers"),
       "3 matchers past read.max_matchers = 2: 400 naming it (%s)", msg);
    pt_arena_free(&a);
    is(count(s, fine, 2), 1, "2 matchers: within it");
    s->st.max_matchers = 0;
}

/* The test data: 7 series, 9 samples; the metric up has 3 series. */
static char big[5001]; /* a 5000-byte label value */
static const tmatch up[] = {{0, "__name__", "up"}};

static int write_data(tstore *s, pt_arena *a, pt_write_result *res)
{
    memset(big, 'x', 5000);
    double stale;
    uint64_t stale_bits = 0x7ff0000000000002ULL;
    memcpy(&stale, &stale_bits, 8);
    tseries data[] = {
        {{"__name__", "up", "instance", "a:9100", "job", "node", NULL}, {T0, T0 + 15000}, {1, 0}, 2},
        {{"__name__", "up", "instance", "b:9100", "job", "node", NULL}, {T0}, {1}, 1},
        {{"__name__", "up", "instance", "c:9090", "job", "prom", NULL}, {T0}, {1}, 1},
        {{"__name__", "http_requests_total", "code", "200", "job", "prom", NULL}, {T0}, {5}, 1},
        {{"__name__", "http_requests_total", "code", "500", "job", "prom", "path", ",=@\\ \xc3\xbc", NULL},
         {T0}, {7}, 1},
        {{"__name__", "weird", "big", big, NULL}, {T0, T0 + 1}, {3, stale}, 2},
        {{"Zone", "eu", "__name__", "zoned", NULL}, {T0}, {1}, 1},
    };
    return pt_store_write(&s->st, mk_write(a, data, 7), a, res);
}

static void open_store(tstore *s)
{
    if (tstore_open(s) != 0) {
        printf("Bail out! cannot open the embedded store\n");
        exit(1);
    }
}

/* A new store holding the test data: what most cases read. */
static void open_with_data(tstore *s)
{
    open_store(s);
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    pt_write_result res;
    if (write_data(s, &a, &res) != 0 || res.samples_written != 9) {
        printf("Bail out! cannot write the test data\n");
        exit(1);
    }
    pt_arena_free(&a);
}

/* The test data: stored, and again through the index cache. */
static void writes(void)
{
    tstore s;
    open_store(&s);
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    pt_write_result res;
    int rv = write_data(&s, &a, &res);
    ok(rv == 0 && res.samples_rejected == 0, "a valid request is stored");
    is(res.samples_written, 9, "every sample written");
    ok(res.index_rows > 0, "first write creates index rows");

    rv = write_data(&s, &a, &res);
    ok(rv == 0 && res.index_rows == 0, "a repeated write writes no index rows (cache)");
    pt_arena_free(&a);
    tstore_close(&s);
}

/* Where a store counts: into the stats its opener gave, else into its own; a copy of a
 * store (a tenant's) counts with the store it was copied from. */
static void stats(void)
{
    tstore s1, s2;
    open_store(&s1);
    open_store(&s2);
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    pt_write_result res;
    ok(s1.st.stats && s2.st.stats && s1.st.stats != s2.st.stats,
       "stores opened without stats each count into their own");
    int rv = write_data(&s1, &a, &res);
    ok(rv == 0 && s1.st.stats->samples_received == 9 && s1.st.stats->series_received == 7 &&
           s1.st.stats->index_rows_written == res.index_rows && res.index_rows > 0,
       "a write counts samples, series and index rows into its store's stats");
    is(s2.st.stats->samples_received, 0, "... and nothing into another store's");

    tstore copy = s1; /* its st a copy of s1.st, as a tenant's store is of the shared one */
    rv = write_data(&copy, &a, &res);
    ok(rv == 0 && s1.st.stats->samples_received == 18, "a copy counts with its original");

    pt_store_stats given = {0};
    tstore s3 = s2;
    s3.st = (pt_store){.index_bucket_ms = 86400000, .max_series = 1000, .max_samples = 100000};
    ok(pt_store_open(&s3.st, &s2.faulty, &(pt_store_caches){.stats = &given}) == 0 &&
           s3.st.stats == &given && !s3.st.own_stats,
       "a store opened with stats counts there");
    rv = write_data(&s3, &a, &res);
    ok(rv == 0 && given.samples_received == 9 && s2.st.stats->samples_received == 0,
       "... its writes are counted in them");
    pt_store_close(&s3.st);
    ok(s3.st.stats == &given, "closing it leaves the caller's stats alone");
    pt_arena_free(&a);
    tstore_close(&s1);
    tstore_close(&s2);
}

/* Matchers. */
static void matchers(void)
{
    tstore s;
    open_with_data(&s);
    is(count(&s, up, 1), 3, "EQ on __name__");
    static const struct {
        tmatch m[2];
        size_t n;
        long want;
        const char *what;
    } cases[] = {
        {{{0, "__name__", "up"}, {0, "job", "node"}}, 2, 2, "EQ on name and label"},
        {{{0, "__name__", "up"}, {1, "job", "node"}}, 2, 1, "NEQ"},
        {{{0, "__name__", "up"}, {2, "instance", "[ab]:.*"}}, 2, 2, "RE"},
        {{{0, "__name__", "up"}, {2, "instance", "a"}}, 2, 0, "regexes are fully anchored"},
        {{{0, "__name__", "up"}, {3, "instance", "a.*"}}, 2, 2, "NRE"},
        {{{0, "job", "prom"}}, 1, 3, "selector without __name__ (postings)"},
        {{{2, "__name__", "up|http_.*"}}, 1, 5, "__name__ regex"},
        {{{0, "__name__", "http_requests_total"}, {0, "path", ""}}, 2, 1, "label=\"\" selects series without the label"},
        {{{0, "__name__", "http_requests_total"}, {1, "path", ""}}, 2, 1, "label!=\"\" selects series with the label"},
        {{{0, "__name__", "http_requests_total"}, {3, "path", "x"}}, 2, 2, "!~ includes series lacking the label"},
        {{{2, "instance", ".+:9100"}}, 1, 2, "regex-only selector without __name__"},
        {{{2, "__name__", ".+"}}, 1, 7, "every series"},
        {{{2, "job", ".*"}}, 1, 7, "only empty-matching matchers select all series"},
        /* Empty-value matchers, with and without __name__. */
        {{{0, "__name__", "http_requests_total"}, {2, "path", ""}}, 2, 1, "label=~\"\" selects series without the label"},
        {{{0, "__name__", "http_requests_total"}, {3, "path", ""}}, 2, 1, "label!~\"\" selects series with the label"},
        {{{0, "__name__", "up"}, {2, "instance", "a:9100|"}}, 2, 1, "a regex matching a value or empty"},
        {{{0, "job", "prom"}, {2, "path", ""}}, 2, 2, "label=~\"\" without __name__"},
        {{{0, "job", "prom"}, {3, "path", ""}}, 2, 1, "label!~\"\" without __name__"},
        {{{0, "job", "prom"}, {0, "code", ""}}, 2, 1, "label=\"\" without __name__"},
        {{{3, "path", ""}}, 1, 1, "a selector of just label!~\"\""},
        {{{0, "Zone", "eu"}}, 1, 1, "label name sorting before __name__"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        is(count(&s, cases[i].m, cases[i].n), cases[i].want, "%s", cases[i].what);
    tstore_close(&s);
}

/* Equality matchers are first checked on the escaped series id: values holding the
 * separators, prefixes of other values and names, a trailing backslash. */
static void separators(void)
{
    tstore s;
    open_with_data(&s);
    pt_write_result res;
    pt_arena b;
    pt_arena_init(&b, 0, 0);
    tseries tricky[] = {
        {{"__name__", "sep", "a", "x,b=1", NULL}, {T0}, {1}, 1},
        {{"__name__", "sep", "a", "x", "b", "1", NULL}, {T0}, {2}, 1},
        {{"__name__", "sep", "a", "x", "b", "10", NULL}, {T0}, {3}, 1},
        {{"__name__", "sep", "a", "x", "b_c", "1", NULL}, {T0}, {4}, 1},
        {{"__name__", "sep", "a", "v\\", "b", "1", NULL}, {T0}, {5}, 1},
        {{"__name__", "sepx", "a", "x", "b", "1", NULL}, {T0}, {6}, 1},
        {{"__name__", "sep", "a", "x=b", "b", "1", NULL}, {T0}, {7}, 1},
    };
    ok(pt_store_write(&s.st, mk_write(&b, tricky, 7), &b, &res) == 0 && res.samples_written == 7,
       "series with separators in values written");
    const tmatch m1[] = {{0, "__name__", "sep"}, {0, "a", "x"}, {0, "b", "1"}};
    is(count(&s, m1, 3), 1, "a=x,b=1 is not read into a=\"x,b=1\" nor b=10 nor b_c=1");
    const tmatch m2[] = {{0, "__name__", "sep"}, {0, "a", "x,b=1"}};
    is(count(&s, m2, 2), 1, "a=\"x,b=1\" finds only that series");
    const tmatch m3[] = {{0, "__name__", "sep"}, {0, "a", "v\\"}, {0, "b", "1"}};
    is(count(&s, m3, 3), 1, "a value ending in a backslash");
    const tmatch m4[] = {{0, "a", "x"}, {0, "b", "1"}};
    is(count(&s, m4, 2), 2, "without __name__: sep and sepx, not the metric's prefix");
    const tmatch m5[] = {{0, "b", "1"}, {0, "__name__", "sepx"}};
    is(count(&s, m5, 2), 1, "a metric whose name extends another's");
    const tmatch m6[] = {{0, "__name__", "sep"}, {0, "a", "x=b"}, {0, "b", "1"}};
    is(count(&s, m6, 3), 1, "a value holding '='");
    pt_arena_free(&b);
    tstore_close(&s);
}

/* A read whose client went away stops at its next storage call. */
static void cancelled_read(void)
{
    tstore s;
    open_with_data(&s);
    int rv;
    pt_arena b;
    pt_arena_init(&b, 0, 0);
    char msg[512] = "";
    atomic_int gone;
    atomic_init(&gone, 1);
    s.cancel = &gone;
    query(&s, &b, T0, T0, up, 1, &rv, msg);
    ok(rv == PT_ECANCELLED && strstr(msg, "went away"), "a cancelled read stops (%s)", msg);
    atomic_store(&gone, 0);
    query(&s, &b, T0, T0, up, 1, &rv, msg);
    ok(rv == 0, "the flag is looked at, not assumed");
    s.cancel = NULL;
    pt_arena_free(&b);
    tstore_close(&s);
}

/* read.timeout: a read whose storage calls take longer ends with a 503 naming it. */
static void read_timeout(void)
{
    tstore s;
    open_with_data(&s);
    int rv;
    pt_arena b;
    pt_arena_init(&b, 0, 0);
    char msg[512] = "";
    pt_faulty_plan slow = {.latency_ms = 40};
    pt_faulty_set(&s.faulty, &slow);
    s.st.read_timeout_ms = 30;
    query(&s, &b, T0, T0, up, 1, &rv, msg);
    ok(rv == PT_ETIMEOUT && pt_error_http_status(rv) == 503 && strstr(msg, "read.timeout"),
       "a read past read.timeout is a 503 naming it (%s)", msg);
    s.st.read_timeout_ms = 0;
    query(&s, &b, T0, T0, up, 1, &rv, msg);
    ok(rv == 0, "without a deadline the slow read completes");
    pt_faulty_set(&s.faulty, NULL);
    pt_arena_free(&b);
    tstore_close(&s);
}

/* Bad regex → 4xx error code. */
static void bad_regex(void)
{
    tstore s;
    open_with_data(&s);
    int rv;
    pt_arena b;
    pt_arena_init(&b, 0, 0);
    char msg[512] = "";
    const tmatch bad[] = {{2, "job", "(unclosed"}};
    query(&s, &b, T0, T0, bad, 1, &rv, msg);
    ok(rv == PT_EREGEX && strstr(msg, "(unclosed"), "invalid regex is a 400 naming it");
    const tmatch esc[] = {{2, "job", "x)|(.*"}};
    query(&s, &b, T0, T0, esc, 1, &rv, msg);
    ok(rv == PT_EREGEX, "a regex cannot escape its anchoring group");
    pt_arena_free(&b);
    tstore_close(&s);
}

/* Contents: sorted series, sorted samples, exact values and labels. */
static void contents(void)
{
    tstore s;
    open_with_data(&s);
    int rv;
    pt_arena b;
    pt_arena_init(&b, 0, 0);
    char msg[512];
    Prometheus__ReadResponse *r = query(&s, &b, T0 - 1000, T0 + 60000, up, 1, &rv, msg);
    Prometheus__QueryResult *qr = r->results[0];
    ok(rv == 0 && qr->n_timeseries == 3, "read up");
    ok(strcmp(label(qr->timeseries[0], "instance"), "a:9100") == 0 &&
           strcmp(label(qr->timeseries[2], "instance"), "c:9090") == 0,
       "series sorted by labels");
    ok(qr->timeseries[0]->n_samples == 2 && qr->timeseries[0]->samples[0]->timestamp == T0 &&
           qr->timeseries[0]->samples[1]->timestamp == T0 + 15000 &&
           qr->timeseries[0]->samples[1]->value == 0,
       "samples in time order with their values");
    ok(qr->timeseries[0]->n_labels == 3 &&
           memcmp(qr->timeseries[0]->labels[0]->name.data, "__name__", 8) == 0,
       "labels sorted by name");

    r = query(&s, &b, T0 + 1, T0 + 15000, up, 1, &rv, msg);
    ok(rv == 0 && r->results[0]->n_timeseries == 1 &&
           r->results[0]->timeseries[0]->n_samples == 1,
       "time range is inclusive and excludes earlier samples; empty series are omitted");

    const tmatch w[] = {{0, "__name__", "weird"}};
    r = query(&s, &b, T0, T0 + 1, w, 1, &rv, msg);
    const Prometheus__TimeSeries *ts = r->results[0]->timeseries[0];
    uint64_t bits;
    memcpy(&bits, &ts->samples[1]->value, 8);
    ok(rv == 0 && bits == 0x7ff0000000000002ULL, "staleness marker read back bit-exact");
    ok(strlen(label(ts, "big")) == 5000, "5000-byte label value read back whole");

    const tmatch p[] = {{0, "path", ",=@\\ \xc3\xbc"}};
    r = query(&s, &b, T0, T0, p, 1, &rv, msg);
    ok(rv == 0 && r->results[0]->n_timeseries == 1 &&
           strcmp(label(r->results[0]->timeseries[0], "path"), ",=@\\ \xc3\xbc") == 0,
       "escaped characters and UTF-8 round-trip");
    pt_arena_free(&b);
    tstore_close(&s);
}

/* Long names and values: every index key stays within Bigtable's 4 KiB, and every
 * lookup path still finds the series. */
static void long_names(void)
{
    tstore s;
    open_with_data(&s);
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    pt_write_result res;
    int rv;
    static char bigname[5001], bigmetric[5001], mid[3901];
    memset(mid, 'y', 3900); /* plain sid near 4 KiB: postings must reference it by digest */
    memset(bigname, 'n', 5000);
    memset(bigmetric, 'm', 5000);
    tseries longs[] = {
        {{"__name__", bigmetric, "k2", "v", NULL}, {T0}, {1}, 1},
        {{"__name__", "nearly", "y", mid, NULL}, {T0}, {4}, 1},
        {{"__name__", "longname", bigname, "v", NULL}, {T0}, {2}, 1},
        {{"__name__", "weird2", "big", big, "z", big, NULL}, {T0}, {3}, 1},
    };
    rv = pt_store_write(&s.st, mk_write(&a, longs, 4), &a, &res);
    ok(rv == 0 && res.samples_rejected == 0, "series with 5000-byte metric, name and values stored");
    pt_row_range everything = {{(const uint8_t *)"\x01", 1}, {0}};
    pt_scan sc = {.table = PT_TABLE_INDEX, .ranges = &everything, .nranges = 1};
    size_t longest = 0;
    int scan_rv = pt_backend_scan(&s.faulty, &sc, longest_row, &longest);
    ok(scan_rv == 0 && longest > 3900 && longest <= 4096,
       "every index row key is at most 4096 bytes (longest %zu)", longest);
    const tmatch m1[] = {{0, "__name__", bigmetric}};
    is(count(&s, m1, 1), 1, "EQ on a 5000-byte metric name");
    const tmatch m2[] = {{0, bigname, "v"}};
    is(count(&s, m2, 1), 1, "EQ on a label with a 5000-byte name (postings)");
    const tmatch m3[] = {{0, "big", big}, {0, "__name__", "weird2"}};
    is(count(&s, m3, 2), 1, "EQ on a 5000-byte value");
    const tmatch m4[] = {{0, "z", big}};
    is(count(&s, m4, 1), 1, "EQ on a 5000-byte value without __name__ (digest posting)");
    const tmatch m5[] = {{2, "z", "x+"}};
    is(count(&s, m5, 1), 1, "regex over 5000-byte values (values listed from their cells)");
    const tmatch m6[] = {{2, "__name__", "m+"}};
    is(count(&s, m6, 1), 1, "regex on a 5000-byte metric name");
    const tmatch m7[] = {{0, "y", mid}};
    is(count(&s, m7, 1), 1, "posting that references a near-4 KiB sid by digest");
    const tmatch m8[] = {{0, "__name__", "nearly"}};
    is(count(&s, m8, 1), 1, "and the metric row of that series");
    pt_arena_free(&a);
    tstore_close(&s);
}

/* Same timestamp, new value: last write wins; old samples (backfill) accepted. */
static void backfill(void)
{
    tstore s;
    open_with_data(&s);
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    pt_write_result res;
    int rv;
    const tmatch up_node[] = {{0, "__name__", "up"}, {0, "job", "node"}};
    tseries upd[] = {{{"__name__", "up", "instance", "a:9100", "job", "node", NULL},
                      {T0, T0 - 86400000LL * 60}, {42, 9}, 2}};
    rv = pt_store_write(&s.st, mk_write(&a, upd, 1), &a, &res);
    ok(rv == 0 && res.samples_rejected == 0, "backfill 60 days back is accepted");
    pt_arena b;
    pt_arena_init(&b, 0, 0);
    char msg[512];
    Prometheus__ReadResponse *r = query(&s, &b, T0, T0, up_node, 2, &rv, msg);
    ok(rv == 0 && r->results[0]->timeseries[0]->samples[0]->value == 42,
       "same timestamp, new value: last write wins");
    r = query(&s, &b, T0 - 86400000LL * 61, T0 - 86400000LL * 59, up_node, 2, &rv, msg);
    ok(rv == 0 && r->results[0]->n_timeseries == 1 &&
           r->results[0]->timeseries[0]->samples[0]->value == 9,
       "backfilled sample is found through its own day's index");
    /* A query spanning several buckets merges them in order. */
    r = query(&s, &b, T0 - 86400000LL * 61, T0 + 60000, up_node, 2, &rv, msg);
    ok(rv == 0 && r->results[0]->timeseries[0]->n_samples == 3 &&
           r->results[0]->timeseries[0]->samples[0]->value == 9,
       "a query across buckets returns every sample in time order");
    pt_arena_free(&b);
    pt_arena_free(&a);
    tstore_close(&s);
}

/* Scans one read of ms over [start, end] made, and the series and samples it returned. */
static uint64_t scans_of(tstore *s, int64_t start, int64_t end, const tmatch *ms, size_t n,
                         size_t *series, size_t *samples)
{
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    pt_faulty_stats before, after;
    pt_faulty_get_stats(&s->faulty, &before);
    int rv;
    char msg[512];
    Prometheus__ReadResponse *r = query(s, &a, start, end, ms, n, &rv, msg);
    pt_faulty_get_stats(&s->faulty, &after);
    *series = *samples = 0;
    if (rv)
        diag("read failed: %s", msg);
    for (size_t i = 0; rv == 0 && i < r->results[0]->n_timeseries; i++) {
        const Prometheus__TimeSeries *ts = r->results[0]->timeseries[i];
        for (size_t j = 1; j < ts->n_samples; j++)
            if (ts->samples[j]->timestamp <= ts->samples[j - 1]->timestamp)
                rv = -1;
        (*series)++;
        *samples += ts->n_samples;
    }
    pt_arena_free(&a);
    return rv ? UINT64_MAX : after.scans - before.scans;
}

/* A window of all time (Grafana's "all", a client's end of year 2286) costs the buckets
 * the selected series have data in, not the 2,300 the window spans: by the metric's list
 * (its cells name the series) and by a label's list (through the series rows), in the head
 * and flushed. */
static void all_time(void)
{
    tstore s;
    open_store(&s);
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    const int64_t day = 86400000, old = T0 - 400 * day;
    tseries v[] = {
        {{"__name__", "era", "instance", "a", "job", "era-job", NULL}, {old, old + 15000, T0}, {1, 2, 3}, 3},
        {{"__name__", "era", "instance", "b", "job", "era-job", NULL}, {T0 - 60000, T0}, {4, 5}, 2},
    };
    pt_write_result res;
    ok(pt_store_write(&s.st, mk_write(&a, v, 2), &a, &res) == 0 && res.samples_written == 5,
       "two series written, one with samples 400 days apart");
    const tmatch by_name[] = {{0, "__name__", "era"}};
    const tmatch by_job[] = {{0, "job", "era-job"}};
    for (int flushed = 0; flushed < 2; flushed++) {
        size_t ns, nsm;
        uint64_t c = scans_of(&s, 0, PT_MAX_TIME_MS, by_name, 1, &ns, &nsm);
        ok(ns == 2 && nsm == 5 && c <= 8,
           "%s: all time by name: 2 series, 5 samples in order, %llu scans",
           flushed ? "flushed" : "head", (unsigned long long)c);
        c = scans_of(&s, 0, PT_MAX_TIME_MS, by_job, 1, &ns, &nsm);
        ok(ns == 2 && nsm == 5 && c <= 10,
           "%s: all time by a label: 2 series, 5 samples in order, %llu scans",
           flushed ? "flushed" : "head", (unsigned long long)c);
        c = scans_of(&s, old - day, T0 + day, by_job, 1, &ns, &nsm);
        ok(ns == 2 && nsm == 5 && c <= 10,
           "%s: the 402 days around them: every sample, %llu scans",
           flushed ? "flushed" : "head", (unsigned long long)c);
        c = scans_of(&s, T0 - 7 * day, T0 + day, by_job, 1, &ns, &nsm);
        ok(ns == 2 && nsm == 3, "%s: the last week (cached lists): its 3 samples",
           flushed ? "flushed" : "head");
        if (!flushed)
            ok(pt_embedded_flush(&s.emb) == 0, "flushed");
    }
    pt_arena_free(&a);
    tstore_close(&s);
}

/* Near the end of an index bucket the next one is indexed ahead, so the first scrape
 * of a new day writes no index rows. */
static void index_ahead(void)
{
    tstore s;
    open_store(&s);
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    pt_write_result res;
    int rv;
    int64_t day_end = (T0 / 86400000 + 3) * 86400000;
    tseries late[] = {{{"__name__", "late", NULL}, {day_end - 1}, {1}, 1}};
    rv = pt_store_write(&s.st, mk_write(&a, late, 1), &a, &res);
    /* Per day: the metric's list row, the series row, the values row of __name__. */
    ok(rv == 0 && res.index_rows == 6, "last ms of a day: this day and the next indexed");
    tseries next[] = {{{"__name__", "late", NULL}, {day_end + 15000}, {2}, 1}};
    rv = pt_store_write(&s.st, mk_write(&a, next, 1), &a, &res);
    ok(rv == 0 && res.index_rows == 0, "first scrape of the new day writes no index rows");
    tseries early[] = {{{"__name__", "late", NULL}, {day_end + 60000}, {3}, 1}};
    rv = pt_store_write(&s.st, mk_write(&a, early, 1), &a, &res);
    ok(rv == 0 && res.index_rows == 0, "early in a day nothing is indexed ahead");
    pt_arena_free(&a);
    tstore_close(&s);
}

/* Validation: precise messages, partial ingestion. */
static void validation(void)
{
    tstore s;
    open_store(&s);
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    pt_write_result res;
    int rv;
    tseries bad[] = {
        {{"job", "x", "__name__", "m", "job", "y", NULL}, {T0}, {1}, 1},
        {{"__name__", "m", "a", "1", "a", "2", NULL}, {T0}, {1}, 1},
        {{"__name__", "m", "", "1", NULL}, {T0}, {1}, 1},
        {{"__name__", "m", "a", "\xff", NULL}, {T0}, {1}, 1},
        {{"job", "x", NULL}, {T0}, {1}, 1},
        {{"__name__", "m", NULL}, {-5}, {1}, 1},
        {{"__name__", "good", NULL}, {T0}, {1}, 1},
    };
    const char *want[] = {"duplicate label name \"job\"", "duplicate label name \"a\"", "empty name",
                          "not valid UTF-8", "no metric name", "negative timestamp"};
    for (int i = 0; i < 6; i++) {
        rv = pt_store_write(&s.st, mk_write(&a, &bad[i], 1), &a, &res);
        ok(rv == 0 && res.samples_rejected == 1 && strstr(res.msg, want[i]),
           "rejected with \"%s\"", want[i]);
        if (!strstr(res.msg, want[i]))
            diag("message: %s", res.msg);
    }
    rv = pt_store_write(&s.st, mk_write(&a, bad, 7), &a, &res);
    ok(rv == 0 && res.samples_written == 1 && res.samples_rejected == 6,
       "the valid part of a mixed request is stored");
    tseries empty_val[] = {{{"__name__", "ev", "a", "", "b", "1", NULL}, {T0}, {1}, 1}};
    rv = pt_store_write(&s.st, mk_write(&a, empty_val, 1), &a, &res);
    const tmatch ev[] = {{0, "__name__", "ev"}, {0, "a", ""}};
    ok(rv == 0 && res.samples_rejected == 0 && count(&s, ev, 2) == 1,
       "an empty label value is the same as no label");
    pt_arena_free(&a);
    tstore_close(&s);
}

/* Outages: the error is retryable, the index cache is not poisoned, a retry succeeds. */
static void outages(void)
{
    tstore s;
    open_store(&s);
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    pt_write_result res;
    int rv;
    tseries fresh[] = {{{"__name__", "outage", "k", "v", NULL}, {T0}, {1}, 1}};
    pt_faulty_plan plan = {0};
    plan.write.fail_next = 1;
    plan.write.partial = 1;
    pt_faulty_set(&s.faulty, &plan);
    rv = pt_store_write(&s.st, mk_write(&a, fresh, 1), &a, &res);
    ok(PT_IS_RETRYABLE(rv), "a backend outage is a retryable error (503)");
    pt_faulty_set(&s.faulty, NULL);
    rv = pt_store_write(&s.st, mk_write(&a, fresh, 1), &a, &res);
    ok(rv == 0 && res.index_rows > 0, "the retry writes the index rows again");
    const tmatch o[] = {{0, "k", "v"}};
    is(count(&s, o, 1), 1, "after the retry the series is readable");

    plan = (pt_faulty_plan){0};
    plan.scan.fail_next = 1;
    pt_faulty_set(&s.faulty, &plan);
    is(count(&s, o, 1), -1, "a failing scan fails the read");
    pt_faulty_set(&s.faulty, NULL);
    pt_arena_free(&a);
    tstore_close(&s);
}

/* Limits. */
static void limits(void)
{
    tstore s;
    open_with_data(&s);
    s.st.max_series = 2;
    is(count(&s, up, 1), -1, "series limit exceeded is an error");
    s.st.max_series = 1000;
    s.st.max_samples = 3;
    is(count(&s, up, 1), -1, "sample limit exceeded is an error");
    s.st.max_samples = 100000;
    tstore_close(&s);
}

/* read_cost and regex_limits on a store that holds the test data as well. */
static void on_data(void (*fn)(tstore *s))
{
    tstore s;
    open_with_data(&s);
    fn(&s);
    tstore_close(&s);
}

int main(void)
{
    label_limits();
    writes();
    stats();
    matchers();
    separators();
    cancelled_read();
    read_timeout();
    bad_regex();
    contents();
    long_names();
    backfill();
    all_time();
    index_ahead();
    validation();
    outages();
    limits();
    on_data(read_cost);
    on_data(regex_limits);
    return done_testing();
}
