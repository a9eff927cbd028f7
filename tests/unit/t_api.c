/* The browsing API: the selector parser, timestamps and JSON strings as units; then the
 * endpoints over the embedded store (api_conformance.h; t_bigtable_conformance.c runs them
 * on the Bigtable emulator). */
#include "api.h"
#include "api_conformance.h"
#include "log.h"

typedef struct sel_case {
    const char *in;
    const char *want; /* the matchers as "name op value;...", or the error message */
} sel_case;

static const char *const ops[] = {"=", "!=", "=~", "!~"};

/* Parses in and describes the outcome as sel_case.want does. */
static void describe(const char *in, char *out, size_t cap)
{
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    pt_matcher *ms;
    size_t n;
    char msg[512];
    /* An exact-size copy without a NUL: the parser reads only its n bytes (an ASan run
     * catches any read past them, as fuzz_api once found in an error message). */
    size_t len = strlen(in);
    char *exact = malloc(len ? len : 1);
    memcpy(exact, in, len);
    int rv = pt_selector_parse(&a, exact, len, NULL, &ms, &n, msg, sizeof(msg));
    size_t o = 0;
    out[0] = '\0';
    if (rv != 0)
        snprintf(out, cap, "%s", msg);
    for (size_t i = 0; rv == 0 && i < n; i++)
        o += (size_t)snprintf(out + o, cap - o, "%.*s%s%.*s;", (int)ms[i].name.n,
                              (const char *)ms[i].name.p, ops[ms[i].type], (int)ms[i].value.n,
                              (const char *)ms[i].value.p);
    pt_selector_free(ms, n);
    pt_arena_free(&a);
    free(exact);
}

static void test_selectors(void)
{
    static const sel_case cases[] = {
        {"up", "__name__=up;"},
        {"  up  ", "__name__=up;"},
        {"job:rate5m:sum", "__name__=job:rate5m:sum;"},
        {"{job=\"a\",instance=~\"b.*\"}", "job=a;instance=~b.*;"},
        {"metric{a!=\"\",b!~\"x\"}", "__name__=metric;a!=;b!~x;"},
        {"m{ a = 'single' , b=~`raw\\d` , }", "__name__=m;a=single;b=~raw\\d;"},
        {"m{a=\"tab\\t nl\\n q\\\" bs\\\\ \\x41\\u00e9\\U0001F600 \\101\"}",
         "__name__=m;a=tab\t nl\n q\" bs\\ A\xc3\xa9\xf0\x9f\x98\x80 A;"},
        {"{\"my.metric\"}", "__name__=my.metric;"},
        {"{\"my.metric\", \"label with space\"=\"v\"}", "__name__=my.metric;label with space=v;"},
        {"{__name__=~\"up|down\"}", "__name__=~up|down;"},
        {"m{}", "__name__=m;"},
        {"", "parse error at char 1: expected a metric name or '{', found the end"},
        {"{}", "vector selector must contain at least one non-empty matcher"},
        {"{a=\"\"}", "vector selector must contain at least one non-empty matcher"},
        {"{a=~\".*\",b!=\"x\"}", "vector selector must contain at least one non-empty matcher"},
        {"up{", "parse error at char 4: expected a label name or '}', found the end"},
        {"up{a}", "parse error at char 5: expected one of =, !=, =~, !~, found \"}\""},
        {"up{a==\"b\"}",
         "parse error at char 5: expected one of =, !=, =~, !~, found \"==\"b\"}\""},
        {"up{a=b}", "parse error at char 6: expected a quoted label value, found \"b}\""},
        {"up{a=\"b\" c=\"d\"}", "parse error at char 10: expected ',' or '}', found \"c=\"d\"}\""},
        {"up{a=\"b}", "parse error at char 6: unterminated quoted string, found \"\"b}\""},
        {"up{a=\"b\\q\"}", "parse error at char 8: unknown escape sequence, found \"\\q\"}\""},
        {"up{a=\"\\xZZ\"}", "parse error at char 7: invalid escape sequence, found \"\\xZZ\"}\""},
        {"up{a=\"\\xff\"}",
         "parse error at char 6: string is not valid UTF-8, found \"\"\\xff\"}\""},
        {"up{a=\"\\uD800\"}",
         "parse error at char 7: invalid Unicode code point in escape sequence, found "
         "\"\\uD800\"}\""},
        {"up x", "parse error at char 4: unexpected text after the selector, found \"x\""},
        {"up{a=\"b\"} or down", "parse error at char 11: unexpected text after the selector, "
                                "found \"or down\""},
        {"1up", "parse error at char 1: expected a metric name or '{', found \"1up\""},
        {"up{__name__=\"x\"}", "metric name must not be set twice"},
        {"{\"a\",\"b\"}", "metric name must not be set twice"},
        {"up{a=~\"(\"}", "invalid regular expression \"(\": missing closing parenthesis"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char got[1024];
        describe(cases[i].in, got, sizeof(got));
        is_str(got, cases[i].want, "selector %s", cases[i].in);
    }
}

static void test_times(void)
{
    static const struct {
        const char *in;
        int ok;
        int64_t ms;
    } cases[] = {
        {"1700000000", 1, INT64_C(1700000000000)},
        {"1700000000.123", 1, INT64_C(1700000000123)},
        {"1700000000.1234", 1, INT64_C(1700000000123)},
        {"1.5e9", 1, INT64_C(1500000000000)},
        {"-1.5", 1, -1500},
        {"0", 1, 0},
        {"2023-11-14T22:13:20Z", 1, INT64_C(1700000000000)},
        {"2023-11-14T22:13:20.123456789Z", 1, INT64_C(1700000000123)},
        {"2023-11-14T23:13:20+01:00", 1, INT64_C(1700000000000)},
        {"2023-11-14T20:13:20.5-02:00", 1, INT64_C(1700000000500)},
        {"2024-02-29T00:00:00Z", 1, INT64_C(1709164800000)},
        {"1970-01-01T00:00:00Z", 1, 0},
        {"-292273086-05-16T16:47:06Z", 1, -((int64_t)1 << 52)},
        {"292277025-08-18T07:12:54.999999999Z", 1, (int64_t)1 << 52},
        {"", 0, 0},
        {"yesterday", 0, 0},
        {"NaN", 0, 0},
        {"Inf", 0, 0},
        {"0x10", 0, 0},
        {"1700000000 ", 0, 0},
        {"2023-02-29T00:00:00Z", 0, 0},
        {"2023-11-14T22:13:20", 0, 0},
        {"2023-11-14 22:13:20Z", 0, 0},
        {"2023-11-14T24:00:00Z", 0, 0},
        {"2023-11-14T22:13:20.Z", 0, 0},
        {"2023-11-14T22:13:20+0100", 0, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int64_t ms = -7;
        int rv = pt_api_time(cases[i].in, &ms);
        if (cases[i].ok)
            ok(rv == 0 && ms == cases[i].ms, "time \"%s\" = %lld (got %lld)", cases[i].in,
               (long long)cases[i].ms, (long long)ms);
        else
            ok(rv != 0, "time \"%s\" refused", cases[i].in);
    }
}

static void test_json(void)
{
    static const struct {
        const char *in;
        size_t n;
        const char *want;
    } cases[] = {
        {"plain", 5, "\"plain\""},
        {"", 0, "\"\""},
        {"q\"b\\s/", 6, "\"q\\\"b\\\\s/\""},
        {"\n\r\t\b\f", 5, "\"\\n\\r\\t\\b\\f\""},
        {"\x01\x1f\x7f", 3, "\"\\u0001\\u001f\\u007f\""},
        {"a\0b", 3, "\"a\\u0000b\""},
        {"\xc3\xa9\xe6\x97\xa5\xf0\x9f\x98\x80", 9, "\"\xc3\xa9\xe6\x97\xa5\xf0\x9f\x98\x80\""},
        {"a\xffz", 3, "\"a\xef\xbf\xbdz\""},
        {"\xc3", 1, "\"\xef\xbf\xbd\""},
        {"\xed\xa0\x80!", 4, "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd!\""},
        {"\xc3\xa9\"\xff", 4, "\"\xc3\xa9\\\"\xef\xbf\xbd\""},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        pt_buf b = PT_BUF_INIT(0);
        int rv = pt_json_str(&b, (pt_slice){(const uint8_t *)cases[i].in, cases[i].n});
        char got[256] = "";
        if (rv == 0 && b.len < sizeof(got))
            memcpy(got, b.p, b.len), got[b.len] = '\0';
        is_str(got, cases[i].want, "JSON string %zu", i);
        pt_buf_free(&b);
    }
    pt_buf small = PT_BUF_INIT(4);
    ok(pt_json_str(&small, PT_SLICE_LIT("too long")) == PT_ETOOLARGE,
       "JSON string past the buffer's ceiling: PT_ETOOLARGE");
    pt_buf_free(&small);
}

typedef struct meta_seen {
    int n;
    char text[256];
} meta_seen;

static int on_meta(void *ud, const pt_meta_entry *e)
{
    meta_seen *m = ud;
    m->n++;
    snprintf(m->text, sizeof(m->text), "%.*s %.*s %.*s %.*s", (int)e->family.n,
             (const char *)e->family.p, (int)e->type.n, (const char *)e->type.p,
             (int)e->help.n, (const char *)e->help.p, (int)e->unit.n, (const char *)e->unit.p);
    return 0;
}

/* Remote write 2.0 carries metadata per series: kept under the series' metric name; an
 * empty one (what a 2.0 sender puts on a series without metadata) adds nothing. */
static void test_v2_metadata(tstore *s)
{
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    static const tseries ts[] = {
        {{"__name__", "v2_bytes", "job", "a", NULL}, {1700000000000}, {1}, 1},
        {{"__name__", "v2_empty", "job", "a", NULL}, {1700000000000}, {2}, 1},
    };
    pt_wreq *wr = mk_write(&a, ts, 2);
    wr->version = 2;
    wr->series[0].has_meta = 1;
    wr->series[0].meta = (pt_wmeta){.type = 2, .help = pt_slice_str("Bytes in use."),
                                    .unit = pt_slice_str("bytes")};
    wr->series[1].has_meta = 1;
    pt_write_result res;
    int rv = pt_store_write(&s->st, wr, &a, &res);
    meta_seen m = {0}, e = {0};
    int r1 = pt_meta_scan(&s->st, pt_slice_str("v2_bytes"), on_meta, &m);
    int r2 = pt_meta_scan(&s->st, pt_slice_str("v2_empty"), on_meta, &e);
    ok(rv == 0 && res.samples_written == 2 && r1 == 0 && m.n == 1 &&
           strcmp(m.text, "v2_bytes gauge Bytes in use. bytes") == 0,
       "2.0 series metadata kept under the metric name: %s", m.text);
    ok(r2 == 0 && e.n == 0, "an empty 2.0 metadata adds no row (%d)", e.n);
    pt_arena_free(&a);
}

int main(void)
{
    pt_log_set_level("error");
    test_selectors();
    test_times();
    test_json();
    tstore s;
    if (tstore_open(&s) != 0) {
        printf("Bail out! cannot open store\n");
        return 1;
    }
    pt_api_conformance(&s.faulty, "embedded");
    test_v2_metadata(&s);
    tstore_close(&s);
    return done_testing();
}
